#include "runner.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "gpu.hpp"
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
         "ms,reps,tflops,hbm_read_bytes,hbm_write_bytes,matmul_flops,workspace_bytes,predicted_ms";
}

std::string csv_row(const RunRecord& r) {
  const Ledger t = r.ledger.total();
  std::ostringstream os;
  os << r.step << "," << r.variant << "," << r.backend << ",\"" << r.device << "\"," << dtype_name(r.shape.dtype) << ","
     << r.shape.B << "," << r.shape.H << "," << r.shape.N << "," << r.shape.Nk << "," << r.shape.d << ","
     << (r.shape.causal ? 1 : 0) << "," << r.seed << "," << std::setprecision(4) << std::scientific << r.check.max_abs
     << "," << r.check.rel_l2 << "," << r.check.lse_max_abs << "," << (r.check.pass && r.stray_writes == 0 ? 1 : 0) << ","
     << std::defaultfloat << std::setprecision(6) << r.ms << "," << r.reps << "," << r.tflops() << "," << t.hbm_read << ","
     << t.hbm_write << "," << t.matmul_flops << "," << t.workspace << "," << r.predicted.ms;
  return os.str();
}

RunRecord run_once(const StepInfo& step, const CliOptions& o, bool on_gpu) {
  RunRecord r;
  r.step = step.id;
  r.variant = variant_name(o.step);
  r.shape = o.shape;
  r.seed = o.seed;
  const Shape& s = o.shape;
  const Inputs in = make_inputs(s, InputSpec{o.seed});
  const Reference ref = reference_forward(s, in, pick_rows(s, o.seed));
  const LedgerSet closed = step.closed_form(s, o.step);

  if (on_gpu) {
    const DeviceSpec dev = gpu_device_spec();
    r.backend = "gpu";
    r.device = dev.name;
    GpuConfig cfg;
    cfg.warmup = o.warmup;
    cfg.reps = o.reps;
    const GpuResult g = run_on_gpu(step, s, in, o.step, cfg);
    r.check = check_forward(s, in, ref, g.out);
    r.stray_writes = g.stray_writes;
    r.ms = g.ms_median;
    r.reps = static_cast<int>(g.ms.size());
    r.ledger = closed;
    r.predicted = predict(closed, dev);
    r.predicted_for = dev.name + " (" + dev.source + ")";
    if (!o.save_dir.empty()) {
      std::filesystem::create_directories(o.save_dir);
      write_npy_storage(o.save_dir + "/o.npy", s.dtype, g.out.o);
      write_npy_f32(o.save_dir + "/lse.npy", g.out.lse, true);
    }
  } else {
    r.backend = "cpu";
    r.device = "CPU blueprint";
    const auto t0 = std::chrono::steady_clock::now();
    BlueprintResult bp = step.blueprint(s, in, o.step);
    r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    r.reps = 1;
    r.check = check_forward(s, in, ref, bp.out);
    r.ledger = bp.ledger;
    r.ledger_diff = bp.ledger.diff(closed);
    r.ledger_matches_closed_form = r.ledger_diff.empty();
    const DeviceSpec h200 = h200_datasheet();
    r.predicted = predict(bp.ledger, h200);
    r.predicted_for = h200.source;
    if (!o.save_dir.empty()) {
      std::filesystem::create_directories(o.save_dir);
      write_npy_storage(o.save_dir + "/o.npy", s.dtype, bp.out.o);
      write_npy_f32(o.save_dir + "/lse.npy", bp.out.lse, true);
    }
  }
  if (!o.save_dir.empty()) {
    write_npy_storage(o.save_dir + "/q.npy", s.dtype, in.q);
    write_npy_storage(o.save_dir + "/k.npy", s.dtype, in.k);
    write_npy_storage(o.save_dir + "/v.npy", s.dtype, in.v);
  }
  return r;
}

namespace {

void print_report(std::ostream& os, const StepInfo& step, const RunRecord& r, const CliOptions& o) {
  os << std::fixed;
  os << "shape     " << r.shape.str() << ", scale " << std::setprecision(4) << r.shape.softmax_scale() << ", seed "
     << r.seed;
  if (!step.flags.empty()) os << ", " << r.variant;
  os << "\n";
  os << "check     " << r.check.summary() << "\n";
  if (r.stray_writes) os << "          FAIL: " << r.stray_writes << " elements of the NaN padding around O or L were overwritten\n";
  os << "ledger    " << (r.backend == "cpu" ? "counted by the blueprint" : "closed form (the blueprint counts the same; see tests)");
  if (r.backend == "cpu") os << (r.ledger_matches_closed_form ? "; equals the closed form" : "; DIFFERS from the closed form: " + r.ledger_diff);
  os << "\n";
  print_ledger(os, r.ledger);
  os << std::defaultfloat << "roofline  " << std::setprecision(4) << r.predicted.ms << " ms predicted ("
     << (r.predicted.memory_bound() ? "memory-bound" : "compute-bound") << ": bytes/bandwidth " << r.predicted.ms_memory
     << " ms, FLOPs/peak " << r.predicted.ms_compute << " ms)\n"
     << "          for " << r.predicted_for << "\n" << std::fixed;
  if (r.backend == "gpu") {
    if (r.reps > 0)
      os << "measured  " << std::setprecision(3) << r.ms << " ms median of " << r.reps << " (after " << o.warmup
         << " warm-up), " << std::setprecision(1) << r.tflops() << " TFLOP/s (FlashAttention's convention: 4·B·H·N·Nk·d"
         << (r.shape.causal ? ", halved for causal" : "") << ")\n";
    else os << "measured  --reps 0: checked only, not timed\n";
  } else {
    os << "cpu time  " << std::setprecision(1) << r.ms << " ms for the blueprint (CPU loops with counting; not a GPU figure)\n";
  }
  os << "read      docs/" << step.id << "_" << step.slug << ".md beside steps/" << step.id << "_" << step.slug << "/\n";
}

}  // namespace

int run_step_main(const StepInfo& step, int argc, char** argv) {
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

  bool on_gpu = false;
  std::string why;
  const bool have_gpu = step.launch != nullptr && gpu_available(why);
  if (step.launch == nullptr && why.empty()) why = "this build has no GPU kernels for step " + step.id;
  if (o.backend == Backend::Gpu && !have_gpu) {
    std::cerr << step.program() << ": error: --backend gpu, but " << why << "\n";
    return 2;
  }
  on_gpu = have_gpu && o.backend != Backend::Cpu;
  try {
    apply_default_shape(o, on_gpu);
  } catch (const CliError& e) {
    std::cerr << step.program() << ": error: " << e.what() << "\n";
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
    }
    std::cout.flush();
  }

  RunRecord r;
  try {
    r = run_once(step, o, on_gpu);
  } catch (const std::exception& e) {
    std::cerr << step.program() << ": error: " << e.what() << "\n";
    return 1;
  }
  if (!o.ledger_csv.empty()) {
    std::ofstream f(o.ledger_csv);
    write_ledger_csv(f, r.ledger);
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
  const bool ok = r.check.pass && r.stray_writes == 0 && r.ledger_matches_closed_form;
  return ok ? 0 : 1;
}

}  // namespace fa
