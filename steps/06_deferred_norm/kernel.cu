// Step 06 — deferred normalization, on step 05's split-Q kernel.
//
//   step06_deferred   a block owns a Q tile and walks the K/V tiles (step 04's loop); each warp owns
//                     16 rows (step 05's split-Q). Per tile pair Õ is multiplied by
//                     alpha = exp(m_old - m_new) and accumulates P·V; it is divided by l once, when
//                     O is written.
//
// What it buys: the per-tile pass that multiplied O back by l_i and divided it by l_new is gone —
// Br·d multiplications and divisions and a read-modify-write of the O tile per K/V tile, replaced
// by one division per output element at the end. The result is the same (docs/06 proves it).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <stdexcept>
#include <string>

#include "kernel/arch.cuh"  // bf16 WMMA fragments before sm_80: declared, and trap (the host refuses first)
#include "kernel/cuda_check.cuh"
#include "schedule.hpp"

namespace fa::step06 {

using namespace nvcuda;

constexpr int Br = kSchedule.Br;
constexpr int Bc = kSchedule.Bc;
constexpr int W = kSchedule.warps();  // one warp per 16 rows of the Q tile
constexpr int kThreads = W * 32;
constexpr int kLdP = 2 * (Bc + kPadS);  // P's row stride in 16-bit elements (P is written over S's rows)

template <class T> __device__ inline float to_f32(T x);
template <> __device__ inline float to_f32(__half x) { return __half2float(x); }
template <> __device__ inline float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T> __device__ inline T from_f32(float x);
template <> __device__ inline __half from_f32(float x) { return __float2half_rn(x); }
template <> __device__ inline __nv_bfloat16 from_f32(float x) { return __float2bfloat16_rn(x); }

// [rescale-guard] exp(m_old - m_new), 0 when nothing has been seen (both -inf).
__device__ inline float rescale_factor(float m_old, float m_new) { return m_old == -INFINITY ? 0.0f : expf(m_old - m_new); }

// The block's shared memory (smem_bytes() in schedule.hpp counts the same bytes).
template <class T, int D>
struct Shared {
  alignas(32) T Qs[Br][D + kPad];        // Br × d
  alignas(32) T Ks[Bc][D + kPad];        // Bc × d
  alignas(32) T Vs[Bc][D + kPad];        // Bc × d
  alignas(32) float Ss[Br][Bc + kPadS];  // Br × Bc, fp32; P (storage type) is written over its rows
  alignas(32) float Os[Br][D + kPadO];   // Br × d, fp32: the unnormalized Õ
  float mi[Br], li[Br], alpha[Br];       // running max, running sum, this tile's rescale factor exp(m_old − m_new)
};

// [load-tile] Rows [r0, r0 + R) of a (rows × D) matrix -> shared memory (16-byte loads, zero-fill).
template <class T, int R, int D>
__device__ inline void load_rows(T* __restrict__ sm, const T* __restrict__ g, int64_t ld, int r0, int rows) {
  constexpr int kVecPerRow = D / 8;
  for (int c = threadIdx.x; c < R * kVecPerRow; c += blockDim.x) {
    const int r = c / kVecPerRow, col = (c % kVecPerRow) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r0 + r < rows) v = *reinterpret_cast<const uint4*>(g + int64_t(r0 + r) * ld + col);
    *reinterpret_cast<uint4*>(sm + r * (D + kPad) + col) = v;
  }
}

// [tile-update] One (Q tile, K/V tile) pair, split by rows (step 05): warp w owns rows
// [16w, 16w + 16) and all Bc keys; two lanes share a row. Õ is rescaled by alpha and accumulates
// P·V — it is not divided by l here. __syncwarp inside, one barrier at the end.
template <class T, int D>
__device__ inline void tile_update(Shared<T, D>& sm, const AttnParams& p, int i0, int j0) {
  constexpr int kHalf = Bc / 2;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = 16 * warp;
  T* Ps = reinterpret_cast<T*>(&sm.Ss[0][0]);
  // S for the warp's 16 rows: Bc/16 fragments.
#pragma unroll
  for (int n = 0; n < Bc / 16; ++n) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kk = 0; kk < D; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kt;
      wmma::load_matrix_sync(a, &sm.Qs[r0][kk], D + kPad);
      wmma::load_matrix_sync(kt, &sm.Ks[16 * n][kk], D + kPad);
      wmma::mma_sync(acc, a, kt, acc);
    }
