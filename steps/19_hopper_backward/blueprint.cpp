// Step 19 — the blueprint: kernel.cu's three backward kernels as CPU loops, warpgroup by warpgroup,
// every product a wgmma of common/blueprint/wgmma_emu.hpp (its fragments indexed as the kernel's
// registers are: common/kernel/wgmma_layout.hpp), every access through the counting views of
// common/blueprint/ledger.hpp. The forward is step 16's (its blueprint, closed form and kernel are
// registered here as well).
//
//   bwd_pre     per padded row: D (d/8 threads' partial sums of 8 elements, then their butterfly),
//               L·log2 e (+inf past N, D = 0), the row's accumulator zeroed
//   bwd_kv      a block per (K/V tile, key/value head); per item (a Q tile of one of the group's
//               query heads: [items]) the producer's loads into stage t % stages, then each consumer c
//               (keys 64c .. 64c + 63): Sᵀ and dPᵀ ([swapped]), Pᵀ and dSᵀ ([bwd-softmax]), dSᵀ into
//               its shared buffer ([ds-smem]), dV and dK ([c-to-a]); then each consumer's dQ chunk
//               ([dq-wgmma], [dq-split]) staged and added by the writer ([dq-writer]), or added from
//               registers (--ablate atomics); dK and dV out of the accumulators ([dkv-out])
//   dq_convert  dQ = scale · accumulator, read through [dq-layout]
//   key_mean    (--dq centered) each key/value head's mean key, a block per kMeanKeys keys ([dq-centered])
// What the blueprint does not model: the swizzle (addresses: tests/test_step14.cpp holds them), the
// mbarriers (it runs the roles in an order they allow) and the order in which racing adds land.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "blueprint/wgmma_emu.hpp"
#include "kernel/dropout.hpp"
#include "schedule.hpp"

namespace fa::step16 {
const StepInfo& info();
}
namespace fa::step12 {
const StepInfo& info();
}

namespace fa::step19 {

int ablation_of(const StepOptions& o) { return choice_index(o, "ablate", kAblationNames, kAblations, "step19"); }
namespace {
constexpr const char* kSwitch[] = {"off", "on"};
}
bool deterministic(const StepOptions& o) { return choice_index(o, "deterministic", kSwitch, 2, "step19") == 1; }
int dq_mode_of(const StepOptions& o) { return choice_index(o, "dq", kDqNames, kDqModes, "step19"); }
int dropout_kernel_of(const StepOptions& o) {
  return choice_index(o, "dropout-kernel", kDropoutKernelNames, kDropoutKernels, "step19");
}

std::string refusal(bool bf16, int d, bool dropout, const StepOptions& o) {
  const int a = ablation_of(o);  // an unknown --ablate value throws, naming the flag
  const bool det = deterministic(o), centered = dq_mode_of(o) == kDqCentered;
  if (dropout && dropout_kernel_of(o) == kDropoutRefuse)
    return "step19: --dropout is refused by default: this backward may apply it only where it costs at most 10 % of its time, "
           "and it costs more (docs/19_hopper_backward.md, \"Dropout\", has the measurement); step 13 applies it. "
           "--dropout-kernel run runs it anyway, to measure it";
  if (dropout && centered) return "step19: --dropout is compiled without --dq centered";
  if (dropout && a != kFull) return std::string("step19: --dropout is compiled without --ablate (") + kAblationNames[a] + ")";
  if (det && centered) return "step19: --dq centered adds its row sums with atomics, in no fixed order: not with --deterministic";
  if (centered && a != kFull) return std::string("step19: --dq centered is compiled without --ablate (") + kAblationNames[a] + ")";
  if (det && a != kFull) return std::string("step19: --ablate ") + kAblationNames[a] + " is compiled without --deterministic";
  if (a != kFull && bf16) return std::string("step19: --ablate ") + kAblationNames[a] + " is compiled for fp16 only";
  if (ablation_built(a, d)) return "";
  if (a == kNoProducerLast)
    return "step19: --ablate producer-last is built where dQ is split by turns (d = 64): by columns both consumers release together";
  throw std::logic_error("step19: ablation_built() refuses an ablation refusal() has no words for");
}

namespace {

namespace mf = fa::m16n8k16;
constexpr float kInf = std::numeric_limits<float>::infinity();

// Columns of dK, dV per wgmma: a 64-column panel (fewer for d < 64, which only the blueprint runs).
int64_t panel_cols(int64_t d) { return std::min<int64_t>(d, wgmma::kPanel); }

// [tile-sizes] 64 × 128 (with --ablate tiles 128 × 128 at d = 64, 80 × 128 at d = 128), two stages or
// more, whole 64-column panels.
void check_schedule(const Schedule& sc, int64_t d, int ablation) {
  if (sc.Br != schedule_for(int(d), ablation).Br || sc.Bc != 128 || sc.stages < 2 || d % 16 != 0 || (d > 64 && d % 64 != 0) ||
      (dq_transposed(sc) && d != 128))
    throw std::invalid_argument(
        "step19: 64 queries (--ablate tiles: 128 at d = 64, 80 at d = 128) × 128 keys, two stages or more, whole 64-column panels");
}

// [c-to-a] The A fragments (one per warp) of keys × queries 16kk .. 16kk + 15 of a 64 × Br
// accumulator, rounded to the storage type: A element i of a lane is C tile 2kk + i / 4, element i % 4.
std::vector<mf::AFrag> c_to_a(const wgmma::Acc& acc, int64_t kk, const Store& st) {
  std::vector<mf::AFrag> a(4, mf::AFrag(32));
  for (int w = 0; w < 4; ++w)
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 8; ++i)
        a[size_t(w)][size_t(lane)][size_t(i)] =
            st.apply(acc.reg(w, lane, 4 * (2 * int(kk) + mf::a_from_c_tile(i)) + mf::a_from_c_elem(i)));
  return a;
}

}  // namespace

