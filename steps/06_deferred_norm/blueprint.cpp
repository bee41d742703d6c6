// Step 06 — the blueprint: kernel.cu's deferred normalization as CPU loops.
//
// Step 05's split-Q loop with one change: the O tile holds the unnormalized Õ, rescaled by
// exp(m_old − m_new) per K/V tile, and is divided by l once, when it is written. The ledger's
// non-matmul count and shared-memory traffic show the per-tile normalization pass that is gone.
//
// The per-tile update is wmma_bp::deferred_update (common/blueprint/wmma_blueprint.cpp), shared with
// the steps that run the same update; this file holds what is this step's own: the row statistics
// it runs the update with (row_stats), the loops around it, and the ledger.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "schedule.hpp"
#include "blueprint/wmma_blueprint.hpp"

namespace fa::step06 {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The step's tiles for the shared update (common/blueprint/wmma_blueprint.hpp).
wmma_bp::Layout layout(const Schedule& sc) { return {sc.Br, sc.Bc, sc.warps(), kPad, kPadS, kPadO}; }

// [deferred] A row after one K/V tile (lane 2q of the row, as in kernel.cu): m_new is the new row max
// (already max(m_old, the tile's)), tile_sum = Σ exp(s − m_new) over the tile's keys. Õ is rescaled
// by the alpha returned; l keeps the sum. No division anywhere: that waits for the end.
wmma_bp::RowStats row_stats(float m_old, float l_old, float m_new, float tile_sum) {
  wmma_bp::RowStats r{0.0f, 0.0f, 0.0f};
  // lab:begin deferred-stats {O L}: [deferred]: alpha = rescale_factor(m_old, m_new); m, l updated …
  r.alpha = wmma_bp::rescale_factor(m_old, m_new);
  r.m = m_new;
  r.l = r.alpha * l_old + tile_sum;
  // lab:end
  return r;
}

}  // namespace

BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sc) {
  BlueprintResult res;
  res.out.o = Tensor4(s.B, s.H, s.N, s.d);
  res.out.lse = Tensor4(s.B, s.H, s.N, 1);
  Ledger& led = res.ledger["deferred"];
  const Store st = Store::of(s.dtype), f32 = Store::f32();
  const int64_t d = s.d, Tc = num_tiles(s.Nk, sc.Bc), Tr = num_tiles(s.N, sc.Br);

  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const GlobalMat Q(in.q.head(b, h), s.N, d, d, st, led), K(in.k.head(b, h), s.Nk, d, d, st, led),
          V(in.v.head(b, h), s.Nk, d, d, st, led);
      GlobalMat O(res.out.o.head(b, h), s.N, d, d, st, led), Lse(res.out.lse.head(b, h), 1, s.N, s.N, f32, led);
      for (int64_t i = 0; i < Tr; ++i) {  // [q-outer] a block per Q tile
        Smem smem(kSmemBudget, led);
        wmma_bp::DeferredBlock blk = wmma_bp::make_deferred_block(layout(sc), s, smem);
        const int64_t i0 = i * sc.Br, rows = std::min<int64_t>(sc.Br, s.N - i0);
        blk.Qs.load_from(Q, i0, 0);  // Q_i: read once
        for (int64_t r = 0; r < sc.Br; ++r) {  // O_i = 0, m_i = -inf, l_i = 0, kept on chip
          for (int64_t c = 0; c < d; ++c) blk.Os.write(r, c, 0.0f);
          blk.mi.write(0, r, -kInf);
          blk.li.write(0, r, 0.0f);
        }
        for (int64_t j = 0; j < Tc; ++j) {
          const int64_t j0 = j * sc.Bc;
          blk.Ks.load_from(K, j0, 0);  // K_j, V_j: re-read for every Q tile
          blk.Vs.load_from(V, j0, 0);
          barrier(led);
          wmma_bp::deferred_update(layout(sc), s, blk, i0, j0, true, led, row_stats);  // step 06 masks every tile
          led.tiles_computed += 1;
          led.tiles_masked += classify_tile(i0, i0 + rows, j0, std::min(j0 + sc.Bc, s.Nk), s.N, s.Nk, s.causal) !=
                            TileKind::Visible;
        }
        // [final-divide] O = Õ / l in the storage type, and L = m + log(l): the one normalization.
        // lab:begin final-divide {O}: [final-divide]: O = Õ / l_i for the tile's rows inside N (0 where l = 0) …
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < d; ++c) {
            const float l = blk.li.read(0, r), o = blk.Os.read(r, c);
            O.store(i0 + r, c, l > 0.0f ? o / l : 0.0f);
          }
        // lab:end
        for (int64_t r = 0; r < rows; ++r) {
          const float m = blk.mi.read(0, r), l = blk.li.read(0, r);
          Lse.store(0, i0 + r, l > 0.0f ? m + std::log(l) : kInf);
        }
        led.nonmatmul_ops += rows * d + 2 * rows;
        barrier(led);
      }
    }
  return res;
}

