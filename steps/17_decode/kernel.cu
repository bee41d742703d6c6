// Step 17 — decoding: split-KV over a (paged) cache, the query heads of a group packed as one tile.
//
//   step17_split    grid (split, kv-head·chunk, sequence). A block takes the rows of one group
//                   ([gqa-pack]) and the keys of one split ([split-kv]); its four warps take row
//                   tiles × key slices of every K/V tile ([slices]), each an online softmax of its
//                   own (step 12's products: mma.sync, ldmatrix.x4 from XOR-swizzled tiles, a
//                   cp.async ring of kStages tiles), merged in shared memory at the end ([merge-warps]).
//                   Rows are read through the block table ([paged]); the rows of the new tokens come
//                   from K_new/V_new and are appended to the cache on the way ([append]). One split:
//                   O and L are written; several: a partial O and L in fp32 each.
//   step17_combine  one warp per query row: L = log Σ_s exp(L_s), O = Σ_s exp(L_s − L) O_s ([merge]).
//
// Layout of every fragment: common/kernel/mma_layout.hpp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernel/arch.cuh"  // FA_SM80_ONLY: mma.sync.m16n8k16, cp.async before sm_80 trap (the host refuses first)
#include "kernel/cuda_check.cuh"
#include "reference/decode.hpp"
#include "kernel/mma_layout.hpp"
#include "schedule.hpp"

namespace fa::step17 {

constexpr int kThreads = kWarps * 32;

// Everything a launch needs beyond AttnParams, most of it in the workspace (Workspace below).
struct DecodeArgs {
  AttnParams p;
  const int32_t* cache_lens = nullptr;  // [B] (decode shapes), else null: every sequence has Nk keys
  const void* k_new = nullptr;          // [B, HKV, N, d]: the new tokens' K and V (decode shapes)
  const void* v_new = nullptr;
  void* k_cache = nullptr;              // the cache: K and V inputs (contiguous) or the pool (paged)
  void* v_cache = nullptr;
  CacheLayout kl, vl;
  float* part_o = nullptr;              // [B·H·N][splits][d]  (splits > 1)
  float* part_l = nullptr;              // [B·H·N][splits]
  int* counters = nullptr;              // [B·HKV·chunks]: blocks done per group ([fused-combine])
  int splits = 1, chunks = 1;
  Combine combine = Combine::fused;     // --combine: who merges the splits
};

template <class T> __device__ inline uint32_t pack2(float lo, float hi);
template <> __device__ inline uint32_t pack2<__half>(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
template <> __device__ inline uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

template <class T> __device__ inline T from_float(float x);
template <> __device__ inline __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// [mma] D = A·B + D for one 16 × 8 × 16 tile: 4 A registers, 2 B registers, 4 fp32 accumulators.
template <class T> __device__ inline void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <> __device__ inline void mma16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  FA_SM80_ONLY(asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1)));
}
template <> __device__ inline void mma16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  FA_SM80_ONLY(asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1)));
}

__device__ inline float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

template <int D>
constexpr int kMask = (D / 8 < 8 ? D / 8 : 8) - 1;

__device__ inline void cp_async16(uint32_t dst, const void* src, bool inside) {
  FA_SM80_ONLY(asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(inside ? 16 : 0)));
}
__device__ inline void cp_async_commit() { FA_SM80_ONLY(asm volatile("cp.async.commit_group;\n" ::)); }
template <int N>
__device__ inline void cp_async_wait() { FA_SM80_ONLY(asm volatile("cp.async.wait_group %0;\n" ::"n"(N))); }

