// Step 03 — the blueprint: kernel.cu's K/V-outer FlashAttention-1 loop as CPU loops.
//
// One block per (b, h); for each K/V tile j, for each Q tile i, the block's warps (lanes, fragments,
// barriers) do what the kernel does, through the counting views. O_i, m_i and l_i go to HBM and
// back between outer iterations, so the ledger shows FlashAttention-1's extra traffic.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "schedule.hpp"

namespace fa::step03 {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// [rescale-guard] exp(m_old - m_new), 0 when nothing has been seen (both -inf).
float rescale_factor(float m_old, float m_new) { return m_old == -kInf ? 0.0f : std::exp(m_old - m_new); }

struct Block {  // one thread block's shared memory (the kernel's __shared__ arrays)
  SmemTile Qs, Ks, Vs, Ss, Ps, Os, mi, li, mnew, lnew, cold, redm, redl;
};

Block make_block(const Schedule& sc, const Shape& s, Smem& smem) {
  const Store st = Store::of(s.dtype), f32 = Store::f32();
  const int64_t d = s.d, W = sc.warps();
  Block k{smem.tile(sc.Br, d, d + kPad, st),  smem.tile(sc.Bc, d, d + kPad, st), smem.tile(sc.Bc, d, d + kPad, st),
          smem.tile(sc.Br, sc.Bc, sc.Bc + kPadS, f32), smem.overlay(sc.Br, sc.Bc, st),  // P over S's rows
          smem.tile(sc.Br, d, d + kPadO, f32),      smem.tile(1, sc.Br, f32),           smem.tile(1, sc.Br, f32),
          smem.tile(1, sc.Br, f32),                 smem.tile(1, sc.Br, f32),           smem.tile(1, sc.Br, f32),
          smem.tile(W, sc.Br, f32),                 smem.tile(W, sc.Br, f32)};
  return k;
}

// [tile-update] One (Q tile i, K/V tile j) pair: S_ij, the split-K softmax update, O_i += P_ij V_j
// merged warp by warp, and the per-iteration normalization O_i /= l_i. Q_i, O_i, m_i, l_i are in
// shared memory on entry and on exit.
void tile_update(const Schedule& sc, const Shape& s, Block& k, int64_t i0, int64_t j0, Ledger& L) {
  const int64_t d = s.d, W = sc.warps();
  const float scale = static_cast<float>(s.softmax_scale());
  // S_ij = scale · Q_i K_jᵀ: warp w computes the Br × 16 slice of keys [16w, 16w + 16).
  for (int64_t w = 0; w < W; ++w)
    for (int64_t rf = 0; rf < sc.Br / 16; ++rf) {
      Frag16 acc;
      for (int64_t kk = 0; kk < d; kk += 16) mma(acc, load_frag(k.Qs, 16 * rf, kk), load_frag_transposed(k.Ks, 16 * w, kk), L);
      store_frag(k.Ss, 16 * rf, 16 * w, acc, [&](float x) { return x * scale; });
      L.nonmatmul_ops += 16 * 16;
    }
  // Pass 1 (lane r of warp w: row r, keys 16w..16w+15): mask, partial row max -> redm[w][r].
  for (int64_t w = 0; w < W; ++w)
    for (int64_t r = 0; r < sc.Br; ++r) {
      float m = -kInf;
      for (int64_t c = 16 * w; c < 16 * w + 16; ++c) {
        const int64_t i = i0 + r, j = j0 + c;
        const bool visible = j < s.Nk && j < visible_keys(i, s.N, s.Nk, s.causal);  // [causal-mask]
        const float x = visible ? k.Ss.read(r, c) : (k.Ss.read(r, c), -kInf);  // every element is read
        k.Ss.write(r, c, x);
        m = std::max(m, x);
      }
      L.nonmatmul_ops += 2 * 16;
      k.redm.write(w, r, m);
    }
  barrier(L);
  // Row statistics 1 (thread r < Br): m_new = max(m_i, max_w redm[w][r]), alpha = exp(m_i - m_new).
  for (int64_t r = 0; r < sc.Br; ++r) {
    float m = k.mi.read(0, r);
    const float m_old = m;
    for (int64_t w = 0; w < W; ++w) m = std::max(m, k.redm.read(w, r));
    k.mnew.write(0, r, m);
    k.cold.write(0, r, rescale_factor(m_old, m));  // alpha for now; times l_i below
    L.nonmatmul_ops += W + 3;
  }
  barrier(L);
  // Pass 2a: each lane reads its 16 values of S into registers (P is about to overwrite S's rows).
  std::vector<float> sreg(static_cast<size_t>(W * sc.Br * 16));
  std::vector<float> mreg(static_cast<size_t>(W * sc.Br));
  for (int64_t w = 0; w < W; ++w)
    for (int64_t r = 0; r < sc.Br; ++r) {
      for (int64_t c = 0; c < 16; ++c) sreg[static_cast<size_t>((w * sc.Br + r) * 16 + c)] = k.Ss.read(r, 16 * w + c);
      mreg[static_cast<size_t>(w * sc.Br + r)] = k.mnew.read(0, r);
    }
  barrier(L);
  // Pass 2b: P = exp(S - m_new) in the storage type (0 where m_new = -inf), partial sums -> redl[w][r].
  for (int64_t w = 0; w < W; ++w)
    for (int64_t r = 0; r < sc.Br; ++r) {
      const float m = mreg[static_cast<size_t>(w * sc.Br + r)];
      float l = 0.0f;
      for (int64_t c = 0; c < 16; ++c) {
        const float p = m == -kInf ? 0.0f : std::exp(sreg[static_cast<size_t>((w * sc.Br + r) * 16 + c)] - m);
        k.Ps.write(r, 16 * w + c, p);
        l += p;
      }
      L.nonmatmul_ops += 3 * 16;
      k.redl.write(w, r, l);
    }
  barrier(L);
  // Row statistics 2 (thread r): l_new = alpha·l_i + Σ_w redl[w][r]; the old O is scaled by alpha·l_i.
  for (int64_t r = 0; r < sc.Br; ++r) {
    const float alpha = k.cold.read(0, r), li = k.li.read(0, r);
    float l = alpha * li;
    for (int64_t w = 0; w < W; ++w) l += k.redl.read(w, r);
    k.lnew.write(0, r, l);
    k.cold.write(0, r, alpha * li);
    L.nonmatmul_ops += W + 2;
  }
  barrier(L);
  // [rescale-o] O_i *= alpha·l_i: back from "normalized by l_i at m_i" to "unnormalized at m_new".
  for (int64_t r = 0; r < sc.Br; ++r)
    for (int64_t c = 0; c < d; ++c) k.Os.write(r, c, k.Os.read(r, c) * k.cold.read(0, r));
  L.nonmatmul_ops += sc.Br * d;
  barrier(L);
  // [merge-rounds] Split-K: warp w adds P_ij[:, its keys] · V_j[its keys, :] onto O_i, one warp at a
  // time (the accumulator fragments are loaded from and stored back to shared memory).
  for (int64_t w = 0; w < W; ++w) {
    for (int64_t rf = 0; rf < sc.Br / 16; ++rf) {
      const Frag16 a = load_frag(k.Ps, 16 * rf, 16 * w);
      for (int64_t n = 0; n < d / 16; ++n) {
        Frag16 acc = load_frag(k.Os, 16 * rf, 16 * n);
        mma(acc, a, load_frag(k.Vs, 16 * w, 16 * n), L);
        store_frag(k.Os, 16 * rf, 16 * n, acc, [](float x) { return x; });
      }
    }
    barrier(L);
  }
  // [normalize] Per-iteration normalization (FlashAttention-1): O_i /= l_new; then m_i, l_i advance.
  for (int64_t r = 0; r < sc.Br; ++r)
    for (int64_t c = 0; c < d; ++c) {
      const float l = k.lnew.read(0, r), o = k.Os.read(r, c);
      k.Os.write(r, c, l > 0.0f ? o / l : 0.0f);  // a row with no visible key yet stays 0
    }
  L.nonmatmul_ops += sc.Br * d;
  for (int64_t r = 0; r < sc.Br; ++r) {
    k.mi.write(0, r, k.mnew.read(0, r));
    k.li.write(0, r, k.lnew.read(0, r));
  }
  barrier(L);
}

}  // namespace

BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sc) {
  BlueprintResult res;
  res.out.o = Tensor4(s.B, s.H, s.N, s.d);
  res.out.lse = Tensor4(s.B, s.H, s.N, 1);
  Ledger& L = res.ledger["kv_outer"];
  L.workspace = o_acc_bytes(s) + 2 * stats_bytes(s);
  const Store st = Store::of(s.dtype), f32 = Store::f32();
  const int64_t d = s.d, Tc = num_tiles(s.Nk, sc.Bc), Tr = num_tiles(s.N, sc.Br);
  std::vector<float> oacc(static_cast<size_t>(s.N * d)), mws(static_cast<size_t>(s.N)), lws(static_cast<size_t>(s.N));

  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {  // [kv-outer] one block per (b, h)
      const GlobalMat Q(in.q.head(b, h), s.N, d, d, st, L), K(in.k.head(b, h), s.Nk, d, d, st, L),
          V(in.v.head(b, h), s.Nk, d, d, st, L);
      GlobalMat O(res.out.o.head(b, h), s.N, d, d, st, L), Lse(res.out.lse.head(b, h), 1, s.N, s.N, f32, L);
      GlobalMat Oacc(oacc.data(), s.N, d, d, f32, L), M(mws.data(), 1, s.N, s.N, f32, L), Lw(lws.data(), 1, s.N, s.N, f32, L);
      Smem smem(kSmemBudget, L);
      Block k = make_block(sc, s, smem);
      for (int64_t j = 0; j < Tc; ++j) {
        const int64_t j0 = j * sc.Bc;
        k.Ks.load_from(K, j0, 0);  // K_j, V_j: loaded once per outer iteration
        k.Vs.load_from(V, j0, 0);
        barrier(L);
        for (int64_t i = 0; i < Tr; ++i) {
          const int64_t i0 = i * sc.Br, rows = std::min<int64_t>(sc.Br, s.N - i0);
          k.Qs.load_from(Q, i0, 0);  // Q_i: re-read for every K/V tile
          if (j == 0) {              // first visit: O_i = 0, m_i = -inf, l_i = 0 (nothing read)
            for (int64_t r = 0; r < sc.Br; ++r) {
              for (int64_t c = 0; c < d; ++c) k.Os.write(r, c, 0.0f);
              k.mi.write(0, r, -kInf);
              k.li.write(0, r, 0.0f);
            }
          } else {                   // [hbm-state] O_i, m_i, l_i come back from HBM
            k.Os.load_from(Oacc, i0, 0);
            k.mi.load_from(M, 0, i0);
            k.li.load_from(Lw, 0, i0);
          }
          barrier(L);
          tile_update(sc, s, k, i0, j0, L);
          L.tiles_computed += 1;
          L.tiles_masked += classify_tile(i0, i0 + rows, j0, std::min(j0 + sc.Bc, s.Nk), s.N, s.Nk, s.causal) !=
                            TileKind::Visible;
          if (j + 1 < Tc) {          // ... and go back to HBM
            k.Os.store_to(Oacc, i0, 0);
            k.mi.store_to(M, 0, i0);
            k.li.store_to(Lw, 0, i0);
          } else {                   // the last K/V tile: O in the storage type, L = m + log(l)
            k.Os.store_to(O, i0, 0);
            for (int64_t r = 0; r < rows; ++r) {
              const float m = k.mi.read(0, r), l = k.li.read(0, r);
              Lse.store(0, i0 + r, l > 0.0f ? m + std::log(l) : kInf);
            }
            L.nonmatmul_ops += 2 * rows;
          }
          barrier(L);
        }
      }
    }
  return res;
}

