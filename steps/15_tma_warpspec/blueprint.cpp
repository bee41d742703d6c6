// Step 15 — the blueprint: the kernel's roles on the CPU, common/blueprint/wgmma_forward.cpp (shared with step
// 14) with the producer's ring (Loads::Ring). The producer fills a ring of `stages` K/V stages —
// the first `stages` tiles at once (this step's own piece, its lab), then tile j + stages into the
// stage tile j freed — and the two consumer warpgroups run step 14's products and softmax on each
// tile in turn; the only block-wide barrier is the one after the mbarriers are set up. (The
// handshake that orders a fill after the consumers' release and a product after the fill — the
// stage's empty and full mbarriers — is what this sequential loop gets for free; docs/15 draws it.)
#include <algorithm>
#include <stdexcept>

#include "schedule.hpp"
#include "blueprint/wgmma_forward.hpp"

namespace fa::step15 {

namespace {

// [producer] Q once, then the first `stages` tiles into the ring before any is consumed (the
// refill of a freed stage with tile j + stages comes after the consumers, in wgmma_bp::forward).
void first_loads(int64_t Tcount, int64_t i0, const wgmma_bp::Tiles& t, SmemTile& Qs, wgmma_bp::Stages& kv, const GlobalMat& Q,
                 const GlobalMat& K, const GlobalMat& V) {
  // lab:begin producer-ring: [producer]: Q, then tiles 0 .. stages − 1 into stages 0 .. stages − …
  if (Tcount > 0) Qs.load_from(Q, i0, 0);
  for (int64_t j = 0; j < std::min(Tcount, t.stages); ++j) {
    kv.k[size_t(j)].load_from(K, j * t.Bc, 0);
    kv.v[size_t(j)].load_from(V, j * t.Bc, 0);
  }
  // lab:end
}

wgmma_bp::Tiles tiles(const Schedule& sc, int64_t d) {
  return {sc.Br, sc.Bc, sc.stages, wgmma_bp::Loads::Ring, kSmemBudget, smem_bytes(sc, int(d))};
}

}  // namespace

BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sc) {
  if (!valid(sc)) throw std::invalid_argument("step15: two consumer warpgroups (Br = 128), Bc a multiple of 64 up to 128, two stages or more");
  wgmma_bp::Ops ops;
  ops.first_loads = first_loads;
  return wgmma_bp::forward(s, in, tiles(sc, s.d), "tma_warpspec", ops);
}

// The ledger in closed form (docs/15_tma_warpspec.md): step 14's bytes and products with step 14's
// 128 × Bc tiles — the TMA boxes move what the cp.async rows moved, out-of-bounds rows as zeros that
// cost no HBM bytes — and one block-wide barrier per block instead of one per tile and one more
// before O is staged (wgmma_bp::closed_form with Loads::Ring).
LedgerSet closed_form(const Shape& s, const Schedule& sc) { return wgmma_bp::closed_form(s, tiles(sc, s.d), "tma_warpspec"); }

namespace {
BlueprintResult run_blueprint(const Shape& s, const Inputs& in, const StepOptions& o) {
  return blueprint(s, in, schedule_for(int(s.d), tiles_of(o)));
}
LedgerSet run_closed_form(const Shape& s, const StepOptions& o) { return closed_form(s, schedule_for(int(s.d), tiles_of(o))); }
int64_t run_smem_bytes(const Shape& s, const StepOptions& o) { return smem_bytes(schedule_for(int(s.d), tiles_of(o)), int(s.d)); }
}  // namespace

int tiles_of(const StepOptions& opts) { return choice_index(opts, "tiles", kTileNames, kTileChoices, "step15"); }

const StepInfo& info() {
  static const StepInfo step = [] {
    StepInfo i;
    i.id = "15";
    i.slug = "tma_warpspec";
    i.title = "TMA and warp specialization: a producer warp fills a ring of K/V stages guarded by mbarriers, two consumer warpgroups multiply";
    i.teaches = "TMA tensor copies, mbarriers, producer/consumer warpgroups and setmaxnreg";
    i.mma_unit = MmaUnit::wgmma;  // [mma-unit]
    {
      StepFlag f{"tiles", {}, "the block's tile (Br x Bc): auto (128x128, two stages at d = 128), 128x64 (four) — an experiment, fp16 only (docs/15_tma_warpspec.md)"};
      for (const char* n : kTileNames) f.choices.push_back(n);
      f.sweep = false;
      i.flags = {f};
    }
    i.blueprint = run_blueprint;
    i.closed_form = run_closed_form;
    i.smem_bytes = run_smem_bytes;
    i.min_cc = 90;
    i.max_cc = 90;
    i.needs = "wgmma.mma_async, TMA and setmaxnreg (sm_90a)";
    i.head_dims = {std::begin(kHeadDims), std::end(kHeadDims)};
    i.head_dims_why = "a TMA box of one 128-byte swizzled row holds 64 columns ([stored-d], steps/15_tma_warpspec/schedule.hpp)";
#ifdef FA_HAVE_CUDA
    i.launch = launch;
    i.workspace_bytes = workspace_bytes;
#endif
    i.kernel_prefix = "step15_";
    return i;
  }();
  return step;
}

}  // namespace fa::step15
