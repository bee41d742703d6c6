// Step 08 (the backward pass): the fused schedule under a second tile configuration, and the worked
// example of its ledger that docs/08_backward.md quotes.
#include <doctest/doctest.h>

#include "../steps/08_backward/schedule.hpp"
#include "reference/checks.hpp"
#include "reference/reference.hpp"
#include "perf/roofline.hpp"
#include "core/registry.hpp"
#include "harness/runner.hpp"
#include "core/shapes.hpp"

using namespace fa;

TEST_CASE("step 08: the fused schedule is right under a second tile configuration") {
  const step08::Schedule sc{16, 48, 2};  // Br = 16, Bc = 48, two warps
  int n = 0;
  for (const test::Case& c : test::shape_matrix(false)) {
    const std::string name = c.name();
    CAPTURE(name);
    const Inputs in = make_inputs(c.shape, c.inputs);
    const Forward fwd = [&] {
      for (const StepInfo* st : all_steps())
        if (st->id == "08") return st->blueprint(c.shape, in, st->default_options()).out;
      return Forward{};
    }();
    const Tensor4 dO = make_grad_output(c.shape, c.inputs.seed);
    const Gradients ref = reference_backward(c.shape, in, dO);
    const BackwardBlueprintResult r = step08::blueprint_fused(c.shape, in, fwd, dO, sc);
    const BackwardCheck chk = check_backward(c.shape, in, dO, ref, r.grads);
    INFO(chk.summary());
    CHECK(chk.pass);
    const std::string diff = r.ledger.diff(step08::closed_form_fused(c.shape, sc));
    INFO(diff);
    CHECK(diff.empty());
    ++n;
  }
  CHECK(n > 0);
}

TEST_CASE("step 08: worked example of the fused ledger (docs/08_backward.md)") {
  // One head, N = Nk = 4096, d = 128, causal and not: the numbers the doc quotes.
  Shape s;
  s.N = s.Nk = 4096;
  s.d = 128;
  const LedgerSet full = step08::closed_form_fused(s, step08::kSchedule);
  s.causal = true;
  const LedgerSet causal = step08::closed_form_fused(s, step08::kSchedule);
  const Ledger a = full.total(), c = causal.total();
  // Without the mask every K/V tile visits all 128 Q tiles; with it, tile j visits 128 − j.
  CHECK(a.tiles_computed == 128 * 128);
  CHECK(c.tiles_computed == 128 * 129 / 2);
  CHECK(c.tiles_skipped == 128 * 127 / 2);
  // dQ's atomics: 4 bytes per element of dQ per visiting K/V tile.
  CHECK(a.gmem_atomic == int64_t(128) * 4096 * 128 * 4);
  // The doc's ledger table.
  CHECK(a.gmem_read == 278921216);
  CHECK(a.gmem_write == 5259264);
  CHECK(a.gmem_atomic == 268435456);
  CHECK(a.matmul_flops == 21474836480);
  CHECK(a.workspace == 2113536);
  CHECK(c.gmem_read == 143671296);
  CHECK(c.gmem_atomic == 135266304);
  CHECK(c.matmul_flops == 10821304320);
  s.causal = false;
  const Ledger n = step08::closed_form_naive(s).total();
  CHECK(n.gmem_read == 1545601024);
  CHECK(n.gmem_write == 137363456);
  CHECK(n.matmul_flops == a.matmul_flops);
  CHECK(n.workspace == 134217728);
  // 44 bytes per (i, j) of quadratic traffic, 8 of them written.
  const int64_t NN = int64_t(4096) * 4096;
  CHECK(n.gmem_write - 3 * 4096 * 128 * 2 == 8 * NN);
  CHECK(44 * NN == 738197504);
}

