// Step 19 — the backward on Hopper: step 13's K/V-stationary schedule rebuilt on steps 14–16's tools.
//
// The forward is step 16's (it saves O and L). A block owns one K/V tile of Bc = 128 keys and keeps
// dK and dV in registers while every Q tile of Br = 64 rows (--ablate tiles: 128 at d = 64, 80 at d = 128) that sees
// the tile streams past:
//   [roles]       a producer warp loads K and V once, then Q_i, dO_i and the rows' L·log2 e and D into
//                 a ring of stages with TMA ([ring]); two consumer warpgroups own 64 keys each
//                 ([setmaxnreg]); a writer warp adds each Q tile's dQ into the fp32 accumulator ([dq-writer]);
//   [swapped]     Sᵀ = K Qᵀ and dPᵀ = V dOᵀ, so that Pᵀ and dSᵀ are already in the accumulator layout
//                 of the A operand of dV += Pᵀ dO and dK += dSᵀ Q: both come from registers ([c-to-a]);
//   [ds-smem]     dSᵀ goes once to shared memory (two buffers): dQ_i = dS K reads it, transposed, as
//                 the A operand of a wgmma whose A and B are both MN-major ([dq-wgmma]);
//   [dq-writer]   each consumer stages its dQ_i in shared memory and the writer warp adds it into the
//                 accumulator with one bulk reduce-add (cp.reduce.async.bulk ... add.f32) — 16 KB per
//                 instruction, no per-thread atomics; --ablate atomics adds from registers instead.
// Around it two small kernels: step19_bwd_pre (D = rowsum(dO ∘ O), L·log2 e, the accumulator zeroed)
// and step19_dq_convert (dQ = scale · accumulator in the storage type).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernel/attn_params.hpp"
#include "kernel/causal.hpp"
#include "core/step.hpp"
#include "kernel/wgmma_layout.hpp"

