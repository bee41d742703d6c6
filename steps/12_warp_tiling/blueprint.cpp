// Step 12 — the blueprint: the kernel's schedule on the CPU. Q in shared memory, K/V tiles in two
// stages with tile j + 1 loaded while tile j is multiplied (one barrier per tile), each warp
// owning Br/W rows as m16 tiles that share every K/V fragment, every fragment read as ldmatrix.x4,
// O staged through shared memory on its way out. (The kernel's reversed block order changes
// when blocks run, not what they compute.) [ablation] The ablations that change the ledger are
// followed: their tiles (schedule_for(d, a)), kNoOStage (O stored from registers) and kNoOneBarrier.
// [dropout] With --dropout P, P·V's operand is p·keep/(1 − P), keep drawn element by element by
// dropout_keep (common/kernel/dropout.hpp) — the kernel draws the same bits a 2 × 2 block at a time.
// [gqa] Query head h reads key/value head kv_head(h). [window] A block visits its K/V tiles from
// first_kv_tile on (common/kernel/causal.hpp), as the kernel does; the tiles left of its band are skipped.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernel/dropout.hpp"
#include "blueprint/mma_emu.hpp"
#include "schedule.hpp"

namespace fa::step12 {

namespace {

namespace mf = fa::m16n8k16;
constexpr float kInf = std::numeric_limits<float>::infinity();

using mf::AFrag;
using mf::BFrag;
using mf::CFrag;

// One m16 row tile of a warp, across the K/V loop.
struct RowTile {
  std::vector<CFrag> o;                    // [D/8]
  std::vector<std::array<float, 2>> m, l;  // [lane][row half]: running max (log2 domain), lane's part of the sum
};

}  // namespace

BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sc, int ablation) {
  if (!valid(sc)) throw std::invalid_argument("step12: Br must be a multiple of 16·W and Bc of 16");
  require_dropout_supported(float(s.dropout), ablation);
  BlueprintResult res;
  res.out.o = Tensor4(s.B, s.H, s.N, s.d);
  res.out.lse = Tensor4(s.B, s.H, s.N, 1);
  Ledger& led = res.ledger["warp_tiling"];
  const Store st = Store::of(s.dtype), f32 = Store::f32();
  const int64_t d = s.d, Tc = num_tiles(s.Nk, sc.Bc), Tr = num_tiles(s.N, sc.Br), W = sc.warps(), MT = sc.mtiles();
  const float sl2 = static_cast<float>(s.softmax_scale()) * kLog2e;
  // [dropout] P as the kernel gets it (a float), and the threshold and factor it derives from it.
  const float p_drop = float(s.dropout);
  const bool drop = p_drop > 0.0f;
  const uint32_t threshold = dropout_threshold(p_drop);
  const float rescale = dropout_rescale(p_drop);

  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const GlobalMat Q(in.q.head(b, h), s.N, d, d, st, led), K(in.k.head(b, s.kv_head(h)), s.Nk, d, d, st, led),
          V(in.v.head(b, s.kv_head(h)), s.Nk, d, d, st, led);
      GlobalMat O(res.out.o.head(b, h), s.N, d, d, st, led), Lse(res.out.lse.head(b, h), 1, s.N, s.N, f32, led);
      for (int64_t it = 0; it < Tr; ++it) {  // a block per Q tile
        const int64_t i0 = it * sc.Br, rows = std::min<int64_t>(sc.Br, s.N - i0);
        Smem smem(kSmemBudget, led);
        SmemTile Qs = smem.tile(sc.Br, d, st);
        std::vector<SmemTile> Ks, Vs;  // [stages]
        for (int stage = 0; stage < kStages; ++stage) {
          Ks.push_back(smem.tile(sc.Bc, d, st));
          Vs.push_back(smem.tile(sc.Bc, d, st));
        }
        std::vector<RowTile> tiles(size_t(W * MT));  // warp w's m16 tile mt at w·MT + mt
        for (auto& t : tiles) {
          t.o.assign(size_t(d / 8), CFrag(32, {0, 0, 0, 0}));
          t.m.assign(32, {-kInf, -kInf});
          t.l.assign(32, {0.0f, 0.0f});
        }
        const int64_t Tend = kv_tiles_for(i0, i0 + rows, s.N, s.Nk, sc.Bc, s.causal);  // [skip]
        const int64_t jbeg = first_kv_tile(i0, i0 + rows, s.N, s.Nk, sc.Bc, s.causal, s.window);  // [window]
        // [pipeline] Q and the first tile before the loop; tile j + 1 into the other stage once every
        // warp is past tile j − 1 (the barrier at the top of step j).
        if (Tend > jbeg) {
          Qs.load_from(Q, i0, 0);
          Ks[size_t(jbeg % kStages)].load_from(K, jbeg * sc.Bc, 0);
          Vs[size_t(jbeg % kStages)].load_from(V, jbeg * sc.Bc, 0);
        }
        for (int64_t j = jbeg; j < Tend; ++j) {
          const int64_t j0 = j * sc.Bc;
          const size_t stage = size_t(j % kStages);
          barrier(led);  // after the wait for tile j
          if (j + 1 < Tend) {
            Ks[size_t((j + 1) % kStages)].load_from(K, j0 + sc.Bc, 0);
            Vs[size_t((j + 1) % kStages)].load_from(V, j0 + sc.Bc, 0);
          }
          const bool masked = needs_mask(i0, i0 + rows, j0, s.N, s.Nk, sc.Bc, s.causal, s.window);
          for (int64_t w = 0; w < W; ++w) {
            const int64_t w0 = w * (sc.Br / W);  // the warp's first row in the tile
            // [s-regs] S = Q K_jᵀ: per 16 dims, each m16 tile's A fragment (ldmatrix.x4 of Q), then
            // per pair of key blocks one ldmatrix.x4 of K, used by every m16 tile of the warp.
            std::vector<std::vector<CFrag>> sf(size_t(MT), std::vector<CFrag>(size_t(sc.Bc / 8), CFrag(32, {0, 0, 0, 0})));
            // lab:begin warp-tiles-s {O L}: [m16-pair] + [x4]: per 16 dims, the A fragment of each of …
            for (int64_t kk = 0; kk < d / 16; ++kk) {
              std::vector<AFrag> qa;
              for (int64_t mt = 0; mt < MT; ++mt) qa.push_back(mf::ldmatrix_x4_a(Qs, w0 + 16 * mt, 16 * kk));
              for (int64_t np = 0; np < sc.Bc / 16; ++np) {
                const std::array<BFrag, 2> kb = mf::ldmatrix_x4_b(Ks[stage], 16 * np, 16 * kk, false);
                for (int64_t mt = 0; mt < MT; ++mt) {
                  mf::mma(sf[size_t(mt)][size_t(2 * np)], qa[size_t(mt)], kb[0], led);
                  mf::mma(sf[size_t(mt)][size_t(2 * np + 1)], qa[size_t(mt)], kb[1], led);
                }
              }
            }
            // lab:end
            for (int64_t mt = 0; mt < MT; ++mt) {
              RowTile& rt = tiles[size_t(w * MT + mt)];
              std::vector<CFrag>& S = sf[size_t(mt)];
              const int64_t r0 = i0 + w0 + 16 * mt;
              // [causal-mask] Keys at or past a row's visible count get −inf, on tiles that need it,
              // and [window] keys before its first visible one.
              if (masked)
                for (int64_t n = 0; n < sc.Bc / 8; ++n)
                  for (int lane = 0; lane < 32; ++lane)
                    for (int e = 0; e < 4; ++e) {
                      const mf::Coord c = mf::c_elem(lane, e);
                      if (!key_visible(r0 + c.row, j0 + 8 * n + c.col, s.N, s.Nk, s.causal, s.window))
                        S[size_t(n)][size_t(lane)][size_t(e)] = -kInf;
                    }
              // [softmax-regs] Row max of the raw scores over the four lanes of a group, scaled once
              // into the log2 domain; p = exp2(s·scale·log2 e − m).
              std::vector<std::array<float, 2>> gmax(32, {-kInf, -kInf});  // every lane's, before any p replaces an s
              for (int lane = 0; lane < 32; ++lane)
                for (int hr = 0; hr < 2; ++hr)
                  for (int q = 4 * mf::group(lane); q < 4 * mf::group(lane) + 4; ++q)
                    for (int64_t n = 0; n < sc.Bc / 8; ++n)
                      gmax[size_t(lane)][size_t(hr)] = std::max({gmax[size_t(lane)][size_t(hr)], S[size_t(n)][size_t(q)][size_t(2 * hr)],
                                                                 S[size_t(n)][size_t(q)][size_t(2 * hr + 1)]});
              for (int lane = 0; lane < 32; ++lane)
                for (int hr = 0; hr < 2; ++hr) {
                  const float mx = gmax[size_t(lane)][size_t(hr)];
                  float& m = rt.m[size_t(lane)][size_t(hr)];
                  const float m_new = std::max(m, mx * sl2);
                  const float m_use = m_new == -kInf ? 0.0f : m_new;  // [rescale-guard]
                  const float alpha = std::exp2(m - m_use);
                  led.exps += 1 + 2 * (sc.Bc / 8);  // alpha and the lane's p of the row: no guard, every tile
                  m = m_new;
                  float rs = 0.0f;
                  for (int64_t n = 0; n < sc.Bc / 8; ++n)
                    for (int e = 0; e < 2; ++e) {
                      float& v = S[size_t(n)][size_t(lane)][size_t(2 * hr + e)];
                      v = std::exp2(std::fma(v, sl2, -m_use));
                      rs += v;
                    }
                  float& l = rt.l[size_t(lane)][size_t(hr)];
                  l = l * alpha + rs;
                  for (auto& on : rt.o) on[size_t(lane)][size_t(2 * hr)] *= alpha, on[size_t(lane)][size_t(2 * hr + 1)] *= alpha;  // [deferred]
                }
              led.nonmatmul_ops += 16 * sc.Bc * (masked ? 6 : 5) + 3 * 16 + 16 * d;
              // [dropout] Two per weight: the keep test (word >= threshold, a compare and select,
              // counted once like the mask's) and the multiply by 1/(1 − P). Philox's integer work
              // (10 rounds of two 32 × 32 -> 64-bit products and XORs per four weights) is not
              // counted: this count is of the scalar work on S and P; docs/12 gives its instructions.
              if (drop) led.nonmatmul_ops += 2 * 16 * sc.Bc;
            }
            // [c-to-a] P in the storage type as the A fragment, then [pv] Õ += P V_j: per 16 dims
            // one ldmatrix.x4.trans of V, used by every m16 tile. [dropout] Each weight times
            // keep/(1 − P) first, after the row sums took it undropped (l, m, L: the softmax's).
            for (int64_t kk = 0; kk < sc.Bc / 16; ++kk) {
              std::vector<AFrag> pa(size_t(MT), AFrag(32));
              for (int64_t mt = 0; mt < MT; ++mt)
                for (int lane = 0; lane < 32; ++lane)
                  for (int i = 0; i < 8; ++i) {
                    const int tile = mf::a_from_c_tile(i), e = mf::a_from_c_elem(i);
                    float v = sf[size_t(mt)][size_t(2 * kk + tile)][size_t(lane)][size_t(e)];
                    if (drop) {
                      const mf::Coord c = mf::c_elem(lane, e);
                      const int64_t row = i0 + w0 + 16 * mt + c.row, key = j0 + 16 * kk + 8 * tile + c.col;
                      v = dropout_keep(s.dropout_seed, s.dropout_offset, b * s.H + h, row, key, threshold) ? v * rescale : 0.0f;
                    }
                    pa[size_t(mt)][size_t(lane)][size_t(i)] = round_to(s.dtype, v);
                  }
              // lab:begin warp-tiles-pv {O}: [pv] + [x4]: per 16 dims one ldmatrix_x4_b …
              for (int64_t np = 0; np < d / 16; ++np) {
                const std::array<BFrag, 2> vb = mf::ldmatrix_x4_b(Vs[stage], 16 * kk, 16 * np, true);
                for (int64_t mt = 0; mt < MT; ++mt) {
                  RowTile& rt = tiles[size_t(w * MT + mt)];
                  mf::mma(rt.o[size_t(2 * np)], pa[size_t(mt)], vb[0], led);
                  mf::mma(rt.o[size_t(2 * np + 1)], pa[size_t(mt)], vb[1], led);
                }
              }
              // lab:end
            }
          }
          if (ablation == kNoOneBarrier) barrier(led);  // [ablation]
          led.tiles_computed += 1;
          led.tiles_masked += classify_tile(i0, i0 + rows, j0, std::min(j0 + sc.Bc, s.Nk), s.N, s.Nk, s.causal, s.window) ==
                            TileKind::Diagonal;
        }
        led.tiles_skipped += Tc - (Tend - jbeg);
        // [final-divide] l summed over the group's four lanes; O = Õ / l; L = (m + log2 l)·ln 2.
        for (int64_t w = 0; w < W; ++w)
          for (int64_t mt = 0; mt < MT; ++mt) {
            const RowTile& rt = tiles[size_t(w * MT + mt)];
            const int64_t r0 = i0 + w * (sc.Br / W) + 16 * mt;
            for (int lane = 0; lane < 32; ++lane) {
              const int g0 = 4 * mf::group(lane);
              float lsum[2];
              for (int hr = 0; hr < 2; ++hr)
                lsum[hr] = (rt.l[size_t(g0)][size_t(hr)] + rt.l[size_t(g0 + 1)][size_t(hr)]) +
                           (rt.l[size_t(g0 + 2)][size_t(hr)] + rt.l[size_t(g0 + 3)][size_t(hr)]);
              for (int64_t n = 0; n < d / 8; ++n)
                for (int e = 0; e < 4; ++e) {
                  const mf::Coord c = mf::c_elem(lane, e);
                  const int64_t row = r0 + c.row;
                  const float li = lsum[e / 2];
                  const float x = li > 0.0f ? rt.o[size_t(n)][size_t(lane)][size_t(e)] * (1.0f / li) : 0.0f;
                  if (ablation == kNoOStage) {  // [ablation] straight from registers, the rows inside N
                    if (row < s.N) O.store(row, 8 * n + c.col, x);
                  } else {
                    Qs.write(row - i0, 8 * n + c.col, x);  // [o-staging] into the warp's rows of the Q tile (every row)
                  }
                  if (row < s.N) ++led.nonmatmul_ops;
                }
              if (mf::thread_in_group(lane) == 0)
                for (int hr = 0; hr < 2; ++hr) {
                  const int64_t row = r0 + mf::group(lane) + 8 * hr;
                  if (row >= s.N) continue;
                  const float m = rt.m[size_t(lane)][size_t(hr)];
                  Lse.store(0, row, lsum[hr] > 0.0f ? (m + std::log2(lsum[hr])) * kLn2 : kInf);
                  led.nonmatmul_ops += 2;
                }
            }
          }
        // [o-staging] ... then out to HBM in 16-byte chunks, the rows inside N.
        if (ablation != kNoOStage) Qs.store_to(O, i0, 0);
      }
    }
  return res;
}

