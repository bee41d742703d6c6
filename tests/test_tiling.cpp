// Steps 03 and 04 in a second tile configuration (Br = 16, Bc = 48: one 16-row fragment, three
// split-K warps), against the reference and against their closed-form ledgers; and the ledger
// relations the docs rely on.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "metrics.hpp"
#include "second_config.hpp"
#include "shapes.hpp"

#include "../steps/03_fa1_kv_outer/schedule.hpp"
#include "../steps/04_fa2_q_outer/schedule.hpp"
#include "../steps/05_warp_split/schedule.hpp"
#include "../steps/06_deferred_norm/schedule.hpp"
#include "../steps/07_causal_skip/schedule.hpp"
#include "../steps/09_mma_sync/schedule.hpp"
#include "../steps/10_ldmatrix/schedule.hpp"
#include "../steps/11_cp_async/schedule.hpp"

using namespace fa;

TEST_CASE("steps 03 and 04: a second tile configuration passes and counts its closed form") {
  const step03::Schedule s3{16, 48};
  const step04::Schedule s4{16, 48};
  test::check_second_config("step03", [&](const Shape& s, const Inputs& in) { return step03::blueprint(s, in, s3); },
                            [&](const Shape& s) { return step03::closed_form(s, s3); });
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
  CHECK(a.hbm_read == 2 * 4096 * 128 * 2 + Tc * 4096 * 128 * 2 + (Tc - 1) * 4096 * (128 * 4 + 8));
  // Step 04: Q once; K, V Tr times.
  CHECK(b.hbm_read == 4096 * 128 * 2 + Tr * 2 * 4096 * 128 * 2);
  CHECK(b.hbm_write == 4096 * 128 * 2 + 4096 * 4);  // O and L, once
  CHECK(a.hbm_read + a.hbm_write > b.hbm_read + b.hbm_write);
  CHECK(a.matmul_flops == b.matmul_flops);  // the same arithmetic, in another order
  CHECK(b.workspace == 0);
}

TEST_CASE("the worked examples of docs/03 and docs/04 (N = Nk = 4096, d = 128, one head)") {
  Shape s;
  s.N = s.Nk = 4096;
  s.d = 128;
  const Ledger a = step03::closed_form(s, step03::kSchedule).total(), b = step04::closed_form(s, step04::kSchedule).total();
  CHECK(a.hbm_read == 406814720);
  CHECK(a.hbm_write == 271564800);
  CHECK(b.hbm_read == 269484032);
  CHECK(b.hbm_write == 1064960);
  CHECK(step03::smem_bytes(step03::kSchedule, 128) == 48768);  // "48,768 bytes at d = 128"
}

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
  CHECK(q.hbm_read == k.hbm_read);
  CHECK(q.hbm_write == k.hbm_write);
  CHECK(k.hbm_read == four.hbm_read);  // split-K is step 04's update
  CHECK(k.barriers == four.barriers);
  CHECK(q.barriers * 4 < k.barriers);
  CHECK(q.smem_read + q.smem_write < k.smem_read + k.smem_write);
  CHECK(q.matmul_flops == k.matmul_flops);
}

TEST_CASE("steps 06 and 07: a second tile configuration (Br = 16, Bc = 48)") {
  const step06::Schedule s6{16, 48};
  const step07::Schedule s7{16, 48};
  test::check_second_config("step06", [&](const Shape& s, const Inputs& in) { return step06::blueprint(s, in, s6); },
                            [&](const Shape& s) { return step06::closed_form(s, s6); });
  test::check_second_config("step07", [&](const Shape& s, const Inputs& in) { return step07::blueprint(s, in, s7); },
                            [&](const Shape& s) { return step07::closed_form(s, s7); });
}

TEST_CASE("step 06 removes the per-tile normalization, step 07 skips about half the tiles when causal") {
  Shape s;
  s.N = s.Nk = 4096;
  s.d = 128;
  const Ledger five = step05::closed_form(s, step05::kSchedule, true).total();
  const Ledger six = step06::closed_form(s, step06::kSchedule).total();
  CHECK(six.hbm_read == five.hbm_read);
  CHECK(six.nonmatmul_ops < five.nonmatmul_ops);
  CHECK(six.smem_read + six.smem_write < five.smem_read + five.smem_write);
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
  CHECK(step07::closed_form(s, step07::kSchedule).total().hbm_read == step06::closed_form(s, step06::kSchedule).total().hbm_read);
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
  CHECK(nine.hbm_read < seven.hbm_read);
  // No S, P or O round trips through shared memory: its traffic is the K, V tiles and their fragments.
  CHECK(nine.smem_read + nine.smem_write < (seven.smem_read + seven.smem_write) / 3);
  // Worked example of docs/09_mma_sync.md (one head).
  CHECK(nine.hbm_read == 135266304);
  CHECK(nine.smem_read + nine.smem_write == 671088640);
  CHECK(nine.barriers == 8192);
}

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
  CHECK(ten.hbm_read == nine.hbm_read);
  CHECK(ten.smem_read + ten.smem_write == nine.smem_read + nine.smem_write);
  CHECK(ten.matmul_flops == nine.matmul_flops);
  CHECK(ten.smem_peak == 32768);
  CHECK(nine.smem_peak == 34816);
}

