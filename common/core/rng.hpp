// A small, fully specified random generator, so a seed gives the same inputs on every platform
// (std::normal_distribution is implementation-defined). splitmix64 + Box–Muller.
#pragma once
#include <cmath>
#include <cstdint>

namespace fa {

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next_u64() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1]: never 0, so log() below is finite.
  double uniform() { return (static_cast<double>(next_u64() >> 11) + 1.0) * 0x1p-53; }
  double normal() {
    if (have_spare_) { have_spare_ = false; return spare_; }
    const double r = std::sqrt(-2.0 * std::log(uniform()));
    const double t = 2.0 * 3.14159265358979323846 * uniform();
    spare_ = r * std::sin(t);
    have_spare_ = true;
    return r * std::cos(t);
  }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return next_u64() % n; }

 private:
  uint64_t s_;
  double spare_ = 0.0;
  bool have_spare_ = false;
};

}  // namespace fa
