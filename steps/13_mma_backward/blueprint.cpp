// Step 13 — the blueprint: kernel.cu's three backward kernels as CPU loops, warp by warp and lane by
// lane, every fragment through common/blueprint/mma_emu.hpp and common/kernel/mma_layout.hpp (a wrong index in a
// layout is a wrong gradient), every access through the counting views of common/blueprint/ledger.hpp. The
// forward is step 12's (its blueprint, closed form and kernel are registered here as well).
//
//   bwd_pre     per padded row: D (d/8 threads' partial sums of 8 elements, then their butterfly),
//               L·log2 e (+inf past N, D = 0), every dQ accumulator's row zeroed
//   bwd_kv      a block per (K/V tile, key/value head) — with --deterministic, block s of
//               det_splits(B·Hkv, Tc) walks tiles s, s + splits, ... — per Q tile of each of the
//               group's query heads ([gqa]; the Q tiles whose rows see the tile: [q-range], [window]): warp w's 32 keys × Br/2 queries of
//               Sᵀ = K Qᵀ and dPᵀ = V dOᵀ ([sdp-warps]), the mask, Pᵀ and dSᵀ in the C layout and
//               into their shared tiles; a barrier; dQ_i (dS K) by queries × dims, then dV += Pᵀ dO
//               and dK += dSᵀ Q by keys × dims ([dkv-warps]); dK and dV out through the K/V tiles
//   dq_convert  dQ = scale · Σ_k accumulator_k, the splits in order
// The kernel's cp.async copies are the tiles' loads here, issued where the kernel issues them (one
// tile ahead); its barriers are barrier(). What the blueprint does not model: the swizzle (addresses,
// not values: tests/test_step12.cpp holds the XOR-stepped addresses to it) and the order in which
// racing blocks' atomics land (here: block by block).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernel/dropout.hpp"
#include "blueprint/mma_emu.hpp"
#include "schedule.hpp"

namespace fa::step12 {
const StepInfo& info();
}