BackwardBlueprintResult blueprint(const Shape& s, const Inputs& in, const Forward& fwd, const Tensor4& dO, const Schedule& sc,
                                  int ablation, bool det, bool centered) {
  const int64_t d = s.d;
  check_schedule(sc, d, ablation);
  const std::string why = refusal(s.dtype == DType::bf16, int(d), false, {});  // dropout's combinations: below
  if (!why.empty()) throw Unsupported(why);
  if (det && ablation != kFull) throw Unsupported("step19: an ablation is compiled without --deterministic");
  if (!ablation_built(ablation, int(d)))  // refusal()'s words
    throw Unsupported(refusal(false, int(d), false, {{"ablate", kAblationNames[ablation]}}));
  if (det && centered) throw Unsupported("step19: --dq centered is not compiled with --deterministic");
  const bool drop = float(s.dropout) > 0.0f;  // [dropout] P as the kernel gets it (a float)
  if (drop && (centered || ablation != kFull)) throw Unsupported("step19: --dropout is compiled without --dq centered and --ablate");
  const uint32_t keep_below = drop ? dropout_threshold(float(s.dropout)) : 0u;
  const float z_kept = drop ? dropout_rescale(float(s.dropout)) : 1.0f;
  BackwardBlueprintResult res;
  res.grads = {Tensor4(s.B, s.H, s.N, s.d), Tensor4(s.B, s.hkv(), s.Nk, s.d), Tensor4(s.B, s.hkv(), s.Nk, s.d)};  // [gqa]
  res.ledger.kernels.reserve(4);  // references into the set stay valid
  Ledger& Lpre = res.ledger["bwd_pre"];
  Ledger* Lkm = centered ? &res.ledger["key_mean"] : nullptr;  // [dq-centered]
  Ledger& Lkv = res.ledger["bwd_kv"];
  Ledger& Lcv = res.ledger["dq_convert"];
  const Store st = Store::of(s.dtype), f32 = Store::f32();
  const int unit = acc_rows(sc);  // [dq-layout] the accumulator's unit: 64 rows, or 80 transposed
  const int64_t BH = s.B * s.H, N = s.N, Nk = s.Nk, Np = rows_padded(N, unit), Br = sc.Br, Bc = sc.Bc, C = sc.consumers();
  const int64_t Tr = num_tiles(N, Br), Tc = num_tiles(Nk, Bc), PC = panel_cols(d), panels = d / PC;
  const int64_t Hkv = s.hkv(), QH = s.H / Hkv;
  const int split = split_of(int(d), ablation);  // [dq-split]
  const bool by_cols = split == kByColumns || split == kTransposed, by_rows = split == kByRows, all_keys = split != kByKeys;
  const bool bulk = ablation != kAtomics, tr = split == kTransposed, sw = ablation != kSwapped;  // [unswapped]
  const bool from_rounded = ds_from_rounded_p(sc);  // [tile-sizes]
  const float scale = float(s.softmax_scale()), sl2 = scale * kLog2e;

  const int64_t Tp = Np / kSemRows;  // [deterministic] semaphores per head
  std::vector<float> l2w(size_t(BH * Np)), ddw(size_t(BH * Np)), accw(size_t(BH * Np * d)), semw(size_t(det ? BH * Tp : 0));
  const int64_t BHk = s.B * Hkv;
  std::vector<float> rsw(size_t(centered ? BH * Np : 0)), kmw(size_t(centered ? BHk * d : 0));  // [dq-centered]
  Lpre.workspace = workspace_bytes(BH, N, d, det, centered, BHk, unit);

  // ---- step19_bwd_pre ---------------------------------------------------------------------------
  {
    GlobalMat L2g(l2w.data(), BH, Np, Np, f32, Lpre), Dg(ddw.data(), BH, Np, Np, f32, Lpre), Acc(accw.data(), BH * Np, d, d, f32, Lpre);
    GlobalMat Sem(semw.data(), det ? BH : 0, Tp, Tp, f32, Lpre);  // 32-bit counters (a float holds them exactly)
    GlobalMat Rs(rsw.data(), centered ? BH : 0, Np, Np, f32, Lpre), Km(kmw.data(), centered ? BHk : 0, d, d, f32, Lpre);
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t h = 0; h < s.H; ++h) {
        const int64_t bh = b * s.H + h;
        const GlobalMat O(fwd.o.head(b, h), N, d, d, st, Lpre), G(dO.head(b, h), N, d, d, st, Lpre),
            Lse(fwd.lse.head(b, h), 1, N, N, f32, Lpre);
        const int kPer = int(d / 8);  // threads per row, 8 elements (16 bytes) each
        for (int64_t i = 0; i < Np; ++i) {
          std::vector<float> part(size_t(kPer), 0.0f);
          if (i < N) {
            for (int th = 0; th < kPer; ++th)
              for (int x = 0; x < 8; ++x) part[size_t(th)] += G.load(i, 8 * th + x) * O.load(i, 8 * th + x);
            Lpre.nonmatmul_ops += 2 * d + 1;  // a multiply and an add per element; L·log2 e
          }
          for (int64_t c = 0; c < d; ++c) Acc.store(bh * Np + i, c, 0.0f);
          for (int off = kPer / 2; off > 0; off /= 2) {  // __shfl_xor_sync: every thread adds its partner's
            std::vector<float> next(part.size());
            for (int th = 0; th < kPer; ++th) next[size_t(th)] = part[size_t(th)] + part[size_t(th ^ off)];
            part = next;
          }
          Dg.store(bh, i, part[0]);
          L2g.store(bh, i, i < N ? Lse.load(0, i) * kLog2e : kInf);
          if (det && i % kSemRows == 0) Sem.store(bh, i / kSemRows, 0.0f);  // [deterministic] the row's first thread
          if (centered) {  // [dq-centered] the row's sum; the first row of head bh < B·Hkv zeroes mean bh
            Rs.store(bh, i, 0.0f);
            if (i == 0 && bh < BHk)
              for (int64_t c = 0; c < d; ++c) Km.store(bh, c, 0.0f);
          }
        }
      }
  }

  // ---- step19_key_mean ([dq-centered]) -----------------------------------------------------------
  if (centered) {
    GlobalMat Km(kmw.data(), BHk, d, d, f32, *Lkm);
    for (int64_t bk = 0; bk < BHk; ++bk) {
      const GlobalMat K(in.k.head(bk / Hkv, bk % Hkv), Nk, d, d, st, *Lkm);
      for (int64_t k0 = 0; k0 < Nk; k0 += kMeanKeys) {  // a block: its keys' column sums, then one add each
        std::vector<float> part(size_t(d), 0.0f);
        for (int64_t key = k0; key < std::min(k0 + kMeanKeys, Nk); ++key)
          for (int64_t c = 0; c < d; ++c) part[size_t(c)] += K.load(key, c);
        for (int64_t c = 0; c < d; ++c) Km.atomic_add(bk, c, part[size_t(c)] / float(Nk));
        Lkm->nonmatmul_ops += (std::min(k0 + kMeanKeys, Nk) - k0) * d + d;
      }
    }
  }

  // ---- step19_bwd_kv ----------------------------------------------------------------------------
  GlobalMat L2g(l2w.data(), BH, Np, Np, f32, Lkv), Dg(ddw.data(), BH, Np, Np, f32, Lkv), Acc(accw.data(), BH * Np, d, d, f32, Lkv);
  GlobalMat Sem(semw.data(), det ? BH : 0, Tp, Tp, f32, Lkv);
  GlobalMat Rs(rsw.data(), centered ? BH : 0, Np, Np, f32, Lkv);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t hk = 0; hk < Hkv; ++hk) {
      const GlobalMat K(in.k.head(b, hk), Nk, d, d, st, Lkv), V(in.v.head(b, hk), Nk, d, d, st, Lkv);
      GlobalMat dK(res.grads.dk.head(b, hk), Nk, d, d, st, Lkv), dV(res.grads.dv.head(b, hk), Nk, d, d, st, Lkv);
      std::vector<GlobalMat> Qh, Gh;
      for (int64_t gh = 0; gh < QH; ++gh) {
        Qh.emplace_back(in.q.head(b, hk * QH + gh), N, d, d, st, Lkv);
        Gh.emplace_back(dO.head(b, hk * QH + gh), N, d, d, st, Lkv);
      }
      // [deterministic] The blocks in launch order (blockIdx.x), which with --deterministic is the
      // order of every Q tile's adds: the semaphore checks below fail if it is not.
      for (int64_t x = 0; x < Tc; ++x) {
        const int64_t jt = kv_tile_of_block(x, Tc, det, s.causal), j0 = jt * Bc, j1 = std::min(j0 + Bc, Nk);
        const int64_t first = first_q_tile(j0, N, Nk, Br, s.causal), per_head = q_tiles_of(j0, j1, N, Nk, Br, s.causal, s.window);
        const int64_t items = QH * per_head;
        // [smem-map] K_j, V_j; the stages' Q_i, dO_i; two dSᵀ buffers (transposed: dS, [query][key]); two
        // dQ chunks per consumer (transposed: one); the stages' L·log2 e and D; the mbarriers' kilobyte.
        Smem smem(kSmemBudget, Lkv);
        SmemTile Ks = smem.tile(Bc, d, st), Vs = smem.tile(Bc, d, st);
        std::vector<SmemTile> Qs, dOs, Ls, Ds, dSt, chunk, Pq, dSq;
        for (int k = 0; k < sc.stages; ++k) {
          Qs.push_back(smem.tile(Br, d, st));
          dOs.push_back(smem.tile(Br, d, st));
        }
        for (int k = 0; k < 2 && sw; ++k) dSt.push_back(tr ? smem.tile(Br, Bc, st) : smem.tile(Bc, Br, st));
        for (int64_t c = 0; c < C && !sw; ++c) {  // [unswapped] each consumer's P and dS, [query][key], where dSᵀ's were
          Pq.push_back(smem.tile(Br, 64, st));
          dSq.push_back(smem.tile(Br, 64, st));
        }
        for (int64_t c = 0; c < dq_buffers(sc) * C; ++c) chunk.push_back(smem.tile(unit, kChunk, f32));
        for (int k = 0; k < sc.stages; ++k) {
          Ls.push_back(smem.tile(1, Br, f32));
          Ds.push_back(smem.tile(1, Br, f32));
        }
        (void)smem.tile(1, 256, f32);  // the mbarriers
        barrier(Lkv);                  // the block's one __syncthreads, after their set-up
        if (items > 0) {
          Ks.load_from(K, j0, 0);
          Vs.load_from(V, j0, 0);
        }
        const std::vector<wgmma::Acc> zero_panels(static_cast<size_t>(panels), wgmma::Acc{static_cast<int>(PC)});
        std::vector<std::vector<wgmma::Acc>> dk(static_cast<size_t>(C), zero_panels), dv = dk;
        for (int64_t t = 0; t < items; ++t) {
          const int64_t gh = t / per_head, i0 = (first + t % per_head) * Br, bh = b * s.H + hk * QH + gh;
          const size_t stg = size_t(t % sc.stages);
          // [ring] The producer's loads of item t (rows past N arrive as zeros, free).
          Qs[stg].load_from(Qh[size_t(gh)], i0, 0);
          dOs[stg].load_from(Gh[size_t(gh)], i0, 0);
          for (int64_t r = 0; r < Br; ++r) {
            Ls[stg].write(0, r, L2g.load(bh, i0 + r));
            Ds[stg].write(0, r, Dg.load(bh, i0 + r));
          }
          const bool masked = needs_mask(i0, i0 + Br, j0, N, Nk, Bc, s.causal, s.window);
          SmemTile& dS = sw ? dSt[size_t(t % 2)] : Pq[0];  // (unused unswapped)
          std::vector<std::vector<std::vector<mf::AFrag>>> pa(static_cast<size_t>(C)), dsa(static_cast<size_t>(C));
          for (int64_t c = 0; c < C; ++c) {
            // [swapped] Sᵀ = K_c Q_iᵀ and dPᵀ = V_c dO_iᵀ: 64 keys × Br queries, both operands K-major.
            wgmma::Acc sT{static_cast<int>(Br)}, dpT{static_cast<int>(Br)};
            if (!sw) {  // [unswapped] S = Q_i K_cᵀ and dP = dO_i V_cᵀ (queries × the consumer's 64 keys): A and B exchanged
              for (int64_t kk = 0; kk < d / 16; ++kk) wgmma::mma_ss(sT, Qs[stg], 0, Ks, 64 * c, kk, kk > 0, Lkv);
              for (int64_t kk = 0; kk < d / 16; ++kk) wgmma::mma_ss(dpT, dOs[stg], 0, Vs, 64 * c, kk, kk > 0, Lkv);
              // Register r of lane l in warp w: query 16w + g + 8·((r % 4) / 2), key 8·(r / 4) + 2t + r % 2:
              // the lane's two queries' L·log2 e and D read once.
              for (int w = 0; w < 4; ++w)
                for (int lane = 0; lane < 32; ++lane) {
                  const int row = 16 * w + mf::group(lane);
                  const float l2v[2] = {Ls[stg].read(0, row), Ls[stg].read(0, row + 8)};
                  const float ddv[2] = {Ds[stg].read(0, row), Ds[stg].read(0, row + 8)};
                  for (int r = 0; r < int(Br) / 2; ++r) {
                    const mf::Coord rc = wgmma::acc_elem(w, lane, r);
                    float sv = sT.reg(w, lane, r);
                    if (masked && !key_visible(i0 + rc.row, j0 + 64 * c + rc.col, N, Nk, s.causal, s.window)) sv = -kInf;
                    const float pv = std::exp2(std::fma(sv, sl2, -l2v[(r % 4) / 2]));
                    float& dpv = dpT.reg(w, lane, r);
                    dpv = pv * (dpv - ddv[(r % 4) / 2]);
                    sT.reg(w, lane, r) = pv;
                  }
                }
            } else {
            // lab:begin swapped {dQ dK dV}: [swapped]: Sᵀ and dPᵀ of the consumer's 64 keys, d/16 wgmmas each …
            for (int64_t kk = 0; kk < d / 16; ++kk) wgmma::mma_ss(sT, Ks, 64 * c, Qs[stg], 0, kk, kk > 0, Lkv);
            for (int64_t kk = 0; kk < d / 16; ++kk) wgmma::mma_ss(dpT, Vs, 64 * c, dOs[stg], 0, kk, kk > 0, Lkv);
            // lab:end
            // [bwd-softmax] Register r of lane l in warp w: key 16w + g + 8·((r % 4) / 2) of the
            // consumer's, query 8·(r / 4) + 2t + r % 2 of the tile, whose L·log2 e and D the lane reads.
            // lab:begin bwd-softmax {dQ dK dV}: [bwd-softmax]: Pᵀ = exp2(Sᵀ·scale·log2 e − L·log2 e) …
            for (int w = 0; w < 4; ++w)
              for (int lane = 0; lane < 32; ++lane)
                for (int n = 0; n < Br / 8; ++n) {
                  const int col = 8 * n + 2 * mf::thread_in_group(lane);
                  const float l2v[2] = {Ls[stg].read(0, col), Ls[stg].read(0, col + 1)};
                  const float ddv[2] = {Ds[stg].read(0, col), Ds[stg].read(0, col + 1)};
                  for (int e = 0; e < 4; ++e) {
                    const mf::Coord rc = {16 * w + mf::group(lane) + 8 * (e / 2), col + e % 2};
                    float sv = sT.reg(w, lane, 4 * n + e);
                    if (masked && !key_visible(i0 + rc.col, j0 + 64 * c + rc.row, N, Nk, s.causal, s.window)) sv = -kInf;
                    const float pv = std::exp2(std::fma(sv, sl2, -l2v[e % 2]));
                    // [dropout] Z of the element: the bit the kernel's Philox block call gives it (the
                    // same bits as drawn one element at a time); Pᵀ∘Z feeds dV, dSᵀ = Pᵀ ∘ (dPᵀ∘Z − D).
                    const float z = drop ? (dropout_keep(s.dropout_seed, s.dropout_offset, bh, i0 + rc.col, j0 + 64 * c + rc.row, keep_below)
                                                ? z_kept
                                                : 0.0f)
                                         : 1.0f;
                    float& dpv = dpT.reg(w, lane, 4 * n + e);
                    const float pd = from_rounded ? st.apply(pv) : pv;  // [tile-sizes] P̃ᵀ with 128-query tiles
                    dpv = pd * (drop ? dpv * z - ddv[e % 2] : dpv - ddv[e % 2]);
                    sT.reg(w, lane, 4 * n + e) = drop ? pv * z : pv;
                  }
                }
            // lab:end
            }
            Lkv.nonmatmul_ops += 64 * Br * (5 + (masked ? 1 : 0) + (drop ? 3 : 0));  // [dropout] Z's compare, two multiplies
            Lkv.exps += 64 * Br;  // Pᵀ recomputed on every entry, masked ones too
            // [c-to-a] Pᵀ and dSᵀ as A operands; [ds-smem] dSᵀ (the same rounded values) into the buffer.
            for (int64_t kk = 0; kk < Br / 16; ++kk) {
              pa[size_t(c)].push_back(c_to_a(sT, kk, st));
              dsa[size_t(c)].push_back(c_to_a(dpT, kk, st));
            }
            for (int w = 0; w < 4; ++w)
              for (int lane = 0; lane < 32; ++lane)
                for (int r = 0; r < int(Br) / 2; ++r) {
                  const mf::Coord rc = wgmma::acc_elem(w, lane, r);
                  if (!sw) {  // [unswapped] P and dS into the consumer's [query][key] tiles
                    Pq[size_t(c)].write(rc.row, rc.col, sT.reg(w, lane, r));
                    dSq[size_t(c)].write(rc.row, rc.col, dpT.reg(w, lane, r));
                  } else if (tr) dS.write(rc.col, 64 * c + rc.row, dpT.reg(w, lane, r));  // [ds-smem] dS, [query][key]
                  else dS.write(64 * c + rc.row, rc.col, dpT.reg(w, lane, r));
                }
            // [dq-centered] Each warp's Σ over its 16 keys of every query's dS, rounded as dQ's product
            // reads it, added into the query's row sum.
            if (centered) {
              std::vector<float> sum(size_t(4 * Br), 0.0f);
              for (int w = 0; w < 4; ++w)
                for (int lane = 0; lane < 32; ++lane)
                  for (int r = 0; r < int(Br) / 2; ++r)
                    sum[size_t(w * Br + wgmma::acc_elem(w, lane, r).col)] += st.apply(dpT.reg(w, lane, r));
              for (int w = 0; w < 4; ++w)
                for (int64_t q = 0; q < Br; ++q) Rs.atomic_add(bh, i0 + q, sum[size_t(w * Br + q)]);
              Lkv.nonmatmul_ops += 64 * Br;
            }
            // [c-to-a] dV += Pᵀ dO_i and dK += dSᵀ Q_i: A from registers, B MN-major (Br rows × d).
            if (!sw) {  // [unswapped] A = Pᵀ and dSᵀ read MN-major from the consumer's tiles
              for (int64_t kk = 0; kk < Br / 16; ++kk)
                for (int64_t pn = 0; pn < panels; ++pn)
                  wgmma::mma_ss_mn(dv[size_t(c)][size_t(pn)], Pq[size_t(c)], kk, dOs[stg], PC * pn, true, Lkv);
              for (int64_t kk = 0; kk < Br / 16; ++kk)
                for (int64_t pn = 0; pn < panels; ++pn)
                  wgmma::mma_ss_mn(dk[size_t(c)][size_t(pn)], dSq[size_t(c)], kk, Qs[stg], PC * pn, true, Lkv);
              continue;
            }
            // lab:begin dkv {dK dV}: [c-to-a]: per 16 queries kk and 64-column panel pn, dV's and dK's wgmma …
            for (int64_t kk = 0; kk < Br / 16; ++kk)
              for (int64_t pn = 0; pn < panels; ++pn)
                wgmma::mma_rs(dv[size_t(c)][size_t(pn)], pa[size_t(c)][size_t(kk)], dOs[stg], kk, PC * pn, true, Lkv);
            for (int64_t kk = 0; kk < Br / 16; ++kk)
              for (int64_t pn = 0; pn < panels; ++pn)
                wgmma::mma_rs(dk[size_t(c)][size_t(pn)], dsa[size_t(c)][size_t(kk)], Qs[stg], kk, PC * pn, true, Lkv);
            // lab:end
          }
          // [dq-wgmma] [dq-split] Once both halves of dSᵀ are in: consumer c's chunks of dQ_i = dS K_j
          // (one by columns, by rows and transposed, one on its turns by turns, d / 64 by keys), staged in
          // its buffers and added by the writer.
          const int64_t chunks = all_keys ? 1 : panels, cols = by_cols ? wgmma::kPanel : PC;
          // [deterministic] The writer waits for the Q tile's semaphore to reach the block's rank.
          const int64_t qt = i0 / Br;
          if (det && Sem.load(bh, qt) != float(add_rank(qt, jt, N, Nk, Br, Bc, s.causal, s.window)))
            throw std::logic_error("step19: --deterministic: a block would wait for a block launched after it");
          const int64_t c_lo = split == kByTurns ? t % 2 : 0, c_end = split == kByTurns ? c_lo + 1 : C;  // by turns: consumer t % 2 alone
          for (int64_t c = c_lo; c < c_end; ++c)
            for (int64_t ch = 0; ch < chunks; ++ch) {
              wgmma::Acc dq{static_cast<int>(tr ? Br : cols)};  // transposed: dQᵀ, 64 columns of dQ × Br queries
              if (!sw)  // [unswapped] A = dS from registers, the consumer's 64 keys; B = K_j's rows of them, panel ch
                for (int64_t x = 0; x < 4; ++x) wgmma::mma_rs(dq, dsa[size_t(c)][size_t(x)], Ks, 4 * c + x, PC * ch, x > 0, Lkv);
              else {
              // lab:begin dq {dQ}: [dq-wgmma] [dq-split]: by columns, panel c over all Bc keys; by keys, …
              const int64_t k_lo = all_keys ? 0 : 4 * c, k_hi = all_keys ? Bc / 16 : 4 * c + 4;
              for (int64_t kk = k_lo; kk < k_hi; ++kk)
                if (tr) wgmma::mma_ss_tn(dq, Ks, kk, wgmma::kPanel * c, dS, 0, kk > k_lo, Lkv);
                else wgmma::mma_ss_mn(dq, dS, kk, Ks, by_cols ? wgmma::kPanel * c : PC * ch, kk > k_lo, Lkv, by_rows ? 64 * c : 0);
              // lab:end
              }
              // [dq-writer] The chunk in [dq-layout] order: thread t's register quad q at 4·(128q + t).
              const int64_t tile = (bh * Np + i0) * d + dq_panel_of(split, int(c), int(ch)) * chunk_floats(sc);
              SmemTile& buf = chunk[size_t(dq_buffers(sc) * c + dq_buffer_of(split, int(chunks), int(t), int(ch)))];
              for (int w = 0; w < 4; ++w)
                for (int lane = 0; lane < 32; ++lane)
                  for (int r = 0; r < dq.n / 2; ++r) {
                    const int64_t at = 4 * (128 * (r / 4) + 32 * w + lane) + r % 4;
                    const float v = dq.reg(w, lane, r);
                    if (bulk) buf.write(at / kChunk, at % kChunk, v);
                    else Acc.atomic_add((tile + at) / d, (tile + at) % d, v);
                  }
              if (bulk)  // [dq-writer] the writer warp reads the chunk out in one bulk reduce-add
                for (int64_t at = 0; at < unit * cols; ++at)
                  Acc.atomic_add((tile + at) / d, (tile + at) % d, buf.read(at / kChunk, at % kChunk));
            }
          if (det) Sem.atomic_add(bh, qt, 1.0f);  // [deterministic] once the adds have landed
          Lkv.tiles_computed += 1;
          Lkv.tiles_masked += classify_tile(i0, std::min(i0 + Br, N), j0, j1, N, Nk, s.causal, s.window) == TileKind::Diagonal;
        }
        Lkv.tiles_skipped += QH * (Tr - per_head);
        // [dkv-out] scale·dK and dV of each consumer's keys inside Nk, from the accumulators.
        for (int64_t c = 0; c < C; ++c)
          for (int64_t pn = 0; pn < panels; ++pn)
            for (int w = 0; w < 4; ++w)
              for (int lane = 0; lane < 32; ++lane)
                for (int r = 0; r < int(PC) / 2; ++r) {
                  const mf::Coord rc = wgmma::acc_elem(w, lane, r);
                  const int64_t key = j0 + 64 * c + rc.row, col = PC * pn + rc.col;
                  if (key >= Nk) continue;
                  dK.store(key, col, scale * dk[size_t(c)][size_t(pn)].reg(w, lane, r));
                  dV.store(key, col, dv[size_t(c)][size_t(pn)].reg(w, lane, r));
                }
        Lkv.nonmatmul_ops += Bc * d;  // the scale on dK, every key of the tile
      }
    }

  // [deterministic] Every Q tile's semaphore counts the blocks that see it.
  for (int64_t bh = 0; det && bh < BH; ++bh)
    for (int64_t qt = 0; qt < Tr; ++qt)
      if (semw[size_t(bh * Tp + qt)] !=
          float(kv_end_of(qt, N, Nk, Br, Bc, s.causal) - kv_first_of(qt, N, Nk, Br, Bc, s.causal, s.window)))
        throw std::logic_error("step19: --deterministic: a Q tile's semaphore does not count the blocks that see it");

  // ---- step19_dq_convert ------------------------------------------------------------------------
  {
    const GlobalMat Acc2(accw.data(), BH * Np, d, d, f32, Lcv);
    const GlobalMat Rs2(rsw.data(), centered ? BH : 0, Np, Np, f32, Lcv), Km2(kmw.data(), centered ? BHk : 0, d, d, f32, Lcv);
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t h = 0; h < s.H; ++h) {
        const int64_t bh = b * s.H + h;
        GlobalMat dQ(res.grads.dq.head(b, h), N, d, d, st, Lcv);
        std::vector<float> mean(size_t(d), 0.0f);  // [dq-centered] the head's mean key, read once per head
        for (int64_t c = 0; centered && c < d; ++c) mean[size_t(c)] = Km2.load(b * Hkv + h / QH, c);
        for (int64_t i = 0; i < N; ++i) {
          const float rsum = centered ? Rs2.load(bh, i) : 0.0f;  // [dq-centered] once per row
          for (int64_t c = 0; c < d; ++c) {
            const int64_t at = (bh * Np + (i / unit) * unit) * d +  // [dq-layout]: 64-row units, or 80-row tiles transposed
                               (tr ? acc_offset_t(int(i % unit), int(c), unit) : acc_offset(int(i % unit), int(c)));
            const float a = Acc2.load(at / d, at % d);
            dQ.store(i, c, scale * (centered ? std::fma(-mean[size_t(c)], rsum, a) : a));
          }
        }
        Lcv.nonmatmul_ops += N * d * (centered ? 2 : 1);  // the scale (and c · row sum taken off)
      }
  }
  return res;
}

