#include "core/arch.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace fa {

std::string cc_string(int cc) { return std::to_string(cc / 10) + "." + std::to_string(cc % 10); }

int64_t smem_optin_for_cc(int cc) {
  switch (cc) {
    case 75: return 64 * 1024;
    case 80: case 87: return 163 * 1024;
    case 86: case 89: case 120: case 121: return 99 * 1024;
    case 90: case 100: case 103: return 227 * 1024;
    default: return 0;
  }
}

int parse_cc(const std::string& text) {
  const auto bad = [&] {
    return std::invalid_argument("FA_FAKE_CC=" + text + ": expected a compute capability such as 75 or 7.5");
  };
  int major = 0, minor = 0;
  size_t pos = 0;
  try {
    const size_t dot = text.find('.');
    if (dot == std::string::npos) {
      const int v = std::stoi(text, &pos);
      if (pos != text.size() || v < 10) throw bad();
      major = v / 10, minor = v % 10;
    } else {
      major = std::stoi(text.substr(0, dot), &pos);
      if (pos != dot) throw bad();
      const std::string m = text.substr(dot + 1);
      minor = std::stoi(m, &pos);
      if (pos != m.size() || m.size() != 1) throw bad();
    }
  } catch (const std::logic_error&) {  // stoi's invalid_argument / out_of_range, and bad()
    throw bad();
  }
  if (major < 1 || major > 20 || minor < 0 || minor > 9) throw bad();
  return major * 10 + minor;
}

std::optional<int> fake_cc_from_env() {
  const char* v = std::getenv("FA_FAKE_CC");
  if (v == nullptr || *v == '\0') return std::nullopt;
  return parse_cc(v);
}

GpuCaps with_fake_cc(GpuCaps real, int cc) {
  GpuCaps g = real;
  g.cc = real.cc > 0 && real.cc < cc ? real.cc : cc;
  g.fake_cc = cc;
  g.device_cc = real.cc;
  int64_t smem = smem_optin_for_cc(cc);
  if (smem == 0) smem = real.smem_optin > 0 ? real.smem_optin : 48 * 1024;  // unknown: the device's, or 48 KB
  g.smem_optin = real.smem_optin > 0 && real.smem_optin < smem ? real.smem_optin : smem;
  return g;
}

namespace {

std::string kb(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f KB", double(bytes) / 1024.0);
  return buf;
}

// "this GPU (NVIDIA T4) is 7.5", "this GPU is 7.5 (FA_FAKE_CC=75)", or what the build runs on it.
std::string describe(const GpuCaps& g) {
  std::string who = "this GPU" + (g.name.empty() ? std::string() : " (" + g.name + ")");
  if (g.code_cc > 0 && g.code_cc < g.cc)
    return who + " is " + cc_string(g.cc) + ", but this build runs compute_" + std::to_string(g.code_cc) +
           " code on it (CMAKE_CUDA_ARCHITECTURES=" + (g.built_for.empty() ? "?" : g.built_for) +
           "): configure with -DCMAKE_CUDA_ARCHITECTURES=" + std::to_string(g.cc);
  if (g.fake_cc && g.fake_cc > g.cc) return who + " is " + cc_string(g.cc) + " (FA_FAKE_CC=" + std::to_string(g.fake_cc) + " does not raise it)";
  return who + " is " + cc_string(g.cc) + (g.fake_cc ? " (FA_FAKE_CC=" + std::to_string(g.fake_cc) + ")" : "");
}

}  // namespace

std::string unsupported_reason(const StepInfo& step, const Shape& s, const StepOptions& opts, const GpuCaps& gpu,
                               bool backward) {
  const std::string who = step.program() + ": ";
  if (gpu.code_cc < 0)
    return who + "this build has no code for this GPU (" + gpu.name + ", " + cc_string(gpu.cc) +
           "): it was compiled for CMAKE_CUDA_ARCHITECTURES=" + (gpu.built_for.empty() ? "?" : gpu.built_for) +
           "; configure with -DCMAKE_CUDA_ARCHITECTURES=" + std::to_string(gpu.cc);
  const int cc = gpu.usable_cc();
  if (cc < step.min_cc)
    return who + "needs " + (step.needs.empty() ? std::string("its kernels' instructions") : step.needs) +
           " (compute capability " + cc_string(step.min_cc) + ", sm_" + std::to_string(step.min_cc) +
           (step.max_cc == step.min_cc ? "a, and no other" : ", or later") + "); " + describe(gpu);
  if (step.max_cc > 0 && gpu.cc > step.max_cc)
    return who + "needs " + step.needs + ", which only compute capability " + cc_string(step.max_cc) + " has (sm_" +
           std::to_string(step.max_cc) + "a: an architecture-specific instruction set, not carried forward); " + describe(gpu);
  // [fp8] No GPU runs an FP8 step on fp16 or bf16, nor another step on e4m3.
  if (step.fp8 && !s.fp8) return who + "runs FP8 only (--dtype e4m3)";
  if (!step.fp8 && s.fp8) return who + "has no FP8 path (--dtype e4m3 is step 21's)";
  if (!step.head_dims.empty() && std::find(step.head_dims.begin(), step.head_dims.end(), int(s.d)) == step.head_dims.end()) {
    std::string dims;
    for (int d : step.head_dims) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    return who + "head dimension " + std::to_string(s.d) + " is not compiled for the GPU (d = " + dims + ")" +
           (step.head_dims_why.empty() ? "" : ": " + step.head_dims_why) + "; the blueprint (--backend cpu) runs it";
  }
  if (step.options_reason)
    if (const std::string why = step.options_reason(s, opts); !why.empty()) return who + why;
  if (s.dtype == DType::bf16 && cc < step.bf16_min_cc)
    return who + "bf16 needs compute capability " + cc_string(step.bf16_min_cc) + " (sm_" +
           std::to_string(step.bf16_min_cc) + ": bf16 tensor-core operands) or later; " + describe(gpu) +
           " (--dtype fp16 runs)";
  const auto too_big = [&](int64_t (*f)(const Shape&, const StepOptions&), const char* what) -> std::string {
    if (f == nullptr || gpu.smem_optin <= 0) return "";
    const int64_t need = f(s, opts);
    if (need <= gpu.smem_optin) return "";
    return who + what + "needs " + std::to_string(need) + " bytes (" + kb(need) + ") of shared memory per block at d = " +
           std::to_string(s.d) + "; " + describe(gpu) + " and allows " + std::to_string(gpu.smem_optin) + " (" +
           kb(gpu.smem_optin) + ")";
  };
  if (std::string r = too_big(step.smem_bytes, step.has_backward() ? "the forward " : ""); !r.empty()) return r;
  if (backward && step.has_backward())
    if (std::string r = too_big(step.backward_smem_bytes, "the backward "); !r.empty()) return r;
  return "";
}

void require_supported(const StepInfo& step, const Shape& s, const StepOptions& opts, const GpuCaps& gpu,
                       bool backward) {
  const std::string r = unsupported_reason(step, s, opts, gpu, backward);
  if (!r.empty()) throw Unsupported(r);
}

}  // namespace fa