namespace fa::step13 {

bool deterministic(const StepOptions& o) {
  const auto it = o.find("deterministic");
  return it != o.end() && it->second == "on";
}
int tiles_of(const StepOptions& o) { return choice_index(o, "tiles", kTileNames, kTileChoices, "step13"); }

int experiment_of(const StepOptions& o) { return choice_index(o, "experiment", kExperimentNames, kExperiments, "step13"); }

std::string refusal(bool fp16, int d, int tiles, int xp, bool det, bool drop) {
  const bool compiled = fp16 && (d == 64 || d == 128);
  if (xp != kAsBuilt && (!compiled || tiles != kAuto || det || drop))
    return std::string("step13: --experiment ") + kExperimentNames[xp] +
           " is compiled for fp16 at d = 64 and 128 only, with the default tiles, without --deterministic and --dropout";
  if (tiles == kAuto) return "";
  if (!compiled) return std::string("step13: --tiles ") + kTileNames[tiles] + " is compiled for fp16 at d = 64 and 128 only";
  if (det || drop) return "step13: --tiles is compiled without --deterministic and --dropout";
  const int64_t need = smem_bytes(schedule_for(d, tiles), d);
  if (need > kSmemBudget)
    return std::string("step13: --tiles ") + kTileNames[tiles] + " needs " + std::to_string(need) +
           " bytes of shared memory per block at d = " + std::to_string(d) + ", over the budget of " + std::to_string(kSmemBudget);
  return "";
}

namespace {

namespace mf = fa::m16n8k16;
using mf::AFrag;
using mf::BFrag;
using mf::CFrag;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kFragElems = 256;          // one ldmatrix.x4: four 8 × 8 blocks of 16-bit values
constexpr int64_t kMmaFlops = 2 * 16 * 8 * 16;

std::vector<CFrag> zero_frags(int64_t n) { return std::vector<CFrag>(size_t(n), CFrag(32, {0.0f, 0.0f, 0.0f, 0.0f})); }

// [dq] ldmatrix.x4.trans as an A fragment: the 16 × 16 A tile whose element (row m, col k) is
// t(k0 + k, m0 + m) — dS (queries × keys) read from the dSᵀ tile (keys × queries). Register m of
// the fragment is A block (rows 8(m % 2), cols 8(m / 2)), which is stored block (k0 + 8(m / 2),
// m0 + 8(m % 2)); .trans hands lane l element ldm_elem(l, e, true) of it. 256 elements read.
AFrag ldmatrix_x4_a_trans(const SmemTile& t, int64_t k0, int64_t m0) {
  AFrag a(32);
  for (int lane = 0; lane < 32; ++lane)
    for (int m = 0; m < 4; ++m)
      for (int e = 0; e < 2; ++e) {
        const mf::Coord c = mf::ldm_elem(lane, e, true);
        a[size_t(lane)][size_t(2 * m + e)] = t.read(k0 + 8 * (m / 2) + c.row, m0 + 8 * (m % 2) + c.col);
      }
  return a;
}

// [tune] --tiles and --experiment are refused on the CPU exactly where the GPU refuses them.
void require_supported(const Shape& s, const StepOptions& o) {
  const std::string why = refusal(s.dtype == DType::f16, int(s.d), tiles_of(o), experiment_of(o), deterministic(o), s.dropout > 0.0);
  if (!why.empty()) throw Unsupported(why);
}

}  // namespace

BackwardBlueprintResult blueprint(const Shape& s, const Inputs& in, const Forward& fwd, const Tensor4& dO, const Schedule& sc,
                                  bool det) {
  const int d = int(s.d);
  if (!valid(sc, d)) throw std::invalid_argument("step13: the tiles must hold whole m16n8k16 fragments and ldmatrix.x4 pairs");
  BackwardBlueprintResult res;
  res.grads = {Tensor4(s.B, s.H, s.N, s.d), Tensor4(s.B, s.hkv(), s.Nk, s.d), Tensor4(s.B, s.hkv(), s.Nk, s.d)};  // [gqa]
  res.ledger.kernels.reserve(3);  // references into the set stay valid
  Ledger& Lpre = res.ledger["bwd_pre"];
  Ledger& Lkv = res.ledger["bwd_kv"];
  Ledger& Lcv = res.ledger["dq_convert"];
  const Store st = Store::of(s.dtype), f32 = Store::f32();
  const int64_t BH = s.B * s.H, N = s.N, Nk = s.Nk, Np = rows_padded(N), Br = sc.Br, Bc = sc.Bc, W = sc.warps();
  const int64_t Tr = num_tiles(N, Br), Tc = num_tiles(Nk, Bc);
  const int64_t QM = sc.qm(d), RG = sc.rgroups(d), kDims = sc.dq_dims(d);
  const int64_t WK = sc.key_groups(), QW = sc.sdp_queries(), KG = sc.dkv_key_groups(d), KD = sc.dkv_keys(d), DW = sc.dkv_dims(d);
  const int64_t Hkv = s.hkv(), QH = s.H / Hkv;  // [gqa] a block per (K/V tile, key/value head), QH query heads each
  const int64_t splits = det ? det_splits(s.B * Hkv, Tc) : 1;
  const float scale = float(s.softmax_scale()), sl2 = scale * kLog2e;
  // [dropout] P as the kernel gets it (a float), and the threshold and factor it derives from it.
  const float p_drop = float(s.dropout);
  const bool drop = p_drop > 0.0f;
  const uint32_t keep_below = drop ? dropout_threshold(p_drop) : 0u;
  const float rescale = drop ? dropout_rescale(p_drop) : 1.0f;

  // The workspace (schedule.hpp): L·log2 e and D per padded row, then `splits` dQ accumulators,
  // accumulator k's row i of head bh at row (k·BH + bh)·Np + i.
  std::vector<float> l2w(size_t(BH * Np)), ddw(size_t(BH * Np)), accw(size_t(splits * BH * Np * d));
  Lpre.workspace = workspace_bytes(BH, N, d, splits);

  // ---- step13_bwd_pre ---------------------------------------------------------------------------
  {
    GlobalMat L2g(l2w.data(), BH, Np, Np, f32, Lpre), Dg(ddw.data(), BH, Np, Np, f32, Lpre),
        Acc(accw.data(), splits * BH * Np, d, d, f32, Lpre);
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t h = 0; h < s.H; ++h) {
        const int64_t bh = b * s.H + h;
        const GlobalMat O(fwd.o.head(b, h), N, d, d, st, Lpre), G(dO.head(b, h), N, d, d, st, Lpre),
            Lse(fwd.lse.head(b, h), 1, N, N, f32, Lpre);
        const int kPer = d / 8;  // threads per row, 8 elements (16 bytes) each
        for (int64_t i = 0; i < Np; ++i) {  // [pre] kPer threads per padded row
          std::vector<float> part(size_t(kPer), 0.0f);
          if (i < N) {
            for (int th = 0; th < kPer; ++th)
              for (int x = 0; x < 8; ++x) part[size_t(th)] = std::fma(G.load(i, 8 * th + x), O.load(i, 8 * th + x), part[size_t(th)]);
            Lpre.nonmatmul_ops += 2 * d + 1;  // a multiply and an add per element; L·log2 e
          }
          for (int64_t k = 0; k < splits; ++k)
            for (int64_t c = 0; c < d; ++c) Acc.store((k * BH + bh) * Np + i, c, 0.0f);
          for (int off = kPer / 2; off > 0; off /= 2) {  // __shfl_xor_sync: every thread adds its partner's
            std::vector<float> next(part.size());
            for (int th = 0; th < kPer; ++th) next[size_t(th)] = part[size_t(th)] + part[size_t(th ^ off)];
            part = next;
          }
          Dg.store(bh, i, part[0]);
          L2g.store(bh, i, i < N ? Lse.load(0, i) * kLog2e : kInf);
        }
      }
  }

