// Step 09 (mma.sync by hand): a second tile configuration, and its ledger against step 07's.
#include <doctest/doctest.h>

#include "reference/checks.hpp"
#include "second_config.hpp"
#include "core/shapes.hpp"

#include "../steps/07_causal_skip/schedule.hpp"
#include "../steps/09_mma_sync/schedule.hpp"

using namespace fa;

TEST_CASE("step 09: a second tile configuration (Br = 16, Bc = 32: one warp, fewer keys per tile)") {
  const step09::Schedule s9{16, 32};
  test::check_second_config("step09", [&](const Shape& s, const Inputs& in) { return step09::blueprint(s, in, s9); },
                            [&](const Shape& s) { return step09::closed_form(s, s9); });
}

TEST_CASE("step 09: shared memory holds K and V only, the products stay those of step 07") {
  Shape s;
  s.N = s.Nk = 4096;
  s.d = 128;
  const Ledger seven = step07::closed_form(s, step07::kSchedule).total();
  const Ledger nine = step09::closed_form(s, step09::kSchedule).total();
  // The same products: 4·N·Nk·d FLOPs (no padding at these sizes).
  CHECK(nine.matmul_flops == seven.matmul_flops);
  CHECK(nine.matmul_flops == int64_t(4) * 4096 * 4096 * 128);
  // Larger tiles (64 × 64): K and V re-read once per 64 query rows instead of 32.
  CHECK(nine.gmem_read < seven.gmem_read);
  // No S, P or O round trips through shared memory: its traffic is the K, V tiles and their fragments.
  CHECK(nine.smem_read + nine.smem_write < (seven.smem_read + seven.smem_write) / 3);
  // Worked example of docs/09_mma_sync.md (one head).
  CHECK(nine.gmem_read == 135266304);
  CHECK(nine.smem_read + nine.smem_write == 671088640);
  CHECK(nine.barriers == 8192);
}


TEST_CASE("step 09: exps, counted: every entry of a visited tile, alpha in four lanes per row but on its first tile") {
  // The kernel guards both exp2s on m = −inf ([rescale-guard]): a row's first tile takes no alpha,
  // a row that sees no key takes nothing.
  const step09::Schedule s9{16, 32};
  struct Want { int64_t n, nk; bool causal; int64_t exps; };
  for (const Want& w : {Want{16, 32, false, 16 * 32}, Want{16, 64, false, 16 * (2 * 32 + 4)},
                        Want{10, 40, false, 16 * (2 * 32 + 4)},   // ragged: 6 padding rows count
                        Want{20, 8, true, (4 + 16) * 32}}) {      // rows 0..11 see no key: 4 of Q tile 0's 16 do
    const test::Case c = test::make_case(1, 1, w.n, w.nk, 32, w.causal, DType::bf16);
    CAPTURE(c.name());
    const Ledger a = step09::blueprint(c.shape, make_inputs(c.shape, c.inputs), s9).ledger.total();
    CHECK(a.exps == w.exps);
    CHECK(a.exps >= visible_pairs(w.n, w.nk, w.causal));
  }
}
