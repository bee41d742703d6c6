// Step 01 on its own: a second tile configuration, the tile classification, and the ledger's shape.
#include <doctest/doctest.h>

#include <tuple>

#include "reference/checks.hpp"
#include "../steps/01_naive/schedule.hpp"
#include "second_config.hpp"
#include "core/shapes.hpp"

using namespace fa;
using namespace fa::step01;

TEST_CASE("step01: a second tile configuration (Br = 32, Bc = 16) passes and counts its closed form") {
  const Schedule small{32, 16};
  test::check_second_config("Br=32 Bc=16", [&](const Shape& s, const Inputs& in) { return blueprint(s, in, small); },
                            [&](const Shape& s) { return closed_form(s, small); });
}

TEST_CASE("step01: tiles are classified against the bottom-right causal diagonal") {
  // N = Nk = 64, 16 × 16 tiles: the diagonal tiles are (t, t); above them masked, below visible.
  CHECK(classify_tile(0, 16, 0, 16, 64, 64, true) == TileKind::Diagonal);
  CHECK(classify_tile(0, 16, 16, 32, 64, 64, true) == TileKind::Masked);
  CHECK(classify_tile(16, 32, 0, 16, 64, 64, true) == TileKind::Visible);
  CHECK(classify_tile(0, 16, 16, 32, 64, 64, false) == TileKind::Visible);
  // Nk - N = 16: the diagonal moves one tile to the right.
  CHECK(classify_tile(0, 16, 0, 16, 64, 80, true) == TileKind::Visible);
  CHECK(classify_tile(0, 16, 16, 32, 64, 80, true) == TileKind::Diagonal);
  CHECK(visible_keys(0, 64, 80, true) == 17);
  CHECK(visible_keys(3, 10, 4, true) == 0);
  CHECK(visible_keys(9, 10, 4, true) == 4);
}

TEST_CASE("step01: S and P make the traffic quadratic in N") {
  Shape s;
  s.B = 1; s.H = 1; s.d = 128;
  s.N = s.Nk = 4096;
  const Ledger a = closed_form(s, kSchedule).total();
  s.N = s.Nk = 8192;
  const Ledger b = closed_form(s, kSchedule).total();
  const double ratio = double(b.gmem_read + b.gmem_write) / double(a.gmem_read + a.gmem_write);
  CHECK(ratio > 3.9);
  CHECK(ratio < 4.0);
  // At N = 4096 the S write alone is N²·4 bytes = 64 MiB per head; Q, K, V, O together are 4 MiB.
  s.N = s.Nk = 4096;
  const LedgerSet ls = closed_form(s, kSchedule);
  CHECK(ls.kernels[0].second.gmem_write == 4096LL * 4096 * 4);
}

TEST_CASE("step01: the worked example of docs/01_naive.md (N = Nk = 4096, d = 128, one head)") {
  Shape s;
  s.N = s.Nk = 4096;
  s.d = 128;
  const LedgerSet ls = closed_form(s, kSchedule);
  CHECK(ls.kernels[0].second.gmem_read == 134217728);
  CHECK(ls.kernels[1].second.gmem_read == 201326592);
  CHECK(ls.kernels[1].second.gmem_write == 33570816);
  CHECK(ls.kernels[2].second.gmem_read == 100663296);
  CHECK(ls.total().gmem_read == 436207616);
  CHECK(ls.total().gmem_write == 101728256);
}

TEST_CASE("step01: the softmax kernel takes exp twice per visible entry (the sum, then P), the products none") {
  // Pass 2 sums exp(S − m) and pass 3 computes it again to write P; both loops stop at the row's
  // visible keys, so masked keys take none. Counted by the blueprint, causal and not, Nk < N and >.
  for (const auto& [n, nk, causal] : {std::tuple{40, 70, false}, {70, 40, true}, {33, 90, true}}) {
    const test::Case c = test::make_case(2, 3, n, nk, 32, causal, DType::f16);
    CAPTURE(c.name());
    const BlueprintResult r = blueprint(c.shape, make_inputs(c.shape, c.inputs), kSchedule);
    const int64_t vis = 2 * 3 * visible_pairs(n, nk, causal);
    CHECK(r.ledger.kernels[0].second.exps == 0);  // scores
    CHECK(r.ledger.kernels[1].second.exps == 2 * vis);
    CHECK(r.ledger.kernels[2].second.exps == 0);  // pv
    if (!causal) CHECK(r.ledger.total().exps == 2 * int64_t(2 * 3) * n * nk);
    else CHECK(r.ledger.total().exps < 2 * int64_t(2 * 3) * n * nk);
  }
}
