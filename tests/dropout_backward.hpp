// The checks a backward blueprint with dropout passes (steps 13 and 19): against the reference, its closed
// form, the mask really applied, and the mask read back from dV bit for bit.
#pragma once
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/shapes.hpp"
#include "dropout_probe.hpp"
#include "reference/checks.hpp"
#include "reference/reference.hpp"

namespace fa::test {

// [dropout] Each case at P = 0.1 and 0.5 (--deterministic on every other case; its own seed and offset):
// `backward(s, in, fwd, dO, det)` (a BackwardBlueprintResult, after `forward(s, in)`) passes against the
// reference, counts `closed(s, det)`, and fails the check without the mask. Then the closed form at
// N = Nk = 1024, d = 64 with P = 0.2 adds three operations per entry (the keep test, P∘Z, dP∘Z) and nothing else.
template <class Fwd, class Bwd, class Closed>
void check_dropout_backward(const std::vector<Case>& cases, Fwd forward, Bwd backward, Closed closed) {
  int n = 0;
  for (const double pd : {0.1, 0.5})
    for (const Case& c : cases) {
      Shape s = c.shape;
      s.dropout = pd, s.dropout_seed = 1234 + uint64_t(n), s.dropout_offset = uint64_t(n);
      const bool det = n++ % 2 == 1;
      CAPTURE(s.str());
      CAPTURE(det);
      const Inputs in = make_inputs(s, c.inputs);
      const Tensor4 dO = make_grad_output(s, c.inputs.seed);
      const BackwardBlueprintResult r = backward(s, in, forward(s, in), dO, det);
      const BackwardCheck chk = check_backward(s, in, dO, reference_backward(s, in, dO), r.grads);
      INFO(chk.summary());
      CHECK(chk.pass);
      const std::string diff = r.ledger.diff(closed(s, det));
      INFO(diff);
      CHECK(diff.empty());
      Shape s0 = s;  // the mask is really applied: without it the same gradients fail
      s0.dropout = 0.0;
      CHECK_FALSE(check_backward(s0, in, dO, reference_backward(s0, in, dO), r.grads).pass);
    }
  Shape s;
  s.N = s.Nk = 1024;
  s.d = 64;
  Shape sd = s;
  sd.dropout = 0.2;
  const Ledger plain = closed(s, false).total();
  Ledger drop = closed(sd, false).total();
  CHECK(drop.nonmatmul_ops - plain.nonmatmul_ops == 3 * s.N * s.Nk);
  drop.nonmatmul_ops = plain.nonmatmul_ops;
  CHECK(drop == plain);
}

// [dropout-probe] Over backward_probe_shapes at P = 0.1 and 0.5: the mask read back from `dv(drawn_with, in,
// fwd, dO)` (dO = one-hot rows, fwd = `forward(s, in)`) is dropout_keep's bit for bit, and one drawn with
// another offset or seed is seen. Returns the shapes checked.
template <class Fwd, class Dv>
int check_dropout_mask(Fwd forward, Dv dv) {
  int checked = 0;
  for (const double pd : {0.1, 0.5})
    for (const Shape& s : backward_probe_shapes(pd, 99, 7)) {
      CAPTURE(s.str());
      const Inputs in = make_inputs(s, {uint64_t(s.N + s.Nk)});
      const Tensor4 dO = one_hot_grad_output(s);
      const Forward fwd = forward(s, in);
      auto mismatches = [&](const Shape& drawn_with, const Shape& want) { return dv_mask_mismatches(want, dv(drawn_with, in, fwd, dO)); };
      CHECK(mismatches(s, s) == 0);
      Shape other_offset = s, other_seed = s;
      other_offset.dropout_offset += 1;
      other_seed.dropout_seed += 1;
      CHECK(mismatches(other_offset, s) > s.N);
      CHECK(mismatches(other_seed, s) > s.N);
      ++checked;
    }
  return checked;
}

}  // namespace fa::test
