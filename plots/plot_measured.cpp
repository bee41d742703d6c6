// The measured plots: what the GPU sessions recorded in plots/data, beside the ledgers' model.
//   make plot_measured && ./plot_measured [--data DIR] [--out DIR] [--gpu TAG] [--d 128] [--peers flash,cudnn]
// Reads only the committed CSVs of one GPU (TAG as in session_TAG_stepNN.csv; the only one there
// unless --gpu says which):
//   session_TAG_stepNN.csv  the sweeps (one row per run)       -> measured_tflops*.png, measured_speedup.png
//   ncu_TAG_stepNN.csv      Nsight Compute's bytes per kernel   -> measured_traffic.png
//   peers_TAG_clock_early.csv  PyTorch SDPA's backends (fp16, N = 512 ... 16k, by kernel time: docs/profiling.md,
//                           "One clock")                        -> the dashed lines of measured_tflops*.png
//   traffic_model.csv       the closed-form ledgers (./plot_traffic) -> the ledger lines of measured_traffic.png
// and writes DIR/measured_traffic.png, measured_tflops.png, measured_tflops_causal.png and
// measured_speedup.png (default DIR: the repository's plots/). Every plotted number is a CSV value
// or a ratio of two; each plot's caption names the GPU, the files and the commits of its rows.
// A missing file or column is an error naming the file (exit 1), before anything is drawn.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "plotting.hpp"

namespace fs = std::filesystem;
using namespace fa::plot;

