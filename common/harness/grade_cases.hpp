// The grader's insides (harness/grade.hpp is its interface): the cases, what a child runs for one,
// and the report. Four files, one job each:
//   grade_cases.cpp   the cases of every track, the checks one case runs, and their hints;
//   child.cpp         a child process with a time limit (generic: fork, exec, poll, waitpid);
//   grade_report.cpp  the verdict, "look at", --json;
//   grade.cpp         the parent: tracks, children, one line per check.
#pragma once
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "harness/cli.hpp"
#include "harness/record.hpp"
#include "core/shapes.hpp"  // the shape matrix of the tests
#include "core/step.hpp"

namespace fa::grading {

enum class Track { Cpu, Gpu, Speed };
const char* track_name(Track t);

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
std::vector<StepOptions> grade_variants(const StepInfo& st, const CliOptions& o);
// Every case of every track, in one fixed order (parent and child index the same list): the CPU
// track, the GPU track (the same matrix and variants), then the speed case.
std::vector<GradeCase> all_cases(const StepInfo& st, const CliOptions& o);

inline constexpr const char* kTimeoutNote = "--timeout S waits longer";

// Records: "R<TAB>k<TAB>status<TAB>check<TAB>detail<TAB>hint<TAB>shows" per check ("shows": what
// failed, of O L dQ dK dV ledger), "E<TAB>k" when case k is done, "Q" when the child stops on purpose.
struct Out {
  FILE* f = stdout;
  void rec(size_t k, const std::string& status, const std::string& check, const std::string& detail,
           const std::string& hint = "", const std::string& shows = "");
  void end(size_t k);
  void quit();
};

// Each returns true when every check of the case passed (or was refused): the child then goes on.
bool run_cpu_case(const StepInfo& st, const GradeCase& g, size_t k, Out& out);
// [arch] Without a device but with FA_FAKE_CC, a case is held against that GPU's limits alone:
// refused, or reported as not run (never as passed).
bool run_gpu_case(const StepInfo& st, const GradeCase& g, size_t k, Out& out);
// The step's time against the previous step's, at one shape: the forward's, or the backward's for
// a step with one (then only against a previous step with a backward).
void run_speed_case(const StepInfo& st, const StepInfo& prev, const GradeCase& g, const CliOptions& o, size_t k,
                    Out& out);

// The command line that runs one case's shape as the step program does.
std::string reproduce(const std::string& argv0, const GradeCase& g);

// The report's width: every printed line fits it (wrapped under the check's columns).
inline constexpr int kReportWidth = 100;

// One line of the report: a check of a case, or a note about a group of cases (k = -1).
struct Line {
  Track track;
  long k = -1;  // the case, or -1
  std::string status, check, case_name, detail, hint;
  std::string shows;  // a failed check: which of O L dQ dK dV ledger were wrong (space-separated)
};

void print_line(std::ostream& os, const Line& l);
// `text` wrapped at word boundaries within kReportWidth: the first line after `first`, the others
// after `indent`.
void print_wrapped(std::ostream& os, const std::string& first, const std::string& indent, const std::string& text);

// The verdict over every line, the advice, and the exit status (0 or 1); --json prints it as one
// object instead.
int report(const StepInfo& st, const CliOptions& o, const std::vector<GradeCase>& cases, const std::vector<Line>& lines,
           const std::vector<std::string>& notes, const std::vector<std::string>& tracks, const std::string& argv0);

}  // namespace fa::grading
