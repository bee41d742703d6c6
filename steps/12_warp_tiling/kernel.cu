// Step 12 — warp tiling: step 11's pipeline, with the work around the products cut down.
//
//   step12_warp_tiling  Each warp owns 32 rows (two m16 tiles), so every K/V fragment feeds two
//                       products ([m16-pair]); Q waits in shared memory and every fragment is read
//                       with ldmatrix.x4 from XOR-stepped addresses ([x4], [addresses]); one barrier
//                       per tile ([pipeline]); p = exp2 on one FMA ([exp2]); O leaves through shared
//                       memory in 16-byte chunks ([o-staging]); the heaviest causal blocks first
//                       ([order]); tile sizes per head dimension (schedule.hpp).
//
// [gqa] Query head h reads key/value head h / (H / Hkv): the H / Hkv blocks of a group, launched
// side by side, read the same K and V, which the L2 cache then serves. [window] A sliding window starts the K/V loop at the
// Q tile's first needed tile (first_kv_tile) and masks where the band's left edge crosses a tile.
//
// [ablation] The template argument A takes one of these changes out (schedule.hpp lists them), so
// that `--ablate NAME` measures what each buys; A = kFull is the step itself.
//
// [dropout] The template argument Drop (A = kFull only) multiplies each weight of P·V's operand by
// keep/(1 − P), drawn by Philox (common/kernel/dropout.hpp); Drop = false is the step as measured.
//
// Layout of every fragment: common/kernel/mma_layout.hpp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernel/arch.cuh"  // FA_SM80_ONLY: mma.sync.m16n8k16, cp.async before sm_80 trap (the host refuses first)
#include "kernel/cuda_check.cuh"
#include "kernel/dropout.hpp"
#include "schedule.hpp"

namespace fa::step12 {

constexpr int W = kSchedule.warps();
constexpr int kThreads = W * 32;
static_assert(schedule_for(16).W == W && schedule_for(64).W == W && schedule_for(64, kNoRows32).W == W,
              "one block size for every head dimension and ablation");

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

// [exp2] 2^x in one instruction (MUFU.EX2, flushing denormal results to zero; 2^-inf = 0).
__device__ inline float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// [addresses] Shared-memory byte addresses with the swizzle folded in. A row is D·2 bytes (a power
// of two) and the swizzled chunk of logical chunk 2k + x (x = 0 or 1) in row r is
// (2k) XOR ((x XOR r) & kMask): the lane-dependent part is fixed per lane, and stepping k is an
// XOR of the address with 32·k — once the tile starts on a multiple of the row size, which the
// 1 KB-aligned base (checked at the top of the kernel) and whole-row tile offsets guarantee.
template <int D>
constexpr int kMask = (D / 8 < 8 ? D / 8 : 8) - 1;

// [cp-async] Start copying rows [r0, r0 + R) of a (rows × D) matrix into the tile at shared
// address `tile`, 16 bytes per cp.async, each chunk to its swizzled place (swizzle() in
// schedule.hpp); rows past `rows` are zero-filled by the copy itself (source size 0). A thread
// copies the same chunk column of every kRowsPerPass-th row, so its destination only moves by
// whole rows. Nothing waits here: cp_async_wait() does.
template <class T, int D, int R>
__device__ inline void load_rows_async(uint32_t tile, const T* __restrict__ g, int64_t ld, int r0, int rows) {
  constexpr int kChunks = D / 8, kRowsPerPass = kThreads / kChunks;
  static_assert(kThreads % kChunks == 0 && R % kRowsPerPass == 0 && kRowsPerPass % 8 == 0, "whole passes, fixed swizzle per thread");
  const int r = threadIdx.x / kChunks, cc = threadIdx.x % kChunks;
  const uint32_t dst = tile + r * (D * 2) + 16 * (cc ^ (r & kMask<D>));
  const T* src = g + int64_t(r0 + r) * ld + 8 * cc;
#pragma unroll
  for (int i = 0; i < R / kRowsPerPass; ++i) {
    const bool inside = r0 + r + i * kRowsPerPass < rows;
    const T* from = inside ? src + int64_t(i) * kRowsPerPass * ld : g;  // a valid address even when nothing is read
    FA_SM80_ONLY(asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst + i * kRowsPerPass * D * 2),
                              "l"(from), "r"(inside ? 16 : 0)));
  }
}
__device__ inline void cp_async_commit() { FA_SM80_ONLY(asm volatile("cp.async.commit_group;\n" ::)); }
// Wait until at most N committed groups are still in flight.
template <int N>
__device__ inline void cp_async_wait() { FA_SM80_ONLY(asm volatile("cp.async.wait_group %0;\n" ::"n"(N))); }

