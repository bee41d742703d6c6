// The backward check, by FlashAttention's rule (max error <= 2 × that of the storage-precision naive
// backward + a floor), must be able to fail (a wrong element, a NaN anywhere, a forgotten softmax
// scale, a kernel that rounds too coarsely) and must pass what a correct kernel computes: step 08's
// blueprints, and gradients in fp32 with P and dS rounded to the storage type, emulated here.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

#include "reference/checks.hpp"
#include "kernel/dropout.hpp"
#include "reference/reference_lowp.hpp"
#include "core/registry.hpp"
#include "harness/runner.hpp"
#include "core/shapes.hpp"

using namespace fa;

namespace {

Shape shape(int64_t B, int64_t H, int64_t N, int64_t Nk, int64_t d, bool causal, DType t) {
  Shape s;
  s.B = B; s.H = H; s.N = N; s.Nk = Nk; s.d = d; s.causal = causal; s.dtype = t;
  return s;
}

// The reference's gradients of every head as floats, rounded to the storage type or not.
Grads from_reference(const Shape& s, const Gradients& g, bool round) {
  Grads out{Tensor4(s.B, s.H, s.N, s.d), Tensor4(s.B, s.H, s.Nk, s.d), Tensor4(s.B, s.H, s.Nk, s.d)};
  const auto put = [&](Tensor4& t, const std::vector<double>& v, int64_t rows) {
    for (size_t hi = 0; hi < g.heads.size(); ++hi)
      for (int64_t x = 0; x < rows * s.d; ++x) {
        const float f = float(v[size_t(int64_t(hi) * rows * s.d + x)]);
        t.v[size_t(g.heads[hi] * rows * s.d + x)] = round ? round_to(s.dtype, f) : f;
      }
  };
  put(out.dq, g.dq, s.N);
  put(out.dk, g.dk, s.Nk);
  put(out.dv, g.dv, s.Nk);
  return out;
}
Grads rounded(const Shape& s, const Gradients& g) { return from_reference(s, g, true); }
Grads exact(const Shape& s, const Gradients& g) { return from_reference(s, g, false); }

// x rounded to a significand of p bits (round to nearest): u = 2^-p.
float round_bits(float x, int p) {
  if (x == 0.0f || !std::isfinite(x)) return x;
  int e;
  std::frexp(x, &e);
  return float(std::ldexp(std::nearbyint(std::ldexp(double(x), p - e)), e - p));
}

// A kernel's arithmetic on the CPU: forward and backward in fp32, P and dS rounded by `rnd` before
// the products that use them (as tensor cores need); O and the gradients rounded to the storage type
// when `store` (all of it in fp32, unrounded, with rnd = identity and store = false).
template <class Round>
Grads emulate(const Shape& s, const Inputs& in, const Tensor4& dO, Round rnd, bool store = true) {
  Grads out{Tensor4(s.B, s.H, s.N, s.d), Tensor4(s.B, s.H, s.Nk, s.d), Tensor4(s.B, s.H, s.Nk, s.d)};
  const auto st = [&](float x) { return store ? round_to(s.dtype, x) : x; };
  const float scale = float(s.softmax_scale());
  const int64_t N = s.N, Nk = s.Nk, d = s.d;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      std::vector<float> S(size_t(N * Nk), 0.0f), P(size_t(N * Nk), 0.0f), O(size_t(N * d), 0.0f);
      std::vector<float> dS(size_t(N * Nk), 0.0f);
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
        for (int64_t c = 0; c < d; ++c) O[size_t(i * d + c)] = nv > 0 ? st(o[size_t(c)] / l) : 0.0f;
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
          out.dq.at(b, h, i, c) = st(acc * scale);
        }
      for (int64_t j = 0; j < Nk; ++j)
        for (int64_t c = 0; c < d; ++c) {
          float ak = 0.0f, av = 0.0f;
          for (int64_t i = 0; i < N; ++i) {
            ak += rnd(dS[size_t(i * Nk + j)]) * in.q.at(b, h, i, c);
            av += rnd(P[size_t(i * Nk + j)]) * dO.at(b, h, i, c);
          }
          out.dk.at(b, h, j, c) = st(ak * scale);
          out.dv.at(b, h, j, c) = st(av);
        }
    }
  return out;
}

