// --grade's report: the verdict over every line, "look at" (the pattern of the failing cases), and
// --json (harness/grade_cases.hpp).
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "harness/grade_cases.hpp"

namespace fa::grading {
namespace {

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
        {"causal cases: the mask (common/kernel/causal.hpp, [causal-mask]) or the tiles a causal row skips",
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

}  // namespace

void print_line(std::ostream& os, const Line& l) {
  const std::string st = l.status == "NOT_CHECKED" ? "NOT CHECKED" : l.status == "NOT_RUN" ? "NOT RUN" : l.status;
  os << std::left << std::setw(6) << track_name(l.track) << std::setw(12) << st << std::setw(11) << l.check;
  if (!l.case_name.empty()) os << l.case_name << ": ";
  os << l.detail;
  if (!l.hint.empty() && l.status != "PASS") os << "  -> look at: " << l.hint;
  os << "\n" << std::flush;
}

int report(const StepInfo& st, const CliOptions& o, const std::vector<GradeCase>& cases, const std::vector<Line>& lines,
           const std::vector<std::string>& notes, const std::vector<std::string>& tracks, const std::string& argv0) {
  int pass = 0, fail = 0, refused = 0, not_checked = 0, not_run = 0;
  std::map<std::string, int> fail_by;
  for (const Line& l : lines) {
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
    for (const std::string& a : look_at(cases, lines, t, argv0)) advice.push_back(a);
  // A track that ran and checked nothing (every case refused) is not a pass.
  std::vector<std::string> empty_tracks;
  for (const std::string& tn : tracks) {
    bool any = false;
    for (const Line& l : lines) any = any || (track_name(l.track) == tn && (l.status == "PASS" || l.status == "FAIL"));
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
  if (o.grade_json) {
    std::ostringstream js;
    js << "{\"program\":" << json_str(st.program()) << ",\"step\":" << json_str(st.id) << ",\"slug\":"
       << json_str(st.slug) << ",\"ok\":" << (ok ? "true" : "false") << ",\"tracks\":[";
    for (size_t i = 0; i < tracks.size(); ++i) js << (i ? "," : "") << json_str(tracks[i]);
    js << "],\"counts\":{\"pass\":" << pass << ",\"fail\":" << fail << ",\"refused\":" << refused
       << ",\"not_checked\":" << not_checked << ",\"not_run\":" << not_run << "},\"verdict\":" << json_str(verdict.str())
       << ",\"checks\":[";
    for (size_t i = 0; i < lines.size(); ++i) {
      const Line& l = lines[i];
      js << (i ? "," : "") << "{\"track\":" << json_str(track_name(l.track)) << ",\"status\":" << json_str(l.status)
         << ",\"check\":" << json_str(l.check) << ",\"case\":" << json_str(l.case_name) << ",\"detail\":"
         << json_str(l.detail) << ",\"hint\":" << json_str(l.hint) << "}";
    }
    js << "],\"notes\":[";
    for (size_t i = 0; i < notes.size(); ++i) js << (i ? "," : "") << json_str(notes[i]);
    js << "],\"look_at\":[";
    for (size_t i = 0; i < advice.size(); ++i) js << (i ? "," : "") << json_str(advice[i]);
    js << "]}\n";
    std::cout << js.str();
  } else {
    std::cout << "\ngrade     " << verdict.str() << "\n";
    for (size_t i = 0; i < advice.size(); ++i) std::cout << (i ? "          " : "look at   ") << advice[i] << "\n";
    if (!ok) std::cout << "          the handout: docs/labs/" << st.id << "_" << st.slug << ".md\n";
  }
  return ok ? 0 : 1;
}

}  // namespace fa::grading
