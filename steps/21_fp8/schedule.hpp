// Step 21 — the FP8 forward: step 16's kernel on e4m3 codes.
//
// Hopper's tensor cores multiply e4m3 at twice the rate of fp16 and bf16 (wgmma .kind e4m3, k = 32 per
// instruction), and an e4m3 tile is half the bytes. Step 16's ping-pong forward takes them with five
// changes:
//   [quantize]    a kernel pair before the forward: the largest magnitude of each scale group
//                 (atomicMax), then the codes e4m3(x · 448 / amax) and the descales amax / 448
//                 (common/kernel/fp8.hpp), with Q and K first through a randomized Hadamard
//                 transform under --incoherent ([incoherent]: QKᵀ is unchanged);
//   [descale]     S = Q̃K̃ᵀ is a sum of exact products of codes; the row's factor scale·log2 e times
//                 Q's and K's descales turns it into logits, per tile (a K tile has its own descale
//                 with --fp8-scales block);
//   [p-fp8]       P in [0, 1] times 256, cast to e4m3 in registers, is P·V's A operand: the FP8 A
//                 fragment holds four consecutive keys per register where the accumulator holds
//                 two, so the keys of each 32-key slice are taken in the accumulator's order
//                 ([key-order]) and V's rows permuted to match;
//   [v-transpose] FP8 wgmma reads B K-major only: V (keys × dims) must sit in shared memory as Vᵀ
//                 (dims × keys). Three producer warps transpose each V tile after TMA brings it
//                 (4 × 4 byte blocks, [transpose4]) — or, with --v pretransposed, the quantize
//                 kernel writes Vᵀ once and TMA loads it as it is;
//   [v-descale]   V's descale, per tile with block scales, carried in O's units: Õ holds P·V in the
//                 units of the last tile's descale, and a change of tile multiplies it by the ratio
//                 with the rescale α (no extra pass over Õ).
// O leaves in bf16 straight from the registers (its tile in bf16 would not fit over Q's e4m3 one).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/step.hpp"
#include "kernel/attn_params.hpp"
#include "kernel/causal.hpp"
#include "kernel/fp8.hpp"
#include "kernel/wgmma_layout.hpp"
#include "reference/quantize.hpp"

