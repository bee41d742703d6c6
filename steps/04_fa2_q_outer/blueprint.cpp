// Step 04 — the blueprint: kernel.cu's Q-outer FlashAttention-2 loop as CPU loops.
//
// One block per Q tile (the grid switch changes which block does which tile, not what is done);
// for each K/V tile j the block's warps do step 03's update, through the counting views. O_i, m_i
// and l_i never leave shared memory, so the ledger loses step 03's Tc-fold traffic.
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

namespace fa::step04 {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The step's tiles for the shared update (common/blueprint/wmma_blueprint.hpp).
wmma_bp::Layout layout(const Schedule& sc) { return {sc.Br, sc.Bc, sc.warps(), kPad, kPadS, kPadO}; }

}  // namespace

BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sc) {
  BlueprintResult res;
  res.out.o = Tensor4(s.B, s.H, s.N, s.d);
  res.out.lse = Tensor4(s.B, s.H, s.N, 1);
  Ledger& led = res.ledger["q_outer"];
  const Store st = Store::of(s.dtype), f32 = Store::f32();
  const int64_t d = s.d, Tc = num_tiles(s.Nk, sc.Bc), Tr = num_tiles(s.N, sc.Br);

  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const GlobalMat Q(in.q.head(b, h), s.N, d, d, st, led), K(in.k.head(b, h), s.Nk, d, d, st, led),
          V(in.v.head(b, h), s.Nk, d, d, st, led);
      GlobalMat O(res.out.o.head(b, h), s.N, d, d, st, led), Lse(res.out.lse.head(b, h), 1, s.N, s.N, f32, led);
      for (int64_t i = 0; i < Tr; ++i) {  // [q-outer] a block per Q tile (or one per (b, h) walking them)
        Smem smem(kSmemBudget, led);
        wmma_bp::SplitKBlock blk = wmma_bp::make_split_k_block(layout(sc), s, smem);
        const int64_t i0 = i * sc.Br, rows = std::min<int64_t>(sc.Br, s.N - i0);
        blk.Qs.load_from(Q, i0, 0);  // Q_i: read once
        for (int64_t r = 0; r < sc.Br; ++r) {  // O_i = 0, m_i = -inf, l_i = 0, kept on chip
          for (int64_t c = 0; c < d; ++c) blk.Os.write(r, c, 0.0f);
          blk.mi.write(0, r, -kInf);
          blk.li.write(0, r, 0.0f);
        }
        for (int64_t j = 0; j < Tc; ++j) {
          const int64_t j0 = j * sc.Bc;
          // lab:begin kv-per-q-tile {O L ledger}: [q-outer]: K_j, V_j into shared memory, once per tile pair …
          blk.Ks.load_from(K, j0, 0);  // K_j, V_j: re-read for every Q tile
          blk.Vs.load_from(V, j0, 0);
          // lab:end
          barrier(led);
          wmma_bp::split_k_update(layout(sc), s, blk, i0, j0, led);
          led.tiles_computed += 1;
          led.tiles_masked += classify_tile(i0, i0 + rows, j0, std::min(j0 + sc.Bc, s.Nk), s.N, s.Nk, s.causal) !=
                            TileKind::Visible;
        }
        // lab:begin write-once {O L ledger}: [q-outer]: after the last K/V tile, O_i and L to HBM, once …
        blk.Os.store_to(O, i0, 0);  // O in the storage type and L = m + log(l), once
        for (int64_t r = 0; r < rows; ++r) {
          const float m = blk.mi.read(0, r), l = blk.li.read(0, r);
          Lse.store(0, i0 + r, l > 0.0f ? m + std::log(l) : kInf);
        }
        // lab:end
        led.nonmatmul_ops += 2 * rows;
        barrier(led);
      }
    }
  return res;
}

// The ledger in closed form (docs/04_fa2_q_outer.md derives each line). One (b, h):
// Tc = ⌈Nk/Bc⌉ K/V tiles, Tr = ⌈N/Br⌉ Q tiles, W = Bc/16 warps; every pair (i, j) is visited.
LedgerSet closed_form(const Shape& s, const Schedule& sc) {
  const int64_t BH = s.B * s.H, N = s.N, Nk = s.Nk, d = s.d, W = sc.warps(), Br = sc.Br, Bc = sc.Bc;
  const int64_t Tc = num_tiles(Nk, Bc), Tr = num_tiles(N, Br), pairs = Tc * Tr, R = Br / 16;
  const int64_t frag2 = 16 * 16 * 2, frag4 = 16 * 16 * 4, flops = 2 * 16 * 16 * 16;
  LedgerSet ls;
  Ledger& led = ls["q_outer"];
  // HBM: Q once; K and V once per Q tile; O and L written once.
  led.gmem_read = BH * (N * d * 2 + Tr * 2 * Nk * d * 2);
  led.gmem_write = BH * (N * d * 2 + N * 4);
  // Shared memory, per pair (i, j): K_j, V_j, then step 03's update (S, the two passes, statistics,
  // rescale, merge, normalize); per Q tile: Q_i and the initial O_i, m_i, l_i.
  const int64_t w_pair = 2 * Bc * d * 2 + Br * Bc * 4 + Br * Bc * 4 + W * Br * 4 + 2 * Br * 4 + Br * Bc * 2 +
                         W * Br * 4 + 2 * Br * 4 + Br * d * 4 + W * R * (d / 16) * frag4 + Br * d * 4 + 2 * Br * 4;
  const int64_t r_pair = W * R * (d / 16) * 2 * frag2 + Br * Bc * 4 + Br * (W + 1) * 4 + Br * Bc * 4 + W * Br * 4 +
                         Br * (W + 2) * 4 + 2 * Br * d * 4 + W * R * (frag2 + (d / 16) * (frag4 + frag2)) +
                         2 * Br * d * 4 + 2 * Br * 4;
  led.smem_write = BH * (pairs * w_pair + Tr * (Br * d * 2 + Br * d * 4 + 2 * Br * 4));
  led.smem_read = BH * (pairs * r_pair + N * (d * 4 + 8));  // + the write-back of O, m, l (rows < N)
  led.barriers = BH * (pairs * (1 + 7 + W) + Tr);
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
    i.id = "04";
    i.slug = "fa2_q_outer";
    i.title = "FlashAttention-2's loop order: Q tiles outer, O, m, l stay on chip";
    i.teaches = "loop order: O stays on chip; K, V re-read per Q tile";
    i.flags = {{"grid", {"qtile", "bh"}, "one block per (b, h, Q tile), or per (b, h) as in step 03"}};
    i.blueprint = run_blueprint;
    i.closed_form = run_closed_form;
    i.smem_bytes = run_smem_bytes;
#ifdef FA_HAVE_CUDA
    i.launch = launch;
    i.workspace_bytes = workspace_bytes;
#endif
    i.kernel_prefix = "step04_";
    return i;
  }();
  return step;
}

}  // namespace fa::step04
