// Step 16 — ping-pong and intra-warpgroup overlap: step 15's roles, with the softmax hidden.
//
//   step16_pingpong  A producer warpgroup (TMA into a ring of stages, as step 15's, with K and V
//                    behind barriers of their own: [split-ring]) and two or three consumer
//                    warpgroups of 64 rows. A consumer's turn j issues S_j = Q K_jᵀ and P_{j-1}·V_{j-1}
//                    together; the turns go round the consumers through named barriers ([pingpong]),
//                    so the tensor cores multiply for one while the others run their softmax. Inside
//                    a turn the consumer waits for S_j alone and runs the softmax of tile j while
//                    P_{j-1}·V_{j-1} is still in the tensor cores ([overlap]).
//
// [gqa] K's and V's tensor maps have Hkv heads; query head h loads from key/value head
// h / (H / Hkv). [window] A block visits the K/V tiles of its band alone: the producer loads, and
// the consumers mask, tile jbeg + t on the block's t-th turn; the ring counts t from 0.
//
// Tensor maps: encoded on the host (encode_map), passed as __grid_constant__ parameters.
#include <cuda.h>  // CUtensorMap and the encoder's signature (the driver is reached through the runtime)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernel/cuda_check.cuh"
#include "schedule.hpp"
#include "kernel/wgmma.cuh"  // FA_SM90A_ONLY: compiled for sm_90a only (the host refuses other GPUs first)

namespace fa::step16 {

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

// [mbarrier] A barrier object in shared memory (8 bytes) that completes a phase when `count`
// arrivals have happened and the transaction bytes announced for the phase have come in. A waiter
// names the phase by its parity (0, 1, 0, ...): phase k of a barrier is complete when try_wait
// with parity k % 2 succeeds.
__device__ inline void mbar_init(uint32_t bar, int count) {
  FA_SM90A_ONLY(asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory"));
}
// One arrival that also announces `bytes` more to come in this phase (the producer's, per stage).
__device__ inline void mbar_arrive_expect(uint32_t bar, uint32_t bytes) {
  FA_SM90A_ONLY(asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory"));
}
__device__ inline void mbar_arrive(uint32_t bar) {
  FA_SM90A_ONLY(asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory"));
}
__device__ inline void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    FA_SM90A_ONLY(asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                               : "=r"(done) : "r"(bar), "r"(parity) : "memory"));
}

// [tma] One 64-column box of a tile: rows [row, row + box rows) and columns [col, col + 64) of head
// (b, h), from the tensor map into the [sw128] panel at `dst`; the bytes complete on `bar`. Rows
// outside the tensor (past N or Nk) arrive as zeros and still count — the ragged last tile.
__device__ inline void tma_load(uint32_t dst, const CUtensorMap* map, int col, int row, int h, int b, uint32_t bar) {
  FA_SM90A_ONLY(asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(h), "r"(b), "r"(bar)
      : "memory"));
}

// [setmaxnreg] setmaxnreg: the warpgroup's threads drop to / rise to N registers each.
template <int N>
__device__ inline void regs_dec() { FA_SM90A_ONLY(asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N))); }
template <int N>
__device__ inline void regs_inc() { FA_SM90A_ONLY(asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N))); }
// A barrier of the 128 threads of consumer warpgroup c of C (named barrier 1 + C + c: 0 is
// __syncthreads', 1 .. C are the turns).
__device__ inline void warpgroup_sync(int c, int C) { asm volatile("bar.sync %0, 128;\n" ::"r"(1 + C + c) : "memory"); }

struct Maps {
  CUtensorMap q, k, v;
};