namespace {

const char* const kProgram = "plot_measured";
const std::string kDtype = "fp16";  // the dtype of the forward and backward sweeps plotted
const size_t kMaxKeyTitle = 60;    // a key right of the plot: longer entries of coinciding curves name only their steps

void note(const std::string& s) { std::cerr << kProgram << ": note: " << s << "\n"; }

std::string join(const std::set<std::string>& s, const std::string& sep = ", ") {
  std::string out;
  for (const auto& x : s) out += (out.empty() ? "" : sep) + x;
  return out;
}

// Where a plot's rows came from: the caption under it.
struct Provenance {
  std::set<std::string> gpus, dates, commits, files, cuda, torch;
  void add(const Table& t, size_t r, const std::string& gpu_col) {
    gpus.insert(t.str(r, gpu_col));
    dates.insert(t.str(r, "date"));
    commits.insert(t.str(r, "commit"));
    files.insert(fs::path(t.path()).filename().string());
    if (t.has("cuda")) cuda.insert(t.str(r, "cuda"));
    if (t.has("torch")) torch.insert(t.str(r, "torch"));
  }
  void add(const Provenance& p) {
    using P = std::pair<std::set<std::string>*, const std::set<std::string>*>;
    for (auto [to, from] : {P{&gpus, &p.gpus}, P{&dates, &p.dates}, P{&commits, &p.commits}, P{&files, &p.files},
                            P{&cuda, &p.cuda}, P{&torch, &p.torch}})
      to->insert(from->begin(), from->end());
  }
  std::string gpu() const { return join(gpus, " + "); }
  // Two lines: the GPU, software and dates; then the files and the commits.
  std::string caption() const {
    std::string s = "Measured on " + gpu();
    if (!cuda.empty()) s += ", CUDA " + join(cuda);
    if (!torch.empty()) s += ", PyTorch " + join(torch);
    if (!dates.empty()) s += ", " + (dates.size() == 1 ? *dates.begin() : *dates.begin() + " to " + *dates.rbegin());
    std::string f;
    // session_h200_step01.csv ... session_h200_step08.csv read as one pattern
    std::map<std::string, std::set<std::string>> groups;
    static const std::regex numbered(R"((.*_step)(\d\d)(\.csv))");
    for (const auto& name : files) {
      std::smatch m;
      if (std::regex_match(name, m, numbered)) groups[m[1].str() + "NN" + m[3].str()].insert(m[2]);
      else groups[name];
    }
    for (const auto& [g, steps] : groups)
      f += (f.empty() ? "" : ", ") + g + (steps.empty() ? "" : " (NN = " + join(steps, " ") + ")");
    return s + "\\n" + f + "; commits " + join(commits);
  }
};

// The caption at the bottom left of the canvas, as typed (no enhanced-text markup); y in screen
// coordinates (a canvas of fixed pixel layout passes its own, so that the caption stays under the key).
void caption(Gnuplot& gp, const Provenance& p, double y = 0.035) {
  std::string c = p.caption();
  std::string q;
  for (char ch : c) q += ch == '"' ? std::string("\\\"") : std::string(1, ch);
  gp << "set label 99 \"" << q << "\" at screen 0.01," << y << " left font ',9' noenhanced\n";
}

struct Step {
  std::string id;            // "01"
  Table session;             // session_TAG_stepNN.csv
  std::optional<Table> ncu;  // ncu_TAG_stepNN.csv, where there is one
  std::string variant;       // its default variant: the first in the file ("-" when it has none)
};

std::string step_title(const std::string& id, const std::string& variant) {
  return "step " + id + (variant == "-" ? "" : " " + variant);
}

int as_int(double v) { return int(std::llround(v)); }

// ------------------------------------------------------------------------------------------------
// Reading: every file and column the plots need, checked before anything is drawn.

const std::vector<std::string> kSessionCols = {"date", "commit", "cuda", "step", "variant", "backend", "device",
                                               "dtype", "B", "H", "N", "d", "causal", "pass", "ms", "tflops",
                                               "gmem_read_bytes", "gmem_write_bytes"};
const std::vector<std::string> kNcuCols = {"date", "commit", "gpu", "step", "variant", "B", "H", "N", "d", "causal",
                                           "kernel", "ledger_read", "ledger_write", "req_read", "req_write",
                                           "l2_read", "l2_write", "dram_read", "dram_write"};
const std::vector<std::string> kPeerCols = {"date", "commit", "gpu", "torch", "cuda", "backend", "dtype", "causal",
                                            "d", "N", "kernel_tflops", "bwd_kernel_tflops", "status"};
const std::vector<std::string> kModelCols = {"step", "pass", "N", "d", "causal", "gmem_read_bytes", "gmem_write_bytes"};

Table read_table(const fs::path& p, const std::vector<std::string>& cols) { return fa::plot::read_table(p.string(), cols); }

struct Data {
  std::string gpu_tag;
  std::vector<Step> steps;  // by step number
  Table peers, model;
};

Data load(const std::string& dir, std::string gpu_tag) {
  if (!fs::is_directory(dir)) throw Error(dir + ": no such directory (give the CSVs' folder with --data DIR)");
  static const std::regex session_re(R"(session_(\w+?)_step(\d\d)\.csv)");
  std::map<std::string, std::map<std::string, fs::path>> sessions;  // tag -> step -> file
  for (const auto& e : fs::directory_iterator(dir)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, session_re)) sessions[m[1]][m[2]] = e.path();
  }
  if (sessions.empty()) throw Error(dir + ": no session_<gpu>_stepNN.csv files");
  if (gpu_tag.empty()) {
    if (sessions.size() > 1) {
      std::set<std::string> tags;
      for (const auto& [t, _] : sessions) tags.insert(t);
      throw Error(dir + ": data of several GPUs (" + join(tags) + "); choose one with --gpu");
    }
    gpu_tag = sessions.begin()->first;
  }
  if (!sessions.count(gpu_tag)) throw Error(dir + ": no session_" + gpu_tag + "_stepNN.csv files");
  Data data{gpu_tag, {},
            read_table(fs::path(dir) / ("peers_" + gpu_tag + "_clock_early.csv"), kPeerCols),
            read_table(fs::path(dir) / "traffic_model.csv", kModelCols)};
  for (const auto& [id, path] : sessions[gpu_tag]) {
    Step s{id, read_table(path, kSessionCols), std::nullopt, ""};
    s.variant = s.session.str(0, "variant");
    const fs::path ncu = fs::path(dir) / ("ncu_" + gpu_tag + "_step" + id + ".csv");
    if (fs::exists(ncu)) s.ncu = read_table(ncu, kNcuCols);
    else note("no " + ncu.filename().string() + ": step " + id + " has no panel in measured_traffic.png");
    data.steps.push_back(std::move(s));
  }
  return data;
}

// ------------------------------------------------------------------------------------------------
// measured_traffic.png: one panel per step and variant with Nsight rows.

struct Run {  // one profiled run: its kernels summed, per head
  std::string date, commit;
  int n = 0;
  double ledger = 0, req = 0, l2 = 0, dram = 0;
  bool ledger_complete = true;  // every kernel has ledger columns (cuBLAS's kernels have none)
};

