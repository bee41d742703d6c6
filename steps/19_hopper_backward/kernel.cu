// Step 19 — the backward on Hopper (the forward is step 16's kernel).
//
//   step19_bwd_pre      per row: D = Σ_c dO·O, L·log2 e (+inf past N), the fp32 dQ accumulator zeroed
//   step19_bwd_kv       a block per (K/V tile j, key/value head), three warpgroups ([roles]):
//                       the producer warp loads K_j, V_j once and Q_i, dO_i, L, D per Q tile into a
//                       ring ([ring]); consumer c (64 keys) computes Sᵀ = K Qᵀ and dPᵀ = V dOᵀ
//                       ([swapped]), Pᵀ and dSᵀ in registers ([bwd-softmax]), dV += Pᵀ dO and
//                       dK += dSᵀ Q with Pᵀ and dSᵀ as register operands ([c-to-a]), dSᵀ to shared
//                       memory ([ds-smem]) and its share of dQ_i = dS K ([dq-wgmma], [dq-split]);
//                       the writer warp adds each consumer's dQ chunk with a bulk reduce-add ([dq-writer])
//   step19_dq_convert   dQ = scale · accumulator, in the storage type
//   step19_key_mean     (--dq centered) each key/value head's mean key ([dq-centered]); the consumers then
//                       add each query's Σ dS into its row sum, and the convert takes c · (row sum) off
//
// [unswapped] (--ablate swapped) S = Q Kᵀ and dP = dO Vᵀ instead: P and dS go to shared memory for dV
// and dK (A read MN-major from there), and dQ's share takes dS from registers, over the consumer's keys.
//
// [dropout] (--dropout P) The consumers redraw the forward's mask (steps 12 and 13's Philox blocks,
// common/kernel/dropout.hpp) while Sᵀ and dPᵀ are multiplied: Pᵀ∘Z feeds dV, dSᵀ = Pᵀ ∘ (dPᵀ∘Z − D).
//
// [gqa] A block serves a key/value head: it walks the Q tiles of each of the group's query heads in
// turn ([items]), so dK and dV sum the group in registers. [window] A K/V tile's Q tiles end where
// the rows' bands pass it (end_q_tile), and the mask tests the band's left edge too.
//
// Layouts: common/kernel/wgmma_layout.hpp ([sw128], [desc], [acc]); the accumulator's: [dq-layout].
#include <cuda.h>  // CUtensorMap and the encoder's signature (the driver is reached through the runtime)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernel/cuda_check.cuh"
#include "kernel/dropout.hpp"
#include "schedule.hpp"
#include "kernel/wgmma.cuh"  // FA_SM90A_ONLY: compiled for sm_90a only (the host refuses other GPUs first)

namespace fa::step19 {

template <class T> __device__ inline float to_f32(T x);
template <> __device__ inline float to_f32(__half x) { return __half2float(x); }
template <> __device__ inline float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

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
// [dq-centered] The two values of a register back to floats (pack2's inverse: exact).
template <class T> __device__ inline float2 unpack2(uint32_t x);
template <> __device__ inline float2 unpack2<__half>(uint32_t x) { return __half22float2(*reinterpret_cast<const __half2*>(&x)); }
template <> __device__ inline float2 unpack2<__nv_bfloat16>(uint32_t x) {
  return make_float2(__uint_as_float(x << 16), __uint_as_float(x & 0xffff0000u));
}

// [exp2] 2^x in one instruction (MUFU.EX2; 2^-inf = 0).
__device__ inline float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// [desc-add] x, as a value the compiler cannot see through (a register move it must keep where it stands).
__device__ inline uint32_t opaque(uint32_t x) {
  asm volatile("mov.b32 %0, %0;\n" : "+r"(x));
  return x;
}

// [mbarrier] step 15's: a barrier in shared memory completes a phase when `count` arrivals have
// happened and the announced transaction bytes have come in; a waiter names the phase by its parity.
__device__ inline void mbar_init(uint32_t bar, int count) {
  FA_SM90A_ONLY(asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory"));
}
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

// [tma] One 64-column box of a tile from the tensor map into the [sw128] panel at `dst` (rows past
// the tensor arrive as zeros and still count), completing on `bar`.
__device__ inline void tma_load(uint32_t dst, const CUtensorMap* map, int col, int row, int h, int b, uint32_t bar) {
  FA_SM90A_ONLY(asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(h), "r"(b), "r"(bar)
      : "memory"));
}
// [ring] A contiguous copy of `bytes` (a multiple of 16) from global memory, completing on `bar`: the
// rows' L·log2 e and D (the workspace is padded, so a Q tile's rows are always all there).
__device__ inline void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  FA_SM90A_ONLY(asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                             "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(bar)
                             : "memory"));
}
// [dq-writer] dst[k] += src[k] for the `bytes` / 4 floats at shared address src, each add atomic (other
// blocks add into the same Q tile); the reads of shared memory are done once wait_read<0> returns.
__device__ inline void bulk_reduce_add(float* dst, uint32_t src, uint32_t bytes) {
  FA_SM90A_ONLY(asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                                 reinterpret_cast<uint64_t>(dst)),
                             "r"(src), "r"(bytes)
                             : "memory"));
}
__device__ inline void bulk_commit() { FA_SM90A_ONLY(asm volatile("cp.async.bulk.commit_group;\n" ::: "memory")); }
__device__ inline void bulk_wait_read_all() { FA_SM90A_ONLY(asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory")); }
__device__ inline void bulk_wait_all() { FA_SM90A_ONLY(asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory")); }
// [deterministic] The semaphore of a Q tile: read with acquire (what the blocks before wrote to the
// tile is visible after it), incremented with release (this block's adds visible before it); the
// proxy fences order the bulk adds (the async proxy) against those generic accesses.
__device__ inline int ld_acquire(const int* p) {
  int v = 0;
  FA_SM90A_ONLY(asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory"));
  return v;
}
__device__ inline void red_release_inc(int* p) {
  FA_SM90A_ONLY(asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(p) : "memory"));
}
__device__ inline void fence_proxy_async_global() { FA_SM90A_ONLY(asm volatile("fence.proxy.async.global;\n" ::: "memory")); }

template <int N>
__device__ inline void regs_dec() { FA_SM90A_ONLY(asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N))); }
template <int N>
__device__ inline void regs_inc() { FA_SM90A_ONLY(asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N))); }

// The workspace (schedule.hpp's): L·log2 e and D per padded row, then the accumulator, then (with
// --deterministic) a semaphore per Q tile, or (with --dq centered, never both) the row sums and the means.
// `pad`: the rows a head's are padded to, row_pad of the accumulator's unit ([dq-layout]: 640 with --ablate
// tiles at d = 128), a compile-time constant at every call.
struct Ws {
  float *l2, *dd, *acc, *rs, *km;
  int* sem;
  int64_t Np, Tp;  // padded rows and Q tiles per head
  __device__ Ws(const BwdParams& p, int64_t pad = kRowPad) {
    Np = num_tiles(p.f.N, pad) * pad;
    Tp = Np / kSemRows;
    const int64_t rows = int64_t(p.f.B) * p.f.H * Np;
    l2 = static_cast<float*>(p.workspace);
    dd = l2 + rows;
    acc = dd + rows;
    sem = reinterpret_cast<int*>(acc + rows * p.f.d);
    rs = acc + rows * p.f.d;  // [dq-centered] where the semaphores would be
    km = rs + rows;
  }
};

