// Step 04 — FlashAttention-2's loop order on tensor cores: Q tiles outer, K/V tiles inner.
//
//   step04_q_outer   a block owns a Q tile: load Q_i once, O_i = 0, m_i = -inf, l_i = 0 in shared
//                    memory; for each K/V tile j: load K_j, V_j and run step 03's tile update
//                    unchanged; write O_i and L_i once.
//
// What it buys against step 03: Q is read once and O_i, m_i, l_i never touch HBM — the Tc-fold
// traffic is gone; K and V are now re-read once per Q tile instead. With --grid qtile the grid has
// a block per (batch, head, Q tile), enough to fill the GPU; --grid bh keeps step 03's B·H blocks.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <stdexcept>
#include <string>

#include "kernel/arch.cuh"  // bf16 WMMA fragments before sm_80: declared, and trap (the host refuses first)
#include "kernel/cuda_check.cuh"
#include "schedule.hpp"

namespace fa::step04 {

using namespace nvcuda;

constexpr int Br = kSchedule.Br;
constexpr int Bc = kSchedule.Bc;
constexpr int W = kSchedule.warps();
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
  alignas(32) float Os[Br][D + kPadO];   // Br × d, fp32
  float mi[Br], li[Br], mnew[Br], lnew[Br], cold[Br];
  float redm[W][Br], redl[W][Br];        // per-warp partial maxima and sums
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

// [tile-update] One (Q tile, K/V tile) pair; Q_i, O_i, m_i, l_i are in shared memory on entry and exit.
template <class T, int D>
__device__ inline void tile_update(Shared<T, D>& sm, const AttnParams& p, int i0, int j0) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, tid = threadIdx.x;
  T* Ps = reinterpret_cast<T*>(&sm.Ss[0][0]);
  // S_ij = scale · Q_i K_jᵀ: warp w computes the Br × 16 slice for keys [16w, 16w + 16).
#pragma unroll
  for (int rf = 0; rf < Br / 16; ++rf) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kk = 0; kk < D; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kt;
      wmma::load_matrix_sync(a, &sm.Qs[16 * rf][kk], D + kPad);
      wmma::load_matrix_sync(kt, &sm.Ks[16 * warp][kk], D + kPad);
      wmma::mma_sync(acc, a, kt, acc);
    }
#pragma unroll
    for (int t = 0; t < acc.num_elements; ++t) acc.x[t] *= p.scale;
    wmma::store_matrix_sync(&sm.Ss[16 * rf][16 * warp], acc, Bc + kPadS, wmma::mem_row_major);
  }
  __syncwarp();
  // Pass 1 (lane r: row r, this warp's 16 keys): [causal-mask], partial row maximum.
  if (lane < Br) {
    const int nv = int(visible_keys(i0 + lane, p.N, p.Nk, p.causal));
    float m = -INFINITY;
#pragma unroll
    for (int c = 16 * warp; c < 16 * warp + 16; ++c) {
      float x = sm.Ss[lane][c];
      if (j0 + c >= nv) x = -INFINITY;
      sm.Ss[lane][c] = x;
      m = fmaxf(m, x);
    }
    sm.redm[warp][lane] = m;
  }
  __syncthreads();
  // Row statistics 1: m_new = max(m_i, partial maxima); alpha = exp(m_i - m_new).
  if (tid < Br) {
    const float m_old = sm.mi[tid];
    float m = m_old;
#pragma unroll
    for (int w = 0; w < W; ++w) m = fmaxf(m, sm.redm[w][tid]);
    sm.mnew[tid] = m;
    sm.cold[tid] = rescale_factor(m_old, m);
  }
  __syncthreads();
  // Pass 2: this warp's S values into registers; barrier; P = exp(S - m_new) over S's rows.
  float sreg[16], mrow = 0.0f;
  if (lane < Br) {
#pragma unroll
    for (int c = 0; c < 16; ++c) sreg[c] = sm.Ss[lane][16 * warp + c];
    mrow = sm.mnew[lane];
  }
  __syncthreads();
  if (lane < Br) {
    float l = 0.0f;
#pragma unroll
    for (int c = 0; c < 16; ++c) {
      const float pv = mrow == -INFINITY ? 0.0f : expf(sreg[c] - mrow);
      Ps[lane * kLdP + 16 * warp + c] = from_f32<T>(pv);
      l += pv;
    }
    sm.redl[warp][lane] = l;
  }
  __syncthreads();
  // Row statistics 2: l_new = alpha·l_i + partial sums; the old (normalized) O_i is scaled by alpha·l_i.
  if (tid < Br) {
    const float alpha = sm.cold[tid], li = sm.li[tid];
    float l = alpha * li;
#pragma unroll
    for (int w = 0; w < W; ++w) l += sm.redl[w][tid];
    sm.lnew[tid] = l;
    sm.cold[tid] = alpha * li;
  }
  __syncthreads();
  // [rescale-o] O_i *= alpha·l_i.
  for (int e = tid; e < Br * D; e += kThreads) sm.Os[e / D][e % D] *= sm.cold[e / D];
  __syncthreads();
  // [merge-rounds] Split-K: warp w adds P[:, its keys] · V[its keys, :] onto O_i, one warp at a time.
