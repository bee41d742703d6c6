// Step 05 — the blueprint: kernel.cu's two warp mappings as CPU loops.
//
// The loop is step 04's (Q tiles outer, O on chip). The tile update is either step 04's split-K
// update (warps split the keys and merge through shared memory) or the split-Q update (each warp
// owns 16 rows and all keys). Both run through the counting views, so their ledgers differ exactly
// where the mappings do: shared-memory traffic and barriers.
//
// The split-K update is wmma_bp::split_k_update (common/blueprint/wmma_blueprint.cpp), shared with steps 03
// and 04; the split-Q update, the loops around both and the ledger are this step's own.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "schedule.hpp"
#include "blueprint/wmma_blueprint.hpp"

namespace fa::step05 {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The step's tiles for the shared update (common/blueprint/wmma_blueprint.hpp).
wmma_bp::Layout layout(const Schedule& sc) { return {sc.Br, sc.Bc, sc.warps(), kPad, kPadS, kPadO}; }

// [split-q] The same pair, split by rows: warp w owns rows [16w, 16w + 16) and all Bc keys. Two
// lanes share a row (Bc/2 keys each) and combine their maximum and sum with one shuffle each; the
// warp rescales, accumulates and normalizes its own rows of O. No barrier inside; one at the end,
// before the next K/V tile overwrites K_j and V_j.
void tile_update_split_q(const Schedule& sc, const Shape& s, wmma_bp::SplitKBlock& blk, int64_t i0, int64_t j0, Ledger& led) {
  const int64_t d = s.d, W = sc.warps_q(), half = sc.Bc / 2;
  const float scale = static_cast<float>(s.softmax_scale());
  for (int64_t w = 0; w < W; ++w) {
    // S for the warp's 16 rows: Bc/16 fragments.
    for (int64_t n = 0; n < sc.Bc / 16; ++n) {
      Frag16 acc;
      for (int64_t kk = 0; kk < d; kk += 16) mma(acc, load_frag(blk.Qs, 16 * w, kk), load_frag_transposed(blk.Ks, 16 * n, kk), led);
      store_frag(blk.Ss, 16 * w, 16 * n, acc, [&](float x) { return x * scale; });
      led.nonmatmul_ops += 16 * 16;
    }
    // The row pass, lane by lane: lane t holds row 16w + t/2, keys [(t%2)·Bc/2, (t%2 + 1)·Bc/2).
    std::vector<float> sv(static_cast<size_t>(32 * half)), mpart(32), lpart(32), mold(32), lold(32);
    for (int t = 0; t < 32; ++t) {
      const int64_t r = 16 * w + t / 2, c0 = (t % 2) * half;
      const int64_t nv = visible_keys(i0 + r, s.N, s.Nk, s.causal);  // [causal-mask]
      float m = -kInf;
      for (int64_t c = 0; c < half; ++c) {
        float v = blk.Ss.read(r, c0 + c);
        if (j0 + c0 + c >= nv) v = -kInf;
        sv[static_cast<size_t>(t * half + c)] = v;
        m = std::max(m, v);
      }
      mpart[static_cast<size_t>(t)] = m;
      mold[static_cast<size_t>(t)] = blk.mi.read(0, r);
      lold[static_cast<size_t>(t)] = blk.li.read(0, r);
    }
    led.nonmatmul_ops += 2 * 16 * sc.Bc;
    for (int t = 0; t < 32; ++t) {  // (after a __syncwarp) P over S's rows, partial sums
      const int64_t r = 16 * w + t / 2, c0 = (t % 2) * half;
      const float m_new = std::max(mold[static_cast<size_t>(t)], std::max(mpart[static_cast<size_t>(t)], mpart[static_cast<size_t>(t ^ 1)]));
      float l = 0.0f;
      for (int64_t c = 0; c < half; ++c) {
        const float p = m_new == -kInf ? 0.0f : std::exp(sv[static_cast<size_t>(t * half + c)] - m_new);
        blk.Ps.write(r, c0 + c, p);
        l += p;
      }
      lpart[static_cast<size_t>(t)] = l;
      led.exps += m_new == -kInf ? 0 : half;  // masked entries too (exp(−inf) = 0), unless the row saw no key
    }
    led.nonmatmul_ops += 3 * 16 * sc.Bc;
    for (int t = 0; t < 32; t += 2) {  // lane 2q writes its row's statistics
      // lab:begin pair-stats: [split-q]: lane 2q combines its row's two partial maxima and sums …
      const int64_t r = 16 * w + t / 2;
      const float m_old = mold[static_cast<size_t>(t)], l_old = lold[static_cast<size_t>(t)];
      const float m_new = std::max(m_old, std::max(mpart[static_cast<size_t>(t)], mpart[static_cast<size_t>(t + 1)]));
      const float alpha = wmma_bp::rescale_factor(m_old, m_new);
      const float l_new = alpha * l_old + (lpart[static_cast<size_t>(t)] + lpart[static_cast<size_t>(t + 1)]);
      blk.cold.write(0, r, alpha * l_old);
      blk.lnew.write(0, r, l_new);
      blk.mi.write(0, r, m_new);
      blk.li.write(0, r, l_new);
      // lab:end
      led.nonmatmul_ops += 6;
      led.exps += mold[static_cast<size_t>(t)] == -kInf ? 0 : 1;  // alpha; [rescale-guard]: none on a row's first tile
    }
    // [rescale-o] the warp's rows of O *= alpha·l_i.
    for (int64_t r = 16 * w; r < 16 * w + 16; ++r)
      for (int64_t c = 0; c < d; ++c) blk.Os.write(r, c, blk.Os.read(r, c) * blk.cold.read(0, r));
    led.nonmatmul_ops += 16 * d;
    // O[rows] += P[rows, :] · V_j: the P fragments once, then each output fragment in turn.
    std::vector<Frag16> a;
    for (int64_t kk = 0; kk < sc.Bc; kk += 16) a.push_back(load_frag(blk.Ps, 16 * w, kk));
    for (int64_t n = 0; n < d / 16; ++n) {
      Frag16 acc = load_frag(blk.Os, 16 * w, 16 * n);
      for (int64_t kk = 0; kk < sc.Bc / 16; ++kk) mma(acc, a[static_cast<size_t>(kk)], load_frag(blk.Vs, 16 * kk, 16 * n), led);
      store_frag(blk.Os, 16 * w, 16 * n, acc, [](float x) { return x; });
    }
    // [normalize] O[rows] /= l_new.
    for (int64_t r = 16 * w; r < 16 * w + 16; ++r)
      for (int64_t c = 0; c < d; ++c) {
        const float l = blk.lnew.read(0, r), o = blk.Os.read(r, c);
        blk.Os.write(r, c, l > 0.0f ? o / l : 0.0f);
      }
    led.nonmatmul_ops += 16 * d;
  }
  barrier(led);
}

}  // namespace

BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sc, bool split_q) {
  BlueprintResult res;
  res.out.o = Tensor4(s.B, s.H, s.N, s.d);
  res.out.lse = Tensor4(s.B, s.H, s.N, 1);
  Ledger& led = res.ledger["warp_split"];  // named after the kernel, step05_warp_split
  const Store st = Store::of(s.dtype), f32 = Store::f32();
  const int64_t d = s.d, Tc = num_tiles(s.Nk, sc.Bc), Tr = num_tiles(s.N, sc.Br);

  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const GlobalMat Q(in.q.head(b, h), s.N, d, d, st, led), K(in.k.head(b, h), s.Nk, d, d, st, led),
          V(in.v.head(b, h), s.Nk, d, d, st, led);
      GlobalMat O(res.out.o.head(b, h), s.N, d, d, st, led), Lse(res.out.lse.head(b, h), 1, s.N, s.N, f32, led);
      for (int64_t i = 0; i < Tr; ++i) {  // [q-outer] a block per Q tile
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
          blk.Ks.load_from(K, j0, 0);  // K_j, V_j: re-read for every Q tile
          blk.Vs.load_from(V, j0, 0);
          barrier(led);
          if (split_q) tile_update_split_q(sc, s, blk, i0, j0, led);
          else wmma_bp::split_k_update(layout(sc), s, blk, i0, j0, led);
          led.tiles_computed += 1;
          led.tiles_masked += classify_tile(i0, i0 + rows, j0, std::min(j0 + sc.Bc, s.Nk), s.N, s.Nk, s.causal) !=
                            TileKind::Visible;
        }
        blk.Os.store_to(O, i0, 0);  // O in the storage type and L = m + log(l), once
        for (int64_t r = 0; r < rows; ++r) {
          const float m = blk.mi.read(0, r), l = blk.li.read(0, r);
          Lse.store(0, i0 + r, l > 0.0f ? m + std::log(l) : kInf);
        }
        led.nonmatmul_ops += 2 * rows;
        barrier(led);
      }
    }
  return res;
}

