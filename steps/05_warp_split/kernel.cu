// Step 05 — warp splitting: split-Q against split-K, on step 04's Q-outer loop.
//
//   step05_warp_split<SplitQ>   a block owns a Q tile, walks the K/V tiles, keeps O_i, m_i, l_i in
//                               shared memory (step 04). SplitQ = false: step 04's tile update, the
//                               warps splitting the keys. SplitQ = true: tile_update_split_q, each
//                               warp owning 16 rows and all keys.
//
// What it buys: with split-Q a warp finishes its rows' softmax with two shuffles and owns its rows
// of O, so the merge rounds and all but one of the update's barriers disappear: 10 -> 2 per tile
// pair at Bc = 32, counting the one after the K_j, V_j loads. The warps no longer wait for each
// other inside a tile.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <stdexcept>
#include <string>

#include "kernel/arch.cuh"  // bf16 WMMA fragments before sm_80: declared, and trap (the host refuses first)
#include "kernel/cuda_check.cuh"
#include "schedule.hpp"

namespace fa::step05 {

using namespace nvcuda;

constexpr int Br = kSchedule.Br;
constexpr int Bc = kSchedule.Bc;
constexpr int W = kSchedule.warps();           // split-K: warps per block (one per 16 keys)
constexpr int WQ = kSchedule.warps_q();        // split-Q: warps per block (one per 16 rows)
template <bool SplitQ> constexpr int kThreads = (SplitQ ? WQ : W) * 32;
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
  for (int e = tid; e < Br * D; e += kThreads<false>) sm.Os[e / D][e % D] *= sm.cold[e / D];
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
  for (int e = tid; e < Br * D; e += kThreads<false>) {
    const float l = sm.lnew[e / D], o = sm.Os[e / D][e % D];
    sm.Os[e / D][e % D] = l > 0.0f ? o / l : 0.0f;
  }
  if (tid < Br) {
    sm.mi[tid] = sm.mnew[tid];
    sm.li[tid] = sm.lnew[tid];
  }
  __syncthreads();
}

// [split-q] The same pair, split by rows: warp w owns rows [16w, 16w + 16) and all Bc keys. Two
// lanes share a row (Bc/2 keys each) and combine its maximum and sum with one shuffle each; the
// warp rescales, accumulates and normalizes its own rows of O. __syncwarp inside, one barrier at
// the end (K_j and V_j are about to be overwritten).
template <class T, int D>
__device__ inline void tile_update_split_q(Shared<T, D>& sm, const AttnParams& p, int i0, int j0) {
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
  // lab:begin pair-stats: [split-q]: one shuffle adds the partner lane's partial sum; the even lane writes …
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  if (lane % 2 == 0) {
    const float alpha = rescale_factor(m_old, m_new);
    sm.cold[r] = alpha * l_old;
    sm.lnew[r] = alpha * l_old + l;
    sm.mi[r] = m_new;
    sm.li[r] = alpha * l_old + l;
  }
  // lab:end
  __syncwarp();
  // [rescale-o] the warp's rows of O *= alpha·l_i.
  for (int e = lane; e < 16 * D; e += 32) sm.Os[r0 + e / D][e % D] *= sm.cold[r0 + e / D];
  __syncwarp();
  // O[rows] += P[rows, :] · V_j: the P fragments once, then each output fragment in turn.
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
  __syncwarp();
  // [normalize] O[rows] /= l_new.
  for (int e = lane; e < 16 * D; e += 32) {
    const float ln = sm.lnew[r0 + e / D], o = sm.Os[r0 + e / D][e % D];
    sm.Os[r0 + e / D][e % D] = ln > 0.0f ? o / ln : 0.0f;
  }
  __syncthreads();
}

// [q-outer] Block (x, bh) owns Q tile x (step 04's loop, --grid qtile). O_i, m_i, l_i stay in shared
// memory; SplitQ picks the tile update.
template <class T, int D, bool SplitQ>
__global__ void __launch_bounds__(kThreads<SplitQ>) step05_warp_split(AttnParams p) {
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
    for (int e = tid; e < Br * D; e += kThreads<SplitQ>) sm.Os[e / D][e % D] = 0.0f;
    if (tid < Br) { sm.mi[tid] = -INFINITY; sm.li[tid] = 0.0f; }
    for (int j = 0; j < Tc; ++j) {
      const int j0 = j * Bc;
      load_rows<T, Bc, D>(&sm.Ks[0][0], K, p.k_sn, j0, p.Nk);  // K_j, V_j, once per Q tile
      load_rows<T, Bc, D>(&sm.Vs[0][0], V, p.v_sn, j0, p.Nk);
      __syncthreads();
      if constexpr (SplitQ) tile_update_split_q<T, D>(sm, p, i0, j0);  // both end with a barrier:
      else tile_update<T, D>(sm, p, i0, j0);                            // K_j, V_j may be overwritten
    }
    for (int e = tid; e < rows * D; e += kThreads<SplitQ>)  // O in the storage type and L = m + log(l), once
      O[int64_t(i0 + e / D) * p.o_sn + e % D] = from_f32<T>(sm.Os[e / D][e % D]);
    if (tid < rows) {
      const float m = sm.mi[tid], l = sm.li[tid];
      Lse[i0 + tid] = l > 0.0f ? m + logf(l) : INFINITY;
    }
    __syncthreads();
  }
}

namespace {

template <class T, int D>
void launch_typed(const AttnParams& p, bool split_q, cudaStream_t st) {
  const dim3 grid(unsigned(num_tiles(p.N, Br)), unsigned(p.B * p.H));
  if (split_q) step05_warp_split<T, D, true><<<grid, kThreads<true>, 0, st>>>(p);
  else step05_warp_split<T, D, false><<<grid, kThreads<false>, 0, st>>>(p);
  CUDA_CHECK_LAUNCH("step05_warp_split");
}

template <class T>
void launch_d(const AttnParams& p, bool split_q, cudaStream_t st) {
  switch (p.d) {
    case 16: return launch_typed<T, 16>(p, split_q, st);
    case 32: return launch_typed<T, 32>(p, split_q, st);
    case 64: return launch_typed<T, 64>(p, split_q, st);
    case 128: return launch_typed<T, 128>(p, split_q, st);
    default: throw std::invalid_argument("step05: head dimension " + std::to_string(p.d) + " is not compiled (16, 32, 64, 128)");
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
    throw std::invalid_argument("step05: Q, K, V need 16-byte aligned pointers and strides that are multiples of 8");
  if (int64_t(p.B) * p.H > 65535) throw std::invalid_argument("step05: B·H must be at most 65535 (grid dimension)");
  const auto it = opts.find("split");
  const bool split_q = it == opts.end() || it->second == "q";
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (p.bf16) launch_d<__nv_bfloat16>(p, split_q, st);
  else launch_d<__half>(p, split_q, st);
}

}  // namespace fa::step05
