// Step 18 — the GPU side: a rank's work (schedule.hpp's GPU half) and the ring of P ranks run as P pairs of
// streams on one GPU, a device-to-device copy from the previous rank's buffer standing in for
// NCCL. The per-shard kernel is step 12's forward, called on views of the rank's buffers; this
// file adds the merge by L, the rank's start and finish, and the ring's schedule of streams and
// events — the same dependencies ncclSend/ncclRecv give one process per GPU (ring_nccl.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernel/cuda_check.cuh"
#include "schedule.hpp"

namespace fa::step12 {
const StepInfo& info();
}

namespace fa::step18 {

namespace {

constexpr size_t kAlign = 256;
size_t up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

__device__ inline float to_f(__half x) { return __half2float(x); }
__device__ inline float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T> __device__ inline T from_f(float x);
template <> __device__ inline __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ inline __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Every element of the running O to 0 and of L to −inf: no key seen yet.
__global__ void step18_ring_init(float* o, float* l, int64_t rows, int d) {
  const int64_t n = rows * d;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    o[e] = 0.0f;
    if (e < rows) l[e] = -INFINITY;
  }
}

// [merge] One warp per (b·h, row) of a call: the call's O_c (storage type) and L_c into the running
// O and L of the rank's row q0 + i,
//   L' = log(e^L + e^L_c),  O' = e^(L − L')·O + e^(L_c − L')·O_c,
// computed from m = max(L, L_c) so no exponential overflows. L_c = +inf (a row the call saw no key
// for) weighs 0.
template <class T>
__global__ void step18_ring_merge(const T* __restrict__ oc, const float* __restrict__ lc, float* o, float* l, int64_t BH,
                                  int64_t nq, int d, int64_t q0, int64_t rows) {
  const int64_t w = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= BH * rows) return;
  const int64_t bh = w / rows, i = w % rows, row = bh * nq + q0 + i;
  // lab:begin merge-kernel: the weights of the running (O, L) and of (O_c, L_c), then O and L …
  const float lraw = lc[bh * nq + i], lcv = lraw == INFINITY ? -INFINITY : lraw, la = l[row];
  const float mx = fmaxf(la, lcv);
  const float lnew = mx == -INFINITY ? -INFINITY : mx + logf(expf(la - mx) + expf(lcv - mx));
  const float wo = mx == -INFINITY ? 0.0f : expf(la - lnew), wc = mx == -INFINITY ? 0.0f : expf(lcv - lnew);
  const T* crow = oc + (bh * nq + i) * d;
  float* orow = o + row * d;
  for (int c = lane; c < d; c += 32) orow[c] = wo * orow[c] + wc * to_f(crow[c]);
  __syncwarp();  // every lane has read L before lane 0 writes it
  if (lane == 0) l[row] = lnew;
  // lab:end
}

// The rank's rows into the whole sequence's O and L: local row → the position of its part. A row
// that saw no key at all (only with causal and N > Nk): O = 0, L = +inf.
template <class T>
__global__ void step18_ring_finish(const float* o, const float* l, Shard sh, int64_t nq, int H, int d, int64_t BH, T* out,
                                   int64_t o_sb, int64_t o_sh, int64_t o_sn, float* lse, int64_t l_sb, int64_t l_sh) {
  const int64_t rows = sh.size();
  const int64_t w = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= BH * rows) return;
  const int64_t bh = w / rows, i = w % rows, b = bh / H, h = bh % H;
  const int p = i < sh.part[0].size() ? 0 : 1;
  const int64_t pos = sh.part[p].lo + i - sh.offset(p);
  const float li = l[bh * nq + i];
  const float* orow = o + (bh * nq + i) * d;
  T* dst = out + b * o_sb + h * o_sh + pos * o_sn;
  for (int c = lane; c < d; c += 32) dst[c] = from_f<T>(li == -INFINITY ? 0.0f : orow[c]);
  if (lane == 0) lse[b * l_sb + h * l_sh + pos] = li == -INFINITY ? INFINITY : li;
}

