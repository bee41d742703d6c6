// A step's registration: what the shared runner, the tests and the tools need from it.
#pragma once
#include <cstddef>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernel/attn_params.hpp"
#include "blueprint/ledger.hpp"
#include "perf/model.hpp"
#include "core/problem.hpp"

namespace fa {

// A flag of the step's own (e.g. step 01's --gemm wmma|cublas). Always a choice among strings.
struct StepFlag {
  std::string name;                  // without the dashes: "gemm"
  std::vector<std::string> choices;  // the first is the default
  std::string help;
  // false: an experiment rather than a variant (step 12's --ablate). Such a flag is absent from a
  // step's options at its default (so the run's variant name stays "-"), and all_variants() leaves
  // it out: the tour, bench and the shape-matrix tests do not multiply by it.
  bool sweep = true;
};

// What this build or this GPU cannot run (a feature the architecture lacks, a shared-memory budget
// above the device's limit, a combination that is not compiled): the step program exits 2 with the
// message, which names the step, what is missing and what it needs.
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};
using StepOptions = std::map<std::string, std::string>;  // flag name -> chosen value

struct BlueprintResult {
  Forward out;       // O rounded to the storage type, L in fp32
  LedgerSet ledger;  // counted while it ran
};

struct BackwardBlueprintResult {
  Grads grads;       // dQ, dK, dV rounded to the storage type
  LedgerSet ledger;  // counted while it ran
  // [saved-for-backward] What the forward wrote for this backward beyond O and L (step 08's --bwd
  // stored: P), counted apart from `ledger`: the forward's cost, not the backward's. Empty for most.
  LedgerSet saved;
};

// [lab-region] A lab region of the step's files (// lab:begin NAME {TAGS}: hint), read by CMake at
// configure time: where a mistake in it shows (O, L, dQ, dK, dV, ledger) and the cases it is about
// (causal, ragged, gqa, window, dropout, or a flag's value), for --grade's "look at".
struct LabRegion {
  std::string file;  // "blueprint.cpp" (the CPU track's) or "kernel.cu" (the GPU track's)
  std::string name;  // "dq-atomic"
  std::string tags;  // "dQ", "O L ledger", "" (no tags: it may show anywhere)
};

struct StepInfo {
  std::string id;       // "01"
  std::string slug;     // "naive" (the folder is steps/01_naive)
  std::string title;    // "naive three-kernel attention"
  std::string teaches;  // one line for tables
  std::vector<StepFlag> flags;

  // The schedule run on the CPU, counting its ledger.
  BlueprintResult (*blueprint)(const Shape&, const Inputs&, const StepOptions&) = nullptr;
  // The same ledger in closed form (what the doc derives).
  LedgerSet (*closed_form)(const Shape&, const StepOptions&) = nullptr;

  // [mma-unit] The MMA instruction family the step's kernels run their products on (the model's
  // tensor ceiling is that family's); a flag may change it (step 01's --gemm cublas).
  MmaUnit mma_unit = MmaUnit::wmma;
  MmaUnit (*mma_unit_for)(const StepOptions&) = nullptr;
  MmaUnit unit(const StepOptions& o) const { return mma_unit_for ? mma_unit_for(o) : mma_unit; }

  // The GPU side; null when the project was built without CUDA. `stream` is a cudaStream_t.
  void (*launch)(const AttnParams&, const StepOptions&, void* stream) = nullptr;
  size_t (*workspace_bytes)(const Shape&, const StepOptions&) = nullptr;
  // Prefix shared by the step's kernel names (Nsight filters on it), e.g. "step01_".
  std::string kernel_prefix;