__device__ inline void ldmatrix_x4(uint32_t (&r)[4], uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// [paged] [append] Start copying keys [j0, j0 + kBc) ∩ [j0, end) of the K and V tiles into shared
// memory, 16 bytes per cp.async to the swizzled place: a cached key from the cache (through the
// block table), a new token's from K_new/V_new — which this thread also stores into the cache, so
// the next call finds it there. Keys past `end` are zero-filled by the copy (source size 0).
// [fast-path] A tile of cached keys only, inside the split (all but a split's last tile and the
// new tokens'): no per-row tests; the contiguous cache steps a pointer, the paged one looks up
// each row's page once for K and V together.
template <class T, int D>
__device__ inline void load_kv_tile(uint32_t ktile, uint32_t vtile, const DecodeArgs& a, int b, int kv, int64_t j0, int64_t end,
                                    int64_t new0) {
  constexpr int kChunks = D / 8, kRowsPerPass = kThreads / kChunks;
  static_assert(kThreads % kChunks == 0 && kBc % kRowsPerPass == 0 && kRowsPerPass % 8 == 0, "whole passes");
  const int r = threadIdx.x / kChunks, cc = threadIdx.x % kChunks;
  const uint32_t sw = r * (D * 2) + 16 * (cc ^ (r & kMask<D>));
  T* Kc = static_cast<T*>(a.k_cache);
  T* Vc = static_cast<T*>(a.v_cache);
  const CacheLayout &kl = a.kl, &vl = a.vl;
  if (j0 + kBc <= end && j0 + kBc <= new0) {
    if (!kl.block_table) {
      const T* ks = Kc + b * kl.s_page + kv * kl.s_head + (j0 + r) * kl.s_row + 8 * cc;
      const T* vs = Vc + b * vl.s_page + kv * vl.s_head + (j0 + r) * vl.s_row + 8 * cc;
#pragma unroll
      for (int i = 0; i < kBc / kRowsPerPass; ++i) {
        cp_async16(ktile + sw + i * kRowsPerPass * D * 2, ks + i * kRowsPerPass * kl.s_row, true);
        cp_async16(vtile + sw + i * kRowsPerPass * D * 2, vs + i * kRowsPerPass * vl.s_row, true);
      }
    } else {
      const int32_t* table = kl.block_table + int64_t(b) * kl.pages_per_seq;
      const int64_t slot_mask = (int64_t(1) << kl.log2_page) - 1;
#pragma unroll
      for (int i = 0; i < kBc / kRowsPerPass; ++i) {
        const int64_t t = j0 + r + i * kRowsPerPass;
        const int64_t off = int64_t(table[t >> kl.log2_page]) * kl.s_page + (t & slot_mask) * kl.s_row + kv * kl.s_head + 8 * cc;
        cp_async16(ktile + sw + i * kRowsPerPass * D * 2, Kc + off, true);
        cp_async16(vtile + sw + i * kRowsPerPass * D * 2, Vc + off, true);  // the pool: V's layout is K's
      }
    }
    return;
  }
  const T* k_new = static_cast<const T*>(a.k_new);
  const T* v_new = static_cast<const T*>(a.v_new);
#pragma unroll
  for (int i = 0; i < kBc / kRowsPerPass; ++i) {
    const int64_t t = j0 + r + i * kRowsPerPass;
    const bool inside = t < end;
    const T *kfrom = Kc, *vfrom = Vc;  // valid addresses even when nothing is read
    if (inside) {
      T* kat = Kc + kl.offset(b, kv, t) + 8 * cc;
      T* vat = Vc + vl.offset(b, kv, t) + 8 * cc;
      if (t >= new0) {  // [append] a new token: read from K_new/V_new, written into the cache
        const int64_t row = ((int64_t(b) * a.p.Hkv + kv) * a.p.N + (t - new0)) * D + 8 * cc;
        kfrom = k_new + row;
        vfrom = v_new + row;
        *reinterpret_cast<uint4*>(kat) = *reinterpret_cast<const uint4*>(kfrom);
        *reinterpret_cast<uint4*>(vat) = *reinterpret_cast<const uint4*>(vfrom);
      } else {
        kfrom = kat;
        vfrom = vat;
      }
    }
    cp_async16(ktile + sw + i * kRowsPerPass * D * 2, kfrom, inside);
    cp_async16(vtile + sw + i * kRowsPerPass * D * 2, vfrom, inside);
  }
}

// [gqa-pack] Rows [r0, r0 + kRowsPerBlock) of the group's tile: row r is query head kv·G + r / N,
// token r % N; rows past `rows` are zero-filled.
template <class T, int D>
__device__ inline void load_q_rows(uint32_t tile, const AttnParams& p, int b, int kv, int r0, int rows) {
  constexpr int kChunks = D / 8, kRowsPerPass = kThreads / kChunks;
  static_assert(kRowsPerBlock % kRowsPerPass == 0, "whole passes");
  const int r = threadIdx.x / kChunks, cc = threadIdx.x % kChunks, G = p.H / p.Hkv;
  const uint32_t dst = tile + r * (D * 2) + 16 * (cc ^ (r & kMask<D>));
  const T* Q = static_cast<const T*>(p.q);
#pragma unroll
  for (int i = 0; i < kRowsPerBlock / kRowsPerPass; ++i) {
    const int row = r0 + r + i * kRowsPerPass;
    const bool inside = row < r0 + rows;
    const T* from = inside ? Q + int64_t(b) * p.q_sb + int64_t(kv * G + row / p.N) * p.q_sh + int64_t(row % p.N) * p.q_sn + 8 * cc : Q;
    cp_async16(dst + i * kRowsPerPass * D * 2, from, inside);
  }
}

template <class T, int D>
__device__ inline void merge_row(const DecodeArgs& a, int64_t q_row, int lane);

// SL key slices per tile (4, 2 or 1: key_slices()), RT = kWarps / SL row tiles.
template <class T, int D, int SL>
__global__ void __launch_bounds__(kThreads, 2) step17_split(DecodeArgs a) {
  constexpr int RT = kWarps / SL, KW = kBc / SL;  // [slices] row tiles; keys per slice
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  if (sbase % 1024 != 0) __trap();
  constexpr uint32_t kRow = D * 2, kTile = kBc * kRow;
  auto k_at = [&](int st) { return sbase + 2 * st * kTile; };
  const uint32_t q_at = k_at(kStages - 1);  // [q-alias]
  auto v_at = [&](int st) { return k_at(st) + kTile; };
  const AttnParams& p = a.p;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (a.combine == Combine::pdl) asm volatile("griddepcontrol.launch_dependents;\n");  // [pdl] the combine may start
#endif
  const int split = blockIdx.x, kv = blockIdx.y / a.chunks, chunk = blockIdx.y % a.chunks, b = blockIdx.z;
  const int G = p.H / p.Hkv, M = G * p.N, r0 = chunk * kRowsPerBlock, rows = min(kRowsPerBlock, M - r0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, rt = warp % RT, ks = warp / RT;
  // [cache-lens] This sequence's keys, and where its new tokens start.
  const int64_t keys_b = a.cache_lens ? int64_t(a.cache_lens[b]) + p.N : p.Nk, new0 = a.cache_lens ? keys_b - p.N : keys_b;
  int64_t qi0 = 0, qi1 = 0;
  chunk_queries(r0, r0 + rows, p.N, qi0, qi1);
  KeyRange range;  // empty until set
  // lab:begin split-range {O L}: [split-kv]: this block's keys: the chunk's visible range, then a split …
  range = split_range(chunk_keys(keys_b, p.N, qi0, qi1, p.causal, p.window), a.splits, split);
  // lab:end
  const int Tn = int(num_tiles(range.hi - range.lo, kBc));
  // [pipeline] Q with tile 0, then tile 1: kStages − 1 tiles ahead.
  if (Tn > 0) {
    load_q_rows<T, D>(q_at, p, b, kv, r0, rows);
    load_kv_tile<T, D>(k_at(0), v_at(0), a, b, kv, range.lo, range.hi, new0);
  }
  cp_async_commit();
  if (Tn > 1) load_kv_tile<T, D>(k_at(1), v_at(1), a, b, kv, range.lo + kBc, range.hi, new0);
  cp_async_commit();

  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const float sl2 = p.scale * kLog2e;
  const int lr = lane % 8, lb = lane / 8;
  const uint32_t q_lane = q_at + (16 * rt + 8 * (lb % 2) + lr) * kRow + 16 * (((lb / 2) ^ lr) & kMask<D>);
  const uint32_t k_lane = (KW * ks + 8 * (lb / 2) + lr) * kRow + 16 * (((lb % 2) ^ lr) & kMask<D>);
  const uint32_t v_lane = (KW * ks + 8 * (lb % 2) + lr) * kRow + 16 * (((lb / 2) ^ lr) & kMask<D>);
  uint32_t qa[D / 16][4];  // the warp's 16 rows of Q, as A fragments, kept for the whole split

  for (int j = 0; j < Tn; ++j) {
    const int64_t j0 = range.lo + int64_t(j) * kBc;
    const int st = j % kStages;
    // [pipeline] A decode block does little but wait for HBM, so its copies start as early as they
    // can: tile j + 2 goes into the stage the barrier at the end of step j − 1 freed before tile j
    // is waited for — three tiles in flight. Then tile j has landed (this thread's copies: at most
    // the groups of j + 1 and j + 2 still pending; everyone's: the barrier).
    if (j == 0) {
      // [q-alias] Q (with tile 0) has landed; every warp takes its rows into registers, and only
      // then does tile 2 go into the stage that held them.
      cp_async_wait<1>();
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(qa[kk], q_lane ^ (32 * kk));
      __syncthreads();
      if (2 < Tn) load_kv_tile<T, D>(k_at(2 % kStages), v_at(2 % kStages), a, b, kv, j0 + 2 * kBc, range.hi, new0);
      cp_async_commit();
    } else {
      if (j + 2 < Tn) load_kv_tile<T, D>(k_at((j + 2) % kStages), v_at((j + 2) % kStages), a, b, kv, j0 + 2 * kBc, range.hi, new0);
      cp_async_commit();
      cp_async_wait<2>();
      __syncthreads();
    }

    // [slices] S = Q K_sliceᵀ: the warp's 16 rows against its KW keys of the tile.
    const uint32_t k_addr = k_at(st) + k_lane, v_addr = v_at(st) + v_lane;
    float s[KW / 8][4];
#pragma unroll
    for (int n = 0; n < KW / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
      for (int np = 0; np < KW / 16; ++np) {
        uint32_t kb[4];
        ldmatrix_x4(kb, (k_addr + 16 * np * kRow) ^ (32 * kk));
        mma16816<T>(s[2 * np], qa[kk], kb[0], kb[1]);
        mma16816<T>(s[2 * np + 1], qa[kk], kb[2], kb[3]);
      }

    // [window] [cache-lens] Keys a row does not see get −inf, on the tiles that need it.
    if (tile_needs_mask(j0, range.hi, keys_b, p.N, qi0, qi1, p.causal, p.window)) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int row = r0 + 16 * rt + m16n8k16::group(lane) + 8 * hr;
        const int i = row % p.N;
#pragma unroll
        for (int n = 0; n < KW / 8; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int64_t key = j0 + KW * ks + 8 * n + m16n8k16::c_elem(lane, 2 * hr + e).col;
            if (key >= range.hi || !visible(i, key, keys_b, p.N, p.causal, p.window)) s[n][2 * hr + e] = -INFINITY;
          }
      }
    }

    // [softmax-regs] The online softmax of the warp's slice (step 12's, on one m16 tile).
    // [rescale-skip] Õ *= alpha only when some row's max moved: deep into a long cache the max has
    // settled, alpha = 1 for every row of the warp, and the D/2 multiplies per lane are skipped.
    bool moved = false;
    float alpha[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < KW / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * hr], s[n][2 * hr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[hr], mx * sl2);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // [rescale-guard]
      alpha[hr] = fast_exp2(m[hr] - m_use);
      moved = moved || m_new != m[hr];
      m[hr] = m_new;
      float rs = 0.0f;
#pragma unroll
      for (int n = 0; n < KW / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pv = fast_exp2(fmaf(s[n][2 * hr + e], sl2, -m_use));
          s[n][2 * hr + e] = pv;
          rs += pv;
        }
      l[hr] = l[hr] * alpha[hr] + rs;
    }
    if (__any_sync(0xffffffffu, moved))
#pragma unroll
      for (int n = 0; n < D / 8; ++n) o[n][0] *= alpha[0], o[n][1] *= alpha[0], o[n][2] *= alpha[1], o[n][3] *= alpha[1];

    // [pv] Õ += P V_slice: P's C tiles as A fragments ([c-to-a]), V by ldmatrix.x4.trans.
#pragma unroll
    for (int kk = 0; kk < KW / 16; ++kk) {
      uint32_t pa[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) pa[r] = pack2<T>(s[2 * kk + r / 2][2 * (r % 2)], s[2 * kk + r / 2][2 * (r % 2) + 1]);
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, (v_addr + 16 * kk * kRow) ^ (32 * np));
        mma16816<T>(o[2 * np], pa, vb[0], vb[1]);
        mma16816<T>(o[2 * np + 1], pa, vb[2], vb[3]);
      }
    }
    __syncthreads();  // every warp is done with tile j's stage: the next step refills it
  }
  cp_async_wait<0>();

