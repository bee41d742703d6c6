// The GPU harness: device properties, NaN-padded tensors, checked launches and event timing.
// Every step gets its GPU checks and measurements through run_on_gpu(); none has plumbing of its own.
#include <algorithm>
#include <cstring>
#include <sstream>
#include <vector>

#include "cuda_check.cuh"
#include "gpu.hpp"

namespace fa {

bool gpu_available(std::string& why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    why = std::string("no CUDA device (cudaGetDeviceCount: ") + cudaGetErrorString(e) + ")";
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

DeviceSpec gpu_device_spec() {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
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

namespace {

// A [B, H, rows, cols] tensor of 16-bit elements inside a NaN-filled buffer, with padding after
// each row, after each head and after each batch.
struct PaddedTensor {
  int64_t B, H, rows, cols;
  int64_t sn, sh, sb;  // strides in elements
  DeviceBuffer buf;
  PaddedTensor(int64_t b, int64_t h, int64_t r, int64_t c, int elem, const Padding& pad)
      : B(b), H(h), rows(r), cols(c) {
    sn = c + pad.row;
    sh = r * sn + pad.head;
    sb = h * sh + pad.batch;
    buf = DeviceBuffer(static_cast<size_t>(b * sb) * elem);
  }
};

void poison(const DeviceBuffer& b, cudaStream_t st) {
  // 0xFF bytes are NaN in fp32, fp16 and bf16 alike.
  CUDA_CHECK(cudaMemsetAsync(b.get(), 0xFF, b.bytes(), st));
}

void upload(PaddedTensor& t, const Tensor4& x, DType dt) {
  std::vector<uint16_t> bits(x.v.size());
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = to_bits(dt, x.v[i]);
  CUDA_CHECK(cudaMemset(t.buf.get(), 0xFF, t.buf.bytes()));
  for (int64_t b = 0; b < t.B; ++b)
    for (int64_t h = 0; h < t.H; ++h)
      CUDA_CHECK(cudaMemcpy2D(t.buf.as<uint16_t>() + b * t.sb + h * t.sh, t.sn * 2, bits.data() + x.index(b, h, 0, 0),
                              t.cols * 2, t.cols * 2, t.rows, cudaMemcpyHostToDevice));
}

}  // namespace

GpuResult run_on_gpu(const StepInfo& step, const Shape& s, const Inputs& in, const StepOptions& opts,
                     const GpuConfig& cfg) {
  if (!step.launch) throw std::runtime_error("step " + step.id + " has no GPU launcher in this build");
  const DType dt = s.dtype;
  PaddedTensor q(s.B, s.H, s.N, s.d, 2, cfg.pad), k(s.B, s.H, s.Nk, s.d, 2, cfg.pad),
      v(s.B, s.H, s.Nk, s.d, 2, cfg.pad), o(s.B, s.H, s.N, s.d, 2, cfg.pad);
  // L: [B, H, N] fp32 with padding after each head and batch (its rows are single elements).
  Padding lpad{0, cfg.pad.head, cfg.pad.batch};
  PaddedTensor lse(s.B, s.H, s.N, 1, 4, lpad);
  upload(q, in.q, dt);
  upload(k, in.k, dt);
  upload(v, in.v, dt);
  const size_t ws_bytes = step.workspace_bytes ? step.workspace_bytes(s, opts) : 0;
  DeviceBuffer ws(ws_bytes);

  AttnParams p;
  p.q = q.buf.get(); p.k = k.buf.get(); p.v = v.buf.get(); p.o = o.buf.get(); p.lse = lse.buf.as<float>();
  p.q_sb = q.sb; p.q_sh = q.sh; p.q_sn = q.sn;
  p.k_sb = k.sb; p.k_sh = k.sh; p.k_sn = k.sn;
  p.v_sb = v.sb; p.v_sh = v.sh; p.v_sn = v.sn;
  p.o_sb = o.sb; p.o_sh = o.sh; p.o_sn = o.sn;
  p.lse_sb = lse.sb; p.lse_sh = lse.sh;
  p.B = int(s.B); p.H = int(s.H); p.N = int(s.N); p.Nk = int(s.Nk); p.d = int(s.d);
  p.causal = s.causal;
  p.bf16 = dt == DType::bf16;
  p.scale = static_cast<float>(s.softmax_scale());
  p.workspace = ws.get();

  cudaStream_t st = nullptr;
  CUDA_CHECK(cudaStreamCreate(&st));
  struct StreamGuard { cudaStream_t s; ~StreamGuard() { cudaStreamDestroy(s); } } guard{st};

  // The checked launch: outputs poisoned first, so anything the kernel fails to write stays NaN.
  poison(o.buf, st);
  poison(lse.buf, st);
  step.launch(p, opts, st);
  CUDA_CHECK(cudaStreamSynchronize(st));

  GpuResult r;
  r.out.o = Tensor4(s.B, s.H, s.N, s.d);
  r.out.lse = Tensor4(s.B, s.H, s.N, 1);
  {
    std::vector<uint16_t> ob(o.buf.bytes() / 2);
    std::vector<float> lb(lse.buf.bytes() / 4);
    CUDA_CHECK(cudaMemcpy(ob.data(), o.buf.get(), o.buf.bytes(), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(lb.data(), lse.buf.get(), lse.buf.bytes(), cudaMemcpyDeviceToHost));
    std::vector<char> inside_o(ob.size(), 0), inside_l(lb.size(), 0);
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t h = 0; h < s.H; ++h)
        for (int64_t i = 0; i < s.N; ++i) {
          for (int64_t c = 0; c < s.d; ++c) {
            const size_t at = static_cast<size_t>(b * o.sb + h * o.sh + i * o.sn + c);
            r.out.o.at(b, h, i, c) = from_bits(dt, ob[at]);
            inside_o[at] = 1;
          }
          const size_t la = static_cast<size_t>(b * lse.sb + h * lse.sh + i);
          r.out.lse.at(b, h, i, 0) = lb[la];
          inside_l[la] = 1;
        }
    // Padding must still be NaN (all bytes 0xFF): anything else is a write outside O or L.
    for (size_t i = 0; i < ob.size(); ++i) r.stray_writes += (!inside_o[i] && ob[i] != 0xFFFFu) ? 1 : 0;
    for (size_t i = 0; i < lb.size(); ++i) {
      uint32_t x;
      std::memcpy(&x, &lb[i], 4);
      r.stray_writes += (!inside_l[i] && x != 0xFFFFFFFFu) ? 1 : 0;
    }
  }

  if (cfg.reps > 0) {
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    for (int w = 0; w < cfg.warmup; ++w) step.launch(p, opts, st);
    CUDA_CHECK(cudaStreamSynchronize(st));
    for (int rep = 0; rep < cfg.reps; ++rep) {
      poison(o.buf, st);
      poison(lse.buf, st);
      CUDA_CHECK(cudaEventRecord(e0, st));
      step.launch(p, opts, st);
      CUDA_CHECK(cudaEventRecord(e1, st));
      CUDA_CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      r.ms.push_back(ms);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    std::vector<double> sorted = r.ms;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    r.ms_median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  }
  return r;
}

}  // namespace fa
