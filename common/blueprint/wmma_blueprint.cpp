#include "blueprint/wmma_blueprint.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernel/causal.hpp"

namespace fa::wmma_bp {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
}  // namespace

float rescale_factor(float m_old, float m_new) { return m_old == -kInf ? 0.0f : std::exp(m_old - m_new); }

// ---- split-K (steps 03, 04, 05 --split k) --------------------------------------------------------

SplitKBlock make_split_k_block(const Layout& sc, const Shape& s, Smem& smem) {
  const Store st = Store::of(s.dtype), f32 = Store::f32();
  const int64_t d = s.d, W = sc.warps();
  SplitKBlock blk{smem.tile(sc.Br, d, d + sc.pad, st),  smem.tile(sc.Bc, d, d + sc.pad, st), smem.tile(sc.Bc, d, d + sc.pad, st),
          smem.tile(sc.Br, sc.Bc, sc.Bc + sc.pad_s, f32), smem.overlay(sc.Br, sc.Bc, st),  // P over S's rows
          smem.tile(sc.Br, d, d + sc.pad_o, f32),      smem.tile(1, sc.Br, f32),           smem.tile(1, sc.Br, f32),
          smem.tile(1, sc.Br, f32),                 smem.tile(1, sc.Br, f32),           smem.tile(1, sc.Br, f32),
          smem.tile(W, sc.Br, f32),                 smem.tile(W, sc.Br, f32)};
  return blk;
}

// [tile-update] One (Q tile i, K/V tile j) pair: S_ij, the split-K softmax update, O_i += P_ij V_j
// merged warp by warp, and the per-iteration normalization O_i /= l_i. Q_i, O_i, m_i, l_i are in
// shared memory on entry and on exit.
void split_k_update(const Layout& sc, const Shape& s, SplitKBlock& blk, int64_t i0, int64_t j0, Ledger& led) {
  const int64_t d = s.d, W = sc.warps();
  const float scale = static_cast<float>(s.softmax_scale());
  // S_ij = scale · Q_i K_jᵀ: warp w computes the Br × 16 slice of keys [16w, 16w + 16).
  for (int64_t w = 0; w < W; ++w)
    for (int64_t rf = 0; rf < sc.Br / 16; ++rf) {
      Frag16 acc;
      for (int64_t kk = 0; kk < d; kk += 16) mma(acc, load_frag(blk.Qs, 16 * rf, kk), load_frag_transposed(blk.Ks, 16 * w, kk), led);
      store_frag(blk.Ss, 16 * rf, 16 * w, acc, [&](float x) { return x * scale; });
      led.nonmatmul_ops += 16 * 16;
    }
  // Pass 1 (lane r of warp w: row r, keys 16w..16w+15): mask, partial row max -> redm[w][r].
  for (int64_t w = 0; w < W; ++w)
    for (int64_t r = 0; r < sc.Br; ++r) {
      float m = -kInf;
      for (int64_t c = 16 * w; c < 16 * w + 16; ++c) {
        const int64_t i = i0 + r, j = j0 + c;
        const bool visible = j < s.Nk && j < visible_keys(i, s.N, s.Nk, s.causal);  // [causal-mask]
        const float x = visible ? blk.Ss.read(r, c) : (blk.Ss.read(r, c), -kInf);  // every element is read
        blk.Ss.write(r, c, x);
        m = std::max(m, x);
      }
      led.nonmatmul_ops += 2 * 16;
      blk.redm.write(w, r, m);
    }
  barrier(led);
  // Row statistics 1 (thread r < Br): m_new = max(m_i, max_w redm[w][r]), alpha = exp(m_i - m_new).
  for (int64_t r = 0; r < sc.Br; ++r) {
    float m = blk.mi.read(0, r);
    const float m_old = m;
    for (int64_t w = 0; w < W; ++w) m = std::max(m, blk.redm.read(w, r));
    blk.mnew.write(0, r, m);
    blk.cold.write(0, r, rescale_factor(m_old, m));  // alpha for now; times l_i below
    led.nonmatmul_ops += W + 3;
    led.exps += m_old == -kInf ? 0 : 1;  // [rescale-guard]: no exp on a row's first tile
  }
  barrier(led);
  // Pass 2a: each lane reads its 16 values of S into registers (P is about to overwrite S's rows).
  std::vector<float> sreg(static_cast<size_t>(W * sc.Br * 16));
  std::vector<float> mreg(static_cast<size_t>(W * sc.Br));
  for (int64_t w = 0; w < W; ++w)
    for (int64_t r = 0; r < sc.Br; ++r) {
      for (int64_t c = 0; c < 16; ++c) sreg[static_cast<size_t>((w * sc.Br + r) * 16 + c)] = blk.Ss.read(r, 16 * w + c);
      mreg[static_cast<size_t>(w * sc.Br + r)] = blk.mnew.read(0, r);
    }
  barrier(led);
  // Pass 2b: P = exp(S - m_new) in the storage type (0 where m_new = -inf), partial sums -> redl[w][r].
  for (int64_t w = 0; w < W; ++w)
    for (int64_t r = 0; r < sc.Br; ++r) {
      const float m = mreg[static_cast<size_t>(w * sc.Br + r)];
      float l = 0.0f;
      for (int64_t c = 0; c < 16; ++c) {
        const float p = m == -kInf ? 0.0f : std::exp(sreg[static_cast<size_t>((w * sc.Br + r) * 16 + c)] - m);
        blk.Ps.write(r, 16 * w + c, p);
        l += p;
      }
      led.nonmatmul_ops += 3 * 16;
      led.exps += m == -kInf ? 0 : 16;  // masked entries too (exp(−inf) = 0), unless the row saw no key
      blk.redl.write(w, r, l);
    }
  barrier(led);
  // Row statistics 2 (thread r): l_new = alpha·l_i + Σ_w redl[w][r]; the old O is scaled by alpha·l_i.
  for (int64_t r = 0; r < sc.Br; ++r) {
    const float alpha = blk.cold.read(0, r), li = blk.li.read(0, r);
    float l = alpha * li;
    for (int64_t w = 0; w < W; ++w) l += blk.redl.read(w, r);
    blk.lnew.write(0, r, l);
    blk.cold.write(0, r, alpha * li);
    led.nonmatmul_ops += W + 2;
  }
  barrier(led);
  // [rescale-o] O_i *= alpha·l_i: back from "normalized by l_i at m_i" to "unnormalized at m_new".
  for (int64_t r = 0; r < sc.Br; ++r)
    for (int64_t c = 0; c < d; ++c) blk.Os.write(r, c, blk.Os.read(r, c) * blk.cold.read(0, r));
  led.nonmatmul_ops += sc.Br * d;
  barrier(led);
  // [merge-rounds] Split-K: warp w adds P_ij[:, its keys] · V_j[its keys, :] onto O_i, one warp at a
  // time (the accumulator fragments are loaded from and stored back to shared memory).
  for (int64_t w = 0; w < W; ++w) {
    for (int64_t rf = 0; rf < sc.Br / 16; ++rf) {
      const Frag16 a = load_frag(blk.Ps, 16 * rf, 16 * w);
      for (int64_t n = 0; n < d / 16; ++n) {
        Frag16 acc = load_frag(blk.Os, 16 * rf, 16 * n);
        mma(acc, a, load_frag(blk.Vs, 16 * w, 16 * n), led);
        store_frag(blk.Os, 16 * rf, 16 * n, acc, [](float x) { return x; });
      }
    }
    barrier(led);
  }
  // [normalize] Per-iteration normalization (FlashAttention-1): O_i /= l_new; then m_i, l_i advance.
  for (int64_t r = 0; r < sc.Br; ++r)
    for (int64_t c = 0; c < d; ++c) {
      const float l = blk.lnew.read(0, r), o = blk.Os.read(r, c);
      blk.Os.write(r, c, l > 0.0f ? o / l : 0.0f);  // a row with no visible key yet stays 0
    }
  led.nonmatmul_ops += sc.Br * d;
  for (int64_t r = 0; r < sc.Br; ++r) {
    blk.mi.write(0, r, blk.mnew.read(0, r));
    blk.li.write(0, r, blk.lnew.read(0, r));
  }
  barrier(led);
}

