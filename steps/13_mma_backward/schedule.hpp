// Step 13 — the backward pass on tensor cores, at FlashAttention-2's speed.
//
// The forward is step 12's (it saves O and L). The backward is step 08's fused schedule — a block
// per K/V tile walks the Q tiles, dK and dV stay on chip, dQ is added with fp32 atomics — rebuilt
// with what steps 09–12 taught the forward, on FlashAttention-2's grid of warps:
//   [transposed]  Sᵀ = K Qᵀ and dPᵀ = V dOᵀ (keys × queries: the forward's S with the roles of Q and
//                 K swapped), each warp a 32-key × Br/2-query tile of them ([sdp-warps]); Pᵀ and
//                 dSᵀ rebuilt in its registers from L and D;
//   [pt-smem]     Pᵀ and dSᵀ go through shared memory: dV += Pᵀ dO and dK += dSᵀ Q are split over
//                 the warps by keys and dims ([dkv-warps]), dQ = dS K by queries and dims
//                 ([dq-warps]) — each warp's products read about as few fragments as the tile allows;
//   [two-barriers] one barrier before a Q tile's products, one once its Pᵀ and dSᵀ are whole;
//   [pipeline]    Q_i, dO_i and the rows' L and D are loaded with cp.async one tile ahead;
//   [x4]          every fragment is read with ldmatrix.x4 from XOR-swizzled tiles (step 12's);
//   [exp2]        P = exp2(s·scale·log2 e − L·log2 e): the pre kernel stores L·log2 e once.
// --deterministic replaces the racing atomics on dQ ([deterministic]); --dropout P draws the
// forward's mask again from its counters ([dropout], common/kernel/dropout.hpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernel/attn_params.hpp"
#include "kernel/causal.hpp"
#include "core/step.hpp"

