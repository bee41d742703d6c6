// Step 02 — the blueprint: kernel.cu's fused online-softmax kernel as CPU loops.
//
// One warp per query row, keys in order, a running (m, l, o) per row; K and V are read through the
// counting views once per (query, key) pair, so the ledger shows the price of fusion without reuse.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "schedule.hpp"

namespace fa::step02 {

namespace {

// [online-update] One warp, one query row i: stream over the visible keys.
void row(const Shape& s, const GlobalMat& Q, const GlobalMat& K, const GlobalMat& V, GlobalMat& O, float* lse,
         int64_t i, Ledger& led) {
  const int64_t d = s.d;
  const float scale = static_cast<float>(s.softmax_scale());
  std::vector<float> q(static_cast<size_t>(d)), o(static_cast<size_t>(d), 0.0f);
  for (int64_t c = 0; c < d; ++c) q[static_cast<size_t>(c)] = Q.load(i, c);
  const int64_t nv = visible_keys(i, s.N, s.Nk, s.causal);
  float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
  for (int64_t j = 0; j < nv; ++j) {
    float dot = 0.0f;                                     // s_ij = scale · q_i · k_j (a warp reduction)
    for (int64_t c = 0; c < d; ++c) dot += q[static_cast<size_t>(c)] * K.load(j, c);
    const float sij = dot * scale;
    // lab:begin online-update: [online-update]: rescale l, o by alpha, add p = exp(s_ij - m_new), p v_j …
    const float m_new = std::max(m, sij);
    const float alpha = rescale_factor(m, m_new);         // moves l and o to the new maximum
    const float p = std::exp(sij - m_new);
    l = l * alpha + p;
    for (int64_t c = 0; c < d; ++c) o[static_cast<size_t>(c)] = o[static_cast<size_t>(c)] * alpha + p * V.load(j, c);
    m = m_new;
    // lab:end
    led.cuda_core_flops += 4 * d;  // the dot product and p·v: two FMAs per element
    led.nonmatmul_ops += 7 + d;    // max, 2×(sub, exp), l's mul and add; o's rescale
    led.exps += j == 0 ? 1 : 2;    // p, and alpha but on the first key (m = −inf: [rescale-guard])
  }
  if (nv == 0) {  // a row that sees no key: O = 0, L = +inf
    for (int64_t c = 0; c < d; ++c) O.store(i, c, 0.0f);
    *lse = std::numeric_limits<float>::infinity();
  } else {
    for (int64_t c = 0; c < d; ++c) O.store(i, c, o[static_cast<size_t>(c)] / l);  // rounded to the storage type
    *lse = m + std::log(l);
    led.nonmatmul_ops += d + 2;  // the divisions, log and add
  }
  led.gmem_write += 4;  // L, one fp32 per row
}

}  // namespace

BlueprintResult blueprint(const Shape& s, const Inputs& in) {
  BlueprintResult res;
  res.out.o = Tensor4(s.B, s.H, s.N, s.d);
  res.out.lse = Tensor4(s.B, s.H, s.N, 1);
  Ledger& led = res.ledger["online"];
  const Store st = Store::of(s.dtype);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const GlobalMat Q(in.q.head(b, h), s.N, s.d, s.d, st, led);
      const GlobalMat K(in.k.head(b, h), s.Nk, s.d, s.d, st, led);
      const GlobalMat V(in.v.head(b, h), s.Nk, s.d, s.d, st, led);
      GlobalMat O(res.out.o.head(b, h), s.N, s.d, s.d, st, led);
      for (int64_t i = 0; i < s.N; ++i) row(s, Q, K, V, O, &res.out.lse.at(b, h, i, 0), i, led);
    }
  return res;
}

// The ledger in closed form (docs/02_online_softmax.md); visible_pairs() is Σ_i (keys row i sees).
LedgerSet closed_form(const Shape& s) {
  const int64_t BH = s.B * s.H, N = s.N, Nk = s.Nk, d = s.d;
  const int64_t vis = visible_pairs(N, Nk, s.causal), rows_vis = rows_with_keys(N, Nk, s.causal);
  LedgerSet ls;
  Ledger& led = ls["online"];
  led.gmem_read = BH * (N * d * 2 + vis * d * 2 * 2);  // Q once; K and V once per (query, visible key)
  led.gmem_write = BH * (N * d * 2 + N * 4);           // O and L
  led.cuda_core_flops = BH * vis * 4 * d;
  led.nonmatmul_ops = BH * (vis * (7 + d) + rows_vis * (d + 2));
  led.exps = BH * (2 * vis - rows_vis);  // p per key, alpha per key but a row's first
  return ls;
}

namespace {
BlueprintResult run_blueprint(const Shape& s, const Inputs& in, const StepOptions&) { return blueprint(s, in); }
LedgerSet run_closed_form(const Shape& s, const StepOptions&) { return closed_form(s); }
// [arch] No shared memory: each warp reads its K and V rows from global memory.
int64_t run_smem_bytes(const Shape&, const StepOptions&) { return 0; }
}  // namespace

const StepInfo& info() {
  static const StepInfo step = [] {
    StepInfo i;
    i.id = "02";
    i.slug = "online_softmax";
    i.title = "online softmax: one fused kernel, S and P never touch HBM (no reuse yet)";
    i.teaches = "fusion: running max and sum; K and V re-read per query";
    i.mma_unit = MmaUnit::none;  // [mma-unit]
    i.blueprint = run_blueprint;
    i.closed_form = run_closed_form;
    i.smem_bytes = run_smem_bytes;
    i.bf16_min_cc = 75;  // bf16 is only stored here: converted to fp32 and multiplied on CUDA cores
#ifdef FA_HAVE_CUDA
    i.launch = launch;
    i.workspace_bytes = workspace_bytes;
#endif
    i.kernel_prefix = "step02_";
    return i;
  }();
  return step;
}

}  // namespace fa::step02
