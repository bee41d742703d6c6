#include "perf/roofline.hpp"

#include <algorithm>

namespace fa {

DeviceSpec h200_datasheet() {
  DeviceSpec d;
  d.name = "NVIDIA H200 (datasheet)";
  d.hbm_bytes_per_s = 4.8e12;
  d.tensor_flops = 989e12;
  d.fp32_flops = 67e12;
  d.sm_count = 132;
  d.cc_major = 9;
  d.l2_bytes = 50 * 1024 * 1024;
  d.smem_per_block_optin = 227 * 1024;
  d.source = "NVIDIA H200 SXM datasheet: 4.8 TB/s, 989 TFLOP/s dense fp16/bf16, 67 TFLOP/s fp32";
  return d;
}

int tensor_flops_per_clock_per_sm(int cc_major, int cc_minor) {
  const int cc = cc_major * 10 + cc_minor;
  if (cc == 70 || cc == 72) return 1024;
  if (cc == 75) return 1024;
  if (cc == 80) return 2048;
  if (cc == 86 || cc == 87 || cc == 89) return 1024;
  if (cc == 90) return 4096;
  return 0;
}

int fp32_flops_per_clock_per_sm(int cc_major, int cc_minor) {
  const int cc = cc_major * 10 + cc_minor;
  if (cc == 70 || cc == 72 || cc == 75 || cc == 80) return 128;
  if (cc == 86 || cc == 87 || cc == 89 || cc == 90) return 256;
  return 0;
}

Prediction predict(const LedgerSet& ls, const DeviceSpec& dev) {
  Prediction p;
  for (const auto& kl : ls.kernels) {
    const Ledger& led = kl.second;
    const double mem = dev.hbm_bytes_per_s > 0 ? double(led.gmem_read + led.gmem_write + led.gmem_atomic) / dev.hbm_bytes_per_s * 1e3 : 0.0;
    const double cmp = (dev.tensor_flops > 0 ? double(led.matmul_flops) / dev.tensor_flops * 1e3 : 0.0) +
                       (dev.fp32_flops > 0 ? double(led.cuda_core_flops) / dev.fp32_flops * 1e3 : 0.0);
    p.ms_memory += mem;
    p.ms_compute += cmp;
    p.ms += std::max(mem, cmp);
  }
  return p;
}

}  // namespace fa
