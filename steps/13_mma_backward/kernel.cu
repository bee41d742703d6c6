// Step 13 — the backward pass on tensor cores (the forward is step 12's kernel).
//
//   step13_bwd_pre      per row: D = Σ_c dO·O, L·log2 e (+inf past N), the fp32 dQ accumulator(s) zeroed
//   step13_bwd_kv       a block per (K/V tile j, head), Bc/16 warps: per Q tile i, Sᵀ = K Qᵀ and
//                       dPᵀ = V dOᵀ, a 32-key × Br/2-query tile per warp ([transposed],
//                       [sdp-warps]); Pᵀ and dSᵀ rebuilt there from L and D and stored to shared
//                       memory ([pt-smem]); after a barrier dQ_i += dS K_j, added to the accumulator
//                       with fp32 atomics ([dq]), and dV += Pᵀ dO, dK += dSᵀ Q by keys and dims
//                       ([dkv]); Q_i, dO_i, L, D one tile ahead ([pipeline])
//   step13_dq_convert   dQ = scale · accumulator (the splits summed in order), in the storage type
//
// [gqa] A bwd_kv block serves a key/value head: it walks the Q tiles of each of the group's H / Hkv
// query heads in turn, so dK and dV sum the group in its registers (no atomics); dQ stays per
// query head. [window] A K/V tile's Q tiles end where the rows' bands pass it (end_q_tile), and the
// mask tests the band's left edge too.
//
// Layout of every fragment: common/kernel/mma_layout.hpp. Template arguments: Det ([deterministic]: dQ
// without racing atomics), Drop ([dropout]), Tl (a TileChoice) and Xp (an Experiment: schedule.hpp, [tune]).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernel/arch.cuh"  // FA_SM80_ONLY: mma.sync.m16n8k16, cp.async before sm_80 trap (the host refuses first)
#include "kernel/cuda_check.cuh"
#include "kernel/dropout.hpp"
#include "schedule.hpp"

namespace fa::step13 {

template <class T> __device__ inline float to_f32(T x);
template <> __device__ inline float to_f32(__half x) { return __half2float(x); }
template <> __device__ inline float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

// Two floats -> one 32-bit register of two 16-bit values (the lower index in the low half).
template <class T> __device__ inline uint32_t pack2(float lo, float hi);
template <> __device__ inline uint32_t pack2<__half>(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
template <> __device__ inline uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// [mma] D = A·B + D for one 16 × 8 × 16 tile: 4 A registers, 2 B registers, 4 fp32 accumulators.
template <class T> __device__ inline void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <> __device__ inline void mma16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  FA_SM80_ONLY(asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1)));
}
template <> __device__ inline void mma16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  FA_SM80_ONLY(asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1)));
}

// [exp2] 2^x in one instruction (MUFU.EX2; 2^-inf = 0).
__device__ inline float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ inline void ldmatrix_x4(uint32_t (&r)[4], uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ inline void cp_async_commit() { FA_SM80_ONLY(asm volatile("cp.async.commit_group;\n" ::)); }
__device__ inline void cp_async_wait_all() { FA_SM80_ONLY(asm volatile("cp.async.wait_group 0;\n" ::)); }
__device__ inline void cp_async16(uint32_t dst, const void* src, bool inside) {
  FA_SM80_ONLY(asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(inside ? 16 : 0)));
}

// [swizzle] A tile of rows of kRow bytes (a power of two, 32 to 256): the 16-byte chunk c of row r
// sits at chunk c XOR (r mod 8) (mod the chunks per row when fewer than 8), step 12's layout.
template <int kRow>
constexpr int kMask = (kRow / 16 < 8 ? kRow / 16 : 8) - 1;
template <int kRow>
__device__ inline uint32_t swz(uint32_t tile, int r, int chunk) {
  return tile + r * kRow + 16 * (chunk ^ (r & kMask<kRow>));
}

// [cp-async] Rows [r0, r0 + R) of a (rows × D) matrix into the swizzled tile at `tile`, 16 bytes
// per cp.async; rows past `rows` zero-filled by the copy itself. kThreads threads share the work.
template <class T, int D, int R, int kThreads>
__device__ inline void load_rows_async(uint32_t tile, const T* __restrict__ g, int64_t ld, int r0, int rows) {
  constexpr int kChunks = D / 8;
  for (int c = threadIdx.x; c < R * kChunks; c += kThreads) {
    const int r = c / kChunks, cc = c % kChunks;
    const bool inside = r0 + r < rows;
    cp_async16(swz<D * 2>(tile, r, cc), inside ? g + int64_t(r0 + r) * ld + 8 * cc : g, inside);
  }
}

// Pointers into the workspace (schedule.hpp, workspace_bytes): L·log2 e and D per padded row, then
// the dQ accumulator(s).
struct Ws {
  float *l2, *dd, *acc;
  int64_t Np, split_stride;  // padded rows per head; floats per dQ split
  __device__ Ws(const BwdParams& p, int d) {
    const int64_t BH = int64_t(p.f.B) * p.f.H;
    Np = rows_padded(p.f.N);
    l2 = static_cast<float*>(p.workspace);
    dd = l2 + BH * Np;
    acc = dd + BH * Np;
    split_stride = BH * Np * d;
  }
};

