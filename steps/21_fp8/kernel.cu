// Step 21 — the FP8 forward: step 16's kernel on e4m3 codes (schedule.hpp lists the changes).
//
//   step21_amax      [quantize] the largest magnitude of every scale group of Q, K and V (after the
//                    Hadamard transform for Q and K with --incoherent): a warp per row, a block of
//                    32 rows, one atomicMax per block on the float's bits (non-negative floats order
//                    as their bits do)
//   step21_quantize  [quantize] the codes e4m3(y · 448 / amax) and the descales amax / 448, written
//                    where the forward's tensor maps read them; V also as Vᵀ with --v pretransposed
//   step21_fp8       step 16's producer, ring and ping-pong consumers on the codes; the producer's
//                    three other warps transpose V ([v-transpose])
//
// Tensor maps: encoded on the host over the workspace's codes, passed as __grid_constant__ parameters.
#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>
#include <string>

#include "kernel/cuda_check.cuh"
#include "reference/quantize.hpp"
#include "schedule.hpp"
#include "kernel/wgmma.cuh"  // FA_SM90A_ONLY: compiled for sm_90a only (the host refuses other GPUs first)

namespace fa::step21 {

// [exp2] 2^x in one instruction (MUFU.EX2).
__device__ inline float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
// [p-fp8] Two floats to two e4m3 codes in 16 bits, `lo` in the lower byte (cvt puts its first source
// in the upper half); round to nearest even, saturating at ±448 (sm_89 and later).
__device__ inline uint32_t e4m3x2(float lo, float hi) {
  uint16_t r = 0;
  FA_SM90A_ONLY(asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo)));
  return r;
}
__device__ inline uint32_t e4m3x4(float a, float b, float c, float d) { return e4m3x2(a, b) | (e4m3x2(c, d) << 16); }

// [mbarrier] step 16's.
__device__ inline void mbar_init(uint32_t bar, int count) {
  FA_SM90A_ONLY(asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory"));
}
__device__ inline void mbar_arrive_expect(uint32_t bar, uint32_t bytes) {
  FA_SM90A_ONLY(asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory"));
}
__device__ inline void mbar_arrive(uint32_t bar) {
  FA_SM90A_ONLY(asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory"));
}
__device__ inline void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    FA_SM90A_ONLY(asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                               : "=r"(done) : "r"(bar), "r"(parity) : "memory"));
}
// [tma] One box of 128 bytes × box rows of head (b, h) into a [sw128] panel.
__device__ inline void tma_load(uint32_t dst, const CUtensorMap* map, int col, int row, int h, int b, uint32_t bar) {
  FA_SM90A_ONLY(asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(h), "r"(b), "r"(bar)
      : "memory"));
}
template <int N>
__device__ inline void regs_dec() { FA_SM90A_ONLY(asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N))); }
template <int N>
__device__ inline void regs_inc() { FA_SM90A_ONLY(asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N))); }
__device__ inline void warpgroup_sync(int c, int C) { asm volatile("bar.sync %0, 128;\n" ::"r"(1 + C + c) : "memory"); }

// ---- [quantize] -------------------------------------------------------------------------------

// Where the quantize kernels write and the forward reads (all in the workspace).
struct Fp8Buffers {
  uint8_t *q8 = nullptr, *k8 = nullptr, *v8 = nullptr;  // codes [B, H|Hkv, rows, d]; v8 is Vᵀ [B, Hkv, d, nk32] when vt
  unsigned* amax = nullptr;                              // per group, Q's then K's then V's (float bits)
  float* descale = nullptr;                              // the same groups
  int gq = 1, gk = 1;                                    // scale groups per head of Q, of K and V
  int nk32 = 0;                                          // Nk rounded up to a 32-key slice
  bool vt = false;
};
__host__ __device__ inline int64_t q_groups(const AttnParams& p, const Fp8Buffers& f) { return int64_t(p.B) * p.H * f.gq; }
__host__ __device__ inline int64_t k_groups(const AttnParams& p, const Fp8Buffers& f) { return int64_t(p.B) * p.Hkv * f.gk; }

// Tensor t (0 Q, 1 K, 2 V) of the launch: its bf16 source, strides, heads, rows and first group.
struct Source {
  const __nv_bfloat16* x;
  int64_t sb, sh, sn;
  int heads, rows, groups;
  int64_t group0;
};
__device__ inline Source source(const AttnParams& p, const Fp8Buffers& f, int t) {
  if (t == 0) return {static_cast<const __nv_bfloat16*>(p.q), p.q_sb, p.q_sh, p.q_sn, p.H, p.N, f.gq, 0};
  if (t == 1) return {static_cast<const __nv_bfloat16*>(p.k), p.k_sb, p.k_sh, p.k_sn, p.Hkv, p.Nk, f.gk, q_groups(p, f)};
  return {static_cast<const __nv_bfloat16*>(p.v), p.v_sb, p.v_sh, p.v_sn, p.Hkv, p.Nk, f.gk, q_groups(p, f) + k_groups(p, f)};
}

// [quantize-loads] A lane's E = D / row_lanes bf16 of a row, columns E·l .. E·l + E − 1 (l: the lane
// within its row), as raw bits: one load of 2E bytes (8 or 16: launch() has checked that rows start
// 16-byte aligned). A warp fetches every row of its share before it uses any, so that its rows' loads
// are in flight at once, not one.
template <int D>
struct alignas(2 * D / row_lanes(D)) RowBits {  // 2E bytes, aligned as one load of them
  uint32_t w[D / row_lanes(D) / 2];
};
template <int D>
__device__ inline RowBits<D> fetch_row(const __nv_bfloat16* row, int lane) {
  return *reinterpret_cast<const RowBits<D>*>(row + D / row_lanes(D) * (lane % row_lanes(D)));
}
// The row of the warp's entry i: r0 + warp + 4(P·i + lane / row_lanes), P = 32 / row_lanes rows an entry.
template <int D>
__device__ inline int share_row(int r0, int warp, int lane, int i) {
  return r0 + warp + 4 * (32 / row_lanes(D) * i + lane / row_lanes(D));
}
// The warp's share of a block's kQuantRows rows, entries i < R, each fetched while its row < rows.
template <int D, int R>
__device__ inline void fetch_share(const __nv_bfloat16* x, int64_t sn, int rows, int r0, int warp, int lane, RowBits<D> (&bits)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int r = share_row<D>(r0, warp, lane, i);
    if (r < rows) bits[i] = fetch_row<D>(x + r * sn, lane);
  }
}

