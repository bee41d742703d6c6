// Step 10 — ldmatrix and a swizzled shared-memory layout.
//
// Step 09 assembled each B fragment from shared memory with one 32-bit load per register (K) or
// two 16-bit loads (V: its two halves are two rows of V_j), from rows padded by 16 bytes. Here a
// single ldmatrix instruction loads two 8 × 8 blocks for the whole warp — with .trans, the
// transposed blocks that V's fragments need — and the tiles are stored without padding, their
// 16-byte chunks permuted per row (an XOR swizzle) so that the eight rows an ldmatrix phase reads
// fall into eight different bank groups.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernel/attn_params.hpp"
#include "kernel/causal.hpp"
#include "kernel/mma_layout.hpp"
#include "core/step.hpp"

namespace fa::step10 {

struct Schedule {
  int Br = 64;  // queries per block: one warp per 16 rows
  int Bc = 64;  // keys per K/V tile
  FA_HD constexpr int warps() const { return Br / 16; }
};
inline constexpr Schedule kSchedule{};
inline constexpr int64_t kSmemBudget = 48 * 1024;

// Shared memory per block: the K and V tiles only (storage type), unpadded.
FA_HD constexpr int64_t smem_bytes(const Schedule& s, int d) { return 2 * int64_t(s.Bc) * d * 2; }

// [swizzle] Where element (r, c) of a (rows × d) tile lives: rows are stored whole and unpadded,
// but the row's 16-byte chunks (8 elements) are permuted, chunk c/8 going to chunk (c/8) XOR
// (r mod 8) (mod the number of chunks when d < 64). Eight consecutive rows then put the same
// logical chunk into eight different 16-byte bank groups.
FA_HD constexpr int swizzle(int r, int c, int d) {
  const int chunks = d / 8, mask = (chunks < 8 ? chunks : 8) - 1;
  return r * d + (((c / 8) ^ (r & mask)) * 8) + (c % 8);
}
static_assert(kSchedule.Br % 16 == 0 && kSchedule.Bc % 16 == 0, "whole m16n8k16 tiles");
static_assert(smem_bytes(kSchedule, 128) <= kSmemBudget, "K and V tiles must fit 48 KB at d = 128");

// log2(e): exp(x) = exp2(x · log2 e), folded into the softmax scale once ([exp2]).
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// The GPU side (kernel.cu).
void launch(const AttnParams& p, const StepOptions& opts, void* stream);
size_t workspace_bytes(const Shape& s, const StepOptions& opts);

// The CPU side (blueprint.cpp).
BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sched);
LedgerSet closed_form(const Shape& s, const Schedule& sched);

}  // namespace fa::step10