// The ledger in closed form (docs/19_hopper_backward.md). One key/value head: Tc blocks, block j
// walking `items` = QH · per_head(j) Q tiles; `pairs` = Σ_j per_head(j) per query head, `q_rows` of
// their rows inside N, `masked` needing the per-element mask, `diagonal` holding the diagonal.
// Per pair and consumer: 2·d/16 wgmmas m64nBrk16 reading (64 + Br)·16 elements each (Sᵀ, dPᵀ);
// 2·(Br/16)·(d/PC) register-A wgmmas reading PC·16 each (dV, dK); kq dQ wgmmas m64nWnk16 reading
// (64 + Wn)·16 each (kq = Bc/16 by columns, by turns, by rows and transposed, 4 per chunk by keys; Wn
// = W, a chunk's columns, or Br transposed) by each of the Cq consumers that compute dQ for the pair
// (both, or one by turns); the lane's L and D (Br/2 floats each); the consumer's 64 × Br of dSᵀ
// written; its dQ chunk (unit·W floats: 64 rows, or Br transposed) staged and read back by the
// writer, then added (or added from registers). K_j, V_j once per block that has an item. With
// --ablate swapped ([unswapped]): dV's and dK's A read from shared memory too ((64 + PC)·16 each), dQ's
// A from registers (Wn·16), P written beside dS, and the lane's L and D two floats each.
LedgerSet closed_form(const Shape& s, const Schedule& sc, int ablation, bool det, bool centered) {
  const int64_t d = s.d;
  check_schedule(sc, d, ablation);
  const int unit = acc_rows(sc);  // [dq-layout]
  const int64_t BH = s.B * s.H, N = s.N, Nk = s.Nk, Np = rows_padded(N, unit), Br = sc.Br, Bc = sc.Bc, C = sc.consumers();
  const int64_t Tr = num_tiles(N, Br), Tc = num_tiles(Nk, Bc), PC = panel_cols(d), panels = d / PC;
  const int64_t BHk = s.B * s.hkv();
  const int split = split_of(int(d), ablation);  // [dq-split]
  const bool by_cols = split == kByColumns || split == kTransposed, all_keys = split != kByKeys, bulk = ablation != kAtomics;
  const bool sw = ablation != kSwapped;  // [unswapped] P and dS written; dV's and dK's A read from shared memory, dQ's not
  const int64_t W = by_cols ? wgmma::kPanel : PC, kq = all_keys ? Bc / 16 : 4 * panels;  // a chunk's columns; dQ's wgmmas per consumer
  const int64_t Wn = split == kTransposed ? Br : W;                                      // the N of dQ's wgmma
  const int64_t Cq = split == kByTurns ? 1 : C;  // consumers computing a pair's dQ
  int64_t pairs = 0, q_rows = 0, masked = 0, diagonal = 0, skipped = 0, kv_rows = 0, active = 0;
  for (int64_t j = 0; j < Tc; ++j) {
    const int64_t j0 = j * Bc, j1 = std::min(j0 + Bc, Nk), first = first_q_tile(j0, N, Nk, Br, s.causal);
    const int64_t n = q_tiles_of(j0, j1, N, Nk, Br, s.causal, s.window);
    skipped += Tr - n;
    if (n > 0) kv_rows += j1 - j0, ++active;
    for (int64_t it = first; it < first + n; ++it) {
      const int64_t i0 = it * Br, i1 = std::min(i0 + Br, N);
      ++pairs;
      q_rows += i1 - i0;
      masked += needs_mask(i0, i0 + Br, j0, N, Nk, Bc, s.causal, s.window);
      diagonal += classify_tile(i0, i1, j0, j1, N, Nk, s.causal, s.window) == TileKind::Diagonal;
    }
  }
  constexpr int64_t kMmaFlops = 2 * 64 * 16;  // per column of N of one m64nNk16
  LedgerSet ls;
  Ledger& pre = ls["bwd_pre"];
  pre.gmem_read = BH * (N * d * 2 * 2 + N * 4);   // dO, O and L of the rows inside N
  pre.gmem_write = BH * Np * (d * 4 + 4 + 4)      // every padded row: its accumulator zeroed, D, L·log2 e
                   + (det ? 4 * semaphores(BH, N) : 0);  // [deterministic] the semaphores zeroed
  pre.nonmatmul_ops = BH * N * (2 * d + 1);
  pre.workspace = workspace_bytes(BH, N, d, det, centered, BHk, unit);
  if (centered) {  // [dq-centered] the row sums and the means zeroed; the means: every key read, a block's sums added
    pre.gmem_write += BH * Np * 4 + BHk * d * 4;
    Ledger& km = ls["key_mean"];
    const int64_t blocks = num_tiles(Nk, kMeanKeys);
    km.gmem_read = BHk * Nk * d * 2;
    km.gmem_atomic = BHk * blocks * d * 4;
    km.nonmatmul_ops = BHk * (Nk * d + blocks * d);
  }

  Ledger& kv = ls["bwd_kv"];
  const int64_t chunk_bytes = unit * W * 4 * (all_keys ? 1 : panels);  // a consumer's dQ of one item (64 rows of it, or Br)
  kv.gmem_read = BHk * kv_rows * d * 2 * 2 + BH * (q_rows * d * 2 * 2 + pairs * Br * 4 * 2);
  kv.gmem_write = BHk * Nk * d * 2 * 2;
  kv.gmem_atomic = BH * pairs * Cq * chunk_bytes;
  if (det) kv.gmem_read += BH * pairs * 4, kv.gmem_atomic += BH * pairs * 4;  // [deterministic] a semaphore read (once, if no wait) and increment per pair
  kv.smem_write = BHk * active * 2 * Bc * d * 2                                    // K_j, V_j
                  + BH * pairs * (2 * Br * d * 2 + 2 * Br * 4 + C * 64 * Br * 2    // Q_i, dO_i, L, D; dSᵀ
                                  + (sw ? 0 : C * 64 * Br * 2)                     // [unswapped] P
                                  + (bulk ? Cq * chunk_bytes : 0));                // the staged dQ chunks
  kv.smem_read = BH * pairs * C * ((2 * (d / 16) * (64 + Br) * 16 + 2 * (Br / 16) * panels * ((sw ? 0 : 64) + PC) * 16) * 2  // Sᵀ, dPᵀ, dV, dK's operands
                                   + 128 * (sw ? Br / 2 : 4) * 4)                                                            // L and D
                 + BH * pairs * Cq * (kq * ((sw ? 64 : 0) + Wn) * 16 * 2 + (bulk ? chunk_bytes : 0));                       // dQ's operands; the writer's reads
  kv.barriers = BHk * Tc;
  kv.matmul_flops = BH * pairs * (C * (2 * (d / 16) * Br + 2 * (Br / 16) * panels * PC) + Cq * kq * Wn) * kMmaFlops;
  const bool drop = float(s.dropout) > 0.0f;  // [dropout] Z's compare and two multiplies per entry
  kv.nonmatmul_ops = BH * (pairs * C * 64 * Br * (5 + (drop ? 3 : 0)) + masked * C * 64 * Br) + BHk * Tc * Bc * d;
  if (centered) kv.gmem_atomic += BH * pairs * C * 4 * Br * 4, kv.nonmatmul_ops += BH * pairs * C * 64 * Br;  // [dq-centered] each warp's row sums
  kv.exps = BH * pairs * C * 64 * Br;
  kv.tiles_computed = BH * pairs;
  kv.tiles_masked = BH * diagonal;
  kv.tiles_skipped = BH * skipped;
  kv.smem_peak = smem_bytes(sc, int(d));

  Ledger& cv = ls["dq_convert"];
  cv.gmem_read = BH * N * d * 4;
  cv.gmem_write = BH * N * d * 2;
  cv.nonmatmul_ops = BH * N * d * (centered ? 2 : 1);
  if (centered) cv.gmem_read += BH * (N * 4 + d * 4);  // [dq-centered] a row sum per row, the mean once per head
  return ls;
}

