// Step 08 (the backward pass): the fused schedule under a second tile configuration, and the worked
// example of its ledger that docs/08_backward.md quotes.
#include <doctest/doctest.h>

#include "../steps/08_backward/schedule.hpp"
#include "checks.hpp"
#include "reference.hpp"
#include "registry.hpp"
#include "runner.hpp"
#include "shapes.hpp"

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