// [pre] One thread per 8 columns of a padded row: D = Σ dO·O (fp32), L·log2 e (+inf past N, so
// that P = 0 there, and D = 0), the row's accumulator zeroed; with `det`, the Q tile's semaphore too.
template <class T, int D, int Unit = kChunk>
__global__ void step19_bwd_pre(BwdParams p, int det, int centered) {
  constexpr int kPer = D / 8;  // threads per row (8 or 16: inside one warp)
  const Ws ws(p, kRowPadOf<Unit>);
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kPer;  // over B·H·Np
  const int c0 = 8 * (threadIdx.x % kPer);
  if (row >= int64_t(p.f.B) * p.f.H * ws.Np) return;  // never taken: the grid is exact (Np is a multiple of 128)
  const int bh = int(row / ws.Np), i = int(row % ws.Np), b = bh / p.f.H, h = bh % p.f.H;
  float s = 0.0f;
  if (i < p.f.N) {
    const int64_t at = b * p.f.o_sb + h * p.f.o_sh + int64_t(i) * p.f.o_sn + c0;
    const uint4 o = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.f.o) + at);
    const uint4 g = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.dout) + at);
    const T* ov = reinterpret_cast<const T*>(&o);
    const T* gv = reinterpret_cast<const T*>(&g);
#pragma unroll
    for (int x = 0; x < 8; ++x) s += to_f32(gv[x]) * to_f32(ov[x]);
  }
  float4* a = reinterpret_cast<float4*>(ws.acc + row * D + c0);  // a row's D floats (the tile's rows are contiguous)
  a[0] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  a[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int off = kPer / 2; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (c0 == 0) {
    ws.dd[row] = s;
    ws.l2[row] = i < p.f.N ? p.f.lse[b * p.f.lse_sb + h * p.f.lse_sh + i] * kLog2e : INFINITY;
    if (det && i % kSemRows == 0) ws.sem[row / kSemRows] = 0;  // [deterministic] (Np is a multiple of kSemRows)
    if (centered) ws.rs[row] = 0.0f;                            // [dq-centered]
  }
  if (centered && i == 0 && bh < p.f.B * p.f.Hkv) {  // [dq-centered] head bh's first row zeroes mean bh
    float4* m = reinterpret_cast<float4*>(ws.km + int64_t(bh) * D + c0);
    m[0] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    m[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

// [dq-centered] Block (x, b·Hkv + hkv): keys kMeanKeys·x .. + kMeanKeys − 1 of the head, d/8 threads per
// key (8 columns each), 256 / (d/8) keys at a time; the column sums through shared memory in a fixed
// order, then one add of sum / Nk per column into the head's mean.
template <class T, int D>
__global__ void step19_key_mean(BwdParams p) {
  constexpr int kPer = D / 8, kRows = 256 / kPer;
  __shared__ float part[kRows][D];
  const Ws ws(p);
  const int bk = blockIdx.y, b = bk / p.f.Hkv, hkv = bk % p.f.Hkv, c0 = 8 * (threadIdx.x % kPer), r = threadIdx.x / kPer;
  const T* K = static_cast<const T*>(p.f.k) + b * p.f.k_sb + hkv * p.f.k_sh + c0;
  const int k0 = blockIdx.x * kMeanKeys, k1 = min(k0 + kMeanKeys, p.f.Nk);
  float s[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  for (int key = k0 + r; key < k1; key += kRows) {
    const uint4 v = *reinterpret_cast<const uint4*>(K + int64_t(key) * p.f.k_sn);
    const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int x = 0; x < 8; ++x) s[x] += to_f32(e[x]);
  }
#pragma unroll
  for (int x = 0; x < 8; ++x) part[r][c0 + x] = s[x];
  __syncthreads();
  if (threadIdx.x < D) {
    float t = 0.0f;
    for (int q = 0; q < kRows; ++q) t += part[q][threadIdx.x];
    atomicAdd(ws.km + int64_t(bk) * D + threadIdx.x, t / float(p.f.Nk));
  }
}

struct Maps {
  CUtensorMap q, dout, k, v;
};

// Template arguments: Bulk ([dq-writer]; false: --ablate atomics), OV ([overlap]; false: --ablate
// overlap), Split ([dq-split]: by columns at d = 128, by turns at d = 64, by keys with --ablate
// dq-keys, by rows or transposed with --ablate tiles), DkFirst ([dk-first]; false: --ablate dk-first), Det ([deterministic]), Cent ([dq-centered]),
// Drop ([dropout]; --dropout with --dropout-kernel run), Issue (who issues the loads: kByProducer, the
// producer warp ([producer]); kByConsumer0 or kByLastRelease, --ablate producer or producer-last ([no-producer])),
// Sw ([swapped]; false: --ablate swapped, [unswapped]).
template <class T, int D, bool Bulk, bool OV, int Split, bool DkFirst, bool Det, bool Cent, bool Drop, int Issue, bool Sw>
__global__ void __launch_bounds__(schedule_for(D).threads(), 1) step19_bwd_kv(const __grid_constant__ Maps maps, BwdParams p) {
  constexpr Schedule S = schedule_for(D, Split == kByRows || Split == kTransposed ? kTiles : kFull);  // [tile-sizes]
  constexpr int C = S.consumers(), Br = S.Br, Bc = S.Bc, St = S.stages, kPanels = D / wgmma::kPanel;
  constexpr bool kDsFromRoundedP = ds_from_rounded_p(S), kTr = Split == kTransposed;
  static_assert(valid(S, D) && C == 2 && (Br == 64) == (Split != kByRows && !kTr) && kTr == dq_transposed(S),
                "two consumers of 64 keys; Q tiles of 64 rows, 128 by rows, 80 transposed");
  static_assert(Split != kByColumns || dq_by_columns(D, C), "by columns: half of d is a whole panel");
  static_assert(Split != kByTurns || D == wgmma::kPanel, "by turns: d is one panel");
  static_assert(Split != kByRows || (D == wgmma::kPanel && !Drop && !Cent && !Det && Bulk && OV && DkFirst && Issue == kByProducer),
                "--ablate tiles: d is one panel (a chunk holds 64 rows' whole accumulator), the default kernel otherwise");
  static_assert(!kTr || (D == C * wgmma::kPanel && !Drop && !Cent && !Det && Bulk && OV && DkFirst && Issue == kByProducer),
                "--ablate tiles at d = 128: dQᵀ's rows a panel a consumer, the default kernel otherwise");
  static_assert(!Det || Bulk, "--deterministic orders the writer's adds");
  static_assert(!Det || !Cent, "--dq centered adds its row sums in no fixed order");
  static_assert(!Drop || (!Cent && Bulk && OV && DkFirst && Split == default_split(D, C)), "--dropout: the default kernel alone");
  static_assert(Issue == kByProducer || (!Drop && !Cent && !Det && Bulk && OV && DkFirst && Split == default_split(D, C)),
                "--ablate producer: the default kernel otherwise (its loads wait where [dk-first]'s order releases a stage)");
  static_assert(Sw || (Split == kByKeys && Br == 64 && !Drop && !Cent && !Det && Bulk && OV && DkFirst && Issue == kByProducer),
                "--ablate swapped: dQ by keys from dS's registers, the default kernel otherwise");
  // [smem-map] K_j, V_j, the stages' Q_i and dO_i, two dSᵀ buffers, two dQ chunks per consumer, the
  // stages' L·log2 e and D, the mbarriers.
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  if (sbase % wgmma::kGroupBytes != 0) __trap();  // [sw128] fail loudly, never silently
  constexpr uint32_t kTileKV = Bc * D * 2, kTileQ = Br * D * 2, kDs = Bc * Br * 2, kChunkBytes = uint32_t(chunk_floats(S) * 4);
  constexpr int kChunkF = int(chunk_floats(S)), kBufs = dq_buffers(S), kDqRegs = kChunkF / 128;  // a chunk's floats; a consumer's
                                                                                                // buffers; a thread's dQ floats
  const uint32_t k_s = sbase, v_s = sbase + kTileKV;
  auto q_off = [&](int st) { return 2 * kTileKV + st * 2 * kTileQ; };  // offsets from sbase ([desc-add])
  auto q_at = [&](int st) { return sbase + q_off(st); };
  auto do_at = [&](int st) { return q_at(st) + kTileQ; };
  const uint32_t ds_off = 2 * kTileKV + St * 2 * kTileQ, ds0 = sbase + ds_off;
  const uint32_t dqb0 = ds0 + 2 * kDs;
  // [unswapped] Consumer c's P and dS (Br queries × its 64 keys each, [sw128], rows = queries) where
  // the two dSᵀ buffers are: 2·C·kPq = 2·kDs bytes.
  constexpr uint32_t kPq = Br * 64 * 2;
  static_assert(Sw || 2 * C * kPq == 2 * kDs, "P and dS of both consumers fill the dSᵀ buffers exactly");
  auto p_off = [&](int cc) { return ds_off + 2 * cc * kPq; };
  auto dsq_off = [&](int cc) { return p_off(cc) + kPq; };
  auto chunk_at = [&](int c, int buf) { return dqb0 + (kBufs * c + buf) * kChunkBytes; };
  const uint32_t rows0 = dqb0 + kBufs * C * kChunkBytes;
  auto l2_at = [&](int st) { return rows0 + st * 2 * Br * 4; };
  auto dd_at = [&](int st) { return l2_at(st) + Br * 4; };
  const uint32_t bars = rows0 + St * 2 * Br * 4;
  const uint32_t kv_full = bars;
  auto full = [&](int st) { return bars + 8 * (1 + st); };
  auto empty = [&](int st) { return bars + 8 * (1 + St + st); };
  auto dq_full = [&](int c, int buf) { return bars + 8 * (1 + 2 * St + 2 * c + buf); };
  auto dq_empty = [&](int c, int buf) { return bars + 8 * (1 + 2 * St + 2 * C + 2 * c + buf); };
  // [dq-writer] A consumer's dQ of one item is kChunks 64 × 64 chunks (2 by keys at d = 128), staged
  // into its two buffers as [handshake] says: a consumer never waits for its previous chunk to be read out.
  constexpr int kChunks = Split == kByKeys ? kPanels : 1;
  auto buf_of = [&](int t, int ch) { return dq_buffer_of(Split, kChunks, t, ch); };
  auto use_of = [&](int t) { return dq_use_of(Split, kChunks, t); };

  const AttnParams& f = p.f;
  const Ws ws(p, kRowPadOf<acc_rows(S)>);
  const int jt = int(kv_tile_of_block(blockIdx.x, gridDim.x, Det, f.causal));  // [deterministic] the launch order
  const int j0 = jt * Bc, j1 = min(j0 + Bc, f.Nk);
  const int b = blockIdx.y / f.Hkv, hkv = blockIdx.y % f.Hkv, G = f.H / f.Hkv;
  // [items] Q tile first + t % per_head of query head hkv·G + t / per_head, for t < items.
  const int first = int(first_q_tile(j0, f.N, f.Nk, Br, f.causal));
  const int per_head = int(q_tiles_of(j0, j1, f.N, f.Nk, Br, f.causal, f.window));
  const int items = G * per_head;
  auto head_of = [&](int t) { return hkv * G + t / per_head; };
  auto row_of = [&](int t) { return (first + t % per_head) * Br; };
  const int wg = threadIdx.x / 128, warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  // [mbarrier] empty(st) takes one arrival per consumer thread (each thread releases its own reads of
  // the stage's L and D); dq_full one per thread of the consumer; kv_full, full and dq_empty one each.
  if (threadIdx.x == 0) {
    mbar_init(kv_full, 1);
    for (int st = 0; st < St; ++st) mbar_init(full(st), 1), mbar_init(empty(st), 128 * C);
    for (int c = 0; c < C; ++c)
      for (int buf = 0; buf < 2; ++buf) mbar_init(dq_full(c, buf), 128), mbar_init(dq_empty(c, buf), 1);
    FA_SM90A_ONLY(asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"));
  }
  __syncthreads();

  // [producer] The loads, one thread's: K_j and V_j once; item t's Q_i, dO_i, L·log2 e and D into
  // stage t % St, once every consumer thread has released the stage's previous use.
  auto load_kv = [&] {
    mbar_arrive_expect(kv_full, 2 * kTileKV);
    for (int pn = 0; pn < kPanels; ++pn) {
      tma_load(k_s + pn * Bc * wgmma::kRowBytes, &maps.k, 64 * pn, j0, hkv, b, kv_full);
      tma_load(v_s + pn * Bc * wgmma::kRowBytes, &maps.v, 64 * pn, j0, hkv, b, kv_full);
    }
  };
  auto load_item = [&](int t) {
    const int st = t % St, h = head_of(t), i0 = row_of(t);
    const int64_t r0 = (int64_t(b) * f.H + h) * ws.Np + i0;
    if (t >= St) mbar_wait(empty(st), empty_parity(t, St));
    mbar_arrive_expect(full(st), 2 * kTileQ + 2 * Br * 4);
    for (int pn = 0; pn < kPanels; ++pn) {
      tma_load(q_at(st) + pn * Br * wgmma::kRowBytes, &maps.q, 64 * pn, i0, h, b, full(st));
      tma_load(do_at(st) + pn * Br * wgmma::kRowBytes, &maps.dout, 64 * pn, i0, h, b, full(st));
    }
    bulk_load(l2_at(st), ws.l2 + r0, Br * 4, full(st));
    bulk_load(dd_at(st), ws.dd + r0, Br * 4, full(st));
  };

  // [roles] Warpgroup 0: warp 0 the producer, warp 1 the writer (warps 2 and 3 idle); 1 and 2 the consumers.
  if (wg == 0) {
    regs_dec<kProducerRegs>();
    if (items == 0 || lane != 0) return;
    if (warp == 0) {
      // ---- [producer] ------------------------------------------------------------------------
      if constexpr (Issue == kByProducer) {
        load_kv();
        for (int t = 0; t < items; ++t) load_item(t);
      }
    } else if (warp == 1 && Bulk) {
      // ---- [dq-writer] -----------------------------------------------------------------------
      for (int t = 0; t < items; ++t) {
        const int64_t bh = int64_t(b) * f.H + head_of(t);
        float* tile = ws.acc + (bh * ws.Np + row_of(t)) * D;
        int* sem = ws.sem + bh * ws.Tp + row_of(t) / Br;
        if constexpr (Det) {
          // [deterministic] This block's turn at the Q tile: every block before it has added and
          // released; the bulk adds below come after the acquire.
          const int rank = int(add_rank(row_of(t) / Br, jt, f.N, f.Nk, Br, Bc, f.causal, f.window));
          while (ld_acquire(sem) != rank) {
          }
          fence_proxy_async_global();
        }
        for (int c = 0; c < C; ++c) {
          if (!dq_computes(Split, c, t)) continue;  // by turns: the other consumer's item
          for (int ch = 0; ch < kChunks; ++ch) {
            mbar_wait(dq_full(c, buf_of(t, ch)), uint32_t(use_of(t)) & 1u);
            bulk_reduce_add(tile + dq_panel_of(Split, c, ch) * kChunkF, chunk_at(c, buf_of(t, ch)), kChunkBytes);
          }
          // [deterministic] By keys both consumers add into the same floats: consumer 0's adds land first.
          if (Det && Split == kByKeys && c + 1 < C) bulk_commit(), bulk_wait_all();
        }
        bulk_commit();
        if constexpr (Det) {
          bulk_wait_all();  // the adds have landed in global memory, not only read out of shared memory
          fence_proxy_async_global();
          red_release_inc(sem);
        } else {
          bulk_wait_read_all();  // the chunks may be written again
        }
        (void)sem;
        for (int c = 0; c < C; ++c)
          for (int ch = 0; ch < kChunks && dq_computes(Split, c, t); ++ch) mbar_arrive(dq_empty(c, buf_of(t, ch)));
      }
      bulk_wait_all();
    }
    return;
  }

  // ---- [consumer] -------------------------------------------------------------------------------
  regs_inc<kConsumerRegs>();
  // [desc-add] The consumer's index, broadcast from lane 0 so that ptxas sees it warp-uniform.
  const int c = __shfl_sync(0xffffffffu, wg - 1, 0), w = warp % 4, tid = threadIdx.x % 128;
  const int g = m16n8k16::group(lane), tg = m16n8k16::thread_in_group(lane);
  float dk[kPanels][32], dv[kPanels][32];
#pragma unroll
  for (int pn = 0; pn < kPanels; ++pn)
#pragma unroll
    for (int r = 0; r < 32; ++r) dk[pn][r] = 0.0f, dv[pn][r] = 0.0f;
  const float sl2 = f.scale * kLog2e;
  const uint32_t keep_below = Drop ? dropout_threshold(f.dropout) : 0u;  // [dropout]
  const float z_kept = Drop ? dropout_rescale(f.dropout) : 1.0f;
  // [desc-add] Every descriptor below is one add to the low word of the block's first (desc_at in
  // wgmma_layout.hpp), from warp-uniform values alone, so that ptxas can keep it in a uniform register:
  // no mask, shift and move per product. kc: the offset of the consumer's 64 keys in K_j and V_j.
  const uint32_t lo0 = wgmma::desc_lo(sbase), kc = wgmma::kmajor_offset(64 * c, 0, Bc);
  // [no-producer] (--ablate producer) No producer warp: the consumers' first thread issues the loads
  // itself, the first St items' before its first wait, item t + St − 1's as item t begins (into item
  // t − 1's stage: it waits there, in line, for the other consumer's release). Issued instead at the
  // end of item t, ptxas serialized the d = 64 kernel's wgmmas (C7520: a warpgroup arrive it had to
  // insert in a divergent path); here it does not (tests/ptxas_serialization.py lists it).
  // (--ablate producer-last, d = 64) By turns, the consumer that computed item t − 1's dQ releases its
  // stage last: its first thread issues item t + St − 1's loads, so that its wait finds the other's
  // release already done.
  auto issues = [&](int t) {
    if (Issue == kByProducer || tid != 0) return false;
    return Issue == kByLastRelease && t > 0 ? dq_computes(Split, c, t - 1) : c == 0;
  };
  if (issues(0) && items > 0) {
    load_kv();
    for (int u = 0; u < St && u < items; ++u) load_item(u);
  }
  if (items > 0) mbar_wait(kv_full, 0);
  for (int t = 0; t < items; ++t) {
    const int st = t % St, h = head_of(t), i0 = row_of(t);
    if (t > 0 && t + St - 1 < items && issues(t)) load_item(t + St - 1);  // [no-producer]
    mbar_wait(full(st), full_parity(t, St));
    // [swapped] Sᵀ = K_c Q_iᵀ and dPᵀ = V_c dO_iᵀ (64 keys × Br queries each, both operands K-major),
    // one group each. [unswapped] S = Q_i K_cᵀ and dP = dO_i V_cᵀ: the same descriptors, A and B exchanged.
    float s[Br / 2], dp[Br / 2];
    // [desc-add] The low word read anew each item: the compiler forms each descriptor beside its
    // product instead of hoisting all forty out of the loop into registers (which spilled).
    const uint32_t lo = opaque(lo0);
    auto at = [&](uint32_t off) { return wgmma::desc_at(lo, off); };
    const uint32_t q_i = q_off(st), do_i = q_off(st) + kTileQ;
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      if constexpr (Sw) wgmma::mma_ss<T, Br>(s, at(kc + wgmma::kmajor_offset(0, kk, Bc)), at(q_i + wgmma::kmajor_offset(0, kk, Br)), kk > 0);
      else wgmma::mma_ss<T, Br>(s, at(q_i + wgmma::kmajor_offset(0, kk, Br)), at(kc + wgmma::kmajor_offset(0, kk, Bc)), kk > 0);
    wgmma::commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      if constexpr (Sw)
        wgmma::mma_ss<T, Br>(dp, at(kTileKV + kc + wgmma::kmajor_offset(0, kk, Bc)), at(do_i + wgmma::kmajor_offset(0, kk, Br)), kk > 0);
      else wgmma::mma_ss<T, Br>(dp, at(do_i + wgmma::kmajor_offset(0, kk, Br)), at(kTileKV + kc + wgmma::kmajor_offset(0, kk, Bc)), kk > 0);
    wgmma::commit();
    // [dropout] While the products run: bit r of `kept` is register r's keep. Call e of 16 queries np
    // is the 2 × 2 block of query i0 + 16np + 2tg + e and key 16w + g of the consumer's; its word
    // 2·nb + hr belongs to register 4(2np + nb) + 2hr + e (common/kernel/dropout.hpp, [dropout-block]).
    uint32_t kept = 0;
    if constexpr (Drop) {
      const int64_t bh = int64_t(b) * f.H + h;
      const int key = j0 + 64 * c + 16 * w + g;
#pragma unroll 1  // a pair of calls at a time: all eight unrolled spill more (ptxas -v)
      for (int np = 0; np < Br / 16; ++np)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const DropoutWords dw = dropout_words(f.dropout_seed, f.dropout_offset, bh, i0 + 16 * np + 2 * tg + e, key);
#pragma unroll
          for (int nb = 0; nb < 2; ++nb)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) kept |= uint32_t(dw.w[2 * nb + hr] >= keep_below) << (4 * (2 * np + nb) + 2 * hr + e);
        }
    }
    auto z_of = [&](int r) { return (kept >> r) & 1u ? z_kept : 0.0f; };
    // [overlap] Wait for Sᵀ alone: Pᵀ's exponentials run while dPᵀ is still multiplied, and dV's
    // product (which needs only Pᵀ) while dSᵀ is formed.
    if (OV) wgmma::wait<1>();
    else wgmma::wait<0>();
    // [dk-first] (--ablate dk-first) The same wait sees item t − 1's dK done: its stage is released here.
    if (!DkFirst && t > 0) mbar_arrive(empty((t - 1) % St));

    // [unswapped] The lane's two queries are its rows: their L·log2 e and D read once, y the row + 8.
    float2 l2r{}, ddr{};
    if constexpr (!Sw) {
      const uint32_t row = 4 * (16 * w + g);
      asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(l2r.x) : "r"(l2_at(st) + row));
      asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(l2r.y) : "r"(l2_at(st) + row + 32));
      asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(ddr.x) : "r"(dd_at(st) + row));
      asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(ddr.y) : "r"(dd_at(st) + row + 32));
    }
    if (!Sw && needs_mask(i0, i0 + Br, j0, f.N, f.Nk, Bc, f.causal, f.window)) {
      // [unswapped] Register r is query 16w + g + 8·((r % 4) / 2), key 8·(r / 4) + 2·tg + r % 2: the lane's
      // sixteen keys, each with the range of the tile's queries that see it, against its two queries.
#pragma unroll
      for (int n = 0; n < Br / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = j0 + 64 * c + 8 * n + 2 * tg + e;
          const int lo = first_row_seeing(key, f.N, f.Nk, f.causal) - i0, hi = end_row_seeing(key, f.N, f.Nk, f.causal, f.window) - i0;
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const int row = 16 * w + g + 8 * hr;
            if (row < lo || row >= hi) s[4 * n + 2 * hr + e] = -INFINITY;
          }
        }
    }
    // [bwd-softmax] Pᵀ = exp2(Sᵀ·scale·log2 e − L·log2 e): register r of the lane is key
    // 16w + g + 8·((r % 4) / 2) of the consumer's 64, query 8·(r / 4) + 2·tg + r % 2 of the tile.
    // lab:begin p-transposed {dQ dK dV}: [bwd-softmax]: per register of Sᵀ, its key and query, the mask, …
    if (Sw && needs_mask(i0, i0 + Br, j0, f.N, f.Nk, Bc, f.causal, f.window)) {
      // [causal-mask] [window] and the keys past Nk, on the tiles that need it alone ([mask-hoist]): the
      // lane's two keys, each with the range of the tile's queries that see it ([rows-seeing]).
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int key = j0 + 64 * c + 16 * w + g + 8 * hr;
        const int lo = first_row_seeing(key, f.N, f.Nk, f.causal) - i0, hi = end_row_seeing(key, f.N, f.Nk, f.causal, f.window) - i0;
#pragma unroll
        for (int n = 0; n < Br / 8; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = 8 * n + 2 * tg + e;
            if (col < lo || col >= hi) s[4 * n + 2 * hr + e] = -INFINITY;
          }
      }
    }
    // [mask-hoist] One straight run of exponentials for every tile: no branch between them.
