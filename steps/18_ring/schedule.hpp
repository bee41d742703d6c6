// Step 18 — ring attention: one sequence split across P ranks (GPUs), the keys and values passed
// around a ring while each rank multiplies the shard it holds.
//
// Steps 01–17 fit a sequence on one GPU. When it does not (a million tokens of K and V, or the
// time one GPU takes over them), each of P ranks keeps 1/P of the queries and starts with 1/P of
// the keys and values. In P ring steps every rank sees every K/V shard: at step t rank r holds
// rank (r − t)'s shard, runs step 12's forward of its queries against it (O and L of that part),
// merges that into its running O and L by L ([merge], the online softmax's rescaling once more),
// and meanwhile passes the shard on to rank r + 1 ([ring]). Nothing but K and V travels.
//
// Causal attention makes the contiguous split unfair: the rank with the last queries sees every
// key, the first sees only its own. [zigzag] Each rank takes two of 2P chunks, r and 2P − 1 − r,
// so every rank does the same work at every step.
//
// This file is the plan, shared by the blueprint (P ranks simulated on the CPU), the P-streams
// launcher on one GPU and the NCCL program (one process per GPU): who holds which rows, who holds
// which K/V shard at each step, and which calls of the per-shard kernel a step makes.
#pragma once
#include <cstdint>
#include <cstddef>
#include <string>
#include <vector>

#include "kernel/attn_params.hpp"
#include "core/step.hpp"

