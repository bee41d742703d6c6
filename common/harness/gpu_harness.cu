// The GPU harness: device properties, NaN-padded tensors, checked launches and event timing.
// Every step gets its GPU checks and measurements through run_on_gpu() and run_backward_on_gpu();
// none has plumbing of its own, and the two share the buffers, the stray-write check and the timing.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernel/cuda_check.cuh"
#include "harness/gpu.hpp"

namespace fa {

bool gpu_available(std::string& why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    // Without a driver the runtime says "driver version is insufficient", which reads as "upgrade
    // the driver"; what it means is that there is no GPU here to run on.
    int driver = 0;
    cudaDriverGetVersion(&driver);
    if (e == cudaErrorNoDevice) why = "no CUDA device (no NVIDIA GPU found)";
    else if (e == cudaErrorInsufficientDriver && driver == 0) why = "no CUDA device (no NVIDIA driver on this machine: no GPU found)";
    else why = std::string("no CUDA device (cudaGetDeviceCount: ") + cudaGetErrorString(e) + ")";
    cudaGetLastError();  // clear the sticky error so later calls are not confused by it
    return false;
  }
  if (n == 0) { why = "no CUDA device (cudaGetDeviceCount returned 0)"; return false; }
  return true;
}

std::string cuda_version_string() {
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  std::ostringstream os;
  os << "runtime " << rt / 1000 << "." << (rt % 1000) / 10 << ", driver " << drv / 1000 << "." << (drv % 1000) / 10;
  return os.str();
}

namespace {

DeviceSpec query_device_spec(int dev) {
  auto attr = [&](cudaDeviceAttr a) { int v = 0; CUDA_CHECK(cudaDeviceGetAttribute(&v, a, dev)); return v; };
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  DeviceSpec d;
  d.name = prop.name;
  d.sm_count = attr(cudaDevAttrMultiProcessorCount);
  d.cc_major = attr(cudaDevAttrComputeCapabilityMajor);
  d.cc_minor = attr(cudaDevAttrComputeCapabilityMinor);
  d.l2_bytes = attr(cudaDevAttrL2CacheSize);
  d.smem_per_block_optin = attr(cudaDevAttrMaxSharedMemoryPerBlockOptin);
  d.smem_per_sm = attr(cudaDevAttrMaxSharedMemoryPerMultiprocessor);
  d.sm_clock_hz = attr(cudaDevAttrClockRate) * 1e3;          // kHz -> Hz (peak clock)
  d.mem_clock_hz = attr(cudaDevAttrMemoryClockRate) * 1e3;   // kHz -> Hz
  d.bus_width_bits = attr(cudaDevAttrGlobalMemoryBusWidth);
  // Double data rate: two transfers per memory clock on a bus_width-bit bus.
  d.hbm_bytes_per_s = 2.0 * d.mem_clock_hz * d.bus_width_bits / 8.0;
  d.tensor_flops = double(tensor_flops_per_clock_per_sm(d.cc_major, d.cc_minor)) * d.sm_count * d.sm_clock_hz;
  d.fp32_flops = double(fp32_flops_per_clock_per_sm(d.cc_major, d.cc_minor)) * d.sm_count * d.sm_clock_hz;
  std::ostringstream os;
  os << "queried: " << d.sm_count << " SMs at " << d.sm_clock_hz / 1e6 << " MHz, " << d.bus_width_bits
     << "-bit memory at " << d.mem_clock_hz / 1e6 << " MHz; tensor peak = SMs x clock x "
     << tensor_flops_per_clock_per_sm(d.cc_major, d.cc_minor) << " FLOP/clk/SM (sm_" << d.cc_major << d.cc_minor << ")";
  d.source = os.str();
  return d;
}

}  // namespace

// [spec-cache] cudaGetDeviceProperties reads every property, some through the driver, and takes
// from about a millisecond to tens of them; the attributes above are fixed for the process's life.
DeviceSpec gpu_device_spec() {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  static std::mutex m;
  static std::map<int, DeviceSpec> known;
  const std::lock_guard<std::mutex> lock(m);
  auto it = known.find(dev);
  if (it == known.end()) it = known.emplace(dev, query_device_spec(dev)).first;
  return it->second;
}

// [arch] An empty kernel, compiled for the same architectures as every step: which of its images
// the runtime picks for this device says which architecture's code the steps' kernels run.
__global__ void fa_arch_probe() {}

