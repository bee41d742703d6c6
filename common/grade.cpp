// --grade (common/grade.hpp): the cases, the child that runs them, the parent that isolates and
// reports them.
#include "grade.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "arch.hpp"
#include "checks.hpp"
#include "gpu.hpp"
#include "reference.hpp"
#include "runner.hpp"
#include "shapes.hpp"  // the shape matrix of the tests

extern char** environ;

namespace fa {
namespace {

// ---- the cases ---------------------------------------------------------------------------------

enum class Track { Cpu, Gpu, Speed };
const char* track_name(Track t) { return t == Track::Cpu ? "cpu" : t == Track::Gpu ? "gpu" : "speed"; }

struct GradeCase {
  Track track;
  test::Case c;
  StepOptions opt;
  std::string name() const {
    const std::string v = variant_name(opt);
    return c.name() + (v == "-" ? "" : " " + v);
  }
};

// The step's variants (every combination of its swept flags), narrowed to the values named on the
// command line; an experiment (a flag that is not swept) is graded at the value given.
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

// Every case of every track, in one fixed order (parent and child index the same list): the CPU
// track, the GPU track (the same matrix and variants), then the speed case.
std::vector<GradeCase> all_cases(const StepInfo& st, const CliOptions& o) {
  std::vector<GradeCase> cs;
  const std::vector<StepOptions> vars = grade_variants(st, o);
  std::vector<test::Case> matrix = test::shape_matrix(false);
  if (st.supports_decode)  // [cache-lens] a decoding step: decoding's matrix too (GQA, caches, windows)
    for (const test::Case& c : test::decode_matrix()) matrix.push_back(c);
  for (Track t : {Track::Cpu, Track::Gpu})
    for (const StepOptions& v : vars)
      for (const test::Case& c : matrix) cs.push_back({t, c, v});
  CliOptions g = o;
  apply_default_shape(g, true);  // the shape flags, else the GPU's benchmark shape
  test::Case speed;
  speed.shape = g.shape;
  speed.inputs = InputSpec{o.seed};
  cs.push_back({Track::Speed, speed, vars.empty() ? st.default_options() : vars.front()});
  return cs;
}

const char* kTimeoutNote = "--timeout S waits longer";

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

// Records: "R<TAB>k<TAB>status<TAB>check<TAB>detail<TAB>hint" per check, "E<TAB>k" when case k is done.
struct Out {
  FILE* f = stdout;
  void rec(size_t k, const std::string& status, const std::string& check, const std::string& detail,
           const std::string& hint = "") {
    std::fprintf(f, "R\t%zu\t%s\t%s\t%s\t%s\n", k, status.c_str(), check.c_str(), one_line(detail).c_str(),
                 one_line(hint).c_str());
    std::fflush(f);
  }
  void end(size_t k) {
    std::fprintf(f, "E\t%zu\n", k);
    std::fflush(f);
  }
  void quit() {  // the child stops on purpose (whatever its exit status turns out to be)
    std::fprintf(f, "Q\n");
    std::fflush(f);
  }
};

// Each returns true when every check of the case passed (or was refused): the child then goes on.
bool run_cpu_case(const StepInfo& st, const GradeCase& g, size_t k, Out& out) {
  const Shape& s = g.c.shape;
  std::string stage = "forward";
  try {
    const Inputs in = make_inputs(s, g.c.inputs);
    const Reference ref = reference_forward(s, in);
    const BlueprintResult bp = st.blueprint(s, in, g.opt);
    const Check chk = check_forward(s, in, ref, bp.out);
    out.rec(k, chk.pass ? "PASS" : "FAIL", "forward", strip_status(chk.summary()), forward_hint(chk, 0, false));
    stage = "ledger";
    const std::string diff = trim(bp.ledger.diff(st.closed_form(s, g.opt)));
    out.rec(k, diff.empty() ? "PASS" : "FAIL", "ledger",
            diff.empty() ? "the counted ledger equals closed_form()" : "counted vs closed form: " + diff, ledger_hint(diff));
    bool ok = chk.pass && diff.empty();
    if (!st.has_backward()) return ok;
    stage = "backward";
    const Tensor4 dO = make_grad_output(s, g.c.inputs.seed);
    const Gradients refg = reference_backward(s, in, dO);
    const BackwardBlueprintResult bb = st.backward_blueprint(s, in, bp.out, dO, g.opt);
    const BackwardCheck bc = check_backward(s, in, dO, refg, bb.grads);
    out.rec(k, bc.pass ? "PASS" : "FAIL", "backward", strip_status(bc.summary()), backward_hint(bc, 0));
    stage = "bwd ledger";
    const std::string bdiff = trim(bb.ledger.diff(st.backward_closed_form(s, g.opt)));
    out.rec(k, bdiff.empty() ? "PASS" : "FAIL", "bwd ledger",
            bdiff.empty() ? "the counted ledger equals backward_closed_form()" : "counted vs closed form: " + bdiff,
            ledger_hint(bdiff));
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
    const GpuCaps caps = gpu_caps();
    if (const std::string why = unsupported_reason(st, s, g.opt, caps, false); !why.empty()) {
      out.rec(k, "REFUSED", "forward", why);
      if (st.has_backward()) out.rec(k, "REFUSED", "backward", "its forward is refused");
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
    out.rec(k, fwd_ok ? "PASS" : "FAIL", "forward", detail, forward_hint(chk, r.stray_writes, true));
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
    out.rec(k, bwd_ok ? "PASS" : "FAIL", "backward", detail, backward_hint(bc, b.stray_writes));
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

// The step's time against the previous step's, at one shape: the forward's, or the backward's for
// a step with one (then only against a previous step with a backward).
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

// ---- the parent --------------------------------------------------------------------------------

struct Line {
  Track track;
  long k = -1;  // the case, or -1
  std::string status, check, case_name, detail, hint;
};

std::string json_str(const std::string& s) {
  std::ostringstream os;
  os << '"';
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') os << '\\' << ch;
    else if (ch == '\n') os << "\\n";
    else if (ch < 0x20) os << "\\u" << std::hex << std::setw(4) << std::setfill('0') << int(ch) << std::dec;
    else os << ch;
  }
  os << '"';
  return os.str();
}

std::string signal_text(int sig) {
  const char* name = sig == SIGSEGV ? "SIGSEGV" : sig == SIGABRT ? "SIGABRT" : sig == SIGBUS ? "SIGBUS"
                   : sig == SIGFPE ? "SIGFPE" : sig == SIGILL ? "SIGILL" : sig == SIGKILL ? "SIGKILL" : "";
  std::ostringstream os;
  os << "signal " << sig;
  if (*name) os << " (" << name << ", " << strsignal(sig) << ")";
  return os.str();
}

// The last few lines of what a child printed, for a crash message.
std::string tail_lines(const std::string& text, int n) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) lines.push_back(l);
  std::string out;
  for (size_t i = lines.size() > size_t(n) ? lines.size() - n : 0; i < lines.size(); ++i)
    out += (out.empty() ? "" : " | ") + lines[i];
  return out;
}

// The command line that runs one case's shape as the step program does (inputs 0.5 + randn; the
// large-logits cases spread Q and K wider than the command line can).
std::string reproduce(const std::string& argv0, const GradeCase& g) {
  const Shape& s = g.c.shape;
  std::ostringstream os;
  os << argv0 << " --backend " << (g.track == Track::Cpu ? "cpu" : "gpu") << " --b " << s.B << " --h " << s.H << " --n "
     << s.N << " --nk " << s.Nk << " --d " << s.d << (s.causal ? " --causal" : "") << " --dtype " << dtype_name(s.dtype)
     << " --seed " << g.c.inputs.seed;
  for (const auto& [f, v] : g.opt) os << " --" << f << " " << v;
  if (g.track == Track::Gpu) os << " --reps 0";
  return os.str();
}

class Grader {
 public:
  Grader(const StepInfo& st, const CliOptions& o, std::vector<std::string> args, std::string argv0)
      : st_(st), o_(o), args_(std::move(args)), argv0_(std::move(argv0)), cases_(all_cases(st, o)) {}