namespace fa::step21 {

// [v-transpose] Where Vᵀ comes from: written transposed by the quantize kernel (pretransposed, the
// default: the fastest at both head dimensions, [per-d-defaults]), or transposed in shared memory by
// the producer's warps (--v kernel). kernel-stepped is kernel's transpose with its addresses stepped
// from per-lane constants ([transpose-addr]).
enum VLayout : int { kVPretransposed = 0, kVKernel, kVKernelStepped, kVLayouts };
inline constexpr const char* kVLayoutNames[kVLayouts] = {"pretransposed", "kernel", "kernel-stepped"};
FA_HD constexpr bool transposes_in_kernel(int v_layout) { return v_layout != kVPretransposed; }

// [pv-order] When a consumer issues tile j − 1's P·V: with S_j in the same turn (overlap, step 16's order,
// the default), or alone before it, waited for and summed into Õ before S_j is issued (--pv serial, an
// experiment). At d = 256 the overlap keeps Õ (128 registers), S (64), the tile's own sum (64,
// [two-level]) and P (16) live at once, more than a consumer's 240: ptxas spills. Serially S is dead
// while P·V runs, and P·V's registers while S does.
enum PvOrder : int { kPvOverlap = 0, kPvSerial, kPvOrders };
inline constexpr const char* kPvOrderNames[kPvOrders] = {"overlap", "serial"};

// [lean-ops] The consumer's FP32 instructions per entry of S (--ops lean, an experiment): with FP8
// products twice as fast, the softmax's instructions are what a turn waits for. lean folds P's ×256
// into the exponent (2^(x − m + 8)) so the packing multiplies nothing, and fuses Õ's rescale into the
// next tile's sum (Õ·f + P̃·Ṽ, one FFMA where plain has an FMUL and an FADD). l then sums P·256.
// fold is the first half alone: the + 8 without the FFMA (the FFMA is what spills at d = 256 with
// --pv serial --v pretransposed, docs/21_fp8.md).
enum Ops : int { kOpsPlain = 0, kOpsLean, kOpsFold, kOpsChoices };
inline constexpr const char* kOpsNames[kOpsChoices] = {"plain", "lean", "fold"};
FA_HD constexpr bool ops_fold(int ops) { return ops != kOpsPlain; }  // 2^(x − m + 8): P·256 from the exponent
FA_HD constexpr bool ops_fuse(int ops) { return ops == kOpsLean; }   // Õ·f + P̃·Ṽ in one FFMA

// [per-d-defaults] --pv and --ops take "auto" by default: the pair measured fastest at each head
// dimension (docs/21_fp8.md, "The defaults"). At d = 128, overlap and lean. At d = 256, serial (the
// overlap's registers spill there) and fold (lean's fused FFMA spills with serial). An explicit value
// overrides it.
inline constexpr const char* kAuto = "auto";
FA_HD constexpr int default_pv_order(int d) { return d >= 256 ? kPvSerial : kPvOverlap; }
FA_HD constexpr int default_ops(int d) { return d >= 256 ? kOpsFold : kOpsLean; }

// [tile-sizes] 128 queries (two consumer warpgroups) × 128 keys per tile at every d. A stage is
// K (Bc × d bytes), Vᵀ (d × Bc) and, when the kernel transposes, V as TMA brought it (Bc × d): as
// many stages as fit beside the Q tile and the barriers, at most 8.
struct Schedule {
  int Br = 128, Bc = 128, stages = 2;
  bool raw_v = true;  // a buffer per stage for V before its transpose ([v-transpose])
  FA_HD constexpr int consumers() const { return Br / 64; }
  FA_HD constexpr int threads() const { return 128 * (1 + consumers()); }
};
inline constexpr int64_t kSmemBudget = 227 * 1024;
FA_HD constexpr int64_t stage_bytes(int Bc, int d, bool raw_v) { return int64_t(Bc) * d * (raw_v ? 3 : 2); }
FA_HD constexpr Schedule schedule_for(int d, int v_layout = kVKernel) {
  const bool raw = transposes_in_kernel(v_layout);
  const int64_t n = (kSmemBudget - 1024 - int64_t(128) * d) / stage_bytes(128, d, raw);
  return Schedule{128, 128, n > 8 ? 8 : int(n), raw};
}
FA_HD constexpr int64_t tiles_bytes(const Schedule& s, int d) { return int64_t(s.Br) * d + int64_t(s.stages) * stage_bytes(s.Bc, d, s.raw_v); }
FA_HD constexpr int64_t smem_bytes(const Schedule& s, int d) { return tiles_bytes(s, d) + 1024; }
FA_HD constexpr bool valid(const Schedule& s) { return s.Br == 128 && s.Bc == 128 && s.stages >= 2 && 8 * (1 + 6 * s.stages) <= 1024; }
static_assert(valid(schedule_for(128)) && valid(schedule_for(256)) && valid(schedule_for(128, kVPretransposed)) &&
                  valid(schedule_for(256, kVPretransposed)) && valid(schedule_for(64, kVPretransposed)) &&
                  smem_bytes(schedule_for(256), 256) <= kSmemBudget,
              "two stages or more beside Q at d = 128 and 256, either way of bringing V, and at d = 64 pretransposed");

// [stored-d] The kernels are compiled for d = 64, 128 and 256. At d = 128 and 256 a tile of Q or K is
// panels of 128-byte rows under the 128-byte swizzle ([sw128]); at d = 64 a row of e4m3 codes is 64
// bytes, one row of a 64-byte swizzled tile ([sw64]). Vᵀ's rows are the tile's 128 keys at every d,
// so Vᵀ keeps the 128-byte swizzle. The blueprint runs every d that is a multiple of 32.
inline constexpr int kHeadDims[] = {64, 128, 256};
// [sw64] The transposers (--v kernel, kernel-stepped) address V in 128-byte rows: below this d they
// are not built, and the step refuses them with the reason (options_reason); pretransposed runs.
inline constexpr int kRawVMinD = 128;
FA_HD constexpr bool v_layout_built(int d, int v_layout) { return !transposes_in_kernel(v_layout) || d >= kRawVMinD; }
inline std::string v_layout_reason(int d, int v_layout) {
  if (v_layout_built(d, v_layout)) return "";
  return std::string("--v ") + kVLayoutNames[v_layout] + " is not built at d = " + std::to_string(d) +
         " (the transposers address V in 128-byte rows, d >= " + std::to_string(kRawVMinD) +
         ": [sw64] in steps/21_fp8/schedule.hpp); --v pretransposed, the default, runs it";
}

// [sw64] The bytes of one row of a Q or K panel: 128 (the 128-byte swizzle) from d = 128, else d (64:
// the 64-byte swizzle). The k = 32 slice kk of a K-major e4m3 tile of R rows, from row r0 (a multiple
// of 8): panel 32kk / row bytes, then 32 bytes per slice inside the row. At 128-byte rows this is
// wgmma::kmajor_offset's arithmetic (a 16-bit slice of k = 16 is 32 bytes too).
FA_HD constexpr int qk_row_bytes(int d) { return d < 128 ? d : 128; }
FA_HD constexpr uint32_t qk_offset(int r0, int kk, int R, int d) {
  const uint32_t rb = uint32_t(qk_row_bytes(d));
  return uint32_t(32 * kk) / rb * uint32_t(R) * rb + uint32_t(r0) * rb + uint32_t(32 * kk) % rb;
}
// [sw64] The 64-byte swizzle's byte (r, c) of a tile of 64-byte rows (TMA's CU_TENSOR_MAP_SWIZZLE_64B
// and wgmma's mode 2): chunk c / 16 of row r at chunk position (c / 16) XOR ((r / 2) mod 4).
FA_HD constexpr uint32_t sw64_offset(int r, int c) { return uint32_t(r) * 64u + uint32_t(((c / 16) ^ ((r / 2) % 4)) * 16 + c % 16); }

// [setmaxnreg] Step 16's split: the producer warpgroup (TMA and the transposers) 24 registers each, the
// two consumers 240 (128·24 + 256·240 = 64512 of 65536). 40 and 232 serialize d = 256's wgmmas (docs/21).
inline constexpr int kProducerRegs = 24, kConsumerRegs = 240;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 65536, "the register file");

