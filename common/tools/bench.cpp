// bench: chosen steps over a sweep of shapes, one checked and timed run per row of a CSV.
//
//   bench [--steps 07,08] [--ns 512,1024,...] [--ds 64,128] [--causal 0,1] [--dtypes fp16,bf16,e4m3]
//         [--variants all|default|ablations] [--tokens 16384] [--width 2048] [--reps 10] [--warmup 3] [--runs 1]
//         [--budget-s SECONDS] [--backend auto|gpu|cpu] [--commit HASH] [--set FLAG=VALUE,...] --out FILE
//
// Shapes are FlashAttention's benchmark shapes: B·N = --tokens, H·d = --width. Every row is a full
// run of the step program's runner (check against the Eigen reference, ledger, timing; the
// backward too where the step has one), prefixed with date, commit and CUDA versions. Rows go to
// FILE as they finish; a run already in FILE (same step, variant, dtype, d, causal, N) is skipped,
// so an interrupted sweep resumes where it stopped. A progress line per run goes to stderr.
// Exit status: 0 every run passed (refused runs are counted and named, not failed), 1 a check failed or a
// run threw, 2 bad flags.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>

#include "harness/csv.hpp"
#include "harness/gpu.hpp"
#include "core/registry.hpp"
#include "harness/runner.hpp"

using namespace fa;

namespace {

struct BenchOptions {
  std::vector<std::string> steps;  // ids; empty = all
  std::vector<int64_t> ns = {512, 1024, 2048, 4096, 8192, 16384};
  std::vector<int64_t> ds = {64, 128};
  std::vector<int> causal = {0, 1};
  std::vector<std::string> dtypes = {"fp16"};  // --dtype's names: fp16, bf16, e4m3 ([fp8])
  std::string variants = "all";  // all | default | ablations
  int64_t tokens = 16384, width = 2048;
  int reps = 10, warmup = 3;
  int runs = 1;  // --runs K: each row's time the median of K timed runs, with their spread ([noise])
  int graph = kGraphCalls;  // --graph K: calls per CUDA graph ([graph-time])
  bool peaks = false;  // --peaks: the GPU's measured ceilings instead of steps
  int64_t check_heads = 0;  // --check-heads K, passed to every run (0: the runner's rule)
  double budget_s = 0;  // 0: no bound
  Backend backend = Backend::Auto;
  std::string commit, out;
  bool list = false;  // --list: print the runs' step and flags, measure nothing
  // [bench-set] --set exp2=mufu: one of the steps' own flags pinned in every variant of the steps that have it
  // (a swept flag's other values drop out; an experiment's value is added), e.g. step 20 at --exp2 mufu
  // over a target matrix, or step 21 with --pv serial.
  std::vector<std::pair<std::string, std::string>> set;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) v.push_back(x);
  return v;
}

int64_t to_int(const std::string& flag, const std::string& v) {
  try {
    size_t pos = 0;
    const long long x = std::stoll(v, &pos);
    if (pos != v.size() || x <= 0) throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    throw CliError(flag + ": expected positive integers, got '" + v + "'");
  }
}

const char* kUsage =
    "usage: bench --out FILE [--steps 07,08] [--ns 512,...,16384] [--ds 64,128] [--causal 0,1]\n"
    "             [--dtypes fp16,bf16,e4m3] [--variants all|default|ablations] [--tokens 16384] [--width 2048]\n"
    "             [--reps 10] [--warmup 3] [--runs 1] [--graph 10] [--check-heads K] [--budget-s S]\n"
    "             [--backend auto|gpu|cpu] [--commit HASH] [--set FLAG=VALUE,...]\n"
    "Runs each step on B = tokens/N, H = width/d for every N, d, mask and dtype; appends one CSV row per\n"
    "run to FILE and skips runs FILE already has (resume after an interrupt). On a GPU each row has the\n"
    "kernel time (cold L2, every kernel summed), the CUDA-event time and the time per call in a CUDA graph\n"
    "of --graph calls (docs/profiling.md, 'One clock').\n"
    "bench --peaks --out FILE [--reps R] [--commit HASH] measures the GPU's ceilings instead (HBM, L2, shared\n"
    "memory, tensor cores, FMA, ex2, barriers, atomics, latencies, launch: docs/profiling.md), one CSV row each.\n"
    "bench --list [--steps ...] [--variants ...] prints each chosen step's program and flags, one variant\n"
    "a line (e.g. 'step01 --gemm cublas'), for scripts that loop over variants.\n"
    "--set FLAG=VALUE pins a step's own flag (e.g. exp2=mufu) in every variant of the chosen steps that have\n"
    "it; a flag no chosen step has, or a value it does not offer, is an error.\n";

