// Decoding's arithmetic on the CPU, for step 17 (split-KV, "Flash-Decoding"): one query row against
// a long key/value cache is cut across blocks along the keys; each block's partial result is a
// normalized O_s and its log-sum-exp L_s over its own keys, and a combine step merges them:
//
//   L = log Σ_s exp(L_s),   O = Σ_s exp(L_s − L) · O_s
//
// — the online softmax's rescaling, across blocks instead of across tiles. A split that saw no key
// has L_s = −inf and weight 0; a row whose splits all saw none gets O = 0 and L = +inf (the course's
// convention for a row with no visible key).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fa::decode {

// [split-kv] Keys [begin, end) of one split.
struct Range {
  int64_t begin = 0, end = 0;
};

// The cache's Nk keys cut into `splits` ranges of whole `tile`-key tiles, as even as tiles allow
// (the last tile may be ragged); never more ranges than tiles, and none empty. Throws
// std::invalid_argument for splits or tile below 1.
std::vector<Range> split_keys(int64_t Nk, int64_t splits, int64_t tile);

// [splits] How many splits for `rows_blocks` independent (b, kv-head) problems on `sms` SMs, each
// over `cache_len` keys in `tile`-key tiles, with `blocks_per_sm` blocks resident per SM: the
// fewest splits whose grid fills the waves it needs about as well as the best choice does (within
// 95 %), at most one split per tile and at most `max_splits`. One split when the problems alone
// fill the GPU.
int64_t num_splits(int64_t sms, int64_t blocks_per_sm, int64_t row_blocks, int64_t cache_len, int64_t tile,
                   int64_t max_splits = 128);

// One split's partial result for one row: O_s (d values, already divided by its own sum) and L_s.
struct Partial {
  std::vector<double> o;
  double lse = 0.0;  // −inf: the split saw no key
};

// [merge] The combine: writes d values of O and returns L.
double merge(const std::vector<Partial>& parts, int64_t d, double* o);

// [paged] A paged key/value cache (vLLM's and FlashAttention's layout): one pool of `num_pages`
// pages of `page_size` tokens; sequence b's token t lives in pool page
// block_table[b·pages_per_seq + t / page_size], at slot t % page_size. A contiguous cache is the
// special case where sequence b owns pages b·pages_per_seq, b·pages_per_seq + 1, ...
struct PagedLayout {
  int64_t page_size = 0, num_pages = 0, pages_per_seq = 0;
  std::vector<int32_t> block_table;  // [B][pages_per_seq]
  std::vector<int64_t> cache_lens;   // [B]: tokens held by each sequence
  int64_t batch() const { return static_cast<int64_t>(cache_lens.size()); }
  int64_t page_of(int64_t b, int64_t t) const {
    return block_table[static_cast<size_t>(b * pages_per_seq + t / page_size)];
  }
};

// Page sizes the kernels take: powers of two from 16 to 256.
bool valid_page_size(int64_t page_size);

// "" when the layout is sound for a cache of `capacity` tokens per sequence (--nk); otherwise a
// message naming the flag or the table at fault: a page size that is not a power of two in 16 ..
// 256, a cache length above the capacity (or negative), a table too short for the capacity, an
// entry of a page a sequence uses that points outside the pool. Checked on the host, before any
// launch.
std::string validate(const PagedLayout& p, int64_t capacity);

// Layouts for tests and benchmarks: sequence b owns consecutive pages (contiguous), or the pool's
// pages in a seeded random order (shuffled) — each sequence `capacity` tokens of room.
PagedLayout contiguous_layout(const std::vector<int64_t>& cache_lens, int64_t capacity, int64_t page_size);
PagedLayout shuffled_layout(const std::vector<int64_t>& cache_lens, int64_t capacity, int64_t page_size, uint64_t seed);

}  // namespace fa::decode