// The ledger in closed form (docs/12_warp_tiling.md). One (b, h): Tr = ⌈N/Br⌉ blocks; block i visits
// its K/V tiles first_kv_tile .. T_i − 1 (all Tc without a mask; from 0 without a window), `pairs` in all; `masked` of them need the
// per-element mask; `qtiles` blocks visit any tile and so load Q. Every block stages its O tile
// through shared memory (Br·d written, the N·d rows inside N read back). Per pair and warp: MT·(d/16)
// A fragments of Q (256 elements each), (Bc/16)·(d/16) ldmatrix.x4 of K and as many of V (256
// elements each), and MT·((Bc/8)·(d/16) + (d/8)·(Bc/16)) products. [dropout] adds two scalar
// operations per weight of every pair (16·Bc per m16 tile), Philox's integer work uncounted.
LedgerSet closed_form(const Shape& s, const Schedule& sc, int ablation) {
  require_dropout_supported(float(s.dropout), ablation);
  const int64_t BH = s.B * s.H, N = s.N, Nk = s.Nk, d = s.d, Br = sc.Br, Bc = sc.Bc, W = sc.warps(), MT = sc.mtiles();
  const int64_t Tc = num_tiles(Nk, Bc), Tr = num_tiles(N, Br);
  int64_t pairs = 0, masked = 0, diagonal = 0, kv_rows = 0, qtiles = 0;
  for (int64_t i = 0; i < Tr; ++i) {
    const int64_t i0 = i * Br, i1 = std::min(i0 + Br, N), T = kv_tiles_for(i0, i1, N, Nk, Bc, s.causal);
    const int64_t first = first_kv_tile(i0, i1, N, Nk, Bc, s.causal, s.window);  // [window]
    pairs += T - first;
    qtiles += T > first;
    for (int64_t j = first; j < T; ++j) {
      masked += needs_mask(i0, i1, j * Bc, N, Nk, Bc, s.causal, s.window);
      diagonal += classify_tile(i0, i1, j * Bc, std::min((j + 1) * Bc, Nk), N, Nk, s.causal, s.window) == TileKind::Diagonal;
      kv_rows += std::min(Bc, Nk - j * Bc);
    }
  }
  int64_t q_rows = 0;  // rows of Q read from HBM: those of the blocks that load Q, inside N
  for (int64_t i = 0; i < Tr; ++i) {
    const int64_t i0 = i * Br, i1 = std::min(i0 + Br, N);
    if (kv_tiles_for(i0, i1, N, Nk, Bc, s.causal) > first_kv_tile(i0, i1, N, Nk, Bc, s.causal, s.window)) q_rows += i1 - i0;
  }
  const int64_t mmas_pair = W * MT * ((Bc / 8) * (d / 16) + (d / 8) * (Bc / 16));
  LedgerSet ls;
  Ledger& led = ls["warp_tiling"];
  led.gmem_read = BH * (q_rows * d * 2 + kv_rows * 2 * d * 2);
  led.gmem_write = BH * (N * d * 2 + N * 4);
  led.smem_write = BH * (qtiles * Br * d * 2 + pairs * 2 * Bc * d * 2 + Tr * Br * d * 2);
  led.smem_read = BH * (pairs * W * (MT * (d / 16) + 2 * (Bc / 16) * (d / 16)) * 256 * 2 + N * d * 2);
  led.barriers = BH * pairs;
  led.matmul_flops = BH * pairs * mmas_pair * 2 * 16 * 8 * 16;
  const int64_t drop_ops = float(s.dropout) > 0.0f ? 2 * 16 * Bc : 0;  // [dropout] per m16 tile and pair
  led.nonmatmul_ops = BH * (pairs * W * MT * (16 * Bc * 5 + 48 + 16 * d + drop_ops) + masked * W * MT * 16 * Bc + N * d + 2 * N);
  // exps: every entry of every visited tile, masked ones too (exp2(−inf) = 0), and alpha in each of
  // a row's four lanes on every tile (the m_use guard keeps the exp2: [rescale-guard]); dropout adds none.
  led.exps = BH * pairs * Br * (Bc + 4);
  led.tiles_computed = BH * pairs;
  led.tiles_masked = BH * diagonal;
  led.tiles_skipped = BH * (Tr * Tc - pairs);
  led.smem_peak = smem_bytes(sc, int(d));
  if (ablation == kNoOStage) led.smem_write -= BH * Tr * Br * d * 2, led.smem_read -= BH * N * d * 2;  // [ablation]
  if (ablation == kNoOneBarrier) led.barriers += BH * pairs;
  return ls;
}

