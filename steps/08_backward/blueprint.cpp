// Step 08 — the blueprint: kernel.cu's two backward schedules as CPU loops, counting their ledgers.
// The forward is step 07's (its blueprint, closed form and kernel are registered here as well).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "schedule.hpp"

namespace fa::step07 {
const StepInfo& info();
}

namespace fa::step08 {

bool naive(const StepOptions& o) {
  const auto it = o.find("bwd");
  return it != o.end() && it->second == "naive";
}
bool stored(const StepOptions& o) {
  const auto it = o.find("bwd");
  return it != o.end() && it->second == "stored";
}

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kFrag2 = 16 * 16 * 2, kFrag4 = 16 * 16 * 4, kFragFlops = 2 * 16 * 16 * 16;

Grads empty_grads(const Shape& s) {
  return {Tensor4(s.B, s.H, s.N, s.d), Tensor4(s.B, s.H, s.Nk, s.d), Tensor4(s.B, s.H, s.Nk, s.d)};
}

}  // namespace

// ================================ fused ==========================================================

BackwardBlueprintResult blueprint_fused(const Shape& s, const Inputs& in, const Forward& fwd, const Tensor4& dO,
                                        const Schedule& sc) {
  BackwardBlueprintResult res;
  res.grads = empty_grads(s);
  res.ledger.kernels.reserve(3);  // references into the set stay valid
  Ledger& Lpre = res.ledger["bwd_pre"];
  Ledger& Lkv = res.ledger["bwd_kv"];
  Ledger& Lcv = res.ledger["dq_convert"];
  const Store st = Store::of(s.dtype), f32 = Store::f32();
  const int64_t d = s.d, BH = s.B * s.H, Tr = num_tiles(s.N, sc.Br), Tc = num_tiles(s.Nk, sc.Bc);
  const float scale = static_cast<float>(s.softmax_scale());
  std::vector<float> Dw(static_cast<size_t>(BH * s.N)), acc(static_cast<size_t>(BH * s.N * d));
  Lpre.workspace = fused_workspace(BH, s.N, d);

  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t bh = b * s.H + h;
      float* Dh = Dw.data() + bh * s.N;
      float* acch = acc.data() + bh * s.N * d;
      // [pre] D_i = Σ_c dO_ic·O_ic; the dQ accumulator set to 0.
      {
        const GlobalMat O(fwd.o.head(b, h), s.N, d, d, st, Lpre), G(dO.head(b, h), s.N, d, d, st, Lpre);
        GlobalMat Dg(Dh, 1, s.N, s.N, f32, Lpre), A(acch, s.N, d, d, f32, Lpre);
        for (int64_t i = 0; i < s.N; ++i) {
          float sum = 0.0f;
          for (int64_t c = 0; c < d; ++c) {
            sum += G.load(i, c) * O.load(i, c);
            A.store(i, c, 0.0f);
          }
          Dg.store(0, i, sum);
          Lpre.nonmatmul_ops += 2 * d;
        }
      }
      // [bwd-kv] A block per K/V tile j.
      const GlobalMat Q(in.q.head(b, h), s.N, d, d, st, Lkv), K(in.k.head(b, h), s.Nk, d, d, st, Lkv),
          V(in.v.head(b, h), s.Nk, d, d, st, Lkv), G(dO.head(b, h), s.N, d, d, st, Lkv),
          Lse(fwd.lse.head(b, h), 1, s.N, s.N, f32, Lkv), Dg(Dh, 1, s.N, s.N, f32, Lkv);
      GlobalMat A(acch, s.N, d, d, f32, Lkv);
      GlobalMat dK(res.grads.dk.head(b, h), s.Nk, d, d, st, Lkv), dV(res.grads.dv.head(b, h), s.Nk, d, d, st, Lkv);
      for (int64_t j = 0; j < Tc; ++j) {
        const int64_t j0 = j * sc.Bc, keys = std::min<int64_t>(sc.Bc, s.Nk - j0);
        Smem smem(kSmemBudget, Lkv);
        SmemTile Ks = smem.tile(sc.Bc, d, d + kPad, st), Vs = smem.tile(sc.Bc, d, d + kPad, st),
                 Qs = smem.tile(sc.Br, d, d + kPad, st), dOs = smem.tile(sc.Br, d, d + kPad, st),
                 Ss = smem.tile(sc.Br, sc.Bc, sc.Bc + kPadF, f32), dPs = smem.tile(sc.Br, sc.Bc, sc.Bc + kPadF, f32),
                 Ps = smem.tile(sc.Br, sc.Bc, sc.Bc + kPad, st), dSs = smem.tile(sc.Br, sc.Bc, sc.Bc + kPad, st),
                 Stage = smem.tile(std::max(sc.Br, sc.Bc), d, d + kPadF, f32), Li = smem.tile(1, sc.Br, f32),
                 Di = smem.tile(1, sc.Br, f32);
        Ks.load_from(K, j0, 0);
        Vs.load_from(V, j0, 0);
        // [dkdv-registers] dK_j, dV_j: one accumulator per output fragment, in registers (not counted).
        const int64_t KF = sc.Bc / 16, DF = d / 16;
        std::vector<Frag16> dv(static_cast<size_t>(KF * DF)), dk(static_cast<size_t>(KF * DF));
        const int64_t first = first_q_tile(j0, s.N, s.Nk, sc.Br, s.causal);
        for (int64_t it = first; it < Tr; ++it) {  // [q-range]
          const int64_t i0 = it * sc.Br, rows = std::min<int64_t>(sc.Br, s.N - i0);
          Qs.load_from(Q, i0, 0);
          dOs.load_from(G, i0, 0);
          for (int64_t r = 0; r < sc.Br; ++r) {
            Li.write(0, r, r < rows ? Lse.load(0, i0 + r) : kInf);
            Di.write(0, r, r < rows ? Dg.load(0, i0 + r) : 0.0f);
          }
          barrier(Lkv);
          // [recompute] S = Q_i K_jᵀ, dP = dO_i V_jᵀ.
          for (int64_t fm = 0; fm < sc.Br / 16; ++fm)
            for (int64_t fn = 0; fn < KF; ++fn) {
              Frag16 sf, dpf;
              for (int64_t kk = 0; kk < d; kk += 16) {
                mma(sf, load_frag(Qs, 16 * fm, kk), load_frag_transposed(Ks, 16 * fn, kk), Lkv);
                mma(dpf, load_frag(dOs, 16 * fm, kk), load_frag_transposed(Vs, 16 * fn, kk), Lkv);
              }
              store_frag(Ss, 16 * fm, 16 * fn, sf, [](float x) { return x; });
              store_frag(dPs, 16 * fm, 16 * fn, dpf, [](float x) { return x; });
            }
          barrier(Lkv);
          // [softmax-grad] P = exp(scale·S − L) (0 where masked), dS = P ∘ (dP − D).
          const bool masked = needs_mask(i0, i0 + rows, j0, s.N, s.Nk, sc.Bc, s.causal);
          // lab:begin softmax-grad {dQ dK dV}: [softmax-grad]: Ps = exp(scale·S − L_i), dSs = P ∘ (dP − D_i) …
          for (int64_t r = 0; r < sc.Br; ++r)
            for (int64_t c = 0; c < sc.Bc; ++c) {
              float pv = std::exp(scale * Ss.read(r, c) - Li.read(0, r));
              if (masked && j0 + c >= visible_keys(i0 + r, s.N, s.Nk, s.causal)) pv = 0.0f;  // [causal-mask]
              Ps.write(r, c, pv);
              dSs.write(r, c, pv * (dPs.read(r, c) - Di.read(0, r)));
            }
          // lab:end
          Lkv.nonmatmul_ops += (masked ? 6 : 5) * sc.Br * sc.Bc;
          Lkv.exps += sc.Br * sc.Bc;  // the recompute of P: every entry, masked ones too (zeroed after the exp)
          barrier(Lkv);
          // [dkdv] dV_j += Pᵀ dO_i, dK_j += dSᵀ Q_i.
          // lab:begin dkdv {dK dV}: [dkdv]: per output fragment: dv += Pᵀ dO_i, dk += dSᵀ Q_i …
          for (int64_t fm = 0; fm < KF; ++fm)
            for (int64_t fn = 0; fn < DF; ++fn)
              for (int64_t kk = 0; kk < sc.Br; kk += 16) {
                mma(dv[static_cast<size_t>(fm * DF + fn)], load_frag_transposed(Ps, kk, 16 * fm), load_frag(dOs, kk, 16 * fn), Lkv);
                mma(dk[static_cast<size_t>(fm * DF + fn)], load_frag_transposed(dSs, kk, 16 * fm), load_frag(Qs, kk, 16 * fn), Lkv);
              }
          // lab:end
          // [dq] dS K_j, staged, then added into the accumulator.
          for (int64_t fm = 0; fm < sc.Br / 16; ++fm)
            for (int64_t fn = 0; fn < DF; ++fn) {
              Frag16 a;
              for (int64_t kk = 0; kk < sc.Bc; kk += 16) mma(a, load_frag(dSs, 16 * fm, kk), load_frag(Ks, kk, 16 * fn), Lkv);
              store_frag(Stage, 16 * fm, 16 * fn, a, [](float x) { return x; });
            }
          barrier(Lkv);
          // lab:begin dq-atomic {dQ}: [dq-atomic]: add the staged dS K_j (Stage) into the fp32 dQ accumulator A …
          for (int64_t r = 0; r < rows; ++r)  // [dq-atomic]
            for (int64_t c = 0; c < d; ++c) A.atomic_add(i0 + r, c, Stage.read(r, c));
          // lab:end
          Lkv.tiles_computed += 1;
          Lkv.tiles_masked += classify_tile(i0, i0 + rows, j0, j0 + keys, s.N, s.Nk, s.causal) == TileKind::Diagonal;
        }
        Lkv.tiles_skipped += first;
        // [dkdv-write] dV_j, then scale·dK_j, through the staging tile.
        for (int pass = 0; pass < 2; ++pass) {
          barrier(Lkv);
          const std::vector<Frag16>& src = pass == 0 ? dv : dk;
          for (int64_t fm = 0; fm < KF; ++fm)
            for (int64_t fn = 0; fn < DF; ++fn)
              store_frag(Stage, 16 * fm, 16 * fn, src[static_cast<size_t>(fm * DF + fn)], [](float x) { return x; });
          barrier(Lkv);
          GlobalMat& out = pass == 0 ? dV : dK;
          const float mul = pass == 0 ? 1.0f : scale;
          for (int64_t r = 0; r < keys; ++r)
            for (int64_t c = 0; c < d; ++c) out.store(j0 + r, c, mul * Stage.read(r, c));
        }
        Lkv.nonmatmul_ops += keys * d;  // the scale on dK
      }
      // [dq-convert] dQ = scale · accumulator.
      {
        const GlobalMat A2(acch, s.N, d, d, f32, Lcv);
        GlobalMat dQ(res.grads.dq.head(b, h), s.N, d, d, st, Lcv);
        for (int64_t i = 0; i < s.N; ++i)
          for (int64_t c = 0; c < d; ++c) dQ.store(i, c, scale * A2.load(i, c));
        Lcv.nonmatmul_ops += s.N * d;
      }
    }
  return res;
}