// The ledger in closed form (docs/06_deferred_norm.md). One (b, h): Tc = ⌈Nk/Bc⌉, Tr = ⌈N/Br⌉,
// W = Br/16 warps, C = Bc/16 key fragments. HBM traffic is step 04's and 05's.
LedgerSet closed_form(const Shape& s, const Schedule& sc) {
  const int64_t BH = s.B * s.H, N = s.N, Nk = s.Nk, d = s.d, Br = sc.Br, Bc = sc.Bc, W = sc.warps(), C = Bc / 16;
  const int64_t Tc = num_tiles(Nk, Bc), Tr = num_tiles(N, Br), pairs = Tc * Tr;
  const int64_t frag2 = 16 * 16 * 2, frag4 = 16 * 16 * 4, flops = 2 * 16 * 16 * 16;
  LedgerSet ls;
  Ledger& led = ls["deferred"];
  led.gmem_read = BH * (N * d * 2 + Tr * 2 * Nk * d * 2);
  led.gmem_write = BH * (N * d * 2 + N * 4);
  const int64_t w_pair = 2 * Bc * d * 2                  // K_j, V_j
                         + Br * Bc * 4 + Br * Bc * 2     // S fragments, P over them
                         + 12 * Br                       // alpha, m_i, l_i per row
                         + Br * d * 4 + W * (d / 16) * frag4;  // rescale Õ, PV accumulators (no normalize pass)
  const int64_t r_pair = W * C * (d / 16) * 2 * frag2    // S: Q and K fragments
                         + Br * Bc * 4 + 16 * Br         // the row pass: S; m_i and l_i read by both lanes
                         + 2 * Br * d * 4                // rescale (Õ and alpha)
                         + W * (C * frag2 + (d / 16) * (frag4 + C * frag2));  // PV
  led.smem_write = BH * (pairs * w_pair + Tr * (Br * d * 2 + Br * d * 4 + 2 * Br * 4));
  led.smem_read = BH * (pairs * r_pair + N * (2 * d * 4 + 8));  // the final divide reads Õ and l; then m, l for L
  led.barriers = BH * (pairs * 2 + Tr);
  led.matmul_flops = BH * pairs * W * C * (d / 16) * 2 * flops;
  led.nonmatmul_ops = BH * (pairs * (Br * Bc + 5 * Br * Bc + 5 * Br + Br * d) + N * d + 2 * N);
  // exps: the Tr·Br rows (padding included) that see a key take exp on every entry of every tile,
  // masked ones too, and alpha on every tile but their first (m = −inf: [rescale-guard]); a row that
  // sees none keeps m = −inf and takes none.
  const int64_t rows_seeing = Tr * Br - (N - rows_with_keys(N, Nk, s.causal));
  led.exps = BH * rows_seeing * (Tc * Bc + Tc - 1);
  led.tiles_computed = BH * pairs;
  led.tiles_masked = BH * tiles_with_masked_entries(N, Nk, Br, Bc, s.causal);
  led.smem_peak = smem_bytes(sc, int(d));
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
    i.id = "06";
    i.slug = "deferred_norm";
    i.title = "deferred normalization: the unnormalized output, divided by l once at the end";
    i.teaches = "one division at the end instead of one per K/V tile";
    i.blueprint = run_blueprint;
    i.closed_form = run_closed_form;
    i.smem_bytes = run_smem_bytes;
#ifdef FA_HAVE_CUDA
    i.launch = launch;
    i.workspace_bytes = workspace_bytes;
#endif
    i.kernel_prefix = "step06_";
    return i;
  }();
  return step;
}

}  // namespace fa::step06
