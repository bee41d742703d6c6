/* The C ABI of the Python package (python/flash_attn_steps/_lib.py declares the same, for ctypes).
   Every function returns FA_OK or an error code, with the message in fa_last_error(). */
#ifndef FA_CAPI_H
#define FA_CAPI_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FA_ABI_VERSION 1
#if defined(__GNUC__)
#define FA_API __attribute__((visibility("default")))
#else
#define FA_API
#endif

enum { FA_OK = 0, FA_INVALID = 1, FA_UNSUPPORTED = 2, FA_RUNTIME = 3 };

/* The problem, in the course's terms (common/core/problem.hpp, Shape). */
typedef struct {
  int64_t B, H, Hkv, N, Nk, d;
  int32_t causal, bf16;
  int64_t window;        /* 0: none; else query i sees keys i + Nk - N - window < j <= i + Nk - N */
  double scale;          /* the softmax scale, never 0 here */
  double dropout;        /* P of dropping a weight */
  uint64_t dropout_seed, dropout_offset;
  const int64_t* cache_lens; /* [B] tokens already in each sequence's cache (decoding), or null */
} fa_shape;

/* Device tensors and their strides in elements (the last dimension contiguous). */
typedef struct {
  const void *q, *k, *v;
  void* o;
  float* lse;
  int64_t q_sb, q_sh, q_sn, k_sb, k_sh, k_sn, v_sb, v_sh, v_sn, o_sb, o_sh, o_sn, lse_sb, lse_sh;
  const void* dout; /* the backward: dout with o's strides, dq with q's, dk with k's, dv with v's */
  void *dq, *dk, *dv;
} fa_ptrs;

FA_API int fa_abi_version(void);
FA_API const char* fa_last_error(void);
FA_API int fa_built_with_cuda(void);
FA_API int fa_gpu_info(int* cc, int* sms);
FA_API int fa_step_head_dims(const char* step, int* dims, int cap, int* n);
FA_API int fa_check(const char* step, const fa_shape* shape, const char* options, int backward, int on_gpu);
FA_API int fa_cpu_forward(const char* step, const fa_shape* shape, const char* options, const float* q, const float* k,
                   const float* v, float* o, float* lse);
FA_API int fa_cpu_backward(const char* step, const fa_shape* shape, const char* options, const float* q, const float* k,
                    const float* v, const float* o, const float* lse, const float* dout, float* dq, float* dk, float* dv);
FA_API int fa_dropout_keep(const fa_shape* shape, int64_t b, int64_t h, uint8_t* keep);
FA_API int fa_cuda_workspace_bytes(const char* step, const fa_shape* shape, const char* options, int backward, uint64_t* bytes);
FA_API int fa_cuda_forward(const char* step, const fa_shape* shape, const char* options, const fa_ptrs* ptrs, void* workspace,
                    void* stream);
FA_API int fa_cuda_backward(const char* step, const fa_shape* shape, const char* options, const fa_ptrs* ptrs, void* workspace,
                     void* stream);

#ifdef __cplusplus
}
#endif
#endif
