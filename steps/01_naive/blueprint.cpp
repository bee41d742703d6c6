// Step 01 — the blueprint: kernel.cu's three kernels as plain CPU loops over the same schedule.
//
// Every block of every kernel runs in turn; "HBM" is touched only through GlobalMat views, shared
// memory through Smem, tensor cores through Frag16/mma — so the ledger is counted, not typed.
// It rounds where the kernels round: inputs (already), P to the storage type, O to the storage type.
#include <algorithm>
#include <cmath>
#include <limits>

#include "schedule.hpp"

namespace fa::step01 {

namespace {

// [scores] S = scale · Q Kᵀ: block (bh, ti, tj) computes the Br × Bc tile at rows i0, columns j0.
void scores_block(const Schedule& sc, const Shape& s, const GlobalMat& Q, const GlobalMat& K, GlobalMat& S,
                  int64_t i0, int64_t j0, Ledger& led) {
  const int64_t d = s.d;
  const Store st = Store::of(s.dtype);
  Smem smem(kSmemBudget, led);
  SmemTile Qs = smem.tile(sc.Br, d, d + kPad, st);  // Br × d
  SmemTile Ks = smem.tile(sc.Bc, d, d + kPad, st);  // Bc × d
  SmemTile St = smem.tile(sc.warps() * 16, 16, 16, Store::f32());  // one 16 × 16 fp32 staging tile per warp
  Qs.load_from(Q, i0, 0);  // rows past N are zero-filled (no HBM bytes)
  Ks.load_from(K, j0, 0);
  barrier(led);

  const float scale = static_cast<float>(s.softmax_scale());
  for (int w = 0; w < sc.warps(); ++w) {  // warp w owns rows [16w, 16w + 16) of the tile
    std::vector<Frag16> acc(static_cast<size_t>(sc.Bc / 16));  // 16 × Bc accumulators, fp32
    for (int64_t k0 = 0; k0 < d; k0 += 16) {
      const Frag16 a = load_frag(Qs, 16 * w, k0);  // Q[16w.., k0..]        16 × 16
      for (int n = 0; n < sc.Bc / 16; ++n) {
        const Frag16 b = load_frag_transposed(Ks, 16 * n, k0);  // Kᵀ[k0.., 16n..]  16 × 16
        mma(acc[static_cast<size_t>(n)], a, b, led);
      }
    }
    for (int n = 0; n < sc.Bc / 16; ++n) {
      store_frag(St, 16 * w, 0, acc[static_cast<size_t>(n)], [&](float x) { return x * scale; });
      led.nonmatmul_ops += 16 * 16;  // the scale, on every fragment element
      // lab:begin s-to-hbm {O L}: write the warp's staged tile St to S in HBM, only the entries inside N × Nk …
      for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c) {
          const int64_t i = i0 + 16 * w + r, j = j0 + 16 * n + c;
          if (i < s.N && j < s.Nk) S.store(i, j, St.read(16 * w + r, c));
        }
      // lab:end
    }
  }
}

// [softmax] One block per row: three passes over S (max, sum, write P), masked keys never read.
void softmax_row(const Shape& s, const GlobalMat& S, GlobalMat& P, Tensor4& lse, int64_t b, int64_t h, int64_t i,
                 Ledger& led) {
  const int64_t nv = visible_keys(i, s.N, s.Nk, s.causal);
  if (nv == 0) {  // no visible key: P row = 0, L = +inf (and O will be 0)
    for (int64_t j = 0; j < s.Nk; ++j) P.store(i, j, 0.0f);
    lse.at(b, h, i, 0) = std::numeric_limits<float>::infinity();
    led.gmem_write += 4;
    return;
  }
  Smem smem(kSmemBudget, led);
  SmemTile red = smem.tile(1, kSoftmaxWarps, Store::f32());  // one partial per warp
  std::vector<float> part(kSoftmaxThreads);                  // one register per thread
  // Block reduction of part[]: each warp combines its 32 lanes with shuffles, lane 0 writes the
  // warp's partial to shared memory, barrier, every thread combines all partials, barrier (so the
  // buffer can be reused).
  auto block_reduce = [&](auto op) {
    for (int w = 0; w < kSoftmaxWarps; ++w) {
      float v = part[static_cast<size_t>(32 * w)];
      for (int lane = 1; lane < 32; ++lane) v = op(v, part[static_cast<size_t>(32 * w + lane)]);
      red.write(0, w, v);
    }
    barrier(led);
    float r = 0.0f;
    for (int t = 0; t < kSoftmaxThreads; ++t) {
      r = red.read(0, 0);
      for (int w = 1; w < kSoftmaxWarps; ++w) r = op(r, red.read(0, w));
    }
    barrier(led);
    return r;
  };
  auto fmax = [](float x, float y) { return std::max(x, y); };
  auto fadd = [](float x, float y) { return x + y; };

  // Thread t handles keys t, t + T, t + 2T, ... (T = kSoftmaxThreads), as in the kernel.
  for (int t = 0; t < kSoftmaxThreads; ++t) {  // pass 1: row max
    part[static_cast<size_t>(t)] = -std::numeric_limits<float>::infinity();
    for (int64_t j = t; j < nv; j += kSoftmaxThreads) part[static_cast<size_t>(t)] = std::max(part[static_cast<size_t>(t)], S.load(i, j));
  }
  led.nonmatmul_ops += nv;
  const float m = block_reduce(fmax);

  for (int t = 0; t < kSoftmaxThreads; ++t) {  // pass 2: Σ exp(S - m)
    part[static_cast<size_t>(t)] = 0.0f;
    for (int64_t j = t; j < nv; j += kSoftmaxThreads) part[static_cast<size_t>(t)] += std::exp(S.load(i, j) - m);
  }
  led.nonmatmul_ops += 3 * nv;
  led.exps += nv;  // pass 2's exp, on the visible keys only (the loop stops at nv)
  const float l = block_reduce(fadd);

  // lab:begin p-to-hbm {O}: pass 3 of [softmax]: P = exp(S - m) / l for the nv visible keys, 0 for masked ones …
  const float inv = 1.0f / l;  // pass 3: P = exp(S - m) / l, zeros for masked keys
  for (int64_t j = 0; j < s.Nk; ++j) P.store(i, j, j < nv ? std::exp(S.load(i, j) - m) * inv : 0.0f);
  // lab:end
  led.nonmatmul_ops += 3 * nv + 3;  // sub, exp, mul per key; 1/l, log and add per row
  led.exps += nv;                   // pass 3 computes exp(S - m) again: two per visible entry in all
  lse.at(b, h, i, 0) = m + std::log(l);
  led.gmem_write += 4;
}

// [pv] O = P V: block (bh, ti) owns the Br × d tile of O and walks P and V in Bc-wide chunks.
void pv_block(const Schedule& sc, const Shape& s, const GlobalMat& P, const GlobalMat& V, GlobalMat& O, int64_t i0,
              Ledger& led) {
  const int64_t d = s.d;
  const Store st = Store::of(s.dtype);
  Smem smem(kSmemBudget, led);
  SmemTile Ps = smem.tile(sc.Br, sc.Bc, sc.Bc + kPad, st);  // Br × Bc
  SmemTile Vs = smem.tile(sc.Bc, d, d + kPad, st);          // Bc × d
  SmemTile St = smem.tile(sc.warps() * 16, 16, 16, Store::f32());
  std::vector<std::vector<Frag16>> acc(static_cast<size_t>(sc.warps()), std::vector<Frag16>(static_cast<size_t>(d / 16)));
  for (int64_t j0 = 0; j0 < s.Nk; j0 += sc.Bc) {
    Ps.load_from(P, i0, j0);  // columns past Nk and rows past N are zero-filled
    Vs.load_from(V, j0, 0);
    barrier(led);
    for (int w = 0; w < sc.warps(); ++w)
      for (int64_t kk = 0; kk < sc.Bc; kk += 16) {
        const Frag16 a = load_frag(Ps, 16 * w, kk);  // P[16w.., kk..]  16 × 16
        for (int64_t n = 0; n < d / 16; ++n) {
          const Frag16 b = load_frag(Vs, kk, 16 * n);  // V[kk.., 16n..]  16 × 16
          mma(acc[static_cast<size_t>(w)][static_cast<size_t>(n)], a, b, led);
        }
      }
    barrier(led);  // the next chunk overwrites Ps and Vs
  }
  for (int w = 0; w < sc.warps(); ++w)
    for (int64_t n = 0; n < d / 16; ++n) {
      store_frag(St, 16 * w, 0, acc[static_cast<size_t>(w)][static_cast<size_t>(n)], [](float x) { return x; });
      for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c) {
          const int64_t i = i0 + 16 * w + r;
          if (i < s.N) O.store(i, 16 * n + c, St.read(16 * w + r, c));  // rounded to the storage type
        }
    }
}

}  // namespace

BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sc) {
  BlueprintResult res;
  res.out.o = Tensor4(s.B, s.H, s.N, s.d);
  res.out.lse = Tensor4(s.B, s.H, s.N, 1);
  for (const char* k : {"scores", "softmax", "pv"}) res.ledger[k];  // create all three first: appending moves them
  Ledger* LS = &res.ledger["scores"];
  Ledger* LM = &res.ledger["softmax"];
  Ledger* LP = &res.ledger["pv"];

  const Store st = Store::of(s.dtype);
  std::vector<float> Sbuf(static_cast<size_t>(s.N * s.Nk));     // one head's S at a time (HBM in the kernel)
  std::vector<float> Pbuf(static_cast<size_t>(s.N * p_ld(s.Nk)));
  LS->workspace = s_bytes_aligned(s);
  LM->workspace = p_bytes(s);

  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      GlobalMat Q(in.q.head(b, h), s.N, s.d, s.d, st, *LS);
      GlobalMat K(in.k.head(b, h), s.Nk, s.d, s.d, st, *LS);
      GlobalMat S(Sbuf.data(), s.N, s.Nk, s.Nk, Store::f32(), *LS);
      for (int64_t i0 = 0; i0 < s.N; i0 += sc.Br)
        for (int64_t j0 = 0; j0 < s.Nk; j0 += sc.Bc) {
          scores_block(sc, s, Q, K, S, i0, j0, *LS);
          LS->tiles_computed += 1;
          const TileKind kind = classify_tile(i0, std::min(i0 + sc.Br, s.N), j0, std::min(j0 + sc.Bc, s.Nk), s.N, s.Nk, s.causal);
          LS->tiles_masked += kind != TileKind::Visible ? 1 : 0;  // tiles holding masked entries (masked in softmax)
        }

      S.retarget(*LM);
      GlobalMat P(Pbuf.data(), s.N, s.Nk, p_ld(s.Nk), st, *LM);
      for (int64_t i = 0; i < s.N; ++i) softmax_row(s, S, P, res.out.lse, b, h, i, *LM);

      P.retarget(*LP);
      GlobalMat V(in.v.head(b, h), s.Nk, s.d, s.d, st, *LP);
      GlobalMat O(res.out.o.head(b, h), s.N, s.d, s.d, st, *LP);
      for (int64_t i0 = 0; i0 < s.N; i0 += sc.Br) pv_block(sc, s, P, V, O, i0, *LP);
    }
  return res;
}