// One row of D values in a warp: lane l's fetched bits as floats, and [incoherent] runs the transform
// of common/kernel/fp8.hpp's hadamard_row: the butterflies of distance h < E inside the lane, the
// others between lanes l and l ^ (h / E) — the lower position takes a + b, the upper a − b, as on the
// host.
template <int D>
__device__ inline void widen_row(const RowBits<D>& b, int lane, bool transform, float (&y)[D / row_lanes(D)]) {
  constexpr int E = D / row_lanes(D), L = row_lanes(D);
#pragma unroll
  for (int e = 0; e < E; e += 2) {
    const __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(&b.w[e / 2]);
    y[e] = __bfloat162float(v.x), y[e + 1] = __bfloat162float(v.y);
  }
  if (!transform) return;
#pragma unroll
  for (int e = 0; e < E; ++e) y[e] *= fp8::hadamard_sign(E * (lane % L) + e);
#pragma unroll
  for (int h = 1; h < E; h *= 2)
#pragma unroll
    for (int e = 0; e < E; ++e)
      if (!(e & h)) {
        const float a = y[e], b = y[e + h];
        y[e] = a + b, y[e + h] = a - b;
      }
#pragma unroll
  for (int m = 1; m < L; m *= 2)  // [half-rows] inside the row's lanes
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const float other = __shfl_xor_sync(0xffffffffu, y[e], m);
      y[e] = (lane & m) ? other - y[e] : y[e] + other;
    }
  const float f = fp8::inv_sqrt(D);
#pragma unroll
  for (int e = 0; e < E; ++e) y[e] *= f;
}

