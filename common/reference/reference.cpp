#include "reference/reference.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernel/dropout.hpp"
#include "harness/parallel.hpp"
#include "kernel/fp8.hpp"
#include "reference/quantize.hpp"
#include "core/rng.hpp"

namespace fa {

using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

namespace {

// [dropout] The mask of a shape, drawn as the kernels draw it: the threshold from P as a float (what
// AttnParams::dropout holds), so that keep_ij is bit-identical; the factor 1/(1 − P) in double.
struct DropoutMask {
  bool on;
  uint64_t seed, offset;
  uint32_t threshold;
  double rescale;
  explicit DropoutMask(const Shape& s)
      : on(s.dropout > 0.0), seed(s.dropout_seed), offset(s.dropout_offset),
        threshold(dropout_threshold(static_cast<float>(s.dropout))), rescale(on ? 1.0 / (1.0 - s.dropout) : 1.0) {}
  double z(int64_t bh, int64_t i, int64_t j) const {
    return !on ? 1.0 : dropout_keep(seed, offset, bh, i, j, threshold) ? rescale : 0.0;
  }
};

}  // namespace

double dropout_factor(const Shape& s, int64_t bh, int64_t i, int64_t j) { return DropoutMask(s).z(bh, i, j); }

std::vector<int64_t> pick_rows(const Shape& s, uint64_t seed, double budget) {
  const double per_row = double(s.B) * double(s.H) * double(s.Nk) * double(s.d);
  std::vector<int64_t> rows;
  if (per_row * double(s.N) <= budget) {
    for (int64_t i = 0; i < s.N; ++i) rows.push_back(i);
    return rows;
  }
  const int64_t want = std::clamp<int64_t>(static_cast<int64_t>(budget / per_row), 8, s.N);
  std::vector<char> taken(static_cast<size_t>(s.N), 0);
  auto take = [&](int64_t i) {
    if (i >= 0 && i < s.N && !taken[static_cast<size_t>(i)]) { taken[static_cast<size_t>(i)] = 1; rows.push_back(i); }
  };
  take(0);
  take(s.N - 1);
  if (s.causal) {  // the first row that sees a key: i + Nk - N >= 0
    const int64_t first = std::max<int64_t>(0, s.N - s.Nk);
    take(first - 1);
    take(first);
  }
  Rng rng(seed ^ 0x5eedf00dull);
  while (static_cast<int64_t>(rows.size()) < want) take(static_cast<int64_t>(rng.below(static_cast<uint64_t>(s.N))));
  std::sort(rows.begin(), rows.end());
  return rows;
}

namespace {
Reference forward_impl(const Shape& s, const Inputs& in, const std::vector<int64_t>& rows, bool fp8_tol);
}

Reference reference_forward(const Shape& s, const Inputs& in, const std::vector<int64_t>& rows) {
  // [fp8] An fp8 shape's reference runs on the values its codes stand for (common/reference/quantize.hpp),
  // with each element's tolerance for P's cast beside it.
  if (s.fp8) return forward_impl(s.without_fp8(), dequantize(quantize_fp8(s, in)), rows, true);
  return forward_impl(s, in, rows, false);
}

namespace {
Reference forward_impl(const Shape& s, const Inputs& in, const std::vector<int64_t>& rows, bool fp8_tol) {
  const int64_t R = static_cast<int64_t>(rows.size());
  Reference ref;
  ref.rows = rows;
  ref.d = s.d;
  ref.o.assign(static_cast<size_t>(s.B * s.H * R * s.d), 0.0);
  ref.lse.assign(static_cast<size_t>(s.B * s.H * R), 0.0);
  if (fp8_tol) ref.o_tol.assign(ref.o.size(), 0.0);
  const double scale = s.softmax_scale();
  const double inf = std::numeric_limits<double>::infinity();
  const DropoutMask drop(s);

  // Heads are independent: one task each (each writes only its own slice of the result).
  parallel_for(s.B * s.H, [&](int64_t bh) {
    {
      const int64_t b = bh / s.H, h = bh % s.H;
      // Upcast this head to double once (the values are already rounded to the storage type).
      MatD Q(R, s.d), K(s.Nk, s.d), V(s.Nk, s.d);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < s.d; ++c) Q(r, c) = in.q.at(b, h, rows[static_cast<size_t>(r)], c);
      for (int64_t j = 0; j < s.Nk; ++j)
        for (int64_t c = 0; c < s.d; ++c) { K(j, c) = in.k.at(b, s.kv_head(h), j, c); V(j, c) = in.v.at(b, s.kv_head(h), j, c); }

      MatD S = scale * (Q * K.transpose());  // [R, Nk]
      MatD P = MatD::Zero(R, s.Nk);
      for (int64_t r = 0; r < R; ++r) {
        const int64_t i = rows[static_cast<size_t>(r)];
        // Keys j0..last are visible ([window]: j0 > 0; [cache-lens]: sequence b's own length).
        const int64_t last = s.last_visible_key(i, b);
        const int64_t n_vis = std::min<int64_t>(last + 1, s.keys(b)), j0 = std::min(s.first_visible_key(i, b), n_vis);
        if (n_vis - j0 <= 0) { ref.lse[static_cast<size_t>(bh * R + r)] = inf; continue; }  // O row stays 0
        const double m = S.row(r).segment(j0, n_vis - j0).maxCoeff();
        double l = 0.0;
        for (int64_t j = j0; j < n_vis; ++j) { P(r, j) = std::exp(S(r, j) - m); l += P(r, j); }
        P.row(r).segment(j0, n_vis - j0) /= l;
        ref.lse[static_cast<size_t>(bh * R + r)] = m + std::log(l);
        // [dropout] O = (P ∘ Z) V; L above is that of the weights before dropout.
        if (drop.on)
          for (int64_t j = j0; j < n_vis; ++j) P(r, j) *= drop.z(bh, i, j);
      }
      MatD O = P * V;  // [R, d]
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < s.d; ++c) ref.o[static_cast<size_t>((bh * R + r) * s.d + c)] = O(r, c);
      if (fp8_tol) {
        // [fp8] P's cast to e4m3 (after ×256) errs by at most half a unit, u₈·P_ij (2^-18 below the normal
        // range), uniformly and independently: standard deviation ≤ u₈·P_ij/√3, and O_ic's error has
        //   σ_ic = (u₈/√3)·sqrt(Σ_j P_ij² V_jc²)  (+ (2^-18/√3)·sqrt(Σ_j V_jc²) for the subnormal weights).
        // The FP8 tensor cores keep about 13 bits of a running sum (SageAttention2; DeepSeek-AI, 2024, §3.3.2):
        // each k = 32 product loses at most 2^-13 of the sum's size. The kernel sums at most kSumKeys keys
        // there before adding into fp32 ([two-level]), so at most ⌈min(Nk, kSumKeys)/32⌉ such losses reach
        // any key's share of A_ic = Σ_j P_ij |V_jc|.
        // Tolerance: 8σ_ic + ⌈min(Nk, kSumKeys)/32⌉·2^-13·A_ic + u_bf16·|O_ic| (O's rounding) + 1e-6. Eight
        // standard deviations hold over every element of any shape; one dominant weight (σ = u₈|V|/√3) fits too.
        const double u8 = kE4m3UnitRoundoff / std::sqrt(3.0), sub = 0x1p-18 / std::sqrt(3.0);
        const double steps = double((std::min<int64_t>(s.Nk, fp8::kSumKeys) + 31) / 32) * 0x1p-13;
        const MatD P2 = P.cwiseAbs2(), V2 = V.cwiseAbs2();
        const MatD var = P2 * V2, A = P.cwiseAbs() * V.cwiseAbs();
        const Eigen::VectorXd vsum = V2.colwise().sum().transpose();
        for (int64_t r = 0; r < R; ++r)
          for (int64_t c = 0; c < s.d; ++c)
            ref.o_tol[static_cast<size_t>((bh * R + r) * s.d + c)] =
                8.0 * (u8 * std::sqrt(var(r, c)) + sub * std::sqrt(vsum(c))) + steps * A(r, c) +
                unit_roundoff(DType::bf16) * std::fabs(O(r, c)) + 1e-6;
      }
    }
  });
  return ref;
}
}  // namespace

