// [peaks] Measured ceilings: one small kernel per resource that the course's kernels use, each
// built so that this resource, and nothing else, limits it. The rows (bench --peaks) are what the
// per-resource performance model (common/roofline.*) divides a ledger by: the rate this GPU
// delivers, not a datasheet's. docs/profiling.md, "Measured ceilings", explains each in a sentence.
//
// Rules every kernel here follows:
//  - the work cannot be optimized away: loaded values are folded (XOR, a sum) into a value that is
//    written to a sink only if it equals a constant no input makes, so the compiler must compute it
//    and the memory system never sees the store; instructions that must be exactly one machine
//    instruction (ld.shared, ldmatrix, mma.sync, ex2) are inline PTX, `volatile` where the result
//    alone would not keep them (a load from shared memory that never changes could be hoisted).
//  - the loop body is checked with `cuobjdump -sass` (and ptxas -v: no spills) to be what the
//    comment says, e.g. eight LDS.128 and the folds, or 64 FFMA per iteration.
//  - a throughput runs a full grid (common/perf/peaks.cuh: full_grid) long enough (calibrate) that the
//    launch is noise; a latency runs one thread (or one block) through a chain of dependent steps.
#include <algorithm>
#include <cuda_fp16.h>
#include <mma.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/arch.hpp"
#include "kernel/cuda_check.cuh"
#include "harness/gpu.hpp"
#include "perf/peaks.cuh"

