// Step 13 (the backward on tensor cores): second tile configurations, --deterministic (its splits,
// a second run bit for bit, blocks walking several tiles), dropout against the reference, the
// dropout mask the blueprint applies read back from dV (bit for bit, and a wrong one is seen), checks
// that fail on a wrong gradient or a NaN, --tiles and its refusals, and the ledger against step 08's.
// (The shape matrix with --deterministic off and on, and the closed form on random shapes, run for
// every backward step in test_backward.cpp.)
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "reference/checks.hpp"
#include "kernel/dropout.hpp"
#include "dropout_backward.hpp"
#include "dropout_probe.hpp"
#include "reference/reference.hpp"
#include "harness/runner.hpp"
#include "core/rng.hpp"
#include "core/shapes.hpp"

#include "../steps/08_backward/schedule.hpp"
#include "../steps/13_mma_backward/schedule.hpp"

using namespace fa;

namespace fa::step13 {
const StepInfo& info();  // the registration (blueprint.cpp)
}

namespace {

// What the step's backward gets: its forward (step 12's blueprint), dO, and the reference.
struct Prepared {
  Inputs in;
  Forward fwd;
  Tensor4 dO;
  Gradients ref;
};
Prepared prepare(const Shape& s, const InputSpec& spec) {
  Prepared p;
  p.in = make_inputs(s, spec);
  p.fwd = step13::info().blueprint(s, p.in, {}).out;
  p.dO = make_grad_output(s, spec.seed);
  p.ref = reference_backward(s, p.in, p.dO);
  return p;
}

Shape with_dropout(Shape s, double p, uint64_t seed = 0x9e3779b97f4a7c15ull, uint64_t offset = 5) {
  s.dropout = p;
  s.dropout_seed = seed;
  s.dropout_offset = offset;
  return s;
}

bool same_bits(const Grads& a, const Grads& b) { return a.dq.v == b.dq.v && a.dk.v == b.dk.v && a.dv.v == b.dv.v; }

// [tune] A --tiles or --experiment choice runs where kernel.cu compiles it (fp16, d = 128 and 64) and
// is refused elsewhere: in bf16, at d = 32, with --deterministic, with dropout.
void check_refused_where_not_compiled(const StepInfo& st, const StepOptions& x) {
  CAPTURE(variant_name(x));
  Shape s;
  s.N = s.Nk = 64;
  CHECK_NOTHROW(st.backward_closed_form(s, x));
  s.dtype = DType::bf16;
  CHECK_THROWS_AS(st.backward_closed_form(s, x), Unsupported);
  s.dtype = DType::f16;
  s.d = 32;
  CHECK_THROWS_AS(st.backward_closed_form(s, x), Unsupported);
  s.d = 64;
  StepOptions det = x;
  det["deterministic"] = "on";
  CHECK_THROWS_AS(st.backward_closed_form(s, det), Unsupported);
  CHECK_THROWS_AS(st.backward_closed_form(with_dropout(s, 0.1), x), Unsupported);
}

}  // namespace

TEST_CASE("step 13: second tile configurations (two warps over 32 x 32, and four over 64 x 64) pass and count their closed form") {
  // {32, 32}: two warps, one key group of Sᵀ (both warps on its 32 keys, 16 queries each), dK/dV by
  // one key group × two dim halves from d = 32 on (two 16-key groups at d = 16). {64, 64}: four
  // warps, dQ's 32 × 32 warp tiles (QM = 2) from d = 32 on, 16 rows at d = 16.
  for (const step13::Schedule sc : {step13::Schedule{32, 32}, step13::Schedule{64, 64}}) {
    CAPTURE(sc.Br);
    CAPTURE(sc.Bc);
    for (int64_t d : kHeadDims) CHECK(step13::valid(sc, int(d)));
    int n = 0;
    for (const test::Case& c : test::shape_matrix(false)) {
      const bool det = (n++ % 3) == 0;  // a third of the cases with --deterministic
      const std::string name = c.name() + (det ? " deterministic" : "");
      CAPTURE(name);
      const Prepared p = prepare(c.shape, c.inputs);
      const BackwardBlueprintResult r = step13::blueprint(c.shape, p.in, p.fwd, p.dO, sc, det);
      const BackwardCheck chk = check_backward(c.shape, p.in, p.dO, p.ref, r.grads);
      INFO(chk.summary());
      CHECK(chk.pass);
      const std::string diff = r.ledger.diff(step13::closed_form(c.shape, sc, det));
      INFO(diff);
      CHECK(diff.empty());
    }
  }
  CHECK_FALSE(step13::valid(step13::Schedule{32, 128}, 16));  // dQ's 16 dims over 4 column groups: 4 each
  CHECK_THROWS_AS(step13::closed_form(Shape{}, step13::Schedule{24, 128}, false), std::invalid_argument);
}