  // [arch] What the GPU side needs, held against the device before any launch (common/core/arch.hpp).
  // Every GPU this project builds for (sm_75 and later: CUDA 13 dropped the older ones) has fp16
  // tensor cores (WMMA) and ldmatrix; a step whose kernels use more says what, and from which
  // compute capability (major·10 + minor). bf16 operands of the tensor cores come with sm_80.
  int min_cc = 75;
  std::string needs;      // what sets min_cc: "mma.sync.m16n8k16 and cp.async"
  int bf16_min_cc = 80;   // what --dtype bf16 needs: sm_80 wherever the kernels feed bf16 to tensor cores
  // An architecture-specific instruction set (wgmma, setmaxnreg: sm_90a) runs on that compute
  // capability alone, not on later ones: max_cc = 90 (0: no upper bound).
  int max_cc = 0;
  // The head dimensions the GPU side is compiled for (empty: every one the project has); others are
  // refused, with head_dims_why as the reason. The blueprint runs every head dimension.
  std::vector<int> head_dims;
  std::string head_dims_why;
  // A choice of the step's flags that its kernels do not offer at this shape (step 16's --tiles
  // 192x128 at d = 128): the reason, or empty. Held against the GPU with the rules above.
  std::string (*options_reason)(const Shape&, const StepOptions&) = nullptr;
  // d = 256 (kWideHeadDim) is a head dimension only for a step whose head_dims list it: the others'
  // tiles, on the CPU too, are sized for d <= 128, and they refuse it on every backend.
  bool takes_d(int64_t d) const {
    if (d != 256) return true;
    for (int x : head_dims)
      if (x == 256) return true;
    return false;
  }
  // Shared memory per block of the step's largest kernel for a shape, from its schedule (bytes);
  // above the device's opt-in limit the shape is refused. The backward's, for a step that has one.
  int64_t (*smem_bytes)(const Shape&, const StepOptions&) = nullptr;
  int64_t (*backward_smem_bytes)(const Shape&, const StepOptions&) = nullptr;

  // A step that runs another step's forward (step 08 runs step 07's) names it here; "" = its own.
  // blueprint / closed_form / launch above are then that step's.
  std::string forward_from;
  std::string forward_from_dropout;  // [forward-from] with --dropout, when it is another step's

  // --dropout P (common/kernel/dropout.hpp): the steps whose forward (and backward) apply it; any other
  // step refuses a nonzero P with a message.
  bool supports_dropout = false;
  // [dropout] Options a run with dropout needs besides the variant's (step 19: --dropout-kernel run, its
  // dropout being an experiment it refuses by default): the lab grade runs its dropout cases with them.
  StepOptions dropout_options;
  // [fp8] The step runs Q, K and V in e4m3 (--dtype e4m3: its default and only storage type, O in
  // bf16); every other step refuses e4m3, and an FP8 step refuses fp16 and bf16.
  bool fp8 = false;
  // [gqa] [window] Whether the step takes --hkv below --h and --window (the reference does; a step
  // that does not refuses them with exit 2).
  bool supports_gqa = false, supports_window = false;
  // [cache-lens] A decoding step (17): it takes --qlen (N, at most max_n), --cache-lens and --ragged,
  // and its default shapes are decoding's (one new token per sequence against a long cache).
  bool supports_decode = false;
  int64_t max_n = 0;  // 0: no limit
  // Whether the step's experiments (its flags with sweep = false) are schedule choices compiled for
  // every storage type and head dimension (step 17's --splits and --combine, step 18's --ranks, step
  // 19's --dq), rather than kernels compiled for fp16 at d = 64 and 128 only (step 12's --ablate): the
  // GPU tests run them everywhere instead of expecting a refusal, except where the step's own
  // options_reason refuses one (step 19's and 20's ablations elsewhere).
  bool experiments_everywhere = false;
  // Once per problem on the GPU, before the checked launch and outside the timing: what the step
  // sets up that is not part of one call (step 17: the paged cache's pool and block table, the
  // new tokens' K/V taken out of the K/V inputs). `stream` is a cudaStream_t. Null: nothing.
  void (*prepare)(const Shape&, const AttnParams&, const StepOptions&, void* stream) = nullptr;

  // The backward pass, for steps that have one (null otherwise). Inputs: Q, K, V, the forward's O
  // and L, and dO. The launcher gets BwdParams; its scratch is backward_workspace_bytes().
  BackwardBlueprintResult (*backward_blueprint)(const Shape&, const Inputs&, const Forward&, const Tensor4& dO,
                                                const StepOptions&) = nullptr;
  LedgerSet (*backward_closed_form)(const Shape&, const StepOptions&) = nullptr;
  void (*launch_backward)(const BwdParams&, const StepOptions&, void* stream) = nullptr;
  size_t (*backward_workspace_bytes)(const Shape&, const StepOptions&) = nullptr;
  bool has_backward() const { return backward_blueprint != nullptr; }