template <class T, int D, int Br, int Bc, int Stages, bool PP, bool OV>
__global__ void __launch_bounds__(Schedule{Br, Bc, Stages}.threads(), 1) step16_pingpong(const __grid_constant__ Maps maps, AttnParams p) {
  constexpr Schedule S{Br, Bc, Stages};
  constexpr int C = S.consumers(), kPanels = D / wgmma::kPanel;
  static_assert(valid(S) && D % wgmma::kPanel == 0, "a producer and two or three consumer warpgroups");
  // [stages] The Q tile, then Stages × (K tile, V tile) in [sw128] panels, then the mbarriers.
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  if (sbase % wgmma::kGroupBytes != 0) __trap();  // [sw128] fail loudly, never silently
  constexpr uint32_t kQTile = Br * D * 2, kTile = Bc * D * 2;
  auto k_at = [&](int st) { return sbase + kQTile + 2 * st * kTile; };
  auto v_at = [&](int st) { return k_at(st) + kTile; };
  const uint32_t bars = sbase + uint32_t(tiles_bytes(S, D));
  // [split-ring] K and V of a stage have their own full and empty barriers: K_j is free once S_j is
  // in, V_j only once P_j·V_j is — a turn later, which a shared barrier would make K_j wait for.
  const uint32_t q_full = bars;
  auto full_k = [&](int st) { return bars + 8 * (1 + st); };
  auto full_v = [&](int st) { return bars + 8 * (1 + Stages + st); };
  auto empty_k = [&](int st) { return bars + 8 * (1 + 2 * Stages + st); };
  auto empty_v = [&](int st) { return bars + 8 * (1 + 3 * Stages + st); };

  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int wg = threadIdx.x / 128, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int i0 = (gridDim.x - 1 - blockIdx.x) * Br, rows = min(Br, p.N - i0);  // [order] heaviest causal blocks first
  // [skip] [window] The block visits K/V tiles jbeg .. jbeg + Tcount − 1 (none when Tcount = 0). Below,
  // j counts the tiles visited, from 0 — the stages, the parities and the turns all go by it — and
  // jbeg + j is the tile's place in K and V.
  const int jbeg = int(first_kv_tile(i0, i0 + rows, p.N, p.Nk, Bc, p.causal, p.window));
  const int Tcount = int(kv_tiles_for(i0, i0 + rows, p.N, p.Nk, Bc, p.causal)) - jbeg;
  const int hkv = p.kv_head(h);  // [gqa]

  // [mbarrier] One thread initializes every barrier; the block's only __syncthreads publishes them.
  // Four kinds per stage st ([split-ring]): full_k(st) and full_v(st) take one arrival per phase (the
  // producer's, with the bytes of K_j or V_j); empty_k(st) and empty_v(st) one per consumer warp.
  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    for (int st = 0; st < Stages; ++st) {
      mbar_init(full_k(st), 1), mbar_init(full_v(st), 1);
      mbar_init(empty_k(st), 4 * S.consumers()), mbar_init(empty_v(st), 4 * S.consumers());
    }
    FA_SM90A_ONLY(asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"));
  }
  __syncthreads();

  if (wg == 0) {
    // ---- [producer] ---------------------------------------------------------------------------
    regs_dec<kProducerRegs>();
    if (threadIdx.x != 0 || Tcount == 0) return;
    mbar_arrive_expect(q_full, kQTile);
    for (int pn = 0; pn < kPanels; ++pn) tma_load(sbase + pn * Br * wgmma::kRowBytes, &maps.q, 64 * pn, i0, h, b, q_full);
    for (int j = 0; j < Tcount; ++j) {
      const int st = j % Stages;
      // [split-ring] K_j once K_{j-Stages} is released, then V_j once V_{j-Stages} is.
      if (j >= Stages) mbar_wait(empty_k(st), empty_parity(j, Stages));
      mbar_arrive_expect(full_k(st), kTile);
      for (int pn = 0; pn < kPanels; ++pn) tma_load(k_at(st) + pn * Bc * wgmma::kRowBytes, &maps.k, 64 * pn, (jbeg + j) * Bc, hkv, b, full_k(st));
      if (j >= Stages) mbar_wait(empty_v(st), empty_parity(j, Stages));
      mbar_arrive_expect(full_v(st), kTile);
      for (int pn = 0; pn < kPanels; ++pn) tma_load(v_at(st) + pn * Bc * wgmma::kRowBytes, &maps.v, 64 * pn, (jbeg + j) * Bc, hkv, b, full_v(st));
    }
    return;
  }

  // ---- [consumer] -----------------------------------------------------------------------------
  regs_inc<consumer_regs(C)>();
  const int c = wg - 1, w0 = 16 * (warp % 4);  // consumer c owns rows [64c, 64c + 64); the warp's first row in them
  float o[kPanels][32];
#pragma unroll
  for (int pn = 0; pn < kPanels; ++pn)
#pragma unroll
    for (int r = 0; r < 32; ++r) o[pn][r] = 0.0f;
  float s[Bc / 2];
  uint32_t pa[Bc / 16][4];
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2] = {1.0f, 1.0f};
  const float sl2 = p.scale * kLog2e;  // [exp2]
  const uint32_t q_wg = sbase + wgmma::kmajor_offset(64 * c, 0, Br);

  // [pingpong] Named barrier 1 + c (256 threads: this warpgroup's bar.sync, the previous one's
  // bar.arrive) is this warpgroup's turn to issue products. The last consumer gives consumer 0 the
  // first turn; each turn ends by handing the next to consumer c + 1 (mod C) — so the tensor cores
  // run one warpgroup's products while the others run their softmax. The last consumer does not
  // hand on after its last turn: every bar.sync of a barrier meets exactly one bar.arrive.
  int turns = 0;  // this warpgroup's turns so far
  const int last_turn = Tcount;  // the index of its last turn (Tcount + 1 turns: one per tile, one more)
  auto turn_begin = [&] {
    if (PP) asm volatile("bar.sync %0, 256;\n" ::"r"(1 + c) : "memory");
  };
  auto turn_end = [&] {
    // lab:begin turn-handoff: [pingpong]: hand the next turn to consumer …
    if (PP && !(c == C - 1 && turns == last_turn)) asm volatile("bar.arrive %0, 256;\n" ::"r"(1 + (c + 1) % C) : "memory");
    // lab:end
    ++turns;
  };
  if (PP && c == C - 1 && Tcount > 0) asm volatile("bar.arrive %0, 256;\n" ::"r"(1) : "memory");

  auto issue_s = [&](int st) {  // [s-wgmma] S = Q K_jᵀ (step 14's), one group
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      wgmma::mma_ss<T, Bc>(s, wgmma::desc(q_wg + wgmma::kmajor_offset(0, kk, Br)), wgmma::desc(k_at(st) + wgmma::kmajor_offset(0, kk, Bc)),
                           kk > 0);
    wgmma::commit();
  };
  auto issue_pv = [&](int st) {  // [pv-wgmma] Õ += P V (step 14's), one group, P from pa
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk)
#pragma unroll
      for (int pn = 0; pn < kPanels; ++pn)
        wgmma::mma_rs<T, 64>(o[pn], pa[kk], wgmma::desc(v_at(st) + wgmma::mnmajor_offset(kk, pn, Bc)), true);
    wgmma::commit();
  };
  // Mask and softmax of the block's tile j on s (in place: s becomes P), the running max and sum;
  // alpha is the factor Õ still owes (applied by rescale(), once Õ is no longer being written by a wgmma).
  auto softmax = [&](int j) {
    const int j0 = (jbeg + j) * Bc;
    if (needs_mask(i0, i0 + rows, j0, p.N, p.Nk, Bc, p.causal, p.window)) {  // [causal-mask]
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        // [window] The band's left edge is W keys before its right one: the row sees the tile's
        // columns [vis − W, vis). (Only rows past N, whose vis is clipped to Nk, lose keys by this,
        // and they are never stored.) Derived from vis, it costs no register across the loop.
        const int vis = int(visible_keys(i0 + 64 * c + w0 + m16n8k16::group(lane) + 8 * hr, p.N, p.Nk, p.causal)) - j0;
        const int lo = p.window > 0 ? vis - p.window : -Bc;
#pragma unroll
        for (int n = 0; n < Bc / 8; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = 8 * n + m16n8k16::c_elem(lane, 2 * hr + e).col;
            if (col >= vis || col < lo) s[4 * n + 2 * hr + e] = -INFINITY;
          }
      }
    }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {  // [softmax-regs]
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < Bc / 8; ++n) mx = fmaxf(mx, fmaxf(s[4 * n + 2 * hr], s[4 * n + 2 * hr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[hr], mx * sl2);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // [rescale-guard]
      alpha[hr] = fast_exp2(m[hr] - m_use);
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
      l[hr] = l[hr] * alpha[hr] + rs;
    }
  };
  auto rescale_and_pack = [&] {  // [deferred] Õ *= alpha; [c-to-a] P into pa
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
#pragma unroll
      for (int pn = 0; pn < kPanels; ++pn)
#pragma unroll
        for (int n = 0; n < 8; ++n) o[pn][4 * n + 2 * hr] *= alpha[hr], o[pn][4 * n + 2 * hr + 1] *= alpha[hr];
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        pa[kk][r] = pack2<T>(s[4 * (2 * kk + r / 2) + 2 * (r % 2)], s[4 * (2 * kk + r / 2) + 2 * (r % 2) + 1]);
  };
  auto release = [&](uint32_t empty_bar) {  // one arrival per warp
    if (lane == 0) mbar_arrive(empty_bar);
  };

  // One turn per tile and one more: turn j issues S_j = Q K_jᵀ and, behind it, P_{j-1}·V_{j-1} (the
  // product the softmax of tile j − 1 made ready), so the other warpgroup's softmax has two products
  // of this one's to hide behind ([pingpong]). [overlap]: wait only for S_j before the softmax of
  // tile j — P_{j-1}·V_{j-1} still runs under it — and for both after it; without [overlap] both are
  // waited for first. Õ is rescaled for tile j once P_{j-1}·V_{j-1} is in. The first and the last
  // turns are peeled: with a wgmma issued under a condition, ptxas cannot tell which groups a
  // wait_group leaves running, and serializes every wgmma of the kernel (its warning C7514).
  if (Tcount > 0) {
    mbar_wait(q_full, 0);
    mbar_wait(full_k(0), full_parity(0, Stages));
    turn_begin();
    wgmma::fence();
    issue_s(0);
    turn_end();
    wgmma::wait<0>();
    release(empty_k(0));
    softmax(0);
    rescale_and_pack();
    for (int j = 1; j < Tcount; ++j) {
      const int st = j % Stages, prev = (j - 1) % Stages;
      mbar_wait(full_k(st), full_parity(j, Stages));
      mbar_wait(full_v(prev), full_parity(j - 1, Stages));
      turn_begin();
      wgmma::fence();
      issue_s(st);
      issue_pv(prev);
      turn_end();
      // [overlap] Wait for S_j alone: the softmax of tile j runs under P_{j-1}·V_{j-1}.
      // lab:begin overlap-release: [overlap] [split-ring]: wait for S_j alone (wgmma::wait<1> …
      if (OV) wgmma::wait<1>();  // S_j is in; P_{j-1}·V_{j-1} may still run
      else wgmma::wait<0>();
      release(empty_k(st));
      softmax(j);
      wgmma::wait<0>();
      release(empty_v(prev));
      // lab:end
      rescale_and_pack();
    }
    const int last = (Tcount - 1) % Stages;
    mbar_wait(full_v(last), full_parity(Tcount - 1, Stages));
    turn_begin();
    wgmma::fence();
    issue_pv(last);
    turn_end();
    wgmma::wait<0>();
    release(empty_v(last));
  }

  // [o-staging] The warpgroup's last wgmma has read its Q rows before any of its warps writes O
  // over them (the other consumer's rows are its own business).
  warpgroup_sync(c, C);
  T* O = static_cast<T*>(p.o) + b * p.o_sb + h * p.o_sh;
  float* Lse = p.lse + b * p.lse_sb + h * p.lse_sh;
  const int wr = 64 * c + w0;  // the warp's first row in the tile
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
        const m16n8k16::Coord cc = m16n8k16::c_elem(lane, e);
        const int row = wr + cc.row;
        const uint32_t v = pack2<T>(o[pn][4 * n + e] * inv[e / 2], o[pn][4 * n + e + 1] * inv[e / 2]);
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(sbase + wgmma::sw128_offset(row, 64 * pn + 8 * n + cc.col, Br)), "r"(v));
      }
  if (m16n8k16::thread_in_group(lane) == 0)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = i0 + wr + m16n8k16::group(lane) + 8 * hr;
      if (row < p.N) Lse[row] = l[hr] > 0.0f ? (m[hr] + log2f(l[hr])) * kLn2 : INFINITY;
    }
  __syncwarp();
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int k = lane; k < 16 * kChunks; k += 32) {
    const int row = wr + k / kChunks, ch = k % kChunks;
    if (i0 + row >= p.N) continue;
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(sbase + wgmma::sw128_offset(row, 8 * ch, Br)));
    *reinterpret_cast<uint4*>(O + int64_t(i0 + row) * p.o_sn + 8 * ch) = v;
  }
}

