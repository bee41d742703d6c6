// Step 16 — ping-pong and intra-warpgroup overlap.
//
// In step 15 a consumer warpgroup multiplies S = Q·K_jᵀ, waits, runs the softmax, multiplies P·V_j,
// waits — and while its softmax runs, nothing of its own is in the tensor cores; the exponentials of
// a 64 × 128 tile take about as long as its two products at d = 64. Two schedules fill that time:
//   [pingpong]  the consumers take turns to issue their products (named barriers hand a turn on), so
//               the tensor cores multiply for one warpgroup while the others run their softmax;
//   [overlap]   a turn issues S_j and P_{j-1}·V_{j-1} together and waits for S_j alone: the softmax
//               of tile j runs while P_{j-1}·V_{j-1} is still multiplied. It costs registers: S of
//               tile j and P of tile j − 1 are alive at once.
// K and V of a stage have barriers of their own ([split-ring]): K_j is free once S_j is in, a turn
// before V_j is. The tiles are chosen per head dimension ([tile-sizes]), three consumers at d = 64.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernel/attn_params.hpp"
#include "kernel/causal.hpp"
#include "core/step.hpp"
#include "kernel/wgmma_layout.hpp"

namespace fa::step16 {

struct Schedule {
  int Br = 128;      // queries per block: a consumer warpgroup per 64 rows (two or three)
  int Bc = 128;      // keys per K/V tile
  int stages = 2;    // K/V stages in the ring
  FA_HD constexpr int consumers() const { return Br / 64; }
  FA_HD constexpr int threads() const { return 128 * (1 + consumers()); }  // the producer warpgroup first
};
// [tile-sizes] One block per SM, so the ring takes every stage that fits the 227 KB (at most 8): 128
// rows × 128 keys at d = 128 (3 stages), 128 × 64 at d = 256 (2 stages: a 128-key stage of K and V
// would be 128 KB), and at d = 64 three consumer warpgroups, 192 × 128 (6 stages). --tiles picks
// another (an experiment, fp16 only; 192x128 only at d = 64, where a consumer's registers hold it)
// (docs/16_pingpong.md).
enum Tiles : int { kTilesAuto = 0, kTiles128x64, kTiles128x128, kTiles192x128, kTileChoices };
inline constexpr const char* kTileNames[kTileChoices] = {"auto", "128x64", "128x128", "192x128"};
inline constexpr int64_t kSmemBudget = 227 * 1024;
FA_HD constexpr int stages_that_fit(int d, int Br, int Bc) {
  const int64_t n = (kSmemBudget - 1024 - int64_t(Br) * d * 2) / (int64_t(2) * Bc * d * 2);
  return n > 8 ? 8 : int(n);
}
FA_HD constexpr Schedule tile_of(int d, int Br, int Bc) { return Schedule{Br, Bc, stages_that_fit(d, Br, Bc)}; }
FA_HD constexpr Schedule schedule_for(int d, int tiles = kTilesAuto) {
  if (tiles == kTiles128x64) return tile_of(d, 128, 64);
  if (tiles == kTiles128x128) return tile_of(d, 128, 128);
  if (tiles == kTiles192x128) return d <= 64 ? tile_of(d, 192, 128) : Schedule{192, 128, 0};
  return d <= 64 ? tile_of(d, 192, 128) : d <= 128 ? tile_of(d, 128, 128) : tile_of(d, 128, 64);
}

// [stored-d] The kernels are compiled for d = 64, 128 and 256 (a TMA box of 64 columns is one
// 128-byte swizzled row); the blueprint runs every d.
inline constexpr int kHeadDims[] = {64, 128, 256};

// [setmaxnreg] setmaxnreg: the producer warpgroup gives its registers up to 24 per thread, the
// consumers take the rest — 240 each for two (128·24 + 256·240 = 64512 of the SM's 65536), 160 each
// for three (128·24 + 384·160 = 64512).
inline constexpr int kProducerRegs = 24;
FA_HD constexpr int consumer_regs(int consumers) { return consumers == 2 ? 240 : 160; }
static_assert(128 * kProducerRegs + 256 * consumer_regs(2) <= 65536 && 128 * kProducerRegs + 384 * consumer_regs(3) <= 65536,
              "the register file");

// Shared memory per block: the Q tile, then `stages` × (K tile, V tile) in [sw128] panels, then
// the mbarriers (Q's, and per stage a full and an empty one for K and for V: 8 bytes each), in the
// first 1 KB after the tiles.
FA_HD constexpr int64_t tiles_bytes(const Schedule& s, int d) { return (int64_t(s.Br) + int64_t(s.stages) * 2 * s.Bc) * d * 2; }
FA_HD constexpr int64_t smem_bytes(const Schedule& s, int d) { return tiles_bytes(s, d) + 1024; }
FA_HD constexpr bool valid(const Schedule& s) {
  return (s.Br == 128 || s.Br == 192) && s.Bc % 64 == 0 && s.Bc <= 128 && s.stages >= 2 && 8 * (1 + 4 * s.stages) <= 1024;
}
// Every compiled choice — d = 64, 128, 256 with each tile that has two stages — must fit.
FA_HD constexpr bool compiled_fit(int d, int tiles) {
  const Schedule s = schedule_for(d, tiles);
  return valid(s) && smem_bytes(s, d) <= kSmemBudget;
}
static_assert(compiled_fit(64, kTilesAuto) && compiled_fit(128, kTilesAuto) && compiled_fit(256, kTilesAuto) &&
                  compiled_fit(64, kTiles128x64) && compiled_fit(128, kTiles128x64) && compiled_fit(256, kTiles128x64) &&
                  compiled_fit(64, kTiles128x128) && compiled_fit(128, kTiles128x128) && !compiled_fit(256, kTiles128x128),
              "Q, two or more stages and the barriers fit the block (at d = 256 a 128-key tile does not)");
static_assert(compiled_fit(64, kTiles192x128) && !compiled_fit(128, kTiles192x128), "192 rows: at d = 64 only");

// [handshake] A wait names a phase of an mbarrier by its parity: try_wait.parity(P) succeeds once the
// barrier's phases completed so far, counted from 0, have a parity other than P — so a fresh barrier
// passes parity 1 at once and blocks on 0. Stage j % stages holds tile j during its (j / stages)-th use:
//   consumers, tile j: phase j / stages of full(stage) — the fill with tile j;
//   producer, tile j >= stages: phase j / stages − 1 of empty(stage) — the release of tile j − stages
// (step 15's; here for K's barriers and V's alike).
FA_HD constexpr uint32_t full_parity(int j, int stages) { return uint32_t(j / stages) & 1u; }
FA_HD constexpr uint32_t empty_parity(int j, int stages) { return (uint32_t(j / stages) & 1u) ^ 1u; }

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// The GPU side (kernel.cu).
void launch(const AttnParams& p, const StepOptions& opts, void* stream);
size_t workspace_bytes(const Shape& s, const StepOptions& opts);

// The CPU side (blueprint.cpp).
BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sched);
LedgerSet closed_form(const Shape& s, const Schedule& sched);
int tiles_of(const StepOptions& opts);  // --tiles's value as a Tiles
// [ablation] Each overlap taken out alone (same results, same ledger): ping-pong's turns, the
// intra-warpgroup overlap (both products waited for before the softmax), or both (then each
// consumer runs free, as in step 15, with step 16's tiles and split ring).
enum Ablation : int { kFull = 0, kNoPingPong, kNoOverlap, kNoBoth, kAblations };
inline constexpr const char* kAblationNames[kAblations] = {"none", "pingpong", "overlap", "both"};
int ablation_of(const StepOptions& opts);

}  // namespace fa::step16
