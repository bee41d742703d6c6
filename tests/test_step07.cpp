// Step 07 (causal block skipping): a second tile configuration, the tiles it skips, and Q tiles
// that see no key.
#include <doctest/doctest.h>

#include "reference/checks.hpp"
#include "second_config.hpp"
#include "core/shapes.hpp"

#include "../steps/06_deferred_norm/schedule.hpp"
#include "../steps/07_causal_skip/schedule.hpp"

using namespace fa;

TEST_CASE("step 07: a second tile configuration (Br = 16, Bc = 48)") {
  const step07::Schedule s7{16, 48};
  test::check_second_config("step07", [&](const Shape& s, const Inputs& in) { return step07::blueprint(s, in, s7); },
                            [&](const Shape& s) { return step07::closed_form(s, s7); });
}

TEST_CASE("step 07 skips about half the tiles when causal, and nothing without the mask") {
  Shape s;
  s.N = s.Nk = 4096;
  s.d = 128;
  s.causal = true;
  const Ledger six_c = step06::closed_form(s, step06::kSchedule).total();
  const Ledger seven_c = step07::closed_form(s, step07::kSchedule).total();
  const int64_t Tr = 4096 / 32, Tc = 4096 / 32;
  CHECK(seven_c.tiles_computed == Tr * (Tr + 1) / 2);  // the lower triangle, diagonal included
  CHECK(seven_c.tiles_masked == Tr);                   // only the diagonal tiles are masked
  CHECK(seven_c.tiles_skipped == Tr * Tc - Tr * (Tr + 1) / 2);
  CHECK(six_c.tiles_computed == Tr * Tc);
  const double ratio = double(seven_c.matmul_flops) / double(six_c.matmul_flops);
  CHECK(ratio > 0.5);
  CHECK(ratio < 0.51);
  s.causal = false;
  CHECK(step07::closed_form(s, step07::kSchedule).total().gmem_read == step06::closed_form(s, step06::kSchedule).total().gmem_read);
}

TEST_CASE("step 07: the skipped tiles take no exps, and without the mask it takes step 06's") {
  Shape s;
  s.N = s.Nk = 4096;
  s.d = 64;
  s.causal = true;
  const int64_t six_c = step06::closed_form(s, step06::kSchedule).total().exps;
  const int64_t seven_c = step07::closed_form(s, step07::kSchedule).total().exps;
  CHECK(seven_c < six_c);
  // Rows of Q tile i take exp on (i + 1) tiles of 32 keys and alpha on i of them: about half of 06's.
  int64_t want = 0;
  for (int64_t i = 0; i < 4096 / 32; ++i) want += 32 * ((i + 1) * 32 + i);
  CHECK(seven_c == want);
  CHECK(seven_c >= visible_pairs(4096, 4096, true));
  s.causal = false;
  CHECK(step07::closed_form(s, step07::kSchedule).total().exps == step06::closed_form(s, step06::kSchedule).total().exps);
  CHECK(step06::closed_form(s, step06::kSchedule).total().exps == 4096 * (128 * 32 + 127));
  // Counted, causal with Nk < N: Q tiles that see no key visit nothing and take nothing.
  const test::Case c = test::make_case(1, 2, 100, 20, 32, true, DType::bf16);
  const Ledger a = step07::blueprint(c.shape, make_inputs(c.shape, c.inputs), step07::kSchedule).ledger.total();
  CHECK(a.exps == 2 * (128 - 80) * 32);  // Tr = 4: 128 rows, 80 blind; one K/V tile, no alpha
}

TEST_CASE("step 07: Q tiles whose rows see no key visit no K/V tile") {
  // N = 100, Nk = 20: rows 0..79 see nothing; with Br = 32 the first two Q tiles are skipped whole.
  CHECK(kv_tiles_for(0, 32, 100, 20, 32, true) == 0);
  CHECK(kv_tiles_for(32, 64, 100, 20, 32, true) == 0);
  CHECK(kv_tiles_for(64, 96, 100, 20, 32, true) == 1);
  CHECK(kv_tiles_for(0, 32, 100, 20, 32, false) == 1);
  CHECK(needs_mask(64, 96, 0, 100, 20, 32, false));   // ragged: keys 20..31 do not exist
  CHECK_FALSE(needs_mask(0, 32, 0, 64, 64, 32, false));
}

