// Step 18 — the blueprint: P ranks simulated on the CPU. Each rank has its own "memory": its
// query shard, its home K/V shard and two K/V buffers the ring fills, a running O (fp32) and L. At
// every ring step each rank runs step 12's blueprint — the per-shard kernel — on the calls of
// schedule.hpp's step_calls, merges each call's O and L into its running ones by L ([merge]), and
// the K/V buffers move one rank on around the ring ([ring]), counted as the bytes they are.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "schedule.hpp"

namespace fa::step12 {
const StepInfo& info();  // the per-shard forward: step 12's, through its registration
}

namespace fa::step18 {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
const char* const kRanks[] = {"4", "1", "2", "3", "5", "6", "7", "8"};
const char* const kLayouts[] = {"zigzag", "contiguous"};

// The shape of one call of the per-shard kernel: the call's rows and keys, the rest of s.
Shape call_shape(const Shape& s, const Call& c) {
  Shape t = s;
  t.N = c.rows();
  t.Nk = c.keys();
  t.causal = c.causal;
  t.scale = s.softmax_scale();  // 1/sqrt(d) of the whole problem (the same d): said once, kept
  return t;
}

// Rows [r0, r0 + rows) of every head of x, as a tensor of their own (what the kernel's pointer
// offset and strides select: a view on the GPU, a copy here, uncounted).
Tensor4 rows_of(const Tensor4& x, int64_t r0, int64_t rows) {
  Tensor4 t(x.B, x.H, rows, x.cols);
  for (int64_t b = 0; b < x.B; ++b)
    for (int64_t h = 0; h < x.H; ++h)
      std::copy_n(x.head(b, h) + r0 * x.cols, rows * x.cols, t.head(b, h));
  return t;
}

// A rank's memory. Q: its query rows; kv[0] its home K and V shard, kv[1], kv[2] the two buffers
// the ring fills (every buffer max_shard rows long, the rows past a shard NaN); O and L running.
struct Rank {
  Tensor4 q, o, lse;
  Tensor4 k[3], v[3];
};

// Copy the parts of shard sh out of x ([B, heads, n, d]) into y's rows, in order: the data a rank
// starts with (given, not counted: on P GPUs it is already there).
void gather(const Tensor4& x, const Shard& sh, Tensor4& y) {
  for (int64_t b = 0; b < x.B; ++b)
    for (int64_t h = 0; h < x.H; ++h)
      for (int p = 0; p < sh.parts; ++p)
        std::copy_n(x.head(b, h) + sh.part[p].lo * x.cols, sh.part[p].size() * x.cols, y.head(b, h) + sh.offset(p) * x.cols);
}

}  // namespace

Ring ring_of(const Shape& s, const StepOptions& o) {
  Ring g;
  g.B = int(s.B), g.H = int(s.H), g.Hkv = int(s.hkv()), g.N = int(s.N), g.Nk = int(s.Nk), g.d = int(s.d);
  g.causal = s.causal, g.bf16 = s.dtype == DType::bf16, g.scale = float(s.softmax_scale());
  g.P = ranks_of(o), g.layout = layout_of(o);
  return g;
}

int ranks_of(const StepOptions& o) { return std::stoi(kRanks[choice_index(o, "ranks", kRanks, 8, "step18")]); }
Layout layout_of(const StepOptions& o) { return Layout(choice_index(o, "shard", kLayouts, 2, "step18")); }

