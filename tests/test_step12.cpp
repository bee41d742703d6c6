// Step 12 (warp tiling): second tile configurations, its ledger against step 11's, the XOR-stepped
// addresses, and the ablations' ledgers (each change taken out alone, --ablate).
#include <doctest/doctest.h>

#include "checks.hpp"
#include "second_config.hpp"
#include "shapes.hpp"

#include "../steps/11_cp_async/schedule.hpp"
#include "../steps/12_warp_tiling/schedule.hpp"

using namespace fa;

TEST_CASE("step 12: second tile configurations (one warp of two m16 tiles, Bc = 48) pass and count their closed form") {
  for (const step12::Schedule sc : {step12::Schedule{32, 32, 1}, step12::Schedule{64, 48, 2}}) {
    CAPTURE(sc.Br);
    REQUIRE(sc.mtiles() == 2);
    test::check_second_config("step12", [&](const Shape& s, const Inputs& in) { return step12::blueprint(s, in, sc); },
                              [&](const Shape& s) { return step12::closed_form(s, sc); });
  }
}

TEST_CASE("step 12: with step 11's tiles the same HBM bytes and products as step 11, half the barriers, its own tiles halve K/V re-reads") {
  for (bool causal : {false, true}) {
    Shape s;
    s.N = 1000;
    s.Nk = 1300;
    s.d = 128;
    s.causal = causal;
    const Ledger eleven = step11::closed_form(s, step11::kSchedule).total();
    const Ledger same = step12::closed_form(s, step12::Schedule{64, 64, 4}).total();
    CHECK(same.gmem_read == eleven.gmem_read);
    CHECK(same.gmem_write == eleven.gmem_write);
    CHECK(same.matmul_flops == eleven.matmul_flops);
    CHECK(2 * same.barriers == eleven.barriers);  // one barrier per tile instead of two
    CHECK(same.smem_peak == (64 + 4 * 64) * 128 * 2);  // Q, then two stages of K and V
  }
  // Its own tiles at d = 128 (Br = 128, Bc = 64, four warps of 32 rows), N = 4096, no mask.
  Shape s;
  s.N = s.Nk = 4096;
  s.d = 128;
  const Ledger eleven = step11::closed_form(s, step11::kSchedule).total();
  const Ledger twelve = step12::closed_form(s, step12::kSchedule).total();
  const int64_t q_and_o = int64_t(4096) * 128 * 2;
  CHECK(twelve.matmul_flops == eleven.matmul_flops);
  CHECK(2 * (twelve.gmem_read - q_and_o) == eleven.gmem_read - q_and_o);  // K and V read once per 128 rows, not 64
  // Shared-memory reads per product: each K/V fragment serves two m16 tiles; Q's fragments are
  // read once per K/V tile instead of held in registers: 80 elements per mma instead of 128
  // (plus O read back once on its way out).
  CHECK(8 * (twelve.smem_read - q_and_o) == 5 * eleven.smem_read);
  CHECK(twelve.smem_peak == 98304);
  CHECK(step12::smem_bytes(step12::schedule_for(64), 64) == 81920);
}

TEST_CASE("step 12: the XOR-stepped ldmatrix and cp.async addresses are swizzle()'s places") {
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
          CHECK((lane ^ (32 * k)) == 2 * step12::swizzle(r, 16 * k + 8 * x, d));
          ++checked;
        }
      for (int cc = 0; cc < d / 8; ++cc) CHECK(r * 2 * d + 16 * (cc ^ (r & mask)) == 2 * step12::swizzle(r, 8 * cc, d));
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

TEST_CASE("step 12: each ablation passes against the reference and counts its own closed form") {
  for (int a = step12::kFull; a < step12::kAblations; ++a) {
    CAPTURE(step12::kAblationNames[a]);
    for (int64_t d : {int64_t(64), int64_t(128)}) {
      CAPTURE(d);
      const step12::Schedule sc = step12::schedule_for(int(d), a);
      for (bool causal : {false, true}) {
        const test::Case c = test::make_case(1, 2, 150, 211, d, causal, DType::f16);
        const Inputs in = make_inputs(c.shape, c.inputs);
        const BlueprintResult r = step12::blueprint(c.shape, in, sc, a);
        CHECK(r.ledger.total() == step12::closed_form(c.shape, sc, a).total());
        CHECK(check_forward(c.shape, in, reference_forward(c.shape, in), r.out).pass);
      }
    }
  }
}

TEST_CASE("step 12: what each ablation changes in the ledger, and what it leaves alone") {
  Shape s;
  s.N = s.Nk = 4096;
  s.d = 64;
  auto ledger = [&](int a) { return step12::closed_form(s, step12::schedule_for(int(s.d), a), a).total(); };
  const Ledger full = ledger(step12::kFull);
  // Instructions only: the same ledger.
  for (int a : {step12::kNoOrder, step12::kNoExp2, step12::kNoX4}) CHECK(ledger(a) == full);
  // O from registers: no staging traffic (Br·d written and N·d read back per block), the same HBM bytes.
  const Ledger ostage = ledger(step12::kNoOStage);
  CHECK(ostage.gmem_write == full.gmem_write);
  CHECK(full.smem_read - ostage.smem_read == 4096 * 64 * 2);
  CHECK(full.smem_write - ostage.smem_write == 4096 * 64 * 2);
  // A second barrier per tile.
  CHECK(ledger(step12::kNoOneBarrier).barriers == 2 * full.barriers);
  // d = 64 with d = 128's 64-key tile: twice the loop steps and barriers, the same K/V bytes.
  const Ledger tiles = ledger(step12::kNoTiles);
  CHECK(tiles.barriers == 2 * full.barriers);
  CHECK(tiles.gmem_read == full.gmem_read);
  // 16 rows per warp (Br = 64): K and V re-read by twice as many blocks.
  const Ledger rows = ledger(step12::kNoRows32);
  const int64_t q_and_o = int64_t(4096) * 64 * 2;
  CHECK(rows.gmem_read - q_and_o == 2 * (full.gmem_read - q_and_o));
  CHECK(rows.matmul_flops == full.matmul_flops);
}

TEST_CASE("step 12: --ablate names exist and unknown ones are refused") {
  for (int a = 0; a < step12::kAblations; ++a) {
    StepOptions o{{"ablate", step12::kAblationNames[a]}};
    CHECK(step12::ablation_of(o) == a);
  }
  CHECK(step12::ablation_of(StepOptions{}) == step12::kFull);
  CHECK_THROWS(step12::ablation_of(StepOptions{{"ablate", "everything"}}));
}