// The fused ledger in closed form (docs/08_backward.md). One (b, h): Tc K/V tiles; tile j visits
// the Q tiles from first_q_tile(j) to Tr − 1 (all Tr without the mask): `pairs` in all, of which
// `masked` need the per-element mask and `diagonal` hold the diagonal.
LedgerSet closed_form_fused(const Shape& s, const Schedule& sc) {
  const int64_t BH = s.B * s.H, N = s.N, Nk = s.Nk, d = s.d, Br = sc.Br, Bc = sc.Bc;
  const int64_t Tr = num_tiles(N, Br), Tc = num_tiles(Nk, Bc), KF = Bc / 16, DF = d / 16, RF = Br / 16;
  int64_t pairs = 0, masked = 0, diagonal = 0, skipped = 0, q_rows = 0;  // q_rows: Q rows inside N, summed over visits
  for (int64_t j = 0; j < Tc; ++j) {
    const int64_t j0 = j * Bc, j1 = std::min(j0 + Bc, Nk), first = first_q_tile(j0, N, Nk, Br, s.causal);
    skipped += first;
    for (int64_t it = first; it < Tr; ++it) {
      const int64_t i0 = it * Br, i1 = std::min(i0 + Br, N);
      ++pairs;
      masked += needs_mask(i0, i1, j0, N, Nk, Bc, s.causal);
      diagonal += classify_tile(i0, i1, j0, j1, N, Nk, s.causal) == TileKind::Diagonal;
      q_rows += i1 - i0;
    }
  }
  LedgerSet ls;
  Ledger& pre = ls["bwd_pre"];
  pre.gmem_read = BH * N * d * 2 * 2;         // dO and O
  pre.gmem_write = BH * (N * d * 4 + N * 4);  // the zeroed accumulator, D
  pre.nonmatmul_ops = BH * N * 2 * d;
  pre.workspace = fused_workspace(BH, N, d);

  Ledger& kv = ls["bwd_kv"];
  kv.gmem_read = BH * (Nk * d * 2 * 2 + q_rows * (2 * d * 2 + 2 * 4));  // K_j, V_j once; Q_i, dO_i, L_i, D_i per visit
  kv.gmem_write = BH * Nk * d * 2 * 2;                                   // dK, dV once
  kv.gmem_atomic = BH * q_rows * d * 4;                                  // dQ partial sums per visit
  const int64_t w_pair = 2 * Br * d * 2 + 2 * Br * 4     // Q_i, dO_i, L_i, D_i
                         + 2 * Br * Bc * 4 + 2 * Br * Bc * 2  // S, dP; P, dS
                         + RF * DF * kFrag4;                  // the staged dQ share
  const int64_t r_pair = RF * KF * (d / 16) * 2 * 2 * kFrag2  // S and dP fragments
                         + Br * Bc * (4 + 4 + 4 + 4)           // S, L, dP, D per element
                         + KF * DF * (Br / 16) * 2 * 2 * kFrag2  // dV, dK fragments
                         + RF * DF * KF * 2 * kFrag2;             // dQ fragments
  kv.smem_write = BH * (Tc * 2 * Bc * d * 2 + pairs * w_pair + Tc * 2 * KF * DF * kFrag4);
  kv.smem_read = BH * (pairs * r_pair + (q_rows * d * 4) + Nk * d * 4 * 2);  // + atomics' staged reads, final writes
  kv.barriers = BH * (pairs * 4 + Tc * 4);
  kv.matmul_flops = BH * pairs * (RF * KF * (d / 16) * 2 + KF * DF * (Br / 16) * 2 + RF * DF * KF) * kFragFlops;
  kv.nonmatmul_ops = BH * (pairs * 5 * Br * Bc + masked * Br * Bc + Nk * d);
  kv.exps = BH * pairs * Br * Bc;  // P recomputed on every entry of every visited tile
  kv.tiles_computed = BH * pairs;
  kv.tiles_masked = BH * diagonal;
  kv.tiles_skipped = BH * skipped;
  kv.smem_peak = smem_bytes(sc, int(d));

  Ledger& cv = ls["dq_convert"];
  cv.gmem_read = BH * N * d * 4;
  cv.gmem_write = BH * N * d * 2;
  cv.nonmatmul_ops = BH * N * d;
  return ls;
}

