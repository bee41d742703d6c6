// Step 01 — naive attention in three kernels, on tensor cores (WMMA).
//
//   step01_scores   S = scale · Q Kᵀ   (WMMA, fp32 accumulation) -> S in HBM, fp32, N × Nk per head
//   step01_softmax  P = softmax(S)     (causal mask here)        -> P in HBM, storage type; L saved
//   step01_pv       O = P V            (WMMA, fp32 accumulation) -> O in HBM, storage type
//
// What it buys: nothing yet — it is the baseline. Its lesson is the ledger: S and P cost
// 4 + 2 bytes written and ~3·4 + 2 read per (query, key) pair, and that traffic, not the
// arithmetic, sets its time. `--gemm cublas` swaps our two products for cuBLAS's to show that even
// the best matrix products leave that traffic where it is.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cmath>
#include <mutex>
#include <stdexcept>
#include <string>

#include "kernel/arch.cuh"  // bf16 WMMA fragments before sm_80: declared, and trap (the host refuses first)
#include "kernel/cuda_check.cuh"
#include "schedule.hpp"

namespace fa::step01 {

using namespace nvcuda;

constexpr int Br = kSchedule.Br;        // rows per block
constexpr int Bc = kSchedule.Bc;        // keys per tile / chunk
constexpr int kWarps = kSchedule.warps();
constexpr int kThreads = kWarps * 32;

template <class T> __device__ inline float to_f32(T x);
template <> __device__ inline float to_f32(__half x) { return __half2float(x); }
template <> __device__ inline float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T> __device__ inline T from_f32(float x);
template <> __device__ inline __half from_f32(float x) { return __float2half_rn(x); }
template <> __device__ inline __nv_bfloat16 from_f32(float x) { return __float2bfloat16_rn(x); }

// [load-tile] Rows [r0, r0 + R) of a (rows × D) matrix with row stride ld -> shared memory with row
// stride D + kPad. 16-byte loads (8 elements); rows past `rows` are zero-filled and cost no HBM bytes.
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

// [scores] Block (tj, ti, bh) computes the Br × Bc tile of S at rows ti·Br, columns tj·Bc.
// Warp w owns rows [16w, 16w + 16) of the tile and all Bc columns: Bc/16 accumulator fragments.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) step01_scores(AttnParams p, float* __restrict__ S) {
  __shared__ alignas(32) T Qs[Br][D + kPad];          // Br × d
  __shared__ alignas(32) T Ks[Bc][D + kPad];          // Bc × d
  __shared__ alignas(32) float St[kWarps][16][16];    // per-warp staging for the ragged edge
  const int bh = blockIdx.z, b = bh / p.H, h = bh % p.H;
  const int i0 = blockIdx.y * Br, j0 = blockIdx.x * Bc;
  const T* Q = static_cast<const T*>(p.q) + b * p.q_sb + h * p.q_sh;
  const T* K = static_cast<const T*>(p.k) + b * p.k_sb + h * p.k_sh;
  load_rows<T, Br, D>(&Qs[0][0], Q, p.q_sn, i0, p.N);
  load_rows<T, Bc, D>(&Ks[0][0], K, p.k_sn, j0, p.Nk);
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[Bc / 16];
#pragma unroll
  for (int n = 0; n < Bc / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
  for (int k0 = 0; k0 < D; k0 += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;   // Q[16w.., k0..]
    wmma::load_matrix_sync(a, &Qs[16 * warp][k0], D + kPad);
#pragma unroll
    for (int n = 0; n < Bc / 16; ++n) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kt;  // Kᵀ[k0.., 16n..]: K read as column-major
      wmma::load_matrix_sync(kt, &Ks[16 * n][k0], D + kPad);
      wmma::mma_sync(acc[n], a, kt, acc[n]);
    }
  }
  float* Sbh = S + int64_t(bh) * p.N * p.Nk;
#pragma unroll
  for (int n = 0; n < Bc / 16; ++n) {
#pragma unroll
    for (int t = 0; t < acc[n].num_elements; ++t) acc[n].x[t] *= p.scale;
    wmma::store_matrix_sync(&St[warp][0][0], acc[n], 16, wmma::mem_row_major);
    __syncwarp();
    // lab:begin s-to-hbm {O L}: the warp's lanes copy St[warp] to S in HBM (row stride Nk), only inside N × Nk …
    for (int e = lane; e < 256; e += 32) {  // only the part inside N × Nk reaches HBM
      const int r = e / 16, c = e % 16, i = i0 + 16 * warp + r, j = j0 + 16 * n + c;
      if (i < p.N && j < p.Nk) Sbh[int64_t(i) * p.Nk + j] = St[warp][r][c];
    }
    // lab:end
    __syncwarp();
  }
}

