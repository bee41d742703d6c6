// The backward reference against central finite differences of the forward reference; the identity
// D = rowsum(dO ∘ O) = rowsum(dP ∘ P) that makes the fused backward's cost independent of N; the
// blocked computation against the unblocked one; head subsets; the error scales; dO.
#include <doctest/doctest.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "grad_scales.hpp"
#include "reference/reference.hpp"
#include "core/rng.hpp"

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

namespace {

// The textbook backward of one head, all rows at once (what reference_backward computed before it
// worked in blocks): the blocked, two-pass version must give the same numbers.
struct Unblocked {
  std::vector<double> dq, dk, dv, D;
};
Unblocked unblocked(const Shape& s, const Inputs& in, const Tensor4& dO, int64_t b, int64_t h) {
  using M = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  M Q(s.N, s.d), K(s.Nk, s.d), V(s.Nk, s.d), G(s.N, s.d);
  for (int64_t i = 0; i < s.N; ++i)
    for (int64_t c = 0; c < s.d; ++c) { Q(i, c) = in.q.at(b, h, i, c); G(i, c) = dO.at(b, h, i, c); }
  for (int64_t j = 0; j < s.Nk; ++j)
    for (int64_t c = 0; c < s.d; ++c) { K(j, c) = in.k.at(b, h, j, c); V(j, c) = in.v.at(b, h, j, c); }
  const double scale = s.softmax_scale();
  const M S = scale * (Q * K.transpose());
  M P = M::Zero(s.N, s.Nk);
  for (int64_t i = 0; i < s.N; ++i) {
    const int64_t nv = std::min<int64_t>(s.last_visible_key(i) + 1, s.Nk);
    if (nv <= 0) continue;
    const double m = S.row(i).head(nv).maxCoeff();
    double l = 0.0;
    for (int64_t j = 0; j < nv; ++j) { P(i, j) = std::exp(S(i, j) - m); l += P(i, j); }
    P.row(i).head(nv) /= l;
  }
  const M O = P * V, dP = G * V.transpose();
  M dS(s.N, s.Nk);
  Unblocked u;
  for (int64_t i = 0; i < s.N; ++i) {
    u.D.push_back(G.row(i).dot(O.row(i)));
    for (int64_t j = 0; j < s.Nk; ++j) dS(i, j) = P(i, j) * (dP(i, j) - u.D.back());
  }
  const M dQ = scale * (dS * K), dK = scale * (dS.transpose() * Q), dV = P.transpose() * G;
  u.dq.assign(dQ.data(), dQ.data() + dQ.size());
  u.dk.assign(dK.data(), dK.data() + dK.size());
  u.dv.assign(dV.data(), dV.data() + dV.size());
  return u;
}

void check_close(const std::vector<double>& got, size_t offset, const std::vector<double>& want) {
  double scale = 0.0, worst = 0.0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (size_t x = 0; x < want.size(); ++x) worst = std::max(worst, std::fabs(got[offset + x] - want[x]));
  CHECK(worst <= 1e-12 * scale);
}

}  // namespace

TEST_CASE("backward reference: blocks of rows and keys give the unblocked numbers (N, Nk not multiples of 128)") {
  for (const Shape& s : {shape(300, 270, 32, false), shape(290, 333, 16, true), shape(333, 140, 16, true)}) {
    CAPTURE(s.str());
    const Inputs in = make_inputs(s, {21});
    const Tensor4 dO = make_grad_output(s, 22);
    const Gradients g = reference_backward(s, in, dO);
    for (int64_t h = 0; h < s.H; ++h) {
      const Unblocked u = unblocked(s, in, dO, 0, h);
      check_close(g.dq, g.q_index(h, 0, 0), u.dq);
      check_close(g.dk, g.kv_index(h, 0, 0), u.dk);
      check_close(g.dv, g.kv_index(h, 0, 0), u.dv);
      check_close(g.D, size_t(h * s.N), u.D);
    }
  }
}

