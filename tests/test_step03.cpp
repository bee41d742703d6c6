// Step 03 (FlashAttention-1's K/V-outer tiling) in a second tile configuration (Br = 16, Bc = 48:
// one 16-row fragment, three split-K warps), against the reference and its closed-form ledger.
#include <doctest/doctest.h>

#include "reference/checks.hpp"
#include "second_config.hpp"
#include "core/shapes.hpp"

#include "../steps/03_fa1_kv_outer/schedule.hpp"

using namespace fa;

TEST_CASE("step 03: a second tile configuration passes and counts its closed form") {
  const step03::Schedule s3{16, 48};
  test::check_second_config("step03", [&](const Shape& s, const Inputs& in) { return step03::blueprint(s, in, s3); },
                            [&](const Shape& s) { return step03::closed_form(s, s3); });
}
