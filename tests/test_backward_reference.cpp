// The backward reference against central finite differences of the forward reference, and the
// identity D = rowsum(dO ∘ O) = rowsum(dP ∘ P) that makes the fused backward's cost independent of N.
#include <doctest/doctest.h>

#include <cmath>

#include "reference.hpp"
#include "rng.hpp"

using namespace fa;

namespace {

Shape shape(int64_t N, int64_t Nk, int64_t d, bool causal) {
  Shape s;
  s.B = 1; s.H = 2; s.N = N; s.Nk = Nk; s.d = d; s.causal = causal;
  return s;
}

Tensor4 make_dO(const Shape& s, uint64_t seed) {
  Tensor4 t(s.B, s.H, s.N, s.d);
  Rng rng(seed);
  for (float& x : t.v) x = static_cast<float>(rng.normal());
  return t;
}

// f(Q, K, V) = Σ O ∘ dO, from the forward reference in double precision.
double objective(const Shape& s, const Inputs& in, const Tensor4& dO) {
  const Reference r = reference_forward(s, in);
  double f = 0.0;
  for (int64_t bh = 0; bh < s.B * s.H; ++bh)
    for (int64_t i = 0; i < s.N; ++i)
      for (int64_t c = 0; c < s.d; ++c) f += r.o_at(bh, i, c) * double(dO.v[static_cast<size_t>((bh * s.N + i) * s.d + c)]);
  return f;
}

// Central difference with h = 2^-8: x ± h is exact in float for these magnitudes, so the only
// error is the O(h²) truncation of the difference quotient.
double fd(const Shape& s, Inputs in, Tensor4 Inputs::*which, size_t at, const Tensor4& dO) {
  const float h = 0x1p-8f, x = (in.*which).v[at];
  (in.*which).v[at] = x + h;
  const double up = objective(s, in, dO);
  (in.*which).v[at] = x - h;
  const double down = objective(s, in, dO);
  return (up - down) / (2.0 * double(h));
}

void check_gradients(const Shape& s, uint64_t seed) {
  const Inputs in = make_inputs(s, {seed});
  const Tensor4 dO = make_dO(s, seed + 1);
  const Gradients g = reference_backward(s, in, dO);
  Rng pick(seed + 2);
  for (int t = 0; t < 12; ++t) {  // a sample of entries of each gradient
    const size_t iq = size_t(pick.below(in.q.v.size())), ik = size_t(pick.below(in.k.v.size()));
    const size_t iv = size_t(pick.below(in.v.v.size()));
    CHECK(g.dq[iq] == doctest::Approx(fd(s, in, &Inputs::q, iq, dO)).epsilon(1e-4).scale(1.0));
    CHECK(g.dk[ik] == doctest::Approx(fd(s, in, &Inputs::k, ik, dO)).epsilon(1e-4).scale(1.0));
    CHECK(g.dv[iv] == doctest::Approx(fd(s, in, &Inputs::v, iv, dO)).epsilon(1e-4).scale(1.0));
  }
}

}  // namespace

TEST_CASE("backward reference: dQ, dK, dV match finite differences of the forward") {
  check_gradients(shape(7, 7, 16, false), 11);
  check_gradients(shape(9, 5, 16, false), 12);
}

TEST_CASE("backward reference: causal, Nk != N both ways, rows with no key") {
  check_gradients(shape(6, 10, 16, true), 13);
  check_gradients(shape(10, 4, 16, true), 14);  // rows 0..5 see no key: their dO must not matter
  const Shape s = shape(10, 4, 16, true);
  const Inputs in = make_inputs(s, {15});
  Tensor4 dO = make_dO(s, 16);
  const Gradients a = reference_backward(s, in, dO);
  for (int64_t c = 0; c < s.d; ++c) dO.at(0, 0, 2, c) += 5.0f;  // row 2 sees no key
  const Gradients b = reference_backward(s, in, dO);
  for (size_t x = 0; x < a.dk.size(); ++x) CHECK(a.dk[x] == b.dk[x]);
  for (size_t x = 0; x < a.dv.size(); ++x) CHECK(a.dv[x] == b.dv[x]);
}

TEST_CASE("backward reference: a non-default softmax scale is differentiated too") {
  Shape s = shape(5, 6, 32, false);
  s.scale = 0.3;
  check_gradients(s, 17);
}

TEST_CASE("backward reference: D = rowsum(dO ∘ O) equals rowsum(dP ∘ P)") {
  const Shape s = shape(8, 11, 16, true);
  const Inputs in = make_inputs(s, {19});
  const Tensor4 dO = make_dO(s, 20);
  const Gradients g = reference_backward(s, in, dO);
  // Recompute rowsum(dP ∘ P) directly: dP_ij = dO_i · V_j, P from the forward definition.
  const double scale = s.softmax_scale();
  for (int64_t h = 0; h < s.H; ++h)
    for (int64_t i = 0; i < s.N; ++i) {
      const int64_t nv = std::min<int64_t>(s.last_visible_key(i) + 1, s.Nk);
      std::vector<double> p(static_cast<size_t>(std::max<int64_t>(nv, 0)));
      double m = -INFINITY, l = 0.0, sum = 0.0;
      for (int64_t j = 0; j < nv; ++j) {
        double x = 0;
        for (int64_t c = 0; c < s.d; ++c) x += double(in.q.at(0, h, i, c)) * double(in.k.at(0, h, j, c));
        p[static_cast<size_t>(j)] = x * scale;
        m = std::max(m, x * scale);
      }
      for (int64_t j = 0; j < nv; ++j) { p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - m); l += p[static_cast<size_t>(j)]; }
      for (int64_t j = 0; j < nv; ++j) {
        double dp = 0;
        for (int64_t c = 0; c < s.d; ++c) dp += double(dO.at(0, h, i, c)) * double(in.v.at(0, h, j, c));
        sum += p[static_cast<size_t>(j)] / l * dp;
      }
      CHECK(g.D[static_cast<size_t>(h * s.N + i)] == doctest::Approx(sum).epsilon(1e-12).scale(1e-12));
    }
}
