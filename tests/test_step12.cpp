// Step 12 (warp tiling): second tile configurations, its ledger against step 11's, the XOR-stepped
// addresses, the ablations' ledgers (each change taken out alone, --ablate), and dropout.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include "reference/checks.hpp"
#include "kernel/dropout.hpp"
#include "dropout_probe.hpp"
#include "core/rng.hpp"
#include "second_config.hpp"
#include "core/shapes.hpp"

#include "../steps/11_cp_async/schedule.hpp"
#include "../steps/12_warp_tiling/schedule.hpp"

using namespace fa;

namespace fa::step12 {
const StepInfo& info();  // the registration (blueprint.cpp)
}

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
    // exps: the same entries; step 12 also takes alpha on a row's first tile (no guard: exp2 of
    // −inf), in each of the row's four lanes — 4 per row of the 16 Q tiles of 64 rows.
    CHECK(same.exps - eleven.exps == 16 * 64 * 4);
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

TEST_CASE("step 12: exps, counted: Bc per row and 4 alphas per row (one per lane of its group) on every visited tile") {
  const step12::Schedule sc{32, 32, 1};
  struct Want { int64_t n, nk; bool causal; int64_t exps; };
  for (const Want& w : {Want{32, 32, false, 32 * (32 + 4)}, Want{32, 64, false, 32 * 2 * (32 + 4)},
                        Want{20, 40, false, 32 * 2 * (32 + 4)},   // ragged: padding rows and keys count
                        Want{64, 64, true, 3 * 32 * (32 + 4)},    // the tile right of the diagonal is skipped
                        Want{64, 20, true, 32 * (32 + 4)}}) {     // Q tile 0 sees no key: skipped whole
    const test::Case c = test::make_case(1, 1, w.n, w.nk, 32, w.causal, DType::f16);
    CAPTURE(c.name());
    const Ledger a = step12::blueprint(c.shape, make_inputs(c.shape, c.inputs), sc).ledger.total();
    CHECK(a.exps == w.exps);
    CHECK(a.exps >= visible_pairs(w.n, w.nk, w.causal));
  }
  // Causal at N = Nk = 4096 (its own tiles): about half the exps of the unmasked run.
  Shape s;
  s.N = s.Nk = 4096;
  s.d = 128;
  const int64_t full = step12::closed_form(s, step12::kSchedule).total().exps;
  s.causal = true;
  const int64_t causal = step12::closed_form(s, step12::kSchedule).total().exps;
  CHECK(full == int64_t(4096) * (4096 + 4 * 64));
  CHECK(causal < full);
  CHECK(double(causal) / double(full) > 0.5);
  CHECK(double(causal) / double(full) < 0.52);
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

// ---- dropout ----------------------------------------------------------------------------------

namespace {

// The shape without dropout: what the softmax statistics (and the undropped O) are computed from.
Shape undropped(Shape s) {
  s.dropout = 0.0;
  return s;
}

Shape with_dropout(Shape s, double p, uint64_t seed = 0x9e3779b97f4a7c15ull, uint64_t offset = 5) {
  s.dropout = p;
  s.dropout_seed = seed;  // both halves of the Philox key nonzero
  s.dropout_offset = offset;
  return s;
}

// O = (P ∘ Z) V in double precision on the rows reference_forward checks, Z_ij = keep_ij / (1 − P)
// (keep from dropout_keep), P the softmax of the undropped scores; L is the undropped log-sum-exp.
// Plain loops, independent of the Eigen reference (which applies dropout too, common/reference/reference.cpp).
// check_forward's 4·u·max|V| still bounds O: the weights P·Z sum to at most 1/(1 − P) and each is
// rounded once (relative u), so |ΔO| <= 1.5·u·max|V|/(1 − P) <= 3·u·max|V| for P <= 0.5.
Reference dropout_reference(const Shape& s, const Inputs& in) {
  Reference ref = reference_forward(undropped(s), in);
  const double scale = s.softmax_scale(), rescale = 1.0 / (1.0 - double(float(s.dropout)));
  const uint32_t threshold = dropout_threshold(float(s.dropout));
  const int64_t R = int64_t(ref.rows.size());
  ref.o.assign(size_t(s.B * s.H * R * s.d), 0.0);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t bh = b * s.H + h;
      for (int64_t r = 0; r < R; ++r) {
        const int64_t i = ref.rows[size_t(r)], n = test::probe_visible(s, i);
        if (n == 0) continue;  // O = 0, L = +inf (from the reference)
        std::vector<double> sc(static_cast<size_t>(n));
        double mx = -std::numeric_limits<double>::infinity(), sum = 0.0;
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0.0;
          for (int64_t c = 0; c < s.d; ++c) dot += double(in.q.at(b, h, i, c)) * double(in.k.at(b, h, j, c));
          sc[size_t(j)] = scale * dot;
          mx = std::max(mx, sc[size_t(j)]);
        }
        for (double& x : sc) sum += (x = std::exp(x - mx));
        for (int64_t j = 0; j < n; ++j) {
          if (!dropout_keep(s.dropout_seed, s.dropout_offset, bh, i, j, threshold)) continue;
          const double w = sc[size_t(j)] / sum * rescale;
          for (int64_t c = 0; c < s.d; ++c) ref.o[size_t((bh * R + r) * s.d + c)] += w * double(in.v.at(b, h, j, c));
        }
      }
    }
  return ref;
}

