// Dropout on the attention weights, by a counter-based generator (steps 12, 13 and 19, --dropout P).
//
// A kept weight is divided by 1 − P, a dropped one is 0:  O = (P ∘ Z) V,  Z_ij = keep_ij / (1 − P).
// The softmax statistics (m, l, and so L) are those of the weights before dropout, as in
// FlashAttention and PyTorch.
//
// [counter-based] keep_ij is a pure function of (seed, offset, b·H + h, i, j): Philox4x32-10
// (Random123; Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011) turns a
// 128-bit counter and a 64-bit key into four 32-bit words, with no state carried from one call to
// the next. So any thread can draw the bit of any (i, j) in any order, the backward redraws the
// forward's mask instead of storing it (N × Nk bits per head), and the CPU reference, the
// blueprints and the kernels call this same header and get the same bits.
//
// [dropout-block] One call serves a 2 × 2 block of the N × Nk matrix, rows {i, i + 8} and columns
// {j, j + 8} inside one 16 × 16 tile (i % 16 < 8, j % 16 < 8): exactly the four elements one lane
// of an m16n8k16 fragment holds, both in the forward's S (rows = queries) and in the backward's Sᵀ
// (rows = keys). Counter = {block column, block row, b·H + h, offset}, key = the seed.
#pragma once
#include <cstdint>

#include <Random123/philox.h>

#include "kernel/attn_params.hpp"

namespace fa {

// A keep decision: the word of the element is at least the threshold round(P · 2^32).
FA_HD inline uint32_t dropout_threshold(float p) {
  if (!(p > 0.0f)) return 0u;
  const double t = double(p) * 4294967296.0;
  return t >= 4294967295.0 ? 4294967295u : uint32_t(t + 0.5);
}

// Index of a 2 × 2 block along a dimension: position x -> 16·(x / 16)/2 + x % 8 (the block's first
// row or column, packed so that consecutive blocks have consecutive numbers).
FA_HD inline uint32_t dropout_block_index(int64_t x) { return uint32_t((x >> 4) * 8 + (x & 7)); }

// The four words of the block holding (i, j): w[2·((i / 8) % 2) + (j / 8) % 2] belongs to element
// (i, j) of the block (rows i and i + 8 with i % 16 < 8; likewise the columns).
struct DropoutWords {
  uint32_t w[4];
};
FA_HD inline DropoutWords dropout_words(uint64_t seed, uint64_t offset, int64_t bh, int64_t i, int64_t j) {
  r123::Philox4x32 philox;
  const r123::Philox4x32::ctr_type ctr = {{dropout_block_index(j), dropout_block_index(i), uint32_t(bh), uint32_t(offset)}};
  const r123::Philox4x32::key_type key = {{uint32_t(seed), uint32_t(seed >> 32)}};
  const r123::Philox4x32::ctr_type r = philox(ctr, key);
  return {{r[0], r[1], r[2], r[3]}};
}
FA_HD constexpr int dropout_word_of(int64_t i, int64_t j) { return int(2 * ((i >> 3) & 1) + ((j >> 3) & 1)); }

// keep_ij for one element (the reference and the tests; kernels draw a block at a time).
FA_HD inline bool dropout_keep(uint64_t seed, uint64_t offset, int64_t bh, int64_t i, int64_t j, uint32_t threshold) {
  return dropout_words(seed, offset, bh, i, j).w[dropout_word_of(i, j)] >= threshold;
}

// 1 / (1 − P): the factor of a kept weight.
FA_HD inline float dropout_rescale(float p) { return p > 0.0f ? 1.0f / (1.0f - p) : 1.0f; }

}  // namespace fa
