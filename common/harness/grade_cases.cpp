// --grade's cases and the checks a child runs for one (harness/grade_cases.hpp).
#include "harness/grade_cases.hpp"

#include <algorithm>
#include <cstring>
#include <iomanip>
#include <optional>
#include <sstream>

#include "core/arch.hpp"
#include "harness/gpu.hpp"
#include "reference/checks.hpp"
#include "reference/reference.hpp"

namespace fa::grading {
namespace {

// ---- what to look at ---------------------------------------------------------------------------

std::string forward_hint(const Check& c, int64_t stray, bool gpu) {
  if (c.nonfinite_o)
    return gpu ? "non-finite O: a read past a ragged tile's edge (the buffers are NaN-padded), a row never written, "
                 "or exp() of a logit without the running max subtracted"
               : "non-finite O: a row never written (outputs start as NaN), or exp() of a logit without the running "
                 "max subtracted";
  if (!c.pass && c.bad_lse && c.max_abs <= c.atol)
    return "O is right but L is not: L = m + log(l) per row from the final running max m and sum l (a row that "
           "sees no key: L = +inf, O = 0)";
  if (!c.pass)
    return "O differs from the reference at the worst place shown: the tile update (rescaling by exp(m_old - m_new)), "
           "the final division by l, or which keys a row sees";
  if (stray)
    return "writes landed in the NaN padding around O or L: a store past a ragged edge (N or Nk not a multiple of "
           "the tile) without its bound check";
  return "";
}

std::string backward_hint(const BackwardCheck& c, int64_t stray) {
  if (!c.pass) {
    std::string bad;
    for (const GradCheck* g : {&c.dq, &c.dk, &c.dv})
      if (!g->pass) bad += (bad.empty() ? "" : ", ") + g->name;
    return bad + " wrong: P recomputed from L, dP = dO V^T, dS = P (dP - D) with D = rowsum(dO * O), then dV = P^T dO, "
                 "dK = dS^T Q, dQ = dS K (each scaled where the forward scaled)";
  }
  if (stray) return "writes landed in the NaN padding around dQ, dK or dV: a store past a ragged edge";
  return "";
}

std::string ledger_hint(const std::string& diff) {
  if (diff.empty()) return "";
  const std::string field = diff.substr(0, diff.find(':'));
  std::string what = "the counted ledger is what your code did through GlobalMat, Smem, mma and barrier(); the closed "
                     "form is the doc's formula";
  if (field.find("gmem") != std::string::npos) what += ": a global load or store too many or too few (a tile re-read, an output written twice?)";
  else if (field.find("smem") != std::string::npos) what += ": shared-memory traffic or footprint differs (a tile staged twice, or a different tile size?)";
  else if (field.find("flops") != std::string::npos) what += ": a different number of tensor-core (or CUDA-core) products";
  else if (field.find("tiles") != std::string::npos) what += ": which tiles are computed, masked or skipped";
  else if (field.find("barriers") != std::string::npos) what += ": a barrier() too many or too few";
  else if (field.find("nonmatmul") != std::string::npos) what += ": the scalar work on S and P (scale, max, exp, sums) differs";
  return what;
}

// [lab-region] What a failed check shows: the outputs that were wrong.
std::string forward_shows(const Check& c, int64_t stray) {
  std::string s;
  if (c.nonfinite_o || c.max_abs > c.atol || stray) s += "O";
  if (c.bad_lse || c.lse_max_abs > c.lse_atol) s += s.empty() ? "L" : " L";
  return s;
}
std::string backward_shows(const BackwardCheck& c, int64_t stray) {
  std::string s;
  for (const GradCheck* g : {&c.dq, &c.dk, &c.dv})
    if (!g->pass || stray) s += (s.empty() ? "" : " ") + g->name;
  return s;
}

// ---- the child ---------------------------------------------------------------------------------

std::string one_line(std::string s) {
  for (char& ch : s)
    if (ch == '\t' || ch == '\r') ch = ' ';
  for (size_t p; (p = s.find('\n')) != std::string::npos;) s.replace(p, 1, "; ");
  return s;
}

std::string strip_status(const std::string& summary) {  // "PASS  max|ΔO| ..." -> "max|ΔO| ..."
  std::string s = summary;
  for (const char* tag : {"PASS  ", "FAIL  "})
    for (size_t p; (p = s.find(tag)) != std::string::npos;) s.erase(p, std::strlen(tag));
  return s;
}

std::string trim(std::string s) {  // Ledger::diff ends its list with "; "
  while (!s.empty() && (s.back() == ' ' || s.back() == ';')) s.pop_back();
  return s;
}

}  // namespace

const char* track_name(Track t) { return t == Track::Cpu ? "cpu" : t == Track::Gpu ? "gpu" : "speed"; }


std::vector<StepOptions> grade_variants(const StepInfo& st, const CliOptions& o) {
  std::vector<StepOptions> out;
  for (StepOptions v : st.all_variants()) {
    bool keep = true;
    for (const StepFlag& f : st.flags) {
      const bool given = std::find(o.step_flags_given.begin(), o.step_flags_given.end(), f.name) != o.step_flags_given.end();
      const auto it = o.step.find(f.name);
      if (!given || it == o.step.end()) continue;
      if (f.sweep) keep = keep && v[f.name] == it->second;
      else v[f.name] = it->second;
    }
    if (keep) out.push_back(v);
  }
  return out;
}

std::vector<GradeCase> all_cases(const StepInfo& st, const CliOptions& o) {
  std::vector<GradeCase> cs;
  const std::vector<StepOptions> vars = grade_variants(st, o);
  std::vector<test::Case> matrix = test::shape_matrix(false);
  if (st.supports_decode)  // [cache-lens] a decoding step: decoding's matrix too (GQA, caches, windows)
    for (const test::Case& c : test::decode_matrix()) matrix.push_back(c);
  // Every feature the step takes is graded: GQA and the sliding window (the tests' own matrix, the
  // cases this step takes), and dropout.
  if (test::takes_gqa_window(st))
    for (const test::Case& c : test::gqa_window_matrix())
      if (test::takes_case(st, c.shape)) matrix.push_back(c);
  if (st.supports_dropout)
    for (const test::Case& c : test::dropout_matrix()) matrix.push_back(c);
  for (Track t : {Track::Cpu, Track::Gpu})
    for (const StepOptions& v : vars)
      for (const test::Case& c : matrix) {
        if (!test::takes_case(st, c.shape)) continue;
        StepOptions x = v;
        if (c.shape.dropout > 0.0)  // [dropout] what a run with dropout needs (StepInfo::dropout_options)
          for (const auto& [flag, value] : st.dropout_options) x[flag] = value;
        cs.push_back({t, test::for_step(c, st), x});  // [fp8] e4m3, d >= 32
      }
  CliOptions g = o;
  apply_default_shape(g, true);  // the shape flags, else the GPU's benchmark shape
  test::Case speed;
  speed.shape = g.shape;
  speed.inputs = o.input_spec();
  cs.push_back({Track::Speed, speed, vars.empty() ? st.default_options() : vars.front()});
  return cs;
}

void Out::rec(size_t k, const std::string& status, const std::string& check, const std::string& detail,
              const std::string& hint, const std::string& shows) {
  std::fprintf(f, "R\t%zu\t%s\t%s\t%s\t%s\t%s\n", k, status.c_str(), check.c_str(), one_line(detail).c_str(),
               one_line(hint).c_str(), one_line(shows).c_str());
  std::fflush(f);
}
void Out::end(size_t k) {
  std::fprintf(f, "E\t%zu\n", k);
  std::fflush(f);
}
void Out::quit() {
  std::fprintf(f, "Q\n");
  std::fflush(f);
}

bool run_cpu_case(const StepInfo& st, const GradeCase& g, size_t k, Out& out) {
  const Shape& s = g.c.shape;
  std::string stage = "forward";
  try {
    const Inputs in = make_inputs(s, g.c.inputs);
    const Reference ref = reference_forward(s, in);
    const BlueprintResult bp = st.blueprint(s, in, g.opt);
    const Check chk = check_forward(s, in, ref, bp.out);
    out.rec(k, chk.pass ? "PASS" : "FAIL", "forward", strip_status(chk.summary()), forward_hint(chk, 0, false),
            chk.pass ? "" : forward_shows(chk, 0));
    stage = "ledger";
    const std::string diff = trim(bp.ledger.diff(st.closed_form(s, g.opt)));
    out.rec(k, diff.empty() ? "PASS" : "FAIL", "ledger",
            diff.empty() ? "the counted ledger equals closed_form()" : "counted vs closed form: " + diff, ledger_hint(diff),
            diff.empty() ? "" : "ledger");
    bool ok = chk.pass && diff.empty();
    if (!st.has_backward()) return ok;
    stage = "backward";
    const Tensor4 dO = make_grad_output(s, g.c.inputs.seed);
    const Gradients refg = reference_backward(s, in, dO);
    const BackwardBlueprintResult bb = st.backward_blueprint(s, in, bp.out, dO, g.opt);
    const BackwardCheck bc = check_backward(s, in, dO, refg, bb.grads);
    out.rec(k, bc.pass ? "PASS" : "FAIL", "backward", strip_status(bc.summary()), backward_hint(bc, 0),
            bc.pass ? "" : backward_shows(bc, 0));
    stage = "bwd ledger";
    const std::string bdiff = trim(bb.ledger.diff(st.backward_closed_form(s, g.opt)));
    out.rec(k, bdiff.empty() ? "PASS" : "FAIL", "bwd ledger",
            bdiff.empty() ? "the counted ledger equals backward_closed_form()" : "counted vs closed form: " + bdiff,
            ledger_hint(bdiff), bdiff.empty() ? "" : "ledger");
    return ok && bc.pass && bdiff.empty();
  } catch (const std::exception& e) {
    out.rec(k, "FAIL", stage, std::string("threw: ") + e.what(),
            "an access outside a GlobalMat or SmemTile, or more shared memory than the schedule's budget, throws");
    return false;
  }
}

bool run_gpu_case(const StepInfo& st, const GradeCase& g, size_t k, Out& out) {
  const Shape& s = g.c.shape;
  std::string stage = "forward";
  try {
    std::string no_device;
    const bool device = gpu_available(no_device);
    const std::optional<int> fake = device ? std::nullopt : fake_cc_from_env();
    if (!device && !fake) {
      out.rec(k, "NOT_CHECKED", "forward", "no CUDA device (" + no_device + ")");
      return true;
    }
    const GpuCaps caps = device ? gpu_caps() : with_fake_cc(GpuCaps{}, *fake);
    if (const std::string why = unsupported_reason(st, s, g.opt, caps, false); !why.empty()) {
      out.rec(k, "REFUSED", "forward", why);
      if (st.has_backward()) out.rec(k, "REFUSED", "backward", "its forward is refused");
      return true;
    }
    if (!device) {  // [arch] FA_FAKE_CC without a device: this GPU could run the case; nothing here can
      out.rec(k, "NOT_CHECKED", "forward",
              "no CUDA device (" + no_device + "): a GPU of compute capability " + cc_string(*fake) + " would run it");
      return true;
    }
    const Inputs in = make_inputs(s, g.c.inputs);
    const Reference ref = reference_forward(s, in);
    GpuConfig cfg;
    cfg.reps = 0;
    cfg.pad = Padding{8, 24, 40};
    const GpuResult r = run_on_gpu(st, s, in, g.opt, cfg);
    const Check chk = check_forward(s, in, ref, r.out);
    const bool fwd_ok = chk.pass && r.stray_writes == 0;
    std::string detail = strip_status(chk.summary());
    if (r.stray_writes) detail += "  stray writes into the NaN padding: " + std::to_string(r.stray_writes);
    out.rec(k, fwd_ok ? "PASS" : "FAIL", "forward", detail, forward_hint(chk, r.stray_writes, true),
            fwd_ok ? "" : forward_shows(chk, r.stray_writes));
    if (!st.has_backward()) return fwd_ok;
    stage = "backward";
    if (const std::string why = unsupported_reason(st, s, g.opt, caps, true); !why.empty()) {
      out.rec(k, "REFUSED", "backward", why);
      return fwd_ok;
    }
    const Tensor4 dO = make_grad_output(s, g.c.inputs.seed);
    const GpuBackwardResult b = run_backward_on_gpu(st, s, in, r.out, dO, g.opt, cfg);
    const BackwardCheck bc = check_backward(s, in, dO, reference_backward(s, in, dO), b.grads);
    const bool bwd_ok = bc.pass && b.stray_writes == 0;
    detail = strip_status(bc.summary());
    if (b.stray_writes) detail += "  stray writes into the NaN padding: " + std::to_string(b.stray_writes);
    out.rec(k, bwd_ok ? "PASS" : "FAIL", "backward", detail, backward_hint(bc, b.stray_writes),
            bwd_ok ? "" : backward_shows(bc, b.stray_writes));
    return fwd_ok && bwd_ok;
  } catch (const Unsupported& e) {
    out.rec(k, "REFUSED", stage, e.what());
    return true;
  } catch (const std::exception& e) {
    out.rec(k, "FAIL", stage, std::string("threw: ") + e.what(),
            "a CUDA error (an illegal address: an index past a buffer; a launch failure: a bad grid, block or "
            "shared-memory size), or a launcher's own check");
    return false;
  }
}

void run_speed_case(const StepInfo& st, const StepInfo& prev, const GradeCase& g, const CliOptions& o, size_t k,
                    Out& out) {
  const Shape& s = g.c.shape;
  const bool bwd = st.has_backward();
  const std::string check = bwd ? "bwd speed" : "speed";
  try {
    const GpuCaps caps = gpu_caps();
    if (const std::string why = unsupported_reason(st, s, g.opt, caps, bwd); !why.empty()) {
      out.rec(k, "REFUSED", check, why);
      return;
    }
    if (const std::string why = unsupported_reason(prev, s, prev.default_options(), caps, bwd); !why.empty()) {
      out.rec(k, "NOT_CHECKED", check, "the previous step cannot run here: " + why);
      return;
    }
    const Inputs in = make_inputs(s, g.c.inputs);
    GpuConfig cfg;
    cfg.warmup = o.warmup;
    cfg.reps = std::max(o.reps, 5);
    const Tensor4 dO = bwd ? make_grad_output(s, o.seed) : Tensor4{};
    auto time = [&](const StepInfo& which, const StepOptions& opt, Check* chk) {
      const GpuResult f = run_on_gpu(which, s, in, opt, cfg);
      if (chk) *chk = check_forward(s, in, reference_forward(s, in, pick_rows(s, o.seed)), f.out);
      if (!bwd) return f.ms_median;
      return run_backward_on_gpu(which, s, in, f.out, dO, opt, cfg).ms_median;
    };
    Check chk;
    const double mine = time(st, g.opt, &chk);
    const double theirs = time(prev, prev.default_options(), nullptr);
    std::ostringstream os;
    os << std::fixed << std::setprecision(3) << st.program() << " " << mine << " ms against step" << prev.id << " "
       << theirs << " ms (" << (bwd ? "backward" : "forward") << ", median of " << cfg.reps << "): "
       << std::setprecision(2) << theirs / mine << "x, asked " << o.min_speedup << "x";
    if (!chk.pass) {
      out.rec(k, "FAIL", check, os.str() + "; but O is wrong at this shape: " + strip_status(chk.summary()),
              "a fast wrong answer: fix the failing checks first");
      return;
    }
    const bool ok = theirs / mine >= o.min_speedup;
    out.rec(k, ok ? "PASS" : "FAIL", check, os.str(),
            ok ? "" : "slower than asked: see docs/profiling.md (Nsight Compute on the stepNN_ kernels), and the "
                      "roofline the step program prints");
  } catch (const Unsupported& e) {
    out.rec(k, "REFUSED", check, e.what());
  } catch (const std::exception& e) {
    out.rec(k, "FAIL", check, std::string("threw: ") + e.what(), "a CUDA error or a launcher's check");
  }
}

// The command line that runs one case's shape as the step program does (inputs 0.5 + randn; the
// large-logits cases spread Q and K wider than the command line can).
std::string reproduce(const std::string& argv0, const GradeCase& g) {
  const Shape& s = g.c.shape;
  std::ostringstream os;
  os << argv0 << " --backend " << (g.track == Track::Cpu ? "cpu" : "gpu") << " --b " << s.B << " --h " << s.H << " --n "
     << s.N << " --nk " << s.Nk << " --d " << s.d << (s.causal ? " --causal" : "") << " --dtype " << s.type_name()
     << " --seed " << g.c.inputs.seed;
  if (s.Hkv > 0 && s.Hkv != s.H) os << " --hkv " << s.Hkv;
  if (s.window > 0) os << " --window " << s.window;
  if (s.dropout > 0.0) os << " --dropout " << s.dropout << " --dropout-seed " << s.dropout_seed;
  if (s.decode()) {
    os << " --cache-lens ";
    for (size_t b = 0; b < s.cache_lens.size(); ++b) os << (b ? "," : "") << s.cache_lens[b];
  }
  for (const auto& [f, v] : g.opt) os << " --" << f << " " << v;
  if (g.track == Track::Gpu) os << " --reps 0";
  return os.str();
}

}  // namespace fa::grading