// ================================ naive ==========================================================

namespace {

constexpr int64_t G = kGemmTile;

// [gemm] One block of the naive GEMM: the G × G tile at (m0, n0) of C = A·B (M × Nn, inner K) into
// Cs, exactly as kernel.cu's gemm_tile() does it. `a(r, c)` and `b(r, c)` load one element of A or
// B from HBM (through a counting GlobalMat); elements outside the matrices are zero and free.
template <class FA, class FB>
void gemm_block(SmemTile& As, SmemTile& Bs, SmemTile& Cs, int64_t M, int64_t Nn, int64_t K, int64_t m0, int64_t n0,
                FA a, FB b, Ledger& led) {
  constexpr int64_t WG = G / 16;
  std::vector<Frag16> acc(static_cast<size_t>(WG * WG));
  for (int64_t k0 = 0; k0 < K; k0 += G) {
    for (int64_t r = 0; r < G; ++r)
      for (int64_t c = 0; c < G; ++c) {
        As.write(r, c, m0 + r < M && k0 + c < K ? a(m0 + r, k0 + c) : 0.0f);
        Bs.write(r, c, k0 + r < K && n0 + c < Nn ? b(k0 + r, n0 + c) : 0.0f);
      }
    barrier(led);
    for (int64_t wm = 0; wm < WG; ++wm)
      for (int64_t wn = 0; wn < WG; ++wn)
        for (int64_t kk = 0; kk < G; kk += 16)
          mma(acc[static_cast<size_t>(wm * WG + wn)], load_frag(As, 16 * wm, kk), load_frag(Bs, kk, 16 * wn), led);
    barrier(led);
  }
  for (int64_t wm = 0; wm < WG; ++wm)
    for (int64_t wn = 0; wn < WG; ++wn) store_frag(Cs, 16 * wm, 16 * wn, acc[static_cast<size_t>(wm * WG + wn)], [](float x) { return x; });
  barrier(led);
}

// The shared memory of a naive GEMM block (kernel.cu's GemmShared): A and B chunks, the C tile.
struct GemmTiles {
  SmemTile As, Bs, Cs;
};
constexpr int64_t kNaiveSmem = 48 * 1024;  // static shared memory of a naive kernel
GemmTiles gemm_tiles(Smem& smem, const Store& st) {
  return {smem.tile(G, G, G + kPad, st), smem.tile(G, G, G + kPad, st), smem.tile(G, G, G + kPadF, Store::f32())};
}

// One naive GEMM kernel over a head (dP, dV, dQ, dK): every G × G block of C (M × Nn, inner K)
// through gemm_block(), then out(i, j, value) for each element of the block inside C.
template <class FA, class FB, class FOut>
void gemm_kernel(Ledger& led, const Store& st, int64_t M, int64_t Nn, int64_t K, FA a, FB b, FOut out) {
  for (int64_t m0 = 0; m0 < M; m0 += G)
    for (int64_t n0 = 0; n0 < Nn; n0 += G) {
      Smem smem(kNaiveSmem, led);
      GemmTiles t = gemm_tiles(smem, st);
      gemm_block(t.As, t.Bs, t.Cs, M, Nn, K, m0, n0, a, b, led);
      for (int64_t r = 0; r < G && m0 + r < M; ++r)
        for (int64_t c = 0; c < G && n0 + c < Nn; ++c) out(m0 + r, n0 + c, t.Cs.read(r, c));
    }
}

}  // namespace

