// Step 05 — warp splitting: which warp owns what inside a block.
//
// Steps 03 and 04 split each K/V tile's keys among the warps (split-K, as FlashAttention-1 does):
// every warp holds a piece of every row's softmax and output, and the pieces meet in shared memory
// through barriers and one-warp-at-a-time merge rounds. Here each warp owns 16 rows of the Q tile
// and all Bc keys (split-Q, as FlashAttention-2 does): it finishes its rows' softmax with two
// shuffles and owns its rows of O, so no merge and no barrier is needed inside the tile update.
// --split k keeps step 04's mapping in the same program, so both are checked and measured.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernel/attn_params.hpp"
#include "kernel/causal.hpp"
#include "core/step.hpp"

namespace fa::step05 {

struct Schedule {
  int Br = 32;  // queries per Q tile (at most 32: one lane per row in split-K's scalar passes)
  int Bc = 32;  // keys per K/V tile (split-K: one warp per 16; split-Q: Bc/2 per lane, two lanes a row)
  FA_HD constexpr int warps() const { return Bc / 16; }             // split-K: one warp per 16 keys
  FA_HD constexpr int warps_q() const { return Br / 16; }           // split-Q: one warp per 16 rows
  FA_HD constexpr int warps(bool split_q) const { return split_q ? warps_q() : warps(); }
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

// The CPU side (blueprint.cpp); split_q selects the warp mapping.
BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sched, bool split_q);
LedgerSet closed_form(const Shape& s, const Schedule& sched, bool split_q);

}  // namespace fa::step05