// [key-order] The e4m3 A fragment of wgmma k32: register q (0..3) of lane 4g + t holds row g + 8(q % 2),
// slots 4t .. 4t + 3 + 16(q / 2) of the 32 keys. The fp32 accumulator holds, for that row, the keys
// 8a + 2t + e (a = 0..3, e = 0, 1). So slot σ of a 32-key slice holds key key_of_slot(σ), and the
// lane packs its own accumulators without moving a value between lanes; V's row key_of_slot(σ) is
// Vᵀ's column σ.
FA_HD constexpr int key_of_slot(int slot) {
  return 16 * (slot / 16) + 8 * ((slot % 4) / 2) + 2 * ((slot % 16) / 4) + slot % 2;
}
FA_HD constexpr int slot_of_key(int key) {
  return 16 * (key / 16) + 4 * ((key % 8) / 2) + 2 * ((key % 16) / 8) + key % 2;
}
// The accumulator register (of a tile's Bc/2) that holds byte i (0..3) of A register q of slice kk.
FA_HD constexpr int acc_reg_of(int kk, int q, int i) {
  const int key = key_of_slot(16 * (q / 2) + i);  // the part that does not depend on the lane (t = 0)
  return 4 * ((32 * kk + key) / 8) + 2 * (q % 2) + (key % 2);
}

// [transpose4] A 4 × 4 block of bytes, rows r[0..3] (byte i of r[k] = column i of row k), into
// columns: out[i] byte k = r[k] byte i. prmt's selectors (PTX prmt.b32, __byte_perm): nibble n of s
// picks byte s_n of the pair (x: bytes 0-3, y: bytes 4-7) for byte n of the result.
FA_HD inline uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const uint64_t xy = (uint64_t(y) << 32) | x;
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) r |= uint32_t((xy >> (8 * ((s >> (4 * n)) & 7))) & 0xff) << (8 * n);
  return r;
#endif
}
FA_HD inline void transpose4(const uint32_t (&r)[4], uint32_t (&out)[4]) {
  const uint32_t t0 = byte_perm(r[0], r[1], 0x5140), t1 = byte_perm(r[0], r[1], 0x7362);
  const uint32_t t2 = byte_perm(r[2], r[3], 0x5140), t3 = byte_perm(r[2], r[3], 0x7362);
  out[0] = byte_perm(t0, t2, 0x5410), out[1] = byte_perm(t0, t2, 0x7632);
  out[2] = byte_perm(t1, t3, 0x5410), out[3] = byte_perm(t1, t3, 0x7632);
}