TEST_CASE("step 13 [deterministic]: the splits, blocks walking several K/V tiles, and a second run bit for bit") {
  // det_splits: 264 blocks aimed at, never more splits than K/V tiles, at least one.
  CHECK(step13::det_splits(1, 32) == 32);
  CHECK(step13::det_splits(64, 32) == 5);  // B = 4, H = 16: ⌈264/64⌉
  CHECK(step13::det_splits(264, 32) == 1);
  CHECK(step13::det_splits(1000, 32) == 1);
  CHECK(step13::det_splits(2, 3) == 3);
  // B·H = 68 heads and 32-key tiles over Nk = 200: ⌈264/68⌉ = 4 splits for Tc = 7, so block s walks
  // tiles s and s + 4 (s < 3) into its own buffer. Ragged N and Nk, causal with keyless rows, and not.
  const step13::Schedule sc{32, 32};
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const test::Case c = test::make_case(4, 17, 37, 200, 16, causal, causal ? DType::bf16 : DType::f16);
    REQUIRE(step13::det_splits(68, num_tiles(200, sc.Bc)) == 4);
    REQUIRE(num_tiles(200, sc.Bc) == 7);
    const Prepared p = prepare(c.shape, c.inputs);
    const BackwardBlueprintResult a = step13::blueprint(c.shape, p.in, p.fwd, p.dO, sc, true);
    const BackwardBlueprintResult b = step13::blueprint(c.shape, p.in, p.fwd, p.dO, sc, true);
    CHECK(same_bits(a.grads, b.grads));
    const BackwardBlueprintResult racing = step13::blueprint(c.shape, p.in, p.fwd, p.dO, sc, false);
    for (const BackwardBlueprintResult* r : {&a, &racing}) {
      const BackwardCheck chk = check_backward(c.shape, p.in, p.dO, p.ref, r->grads);
      INFO(chk.summary());
      CHECK(chk.pass);
    }
    CHECK(a.grads.dk.v == racing.grads.dk.v);  // dK and dV never race: the same bits either way
    CHECK(a.grads.dv.v == racing.grads.dv.v);
    CHECK(a.ledger.diff(step13::closed_form(c.shape, sc, true)).empty());
    CHECK(racing.ledger.diff(step13::closed_form(c.shape, sc, false)).empty());
  }
  // Through the registration, at the step's own tiles: --deterministic on twice, the same bits.
  const test::Case c = test::make_case(1, 2, 255, 113, 64, true, DType::f16);
  const Prepared p = prepare(c.shape, c.inputs);
  const StepOptions on{{"deterministic", "on"}};
  CHECK(step13::deterministic(on));
  CHECK_FALSE(step13::deterministic({}));
  const Grads g1 = step13::info().backward_blueprint(c.shape, p.in, p.fwd, p.dO, on).grads;
  const Grads g2 = step13::info().backward_blueprint(c.shape, p.in, p.fwd, p.dO, on).grads;
  CHECK(same_bits(g1, g2));
  CHECK(check_backward(c.shape, p.in, p.dO, p.ref, g1).pass);
}

TEST_CASE("step 13 [deterministic]: the same products, atomics turned into a read and a write per element, the splits summed once") {
  Shape s;
  s.B = 4;
  s.H = 16;
  s.N = s.Nk = 4096;
  s.d = 128;
  const step13::Schedule sc = step13::schedule_for(128);
  const LedgerSet off = step13::closed_form(s, sc, false), on = step13::closed_form(s, sc, true);
  const int64_t splits = step13::det_splits(64, 32), elems = 64 * int64_t(4096) * 128;
  REQUIRE(splits == 5);
  const Ledger &kv0 = off.kernels[1].second, &kv1 = on.kernels[1].second;
  CHECK(kv1.gmem_atomic == 0);
  CHECK(kv1.gmem_read - kv0.gmem_read == kv0.gmem_atomic);
  CHECK(kv1.gmem_write - kv0.gmem_write == kv0.gmem_atomic);
  CHECK(kv1.matmul_flops == kv0.matmul_flops);
  CHECK(kv1.barriers - kv0.barriers == 64 * 32);  // one more per K/V tile: its rows are reused
  // bwd_pre zeroes `splits` accumulators; dq_convert reads each once.
  CHECK(on.kernels[0].second.gmem_write - off.kernels[0].second.gmem_write == (splits - 1) * elems * 4);
  CHECK(on.kernels[2].second.gmem_read == splits * elems * 4);
  CHECK(on.total().workspace == int64_t(step13::workspace_bytes(64, 4096, 128, splits)));
}

