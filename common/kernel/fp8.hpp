// [fp8] What FP8's quantization is, written once for the host (common/reference/quantize.cpp: the
// reference's inputs, the blueprints) and the kernels (step 21's quantize kernel), so that both make
// the same codes bit for bit. Plain arithmetic: float adds, subtracts and multiplies, each rounded
// once, in the same order on both sides (none of them is an a·b + c that a compiler could fuse).
//
// A group of values (a head of Q, K or V, or a block of kFp8Block rows of it) is quantized as
//   amax = max |y|,   descale = amax / 448,   code = e4m3(y · (448 / amax))     (amax = 0: both 1)
// where y is the value itself, or for Q and K with [incoherent] the row's randomized Hadamard
// transform: y = H_d (x ∘ r) / √d, r a fixed ±1 vector. The kernels multiply codes; descale·code is
// the value they stand for.
#pragma once
#include <cstdint>

#include "kernel/attn_params.hpp"  // FA_HD

namespace fa::fp8 {

inline constexpr float kMax = 448.0f;      // e4m3's largest value (common/core/dtype.hpp, [e4m3])
inline constexpr int kBlockRows = 128;     // [fp8-scales] rows per scale with --fp8-scales block
inline constexpr float kPScale = 256.0f;   // [p-scale] P (at most 1) times 256 before its cast: 256 < 448
inline constexpr float kLog2PScale = 8.0f; // log2(kPScale): 256·2^x = 2^(x + 8) (step 21's --ops lean)
static_assert(kPScale == 256.0f, "kLog2PScale is log2(kPScale)");
// [two-level] The keys an FP8 kernel lets the tensor cores sum before it adds the sum into fp32 registers
// (one tile of step 21): their accumulator keeps about 13 bits (wgmma_emu's [fp22]), so a longer sum
// would lose a little at every instruction. The reference's tolerance counts ⌈kSumKeys/32⌉ such losses.
inline constexpr int kSumKeys = 128;

// [fp8-scales] The scale groups along a tensor's rows: one, or one per block of kBlockRows rows.
FA_HD constexpr int64_t groups(int64_t rows, bool block) { return block ? (rows + kBlockRows - 1) / kBlockRows : 1; }
FA_HD constexpr int64_t group_of(int64_t row, bool block) { return block ? row / kBlockRows : 0; }

// The factor a group's values are multiplied by before the cast, and the one the kernels multiply
// back in (the descale), from the group's largest magnitude.
FA_HD inline float quant_factor(float amax) { return amax > 0.0f ? kMax / amax : 1.0f; }
FA_HD inline float descale(float amax) { return amax > 0.0f ? amax / kMax : 1.0f; }

// [incoherent] r_c: a fixed sign per column, from a 32-bit mix of c (the same for every d, tensor and
// launch: Q and K must share it for QKᵀ to be unchanged).
FA_HD inline float hadamard_sign(int c) {
  uint32_t x = uint32_t(c) * 0x9e3779b9u + 0x7f4a7c15u;
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  return (x & 1u) ? -1.0f : 1.0f;
}
// 1/√d as the float the transform multiplies by (exact for d = 16, 64, 256).
FA_HD inline float inv_sqrt(int d) {
  return d == 16 ? 0.25f : d == 32 ? 0.17677669529663687f : d == 64 ? 0.125f : d == 128 ? 0.08838834764831845f : 0.0625f;
}
FA_HD constexpr bool power_of_two(int64_t d) { return d > 0 && (d & (d - 1)) == 0; }

// [incoherent] The transform of one row of d values in place (d a power of two, at most 256): signs,
// the fast Walsh–Hadamard butterflies (a, b) -> (a + b, a − b) with the lower index's value first,
// h = 1, 2, 4, …, then 1/√d. A warp of the quantize kernel runs the same butterflies across its lanes.
FA_HD inline void hadamard_row(float* y, int d) {
  for (int c = 0; c < d; ++c) y[c] *= hadamard_sign(c);
  for (int h = 1; h < d; h *= 2)
    for (int i = 0; i < d; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float a = y[j], b = y[j + h];
        y[j] = a + b;
        y[j + h] = a - b;
      }
  const float f = inv_sqrt(d);
  for (int c = 0; c < d; ++c) y[c] *= f;
}

}  // namespace fa::fp8
