// Step 15 — TMA and warp specialization: step 14's products, fed by a producer warp.
//
// In step 14 every thread of the block issues cp.async copies, waits for them, and meets every
// other thread at a barrier once per tile; then all of them multiply. Here the block splits by role:
// one producer warpgroup, of which a single thread issues the Tensor Memory Accelerator's copies
// (cp.async.bulk.tensor: a whole 64-column box of a tile per instruction, described by a tensor map
// the host encodes), into a ring of K/V stages; two consumer warpgroups of 64 query rows each only
// multiply and run the softmax. Each stage is guarded by two mbarriers — "full" (the producer
// announces the bytes it expects, the TMA unit counts them in) and "empty" (the consumers' warps
// arrive when they are done with it) — so no thread waits for any other at a block-wide barrier.
// setmaxnreg moves registers from the producer (which needs few) to the consumers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernel/attn_params.hpp"
#include "kernel/causal.hpp"
#include "core/step.hpp"
#include "kernel/wgmma_layout.hpp"

namespace fa::step15 {

struct Schedule {
  int Br = 128;      // queries per block: two consumer warpgroups of 64 rows
  int Bc = 128;      // keys per K/V tile
  int stages = 2;    // K/V stages in the ring
  FA_HD constexpr int consumers() const { return Br / 64; }
  FA_HD constexpr int threads() const { return 128 * (1 + consumers()); }  // the producer warpgroup first
};
// [tile-sizes] One block per SM (three warpgroups, 384 threads): 128 rows × 128 keys, two stages at
// d = 128 (160 KB of shared memory); at d = 64 the same tile with four stages (144 KB). --tiles
// 128x64 measures 64-key tiles with twice the stages (docs/15_tma_warpspec.md).
enum Tiles : int { kTilesAuto = 0, kTiles128x64, kTileChoices };
inline constexpr const char* kTileNames[kTileChoices] = {"auto", "128x64"};
FA_HD constexpr Schedule schedule_for(int d, int tiles = kTilesAuto) {
  if (d > 128) return Schedule{128, 64, 2};  // d = 256: two 64-key stages are 128 KB beside Q's 64 KB
  return tiles == kTiles128x64 ? Schedule{128, 64, d <= 64 ? 8 : 4} : Schedule{128, 128, d <= 64 ? 4 : 2};
}
inline constexpr int64_t kSmemBudget = 227 * 1024;

// [stored-d] As step 14: the kernels are compiled for d = 64, 128 and 256 (a TMA box of 64 columns is
// one 128-byte swizzled row); the blueprint runs every d.
inline constexpr int kHeadDims[] = {64, 128, 256};

// [setmaxnreg] setmaxnreg: the producer warpgroup gives its registers up to 24 per thread, the two
// consumer warpgroups take 240 — 128·24 + 256·240 = 64512 of the SM's 65536.
inline constexpr int kProducerRegs = 24, kConsumerRegs = 240;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 65536, "the register file");

// Shared memory per block: the Q tile, then `stages` × (K tile, V tile) in [sw128] panels, then
// the mbarriers (Q's, and a full and an empty one per stage: 8 bytes each), in the first 1 KB
// after the tiles.
FA_HD constexpr int64_t tiles_bytes(const Schedule& s, int d) { return (int64_t(s.Br) + int64_t(s.stages) * 2 * s.Bc) * d * 2; }
FA_HD constexpr int64_t smem_bytes(const Schedule& s, int d) { return tiles_bytes(s, d) + 1024; }
FA_HD constexpr bool valid(const Schedule& s) {
  return s.Br == 128 && s.Bc % 64 == 0 && s.Bc <= 128 && s.stages >= 2 && 8 * (1 + 2 * s.stages) <= 1024;
}
static_assert(valid(schedule_for(64)) && valid(schedule_for(128)) && valid(schedule_for(64, kTiles128x64)) &&
                  valid(schedule_for(128, kTiles128x64)),
              "two consumer warpgroups, whole panels");
static_assert(smem_bytes(schedule_for(128), 128) <= kSmemBudget && smem_bytes(schedule_for(64), 64) <= kSmemBudget &&
                  smem_bytes(schedule_for(128, kTiles128x64), 128) <= kSmemBudget &&
                  smem_bytes(schedule_for(64, kTiles128x64), 64) <= kSmemBudget && smem_bytes(schedule_for(256), 256) <= kSmemBudget,
              "Q, the stages and the barriers must fit the block");

// [handshake] A wait names a phase of an mbarrier by its parity: try_wait.parity(P) succeeds once the
// barrier's phases completed so far, counted from 0, have a parity other than P — so a fresh barrier
// passes parity 1 at once and blocks on 0. Stage j % stages holds tile j during its (j / stages)-th use:
//   consumers, tile j: phase j / stages of full(stage) — the fill with tile j;
//   producer, tile j >= stages: phase j / stages − 1 of empty(stage) — the release of tile j − stages.
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

}  // namespace fa::step15