  // ---- step13_bwd_kv ----------------------------------------------------------------------------
  GlobalMat L2g(l2w.data(), BH, Np, Np, f32, Lkv), Dg(ddw.data(), BH, Np, Np, f32, Lkv),
      Acc(accw.data(), splits * BH * Np, d, d, f32, Lkv);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t hk = 0; hk < Hkv; ++hk) {
      const GlobalMat K(in.k.head(b, hk), Nk, d, d, st, Lkv), V(in.v.head(b, hk), Nk, d, d, st, Lkv);
      GlobalMat dK(res.grads.dk.head(b, hk), Nk, d, d, st, Lkv), dV(res.grads.dv.head(b, hk), Nk, d, d, st, Lkv);
      // [gqa] The group's query heads hk·QH .. hk·QH + QH − 1: their Q and dO, and their rows bh of the workspace.
      std::vector<GlobalMat> Qh, Gh;
      for (int64_t gh = 0; gh < QH; ++gh) {
        Qh.emplace_back(in.q.head(b, hk * QH + gh), N, d, d, st, Lkv);
        Gh.emplace_back(dO.head(b, hk * QH + gh), N, d, d, st, Lkv);
      }
      auto bh_of = [&](int64_t gh) { return b * s.H + hk * QH + gh; };
      // [deterministic] Block `split` walks the K/V tiles split, split + splits, ... into its own
      // accumulator; without it, one block per tile, all adding into accumulator 0.
      for (int64_t split = 0; split < splits; ++split)
        for (int64_t jt = split; jt < Tc; jt += splits) {
          const int64_t j0 = jt * Bc, keys = std::min(Bc, Nk - j0);
          const int64_t it0 = first_q_tile(j0, N, Nk, Br, s.causal);  // [q-range]
          const int64_t itE = std::max(it0, end_q_tile(j0 + keys, N, Nk, Br, s.causal, s.window));  // [window]
          // [gqa] The block's steps: Q tiles it0 .. itE − 1 of each of the group's heads in turn,
          // step q = (head q / nq, Q tile it0 + q % nq), one pipeline across them.
          const int64_t nq = itE - it0, steps = QH * nq;
          auto acc0 = [&](int64_t gh) { return (split * BH + bh_of(gh)) * Np; };  // head gh's accumulator, row 0
          // [stages] K_j, V_j, kStages × (Q_i, dO_i), Pᵀ, dSᵀ, kStages × (L·log2 e, D).
          Smem smem(kSmemBudget, Lkv);
          SmemTile Ks = smem.tile(Bc, d, st), Vs = smem.tile(Bc, d, st);
          std::vector<SmemTile> Qs, dOs, Ls, Ds;
          for (int k = 0; k < kStages; ++k) {
            Qs.push_back(smem.tile(Br, d, st));
            dOs.push_back(smem.tile(Br, d, st));
          }
          SmemTile Pt = smem.tile(Bc, Br, st), dSt = smem.tile(Bc, Br, st);
          for (int k = 0; k < kStages; ++k) {
            Ls.push_back(smem.tile(1, Br, f32));
            Ds.push_back(smem.tile(1, Br, f32));
          }
          // [pipeline] Q_i, dO_i (rows past N zero-filled, free) and the rows' L·log2 e and D (the
          // padded workspace: every row is inside it).
          auto load_q_tile = [&](int64_t q, size_t stage) {
            const int64_t gh = q / nq, it = it0 + q % nq;
            Qs[stage].load_from(Qh[size_t(gh)], it * Br, 0);
            dOs[stage].load_from(Gh[size_t(gh)], it * Br, 0);
            for (int64_t r = 0; r < Br; ++r) {
              Ls[stage].write(0, r, L2g.load(bh_of(gh), it * Br + r));
              Ds[stage].write(0, r, Dg.load(bh_of(gh), it * Br + r));
            }
          };
          Ks.load_from(K, j0, 0);
          Vs.load_from(V, j0, 0);
          if (steps > 0) load_q_tile(0, 0);

          // [dq] dQ_itq's share of this K/V tile, dS K_j, from the dSᵀ tile: warp w computes the QM
          // m16 row tiles of group w % RG and the kDims dimensions of group w / RG ([dq-warps]).
          auto dq_step = [&](int64_t itq, int64_t gh) {
            for (int64_t w = 0; w < W; ++w) {
              const int64_t rg = w % RG, cg = w / RG;
              std::vector<std::vector<CFrag>> dq(size_t(QM), zero_frags(kDims / 8));
              // lab:begin dq {dQ}: [dq] + [dq-atomic]: per 16 keys kk, the A fragment of each of the …
              for (int64_t kk = 0; kk < Bc / 16; ++kk) {
                std::vector<AFrag> a;
                for (int64_t m = 0; m < QM; ++m) a.push_back(ldmatrix_x4_a_trans(dSt, 16 * kk, 16 * (rg * QM + m)));
                for (int64_t np = 0; np < kDims / 16; ++np) {
                  const std::array<BFrag, 2> kb = mf::ldmatrix_x4_b(Ks, 16 * kk, cg * kDims + 16 * np, true);
                  for (int64_t m = 0; m < QM; ++m) {
                    mf::mma(dq[size_t(m)][size_t(2 * np)], a[size_t(m)], kb[0], Lkv);
                    mf::mma(dq[size_t(m)][size_t(2 * np + 1)], a[size_t(m)], kb[1], Lkv);
                  }
                }
              }
              for (int64_t m = 0; m < QM; ++m)
                for (int64_t n = 0; n < kDims / 8; ++n)
                  for (int lane = 0; lane < 32; ++lane)
                    for (int x = 0; x < 4; ++x) {
                      const mf::Coord c = mf::c_elem(lane, x);
                      // [dq-layout] element (r, c) of the Q tile, at its place in the warp-ordered tile
                      const int64_t r = 16 * (rg * QM + m) + c.row, col = cg * kDims + 8 * n + c.col;
                      const int64_t at = (acc0(gh) + itq * Br) * d + acc_offset(sc, d, int(r), int(col));
                      const float v = dq[size_t(m)][size_t(n)][size_t(lane)][size_t(x)];
                      if (det) Acc.store(at / d, at % d, Acc.load(at / d, at % d) + v);  // [deterministic] its own buffer
                      else Acc.atomic_add(at / d, at % d, v);
                    }
              // lab:end
            }
          };

          // [dkv-warps] dK_j and dV_j of warp w: KD/16 key tiles × DW/8 dim tiles each.
          std::vector<std::vector<std::vector<CFrag>>> dk(static_cast<size_t>(W)), dv(static_cast<size_t>(W));
          for (int64_t w = 0; w < W; ++w) {
            dk[size_t(w)].assign(size_t(KD / 16), zero_frags(DW / 8));
            dv[size_t(w)].assign(size_t(KD / 16), zero_frags(DW / 8));
          }
          for (int64_t q = 0; q < steps; ++q) {
            const int64_t gh = q / nq, it = it0 + q % nq, bh = bh_of(gh);
            const int64_t i0 = it * Br, rows = std::min(Br, N - i0);
            const size_t stage = size_t(q % kStages), other = size_t((q + 1) % kStages);
            barrier(Lkv);  // [two-barriers] tile i landed; every warp is past tile i − 1
            if (q + 1 < steps) load_q_tile(q + 1, other);
            const bool masked = needs_mask(i0, i0 + rows, j0, N, Nk, Bc, s.causal, s.window);
            const SmemTile &Qt = Qs[stage], &dOt = dOs[stage], &Lt = Ls[stage], &Dt = Ds[stage];
            for (int64_t w = 0; w < W; ++w) {
              const int64_t wk = w % WK, wq = w / WK, key_w = j0 + 32 * wk, q_w = wq * QW;  // [sdp-warps]
              // [transposed] Sᵀ = K Q_iᵀ and dPᵀ = V dO_iᵀ: the warp's 32 keys (two m16 tiles) × QW queries.
              std::vector<std::vector<CFrag>> sT(2, zero_frags(QW / 8)), dpT(2, zero_frags(QW / 8));
              // lab:begin transposed {dQ dK dV}: [transposed]: per 16 dims kk, the A fragments of the …
              for (int64_t kk = 0; kk < d / 16; ++kk) {
                const AFrag ka[2] = {mf::ldmatrix_x4_a(Ks, 32 * wk, 16 * kk), mf::ldmatrix_x4_a(Ks, 32 * wk + 16, 16 * kk)};
                const AFrag va[2] = {mf::ldmatrix_x4_a(Vs, 32 * wk, 16 * kk), mf::ldmatrix_x4_a(Vs, 32 * wk + 16, 16 * kk)};
                for (int64_t np = 0; np < QW / 16; ++np) {
                  const std::array<BFrag, 2> qb = mf::ldmatrix_x4_b(Qt, q_w + 16 * np, 16 * kk, false);
                  const std::array<BFrag, 2> ob = mf::ldmatrix_x4_b(dOt, q_w + 16 * np, 16 * kk, false);
                  for (int m = 0; m < 2; ++m) {
                    mf::mma(sT[size_t(m)][size_t(2 * np)], ka[m], qb[0], Lkv);
                    mf::mma(sT[size_t(m)][size_t(2 * np + 1)], ka[m], qb[1], Lkv);
                    mf::mma(dpT[size_t(m)][size_t(2 * np)], va[m], ob[0], Lkv);
                    mf::mma(dpT[size_t(m)][size_t(2 * np + 1)], va[m], ob[1], Lkv);
                  }
                }
              }
              // lab:end
              // [causal-mask] Element (key row, query column) of C tile (m, n): key key_w + 16m + row,
              // query i0 + q_w + 8n + col; a key at or past the query's visible count (past Nk
              // included) gets −inf, and [window] one before the query's first visible key.
              if (masked)
                for (int m = 0; m < 2; ++m)
                  for (int64_t n = 0; n < QW / 8; ++n)
                    for (int lane = 0; lane < 32; ++lane)
                      for (int e = 0; e < 4; ++e) {
                        const mf::Coord c = mf::c_elem(lane, e);
                        if (!key_visible(i0 + q_w + 8 * n + c.col, key_w + 16 * m + c.row, N, Nk, s.causal, s.window))
                          sT[size_t(m)][size_t(n)][size_t(lane)][size_t(e)] = -kInf;
                      }
              // [softmax-grad] Pᵀ = exp2(s·scale·log2 e − L·log2 e), dSᵀ = Pᵀ ∘ (dPᵀ − D): a column
              // of the lane's tile is one query, whose L and D the lane reads (two of each per tile).
              // [dropout] Z from one Philox call per 2 × 2 block, as the kernel draws it: call e of
              // the lane is the block of query i0 + q_w + 16np + 2t + e and key key_w + 16m + g; its
              // word 2nb + hr is element (key row hr, query block nb); Pᵀ∘Z feeds dV,
              // dSᵀ = Pᵀ ∘ (dPᵀ∘Z − D). [pt-smem] Both into the Pt and dSt tiles (rounded there).
              // lab:begin softmax-grad {dQ dK dV}: [softmax-grad] + [pt-smem]: for each lane, 16 queries np …
              for (int lane = 0; lane < 32; ++lane) {
                const int g = mf::group(lane), t = mf::thread_in_group(lane);
                for (int64_t np = 0; np < QW / 16; ++np) {
                  float z[2][2][4] = {};  // z[m][nb][element]: Z of the lane's elements
                  for (int m = 0; m < 2; ++m)
                    for (int e = 0; e < 2; ++e) {
                      if (!drop) {
                        for (int nb = 0; nb < 2; ++nb)
                          for (int hr = 0; hr < 2; ++hr) z[m][nb][2 * hr + e] = 1.0f;
                        continue;
                      }
                      const DropoutWords wd =
                          dropout_words(s.dropout_seed, s.dropout_offset, bh, i0 + q_w + 16 * np + 2 * t + e, key_w + 16 * m + g);
                      for (int nb = 0; nb < 2; ++nb)
                        for (int hr = 0; hr < 2; ++hr) z[m][nb][2 * hr + e] = wd.w[2 * nb + hr] >= keep_below ? rescale : 0.0f;
                    }
                  for (int nb = 0; nb < 2; ++nb) {
                    const int64_t n = 2 * np + nb, qc = q_w + 8 * n + 2 * t;
                    const float l2v[2] = {Lt.read(0, qc), Lt.read(0, qc + 1)}, dd2[2] = {Dt.read(0, qc), Dt.read(0, qc + 1)};
                    for (int m = 0; m < 2; ++m)
                      for (int x = 0; x < 4; ++x) {
                        const mf::Coord c = mf::c_elem(lane, x);  // its query column: 2t + x % 2
                        const float lv = l2v[c.col - 2 * t], dval = dd2[c.col - 2 * t];
                        float& sv = sT[size_t(m)][size_t(n)][size_t(lane)][size_t(x)];
                        float& dpv = dpT[size_t(m)][size_t(n)][size_t(lane)][size_t(x)];
                        const float pv = std::exp2(std::fma(sv, sl2, -lv));
                        if (drop) {
                          sv = pv * z[m][nb][x];
                          dpv = pv * (dpv * z[m][nb][x] - dval);
                        } else {
                          sv = pv;
                          dpv = pv * (dpv - dval);
                        }
                        Pt.write(32 * wk + 16 * m + c.row, q_w + 8 * n + c.col, sv);
                        dSt.write(32 * wk + 16 * m + c.row, q_w + 8 * n + c.col, dpv);
                      }
                  }
                }
              }
              // lab:end
              Lkv.nonmatmul_ops += 32 * QW * (5 + (masked ? 1 : 0) + (drop ? 3 : 0));
              Lkv.exps += 32 * QW;  // the recompute of Pᵀ: every entry of the warp's 32 keys × QW queries, masked ones too
            }
            barrier(Lkv);  // [two-barriers] Pᵀ and dSᵀ of tile i are whole
            dq_step(it, gh);
            // [dkv] dV += Pᵀ dO_i and dK += dSᵀ Q_i, warp w: keys KD·(w % KG) + 16m, dims DW·(w / KG).
            for (int64_t w = 0; w < W; ++w) {
              const int64_t kg = w % KG, dg = w / KG;
              // lab:begin dkv {dK dV}: [dkv]: per 16 queries kk, the A fragments of the warp's KD/16 key …
              for (int64_t kk = 0; kk < Br / 16; ++kk) {
                std::vector<AFrag> pa, da;
                for (int64_t m = 0; m < KD / 16; ++m) {
                  pa.push_back(mf::ldmatrix_x4_a(Pt, KD * kg + 16 * m, 16 * kk));
                  da.push_back(mf::ldmatrix_x4_a(dSt, KD * kg + 16 * m, 16 * kk));
                }
                for (int64_t np = 0; np < DW / 16; ++np) {
                  const std::array<BFrag, 2> ob = mf::ldmatrix_x4_b(dOt, 16 * kk, dg * DW + 16 * np, true);
                  const std::array<BFrag, 2> qb = mf::ldmatrix_x4_b(Qt, 16 * kk, dg * DW + 16 * np, true);
                  for (int64_t m = 0; m < KD / 16; ++m) {
                    auto& v = dv[size_t(w)][size_t(m)];
                    auto& k = dk[size_t(w)][size_t(m)];
                    mf::mma(v[size_t(2 * np)], pa[size_t(m)], ob[0], Lkv);
                    mf::mma(v[size_t(2 * np + 1)], pa[size_t(m)], ob[1], Lkv);
                    mf::mma(k[size_t(2 * np)], da[size_t(m)], qb[0], Lkv);
                    mf::mma(k[size_t(2 * np + 1)], da[size_t(m)], qb[1], Lkv);
                  }
                }
              }
              // lab:end
            }
            Lkv.tiles_computed += 1;
            Lkv.tiles_masked += classify_tile(i0, i0 + rows, j0, j0 + keys, N, Nk, s.causal, s.window) == TileKind::Diagonal;
          }
          Lkv.tiles_skipped += QH * (Tr - nq);
          // [dkdv-write] dV_j and scale·dK_j into the V and K tiles (in the storage type) once every
          // warp is past its last read of them, then — all written — the rows inside Nk out to HBM.
          barrier(Lkv);
          for (int64_t w = 0; w < W; ++w) {
            const int64_t kg = w % KG, dg = w / KG;
            for (int64_t m = 0; m < KD / 16; ++m)
              for (int64_t n = 0; n < DW / 8; ++n)
                for (int lane = 0; lane < 32; ++lane)
                  for (int x = 0; x < 4; ++x) {
                    const mf::Coord c = mf::c_elem(lane, x);
                    const int64_t r = KD * kg + 16 * m + c.row, col = dg * DW + 8 * n + c.col;
                    Vs.write(r, col, dv[size_t(w)][size_t(m)][size_t(n)][size_t(lane)][size_t(x)]);
                    Ks.write(r, col, scale * dk[size_t(w)][size_t(m)][size_t(n)][size_t(lane)][size_t(x)]);
                  }
          }
          Lkv.nonmatmul_ops += Bc * d;  // the scale on dK, every row of the tile
          barrier(Lkv);
          for (int64_t r = 0; r < keys; ++r)
            for (int64_t c = 0; c < d; ++c) {
              dK.store(j0 + r, c, Ks.read(r, c));
              dV.store(j0 + r, c, Vs.read(r, c));
            }
          if (det) barrier(Lkv);  // the next K/V tile's copies overwrite these rows
        }
    }

  // ---- step13_dq_convert ------------------------------------------------------------------------
  {
    const GlobalMat Acc2(accw.data(), splits * BH * Np, d, d, f32, Lcv);
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t h = 0; h < s.H; ++h) {
        const int64_t bh = b * s.H + h;
        GlobalMat dQ(res.grads.dq.head(b, h), N, d, d, st, Lcv);
        for (int64_t i = 0; i < N; ++i)
          for (int64_t c = 0; c < d; ++c) {
            float v = 0.0f;  // [dq-convert] the splits in order, each read through [dq-layout]
            for (int64_t k = 0; k < splits; ++k) {
              const int64_t at = ((k * BH + bh) * Np + (i / Br) * Br) * d + acc_offset(sc, d, int(i % Br), int(c));
              v += Acc2.load(at / d, at % d);
            }
            dQ.store(i, c, scale * v);
          }
        Lcv.nonmatmul_ops += N * d * splits;  // the scale, and the adds of splits 1 .. splits − 1
      }
  }
  return res;
}

