// Step 02 — online softmax: one fused kernel on CUDA cores.
//
//   step02_online   for each query row (one warp): stream over the visible keys, keeping the
//                   running maximum m, the running sum l and the unnormalized output o; write
//                   O = o / l and L = m + log(l) once.
//
// What it buys: S and P never touch HBM — the N × Nk traffic of step 01 is gone. What it costs:
// every query reads every key and value row itself (no tile is shared through shared memory), so
// K and V are requested N times each, and the dot products run on CUDA cores one key at a time.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

#include "kernel/cuda_check.cuh"
#include "schedule.hpp"

namespace fa::step02 {

constexpr int kThreads = kWarps * 32;

template <class T> __device__ inline float to_f32(T x);
template <> __device__ inline float to_f32(__half x) { return __half2float(x); }
template <> __device__ inline float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T> __device__ inline T from_f32(float x);
template <> __device__ inline __half from_f32(float x) { return __float2half_rn(x); }
template <> __device__ inline __nv_bfloat16 from_f32(float x) { return __float2bfloat16_rn(x); }

// EPL consecutive 16-bit elements as one 2-, 4- or 8-byte access (one instruction per lane, so a
// warp's access to a row is a single coalesced request).
template <int EPL> struct Vec;
template <> struct Vec<1> { using type = unsigned short; };
template <> struct Vec<2> { using type = unsigned int; };
template <> struct Vec<4> { using type = uint2; };

template <class T> __device__ inline unsigned short bits_of(T x);
template <> __device__ inline unsigned short bits_of(__half x) { return __half_as_ushort(x); }
template <> __device__ inline unsigned short bits_of(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }
template <class T> __device__ inline T of_bits(unsigned short b);
template <> __device__ inline __half of_bits(unsigned short b) { return __ushort_as_half(b); }
template <> __device__ inline __nv_bfloat16 of_bits(unsigned short b) { return __ushort_as_bfloat16(b); }

template <class T, int EPL>
__device__ inline void load_row_slice(const T* __restrict__ src, float (&dst)[EPL]) {
  const typename Vec<EPL>::type v = *reinterpret_cast<const typename Vec<EPL>::type*>(src);
  unsigned short b[4];
  if constexpr (EPL == 1) { b[0] = v; }
  else if constexpr (EPL == 2) { b[0] = v & 0xffffu; b[1] = v >> 16; }
  else { b[0] = v.x & 0xffffu; b[1] = v.x >> 16; b[2] = v.y & 0xffffu; b[3] = v.y >> 16; }
#pragma unroll
  for (int e = 0; e < EPL; ++e) dst[e] = to_f32(of_bits<T>(b[e]));
}

template <class T, int EPL>
__device__ inline void store_row_slice(T* __restrict__ dst, const float (&src)[EPL]) {
  unsigned int b[4];
#pragma unroll
  for (int e = 0; e < EPL; ++e) b[e] = bits_of(from_f32<T>(src[e]));
  typename Vec<EPL>::type v;
  if constexpr (EPL == 1) { v = static_cast<unsigned short>(b[0]); }
  else if constexpr (EPL == 2) { v = b[0] | (b[1] << 16); }
  else { v.x = b[0] | (b[1] << 16); v.y = b[2] | (b[3] << 16); }
  *reinterpret_cast<typename Vec<EPL>::type*>(dst) = v;
}

__device__ inline float warp_sum(float x) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// [online-update] Warp w of block (x, bh) owns query row i = x·kWarps + w. Lane t holds elements
// [t·EPL, t·EPL + EPL) of q, of each k_j and v_j it reads, and of the accumulator o.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) step02_online(AttnParams p) {
  constexpr int EPL = elems_per_lane(D);
  constexpr int kLanes = active_lanes(D);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int i = blockIdx.x * kWarps + warp, bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  if (i >= p.N) return;  // whole warps leave together: no barrier follows
  const bool active = lane < kLanes;
  const T* Q = static_cast<const T*>(p.q) + b * p.q_sb + h * p.q_sh + int64_t(i) * p.q_sn;
  const T* K = static_cast<const T*>(p.k) + b * p.k_sb + h * p.k_sh;
  const T* V = static_cast<const T*>(p.v) + b * p.v_sb + h * p.v_sh;

