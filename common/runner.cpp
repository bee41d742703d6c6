#include "runner.hpp"

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

#include "arch.hpp"
#include "gpu.hpp"
#include "grade.hpp"
#include "npy.hpp"
#include "reference.hpp"

namespace fa {

std::string variant_name(const StepOptions& o) {
  std::string s;
  for (const auto& [k, v] : o) s += (s.empty() ? "" : ";") + k + "=" + v;
  return s.empty() ? "-" : s;
}

std::string csv_header() {
  return "step,variant,backend,device,dtype,B,H,N,Nk,d,causal,seed,max_abs_err,rel_l2_err,lse_max_abs_err,pass,"
         "ms,reps,tflops,gmem_read_bytes,gmem_write_bytes,matmul_flops,workspace_bytes,predicted_ms,"
         "bwd_max_ratio,bwd_pass,bwd_ms,bwd_tflops,bwd_gmem_read_bytes,bwd_gmem_write_bytes,bwd_matmul_flops,"
         "bwd_workspace_bytes,bwd_predicted_ms,bwd_gmem_atomic_bytes,bwd_save_ms,bwd_save_predicted_ms,"
         "bwd_save_gmem_write_bytes,"
         "model_ms,bound_by,ms_min,ms_max,runs,launches,bwd_model_ms,bwd_bound_by,bwd_ms_min,bwd_ms_max,bwd_launches,"
         "kernel_ms,graph_ms,graph_calls,kernel_tflops,bwd_kernel_ms,bwd_graph_ms,bwd_kernel_tflops,kernels_ms,"
         "bwd_kernels_ms,clock";
}

std::string format_parts(const std::vector<std::pair<std::string, double>>& parts) {
  std::ostringstream os;
  os << std::setprecision(6);
  for (size_t i = 0; i < parts.size(); ++i) os << (i ? ";" : "") << parts[i].first << ":" << parts[i].second;
  return os.str();
}

std::string csv_row(const RunRecord& r) {
  const Ledger t = r.ledger.total();
  std::ostringstream os;
  os << r.step << "," << r.variant << "," << r.backend << ",\"" << r.device << "\"," << dtype_name(r.shape.dtype) << ","
     << r.shape.B << "," << r.shape.H << "," << r.shape.N << "," << r.shape.Nk << "," << r.shape.d << ","
     << (r.shape.causal ? 1 : 0) << "," << r.seed << "," << std::setprecision(4) << std::scientific << r.check.max_abs
     << "," << r.check.rel_l2 << "," << r.check.lse_max_abs << "," << (r.forward_passed() ? 1 : 0) << ","
     << std::defaultfloat << std::setprecision(6) << r.ms << "," << r.reps << "," << r.tflops() << "," << t.gmem_read << ","
     << t.gmem_write << "," << t.matmul_flops << "," << t.workspace << "," << r.predicted.ms;
  if (r.has_backward) {
    const Ledger b = r.bwd_ledger.total();
    const double ratio = std::max({r.bwd_check.dq.max_ratio, r.bwd_check.dk.max_ratio, r.bwd_check.dv.max_ratio});
    os << "," << std::setprecision(4) << std::scientific << ratio << "," << (r.backward_passed() ? 1 : 0) << ","
       << std::defaultfloat << std::setprecision(6) << r.bwd_ms << "," << r.bwd_tflops() << "," << b.gmem_read << ","
       << b.gmem_write << "," << b.matmul_flops << "," << b.workspace << "," << r.bwd_predicted.ms << "," << b.gmem_atomic;
  } else {
    os << ",,,,,,,,,,";  // the ten bwd_* columns, empty
  }
  if (r.has_saved) {
    os << "," << std::defaultfloat;
    if (r.save_reps > 0) os << std::setprecision(6) << r.save_ms;
    os << "," << std::setprecision(6) << r.saved_predicted.ms << "," << r.saved_ledger.total().gmem_write;
  } else {
    os << ",,,";  // the three bwd_save_* columns, empty
  }
  // [model] [noise] [launches], appended so that older files keep their columns' places.
  os << std::defaultfloat << std::setprecision(6) << "," << r.model.ms << "," << r.model.bound_by << "," << r.ms_min << ","
     << r.ms_max << "," << r.runs << "," << format_launches(r.launches);
  if (r.has_backward)
    os << "," << r.bwd_model.ms << "," << r.bwd_model.bound_by << "," << r.bwd_ms_min << "," << r.bwd_ms_max << ","
       << format_launches(r.bwd_launches);
  else
    os << ",,,,,";
  // [kernel-clock] [graph-time] Empty where not measured (a CPU run, no CUPTI, a launcher no graph holds).
  auto num = [&](double x) {
    if (x > 0) os << std::setprecision(6) << x;
  };
  os << ",";
  num(r.kernel.ms_median);
  os << ",";
  num(r.graph_ms);
  os << "," << (r.graph_ms > 0 ? r.graph_calls : 0) << ",";
  num(r.kernel_tflops());
  os << ",";
  if (r.has_backward) num(r.bwd_kernel.ms_median);
  os << ",";
  if (r.has_backward) num(r.bwd_graph_ms);
  os << ",";
  if (r.has_backward) num(r.bwd_kernel_tflops());
  os << "," << format_parts(r.kernel.parts) << "," << format_parts(r.bwd_kernel.parts) << ","
     << (r.kernel.ms_median > 0 ? kKernelClock : "");
  return os.str();
}

LedgerSet all_kernels(const RunRecord& r) {
  LedgerSet all = r.ledger;
  for (const LedgerSet* part : {&r.saved_ledger, &r.bwd_ledger})
    for (const auto& [name, l] : part->kernels) {
      for (const auto& kl : all.kernels)
        if (kl.first == name) throw std::logic_error("the kernel name " + name + " appears in two passes");
      all.kernels.emplace_back(name, l);
    }
  return all;
}

// [model] The bytes of the problem's tensors, what HBM must deliver at least once: Q, K, V, O in
// the storage type and L in fp32; for a backward also dO, dQ, dK, dV.
double model_tensor_bytes(const Shape& s, bool backward) {
  const double q = double(s.q_elems()), kv = double(s.kv_elems()), l = double(s.B) * s.H * s.N;
  const double fwd = 2 * (2 * q + 2 * kv) + 4 * l;
  return backward ? fwd + 2 * (2 * q + 2 * kv) + 4 * l : fwd;
}

namespace {

// "stepNN: cannot run: <why>": an Unsupported message names its step first (tools print it alone);
// the program's own name is already in front of it.
int refuse(const StepInfo& step, const Unsupported& e) {
  std::string why = e.what();
  const std::string own = step.program() + ": ";
  if (why.rfind(own, 0) == 0) why = why.substr(own.size());
  std::cerr << step.program() << ": cannot run: " << why << "\n";
  return 2;
}

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
  r.bwd_model = model_predict(r.bwd_ledger, r.bwd_launches, step.unit(o.step), default_ceilings(dev), model_tensor_bytes(s, true));
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
  const Shape& s = o.shape;
  // [device-inputs] A problem too large for the host is drawn on the GPU and checked on samples.
  if (on_gpu && inputs_on_device(s)) {
    if (step.has_backward()) throw std::invalid_argument("a problem this large (K above 2^28 elements) is for a forward-only step: the backward's reference needs every input on the host");
    if (!o.save_dir.empty()) throw std::invalid_argument("--save: the inputs of a problem this large (K above 2^28 elements) are drawn on the GPU and never held on the host");
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
    r.model = model_predict(r.ledger, r.launches, step.unit(o.step), default_ceilings(dev), model_tensor_bytes(s, false));
    return r;
  }
  const Inputs in = make_inputs(s, InputSpec{o.seed});
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
  r.predicted = predict(r.ledger, dev);
  if (!on_gpu) r.launches_note = "a CPU run launches nothing";
  r.model = model_predict(r.ledger, r.launches, step.unit(o.step), default_ceilings(dev), model_tensor_bytes(s, false));
  if (!o.save_dir.empty()) {
    write_npy_storage(o.save_dir + "/q.npy", s.dtype, in.q);
    write_npy_storage(o.save_dir + "/k.npy", s.dtype, in.k);
    write_npy_storage(o.save_dir + "/v.npy", s.dtype, in.v);
    write_npy_storage(o.save_dir + "/o.npy", s.dtype, out.o);
    write_npy_f32(o.save_dir + "/lse.npy", out.lse, true);
  }
  if (step.has_backward()) run_backward(step, o, on_gpu, cfg, in, out, dev, r);
  return r;
}

namespace {

// The ledger (counted or closed form) and the roofline it predicts: the forward's, then the backward's.
void print_cost(std::ostream& os, const RunRecord& r, const LedgerSet& ledger, bool matches, const std::string& diff,
                const Prediction& p, const ModelPrediction& m, const std::string& launches_note) {
  os << "ledger    " << (r.backend == "cpu" ? "counted by the blueprint" : "closed form (the blueprint counts the same; see tests)");
  if (r.backend == "cpu") os << (matches ? "; equals the closed form" : "; DIFFERS from the closed form: " + diff);
  os << "\n";
  print_ledger(os, ledger);
  os << std::defaultfloat << "roofline  " << std::setprecision(4) << p.ms << " ms predicted ("
     << (p.memory_bound() ? "memory-bound" : "compute-bound") << ": bytes/bandwidth " << p.ms_memory
     << " ms, FLOPs/peak " << p.ms_compute << " ms)\n"
     << "          for " << r.predicted_for << "\n";
  // [model] Every resource's term, kernel by kernel, and what bounds each.
  if (!m.kernels.empty()) print_model(os, m);
  if (!launches_note.empty()) os << "          launches not recorded: " << launches_note << "\n";
  os << std::fixed;
}

// "measured ..." on a GPU, "cpu time ..." for a blueprint. `flops_note` says how the FLOPs are counted.
// [kernel-clock] [graph-time] On a GPU three clocks: the kernel time (the one comparisons use), the
// CUDA events around each launch, and the time per call in a CUDA graph.
void print_time(std::ostream& os, const RunRecord& r, double ms, int reps, double flops, const KernelTime& kt,
                double graph_ms, const std::string& graph_note, const CliOptions& o, const std::string& flops_note) {
  if (r.backend == "gpu") {
    if (reps > 0) {
      auto tf = [&](double t) { return t > 0 ? flops / (t * 1e-3) / 1e12 : 0.0; };
      if (kt.ms_median > 0) {
        os << "measured  " << std::setprecision(4) << kt.ms_median << " ms kernel time: median of " << kt.ms.size()
           << " calls, each on a cold L2, every kernel it ran summed (" << kt.activities << " on the GPU";
        if (kt.parts.size() > 1) {
          os << ":";
          for (const auto& [name, t] : kt.parts) os << " " << name << " " << std::setprecision(4) << t;
        }
        os << "), " << std::setprecision(1) << tf(kt.ms_median) << " TFLOP/s\n          (FlashAttention's convention: "
           << flops_note << (r.shape.causal ? ", halved for causal" : "") << ")\n";
      } else {
        os << "measured  no kernel time: " << kt.note << "\n";
      }
      os << "          " << std::setprecision(4) << ms << " ms between CUDA events around one launch (median of " << reps
         << ", after " << o.warmup << " warm-up; the launch's host cost included), " << std::setprecision(1) << tf(ms)
         << " TFLOP/s\n";
      if (graph_ms > 0)
        os << "          " << std::setprecision(4) << graph_ms << " ms per call in a CUDA graph of " << r.graph_calls
           << " calls back to back (median of the replays), " << std::setprecision(1) << tf(graph_ms) << " TFLOP/s\n";
      else if (!graph_note.empty())
        os << "          no graph time: " << graph_note << "\n";
    } else {
      os << "measured  --reps 0: checked only, not timed\n";
    }
  } else {
    os << "cpu time  " << std::setprecision(1) << ms << " ms for the blueprint (CPU loops with counting; not a GPU figure)\n";
  }
}

// [noise] [model] The runs' spread, and the measurement against the model: measured / predicted.
void print_against_model(std::ostream& os, const RunRecord& r, double ms, double lo, double hi, const ModelPrediction& m) {
  if (r.backend != "gpu" || ms <= 0) return;
  if (r.runs > 1)
    os << "spread    " << r.runs << " runs: their medians from " << std::setprecision(3) << lo << " to " << hi << " ms ("
       << std::setprecision(1) << (lo > 0 ? 100.0 * (hi - lo) / lo : 0.0) << " %)\n";
  if (m.ms > 0)
    os << "vs model  measured / predicted = " << std::setprecision(2) << ms / m.ms << " (bound by " << m.bound_by << ")\n";
}

void indent_lines(std::ostream& os, const std::string& label, const std::string& text) {
  std::istringstream in(text);
  std::string line;
  for (bool first = true; std::getline(in, line); first = false) os << (first ? label : "          ") << line << "\n";
}

void print_report(std::ostream& os, const StepInfo& step, const RunRecord& r, const CliOptions& o) {
  os << std::fixed;
  os << "shape     " << r.shape.str() << ", scale " << std::setprecision(4) << r.shape.softmax_scale() << ", seed "
     << r.seed;
  if (r.shape.dropout > 0.0) os << ", dropout seed " << r.shape.dropout_seed;
  if (!step.flags.empty()) os << ", " << r.variant;
  os << "\n";
  os << "check     " << r.check.summary() << "\n";
  if (r.device_inputs)
    os << "          inputs drawn on the GPU (K above 2^28 elements); the reference checked " << r.checked_groups
       << " (sequence, key/value head) groups, every query head of each\n";
  if (r.stray_writes) os << "          FAIL: " << r.stray_writes << " elements of the NaN padding around O or L were overwritten\n";
  print_cost(os, r, r.ledger, r.ledger_matches_closed_form, r.ledger_diff, r.predicted, r.model,
             r.launches.empty() ? r.launches_note : "");
  print_time(os, r, r.ms, r.reps, r.shape.flops_fa_convention(), r.kernel, r.graph_ms, r.graph_note, o, "4·B·H·N·Nk·d");
  print_against_model(os, r, r.ms, r.ms_min, r.ms_max, r.model);
  if (r.has_backward) {
    os << "\nbackward  dO = randn in " << dtype_name(r.shape.dtype) << " (seed " << r.seed
       << ", its own stream); the Eigen reference on " << r.bwd_check.checked_heads << " of " << r.shape.B * r.shape.H
       << " heads\n";
    indent_lines(os, "check     ", r.bwd_check.summary());
    if (r.bwd_stray_writes)
      os << "          FAIL: " << r.bwd_stray_writes << " elements of the NaN padding around dQ, dK or dV were overwritten\n";
    print_cost(os, r, r.bwd_ledger, r.bwd_ledger_matches_closed_form, r.bwd_ledger_diff, r.bwd_predicted, r.bwd_model,
               r.bwd_launches.empty() ? r.launches_note : "");
    print_time(os, r, r.bwd_ms, r.bwd_reps, RunRecord::kBackwardFlopFactor * r.shape.flops_fa_convention(), r.bwd_kernel,
               r.bwd_graph_ms, r.bwd_graph_note, o, "2.5 × the forward's 4·B·H·N·Nk·d");
    if (r.has_saved) {
      // [saved-for-backward] Charged to neither pass above: what the forward wrote for this backward.
      os << "saved     what the forward writes for this backward beyond O and L, charged apart from both\n";
      print_cost(os, r, r.saved_ledger, r.saved_ledger_matches_closed_form, r.saved_ledger_diff, r.saved_predicted, {}, "");
      if (r.backend == "gpu") {
        if (r.save_reps > 0)
          os << "measured  " << std::setprecision(3) << r.save_ms << " ms median of " << r.save_reps << ", the writing kernel alone\n";
        else os << "measured  --reps 0: written once, not timed\n";
      } else {
        os << "cpu time  counted inside the backward's blueprint run above\n";
      }
    }
    print_against_model(os, r, r.bwd_ms, r.bwd_ms_min, r.bwd_ms_max, r.bwd_model);
    os << "\n";
  }
  os << "read      docs/" << step.id << "_" << step.slug << ".md beside steps/" << step.id << "_" << step.slug << "/\n";
}

}  // namespace

int run_step_main(const StepInfo& step, int argc, char** argv, const StepInfo* previous) {
  std::vector<std::string> args(argv + 1, argv + argc);
  CliOptions o;
  try {
    o = parse_cli(step, args);
  } catch (const CliError& e) {
    std::cerr << step.program() << ": error: " << e.what() << "\n";
    return 2;
  }
  if (o.help) {
    std::cout << usage(step);
    return 0;
  }
  // --grade: every check, each case in a child process (common/grade.hpp).
  if (o.grade_case >= 0) return run_grade_child(step, previous, o);
  if (o.grade) return run_grade(step, previous, o, args, argc > 0 ? argv[0] : step.program());

  bool on_gpu = false;
  std::string why;
  const bool have_gpu = step.launch != nullptr && gpu_available(why);
  if (step.launch == nullptr && why.empty()) why = "this build has no GPU kernels for step " + step.id;
  // [arch] What this GPU cannot run is refused now, before anything is computed (the GPU harness
  // holds the same rule before every launch). With --backend gpu and no GPU, FA_FAKE_CC stands for
  // one: the refusal is the one such a GPU would get.
  if (step.launch != nullptr && (have_gpu ? o.backend != Backend::Cpu : o.backend == Backend::Gpu)) {
    try {
      std::optional<GpuCaps> caps;
      if (have_gpu) caps = gpu_caps();
      else if (const std::optional<int> cc = fake_cc_from_env()) caps = with_fake_cc(GpuCaps{}, *cc);
      CliOptions g = o;
      apply_default_shape(g, true);  // the shape it would run on the GPU
      if (caps) require_supported(step, g.shape, g.step, *caps, step.has_backward());
    } catch (const Unsupported& e) {
      return refuse(step, e);
    } catch (const CliError&) {
      // a bad shape: reported below, as without a GPU
    } catch (const std::invalid_argument& e) {  // FA_FAKE_CC is not a compute capability
      std::cerr << step.program() << ": error: " << e.what() << "\n";
      return 2;
    } catch (const std::exception& e) {
      std::cerr << step.program() << ": error: " << e.what() << "\n";
      return 1;
    }
  }
  if (o.backend == Backend::Gpu && !have_gpu) {
    std::cerr << step.program() << ": error: --backend gpu, but " << why << "\n";
    return 2;
  }
  on_gpu = have_gpu && o.backend != Backend::Cpu;
  if (o.graph_given && !on_gpu) {
    std::cerr << step.program() << ": error: --graph times calls captured in a CUDA graph, on the GPU; this run is the CPU blueprint ("
              << (o.backend == Backend::Cpu ? "--backend cpu" : why) << ")\n";
    return 2;
  }
  try {
    apply_default_shape(o, on_gpu);
  } catch (const CliError& e) {
    std::cerr << step.program() << ": error: " << e.what() << "\n";
    return 2;
  }
  if (!step.takes_d(o.shape.d)) {
    std::cerr << step.program() << ": error: --d " << o.shape.d
              << " is for steps 14-16 (their Hopper kernels and blueprints); this step's tiles are sized for d <= 128\n";
    return 2;
  }

  if (!o.csv) {
    std::cout << step.program() << " — " << step.title << "\n";
    if (!on_gpu && o.backend == Backend::Auto) std::cout << why << ": running the CPU blueprint instead\n";
    if (on_gpu) {
      const DeviceSpec d = gpu_device_spec();
      std::cout << "device    " << d.name << " (sm_" << d.cc_major << d.cc_minor << "), CUDA " << cuda_version_string()
                << "\n          " << d.sm_count << " SMs, L2 " << d.l2_bytes / (1024 * 1024) << " MiB, shared memory "
                << d.smem_per_block_optin / 1024 << " KiB per block (opt-in), " << std::fixed << std::setprecision(2)
                << d.hbm_bytes_per_s / 1e12 << " TB/s, " << std::setprecision(0) << d.tensor_flops / 1e12
                << " TFLOP/s tensor, " << d.fp32_flops / 1e12 << " TFLOP/s fp32 (queried)\n";
      if (const GpuCaps c = gpu_caps(); c.fake_cc)
        std::cout << "          FA_FAKE_CC=" << c.fake_cc << ": what compute capability " << cc_string(c.fake_cc)
                  << " cannot run is refused (" << c.smem_optin / 1024 << " KiB of shared memory per block)\n";
    }
    std::cout.flush();
  }

  RunRecord r;
  try {
    r = run_once(step, o, on_gpu);
  } catch (const Unsupported& e) {
    return refuse(step, e);
  } catch (const std::exception& e) {
    std::cerr << step.program() << ": error: " << e.what() << "\n";
    return 1;
  }
  if (!o.ledger_csv.empty()) {
    std::ofstream f(o.ledger_csv);
    write_ledger_csv(f, all_kernels(r));
    if (!f) {
      std::cerr << step.program() << ": error: cannot write " << o.ledger_csv << "\n";
      return 1;
    }
  }
  if (o.csv) {
    std::cout << csv_header() << "\n" << csv_row(r) << "\n";
  } else {
    print_report(std::cout, step, r, o);
  }
  return r.ok() ? 0 : 1;
}

}  // namespace fa