namespace fa::step19 {

struct Schedule {
  int Br = 64;      // queries per Q tile (one wgmma M of dQ, one N of Sᵀ and dPᵀ)
  int Bc = 128;     // keys per block: a consumer warpgroup per 64
  int stages = 2;   // Q/dO stages in the ring
  FA_HD constexpr int consumers() const { return Bc / 64; }
  FA_HD constexpr int threads() const { return 128 * (1 + consumers()); }  // the producer warpgroup first
};

// [stored-d] The kernels are compiled for d = 64 and 128. At d = 256 K, V and two Q/dO stages alone
// would take 256 KB of shared memory, over the 227 KB a block may have: refused (the blueprint runs it).
inline constexpr int kHeadDims[] = {64, 128};
inline constexpr int64_t kSmemBudget = 227 * 1024;

// [dq-split] dQ_i = dS K_j (Br × d, summed over the block's Bc keys) is split between the two consumers:
//   by columns where a consumer's half of d is a whole 64-column panel (d = 128): consumer c computes
//     columns 64c .. 64c + 63 over all Bc keys;
//   by turns otherwise (d = 64): consumer t % 2 computes item t's whole dQ over all Bc keys, the
//     other none;
//   by keys (--ablate dq-keys): consumer c computes every column over its own 64 keys, and both
//     partial sums are added into the same accumulator — twice the adds of the others
//     (docs/19_hopper_backward.md: by keys was the default at d = 64 until by turns measured faster).
//   by rows (--ablate tiles: 128 queries a Q tile, d = 64): consumer c computes rows 64c .. 64c + 63
//     over all Bc keys — the accumulator chunk of those rows (at d = 64 a chunk is a 64-row tile's
//     whole accumulator).
//   transposed (--ablate tiles: 80 queries a Q tile, d = 128): a wgmma's M is 64 and 80 rows are not a
//     multiple of it, so the consumers compute dQᵀ = Kᵀ dSᵀ (M = d, N = 80 queries): consumer c the
//     rows 64c .. 64c + 63 of dQᵀ (dQ's columns) over all Bc keys, A = K_j's panel c MN-major, B = dS
//     K-major (stored [query][key], [ds-smem]). Its chunk is 64 columns × 80 rows, kept as dQᵀ's
//     registers ([dq-layout]).
// By columns and by turns read both halves of dSᵀ: the consumers meet at a named barrier every Q tile,
// and each Q tile's dQ is added once. By keys each consumer runs free. A consumer's dQ is one 64 × 64
// chunk (32 registers) per chunk it computes.
enum DqSplit : int { kByColumns = 0, kByTurns, kByKeys, kByRows, kTransposed };
FA_HD constexpr bool dq_by_columns(int d, int consumers) { return (d / consumers) % wgmma::kPanel == 0; }
FA_HD constexpr int default_split(int d, int consumers) { return dq_by_columns(d, consumers) ? kByColumns : kByTurns; }
inline constexpr int kChunk = 64;                         // a consumer's dQ: 64 rows × 64 columns of fp32
inline constexpr int kChunkFloats = kChunk * kChunk;      // 4096 floats, 16 KB
// Whether consumer c computes (and the writer adds) a chunk of item t, and which accumulator chunk
// (column panel) its chunk ch is: panel c by columns, ch by keys, the only one by turns.
FA_HD constexpr bool dq_computes(int split, int c, int t) { return split != kByTurns || t % 2 == c; }
FA_HD constexpr int dq_panel_of(int split, int c, int ch) {
  return split == kByColumns || split == kByRows || split == kTransposed ? c : split == kByKeys ? ch : 0;
}
// The operands of that chunk's product: A = the 64 queries of dSᵀ's query panel dq_a_panel (by rows,
// the consumer's; else the tile's only one), B = K_j's column panel dq_b_panel.
FA_HD constexpr int dq_a_panel(int split, int c) { return split == kByRows ? c : 0; }
FA_HD constexpr int dq_b_panel(int split, int c, int ch) { return split == kByRows ? 0 : dq_panel_of(split, c, ch); }
// [handshake] A consumer's dQ chunk buffers are filled and emptied once per use, parity use % 2 for
// both barriers (a consumer waits for the release of the buffer's previous use). With one chunk per
// item (by columns; by keys at d = 64, --ablate dq-keys) item t stages into buffer t % 2 (its use t / 2); with two (by
// keys at d = 128) chunk ch into buffer ch (use t); by turns, consumer c's u-th item (t = 2u + c)
// into buffer u % 2 (use u / 2); transposed, one buffer a consumer (shared memory), item t its use t.
FA_HD constexpr int dq_buffer_of(int split, int chunks, int t, int ch) {
  return split == kTransposed ? 0 : split == kByTurns ? (t / 2) % 2 : chunks == 1 ? t % 2 : ch;
}
FA_HD constexpr int dq_use_of(int split, int chunks, int t) {
  return split == kTransposed ? t : split == kByTurns ? t / 4 : chunks == 1 ? t / 2 : t;
}

// [setmaxnreg] The producer warpgroup (the producer warp, the writer warp, two idle) keeps 24
// registers per thread; the two consumers take 240 (128·24 + 256·240 = 64512 of the SM's 65536).
inline constexpr int kProducerRegs = 24;
inline constexpr int kConsumerRegs = 240;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 65536, "the register file");

// [dq-layout] Whether a schedule computes dQᵀ (a Q tile's rows not a multiple of a wgmma's M), and
// the rows of the accumulator's layout unit (a chunk): 64, or the Q tile's rows when transposed.
FA_HD constexpr bool dq_transposed(const Schedule& s) { return s.Br % 64 != 0; }
FA_HD constexpr int acc_rows(const Schedule& s) { return dq_transposed(s) ? s.Br : kChunk; }
FA_HD constexpr int64_t chunk_floats(const Schedule& s) { return int64_t(acc_rows(s)) * kChunk; }
FA_HD constexpr int dq_buffers(const Schedule& s) { return dq_transposed(s) ? 1 : 2; }  // a consumer's