// Fixture: B = 2, H = 2, causal, Nk != N, every head in the reference; the naive errors once.
struct Fixture {
  Shape s = shape(2, 2, 40, 56, 32, true, DType::f16);
  Inputs in = make_inputs(s, {31});
  Tensor4 dO = make_grad_output(s, 32);
  Gradients ref = reference_backward(s, in, dO);
  NaiveErrors naive = naive_lowp_errors(s, in, dO, ref);
};

// A case's inputs, dO, reference and naive errors.
struct Case {
  Shape s;
  Inputs in;
  Tensor4 dO;
  Gradients ref;
  NaiveErrors naive;
  Case(const Shape& sh, const InputSpec& spec)
      : s(sh), in(make_inputs(s, spec)), dO(make_grad_output(s, spec.seed + 1)), ref(reference_backward(s, in, dO)),
        naive(naive_lowp_errors(s, in, dO, ref)) {}
};

// The emulated kernel's check, with P and dS rounded to a significand of `bits` bits.
BackwardCheck emulated_check(const Shape& s, uint64_t seed, int bits) {
  const Case c(s, {seed});
  return check_backward(s, c.ref, c.naive, emulate(s, c.in, c.dO, [bits](float x) { return round_bits(x, bits); }));
}

double worst_bound_ratio(const BackwardCheck& c) {
  return std::max({c.dq.bound_ratio(), c.dk.bound_ratio(), c.dv.bound_ratio()});
}

double max_abs_of(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

const StepInfo& step08() {
  for (const StepInfo* st : all_steps())
    if (st->id == "08") return *st;
  throw std::logic_error("step 08 is not registered");
}

// The textbook backward of every head in double, with dropout (common/kernel/dropout.hpp): O = (P∘Z)V,
// dV = (P∘Z)ᵀdO, dP = (dO Vᵀ)∘Z, dS = P∘(dP − D), D_i = rowsum(dO∘O). Independent of reference.cpp.
Gradients textbook_dropout(const Shape& s, const Inputs& in, const Tensor4& dO) {
  const int64_t N = s.N, Nk = s.Nk, d = s.d, BH = s.B * s.H;
  Gradients g;
  g.N = N; g.Nk = Nk; g.d = d;
  g.dq.assign(size_t(BH * N * d), 0.0);
  g.dk.assign(size_t(BH * Nk * d), 0.0);
  g.dv.assign(size_t(BH * Nk * d), 0.0);
  const double scale = s.softmax_scale(), keep_scale = 1.0 / (1.0 - s.dropout);
  const uint32_t thr = dropout_threshold(float(s.dropout));
  for (int64_t bh = 0; bh < BH; ++bh) {
    g.heads.push_back(bh);
    const int64_t b = bh / s.H, h = bh % s.H;
    std::vector<double> P(size_t(N * Nk), 0.0), Z(size_t(N * Nk), 0.0), dS(size_t(N * Nk), 0.0);
    for (int64_t i = 0; i < N; ++i) {
      const int64_t nv = std::clamp<int64_t>(s.last_visible_key(i) + 1, 0, Nk);
      double m = -INFINITY, l = 0.0;
      for (int64_t j = 0; j < nv; ++j) {
        double acc = 0.0;
        for (int64_t c = 0; c < d; ++c) acc += double(in.q.at(b, h, i, c)) * in.k.at(b, h, j, c);
        P[size_t(i * Nk + j)] = scale * acc;
        m = std::max(m, scale * acc);
      }
      for (int64_t j = 0; j < nv; ++j) l += (P[size_t(i * Nk + j)] = std::exp(P[size_t(i * Nk + j)] - m));
      for (int64_t j = 0; j < nv; ++j) {
        P[size_t(i * Nk + j)] /= l;
        Z[size_t(i * Nk + j)] = dropout_keep(s.dropout_seed, s.dropout_offset, bh, i, j, thr) ? keep_scale : 0.0;
      }
      double D = 0.0;
      for (int64_t c = 0; c < d; ++c) {
        double o = 0.0;
        for (int64_t j = 0; j < nv; ++j) o += P[size_t(i * Nk + j)] * Z[size_t(i * Nk + j)] * in.v.at(b, h, j, c);
        D += o * dO.at(b, h, i, c);
      }
      for (int64_t j = 0; j < nv; ++j) {
        double dp = 0.0;
        for (int64_t c = 0; c < d; ++c) dp += double(dO.at(b, h, i, c)) * in.v.at(b, h, j, c);
        dS[size_t(i * Nk + j)] = P[size_t(i * Nk + j)] * (dp * Z[size_t(i * Nk + j)] - D);
      }
    }
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < Nk; ++j)
        for (int64_t c = 0; c < d; ++c) {
          const size_t q = size_t((bh * N + i) * d + c), kv = size_t((bh * Nk + j) * d + c), ij = size_t(i * Nk + j);
          g.dq[q] += scale * dS[ij] * in.k.at(b, h, j, c);
          g.dk[kv] += scale * dS[ij] * in.q.at(b, h, i, c);
          g.dv[kv] += P[ij] * Z[ij] * dO.at(b, h, i, c);
        }
  }
  return g;
}

}  // namespace

