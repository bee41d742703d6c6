// Step 16 — the blueprint: step 15's roles on the CPU (common/blueprint/wgmma_forward.cpp with the producer's
// ring), with the consumers' turns of the kernel. Turn j of a warpgroup multiplies S_j and, behind
// it, P_{j-1}·V_{j-1} — the product the softmax of tile j − 1 made ready — then runs the softmax of
// tile j; the two warpgroups take their turns in order (ping-pong), and the stage of tile j − 1 is
// free only after both turns j, since P_{j-1}·V_{j-1} reads it there. The turns are this step's own
// piece (its lab). What the kernel overlaps — one warpgroup's softmax under the other's products,
// and its own softmax under its own P·V — is timing, which a sequential loop has none of; the order
// of the products and the stage's release, which the overlap forces, is what the CPU can check.
#include <stdexcept>
#include <string>

#include "schedule.hpp"
#include "blueprint/wgmma_forward.hpp"

namespace fa::step16 {

// [pingpong] [overlap] The consumers' turns over a block's Tcount tiles: turn j (0 .. Tcount) of each
// warpgroup in order; then the stage of tile j − 1 goes back to the producer. (Step 20's blueprint
// runs the same turns: it calls this one.)
void turns(int64_t Tcount, int64_t G, wgmma_bp::Consumer& c) {
  // lab:begin pingpong-turns: [pingpong]: Tcount + 1 turns; in turn j each warpgroup g …
  for (int64_t j = 0; j <= Tcount; ++j) {
    for (int64_t g = 0; g < G; ++g) {
      if (j < Tcount) c.s(g, j);
      if (j > 0) c.pv(g, j - 1);
      if (j < Tcount) c.softmax(g, j);
    }
    if (j > 0) c.release(j - 1);
  }
  // lab:end
}

namespace {

wgmma_bp::Tiles tiles(const Schedule& sc, int64_t d) {
  return {sc.Br, sc.Bc, sc.stages, wgmma_bp::Loads::Ring, kSmemBudget, smem_bytes(sc, int(d))};
}

}  // namespace

BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sc) {
  if (!valid(sc)) throw std::invalid_argument("step16: this tile is not offered at d = " + std::to_string(s.d) + ": Br = 128 or 192 (three consumers, d = 64 only), Bc a multiple of 64 up to 128, and two stages or more must fit ([tiles], steps/16_pingpong/schedule.hpp)");
  wgmma_bp::Ops ops;
  ops.turns = turns;
  return wgmma_bp::forward(s, in, tiles(sc, s.d), "pingpong", ops);
}

// The ledger in closed form (docs/16_pingpong.md): step 15's — the turns reorder the same products
// and the same loads, and their named barriers (like the consumers' mbarriers) are not block-wide.
LedgerSet closed_form(const Shape& s, const Schedule& sc) { return wgmma_bp::closed_form(s, tiles(sc, s.d), "pingpong"); }

namespace {
BlueprintResult run_blueprint(const Shape& s, const Inputs& in, const StepOptions& o) {
  return blueprint(s, in, schedule_for(int(s.d), tiles_of(o)));
}
LedgerSet run_closed_form(const Shape& s, const StepOptions& o) { return closed_form(s, schedule_for(int(s.d), tiles_of(o))); }
int64_t run_smem_bytes(const Shape& s, const StepOptions& o) { return smem_bytes(schedule_for(int(s.d), tiles_of(o)), int(s.d)); }
// [tiles] A --tiles choice this d does not offer (192x128 above d = 64, 128x128 at d = 256).
std::string run_options_reason(const Shape& s, const StepOptions& o) {
  const int t = tiles_of(o);
  if (valid(schedule_for(int(s.d), t))) return "";
  return std::string("--tiles ") + kTileNames[t] + " is not offered at d = " + std::to_string(s.d) +
         " (shared memory or a consumer's registers would not hold it: [tile-sizes] in steps/16_pingpong/schedule.hpp)";
}
}  // namespace

int tiles_of(const StepOptions& opts) { return choice_index(opts, "tiles", kTileNames, kTileChoices, "step16"); }
int ablation_of(const StepOptions& opts) { return choice_index(opts, "ablate", kAblationNames, kAblations, "step16"); }

const StepInfo& info() {
  static const StepInfo step = [] {
    StepInfo i;
    i.id = "16";
    i.slug = "pingpong";
    i.title = "Ping-pong and intra-warpgroup overlap: one warpgroup's softmax runs under the other's products, and under its own P·V";
    i.teaches = "named-barrier turns between consumer warpgroups, wgmma.wait_group 1, tiles per head dimension";
    i.mma_unit = MmaUnit::wgmma;  // [mma-unit]
    {
      StepFlag f{"tiles", {}, "the block's tile (Br x Bc), with as many stages as fit: auto (192x128 at d = 64, 128x128 at d = 128, 128x64 at d = 256), 128x64, 128x128, 192x128 (d = 64 only) — an experiment, fp16 only (docs/16_pingpong.md)"};
      for (const char* n : kTileNames) f.choices.push_back(n);
      f.sweep = false;
      StepFlag a{"ablate", {}, "take an overlap out (same results): none, pingpong (no turns), overlap (wait for both products before the softmax), both — an experiment, fp16 only (docs/16_pingpong.md)"};
      for (const char* n : kAblationNames) a.choices.push_back(n);
      a.sweep = false;
      i.flags = {f, a};
    }
    i.blueprint = run_blueprint;
    i.closed_form = run_closed_form;
    i.smem_bytes = run_smem_bytes;
    i.options_reason = run_options_reason;
    i.supports_gqa = true;     // [gqa] K and V's tensor maps over Hkv heads
    i.supports_window = true;  // [window] the band's tiles alone, in the producer and the consumers alike
    i.min_cc = 90;
    i.max_cc = 90;
    i.needs = "wgmma.mma_async, TMA and setmaxnreg (sm_90a)";
    i.head_dims = {std::begin(kHeadDims), std::end(kHeadDims)};
    i.head_dims_why = "a TMA box of one 128-byte swizzled row holds 64 columns ([stored-d], steps/16_pingpong/schedule.hpp)";
#ifdef FA_HAVE_CUDA
    i.launch = launch;
    i.workspace_bytes = workspace_bytes;
#endif
    i.kernel_prefix = "step16_";
    return i;
  }();
  return step;
}

}  // namespace fa::step16
