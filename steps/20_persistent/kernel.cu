// Step 20 — a persistent forward: step 16's kernel with its blocks kept resident.
//
//   step20_persistent  Step 16's roles (a TMA producer warpgroup, two or three consumer warpgroups
//                      taking turns at the tensor cores, each softmax under its own P·V), but a block
//                      per SM that takes work items (b, h, Q tile) ([persistent]) one after another
//                      from an atomic counter ([dynamic]), in an order that puts the longest causal
//                      items first inside chunks of heads whose K and V share the L2 ([work-order],
//                      [lpt]). The
//                      ring of K/V stages, its parities and the consumers' turns run on across items,
//                      so the producer loads the next item's Q and K/V while the consumers finish the
//                      last one ([own-o]: O is staged in a buffer of its own where it fits). Inside the
//                      softmax, a share of the exponentials runs as a cubic on the FMA units
//                      ([exp2-poly]) and a row keeps a stale max until the new one is past a threshold
//                      ([lazy-rescale]), which saves the rescale of O.
//
// [gqa] K's and V's tensor maps have Hkv heads; query head h loads from key/value head
// h / (H / Hkv). [window] An item visits the K/V tiles of its band alone: tile jbeg + j on its j-th
// turn; the ring counts its tiles g over the block's life.
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

namespace fa::step20 {

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

// [work-order] What every role of a block needs to walk its items alike: the order (chunks of heads,
// longest first) or, with --ablate lpt, step 16's grid order; the number of items.
struct Walk {
  WorkOrder order;
  bool lpt = true;
  int items = 0;
  int* next = nullptr;  // [dynamic] the next item to hand out, less gridDim.x (zeroed before the launch)
};

template <class T, int D, int Br, int Bc, int Stages, bool OwnO, int Ex, bool Lazy>
__global__ void __launch_bounds__(Schedule{Br, Bc, Stages, OwnO}.threads(), 1)
    step20_persistent(const __grid_constant__ Maps maps, AttnParams p, Walk walk) {
  constexpr Schedule S{Br, Bc, Stages, OwnO};
  constexpr int C = S.consumers(), kPanels = D / wgmma::kPanel;
  static_assert(valid(S) && D % wgmma::kPanel == 0, "a producer and two or three consumer warpgroups");
  // [stages] The Q tile, O's own tile ([own-o]), then Stages × (K tile, V tile) in [sw128] panels, then
  // the mbarriers.
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  if (sbase % wgmma::kGroupBytes != 0) __trap();  // [sw128] fail loudly, never silently
  constexpr uint32_t kQTile = Br * D * 2, kTile = Bc * D * 2;
  const uint32_t o_base = OwnO ? sbase + kQTile : sbase;  // [own-o] where O is staged: its own tile, or over Q
  auto k_at = [&](int st) { return sbase + (OwnO ? 2 : 1) * kQTile + 2 * st * kTile; };
  auto v_at = [&](int st) { return k_at(st) + kTile; };
  const uint32_t bars = sbase + uint32_t(tiles_bytes(S, D));
  // [split-ring] K and V of a stage have their own full and empty barriers: K_j is free once S_j is
  // in, V_j only once P_j·V_j is — a turn later, which a shared barrier would make K_j wait for.
  // [persistent] Q has two: full (the item's Q is in) and empty (every consumer warp is done with it).
  // [dynamic] The items the producer draws reach the consumers through two slots, each with a full and
  // an empty barrier.
  const uint32_t q_full = bars, q_empty = bars + 8;
  auto item_full = [&](int slot) { return bars + 8 * (2 + slot); };
  auto item_empty = [&](int slot) { return bars + 8 * (4 + slot); };
  auto full_k = [&](int st) { return bars + 8 * (6 + st); };
  auto full_v = [&](int st) { return bars + 8 * (6 + Stages + st); };
  auto empty_k = [&](int st) { return bars + 8 * (6 + 2 * Stages + st); };
  auto empty_v = [&](int st) { return bars + 8 * (6 + 3 * Stages + st); };
  auto item_slot = [&](int slot) { return bars + 8 * (6 + 4 * Stages) + 4 * slot; };

  const int wg = threadIdx.x / 128, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // [persistent] Item t of the walk: its head, its first query row, and the K/V tiles it visits:
  // jbeg .. jbeg + Tcount − 1 ([skip] [window]; none when Tcount = 0). Every role computes the same.
  struct Item {
    int b, h, i0, rows, jbeg, Tcount;
  };
  auto item_at = [&](int t) {
    const Work w = walk.lpt ? work_item(t, walk.order) : plain_item(t, walk.order);  // [lpt]
    Item it;
    it.b = int(w.b), it.h = int(w.h), it.i0 = int(w.qtile) * Br, it.rows = min(Br, p.N - it.i0);
    it.jbeg = int(first_kv_tile(it.i0, it.i0 + it.rows, p.N, p.Nk, Bc, p.causal, p.window));
    it.Tcount = int(kv_tiles_for(it.i0, it.i0 + it.rows, p.N, p.Nk, Bc, p.causal)) - it.jbeg;
    return it;
  };

  // [mbarrier] One thread initializes every barrier; the block's only __syncthreads publishes them.
  // Four kinds per stage st ([split-ring]): full_k(st) and full_v(st) take one arrival per phase (the
  // producer's, with the bytes of K_j or V_j); empty_k(st) and empty_v(st) one per consumer warp; Q's
  // the same, a phase per item with tiles.
  if (threadIdx.x == 0) {
    mbar_init(q_full, 1), mbar_init(q_empty, 4 * S.consumers());
    for (int slot = 0; slot < 2; ++slot) mbar_init(item_full(slot), 1), mbar_init(item_empty(slot), 4 * S.consumers());
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
    if (threadIdx.x != 0) return;
    // [persistent] g counts the ring's tiles over every item of the block, n its items with tiles.
    // [dynamic] Its first item is blockIdx.x; each next one the counter's, after the first gridDim.x:
    // an SM that finishes early takes the next item, as the hardware hands out blocks. Item k goes to
    // the consumers through slot k % 2; an item past the last tells them to stop.
    int g = 0, n = 0;
    for (int k = 0, t = blockIdx.x;; ++k, t = int(gridDim.x) + atomicAdd(walk.next, 1)) {
      const int slot = k % 2;
      if (k >= 2) mbar_wait(item_empty(slot), uint32_t((k - 2) / 2) & 1u);
      asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(item_slot(slot)), "r"(t) : "memory");
      mbar_arrive(item_full(slot));
      if (t >= walk.items) break;
      const Item it = item_at(t);
      if (it.Tcount == 0) continue;
      // [own-o] Q of item n once every consumer warp is done with item n − 1's: its last S is in (or,
      // without a tile of its own for O, O has left the Q tile).
      if (n > 0) mbar_wait(q_empty, uint32_t(n - 1) & 1u);
      mbar_arrive_expect(q_full, kQTile);
      for (int pn = 0; pn < kPanels; ++pn) tma_load(sbase + pn * Br * wgmma::kRowBytes, &maps.q, 64 * pn, it.i0, it.h, it.b, q_full);
      const int hkv = p.kv_head(it.h);  // [gqa]
      for (int j = 0; j < it.Tcount; ++j, ++g) {
        const int st = g % Stages;
        // [split-ring] K_j once K_{j-Stages} is released, then V_j once V_{j-Stages} is.
        if (g >= Stages) mbar_wait(empty_k(st), empty_parity(g, Stages));
        mbar_arrive_expect(full_k(st), kTile);
        for (int pn = 0; pn < kPanels; ++pn) tma_load(k_at(st) + pn * Bc * wgmma::kRowBytes, &maps.k, 64 * pn, (it.jbeg + j) * Bc, hkv, it.b, full_k(st));
        if (g >= Stages) mbar_wait(empty_v(st), empty_parity(g, Stages));
        mbar_arrive_expect(full_v(st), kTile);
        for (int pn = 0; pn < kPanels; ++pn) tma_load(v_at(st) + pn * Bc * wgmma::kRowBytes, &maps.v, 64 * pn, (it.jbeg + j) * Bc, hkv, it.b, full_v(st));
      }
      ++n;
    }
    return;
  }