namespace {
void require_supported(const Shape& s, const StepOptions& o) {
  const std::string why = refusal(s.dtype == DType::bf16, int(s.d), s.dropout > 0.0, o);
  if (!why.empty()) throw Unsupported(why);
}
BackwardBlueprintResult run_backward(const Shape& s, const Inputs& in, const Forward& fwd, const Tensor4& dO, const StepOptions& o) {
  require_supported(s, o);
  return blueprint(s, in, fwd, dO, schedule_for(int(s.d), ablation_of(o)), ablation_of(o), deterministic(o), dq_mode_of(o) == kDqCentered);
}
LedgerSet run_backward_closed_form(const Shape& s, const StepOptions& o) {
  require_supported(s, o);
  return closed_form(s, schedule_for(int(s.d), ablation_of(o)), ablation_of(o), deterministic(o), dq_mode_of(o) == kDqCentered);
}
int64_t run_backward_smem(const Shape& s, const StepOptions& o) {
  return smem_bytes(schedule_for(int(s.d), ablation_of(o)), int(s.d));
}
// [ablation] An --ablate value the kernels do not compile at this shape (bf16; with --deterministic;
// with --dropout): held against the GPU before anything runs, as the launcher would refuse it.
std::string run_options_reason(const Shape& s, const StepOptions& o) {
  const std::string why = refusal(s.dtype == DType::bf16, int(s.d), s.dropout > 0.0, o), prefix = "step19: ";
  return why.rfind(prefix, 0) == 0 ? why.substr(prefix.size()) : why;
}
}  // namespace

