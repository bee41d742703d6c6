// The warpgroup forward of steps 14–16 (wgmma_forward.hpp).
// [gqa] Query head h reads key/value head kv_head(h). [window] A block visits the K/V tiles of its
// band alone, jbeg .. jbeg + Tcount − 1 (common/kernel/causal.hpp): the schedule counts them from 0 (stages,
// turns, releases), its K and V are views that start at tile jbeg, and the mask takes the tile's
// place in the keys. Without a window jbeg = 0 and this is steps 14 and 15's forward unchanged.
#include "blueprint/wgmma_forward.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include "kernel/causal.hpp"
#include "kernel/wgmma_layout.hpp"

namespace fa::wgmma_bp {

namespace {

namespace mf = fa::m16n8k16;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// One warpgroup across the K/V loop: O as 64-column accumulators, and per warp and lane the
// running max (log2 domain) and the lane's part of the sum, for rows g and g + 8.
struct WarpGroup {
  std::vector<wgmma::Acc> o;                            // [panel]
  std::vector<std::vector<std::array<float, 2>>> m, l;  // [warp][lane][row half]
  wgmma::Acc s{64};                                     // S of tile s_tile (P once its softmax ran)
  std::vector<std::vector<m16n8k16::AFrag>> pa;         // [kk][warp]: P of tile p_tile as A fragments
  int64_t s_tile = -1, p_tile = -1;
};

// Columns of O per P·V wgmma: a 64-column panel (fewer for d < 64, which only the blueprints run).
int64_t panel_cols(int64_t d) { return std::min<int64_t>(d, wgmma::kPanel); }

}  // namespace

void s_product(wgmma::Acc& S, const SmemTile& Qs, int64_t g, const SmemTile& Ks, int64_t d, Ledger& led) {
  for (int64_t kk = 0; kk < d / 16; ++kk) wgmma::mma_ss(S, Qs, 64 * g, Ks, 0, kk, kk > 0, led);
}

void pv_product(std::vector<wgmma::Acc>& O, const std::vector<m16n8k16::AFrag>& pa, const SmemTile& Vs, int64_t kk, Ledger& led) {
  for (size_t pn = 0; pn < O.size(); ++pn) wgmma::mma_rs(O[pn], pa, Vs, kk, O[pn].n * int64_t(pn), true, led);
}

void first_loads(int64_t Tcount, int64_t i0, const Tiles& t, SmemTile& Qs, Stages& kv, const GlobalMat& Q, const GlobalMat& K,
                 const GlobalMat& V) {
  if (Tcount > 0) Qs.load_from(Q, i0, 0);
  const int64_t first = t.loads == Loads::Ring ? std::min(Tcount, t.stages) : std::min<int64_t>(Tcount, 1);
  for (int64_t j = 0; j < first; ++j) {
    kv.k[size_t(j)].load_from(K, j * t.Bc, 0);
    kv.v[size_t(j)].load_from(V, j * t.Bc, 0);
  }
}

BlueprintResult forward(const Shape& s, const Inputs& in, const Tiles& sc, const std::string& kernel, const Ops& ops) {
  if (sc.Br % 64 != 0 || sc.Br <= 0 || sc.Bc % 64 != 0 || sc.Bc > 256 || sc.stages < 2)
    throw std::invalid_argument("wgmma forward: Br a multiple of 64 (a warpgroup each), Bc a multiple of 64 up to 256, two stages or more");
  const auto s_prod = ops.s_product ? ops.s_product : s_product;
  const auto pv_prod = ops.pv_product ? ops.pv_product : pv_product;
  const auto first = ops.first_loads ? ops.first_loads : first_loads;
  const bool ring = sc.loads == Loads::Ring;
  BlueprintResult res;
  res.out.o = Tensor4(s.B, s.H, s.N, s.d);
  res.out.lse = Tensor4(s.B, s.H, s.N, 1);
  Ledger& led = res.ledger[kernel];
  const Store st = Store::of(s.dtype), f32 = Store::f32();
  const int64_t d = s.d, Tc = num_tiles(s.Nk, sc.Bc), Tr = num_tiles(s.N, sc.Br), G = sc.warpgroups();
  const int64_t PC = panel_cols(d), panels = d / PC;
  const float sl2 = static_cast<float>(s.softmax_scale()) * kLog2e;

  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const GlobalMat Q(in.q.head(b, h), s.N, d, d, st, led);
      GlobalMat O(res.out.o.head(b, h), s.N, d, d, st, led), Lse(res.out.lse.head(b, h), 1, s.N, s.N, f32, led);
      for (int64_t it = 0; it < Tr; ++it) {  // a block per Q tile
        const int64_t i0 = it * sc.Br, rows = std::min<int64_t>(sc.Br, s.N - i0);
        Smem smem(sc.smem_budget, led);
        SmemTile Qs = smem.tile(sc.Br, d, st);
        std::optional<SmemTile> own_o;  // [own-o] step 20: a tile of its own for O's staging
        if (sc.own_o) own_o.emplace(smem.tile(sc.Br, d, st));
        SmemTile& Os = own_o ? *own_o : Qs;
        Stages kv;  // [stages]
        for (int64_t stage = 0; stage < sc.stages; ++stage) {
          kv.k.push_back(smem.tile(sc.Bc, d, st));
          kv.v.push_back(smem.tile(sc.Bc, d, st));
        }
        if (ring) {
          smem.tile(1, 256, Store::f32());  // [mbarrier] the 1 KB that holds the barriers (never read by the products)
          barrier(led);                     // the block's one __syncthreads: the barriers are initialized
        }
        std::vector<WarpGroup> wgs(static_cast<size_t>(G));
        for (auto& g : wgs) {
          g.o.assign(size_t(panels), wgmma::Acc(int(PC)));
          g.m.assign(4, std::vector<std::array<float, 2>>(32, {-kInf, -kInf}));
          g.l.assign(4, std::vector<std::array<float, 2>>(32, {0.0f, 0.0f}));
        }
        // [skip] [window] The block's tiles jbeg .. jbeg + Tcount − 1, tile j of the schedule at keys
        // (jbeg + j)·Bc; K and V seen from tile jbeg on.
        const int64_t jbeg = first_kv_tile(i0, i0 + rows, s.N, s.Nk, sc.Bc, s.causal, s.window);
        const int64_t Tcount = kv_tiles_for(i0, i0 + rows, s.N, s.Nk, sc.Bc, s.causal) - jbeg;
        const int64_t kv0 = jbeg * sc.Bc, hk = s.kv_head(h);  // [gqa]
        const GlobalMat K(in.k.head(b, hk) + kv0 * d, s.Nk - kv0, d, d, st, led), V(in.v.head(b, hk) + kv0 * d, s.Nk - kv0, d, d, st, led);
        // [pipeline] Q and tile 0 before the loop, tile j + 1 into the other stage once every warp is
        // past tile j − 1 (the barrier at the top of step j). [producer] Q and the first `stages`
        // tiles, then tile j + stages into the stage tile j freed.
        first(Tcount, i0, sc, Qs, kv, Q, K, V);
        Consumer con;
        // [s-wgmma] S = Q K_jᵀ: per 16 dims one 64 × Bc × 16 wgmma on the warpgroup's Q rows.
        con.s = [&](int64_t g, int64_t j) {
          WarpGroup& wg = wgs[size_t(g)];
          wg.s = wgmma::Acc(int(sc.Bc));
          wg.s_tile = j;
          s_prod(wg.s, Qs, g, kv.k[size_t(j % sc.stages)], d, led);
        };
        con.softmax = [&](int64_t g, int64_t j) {
          WarpGroup& wg = wgs[size_t(g)];
          if (wg.s_tile != j) throw std::logic_error("wgmma forward: the softmax of tile " + std::to_string(j) + " before its S");
          wgmma::Acc& S = wg.s;
          const int64_t j0 = (jbeg + j) * sc.Bc;
          const bool masked = needs_mask(i0, i0 + rows, j0, s.N, s.Nk, sc.Bc, s.causal, s.window);
          for (int w = 0; w < 4; ++w) {
            // [causal-mask] Keys at or past a row's visible count get −inf, on tiles that need it,
            // and [window] keys before its first visible one.
            if (masked)
              for (int lane = 0; lane < 32; ++lane)
                for (int r = 0; r < sc.Bc / 2; ++r) {
                  const mf::Coord c = wgmma::acc_elem(w, lane, r);
                  if (!key_visible(i0 + 64 * g + c.row, j0 + c.col, s.N, s.Nk, s.causal, s.window)) S.reg(w, lane, r) = -kInf;
                }
            // [softmax-regs] Step 12's, on the warp's 16 rows: the row max over the four lanes of
            // a group, scaled once into the log2 domain; p = exp2(s·scale·log2 e − m).
            std::vector<std::array<float, 2>> gmax(32, {-kInf, -kInf});
            for (int lane = 0; lane < 32; ++lane)
              for (int hr = 0; hr < 2; ++hr)
                for (int q = 4 * mf::group(lane); q < 4 * mf::group(lane) + 4; ++q)
                  for (int n = 0; n < sc.Bc / 8; ++n)
                    gmax[size_t(lane)][size_t(hr)] =
                        std::max({gmax[size_t(lane)][size_t(hr)], S.reg(w, q, 4 * n + 2 * hr), S.reg(w, q, 4 * n + 2 * hr + 1)});
            int fma_groups = 0;  // [exp2-poly] a row's column groups whose exponentials run on the FMA units
            for (int n = 0; n < sc.Bc / 8; ++n) fma_groups += ops.exp2_on_fma && ops.exp2_on_fma(n);
            for (int lane = 0; lane < 32; ++lane)
              for (int hr = 0; hr < 2; ++hr) {
                float& m = wg.m[size_t(w)][size_t(lane)][size_t(hr)];
                const float m_new = std::max(m, gmax[size_t(lane)][size_t(hr)] * sl2);
                // [lazy-rescale] A row keeps its max unless the hook says to take the new one (always without it).
                const bool take = ops.takes_new_max ? ops.takes_new_max(m, m_new) : true;
                if (ops.row_tiles && mf::thread_in_group(lane) == 0) ++*ops.row_tiles, *ops.rescales += take;
                const float m_use = !take ? m : m_new == -kInf ? 0.0f : m_new;  // [rescale-guard]
                const float alpha = take ? std::exp2(m - m_use) : 1.0f;
                led.exps += 1 + 2 * (sc.Bc / 8 - fma_groups);  // alpha and the lane's p of the row: no guard, every tile
                led.fma_exps += 2 * fma_groups;
                led.nonmatmul_ops += 2 * fma_groups * ops.fma_ops_per_exp;
                if (take) m = m_new;
                float rs = 0.0f;
                for (int n = 0; n < sc.Bc / 8; ++n)
                  for (int e = 0; e < 2; ++e) {
                    float& v = S.reg(w, lane, 4 * n + 2 * hr + e);
                    v = ops.exp2 ? ops.exp2(n, std::fma(v, sl2, -m_use)) : std::exp2(std::fma(v, sl2, -m_use));
                    rs += v;
                  }
                float& l = wg.l[size_t(w)][size_t(lane)][size_t(hr)];
                l = l * alpha + rs;
                for (auto& op : wg.o)  // [deferred] Õ *= alpha for the row
                  for (int n = 0; n < op.n / 8; ++n) op.reg(w, lane, 4 * n + 2 * hr) *= alpha, op.reg(w, lane, 4 * n + 2 * hr + 1) *= alpha;
              }
            led.nonmatmul_ops += 16 * sc.Bc * (masked ? 6 : 5) + 3 * 16 + 16 * d;
          }
          // [c-to-a] P in the storage type, as each warp's A fragment of 16 keys (per kk).
          wg.pa.assign(size_t(sc.Bc / 16), std::vector<mf::AFrag>(4, mf::AFrag(32)));
          for (int64_t kk = 0; kk < sc.Bc / 16; ++kk)
            for (int w = 0; w < 4; ++w)
              for (int lane = 0; lane < 32; ++lane)
                for (int i = 0; i < 8; ++i)
                  wg.pa[size_t(kk)][size_t(w)][size_t(lane)][size_t(i)] =
                      round_to(s.dtype, S.reg(w, lane, 4 * int(2 * kk + mf::a_from_c_tile(i)) + mf::a_from_c_elem(i)));
          wg.p_tile = j;
        };
        // [pv-wgmma] Õ += P V_j: per 16 keys and per panel of O one wgmma with P from registers.
        con.pv = [&](int64_t g, int64_t j) {
          WarpGroup& wg = wgs[size_t(g)];
          if (wg.p_tile != j) throw std::logic_error("wgmma forward: P·V of tile " + std::to_string(j) + " without its P");
          for (int64_t kk = 0; kk < sc.Bc / 16; ++kk) pv_prod(wg.o, wg.pa[size_t(kk)], kv.v[size_t(j % sc.stages)], kk, led);
        };
        // [consumer] ring: every warpgroup arrived on empty(stage of tile j); [producer] refills it
        // with tile j + stages.
        con.release = [&](int64_t j) {
          if (!ring) throw std::logic_error("wgmma forward: release is the ring's");
          const size_t stage = size_t(j % sc.stages);
          if (j + sc.stages < Tcount) {
            kv.k[stage].load_from(K, (j + sc.stages) * sc.Bc, 0);
            kv.v[stage].load_from(V, (j + sc.stages) * sc.Bc, 0);
          }
        };
        if (ops.turns) {
          if (!ring) throw std::invalid_argument("wgmma forward: turns need the producer's ring");
          ops.turns(Tcount, G, con);
        } else {
          for (int64_t j = 0; j < Tcount; ++j) {
            if (!ring) {
              barrier(led);  // after the wait for tile j
              if (j + 1 < Tcount) {
                kv.k[size_t((j + 1) % sc.stages)].load_from(K, (j + 1) * sc.Bc, 0);
                kv.v[size_t((j + 1) % sc.stages)].load_from(V, (j + 1) * sc.Bc, 0);
              }
            }
            for (int64_t g = 0; g < G; ++g) con.s(g, j), con.softmax(g, j), con.pv(g, j);
            if (ring) con.release(j);
          }
        }
        for (int64_t j = 0; j < Tcount; ++j) {
          const int64_t j0 = (jbeg + j) * sc.Bc;
          led.tiles_computed += 1;
          led.tiles_masked += classify_tile(i0, i0 + rows, j0, std::min(j0 + sc.Bc, s.Nk), s.N, s.Nk, s.causal, s.window) ==
                              TileKind::Diagonal;
        }
        led.tiles_skipped += Tc - Tcount;
        // [o-staging] every warpgroup has read Q before O is written over it: a block-wide barrier
        // (pipeline) or each consumer warpgroup's own named barrier (ring, not counted).
        if (!ring) barrier(led);
        // [final-divide] l summed over the group's four lanes; O = Õ / l into the warp's rows of
        // the Q tile; L = (m + log2 l)·ln 2; then the tile out to HBM, the rows inside N.
        for (int64_t g = 0; g < G; ++g)
          for (int w = 0; w < 4; ++w) {
            const WarpGroup& wg = wgs[size_t(g)];
            for (int lane = 0; lane < 32; ++lane) {
              const int g0 = 4 * mf::group(lane);
              float lsum[2];
              for (int hr = 0; hr < 2; ++hr)
                lsum[hr] = (wg.l[size_t(w)][size_t(g0)][size_t(hr)] + wg.l[size_t(w)][size_t(g0 + 1)][size_t(hr)]) +
                           (wg.l[size_t(w)][size_t(g0 + 2)][size_t(hr)] + wg.l[size_t(w)][size_t(g0 + 3)][size_t(hr)]);
              for (int64_t pn = 0; pn < panels; ++pn)
                for (int r = 0; r < int(PC) / 2; ++r) {
                  const mf::Coord c = wgmma::acc_elem(w, lane, r);
                  const int64_t row = 64 * g + c.row;  // in the tile
                  const float li = lsum[(r % 4) / 2];
                  Os.write(row, PC * pn + c.col, li > 0.0f ? wg.o[size_t(pn)].reg(w, lane, r) * (1.0f / li) : 0.0f);
                  if (i0 + row < s.N) ++led.nonmatmul_ops;
                }
              if (mf::thread_in_group(lane) == 0)
                for (int hr = 0; hr < 2; ++hr) {
                  const int64_t row = i0 + 64 * g + 16 * w + mf::group(lane) + 8 * hr;
                  if (row >= s.N) continue;
                  const float m = wg.m[size_t(w)][size_t(lane)][size_t(hr)];
                  Lse.store(0, row, lsum[hr] > 0.0f ? (m + std::log2(lsum[hr])) * kLn2 : kInf);
                  led.nonmatmul_ops += 2;
                }
            }
          }
        Os.store_to(O, i0, 0);
      }
    }
  return res;
}

