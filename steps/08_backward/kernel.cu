// Step 08 — the backward pass (the forward is step 07's kernel).
//
// --bwd fused (FlashAttention-2's schedule), three kernels:
//   step08_bwd_pre      D_i = Σ_c dO_ic·O_ic for every row; zeroes the fp32 dQ accumulator
//   step08_bwd_kv       a block per (K/V tile j, head): K_j, V_j stay in shared memory, dK_j and dV_j
//                       in registers; the block walks the Q tiles that see tile j, recomputes
//                       P = exp(scale·S − L) from the saved L, and adds its share of dQ_i with atomics
//   step08_dq_convert   dQ = scale · accumulator, in the storage type
// --bwd naive (the standard algorithm), six kernels; P, dP and dS are N × Nk matrices in HBM:
//   step08_naive_p  P = exp(scale·QKᵀ − L)      step08_naive_dp  dP = dO Vᵀ (fp32)
//   step08_naive_ds dS = P ∘ (dP − rowsum(P ∘ dP))
//   step08_naive_dv dV = Pᵀ dO     step08_naive_dq  dQ = scale·dS K     step08_naive_dk  dK = scale·dSᵀ Q
// --bwd stored [stored]: the forward has written P (launch_save runs step08_naive_p into
// BwdParams::saved, charged to the forward); the backward is naive's last five kernels, reading it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <stdexcept>
#include <string>

#include "kernel/arch.cuh"  // bf16 WMMA fragments before sm_80: declared, and trap (the host refuses first)
#include "kernel/cuda_check.cuh"
#include "schedule.hpp"

namespace fa::step08 {

using namespace nvcuda;

constexpr int Br = kSchedule.Br;
constexpr int Bc = kSchedule.Bc;
constexpr int W = kSchedule.W;
constexpr int kThreads = W * 32;

template <class T> __device__ inline float to_f32(T x);
template <> __device__ inline float to_f32(__half x) { return __half2float(x); }
template <> __device__ inline float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T> __device__ inline T from_f32(float x);
template <> __device__ inline __half from_f32(float x) { return __float2half_rn(x); }
template <> __device__ inline __nv_bfloat16 from_f32(float x) { return __float2bfloat16_rn(x); }

// Pointers to head (b, h) of a [B, H, rows, d] tensor with strides (sb, sh).
template <class T>
__device__ inline T* head_ptr(T* base, int b, int h, int64_t sb, int64_t sh) { return base + b * sb + h * sh; }

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

// ================================ fused ==========================================================

// [pre] One warp per row: D_i = Σ_c dO_ic·O_ic (fp32), and the row of the dQ accumulator set to 0.
template <class T, int D>
__global__ void step08_bwd_pre(BwdParams p) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;  // over B·H·N
  const int lane = threadIdx.x % 32;
  if (row >= int64_t(p.f.B) * p.f.H * p.f.N) return;
  const int bh = int(row / p.f.N), i = int(row % p.f.N), b = bh / p.f.H, h = bh % p.f.H;
  const T* O = head_ptr(static_cast<const T*>(p.f.o), b, h, p.f.o_sb, p.f.o_sh) + int64_t(i) * p.f.o_sn;
  const T* dO = head_ptr(static_cast<const T*>(p.dout), b, h, p.f.o_sb, p.f.o_sh) + int64_t(i) * p.f.o_sn;
  float* Dw = static_cast<float*>(p.workspace);
  float* dQacc = Dw + int64_t(p.f.B) * p.f.H * p.f.N;
  float s = 0.0f;
  for (int c = lane; c < D; c += 32) {
    s += to_f32(dO[c]) * to_f32(O[c]);
    dQacc[row * D + c] = 0.0f;
  }
  for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (lane == 0) Dw[row] = s;
}