#ifndef FA_CUDA_ARCHITECTURES
#define FA_CUDA_ARCHITECTURES ""
#endif

GpuCaps gpu_caps() {
  static const GpuCaps real = [] {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    auto attr = [&](cudaDeviceAttr a) { int v = 0; CUDA_CHECK(cudaDeviceGetAttribute(&v, a, dev)); return v; };
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    GpuCaps g;
    g.name = prop.name;
    g.cc = 10 * attr(cudaDevAttrComputeCapabilityMajor) + attr(cudaDevAttrComputeCapabilityMinor);
    g.smem_optin = attr(cudaDevAttrMaxSharedMemoryPerBlockOptin);
    g.built_for = FA_CUDA_ARCHITECTURES;
    cudaFuncAttributes probe{};
    const cudaError_t e = cudaFuncGetAttributes(&probe, fa_arch_probe);
    if (e == cudaSuccess) {
      g.code_cc = probe.ptxVersion;  // the virtual architecture the code was compiled for (its __CUDA_ARCH__)
    } else if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction) {
      cudaGetLastError();  // clear it: the refusal says why
      g.code_cc = -1;
    } else {
      CUDA_CHECK(e);
    }
    return g;
  }();
  const std::optional<int> fake = fake_cc_from_env();
  return fake ? with_fake_cc(real, *fake) : real;
}