// Shared memory per block ([smem-map]), every tile in [sw128] panels, 1024-aligned:
//   K_j, V_j (Bc × d each); stages × (Q_i, dO_i: Br × d each); two dSᵀ buffers (Bc × Br); two fp32 dQ
//   chunks per consumer (16 KB each: item t stages into chunk t % 2 while the writer may still be
//   reading item t − 1's out; transposed, one of 20 KB); stages × (L·log2 e, D: Br floats each); the
//   mbarriers (1 KB).
FA_HD constexpr int64_t kv_bytes(const Schedule& s, int d) { return int64_t(2) * s.Bc * d * 2; }
FA_HD constexpr int64_t stage_bytes(const Schedule& s, int d) { return int64_t(2) * s.Br * d * 2; }
FA_HD constexpr int64_t ds_bytes(const Schedule& s) { return int64_t(s.Bc) * s.Br * 2; }
FA_HD constexpr int64_t rows_bytes(const Schedule& s) { return int64_t(2) * s.Br * 4; }  // L·log2 e and D of a stage
FA_HD constexpr int64_t smem_bytes(const Schedule& s, int d) {
  return kv_bytes(s, d) + s.stages * stage_bytes(s, d) + 2 * ds_bytes(s) + int64_t(dq_buffers(s)) * s.consumers() * chunk_floats(s) * 4 +
         s.stages * rows_bytes(s) + 1024;
}
FA_HD constexpr int stages_that_fit(int d, int Br, int Bc) {
  const Schedule one{Br, Bc, 0};
  const int64_t n = (kSmemBudget - smem_bytes(one, d)) / (stage_bytes(one, d) + rows_bytes(one));
  return n > 4 ? 4 : int(n);
}

// [handshake] step 15's parities: stage t % stages holds Q tile t of the block's list during its
// (t / stages)-th use; a dQ chunk buffer is filled once per item (t), emptied once per item.
FA_HD constexpr uint32_t full_parity(int t, int stages) { return uint32_t(t / stages) & 1u; }
FA_HD constexpr uint32_t empty_parity(int t, int stages) { return (uint32_t(t / stages) & 1u) ^ 1u; }

// [q-range] The Q tiles that see any key of the K/V tile [j0, j0 + Bc) (step 13's).
FA_HD constexpr int64_t first_q_tile(int64_t j0, int64_t N, int64_t Nk, int64_t Br, bool causal) {
  if (!causal) return 0;
  const int64_t first_row = j0 - (Nk - N);
  if (first_row >= N) return num_tiles(N, Br);
  return first_row <= 0 ? 0 : first_row / Br;
}
// [window] One past the last Q tile that sees any key of the K/V tile ending at key j1 − 1 (step 13's).
FA_HD constexpr int64_t end_q_tile(int64_t j1, int64_t N, int64_t Nk, int64_t Br, bool causal, int64_t window) {
  const int64_t Tr = num_tiles(N, Br);
  if (!causal || window <= 0) return Tr;
  const int64_t last_row = j1 - 1 - (Nk - N) + window - 1;
  if (last_row < 0) return 0;
  return last_row / Br + 1 < Tr ? last_row / Br + 1 : Tr;
}
// [items] The block of K/V tile j (keys [j0, j1)) walks, for each query head of its group in turn, the
// Q tiles first .. end − 1: item t is Q tile first + t % per_head of the group's head t / per_head.
FA_HD constexpr int64_t q_tiles_of(int64_t j0, int64_t j1, int64_t N, int64_t Nk, int64_t Br, bool causal, int64_t window) {
  const int64_t first = first_q_tile(j0, N, Nk, Br, causal), end = end_q_tile(j1, N, Nk, Br, causal, window);
  return end > first ? end - first : 0;
}

// [dq-layout] The fp32 accumulator of a Q tile (Br·d floats at the tile's rows of the workspace) is
// kept as the consumers hold it, one 64 × 64 chunk per column panel: register r of thread t (0 .. 127)
// of the warpgroup's m64n64 accumulator ([acc]) at chunk offset 4·(128·(r / 4) + t) + r % 4. A thread's
// four consecutive registers are 16 consecutive bytes, and a warp's 16-byte stores of one register
// quad cover 512 consecutive bytes: the staging in shared memory is free of bank conflicts, and the
// chunk goes out as one contiguous bulk reduce-add. Offset, within the tile's Br·d floats, of (row r, column c).
FA_HD constexpr int64_t acc_offset(int r, int c) {
  const int cc = c % kChunk, reg = 4 * (cc / 8) + 2 * ((r % 16) / 8) + cc % 2;
  const int t = 32 * (r / 16) + 4 * (r % 8) + (cc % 8) / 2;
  return int64_t(c / kChunk) * kChunkFloats + 4 * (128 * (reg / 4) + t) + reg % 4;
}
// Transposed (dQᵀ, Q tiles of R rows: --ablate tiles at d = 128), the same rule over the m64nR
// accumulator of dQᵀ: dQ's column c is dQᵀ's row, the query r its column; a chunk of 64 columns × R rows.
FA_HD constexpr int64_t acc_offset_t(int r, int c, int R) {
  const int cc = c % kChunk, reg = 4 * (r / 8) + 2 * ((cc % 16) / 8) + r % 2;
  const int t = 32 * (cc / 16) + 4 * (cc % 8) + (r % 8) / 2;
  return int64_t(c / kChunk) * kChunk * R + 4 * (128 * (reg / 4) + t) + reg % 4;
}

