// model: the per-resource model (common/perf/model.hpp) applied to rows a GPU run measured, on any
// machine — the ledger from the step's closed form, the launches and times from the row, the
// ceilings from a bench --peaks file. What the docs' prediction tables and plots are made from.
//
//   model --peaks FILE --runs FILE[,FILE...] [--out FILE] [--paths FILE] [--counts FILE] [--verbose]
//
// FILE of runs: rows written by bench, the tour or a step's --csv (their header line first). Each
// row with a `launches` column is modelled for the forward (and for the backward, where it has
// one); rows without the model's columns are skipped and counted. --out writes one CSV row per
// pass: its measured time and spread, the model's time, the ratio, the bound and each term (the
// latency term's: 0 where the SASS profile has no listing for the step). --paths writes, per kernel
// with a latency term, one row per loop of its warp path (docs/model.md, "The latency term"): the
// loop, its parent, how the listing bounds it, its trips per entry, its executions per warp, and the
// cycles it adds to the path, then the warps resident at once and the part of those cycles their queue
// at the memory system adds (docs/model.md, "Latency under load"). --counts writes, per kernel with a latency term, the warp instructions the
// path predicts for the whole launch by class (path × warps): what Nsight's executed instructions
// per opcode check (scripts/ncu_sass.py).
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "harness/csv.hpp"
#include "core/registry.hpp"
#include "harness/runner.hpp"

using namespace fa;

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, sep);)
    if (!x.empty()) v.push_back(x);
  return v;
}

const StepInfo* find_step(const std::string& id) {
  for (const StepInfo* s : all_steps())
    if (s->id == id) return s;
  return nullptr;
}

// The row's variant back into the step's options and the shape's extras (runner.cpp's run_once
// writes them: "flag=value;...;dropout=P;hkv=K;window=W").
void parse_variant(const std::string& v, const StepInfo& st, StepOptions& opts, Shape& s) {
  if (v == "-") return;
  for (const std::string& kv : split(v, ';')) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = kv.substr(0, eq), x = kv.substr(eq + 1);
    if (k == "dropout") s.dropout = std::stod(x);
    else if (k == "hkv") s.Hkv = std::stoll(x);
    else if (k == "window") s.window = std::stoll(x);
    else if (k == "cache") throw std::invalid_argument("decoding rows (cache=) are not re-modelled by this tool");
    else {
      bool known = false;
      for (const StepFlag& f : st.flags) known |= f.name == k;
      if (!known) throw std::invalid_argument("step " + st.id + " has no flag --" + k);
      opts[k] = x;
    }
  }
}

struct Out {
  std::ofstream f;
  bool on = false;
};