// The fused block's shared memory (smem_bytes() in schedule.hpp counts the same bytes).
template <class T, int D>
struct Shared {
  alignas(32) T Ks[Bc][D + kPad];          // K_j and V_j: loaded once, used for every Q tile
  alignas(32) T Vs[Bc][D + kPad];
  alignas(32) T Qs[Br][D + kPad];          // Q_i and dO_i: one Q tile at a time
  alignas(32) T dOs[Br][D + kPad];
  alignas(32) float Ss[Br][Bc + kPadF];    // S = Q_i K_jᵀ (fp32)
  alignas(32) float dPs[Br][Bc + kPadF];   // dP = dO_i V_jᵀ (fp32)
  alignas(32) T Ps[Br][Bc + kPad];         // P and dS in the storage type: operands of the next products
  alignas(32) T dSs[Br][Bc + kPad];
  alignas(32) float Stage[Br > Bc ? Br : Bc][D + kPadF];  // dQ_i's partial sums; dK_j, dV_j at the end
  float Li[Br], Di[Br];
};

// Rows [j0, j0 + keys) of dK or dV from the warps' accumulators: staged in shared memory (the
// fragment layout is opaque), multiplied by `mul`, rounded to the storage type.
template <class T, int D, int kPerWarp>
__device__ inline void write_kv_grad(Shared<T, D>& sm, wmma::fragment<wmma::accumulator, 16, 16, 16, float> (&acc)[kPerWarp],
                                     T* out, int64_t ld, int j0, int keys, float mul) {
  constexpr int kOut = (Bc / 16) * (D / 16);
  const int warp = threadIdx.x / 32;
  __syncthreads();  // the staging tile is free again
#pragma unroll
  for (int t = 0; t < kPerWarp; ++t) {
    const int fr = warp + W * t;
    if (fr < kOut) wmma::store_matrix_sync(&sm.Stage[fr / (D / 16) * 16][fr % (D / 16) * 16], acc[t], D + kPadF, wmma::mem_row_major);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < keys * D; e += kThreads) out[int64_t(j0 + e / D) * ld + e % D] = from_f32<T>(mul * sm.Stage[e / D][e % D]);
}

// [bwd-kv] Block (j, bh) owns K/V tile j of head bh.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) step08_bwd_kv(BwdParams p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Shared<T, D>& sm = *reinterpret_cast<Shared<T, D>*>(smem_raw);
  const AttnParams& f = p.f;
  const int j0 = blockIdx.x * Bc, bh = blockIdx.y, b = bh / f.H, h = bh % f.H;
  const int tid = threadIdx.x, warp = tid / 32;
  const T* Q = head_ptr(static_cast<const T*>(f.q), b, h, f.q_sb, f.q_sh);
  const T* K = head_ptr(static_cast<const T*>(f.k), b, h, f.k_sb, f.k_sh);
  const T* V = head_ptr(static_cast<const T*>(f.v), b, h, f.v_sb, f.v_sh);
  const T* dO = head_ptr(static_cast<const T*>(p.dout), b, h, f.o_sb, f.o_sh);
  const float* L = f.lse + b * f.lse_sb + h * f.lse_sh;
  const float* Dw = static_cast<const float*>(p.workspace) + int64_t(bh) * f.N;
  float* dQacc = static_cast<float*>(p.workspace) + int64_t(f.B) * f.H * f.N + int64_t(bh) * f.N * D;

  load_rows<T, Bc, D>(&sm.Ks[0][0], K, f.k_sn, j0, f.Nk);
  load_rows<T, Bc, D>(&sm.Vs[0][0], V, f.v_sn, j0, f.Nk);

  // [dkdv-registers] dK_j and dV_j: (Bc/16)·(D/16) output fragments each; warp w always owns
  // fragments w, w + W, ... so its accumulators stay in registers across the whole Q loop.
  constexpr int kOut = (Bc / 16) * (D / 16), kPerWarp = (kOut + W - 1) / W;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> dv[kPerWarp], dk[kPerWarp];