// Block (row chunk x, head y, tensor z): rows [32x, 32x + 32) of head y of tensor z, a warp per row.
// [amax-bursts] 32 registers at most (16 blocks, 64 warps an SM): the warp's rows in bursts, each
// fetched before any of it is used: four rows (two at d = 256, where four spill).
FA_HD constexpr int amax_burst(int d) { return d >= 256 ? 2 : 4; }
template <int D>
__global__ void __launch_bounds__(128, 16) step21_amax(const AttnParams p, Fp8Buffers f) {
  const Source s = source(p, f, blockIdx.z);
  const int bh = blockIdx.y, r0 = blockIdx.x * kQuantRows, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (bh >= p.B * s.heads || r0 >= s.rows) return;
  const __nv_bfloat16* x = s.x + (bh / s.heads) * s.sb + (bh % s.heads) * s.sh;
  // [quantize-loads] the warp's entries (share_row); [half-rows] P rows an entry, bursts of the same bytes
  constexpr int P = 32 / row_lanes(D), E = D / row_lanes(D), R = kQuantRows / 4 / P, G = amax_burst(D) / P;
  float m = 0.0f;
#pragma unroll
  for (int i0 = 0; i0 < R; i0 += G) {
    RowBits<D> bits[G] = {};  // zeros where not fetched: |0| leaves the max alone
    fetch_share<D>(x, s.sn, s.rows, r0 + 4 * P * i0, warp, lane, bits);
#pragma unroll
    for (int i = 0; i < G; ++i) {
      if (r0 + warp + 4 * P * (i0 + i) >= s.rows) break;  // the entry's first row, the same for the warp
      float y[E];
      widen_row<D>(bits[i], lane, p.incoherent && blockIdx.z < 2, y);
#pragma unroll
      for (int e = 0; e < E; ++e) m = fmaxf(m, fabsf(y[e]));
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  __shared__ float wmax[4];
  if (lane == 0) wmax[warp] = m;
  __syncthreads();
  if (threadIdx.x == 0)
    atomicMax(f.amax + s.group0 + int64_t(bh) * s.groups + fp8::group_of(r0, s.groups > 1),
              __float_as_uint(fmaxf(fmaxf(wmax[0], wmax[1]), fmaxf(wmax[2], wmax[3]))));
}

template <int D>  // [half-rows] 40 registers at d = 64 (12 blocks an SM, as before; 46 unbounded)
__global__ void __launch_bounds__(128, D == 64 ? 12 : 0) step21_quantize(const AttnParams p, Fp8Buffers f) {
  constexpr int E = D / row_lanes(D), P = 32 / row_lanes(D);  // [half-rows] P rows a warp at a time
  const Source s = source(p, f, blockIdx.z);
  const bool vt = blockIdx.z == 2 && f.vt;
  const int rows = vt ? f.nk32 : s.rows;  // Vᵀ's keys past Nk up to the slice's end: zeros
  const int bh = blockIdx.y, r0 = blockIdx.x * kQuantRows, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (bh >= p.B * s.heads || r0 >= rows) return;
  const int64_t g = s.group0 + int64_t(bh) * s.groups + fp8::group_of(r0, s.groups > 1);
  const float amax = __uint_as_float(f.amax[g]);
  if (threadIdx.x == 0 && (s.groups > 1 ? r0 % fp8::kBlockRows == 0 : r0 == 0)) f.descale[g] = fp8::descale(amax);  // the group's first block
  const float k = fp8::quant_factor(amax);
  const __nv_bfloat16* x = s.x + (bh / s.heads) * s.sb + (bh % s.heads) * s.sh;
  uint8_t* out = blockIdx.z == 0 ? f.q8 : blockIdx.z == 1 ? f.k8 : f.v8;
  // [v-transpose] (pretransposed) Vᵀ's codes of this block's 32-key slice (vt_stage_byte's layout).
  __shared__ alignas(16) uint32_t vt_tile[8 * D];
  constexpr int R = kQuantRows / 4 / P;  // [quantize-loads] the warp's entries (share_row), all fetched first
  RowBits<D> bits[R] = {};  // zeros where not fetched: Vᵀ's keys past Nk
  fetch_share<D>(x, s.sn, s.rows, r0, warp, lane, bits);
#pragma unroll
  for (int i = 0; i < R; ++i) {
    if (r0 + warp + 4 * P * i >= rows) break;  // the entry's first row, the same for the warp
    const int r = share_row<D>(r0, warp, lane, i);
    float y[E];
    widen_row<D>(bits[i], lane, p.incoherent && blockIdx.z < 2, y);  // every lane: the shuffles
    if (r >= rows) continue;
    uint32_t c[E / 4];
#pragma unroll
    for (int w = 0; w < E / 4; ++w) c[w] = e4m3x4(y[4 * w] * k, y[4 * w + 1] * k, y[4 * w + 2] * k, y[4 * w + 3] * k);
    const int l = lane % row_lanes(D);  // [half-rows] the lane within its row
    if (!vt) {
      uint8_t* row = out + (int64_t(bh) * s.rows + r) * D + E * l;
      if constexpr (E == 4) *reinterpret_cast<uint32_t*>(row) = c[0];
      else *reinterpret_cast<uint2*>(row) = make_uint2(c[0], c[1]);
    } else {
      // [v-transpose] Vᵀ [d][key], each 32-key slice in the A fragment's key order ([key-order]).
      // A byte a dim into shared memory first (a byte store straight to Vᵀ was a sector each).
      const int slot = slot_of_key(r % 32);
      uint8_t* tile = reinterpret_cast<uint8_t*>(vt_tile);
      // [half-rows] A dim's words share a bank whatever the slot (d = 64: 64 words a slot quartet), so the
      // two halves, on the same dims, store them in turns two apart: 2 words a bank, as with a row a warp.
      const int turn = P == 2 ? 2 * (lane / 16) : 0;
#pragma unroll
      for (int e0 = 0; e0 < E; ++e0) {
        const int e = (e0 + turn) % E;
        tile[vt_stage_byte(slot, E * l + e, D)] = uint8_t(c[e / 4] >> (8 * (e % 4)));
      }
    }
  }
  if (vt) {  // then each dim's 32 slots as two 16-byte stores (r0 is the slice's first key)
    __syncthreads();
    for (int n = threadIdx.x; n < D; n += 128) {
      uint32_t w[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) w[i] = vt_tile[i * D + n];
      uint4* dst = reinterpret_cast<uint4*>(out + (int64_t(bh) * D + n) * f.nk32 + r0);
      dst[0] = make_uint4(w[0], w[1], w[2], w[3]), dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
    }
  }
}

// ---- the forward --------------------------------------------------------------------------------

struct Maps {
  CUtensorMap q, k, v;  // v: V's codes [key][dim], or Vᵀ's [dim][key] with --v pretransposed
};
struct Descales {
  const float *q, *k, *v;
  int gq, gk;
};

template <int D, int Stages, bool RawV, bool Stepped, bool Serial, int Ops>
__global__ void __launch_bounds__(Schedule{128, 128, Stages, RawV}.threads(), 1)
    step21_fp8(const __grid_constant__ Maps maps, AttnParams p, Descales ds) {
  constexpr Schedule S{128, 128, Stages, RawV};
  constexpr bool Fold = ops_fold(Ops), Fuse = ops_fuse(Ops);  // [lean-ops] --ops: lean both, fold the first
  // [sw64] Q's and K's panel rows: 128 bytes, or 64 at d = 64; O's dims per P·V wgmma: 128, or 64.
  constexpr int kRowB = qk_row_bytes(D), kPvN = D < 128 ? D : 128;
  constexpr int Br = S.Br, Bc = S.Bc, C = S.consumers(), kHalves = D / kPvN, kPanels = D / kRowB;
  // [stages] The Q tile, then per stage K (Bc × D), Vᵀ (D × Bc) and, when the kernel transposes, V
  // as it came (Bc × D): e4m3 in [sw128] panels of 128 bytes ([sw64]: Q and K in 64-byte rows at
  // d = 64); then the mbarriers.
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  if (sbase % wgmma::kGroupBytes != 0) __trap();
  constexpr uint32_t kQTile = Br * D, kTile = Bc * D, kStage = uint32_t(stage_bytes(Bc, D, RawV));
  auto k_at = [&](int st) { return sbase + kQTile + st * kStage; };
  auto vt_at = [&](int st) { return k_at(st) + kTile; };
  auto vr_at = [&](int st) { return vt_at(st) + kTile; };
  const uint32_t bars = sbase + uint32_t(tiles_bytes(S, D));
  const uint32_t q_full = bars;
  auto full_k = [&](int st) { return bars + 8 * (1 + st); };
  auto full_v = [&](int st) { return bars + 8 * (1 + Stages + st); };   // Vᵀ of the stage is ready
  auto empty_k = [&](int st) { return bars + 8 * (1 + 2 * Stages + st); };
  auto empty_v = [&](int st) { return bars + 8 * (1 + 3 * Stages + st); };
  auto full_vr = [&](int st) { return bars + 8 * (1 + 4 * Stages + st); };  // [v-transpose] V as TMA brought it
  auto free_vr = [&](int st) { return bars + 8 * (1 + 5 * Stages + st); };  // … read by the transposers

  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int wg = threadIdx.x / 128, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int i0 = (gridDim.x - 1 - blockIdx.x) * Br, rows = min(Br, p.N - i0);  // [order]
  const int jbeg = int(first_kv_tile(i0, i0 + rows, p.N, p.Nk, Bc, p.causal, p.window));
  const int Tcount = int(kv_tiles_for(i0, i0 + rows, p.N, p.Nk, Bc, p.causal)) - jbeg;
  const int hkv = p.kv_head(h);

  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    for (int st = 0; st < Stages; ++st) {
      mbar_init(full_k(st), 1), mbar_init(full_v(st), RawV ? 3 : 1);  // the transposers' three warps, or TMA
      mbar_init(empty_k(st), 4 * C), mbar_init(empty_v(st), 4 * C);
      mbar_init(full_vr(st), 1), mbar_init(free_vr(st), 3);
    }
    FA_SM90A_ONLY(asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"));
  }
  __syncthreads();

  if (wg == 0) {
    regs_dec<kProducerRegs>();
    if (Tcount == 0) return;
    if (threadIdx.x == 0) {
      // ---- [producer] TMA: Q, then per tile K_j and V_j (or Vᵀ_j) into stage j % Stages ----------
      mbar_arrive_expect(q_full, kQTile);
      for (int pn = 0; pn < kPanels; ++pn) tma_load(sbase + pn * Br * kRowB, &maps.q, kRowB * pn, i0, h, b, q_full);
      for (int j = 0; j < Tcount; ++j) {
        const int st = j % Stages, key0 = (jbeg + j) * Bc;
        if (j >= Stages) mbar_wait(empty_k(st), empty_parity(j, Stages));
        mbar_arrive_expect(full_k(st), kTile);
        for (int pn = 0; pn < kPanels; ++pn) tma_load(k_at(st) + pn * Bc * kRowB, &maps.k, kRowB * pn, key0, hkv, b, full_k(st));
        if (RawV) {
          if (j >= Stages) mbar_wait(free_vr(st), empty_parity(j, Stages));
          mbar_arrive_expect(full_vr(st), kTile);
          for (int pn = 0; pn < kPanels; ++pn) tma_load(vr_at(st) + pn * Bc * 128, &maps.v, 128 * pn, key0, hkv, b, full_vr(st));
        } else {
          if (j >= Stages) mbar_wait(empty_v(st), empty_parity(j, Stages));
          mbar_arrive_expect(full_v(st), kTile);
          tma_load(vt_at(st), &maps.v, key0, 0, hkv, b, full_v(st));  // one box: 128 keys × D dims
        }
      }
      return;
    }
    if (!RawV || warp == 0) return;
    if (Stepped) {
      // [transpose-addr] (--v kernel-stepped) The same units in the same order, each address stepped
      // from the lane's constants: per warp-instruction g a load's and a store's register, per word an
      // XOR and an offset. The loop stays rolled: unrolled, its constants outgrow the 24 registers.
      static_assert(((D / 4) & (D / 4 - 1)) == 0, "transpose_dims wraps the dims with a mask: d/4 a power of two");
      const TransposeLane tl = transpose_lane(lane);
      for (int j = 0; j < Tcount; ++j) {
        const int st = j % Stages;
        mbar_wait(full_vr(st), full_parity(j, Stages));
        if (j >= Stages) mbar_wait(empty_v(st), empty_parity(j, Stages));
#pragma unroll 1
        for (int g = warp - 1; g < transpose_units(Bc, D) / 32; g += 3) {
          const int n0 = transpose_dims(tl, g, D);
          const uint32_t ld0 = transpose_load0(vr_at(st), tl, g, n0, Bc), st0 = transpose_store0(vt_at(st), tl, g, n0);
          uint32_t r[4], t[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(r[i]) : "r"(transpose_load(ld0, i)));
          transpose4(r, t);
#pragma unroll
          for (int i = 0; i < 4; ++i) asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(transpose_store(st0, i)), "r"(t[i]) : "memory");
        }
        wgmma::fence_proxy_async();
        __syncwarp();
        if (lane == 0) mbar_arrive(free_vr(st)), mbar_arrive(full_v(st));
      }
      return;
    }
    // ---- [v-transpose] warps 1-3: V_j (keys × dims) into Vᵀ_j (dims × keys, [key-order]) ------------
    // lab:begin v-transpose: [v-transpose] [transpose4]: warps 1–3 turn each V tile into Vᵀ …
    const int tid = threadIdx.x - 32;
    for (int j = 0; j < Tcount; ++j) {
      const int st = j % Stages;
      mbar_wait(full_vr(st), full_parity(j, Stages));
      if (j >= Stages) mbar_wait(empty_v(st), empty_parity(j, Stages));
      for (int u = tid; u < transpose_units(Bc, D); u += 96) {
        const TransposeUnit tu = transpose_unit(u, D);  // [transpose-banks] no two lanes on one bank
        const int n0 = 4 * tu.dim_group, slot0 = 4 * tu.slot_group;
        uint32_t r[4], t[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int key = 32 * (slot0 / 32) + key_of_slot(slot0 % 32 + i);
          asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(r[i]) : "r"(vr_at(st) + sw8_offset(key, n0, Bc)));
        }
        transpose4(r, t);
#pragma unroll
        for (int i = 0; i < 4; ++i)
          asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(vt_at(st) + sw8_offset(n0 + i, slot0, D)), "r"(t[i]) : "memory");
      }
      wgmma::fence_proxy_async();  // [proxy] the stores are for wgmma to read
      __syncwarp();
      if (lane == 0) mbar_arrive(free_vr(st)), mbar_arrive(full_v(st));
    }
    // lab:end
    return;
  }

  // ---- [consumer] -----------------------------------------------------------------------------
  regs_inc<kConsumerRegs>();
  const int c = wg - 1, w0 = 16 * (warp % 4);
  float o[kHalves][kPvN / 2];
