// Step 18's ring as ring_bench measured it on one GPU (docs/18_ring.md, "What one GPU measured").
//   make plot_ring && ./plot_ring [--data FILE] [--timeline FILE] [--priority high|normal] [--gpu TAG] [--out DIR]
// Reads the two CSVs steps/18_ring/ring_bench writes on the GPU machine:
//   ring_TAG.csv           one row per N, P, layout and mask           -> ring_scaling.png
//   ring_timeline_TAG.csv  the spans of one (N, P) point's ring launches -> ring_timeline.png
// By default the repository's plots/data/ring_TAG.csv (TAG: the only one there unless --gpu says
// which) and the timeline beside it; --data FILE takes another file, and the timeline beside it
// (ring_timeline_X.csv for ring_X.csv) unless --timeline FILE names one. Writes DIR/ring_timeline.png
// and DIR/ring_scaling.png (default DIR: the repository's plots/).
//   ring_timeline.png  the concurrent ring (P ranks as P pairs of streams on one GPU): one lane per
//                      rank, each step's compute a bar with its step number, each K/V transfer a
//                      thinner bar under it; one panel per mask and layout, on one time axis.
//   ring_scaling.png   against N (log 2), one curve per P (colour) and layout (zig-zag solid,
//                      contiguous dashed), without and with the mask: proj_eff, the ring projected
//                      to P GPUs from one GPU's timings, with the target 0.9; and t1 / ring_ms, the
//                      P-streams ring on one GPU against step 12 over the whole sequence.
// Rows that are not measurements (status "not run: budget") or did not pass their check are not
// drawn; stderr says how many were left out and why. A missing file or column, or a value that is
// not what the column holds, is an error naming the file (exit 1), before anything is drawn.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "plotting.hpp"

namespace fs = std::filesystem;
using namespace fa::plot;