// prepare(): the rows of a shard out of the whole sequence's tensor ([B, heads, n, d], strided)
// into a rank's buffer ([B, heads, rows, d], contiguous): what each rank holds before the call.
__global__ void step18_ring_gather(const uint16_t* src, int64_t sb, int64_t sh, int64_t sn, Shard s, int heads, int d,
                                   uint16_t* dst, int64_t rows, int64_t B) {
  const int64_t n = B * heads * s.size() * d;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = e % d, i = (e / d) % s.size(), bh = e / (d * s.size()), b = bh / heads, h = bh % heads;
    const int p = i < s.part[0].size() ? 0 : 1;
    const int64_t pos = s.part[p].lo + i - s.offset(p);
    dst[(bh * rows + i) * d + c] = src[b * sb + h * sh + pos * sn + c];
  }
}

int grid_for(int64_t warps) { return int((warps * 32 + 255) / 256); }

}  // namespace

size_t kv_bytes(const Ring& g) { return size_t(2) * g.B * g.Hkv * g.nk() * g.d * 2; }

size_t rank_bytes(const Ring& g) {
  const size_t qe = size_t(g.B) * g.H * g.nq();
  return up(qe * g.d * 2) + 3 * up(kv_bytes(g)) + up(qe * g.d * 2) + up(qe * 4) + up(qe * g.d * 4) + up(qe * 4);
}

RankMem rank_mem(const Ring& g, void* base) {
  const size_t qe = size_t(g.B) * g.H * g.nq();
  unsigned char* p = static_cast<unsigned char*>(base);
  RankMem m;
  m.q = p, p += up(qe * g.d * 2);
  for (void*& kv : m.kv) kv = p, p += up(kv_bytes(g));
  m.oc = p, p += up(qe * g.d * 2);
  m.lc = reinterpret_cast<float*>(p), p += up(qe * 4);
  m.o = reinterpret_cast<float*>(p), p += up(qe * g.d * 4);
  m.l = reinterpret_cast<float*>(p);
  return m;
}

void enqueue_init(const Ring& g, const RankMem& m, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const int64_t rows = int64_t(g.B) * g.H * g.nq();
  if (rows == 0) return;
  step18_ring_init<<<int(std::min<int64_t>((rows * g.d + 255) / 256, 4096)), 256, 0, st>>>(m.o, m.l, rows, g.d);
  CUDA_CHECK_LAUNCH("step18_ring_init");
}

void enqueue_step(const Ring& g, const RankMem& m, int r, int t, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const StepInfo& per_shard = step12::info();
  const Calls cs = step_calls(g.layout, g.P, r, t, g.N, g.Nk, g.causal);
  const int64_t nq = g.nq(), nk = g.nk(), d = g.d, BH = int64_t(g.B) * g.H;
  const auto* kbase = static_cast<const unsigned char*>(m.kv[held(t)]);
  for (int i = 0; i < cs.n; ++i) {
    const Call& c = cs.c[i];
    // [calls] Step 12's forward on views of the rank's buffers: rows [q0, q1) of its queries, keys
    // [k0, k1) of the K/V it holds, O_c and L_c from row 0 of the call's buffers.
    AttnParams a;
    a.q = static_cast<const unsigned char*>(m.q) + size_t(c.q0 * d) * 2;
    a.k = kbase + size_t(c.k0 * d) * 2;
    a.v = kbase + kv_bytes(g) / 2 + size_t(c.k0 * d) * 2;
    a.o = m.oc;
    a.lse = m.lc;
    a.q_sb = g.H * nq * d, a.q_sh = nq * d, a.q_sn = d;
    a.k_sb = a.v_sb = g.Hkv * nk * d, a.k_sh = a.v_sh = nk * d, a.k_sn = a.v_sn = d;
    a.o_sb = g.H * nq * d, a.o_sh = nq * d, a.o_sn = d;
    a.lse_sb = g.H * nq, a.lse_sh = nq;
    a.B = g.B, a.H = g.H, a.Hkv = g.Hkv, a.N = int(c.rows()), a.Nk = int(c.keys()), a.d = g.d;
    a.causal = c.causal, a.bf16 = g.bf16, a.scale = g.scale;
    per_shard.launch(a, {}, stream);
    const int64_t warps = BH * c.rows();
    if (g.bf16)
      step18_ring_merge<__nv_bfloat16><<<grid_for(warps), 256, 0, st>>>(static_cast<const __nv_bfloat16*>(m.oc), m.lc, m.o, m.l,
                                                                          BH, nq, g.d, c.q0, c.rows());
    else
      step18_ring_merge<__half><<<grid_for(warps), 256, 0, st>>>(static_cast<const __half*>(m.oc), m.lc, m.o, m.l, BH, nq, g.d,
                                                                   c.q0, c.rows());
    CUDA_CHECK_LAUNCH("step18_ring_merge");
  }
}