// [pre] D/8 threads per padded row, 8 elements (16 bytes) each: D = Σ_c dO·O and L·log2 e (rows past
// N: D = 0, L = +inf, so that their P is 0); the row of every dQ accumulator set to 0.
template <class T, int D>
__global__ void step13_bwd_pre(BwdParams p, int splits) {
  constexpr int kPer = D / 8;  // threads per row (2 .. 16: inside one warp)
  const Ws ws(p, D);
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kPer;  // over B·H·Np
  const int c0 = 8 * (threadIdx.x % kPer);
  if (row >= int64_t(p.f.B) * p.f.H * ws.Np) return;  // never taken: the grid is exact (Np is a multiple of 128)
  const int bh = int(row / ws.Np), i = int(row % ws.Np), b = bh / p.f.H, h = bh % p.f.H;
  float s = 0.0f;
  if (i < p.f.N) {
    const int64_t at = b * p.f.o_sb + h * p.f.o_sh + int64_t(i) * p.f.o_sn + c0;
    const uint4 o = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.f.o) + at);
    const uint4 g = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.dout) + at);
    const T* ov = reinterpret_cast<const T*>(&o);
    const T* gv = reinterpret_cast<const T*>(&g);
#pragma unroll
    for (int x = 0; x < 8; ++x) s += to_f32(gv[x]) * to_f32(ov[x]);
  }
  for (int k = 0; k < splits; ++k) {
    float4* a = reinterpret_cast<float4*>(ws.acc + k * ws.split_stride + row * D + c0);
    a[0] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    a[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
#pragma unroll
  for (int off = kPer / 2; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (c0 == 0) {
    ws.dd[row] = s;
    ws.l2[row] = i < p.f.N ? p.f.lse[b * p.f.lse_sb + h * p.f.lse_sh + i] * kLog2e : INFINITY;
  }
}

template <class T, int D, bool Det, bool Drop, int Tl, int Xp>
__global__ void __launch_bounds__(schedule_for(D, Tl).warps() * 32, 1) step13_bwd_kv(BwdParams p) {
  constexpr Schedule S = schedule_for(D, Tl);
  constexpr int Br = S.Br, Bc = S.Bc, W = S.warps(), kThreads = W * 32;
  constexpr int kRow = D * 2, kRowS = Br * 2;  // bytes per row: Q/dO/K/V tiles, the Pᵀ and dSᵀ tiles
  constexpr int WK = S.key_groups(), QW = S.sdp_queries();  // [sdp-warps] 32 keys × QW queries per warp
  constexpr int KG = S.dkv_key_groups(D), KD = S.dkv_keys(D), DW = S.dkv_dims(D);  // [dkv-warps]
  constexpr int QM = S.qm(D), kDims = S.dq_dims(D);  // [dq-warps] m16 row tiles and dimensions of dQ per warp
  // [stages] K_j, V_j, then kStages × (Q_i, dO_i), Pᵀ, dSᵀ, kStages × (L·log2 e, D); 1 KB-aligned tiles.
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  if (sbase % 1024 != 0) __trap();  // [addresses] the XOR stepping needs it
  const uint32_t k_sm = sbase, v_sm = k_sm + Bc * kRow;
  auto q_sm = [&](int st) { return v_sm + Bc * kRow + 2 * st * Br * kRow; };
  auto do_sm = [&](int st) { return q_sm(st) + Br * kRow; };
  const uint32_t pt_sm = q_sm(kStages), ds_sm = pt_sm + Bc * kRowS;
  auto l_sm = [&](int st) { return ds_sm + Bc * kRowS + 2 * st * Br * 4; };
  auto d_sm = [&](int st) { return l_sm(st) + Br * 4; };
  const float* lds_f = reinterpret_cast<const float*>(smem_raw + (l_sm(0) - sbase));  // generic view of L/D

  const AttnParams& f = p.f;
  // [gqa] blockIdx.y = b·Hkv + hk; the group's query heads are h0 .. h0 + QH − 1 (bh0 = b·H + h0).
  const int QH = f.H / f.Hkv, b = blockIdx.y / f.Hkv, hk = blockIdx.y % f.Hkv, bh0 = b * f.H + hk * QH;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const T* Q = static_cast<const T*>(f.q) + b * f.q_sb + int64_t(hk) * QH * f.q_sh;  // query head h0; + gh·q_sh for head h0 + gh
  const T* K = static_cast<const T*>(f.k) + b * f.k_sb + hk * f.k_sh;
  const T* V = static_cast<const T*>(f.v) + b * f.v_sb + hk * f.v_sh;
  const T* dO = static_cast<const T*>(p.dout) + b * f.o_sb + int64_t(hk) * QH * f.o_sh;
  const Ws ws(p, D);
  const float* L2 = ws.l2 + int64_t(bh0) * ws.Np;  // + gh·Np for head h0 + gh
  const float* Dr = ws.dd + int64_t(bh0) * ws.Np;
  const float sl2 = f.scale * kLog2e;
  const int Tr = int(num_tiles(f.N, Br)), Tc = int(num_tiles(f.Nk, Bc));
  const uint32_t keep_below = Drop ? dropout_threshold(f.dropout) : 0u;
  const float rescale = Drop ? dropout_rescale(f.dropout) : 1.0f;

  // [x4] Lane addresses (lr = row in its 8 × 8 block, lb = block), as in step 12, for the 16 × 16
  // tile at row 0, chunk 0 (a multiple of 16 rows is added, 16 columns are an XOR with 32):
  //   A stored by rows (K, V as A of Sᵀ, dPᵀ; Pᵀ, dSᵀ as A of dV, dK): rows 8(lb % 2) + lr, chunk lb / 2;
  //   B stored n-major (Q, dO as B of Sᵀ, dPᵀ): rows 8(lb / 2) + lr, chunk lb % 2;
  //   B stored k-major (.trans: dO, Q as B of dV, dK; K as B of dQ): rows 8(lb % 2) + lr, chunk lb / 2;
  //   A stored transposed (.trans: dS from dSᵀ): rows 8(lb / 2) + lr, chunk lb % 2.
  const int lr = lane % 8, lb = lane / 8;
  const uint32_t a_lane = swz<kRow>(0, 8 * (lb % 2) + lr, lb / 2);
  const uint32_t as_lane = swz<kRowS>(0, 8 * (lb % 2) + lr, lb / 2);
  const uint32_t bn_lane = swz<kRow>(0, 8 * (lb / 2) + lr, lb % 2);
  const uint32_t bk_lane = swz<kRow>(0, 8 * (lb % 2) + lr, lb / 2);
  const uint32_t ds_lane = swz<kRowS>(0, 8 * (lb / 2) + lr, lb % 2);
  // [sdp-warps] this warp's 32 keys (group wk) and QW queries (half wq) of Sᵀ and dPᵀ;
  // [dkv-warps] its KD keys (group kg) and DW dims (group dg) of dK and dV; [dq-warps] its dQ rows and dims.
  const int wk = warp % WK, wq = warp / WK, kg = warp % KG, dg = warp / KG;
  const int rg = warp % S.rgroups(D), cg = warp / S.rgroups(D);

  // [deterministic] Without it one pass (a block per K/V tile); with it block s walks tiles
  // s, s + gridDim.x, ... and owns dQ buffer s.
  for (int jt = blockIdx.x; jt < Tc; jt += Det ? gridDim.x : Tc) {
    const int j0 = jt * Bc;
    const int it0 = int(first_q_tile(j0, f.N, f.Nk, Br, f.causal));
    const int itE = max(it0, int(end_q_tile(j0 + Bc < f.Nk ? j0 + Bc : f.Nk, f.N, f.Nk, Br, f.causal, f.window)));  // [window]
    float* acc = ws.acc + (Det ? int64_t(blockIdx.x) * ws.split_stride : 0) + int64_t(bh0) * ws.Np * D;  // + gh·Np·D

    // [pipeline] K_j, V_j and the first Q tile's Q, dO, L, D as one group. [gqa] Q tile it of query
    // head h0 + gh.
    auto load_q_tile = [&](int gh, int it, int st) {
      load_rows_async<T, D, Br, kThreads>(q_sm(st), Q + gh * f.q_sh, f.q_sn, it * Br, f.N);
      load_rows_async<T, D, Br, kThreads>(do_sm(st), dO + gh * f.o_sh, f.o_sn, it * Br, f.N);
      const int64_t row0 = int64_t(gh) * ws.Np + it * Br;
      if (threadIdx.x < Br / 4) cp_async16(l_sm(st) + 16 * threadIdx.x, L2 + row0 + 4 * threadIdx.x, true);
      else if (threadIdx.x < Br / 2) cp_async16(d_sm(st) + 16 * (threadIdx.x - Br / 4), Dr + row0 + 4 * (threadIdx.x - Br / 4), true);
    };
    load_rows_async<T, D, Bc, kThreads>(k_sm, K, f.k_sn, j0, f.Nk);
    load_rows_async<T, D, Bc, kThreads>(v_sm, V, f.v_sn, j0, f.Nk);
    if (it0 < itE) load_q_tile(0, it0, 0);
    cp_async_commit();

    // [dq] dQ_i's share of this K/V tile, dS K_j, for Q tile itq: the warp's QM m16 row tiles (group
    // rg) × kDims dims (group cg). A = dS from the dSᵀ tile (.trans), B = K_j (.trans), 16 keys at a
    // time; each K fragment feeds QM products.
    auto dq_step = [&](int gh, int itq) {
      float dq[QM][kDims / 8][4];
#pragma unroll
      for (int m = 0; m < QM; ++m)
#pragma unroll
        for (int n = 0; n < kDims / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) dq[m][n][e] = 0.0f;
      // lab:begin dq {dQ}: [dq]: per 16 keys kk, ldmatrix_x4_trans of dS from the dSᵀ tile for each …
#pragma unroll
      for (int kk = 0; kk < Bc / 16; ++kk) {
        uint32_t a[QM][4];
#pragma unroll
        for (int m = 0; m < QM; ++m) ldmatrix_x4_trans(a[m], (ds_sm + ds_lane + 16 * kk * kRowS) ^ (32 * (rg * QM + m)));
#pragma unroll
        for (int np = 0; np < kDims / 16; ++np) {
          uint32_t kb[4];
          ldmatrix_x4_trans(kb, (k_sm + bk_lane + 16 * kk * kRow) ^ (32 * (cg * (kDims / 16) + np)));
#pragma unroll
          for (int m = 0; m < QM; ++m) {
            mma16816<T>(dq[m][2 * np], a[m], kb[0], kb[1]);
            mma16816<T>(dq[m][2 * np + 1], a[m], kb[2], kb[3]);
          }
        }
      }
      // lab:end
      // [dq-atomic] Into the fp32 accumulator (rows past N land in its padding), laid out as the warps
      // hold it ([dq-layout]): C tile (m, n) is 128 consecutive floats, the lane's four at 4·lane, so
      // each lane sends one 16-byte RED (sm_90) and the warp's cover 512 contiguous bytes. Every K/V
      // tile's block adds to these elements in an order nobody fixes. [deterministic]: this block owns
      // its buffer, so a plain read-add-write in program order.
      float* tile0 = acc + (int64_t(gh) * ws.Np + int64_t(itq) * Br) * D + int64_t(warp) * QM * (kDims / 8) * 128 + 4 * lane;
#pragma unroll
      for (int m = 0; m < QM; ++m)
#pragma unroll
        for (int n = 0; n < kDims / 8; ++n) {
          float* at = tile0 + (m * (kDims / 8) + n) * 128;
          const float* c = dq[m][n];
          if constexpr (Det) {
            float4 v = *reinterpret_cast<float4*>(at);
            v.x += c[0], v.y += c[1], v.z += c[2], v.w += c[3];
            *reinterpret_cast<float4*>(at) = v;
          } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // sm_90 has 8- and 16-byte float reductions
            if constexpr (Xp == kRed64) {  // [tune] two 8-byte reductions instead of one 16-byte one
              atomicAdd(reinterpret_cast<float2*>(at), make_float2(c[0], c[1]));
              atomicAdd(reinterpret_cast<float2*>(at + 2), make_float2(c[2], c[3]));
            } else if constexpr (Xp != kRed32) {
              atomicAdd(reinterpret_cast<float4*>(at), make_float4(c[0], c[1], c[2], c[3]));  // one RED.128
            } else
#endif
            {
#pragma unroll
              for (int e = 0; e < 4; ++e) atomicAdd(at + e, c[e]);  // red32, and every reduction before sm_90
            }
          }
        }
    };

    // [dkv-warps] dK_j and dV_j for the warp's KD keys × DW dims: KD/16 × DW/8 accumulator tiles each.
    float dk[KD / 16][DW / 8][4], dv[KD / 16][DW / 8][4];
#pragma unroll
    for (int m = 0; m < KD / 16; ++m)
#pragma unroll
      for (int n = 0; n < DW / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk[m][n][e] = dv[m][n][e] = 0.0f;

    // [gqa] The group's query heads in turn, each over Q tiles it0 .. itE − 1, as one loop of steps
    // q (the stages go by it; head gh, Q tile it); the next step's tile is loaded one step ahead,
    // across heads too. (Two nested loops made ptxas spill the dK and dV accumulators.)
    const int steps = QH * (itE - it0);
    int gh = 0, it = it0;
    for (int q = 0; q < steps; ++q) {
      const int i0 = it * Br, st = q % kStages, bh = bh0 + gh;
      // [pipeline] Tile i has landed (this thread's copies, then everyone's). [two-barriers] The same
      // barrier says every warp is done with tile i − 1: its Q/dO stage may be refilled (the next copy
      // starts) and its Pᵀ and dSᵀ tiles rewritten.
      cp_async_wait_all();
      __syncthreads();
      if (it + 1 < itE) load_q_tile(gh, it + 1, (st + 1) % kStages);
      else if (gh + 1 < QH) load_q_tile(gh + 1, it0, (st + 1) % kStages);
      cp_async_commit();

      // [transposed] Sᵀ = K Q_iᵀ and dPᵀ = V dO_iᵀ for the warp's 32 keys × QW queries ([sdp-warps]).
      // Per 16 dims: the A fragments of its two 16-key row tiles of K and V, then per 16 queries one
      // ldmatrix.x4 of Q and of dO as stored (n-major): the B fragments of queries 16np .. + 7 and
      // + 8 .. + 15, each feeding both key tiles.
      float s[2][QW / 8][4], dp[2][QW / 8][4];
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int n = 0; n < QW / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[m][n][e] = dp[m][n][e] = 0.0f;
      // lab:begin transposed {dQ dK dV}: [transposed] + [x4]: per 16 dims kk, ldmatrix_x4 of the warp's two …
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t ka[2][4], va[2][4];
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          ldmatrix_x4(ka[m], (k_sm + a_lane + (32 * wk + 16 * m) * kRow) ^ (32 * kk));
          ldmatrix_x4(va[m], (v_sm + a_lane + (32 * wk + 16 * m) * kRow) ^ (32 * kk));
        }
#pragma unroll
        for (int np = 0; np < QW / 16; ++np) {
          uint32_t qb[4], ob[4];
          ldmatrix_x4(qb, (q_sm(st) + bn_lane + (wq * QW + 16 * np) * kRow) ^ (32 * kk));
          ldmatrix_x4(ob, (do_sm(st) + bn_lane + (wq * QW + 16 * np) * kRow) ^ (32 * kk));
#pragma unroll
          for (int m = 0; m < 2; ++m) {
            mma16816<T>(s[m][2 * np], ka[m], qb[0], qb[1]);
            mma16816<T>(s[m][2 * np + 1], ka[m], qb[2], qb[3]);
            mma16816<T>(dp[m][2 * np], va[m], ob[0], ob[1]);
            mma16816<T>(dp[m][2 * np + 1], va[m], ob[2], ob[3]);
          }
        }
      }
      // lab:end

      // [causal-mask] Lane holds keys j0 + 32wk + 16m + g (+ 8) and queries q0 + 8n + 2t (+ 1): a
      // key at or past the query's visible count (keys past Nk included) gets −inf, so P = 0.
      // [window] So does a key W or more before it: the band's left edge, vis − W (rows past N,
      // whose vis is clipped to Nk, lose keys by this: their P is 0 anyway, L = +inf).
      const int key0 = j0 + 32 * wk + g, q0 = i0 + wq * QW;
      if (needs_mask(i0, i0 + min(Br, f.N - i0), j0, f.N, f.Nk, Bc, f.causal, f.window)) {
#pragma unroll
        for (int n = 0; n < QW / 8; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int vis = int(visible_keys(q0 + 8 * n + 2 * t + e, f.N, f.Nk, f.causal));
            const int lo = f.window > 0 ? vis - f.window : -1;
#pragma unroll
            for (int m = 0; m < 2; ++m)
#pragma unroll
              for (int hr = 0; hr < 2; ++hr) {
                const int key = key0 + 16 * m + 8 * hr;
                if (key >= vis || key < lo) s[m][n][2 * hr + e] = -INFINITY;
              }
          }
      }

      // [softmax-grad] Pᵀ = exp2(s·scale·log2 e − L·log2 e); dSᵀ = Pᵀ ∘ (dPᵀ − D). A column of the
      // lane's tiles is one query: its L and D are one 8-byte load each (four lanes share it).
      // [dropout] With a mask: Pᵀ∘Z feeds dV, and dSᵀ = Pᵀ ∘ (dPᵀ∘Z − D) (Z = keep / (1 − P)).
      // [pt-smem] Both, in the storage type, into the block's Pᵀ and dSᵀ tiles: element (key, query)
      // pairs of the lane's C tile are one 4-byte store each.
      const float* Ls = lds_f + 2 * st * Br + wq * QW;
      const float* Ds = Ls + Br;
      // lab:begin softmax-grad {dQ dK dV}: [softmax-grad] + [pt-smem]: per 16 queries np, with dropout Z …
#pragma unroll
      for (int np = 0; np < QW / 16; ++np) {
        float z[2][2][4];  // [key tile m][block 2np + nb][element]: Z of the lane's elements
        if constexpr (Drop) {
          // Call e of key tile m is the 2 × 2 block of query q0 + 16np + 2t + e and key key0 + 16m:
          // its word 2·nb + hr belongs to 8-query block 2np + nb, key row hr (common/kernel/dropout.hpp,
          // [dropout-block]).
#pragma unroll
          for (int m = 0; m < 2; ++m)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const DropoutWords w = dropout_words(f.dropout_seed, f.dropout_offset, bh, q0 + 16 * np + 2 * t + e, key0 + 16 * m);
#pragma unroll
              for (int nb = 0; nb < 2; ++nb)
#pragma unroll
                for (int hr = 0; hr < 2; ++hr) z[m][nb][2 * hr + e] = w.w[2 * nb + hr] >= keep_below ? rescale : 0.0f;
            }
        }
#pragma unroll
        for (int nb = 0; nb < 2; ++nb) {
          const int n = 2 * np + nb;
          const float2 l2v = *reinterpret_cast<const float2*>(Ls + 8 * n + 2 * t);  // one load for both key tiles
          const float2 dd2 = *reinterpret_cast<const float2*>(Ds + 8 * n + 2 * t);
#pragma unroll
          for (int m = 0; m < 2; ++m) {
            float* sv = s[m][n];
            float* dv2 = dp[m][n];
#pragma unroll
            for (int x = 0; x < 4; ++x) {
              const float lv = (x % 2) ? l2v.y : l2v.x, dval = (x % 2) ? dd2.y : dd2.x;
              const float pv = fast_exp2(fmaf(sv[x], sl2, -lv));
              if constexpr (Drop) {
                sv[x] = pv * z[m][nb][x];
                dv2[x] = pv * (dv2[x] * z[m][nb][x] - dval);
              } else {
                sv[x] = pv;
                dv2[x] = pv * (dv2[x] - dval);
              }
            }
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
              const uint32_t off = swz<kRowS>(0, 32 * wk + 16 * m + g + 8 * hr, wq * (QW / 8) + n) + 4 * t;
              asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(pt_sm + off), "r"(pack2<T>(sv[2 * hr], sv[2 * hr + 1])));
              asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(ds_sm + off), "r"(pack2<T>(dv2[2 * hr], dv2[2 * hr + 1])));
            }
          }
        }
      }
      // lab:end
      __syncthreads();  // [two-barriers] Pᵀ and dSᵀ of tile i are whole

      if constexpr (Xp != kDqEnd) dq_step(gh, it);  // [dq] first: its reductions drain while dK and dV are formed

      // [dkv] dV += Pᵀ dO_i and dK += dSᵀ Q_i for the warp's KD keys × DW dims ([dkv-warps]): per 16
      // queries, the A fragments of its key tiles of Pᵀ and dSᵀ (as stored: keys by rows), then per 16
      // dims one ldmatrix.x4.trans of dO_i and of Q_i (k-major), each feeding every key tile.
      // lab:begin dkv {dK dV}: [dkv]: per 16 queries kk, ldmatrix_x4 of the warp's KD/16 key tiles of Pᵀ …