// Ragged N, Nk != N both ways, the causal mask with rows that see no key (N > Nk), d = 16, 64 and
// 128, both storage types, B and H > 1, large logits.
std::vector<test::Case> dropout_cases() {
  return {test::make_case(1, 2, 150, 211, 64, false, DType::f16),   test::make_case(1, 2, 211, 150, 128, true, DType::bf16),
          test::make_case(2, 3, 17, 64, 16, true, DType::f16),      test::make_case(1, 2, 113, 255, 128, false, DType::f16),
          test::make_case(2, 1, 255, 113, 16, false, DType::bf16), test::make_case(1, 2, 200, 200, 64, true, DType::bf16, 6.0)};
}

}  // namespace

TEST_CASE("step 12 [dropout]: the blueprint's O is (P∘Z)V, its L the undropped one bit for bit, its ledger the closed form") {
  for (const double p : {0.1, 0.5})
    for (const test::Case& c : dropout_cases()) {
      const Shape s = with_dropout(c.shape, p);
      CAPTURE(s.str());
      CAPTURE(p);
      const Inputs in = make_inputs(s, c.inputs);
      const step12::Schedule sc = step12::schedule_for(int(s.d));
      const BlueprintResult r = step12::blueprint(s, in, sc);
      const Check chk = check_forward(s, in, dropout_reference(s, in), r.out);
      INFO(chk.summary());
      CHECK(chk.pass);
      const Check eigen = check_forward(s, in, reference_forward(s, in), r.out);
      INFO(eigen.summary());
      CHECK(eigen.pass);
      // The mask is really applied: against the undropped reference the same O fails.
      CHECK_FALSE(check_forward(s, in, reference_forward(undropped(s), in), r.out).pass);
      // m, l and so L are the softmax's: the same bits as without dropout.
      const BlueprintResult r0 = step12::blueprint(undropped(s), in, sc);
      CHECK(r.out.lse.v == r0.out.lse.v);
      const std::string diff = r.ledger.diff(step12::closed_form(s, sc));
      INFO(diff);
      CHECK(diff.empty());
    }
}

TEST_CASE("step 12 [dropout]: counted ledger = closed form on random shapes, and dropout adds two scalar operations per weight, nothing else") {
  Rng rng(1212);
  for (int t = 0; t < 12; ++t) {
    const Shape s = with_dropout(test::random_small_shape(rng, t), 0.25, 1000 + uint64_t(t));
    CAPTURE(s.str());
    const Inputs in = make_inputs(s);
    const step12::Schedule sc = step12::schedule_for(int(s.d));
    const std::string diff = step12::blueprint(s, in, sc).ledger.diff(step12::closed_form(s, sc));
    INFO(diff);
    CHECK(diff.empty());
  }
  // Without the mask and with whole tiles, the kernel multiplies every weight of N × Nk once:
  // 2·N·Nk operations per head more, and no byte, barrier or product more.
  for (int64_t d : {int64_t(64), int64_t(128)}) {
    Shape s;
    s.B = 2;
    s.H = 3;
    s.N = 1024;
    s.Nk = 2048;
    s.d = d;
    const Ledger plain = step12::closed_form(s, step12::schedule_for(int(d))).total();
    Ledger drop = step12::closed_form(with_dropout(s, 0.1), step12::schedule_for(int(d))).total();
    CHECK(drop.nonmatmul_ops - plain.nonmatmul_ops == 2 * s.B * s.H * s.N * s.Nk);
    drop.nonmatmul_ops = plain.nonmatmul_ops;
    CHECK(drop == plain);
  }
}

