// What a step's launcher receives: device pointers with strides (in elements), the shape, and
// the step's workspace. Plain data, usable from host and device code alike.
//
// Q, K, V, O are [B, H, rows, d] in the storage type (fp16 or bf16), last dimension contiguous (K and
// V have Hkv heads); strides let the tests place them inside padded buffers. L (log-sum-exp) is fp32 [B, H, N].
#pragma once
#include <cstdint>

// Functions shared by kernels and blueprints (schedule.hpp) are marked FA_HD.
#if defined(__CUDACC__)
#define FA_HD __host__ __device__
#else
#define FA_HD
#endif

namespace fa {

struct AttnParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  int64_t q_sb = 0, q_sh = 0, q_sn = 0;  // batch, head, row strides of Q (elements)
  int64_t k_sb = 0, k_sh = 0, k_sn = 0;
  int64_t v_sb = 0, v_sh = 0, v_sn = 0;
  int64_t o_sb = 0, o_sh = 0, o_sn = 0;
  int64_t lse_sb = 0, lse_sh = 0;        // L rows are contiguous within a head
  int B = 0, H = 0, N = 0, Nk = 0, d = 0;
  // [gqa] K and V have Hkv heads ([B, Hkv, Nk, d]): query head h reads head h / (H / Hkv).
  int Hkv = 0;
  FA_HD int kv_head(int h) const { return Hkv > 0 ? h / (H / Hkv) : h; }  // 0 (unset): every head its own
  // [window] 0: none; else (with causal) query i sees keys i + (Nk − N) − window < j <= i + (Nk − N).
  int window = 0;
  // [cache-lens] A decode shape (Shape::cache_lens): the step's prepare() put the lengths where its
  // launcher finds them (step 17: its workspace).
  bool decode = false;
  bool causal = false;
  bool bf16 = false;                     // storage type: false = fp16, true = bf16
  // [fp8] Step 21: Q, K, V (bf16) quantized to e4m3 by the step itself, with a scale per (b, head)
  // or per 128 rows (fp8_block), Q and K through the Hadamard transform first (incoherent).
  bool fp8 = false, fp8_block = false, incoherent = false;
  float scale = 0.0f;                    // softmax scale (already resolved, never 0)
  void* workspace = nullptr;             // step-specific scratch in global memory
  // Dropout on the attention weights (common/kernel/dropout.hpp); p = 0: none. Steps 12, 13 and 19 only.
  float dropout = 0.0f;
  uint64_t dropout_seed = 0, dropout_offset = 0;
};

// What a backward launcher receives. Gradients are laid out like what they differentiate: dO has
// O's strides, dQ has Q's, dK has K's, dV has V's (all in the storage type).
struct BwdParams {
  AttnParams f;                 // Q, K, V, O and L of the forward (read only here), shape, scale
  const void* dout = nullptr;   // dO
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  void* workspace = nullptr;    // the backward's scratch (f.workspace is not used)
  void* saved = nullptr;        // [saved-for-backward] what the forward wrote for it (StepInfo::launch_save), or null
};

}  // namespace fa