  // ---- [consumer] -----------------------------------------------------------------------------
  regs_inc<consumer_regs(C)>();
  const int c = wg - 1, w0 = 16 * (warp % 4);  // consumer c owns rows [64c, 64c + 64); the warp's first row in them
  float o[kPanels][32];
  float s[Bc / 2];
  uint32_t pa[Bc / 16][4];
  float m[2], l[2], alpha[2];
  const float sl2 = p.scale * kLog2e;  // [exp2]
  const uint32_t q_wg = sbase + wgmma::kmajor_offset(64 * c, 0, Br);
  // [persistent] The item the consumers are on (set per item below; the lambdas read it).
  int i0 = 0, rows = 0, jbeg = 0;

  // [pingpong] Named barrier 1 + c (256 threads: this warpgroup's bar.sync, the previous one's
  // bar.arrive) is this warpgroup's turn to issue products. The last consumer gives consumer 0 the
  // first turn; each turn ends by handing the next to consumer c + 1 (mod C) — so the tensor cores
  // run one warpgroup's products while the others run their softmax. [persistent] The turns run on
  // across the block's items, whose number only the counter knows: every turn hands on, and consumer 0
  // takes the last hand-on (or, with no turn at all, the first) with one more bar.sync when the block
  // stops, so that every bar.arrive of a barrier meets exactly one bar.sync.
  auto turn_begin = [&] { asm volatile("bar.sync %0, 256;\n" ::"r"(1 + c) : "memory"); };
  auto turn_end = [&] {
    // lab:begin turn-handoff: [pingpong]: hand the next turn to consumer …
    asm volatile("bar.arrive %0, 256;\n" ::"r"(1 + (c + 1) % C) : "memory");
    // lab:end
  };
  if (c == C - 1) asm volatile("bar.arrive %0, 256;\n" ::"r"(1) : "memory");

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
      float m_use = m[hr];
      alpha[hr] = 1.0f;
      // lab:begin lazy-kernel: [lazy-rescale]: the row takes the new max only past the threshold …
      if (!Lazy || takes_new_max(m[hr], m_new)) {  // [lazy-rescale] (every tile without it, as step 16)
        m_use = m_new == -INFINITY ? 0.0f : m_new;  // [rescale-guard]
        alpha[hr] = fast_exp2(m[hr] - m_use);
        m[hr] = m_new;
      }
      // lab:end
      float rs = 0.0f;
#pragma unroll
      for (int n = 0; n < Bc / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float x = fmaf(s[4 * n + 2 * hr + e], sl2, -m_use);
          const float pv = poly_at(Ex, n) ? poly_exp2(x) : fast_exp2(x);  // [exp2-poly] the group's unit
          s[4 * n + 2 * hr + e] = pv;
          rs += pv;
        }
      l[hr] = l[hr] * alpha[hr] + rs;
    }
  };
  auto rescale_and_pack = [&] {  // [deferred] Õ *= alpha; [c-to-a] P into pa
    // [lazy-rescale] A warp whose rows all kept their max skips the multiply (alpha = 1).
    if (!Lazy || __any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f))
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

  // [persistent] g counts the ring's tiles over the block's items, and items its items with tiles, as
  // the producer's do. Per item, O, m and l start afresh. [dynamic] Item k from slot k % 2.
  int g = 0, items = 0;
  for (int k = 0;; ++k) {
    const int slot = k % 2;
    mbar_wait(item_full(slot), uint32_t(k / 2) & 1u);
    int t;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(t) : "r"(item_slot(slot)) : "memory");
    __syncwarp();
    release(item_empty(slot));  // every lane has read it: the slot may take item k + 2
    if (t >= walk.items) break;
    const Item it = item_at(t);
    i0 = it.i0, rows = it.rows, jbeg = it.jbeg;
    const int Tcount = it.Tcount;
