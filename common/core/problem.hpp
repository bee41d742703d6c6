// The attention problem: its shape, its host tensors and its seeded inputs.
//
// Conventions (docs/anatomy.md): tensors are [B, H, N, d] (keys and values [B, H, Nk, d]), last dimension
// contiguous; the softmax scale defaults to 1/sqrt(d); causal masking is aligned bottom-right when
// Nk != N, as FlashAttention does: query i sees key j when j <= i + (Nk - N).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace fa {

// Head dimensions the kernels are instantiated for (a template parameter of every kernel).
inline constexpr int kHeadDims[] = {16, 32, 64, 128};
// d = 256 as well, for the steps whose StepInfo::head_dims list it (the Hopper steps 14-16); every
// other step refuses it, on every backend (StepInfo::takes_d).
inline constexpr int kWideHeadDim = 256;

struct Shape {
  int64_t B = 1, H = 1, N = 1, Nk = 1, d = 64;
  bool causal = false;
  // [gqa] Key/value heads (0: as many as query heads). Query head h reads key/value head
  // h / (H / Hkv): H / Hkv query heads share one (grouped-query attention; Hkv = 1 is MQA).
  int64_t Hkv = 0;
  // [window] Sliding window (0: none; needs causal): query i sees keys j with
  // i + (Nk − N) − window < j <= i + (Nk − N), the bottom-right aligned band of `window` keys.
  int64_t window = 0;
  // [cache-lens] Decoding (step 17): tokens already held by each sequence's key/value cache
  // (empty: not a decode shape). Sequence b then sees keys [0, cache_lens[b] + N): the cache, and
  // the N new tokens' keys and values, which the step appends at cache_lens[b] .. + N − 1 (the K/V
  // inputs hold them there). Nk is the cache's capacity; cache_lens[b] + N <= Nk.
  std::vector<int64_t> cache_lens;
  DType dtype = DType::f16;
  // [fp8] --dtype e4m3 (step 21): the step quantizes Q, K and V to e4m3 with scales of its own, from
  // the bf16 values the inputs hold; O stays in bf16 (dtype is bf16), L in fp32.
  bool fp8 = false;
  // [fp8-scales] One scale per (batch, head) of each tensor, or per block of 128 rows of it
  // (--fp8-scales tensor|block). [incoherent] Q and K multiplied first by one random orthogonal matrix
  // (a randomized Hadamard transform): QKᵀ is unchanged, the outliers are spread (--incoherent).
  bool fp8_block = false, incoherent = false;
  double scale = 0.0;  // 0 means 1/sqrt(d)
  // Dropout on the attention weights (common/kernel/dropout.hpp): probability P of dropping a weight
  // (0 = none), and the Philox key and counter offset the mask is drawn from.
  double dropout = 0.0;
  uint64_t dropout_seed = 0, dropout_offset = 0;

  double softmax_scale() const;
  // The storage type's name as --dtype takes it: "fp16", "bf16", or "e4m3" for an fp8 shape.
  const char* type_name() const { return fp8 ? "e4m3" : dtype_name(dtype); }
  // [fp8] The same shape on the unquantized inputs (bf16, no FP8): check (b)'s reference.
  Shape without_fp8() const {
    Shape r = *this;
    r.fp8 = r.fp8_block = r.incoherent = false;
    return r;
  }
  int64_t q_elems() const { return B * H * N * d; }
  int64_t hkv() const { return Hkv > 0 ? Hkv : H; }
  int64_t kv_head(int64_t h) const { return h / (H / hkv()); }
  int64_t kv_elems() const { return B * hkv() * Nk * d; }
  int64_t rows() const { return B * H * N; }
  // [cache-lens] The keys sequence b sees: Nk, or cache_lens[b] + N for a decode shape.
  int64_t keys(int64_t b) const { return cache_lens.empty() ? Nk : cache_lens[static_cast<size_t>(b)] + N; }
  bool decode() const { return !cache_lens.empty(); }
  // The last key query i (of sequence b) may see (bottom-right aligned: i + keys(b) − N when causal,
  // keys(b) − 1 otherwise); < 0 means none.
  int64_t last_visible_key(int64_t i, int64_t b = 0) const;
  // The first key query i may see: 0 without a window.
  int64_t first_visible_key(int64_t i, int64_t b = 0) const;
  // FlashAttention's FLOP convention: 4·B·H·N·Nk·d for QKᵀ and PV, halved when causal.
  double flops_fa_convention() const;
  std::string str() const;  // "B=2 H=4 N=128 Nk=128 d=64 causal=0 fp16"
};