// [workspace] Per head and row (N rounded up to kRowPad, and to whole Q tiles of the accumulator's
// unit: 640 rows with 80-row tiles), L·log2 e and D in fp32; then the fp32 dQ
// accumulator; with --deterministic, then one 32-bit semaphore per (b, h, Q tile of kSemRows rows);
// with --dq centered instead ([dq-centered]; never both), one fp32 row sum per (b, h, padded row),
// then each key/value head's mean key (d floats per (b, kv head)).
inline constexpr int kRowPad = 128;
inline constexpr int kSemRows = 64;  // = the default Schedule::Br
FA_HD constexpr int64_t gcd_of(int64_t a, int64_t b) { return b == 0 ? a : gcd_of(b, a % b); }
FA_HD constexpr int64_t row_pad(int unit) { return kRowPad / gcd_of(kRowPad, unit) * unit; }  // their least common multiple
FA_HD constexpr int64_t rows_padded(int64_t N, int unit = kChunk) { return num_tiles(N, row_pad(unit)) * row_pad(unit); }
static_assert(row_pad(kChunk) == kRowPad && row_pad(80) == 640, "the padding a 64-row and an 80-row unit need");
template <int Unit> inline constexpr int64_t kRowPadOf = row_pad(Unit);  // as a constant, for the kernels
FA_HD constexpr int64_t semaphores(int64_t BH, int64_t N) { return BH * (rows_padded(N) / kSemRows); }
FA_HD constexpr int64_t workspace_bytes(int64_t BH, int64_t N, int64_t d, bool det = false, bool centered = false, int64_t BHk = 0,
                                        int unit = kChunk) {
  return BH * rows_padded(N, unit) * (4 * 2 + d * 4) + (det ? 4 * semaphores(BH, N) : 0) +
         (centered ? 4 * (BH * rows_padded(N) + BHk * d) : 0);
}
// [dq-centered] --dq centered: dQ_i = scale · Σ_j dS_ij (k_j − c) with c the key/value head's mean
// key. In exact arithmetic it is plain dQ (Σ_j dS_ij = 0); with D from the O the forward stored in
// 16 bits, Σ_j dS_ij = −δ_i, and the plain sum carries δ_i along the keys' common part, which this
// one leaves out (docs/19_hopper_backward.md, "dQ at long key ranges"). The pre kernel zeroes the row
// sums and the means; step19_key_mean adds every block of kMeanKeys keys / Nk into its head's mean;
// the consumers add each query's Σ_j dS_ij over their keys (the rounded values dQ's product reads)
// into its row sum; the convert kernel takes c · (row sum) off the accumulator. The row sums go in
// with atomics in no fixed order: refused with --deterministic.
enum DqMode : int { kDqPlain = 0, kDqCentered, kDqModes };
inline constexpr const char* kDqNames[kDqModes] = {"plain", "centered"};
inline constexpr int kMeanKeys = 256;  // keys per block of step19_key_mean
int dq_mode_of(const StepOptions& o);

// [deterministic] --deterministic on: every Q tile's dQ adds land in one fixed order, whatever the
// timing. The K/V tiles that see Q tile i are a run [kv_first_of(i), kv_end_of(i)) (each K/V tile's
// Q tiles [first_q_tile, end_q_tile) move right as j grows, both ends monotone). Without a mask they
// add in ascending j; with one (and with a window) in descending j, shortest block first: the block
// of the last K/V tile that sees i has i among its first items, so each block waits about one item
// for the block after it, where ascending order would make block j idle until block 0 reached its
// tiles. A semaphore per (b, h, Q tile) counts the adds so far: block j's writer waits until it equals
// add_rank(i, j), adds, waits for its adds to land, and increments it. The grid runs the blocks in
// that order (blockIdx.x = j, reversed with a mask): a block only waits for blocks launched before it.
// Binary searches over the K/V tiles (log2 Tc steps): the smallest j whose Q tiles end past i, and
// the smallest j whose Q tiles start past i.
FA_HD constexpr int64_t kv_first_of(int64_t i, int64_t N, int64_t Nk, int64_t Br, int64_t Bc, bool causal, int64_t window) {
  int64_t lo = 0, hi = num_tiles(Nk, Bc);
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2, j1 = (mid + 1) * Bc < Nk ? (mid + 1) * Bc : Nk;
    if (end_q_tile(j1, N, Nk, Br, causal, window) > i) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}
