#include "blueprint/wgmma_emu.hpp"

#include <stdexcept>

namespace fa::wgmma {

namespace mf = fa::m16n8k16;

namespace {
void clear(Acc& d) {
  for (auto& t : d.tiles)
    for (auto& lane : t) lane = {0, 0, 0, 0};
}
void check_n(const Acc& d) {
  if (d.n <= 0 || d.n % 8 != 0 || d.n > 256) throw std::logic_error("wgmma: N must be a multiple of 8 up to 256");
}
}  // namespace

void mma_ss(Acc& d, const SmemTile& a, int64_t a_r0, const SmemTile& b, int64_t b_r0, int64_t kk, bool accumulate,
            Ledger& led) {
  check_n(d);
  if (!accumulate) clear(d);
  std::vector<mf::BFrag> bf(size_t(d.n / 8), mf::BFrag(32));  // read once, shared by the four warps
  for (int nb = 0; nb < d.n / 8; ++nb)
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4; ++i) {
        const mf::Coord c = mf::b_elem(lane, i);  // (k, n)
        bf[size_t(nb)][size_t(lane)][size_t(i)] = b.read(b_r0 + 8 * nb + c.col, 16 * kk + c.row);
      }
  for (int w = 0; w < 4; ++w) {
    mf::AFrag af(32);
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 8; ++i) {
        const mf::Coord c = mf::a_elem(lane, i);
        af[size_t(lane)][size_t(i)] = a.read(a_r0 + 16 * w + c.row, 16 * kk + c.col);
      }
    for (int nb = 0; nb < d.n / 8; ++nb) mf::mma(d.tiles[size_t(w * (d.n / 8) + nb)], af, bf[size_t(nb)], led);
  }
}

void mma_rs(Acc& d, const std::vector<mf::AFrag>& a, const SmemTile& b, int64_t kk, int64_t n0, bool accumulate,
            Ledger& led) {
  check_n(d);
  if (a.size() != 4) throw std::logic_error("wgmma: a register A operand is four warps' fragments");
  if (!accumulate) clear(d);
  for (int nb = 0; nb < d.n / 8; ++nb) {
    mf::BFrag bf(32);
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4; ++i) {
        const mf::Coord c = mf::b_elem(lane, i);
        bf[size_t(lane)][size_t(i)] = b.read(16 * kk + c.row, n0 + 8 * nb + c.col);
      }
    for (int w = 0; w < 4; ++w) mf::mma(d.tiles[size_t(w * (d.n / 8) + nb)], a[size_t(w)], bf, led);
  }
}

void mma_ss_mn(Acc& d, const SmemTile& a, int64_t kk, const SmemTile& b, int64_t n0, bool accumulate, Ledger& led) {
  check_n(d);
  if (!accumulate) clear(d);
  std::vector<mf::BFrag> bf(size_t(d.n / 8), mf::BFrag(32));
  for (int nb = 0; nb < d.n / 8; ++nb)
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4; ++i) {
        const mf::Coord c = mf::b_elem(lane, i);  // (k, n)
        bf[size_t(nb)][size_t(lane)][size_t(i)] = b.read(16 * kk + c.row, n0 + 8 * nb + c.col);
      }
  for (int w = 0; w < 4; ++w) {
    mf::AFrag af(32);
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 8; ++i) {
        const mf::Coord c = mf::a_elem(lane, i);  // (m, k)
        af[size_t(lane)][size_t(i)] = a.read(16 * kk + c.col, 16 * w + c.row);
      }
    for (int nb = 0; nb < d.n / 8; ++nb) mf::mma(d.tiles[size_t(w * (d.n / 8) + nb)], af, bf[size_t(nb)], led);
  }
}

}  // namespace fa::wgmma