// [fp8] A --dtype value into the shape: fp16, bf16, or e4m3 (an fp8 shape: Q, K, V quantized by the
// step, O in bf16). False, and the shape unchanged, for any other name.
bool set_type(Shape& s, const std::string& name);

// "" when the shape is valid; otherwise a message that names the offending flag.
std::string validate(const Shape& s);

// A host tensor [B, H, rows, cols], contiguous, holding float values.
struct Tensor4 {
  int64_t B = 0, H = 0, rows = 0, cols = 0;
  std::vector<float> v;
  Tensor4() = default;
  Tensor4(int64_t b, int64_t h, int64_t r, int64_t c, float fill = 0.0f)
      : B(b), H(h), rows(r), cols(c), v(static_cast<size_t>(b * h * r * c), fill) {}
  int64_t index(int64_t b, int64_t h, int64_t r, int64_t c) const {
    return ((b * H + h) * rows + r) * cols + c;
  }
  float& at(int64_t b, int64_t h, int64_t r, int64_t c) { return v[static_cast<size_t>(index(b, h, r, c))]; }
  float at(int64_t b, int64_t h, int64_t r, int64_t c) const { return v[static_cast<size_t>(index(b, h, r, c))]; }
  const float* head(int64_t b, int64_t h) const { return v.data() + index(b, h, 0, 0); }
  float* head(int64_t b, int64_t h) { return v.data() + index(b, h, 0, 0); }
};

// Q, K, V drawn as offset + spread·randn, then rounded to the storage type. Never zeros: zeros
// hide unwritten outputs and wrong indexing. `qk_spread` > 1 makes large logits (softmax stress).
struct InputSpec {
  uint64_t seed = 42;
  double offset = 0.5;
  double qk_spread = 1.0;
  double v_spread = 1.0;
  // [outliers] The fraction of entries multiplied by kOutlierScale after they are drawn (0: none).
  // FlashAttention-3's FP8 protocol: offset 0, spread 1, 0.1 % of the entries ten times larger.
  double outliers = 0.0;
};
inline constexpr double kOutlierScale = 10.0;
// [outliers] --inputs: "default" (the spec above), "normal" (standard normal entries) or "outliers"
// (standard normal, 0.1 % of them times 10); false for any other name.
bool set_inputs(InputSpec& spec, const std::string& name);

struct Inputs {
  Tensor4 q, k, v;  // [B,H,N,d], [B,Hkv,Nk,d], [B,Hkv,Nk,d], values exactly representable in dtype
};

Inputs make_inputs(const Shape& s, const InputSpec& spec = {});

// Outputs of a forward pass: O [B,H,N,d] (rounded to the storage type) and L [B,H,N,1] in fp32.
struct Forward {
  Tensor4 o, lse;
};

// Gradients of a backward pass, rounded to the storage type: dQ [B,H,N,d], dK and dV [B,H,Nk,d].
struct Grads {
  Tensor4 dq, dk, dv;
};

// The output gradient dO [B,H,N,d] for a backward run: randn (mean 0, spread 1) rounded to the
// storage type, drawn from its own stream of `seed` (so Q, K, V are the forward's).
Tensor4 make_grad_output(const Shape& s, uint64_t seed);

}  // namespace fa
