// Step 10 — the blueprint: step 09's, with every B fragment loaded as kernel.cu's ldmatrix does it.
//
// The schedule is common/blueprint/mma_forward.cpp, shared with step 09. The tiles here are logical (rows ×
// d, unpadded: the swizzle only permutes where a chunk sits, which the counting views do not
// model); ldmatrix_x2() (common/blueprint/mma_emu.hpp) hands each lane the elements common/kernel/mma_layout.hpp's
// ldm_elem() says it receives, and the product then checks that they are the B fragments the mma
// expects.
#include "blueprint/mma_emu.hpp"
#include "blueprint/mma_forward.hpp"
#include "schedule.hpp"

namespace fa::step10 {

namespace {

namespace mf = fa::m16n8k16;

// K_j as stored: blocks (keys 8n.., dims 16kk..) and (keys 8n.., dims 16kk + 8..), no .trans.
mf::BFrag k_frag(const SmemTile& Ks, int64_t n, int64_t kk) {
  mf::BFrag b(32);
  // lab:begin ldmatrix-k {O L}: K's B fragment of keys 8n.., dims 16kk.. as ldmatrix.x2 gives it …
  b = mf::ldmatrix_x2(Ks, 8 * n, 16 * kk, 16 * kk + 8, false);
  // lab:end
  return b;
}
// V_j: blocks (keys 16kk.., dims 8n..) and (keys 16kk + 8.., dims 8n..), .trans.
mf::BFrag v_frag(const SmemTile& Vs, int64_t kk, int64_t n) {
  mf::BFrag b(32);
  // lab:begin ldmatrix-v {O}: V's B fragment of keys 16kk.., dims 8n.. through ldmatrix.x2 …
  b = mf::ldmatrix_x2(Vs, 16 * kk, 8 * n, 8 * n, true);
  // lab:end
  return b;
}

mma_bp::Tiles tiles(const Schedule& sc, int64_t d) { return {sc.Br, sc.Bc, 0, kSmemBudget, smem_bytes(sc, int(d))}; }

}  // namespace

BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sc) {
  return mma_bp::forward(s, in, tiles(sc, s.d), "ldmatrix", k_frag, v_frag);
}

// The ledger in closed form (docs/10_ldmatrix.md): step 09's, the tiles unpadded (mma_bp::closed_form).
LedgerSet closed_form(const Shape& s, const Schedule& sc) { return mma_bp::closed_form(s, tiles(sc, s.d), "ldmatrix"); }

namespace {
BlueprintResult run_blueprint(const Shape& s, const Inputs& in, const StepOptions&) { return blueprint(s, in, kSchedule); }
LedgerSet run_closed_form(const Shape& s, const StepOptions&) { return closed_form(s, kSchedule); }
// [arch] Shared memory per block (schedule.hpp), held against the GPU's limit before a launch.
int64_t run_smem_bytes(const Shape& s, const StepOptions&) { return smem_bytes(kSchedule, int(s.d)); }
}  // namespace

const StepInfo& info() {
  static const StepInfo step = [] {
    StepInfo i;
    i.id = "10";
    i.slug = "ldmatrix";
    i.title = "ldmatrix from swizzled tiles: one instruction per B fragment, no padding";
    i.teaches = "ldmatrix (.trans for V) from a swizzled layout";
    i.mma_unit = MmaUnit::mma_sync;  // [mma-unit]
    i.blueprint = run_blueprint;
    i.closed_form = run_closed_form;
    i.smem_bytes = run_smem_bytes;
    i.min_cc = 80;
    i.needs = "mma.sync.m16n8k16";
#ifdef FA_HAVE_CUDA
    i.launch = launch;
    i.workspace_bytes = workspace_bytes;
#endif
    i.kernel_prefix = "step10_";
    return i;
  }();
  return step;
}

}  // namespace fa::step10
