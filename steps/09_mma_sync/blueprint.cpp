// Step 09 — the blueprint: kernel.cu's mma.sync schedule as CPU loops, lane by lane.
//
// The schedule itself — Q as A fragments, S and O in registers, P converted into the A operand of
// P·V, the log2-domain softmax — is common/blueprint/mma_forward.cpp, shared with step 10, which runs it with
// other fragment loads. This step's own part: each lane builds its B fragments by hand from the
// padded K and V tiles, two elements per 32-bit register, at the (k, n) that b_elem() names.
#include "blueprint/mma_emu.hpp"
#include "blueprint/mma_forward.hpp"
#include "schedule.hpp"

namespace fa::step09 {

namespace {

namespace mf = fa::m16n8k16;

// K_j for S = Q K_jᵀ: B(k, n) = K_j[8n + n][16kk + k].
mf::BFrag k_frag(const SmemTile& Ks, int64_t n, int64_t kk) {
  mf::BFrag b(32);
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      // lab:begin k-frag {O L}: B fragment of K_jᵀ by hand: b_elem(lane, i) names (k, n) = (c.row …
      const mf::Coord c = mf::b_elem(lane, i);
      b[size_t(lane)][size_t(i)] = Ks.read(8 * n + c.col, 16 * kk + c.row);
      // lab:end
    }
  return b;
}
// V_j for Õ += P V_j: B(k, n) = V_j[16kk + k][8n + n].
mf::BFrag v_frag(const SmemTile& Vs, int64_t kk, int64_t n) {
  mf::BFrag b(32);
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      // lab:begin v-frag {O}: B fragment of V_j by hand: b_elem(lane, i) names (k, n) = (c.row …
      const mf::Coord c = mf::b_elem(lane, i);
      b[size_t(lane)][size_t(i)] = Vs.read(16 * kk + c.row, 8 * n + c.col);
      // lab:end
    }
  return b;
}

mma_bp::Tiles tiles(const Schedule& sc, int64_t d) { return {sc.Br, sc.Bc, kPad, kSmemBudget, smem_bytes(sc, int(d))}; }

}  // namespace

BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sc) {
  return mma_bp::forward(s, in, tiles(sc, s.d), "mma", k_frag, v_frag);
}

// The ledger in closed form (docs/09_mma_sync.md; mma_bp::closed_form).
LedgerSet closed_form(const Shape& s, const Schedule& sc) { return mma_bp::closed_form(s, tiles(sc, s.d), "mma"); }

namespace {
BlueprintResult run_blueprint(const Shape& s, const Inputs& in, const StepOptions&) { return blueprint(s, in, kSchedule); }
LedgerSet run_closed_form(const Shape& s, const StepOptions&) { return closed_form(s, kSchedule); }
// [arch] Shared memory per block (schedule.hpp), held against the GPU's limit before a launch.
int64_t run_smem_bytes(const Shape& s, const StepOptions&) { return smem_bytes(kSchedule, int(s.d)); }
}  // namespace

const StepInfo& info() {
  static const StepInfo step = [] {
    StepInfo i;
    i.id = "09";
    i.slug = "mma_sync";
    i.title = "tensor cores by hand: mma.sync.m16n8k16, S, P and O in registers";
    i.teaches = "mma.sync: S, P, O in registers; only K, V in smem";
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
    i.kernel_prefix = "step09_";
    return i;
  }();
  return step;
}

}  // namespace fa::step09
