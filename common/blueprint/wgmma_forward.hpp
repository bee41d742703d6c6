// The warpgroup forward of steps 14, 15 and 16 on the CPU, written once (as common/blueprint/mma_forward.cpp is for
// steps 09-11): warpgroups of 64 rows share the block's K/V tiles; per tile each one multiplies
// S = Q·K_jᵀ with warpgroup MMAs reading Q and K from shared memory, runs step 12's log2-domain
// softmax on each warp's 16 rows of S in the accumulator layout (common/kernel/wgmma_layout.hpp, [acc]),
// converts P in registers and multiplies P·V with P as the register operand; O is staged through
// the Q tile on its way out. The steps differ in how the tiles arrive:
//   Loads::Pipeline  step 14: cp.async into two stages, tile j + 1 started after the barrier that
//                    opens tile j; a barrier per tile, and one more before O is staged over Q
//   Loads::Ring      steps 15 and 16: a producer fills a ring of `stages` stages — the first `stages` tiles
//                    at once, then tile j + stages into the stage tile j freed — guarded by
//                    mbarriers (1 KB of shared memory); the block's one barrier is after their set-up
// Step 16 runs the ring with its own order of the consumers' work (Ops::turns, its ping-pong), and
// each step passes the pieces of the schedule its lab blanks (Ops).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "blueprint/ledger.hpp"
#include "core/problem.hpp"
#include "core/step.hpp"
#include "blueprint/wgmma_emu.hpp"

namespace fa::wgmma_bp {

enum class Loads { Pipeline, Ring };

// A step's tiles: Br queries per block (a warpgroup per 64 rows), Bc keys per K/V tile, the K/V
// stages, how they are filled, the shared-memory budget and the step's footprint (its smem_bytes).
struct Tiles {
  int64_t Br, Bc, stages;
  Loads loads;
  int64_t smem_budget, smem_peak;
  bool own_o = false;  // [own-o] step 20: O staged in a tile of its own at the end, not over Q
  int64_t warpgroups() const { return Br / 64; }
};

// The K/V stages of one block.
struct Stages {
  std::vector<SmemTile> k, v;
};

// What a consumer warpgroup does with a tile, in the order a schedule calls them: for warpgroup g,
// s(g, j) multiplies S_j = Q·K_jᵀ; softmax(g, j) masks it, runs the softmax (Õ *= α_j) and packs P_j
// as the register operand; pv(g, j) adds P_j·V_j into Õ. release(j): every warpgroup is done with
// the stage of tile j, which the producer refills with tile j + stages (the ring only). Called out of
// order they fail or give a wrong O: the softmax of a tile whose S is not there, a P·V without its
// P, or a stage refilled before its last product read it.
struct Consumer {
  std::function<void(int64_t g, int64_t j)> s, softmax, pv;
  std::function<void(int64_t j)> release;
};

// The pieces a step may write itself (its lab regions); a null one is the default below.
struct Ops {
  // [s-wgmma] S = Q·K_jᵀ for warpgroup g (rows 64g of the Q tile): d/16 wgmmas.
  void (*s_product)(wgmma::Acc& S, const SmemTile& Qs, int64_t g, const SmemTile& Ks, int64_t d, Ledger& led) = nullptr;
  // [pv-wgmma] Õ += P·V_j for the keys 16kk .. 16kk + 15: one wgmma per 64-column panel of O.
  void (*pv_product)(std::vector<wgmma::Acc>& O, const std::vector<m16n8k16::AFrag>& pa, const SmemTile& Vs, int64_t kk,
                     Ledger& led) = nullptr;
  // [producer] The loads before the first product, for a block that visits Tcount tiles: Q (when
  // Tcount > 0), then tile 0 (Pipeline) or tiles 0 .. min(Tcount, stages) − 1 (Ring).
  void (*first_loads)(int64_t Tcount, int64_t i0, const Tiles& t, SmemTile& Qs, Stages& kv, const GlobalMat& Q,
                      const GlobalMat& K, const GlobalMat& V) = nullptr;
  // The consumers' schedule over a block's Tcount tiles with G warpgroups (the ring only). The default
  // is step 15's (step 16 passes its own): tile by tile, each warpgroup s, softmax, pv in turn; then release.
  void (*turns)(int64_t Tcount, int64_t G, Consumer& c) = nullptr;
  // [exp2-poly] Step 20: p = exp2(n, x) for the entries of a row's column group n (its keys 8n … 8n + 7
  // of the tile; null: std::exp2), and which groups the ledger counts on the FMA units — fma_ops each —
  // rather than as exponentials (null: none).
  float (*exp2)(int n, float x) = nullptr;
  bool (*exp2_on_fma)(int n) = nullptr;
  int fma_ops_per_exp = 0;
  // [lazy-rescale] Step 20: whether a row takes the tile's max m_new over the max m_old its exponentials
  // used so far (null: always, every tile rescales). A row that does not keeps m_old: α = 1. The ledger
  // counts the rescale either way (the most a tile does); `rescales` and `row_tiles` (when set) count
  // what the data decided: rows' tiles that took a new max, of all rows' tiles visited.
  bool (*takes_new_max)(float m_old, float m_new) = nullptr;
  int64_t* rescales = nullptr;
  int64_t* row_tiles = nullptr;
};

void s_product(wgmma::Acc& S, const SmemTile& Qs, int64_t g, const SmemTile& Ks, int64_t d, Ledger& led);
void pv_product(std::vector<wgmma::Acc>& O, const std::vector<m16n8k16::AFrag>& pa, const SmemTile& Vs, int64_t kk, Ledger& led);
void first_loads(int64_t Tcount, int64_t i0, const Tiles& t, SmemTile& Qs, Stages& kv, const GlobalMat& Q, const GlobalMat& K,
                 const GlobalMat& V);

// The forward; its ledger is `kernel`'s.
BlueprintResult forward(const Shape& s, const Inputs& in, const Tiles& t, const std::string& kernel, const Ops& ops = {});
// The same ledger in closed form (docs/14_wgmma.md, docs/15_tma_warpspec.md).
LedgerSet closed_form(const Shape& s, const Tiles& t, const std::string& kernel);

}  // namespace fa::wgmma_bp