// The ledger in closed form (docs/05_warp_split.md derives each line). One (b, h):
// Tc = ⌈Nk/Bc⌉ K/V tiles, Tr = ⌈N/Br⌉ Q tiles; HBM traffic is step 04's for both mappings.
LedgerSet closed_form(const Shape& s, const Schedule& sc, bool split_q) {
  const int64_t BH = s.B * s.H, N = s.N, Nk = s.Nk, d = s.d, Br = sc.Br, Bc = sc.Bc;
  const int64_t Tc = num_tiles(Nk, Bc), Tr = num_tiles(N, Br), pairs = Tc * Tr, R = Br / 16;
  const int64_t frag2 = 16 * 16 * 2, frag4 = 16 * 16 * 4, flops = 2 * 16 * 16 * 16;
  LedgerSet ls;
  Ledger& led = ls["warp_split"];
  led.gmem_read = BH * (N * d * 2 + Tr * 2 * Nk * d * 2);
  led.gmem_write = BH * (N * d * 2 + N * 4);
  int64_t w_pair, r_pair, barriers_pair, ops_pair;
  if (split_q) {  // warps own rows: W = Br/16, two lanes per row
    const int64_t W = sc.warps_q(), C = Bc / 16;
    w_pair = 2 * Bc * d * 2                  // K_j, V_j
             + Br * Bc * 4 + Br * Bc * 2     // S fragments, P over them
             + 16 * Br                        // cold, l_new, m_i, l_i per row
             + Br * d * 4 + W * (d / 16) * frag4 + Br * d * 4;  // rescale, PV accumulators, normalize
    r_pair = W * C * (d / 16) * 2 * frag2    // S: Q and K fragments
             + Br * Bc * 4 + 16 * Br          // the row pass: S; m_i and l_i read by both lanes
             + 2 * Br * d * 4                 // rescale (O and its factor)
             + W * (C * frag2 + (d / 16) * (frag4 + C * frag2))  // PV: P once, O and V per fragment
             + 2 * Br * d * 4;                // normalize
    barriers_pair = 2;
    ops_pair = Br * Bc + 5 * Br * Bc + 6 * Br + 2 * Br * d;
    led.matmul_flops = BH * pairs * W * C * (d / 16) * 2 * flops;
  } else {        // step 04's split-K update: W = Bc/16
    const int64_t W = sc.warps();
    w_pair = 2 * Bc * d * 2 + Br * Bc * 4 + Br * Bc * 4 + W * Br * 4 + 2 * Br * 4 + Br * Bc * 2 + W * Br * 4 +
             2 * Br * 4 + Br * d * 4 + W * R * (d / 16) * frag4 + Br * d * 4 + 2 * Br * 4;
    r_pair = W * R * (d / 16) * 2 * frag2 + Br * Bc * 4 + Br * (W + 1) * 4 + Br * Bc * 4 + W * Br * 4 +
             Br * (W + 2) * 4 + 2 * Br * d * 4 + W * R * (frag2 + (d / 16) * (frag4 + frag2)) + 2 * Br * d * 4 + 2 * Br * 4;
    barriers_pair = 1 + 7 + W;
    ops_pair = Br * Bc + 2 * Br * Bc + Br * (W + 3) + 3 * Br * Bc + Br * (W + 2) + 2 * Br * d;
    led.matmul_flops = BH * pairs * W * R * (d / 16) * 2 * flops;
  }
  led.smem_write = BH * (pairs * w_pair + Tr * (Br * d * 2 + Br * d * 4 + 2 * Br * 4));
  led.smem_read = BH * (pairs * r_pair + N * (d * 4 + 8));
  led.barriers = BH * (pairs * barriers_pair + Tr);
  led.nonmatmul_ops = BH * (pairs * ops_pair + 2 * N);
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
bool split_q(const StepOptions& o) {
  const auto it = o.find("split");
  return it == o.end() || it->second == "q";
}
BlueprintResult run_blueprint(const Shape& s, const Inputs& in, const StepOptions& o) {
  return blueprint(s, in, kSchedule, split_q(o));
}
LedgerSet run_closed_form(const Shape& s, const StepOptions& o) { return closed_form(s, kSchedule, split_q(o)); }
// [arch] Shared memory per block (schedule.hpp), held against the GPU's limit before a launch.
int64_t run_smem_bytes(const Shape& s, const StepOptions&) { return smem_bytes(kSchedule, int(s.d)); }
}  // namespace

const StepInfo& info() {
  static const StepInfo step = [] {
    StepInfo i;
    i.id = "05";
    i.slug = "warp_split";
    i.title = "warp splitting: each warp owns rows of the Q tile (split-Q) instead of keys (split-K)";
    i.teaches = "split-Q warps: no merge through shared memory";
    i.flags = {{"split", {"q", "k"}, "warps split the Q tile's rows (q) or the K/V tile's keys (k, step 04)"}};
    i.blueprint = run_blueprint;
    i.closed_form = run_closed_form;
    i.smem_bytes = run_smem_bytes;
#ifdef FA_HAVE_CUDA
    i.launch = launch;
    i.workspace_bytes = workspace_bytes;
#endif
    i.kernel_prefix = "step05_";
    return i;
  }();
  return step;
}

}  // namespace fa::step05