namespace fa::step13 {

struct Schedule {
  int Br = 64;   // queries per step of the inner loop (a Q tile)
  int Bc = 128;  // keys per block (the K/V tile it owns)
  FA_HD constexpr int warps() const { return Bc / 16; }
  // [sdp-warps] Sᵀ and dPᵀ (Bc × Br) over a grid of Bc/32 warps along the keys × 2 along the queries:
  // 32 keys × Br/2 queries each, so that every fragment read feeds two or more products.
  FA_HD constexpr int key_groups() const { return Bc / 32; }
  FA_HD constexpr int sdp_queries() const { return Br / 2; }
  // [dkv-warps] dV and dK (Bc × d) over dkv_key_groups(d) warps along the keys × dkv_dim_groups(d)
  // along the dims: 32 keys × d/2 each (16 keys × d when d = 16).
  FA_HD constexpr int dkv_dim_groups(int d) const { return d >= 32 ? 2 : 1; }
  FA_HD constexpr int dkv_key_groups(int d) const { return warps() / dkv_dim_groups(d); }
  FA_HD constexpr int dkv_keys(int d) const { return Bc / dkv_key_groups(d); }
  FA_HD constexpr int dkv_dims(int d) const { return d / dkv_dim_groups(d); }
  // [dq-warps] dQ_i = dS K_j (Br × d) is split over the warps: each computes qm() m16 row tiles ×
  // dq_dims(d) dimensions — 32 × 32 where the tile allows, so that every ldmatrix feeds two
  // products; 16 rows otherwise (small d).
  FA_HD constexpr bool qm2_fits(int d) const {
    return Br % 32 == 0 && warps() % (Br / 32) == 0 && (d / (warps() / (Br / 32))) % 16 == 0;
  }
  FA_HD constexpr int qm(int d) const { return qm2_fits(d) ? 2 : 1; }
  FA_HD constexpr int rgroups(int d) const { return Br / (16 * qm(d)); }
  FA_HD constexpr int cgroups(int d) const { return warps() / rgroups(d); }
  FA_HD constexpr int dq_dims(int d) const { return d / cgroups(d); }
};
// [tile-sizes] Per head dimension (docs/13_mma_backward.md, "Tuning"): 8 warps; at d = 128 a warp's dK
// and dV take 128 registers, so 64 queries per step (Sᵀ and dPᵀ: 64 more); at d <= 64 they take
// half as many, and 128 queries per step halve the steps.
FA_HD constexpr Schedule schedule_for(int d) { return d <= 64 ? Schedule{128, 128} : Schedule{64, 128}; }

// [tune] The tile shapes measured against each other (--tiles, fp16, d = 64 and 128 only).
enum TileChoice : int { kAuto = 0, k64x128, k128x128, k32x128, k64x64, kTileChoices };
inline constexpr const char* kTileNames[kTileChoices] = {"auto", "64x128", "128x128", "32x128", "64x64"};
FA_HD constexpr Schedule schedule_for(int d, int tiles) {
  return tiles == k64x128 ? Schedule{64, 128}
         : tiles == k128x128 ? Schedule{128, 128}
         : tiles == k32x128 ? Schedule{32, 128}
         : tiles == k64x64 ? Schedule{64, 64}
                           : schedule_for(d);
}
// [tune] Changes of the main kernel measured against it (--experiment; compiled as --tiles is: fp16,
// d = 64 and 128, the default tiles, without --deterministic or --dropout). They change when and how
// dQ's atomics leave, not what is computed or counted:
//   dq-end  dQ_i formed after dK and dV rather than right after the second barrier, where all warps
//           start it together (their reductions then leave staggered, and cannot drain behind dK/dV);
//   red64   two 8-byte reductions per lane and C tile instead of one 16-byte one;
//   red32   four 4-byte reductions per lane and C tile, as step 08 and FlashAttention-2 issue them.
enum Experiment : int { kAsBuilt = 0, kDqEnd, kRed64, kRed32, kExperiments };
inline constexpr const char* kExperimentNames[kExperiments] = {"none", "dq-end", "red64", "red32"};

// [tune] Where kernel.cu compiles --tiles and --experiment (fp16, d = 64 and 128, without
// --deterministic and --dropout; --experiment with the default tiles), and which tile shapes fit the
// shared-memory budget: the reason a choice is refused, or "" when it runs. One rule for the CPU
// blueprint and the GPU launch, so that both refuse alike.
std::string refusal(bool fp16, int d, int tiles, int xp, bool det, bool drop);

FA_HD constexpr bool valid(const Schedule& s, int d) {
  return s.Bc % 32 == 0 && s.Br % 32 == 0 && s.Br <= s.Bc && s.warps() % s.rgroups(d) == 0 &&
         s.dq_dims(d) % 16 == 0 && s.dq_dims(d) > 0 && s.dkv_dims(d) % 16 == 0 && s.dkv_keys(d) % 16 == 0;
}

inline constexpr int kStages = 2;        // Q/dO/L/D buffers: one in use, one being loaded
inline constexpr int kRowPad = 128;      // workspace rows per head: N rounded up to this (>= any Br)
inline constexpr int kDetBlocks = 264;   // [deterministic] blocks to aim for: two per SM of an H100/H200

// Shared memory per block: K_j and V_j, kStages × (Q_i, dO_i), Pᵀ and dSᵀ (Bc × Br each), all in
// the storage type and swizzled; kStages × (L·log2 e, D) of the Q tile's rows in fp32.
FA_HD constexpr int64_t smem_bytes(const Schedule& s, int d) {
  return (2 * int64_t(s.Bc) * d + int64_t(kStages) * 2 * s.Br * d + 2 * int64_t(s.Bc) * s.Br) * 2 +
         int64_t(kStages) * 2 * s.Br * 4;
}
inline constexpr int64_t kSmemBudget = 200 * 1024;
static_assert(valid(schedule_for(16), 16) && valid(schedule_for(32), 32) && valid(schedule_for(64), 64) &&
                  valid(schedule_for(128), 128),
              "whole m16n8k16 tiles and whole ldmatrix.x4 pairs for every head dimension");
static_assert(smem_bytes(schedule_for(128), 128) <= kSmemBudget, "the block's tiles must fit its budget at d = 128");

// [q-range] The Q tiles that see any key of the K/V tile [j0, j0 + Bc) (step 08's).
FA_HD constexpr int64_t first_q_tile(int64_t j0, int64_t N, int64_t Nk, int64_t Br, bool causal) {
  if (!causal) return 0;
  const int64_t first_row = j0 - (Nk - N);
  if (first_row >= N) return num_tiles(N, Br);
  return first_row <= 0 ? 0 : first_row / Br;
}

// [window] One past the last Q tile that sees any key of the K/V tile that ends at key j1 − 1: row
// i's band starts at i + Nk − N − W + 1, so rows past j1 − 1 − (Nk − N) + W − 1 see none of it.
// Every Q tile from first_q_tile on without a window.
FA_HD constexpr int64_t end_q_tile(int64_t j1, int64_t N, int64_t Nk, int64_t Br, bool causal, int64_t window) {
  const int64_t Tr = num_tiles(N, Br);
  if (!causal || window <= 0) return Tr;
  const int64_t last_row = j1 - 1 - (Nk - N) + window - 1;
  if (last_row < 0) return 0;
  return last_row / Br + 1 < Tr ? last_row / Br + 1 : Tr;
}

// [deterministic] Blocks per (key/value) head when dQ may not race: each block walks the K/V tiles
// s, s + nsplit, ... in order and adds into its own dQ buffer; the convert kernel sums the
// nsplit buffers in a fixed order. A function of the shape only, so that two runs (and the
// blueprint) split alike.
FA_HD constexpr int64_t det_splits(int64_t BH, int64_t Tc) {
  const int64_t want = (kDetBlocks + BH - 1) / BH;
  return want < 1 ? 1 : (want < Tc ? want : Tc);
}

// [dq-layout] The fp32 dQ accumulator of a Q tile (Br rows × d, at the tile's rows of the workspace)
// is kept in the order the main kernel's dQ warps hold it, not by rows: C tile (m, n) of warp w is
// 128 consecutive floats, lane l's four elements at 4l .. 4l + 3. Each warp's 16-byte reductions of
// one C tile then cover 512 consecutive bytes, four 128-byte lines, where rows of d floats would
// spread them over 16 rows. The convert kernel reads the accumulator back through this map.
// Offset, within the tile's Br·d floats, of its element (row r, column c).
FA_HD constexpr int64_t acc_offset(const Schedule& s, int d, int r, int c) {
  const int QM = s.qm(d), kDims = s.dq_dims(d), mt = r / 16;
  const int w = mt / QM + s.rgroups(d) * (c / kDims), m = mt % QM, n = (c % kDims) / 8;  // warp: rg + RG·cg
  const int lane = 4 * (r % 8) + (c % 8) / 2, e = 2 * ((r % 16) / 8) + c % 2;                // c_elem's inverse
  return ((int64_t(w) * QM + m) * (kDims / 8) + n) * 128 + 4 * lane + e;
}

// Workspace: per head and per row (N rounded up to kRowPad), L·log2 e and D in fp32; then the fp32
// dQ accumulator, one per split (1 without --deterministic).
FA_HD constexpr int64_t rows_padded(int64_t N) { return num_tiles(N, kRowPad) * kRowPad; }
FA_HD constexpr int64_t workspace_bytes(int64_t BH, int64_t N, int64_t d, int64_t splits) {
  return BH * rows_padded(N) * 4 * 2 + splits * BH * rows_padded(N) * d * 4;
}

// log2(e): exp(x) = exp2(x · log2 e).
inline constexpr float kLog2e = 1.4426950408889634f;

bool deterministic(const StepOptions& o);  // --deterministic
int tiles_of(const StepOptions& o);        // --tiles as a TileChoice
int experiment_of(const StepOptions& o);   // --experiment as an Experiment

// The CPU side (blueprint.cpp): the three kernels' schedule with the tiles `sched` (any valid()
// one: the tests run others), counted; and the same ledger in closed form.
BackwardBlueprintResult blueprint(const Shape& s, const Inputs& in, const Forward& fwd, const Tensor4& dO,
                                  const Schedule& sched, bool deterministic);
LedgerSet closed_form(const Shape& s, const Schedule& sched, bool deterministic);

// The GPU side (kernel.cu).
void launch_backward(const BwdParams& p, const StepOptions& opts, void* stream);
size_t backward_workspace_bytes(const Shape& s, const StepOptions& opts);

}  // namespace fa::step13
