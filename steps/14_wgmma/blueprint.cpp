// Step 14 — the blueprint: the kernel's schedule on the CPU. The schedule is common/blueprint/wgmma_forward.cpp
// (shared with step 15) with step 12's pipeline (Loads::Pipeline): Q in shared memory, K/V tiles in
// two stages, tile j + 1 loaded while tile j is multiplied, one barrier per tile; two warpgroups of
// 64 rows, each multiplying with warpgroup MMAs — S = Q·K_jᵀ from shared memory, P·V with P from
// registers — and running step 12's softmax on each warp's 16 rows of S; O staged through the Q
// tile after one more barrier. The two products are this step's own (its lab). (wgmma_emu reads
// each shared operand once per instruction, as the warpgroup does; the swizzled addresses are the
// kernel's business and tests/test_step14.cpp checks them.)
#include <stdexcept>

#include "schedule.hpp"
#include "blueprint/wgmma_forward.hpp"

namespace fa::step14 {

namespace {

// [s-wgmma] S = Q K_jᵀ for warpgroup g: per 16 dims one 64 × Bc × 16 wgmma on its Q rows.
void s_product(wgmma::Acc& S, const SmemTile& Qs, int64_t g, const SmemTile& Ks, int64_t d, Ledger& led) {
  // lab:begin s-wgmma {O L}: [s-wgmma]: S = Q·K_jᵀ for the warpgroup's 64 rows (Qs rows 64g ..) …
  for (int64_t kk = 0; kk < d / 16; ++kk) wgmma::mma_ss(S, Qs, 64 * g, Ks, 0, kk, kk > 0, led);
  // lab:end
}

// [pv-wgmma] Õ += P V_j for keys 16kk .. 16kk + 15: per panel of O one wgmma with P from registers,
// V read as stored.
void pv_product(std::vector<wgmma::Acc>& O, const std::vector<m16n8k16::AFrag>& pa, const SmemTile& Vs, int64_t kk, Ledger& led) {
  // lab:begin pv-wgmma {O}: [pv-wgmma]: Õ += P·V_j for keys 16kk .. 16kk + 15 …
  for (size_t pn = 0; pn < O.size(); ++pn) wgmma::mma_rs(O[pn], pa, Vs, kk, O[pn].n * int64_t(pn), true, led);
  // lab:end
}

wgmma_bp::Tiles tiles(const Schedule& sc, int64_t d) {
  return {sc.Br, sc.Bc, kStages, wgmma_bp::Loads::Pipeline, kSmemBudget, smem_bytes(sc, int(d))};
}

}  // namespace

BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sc) {
  if (!valid(sc)) throw std::invalid_argument("step14: Br must be 64 per warpgroup and Bc a multiple of 64 up to 128");
  wgmma_bp::Ops ops;
  ops.s_product = s_product;
  ops.pv_product = pv_product;
  return wgmma_bp::forward(s, in, tiles(sc, s.d), "wgmma", ops);
}

// The ledger in closed form (docs/14_wgmma.md): wgmma_bp::closed_form with step 12's pipeline —
// one barrier per pair and one per block before O is staged.
LedgerSet closed_form(const Shape& s, const Schedule& sc) { return wgmma_bp::closed_form(s, tiles(sc, s.d), "wgmma"); }

namespace {
BlueprintResult run_blueprint(const Shape& s, const Inputs& in, const StepOptions& o) {
  return blueprint(s, in, schedule_for(int(s.d), tiles_of(o)));
}
LedgerSet run_closed_form(const Shape& s, const StepOptions& o) { return closed_form(s, schedule_for(int(s.d), tiles_of(o))); }
int64_t run_smem_bytes(const Shape& s, const StepOptions& o) { return smem_bytes(schedule_for(int(s.d), tiles_of(o)), int(s.d)); }
}  // namespace

int tiles_of(const StepOptions& opts) { return choice_index(opts, "tiles", kTileNames, kTileChoices, "step14"); }

const StepInfo& info() {
  static const StepInfo step = [] {
    StepInfo i;
    i.id = "14";
    i.slug = "wgmma";
    i.title = "wgmma: both products on Hopper's warpgroup MMA, operands read from swizzled shared memory by descriptor";
    i.teaches = "warpgroup MMA (wgmma), matrix descriptors and the 128-byte swizzle";
    i.mma_unit = MmaUnit::wgmma;  // [mma-unit]
    {
      StepFlag f{"tiles", {}, "the block's tile (Br x Bc): auto (128x64, two blocks per SM), 128x128 (one) — an experiment, fp16 only (docs/14_wgmma.md)"};
      for (const char* n : kTileNames) f.choices.push_back(n);
      f.sweep = false;
      i.flags = {f};
    }
    i.blueprint = run_blueprint;
    i.closed_form = run_closed_form;
    i.smem_bytes = run_smem_bytes;
    i.min_cc = 90;
    i.max_cc = 90;
    i.needs = "wgmma.mma_async (sm_90a)";
    i.head_dims = {std::begin(kHeadDims), std::end(kHeadDims)};
    i.head_dims_why = "a 128-byte swizzled row holds 64 columns ([stored-d], steps/14_wgmma/schedule.hpp)";
#ifdef FA_HAVE_CUDA
    i.launch = launch;
    i.workspace_bytes = workspace_bytes;
#endif
    i.kernel_prefix = "step14_";
    return i;
  }();
  return step;
}

}  // namespace fa::step14