  const std::vector<GradeCase>& cases() const { return cases_; }

  void add(Line l) {
    if (!o_.grade_json) print(std::cout, l);
    lines_.push_back(std::move(l));
  }
  void note(const std::string& label, const std::string& text) {
    notes_.push_back(label + ": " + text);
    if (!o_.grade_json) std::cout << std::left << std::setw(10) << label << text << "\n" << std::flush;
  }

  // Runs cases [first, last) of one track, a child at a time.
  void run_track(size_t first, size_t last, double timeout_s) {
    size_t k = first;
    while (k < last) {
      const Outcome r = run_child(k, timeout_s);
      if (r.next > k) { k = r.next; if (r.died.empty()) continue; }
      if (!r.died.empty()) {  // case k died: its records so far stand, the death is one more failure
        add({cases_[k].track, long(k), "FAIL", r.timed_out ? "timeout" : "crash", cases_[k].name(), r.died, r.hint});
        ++k;
        if (r.timed_out && k < last) {
          std::ostringstream os;
          os << (last - k) << " case(s) after the one that timed out (fix it first; " << kTimeoutNote << ")";
          add({cases_[k].track, -1, "NOT_RUN", "cases", "", os.str(), ""});
          return;
        }
      }
    }
  }

  int finish(const std::vector<std::string>& tracks);