#pragma unroll
    for (int n = 0; n < Br / 8; ++n) {
      float2 l2v = l2r;
      if constexpr (Sw) asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(l2v.x), "=f"(l2v.y) : "r"(l2_at(st) + 4 * (8 * n + 2 * tg)));
#pragma unroll
      for (int e = 0; e < 4; ++e) s[4 * n + e] = fast_exp2(fmaf(s[4 * n + e], sl2, -((Sw ? e % 2 : e / 2) ? l2v.y : l2v.x)));
    }
    // lab:end
    // [c-to-a] Pᵀ as the A operand of dV += Pᵀ dO_i (step 14's conversion: register quad kk holds
    // keys × queries 16kk .. 16kk + 15), rounded to the storage type once; B = dO_i MN-major.
    uint32_t pa[Br / 16][4], dsa[Br / 16][4];
#pragma unroll
    for (int kk = 0; kk < Br / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int at = 4 * (2 * kk + r / 2) + 2 * (r % 2);
        if constexpr (Drop) pa[kk][r] = pack2<T>(s[at] * z_of(at), s[at + 1] * z_of(at + 1));  // [dropout] Pᵀ∘Z
        else pa[kk][r] = pack2<T>(s[at], s[at + 1]);
      }
    // [unswapped] Register pair (n, hr) of P (or dS) is query 16w + g + 8hr, keys 8n + 2tg and + 1: one
    // 32-bit store into the consumer's [query][key] tile; then the warpgroup's stores are in and visible
    // to the tensor cores before a product reads them.
    auto store_qk = [&](uint32_t base, const uint32_t (&v)[Br / 16][4]) {
#pragma unroll
      for (int n = 0; n < Br / 8; ++n)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr)
          asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(base + wgmma::sw128_offset(16 * w + g + 8 * hr, 8 * n + 2 * tg, Br)),
                       "r"(v[n / 2][2 * (n % 2) + hr]));
      wgmma::fence_proxy_async();
      asm volatile("bar.sync %0, 128;\n" ::"r"(2 + c) : "memory");
      wgmma::fence();
    };
    if constexpr (!Sw) store_qk(sbase + p_off(c), pa);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < Br / 16; ++kk)