TEST_CASE("step 13 [dropout]: p = 0.1 and 0.5 pass against the reference, deterministic too, and count their closed form") {
  const std::vector<test::Case> cases = {
      test::make_case(1, 2, 150, 211, 64, false, DType::f16), test::make_case(1, 2, 211, 150, 128, true, DType::bf16),
      test::make_case(2, 3, 17, 64, 16, true, DType::f16),    test::make_case(1, 2, 113, 255, 32, false, DType::bf16),
      test::make_case(2, 1, 255, 113, 16, true, DType::bf16), test::make_case(1, 2, 200, 200, 64, true, DType::bf16, 6.0)};
  test::check_dropout_backward(
      cases, [](const Shape& s, const Inputs& in) { return step13::info().blueprint(s, in, {}).out; },
      [](const Shape& s, const Inputs& in, const Forward& fwd, const Tensor4& dO, bool det) {
        return step13::blueprint(s, in, fwd, dO, step13::schedule_for(int(s.d)), det);
      },
      [](const Shape& s, bool det) { return step13::closed_form(s, step13::schedule_for(int(s.d)), det); });
}

TEST_CASE("step 13 [dropout]: the mask in dV is dropout_keep's bit for bit (dO = one-hot rows), and a wrong seed or offset is seen") {
  // With dO_ic = [c == i] (N <= d), dV_ji = Σ_i' (P ∘ Z)_i'j dO_i'i = P_ij·Z_ij: the weight the
  // blueprint kept or dropped, one element of dV each. P_ij > 0 wherever query i sees key j (no
  // logit here is large enough to underflow), so dV_ji != 0 exactly where the weight was kept.
  // Ragged N, Nk ≠ N both ways (keyless rows), one and two K/V tiles, every d, both storage types.
  const int checked = test::check_dropout_mask(
      [](const Shape& s, const Inputs& in) { return step13::info().blueprint(s, in, {}).out; },
      [](const Shape& s, const Inputs& in, const Forward& fwd, const Tensor4& dO) {
        return step13::blueprint(s, in, fwd, dO, step13::schedule_for(int(s.d)), false).grads.dv;
      });
  CHECK(checked == 2 * int(test::backward_probe_shapes(0.1, 99, 7).size()));
  // And the probe is not blind: about half the weights survive p = 0.5.
  int64_t kept = 0, drawn = 0;
  for (const Shape& s : test::backward_probe_shapes(0.5, 99, 7))
    if (!s.causal)
      for (int64_t i = 0; i < s.N; ++i)
        for (int64_t j = 0; j < s.Nk; ++j) kept += dropout_factor(s, 0, i, j) != 0.0, ++drawn;
  REQUIRE(drawn > 0);
  CHECK(std::fabs(double(kept) / double(drawn) - 0.5) < 0.05);
}

TEST_CASE("step 13: the check fails a wrong gradient, a NaN, or gradients of another problem") {
  const test::Case c = test::make_case(1, 2, 113, 255, 64, true, DType::bf16);
  const Prepared p = prepare(c.shape, c.inputs);
  const Grads good = step13::info().backward_blueprint(c.shape, p.in, p.fwd, p.dO, {}).grads;
  const BackwardCheck ok = check_backward(c.shape, p.in, p.dO, p.ref, good);
  REQUIRE(ok.pass);
  Grads nan = good;
  nan.dq.at(0, 1, 112, 63) = std::numeric_limits<float>::quiet_NaN();
  CHECK_FALSE(check_backward(c.shape, p.in, p.dO, p.ref, nan).pass);
  Grads off = good;
  off.dk.at(0, 0, 200, 5) += float(4 * ok.dk.bound);
  CHECK_FALSE(check_backward(c.shape, p.in, p.dO, p.ref, off).pass);
  // Without the mask, the same inputs' gradients are another problem's.
  Shape full = c.shape;
  full.causal = false;
  const Grads unmasked = step13::info().backward_blueprint(full, p.in, step13::info().blueprint(full, p.in, {}).out, p.dO, {}).grads;
  CHECK_FALSE(check_backward(c.shape, p.in, p.dO, p.ref, unmasked).pass);
}

