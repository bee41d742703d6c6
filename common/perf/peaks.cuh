// [peaks] What common/perf/peaks.cu and common/perf/peaks_sm90a.cu share: how a microbenchmark is sized and
// timed. Host code only (CUDA runtime, no Eigen), so the sm_90a library needs nothing else of the
// harness.
//
// A ceiling is a rate: work per second of one resource (HBM, L2, shared memory, a pipe of the SM).
// To see the resource and not the launch, one launch must last long enough that the few
// microseconds of launching it are noise (>= ~1 ms): calibrate() doubles the kernel's loop count
// until it does. Then every launch is timed on its own with a pair of CUDA events, after a warm-up
// (the first launch pays for loading the module, the clocks may still be ramping), and the median
// is kept: robust to the odd launch that an interrupt or a clock change stretched.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernel/cuda_check.cuh"

namespace fa::peaks {

inline constexpr uint32_t kNever = 0x9e3779b9u;  // a sink is written only when a fold equals this

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

struct Events {
  cudaEvent_t a = nullptr, b = nullptr;
  Events() { CUDA_CHECK(cudaEventCreate(&a)); CUDA_CHECK(cudaEventCreate(&b)); }
  ~Events() { cudaEventDestroy(a); cudaEventDestroy(b); }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
};

// Milliseconds of one call of `launch` (which may launch one kernel or many) on stream `s`.
template <class Launch>
double time_once(cudaStream_t s, Launch&& launch) {
  Events e;
  CUDA_CHECK(cudaEventRecord(e.a, s));
  launch();
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaEventRecord(e.b, s));
  CUDA_CHECK(cudaEventSynchronize(e.b));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, e.a, e.b));
  return double(ms);
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Timing {
  double ms_median = 0;
  int reps = 0;
};

// `warmup` untimed calls, then `reps` timed ones; the median.
template <class Launch>
Timing time_reps(cudaStream_t s, int reps, Launch&& launch, int warmup = 2) {
  for (int w = 0; w < warmup; ++w) launch();
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) ms.push_back(time_once(s, launch));
  return {median(ms), int(ms.size())};
}

// The loop count (starting from `iters`) at which one call of launch(iters) lasts >= target_ms.
template <class LaunchIters>
int64_t calibrate(cudaStream_t s, int64_t iters, LaunchIters&& launch, double target_ms = 1.0,
                  int64_t max_iters = int64_t(1) << 30) {
  launch(iters);  // loads the module, wakes the clocks
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaStreamSynchronize(s));
  for (;;) {
    const double ms = time_once(s, [&] { launch(iters); });
    if (ms >= target_ms || iters >= max_iters) return iters;
    // Scale toward 1.25x the target in one go when the time says how far, at least doubling.
    const double f = ms > 0 ? 1.25 * target_ms / ms : 1024.0;
    iters = std::min(max_iters, iters * std::max<int64_t>(2, int64_t(f + 1)));
  }
}

// Blocks of `threads` the occupancy calculator lets every SM hold at once, times the SMs: a grid
// that fills the GPU exactly once (a "full grid").
template <class Kernel>
unsigned full_grid(Kernel k, int threads, size_t smem = 0) {
  int dev = 0, sms = 0, per_sm = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, threads, smem));
  return unsigned(sms * std::max(1, per_sm));
}

// wgmma-f16 (common/perf/peaks_sm90a.cu, built for sm_90a where the build has sm_90): true with the
// timing and the FLOPs per launch, or false with the reason it is absent.
bool measure_wgmma_f16(int reps, Timing& t, int64_t& flops, std::string& why);

}  // namespace fa::peaks
