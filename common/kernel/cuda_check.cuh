// CUDA error checks and RAII device buffers, for the harness and every step's launcher.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>

namespace fa {

struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void cuda_check(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess) {
    std::ostringstream os;
    os << file << ":" << line << ": " << what << " failed: " << cudaGetErrorName(e) << " (" << cudaGetErrorString(e) << ")";
    throw CudaError(os.str());
  }
}

}  // namespace fa

// Every CUDA runtime call goes through CUDA_CHECK; every launch is followed by CUDA_CHECK_LAUNCH.
#define CUDA_CHECK(call) ::fa::cuda_check((call), #call, __FILE__, __LINE__)
#define CUDA_CHECK_LAUNCH(name) ::fa::cuda_check(cudaGetLastError(), "launch of " name, __FILE__, __LINE__)

namespace fa {

// Owns a cudaMalloc'd buffer; freed on scope exit. Plain device memory, never managed memory: no
// page migration may happen inside a timed or profiled kernel.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_) CUDA_CHECK(cudaMalloc(&p_, bytes_));
  }
  ~DeviceBuffer() { if (p_) cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) { if (p_) cudaFree(p_); p_ = o.p_; bytes_ = o.bytes_; o.p_ = nullptr; o.bytes_ = 0; }
    return *this;
  }
  void* get() const { return p_; }
  template <class T> T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace fa