std::vector<int64_t> pick_heads(const Shape& s, double budget) {
  const int64_t BH = s.B * s.H;
  std::vector<int64_t> heads;
  if (double(BH) * double(s.N) * double(s.Nk) * double(s.d) <= budget) {
    for (int64_t bh = 0; bh < BH; ++bh) heads.push_back(bh);
  } else {
    heads.push_back(0);
    if (BH > 1) heads.push_back(BH - 1);
  }
  return heads;
}

std::vector<int64_t> first_last_heads(const Shape& s, int64_t count) {
  const int64_t BH = s.B * s.H;
  std::vector<int64_t> heads;
  if (count >= BH) {
    for (int64_t bh = 0; bh < BH; ++bh) heads.push_back(bh);
    return heads;
  }
  const int64_t first = (count + 1) / 2;
  for (int64_t bh = 0; bh < first; ++bh) heads.push_back(bh);
  for (int64_t bh = BH - (count - first); bh < BH; ++bh) heads.push_back(bh);
  return heads;
}

namespace {

// Rows (pass 1) and keys (pass 2) per task; any value gives the same numbers up to double rounding.
constexpr int64_t kBlock = 128;

// One head upcast to double once, with the absolute values the error scales need.
struct Head {
  MatD Q, K, V, G;     // G = dO
  MatD Qa, Ka, Ga;     // |Q|, |K|, |dO|
};

Head upcast(const Shape& s, const Inputs& in, const Tensor4& dO, int64_t bh) {
  const int64_t b = bh / s.H, h = bh % s.H;
  Head x{MatD(s.N, s.d), MatD(s.Nk, s.d), MatD(s.Nk, s.d), MatD(s.N, s.d), {}, {}, {}};
  for (int64_t i = 0; i < s.N; ++i)
    for (int64_t c = 0; c < s.d; ++c) { x.Q(i, c) = in.q.at(b, h, i, c); x.G(i, c) = dO.at(b, h, i, c); }
  for (int64_t j = 0; j < s.Nk; ++j)
    for (int64_t c = 0; c < s.d; ++c) { x.K(j, c) = in.k.at(b, s.kv_head(h), j, c); x.V(j, c) = in.v.at(b, s.kv_head(h), j, c); }  // [gqa]
  x.Qa = x.Q.cwiseAbs();
  x.Ka = x.K.cwiseAbs();
  x.Ga = x.G.cwiseAbs();
  return x;
}

// Keys 0 .. visible(s, i) − 1 are visible to query row i (0 when it sees none); [window] from
// first(s, i) on (0 without a window, never past visible(s, i)).
int64_t visible(const Shape& s, int64_t i) { return std::clamp<int64_t>(s.last_visible_key(i) + 1, 0, s.Nk); }
int64_t first(const Shape& s, int64_t i) { return std::min(s.first_visible_key(i), visible(s, i)); }

}  // namespace