#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 1);
    l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 2);
  }
  // [merge-warps] The key slices of a row tile are partial softmaxes of their own: slices 1.. put
  // (m, l, Õ) in shared memory, fragment by fragment (the K/V stages are free now), and slice 0
  // rescales each by 2^(m_s − m) into its own — the merge below, within a block.
  if constexpr (SL > 1) {
    if (Tn == 0) __syncthreads();  // (else the loop's last barrier): no warp still reads the stages
    float* scratch = reinterpret_cast<float*>(smem_raw);  // the stages are free
    constexpr int kPer = (D / 8) * 32 * 4 + 4 * 32;  // one warp's Õ fragments, then m and l: two per lane each
    float* mine = scratch + warp * kPer;
    if (ks > 0) {
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<float4*>(mine + (n * 32 + lane) * 4) = make_float4(o[n][0], o[n][1], o[n][2], o[n][3]);
      mine[(D / 8) * 128 + 2 * lane] = m[0], mine[(D / 8) * 128 + 2 * lane + 1] = m[1];
      mine[(D / 8) * 128 + 64 + 2 * lane] = l[0], mine[(D / 8) * 128 + 64 + 2 * lane + 1] = l[1];
    }
    __syncthreads();
    if (ks == 0)
#pragma unroll
    for (int x = 1; x < SL; ++x) {
      const float* other = scratch + (rt + x * RT) * kPer;
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const float mo = other[(D / 8) * 128 + 2 * lane + hr], lo = other[(D / 8) * 128 + 64 + 2 * lane + hr];
        const float mn = fmaxf(m[hr], mo), mu = mn == -INFINITY ? 0.0f : mn;
        const float as = fast_exp2(m[hr] - mu), ao = fast_exp2(mo - mu);
        l[hr] = l[hr] * as + lo * ao;
        m[hr] = mn;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
          const float4 v = *reinterpret_cast<const float4*>(other + (n * 32 + lane) * 4);
          const float v0 = hr ? v.z : v.x, v1 = hr ? v.w : v.y;
          o[n][2 * hr] = o[n][2 * hr] * as + v0 * ao;
          o[n][2 * hr + 1] = o[n][2 * hr + 1] * as + v1 * ao;
        }
      }
    }
  }

  // [final-divide] O = Õ / l and L = (m + log2 l)·ln 2 of this split's keys: the answer with one
  // split, else a partial (L = −inf where the split saw none of the row's keys).
  const bool whole = a.splits == 1;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = 16 * rt + m16n8k16::group(lane) + 8 * hr;
    if (row >= rows || ks > 0) continue;  // slices 1.. merged into slice 0 above
    const int hq = kv * G + (r0 + row) / p.N, i = (r0 + row) % p.N;
    const float inv = l[hr] > 0.0f ? 1.0f / l[hr] : 0.0f;
    const float L = l[hr] > 0.0f ? (m[hr] + log2f(l[hr])) * kLn2 : (whole ? INFINITY : -INFINITY);
    const int64_t q_row = (int64_t(b) * p.H + hq) * p.N + i;
    if (whole) {
      T* O = static_cast<T*>(p.o) + int64_t(b) * p.o_sb + int64_t(hq) * p.o_sh + int64_t(i) * p.o_sn;
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<uint32_t*>(O + 8 * n + 2 * m16n8k16::thread_in_group(lane)) =
            pack2<T>(o[n][2 * hr] * inv, o[n][2 * hr + 1] * inv);
      if (m16n8k16::thread_in_group(lane) == 0) p.lse[int64_t(b) * p.lse_sb + int64_t(hq) * p.lse_sh + i] = L;
    } else {
      float* Op = a.part_o + (q_row * a.splits + split) * D;
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<float2*>(Op + 8 * n + 2 * m16n8k16::thread_in_group(lane)) = make_float2(o[n][2 * hr] * inv, o[n][2 * hr + 1] * inv);
      if (m16n8k16::thread_in_group(lane) == 0) a.part_l[q_row * a.splits + split] = L;
    }
  }
  // [fused-combine] The last block of a group to finish merges the group's rows (the classic
  // "threadfence reduction"): once the block's partials are written (the barrier), one thread fences
  // them — a release at GPU scope, which covers what the barrier ordered before it, as a grid-wide
  // barrier does — and counts the block in; the block that counts splits − 1 fences again (acquire)
  // and sees every other block's partials. No second launch, no gap.
  if (whole || a.combine != Combine::fused) return;
  __shared__ int last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    int* counter = a.counters + (int64_t(b) * p.Hkv + kv) * a.chunks + chunk;
    last = atomicAdd(counter, 1) == a.splits - 1;
    if (last) {
      *counter = 0;  // every block has counted: ready for the next call
      __threadfence();
    }
  }
  __syncthreads();
  if (!last) return;
  for (int row = warp; row < rows; row += kWarps)
    merge_row<T, D>(a, (int64_t(b) * p.H + kv * G + (r0 + row) / p.N) * p.N + (r0 + row) % p.N, lane);
}