namespace {

// [tensor-map] The driver's encoder, reached through the runtime (no link against libcuda: the
// programs still start on a machine without a driver).
using EncodeFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                              const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                              CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeFn encoder() {
  static const EncodeFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || f == nullptr)
      throw Unsupported("step16: the driver has no cuTensorMapEncodeTiled (CUDA 12 or later is needed for TMA)");
    return reinterpret_cast<EncodeFn>(f);
  }();
  return fn;
}

// [tensor-map] A [B, H, rows, d] tensor of 16-bit values with strides (elements) as a 4-d tensor
// map, innermost first: (d, rows, H, B), boxes of 64 columns × box_rows rows, the 128-byte swizzle,
// zeros outside. A dimension of extent 1 gets a stride that is valid whatever the caller's.
CUtensorMap encode_map(const void* base, bool bf16, int d, int rows, int H, int B, int64_t sn, int64_t sh, int64_t sb,
                       int box_rows) {
  const cuuint64_t dims[4] = {cuuint64_t(d), cuuint64_t(rows), cuuint64_t(H), cuuint64_t(B)};
  const int64_t sh_ok = H == 1 ? sn * rows : sh, sb_ok = B == 1 ? sh_ok * H : sb;
  const cuuint64_t strides[3] = {cuuint64_t(sn * 2), cuuint64_t(sh_ok * 2), cuuint64_t(sb_ok * 2)};
  const cuuint32_t box[4] = {64, cuuint32_t(box_rows), 1, 1}, elem[4] = {1, 1, 1, 1};
  CUtensorMap m{};
  const CUresult r = encoder()(&m, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
                               const_cast<void*>(base), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::invalid_argument("step16: cuTensorMapEncodeTiled refused a tensor (error " + std::to_string(int(r)) +
                                "): strides must be multiples of 16 bytes, the base 16-byte aligned");
  return m;
}

template <class T, int D, int Br, int Bc, int Stages, bool PP = true, bool OV = true>
void launch_typed(const AttnParams& p, cudaStream_t st) {
  constexpr Schedule S{Br, Bc, Stages};
  const size_t smem = size_t(smem_bytes(S, D));
  static bool configured = false;  // per instantiation
  if (!configured) {
    int dev = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (size_t(optin) < smem)
      throw Unsupported("step16: " + std::to_string(smem) + " bytes of shared memory per block needed; this GPU allows " +
                        std::to_string(optin));
    cudaFuncAttributes fa{};
    CUDA_CHECK(cudaFuncGetAttributes(&fa, step16_pingpong<T, D, Br, Bc, Stages, PP, OV>));
    if (fa.binaryVersion != 90)  // [sm90a]
      throw Unsupported("step16: this build has no sm_90a code for its kernel (it runs sm_" + std::to_string(fa.binaryVersion) +
                        "): configure with 90 in CMAKE_CUDA_ARCHITECTURES");
    CUDA_CHECK(cudaFuncSetAttribute(step16_pingpong<T, D, Br, Bc, Stages, PP, OV>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    configured = true;
  }
  const bool bf = std::is_same_v<T, __nv_bfloat16>;
  Maps maps;
  maps.q = encode_map(p.q, bf, D, p.N, p.H, p.B, p.q_sn, p.q_sh, p.q_sb, Br);
  const int hkv = p.Hkv > 0 ? p.Hkv : p.H;  // [gqa] K and V have their own number of heads
  maps.k = encode_map(p.k, bf, D, p.Nk, hkv, p.B, p.k_sn, p.k_sh, p.k_sb, Bc);
  maps.v = encode_map(p.v, bf, D, p.Nk, hkv, p.B, p.v_sn, p.v_sh, p.v_sb, Bc);
  const dim3 grid(unsigned(num_tiles(p.N, Br)), unsigned(p.B * p.H));
  step16_pingpong<T, D, Br, Bc, Stages, PP, OV><<<grid, S.threads(), smem, st>>>(maps, p);
  CUDA_CHECK_LAUNCH("step16_pingpong");
}

// [tiles] Another tile than auto's, when it exists at this d (fp16 only).
template <class T, int D, int Tl>
bool launch_other(const AttnParams& p, int tiles, cudaStream_t st) {
  constexpr Schedule a = schedule_for(D), t = schedule_for(D, Tl);
  if constexpr (valid(t) && (t.Br != a.Br || t.Bc != a.Bc)) {
    if (tiles != Tl) return false;
    launch_typed<T, D, t.Br, t.Bc, t.stages>(p, st);
    return true;
  }
  return false;
}

// [tiles] [ablation] The experiments (another tile; one overlap taken out) are compiled for fp16 only.
template <class T, int D>
void launch_tiles(const AttnParams& p, int tiles, int ablation, cudaStream_t st) {
  constexpr Schedule a = schedule_for(D);
  const Schedule want = schedule_for(D, tiles);
  if (!valid(want))
    throw Unsupported(std::string("step16: --tiles ") + kTileNames[tiles] + " is not offered at d = " + std::to_string(D) +
                      " (shared memory or a consumer's registers would not hold it: [tile-sizes] in steps/16_pingpong/schedule.hpp)");
  if (tiles == kTilesAuto && ablation == kFull) return launch_typed<T, D, a.Br, a.Bc, a.stages>(p, st);
  if constexpr (std::is_same_v<T, __half>) {
    if (want.Br == a.Br && want.Bc == a.Bc && ablation == kFull) return launch_typed<T, D, a.Br, a.Bc, a.stages>(p, st);
    if (ablation == kNoPingPong) return launch_typed<T, D, a.Br, a.Bc, a.stages, false, true>(p, st);
    if (ablation == kNoOverlap) return launch_typed<T, D, a.Br, a.Bc, a.stages, true, false>(p, st);
    if (ablation == kNoBoth) return launch_typed<T, D, a.Br, a.Bc, a.stages, false, false>(p, st);
    if (launch_other<T, D, kTiles128x64>(p, tiles, st) || launch_other<T, D, kTiles128x128>(p, tiles, st) ||
        launch_other<T, D, kTiles192x128>(p, tiles, st))
      return;
  }
  throw Unsupported(std::string("step16: --tiles and --ablate are compiled for fp16 only"));
}

template <class T>
void launch_d(const AttnParams& p, int tiles, int ablation, cudaStream_t st) {
  switch (p.d) {
    case 64: return launch_tiles<T, 64>(p, tiles, ablation, st);
    case 128: return launch_tiles<T, 128>(p, tiles, ablation, st);
    case 256: return launch_tiles<T, 256>(p, tiles, ablation, st);
    default: throw Unsupported("step16: head dimension " + std::to_string(p.d) + " is not compiled (64, 128, 256: [stored-d])");
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
    throw std::invalid_argument("step16: Q, K, V, O need 16-byte aligned pointers and strides that are multiples of 8");
  if (int64_t(p.B) * p.H > 65535) throw std::invalid_argument("step16: B·H must be at most 65535 (grid dimension)");
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const int tiles = tiles_of(opts), ablation = ablation_of(opts);
  if (tiles != kTilesAuto && ablation != kFull) throw Unsupported("step16: --tiles and --ablate one at a time");
  if (p.bf16) launch_d<__nv_bfloat16>(p, tiles, ablation, st);
  else launch_d<__half>(p, tiles, ablation, st);
}

}  // namespace fa::step16
