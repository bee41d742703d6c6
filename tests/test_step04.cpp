// Step 04 (FlashAttention-2's Q-outer loop order): a second tile configuration, and the ledger
// relations against step 03 that docs/03 and docs/04 rely on.
#include <doctest/doctest.h>

#include "reference/checks.hpp"
#include "second_config.hpp"
#include "core/shapes.hpp"

#include "../steps/03_fa1_kv_outer/schedule.hpp"
#include "../steps/04_fa2_q_outer/schedule.hpp"

using namespace fa;

TEST_CASE("step 04: a second tile configuration passes and counts its closed form") {
  const step04::Schedule s4{16, 48};
  test::check_second_config("step04", [&](const Shape& s, const Inputs& in) { return step04::blueprint(s, in, s4); },
                            [&](const Shape& s) { return step04::closed_form(s, s4); });
}

TEST_CASE("the loop order: step 03 moves Q, O, m, l Tc times, step 04 moves K, V Tr times") {
  Shape s;
  s.N = s.Nk = 4096;
  s.d = 128;
  const Ledger a = step03::closed_form(s, step03::kSchedule).total(), b = step04::closed_form(s, step04::kSchedule).total();
  const int64_t Tc = 4096 / step03::kSchedule.Bc, Tr = 4096 / step04::kSchedule.Br;
  // Step 03: K, V once; Q Tc times; O (fp32), m, l read Tc-1 times.
  CHECK(a.gmem_read == 2 * 4096 * 128 * 2 + Tc * 4096 * 128 * 2 + (Tc - 1) * 4096 * (128 * 4 + 8));
  // Step 04: Q once; K, V Tr times.
  CHECK(b.gmem_read == 4096 * 128 * 2 + Tr * 2 * 4096 * 128 * 2);
  CHECK(b.gmem_write == 4096 * 128 * 2 + 4096 * 4);  // O and L, once
  CHECK(a.gmem_read + a.gmem_write > b.gmem_read + b.gmem_write);
  CHECK(a.matmul_flops == b.matmul_flops);  // the same arithmetic, in another order
  CHECK(b.workspace == 0);
}

TEST_CASE("the worked examples of docs/03 and docs/04 (N = Nk = 4096, d = 128, one head)") {
  Shape s;
  s.N = s.Nk = 4096;
  s.d = 128;
  const Ledger a = step03::closed_form(s, step03::kSchedule).total(), b = step04::closed_form(s, step04::kSchedule).total();
  CHECK(a.gmem_read == 406814720);
  CHECK(a.gmem_write == 271564800);
  CHECK(b.gmem_read == 269484032);
  CHECK(b.gmem_write == 1064960);
  CHECK(step03::smem_bytes(step03::kSchedule, 128) == 48768);  // "48,768 bytes at d = 128"
}