#pragma unroll
    for (int pn = 0; pn < kPanels; ++pn)
#pragma unroll
      for (int r = 0; r < 32; ++r) o[pn][r] = 0.0f;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) m[hr] = -INFINITY, l[hr] = 0.0f, alpha[hr] = 1.0f;

    // One turn per tile and one more: turn j issues S_j = Q K_jᵀ and, behind it, P_{j-1}·V_{j-1} (the
    // product the softmax of tile j − 1 made ready), so the other warpgroup's softmax has two products
    // of this one's to hide behind ([pingpong]). [overlap]: wait only for S_j before the softmax of
    // tile j — P_{j-1}·V_{j-1} still runs under it — and for both after it. Õ is rescaled for tile j
    // once P_{j-1}·V_{j-1} is in. The first and the last turns are peeled: with a wgmma issued under a
    // condition, ptxas cannot tell which groups a wait_group leaves running, and serializes every
    // wgmma of the kernel (its warning C7514). [persistent] The item's tile j is the ring's tile g + j.
    if (Tcount > 0) {
      mbar_wait(q_full, uint32_t(items) & 1u);
      mbar_wait(full_k(g % Stages), full_parity(g, Stages));
      turn_begin();
      wgmma::fence();
      issue_s(g % Stages);
      turn_end();
      wgmma::wait<0>();
      release(empty_k(g % Stages));
      if (OwnO && Tcount == 1) release(q_empty);  // [own-o] the item's last S is in: Q is free
      softmax(0);
      rescale_and_pack();
      for (int j = 1; j < Tcount; ++j) {
        const int st = (g + j) % Stages, prev = (g + j - 1) % Stages;
        mbar_wait(full_k(st), full_parity(g + j, Stages));
        mbar_wait(full_v(prev), full_parity(g + j - 1, Stages));
        turn_begin();
        wgmma::fence();
        issue_s(st);
        issue_pv(prev);
        turn_end();
        // [overlap] Wait for S_j alone: the softmax of tile j runs under P_{j-1}·V_{j-1}.
        wgmma::wait<1>();  // S_j is in; P_{j-1}·V_{j-1} may still run
        release(empty_k(st));
        if (OwnO && j == Tcount - 1) release(q_empty);  // [own-o]
        softmax(j);
        wgmma::wait<0>();
        release(empty_v(prev));
        rescale_and_pack();
      }
      const int last = (g + Tcount - 1) % Stages;
      mbar_wait(full_v(last), full_parity(g + Tcount - 1, Stages));
      turn_begin();
      wgmma::fence();
      issue_pv(last);
      turn_end();
      wgmma::wait<0>();
      release(empty_v(last));
      g += Tcount;
      ++items;
    }

    T* O = static_cast<T*>(p.o) + it.b * p.o_sb + it.h * p.o_sh;
    float* Lse = p.lse + it.b * p.lse_sb + it.h * p.lse_sh;
    const int wr = 64 * c + w0;  // the warp's first row in the tile
    constexpr int kChunks = D / 8;
    if (Tcount == 0) {
      // [persistent] An item that sees no key: O = 0 and L = +∞, straight out (no staging: over Q, the
      // producer may already be loading the next item's Q there).
#pragma unroll
      for (int k = lane; k < 16 * kChunks; k += 32) {
        const int row = wr + k / kChunks, ch = k % kChunks;
        if (i0 + row < p.N) *reinterpret_cast<uint4*>(O + int64_t(i0 + row) * p.o_sn + 8 * ch) = make_uint4(0, 0, 0, 0);
      }
      if (lane < 16 && i0 + wr + lane < p.N) Lse[i0 + wr + lane] = INFINITY;
      continue;
    }
    // [o-staging] Over Q: the warpgroup's last wgmma has read its Q rows before any of its warps writes
    // O over them (the other consumer's rows are its own business). [own-o] In O's own tile, no wait.
    if (!OwnO) warpgroup_sync(c, C);
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
          asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(o_base + wgmma::sw128_offset(row, 64 * pn + 8 * n + cc.col, Br)), "r"(v));
        }
    if (m16n8k16::thread_in_group(lane) == 0)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int row = i0 + wr + m16n8k16::group(lane) + 8 * hr;
        if (row < p.N) Lse[row] = l[hr] > 0.0f ? (m[hr] + log2f(l[hr])) * kLn2 : INFINITY;
      }
    __syncwarp();