TEST_CASE("naive backward in the storage precision: its errors are above 0 and of the order of u") {
  // In units of u·max|g| (u the storage type's unit roundoff): rounding S, P, dP, dS and the result
  // costs a few; never 0 (nothing here is exact), never hundreds.
  uint64_t seed = 10;
  for (DType t : {DType::f16, DType::bf16})
    for (auto [N, Nk, d, causal] : {std::tuple<int64_t, int64_t, int64_t, bool>{40, 56, 32, true}, {113, 255, 64, false},
                                    {255, 113, 128, true}, {1, 64, 16, false}}) {
      const Case c(shape(1, 2, N, Nk, d, causal, t), {seed++});
      CAPTURE(c.s.str());
      const double u = unit_roundoff(t);
      for (auto [e, g] : {std::pair<double, const std::vector<double>*>{c.naive.dq, &c.ref.dq}, {c.naive.dk, &c.ref.dk},
                          {c.naive.dv, &c.ref.dv}}) {
        const double m = max_abs_of(*g);
        CAPTURE(e / (u * m));
        CHECK(e >= 0.1 * u * m);
        CHECK(e <= 100.0 * u * m);
      }
    }
}

TEST_CASE("naive backward in the storage precision: chosen heads give the same numbers as all heads") {
  const Shape s = shape(2, 3, 150, 140, 32, true, DType::bf16);
  const Inputs in = make_inputs(s, {5});
  const Tensor4 dO = make_grad_output(s, 6);
  const LowpGradients all = naive_backward_lowp(s, in, dO, {0, 1, 2, 3, 4, 5}), two = naive_backward_lowp(s, in, dO, {1, 4});
  CHECK(two.heads == std::vector<int64_t>{1, 4});
  for (int64_t k = 0; k < 2; ++k) {
    const int64_t bh = two.heads[size_t(k)];
    for (int64_t x = 0; x < s.N * s.d; ++x) CHECK(two.dq[size_t(k * s.N * s.d + x)] == all.dq[size_t(bh * s.N * s.d + x)]);
    for (int64_t x = 0; x < s.Nk * s.d; ++x) {
      CHECK(two.dk[size_t(k * s.Nk * s.d + x)] == all.dk[size_t(bh * s.Nk * s.d + x)]);
      CHECK(two.dv[size_t(k * s.Nk * s.d + x)] == all.dv[size_t(bh * s.Nk * s.d + x)]);
    }
  }
  CHECK_THROWS_AS(naive_backward_lowp(s, in, dO, {4, 1}), std::invalid_argument);
  CHECK_THROWS_AS(naive_backward_lowp(s, in, dO, {6}), std::invalid_argument);
}

TEST_CASE("naive backward in the storage precision: applies dropout's mask") {
  // Against a textbook fp64 backward with the same mask: close (a few u); against it without the mask:
  // far off (the mask really is applied, and is the same one).
  for (DType t : {DType::f16, DType::bf16}) {
    Shape s = shape(1, 2, 70, 90, 32, true, t);
    s.dropout = 0.3;
    s.dropout_seed = 0x1234567890ull;
    s.dropout_offset = 7;
    CAPTURE(s.str());
    const Inputs in = make_inputs(s, {3});
    const Tensor4 dO = make_grad_output(s, 4);
    const Gradients want = textbook_dropout(s, in, dO);
    const NaiveErrors e = naive_errors(want, naive_backward_lowp(s, in, dO, want.heads));
    Shape none = s;
    none.dropout = 0.0;
    const NaiveErrors off = naive_errors(want, naive_backward_lowp(none, in, dO, want.heads));
    const double u = unit_roundoff(t);
    for (auto [err, far, g] : {std::tuple<double, double, const std::vector<double>*>{e.dq, off.dq, &want.dq},
                               {e.dk, off.dk, &want.dk}, {e.dv, off.dv, &want.dv}}) {
      CHECK(err <= 20.0 * u * max_abs_of(*g));
      CHECK(far >= 0.1 * max_abs_of(*g));
    }
  }
}

