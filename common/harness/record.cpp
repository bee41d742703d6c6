// One run's record as a CSV row (harness/record.hpp).
#include "harness/record.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <stdexcept>

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
         "bwd_kernels_ms,clock,fp8_scales,incoherent,inputs,rmse,raw_rmse";
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
  os << r.step << "," << r.variant << "," << r.backend << ",\"" << r.device << "\"," << r.shape.type_name() << ","
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
  // [fp8] [outliers] appended after the clock's columns: the scales, the transform, the inputs' protocol,
  // and O's RMSE (against the checked reference; raw_rmse: an fp8 run's against the unquantized inputs).
  os << "," << (r.shape.fp8 ? (r.shape.fp8_block ? "block" : "tensor") : "") << "," << (r.shape.fp8 ? (r.shape.incoherent ? "1" : "0") : "")
     << "," << r.inputs << "," << std::setprecision(6) << std::scientific;
  if (r.rmse >= 0) os << r.rmse;
  os << ",";
  if (r.raw_rmse >= 0) os << r.raw_rmse;
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

}  // namespace fa
