// Step 14 — wgmma: step 12's forward with both products on Hopper's warpgroup MMA.
//
// Step 12 multiplies with mma.sync: each warp issues its own 16 × 8 × 16 products and first copies
// every operand fragment from shared memory into its registers with ldmatrix. On Hopper that is the
// old path. Here a warpgroup — four consecutive warps, 128 threads — issues one wgmma.mma_async for
// a 64 × N × 16 product: S = Q·Kᵀ reads Q and K straight from shared memory through matrix
// descriptors (no ldmatrix, no fragments of Q or K in registers), S accumulates in registers, P is
// converted there and is the register operand of P·V, whose V tile is read through its descriptor
// as stored (no transpose). The tiles are stored in the 128-byte-swizzled panels wgmma reads
// (common/kernel/wgmma_layout.hpp, [sw128]). The loads stay step 12's cp.async pipeline; step 15 changes those.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernel/attn_params.hpp"
#include "kernel/causal.hpp"
#include "core/step.hpp"
#include "kernel/wgmma_layout.hpp"

namespace fa::step14 {

struct Schedule {
  int Br = 128;  // queries per block
  int Bc = 128;  // keys per K/V tile (the N of S's wgmma: a multiple of 64 here)
  int G = 2;     // warpgroups per block; warpgroup g owns rows [64g, 64g + 64)
  FA_HD constexpr int warps() const { return 4 * G; }
  FA_HD constexpr int threads() const { return 128 * G; }
};
// [tile-sizes] Both head dimensions: two warpgroups of 64 rows (Br = 128, as step 12) and 64 keys per
// tile — S is 32 floats per thread, O 32 (d = 64) or 64 (d = 128) — so that two blocks share an SM
// (96 KB of shared memory at d = 128, at most 128 registers per thread): while one block's
// warpgroups run their softmax, the other's keep the tensor cores busy. --tiles 128x128 measures
// the alternative of 128 keys per tile, one block per SM (docs/14_wgmma.md).
inline constexpr Schedule kSchedule{128, 64, 2};
enum Tiles : int { kTilesAuto = 0, kTiles128x128, kTileChoices };
inline constexpr const char* kTileNames[kTileChoices] = {"auto", "128x128"};
FA_HD constexpr Schedule schedule_for(int /*d*/, int tiles = kTilesAuto) {
  return tiles == kTiles128x128 ? Schedule{128, 128, 2} : kSchedule;
}
FA_HD constexpr int blocks_per_sm(const Schedule& s, int d) { return s.Bc == 64 && d <= 128 ? 2 : 1; }  // __launch_bounds__'s minimum
// (at d = 256, Õ alone is 128 floats per thread: one block per SM, so a thread may hold 255 registers)

inline constexpr int kStages = 2;  // K/V buffers in flight (step 12's pipeline)
inline constexpr int64_t kSmemBudget = 227 * 1024;

// [stored-d] The kernels are compiled for d = 64, 128 and 256: a 128-byte swizzled row holds 64
// columns, and a row of Q or K shorter than that would need another swizzle mode. The blueprint
// runs every d (a CPU loop has no swizzle); on the GPU other head dimensions are refused.
inline constexpr int kHeadDims[] = {64, 128, 256};

// Shared memory per block: the Q tile, then kStages × (K tile, V tile), each in 64-column panels
// (d·2 bytes per row); the start is 1024-byte aligned, as the swizzle needs (the kernel checks).
FA_HD constexpr int64_t smem_bytes(const Schedule& s, int d) { return (int64_t(s.Br) + int64_t(kStages) * 2 * s.Bc) * d * 2; }
FA_HD constexpr bool valid(const Schedule& s) { return s.G > 0 && s.Br == 64 * s.G && s.Bc % 64 == 0 && s.Bc <= 128; }
static_assert(valid(schedule_for(128)) && valid(schedule_for(128, kTiles128x128)), "whole warpgroups, whole panels");
static_assert(smem_bytes(kSchedule, 256) <= kSmemBudget && smem_bytes(schedule_for(128, kTiles128x128), 128) <= kSmemBudget &&
                  smem_bytes(schedule_for(256, kTiles128x128), 256) > kSmemBudget,
              "Q and the K/V stages must fit the block (128-key tiles do not at d = 256)");

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// The GPU side (kernel.cu).
void launch(const AttnParams& p, const StepOptions& opts, void* stream);
size_t workspace_bytes(const Shape& s, const StepOptions& opts);

// The CPU side (blueprint.cpp).
BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sched);
LedgerSet closed_form(const Shape& s, const Schedule& sched);
int tiles_of(const StepOptions& opts);  // --tiles's value as a Tiles

}  // namespace fa::step14