#pragma unroll
      for (int pn = 0; pn < kPanels; ++pn)
        if constexpr (Sw) wgmma::mma_rs<T, 64>(dv[pn], pa[kk], at(do_i + wgmma::mnmajor_offset(kk, pn, Br)), true);
        else  // [unswapped] A = Pᵀ from P's tile (queries × keys: MN-major), B = dO_i MN-major
          wgmma::mma_ss_mn<T, 64>(dv[pn], at(p_off(c) + wgmma::mnmajor_offset(kk, 0, Br)), at(do_i + wgmma::mnmajor_offset(kk, pn, Br)), true);
    wgmma::commit();
    if (OV) wgmma::wait<1>();  // dPᵀ is in; dV's product may still run
    else wgmma::wait<0>();
    // [bwd-softmax] dSᵀ = Pᵀ ∘ (dPᵀ − D), then [ds-smem] into buffer t % 2 (rows 64c .. 64c + 63 of the
    // Bc × Br tile, the same rounded values as dK's register operand).
    // lab:begin ds-transposed {dQ dK}: [bwd-softmax]: dSᵀ = Pᵀ ∘ (dPᵀ − D), D of the register's query …
#pragma unroll
    for (int n = 0; n < Br / 8; ++n) {
      float2 ddv = ddr;
      if constexpr (Sw) asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(ddv.x), "=f"(ddv.y) : "r"(dd_at(st) + 4 * (8 * n + 2 * tg)));
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float dpz = Drop ? dp[4 * n + e] * z_of(4 * n + e) : dp[4 * n + e];  // [dropout] dPᵀ∘Z
        // [tile-sizes] 128-query tiles: Pᵀ as rounded for dV's operand (s is not kept: registers).
        const float2 pr = unpack2<T>(pa[n / 2][2 * (n % 2) + e / 2]);
        const float pv = kDsFromRoundedP ? (e % 2 ? pr.y : pr.x) : s[4 * n + e];
        dp[4 * n + e] = pv * (dpz - ((Sw ? e % 2 : e / 2) ? ddv.y : ddv.x));
      }
    }
    // lab:end
