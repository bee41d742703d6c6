// The backward check must be able to fail (a wrong element, a NaN anywhere, a forgotten softmax
// scale) and must pass what a correct kernel computes: gradients in fp32 with P and dS rounded to the
// storage type before the products, emulated here on the CPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

#include "checks.hpp"

using namespace fa;

namespace {

Shape shape(int64_t B, int64_t H, int64_t N, int64_t Nk, int64_t d, bool causal, DType t) {
  Shape s;
  s.B = B; s.H = H; s.N = N; s.Nk = Nk; s.d = d; s.causal = causal; s.dtype = t;
  return s;
}

// The reference's gradients of every head, rounded to the storage type (what an exact kernel returns).
Grads rounded(const Shape& s, const Gradients& g) {
  Grads out{Tensor4(s.B, s.H, s.N, s.d), Tensor4(s.B, s.H, s.Nk, s.d), Tensor4(s.B, s.H, s.Nk, s.d)};
  for (size_t hi = 0; hi < g.heads.size(); ++hi) {
    float* dq = out.dq.v.data() + g.heads[hi] * s.N * s.d;
    float* dk = out.dk.v.data() + g.heads[hi] * s.Nk * s.d;
    float* dv = out.dv.v.data() + g.heads[hi] * s.Nk * s.d;
    for (int64_t x = 0; x < s.N * s.d; ++x) dq[x] = round_to(s.dtype, float(g.dq[size_t(int64_t(hi) * s.N * s.d + x)]));
    for (int64_t x = 0; x < s.Nk * s.d; ++x) {
      dk[x] = round_to(s.dtype, float(g.dk[size_t(int64_t(hi) * s.Nk * s.d + x)]));
      dv[x] = round_to(s.dtype, float(g.dv[size_t(int64_t(hi) * s.Nk * s.d + x)]));
    }
  }
  return out;
}

// x rounded to a significand of p bits (round to nearest): u = 2^-p.
float round_bits(float x, int p) {
  if (x == 0.0f || !std::isfinite(x)) return x;
  int e;
  std::frexp(x, &e);
  return float(std::ldexp(std::nearbyint(std::ldexp(double(x), p - e)), e - p));
}

// A kernel's arithmetic on the CPU: forward and backward in fp32, P and dS rounded by `rnd` before
// the products that use them (as tensor cores need), O and the gradients rounded to the storage type.
template <class Round>
Grads emulate(const Shape& s, const Inputs& in, const Tensor4& dO, Round rnd) {
  Grads out{Tensor4(s.B, s.H, s.N, s.d), Tensor4(s.B, s.H, s.Nk, s.d), Tensor4(s.B, s.H, s.Nk, s.d)};
  const float scale = float(s.softmax_scale());
  const int64_t N = s.N, Nk = s.Nk, d = s.d;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      std::vector<float> S(size_t(N * Nk), 0.0f), P(size_t(N * Nk), 0.0f), O(size_t(N * d), 0.0f);
      std::vector<float> dP(size_t(N * Nk)), dS(size_t(N * Nk), 0.0f);
      for (int64_t i = 0; i < N; ++i) {
        const int64_t nv = std::clamp<int64_t>(s.last_visible_key(i) + 1, 0, Nk);
        float m = -INFINITY, l = 0.0f;
        for (int64_t j = 0; j < nv; ++j) {
          float acc = 0.0f;
          for (int64_t c = 0; c < d; ++c) acc += in.q.at(b, h, i, c) * in.k.at(b, h, j, c);
          S[size_t(i * Nk + j)] = acc * scale;
          m = std::max(m, acc * scale);
        }
        std::vector<float> o(size_t(d), 0.0f);
        for (int64_t j = 0; j < nv; ++j) {
          const float p = std::exp(S[size_t(i * Nk + j)] - m);
          l += p;
          for (int64_t c = 0; c < d; ++c) o[size_t(c)] += rnd(p) * in.v.at(b, h, j, c);
        }
        const float L = nv > 0 ? m + std::log(l) : INFINITY;
        for (int64_t c = 0; c < d; ++c) O[size_t(i * d + c)] = nv > 0 ? round_to(s.dtype, o[size_t(c)] / l) : 0.0f;
        float D = 0.0f;
        for (int64_t c = 0; c < d; ++c) D += dO.at(b, h, i, c) * O[size_t(i * d + c)];
        for (int64_t j = 0; j < nv; ++j) {
          const float p = std::exp(S[size_t(i * Nk + j)] - L);
          float dp = 0.0f;
          for (int64_t c = 0; c < d; ++c) dp += dO.at(b, h, i, c) * in.v.at(b, h, j, c);
          P[size_t(i * Nk + j)] = p;
          dS[size_t(i * Nk + j)] = p * (dp - D);
        }
      }
      for (int64_t i = 0; i < N; ++i)
        for (int64_t c = 0; c < d; ++c) {
          float acc = 0.0f;
          for (int64_t j = 0; j < Nk; ++j) acc += rnd(dS[size_t(i * Nk + j)]) * in.k.at(b, h, j, c);
          out.dq.at(b, h, i, c) = round_to(s.dtype, acc * scale);
        }
      for (int64_t j = 0; j < Nk; ++j)
        for (int64_t c = 0; c < d; ++c) {
          float ak = 0.0f, av = 0.0f;
          for (int64_t i = 0; i < N; ++i) {
            ak += rnd(dS[size_t(i * Nk + j)]) * in.q.at(b, h, i, c);
            av += rnd(P[size_t(i * Nk + j)]) * dO.at(b, h, i, c);
          }
          out.dk.at(b, h, j, c) = round_to(s.dtype, ak * scale);
          out.dv.at(b, h, j, c) = round_to(s.dtype, av);
        }
    }
  return out;
}

