// The traffic plot: from every registered step's closed-form ledger, bytes requested from global
// memory (before L2; the ledger's gmem_read + gmem_write) per head against N
// (log-log, N = Nk = 256 ... 32k), and the memory each step needs beyond Q, K, V and O.
//   make plot_traffic && ./plot_traffic [--d 128] [--out DIR]
// Writes DIR/traffic.png (no mask), DIR/traffic_causal.png (causal), DIR/memory.png (default: the
// repository's plots/) and the numbers behind them, DIR/data/traffic_model.csv: rows for the plotted
// d first, then for d = 64 and 128 (the sweeps' head dimensions) where --d is another. A new step appears
// here by registering; nothing to edit. Backward passes (step 08) are one curve per schedule, with
// their fp32 atomics counted as traffic; a step that runs another step's forward adds no forward
// curve of its own. Every curve has its own colour, dash and point and a label at its right end;
// curves that coincide (within 0.5% at every N) are drawn once with one label naming them all.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "plotting.hpp"
#include "core/registry.hpp"
#include "harness/runner.hpp"

using namespace fa;

namespace {

using plot::Series;

// Each curve its own slot (the same step looks the same in all three PNGs); curves with the same
// bytes at every N (within 0.5%) are drawn once, labelled with all their steps.
void draw(const std::string& png, const std::string& title, const std::string& ylabel, const std::vector<plot::Line>& lines) {
  const plot::Styled st = plot::style_lines(lines);
  plot::Frame f;
  f.width = 1250, f.height = 680, f.left = 85, f.top = 45, f.bottom = 600;
  f.xlo = 256 * 25 / 32.0, f.xhi = 32768 * 41 / 32.0;
  // y: whole powers of two around the curves
  const auto [lo, hi] = plot::y_span(st.curves, 1.0);
  f.ylo = std::exp2(std::floor(std::log2(lo)) - 1), f.yhi = std::exp2(std::ceil(std::log2(hi)) + 1);
  f.fit_right(32768, f.width - 15, plot::end_label_room(st.labels));  // the labels after the last N fit
  const auto [key_w, key_h] = plot::key_size(st.curves);
  plot::clear_top_left(f, st.curves, key_w, key_h);  // the key where no curve passes
  Gnuplot gp("gnuplot");
  plot::begin_png(gp, png, f.width, f.height);
  gp << "set title '" << plot::label(title) << "'\n"
     << "set logscale y 2\nset format y '2^{%L}'\n"
     << "set ylabel '" << ylabel << "'\nset grid\n";
  plot::n_axis(gp, 256, 32768);
  f.apply(gp);
  gp << "set key inside top left Left reverse samplen 4 spacing 1.1 font ',9' opaque\n";  // the curves rise to the right
  plot::end_labels(gp, f, st.labels);
  plot::plot(gp, st.curves);
  gp << "set output\n";
}

}  // namespace