BenchOptions parse(const std::vector<std::string>& args) {
  BenchOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") throw std::runtime_error("help");
    if (a == "--list") { o.list = true; continue; }
    if (a == "--peaks") { o.peaks = true; continue; }
    if (i + 1 >= args.size()) throw CliError(a + ": needs a value (see --help)");
    const std::string v = args[++i];
    if (a == "--steps") o.steps = split(v);
    else if (a == "--ns") { o.ns.clear(); for (auto& x : split(v)) o.ns.push_back(to_int(a, x)); }
    else if (a == "--ds") {
      o.ds.clear();
      for (auto& x : split(v)) o.ds.push_back(to_int(a, x));
    } else if (a == "--causal") {
      o.causal.clear();
      for (auto& x : split(v)) {
        if (x != "0" && x != "1") throw CliError("--causal: 0 and/or 1, got '" + x + "'");
        o.causal.push_back(x == "1");
      }
    } else if (a == "--dtypes") {
      o.dtypes.clear();
      for (auto& x : split(v)) {
        Shape probe;
        if (!set_type(probe, x)) throw CliError("--dtypes: fp16, bf16 and/or e4m3, got '" + x + "'");
        o.dtypes.push_back(probe.type_name());
      }
    } else if (a == "--variants") {
      if (v != "all" && v != "default" && v != "ablations")
        throw CliError("--variants: all, default or ablations, got '" + v + "'");
      o.variants = v;
    } else if (a == "--tokens") o.tokens = to_int(a, v);
    else if (a == "--width") o.width = to_int(a, v);
    else if (a == "--reps") o.reps = int(to_int(a, v));
    else if (a == "--warmup") o.warmup = v == "0" ? 0 : int(to_int(a, v));
    else if (a == "--runs") o.runs = int(to_int(a, v));
    else if (a == "--graph") o.graph = int(to_int(a, v));
    else if (a == "--check-heads") o.check_heads = to_int(a, v);
    else if (a == "--budget-s") o.budget_s = double(to_int(a, v));
    else if (a == "--backend") {
      if (v == "auto") o.backend = Backend::Auto;
      else if (v == "gpu") o.backend = Backend::Gpu;
      else if (v == "cpu") o.backend = Backend::Cpu;
      else throw CliError("--backend: auto, gpu or cpu, got '" + v + "'");
    } else if (a == "--set") {
      for (const std::string& kv : split(v)) {
        const size_t eq = kv.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == kv.size())
          throw CliError("--set: FLAG=VALUE, got '" + kv + "'");
        o.set.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
      }
    } else if (a == "--commit") o.commit = v;
    else if (a == "--out") o.out = v;
    else throw CliError("unknown flag " + a + " (see --help)");
  }
  if (o.out.empty() && !o.list) throw CliError("--out FILE is required (rows are appended to it)");
  for (const std::string& id : o.steps) {
    bool known = false;
    for (const StepInfo* st : all_steps()) known |= st->id == id;
    if (!known) throw CliError("--steps: no step '" + id + "' (ids look like 07)");
  }
  for (const auto& [flag, value] : o.set) {  // [bench-set] a chosen step has the flag, and offers the value
    bool has = false;
    for (const StepInfo* st : all_steps()) {
      if (!o.steps.empty() && std::find(o.steps.begin(), o.steps.end(), st->id) == o.steps.end()) continue;
      for (const StepFlag& f : st->flags) {
        if (f.name != flag) continue;
        has = true;
        if (std::find(f.choices.begin(), f.choices.end(), value) == f.choices.end()) {
          std::string offered;
          for (const std::string& c : f.choices) offered += (offered.empty() ? "" : ", ") + c;
          throw CliError("--set: step " + st->id + "'s --" + flag + " offers " + offered + ", not '" + value + "'");
        }
      }
    }
    if (!has) throw CliError("--set: no chosen step has a flag --" + flag);
  }
  return o;
}