// [merge] One warp per query row, each lane its own kPer columns of O: the splits' (L_s, O_s) are read
// kMergeBatch at a time, every load of a batch issued before any is used (one round trip to L2 per
// batch, not one per split), and merged online, as the softmax merges tiles: the running m, the
// sum l = Σ exp(L_s − m) and acc = Σ exp(L_s − m)·O_s, rescaled once per batch when m grows. Then
// L = m + log l and O = acc / l. A split that saw no key (L_s = −inf) weighs 0; a row whose splits all
// saw none: O = 0, L = +inf. The partials were written by other blocks: read past L1 (ld.global.cg).
template <int kPer>
__device__ inline void load_cols(float (&v)[kPer], const float* at) {
  if constexpr (kPer == 4) {
    const float4 x = __ldcg(reinterpret_cast<const float4*>(at));
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
  } else if constexpr (kPer == 2) {
    const float2 x = __ldcg(reinterpret_cast<const float2*>(at));
    v[0] = x.x, v[1] = x.y;
  } else {
    v[0] = __ldcg(at);
  }
}

template <class T, int D>
__device__ inline void merge_row(const DecodeArgs& a, int64_t q_row, int lane) {
  const AttnParams& p = a.p;
  const int S = a.splits;
  constexpr int kPer = D >= 128 ? 4 : D >= 64 ? 2 : 1;  // lane's columns: kPer·lane .. + kPer − 1
  const bool mine = kPer * lane < D;                      // (d = 16: lanes 16.. hold no column)
  const float* Ls = a.part_l + q_row * S;
  const float* Os = a.part_o + q_row * S * D + kPer * lane;
  float L = 0.0f, acc[kPer] = {};  // the row's L and this lane's columns of O
  // lab:begin combine {O L}: [merge]: the splits kMergeBatch at a time, merged online; then L, O …
  float m = -INFINITY, l = 0.0f;
  for (int s0 = 0; s0 < S; s0 += kMergeBatch) {
    float Lb[kMergeBatch], Ob[kMergeBatch][kPer];
#pragma unroll
    for (int x = 0; x < kMergeBatch; ++x) {  // the whole batch's loads first
      const bool in = s0 + x < S;
      Lb[x] = in ? __ldcg(Ls + s0 + x) : -INFINITY;
#pragma unroll
      for (int e = 0; e < kPer; ++e) Ob[x][e] = 0.0f;
      if (in && mine) load_cols<kPer>(Ob[x], Os + int64_t(s0 + x) * D);
    }
    float mb = m;
#pragma unroll
    for (int x = 0; x < kMergeBatch; ++x) mb = fmaxf(mb, Lb[x]);
    if (mb == -INFINITY) continue;  // no split so far saw a key
    const float scale = expf(m - mb);  // 0 while m = −inf
    l *= scale;
#pragma unroll
    for (int e = 0; e < kPer; ++e) acc[e] *= scale;
#pragma unroll
    for (int x = 0; x < kMergeBatch; ++x) {
      const float w = expf(Lb[x] - mb);  // 0 for a split that saw none, or past S
      l += w;
#pragma unroll
      for (int e = 0; e < kPer; ++e) acc[e] += w * Ob[x][e];
    }
    m = mb;
  }
  L = m == -INFINITY ? INFINITY : m + logf(l);
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int e = 0; e < kPer; ++e) acc[e] *= inv;
  // lab:end
  const int64_t b = q_row / (int64_t(p.H) * p.N), h = (q_row / p.N) % p.H, i = q_row % p.N;
  T* O = static_cast<T*>(p.o) + b * p.o_sb + h * p.o_sh + i * p.o_sn;
  if (mine)