// The ledger in closed form (docs/03_fa1_kv_outer.md derives each line). One (b, h):
// Tc = ⌈Nk/Bc⌉ K/V tiles, Tr = ⌈N/Br⌉ Q tiles, W = Bc/16 warps; every pair (i, j) is visited.
LedgerSet closed_form(const Shape& s, const Schedule& sc) {
  const int64_t BH = s.B * s.H, N = s.N, Nk = s.Nk, d = s.d, W = sc.warps(), Br = sc.Br, Bc = sc.Bc;
  const int64_t Tc = num_tiles(Nk, Bc), Tr = num_tiles(N, Br), pairs = Tc * Tr, R = Br / 16;
  const int64_t frag2 = 16 * 16 * 2, frag4 = 16 * 16 * 4, flops = 2 * 16 * 16 * 16;
  LedgerSet ls;
  Ledger& l = ls["kv_outer"];
  // HBM: K, V once; Q once per K/V tile; O_i, m_i, l_i read on visits 2..Tc, written on 1..Tc-1.
  l.hbm_read = BH * (2 * Nk * d * 2 + Tc * N * d * 2 + (Tc - 1) * N * (d * 4 + 8));
  l.hbm_write = BH * ((Tc - 1) * N * (d * 4 + 8) + N * d * 2 + N * 4);
  // Shared memory, per pair (i, j): the loads, S, the two passes, statistics, rescale, merge, normalize.
  const int64_t w_pair = Br * d * 2 + Br * d * 4 + 2 * Br * 4          // Q_i, O_i, m_i, l_i (or their init)
                         + Br * Bc * 4                                    // S fragments stored
                         + Br * Bc * 4 + W * Br * 4                       // pass 1: masked S, partial maxima
                         + 2 * Br * 4                                     // m_new, alpha
                         + Br * Bc * 2 + W * Br * 4                       // pass 2: P, partial sums
                         + 2 * Br * 4                                     // l_new, alpha·l_i
                         + Br * d * 4                                     // rescale O
                         + W * R * (d / 16) * frag4                       // merge: accumulators stored
                         + Br * d * 4 + 2 * Br * 4;                       // normalize, m_i/l_i advance
  const int64_t r_pair = W * R * (d / 16) * 2 * frag2                     // S: Q and K fragments
                         + Br * Bc * 4                                    // pass 1: S
                         + Br * (W + 1) * 4                               // statistics 1
                         + Br * Bc * 4 + W * Br * 4                       // pass 2a: S and m_new into registers
                         + Br * (W + 2) * 4                               // statistics 2
                         + 2 * Br * d * 4                                 // rescale O (O and alpha·l_i)
                         + W * R * (frag2 + (d / 16) * (frag4 + frag2))   // merge: P, O and V fragments
                         + 2 * Br * d * 4 + 2 * Br * 4;                   // normalize (O and l_new), advance
  l.smem_write = BH * (Tc * 2 * Bc * d * 2 + pairs * w_pair);
  // Reads behind the write-backs: O_i, m_i, l_i (rows < N) on visits 1..Tc-1; O and m, l on the last.
  l.smem_read = BH * (pairs * r_pair + (Tc - 1) * N * (d * 4 + 8) + N * (d * 4 + 8));
  l.barriers = BH * (Tc + pairs * (2 + 7 + W));  // after the loads and at the end; 7 + W inside tile_update
  l.matmul_flops = BH * pairs * W * R * (d / 16) * 2 * flops;
  l.nonmatmul_ops = BH * (pairs * (Br * Bc + 2 * Br * Bc + Br * (W + 3) + 3 * Br * Bc + Br * (W + 2) + 2 * Br * d) + 2 * N);
  l.tiles_computed = BH * pairs;
  l.tiles_masked = BH * tiles_with_masked_entries(N, Nk, Br, Bc, s.causal);
  l.smem_peak = smem_bytes(sc, int(d));
  l.workspace = o_acc_bytes(s) + 2 * stats_bytes(s);
  return ls;
}

namespace {
BlueprintResult run_blueprint(const Shape& s, const Inputs& in, const StepOptions&) { return blueprint(s, in, kSchedule); }
LedgerSet run_closed_form(const Shape& s, const StepOptions&) { return closed_form(s, kSchedule); }
}  // namespace

const StepInfo& info() {
  static const StepInfo step = [] {
    StepInfo i;
    i.id = "03";
    i.slug = "fa1_kv_outer";
    i.title = "FlashAttention-1 tiling: K/V tiles outer, Q tiles inner, O, m, l through HBM";
    i.teaches = "tiles in SRAM; Q, O, m, l re-read per K/V tile";
    i.blueprint = run_blueprint;
    i.closed_form = run_closed_form;
#ifdef FA_HAVE_CUDA
    i.launch = launch;
    i.workspace_bytes = workspace_bytes;
#endif
    i.kernel_prefix = "step03_";
    return i;
  }();
  return step;
}

}  // namespace fa::step03