// Block-wide reduction: shuffles inside each warp, one partial per warp through shared memory.
template <class Op>
__device__ inline float block_reduce(float v, float* red, Op op) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float r = red[0];
#pragma unroll
  for (int w = 1; w < kSoftmaxWarps; ++w) r = op(r, red[w]);
  __syncthreads();  // red[] may be reused by the next reduction
  return r;
}

// [softmax] One block per row of S. Three passes over the visible keys: max, Σ exp, write P.
// [causal-mask] is applied here: keys past visible_keys() are never read, and get P = 0.
template <class T>
__global__ void __launch_bounds__(kSoftmaxThreads) step01_softmax(AttnParams p, const float* __restrict__ S,
                                                                  T* __restrict__ P) {
  __shared__ float red[kSoftmaxWarps];
  const int64_t row = blockIdx.x;  // over B·H·N
  const int bh = int(row / p.N), i = int(row % p.N), b = bh / p.H, h = bh % p.H;
  const float* s = S + row * p.Nk;
  T* prow = P + row * p_ld(p.Nk);
  float* lse = p.lse + b * p.lse_sb + h * p.lse_sh + i;
  const int nv = int(visible_keys(i, p.N, p.Nk, p.causal));
  if (nv == 0) {  // a row that sees no key: P = 0, L = +inf, and O will be 0
    for (int j = threadIdx.x; j < p.Nk; j += blockDim.x) prow[j] = from_f32<T>(0.0f);
    if (threadIdx.x == 0) *lse = INFINITY;
    return;
  }
  float m = -INFINITY;
  for (int j = threadIdx.x; j < nv; j += blockDim.x) m = fmaxf(m, s[j]);
  m = block_reduce(m, red, [](float x, float y) { return fmaxf(x, y); });
  float l = 0.0f;
  for (int j = threadIdx.x; j < nv; j += blockDim.x) l += expf(s[j] - m);
  l = block_reduce(l, red, [](float x, float y) { return x + y; });
  // lab:begin p-to-hbm {O}: pass 3 of [softmax]: every thread writes P = exp(S - m) / l for its keys j < nv …
  const float inv = 1.0f / l;
  for (int j = threadIdx.x; j < p.Nk; j += blockDim.x) prow[j] = from_f32<T>(j < nv ? expf(s[j] - m) * inv : 0.0f);
  // lab:end
  if (threadIdx.x == 0) *lse = m + logf(l);
}

