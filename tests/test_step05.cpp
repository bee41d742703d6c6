// Step 05 (warp splitting): both warp mappings in a second configuration, and split-Q against split-K.
#include <doctest/doctest.h>

#include "reference/checks.hpp"
#include "second_config.hpp"
#include "core/shapes.hpp"

#include "../steps/04_fa2_q_outer/schedule.hpp"
#include "../steps/05_warp_split/schedule.hpp"

using namespace fa;

TEST_CASE("step 05: both warp mappings in a second tile configuration (Br = 16, Bc = 48)") {
  const step05::Schedule sc{16, 48};  // split-Q: one warp; split-K: three
  for (bool split_q : {true, false})
    test::check_second_config(split_q ? "split-q" : "split-k",
                              [&](const Shape& s, const Inputs& in) { return step05::blueprint(s, in, sc, split_q); },
                              [&](const Shape& s) { return step05::closed_form(s, sc, split_q); });
}

TEST_CASE("step 05: split-Q moves the same HBM bytes as split-K with fewer barriers and less shared traffic") {
  Shape s;
  s.N = s.Nk = 1024;
  s.d = 128;
  const Ledger q = step05::closed_form(s, step05::kSchedule, true).total();
  const Ledger k = step05::closed_form(s, step05::kSchedule, false).total();
  const Ledger four = step04::closed_form(s, step04::kSchedule).total();
  CHECK(q.gmem_read == k.gmem_read);
  CHECK(q.gmem_write == k.gmem_write);
  CHECK(k.gmem_read == four.gmem_read);  // split-K is step 04's update
  CHECK(k.barriers == four.barriers);
  CHECK(q.barriers * 4 < k.barriers);
  CHECK(q.smem_read + q.smem_write < k.smem_read + k.smem_write);
  CHECK(q.matmul_flops == k.matmul_flops);
}