// [sw128] An e4m3 tile of R rows × C bytes in 128-byte swizzled panels (the 16-bit layout of
// common/kernel/wgmma_layout.hpp with twice the columns per panel): byte (r, c).
FA_HD constexpr uint32_t sw8_offset(int r, int c, int R) {
  return uint32_t(c / 128) * uint32_t(R) * 128u + uint32_t(r) * 128u + uint32_t(((c % 128) / 16) ^ (r % 8)) * 16u + uint32_t(c % 16);
}

// [v-transpose] The unit of the transpose: four keys whose slots are consecutive (slots 4u' .. 4u' + 3
// of their 32-key slice) by four consecutive dims. Unit u of a tile of Bc keys and d dims: slot group
// u % (Bc / 4), dim group u / (Bc / 4).
FA_HD constexpr int transpose_units(int Bc, int d) { return (Bc / 4) * (d / 4); }

// [transpose-banks] Which unit lane l of warp-instruction g takes (u = 32g + l; Bc = 128: 32 slot
// groups). Taken in order (slot group u % 32, dim group u / 32), the 32 lanes of a load read the same
// 4-byte column of 32 keys' rows: the swizzle spreads those rows over 8 16-byte chunks only, so every
// load was 8 bank wavefronts. Here lane l takes slot group 16(g % 2) + l/2 and dim group
// (l % 2 + 2(l/2) + 2(g/2)) mod (d/4): each load and each store of a warp-instruction touches 32 banks
// once (tests/test_step21.cpp counts them), and over g every (slot group, dim group) comes once.
struct TransposeUnit {
  int slot_group, dim_group;
};
FA_HD constexpr TransposeUnit transpose_unit(int u, int d) {
  const int g = u / 32, l = u % 32;
  return {16 * (g % 2) + l / 2, (l % 2 + 2 * (l / 2) + 2 * (g / 2)) % (d / 4)};
}

// [transpose-addr] (--v kernel-stepped) The same units in the same order, their shared-memory addresses
// stepped instead of rebuilt. With g = u / 32 and lane l = u % 32 as above, l % 2 + 2(l / 2) = l, so
// the dims are n0 = 4((l + 2⌊g/2⌋) mod d/4), the slots 4(16(g % 2) + ⌊l/2⌋), and with m = ⌊l/2⌋ mod 8 the
// keys 64(g % 2) + 32⌊l/16⌋ + 16⌊m/4⌋ + 2(m % 4) + {0, 1, 8, 9}. [sw128] XORs a row's (key mod 8) into
// the chunk bits 4–6 of its offset, and every other term of an address is a multiple of 128 that never
// touches them: so an address is (stage + row part + column part) ^ (chunk XOR), a key (row) more is
// +128 after the XOR, and key i's swizzle row (2(m % 4) + i % 2) differs from key 0's by bit 4. What a
// lane needs is worked out once (transpose_lane); per g: its dims (transpose_dims), the first load's and
// the first store's address (transpose_load0, transpose_store0); per i: an XOR and a constant add
// (transpose_load, transpose_store), which ptxas folds into the instruction's offset. The stage base
// must be a multiple of 128 (the swizzle wants 1024): tests/test_step21.cpp checks every unit's eight
// addresses against sw8_offset, and that a base off by 16 breaks them.
struct TransposeLane {
  uint32_t load_row, load_xor, store_slot;  // V's row offset of key 0 and its chunk XOR; Vᵀ's slot column
  int lane;
};
FA_HD constexpr TransposeLane transpose_lane(int lane) {
  const int m = (lane / 2) % 8;
  return {uint32_t(32 * (lane / 16) + 16 * (m / 4) + 2 * (m % 4)) * 128u, uint32_t(2 * (m % 4)) << 4,
          uint32_t(4 * (lane / 2)), lane};
}
FA_HD constexpr int transpose_dims(const TransposeLane& t, int g, int d) { return 4 * ((t.lane + (g & ~1)) & (d / 4 - 1)); }
FA_HD constexpr uint32_t transpose_load0(uint32_t raw, const TransposeLane& t, int g, int n0, int Bc) {
  return (raw + t.load_row + uint32_t(g & 1) * 64u * 128u + uint32_t(n0 / 128) * uint32_t(Bc) * 128u + uint32_t(n0 % 128)) ^
         t.load_xor;
}
FA_HD constexpr uint32_t transpose_load(uint32_t a0, int i) { return (a0 ^ (uint32_t(i & 1) << 4)) + 128u * uint32_t(8 * (i / 2) + (i & 1)); }
FA_HD constexpr uint32_t transpose_store0(uint32_t vt, const TransposeLane& t, int g, int n0) {
  return (vt + uint32_t(n0) * 128u + uint32_t(g & 1) * 64u + t.store_slot) ^ (uint32_t(n0 & 4) << 4);
}
FA_HD constexpr uint32_t transpose_store(uint32_t a0, int i) { return (a0 ^ (uint32_t(i) << 4)) + 128u * uint32_t(i); }