#pragma unroll
  for (int t = 0; t < kPerWarp; ++t) { wmma::fill_fragment(dv[t], 0.0f); wmma::fill_fragment(dk[t], 0.0f); }

  const int Tr = int(num_tiles(f.N, Br));
  // [q-range] Only the Q tiles that see tile j: fully masked pairs are skipped.
  for (int it = int(first_q_tile(j0, f.N, f.Nk, Br, f.causal)); it < Tr; ++it) {
    const int i0 = it * Br, rows = min(Br, f.N - i0);
    load_rows<T, Br, D>(&sm.Qs[0][0], Q, f.q_sn, i0, f.N);
    load_rows<T, Br, D>(&sm.dOs[0][0], dO, f.o_sn, i0, f.N);
    if (tid < Br) {  // rows past N: L = +inf makes their P zero
      sm.Li[tid] = tid < rows ? L[i0 + tid] : INFINITY;
      sm.Di[tid] = tid < rows ? Dw[i0 + tid] : 0.0f;
    }
    __syncthreads();

    // [recompute] S = Q_i K_jᵀ and dP = dO_i V_jᵀ, fragment by fragment over the warps.
    for (int fr = warp; fr < (Br / 16) * (Bc / 16); fr += W) {
      const int fm = fr / (Bc / 16), fn = fr % (Bc / 16);
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> s, dp;
      wmma::fill_fragment(s, 0.0f);
      wmma::fill_fragment(dp, 0.0f);
#pragma unroll
      for (int kk = 0; kk < D; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bt;  // K_jᵀ (then V_jᵀ): [key][dim] read as [dim][key]
        wmma::load_matrix_sync(a, &sm.Qs[16 * fm][kk], D + kPad);
        wmma::load_matrix_sync(bt, &sm.Ks[16 * fn][kk], D + kPad);
        wmma::mma_sync(s, a, bt, s);
        wmma::load_matrix_sync(a, &sm.dOs[16 * fm][kk], D + kPad);
        wmma::load_matrix_sync(bt, &sm.Vs[16 * fn][kk], D + kPad);
        wmma::mma_sync(dp, a, bt, dp);
      }
      wmma::store_matrix_sync(&sm.Ss[16 * fm][16 * fn], s, Bc + kPadF, wmma::mem_row_major);
      wmma::store_matrix_sync(&sm.dPs[16 * fm][16 * fn], dp, Bc + kPadF, wmma::mem_row_major);
    }
    __syncthreads();

    // [softmax-grad] P = exp(scale·S − L), 0 where masked; dS = P ∘ (dP − D). Both rounded to the
    // storage type: they are the A operands of the products below.
    const bool masked = needs_mask(i0, i0 + rows, j0, f.N, f.Nk, Bc, f.causal);
    // lab:begin softmax-grad {dQ dK dV}: [softmax-grad]: sm.Ps = exp(scale·S − L_i), sm.dSs = P ∘ (dP − D_i) …
    for (int e = tid; e < Br * Bc; e += kThreads) {
      const int r = e / Bc, c = e % Bc;
      float pv = expf(f.scale * sm.Ss[r][c] - sm.Li[r]);
      if (masked && j0 + c >= visible_keys(i0 + r, f.N, f.Nk, f.causal)) pv = 0.0f;  // [causal-mask], and keys past Nk
      sm.Ps[r][c] = from_f32<T>(pv);
      sm.dSs[r][c] = from_f32<T>(pv * (sm.dPs[r][c] - sm.Di[r]));
    }
    // lab:end
    __syncthreads();

    // [dkdv] dV_j += Pᵀ dO_i and dK_j += dSᵀ Q_i, into the warp's own accumulators.
    // lab:begin dkdv {dK dV}: [dkdv]: per output fragment of the warp: dv[t] += Pᵀ dO_i, dk[t] += dSᵀ Q_i …
#pragma unroll
    for (int t = 0; t < kPerWarp; ++t) {
      const int fr = warp + W * t, fm = fr / (D / 16), fn = fr % (D / 16);  // key fragment, dimension fragment
      if (fr >= kOut) continue;
#pragma unroll
      for (int kk = 0; kk < Br; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::col_major> at;  // Pᵀ (then dSᵀ): [row][key] read as [key][row]
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bm;
        wmma::load_matrix_sync(at, &sm.Ps[kk][16 * fm], Bc + kPad);
        wmma::load_matrix_sync(bm, &sm.dOs[kk][16 * fn], D + kPad);
        wmma::mma_sync(dv[t], at, bm, dv[t]);
        wmma::load_matrix_sync(at, &sm.dSs[kk][16 * fm], Bc + kPad);
        wmma::load_matrix_sync(bm, &sm.Qs[kk][16 * fn], D + kPad);
        wmma::mma_sync(dk[t], at, bm, dk[t]);
      }
    }
    // lab:end
    // [dq] This K/V tile's share of dQ_i = dS K_j, staged in shared memory ...
    for (int fr = warp; fr < (Br / 16) * (D / 16); fr += W) {
      const int fm = fr / (D / 16), fn = fr % (D / 16);
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int kk = 0; kk < Bc; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bm;
        wmma::load_matrix_sync(a, &sm.dSs[16 * fm][kk], Bc + kPad);
        wmma::load_matrix_sync(bm, &sm.Ks[kk][16 * fn], D + kPad);
        wmma::mma_sync(acc, a, bm, acc);
      }
      wmma::store_matrix_sync(&sm.Stage[16 * fm][16 * fn], acc, D + kPadF, wmma::mem_row_major);
    }
    __syncthreads();
    // [dq-atomic] ... and added into the fp32 accumulator: every K/V tile's block adds to the same
    // dQ_i rows, in an order nobody controls (the last bits of dQ may differ from run to run).
    // lab:begin dq-atomic {dQ}: [dq-atomic]: atomicAdd the staged share sm.Stage into dQacc …
    for (int e = tid; e < rows * D; e += kThreads) atomicAdd(&dQacc[int64_t(i0 + e / D) * D + e % D], sm.Stage[e / D][e % D]);
    // lab:end
  }

  // [dkdv-write] dV_j, then dK_j (times the softmax scale), through the staging tile.
  const int keys = min(Bc, f.Nk - j0);
  write_kv_grad<T, D, kPerWarp>(sm, dv, head_ptr(static_cast<T*>(p.dv), b, h, f.v_sb, f.v_sh), f.v_sn, j0, keys, 1.0f);
  write_kv_grad<T, D, kPerWarp>(sm, dk, head_ptr(static_cast<T*>(p.dk), b, h, f.k_sb, f.k_sh), f.k_sn, j0, keys, f.scale);
}

