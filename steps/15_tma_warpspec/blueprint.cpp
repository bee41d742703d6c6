// Step 15 — the blueprint: the kernel's roles on the CPU. The producer fills a ring of `stages` K/V
// stages — the first `stages` tiles at once, then tile j + stages into the stage tile j freed —
// and the two consumer warpgroups run step 14's products and softmax on each tile in turn; the
// only block-wide barrier is the one after the mbarriers are set up. (The handshake that orders a
// fill after the consumers' release and a product after the fill — the stage's empty and full
// mbarriers — is what this sequential loop gets for free; docs/15_tma_warpspec.md draws it.)
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "schedule.hpp"
#include "wgmma_emu.hpp"

namespace fa::step15 {

namespace {

namespace mf = fa::m16n8k16;
constexpr float kInf = std::numeric_limits<float>::infinity();

// One warpgroup across the K/V loop: O as 64-column accumulators, and per warp and lane the
// running max (log2 domain) and the lane's part of the sum, for rows g and g + 8.
struct WarpGroup {
  std::vector<wgmma::Acc> o;                            // [panel]
  std::vector<std::vector<std::array<float, 2>>> m, l;  // [warp][lane][row half]
};

// Columns of O per P·V wgmma: a 64-column panel (fewer for d < 64, which only the blueprint runs).
int64_t panel_cols(int64_t d) { return std::min<int64_t>(d, wgmma::kPanel); }

}  // namespace

BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sc) {
  if (!valid(sc)) throw std::invalid_argument("step15: two consumer warpgroups (Br = 128), Bc a multiple of 64 up to 128, two stages or more");
  BlueprintResult res;
  res.out.o = Tensor4(s.B, s.H, s.N, s.d);
  res.out.lse = Tensor4(s.B, s.H, s.N, 1);
  Ledger& led = res.ledger["tma_warpspec"];
  const Store st = Store::of(s.dtype), f32 = Store::f32();
  const int64_t d = s.d, Tc = num_tiles(s.Nk, sc.Bc), Tr = num_tiles(s.N, sc.Br), G = sc.consumers();
  const int64_t PC = panel_cols(d), panels = d / PC;
  const float sl2 = static_cast<float>(s.softmax_scale()) * kLog2e;

  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const GlobalMat Q(in.q.head(b, h), s.N, d, d, st, led), K(in.k.head(b, h), s.Nk, d, d, st, led),
          V(in.v.head(b, h), s.Nk, d, d, st, led);
      GlobalMat O(res.out.o.head(b, h), s.N, d, d, st, led), Lse(res.out.lse.head(b, h), 1, s.N, s.N, f32, led);
      for (int64_t it = 0; it < Tr; ++it) {  // a block per Q tile
        const int64_t i0 = it * sc.Br, rows = std::min<int64_t>(sc.Br, s.N - i0);
        Smem smem(kSmemBudget, led);
        SmemTile Qs = smem.tile(sc.Br, d, st);
        std::vector<SmemTile> Ks, Vs;  // [stages]
        for (int stage = 0; stage < sc.stages; ++stage) {
          Ks.push_back(smem.tile(sc.Bc, d, st));
          Vs.push_back(smem.tile(sc.Bc, d, st));
        }
        smem.tile(1, 256, Store::f32());  // [mbarrier] the 1 KB that holds the barriers (never read by the products)
        barrier(led);                     // the block's one __syncthreads: the barriers are initialized
        std::vector<WarpGroup> wgs(static_cast<size_t>(G));
        for (auto& g : wgs) {
          g.o.assign(size_t(panels), wgmma::Acc(int(PC)));
          g.m.assign(4, std::vector<std::array<float, 2>>(32, {-kInf, -kInf}));
          g.l.assign(4, std::vector<std::array<float, 2>>(32, {0.0f, 0.0f}));
        }
        const int64_t Tend = kv_tiles_for(i0, i0 + rows, s.N, s.Nk, sc.Bc, s.causal);  // [skip]
        // [producer] Q once, then the first `stages` tiles into the ring before any is consumed.
        // lab:begin producer-ring: [producer]: Q, then tiles 0 .. stages − 1 into stages 0 .. stages − 1 (only tiles below Tend); the refill of a freed stage comes after the consumers (docs/15_tma_warpspec.md)
        if (Tend > 0) Qs.load_from(Q, i0, 0);
        for (int64_t j = 0; j < std::min<int64_t>(Tend, sc.stages); ++j) {
          Ks[size_t(j)].load_from(K, j * sc.Bc, 0);
          Vs[size_t(j)].load_from(V, j * sc.Bc, 0);
        }
        // lab:end
        for (int64_t j = 0; j < Tend; ++j) {
          const int64_t j0 = j * sc.Bc;
          const size_t stage = size_t(j % sc.stages);  // [consumer] full(stage), phase j / stages
          const bool masked = needs_mask(i0, i0 + rows, j0, s.N, s.Nk, sc.Bc, s.causal);
          for (int64_t g = 0; g < G; ++g) {
            WarpGroup& wg = wgs[size_t(g)];
            // [s-wgmma] S = Q K_jᵀ (step 14's).
            wgmma::Acc S(sc.Bc);
            for (int64_t kk = 0; kk < d / 16; ++kk) wgmma::mma_ss(S, Qs, 64 * g, Ks[stage], 0, kk, kk > 0, led);
            for (int w = 0; w < 4; ++w) {
              // [causal-mask] Keys at or past a row's visible count get −inf, on tiles that need it.
              if (masked)
                for (int lane = 0; lane < 32; ++lane)
                  for (int r = 0; r < sc.Bc / 2; ++r) {
                    const mf::Coord c = wgmma::acc_elem(w, lane, r);
                    if (j0 + c.col >= visible_keys(i0 + 64 * g + c.row, s.N, s.Nk, s.causal)) S.reg(w, lane, r) = -kInf;
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
              for (int lane = 0; lane < 32; ++lane)
                for (int hr = 0; hr < 2; ++hr) {
                  float& m = wg.m[size_t(w)][size_t(lane)][size_t(hr)];
                  const float m_new = std::max(m, gmax[size_t(lane)][size_t(hr)] * sl2);
                  const float m_use = m_new == -kInf ? 0.0f : m_new;  // [rescale-guard]
                  const float alpha = std::exp2(m - m_use);
                  m = m_new;
                  float rs = 0.0f;
                  for (int n = 0; n < sc.Bc / 8; ++n)
                    for (int e = 0; e < 2; ++e) {
                      float& v = S.reg(w, lane, 4 * n + 2 * hr + e);
                      v = std::exp2(std::fma(v, sl2, -m_use));
                      rs += v;
                    }
                  float& l = wg.l[size_t(w)][size_t(lane)][size_t(hr)];
                  l = l * alpha + rs;
                  for (auto& op : wg.o)  // [deferred] Õ *= alpha for the row
                    for (int n = 0; n < op.n / 8; ++n) op.reg(w, lane, 4 * n + 2 * hr) *= alpha, op.reg(w, lane, 4 * n + 2 * hr + 1) *= alpha;
                }
              led.nonmatmul_ops += 16 * sc.Bc * (masked ? 6 : 5) + 3 * 16 + 16 * d;
            }
            // [c-to-a] P in the storage type, as each warp's A fragment of 16 keys; then [pv-wgmma]
            // Õ += P V_j: per 16 keys and per panel of O one wgmma with P from registers.
            for (int64_t kk = 0; kk < sc.Bc / 16; ++kk) {
              std::vector<mf::AFrag> pa(4, mf::AFrag(32));
              for (int w = 0; w < 4; ++w)
                for (int lane = 0; lane < 32; ++lane)
                  for (int i = 0; i < 8; ++i)
                    pa[size_t(w)][size_t(lane)][size_t(i)] =
                        round_to(s.dtype, S.reg(w, lane, 4 * int(2 * kk + mf::a_from_c_tile(i)) + mf::a_from_c_elem(i)));
              for (int64_t pn = 0; pn < panels; ++pn) wgmma::mma_rs(wg.o[size_t(pn)], pa, Vs[stage], kk, PC * pn, true, led);
            }
          }
          // [consumer] Both warpgroups arrived on empty(stage): [producer] refills it with tile j + stages.
          if (j + sc.stages < Tend) {
            Ks[stage].load_from(K, (j + sc.stages) * sc.Bc, 0);
            Vs[stage].load_from(V, (j + sc.stages) * sc.Bc, 0);
          }
          led.tiles_computed += 1;
          led.tiles_masked += classify_tile(i0, i0 + rows, j0, std::min(j0 + sc.Bc, s.Nk), s.N, s.Nk, s.causal) ==
                              TileKind::Diagonal;
        }
        led.tiles_skipped += Tc - Tend;
        // [o-staging] Each consumer warpgroup meets at its own named barrier (not block-wide) before
        // its warps write O over its rows of the Q tile.
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
                  Qs.write(row, PC * pn + c.col, li > 0.0f ? wg.o[size_t(pn)].reg(w, lane, r) * (1.0f / li) : 0.0f);
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
        Qs.store_to(O, i0, 0);
      }
    }
  return res;
}