#pragma unroll
    for (int e = 0; e < kPer; ++e) O[kPer * lane + e] = from_float<T>(acc[e]);
  if (lane == 0) p.lse[b * p.lse_sb + h * p.lse_sh + i] = L;
}

// --combine kernel: the merge as a kernel of its own, one warp per query row, after the splits.
// [pdl] --combine pdl: the same kernel launched as a programmatic dependent of the split kernel,
// which lets it start at once (its blocks take SM room the splits leave free); griddepcontrol.wait
// then holds each block until the split kernel has finished and its writes are visible.
template <class T, int D>
__global__ void __launch_bounds__(128) step17_combine(DecodeArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (a.combine == Combine::pdl) asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  const int64_t q_row = int64_t(blockIdx.x) * 4 + threadIdx.x / 32;
  if (q_row >= int64_t(a.p.B) * a.p.H * a.p.N) return;
  merge_row<T, D>(a, q_row, threadIdx.x % 32);
}

namespace {

template <class T, int D, int SL>
void configure(size_t smem) {
  static bool done = false;
  if (done) return;
  CUDA_CHECK(cudaFuncSetAttribute(step17_split<T, D, SL>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  // All of the SM's unified L1/shared memory as shared memory: two blocks' stages fit only so.
  CUDA_CHECK(cudaFuncSetAttribute(step17_split<T, D, SL>, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  done = true;
}

// [plan] What the launcher needs of the device, asked once per device and kept: a decode step is
// many short calls, and each attribute query is host time on every one of them.
struct DeviceFacts {
  int sms = 0, smem_per_sm = 0, cc = 0;
};
const DeviceFacts& device_facts() {
  constexpr int kMaxDevices = 64;
  static DeviceFacts facts[kMaxDevices];
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= kMaxDevices) throw std::runtime_error("step17: device index out of range");
  DeviceFacts& f = facts[dev];
  if (f.sms == 0) {
    int major = 0, minor = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&f.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    f.cc = 10 * major + minor;
    CUDA_CHECK(cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, dev));  // last: sms != 0 marks it filled
  }
  return f;
}
int64_t device_sms() { return device_facts().sms; }
// Blocks of the split kernel resident per SM, by its shared memory (registers allow two).
int64_t device_blocks_per_sm(int64_t d) {
  return std::max<int64_t>(1, std::min<int64_t>(2, device_facts().smem_per_sm / (smem_bytes(int(d)) + 1024)));
}
int64_t splits_for(const AttnParams& p, const StepOptions& o) {
  return choose_splits(p.B, p.H, p.Hkv, p.N, p.Nk, p.window, o, device_sms(), device_blocks_per_sm(p.d));
}

template <class T, int D>
void launch_typed(const DecodeArgs& a, cudaStream_t st) {
  const size_t smem = size_t(smem_bytes(D));
  const int rows = int(std::min<int64_t>(kRowsPerBlock, group_rows(a.p.H, a.p.Hkv, a.p.N)));
  const dim3 grid(unsigned(a.splits), unsigned(a.p.Hkv * a.chunks), unsigned(a.p.B));
  switch (key_slices(rows)) {
    case 4: configure<T, D, 4>(smem); step17_split<T, D, 4><<<grid, kThreads, smem, st>>>(a); break;
    case 2: configure<T, D, 2>(smem); step17_split<T, D, 2><<<grid, kThreads, smem, st>>>(a); break;
    default: configure<T, D, 1>(smem); step17_split<T, D, 1><<<grid, kThreads, smem, st>>>(a); break;
  }
  CUDA_CHECK_LAUNCH("step17_split");
  if (a.splits > 1 && a.combine != Combine::fused) {
    const int64_t qrows = int64_t(a.p.B) * a.p.H * a.p.N;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(unsigned((qrows + 3) / 4));
    cfg.blockDim = dim3(128);
    cfg.stream = st;
    cudaLaunchAttribute pdl[1];
    pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;  // [pdl]
    pdl[0].val.programmaticStreamSerializationAllowed = 1;
    if (a.combine == Combine::pdl) cfg.attrs = pdl, cfg.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, step17_combine<T, D>, a));
  }
}

template <class T>
void dispatch_d(const DecodeArgs& a, cudaStream_t st) {
  switch (a.p.d) {
    case 16: return launch_typed<T, 16>(a, st);
    case 32: return launch_typed<T, 32>(a, st);
    case 64: return launch_typed<T, 64>(a, st);
    case 128: return launch_typed<T, 128>(a, st);
    default: throw std::invalid_argument("step17: no kernel for d = " + std::to_string(a.p.d));
  }
}

int log2_of(int x) {
  int k = 0;
  while ((1 << k) < x) ++k;
  return k;
}

DecodeArgs make_args(const AttnParams& p, const StepOptions& opts) {
  const int page = page_size_of(opts);
  const int64_t splits = splits_for(p, opts);
  const Workspace w = workspace_of(p.B, p.H, p.Hkv, p.N, p.Nk, p.d, p.decode, page, splits);
  unsigned char* ws = static_cast<unsigned char*>(p.workspace);
  if (w.total > 0 && !ws) throw std::logic_error("step17: no workspace");
  DecodeArgs a;
  a.p = p;
  a.splits = int(splits);
  a.chunks = int(row_chunks(p.H, p.Hkv, p.N));
  if (p.decode) {
    a.cache_lens = reinterpret_cast<const int32_t*>(ws + w.cache_lens);
    a.k_new = ws + w.k_new;
    a.v_new = ws + w.v_new;
  }
  if (page > 0) {
    a.k_cache = ws + w.k_pool;
    a.v_cache = ws + w.v_pool;
    CacheLayout c;
    c.block_table = reinterpret_cast<const int32_t*>(ws + w.table);
    c.pages_per_seq = int(w.pages_per_seq);
    c.log2_page = log2_of(page);
    c.s_page = int64_t(page) * p.Hkv * p.d;
    c.s_row = int64_t(p.Hkv) * p.d;
    c.s_head = p.d;
    a.kl = a.vl = c;
  } else {
    a.k_cache = const_cast<void*>(p.k);  // [append] the cache is the K/V inputs: the call appends into it
    a.v_cache = const_cast<void*>(p.v);
    a.kl.s_page = p.k_sb, a.kl.s_row = p.k_sn, a.kl.s_head = p.k_sh;
    a.vl.s_page = p.v_sb, a.vl.s_row = p.v_sn, a.vl.s_head = p.v_sh;
  }
  if (splits > 1) {
    a.part_o = reinterpret_cast<float*>(ws + w.part_o);
    a.part_l = reinterpret_cast<float*>(ws + w.part_l);
    a.counters = reinterpret_cast<int*>(ws + w.counters);
  }
  a.combine = combine_of(opts);
  return a;
}

// A copy kernel for prepare(): rows [0, n_b) of each (b, kv) head of a [B, HKV, Nk, d] tensor into
// the pool through the block table (16 bytes per thread).
template <int D>
__global__ void step17_fill_pool(const uint16_t* src, int64_t sb, int64_t sh, int64_t sn, uint16_t* pool, CacheLayout cl,
                                 const int32_t* lens, int64_t Nk, int B, int Hkv, int64_t Nnew) {
  const int64_t total = int64_t(B) * Hkv * Nk * (D / 8);
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = e % (D / 8), t = (e / (D / 8)) % Nk, kv = (e / (D / 8 * Nk)) % Hkv, b = e / (D / 8 * Nk * Hkv);
    const int64_t held = lens ? lens[b] : Nk - Nnew;  // tokens already in the cache
    if (t >= held) continue;
    *reinterpret_cast<uint4*>(pool + cl.offset(b, kv, t) + 8 * c) =
        *reinterpret_cast<const uint4*>(src + b * sb + kv * sh + t * sn + 8 * c);
  }
}

}  // namespace

