// Step 08 — the backward pass.
//
// The forward is step 07's (it saves O and L = m + log l). Given dO, the backward computes
//   P = exp(scale·QKᵀ − L)        recomputed from the saved L: no row statistics needed
//   dV = Pᵀ dO,  dP = dO Vᵀ,  D_i = Σ_c dO_ic O_ic,  dS = P ∘ (dP − D),
//   dQ = scale · dS K,  dK = scale · dSᵀ Q.
// Three schedules (--bwd):
//   naive  the standard algorithm: P, dP and dS are N × Nk matrices in HBM, six kernels;
//   fused  FlashAttention-2's: one block per K/V tile walks the Q tiles, dK and dV stay on chip,
//          dQ is accumulated with fp32 atomics; fully masked tiles are skipped;
//   stored [stored] the standard training pipeline's: the forward has written P to HBM, and the
//          backward reads it rather than recomputing it — naive's last five kernels, with naive's
//          first (P from Q, K and L) run as the forward's, charged apart ([saved-for-backward]).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernel/attn_params.hpp"
#include "kernel/causal.hpp"
#include "core/step.hpp"

namespace fa::step08 {

// ---- fused --------------------------------------------------------------------------------------
struct Schedule {
  int Br = 32;  // Q rows per inner-loop tile
  int Bc = 32;  // keys per block (the K/V tile the block owns)
  int W = 4;    // warps per block
};
inline constexpr Schedule kSchedule{};
inline constexpr int kPad = 8;   // 16-bit elements of padding per row of Q, K, V, dO, P and dS tiles
inline constexpr int kPadF = 4;  // fp32 elements of padding per row of S, dP and the dQ/dK/dV staging tile

// Shared memory of one fused block: K_j, V_j, Q_i, dO_i (storage type); S and dP (fp32); P and dS
// (storage type); a staging tile for dQ_i's partial sums (and, at the end, for dK_j and dV_j) in
// fp32; L_i and D_i. More than the default 48 KB at d = 128: the kernel opts in (dynamic shared
// memory), and the launcher checks the device allows it.
FA_HD constexpr int64_t smem_bytes(const Schedule& s, int d) {
  const int64_t rows16 = 2 * int64_t(s.Bc) + 2 * int64_t(s.Br);
  return rows16 * (d + kPad) * 2 + 2 * int64_t(s.Br) * (s.Bc + kPadF) * 4 + 2 * int64_t(s.Br) * (s.Bc + kPad) * 2 +
         int64_t(s.Br > s.Bc ? s.Br : s.Bc) * (d + kPadF) * 4 + 2 * int64_t(s.Br) * 4;
}
inline constexpr int64_t kSmemBudget = 100 * 1024;
static_assert(kSchedule.Br % 16 == 0 && kSchedule.Bc % 16 == 0, "whole 16×16 fragments");
static_assert(smem_bytes(kSchedule, 128) <= kSmemBudget, "the fused block's tiles must fit its budget at d = 128");

// [q-range] The Q tiles that see any key of the K/V tile [j0, j0 + Bc): with the causal mask, row i
// sees key j when j <= i + Nk − N, so the first useful row is j0 − (Nk − N). Returns the first Q
// tile; the loop runs to the last one. ⌈N/Br⌉ (an empty range) when no row sees the tile.
FA_HD constexpr int64_t first_q_tile(int64_t j0, int64_t N, int64_t Nk, int64_t Br, bool causal) {
  if (!causal) return 0;
  const int64_t first_row = j0 - (Nk - N);
  if (first_row >= N) return num_tiles(N, Br);
  return first_row <= 0 ? 0 : first_row / Br;
}

// ---- naive --------------------------------------------------------------------------------------
// Every matrix product of the naive backward is one tiled GEMM: a block computes a G × G tile of
// the output with G/16 × G/16 warps, stepping through the inner dimension G at a time.
inline constexpr int kGemmTile = 32;
inline constexpr int kGemmWarps = (kGemmTile / 16) * (kGemmTile / 16);

// Workspace (global memory beyond the tensors) of each schedule.
FA_HD constexpr int64_t fused_workspace(int64_t BH, int64_t N, int64_t d) { return BH * N * 4 + BH * N * d * 4; }
FA_HD constexpr int64_t naive_workspace(int64_t BH, int64_t N, int64_t Nk) { return BH * N * Nk * (4 + 2 + 2); }  // dP, P, dS
// [stored] The stored schedule's workspace is dP and dS; P (storage type) is the forward's, held
// from the forward to the backward (BwdParams::saved): the same 8 bytes per (i, j) as naive's.
FA_HD constexpr int64_t stored_workspace(int64_t BH, int64_t N, int64_t Nk) { return BH * N * Nk * (4 + 2); }  // dP, dS
FA_HD constexpr int64_t saved_p_bytes(int64_t BH, int64_t N, int64_t Nk) { return BH * N * Nk * 2; }          // P

bool naive(const StepOptions& o);   // --bwd naive
bool stored(const StepOptions& o);  // --bwd stored

// The GPU side (kernel.cu).
void launch_backward(const BwdParams& p, const StepOptions& opts, void* stream);
size_t backward_workspace_bytes(const Shape& s, const StepOptions& opts);
// [stored] What the forward saves for --bwd stored: P, written by step08_naive_p into p.saved.
size_t backward_saved_bytes(const Shape& s, const StepOptions& opts);
void launch_save(const BwdParams& p, const StepOptions& opts, void* stream);

// The CPU side (blueprint.cpp).
BackwardBlueprintResult blueprint_fused(const Shape& s, const Inputs& in, const Forward& fwd, const Tensor4& dO,
                                        const Schedule& sched);
LedgerSet closed_form_fused(const Shape& s, const Schedule& sched);
// stored = true: the stored schedule — naive_p is counted in the result's `saved` (the forward's),
// the other five kernels in its ledger.
BackwardBlueprintResult blueprint_naive(const Shape& s, const Inputs& in, const Forward& fwd, const Tensor4& dO,
                                        bool stored = false);
LedgerSet closed_form_naive(const Shape& s);
LedgerSet closed_form_stored(const Shape& s);   // the stored backward: naive's without naive_p
LedgerSet closed_form_saved_p(const Shape& s);  // what the forward writes for it: naive_p's

}  // namespace fa::step08
