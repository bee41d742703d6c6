// The Eigen reference against plain double loops and against identities softmax attention obeys.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "reference/reference.hpp"

using namespace fa;

namespace {

Shape shape(int64_t B, int64_t H, int64_t N, int64_t Nk, int64_t d, bool causal) {
  Shape s;
  s.B = B; s.H = H; s.N = N; s.Nk = Nk; s.d = d; s.causal = causal;
  return s;
}

// The definition, written as directly as possible: loops, no Eigen, no tricks beyond the max.
void naive(const Shape& s, const Inputs& in, int64_t b, int64_t h, int64_t i, std::vector<double>& o, double& L) {
  const double scale = 1.0 / std::sqrt(double(s.d));
  std::vector<double> S(static_cast<size_t>(s.Nk));
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < s.Nk; ++j) {
    double acc = 0;
    for (int64_t c = 0; c < s.d; ++c) acc += double(in.q.at(b, h, i, c)) * double(in.k.at(b, h, j, c));
    const bool visible = !s.causal || j <= i + s.Nk - s.N;
    S[static_cast<size_t>(j)] = visible ? acc * scale : -std::numeric_limits<double>::infinity();
    m = std::max(m, S[static_cast<size_t>(j)]);
  }
  o.assign(static_cast<size_t>(s.d), 0.0);
  if (std::isinf(m)) { L = std::numeric_limits<double>::infinity(); return; }
  double l = 0;
  for (int64_t j = 0; j < s.Nk; ++j) l += std::exp(S[static_cast<size_t>(j)] - m);
  for (int64_t j = 0; j < s.Nk; ++j) {
    const double p = std::exp(S[static_cast<size_t>(j)] - m) / l;
    for (int64_t c = 0; c < s.d; ++c) o[static_cast<size_t>(c)] += p * double(in.v.at(b, h, j, c));
  }
  L = m + std::log(l);
}

}  // namespace

TEST_CASE("reference equals plain double loops (causal and not, Nk != N both ways)") {
  for (bool causal : {false, true})
    for (auto [N, Nk] : {std::pair<int64_t, int64_t>{7, 7}, {5, 11}, {11, 5}, {1, 1}}) {
      const Shape s = shape(2, 2, N, Nk, 16, causal);
      const Inputs in = make_inputs(s, {3});
      const Reference ref = reference_forward(s, in);
      for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.H; ++h)
          for (int64_t i = 0; i < s.N; ++i) {
            std::vector<double> o;
            double L;
            naive(s, in, b, h, i, o, L);
            const int64_t bh = b * s.H + h;
            if (std::isinf(L)) CHECK(std::isinf(ref.lse_at(bh, i)));
            else CHECK(ref.lse_at(bh, i) == doctest::Approx(L).epsilon(1e-12));
            for (int64_t c = 0; c < s.d; ++c) CHECK(ref.o_at(bh, i, c) == doctest::Approx(o[static_cast<size_t>(c)]).epsilon(1e-12));
          }
    }
}

TEST_CASE("softmax rows sum to one: O of an all-ones V is one") {
  const Shape s = shape(1, 2, 13, 9, 32, false);
  Inputs in = make_inputs(s, {5});
  for (float& x : in.v.v) x = 1.0f;
  const Reference ref = reference_forward(s, in);
  for (double x : ref.o) CHECK(x == doctest::Approx(1.0).epsilon(1e-13));
}

TEST_CASE("shift invariance: adding u to every key leaves O and moves L by scale·q·u") {
  const Shape s = shape(1, 1, 6, 10, 16, false);
  const Inputs in = make_inputs(s, {9});
  Inputs shifted = in;
  std::vector<float> u(static_cast<size_t>(s.d));
  for (int64_t c = 0; c < s.d; ++c) u[static_cast<size_t>(c)] = 0.25f * float(c % 5) - 0.5f;  // exact in fp16
  for (int64_t j = 0; j < s.Nk; ++j)
    for (int64_t c = 0; c < s.d; ++c) shifted.k.at(0, 0, j, c) += u[static_cast<size_t>(c)];
  const Reference a = reference_forward(s, in), b = reference_forward(s, shifted);
  for (size_t x = 0; x < a.o.size(); ++x) CHECK(b.o[x] == doctest::Approx(a.o[x]).epsilon(1e-10));
  for (int64_t i = 0; i < s.N; ++i) {
    double qu = 0;
    for (int64_t c = 0; c < s.d; ++c) qu += double(in.q.at(0, 0, i, c)) * u[static_cast<size_t>(c)];
    CHECK(b.lse_at(0, i) - a.lse_at(0, i) == doctest::Approx(qu / 4.0).epsilon(1e-9));  // scale = 1/sqrt(16)
  }
}

