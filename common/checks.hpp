// The correctness checks: O, L and the gradients against the reference, written so that NaN
// fails, with tolerances derived from the storage precision.
#pragma once
#include <cstdint>
#include <string>

#include "problem.hpp"
#include "reference.hpp"

namespace fa {

struct Where { int64_t b = -1, h = -1, i = -1, j = -1; };

struct Check {
  // O against the reference on the checked rows.
  double max_abs = 0.0, rel_l2 = 0.0, atol = 0.0;
  Where worst;                   // where max_abs occurs (j = column of O)
  double worst_got = 0.0, worst_want = 0.0;
  // L (log-sum-exp) against the reference on the checked rows.
  double lse_max_abs = 0.0, lse_atol = 0.0;
  Where lse_worst;
  int64_t checked_rows = 0;      // per (b, h)
  int64_t nonfinite_o = 0;       // non-finite O anywhere (all rows are scanned, not only checked ones)
  int64_t bad_lse = 0;           // L not finite where it should be, or not +inf where it should be
  bool pass = false;
  std::string summary() const;   // one line: PASS/FAIL with the numbers and the worst place
};

// Tolerances (derivation in checks.cpp), from the storage type's unit roundoff u and the inputs'
// largest magnitudes.
struct InputMagnitudes {
  double q = 0, k = 0, v = 0;  // max |Q|, max |K|, max |V|
};
InputMagnitudes magnitudes(const Inputs& in);
double o_tolerance(const Shape& s, const InputMagnitudes& mag);
double lse_tolerance(const Shape& s, const InputMagnitudes& mag, double lse_magnitude);

Check check_forward(const Shape& s, const Inputs& in, const Reference& ref, const Forward& out);

// One gradient (dQ, dK or dV) against the reference, element by element on the reference's heads,
// each element against its own tolerance grad_tolerance(mag) (derivation in checks.cpp).
struct GradCheck {
  std::string name;           // "dQ", "dK", "dV"
  double max_abs = 0.0;       // largest |got − want| on the checked heads
  double max_ratio = 0.0;     // largest |got − want| / tolerance; pass needs <= 1
  Where worst;                // where max_ratio occurs (i = row, j = column)
  double worst_got = 0.0, worst_want = 0.0, worst_tol = 0.0;
  int64_t nonfinite = 0;      // non-finite elements anywhere in the tensor (every head is scanned)
  int64_t checked = 0;        // elements compared
  bool pass = false;
};
struct BackwardCheck {
  GradCheck dq, dk, dv;
  int64_t checked_heads = 0;
  bool pass = false;
  std::string summary() const;  // one line per gradient: PASS/FAIL, numbers, worst place
};
double grad_tolerance(const Shape& s, double mag);
BackwardCheck check_backward(const Shape& s, const Gradients& ref, const Grads& got);

}  // namespace fa