// [x4] Four 8 × 8 blocks of 16-bit values -> four registers per lane. Lane 8m + r gives the (shared) address
// of row r of block m; without .trans a lane receives row lane/4, columns 2(lane%4) and
// 2(lane%4)+1 of each block; with .trans the transpose (common/kernel/mma_layout.hpp, ldm_elem).
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
// [ablation] kNoX4: step 11's ldmatrix.x2 (lanes 0-15 give the addresses), twice where .x4 is once.
__device__ inline void ldmatrix_x2(uint32_t& r0, uint32_t& r1, uint32_t a, bool trans) {
  if (trans) asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(a));
  else asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(a));
}

// [dropout] keep/(1 − P) on one lane's eight weights of 16 keys of one m16 tile. c0 and c1 are C
// tiles 2kk and 2kk + 1: element 2·hr + e of c0 is row `row` + 8·hr, key `key` + e, and c1 holds
// the same rows at keys 8 further. Two Philox calls, at (row, key + e) for e = 0, 1: each returns
// the words of rows {row, row + 8} × keys {key + e, key + e + 8} ([dropout-block]), so every word
// drawn is used once.
__device__ inline void dropout16(float (&c0)[4], float (&c1)[4], const AttnParams& p, uint32_t threshold, float rescale,
                                 int bh, int row, int key) {
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const DropoutWords w = dropout_words(p.dropout_seed, p.dropout_offset, bh, row, key + e);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float& lo = c0[2 * hr + e];
      float& hi = c1[2 * hr + e];
      lo = w.w[dropout_word_of(8 * hr, 0)] >= threshold ? lo * rescale : 0.0f;
      hi = w.w[dropout_word_of(8 * hr, 8)] >= threshold ? hi * rescale : 0.0f;
    }
  }
}

