#include "decode.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace fa::decode {

std::vector<Range> split_keys(int64_t Nk, int64_t splits, int64_t tile) {
  if (splits < 1 || tile < 1) throw std::invalid_argument("split_keys: splits and tile must be at least 1");
  std::vector<Range> out;
  if (Nk <= 0) return out;
  const int64_t tiles = (Nk + tile - 1) / tile, n = std::min(splits, tiles);
  for (int64_t s = 0; s < n; ++s) {  // split s takes tiles [s·tiles/n, (s+1)·tiles/n)
    const int64_t t0 = s * tiles / n, t1 = (s + 1) * tiles / n;
    out.push_back({t0 * tile, std::min(Nk, t1 * tile)});
  }
  return out;
}

int64_t num_splits(int64_t sms, int64_t blocks_per_sm, int64_t row_blocks, int64_t cache_len, int64_t tile,
                   int64_t max_splits) {
  if (sms < 1 || blocks_per_sm < 1 || row_blocks < 1 || tile < 1 || max_splits < 1)
    throw std::invalid_argument("num_splits: every count must be at least 1");
  const int64_t slots = sms * blocks_per_sm;
  if (row_blocks >= slots) return 1;
  const int64_t cap = std::max<int64_t>(1, std::min(max_splits, (cache_len + tile - 1) / tile));
  // A grid of row_blocks·s blocks over `slots` takes ceil(that / slots) waves; its efficiency is
  // the share of those waves' slots that hold a block.
  auto efficiency = [&](int64_t s) {
    const double blocks = double(row_blocks * s), waves = std::ceil(blocks / double(slots));
    return blocks / (waves * double(slots));
  };
  double best = 0.0;
  for (int64_t s = 1; s <= cap; ++s) best = std::max(best, efficiency(s));
  for (int64_t s = 1; s <= cap; ++s)
    if (efficiency(s) >= 0.85 * best) return s;
  return cap;
}

double merge(const std::vector<Partial>& parts, int64_t d, double* o) {
  const double inf = std::numeric_limits<double>::infinity();
  double m = -inf;
  for (const Partial& p : parts) m = std::max(m, p.lse);
  for (int64_t c = 0; c < d; ++c) o[c] = 0.0;
  if (m == -inf) return inf;  // no split saw a key
  double sum = 0.0;
  for (const Partial& p : parts) sum += std::exp(p.lse - m);
  const double L = m + std::log(sum);
  for (const Partial& p : parts) {
    if (p.lse == -inf) continue;
    const double w = std::exp(p.lse - L);
    for (int64_t c = 0; c < d; ++c) o[c] += w * p.o[static_cast<size_t>(c)];
  }
  return L;
}

}  // namespace fa::decode
