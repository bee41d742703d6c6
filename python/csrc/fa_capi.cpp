// The C ABI of the Python package (python/flash_attn_steps): the steps' blueprints and kernels
// behind a few plain functions that ctypes can call, so that one shared library serves every
// PyTorch (Debian's CPU-only 1.13 in CI, the GPU machine's 2.11) without being compiled against
// any of them.
//
// Every function returns 0, or an error code (fa_capi.h) with its message in fa_last_error(). The
// Python side raises an exception naming the argument before it calls anything here; what it cannot
// know (what this GPU can run, a step's own refusals) is checked here before any launch, and the
// message says which step refused and why.
//
// [capi-cpu] On the CPU a call runs the step's blueprint: float values already rounded to the
// storage type, contiguous [B, H, rows, d]. [capi-gpu] On a GPU it runs the step's launcher on the
// caller's device pointers, with their strides, the caller's workspace and the caller's stream.
#include "fa_capi.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/arch.hpp"
#include "core/problem.hpp"
#include "core/registry.hpp"
#include "core/step.hpp"
#include "harness/gpu.hpp"
#include "harness/parallel.hpp"
#include "kernel/dropout.hpp"

namespace {

thread_local std::string g_error;

struct CapiError : std::runtime_error {
  int code;
  CapiError(int c, const std::string& m) : std::runtime_error(m), code(c) {}
};

const fa::StepInfo& find_step(const char* id) {
  const std::string want = id ? id : "";
  for (const fa::StepInfo* s : fa::all_steps())
    if (s->id == want) return *s;
  throw CapiError(FA_INVALID, "no step '" + want + "' in this build");
}

// "name=value;name=value" -> the step's options, each name and value checked against its flags.
fa::StepOptions parse_options(const fa::StepInfo& step, const char* text) {
  fa::StepOptions o;
  std::stringstream all(text ? text : "");
  std::string item;
  while (std::getline(all, item, ';')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) throw CapiError(FA_INVALID, "step option '" + item + "' is not name=value");
    const std::string name = item.substr(0, eq), value = item.substr(eq + 1);
    const fa::StepFlag* flag = nullptr;
    for (const auto& f : step.flags)
      if (f.name == name) flag = &f;
    if (!flag) throw CapiError(FA_INVALID, step.program() + " has no option '" + name + "'");
    if (std::find(flag->choices.begin(), flag->choices.end(), value) == flag->choices.end())
      throw CapiError(FA_INVALID, step.program() + ": option " + name + " has no value '" + value + "'");
    if (!flag->sweep && value == flag->choices.front()) continue;  // an experiment at its default
    o[name] = value;
  }
  for (const auto& f : step.flags)  // the swept flags at their defaults, as the runner has them
    if (f.sweep && !o.count(f.name)) o[f.name] = f.choices.front();
  return o;
}

fa::Shape to_shape(const fa_shape* c) {
  if (!c) throw CapiError(FA_INVALID, "no shape");
  fa::Shape s;
  s.B = c->B, s.H = c->H, s.Hkv = c->Hkv, s.N = c->N, s.Nk = c->Nk, s.d = c->d;
  s.causal = c->causal != 0;
  s.window = c->window;
  s.dtype = c->bf16 ? fa::DType::bf16 : fa::DType::f16;
  s.scale = c->scale;
  s.dropout = c->dropout;
  s.dropout_seed = c->dropout_seed;
  s.dropout_offset = c->dropout_offset;
  if (c->cache_lens) s.cache_lens.assign(c->cache_lens, c->cache_lens + c->B);
  if (const std::string bad = fa::validate(s); !bad.empty()) throw CapiError(FA_INVALID, bad);
  return s;
}