#pragma unroll
    for (int kk = 0; kk < Br / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int at = 4 * (2 * kk + r / 2) + 2 * (r % 2);
        dsa[kk][r] = pack2<T>(dp[at], dp[at + 1]);
      }
    const uint32_t ds_s = ds0 + (t % 2) * kDs;
    // [ds-smem] transposed: the lane's addresses of its two keys at queries 2tg and 2tg + 1, formed once; query
    // 8n + 2tg + e is 1024n bytes (n core groups, wgmma::kGroupBytes) past them (the swizzle depends on the row mod 8 alone): constants ptxas can fold.
    uint32_t tr_at[2][2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
#pragma unroll
      for (int e = 0; e < 2; ++e) tr_at[hr][e] = ds_s + wgmma::sw128_offset(2 * tg + e, 64 * c + 16 * w + g + 8 * hr, Br);
#pragma unroll
    for (int n = 0; n < Br / 8; ++n)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int key = 64 * c + 16 * w + g + 8 * hr, q = 8 * n + 2 * tg;
        const uint32_t v = dsa[n / 2][2 * (n % 2) + hr];
        if constexpr (!Sw) {
          (void)key, (void)v;  // [unswapped] store_qk, below
        } else if constexpr (kTr) {  // [ds-smem] transposed: dS stored [query][key] (Br rows), one value a store
          asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(tr_at[hr][0] + wgmma::kGroupBytes * n), "h"(uint16_t(v & 0xffffu)));
          asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(tr_at[hr][1] + wgmma::kGroupBytes * n), "h"(uint16_t(v >> 16)));
        } else {
          asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(ds_s + wgmma::sw128_offset(key, q, Bc)), "r"(v));
        }
      }
    // [dq-centered] The lane's Σ over its two keys of queries 8n + 2tg and + 1, from the rounded values
    // dQ's product reads (register pair 2·(n % 2) + hr of quad n / 2); the warp's sum follows below.
    float rsum[Cent ? Br / 8 : 1][2];
    if constexpr (Cent) {
#pragma unroll
      for (int n = 0; n < Br / 8; ++n) {
        const float2 k0 = unpack2<T>(dsa[n / 2][2 * (n % 2)]), k1 = unpack2<T>(dsa[n / 2][2 * (n % 2) + 1]);
        rsum[n][0] = k0.x + k1.x, rsum[n][1] = k0.y + k1.y;
      }
    }
    // [c-to-a] dK += dSᵀ Q_i: A from registers, B = Q_i MN-major. [dk-first] Issued before the
    // consumers meet below, so that the barrier's wait runs under dK's product.
    auto issue_dk = [&] {
#pragma unroll
      for (int kk = 0; kk < Br / 16; ++kk)
#pragma unroll
        for (int pn = 0; pn < kPanels; ++pn)
          if constexpr (Sw) wgmma::mma_rs<T, 64>(dk[pn], dsa[kk], at(q_i + wgmma::mnmajor_offset(kk, pn, Br)), true);
          else  // [unswapped] A = dSᵀ from dS's tile, MN-major
            wgmma::mma_ss_mn<T, 64>(dk[pn], at(dsq_off(c) + wgmma::mnmajor_offset(kk, 0, Br)), at(q_i + wgmma::mnmajor_offset(kk, pn, Br)), true);
      wgmma::commit();
    };
    wgmma::fence();
    if constexpr (DkFirst && Sw) issue_dk();
    // [ds-smem] The dSᵀ rows dQ reads are in (and visible to the tensor cores): both consumers' by
    // columns and by turns (they meet here), the warpgroup's own by keys. [unswapped] dS's tile, which
    // dK reads: issued after.
    if constexpr (!Sw) {
      store_qk(sbase + dsq_off(c), dsa);
      issue_dk();
    } else {
      wgmma::fence_proxy_async();
      if (Split != kByKeys) asm volatile("bar.sync 1, 256;\n" ::: "memory");
      else asm volatile("bar.sync %0, 128;\n" ::"r"(2 + c) : "memory");
    }
    // [dq-wgmma] [dq-split] dQ_i's chunk = dS K_j: A = dS read from dSᵀ (keys × queries, MN-major),
    // B = K_j (keys × dims, MN-major): by columns, panel c over all Bc keys; by keys, the consumer's
    // 64 keys and every column (--ablate dq-keys; d = 64: one panel; d = 128: two chunks); by turns
    // (d = 64), the whole of d over all Bc keys, on the consumer's turns alone; by rows (--ablate
    // tiles), the 64 queries of dSᵀ's panel c, every column over all Bc keys; transposed (--ablate tiles at
    // d = 128), dQᵀ's rows 64c .. 64c + 63 over all Bc keys: A = K_j's panel c (MN-major), B = dS (K-major).
    float dq[kChunks][kDqRegs];
    const bool mine = dq_computes(Split, c, t);  // warpgroup-uniform
    if (mine) {
#pragma unroll
      for (int x = 0; x < (Split == kByKeys ? 64 : Bc) / 16; ++x) {
        const int kk = Split == kByKeys ? 4 * c + x : x;
#pragma unroll
        for (int ch = 0; ch < kChunks; ++ch)
          if constexpr (!Sw)  // [unswapped] A = dS from registers (quad x: the consumer's keys 16x .. 16x + 15)
            wgmma::mma_rs<T, 64>(dq[ch], dsa[x], at(wgmma::mnmajor_offset(kk, dq_b_panel(Split, c, ch), Bc)), x > 0);
          else if constexpr (kTr)
            wgmma::mma_ss_tn<T, Br>(dq[ch], at(wgmma::mnmajor_offset(kk, c, Bc)), at(ds_off + (t % 2) * kDs + wgmma::kmajor_offset(0, kk, Br)),
                                    x > 0);
          else
            wgmma::mma_ss_mn<T, 64>(dq[ch], at(ds_off + (t % 2) * kDs + wgmma::mnmajor_offset(kk, dq_a_panel(Split, c), Bc)),
                                    at(wgmma::mnmajor_offset(kk, dq_b_panel(Split, c, ch), Bc)), x > 0);
      }
      wgmma::commit();
    }
    if constexpr (Cent) {
      // [dq-centered] While the products run: the warp's 16 keys summed by halving exchanges over the
      // lane groups (xor 16, 8, 4: each keeps half of its queries and takes its partner's sums of them),
      // so that lane group g ends with queries 8g + 2tg and + 1, added into their row sums.
      float h4[4][2], h2[2][2], h1[2];
      const bool b2 = (g >> 2) & 1, b1 = (g >> 1) & 1, b0 = g & 1;
#pragma unroll
      for (int m = 0; m < 4; ++m)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          h4[m][e] = (b2 ? rsum[4 + m][e] : rsum[m][e]) + __shfl_xor_sync(0xffffffffu, b2 ? rsum[m][e] : rsum[4 + m][e], 16);
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          h2[m][e] = (b1 ? h4[2 + m][e] : h4[m][e]) + __shfl_xor_sync(0xffffffffu, b1 ? h4[m][e] : h4[2 + m][e], 8);
#pragma unroll
      for (int e = 0; e < 2; ++e) h1[e] = (b0 ? h2[1][e] : h2[0][e]) + __shfl_xor_sync(0xffffffffu, b0 ? h2[0][e] : h2[1][e], 4);
      float* rs = ws.rs + (int64_t(b) * f.H + h) * ws.Np + i0 + 8 * g + 2 * tg;
      (void)rs;  // used by the sm_90a code alone
      FA_SM90A_ONLY(asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(rs), "f"(h1[0]), "f"(h1[1]) : "memory"));
    }
    if constexpr (DkFirst) {
      wgmma::wait<0>();
      // [stage-release] Every product of the item has read Q_i and dO_i, and this thread its L and D.
      mbar_arrive(empty(st));
    } else {
      // [dk-first] FlashAttention-3's order instead: dK after dQ, dQ's chunk staged below while dK's
      // product runs (the barrier above then waits with only dV's product in flight).
      issue_dk();
      if (OV && mine) wgmma::wait<1>();
      else wgmma::wait<0>();
    }
    float* tile = ws.acc + ((int64_t(b) * f.H + h) * ws.Np + i0) * D;