#pragma unroll
      for (int kk = 0; kk < Br / 16; ++kk) {
        uint32_t pa[KD / 16][4], da[KD / 16][4];
#pragma unroll
        for (int m = 0; m < KD / 16; ++m) {
          ldmatrix_x4(pa[m], (pt_sm + as_lane + (KD * kg + 16 * m) * kRowS) ^ (32 * kk));
          ldmatrix_x4(da[m], (ds_sm + as_lane + (KD * kg + 16 * m) * kRowS) ^ (32 * kk));
        }
#pragma unroll
        for (int np = 0; np < DW / 16; ++np) {
          uint32_t ob[4], qb[4];
          ldmatrix_x4_trans(ob, (do_sm(st) + bk_lane + 16 * kk * kRow) ^ (32 * (dg * (DW / 16) + np)));
          ldmatrix_x4_trans(qb, (q_sm(st) + bk_lane + 16 * kk * kRow) ^ (32 * (dg * (DW / 16) + np)));
#pragma unroll
          for (int m = 0; m < KD / 16; ++m) {
            mma16816<T>(dv[m][2 * np], pa[m], ob[0], ob[1]);
            mma16816<T>(dv[m][2 * np + 1], pa[m], ob[2], ob[3]);
            mma16816<T>(dk[m][2 * np], da[m], qb[0], qb[1]);
            mma16816<T>(dk[m][2 * np + 1], da[m], qb[2], qb[3]);
          }
        }
      }
      // lab:end
      if constexpr (Xp == kDqEnd) dq_step(gh, it);  // [tune] dq-end: dQ after dK and dV instead
      if (++it == itE) it = it0, ++gh;
    }

    // [dkdv-write] dV_j and scale·dK_j into the V and K tiles (every warp is past its last read of
    // them after this barrier; a row's dims come from DW-wide groups of warps), then out in 16-byte
    // chunks once all are written. (With no Q tile to visit, K_j and V_j may still be landing.)
    cp_async_wait_all();
    __syncthreads();
    const int keys = min(Bc, f.Nk - j0);
