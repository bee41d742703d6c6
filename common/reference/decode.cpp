#include "reference/decode.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/rng.hpp"

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
    if (efficiency(s) >= 0.95 * best) return s;
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

bool valid_page_size(int64_t page_size) {
  return page_size >= 16 && page_size <= 256 && (page_size & (page_size - 1)) == 0;
}

std::string validate(const PagedLayout& p, int64_t capacity) {
  if (!valid_page_size(p.page_size))
    return "--page-size must be a power of two from 16 to 256 (got " + std::to_string(p.page_size) + ")";
  if (p.pages_per_seq * p.page_size < capacity)
    return "block table: " + std::to_string(p.pages_per_seq) + " pages per sequence of " + std::to_string(p.page_size) +
           " tokens hold less than the cache's " + std::to_string(capacity) + " (--nk)";
  if (int64_t(p.block_table.size()) != p.batch() * p.pages_per_seq)
    return "block table: " + std::to_string(p.block_table.size()) + " entries for " + std::to_string(p.batch()) +
           " sequences of " + std::to_string(p.pages_per_seq) + " pages";
  for (int64_t b = 0; b < p.batch(); ++b) {
    const int64_t len = p.cache_lens[static_cast<size_t>(b)];
    if (len < 0 || len > capacity)
      return "--cache-lens: sequence " + std::to_string(b) + " holds " + std::to_string(len) + " tokens; the cache holds 0 to " +
             std::to_string(capacity) + " (--nk)";
    for (int64_t pg = 0; pg * p.page_size < len; ++pg) {
      const int64_t at = p.block_table[static_cast<size_t>(b * p.pages_per_seq + pg)];
      if (at < 0 || at >= p.num_pages)
        return "block table: sequence " + std::to_string(b) + "'s page " + std::to_string(pg) + " is " + std::to_string(at) +
               ", outside the pool of " + std::to_string(p.num_pages) + " pages";
    }
  }
  return "";
}

namespace {
PagedLayout layout(const std::vector<int64_t>& cache_lens, int64_t capacity, int64_t page_size) {
  if (page_size < 1) throw std::invalid_argument("paged layout: page_size must be at least 1");
  PagedLayout p;
  p.page_size = page_size;
  p.pages_per_seq = (capacity + page_size - 1) / page_size;
  p.cache_lens = cache_lens;
  p.num_pages = p.batch() * p.pages_per_seq;
  p.block_table.resize(static_cast<size_t>(p.num_pages));
  for (int64_t i = 0; i < p.num_pages; ++i) p.block_table[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  return p;
}
}  // namespace

PagedLayout contiguous_layout(const std::vector<int64_t>& cache_lens, int64_t capacity, int64_t page_size) {
  return layout(cache_lens, capacity, page_size);
}

PagedLayout shuffled_layout(const std::vector<int64_t>& cache_lens, int64_t capacity, int64_t page_size, uint64_t seed) {
  PagedLayout p = layout(cache_lens, capacity, page_size);
  Rng rng(seed);
  for (int64_t i = p.num_pages - 1; i > 0; --i)  // Fisher–Yates
    std::swap(p.block_table[static_cast<size_t>(i)], p.block_table[static_cast<size_t>(rng.below(uint64_t(i + 1)))]);
  return p;
}

}  // namespace fa::decode