namespace fa {
namespace {

using peaks::kNever;

// ---- memory: HBM and L2 ------------------------------------------------------------------------

// hbm-read: every thread reads 16 bytes per step of a grid-stride loop over a buffer far beyond L2
// and folds them into one word. __ldcs (evict-first) because every byte is read once: nothing
// should linger in L2 to serve the next launch.
__global__ void peak_hbm_read(const uint4* __restrict__ src, int64_t n, uint32_t* sink) {
  uint32_t acc = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcs(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == kNever) *sink = acc;
}

// hbm-write: the same loop storing 16 bytes per step (__stcs: streaming). Each 32-byte sector is
// written whole, so L2 need not read the line first: the bytes moved are the bytes stored.
__global__ void peak_hbm_write(uint4* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    __stcs(dst + i, make_uint4(uint32_t(i), uint32_t(i >> 32), 1u, 2u));
}

// l2-read: `steps` 16-byte loads per thread from a buffer of mask + 1 uint4 (a power of two, small
// enough to stay in L2), step s at element (thread + s·threads) mod size — the whole grid sweeps
// the buffer again and again, coalesced. __ldcg caches in L2 only: L1 (256 KB per SM) would
// otherwise serve repeats of a thread's own addresses and the row would measure L1. Four loads per
// trip of the loop are in flight together, to cover L2's latency.
__global__ void peak_l2_read(const uint4* __restrict__ src, uint32_t mask, int steps, uint32_t* sink) {
  const uint32_t nt = gridDim.x * blockDim.x;
  uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  uint32_t a0 = 0, a1 = 0;
  for (int s = 0; s < steps; s += 4) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = __ldcg(src + ((i + uint32_t(u) * nt) & mask));
#pragma unroll
    for (int u = 0; u < 4; ++u) { a0 ^= v[u].x ^ v[u].y; a1 ^= v[u].z ^ v[u].w; }
    i += 4 * nt;  // wraps modulo 2^32, which the power-of-two mask does not notice
  }
  if ((a0 ^ a1) == kNever) *sink = a0;
}

// atomic-f32: fp32 atomicAdd whose old value is unused — the compiler emits RED.ADD.F32, a
// fire-and-forget reduction that L2's atomic units perform. Distinct addresses (a coalesced sweep of
// a few MB), so the rate is the units' throughput, not contention on one word.
__global__ void peak_atomic_f32(float* buf, uint32_t mask, int steps) {
  const uint32_t nt = gridDim.x * blockDim.x;
  uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  for (int s = 0; s < steps; s += 4) {
#pragma unroll
    for (int u = 0; u < 4; ++u) atomicAdd(buf + ((i + uint32_t(u) * nt) & mask), 1.0f);
    i += 4 * nt;
  }
}

// The pointer chase's ring: node k (one 128-byte line apart, `stride` words) points at the next
// node in the order perm(0), perm(1), ..., perm(N - 1), perm(0) — one cycle through every line in
// a scattered order, so neither a line fetched earlier nor any prefetcher helps the next load.
// perm is a bijection on log2n-bit numbers (multiply by an odd constant, xor-shift, again).
__device__ __forceinline__ uint32_t ring_perm(uint32_t k, uint32_t mask, int half) {
  k = (k * 0x9E3779B1u) & mask;
  k ^= k >> half;
  k = (k * 0x85EBCA77u) & mask;
  k ^= k >> half;
  return k;
}
__global__ void peak_ring_init(uint32_t* buf, uint32_t nodes, int half, uint32_t stride) {
  for (uint32_t k = blockIdx.x * blockDim.x + threadIdx.x; k < nodes; k += gridDim.x * blockDim.x)
    buf[ring_perm(k, nodes - 1, half) * stride] = ring_perm((k + 1) & (nodes - 1), nodes - 1, half) * stride;
}
// hbm-latency, l2-latency: one thread, `steps` loads each of whose address is the previous one's
// value: nothing overlaps, so the time per step is the latency of one load from wherever the ring
// lives. It starts where the last launch stopped (*state) and leaves its end there, so a launch
// never walks lines an earlier one brought into L2 (and the final value is kept). __ldcg: L1 is
// bypassed, as it is for the data a kernel streams.
__global__ void peak_chase(const uint32_t* __restrict__ buf, uint32_t* state, int steps) {
  uint32_t p = *state;
  for (int s = 0; s < steps; ++s) p = __ldcg(buf + p);
  *state = p;
}

// ---- the SM: shared memory ---------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

constexpr int kSmemThreads = 256;
// The shared-memory kernels' 8 loads per trip of the loop: thread t reads slot (t + 32u) mod 256 of
// a 4 KB buffer for u = 0..7 — eight different slots, each load a warp's 512 contiguous bytes (four
// 128-byte wavefronts, no two lanes of a quarter-warp in one bank: conflict-free, so each costs the
// 4 cycles of 128 bytes a clock per SM). `volatile` on the asm is not enough: ptxas, which sees
// plain PTX loads from memory nothing stores to, merges loads of one address (a first version
// loading two slots four times each measured 3.8x the hardware's ceiling) and could hoist them out
// of the loop. So every load has its own address, and all of them move by (i & zero) slots — zero is
// 0 at run time, which the compiler cannot know — so none is the same from one trip to the next.
struct SmemSlots {
  uint32_t at[8];
  __device__ SmemSlots(const uint4* buf) {
#pragma unroll
    for (int u = 0; u < 8; ++u) at[u] = smem_u32(&buf[(threadIdx.x + 32u * u) % kSmemThreads]);
  }
};
__device__ __forceinline__ void fill_slots(uint4* buf) {
  buf[threadIdx.x] = make_uint4(threadIdx.x, 1, 2, 3);
  __syncthreads();
}

// smem-read: ld.shared.v4 (LDS.128), 16 bytes a thread, folded into two words.
__global__ void __launch_bounds__(kSmemThreads) peak_smem_read(int iters, uint32_t zero, uint32_t* sink) {
  __shared__ uint4 buf[kSmemThreads + 8];
  fill_slots(buf);
  const SmemSlots sl(buf);
  uint32_t a0 = 0, a1 = 0;
  for (int i = 0; i < iters; ++i) {
    const uint32_t off = (uint32_t(i) & zero) * 16;
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      uint32_t x, y, z, w;
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(x), "=r"(y), "=r"(z), "=r"(w) : "r"(sl.at[u] + off));
      a0 ^= x ^ y;
      a1 ^= z ^ w;
    }
  }
  if ((a0 ^ a1) == kNever) *sink = a0;
}