// [dq-convert] dQ = scale · accumulator, rounded to the storage type.
template <class T, int D>
__global__ void step08_dq_convert(BwdParams p) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, rows = int64_t(p.f.B) * p.f.H * p.f.N;
  if (e >= rows * D) return;
  const int64_t row = e / D;
  const int c = int(e % D), bh = int(row / p.f.N), i = int(row % p.f.N), b = bh / p.f.H, h = bh % p.f.H;
  const float* dQacc = static_cast<const float*>(p.workspace) + rows;
  head_ptr(static_cast<T*>(p.dq), b, h, p.f.q_sb, p.f.q_sh)[int64_t(i) * p.f.q_sn + c] = from_f32<T>(p.f.scale * dQacc[e]);
}

// ================================ naive ==========================================================

constexpr int G = kGemmTile;

// A matrix in global memory read element by element: element (r, c) is at ptr[r·sr + c·sc], so the
// same routine reads a matrix or its transpose.
template <class T>
struct View {
  const T* ptr;
  int64_t sr, sc;
  int rows, cols;
  __device__ float at(int r, int c) const { return r < rows && c < cols ? to_f32(ptr[r * sr + c * sc]) : 0.0f; }
};

template <class T>
struct GemmShared {
  alignas(32) T As[G][G + kPad];
  alignas(32) T Bs[G][G + kPad];
  alignas(32) float Cs[G][G + kPadF];
};