#pragma unroll
  for (int hf = 0; hf < kHalves; ++hf)
#pragma unroll
    for (int r = 0; r < kPvN / 2; ++r) o[hf][r] = 0.0f;
  float s[Bc / 2];
  float pv[kPvN / 2];  // [two-level] one tile's P̃·Ṽ for 128 dims of O (64 at d = 64), as the tensor cores sum it
  uint32_t pa[Bc / 32][4];
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2] = {1.0f, 1.0f};
  // [lean-ops] (--ops lean) Õ's factor waits here until the next tile's sum comes in: Õ = Õ·f + P̃·Ṽ.
  float f_next[2] = {1.0f, 1.0f};
  // [descale] Q's descale (the block's 128 rows are one group with block scales), and K's and V's per tile.
  const float dq = ds.q[int64_t(bh) * ds.gq + (ds.gq > 1 ? i0 / fp8::kBlockRows : 0)];
  const float* dk = ds.k + (int64_t(b) * p.Hkv + hkv) * ds.gk;
  const float* dv = ds.v + (int64_t(b) * p.Hkv + hkv) * ds.gk;
  auto tile_group = [&](int j) { return ds.gk > 1 ? jbeg + j : 0; };  // Bc = 128 rows = one group
  float dv_prev = 1.0f, dv_cur = 1.0f;
  const uint32_t q_wg = sbase + qk_offset(64 * c, 0, Br, D);
  // [sw64] Q's and K's descriptors: the 128-byte swizzle, or at d = 64 the 64-byte one (SBO 512).
  auto qk_desc = [](uint32_t a) { return kRowB == 128 ? wgmma::desc(a) : wgmma::desc(a, 16, 8 * kRowB, wgmma::kSwizzle64); };

  int turns = 0;
  const int last_turn = Tcount;
  auto turn_begin = [&] { asm volatile("bar.sync %0, 256;\n" ::"r"(1 + c) : "memory"); };
  auto turn_end = [&] {
    if (!(c == C - 1 && turns == last_turn)) asm volatile("bar.arrive %0, 256;\n" ::"r"(1 + (c + 1) % C) : "memory");
    ++turns;
  };
  if (c == C - 1 && Tcount > 0) asm volatile("bar.arrive %0, 256;\n" ::"r"(1) : "memory");

  auto issue_s = [&](int st) {  // [s-wgmma] S = Q̃ K̃_jᵀ: D/32 wgmmas of k = 32
#pragma unroll
    for (int kk = 0; kk < D / 32; ++kk)
      wgmma::mma_ss_e4m3_128(s, qk_desc(q_wg + qk_offset(0, kk, Br, D)), qk_desc(k_at(st) + qk_offset(0, kk, Bc, D)), kk > 0);
    wgmma::commit();
  };
  // [pv-wgmma] [two-level] P̃ Ṽ_j for dims 128·hf ... + 127 into pv, afresh (per 32 keys, Vᵀ K-major); the
  // tensor cores keep about 13 bits of a running FP8 sum, so the tile's sum is added into Õ in fp32 by
  // accumulate(), never left to grow in their accumulator over every key of the row.
  auto issue_pv = [&](int st, int hf) {
#pragma unroll
    for (int kk = 0; kk < Bc / 32; ++kk) {
      const uint64_t vd = wgmma::desc(vt_at(st) + wgmma::kmajor_offset(kPvN * hf, kk, D));
      if constexpr (kPvN == 64) wgmma::mma_rs_e4m3_64(pv, pa[kk], vd, kk > 0);
      else wgmma::mma_rs_e4m3_128(pv, pa[kk], vd, kk > 0);
    }
    wgmma::commit();
  };
  auto accumulate = [&](int hf) {
#pragma unroll
    for (int r = 0; r < kPvN / 2; ++r) {
      if (Fuse) o[hf][r] = fmaf(o[hf][r], f_next[(r >> 1) & 1], pv[r]);  // [lean-ops] one FFMA for FMUL + FADD
      else o[hf][r] += pv[r];
    }
  };
  // The halves after the first (d = 256): one at a time through pv, after the first half's sum is in.
  auto rest_of_pv = [&](int st) {
#pragma unroll
    for (int hf = 1; hf < kHalves; ++hf) {
      wgmma::fence();
      issue_pv(st, hf);
      wgmma::wait<0>();
      accumulate(hf);
    }
  };
  auto softmax = [&](int j) {
    const int j0 = (jbeg + j) * Bc;
    const float sl2 = p.scale * kLog2e * dq * dk[tile_group(j)];  // [descale]
    if (needs_mask(i0, i0 + rows, j0, p.N, p.Nk, Bc, p.causal, p.window)) {  // [causal-mask]
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int vis = int(visible_keys(i0 + 64 * c + w0 + m16n8k16::group(lane) + 8 * hr, p.N, p.Nk, p.causal)) - j0;
        const int lo = p.window > 0 ? vis - p.window : -Bc;
#pragma unroll
        for (int n = 0; n < Bc / 8; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = 8 * n + m16n8k16::c_elem(lane, 2 * hr + e).col;
            if (col >= vis || col < lo) s[4 * n + 2 * hr + e] = -INFINITY;
          }
      }
    }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {  // [softmax-regs] step 16's, in the log2 domain with the descales in
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < Bc / 8; ++n) mx = fmaxf(mx, fmaxf(s[4 * n + 2 * hr], s[4 * n + 2 * hr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[hr], mx * sl2);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // [rescale-guard]
      alpha[hr] = fast_exp2(m[hr] - m_use);
      m[hr] = m_new;
      const float m_exp = Fold ? m_use - fp8::kLog2PScale : m_use;  // [lean-ops] 2^(x − m + 8) = 256 · 2^(x − m)
      float rs = 0.0f;
#pragma unroll
      for (int n = 0; n < Bc / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pv = fast_exp2(fmaf(s[4 * n + 2 * hr + e], sl2, -m_exp));
          s[4 * n + 2 * hr + e] = pv;
          rs += pv;
        }
      l[hr] = l[hr] * alpha[hr] + rs;
    }
    dv_prev = dv_cur, dv_cur = dv[tile_group(j)];
  };
  // [deferred] [v-descale] Õ *= α · (the previous tile's V descale / this one's); [p-fp8] P·256 into pa
  // in the A fragment's key order.
  auto rescale_and_pack = [&] {
    const float vr = dv_prev / dv_cur;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const float f = alpha[hr] * vr;
      if constexpr (Fuse) {
        f_next[hr] = f;  // [lean-ops] applied by the next accumulate(), inside its FFMA
      } else {
#pragma unroll
        for (int hf = 0; hf < kHalves; ++hf)
#pragma unroll
          for (int n = 0; n < kPvN / 8; ++n) o[hf][4 * n + 2 * hr] *= f, o[hf][4 * n + 2 * hr + 1] *= f;
      }
    }
    // [lean-ops] Under Fold s holds P·256 already: ps = 1, a multiply the compiler drops (x · 1 is x).
    constexpr float ps = Fold ? 1.0f : fp8::kPScale;
    // lab:begin p-fp8: [p-fp8] [key-order]: P·256 to e4m3, four keys per register …
