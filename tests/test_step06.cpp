// Step 06 (deferred normalization): a second tile configuration, and the work it removes against step 05.
#include <doctest/doctest.h>

#include "reference/checks.hpp"
#include "second_config.hpp"
#include "core/shapes.hpp"

#include "../steps/05_warp_split/schedule.hpp"
#include "../steps/06_deferred_norm/schedule.hpp"

using namespace fa;

TEST_CASE("step 06: a second tile configuration (Br = 16, Bc = 48)") {
  const step06::Schedule s6{16, 48};
  test::check_second_config("step06", [&](const Shape& s, const Inputs& in) { return step06::blueprint(s, in, s6); },
                            [&](const Shape& s) { return step06::closed_form(s, s6); });
}

TEST_CASE("step 06 removes the per-tile normalization: the same HBM bytes as step 05, less work and shared traffic") {
  Shape s;
  s.N = s.Nk = 4096;
  s.d = 128;
  const Ledger five = step05::closed_form(s, step05::kSchedule, true).total();
  const Ledger six = step06::closed_form(s, step06::kSchedule).total();
  CHECK(six.gmem_read == five.gmem_read);
  CHECK(six.nonmatmul_ops < five.nonmatmul_ops);
  CHECK(six.smem_read + six.smem_write < five.smem_read + five.smem_write);
}

TEST_CASE("step 06: exps per row, counted: every entry of every tile, alpha on every tile but the first") {
  // Br = Bc = 32. A row that sees a key (padding rows past N too: their Q is 0, their S finite)
  // takes Bc exps per tile and alpha from its second tile on; a row that sees none keeps
  // m = −inf and takes none ([rescale-guard]).
  struct Want { int64_t n, nk; bool causal; int64_t exps; };
  for (const Want& w : {Want{32, 32, false, 32 * 32},              // one tile: no alpha at all
                        Want{32, 64, false, 32 * (2 * 32 + 1)},    // two tiles: one alpha per row
                        Want{20, 40, false, 32 * (2 * 32 + 1)},    // ragged: 12 padding rows count, 24 padding keys too
                        Want{40, 10, true, (64 - 30) * 32}}) {     // rows 0..29 see no key
    const test::Case c = test::make_case(1, 1, w.n, w.nk, 32, w.causal, DType::f16);
    CAPTURE(c.name());
    const Ledger a = step06::blueprint(c.shape, make_inputs(c.shape, c.inputs), step06::kSchedule).ledger.total();
    CHECK(a.exps == w.exps);
    CHECK(a.exps >= visible_pairs(w.n, w.nk, w.causal));
  }
}