void term_columns(std::ostream& os, const ModelPrediction& m) {
  // Each resource's ms summed over the kernels: what the plot and the tables show.
  std::map<std::string, double> sum;
  for (const KernelModel& k : m.kernels)
    for (const Term& t : k.terms) sum[t.resource] += t.ms;
  for (const char* r : {"hbm", "l2", "smem", "tensor", "fma", "ex2", "barrier", "atomic", "issue", "chain", "latency"})
    os << "," << (sum.count(r) ? sum[r] : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  std::string peaks, out_path, paths_path, counts_path;
  std::vector<std::string> runs;
  bool verbose = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--verbose") { verbose = true; continue; }
    if (a == "--help" || a == "-h") {
      std::cout << "usage: model --peaks FILE --runs FILE[,FILE...] [--out FILE] [--paths FILE] [--counts FILE] [--verbose]\n";
      return 0;
    }
    if (i + 1 >= argc) { std::cerr << "model: " << a << " needs a value\n"; return 2; }
    const std::string v = argv[++i];
    if (a == "--peaks") peaks = v;
    else if (a == "--runs") runs = split(v, ',');
    else if (a == "--out") out_path = v;
    else if (a == "--paths") paths_path = v;
    else if (a == "--counts") counts_path = v;
    else { std::cerr << "model: unknown flag " << a << "\n"; return 2; }
  }
  if (peaks.empty() || runs.empty()) { std::cerr << "model: --peaks and --runs are required (see --help)\n"; return 2; }

  Out out;
  if (!out_path.empty()) {
    out.f.open(out_path);
    if (!out.f) { std::cerr << "model: cannot write " << out_path << "\n"; return 2; }
    out.on = true;
    out.f << "file,step,variant,pass_of,dtype,B,H,N,Nk,d,causal,measured_ms,ms_min,ms_max,model_ms,ratio,bound_by,"
             "hbm_ms,l2_ms,smem_ms,tensor_ms,fma_ms,ex2_ms,barrier_ms,atomic_ms,issue_ms,chain_ms,latency_ms\n";
  }
  std::ofstream paths;
  if (!paths_path.empty()) {
    paths.open(paths_path);
    if (!paths) { std::cerr << "model: cannot write " << paths_path << "\n"; return 2; }
    paths << "file,step,variant,pass_of,dtype,B,H,N,d,causal,kernel,function,warps_per_scheduler,path_cycles,path_instructions,"
             "latency_ms,latency_by,marker,hot_loop,loop,parent,trip_kind,trips_per_entry,executions,cycles,queue_warps,queue_cycles\n";
  }
  std::ofstream counts;
  const char* classes[] = {"gmem", "smem", "mma", "sfu", "barrier", "control", "alu"};
  if (!counts_path.empty()) {
    counts.open(counts_path);
    if (!counts) { std::cerr << "model: cannot write " << counts_path << "\n"; return 2; }
    counts << "file,step,variant,pass_of,dtype,B,H,N,d,causal,kernel,function,warps";
    for (const char* k : classes) counts << ",inst_" << k;
    counts << "\n";
  }
  int modelled = 0, skipped = 0, within = 0;
  std::cout << std::left << std::setw(5) << "step" << std::setw(22) << "variant" << std::setw(5) << "pass" << std::setw(28) << "shape"
            << std::right << std::setw(11) << "measured" << std::setw(11) << "model" << std::setw(8) << "ratio" << "  bound by\n";
  for (const std::string& path : runs) {
    std::ifstream f(path);
    if (!f) { std::cerr << "model: cannot read " << path << "\n"; return 2; }
    std::string line;
    std::getline(f, line);
    const std::vector<std::string> head = csv_fields(line);
    std::map<std::string, int> col;
    for (size_t i = 0; i < head.size(); ++i) col[head[i]] = int(i);
    for (const char* need : {"step", "variant", "device", "dtype", "B", "H", "N", "Nk", "d", "causal", "ms"})
      if (!col.count(need)) { std::cerr << "model: " << path << " has no column " << need << "\n"; return 2; }
    Ceilings c;
    bool have_c = false;
    while (std::getline(f, line)) {
      if (line.empty()) continue;
      const std::vector<std::string> v = csv_fields(line);
      auto get = [&](const std::string& k) { return col.count(k) && col[k] < int(v.size()) ? v[col[k]] : std::string(); };
      if (get("launches").empty() && get("bwd_launches").empty()) { ++skipped; continue; }
      std::string id = get("step");
      if (id.size() == 1) id.insert(id.begin(), '0');  // "1" from a spreadsheet's round trip: step 01
      const StepInfo* st = find_step(id);
      if (!st) { ++skipped; continue; }
      if (!have_c) {
        DeviceSpec dev = h200_datasheet();
        dev.name = get("device");
        c = ceilings_for(dev);
        if (apply_peaks_csv(c, peaks) == 0) { std::cerr << "model: " << peaks << " has no rows for " << dev.name << "\n"; return 2; }
        have_c = true;
      }
      Shape s;
      s.dtype = get("dtype") == "bf16" ? DType::bf16 : DType::f16;
      s.B = std::stoll(get("B"));
      s.H = std::stoll(get("H"));
      s.N = std::stoll(get("N"));
      s.Nk = std::stoll(get("Nk"));
      s.d = std::stoll(get("d"));
      s.causal = get("causal") == "1";
      StepOptions opts;
      try {
        parse_variant(get("variant"), *st, opts, s);
      } catch (const std::exception& e) {
        ++skipped;
        continue;
      }
      struct Pass { const char* name; LedgerSet ls; std::string launches, ms, lo, hi; bool bwd; };
      std::vector<Pass> passes;
      if (!get("launches").empty()) passes.push_back({"fwd", st->closed_form(s, opts), get("launches"), get("ms"), get("ms_min"), get("ms_max"), false});
      if (!get("bwd_launches").empty() && st->backward_closed_form)
        passes.push_back({"bwd", st->backward_closed_form(s, opts), get("bwd_launches"), get("bwd_ms"), get("bwd_ms_min"), get("bwd_ms_max"), true});
      for (const Pass& p : passes) {
        const ModelPrediction m = model_predict(p.ls, parse_launches(p.launches), st->unit(opts), c, model_tensor_bytes(s, p.bwd),
                                                sass_loops_for(st->id, s.type_name(), int(s.d)));
        const double ms = std::stod(p.ms), ratio = m.ms > 0 ? ms / m.ms : 0;
        ++modelled;
        within += ratio >= 1 / 1.5 && ratio <= 1.5;
        std::ostringstream sh;
        sh << "B" << s.B << " H" << s.H << " N" << s.N << " d" << s.d << (s.causal ? " causal" : "") << " " << s.type_name();
        std::cout << std::left << std::setw(5) << st->id << std::setw(22) << get("variant").substr(0, 21) << std::setw(5) << p.name
                  << std::setw(28) << sh.str() << std::right << std::setw(11) << std::setprecision(4) << ms << std::setw(11)
                  << m.ms << std::setw(8) << std::fixed << std::setprecision(2) << ratio << std::defaultfloat << "  " << m.bound_by
                  << "\n";
        if (verbose) {
          print_ledger(std::cout, p.ls);
          print_model(std::cout, m);
        }
        if (out.on) {
          out.f << path << "," << st->id << "," << get("variant") << "," << p.name << "," << get("dtype") << "," << s.B << "," << s.H
                << "," << s.N << "," << s.Nk << "," << s.d << "," << (s.causal ? 1 : 0) << "," << ms << "," << p.lo << "," << p.hi
                << "," << m.ms << "," << ratio << "," << m.bound_by;
          term_columns(out.f, m);
          out.f << "\n";
        }
        if (counts.is_open())
          for (const KernelModel& k : m.kernels) {
            if (k.path_cycles <= 0) continue;
            const double warps = double(k.launch.blocks) * double((k.launch.threads + 31) / 32);
            counts << path << "," << st->id << "," << get("variant") << "," << p.name << "," << get("dtype") << "," << s.B << ","
                   << s.H << "," << s.N << "," << s.d << "," << (s.causal ? 1 : 0) << "," << k.kernel << "," << k.function << ","
                   << warps;
            for (const char* c : classes) counts << "," << (k.path_classes.count(c) ? k.path_classes.at(c) * warps : 0.0);
            counts << "\n";
          }
        if (paths.is_open())
          for (const KernelModel& k : m.kernels)
            for (const KernelModel::PathLoop& pl : k.path_loops)
              paths << path << "," << st->id << "," << get("variant") << "," << p.name << "," << get("dtype") << "," << s.B << ","
                    << s.H << "," << s.N << "," << s.d << "," << (s.causal ? 1 : 0) << "," << k.kernel << "," << k.function << ","
                    << k.warps_per_scheduler << "," << k.path_cycles << "," << k.path_instructions << "," << k.latency_ms << ","
                    << k.latency_by << "," << k.marker << "," << k.hot_loop << "," << pl.loop << ","
                    << (pl.loop < 0 ? std::string() : std::to_string(pl.parent)) << "," << pl.kind << "," << pl.per_entry << ","
                    << pl.executions << "," << pl.cycles << "," << k.queue_warps << "," << pl.queue_cycles << "\n";
      }
    }
  }
  std::cout << "\n" << modelled << " passes modelled (" << within << " within 1.5x of the measurement), " << skipped
            << " rows skipped (no launches recorded, or a decoding shape)\n";
  return 0;
}