// The ledger in closed form (docs/15_tma_warpspec.md): step 14's bytes and products with step
// 14's 128 × Bc tiles — the TMA boxes move what the cp.async rows moved, out-of-bounds rows as zeros
// that cost no HBM bytes — and one block-wide barrier per block instead of one per tile and one
// more before O is staged.
LedgerSet closed_form(const Shape& s, const Schedule& sc) {
  const int64_t BH = s.B * s.H, N = s.N, Nk = s.Nk, d = s.d, Br = sc.Br, Bc = sc.Bc, G = sc.consumers(), W = 4 * G;
  const int64_t Tc = num_tiles(Nk, Bc), Tr = num_tiles(N, Br);
  int64_t pairs = 0, masked = 0, diagonal = 0, kv_rows = 0, qtiles = 0, q_rows = 0;
  for (int64_t i = 0; i < Tr; ++i) {
    const int64_t i0 = i * Br, i1 = std::min(i0 + Br, N), T = kv_tiles_for(i0, i1, N, Nk, Bc, s.causal);
    pairs += T;
    qtiles += T > 0;
    if (T > 0) q_rows += i1 - i0;
    for (int64_t j = 0; j < T; ++j) {
      masked += needs_mask(i0, i1, j * Bc, N, Nk, Bc, s.causal);
      diagonal += classify_tile(i0, i1, j * Bc, std::min((j + 1) * Bc, Nk), N, Nk, s.causal) == TileKind::Diagonal;
      kv_rows += std::min(Bc, Nk - j * Bc);
    }
  }
  LedgerSet ls;
  Ledger& led = ls["tma_warpspec"];
  led.gmem_read = BH * (q_rows * d * 2 + kv_rows * 2 * d * 2);
  led.gmem_write = BH * (N * d * 2 + N * 4);
  led.smem_write = BH * (qtiles * Br * d * 2 + pairs * 2 * Bc * d * 2 + Tr * Br * d * 2);
  led.smem_read = BH * (pairs * G * ((64 + Bc) * d + Bc * d) * 2 + N * d * 2);
  led.barriers = BH * Tr;
  led.matmul_flops = BH * pairs * G * 2 * (2 * 64 * Bc * d);
  led.nonmatmul_ops = BH * (pairs * W * (16 * Bc * 5 + 48 + 16 * d) + masked * W * 16 * Bc + N * d + 2 * N);
  led.tiles_computed = BH * pairs;
  led.tiles_masked = BH * diagonal;
  led.tiles_skipped = BH * (Tr * Tc - pairs);
  led.smem_peak = smem_bytes(sc, int(d));
  return ls;
}

