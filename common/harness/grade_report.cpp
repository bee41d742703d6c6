// --grade's report: the verdict over every line, "look at" (the pattern of the failing cases), and
// --json (harness/grade_cases.hpp).
#include <algorithm>
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
std::set<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::set<std::string> w;
  for (std::string x; in >> x;) w.insert(x);
  return w;
}

// [lab-region] The region of the track's file whose tags fit the failures best: every output that
// failed is one its mistakes show in, every case trait it is about is shared by all failing cases;
// then the most of those traits, the fewest outputs beyond the failing ones, a tagged region before
// an untagged one. Ties are all named: the grader cannot tell them apart.
std::string region_advice(const StepInfo& st, Track t, const std::set<std::string>& shown, bool ledger_fail,
                          const std::set<std::string>& shared) {
  const std::string file = t == Track::Cpu ? "blueprint.cpp" : "kernel.cu";
  static const std::set<std::string> outputs = {"O", "L", "dQ", "dK", "dV"};
  std::vector<std::pair<long, const LabRegion*>> fit, near;
  for (const LabRegion& r : st.lab_regions) {
    if (r.file != file) continue;
    const std::set<std::string> tags = words(r.tags);
    std::set<std::string> outs, traits;
    for (const std::string& x : tags) (outputs.count(x) ? outs : traits).insert(x);
    const bool ledger = traits.erase("ledger") > 0;
    const bool untagged = tags.empty();
    long overlap = 0, extra = 0, matched = 0;
    bool ok = true;
    for (const std::string& o : shown) {
      if (outs.count(o)) ++overlap;
      else ok = ok && untagged;
    }
    for (const std::string& o : outs) extra += !shown.count(o);
    if (shown.empty() && ledger_fail) ok = ok && (ledger || untagged);
    for (const std::string& tr : traits) {
      if (shared.count(tr)) ++matched;
      else ok = false;
    }
    if (ok) fit.push_back({matched * 100 - extra * 2 - (untagged ? 1 : 0), &r});
    else near.push_back({overlap, &r});
  }
  auto names = [](std::vector<std::pair<long, const LabRegion*>>& v) {
    std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<std::string> out;
    for (const auto& x : v)
      if (x.first == v.front().first) out.push_back(x.second->name);
    return out;
  };
  std::vector<std::string> best;
  std::string how;
  if (shown.empty() && !ledger_fail) {  // only throws, crashes or timeouts: no output to tell by
    std::string all;
    for (const auto& x : fit) all += (all.empty() ? "" : ", ") + x.second->name;
    if (fit.size() < 2) return "";
    return track_name(t) + std::string(": the failures (a throw, a crash, a timeout) do not say which region: any of ") +
           all + " in " + file;
  }
  if (!fit.empty()) {
    best = names(fit);
    how = best.size() == 1 ? "the region this points at: " : "one of the regions this points at (they fail alike): ";
  } else if (!near.empty()) {
    best = names(near);
    how = "no region's tags fit these failures exactly; the nearest: ";
  } else {
    return "";
  }
  std::string s = track_name(t) + std::string(": ") + how;
  for (size_t i = 0; i < best.size(); ++i) s += (i ? ", " : "") + best[i];
  std::string what;
  for (const char* o : {"O", "L", "dQ", "dK", "dV"})
    if (shown.count(o)) what += (what.empty() ? "" : " ") + std::string(o);
  if (ledger_fail) what += what.empty() ? "the ledger" : " and the ledger";
  return s + " in " + file + " (what failed: " + what + ")";
}