// What the step takes at all, on any backend (the runner's own refusals, CLI aside).
void check_step_takes(const fa::StepInfo& step, const fa::Shape& s, bool backward) {
  const std::string who = step.program() + ": ";
  if (backward && !step.has_backward()) throw CapiError(FA_UNSUPPORTED, who + "has no backward pass");
  if (!step.takes_d(s.d))
    throw CapiError(FA_UNSUPPORTED, who + "head dimension " + std::to_string(s.d) + " is not one of its tiles' (d <= 128)");
  if (s.dropout > 0.0 && !step.supports_dropout) throw CapiError(FA_UNSUPPORTED, who + "does not apply dropout");
  if (s.hkv() != s.H && !step.supports_gqa) throw CapiError(FA_UNSUPPORTED, who + "has no grouped key/value heads");
  if (s.window > 0 && !step.supports_window) throw CapiError(FA_UNSUPPORTED, who + "has no sliding window");
  if (s.decode() && !step.supports_decode) throw CapiError(FA_UNSUPPORTED, who + "is not a decoding step");
  if (step.max_n > 0 && s.N > step.max_n)
    throw CapiError(FA_UNSUPPORTED, who + "takes at most " + std::to_string(step.max_n) + " query rows (got " + std::to_string(s.N) + ")");
}

fa::Tensor4 host_tensor(const float* p, int64_t B, int64_t H, int64_t rows, int64_t cols, const char* name) {
  if (!p) throw CapiError(FA_INVALID, std::string("no ") + name);
  fa::Tensor4 t(B, H, rows, cols);
  std::memcpy(t.v.data(), p, t.v.size() * sizeof(float));
  return t;
}

void copy_out(const fa::Tensor4& t, float* p) { std::memcpy(p, t.v.data(), t.v.size() * sizeof(float)); }

template <class F>
int guarded(F&& f) {
  try {
    f();
    g_error.clear();
    return FA_OK;
  } catch (const CapiError& e) {
    g_error = e.what();
    return e.code;
  } catch (const fa::Unsupported& e) {
    g_error = e.what();
    return FA_UNSUPPORTED;
  } catch (const std::invalid_argument& e) {
    g_error = e.what();
    return FA_INVALID;
  } catch (const std::exception& e) {
    g_error = e.what();
    return FA_RUNTIME;
  } catch (...) {
    g_error = "unknown error";
    return FA_RUNTIME;
  }
}

#ifdef FA_HAVE_CUDA
fa::AttnParams attn_params(const fa::Shape& s, const fa_ptrs* p, void* workspace) {
  if (!p) throw CapiError(FA_INVALID, "no tensors");
  fa::AttnParams a = fa::shape_params(s);  // [shape-params] the runner's mapping
  a.q = p->q, a.k = p->k, a.v = p->v, a.o = p->o, a.lse = p->lse;
  a.q_sb = p->q_sb, a.q_sh = p->q_sh, a.q_sn = p->q_sn;
  a.k_sb = p->k_sb, a.k_sh = p->k_sh, a.k_sn = p->k_sn;
  a.v_sb = p->v_sb, a.v_sh = p->v_sh, a.v_sn = p->v_sn;
  a.o_sb = p->o_sb, a.o_sh = p->o_sh, a.o_sn = p->o_sn;
  a.lse_sb = p->lse_sb, a.lse_sh = p->lse_sh;
  a.workspace = workspace;
  return a;
}

void require_gpu(const fa::StepInfo& step, const fa::Shape& s, const fa::StepOptions& o, bool backward) {
  std::string why;
  if (!fa::gpu_available(why)) throw CapiError(FA_UNSUPPORTED, "no CUDA device: " + why);
  check_step_takes(step, s, backward);
  fa::require_supported(step, s, o, fa::gpu_caps(), backward);  // [arch]
  if (backward ? !step.launch_backward : !step.launch)
    throw CapiError(FA_UNSUPPORTED, step.program() + " has no GPU " + (backward ? "backward" : "forward") + " in this build");
}
#endif

}  // namespace