// ---- split-Q with deferred normalization (steps 06, 07) ------------------------------------------

DeferredBlock make_deferred_block(const Layout& sc, const Shape& s, Smem& smem) {
  const Store st = Store::of(s.dtype), f32 = Store::f32();
  const int64_t d = s.d;
  DeferredBlock blk{smem.tile(sc.Br, d, d + sc.pad, st),  smem.tile(sc.Bc, d, d + sc.pad, st), smem.tile(sc.Bc, d, d + sc.pad, st),
          smem.tile(sc.Br, sc.Bc, sc.Bc + sc.pad_s, f32), smem.overlay(sc.Br, sc.Bc, st),  // P over S's rows
          smem.tile(sc.Br, d, d + sc.pad_o, f32),      smem.tile(1, sc.Br, f32),           smem.tile(1, sc.Br, f32),
          smem.tile(1, sc.Br, f32)};
  return blk;
}

// [tile-update] One (Q tile i, K/V tile j) pair, split by rows (step 05): warp w owns rows
// [16w, 16w + 16) and all Bc keys; two lanes share a row. Õ is rescaled by alpha = exp(m_old − m_new)
// and accumulates P·V — and is not divided by l here.
RowStats deferred_stats(float m_old, float l_old, float m_new, float tile_sum) {
  const float alpha = rescale_factor(m_old, m_new);
  return {alpha, m_new, alpha * l_old + tile_sum};
}