namespace {

void require_self(const Shape& s) {
  if (s.window > 0) throw Unsupported("step18: no --window (the ring passes whole shards; use step 12 for a window)");
}

BlueprintResult blueprint(const Shape& s, const Inputs& in, const StepOptions& opts) {
  require_self(s);
  const int P = ranks_of(opts);
  const Layout lay = layout_of(opts);
  const StepInfo& per_shard = step12::info();
  const int64_t B = s.B, H = s.H, Hkv = s.hkv(), d = s.d;
  const int64_t nq = max_shard(lay, P, s.N), nk = max_shard(lay, P, s.Nk);
  const Store st = Store::of(s.dtype), f32 = Store::f32();
  BlueprintResult res;
  for (const char* name : {"warp_tiling", "ring_init", "ring_merge", "ring_send", "ring_finish"}) res.ledger[name];  // all in place before any reference is taken
  Ledger& kern = res.ledger["warp_tiling"];  // step 12's kernel, every call of every rank
  Ledger& init = res.ledger["ring_init"];
  Ledger& merge = res.ledger["ring_merge"];
  Ledger& send = res.ledger["ring_send"];
  Ledger& fin = res.ledger["ring_finish"];

  std::vector<Rank> ranks(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) {
    Rank& k = ranks[size_t(r)];
    k.q = Tensor4(B, H, nq, d, kNaN);
    gather(in.q, shard_of(lay, P, r, s.N), k.q);
    for (int x = 0; x < 3; ++x) k.k[x] = Tensor4(B, Hkv, nk, d, kNaN), k.v[x] = Tensor4(B, Hkv, nk, d, kNaN);
    gather(in.k, shard_of(lay, P, r, s.Nk), k.k[0]);
    gather(in.v, shard_of(lay, P, r, s.Nk), k.v[0]);
    // The running O and L start empty: O = 0, L = −inf (no key seen yet).
    k.o = Tensor4(B, H, nq, d, 0.0f);
    k.lse = Tensor4(B, H, nq, 1, -kInf);
    init.gmem_write += B * H * nq * (d + 1) * 4;
  }

  // [ring] Step t: rank r holds rank source_of(r, t)'s K/V in buffer held(t): its home at t = 0,
  // then the ring's two buffers in turn.
  auto held = [](int t) { return t == 0 ? 0 : 1 + (t - 1) % 2; };
  for (int t = 0; t < P; ++t) {
    for (int r = 0; r < P; ++r) {
      Rank& k = ranks[size_t(r)];
      const Calls cs = step_calls(lay, P, r, t, s.N, s.Nk, s.causal);
      for (int i = 0; i < cs.n; ++i) {
        const Call& c = cs.c[i];
        const Shape cs_shape = call_shape(s, c);
        Inputs ci{rows_of(k.q, c.q0, c.rows()), rows_of(k.k[held(t)], c.k0, c.keys()), rows_of(k.v[held(t)], c.k0, c.keys())};
        BlueprintResult part = per_shard.blueprint(cs_shape, ci, {});
        kern += part.ledger.total();
        // [merge] The call's O_c (rounded to the storage type, as the kernel stores it) and L_c
        // into the running O and L of its rows:
        //   L' = log(e^L + e^L_c),  O' = e^(L − L')·O + e^(L_c − L')·O_c.
        // A row the call saw no key for has L_c = +inf and O_c = 0: it changes nothing.
        for (int64_t b = 0; b < B; ++b)
          for (int64_t h = 0; h < H; ++h) {
            const GlobalMat Oc(part.out.o.head(b, h), c.rows(), d, d, st, merge), Lc(part.out.lse.head(b, h), c.rows(), 1, 1, f32, merge);
            GlobalMat O(k.o.head(b, h), nq, d, d, f32, merge), L(k.lse.head(b, h), nq, 1, 1, f32, merge);
            for (int64_t e = 0; e < c.rows(); ++e) {
              const int64_t row = c.q0 + e;
              // lab:begin merge: fold this call's (O_c, L_c) of row `row` into the running (O, L) by L …
              const float lc = Lc.load(e, 0), l = L.load(row, 0);
              const float lcv = lc == kInf ? -kInf : lc;  // no key in this call: weight 0
              const float mx = std::max(l, lcv);
              const float lnew = mx == -kInf ? -kInf : mx + std::log(std::exp(l - mx) + std::exp(lcv - mx));
              const float wo = mx == -kInf ? 0.0f : std::exp(l - lnew), wc = mx == -kInf ? 0.0f : std::exp(lcv - lnew);
              for (int64_t col = 0; col < d; ++col) O.store(row, col, wo * O.load(row, col) + wc * Oc.load(e, col));
              L.store(row, 0, lnew);
              merge.nonmatmul_ops += 3 * d + 6;
              merge.exps += 4;
              // lab:end
            }
          }
      }
    }
    // [ring] Every rank passes the buffer it held at step t to the next rank, into the buffer that
    // rank will hold at step t + 1 (its other ring buffer, free since step t − 1): whole buffers.
    if (t + 1 < P) {
      std::vector<Tensor4> nk_k(static_cast<size_t>(P)), nk_v(static_cast<size_t>(P));
      for (int r = 0; r < P; ++r) {
        const Rank& from = ranks[size_t((r + P - 1) % P)];
        nk_k[size_t(r)] = from.k[held(t)];
        nk_v[size_t(r)] = from.v[held(t)];
      }
      for (int r = 0; r < P; ++r) {
        ranks[size_t(r)].k[held(t + 1)] = nk_k[size_t(r)];
        ranks[size_t(r)].v[held(t + 1)] = nk_v[size_t(r)];
        send.gmem_read += 2 * B * Hkv * nk * d * 2;  // K and V, read by the sender ...
        send.gmem_write += 2 * B * Hkv * nk * d * 2;  // ... and written by the receiver
      }
    }
  }

  // The finish: each rank's running O, rounded to the storage type, and L into the rows of the
  // whole sequence it holds. A row that saw no key: O = 0, L = +inf.
  res.out.o = Tensor4(B, H, s.N, d, kNaN);  // NaN until written: a row no rank finishes fails the check
  res.out.lse = Tensor4(B, H, s.N, 1, kNaN);
  for (int r = 0; r < P; ++r) {
    Rank& k = ranks[size_t(r)];
    const Shard sh = shard_of(lay, P, r, s.N);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        const GlobalMat O(k.o.head(b, h), nq, d, d, f32, fin), L(k.lse.head(b, h), nq, 1, 1, f32, fin);
        GlobalMat Out(res.out.o.head(b, h), s.N, d, d, st, fin), Lout(res.out.lse.head(b, h), s.N, 1, 1, f32, fin);
        for (int p = 0; p < sh.parts; ++p)
          for (int64_t i = sh.part[p].lo; i < sh.part[p].hi; ++i) {
            const int64_t row = sh.offset(p) + i - sh.part[p].lo;
            const float l = L.load(row, 0);
            for (int64_t col = 0; col < d; ++col) {
              const float x = O.load(row, col);
              Out.store(i, col, l == -kInf ? 0.0f : x);
            }
            Lout.store(i, 0, l == -kInf ? kInf : l);
          }
      }
  }
  return res;
}

