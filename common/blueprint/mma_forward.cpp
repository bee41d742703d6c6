#include "blueprint/mma_forward.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "kernel/causal.hpp"

namespace fa::mma_bp {

namespace {

namespace mf = fa::m16n8k16;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kLog2e = 1.4426950408889634f;  // [exp2] folded into the scale
constexpr float kLn2 = 0.6931471805599453f;

using mf::AFrag;
using mf::BFrag;
using mf::CFrag;

// One warp's registers across the K/V loop.
struct Warp {
  std::vector<AFrag> qa;  // [D/16]
  std::vector<CFrag> o;   // [D/8]
  std::vector<std::array<float, 2>> m, l;  // [lane][row half]: running max (log2 domain), lane's part of the sum
};

}  // namespace

BlueprintResult forward(const Shape& s, const Inputs& in, const Tiles& sc, const std::string& kernel, BLoader k_frag,
                        BLoader v_frag) {
  BlueprintResult res;
  res.out.o = Tensor4(s.B, s.H, s.N, s.d);
  res.out.lse = Tensor4(s.B, s.H, s.N, 1);
  Ledger& led = res.ledger[kernel];
  const Store st = Store::of(s.dtype), f32 = Store::f32();
  const int64_t d = s.d, Tc = num_tiles(s.Nk, sc.Bc), Tr = num_tiles(s.N, sc.Br), W = sc.warps();
  const float sl2 = static_cast<float>(s.softmax_scale()) * kLog2e;

  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const GlobalMat Q(in.q.head(b, h), s.N, d, d, st, led), K(in.k.head(b, h), s.Nk, d, d, st, led),
          V(in.v.head(b, h), s.Nk, d, d, st, led);
      GlobalMat O(res.out.o.head(b, h), s.N, d, d, st, led), Lse(res.out.lse.head(b, h), 1, s.N, s.N, f32, led);
      for (int64_t it = 0; it < Tr; ++it) {  // a block per Q tile
        const int64_t i0 = it * sc.Br, rows = std::min<int64_t>(sc.Br, s.N - i0);
        Smem smem(sc.smem_budget, led);
        std::vector<SmemTile> Kst, Vst;  // [stages]
        for (int64_t stage = 0; stage < sc.stages; ++stage) {
          Kst.push_back(smem.tile(sc.Bc, d, d + sc.pad, st));
          Vst.push_back(smem.tile(sc.Bc, d, d + sc.pad, st));
        }
        std::vector<Warp> warps(static_cast<size_t>(W));
        for (int64_t w = 0; w < W; ++w) {  // [q-frags] Q's rows as A fragments, from HBM, once
          Warp& wp = warps[size_t(w)];
          wp.qa.assign(size_t(d / 16), AFrag(32));
          wp.o.assign(size_t(d / 8), CFrag(32, {0, 0, 0, 0}));
          wp.m.assign(32, {-kInf, -kInf});
          wp.l.assign(32, {0.0f, 0.0f});
          for (int64_t kk = 0; kk < d / 16; ++kk)
            for (int lane = 0; lane < 32; ++lane)
              for (int i = 0; i < 8; ++i) {
                const mf::Coord c = mf::a_elem(lane, i);
                const int64_t row = i0 + 16 * w + c.row;
                wp.qa[size_t(kk)][size_t(lane)][size_t(i)] = row < s.N ? Q.load(row, 16 * kk + c.col) : 0.0f;
              }
        }
        const int64_t Tend = kv_tiles_for(i0, i0 + rows, s.N, s.Nk, sc.Bc, s.causal);  // [skip]
        // [pipeline] With two stages, tile 0 is loaded before the loop and tile j + 1 into the
        // other stage before tile j is multiplied; with one, each tile is loaded when its turn comes.
        if (sc.stages > 1 && Tend > 0) {
          Kst[0].load_from(K, 0, 0);
          Vst[0].load_from(V, 0, 0);
        }
        for (int64_t j = 0; j < Tend; ++j) {
          const int64_t j0 = j * sc.Bc;
          const SmemTile& Ks = Kst[size_t(j % sc.stages)];
          const SmemTile& Vs = Vst[size_t(j % sc.stages)];
          if (sc.stages == 1) {
            barrier(led);
            Kst[0].load_from(K, j0, 0);
            Vst[0].load_from(V, j0, 0);
          } else if (j + 1 < Tend) {
            Kst[size_t((j + 1) % sc.stages)].load_from(K, j0 + sc.Bc, 0);
            Vst[size_t((j + 1) % sc.stages)].load_from(V, j0 + sc.Bc, 0);
          }
          barrier(led);  // tile j is in shared memory
          const bool masked = needs_mask(i0, i0 + rows, j0, s.N, s.Nk, sc.Bc, s.causal);
          for (int64_t w = 0; w < W; ++w) {
            Warp& wp = warps[size_t(w)];
            const int64_t r0 = i0 + 16 * w;
            // [s-regs] S = Q K_jᵀ.
            std::vector<CFrag> sf(size_t(sc.Bc / 8), CFrag(32, {0, 0, 0, 0}));
            for (int64_t n = 0; n < sc.Bc / 8; ++n)
              for (int64_t kk = 0; kk < d / 16; ++kk) {
                mf::mma(sf[size_t(n)], wp.qa[size_t(kk)], k_frag(Ks, n, kk), led);
              }
            // [softmax-regs] Scale (log2 domain), mask, row max over the four lanes of a group.
            std::vector<std::array<float, 2>> mx(32, {-kInf, -kInf});
            for (int64_t n = 0; n < sc.Bc / 8; ++n)
              for (int lane = 0; lane < 32; ++lane)
                for (int e = 0; e < 4; ++e) {
                  const mf::Coord c = mf::c_elem(lane, e);
                  float v = sf[size_t(n)][size_t(lane)][size_t(e)] * sl2;
                  if (masked && j0 + 8 * n + c.col >= visible_keys(r0 + c.row, s.N, s.Nk, s.causal)) v = -kInf;
                  sf[size_t(n)][size_t(lane)][size_t(e)] = v;
                  mx[size_t(lane)][size_t(e / 2)] = std::max(mx[size_t(lane)][size_t(e / 2)], v);
                }
            std::vector<std::array<float, 2>> alpha(32);
            for (int lane = 0; lane < 32; ++lane)
              for (int hr = 0; hr < 2; ++hr) {
                const int g0 = 4 * mf::group(lane);
                const float gmax = std::max(std::max(mx[size_t(g0)][size_t(hr)], mx[size_t(g0 + 1)][size_t(hr)]),
                                            std::max(mx[size_t(g0 + 2)][size_t(hr)], mx[size_t(g0 + 3)][size_t(hr)]));
                float& m = wp.m[size_t(lane)][size_t(hr)];
                const float m_new = std::max(m, gmax);
                alpha[size_t(lane)][size_t(hr)] = m == -kInf ? 0.0f : std::exp2(m - m_new);  // [rescale-guard]
                led.exps += m == -kInf ? 0 : 1;  // each of the row's four lanes takes its own alpha
                m = m_new;
                wp.l[size_t(lane)][size_t(hr)] *= alpha[size_t(lane)][size_t(hr)];
              }
            for (int64_t n = 0; n < sc.Bc / 8; ++n)
              for (int lane = 0; lane < 32; ++lane)
                for (int e = 0; e < 4; ++e) {
                  const float m = wp.m[size_t(lane)][size_t(e / 2)];
                  float& v = sf[size_t(n)][size_t(lane)][size_t(e)];
                  v = m == -kInf ? 0.0f : std::exp2(v - m);
                  led.exps += m == -kInf ? 0 : 1;  // masked entries too (exp2(−inf) = 0)
                  wp.l[size_t(lane)][size_t(e / 2)] += v;
                }
            for (auto& on : wp.o)  // [deferred]
              for (int lane = 0; lane < 32; ++lane)
                for (int e = 0; e < 4; ++e) on[size_t(lane)][size_t(e)] *= alpha[size_t(lane)][size_t(e / 2)];
            led.nonmatmul_ops += 16 * sc.Bc * (masked ? 6 : 5) + 3 * 16 + 16 * d;
            // [c-to-a] P in the storage type as the A fragment, then [pv] Õ += P V_j.
            for (int64_t kk = 0; kk < sc.Bc / 16; ++kk) {
              AFrag pa(32);
              for (int lane = 0; lane < 32; ++lane)
                for (int i = 0; i < 8; ++i)
                  pa[size_t(lane)][size_t(i)] =
                      round_to(s.dtype, sf[size_t(2 * kk + mf::a_from_c_tile(i))][size_t(lane)][size_t(mf::a_from_c_elem(i))]);
              for (int64_t n = 0; n < d / 8; ++n) {
                mf::mma(wp.o[size_t(n)], pa, v_frag(Vs, kk, n), led);
              }
            }
          }
          if (sc.stages > 1) barrier(led);  // every warp is done with this stage: it may be refilled
          led.tiles_computed += 1;
          led.tiles_masked += classify_tile(i0, i0 + rows, j0, std::min(j0 + sc.Bc, s.Nk), s.N, s.Nk, s.causal) ==
                            TileKind::Diagonal;
        }
        led.tiles_skipped += Tc - Tend;
        // [final-divide] l summed over the group's four lanes; O = Õ / l; L = (m + log2 l)·ln 2.
        for (int64_t w = 0; w < W; ++w) {
          const Warp& wp = warps[size_t(w)];
          for (int lane = 0; lane < 32; ++lane) {
            const int g0 = 4 * mf::group(lane);
            float lsum[2];
            for (int hr = 0; hr < 2; ++hr)
              lsum[hr] = (wp.l[size_t(g0)][size_t(hr)] + wp.l[size_t(g0 + 1)][size_t(hr)]) +
                         (wp.l[size_t(g0 + 2)][size_t(hr)] + wp.l[size_t(g0 + 3)][size_t(hr)]);
            for (int64_t n = 0; n < d / 8; ++n)
              for (int e = 0; e < 4; ++e) {
                const mf::Coord c = mf::c_elem(lane, e);
                const int64_t row = i0 + 16 * w + c.row;
                if (row >= s.N) continue;
                const float li = lsum[e / 2];
                O.store(row, 8 * n + c.col, li > 0.0f ? wp.o[size_t(n)][size_t(lane)][size_t(e)] / li : 0.0f);
                ++led.nonmatmul_ops;
              }
            if (mf::thread_in_group(lane) == 0)
              for (int hr = 0; hr < 2; ++hr) {
                const int64_t row = i0 + 16 * w + mf::group(lane) + 8 * hr;
                if (row >= s.N) continue;
                const float m = wp.m[size_t(lane)][size_t(hr)];
                Lse.store(0, row, lsum[hr] > 0.0f ? (m + std::log2(lsum[hr])) * kLn2 : kInf);
                led.nonmatmul_ops += 2;
              }
          }
        }
      }
    }
  return res;
}