// [gemm] The G × G tile at (m0, n0) of C = A·B into Cs (fp32): the inner dimension G at a time,
// each chunk of A and B staged in shared memory (zero outside the matrices), one warp per fragment.
template <class T>
__device__ void gemm_tile(GemmShared<T>& sm, const View<T>& A, const View<T>& B, int m0, int n0) {
  const int warp = threadIdx.x / 32, wm = warp / (G / 16), wn = warp % (G / 16);
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  for (int k0 = 0; k0 < A.cols; k0 += G) {
    // [coalesce] Consecutive threads read consecutive addresses: along a row when the matrix is
    // stored by rows (sc == 1), down a column when the view is a transpose (Kᵀ, Vᵀ, Pᵀ, dSᵀ).
    for (int e = threadIdx.x; e < G * G; e += blockDim.x) {
      const int ra = A.sc == 1 ? e / G : e % G, ca = A.sc == 1 ? e % G : e / G;
      const int rb = B.sc == 1 ? e / G : e % G, cb = B.sc == 1 ? e % G : e / G;
      sm.As[ra][ca] = from_f32<T>(A.at(m0 + ra, k0 + ca));
      sm.Bs[rb][cb] = from_f32<T>(B.at(k0 + rb, n0 + cb));
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < G; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bm;
      wmma::load_matrix_sync(a, &sm.As[16 * wm][kk], G + kPad);
      wmma::load_matrix_sync(bm, &sm.Bs[kk][16 * wn], G + kPad);
      wmma::mma_sync(acc, a, bm, acc);
    }
    __syncthreads();
  }
  wmma::store_matrix_sync(&sm.Cs[16 * wm][16 * wn], acc, G + kPadF, wmma::mem_row_major);
  __syncthreads();
}

// Head pointers of the naive workspace: dP [N][Nk] (fp32) first, then P and dS [N][Nk] (storage type).
// [stored] When the forward saved P (p.saved), P is there and the workspace holds dP, then dS.
template <class T>
struct NaiveWs {
  T* P;
  float* dP;
  T* dS;
  __device__ NaiveWs(const BwdParams& p, int bh) {
    const int64_t nn = int64_t(p.f.N) * p.f.Nk, BH = int64_t(p.f.B) * p.f.H;
    float* dP_all = static_cast<float*>(p.workspace);
    T* P_all = reinterpret_cast<T*>(dP_all + BH * nn);
    dP = dP_all + bh * nn;
    P = p.saved ? static_cast<T*>(p.saved) + bh * nn : P_all + bh * nn;
    dS = p.saved ? P_all + bh * nn : P_all + BH * nn + bh * nn;
  }
};

// Block (x, y, bh) computes the output tile at rows y·G, columns x·G of head bh.
#define FA_NAIVE_PROLOGUE                                                      \
  __shared__ GemmShared<T> sm;                                                 \
  const AttnParams& f = p.f;                                                   \
  const int n0 = blockIdx.x * G, m0 = blockIdx.y * G, bh = blockIdx.z;         \
  const int b = bh / f.H, h = bh % f.H;                                        \
  const NaiveWs<T> ws(p, bh);                                                  \
  const T* Q = head_ptr(static_cast<const T*>(f.q), b, h, f.q_sb, f.q_sh);     \
  const T* K = head_ptr(static_cast<const T*>(f.k), b, h, f.k_sb, f.k_sh);     \
  const T* V = head_ptr(static_cast<const T*>(f.v), b, h, f.v_sb, f.v_sh);     \
  const T* dO = head_ptr(static_cast<const T*>(p.dout), b, h, f.o_sb, f.o_sh); \
  (void)Q; (void)K; (void)V; (void)dO;