TEST_CASE("step 11: second tile configurations (one warp of two m16 tiles, Bc = 48) pass and count their closed form") {
  for (const step11::Schedule sc : {step11::Schedule{32, 32, 1}, step11::Schedule{64, 48, 2}}) {
    CAPTURE(sc.Br);
    REQUIRE(sc.mtiles() == 2);
    test::check_second_config("step11", [&](const Shape& s, const Inputs& in) { return step11::blueprint(s, in, sc); },
                              [&](const Shape& s) { return step11::closed_form(s, sc); });
  }
}

TEST_CASE("step 11: with step 10's tiles the same HBM bytes and products, half the barriers, its own tiles halve K/V re-reads") {
  for (bool causal : {false, true}) {
    Shape s;
    s.N = 1000;
    s.Nk = 1300;
    s.d = 128;
    s.causal = causal;
    const Ledger ten = step10::closed_form(s, step10::kSchedule).total();
    const Ledger same = step11::closed_form(s, step11::Schedule{64, 64, 4}).total();
    CHECK(same.hbm_read == ten.hbm_read);
    CHECK(same.hbm_write == ten.hbm_write);
    CHECK(same.matmul_flops == ten.matmul_flops);
    CHECK(2 * same.barriers == ten.barriers);  // one barrier per tile instead of two
    CHECK(same.smem_peak == (64 + 4 * 64) * 128 * 2);  // Q, then two stages of K and V
  }
  // Its own tiles at d = 128 (Br = 128, Bc = 64, four warps of 32 rows), N = 4096, no mask.
  Shape s;
  s.N = s.Nk = 4096;
  s.d = 128;
  const Ledger ten = step10::closed_form(s, step10::kSchedule).total();
  const Ledger eleven = step11::closed_form(s, step11::kSchedule).total();
  const int64_t q_and_o = int64_t(4096) * 128 * 2;
  CHECK(eleven.matmul_flops == ten.matmul_flops);
  CHECK(2 * (eleven.hbm_read - q_and_o) == ten.hbm_read - q_and_o);  // K and V read once per 128 rows, not 64
  // Shared-memory reads per product: each K/V fragment serves two m16 tiles; Q's fragments are
  // read once per K/V tile instead of held in registers: 80 elements per mma instead of 128
  // (plus O read back once on its way out).
  CHECK(8 * (eleven.smem_read - q_and_o) == 5 * ten.smem_read);
  CHECK(eleven.smem_peak == 98304);
  CHECK(step11::smem_bytes(step11::schedule_for(64), 64) == 81920);
}

TEST_CASE("step 11: the XOR-stepped ldmatrix and cp.async addresses are swizzle()'s places") {
  // kernel.cu's [addresses]: a lane's row r and chunk 2k + x (x = 0, 1) sit at byte
  //   (r·2d + 16·((x XOR r) & mask)) XOR 32k   from the tile's start,
  // and cp.async's thread at row r, chunk cc writes r·2d + 16·(cc XOR (r & mask)).
  int checked = 0;
  for (int d : {16, 32, 64, 128}) {
    const int mask = (d / 8 < 8 ? d / 8 : 8) - 1;
    for (int r = 0; r < 256; ++r) {
      for (int k = 0; k < d / 16; ++k)
        for (int x = 0; x < 2; ++x) {
          const int lane = r * 2 * d + 16 * ((x ^ r) & mask);
          CHECK((lane ^ (32 * k)) == 2 * step11::swizzle(r, 16 * k + 8 * x, d));
          ++checked;
        }
      for (int cc = 0; cc < d / 8; ++cc) CHECK(r * 2 * d + 16 * (cc ^ (r & mask)) == 2 * step11::swizzle(r, 8 * cc, d));
    }
  }
  CHECK(checked == 256 * 2 * (1 + 2 + 4 + 8));
  // The XOR may be applied to the full address only when the base has no bits below the row size:
  // with a base 16 bytes off, some addresses land elsewhere. (The kernel checks that its shared
  // memory is 1 KB aligned for that reason.)
  bool moved = false;
  for (int r = 0; r < 8; ++r)
    for (int k = 0; k < 8; ++k) {
      const int lane = r * 256 + 16 * (r & 7);
      moved |= ((16 + lane) ^ (32 * k)) != 16 + (lane ^ (32 * k));
      CHECK(((1024 + lane) ^ (32 * k)) == 1024 + (lane ^ (32 * k)));
    }
  CHECK(moved);
}