void enqueue_finish(const Ring& g, const RankMem& m, int r, void* o, int64_t o_sb, int64_t o_sh, int64_t o_sn, float* lse,
                    int64_t l_sb, int64_t l_sh, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const Shard sh = shard_of(g.layout, g.P, r, g.N);
  const int64_t BH = int64_t(g.B) * g.H, warps = BH * sh.size();
  if (warps == 0) return;
  if (g.bf16)
    step18_ring_finish<__nv_bfloat16><<<grid_for(warps), 256, 0, st>>>(m.o, m.l, sh, g.nq(), g.H, g.d, BH,
                                                                         static_cast<__nv_bfloat16*>(o), o_sb, o_sh, o_sn, lse, l_sb, l_sh);
  else
    step18_ring_finish<__half><<<grid_for(warps), 256, 0, st>>>(m.o, m.l, sh, g.nq(), g.H, g.d, BH, static_cast<__half*>(o), o_sb,
                                                                  o_sh, o_sn, lse, l_sb, l_sh);
  CUDA_CHECK_LAUNCH("step18_ring_finish");
}

// ---- the ring on one GPU: P ranks, P pairs of streams ------------------------------------------

namespace {

Ring ring_of(const AttnParams& p, const StepOptions& o) {
  Ring g;
  g.B = p.B, g.H = p.H, g.Hkv = p.Hkv > 0 ? p.Hkv : p.H, g.N = p.N, g.Nk = p.Nk, g.d = p.d;
  g.causal = p.causal, g.bf16 = p.bf16, g.scale = p.scale;
  g.P = ranks_of(o), g.layout = layout_of(o);
  return g;
}

// The streams and events of the ring, made once per process for up to kMaxRanks ranks. Each rank
// computes on comp[r] and receives on comm[r]; arrived[r][t]: rank r's buffer for step t is
// filled; computed[r][t]: its compute of step t is done. The timeline's events are the only ones
// that time.
// [priority] The receive streams exist twice: at the device's highest stream priority and at the
// default. A copy within one GPU, like NCCL's send and receive, may run as blocks on the SMs; with
// every SM busy with the attention blocks of P ranks, a block of a default-priority stream waits
// behind all the queued ones, a high-priority stream's goes first as soon as one retires.
struct Pool {
  cudaStream_t comp[kMaxRanks], comm[kMaxRanks], comm_low[kMaxRanks];
  cudaEvent_t fork, joined[kMaxRanks];
  cudaEvent_t arrived[kMaxRanks][kMaxRanks], computed[kMaxRanks][kMaxRanks];
  cudaEvent_t start, cb[kMaxRanks][kMaxRanks], ce[kMaxRanks][kMaxRanks], xb[kMaxRanks][kMaxRanks], xe[kMaxRanks][kMaxRanks];
  Pool() {
    const unsigned sync = cudaEventDisableTiming;
    int least = 0, greatest = 0;  // numerically: greatest priority is the lowest number
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    for (int r = 0; r < kMaxRanks; ++r) {
      CUDA_CHECK(cudaStreamCreateWithFlags(&comp[r], cudaStreamNonBlocking));
      CUDA_CHECK(cudaStreamCreateWithPriority(&comm[r], cudaStreamNonBlocking, greatest));
      CUDA_CHECK(cudaStreamCreateWithFlags(&comm_low[r], cudaStreamNonBlocking));
      CUDA_CHECK(cudaEventCreateWithFlags(&joined[r], sync));
      for (int t = 0; t < kMaxRanks; ++t) {
        CUDA_CHECK(cudaEventCreateWithFlags(&arrived[r][t], sync));
        CUDA_CHECK(cudaEventCreateWithFlags(&computed[r][t], sync));
        for (cudaEvent_t* e : {&cb[r][t], &ce[r][t], &xb[r][t], &xe[r][t]}) CUDA_CHECK(cudaEventCreate(e));
      }
    }
    CUDA_CHECK(cudaEventCreateWithFlags(&fork, sync));
    CUDA_CHECK(cudaEventCreate(&start));
  }
};
Pool& pool() {
  static Pool p;  // lives as long as the process (the CUDA context takes it down at exit)
  return p;
}

RingMode g_mode = RingMode::concurrent;
bool g_timeline = false, g_comm_high = true;
int g_last_P = 0;

}  // namespace