void deferred_update(const Layout& sc, const Shape& s, DeferredBlock& blk, int64_t i0, int64_t j0, bool masked, Ledger& led,
                     DeferredStats stats) {
  const int64_t d = s.d, W = sc.warps(), half = sc.Bc / 2;
  const float scale = static_cast<float>(s.softmax_scale());
  for (int64_t w = 0; w < W; ++w) {
    // S for the warp's 16 rows: Bc/16 fragments.
    for (int64_t n = 0; n < sc.Bc / 16; ++n) {
      Frag16 acc;
      for (int64_t kk = 0; kk < d; kk += 16) mma(acc, load_frag(blk.Qs, 16 * w, kk), load_frag_transposed(blk.Ks, 16 * n, kk), led);
      store_frag(blk.Ss, 16 * w, 16 * n, acc, [&](float x) { return x * scale; });
      led.nonmatmul_ops += 16 * 16;
    }
    // The row pass, lane by lane: lane t holds row 16w + t/2, keys [(t%2)·Bc/2, (t%2 + 1)·Bc/2).
    std::vector<float> sv(static_cast<size_t>(32 * half)), mpart(32), lpart(32), mold(32), lold(32);
    for (int t = 0; t < 32; ++t) {
      const int64_t r = 16 * w + t / 2, c0 = (t % 2) * half;
      const int64_t nv = visible_keys(i0 + r, s.N, s.Nk, s.causal);  // [causal-mask], diagonal tiles only
      float m = -kInf;
      for (int64_t c = 0; c < half; ++c) {
        float v = blk.Ss.read(r, c0 + c);
        if (masked && j0 + c0 + c >= nv) v = -kInf;
        sv[static_cast<size_t>(t * half + c)] = v;
        m = std::max(m, v);
      }
      mpart[static_cast<size_t>(t)] = m;
      mold[static_cast<size_t>(t)] = blk.mi.read(0, r);
      lold[static_cast<size_t>(t)] = blk.li.read(0, r);
    }
    led.nonmatmul_ops += (masked ? 2 : 1) * 16 * sc.Bc;  // max, and the mask test where needed
    for (int t = 0; t < 32; ++t) {  // (after a __syncwarp) P over S's rows, partial sums
      const int64_t r = 16 * w + t / 2, c0 = (t % 2) * half;
      const float m_new = std::max(mold[static_cast<size_t>(t)], std::max(mpart[static_cast<size_t>(t)], mpart[static_cast<size_t>(t ^ 1)]));
      float l = 0.0f;
      for (int64_t c = 0; c < half; ++c) {
        const float p = m_new == -kInf ? 0.0f : std::exp(sv[static_cast<size_t>(t * half + c)] - m_new);
        blk.Ps.write(r, c0 + c, p);
        l += p;
      }
      lpart[static_cast<size_t>(t)] = l;
      led.exps += m_new == -kInf ? 0 : half;  // masked entries too (exp(−inf) = 0), unless the row saw no key
    }
    led.nonmatmul_ops += 3 * 16 * sc.Bc;
    for (int t = 0; t < 32; t += 2) {  // lane 2q writes its row's statistics
      const int64_t r = 16 * w + t / 2;
      const float m_old = mold[static_cast<size_t>(t)], l_old = lold[static_cast<size_t>(t)];
      const float m_new = std::max(m_old, std::max(mpart[static_cast<size_t>(t)], mpart[static_cast<size_t>(t + 1)]));
      const RowStats rs = stats(m_old, l_old, m_new, lpart[static_cast<size_t>(t)] + lpart[static_cast<size_t>(t + 1)]);
      blk.cold.write(0, r, rs.alpha);  // [deferred] Õ moves to the new maximum; no l in it
      blk.mi.write(0, r, rs.m);
      blk.li.write(0, r, rs.l);
      led.nonmatmul_ops += 5;
      led.exps += m_old == -kInf ? 0 : 1;  // [rescale-guard]: no exp on a row's first tile
    }
    // [rescale-o] the warp's rows of Õ *= alpha.
    for (int64_t r = 16 * w; r < 16 * w + 16; ++r)
      for (int64_t c = 0; c < d; ++c) blk.Os.write(r, c, blk.Os.read(r, c) * blk.cold.read(0, r));
    led.nonmatmul_ops += 16 * d;
    // Õ[rows] += P[rows, :] · V_j: the P fragments once, then each output fragment in turn.
    std::vector<Frag16> a;
    for (int64_t kk = 0; kk < sc.Bc; kk += 16) a.push_back(load_frag(blk.Ps, 16 * w, kk));
    for (int64_t n = 0; n < d / 16; ++n) {
      Frag16 acc = load_frag(blk.Os, 16 * w, 16 * n);
      for (int64_t kk = 0; kk < sc.Bc / 16; ++kk) mma(acc, a[static_cast<size_t>(kk)], load_frag(blk.Vs, 16 * kk, 16 * n), led);
      store_frag(blk.Os, 16 * w, 16 * n, acc, [](float x) { return x; });
    }
  }
  barrier(led);
}

}  // namespace fa::wmma_bp