namespace {
BlueprintResult run_blueprint(const Shape& s, const Inputs& in, const StepOptions& o) {
  const int a = ablation_of(o);
  return blueprint(s, in, schedule_for(int(s.d), a), a);
}
LedgerSet run_closed_form(const Shape& s, const StepOptions& o) {
  const int a = ablation_of(o);
  return closed_form(s, schedule_for(int(s.d), a), a);
}
// [arch] Shared memory per block (schedule.hpp), held against the GPU's limit before a launch.
int64_t run_smem_bytes(const Shape& s, const StepOptions& o) {
  return smem_bytes(schedule_for(int(s.d), ablation_of(o)), int(s.d));
}
}  // namespace

int ablation_of(const StepOptions& opts) { return choice_index(opts, "ablate", kAblationNames, kAblations, "step12"); }

const StepInfo& info() {
  static const StepInfo step = [] {
    StepInfo i;
    i.id = "12";
    i.slug = "warp_tiling";
    i.title = "warp tiling: 32 rows per warp share every K/V fragment; ldmatrix.x4, one barrier per tile, tiles per head dimension";
    i.teaches = "warp tiling and the tuning that reaches FlashAttention-2";
    i.mma_unit = MmaUnit::mma_sync;  // [mma-unit]
    {
      StepFlag f{"ablate", {}, "take one of this step's changes out, to measure what it buys (fp16, d = 64 and 128): "
                               "order, exp2, ostage, barrier, tiles, rows, x4 (docs/12_warp_tiling.md)"};
      for (const char* n : kAblationNames) f.choices.push_back(n);
      f.sweep = false;  // an experiment, not a variant: the tour, bench and the shape-matrix tests leave it out
      i.flags = {f};
    }
    i.blueprint = run_blueprint;
    i.closed_form = run_closed_form;
    i.smem_bytes = run_smem_bytes;
    i.supports_dropout = true;  // [dropout] the full step only; --ablate with it is refused
    i.supports_gqa = true;      // [gqa]
    i.supports_window = true;   // [window]
    i.min_cc = 80;
    i.needs = "mma.sync.m16n8k16 and cp.async";
#ifdef FA_HAVE_CUDA
    i.launch = launch;
    i.workspace_bytes = workspace_bytes;
#endif
    i.kernel_prefix = "step12_";
    return i;
  }();
  return step;
}

}  // namespace fa::step12