namespace {

const char* const kProgram = "plot_ring";
const std::string kMeasured = "projected from one GPU";  // ring_bench's status of a measured row
const double kTarget = 0.9;                              // docs/18_ring.md: the target efficiency

void note(const std::string& s) { std::cerr << kProgram << ": note: " << s << "\n"; }

std::string join(const std::set<std::string>& s, const std::string& sep = ", ") {
  std::string out;
  for (const auto& x : s) out += (out.empty() ? "" : sep) + x;
  return out;
}

std::string fmt(double v, int digits = 3) {
  std::ostringstream o;
  o << std::setprecision(digits) << v;
  return o.str();
}

// 131072 -> "128k", 1048576 -> "1M"; other lengths as they are.
std::string n_short(int64_t n) {
  if (n >= (1 << 20) && n % (1 << 20) == 0) return std::to_string(n >> 20) + "M";
  if (n >= 1024 && n % 1024 == 0) return std::to_string(n >> 10) + "k";
  return std::to_string(n);
}

// "FILE: data row 3": the third row after the header (Table::num's errors give the line instead).
std::string row_at(const Table& t, size_t r) { return t.path() + ": data row " + std::to_string(r + 1); }

// A column that holds a whole number in [lo, hi].
int64_t whole(const Table& t, size_t r, const std::string& col, int64_t lo, int64_t hi) {
  const double v = t.num(r, col);
  if (v != std::floor(v) || v < double(lo) || v > double(hi))
    throw Error(row_at(t, r) + ": column " + col + ": '" + t.str(r, col) + "' is not a whole number from " +
                std::to_string(lo) + " to " + std::to_string(hi));
  return int64_t(v);
}

// A column that holds a positive, finite number.
double positive(const Table& t, size_t r, const std::string& col) {
  const double v = t.num(r, col);
  if (!(v > 0) || !std::isfinite(v))
    throw Error(row_at(t, r) + ": column " + col + ": '" + t.str(r, col) + "' is not a positive number");
  return v;
}

// layout: zigzag (true) or contiguous (false).
bool zigzag(const Table& t, size_t r) {
  const std::string& l = t.str(r, "layout");
  if (l != "zigzag" && l != "contiguous")
    throw Error(row_at(t, r) + ": column layout: '" + l + "' is neither zigzag nor contiguous");
  return l == "zigzag";
}

std::string layout_name(bool zz) { return zz ? "zig-zag" : "contiguous"; }

// ------------------------------------------------------------------------------------------------
// Reading: both files, checked before anything is drawn.

const std::vector<std::string> kRingCols = {"date", "commit", "device", "N",     "P",       "layout",   "causal", "B",    "H",
                                            "Hkv",  "d",      "dtype",  "t1_ms", "ring_ms", "proj_eff", "check",  "status"};
const std::vector<std::string> kTimelineCols = {"N", "P", "layout", "causal", "mode", "rank", "step", "what", "t0_ms", "t1_ms"};

struct Point {
  int64_t N;
  int P;
  bool zigzag, causal;
  double t1, ring, proj_eff;
};

// The ring CSV: its measured rows that passed, of one shape (B, H, Hkv, d, dtype), and where they came from.
struct Ring {
  std::string file;  // its name, for the captions
  std::string shape;
  std::vector<Point> points;
  std::set<std::string> devices, commits, dates;
  // Every row's device and commit by (N, P), measured or not: the timeline's caption.
  std::map<std::pair<int64_t, int>, std::set<std::string>> devices_at, commits_at;
  std::vector<std::string> notes;  // rows left out, and why: said once both files have been read
};

Ring load_ring(const std::string& path) {
  const Table t = read_table(path, kRingCols);
  Ring ring;
  ring.file = fs::path(path).filename().string();
  std::map<std::string, size_t> not_measured;  // status -> rows
  size_t failed = 0, other_shape = 0, repeated = 0;
  std::set<std::string> other_shapes;
  std::map<std::tuple<bool, bool, int, int64_t>, size_t> seen;  // causal, zigzag, P, N -> index into points
  for (size_t r = 0; r < t.size(); ++r) {
    const int64_t N = whole(t, r, "N", 1, int64_t(1) << 40);
    const int P = int(whole(t, r, "P", 1, 1024));
    const bool causal = whole(t, r, "causal", 0, 1) == 1, zz = zigzag(t, r);
    ring.devices_at[{N, P}].insert(t.str(r, "device"));
    ring.commits_at[{N, P}].insert(t.str(r, "commit"));
    const std::string& status = t.str(r, "status");
    if (status != kMeasured) {
      ++not_measured[status.empty() ? "(empty)" : status];
      continue;
    }
    if (t.str(r, "check") != "PASS") {
      ++failed;
      continue;
    }
    const std::string shape = "B = " + t.str(r, "B") + ", H = " + t.str(r, "H") + ", Hkv = " + t.str(r, "Hkv") +
                              ", d = " + t.str(r, "d") + ", " + t.str(r, "dtype");
    if (ring.shape.empty()) ring.shape = shape;
    if (shape != ring.shape) {
      ++other_shape, other_shapes.insert(shape);
      continue;
    }
    const Point p{N, P, zz, causal, positive(t, r, "t1_ms"), positive(t, r, "ring_ms"), positive(t, r, "proj_eff")};
    ring.devices.insert(t.str(r, "device"));
    ring.commits.insert(t.str(r, "commit"));
    ring.dates.insert(t.str(r, "date").substr(0, 10));  // the day of an ISO time stamp
    const auto key = std::make_tuple(causal, zz, P, N);
    if (seen.count(key)) {  // the file written twice into one: the later row
      ring.points[seen[key]] = p;
      ++repeated;
    } else {
      seen[key] = ring.points.size();
      ring.points.push_back(p);
    }
  }
  size_t left = failed + other_shape;
  for (const auto& [s, n] : not_measured) left += n;
  if (left) {
    std::string why;
    for (const auto& [s, n] : not_measured)
      why += (why.empty() ? "" : "; ") + std::to_string(n) + " not a measurement (status '" + s + "')";
    if (failed) why += (why.empty() ? "" : "; ") + std::to_string(failed) + " measured but not PASS in column check";
    if (other_shape)
      why += (why.empty() ? "" : "; ") + std::to_string(other_shape) + " of another shape (" + join(other_shapes, "; ") +
             "; drawn: " + ring.shape + ")";
    ring.notes.push_back(path + ": " + std::to_string(left) + " of " + std::to_string(t.size()) +
                         " rows left out of ring_scaling.png: " + why);
  }
  if (repeated)
    ring.notes.push_back(path + ": " + std::to_string(repeated) +
                         " rows repeat an earlier (N, P, layout, causal): the later one drawn");
  if (ring.points.empty()) throw Error(path + ": no measured rows that passed their check (nothing to draw)");
  return ring;
}

struct Span {
  int rank, step;
  bool transfer;
  double t0, t1;
};

struct Lanes {
  bool causal, zigzag;
  std::vector<Span> spans;
  double end = 0;  // the last span's end
};

// The timeline CSV: the concurrent-mode spans of one (N, P) point, one Lanes per mask and layout.
struct Timeline {
  std::string file;
  int64_t N = 0;
  int P = 0;
  std::vector<Lanes> panels;  // causal zig-zag, causal contiguous, then without the mask
  std::vector<std::string> notes;
};

// priority: a file with a comm_priority column (ring_bench --comm-priority) keeps only the rows of
// that priority, "high" unless --priority says otherwise; a file without it is drawn whole.
Timeline load_timeline(const std::string& path, const std::string& priority) {
  const Table t = read_table(path, kTimelineCols);
  Timeline tl;
  size_t other_priority = 0;
  tl.file = fs::path(path).filename().string();
  std::map<std::pair<bool, bool>, Lanes> by;  // (!causal, !zigzag): the order of the panels
  size_t other_point = 0;
  std::set<std::string> others;
  for (size_t r = 0; r < t.size(); ++r) {
    const int64_t N = whole(t, r, "N", 1, int64_t(1) << 40);
    const int P = int(whole(t, r, "P", 1, 1024));
    const bool causal = whole(t, r, "causal", 0, 1) == 1, zz = zigzag(t, r);
    const std::string& mode = t.str(r, "mode");
    const std::string& what = t.str(r, "what");
    if (mode != "concurrent" && mode != "serial")
      throw Error(row_at(t, r) + ": column mode: '" + mode + "' is neither concurrent nor serial");
    if (what != "compute" && what != "transfer")
      throw Error(row_at(t, r) + ": column what: '" + what + "' is neither compute nor transfer");
    const Span s{int(whole(t, r, "rank", 0, P - 1)), int(whole(t, r, "step", 0, P - 1)), what == "transfer",
                 t.num(r, "t0_ms"), t.num(r, "t1_ms")};
    if (!std::isfinite(s.t0) || !std::isfinite(s.t1) || s.t1 < s.t0)
      throw Error(row_at(t, r) + ": the span ends (t1_ms " + t.str(r, "t1_ms") + ") before it starts (t0_ms " +
                  t.str(r, "t0_ms") + ")");
    if (mode != "concurrent") continue;  // each rank's step alone: the scaling plot's proj_eff comes from it
    if (t.has("comm_priority") && t.str(r, "comm_priority") != priority) {
      ++other_priority;
      continue;
    }
    if (tl.P == 0) tl.N = N, tl.P = P;
    if (N != tl.N || P != tl.P) {
      ++other_point, others.insert("N = " + std::to_string(N) + ", P = " + std::to_string(P));
      continue;
    }
    Lanes& l = by[{!causal, !zz}];
    l.causal = causal, l.zigzag = zz;
    l.spans.push_back(s);
    l.end = std::max(l.end, s.t1);
  }
  if (tl.P == 0) throw Error(path + ": no rows with mode concurrent" + (t.has("comm_priority") ? " and comm_priority " + priority : "") +
                             " (nothing to draw)");
  if (other_priority)
    tl.notes.push_back(path + ": " + std::to_string(other_priority) + " concurrent rows with the receive streams at another priority than " +
                       priority + " left out (--priority picks)");
  if (other_point)
    tl.notes.push_back(path + ": " + std::to_string(other_point) + " concurrent rows of another point (" + join(others) +
         ") left out of ring_timeline.png: it draws the first, N = " + std::to_string(tl.N) + ", P = " + std::to_string(tl.P));
  for (auto& [key, l] : by) tl.panels.push_back(std::move(l));
  return tl;
}

// ------------------------------------------------------------------------------------------------
// ring_timeline.png

const char* const kComputeEven = "#3b6fb6";
const char* const kComputeOdd = "#86aee0";
const char* const kTransfer = "#e0792b";
const double kMinPx = 3;  // the narrowest transfer bar drawn, in pixels

using Box6 = std::tuple<double, double, double, double, double, double>;  // boxxyerror: x y xlo xhi ylo yhi

std::string quoted(const std::string& s) {  // for a gnuplot "..." string
  std::string q;
  for (char ch : s) q += ch == '"' ? std::string("\\\"") : std::string(1, ch);
  return q;
}

void draw_timeline(const Timeline& tl, const Ring& ring, const std::string& png) {
  const int P = tl.P;
  const auto at = std::make_pair(tl.N, P);
  const std::string device = ring.devices_at.count(at) ? join(ring.devices_at.at(at), " + ") : "a GPU (not in " + ring.file + ")";
  const std::string commit = ring.commits_at.count(at) ? join(ring.commits_at.at(at)) : "not recorded";
  double xmax = 0;
  for (const Lanes& l : tl.panels) xmax = std::max(xmax, l.end);
  if (!(xmax > 0)) xmax = 1;
  const double xhi = xmax * 1.03;

  const int width = 1300, top = 130, lane = P <= 4 ? 44 : 34, gap = 85, bottom = 120;
  const int panel_h = lane * P;
  const int n = int(tl.panels.size());
  const int height = top + n * panel_h + (n - 1) * gap + bottom;
  const double left = 90, right = 1270;
  auto sx = [&](double p) { return p / width; };
  auto sy = [&](double p) { return 1 - p / height; };

  Gnuplot gp("gnuplot");
  begin_png(gp, png, width, height);
  bool any_causal = false, any_plain = false;
  for (const Lanes& l : tl.panels) any_causal = any_causal || l.causal, any_plain = any_plain || !l.causal;
  const std::string masks = any_causal && any_plain ? "causal and without the mask" : any_causal ? "causal" : "no mask";
  gp << "set multiplot title \""
     << quoted("The ring on one GPU, " + device + ": N = " + std::to_string(tl.N) + " (" + n_short(tl.N) + "), P = " +
               std::to_string(P) + " ranks as concurrent streams, " + masks)
     << "\" font ',13' noenhanced\n";
  const std::string caption =
      "Concurrent mode: the P ranks are P pairs of streams (compute, copy) on one GPU and share its SMs, so spans of "
      "different ranks overlap and each takes longer than on a GPU of its own\\n(ring_bench's serial mode times each "
      "rank's step alone; ring_scaling.png projects from that). Times from the start of the ring's launch (its warm-up "
      "run). A transfer of step t copies the K/V shard\\nrank r - 1 held at step t into rank r's buffer for step t + 1. "
      "A transfer shorter than " + fmt(kMinPx, 2) + " pixels is drawn " + fmt(kMinPx, 2) + " pixels wide, centred on its span. " +
      "From " + tl.file + " (concurrent rows), commit " + commit + ".";
  gp << "set label 99 \"" << quoted(caption) << "\" at screen 0.01," << 52.0 / height << " left font ',9' noenhanced\n";
  gp << "set xrange [0:" << xhi << "]\nset yrange [" << P - 0.5 << ":" << -0.5 << "]\nset grid xtics lc rgb '#dddddd'\n"
     << "set ytics (";
  for (int r = 0; r < P; ++r) gp << (r ? ", " : "") << "'rank " << r << "' " << r;
  gp << ") nomirror\nset tics front\n";
  gp << "set key at screen " << sx(left) << "," << sy(top - 52) << " left bottom Left reverse horizontal maxrows 1 width 3"
     << " samplen 2.5 font ',10'\n";
  const double px_per_ms = (right - left) / xhi;
  for (int i = 0; i < n; ++i) {
    const Lanes& l = tl.panels[size_t(i)];
    const double y0 = top + double(i) * (panel_h + gap);
    gp << "set lmargin at screen " << sx(left) << "\nset rmargin at screen " << sx(right) << "\nset tmargin at screen "
       << sy(y0) << "\nset bmargin at screen " << sy(y0 + panel_h) << "\n";
    gp << "set title \""
       << quoted(std::string(1, char('a' + i)) + ") " + (l.causal ? "causal, " : "no mask, ") + layout_name(l.zigzag) +
                 " shards: the last span ends at " + fmt(l.end) + " ms")
       << "\" font ',11' noenhanced\n";
    gp << (i == n - 1 ? "set xlabel 'time from the start of the ring launch (ms)'\n" : "unset xlabel\n");
    // Compute in the upper part of each lane, transfers in a thinner bar below it.
    std::vector<Box6> even, odd, xfer;
    int tag = 1000;  // the step labels (99: the caption)
    for (const Span& s : l.spans) {
      const double mid = (s.t0 + s.t1) / 2;
      if (s.transfer) {  // at least kMinPx wide, so that a copy of microseconds still shows
        const double half = std::max(s.t1 - s.t0, kMinPx / px_per_ms) / 2;
        xfer.emplace_back(mid, s.rank + 0.3, mid - half, mid + half, s.rank + 0.2, s.rank + 0.4);
        continue;
      }
      (s.step % 2 ? odd : even).emplace_back(mid, s.rank - 0.1, s.t0, s.t1, s.rank - 0.4, s.rank + 0.14);
      if ((s.t1 - s.t0) * px_per_ms >= 7.0 * double(std::to_string(s.step).size()) + 4)
        gp << "set label " << tag++ << " '" << s.step << "' at " << mid << "," << s.rank - 0.13
           << " center font ',8' tc rgb '" << (s.step % 2 ? "#000000" : "#ffffff") << "' front\n";
    }
    struct Part {
      const std::vector<Box6>* boxes;
      const char* color;
      std::string title;
    };
    const std::vector<Part> parts = {{&even, kComputeEven, "compute of step t (t on the bar), even t"},
                                     {&odd, kComputeOdd, "compute of step t, odd t"},
                                     {&xfer, kTransfer, "K/V transfer for step t + 1"}};
    if (i > 0) gp << "unset key\n";
    size_t drawn = 0;
    for (const Part& p : parts)
      if (!p.boxes->empty())
        gp << (drawn++ ? ", " : "plot ") << "'-' using 1:2:3:4:5:6 with boxxyerror fs solid 1.0 noborder"
           << " fc rgb '" << p.color << "' title '" << label(p.title) << "'";
    if (!drawn) gp << "plot NaN notitle";
    gp << "\n";
    for (const Part& p : parts)
      if (!p.boxes->empty()) gp.send1d(*p.boxes);
    for (int k = 1000; k < tag; ++k) gp << "unset label " << k << "\n";
    gp << "unset label 99\n";  // the caption once
  }
  gp << "unset multiplot\nset output\n";
}

// ------------------------------------------------------------------------------------------------
// ring_scaling.png

void draw_scaling(const Ring& ring, const std::string& png) {
  std::set<int> ps;
  int64_t n_lo = 0, n_hi = 0;
  double eff_max = 0, speed_max = 0;
  for (const Point& p : ring.points) {
    ps.insert(p.P);
    n_lo = n_lo ? std::min(n_lo, p.N) : p.N, n_hi = std::max(n_hi, p.N);
    eff_max = std::max(eff_max, p.proj_eff), speed_max = std::max(speed_max, p.t1 / p.ring);
  }
  auto slot_of = [&](int P) { return size_t(std::distance(ps.begin(), ps.find(P))); };

  const int width = 1400, top = 80, row_h = 320, gap_y = 100, col_w = 440, gap_x = 90, bottom = 150;
  const int height = top + 2 * row_h + gap_y + bottom;
  const double left0 = 90;
  Frame base;
  base.width = width, base.height = height, base.logy = false;
  base.xlo = double(n_lo) * 25 / 32, base.xhi = double(n_hi) * 41 / 32;
  if (n_lo == n_hi) base.xlo = double(n_lo) / 2, base.xhi = double(n_lo) * 2;

  Gnuplot gp("gnuplot");
  begin_png(gp, png, width, height);
  gp << "set multiplot title \""
     << quoted("Step 18, ring attention, from one GPU (" + join(ring.devices, " + ") + ", " + ring.shape +
               "): proj_eff projected to P GPUs, t1 / ring_ms measured")
     << "\" font ',13' noenhanced\n";
  std::string dates = ring.dates.size() == 1 ? *ring.dates.begin() : *ring.dates.begin() + " to " + *ring.dates.rbegin();
  const std::string caption =
      "proj_eff = t1 / (P × proj_ms): t1 is step 12 over the whole sequence on this GPU; proj_ms the ring's time on P GPUs "
      "projected from one GPU (each rank's step timed alone, a transfer\\nat link_ms, the K/V shard's bytes over one "
      "link): an estimate, not a measurement on P GPUs. t1 / ring_ms: the P ranks run as streams on this one GPU, "
      "against step 12 on the whole sequence\\n(1: splitting the sequence costs nothing). Only rows measured and "
      "PASS in column check. Measured on " + join(ring.devices, " + ") + ", " + dates + "; " + ring.file + ", commit " +
      join(ring.commits) + ".";
  gp << "set label 99 \"" << quoted(caption) << "\" at screen 0.01," << 60.0 / height << " left font ',9' noenhanced\n";
  n_axis(gp, n_lo, n_hi);
  gp << "set xtics (";
  for (int64_t n = n_lo; n <= n_hi; n *= 2) gp << (n == n_lo ? "" : ", ") << "'" << n_short(n) << "' " << n;
  gp << ")\nset grid xtics ytics lc rgb '#dddddd'\nset mytics 2\n";

  // The key (right of the panels): P by colour and point, the layout by dash, the reference lines.
  std::vector<Curve> key;
  for (int P : ps) {
    const Style& s = style(slot_of(P));
    key.push_back({"P = " + std::to_string(P) + " ranks", "linespoints lw 2 pt " + std::to_string(s.point) +
                                                              " ps 1.2 lc rgb '" + s.color + "'", {}});
  }
  key.push_back({"zig-zag shards (solid)", "lines lw 2 dt 1 lc rgb '#000000'", {}});
  key.push_back({"contiguous shards (dashed)", "lines lw 2 dt (12,6) lc rgb '#000000'", {}});
  key.push_back({"the target, 0.9 (panels a, b)", "lines lw 1.5 dt (4,4) lc rgb '#c00000'", {}});
  key.push_back({"1: splitting costs nothing (c, d)", "lines lw 1.5 dt (4,4) lc rgb '#555555'", {}});

  struct Measure {
    std::string title, ylabel;
    double ymax, ref;
    const char* ref_color;
  };
  const Measure measures[2] = {
      {"proj_eff, projected to P GPUs from one GPU", "proj_eff = t1 / (P × proj_ms)", std::max(1.05, eff_max * 1.08),
       kTarget, "#c00000"},
      {"t1 / ring_ms: the P-streams ring on one GPU", "t1 / ring_ms", std::max(1.15, speed_max * 1.08), 1.0, "#555555"}};
  char panel = 'a';
  for (int row = 0; row < 2; ++row)
    for (int causal = 0; causal < 2; ++causal) {
      const Measure& m = measures[row];
      Frame f = base;
      f.left = left0 + causal * (col_w + gap_x), f.right = f.left + col_w;
      f.top = top + row * (row_h + gap_y), f.bottom = f.top + row_h;
      f.ylo = 0, f.yhi = m.ymax;
      f.apply(gp);
      gp << "set title \"" << quoted(std::string(1, panel++) + ") " + m.title + (causal ? ", causal" : ", no mask"))
         << "\" font ',11' noenhanced\nset ylabel \"" << quoted(m.ylabel) << "\" noenhanced\n";
      std::vector<Curve> curves;
      for (int P : ps)
        for (bool zz : {true, false}) {
          Series s;
          for (const Point& p : ring.points)
            if (p.P == P && p.zigzag == zz && p.causal == (causal == 1))
              s.emplace_back(double(p.N), row == 0 ? p.proj_eff : p.t1 / p.ring);
          std::sort(s.begin(), s.end());
          const Style& st = style(slot_of(P));
          curves.push_back({"", "linespoints lw 2 dt " + std::string(zz ? "1" : "(12,6)") + " pt " +
                                    std::to_string(st.point) + " ps 1.2 lc rgb '" + st.color + "'",
                            s});
        }
      const bool empty = std::all_of(curves.begin(), curves.end(), [](const Curve& c) { return c.data.empty(); });
      if (empty)
        gp << "set label 98 'no measured rows that passed' at graph 0.5,0.5 center font ',11' tc rgb '#888888'\n";
      curves.push_back({"", std::string("lines lw 1.5 dt (4,4) lc rgb '") + m.ref_color + "'",
                        {{f.xlo, m.ref}, {f.xhi, m.ref}}});
      if (row == 0 && causal == 0) {
        gp << "set key at screen " << f.sx(left0 + 2 * col_w + gap_x + 40) << "," << f.sy(top)
           << " left top Left reverse samplen 4 spacing 1.3 font ',10'\n";
        plot(gp, curves, key);
      } else {
        gp << "unset key\n";
        plot(gp, curves);
      }
      gp << "unset label 98\nunset label 99\n";  // the caption once
    }
  gp << "unset multiplot\nset output\n";
}

// plots/data/ring_TAG.csv: TAG given, or the only one there.
std::string default_ring(const std::string& dir, const std::string& gpu) {
  if (!gpu.empty()) return (fs::path(dir) / ("ring_" + gpu + ".csv")).string();
  if (!fs::is_directory(dir)) throw Error(dir + ": no such directory (give the ring CSV with --data FILE)");
  static const std::regex ring_re(R"(ring_([a-z0-9]+)\.csv)");  // not ring_timeline_TAG.csv
  std::set<std::string> tags;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, ring_re)) tags.insert(m[1]);
  }
  if (tags.empty())
    throw Error(dir + ": no ring_<gpu>.csv file (steps/18_ring/ring_bench writes it on the GPU machine; or give --data FILE)");
  if (tags.size() > 1) throw Error(dir + ": ring files of several GPUs (" + join(tags) + "); choose one with --gpu");
  return (fs::path(dir) / ("ring_" + *tags.begin() + ".csv")).string();
}

