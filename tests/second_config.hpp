// One check for "a second tile configuration": over the shape matrix, a step's blueprint run with
// a schedule other than its default must match the Eigen reference, and the ledger it counted must
// equal the closed form for the same schedule. Each step's test passes two callables:
//   run(shape, inputs) -> BlueprintResult      closed(shape) -> LedgerSet
#pragma once
#include <doctest/doctest.h>

#include <string>

#include "reference/checks.hpp"
#include "core/shapes.hpp"

namespace fa::test {

template <class Run, class Closed>
void check_second_config(const std::string& label, Run run, Closed closed) {
  for (const Case& c : shape_matrix(false)) {
    const std::string name = c.name() + " " + label;
    CAPTURE(name);
    const Inputs in = make_inputs(c.shape, c.inputs);
    const BlueprintResult r = run(c.shape, in);
    const Check chk = check_forward(c.shape, in, reference_forward(c.shape, in), r.out);
    INFO(chk.summary());
    CHECK(chk.pass);
    const std::string diff = r.ledger.diff(closed(c.shape));
    INFO(diff);
    CHECK(diff.empty());
  }
}

// d = 256 is not in the shape matrix (only steps 14-16 take it): its own cases — ragged N and Nk,
// 600 keys (so a ring of two 64-key stages refills), both masks, both dtypes — against the
// reference and the closed form.
template <class Run, class Closed>
void check_wide_d(const std::string& label, Run run, Closed closed) {
  for (const auto& nk : {std::pair<int64_t, int64_t>{1, 600}, {130, 77}, {77, 300}, {300, 300}})
    for (bool causal : {false, true})
      for (DType t : {DType::f16, DType::bf16}) {
        Shape s;
        s.B = 1;
        s.H = 2;
        s.N = nk.first;
        s.Nk = nk.second;
        s.d = 256;
        s.causal = causal;
        s.dtype = t;
        const std::string name = label + " N=" + std::to_string(s.N) + " Nk=" + std::to_string(s.Nk) + (causal ? " causal " : " ") +
                                 dtype_name(t);
        CAPTURE(name);
        const Inputs in = make_inputs(s);
        const BlueprintResult r = run(s, in);
        const Check chk = check_forward(s, in, reference_forward(s, in), r.out);
        INFO(chk.summary());
        CHECK(chk.pass);
        const std::string diff = r.ledger.diff(closed(s));
        INFO(diff);
        CHECK(diff.empty());
      }
}

}  // namespace fa::test
