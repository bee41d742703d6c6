// Step 14 — wgmma: step 12's forward, both products on Hopper's warpgroup MMA.
//
//   step14_wgmma  Two warpgroups of 64 rows each share the block's K/V tiles. Per tile,
//                 S = Q·K_jᵀ is d/16 wgmma.mma_async (64 × Bc × 16) reading Q and K from shared
//                 memory through descriptors ([s-wgmma]); the softmax runs on S in registers as in
//                 step 12 (the accumulator layout is mma.sync's C layout, warp by warp: [acc]); P,
//                 converted in registers, is the A operand of Bc/16 · d/64 wgmmas (64 × 64 × 16)
//                 that read V as stored ([pv-wgmma]). The tiles sit in 128-byte-swizzled panels
//                 ([sw128]); K/V still arrive by step 12's cp.async pipeline ([pipeline]).
//
// Layouts, descriptors and the accumulator map: common/kernel/wgmma_layout.hpp; the instructions: common/kernel/wgmma.cuh.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernel/cuda_check.cuh"
#include "schedule.hpp"
#include "kernel/wgmma.cuh"  // FA_SM90A_ONLY: compiled for sm_90a only (the host refuses other GPUs first)

namespace fa::step14 {

// Two floats -> one 32-bit register of two 16-bit values (the lower index in the low half).
template <class T> __device__ inline uint32_t pack2(float lo, float hi);
template <> __device__ inline uint32_t pack2<__half>(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
template <> __device__ inline uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// [exp2] 2^x in one instruction (MUFU.EX2, flushing denormal results to zero; 2^-inf = 0).
__device__ inline float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// [cp-async] Start copying rows [r0, r0 + R) of a (rows × D) matrix into the tile at shared
// address `tile` ([sw128]: D/64 panels of R rows × 128 bytes, chunk c of row r at c XOR (r mod 8)),
// 16 bytes per cp.async; rows past `rows` are zero-filled by the copy itself (source size 0). A
// thread copies the same chunk of every kRowsPerPass-th row, so its destination moves by whole rows.
template <class T, int D, int R, int kThreads>
__device__ inline void load_rows_async(uint32_t tile, const T* __restrict__ g, int64_t ld, int r0, int rows) {
  constexpr int kChunks = D / 8, kRowsPerPass = kThreads / kChunks;
  static_assert(kThreads % kChunks == 0 && R % kRowsPerPass == 0 && kRowsPerPass % 8 == 0, "whole passes, fixed swizzle per thread");
  const int r = threadIdx.x / kChunks, cc = threadIdx.x % kChunks;
  const uint32_t dst = tile + wgmma::sw128_offset(r, 8 * cc, R);
  const T* src = g + int64_t(r0 + r) * ld + 8 * cc;
#pragma unroll
  for (int i = 0; i < R / kRowsPerPass; ++i) {
    const bool inside = r0 + r + i * kRowsPerPass < rows;
    const T* from = inside ? src + int64_t(i) * kRowsPerPass * ld : g;  // a valid address even when nothing is read
    FA_SM90A_ONLY(asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst + i * kRowsPerPass * wgmma::kRowBytes),
                               "l"(from), "r"(inside ? 16 : 0)));
  }
}
__device__ inline void cp_async_commit() { FA_SM90A_ONLY(asm volatile("cp.async.commit_group;\n" ::)); }
template <int N>
__device__ inline void cp_async_wait() { FA_SM90A_ONLY(asm volatile("cp.async.wait_group %0;\n" ::"n"(N))); }