// The ledger in closed form (docs/01_naive.md derives each line). Tm = ⌈N/Br⌉, Tn = ⌈Nk/Bc⌉.
LedgerSet closed_form(const Shape& s, const Schedule& sc) {
  const int64_t BH = s.B * s.H, N = s.N, Nk = s.Nk, d = s.d, W = sc.warps();
  const int64_t Tm = num_tiles(N, sc.Br), Tn = num_tiles(Nk, sc.Bc);
  const int64_t frag = 16 * 16;                 // elements of one fragment
  const int64_t mma_flops = 2 * 16 * 16 * 16;   // one 16×16×16 product

  LedgerSet ls;
  Ledger& a = ls["scores"];
  const int64_t blocks = BH * Tm * Tn;
  a.gmem_read = BH * (N * d * 2 * Tn + Nk * d * 2 * Tm);  // Q re-read per column tile, K per row tile
  a.gmem_write = BH * N * Nk * 4;                         // S in fp32
  a.smem_write = blocks * ((sc.Br + sc.Bc) * d * 2 + W * (sc.Bc / 16) * frag * 4);
  a.smem_read = blocks * W * (d / 16) * (1 + sc.Bc / 16) * frag * 2 + BH * N * Nk * 4;
  a.barriers = blocks;
  a.matmul_flops = blocks * W * (d / 16) * (sc.Bc / 16) * mma_flops;  // = blocks · Br·Bc·d·2
  a.nonmatmul_ops = blocks * sc.Br * sc.Bc;
  a.tiles_computed = blocks;
  a.tiles_masked = BH * tiles_with_masked_entries(N, Nk, sc.Br, sc.Bc, s.causal);  // masked later, in softmax
  a.smem_peak = scores_smem_bytes(sc, int(d));
  a.workspace = s_bytes_aligned(s);

  Ledger& m = ls["softmax"];
  const int64_t vis = visible_pairs(N, Nk, s.causal), rows_vis = rows_with_keys(N, Nk, s.causal);
  m.gmem_read = BH * 3 * vis * 4;                 // three passes over the visible part of S
  m.gmem_write = BH * (N * Nk * 2 + N * 4);        // P in the storage type, L in fp32
  m.smem_write = BH * rows_vis * 2 * kSoftmaxWarps * 4;
  m.smem_read = BH * rows_vis * 2 * kSoftmaxThreads * kSoftmaxWarps * 4;
  m.barriers = BH * rows_vis * 4;
  m.nonmatmul_ops = BH * (7 * vis + 3 * rows_vis);
  m.exps = BH * 2 * vis;  // exp(S - m) in pass 2 (the sum) and again in pass 3 (P), masked keys never
  m.smem_peak = rows_vis > 0 ? kSoftmaxWarps * 4 : 0;
  m.workspace = p_bytes(s);

  Ledger& p = ls["pv"];
  p.gmem_read = BH * (N * Nk * 2 + Tm * Nk * d * 2);  // P once, V re-read per row tile
  p.gmem_write = BH * N * d * 2;
  p.smem_write = BH * Tm * (Tn * (sc.Br * sc.Bc * 2 + sc.Bc * d * 2) + W * (d / 16) * frag * 4);
  p.smem_read = BH * Tm * Tn * W * (sc.Bc / 16) * (1 + d / 16) * frag * 2 + BH * N * d * 4;
  p.barriers = BH * Tm * 2 * Tn;
  p.matmul_flops = BH * Tm * Tn * W * (sc.Bc / 16) * (d / 16) * mma_flops;
  p.smem_peak = pv_smem_bytes(sc, int(d));
  return ls;
}