// Runs of one variant at d, no mask, by N (the latest date where a shape was profiled twice).
std::map<int, Run> ncu_runs(const Table& t, const std::string& variant, int d, Provenance& prov) {
  std::map<std::tuple<std::string, std::string, int, int, int>, Run> runs;  // date, commit, N, B, H
  for (size_t r = 0; r < t.size(); ++r) {
    if (t.str(r, "variant") != variant || as_int(t.num(r, "d")) != d || as_int(t.num(r, "causal")) != 0) continue;
    const int n = as_int(t.num(r, "N")), b = as_int(t.num(r, "B")), h = as_int(t.num(r, "H"));
    Run& run = runs[{t.str(r, "date"), t.str(r, "commit"), n, b, h}];
    const double bh = double(b) * h;
    run.date = t.str(r, "date");
    run.commit = t.str(r, "commit");
    run.n = n;
    if (t.str(r, "ledger_read").empty() || t.str(r, "ledger_write").empty()) run.ledger_complete = false;
    else run.ledger += (t.num(r, "ledger_read") + t.num(r, "ledger_write")) / bh;
    run.req += (t.num(r, "req_read") + t.num(r, "req_write")) / bh;
    run.l2 += (t.num(r, "l2_read") + t.num(r, "l2_write")) / bh;
    run.dram += (t.num(r, "dram_read") + t.num(r, "dram_write")) / bh;
    prov.add(t, r, "gpu");
  }
  std::map<int, Run> by_n;
  for (auto& [key, run] : runs) {
    auto it = by_n.find(run.n);
    if (it != by_n.end())
      note(t.path() + ": " + variant + " at N = " + std::to_string(run.n) + " profiled more than once; the latest is plotted");
    if (it == by_n.end() || it->second.date < run.date) by_n[run.n] = run;
  }
  return by_n;
}

// The closed-form ledger of a step (read + write bytes per head, no mask) by N, from traffic_model.csv.
std::map<int, double> model_of(const Table& m, const std::string& step, int d) {
  std::map<int, double> out;
  for (size_t r = 0; r < m.size(); ++r)
    if (m.str(r, "step") == step && m.str(r, "pass") == "forward" && as_int(m.num(r, "d")) == d &&
        as_int(m.num(r, "causal")) == 0)
      out[as_int(m.num(r, "N"))] = m.num(r, "gmem_read_bytes") + m.num(r, "gmem_write_bytes");
  return out;
}

bool same_bytes(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b)); }

// The ledger the session row of the same shape reported (its forward: gmem_read + gmem_write per head).
std::optional<double> session_ledger(const Table& s, const std::string& variant, int n, int d) {
  for (size_t r = 0; r < s.size(); ++r)
    if (s.str(r, "variant") == variant && as_int(s.num(r, "N")) == n && as_int(s.num(r, "d")) == d &&
        as_int(s.num(r, "causal")) == 0 && s.str(r, "dtype") == kDtype)
      return (s.num(r, "gmem_read_bytes") + s.num(r, "gmem_write_bytes")) / (s.num(r, "B") * s.num(r, "H"));
  return std::nullopt;
}

