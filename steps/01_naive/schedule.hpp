// Step 01 — naive attention in three kernels: the schedule shared by kernel.cu and blueprint.cpp.
//
//   scores  S = scale · Q Kᵀ  on tensor cores, one Br × Bc tile of S per block, S written to HBM (fp32)
//   softmax P = softmax(S) row by row (causal mask applied here), P written to HBM (storage type), L saved
//   pv      O = P V           on tensor cores, one Br × d tile of O per block, walking P and V in Bc-wide chunks
//
// S and P are N × Nk per head: the quadratic HBM traffic every later step removes.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernel/attn_params.hpp"
#include "kernel/causal.hpp"
#include "core/step.hpp"

namespace fa::step01 {

// Tile sizes. Edit them for a lab; the static_asserts say what must hold. The blueprint takes a
// Schedule at run time (tests run two), the kernels are compiled for kSchedule.
struct Schedule {
  int Br = 64;  // rows of S (queries) per block in `scores`, rows of O per block in `pv`
  int Bc = 64;  // columns of S (keys) per block in `scores`, keys per chunk in `pv`
  FA_HD constexpr int warps() const { return Br / 16; }  // each warp owns one 16-row slice
};
inline constexpr Schedule kSchedule{};
inline constexpr int kPad = 8;                // 16-bit elements of padding per shared-memory row (bank spread)
inline constexpr int kSoftmaxThreads = 128;   // threads per row in `softmax`
inline constexpr int kSoftmaxWarps = kSoftmaxThreads / 32;
inline constexpr int64_t kSmemBudget = 48 * 1024;  // per block: fits every GPU since Volta

static_assert(kSchedule.Br % 16 == 0 && kSchedule.Br >= 16, "Br is a multiple of the 16-row WMMA fragment");
static_assert(kSchedule.Bc % 16 == 0 && kSchedule.Bc >= 16, "Bc is a multiple of the 16-column WMMA fragment");
static_assert(kSchedule.warps() <= 32, "at most 32 warps per block");
static_assert(kSoftmaxThreads % 32 == 0, "softmax uses whole warps");

// Shared memory per block (bytes), for head dimension d: what the blueprint's Smem checks and the
// kernels declare. 16-bit tiles have kPad extra elements per row; the fp32 staging tile has none.
FA_HD constexpr int64_t scores_smem_bytes(const Schedule& s, int d) {
  return int64_t(s.Br + s.Bc) * (d + kPad) * 2 + int64_t(s.warps()) * 16 * 16 * 4;
}
FA_HD constexpr int64_t pv_smem_bytes(const Schedule& s, int d) {
  return int64_t(s.Br) * (s.Bc + kPad) * 2 + int64_t(s.Bc) * (d + kPad) * 2 + int64_t(s.warps()) * 16 * 16 * 4;
}
static_assert(scores_smem_bytes(kSchedule, 128) <= kSmemBudget, "scores tiles must fit 48 KB at d = 128");
static_assert(pv_smem_bytes(kSchedule, 128) <= kSmemBudget, "pv tiles must fit 48 KB at d = 128");

// Leading dimension of the P workspace: rows padded to 8 elements so a row starts 16-byte aligned.
FA_HD constexpr int64_t p_ld(int64_t Nk) { return (Nk + 7) / 8 * 8; }

// Workspace in global memory: S (fp32, [B·H, N, Nk]) then P (storage type, [B·H, N, p_ld(Nk)]).
inline int64_t s_bytes(const Shape& s) { return s.B * s.H * s.N * s.Nk * 4; }
inline int64_t s_bytes_aligned(const Shape& s) { return (s_bytes(s) + 255) / 256 * 256; }
inline int64_t p_bytes(const Shape& s) { return s.B * s.H * s.N * p_ld(s.Nk) * 2; }

// The GPU side (kernel.cu).
void launch(const AttnParams& p, const StepOptions& opts, void* stream);
size_t workspace_bytes(const Shape& s, const StepOptions& opts);

// The CPU side (blueprint.cpp).
BlueprintResult blueprint(const Shape& s, const Inputs& in, const Schedule& sched);
LedgerSet closed_form(const Shape& s, const Schedule& sched);

}  // namespace fa::step01