// Fixture: B = 2, H = 2, causal, Nk != N, every head in the reference.
struct Fixture {
  Shape s = shape(2, 2, 40, 56, 32, true, DType::f16);
  Inputs in = make_inputs(s, {31});
  Tensor4 dO = make_grad_output(s, 32);
  Gradients ref = reference_backward(s, in, dO);
};

// The gradients exactly (only float's rounding): the check sees no error but what a test puts in.
Grads exact(const Shape& s, const Gradients& g) {
  Grads out = rounded(s, g);
  for (size_t x = 0; x < g.dq.size(); ++x) out.dq.v[x] = float(g.dq[x]);
  for (size_t x = 0; x < g.dk.size(); ++x) { out.dk.v[x] = float(g.dk[x]); out.dv.v[x] = float(g.dv[x]); }
  return out;
}

// The emulated kernel's check, with P and dS rounded to a significand of `bits` bits.
BackwardCheck emulated_check(const Shape& s, uint64_t seed, int bits) {
  const Inputs in = make_inputs(s, {seed});
  const Tensor4 dO = make_grad_output(s, seed + 1);
  const Gradients ref = reference_backward(s, in, dO);
  return check_backward(s, ref, emulate(s, in, dO, [bits](float x) { return round_bits(x, bits); }));
}

double worst_ratio(const BackwardCheck& c) { return std::max({c.dq.max_ratio, c.dk.max_ratio, c.dv.max_ratio}); }

}  // namespace

TEST_CASE("backward check: the reference gradients pass, exact or rounded to the storage type") {
  Fixture f;
  const BackwardCheck a = check_backward(f.s, f.ref, exact(f.s, f.ref));
  INFO(a.summary());
  CHECK(a.pass);
  CHECK(a.checked_heads == 4);
  CHECK(a.dq.checked == f.s.q_elems());
  CHECK(a.dk.checked == f.s.kv_elems());
  CHECK(worst_ratio(a) < 1e-3);
  const BackwardCheck b = check_backward(f.s, f.ref, rounded(f.s, f.ref));
  INFO(b.summary());
  CHECK(b.pass);
  CHECK(worst_ratio(b) > 0.0);     // the rounding is seen: the check compares
  CHECK(worst_ratio(b) <= 0.2501);  // and one rounding (u·|g| <= u·mag) is at most 1/4 of it
  CHECK(b.summary().find("PASS  dQ") != std::string::npos);
}

TEST_CASE("backward check: one element off by 10 tolerances fails and is named") {
  Fixture f;
  struct Which { Tensor4 Grads::*t; const std::vector<double> Gradients::*want, Gradients::*mag; int64_t rows; const char* name; };
  for (const Which w : {Which{&Grads::dq, &Gradients::dq, &Gradients::dq_mag, f.s.N, "dQ"},
                        Which{&Grads::dk, &Gradients::dk, &Gradients::dk_mag, f.s.Nk, "dK"},
                        Which{&Grads::dv, &Gradients::dv, &Gradients::dv_mag, f.s.Nk, "dV"}}) {
    CAPTURE(w.name);
    // The element of head (b=1, h=0) with the largest error scale (so the floor does not matter).
    const int64_t hi = 2, b = 1, h = 0;
    int64_t best = 0;
    const std::vector<double>& mag = f.ref.*w.mag;
    for (int64_t x = 0; x < w.rows * f.s.d; ++x)
      if (mag[size_t(hi * w.rows * f.s.d + x)] > mag[size_t(hi * w.rows * f.s.d + best)]) best = x;
    const int64_t i = best / f.s.d, c = best % f.s.d;
    const size_t at = size_t(hi * w.rows * f.s.d + best);
    Grads got = exact(f.s, f.ref);
    const double want = (f.ref.*w.want)[at], tol = grad_tolerance(f.s, mag[at]);
    (got.*w.t).at(b, h, i, c) = float(want + 10.0 * tol);
    const BackwardCheck chk = check_backward(f.s, f.ref, got);
    const GradCheck& g = w.t == &Grads::dq ? chk.dq : w.t == &Grads::dk ? chk.dk : chk.dv;
    INFO(chk.summary());
    CHECK_FALSE(chk.pass);
    CHECK_FALSE(g.pass);
    CHECK(g.max_ratio == doctest::Approx(10.0).epsilon(0.01));
    CHECK(g.worst.b == b);
    CHECK(g.worst.h == h);
    CHECK(g.worst.i == i);
    CHECK(g.worst.j == c);
    CHECK(g.worst_want == want);
    CHECK(g.worst_got == double(float(want + 10.0 * tol)));
    CHECK(g.worst_tol >= tol);
    CHECK(g.worst_tol <= tol * 1.01);
    const std::string line = "FAIL  " + std::string(w.name);
    CHECK(chk.summary().find(line) != std::string::npos);
    const std::string place = "(b=1, h=0, i=" + std::to_string(i) + ", j=" + std::to_string(c) + ")";
    CHECK(chk.summary().find(place) != std::string::npos);
  }
}

