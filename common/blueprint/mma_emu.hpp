// The warp-level tensor-core instructions of steps 09+ on the CPU, for their blueprints: each
// lane's registers as arrays [lane][slot], every element placed through common/kernel/mma_layout.hpp —
// the same index functions the kernels use — so a wrong index shows as a wrong result.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "blueprint/ledger.hpp"
#include "kernel/mma_layout.hpp"

namespace fa::m16n8k16 {

using AFrag = std::vector<std::array<float, 8>>;  // [lane][slot]: a 16 × 16 A tile (storage-type values)
using BFrag = std::vector<std::array<float, 4>>;  // [lane][slot]: a 16 × 8 B tile (storage-type values)
using CFrag = std::vector<std::array<float, 4>>;  // [lane][slot]: 16 × 8 fp32 accumulators

// [mma] mma.sync.m16n8k16: D += A·B for one warp. A and B are gathered from the lanes' slots, the
// product formed in fp32 and scattered back into the lanes' accumulators; 2·16·8·16 tensor-core
// FLOPs counted.
void mma(CFrag& d, const AFrag& a, const BFrag& b, Ledger& led);

// [ldmatrix] ldmatrix.x2 on two 8 × 8 blocks of a shared-memory tile, as B fragments: without
// .trans, block m is rows r0 .. r0 + 7 at columns cm .. cm + 7 (c0 for m = 0, c1 for m = 1); with
// .trans, rows r0 + 8m .. r0 + 8m + 7 at columns c0 .. c0 + 7. Lane l's register m receives
// elements ldm_elem(l, 0 / 1, trans) of block m: its B slots 2m and 2m + 1. 128 elements read.
BFrag ldmatrix_x2(const SmemTile& t, int64_t r0, int64_t c0, int64_t c1, bool trans);

// ldmatrix.x4 as the A fragment of the 16 × 16 tile at (r0, c0): block m is rows r0 + 8(m % 2) ..
// + 7 at columns c0 + 8(m / 2) .. + 7, and lane l's register m receives elements ldm_elem(l, 0 / 1)
// of block m into A slots 2m and 2m + 1 — which a_elem() must agree with. 256 elements read.
AFrag ldmatrix_x4_a(const SmemTile& t, int64_t r0, int64_t c0);

// ldmatrix.x4 as two B fragments. Without .trans (a tile stored n-major, like K): the fragments of
// rows r0 .. r0 + 7 and r0 + 8 .. r0 + 15, each over columns c0 .. c0 + 15 (blocks (r0, c0),
// (r0, c0 + 8), (r0 + 8, c0), (r0 + 8, c0 + 8)). With .trans (stored k-major, like V): the
// fragments of columns c0 .. c0 + 7 and c0 + 8 .. c0 + 15, each over rows r0 .. r0 + 15 (blocks
// (r0, c0), (r0 + 8, c0), (r0, c0 + 8), (r0 + 8, c0 + 8)). 256 elements read.
std::array<BFrag, 2> ldmatrix_x4_b(const SmemTile& t, int64_t r0, int64_t c0, bool trans);

}  // namespace fa::m16n8k16