 private:
  struct Outcome {
    size_t next = 0;         // the first case not finished
    std::string died, hint;  // why the child died in case `next`, if it did
    bool timed_out = false;
  };

  static void print(std::ostream& os, const Line& l) {
    const std::string st = l.status == "NOT_CHECKED" ? "NOT CHECKED" : l.status == "NOT_RUN" ? "NOT RUN" : l.status;
    os << std::left << std::setw(6) << track_name(l.track) << std::setw(12) << st << std::setw(11) << l.check;
    if (!l.case_name.empty()) os << l.case_name << ": ";
    os << l.detail;
    if (!l.hint.empty() && l.status != "PASS") os << "  -> look at: " << l.hint;
    os << "\n" << std::flush;
  }

  Outcome run_child(size_t k, double timeout_s);

  const StepInfo& st_;
  const CliOptions& o_;
  std::vector<std::string> args_;
  std::string argv0_;
  std::vector<GradeCase> cases_;
  std::vector<Line> lines_;
  std::vector<std::string> notes_;
};

Grader::Outcome Grader::run_child(size_t k, double timeout_s) {
  Outcome res;
  res.next = k;
  // Everything exec needs is prepared before fork (the child only dup2s and execs).
  std::vector<std::string> argv_s = {argv0_};
  argv_s.insert(argv_s.end(), args_.begin(), args_.end());
  argv_s.push_back("--grade-case");
  argv_s.push_back(std::to_string(k));
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "FA_GRADE_FD=", 12) != 0) env_s.emplace_back(*e);
  env_s.push_back("FA_GRADE_FD=3");
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  int rec[2], out[2];
  if (pipe2(rec, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + strerror(errno));
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  std::cout.flush();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + strerror(errno));
  if (pid == 0) {
    // dup2 clears close-on-exec on the copies; a copy onto itself keeps it, so clear it there too.
    if (devnull >= 0) dup2(devnull, 0);
    dup2(out[1], 1);
    dup2(out[1], 2);
    if (rec[1] == 3) fcntl(3, F_SETFD, 0);
    else dup2(rec[1], 3);
    execve("/proc/self/exe", argv.data(), envp.data());
    _exit(127);
  }
  close(rec[1]);
  close(out[1]);
  if (devnull >= 0) close(devnull);

