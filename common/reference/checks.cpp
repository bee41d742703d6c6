#include "reference/checks.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "reference/quantize.hpp"

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
  // [fp8] S from exact products of codes, summed by the FP8 tensor cores to about 14 bits (2^-13
  // relatively per sum of d products, not fp32's d·2^-24), times the descales in fp32.
  if (s.fp8) return 8.0 * d * 0x1p-13 * s.softmax_scale() * mag.q * mag.k + 0x1p-20 * (1.0 + lse_magnitude);
  return 8.0 * d * d * 0x1p-24 * s.softmax_scale() * mag.q * mag.k +
         0x1p-20 * (1.0 + lse_magnitude);
}

double o_rmse(const Shape& s, const Reference& ref, const Forward& out) {
  double e2 = 0.0;
  int64_t n = 0;
  for (int64_t bh = 0; bh < s.B * s.H; ++bh)
    for (size_t r = 0; r < ref.rows.size(); ++r)
      for (int64_t c = 0; c < s.d; ++c) {
        const double e = double(out.o.at(bh / s.H, bh % s.H, ref.rows[r], c)) - ref.o_at(bh, int64_t(r), c);
        e2 += e * e;
        ++n;
      }
  return n > 0 ? std::sqrt(e2 / double(n)) : 0.0;
}

Check check_forward(const Shape& s, const Inputs& in, const Reference& ref, const Forward& out) {
  Check c;
  // [fp8] The magnitudes of what the kernel multiplies: the dequantized (and transformed) inputs.
  const InputMagnitudes mag = s.fp8 ? magnitudes(dequantize(quantize_fp8(s, in))) : magnitudes(in);
  c.atol = o_tolerance(s, mag);
  c.checked_rows = static_cast<int64_t>(ref.rows.size());
  if (!ref.o_tol.empty()) {  // [fp8] the largest of the elements' tolerances, for the report
    c.atol = 0.0;
    c.tol_ratio = 0.0;
    for (double t : ref.o_tol) c.atol = std::max(c.atol, t);
  }
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
          if (!ref.o_tol.empty()) {  // [fp8] each element against its own tolerance (reference.hpp)
            const double q = e / ref.o_tol[static_cast<size_t>((bh * c.checked_rows + r) * s.d + col)];
            if (!(q <= c.tol_ratio)) c.tol_ratio = std::isnan(q) ? inf : q, c.ratio_worst = {b, h, i, col};
          }
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
  c.pass = c.nonfinite_o == 0 && c.bad_lse == 0 && (ref.o_tol.empty() ? c.max_abs <= c.atol : c.tol_ratio <= 1.0);
  return c;
}

std::string Check::summary() const {
  std::ostringstream os;
  os.precision(3);
  os << (pass ? "PASS" : "FAIL") << "  max|ΔO| " << std::scientific << max_abs << " (tol " << (tol_ratio >= 0 ? "up to " : "") << atol << ")"
     << "  rel-L2 " << rel_l2 << "  max|ΔL| " << lse_max_abs;
  if (worst.b >= 0)
    os << "  worst O at (b=" << worst.b << ", h=" << worst.h << ", i=" << worst.i << ", c=" << worst.j
       << "): got " << worst_got << ", want " << worst_want;
  if (tol_ratio >= 0 && ratio_worst.b >= 0)
    os << "  [fp8] worst |ΔO|/tolerance " << tol_ratio << " at (b=" << ratio_worst.b << ", h=" << ratio_worst.h << ", i=" << ratio_worst.i
       << ", c=" << ratio_worst.j << ")";
  if (nonfinite_o) os << "  non-finite O: " << nonfinite_o;
  if (bad_lse) os << "  L out of tolerance in " << bad_lse << " rows (worst at b=" << lse_worst.b
                  << ", h=" << lse_worst.h << ", i=" << lse_worst.i << ")";
  os << "  [" << checked_rows << " rows per head checked]";
  return os.str();
}

