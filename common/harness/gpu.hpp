// The GPU harness as plain C++ (no CUDA headers), so the runner and the tests build without CUDA.
// Implemented in gpu_harness.cu when CUDA is on, and in gpu_stub.cpp otherwise.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/arch.hpp"
#include "perf/launches.hpp"
#include "perf/roofline.hpp"
#include "core/problem.hpp"
#include "core/step.hpp"
#include "kernel/attn_params.hpp"

namespace fa {

// Extra elements placed around every tensor on the device and filled with NaN: per row (after d),
// per head (after the rows) and per batch (after the heads). A kernel that reads past a ragged
// tile's edge — which memcheck cannot see inside one allocation — then poisons its output.
struct Padding {
  int64_t row = 0, head = 0, batch = 0;
};

// [graph-time] The calls a CUDA graph holds by default (--graph K changes it).
inline constexpr int kGraphCalls = 10;

struct GpuConfig {
  int warmup = 3;
  int reps = 20;  // 0: one checked launch, no timing
  // [noise] Timed runs: each is `warmup` launches then `reps` timed ones, its median one sample;
  // ms_median is the median of the runs' medians, and their min and max are the spread.
  int runs = 1;
  // [graph-time] After the timed runs: `graph_calls` launches captured back to back in one CUDA graph,
  // the graph replayed `graph_replays` times; graph_ms is the median replay over graph_calls.
  // 0: no graph.
  int graph_calls = kGraphCalls;
  int graph_replays = 3;
  Padding pad;
};

// [kernel-clock] The clock every speed comparison of the course uses, on both sides (docs/profiling.md,
// "One clock"): a call's kernel time is the GPU time of every kernel, memset and memcpy it launches,
// summed (CUPTI's activity records), each rep after the L2 was flushed by reading kL2FlushBytes of a
// buffer of its own; the median over the reps. scripts/clock.py does the same for PyTorch.
inline constexpr long long kL2FlushBytes = 256ll << 20;
inline constexpr const char* kClockMethod = "kernel: CUPTI, every kernel summed; L2 flushed (256 MiB read) before each rep";

// What one timed launch did on the GPU, summed, and each kernel's share (memsets and memcpys too).
struct KernelTime {
  std::vector<double> ms;                                // every timed rep, in order
  double ms_median = 0;
  std::vector<std::pair<std::string, double>> parts;     // per kernel (launch order): its median over the reps
  std::string note;                                      // why there is none (no CUPTI, a profiler holds it)
  int activities = 0;                                    // records per rep (kernels + memsets + memcpys)
};

struct GpuResult {
  Forward out;               // O and L copied back from the checked launch
  std::vector<double> ms;    // each timed launch (CUDA events around it, cold L2), in order
  double ms_median = 0;
  double run_min = 0, run_max = 0;  // the spread of the runs' medians ([noise])
  KernelTime kernel;         // [kernel-clock] the same launches by the GPU's own records
  double graph_ms = 0;       // [graph-time] per call, 0 where not measured (graph_note says why)
  std::string graph_note;
  int64_t stray_writes = 0;  // padding elements of O or L that are no longer NaN after the launch
  // [launches] What the checked launch ran, kernel by kernel (empty when not recorded: why).
  std::vector<KernelLaunch> launches;
  std::string launches_note;
};

// True when a CUDA device can be used; otherwise `why` says why not (one line).
bool gpu_available(std::string& why);
// The current device's spec, queried once per device and process ([spec-cache]): the name needs
// cudaGetDeviceProperties, which takes milliseconds, so a caller on a hot path (the Python package
// asks before every call) must not pay it again.
DeviceSpec gpu_device_spec();
// What the kernels may use on the current device (common/core/arch.hpp): its compute capability, the
// architecture of this build's code for it, its opt-in shared memory per block — with FA_FAKE_CC
// applied when it is set.
GpuCaps gpu_caps();
std::string cuda_version_string();   // "runtime 13.0, driver 13.0"

// Both first hold the step's needs against gpu_caps() and throw Unsupported, before anything is
// allocated or launched, for what this GPU cannot run (require_supported, common/core/arch.hpp).
//
// The launchers' AttnParams carry the whole Shape, dropout's P, seed and offset included
// (shape_params below).
//
// Upload the inputs (inside NaN-padded buffers when cfg.pad is set), poison O and L with NaN, launch
// the step once and read back; then, if cfg.reps > 0, warm up and time cfg.reps launches (O and L
// poisoned again and the L2 flushed before each) with CUDA events and by the kernel clock, and report
// the medians; then the graph time. Throws on any CUDA error.
GpuResult run_on_gpu(const StepInfo& step, const Shape& s, const Inputs& in, const StepOptions& opts,
                     const GpuConfig& cfg);

// [device-inputs] A problem too large to draw and hold on the host (inputs_on_device): Q, K and V
// drawn on the device instead (offset + randn from a counter-based hash of `seed` and the
// element's index, rounded to the storage type; the padding NaN), and the inputs of a few
// (sequence, key/value head) groups — every query head of the group, the keys the sequence sees —
// copied back for the reference to check (GpuResult::samples). Otherwise as run_on_gpu.
struct DeviceSample {
  int64_t b = 0, kv_head = 0;
  Shape shape;  // B = 1, H = the group's query heads, Hkv = 1, Nk = the keys sequence b sees
  Inputs in;
};
// Above 2^28 elements of K (1 GiB of floats per tensor on the host, and seconds of drawing and
// copying per run) the inputs are drawn where they are used.
inline bool inputs_on_device(const Shape& s) { return s.kv_elems() > (int64_t(1) << 28); }
GpuResult run_on_gpu_drawn(const StepInfo& step, const Shape& s, uint64_t seed, const StepOptions& opts,
                           const GpuConfig& cfg, std::vector<DeviceSample>& samples);

// [peaks] What each resource of the GPU at hand delivers, measured rather than read from a
// datasheet (common/perf/peaks.cu): one microbenchmark per resource the kernels use — HBM and L2 reads,
// HBM writes, shared memory, ldmatrix, the tensor cores (wmma, mma.sync, wgmma), FMA, the SFU's
// ex2, barriers, atomics, load latencies and the launch — each warmed up, then the median of
// `reps` launches timed with CUDA events. The per-resource model (common/perf/model.*) reads the rows
// by name; bench --peaks writes them (docs/profiling.md, "Measured ceilings").
struct PeakResult {
  std::string name;      // "hbm-read", "wgmma-f16", "l2-latency", ...
  std::string unit;      // "bytes/s", "flops/s", "ops/s", "barriers/s"; "ns" or "us" for a latency
  double value = 0;      // the headline: amount per second, or ns (us) per dependent step (launch)
  int64_t amount = 0;    // work per launch in the unit's numerator (bytes, FLOPs, ops, barriers),
                         // or the number of dependent steps (loads, barriers, launches) timed together
  double ms_median = 0;  // one launch (for "launch": one batch of `amount` launches)
  int reps = 0;
};
// The name of every benchmark measure_peaks knows, in the order it runs them: the one list the
// tests and tools count against (measure_peaks throws if it writes a row that is not on it).
inline const std::vector<std::string>& peak_names() {
  static const std::vector<std::string> names = {
      "hbm-read", "hbm-write", "hbm-latency", "l2-read", "l2-latency", "smem-read", "smem-write", "ldmatrix",
      "wmma-f16", "mma-sync-f16", "wgmma-f16", "fp32-fma", "ex2", "barrier", "barrier-latency", "atomic-f32", "launch",
      "smem-latency", "mma-latency", "ex2-latency", "fma-latency"};
  return names;
}
// Every benchmark, in a fixed order. One that cannot run here (mma.sync before sm_80; wgmma
// without sm_90a code or an sm_90 device) is left out and `notes` gets a line saying why.
std::vector<PeakResult> measure_peaks(int reps, std::vector<std::string>& notes);

struct GpuBackwardResult {
  Grads grads;               // dQ, dK, dV copied back from the checked launch
  std::vector<double> ms;    // each timed launch of the whole backward (all its kernels)
  double ms_median = 0;
  double run_min = 0, run_max = 0;
  KernelTime kernel;         // [kernel-clock]
  double graph_ms = 0;       // [graph-time]
  std::string graph_note;
  int64_t stray_writes = 0;  // padding elements of dQ, dK or dV that are no longer NaN
  std::vector<KernelLaunch> launches;
  std::string launches_note;
  // [saved-for-backward] The step's launch_save (what the forward writes for this backward), timed
  // apart: each timed launch and their median; empty and 0 for a backward that reads nothing saved.
  std::vector<double> save_ms;
  double save_ms_median = 0;
};

// The backward the same way: Q, K, V, the forward's O and L, and dO uploaded inside NaN-padded
// buffers (dQ, dK, dV padded and poisoned like O); one checked launch of step.launch_backward, then
// cfg.reps timed ones (dQ, dK, dV poisoned before each, outside the timed interval). The backward's
// workspace is poisoned with them: a launcher must initialize the scratch it accumulates into.
// A step that saves tensors for its backward (StepInfo::backward_saved_bytes) has them written
// first by its launch_save, into a poisoned buffer, and that kernel timed apart (save_ms).
GpuBackwardResult run_backward_on_gpu(const StepInfo& step, const Shape& s, const Inputs& in, const Forward& fwd,
                                      const Tensor4& dO, const StepOptions& opts, const GpuConfig& cfg);

// [shape-params] The Shape's part of a launcher's AttnParams: everything but the pointers, the strides
// and the workspace. The one mapping, for the runner's buffers and the Python package's tensors alike (a
// field set in one place and not the other once sent step 17 a decode as a plain forward).
inline AttnParams shape_params(const Shape& s) {
  AttnParams p;
  p.B = int(s.B), p.H = int(s.H), p.N = int(s.N), p.Nk = int(s.Nk), p.d = int(s.d);
  p.Hkv = int(s.hkv());
  p.window = int(s.window);
  p.decode = s.decode();
  p.causal = s.causal;
  p.bf16 = s.dtype == DType::bf16;
  p.fp8 = s.fp8, p.fp8_block = s.fp8_block, p.incoherent = s.incoherent;  // [fp8]
  p.scale = static_cast<float>(s.softmax_scale());
  // [dropout] The mask's parameters: the backward (BwdParams::f) redraws the forward's.
  p.dropout = static_cast<float>(s.dropout);
  p.dropout_seed = s.dropout_seed;
  p.dropout_offset = s.dropout_offset;
  return p;
}

}  // namespace fa