  using clock = std::chrono::steady_clock;
  auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_s));
  std::string rbuf, output;  // records not yet a whole line; what the child printed in this case
  std::string last_check;    // the last check case k reported
  bool rec_open = true, out_open = true, killed = false, quit = false;
  while (rec_open || out_open) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
    if (left <= 0) {
      kill(pid, SIGKILL);
      killed = true;
      break;
    }
    pollfd fds[2] = {{rec_open ? rec[0] : -1, POLLIN, 0}, {out_open ? out[0] : -1, POLLIN, 0}};
    const int n = poll(fds, 2, int(std::min<long long>(left, 1000)));
    if (n < 0 && errno != EINTR) break;
    char buf[4096];
    if (fds[1].revents) {
      const ssize_t got = read(out[0], buf, sizeof buf);
      if (got <= 0) out_open = false;
      else {
        output.append(buf, size_t(got));
        if (output.size() > 8192) output.erase(0, output.size() - 4096);
      }
    }
    if (fds[0].revents) {
      const ssize_t got = read(rec[0], buf, sizeof buf);
      if (got <= 0) rec_open = false;
      else rbuf.append(buf, size_t(got));
      for (size_t nl; (nl = rbuf.find('\n')) != std::string::npos;) {
        std::vector<std::string> f;
        std::istringstream line(rbuf.substr(0, nl));
        for (std::string x; std::getline(line, x, '\t');) f.push_back(x);
        rbuf.erase(0, nl + 1);
        if (f.size() == 1 && f[0] == "Q") {
          quit = true;
        } else if (f.size() >= 2 && f[0] == "E") {
          res.next = std::stoul(f[1]) + 1;
          last_check.clear();
          output.clear();
          deadline = clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_s));
        } else if (f.size() >= 5 && f[0] == "R") {
          const size_t at = std::stoul(f[1]);
          if (at >= cases_.size()) continue;
          last_check = f[3];
          add({cases_[at].track, long(at), f[2], f[3], cases_[at].name(), f[4], f.size() > 5 ? f[5] : ""});
        }
      }
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  close(rec[0]);
  close(out[0]);
  if (quit && !killed && res.next > k) return res;  // it stopped after the last case or after a failure
  // The child died (or was killed) inside case res.next.
  const std::string after = last_check.empty() ? "" : " after its " + last_check + " check";
  const std::string printed = tail_lines(output, 3);
  std::ostringstream why;
  if (killed) {
    res.timed_out = true;
    why << "killed after " << timeout_s << " s without finishing" << after;
    res.hint = cases_[res.next].track == Track::Gpu
                   ? "a kernel that never ends: a loop bound that never moves, or a __syncthreads() some threads skip"
                   : "a loop that never ends (a tile index that never advances?)";
  } else if (WIFSIGNALED(status)) {
    why << "crashed: " << signal_text(WTERMSIG(status)) << after;
    res.hint = "an index past a buffer, a null pointer or a failed assertion; reproduce: " + reproduce(argv0_, cases_[res.next]);
  } else {
    why << "exited with status " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1) << " before finishing" << after;
    res.hint = "something called exit() or the program could not start its case; reproduce: " +
               reproduce(argv0_, cases_[res.next]);
  }
  if (!printed.empty()) why << "; it printed: " << printed;
  res.died = why.str();
  return res;
}

