// Every registered step's blueprint against the Eigen reference over the shape matrix, and its
// counted ledger against its closed form on many small shapes.
#include <doctest/doctest.h>

#include "kernel/causal.hpp"
#include "reference/checks.hpp"
#include "core/registry.hpp"
#include "core/rng.hpp"
#include "core/shapes.hpp"

using namespace fa;


TEST_CASE("blueprints match the reference over the shape matrix") {
  REQUIRE(!all_steps().empty());
  for (const StepInfo* st : all_steps())
    for (const test::Case& c0 : test::shape_matrix(true)) {
      if (!test::takes_case(*st, c0.shape)) continue;  // [fp8] d = 16 for an FP8 step
      const test::Case c = test::for_step(c0, *st);
      CAPTURE(st->id);
      const std::string name = c.name();
      CAPTURE(name);
      const Inputs in = make_inputs(c.shape, c.inputs);
      const Reference ref = reference_forward(c.shape, in);
      const BlueprintResult r = st->blueprint(c.shape, in, st->default_options());
      const Check chk = check_forward(c.shape, in, ref, r.out);
      INFO(chk.summary());
      CHECK(chk.pass);
    }
}

TEST_CASE("counted ledger equals the closed form on many small shapes") {
  Rng rng(99);
  for (const StepInfo* st : all_steps())
    for (const StepOptions& opt : test::all_options(*st))
      for (int t = 0; t < 40; ++t) {
        const Shape s = test::for_step(test::random_small_shape(rng, t), *st);
        if (!test::takes_case(*st, s)) continue;
        const std::string shape = s.str();
        CAPTURE(st->id);
        CAPTURE(shape);
        const Inputs in = make_inputs(s, {uint64_t(t)});
        const LedgerSet counted = st->blueprint(s, in, opt).ledger, closed = st->closed_form(s, opt);
        const std::string diff = counted.diff(closed);
        INFO(diff);
        CHECK(diff.empty());
      }
}

TEST_CASE("every forward exponentiates each visible entry at least once, and no kernel counts more exps than scalar ops") {
  // A lower bound no schedule can beat: softmax needs exp of every S entry a row sees (without the
  // mask, all B·H·N·Nk). And an exp is one of the scalar operations on S and P, so each kernel's
  // exps are at most its nonmatmul_ops. Counted by the blueprints, on random small shapes.
  Rng rng(7);
  int runs = 0;
  for (const StepInfo* st : all_steps())
    for (const StepOptions& opt : test::all_options(*st))
      for (int t = 0; t < 12; ++t) {
        const Shape s = test::for_step(test::random_small_shape(rng, t), *st);
        if (!test::takes_case(*st, s)) continue;
        const std::string shape = s.str();
        CAPTURE(st->id);
        CAPTURE(shape);
        const LedgerSet ls = st->blueprint(s, make_inputs(s, {uint64_t(t)}), opt).ledger;
        const int64_t vis = s.B * s.H * visible_pairs(s.N, s.Nk, s.causal);
        // [exp2-poly] an exponential on the FMA units is one too (fma_exps; step 20's --exp2 poly, mixed)
        const int64_t all = ls.total().exps + ls.total().fma_exps;
        CHECK(all >= vis);
        if (!s.causal) CHECK(all >= s.B * s.H * s.N * s.Nk);
        for (const auto& [kernel, led] : ls.kernels) {
          CAPTURE(kernel);
          CHECK(led.exps >= 0);
          CHECK(led.exps + led.fma_exps <= led.nonmatmul_ops);
        }
        ++runs;
      }
  CHECK(runs >= 12 * 17);
}

TEST_CASE("the shape matrix covers what docs/anatomy.md asks for") {
  bool ragged = false, tiny = false, nk_gt = false, nk_lt = false, causal = false, bh = false, big_logits = false,
       many_tiles = false;
  for (const test::Case& c : test::shape_matrix(true)) {
    const Shape& s = c.shape;
    ragged |= s.N % 16 != 0;
    tiny |= s.N < 16;
    nk_gt |= s.Nk > s.N;
    nk_lt |= s.Nk < s.N;
    causal |= s.causal;
    bh |= s.B > 1 && s.H > 1;
    big_logits |= c.inputs.qk_spread > 1;
    many_tiles |= s.Nk > 4 * 128;  // more 128-key tiles than step 15's deepest default ring (four stages)
  }
  CHECK(ragged);
  CHECK(tiny);
  CHECK(nk_gt);
  CHECK(nk_lt);
  CHECK(causal);
  CHECK(bh);
  CHECK(big_logits);
  CHECK(many_tiles);
}
