#include "harness/runner.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "core/arch.hpp"
#include "harness/gpu.hpp"
#include "harness/grade.hpp"
#include "harness/npy.hpp"
#include "reference/quantize.hpp"
#include "reference/reference.hpp"

namespace fa {

// [model] The bytes of the problem's tensors, what HBM must deliver at least once: Q, K, V, O in
// the storage type and L in fp32; for a backward also dO, dQ, dK, dV.
double model_tensor_bytes(const Shape& s, bool backward) {
  const double q = double(s.q_elems()), kv = double(s.kv_elems()), l = double(s.B) * s.H * s.N;
  const double fwd = 2 * (2 * q + 2 * kv) + 4 * l;
  return backward ? fwd + 2 * (2 * q + 2 * kv) + 4 * l : fwd;
}

namespace {

// The backward of a step that has one, after its forward `fwd` (the GPU's or the blueprint's).
void run_backward(const StepInfo& step, const CliOptions& o, bool on_gpu, const GpuConfig& cfg, const Inputs& in,
                  const Forward& fwd, const DeviceSpec& dev, RunRecord& r) {
  if (!step.backward_closed_form) throw std::logic_error("step " + step.id + " has a backward without its closed form");
  const Shape& s = o.shape;
  r.has_backward = true;
  const Tensor4 dO = make_grad_output(s, o.seed);
  const Gradients ref = reference_backward(s, in, dO, o.check_heads > 0 ? first_last_heads(s, o.check_heads) : pick_heads(s));
  const LedgerSet closed = step.backward_closed_form(s, o.step);
  // [saved-for-backward] What the forward wrote for this backward, if anything: charged apart.
  const LedgerSet saved_closed = step.saved_closed_form ? step.saved_closed_form(s, o.step) : LedgerSet{};
  Grads grads;
  if (on_gpu) {
    GpuBackwardResult g = run_backward_on_gpu(step, s, in, fwd, dO, o.step, cfg);
    grads = std::move(g.grads);
    r.bwd_stray_writes = g.stray_writes;
    r.bwd_ms = g.ms_median;
    r.bwd_ms_min = g.run_min;
    r.bwd_ms_max = g.run_max;
    r.bwd_reps = static_cast<int>(g.ms.size());
    r.bwd_kernel = std::move(g.kernel);
    r.bwd_graph_ms = g.graph_ms;
    r.bwd_graph_note = g.graph_note;
    r.bwd_ledger = closed;
    r.saved_ledger = saved_closed;
    r.save_ms = g.save_ms_median;
    r.save_reps = static_cast<int>(g.save_ms.size());
    r.bwd_launches = std::move(g.launches);
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    BackwardBlueprintResult bp = step.backward_blueprint(s, in, fwd, dO, o.step);
    r.bwd_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    r.bwd_reps = 1;
    grads = std::move(bp.grads);
    r.bwd_ledger = std::move(bp.ledger);
    r.bwd_ledger_diff = r.bwd_ledger.diff(closed);
    r.bwd_ledger_matches_closed_form = r.bwd_ledger_diff.empty();
    r.saved_ledger = std::move(bp.saved);
    r.saved_ledger_diff = r.saved_ledger.diff(saved_closed);
    r.saved_ledger_matches_closed_form = r.saved_ledger_diff.empty();
  }
  r.has_saved = !r.saved_ledger.kernels.empty() || !saved_closed.kernels.empty();
  if (r.has_saved) r.saved_predicted = predict(r.saved_ledger, dev);
  r.bwd_check = check_backward(s, in, dO, ref, grads);
  r.bwd_predicted = predict(r.bwd_ledger, dev);
  r.bwd_model = model_predict(r.bwd_ledger, r.bwd_launches, step.unit(o.step), default_ceilings(dev), model_tensor_bytes(s, true),
                             sass_loops_for(step.id, s.type_name(), int(s.d)));
  if (!o.save_dir.empty()) {
    write_npy_storage(o.save_dir + "/do.npy", s.dtype, dO);
    write_npy_storage(o.save_dir + "/dq.npy", s.dtype, grads.dq);
    write_npy_storage(o.save_dir + "/dk.npy", s.dtype, grads.dk);
    write_npy_storage(o.save_dir + "/dv.npy", s.dtype, grads.dv);
  }
}

}  // namespace

namespace {

// [device-inputs] The forward checked on the groups whose inputs came back from the device: each
// group is a problem of its own (one sequence, one key/value head and its query heads), checked
// against the reference like any other; the run passes when every group does, and its numbers
// are the worst group's. Non-finite O is counted over the whole output.
Check check_samples(const Shape& s, const std::vector<DeviceSample>& samples, const Forward& out) {
  Check all;
  all.pass = true;
  for (const DeviceSample& x : samples) {
    const int64_t G = x.shape.H;
    Forward part{Tensor4(1, G, s.N, s.d), Tensor4(1, G, s.N, 1)};
    for (int64_t h = 0; h < G; ++h)
      for (int64_t i = 0; i < s.N; ++i) {
        for (int64_t c = 0; c < s.d; ++c) part.o.at(0, h, i, c) = out.o.at(x.b, x.kv_head * G + h, i, c);
        part.lse.at(0, h, i, 0) = out.lse.at(x.b, x.kv_head * G + h, i, 0);
      }
    const Check c = check_forward(x.shape, x.in, reference_forward(x.shape, x.in), part);
    auto global = [&](Where w) { return w.b < 0 ? w : Where{x.b, x.kv_head * G + w.h, w.i, w.j}; };
    if (!(c.max_abs <= all.max_abs) || all.worst.b < 0) {
      all.max_abs = c.max_abs;
      all.worst = global(c.worst);
      all.worst_got = c.worst_got;
      all.worst_want = c.worst_want;
    }
    if (!(c.lse_max_abs <= all.lse_max_abs)) { all.lse_max_abs = c.lse_max_abs; all.lse_worst = global(c.lse_worst); }
    all.rel_l2 = std::max(all.rel_l2, c.rel_l2);
    all.atol = std::max(all.atol, c.atol);
    all.lse_atol = std::max(all.lse_atol, c.lse_atol);
    all.bad_lse += c.bad_lse;
    all.checked_rows = c.checked_rows;
    all.pass = all.pass && c.pass && c.max_abs <= c.atol;
  }
  for (float v : out.o.v) all.nonfinite_o += std::isfinite(v) ? 0 : 1;
  all.pass = all.pass && all.nonfinite_o == 0 && !samples.empty();
  return all;
}

}  // namespace

RunRecord run_once(const StepInfo& step, const CliOptions& o, bool on_gpu) {
  RunRecord r;
  r.step = step.id;
  r.variant = variant_name(o.step);
  // [dropout] The CSV has no column for P (its header is what bench resumes against), so P goes in
  // the variant: a row with dropout cannot pass for one without.
  if (o.shape.dropout > 0.0) {
    std::ostringstream v;
    v << (r.variant == "-" ? "" : r.variant + ";") << "dropout=" << o.shape.dropout;
    r.variant = v.str();
  }
  // [gqa] [window] [cache-lens] Likewise for decoding's shapes: HKV, the window, and the cache's
  // lengths (their range when there are many) go in the variant.
  {
    const Shape& sh = o.shape;
    std::ostringstream v;
    if (sh.hkv() != sh.H) v << ";hkv=" << sh.hkv();
    if (sh.window > 0) v << ";window=" << sh.window;
    if (sh.decode()) {
      const auto [lo, hi] = std::minmax_element(sh.cache_lens.begin(), sh.cache_lens.end());
      v << ";cache=" << *lo;
      if (*hi != *lo) v << ".." << *hi;
    }
    if (!v.str().empty()) r.variant = (r.variant == "-" ? "" : r.variant + ";") + v.str().substr(1);
  }
  r.shape = o.shape;
  r.seed = o.seed;
  r.inputs = o.inputs;
  const Shape& s = o.shape;
  // [device-inputs] A problem too large for the host is drawn on the GPU and checked on samples.
  if (on_gpu && inputs_on_device(s)) {
    if (step.has_backward()) throw std::invalid_argument("a problem this large (K above 2^28 elements) is for a forward-only step: the backward's reference needs every input on the host");
    if (!o.save_dir.empty()) throw std::invalid_argument("--save: the inputs of a problem this large (K above 2^28 elements) are drawn on the GPU and never held on the host");
    if (o.inputs != "default") throw std::invalid_argument("--inputs: a problem this large (K above 2^28 elements) draws its inputs on the GPU, by the default protocol only");
    const DeviceSpec dev = gpu_device_spec();
    r.backend = "gpu";
    r.device = dev.name;
    r.device_inputs = true;
    GpuConfig cfg;
    cfg.warmup = o.warmup;
    cfg.reps = o.reps;
    cfg.runs = o.runs;
    cfg.graph_calls = o.graph_calls;
    std::vector<DeviceSample> samples;
    GpuResult g = run_on_gpu_drawn(step, s, o.seed, o.step, cfg, samples);
    r.check = check_samples(s, samples, g.out);
    r.checked_groups = int64_t(samples.size());
    r.stray_writes = g.stray_writes;
    r.ms = g.ms_median;
    r.ms_min = g.run_min;
    r.ms_max = g.run_max;
    r.runs = o.runs;
    r.reps = static_cast<int>(g.ms.size());
    r.kernel = std::move(g.kernel);
    r.graph_ms = g.graph_ms;
    r.graph_note = g.graph_note;
    r.graph_calls = cfg.graph_calls;
    r.ledger = step.closed_form(s, o.step);
    r.predicted_for = dev.name + " (" + dev.source + ")";
    r.predicted = predict(r.ledger, dev);
    r.launches = std::move(g.launches);
    r.launches_note = g.launches_note;
    r.model = model_predict(r.ledger, r.launches, step.unit(o.step), default_ceilings(dev), model_tensor_bytes(s, false),
                        sass_loops_for(step.id, s.type_name(), int(s.d)));
    return r;
  }
  const Inputs in = make_inputs(s, o.input_spec());
  const Reference ref = reference_forward(s, in, pick_rows(s, o.seed));
  const LedgerSet closed = step.closed_form(s, o.step);
  if (!o.save_dir.empty()) std::filesystem::create_directories(o.save_dir);

  GpuConfig cfg;
  cfg.warmup = o.warmup;
  cfg.reps = o.reps;
  cfg.runs = o.runs;
  cfg.graph_calls = o.graph_calls;
  r.runs = on_gpu ? o.runs : 1;
  DeviceSpec dev;  // what the roofline is predicted for
  Forward out;
  if (on_gpu) {
    dev = gpu_device_spec();
    r.backend = "gpu";
    r.device = dev.name;
    GpuResult g = run_on_gpu(step, s, in, o.step, cfg);
    out = std::move(g.out);
    r.stray_writes = g.stray_writes;
    r.ms = g.ms_median;
    r.ms_min = g.run_min;
    r.ms_max = g.run_max;
    r.reps = static_cast<int>(g.ms.size());
    r.kernel = std::move(g.kernel);
    r.graph_ms = g.graph_ms;
    r.graph_note = g.graph_note;
    r.graph_calls = cfg.graph_calls;
    r.ledger = closed;
    r.predicted_for = dev.name + " (" + dev.source + ")";
    r.launches = std::move(g.launches);
    r.launches_note = g.launches_note;
  } else {
    dev = h200_datasheet();
    r.backend = "cpu";
    r.device = "CPU blueprint";
    const auto t0 = std::chrono::steady_clock::now();
    BlueprintResult bp = step.blueprint(s, in, o.step);
    r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    r.reps = 1;
    out = std::move(bp.out);
    r.ledger = std::move(bp.ledger);
    r.ledger_diff = r.ledger.diff(closed);
    r.ledger_matches_closed_form = r.ledger_diff.empty();
    r.predicted_for = dev.source;
  }
  r.check = check_forward(s, in, ref, out);
  r.rmse = o_rmse(s, ref, out);
  // [fp8] FP8's own error: O against the reference on the inputs before quantization (reported, not checked).
  if (s.fp8) r.raw_rmse = o_rmse(s, reference_forward(s.without_fp8(), in, ref.rows), out);
  r.predicted = predict(r.ledger, dev);
  if (!on_gpu) r.launches_note = "a CPU run launches nothing";
  r.model = model_predict(r.ledger, r.launches, step.unit(o.step), default_ceilings(dev), model_tensor_bytes(s, false),
                        sass_loops_for(step.id, s.type_name(), int(s.d)));
  if (!o.save_dir.empty()) {
    write_npy_storage(o.save_dir + "/q.npy", s.dtype, in.q);
    write_npy_storage(o.save_dir + "/k.npy", s.dtype, in.k);
    write_npy_storage(o.save_dir + "/v.npy", s.dtype, in.v);
    write_npy_storage(o.save_dir + "/o.npy", s.dtype, out.o);
    write_npy_f32(o.save_dir + "/lse.npy", out.lse, true);
    if (s.fp8) {  // [fp8] the codes (uint8, e4m3 bits) and descales the GPU's quantize kernels make too (test_gpu)
      const Fp8Inputs f = quantize_fp8(s, in);
      for (const auto& [name, t] : {std::pair{"q", &f.q}, {"k", &f.k}, {"v", &f.v}}) {
        write_npy(o.save_dir + "/" + name + "8.npy", "|u1", {t->B, t->heads, t->rows, t->d}, t->codes.data(), t->codes.size());
        write_npy(o.save_dir + "/" + name + "_descale.npy", "<f4", {t->B, t->heads, t->groups}, t->descales.data(),
                  t->descales.size() * 4);
      }
    }
  }
  if (step.has_backward()) run_backward(step, o, on_gpu, cfg, in, out, dev, r);
  return r;
}

}  // namespace fa