extern "C" {

int fa_abi_version(void) { return FA_ABI_VERSION; }

const char* fa_last_error(void) { return g_error.c_str(); }

int fa_built_with_cuda(void) {
#ifdef FA_HAVE_CUDA
  return 1;
#else
  return 0;
#endif
}

// Compute capability (major·10 + minor) the kernels can count on, and the SM count; 0 when there is
// no usable device (the message says why).
int fa_gpu_info(int* cc, int* sms) {
  return guarded([&] {
    *cc = 0;
    *sms = 0;
#ifdef FA_HAVE_CUDA
    std::string why;
    if (!fa::gpu_available(why)) throw CapiError(FA_UNSUPPORTED, why);
    const fa::GpuCaps caps = fa::gpu_caps();
    if (caps.code_cc < 0) throw CapiError(FA_UNSUPPORTED, "this build has no code for the GPU (built for " + caps.built_for + ")");
    *cc = caps.usable_cc();
    *sms = fa::gpu_device_spec().sm_count;
#else
    throw CapiError(FA_UNSUPPORTED, "this build has no CUDA (the blueprints run on the CPU)");
#endif
  });
}

// The head dimensions `step`'s GPU kernels are compiled for (its StepInfo::head_dims, or every one
// the project has), at most `cap` of them; *n says how many there are.
int fa_step_head_dims(const char* step_id, int* dims, int cap, int* n) {
  return guarded([&] {
    const fa::StepInfo& step = find_step(step_id);
    std::vector<int> all = step.head_dims;
    if (all.empty()) all.assign(std::begin(fa::kHeadDims), std::end(fa::kHeadDims));
    *n = int(all.size());
    for (int i = 0; i < cap && i < int(all.size()); ++i) dims[i] = all[size_t(i)];
  });
}

// "" when `step` can run the shape (its backward too with `backward`) on the CPU (on_gpu = 0) or on
// this GPU; else FA_UNSUPPORTED and the reason in fa_last_error().
int fa_check(const char* step_id, const fa_shape* shape, const char* options, int backward, int on_gpu) {
  return guarded([&] {
    const fa::StepInfo& step = find_step(step_id);
    const fa::Shape s = to_shape(shape);
    const fa::StepOptions o = parse_options(step, options);
    check_step_takes(step, s, backward != 0);
    if (on_gpu) {
#ifdef FA_HAVE_CUDA
      require_gpu(step, s, o, backward != 0);
#else
      throw CapiError(FA_UNSUPPORTED, "this build has no CUDA");
#endif
    }
  });
}

// [capi-cpu] The forward's blueprint: q [B,H,N,d], k and v [B,Hkv,Nk,d] in, o [B,H,N,d] and
// lse [B,H,N] out, all float, contiguous.
int fa_cpu_forward(const char* step_id, const fa_shape* shape, const char* options, const float* q, const float* k,
                   const float* v, float* o, float* lse) {
  return guarded([&] {
    const fa::StepInfo& step = find_step(step_id);
    const fa::Shape s = to_shape(shape);
    const fa::StepOptions opts = parse_options(step, options);
    check_step_takes(step, s, false);
    fa::Inputs in;
    in.q = host_tensor(q, s.B, s.H, s.N, s.d, "q");
    in.k = host_tensor(k, s.B, s.hkv(), s.Nk, s.d, "k");
    in.v = host_tensor(v, s.B, s.hkv(), s.Nk, s.d, "v");
    if (!o || !lse) throw CapiError(FA_INVALID, "no output buffers");
    const fa::BlueprintResult r = step.blueprint(s, in, opts);
    copy_out(r.out.o, o);
    copy_out(r.out.lse, lse);
  });
}

// [capi-cpu] The backward's blueprint: the forward's tensors and dO in, dq, dk, dv out.
int fa_cpu_backward(const char* step_id, const fa_shape* shape, const char* options, const float* q, const float* k,
                    const float* v, const float* o, const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  return guarded([&] {
    const fa::StepInfo& step = find_step(step_id);
    const fa::Shape s = to_shape(shape);
    const fa::StepOptions opts = parse_options(step, options);
    check_step_takes(step, s, true);
    fa::Inputs in;
    in.q = host_tensor(q, s.B, s.H, s.N, s.d, "q");
    in.k = host_tensor(k, s.B, s.hkv(), s.Nk, s.d, "k");
    in.v = host_tensor(v, s.B, s.hkv(), s.Nk, s.d, "v");
    fa::Forward f;
    f.o = host_tensor(o, s.B, s.H, s.N, s.d, "out");
    f.lse = host_tensor(lse, s.B, s.H, s.N, 1, "softmax_lse");
    const fa::Tensor4 g = host_tensor(dout, s.B, s.H, s.N, s.d, "dout");
    if (!dq || !dk || !dv) throw CapiError(FA_INVALID, "no gradient buffers");
    const fa::BackwardBlueprintResult r = step.backward_blueprint(s, in, f, g, opts);
    copy_out(r.grads.dq, dq);
    copy_out(r.grads.dk, dk);
    copy_out(r.grads.dv, dv);
  });
}

// [capi-dropout] The dropout mask every step draws (common/kernel/dropout.hpp): keep[i·Nk + j] of
// query head h of sequence b, for the shape's P, seed and offset. 1 = kept.
int fa_dropout_keep(const fa_shape* shape, int64_t b, int64_t h, uint8_t* keep) {
  return guarded([&] {
    const fa::Shape s = to_shape(shape);
    if (b < 0 || b >= s.B || h < 0 || h >= s.H) throw CapiError(FA_INVALID, "dropout mask: (b, h) outside the shape");
    const uint32_t t = fa::dropout_threshold(float(s.dropout));
    fa::parallel_for(s.N, [&](int64_t i) {  // rows apart: the same bits on any number of threads
      for (int64_t j = 0; j < s.Nk; ++j)
        keep[i * s.Nk + j] = fa::dropout_keep(s.dropout_seed, s.dropout_offset, b * s.H + h, i, j, t) ? 1 : 0;
    });
  });
}

// [capi-gpu] Bytes of global scratch the step's forward (backward = 0) or backward needs.
int fa_cuda_workspace_bytes(const char* step_id, const fa_shape* shape, const char* options, int backward, uint64_t* bytes) {
  return guarded([&] {
    const fa::StepInfo& step = find_step(step_id);
    const fa::Shape s = to_shape(shape);
    const fa::StepOptions opts = parse_options(step, options);
    *bytes = 0;
#ifdef FA_HAVE_CUDA
    auto f = backward ? step.backward_workspace_bytes : step.workspace_bytes;
    *bytes = f ? uint64_t(f(s, opts)) : 0;
#else
    (void)backward;
    throw CapiError(FA_UNSUPPORTED, "this build has no CUDA");
#endif
  });
}

// [capi-gpu] The step's forward on device tensors (backward = 0: writes o and lse), or its backward
// (dout with o's strides, dq with q's, dk with k's, dv with v's). `stream` is a cudaStream_t.
static int cuda_call(const char* step_id, const fa_shape* shape, const char* options, const fa_ptrs* ptrs, void* workspace,
                     void* stream, bool backward) {
  return guarded([&] {
    const fa::StepInfo& step = find_step(step_id);
    const fa::Shape s = to_shape(shape);
    const fa::StepOptions opts = parse_options(step, options);
#ifdef FA_HAVE_CUDA
    require_gpu(step, s, opts, backward);
    if (!backward) {
      const fa::AttnParams p = attn_params(s, ptrs, workspace);
      // [capi-decode] A step that sets up state per problem (step 17: the cache lengths and the new
      // tokens taken out of K and V into its workspace) does it first. It may overwrite K and V past
      // each sequence's cached tokens: the package hands it a copy of the cache, never the caller's.
      if (step.prepare) step.prepare(s, p, opts, stream);
      step.launch(p, opts, stream);
      return;
    }
    if (step.backward_saved_bytes && step.backward_saved_bytes(s, opts) > 0)
      throw CapiError(FA_UNSUPPORTED, step.program() + " reads a tensor its forward saves beyond O and L: not offered here");
    fa::BwdParams p;
    p.f = attn_params(s, ptrs, nullptr);
    p.dout = ptrs->dout;
    p.dq = ptrs->dq;
    p.dk = ptrs->dk;
    p.dv = ptrs->dv;
    p.workspace = workspace;
    step.launch_backward(p, opts, stream);
#else
    (void)ptrs, (void)workspace, (void)stream, (void)backward;
    throw CapiError(FA_UNSUPPORTED, "this build has no CUDA");
#endif
  });
}

int fa_cuda_forward(const char* step_id, const fa_shape* shape, const char* options, const fa_ptrs* ptrs, void* workspace,
                    void* stream) {
  return cuda_call(step_id, shape, options, ptrs, workspace, stream, false);
}

int fa_cuda_backward(const char* step_id, const fa_shape* shape, const char* options, const fa_ptrs* ptrs, void* workspace,
                     void* stream) {
  return cuda_call(step_id, shape, options, ptrs, workspace, stream, true);
}

}  // extern "C"