TEST_CASE("step 08: the backward's recompute of P counts its exps") {
  // fused: P = exp(scale·S − L) on every entry of every visited (K/V tile, Q tile) pair, masked
  // ones too (zeroed after the exp), padding rows too (L = +inf there: exp gives 0); naive: its P
  // kernel on the visible entries only. Counted by the blueprints.
  const StepInfo* st = nullptr;
  for (const StepInfo* x : all_steps()) if (x->id == "08") st = x;
  REQUIRE(st != nullptr);
  auto exps_of = [](const LedgerSet& ls, const std::string& kernel) {
    for (const auto& [name, led] : ls.kernels)
      if (name == kernel) return led.exps;
    return int64_t(-1);
  };
  for (const bool causal : {false, true}) {
    const test::Case c = test::make_case(1, 2, 70, 90, 32, causal, DType::f16);
    CAPTURE(c.name());
    const Inputs in = make_inputs(c.shape, c.inputs);
    const Forward fwd = st->blueprint(c.shape, in, st->default_options()).out;
    const Tensor4 dO = make_grad_output(c.shape, c.inputs.seed);
    const LedgerSet fused = step08::blueprint_fused(c.shape, in, fwd, dO, step08::kSchedule).ledger;
    const LedgerSet naive = step08::blueprint_naive(c.shape, in, fwd, dO).ledger;
    const int64_t vis = 2 * visible_pairs(70, 90, causal);
    CHECK(fused.total().exps >= vis);
    CHECK(exps_of(fused, "bwd_kv") == fused.total().exps);  // the recompute is the only exp
    CHECK(naive.total().exps == vis);
    CHECK(exps_of(naive, "naive_p") == vis);
    if (!causal) CHECK(fused.total().exps == 2 * 96 * 96);  // 3 × 3 tiles of 32 × 32, padding included
  }
  // N = Nk = 4096: one exp per (i, j) without the mask; with it, the skipped tiles take none.
  Shape s;
  s.N = s.Nk = 4096;
  s.d = 128;
  const int64_t full = step08::closed_form_fused(s, step08::kSchedule).total().exps;
  s.causal = true;
  const int64_t causal = step08::closed_form_fused(s, step08::kSchedule).total().exps;
  CHECK(full == int64_t(4096) * 4096);
  CHECK(causal == int64_t(128) * 129 / 2 * 32 * 32);
  CHECK(causal < full);
}

TEST_CASE("step 08: a gradient element below fp16's smallest subnormal, stored as 0, passes (N = 1, Nk = 3000)") {
  // One query that sees 3000 keys: some dV elements are smaller than fp16's smallest subnormal
  // (5.96e-08) and round to ±0. The relative tolerance 4u·mag alone rejected that once; the floor
  // of the storage type's subnormal spacing accepts it — and still rejects an error of a few spacings.
  const test::Case c = test::make_case(1, 1, 1, 3000, 128, true, DType::f16);
  const StepInfo* st = nullptr;
  for (const StepInfo* x : all_steps()) if (x->id == "08") st = x;
  REQUIRE(st != nullptr);
  const Inputs in = make_inputs(c.shape, c.inputs);
  const Forward fwd = st->blueprint(c.shape, in, st->default_options()).out;
  const Tensor4 dO = make_grad_output(c.shape, c.inputs.seed);
  const Gradients ref = reference_backward(c.shape, in, dO);
  const BackwardBlueprintResult r = st->backward_blueprint(c.shape, in, fwd, dO, st->default_options());
  const BackwardCheck chk = check_backward(c.shape, in, dO, ref, r.grads);
  INFO(chk.summary());
  CHECK(chk.pass);
  // The case really has such elements: exact values under the spacing, stored as zero.
  int64_t tiny = 0;
  for (size_t x = 0; x < ref.dv.size(); ++x)
    tiny += std::fabs(ref.dv[x]) < subnormal_spacing(DType::f16) / 2 && r.grads.dv.v[x] == 0.0f;
  CHECK(tiny > 0);
  // Off by four spacings on the element with the smallest error scale: fails.
  size_t at = 0;
  for (size_t x = 0; x < ref.dv_mag.size(); ++x)
    if (ref.dv_mag[x] < ref.dv_mag[at]) at = x;
  Grads bad = r.grads;
  bad.dv.v[at] = float(ref.dv[at] + 4 * subnormal_spacing(DType::f16));
  CHECK_FALSE(check_backward(c.shape, ref, bad).dv.pass);
}