template <class T, int D, int A, bool Drop, bool Win>
__global__ void __launch_bounds__(kThreads, 2) step12_warp_tiling(AttnParams p) {
  static_assert(!Drop || A == kFull, "dropout is compiled into the full step only");
  constexpr Schedule S = schedule_for(D, A);
  constexpr int Br = S.Br, Bc = S.Bc, MT = S.mtiles(), kRowsPerWarp = Br / W;
  // [stages] The Q tile, then kStages × (K tile, V tile), dynamic shared memory; element (r, c) of
  // a tile at byte 2·swizzle(r, c, D) from its start.
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  if (sbase % 1024 != 0) __trap();  // [addresses] the XOR stepping needs it; fail loudly, never silently
  constexpr uint32_t kRow = D * 2, kTile = Bc * kRow;
  auto k_at = [&](int st) { return sbase + Br * kRow + 2 * st * kTile; };
  auto v_at = [&](int st) { return k_at(st) + kTile; };
  // [gqa] The grid is (Q tiles, H / Hkv, B·Hkv): the H / Hkv query heads that share key/value head
  // hk are neighbours in the launch order, so their blocks read the same K and V close in time.
  const int hk = blockIdx.z % p.Hkv, b = blockIdx.z / p.Hkv, h = hk * gridDim.y + blockIdx.y, bh = b * p.H + h;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // [order] Blocks start in reverse: with the causal mask the last Q tiles have the most K/V tiles,
  // so they go first and the short ones fill the gaps at the end (no effect without the mask).
  const int i0 = (A == kNoOrder ? blockIdx.x : gridDim.x - 1 - blockIdx.x) * Br, rows = min(Br, p.N - i0), w0 = kRowsPerWarp * warp;  // the warp's first row in the tile
  const T* Q = static_cast<const T*>(p.q) + b * p.q_sb + h * p.q_sh;
  const T* K = static_cast<const T*>(p.k) + b * p.k_sb + hk * p.k_sh;  // [gqa]
  const T* V = static_cast<const T*>(p.v) + b * p.v_sb + hk * p.v_sh;

  // [skip] [window] The block visits K/V tiles jbeg .. Tend − 1: none right of its diagonal, none
  // left of its band.
  const int Tend = int(kv_tiles_for(i0, i0 + rows, p.N, p.Nk, Bc, p.causal));
  // [window] Win: compiled in only where a window is asked for (the kernel without one keeps its registers).
  const int jbeg = Win ? int(first_kv_tile(i0, i0 + rows, p.N, p.Nk, Bc, p.causal, p.window)) : 0;
  // [pipeline] Q and the first tile are started before the loop, as one group.
  if (Tend > jbeg) {
    load_rows_async<T, D, Br>(sbase, Q, p.q_sn, i0, p.N);
    load_rows_async<T, D, Bc>(k_at(jbeg % kStages), K, p.k_sn, jbeg * Bc, p.Nk);
    load_rows_async<T, D, Bc>(v_at(jbeg % kStages), V, p.v_sn, jbeg * Bc, p.Nk);
  }
  cp_async_commit();

  // [o-regs] O (per m16 tile, 16 × D: D/8 accumulator tiles), and per row (g and g + 8 of each
  // m16 tile) the running max m in the log2 domain and this lane's part of the running sum l.
  float o[MT][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;
  const float sl2 = p.scale * kLog2e;  // [exp2] exp(scale·s − M) = exp2(scale·log2(e)·s − M')
  // [dropout] Only the Drop kernel reads these; in the other they do not exist.
  const uint32_t threshold = Drop ? dropout_threshold(p.dropout) : 0u;
  const float rescale = Drop ? dropout_rescale(p.dropout) : 1.0f;
  // [x4] This lane addresses row lr of block lb. Its byte offsets at k = 0 (Q: rows w0 + 8(lb % 2)
  // + lr, chunk lb / 2; K: rows 8(lb / 2) + lr, chunk lb % 2; V: rows 8(lb % 2) + lr, chunk lb / 2);
  // the loops add whole rows and XOR 32·k.
  const int lr = lane % 8, lb = lane / 8;
  const uint32_t q_lane = sbase + (w0 + 8 * (lb % 2) + lr) * kRow + 16 * (((lb / 2) ^ lr) & kMask<D>);
  const uint32_t k_lane = (8 * (lb / 2) + lr) * kRow + 16 * (((lb % 2) ^ lr) & kMask<D>);
  const uint32_t v_lane = (8 * (lb % 2) + lr) * kRow + 16 * (((lb / 2) ^ lr) & kMask<D>);

  for (int j = jbeg; j < Tend; ++j) {
    const int j0 = j * Bc, st = j % kStages;
    // [pipeline] Tile j (and, at j = 0, Q) has landed: this thread's copies, then everyone's. The
    // same barrier tells that every warp is done with tile j − 1, so its stage may be refilled:
    // the copy of tile j + 1 starts now and runs while tile j is multiplied.
    cp_async_wait<0>();
    __syncthreads();
    if (j + 1 < Tend) {
      load_rows_async<T, D, Bc>(k_at((j + 1) % kStages), K, p.k_sn, j0 + Bc, p.Nk);
      load_rows_async<T, D, Bc>(v_at((j + 1) % kStages), V, p.v_sn, j0 + Bc, p.Nk);
    }
    cp_async_commit();  // an empty group on the last tile keeps the count uniform

    // [m16-pair] The warp's 32 rows are two m16 tiles: every K or V fragment below feeds both.
    // [s-regs] S = Q K_jᵀ for the warp's rows. Per 16 dims: the A fragment of each m16 tile (one
    // ldmatrix.x4 of Q: blocks rows 0-7 / 8-15 × dims 0-7 / 8-15), then per pair of key blocks one
    // ldmatrix.x4 of K as stored — the B fragments of keys 16np .. + 7 and + 8 .. + 15 — each used
    // by both m16 tiles.
    const uint32_t k_addr = k_at(st) + k_lane, v_addr = v_at(st) + v_lane;
    float s[MT][Bc / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int n = 0; n < Bc / 8; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qa[MT][4];
      // lab:begin q-x4 {O L}: [x4]: the A fragment of each of the warp's MT m16 tiles …
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) ldmatrix_x4(qa[mt], (q_lane + 16 * mt * kRow) ^ (32 * kk));
      // lab:end
#pragma unroll
      for (int np = 0; np < Bc / 16; ++np) {
        uint32_t kb[4];
        if (A == kNoX4) {  // keys 16np .. + 7, then + 8 .. + 15 (rows 8 further, the same chunks)
          ldmatrix_x2(kb[0], kb[1], (k_addr + 16 * np * kRow) ^ (32 * kk), false);
          ldmatrix_x2(kb[2], kb[3], ((k_addr + 16 * np * kRow) ^ (32 * kk)) + 8 * kRow, false);
        } else {
          ldmatrix_x4(kb, (k_addr + 16 * np * kRow) ^ (32 * kk));
        }
        // lab:begin s-mtiles {O L}: [m16-pair]: the two B fragments of kb (kb[0..1]: keys 16np.. …
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816<T>(s[mt][2 * np], qa[mt], kb[0], kb[1]);
          mma16816<T>(s[mt][2 * np + 1], qa[mt], kb[2], kb[3]);
        }
        // lab:end
      }
    }

    // [causal-mask] Only on tiles that need it: keys at or past a row's visible count get −inf,
    // and [window] keys before its first visible one.
    if (needs_mask(i0, i0 + rows, j0, p.N, p.Nk, Bc, p.causal, Win ? p.window : 0)) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int row = i0 + w0 + 16 * mt + m16n8k16::group(lane) + 8 * hr;
          const int vis = int(visible_keys(row, p.N, p.Nk, p.causal)) - j0, lo = Win ? int(first_key(row, p.N, p.Nk, p.window)) - j0 : 0;
#pragma unroll
          for (int n = 0; n < Bc / 8; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int col = 8 * n + m16n8k16::c_elem(lane, 2 * hr + e).col;
              if (col >= vis || (Win && col < lo)) s[mt][n][2 * hr + e] = -INFINITY;
            }
        }
    }

    // [softmax-regs] Each lane holds rows g and g + 8 of each m16 tile, two columns per 8-key
    // block: the four lanes of a group share a row, so the row max and sum take two shuffles.
    // The max is taken on raw scores and scaled once (scale·log2 e > 0 keeps the order); then
    // p = exp2(s·scale·log2 e − m) is one FMA and one MUFU.EX2.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < Bc / 8; ++n) mx = fmaxf(mx, fmaxf(s[mt][n][2 * hr], s[mt][n][2 * hr + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[mt][hr], mx * sl2);  // (kNoExp2: the same max, scaled the same way)
        // [rescale-guard] A row that has seen only masked keys keeps m = −inf; subtracting 0
        // instead gives p = exp2(−inf) = 0 and alpha = 0 without a NaN.
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        const float alpha = A == kNoExp2 ? exp2f(m[mt][hr] - m_use) : fast_exp2(m[mt][hr] - m_use);
        m[mt][hr] = m_new;
        float rs = 0.0f;
