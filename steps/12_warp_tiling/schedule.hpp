// Step 12 — warp tiling: the tuning that takes step 11's pipeline to FlashAttention-2's speed.
//
// Step 11 hides the K/V loads behind the products; what is left is the work around them. A warp
// of 16 rows reads every K and V fragment from shared memory for one product each, so here each
// warp owns 32 rows (two m16 tiles) and uses every K/V fragment twice; Q moves to shared memory
// (its fragments would no longer fit the registers beside a 32-row O) and every fragment is read
// with ldmatrix.x4 from addresses stepped by XOR. One barrier per tile instead of two, p = exp2 on
// one FMA, O staged through shared memory for 16-byte stores, the heaviest causal blocks first,
// and tile sizes chosen per head dimension (schedule_for).
//
// Each of those changes can be taken out alone (--ablate NAME, [ablation]) to measure what it buys.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernel/attn_params.hpp"
#include "kernel/causal.hpp"
#include "kernel/mma_layout.hpp"
#include "core/step.hpp"

namespace fa::step12 {

struct Schedule {
  int Br = 128;  // queries per block
  int Bc = 64;   // keys per K/V tile
  int W = 4;     // warps per block; warp w owns rows [w·Br/W, (w + 1)·Br/W)
  FA_HD constexpr int warps() const { return W; }
  FA_HD constexpr int mtiles() const { return Br / (16 * W); }  // m16 row tiles per warp
};
// [tile-sizes] Per head dimension: at d = 128 a 32-row O already takes 128 registers per lane, so the
// K/V tile stays at 64 keys (S: 64 more); at d <= 64 O is half as large and a tile of 128 keys
// halves the number of loop steps (and barriers) per block.
FA_HD constexpr Schedule schedule_for(int d) { return d <= 64 ? Schedule{128, 128, 4} : Schedule{128, 64, 4}; }

// [ablation] The changes of this step, each of which --ablate takes out alone (docs/12_warp_tiling.md
// measures them in one run). Two of them are tile choices, so the blueprint and the ledger follow
// them; the others change instructions, not the ledger — except kNoOStage (O is stored from
// registers, no staging traffic) and kNoOneBarrier (a second barrier per tile).
enum Ablation : int {
  kFull = 0,      // every change in
  kNoOrder,       // blocks in grid order, not heaviest causal first
  kNoExp2,        // p = exp2f(s·scale − m) with the scale applied first, as step 11 does
  kNoOStage,      // O stored from registers (4-byte stores), not staged through shared memory
  kNoOneBarrier,  // a second barrier at the end of every tile
  kNoTiles,       // d <= 64 keeps d = 128's tile (128 × 64) instead of 128 × 128
  kNoRows32,      // 16 rows per warp (Br = 64): every K/V fragment feeds one product
  kNoX4,          // K and V fragments by two ldmatrix.x2 each instead of one ldmatrix.x4
  kAblations
};
inline constexpr const char* kAblationNames[kAblations] = {"none", "order", "exp2", "ostage", "barrier", "tiles", "rows", "x4"};
FA_HD constexpr Schedule schedule_for(int d, int ablation) {
  return ablation == kNoRows32 ? Schedule{64, d <= 64 ? 128 : 64, 4}
         : ablation == kNoTiles ? Schedule{128, 64, 4}
                                : schedule_for(d);
}
// [dropout] Dropout (--dropout P, common/kernel/dropout.hpp) is compiled into the full step only: an
// ablation with it is refused — never run without the dropout it was asked for. The kernel, the
// blueprint and the closed form call this alike (P as the kernel gets it, a float).
inline void require_dropout_supported(float p, int ablation) {
  if (p > 0.0f && ablation != kFull)
    throw Unsupported(std::string("step12: --ablate ") + kAblationNames[ablation] +
                      " has no dropout variant (dropout is compiled into the full step only: leave out --ablate or --dropout)");
}
inline constexpr Schedule kSchedule = schedule_for(128);
inline constexpr int64_t kSmemBudget = 112 * 1024;

inline constexpr int kStages = 2;  // K/V buffers in flight: one being multiplied, one being loaded

// Shared memory per block: the Q tile, then kStages copies of the K and V tiles (storage type),
// unpadded. 96 KB at d = 128, two blocks per SM: dynamic shared memory, the launcher opts in.
FA_HD constexpr int64_t smem_bytes(const Schedule& s, int d) { return (int64_t(s.Br) + int64_t(kStages) * 2 * s.Bc) * d * 2; }

// [swizzle] Where element (r, c) of a (rows × d) tile lives: rows are stored whole and unpadded,
// but the row's 16-byte chunks (8 elements) are permuted, chunk c/8 going to chunk (c/8) XOR
// (r mod 8) (mod the number of chunks when d < 64). Eight consecutive rows then put the same
// logical chunk into eight different 16-byte bank groups.
FA_HD constexpr int swizzle(int r, int c, int d) {
  const int chunks = d / 8, mask = (chunks < 8 ? chunks : 8) - 1;
  return r * d + (((c / 8) ^ (r & mask)) * 8) + (c % 8);
}
FA_HD constexpr bool valid(const Schedule& s) {
  return s.W > 0 && s.Br % (16 * s.W) == 0 && s.Bc % 16 == 0 && s.Bc > 0;
}
static_assert(valid(schedule_for(64)) && valid(schedule_for(128)) && valid(schedule_for(64, kNoRows32)) &&
                  valid(schedule_for(64, kNoTiles)),
              "whole m16n8k16 tiles, whole ldmatrix.x4 pairs");
static_assert(smem_bytes(schedule_for(128), 128) <= kSmemBudget && smem_bytes(schedule_for(64), 64) <= kSmemBudget,
              "Q and the K/V stages must fit the block's budget");

// log2(e): exp(x) = exp2(x · log2 e), folded into the softmax scale once ([exp2]).
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// The GPU side (kernel.cu).
void launch(const AttnParams& p, const StepOptions& opts, void* stream);
size_t workspace_bytes(const Shape& s, const StepOptions& opts);

// The CPU side (blueprint.cpp).
BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sched, int ablation = kFull);
LedgerSet closed_form(const Shape& s, const Schedule& sched, int ablation = kFull);
int ablation_of(const StepOptions& opts);  // --ablate's value as an Ablation

}  // namespace fa::step12
