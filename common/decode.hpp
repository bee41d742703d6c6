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
// 85 %), at most one split per tile and at most `max_splits`. One split when the problems alone
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

}  // namespace fa::decode