void draw_traffic(const Data& data, int d, const std::string& png) {
  struct Panel {
    std::string title;
    std::vector<Curve> curves;
  };
  // One key for all panels (drawn with the first): the styles, each panel's curves untitled.
  const Curve kLedgerModel{"ledger, closed form", "lines lw 2 lc rgb '#000000'", {}};
  const Curve kLedgerNcu{"ledger, from the Nsight rows", "lines lw 2 dt 2 lc rgb '#000000'", {}};
  const Curve kRequested{"requested by loads and stores (L1)", "points pt 7 ps 1.6 lc rgb '#1f77b4'", {}};
  const Curve kL2{"L2", "points pt 5 ps 1.3 lc rgb '#2ca02c'", {}};
  const Curve kDram{"DRAM (HBM)", "points pt 9 ps 1.6 lc rgb '#d62728'", {}};
  std::set<std::string> key_used;
  std::vector<Panel> panels;
  Provenance prov;
  int64_t n_lo = 0, n_hi = 0;
  for (size_t si = 0; si < data.steps.size(); ++si) {
    const Step& st = data.steps[si];
    if (!st.ncu) continue;
    std::vector<std::string> variants;  // in the file's order
    for (size_t r = 0; r < st.ncu->size(); ++r)
      if (std::find(variants.begin(), variants.end(), st.ncu->str(r, "variant")) == variants.end())
        variants.push_back(st.ncu->str(r, "variant"));
    const std::map<int, double> model = model_of(data.model, st.id, d);
    for (const std::string& v : variants) {
      Provenance p;
      const std::map<int, Run> runs = ncu_runs(*st.ncu, v, d, p);
      if (runs.empty()) continue;
      Series ledger, req, l2, dram;
      std::set<std::string> commits;
      bool complete = true;
      // The closed form covers this variant if it equals, at every profiled N, the ledger recorded
      // beside Nsight's bytes (or, where that is incomplete, beside the sweep's time).
      bool covered = !model.empty();
      for (const auto& [n, run] : runs) {
        req.emplace_back(n, run.req);
        l2.emplace_back(n, run.l2);
        dram.emplace_back(n, run.dram);
        commits.insert(run.commit);
        complete = complete && run.ledger_complete;
        if (run.ledger_complete) ledger.emplace_back(n, run.ledger);
        const auto m = model.find(n);
        const std::optional<double> recorded =
            run.ledger_complete ? std::optional<double>(run.ledger) : session_ledger(st.session, v, n, d);
        covered = covered && m != model.end() && recorded && same_bytes(m->second, *recorded);
        n_lo = n_lo ? std::min<int64_t>(n_lo, n) : n;
        n_hi = std::max<int64_t>(n_hi, n);
      }
      Curve ledger_curve = kLedgerModel;
      if (covered) {
        prov.files.insert(fs::path(data.model.path()).filename().string());
        ledger.clear();
        for (const auto& [n, bytes] : model) ledger.emplace_back(n, bytes);
      } else if (complete) {
        ledger_curve = kLedgerNcu;
      } else {
        ledger.clear();
        note(st.ncu->path() + ": " + v + ": no complete ledger columns and no matching model; no ledger line");
      }
      // A variant whose sweep times a backward: its Nsight run profiled that too.
      bool backward = false;
      if (st.session.has("bwd_tflops"))
        for (size_t r = 0; r < st.session.size(); ++r)
          backward = backward || (st.session.str(r, "variant") == v && !st.session.str(r, "bwd_tflops").empty());
      ledger_curve.data = ledger;
      if (!ledger.empty()) key_used.insert(ledger_curve.title);
      panels.push_back({step_title(st.id, v) + (backward ? ", forward + backward" : "") + " (" + join(commits) + ")",
                        {ledger_curve, {"", kRequested.style, req}, {"", kL2.style, l2}, {"", kDram.style, dram}}});
      panels.back().curves[0].title = "";
      prov.add(p);
    }
  }
  if (panels.empty()) throw Error("no ncu_" + data.gpu_tag + "_stepNN.csv rows at d = " + std::to_string(d) + " without mask");
  const int cols = panels.size() > 9 ? 4 : panels.size() > 4 ? 3 : int(panels.size());
  const int rows = int((panels.size() + cols - 1) / cols);
  std::vector<Curve> key;
  for (const Curve& c : {kLedgerModel, kLedgerNcu})
    if (key_used.count(c.title)) key.push_back(c);
  for (const Curve& c : {kRequested, kL2, kDram}) key.push_back(c);
  // Placed by hand (in pixels, from the top left): the title, the panels, one key for all of them
  // across the bottom, the caption under it.
  const int cell_w = 430, cell_h = 380, top = 50, bottom = 110, width = cell_w * cols, height = cell_h * rows + top + bottom;
  Gnuplot gp("gnuplot");
  auto box = [&](double x0, double y0, double x1, double y1) {  // a plot's border, in pixels
    gp << "set lmargin at screen " << x0 / width << "\nset rmargin at screen " << x1 / width
       << "\nset tmargin at screen " << 1 - y0 / height << "\nset bmargin at screen " << 1 - y1 / height << "\n";
  };
  begin_png(gp, png, width, height);
  gp << "set multiplot title '"
     << label("Bytes per head, measured by Nsight Compute against the ledger (d = " + std::to_string(d) +
              ", no mask, " + prov.gpu() + ")")
     << "' font ',14'\n";
  caption(gp, prov, 35.0 / height);  // 35 px up: under the key, whatever the number of rows
  gp << "set logscale xy 10\nset format y '%.0s %cB'\nset grid\nset xlabel 'N' offset 0,0.5\nunset key\n";
  const double x_lo = n_lo / 2.0, x_hi = n_hi * 2.0;
  gp << "set logscale x 2\nset xtics (";
  for (int64_t n = n_lo; n <= n_hi; n *= 2) gp << (n == n_lo ? "" : ", ") << n;
  gp << ")\nset xrange [" << x_lo << ":" << x_hi << "]\n";
  for (size_t i = 0; i < panels.size(); ++i) {
    const Panel& p = panels[i];
    const double x = double(i % cols) * cell_w, y = top + double(i / cols) * cell_h;
    box(x + 65, y + 30, x + cell_w - 15, y + cell_h - 62);
    // Room around the points: the smallest and largest plotted value within the x range, 2x either side.
    double lo = 0, hi = 0;
    for (const Curve& c : p.curves)
      for (const auto& [px, py] : c.data)
        if (px >= x_lo && px <= x_hi && py > 0) lo = lo > 0 ? std::min(lo, py) : py, hi = std::max(hi, py);
    gp << "set title '" << label(p.title) << "' font ',11'\nset yrange [" << lo / 2 << ":"
       << hi * 2 << "]\n";
    plot(gp, p.curves);
    gp << "unset label 99\n";  // the caption once
  }
  // The key: a plot with nothing but its key, across the bottom.
  box(0.05 * width, height - bottom + 15, 0.95 * width, height - 50);
  gp << "unset logscale\nunset title\nunset xlabel\nunset border\nunset tics\nunset grid\n"
     << "set key center center horizontal maxrows 1 font ',11' width 2\nset yrange [0:1]\n";
  plot(gp, {}, key);
  gp << "unset multiplot\nset output\n";
}