// smem-write: st.shared.v4 (STS.128) to the same eight slots, values that change every trip.
// volatile, as a store nobody reads would go; the read-back at the end keeps the buffer live.
__global__ void __launch_bounds__(kSmemThreads) peak_smem_write(int iters, uint32_t zero, uint32_t* sink) {
  __shared__ uint4 buf[kSmemThreads + 8];
  const SmemSlots sl(buf);
  for (int i = 0; i < iters; ++i) {
    const uint32_t off = (uint32_t(i) & zero) * 16;
#pragma unroll
    for (int u = 0; u < 8; ++u)
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(sl.at[u] + off), "r"(i), "r"(u), "r"(off), "r"(i ^ u)
                   : "memory");
  }
  __syncthreads();
  if (buf[threadIdx.x].x == kNever) *sink = buf[threadIdx.x].y;
}

// ldmatrix: ldmatrix.sync.aligned.m8n8.x4.shared.b16 — each lane names one 16-byte row (lane l of
// a warp: slot (t + 32u) mod 256 as above, so the 32 rows are 512 contiguous bytes: four 8 × 8
// matrices, each eight rows in distinct banks) and receives 4 registers, 16 bytes, of the fragments
// the tensor cores want. The bytes counted are those delivered to registers: 512 per instruction.
__global__ void __launch_bounds__(kSmemThreads) peak_ldmatrix(int iters, uint32_t zero, uint32_t* sink) {
  __shared__ uint4 buf[kSmemThreads + 8];
  fill_slots(buf);
  const SmemSlots sl(buf);
  uint32_t a0 = 0, a1 = 0;
  for (int i = 0; i < iters; ++i) {
    const uint32_t off = (uint32_t(i) & zero) * 16;
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      uint32_t x, y, z, w;
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(x), "=r"(y), "=r"(z), "=r"(w)
                   : "r"(sl.at[u] + off));
      a0 ^= x ^ y;
      a1 ^= z ^ w;
    }
  }
  if ((a0 ^ a1) == kNever) *sink = a0;
}

// ---- the SM: tensor cores, FMA, SFU ------------------------------------------------------------

// wmma-f16: nvcuda::wmma m16n16k16, fp16 inputs, fp32 accumulators, operands in registers (filled
// once, never reloaded): only the MMAs are in the loop. Four independent accumulators per warp keep
// the tensor pipe fed while each MMA's result is still in flight (a single chain would measure its
// latency). The accumulators are summed at the end into the sink's condition.
constexpr int kMmaThreads = 256;
__global__ void __launch_bounds__(kMmaThreads) peak_wmma_f16(int iters, float* sink) {
  using namespace nvcuda;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c[4];
  for (int e = 0; e < a.num_elements; ++e) a.x[e] = __float2half(0.001f * float((threadIdx.x + e) % 7));
  for (int e = 0; e < b.num_elements; ++e) b.x[e] = __float2half(0.002f * float((threadIdx.x + 3 * e) % 5));
#pragma unroll
  for (int k = 0; k < 4; ++k) wmma::fill_fragment(c[k], 0.0f);
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int k = 0; k < 4; ++k) wmma::mma_sync(c[k], a, b, c[k]);
  }
  float s = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k)
    for (int e = 0; e < c[k].num_elements; ++e) s += c[k].x[e];
  if (s == -1.0f) *sink = s;
}