TEST_CASE("step 13: --tiles passes where kernel.cu compiles it (fp16, d = 64 and 128) and is refused where it does not") {
  const StepInfo& st = step13::info();
  for (int64_t d : {int64_t(64), int64_t(128)})
    for (int tl = step13::kAuto + 1; tl < step13::kTileChoices; ++tl) {
      const StepOptions o{{"tiles", step13::kTileNames[tl]}};
      CAPTURE(d);
      CAPTURE(step13::kTileNames[tl]);
      const test::Case c = test::make_case(1, 2, 150, 211, d, tl % 2 == 0, DType::f16);
      const step13::Schedule sc = step13::schedule_for(int(d), tl);
      CHECK(st.backward_smem_bytes(c.shape, o) == step13::smem_bytes(sc, int(d)));
      if (step13::smem_bytes(sc, int(d)) > step13::kSmemBudget) {  // 128x128 at d = 128: 258 KB
        CHECK(d == 128);
        CHECK(tl == step13::k128x128);
        CHECK_THROWS_AS(st.backward_closed_form(c.shape, o), Unsupported);
        continue;
      }
      const Prepared p = prepare(c.shape, c.inputs);
      const BackwardBlueprintResult r = st.backward_blueprint(c.shape, p.in, p.fwd, p.dO, o);
      const BackwardCheck chk = check_backward(c.shape, p.in, p.dO, p.ref, r.grads);
      INFO(chk.summary());
      CHECK(chk.pass);
      CHECK(r.ledger.diff(st.backward_closed_form(c.shape, o)).empty());
      CHECK(r.ledger.kernels[1].second.smem_peak == step13::smem_bytes(sc, int(d)));
    }
  check_refused_where_not_compiled(st, {{"tiles", "64x64"}});
  CHECK_THROWS_AS(step13::tiles_of({{"tiles", "96x96"}}), std::invalid_argument);
}

TEST_CASE("step 13: --experiment changes neither the gradients' check nor the ledger, and is refused where kernel.cu does not compile it") {
  const StepInfo& st = step13::info();
  for (int64_t d : {int64_t(64), int64_t(128)})
    for (int xp = step13::kAsBuilt + 1; xp < step13::kExperiments; ++xp) {
      const StepOptions o{{"experiment", step13::kExperimentNames[xp]}};
      CAPTURE(d);
      CAPTURE(step13::kExperimentNames[xp]);
      const test::Case c = test::make_case(1, 2, 150, 211, d, xp % 2 == 0, DType::f16);
      const Prepared p = prepare(c.shape, c.inputs);
      const BackwardBlueprintResult r = st.backward_blueprint(c.shape, p.in, p.fwd, p.dO, o);
      const BackwardCheck chk = check_backward(c.shape, p.in, p.dO, p.ref, r.grads);
      INFO(chk.summary());
      CHECK(chk.pass);
      CHECK(r.ledger.diff(st.backward_closed_form(c.shape, o)).empty());
      CHECK(r.ledger.diff(st.backward_closed_form(c.shape, {})).empty());  // the same schedule, the same ledger
    }
  check_refused_where_not_compiled(st, {{"experiment", "red32"}});
  check_refused_where_not_compiled(st, {{"experiment", "dq-end"}});
  Shape s;
  s.N = s.Nk = 64;
  s.d = 64;
  CHECK_THROWS_AS(st.backward_closed_form(s, {{"experiment", "dq-end"}, {"tiles", "64x64"}}), Unsupported);
  CHECK_THROWS_AS(step13::experiment_of({{"experiment", "red16"}}), std::invalid_argument);
}