  // [saved-for-backward] A backward schedule that reads a tensor the forward must have written
  // beyond O and L (step 08's --bwd stored reads P, N × Nk per head): its ledger in closed form
  // (what the blueprint counts in BackwardBlueprintResult::saved; empty when the variant saves
  // nothing), and on the GPU its size and the kernel that writes it into BwdParams::saved from the
  // forward's tensors. The harness runs that kernel once before the checked backward launch and
  // times it apart: the backward's own timing and ledger never include it. Null: nothing saved.
  LedgerSet (*saved_closed_form)(const Shape&, const StepOptions&) = nullptr;
  size_t (*backward_saved_bytes)(const Shape&, const StepOptions&) = nullptr;
  void (*launch_save)(const BwdParams&, const StepOptions&, void* stream) = nullptr;

  std::string program_name;  // set only by tools that are not a step (the tour)
  std::vector<LabRegion> lab_regions;  // [lab-region] set by the generated main (cmake/steps.cmake)
  std::string program() const { return program_name.empty() ? "step" + id : program_name; }
  // Every option at its default value.
  StepOptions default_options() const {
    StepOptions o;
    for (const auto& f : flags)
      if (f.sweep) o[f.name] = f.choices.front();
    return o;
  }
  // Every combination of the step's own flags, the defaults first (tour, bench, tests); flags that
  // are not swept stay at their defaults.
  std::vector<StepOptions> all_variants() const {
    std::vector<StepOptions> out = {StepOptions{}};
    for (const auto& f : flags) {
      if (!f.sweep) continue;
      std::vector<StepOptions> next;
      for (const auto& o : out)
        for (const auto& c : f.choices) {
          StepOptions x = o;
          x[f.name] = c;
          next.push_back(x);
        }
      out = next;
    }
    return out;
  }
  // The defaults, then each value of each flag that is not swept, one at a time (bench --variants
  // ablations: step 12's ablation table).
  std::vector<StepOptions> ablation_variants() const {
    std::vector<StepOptions> out = {default_options()};
    for (const auto& f : flags)
      if (!f.sweep)
        for (size_t c = 1; c < f.choices.size(); ++c) {
          StepOptions x = default_options();
          x[f.name] = f.choices[c];
          out.push_back(x);
        }
    return out;
  }
};

// The index of the value a step's flag was given among `names` (0, the default, when the flag is
// absent): what step 12's --ablate and step 13's --tiles and --experiment select their variant by.
// An unknown value throws std::invalid_argument naming the step and the flag.
inline int choice_index(const StepOptions& o, const std::string& flag, const char* const* names, int count,
                        const std::string& step) {
  const auto it = o.find(flag);
  if (it == o.end()) return 0;
  for (int k = 0; k < count; ++k)
    if (it->second == names[k]) return k;
  throw std::invalid_argument(step + ": unknown --" + flag + " " + it->second);
}

// [forward-from] A step that runs another step's forward before its own backward (step 08 runs
// step 07's, step 13 step 12's): the forward's entries of its registration are From's, called with
// From's own defaults whatever this step's flags say, and forward_from names From. With Dropout given,
// a shape with dropout takes Dropout's forward instead (step 19: step 16 has none, step 12 draws the
// mask), and forward_from_dropout names it.
template <const StepInfo& (*From)(), const StepInfo& (*Dropout)() = nullptr>
void borrow_forward(StepInfo& i) {
  i.forward_from = From().id;
  if constexpr (Dropout != nullptr) i.forward_from_dropout = Dropout().id;
  // The step whose forward runs this shape.
  static constexpr auto pick = [](const Shape& s) -> const StepInfo& {
    if constexpr (Dropout != nullptr)
      if (s.dropout > 0.0) return Dropout();
    return From();
  };
  i.blueprint = [](const Shape& s, const Inputs& in, const StepOptions&) { return pick(s).blueprint(s, in, {}); };
  i.closed_form = [](const Shape& s, const StepOptions&) { return pick(s).closed_form(s, {}); };
  i.smem_bytes = [](const Shape& s, const StepOptions&) { return pick(s).smem_bytes(s, {}); };
#ifdef FA_HAVE_CUDA
  i.launch = [](const AttnParams& p, const StepOptions&, void* stream) {
    if constexpr (Dropout != nullptr)
      if (p.dropout > 0.0f) return Dropout().launch(p, {}, stream);
    From().launch(p, {}, stream);
  };
  i.workspace_bytes = [](const Shape& s, const StepOptions&) { return pick(s).workspace_bytes(s, {}); };
#endif
}

}  // namespace fa
