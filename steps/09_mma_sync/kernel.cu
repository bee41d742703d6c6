// Step 09 — step 07's algorithm with hand-written mma.sync.m16n8k16: S, P and O in registers.
//
//   step09_mma   a block per (Q tile, head), one warp per 16 query rows. Each warp keeps its Q
//                rows as A fragments, S and O as accumulators, and P — converted in registers —
//                as the A operand of P·V. K_j and V_j are the only tiles in shared memory.
//
// Layout of every fragment: common/kernel/mma_layout.hpp (lane = 4·g + t holds rows g and g + 8 of each
// 16 × 8 accumulator tile, columns 2t and 2t + 1).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernel/arch.cuh"  // FA_SM80_ONLY: mma.sync.m16n8k16 before sm_80 traps (the host refuses first)
#include "kernel/cuda_check.cuh"
#include "schedule.hpp"

namespace fa::step09 {

constexpr int Br = kSchedule.Br;
constexpr int Bc = kSchedule.Bc;
constexpr int W = kSchedule.warps();
constexpr int kThreads = W * 32;

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
template <class T> __device__ inline uint32_t pack2_raw(T lo, T hi) {
  return uint32_t(*reinterpret_cast<const uint16_t*>(&lo)) | (uint32_t(*reinterpret_cast<const uint16_t*>(&hi)) << 16);
}

// [mma] D = A·B + D for one 16 × 8 × 16 tile: 4 A registers, 2 B registers, 4 fp32 accumulators.
template <class T> __device__ inline void mma16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);
template <> __device__ inline void mma16816<__half>(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  FA_SM80_ONLY(asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1])));
}
template <> __device__ inline void mma16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  FA_SM80_ONLY(asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1])));
}

// [load-tile] Rows [r0, r0 + Bc) of a (rows × D) matrix -> shared memory (16-byte loads, zero-fill).
template <class T, int D>
__device__ inline void load_rows(T* __restrict__ sm, const T* __restrict__ g, int64_t ld, int r0, int rows) {
  constexpr int kVecPerRow = D / 8;
  for (int c = threadIdx.x; c < Bc * kVecPerRow; c += blockDim.x) {
    const int r = c / kVecPerRow, col = (c % kVecPerRow) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r0 + r < rows) v = *reinterpret_cast<const uint4*>(g + int64_t(r0 + r) * ld + col);
    *reinterpret_cast<uint4*>(sm + r * (D + kPad) + col) = v;
  }
}

template <class T, int D>
__global__ void __launch_bounds__(kThreads) step09_mma(AttnParams p) {
  __shared__ alignas(16) T Ks[Bc][D + kPad];
  __shared__ alignas(16) T Vs[Bc][D + kPad];
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int i0 = blockIdx.x * Br, rows = min(Br, p.N - i0), r0 = i0 + 16 * warp;  // the warp's first row
  const T* Q = static_cast<const T*>(p.q) + b * p.q_sb + h * p.q_sh;
  const T* K = static_cast<const T*>(p.k) + b * p.k_sb + h * p.k_sh;
  const T* V = static_cast<const T*>(p.v) + b * p.v_sb + h * p.v_sh;
  T* O = static_cast<T*>(p.o) + b * p.o_sb + h * p.o_sh;
  float* Lse = p.lse + b * p.lse_sb + h * p.lse_sh;

  // [q-frags] The warp's 16 rows of Q as A fragments, straight from global memory, for good.
  uint32_t qa[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const m16n8k16::Coord c = m16n8k16::a_elem(lane, 2 * r);  // elements 2r and 2r + 1: adjacent in a row
      const int row = r0 + c.row;
      qa[kk][r] = row < p.N ? *reinterpret_cast<const uint32_t*>(Q + int64_t(row) * p.q_sn + 16 * kk + c.col) : 0u;
    }

  // [o-regs] O (16 × D: D/8 accumulator tiles), and per row (g and g + 8) the running max m in
  // the log2 domain and this lane's part of the running sum l.
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const float sl2 = p.scale * kLog2e;  // [exp2] exp(scale·s − M) = exp2(scale·log2(e)·s − M')

  const int Tend = int(kv_tiles_for(i0, i0 + rows, p.N, p.Nk, Bc, p.causal));
  for (int j = 0; j < Tend; ++j) {
    const int j0 = j * Bc;
    __syncthreads();  // everyone is done with the previous K_j, V_j
    load_rows<T, D>(&Ks[0][0], K, p.k_sn, j0, p.Nk);
    load_rows<T, D>(&Vs[0][0], V, p.v_sn, j0, p.Nk);
    __syncthreads();

    // [s-regs] S = Q K_jᵀ for the warp's rows: Bc/8 accumulator tiles. B = K_jᵀ: element (k, n) is
    // K_j[n][k], so a B register's two halves are neighbours along a row of K_j: one 32-bit load.
    float s[Bc / 8][4];
#pragma unroll
    for (int n = 0; n < Bc / 8; ++n) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t kb[2];
        // lab:begin k-frag {O L}: [s-regs]: kb[r] = B elements 2r, 2r + 1 (b_elem) of K_jᵀ …
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const m16n8k16::Coord c = m16n8k16::b_elem(lane, 2 * r);  // (k, n) -> K_j[8n + c.col][16kk + c.row]
          kb[r] = *reinterpret_cast<const uint32_t*>(&Ks[8 * n + c.col][16 * kk + c.row]);
        }
        // lab:end
        mma16816<T>(s[n], qa[kk], kb);
      }
    }

    // [softmax-regs] Scale into the log2 domain and mask where needed; each lane holds rows g and
    // g + 8 of every tile, two columns each: the four lanes of a group share a row, so the row
    // max and sum take two shuffles.
    const bool masked = needs_mask(i0, i0 + rows, j0, p.N, p.Nk, Bc, p.causal);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < Bc / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const m16n8k16::Coord c = m16n8k16::c_elem(lane, e);
        float v = s[n][e] * sl2;
        if (masked && j0 + 8 * n + c.col >= visible_keys(r0 + c.row, p.N, p.Nk, p.causal)) v = -INFINITY;  // [causal-mask]
        s[n][e] = v;
        mx[e / 2] = fmaxf(mx[e / 2], v);
      }
    float alpha[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
      mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
      const float m_new = fmaxf(m[hr], mx[hr]);
      alpha[hr] = m[hr] == -INFINITY ? 0.0f : exp2f(m[hr] - m_new);  // [rescale-guard]
      m[hr] = m_new;
      l[hr] *= alpha[hr];
    }
    // P = exp2(S − m), in place; this lane's share of each row sum.
