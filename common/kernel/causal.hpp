// The causal mask and the tiling arithmetic every step shares (host and device).
//
// [causal-mask] Query i sees key j when j <= i + (Nk - N): bottom-right alignment, as
// FlashAttention does. When Nk < N the first N - Nk rows see no key at all (O = 0, L = +inf).
//
// [window] A sliding window of W keys (window > 0, with the mask) also hides keys on the left: row i
// sees i + (Nk - N) - W < j <= i + (Nk - N), a band that ends on the diagonal. The functions below
// take the window as a last argument that defaults to 0 (no window: the plain causal mask).
#pragma once
#include <cstdint>

#include "kernel/attn_params.hpp"

namespace fa {

// Number of tiles of size `tile` covering `n` (the last one may be ragged).
FA_HD constexpr int64_t num_tiles(int64_t n, int64_t tile) { return (n + tile - 1) / tile; }

// How many keys row i sees (0 when it sees none); keys 0 .. visible_keys - 1.
FA_HD constexpr int64_t visible_keys(int64_t i, int64_t N, int64_t Nk, bool causal) {
  if (!causal) return Nk;
  const int64_t last = i + (Nk - N);
  return last < 0 ? 0 : (last + 1 < Nk ? last + 1 : Nk);
}

// [window] The first key row i sees: 0 without a window (and when its band starts before key 0).
// A row sees keys first_key .. visible_keys - 1 (none when that is empty).
FA_HD constexpr int64_t first_key(int64_t i, int64_t N, int64_t Nk, int64_t window) {
  const int64_t f = i + (Nk - N) - window + 1;
  return window <= 0 || f < 0 ? 0 : f;
}
// Whether row i sees key j (the test a kernel makes per element on a tile that needs the mask).
FA_HD constexpr bool key_visible(int64_t i, int64_t j, int64_t N, int64_t Nk, bool causal, int64_t window = 0) {
  return j < visible_keys(i, N, Nk, causal) && j >= first_key(i, N, Nk, causal ? window : 0);
}
// [rows-seeing] The same mask read by key, for a kernel whose register rows are keys (step 19's Sᵀ):
// of the rows 0 .. N − 1, key j is seen by rows first_row_seeing .. end_row_seeing − 1 (none when
// j >= Nk). With the mask, row i sees key j when i >= j − (Nk − N); with a window also when
// i < j − (Nk − N) + W. One range per key: the kernel compares each register's row with it, no branch.
// (A template: a kernel calls it with 32-bit ints, which keeps its registers 32-bit.)
template <class I>
FA_HD constexpr I first_row_seeing(I j, I N, I Nk, bool causal) {
  const I r = j - (Nk - N);
  return !causal || r < 0 ? I(0) : r;
}
template <class I>
FA_HD constexpr I end_row_seeing(I j, I N, I Nk, bool causal, I window = 0) {
  if (j >= Nk) return 0;
  if (!causal || window <= 0) return N;
  const I r = j - (Nk - N) + window;
  return r < 0 ? I(0) : (r < N ? r : N);
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

// How many of the Br rows i0 .. i0 + Br − 1 of a Q tile see at least one key, rows past N
// included (they see every key): the rows whose running max leaves −inf, for the exps a kernel
// skips on the others ([rescale-guard]). Without the mask, all Br.
FA_HD constexpr int64_t tile_rows_with_keys(int64_t i0, int64_t Br, int64_t N, int64_t Nk, bool causal) {
  if (!causal) return Br;
  const int64_t blind_end = N - Nk < i0 + Br ? N - Nk : i0 + Br;  // rows i < N − Nk see none
  return blind_end > i0 ? Br - (blind_end - i0) : Br;
}

// [tile-class] How the causal mask meets the tile of rows [i0, i1) and columns [j0, j1) (clipped
// to N and Nk): every entry visible, some masked (the diagonal), or every entry masked.
// [window] With a window the band has a left edge too, parallel to the diagonal and W keys before
// it: a tile wholly left of it is Masked as well, and one the edge crosses is Diagonal (some
// entries masked), like one the diagonal crosses.
enum class TileKind { Visible, Diagonal, Masked };
FA_HD constexpr TileKind classify_tile(int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t N, int64_t Nk,
                                       bool causal, int64_t window = 0) {
  if (!causal) return TileKind::Visible;
  const int64_t off = Nk - N;
  if (j0 > i1 - 1 + off) return TileKind::Masked;  // even its last row sees none of its columns
  if (window > 0 && j1 - 1 <= i0 + off - window) return TileKind::Masked;  // [window] left of even its first row's band
  const bool right_ok = j1 - 1 <= i0 + off;                    // the tile's first row already sees its last column
  const bool left_ok = window <= 0 || j0 > i1 - 1 + off - window;  // [window] its last row still sees its first column
  return right_ok && left_ok ? TileKind::Visible : TileKind::Diagonal;
}

// [skip] How many K/V tiles the Q tile of rows [i0, i1) needs, in a loop that stops at the
// diagonal (steps 07, 09–12): up to the one holding its last row's last visible key
// (i1 - 1 + Nk - N). 0 when none of its rows sees a key; every tile without the mask.
FA_HD constexpr int64_t kv_tiles_for(int64_t i0, int64_t i1, int64_t N, int64_t Nk, int64_t Bc, bool causal) {
  const int64_t Tc = num_tiles(Nk, Bc);
  if (!causal) return Tc;
  (void)i0;
  const int64_t last_key = i1 - 1 + Nk - N;
  if (last_key < 0) return 0;
  const int64_t t = last_key / Bc + 1;
  return t < Tc ? t : Tc;
}
// [window] The first K/V tile the Q tile of rows [i0, i1) needs: the one holding its first row's
// first visible key (the band's left edge moves right row by row, so the first row's is leftmost).
// 0 without a window; never past kv_tiles_for's end (a Q tile that sees no key visits none).
// Together: the Q tile visits tiles first_kv_tile .. kv_tiles_for − 1, and skips those on both sides.
FA_HD constexpr int64_t first_kv_tile(int64_t i0, int64_t i1, int64_t N, int64_t Nk, int64_t Bc, bool causal, int64_t window) {
  const int64_t end = kv_tiles_for(i0, i1, N, Nk, Bc, causal);
  const int64_t t = causal ? first_key(i0, N, Nk, window) / Bc : 0;
  return t < end ? t : end;
}
// A (Q tile, K/V tile) pair needs the per-element mask when the diagonal (or the window's left
// edge) crosses it, or when its K/V tile runs past Nk. (Rows past N need none in any step: they
// are never stored, or their L is +inf so P = 0.)
FA_HD constexpr bool needs_mask(int64_t i0, int64_t i1, int64_t j0, int64_t N, int64_t Nk, int64_t Bc, bool causal,
                                int64_t window = 0) {
  const int64_t j1 = j0 + Bc < Nk ? j0 + Bc : Nk;
  return j0 + Bc > Nk || classify_tile(i0, i1, j0, j1, N, Nk, causal, window) != TileKind::Visible;
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