#pragma unroll
        for (int n = 0; n < Bc / 8; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pv = A == kNoExp2 ? exp2f(s[mt][n][2 * hr + e] * sl2 - m_use)  // [ablation] step 11's
                                          : fast_exp2(fmaf(s[mt][n][2 * hr + e], sl2, -m_use));
            s[mt][n][2 * hr + e] = pv;
            rs += pv;
          }
        l[mt][hr] = l[mt][hr] * alpha + rs;
        // [deferred] Õ *= alpha for this row (elements 0, 1 are row g; 2, 3 row g + 8).
#pragma unroll
        for (int n = 0; n < D / 8; ++n) o[mt][n][2 * hr] *= alpha, o[mt][n][2 * hr + 1] *= alpha;
      }

    // [c-to-a] P's accumulator tiles 2kk and 2kk + 1 are, converted, the A fragment of keys
    // [16kk, 16kk + 16): A register r holds C tile 2kk + r/2, elements 2(r%2) and 2(r%2) + 1.
    // [dropout] With Drop, each weight is first multiplied by keep/(1 − P) — after the row sum,
    // which took the undropped weights: l, m and L are the softmax's, only P·V sees the mask.
    // Keys past Nk and masked ones are already 0. Rows are 16-aligned (i0, w0) and so are keys
    // (j0, 16kk): each 16-key pair is two Philox calls per lane and m16 tile.
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk) {
      uint32_t pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (Drop)
          dropout16(s[mt][2 * kk], s[mt][2 * kk + 1], p, threshold, rescale, bh, i0 + w0 + 16 * mt + m16n8k16::group(lane),
                    j0 + 16 * kk + 2 * m16n8k16::thread_in_group(lane));
#pragma unroll
        for (int r = 0; r < 4; ++r)
          pa[mt][r] = pack2<T>(s[mt][2 * kk + r / 2][2 * (r % 2)], s[mt][2 * kk + r / 2][2 * (r % 2) + 1]);
      }
      // [pv] Õ += P V_j: B = V_j, element (k, n) = V_j[k][n]. One ldmatrix.x4.trans gives the B
      // fragments of dims 16np .. + 7 and + 8 .. + 15 (keys 16kk .. + 7 and + 8 .. + 15 each),
      // used by both m16 tiles.
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        uint32_t vb[4];
        if (A == kNoX4) {  // dims 16np .. + 7, then + 8 .. + 15 (the next chunk: address XOR 16)
          ldmatrix_x2(vb[0], vb[1], (v_addr + 16 * kk * kRow) ^ (32 * np), true);
          ldmatrix_x2(vb[2], vb[3], (v_addr + 16 * kk * kRow) ^ (32 * np) ^ 16, true);
        } else {
          ldmatrix_x4_trans(vb, (v_addr + 16 * kk * kRow) ^ (32 * np));
        }
        // lab:begin pv-mtiles {O}: [m16-pair]: the two B fragments of vb (dims 16np.. and 16np + …
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816<T>(o[mt][2 * np], pa[mt], vb[0], vb[1]);
          mma16816<T>(o[mt][2 * np + 1], pa[mt], vb[2], vb[3]);
        }
        // lab:end
      }
    }
    if (A == kNoOneBarrier) __syncthreads();  // [ablation] step 11's second barrier per tile
  }
  cp_async_wait<0>();  // no copy left in flight when the block ends

  // [final-divide] The four lanes of a group add their parts of l; O = Õ / l, L = (m + log2 l)·ln 2.
  // (O's and L's addresses are formed only here: kept from the start, they would hold registers
  // through the whole loop.) [o-staging] O goes through the warp's own rows of the Q tile in shared
  // memory (swizzled: the 4-byte writes of a fragment hit eight bank groups), then out to HBM in
  // whole 16-byte chunks per lane — not the half-used 32-byte sectors of direct 4-byte stores.
  T* O = static_cast<T*>(p.o) + b * p.o_sb + h * p.o_sh;
  float* Lse = p.lse + b * p.lse_sb + h * p.lse_sh;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int r0 = i0 + w0 + 16 * mt;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      l[mt][hr] += __shfl_xor_sync(0xffffffffu, l[mt][hr], 1);
      l[mt][hr] += __shfl_xor_sync(0xffffffffu, l[mt][hr], 2);
    }
    const float inv[2] = {l[mt][0] > 0.0f ? 1.0f / l[mt][0] : 0.0f, l[mt][1] > 0.0f ? 1.0f / l[mt][1] : 0.0f};
    if (mt == 0) __syncwarp();  // the warp's last ldmatrix of its Q rows is done before they are overwritten
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const m16n8k16::Coord c = m16n8k16::c_elem(lane, e);
        const int row = w0 + 16 * mt + c.row;  // in the tile
        const uint32_t v = pack2<T>(o[mt][n][e] * inv[e / 2], o[mt][n][e + 1] * inv[e / 2]);
        if (A == kNoOStage) {  // [ablation] step 11's 4-byte stores straight to HBM
          if (i0 + row < p.N) *reinterpret_cast<uint32_t*>(O + int64_t(i0 + row) * p.o_sn + 8 * n + c.col) = v;
          continue;
        }
        const uint32_t a = sbase + row * kRow + 16 * (n ^ (row & kMask<D>)) + 2 * (c.col % 8);
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(a), "r"(v));
      }
    if (m16n8k16::thread_in_group(lane) == 0)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int row = r0 + m16n8k16::group(lane) + 8 * hr;
        if (row < p.N) Lse[row] = l[mt][hr] > 0.0f ? (m[mt][hr] + log2f(l[mt][hr])) * kLn2 : INFINITY;
      }
  }
  if (A == kNoOStage) return;
  __syncwarp();  // the warp's O rows are complete in shared memory
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int c = lane; c < kRowsPerWarp * kChunks; c += 32) {
    const int row = w0 + c / kChunks, cc = c % kChunks;
    if (i0 + row >= p.N) continue;
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(sbase + row * kRow + 16 * (cc ^ (row & kMask<D>))));
    *reinterpret_cast<uint4*>(O + int64_t(i0 + row) * p.o_sn + 8 * cc) = v;
  }
}

