// [arch] Which GPUs can run which step: the one rule every launch passes through.
//
// Each step declares what its kernels need in its StepInfo (min_cc and needs, bf16_min_cc, and its
// shared memory per block from its schedule). Before anything is launched — by the step programs,
// the tests, the tour and bench alike — run_on_gpu() and run_backward_on_gpu() hold those needs
// against the device (require_supported), and the step program does the same before it computes
// anything; a refusal is an Unsupported exception, which the program turns into exit 2 and
// "stepNN: cannot run: <message>". On the device side, what an architecture lacks is compiled out
// (common/kernel/arch.cuh) and would trap; the host refuses first.
//
// FA_FAKE_CC=75 (or 7.5) makes the device look like one of compute capability 7.5, with that
// architecture's shared-memory limit, so that a refusal can be tried on any GPU; with
// `--backend gpu` and no GPU at all it stands for one, and the step program refuses as it would
// on such a GPU.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/problem.hpp"
#include "core/step.hpp"

namespace fa {

// What the kernels may use on one GPU.
struct GpuCaps {
  std::string name;        // "NVIDIA H200"; empty for a GPU that FA_FAKE_CC assumes without a device
  int cc = 0;              // compute capability as major·10 + minor: 75, 80, 86, 89, 90
  // The virtual architecture (compute_XX) of the code this build runs on this GPU, as cc: the
  // runtime picks it from CMAKE_CUDA_ARCHITECTURES (a build for 75 alone runs compute_75 code on
  // an sm_90, JIT-compiled, with everything sm_75 lacks compiled out). 0: not known (as cc); -1:
  // the build has no code this GPU can run.
  int code_cc = 0;
  int64_t smem_optin = 0;  // shared memory per block a kernel may opt in to (bytes)
  std::string built_for;   // CMAKE_CUDA_ARCHITECTURES of this build ("75,80,86,89,90"), for messages
  int fake_cc = 0;         // the FA_FAKE_CC that set cc and smem_optin (0: none)
  int device_cc = 0;       // with fake_cc: the device's own compute capability (0: no device)
  // The compute capability the kernels can count on: the device's, or less when the code is older.
  int usable_cc() const { return code_cc > 0 && code_cc < cc ? code_cc : cc; }
};

// "7.5" for 75.
std::string cc_string(int cc);
// Shared memory per block a kernel may opt in to, by compute capability (NVIDIA's table: 64 KB on
// 7.5, 163 KB on 8.0 and 8.7, 99 KB on 8.6, 8.9 and 12.x, 227 KB on 9.0 and 10.x); 0 when unknown.
int64_t smem_optin_for_cc(int cc);
// A compute capability as written in FA_FAKE_CC: "75" or "7.5" -> 75. Throws std::invalid_argument.
int parse_cc(const std::string& text);
// FA_FAKE_CC from the environment, if set.
std::optional<int> fake_cc_from_env();
// `real` (a device's, or GpuCaps{} for none) as a GPU of compute capability `cc`: its shared-memory
// limit that architecture's. A fake can only take away: never more than the real device has.
GpuCaps with_fake_cc(GpuCaps real, int cc);

// Why `step` cannot run shape `s` with `opts` on `gpu` — its forward, and with `backward` its
// backward too — or "" when it can. The message names the step, what is missing (an instruction,
// bf16, shared memory) and what it needs (a compute capability, or bytes per block).
std::string unsupported_reason(const StepInfo& step, const Shape& s, const StepOptions& opts, const GpuCaps& gpu,
                               bool backward = false);
// The same, thrown as Unsupported.
void require_supported(const StepInfo& step, const Shape& s, const StepOptions& opts, const GpuCaps& gpu,
                       bool backward = false);

}  // namespace fa