#pragma unroll
    for (int kk = 0; kk < Bc / 32; ++kk)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int r = acc_reg_of(kk, q, 0);  // bytes 0, 1 at r, r + 1; bytes 2, 3 at r + 4, r + 5
        pa[kk][q] = e4m3x4(s[r] * ps, s[r + 1] * ps, s[r + 4] * ps, s[r + 5] * ps);
      }
    // lab:end
  };
  auto release = [&](uint32_t empty_bar) {
    if (lane == 0) mbar_arrive(empty_bar);
  };

  // Step 16's turns: turn j issues S_j and P_{j-1}·V_{j-1}, waits for S_j alone, runs the softmax of
  // tile j under P_{j-1}·V_{j-1}; the first and last turns peeled.
  if (Tcount > 0) {
    mbar_wait(q_full, 0);
    mbar_wait(full_k(0), full_parity(0, Stages));
    turn_begin();
    wgmma::fence();
    issue_s(0);
    turn_end();
    wgmma::wait<0>();
    release(empty_k(0));
    softmax(0);
    rescale_and_pack();
    for (int j = 1; j < Tcount; ++j) {
      const int st = j % Stages, prev = (j - 1) % Stages;
      if (Serial) {
        // [pv-order] (--pv serial) P_{j-1}·V_{j-1} alone and summed into Õ, then S_j, in one turn: S's
        // registers are free while P·V runs (P is in pa), and P·V's while S runs.
        mbar_wait(full_v(prev), full_parity(j - 1, Stages));
        turn_begin();
        wgmma::fence();
        issue_pv(prev, 0);
        wgmma::wait<0>();
        accumulate(0);
        rest_of_pv(prev);
        release(empty_v(prev));
        mbar_wait(full_k(st), full_parity(j, Stages));
        wgmma::fence();
        issue_s(st);
        turn_end();
        wgmma::wait<0>();
        release(empty_k(st));
        softmax(j);
        rescale_and_pack();
        continue;
      }
      mbar_wait(full_k(st), full_parity(j, Stages));
      mbar_wait(full_v(prev), full_parity(j - 1, Stages));
      turn_begin();
      wgmma::fence();
      issue_s(st);
      issue_pv(prev, 0);
      turn_end();
      wgmma::wait<1>();
      release(empty_k(st));
      softmax(j);
      wgmma::wait<0>();
      accumulate(0);
      rest_of_pv(prev);
      release(empty_v(prev));
      rescale_and_pack();
    }
    const int last = (Tcount - 1) % Stages;
    mbar_wait(full_v(last), full_parity(Tcount - 1, Stages));
    turn_begin();
    wgmma::fence();
    issue_pv(last, 0);
    turn_end();
    wgmma::wait<0>();
    accumulate(0);
    rest_of_pv(last);
    release(empty_v(last));
  }

  // [o-direct] O = Õ · V's descale / (256 · l), in bf16 straight to global memory: two values per store.
  __nv_bfloat16* O = static_cast<__nv_bfloat16*>(p.o) + b * p.o_sb + h * p.o_sh;
  float* Lse = p.lse + b * p.lse_sb + h * p.lse_sh;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 1);
    l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 2);
  }
  constexpr float kLScale = Fold ? 1.0f : fp8::kPScale;  // [lean-ops] l summed P·256 already
  const float inv[2] = {l[0] > 0.0f ? dv_cur / (kLScale * l[0]) : 0.0f, l[1] > 0.0f ? dv_cur / (kLScale * l[1]) : 0.0f};
  const int wr = i0 + 64 * c + w0 + m16n8k16::group(lane);
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    if (wr + 8 * hr >= p.N) continue;
    __nv_bfloat16* orow = O + int64_t(wr + 8 * hr) * p.o_sn;