// The error-scale rule: the reported |Δ|/tol beside the naive rule below, and the rule itself where
// no naive errors are given. Why 4·u·mag, element by element (mag: the reference's error scale of
// that element, reference.hpp; u: the storage type's unit roundoff, |round(x) − x| <= u·|x|).
// The backward kernels, like FlashAttention's, take Q, K, V, dO in the storage type, recompute
// P = exp(S − L) in fp32, round P and dS = P ∘ (dP − D) to the storage type before the tensor-core
// products (a relative error of at most u each), form D_i = Σ_c dO_ic O_ic from O as stored
// (O rounded, so |ΔD_i| <= u·D̂_i with D̂_i = Σ_c |dO_ic||O_ic|), accumulate in fp32 and round each
// gradient once at the end (u relative, and |g| <= mag). Hence
//   dV = Pᵀ dO:            |ΔdV| <= u·Pᵀ|dO| + u·|dV|                          <= 2u·dv_mag
//   dS = P ∘ (dP − D):     |ΔdS| <= u·|dS| (rounding) + P∘|ΔD| <= u·(|dS| + P∘D̂) = u·Ŝ
//   dQ = scale·dS K:       |ΔdQ| <= scale·u·Ŝ|K| + u·|dQ|                       <= 2u·dq_mag
// and dK = scale·dSᵀ Q likewise. fp32 errors (S = scale·QKᵀ, dP = dO Vᵀ, the sums over N or Nk
// keys or rows) are relative ~k·2^-24 with k the length of a sum, far below u for fp16 and bf16
// here; the forward's own error in O enters D the way rounding does, and averages out over c.
// A factor 4 (twice 2u) leaves room for those; a floor of 1e-3·u·max(mag) over the tensor absorbs
// an element whose mag is near 0 where fp32 accumulation order (atomics included) still leaves a
// few ulps. A wrong scale, a missed tile or a wrong row costs O(mag) — many tolerances — so the
// check still fails on a real bug (tests/test_backward_check.cpp).
// The relative bound holds for normal numbers only: the final rounding of a gradient element to the
// storage type costs up to half the smallest subnormal whatever its size, so the tolerance adds that
// spacing (dtype.hpp) — an element whose exact value is 2.98e-08 is stored in fp16 as 0, and only
// this floor lets that pass (tests/test_backward_check.cpp).
double grad_tolerance(const Shape& s, double mag) {
  return 4.0 * unit_roundoff(s.dtype) * mag + subnormal_spacing(s.dtype);
}

// The naive rule's floor: u/16 · max(mag) over the tensor, plus the subnormal spacing.
// 2·naive alone can demand zero: where every row sees one key (Nk = 1), P = 1 and dS = P(dP − D) = 0
// exactly, and the naive backward, whose D = Σ_j P_ij dP_ij is then exactly dP, returns dQ = dK = 0
// exactly. A kernel forms D from O and dP by a tensor-core product; their fp32 summation orders differ
// by up to ~d·2^-24·D̂, and that much reaches dS, dQ and dK: at most d·2^-24·mag (mag counts the
// P∘D̂ that cancels, reference.hpp, so it stays positive where the gradient is 0). For d <= 128 that is
// 2^-17·mag, 4 times below u/16 in fp16 and 2^7 times in bf16. Beside the rule's main term the floor
// is small: where it is not 0 the naive error is 0.45–46·u·max|g| on the shape matrix, and
// max(mag)/max|g| <= 26, so the floor is at most 1.6·u·max|g|, mostly a fraction of u·max|g|. The
// subnormal spacing: below the smallest normal a stored result may be off by half of it whatever its
// size (dtype.hpp).
double grad_floor(const Shape& s, double max_mag) {
  return unit_roundoff(s.dtype) / 16.0 * max_mag + subnormal_spacing(s.dtype);
}

double GradCheck::bound_ratio() const {
  if (bound > 0.0) return max_abs / bound;
  return max_abs > 0.0 ? std::numeric_limits<double>::infinity() : 0.0;
}

namespace {

// The error-scale rule's floor, as a fraction of the largest mag of the tensor passed to
// grad_tolerance (1e-3·u·max).
constexpr double kGradFloor = 1e-3 / 4.0;

// naive < 0: not computed (the error-scale rule decides); non-finite: the naive backward overflowed
// the storage type, its bound says nothing, and the error-scale rule decides too.
// [gqa] kv: dK or dV, [B, Hkv, Nk, d]; a listed query head is checked against its key/value head.
GradCheck check_grad(const Shape& s, const char* name, const Gradients& ref, const Tensor4& got, int64_t rows,
                     const std::vector<double>& want, const std::vector<double>& mag, double naive, bool kv) {
  GradCheck g;
  g.name = name;
  if (got.B != s.B || got.H != (kv ? s.hkv() : s.H) || got.rows != rows || got.cols != s.d)
    throw std::invalid_argument(std::string("check_backward: ") + name + " has the wrong shape");
  for (float x : got.v) g.nonfinite += std::isfinite(x) ? 0 : 1;
  double max_mag = 0.0;
  for (double m : mag) max_mag = std::max(max_mag, m);
  g.naive = naive;
  g.by_naive = naive >= 0.0 && std::isfinite(naive);
  g.floor = grad_floor(s, max_mag);
  g.bound = naive >= 0.0 ? 2.0 * naive + g.floor : 0.0;
  const double floor = kGradFloor * max_mag;
  const double inf = std::numeric_limits<double>::infinity();
  for (size_t hi = 0; hi < ref.heads.size(); ++hi) {
    const int64_t b = ref.heads[hi] / s.H, h = kv ? s.kv_head(ref.heads[hi] % s.H) : ref.heads[hi] % s.H;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t c = 0; c < s.d; ++c) {
        const size_t at = static_cast<size_t>((int64_t(hi) * rows + i) * s.d + c);
        const double x = got.at(b, h, i, c), w = want[at];
        double e = std::isfinite(x) ? std::fabs(x - w) : inf;
        if (std::isnan(e)) e = inf;
        const double tol = grad_tolerance(s, mag[at] + floor);
        const double ratio = e == 0.0 ? 0.0 : (tol > 0.0 ? e / tol : inf);
        // The first element fills the slot; then the larger of the rule's measure takes it.
        const bool worse = g.worst.b < 0 || (g.by_naive ? e > g.max_abs : ratio > g.max_ratio);
        g.max_abs = std::max(g.max_abs, e);
        g.max_ratio = std::max(g.max_ratio, ratio);
        if (worse) {
          g.worst = {b, h, i, c};
          g.worst_got = x;
          g.worst_want = w;
          g.worst_tol = tol;
        }
        ++g.checked;
      }
  }
  const bool within = g.by_naive ? g.max_abs <= g.bound : g.max_ratio <= 1.0;
  g.pass = g.checked > 0 && g.nonfinite == 0 && within;
  return g;
}