#pragma unroll
    for (int ch = 0; ch < kChunks && mine; ++ch) {
      if constexpr (Bulk) {
        // [dq-writer] Stage the chunk ([dq-layout]) once the writer has read the buffer's last use out.
        const int buf = buf_of(t, ch);
        if (use_of(t) > 0) mbar_wait(dq_empty(c, buf), uint32_t(use_of(t) - 1) & 1u);
#pragma unroll
        for (int qd = 0; qd < kDqRegs / 4; ++qd)
          asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(chunk_at(c, buf) + 16 * (128 * qd + tid)), "f"(dq[ch][4 * qd]),
                       "f"(dq[ch][4 * qd + 1]), "f"(dq[ch][4 * qd + 2]), "f"(dq[ch][4 * qd + 3])
                       : "memory");
      } else {
        // [ablation] atomics: the same chunk added from registers, 16 bytes per reduction.
        float* dst = tile + dq_panel_of(Split, c, ch) * kChunkF;
        (void)dst;  // used by the sm_90a code alone
#pragma unroll
        for (int qd = 0; qd < kDqRegs / 4; ++qd)
          FA_SM90A_ONLY(asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst + 4 * (128 * qd + tid)), "f"(dq[ch][4 * qd]),
                                     "f"(dq[ch][4 * qd + 1]), "f"(dq[ch][4 * qd + 2]), "f"(dq[ch][4 * qd + 3])
                                     : "memory"));
      }
    }
    if (Bulk && mine) {
      wgmma::fence_proxy_async();  // the writer's bulk copy reads through the async proxy
#pragma unroll
      for (int ch = 0; ch < kChunks; ++ch) mbar_arrive(dq_full(c, buf_of(t, ch)));
    }
  }

  wgmma::wait<0>();  // [dk-first] the last item's dK (--ablate dk-first)
  // [dkv-out] dK (times the scale) and dV of the consumer's 64 keys, straight from the accumulators.
  T* dK = static_cast<T*>(p.dk) + b * f.k_sb + hkv * f.k_sh;
  T* dV = static_cast<T*>(p.dv) + b * f.v_sb + hkv * f.v_sh;
