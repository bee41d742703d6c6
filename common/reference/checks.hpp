// The correctness checks: O, L and the gradients against the reference, written so that NaN
// fails, with tolerances derived from the storage precision.
#pragma once
#include <cstdint>
#include <string>

#include "core/problem.hpp"
#include "reference/reference.hpp"
#include "reference/reference_lowp.hpp"

namespace fa {

struct Where { int64_t b = -1, h = -1, i = -1, j = -1; };

struct Check {
  // O against the reference on the checked rows.
  double max_abs = 0.0, rel_l2 = 0.0, atol = 0.0;
  Where worst;                   // where max_abs occurs (j holds the column of O: printed as c)
  double worst_got = 0.0, worst_want = 0.0;
  // L (log-sum-exp) against the reference on the checked rows.
  double lse_max_abs = 0.0, lse_atol = 0.0;
  Where lse_worst;
  int64_t checked_rows = 0;      // per (b, h)
  int64_t nonfinite_o = 0;       // non-finite O anywhere (all rows are scanned, not only checked ones)
  int64_t bad_lse = 0;           // L not finite where it should be, or not +inf where it should be
  // [fp8] An fp8 shape's O is held element by element to the reference's o_tol: the largest ratio
  // |ΔO| / tolerance and where (pass needs it at most 1); -1 for other shapes, which use atol.
  double tol_ratio = -1.0;
  Where ratio_worst;
  bool pass = false;
  std::string summary() const;   // one line: PASS/FAIL with the numbers and the worst place
};

// Tolerances (derivation in checks.cpp), from the storage type's unit roundoff u and the inputs'
// largest magnitudes.
struct InputMagnitudes {
  double q = 0, k = 0, v = 0;  // max |Q|, max |K|, max |V|
};
InputMagnitudes magnitudes(const Inputs& in);
// The root-mean-square error of O over the reference's rows (every head): FlashAttention-3's FP8 metric.
double o_rmse(const Shape& s, const Reference& ref, const Forward& out);
double o_tolerance(const Shape& s, const InputMagnitudes& mag);
double lse_tolerance(const Shape& s, const InputMagnitudes& mag, double lse_magnitude);

Check check_forward(const Shape& s, const Inputs& in, const Reference& ref, const Forward& out);

// One gradient (dQ, dK or dV) against the reference on the reference's heads, by FlashAttention's
// test rule: the kernel's largest error may be at most twice that of the standard backward computed
// in the storage precision (reference_lowp.hpp), plus a floor (derivation in checks.cpp):
//   max |got − want| <= bound = 2·naive + floor,   and no non-finite element anywhere.
// Without the naive errors (the three-argument check_backward) the per-element error-scale rule
// decides instead: |got − want| <= grad_tolerance(mag) element by element.
struct GradCheck {
  std::string name;           // "dQ", "dK", "dV"
  double max_abs = 0.0;       // largest |got − want| on the checked heads (+inf for a non-finite element)
  Where worst;                // where the rule's measure peaks: |got − want| (naive rule), its ratio to
                              // the tolerance (error-scale rule); i = row, j = column
  double worst_got = 0.0, worst_want = 0.0, worst_tol = 0.0;  // worst_tol: grad_tolerance there
  double naive = -1.0;        // max |naive − want| of the storage-precision backward; < 0: not computed
  double floor = 0.0, bound = 0.0;  // bound = 2·naive + floor
  bool by_naive = false;      // the naive bound decided (false: the error-scale rule did)
  double max_ratio = 0.0;     // largest per-element |got − want| / grad_tolerance(mag): a diagnostic
                              // under the naive rule, the criterion (<= 1) under the error-scale rule
  int64_t nonfinite = 0;      // non-finite elements anywhere in the tensor (every head is scanned)
  int64_t checked = 0;        // elements compared
  bool pass = false;
  double bound_ratio() const;  // max_abs / bound (pass needs <= 1 under the naive rule)
};
struct BackwardCheck {
  GradCheck dq, dk, dv;
  int64_t checked_heads = 0;
  bool pass = false;
  std::string summary() const;  // one line per gradient: PASS/FAIL, the error against its bound, worst place
};
double grad_tolerance(const Shape& s, double mag);
// The floor of the naive rule for a tensor whose largest error scale (reference.hpp) is max_mag.
double grad_floor(const Shape& s, double max_mag);

// FlashAttention's rule: runs the storage-precision naive backward on ref.heads (about the cost of
// the reference) and checks against it.
BackwardCheck check_backward(const Shape& s, const Inputs& in, const Tensor4& dO, const Gradients& ref, const Grads& got);
// The same with the naive errors already computed (naive_lowp_errors), e.g. once for several kernels.
BackwardCheck check_backward(const Shape& s, const Gradients& ref, const NaiveErrors& naive, const Grads& got);
// The error-scale rule alone, for a caller without the inputs and dO.
BackwardCheck check_backward(const Shape& s, const Gradients& ref, const Grads& got);

}  // namespace fa