FA_HD constexpr int64_t kv_end_of(int64_t i, int64_t N, int64_t Nk, int64_t Br, int64_t Bc, bool causal) {
  int64_t lo = 0, hi = num_tiles(Nk, Bc);
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (first_q_tile(mid * Bc, N, Nk, Br, causal) > i) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}
// The place of K/V tile j among the adds into Q tile i (0 adds first).
FA_HD constexpr int64_t add_rank(int64_t i, int64_t j, int64_t N, int64_t Nk, int64_t Br, int64_t Bc, bool causal, int64_t window) {
  return causal ? kv_end_of(i, N, Nk, Br, Bc, causal) - 1 - j : j - kv_first_of(i, N, Nk, Br, Bc, causal, window);
}
// The K/V tile of block x (blockIdx.x) of Tc: ascending, reversed for the deterministic causal order.
FA_HD constexpr int64_t kv_tile_of_block(int64_t x, int64_t Tc, bool det, bool causal) { return det && causal ? Tc - 1 - x : x; }

inline constexpr float kLog2e = 1.4426950408889634f;

// [ablation] --ablate takes one idea out (same results up to rounding and the order of dQ's adds):
//   atomics   dQ added from the consumers' registers with 16-byte fp32 reductions
//             (red.global.add.v4.f32) instead of staged and bulk-added by the writer warp;
//   overlap   every product waited for before the next elementwise step (no [overlap]);
//   dq-keys   dQ split by keys (each consumer every column over its own 64 keys) instead of by columns
//             (d = 128: two chunks, 32 more registers) or by turns (d = 64): the consumers no longer
//             meet every Q tile, and each Q tile's dQ is added twice;
//   dk-first  FlashAttention-3's order: dQ issued before dK and staged while dK runs, the Q/dO stage
//             released at the next item's first wait — instead of dK issued before the consumers meet;
//   producer  no producer warp: consumer 0's first thread issues every load itself ([no-producer]),
//             item t + stages − 1's as item t begins, after waiting for the other consumer's release;
//   producer-last  (d = 64, dQ by turns) the same, but item t + stages − 1's loads issued by the consumer
//             that computed item t − 1's dQ, the one that releases that stage last: no wait in line;
//   tiles     FlashAttention-3's tile shape for d instead of 64 × 128 ([tile-sizes]): at d = 64, 128 × 128
//             tiles, dQ split by rows; at d = 128, 80 × 128 tiles, dQ computed transposed.
//   swapped   S = Q Kᵀ and dP = dO Vᵀ (queries as the wgmma's M) instead of Sᵀ and dPᵀ ([swapped]): P and
//             dS are then not in the A-operand layout of dV += Pᵀ dO and dK += dSᵀ Q, so each consumer
//             writes both to shared memory (its own buffers, where dSᵀ's two were) and those products
//             read A from there, MN-major; dQ = dS K takes dS from registers instead, over the
//             consumer's 64 keys: split by keys, as with dq-keys ([unswapped]).
// Compiled for fp16 only (refusal()), without --deterministic.
// --ablate tiles: the Q tile's rows at d = 64 and d = 128 ([tile-sizes]).
FA_HD constexpr int tiles_br(int d) { return d == 64 ? 128 : 80; }
enum Ablation : int { kFull = 0, kAtomics, kNoOverlap, kDqKeys, kDkFirst, kNoProducer, kNoProducerLast, kTiles, kSwapped, kAblations };
inline constexpr const char* kAblationNames[kAblations] = {"none", "atomics", "overlap", "dq-keys", "dk-first", "producer",
                                                           "producer-last", "tiles", "swapped"};
// [no-producer] Who issues a block's loads: the producer warp (the default), consumer 0's first thread,
// or the first thread of the consumer that released the stage last.
enum LoadIssuer : int { kByProducer = 0, kByConsumer0, kByLastRelease };
int ablation_of(const StepOptions& o);
// Whether an ablation is built at head dimension d: producer-last where dQ is split by turns; the
// others everywhere (refusal() says why, the blueprint and the launcher follow it).
FA_HD constexpr bool ablation_built(int ablation, int d) { return ablation == kNoProducerLast ? default_split(d, 2) == kByTurns : true; }
// [dq-split] How a run splits dQ.
FA_HD constexpr int split_of(int d, int ablation) {
  return ablation == kDqKeys || ablation == kSwapped ? kByKeys : ablation == kTiles ? (d == 64 ? kByRows : kTransposed) : default_split(d, 2);
}