void prepare(const Shape& s, const AttnParams& p, const StepOptions& opts, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const int page = page_size_of(opts);
  const Workspace w = workspace_of(s.B, s.H, s.hkv(), s.N, s.Nk, s.d, s.decode(), page, splits_for(p, opts));
  if (w.total > 0 && !p.workspace) throw std::logic_error("step17: prepare() without its workspace");
  unsigned char* ws = static_cast<unsigned char*>(p.workspace);
  if (w.total) CUDA_CHECK(cudaMemsetAsync(ws, 0xFF, w.total, st));  // NaN everywhere nothing is put
  if (w.counters_bytes) CUDA_CHECK(cudaMemsetAsync(ws + w.counters, 0, w.counters_bytes, st));  // [fused-combine]
  const int64_t Hkv = s.hkv(), d = s.d, row_bytes = d * 2;
  std::vector<int32_t> lens;
  if (s.decode()) {
    for (int64_t x : s.cache_lens) lens.push_back(int32_t(x));
    CUDA_CHECK(cudaMemcpyAsync(ws + w.cache_lens, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice, st));
    // [append] The new tokens' K and V, out of the K/V inputs (rows cache_lens[b] .. + N − 1)...
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t kv = 0; kv < Hkv; ++kv)
        for (int which = 0; which < 2; ++which) {
          const unsigned char* src = static_cast<const unsigned char*>(which ? p.v : p.k) +
                                     2 * (b * (which ? p.v_sb : p.k_sb) + kv * (which ? p.v_sh : p.k_sh) +
                                          s.cache_lens[size_t(b)] * (which ? p.v_sn : p.k_sn));
          unsigned char* dst = ws + (which ? w.v_new : w.k_new) + size_t((b * Hkv + kv) * s.N) * size_t(row_bytes);
          CUDA_CHECK(cudaMemcpy2DAsync(dst, size_t(row_bytes), src, size_t(2 * (which ? p.v_sn : p.k_sn)), size_t(row_bytes),
                                       size_t(s.N), cudaMemcpyDeviceToDevice, st));
        }
  }
  if (page > 0) {
    // [paged] A block table with the pool's pages in a seeded random order (a long-running
    // server's pool is fragmented so), checked on the host before any launch, and the cached
    // tokens copied into their pages; every other slot of the pool stays NaN.
    std::vector<int64_t> keys(size_t(s.B));
    for (int64_t b = 0; b < s.B; ++b) keys[size_t(b)] = s.keys(b);
    const decode::PagedLayout pl = decode::shuffled_layout(keys, s.Nk, page, layout_seed(s));
    const std::string bad = decode::validate(pl, s.Nk);
    if (!bad.empty()) throw Unsupported("step17: " + bad);  // exit 2 with the message, before any launch
    CUDA_CHECK(cudaMemcpyAsync(ws + w.table, pl.block_table.data(), pl.block_table.size() * 4, cudaMemcpyHostToDevice, st));
    DecodeArgs a = make_args(p, opts);
    for (int which = 0; which < 2; ++which) {
      const uint16_t* src = static_cast<const uint16_t*>(which ? p.v : p.k);
      uint16_t* pool = static_cast<uint16_t*>(which ? a.v_cache : a.k_cache);
      const int64_t sb = which ? p.v_sb : p.k_sb, sh = which ? p.v_sh : p.k_sh, sn = which ? p.v_sn : p.k_sn;
      const int32_t* dl = s.decode() ? a.cache_lens : nullptr;
      switch (d) {
        case 16: step17_fill_pool<16><<<2048, 256, 0, st>>>(src, sb, sh, sn, pool, a.kl, dl, s.Nk, int(s.B), int(Hkv), 0); break;
        case 32: step17_fill_pool<32><<<2048, 256, 0, st>>>(src, sb, sh, sn, pool, a.kl, dl, s.Nk, int(s.B), int(Hkv), 0); break;
        case 64: step17_fill_pool<64><<<2048, 256, 0, st>>>(src, sb, sh, sn, pool, a.kl, dl, s.Nk, int(s.B), int(Hkv), 0); break;
        default: step17_fill_pool<128><<<2048, 256, 0, st>>>(src, sb, sh, sn, pool, a.kl, dl, s.Nk, int(s.B), int(Hkv), 0); break;
      }
      CUDA_CHECK_LAUNCH("step17_fill_pool");
    }
  } else if (s.decode()) {
    // ... and, in the contiguous cache, everything from the first new token on set to NaN: the
    // kernel must append the new tokens before anything reads them, and read nothing past them.
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t kv = 0; kv < Hkv; ++kv)
        for (int which = 0; which < 2; ++which) {
          const int64_t from = s.cache_lens[size_t(b)];
          unsigned char* at = static_cast<unsigned char*>(const_cast<void*>(which ? p.v : p.k)) +
                              2 * (b * (which ? p.v_sb : p.k_sb) + kv * (which ? p.v_sh : p.k_sh) + from * (which ? p.v_sn : p.k_sn));
          CUDA_CHECK(cudaMemset2DAsync(at, size_t(2 * (which ? p.v_sn : p.k_sn)), 0xFF, size_t(row_bytes), size_t(s.Nk - from), st));
        }
  }
  CUDA_CHECK(cudaStreamSynchronize(st));
}

