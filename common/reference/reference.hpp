// The Eigen reference: attention in double precision on the inputs *after* rounding to the
// storage type, so any difference from a kernel is the kernel's own arithmetic.
//
//   S = scale · Q Kᵀ,  masked (causal, bottom-right) entries set to −inf
//   m = rowmax(S),  l = Σ_j exp(S_ij − m),  P = exp(S − m) / l,  O = P V,  L = m + log(l)
//   A row that sees no key: O = 0 and L = +inf (so a backward's exp(S − L) is 0).
// [dropout] With s.dropout = P > 0:  O = (P ∘ Z) V,  Z_ij = keep_ij / (1 − P), the mask drawn by
// common/kernel/dropout.hpp from (s.dropout_seed, s.dropout_offset, b·H + h, i, j) — the kernels' bits; L
// is unchanged (the log-sum-exp before dropout). P = 0 is the computation above, bit for bit.
//
// [fp8] For an fp8 shape (s.fp8) the inputs are first quantized as the kernels quantize them, and the
// reference runs on the values the codes stand for (common/reference/quantize.hpp): what an FP8 kernel
// is checked against. Its error against the unquantized inputs is FP8's own, measured apart
// (reference_forward on s.without_fp8()).
//
// Every row on small shapes, or a seeded sample of rows (the same rows in every (b, h)) on large.
#pragma once
#include <cstdint>
#include <vector>

#include "core/problem.hpp"

