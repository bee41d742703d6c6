// One check for "a second tile configuration": over the shape matrix, a step's blueprint run with
// a schedule other than its default must match the Eigen reference, and the ledger it counted must
// equal the closed form for the same schedule. Each step's test passes two callables:
//   run(shape, inputs) -> BlueprintResult      closed(shape) -> LedgerSet
#pragma once
#include <doctest/doctest.h>

#include <string>

#include "checks.hpp"
#include "shapes.hpp"

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

}  // namespace fa::test
