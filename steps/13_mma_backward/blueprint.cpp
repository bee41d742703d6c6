// Step 13 — the blueprint (TEMPORARY registration; the CPU schedule is being written).
#include <stdexcept>

#include "schedule.hpp"

namespace fa::step12 {
const StepInfo& info();
}

namespace fa::step13 {

bool deterministic(const StepOptions& o) {
  const auto it = o.find("deterministic");
  return it != o.end() && it->second == "on";
}
int tiles_of(const StepOptions& o) {
  const auto it = o.find("tiles");
  if (it == o.end()) return kAuto;
  for (int a = 0; a < kTileChoices; ++a)
    if (it->second == kTileNames[a]) return a;
  throw std::invalid_argument("step13: unknown --tiles " + it->second);
}

namespace {
BackwardBlueprintResult run_backward(const Shape&, const Inputs&, const Forward&, const Tensor4&, const StepOptions&) {
  throw std::logic_error("step13: blueprint not written yet");
}
LedgerSet run_backward_closed_form(const Shape&, const StepOptions&) { return {}; }
BlueprintResult run_forward(const Shape& s, const Inputs& in, const StepOptions&) { return step12::info().blueprint(s, in, {}); }
LedgerSet run_forward_closed_form(const Shape& s, const StepOptions&) { return step12::info().closed_form(s, {}); }
int64_t run_forward_smem(const Shape& s, const StepOptions&) { return step12::info().smem_bytes(s, {}); }
int64_t run_backward_smem(const Shape& s, const StepOptions& o) { return smem_bytes(schedule_for(int(s.d), tiles_of(o)), int(s.d)); }
#ifdef FA_HAVE_CUDA
void run_forward_launch(const AttnParams& p, const StepOptions&, void* stream) { step12::info().launch(p, {}, stream); }
size_t run_forward_workspace(const Shape& s, const StepOptions&) { return step12::info().workspace_bytes(s, {}); }
#endif
}  // namespace

const StepInfo& info() {
  static const StepInfo step = [] {
    StepInfo i;
    i.id = "13";
    i.slug = "mma_backward";
    i.title = "the backward on tensor cores: Sᵀ and dPᵀ per warp's keys, P and dS in registers (forward: step 12)";
    i.teaches = "backward at FlashAttention-2's speed; deterministic dQ; dropout";
    i.flags = {{"deterministic", {"off", "on"}, "dQ without racing atomics: a buffer per split, summed in a fixed order"}};
    {
      StepFlag f{"tiles", {}, "the backward's tile shape, Br x Bc (fp16, d = 64 and 128; docs/13_mma_backward.md, 'Tuning')"};
      for (const char* n : kTileNames) f.choices.push_back(n);
      f.sweep = false;
      i.flags.push_back(f);
    }
    i.blueprint = run_forward;
    i.closed_form = run_forward_closed_form;
    i.forward_from = "12";
    i.supports_dropout = true;
    i.backward_blueprint = run_backward;
    i.backward_closed_form = run_backward_closed_form;
    i.smem_bytes = run_forward_smem;
    i.backward_smem_bytes = run_backward_smem;
    i.min_cc = 80;
    i.needs = "mma.sync.m16n8k16 and cp.async";
#ifdef FA_HAVE_CUDA
    i.launch = run_forward_launch;
    i.workspace_bytes = run_forward_workspace;
    i.launch_backward = launch_backward;
    i.backward_workspace_bytes = backward_workspace_bytes;
#endif
    i.kernel_prefix = "step13_";
    return i;
  }();
  return step;
}

}  // namespace fa::step13
