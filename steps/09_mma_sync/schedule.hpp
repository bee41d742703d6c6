// Step 09 — tensor cores by hand: mma.sync.m16n8k16.
//
// Steps 01–08 multiply with WMMA, whose fragment layout is opaque: to touch an element of S, P or O
// a warp must store the fragment to shared memory and read it back. mma.sync's layout is documented
// (common/kernel/mma_layout.hpp), so here S, P and O stay in registers: each lane knows which rows and
// columns it holds, does its rows' softmax with two shuffles, converts P to fp16/bf16 in registers
// and feeds it straight back as the A operand of P·V ([c-to-a]). Shared memory holds only K and V.
// Everything else is step 07's algorithm: Q-outer, split-Q warps, deferred normalization, causal
// block skipping — plus exp2 with log2(e) folded into the scale.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernel/attn_params.hpp"
#include "kernel/causal.hpp"
#include "kernel/mma_layout.hpp"
#include "core/step.hpp"

namespace fa::step09 {

struct Schedule {
  int Br = 64;  // queries per block: one warp per 16 rows
  int Bc = 64;  // keys per K/V tile
  FA_HD constexpr int warps() const { return Br / 16; }
};
inline constexpr Schedule kSchedule{};
inline constexpr int kPad = 8;  // 16-bit elements of padding per row of the K and V tiles
inline constexpr int64_t kSmemBudget = 48 * 1024;

// Shared memory per block: the K and V tiles only (storage type).
FA_HD constexpr int64_t smem_bytes(const Schedule& s, int d) { return 2 * int64_t(s.Bc) * (d + kPad) * 2; }
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

}  // namespace fa::step09