// Two passes, as FlashAttention's backward is organized, so that no task holds more than a block of
// rows (or keys) times N (or Nk) and every output element is written by exactly one task — the
// result does not depend on the number of threads, and no partial sums need reducing:
//   pass 1, over blocks of query rows:  S, P (with the row's L), O = P V, D, D̂, dP, dS  ->  dQ, dq_mag
//   pass 2, over blocks of keys:        S, P = exp(S − L), dP, dS (with pass 1's D, D̂)  ->  dK, dV, mags
// Pass 2 recomputes S for its keys (as the GPU kernels do) instead of keeping P between the passes.
void require_heads(const Shape& s, const std::vector<int64_t>& heads, const char* who) {
  for (size_t x = 0; x < heads.size(); ++x)
    if (heads[x] < 0 || heads[x] >= s.B * s.H || (x > 0 && heads[x] <= heads[x - 1]))
      throw std::invalid_argument(std::string(who) + ": heads must be ascending, distinct and in [0, B·H)");
}

// [gqa] The query heads whose contributions dK and dV of `heads` need: every head of each listed
// head's group (b, h / G·G .. + G − 1), ascending; `heads` itself without GQA.
std::vector<int64_t> group_heads(const Shape& s, const std::vector<int64_t>& heads) {
  const int64_t G = s.H / s.hkv();
  std::vector<int64_t> all;
  for (int64_t bh : heads)
    for (int64_t x = bh - (bh % s.H) % G, k = 0; k < G; ++k) all.push_back(x + k);
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  return all;
}

GroupAt group_at(const Shape& s, const std::vector<int64_t>& all, int64_t bh) {
  const int64_t G = s.H / s.hkv();
  return {std::lower_bound(all.begin(), all.end(), bh) - all.begin(),
          std::lower_bound(all.begin(), all.end(), bh - (bh % s.H) % G) - all.begin()};
}

namespace {
Gradients backward_per_head(const Shape& s, const Inputs& in, const Tensor4& dO, const std::vector<int64_t>& heads);
}