#pragma unroll
  for (int pn = 0; pn < kPanels; ++pn)
#pragma unroll
    for (int r = 0; r < 32; r += 2) {
      const int key = j0 + 64 * c + 16 * w + g + 8 * ((r % 4) / 2), col = 64 * pn + 8 * (r / 4) + 2 * tg;
      if (key >= f.Nk) continue;
      *reinterpret_cast<uint32_t*>(dK + int64_t(key) * f.k_sn + col) = pack2<T>(f.scale * dk[pn][r], f.scale * dk[pn][r + 1]);
      *reinterpret_cast<uint32_t*>(dV + int64_t(key) * f.v_sn + col) = pack2<T>(dv[pn][r], dv[pn][r + 1]);
    }
}

// [dq-convert] dQ = scale · accumulator, 8 elements per thread, 16-byte stores; the accumulator is
// read back through [dq-layout] (columns c, c + 1 are adjacent there).
// Transposed (Unit = 80, --ablate tiles at d = 128), columns c, c + 1 are 16 floats apart: read one by one.
template <class T, int D, int Unit = kChunk>
__global__ void step19_dq_convert(BwdParams p, int centered) {
  constexpr int Br = Unit;  // the accumulator's layout unit: 64 rows ([dq-layout]) whatever the Q tile, or 80 transposed
  const Ws ws(p, kRowPadOf<Unit>);
  const int64_t e8 = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, rows = int64_t(p.f.B) * p.f.H * p.f.N;
  if (e8 >= rows * (D / 8)) return;
  const int64_t row = e8 / (D / 8);
  const int c0 = int(e8 % (D / 8)) * 8, bh = int(row / p.f.N), i = int(row % p.f.N), b = bh / p.f.H, h = bh % p.f.H;
  const float* a = ws.acc + (int64_t(bh) * ws.Np + (i / Br) * Br) * D;  // the Q tile's accumulator
  float v[8];
#pragma unroll
  for (int x = 0; x < 8; x += 2) {
    if constexpr (Unit == kChunk) {
      const float2 two = *reinterpret_cast<const float2*>(a + acc_offset(i % Br, c0 + x));
      v[x] = two.x, v[x + 1] = two.y;
    } else {
      v[x] = a[acc_offset_t(i % Br, c0 + x, Br)], v[x + 1] = a[acc_offset_t(i % Br, c0 + x + 1, Br)];
    }
  }
  if (centered) {  // [dq-centered] c · (row sum) off: Σ dS (k − c)
    const float r = ws.rs[int64_t(bh) * ws.Np + i];
    const float* m = ws.km + (int64_t(b) * p.f.Hkv + h / (p.f.H / p.f.Hkv)) * D + c0;
#pragma unroll
    for (int x = 0; x < 8; ++x) v[x] = fmaf(-m[x], r, v[x]);
  }
  uint4 out;
  out.x = pack2<T>(p.f.scale * v[0], p.f.scale * v[1]);
  out.y = pack2<T>(p.f.scale * v[2], p.f.scale * v[3]);
  out.z = pack2<T>(p.f.scale * v[4], p.f.scale * v[5]);
  out.w = pack2<T>(p.f.scale * v[6], p.f.scale * v[7]);
  T* dQ = static_cast<T*>(p.dq) + b * p.f.q_sb + h * p.f.q_sh + int64_t(i) * p.f.q_sn + c0;
  *reinterpret_cast<uint4*>(dQ) = out;
}

namespace {

unsigned blocks_for(int64_t items, int per_block) { return unsigned((items + per_block - 1) / per_block); }

// [tensor-map] The driver's encoder, reached through the runtime (step 16's).
using EncodeFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                              const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                              CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeFn encoder() {
  static const EncodeFn fn = [] {
    void* fp = nullptr;
    cudaDriverEntryPointQueryResult r{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fp, 12000, cudaEnableDefault, &r));
    if (r != cudaDriverEntryPointSuccess || fp == nullptr)
      throw Unsupported("step19: the driver has no cuTensorMapEncodeTiled (CUDA 12 or later is needed for TMA)");
    return reinterpret_cast<EncodeFn>(fp);
  }();
  return fn;
}

// [tensor-map] A [B, H, rows, d] tensor of 16-bit values as a 4-d tensor map (step 16's), boxes of
// 64 columns × box_rows rows, the 128-byte swizzle, zeros outside.
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
    throw std::invalid_argument("step19: cuTensorMapEncodeTiled refused a tensor (error " + std::to_string(int(r)) +
                                "): strides must be multiples of 16 bytes, the base 16-byte aligned");
  return m;
}

template <class T, int D, bool Bulk, bool OV, int Split, bool DkFirst = true, bool Det = false, bool Cent = false, bool Drop = false,
          int Issue = kByProducer, bool Sw = true>
