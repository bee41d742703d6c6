// The step program: its report (the check, the ledger, the model, the three clocks) and its main
// (flags, the GPU or the CPU, refusals, --grade, --csv). One run itself is harness/runner.cpp.
#include "harness/runner.hpp"

#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>

#include "core/arch.hpp"
#include "harness/gpu.hpp"
#include "harness/grade.hpp"

namespace fa {

namespace {

// "stepNN: cannot run: <why>": an Unsupported message names its step first (tools print it alone);
// the program's own name is already in front of it.
int refuse(const StepInfo& step, const Unsupported& e) {
  std::string why = e.what();
  const std::string own = step.program() + ": ";
  if (why.rfind(own, 0) == 0) why = why.substr(own.size());
  std::cerr << step.program() << ": cannot run: " << why << "\n";
  return 2;
}

// The ledger (counted or closed form) and the roofline it predicts: the forward's, then the backward's.
void print_cost(std::ostream& os, const RunRecord& r, const LedgerSet& ledger, bool matches, const std::string& diff,
                const Prediction& p, const ModelPrediction& m, const std::string& launches_note) {
  os << "ledger    " << (r.backend == "cpu" ? "counted by the blueprint" : "closed form (the blueprint counts the same; see tests)");
  if (r.backend == "cpu") os << (matches ? "; equals the closed form" : "; DIFFERS from the closed form: " + diff);
  os << "\n";
  print_ledger(os, ledger);
  os << std::defaultfloat << "roofline  " << std::setprecision(4) << p.ms << " ms predicted ("
     << (p.memory_bound() ? "memory-bound" : "compute-bound") << ": bytes/bandwidth " << p.ms_memory
     << " ms, FLOPs/peak " << p.ms_compute << " ms)\n"
     << "          for " << r.predicted_for << "\n";
  // [model] Every resource's term, kernel by kernel, and what bounds each.
  if (!m.kernels.empty()) print_model(os, m);
  if (!launches_note.empty()) os << "          launches not recorded: " << launches_note << "\n";
  os << std::fixed;
}

// "measured ..." on a GPU, "cpu time ..." for a blueprint. `flops_note` says how the FLOPs are counted.
// [kernel-clock] [graph-time] On a GPU three clocks: the kernel time (the one comparisons use), the
// CUDA events around each launch, and the time per call in a CUDA graph.
void print_time(std::ostream& os, const RunRecord& r, double ms, int reps, double flops, const KernelTime& kt,
                double graph_ms, const std::string& graph_note, const CliOptions& o, const std::string& flops_note) {
  if (r.backend == "gpu") {
    if (reps > 0) {
      auto tf = [&](double t) { return t > 0 ? flops / (t * 1e-3) / 1e12 : 0.0; };
      if (kt.ms_median > 0) {
        os << "measured  " << std::setprecision(4) << kt.ms_median << " ms kernel time: median of " << kt.ms.size()
           << " calls, each on a cold L2, every kernel it ran summed (" << kt.activities << " on the GPU";
        if (kt.parts.size() > 1) {
          os << ":";
          for (const auto& [name, t] : kt.parts) os << " " << name << " " << std::setprecision(4) << t;
        }
        os << "), " << std::setprecision(1) << tf(kt.ms_median) << " TFLOP/s\n          (FlashAttention's convention: "
           << flops_note << (r.shape.causal ? ", halved for causal" : "") << ")\n";
      } else {
        os << "measured  no kernel time: " << kt.note << "\n";
      }
      os << "          " << std::setprecision(4) << ms << " ms between CUDA events around one launch (median of " << reps
         << ", after " << o.warmup << " warm-up; the launch's host cost included), " << std::setprecision(1) << tf(ms)
         << " TFLOP/s\n";
      if (graph_ms > 0)
        os << "          " << std::setprecision(4) << graph_ms << " ms per call in a CUDA graph of " << r.graph_calls
           << " calls back to back (median of the replays), " << std::setprecision(1) << tf(graph_ms) << " TFLOP/s\n";
      else if (!graph_note.empty())
        os << "          no graph time: " << graph_note << "\n";
    } else {
      os << "measured  --reps 0: checked only, not timed\n";
    }
  } else {
    os << "cpu time  " << std::setprecision(1) << ms << " ms for the blueprint (CPU loops with counting; not a GPU figure)\n";
  }
}

// [noise] [model] The runs' spread, and the measurement against the model: measured / predicted.
void print_against_model(std::ostream& os, const RunRecord& r, double ms, double lo, double hi, const ModelPrediction& m) {
  if (r.backend != "gpu" || ms <= 0) return;
  if (r.runs > 1)
    os << "spread    " << r.runs << " runs: their medians from " << std::setprecision(3) << lo << " to " << hi << " ms ("
       << std::setprecision(1) << (lo > 0 ? 100.0 * (hi - lo) / lo : 0.0) << " %)\n";
  if (m.ms > 0)
    os << "vs model  measured / predicted = " << std::setprecision(2) << ms / m.ms << " (bound by " << m.bound_by << ")\n";
}

void indent_lines(std::ostream& os, const std::string& label, const std::string& text) {
  std::istringstream in(text);
  std::string line;
  for (bool first = true; std::getline(in, line); first = false) os << (first ? label : "          ") << line << "\n";
}

void print_report(std::ostream& os, const StepInfo& step, const RunRecord& r, const CliOptions& o) {
  os << std::fixed;
  os << "shape     " << r.shape.str() << ", scale " << std::setprecision(4) << r.shape.softmax_scale() << ", seed "
     << r.seed;
  if (r.shape.dropout > 0.0) os << ", dropout seed " << r.shape.dropout_seed;
  if (!step.flags.empty()) os << ", " << r.variant;
  os << "\n";
  os << "check     " << r.check.summary() << "\n";
  if (r.shape.fp8)
    os << "          [fp8] checked against the reference on the dequantized inputs; against the bf16 inputs (FP8's own\n"
       << "          error, not a check): RMSE " << std::scientific << std::setprecision(3) << r.raw_rmse << " (RMSE here "
       << r.rmse << ")" << std::defaultfloat << "\n";
  if (r.device_inputs)
    os << "          inputs drawn on the GPU (K above 2^28 elements); the reference checked " << r.checked_groups
       << " (sequence, key/value head) groups, every query head of each\n";
  if (r.stray_writes) os << "          FAIL: " << r.stray_writes << " elements of the NaN padding around O or L were overwritten\n";
  print_cost(os, r, r.ledger, r.ledger_matches_closed_form, r.ledger_diff, r.predicted, r.model,
             r.launches.empty() ? r.launches_note : "");
  print_time(os, r, r.ms, r.reps, r.shape.flops_fa_convention(), r.kernel, r.graph_ms, r.graph_note, o, "4·B·H·N·Nk·d");
  print_against_model(os, r, r.ms, r.ms_min, r.ms_max, r.model);
  if (r.has_backward) {
    os << "\nbackward  dO = randn in " << dtype_name(r.shape.dtype) << " (seed " << r.seed
       << ", its own stream); the Eigen reference on " << r.bwd_check.checked_heads << " of " << r.shape.B * r.shape.H
       << " heads\n";
    indent_lines(os, "check     ", r.bwd_check.summary());
    if (r.bwd_stray_writes)
      os << "          FAIL: " << r.bwd_stray_writes << " elements of the NaN padding around dQ, dK or dV were overwritten\n";
    print_cost(os, r, r.bwd_ledger, r.bwd_ledger_matches_closed_form, r.bwd_ledger_diff, r.bwd_predicted, r.bwd_model,
               r.bwd_launches.empty() ? r.launches_note : "");
    print_time(os, r, r.bwd_ms, r.bwd_reps, RunRecord::kBackwardFlopFactor * r.shape.flops_fa_convention(), r.bwd_kernel,
               r.bwd_graph_ms, r.bwd_graph_note, o, "2.5 × the forward's 4·B·H·N·Nk·d");
    if (r.has_saved) {
      // [saved-for-backward] Charged to neither pass above: what the forward wrote for this backward.
      os << "saved     what the forward writes for this backward beyond O and L, charged apart from both\n";
      print_cost(os, r, r.saved_ledger, r.saved_ledger_matches_closed_form, r.saved_ledger_diff, r.saved_predicted, {}, "");
      if (r.backend == "gpu") {
        if (r.save_reps > 0)
          os << "measured  " << std::setprecision(3) << r.save_ms << " ms median of " << r.save_reps << ", the writing kernel alone\n";
        else os << "measured  --reps 0: written once, not timed\n";
      } else {
        os << "cpu time  counted inside the backward's blueprint run above\n";
      }
    }
    print_against_model(os, r, r.bwd_ms, r.bwd_ms_min, r.bwd_ms_max, r.bwd_model);
    os << "\n";
  }
  os << "read      docs/" << step.id << "_" << step.slug << ".md beside steps/" << step.id << "_" << step.slug << "/\n";
}

}  // namespace

int run_step_main(const StepInfo& step, int argc, char** argv, const StepInfo* previous) {
  std::vector<std::string> args(argv + 1, argv + argc);
  CliOptions o;
  try {
    o = parse_cli(step, args);
  } catch (const CliError& e) {
    std::cerr << step.program() << ": error: " << e.what() << "\n";
    return 2;
  }
  if (o.help) {
    std::cout << usage(step);
    return 0;
  }
  // --grade: every check, each case in a child process (common/harness/grade.hpp).
  if (o.grade_case >= 0) return run_grade_child(step, previous, o);
  if (o.grade) return run_grade(step, previous, o, args, argc > 0 ? argv[0] : step.program());

  bool on_gpu = false;
  std::string why;
  const bool have_gpu = step.launch != nullptr && gpu_available(why);
  if (step.launch == nullptr && why.empty()) why = "this build has no GPU kernels for step " + step.id;
  // [arch] What this GPU cannot run is refused now, before anything is computed (the GPU harness
  // holds the same rule before every launch). With --backend gpu and no GPU, FA_FAKE_CC stands for
  // one: the refusal is the one such a GPU would get.
  if (step.launch != nullptr && (have_gpu ? o.backend != Backend::Cpu : o.backend == Backend::Gpu)) {
    try {
      std::optional<GpuCaps> caps;
      if (have_gpu) caps = gpu_caps();
      else if (const std::optional<int> cc = fake_cc_from_env()) caps = with_fake_cc(GpuCaps{}, *cc);
      CliOptions g = o;
      apply_default_shape(g, true);  // the shape it would run on the GPU
      if (caps) require_supported(step, g.shape, g.step, *caps, step.has_backward());
    } catch (const Unsupported& e) {
      return refuse(step, e);
    } catch (const CliError&) {
      // a bad shape: reported below, as without a GPU
    } catch (const std::invalid_argument& e) {  // FA_FAKE_CC is not a compute capability
      std::cerr << step.program() << ": error: " << e.what() << "\n";
      return 2;
    } catch (const std::exception& e) {
      std::cerr << step.program() << ": error: " << e.what() << "\n";
      return 1;
    }
  }
  if (o.backend == Backend::Gpu && !have_gpu) {
    std::cerr << step.program() << ": error: --backend gpu, but " << why << "\n";
    return 2;
  }
  on_gpu = have_gpu && o.backend != Backend::Cpu;
  if (o.graph_given && !on_gpu) {
    std::cerr << step.program() << ": error: --graph times calls captured in a CUDA graph, on the GPU; this run is the CPU blueprint ("
              << (o.backend == Backend::Cpu ? "--backend cpu" : why) << ")\n";
    return 2;
  }
  try {
    apply_default_shape(o, on_gpu);
  } catch (const CliError& e) {
    std::cerr << step.program() << ": error: " << e.what() << "\n";
    return 2;
  }
  if (!step.takes_d(o.shape.d)) {
    std::cerr << step.program() << ": error: --d " << o.shape.d
              << " is for steps 14-16 (their Hopper kernels and blueprints); this step's tiles are sized for d <= 128\n";
    return 2;
  }

  if (!o.csv) {
    std::cout << step.program() << " — " << step.title << "\n";
    if (!on_gpu && o.backend == Backend::Auto) std::cout << why << ": running the CPU blueprint instead\n";
    if (on_gpu) {
      const DeviceSpec d = gpu_device_spec();
      std::cout << "device    " << d.name << " (sm_" << d.cc_major << d.cc_minor << "), CUDA " << cuda_version_string()
                << "\n          " << d.sm_count << " SMs, L2 " << d.l2_bytes / (1024 * 1024) << " MiB, shared memory "
                << d.smem_per_block_optin / 1024 << " KiB per block (opt-in), " << std::fixed << std::setprecision(2)
                << d.hbm_bytes_per_s / 1e12 << " TB/s, " << std::setprecision(0) << d.tensor_flops / 1e12
                << " TFLOP/s tensor, " << d.fp32_flops / 1e12 << " TFLOP/s fp32 (queried)\n";
      if (const GpuCaps c = gpu_caps(); c.fake_cc)
        std::cout << "          FA_FAKE_CC=" << c.fake_cc << ": what compute capability " << cc_string(c.fake_cc)
                  << " cannot run is refused (" << c.smem_optin / 1024 << " KiB of shared memory per block)\n";
    }
    std::cout.flush();
  }

  RunRecord r;
  try {
    r = run_once(step, o, on_gpu);
  } catch (const Unsupported& e) {
    return refuse(step, e);
  } catch (const std::exception& e) {
    std::cerr << step.program() << ": error: " << e.what() << "\n";
    return 1;
  }
  if (!o.ledger_csv.empty()) {
    std::ofstream f(o.ledger_csv);
    write_ledger_csv(f, all_kernels(r));
    if (!f) {
      std::cerr << step.program() << ": error: cannot write " << o.ledger_csv << "\n";
      return 1;
    }
  }
  if (o.csv) {
    std::cout << csv_header() << "\n" << csv_row(r) << "\n";
  } else {
    print_report(std::cout, step, r, o);
  }
  return r.ok() ? 0 : 1;
}

}  // namespace fa