#pragma unroll
    for (int t = 0; t < acc.num_elements; ++t) acc.x[t] *= p.scale;
    wmma::store_matrix_sync(&sm.Ss[r0][16 * n], acc, Bc + kPadS, wmma::mem_row_major);
  }
  __syncwarp();
  // The row pass: lane t holds row r0 + t/2, keys [(t%2)·Bc/2, (t%2 + 1)·Bc/2). [causal-mask]
  const int r = r0 + lane / 2, c0 = (lane % 2) * kHalf;
  const int nv = int(visible_keys(i0 + r, p.N, p.Nk, p.causal));
  float x[kHalf], m = -INFINITY;
#pragma unroll
  for (int c = 0; c < kHalf; ++c) {
    x[c] = sm.Ss[r][c0 + c];
    if (j0 + c0 + c >= nv) x[c] = -INFINITY;
    m = fmaxf(m, x[c]);
  }
  const float m_old = sm.mi[r], l_old = sm.li[r];
  const float m_new = fmaxf(m_old, fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1)));
  __syncwarp();  // every lane has its S values: P may now overwrite S's rows
  float l = 0.0f;
#pragma unroll
  for (int c = 0; c < kHalf; ++c) {
    const float pv = m_new == -INFINITY ? 0.0f : expf(x[c] - m_new);
    Ps[r * kLdP + c0 + c] = from_f32<T>(pv);
    l += pv;
  }
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  if (lane % 2 == 0) {
    // lab:begin deferred-stats {O L}: [deferred]: alpha = rescale_factor(m_i, m_new) kept for Õ; m_i, l_i updated …
    const float alpha = rescale_factor(m_old, m_new);
    sm.alpha[r] = alpha;  // [deferred] Õ moves to the new maximum; no l in it
    sm.mi[r] = m_new;
    sm.li[r] = alpha * l_old + l;
    // lab:end
  }
  __syncwarp();
  // [rescale-o] the warp's rows of Õ *= alpha.
  for (int e = lane; e < 16 * D; e += 32) sm.Os[r0 + e / D][e % D] *= sm.alpha[r0 + e / D];
  __syncwarp();
  // Õ[rows] += P[rows, :] · V_j: the P fragments once, then each output fragment in turn.
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a[Bc / 16];
#pragma unroll
  for (int kk = 0; kk < Bc / 16; ++kk) wmma::load_matrix_sync(a[kk], Ps + r0 * kLdP + 16 * kk, kLdP);
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, &sm.Os[r0][16 * n], D + kPadO, wmma::mem_row_major);
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vb;
      wmma::load_matrix_sync(vb, &sm.Vs[16 * kk][16 * n], D + kPad);
      wmma::mma_sync(acc, a[kk], vb, acc);
    }
    wmma::store_matrix_sync(&sm.Os[r0][16 * n], acc, D + kPadO, wmma::mem_row_major);
  }
  __syncthreads();
}