#pragma unroll
    for (int m = 0; m < KD / 16; ++m)
#pragma unroll
      for (int n = 0; n < DW / 8; ++n)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const uint32_t off = swz<kRow>(0, KD * kg + 16 * m + g + 8 * hr, dg * (DW / 8) + n) + 4 * t;
          asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(v_sm + off), "r"(pack2<T>(dv[m][n][2 * hr], dv[m][n][2 * hr + 1])));
          asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(k_sm + off),
                       "r"(pack2<T>(f.scale * dk[m][n][2 * hr], f.scale * dk[m][n][2 * hr + 1])));
        }
    __syncthreads();
    T* dK = static_cast<T*>(p.dk) + b * f.k_sb + hk * f.k_sh;  // [gqa] the group's sums
    T* dV = static_cast<T*>(p.dv) + b * f.v_sb + hk * f.v_sh;
    constexpr int kChunks = D / 8;
    for (int c = threadIdx.x; c < Bc * kChunks; c += kThreads) {
      const int key = c / kChunks, cc = c % kChunks;
      if (key >= keys) continue;
      uint4 kv, vv;
      asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(kv.x), "=r"(kv.y), "=r"(kv.z), "=r"(kv.w) : "r"(swz<kRow>(k_sm, key, cc)));
      asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(vv.x), "=r"(vv.y), "=r"(vv.z), "=r"(vv.w) : "r"(swz<kRow>(v_sm, key, cc)));
      *reinterpret_cast<uint4*>(dK + int64_t(j0 + key) * f.k_sn + 8 * cc) = kv;
      *reinterpret_cast<uint4*>(dV + int64_t(j0 + key) * f.v_sn + 8 * cc) = vv;
    }
    if constexpr (Det) __syncthreads();  // the next K/V tile's copies overwrite these rows
  }
}

