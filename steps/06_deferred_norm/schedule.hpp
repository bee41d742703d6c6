// Step 06 — deferred normalization.
//
// Steps 03–05 keep O_i normalized after every K/V tile (FlashAttention-1's update): multiply back by
// l_i, add P·V, divide by l_new — two passes over the O tile per tile pair. Here the block keeps the
// unnormalized accumulator Õ_i, rescales it only by exp(m_old − m_new) when the maximum moves, and
// divides by l_i once, when O_i is written (FlashAttention-2, Dao 2023, §3.1). The warps own rows of
// the Q tile, as step 05's split-Q mapping (split-K is gone from here on).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernel/attn_params.hpp"
#include "kernel/causal.hpp"
#include "core/step.hpp"

namespace fa::step06 {

struct Schedule {
  int Br = 32;  // queries per Q tile: one warp per 16 rows
  int Bc = 32;  // keys per K/V tile: Bc/2 per lane, two lanes a row
  FA_HD constexpr int warps() const { return Br / 16; }
};
inline constexpr Schedule kSchedule{};
inline constexpr int kPad = 8;      // 16-bit elements of padding per row of Q, K, V tiles
inline constexpr int kPadS = 4;     // fp32 elements of padding per row of S (and of P, which reuses S's rows)
inline constexpr int kPadO = 4;     // fp32 elements of padding per row of the O tile
inline constexpr int64_t kSmemBudget = 48 * 1024;

// Shared memory per block for head dimension d: Q, K, V tiles (storage type), S (fp32; P is
// written over it in the storage type), the unnormalized Õ (fp32) and three per-row statistics.
FA_HD constexpr int64_t smem_bytes(const Schedule& s, int d) {
  return int64_t(s.Br + 2 * s.Bc) * (d + kPad) * 2 + int64_t(s.Br) * (s.Bc + kPadS) * 4 +
         int64_t(s.Br) * (d + kPadO) * 4 + 3 * int64_t(s.Br) * 4;
}
static_assert(kSchedule.Br % 16 == 0 && kSchedule.Br >= 16, "Br: whole 16-row fragments (one warp each)");
static_assert(kSchedule.Bc % 16 == 0 && kSchedule.Bc >= 16, "Bc: whole 16-key fragments");
static_assert(smem_bytes(kSchedule, 128) <= kSmemBudget, "the tiles must fit 48 KB at d = 128");

// The GPU side (kernel.cu).
void launch(const AttnParams& p, const StepOptions& opts, void* stream);
size_t workspace_bytes(const Shape& s, const StepOptions& opts);

// The CPU side (blueprint.cpp).
BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sched);
LedgerSet closed_form(const Shape& s, const Schedule& sched);

}  // namespace fa::step06