#pragma unroll 1
  for (int w = 0; w < W; ++w) {
    if (warp == w) {
#pragma unroll
      for (int rf = 0; rf < Br / 16; ++rf) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::load_matrix_sync(a, Ps + 16 * rf * kLdP + 16 * w, kLdP);
#pragma unroll
        for (int n = 0; n < D / 16; ++n) {
          wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vb;
          wmma::load_matrix_sync(acc, &sm.Os[16 * rf][16 * n], D + kPadO, wmma::mem_row_major);
          wmma::load_matrix_sync(vb, &sm.Vs[16 * w][16 * n], D + kPad);
          wmma::mma_sync(acc, a, vb, acc);
          wmma::store_matrix_sync(&sm.Os[16 * rf][16 * n], acc, D + kPadO, wmma::mem_row_major);
        }
      }
    }
    __syncthreads();
  }
  // [normalize] Per-iteration normalization: O_i /= l_new; m_i, l_i advance.
  for (int e = tid; e < Br * D; e += kThreads) {
    const float l = sm.lnew[e / D], o = sm.Os[e / D][e % D];
    sm.Os[e / D][e % D] = l > 0.0f ? o / l : 0.0f;
  }
  if (tid < Br) {
    sm.mi[tid] = sm.mnew[tid];
    sm.li[tid] = sm.lnew[tid];
  }
  __syncthreads();
}

// [q-outer] Block (x, bh) walks Q tiles x, x + gridDim.x, ...: one tile with --grid qtile
// (gridDim.x = Tr), all of them with --grid bh (gridDim.x = 1). O_i, m_i, l_i stay in shared memory.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) step04_q_outer(AttnParams p) {
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
      // lab:begin kv-per-q-tile {O L}: [q-outer]: load K_j, V_j into sm.Ks, sm.Vs (load_rows), once per Q tile …
      load_rows<T, Bc, D>(&sm.Ks[0][0], K, p.k_sn, j0, p.Nk);  // K_j, V_j, once per Q tile
      load_rows<T, Bc, D>(&sm.Vs[0][0], V, p.v_sn, j0, p.Nk);
      // lab:end
      __syncthreads();
      tile_update<T, D>(sm, p, i0, j0);  // ends with a barrier: K_j, V_j may be overwritten
    }
    // lab:begin write-once {O L}: [q-outer]: after the K/V loop, write O_i and L = m + log l, once …
    for (int e = tid; e < rows * D; e += kThreads)  // O in the storage type and L = m + log(l), once
      O[int64_t(i0 + e / D) * p.o_sn + e % D] = from_f32<T>(sm.Os[e / D][e % D]);
    if (tid < rows) {
      const float m = sm.mi[tid], l = sm.li[tid];
      Lse[i0 + tid] = l > 0.0f ? m + logf(l) : INFINITY;
    }
    // lab:end
    __syncthreads();
  }
}

namespace {

template <class T, int D>
void launch_typed(const AttnParams& p, bool per_qtile, cudaStream_t st) {
  const dim3 grid(per_qtile ? unsigned(num_tiles(p.N, Br)) : 1u, unsigned(p.B * p.H));
  step04_q_outer<T, D><<<grid, kThreads, 0, st>>>(p);
  CUDA_CHECK_LAUNCH("step04_q_outer");
}

template <class T>
void launch_d(const AttnParams& p, bool per_qtile, cudaStream_t st) {
  switch (p.d) {
    case 16: return launch_typed<T, 16>(p, per_qtile, st);
    case 32: return launch_typed<T, 32>(p, per_qtile, st);
    case 64: return launch_typed<T, 64>(p, per_qtile, st);
    case 128: return launch_typed<T, 128>(p, per_qtile, st);
    default: throw std::invalid_argument("step04: head dimension " + std::to_string(p.d) + " is not compiled (16, 32, 64, 128)");
  }
}

}  // namespace

size_t workspace_bytes(const Shape&, const StepOptions&) { return 0; }

void launch(const AttnParams& p, const StepOptions& opts, void* stream) {
  auto aligned = [](const void* ptr, int64_t sb, int64_t sh, int64_t sn) {
    return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && sb % 8 == 0 && sh % 8 == 0 && sn % 8 == 0;
  };
  if (!aligned(p.q, p.q_sb, p.q_sh, p.q_sn) || !aligned(p.k, p.k_sb, p.k_sh, p.k_sn) ||
      !aligned(p.v, p.v_sb, p.v_sh, p.v_sn))
    throw std::invalid_argument("step04: Q, K, V need 16-byte aligned pointers and strides that are multiples of 8");
  if (int64_t(p.B) * p.H > 65535) throw std::invalid_argument("step04: B·H must be at most 65535 (grid dimension)");
  const auto it = opts.find("grid");
  const bool per_qtile = it == opts.end() || it->second == "qtile";
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (p.bf16) launch_d<__nv_bfloat16>(p, per_qtile, st);
  else launch_d<__half>(p, per_qtile, st);
}

}  // namespace fa::step04