// "what to look at": the pattern of the failing cases of one track, and the first one to reproduce.
std::vector<std::string> look_at(const std::vector<GradeCase>& cases, const std::vector<Line>& lines, Track t,
                                 const std::string& argv0) {
  std::set<long> ran, failed;
  bool value_fail = false, ledger_fail = false;
  std::string first_ledger;
  for (const Line& l : lines) {
    if (l.track != t || l.k < 0) continue;
    if (l.status == "PASS" || l.status == "FAIL") ran.insert(l.k);
    if (l.status != "FAIL") continue;
    failed.insert(l.k);
    if (l.check.find("ledger") != std::string::npos) {
      ledger_fail = true;
      if (first_ledger.empty()) first_ledger = l.detail;
    } else {
      value_fail = true;
    }
  }
  std::vector<std::string> out;
  if (failed.empty()) return out;
  const std::string tn = track_name(t);
  if (!value_fail && ledger_fail)
    out.push_back(tn + ": the numbers are right but the ledger differs from the closed form (" + first_ledger +
                  "): count what your code loads, stores and computes against the doc's formula");
  if (failed.size() == ran.size()) {
    out.push_back(tn + ": every case fails: the heart of the step (the TODO(lab) regions), on the smallest case first");
  } else {
    struct Pred { std::string what; std::function<bool(const GradeCase&)> f; };
    const std::vector<Pred> preds = {
        {"causal cases: the mask (common/causal.hpp, [causal-mask]) or the tiles a causal row skips",
         [](const GradeCase& g) { return g.c.shape.causal; }},
        {"cases without the mask", [](const GradeCase& g) { return !g.c.shape.causal; }},
        {"cases with a ragged last tile (N or Nk not a multiple of 64): the bounds at the edges",
         [](const GradeCase& g) { return g.c.shape.N % 64 != 0 || g.c.shape.Nk % 64 != 0; }},
        {"cases with Nk != N: the lengths of Q and of K/V are different loops",
         [](const GradeCase& g) { return g.c.shape.N != g.c.shape.Nk; }},
        {"bf16 cases: rounding to the storage type where the kernel rounds",
         [](const GradeCase& g) { return g.c.shape.dtype == DType::bf16; }},
        {"fp16 cases", [](const GradeCase& g) { return g.c.shape.dtype == DType::f16; }},
        {"large-logit cases: the running max (exp without it overflows)",
         [](const GradeCase& g) { return g.c.inputs.qk_spread > 1.0; }},
        {"cases with B or H above 1: the offsets of a batch and a head",
         [](const GradeCase& g) { return g.c.shape.B > 1 || g.c.shape.H > 1; }},
    };
    // The most specific traits every failing case shares (with three or more failing cases).
    std::vector<std::pair<size_t, std::string>> only;
    for (const Pred& p : preds) {
      bool all = true;
      size_t share = 0;
      for (long k : failed) all = all && p.f(cases[size_t(k)]);
      for (long k : ran) share += p.f(cases[size_t(k)]) ? 1 : 0;
      if (all && share < ran.size()) only.emplace_back(share, p.what);
    }
    std::set<int64_t> ds;
    for (long k : failed) ds.insert(cases[size_t(k)].c.shape.d);
    if (ds.size() == 1) {
      size_t share = 0;
      for (long k : ran) share += cases[size_t(k)].c.shape.d == *ds.begin() ? 1 : 0;
      if (share < ran.size()) only.emplace_back(share, "d = " + std::to_string(*ds.begin()) + ": the loops over the head dimension");
    }
    std::stable_sort(only.begin(), only.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    if (failed.size() < 3) only.clear();
    if (only.size() > 2) only.resize(2);
    std::ostringstream os;
    os << tn << ": " << failed.size() << " of " << ran.size() << " cases fail";
    if (!only.empty()) {
      os << "; all of them are ";
      for (size_t i = 0; i < only.size(); ++i) os << (i ? "; and " : "") << only[i].second;
    }
    out.push_back(os.str());
  }
  // The smallest failing case, to rerun alone.
  long best = *failed.begin();
  auto size = [&](long k) { const Shape& s = cases[size_t(k)].c.shape; return s.B * s.H * s.N * s.Nk * s.d; };
  for (long k : failed)
    if (size(k) < size(best)) best = k;
  out.push_back(tn + ": the smallest failing case, alone: " + reproduce(argv0, cases[size_t(best)]));
  return out;
}

int Grader::finish(const std::vector<std::string>& tracks) {
  int pass = 0, fail = 0, refused = 0, not_checked = 0, not_run = 0;
  std::map<std::string, int> fail_by;
  for (const Line& l : lines_) {
    if (l.status == "PASS") ++pass;
    else if (l.status == "REFUSED") ++refused;
    else if (l.status == "NOT_CHECKED") ++not_checked;
    else {
      if (l.status == "NOT_RUN") {
        ++not_run;
      } else {
        ++fail;
        ++fail_by[track_name(l.track)];
      }
    }
  }
  std::vector<std::string> advice;
  for (Track t : {Track::Cpu, Track::Gpu})  // the speed line says what it needs itself
    for (const std::string& a : look_at(cases_, lines_, t, argv0_)) advice.push_back(a);
  // A track that ran and checked nothing (every case refused) is not a pass.
  std::vector<std::string> empty_tracks;
  for (const std::string& tn : tracks) {
    bool any = false;
    for (const Line& l : lines_) any = any || (track_name(l.track) == tn && (l.status == "PASS" || l.status == "FAIL"));
    if (!any) empty_tracks.push_back(tn);
  }
  const bool ok = fail == 0 && not_run == 0 && empty_tracks.empty();
  std::ostringstream verdict;
  if (ok) {
    verdict << "PASS: all " << pass << " checks passed";
  } else {
    verdict << "FAIL: ";
    if (fail) verdict << fail << " of " << (pass + fail) << " checks failed";
    else if (pass == 0) verdict << "nothing was checked";
    else verdict << "no check failed";
    if (!fail_by.empty()) {
      verdict << " (";
      bool first = true;
      for (const auto& [t, n] : fail_by) { verdict << (first ? "" : ", ") << t << " " << n; first = false; }
      verdict << ")";
    }
    if (not_run) verdict << "; " << not_run << " group(s) of cases not run";
    if (pass + fail > 0)
      for (const std::string& t : empty_tracks) verdict << "; nothing was checked on the " << t << " track";
  }
  if (refused) verdict << "; " << refused << " refused (this GPU cannot run them: not run, not passed)";
  if (not_checked) verdict << "; " << not_checked << " not checked";
  if (o_.grade_json) {
    std::ostringstream js;
    js << "{\"program\":" << json_str(st_.program()) << ",\"step\":" << json_str(st_.id) << ",\"slug\":"
       << json_str(st_.slug) << ",\"ok\":" << (ok ? "true" : "false") << ",\"tracks\":[";
    for (size_t i = 0; i < tracks.size(); ++i) js << (i ? "," : "") << json_str(tracks[i]);
    js << "],\"counts\":{\"pass\":" << pass << ",\"fail\":" << fail << ",\"refused\":" << refused
       << ",\"not_checked\":" << not_checked << ",\"not_run\":" << not_run << "},\"verdict\":" << json_str(verdict.str())
       << ",\"checks\":[";
    for (size_t i = 0; i < lines_.size(); ++i) {
      const Line& l = lines_[i];
      js << (i ? "," : "") << "{\"track\":" << json_str(track_name(l.track)) << ",\"status\":" << json_str(l.status)
         << ",\"check\":" << json_str(l.check) << ",\"case\":" << json_str(l.case_name) << ",\"detail\":"
         << json_str(l.detail) << ",\"hint\":" << json_str(l.hint) << "}";
    }
    js << "],\"notes\":[";
    for (size_t i = 0; i < notes_.size(); ++i) js << (i ? "," : "") << json_str(notes_[i]);
    js << "],\"look_at\":[";
    for (size_t i = 0; i < advice.size(); ++i) js << (i ? "," : "") << json_str(advice[i]);
    js << "]}\n";
    std::cout << js.str();
  } else {
    std::cout << "\ngrade     " << verdict.str() << "\n";
    for (size_t i = 0; i < advice.size(); ++i) std::cout << (i ? "          " : "look at   ") << advice[i] << "\n";
    if (!ok) std::cout << "          the handout: docs/labs/" << st_.id << "_" << st_.slug << ".md\n";
  }
  return ok ? 0 : 1;
}

}  // namespace