namespace fa {

// Z_ij of head bh = b·H + h for query row i and key j: 1/(1 − P) where the weight is kept, 0 where it
// is dropped; 1 when s.dropout = 0. Whether the key is visible (causal) is not its business.
double dropout_factor(const Shape& s, int64_t bh, int64_t i, int64_t j);

struct Reference {
  std::vector<int64_t> rows;  // query rows checked, ascending, the same in every (b, h)
  std::vector<double> o;      // [B, H, rows.size(), d]
  std::vector<double> lse;    // [B, H, rows.size()]; +inf for a row with no visible key
  std::vector<double> o_tol;  // [fp8] each element's tolerance (an fp8 shape's reference; empty otherwise)
  int64_t d = 0;
  double o_at(int64_t bh, int64_t r, int64_t c) const { return o[static_cast<size_t>((bh * int64_t(rows.size()) + r) * d + c)]; }
  double lse_at(int64_t bh, int64_t r) const { return lse[static_cast<size_t>(bh * int64_t(rows.size()) + r)]; }
};

// All rows when B·H·N·Nk·d <= budget; otherwise about budget/(B·H·Nk·d) rows per head (at least 8),
// drawn with `seed`, always including the first and last rows and, when causal, the first row
// that sees a key and its neighbour.
std::vector<int64_t> pick_rows(const Shape& s, uint64_t seed, double budget = 6.0e8);

Reference reference_forward(const Shape& s, const Inputs& in, const std::vector<int64_t>& rows);
inline Reference reference_forward(const Shape& s, const Inputs& in) {
  std::vector<int64_t> all(static_cast<size_t>(s.N));
  for (int64_t i = 0; i < s.N; ++i) all[static_cast<size_t>(i)] = i;
  return reference_forward(s, in, all);
}

// The backward pass in double precision. Given dO = ∂f/∂O for some scalar f, returns ∂f/∂Q, ∂f/∂K,
// ∂f/∂V with the softmax scale and the causal mask included:
//   P = softmax(scale·QKᵀ) (masked entries 0),  dV = Pᵀ dO,  dP = dO Vᵀ,
//   D_i = Σ_c dO_ic O_ic (= Σ_j P_ij dP_ij),  dS = P ∘ (dP − D),  dQ = scale·dS K,  dK = scale·dSᵀ Q.
// A row that sees no key has P = 0 and contributes nothing. [dropout] With P > 0 (Z as above):
//   dV = (P ∘ Z)ᵀ dO,  dP = (dO Vᵀ) ∘ Z,  O = (P ∘ Z) V in D;  dS, dQ, dK as written.
//
// Only the heads listed are computed (every row and key of each), in blocks of rows so that
// memory stays O(block·Nk) at any N. Beside each gradient, an error scale of the same shape from
// which checks.cpp derives the per-element tolerance:
//   dv_mag = (P ∘ Z)ᵀ|dO|,   dq_mag = scale·Ŝ|K|,   dk_mag = scale·Ŝᵀ|Q|,   Ŝ = |dS| + P ∘ D̂,
//   D̂_i = Σ_c |dO_ic||O_ic|   (Z = 1 without dropout; with it dS and O carry Z, and the error of D
//   reaches dS through P alone — a dropped weight still has dS_ij = −P_ij D_i).
struct Gradients {
  std::vector<int64_t> heads;  // b·H + h of each computed head, ascending
  int64_t N = 0, Nk = 0, d = 0;
  std::vector<double> dq, dk, dv;              // [heads, N, d], [heads, Nk, d], [heads, Nk, d]
  std::vector<double> dq_mag, dk_mag, dv_mag;  // the same shapes
  std::vector<double> D;                       // [heads, N]: rowsum(dO ∘ O)
  // hi: position in `heads`; i: row (of Q for dq, of K/V for dk and dv); c: column.
  size_t q_index(int64_t hi, int64_t i, int64_t c) const { return static_cast<size_t>((hi * N + i) * d + c); }
  size_t kv_index(int64_t hi, int64_t j, int64_t c) const { return static_cast<size_t>((hi * Nk + j) * d + c); }
};

// Every head when B·H·N·Nk·d <= budget; otherwise the first and the last head (b·H + h = 0 and
// B·H − 1; one when B·H = 1).
std::vector<int64_t> pick_heads(const Shape& s, double budget = 2.0e9);
// Exactly min(count, B·H) heads: the first ⌈count/2⌉ and the last ⌊count/2⌋ (--check-heads).
std::vector<int64_t> first_last_heads(const Shape& s, int64_t count);

// Throws std::invalid_argument, naming `who`, unless `heads` are ascending, distinct and in [0, B·H).
void require_heads(const Shape& s, const std::vector<int64_t>& heads, const char* who);

// [gqa] With Hkv < H, dk and dv of a listed (query) head hold the gradients of its key/value head:
// the sums over its group's H / Hkv query heads (all of them, listed or not). [window] Each row's
// band of keys alone.
Gradients reference_backward(const Shape& s, const Inputs& in, const Tensor4& dO, const std::vector<int64_t>& heads);
// [gqa] Every query head of the groups of `heads` (b·H + the group's heads), ascending.
std::vector<int64_t> group_heads(const Shape& s, const std::vector<int64_t>& heads);
// [gqa] Where listed head bh and the first head of its group stand in `all` (group_heads' list).
struct GroupAt {
  int64_t at = 0, first = 0;
};
GroupAt group_at(const Shape& s, const std::vector<int64_t>& all, int64_t bh);
// [gqa] A key/value head's dK or dV: its G query heads' contributions (blocks of n values in
// `per_head`, the group's from block `first` on) summed in head order.
template <class T>
std::vector<T> group_sum(const std::vector<T>& per_head, int64_t first, int64_t G, int64_t n) {
  std::vector<T> sum(static_cast<size_t>(n), T(0));
  for (int64_t k = 0; k < G; ++k)
    for (int64_t x = 0; x < n; ++x) sum[static_cast<size_t>(x)] += per_head[static_cast<size_t>((first + k) * n + x)];
  return sum;
}
inline Gradients reference_backward(const Shape& s, const Inputs& in, const Tensor4& dO) {
  std::vector<int64_t> all(static_cast<size_t>(s.B * s.H));
  for (int64_t i = 0; i < s.B * s.H; ++i) all[static_cast<size_t>(i)] = i;
  return reference_backward(s, in, dO, all);
}

}  // namespace fa
