// .npy files: the header NumPy expects and the bytes behind it.
#include <doctest/doctest.h>

#include "files.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "harness/npy.hpp"

using namespace fa;

using fa::test::slurp;

TEST_CASE("npy: header, alignment and float16 payload") {
  const std::string dir = std::filesystem::temp_directory_path() / "fa_npy_test";
  std::filesystem::create_directories(dir);
  Tensor4 t(1, 2, 3, 4);
  for (size_t i = 0; i < t.v.size(); ++i) t.v[i] = round_to(DType::f16, 0.5f * float(i) - 3.0f);
  write_npy_storage(dir + "/x.npy", DType::f16, t);
  const std::string s = slurp(dir + "/x.npy");
  REQUIRE(s.size() > 10);
  CHECK(s.substr(0, 6) == "\x93NUMPY");
  const size_t hlen = size_t(uint8_t(s[8])) | (size_t(uint8_t(s[9])) << 8);
  CHECK((10 + hlen) % 64 == 0);
  const std::string header = s.substr(10, hlen);
  CHECK(header.find("'descr': '<f2'") != std::string::npos);
  CHECK(header.find("'shape': (1, 2, 3, 4)") != std::string::npos);
  CHECK(header.back() == '\n');
  REQUIRE(s.size() == 10 + hlen + t.v.size() * 2);
  for (size_t i = 0; i < t.v.size(); ++i) {
    const uint16_t bits = uint16_t(uint8_t(s[10 + hlen + 2 * i])) | uint16_t(uint8_t(s[11 + hlen + 2 * i]) << 8);
    CHECK(half_bits_to_float(bits) == t.v[i]);
  }
}

TEST_CASE("npy: L is float32 [B, H, N] and bf16 tensors are saved as float32") {
  const std::string dir = std::filesystem::temp_directory_path() / "fa_npy_test";
  std::filesystem::create_directories(dir);
  Tensor4 l(2, 1, 5, 1, 1.25f);
  write_npy_f32(dir + "/lse.npy", l, true);
  std::string s = slurp(dir + "/lse.npy");
  CHECK(s.find("'descr': '<f4'") != std::string::npos);
  CHECK(s.find("'shape': (2, 1, 5)") != std::string::npos);
  Tensor4 b(1, 1, 1, 3, 2.0f);
  write_npy_storage(dir + "/b.npy", DType::bf16, b);
  s = slurp(dir + "/b.npy");
  CHECK(s.find("'descr': '<f4'") != std::string::npos);
  CHECK(s.find("'shape': (1, 1, 1, 3)") != std::string::npos);
}