BackwardBlueprintResult blueprint_naive(const Shape& s, const Inputs& in, const Forward& fwd, const Tensor4& dO,
                                        bool stored) {
  BackwardBlueprintResult res;
  res.grads = empty_grads(s);
  res.ledger.kernels.reserve(6);  // references into the set stay valid
  // [stored] With --bwd stored the forward wrote P: the same kernel, counted as the forward's.
  Ledger& Lp = (stored ? res.saved : res.ledger)["naive_p"];
  Ledger& Ldp = res.ledger["naive_dp"];
  Ledger& Lds = res.ledger["naive_ds"];
  Ledger& Ldv = res.ledger["naive_dv"];
  Ledger& Ldq = res.ledger["naive_dq"];
  Ledger& Ldk = res.ledger["naive_dk"];
  const Store st = Store::of(s.dtype), f32 = Store::f32();
  const int64_t d = s.d, N = s.N, Nk = s.Nk;
  const float scale = static_cast<float>(s.softmax_scale());
  Lp.workspace = stored ? saved_p_bytes(s.B * s.H, N, Nk) : naive_workspace(s.B * s.H, N, Nk);
  if (stored) Ldp.workspace = stored_workspace(s.B * s.H, N, Nk);
  std::vector<float> Pw(static_cast<size_t>(N * Nk)), dPw(static_cast<size_t>(N * Nk)), dSw(static_cast<size_t>(N * Nk));

  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      // step08_naive_p: P = exp(scale·QKᵀ − L), masked entries 0.
      {
        const GlobalMat Q(in.q.head(b, h), N, d, d, st, Lp), K(in.k.head(b, h), Nk, d, d, st, Lp),
            Lse(fwd.lse.head(b, h), 1, N, N, f32, Lp);
        GlobalMat P(Pw.data(), N, Nk, Nk, st, Lp);
        for (int64_t m0 = 0; m0 < N; m0 += G)
          for (int64_t n0 = 0; n0 < Nk; n0 += G) {
            Smem smem(kNaiveSmem, Lp);
            GemmTiles t = gemm_tiles(smem, st);
            SmemTile Ls = smem.tile(1, G, f32);
            for (int64_t r = 0; r < G && m0 + r < N; ++r) Ls.write(0, r, Lse.load(0, m0 + r));
            gemm_block(t.As, t.Bs, t.Cs, N, Nk, d, m0, n0, [&](int64_t r, int64_t c) { return Q.load(r, c); },
                       [&](int64_t r, int64_t c) { return K.load(c, r); }, Lp);
            for (int64_t r = 0; r < G && m0 + r < N; ++r)
              for (int64_t c = 0; c < G && n0 + c < Nk; ++c) {
                const int64_t i = m0 + r, j = n0 + c;
                const bool vis = j < visible_keys(i, N, Nk, s.causal);
                P.store(i, j, vis ? std::exp(scale * t.Cs.read(r, c) - Ls.read(0, r)) : 0.0f);
                Lp.nonmatmul_ops += vis ? 4 : 1;
                Lp.exps += vis ? 1 : 0;  // masked entries are written 0 without an exp
              }
          }
      }
      // step08_naive_dp: dP = dO Vᵀ (fp32).
      {
        const GlobalMat Gm(dO.head(b, h), N, d, d, st, Ldp), V(in.v.head(b, h), Nk, d, d, st, Ldp);
        GlobalMat dP(dPw.data(), N, Nk, Nk, f32, Ldp);
        gemm_kernel(Ldp, st, N, Nk, d, [&](int64_t r, int64_t c) { return Gm.load(r, c); },
                    [&](int64_t r, int64_t c) { return V.load(c, r); }, [&](int64_t i, int64_t j, float x) { dP.store(i, j, x); });
      }
      // step08_naive_ds: per row, D_i = Σ_j P_ij dP_ij, then dS = P ∘ (dP − D_i).
      {
        const GlobalMat P(Pw.data(), N, Nk, Nk, st, Lds), dP(dPw.data(), N, Nk, Nk, f32, Lds);
        GlobalMat dS(dSw.data(), N, Nk, Nk, st, Lds);
        for (int64_t i = 0; i < N; ++i) {
          float D = 0.0f;
          for (int64_t j = 0; j < Nk; ++j) D += P.load(i, j) * dP.load(i, j);
          for (int64_t j = 0; j < Nk; ++j) dS.store(i, j, P.load(i, j) * (dP.load(i, j) - D));
          Lds.nonmatmul_ops += 4 * Nk;
        }
      }
      // step08_naive_dv: dV = Pᵀ dO.
      {
        const GlobalMat P(Pw.data(), N, Nk, Nk, st, Ldv), Gm(dO.head(b, h), N, d, d, st, Ldv);
        GlobalMat dV(res.grads.dv.head(b, h), Nk, d, d, st, Ldv);
        gemm_kernel(Ldv, st, Nk, d, N, [&](int64_t r, int64_t c) { return P.load(c, r); },
                    [&](int64_t r, int64_t c) { return Gm.load(r, c); }, [&](int64_t i, int64_t j, float x) { dV.store(i, j, x); });
      }
      // step08_naive_dq: dQ = scale·dS K.
      {
        const GlobalMat dS(dSw.data(), N, Nk, Nk, st, Ldq), K(in.k.head(b, h), Nk, d, d, st, Ldq);
        GlobalMat dQ(res.grads.dq.head(b, h), N, d, d, st, Ldq);
        gemm_kernel(Ldq, st, N, d, Nk, [&](int64_t r, int64_t c) { return dS.load(r, c); },
                    [&](int64_t r, int64_t c) { return K.load(r, c); },
                    [&](int64_t i, int64_t j, float x) { dQ.store(i, j, scale * x); ++Ldq.nonmatmul_ops; });
      }
      // step08_naive_dk: dK = scale·dSᵀ Q.
      {
        const GlobalMat dS(dSw.data(), N, Nk, Nk, st, Ldk), Q(in.q.head(b, h), N, d, d, st, Ldk);
        GlobalMat dK(res.grads.dk.head(b, h), Nk, d, d, st, Ldk);
        gemm_kernel(Ldk, st, Nk, d, N, [&](int64_t r, int64_t c) { return dS.load(c, r); },
                    [&](int64_t r, int64_t c) { return Q.load(r, c); },
                    [&](int64_t i, int64_t j, float x) { dK.store(i, j, scale * x); ++Ldk.nonmatmul_ops; });
      }
    }
  return res;
}

