// Step 03 — FlashAttention-1's tiling (Dao et al. 2022, Algorithm 1): the K/V-outer loop.
//
// One thread block per (batch, head). The outer loop walks the Tc tiles of K and V (Bc keys each),
// loaded once into shared memory; the inner loop walks the Tr tiles of Q (Br queries each). For
// every pair the block computes S_ij = scale · Q_i K_jᵀ on tensor cores, updates the softmax
// statistics m_i, l_i and the *normalized* output O_i, and writes all three back to HBM: the
// partial results live in HBM between outer iterations. Inside the block the warps split the Bc
// keys of a tile (split-K), as FlashAttention-1 does, and merge their partial maxima, sums and
// outputs through shared memory. Step 04 swaps the loops; step 05 flips the warp split.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernel/attn_params.hpp"
#include "kernel/causal.hpp"
#include "core/step.hpp"

namespace fa::step03 {

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

// Workspace in HBM: the running O_i (fp32, [B·H, N, d]), m_i and l_i (fp32, [B·H, N] each).
inline int64_t o_acc_bytes(const Shape& s) { return s.B * s.H * s.N * s.d * 4; }
inline int64_t stats_bytes(const Shape& s) { return s.B * s.H * s.N * 4; }

// The GPU side (kernel.cu).
void launch(const AttnParams& p, const StepOptions& opts, void* stream);
size_t workspace_bytes(const Shape& s, const StepOptions& opts);

// The CPU side (blueprint.cpp).
BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sched);
LedgerSet closed_form(const Shape& s, const Schedule& sched);

}  // namespace fa::step03