// The timeline beside a ring CSV: ring_timeline_X.csv for ring_X.csv.
std::string timeline_beside(const std::string& data) {
  const fs::path p(data);
  const std::string name = p.filename().string();
  static const std::regex ring_re(R"(ring_(.+)\.csv)");
  std::smatch m;
  if (!std::regex_match(name, m, ring_re))
    throw Error(data + ": not named ring_<tag>.csv, so its timeline file is not known; give it with --timeline FILE");
  return (p.parent_path() / ("ring_timeline_" + m[1].str() + ".csv")).string();
}

}  // namespace

int main(int argc, char** argv) {
  std::string data, timeline, gpu, out = FA_PLOTS_DIR, priority = "high";
  const std::string usage = "usage: plot_ring [--data FILE] [--timeline FILE] [--priority high|normal] [--gpu TAG] [--out DIR]\n";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--data" && has_value) data = argv[++i];
    else if (a == "--timeline" && has_value) timeline = argv[++i];
    else if (a == "--gpu" && has_value) gpu = argv[++i];
    else if (a == "--out" && has_value) out = argv[++i];
    else if (a == "--priority" && has_value) priority = argv[++i];
    else {
      std::cerr << usage;
      return a == "--help" ? 0 : 2;
    }
  }
  if (priority != "high" && priority != "normal") {
    std::cerr << kProgram << ": error: --priority must be high or normal\n";
    return 2;
  }
  if (!data.empty() && !gpu.empty()) {
    std::cerr << kProgram << ": error: --gpu picks plots/data/ring_<gpu>.csv; it does not go with --data FILE\n";
    return 2;
  }
  if (report_errors(kProgram, [&] {
    if (data.empty()) data = default_ring(std::string(FA_PLOTS_DIR) + "/data", gpu);
    if (timeline.empty()) timeline = timeline_beside(data);
    const Ring ring = load_ring(data);
    const Timeline tl = load_timeline(timeline, priority);
    for (const auto* notes : {&ring.notes, &tl.notes})
      for (const std::string& s : *notes) note(s);
    fs::create_directories(out);
    draw_timeline(tl, ring, out + "/ring_timeline.png");
    draw_scaling(ring, out + "/ring_scaling.png");
  }))
    return 1;
  std::cout << "wrote " << out << "/ring_timeline.png, ring_scaling.png\n";
  return 0;
}