TEST_CASE("step 13: its ledger at N = 4096, d = 128 against step 08's, and its shared memory per head dimension") {
  Shape s;
  s.N = s.Nk = 4096;
  s.d = 128;
  const step13::Schedule sc = step13::schedule_for(128);
  REQUIRE(sc.Br == 64);
  REQUIRE(sc.Bc == 128);
  const LedgerSet ls = step13::closed_form(s, sc, false);
  const Ledger kv = ls.kernels[1].second, t = ls.total();
  const Ledger kv08 = step08::closed_form_fused(s, step08::kSchedule).kernels[1].second;
  const int64_t N = 4096, d = 128, kv_bytes = 2 * N * d * 2;
  // Five products of 2·N·Nk·d each, nothing padded: Sᵀ, dPᵀ, dV, dK, dQ.
  CHECK(kv.matmul_flops == 5 * 2 * N * N * d);
  CHECK(kv.matmul_flops == kv08.matmul_flops);
  // 128-key tiles instead of 32: Q, dO, L and D re-read, and dQ's atomics, a quarter as often.
  CHECK(4 * (kv.gmem_read - kv_bytes) == kv08.gmem_read - kv_bytes);
  CHECK(4 * kv.gmem_atomic == kv08.gmem_atomic);
  CHECK(kv.gmem_atomic == 32 * N * d * 4);
  CHECK(kv.gmem_write == kv08.gmem_write);
  // Two barriers per (K/V tile, Q tile) pair and two per K/V tile, against step 08's four and four.
  CHECK(kv.tiles_computed == 32 * 64);
  CHECK(kv.barriers == 2 * 32 * 64 + 2 * 32);
  CHECK(kv08.barriers == 4 * 128 * 128 + 4 * 128);
  CHECK(t.workspace == 2 * N * 4 + N * d * 4);
  // With the mask, K/V tile j starts at Q tile 2j: Σ (64 − 2j) = 1056 pairs.
  s.causal = true;
  const Ledger kvc = step13::closed_form(s, sc, false).kernels[1].second;
  CHECK(kvc.tiles_computed == 1056);
  CHECK(kvc.tiles_skipped == 32 * 64 - 1056);
  CHECK(kvc.tiles_masked == 32 * 2);  // two Q tiles of 64 rows on each K/V tile's diagonal
  // Shared memory per block: K, V, two stages of Q and dO, two dSᵀ buffers (16-bit), L and D.
  CHECK(step13::smem_bytes(step13::schedule_for(128), 128) == 164864);  // 161.0 KB: sm_80 and sm_90
  CHECK(step13::smem_bytes(step13::schedule_for(64), 64) == 165888);    // 162.0 KB
  CHECK(step13::smem_bytes(step13::schedule_for(32), 32) == 116736);    // 114.0 KB: over sm_86's 99 KB
  CHECK(step13::smem_bytes(step13::schedule_for(16), 16) == 92160);     //  90.0 KB: under it
}

TEST_CASE("step 13: the backward's recompute of Pᵀ counts its exps: every entry of every visited tile") {
  const StepInfo& st = step13::info();
  for (const bool causal : {false, true}) {
    const test::Case c = test::make_case(1, 2, 70, 150, 64, causal, DType::f16);
    CAPTURE(c.name());
    const Prepared p = prepare(c.shape, c.inputs);
    const LedgerSet ls = st.backward_blueprint(c.shape, p.in, p.fwd, p.dO, {}).ledger;
    const int64_t vis = 2 * visible_pairs(70, 150, causal);
    CHECK(ls.total().exps >= vis);
    for (const auto& [name, led] : ls.kernels) {
      CAPTURE(name);
      CHECK(led.exps == (name == "bwd_kv" ? ls.total().exps : 0));  // the recompute is the only exp
      CHECK(led.exps <= led.nonmatmul_ops);
    }
    // Without the mask: ⌈150/128⌉ = 2 K/V tiles of 128 keys × ⌈70/64⌉ = 2 Q tiles of 64, padding included.
    if (!causal) CHECK(ls.total().exps == 2 * (2 * 128) * (2 * 64));
  }
  Shape s;
  s.N = s.Nk = 4096;
  s.d = 128;
  const int64_t full = st.backward_closed_form(s, {}).total().exps;
  s.causal = true;
  const int64_t causal = st.backward_closed_form(s, {}).total().exps;
  CHECK(full == int64_t(4096) * 4096);
  CHECK(causal < full);
  CHECK(causal >= visible_pairs(4096, 4096, true));
}
