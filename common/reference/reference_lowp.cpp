#include "reference/reference_lowp.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "kernel/dropout.hpp"
#include "harness/parallel.hpp"

namespace fa {

namespace {

using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapF = Eigen::Map<const MatF>;

// Rows (pass 1) and keys (pass 2) per task, as in reference.cpp.
constexpr int64_t kBlock = 128;

int64_t visible(const Shape& s, int64_t i) { return std::clamp<int64_t>(s.last_visible_key(i) + 1, 0, s.Nk); }
// [window] The first key row i sees (0 without a window), never past visible(s, i).
int64_t first(const Shape& s, int64_t i) { return std::min(s.first_visible_key(i), visible(s, i)); }

// One head's tensors, read in place (Tensor4 is contiguous and already holds storage-type values).
struct HeadView {
  MapF Q, K, V, G;  // G = dO
  HeadView(const Shape& s, const Inputs& in, const Tensor4& dO, int64_t bh)
      : Q(in.q.head(bh / s.H, bh % s.H), s.N, s.d), K(in.k.head(bh / s.H, s.kv_head(bh % s.H)), s.Nk, s.d),  // [gqa]
        V(in.v.head(bh / s.H, s.kv_head(bh % s.H)), s.Nk, s.d), G(dO.head(bh / s.H, bh % s.H), s.N, s.d) {}
};

// Dropout's factor Z_ij of one head: keep_ij / (1 − p); 1 without dropout.
struct Dropout {
  uint64_t seed = 0, offset = 0;
  int64_t bh = 0;
  uint32_t threshold = 0;
  float rescale = 1.0f;
  Dropout(const Shape& s, int64_t head)
      : seed(s.dropout_seed), offset(s.dropout_offset), bh(head), threshold(dropout_threshold(float(s.dropout))),
        rescale(dropout_rescale(float(s.dropout))) {}
  float z(int64_t i, int64_t j) const {
    if (threshold == 0u) return 1.0f;
    return dropout_keep(seed, offset, bh, i, j, threshold) ? rescale : 0.0f;
  }
};

}  // namespace

// Pass 1, over blocks of query rows: S, the row's m and l, P, dP, D, dS  ->  dQ.
// Pass 2, over blocks of keys:       S, P (pass 1's m, l), Pd, dP, dS (pass 1's D)  ->  dK, dV.
// Both passes form S and dPd by the same fp32 products, so P and dS are the same numbers in both
// (up to the summation order of an fp32 dot product of length d).
namespace {
LowpGradients lowp_per_head(const Shape& s, const Inputs& in, const Tensor4& dO, const std::vector<int64_t>& heads);
}

// [gqa] As reference_backward: dK and dV of a listed head are its key/value head's: the group's
// contributions (each rounded to the storage type) summed in fp32 in head order, rounded once more.
// [window] The band alone.
LowpGradients naive_backward_lowp(const Shape& s, const Inputs& in, const Tensor4& dO, const std::vector<int64_t>& heads) {
  require_heads(s, heads, "naive_backward_lowp");
  if (s.hkv() == s.H) return lowp_per_head(s, in, dO, heads);
  const std::vector<int64_t> all = group_heads(s, heads);
  const LowpGradients p = lowp_per_head(s, in, dO, all);
  const int64_t G = s.H / s.hkv(), N = s.N, Nk = s.Nk, d = s.d;
  LowpGradients g;
  g.heads = heads;
  g.N = N;
  g.Nk = Nk;
  g.d = d;
  for (int64_t bh : heads) {
    const auto [at, g0] = group_at(s, all, bh);
    g.dq.insert(g.dq.end(), p.dq.begin() + at * N * d, p.dq.begin() + (at + 1) * N * d);
    for (auto [src, dst] : {std::pair{&p.dk, &g.dk}, {&p.dv, &g.dv}}) {
      std::vector<float> sum = group_sum(*src, g0, G, Nk * d);  // in fp32, in head order
      for (float& x : sum) x = round_to(s.dtype, x);
      dst->insert(dst->end(), sum.begin(), sum.end());
    }
  }
  return g;
}

namespace {
LowpGradients lowp_per_head(const Shape& s, const Inputs& in, const Tensor4& dO, const std::vector<int64_t>& heads) {
  const int64_t nh = static_cast<int64_t>(heads.size()), N = s.N, Nk = s.Nk, d = s.d;
  LowpGradients g;
  g.heads = heads;
  g.N = N;
  g.Nk = Nk;
  g.d = d;
  g.dq.assign(static_cast<size_t>(nh * N * d), 0.0f);
  g.dk.assign(static_cast<size_t>(nh * Nk * d), 0.0f);
  g.dv.assign(static_cast<size_t>(nh * Nk * d), 0.0f);
  const DType t = s.dtype;
  const auto rnd = [t](float x) { return round_to(t, x); };
  const float scale = static_cast<float>(s.softmax_scale());
  std::vector<float> M(static_cast<size_t>(nh * N), -std::numeric_limits<float>::infinity());
  std::vector<float> L(static_cast<size_t>(nh * N), 0.0f), D(static_cast<size_t>(nh * N), 0.0f);

  // Pass 1: rows [i0, i1) against the keys any of them sees, [0, nk).
  const int64_t row_blocks = (N + kBlock - 1) / kBlock;
  parallel_for(nh * row_blocks, [&](int64_t task) {
    const int64_t hi = task / row_blocks, i0 = (task % row_blocks) * kBlock, i1 = std::min(N, i0 + kBlock), R = i1 - i0;
    const int64_t nk = visible(s, i1 - 1);
    if (nk == 0) return;  // dQ = 0
    const HeadView x(s, in, dO, heads[static_cast<size_t>(hi)]);
    const Dropout drop(s, heads[static_cast<size_t>(hi)]);
    MatF S = x.Q.middleRows(i0, R) * x.K.topRows(nk).transpose();   // then P, then dS, in place
    MatF dP = x.G.middleRows(i0, R) * x.V.topRows(nk).transpose();  // dPd, then dP
    for (int64_t r = 0; r < R; ++r) {
      const int64_t i = i0 + r, nv = visible(s, i), f = first(s, i);
      const size_t at = static_cast<size_t>(hi * N + i);
      float m = -std::numeric_limits<float>::infinity(), l = 0.0f, Di = 0.0f;
      for (int64_t j = f; j < nv; ++j) m = std::max(m, S(r, j) = rnd(scale * S(r, j)));
      for (int64_t j = f; j < nv; ++j) l += std::exp(S(r, j) - m);
      for (int64_t j = f; j < nv; ++j) {
        S(r, j) = rnd(std::exp(S(r, j) - m) / l);
        dP(r, j) = rnd(rnd(dP(r, j)) * drop.z(i, j));
        Di += S(r, j) * dP(r, j);
      }
      for (int64_t j = f; j < nv; ++j) S(r, j) = rnd(S(r, j) * (dP(r, j) - Di));
      for (int64_t j = 0; j < f; ++j) S(r, j) = 0.0f;  // [window]
      for (int64_t j = nv; j < nk; ++j) S(r, j) = 0.0f;
      M[at] = m;
      L[at] = l;
      D[at] = Di;
    }
    const MatF dQ = S * x.K.topRows(nk);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < d; ++c) g.dq[static_cast<size_t>((hi * N + i0 + r) * d + c)] = rnd(scale * dQ(r, c));
  });