// [dq-convert] dQ = scale · Σ_k accumulator_k (k = 0 .. splits − 1, in that order), 8 elements per
// thread, 16-byte stores. The accumulator is in the main kernel's warp order ([dq-layout]): the 8
// columns of a row are four pairs of consecutive floats there, 16 bytes apart.
template <class T, int D, int Tl>
__global__ void step13_dq_convert(BwdParams p, int splits) {
  constexpr Schedule S = schedule_for(D, Tl);
  const Ws ws(p, D);
  const int64_t e8 = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, rows = int64_t(p.f.B) * p.f.H * p.f.N;
  if (e8 >= rows * (D / 8)) return;
  const int64_t row = e8 / (D / 8);
  const int c0 = int(e8 % (D / 8)) * 8, bh = int(row / p.f.N), i = int(row % p.f.N), b = bh / p.f.H, h = bh % p.f.H;
  const float* a = ws.acc + (int64_t(bh) * ws.Np + (i / S.Br) * S.Br) * D;  // the Q tile's accumulator
  float v[8];
#pragma unroll
  for (int x = 0; x < 8; ++x) v[x] = 0.0f;
  for (int k = 0; k < splits; ++k)
#pragma unroll
    for (int x = 0; x < 8; x += 2) {
      const float2 two = *reinterpret_cast<const float2*>(a + k * ws.split_stride + acc_offset(S, D, i % S.Br, c0 + x));
      v[x] += two.x, v[x + 1] += two.y;
    }
  uint4 out;
  out.x = pack2<T>(p.f.scale * v[0], p.f.scale * v[1]);
  out.y = pack2<T>(p.f.scale * v[2], p.f.scale * v[3]);
  out.z = pack2<T>(p.f.scale * v[4], p.f.scale * v[5]);
  out.w = pack2<T>(p.f.scale * v[6], p.f.scale * v[7]);
  T* dQ = static_cast<T*>(p.dq) + b * p.f.q_sb + h * p.f.q_sh + int64_t(i) * p.f.q_sn + c0;
  *reinterpret_cast<uint4*>(dQ) = out;
}