namespace {

// A [B, H, rows, cols] tensor of `elem`-byte elements (2: the storage type, 4: fp32) inside a
// NaN-filled buffer, with padding after each row, after each head and after each batch.
struct PaddedTensor {
  int64_t B, H, rows, cols, elem;
  int64_t sn, sh, sb;  // strides in elements
  DeviceBuffer buf;
  PaddedTensor(int64_t b, int64_t h, int64_t r, int64_t c, int64_t el, const Padding& pad)
      : B(b), H(h), rows(r), cols(c), elem(el) {
    sn = c + pad.row;
    sh = r * sn + pad.head;
    sb = h * sh + pad.batch;
    buf = DeviceBuffer(static_cast<size_t>(b * sb * el));
  }
  size_t offset(int64_t b, int64_t h, int64_t i, int64_t c) const { return static_cast<size_t>(b * sb + h * sh + i * sn + c); }
  size_t elems() const { return buf.bytes() / static_cast<size_t>(elem); }
};

// Q, K, V, O [B, H, rows, d] in the storage type; L [B, H, N] in fp32, padded after each head and
// batch (its rows are single elements). Gradients are allocated like what they differentiate.
PaddedTensor padded_storage(int64_t B, int64_t H, int64_t rows, int64_t d, const Padding& pad) {
  return PaddedTensor(B, H, rows, d, 2, pad);
}
PaddedTensor padded_lse(const Shape& s, const Padding& pad) {
  return PaddedTensor(s.B, s.H, s.N, 1, 4, Padding{0, pad.head, pad.batch});
}

void poison(const DeviceBuffer& b, cudaStream_t st) {
  // 0xFF bytes are NaN in fp32, fp16 and bf16 alike.
  if (b.bytes()) CUDA_CHECK(cudaMemsetAsync(b.get(), 0xFF, b.bytes(), st));
}

void check_dims(const PaddedTensor& t, const Tensor4& x, const char* what) {
  if (x.B != t.B || x.H != t.H || x.rows != t.rows || x.cols != t.cols)
    throw std::invalid_argument(std::string("GPU harness: ") + what + " does not have the problem's shape");
}

// Host values into the buffer (storage-type bits or fp32), the padding NaN, in one copy.
void upload(PaddedTensor& t, const Tensor4& x, DType dt, const char* what) {
  check_dims(t, x, what);
  std::vector<unsigned char> img(t.buf.bytes(), 0xFF);
  for (int64_t b = 0; b < t.B; ++b)
    for (int64_t h = 0; h < t.H; ++h)
      for (int64_t i = 0; i < t.rows; ++i)
        for (int64_t c = 0; c < t.cols; ++c) {
          unsigned char* at = img.data() + t.offset(b, h, i, c) * static_cast<size_t>(t.elem);
          const float v = x.at(b, h, i, c);
          if (t.elem == 2) { const uint16_t bits = to_bits(dt, v); std::memcpy(at, &bits, 2); }
          else std::memcpy(at, &v, 4);
        }
  CUDA_CHECK(cudaMemcpy(t.buf.get(), img.data(), img.size(), cudaMemcpyHostToDevice));
}

// The buffer back as host values; `stray` counts the padding elements that are no longer NaN as
// poisoned (all bytes 0xFF): anything else is a write outside the tensor.
Tensor4 download(const PaddedTensor& t, DType dt, int64_t& stray) {
  std::vector<unsigned char> img(t.buf.bytes());
  CUDA_CHECK(cudaMemcpy(img.data(), t.buf.get(), img.size(), cudaMemcpyDeviceToHost));
  Tensor4 x(t.B, t.H, t.rows, t.cols);
  std::vector<char> inside(t.elems(), 0);
  for (int64_t b = 0; b < t.B; ++b)
    for (int64_t h = 0; h < t.H; ++h)
      for (int64_t i = 0; i < t.rows; ++i)
        for (int64_t c = 0; c < t.cols; ++c) {
          const size_t e = t.offset(b, h, i, c);
          const unsigned char* at = img.data() + e * static_cast<size_t>(t.elem);
          if (t.elem == 2) { uint16_t bits; std::memcpy(&bits, at, 2); x.at(b, h, i, c) = from_bits(dt, bits); }
          else std::memcpy(&x.at(b, h, i, c), at, 4);
          inside[e] = 1;
        }
  for (size_t e = 0; e < inside.size(); ++e) {
    if (inside[e]) continue;
    const unsigned char* at = img.data() + e * static_cast<size_t>(t.elem);
    stray += std::all_of(at, at + t.elem, [](unsigned char byte) { return byte == 0xFF; }) ? 0 : 1;
  }
  return x;
}

// Q, K, V, O and L of one problem on the device, and the AttnParams that point into them.
struct ForwardBuffers {
  PaddedTensor q, k, v, o, lse;
  ForwardBuffers(const Shape& s, const Padding& pad)
      : q(padded_storage(s.B, s.H, s.N, s.d, pad)), k(padded_storage(s.B, s.hkv(), s.Nk, s.d, pad)),
        v(padded_storage(s.B, s.hkv(), s.Nk, s.d, pad)), o(padded_storage(s.B, s.H, s.N, s.d, pad)), lse(padded_lse(s, pad)) {}
  AttnParams params(const Shape& s, void* workspace) const {
    AttnParams p = shape_params(s);
    p.q = q.buf.get(); p.k = k.buf.get(); p.v = v.buf.get(); p.o = o.buf.get(); p.lse = lse.buf.as<float>();
    p.q_sb = q.sb; p.q_sh = q.sh; p.q_sn = q.sn;
    p.k_sb = k.sb; p.k_sh = k.sh; p.k_sn = k.sn;
    p.v_sb = v.sb; p.v_sh = v.sh; p.v_sn = v.sn;
    p.o_sb = o.sb; p.o_sh = o.sh; p.o_sn = o.sn;
    p.lse_sb = lse.sb; p.lse_sh = lse.sh;
    p.workspace = workspace;
    return p;
  }
};

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { CUDA_CHECK(cudaStreamCreate(&s)); }
  ~Stream() { cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

// [kernel-clock] The L2 flush before every timed rep: a read of kL2FlushBytes (more than four times
// the H200's 60 MB of L2) from a buffer of its own, which leaves the L2 holding clean lines of that
// buffer and none of the step's tensors — so every rep starts from HBM, as a call in a model does
// after other layers ran. (A write would leave dirty lines, whose write-back the next kernel would pay.)
__global__ void fa_l2_flush(const uint4* buf, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcg(buf + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // a use the compiler cannot drop; practically never taken
}

struct L2Flush {
  DeviceBuffer buf{size_t(kL2FlushBytes) + 64};
  L2Flush() { CUDA_CHECK(cudaMemset(buf.get(), 0x5a, buf.bytes())); }
  void operator()(cudaStream_t st) const {
    fa_l2_flush<<<1024, 512, 0, st>>>(buf.as<const uint4>(), size_t(kL2FlushBytes) / 16,
                                       reinterpret_cast<unsigned*>(buf.as<unsigned char>() + kL2FlushBytes));
    CUDA_CHECK(cudaGetLastError());
  }
};
const L2Flush& l2_flush() {
  static const L2Flush f;
  return f;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One timed run: cfg.warmup launches, then cfg.reps timed ones. Before each, `reset` (the outputs
// poisoned again) and the L2 flush, then a synchronize: each rep is one call alone on a cold L2.
// Each is timed twice at once: by CUDA events around it (`ms`) and by the GPU's own records of every
// kernel it ran ([kernel-clock]: `kt`, summed per rep).
template <class Reset, class Launch>
std::vector<double> time_launches(const GpuConfig& cfg, cudaStream_t st, Reset reset, Launch launch, KernelTime& kt,
                                  std::vector<std::vector<DeviceActivity>>& per_rep) {
  std::vector<double> ms;
  if (cfg.reps <= 0) return ms;
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  struct Events { cudaEvent_t a, b; ~Events() { cudaEventDestroy(a); cudaEventDestroy(b); } } guard{e0, e1};
  const L2Flush& flush = l2_flush();
  for (int w = 0; w < cfg.warmup; ++w) launch();
  CUDA_CHECK(cudaStreamSynchronize(st));
  std::vector<std::pair<uint64_t, uint64_t>> windows;
  std::vector<DeviceActivity> all;
  {
    ActivityTrace trace;
    for (int rep = 0; rep < cfg.reps; ++rep) {
      reset();
      flush(st);
      CUDA_CHECK(cudaStreamSynchronize(st));
      const uint64_t t0 = trace.now();
      CUDA_CHECK(cudaEventRecord(e0, st));
      launch();
      CUDA_CHECK(cudaEventRecord(e1, st));
      CUDA_CHECK(cudaEventSynchronize(e1));
      windows.emplace_back(t0, trace.now());
      float t = 0;
      CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    CUDA_CHECK(cudaStreamSynchronize(st));
    all = trace.stop();
    if (!trace.on() || all.empty()) kt.note = trace.why();
  }
  if (kt.note.empty())
    for (const auto& [t0, t1] : windows) {
      per_rep.push_back(in_window(all, t0, t1));
      double sum = 0;
      for (const DeviceActivity& a : per_rep.back()) sum += a.ms();
      kt.ms.push_back(sum);
    }
  return ms;
}

// The kernel clock's summary over every rep of every run: the median sum, and each kernel's median
// (kernels named alike within a call, e.g. a step's two memsets, are summed per rep first).
void summarize(KernelTime& kt, const std::vector<std::vector<DeviceActivity>>& per_rep) {
  if (kt.ms.empty()) return;
  kt.ms_median = median(kt.ms);
  kt.activities = int(per_rep.front().size());
  std::vector<std::string> names;
  for (const DeviceActivity& a : per_rep.front())
    if (std::find(names.begin(), names.end(), a.name) == names.end()) names.push_back(a.name);
  for (const std::string& n : names) {
    std::vector<double> v;
    for (const auto& rep : per_rep) {
      double sum = 0;
      for (const DeviceActivity& a : rep) sum += a.name == n ? a.ms() : 0.0;
      v.push_back(sum);
    }
    kt.parts.emplace_back(n, median(v));
  }
}

// [noise] cfg.runs timed runs; each run's median is one sample. Fills ms (every launch of every
// run), the median of the samples and their spread, and the kernel clock over every rep.
template <class R, class Reset, class Launch>
void time_runs(const GpuConfig& cfg, cudaStream_t st, Reset reset, Launch launch, R& r) {
  std::vector<double> medians;
  std::vector<std::vector<DeviceActivity>> per_rep;
  for (int run = 0; run < std::max(cfg.runs, 1); ++run) {
    const std::vector<double> ms = time_launches(cfg, st, reset, launch, r.kernel, per_rep);
    if (ms.empty()) break;
    r.ms.insert(r.ms.end(), ms.begin(), ms.end());
    medians.push_back(median(ms));
  }
  if (medians.empty()) return;
  r.ms_median = median(medians);
  r.run_min = *std::min_element(medians.begin(), medians.end());
  r.run_max = *std::max_element(medians.begin(), medians.end());
  summarize(r.kernel, per_rep);
}

// [graph-time] cfg.graph_calls launches captured back to back in one CUDA graph (no reset, no flush
// between them: what a model's step replays), replayed once to warm up, then cfg.graph_replays times
// timed with events; the median replay over the calls. A launcher that cannot be captured (one that
// synchronizes or allocates) gets no graph time and a note saying why, and the stream is left usable.
template <class R, class Launch>
void time_graph(const GpuConfig& cfg, cudaStream_t st, Launch launch, R& r) {
  if (cfg.reps <= 0 || cfg.graph_calls <= 0) return;
  CUDA_CHECK(cudaStreamSynchronize(st));
  cudaGraph_t graph = nullptr;
  std::string why;
  CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));
  try {
    for (int k = 0; k < cfg.graph_calls; ++k) launch();
  } catch (const std::exception& e) {
    why = e.what();
  }
  const cudaError_t end = cudaStreamEndCapture(st, &graph);
  if (why.empty() && end != cudaSuccess) why = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(end);
  cudaGraphExec_t exec = nullptr;
  if (why.empty()) {
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    if (e != cudaSuccess) why = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(e);
  }
  if (graph) cudaGraphDestroy(graph);
  if (!why.empty()) {
    cudaGetLastError();  // a failed capture's error is not sticky; clear it
    r.graph_note = "not captured in a CUDA graph: " + why;
    return;
  }
  struct Exec { cudaGraphExec_t x; ~Exec() { cudaGraphExecDestroy(x); } } guard{exec};
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  struct Events { cudaEvent_t a, b; ~Events() { cudaEventDestroy(a); cudaEventDestroy(b); } } events{e0, e1};
  CUDA_CHECK(cudaGraphLaunch(exec, st));
  CUDA_CHECK(cudaStreamSynchronize(st));
  std::vector<double> ms;
  for (int rep = 0; rep < std::max(cfg.graph_replays, 1); ++rep) {
    CUDA_CHECK(cudaEventRecord(e0, st));
    CUDA_CHECK(cudaGraphLaunch(exec, st));
    CUDA_CHECK(cudaEventRecord(e1, st));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t / cfg.graph_calls);
  }
  r.graph_ms = median(ms);
}

}  // namespace

namespace {

// [device-inputs] splitmix64's finalizer: a counter-based generator, any element drawn alone.
__device__ inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// offset + spread·randn (Box–Muller on the hash of the element's index) into every element of a
// padded tensor, rounded to the storage type; the padding is left as it is (NaN).
__global__ void fa_fill_normal(uint16_t* buf, int64_t B, int64_t H, int64_t rows, int64_t cols, int64_t sb, int64_t sh,
                               int64_t sn, uint64_t key, float offset, float spread, bool bf16) {
  const int64_t total = B * H * rows * cols;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = e % cols, r = (e / cols) % rows, h = (e / (cols * rows)) % H, b = e / (cols * rows * H);
    const uint64_t z = mix64(key ^ (uint64_t(e) * 0x100000001b3ull));
    const float u1 = float((z >> 40) + 1) * 0x1p-24f, u2 = float((z >> 16) & 0xffffffull) * 0x1p-24f;
    const float x = offset + spread * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    const uint16_t bits = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(x)) : __half_as_ushort(__float2half_rn(x));
    buf[b * sb + h * sh + r * sn + c] = bits;
  }
}

void fill_normal(PaddedTensor& t, uint64_t seed, uint64_t stream, double offset, double spread, DType dt, cudaStream_t st) {
  fa_fill_normal<<<4096, 256, 0, st>>>(t.buf.as<uint16_t>(), t.B, t.H, t.rows, t.cols, t.sb, t.sh, t.sn,
                                        seed * 0x100000001b3ull + stream * 0x9e3779b97f4a7c15ull, float(offset), float(spread),
                                        dt == DType::bf16);
  CUDA_CHECK(cudaGetLastError());
}

// Rows [r0, r0 + n) of head (b, h) of a storage-type tensor, as host values.
std::vector<float> download_rows(const PaddedTensor& t, int64_t b, int64_t h, int64_t r0, int64_t n, DType dt) {
  std::vector<uint16_t> bits(static_cast<size_t>(n * t.cols));
  if (n > 0)
    CUDA_CHECK(cudaMemcpy2D(bits.data(), size_t(t.cols) * 2, t.buf.as<uint16_t>() + t.offset(b, h, r0, 0), size_t(t.sn) * 2,
                            size_t(t.cols) * 2, size_t(n), cudaMemcpyDeviceToHost));
  std::vector<float> out(bits.size());
  for (size_t e = 0; e < bits.size(); ++e) out[e] = from_bits(dt, bits[e]);
  return out;
}

}  // namespace