// mma-sync-f16: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 — the instruction steps 09-13
// issue — with eight independent accumulators per warp (the A and B fragments in registers).
// sm_80 and later; compiled out (a trap) below, where the host does not launch it.
constexpr int kMmaChains = 8;
__global__ void __launch_bounds__(kMmaThreads) peak_mma_sync_f16(int iters, float* sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t l = threadIdx.x;
  const uint32_t a0 = 0x1c001c00u ^ (l & 7), a1 = 0x1c001800u, a2 = 0x18001c00u, a3 = 0x1c001c00u ^ (l & 3);
  const uint32_t b0 = 0x14001400u ^ (l & 1), b1 = 0x14001000u;
  float d[kMmaChains][4] = {};
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int k = 0; k < kMmaChains; ++k)
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
          "{%0, %1, %2, %3};\n"
          : "+f"(d[k][0]), "+f"(d[k][1]), "+f"(d[k][2]), "+f"(d[k][3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  float s = 0;
#pragma unroll
  for (int k = 0; k < kMmaChains; ++k) s += d[k][0] + d[k][1] + d[k][2] + d[k][3];
  if (s == -1.0f) *sink = s;
#else
  (void)iters;
  (void)sink;
  __trap();
#endif
}

// fp32-fma: eight independent chains x = x·m + c per thread (FFMA has a latency of ~4 cycles; with
// many warps and eight chains each an FMA lane never waits), 64 FMAs per trip of the loop, m and c
// from the host so the compiler cannot fold them. 2 FLOPs per FMA.
constexpr int kFmaThreads = 256;
__global__ void __launch_bounds__(kFmaThreads) peak_fp32_fma(int iters, float m, float c, float* sink) {
  float x[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) x[j] = float(threadIdx.x) * 1e-3f + float(j);
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int u = 0; u < 8; ++u)
#pragma unroll
      for (int j = 0; j < 8; ++j) x[j] = fmaf(x[j], m, c);
  }
  float s = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) s += x[j];
  if (s == -1.0f) *sink = s;
}

// ex2: the special-function unit's base-2 exponential, as the kernels issue it (ex2.approx.ftz.f32,
// steps 12-13: one MUFU.EX2 — without .ftz ptxas adds instructions around it for denormals). Eight
// independent chains x = 2^(-x) per thread: the negation folds into MUFU's operand, and the chain
// settles near 0.64 instead of running off to infinity. 32 per trip of the loop.
__device__ __forceinline__ float ex2_neg(float x) {
  float y;
  asm("{\n.reg .f32 t;\nneg.f32 t, %1;\nex2.approx.ftz.f32 %0, t;\n}\n" : "=f"(y) : "f"(x));
  return y;
}
__global__ void __launch_bounds__(kFmaThreads) peak_ex2(int iters, float* sink) {
  float x[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) x[j] = float(threadIdx.x & 31) * 1e-2f + 0.1f * float(j);
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int u = 0; u < 4; ++u)
#pragma unroll
      for (int j = 0; j < 8; ++j) x[j] = ex2_neg(x[j]);
  }
  float s = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) s += x[j];
  if (s == -1.0f) *sink = s;
}

// ---- the SM: latencies of one warp's dependent instructions --------------------------------------
// The latency term of the model (docs/model.md, "The latency term") needs what one instruction takes
// from issue to a result the next can use, when nothing else hides it: one warp alone on the GPU, each
// instruction's input the previous one's output. `steps` per launch, 8 per trip of the loop.

// smem-latency: ld.shared.u32 (LDS), each address the value the last load returned (a ring of 256
// words whose entry k holds the next address), one warp, every lane on its own word.
__global__ void __launch_bounds__(32) peak_smem_latency(int iters, uint32_t* sink) {
  __shared__ uint32_t ring[256];
  for (int k = threadIdx.x; k < 256; k += 32) ring[k] = smem_u32(&ring[(k + 37) & 255]);
  __syncwarp();
  uint32_t p = smem_u32(&ring[threadIdx.x]);
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int u = 0; u < 8; ++u) asm volatile("ld.shared.u32 %0, [%0];\n" : "+r"(p));
  }
  if (p == kNever) *sink = p;
}