#pragma unroll
    for (int k = lane; k < 16 * kChunks; k += 32) {
      const int row = wr + k / kChunks, ch = k % kChunks;
      if (i0 + row >= p.N) continue;
      uint4 v;
      asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "r"(o_base + wgmma::sw128_offset(row, 8 * ch, Br)));
      *reinterpret_cast<uint4*>(O + int64_t(i0 + row) * p.o_sn + 8 * ch) = v;
    }
    // [persistent] Every lane has read its staged rows before any lane stages the next item's; over
    // Q, the warp's rows are then free for the next Q ([own-o]: released after the last S instead).
    __syncwarp();
    if (!OwnO) release(q_empty);
  }
  if (c == 0) asm volatile("bar.sync 1, 256;\n" ::: "memory");  // [pingpong] the last hand-on
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
      throw Unsupported("step20: the driver has no cuTensorMapEncodeTiled (CUDA 12 or later is needed for TMA)");
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
    throw std::invalid_argument("step20: cuTensorMapEncodeTiled refused a tensor (error " + std::to_string(int(r)) +
                                "): strides must be multiples of 16 bytes, the base 16-byte aligned");
  return m;
}

// [persistent] The device's SMs and L2, asked once per device.
struct DeviceFacts {
  int sms = 0;
  int64_t l2 = 0;
};
DeviceFacts device_facts() {
  static int known = -1;
  static DeviceFacts f;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  if (known != dev) {
    int l2 = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    f.l2 = l2;
    known = dev;
  }
  return f;
}

