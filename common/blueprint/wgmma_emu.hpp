// Hopper's warpgroup MMA (steps 14+) on the CPU, for their blueprints: one wgmma.mma_async of a
// warpgroup as the four warps' accumulators, each warp's 16 rows in mma.sync's C layout
// (common/kernel/wgmma_layout.hpp, [acc]) — so a blueprint's softmax indexes S exactly as the kernel does.
// Operands read from shared memory are read once per instruction (the warpgroup shares them), and
// counted as such by the SmemTile; 2·64·N·16 tensor-core FLOPs per instruction.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "blueprint/ledger.hpp"
#include "blueprint/mma_emu.hpp"

namespace fa::wgmma {

// The accumulators of one 64 × N wgmma: warp w's C tile n (columns 8n .. 8n + 7) at w·(N/8) + n.
struct Acc {
  int n = 0;  // N
  std::vector<m16n8k16::CFrag> tiles;
  explicit Acc(int N = 0) : n(N), tiles(size_t(4 * (N / 8)), m16n8k16::CFrag(32, {0, 0, 0, 0})) {}
  // Register r (= 4·tile + element) of `lane` in warp `warp`.
  float& reg(int warp, int lane, int r) { return tiles[size_t(warp * (n / 8) + r / 4)][size_t(lane)][size_t(r % 4)]; }
  float reg(int warp, int lane, int r) const { return tiles[size_t(warp * (n / 8) + r / 4)][size_t(lane)][size_t(r % 4)]; }
};

// [s-wgmma] D (+)= A·Bᵀ, both K-major from shared memory: A = rows a_r0 .. a_r0 + 63 of tile `a`,
// B = rows b_r0 .. b_r0 + N − 1 of tile `b`, both at columns 16kk .. 16kk + 15. Without
// `accumulate` D is overwritten (scale-d = 0). (64 + N)·16 elements read.
void mma_ss(Acc& d, const SmemTile& a, int64_t a_r0, const SmemTile& b, int64_t b_r0, int64_t kk, bool accumulate,
            Ledger& led);
// [pv-wgmma] D (+)= A·B: A from registers, a[w] warp w's A fragment of its 16 rows; B MN-major from
// shared memory: element (k, n) = tile(16kk + k, n0 + n) for n < N. N·16 elements read.
void mma_rs(Acc& d, const std::vector<m16n8k16::AFrag>& a, const SmemTile& b, int64_t kk, int64_t n0, bool accumulate,
            Ledger& led);
// [dq-wgmma] D (+)= A·B, both MN-major from shared memory (imm-trans-a = imm-trans-b = 1): element
// (m, k) of A = a(16kk + k, m0 + m) for m < 64 (dS read from a dSᵀ tile), element (k, n) of B =
// b(16kk + k, n0 + n) for n < N. (64 + N)·16 elements read.
void mma_ss_mn(Acc& d, const SmemTile& a, int64_t kk, const SmemTile& b, int64_t n0, bool accumulate, Ledger& led, int64_t m0 = 0);
// [dq-wgmma] D (+)= A·B, A MN-major and B K-major from shared memory (imm-trans-a = 1, imm-trans-b = 0):
// element (m, k) of A = a(16kk + k, m0 + m) for m < 64 (Kᵀ read from K stored [key][dim]), element (k, n)
// of B = b(b_r0 + n, 16kk + k) for n < N (dSᵀ read from dS stored [query][key]). (64 + N)·16 elements read.
void mma_ss_tn(Acc& d, const SmemTile& a, int64_t kk, int64_t m0, const SmemTile& b, int64_t b_r0, bool accumulate, Ledger& led);

// [fp8] e4m3 × e4m3, k = 32 per instruction (step 21); tiles hold the codes' values (SmemTile of
// Store::e4m3(): a byte each), products exact in fp32, each instruction's 32 products summed in fp32 and
// added to D. 2·64·N·32 FLOPs.
// D (+)= A·Bᵀ, both K-major: A = rows a_r0 .. a_r0 + 63 of `a`, B = rows b_r0 .. b_r0 + N − 1 of `b`, both
// at columns 32kk .. 32kk + 31. (64 + N)·32 bytes read.
void mma_ss_e4m3(Acc& d, const SmemTile& a, int64_t a_r0, const SmemTile& b, int64_t b_r0, int64_t kk, bool accumulate,
                 Ledger& led);
// The e4m3 A fragment of one warp: [lane][4q + i], byte i of register q — row g + 8(q % 2), column
// 4t + i + 16(q / 2) of the warp's 16 × 32 block (lane = 4g + t).
using AFrag8 = std::vector<std::array<float, 16>>;
// D (+)= A·B: A from registers (a[w]: warp w's fragment), B K-major from shared memory: element (k, n)
// = bt(n0 + n, 32kk + k) (Vᵀ stored [dim][key]). N·32 bytes read.
// [fp22] x cut toward zero to the FP8 tensor cores' 13 bits of mantissa (what each e4m3 product above leaves in D).
float fp22(float x);
void mma_rs_e4m3(Acc& d, const std::vector<AFrag8>& a, const SmemTile& bt, int64_t n0, int64_t kk, bool accumulate, Ledger& led);

}  // namespace fa::wgmma
