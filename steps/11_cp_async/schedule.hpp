// Step 11 — the load pipeline: cp.async.
//
// Steps 09 and 10 load K_j and V_j with ordinary loads and wait for them at a barrier before any
// warp can multiply: the tensor cores idle while HBM (or L2) answers, once per tile. Here the copy
// of tile j + 1 is started with cp.async — global to shared memory directly, without passing
// through registers — before tile j is multiplied, into the other of two buffers (stages). By the
// time the warps finish tile j, tile j + 1 has mostly arrived. Everything else is step 10's.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernel/attn_params.hpp"
#include "kernel/causal.hpp"
#include "kernel/mma_layout.hpp"
#include "core/step.hpp"

namespace fa::step11 {

struct Schedule {
  int Br = 64;  // queries per block: one warp per 16 rows
  int Bc = 64;  // keys per K/V tile
  FA_HD constexpr int warps() const { return Br / 16; }
};
inline constexpr Schedule kSchedule{};
inline constexpr int64_t kSmemBudget = 100 * 1024;

inline constexpr int kStages = 2;  // K/V buffers in flight: one being multiplied, one being loaded

// Shared memory per block: kStages copies of the K and V tiles (storage type), unpadded. More than
// the static 48 KB at d = 128 (64 KB): the kernel takes it as dynamic shared memory and the
// launcher opts in.
FA_HD constexpr int64_t smem_bytes(const Schedule& s, int d) { return int64_t(kStages) * 2 * s.Bc * d * 2; }

// [swizzle] Where element (r, c) of a (rows × d) tile lives: rows are stored whole and unpadded,
// but the row's 16-byte chunks (8 elements) are permuted, chunk c/8 going to chunk (c/8) XOR
// (r mod 8) (mod the number of chunks when d < 64). Eight consecutive rows then put the same
// logical chunk into eight different 16-byte bank groups.
FA_HD constexpr int swizzle(int r, int c, int d) {
  const int chunks = d / 8, mask = (chunks < 8 ? chunks : 8) - 1;
  return r * d + (((c / 8) ^ (r & mask)) * 8) + (c % 8);
}
static_assert(kSchedule.Br % 16 == 0 && kSchedule.Bc % 16 == 0, "whole m16n8k16 tiles");
static_assert(smem_bytes(kSchedule, 128) <= kSmemBudget, "the K and V stages must fit the block's budget at d = 128");

// log2(e): exp(x) = exp2(x · log2 e), folded into the softmax scale once ([exp2]).
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// The GPU side (kernel.cu).
void launch(const AttnParams& p, const StepOptions& opts, void* stream);
size_t workspace_bytes(const Shape& s, const StepOptions& opts);

// The CPU side (blueprint.cpp).
BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sched);
LedgerSet closed_form(const Shape& s, const Schedule& sched);

}  // namespace fa::step11
