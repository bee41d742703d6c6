#include "metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace fa {

namespace {
double max_abs_of(const Tensor4& t) {
  double m = 0.0;
  for (float x : t.v) m = std::max(m, double(std::fabs(x)));
  return m;
}
}  // namespace

InputMagnitudes magnitudes(const Inputs& in) { return {max_abs_of(in.q), max_abs_of(in.k), max_abs_of(in.v)}; }

// Why 4·u·max|V|:  every output row is a convex combination of V rows, O_i = Σ_j P_ij V_j with
// Σ_j P_ij = 1. The kernels round P to the storage type (|ΔP_ij| <= u·P_ij, counting the fp32
// normalization too) and round O once at the end (|ΔO| <= u/2·|O| <= u/2·max|V|). Hence
// |ΔO| <= Σ_j |ΔP_ij|·|V_j| + u/2·max|V| <= 1.5·u·max|V|. The fp32 error of S = scale·QKᵀ moves P
// by a relative ~d·2^-24·|S|, far below u for fp16 and bf16 at these sizes. A factor of ~2.5 on top
// of 1.5u covers the order of fp32 accumulation; a wrong element or a missed tile costs O(max|V|),
// hundreds of times more, so the check still fails on any real bug.
double o_tolerance(const Shape& s, const InputMagnitudes& mag) {
  return 4.0 * unit_roundoff(s.dtype) * mag.v + 1e-6;
}

// L = m + log(l) inherits the fp32 error of S: |ΔS| <= γ_d·scale·Σ_c |q_c||k_c|
// <= d·2^-24 · scale · d·max|Q|·max|K|, plus fp32 rounding of log(l) and of the sum, ~2^-22·(1+|L|).
// Tensor cores may round their fp32 accumulation coarser than IEEE fp32; a factor of 8 covers it.
double lse_tolerance(const Shape& s, const InputMagnitudes& mag, double lse_magnitude) {
  const double d = double(s.d);
  return 8.0 * d * d * 0x1p-24 * s.softmax_scale() * mag.q * mag.k +
         0x1p-20 * (1.0 + lse_magnitude);
}

Check check_forward(const Shape& s, const Inputs& in, const Reference& ref, const Forward& out) {
  Check c;
  const InputMagnitudes mag = magnitudes(in);
  c.atol = o_tolerance(s, mag);
  c.checked_rows = static_cast<int64_t>(ref.rows.size());
  const double inf = std::numeric_limits<double>::infinity();

  for (float x : out.o.v) c.nonfinite_o += std::isfinite(x) ? 0 : 1;

  double err2 = 0.0, ref2 = 0.0;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t bh = b * s.H + h;
      for (int64_t r = 0; r < c.checked_rows; ++r) {
        const int64_t i = ref.rows[static_cast<size_t>(r)];
        for (int64_t col = 0; col < s.d; ++col) {
          const double got = out.o.at(b, h, i, col), want = ref.o_at(bh, r, col);
          const double e = std::isfinite(got) ? std::fabs(got - want) : inf;
          err2 += e * e;
          ref2 += want * want;
          if (!(e <= c.max_abs) || c.worst.b < 0) {  // NaN-proof: a NaN error always takes the slot
            c.max_abs = std::isnan(e) ? inf : std::max(c.max_abs, e);
            c.worst = {b, h, i, col};
            c.worst_got = got;
            c.worst_want = want;
          }
        }
        // L: +inf exactly where the reference says the row sees no key, finite and close elsewhere.
        const double got_l = out.lse.at(b, h, i, 0), want_l = ref.lse_at(bh, r);
        double el;
        if (std::isinf(want_l)) el = (got_l == want_l) ? 0.0 : inf;
        else el = std::isfinite(got_l) ? std::fabs(got_l - want_l) : inf;
        const double tol_l = std::isinf(want_l) ? 0.0 : lse_tolerance(s, mag, std::fabs(want_l));
        if (!(el <= tol_l)) c.bad_lse++;
        if (!(el <= c.lse_max_abs)) { c.lse_max_abs = el; c.lse_worst = {b, h, i, 0}; }
        c.lse_atol = std::max(c.lse_atol, tol_l);
      }
    }
  c.rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  if (!std::isfinite(err2)) c.rel_l2 = inf;
  c.pass = c.nonfinite_o == 0 && c.bad_lse == 0 && c.max_abs <= c.atol;
  return c;
}

std::string Check::summary() const {
  std::ostringstream os;
  os.precision(3);
  os << (pass ? "PASS" : "FAIL") << "  max|ΔO| " << std::scientific << max_abs << " (tol " << atol << ")"
     << "  rel-L2 " << rel_l2 << "  max|ΔL| " << lse_max_abs;
  if (worst.b >= 0)
    os << "  worst O at (b=" << worst.b << ", h=" << worst.h << ", i=" << worst.i << ", j=" << worst.j
       << "): got " << worst_got << ", want " << worst_want;
  if (nonfinite_o) os << "  non-finite O: " << nonfinite_o;
  if (bad_lse) os << "  L out of tolerance in " << bad_lse << " rows (worst at b=" << lse_worst.b
                  << ", h=" << lse_worst.h << ", i=" << lse_worst.i << ")";
  os << "  [" << checked_rows << " rows per head checked]";
  return os.str();
}

}  // namespace fa
