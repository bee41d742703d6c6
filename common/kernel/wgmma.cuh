// Hopper's warpgroup MMA on the device (steps 14+): the instructions, wrapped once for every Hopper
// step. Layouts and descriptors: common/kernel/wgmma_layout.hpp.
//
// wgmma.mma_async is issued by all 128 threads of a warpgroup together and runs asynchronously:
//   fence()      before the first wgmma of a batch: the registers it reads (accumulators, a register
//                A operand) written by ordinary instructions are visible to it
//   commit()     closes the batch of wgmmas issued since the last commit into one group
//   wait<N>()    blocks until at most N groups are still in flight; only then may ordinary code
//                read or write the accumulators of the groups that finished
// An instruction that touches an accumulator while its wgmma may be in flight is a race; ptxas then
// inserts waits of its own or serializes the wgmmas, and warns (C7519 for the first, seen with a
// probe kernel) — the slow path.
//
// [sm90a] wgmma exists only in the architecture-specific target sm_90a (-gencode
// arch=compute_90a,code=sm_90a; CMakeLists.txt gives it to the Hopper steps alone). Compiled for
// anything else, each wrapper traps: the host refuses those GPUs first (StepInfo::min_cc/max_cc).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FA_HAS_SM90A 0
#define FA_SM90A_ONLY(...) __trap()
#else
#define FA_HAS_SM90A 1
#define FA_SM90A_ONLY(...) __VA_ARGS__
#endif

namespace fa::wgmma {

__device__ __forceinline__ void fence() { FA_SM90A_ONLY(asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory")); }
__device__ __forceinline__ void commit() { FA_SM90A_ONLY(asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory")); }
template <int N>
__device__ __forceinline__ void wait() { FA_SM90A_ONLY(asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory")); }
// [proxy] Shared memory written by ordinary stores (or cp.async) and then read by wgmma or TMA: the
// writes are made visible to the async proxy that wgmma reads through.
__device__ __forceinline__ void fence_proxy_async() { FA_SM90A_ONLY(asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory")); }

#define FA_WGMMA_SS_64(TY)                                                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                             \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
                 : "l"(a), "l"(b), "r"(int(accumulate)))
#define FA_WGMMA_SS_64_MN(TY)                                                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                             \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 1, 1;\n}\n" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
                 : "l"(a), "l"(b), "r"(int(accumulate)))
#define FA_WGMMA_RS_64(TY)                                                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                             \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)))
#define FA_WGMMA_SS_128(TY)                                                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                             \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
                 : "l"(a), "l"(b), "r"(int(accumulate)))
#define FA_WGMMA_RS_128(TY)                                                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                             \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)))

#define FA_WGMMA_SS_80(TY)                                                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %42, 0;\n"                                             \
                 "wgmma.mma_async.sync.aligned.m64n80k16.f32." TY "." TY " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39}, %40, %41, p, 1, 1, 0, 0;\n}\n" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]) \
                 : "l"(a), "l"(b), "r"(int(accumulate)))
#define FA_WGMMA_SS_80_TN(TY)                                                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %42, 0;\n"                                             \
                 "wgmma.mma_async.sync.aligned.m64n80k16.f32." TY "." TY " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39}, %40, %41, p, 1, 1, 1, 0;\n}\n" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]) \
                 : "l"(a), "l"(b), "r"(int(accumulate)))

#define FA_WGMMA_SS8_128                                                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                             \
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}\n" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
                 : "l"(a), "l"(b), "r"(int(accumulate)))
#define FA_WGMMA_RS8_128                                                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                             \
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)))

#define FA_WGMMA_RS8_64                                                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                             \
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)))

// D (64 × N, fp32) = A·Bᵀ (+ D when accumulate): A (64 × 16) and B (N × 16) both read from shared
// memory through their descriptors, both K-major (a row of 16 k values each: S = Q·Kᵀ).
template <class T, int N>
__device__ __forceinline__ void mma_ss(float (&d)[N / 2], uint64_t a, uint64_t b, bool accumulate);
// D (64 × N) = A·B (+ D): A (64 × 16) from registers — per warp the A fragment of mma.sync.m16n8k16
// for its 16 rows — and B (16 × N) from shared memory, MN-major (stored k rows of N: O = P·V with V
// stored [key][dim]; imm-trans-b = 1).
template <class T, int N>
__device__ __forceinline__ void mma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b, bool accumulate);

