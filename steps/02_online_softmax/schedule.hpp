// Step 02 — online softmax: one fused kernel, S and P never touch HBM.
//
// Each warp owns one query row and streams over the keys it may see, keeping a running maximum m,
// a running sum l and an unnormalized output o (Milakov & Gimelshein, "Online normalizer
// calculation for softmax", 2018). Nothing is tiled in shared memory yet: every query reads every
// key and value row itself — fusion without reuse. Step 03 adds the reuse.
#pragma once
#include <cstddef>
#include <cmath>
#include <cstdint>

#include "kernel/attn_params.hpp"
#include "kernel/causal.hpp"
#include "core/step.hpp"

namespace fa::step02 {

inline constexpr int kWarps = 4;  // query rows per block (one per warp)
static_assert(kWarps >= 1 && kWarps <= 32, "one to 32 warps per block");

// A row of d elements is spread over the lanes of a warp: EPL consecutive elements per lane, so a
// warp reads a whole 2·d-byte row of K or V in one coalesced access. d = 16 uses only 16 lanes.
FA_HD constexpr int elems_per_lane(int d) { return d >= 32 ? d / 32 : 1; }
FA_HD constexpr int active_lanes(int d) { return d / elems_per_lane(d); }
static_assert(active_lanes(16) == 16 && active_lanes(128) == 32, "lanes per row");

// [rescale-guard] exp(m_old - m_new), the factor that moves an accumulator from the old maximum to
// the new one. When both are -inf (nothing seen yet, and nothing new either) the difference is
// NaN; the accumulators are still empty, so the factor that keeps them empty is 0.
FA_HD inline float rescale_factor(float m_old, float m_new) {
  return m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
}

// The GPU side (kernel.cu).
void launch(const AttnParams& p, const StepOptions& opts, void* stream);
size_t workspace_bytes(const Shape& s, const StepOptions& opts);

// The CPU side (blueprint.cpp).
BlueprintResult blueprint(const Shape& s, const Inputs& in);
LedgerSet closed_form(const Shape& s);

}  // namespace fa::step02
