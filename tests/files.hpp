// A whole file as a string, for the tests that read what the programs wrote or what the docs say.
#pragma once
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace fa::test {
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
}  // namespace fa::test