TEST_CASE("backward check: the reference gradients pass, exact or rounded to the storage type") {
  Fixture f;
  const BackwardCheck a = check_backward(f.s, f.ref, f.naive, exact(f.s, f.ref));
  INFO(a.summary());
  CHECK(a.pass);
  CHECK(a.dq.by_naive);
  CHECK(a.checked_heads == 4);
  CHECK(a.dq.checked == f.s.q_elems());
  CHECK(a.dk.checked == f.s.kv_elems());
  CHECK(worst_bound_ratio(a) < 1e-3);
  const BackwardCheck b = check_backward(f.s, f.ref, f.naive, rounded(f.s, f.ref));
  INFO(b.summary());
  CHECK(b.pass);
  CHECK(worst_bound_ratio(b) > 0.0);   // the rounding is seen: the check compares
  CHECK(worst_bound_ratio(b) <= 0.5);  // one rounding is well inside twice the naive error
  CHECK(b.summary().find("PASS  dQ") != std::string::npos);
  CHECK(b.summary().find("= 2 × naive") != std::string::npos);
  // The overload that runs the naive backward itself agrees.
  const BackwardCheck c = check_backward(f.s, f.in, f.dO, f.ref, rounded(f.s, f.ref));
  CHECK(c.pass);
  CHECK(c.dq.naive == f.naive.dq);
  CHECK(c.dk.bound == b.dk.bound);
}

TEST_CASE("backward check: one element off by 3 times the bound fails and is named") {
  Fixture f;
  struct Which { Tensor4 Grads::*t; const std::vector<double> Gradients::*want; GradCheck BackwardCheck::*chk; int64_t rows; const char* name; };
  for (const Which w : {Which{&Grads::dq, &Gradients::dq, &BackwardCheck::dq, f.s.N, "dQ"},
                        Which{&Grads::dk, &Gradients::dk, &BackwardCheck::dk, f.s.Nk, "dK"},
                        Which{&Grads::dv, &Gradients::dv, &BackwardCheck::dv, f.s.Nk, "dV"}}) {
    CAPTURE(w.name);
    const Grads good = rounded(f.s, f.ref);
    const double bound = (check_backward(f.s, f.ref, f.naive, good).*w.chk).bound;
    // An element of head (b=1, h=0), i.e. position 2 in ref.heads.
    const int64_t hi = 2, b = 1, h = 0, i = w.rows / 2 + 1, c = 5;
    const double want = (f.ref.*w.want)[size_t((hi * w.rows + i) * f.s.d + c)];
    Grads got = good;
    (got.*w.t).at(b, h, i, c) = float(want + 3.0 * bound);
    const BackwardCheck chk = check_backward(f.s, f.ref, f.naive, got);
    const GradCheck& g = chk.*w.chk;
    INFO(chk.summary());
    CHECK_FALSE(chk.pass);
    CHECK_FALSE(g.pass);
    CHECK(g.bound == bound);
    CHECK(g.bound_ratio() == doctest::Approx(3.0).epsilon(0.01));
    CHECK(g.worst.b == b);
    CHECK(g.worst.h == h);
    CHECK(g.worst.i == i);
    CHECK(g.worst.j == c);
    CHECK(g.worst_want == want);
    CHECK(g.worst_got == double(float(want + 3.0 * bound)));
    CHECK(chk.summary().find("FAIL  " + std::string(w.name)) != std::string::npos);
    CHECK(chk.summary().find(" > bound") != std::string::npos);
    // The row by what it indexes (a query in dQ, a key in dK and dV), the column as c.
    const std::string row = std::string(w.name) == "dQ" ? "i=" : "j=";
    CHECK(chk.summary().find("(b=1, h=0, " + row + std::to_string(i) + ", c=" + std::to_string(c) + ")") != std::string::npos);
    // Half the bound on the exact gradients passes: the bound is the line.
    Grads near = exact(f.s, f.ref);
    (near.*w.t).at(b, h, i, c) = float(want + 0.5 * bound);
    CHECK(check_backward(f.s, f.ref, f.naive, near).pass);
  }
}

