// Backward blueprints (step 08 and any later step with a backward) against the Eigen reference's
// gradients over the shape matrix, and their counted ledgers against their closed forms. Step 08's
// own cases are in test_step08.cpp.
#include <doctest/doctest.h>

#include "reference/checks.hpp"
#include "reference/reference.hpp"
#include "reference/reference_lowp.hpp"
#include "core/registry.hpp"
#include "core/rng.hpp"
#include "harness/runner.hpp"
#include "core/shapes.hpp"

using namespace fa;

TEST_CASE("backward blueprints match the reference gradients over the shape matrix") {
  int steps = 0;
  for (const StepInfo* st : all_steps()) steps += st->has_backward();
  CHECK(steps > 0);
  for (const test::Case& c : test::shape_matrix(true)) {
    // What does not depend on the step, once per case: dO, the reference gradients and the
    // same-precision naive backward's errors (FlashAttention's rule, common/reference/checks.hpp).
    const Inputs in = make_inputs(c.shape, c.inputs);
    const Tensor4 dO = make_grad_output(c.shape, c.inputs.seed);
    const Gradients ref = reference_backward(c.shape, in, dO);
    const NaiveErrors naive = naive_lowp_errors(c.shape, in, dO, ref);
    for (const StepInfo* st : all_steps()) {
      if (!st->has_backward()) continue;
      const Forward fwd = st->blueprint(c.shape, in, st->default_options()).out;  // the forward the step runs
      for (const StepOptions& opt : test::all_options(*st)) {
        CAPTURE(st->id);
        const std::string name = c.name() + " " + variant_name(opt);
        CAPTURE(name);
        const BackwardBlueprintResult r = st->backward_blueprint(c.shape, in, fwd, dO, opt);
        const BackwardCheck chk = check_backward(c.shape, ref, naive, r.grads);
        INFO(chk.summary());
        CHECK(chk.pass);
      }
    }
  }
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
        const BackwardBlueprintResult r = st->backward_blueprint(s, in, fwd, dO, opt);
        const std::string diff = r.ledger.diff(st->backward_closed_form(s, opt));
        INFO(diff);
        CHECK(diff.empty());
        // [saved-for-backward] What the forward saved for this backward, counted apart: its own
        // closed form (nothing, for a step or variant that saves nothing).
        const LedgerSet saved = st->saved_closed_form ? st->saved_closed_form(s, opt) : LedgerSet{};
        const std::string sdiff = r.saved.diff(saved);
        INFO(sdiff);
        CHECK(sdiff.empty());
        CHECK(r.saved.kernels.size() == saved.kernels.size());
      }
  }
}
