// The check must be able to fail: NaN, a wrong element, a wrong L, an unwritten row.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "reference/checks.hpp"

using namespace fa;

namespace {
struct Fixture {
  Shape s;
  Inputs in;
  Reference ref;
  Forward good;
  Fixture() {
    s.B = 2; s.H = 2; s.N = 20; s.Nk = 24; s.d = 32; s.causal = true;
    in = make_inputs(s, {29});
    ref = reference_forward(s, in);
    good.o = Tensor4(s.B, s.H, s.N, s.d);
    good.lse = Tensor4(s.B, s.H, s.N, 1);
    for (int64_t bh = 0; bh < s.B * s.H; ++bh)
      for (int64_t i = 0; i < s.N; ++i) {
        good.lse.v[static_cast<size_t>(bh * s.N + i)] = float(ref.lse_at(bh, i));
        for (int64_t c = 0; c < s.d; ++c)
          good.o.v[static_cast<size_t>((bh * s.N + i) * s.d + c)] = round_to(s.dtype, float(ref.o_at(bh, i, c)));
      }
  }
};
}  // namespace

TEST_CASE("the reference rounded to the storage type passes") {
  Fixture f;
  const Check c = check_forward(f.s, f.in, f.ref, f.good);
  CHECK(c.pass);
  CHECK(c.max_abs > 0.0);  // rounding is visible: the check really compares
  CHECK(c.max_abs <= unit_roundoff(f.s.dtype) * 4);
}

TEST_CASE("one NaN in O fails, and is reported where it is") {
  Fixture f;
  f.good.o.at(1, 0, 7, 5) = std::numeric_limits<float>::quiet_NaN();
  const Check c = check_forward(f.s, f.in, f.ref, f.good);
  CHECK_FALSE(c.pass);
  CHECK(c.nonfinite_o == 1);
  CHECK(std::isinf(c.max_abs));
  CHECK(c.worst.b == 1);
  CHECK(c.worst.h == 0);
  CHECK(c.worst.i == 7);
  CHECK(c.worst.j == 5);
  CHECK(c.summary().find("FAIL") != std::string::npos);
}

TEST_CASE("a NaN in a row that is not checked still fails") {
  Fixture f;
  Reference few = reference_forward(f.s, f.in, {0, 19});
  f.good.o.at(0, 1, 10, 3) = std::numeric_limits<float>::quiet_NaN();
  CHECK_FALSE(check_forward(f.s, f.in, few, f.good).pass);
}

TEST_CASE("an error just past the tolerance fails, just inside passes") {
  Fixture f;
  const double tol = check_forward(f.s, f.in, f.ref, f.good).atol;
  Forward out = f.good;
  const float want = float(f.ref.o_at(0, 3, 2));
  out.o.at(0, 0, 3, 2) = want + float(2.0 * tol);
  CHECK_FALSE(check_forward(f.s, f.in, f.ref, out).pass);
  out.o.at(0, 0, 3, 2) = want + float(0.5 * tol);
  CHECK(check_forward(f.s, f.in, f.ref, out).pass);
}

TEST_CASE("L must be +inf exactly where a row sees no key, and close elsewhere") {
  Fixture f;
  f.s.N = 20; f.s.Nk = 24;  // Nk > N: every row sees a key
  Forward out = f.good;
  out.lse.at(0, 0, 4, 0) = std::numeric_limits<float>::infinity();
  CHECK_FALSE(check_forward(f.s, f.in, f.ref, out).pass);
  out = f.good;
  out.lse.at(0, 0, 4, 0) += 0.01f;
  CHECK_FALSE(check_forward(f.s, f.in, f.ref, out).pass);
  out = f.good;
  out.lse.at(1, 1, 0, 0) = std::numeric_limits<float>::quiet_NaN();
  CHECK_FALSE(check_forward(f.s, f.in, f.ref, out).pass);
}

TEST_CASE("relative L2 error is zero for an exact answer and grows with the error") {
  Fixture f;
  Forward exact = f.good;
  for (int64_t bh = 0; bh < f.s.B * f.s.H; ++bh)
    for (int64_t i = 0; i < f.s.N; ++i)
      for (int64_t c = 0; c < f.s.d; ++c)
        exact.o.v[static_cast<size_t>((bh * f.s.N + i) * f.s.d + c)] = float(f.ref.o_at(bh, i, c));
  const Check a = check_forward(f.s, f.in, f.ref, exact);
  CHECK(a.rel_l2 < 1e-6);
  for (float& x : exact.o.v) x *= 1.01f;
  const Check b = check_forward(f.s, f.in, f.ref, exact);
  CHECK(b.rel_l2 == doctest::Approx(0.01).epsilon(0.01));
  CHECK_FALSE(b.pass);
}
