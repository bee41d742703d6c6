#include "blueprint/mma_emu.hpp"

namespace fa::m16n8k16 {

void mma(CFrag& d, const AFrag& a, const BFrag& b, Ledger& led) {
  float A[16][16], B[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) {
      const Coord c = a_elem(lane, i);
      A[c.row][c.col] = a[size_t(lane)][size_t(i)];
    }
    for (int i = 0; i < 4; ++i) {
      const Coord c = b_elem(lane, i);
      B[c.row][c.col] = b[size_t(lane)][size_t(i)];
    }
  }
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      const Coord c = c_elem(lane, i);
      float acc = d[size_t(lane)][size_t(i)];
      for (int k = 0; k < 16; ++k) acc += A[c.row][k] * B[k][c.col];
      d[size_t(lane)][size_t(i)] = acc;
    }
  led.matmul_flops += 2 * 16 * 8 * 16;
}

BFrag ldmatrix_x2(const SmemTile& t, int64_t r0, int64_t c0, int64_t c1, bool trans) {
  BFrag b(32);
  for (int lane = 0; lane < 32; ++lane)
    for (int m = 0; m < 2; ++m)
      for (int e = 0; e < 2; ++e) {
        const Coord c = ldm_elem(lane, e, trans);
        const int64_t row = trans ? r0 + 8 * m + c.row : r0 + c.row;
        const int64_t col = (trans ? c0 : (m == 0 ? c0 : c1)) + c.col;
        b[size_t(lane)][size_t(2 * m + e)] = t.read(row, col);
      }
  return b;
}

AFrag ldmatrix_x4_a(const SmemTile& t, int64_t r0, int64_t c0) {
  AFrag a(32);
  for (int lane = 0; lane < 32; ++lane)
    for (int m = 0; m < 4; ++m)
      for (int e = 0; e < 2; ++e) {
        const Coord c = ldm_elem(lane, e, false);
        a[size_t(lane)][size_t(2 * m + e)] = t.read(r0 + 8 * (m % 2) + c.row, c0 + 8 * (m / 2) + c.col);
      }
  return a;
}

std::array<BFrag, 2> ldmatrix_x4_b(const SmemTile& t, int64_t r0, int64_t c0, bool trans) {
  if (trans) return {ldmatrix_x2(t, r0, c0, c0, true), ldmatrix_x2(t, r0, c0 + 8, c0 + 8, true)};
  return {ldmatrix_x2(t, r0, c0, c0 + 8, false), ldmatrix_x2(t, r0 + 8, c0, c0 + 8, false)};
}

}  // namespace fa::m16n8k16