namespace {

// The checked launch and the timing, once the inputs are in place.
GpuResult launch_and_time(const StepInfo& step, const Shape& s, const StepOptions& opts, const GpuConfig& cfg,
                          ForwardBuffers& f, Stream& st) {
  DeviceBuffer ws(step.workspace_bytes ? step.workspace_bytes(s, opts) : 0);
  const AttnParams p = f.params(s, ws.get());
  // What the step sets up once per problem (step 17's paged pool), outside the timing.
  if (step.prepare) step.prepare(s, p, opts, st.s);
  auto reset = [&] { poison(f.o.buf, st.s); poison(f.lse.buf, st.s); };
  auto launch = [&] { step.launch(p, opts, st.s); };

  // The checked launch: outputs poisoned first, so anything the kernel fails to write stays NaN.
  // The driver records what it ran ([launches]: grids, registers, shared memory) for the model.
  reset();
  CUDA_CHECK(cudaStreamSynchronize(st.s));
  GpuResult r;
  r.launches = record_launches([&] { launch(); CUDA_CHECK(cudaStreamSynchronize(st.s)); }, r.launches_note);
  r.out.o = download(f.o, s.dtype, r.stray_writes);
  r.out.lse = download(f.lse, s.dtype, r.stray_writes);

  time_runs(cfg, st.s, reset, launch, r);
  time_graph(cfg, st.s, launch, r);
  return r;
}

}  // namespace