  // Pass 2: keys [j0, j1) against the rows that see any of them, [r0, N).
  const int64_t key_blocks = (Nk + kBlock - 1) / kBlock;
  parallel_for(nh * key_blocks, [&](int64_t task) {
    const int64_t hi = task / key_blocks, j0 = (task % key_blocks) * kBlock, j1 = std::min(Nk, j0 + kBlock), C = j1 - j0;
    const int64_t r0 = s.causal ? std::clamp<int64_t>(j0 - (Nk - N), 0, N) : 0, R = N - r0;
    if (R == 0) return;  // dK = dV = 0
    const HeadView x(s, in, dO, heads[static_cast<size_t>(hi)]);
    const Dropout drop(s, heads[static_cast<size_t>(hi)]);
    MatF S = x.Q.middleRows(r0, R) * x.K.middleRows(j0, C).transpose();   // then dS
    const MatF dPd = x.G.middleRows(r0, R) * x.V.middleRows(j0, C).transpose();
    MatF Pd(R, C);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t i = r0 + r, nv = visible(s, i), f = first(s, i);
      const size_t at = static_cast<size_t>(hi * N + i);
      for (int64_t c = 0; c < C; ++c) {
        const int64_t j = j0 + c;
        if (j >= nv || j < f) { S(r, c) = Pd(r, c) = 0.0f; continue; }
        const float z = drop.z(i, j), p = rnd(std::exp(rnd(scale * S(r, c)) - M[at]) / L[at]);
        const float dp = rnd(rnd(dPd(r, c)) * z);
        Pd(r, c) = rnd(p * z);
        S(r, c) = rnd(p * (dp - D[at]));
      }
    }
    const MatF dV = Pd.transpose() * x.G.middleRows(r0, R), dK = S.transpose() * x.Q.middleRows(r0, R);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t k = 0; k < d; ++k) {
        const size_t at = static_cast<size_t>((hi * Nk + j0 + c) * d + k);
        g.dv[at] = rnd(dV(c, k));
        g.dk[at] = rnd(scale * dK(c, k));
      }
  });
  return g;
}
}  // namespace

NaiveErrors naive_errors(const Gradients& ref, const LowpGradients& naive) {
  if (ref.heads != naive.heads || ref.N != naive.N || ref.Nk != naive.Nk || ref.d != naive.d)
    throw std::invalid_argument("naive_errors: the naive gradients are of other heads or another shape");
  const auto worst = [](const std::vector<double>& want, const std::vector<float>& got) {
    double e = 0.0;
    for (size_t x = 0; x < want.size(); ++x)
      e = std::isfinite(got[x]) ? std::max(e, std::fabs(double(got[x]) - want[x])) : std::numeric_limits<double>::infinity();
    return e;
  };
  return {worst(ref.dq, naive.dq), worst(ref.dk, naive.dk), worst(ref.dv, naive.dv)};
}

NaiveErrors naive_lowp_errors(const Shape& s, const Inputs& in, const Tensor4& dO, const Gradients& ref) {
  return naive_errors(ref, naive_backward_lowp(s, in, dO, ref.heads));
}

}  // namespace fa