namespace {
BlueprintResult run_blueprint(const Shape& s, const Inputs& in, const StepOptions& o) {
  return blueprint(s, in, schedule_for(int(s.d), tiles_of(o)));
}
LedgerSet run_closed_form(const Shape& s, const StepOptions& o) { return closed_form(s, schedule_for(int(s.d), tiles_of(o))); }
int64_t run_smem_bytes(const Shape& s, const StepOptions& o) { return smem_bytes(schedule_for(int(s.d), tiles_of(o)), int(s.d)); }
}  // namespace

int tiles_of(const StepOptions& opts) { return choice_index(opts, "tiles", kTileNames, kTileChoices, "step15"); }

const StepInfo& info() {
  static const StepInfo step = [] {
    StepInfo i;
    i.id = "15";
    i.slug = "tma_warpspec";
    i.title = "TMA and warp specialization: a producer warp fills a ring of K/V stages guarded by mbarriers, two consumer warpgroups multiply";
    i.teaches = "TMA tensor copies, mbarriers, producer/consumer warpgroups and setmaxnreg";
    {
      StepFlag f{"tiles", {}, "the block's tile (Br x Bc): auto (128x128, two stages at d = 128), 128x64 (four) — an experiment, fp16 only (docs/15_tma_warpspec.md)"};
      for (const char* n : kTileNames) f.choices.push_back(n);
      f.sweep = false;
      i.flags = {f};
    }
    i.blueprint = run_blueprint;
    i.closed_form = run_closed_form;
    i.smem_bytes = run_smem_bytes;
    i.min_cc = 90;
    i.max_cc = 90;
    i.needs = "wgmma.mma_async, TMA and setmaxnreg (sm_90a)";
    i.head_dims = {std::begin(kHeadDims), std::end(kHeadDims)};
    i.head_dims_why = "a TMA box of one 128-byte swizzled row holds 64 columns ([stored-d], steps/15_tma_warpspec/schedule.hpp)";
#ifdef FA_HAVE_CUDA
    i.launch = launch;
    i.workspace_bytes = workspace_bytes;
#endif
    i.kernel_prefix = "step15_";
    return i;
  }();
  return step;
}

}  // namespace fa::step15
