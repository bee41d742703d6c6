// Minimal .npy writer (format version 1.0, little-endian, C order) for NumPy and PyTorch:
//   np.load("o.npy")  /  torch.from_numpy(np.load("o.npy"))
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/problem.hpp"

namespace fa {

// descr: "<f4" (float32), "<f2" (float16) or "|u1" (uint8: e4m3 codes, [fp8]). Throws std::runtime_error if the file cannot be written.
void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const void* data, size_t bytes);
// A tensor in the storage type: float16 for fp16; float32 for bf16 (exact; NumPy has no bf16).
void write_npy_storage(const std::string& path, DType t, const Tensor4& x);
// A float32 tensor; drop_last_unit removes a trailing dimension of 1 ([B,H,N,1] -> [B,H,N]).
void write_npy_f32(const std::string& path, const Tensor4& x, bool drop_last_unit = false);

}  // namespace fa
