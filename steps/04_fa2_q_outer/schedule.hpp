// Step 04 — FlashAttention-2's loop order (Dao 2023): Q tiles outer, K/V tiles inner.
//
// A thread block owns a Q tile: it loads Q_i once, walks every K/V tile, keeps O_i, m_i and l_i
// in shared memory the whole time, and writes O_i and L_i once. The body of the loop — S_ij on
// tensor cores, the split-K softmax update, the per-iteration normalization — is step 03's,
// unchanged: the diff between the two kernels is the loop order. The grid is a switch:
// --grid qtile gives one block per (batch, head, Q tile); --grid bh one block per (batch, head)
// that walks its Q tiles in turn, as step 03 does. Same bytes, different parallelism.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernel/attn_params.hpp"
#include "kernel/causal.hpp"
#include "core/step.hpp"

namespace fa::step04 {

struct Schedule {
  int Br = 32;  // queries per Q tile (at most 32: one lane per row in the scalar passes)
  int Bc = 32;  // keys per K/V tile; each warp owns 16 of them
  FA_HD constexpr int warps() const { return Bc / 16; }
};
inline constexpr Schedule kSchedule{};
inline constexpr int kPad = 8;      // 16-bit elements of padding per row of Q, K, V tiles
inline constexpr int kPadS = 4;     // fp32 elements of padding per row of S (and of P, which reuses S's rows)
inline constexpr int kPadO = 4;     // fp32 elements of padding per row of the O tile
inline constexpr int64_t kSmemBudget = 48 * 1024;

// Shared memory per block for head dimension d: Q, K, V tiles (storage type), S (fp32; P is
// written over it in the storage type), O (fp32), five per-row statistics and two per-warp partials.
FA_HD constexpr int64_t smem_bytes(const Schedule& s, int d) {
  return int64_t(s.Br + 2 * s.Bc) * (d + kPad) * 2 + int64_t(s.Br) * (s.Bc + kPadS) * 4 +
         int64_t(s.Br) * (d + kPadO) * 4 + 5 * int64_t(s.Br) * 4 + 2 * int64_t(s.warps()) * s.Br * 4;
}
static_assert(kSchedule.Br % 16 == 0 && kSchedule.Br <= 32, "Br: whole 16-row fragments, one lane per row");
static_assert(kSchedule.Bc % 16 == 0 && kSchedule.Bc >= 16, "Bc: whole 16-key fragments, one warp per 16 keys");
static_assert(smem_bytes(kSchedule, 128) <= kSmemBudget, "the tiles must fit 48 KB at d = 128");

// The GPU side (kernel.cu).
void launch(const AttnParams& p, const StepOptions& opts, void* stream);
size_t workspace_bytes(const Shape& s, const StepOptions& opts);

// The CPU side (blueprint.cpp).
BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sched);
LedgerSet closed_form(const Shape& s, const Schedule& sched);

}  // namespace fa::step04