TEST_CASE("step 12 [dropout]: the mask read back from O is dropout_keep's, bit for bit (Q = K = 0, V = unit vectors)") {
  // tests/dropout_probe.hpp: O_ic·n_i·(1 − P) is keep_ic. Ragged rows (40: two warps, the second
  // with a partial m16 tile), one K/V tile at d = 16 and 64 and two at d = 128, causal too.
  int64_t kept = 0, drawn = 0;
  for (const double p : {0.1, 0.5})
    for (const auto& [d, Nk, causal, t] : {std::tuple{int64_t(64), int64_t(64), false, DType::f16},
                                           std::tuple{int64_t(128), int64_t(128), true, DType::bf16},
                                           std::tuple{int64_t(16), int64_t(16), false, DType::bf16},
                                           std::tuple{int64_t(128), int64_t(100), false, DType::f16}}) {
      Shape s;
      s.B = 2;
      s.H = 2;
      s.N = 40;
      s.Nk = Nk;
      s.d = d;
      s.causal = causal;
      s.dtype = t;
      s = with_dropout(s, p, 77 + uint64_t(d), 3);
      CAPTURE(s.str());
      const Inputs in = test::dropout_probe_inputs(s);
      const BlueprintResult r = step12::blueprint(s, in, step12::schedule_for(int(d)));
      const test::RecoveredMask m = test::recover_dropout_mask(s, r.out.o);
      CHECK(m.unclear == 0);
      CHECK(m.stray == 0);
      CHECK(test::dropout_mask_mismatches(s, m) == 0);
      if (!causal && p == 0.5)
        for (uint8_t k : m.keep) kept += k, ++drawn;
    }
  // And the probe is not blind: about half the weights survive P = 0.5.
  REQUIRE(drawn > 0);
  CHECK(std::fabs(double(kept) / double(drawn) - 0.5) < 0.03);
  // A mask drawn from another seed, or for another head, disagrees with it.
  Shape s;
  s.B = 1;
  s.H = 2;
  s.N = 40;
  s.Nk = s.d = 64;
  s = with_dropout(s, 0.5, 11, 0);
  const test::RecoveredMask m = test::recover_dropout_mask(s, step12::blueprint(s, test::dropout_probe_inputs(s), step12::schedule_for(64)).out.o);
  CHECK(test::dropout_mask_mismatches(with_dropout(s, 0.5, 12, 0), m) > 0);
  CHECK(test::dropout_mask_mismatches(with_dropout(s, 0.5, 11, 1), m) > 0);
}

TEST_CASE("step 12 [dropout]: the step applies dropout, and an ablation with dropout is refused, never run without it") {
  CHECK(step12::info().supports_dropout);
  const test::Case c = test::make_case(1, 1, 64, 64, 64, false, DType::f16);
  const Shape s = with_dropout(c.shape, 0.1);
  const Inputs in = make_inputs(s, c.inputs);
  for (int a = step12::kFull + 1; a < step12::kAblations; ++a) {
    CAPTURE(step12::kAblationNames[a]);
    const step12::Schedule sc = step12::schedule_for(64, a);
    CHECK_THROWS_AS(step12::blueprint(s, in, sc, a), Unsupported);
    CHECK_THROWS_AS(step12::closed_form(s, sc, a), Unsupported);
    CHECK_THROWS_AS(step12::require_dropout_supported(float(s.dropout), a), Unsupported);
    CHECK_NOTHROW(step12::require_dropout_supported(0.0f, a));
  }
  CHECK_NOTHROW(step12::require_dropout_supported(0.5f, step12::kFull));
  try {
    step12::require_dropout_supported(0.5f, step12::kNoX4);
  } catch (const Unsupported& e) {
    CHECK(std::string(e.what()).find("--ablate x4 has no dropout variant") != std::string::npos);
  }
}