// mma-latency: one chain of mma.sync.m16n8k16 (fp16 in, fp32 accumulate), each one's accumulators
// the next one's C: the HMMA latency a WMMA or mma.sync loop waits when it has no second chain.
__global__ void __launch_bounds__(32) peak_mma_latency(int iters, float* sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t l = threadIdx.x;
  const uint32_t a0 = 0x1c001c00u ^ (l & 7), a1 = 0x1c001800u, a2 = 0x18001c00u, a3 = 0x1c001c00u ^ (l & 3);
  const uint32_t b0 = 0x14001400u ^ (l & 1), b1 = 0x14001000u;
  float d[4] = {};
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int u = 0; u < 8; ++u)
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
          "{%0, %1, %2, %3};\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  if (d[0] + d[1] + d[2] + d[3] == -1.0f) *sink = d[0];
#else
  (void)iters;
  (void)sink;
  __trap();
#endif
}

// ex2-latency: one chain x = 2^(-x) (MUFU.EX2), as peak_ex2 but a single chain and one warp.
__global__ void __launch_bounds__(32) peak_ex2_latency(int iters, float* sink) {
  float x = float(threadIdx.x) * 1e-2f + 0.1f;
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int u = 0; u < 8; ++u) x = ex2_neg(x);
  }
  if (x == -1.0f) *sink = x;
}

// fma-latency: one chain x = x·m + c (FFMA), one warp.
__global__ void __launch_bounds__(32) peak_fma_latency(int iters, float m, float c, float* sink) {
  float x = float(threadIdx.x) * 1e-3f;
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int u = 0; u < 8; ++u) x = fmaf(x, m, c);
  }
  if (x == -1.0f) *sink = x;
}

// ---- the SM: barriers, launches ----------------------------------------------------------------

// barrier, barrier-latency: a block of 4 warps doing nothing but __syncthreads (BAR.SYNC), 8 per
// trip of the loop. A full grid of such blocks gives the rate the GPU can retire barriers (counted
// once per block); one block alone gives the time one barrier takes when nothing overlaps it.
constexpr int kBarThreads = 128;
__global__ void __launch_bounds__(kBarThreads) peak_barrier(int iters) {
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int u = 0; u < 8; ++u) __syncthreads();
  }
}

// launch: a kernel with no work; what remains is the cost of launching it.
__global__ void peak_empty() {}

// ---- the host side -----------------------------------------------------------------------------

enum class Kind { PerSecond, NsPerStep, UsPerStep };

PeakResult row(const char* name, const char* unit, Kind kind, int64_t amount, const peaks::Timing& t) {
  PeakResult r;
  r.name = name;
  r.unit = unit;
  r.amount = amount;
  r.ms_median = t.ms_median;
  r.reps = t.reps;
  if (t.ms_median > 0 && amount > 0) {
    if (kind == Kind::PerSecond) r.value = double(amount) / (t.ms_median * 1e-3);
    else if (kind == Kind::NsPerStep) r.value = t.ms_median * 1e6 / double(amount);
    else r.value = t.ms_median * 1e3 / double(amount);
  }
  return r;
}

// A progress line per benchmark on stderr.
void progress(const PeakResult& r) {
  std::fprintf(stderr, "bench: %-16s %12.5g %-10s (%lld per launch, %.4g ms, median of %d)\n", r.name.c_str(), r.value,
               r.unit.c_str(), static_cast<long long>(r.amount), r.ms_median, r.reps);
}

}  // namespace

