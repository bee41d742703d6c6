// The per-resource model against the GPU: each run's measured time over the time the model
// predicts for it, one point per run and pass.
//   make plot_model && ./plot_model [--data DIR] [--out DIR] [--gpu TAG]
// Reads, from DIR (default: the repository's plots/data), the committed CSVs of one GPU (TAG as in
// model_TAG.csv; the only one there unless --gpu says which):
//   model_TAG.csv        the `model` tool's rows (one per run and pass: measured_ms, model_ms)  -> the points
//   tour_TAG.csv         the tour the model was applied to   -> the caption's device (and commit, where recorded)
//   model_sweep_TAG.csv  the sweep it was applied to         -> the caption's device, commits and dates
// and writes DIR/model.png (default DIR: the repository's plots/). Log–log: x the model's time,
// y the measured one, the line y = x and the goal band (measured within 1.5x of the model) drawn;
// points coloured by step group, forward and backward in different shapes, the tour's points filled
// and the sweep's hollow, each labelled with its step where the label finds room.
// A missing file or column is an error naming the file (exit 1), before anything is drawn.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "plotting.hpp"

namespace fs = std::filesystem;
using namespace fa::plot;

namespace {

const char* const kProgram = "plot_model";
const double kBand = 1.5;  // the goal: measured within this factor of the model, either way

std::string join(const std::set<std::string>& s, const std::string& sep = ", ") {
  std::string out;
  for (const auto& x : s) out += (out.empty() ? "" : sep) + x;
  return out;
}

const std::vector<std::string> kModelCols = {"file", "step", "variant", "pass_of", "measured_ms", "model_ms", "ratio"};

Table read_table(const fs::path& p, const std::vector<std::string>& cols) { return fa::plot::read_table(p.string(), cols); }

// The step groups the points are coloured by (first and last step of each, a name from the steps).
struct Group {
  int first, last;
  const char* name;
  const char* color;
};
const std::vector<Group> kGroups = {
    {1, 2, "01–02 naive, online softmax", "#1f77b4"},
    {3, 8, "03–08 WMMA tiles (fa1 … backward)", "#ff7f0e"},
    {9, 11, "09–11 mma.sync, ldmatrix, cp.async", "#2ca02c"},
    {12, 13, "12–13 warp tiling, mma backward", "#d62728"},
    {14, 16, "14–16 wgmma, TMA, ping-pong", "#9467bd"},
    {17, 17, "17 decode", "#8c564b"},
};
const Group kOther{0, 0, "other steps", "#7f7f7f"};

const Group& group_of(const std::string& step) {
  int n = -1;
  try {
    n = std::stoi(step);
  } catch (const std::exception&) {
  }
  for (const Group& g : kGroups)
    if (n >= g.first && n <= g.last) return g;
  return kOther;
}

struct Point {
  std::string step;
  bool bwd, tour;
  double model, measured;
};

struct Data {
  std::string gpu_tag;
  std::vector<Point> points;
  std::string model_file;
  std::set<std::string> devices, commits, dates, no_commit;  // no_commit: source files without a commit column
};

Data load(const std::string& dir, std::string gpu_tag) {
  if (!fs::is_directory(dir)) throw Error(dir + ": no such directory (give the CSVs' folder with --data DIR)");
  if (gpu_tag.empty()) {
    static const std::regex model_re(R"(model_([a-z0-9]+)\.csv)");  // not model_dev_TAG.csv, model_sweep_TAG.csv
    std::set<std::string> tags;
    for (const auto& e : fs::directory_iterator(dir)) {
      std::smatch m;
      const std::string name = e.path().filename().string();
      if (std::regex_match(name, m, model_re)) tags.insert(m[1]);
    }
    if (tags.empty()) throw Error(dir + ": no model_<gpu>.csv file (written by the `model` tool)");
    if (tags.size() > 1) throw Error(dir + ": model files of several GPUs (" + join(tags) + "); choose one with --gpu");
    gpu_tag = *tags.begin();
  }
  Data data;
  data.gpu_tag = gpu_tag;
  const fs::path model_path = fs::path(dir) / ("model_" + gpu_tag + ".csv");
  const Table m = read_table(model_path, kModelCols);
  data.model_file = model_path.filename().string();
  for (size_t r = 0; r < m.size(); ++r) {
    const std::string pass = m.str(r, "pass_of");
    if (pass != "fwd" && pass != "bwd")
      throw Error(m.path() + ": row " + std::to_string(r + 1) + ": pass_of is '" + pass + "', not fwd or bwd");
    const double model = m.num(r, "model_ms"), measured = m.num(r, "measured_ms");
    if (!(model > 0) || !(measured > 0))
      throw Error(m.path() + ": row " + std::to_string(r + 1) + ": model_ms and measured_ms must be positive");
    data.points.push_back({m.str(r, "step"), pass == "bwd", m.str(r, "file").find("tour") != std::string::npos, model, measured});
  }
  // Where the measured rows came from: the device, and the commit and date where the file has them.
  for (const std::string kind : {"tour", "sweep"}) {
    const Table t = read_table(fs::path(dir) / ((kind == "tour" ? "tour_" : "model_sweep_") + gpu_tag + ".csv"), {"device"});
    const std::string name = fs::path(t.path()).filename().string();
    for (size_t r = 0; r < t.size(); ++r) {
      data.devices.insert(t.str(r, "device"));
      if (t.has("commit")) data.commits.insert(t.str(r, "commit"));
      if (t.has("date")) data.dates.insert(t.str(r, "date"));
    }
    if (!t.has("commit")) data.no_commit.insert(name);
  }
  return data;
}

// A label beside a point, in pixels from the canvas's top left: its box.
struct Box {
  double x0, y0, x1, y1;
  bool overlaps(const Box& o) const { return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1; }
};

void draw(const Data& data, const std::string& png) {
  double lo = 0, hi = 0;
  for (const Point& p : data.points)
    for (double v : {p.model, p.measured}) lo = lo > 0 ? std::min(lo, v) : v, hi = std::max(hi, v);
  // One range for both axes and a square frame, so that y = x runs at 45 degrees.
  Frame f;
  f.width = 1280, f.height = 900;
  f.left = 90, f.top = 60, f.right = 90 + 740, f.bottom = 60 + 740;
  f.xlo = f.ylo = lo / 1.6;
  f.xhi = f.yhi = hi * 1.6;

  // The points: one curve per group, pass and file (tour filled, sweep hollow).
  std::map<std::tuple<size_t, bool, bool>, Series> series;  // group index, bwd, tour
  auto gindex = [](const Group& g) {
    for (size_t i = 0; i < kGroups.size(); ++i)
      if (&kGroups[i] == &g) return i;
    return kGroups.size();
  };
  auto point_type = [](bool bwd, bool tour) { return bwd ? (tour ? 9 : 8) : (tour ? 7 : 6); };
  size_t inside = 0;
  for (const Point& p : data.points) {
    series[{gindex(group_of(p.step)), p.bwd, p.tour}].emplace_back(p.model, p.measured);
    const double ratio = p.measured / p.model;
    inside += ratio <= kBand && ratio >= 1 / kBand;
  }
  std::vector<Curve> curves;
  std::set<size_t> groups_used;
  for (const auto& [key, s] : series) {
    const auto [gi, bwd, tour] = key;
    const Group& g = gi < kGroups.size() ? kGroups[gi] : kOther;
    groups_used.insert(gi);
    curves.push_back({"", "points pt " + std::to_string(point_type(bwd, tour)) + " ps " + (tour ? "1.6" : "1.5") +
                              " lw 1.5 lc rgb '" + g.color + "'",
                      s});
  }
  // The key: the groups (colour), then the shapes (black).
  std::vector<Curve> key;
  for (size_t gi : groups_used) {
    const Group& g = gi < kGroups.size() ? kGroups[gi] : kOther;
    key.push_back({g.name, std::string("points pt 5 ps 1.6 lc rgb '") + g.color + "'", {}});
  }
  bool any_bwd = false, any_sweep = false;
  for (const Point& p : data.points) any_bwd = any_bwd || p.bwd, any_sweep = any_sweep || !p.tour;
  key.push_back({"forward, the tour (filled)", "points pt 7 ps 1.6 lc rgb '#000000'", {}});
  if (any_bwd) key.push_back({"backward, the tour (filled)", "points pt 9 ps 1.6 lc rgb '#000000'", {}});
  if (any_sweep) {
    key.push_back({"forward, the N = 4096 sweep (hollow)", "points pt 6 ps 1.5 lw 1.5 lc rgb '#000000'", {}});
    if (any_bwd) key.push_back({"backward, the N = 4096 sweep (hollow)", "points pt 8 ps 1.5 lw 1.5 lc rgb '#000000'", {}});
  }

  Gnuplot gp("gnuplot");
  begin_png(gp, png, f.width, f.height);
  gp << "set title '" << label("Per-resource model against the " + join(data.devices, " + ")) << "' font ',14'\n"
     << "set logscale xy 10\nset mxtics 10\nset mytics 10\n"
     << "set xlabel \"the model's time (ms)\"\nset ylabel 'measured time (ms)'\n";
  // Tics at 1, 2, 5 of each decade inside the range.
  std::string tics;
  for (double dec = std::pow(10, std::floor(std::log10(f.xlo))); dec <= f.xhi; dec *= 10)
    for (double k : {1.0, 2.0, 5.0})
      if (k * dec >= f.xlo && k * dec <= f.xhi) {
        std::ostringstream o;
        o << k * dec;
        tics += (tics.empty() ? "" : ", ") + ("'" + o.str() + "' " + o.str());
      }
  gp << "set xtics (" << tics << ")\nset ytics (" << tics << ")\n"
     << "set grid xtics ytics back lt 1 lw 1 lc rgb '#e0e0e0'\n";
  f.apply(gp);
  // The lines' labels, near the frame's top right, along each line (45 degrees on the square frame).
  struct Ref {
    double factor;
    std::string text, style;
  };
  std::ostringstream band;
  band << kBand;
  const std::vector<Ref> refs = {{1, "measured = model", "lines lw 2 lc rgb '#000000'"},
                                 {kBand, "measured = " + band.str() + " × model", "lines lw 1.5 dt (10,6) lc rgb '#555555'"},
                                 {1 / kBand, "measured = model / " + band.str(), "lines lw 1.5 dt (10,6) lc rgb '#555555'"}};
  std::vector<Box> taken;  // label boxes placed so far (pixels), and the points' own marks
  int tag = 1;
  for (const Ref& r : refs) {
    // Along the line at 78% of the way up the frame (or across it, for the line below y = x), the
    // text starting there, 6 pixels off the line on the side away from y = x.
    const double x = r.factor >= 1 ? f.xhi * 0.20 / r.factor : f.xhi * 0.20;
    const double y = x * r.factor;
    const double side = r.factor > 1 ? 1 : r.factor < 1 ? -1 : 1;
    const double px = f.px(x) - side * 6, py = f.py(y) - side * 6;
    gp << "set label " << tag++ << " \"" << r.text << "\" at screen " << f.sx(px) << "," << f.sy(py)
       << " left rotate by 45 font ',10' tc rgb '#333333' noenhanced front\n";
    // The text's room, as small boxes along its diagonal, so that no step label lands on it.
    const double len = 7.0 * double(r.text.size());
    for (double t = 0; t <= len; t += 6) {
      const double cx = px + t * std::sqrt(0.5) - 4, cy = py - t * std::sqrt(0.5) - 4;
      taken.push_back({cx - 6, cy - 6, cx + 6, cy + 6});
    }
  }
  for (const Point& p : data.points) {
    const double x = f.px(p.model), y = f.py(p.measured);
    taken.push_back({x - 6, y - 6, x + 6, y + 6});
  }
  // Each point's step, beside it where it overlaps no other label or point: right, left, above,
  // below; a point whose label finds no room is left unlabelled (its neighbours of the same step
  // usually name it). The tour's points first: they are the fewer.
  std::vector<size_t> order(data.points.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return data.points[a].tour > data.points[b].tour; });
  size_t unlabelled = 0;
  for (size_t i : order) {
    const Point& p = data.points[i];
    const double x = f.px(p.model), y = f.py(p.measured);
    const double w = kLabelCharPx * double(p.step.size()) - 1, h = kLabelLinePx - 2;
    const Box tries[] = {{x + 8, y - h / 2, x + 8 + w, y + h / 2},
                         {x - 8 - w, y - h / 2, x - 8, y + h / 2},
                         {x - w / 2, y - 8 - h, x + w / 2, y - 8},
                         {x - w / 2, y + 8, x + w / 2, y + 8 + h},
                         {x + 6, y - 6 - h, x + 6 + w, y - 6},
                         {x + 6, y + 6, x + 6 + w, y + 6 + h},
                         {x - 6 - w, y - 6 - h, x - 6, y - 6},
                         {x - 6 - w, y + 6, x - 6, y + 6 + h}};
    bool placed = false;
    for (const Box& b : tries) {
      const bool clear = std::none_of(taken.begin(), taken.end(), [&](const Box& o) {
        // A point's own mark does not block its label (the label sits beside it already).
        return b.overlaps(o) && !(std::abs((o.x0 + o.x1) / 2 - x) < 0.01 && std::abs((o.y0 + o.y1) / 2 - y) < 0.01);
      });
      if (!clear || b.x0 < f.left || b.x1 > f.right || b.y0 < f.top || b.y1 > f.bottom) continue;
      gp << "set label " << tag++ << " \"" << p.step << "\" at screen " << f.sx(b.x0) << "," << f.sy((b.y0 + b.y1) / 2)
         << " left font ',9' tc rgb '" << group_of(p.step).color << "' noenhanced front\n";
      taken.push_back(b);
      placed = true;
      break;
    }
    unlabelled += !placed;
  }
  if (unlabelled)
    std::cerr << kProgram << ": note: " << unlabelled << " of " << data.points.size()
              << " points have no step label (no room beside them)\n";