// [gqa] dQ is per query head; dK and dV of a key/value head are the sums of its group's query
// heads' contributions: each listed head gets its key/value head's whole sum (a head of the group
// that is not listed contributes too). [window] The band's keys alone, in both passes.
Gradients reference_backward(const Shape& s, const Inputs& in, const Tensor4& dO, const std::vector<int64_t>& heads) {
  require_heads(s, heads, "reference_backward");
  if (s.hkv() == s.H) return backward_per_head(s, in, dO, heads);
  const std::vector<int64_t> all = group_heads(s, heads);
  const Gradients p = backward_per_head(s, in, dO, all);
  const int64_t G = s.H / s.hkv(), N = s.N, Nk = s.Nk, d = s.d;
  Gradients g;
  g.heads = heads;
  g.N = N;
  g.Nk = Nk;
  g.d = d;
  for (int64_t bh : heads) {
    const auto [at, g0] = group_at(s, all, bh);
    auto rows = [&](const std::vector<double>& v, int64_t hi, int64_t n) { return v.begin() + hi * n; };
    g.dq.insert(g.dq.end(), rows(p.dq, at, N * d), rows(p.dq, at + 1, N * d));
    g.dq_mag.insert(g.dq_mag.end(), rows(p.dq_mag, at, N * d), rows(p.dq_mag, at + 1, N * d));
    g.D.insert(g.D.end(), rows(p.D, at, N), rows(p.D, at + 1, N));
    for (auto [src, dst] : {std::pair{&p.dk, &g.dk}, {&p.dv, &g.dv}, {&p.dk_mag, &g.dk_mag}, {&p.dv_mag, &g.dv_mag}}) {
      const std::vector<double> sum = group_sum(*src, g0, G, Nk * d);
      dst->insert(dst->end(), sum.begin(), sum.end());
    }
  }
  return g;
}