TEST_CASE("backward check: a NaN fails, in a checked head or not") {
  Fixture f;
  Grads got = rounded(f.s, f.ref);
  got.dk.at(0, 1, 7, 2) = std::numeric_limits<float>::quiet_NaN();
  const BackwardCheck a = check_backward(f.s, f.ref, f.naive, got);
  CHECK_FALSE(a.pass);
  CHECK(a.dk.nonfinite == 1);
  CHECK(std::isinf(a.dk.max_abs));
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
  const BackwardCheck b = check_backward(f.s, f.in, f.dO, one, got);
  CHECK_FALSE(b.pass);
  CHECK(b.checked_heads == 1);
  CHECK(b.dq.nonfinite == 1);
  CHECK(b.dq.max_abs <= b.dq.bound);  // the checked head is fine; the NaN scan fails it
  CHECK(b.summary().find("non-finite: 1") != std::string::npos);
}

TEST_CASE("backward check: gradients that forget the softmax scale fail") {
  Fixture f;
  Gradients wrong = f.ref;  // dQ = dS K and dK = dSᵀ Q, without the factor scale = 1/sqrt(d)
  for (double& x : wrong.dq) x /= f.s.softmax_scale();
  for (double& x : wrong.dk) x /= f.s.softmax_scale();
  const BackwardCheck c = check_backward(f.s, f.ref, f.naive, rounded(f.s, wrong));
  CHECK_FALSE(c.pass);
  CHECK_FALSE(c.dq.pass);
  CHECK_FALSE(c.dk.pass);
  CHECK(c.dv.pass);
  CHECK(c.dq.bound_ratio() > 100.0);
}

TEST_CASE("backward check: step 08's blueprints pass (ragged N, Nk != N, causal, both dtypes)") {
  const StepInfo& st = step08();
  size_t n = 0;
  const std::vector<test::Case> cases = {test::make_case(1, 2, 113, 255, 64, true, DType::f16),
                                         test::make_case(1, 2, 255, 113, 32, false, DType::bf16),
                                         test::make_case(2, 1, 77, 130, 128, true, DType::bf16),
                                         test::make_case(1, 2, 200, 200, 16, true, DType::f16, 6.0)};
  for (const test::Case& c : cases) {
    const std::string name = c.name();
    CAPTURE(name);
    const Inputs in = make_inputs(c.shape, c.inputs);
    const Forward fwd = st.blueprint(c.shape, in, st.default_options()).out;
    const Tensor4 dO = make_grad_output(c.shape, c.inputs.seed);
    const Gradients ref = reference_backward(c.shape, in, dO);
    const NaiveErrors naive = naive_lowp_errors(c.shape, in, dO, ref);
    for (const StepOptions& opt : test::all_options(st)) {
      const std::string variant = variant_name(opt);
      CAPTURE(variant);
      Grads got = st.backward_blueprint(c.shape, in, fwd, dO, opt).grads;
      const BackwardCheck chk = check_backward(c.shape, ref, naive, got);
      INFO(chk.summary());
      CHECK(chk.pass);
      CHECK(chk.dq.by_naive);
      CHECK(worst_bound_ratio(chk) > 0.0);
      // The same gradients with one dV element moved by 3 bounds fail.
      got.dv.at(0, 0, c.shape.Nk / 2, 1) += float(3.0 * chk.dv.bound);
      CHECK_FALSE(check_backward(c.shape, ref, naive, got).dv.pass);
      ++n;
    }
  }
  CHECK(n == cases.size() * test::all_options(st).size());  // every shape, every schedule (fused, naive, stored)
  CHECK(n > 0);
}