GpuResult run_on_gpu_drawn(const StepInfo& step, const Shape& s, uint64_t seed, const StepOptions& opts,
                           const GpuConfig& cfg, std::vector<DeviceSample>& samples) {
  if (!step.launch) throw std::runtime_error("step " + step.id + " has no GPU launcher in this build");
  require_supported(step, s, opts, gpu_caps());  // [arch]
  ForwardBuffers f(s, cfg.pad);
  Stream st;
  for (PaddedTensor* t : {&f.q, &f.k, &f.v}) poison(t->buf, st.s);
  const InputSpec spec{seed};
  fill_normal(f.q, seed, 1, spec.offset, spec.qk_spread, s.dtype, st.s);
  fill_normal(f.k, seed, 2, spec.offset, spec.qk_spread, s.dtype, st.s);
  fill_normal(f.v, seed, 3, spec.offset, spec.v_spread, s.dtype, st.s);
  CUDA_CHECK(cudaStreamSynchronize(st.s));
  // The groups the reference checks: the first and the last sequence, the first and the last
  // key/value head — before any launch, since a decoding step appends into K and V.
  samples.clear();
  const int64_t G = s.H / s.hkv();
  for (int64_t b : {int64_t(0), s.B - 1})
    for (int64_t g : {int64_t(0), s.hkv() - 1}) {
      bool dup = false;
      for (const auto& x : samples) dup = dup || (x.b == b && x.kv_head == g);
      if (dup) continue;
      DeviceSample x;
      x.b = b;
      x.kv_head = g;
      x.shape = s;
      x.shape.B = 1;
      x.shape.H = G;
      x.shape.Hkv = 1;
      x.shape.Nk = s.keys(b);
      if (s.decode()) x.shape.cache_lens = {s.cache_lens[size_t(b)]};
      x.shape.scale = s.softmax_scale();
      x.in.q = Tensor4(1, G, s.N, s.d);
      for (int64_t h = 0; h < G; ++h) {
        const std::vector<float> rows = download_rows(f.q, b, g * G + h, 0, s.N, s.dtype);
        std::copy(rows.begin(), rows.end(), x.in.q.head(0, h));
      }
      x.in.k = Tensor4(1, 1, x.shape.Nk, s.d);
      x.in.v = Tensor4(1, 1, x.shape.Nk, s.d);
      x.in.k.v = download_rows(f.k, b, g, 0, x.shape.Nk, s.dtype);
      x.in.v.v = download_rows(f.v, b, g, 0, x.shape.Nk, s.dtype);
      samples.push_back(std::move(x));
    }
  return launch_and_time(step, s, opts, cfg, f, st);
}