// The ledger in closed form (docs/13_mma_backward.md). One (b, h): Tc K/V tiles, each visited once
// (by its own block, or with --deterministic by one of the splits' blocks); tile j walks the Q tiles
// first_q_tile(j) .. end_q_tile(j) − 1 (Tr − 1 without a window): `pairs` in all, `q_rows` of their rows inside N, `masked` needing the
// per-element mask, `diagonal` holding the diagonal, `skipped` Q tiles before the first. Per pair and
// warp: Sᵀ and dPᵀ read (d/16)·(4 + 2·QW/16) fragments (two key tiles of K and of V as A; Q, dO as
// B) and issue (d/16)·(QW/16)·8 products; the lane's L and D, 16 bytes per C column (both key
// tiles share it); 2·32·QW elements
// of Pᵀ and dSᵀ written; dV and dK read (Br/16)·(2·KD/16 + 2·DW/16) fragments for
// (Br/16)·(DW/16)·(KD/16)·4 products; one dq_step per pair reads (Bc/16)·(QM + kDims/16) fragments
// for (Bc/16)·(kDims/16)·QM·2 products. dQ's partial sums cover every row of the Q tile (Br·d per
// pair), the padding included. [gqa] A block serves a key/value head: K_j, V_j, dK_j, dV_j, their
// staging and the block's own barriers once per key/value head (BHk), the pairs once per query head.
LedgerSet closed_form(const Shape& s, const Schedule& sc, bool det) {
  const int d = int(s.d);
  if (!valid(sc, d)) throw std::invalid_argument("step13: the tiles must hold whole m16n8k16 fragments and ldmatrix.x4 pairs");
  const int64_t BH = s.B * s.H, N = s.N, Nk = s.Nk, Np = rows_padded(N), Br = sc.Br, Bc = sc.Bc, W = sc.warps();
  const int64_t Tr = num_tiles(N, Br), Tc = num_tiles(Nk, Bc), QM = sc.qm(d), kDims = sc.dq_dims(d);
  const int64_t QW = sc.sdp_queries(), KD = sc.dkv_keys(d), DW = sc.dkv_dims(d);
  const int64_t BHk = s.B * s.hkv();  // [gqa] key/value heads: K, V, dK, dV once per head of these
  const int64_t splits = det ? det_splits(BHk, Tc) : 1;
  const bool drop = float(s.dropout) > 0.0f;
  int64_t pairs = 0, q_rows = 0, masked = 0, diagonal = 0, skipped = 0;
  for (int64_t j = 0; j < Tc; ++j) {
    const int64_t j0 = j * Bc, j1 = std::min(j0 + Bc, Nk), first = first_q_tile(j0, N, Nk, Br, s.causal);
    const int64_t end = std::max(first, end_q_tile(j1, N, Nk, Br, s.causal, s.window));  // [window]
    skipped += Tr - (end - first);
    for (int64_t it = first; it < end; ++it) {
      const int64_t i0 = it * Br, i1 = std::min(i0 + Br, N);
      ++pairs;
      q_rows += i1 - i0;
      masked += needs_mask(i0, i1, j0, N, Nk, Bc, s.causal, s.window);
      diagonal += classify_tile(i0, i1, j0, j1, N, Nk, s.causal, s.window) == TileKind::Diagonal;
    }
  }
  LedgerSet ls;
  Ledger& pre = ls["bwd_pre"];
  pre.gmem_read = BH * (N * d * 2 * 2 + N * 4);              // dO, O and L of the rows inside N
  pre.gmem_write = BH * Np * (splits * d * 4 + 4 + 4);       // every padded row: the zeroed accumulators, D, L·log2 e
  pre.nonmatmul_ops = BH * N * (2 * d + 1);
  pre.workspace = workspace_bytes(BH, N, d, splits);

  Ledger& kv = ls["bwd_kv"];
  const int64_t dq_bytes = BH * pairs * Br * d * 4;  // the partial sums of dQ, every row of each visited Q tile
  kv.gmem_read = BHk * Nk * d * 2 * 2 + BH * (q_rows * d * 2 * 2 + pairs * Br * 4 * 2) + (det ? dq_bytes : 0);
  kv.gmem_write = BHk * Nk * d * 2 * 2 + (det ? dq_bytes : 0);
  kv.gmem_atomic = det ? 0 : dq_bytes;
  kv.smem_write = BHk * (Tc * 2 * Bc * d * 2                     // K_j, V_j
                         + Tc * 2 * Bc * d * 2)                   // dK_j, dV_j staged in the K/V tiles
                  + BH * (pairs * (2 * Br * d * 2 + 2 * Br * 4)   // Q_i, dO_i, L, D
                          + pairs * 2 * Bc * Br * 2);             // Pᵀ, dSᵀ
  const int64_t frags_pair =
      W * ((d / 16) * (4 + 2 * (QW / 16)) + (Br / 16) * (2 * (KD / 16) + 2 * (DW / 16)) + (Bc / 16) * (QM + kDims / 16));
  kv.smem_read = BH * pairs * (frags_pair * kFragElems * 2 + W * (QW / 8) * 32 * 4 * 4) + BHk * Nk * d * 2 * 2;
  kv.barriers = BH * 2 * pairs + BHk * Tc * (2 + (det ? 1 : 0));
  kv.matmul_flops = BH * pairs * W *
                    ((d / 16) * (QW / 16) * 8 + (Br / 16) * (DW / 16) * (KD / 16) * 4 + (Bc / 16) * (kDims / 16) * QM * 2) * kMmaFlops;
  kv.nonmatmul_ops = BH * (pairs * W * 16 * Br * (5 + (drop ? 3 : 0)) + masked * W * 16 * Br) + BHk * Tc * Bc * d;
  kv.exps = BH * pairs * W * 16 * Br;  // Pᵀ recomputed on every entry of every visited tile; dropout adds none
  kv.tiles_computed = BH * pairs;
  kv.tiles_masked = BH * diagonal;
  kv.tiles_skipped = BH * skipped;
  kv.smem_peak = smem_bytes(sc, d);

  Ledger& cv = ls["dq_convert"];
  cv.gmem_read = BH * N * d * 4 * splits;
  cv.gmem_write = BH * N * d * 2;
  cv.nonmatmul_ops = BH * N * d * splits;
  return ls;
}

