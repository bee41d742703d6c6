// Step 20 — a persistent forward: step 16's kernel, its blocks kept resident.
//
// Step 16 launches a block per (b, h, Q tile): on a small causal problem that is a few waves of
// short blocks of unequal length, each with its prologue (barriers, Q, the first K/V tiles) and its
// epilogue (O out) paid in full and nothing to overlap them with. This step changes four things:
//   [persistent]  one block per SM; each takes work items (b, h, Q tile) one after another from an
//                 atomic counter ([dynamic]: an SM that finishes early takes the next), and the ring
//                 of K/V stages, its barriers and the consumers' turns run on across items: the
//                 producer loads the next item's Q and first K/V tiles while the consumers finish the
//                 last one's P·V and write O (O is staged through a buffer of its own where it fits: [own-o]);
//   [lpt]         the items in longest-processing-time-first order within chunks of heads whose K
//                 and V fit the L2 together, so that the blocks running at once share K and V, and
//                 the short causal items fill the tail instead of the long ones ([work-order]);
//   [exp2-poly]   2^x on the FMA units — a cubic on the fraction, the integer part added to the
//                 exponent's bits — for a share of the exponentials (--exp2 mufu|poly|mixed), where
//                 the special-function unit bounds the loop (d = 64);
//   [lazy-rescale] O and l rescaled only when the row max has grown past the max the exponentials
//                 use by more than kRescaleThreshold (log2 units); otherwise the stale max stays.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "kernel/attn_params.hpp"
#include "kernel/causal.hpp"
#include "core/step.hpp"
#include "kernel/wgmma_layout.hpp"

