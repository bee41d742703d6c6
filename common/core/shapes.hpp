// The shape matrix shared by the blueprint tests, the GPU tests and the labs' grader (--grade;
// docs/anatomy.md, "Checks that can fail"):
// N not a multiple of the tile, N smaller than a tile, Nk != N both ways, d in {16, 32, 64, 128},
// causal on and off, B and H > 1, both storage types, and inputs scaled for large logits; and one
// query row against 600 keys — more K/V tiles than step 15's ring has stages, so its refills run
// (cheap: one row).
#pragma once
#include <string>
#include <vector>

#include "core/problem.hpp"
#include "core/rng.hpp"
#include "core/step.hpp"

namespace fa::test {

struct Case {
  Shape shape;
  InputSpec inputs;
  std::string name() const {
    return shape.str() + (inputs.qk_spread != 1.0 ? " large-logits" : "");
  }
};

inline Case make_case(int64_t B, int64_t H, int64_t N, int64_t Nk, int64_t d, bool causal, DType t, double spread = 1.0,
                      uint64_t seed = 7) {
  Case c;
  c.shape.B = B; c.shape.H = H; c.shape.N = N; c.shape.Nk = Nk; c.shape.d = d;
  c.shape.causal = causal; c.shape.dtype = t;
  c.inputs.seed = seed + uint64_t(N * 131 + Nk * 7 + d);
  c.inputs.qk_spread = spread;
  return c;
}

// `big` adds the N = 1023 cases (slower on the CPU).
inline std::vector<Case> shape_matrix(bool big) {
  std::vector<Case> cs;
  const std::pair<int64_t, int64_t> lens[] = {{1, 1}, {17, 17}, {64, 64}, {113, 255}, {255, 113}, {1, 64}, {64, 1}, {1, 600}};
  int k = 0;
  for (int64_t d : {16, 32, 64, 128})
    for (auto [N, Nk] : lens)
      for (bool causal : {false, true}) {
        // fp16 and bf16 each with and without the mask, and flipped from one d to the next: no
        // dtype goes with a mask, a length pair or a d, so a failure's pattern tells them apart.
        const DType t = ((k + k / 2 + k / 16) % 2) ? DType::bf16 : DType::f16;
        ++k;
        const bool small = N * Nk <= 64 * 64;
        cs.push_back(make_case(small ? 2 : 1, small ? 3 : 2, N, Nk, d, causal, t));
      }
  // Large logits: |S| reaches tens, so exp() without the max subtraction would overflow fp32.
  for (DType t : {DType::f16, DType::bf16}) {
    cs.push_back(make_case(1, 2, 200, 200, 64, true, t, 6.0));
    cs.push_back(make_case(1, 2, 77, 130, 128, false, t, 6.0));
  }
  if (big) {
    cs.push_back(make_case(1, 1, 1023, 1023, 64, false, DType::f16));
    cs.push_back(make_case(1, 1, 1023, 1023, 128, true, DType::bf16));
    cs.push_back(make_case(1, 1, 1023, 700, 32, true, DType::f16));
    cs.push_back(make_case(1, 1, 700, 1023, 16, true, DType::bf16));
  }
  return cs;
}

// [cache-lens] Decoding's matrix (step 17 and any step with StepInfo::supports_decode): one to 16
// new tokens per sequence against caches of ragged lengths (0 and 1 among them), grouped heads
// (GQA, MQA, and one head each), a group's rows from 1 to 128 (two chunks), the causal mask among
// the new tokens, sliding windows (one shorter than the new tokens), and large logits.
inline Case decode_case(int64_t B, int64_t H, int64_t Hkv, int64_t N, int64_t Nk, int64_t d, bool causal, int64_t window,
                        std::vector<int64_t> lens, DType t, double spread = 1.0) {
  Case c = make_case(B, H, N, Nk, d, causal, t, spread);
  c.shape.Hkv = Hkv;
  c.shape.window = window;
  c.shape.cache_lens = std::move(lens);
  return c;
}
// 33 sequences of 8 key/value heads: 264 problems fill an H200's 132 SMs at two blocks each, so
// the splits heuristic gives one split — each block walks several tiles (the online softmax's
// rescaling across tiles), lengths 0 to 319 of a 320-token cache.
inline Case many_sequences() {
  std::vector<int64_t> lens;
  for (int64_t b = 0; b < 33; ++b) lens.push_back((b * 97) % 320);
  return decode_case(33, 8, 8, 1, 320, 32, false, 0, lens, DType::f16);
}
inline std::vector<Case> decode_matrix() {
  const DType h = DType::f16, bf = DType::bf16;
  return {decode_case(2, 8, 2, 1, 300, 64, false, 0, {299, 150}, h),     // 4 heads per group, one token
          decode_case(3, 4, 1, 1, 200, 128, false, 0, {0, 1, 199}, bf),  // MQA; caches of 0 and 1 tokens
          decode_case(2, 4, 4, 3, 257, 32, true, 0, {254, 64}, h),       // one head each, 3 tokens, causal
          decode_case(2, 8, 2, 16, 600, 128, true, 0, {584, 300}, bf),   // 64 rows: a full chunk
          decode_case(2, 8, 1, 16, 300, 64, true, 0, {284, 17}, h),      // 128 rows: two chunks
          decode_case(1, 6, 2, 16, 200, 64, true, 0, {150}, bf),         // 48 rows: three row tiles of four
          decode_case(1, 12, 4, 7, 333, 128, true, 0, {300}, h),         // 21 rows: two row tiles
          decode_case(1, 32, 8, 1, 1000, 128, false, 0, {999}, bf),      // a model's heads, many splits
          decode_case(2, 4, 2, 4, 400, 64, true, 50, {396, 10}, bf),     // a window
          decode_case(1, 6, 2, 5, 333, 16, true, 3, {100}, h),           // a window shorter than the new tokens
          decode_case(2, 4, 2, 2, 180, 64, false, 0, {178, 0}, h),       // two tokens without the mask
          decode_case(1, 4, 2, 1, 500, 64, false, 0, {499}, h, 6.0),     // large logits
          decode_case(1, 4, 2, 1, 77, 32, false, 0, {}, bf),             // no cache lengths: plain attention
          many_sequences()};                                              // one split each: several tiles per block
}

// [gqa] [window] Shapes of grouped-query attention and sliding windows, for the steps that take them
// (StepInfo::supports_gqa / supports_window; a step is given a case only if it takes every feature
// the case uses): one key/value head for all (MQA) and a middle group size, with the mask and
// without; windows smaller than a tile, spanning several tiles, on a tile's edge and wider than the
// keys; Nk > N and Nk < N (rows that see no key); one query row against a long cache; large logits.
inline Case gqa_case(int64_t B, int64_t H, int64_t Hkv, int64_t N, int64_t Nk, int64_t d, bool causal, int64_t window, DType t,
                     double spread = 1.0) {
  Case c = make_case(B, H, N, Nk, d, causal, t, spread, 11);
  c.shape.Hkv = Hkv;
  c.shape.window = window;
  return c;
}
inline std::vector<Case> gqa_window_matrix() {
  return {gqa_case(2, 4, 1, 77, 200, 64, false, 0, DType::f16),       gqa_case(1, 6, 3, 130, 130, 128, true, 0, DType::bf16),
          gqa_case(1, 6, 2, 200, 90, 64, true, 0, DType::f16),        gqa_case(1, 2, 2, 200, 200, 64, true, 5, DType::f16),
          gqa_case(1, 2, 2, 100, 700, 128, true, 300, DType::bf16),   gqa_case(1, 2, 2, 300, 120, 64, true, 50, DType::bf16),
          gqa_case(1, 4, 1, 1, 600, 64, true, 200, DType::f16),       gqa_case(1, 4, 2, 256, 256, 128, true, 64, DType::f16),
          gqa_case(1, 2, 1, 50, 70, 64, true, 1000, DType::bf16),     gqa_case(2, 2, 1, 150, 150, 32, true, 17, DType::bf16),
          gqa_case(1, 2, 2, 200, 200, 64, true, 70, DType::f16, 6.0), gqa_case(1, 4, 2, 70, 333, 128, false, 0, DType::bf16)};
}
// Whether a step takes every feature a case uses; [fp8] an FP8 step takes d a multiple of 32 (an FP8
// wgmma's k) and nothing else.
inline bool takes_case(const StepInfo& st, const Shape& s) {
  return (s.hkv() == s.H || st.supports_gqa) && (s.window == 0 || st.supports_window) && (!st.fp8 || s.d % 32 == 0);
}
// [fp8] A case as a step runs it: for an FP8 step (StepInfo::fp8) the same shape in e4m3, every other
// step's unchanged. (The reference then runs on the dequantized inputs: reference.hpp.)
inline Case for_step(Case c, const StepInfo& st) {
  if (st.fp8) set_type(c.shape, "e4m3");
  return c;
}
inline Shape for_step(Shape s, const StepInfo& st) {
  if (st.fp8) set_type(s, "e4m3");
  return s;
}
// [dropout] A few cases of the shape matrix with dropout, for the steps that take --dropout: ragged,
// Nk != N, both masks and dtypes, two probabilities and seeds (the reference draws the same mask).
inline std::vector<Case> dropout_matrix() {
  std::vector<Case> cs = {make_case(1, 2, 113, 255, 64, true, DType::f16), make_case(2, 3, 64, 64, 32, false, DType::bf16),
                          make_case(1, 2, 255, 113, 128, false, DType::f16), make_case(2, 3, 17, 17, 16, true, DType::bf16)};
  for (size_t k = 0; k < cs.size(); ++k) {
    cs[k].shape.dropout = k % 2 ? 0.25 : 0.1;
    cs[k].shape.dropout_seed = 1000 + k;
  }
  return cs;
}

// The steps gqa_window_matrix is for: those that take --hkv or --window, except a decoding step
// (supports_decode: its own matrix, decode_matrix, and at most max_n query rows).
inline bool takes_gqa_window(const StepInfo& st) { return (st.supports_gqa || st.supports_window) && !st.supports_decode; }

// A small random shape for ledger tests: B, H in {1, 2}, N and Nk in 1..150 (equal every third
// draw t), d from the compiled head sizes, either mask and dtype.
inline Shape random_small_shape(Rng& rng, int t) {
  Shape s;
  s.B = 1 + int64_t(rng.below(2));
  s.H = 1 + int64_t(rng.below(2));
  s.N = 1 + int64_t(rng.below(150));
  s.Nk = (t % 3 == 0) ? s.N : 1 + int64_t(rng.below(150));
  s.d = kHeadDims[rng.below(4)];
  s.causal = rng.below(2) == 1;
  s.dtype = rng.below(2) ? DType::bf16 : DType::f16;
  return s;
}

// Every combination of a step's own flags (e.g. step 01: gemm=wmma, gemm=cublas).
inline std::vector<StepOptions> all_options(const StepInfo& st) { return st.all_variants(); }

}  // namespace fa::test
