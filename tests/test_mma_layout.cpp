// The mma.sync.m16n8k16 fragment layout (common/kernel/mma_layout.hpp) that steps 09+ index through:
// every element owned by exactly one (lane, register slot), register pairs adjacent in memory, and
// the C-to-A identity that lets P stay in registers between the two products.
#include <doctest/doctest.h>

#include <set>
#include <utility>

#include "kernel/mma_layout.hpp"

using namespace fa::m16n8k16;

namespace {
template <class F>
std::set<std::pair<int, int>> covered(F elem, int per_lane, int rows, int cols, int& count) {
  std::set<std::pair<int, int>> seen;
  count = 0;
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < per_lane; ++i) {
      const Coord c = elem(lane, i);
      CHECK(c.row >= 0);
      CHECK(c.row < rows);
      CHECK(c.col >= 0);
      CHECK(c.col < cols);
      seen.insert({c.row, c.col});
      ++count;
    }
  return seen;
}
}  // namespace

TEST_CASE("mma layout: each element of A, B and C belongs to exactly one lane and slot") {
  int n = 0;
  CHECK(covered(a_elem, 8, 16, 16, n).size() == 256);
  CHECK(n == 256);
  CHECK(covered(b_elem, 4, 16, 8, n).size() == 128);
  CHECK(n == 128);
  CHECK(covered(c_elem, 4, 16, 8, n).size() == 128);
  CHECK(n == 128);
}

TEST_CASE("mma layout: the two halves of a 32-bit register are neighbours in memory") {
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; i += 2) {  // A: along a row
      CHECK(a_elem(lane, i + 1).row == a_elem(lane, i).row);
      CHECK(a_elem(lane, i + 1).col == a_elem(lane, i).col + 1);
    }
    for (int i = 0; i < 4; i += 2) {  // B: down a column (k), so a row of K (= a column of Kᵀ) is contiguous
      CHECK(b_elem(lane, i + 1).col == b_elem(lane, i).col);
      CHECK(b_elem(lane, i + 1).row == b_elem(lane, i).row + 1);
      CHECK(c_elem(lane, i + 1).row == c_elem(lane, i).row);  // C: along a row
      CHECK(c_elem(lane, i + 1).col == c_elem(lane, i).col + 1);
    }
  }
}

TEST_CASE("mma layout: two C tiles side by side are, lane by lane, the A fragment of the next product") {
  // P (16 × 16) held as the accumulators of two 16 × 8 products: tile 0 = columns 0..7, tile 1 = 8..15.
  float P[16][16];
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) P[r][c] = float(r * 16 + c);
  int checked = 0;
  for (int lane = 0; lane < 32; ++lane) {
    float c_regs[2][4];
    for (int tile = 0; tile < 2; ++tile)
      for (int e = 0; e < 4; ++e) {
        const Coord c = c_elem(lane, e);
        c_regs[tile][e] = P[c.row][8 * tile + c.col];
      }
    for (int i = 0; i < 8; ++i) {
      const Coord a = a_elem(lane, i);
      CHECK(c_regs[a_from_c_tile(i)][a_from_c_elem(i)] == P[a.row][a.col]);
      ++checked;
    }
  }
  CHECK(checked == 256);
}

TEST_CASE("mma layout: ldmatrix.x2 gives B fragments — from K's rows as stored, and .trans from V's") {
  // K_j stored [key][dim]: S = Q·K_jᵀ needs B(k = dim, n = key) = K[n][k]. ldmatrix.x2 on the two
  // 8 × 8 blocks rows = keys 0..7, columns = dims 0..7 and 8..15 gives each lane its B registers.
  // V_j stored [key][dim]: P·V needs B(k = key, n = dim) = V[k][n]; ldmatrix.x2.trans on the blocks
  // rows = keys 0..7 and 8..15, columns = dims 0..7 does.
  float M[16][16];
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) M[r][c] = float(100 * r + c);
  int checked = 0;
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      const int reg = i / 2, e = i % 2;  // B slot i lives in register i / 2, half i % 2
      const Coord b = b_elem(lane, i);   // (k, n)
      // K: register `reg` = matrix `reg` = K[0..7][8·reg .. 8·reg + 7], not transposed.
      const Coord kc = ldm_elem(lane, e, false);
      CHECK(M[kc.row][8 * reg + kc.col] == M[b.col][b.row]);  // K[n][k]
      // V: register `reg` = matrix `reg` = V[8·reg .. 8·reg + 7][0..7], transposed.
      const Coord vc = ldm_elem(lane, e, true);
      CHECK(M[8 * reg + vc.row][vc.col] == M[b.row][b.col]);  // V[k][n]
      checked += 2;
    }
  CHECK(checked == 256);
}

TEST_CASE("mma layout: ldmatrix.x4 of a row-major 16 × 16 tile is its A fragment (Q in step 12)") {
  // Blocks in register order: rows 0..7 / 8..15 (m % 2) × columns 0..7 / 8..15 (m / 2). Lane l's
  // register m holds elements ldm_elem(l, 0 / 1) of block m, which must be A slots 2m and 2m + 1.
  int checked = 0;
  for (int lane = 0; lane < 32; ++lane)
    for (int m = 0; m < 4; ++m)
      for (int e = 0; e < 2; ++e) {
        const Coord ld = ldm_elem(lane, e, false), a = a_elem(lane, 2 * m + e);
        CHECK(a.row == 8 * (m % 2) + ld.row);
        CHECK(a.col == 8 * (m / 2) + ld.col);
        ++checked;
      }
  CHECK(checked == 256);
  // The other natural order (columns first) is not the A layout: the test above can fail.
  bool differs = false;
  for (int lane = 0; lane < 32; ++lane)
    for (int m = 0; m < 4; ++m) {
      const Coord ld = ldm_elem(lane, 0, false), a = a_elem(lane, 2 * m);
      differs |= a.row != 8 * (m / 2) + ld.row || a.col != 8 * (m % 2) + ld.col;
    }
  CHECK(differs);
}