// ------------------------------------------------------------------------------------------------
// measured_tflops.png, measured_tflops_causal.png: each step's default variant, PyTorch's backends.

// Rows of a sweep at (variant, fp16, d, causal) that ran on the GPU and passed, by N.
std::vector<size_t> sweep_rows(const Table& t, const std::string& variant, int d, int causal) {
  std::map<int, size_t> by_n;
  for (size_t r = 0; r < t.size(); ++r)
    if (t.str(r, "variant") == variant && t.str(r, "dtype") == kDtype && t.str(r, "backend") == "gpu" &&
        as_int(t.num(r, "d")) == d && as_int(t.num(r, "causal")) == causal && t.num(r, "pass") == 1) {
      const int n = as_int(t.num(r, "N"));
      if (by_n.count(n)) note(t.path() + ": " + variant + " at N = " + std::to_string(n) + " twice; the later row is plotted");
      by_n[n] = r;
    }
  std::vector<size_t> out;
  for (const auto& [n, r] : by_n) out.push_back(r);
  return out;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) out.push_back(x);
  return out;
}

// The style slot (plotting.hpp) of every curve a measured plot draws, the same in all of them:
// each step's default variant in step order, then the first step's other variants (the baselines
// of measured_speedup.png), then each step's backward, then the peers' forward and backward.
// (plotting.hpp's table has kStyleSlots of them; past it they repeat.)
class Slots {
 public:
  Slots(const Data& data, const std::vector<std::string>& peers) {
    for (const Step& st : data.steps) add("fwd " + st.id + " " + st.variant);
    const Step& base = data.steps.front();
    for (size_t r = 0; r < base.session.size(); ++r) add("fwd " + base.id + " " + base.session.str(r, "variant"));
    for (const Step& st : data.steps)  // only the steps that time a backward: the table is not endless
      for (size_t r = 0; r < st.session.size(); ++r)
        if (st.session.has("bwd_tflops") && !st.session.str(r, "bwd_tflops").empty()) {
          add("bwd " + st.id);
          break;
        }
    for (const std::string& p : peers) add("peer " + p + " fwd"), add("peer " + p + " bwd");
  }
  size_t operator()(const std::string& key) const {
    const auto it = at_.find(key);
    return it == at_.end() ? at_.size() : it->second;
  }

 private:
  void add(const std::string& key) { at_.emplace(key, at_.size()); }
  std::map<std::string, size_t> at_;
};

// A frame for a plot of one curve per step with the key right of it and end labels between:
// x the N axis from n_lo to n_hi, y (log) around the curves.
Frame frame_for(const Styled& st, int width, int height, double top, double bottom, int64_t n_lo, int64_t n_hi,
                double key_w) {
  Frame f;
  f.width = width, f.height = height, f.left = 90, f.top = top, f.bottom = bottom;
  f.xlo = n_lo * 25 / 32.0, f.xhi = n_hi * 41 / 32.0;
  std::tie(f.ylo, f.yhi) = y_span(st.curves, 1.4);
  f.fit_right(double(n_hi), width - key_w - 10, end_label_room(st.labels));
  return f;
}