// The ledger in closed form (docs/09_mma_sync.md; docs/10 and docs/11 have the same). One (b, h): Tr = ⌈N/Br⌉ blocks; block i visits
// its first T_i K/V tiles (all Tc without a mask), `pairs` in all; `masked` of them need the
// per-element mask. Per pair and warp: (Bc/8)·(d/16) products for S and (d/8)·(Bc/16) for P·V,
// each reading a 16 × 8 B fragment (128 elements) from shared memory.
LedgerSet closed_form(const Shape& s, const Tiles& sc, const std::string& kernel) {
  const int64_t BH = s.B * s.H, N = s.N, Nk = s.Nk, d = s.d, Br = sc.Br, Bc = sc.Bc, W = sc.warps();
  const int64_t Tc = num_tiles(Nk, Bc), Tr = num_tiles(N, Br);
  int64_t pairs = 0, masked = 0, diagonal = 0, kv_rows = 0;
  // exps: a row (padding included) that sees a key takes exp2 on every entry of the T visited tiles,
  // masked ones too, and alpha in each of its four lanes on all tiles but the first (m = −inf:
  // [rescale-guard]); a row that sees none takes none.
  int64_t exps = 0;
  for (int64_t i = 0; i < Tr; ++i) {
    const int64_t i0 = i * Br, i1 = std::min(i0 + Br, N), T = kv_tiles_for(i0, i1, N, Nk, Bc, s.causal);
    pairs += T;
    exps += T > 0 ? tile_rows_with_keys(i0, Br, N, Nk, s.causal) * (T * Bc + 4 * (T - 1)) : 0;
    for (int64_t j = 0; j < T; ++j) {
      masked += needs_mask(i0, i1, j * Bc, N, Nk, Bc, s.causal);
      diagonal += classify_tile(i0, i1, j * Bc, std::min((j + 1) * Bc, Nk), N, Nk, s.causal) == TileKind::Diagonal;
      kv_rows += std::min(Bc, Nk - j * Bc);
    }
  }
  const int64_t mmas_pair = W * ((Bc / 8) * (d / 16) + (d / 8) * (Bc / 16));
  LedgerSet ls;
  Ledger& led = ls[kernel];
  led.gmem_read = BH * (N * d * 2 + kv_rows * 2 * d * 2);
  led.gmem_write = BH * (N * d * 2 + N * 4);
  led.smem_write = BH * pairs * 2 * Bc * d * 2;
  led.smem_read = BH * pairs * mmas_pair * 128 * 2;
  led.barriers = BH * pairs * 2;
  led.matmul_flops = BH * pairs * mmas_pair * 2 * 16 * 8 * 16;
  led.nonmatmul_ops = BH * (pairs * W * (16 * Bc * 5 + 48 + 16 * d) + masked * W * 16 * Bc + N * d + 2 * N);
  led.exps = BH * exps;
  led.tiles_computed = BH * pairs;
  led.tiles_masked = BH * diagonal;
  led.tiles_skipped = BH * (Tr * Tc - pairs);
  led.smem_peak = sc.smem_peak;
  return ls;
}

}  // namespace fa::mma_bp