namespace {

unsigned blocks_for(int64_t items, int per_block) { return unsigned((items + per_block - 1) / per_block); }

template <class T, int D, bool Det, bool Drop, int Tl, int Xp = kAsBuilt>
void launch_kv(const BwdParams& p, int splits, cudaStream_t st) {
  constexpr Schedule S = schedule_for(D, Tl);
  static_assert(valid(S, D), "whole fragments");
  const size_t smem = size_t(smem_bytes(S, D));
  static bool configured = false;  // per instantiation: opt in to more than 48 KB once
  if (!configured) {
    int dev = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (size_t(optin) < smem)
      throw Unsupported("step13: the backward needs " + std::to_string(smem) + " bytes of shared memory per block; this GPU allows " +
                        std::to_string(optin));
    CUDA_CHECK(cudaFuncSetAttribute(step13_bwd_kv<T, D, Det, Drop, Tl, Xp>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    configured = true;
  }
  const dim3 grid(unsigned(Det ? splits : num_tiles(p.f.Nk, S.Bc)), unsigned(p.f.B * p.f.Hkv));  // [gqa] a block per key/value head
  step13_bwd_kv<T, D, Det, Drop, Tl, Xp><<<grid, S.warps() * 32, smem, st>>>(p);
  CUDA_CHECK_LAUNCH("step13_bwd_kv");
  // [dq-convert] through the same tiles' accumulator layout
  step13_dq_convert<T, D, Tl><<<blocks_for(int64_t(p.f.B) * p.f.H * p.f.N * (D / 8), 256), 256, 0, st>>>(p, splits);
  CUDA_CHECK_LAUNCH("step13_dq_convert");
}

template <class T, int D>
void launch_typed(const BwdParams& p, bool det, bool drop, int tiles, int xp, cudaStream_t st) {
  const AttnParams& f = p.f;
  const int splits = det ? int(det_splits(int64_t(f.B) * f.Hkv, num_tiles(f.Nk, schedule_for(D, tiles).Bc))) : 1;
  // [tune] What --tiles and --experiment are not compiled for is refused before anything is launched.
  constexpr bool kTuned = std::is_same_v<T, __half> && (D == 64 || D == 128);
  const std::string why = refusal(std::is_same_v<T, __half>, D, tiles, xp, det, drop);
  if (!why.empty()) throw Unsupported(why);
  step13_bwd_pre<T, D><<<blocks_for(int64_t(f.B) * f.H * rows_padded(f.N) * (D / 8), 256), 256, 0, st>>>(p, splits);
  CUDA_CHECK_LAUNCH("step13_bwd_pre");
  if (xp != kAsBuilt) {
    if constexpr (kTuned) {
      switch (xp) {
        case kDqEnd: launch_kv<T, D, false, false, kAuto, kDqEnd>(p, 1, st); break;
        case kRed64: launch_kv<T, D, false, false, kAuto, kRed64>(p, 1, st); break;
        case kRed32: launch_kv<T, D, false, false, kAuto, kRed32>(p, 1, st); break;
      }
    }
  } else if (tiles != kAuto) {
    if constexpr (kTuned) {
      switch (tiles) {
        case k64x128: launch_kv<T, D, false, false, k64x128>(p, 1, st); break;
        case k128x128:
          if constexpr (smem_bytes(schedule_for(D, k128x128), D) <= kSmemBudget) launch_kv<T, D, false, false, k128x128>(p, 1, st);
          break;
        case k32x128: launch_kv<T, D, false, false, k32x128>(p, 1, st); break;
        case k64x64: launch_kv<T, D, false, false, k64x64>(p, 1, st); break;
      }
    }
  } else if (det) {
    drop ? launch_kv<T, D, true, true, kAuto>(p, splits, st) : launch_kv<T, D, true, false, kAuto>(p, splits, st);
  } else {
    drop ? launch_kv<T, D, false, true, kAuto>(p, 1, st) : launch_kv<T, D, false, false, kAuto>(p, 1, st);
  }
}

template <class T>
void launch_d(const BwdParams& p, bool det, bool drop, int tiles, int xp, cudaStream_t st) {
  switch (p.f.d) {
    case 16: return launch_typed<T, 16>(p, det, drop, tiles, xp, st);
    case 32: return launch_typed<T, 32>(p, det, drop, tiles, xp, st);
    case 64: return launch_typed<T, 64>(p, det, drop, tiles, xp, st);
    case 128: return launch_typed<T, 128>(p, det, drop, tiles, xp, st);
    default: throw std::invalid_argument("step13: head dimension " + std::to_string(p.f.d) + " is not compiled (16, 32, 64, 128)");
  }
}

}  // namespace

size_t backward_workspace_bytes(const Shape& s, const StepOptions& o) {
  const int64_t BH = s.B * s.H, Tc = num_tiles(s.Nk, schedule_for(int(s.d), tiles_of(o)).Bc);
  return size_t(workspace_bytes(BH, s.N, s.d, deterministic(o) ? det_splits(s.B * s.hkv(), Tc) : 1));  // [gqa] splits per key/value head
}

void launch_backward(const BwdParams& p0, const StepOptions& o, void* stream) {
  BwdParams p = p0;
  if (p.f.Hkv <= 0) p.f.Hkv = p.f.H;  // [gqa] unset: every query head its own key/value head
  if (p.f.H % p.f.Hkv != 0) throw std::invalid_argument("step13: H must be a multiple of Hkv");
  const AttnParams& f = p.f;
  auto aligned = [](const void* ptr, int64_t sb, int64_t sh, int64_t sn) {
    return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && sb % 8 == 0 && sh % 8 == 0 && sn % 8 == 0;
  };
  if (!aligned(f.q, f.q_sb, f.q_sh, f.q_sn) || !aligned(f.k, f.k_sb, f.k_sh, f.k_sn) || !aligned(f.v, f.v_sb, f.v_sh, f.v_sn) ||
      !aligned(p.dout, f.o_sb, f.o_sh, f.o_sn) || !aligned(p.dq, f.q_sb, f.q_sh, f.q_sn) ||
      !aligned(p.dk, f.k_sb, f.k_sh, f.k_sn) || !aligned(p.dv, f.v_sb, f.v_sh, f.v_sn))
    throw std::invalid_argument("step13: Q, K, V, dO and the gradients need 16-byte aligned pointers and strides that are multiples of 8");
  if (int64_t(f.B) * f.H > 65535) throw std::invalid_argument("step13: B·H must be at most 65535 (grid dimension)");
  if (p.workspace == nullptr) throw std::invalid_argument("step13: the backward needs its workspace");
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const bool det = deterministic(o), drop = f.dropout > 0.0f;
  if (f.bf16) launch_d<__nv_bfloat16>(p, det, drop, tiles_of(o), experiment_of(o), st);
  else launch_d<__half>(p, det, drop, tiles_of(o), experiment_of(o), st);
}

}  // namespace fa::step13