// P = exp(scale·Q Kᵀ − L), masked entries 0. Written to HBM: N × Nk per head.
template <class T>
__global__ void step08_naive_p(BwdParams p) {
  FA_NAIVE_PROLOGUE
  __shared__ float Ls[G];  // L of the tile's rows, read once (gemm_tile's barriers publish it)
  const float* L = f.lse + b * f.lse_sb + h * f.lse_sh;
  if (threadIdx.x < G && m0 + int(threadIdx.x) < f.N) Ls[threadIdx.x] = L[m0 + threadIdx.x];
  gemm_tile(sm, View<T>{Q, f.q_sn, 1, f.N, f.d}, View<T>{K, 1, f.k_sn, f.d, f.Nk}, m0, n0);
  for (int e = threadIdx.x; e < G * G; e += blockDim.x) {
    const int r = e / G, c = e % G, i = m0 + r, j = n0 + c;
    if (i >= f.N || j >= f.Nk) continue;
    const float pv = j < visible_keys(i, f.N, f.Nk, f.causal) ? expf(f.scale * sm.Cs[r][c] - Ls[r]) : 0.0f;
    ws.P[int64_t(i) * f.Nk + j] = from_f32<T>(pv);
  }
}

// dP = dO Vᵀ in fp32: N × Nk per head.
template <class T>
__global__ void step08_naive_dp(BwdParams p) {
  FA_NAIVE_PROLOGUE
  gemm_tile(sm, View<T>{dO, f.o_sn, 1, f.N, f.d}, View<T>{V, 1, f.v_sn, f.d, f.Nk}, m0, n0);
  for (int e = threadIdx.x; e < G * G; e += blockDim.x) {
    const int r = e / G, c = e % G, i = m0 + r, j = n0 + c;
    if (i < f.N && j < f.Nk) ws.dP[int64_t(i) * f.Nk + j] = sm.Cs[r][c];
  }
}

// One warp per row: D_i = Σ_j P_ij dP_ij (the standard algorithm's way), then dS = P ∘ (dP − D_i).
template <class T>
__global__ void step08_naive_ds(BwdParams p) {
  const AttnParams& f = p.f;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= int64_t(f.B) * f.H * f.N) return;
  const int bh = int(row / f.N);
  const int64_t i = row % f.N;
  const NaiveWs<T> ws(p, bh);
  const T* P = ws.P + i * f.Nk;
  const float* dP = ws.dP + i * f.Nk;
  T* dS = ws.dS + i * f.Nk;
  float s = 0.0f;
  for (int j = lane; j < f.Nk; j += 32) s += to_f32(P[j]) * dP[j];
  for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
  for (int j = lane; j < f.Nk; j += 32) dS[j] = from_f32<T>(to_f32(P[j]) * (dP[j] - s));
}

// dV = Pᵀ dO: Nk × d per head.
template <class T>
__global__ void step08_naive_dv(BwdParams p) {
  FA_NAIVE_PROLOGUE
  gemm_tile(sm, View<T>{ws.P, 1, f.Nk, f.Nk, f.N}, View<T>{dO, f.o_sn, 1, f.N, f.d}, m0, n0);
  T* dV = head_ptr(static_cast<T*>(p.dv), b, h, f.v_sb, f.v_sh);
  for (int e = threadIdx.x; e < G * G; e += blockDim.x) {
    const int r = e / G, c = e % G;
    if (m0 + r < f.Nk && n0 + c < f.d) dV[int64_t(m0 + r) * f.v_sn + n0 + c] = from_f32<T>(sm.Cs[r][c]);
  }
}

// dQ = scale · dS K: N × d per head.
template <class T>
__global__ void step08_naive_dq(BwdParams p) {
  FA_NAIVE_PROLOGUE
  gemm_tile(sm, View<T>{ws.dS, f.Nk, 1, f.N, f.Nk}, View<T>{K, f.k_sn, 1, f.Nk, f.d}, m0, n0);
  T* dQ = head_ptr(static_cast<T*>(p.dq), b, h, f.q_sb, f.q_sh);
  for (int e = threadIdx.x; e < G * G; e += blockDim.x) {
    const int r = e / G, c = e % G;
    if (m0 + r < f.N && n0 + c < f.d) dQ[int64_t(m0 + r) * f.q_sn + n0 + c] = from_f32<T>(f.scale * sm.Cs[r][c]);
  }
}