template <class T, int D, int Ex, bool Lazy>
void launch_typed(const AttnParams& p, int ablation, cudaStream_t st) {
  constexpr Schedule S = schedule_for(D);
  const size_t smem = size_t(smem_bytes(S, D));
  auto kernel = step20_persistent<T, D, S.Br, S.Bc, S.stages, S.own_o, Ex, Lazy>;
  static bool configured = false;  // per instantiation
  if (!configured) {
    int dev = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (size_t(optin) < smem)
      throw Unsupported("step20: " + std::to_string(smem) + " bytes of shared memory per block needed; this GPU allows " +
                        std::to_string(optin));
    cudaFuncAttributes fa{};
    CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
    if (fa.binaryVersion != 90)  // [sm90a]
      throw Unsupported("step20: this build has no sm_90a code for its kernel (it runs sm_" + std::to_string(fa.binaryVersion) +
                        "): configure with 90 in CMAKE_CUDA_ARCHITECTURES");
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    configured = true;
  }
  const bool bf = std::is_same_v<T, __nv_bfloat16>;
  Maps maps;
  maps.q = encode_map(p.q, bf, D, p.N, p.H, p.B, p.q_sn, p.q_sh, p.q_sb, S.Br);
  const int hkv = p.Hkv > 0 ? p.Hkv : p.H;  // [gqa] K and V have their own number of heads
  maps.k = encode_map(p.k, bf, D, p.Nk, hkv, p.B, p.k_sn, p.k_sh, p.k_sb, S.Bc);
  maps.v = encode_map(p.v, bf, D, p.Nk, hkv, p.B, p.v_sn, p.v_sh, p.v_sb, S.Bc);
  // [work-order] The items in chunks of heads whose K and V fit half the L2, longest first with the
  // mask or a window; [persistent] one block per SM walks them (with --ablate persistent, one per item).
  const DeviceFacts dev = device_facts();
  Walk walk;
  walk.order = WorkOrder{p.B, p.H, num_tiles(p.N, S.Br), chunk_heads(p.H, hkv, p.Nk, D, dev.l2), p.causal || p.window > 0};
  walk.lpt = ablation != kNoLpt;
  const int64_t items = walk.order.items();
  if (items > (int64_t(1) << 30)) throw std::invalid_argument("step20: more than 2^30 work items");
  walk.items = int(items);
  // [dynamic] The counter in the workspace, zeroed on the launch's stream (a memset: part of the call).
  if (!p.workspace) throw std::logic_error("step20: no workspace for the work counter");
  walk.next = static_cast<int*>(p.workspace);
  CUDA_CHECK(cudaMemsetAsync(walk.next, 0, sizeof(int), st));
  const int64_t blocks = ablation == kNoPersistent ? items : std::min<int64_t>(items, dev.sms);
  kernel<<<unsigned(std::max<int64_t>(blocks, 1)), S.threads(), smem, st>>>(maps, p, walk);
  CUDA_CHECK_LAUNCH("step20_persistent");
}

