// Step 11 — the blueprint: step 10's, with the K/V tiles in two stages and tile j + 1 loaded
// before tile j is multiplied.
//
// The schedule is common/blueprint/mma_forward.cpp, shared with steps 09 and 10 (Tiles::stages = 2 turns on
// the pipeline's order of loads and barriers); the B fragments come through ldmatrix_x2() exactly as
// in step 10. The counts are step 10's — the same bytes, products and barriers per tile — apart
// from the footprint: two stages of K and V.
#include "blueprint/mma_emu.hpp"
#include "blueprint/mma_forward.hpp"
#include "schedule.hpp"

namespace fa::step11 {

namespace {

namespace mf = fa::m16n8k16;

// K_j as stored: blocks (keys 8n.., dims 16kk..) and (keys 8n.., dims 16kk + 8..), no .trans.
mf::BFrag k_frag(const SmemTile& Ks, int64_t n, int64_t kk) { return mf::ldmatrix_x2(Ks, 8 * n, 16 * kk, 16 * kk + 8, false); }
// V_j: blocks (keys 16kk.., dims 8n..) and (keys 16kk + 8.., dims 8n..), .trans.
mf::BFrag v_frag(const SmemTile& Vs, int64_t kk, int64_t n) { return mf::ldmatrix_x2(Vs, 16 * kk, 8 * n, 8 * n, true); }

mma_bp::Tiles tiles(const Schedule& sc, int64_t d) {
  mma_bp::Tiles t{sc.Br, sc.Bc, 0, kSmemBudget, smem_bytes(sc, int(d))};  // one stage: load, then multiply
  // lab:begin stages: give the schedule kStages buffers of K and V …
  t.stages = kStages;
  // lab:end
  return t;
}

}  // namespace

BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sc) {
  return mma_bp::forward(s, in, tiles(sc, s.d), "cp_async", k_frag, v_frag);
}

// The ledger in closed form (docs/11_cp_async.md): step 10's with two stages of K/V tiles
// (mma_bp::closed_form).
LedgerSet closed_form(const Shape& s, const Schedule& sc) { return mma_bp::closed_form(s, tiles(sc, s.d), "cp_async"); }

namespace {
BlueprintResult run_blueprint(const Shape& s, const Inputs& in, const StepOptions&) { return blueprint(s, in, kSchedule); }
LedgerSet run_closed_form(const Shape& s, const StepOptions&) { return closed_form(s, kSchedule); }
// [arch] Shared memory per block (schedule.hpp), held against the GPU's limit before a launch.
int64_t run_smem_bytes(const Shape& s, const StepOptions&) { return smem_bytes(kSchedule, int(s.d)); }
}  // namespace

const StepInfo& info() {
  static const StepInfo step = [] {
    StepInfo i;
    i.id = "11";
    i.slug = "cp_async";
    i.title = "the load pipeline: cp.async copies tile j + 1 while tile j is multiplied";
    i.teaches = "cp.async: the next K/V tile loads during the math";
    i.mma_unit = MmaUnit::mma_sync;  // [mma-unit]
    i.blueprint = run_blueprint;
    i.closed_form = run_closed_form;
    i.smem_bytes = run_smem_bytes;
    i.min_cc = 80;
    i.needs = "mma.sync.m16n8k16 and cp.async";
#ifdef FA_HAVE_CUDA
    i.launch = launch;
    i.workspace_bytes = workspace_bytes;
#endif
    i.kernel_prefix = "step11_";
    return i;
  }();
  return step;
}

}  // namespace fa::step11
