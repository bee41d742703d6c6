#include "harness/npy.hpp"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace fa {

void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const void* data, size_t bytes) {
  std::ostringstream dict;
  dict << "{'descr': '" << descr << "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) dict << shape[i] << (shape.size() == 1 || i + 1 < shape.size() ? ", " : "");
  dict << "), }";
  std::string header = dict.str();
  // magic (6) + version (2) + header length (2) + header, padded with spaces to a multiple of 64, ending in '\n'.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot write " + path);
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  f.write(reinterpret_cast<const char*>(magic), 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  const unsigned char le[2] = {static_cast<unsigned char>(len & 0xff), static_cast<unsigned char>(len >> 8)};
  f.write(reinterpret_cast<const char*>(le), 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!f) throw std::runtime_error("write failed: " + path);
}

void write_npy_storage(const std::string& path, DType t, const Tensor4& x) {
  const std::vector<int64_t> shape = {x.B, x.H, x.rows, x.cols};
  if (t == DType::f16) {
    std::vector<uint16_t> bits(x.v.size());
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = float_to_half_bits(x.v[i]);
    write_npy(path, "<f2", shape, bits.data(), bits.size() * 2);
  } else {
    write_npy(path, "<f4", shape, x.v.data(), x.v.size() * 4);
  }
}

void write_npy_f32(const std::string& path, const Tensor4& x, bool drop_last_unit) {
  std::vector<int64_t> shape = {x.B, x.H, x.rows, x.cols};
  if (drop_last_unit && x.cols == 1) shape.pop_back();
  write_npy(path, "<f4", shape, x.v.data(), x.v.size() * 4);
}

}  // namespace fa
