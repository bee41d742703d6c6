// The causal mask and the tiling arithmetic every step shares (host and device).
//
// [causal-mask] Query i sees key j when j <= i + (Nk - N): bottom-right alignment, as
// FlashAttention does. When Nk < N the first N - Nk rows see no key at all (O = 0, L = +inf).
#pragma once
#include <cstdint>

#include "attn_params.hpp"

namespace fa {

// Number of tiles of size `tile` covering `n` (the last one may be ragged).
FA_HD constexpr int64_t num_tiles(int64_t n, int64_t tile) { return (n + tile - 1) / tile; }

// How many keys row i sees (0 when it sees none); keys 0 .. visible_keys - 1.
FA_HD constexpr int64_t visible_keys(int64_t i, int64_t N, int64_t Nk, bool causal) {
  if (!causal) return Nk;
  const int64_t last = i + (Nk - N);
  return last < 0 ? 0 : (last + 1 < Nk ? last + 1 : Nk);
}

// Σ_i visible_keys(i) over all rows, in closed form: N·Nk without the mask; with it,
// T(Nk) − T(max(0, Nk − N)) where T(x) = x(x+1)/2 (row N−1 always sees exactly Nk keys).
FA_HD constexpr int64_t visible_pairs(int64_t N, int64_t Nk, bool causal) {
  if (!causal) return N * Nk;
  const int64_t off = Nk - N > 0 ? Nk - N : 0;
  return Nk * (Nk + 1) / 2 - off * (off + 1) / 2;
}
// Rows that see at least one key.
FA_HD constexpr int64_t rows_with_keys(int64_t N, int64_t Nk, bool causal) {
  return causal ? (N < Nk ? N : Nk) : N;
}

// [tile-class] How the causal mask meets the tile of rows [i0, i1) and columns [j0, j1) (clipped
// to N and Nk): every entry visible, some masked (the diagonal), or every entry masked.
enum class TileKind { Visible, Diagonal, Masked };
FA_HD constexpr TileKind classify_tile(int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t N, int64_t Nk,
                                       bool causal) {
  if (!causal) return TileKind::Visible;
  const int64_t off = Nk - N;
  if (j1 - 1 <= i0 + off) return TileKind::Visible;  // the tile's first row already sees its last column
  if (j0 > i1 - 1 + off) return TileKind::Masked;    // even its last row sees none of its columns
  return TileKind::Diagonal;
}

// How many of the ⌈N/Br⌉ × ⌈Nk/Bc⌉ tiles hold at least one masked entry (diagonal or fully masked):
// the tiles a step that computes every tile must mask element by element. Used by closed forms.
FA_HD constexpr int64_t tiles_with_masked_entries(int64_t N, int64_t Nk, int64_t Br, int64_t Bc, bool causal) {
  int64_t count = 0;
  for (int64_t i0 = 0; causal && i0 < N; i0 += Br)
    for (int64_t j0 = 0; j0 < Nk; j0 += Bc)
      count += classify_tile(i0, i0 + Br < N ? i0 + Br : N, j0, j0 + Bc < Nk ? j0 + Bc : Nk, N, Nk, causal) !=
               TileKind::Visible;
  return count;
}

}  // namespace fa
