// Hopper's warpgroup MMA (wgmma, steps 14+): where its operands live in shared memory, how a matrix
// descriptor names them, and where its fp32 accumulators sit in the registers of a warpgroup. Host
// and device code alike: the kernels build their descriptors with these functions, the blueprints
// and the tests index through them, so they cannot disagree. (PTX ISA, "Asynchronous Warpgroup
// Level Matrix Multiply-Accumulate"; checked on an H200 with a probe kernel: docs/14_wgmma.md.)
//
// [sw128] A tile of R rows and D columns of 16-bit values is stored as D/64 panels of 64 columns,
// one after the other (panel p: columns 64p .. 64p + 63 of every row). In a panel each row is 128
// bytes = eight 16-byte chunks, and chunk c of row r is stored at chunk position c XOR (r mod 8):
// the 128-byte swizzle. Eight rows form a 1024-byte "core group"; the tile starts 1024-aligned.
//
// [desc] A shared-memory matrix descriptor is 64 bits:
//   bits  0-13  start address >> 4        bits 16-29  leading-dimension byte offset >> 4 (LBO)
//   bits 32-45  stride byte offset >> 4 (SBO)   bits 62-63  swizzle mode (1 = 128-byte, 2 = 64-byte swizzle)
// For the layouts used here SBO = 1024 (from one 8-row core group to the next) and LBO is not read
// (each instruction stays inside one 64-column panel), so it is set to 1 (16 bytes).
//
// [acc] wgmma.m64nNk16 with fp32 accumulators: warp w (0..3) of the warpgroup holds rows 16w .. 16w + 15
// and each lane N/2 floats; accumulator register r of lane 4g + t is row 16w + g + 8·((r % 4) / 2),
// column 8·(r / 4) + 2t + (r % 2) — per warp, N/8 of mma.sync's 16 × 8 C tiles side by side
// (register 4n + e is element e of C tile n; common/kernel/mma_layout.hpp).
#pragma once
#include <cstdint>

#include "kernel/attn_params.hpp"
#include "kernel/mma_layout.hpp"

namespace fa::wgmma {

inline constexpr int kPanel = 64;         // columns per panel (128 bytes of 16-bit values)
inline constexpr uint32_t kRowBytes = 128;
inline constexpr uint32_t kGroupBytes = 1024;  // eight swizzled rows

// [sw128] Byte offset of element (r, c) in a tile of R rows stored as swizzled panels.
FA_HD constexpr uint32_t sw128_offset(int r, int c, int R) {
  return uint32_t(c / kPanel) * uint32_t(R) * kRowBytes + uint32_t(r) * kRowBytes +
         uint32_t(((c % kPanel) / 8) ^ (r % 8)) * 16 + uint32_t(c % 8) * 2;
}

// [desc] The descriptor of the matrix that starts at shared address `addr` (a byte address in the
// shared window, below 256 KB). [sw64] Step 21's e4m3 rows of 64 bytes (d = 64) use the 64-byte
// swizzle instead: chunk c (0..3) of row r at chunk position c XOR ((r / 2) mod 4), eight rows of 64
// bytes a 512-byte core group (SBO = 512), swizzle mode 2.
inline constexpr int kSwizzle128 = 1, kSwizzle64 = 2;
FA_HD constexpr uint64_t desc(uint32_t addr, uint32_t lbo = 16, uint32_t sbo = kGroupBytes, int swizzle = kSwizzle128) {
  return uint64_t((addr >> 4) & 0x3FFF) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) | (uint64_t((sbo >> 4) & 0x3FFF) << 32) |
         (uint64_t(swizzle) << 62);
}
// [desc-add] Every descriptor here has the same high word (SBO and the swizzle mode); the low word
// is the address >> 4 with LBO >> 4 above it. So the descriptor of the matrix `offset` bytes (a
// multiple of 16) past the one whose low word is `lo` is that high word over lo + offset >> 4: one
// 32-bit add, instead of masking and shifting an address. The address field cannot carry out of its
// 14 bits while the address stays below 256 KB (shared memory is 228 KB).
FA_HD constexpr uint32_t desc_lo(uint32_t addr, uint32_t lbo = 16) { return uint32_t(desc(addr, lbo)); }
FA_HD constexpr uint64_t desc_at(uint32_t lo, uint32_t offset, uint32_t sbo = kGroupBytes) {
  return (desc(0, 0, sbo) & 0xFFFFFFFF00000000ull) | uint32_t(lo + (offset >> 4));
}
// The fields back (for tests and the doc's drawing).
FA_HD constexpr uint32_t desc_addr(uint64_t d) { return uint32_t(d & 0x3FFF) << 4; }
FA_HD constexpr uint32_t desc_lbo(uint64_t d) { return uint32_t((d >> 16) & 0x3FFF) << 4; }
FA_HD constexpr uint32_t desc_sbo(uint64_t d) { return uint32_t((d >> 32) & 0x3FFF) << 4; }
FA_HD constexpr int desc_swizzle(uint64_t d) { return int(d >> 62); }

// K-major operand (Q and K for S = Q·Kᵀ: row = m or n, column = k): the 16-column slice kk of the
// tile (columns 16kk .. 16kk + 15) starting at row r0 (a multiple of 8) is at this offset from the
// tile's start — panel kk / 4, then 32 bytes per 16 columns inside the 128-byte row (the hardware
// applies the swizzle to the address it forms, which is why the start may sit inside a row).
FA_HD constexpr uint32_t kmajor_offset(int r0, int kk, int R) {
  return uint32_t(kk / 4) * uint32_t(R) * kRowBytes + uint32_t(r0) * kRowBytes + uint32_t(kk % 4) * 32;
}
// MN-major operand (V for O = P·V, stored [key][dim]: row = k, column = n): the 16 rows kk (keys
// 16kk .. 16kk + 15) of panel pn (dims 64pn .. 64pn + 63): two core groups of 8 rows, SBO apart.
FA_HD constexpr uint32_t mnmajor_offset(int kk, int pn, int R) {
  return uint32_t(pn) * uint32_t(R) * kRowBytes + uint32_t(16 * kk) * kRowBytes;
}

// [acc] Accumulator register r of `lane` in warp `warp` of the warpgroup: (row, column) of the 64 × N result.
FA_HD constexpr m16n8k16::Coord acc_elem(int warp, int lane, int r) {
  return {16 * warp + m16n8k16::group(lane) + 8 * ((r % 4) / 2), 8 * (r / 4) + 2 * m16n8k16::thread_in_group(lane) + (r % 2)};
}

}  // namespace fa::wgmma