GpuResult run_on_gpu(const StepInfo& step, const Shape& s, const Inputs& in, const StepOptions& opts,
                     const GpuConfig& cfg) {
  if (!step.launch) throw std::runtime_error("step " + step.id + " has no GPU launcher in this build");
  require_supported(step, s, opts, gpu_caps());  // [arch] before anything is allocated or launched
  ForwardBuffers f(s, cfg.pad);
  upload(f.q, in.q, s.dtype, "Q");
  upload(f.k, in.k, s.dtype, "K");
  upload(f.v, in.v, s.dtype, "V");
  Stream st;
  return launch_and_time(step, s, opts, cfg, f, st);
}

GpuBackwardResult run_backward_on_gpu(const StepInfo& step, const Shape& s, const Inputs& in, const Forward& fwd,
                                      const Tensor4& dO, const StepOptions& opts, const GpuConfig& cfg) {
  if (!step.launch_backward) throw std::runtime_error("step " + step.id + " has no GPU backward launcher in this build");
  require_supported(step, s, opts, gpu_caps(), true);  // [arch]
  ForwardBuffers f(s, cfg.pad);
  upload(f.q, in.q, s.dtype, "Q");
  upload(f.k, in.k, s.dtype, "K");
  upload(f.v, in.v, s.dtype, "V");
  upload(f.o, fwd.o, s.dtype, "O");
  upload(f.lse, fwd.lse, s.dtype, "L");
  // dO like O, dQ like Q, dK and dV like K and V: the same layouts, so BwdParams needs no strides of its own.
  PaddedTensor dout = padded_storage(s.B, s.H, s.N, s.d, cfg.pad), dq = padded_storage(s.B, s.H, s.N, s.d, cfg.pad),
               dk = padded_storage(s.B, s.hkv(), s.Nk, s.d, cfg.pad), dv = padded_storage(s.B, s.hkv(), s.Nk, s.d, cfg.pad);
  upload(dout, dO, s.dtype, "dO");
  DeviceBuffer ws(step.backward_workspace_bytes ? step.backward_workspace_bytes(s, opts) : 0);
  BwdParams p;
  p.f = f.params(s, nullptr);
  p.dout = dout.buf.get();
  p.dq = dq.buf.get();
  p.dk = dk.buf.get();
  p.dv = dv.buf.get();
  p.workspace = ws.get();
  Stream st;
  GpuBackwardResult r;
  // [saved-for-backward] What the forward writes for this backward beyond O and L (step 08's
  // --bwd stored: P): poisoned, written once by the step's own kernel from Q, K, V, O and L, and
  // timed apart, with the same warm-up and repetitions. The backward's resets leave it alone, as
  // they leave Q or L: for the backward it is an input.
  DeviceBuffer saved(step.backward_saved_bytes ? step.backward_saved_bytes(s, opts) : 0);
  p.saved = saved.get();
  if (saved.bytes()) {
    if (!step.launch_save) throw std::logic_error("step " + step.id + " saves tensors for its backward but has no launch_save");
    poison(saved, st.s);
    auto save = [&] { step.launch_save(p, opts, st.s); };
    save();
    CUDA_CHECK(cudaStreamSynchronize(st.s));
    KernelTime unused;
    std::vector<std::vector<DeviceActivity>> unused_reps;
    r.save_ms = time_launches(cfg, st.s, [] {}, save, unused, unused_reps);
    r.save_ms_median = median(r.save_ms);
  }
  // The scratch is poisoned too: a launcher must initialize whatever it accumulates into.
  auto reset = [&] { poison(dq.buf, st.s); poison(dk.buf, st.s); poison(dv.buf, st.s); poison(ws, st.s); };
  auto launch = [&] { step.launch_backward(p, opts, st.s); };

  reset();
  CUDA_CHECK(cudaStreamSynchronize(st.s));
  r.launches = record_launches([&] { launch(); CUDA_CHECK(cudaStreamSynchronize(st.s)); }, r.launches_note);
  r.grads.dq = download(dq, s.dtype, r.stray_writes);
  r.grads.dk = download(dk, s.dtype, r.stray_writes);
  r.grads.dv = download(dv, s.dtype, r.stray_writes);

  time_runs(cfg, st.s, reset, launch, r);
  time_graph(cfg, st.s, launch, r);
  return r;
}

}  // namespace fa