// D (64 × N) = A·B (+ D): A (64 × 16) MN-major (stored k rows of 64 m values) and B (16 × N) K-major
// (stored N rows of 16 k values), both from shared memory: dQᵀ = Kᵀ·dSᵀ with K stored [key][dim] and dS
// [query][key] (imm-trans-a = 1, imm-trans-b = 0, 16-bit types only). N = 80 only.
template <class T, int N>
__device__ __forceinline__ void mma_ss_tn(float (&d)[N / 2], uint64_t a, uint64_t b, bool accumulate);

// D (64 × N) = A·B (+ D): A (64 × 16) and B (16 × N) both from shared memory, both MN-major (A stored
// k rows of 64 m values, B k rows of N: dQ = dS·K with dSᵀ stored [key][query] and K [key][dim];
// imm-trans-a = imm-trans-b = 1, 16-bit types only). N = 64 only.
template <class T, int N>
__device__ __forceinline__ void mma_ss_mn(float (&d)[N / 2], uint64_t a, uint64_t b, bool accumulate);

#define FA_WGMMA_DEFINE(T, TY, N)                                                                             \
  template <>                                                                                                \
  __device__ __forceinline__ void mma_ss<T, N>(float (&d)[N / 2], uint64_t a, uint64_t b, bool accumulate) { \
    FA_SM90A_ONLY(FA_WGMMA_SS_##N(TY));                                                                      \
  }                                                                                                          \
  template <>                                                                                                \
  __device__ __forceinline__ void mma_rs<T, N>(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b, bool accumulate) { \
    FA_SM90A_ONLY(FA_WGMMA_RS_##N(TY));                                                                      \
  }
FA_WGMMA_DEFINE(__half, "f16", 64)
FA_WGMMA_DEFINE(__half, "f16", 128)
FA_WGMMA_DEFINE(__nv_bfloat16, "bf16", 64)
FA_WGMMA_DEFINE(__nv_bfloat16, "bf16", 128)
// One shared-memory-operand wrapper (A and B descriptors) for the layouts below.
#define FA_WGMMA_DEFINE_SS(FN, T, N, BODY)                                                                  \
  template <>                                                                                              \
  __device__ __forceinline__ void FN<T, N>(float (&d)[N / 2], uint64_t a, uint64_t b, bool accumulate) { \
    FA_SM90A_ONLY(BODY);                                                                                   \
  }
FA_WGMMA_DEFINE_SS(mma_ss_mn, __half, 64, FA_WGMMA_SS_64_MN("f16"))
FA_WGMMA_DEFINE_SS(mma_ss_mn, __nv_bfloat16, 64, FA_WGMMA_SS_64_MN("bf16"))
// [tile-sizes] Step 19's 80-query tiles (--ablate tiles at d = 128): Sᵀ and dPᵀ m64n80, dQᵀ m64n80.
FA_WGMMA_DEFINE_SS(mma_ss, __half, 80, FA_WGMMA_SS_80("f16"))
FA_WGMMA_DEFINE_SS(mma_ss, __nv_bfloat16, 80, FA_WGMMA_SS_80("bf16"))
FA_WGMMA_DEFINE_SS(mma_ss_tn, __half, 80, FA_WGMMA_SS_80_TN("f16"))
FA_WGMMA_DEFINE_SS(mma_ss_tn, __nv_bfloat16, 80, FA_WGMMA_SS_80_TN("bf16"))
#undef FA_WGMMA_DEFINE_SS
#undef FA_WGMMA_DEFINE

// [fp8] e4m3 × e4m3 with fp32 accumulators, k = 32 per instruction (step 21). FP8 operands are K-major
// only (no transpose immediates): A (64 × 32 bytes) and B (N × 32 bytes) from shared memory, or A from
// registers — per warp, register q of lane 4g + t holds row g + 8(q % 2), columns 4t .. 4t + 3 +
// 16(q / 2), the lower column in the lower byte. The accumulators are laid out as for k16 ([acc]).
__device__ __forceinline__ void mma_ss_e4m3_128(float (&d)[64], uint64_t a, uint64_t b, bool accumulate) {
  FA_SM90A_ONLY(FA_WGMMA_SS8_128);
}
__device__ __forceinline__ void mma_rs_e4m3_128(float (&d)[64], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
  FA_SM90A_ONLY(FA_WGMMA_RS8_128);
}
// [sw64] N = 64: O = P·V at d = 64 (Vᵀ 64 dims × 32 keys a step).
__device__ __forceinline__ void mma_rs_e4m3_64(float (&d)[32], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
  FA_SM90A_ONLY(FA_WGMMA_RS8_64);
}

}  // namespace fa::wgmma