void launch(const AttnParams& p, const StepOptions& opts, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  // cp.async moves 16 bytes (8 elements) at a time, and the new tokens' rows are appended in 16-byte
  // chunks: every tensor's base and row strides must keep those chunks whole.
  auto aligned = [](const void* ptr, int64_t sb, int64_t sh, int64_t sn) {
    return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && sb % 8 == 0 && sh % 8 == 0 && sn % 8 == 0;
  };
  if (!aligned(p.q, p.q_sb, p.q_sh, p.q_sn) || !aligned(p.k, p.k_sb, p.k_sh, p.k_sn) ||
      !aligned(p.v, p.v_sb, p.v_sh, p.v_sn) || !aligned(p.o, p.o_sb, p.o_sh, p.o_sn))
    throw std::invalid_argument("step17: Q, K, V, O need 16-byte aligned pointers and strides that are multiples of 8");
  if (p.Hkv < 1 || p.H % p.Hkv != 0) throw std::invalid_argument("step17: HKV must divide H");
  const DecodeArgs a = make_args(p, opts);
  // [pdl] Programmatic dependent launch is Hopper's (sm_90): refused elsewhere, before any launch.
  if (a.combine == Combine::pdl && device_facts().cc < 90)
    throw Unsupported("step17: --combine pdl needs programmatic dependent launch (compute capability 9.0 or later); this GPU is " +
                      std::to_string(device_facts().cc / 10) + "." + std::to_string(device_facts().cc % 10));
  if (p.bf16) dispatch_d<__nv_bfloat16>(a, st);
  else dispatch_d<__half>(a, st);
}