namespace {

// The ledger of one naive GEMM kernel over all heads: C (M × Nn) = A (M × K) · B (K × Nn), element
// sizes ea and eb in HBM; the epilogue's own traffic is added by the caller.
Ledger gemm_ledger(int64_t BH, int64_t M, int64_t Nn, int64_t K, int64_t ea, int64_t eb) {
  const int64_t tm = num_tiles(M, G), tn = num_tiles(Nn, G), chunks = num_tiles(K, G), blocks = tm * tn;
  const int64_t WG = G / 16;
  Ledger led;
  led.gmem_read = BH * (tn * M * K * ea + tm * K * Nn * eb);
  led.smem_write = BH * blocks * (chunks * 2 * G * G * 2 + G * G * 4);
  led.smem_read = BH * (blocks * chunks * WG * WG * (G / 16) * 2 * kFrag2 + M * Nn * 4);  // fragments; Cs in the epilogue
  led.barriers = BH * blocks * (2 * chunks + 1);
  led.matmul_flops = BH * blocks * chunks * WG * WG * (G / 16) * kFragFlops;
  led.smem_peak = 2 * G * (G + kPad) * 2 + G * (G + kPadF) * 4;
  return led;
}

}  // namespace

LedgerSet closed_form_naive(const Shape& s) {
  const int64_t BH = s.B * s.H, N = s.N, Nk = s.Nk, d = s.d, e = 2;
  const int64_t vis = visible_pairs(N, Nk, s.causal);
  LedgerSet ls;
  Ledger& p = ls["naive_p"] = gemm_ledger(BH, N, Nk, d, e, e);
  p.gmem_read += BH * num_tiles(Nk, G) * N * 4;  // L, once per block row
  p.smem_write += BH * num_tiles(Nk, G) * N * 4;
  p.smem_read += BH * (2 * vis * 4 - N * Nk * 4);  // S and L are read only where P is visible
  p.gmem_write = BH * N * Nk * e;
  p.nonmatmul_ops = BH * (N * Nk + 3 * vis);
  p.exps = BH * vis;  // P on the visible entries only
  p.smem_peak += G * 4;
  p.workspace = naive_workspace(BH, N, Nk);
  Ledger& dp = ls["naive_dp"] = gemm_ledger(BH, N, Nk, d, e, e);
  dp.gmem_write = BH * N * Nk * 4;
  Ledger& ds = ls["naive_ds"];
  ds.gmem_read = BH * N * Nk * (e + 4) * 2;
  ds.gmem_write = BH * N * Nk * e;
  ds.nonmatmul_ops = BH * N * Nk * 4;
  Ledger& dv = ls["naive_dv"] = gemm_ledger(BH, Nk, d, N, e, e);
  dv.gmem_write = BH * Nk * d * e;
  Ledger& dq = ls["naive_dq"] = gemm_ledger(BH, N, d, Nk, e, e);
  dq.gmem_write = BH * N * d * e;
  dq.nonmatmul_ops = BH * N * d;
  Ledger& dk = ls["naive_dk"] = gemm_ledger(BH, Nk, d, N, e, e);
  dk.gmem_write = BH * Nk * d * e;
  dk.nonmatmul_ops = BH * Nk * d;
  return ls;
}

