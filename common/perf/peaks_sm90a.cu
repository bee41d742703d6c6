// [peaks] wgmma-f16: Hopper's warpgroup MMA, wgmma.mma_async.m64n128k16.f32.f16.f16, with both
// operands read from shared memory through descriptors (the "SS" form that step 14's S = Q·Kᵀ
// issues). The instruction exists only in sm_90a, so this file is its own library, compiled for
// 90a where the build has 90 (CMakeLists.txt, [sm90a]); for every other architecture the kernel is
// compiled out and a probe reports that the code the runtime picked has no wgmma.
//
// Each block is one warpgroup (128 threads) with a 64 × 64 A tile and a 128 × 64 B tile of fp16 in
// shared memory, stored in the 128-byte swizzle (common/kernel/wgmma_layout.hpp). Per trip of the loop it
// issues the four k-slices of 16 (kk = 0..3: 4 × 2·64·128·16 FLOPs) into one set of 64 fp32
// accumulators per thread, commits them as a group and waits until at most one group is in flight:
// the next group is issued while the last one runs (wgmmas into the same accumulators are ordered
// by the hardware; the fence before each batch is the one a GEMM's main loop has). Several blocks
// per SM (90 registers a thread: five) keep the tensor cores busy while one waits.
#include <cuda_fp16.h>

#include <string>

#include "perf/peaks.cuh"
#include "kernel/wgmma.cuh"
#include "kernel/wgmma_layout.hpp"

namespace fa::peaks {
namespace {

constexpr int kM = 64, kN = 128, kK = 64;  // one 128-byte panel of k per operand
constexpr uint32_t kABytes = kM * kK * 2, kBBytes = kN * kK * 2;
constexpr size_t kSmem = kABytes + kBBytes + 1024;  // + room to align the tiles to 1024 bytes

// 1 where the runtime picked sm_90a code for this device, 0 where it picked anything else.
__global__ void peak_wgmma_probe(int* has) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *has = 1;
#else
  *has = 0;
#endif
}

__global__ void __launch_bounds__(128) peak_wgmma_f16(int iters, float* sink) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = uint32_t(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;  // the swizzle's core groups start 1024-aligned
  unsigned char* p = smem_raw + (base - raw);
  // Small values (what they are does not change the speed; inf or NaN might change the power).
  for (uint32_t i = threadIdx.x; i < (kABytes + kBBytes) / 2; i += blockDim.x)
    reinterpret_cast<__half*>(p)[i] = __float2half(0.001f * float(i % 13));
  __syncthreads();
  wgmma::fence_proxy_async();  // the ordinary stores above, made visible to wgmma's reads
  uint64_t da[4], db[4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    da[kk] = wgmma::desc(base + wgmma::kmajor_offset(0, kk, kM));
    db[kk] = wgmma::desc(base + kABytes + wgmma::kmajor_offset(0, kk, kN));
  }
  float d[kN / 2];
#pragma unroll
  for (int e = 0; e < kN / 2; ++e) d[e] = 0.0f;
  for (int i = 0; i < iters; ++i) {
    wgmma::fence();  // as a GEMM's main loop does once per batch (ptxas would insert it, warning C7519)
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma::mma_ss<__half, kN>(d, da[kk], db[kk], true);
    wgmma::commit();
    wgmma::wait<1>();
  }
  wgmma::wait<0>();
  float s = 0;
#pragma unroll
  for (int e = 0; e < kN / 2; ++e) s += d[e];
  if (s == -1.0f) *sink = s;
#else
  (void)iters;
  (void)sink;
#endif
}

}  // namespace

bool measure_wgmma_f16(int reps, Timing& t, int64_t& flops, std::string& why) {
  int dev = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major != 9 || minor != 0) {
    why = "wgmma is sm_90a's; this GPU is compute capability " + std::to_string(major) + "." + std::to_string(minor);
    return false;
  }
  DeviceBuffer flag(sizeof(int)), sink(64);
  peak_wgmma_probe<<<1, 1>>>(flag.as<int>());
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    why = std::string("this build has no code for this GPU in its sm_90a library (") + cudaGetErrorString(e) + ")";
    return false;
  }
  int has = 0;
  CUDA_CHECK(cudaMemcpy(&has, flag.get(), sizeof has, cudaMemcpyDeviceToHost));
  if (!has) {
    why = "this build has no sm_90a code (CMAKE_CUDA_ARCHITECTURES without 90): the runtime runs code of an older "
          "architecture, which has no wgmma";
    return false;
  }
  CUDA_CHECK(cudaFuncSetAttribute(peak_wgmma_f16, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
  Stream st;
  const unsigned g = full_grid(peak_wgmma_f16, 128, kSmem);
  auto launch = [&](int64_t it) { peak_wgmma_f16<<<g, 128, kSmem, st.s>>>(int(it), sink.as<float>()); };
  const int64_t iters = calibrate(st.s, 64, launch);
  t = time_reps(st.s, reps, [&] { launch(iters); });
  flops = int64_t(g) * iters * 4 * (int64_t(2) * kM * kN * 16);
  return true;
}

}  // namespace fa::peaks