std::vector<std::string> look_at(const StepInfo& st, const std::vector<GradeCase>& cases, const std::vector<Line>& lines,
                                 Track t, const std::string& argv0) {
  std::set<long> ran, failed;
  bool value_fail = false, ledger_fail = false;
  std::string first_ledger;
  std::set<std::string> shown;  // the outputs the failing checks found wrong
  for (const Line& l : lines) {
    if (l.track != t || l.k < 0) continue;
    if (l.status == "PASS" || l.status == "FAIL") ran.insert(l.k);
    if (l.status != "FAIL") continue;
    failed.insert(l.k);
    for (const std::string& w : words(l.shows))
      if (w != "ledger") shown.insert(w);
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
  std::set<std::string> shared;  // the keys of the traits every failing case shares (and enough without pass)
  if (!value_fail && ledger_fail)
    out.push_back(tn + ": the numbers are right but the ledger differs from the closed form (" + first_ledger +
                  "): count what your code loads, stores and computes against the doc's formula");
  if (failed.size() == ran.size()) {
    out.push_back(tn + ": every case fails: the heart of the step (the TODO(lab) regions), on the smallest case first");
  } else {
    struct Pred { std::string key, what; std::function<bool(const GradeCase&)> f; };
    std::vector<Pred> preds = {
        {"causal", "causal cases: the mask (common/kernel/causal.hpp, [causal-mask]) or the tiles a causal row skips",
         [](const GradeCase& g) { return g.c.shape.causal; }},
        {"nomask", "cases without the mask", [](const GradeCase& g) { return !g.c.shape.causal; }},
        {"ragged", "cases with a ragged last tile (N or Nk not a multiple of 64): the bounds at the edges",
         [](const GradeCase& g) { return g.c.shape.N % 64 != 0 || g.c.shape.Nk % 64 != 0; }},
        {"nk", "cases with Nk != N: the lengths of Q and of K/V are different loops",
         [](const GradeCase& g) { return g.c.shape.N != g.c.shape.Nk; }},
        {"bf16", "bf16 cases: rounding to the storage type where the kernel rounds",
         [](const GradeCase& g) { return g.c.shape.dtype == DType::bf16; }},
        {"fp16", "fp16 cases", [](const GradeCase& g) { return g.c.shape.dtype == DType::f16; }},
        {"logits", "large-logit cases: the running max (exp without it overflows)",
         [](const GradeCase& g) { return g.c.inputs.qk_spread > 1.0; }},
        {"bh", "cases with B or H above 1: the offsets of a batch and a head",
         [](const GradeCase& g) { return g.c.shape.B > 1 || g.c.shape.H > 1; }},
        {"gqa", "GQA cases (Hkv < H): which key/value head a query head reads ([gqa])",
         [](const GradeCase& g) { return g.c.shape.hkv() != g.c.shape.H; }},
        {"window", "sliding-window cases: the band's lower edge, and the tiles before it ([window])",
         [](const GradeCase& g) { return g.c.shape.window > 0; }},
        {"dropout", "dropout cases: the mask's word for each (row, key) and the 1/(1 - P) factor ([dropout])",
         [](const GradeCase& g) { return g.c.shape.dropout > 0.0; }},
    };
    // A swept flag's value is a trait too ("--splits 1"): a mistake on one variant's path.
    std::map<std::string, std::set<std::string>> values;
    for (long k : ran)
      for (const auto& [flag, v] : cases[size_t(k)].opt) values[flag].insert(v);
    for (const auto& [flag, vs] : values)
      if (vs.size() > 1)
        for (const std::string& v : vs)
          preds.push_back({flag + "=" + v, "cases with --" + flag + " " + v,
                           [flag = flag, v](const GradeCase& g) {
                             const auto it = g.opt.find(flag);
                             return it != g.opt.end() && it->second == v;
                           }});
    // The traits every failing case shares, named only where the cases without them passed — and
    // enough of them (three, and a tenth of the track) to tell: a trait nearly every case has says
    // nothing. Traits that hold for exactly the same cases of this matrix are named together, as
    // the same evidence; a trait implied by a more specific one named already is left out.
    struct Found { std::set<long> with; std::string what, same; };
    std::vector<Found> found;
    const size_t enough = std::max<size_t>(3, ran.size() / 10);
    auto add_trait = [&](const std::string& key, const std::string& what, const std::function<bool(const GradeCase&)>& f) {
      std::set<long> with;
      for (long k : ran)
        if (f(cases[size_t(k)])) with.insert(k);
      for (long k : failed)
        if (!with.count(k)) return;  // a failing case without it
      if (ran.size() - with.size() < enough) return;
      shared.insert(key);
      for (Found& x : found)
        if (x.with == with) { x.same += (x.same.empty() ? "" : "; ") + what; return; }
      found.push_back({with, what, ""});
    };
    for (const Pred& p : preds) add_trait(p.key, p.what, p.f);
    std::set<int64_t> ds;
    for (long k : failed) ds.insert(cases[size_t(k)].c.shape.d);
    if (ds.size() == 1)
      add_trait("d=" + std::to_string(*ds.begin()), "d = " + std::to_string(*ds.begin()) + ": the loops over the head dimension",
                [d = *ds.begin()](const GradeCase& g) { return g.c.shape.d == d; });
    std::stable_sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.with.size() < b.with.size(); });
    std::vector<std::string> only;
    std::vector<const Found*> named;
    for (const Found& x : found) {
      bool implied = false;  // every case of a trait named already has this one too
      for (const Found* n : named)
        implied = implied || std::includes(x.with.begin(), x.with.end(), n->with.begin(), n->with.end());
      if (implied || named.size() == 2) continue;
      named.push_back(&x);
      only.push_back(x.same.empty() ? x.what
                                    : x.what + " (in this matrix the same cases as: " + x.same + "; either may be the cause)");
    }
    if (failed.size() < 3) only.clear();
    std::ostringstream os;
    os << tn << ": " << failed.size() << " of " << ran.size() << " cases fail";
    if (!only.empty()) {
      os << "; all of them are ";
      for (size_t i = 0; i < only.size(); ++i) os << (i ? "; and " : "") << only[i];
      os << ", and the cases without " << (only.size() > 1 ? "these" : "it") << " pass";
    }
    out.push_back(os.str());
  }
  // [forward-from] A step that runs another step's forward (08: step 07's): O and L are that step's
  // code, not this one's regions.
  if (!st.forward_from.empty() && (shown.erase("O") + shown.erase("L")) > 0) {
    // With --dropout it may be another step's (step 19: step 12's).
    const std::string fwd = st.forward_from_dropout.empty() ? st.forward_from : st.forward_from + " (with dropout " + st.forward_from_dropout + ")";
    out.push_back(tn + ": the forward is step " + fwd + "'s code and fails too: grade it first (in a "
                  "student tree it is your lab " + fwd + ")");
    if (shown.empty()) ledger_fail = false;  // nothing of this step's own is known to be wrong
  }
  if (const std::string r = region_advice(st, t, shown, ledger_fail, shared); !r.empty()) out.push_back(r);
  // The smallest failing case, to rerun alone.
  long best = *failed.begin();
  auto size = [&](long k) { const Shape& s = cases[size_t(k)].c.shape; return s.B * s.H * s.N * s.Nk * s.d; };
  for (long k : failed)
    if (size(k) < size(best)) best = k;
  out.push_back(tn + ": the smallest failing case, alone: " + reproduce(argv0, cases[size_t(best)]));
  return out;
}

}  // namespace

