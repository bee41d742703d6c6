// Step 17 — decoding: one new token (or a few) per sequence against a long key/value cache.
//
// A prefill kernel (step 12) gives each Q tile of each head a block; at decode a Q tile is one row
// of padding-filled tensor cores, and B·H blocks walk the whole cache each, one after another
// on a few SMs. Here three ideas fill the GPU, and the work becomes what it is: one read of the cache.
//   [gqa-pack]  the H/HKV query heads that share a key/value head (times the new tokens) are the
//               rows of one tile: each cache byte is read once per group, into the tensor cores;
//   [split-kv]  the cache is cut across blocks (Flash-Decoding): a grid of (split, kv-head·chunk,
//               sequence), each block writing a partial O and L in fp32, merged by a combine kernel
//               ([merge]: the online softmax's rescaling, across blocks);
//   [paged]     K and V live in pages of one pool found through a block table (vLLM's layout);
//               the new tokens' K/V are appended to the cache by the blocks that read them.
// Inside a block the warps split each tile's keys too ([slices]) and merge the same way.
#pragma once
#include <cstdint>
#include <string>

#include "kernel/attn_params.hpp"
#include "kernel/causal.hpp"
#include "core/step.hpp"

namespace fa::step17 {

inline constexpr int kBc = 64;                  // keys per K/V tile
inline constexpr int kWarps = 4;                // warps per block
inline constexpr int kRowsPerBlock = 16 * kWarps;  // query rows of a block: one m16 tile per warp at most
inline constexpr int kStages = 3;               // K/V tiles in flight: one multiplied, two loading
inline constexpr int kMaxQlen = 16;             // --qlen's limit (speculative decoding's few tokens)
inline constexpr int kMaxSplits = 128;
// [exp2] The softmax in base 2 (kernel and blueprint): exp(x) = exp2(x·log2 e), L = (m + log2 l)·ln 2.
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;
static_assert(kBc % 64 == 0, "a tile's keys split into 1, 2 or 4 slices of whole 16-key blocks");

// Shared memory per block: kStages × (K tile, V tile), storage type. [q-alias] The Q rows wait in
// the last stage's K tile: they are read into registers once, before that stage is first filled.
FA_HD constexpr int64_t smem_bytes(int d) { return int64_t(kStages) * 2 * kBc * d * 2; }
// [q-alias] Tiles 0 and 1 load with Q, before Q has left shared memory; the last stage is first
// filled by tile kStages − 1, issued only after every warp has Q in registers — so that stage must
// not be tile 0's or tile 1's: three stages at least.
static_assert(kStages >= 3, "[q-alias] Q waits in the last stage, which tiles 0 and 1 must not use");
inline constexpr int64_t kSmemBudget = 96 * 1024;
static_assert(kRowsPerBlock <= kBc, "the Q rows fit a K tile");
// With the 1 KB per block the system keeps, a block takes 97 KB at d = 128: two per SM on 9.0
// (2 × 97 ≤ 228 KB per SM), one on 8.0 (2 × 97 > 164 KB) and on 8.6 and 8.9 (100 KB per SM).
static_assert(smem_bytes(128) <= kSmemBudget, "96 KB at d = 128 (+1 KB reserved): two blocks per SM on 9.0, one on 8.0, 8.6 and 8.9");

// [gqa-pack] Row r of a group's tile is query head kv·G + r / N, new token r % N (G = H / HKV query
// heads per key/value head). More than kRowsPerBlock rows are cut into chunks, each a block row of
// the grid that reads the cache again.
FA_HD constexpr int64_t group_rows(int64_t H, int64_t Hkv, int64_t N) { return (H / Hkv) * N; }
FA_HD constexpr int64_t row_chunks(int64_t H, int64_t Hkv, int64_t N) { return num_tiles(group_rows(H, Hkv, N), kRowsPerBlock); }

// [slices] A chunk of `rows` rows takes R = ⌈rows/16⌉ m16 tiles; its four warps are R' = 1, 2 or 4
// (R rounded up) row tiles times 4/R' key slices, each slice Bc·R'/4 keys of every tile. Warp w
// owns row tile w % R' and key slice w / R'.
FA_HD constexpr int row_tiles(int64_t rows) { return rows <= 16 ? 1 : rows <= 32 ? 2 : 4; }
FA_HD constexpr int key_slices(int64_t rows) { return kWarps / row_tiles(rows); }

// [cache-lens] The keys of sequence b (keys_b: its cache and its N new tokens) and where its new
// tokens start (keys_b − N: query i sits at position keys_b − N + i). Without a cache, all Nk keys.
struct KeyRange {
  int64_t lo = 0, hi = 0;
};
// [window] The keys some row of queries i0..i1 (of sequence b) may see: query i sees key j when
// j < keys_b, j <= i + off with the causal mask, and j > i + off − W with a window (off = keys_b − N).
FA_HD constexpr KeyRange chunk_keys(int64_t keys_b, int64_t N, int64_t i0, int64_t i1, bool causal, int64_t window) {
  const int64_t off = keys_b - N;
  int64_t hi = causal ? (i1 + off + 1 < keys_b ? i1 + off + 1 : keys_b) : keys_b;
  int64_t lo = window > 0 ? (i0 + off - window + 1 > 0 ? i0 + off - window + 1 : 0) : 0;
  if (hi < 0) hi = 0;
  if (lo > hi) lo = hi;
  return {lo, hi};
}
// The queries i of the chunk's rows [r0, r1) (r = g·N + i): all of 0..N−1 once the chunk holds N rows.
FA_HD constexpr void chunk_queries(int64_t r0, int64_t r1, int64_t N, int64_t& i0, int64_t& i1) {
  if (r1 - r0 >= N || r0 % N > (r1 - 1) % N) { i0 = 0; i1 = N - 1; }
  else { i0 = r0 % N; i1 = (r1 - 1) % N; }
}
// [split-kv] Split s of `splits` over [lo, hi), in whole tiles counted from lo, as even as tiles allow
// (common/reference/decode.hpp's split_keys over hi − lo keys, shifted by lo): empty when s is past the tiles.
FA_HD constexpr KeyRange split_range(KeyRange r, int64_t splits, int64_t s) {
  const int64_t tiles = num_tiles(r.hi - r.lo, kBc), n = splits < tiles ? splits : tiles;
  if (s >= n) return {r.hi, r.hi};
  const int64_t t0 = s * tiles / n, t1 = (s + 1) * tiles / n;
  const int64_t e = r.lo + t1 * kBc;
  return {r.lo + t0 * kBc, e < r.hi ? e : r.hi};
}
// Whether key j is visible to query i of a sequence with keys_b keys.
FA_HD constexpr bool visible(int64_t i, int64_t j, int64_t keys_b, int64_t N, bool causal, int64_t window) {
  const int64_t off = keys_b - N;
  return j >= 0 && j < keys_b && (!causal || j <= i + off) && (window <= 0 || j > i + off - window);
}
// [skip] A tile [j0, j0 + Bc) of a split ending at `end` needs no mask when every row of queries
// i0..i1 sees every key of it.
FA_HD constexpr bool tile_needs_mask(int64_t j0, int64_t end, int64_t keys_b, int64_t N, int64_t i0, int64_t i1, bool causal,
                                     int64_t window) {
  const int64_t j1 = j0 + kBc - 1;
  return j1 >= end || !visible(i0, j1, keys_b, N, causal, window) || !visible(i1, j0, keys_b, N, causal, window) ||
         !visible(i0, j0, keys_b, N, causal, window) || !visible(i1, j1, keys_b, N, causal, window);
}

// [paged] Where token t of sequence b, key/value head kv, lives: in the pool's page
// block_table[b·pages_per_seq + t / page_size], at slot t % page_size ([pages, page_size, HKV, d]);
// without a table, in a cache [B, HKV, Nk, d] with the strides given.
struct CacheLayout {
  const int32_t* block_table = nullptr;  // null: contiguous
  int pages_per_seq = 0, log2_page = 0;
  int64_t s_page = 0, s_row = 0, s_head = 0;  // element strides (contiguous: batch, row, head)
  FA_HD int64_t offset(int64_t b, int64_t kv, int64_t t) const {
    if (!block_table) return b * s_page + t * s_row + kv * s_head;
    const int64_t page = block_table[b * pages_per_seq + (t >> log2_page)];
    return page * s_page + (t & ((int64_t(1) << log2_page) - 1)) * s_row + kv * s_head;
  }
};

// The seed of the block table's shuffle (the same on the GPU and in the blueprint).
inline uint64_t layout_seed(const Shape& s) { return 17 + uint64_t(s.B * 131 + s.Nk); }

// [page-size] --page-size's choices: "none" (the contiguous cache) or a power of two 16 .. 256.
inline constexpr const char* kPageSizes[] = {"none", "16", "32", "64", "128", "256"};
int page_size_of(const StepOptions& o);         // 0 for none
// [fused-combine] --combine fused (default: the last block of a group merges its splits), kernel
// (a kernel of its own after the splits: one more launch) or pdl ([pdl]: that kernel launched as a
// programmatic dependent of the splits, so that its launch overlaps them; sm_90).
enum class Combine { fused, kernel, pdl };
Combine combine_of(const StepOptions& o);
// [merge] The merge reads the splits' partials this many at a time, every load of a batch in flight
// together, and rescales its running sums once per batch.
inline constexpr int kMergeBatch = 16;
FA_HD constexpr int64_t merge_batches(int64_t splits) { return (splits + kMergeBatch - 1) / kMergeBatch; }
int64_t splits_of(const StepOptions& o);        // 0 for auto

// [splits] The number of splits for a shape on a GPU of `sms` SMs running `blocks_per_sm` blocks
// each: --splits when given, else common/reference/decode.hpp's heuristic over the grid's B·HKV·chunks
// (sequence, kv-head, chunk) blocks and the cache's capacity (or the window's span): a split
// past a shorter sequence's keys is empty and ends at once.
int64_t choose_splits(int64_t B, int64_t H, int64_t Hkv, int64_t N, int64_t Nk, int64_t window, const StepOptions& o,
                      int64_t sms, int64_t blocks_per_sm);

// [workspace] Byte offsets of what the step's workspace holds (prepare(), launch(), the ledgers):
// the cache lengths, the new tokens' K and V, the block table and the pool (paged), and the
// splits' partial O and L (fp32, more than one split).
struct Workspace {
  size_t cache_lens = 0, k_new = 0, v_new = 0, table = 0, k_pool = 0, v_pool = 0, part_o = 0, part_l = 0, counters = 0;
  size_t counters_bytes = 0, total = 0;
  int64_t pages_per_seq = 0, num_pages = 0;
};
inline Workspace workspace_of(int64_t B, int64_t H, int64_t Hkv, int64_t N, int64_t Nk, int64_t d, bool decode, int page,
                              int64_t splits) {
  Workspace w;
  size_t at = 0;
  auto take = [&](size_t bytes) { const size_t here = at; at = (at + bytes + 255) / 256 * 256; return here; };
  w.cache_lens = take(decode ? size_t(B) * 4 : 0);
  w.k_new = take(decode ? size_t(B * Hkv * N * d) * 2 : 0);
  w.v_new = take(decode ? size_t(B * Hkv * N * d) * 2 : 0);
  if (page > 0) {
    w.pages_per_seq = (Nk + page - 1) / page;
    w.num_pages = B * w.pages_per_seq;
  }
  w.table = take(size_t(w.num_pages) * 4);
  w.k_pool = take(size_t(w.num_pages * page * Hkv * d) * 2);
  w.v_pool = take(size_t(w.num_pages * page * Hkv * d) * 2);
  w.part_o = take(splits > 1 ? size_t(B * H * N * splits * d) * 4 : 0);
  w.part_l = take(splits > 1 ? size_t(B * H * N * splits) * 4 : 0);
  w.counters_bytes = splits > 1 ? size_t(B * Hkv * row_chunks(H, Hkv, N)) * 4 : 0;
  w.counters = take(w.counters_bytes);
  w.total = at;
  return w;
}

// The GPU side (kernel.cu).
void launch(const AttnParams& p, const StepOptions& opts, void* stream);
size_t workspace_bytes(const Shape& s, const StepOptions& opts);
void prepare(const Shape& s, const AttnParams& p, const StepOptions& opts, void* stream);
// [append] For the GPU tests: "" when, after one call, the cache holds every key and value each
// sequence sees (the new tokens appended), bit for bit; else where it does not.
std::string appended_cache_mismatch(const Shape& s, const Inputs& in, const StepOptions& o);

// The CPU side (blueprint.cpp). `sms` and `blocks_per_sm` stand for the GPU the splits are chosen for.
BlueprintResult blueprint(const Shape& s, const Inputs& in, const StepOptions& o);
LedgerSet closed_form(const Shape& s, const StepOptions& o);
// The H200's 132 SMs and this kernel's two blocks per SM at d = 128: what the blueprint and the
// closed form choose splits for (the GPU uses its own counts).
inline constexpr int64_t kBlueprintSms = 132, kBlueprintBlocksPerSm = 2;

}  // namespace fa::step17