TEST_CASE("backward reference: a subset of heads gives the same numbers as all heads") {
  Shape s = shape(70, 150, 16, true);
  s.B = 2;
  s.H = 3;
  const Inputs in = make_inputs(s, {23});
  const Tensor4 dO = make_grad_output(s, 24);
  const Gradients all = reference_backward(s, in, dO), two = reference_backward(s, in, dO, {1, 4});
  REQUIRE(two.heads == std::vector<int64_t>{1, 4});
  CHECK(two.dq.size() == size_t(2 * s.N * s.d));
  CHECK(two.dk_mag.size() == size_t(2 * s.Nk * s.d));
  for (int64_t hi = 0; hi < 2; ++hi) {
    const int64_t bh = two.heads[size_t(hi)];
    for (int64_t i = 0; i < s.N; ++i) {
      CHECK(two.D[size_t(hi * s.N + i)] == all.D[size_t(bh * s.N + i)]);
      for (int64_t c = 0; c < s.d; ++c) {
        CHECK(two.dq[two.q_index(hi, i, c)] == all.dq[all.q_index(bh, i, c)]);
        CHECK(two.dq_mag[two.q_index(hi, i, c)] == all.dq_mag[all.q_index(bh, i, c)]);
      }
    }
    for (int64_t j = 0; j < s.Nk; ++j)
      for (int64_t c = 0; c < s.d; ++c) {
        CHECK(two.dk[two.kv_index(hi, j, c)] == all.dk[all.kv_index(bh, j, c)]);
        CHECK(two.dv[two.kv_index(hi, j, c)] == all.dv[all.kv_index(bh, j, c)]);
        CHECK(two.dv_mag[two.kv_index(hi, j, c)] == all.dv_mag[all.kv_index(bh, j, c)]);
      }
  }
  CHECK_THROWS_AS(reference_backward(s, in, dO, {4, 1}), std::invalid_argument);
  CHECK_THROWS_AS(reference_backward(s, in, dO, {6}), std::invalid_argument);
}

TEST_CASE("backward reference: first_last_heads takes exactly the heads --check-heads asks for") {
  Shape s;
  s.B = 2;
  s.H = 3;
  CHECK(first_last_heads(s, 1) == std::vector<int64_t>{0});
  CHECK(first_last_heads(s, 2) == std::vector<int64_t>{0, 5});
  CHECK(first_last_heads(s, 3) == std::vector<int64_t>{0, 1, 5});
  CHECK(first_last_heads(s, 6) == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
  CHECK(first_last_heads(s, 100) == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
}

TEST_CASE("backward reference: pick_heads takes every head on small shapes, the first and last on large") {
  Shape s = shape(64, 64, 64, false);
  s.B = 2;
  s.H = 3;
  CHECK(pick_heads(s) == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
  s.B = 4; s.H = 16; s.N = s.Nk = 16384; s.d = 128;
  CHECK(pick_heads(s) == std::vector<int64_t>{0, 63});
  s.B = 1; s.H = 1;
  CHECK(pick_heads(s) == std::vector<int64_t>{0});
}

TEST_CASE("backward reference: the error scales bound the gradients elementwise") {
  for (const Shape& s : {shape(150, 140, 32, false), shape(140, 170, 16, true), shape(170, 60, 16, true)}) {
    CAPTURE(s.str());
    const Inputs in = make_inputs(s, {25});
    const Tensor4 dO = make_grad_output(s, 26);
    const test::ScaleBound sb = test::scale_bound(reference_backward(s, in, dO));
    CHECK(sb.violations == 0);
    // And they are not vacuous: somewhere a gradient reaches a good part of its scale.
    CHECK(sb.most_dv > 0.5);
  }
}

TEST_CASE("make_grad_output: seeded randn in the storage type, its own stream") {
  Shape s = shape(300, 300, 64, false);
  s.dtype = DType::bf16;
  const Tensor4 a = make_grad_output(s, 7), b = make_grad_output(s, 7), c = make_grad_output(s, 8);
  CHECK(a.v == b.v);
  CHECK(a.v != c.v);
  CHECK(a.rows == s.N);
  CHECK(a.cols == s.d);
  double sum = 0.0, sum2 = 0.0;
  for (float x : a.v) {
    CHECK(x == round_to(s.dtype, x));
    sum += x;
    sum2 += double(x) * x;
  }
  const double n = double(a.v.size()), mean = sum / n;
  CHECK(std::fabs(mean) < 0.02);
  CHECK(std::sqrt(sum2 / n - mean * mean) == doctest::Approx(1.0).epsilon(0.02));
  // Not Q's stream: dO and Q of one seed are unrelated.
  const Inputs in = make_inputs(s, {7});
  double dot = 0.0;
  for (size_t x = 0; x < a.v.size(); ++x) dot += double(a.v[x]) * (in.q.v[x] - 0.5);
  CHECK(std::fabs(dot / n) < 0.02);
}
