// One run's record (RunRecord) and its CSV row: what a report, a table or a test reads of a run.
// Filled by run_once (harness/runner.hpp), printed by the report (harness/report.cpp), written by
// --csv, bench and the scripts that read plots/data/.
#pragma once
#include <string>
#include <vector>

#include "harness/cli.hpp"
#include "harness/gpu.hpp"
#include "perf/roofline.hpp"
#include "reference/checks.hpp"
#include "core/step.hpp"

namespace fa {

// One run of one step on one shape: everything a report or a CSV row needs.
struct RunRecord {
  std::string step, variant, backend, device;
  Shape shape;
  uint64_t seed = 0;
  Check check;
  LedgerSet ledger;          // counted (CPU) or closed form (GPU)
  bool ledger_matches_closed_form = true;
  std::string ledger_diff;
  Prediction predicted;      // for the device at hand (or the H200 datasheet on the CPU)
  std::string predicted_for;
  // [model] The per-resource model (common/perf/model.hpp) from the ledger, the recorded launches and
  // the ceilings — made before the timed launches, from what they cannot change.
  ModelPrediction model;
  std::vector<KernelLaunch> launches;
  std::string launches_note;
  double ms = 0;             // GPU median, or the blueprint's CPU wall time
  double ms_min = 0, ms_max = 0;  // [noise] the spread of the timed runs' medians (GPU)
  int runs = 1;
  int reps = 0;
  // [kernel-clock] [graph-time] The same launches by the GPU's own records (cold L2, every kernel
  // summed), and the time per call of a CUDA graph of graph_calls calls: the clock the course's
  // speed comparisons use (docs/profiling.md, "One clock"). 0 where not measured; the notes say why.
  KernelTime kernel;
  double graph_ms = 0;
  std::string graph_note;
  int graph_calls = 0;
  int64_t stray_writes = 0;
  // O's RMSE against the checked reference; [fp8] for an fp8 run, also against the reference on the
  // inputs before quantization (FP8's own error, measured, not checked). Negative: not computed.
  double rmse = -1, raw_rmse = -1;
  std::string inputs = "default";  // [outliers] --inputs
  // [device-inputs] Inputs drawn on the GPU (a problem too large for the host), checked on
  // checked_groups (sequence, key/value head) groups.
  bool device_inputs = false;
  int64_t checked_groups = 0;
  double tflops() const { return ms > 0 ? shape.flops_fa_convention() / (ms * 1e-3) / 1e12 : 0.0; }
  double kernel_tflops() const {
    return kernel.ms_median > 0 ? shape.flops_fa_convention() / (kernel.ms_median * 1e-3) / 1e12 : 0.0;
  }

  // The backward pass, for a step that has one: dO = make_grad_output(shape, seed), the gradients
  // checked against reference_backward on pick_heads(shape); the rest as for the forward.
  bool has_backward = false;
  BackwardCheck bwd_check;
  LedgerSet bwd_ledger;      // counted (CPU) or closed form (GPU)
  bool bwd_ledger_matches_closed_form = true;
  std::string bwd_ledger_diff;
  Prediction bwd_predicted;
  ModelPrediction bwd_model;
  std::vector<KernelLaunch> bwd_launches;
  double bwd_ms = 0;
  double bwd_ms_min = 0, bwd_ms_max = 0;
  int bwd_reps = 0;
  KernelTime bwd_kernel;  // [kernel-clock]
  double bwd_graph_ms = 0;  // [graph-time]
  std::string bwd_graph_note;
  int64_t bwd_stray_writes = 0;
  // FlashAttention's convention: the backward counts 2.5 times the forward's FLOPs.
  static constexpr double kBackwardFlopFactor = 2.5;
  double bwd_tflops() const {
    return bwd_ms > 0 ? kBackwardFlopFactor * shape.flops_fa_convention() / (bwd_ms * 1e-3) / 1e12 : 0.0;
  }
  double bwd_kernel_tflops() const {
    const double t = bwd_kernel.ms_median;
    return t > 0 ? kBackwardFlopFactor * shape.flops_fa_convention() / (t * 1e-3) / 1e12 : 0.0;
  }

  // [saved-for-backward] What the forward wrote for this backward beyond O and L (step 08's --bwd
  // stored: P), charged apart from both: its ledger (counted on the CPU, the closed form on a GPU),
  // its roofline, and on a GPU the median time of the kernel that writes it.
  bool has_saved = false;
  LedgerSet saved_ledger;
  bool saved_ledger_matches_closed_form = true;
  std::string saved_ledger_diff;
  Prediction saved_predicted;
  double save_ms = 0;
  int save_reps = 0;

  bool forward_passed() const { return check.pass && stray_writes == 0; }
  bool backward_passed() const { return !has_backward || (bwd_check.pass && bwd_stray_writes == 0); }
  // Every check passed (what a table's PASS/FAIL says) ...
  bool passed() const { return forward_passed() && backward_passed(); }
  // ... and every counted ledger equals its closed form (what the exit status says).
  bool ok() const {
    return passed() && ledger_matches_closed_form && bwd_ledger_matches_closed_form && saved_ledger_matches_closed_form;
  }
};

std::string variant_name(const StepOptions& o);  // "gemm=wmma" or "-" when the step has no flags
// One row per run. The backward's columns (bwd_*) come last and are empty for a step without one;
// `pass` is the forward's. The last three (bwd_save_*) are what the forward wrote for the backward
// ([saved-for-backward]), empty where it wrote nothing. The clock's columns ([kernel-clock],
// [graph-time]) are appended after the model's: kernel_ms, graph_ms (empty where not measured),
// graph_calls, kernel_tflops, their bwd_* twins, each kernel's median (kernels_ms:
// "name:ms;name:ms"), and `clock`, the kernel clock's method (kKernelClock).
std::string csv_header();
// The `clock` column of every row this build writes: what a table checks before it sets our
// kernel time beside a peer's (scripts/clock.py writes its own method for PyTorch's rows).
inline constexpr const char* kKernelClock = "cupti;l2-read-256MiB";
std::string format_parts(const std::vector<std::pair<std::string, double>>& parts);
std::string csv_row(const RunRecord& r);
// The forward's kernels, then what it saved for the backward, then the backward's, as one set
// (what --ledger-csv writes).
LedgerSet all_kernels(const RunRecord& r);

}  // namespace fa
