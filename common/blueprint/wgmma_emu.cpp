#include "blueprint/wgmma_emu.hpp"

#include <cstring>

#include <stdexcept>

#include "kernel/wgmma_layout.hpp"

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

// One wgmma with both operands in shared memory: element (m, k) of A at a_at(m, k) for m < 64, element
// (k, n) of B at b_at(k, n) for n < N, both read once per instruction in the fragments' order.
template <class ReadA, class ReadB>
void mma_smem(Acc& d, ReadA a_at, ReadB b_at, bool accumulate, Ledger& led) {
  check_n(d);
  if (!accumulate) clear(d);
  std::vector<mf::BFrag> bf(size_t(d.n / 8), mf::BFrag(32));  // read once, shared by the four warps
  for (int nb = 0; nb < d.n / 8; ++nb)
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4; ++i) {
        const mf::Coord c = mf::b_elem(lane, i);  // (k, n)
        bf[size_t(nb)][size_t(lane)][size_t(i)] = b_at(c.row, 8 * nb + c.col);
      }
  for (int w = 0; w < 4; ++w) {
    mf::AFrag af(32);
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 8; ++i) {
        const mf::Coord c = mf::a_elem(lane, i);  // (m, k)
        af[size_t(lane)][size_t(i)] = a_at(16 * w + c.row, c.col);
      }
    for (int nb = 0; nb < d.n / 8; ++nb) mf::mma(d.tiles[size_t(w * (d.n / 8) + nb)], af, bf[size_t(nb)], led);
  }
}
}  // namespace

void mma_ss(Acc& d, const SmemTile& a, int64_t a_r0, const SmemTile& b, int64_t b_r0, int64_t kk, bool accumulate,
            Ledger& led) {
  mma_smem(
      d, [&](int m, int k) { return a.read(a_r0 + m, 16 * kk + k); }, [&](int k, int n) { return b.read(b_r0 + n, 16 * kk + k); },
      accumulate, led);
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

void mma_ss_tn(Acc& d, const SmemTile& a, int64_t kk, int64_t m0, const SmemTile& b, int64_t b_r0, bool accumulate, Ledger& led) {
  mma_smem(
      d, [&](int m, int k) { return a.read(16 * kk + k, m0 + m); }, [&](int k, int n) { return b.read(b_r0 + n, 16 * kk + k); },
      accumulate, led);
}

void mma_ss_mn(Acc& d, const SmemTile& a, int64_t kk, const SmemTile& b, int64_t n0, bool accumulate, Ledger& led, int64_t m0) {
  mma_smem(
      d, [&](int m, int k) { return a.read(16 * kk + k, m0 + m); }, [&](int k, int n) { return b.read(16 * kk + k, n0 + n); },
      accumulate, led);
}

// [fp22] The FP8 tensor cores' running sum keeps 13 bits of mantissa, not fp32's 23 (SageAttention2, Zhang et
// al. 2024, measured it as an "FP22" accumulator; DeepSeek-V3 §3.3.2 says about 14 bits): modelled as the
// sum of C and the instruction's 32 products, cut toward zero to 13 bits. A kernel that leaves a long sum
// in the accumulator loses a little of it at every instruction, always downwards.
float fp22(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u &= ~((1u << 10) - 1u);  // 23 - 13 = 10 mantissa bits dropped
  std::memcpy(&x, &u, 4);
  return x;
}

void mma_ss_e4m3(Acc& d, const SmemTile& a, int64_t a_r0, const SmemTile& b, int64_t b_r0, int64_t kk, bool accumulate,
                 Ledger& led) {
  check_n(d);
  if (!accumulate) clear(d);
  std::vector<float> A(size_t(64 * 32)), B(size_t(d.n * 32));  // each byte read once per instruction
  for (int r = 0; r < 64; ++r)
    for (int k = 0; k < 32; ++k) A[size_t(32 * r + k)] = a.read(a_r0 + r, 32 * kk + k);
  for (int n = 0; n < d.n; ++n)
    for (int k = 0; k < 32; ++k) B[size_t(32 * n + k)] = b.read(b_r0 + n, 32 * kk + k);
  for (int w = 0; w < 4; ++w)
    for (int lane = 0; lane < 32; ++lane)
      for (int r = 0; r < d.n / 2; ++r) {
        const mf::Coord c = acc_elem(w, lane, r);
        float sum = 0.0f;
        for (int k = 0; k < 32; ++k) sum += A[size_t(32 * c.row + k)] * B[size_t(32 * c.col + k)];
        d.reg(w, lane, r) = fp22(d.reg(w, lane, r) + sum);
      }
  led.matmul_flops += int64_t(2) * 64 * d.n * 32;
}

void mma_rs_e4m3(Acc& d, const std::vector<AFrag8>& a, const SmemTile& bt, int64_t n0, int64_t kk, bool accumulate, Ledger& led) {
  check_n(d);
  if (a.size() != 4) throw std::logic_error("wgmma: a register A operand is four warps' fragments");
  if (!accumulate) clear(d);
  std::vector<float> B(size_t(d.n * 32));
  for (int n = 0; n < d.n; ++n)
    for (int k = 0; k < 32; ++k) B[size_t(32 * n + k)] = bt.read(n0 + n, 32 * kk + k);
  for (int w = 0; w < 4; ++w)
    for (int lane = 0; lane < 32; ++lane)
      for (int r = 0; r < d.n / 2; ++r) {
        const mf::Coord c = acc_elem(w, lane, r);  // row in 0..63: warp w's rows are 16w .. 16w + 15
        const int rw = c.row - 16 * w, g = rw % 8;
        float sum = 0.0f;
        for (int k = 0; k < 32; ++k) {  // A(row, k): lane 4g + (k % 16) / 4, register 2(k / 16) + rw / 8, byte k % 4
          const int holder = 4 * g + (k % 16) / 4, q = 2 * (k / 16) + rw / 8;
          sum += a[size_t(w)][size_t(holder)][size_t(4 * q + k % 4)] * B[size_t(32 * c.col + k)];
        }
        d.reg(w, lane, r) = fp22(d.reg(w, lane, r) + sum);
      }
  led.matmul_flops += int64_t(2) * 64 * d.n * 32;
}

}  // namespace fa::wgmma