// [pv] Block (ti, bh) owns the Br × d tile of O; it walks P and V in Bc-wide chunks. Warp w owns
// rows [16w, 16w + 16) and all d columns: d/16 accumulator fragments.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) step01_pv(AttnParams p, const T* __restrict__ P) {
  __shared__ alignas(32) T Ps[Br][Bc + kPad];         // Br × Bc
  __shared__ alignas(32) T Vs[Bc][D + kPad];          // Bc × d
  __shared__ alignas(32) float St[kWarps][16][16];
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H, i0 = blockIdx.x * Br;
  const int64_t ldp = p_ld(p.Nk);
  const T* Pbh = P + int64_t(bh) * p.N * ldp;
  const T* V = static_cast<const T*>(p.v) + b * p.v_sb + h * p.v_sh;
  T* O = static_cast<T*>(p.o) + b * p.o_sb + h * p.o_sh;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);

  for (int j0 = 0; j0 < p.Nk; j0 += Bc) {
    // The P tile: 16-byte loads where all 8 columns exist, single elements at the ragged edge.
    for (int c = threadIdx.x; c < Br * Bc / 8; c += blockDim.x) {
      const int r = c / (Bc / 8), col = (c % (Bc / 8)) * 8, i = i0 + r, j = j0 + col;
      if (i < p.N && j + 8 <= p.Nk) {
        *reinterpret_cast<uint4*>(&Ps[r][col]) = *reinterpret_cast<const uint4*>(Pbh + int64_t(i) * ldp + j);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          Ps[r][col + e] = (i < p.N && j + e < p.Nk) ? Pbh[int64_t(i) * ldp + j + e] : from_f32<T>(0.0f);
      }
    }
    load_rows<T, Bc, D>(&Vs[0][0], V, p.v_sn, j0, p.Nk);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < Bc; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;  // P[16w.., kk..]
      wmma::load_matrix_sync(a, &Ps[16 * warp][kk], Bc + kPad);
#pragma unroll
      for (int n = 0; n < D / 16; ++n) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vb;  // V[kk.., 16n..]
        wmma::load_matrix_sync(vb, &Vs[kk][16 * n], D + kPad);
        wmma::mma_sync(acc[n], a, vb, acc[n]);
      }
    }
    __syncthreads();  // the next chunk overwrites Ps and Vs
  }
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
    wmma::store_matrix_sync(&St[warp][0][0], acc[n], 16, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 256; e += 32) {
      const int r = e / 16, c = e % 16, i = i0 + 16 * warp + r;
      if (i < p.N) O[int64_t(i) * p.o_sn + 16 * n + c] = from_f32<T>(St[warp][r][c]);
    }
    __syncwarp();
  }
}

// ---- cuBLAS variant (--gemm cublas): the same two products through cublasGemmStridedBatchedEx ----
namespace {

void cublas_check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) throw CudaError(std::string(what) + " failed: cuBLAS status " + std::to_string(int(st)));
}

cublasHandle_t cublas_handle() {
  static cublasHandle_t handle = [] {
    cublasHandle_t hd = nullptr;
    cublas_check(cublasCreate(&hd), "cublasCreate");
    return hd;
  }();
  return handle;
}