std::vector<PeakResult> measure_peaks(int reps, std::vector<std::string>& notes) {
  using namespace peaks;
  std::vector<PeakResult> out;
  auto add = [&](PeakResult r) {
    const std::vector<std::string>& known = peak_names();
    if (std::find(known.begin(), known.end(), r.name) == known.end())
      throw std::logic_error("measure_peaks: " + r.name + " is not in peak_names() (common/harness/gpu.hpp)");
    progress(r);
    out.push_back(std::move(r));
  };
  Stream st;
  const cudaStream_t s = st.s;
  DeviceBuffer sink(64);
  CUDA_CHECK(cudaMemsetAsync(sink.get(), 0, 64, s));
  uint32_t* sink_u = sink.as<uint32_t>();
  float* sink_f = sink.as<float>();
  const int usable_cc = gpu_caps().usable_cc();

  // Latencies: a ring of 128-byte lines (peak_ring_init), walked by one thread; `flush(ring)` runs
  // between building the ring and walking it (to evict it from L2, or to bring it in).
  DeviceBuffer state(4);
  auto chase = [&](const char* name, int log2_nodes, int64_t max_steps, auto&& flush) {
    const uint32_t nodes = 1u << log2_nodes, stride = 32;  // 32 words: 128 bytes per node
    DeviceBuffer ring(size_t(nodes) * stride * 4);
    peak_ring_init<<<1024, 256, 0, s>>>(ring.as<uint32_t>(), nodes, (log2_nodes + 1) / 2, stride);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemsetAsync(state.get(), 0, 4, s));  // perm(0) = 0: the walk starts at node 0
    flush(ring);
    auto lc = [&](int64_t steps) { peak_chase<<<1, 1, 0, s>>>(ring.as<const uint32_t>(), state.as<uint32_t>(), int(steps)); };
    const int64_t steps = calibrate(s, 256, lc, 1.0, max_steps);
    add(row(name, "ns", Kind::NsPerStep, steps, time_reps(s, reps, [&] { lc(steps); })));
  };

  // HBM: 4 GiB, 80 times the H200's 50 MB of L2 (about 1 ms per launch there).
  {
    const int64_t bytes = int64_t(4) << 30, n = bytes / 16;
    DeviceBuffer buf{size_t(bytes)};
    CUDA_CHECK(cudaMemsetAsync(buf.get(), 0x3c, size_t(bytes), s));
    const unsigned gr = full_grid(peak_hbm_read, 512), gw = full_grid(peak_hbm_write, 512);
    add(row("hbm-read", "bytes/s", Kind::PerSecond, bytes, time_reps(s, reps, [&] {
          peak_hbm_read<<<gr, 512, 0, s>>>(buf.as<const uint4>(), n, sink_u);
        })));
    add(row("hbm-write", "bytes/s", Kind::PerSecond, bytes, time_reps(s, reps, [&] {
          peak_hbm_write<<<gw, 512, 0, s>>>(buf.as<uint4>(), n);
        })));
    // hbm-latency: a ring of 2^21 nodes (256 MB). Building it leaves its last-written lines in L2,
    // so a read of the 4 GiB buffer evicts them before the walk. A launch walks at most 2^16 nodes
    // (~40 ms), so the launches together stay far from coming round to lines visited before.
    chase("hbm-latency", 21, int64_t(1) << 16, [&](const DeviceBuffer&) {
      peak_hbm_read<<<gr, 512, 0, s>>>(buf.as<const uint4>(), n, sink_u);
      CUDA_CHECK(cudaGetLastError());
    });
  }

  // L2: 8 MB, a sixth of the H200's L2 (every architecture the course builds for has >= 4 MB; a
  // smaller L2 would make this row a mix of L2 and DRAM). The first launches fetch it; then it stays.
  {
    const uint32_t elems = (8u << 20) / 16;
    DeviceBuffer buf(size_t(elems) * 16);
    CUDA_CHECK(cudaMemsetAsync(buf.get(), 0x5a, buf.bytes(), s));
    const unsigned g = full_grid(peak_l2_read, 512);
    auto launch = [&](int64_t steps) {
      peak_l2_read<<<g, 512, 0, s>>>(buf.as<const uint4>(), elems - 1, int(steps), sink_u);
    };
    const int64_t steps = calibrate(s, 16, launch, 1.0, int64_t(1) << 24);
    add(row("l2-read", "bytes/s", Kind::PerSecond, int64_t(g) * 512 * steps * 16,
            time_reps(s, reps, [&] { launch(steps); })));
    // l2-latency: a ring of 2^16 nodes (8 MB). Building it wrote 4 bytes of each line, and a line
    // L2 holds only in part must still be fetched from DRAM when it is read (a first version, which
    // walked the fresh ring, measured about HBM's latency); so the grid reads the whole ring first,
    // and from then on every node is an L2 hit.
    chase("l2-latency", 16, int64_t(1) << 24, [&](const DeviceBuffer& ring) {
      const uint32_t ring_elems = uint32_t(ring.bytes() / 16), nt = g * 512;
      const int touch = int(((ring_elems + nt - 1) / nt + 3) / 4 * 4);
      peak_l2_read<<<g, 512, 0, s>>>(ring.as<const uint4>(), ring_elems - 1, touch, sink_u);
      CUDA_CHECK(cudaGetLastError());
    });
  }

  // Shared memory and ldmatrix: a full grid of 256-thread blocks.
  {
    const unsigned gr = full_grid(peak_smem_read, kSmemThreads), gw = full_grid(peak_smem_write, kSmemThreads),
                   gl = full_grid(peak_ldmatrix, kSmemThreads);
    auto per_launch = [&](unsigned g, int64_t iters) { return int64_t(g) * kSmemThreads * iters * 8 * 16; };
    auto lr = [&](int64_t it) { peak_smem_read<<<gr, kSmemThreads, 0, s>>>(int(it), 0u, sink_u); };
    int64_t it = calibrate(s, 64, lr);
    add(row("smem-read", "bytes/s", Kind::PerSecond, per_launch(gr, it), time_reps(s, reps, [&] { lr(it); })));
    auto lw = [&](int64_t i) { peak_smem_write<<<gw, kSmemThreads, 0, s>>>(int(i), 0u, sink_u); };
    it = calibrate(s, 64, lw);
    add(row("smem-write", "bytes/s", Kind::PerSecond, per_launch(gw, it), time_reps(s, reps, [&] { lw(it); })));
    auto ll = [&](int64_t i) { peak_ldmatrix<<<gl, kSmemThreads, 0, s>>>(int(i), 0u, sink_u); };
    it = calibrate(s, 64, ll);
    add(row("ldmatrix", "bytes/s", Kind::PerSecond, per_launch(gl, it), time_reps(s, reps, [&] { ll(it); })));
  }

  // Tensor cores from registers.
  {
    const int64_t warps_per_block = kMmaThreads / 32;
    const unsigned gw = full_grid(peak_wmma_f16, kMmaThreads);
    auto lw = [&](int64_t i) { peak_wmma_f16<<<gw, kMmaThreads, 0, s>>>(int(i), sink_f); };
    int64_t it = calibrate(s, 64, lw);
    add(row("wmma-f16", "flops/s", Kind::PerSecond, int64_t(gw) * warps_per_block * it * 4 * (2 * 16 * 16 * 16),
            time_reps(s, reps, [&] { lw(it); })));
    if (usable_cc >= 80) {
      const unsigned gm = full_grid(peak_mma_sync_f16, kMmaThreads);
      auto lm = [&](int64_t i) { peak_mma_sync_f16<<<gm, kMmaThreads, 0, s>>>(int(i), sink_f); };
      it = calibrate(s, 64, lm);
      add(row("mma-sync-f16", "flops/s", Kind::PerSecond,
              int64_t(gm) * warps_per_block * it * kMmaChains * (2 * 16 * 8 * 16), time_reps(s, reps, [&] { lm(it); })));
    } else {
      notes.push_back("mma-sync-f16: mma.sync.m16n8k16 needs compute capability 8.0; this GPU's code is " +
                      cc_string(usable_cc));
    }
    Timing t;
    int64_t flops = 0;
    std::string why;
    if (measure_wgmma_f16(reps, t, flops, why)) add(row("wgmma-f16", "flops/s", Kind::PerSecond, flops, t));
    else notes.push_back("wgmma-f16: " + why);
  }

  // CUDA cores and the SFU.
  {
    const unsigned gf = full_grid(peak_fp32_fma, kFmaThreads), ge = full_grid(peak_ex2, kFmaThreads);
    auto lf = [&](int64_t i) { peak_fp32_fma<<<gf, kFmaThreads, 0, s>>>(int(i), 0.999f, 1e-3f, sink_f); };
    int64_t it = calibrate(s, 64, lf);
    add(row("fp32-fma", "flops/s", Kind::PerSecond, int64_t(gf) * kFmaThreads * it * 64 * 2,
            time_reps(s, reps, [&] { lf(it); })));
    auto le = [&](int64_t i) { peak_ex2<<<ge, kFmaThreads, 0, s>>>(int(i), sink_f); };
    it = calibrate(s, 64, le);
    add(row("ex2", "ops/s", Kind::PerSecond, int64_t(ge) * kFmaThreads * it * 32, time_reps(s, reps, [&] { le(it); })));
  }

  // Barriers: the whole GPU, then one block alone.
  {
    const unsigned g = full_grid(peak_barrier, kBarThreads);
    auto lb = [&](int64_t i) { peak_barrier<<<g, kBarThreads, 0, s>>>(int(i)); };
    int64_t it = calibrate(s, 64, lb);
    add(row("barrier", "barriers/s", Kind::PerSecond, int64_t(g) * it * 8, time_reps(s, reps, [&] { lb(it); })));
    auto l1 = [&](int64_t i) { peak_barrier<<<1, kBarThreads, 0, s>>>(int(i)); };
    it = calibrate(s, 64, l1);
    add(row("barrier-latency", "ns", Kind::NsPerStep, it * 8, time_reps(s, reps, [&] { l1(it); })));
  }

  // Atomics: 4 MB of floats (2^20), in L2.
  {
    const uint32_t elems = 1u << 20;
    DeviceBuffer buf(size_t(elems) * 4);
    CUDA_CHECK(cudaMemsetAsync(buf.get(), 0, buf.bytes(), s));
    const unsigned g = full_grid(peak_atomic_f32, 512);
    auto la = [&](int64_t steps) { peak_atomic_f32<<<g, 512, 0, s>>>(buf.as<float>(), elems - 1, int(steps)); };
    const int64_t steps = calibrate(s, 16, la, 1.0, int64_t(1) << 24);
    add(row("atomic-f32", "ops/s", Kind::PerSecond, int64_t(g) * 512 * steps, time_reps(s, reps, [&] { la(steps); })));
  }

  // Launch: 1000 empty kernels back to back between one pair of events, per rep.
  {
    const int k = 1000;
    add(row("launch", "us", Kind::UsPerStep, k, time_reps(s, reps, [&] {
          for (int i = 0; i < k; ++i) peak_empty<<<1, 32, 0, s>>>();
        })));
  }
  // Latencies of one warp's dependent instructions (the model's latency term): one block of one warp.
  {
    auto lat = [&](const char* name, auto&& launch) {
      const int64_t it = calibrate(s, 64, launch);
      add(row(name, "ns", Kind::NsPerStep, it * 8, time_reps(s, reps, [&] { launch(it); })));
    };
    lat("smem-latency", [&](int64_t i) { peak_smem_latency<<<1, 32, 0, s>>>(int(i), sink_u); });
    if (usable_cc >= 80) lat("mma-latency", [&](int64_t i) { peak_mma_latency<<<1, 32, 0, s>>>(int(i), sink_f); });
    else notes.push_back("mma-latency: mma.sync.m16n8k16 needs compute capability 8.0; this GPU's code is " + cc_string(usable_cc));
    lat("ex2-latency", [&](int64_t i) { peak_ex2_latency<<<1, 32, 0, s>>>(int(i), sink_f); });
    lat("fma-latency", [&](int64_t i) { peak_fma_latency<<<1, 32, 0, s>>>(int(i), 0.999f, 1e-3f, sink_f); });
  }

  CUDA_CHECK(cudaStreamSynchronize(s));
  return out;
}

}  // namespace fa
