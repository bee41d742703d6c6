// --grade: every check of a step, one line each, for a student (or an autograder, --json) to act
// on; exit 0 only when all pass (docs/labs/). The checks are the tests' own:
//   cpu    the blueprint over the shape matrix (common/core/shapes.hpp; with the GQA/window, dropout
//          and decoding matrices of the features the step takes) against the Eigen reference, and
//          its counted ledger against closed_form() on each case (the backward's too, for a step
//          with one);
//   gpu    the kernels over the same matrix inside NaN-padded buffers (no stray writes allowed);
//          what this GPU cannot run is reported as refused, never as passed;
//   speed  with --min-speedup X, the step's GPU time against the previous step's at one shape
//          (only where the program links the previous step: labNN does).
// Isolation: each case runs in a child process — the program itself (/proc/self/exe) with the
// internal flag --grade-case K — under a time limit, so code that crashes, hangs or corrupts memory
// gives a failed check with a message, never a hung or crashed grader. A child runs cases K, K+1, ...
// of its track while they pass and exits after the first that does not (its state may be bad); the
// parent starts the next child there. Linux only (fork, exec, poll, waitpid).
#pragma once
#include <string>
#include <vector>

#include "harness/cli.hpp"
#include "core/step.hpp"

namespace fa {

// The parent: runs the tracks, prints the report, returns the exit status (0, 1, or 2 for bad flags).
// `previous` is the step before `step` when the program links it (for --min-speedup), else null;
// `args` are the program's arguments (without argv[0]), passed on to each child.
int run_grade(const StepInfo& step, const StepInfo* previous, const CliOptions& o, const std::vector<std::string>& args,
              const std::string& argv0);

// A child (--grade-case K): runs case K and those after it in its track, writing one record per
// check to the file descriptor named by FA_GRADE_FD (stdout without it).
int run_grade_child(const StepInfo& step, const StepInfo* previous, const CliOptions& o);

}  // namespace fa