#pragma unroll
    for (int n = 0; n < Bc / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float pv = m[e / 2] == -INFINITY ? 0.0f : exp2f(s[n][e] - m[e / 2]);
        s[n][e] = pv;
        l[e / 2] += pv;
      }
    // [deferred] Õ *= alpha (rows g: elements 0, 1; rows g + 8: elements 2, 3).
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[n][e] *= alpha[e / 2];

    // [c-to-a] P's accumulator tiles 2kk and 2kk + 1 are, converted, the A fragment of keys
    // [16kk, 16kk + 16): A register r holds C tile 2kk + r/2, elements 2(r%2) and 2(r%2) + 1.
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk) {
      uint32_t pa[4];
      // lab:begin c-to-a {O}: [c-to-a]: the A fragment of P for keys 16kk.. from the S accumulators …
#pragma unroll
      for (int r = 0; r < 4; ++r) pa[r] = pack2<T>(s[2 * kk + r / 2][2 * (r % 2)], s[2 * kk + r / 2][2 * (r % 2) + 1]);
      // lab:end
      // [pv] Õ += P V_j: B = V_j, element (k, n) = V_j[k][n]; a register's two halves are two
      // keys of one column — two 16-bit loads (step 10's ldmatrix.trans does this in one).
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        uint32_t vb[2];
        // lab:begin v-frag {O}: [pv]: vb[r] = B elements 2r, 2r + 1 (b_elem) of V_j …
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const m16n8k16::Coord c = m16n8k16::b_elem(lane, 2 * r);
          vb[r] = pack2_raw(Vs[16 * kk + c.row][8 * n + c.col], Vs[16 * kk + c.row + 1][8 * n + c.col]);
        }
        // lab:end
        mma16816<T>(o[n], pa, vb);
      }
    }
  }

  // [final-divide] The four lanes of a group add their parts of l; O = Õ / l, L = (m + log2 l)·ln 2.
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 1);
    l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 2);
  }
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
      const m16n8k16::Coord c = m16n8k16::c_elem(lane, e);
      const int row = r0 + c.row;
      if (row >= p.N) continue;
      const float li = l[e / 2];
      const float x0 = li > 0.0f ? o[n][e] / li : 0.0f, x1 = li > 0.0f ? o[n][e + 1] / li : 0.0f;
      *reinterpret_cast<uint32_t*>(O + int64_t(row) * p.o_sn + 8 * n + c.col) = pack2<T>(x0, x1);
    }
  if (m16n8k16::thread_in_group(lane) == 0)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = r0 + m16n8k16::group(lane) + 8 * hr;
      if (row < p.N) Lse[row] = l[hr] > 0.0f ? (m[hr] + log2f(l[hr])) * kLn2 : INFINITY;
    }
}

namespace {

template <class T, int D>
void launch_typed(const AttnParams& p, cudaStream_t st) {
  const dim3 grid(unsigned(num_tiles(p.N, Br)), unsigned(p.B * p.H));
  step09_mma<T, D><<<grid, kThreads, 0, st>>>(p);
  CUDA_CHECK_LAUNCH("step09_mma");
}

template <class T>
void launch_d(const AttnParams& p, cudaStream_t st) {
  switch (p.d) {
    case 16: return launch_typed<T, 16>(p, st);
    case 32: return launch_typed<T, 32>(p, st);
    case 64: return launch_typed<T, 64>(p, st);
    case 128: return launch_typed<T, 128>(p, st);
    default: throw std::invalid_argument("step09: head dimension " + std::to_string(p.d) + " is not compiled (16, 32, 64, 128)");
  }
}

}  // namespace

size_t workspace_bytes(const Shape&, const StepOptions&) { return 0; }

void launch(const AttnParams& p, const StepOptions&, void* stream) {
  auto aligned = [](const void* ptr, int64_t sb, int64_t sh, int64_t sn) {
    return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && sb % 8 == 0 && sh % 8 == 0 && sn % 8 == 0;
  };
  if (!aligned(p.q, p.q_sb, p.q_sh, p.q_sn) || !aligned(p.k, p.k_sb, p.k_sh, p.k_sn) ||
      !aligned(p.v, p.v_sb, p.v_sh, p.v_sn) || !aligned(p.o, p.o_sb, p.o_sh, p.o_sn))
    throw std::invalid_argument("step09: Q, K, V, O need 16-byte aligned pointers and strides that are multiples of 8");
  if (int64_t(p.B) * p.H > 65535) throw std::invalid_argument("step09: B·H must be at most 65535 (grid dimension)");
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (p.bf16) launch_d<__nv_bfloat16>(p, st);
  else launch_d<__half>(p, st);
}

}  // namespace fa::step09