// cuBLAS is column-major; a row-major X is its transpose. Per batch b, over the H heads:
//   S (N × Nk, row-major)  = scale · Q Kᵀ   <=>  Sᵀ (col-major Nk × N) = scale · K · Qᵀ
//   O (N × d, row-major)   = P V            <=>  Oᵀ (col-major d × N)  = Vᵀ · Pᵀ
void cublas_scores(const AttnParams& p, float* S, cudaStream_t st) {
  cublasHandle_t hd = cublas_handle();
  cublas_check(cublasSetStream(hd, st), "cublasSetStream");
  const cudaDataType_t t = p.bf16 ? CUDA_R_16BF : CUDA_R_16F;
  const float alpha = p.scale, beta = 0.0f;
  for (int b = 0; b < p.B; ++b) {
    const char* K = static_cast<const char*>(p.k) + b * p.k_sb * 2;
    const char* Q = static_cast<const char*>(p.q) + b * p.q_sb * 2;
    float* Sb = S + int64_t(b) * p.H * p.N * p.Nk;
    cublas_check(cublasGemmStridedBatchedEx(hd, CUBLAS_OP_T, CUBLAS_OP_N, p.Nk, p.N, p.d, &alpha, K, t, p.k_sn, p.k_sh,
                                            Q, t, p.q_sn, p.q_sh, &beta, Sb, CUDA_R_32F, p.Nk, int64_t(p.N) * p.Nk,
                                            p.H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx (S = Q Kᵀ)");
  }
}

void cublas_pv(const AttnParams& p, const void* P, cudaStream_t st) {
  cublasHandle_t hd = cublas_handle();
  cublas_check(cublasSetStream(hd, st), "cublasSetStream");
  const cudaDataType_t t = p.bf16 ? CUDA_R_16BF : CUDA_R_16F;
  const float alpha = 1.0f, beta = 0.0f;
  const int64_t ldp = p_ld(p.Nk);
  for (int b = 0; b < p.B; ++b) {
    const char* V = static_cast<const char*>(p.v) + b * p.v_sb * 2;
    const char* Pb = static_cast<const char*>(P) + int64_t(b) * p.H * p.N * ldp * 2;
    char* O = static_cast<char*>(p.o) + b * p.o_sb * 2;
    cublas_check(cublasGemmStridedBatchedEx(hd, CUBLAS_OP_N, CUBLAS_OP_N, p.d, p.N, p.Nk, &alpha, V, t, p.v_sn, p.v_sh,
                                            Pb, t, ldp, int64_t(p.N) * ldp, &beta, O, t, p.o_sn, p.o_sh, p.H,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx (O = P V)");
  }
}

template <class T, int D>
void launch_typed(const AttnParams& p, bool use_cublas, cudaStream_t st) {
  float* S = static_cast<float*>(p.workspace);
  Shape shape;  // the sizes that place P after S in the workspace
  shape.B = p.B, shape.H = p.H, shape.N = p.N, shape.Nk = p.Nk, shape.d = p.d;
  T* P = reinterpret_cast<T*>(static_cast<char*>(p.workspace) + s_bytes_aligned(shape));
  const int BH = p.B * p.H;
  if (use_cublas) {
    cublas_scores(p, S, st);
  } else {
    step01_scores<T, D><<<dim3(unsigned(num_tiles(p.Nk, Bc)), unsigned(num_tiles(p.N, Br)), unsigned(BH)), kThreads, 0, st>>>(p, S);
    CUDA_CHECK_LAUNCH("step01_scores");
  }
  step01_softmax<T><<<unsigned(int64_t(BH) * p.N), kSoftmaxThreads, 0, st>>>(p, S, P);
  CUDA_CHECK_LAUNCH("step01_softmax");
  if (use_cublas) {
    cublas_pv(p, P, st);
  } else {
    step01_pv<T, D><<<dim3(unsigned(num_tiles(p.N, Br)), unsigned(BH)), kThreads, 0, st>>>(p, P);
    CUDA_CHECK_LAUNCH("step01_pv");
  }
}

template <class T>
void launch_d(const AttnParams& p, bool use_cublas, cudaStream_t st) {
  switch (p.d) {
    case 16: return launch_typed<T, 16>(p, use_cublas, st);
    case 32: return launch_typed<T, 32>(p, use_cublas, st);
    case 64: return launch_typed<T, 64>(p, use_cublas, st);
    case 128: return launch_typed<T, 128>(p, use_cublas, st);
    default: throw std::invalid_argument("step01: head dimension " + std::to_string(p.d) + " is not compiled (16, 32, 64, 128)");
  }
}

}  // namespace

size_t workspace_bytes(const Shape& s, const StepOptions&) { return size_t(s_bytes_aligned(s) + p_bytes(s)); }

void launch(const AttnParams& p, const StepOptions& opts, void* stream) {
  // 16-byte vector loads need 16-byte aligned rows: pointers and strides in multiples of 8 elements.
  auto aligned = [](const void* ptr, int64_t sb, int64_t sh, int64_t sn) {
    return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && sb % 8 == 0 && sh % 8 == 0 && sn % 8 == 0;
  };
  if (!aligned(p.q, p.q_sb, p.q_sh, p.q_sn) || !aligned(p.k, p.k_sb, p.k_sh, p.k_sn) ||
      !aligned(p.v, p.v_sb, p.v_sh, p.v_sn) || !aligned(p.o, p.o_sb, p.o_sh, p.o_sn))
    throw std::invalid_argument("step01: Q, K, V, O need 16-byte aligned pointers and strides that are multiples of 8");
  if (int64_t(p.B) * p.H > 65535) throw std::invalid_argument("step01: B·H must be at most 65535 (grid dimension)");
  const auto it = opts.find("gemm");
  const bool use_cublas = it != opts.end() && it->second == "cublas";
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (p.bf16) launch_d<__nv_bfloat16>(p, use_cublas, st);
  else launch_d<__half>(p, use_cublas, st);
}

}  // namespace fa::step01
