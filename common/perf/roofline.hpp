// What a GPU can do, and the roofline time a ledger predicts on it.
#pragma once
#include <cstdint>
#include <string>

#include "blueprint/ledger.hpp"

namespace fa {

struct DeviceSpec {
  std::string name;
  double hbm_bytes_per_s = 0;   // peak DRAM bandwidth
  double tensor_flops = 0;      // dense fp16/bf16 tensor-core peak with fp32 accumulation (0 = unknown)
  double fp32_flops = 0;        // fp32 CUDA-core peak (FMA = 2 FLOPs)
  int sm_count = 0, cc_major = 0, cc_minor = 0;
  int64_t l2_bytes = 0, smem_per_block_optin = 0, smem_per_sm = 0;
  double sm_clock_hz = 0, mem_clock_hz = 0;
  int bus_width_bits = 0;
  std::string source;           // where the numbers come from ("queried ..." or "datasheet ...")
};

// The H200 SXM by NVIDIA's datasheet: 4.8 TB/s HBM3e; 989 TFLOP/s dense fp16/bf16 tensor cores
// (the datasheet's 1,979 is with 2:4 sparsity). Used when there is no GPU to ask.
DeviceSpec h200_datasheet();

// Dense fp16/bf16 tensor-core FLOPs per clock per SM, by compute capability (fp32 accumulation,
// data-center parts): sm_70 1024, sm_80 2048, sm_90 4096. 0 when unknown.
int tensor_flops_per_clock_per_sm(int cc_major, int cc_minor);
// fp32 FLOPs per clock per SM on CUDA cores (2 per FMA lane): 128 on sm_70/75/80, 256 on sm_86/89/90.
int fp32_flops_per_clock_per_sm(int cc_major, int cc_minor);

struct Prediction {
  double ms = 0;           // Σ over kernels of max(bytes / bandwidth, FLOPs / their unit's peak)
  double ms_memory = 0;    // Σ bytes / bandwidth
  double ms_compute = 0;   // Σ tensor FLOPs / tensor peak + CUDA-core FLOPs / fp32 peak
  bool memory_bound() const { return ms_memory >= ms_compute; }
};
// Kernels run one after another, so each is bounded on its own and the bounds add up.
Prediction predict(const LedgerSet& ls, const DeviceSpec& dev);

}  // namespace fa
