// Step 06 (deferred normalization): a second tile configuration, and the work it removes against step 05.
#include <doctest/doctest.h>

#include "checks.hpp"
#include "second_config.hpp"
#include "shapes.hpp"

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