#pragma unroll
    for (int hf = 0; hf < kHalves; ++hf)
#pragma unroll
      for (int n = 0; n < kPvN / 8; ++n) {
        const int col = kPvN * hf + 8 * n + 2 * m16n8k16::thread_in_group(lane);
        *reinterpret_cast<__nv_bfloat162*>(orow + col) =
            __floats2bfloat162_rn(o[hf][4 * n + 2 * hr] * inv[hr], o[hf][4 * n + 2 * hr + 1] * inv[hr]);
      }
    if (m16n8k16::thread_in_group(lane) == 0) Lse[wr + 8 * hr] = l[hr] > 0.0f ? (m[hr] + log2f(l[hr]) - (Fold ? fp8::kLog2PScale : 0.0f)) * kLn2 : INFINITY;
  }
}

namespace {

using EncodeFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                              const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                              CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeFn encoder() {
  static const EncodeFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || f == nullptr)
      throw Unsupported("step21: the driver has no cuTensorMapEncodeTiled (CUDA 12 or later is needed for TMA)");
    return reinterpret_cast<EncodeFn>(f);
  }();
  return fn;
}

// [tensor-map] A contiguous [B, heads, rows, cols] tensor of bytes (codes) as a 4-d map, boxes of
// box_cols (128, or 64: [sw64]) columns × box_rows rows, the swizzle of that many bytes, zeros outside.
CUtensorMap encode_codes(const uint8_t* base, int cols, int rows, int heads, int B, int box_rows, int box_cols = 128) {
  const cuuint64_t dims[4] = {cuuint64_t(cols), cuuint64_t(rows), cuuint64_t(heads), cuuint64_t(B)};
  const cuuint64_t strides[3] = {cuuint64_t(cols), cuuint64_t(int64_t(cols) * rows), cuuint64_t(int64_t(cols) * rows * heads)};
  const cuuint32_t box[4] = {cuuint32_t(box_cols), cuuint32_t(box_rows), 1, 1}, elem[4] = {1, 1, 1, 1};
  CUtensorMap m{};
  const CUresult r = encoder()(&m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, const_cast<uint8_t*>(base), dims, strides, box, elem,
                               CU_TENSOR_MAP_INTERLEAVE_NONE, box_cols == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) throw std::invalid_argument("step21: cuTensorMapEncodeTiled refused a tensor of codes (error " + std::to_string(int(r)) + ")");
  return m;
}