BackwardCheck check_all(const Shape& s, const Gradients& ref, const NaiveErrors& naive, const Grads& got) {
  if (ref.N != s.N || ref.Nk != s.Nk || ref.d != s.d)
    throw std::invalid_argument("check_backward: the reference gradients are of another shape");
  BackwardCheck c;
  c.dq = check_grad(s, "dQ", ref, got.dq, s.N, ref.dq, ref.dq_mag, naive.dq, false);
  c.dk = check_grad(s, "dK", ref, got.dk, s.Nk, ref.dk, ref.dk_mag, naive.dk, true);
  c.dv = check_grad(s, "dV", ref, got.dv, s.Nk, ref.dv, ref.dv_mag, naive.dv, true);
  c.checked_heads = static_cast<int64_t>(ref.heads.size());
  c.pass = c.dq.pass && c.dk.pass && c.dv.pass;
  return c;
}

}  // namespace

BackwardCheck check_backward(const Shape& s, const Inputs& in, const Tensor4& dO, const Gradients& ref, const Grads& got) {
  if (ref.N != s.N || ref.Nk != s.Nk || ref.d != s.d)
    throw std::invalid_argument("check_backward: the reference gradients are of another shape");
  return check_all(s, ref, naive_lowp_errors(s, in, dO, ref), got);
}

BackwardCheck check_backward(const Shape& s, const Gradients& ref, const NaiveErrors& naive, const Grads& got) {
  if (!(naive.dq >= 0.0 && naive.dk >= 0.0 && naive.dv >= 0.0))
    throw std::invalid_argument("check_backward: naive errors must be >= 0 (naive_lowp_errors)");
  return check_all(s, ref, naive, got);
}

BackwardCheck check_backward(const Shape& s, const Gradients& ref, const Grads& got) {
  return check_all(s, ref, NaiveErrors{-1.0, -1.0, -1.0}, got);
}

std::string BackwardCheck::summary() const {
  std::ostringstream os;
  os.precision(3);
  bool first = true;
  for (const GradCheck* g : {&dq, &dk, &dv}) {
    if (!first) os << "\n";
    first = false;
    os << (g->pass ? "PASS" : "FAIL") << "  " << g->name << "  max|Δ| " << std::scientific << g->max_abs;
    if (g->by_naive)
      os << (g->max_abs <= g->bound ? " <= " : " > ") << "bound " << g->bound << " = 2 × naive " << g->naive
         << " + floor " << g->floor << "  (|Δ|/tol " << std::defaultfloat << g->max_ratio << std::scientific << ")";
    else
      os << "  worst |Δ|/tol " << std::defaultfloat << g->max_ratio << std::scientific
         << (g->naive < 0.0 ? "" : " (the naive backward overflowed: the error-scale rule decides)");
    if (g->worst.b >= 0) {
      // dQ's rows are queries (i), dK's and dV's keys (j); c is the head dimension's column.
      os << "  worst at (b=" << g->worst.b << ", h=" << g->worst.h << (g->name == "dQ" ? ", i=" : ", j=") << g->worst.i
         << ", c=" << g->worst.j
         << "): got " << g->worst_got << ", want " << g->worst_want;
      if (!g->by_naive) os << ", tol " << g->worst_tol;
    }
    if (g->nonfinite) os << "  non-finite: " << g->nonfinite;
    os << "  [" << checked_heads << " heads, " << g->checked << " elements]";
  }
  return os.str();
}

}  // namespace fa
