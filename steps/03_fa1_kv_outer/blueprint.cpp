// Step 03 — the blueprint: kernel.cu's K/V-outer FlashAttention-1 loop as CPU loops.
//
// One block per (b, h); for each K/V tile j, for each Q tile i, the block's warps (lanes, fragments,
// barriers) do what the kernel does, through the counting views. O_i, m_i and l_i go to HBM and
// back between outer iterations, so the ledger shows FlashAttention-1's extra traffic.
//
// The per-tile update is wmma_bp::split_k_update (common/blueprint/wmma_blueprint.cpp), shared with
// the steps that run the same update; this file holds what is this step's own: the loops
// around it and the ledger.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "schedule.hpp"
#include "blueprint/wmma_blueprint.hpp"

namespace fa::step03 {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The step's tiles for the shared update (common/blueprint/wmma_blueprint.hpp).
wmma_bp::Layout layout(const Schedule& sc) { return {sc.Br, sc.Bc, sc.warps(), kPad, kPadS, kPadO}; }

}  // namespace

BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sc) {
  BlueprintResult res;
  res.out.o = Tensor4(s.B, s.H, s.N, s.d);
  res.out.lse = Tensor4(s.B, s.H, s.N, 1);
  Ledger& led = res.ledger["kv_outer"];
  led.workspace = o_acc_bytes(s) + 2 * stats_bytes(s);
  const Store st = Store::of(s.dtype), f32 = Store::f32();
  const int64_t d = s.d, Tc = num_tiles(s.Nk, sc.Bc), Tr = num_tiles(s.N, sc.Br);
  std::vector<float> oacc(static_cast<size_t>(s.N * d)), mws(static_cast<size_t>(s.N)), lws(static_cast<size_t>(s.N));

  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {  // [kv-outer] one block per (b, h)
      const GlobalMat Q(in.q.head(b, h), s.N, d, d, st, led), K(in.k.head(b, h), s.Nk, d, d, st, led),
          V(in.v.head(b, h), s.Nk, d, d, st, led);
      GlobalMat O(res.out.o.head(b, h), s.N, d, d, st, led), Lse(res.out.lse.head(b, h), 1, s.N, s.N, f32, led);
      GlobalMat Oacc(oacc.data(), s.N, d, d, f32, led), M(mws.data(), 1, s.N, s.N, f32, led), Lw(lws.data(), 1, s.N, s.N, f32, led);
      Smem smem(kSmemBudget, led);
      wmma_bp::SplitKBlock blk = wmma_bp::make_split_k_block(layout(sc), s, smem);
      for (int64_t j = 0; j < Tc; ++j) {
        const int64_t j0 = j * sc.Bc;
        blk.Ks.load_from(K, j0, 0);  // K_j, V_j: loaded once per outer iteration
        blk.Vs.load_from(V, j0, 0);
        barrier(led);
        for (int64_t i = 0; i < Tr; ++i) {
          const int64_t i0 = i * sc.Br, rows = std::min<int64_t>(sc.Br, s.N - i0);
          blk.Qs.load_from(Q, i0, 0);  // Q_i: re-read for every K/V tile
          // lab:begin hbm-state-in {O L ledger}: [hbm-state]: the Q tile's O_i, m_i, l_i into shared memory …
          if (j == 0) {              // first visit: O_i = 0, m_i = -inf, l_i = 0 (nothing read)
            for (int64_t r = 0; r < sc.Br; ++r) {
              for (int64_t c = 0; c < d; ++c) blk.Os.write(r, c, 0.0f);
              blk.mi.write(0, r, -kInf);
              blk.li.write(0, r, 0.0f);
            }
          } else {                   // [hbm-state] O_i, m_i, l_i come back from HBM
            blk.Os.load_from(Oacc, i0, 0);
            blk.mi.load_from(M, 0, i0);
            blk.li.load_from(Lw, 0, i0);
          }
          // lab:end
          barrier(led);
          wmma_bp::split_k_update(layout(sc), s, blk, i0, j0, led);
          led.tiles_computed += 1;
          led.tiles_masked += classify_tile(i0, i0 + rows, j0, std::min(j0 + sc.Bc, s.Nk), s.N, s.Nk, s.causal) !=
                            TileKind::Visible;
          // lab:begin hbm-state-out {O L ledger}: [hbm-state]: O_i, m_i, l_i to HBM; after the last visit, O, L …
          if (j + 1 < Tc) {          // ... and go back to HBM
            blk.Os.store_to(Oacc, i0, 0);
            blk.mi.store_to(M, 0, i0);
            blk.li.store_to(Lw, 0, i0);
          } else {                   // the last K/V tile: O in the storage type, L = m + log(l)
            blk.Os.store_to(O, i0, 0);
            for (int64_t r = 0; r < rows; ++r) {
              const float m = blk.mi.read(0, r), l = blk.li.read(0, r);
              Lse.store(0, i0 + r, l > 0.0f ? m + std::log(l) : kInf);
            }
            led.nonmatmul_ops += 2 * rows;
          }
          // lab:end
          barrier(led);
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
  Ledger& led = ls["kv_outer"];
  // HBM: K, V once; Q once per K/V tile; O_i, m_i, l_i read on visits 2..Tc, written on 1..Tc-1.
  led.gmem_read = BH * (2 * Nk * d * 2 + Tc * N * d * 2 + (Tc - 1) * N * (d * 4 + 8));
  led.gmem_write = BH * ((Tc - 1) * N * (d * 4 + 8) + N * d * 2 + N * 4);
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
  led.smem_write = BH * (Tc * 2 * Bc * d * 2 + pairs * w_pair);
  // Reads behind the write-backs: O_i, m_i, l_i (rows < N) on visits 1..Tc-1; O and m, l on the last.
  led.smem_read = BH * (pairs * r_pair + (Tc - 1) * N * (d * 4 + 8) + N * (d * 4 + 8));
  led.barriers = BH * (Tc + pairs * (2 + 7 + W));  // after the loads and at the end; 7 + W inside split_k_update
  led.matmul_flops = BH * pairs * W * R * (d / 16) * 2 * flops;
  led.nonmatmul_ops = BH * (pairs * (Br * Bc + 2 * Br * Bc + Br * (W + 3) + 3 * Br * Bc + Br * (W + 2) + 2 * Br * d) + 2 * N);
  // exps: the Tr·Br rows (padding included) that see a key take exp on every entry of every tile,
  // masked ones too, and alpha on every tile but their first (m = −inf: [rescale-guard]); a row that
  // sees none keeps m = −inf and takes none.
  const int64_t rows_seeing = Tr * Br - (N - rows_with_keys(N, Nk, s.causal));
  led.exps = BH * rows_seeing * (Tc * Bc + Tc - 1);
  led.tiles_computed = BH * pairs;
  led.tiles_masked = BH * tiles_with_masked_entries(N, Nk, Br, Bc, s.causal);
  led.smem_peak = smem_bytes(sc, int(d));
  led.workspace = o_acc_bytes(s) + 2 * stats_bytes(s);
  return ls;
}

namespace {
BlueprintResult run_blueprint(const Shape& s, const Inputs& in, const StepOptions&) { return blueprint(s, in, kSchedule); }
LedgerSet run_closed_form(const Shape& s, const StepOptions&) { return closed_form(s, kSchedule); }
// [arch] Shared memory per block (schedule.hpp), held against the GPU's limit before a launch.
int64_t run_smem_bytes(const Shape& s, const StepOptions&) { return smem_bytes(kSchedule, int(s.d)); }
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
    i.smem_bytes = run_smem_bytes;
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