// A check's line: its track, status and check name in columns, then the case, the numbers and the
// hint wrapped at word boundaries under one another, every line within kReportWidth columns.
void print_line(std::ostream& os, const Line& l) {
  const std::string st = l.status == "NOT_CHECKED" ? "NOT CHECKED" : l.status == "NOT_RUN" ? "NOT RUN" : l.status;
  std::ostringstream head;
  head << std::left << std::setw(6) << track_name(l.track) << std::setw(12) << st << std::setw(11) << l.check;
  const std::string prefix = head.str(), indent(prefix.size(), ' ');
  print_wrapped(os, prefix, indent, (l.case_name.empty() ? "" : l.case_name + ": ") + l.detail);
  if (!l.hint.empty() && l.status != "PASS") print_wrapped(os, indent, indent, "-> look at: " + l.hint);
  os << std::flush;
}

void print_wrapped(std::ostream& os, const std::string& first, const std::string& indent, const std::string& text) {
  std::istringstream words(text);
  std::string line = first;
  bool empty = true;
  for (std::string w; words >> w;) {
    if (!empty && line.size() + 1 + w.size() > size_t(kReportWidth)) {
      os << line << "\n";
      line = indent;
      empty = true;
    }
    line += (empty ? "" : " ") + w;
    empty = false;
  }
  os << line << "\n";
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
    for (const std::string& a : look_at(st, cases, lines, t, argv0)) advice.push_back(a);
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
    const std::string indent(10, ' ');
    std::cout << "\n";
    print_wrapped(std::cout, "grade     ", indent, verdict.str());
    // The advice wrapped, but a command to rerun stays whole on a line of its own (to copy).
    for (size_t i = 0; i < advice.size(); ++i) {
      const std::string& a = advice[i];
      const std::string mark = "alone: ";  // look_at's last line: the smallest failing case's command
      const size_t cmd = a.find(mark);
      print_wrapped(std::cout, i ? indent : "look at   ", indent,
                    cmd == std::string::npos ? a : a.substr(0, cmd + mark.size() - 1));
      if (cmd != std::string::npos) std::cout << indent << "  " << a.substr(cmd + mark.size()) << "\n";
    }
    if (!ok) std::cout << "          the handout: docs/labs/" << st.id << "_" << st.slug << ".md\n";
  }
  return ok ? 0 : 1;
}

}  // namespace fa::grading
