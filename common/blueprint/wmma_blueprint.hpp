// The WMMA steps' shared-memory tile updates on the CPU, written once for the blueprints of steps
// 03-07 (their kernels repeat the same code on purpose; their blueprints call it from here).
//
//   split_k_update    steps 03, 04 and 05 --split k: the warps split the Bc keys of a tile, merge
//                     their partial maxima, sums and P·V products through shared memory, and O_i is
//                     normalized by l_i after every tile (FlashAttention-1's update).
//   deferred_update   steps 06 and 07: each warp owns 16 rows and all keys (split-Q); Õ is only
//                     rescaled by alpha, divided by l once after the last tile.
//
// Every access goes through the counting views (SmemTile, Frag16, barrier), so the ledger a step
// counts is the one its kernel runs. The tile sizes and paddings are the step's own (Layout).
#pragma once
#include <cstdint>

#include "blueprint/ledger.hpp"
#include "core/problem.hpp"

namespace fa::wmma_bp {

// A step's tiles: Br × Bc, W warps, and the padding (in elements) of the 16-bit tiles, of S and of O.
struct Layout {
  int64_t Br, Bc, W, pad, pad_s, pad_o;
  int64_t warps() const { return W; }
};

// [rescale-guard] exp(m_old - m_new), 0 when nothing has been seen (both -inf).
float rescale_factor(float m_old, float m_new);

// One thread block's shared memory in the split-K steps (the kernel's __shared__ arrays).
struct SplitKBlock {
  SmemTile Qs, Ks, Vs, Ss, Ps, Os, mi, li, mnew, lnew, cold, redm, redl;
};
SplitKBlock make_split_k_block(const Layout& sc, const Shape& s, Smem& smem);
// One (Q tile i, K/V tile j) pair of the split-K update; Q_i, O_i, m_i, l_i in shared memory on
// entry and on exit.
void split_k_update(const Layout& sc, const Shape& s, SplitKBlock& blk, int64_t i0, int64_t j0, Ledger& led);

// One thread block's shared memory in the split-Q, deferred-normalization steps.
struct DeferredBlock {
  SmemTile Qs, Ks, Vs, Ss, Ps, Os, mi, li, cold;
};
DeferredBlock make_deferred_block(const Layout& sc, const Shape& s, Smem& smem);
// One pair of the deferred update; `masked` says whether the tile needs the per-element causal or
// ragged-edge mask (step 06 always masks; step 07 only on diagonal and ragged tiles).
// [deferred] A row's statistics after one tile: alpha = exp(m_old − m_new) for Õ, and the new m and l
// from the tile's row max m_new (already including m_old) and its sum of p. `stats` computes them:
// step 06 passes its own (its lab region), step 07 the shared deferred_stats.
struct RowStats { float alpha, m, l; };
using DeferredStats = RowStats (*)(float m_old, float l_old, float m_new, float tile_sum);
RowStats deferred_stats(float m_old, float l_old, float m_new, float tile_sum);
void deferred_update(const Layout& sc, const Shape& s, DeferredBlock& blk, int64_t i0, int64_t j0, bool masked, Ledger& led,
                     DeferredStats stats = deferred_stats);

}  // namespace fa::wmma_bp