// The ledger in closed form (docs/18_ring.md): step 12's closed form summed over every call of
// every rank and step; the merge reads each call's O_c (storage type) and L_c and reads and writes
// the running O and L of its rows (fp32), after the running ones were set once (init); P − 1 sends per
// rank of its whole K/V buffer (read and written); the finish reads the running O and L of the N
// rows and writes O (storage type) and L.
LedgerSet closed_form(const Shape& s, const StepOptions& opts) {
  require_self(s);
  const int P = ranks_of(opts);
  const Layout lay = layout_of(opts);
  const StepInfo& per_shard = step12::info();
  const int64_t B = s.B, H = s.H, Hkv = s.hkv(), d = s.d;
  const int64_t nq = max_shard(lay, P, s.N), nk = max_shard(lay, P, s.Nk);
  LedgerSet ls;
  for (const char* name : {"warp_tiling", "ring_init", "ring_merge", "ring_send", "ring_finish"}) ls[name];  // all in place before any reference is taken
  Ledger& kern = ls["warp_tiling"];
  Ledger& init = ls["ring_init"];
  Ledger& merge = ls["ring_merge"];
  Ledger& send = ls["ring_send"];
  Ledger& fin = ls["ring_finish"];
  int64_t merged_rows = 0;
  for (int t = 0; t < P; ++t)
    for (int r = 0; r < P; ++r) {
      const Calls cs = step_calls(lay, P, r, t, s.N, s.Nk, s.causal);
      for (int i = 0; i < cs.n; ++i) {
        kern += per_shard.closed_form(call_shape(s, cs.c[i]), {}).total();
        merged_rows += cs.c[i].rows();
      }
    }
  init.gmem_write = P * B * H * nq * (d + 1) * 4;
  merge.gmem_write = B * H * merged_rows * (d + 1) * 4;
  merge.gmem_read = B * H * merged_rows * (d * 2 + 4 + (d + 1) * 4);
  merge.nonmatmul_ops = B * H * merged_rows * (3 * d + 6);
  merge.exps = B * H * merged_rows * 4;
  send.gmem_read = send.gmem_write = int64_t(P) * (P - 1) * 2 * B * Hkv * nk * d * 2;
  fin.gmem_read = B * H * s.N * (d + 1) * 4;
  fin.gmem_write = B * H * s.N * (d * 2 + 4);
  return ls;
}

int64_t run_smem_bytes(const Shape& s, const StepOptions&) { return step12::info().smem_bytes(s, {}); }

}  // namespace

const StepInfo& info() {
  static const StepInfo step = [] {
    StepInfo i;
    i.id = "18";
    i.slug = "ring";
    i.title = "ring attention: the sequence split over P ranks, K/V passed around a ring, partial results merged by L";
    i.teaches = "ring attention (context parallelism), zig-zag causal balance";
    i.mma_unit = MmaUnit::mma_sync;  // [mma-unit] step 12's kernel does the products
    StepFlag ranks{"ranks", {}, "the ring's size P: ranks simulated on the CPU, P streams on one GPU (scripts/ring.sh: one GPU each)"};
    for (const char* r : kRanks) ranks.choices.push_back(r);
    ranks.sweep = false;  // an experiment: the tour, bench and shape-matrix tests run the default (4)
    StepFlag shard{"shard", {}, "how the sequence is cut: zigzag (chunks r and 2P-1-r of 2P: balanced under the causal mask) or contiguous"};
    for (const char* l : kLayouts) shard.choices.push_back(l);
    i.flags = {ranks, shard};
    i.blueprint = blueprint;
    i.closed_form = closed_form;
    i.smem_bytes = run_smem_bytes;
    i.supports_gqa = true;  // [gqa] step 12's kernel takes it; the ring passes Hkv heads
    i.experiments_everywhere = true;  // --ranks: compiled for every dtype and d
    i.min_cc = 80;
    i.needs = "mma.sync.m16n8k16 and cp.async (step 12's kernel)";
#ifdef FA_HAVE_CUDA
    i.launch = launch;
    i.workspace_bytes = workspace_bytes;
    i.prepare = prepare;
#endif
    i.kernel_prefix = "step18_";  // its own kernels; the per-shard kernel is step 12's (step12_)
    return i;
  }();
  return step;
}

}  // namespace fa::step18
