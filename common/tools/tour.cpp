// The tour: every registered step on one shape, one table — what each teaches, whether it passed,
// what it cost (ledger bytes, predicted and measured time). What scripts/run.sh runs by default.
//   tour [--b --h --n --nk --d --causal --dtype --seed --reps --warmup --backend --csv]
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "harness/gpu.hpp"
#include "core/registry.hpp"
#include "harness/runner.hpp"

using namespace fa;

namespace {

std::string mb(int64_t bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(bytes < 10'000'000 ? 2 : 0) << double(bytes) / 1e6;
  return os.str();
}

}  // namespace

int main(int argc, char** argv) {
  StepInfo tour;
  tour.program_name = "tour";
  tour.title = "every registered step on one shape";
  CliOptions o;
  try {
    o = parse_cli(tour, std::vector<std::string>(argv + 1, argv + argc));
  } catch (const CliError& e) {
    std::cerr << "tour: error: " << e.what() << "\n";
    return 2;
  }
  if (o.help) {
    std::cout << usage(tour) << "\nThe tour runs each step with its default flags (and every choice of a step's own flag).\n";
    return 0;
  }
  std::string why;
  const bool have_gpu = gpu_available(why);
  if (o.backend == Backend::Gpu && !have_gpu) {
    std::cerr << "tour: error: --backend gpu, but " << why << "\n";
    return 2;
  }
  const bool on_gpu = have_gpu && o.backend != Backend::Cpu;
  try {
    apply_default_shape(o, on_gpu);
  } catch (const CliError& e) {
    std::cerr << "tour: error: " << e.what() << "\n";
    return 2;
  }
  if (!on_gpu && !o.csv) std::cout << why << ": running every step's CPU blueprint\n";
  if (!o.csv)
    std::cout << "tour: " << o.shape.str() << (on_gpu ? ", on " + gpu_device_spec().name : ", CPU blueprints") << "\n\n";

  std::vector<RunRecord> records;
  int failed = 0;
  for (const StepInfo* st : all_steps()) {
    // Every choice of the step's own flags, each as its own row (the defaults first).
    for (const StepOptions& v : st->all_variants()) {
      if (!on_gpu && v != st->default_options()) continue;  // the blueprint is the same algorithm
      CliOptions oo = o;
      oo.step = v;
      // [fp8] An FP8 step runs the tour's shape in e4m3; with --dtype e4m3 the other steps sit it out.
      if (st->fp8 && !oo.shape.fp8) set_type(oo.shape, "e4m3");
      if (!st->fp8 && oo.shape.fp8) continue;
      std::cerr << "[tour] step " << st->id << " " << variant_name(v) << " ...\n";
      try {
        records.push_back(run_once(*st, oo, on_gpu && st->launch));
      } catch (const Unsupported& e) {  // [arch] this GPU cannot run the step: refused, not failed
        std::cerr << "tour: step " << st->id << " refused: " << e.what() << "\n";
        continue;
      } catch (const std::exception& e) {
        std::cerr << "tour: step " << st->id << ": " << e.what() << "\n";
        ++failed;
        continue;
      }
      const RunRecord& r = records.back();
      failed += r.ok() ? 0 : 1;
    }
  }

  if (o.csv) {
    std::cout << csv_header() << "\n";
    for (const auto& r : records) std::cout << csv_row(r) << "\n";
    return failed ? 1 : 0;
  }
  // One row of numbers per run, and under it what the step teaches (wrapped): the table stays within
  // kWidth columns however long a step's line is. Without a GPU the GPU-only columns are left out.
  constexpr int kWidth = 100;
  size_t vw = 7;  // the variant column: as wide as its longest entry
  for (const auto& r : records) vw = std::max(vw, r.variant.size());
  const int w_var = int(vw) + 2;
  std::cout << std::left << std::setw(5) << "step" << std::setw(w_var) << "variant" << std::setw(6) << "check" << std::right
            << std::setw(10) << "gmem MB" << std::setw(10) << "roofline" << std::setw(10) << "model ms" << std::left << "  "
            << std::setw(8) << "bound by" << std::right << std::setw(10) << (on_gpu ? "kernel ms" : "CPU ms");
  if (on_gpu) std::cout << std::setw(9) << "meas/mod" << std::setw(9) << "TFLOP/s";
  std::cout << std::setw(10) << "bwd ms" << "\n";
  for (const auto& r : records) {
    const StepInfo* st = nullptr;
    for (const StepInfo* s : all_steps()) if (s->id == r.step) st = s;
    const Ledger t = r.ledger.total();
    // [kernel-clock] On the GPU the kernel time (cold L2, every kernel of a call summed), where measured.
    const double ms = on_gpu && r.kernel.ms_median > 0 ? r.kernel.ms_median : r.ms;
    const double bwd = on_gpu && r.bwd_kernel.ms_median > 0 ? r.bwd_kernel.ms_median : r.bwd_ms;
    std::cout << std::left << std::setw(5) << r.step << std::setw(w_var) << r.variant << std::setw(6)
              << (r.passed() ? "PASS" : "FAIL") << std::right << std::setw(10) << mb(t.gmem_read + t.gmem_write)
              << std::setw(10) << std::defaultfloat << std::setprecision(4) << r.predicted.ms << std::setw(10) << r.model.ms
              << std::left << "  " << std::setw(8) << r.model.bound_by << std::right << std::setw(10) << ms;
    if (on_gpu)
      std::cout << std::setw(9) << std::fixed << std::setprecision(2) << (r.model.ms > 0 ? ms / r.model.ms : 0.0)
                << std::setw(9) << std::setprecision(1) << (ms > 0 ? r.shape.flops_fa_convention() / (ms * 1e-3) / 1e12 : 0.0)
                << std::defaultfloat;
    std::cout << std::setw(10) << std::setprecision(4);
    if (r.has_backward) std::cout << bwd;
    else std::cout << "-";
    std::cout << "\n";
    // What it teaches, indented under the row and wrapped at word boundaries.
    const std::string indent = "     ";
    std::istringstream words(st->teaches);
    std::string line = indent;
    for (std::string w; words >> w;) {
      if (line.size() > indent.size() && line.size() + 1 + w.size() > size_t(kWidth)) {
        std::cout << line << "\n";
        line = indent;
      }
      line += (line.size() > indent.size() ? " " : "") + w;
    }
    if (line.size() > indent.size()) std::cout << line << "\n";
  }
  std::cout << "\nroofline: the ledger's bytes and FLOPs over " << (on_gpu ? "this GPU's queried peaks" : "an H200's datasheet peaks")
            << (on_gpu ? "; kernel ms: every kernel of a call summed, on a cold L2 (docs/profiling.md, \"One clock\")"
                       : ";\n          CPU ms is the blueprint's own time, not a GPU figure")
            << "\nmodel: every resource's term over the ceilings, with the launch's occupancy and coverage;\n"
            << "          bound by = its busiest resource (./stepNN prints every term); ceilings:\n          "
            << (records.empty() ? std::string("-") : records.front().model.ceilings_source) << "\n";
  return failed ? 1 : 0;
}