void set_ring_mode(RingMode m, bool timeline) { g_mode = m, g_timeline = timeline; }
void set_comm_priority(bool high) { g_comm_high = high; }

std::vector<RingSpan> last_timeline() {
  std::vector<RingSpan> out;
  if (!g_timeline || g_last_P == 0) return out;
  Pool& k = pool();
  CUDA_CHECK(cudaDeviceSynchronize());
  auto ms = [&](cudaEvent_t e) {
    float x = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&x, k.start, e));
    return double(x);
  };
  for (int t = 0; t < g_last_P; ++t)
    for (int r = 0; r < g_last_P; ++r) {
      out.push_back({r, t, false, ms(k.cb[r][t]), ms(k.ce[r][t])});
      if (t + 1 < g_last_P) out.push_back({r, t, true, ms(k.xb[r][t]), ms(k.xe[r][t])});
    }
  return out;
}

size_t workspace_bytes(const Shape& s, const StepOptions& o) {
  const Ring g = ring_of(s, o);
  return size_t(g.P) * up(rank_bytes(g));
}

// Every rank's buffers from the whole sequence: its queries, its home K/V shard. Everything else
// in the workspace is NaN (0xFF bytes) until something writes it.
void prepare(const Shape& s, const AttnParams& p, const StepOptions& o, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const Ring g = ring_of(s, o);
  if (!p.workspace) throw std::logic_error("step18: prepare() without its workspace");
  CUDA_CHECK(cudaMemsetAsync(p.workspace, 0xFF, workspace_bytes(s, o), st));
  for (int r = 0; r < g.P; ++r) {
    const RankMem m = rank_mem(g, static_cast<unsigned char*>(p.workspace) + size_t(r) * up(rank_bytes(g)));
    const Shard sq = shard_of(g.layout, g.P, r, g.N), sk = shard_of(g.layout, g.P, r, g.Nk);
    auto gather = [&](const void* src, int64_t sb, int64_t sh, int64_t sn, const Shard& s0, int heads, void* dst, int64_t rows) {
      if (s0.size() == 0) return;
      step18_ring_gather<<<1024, 256, 0, st>>>(static_cast<const uint16_t*>(src), sb, sh, sn, s0, heads, g.d,
                                               static_cast<uint16_t*>(dst), rows, g.B);
      CUDA_CHECK_LAUNCH("step18_ring_gather");
    };
    gather(p.q, p.q_sb, p.q_sh, p.q_sn, sq, g.H, m.q, g.nq());
    gather(p.k, p.k_sb, p.k_sh, p.k_sn, sk, g.Hkv, m.kv[0], g.nk());
    gather(p.v, p.v_sb, p.v_sh, p.v_sn, sk, g.Hkv, static_cast<unsigned char*>(m.kv[0]) + kv_bytes(g) / 2, g.nk());
  }
  CUDA_CHECK(cudaStreamSynchronize(st));
}