// [q-outer] Block (x, bh) owns Q tile x (step 04's loop). Õ_i, m_i, l_i stay in shared memory.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) step06_deferred(AttnParams p) {
  __shared__ Shared<T, D> sm;
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H, tid = threadIdx.x;
  const T* Q = static_cast<const T*>(p.q) + b * p.q_sb + h * p.q_sh;
  const T* K = static_cast<const T*>(p.k) + b * p.k_sb + h * p.k_sh;
  const T* V = static_cast<const T*>(p.v) + b * p.v_sb + h * p.v_sh;
  T* O = static_cast<T*>(p.o) + b * p.o_sb + h * p.o_sh;
  float* Lse = p.lse + b * p.lse_sb + h * p.lse_sh;
  const int Tc = int(num_tiles(p.Nk, Bc)), Tr = int(num_tiles(p.N, Br));

  for (int i = blockIdx.x; i < Tr; i += gridDim.x) {
    const int i0 = i * Br, rows = min(Br, p.N - i0);
    load_rows<T, Br, D>(&sm.Qs[0][0], Q, p.q_sn, i0, p.N);  // Q_i, once
    for (int e = tid; e < Br * D; e += kThreads) sm.Os[e / D][e % D] = 0.0f;
    if (tid < Br) { sm.mi[tid] = -INFINITY; sm.li[tid] = 0.0f; }
    for (int j = 0; j < Tc; ++j) {
      const int j0 = j * Bc;
      load_rows<T, Bc, D>(&sm.Ks[0][0], K, p.k_sn, j0, p.Nk);  // K_j, V_j, once per Q tile
      load_rows<T, Bc, D>(&sm.Vs[0][0], V, p.v_sn, j0, p.Nk);
      __syncthreads();
      tile_update<T, D>(sm, p, i0, j0);  // ends with a barrier: K_j, V_j may be overwritten
    }
    // [final-divide] O = Õ / l in the storage type, and L = m + log(l): the one normalization.
    // lab:begin final-divide {O}: [final-divide]: O = Õ / l_i (0 where l = 0) for the tile's rows, written once …
    for (int e = tid; e < rows * D; e += kThreads) {
      const float l = sm.li[e / D], o = sm.Os[e / D][e % D];
      O[int64_t(i0 + e / D) * p.o_sn + e % D] = from_f32<T>(l > 0.0f ? o / l : 0.0f);
    }
    // lab:end
    if (tid < rows) {
      const float m = sm.mi[tid], l = sm.li[tid];
      Lse[i0 + tid] = l > 0.0f ? m + logf(l) : INFINITY;
    }
    __syncthreads();
  }
}

namespace {

template <class T, int D>
void launch_typed(const AttnParams& p, cudaStream_t st) {
  const dim3 grid(unsigned(num_tiles(p.N, Br)), unsigned(p.B * p.H));
  step06_deferred<T, D><<<grid, kThreads, 0, st>>>(p);
  CUDA_CHECK_LAUNCH("step06_deferred");
}

template <class T>
void launch_d(const AttnParams& p, cudaStream_t st) {
  switch (p.d) {
    case 16: return launch_typed<T, 16>(p, st);
    case 32: return launch_typed<T, 32>(p, st);
    case 64: return launch_typed<T, 64>(p, st);
    case 128: return launch_typed<T, 128>(p, st);
    default: throw std::invalid_argument("step06: head dimension " + std::to_string(p.d) + " is not compiled (16, 32, 64, 128)");
  }
}

}  // namespace

size_t workspace_bytes(const Shape&, const StepOptions&) { return 0; }

void launch(const AttnParams& p, const StepOptions&, void* stream) {
  auto aligned = [](const void* ptr, int64_t sb, int64_t sh, int64_t sn) {
    return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && sb % 8 == 0 && sh % 8 == 0 && sn % 8 == 0;
  };
  if (!aligned(p.q, p.q_sb, p.q_sh, p.q_sn) || !aligned(p.k, p.k_sb, p.k_sh, p.k_sn) ||
      !aligned(p.v, p.v_sb, p.v_sh, p.v_sn))
    throw std::invalid_argument("step06: Q, K, V need 16-byte aligned pointers and strides that are multiples of 8");
  if (int64_t(p.B) * p.H > 65535) throw std::invalid_argument("step06: B·H must be at most 65535 (grid dimension)");
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (p.bf16) launch_d<__nv_bfloat16>(p, st);
  else launch_d<__half>(p, st);
}

}  // namespace fa::step06