void launch_kv(const BwdParams& p, cudaStream_t st) {
  constexpr Schedule S = schedule_for(D, Split == kByRows || Split == kTransposed ? kTiles : kFull);
  const size_t smem = size_t(smem_bytes(S, D));
  static bool configured = false;  // per instantiation
  if (!configured) {
    int dev = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (size_t(optin) < smem)
      throw Unsupported("step19: " + std::to_string(smem) + " bytes of shared memory per block needed; this GPU allows " +
                        std::to_string(optin));
    cudaFuncAttributes fa{};
    CUDA_CHECK(cudaFuncGetAttributes(&fa, step19_bwd_kv<T, D, Bulk, OV, Split, DkFirst, Det, Cent, Drop, Issue, Sw>));
    if (fa.binaryVersion != 90)  // [sm90a]
      throw Unsupported("step19: this build has no sm_90a code for its kernel (it runs sm_" + std::to_string(fa.binaryVersion) +
                        "): configure with 90 in CMAKE_CUDA_ARCHITECTURES");
    CUDA_CHECK(cudaFuncSetAttribute(step19_bwd_kv<T, D, Bulk, OV, Split, DkFirst, Det, Cent, Drop, Issue, Sw>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    configured = true;
  }
  const AttnParams& f = p.f;
  const bool bf = std::is_same_v<T, __nv_bfloat16>;
  Maps maps;
  maps.q = encode_map(f.q, bf, D, f.N, f.H, f.B, f.q_sn, f.q_sh, f.q_sb, S.Br);
  maps.dout = encode_map(p.dout, bf, D, f.N, f.H, f.B, f.o_sn, f.o_sh, f.o_sb, S.Br);  // dO has O's strides
  maps.k = encode_map(f.k, bf, D, f.Nk, f.Hkv, f.B, f.k_sn, f.k_sh, f.k_sb, S.Bc);
  maps.v = encode_map(f.v, bf, D, f.Nk, f.Hkv, f.B, f.v_sn, f.v_sh, f.v_sb, S.Bc);
  const dim3 grid(unsigned(num_tiles(f.Nk, S.Bc)), unsigned(f.B * f.Hkv));  // [gqa] a block per key/value head
  step19_bwd_kv<T, D, Bulk, OV, Split, DkFirst, Det, Cent, Drop, Issue, Sw><<<grid, S.threads(), smem, st>>>(maps, p);
  CUDA_CHECK_LAUNCH("step19_bwd_kv");
}

// [ablation] The kernel as built for every type; each idea taken out alone for fp16 (refusal() says where).
template <class T, int D>
void launch_main(const BwdParams& p, int ablation, bool det, bool centered, cudaStream_t st) {
  constexpr int kSplit = default_split(D, schedule_for(D).consumers());  // [dq-split] the default
  if (p.f.dropout > 0.0f) {  // [dropout] the default kernel, with --deterministic or without
    if (centered || ablation != kFull) throw std::logic_error("step19: refusal() lets --dropout through with --dq centered or an ablation");
    if (det) return launch_kv<T, D, true, true, kSplit, true, true, false, true>(p, st);
    return launch_kv<T, D, true, true, kSplit, true, false, false, true>(p, st);
  }
  if (centered && ablation == kFull && !det) return launch_kv<T, D, true, true, kSplit, true, false, true>(p, st);
  if (centered) throw std::logic_error("step19: refusal() lets --dq centered through with an ablation or --deterministic");
  if (det && ablation == kFull) return launch_kv<T, D, true, true, kSplit, true, true>(p, st);
  if (det) throw std::logic_error("step19: refusal() lets an ablation through with --deterministic");
  if (ablation == kFull) return launch_kv<T, D, true, true, kSplit>(p, st);
  if constexpr (std::is_same_v<T, __half>) {
    if (ablation == kAtomics) return launch_kv<T, D, false, true, kSplit>(p, st);
    if (ablation == kNoOverlap) return launch_kv<T, D, true, false, kSplit>(p, st);
    if (ablation == kDkFirst) return launch_kv<T, D, true, true, kSplit, false>(p, st);
    if (ablation == kDqKeys) return launch_kv<T, D, true, true, kByKeys>(p, st);
    if (ablation == kNoProducer) return launch_kv<T, D, true, true, kSplit, true, false, false, false, kByConsumer0>(p, st);
    if constexpr (ablation_built(kNoProducerLast, D))
      if (ablation == kNoProducerLast) return launch_kv<T, D, true, true, kSplit, true, false, false, false, kByLastRelease>(p, st);
    if (ablation == kTiles) return launch_kv<T, D, true, true, split_of(D, kTiles)>(p, st);
    if (ablation == kSwapped) return launch_kv<T, D, true, true, kByKeys, true, false, false, false, kByProducer, false>(p, st);
  }
  throw std::logic_error("step19: an ablation refusal() lets through is not compiled");
}

// Unit: the rows of the accumulator's layout unit ([dq-layout]): 80 with --ablate tiles at d = 128, else 64.
template <class T, int D, int Unit>
void launch_typed(const BwdParams& p, int ablation, bool det, bool centered, cudaStream_t st) {
  const AttnParams& f = p.f;
  step19_bwd_pre<T, D, Unit><<<blocks_for(int64_t(f.B) * f.H * rows_padded(f.N, Unit) * (D / 8), 256), 256, 0, st>>>(p, det ? 1 : 0, centered ? 1 : 0);
  CUDA_CHECK_LAUNCH("step19_bwd_pre");
  if (centered) {  // [dq-centered]
    step19_key_mean<T, D><<<dim3(unsigned(num_tiles(f.Nk, kMeanKeys)), unsigned(f.B * f.Hkv)), 256, 0, st>>>(p);
    CUDA_CHECK_LAUNCH("step19_key_mean");
  }
  launch_main<T, D>(p, ablation, det, centered, st);
  step19_dq_convert<T, D, Unit><<<blocks_for(int64_t(f.B) * f.H * f.N * (D / 8), 256), 256, 0, st>>>(p, centered ? 1 : 0);
  CUDA_CHECK_LAUNCH("step19_dq_convert");
}

template <class T>
void launch_d(const BwdParams& p, int ablation, bool det, bool centered, cudaStream_t st) {
  constexpr int kTrUnit = acc_rows(schedule_for(128, kTiles));  // [dq-layout] the transposed accumulator's rows
  switch (p.f.d) {
    case 64: return launch_typed<T, 64, kChunk>(p, ablation, det, centered, st);
    case 128:
      if constexpr (std::is_same_v<T, __half>)  // [ablation] fp16 only
        if (ablation == kTiles) return launch_typed<T, 128, kTrUnit>(p, ablation, det, centered, st);
      return launch_typed<T, 128, kChunk>(p, ablation, det, centered, st);
    default: throw Unsupported("step19: head dimension " + std::to_string(p.f.d) + " is not compiled (64, 128: [stored-d])");
  }
}

}  // namespace

size_t backward_workspace_bytes(const Shape& s, const StepOptions& o) {
  const int a = ablation_of(o);
  const int unit = s.d == 64 || s.d == 128 ? acc_rows(schedule_for(int(s.d), a)) : kChunk;  // [dq-layout]
  return size_t(workspace_bytes(s.B * s.H, s.N, s.d, deterministic(o), dq_mode_of(o) == kDqCentered, s.B * s.hkv(), unit));
}

void launch_backward(const BwdParams& p0, const StepOptions& o, void* stream) {
  BwdParams p = p0;
  if (p.f.Hkv <= 0) p.f.Hkv = p.f.H;  // [gqa] unset: every query head its own key/value head
  if (p.f.H % p.f.Hkv != 0) throw std::invalid_argument("step19: H must be a multiple of Hkv");
  const AttnParams& f = p.f;
  auto aligned = [](const void* ptr, int64_t sb, int64_t sh, int64_t sn) {
    return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && sb % 8 == 0 && sh % 8 == 0 && sn % 8 == 0;
  };
  if (!aligned(f.q, f.q_sb, f.q_sh, f.q_sn) || !aligned(f.k, f.k_sb, f.k_sh, f.k_sn) || !aligned(f.v, f.v_sb, f.v_sh, f.v_sn) ||
      !aligned(p.dout, f.o_sb, f.o_sh, f.o_sn) || !aligned(p.dq, f.q_sb, f.q_sh, f.q_sn) ||
      !aligned(p.dk, f.k_sb, f.k_sh, f.k_sn) || !aligned(p.dv, f.v_sb, f.v_sh, f.v_sn))
    throw std::invalid_argument("step19: Q, K, V, dO and the gradients need 16-byte aligned pointers and strides that are multiples of 8");
  if (int64_t(f.B) * f.Hkv > 65535) throw std::invalid_argument("step19: B·Hkv must be at most 65535 (grid dimension)");
  if (p.workspace == nullptr) throw std::invalid_argument("step19: the backward needs its workspace");
  const std::string why = refusal(f.bf16, f.d, f.dropout > 0.0f, o);
  if (!why.empty()) throw Unsupported(why);
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const int ablation = ablation_of(o);
  const bool det = deterministic(o), centered = dq_mode_of(o) == kDqCentered;
  if (f.bf16) launch_d<__nv_bfloat16>(p, ablation, det, centered, st);
  else launch_d<__half>(p, ablation, det, centered, st);
}

}  // namespace fa::step19