Fp8Buffers buffers(const AttnParams& p, const Layout& L, bool vt) {
  auto* w = static_cast<unsigned char*>(p.workspace);
  Fp8Buffers f;
  f.q8 = w + L.q8, f.k8 = w + L.k8, f.v8 = w + L.v8;
  f.amax = reinterpret_cast<unsigned*>(w + L.amax), f.descale = reinterpret_cast<float*>(w + L.descale);
  f.gq = L.gq, f.gk = L.gk, f.nk32 = L.nk32, f.vt = vt;
  return f;
}

template <int D>
void quantize(const AttnParams& p, const Fp8Buffers& f, cudaStream_t st) {
  const int64_t groups = q_groups(p, f) + 2 * k_groups(p, f);
  CUDA_CHECK(cudaMemsetAsync(f.amax, 0, size_t(groups) * 4, st));
  const int rows = std::max(p.N, f.vt ? f.nk32 : p.Nk);
  const dim3 grid(unsigned((rows + kQuantRows - 1) / kQuantRows), unsigned(p.B * std::max(p.H, p.Hkv)), 3);
  step21_amax<D><<<grid, 128, 0, st>>>(p, f);
  CUDA_CHECK_LAUNCH("step21_amax");
  step21_quantize<D><<<grid, 128, 0, st>>>(p, f);
  CUDA_CHECK_LAUNCH("step21_quantize");
}

template <int D, bool RawV, bool Stepped, bool Serial, int Ops>
void forward(const AttnParams& p, const Fp8Buffers& f, cudaStream_t st) {
  constexpr Schedule S = schedule_for(D, RawV ? kVKernel : kVPretransposed);
  const size_t smem = size_t(smem_bytes(S, D));
  auto kernel = step21_fp8<D, S.stages, RawV, Stepped, Serial, Ops>;
  static bool configured = false;
  if (!configured) {
    int dev = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (size_t(optin) < smem)
      throw Unsupported("step21: " + std::to_string(smem) + " bytes of shared memory per block needed; this GPU allows " + std::to_string(optin));
    cudaFuncAttributes fa{};
    CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
    if (fa.binaryVersion != 90)  // [sm90a]
      throw Unsupported("step21: this build has no sm_90a code for its kernel (it runs sm_" + std::to_string(fa.binaryVersion) +
                        "): configure with 90 in CMAKE_CUDA_ARCHITECTURES");
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    configured = true;
  }
  Maps maps;
  maps.q = encode_codes(f.q8, D, p.N, p.H, p.B, S.Br, qk_row_bytes(D));
  maps.k = encode_codes(f.k8, D, p.Nk, p.Hkv, p.B, S.Bc, qk_row_bytes(D));
  maps.v = RawV ? encode_codes(f.v8, D, p.Nk, p.Hkv, p.B, S.Bc) : encode_codes(f.v8, f.nk32, D, p.Hkv, p.B, D);
  const Descales ds{f.descale, f.descale + q_groups(p, f), f.descale + q_groups(p, f) + k_groups(p, f), f.gq, f.gk};
  const dim3 grid(unsigned(num_tiles(p.N, S.Br)), unsigned(p.B * p.H));
  kernel<<<grid, S.threads(), smem, st>>>(maps, p, ds);
  CUDA_CHECK_LAUNCH("step21_fp8");
}

template <int D, bool Serial, int Ops>
void forward_v(const AttnParams& p, const Fp8Buffers& f, int v_layout, cudaStream_t st) {
  if (v_layout == kVPretransposed) return forward<D, false, false, Serial, Ops>(p, f, st);
  if constexpr (D >= kRawVMinD) {  // [sw64] the transposers are built for 128-byte rows of V only
    if (v_layout == kVKernelStepped) forward<D, true, true, Serial, Ops>(p, f, st);
    else forward<D, true, false, Serial, Ops>(p, f, st);
  } else {
    throw Unsupported("step21: " + v_layout_reason(D, v_layout));
  }
}
template <int D, int Ops>
void forward_pv(const AttnParams& p, const Fp8Buffers& f, int v_layout, int pv_order, cudaStream_t st) {
  if (pv_order == kPvSerial) forward_v<D, true, Ops>(p, f, v_layout, st);
  else forward_v<D, false, Ops>(p, f, v_layout, st);
}

template <int D>
void launch_d(const AttnParams& p, int v_layout, int pv_order, int ops, cudaStream_t st) {
  const bool vt = v_layout == kVPretransposed;
  const Layout L = layout(p.B, p.H, p.Hkv, p.N, p.Nk, D, p.fp8_block, vt);
  const Fp8Buffers f = buffers(p, L, vt);
  quantize<D>(p, f, st);
  if (ops == kOpsLean) forward_pv<D, kOpsLean>(p, f, v_layout, pv_order, st);
  else if (ops == kOpsFold) forward_pv<D, kOpsFold>(p, f, v_layout, pv_order, st);
  else forward_pv<D, kOpsPlain>(p, f, v_layout, pv_order, st);
}

}  // namespace