TEST_CASE("one key: O is that key's value and L its score") {
  const Shape s = shape(1, 1, 3, 1, 16, false);
  const Inputs in = make_inputs(s, {11});
  const Reference ref = reference_forward(s, in);
  for (int64_t i = 0; i < s.N; ++i) {
    double sc = 0;
    for (int64_t c = 0; c < s.d; ++c) sc += double(in.q.at(0, 0, i, c)) * double(in.k.at(0, 0, 0, c));
    CHECK(ref.lse_at(0, i) == doctest::Approx(sc / 4.0).epsilon(1e-12));
    for (int64_t c = 0; c < s.d; ++c) CHECK(ref.o_at(0, i, c) == doctest::Approx(in.v.at(0, 0, 0, c)).epsilon(1e-12));
  }
}

TEST_CASE("causal is bottom-right aligned: row i ignores keys after i + Nk - N") {
  const Shape s = shape(1, 1, 4, 9, 16, true);  // Nk - N = 5: row 0 sees keys 0..5
  const Inputs in = make_inputs(s, {13});
  Inputs changed = in;
  for (int64_t c = 0; c < s.d; ++c) { changed.k.at(0, 0, 6, c) += 3.0f; changed.v.at(0, 0, 6, c) -= 2.0f; }
  const Reference a = reference_forward(s, in), b = reference_forward(s, changed);
  for (int64_t c = 0; c < s.d; ++c) CHECK(a.o_at(0, 0, c) == b.o_at(0, 0, c));      // row 0 cannot see key 6
  bool row1_moved = false;                                                          // row 1 sees keys 0..6
  for (int64_t c = 0; c < s.d; ++c) row1_moved = row1_moved || a.o_at(0, 1, c) != b.o_at(0, 1, c);
  CHECK(row1_moved);
  CHECK(s.last_visible_key(0) == 5);
  CHECK(s.last_visible_key(3) == 8);
}

TEST_CASE("rows that see no key: O = 0 and L = +inf") {
  const Shape s = shape(1, 2, 9, 4, 16, true);  // Nk - N = -5: rows 0..4 see nothing, row 5 sees key 0
  const Inputs in = make_inputs(s, {17});
  const Reference ref = reference_forward(s, in);
  for (int64_t bh = 0; bh < 2; ++bh) {
    for (int64_t i = 0; i < 5; ++i) {
      CHECK(std::isinf(ref.lse_at(bh, i)));
      CHECK(ref.lse_at(bh, i) > 0);
      for (int64_t c = 0; c < s.d; ++c) CHECK(ref.o_at(bh, i, c) == 0.0);
    }
    CHECK(std::isfinite(ref.lse_at(bh, 5)));
    for (int64_t c = 0; c < s.d; ++c) CHECK(ref.o_at(bh, 5, c) == doctest::Approx(in.v.at(0, bh, 0, c)).epsilon(1e-12));
  }
}

TEST_CASE("sampled rows match the same rows computed in full") {
  Shape s = shape(1, 2, 300, 280, 64, true);
  const Inputs in = make_inputs(s, {19});
  const std::vector<int64_t> rows = pick_rows(s, 19, 1e6);  // force sampling
  REQUIRE(rows.size() < size_t(s.N));
  REQUIRE(rows.size() >= 8);
  CHECK(rows.front() == 0);
  CHECK(rows.back() == s.N - 1);
  const Reference part = reference_forward(s, in, rows), full = reference_forward(s, in);
  for (size_t r = 0; r < rows.size(); ++r)
    for (int64_t bh = 0; bh < 2; ++bh) {
      CHECK(part.lse_at(bh, int64_t(r)) == full.lse_at(bh, rows[r]));
      for (int64_t c = 0; c < s.d; ++c) CHECK(part.o_at(bh, int64_t(r), c) == full.o_at(bh, rows[r], c));
    }
}

TEST_CASE("inputs are seeded, never zero, and exactly representable in the storage type") {
  Shape s = shape(1, 1, 50, 40, 32, false);
  s.dtype = DType::bf16;
  const Inputs a = make_inputs(s, {23}), b = make_inputs(s, {23}), c = make_inputs(s, {24});
  CHECK(a.q.v == b.q.v);
  CHECK(a.q.v != c.q.v);
  int zeros = 0;
  for (float x : a.k.v) { zeros += x == 0.0f; CHECK(round_to(DType::bf16, x) == x); }
  CHECK(zeros < 3);
}
