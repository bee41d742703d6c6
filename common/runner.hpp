// The one runner every step program uses: parse flags, pick GPU or CPU blueprint, make the seeded
// inputs, check against the Eigen reference, report the ledger, the roofline and the measurement.
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

#include "cli.hpp"
#include "device.hpp"
#include "metrics.hpp"
#include "step.hpp"

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
  double ms = 0;             // GPU median, or the blueprint's CPU wall time
  int reps = 0;
  int64_t stray_writes = 0;
  double tflops() const { return ms > 0 ? shape.flops_fa_convention() / (ms * 1e-3) / 1e12 : 0.0; }
};

std::string variant_name(const StepOptions& o);  // "gemm=wmma" or "-" when the step has no flags
std::string csv_header();
std::string csv_row(const RunRecord& r);

// Runs one step on one shape on the chosen backend and checks it (used by the program and tests).
RunRecord run_once(const StepInfo& step, const CliOptions& o, bool on_gpu);

int run_step_main(const StepInfo& step, int argc, char** argv);

}  // namespace fa