// --exp2 for every type and d; [ablation] the lazy rescale taken out for fp16 at d = 64 and 128 only
// (the order and the persistence are run-time choices: every kernel takes them).
template <class T, int D>
void launch_exp2(const AttnParams& p, int exp2, int ablation, cudaStream_t st) {
  if (ablation == kNoLazy) {
    if constexpr (std::is_same_v<T, __half> && D <= 128) return launch_typed<T, D, kExp2Mufu, false>(p, ablation, st);
    throw Unsupported("step20: --ablate rescale is compiled for fp16 at d = 64 and 128 only");
  }
  switch (exp2) {
    case kExp2Poly: return launch_typed<T, D, kExp2Poly, true>(p, ablation, st);
    case kExp2Mixed: return launch_typed<T, D, kExp2Mixed, true>(p, ablation, st);
    default: return launch_typed<T, D, kExp2Mufu, true>(p, ablation, st);
  }
}

template <class T>
void launch_d(const AttnParams& p, int exp2, int ablation, cudaStream_t st) {
  switch (p.d) {
    case 64: return launch_exp2<T, 64>(p, exp2, ablation, st);
    case 128: return launch_exp2<T, 128>(p, exp2, ablation, st);
    case 256: return launch_exp2<T, 256>(p, exp2, ablation, st);
    default: throw Unsupported("step20: head dimension " + std::to_string(p.d) + " is not compiled (64, 128, 256: [stored-d])");
  }
}

}  // namespace

size_t workspace_bytes(const Shape&, const StepOptions&) { return sizeof(int); }  // [dynamic] the work counter

void launch(const AttnParams& p, const StepOptions& opts, void* stream) {
  auto aligned = [](const void* ptr, int64_t sb, int64_t sh, int64_t sn) {
    return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && sb % 8 == 0 && sh % 8 == 0 && sn % 8 == 0;
  };
  if (!aligned(p.q, p.q_sb, p.q_sh, p.q_sn) || !aligned(p.k, p.k_sb, p.k_sh, p.k_sn) ||
      !aligned(p.v, p.v_sb, p.v_sh, p.v_sn) || !aligned(p.o, p.o_sb, p.o_sh, p.o_sn))
    throw std::invalid_argument("step20: Q, K, V, O need 16-byte aligned pointers and strides that are multiples of 8");
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const int exp2 = exp2_of(opts), ablation = ablation_of(opts);
  if (ablation != kFull && exp2 != kExp2Mufu) throw Unsupported("step20: --ablate runs with --exp2 mufu (its default) only");
  if (p.bf16) launch_d<__nv_bfloat16>(p, exp2, ablation, st);
  else launch_d<__half>(p, exp2, ablation, st);
}

}  // namespace fa::step20