void launch(const AttnParams& p, const StepOptions& opts, void* stream) {
  cudaStream_t main = static_cast<cudaStream_t>(stream);
  const Ring g = ring_of(p, opts);
  if (!p.workspace) throw std::logic_error("step18: launch() without its workspace (prepare() fills it)");
  const int P = g.P;
  std::vector<RankMem> m;
  for (int r = 0; r < P; ++r) m.push_back(rank_mem(g, static_cast<unsigned char*>(p.workspace) + size_t(r) * up(rank_bytes(g))));
  Pool& k = pool();
  g_last_P = P;
  const bool serial = g_mode == RingMode::serial, tl = g_timeline;
  if (tl) CUDA_CHECK(cudaEventRecord(k.start, main));
  // Serial: every rank's work on the launch's stream, one after another (each rank's step then
  // takes what it would take on a GPU of its own). Concurrent: P ranks' streams, forked here.
  auto comp = [&](int r) { return serial ? main : k.comp[r]; };
  auto comm = [&](int r) { return serial ? main : g_comm_high ? k.comm[r] : k.comm_low[r]; };  // [priority]
  if (!serial) {
    CUDA_CHECK(cudaEventRecord(k.fork, main));
    for (int r = 0; r < P; ++r) {
      CUDA_CHECK(cudaStreamWaitEvent(k.comp[r], k.fork, 0));
      CUDA_CHECK(cudaStreamWaitEvent(comm(r), k.fork, 0));
    }
  }
  for (int r = 0; r < P; ++r) enqueue_init(g, m[size_t(r)], comp(r));
  for (int t = 0; t < P; ++t) {
    // [ring] Transfers first (the copy engines start at once): rank r pulls what rank r − 1 holds at
    // step t into its buffer for step t + 1 — once that buffer's last compute (step t − 1) is done,
    // once rank r − 1 has its step-t buffer, and once rank r + 1 has finished reading the one rank r
    // is about to overwrite (it copied it at step t − 1). ncclSend/ncclRecv give these for free.
    auto transfer = [&](int r) {
      const int prev = (r + P - 1) % P, next = (r + 1) % P;
      if (!serial) {
        if (t >= 2) CUDA_CHECK(cudaStreamWaitEvent(comm(r), k.computed[r][t - 1], 0));
        if (t >= 1) CUDA_CHECK(cudaStreamWaitEvent(comm(r), k.arrived[prev][t], 0));
        if (t >= 2) CUDA_CHECK(cudaStreamWaitEvent(comm(r), k.arrived[next][t], 0));
      }
      if (tl) CUDA_CHECK(cudaEventRecord(k.xb[r][t], comm(r)));
      CUDA_CHECK(cudaMemcpyAsync(m[size_t(r)].kv[held(t + 1)], m[size_t(prev)].kv[held(t)], kv_bytes(g), cudaMemcpyDeviceToDevice,
                                 comm(r)));
      if (tl) CUDA_CHECK(cudaEventRecord(k.xe[r][t], comm(r)));
      if (!serial) CUDA_CHECK(cudaEventRecord(k.arrived[r][t + 1], comm(r)));
    };
    if (!serial && t + 1 < P)
      for (int r = 0; r < P; ++r) transfer(r);
    for (int r = 0; r < P; ++r) {
      if (!serial && t >= 1) CUDA_CHECK(cudaStreamWaitEvent(comp(r), k.arrived[r][t], 0));
      if (tl) CUDA_CHECK(cudaEventRecord(k.cb[r][t], comp(r)));
      enqueue_step(g, m[size_t(r)], r, t, comp(r));
      if (tl) CUDA_CHECK(cudaEventRecord(k.ce[r][t], comp(r)));
      if (!serial) CUDA_CHECK(cudaEventRecord(k.computed[r][t], comp(r)));
    }
    if (serial && t + 1 < P)  // after every rank's step t: no buffer it still reads is overwritten
      for (int r = 0; r < P; ++r) transfer(r);
  }
  for (int r = 0; r < P; ++r) {
    enqueue_finish(g, m[size_t(r)], r, p.o, p.o_sb, p.o_sh, p.o_sn, p.lse, p.lse_sb, p.lse_sh, comp(r));
    if (!serial) {
      CUDA_CHECK(cudaEventRecord(k.joined[r], comp(r)));
      CUDA_CHECK(cudaStreamWaitEvent(main, k.joined[r], 0));
    }
  }
}

}  // namespace fa::step18