int run_grade_child(const StepInfo& step, const StepInfo* previous, const CliOptions& o) {
  Out out;
  if (const char* fd = std::getenv("FA_GRADE_FD")) {
    out.f = fdopen(std::atoi(fd), "w");
    if (!out.f) {
      std::cerr << step.program() << ": error: FA_GRADE_FD=" << fd << " is not open\n";
      return 2;
    }
  }
  std::vector<GradeCase> cases;
  try {
    cases = all_cases(step, o);
  } catch (const CliError& e) {
    std::cerr << step.program() << ": error: " << e.what() << "\n";
    return 2;
  }
  const size_t k0 = size_t(o.grade_case);
  if (k0 >= cases.size()) {
    std::cerr << step.program() << ": error: --grade-case " << k0 << ": there are " << cases.size() << " cases\n";
    return 2;
  }
  const Track t = cases[k0].track;
  for (size_t k = k0; k < cases.size() && cases[k].track == t; ++k) {
    bool go_on = true;
    if (t == Track::Cpu) go_on = run_cpu_case(step, cases[k], k, out);
    else if (t == Track::Gpu) go_on = run_gpu_case(step, cases[k], k, out);
    else if (previous) run_speed_case(step, *previous, cases[k], o, k, out);
    else out.rec(k, "NOT_CHECKED", "speed", "no previous step linked");
    out.end(k);
    if (!go_on) break;  // what failed may have left the process in a bad state: a fresh child goes on
  }
  out.quit();
  return 0;
}