  float q[EPL] = {}, o[EPL] = {}, kv[EPL] = {};
  if (active) load_row_slice<T, EPL>(Q + lane * EPL, q);
  const int nv = int(visible_keys(i, p.N, p.Nk, p.causal));
  float m = -INFINITY, l = 0.0f;
  for (int j = 0; j < nv; ++j) {
    float dot = 0.0f;
    if (active) {
      load_row_slice<T, EPL>(K + int64_t(j) * p.k_sn + lane * EPL, kv);
#pragma unroll
      for (int e = 0; e < EPL; ++e) dot += q[e] * kv[e];
    }
    const float s = warp_sum(dot) * p.scale;    // s_ij, the same in every lane
    // lab:begin online-update: [online-update]: rescale l, o by alpha, add p = exp(s - m_new), p v_j …
    const float m_new = fmaxf(m, s);
    const float alpha = rescale_factor(m, m_new);  // [rescale-guard]
    const float pj = expf(s - m_new);
    l = l * alpha + pj;
    if (active) {
      load_row_slice<T, EPL>(V + int64_t(j) * p.v_sn + lane * EPL, kv);
#pragma unroll
      for (int e = 0; e < EPL; ++e) o[e] = o[e] * alpha + pj * kv[e];
    }
    m = m_new;
    // lab:end
  }
  T* O = static_cast<T*>(p.o) + b * p.o_sb + h * p.o_sh + int64_t(i) * p.o_sn;
  if (active) {
#pragma unroll
    for (int e = 0; e < EPL; ++e) o[e] = nv > 0 ? o[e] / l : 0.0f;
    store_row_slice<T, EPL>(O + lane * EPL, o);
  }
  if (lane == 0) p.lse[b * p.lse_sb + h * p.lse_sh + i] = nv > 0 ? m + logf(l) : INFINITY;
}

namespace {

template <class T, int D>
void launch_typed(const AttnParams& p, cudaStream_t st) {
  const dim3 grid(unsigned(num_tiles(p.N, kWarps)), unsigned(p.B * p.H));
  step02_online<T, D><<<grid, kThreads, 0, st>>>(p);
  CUDA_CHECK_LAUNCH("step02_online");
}

template <class T>
void launch_d(const AttnParams& p, cudaStream_t st) {
  switch (p.d) {
    case 16: return launch_typed<T, 16>(p, st);
    case 32: return launch_typed<T, 32>(p, st);
    case 64: return launch_typed<T, 64>(p, st);
    case 128: return launch_typed<T, 128>(p, st);
    default: throw std::invalid_argument("step02: head dimension " + std::to_string(p.d) + " is not compiled (16, 32, 64, 128)");
  }
}

}  // namespace

size_t workspace_bytes(const Shape&, const StepOptions&) { return 0; }

void launch(const AttnParams& p, const StepOptions&, void* stream) {
  // Lanes load 2, 4 or 8 bytes at a time: rows must start 8-byte aligned.
  auto aligned = [](const void* ptr, int64_t sb, int64_t sh, int64_t sn) {
    return reinterpret_cast<uintptr_t>(ptr) % 8 == 0 && sb % 4 == 0 && sh % 4 == 0 && sn % 4 == 0;
  };
  if (!aligned(p.q, p.q_sb, p.q_sh, p.q_sn) || !aligned(p.k, p.k_sb, p.k_sh, p.k_sn) ||
      !aligned(p.v, p.v_sb, p.v_sh, p.v_sn) || !aligned(p.o, p.o_sb, p.o_sh, p.o_sn))
    throw std::invalid_argument("step02: Q, K, V, O need 8-byte aligned pointers and strides that are multiples of 4");
  if (int64_t(p.B) * p.H > 65535) throw std::invalid_argument("step02: B·H must be at most 65535 (grid dimension)");
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (p.bf16) launch_d<__nv_bfloat16>(p, st);
  else launch_d<__half>(p, st);
}

}  // namespace fa::step02