namespace {
BlueprintResult run_blueprint(const Shape& s, const Inputs& in, const StepOptions&) { return blueprint(s, in, kSchedule); }
LedgerSet run_closed_form(const Shape& s, const StepOptions&) { return closed_form(s, kSchedule); }
// [arch] Shared memory per block of the larger kernel (schedule.hpp), held against the GPU's limit.
int64_t run_smem_bytes(const Shape& s, const StepOptions&) {
  return std::max(scores_smem_bytes(kSchedule, int(s.d)), pv_smem_bytes(kSchedule, int(s.d)));
}
}  // namespace

const StepInfo& info() {
  static const StepInfo step = [] {
    StepInfo i;
    i.id = "01";
    i.slug = "naive";
    i.title = "naive attention in three kernels (S and P materialized in HBM)";
    i.teaches = "the baseline: S and P, N x Nk each, go through HBM";
    i.flags = {{"gemm", {"wmma", "cublas"}, "the two matrix products: our WMMA kernels or cuBLAS"}};
    i.mma_unit_for = [](const StepOptions& o) {  // [mma-unit]
      const auto it = o.find("gemm");
      return it != o.end() && it->second == "cublas" ? MmaUnit::cublas : MmaUnit::wmma;
    };
    i.blueprint = run_blueprint;
    i.closed_form = run_closed_form;
    i.smem_bytes = run_smem_bytes;
#ifdef FA_HAVE_CUDA
    i.launch = launch;
    i.workspace_bytes = workspace_bytes;
#endif
    i.kernel_prefix = "step01_";
    return i;
  }();
  return step;
}

}  // namespace fa::step01