namespace {
// Every listed head's own gradients: dQ, and its contributions to dK and dV.
Gradients backward_per_head(const Shape& s, const Inputs& in, const Tensor4& dO, const std::vector<int64_t>& heads) {
  const int64_t nh = static_cast<int64_t>(heads.size()), N = s.N, Nk = s.Nk, d = s.d;
  Gradients g;
  g.heads = heads;
  g.N = N;
  g.Nk = Nk;
  g.d = d;
  g.dq.assign(static_cast<size_t>(nh * N * d), 0.0);
  g.dk.assign(static_cast<size_t>(nh * Nk * d), 0.0);
  g.dv.assign(static_cast<size_t>(nh * Nk * d), 0.0);
  g.dq_mag = g.dq;
  g.dk_mag = g.dk;
  g.dv_mag = g.dv;
  g.D.assign(static_cast<size_t>(nh * N), 0.0);
  const double scale = s.softmax_scale();
  const double inf = std::numeric_limits<double>::infinity();
  const DropoutMask drop(s);

  std::vector<Head> hd(static_cast<size_t>(nh));
  parallel_for(nh, [&](int64_t hi) { hd[static_cast<size_t>(hi)] = upcast(s, in, dO, heads[static_cast<size_t>(hi)]); });
  std::vector<double> L(static_cast<size_t>(nh * N), inf), Dhat(static_cast<size_t>(nh * N), 0.0);

  // Pass 1: a block of query rows [i0, i1) against the keys any of them sees, [0, nk).
  const int64_t row_blocks = (N + kBlock - 1) / kBlock;
  parallel_for(nh * row_blocks, [&](int64_t t) {
    const int64_t hi = t / row_blocks, i0 = (t % row_blocks) * kBlock, i1 = std::min(N, i0 + kBlock), R = i1 - i0;
    const Head& x = hd[static_cast<size_t>(hi)];
    const int64_t bh = heads[static_cast<size_t>(hi)];
    const int64_t nk = visible(s, i1 - 1);  // the block's last row sees the most keys
    if (nk == 0) return;                    // no row sees a key: dQ = 0, D = 0, L = +inf
    // [window] Row r sees keys first(r) .. visible(r) − 1 of [0, nk); P = 0 left of them.
    const auto Kb = x.K.topRows(nk), Vb = x.V.topRows(nk);
    const auto Gb = x.G.middleRows(i0, R);
    MatD P = scale * (x.Q.middleRows(i0, R) * Kb.transpose());  // S, then P in place
    for (int64_t r = 0; r < R; ++r) {
      const int64_t nv = visible(s, i0 + r), f = first(s, i0 + r);
      if (nv == f) { P.row(r).setZero(); continue; }  // L stays +inf
      const double m = P.row(r).segment(f, nv - f).maxCoeff();
      double l = 0.0;
      for (int64_t j = f; j < nv; ++j) l += (P(r, j) = std::exp(P(r, j) - m));
      P.row(r).segment(f, nv - f) /= l;
      P.row(r).head(f).setZero();
      P.row(r).tail(nk - nv).setZero();
      L[static_cast<size_t>(hi * N + i0 + r)] = m + std::log(l);
    }
    MatD Z;  // [dropout] Z of the block's visible weights (0 elsewhere); unused without dropout
    if (drop.on) {
      Z.setZero(R, nk);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t j = first(s, i0 + r); j < visible(s, i0 + r); ++j) Z(r, j) = drop.z(bh, i0 + r, j);
    }
    const MatD O = drop.on ? MatD(P.cwiseProduct(Z) * Vb) : MatD(P * Vb);  // [R, d]
    MatD dS = Gb * Vb.transpose();  // dP, then dS in place
    MatD Shat(R, nk);
    for (int64_t r = 0; r < R; ++r) {
      const size_t at = static_cast<size_t>(hi * N + i0 + r);
      const double D = Gb.row(r).dot(O.row(r)), Dh = Gb.row(r).cwiseAbs().dot(O.row(r).cwiseAbs());
      g.D[at] = D;
      Dhat[at] = Dh;
      for (int64_t j = 0; j < nk; ++j) {
        if (drop.on) dS(r, j) *= Z(r, j);  // dP = (dO Vᵀ) ∘ Z
        dS(r, j) = P(r, j) * (dS(r, j) - D);
        Shat(r, j) = std::fabs(dS(r, j)) + P(r, j) * Dh;
      }
    }
    const MatD dQ = scale * (dS * Kb), dQmag = scale * (Shat * x.Ka.topRows(nk));
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < d; ++c) {
        g.dq[g.q_index(hi, i0 + r, c)] = dQ(r, c);
        g.dq_mag[g.q_index(hi, i0 + r, c)] = dQmag(r, c);
      }
  });

  // Pass 2: a block of keys [j0, j1) against the query rows that see any of them, [r0, N).
  const int64_t key_blocks = (Nk + kBlock - 1) / kBlock;
  parallel_for(nh * key_blocks, [&](int64_t t) {
    const int64_t hi = t / key_blocks, j0 = (t % key_blocks) * kBlock, j1 = std::min(Nk, j0 + kBlock), C = j1 - j0;
    const Head& x = hd[static_cast<size_t>(hi)];
    const int64_t bh = heads[static_cast<size_t>(hi)];
    const int64_t r0 = s.causal ? std::clamp<int64_t>(j0 - (Nk - N), 0, N) : 0, R = N - r0;
    if (R == 0) return;  // no row sees these keys: dK = dV = 0
    const auto Kb = x.K.middleRows(j0, C), Vb = x.V.middleRows(j0, C);
    const auto Gb = x.G.middleRows(r0, R);
    MatD P = scale * (x.Q.middleRows(r0, R) * Kb.transpose());  // S, then P = exp(S − L) in place
    MatD dS = Gb * Vb.transpose();                               // dP, then dS in place
    MatD Shat(R, C);
    MatD PZ;  // [dropout] P ∘ Z, the weights dV sees; P itself without dropout
    if (drop.on) PZ.setZero(R, C);
    for (int64_t r = 0; r < R; ++r) {
      const size_t at = static_cast<size_t>(hi * N + r0 + r);
      const int64_t nv = visible(s, r0 + r), f = first(s, r0 + r);
      const double D = g.D[at], Dh = Dhat[at];
      for (int64_t c = 0; c < C; ++c) {
        const bool seen = j0 + c < nv && j0 + c >= f;  // [window] f = 0 without one
        P(r, c) = seen ? std::exp(P(r, c) - L[at]) : 0.0;
        if (drop.on && seen) {
          const double z = drop.z(bh, r0 + r, j0 + c);
          PZ(r, c) = P(r, c) * z;
          dS(r, c) *= z;  // dP = (dO Vᵀ) ∘ Z
        }
        dS(r, c) = P(r, c) * (dS(r, c) - D);
        Shat(r, c) = std::fabs(dS(r, c)) + P(r, c) * Dh;
      }
    }
    const MatD& Pd = drop.on ? PZ : P;
    const MatD dV = Pd.transpose() * Gb, dVmag = Pd.transpose() * x.Ga.middleRows(r0, R);
    const MatD dK = scale * (dS.transpose() * x.Q.middleRows(r0, R));
    const MatD dKmag = scale * (Shat.transpose() * x.Qa.middleRows(r0, R));
    for (int64_t c = 0; c < C; ++c)
      for (int64_t k = 0; k < d; ++k) {
        const size_t at = g.kv_index(hi, j0 + c, k);
        g.dv[at] = dV(c, k);
        g.dv_mag[at] = dVmag(c, k);
        g.dk[at] = dK(c, k);
        g.dk_mag[at] = dKmag(c, k);
      }
  });
  return g;
}
}  // namespace

}  // namespace fa
