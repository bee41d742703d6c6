// The mma.sync.m16n8k16 fragment layout (common/mma_layout.hpp) that steps 09+ index through:
// every element owned by exactly one (lane, register slot), register pairs adjacent in memory, and
// the C-to-A identity that lets P stay in registers between the two products.
#include <doctest/doctest.h>

#include <set>
#include <utility>

#include "mma_layout.hpp"

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
