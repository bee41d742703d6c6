// [fp8] The host's FP8 quantization of an fp8 shape's inputs (common/kernel/fp8.hpp says what it is):
// e4m3 codes with their descales, per (batch, head) or per block of 128 rows ([fp8-scales]), Q and K
// first through the randomized Hadamard transform with [incoherent]. The reference runs on the
// values the codes stand for (reference_forward on an fp8 shape); step 21's blueprint multiplies the
// codes, and its quantize kernel must make the same ones.
#pragma once
#include <cstdint>
#include <vector>

#include "core/problem.hpp"

namespace fa {

// One quantized tensor [B, heads, rows, d]: a code per element, a descale per scale group.
struct Fp8Tensor {
  int64_t B = 0, heads = 0, rows = 0, d = 0, groups = 1;  // groups per (b, head) along the rows
  std::vector<uint8_t> codes;   // [B, heads, rows, d]
  std::vector<float> descales;  // [B, heads, groups]
  uint8_t code(int64_t b, int64_t h, int64_t r, int64_t c) const { return codes[size_t(((b * heads + h) * rows + r) * d + c)]; }
  float descale(int64_t b, int64_t h, int64_t r) const;
  // e4m3(code) · descale, rounded to float once (2^-24 relatively: far below any FP8 tolerance)
  float value(int64_t b, int64_t h, int64_t r, int64_t c) const;
};

struct Fp8Inputs {
  Fp8Tensor q, k, v;
};

// Q, K, V of an fp8 shape (s.fp8) quantized as the kernels do. Throws std::invalid_argument for another shape.
Fp8Inputs quantize_fp8(const Shape& s, const Inputs& in);
// The values the codes stand for, as Inputs: what the reference multiplies for an fp8 shape.
Inputs dequantize(const Fp8Inputs& f);

}  // namespace fa