TEST_CASE("backward check: a NaN fails, in a checked head or not") {
  Fixture f;
  Grads got = rounded(f.s, f.ref);
  got.dk.at(0, 1, 7, 2) = std::numeric_limits<float>::quiet_NaN();
  const BackwardCheck a = check_backward(f.s, f.ref, got);
  CHECK_FALSE(a.pass);
  CHECK(a.dk.nonfinite == 1);
  CHECK(std::isinf(a.dk.max_ratio));
  CHECK(a.dk.worst.b == 0);
  CHECK(a.dk.worst.h == 1);
  CHECK(a.dk.worst.i == 7);
  CHECK(a.dk.worst.j == 2);
  CHECK(a.dq.pass);
  CHECK(a.dv.pass);
  // The reference of head 0 only; an infinity in head 3 still fails (every element is scanned).
  const Gradients one = reference_backward(f.s, f.in, f.dO, {0});
  got = rounded(f.s, f.ref);
  got.dq.at(1, 1, 3, 0) = std::numeric_limits<float>::infinity();
  const BackwardCheck b = check_backward(f.s, one, got);
  CHECK_FALSE(b.pass);
  CHECK(b.checked_heads == 1);
  CHECK(b.dq.nonfinite == 1);
  CHECK(b.dq.max_ratio < 1.0);  // the checked head is fine; the NaN scan fails it
  CHECK(b.summary().find("non-finite: 1") != std::string::npos);
}

TEST_CASE("backward check: gradients that forget the softmax scale fail") {
  Fixture f;
  Gradients wrong = f.ref;  // dQ = dS K and dK = dSᵀ Q, without the factor scale = 1/sqrt(d)
  for (double& x : wrong.dq) x /= f.s.softmax_scale();
  for (double& x : wrong.dk) x /= f.s.softmax_scale();
  const BackwardCheck c = check_backward(f.s, f.ref, rounded(f.s, wrong));
  CHECK_FALSE(c.pass);
  CHECK_FALSE(c.dq.pass);
  CHECK_FALSE(c.dk.pass);
  CHECK(c.dv.pass);
  CHECK(c.dq.max_ratio > 100.0);
}

TEST_CASE("backward check: a kernel's arithmetic passes (fp32, P and dS rounded), fp16 and bf16") {
  // Not too tight: the emulated kernel passes on every shape, with room to spare. Not vacuous: its
  // errors are a visible fraction of the tolerance.
  double worst = 0.0;
  uint64_t seed = 40;
  for (DType t : {DType::f16, DType::bf16})
    for (bool causal : {false, true})
      for (auto [N, Nk, d] : {std::tuple<int64_t, int64_t, int64_t>{90, 170, 64}, {170, 60, 64}, {100, 100, 128}}) {
        const Shape s = shape(1, 2, N, Nk, d, causal, t);
        CAPTURE(s.str());
        const BackwardCheck c = emulated_check(s, seed++, t == DType::f16 ? 11 : 8);
        INFO(c.summary());
        CHECK(c.pass);
        CHECK(worst_ratio(c) < 0.6);
        worst = std::max(worst, worst_ratio(c));
      }
  CHECK(worst > 0.15);
}

TEST_CASE("backward check: the same arithmetic with 16 times the rounding error fails") {
  // P and dS rounded to 4 fewer bits than the storage type has (u·16): a kernel that loses that much
  // precision fails (shown on causal shapes, where the last keys are seen by few rows, so dV's
  // error cannot average out).
  uint64_t seed = 60;
  for (DType t : {DType::f16, DType::bf16})
    for (auto [N, Nk] : {std::pair<int64_t, int64_t>{90, 170}, {170, 60}, {100, 100}}) {
      const Shape s = shape(1, 2, N, Nk, 64, true, t);
      CAPTURE(s.str());
      const BackwardCheck c = emulated_check(s, seed++, (t == DType::f16 ? 11 : 8) - 4);
      INFO(c.summary());
      CHECK_FALSE(c.pass);
    }
}

TEST_CASE("backward check: gradients of the wrong shape are refused") {
  Fixture f;
  Grads got = rounded(f.s, f.ref);
  got.dk = Tensor4(f.s.B, f.s.H, f.s.N, f.s.d);  // dK with N rows instead of Nk
  CHECK_THROWS_AS(check_backward(f.s, f.ref, got), std::invalid_argument);
}
