// The one runner every step program uses: parse flags, pick GPU or CPU blueprint, make the seeded
// inputs, check against the Eigen reference, report the ledger, the roofline and the measurement —
// for the forward, and for the backward of a step that has one. Three files: the record and its
// CSV row (harness/record.cpp), one run (harness/runner.cpp), the report and the program's main
// (harness/report.cpp).
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

#include "harness/cli.hpp"
#include "harness/record.hpp"
#include "perf/roofline.hpp"
#include "reference/checks.hpp"
#include "core/step.hpp"

namespace fa {

// [model] The bytes of a problem's tensors (Q, K, V, O, L; the gradients too for a backward): the
// least HBM must deliver, the model's cap on a kernel's reads from HBM.
double model_tensor_bytes(const Shape& s, bool backward);

// Runs one step on one shape on the chosen backend and checks it (used by the program and tests).
RunRecord run_once(const StepInfo& step, const CliOptions& o, bool on_gpu);

// The step program. `previous`: the step before this one when the program links it (labNN does),
// for --grade --min-speedup; null otherwise.
int run_step_main(const StepInfo& step, int argc, char** argv, const StepInfo* previous = nullptr);

}  // namespace fa