namespace {

template <class T, int D, int A, bool Drop = false, bool Win = false>
void launch_typed(const AttnParams& p, cudaStream_t st) {
  constexpr Schedule S = schedule_for(D, A);
  const size_t smem = size_t(smem_bytes(S, D));
  static bool configured = false;  // per instantiation: opt in to more than 48 KB once
  if (!configured) {
    int dev = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (size_t(optin) < smem)
      throw Unsupported("step12: " + std::to_string(smem) + " bytes of shared memory per block needed; this GPU allows " +
                        std::to_string(optin));
    CUDA_CHECK(cudaFuncSetAttribute(step12_warp_tiling<T, D, A, Drop, Win>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    configured = true;
  }
  const dim3 grid(unsigned(num_tiles(p.N, S.Br)), unsigned(p.H / p.Hkv), unsigned(p.B * p.Hkv));  // [gqa]
  step12_warp_tiling<T, D, A, Drop, Win><<<grid, kThreads, smem, st>>>(p);
  CUDA_CHECK_LAUNCH("step12_warp_tiling");
}

// [ablation] The ablated kernels are compiled for fp16 at d = 64 and 128 only (the measured shapes).
template <class T, int D>
void launch_ablated(const AttnParams& p, int a, cudaStream_t st) {
  if constexpr (std::is_same_v<T, __half> && (D == 64 || D == 128)) {
    switch (a) {
      case kNoOrder: return launch_typed<T, D, kNoOrder>(p, st);
      case kNoExp2: return launch_typed<T, D, kNoExp2>(p, st);
      case kNoOStage: return launch_typed<T, D, kNoOStage>(p, st);
      case kNoOneBarrier: return launch_typed<T, D, kNoOneBarrier>(p, st);
      case kNoTiles: return launch_typed<T, D, kNoTiles>(p, st);
      case kNoRows32: return launch_typed<T, D, kNoRows32>(p, st);
      case kNoX4: return launch_typed<T, D, kNoX4>(p, st);
    }
  }
  throw Unsupported(std::string("step12: --ablate ") + kAblationNames[a] + " is compiled for fp16 at d = 64 and 128 only");
}

// [dropout] The full step with or without dropout; an ablation with dropout was refused already.
template <class T, int D>
void launch_full(const AttnParams& p, cudaStream_t st) {
  if (p.window > 0)  // [window]
    return p.dropout > 0.0f ? launch_typed<T, D, kFull, true, true>(p, st) : launch_typed<T, D, kFull, false, true>(p, st);
  return p.dropout > 0.0f ? launch_typed<T, D, kFull, true>(p, st) : launch_typed<T, D, kFull>(p, st);
}

template <class T>
void launch_d(const AttnParams& p, int a, cudaStream_t st) {
  switch (p.d) {
    case 16: return a == kFull ? launch_full<T, 16>(p, st) : launch_ablated<T, 16>(p, a, st);
    case 32: return a == kFull ? launch_full<T, 32>(p, st) : launch_ablated<T, 32>(p, a, st);
    case 64: return a == kFull ? launch_full<T, 64>(p, st) : launch_ablated<T, 64>(p, a, st);
    case 128: return a == kFull ? launch_full<T, 128>(p, st) : launch_ablated<T, 128>(p, a, st);
    default: throw std::invalid_argument("step12: head dimension " + std::to_string(p.d) + " is not compiled (16, 32, 64, 128)");
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
    throw std::invalid_argument("step12: Q, K, V, O need 16-byte aligned pointers and strides that are multiples of 8");
  if (int64_t(p.B) * p.H > 65535) throw std::invalid_argument("step12: B·H must be at most 65535 (grid dimension)");
  AttnParams q = p;
  if (q.Hkv <= 0) q.Hkv = q.H;  // [gqa] unset: every query head its own key/value head
  if (q.H % q.Hkv != 0) throw std::invalid_argument("step12: H must be a multiple of Hkv");
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const int a = ablation_of(opts);
  require_dropout_supported(q.dropout, a);
  if (q.window > 0 && a != kFull)  // [window] compiled into the full step only, as dropout is
    throw Unsupported(std::string("step12: --ablate ") + kAblationNames[a] + " has no window variant (leave out --ablate or --window)");
  if (q.bf16) launch_d<__nv_bfloat16>(q, a, st);
  else launch_d<__half>(q, a, st);
}

}  // namespace fa::step12