  // The caption: where the rows came from, and how many points are inside the band.
  std::string c = "Points: " + data.model_file + " (" + std::to_string(data.points.size()) + " runs and passes; " +
                  std::to_string(inside) + " within " + band.str() + "× of the model). Measured on " +
                  join(data.devices, " + ");
  if (!data.dates.empty())
    c += ", " + (data.dates.size() == 1 ? *data.dates.begin() : *data.dates.begin() + " to " + *data.dates.rbegin());
  c += "\\ncommit " + (data.commits.empty() ? std::string("not recorded") : join(data.commits)) +
       (data.no_commit.empty() ? "" : " (" + join(data.no_commit) + " records none)") + "; files tour_" +
       data.gpu_tag + ".csv, model_sweep_" + data.gpu_tag + ".csv";
  gp << "set label " << tag++ << " \"" << c << "\" at screen 0.01,0.035 left font ',9' noenhanced\n";

  gp << "set key at screen " << f.sx(f.right + 30) << "," << f.sy(f.top) << " left top Left reverse samplen 2 spacing 1.2 "
     << "font ',10' width 2 box lc rgb '#bbbbbb'\n";
  gp << "set samples 400\nplot ";
  for (const Curve& k : key) gp << "NaN with " << k.style << " title '" << label(k.title) << "', ";
  // The lines' key entries: y = x, and one for the two lines of the band.
  gp << refs[0].factor << "*x with " << refs[0].style << " title 'measured = model', " << refs[1].factor << "*x with "
     << refs[1].style << " title 'the goal band: within " << band.str() << "× of the model', " << refs[2].factor
     << "*x with " << refs[2].style << " notitle, ";
  for (size_t i = 0; i < curves.size(); ++i) gp << (i ? ", " : "") << "'-' with " << curves[i].style << " notitle";
  gp << "\n";
  for (const Curve& cv : curves) gp.send1d(cv.data);
  gp << "set output\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::string data_dir = std::string(FA_PLOTS_DIR) + "/data", out = FA_PLOTS_DIR, gpu;
  const std::string usage = "usage: plot_model [--data DIR] [--out DIR] [--gpu TAG]\n";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--data" && has_value) data_dir = argv[++i];
    else if (a == "--out" && has_value) out = argv[++i];
    else if (a == "--gpu" && has_value) gpu = argv[++i];
    else {
      std::cerr << usage;
      return a == "--help" ? 0 : 2;
    }
  }
  if (report_errors(kProgram, [&] {
    const Data data = load(data_dir, gpu);
    fs::create_directories(out);
    draw(data, out + "/model.png");
  }))
    return 1;
  std::cout << "wrote " << out << "/model.png\n";
  return 0;
}
