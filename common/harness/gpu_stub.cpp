// Built without CUDA (no CUDA compiler, or -DFA_ENABLE_CUDA=OFF): the GPU is never available, and
// the runner uses blueprints.
#include <stdexcept>

#include "harness/gpu.hpp"

namespace fa {

bool gpu_available(std::string& why) {
  why = "this build has no CUDA (configured without it)";
  return false;
}
DeviceSpec gpu_device_spec() { throw std::runtime_error("built without CUDA"); }
GpuCaps gpu_caps() { throw std::runtime_error("built without CUDA"); }
std::string cuda_version_string() { return "none"; }
GpuResult run_on_gpu(const StepInfo&, const Shape&, const Inputs&, const StepOptions&, const GpuConfig&) {
  throw std::runtime_error("built without CUDA");
}
GpuResult run_on_gpu_drawn(const StepInfo&, const Shape&, uint64_t, const StepOptions&, const GpuConfig&,
                           std::vector<DeviceSample>&) {
  throw std::runtime_error("built without CUDA");
}
std::vector<PeakResult> measure_peaks(int, std::vector<std::string>&) { throw std::runtime_error("built without CUDA"); }
GpuBackwardResult run_backward_on_gpu(const StepInfo&, const Shape&, const Inputs&, const Forward&, const Tensor4&,
                                      const StepOptions&, const GpuConfig&) {
  throw std::runtime_error("built without CUDA");
}

}  // namespace fa