namespace fa::step18 {

inline constexpr int kMaxRanks = 8;

// [zigzag] How a sequence is cut: zigzag (two chunks of 2P per rank, r and 2P − 1 − r) or
// contiguous (chunk r of P).
enum class Layout { zigzag, contiguous };

struct Range {
  int64_t lo = 0, hi = 0;  // [lo, hi)
  FA_HD constexpr int64_t size() const { return hi - lo; }
};

// Chunk k of `chunks` equal-as-possible chunks of n tokens: sizes differ by at most one (ragged).
FA_HD constexpr Range chunk(int64_t n, int64_t chunks, int64_t k) { return Range{k * n / chunks, (k + 1) * n / chunks}; }

// The rows of a sequence of n tokens that rank r of P holds: one or two parts, stored one after
// the other in the rank's memory (local row = offset of its part + position − part.lo).
struct Shard {
  Range part[2];
  int parts = 0;
  FA_HD constexpr int64_t size() const { return parts == 2 ? part[0].size() + part[1].size() : part[0].size(); }
  FA_HD constexpr int64_t offset(int p) const { return p == 0 ? 0 : part[0].size(); }  // local row of part p's first
};
FA_HD constexpr Shard shard_of(Layout l, int P, int r, int64_t n) {
  Shard s;
  if (l == Layout::contiguous) {
    s.part[0] = chunk(n, P, r);
    s.parts = 1;
  } else {
    s.part[0] = chunk(n, 2 * P, r);
    s.part[1] = chunk(n, 2 * P, 2 * P - 1 - r);
    s.parts = 2;
  }
  return s;
}
// The largest shard of a sequence of n tokens (the buffers a rank allocates: every shard fits).
FA_HD constexpr int64_t max_shard(Layout l, int P, int64_t n) {
  int64_t m = 0;
  for (int r = 0; r < P; ++r) m = shard_of(l, P, r, n).size() > m ? shard_of(l, P, r, n).size() : m;
  return m;
}

// [ring] At ring step t (0 … P − 1) rank r holds the K/V shard of rank (r − t) mod P; it received
// it from rank r − 1, which held it at step t − 1.
FA_HD constexpr int source_of(int r, int t, int P) { return ((r - t) % P + P) % P; }

// [calls] One call of the per-shard kernel (step 12's forward): rows [q0, q1) of the rank's
// queries (local rows) against keys [k0, k1) of the K/V shard it holds (local rows), masked or
// not. A masked call is aligned bottom-right (step 12's convention: the call's last row sees its
// last key), which the ranges below are chosen to make the pair's true alignment.
struct Call {
  int64_t q0 = 0, q1 = 0, k0 = 0, k1 = 0;
  bool causal = false;
  FA_HD constexpr int64_t rows() const { return q1 - q0; }
  FA_HD constexpr int64_t keys() const { return k1 - k0; }
};
inline constexpr int kMaxCalls = 8;  // 2 query parts × 2 key parts × (masked + unmasked)
struct Calls {
  Call c[kMaxCalls];
  int n = 0;
};

// [pair-calls] Query rows qr (global positions, stored from local row qoff) against keys kr
// (global, from local key koff). Without the mask: one call. With it, key j is visible to query i
// when j <= i + delta (delta = Nk − N, bottom-right): the rows that see no key of kr make no call,
// the rows that see all of kr one unmasked call, and the rows between one masked call whose keys
// end where its last row's visible keys end — so step 12's alignment is this pair's.
FA_HD constexpr void pair_calls(Calls& out, Range qr, int64_t qoff, Range kr, int64_t koff, bool causal, int64_t delta) {
  if (qr.size() <= 0 || kr.size() <= 0) return;
  if (!causal) {
    out.c[out.n++] = Call{qoff, qoff + qr.size(), koff, koff + kr.size(), false};
    return;
  }
  // Row i sees keys of kr when i + delta >= kr.lo, all of them when i + delta >= kr.hi − 1.
  const int64_t first = kr.lo - delta > qr.lo ? kr.lo - delta : qr.lo;   // first row that sees one
  const int64_t full = kr.hi - 1 - delta > qr.lo ? kr.hi - 1 - delta : qr.lo;  // first row that sees all
  const int64_t m0 = first < qr.hi ? first : qr.hi, m1 = full < qr.hi ? (full > m0 ? full : m0) : qr.hi;
  if (m1 > m0)  // masked rows [m0, m1): their keys end at the last row's last visible key, m1 − 1 + delta
    out.c[out.n++] = Call{qoff + m0 - qr.lo, qoff + m1 - qr.lo, koff, koff + (m1 - 1 + delta) - kr.lo + 1, true};
  if (qr.hi > m1)
    out.c[out.n++] = Call{qoff + m1 - qr.lo, qoff + qr.size(), koff, koff + kr.size(), false};
}

// [coalesce] Two unmasked calls whose rows (or keys) are adjacent in the rank's memory and whose keys
// (or rows) are the same are one call: fewer, larger grids, one merge. And with N = Nk a rank's own
// shard against itself is, in local order, exactly step 12's causal mask over the whole shard (its
// late chunk sees all of its early one, its early chunk none of its late one): one call too.
FA_HD constexpr bool coalesce_two(Call& a, const Call& b) {
  if (a.causal || b.causal) return false;
  if (a.k0 == b.k0 && a.k1 == b.k1 && (a.q1 == b.q0 || b.q1 == a.q0)) {
    a.q0 = a.q0 < b.q0 ? a.q0 : b.q0, a.q1 = a.q1 > b.q1 ? a.q1 : b.q1;
    return true;
  }
  if (a.q0 == b.q0 && a.q1 == b.q1 && (a.k1 == b.k0 || b.k1 == a.k0)) {
    a.k0 = a.k0 < b.k0 ? a.k0 : b.k0, a.k1 = a.k1 > b.k1 ? a.k1 : b.k1;
    return true;
  }
  return false;
}
FA_HD constexpr void coalesce(Calls& cs) {
  for (bool merged = true; merged;) {
    merged = false;
    for (int i = 0; i < cs.n && !merged; ++i)
      for (int j = i + 1; j < cs.n && !merged; ++j)
        if (coalesce_two(cs.c[i], cs.c[j])) {
          cs.c[j] = cs.c[--cs.n];
          merged = true;
        }
  }
}

// The calls rank r makes at ring step t: its query parts against the parts of the K/V shard it
// holds then (rank source_of(r, t)), over N queries and Nk keys.
FA_HD constexpr Calls step_calls(Layout l, int P, int r, int t, int64_t N, int64_t Nk, bool causal) {
  Calls cs;
  const Shard q = shard_of(l, P, r, N), k = shard_of(l, P, source_of(r, t, P), Nk);
  if (causal && N == Nk && source_of(r, t, P) == r) {  // [coalesce] the shard against itself
    if (q.size() > 0) cs.c[cs.n++] = Call{0, q.size(), 0, q.size(), true};
    return cs;
  }
  for (int a = 0; a < q.parts; ++a)
    for (int b = 0; b < k.parts; ++b) pair_calls(cs, q.part[a], q.offset(a), k.part[b], k.offset(b), causal, Nk - N);
  coalesce(cs);
  return cs;
}

// [balance] The (query, key) pairs a rank computes at a step: what its kernels' time follows.
FA_HD constexpr int64_t step_pairs(Layout l, int P, int r, int t, int64_t N, int64_t Nk, bool causal) {
  const Calls cs = step_calls(l, P, r, t, N, Nk, causal);
  int64_t w = 0;
  for (int i = 0; i < cs.n; ++i) {
    const Call& c = cs.c[i];
    // a masked call of R rows and K keys, last row seeing all K: R·K − R·(R − 1)/2 when R <= K
    w += c.causal ? (c.rows() <= c.keys() ? c.rows() * c.keys() - c.rows() * (c.rows() - 1) / 2 : c.keys() * (c.keys() + 1) / 2)
                  : c.rows() * c.keys();
  }
  return w;
}

// The step's own flags: --ranks P (the ring's size; on one GPU, P streams) and --shard.
int ranks_of(const StepOptions& o);
Layout layout_of(const StepOptions& o);

// ---- The GPU side (kernel.cu) ----------------------------------------------------------------
// What one rank of the ring does on its GPU, shared by the P-streams launcher (P ranks on one GPU)
// and the NCCL program (ring_nccl.cu: one process per GPU). Only the transport differs: a
// device-to-device copy from the previous rank's buffer, or ncclSend/ncclRecv. Streams are
// cudaStream_t, passed as void*.

// The problem as every rank sees it: the whole sequence's shape, the ring, the layout.
struct Ring {
  int B = 0, H = 0, Hkv = 0, N = 0, Nk = 0, d = 0;
  bool causal = false, bf16 = false;
  float scale = 0.0f;
  int P = 1;
  Layout layout = Layout::zigzag;
  int64_t nq() const { return max_shard(layout, P, N); }   // query rows a rank's buffers hold
  int64_t nk() const { return max_shard(layout, P, Nk); }  // key rows a K/V buffer holds
};

// The ring of a problem and the step's flags (--ranks, --shard).
Ring ring_of(const Shape& s, const StepOptions& o);

// [rank-memory] One rank's buffers, in one allocation of rank_bytes(): its queries Q [B, H, nq, d];
// three K/V buffers, each K [B, Hkv, nk, d] then V — its home shard (kv[0]) and the two the ring
// fills in turn; a call's O_c [B, H, nq, d] (storage type) and L_c [B, H, nq]; the running O
// [B, H, nq, d] and L [B, H, nq] in fp32.
struct RankMem {
  void* q = nullptr;
  void* kv[3] = {nullptr, nullptr, nullptr};
  void* oc = nullptr;
  float* lc = nullptr;
  float* o = nullptr;
  float* l = nullptr;
};
size_t kv_bytes(const Ring& g);  // one K/V buffer: what a ring step sends
size_t rank_bytes(const Ring& g);
RankMem rank_mem(const Ring& g, void* base);

// [ring] The K/V buffer a rank holds at step t: its home at t = 0, then the ring's two in turn
// (the one it receives into for step t + 1 is the one it held at step t − 1, free once that step's
// compute is done).
inline int held(int t) { return t == 0 ? 0 : 1 + (t - 1) % 2; }

// A rank's work, each on the stream given:
void enqueue_init(const Ring& g, const RankMem& m, void* stream);                // running O = 0, L = −inf
void enqueue_step(const Ring& g, const RankMem& m, int r, int t, void* stream);  // step t's calls and merges
// The rank's rows of O (storage type) and L into the whole sequence's tensors (strides in elements).
void enqueue_finish(const Ring& g, const RankMem& m, int r, void* o, int64_t o_sb, int64_t o_sh, int64_t o_sn, float* lse,
                    int64_t l_sb, int64_t l_sh, void* stream);

// The step's launcher: the ring of P ranks on one GPU, P pairs of streams (compute, receive).
void launch(const AttnParams& p, const StepOptions& opts, void* stream);
size_t workspace_bytes(const Shape& s, const StepOptions& opts);
void prepare(const Shape& s, const AttnParams& p, const StepOptions& opts, void* stream);

// [timeline] How launch() runs the ranks: concurrently (P streams: the default) or one after
// another on the launch's stream (serial: each rank's step then takes what it would on a GPU of its
// own). With the timeline on, it records an event pair around every rank's compute and transfer of
// every step, which last_timeline() reads (ms from the launch's start) after the launch.
enum class RingMode { concurrent, serial };
struct RingSpan {
  int rank = 0, step = 0;
  bool transfer = false;  // false: the step's compute (calls and merges)
  double t0 = 0.0, t1 = 0.0;
};
void set_ring_mode(RingMode m, bool timeline);
// [priority] The receive streams at the device's highest priority (the default) or at the normal one.
void set_comm_priority(bool high);
std::vector<RingSpan> last_timeline();

}  // namespace fa::step18