// [bench-set] The variants with --set's flags pinned, for a step that has them; duplicates dropped, order kept.
std::vector<StepOptions> pinned(const StepInfo& st, const std::vector<StepOptions>& vars,
                                const std::vector<std::pair<std::string, std::string>>& set) {
  std::vector<StepOptions> out;
  for (StepOptions v : vars) {
    for (const auto& [flag, value] : set)
      for (const StepFlag& f : st.flags)
        if (f.name == flag) v[flag] = value;
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  return out;
}

// The columns that identify a run, as the CSV spells them.
std::string run_key(const std::string& step, const std::string& variant, const std::string& dtype, int64_t d, int causal,
                    int64_t n) {
  std::ostringstream os;
  os << step << "|" << variant << "|" << dtype << "|" << d << "|" << causal << "|" << n;
  return os.str();
}


const std::string kPrefix = "date,commit,cuda,driver,";

}  // namespace

int main(int argc, char** argv) {
  BenchOptions o;
  try {
    o = parse(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const CliError& e) {
    std::cerr << "bench: error: " << e.what() << "\n";
    return 2;
  } catch (const std::runtime_error&) {
    std::cout << kUsage;
    return 0;
  }
  auto variants_of = [&](const StepInfo& st) {
    return pinned(st,
                  o.variants == "all"         ? st.all_variants()
                  : o.variants == "ablations" ? st.ablation_variants()
                                              : std::vector<StepOptions>{st.default_options()},
                  o.set);
  };
  if (o.list) {
    for (const StepInfo* st : all_steps()) {
      if (!o.steps.empty() && std::find(o.steps.begin(), o.steps.end(), st->id) == o.steps.end()) continue;
      for (const StepOptions& v : variants_of(*st)) {
        std::cout << st->program();
        for (const auto& [k, val] : v) std::cout << " --" << k << " " << val;
        std::cout << "\n";
      }
    }
    return 0;
  }
  std::string why;
  const bool have_gpu = gpu_available(why);
  if (o.backend == Backend::Gpu && !have_gpu) {
    std::cerr << "bench: error: --backend gpu, but " << why << "\n";
    return 2;
  }
  const bool on_gpu = have_gpu && o.backend != Backend::Cpu;
  if (!on_gpu && !o.peaks) std::cerr << "bench: " << (why.empty() ? "--backend cpu" : why) << ": running CPU blueprints (not GPU figures)\n";
  if (o.commit.empty() && std::getenv("FA_COMMIT")) o.commit = std::getenv("FA_COMMIT");
  if (o.commit.empty()) o.commit = "unknown";
  std::string cuda = "", driver = "";
  if (on_gpu) {  // "runtime 13.0, driver 13.0"
    const std::string v = cuda_version_string();
    cuda = v.substr(8, v.find(',') - 8);
    driver = v.substr(v.rfind(' ') + 1);
  }

  // [peaks] The measured ceilings: one row each, a header of their own.
  if (o.peaks) {
    if (!on_gpu) {
      std::cerr << "bench: --peaks needs a GPU (" << why << ")\n";
      return 2;
    }
    const std::string peaks_header = kPrefix + "device,peak,unit,value,amount,reps,ms";
    bool fresh_peaks = true;
    {
      std::ifstream in(o.out);
      std::string line;
      if (std::getline(in, line)) {
        fresh_peaks = false;
        if (line != peaks_header) {
          std::cerr << "bench: error: " << o.out << " has another header; use a new --out file\n";
          return 2;
        }
      }
    }
    std::ofstream out(o.out, std::ios::app);
    if (!out) {
      std::cerr << "bench: error: cannot write " << o.out << "\n";
      return 2;
    }
    if (fresh_peaks) out << peaks_header << "\n";
    std::vector<std::string> notes;
    std::vector<PeakResult> rows;
    try {
      rows = measure_peaks(std::max(o.reps, 5), notes);
    } catch (const std::exception& e) {
      std::cerr << "bench: error: --peaks: " << e.what() << "\n";
      return 1;
    }
    const std::string date = csv_date(), device = gpu_device_spec().name;
    for (const PeakResult& p : rows)
      out << date << "," << o.commit << "," << cuda << "," << driver << ",\"" << device << "\"," << p.name << "," << p.unit
          << "," << std::setprecision(6) << p.value << "," << p.amount << "," << p.reps << "," << std::setprecision(6)
          << p.ms_median << "\n";
    for (const std::string& n : notes) std::cerr << "bench: absent: " << n << "\n";
    std::cerr << "bench: " << rows.size() << " ceilings written to " << o.out << "\n";
    return out ? 0 : 1;
  }

  // Resume: the runs FILE already holds.
  std::set<std::string> done;
  bool fresh = true;
  {
    std::ifstream in(o.out);
    std::string line;
    if (std::getline(in, line)) {
      fresh = false;
      if (line != kPrefix + csv_header()) {
        std::cerr << "bench: error: " << o.out << " has another header; use a new --out file\n";
        return 2;
      }
      const std::vector<std::string> h = csv_fields(line);
      auto col = [&](const std::string& name) {
        for (size_t i = 0; i < h.size(); ++i)
          if (h[i] == name) return i;
        return size_t(0);
      };
      const size_t cs = col("step"), cv = col("variant"), ct = col("dtype"), cd = col("d"), cc = col("causal"), cn = col("N");
      while (std::getline(in, line)) {
        const std::vector<std::string> f = csv_fields(line);
        if (f.size() != h.size()) continue;  // a row cut short by an interrupt is measured again
        done.insert(run_key(f[cs], f[cv], f[ct], std::stoll(f[cd]), std::stoi(f[cc]), std::stoll(f[cn])));
      }
    }
  }
  std::ofstream out(o.out, std::ios::app);
  if (!out) {
    std::cerr << "bench: error: cannot write " << o.out << "\n";
    return 2;
  }
  if (fresh) out << kPrefix << csv_header() << "\n" << std::flush;

  // The plan: every step, variant, dtype, d, mask and N, in that order.
  struct Run {
    const StepInfo* st;
    StepOptions v;
    CliOptions cli;
    std::string key;
  };
  std::vector<Run> plan;
  size_t skipped = 0, narrow = 0, other_type = 0;
  for (const StepInfo* st : all_steps()) {
    if (!o.steps.empty() && std::find(o.steps.begin(), o.steps.end(), st->id) == o.steps.end()) continue;
    if (on_gpu && !st->launch) continue;
    const std::vector<StepOptions> vars = variants_of(*st);
    for (const StepOptions& v : vars)
      for (const std::string& t : o.dtypes)
        for (int64_t d : o.ds)
          for (int c : o.causal)
            for (int64_t n : o.ns) {
              CliOptions cli;
              cli.shape.B = std::max<int64_t>(1, o.tokens / n);
              cli.shape.H = std::max<int64_t>(1, o.width / d);
              cli.shape.N = cli.shape.Nk = n;
              cli.shape.d = d;
              cli.shape.causal = c == 1;
              set_type(cli.shape, t);
              cli.shape_given = cli.b_given = cli.h_given = cli.n_given = cli.nk_given = cli.d_given = true;
              cli.reps = on_gpu ? o.reps : 1;
              cli.warmup = on_gpu ? o.warmup : 0;
              cli.runs = on_gpu ? o.runs : 1;
              cli.graph_calls = o.graph;
              cli.check_heads = o.check_heads;
              cli.step = v;
              const std::string k = run_key(st->id, variant_name(v), t, d, c, n);
              if (done.count(k)) { ++skipped; continue; }
              if (st->fp8 != cli.shape.fp8) { ++other_type; continue; }  // [fp8] e4m3 for the FP8 steps alone
              if (!st->takes_d(d)) { ++narrow; continue; }  // d = 256: the steps that compile it (StepInfo::takes_d)
              const std::string bad = validate(cli.shape);
              if (!bad.empty()) {
                std::cerr << "bench: error: " << bad << "\n";
                return 2;
              }
              plan.push_back({st, v, cli, k});
            }
  }
  std::cerr << "bench: " << plan.size() << " runs to do, " << skipped << " already in " << o.out << "\n";
  if (narrow > 0) std::cerr << "bench: " << narrow << " runs at d = 256 left out: only the steps that compile it take it (StepInfo::head_dims)\n";
  if (other_type > 0)
    std::cerr << "bench: " << other_type << " runs left out: e4m3 is the FP8 steps' only type, and theirs alone (--dtypes)\n";

  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  int failed = 0;
  size_t measured = 0, refused = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    if (o.budget_s > 0 && elapsed() > o.budget_s) {
      std::cerr << "bench: budget of " << o.budget_s << " s spent; " << plan.size() - i
                << " runs not measured (run the same command again to resume)\n";
      break;
    }
    const Run& run = plan[i];
    std::ostringstream what;
    what << "step" << run.st->id << " " << variant_name(run.v) << " " << run.cli.shape.type_name() << " d=" << run.cli.shape.d
         << " causal=" << (run.cli.shape.causal ? 1 : 0) << " N=" << run.cli.shape.N;
    std::ostringstream line;
    line << std::fixed << std::setprecision(0) << "[bench " << i + 1 << "/" << plan.size() << ", " << elapsed() << " s] " << what.str() << ": ";
    try {
      const RunRecord r = run_once(*run.st, run.cli, on_gpu);
      out << csv_date() << "," << o.commit << "," << cuda << "," << driver << "," << csv_row(r) << "\n" << std::flush;
      ++measured;
      failed += r.ok() ? 0 : 1;
      if (on_gpu && r.kernel.ms_median > 0)
        line << std::setprecision(3) << r.kernel.ms_median << " ms kernel (" << std::setprecision(1) << r.kernel_tflops()
             << " TFLOP/s), " << std::setprecision(3) << r.ms << " ms events";
      else
        line << std::setprecision(3) << r.ms << " ms" << (on_gpu ? " events (no kernel time: " + r.kernel.note + ")" : "");
      if (r.has_backward)
        line << std::setprecision(3) << ", backward " << (r.bwd_kernel.ms_median > 0 ? r.bwd_kernel.ms_median : r.bwd_ms)
             << (r.bwd_kernel.ms_median > 0 ? " ms kernel" : " ms");
      line << (r.ok() ? ", PASS" : ", FAIL");
    } catch (const Unsupported& e) {  // a variant this step does not build for the shape (or this GPU): said, not run
      ++refused;
      line << "refused: " << e.what();
    } catch (const std::exception& e) {
      ++failed;
      line << "error: " << e.what();
    }
    std::cerr << line.str() << "\n";
  }
  std::cerr << "bench: " << measured << " runs measured, " << skipped << " already there, " << refused
            << " refused (not built for that shape or GPU: not run and not passed), " << failed << " failed; rows in " << o.out << "\n";
  return failed ? 1 : 0;
}