void draw_tflops(const Data& data, int d, int causal, const std::vector<std::string>& peers, const Slots& slot,
                 const std::string& png) {
  std::vector<Line> fwd_lines, bwd_lines, peer_lines;
  Provenance prov;
  int64_t n_lo = 0, n_hi = 0;
  auto span = [&](double n) {
    n_lo = n_lo ? std::min<int64_t>(n_lo, int64_t(n)) : int64_t(n);
    n_hi = std::max<int64_t>(n_hi, int64_t(n));
  };
  for (const Step& st : data.steps) {
    const Table& t = st.session;
    Series fwd, bwd;
    std::set<std::string> commits;
    for (size_t r : sweep_rows(t, st.variant, d, causal)) {
      fwd.emplace_back(t.num(r, "N"), t.num(r, "tflops"));
      span(t.num(r, "N"));
      commits.insert(t.str(r, "commit"));
      prov.add(t, r, "device");
      const bool bwd_ok = t.has("bwd_tflops") && !t.str(r, "bwd_tflops").empty() &&
                          (!t.has("bwd_pass") || t.str(r, "bwd_pass") == "1");
      if (bwd_ok) bwd.emplace_back(t.num(r, "N"), t.num(r, "bwd_tflops"));
    }
    if (fwd.empty()) note(t.path() + ": no passing " + kDtype + " rows of " + st.variant + " at d = " + std::to_string(d) +
                          ", causal = " + std::to_string(causal));
    const std::string at = "(" + join(commits) + ")", v = st.variant == "-" ? "" : st.variant + " ";
    fwd_lines.push_back({step_title(st.id, st.variant) + " " + at, st.id, v + at, fwd, slot("fwd " + st.id + " " + st.variant)});
    if (!bwd.empty())
      bwd_lines.push_back({step_title(st.id, st.variant) + " backward " + at, st.id + " bwd", v + "backward " + at, bwd,
                           slot("bwd " + st.id)});
  }
  const Table& p = data.peers;
  for (const std::string& peer : peers) {
    Series fwd, bwd;
    for (size_t r = 0; r < p.size(); ++r)
      if (p.str(r, "backend") == peer && p.str(r, "dtype") == kDtype && as_int(p.num(r, "d")) == d &&
          as_int(p.num(r, "causal")) == causal && p.str(r, "status") == "ok") {
        fwd.emplace_back(p.num(r, "N"), p.num(r, "kernel_tflops"));
        bwd.emplace_back(p.num(r, "N"), p.num(r, "bwd_kernel_tflops"));
        span(p.num(r, "N"));
        prov.add(p, r, "gpu");
      }
    if (fwd.empty())
      throw Error(p.path() + ": no rows with backend " + peer + ", dtype " + kDtype + ", d = " + std::to_string(d) +
                  ", causal = " + std::to_string(causal) + " and status ok");
    std::sort(fwd.begin(), fwd.end());
    std::sort(bwd.begin(), bwd.end());
    peer_lines.push_back({"PyTorch SDPA " + peer + " forward", peer + " fwd", "", fwd, slot("peer " + peer + " fwd"), false});
    peer_lines.push_back({"PyTorch SDPA " + peer + " backward", peer + " bwd", "", bwd, slot("peer " + peer + " bwd"), false});
  }
  if (n_hi == 0) throw Error("no session or peer rows at d = " + std::to_string(d));
  std::vector<Line> lines = fwd_lines;
  lines.insert(lines.end(), bwd_lines.begin(), bwd_lines.end());
  lines.insert(lines.end(), peer_lines.begin(), peer_lines.end());
  const Styled st = style_lines(lines, kMaxKeyTitle);  // curves that agree within 0.5% at every N: drawn once
  const int width = 1300, height = 720;
  const double key_w = key_size(st.curves).first;
  const Frame f = frame_for(st, width, height, 45, height - 120, n_lo, n_hi, key_w);
  Gnuplot gp("gnuplot");
  begin_png(gp, png, width, height);
  gp << "set title '"
     << label("TFLOP/s against N on " + prov.gpu() + " (" + kDtype + ", d = " + std::to_string(d) +
              (causal ? ", causal" : ", no mask") + "; each step's default variant; lines without points: PyTorch SDPA, by kernel time; the steps by CUDA events)")
     << "'\nset logscale y 10\nset mytics 10\nset grid xtics ytics mytics\n"
     << "set ylabel \"TFLOP/s (FlashAttention's convention: 4·N·Nk·d per head" << (causal ? ", halved" : "")
     << "; backward 2.5×)\"\n";
  n_axis(gp, n_lo, n_hi);
  f.apply(gp);
  key_at(gp, f, width - key_w);
  caption(gp, prov);
  end_labels(gp, f, st.labels);
  plot(gp, st.curves);
  gp << "set output\n";
}