namespace {

int64_t up32(int64_t x) { return (x + 31) / 32 * 32; }

// Every field of `a` minus `b`, smem_peak aside (a peak, not a sum).
Ledger minus(Ledger a, const Ledger& b) {
  a.gmem_read -= b.gmem_read;
  a.gmem_write -= b.gmem_write;
  a.gmem_atomic -= b.gmem_atomic;
  a.smem_read -= b.smem_read;
  a.smem_write -= b.smem_write;
  a.barriers -= b.barriers;
  a.matmul_flops -= b.matmul_flops;
  a.cuda_core_flops -= b.cuda_core_flops;
  a.nonmatmul_ops -= b.nonmatmul_ops;
  a.exps -= b.exps;
  a.tiles_computed -= b.tiles_computed;
  a.tiles_masked -= b.tiles_masked;
  a.tiles_skipped -= b.tiles_skipped;
  a.workspace -= b.workspace;
  a.smem_peak = 0;
  return a;
}

}  // namespace

// [stored] The trade, from the counted ledgers: the stored backward is the naive one without the
// kernel that recomputes P, and that kernel is what the forward is charged instead.
TEST_CASE("step 08: --bwd stored is naive's backward less the QKᵀ product and the exps, which move to the forward") {
  int n = 0;
  for (const test::Case& c : {test::make_case(1, 1, 64, 96, 64, false, DType::f16), test::make_case(2, 3, 37, 70, 16, true, DType::bf16),
                              test::make_case(1, 2, 100, 33, 128, true, DType::f16), test::make_case(1, 1, 1, 40, 32, false, DType::f16)}) {
    const std::string name = c.name();
    CAPTURE(name);
    const Shape& s = c.shape;
    const Inputs in = make_inputs(s, c.inputs);
    const StepInfo* st = nullptr;
    for (const StepInfo* x : all_steps()) if (x->id == "08") st = x;
    REQUIRE(st != nullptr);
    const Forward f = st->blueprint(s, in, st->default_options()).out;
    const Tensor4 dO = make_grad_output(s, c.inputs.seed);
    const BackwardBlueprintResult naive = step08::blueprint_naive(s, in, f, dO);
    const BackwardBlueprintResult stored = step08::blueprint_naive(s, in, f, dO, true);
    const BackwardBlueprintResult fused = step08::blueprint_fused(s, in, f, dO, step08::kSchedule);
    const Ledger nv = naive.ledger.total(), sv = stored.ledger.total(), sp = stored.saved.total();
    const int64_t BH = s.B * s.H, NNk = s.N * s.Nk;
    // The same gradients, bit for bit: the same kernels on the same P.
    CHECK(stored.grads.dq.v == naive.grads.dq.v);
    CHECK(stored.grads.dk.v == naive.grads.dk.v);
    CHECK(stored.grads.dv.v == naive.grads.dv.v);
    // The backward holds no kernel that computes P; the forward's share is that one kernel.
    REQUIRE(stored.saved.kernels.size() == 1);
    CHECK(stored.saved.kernels[0].first == "naive_p");
    CHECK(stored.ledger.kernels.size() == naive.ledger.kernels.size() - 1);
    for (const auto& [k, led] : stored.ledger.kernels) CHECK(k != "naive_p");
    // naive = stored + what the forward saved, field by field (the N² memory included: 8 bytes
    // per (i, j) either way, 6 of them the backward's workspace and 2 the saved P).
    const std::string d = minus(minus(nv, sv), sp).diff(Ledger{});
    INFO(d);
    CHECK(d.empty());
    CHECK(sv.workspace == BH * NNk * 6);
    CHECK(sp.workspace == BH * NNk * 2);
    // FLOPs saved: exactly QKᵀ as the 32 × 32 GEMM tiles run it (N, Nk and d padded to 32).
    CHECK(nv.matmul_flops - sv.matmul_flops == BH * 2 * up32(s.N) * up32(s.Nk) * up32(s.d));
    CHECK(sp.matmul_flops == BH * 2 * up32(s.N) * up32(s.Nk) * up32(s.d));
    // The exponentials: none in the stored backward; whatever naive counts, the forward's share has.
    CHECK(sv.exps == 0);
    CHECK(nv.exps - sv.exps == sp.exps);
    // Bytes: the forward writes P once (N·Nk in the storage type per head) ...
    CHECK(sp.gmem_write == BH * NNk * 2);
    // ... and the backward reads it where naive's did: twice in naive_ds (with dP, fp32) and once
    // per 32 columns of d in naive_dv's Pᵀ dO; the fused backward reads no N × Nk matrix at all.
    const LedgerSet cf = step08::closed_form_stored(s);
    LedgerSet copy = cf;
    CHECK(copy["naive_ds"].gmem_read == BH * NNk * (2 + 4) * 2);
    CHECK(copy["naive_dv"].gmem_read == BH * (num_tiles(s.d, 32) * NNk * 2 + num_tiles(s.Nk, 32) * s.N * s.d * 2));
    CHECK(sv.gmem_read > fused.ledger.total().gmem_read);
    ++n;
  }
  CHECK(n == 4);
}