int run_grade(const StepInfo& step, const StepInfo* previous, const CliOptions& o, const std::vector<std::string>& args,
              const std::string& argv0) {
  // Where the GPU track can run.
  std::string why;
  bool have_gpu = false;
  if (step.launch == nullptr) why = "this build has no GPU kernels for step " + step.id;
  else if (o.grade_track == "cpu") why = "--track cpu";
  else have_gpu = gpu_available(why);
  std::vector<std::string> tracks;
  if (o.grade_track == "cpu" || o.grade_track == "both" || o.grade_track.empty()) tracks.push_back("cpu");
  if (o.grade_track == "gpu" || o.grade_track == "both" || (o.grade_track.empty() && have_gpu)) {
    if (!have_gpu) {
      std::cerr << step.program() << ": error: --track " << o.grade_track << ", but " << why << "\n";
      return 2;
    }
    tracks.push_back("gpu");
  }
  const bool on_gpu = std::find(tracks.begin(), tracks.end(), "gpu") != tracks.end();

  std::optional<Grader> g;
  try {
    g.emplace(step, o, args, argv0);
  } catch (const CliError& e) {  // a bad speed shape
    std::cerr << step.program() << ": error: " << e.what() << "\n";
    return 2;
  }
  const std::vector<GradeCase>& cs = g->cases();
  auto range = [&](Track t) {
    size_t a = 0, b = 0;
    while (a < cs.size() && cs[a].track != t) ++a;
    for (b = a; b < cs.size() && cs[b].track == t; ++b) {}
    return std::pair{a, b};
  };
  const std::string name = step.id + "_" + step.slug + "/";
  const std::string dir = step.program().rfind("labci", 0) == 0 ? "lab_ci/" + name + " in the build folder (the blanked copy CI builds)"
                          : step.program().rfind("lab", 0) == 0 ? "lab/" + name
                                                                 : "steps/" + name;
  const auto [c0, c1] = range(Track::Cpu);
  const size_t n_vars = grade_variants(step, o).size();
  if (!o.grade_json) {
    std::cout << step.program() << " --grade: step " << step.id << ", " << step.title << "\n";
    std::cout << "files     " << dir << " (the handout: docs/labs/" << step.id << "_" << step.slug << ".md)\n";
  }
  std::ostringstream cpu_what, gpu_what;
  cpu_what << "the blueprint" << (step.has_backward() ? "s (forward and backward)" : "") << " over " << (c1 - c0) / n_vars
           << " shapes (common/shapes.hpp) x " << n_vars << " variant(s), against the Eigen reference; the counted ledger "
           << "against the closed form on each";
  gpu_what << "the kernels over the same " << (c1 - c0) / n_vars << " shapes x " << n_vars
           << " variant(s) inside NaN-padded buffers (no stray writes allowed)";
  const double t_cpu = o.grade_timeout > 0 ? o.grade_timeout : 60, t_gpu = o.grade_timeout > 0 ? o.grade_timeout : 30;
  try {
    if (std::find(tracks.begin(), tracks.end(), "cpu") != tracks.end()) {
      g->note("cpu", cpu_what.str());
      g->run_track(c0, c1, t_cpu);
    }
    if (on_gpu) {
      g->note("gpu", gpu_what.str());
      const auto [a, b] = range(Track::Gpu);
      g->run_track(a, b, t_gpu);
    } else {
      g->note("gpu", "not run: " + why);
    }
    if (o.min_speedup > 0) {
      const auto [a, b] = range(Track::Speed);
      const std::string check = step.has_backward() ? "bwd speed" : "speed";
      const std::string shape = cs[a].c.shape.str();
      if (!on_gpu) g->add({Track::Speed, -1, "NOT_CHECKED", check, shape, "--min-speedup needs the GPU track", ""});
      else if (!previous)
        g->add({Track::Speed, -1, "NOT_CHECKED", check, shape,
                step.id == "01" ? "step 01 has no previous step"
                                : step.program() + " does not link the previous step's kernels (lab" + step.id +
                                      " does: make lab" + step.id + ")",
                ""});
      else if (step.has_backward() && !previous->has_backward())
        g->add({Track::Speed, -1, "NOT_CHECKED", check, shape,
                "step " + step.id + " is graded on its backward; step " + previous->id + " has none to time against", ""});
      else {
        std::ostringstream what;
        what << "at " << shape << ": " << step.program() << " against step" << previous->id << ", at least "
             << o.min_speedup << "x its speed";
        g->note("speed", what.str());
        g->run_track(a, b, std::max(t_gpu, 120.0));
      }
    }
  } catch (const std::exception& e) {
    std::cerr << step.program() << ": error: the grader itself failed: " << e.what() << "\n";
    return 1;
  }
  return g->finish(tracks);
}

}  // namespace fa