// The ledger in closed form. One (b, h): Tr = ⌈N/Br⌉ blocks; block i visits its K/V tiles
// first_kv_tile .. T_i − 1 (from 0 without a window), `pairs` in all, `masked` of them with the per-element mask; `qtiles` blocks load Q. Per
// pair and warpgroup: d/16 wgmmas of S reading 64·16 elements of Q and Bc·16 of K each, Bc/16 · d/64
// wgmmas of P·V reading 16·64 elements of V each — every K/V element once per warpgroup, where
// step 12 read it once per warp; 2·(2·64·Bc·d) FLOPs. Barriers: Pipeline one per pair and one per
// block before O is staged; Ring one per block (the mbarriers' handshakes are not block-wide).
LedgerSet closed_form(const Shape& s, const Tiles& sc, const std::string& kernel) {
  const int64_t BH = s.B * s.H, N = s.N, Nk = s.Nk, d = s.d, Br = sc.Br, Bc = sc.Bc, G = sc.warpgroups(), W = 4 * G;
  const int64_t Tc = num_tiles(Nk, Bc), Tr = num_tiles(N, Br);
  int64_t pairs = 0, masked = 0, diagonal = 0, kv_rows = 0, qtiles = 0, q_rows = 0;
  for (int64_t i = 0; i < Tr; ++i) {
    const int64_t i0 = i * Br, i1 = std::min(i0 + Br, N), T = kv_tiles_for(i0, i1, N, Nk, Bc, s.causal);
    const int64_t first = first_kv_tile(i0, i1, N, Nk, Bc, s.causal, s.window);  // [window]
    pairs += T - first;
    qtiles += T > first;
    if (T > first) q_rows += i1 - i0;
    for (int64_t j = first; j < T; ++j) {
      masked += needs_mask(i0, i1, j * Bc, N, Nk, Bc, s.causal, s.window);
      diagonal += classify_tile(i0, i1, j * Bc, std::min((j + 1) * Bc, Nk), N, Nk, s.causal, s.window) == TileKind::Diagonal;
      kv_rows += std::min(Bc, Nk - j * Bc);
    }
  }
  LedgerSet ls;
  Ledger& led = ls[kernel];
  led.gmem_read = BH * (q_rows * d * 2 + kv_rows * 2 * d * 2);
  led.gmem_write = BH * (N * d * 2 + N * 4);
  led.smem_write = BH * (qtiles * Br * d * 2 + pairs * 2 * Bc * d * 2 + Tr * Br * d * 2);
  led.smem_read = BH * (pairs * G * ((64 + Bc) * d + Bc * d) * 2 + N * d * 2);
  led.barriers = BH * (sc.loads == Loads::Ring ? Tr : pairs + Tr);
  led.matmul_flops = BH * pairs * G * 2 * (2 * 64 * Bc * d);
  led.nonmatmul_ops = BH * (pairs * W * (16 * Bc * 5 + 48 + 16 * d) + masked * W * 16 * Bc + N * d + 2 * N);
  // exps: step 12's, every entry of every visited tile (masked ones too) and alpha in each of a
  // row's four lanes on every tile.
  led.exps = BH * pairs * Br * (Bc + 4);
  led.tiles_computed = BH * pairs;
  led.tiles_masked = BH * diagonal;
  led.tiles_skipped = BH * (Tr * Tc - pairs);
  led.smem_peak = sc.smem_peak;
  return ls;
}


}  // namespace fa::wgmma_bp