// [tile-sizes] 64 queries × 128 keys, with as many Q/dO stages as fit (at most 4): 2 at d = 128, 4 at
// d = 64 (docs/19_hopper_backward.md). --ablate tiles runs FlashAttention-3's shapes instead. At
// d = 64, 128 queries × 128 keys: Sᵀ and dPᵀ are m64n128 (64 registers each), dQ is split by rows
// ([dq-split]), and two stages fit. At d = 128 (where 128 queries would need Sᵀ, dPᵀ, dK and dV in 256
// registers a thread, over the consumers' 240), 80 queries × 128 keys: Sᵀ and dPᵀ are m64n80 (40
// registers each), dQ is computed transposed, and two stages fit beside one dQ buffer a consumer.
FA_HD constexpr Schedule schedule_for(int d, int ablation = kFull) {
  const int Br = ablation == kTiles ? tiles_br(d) : 64;
  return Schedule{Br, 128, stages_that_fit(d, Br, 128)};
}
FA_HD constexpr bool valid(const Schedule& s, int d) {
  return (s.Br == 64 || s.Br == tiles_br(d)) && s.Bc == 128 && s.stages >= 2 && d % wgmma::kPanel == 0 && s.Br % 16 == 0 &&
         smem_bytes(s, d) <= kSmemBudget;
}
static_assert(valid(schedule_for(64), 64) && valid(schedule_for(128), 128), "K, V, two stages and the buffers fit");
static_assert(valid(schedule_for(64, kTiles), 64) && schedule_for(64, kTiles).stages == 2, "128 × 128 at d = 64: two stages fit");
static_assert(valid(schedule_for(128, kTiles), 128) && schedule_for(128, kTiles).stages == 2, "80 × 128 at d = 128: two stages fit");
static_assert(!dq_transposed(schedule_for(64, kTiles)) && dq_transposed(schedule_for(128, kTiles)), "80 rows: dQᵀ");
static_assert(!valid(schedule_for(256), 256), "d = 256 does not fit: refused");
// [tile-sizes] With 128-query tiles (80 at d = 128) the consumer cannot keep Sᵀ's fp32 Pᵀ beside dPᵀ,
// dK, dV and Pᵀ's operand registers (at d = 64 ptxas serialized the wgmmas, C7512): dSᵀ = P̃ᵀ ∘ (dPᵀ − D)
// takes P̃ᵀ, Pᵀ rounded to the storage type as dV's product reads it. The results move by rounding alone.
FA_HD constexpr bool ds_from_rounded_p(const Schedule& s) { return s.Br != 64; }

bool deterministic(const StepOptions& o);  // --deterministic on ([deterministic])

// [dropout] --dropout-kernel: refuse (the default) or run the backward with the mask. Step 19 may apply
// dropout only if it costs at most 10 %, and measured it costs more (docs/19_hopper_backward.md,
// "Dropout"): --dropout is refused with that reason, and `run` is the experiment that measures it.
enum DropoutKernel : int { kDropoutRefuse = 0, kDropoutRun, kDropoutKernels };
inline constexpr const char* kDropoutKernelNames[kDropoutKernels] = {"refuse", "run"};
int dropout_kernel_of(const StepOptions& o);

// What the kernels refuse (the same words on the CPU and the GPU): "" when the options run.
std::string refusal(bool bf16, int d, bool dropout, const StepOptions& o);

// The CPU side (blueprint.cpp): the three kernels' schedule, counted; and the same ledger in closed form.
BackwardBlueprintResult blueprint(const Shape& s, const Inputs& in, const Forward& fwd, const Tensor4& dO, const Schedule& sched,
                                  int ablation, bool det = false, bool centered = false);
LedgerSet closed_form(const Shape& s, const Schedule& sched, int ablation, bool det = false, bool centered = false);

// The GPU side (kernel.cu).
void launch_backward(const BwdParams& p, const StepOptions& opts, void* stream);
size_t backward_workspace_bytes(const Shape& s, const StepOptions& opts);

}  // namespace fa::step19