TEST_CASE("backward check: gradients computed entirely in fp32 pass with a large margin") {
  uint64_t seed = 20;
  for (DType t : {DType::f16, DType::bf16})
    for (auto [N, Nk, causal] : {std::tuple<int64_t, int64_t, bool>{90, 170, true}, {170, 60, false}}) {
      const Shape s = shape(1, 2, N, Nk, 64, causal, t);
      CAPTURE(s.str());
      const Case c(s, {seed++});
      const BackwardCheck chk = check_backward(s, c.ref, c.naive, emulate(s, c.in, c.dO, [](float x) { return x; }, false));
      INFO(chk.summary());
      CHECK(chk.pass);
      CHECK(worst_bound_ratio(chk) < 0.02);
    }
}

TEST_CASE("backward check: a kernel's arithmetic passes (fp32, P and dS rounded), fp16 and bf16") {
  // Not too tight: the emulated kernel passes on every shape, with room to spare. Not vacuous: its
  // errors are a visible fraction of the bound.
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
        CHECK(worst_bound_ratio(c) < 0.6);
        worst = std::max(worst, worst_bound_ratio(c));
      }
  CHECK(worst > 0.15);
}

TEST_CASE("backward check: the same arithmetic with 16 times the rounding error fails") {
  // P and dS rounded to 4 fewer bits than the storage type has (u·16): a kernel that loses that much
  // precision fails.
  uint64_t seed = 60;
  for (DType t : {DType::f16, DType::bf16})
    for (auto [N, Nk, causal] : {std::tuple<int64_t, int64_t, bool>{90, 170, true}, {170, 60, false}, {100, 100, true}}) {
      const Shape s = shape(1, 2, N, Nk, 64, causal, t);
      CAPTURE(s.str());
      const BackwardCheck c = emulated_check(s, seed++, (t == DType::f16 ? 11 : 8) - 4);
      INFO(c.summary());
      CHECK_FALSE(c.pass);
    }
}

TEST_CASE("backward check: a naive backward that overflows the storage type leaves the error-scale rule to decide") {
  // |S| ≈ 16 · 300² / 4 = 360000 > 65504: the fp16 naive backward's S is infinite, its error too, and
  // a bound of infinity would pass anything.
  Shape s = shape(1, 1, 20, 20, 16, false, DType::f16);
  Inputs in = make_inputs(s, {9});
  for (Tensor4* t : {&in.q, &in.k})
    for (float& x : t->v) x = 300.0f;
  const Tensor4 dO = make_grad_output(s, 10);
  const Gradients ref = reference_backward(s, in, dO);
  const NaiveErrors naive = naive_lowp_errors(s, in, dO, ref);
  CHECK(std::isinf(naive.dv));
  const BackwardCheck c = check_backward(s, ref, naive, rounded(s, ref));
  INFO(c.summary());
  CHECK_FALSE(c.dv.by_naive);
  CHECK(c.dv.pass);  // decided by |Δ|/tol
  CHECK(c.summary().find("overflowed") != std::string::npos);
  Grads bad = rounded(s, ref);
  bad.dv.at(0, 0, 3, 3) += 1.0f;
  CHECK_FALSE(check_backward(s, ref, naive, bad).dv.pass);
}

TEST_CASE("backward check, error-scale rule (no naive errors): one element off by 10 tolerances fails") {
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
    CHECK_FALSE(g.by_naive);
    CHECK(g.max_ratio == doctest::Approx(10.0).epsilon(0.01));
    CHECK(g.worst.b == b);
    CHECK(g.worst.h == h);
    CHECK(g.worst.i == i);
    CHECK(g.worst.j == c);
    CHECK(g.worst_tol >= tol);
    CHECK(g.worst_tol <= tol * 1.01);
    CHECK(chk.summary().find("FAIL  " + std::string(w.name)) != std::string::npos);
  }
  CHECK(check_backward(f.s, f.ref, rounded(f.s, f.ref)).pass);
}

TEST_CASE("backward check: gradients of the wrong shape, or naive errors below 0, are refused") {
  Fixture f;
  Grads got = rounded(f.s, f.ref);
  got.dk = Tensor4(f.s.B, f.s.H, f.s.N, f.s.d);  // dK with N rows instead of Nk
  CHECK_THROWS_AS(check_backward(f.s, f.ref, got), std::invalid_argument);
  CHECK_THROWS_AS(check_backward(f.s, f.ref, f.naive, got), std::invalid_argument);
  CHECK_THROWS_AS(check_backward(f.s, f.ref, NaiveErrors{-1.0, 0.0, 0.0}, rounded(f.s, f.ref)), std::invalid_argument);
}