const StepInfo& info() {
  static const StepInfo step = [] {
    StepInfo i;
    i.id = "19";
    i.slug = "hopper_backward";
    i.title = "the backward on Hopper: wgmma with swapped operands, TMA into a ring, a dQ writer warp (forward: step 16)";
    i.teaches = "warp-specialized backward; Pᵀ and dSᵀ as register operands; dQ by bulk reduce-add";
    i.mma_unit = MmaUnit::wgmma;  // [mma-unit]
    {
      StepFlag a{"ablate", {}, "take one idea out (same results up to the order of dQ's adds): none; atomics (dQ added from the consumers' registers instead of the writer warp's bulk reduce-add); overlap (every product waited for at once); dq-keys (dQ split by keys, instead of by columns at d = 128 and by turns at d = 64); dk-first (FlashAttention-3's order: dQ before dK); producer (no producer warp: a consumer thread issues the loads in line); producer-last (d = 64: the same, issued by the consumer that releases the stage last); tiles (FlashAttention-3's tile shapes: 128 × 128 at d = 64, dQ split by rows; 80 × 128 at d = 128, dQ computed transposed) (docs/19_hopper_backward.md)"};
      for (const char* n : kAblationNames) a.choices.push_back(n);
      a.sweep = false;
      const StepFlag det{"deterministic", {"off", "on"},
                         "dQ's adds in one fixed order: a semaphore per Q tile, the causal blocks shortest first (docs/19_hopper_backward.md)"};
      StepFlag dq{"dq", {}, "dQ's sum over the keys: plain; centered (the head's mean key taken out: Σ dS (k − c), exact up to rounding, and without the error D's rounding leaves along c at long key ranges; its row sums added with atomics, so not with --deterministic) (docs/19_hopper_backward.md, \"dQ at long key ranges\")"};
      for (const char* n : kDqNames) dq.choices.push_back(n);
      dq.sweep = false;
      StepFlag dk{"dropout-kernel", {}, "with --dropout: refuse (the default: this backward may apply dropout only where it costs at most 10 % of its time, and it costs more, docs/19_hopper_backward.md, \"Dropout\"; step 13 applies it) or run (the kernel with the mask, to measure it; not with --dq centered or --ablate)"};
      for (const char* n : kDropoutKernelNames) dk.choices.push_back(n);
      dk.sweep = false;
      i.flags = {det, a, dq, dk};
    }
    // [forward-from] The forward is step 16's, whatever the flags say; with --dropout step 12's, which
    // draws the mask this backward redraws (step 16 has no dropout).
    borrow_forward<step16::info, step12::info>(i);
    i.supports_dropout = true;  // [dropout] the default kernel, --deterministic on or off
    i.dropout_options = {{"dropout-kernel", "run"}};  // refused without it ([dropout] in schedule.hpp)
    i.experiments_everywhere = true;  // --dq centered everywhere; the ablations refused by options_reason elsewhere
    i.supports_gqa = true;     // [gqa] a block per key/value head sums its group's dK and dV
    i.supports_window = true;  // [window] each K/V tile's Q tiles of the band
    i.backward_blueprint = run_backward;
    i.backward_closed_form = run_backward_closed_form;
    i.backward_smem_bytes = run_backward_smem;
    i.options_reason = run_options_reason;
    i.min_cc = 90;
    i.max_cc = 90;
    i.needs = "wgmma.mma_async, TMA, bulk reduce-add and setmaxnreg (sm_90a)";
    i.head_dims = {std::begin(kHeadDims), std::end(kHeadDims)};
    i.head_dims_why = "K, V and two Q/dO stages of d = 256 would not fit a block's 227 KB of shared memory ([stored-d], steps/19_hopper_backward/schedule.hpp)";
#ifdef FA_HAVE_CUDA
    i.launch_backward = launch_backward;
    i.backward_workspace_bytes = backward_workspace_bytes;
#endif
    i.kernel_prefix = "step19_";
    return i;
  }();
  return step;
}

}  // namespace fa::step19