namespace fa::step20 {

struct Schedule {
  int Br = 128;        // queries per item: a consumer warpgroup per 64 rows (two or three)
  int Bc = 128;        // keys per K/V tile
  int stages = 2;      // K/V stages in the ring
  bool own_o = false;  // [own-o] O staged in a buffer of its own (else over the Q tile, as step 16)
  FA_HD constexpr int consumers() const { return Br / 64; }
  FA_HD constexpr int threads() const { return 128 * (1 + consumers()); }  // the producer warpgroup first
};

// [tile-sizes] Step 16's tiles (192 × 128 at d = 64, 128 × 128 at d = 128, 128 × 64 at d = 256). [own-o]
// O gets a buffer of its own where two stages or more still fit beside it — d = 64 (5 stages) and
// d = 128 (2 stages, one fewer than step 16) — so the next item's Q can load while O is written; at
// d = 256 it would leave one stage, and O goes over Q as in step 16 (the next Q waits for it).
inline constexpr int64_t kSmemBudget = 227 * 1024;
FA_HD constexpr int stages_beside(int d, int Br, int Bc, bool own_o) {
  const int64_t n = (kSmemBudget - 1024 - int64_t(Br) * d * 2 * (own_o ? 2 : 1)) / (int64_t(2) * Bc * d * 2);
  return n > 8 ? 8 : int(n);
}
FA_HD constexpr Schedule tile_of(int d, int Br, int Bc) {
  const bool own = stages_beside(d, Br, Bc, true) >= 2;
  return Schedule{Br, Bc, stages_beside(d, Br, Bc, own), own};
}
FA_HD constexpr Schedule schedule_for(int d) {
  return d <= 64 ? tile_of(d, 192, 128) : d <= 128 ? tile_of(d, 128, 128) : tile_of(d, 128, 64);
}

// [stored-d] The kernels are compiled for d = 64, 128 and 256 (step 16's); the blueprint runs every d.
inline constexpr int kHeadDims[] = {64, 128, 256};

// [setmaxnreg] Step 16's split: the producer warpgroup at 24 registers, the consumers the rest.
inline constexpr int kProducerRegs = 24;
FA_HD constexpr int consumer_regs(int consumers) { return consumers == 2 ? 240 : 160; }

// Shared memory per block: the Q tile, O's own buffer ([own-o]), then `stages` × (K tile, V tile),
// then the mbarriers in the last 1 KB.
FA_HD constexpr int64_t q_bytes(const Schedule& s, int d) { return int64_t(s.Br) * d * 2; }
FA_HD constexpr int64_t tiles_bytes(const Schedule& s, int d) {
  return q_bytes(s, d) * (s.own_o ? 2 : 1) + int64_t(s.stages) * 2 * s.Bc * d * 2;
}
FA_HD constexpr int64_t smem_bytes(const Schedule& s, int d) { return tiles_bytes(s, d) + 1024; }
// The last kilobyte: Q's two barriers, the item slots' four, four per stage, then the two slots (8 bytes).
FA_HD constexpr bool valid(const Schedule& s) {
  return (s.Br == 128 || s.Br == 192) && s.Bc % 64 == 0 && s.Bc <= 128 && s.stages >= 2 && 8 * (6 + 4 * s.stages) + 8 <= 1024;
}
FA_HD constexpr bool compiled_fit(int d) { return valid(schedule_for(d)) && smem_bytes(schedule_for(d), d) <= kSmemBudget; }
static_assert(compiled_fit(64) && compiled_fit(128) && compiled_fit(256), "every compiled d fits the block");
static_assert(schedule_for(64).own_o && schedule_for(128).own_o && !schedule_for(256).own_o,
              "[own-o] where two stages fit beside it");

// [handshake] Step 16's parities, counted over the block's life: the ring's g-th tile (all items
// together) is in stage g % stages during its (g / stages)-th use.
FA_HD constexpr uint32_t full_parity(int g, int stages) { return uint32_t(g / stages) & 1u; }
FA_HD constexpr uint32_t empty_parity(int g, int stages) { return (uint32_t(g / stages) & 1u) ^ 1u; }

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// ---- [work-order] the items and their order -------------------------------------------------------
// An item is (b, h, Q tile): B·H·Tr of them. They are ordered in chunks of `chunk` (b, h) heads (b·H + h
// consecutive, so a GQA group's query heads sit together); inside a chunk by Q tile — the longest
// first with the mask or a window (longest processing time first: the tiles that visit the most K/V
// tiles), in order without — and, for each tile, head by head. A chunk's K and V fit the L2 together
// (chunk_heads below): the blocks running at once read the same few heads' K and V.
struct WorkOrder {
  int64_t B = 1, H = 1, Tr = 1;  // heads and Q tiles
  int64_t chunk = 1;             // (b, h) heads per chunk
  bool longest_first = false;    // [lpt] the mask or a window make the tiles' lengths differ
  FA_HD constexpr int64_t items() const { return B * H * Tr; }
};
struct Work {
  int64_t b = 0, h = 0, qtile = 0;
};
FA_HD constexpr Work work_item(int64_t t, const WorkOrder& w) {
  const int64_t BH = w.B * w.H, per_chunk = w.chunk * w.Tr;
  const int64_t c = t / per_chunk, r = t % per_chunk;
  const int64_t heads = (c + 1) * w.chunk <= BH ? w.chunk : BH - c * w.chunk;  // the last chunk may be short
  const int64_t rank = r / heads, bh = c * w.chunk + r % heads;
  return Work{bh / w.H, bh % w.H, w.longest_first ? w.Tr - 1 - rank : rank};
}
// [ablation] lpt: items in step 16's grid order — Q tile fastest, from the last (its [order]: the
// heaviest causal block of a head first), then head by head; no chunks, no order across heads.
FA_HD constexpr Work plain_item(int64_t t, const WorkOrder& w) {
  const int64_t bh = t / w.Tr;
  return Work{bh / w.H, bh % w.H, w.Tr - 1 - t % w.Tr};
}
// Heads per chunk: as many whose K and V (Nk × d × 2 bytes each, shared by a GQA group's H / Hkv query
// heads) fit half of an L2 of l2_bytes, at least one.
inline int64_t chunk_heads(int64_t H, int64_t Hkv, int64_t Nk, int64_t d, int64_t l2_bytes) {
  const int64_t kv_bytes = 2 * Nk * d * 2, group = H / (Hkv > 0 ? Hkv : H);
  const int64_t n = (l2_bytes / 2) / (kv_bytes > 0 ? kv_bytes : 1) * group;
  return n < 1 ? 1 : n;
}
// The H200's 50 MiB L2: what the blueprint and the tests order for (the GPU asks its own).
inline constexpr int64_t kBlueprintL2 = 50ll << 20;

// The K/V tiles item `w` visits (its cost, for the order and the tail bound).
FA_HD constexpr int64_t item_tiles(const Work& w, int64_t N, int64_t Nk, int Br, int Bc, bool causal, int64_t window) {
  const int64_t i0 = w.qtile * Br, i1 = i0 + Br < N ? i0 + Br : N;
  return kv_tiles_for(i0, i1, N, Nk, Bc, causal) - first_kv_tile(i0, i1, N, Nk, Bc, causal, window);
}

// ---- [exp2-poly] 2^x on the FMA units ---------------------------------------------------------------
// x = n + f with n = ⌊x⌋ and f ∈ [0, 1): 2^x = 2^n · 2^f. 2^f by a cubic (the minimax fit of relative
// error on [0, 1], by scripts/exp2_poly.py: max |p(f)/2^f − 1| = 7.48e-5, below fp16's unit roundoff
// 2^-11 = 4.9e-4 by a factor of 6.5, and bf16's by 52), then 2^n by adding n to the exponent field.
// Below x = −125 the result is 0 (p may be just under 1, and 2^n·p must stay a normal float; ex2.approx.ftz
// flushes below 2^-126), and x = −∞, a masked key, gives exactly 0. Above 0 it holds up to the lazy
// rescale's 2^8 and beyond. docs/20_persistent.md proves the bound, tests/test_step20.cpp checks it.
inline constexpr float kExp2Coeffs[4] = {0.99992521856401f, 0.695833540506448f, 0.22606715539313021f, 0.07802452266443176f};
inline constexpr double kExp2PolyRelErr = 7.4782e-5;  // the fit's own error (the float arithmetic adds < 8 · 2^-24)
// [exp2-noconv] On the GPU, ⌊x⌋ and its integer without a conversion instruction (FRND, F2I: the narrow
// unit MUFU.EX2 runs on): x + 1.5·2^23 rounded down (an FADD on the FMA pipe) is 1.5·2^23 + ⌊x⌋ exactly,
// its float is ⌊x⌋ after subtracting 1.5·2^23 again, and its bits are 0x4B400000 + ⌊x⌋, whose low 9
// bits (all the exponent add keeps after the shift) are ⌊x⌋'s. The same n as floorf: the same result.
inline constexpr float kFloorMagic = 12582912.0f;  // 1.5 · 2^23: one unit in its last place
FA_HD inline float poly_exp2(float x) {
  const float xc = x < -125.0f ? -125.0f : x;  // keeps n in range; −∞ too
#if defined(__CUDA_ARCH__)
  const float t = __fadd_rd(xc, kFloorMagic);
  const float n = t - kFloorMagic, f = xc - n;
#else
  const float n = floorf(xc), f = xc - n;
#endif
  const float p = fmaf(fmaf(fmaf(kExp2Coeffs[3], f, kExp2Coeffs[2]), f, kExp2Coeffs[1]), f, kExp2Coeffs[0]);
  int32_t bits;
#if defined(__CUDA_ARCH__)
  bits = __float_as_int(p) + int32_t(uint32_t(__float_as_int(t)) << 23);
  const float r = __int_as_float(bits);
#else
  std::memcpy(&bits, &p, 4);
  bits += int32_t(n) * (1 << 23);
  float r;
  std::memcpy(&r, &bits, 4);
#endif
  return x < -125.0f ? 0.0f : r;
}
// --exp2: which exponentials of a row's tile go to the polynomial. mufu (the default): none, every one on
// MUFU.EX2; mixed: one column group in four (kPolyOneIn), the rest on MUFU.EX2; poly: all. The default was
// mixed until the runs measured mufu faster at every point on an H100 and an H200 (docs/20_persistent.md).
enum Exp2 : int { kExp2Mufu = 0, kExp2Poly, kExp2Mixed, kExp2Choices };
inline constexpr const char* kExp2Names[kExp2Choices] = {"mufu", "poly", "mixed"};
inline constexpr int kPolyOneIn = 4;
FA_HD constexpr bool poly_at(int mode, int n) { return mode == kExp2Poly || (mode == kExp2Mixed && n % kPolyOneIn == kPolyOneIn - 1); }
// FMA-pipe operations of one poly_exp2 (the ledger's non-matmul count): the clamp, the floor (an add
// rounded down and a subtract, [exp2-noconv]), the fraction, three FMAs, the exponent's shift and add,
// the select.
inline constexpr int kPolyOps = 10;

// ---- [lazy-rescale] ----------------------------------------------------------------------------------
// The row's running max m (log2 units) is what the exponentials subtract. A new tile's max m' is
// taken only when m' − m > kRescaleThreshold (and on the first tile: m = −∞); otherwise m stays, the
// tile's p = 2^(s − m) may reach 2^threshold = 256, and neither O nor l is rescaled. O = Σ p v / Σ p
// does not depend on which m the p share (docs/20_persistent.md), and 256 · Bc per tile is far from
// fp32's range; P in fp16 or bf16 has its relative precision at any size up to 65504.
inline constexpr float kRescaleThreshold = 8.0f;
FA_HD constexpr bool takes_new_max(float m_old, float m_new) { return !(m_new - m_old <= kRescaleThreshold); }  // m_old = −∞: yes

// [ablation] Each change taken out alone (same results up to rounding): persistent (one block per
// item, in the same order), lpt (step 16's order, no chunks), rescale (every tile rescales, as step 16).
enum Ablation : int { kFull = 0, kNoPersistent, kNoLpt, kNoLazy, kAblations };
inline constexpr const char* kAblationNames[kAblations] = {"none", "persistent", "lpt", "rescale"};
int ablation_of(const StepOptions& opts);
int exp2_of(const StepOptions& opts);

// The GPU side (kernel.cu).
void launch(const AttnParams& p, const StepOptions& opts, void* stream);
size_t workspace_bytes(const Shape& s, const StepOptions& opts);

// The CPU side (blueprint.cpp). A variant: --exp2 and the ablations. Stats: what the data decided.
struct Variant {
  int exp2 = kExp2Mufu;
  bool lazy = true, persistent = true, lpt = true;
};
Variant variant_of(const StepOptions& opts);
struct Stats {
  int64_t row_tiles = 0, rescales = 0;  // rows' tiles that took a new max, of all rows' tiles visited
};
// The H200's 132 SMs: the grid the blueprint and the closed form count a persistent launch's blocks by.
inline constexpr int64_t kBlueprintSms = 132;
int64_t launch_barriers(const Shape& s, const Schedule& sched, bool persistent);
BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sched, const Variant& v, Stats* stats = nullptr);
LedgerSet closed_form(const Shape& s, const Schedule& sched, const Variant& v);

}  // namespace fa::step20
