// Backward blueprints (step 08 and any later step with a backward) against the Eigen reference's
// gradients over the shape matrix, their counted ledgers against their closed forms, and the fused
// schedule under a second tile configuration.
#include <doctest/doctest.h>

#include "../steps/08_backward/schedule.hpp"
#include "metrics.hpp"
#include "reference.hpp"
#include "registry.hpp"
#include "rng.hpp"
#include "runner.hpp"
#include "shapes.hpp"

using namespace fa;

namespace {

// The forward the step runs (its blueprint), then dO and the reference gradients.
struct BackwardCase {
  Inputs in;
  Forward fwd;
  Tensor4 dO;
  Gradients ref;
};
BackwardCase prepare(const StepInfo& st, const test::Case& c) {
  BackwardCase b;
  b.in = make_inputs(c.shape, c.inputs);
  b.fwd = st.blueprint(c.shape, b.in, st.default_options()).out;
  b.dO = make_grad_output(c.shape, c.inputs.seed);
  b.ref = reference_backward(c.shape, b.in, b.dO);
  return b;
}

}  // namespace

TEST_CASE("backward blueprints match the reference gradients over the shape matrix") {
  int steps = 0;
  for (const StepInfo* st : all_steps()) {
    if (!st->has_backward()) continue;
    ++steps;
    for (const test::Case& c : test::shape_matrix(true)) {
      const BackwardCase b = prepare(*st, c);
      for (const StepOptions& opt : test::all_options(*st)) {
        CAPTURE(st->id);
        const std::string name = c.name() + " " + variant_name(opt);
        CAPTURE(name);
        const BackwardBlueprintResult r = st->backward_blueprint(c.shape, b.in, b.fwd, b.dO, opt);
        const BackwardCheck chk = check_backward(c.shape, b.ref, r.grads);
        INFO(chk.summary());
        CHECK(chk.pass);
      }
    }
  }
  CHECK(steps > 0);
}

TEST_CASE("backward: counted ledger equals the closed form on many small shapes") {
  Rng rng(1234);
  for (const StepInfo* st : all_steps()) {
    if (!st->has_backward()) continue;
    for (const StepOptions& opt : test::all_options(*st))
      for (int t = 0; t < 30; ++t) {
        const Shape s = test::random_small_shape(rng, t);
        const std::string shape = s.str() + " " + variant_name(opt);
        CAPTURE(st->id);
        CAPTURE(shape);
        const Inputs in = make_inputs(s, {uint64_t(t)});
        const Forward fwd = st->blueprint(s, in, st->default_options()).out;
        const Tensor4 dO = make_grad_output(s, uint64_t(t));
        const LedgerSet counted = st->backward_blueprint(s, in, fwd, dO, opt).ledger;
        const std::string diff = counted.diff(st->backward_closed_form(s, opt));
        INFO(diff);
        CHECK(diff.empty());
      }
  }
}

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
    const BackwardCheck chk = check_backward(c.shape, ref, r.grads);
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
  CHECK(a.hbm_atomic == int64_t(128) * 4096 * 128 * 4);
  // The doc's ledger table.
  CHECK(a.hbm_read == 278921216);
  CHECK(a.hbm_write == 5259264);
  CHECK(a.hbm_atomic == 268435456);
  CHECK(a.matmul_flops == 21474836480);
  CHECK(a.workspace == 2113536);
  CHECK(c.hbm_read == 143671296);
  CHECK(c.hbm_atomic == 135266304);
  CHECK(c.matmul_flops == 10821304320);
  s.causal = false;
  const Ledger n = step08::closed_form_naive(s).total();
  CHECK(n.hbm_read == 1545601024);
  CHECK(n.hbm_write == 137363456);
  CHECK(n.matmul_flops == a.matmul_flops);
  CHECK(n.workspace == 134217728);
  // 44 bytes per (i, j) of quadratic traffic, 8 of them written.
  const int64_t NN = int64_t(4096) * 4096;
  CHECK(n.hbm_write - 3 * 4096 * 128 * 2 == 8 * NN);
  CHECK(44 * NN == 738197504);
}
