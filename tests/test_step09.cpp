// Step 09 (mma.sync by hand): a second tile configuration, and its ledger against step 07's.
#include <doctest/doctest.h>

#include "checks.hpp"
#include "second_config.hpp"
#include "shapes.hpp"

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