// dK = scale · dSᵀ Q: Nk × d per head.
template <class T>
__global__ void step08_naive_dk(BwdParams p) {
  FA_NAIVE_PROLOGUE
  gemm_tile(sm, View<T>{ws.dS, 1, f.Nk, f.Nk, f.N}, View<T>{Q, f.q_sn, 1, f.N, f.d}, m0, n0);
  T* dK = head_ptr(static_cast<T*>(p.dk), b, h, f.k_sb, f.k_sh);
  for (int e = threadIdx.x; e < G * G; e += blockDim.x) {
    const int r = e / G, c = e % G;
    if (m0 + r < f.Nk && n0 + c < f.d) dK[int64_t(m0 + r) * f.k_sn + n0 + c] = from_f32<T>(f.scale * sm.Cs[r][c]);
  }
}
#undef FA_NAIVE_PROLOGUE

// ================================ launch =========================================================

namespace {

unsigned blocks_for(int64_t items, int per_block) { return unsigned((items + per_block - 1) / per_block); }

template <class T, int D>
void launch_fused(const BwdParams& p, cudaStream_t st) {
  const AttnParams& f = p.f;
  const int64_t rows = int64_t(f.B) * f.H * f.N;
  step08_bwd_pre<T, D><<<blocks_for(rows, 8), 256, 0, st>>>(p);
  CUDA_CHECK_LAUNCH("step08_bwd_pre");
  const size_t smem = sizeof(Shared<T, D>);
  static_assert(sizeof(Shared<T, D>) == size_t(smem_bytes(kSchedule, D)), "smem_bytes() must count the kernel's layout");
  static bool configured = false;  // per instantiation
  if (!configured) {
    int dev = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (size_t(optin) < smem)
      throw Unsupported("step08: the fused backward needs " + std::to_string(smem) +
                        " bytes of shared memory per block; this GPU allows " + std::to_string(optin));
    CUDA_CHECK(cudaFuncSetAttribute(step08_bwd_kv<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    configured = true;
  }
  const dim3 grid(unsigned(num_tiles(f.Nk, Bc)), unsigned(f.B * f.H));
  step08_bwd_kv<T, D><<<grid, kThreads, smem, st>>>(p);
  CUDA_CHECK_LAUNCH("step08_bwd_kv");
  step08_dq_convert<T, D><<<blocks_for(rows * D, 256), 256, 0, st>>>(p);
  CUDA_CHECK_LAUNCH("step08_dq_convert");
}

constexpr int kGemmThreads = kGemmWarps * 32;

template <class T>
void launch_naive_p(const BwdParams& p, cudaStream_t st) {
  const unsigned tn = unsigned(num_tiles(p.f.N, G)), tk = unsigned(num_tiles(p.f.Nk, G));
  step08_naive_p<T><<<dim3(tk, tn, unsigned(p.f.B * p.f.H)), kGemmThreads, 0, st>>>(p);
  CUDA_CHECK_LAUNCH("step08_naive_p");
}

// [stored] with_p = false: the forward already wrote P into p.saved, so step08_naive_p is not run.
template <class T>
void launch_naive(const BwdParams& p, cudaStream_t st, bool with_p = true) {
  const AttnParams& f = p.f;
  const unsigned BH = unsigned(f.B * f.H);
  const unsigned tn = unsigned(num_tiles(f.N, G)), tk = unsigned(num_tiles(f.Nk, G)), td = unsigned(num_tiles(f.d, G));
  constexpr int threads = kGemmThreads;
  if (with_p) launch_naive_p<T>(p, st);
  step08_naive_dp<T><<<dim3(tk, tn, BH), threads, 0, st>>>(p);
  CUDA_CHECK_LAUNCH("step08_naive_dp");
  step08_naive_ds<T><<<blocks_for(int64_t(BH) * f.N, 8), 256, 0, st>>>(p);
  CUDA_CHECK_LAUNCH("step08_naive_ds");
  step08_naive_dv<T><<<dim3(td, tk, BH), threads, 0, st>>>(p);
  CUDA_CHECK_LAUNCH("step08_naive_dv");
  step08_naive_dq<T><<<dim3(td, tn, BH), threads, 0, st>>>(p);
  CUDA_CHECK_LAUNCH("step08_naive_dq");
  step08_naive_dk<T><<<dim3(td, tk, BH), threads, 0, st>>>(p);
  CUDA_CHECK_LAUNCH("step08_naive_dk");
}

template <class T>
void launch_d(const BwdParams& p, const StepOptions& o, cudaStream_t st) {
  if (stored(o)) return launch_naive<T>(p, st, false);
  if (naive(o)) return launch_naive<T>(p, st);
  switch (p.f.d) {
    case 16: return launch_fused<T, 16>(p, st);
    case 32: return launch_fused<T, 32>(p, st);
    case 64: return launch_fused<T, 64>(p, st);
    case 128: return launch_fused<T, 128>(p, st);
    default: throw std::invalid_argument("step08: head dimension " + std::to_string(p.f.d) + " is not compiled (16, 32, 64, 128)");
  }
}

}  // namespace

size_t backward_workspace_bytes(const Shape& s, const StepOptions& o) {
  if (stored(o)) return size_t(stored_workspace(s.B * s.H, s.N, s.Nk));
  return size_t(naive(o) ? naive_workspace(s.B * s.H, s.N, s.Nk) : fused_workspace(s.B * s.H, s.N, s.d));
}

size_t backward_saved_bytes(const Shape& s, const StepOptions& o) {
  return stored(o) ? size_t(saved_p_bytes(s.B * s.H, s.N, s.Nk)) : 0;
}

namespace {
void check_backward_params(const BwdParams& p) {
  const AttnParams& f = p.f;
  auto aligned = [](const void* ptr, int64_t sb, int64_t sh, int64_t sn) {
    return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && sb % 8 == 0 && sh % 8 == 0 && sn % 8 == 0;
  };
  if (!aligned(f.q, f.q_sb, f.q_sh, f.q_sn) || !aligned(f.k, f.k_sb, f.k_sh, f.k_sn) ||
      !aligned(f.v, f.v_sb, f.v_sh, f.v_sn) || !aligned(p.dout, f.o_sb, f.o_sh, f.o_sn))
    throw std::invalid_argument("step08: Q, K, V, dO need 16-byte aligned pointers and strides that are multiples of 8");
  if (int64_t(f.B) * f.H > 65535) throw std::invalid_argument("step08: B·H must be at most 65535 (grid dimension)");
}
}  // namespace

void launch_backward(const BwdParams& p, const StepOptions& o, void* stream) {
  check_backward_params(p);
  if (p.workspace == nullptr) throw std::invalid_argument("step08: the backward needs its workspace");
  // [stored] The stored backward reads the forward's P; the others must not be handed one (their
  // P would then be read from it, not from their workspace).
  if (stored(o) != (p.saved != nullptr))
    throw std::invalid_argument(stored(o) ? "step08: --bwd stored reads the P the forward saved (BwdParams::saved), and none was given"
                                          : "step08: only --bwd stored reads a saved P (BwdParams::saved)");
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (p.f.bf16) launch_d<__nv_bfloat16>(p, o, st);
  else launch_d<__half>(p, o, st);
}

// [saved-for-backward] The forward's share of --bwd stored: P = exp(scale·QKᵀ − L) into p.saved,
// the same kernel the naive backward starts with. A forward that materializes P would write these
// bytes as it goes; run alone, the kernel also re-reads Q and K and recomputes S: an upper bound on
// what saving P costs the forward, whose lower bound is the write alone (docs/08_backward.md).
void launch_save(const BwdParams& p, const StepOptions& o, void* stream) {
  if (!stored(o)) return;
  check_backward_params(p);
  if (p.saved == nullptr) throw std::invalid_argument("step08: --bwd stored: no buffer for the saved P");
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (p.f.bf16) launch_naive_p<__nv_bfloat16>(p, st);
  else launch_naive_p<__half>(p, st);
}

}  // namespace fa::step08