void launch(const AttnParams& p0, const StepOptions& opts, void* stream) {
  AttnParams p = p0;
  if (p.Hkv <= 0) p.Hkv = p.H;
  if (!p.fp8 || !p.bf16) throw std::invalid_argument("step21: FP8 only: --dtype e4m3 (bf16 inputs, quantized by the step)");
  auto aligned = [](const void* ptr, int64_t sb, int64_t sh, int64_t sn) {
    return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && sb % 8 == 0 && sh % 8 == 0 && sn % 8 == 0;
  };
  if (!aligned(p.q, p.q_sb, p.q_sh, p.q_sn) || !aligned(p.k, p.k_sb, p.k_sh, p.k_sn) ||
      !aligned(p.v, p.v_sb, p.v_sh, p.v_sn) || !aligned(p.o, p.o_sb, p.o_sh, p.o_sn))
    throw std::invalid_argument("step21: Q, K, V, O need 16-byte aligned pointers and strides that are multiples of 8");
  if (int64_t(p.B) * std::max(p.H, p.Hkv) > 65535) throw std::invalid_argument("step21: B·H must be at most 65535 (grid dimension)");
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const int v = v_layout_of(opts), pv = pv_order_of(opts, p.d), ops = ops_of(opts, p.d);  // [per-d-defaults]
  if (const std::string why = v_layout_reason(p.d, v); !why.empty()) throw Unsupported("step21: " + why);  // [sw64]
  switch (p.d) {
    case 64: return launch_d<64>(p, v, pv, ops, st);
    case 128: return launch_d<128>(p, v, pv, ops, st);
    case 256: return launch_d<256>(p, v, pv, ops, st);
    default: throw Unsupported("step21: head dimension " + std::to_string(p.d) + " is not compiled (64, 128, 256: [stored-d])");
  }
}

// [quantize] The quantize kernels alone on Q, K, V uploaded contiguous in bf16, their codes and
// descales copied back (Vᵀ turned back to [key][dim]): what tests/test_gpu.cpp holds against the
// host's quantize_fp8, code for code.
Fp8Inputs quantize_on_gpu(const Shape& s, const Inputs& in, int v_layout) {
  if (!s.fp8) throw std::invalid_argument("step21: quantize_on_gpu takes an fp8 shape");
  const bool vt = v_layout == kVPretransposed;
  const Layout L = layout(s.B, s.H, s.hkv(), s.N, s.Nk, s.d, s.fp8_block, vt);
  std::vector<void*> owned;
  auto upload = [&](const Tensor4& x) {
    std::vector<uint16_t> bits(x.v.size());
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = float_to_bf16_bits(x.v[i]);
    void* dptr = nullptr;
    CUDA_CHECK(cudaMalloc(&dptr, bits.size() * 2 + 16));
    CUDA_CHECK(cudaMemcpy(dptr, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
    owned.push_back(dptr);
    return dptr;
  };
  AttnParams p;
  p.B = int(s.B), p.H = int(s.H), p.Hkv = int(s.hkv()), p.N = int(s.N), p.Nk = int(s.Nk), p.d = int(s.d);
  p.q = upload(in.q), p.k = upload(in.k), p.v = upload(in.v);
  p.q_sn = s.d, p.q_sh = s.N * s.d, p.q_sb = s.H * s.N * s.d;
  p.k_sn = p.v_sn = s.d, p.k_sh = p.v_sh = s.Nk * s.d, p.k_sb = p.v_sb = s.hkv() * s.Nk * s.d;
  p.bf16 = true, p.fp8 = true, p.fp8_block = s.fp8_block, p.incoherent = s.incoherent;
  CUDA_CHECK(cudaMalloc(&p.workspace, size_t(L.bytes)));
  owned.push_back(p.workspace);
  const Fp8Buffers f = buffers(p, L, vt);
  if (p.d == 64) quantize<64>(p, f, nullptr);
  else if (p.d == 128) quantize<128>(p, f, nullptr);
  else if (p.d == 256) quantize<256>(p, f, nullptr);
  else throw Unsupported("step21: head dimension " + std::to_string(p.d) + " is not compiled (64, 128, 256: [stored-d])");
  CUDA_CHECK(cudaDeviceSynchronize());
  Fp8Inputs out;
  auto fetch = [&](Fp8Tensor& t, const uint8_t* codes, int heads, int rows, int groups, int64_t group0) {
    t.B = p.B, t.heads = heads, t.rows = rows, t.d = p.d, t.groups = groups;
    t.codes.resize(size_t(int64_t(p.B) * heads * rows * p.d));
    t.descales.resize(size_t(int64_t(p.B) * heads * groups));
    if (codes) CUDA_CHECK(cudaMemcpy(t.codes.data(), codes, t.codes.size(), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(t.descales.data(), f.descale + group0, t.descales.size() * 4, cudaMemcpyDeviceToHost));
  };
  fetch(out.q, f.q8, p.H, p.N, f.gq, 0);
  fetch(out.k, f.k8, p.Hkv, p.Nk, f.gk, q_groups(p, f));
  fetch(out.v, vt ? nullptr : f.v8, p.Hkv, p.Nk, f.gk, q_groups(p, f) + k_groups(p, f));
  if (vt) {  // Vᵀ back to [key][dim], undoing the key order; the slots past Nk must hold zeros
    std::vector<uint8_t> t(size_t(int64_t(p.B) * p.Hkv * p.d * f.nk32));
    CUDA_CHECK(cudaMemcpy(t.data(), f.v8, t.size(), cudaMemcpyDeviceToHost));
    for (int64_t bh = 0; bh < int64_t(p.B) * p.Hkv; ++bh)
      for (int key = 0; key < f.nk32; ++key)
        for (int c = 0; c < p.d; ++c) {
          const uint8_t code = t[size_t((bh * p.d + c) * f.nk32 + 32 * (key / 32) + slot_of_key(key % 32))];
          if (key < p.Nk) out.v.codes[size_t((bh * p.Nk + key) * p.d + c)] = code;
          else if (code != 0) throw std::logic_error("step21: Vᵀ holds a nonzero code past Nk");
        }
  }
  for (void* x : owned) CUDA_CHECK(cudaFree(x));
  return out;
}

}  // namespace fa::step21
