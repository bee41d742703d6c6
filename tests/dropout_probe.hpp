// The dropout mask read back from a forward's O, for the blueprints (tests/test_step12.cpp) and the
// kernels (tests/test_gpu.cpp) alike.
//
// [dropout-probe] With Q = K = 0 every score is 0, so each of the n_i keys query i sees gets the
// weight 1/n_i; with V_j = e_j (row j of V the j-th unit vector, d >= Nk),
//   O_ic = keep_ic / ((1 − P) · n_i)   for c < Nk,  0 for c >= Nk,
// so O_ic · n_i · (1 − P) is 1 or 0: keep_ic itself, up to the rounding of 1/(1 − P) and of O to
// the storage type (under 1 % in bf16). A weight dropped in the wrong place, a mask drawn for the
// wrong row, key or head, or a masked key that leaks in shows up as a wrong bit.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "kernel/dropout.hpp"
#include "core/problem.hpp"

namespace fa::test {

// The probe's inputs for shape s (Q = K = 0, V = the first Nk unit vectors); needs d >= Nk.
inline Inputs dropout_probe_inputs(const Shape& s) {
  if (s.d < s.Nk) throw std::invalid_argument("dropout probe: needs d >= Nk (one column of O per key)");
  Inputs in{Tensor4(s.B, s.H, s.N, s.d), Tensor4(s.B, s.H, s.Nk, s.d), Tensor4(s.B, s.H, s.Nk, s.d)};
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t j = 0; j < s.Nk; ++j) in.v.at(b, h, j, j) = 1.0f;
  return in;
}

// Keys query i sees (the causal mask, bottom-right aligned; Nk without it).
inline int64_t probe_visible(const Shape& s, int64_t i) {
  return std::max<int64_t>(0, std::min<int64_t>(s.Nk, s.last_visible_key(i) + 1));
}

// The weight (b, h, i, j) a probe expects to survive: key j visible to query i and kept by
// dropout_keep (common/kernel/dropout.hpp) under s's seed and offset (`threshold`: dropout_threshold(P)).
inline bool probe_keeps(const Shape& s, int64_t b, int64_t h, int64_t i, int64_t j, uint32_t threshold) {
  return j < probe_visible(s, i) && dropout_keep(s.dropout_seed, s.dropout_offset, b * s.H + h, i, j, threshold);
}

struct RecoveredMask {
  int64_t B = 0, H = 0, N = 0, Nk = 0;
  std::vector<uint8_t> keep;  // [B, H, N, Nk]: 1 where O says the weight was kept
  int64_t unclear = 0;        // values near neither 0 nor 1 (or not finite): O is not a mask at all
  int64_t stray = 0;          // nonzero O in a column c >= Nk, which no key feeds
  bool at(int64_t b, int64_t h, int64_t i, int64_t j) const { return keep[size_t(((b * H + h) * N + i) * Nk + j)] != 0; }
};

// keep_ij from the O of a forward run on dropout_probe_inputs(s) with s.dropout > 0.
inline RecoveredMask recover_dropout_mask(const Shape& s, const Tensor4& o) {
  if (o.B != s.B || o.H != s.H || o.rows != s.N || o.cols != s.d) throw std::invalid_argument("dropout probe: O has the wrong shape");
  RecoveredMask m;
  m.B = s.B, m.H = s.H, m.N = s.N, m.Nk = s.Nk;
  m.keep.assign(size_t(s.B * s.H * s.N * s.Nk), 0);
  const double kept = 1.0 - double(float(s.dropout));  // P as the kernels get it
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.N; ++i) {
        const double n = double(std::max<int64_t>(1, probe_visible(s, i)));
        for (int64_t c = 0; c < s.d; ++c) {
          const double x = double(o.at(b, h, i, c)) * n * kept;
          const bool one = std::fabs(x - 1.0) < 0.05, zero = std::fabs(x) < 0.05;
          if (!one && !zero) ++m.unclear;
          if (c >= s.Nk) m.stray += x != 0.0;
          else m.keep[size_t(((b * s.H + h) * s.N + i) * s.Nk + c)] = one;
        }
      }
  return m;
}

// Where the recovered mask differs from dropout_keep (common/kernel/dropout.hpp) — a key the row does not
// see must come back dropped. 0 means the same mask, bit for bit.
inline int64_t dropout_mask_mismatches(const Shape& s, const RecoveredMask& m) {
  const uint32_t threshold = dropout_threshold(float(s.dropout));
  int64_t bad = 0;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.N; ++i)
        for (int64_t j = 0; j < s.Nk; ++j) {
          bad += m.at(b, h, i, j) != probe_keeps(s, b, h, i, j, threshold);
        }
  return bad;
}

// [dropout-probe] The backward's probe: dO = one-hot rows (dO_ic = [c == i], needs N <= d), so
// dV_ji = Σ_i' (P ∘ Z)_i'j dO_i'i = P_ij·Z_ij — nonzero exactly where query i sees key j and the
// weight was kept (no logit of ordinary inputs underflows P to 0).
inline Tensor4 one_hot_grad_output(const Shape& s) {
  if (s.N > s.d) throw std::invalid_argument("dropout probe: one-hot dO needs N <= d");
  Tensor4 dO(s.B, s.H, s.N, s.d);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.N; ++i) dO.at(b, h, i, i) = 1.0f;
  return dO;
}

// Elements of dV (from one_hot_grad_output's dO) that disagree with the mask `want` draws: nonzero
// where the weight was dropped or the key is masked, zero where it was kept, or not finite.
inline int64_t dv_mask_mismatches(const Shape& want, const Tensor4& dv) {
  const uint32_t threshold = dropout_threshold(float(want.dropout));
  int64_t bad = 0;
  for (int64_t b = 0; b < want.B; ++b)
    for (int64_t h = 0; h < want.H; ++h)
      for (int64_t i = 0; i < want.N; ++i)
        for (int64_t j = 0; j < want.Nk; ++j) {
          const float x = dv.at(b, h, j, i);
          bad += !std::isfinite(x) || (x != 0.0f) != probe_keeps(want, b, h, i, j, threshold);
        }
  return bad;
}

// The backward probe's shapes: ragged N, Nk ≠ N both ways (keyless rows), one and two K/V tiles,
// every head dimension, both storage types, B = H = 2.
inline std::vector<Shape> backward_probe_shapes(double p, uint64_t seed, uint64_t offset) {
  struct Row { int64_t N, Nk, d; bool causal; DType t; };
  const Row rows[] = {{16, 33, 16, false, DType::f16}, {30, 130, 32, true, DType::bf16}, {60, 40, 64, true, DType::bf16},
                      {113, 255, 128, true, DType::f16}, {100, 77, 128, false, DType::bf16}};
  std::vector<Shape> out;
  for (const Row& r : rows) {
    Shape s;
    s.B = 2;
    s.H = 2;
    s.N = r.N;
    s.Nk = r.Nk;
    s.d = r.d;
    s.causal = r.causal;
    s.dtype = r.t;
    s.dropout = p;
    s.dropout_seed = seed + uint64_t(r.d);
    s.dropout_offset = offset;
    out.push_back(s);
  }
  return out;
}

}  // namespace fa::test