template <class T, int D, int Bc>
__global__ void __launch_bounds__(256, blocks_per_sm(Schedule{128, Bc, 2}, D)) step14_wgmma(AttnParams p) {
  constexpr Schedule S{128, Bc, 2};
  constexpr int Br = S.Br, kThreads = S.threads(), kPanels = D / wgmma::kPanel;
  static_assert(kThreads == 256 && valid(S) && D % wgmma::kPanel == 0, "two warpgroups, whole panels");
  // [stages] The Q tile, then kStages × (K tile, V tile), dynamic shared memory, every tile in
  // [sw128] panels.
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  if (sbase % wgmma::kGroupBytes != 0) __trap();  // [sw128] the swizzle is of address bits: fail loudly, never silently
  constexpr uint32_t kQTile = Br * D * 2, kTile = Bc * D * 2;
  auto k_at = [&](int st) { return sbase + kQTile + 2 * st * kTile; };
  auto v_at = [&](int st) { return k_at(st) + kTile; };
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wg = warp / 4;
  // [order] Heaviest causal blocks first (step 12).
  const int i0 = (gridDim.x - 1 - blockIdx.x) * Br, rows = min(Br, p.N - i0), w0 = 16 * warp;  // the warp's first row: 64·wg + 16·(warp % 4)
  const T* Q = static_cast<const T*>(p.q) + b * p.q_sb + h * p.q_sh;
  const T* K = static_cast<const T*>(p.k) + b * p.k_sb + h * p.k_sh;
  const T* V = static_cast<const T*>(p.v) + b * p.v_sb + h * p.v_sh;

  const int Tend = int(kv_tiles_for(i0, i0 + rows, p.N, p.Nk, Bc, p.causal));
  // [pipeline] Q and tile 0 are started before the loop, as one group.
  if (Tend > 0) {
    load_rows_async<T, D, Br, kThreads>(sbase, Q, p.q_sn, i0, p.N);
    load_rows_async<T, D, Bc, kThreads>(k_at(0), K, p.k_sn, 0, p.Nk);
    load_rows_async<T, D, Bc, kThreads>(v_at(0), V, p.v_sn, 0, p.Nk);
  }
  cp_async_commit();

  // [o-regs] The warpgroup's O (64 × D) as d/64 accumulators of a 64 × 64 wgmma, and S (64 × Bc):
  // per lane register 4n + e is element e of the warp's 16 × 8 C tile n ([acc]). Per row (g and
  // g + 8 of the warp's 16), the running max m (log2 domain) and this lane's part of the sum l.
  float o[kPanels][32];
#pragma unroll
  for (int pn = 0; pn < kPanels; ++pn)
#pragma unroll
    for (int r = 0; r < 32; ++r) o[pn][r] = 0.0f;
  float s[Bc / 2];
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const float sl2 = p.scale * kLog2e;  // [exp2]
  // [s-wgmma] The warpgroup's 64 rows of Q start 64·wg rows into each panel of the Q tile.
  const uint32_t q_wg = sbase + wgmma::kmajor_offset(64 * wg, 0, Br);

  for (int j = 0; j < Tend; ++j) {
    const int j0 = j * Bc, st = j % kStages;
    // [pipeline] Tile j (and Q) has landed: this thread's copies, made visible to the async proxy
    // that wgmma reads shared memory through ([proxy]), then everyone's (the barrier), which also
    // says every warpgroup is done with tile j − 1: its stage is refilled now.
    cp_async_wait<0>();
    wgmma::fence_proxy_async();
    __syncthreads();
    if (j + 1 < Tend) {
      load_rows_async<T, D, Bc, kThreads>(k_at((j + 1) % kStages), K, p.k_sn, j0 + Bc, p.Nk);
      load_rows_async<T, D, Bc, kThreads>(v_at((j + 1) % kStages), V, p.v_sn, j0 + Bc, p.Nk);
    }
    cp_async_commit();

    // [s-wgmma] S = Q K_jᵀ: per 16 dims one wgmma 64 × Bc × 16, A = the warpgroup's Q rows and
    // B = K_j (both K-major: a row holds the 16 dims) read by descriptor; the first overwrites S.
    // One group, then wait for it: the softmax reads S.
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      // lab:begin s-desc {O L}: [s-wgmma]: the descriptors of the warpgroup's Q rows (q_wg) and of K_j …
      wgmma::mma_ss<T, Bc>(s, wgmma::desc(q_wg + wgmma::kmajor_offset(0, kk, Br)),
                           wgmma::desc(k_at(st) + wgmma::kmajor_offset(0, kk, Bc)), kk > 0);
      // lab:end
    }
    wgmma::commit();
    wgmma::wait<0>();

    // [causal-mask] Only on tiles that need it: keys at or past a row's visible count get −inf.
    if (needs_mask(i0, i0 + rows, j0, p.N, p.Nk, Bc, p.causal)) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int vis = int(visible_keys(i0 + w0 + m16n8k16::group(lane) + 8 * hr, p.N, p.Nk, p.causal)) - j0;
#pragma unroll
        for (int n = 0; n < Bc / 8; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (8 * n + m16n8k16::c_elem(lane, 2 * hr + e).col >= vis) s[4 * n + 2 * hr + e] = -INFINITY;
      }
    }

    // [softmax-regs] Step 12's, on one 16-row tile per warp: the four lanes of a group share a
    // row (two shuffles for its max and sum); p = exp2(s·scale·log2 e − m), one FMA and one MUFU.EX2.
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < Bc / 8; ++n) mx = fmaxf(mx, fmaxf(s[4 * n + 2 * hr], s[4 * n + 2 * hr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[hr], mx * sl2);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // [rescale-guard]
      const float alpha = fast_exp2(m[hr] - m_use);
      m[hr] = m_new;
      float rs = 0.0f;
#pragma unroll
      for (int n = 0; n < Bc / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pv = fast_exp2(fmaf(s[4 * n + 2 * hr + e], sl2, -m_use));
          s[4 * n + 2 * hr + e] = pv;
          rs += pv;
        }
      l[hr] = l[hr] * alpha + rs;
      // [deferred] Õ *= alpha for this row (registers 4n + 2hr, 4n + 2hr + 1 of every panel).
#pragma unroll
      for (int pn = 0; pn < kPanels; ++pn)
#pragma unroll
        for (int n = 0; n < 8; ++n) o[pn][4 * n + 2 * hr] *= alpha, o[pn][4 * n + 2 * hr + 1] *= alpha;
    }

    // [c-to-a] P's C tiles 2kk and 2kk + 1 are, converted, the warp's A fragment of keys
    // [16kk, 16kk + 16) — the register A operand of wgmma is mma.sync's A fragment, warp by warp.
    uint32_t pa[Bc / 16][4];
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        pa[kk][r] = pack2<T>(s[4 * (2 * kk + r / 2) + 2 * (r % 2)], s[4 * (2 * kk + r / 2) + 2 * (r % 2) + 1]);

    // [pv-wgmma] Õ += P V_j: per 16 keys and per 64-dim panel one wgmma 64 × 64 × 16, A = P in
    // registers, B = V_j read as stored ([key][dim]: MN-major, imm-trans-b = 1). The fence orders
    // the rescaled O and the packed P before the wgmmas read them.
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk)
#pragma unroll
      for (int pn = 0; pn < kPanels; ++pn) {
        // lab:begin pv-desc {O}: [pv-wgmma]: the descriptor of V_j's keys 16kk .. 16kk + 15 in panel …
        wgmma::mma_rs<T, 64>(o[pn], pa[kk], wgmma::desc(v_at(st) + wgmma::mnmajor_offset(kk, pn, Bc)), true);
        // lab:end
      }
    wgmma::commit();
    wgmma::wait<0>();
  }
  cp_async_wait<0>();  // no copy left in flight when the block ends
  // [o-staging] Every warpgroup's last wgmma has read Q (and the stage) before any warp writes O
  // over its rows.
  __syncthreads();

  // [final-divide] The four lanes of a group add their parts of l; O = Õ / l, L = (m + log2 l)·ln 2.
  // O goes through the warp's own rows of the Q tile ([sw128] panels), then out in 16-byte chunks.
  T* O = static_cast<T*>(p.o) + b * p.o_sb + h * p.o_sh;
  float* Lse = p.lse + b * p.lse_sb + h * p.lse_sh;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 1);
    l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 2);
  }
  const float inv[2] = {l[0] > 0.0f ? 1.0f / l[0] : 0.0f, l[1] > 0.0f ? 1.0f / l[1] : 0.0f};
