#include "reference/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/dtype.hpp"
#include "harness/parallel.hpp"
#include "kernel/fp8.hpp"

namespace fa {

float Fp8Tensor::descale(int64_t b, int64_t h, int64_t r) const {
  return descales[size_t((b * heads + h) * groups + (groups > 1 ? fp8::group_of(r, true) : 0))];
}
float Fp8Tensor::value(int64_t b, int64_t h, int64_t r, int64_t c) const {
  return e4m3_bits_to_float(code(b, h, r, c)) * descale(b, h, r);
}

namespace {

// One tensor: each head's rows (transformed first when `transform`), a scale per group, the codes.
Fp8Tensor quantize_tensor(const Tensor4& x, bool block, bool transform) {
  Fp8Tensor t;
  t.B = x.B, t.heads = x.H, t.rows = x.rows, t.d = x.cols, t.groups = fp8::groups(x.rows, block);
  t.codes.assign(x.v.size(), 0);
  t.descales.assign(size_t(t.B * t.heads * t.groups), 1.0f);
  for (float v : x.v)  // a scale of inf or NaN would make every code of its group garbage
    if (!std::isfinite(v)) throw std::invalid_argument("quantize_fp8: a non-finite input value: its group's scale would not be finite");
  const int d = int(x.cols);
  parallel_for(t.B * t.heads, [&](int64_t bh) {
    const int64_t b = bh / t.heads, h = bh % t.heads;
    std::vector<float> y(size_t(x.rows * d));
    for (int64_t r = 0; r < x.rows; ++r) {
      float* row = y.data() + r * d;
      for (int c = 0; c < d; ++c) row[c] = x.at(b, h, r, c);
      if (transform) fp8::hadamard_row(row, d);
    }
    for (int64_t g = 0; g < t.groups; ++g) {
      const int64_t r0 = block ? g * fp8::kBlockRows : 0, r1 = block ? std::min(x.rows, r0 + fp8::kBlockRows) : x.rows;
      float amax = 0.0f;
      for (int64_t i = r0 * d; i < r1 * d; ++i) amax = std::max(amax, std::fabs(y[size_t(i)]));
      const float f = fp8::quant_factor(amax);
      t.descales[size_t(bh * t.groups + g)] = fp8::descale(amax);
      for (int64_t i = r0 * d; i < r1 * d; ++i)
        t.codes[size_t(bh * x.rows * d + i)] = float_to_e4m3_bits(y[size_t(i)] * f);
    }
  });
  return t;
}

Tensor4 values(const Fp8Tensor& t) {
  Tensor4 x(t.B, t.heads, t.rows, t.d);
  for (int64_t b = 0; b < t.B; ++b)
    for (int64_t h = 0; h < t.heads; ++h)
      for (int64_t r = 0; r < t.rows; ++r)
        for (int64_t c = 0; c < t.d; ++c) x.at(b, h, r, c) = t.value(b, h, r, c);
  return x;
}

}  // namespace

Fp8Inputs quantize_fp8(const Shape& s, const Inputs& in) {
  if (!s.fp8) throw std::invalid_argument("quantize_fp8: the shape is not an fp8 one (--dtype e4m3)");
  if (s.incoherent && !fp8::power_of_two(s.d))
    throw std::invalid_argument("quantize_fp8: --incoherent needs d a power of two (the Hadamard transform)");
  return {quantize_tensor(in.q, s.fp8_block, s.incoherent), quantize_tensor(in.k, s.fp8_block, s.incoherent),
          quantize_tensor(in.v, s.fp8_block, false)};
}

Inputs dequantize(const Fp8Inputs& f) { return {values(f.q), values(f.k), values(f.v)}; }

}  // namespace fa