TEST_CASE("step 08: --bwd stored against fused at whole tiles: four products instead of five") {
  // At N, Nk and d multiples of 32 no tile is padded: the fused backward's five products per
  // (i, j) are S, dP, dV, dK, dQ; the stored one does four (no S).
  Shape s;
  s.N = 128;
  s.Nk = 96;
  s.d = 64;
  const Ledger f = step08::closed_form_fused(s, step08::kSchedule).total(), st = step08::closed_form_stored(s).total();
  CHECK(f.matmul_flops == 5 * 2 * s.N * s.Nk * s.d);
  CHECK(st.matmul_flops == 4 * 2 * s.N * s.Nk * s.d);
  CHECK(st.exps == 0);
}

TEST_CASE("step 08: worked example of the stored ledger (docs/08_backward.md)") {
  // One head, N = Nk = 4096, d = 128: the numbers the doc's section 'Storing P instead of
  // recomputing it' quotes.
  Shape s;
  s.N = s.Nk = 4096;
  s.d = 128;
  const Ledger st = step08::closed_form_stored(s).total(), sp = step08::closed_form_saved_p(s).total(),
               nv = step08::closed_form_naive(s).total();
  CHECK(st.gmem_read == 1275068416);
  CHECK(st.gmem_write == 103809024);
  CHECK(st.matmul_flops == 17179869184);
  CHECK(st.workspace == 100663296);
  CHECK(st.exps == 0);
  CHECK(sp.gmem_read == 270532608);
  CHECK(sp.gmem_write == 33554432);
  CHECK(sp.matmul_flops == 4294967296);
  CHECK(sp.workspace == 33554432);
  CHECK(nv.matmul_flops - st.matmul_flops == 2 * s.N * s.Nk * s.d);
  // The tour's shape (B = 4, H = 16): the doc's roofline prediction over the H200's datasheet,
  // every kernel of the three on the memory side.
  Shape t = s;
  t.B = 4;
  t.H = 16;
  const DeviceSpec h200 = h200_datasheet();
  const Prediction pf = predict(step08::closed_form_fused(t, step08::kSchedule), h200), pn = predict(step08::closed_form_naive(t), h200),
                   ps = predict(step08::closed_form_stored(t), h200), pp = predict(step08::closed_form_saved_p(t), h200);
  CHECK(pf.ms == doctest::Approx(7.37).epsilon(0.002));
  CHECK(pn.ms == doctest::Approx(22.44).epsilon(0.002));
  CHECK(ps.ms == doctest::Approx(18.39).epsilon(0.002));
  CHECK(pp.ms == doctest::Approx(4.05).epsilon(0.002));
  for (const Prediction* p : {&pf, &pn, &ps, &pp}) CHECK(p->ms == doctest::Approx(p->ms_memory));
  // Writing P alone: 2 bytes per (i, j) per head.
  CHECK(double(sp.gmem_write) * 64 / h200.hbm_bytes_per_s * 1e3 == doctest::Approx(0.447).epsilon(0.002));
}

TEST_CASE("step 08: --bwd stored is a choice after the other two, the default still fused") {
  const StepInfo* st = nullptr;
  for (const StepInfo* x : all_steps()) if (x->id == "08") st = x;
  REQUIRE(st != nullptr);
  REQUIRE(st->flags.size() == 1);
  CHECK(st->flags[0].choices == std::vector<std::string>{"fused", "naive", "stored"});
  CHECK(st->default_options().at("bwd") == "fused");
  REQUIRE(static_cast<bool>(st->saved_closed_form));
  CHECK(st->saved_closed_form(Shape{}, {{"bwd", "fused"}}).kernels.empty());
  CHECK(st->saved_closed_form(Shape{}, {{"bwd", "naive"}}).kernels.empty());
  CHECK(st->saved_closed_form(Shape{}, {{"bwd", "stored"}}).kernels.size() == 1);
}