namespace {
BackwardBlueprintResult run_backward(const Shape& s, const Inputs& in, const Forward& fwd, const Tensor4& dO, const StepOptions& o) {
  require_supported(s, o);
  return blueprint(s, in, fwd, dO, schedule_for(int(s.d), tiles_of(o)), deterministic(o));
}
LedgerSet run_backward_closed_form(const Shape& s, const StepOptions& o) {
  require_supported(s, o);
  return closed_form(s, schedule_for(int(s.d), tiles_of(o)), deterministic(o));
}
// [arch] Shared memory per block of the backward's main kernel (schedule.hpp): 161 KB at d = 128
// and 162 KB at d = 64 — within sm_80's and sm_90's limits, over sm_86's and sm_89's 99 KB except
// at d = 16 (90 KB); the refusal is per shape. (The forward's is step 12's: borrow_forward.)
int64_t run_backward_smem(const Shape& s, const StepOptions& o) { return smem_bytes(schedule_for(int(s.d), tiles_of(o)), int(s.d)); }
}  // namespace

const StepInfo& info() {
  static const StepInfo step = [] {
    StepInfo i;
    i.id = "13";
    i.slug = "mma_backward";
    i.title = "the backward on tensor cores: FlashAttention-2's grid of warps, P and dS through shared memory (forward: step 12)";
    i.teaches = "backward at FlashAttention-2's speed; deterministic dQ; dropout";
    i.mma_unit = MmaUnit::mma_sync;  // [mma-unit]
    i.flags = {{"deterministic", {"off", "on"}, "dQ without racing atomics: a buffer per split, summed in a fixed order"}};
    {
      StepFlag f{"tiles", {}, "the backward's tile shape, Br x Bc (fp16, d = 64 and 128; docs/13_mma_backward.md, 'Tuning')"};
      for (const char* n : kTileNames) f.choices.push_back(n);
      f.sweep = false;
      i.flags.push_back(f);
    }
    {
      StepFlag f{"experiment", {}, "a change of when and how dQ's atomics leave, measured against the kernel as built (fp16, d = 64 and 128): "
                                   "dq-end, red64, red32 (docs/13_mma_backward.md, 'Tuning')"};
      for (const char* n : kExperimentNames) f.choices.push_back(n);
      f.sweep = false;
      i.flags.push_back(f);
    }
    borrow_forward<step12::info>(i);  // [forward-from] the forward is step 12's, whatever the flags say
    i.supports_dropout = true;
    i.supports_gqa = true;     // [gqa] a block per key/value head sums its group's dK and dV
    i.supports_window = true;  // [window] each K/V tile's Q tiles of the band
    i.backward_blueprint = run_backward;
    i.backward_closed_form = run_backward_closed_form;
    i.backward_smem_bytes = run_backward_smem;
    i.min_cc = 80;
    i.needs = "mma.sync.m16n8k16 and cp.async";
#ifdef FA_HAVE_CUDA
    i.launch_backward = launch_backward;
    i.backward_workspace_bytes = backward_workspace_bytes;
#endif
    i.kernel_prefix = "step13_";
    return i;
  }();
  return step;
}

}  // namespace fa::step13