// [v-transpose] (pretransposed) The quantize kernel's staging tile for one 32-key slice: 8·d words, word
// (slot / 4)·d + dim holding that dim's slots 4(slot / 4) .. 4(slot / 4) + 3, byte slot % 4. Dim n's row
// of Vᵀ is words n, d + n, …, 7d + n, in order: two 16-byte stores. A lane's dims are E = d / row_lanes
// apart in words; at d = 64 the two half-warps' rows take turns two dims apart, so a byte store of a
// warp meets d/32 words on a bank at every d (tests/test_step21.cpp counts them).
FA_HD constexpr int vt_stage_byte(int slot, int dim, int d) { return 4 * ((slot / 4) * d + dim) + slot % 4; }

// [handshake] step 16's parities (the ring counts tiles j from 0; stage j % stages).
FA_HD constexpr uint32_t full_parity(int j, int stages) { return uint32_t(j / stages) & 1u; }
FA_HD constexpr uint32_t empty_parity(int j, int stages) { return (uint32_t(j / stages) & 1u) ^ 1u; }

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// [quantize] The quantize kernels' blocks: 4 warps, a row per warp at a time, 32 rows per block (a
// block never straddles a scale group: 32 divides 128).
inline constexpr int kQuantRows = 32;
// [half-rows] The lanes that share a row: 32, or 16 at d = 64, where a warp takes two rows at once so
// that a lane loads 8 bytes and stores 4 codes, as at d = 128 (a whole warp a row: 4 and 2).
FA_HD constexpr int row_lanes(int d) { return d == 64 ? 16 : 32; }

// [quantize] The workspace: the codes of Q, K and V (or Vᵀ [B, Hkv, d, nk32]), then every scale
// group's amax and descale (Q's, K's, V's), each part 256-byte aligned.
struct Layout {
  int64_t q8, k8, v8, amax, descale, bytes;
  int gq, gk, nk32;
};
inline int64_t up256(int64_t x) { return (x + 255) / 256 * 256; }
inline Layout layout(int64_t B, int64_t H, int64_t Hkv, int64_t N, int64_t Nk, int64_t d, bool block, bool vt) {
  Layout L{};
  L.gq = int(fp8::groups(N, block)), L.gk = int(fp8::groups(Nk, block)), L.nk32 = int((Nk + 31) / 32 * 32);
  const int64_t groups = B * H * L.gq + 2 * B * Hkv * L.gk;
  L.q8 = 0;
  L.k8 = up256(B * H * N * d);
  L.v8 = L.k8 + up256(B * Hkv * Nk * d);
  L.amax = L.v8 + up256(B * Hkv * d * (vt ? L.nk32 : Nk));
  L.descale = L.amax + up256(groups * 4);
  L.bytes = L.descale + up256(groups * 4);
  return L;
}

// The GPU side (kernel.cu).
void launch(const AttnParams& p, const StepOptions& opts, void* stream);
size_t workspace_bytes(const Shape& s, const StepOptions& opts);
// [quantize] The quantize kernels alone, their codes and descales back on the host (tests/test_gpu.cpp).
Fp8Inputs quantize_on_gpu(const Shape& s, const Inputs& in, int v_layout);

// The CPU side (blueprint.cpp).
BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sched, int v_layout, int ops = kOpsPlain);
LedgerSet closed_form(const Shape& s, const Schedule& sched, int v_layout, int ops = kOpsPlain);
int v_layout_of(const StepOptions& opts);
int pv_order_of(const StepOptions& opts, int d);  // [per-d-defaults] "auto" or absent: default_pv_order(d)
int ops_of(const StepOptions& opts, int d);       // [per-d-defaults] "auto" or absent: default_ops(d)

}  // namespace fa::step21
