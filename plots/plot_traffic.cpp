// The HBM-traffic plot: from every registered step's closed-form ledger, bytes per head against N
// (log-log, N = Nk = 256 ... 32k), and the memory each step needs beyond Q, K, V and O.
//   make plot_traffic && ./plot_traffic [--d 128] [--out DIR]
// Writes DIR/traffic.png (no mask), DIR/traffic_causal.png (causal), DIR/memory.png (default: the
// repository's plots/) and the numbers behind them, DIR/data/traffic_model.csv. A new step appears
// here by registering; nothing to edit. Backward passes (step 08) are drawn dashed, one curve per
// schedule, with their fp32 atomics counted as traffic; a step that runs another step's forward
// adds no forward curve of its own.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "plotting.hpp"
#include "registry.hpp"
#include "runner.hpp"

using namespace fa;

namespace {

using plot::Curve;
using plot::Series;

void draw(const std::string& png, const std::string& title, const std::string& ylabel,
          const std::vector<std::pair<std::string, Series>>& series) {
  Gnuplot gp("gnuplot");
  plot::begin_png(gp, png);
  gp << "set title '" << plot::label(title) << "'\n"
     << "set logscale y 2\nset format y '2^{%L}'\n"
     << "set ylabel '" << ylabel << "'\nset key top left\nset grid\n"
     << "set linetype 9 lc rgb '#8c564b'\nset linetype 10 lc rgb '#000000'\n";  // more curves than gnuplot's 8 colours
  plot::n_axis(gp, 256, 32768);
  std::vector<Curve> curves;
  for (const auto& [name, s] : series)
    curves.push_back({name, name.find("backward") != std::string::npos ? "linespoints lw 2 pt 6 dt 2" : "linespoints lw 2 pt 7", s});
  plot::plot(gp, curves);
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
  std::ofstream csv(out + "/data/traffic_model.csv");
  csv << "step,variant,pass,N,d,causal,hbm_read_bytes,hbm_write_bytes,hbm_atomic_bytes,extra_memory_bytes\n";
  const std::string dd = std::to_string(d);
  for (bool causal : {false, true}) {
    std::vector<std::pair<std::string, Series>> traffic, memory;
    // One curve per step's forward (its default variant), and one per schedule of a backward.
    auto add = [&](const StepInfo& st, const StepOptions& opt, bool backward, const std::string& name) {
      Series t, m;
      for (int64_t n = 256; n <= 32768; n *= 2) {
        Shape s;
        s.N = s.Nk = n;
        s.d = d;
        s.causal = causal;
        const Ledger l = (backward ? st.backward_closed_form(s, opt) : st.closed_form(s, opt)).total();
        // Beyond Q, K, V and O: the step's workspace (S and P in step 01; P, dP, dS in a naive
        // backward) and L (4 bytes per row).
        const int64_t extra = l.workspace + 4 * n;
        t.emplace_back(double(n), double(l.hbm_read + l.hbm_write + l.hbm_atomic));
        m.emplace_back(double(n), double(extra));
        csv << st.id << "," << variant_name(opt) << "," << (backward ? "backward" : "forward") << "," << n << "," << d << ","
            << (causal ? 1 : 0) << "," << l.hbm_read << "," << l.hbm_write << "," << l.hbm_atomic << "," << extra << "\n";
      }
      traffic.emplace_back(name, t);
      memory.emplace_back(name, m);
    };
    for (const StepInfo* st : all_steps()) {
      const std::string name = "step " + st->id + ": " + st->slug;  // plot::label turns '_' into ' '
      if (st->forward_from.empty()) add(*st, st->default_options(), false, name);
      if (st->backward_closed_form)
        for (const StepOptions& opt : st->all_variants()) add(*st, opt, true, name + ", " + (opt.empty() ? std::string("") : opt.begin()->second));
    }
    Series floor;  // Q, K, V read once and O written once: what any exact attention must move
    for (int64_t n = 256; n <= 32768; n *= 2) floor.emplace_back(double(n), double(4 * n * d * 2));
    traffic.emplace_back("Q, K, V read once + O written once", floor);
    draw(out + (causal ? "/traffic_causal.png" : "/traffic.png"),
         std::string("HBM traffic per head (closed-form ledgers, d = ") + dd + ", fp16/bf16" + (causal ? ", causal)" : ")"),
         "bytes requested from HBM per head", traffic);
    if (!causal) draw(out + "/memory.png", "Memory beyond Q, K, V, O per head (d = " + dd + ")", "bytes", memory);
  }
  std::cout << "wrote " << out << "/traffic.png, traffic_causal.png, memory.png and data/traffic_model.csv\n";
  return 0;
}
