// The command line every step program shares (docs/anatomy.md, "Conventions every step follows"):
//   --b --h --n --nk --d --causal --dtype --seed --reps --csv --save DIR --help
// plus --backend, --scale, --dropout P [--dropout-seed S], --warmup, --ledger-csv FILE and the step's
// own flags (e.g. step 01's --gemm; one whose choices are off|on may be given bare, meaning on),
// and --grade [--json --track --min-speedup --timeout] (every check, one line each: common/harness/grade.hpp).
// Bad values throw CliError, whose message names the flag; the runner exits 2 on it.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/gpu.hpp"
#include "core/problem.hpp"
#include "core/step.hpp"

namespace fa {

struct CliError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Backend { Auto, Gpu, Cpu };

struct CliOptions {
  Shape shape;
  bool shape_given = false;  // any of --b --h --n --nk --d was given
  bool b_given = false, h_given = false, n_given = false, nk_given = false, d_given = false;
  bool dtype_given = false;
  bool fp8_flags_given = false;  // --fp8-scales or --incoherent ([fp8])
  uint64_t seed = 42;
  std::string inputs = "default";  // [outliers] --inputs default|normal|outliers (set_inputs)
  InputSpec input_spec() const {
    InputSpec s{seed};
    set_inputs(s, inputs);
    return s;
  }
  // --dropout P fills shape.dropout; the mask's seed (shape.dropout_seed) is --seed unless
  // --dropout-seed is given. Only a step with StepInfo::supports_dropout takes P > 0.
  bool dropout_given = false, dropout_seed_given = false;
  int reps = 20, warmup = 3;
  int runs = 1;  // --runs K: K timed runs of --reps launches, their medians' spread reported ([noise])
  // [graph-time] --graph K: K calls captured in one CUDA graph, timed per call (GPU only; K >= 1).
  int graph_calls = kGraphCalls;
  bool graph_given = false;
  int64_t check_heads = 0;  // --check-heads K: the backward's reference on K heads (0: pick_heads' rule)
  bool csv = false, help = false;
  std::string save_dir;
  std::string ledger_csv;  // --ledger-csv FILE: the ledger kernel by kernel (for comparing with Nsight)
  Backend backend = Backend::Auto;
  bool backend_given = false;
  // [cache-lens] --cache-lens L[,L...] (one length for every sequence, or one per sequence) and
  // --ragged (lengths drawn from --seed in 0 .. NK − N), for a decoding step; filled into
  // shape.cache_lens by apply_default_shape once B and NK are known.
  bool decode = false;  // the step is a decoding step (StepInfo::supports_decode)
  std::vector<int64_t> cache_lens_arg;
  bool ragged = false, hkv_given = false;
  StepOptions step;
  std::vector<std::string> step_flags_given;  // the step's own flags named on the command line

  // --grade (common/harness/grade.hpp): every check of the step, one line each, exit 0 only when all pass.
  bool grade = false;
  bool grade_json = false;    // --json: the report as one JSON object (for an autograder)
  bool grade_fails_only = false;  // --fails-only: print only the checks that did not pass
  std::string grade_track;    // --track cpu|gpu|both; "": cpu without a GPU, else both
  double min_speedup = 0;     // --min-speedup X: the GPU time against the previous step's; 0 = off
  double grade_timeout = 0;   // --timeout S: per case; 0 = the default (60 s CPU, 30 s GPU)
  int64_t grade_case = -1;    // --grade-case K (internal): the child process that runs case K on
};

// argv[0] is skipped. Throws CliError on any bad flag or value.
CliOptions parse_cli(const StepInfo& step, const std::vector<std::string>& args);
std::string usage(const StepInfo& step);

// Fill the shape fields the user did not give with the defaults for where the step runs:
// the CPU blueprint gets a small shape, a GPU FlashAttention's benchmark shape (B·N = 16k, H·d = 2048).
void apply_default_shape(CliOptions& o, bool on_gpu);

}  // namespace fa