int main(int argc, char** argv) {
  int64_t d = 128;
  std::string out = FA_PLOTS_DIR;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--d" && i + 1 < argc) d = std::stoll(argv[++i]);
    else if (a == "--out" && i + 1 < argc) out = argv[++i];
    else {
      std::cerr << "usage: plot_traffic [--d 16|32|64|128] [--out DIR]\n";
      return 2;
    }
  }
  if (d != 16 && d != 32 && d != 64 && d != 128) {
    std::cerr << "plot_traffic: error: --d must be 16, 32, 64 or 128\n";
    return 2;
  }
  std::filesystem::create_directories(out + "/data");
  // One curve per step's forward (its default variant), and one per schedule of a backward; each
  // with its slot (one per step, whether or not it draws a forward, then the backward schedules).
  struct Curve {
    const StepInfo* st;
    StepOptions opt;
    bool backward;
    std::string tag, name;
    size_t slot;
  };
  std::vector<Curve> curves;
  const std::vector<const StepInfo*> steps = all_steps();
  size_t slot = 0, backward_slot = steps.size();
  for (const StepInfo* st : steps) {
    const std::string name = st->slug;  // plot::label turns '_' into ' '
    if (st->forward_from.empty()) curves.push_back({st, st->default_options(), false, st->id, name, slot});
    ++slot;
    if (st->backward_closed_form)
      for (const StepOptions& opt : st->all_variants()) {
        // The schedule's name: the flag's value ("fused", "naive"), or for a switch (off|on) its
        // name when on ("deterministic") and nothing when off.
        std::string schedule = opt.empty() ? std::string("") : opt.begin()->second;
        if (schedule == "off") schedule = "";
        else if (schedule == "on") schedule = opt.begin()->first;
        curves.push_back({st, opt, true, st->id + " bwd" + (schedule.empty() ? "" : " " + schedule),
                          "backward" + (schedule.empty() ? "" : ", " + schedule), backward_slot++});
      }
  }
  auto ledger_of = [](const Curve& c, int64_t n, int64_t hd, bool causal) {
    Shape s;
    s.N = s.Nk = n;
    s.d = hd;
    s.causal = causal;
    return (c.backward ? c.st->backward_closed_form(s, c.opt) : c.st->closed_form(s, c.opt)).total();
  };
  // Beyond Q, K, V and O: the step's workspace (S and P in step 01; P, dP, dS in a naive backward)
  // and L (4 bytes per row).
  auto extra_of = [](const Ledger& led, int64_t n) { return led.workspace + 4 * n; };

  // The CSV: the plotted d first, then the sweeps' head dimensions (64 and 128, FlashAttention's
  // benchmark's) it is not, so that a doc can set d against d (docs/03's io-complexity table).
  std::vector<int64_t> csv_ds{d};
  for (int64_t hd : {int64_t(64), int64_t(128)})
    if (hd != d) csv_ds.push_back(hd);
  std::ofstream csv(out + "/data/traffic_model.csv");
  csv << "step,variant,pass,N,d,causal,gmem_read_bytes,gmem_write_bytes,gmem_atomic_bytes,extra_memory_bytes\n";
  for (int64_t hd : csv_ds)
    for (bool causal : {false, true})
      for (const Curve& c : curves)
        for (int64_t n = 256; n <= 32768; n *= 2) {
          const Ledger led = ledger_of(c, n, hd, causal);
          csv << c.st->id << "," << variant_name(c.opt) << "," << (c.backward ? "backward" : "forward") << "," << n << "," << hd
              << "," << (causal ? 1 : 0) << "," << led.gmem_read << "," << led.gmem_write << "," << led.gmem_atomic << ","
              << extra_of(led, n) << "\n";
        }

  const std::string dd = std::to_string(d);
  for (bool causal : {false, true}) {
    std::vector<plot::Line> traffic, memory;
    for (const Curve& c : curves) {
      Series t, m;
      for (int64_t n = 256; n <= 32768; n *= 2) {
        const Ledger led = ledger_of(c, n, d, causal);
        t.emplace_back(double(n), double(led.gmem_read + led.gmem_write + led.gmem_atomic));
        m.emplace_back(double(n), double(extra_of(led, n)));
      }
      const std::string title = "step " + c.st->id + ": " + c.name;
      traffic.push_back({title, c.tag, c.name, t, c.slot});
      memory.push_back({title, c.tag, c.name, m, c.slot});
    }
    Series floor;  // Q, K, V read once and O written once: what any exact attention must move
    for (int64_t n = 256; n <= 32768; n *= 2) floor.emplace_back(double(n), double(4 * n * d * 2));
    traffic.push_back({"Q, K, V read once + O written once", "floor", "", floor, backward_slot});
    draw(out + (causal ? "/traffic_causal.png" : "/traffic.png"),
         std::string("Global-memory traffic per head (bytes requested, before L2; closed-form ledgers, d = ") + dd + ", fp16/bf16" + (causal ? ", causal)" : ")"),
         "bytes requested from global memory per head", traffic);
    if (!causal) draw(out + "/memory.png", "Memory beyond Q, K, V, O per head (d = " + dd + ")", "bytes", memory);
  }
  std::cout << "wrote " << out << "/traffic.png, traffic_causal.png, memory.png and data/traffic_model.csv\n";
  return 0;
}
