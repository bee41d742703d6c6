// Step 07 — the blueprint: kernel.cu's causal block skipping as CPU loops.
//
// Step 06's loop, stopped at the diagonal: K/V tiles right of it are skipped (not loaded, not
// computed), tiles the diagonal crosses are masked element by element, the rest are not masked at
// all. The ledger counts computed, masked and skipped tiles.
//
// The per-tile update is wmma_bp::deferred_update (common/blueprint/wmma_blueprint.cpp), shared with
// the steps that run the same update; this file holds what is this step's own: the loops
// around it and the ledger.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "schedule.hpp"
#include "blueprint/wmma_blueprint.hpp"

namespace fa::step07 {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The step's tiles for the shared update (common/blueprint/wmma_blueprint.hpp).
wmma_bp::Layout layout(const Schedule& sc) { return {sc.Br, sc.Bc, sc.warps(), kPad, kPadS, kPadO}; }

}  // namespace

BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sc) {
  BlueprintResult res;
  res.out.o = Tensor4(s.B, s.H, s.N, s.d);
  res.out.lse = Tensor4(s.B, s.H, s.N, 1);
  Ledger& led = res.ledger["causal_skip"];
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
        // [skip] Stop at the diagonal: tiles right of it are fully masked and never loaded.
        // lab:begin causal-skip: [skip]: only the first kv_tiles_for(...) K/V tiles, masked where needed …
        const int64_t Tend = kv_tiles_for(i0, i0 + rows, s.N, s.Nk, sc.Bc, s.causal);
        for (int64_t j = 0; j < Tend; ++j) {
          const int64_t j0 = j * sc.Bc;
          blk.Ks.load_from(K, j0, 0);  // K_j, V_j: re-read for every Q tile
          blk.Vs.load_from(V, j0, 0);
          barrier(led);
          const bool masked = needs_mask(i0, i0 + rows, j0, s.N, s.Nk, sc.Bc, s.causal);
          wmma_bp::deferred_update(layout(sc), s, blk, i0, j0, masked, led);
          led.tiles_computed += 1;
          led.tiles_masked += classify_tile(i0, i0 + rows, j0, std::min(j0 + sc.Bc, s.Nk), s.N, s.Nk, s.causal) ==
                            TileKind::Diagonal;
        }
        led.tiles_skipped += Tc - Tend;
        // lab:end
        // [final-divide] O = Õ / l in the storage type, and L = m + log(l): the one normalization.
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < d; ++c) {
            const float l = blk.li.read(0, r), o = blk.Os.read(r, c);
            O.store(i0 + r, c, l > 0.0f ? o / l : 0.0f);
          }
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

// The ledger in closed form (docs/07_causal_skip.md). One (b, h): Tr = ⌈N/Br⌉ Q tiles; Q tile i
// visits its first T_i = kv_tiles_for(i) K/V tiles (all Tc without a mask); of those, M_i need the
// per-element mask. Every term of step 06 that was "per pair" is now per visited pair.
LedgerSet closed_form(const Shape& s, const Schedule& sc) {
  const int64_t BH = s.B * s.H, N = s.N, Nk = s.Nk, d = s.d, Br = sc.Br, Bc = sc.Bc, W = sc.warps(), C = Bc / 16;
  const int64_t Tc = num_tiles(Nk, Bc), Tr = num_tiles(N, Br);
  const int64_t frag2 = 16 * 16 * 2, frag4 = 16 * 16 * 4, flops = 2 * 16 * 16 * 16;
  int64_t pairs = 0, masked = 0, diagonal = 0, kv_rows = 0;  // kv_rows: K/V rows inside Nk, summed over visits
  int64_t exps = 0;  // the rows that see a key: exp on every entry of the T visited tiles, alpha on all but the first
  for (int64_t i = 0; i < Tr; ++i) {
    const int64_t i0 = i * Br, i1 = std::min(i0 + Br, N), T = kv_tiles_for(i0, i1, N, Nk, Bc, s.causal);
    pairs += T;
    exps += T > 0 ? tile_rows_with_keys(i0, Br, N, Nk, s.causal) * (T * Bc + T - 1) : 0;
    for (int64_t j = 0; j < T; ++j) {
      masked += needs_mask(i0, i1, j * Bc, N, Nk, Bc, s.causal);
      diagonal += classify_tile(i0, i1, j * Bc, std::min((j + 1) * Bc, Nk), N, Nk, s.causal) == TileKind::Diagonal;
      kv_rows += std::min(Bc, Nk - j * Bc);
    }
  }
  LedgerSet ls;
  Ledger& led = ls["causal_skip"];
  led.gmem_read = BH * (N * d * 2 + kv_rows * 2 * d * 2);
  led.gmem_write = BH * (N * d * 2 + N * 4);
  const int64_t w_pair = 2 * Bc * d * 2 + Br * Bc * 4 + Br * Bc * 2 + 12 * Br + Br * d * 4 + W * (d / 16) * frag4;
  const int64_t r_pair = W * C * (d / 16) * 2 * frag2 + Br * Bc * 4 + 16 * Br + 2 * Br * d * 4 +
                         W * (C * frag2 + (d / 16) * (frag4 + C * frag2));
  led.smem_write = BH * (pairs * w_pair + Tr * (Br * d * 2 + Br * d * 4 + 2 * Br * 4));
  led.smem_read = BH * (pairs * r_pair + N * (2 * d * 4 + 8));
  led.barriers = BH * (pairs * 2 + Tr);
  led.matmul_flops = BH * pairs * W * C * (d / 16) * 2 * flops;
  led.nonmatmul_ops = BH * (pairs * (Br * Bc + 4 * Br * Bc + 5 * Br + Br * d) + masked * Br * Bc + N * d + 2 * N);
  led.exps = BH * exps;  // skipped tiles take none
  led.tiles_computed = BH * pairs;
  led.tiles_masked = BH * diagonal;
  led.tiles_skipped = BH * (Tr * Tc - pairs);
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
    i.id = "07";
    i.slug = "causal_skip";
    i.title = "causal block skipping: tiles right of the diagonal are never loaded";
    i.teaches = "causal: skip masked tiles, mask only the diagonal";
    i.blueprint = run_blueprint;
    i.closed_form = run_closed_form;
    i.smem_bytes = run_smem_bytes;
#ifdef FA_HAVE_CUDA
    i.launch = launch;
    i.workspace_bytes = workspace_bytes;
#endif
    i.kernel_prefix = "step07_";
    return i;
  }();
  return step;
}

}  // namespace fa::step07