// ================================ stored =========================================================
// [stored] The forward has written P; the backward is naive's without step08_naive_p, whose ledger
// moves to the forward's side (its workspace there is P itself; dP and dS stay the backward's).

LedgerSet closed_form_stored(const Shape& s) {
  const LedgerSet all = closed_form_naive(s);
  LedgerSet ls;
  for (const auto& [name, led] : all.kernels)
    if (name != "naive_p") ls.kernels.emplace_back(name, led);
  ls["naive_dp"].workspace = stored_workspace(s.B * s.H, s.N, s.Nk);
  return ls;
}

LedgerSet closed_form_saved_p(const Shape& s) {
  LedgerSet all = closed_form_naive(s), ls;
  ls["naive_p"] = all["naive_p"];
  ls["naive_p"].workspace = saved_p_bytes(s.B * s.H, s.N, s.Nk);
  return ls;
}

// ================================ registration ====================================================

namespace {
BackwardBlueprintResult run_backward(const Shape& s, const Inputs& in, const Forward& fwd, const Tensor4& dO,
                                     const StepOptions& o) {
  if (stored(o)) return blueprint_naive(s, in, fwd, dO, true);
  return naive(o) ? blueprint_naive(s, in, fwd, dO) : blueprint_fused(s, in, fwd, dO, kSchedule);
}
LedgerSet run_backward_closed_form(const Shape& s, const StepOptions& o) {
  if (stored(o)) return closed_form_stored(s);
  return naive(o) ? closed_form_naive(s) : closed_form_fused(s, kSchedule);
}
// [saved-for-backward] Only --bwd stored reads something the forward saved: P.
LedgerSet run_saved_closed_form(const Shape& s, const StepOptions& o) { return stored(o) ? closed_form_saved_p(s) : LedgerSet{}; }
// [arch] Shared memory per block of the backward's largest kernel — the fused block (schedule.hpp),
// or the naive GEMM tile (two 16-bit G × G tiles, an fp32 one, L). (The forward's is step 07's:
// borrow_forward.)
int64_t run_backward_smem(const Shape& s, const StepOptions& o) {
  return naive(o) || stored(o) ? 2 * G * (G + kPad) * 2 + G * (G + kPadF) * 4 + G * 4 : smem_bytes(kSchedule, int(s.d));
}
}  // namespace

const StepInfo& info() {
  static const StepInfo step = [] {
    StepInfo i;
    i.id = "08";
    i.slug = "backward";
    i.title = "the backward pass: dQ, dK, dV from the saved L (forward: step 07)";
    i.teaches = "backward: P from L; dK, dV on chip; dQ by atomics";
    i.flags = {{"bwd", {"fused", "naive", "stored"},
                "backward schedule: fused (FlashAttention-2), naive (P, dP, dS in HBM) or stored (naive reading the P the forward wrote)"}};
    borrow_forward<step07::info>(i);  // [forward-from] the forward is step 07's, whatever --bwd says
    i.backward_blueprint = run_backward;
    i.backward_closed_form = run_backward_closed_form;
    i.backward_smem_bytes = run_backward_smem;
    i.saved_closed_form = run_saved_closed_form;
#ifdef FA_HAVE_CUDA
    i.launch_backward = launch_backward;
    i.backward_workspace_bytes = backward_workspace_bytes;
    i.backward_saved_bytes = backward_saved_bytes;
    i.launch_save = launch_save;
#endif
    i.kernel_prefix = "step08_";
    return i;
  }();
  return step;
}

}  // namespace fa::step08
