// [arch] What the architecture being compiled has, for the kernels (device code).
//
// One build compiles every kernel once per architecture in CMAKE_CUDA_ARCHITECTURES (75 is the
// oldest: T4, RTX 20xx). What sm_75 lacks is compiled out there, and the compiled-out path traps:
// it is never reached, because the host holds each step's needs against the GPU first and refuses
// (common/core/arch.hpp: bf16 and mma.sync.m16n8k16/cp.async need compute capability 8.0).
//
//   FA_HAS_SM80         1 in host code and for sm_80 and later; 0 for sm_75.
//   FA_SM80_ONLY(stmt)  the statement where the architecture has it, __trap() where it does not:
//                       the helpers of steps 09-12 issue mma.sync.m16n8k16 and cp.async through it.
//
// WMMA's bf16 fragments (steps 01, 03-08) do not exist before sm_80: below, for sm_75 only, they
// are declared with load_matrix_sync and mma_sync that trap, so that the kernels, templates on the
// storage type, compile unchanged for both types.
#pragma once
#include <cuda_bf16.h>
#include <mma.h>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define FA_HAS_SM80 0
#define FA_SM80_ONLY(...) __trap()
#else
#define FA_HAS_SM80 1
#define FA_SM80_ONLY(...) __VA_ARGS__
#endif

#if !FA_HAS_SM80
namespace nvcuda::wmma {
// As mma.h declares them from sm_80 on (16 × 16 × 16, eight bf16 per lane).
template <> class fragment<matrix_a, 16, 16, 16, __nv_bfloat16, row_major> : public __frag_base<__nv_bfloat16, 8> {};
template <> class fragment<matrix_a, 16, 16, 16, __nv_bfloat16, col_major> : public __frag_base<__nv_bfloat16, 8> {};
template <> class fragment<matrix_b, 16, 16, 16, __nv_bfloat16, row_major> : public __frag_base<__nv_bfloat16, 8> {};
template <> class fragment<matrix_b, 16, 16, 16, __nv_bfloat16, col_major> : public __frag_base<__nv_bfloat16, 8> {};
template <class Use, class Layout>
__device__ inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, Layout>&, const __nv_bfloat16*, unsigned) {
  __trap();
}
template <class LayoutA, class LayoutB>
__device__ inline void mma_sync(fragment<accumulator, 16, 16, 16, float>&,
                                const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA>&,
                                const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB>&,
                                const fragment<accumulator, 16, 16, 16, float>&) {
  __trap();
}
}  // namespace nvcuda::wmma
#endif
