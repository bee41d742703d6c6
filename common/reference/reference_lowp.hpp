// The standard (naive) attention backward computed in the storage precision: what a PyTorch
// fp16/bf16 naive backward returns. check_backward measures a kernel against twice its error
// (FlashAttention's test rule, checks.cpp).
//
// Every matrix product accumulates in fp32 and stores its result rounded to the storage type, as a
// half-precision GEMM does; softmax and its gradient compute in fp32 and store rounded, as
// PyTorch's kernels do:
//   S  = rnd(scale · Q Kᵀ)                 (a GEMM with α = scale; masked entries −inf)
//   P  = rnd(exp(S − m) / l)               (m, l in fp32)
//   Pd = rnd(P · Z),  Z_ij = keep_ij/(1 − p)    (dropout; Pd = P when p = 0)
//   dV = rnd(Pdᵀ dO),  dPd = rnd(dO Vᵀ),  dP = rnd(dPd · Z)
//   D_i = Σ_j P_ij dP_ij (fp32),  dS = rnd(P ∘ (dP − D))   (softmax's backward; = rowsum(dO ∘ O))
//   dQ = rnd(scale · dS K),  dK = rnd(scale · dSᵀ Q)
// A row that sees no key has P = 0 and contributes nothing.
//
// Only the heads listed are computed, in two passes over blocks of rows and of keys, as
// reference_backward does (memory O(block·Nk)); pass 2 recomputes S and P from pass 1's m and l.
#pragma once
#include <cstdint>
#include <vector>

#include "core/problem.hpp"
#include "reference/reference.hpp"

namespace fa {

struct LowpGradients {
  std::vector<int64_t> heads;  // b·H + h of each computed head, ascending
  int64_t N = 0, Nk = 0, d = 0;
  std::vector<float> dq, dk, dv;  // [heads, N, d], [heads, Nk, d], [heads, Nk, d]; values in the storage type
};

LowpGradients naive_backward_lowp(const Shape& s, const Inputs& in, const Tensor4& dO, const std::vector<int64_t>& heads);

// max |naive − reference| per gradient over the reference's heads (+inf if the naive backward
// overflowed the storage type somewhere).
struct NaiveErrors {
  double dq = 0.0, dk = 0.0, dv = 0.0;
};
NaiveErrors naive_errors(const Gradients& ref, const LowpGradients& naive);
// naive_backward_lowp on ref.heads, against ref.
NaiveErrors naive_lowp_errors(const Shape& s, const Inputs& in, const Tensor4& dO, const Gradients& ref);

}  // namespace fa