#pragma unroll
  for (int pn = 0; pn < kPanels; ++pn)
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const m16n8k16::Coord c = m16n8k16::c_elem(lane, e);
        const int row = w0 + c.row;  // in the tile
        const uint32_t v = pack2<T>(o[pn][4 * n + e] * inv[e / 2], o[pn][4 * n + e + 1] * inv[e / 2]);
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(sbase + wgmma::sw128_offset(row, 64 * pn + 8 * n + c.col, Br)), "r"(v));
      }
  if (m16n8k16::thread_in_group(lane) == 0)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = i0 + w0 + m16n8k16::group(lane) + 8 * hr;
      if (row < p.N) Lse[row] = l[hr] > 0.0f ? (m[hr] + log2f(l[hr])) * kLn2 : INFINITY;
    }
  __syncwarp();  // the warp's O rows are complete in shared memory
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int c = lane; c < 16 * kChunks; c += 32) {
    const int row = w0 + c / kChunks, cc = c % kChunks;
    if (i0 + row >= p.N) continue;
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(sbase + wgmma::sw128_offset(row, 8 * cc, Br)));
    *reinterpret_cast<uint4*>(O + int64_t(i0 + row) * p.o_sn + 8 * cc) = v;
  }
}

namespace {

template <class T, int D, int Bc>
void launch_typed(const AttnParams& p, cudaStream_t st) {
  constexpr Schedule S{128, Bc, 2};
  const size_t smem = size_t(smem_bytes(S, D));
  static bool configured = false;  // per instantiation: opt in to more than 48 KB once
  if (!configured) {
    int dev = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (size_t(optin) < smem)
      throw Unsupported("step14: " + std::to_string(smem) + " bytes of shared memory per block needed; this GPU allows " +
                        std::to_string(optin));
    // [sm90a] The kernel's code must be sm_90a's: an image for another architecture traps.
    cudaFuncAttributes fa{};
    CUDA_CHECK(cudaFuncGetAttributes(&fa, step14_wgmma<T, D, Bc>));
    if (fa.binaryVersion != 90)
      throw Unsupported("step14: this build has no sm_90a code for its kernel (it runs sm_" + std::to_string(fa.binaryVersion) +
                        "): configure with 90 in CMAKE_CUDA_ARCHITECTURES");
    CUDA_CHECK(cudaFuncSetAttribute(step14_wgmma<T, D, Bc>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    configured = true;
  }
  const dim3 grid(unsigned(num_tiles(p.N, S.Br)), unsigned(p.B * p.H));
  step14_wgmma<T, D, Bc><<<grid, S.threads(), smem, st>>>(p);
  CUDA_CHECK_LAUNCH("step14_wgmma");
}

// [tiles] The experiment's tiles are compiled for fp16 only (as step 12's ablations).
template <class T, int D>
void launch_tiles(const AttnParams& p, int tiles, cudaStream_t st) {
  if (tiles == kTilesAuto) return launch_typed<T, D, kSchedule.Bc>(p, st);
  if constexpr (std::is_same_v<T, __half> && D <= 128) return launch_typed<T, D, schedule_for(D, kTiles128x128).Bc>(p, st);
  if constexpr (D > 128) throw Unsupported("step14: --tiles 128x128 does not fit at d = " + std::to_string(D));
  throw Unsupported(std::string("step14: --tiles ") + kTileNames[tiles] + " is compiled for fp16 only");
}

template <class T>
void launch_d(const AttnParams& p, int tiles, cudaStream_t st) {
  switch (p.d) {
    case 64: return launch_tiles<T, 64>(p, tiles, st);
    case 128: return launch_tiles<T, 128>(p, tiles, st);
    case 256: return launch_tiles<T, 256>(p, tiles, st);
    default: throw Unsupported("step14: head dimension " + std::to_string(p.d) + " is not compiled (64, 128, 256: [stored-d])");
  }
}

}  // namespace

size_t workspace_bytes(const Shape&, const StepOptions&) { return 0; }

void launch(const AttnParams& p, const StepOptions& opts, void* stream) {
  auto aligned = [](const void* ptr, int64_t sb, int64_t sh, int64_t sn) {
    return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && sb % 8 == 0 && sh % 8 == 0 && sn % 8 == 0;
  };
  if (!aligned(p.q, p.q_sb, p.q_sh, p.q_sn) || !aligned(p.k, p.k_sb, p.k_sh, p.k_sn) ||
      !aligned(p.v, p.v_sb, p.v_sh, p.v_sn) || !aligned(p.o, p.o_sb, p.o_sh, p.o_sn))
    throw std::invalid_argument("step14: Q, K, V, O need 16-byte aligned pointers and strides that are multiples of 8");
  if (int64_t(p.B) * p.H > 65535) throw std::invalid_argument("step14: B·H must be at most 65535 (grid dimension)");
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const int tiles = tiles_of(opts);
  if (p.bf16) launch_d<__nv_bfloat16>(p, tiles, st);
  else launch_d<__half>(p, tiles, st);
}

}  // namespace fa::step14
