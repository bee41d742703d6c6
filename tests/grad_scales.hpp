// The reference backward's error scales (dq_mag, dk_mag, dv_mag: common/reference/reference.hpp) held against
// its own gradients, for tests/test_backward_reference.cpp and tests/test_dropout.cpp alike.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "reference/reference.hpp"

namespace fa::test {

struct ScaleBound {
  int64_t violations = 0;  // elements whose |gradient| exceeds its scale (beyond rounding)
  double most_dv = 0.0;    // the largest |dV| / dv_mag: the scales are not vacuous when this is large
};

inline ScaleBound scale_bound(const Gradients& g) {
  ScaleBound r;
  auto count = [&](const std::vector<double>& v, const std::vector<double>& mag) {
    if (v.size() != mag.size()) throw std::logic_error("scale_bound: a gradient and its scale differ in size");
    for (size_t x = 0; x < v.size(); ++x) r.violations += std::fabs(v[x]) <= mag[x] * (1 + 1e-12) ? 0 : 1;
  };
  count(g.dq, g.dq_mag);
  count(g.dk, g.dk_mag);
  count(g.dv, g.dv_mag);
  for (size_t x = 0; x < g.dv.size(); ++x) r.most_dv = std::max(r.most_dv, std::fabs(g.dv[x]) / g.dv_mag[x]);
  return r;
}

}  // namespace fa::test