// ------------------------------------------------------------------------------------------------
// measured_speedup.png: each step's forward time against the first step's, same shape, no mask,
// one panel per variant of the first step (its baselines), the fastest baseline on top.

void draw_speedup(const Data& data, int d, const Slots& slot, const std::string& png) {
  using Shape = std::tuple<int, int, int>;  // N, B, H
  const Step& base = data.steps.front();
  const Table& bt = base.session;
  auto shape = [](const Table& t, size_t r) { return Shape{as_int(t.num(r, "N")), as_int(t.num(r, "B")), as_int(t.num(r, "H"))}; };
  struct Baseline {
    std::string variant;
    std::map<Shape, double> ms;
    double log_ms = 0;  // the mean log time over the shapes every baseline has: which is faster
  };
  std::vector<Baseline> baselines;
  for (size_t r = 0; r < bt.size(); ++r) {
    const std::string v = bt.str(r, "variant");
    if (std::any_of(baselines.begin(), baselines.end(), [&](const Baseline& b) { return b.variant == v; })) continue;
    Baseline b{v, {}, 0};
    for (size_t rr : sweep_rows(bt, v, d, 0)) b.ms[shape(bt, rr)] = bt.num(rr, "ms");
    if (b.ms.empty()) note(bt.path() + ": no passing " + kDtype + " rows of " + v + " at d = " + std::to_string(d) +
                           " without mask: no panel over it in measured_speedup.png");
    else baselines.push_back(std::move(b));
  }
  if (baselines.empty())
    throw Error(bt.path() + ": no passing " + kDtype + " rows at d = " + std::to_string(d) +
                " without mask (the baselines of measured_speedup.png)");
  std::set<Shape> common;
  for (const auto& [sh, ms] : baselines.front().ms)
    if (std::all_of(baselines.begin(), baselines.end(), [&](const Baseline& b) { return b.ms.count(sh) != 0; })) common.insert(sh);
  for (Baseline& b : baselines) {
    for (const Shape& sh : common) b.log_ms += std::log(b.ms.at(sh));
    b.log_ms /= double(std::max<size_t>(1, common.size()));
  }
  const std::string default_variant = baselines.front().variant == base.variant ? base.variant : "";
  std::stable_sort(baselines.begin(), baselines.end(), [](const Baseline& a, const Baseline& b) { return a.log_ms < b.log_ms; });

  // The curves: each step's default variant, and the first step's other variants.
  struct Source {
    std::string title, tag, name;
    size_t slot;
    const Table* t;
    std::vector<size_t> rows;
  };
  std::vector<Source> sources;
  Provenance prov;
  auto value = [](const std::string& v) { return v.substr(v.find('=') + 1); };  // "gemm=cublas" -> "cublas"
  for (const Step& st : data.steps) {
    std::vector<std::string> variants{st.variant};
    if (&st == &base)
      for (const Baseline& b : baselines)
        if (b.variant != st.variant) variants.push_back(b.variant);
    for (const std::string& v : variants) {
      Source src{"", variants.size() > 1 ? st.id + " " + value(v) : st.id, "", slot("fwd " + st.id + " " + v), &st.session,
                 sweep_rows(st.session, v, d, 0)};
      std::set<std::string> commits;
      for (size_t r : src.rows) commits.insert(st.session.str(r, "commit")), prov.add(st.session, r, "device");
      src.title = step_title(st.id, v) + " (" + join(commits) + ")";
      src.name = (v == "-" ? "" : v + " ") + "(" + join(commits) + ")";
      sources.push_back(std::move(src));
    }
  }
  std::vector<std::vector<Line>> panels;
  int64_t n_lo = 0, n_hi = 0;
  for (const Baseline& b : baselines) {
    std::vector<Line> lines;
    for (const Source& src : sources) {
      Series s;
      for (size_t r : src.rows) {
        const auto it = b.ms.find(shape(*src.t, r));
        if (it == b.ms.end()) continue;  // no baseline of this shape
        const int n = as_int(src.t->num(r, "N"));
        s.emplace_back(n, it->second / src.t->num(r, "ms"));
        n_lo = n_lo ? std::min<int64_t>(n_lo, n) : n;
        n_hi = std::max<int64_t>(n_hi, n);
      }
      lines.push_back({src.title, src.tag, src.name, s, src.slot});
    }
    panels.push_back(std::move(lines));
  }
  // Which curves coincide does not depend on the baseline (a ratio to the same times): the top
  // panel's groups for every panel, so that one key serves them all.
  const auto groups = coinciding(panels.front());
  std::vector<Styled> styled;
  for (const auto& lines : panels) styled.push_back(style_lines(lines, groups, kMaxKeyTitle));

  const int width = 1300, top = 85, panel_h = 400, gap = 125, bottom = 110;
  const int height = top + int(panels.size()) * panel_h + int(panels.size() - 1) * gap + bottom;
  const double key_w = key_size(styled.front().curves).first;
  Gnuplot gp("gnuplot");
  begin_png(gp, png, width, height);
  gp << "set multiplot title '"
     << label("Forward speed-up at the same shape (" + kDtype + ", d = " + std::to_string(d) + ", no mask, " + prov.gpu() +
              "); above 1: faster than the panel's baseline, " + (baselines.size() > 1 ? "a variant of " : "") + "step " +
              base.id)
     << "' font ',13'\n";
  caption(gp, prov, 40.0 / height);
  gp << "set logscale y 10\nset mytics 10\nset grid xtics ytics mytics\n";
  n_axis(gp, n_lo, n_hi);
  for (size_t i = 0; i < panels.size(); ++i) {
    const Baseline& b = baselines[i];
    const double y0 = top + double(i) * (panel_h + gap);
    const Frame f = frame_for(styled[i], width, height, y0, y0 + panel_h, n_lo, n_hi, key_w);
    std::string which = i == 0 && baselines.size() > 1 ? "the fastest of step " + base.id + "'s variants" : "";
    if (b.variant == default_variant)
      which += (which.empty() ? "" : ", ") + std::string("step ") + base.id + "'s default variant";
    const std::string bname = step_title(base.id, b.variant);
    gp << "set title '" << label(std::string(1, char('a' + i)) + ") over " + bname + (which.empty() ? "" : " (" + which + ")"))
       << "' font ',12'\nset ylabel '" << label("t(" + bname + ") / t(step)") << "'\n";
    f.apply(gp);
    if (i == 0) key_at(gp, f, width - key_w);
    else gp << "unset key\n";
    const int labels = end_labels(gp, f, styled[i].labels);
    plot(gp, styled[i].curves);
    clear_end_labels(gp, labels);
    gp << "unset label 99\n";  // the caption once
  }
  gp << "unset multiplot\nset output\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::string data_dir = std::string(FA_PLOTS_DIR) + "/data", out = FA_PLOTS_DIR, gpu, peers = "flash,cudnn";
  int d = 128;
  const std::string usage =
      "usage: plot_measured [--data DIR] [--out DIR] [--gpu TAG] [--d 16|32|64|128] [--peers BACKEND,...]\n";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--data" && has_value) data_dir = argv[++i];
    else if (a == "--out" && has_value) out = argv[++i];
    else if (a == "--gpu" && has_value) gpu = argv[++i];
    else if (a == "--peers" && has_value) peers = argv[++i];
    else if (a == "--d" && has_value) {
      const std::string v = argv[++i];
      d = v == "16" ? 16 : v == "32" ? 32 : v == "64" ? 64 : v == "128" ? 128 : 0;
      if (!d) {
        std::cerr << kProgram << ": error: --d must be 16, 32, 64 or 128\n";
        return 2;
      }
    } else {
      std::cerr << usage;
      return a == "--help" ? 0 : 2;
    }
  }
  if (report_errors(kProgram, [&] {
    const Data data = load(data_dir, gpu);
    fs::create_directories(out);
    draw_traffic(data, d, out + "/measured_traffic.png");
    const std::vector<std::string> peer_list = split_list(peers);
    const Slots slots(data, peer_list);
    draw_tflops(data, d, 0, peer_list, slots, out + "/measured_tflops.png");
    draw_tflops(data, d, 1, peer_list, slots, out + "/measured_tflops_causal.png");
    draw_speedup(data, d, slots, out + "/measured_speedup.png");
  }))
    return 1;
  std::cout << "wrote " << out
            << "/measured_traffic.png, measured_tflops.png, measured_tflops_causal.png, measured_speedup.png\n";
  return 0;
}
