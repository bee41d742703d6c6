// Step 10 (ldmatrix from swizzled tiles): the swizzle and its bank groups, and the ledger against step 09's.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "reference/checks.hpp"
#include "second_config.hpp"
#include "core/shapes.hpp"

#include "../steps/09_mma_sync/schedule.hpp"
#include "../steps/10_ldmatrix/schedule.hpp"

using namespace fa;

TEST_CASE("step 10: the swizzle is a permutation of each row's chunks, and ldmatrix phases hit 8 bank groups") {
  for (int d : {16, 32, 64, 128}) {
    CAPTURE(d);
    // A bijection: every element of a 64 × d tile gets its own slot, rows stay whole.
    std::vector<int> seen(size_t(64 * d), 0);
    for (int r = 0; r < 64; ++r)
      for (int c = 0; c < d; ++c) {
        const int at = step10::swizzle(r, c, d);
        CHECK(at / d == r);
        ++seen[size_t(at)];
      }
    CHECK(std::count(seen.begin(), seen.end(), 1) == 64 * d);
    // The eight row addresses of an ldmatrix phase (rows r0 .. r0 + 7, one logical chunk): their
    // 16-byte bank groups ((byte address / 16) mod 8). Swizzled: all different when a row has 8
    // chunks or more. Unswizzled and unpadded: all the same (an 8-way conflict) at d >= 64.
    if (d >= 64)
      for (int r0 = 0; r0 < 64; r0 += 8)
        for (int chunk = 0; chunk < d / 8; ++chunk) {
          std::set<int> swz, plain;
          for (int r = r0; r < r0 + 8; ++r) {
            swz.insert((step10::swizzle(r, 8 * chunk, d) * 2 / 16) % 8);
            plain.insert(((r * d + 8 * chunk) * 2 / 16) % 8);
          }
          CHECK(swz.size() == 8);
          CHECK(plain.size() == 1);
        }
  }
}

TEST_CASE("step 10: same bytes and products as step 09, less shared memory per block") {
  Shape s;
  s.N = s.Nk = 4096;
  s.d = 128;
  const Ledger nine = step09::closed_form(s, step09::kSchedule).total();
  const Ledger ten = step10::closed_form(s, step10::kSchedule).total();
  CHECK(ten.gmem_read == nine.gmem_read);
  CHECK(ten.smem_read + ten.smem_write == nine.smem_read + nine.smem_write);
  CHECK(ten.matmul_flops == nine.matmul_flops);
  CHECK(ten.smem_peak == 32768);
  CHECK(nine.smem_peak == 34816);
}

