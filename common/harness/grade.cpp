// --grade, the parent and the child's entry (harness/grade.hpp). The cases and the checks of one
// case are harness/grade_cases.cpp, the child process harness/child.cpp, the report
// harness/grade_report.cpp.
#include "harness/grade.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>

#include "core/arch.hpp"
#include "harness/child.hpp"
#include "harness/gpu.hpp"
#include "harness/grade_cases.hpp"

namespace fa {
namespace {

using namespace grading;

class Grader {
 public:
  Grader(const StepInfo& st, const CliOptions& o, std::vector<std::string> args, std::string argv0)
      : st_(st), o_(o), args_(std::move(args)), argv0_(std::move(argv0)), cases_(all_cases(st, o)) {}

  const std::vector<GradeCase>& cases() const { return cases_; }

  void add(Line l) {
    if (!o_.grade_json && !(o_.grade_fails_only && (l.status == "PASS" || l.status == "REFUSED"))) print_line(std::cout, l);
    lines_.push_back(std::move(l));
  }
  void note(const std::string& label, const std::string& text) {
    notes_.push_back(label + ": " + text);
    if (!o_.grade_json) {
      std::ostringstream first;
      first << std::left << std::setw(10) << label;
      print_wrapped(std::cout, first.str(), std::string(10, ' '), text);
      std::cout << std::flush;
    }
  }

  // Runs cases [first, last) of one track, a child at a time.
  void run_track(size_t first, size_t last, double timeout_s) {
    size_t k = first;
    while (k < last) {
      const Outcome r = run_child(k, timeout_s);
      if (r.next > k) { k = r.next; if (r.died.empty()) continue; }
      if (!r.died.empty()) {  // case k died: its records so far stand, the death is one more failure
        add({cases_[k].track, long(k), "FAIL", r.timed_out ? "timeout" : "crash", cases_[k].name(), r.died, r.hint, ""});
        ++k;
        if (r.timed_out && k < last) {
          std::ostringstream os;
          os << (last - k) << " case(s) after the one that timed out (fix it first; " << kTimeoutNote << ")";
          add({cases_[k].track, -1, "NOT_RUN", "cases", "", os.str(), "", ""});
          return;
        }
      }
    }
  }

  int finish(const std::vector<std::string>& tracks) { return report(st_, o_, cases_, lines_, notes_, tracks, argv0_); }

 private:
  struct Outcome {
    size_t next = 0;         // the first case not finished
    std::string died, hint;  // why the child died in case `next`, if it did
    bool timed_out = false;
  };

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
  std::vector<std::string> argv = {argv0_};
  argv.insert(argv.end(), args_.begin(), args_.end());
  argv.push_back("--grade-case");
  argv.push_back(std::to_string(k));
  std::string last_check;  // the last check case k reported
  bool quit = false;
  // A record restarts the clock when a case ends: the time limit is per case.
  const ChildRun run = run_self(argv, "FA_GRADE_FD", timeout_s, [&](const std::string& line) {
    std::vector<std::string> f;
    std::istringstream in(line);
    for (std::string x; std::getline(in, x, '\t');) f.push_back(x);
    if (f.size() == 1 && f[0] == "Q") {
      quit = true;
    } else if (f.size() >= 2 && f[0] == "E") {
      res.next = std::stoul(f[1]) + 1;
      last_check.clear();
      return true;
    } else if (f.size() >= 5 && f[0] == "R") {
      const size_t at = std::stoul(f[1]);
      if (at < cases_.size()) {
        last_check = f[3];
        add({cases_[at].track, long(at), f[2], f[3], cases_[at].name(), f[4], f.size() > 5 ? f[5] : "",
             f.size() > 6 ? f[6] : ""});
      }
    }
    return false;
  });
  if (quit && !run.killed && res.next > k) return res;  // it stopped after the last case or after a failure
  // The child died (or was killed) inside case res.next.
  const std::string after = last_check.empty() ? "" : " after its " + last_check + " check";
  const std::string printed = tail_lines(run.output, 3);
  std::ostringstream why;
  const int status = run.status;
  if (run.killed) {
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
  // [arch] Without a device, FA_FAKE_CC still grades the GPU track against that GPU's limits alone:
  // what it cannot run is refused, what it could run is not checked (nothing here runs it). So the
  // refusals are graded on a machine without a GPU too.
  int fake_cc = 0;
  if (!have_gpu && step.launch != nullptr && o.grade_track != "cpu") {
    try {
      fake_cc = fake_cc_from_env().value_or(0);
    } catch (const std::invalid_argument& e) {
      std::cerr << step.program() << ": error: " << e.what() << "\n";
      return 2;
    }
  }
  const bool fake_only = fake_cc > 0;
  std::vector<std::string> tracks;
  if (o.grade_track == "cpu" || o.grade_track == "both" || o.grade_track.empty()) tracks.push_back("cpu");
  if (o.grade_track == "gpu" || o.grade_track == "both" || (o.grade_track.empty() && (have_gpu || fake_only))) {
    if (!have_gpu && !fake_only) {
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
  const std::string dir = step.program().rfind("mut", 0) == 0 ? "mutants/" + name + " in the build folder (a mutant CI builds)"
                          : step.program().rfind("lab", 0) == 0 ? "lab/" + name
                                                                 : "steps/" + name;
  const auto [c0, c1] = range(Track::Cpu);
  const size_t n_vars = grade_variants(step, o).size();
  if (!o.grade_json) {
    const std::string indent(10, ' ');
    print_wrapped(std::cout, "", indent, step.program() + " --grade: step " + step.id + ", " + step.title);
    print_wrapped(std::cout, "files     ", indent, dir + " (the handout: docs/labs/" + step.id + "_" + step.slug + ".md)");
  }
  std::ostringstream cpu_what, gpu_what;
  cpu_what << "the blueprint" << (step.has_backward() ? "s (forward and backward)" : "") << " over " << (c1 - c0) / n_vars
           << " shapes (common/core/shapes.hpp) x " << n_vars << " variant(s), against the Eigen reference; the counted ledger "
           << "against the closed form on each";
  gpu_what << "the kernels over the same " << (c1 - c0) / n_vars << " shapes x " << n_vars
           << " variant(s) inside NaN-padded buffers (no stray writes allowed)";
  if (fake_only)
    gpu_what << "; no CUDA device (" << why << "): each case only held against FA_FAKE_CC=" << fake_cc
             << "'s limits, refused or not checked";
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
      if (!on_gpu || !have_gpu) g->add({Track::Speed, -1, "NOT_CHECKED", check, shape, "--min-speedup needs the GPU track on a GPU", "", ""});
      else if (!previous)
        g->add({Track::Speed, -1, "NOT_CHECKED", check, shape,
                step.id == "01" ? "step 01 has no previous step"
                                : step.program() + " does not link the previous step's kernels (lab" + step.id +
                                      " does: make lab" + step.id + ")",
                "", ""});
      else if (step.has_backward() && !previous->has_backward())
        g->add({Track::Speed, -1, "NOT_CHECKED", check, shape,
                "step " + step.id + " is graded on its backward; step " + previous->id + " has none to time against", "", ""});
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