size_t workspace_bytes(const Shape& s, const StepOptions& opts) {
  const int64_t splits = choose_splits(s.B, s.H, s.hkv(), s.N, s.Nk, s.window, opts, device_sms(), device_blocks_per_sm(s.d));
  return workspace_of(s.B, s.H, s.hkv(), s.N, s.Nk, s.d, s.decode(), page_size_of(opts), splits).total;
}

// [append] For the GPU tests: one call in plain device buffers, then the cache read back — the K/V
// inputs, or the pool through the block table — and every key a sequence sees compared, bit for bit,
// with the inputs: the new tokens must be in the cache after the call, the old ones untouched.
std::string appended_cache_mismatch(const Shape& s, const Inputs& in, const StepOptions& o) {
  const int64_t B = s.B, H = s.H, Hkv = s.hkv(), N = s.N, Nk = s.Nk, d = s.d;
  auto up = [&](const Tensor4& x) {
    std::vector<uint16_t> bits(x.v.size());
    for (size_t e = 0; e < bits.size(); ++e) bits[e] = to_bits(s.dtype, x.v[e]);
    DeviceBuffer buf(bits.size() * 2);
    CUDA_CHECK(cudaMemcpy(buf.get(), bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
    return buf;
  };
  DeviceBuffer q = up(in.q), k = up(in.k), v = up(in.v), out(size_t(B * H * N * d) * 2), lse(size_t(B * H * N) * 4);
  DeviceBuffer ws(workspace_bytes(s, o));
  AttnParams p;
  p.q = q.get(), p.k = k.get(), p.v = v.get(), p.o = out.get(), p.lse = lse.as<float>();
  p.q_sb = H * N * d, p.q_sh = N * d, p.q_sn = d;
  p.k_sb = p.v_sb = Hkv * Nk * d, p.k_sh = p.v_sh = Nk * d, p.k_sn = p.v_sn = d;
  p.o_sb = H * N * d, p.o_sh = N * d, p.o_sn = d, p.lse_sb = H * N, p.lse_sh = N;
  p.B = int(B), p.H = int(H), p.N = int(N), p.Nk = int(Nk), p.d = int(d), p.Hkv = int(Hkv), p.window = int(s.window);
  p.decode = s.decode(), p.causal = s.causal, p.bf16 = s.dtype == DType::bf16, p.scale = float(s.softmax_scale());
  p.workspace = ws.get();
  prepare(s, p, o, nullptr);
  launch(p, o, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const DecodeArgs a = make_args(p, o);
  const int page = page_size_of(o);
  const Workspace w = workspace_of(B, H, Hkv, N, Nk, d, s.decode(), page, a.splits);
  const size_t cache_elems = page > 0 ? size_t(w.num_pages * page * Hkv * d) : size_t(B * Hkv * Nk * d);
  std::vector<uint16_t> kc(cache_elems), vc(cache_elems);
  std::vector<int32_t> table(size_t(w.num_pages));
  CUDA_CHECK(cudaMemcpy(kc.data(), a.k_cache, cache_elems * 2, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(vc.data(), a.v_cache, cache_elems * 2, cudaMemcpyDeviceToHost));
  CacheLayout cl = a.kl;
  if (page > 0) {
    CUDA_CHECK(cudaMemcpy(table.data(), a.kl.block_table, table.size() * 4, cudaMemcpyDeviceToHost));
    cl.block_table = table.data();  // the same layout, read on the host
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t kv = 0; kv < Hkv; ++kv)
      for (int64_t t = 0; t < s.keys(b); ++t)
        for (int64_t c = 0; c < d; ++c) {
          const size_t at = size_t(cl.offset(b, kv, t) + c);
          if (kc[at] != to_bits(s.dtype, in.k.at(b, kv, t, c)) || vc[at] != to_bits(s.dtype, in.v.at(b, kv, t, c)))
            return "the cache after the call differs from the inputs at sequence " + std::to_string(b) + ", kv-head " +
                   std::to_string(kv) + ", token " + std::to_string(t) + (t >= s.keys(b) - N && s.decode() ? " (a new token)" : "");
        }
  return "";
}

}  // namespace fa::step17
