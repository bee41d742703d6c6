#include "core/problem.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "harness/parallel.hpp"
#include "core/rng.hpp"

namespace fa {

double Shape::softmax_scale() const { return scale != 0.0 ? scale : 1.0 / std::sqrt(static_cast<double>(d)); }

int64_t Shape::last_visible_key(int64_t i, int64_t b) const { return causal ? i + (keys(b) - N) : keys(b) - 1; }
int64_t Shape::first_visible_key(int64_t i, int64_t b) const {
  return window > 0 ? std::max<int64_t>(0, i + (keys(b) - N) - window + 1) : 0;
}

double Shape::flops_fa_convention() const {
  const double f = 4.0 * double(B) * double(H) * double(N) * double(Nk) * double(d);
  return causal ? f / 2.0 : f;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << "B=" << B << " H=" << H << " N=" << N << " Nk=" << Nk << " d=" << d
     << " causal=" << (causal ? 1 : 0) << " " << type_name();
  if (fp8 && fp8_block) os << " fp8-scales=block";
  if (fp8 && incoherent) os << " incoherent";
  if (dropout > 0.0) os << " dropout=" << dropout;
  if (Hkv > 0 && Hkv != H) os << " Hkv=" << Hkv;
  if (window > 0) os << " window=" << window;
  if (decode()) {
    // Every length for a few sequences; their range for many.
    os << " cache_lens=";
    if (cache_lens.size() <= 8) {
      for (size_t b = 0; b < cache_lens.size(); ++b) os << (b ? "," : "") << cache_lens[b];
    } else {
      os << *std::min_element(cache_lens.begin(), cache_lens.end()) << ".." << *std::max_element(cache_lens.begin(), cache_lens.end());
    }
  }
  return os.str();
}

bool set_inputs(InputSpec& spec, const std::string& name) {
  if (name == "default") spec.offset = 0.5, spec.outliers = 0.0;
  else if (name == "normal") spec.offset = 0.0, spec.outliers = 0.0;
  else if (name == "outliers") spec.offset = 0.0, spec.outliers = 0.001;
  else return false;
  spec.qk_spread = spec.v_spread = 1.0;
  return true;
}

bool set_type(Shape& s, const std::string& name) {
  if (name == "fp16" || name == "f16" || name == "half") s.dtype = DType::f16, s.fp8 = false;
  else if (name == "bf16") s.dtype = DType::bf16, s.fp8 = false;
  else if (name == "e4m3") s.dtype = DType::bf16, s.fp8 = true;
  else return false;
  return true;
}

std::string validate(const Shape& s) {
  std::ostringstream os;
  auto positive = [&](const char* flag, int64_t v) {
    if (v < 1 && os.str().empty()) os << flag << " must be a positive integer (got " << v << ")";
  };
  positive("--b", s.B);
  positive("--h", s.H);
  positive("--n", s.N);
  positive("--nk", s.Nk);
  if (!os.str().empty()) return os.str();
  bool d_ok = false;
  for (int d : kHeadDims) d_ok = d_ok || s.d == d;
  if (!d_ok && s.d != kWideHeadDim) {
    os << "--d must be one of 16, 32, 64, 128, 256 (got " << s.d
       << "); the head dimension is a template parameter of the kernels";
    return os.str();
  }
  if (s.Hkv < 0 || s.H % s.hkv() != 0) {
    os << "--hkv must divide --h (got H = " << s.H << ", HKV = " << s.Hkv << "): each key/value head serves H / HKV query heads";
    return os.str();
  }
  if (s.window < 0) return "--window must be a positive number of keys";
  if (s.fp8 && s.dtype != DType::bf16) return "--dtype e4m3 keeps O in bf16 (an fp8 shape's dtype is bf16)";
  if (!s.fp8 && (s.fp8_block || s.incoherent)) return "--fp8-scales and --incoherent go with --dtype e4m3";
  if (s.fp8 && s.incoherent && (s.d & (s.d - 1)) != 0) return "--incoherent needs d a power of two (the Hadamard transform)";
  if (s.window > 0 && !s.causal) return "--window needs --causal: the window's right edge is the causal diagonal";
  if (s.decode()) {
    if (int64_t(s.cache_lens.size()) != s.B) {
      os << "--cache-lens: " << s.cache_lens.size() << " lengths for " << s.B << " sequences (--b)";
      return os.str();
    }
    for (size_t b = 0; b < s.cache_lens.size(); ++b)
      if (s.cache_lens[b] < 0 || s.cache_lens[b] + s.N > s.Nk) {
        os << "--cache-lens: sequence " << b << " holds " << s.cache_lens[b] << " tokens; with the " << s.N
           << " new ones (--qlen) that must fit the cache of " << s.Nk << " (--nk): 0 to " << s.Nk - s.N;
        return os.str();
      }
  }
  if (!(s.scale >= 0.0) || !std::isfinite(s.scale)) return "--scale must be a finite number >= 0 (0 means 1/sqrt(d))";
  // In float too: the kernels get P as a float (AttnParams), and 1 − P must not round to 0 there.
  if (!(s.dropout >= 0.0 && float(s.dropout) < 1.0f)) {  // NaN fails too
    os << "--dropout must be in [0, 1) (got " << s.dropout << ")";
    return os.str();
  }
  // Keep every element index inside 2^31 per tensor and the problem within reason on a host.
  // [cache-lens] A decode shape's cache may be larger (2^34 elements: step 17 addresses it with
  // 64-bit offsets, and its inputs are then drawn on the device).
  constexpr int64_t kMaxElems = int64_t(1) << 31, kMaxCache = int64_t(1) << 34;
  if (s.q_elems() >= kMaxElems || s.kv_elems() >= (s.decode() ? kMaxCache : kMaxElems))
    return s.decode() ? "--b/--h/--qlen/--nk/--d: Q must stay below 2^31 elements and the cache below 2^34"
                      : "--b/--h/--n/--nk/--d: a tensor of B·H·N·d elements must stay below 2^31";
  return "";
}

namespace {

// Fill t with offset + spread·randn rounded to the storage type. The tensor is drawn in fixed
// chunks, each chunk from its own generator seeded by (seed, stream, chunk): the same values for a
// seed whatever the number of threads. Each tensor of a problem has its own stream.
void fill_randn(Tensor4& t, DType dtype, uint64_t seed, uint64_t stream, double offset, double spread, double outliers = 0.0) {
  constexpr int64_t kChunk = int64_t(1) << 16;
  const int64_t n = static_cast<int64_t>(t.v.size()), chunks = (n + kChunk - 1) / kChunk;
  parallel_for(chunks, [&](int64_t c) {
    Rng rng(seed * 0x100000001b3ull + stream * 0x9e3779b97f4a7c15ull + uint64_t(c));
    for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) {
      double x = offset + spread * rng.normal();
      if (outliers > 0.0 && rng.uniform() <= outliers) x *= kOutlierScale;  // [outliers] (no draw without them)
      t.v[static_cast<size_t>(i)] = round_to(dtype, static_cast<float>(x));
    }
  });
}

// The streams: Q, K, V are 1, 2, 3 (the order make_inputs has always drawn them in); dO is 4.
enum Stream : uint64_t { kStreamQ = 1, kStreamK = 2, kStreamV = 3, kStreamDO = 4 };

}  // namespace

Inputs make_inputs(const Shape& s, const InputSpec& spec) {
  Inputs in{Tensor4(s.B, s.H, s.N, s.d), Tensor4(s.B, s.hkv(), s.Nk, s.d), Tensor4(s.B, s.hkv(), s.Nk, s.d)};
  fill_randn(in.q, s.dtype, spec.seed, kStreamQ, spec.offset, spec.qk_spread, spec.outliers);
  fill_randn(in.k, s.dtype, spec.seed, kStreamK, spec.offset, spec.qk_spread, spec.outliers);
  fill_randn(in.v, s.dtype, spec.seed, kStreamV, spec.offset, spec.v_spread, spec.outliers);
  return in;
}

Tensor4 make_grad_output(const Shape& s, uint64_t seed) {
  Tensor4 dO(s.B, s.H, s.N, s.d);
  fill_randn(dO, s.dtype, seed, kStreamDO, 0.0, 1.0);
  return dO;
}

}  // namespace fa
