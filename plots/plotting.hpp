// What plot_traffic and plot_measured share: a small CSV reader that names the file in every error,
// the gnuplot set-up (PNG terminal, the log-2 N axis, a plot command from a list of curves), and
// the rules every plot of one curve per step follows: each curve its own colour, dash and point
// (style slots), curves that coincide drawn once, and a label at each curve's right end.
#pragma once

#include <gnuplot-iostream.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace fa::plot {

using Series = std::vector<std::pair<double, double>>;

// Any problem with the input: the message names the file (and the line or column where it can).
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A plot program's work, run so that any failure — an Error of the data, or the filesystem's or an
// allocation's — ends as one line "PROGRAM: error: ..." and exit status 1, never an abort.
template <class Work>
int report_errors(const char* program, Work&& work) {
  try {
    work();
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

// One CSV file: a header line, then rows. Fields may be double-quoted ("NVIDIA H200"); a quote
// inside a quoted field is doubled. Every accessor that fails says which file, line and column.
class Table {
 public:
  static Table read(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw Error(path + ": cannot open (missing file?)");
    Table t;
    t.path_ = path;
    std::string line;
    if (!std::getline(in, line)) throw Error(path + ": empty file (no header line)");
    t.header_ = split(line);
    for (size_t i = 0; i < t.header_.size(); ++i) t.index_[t.header_[i]] = i;
    int line_no = 1;
    while (std::getline(in, line)) {
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      std::vector<std::string> f = split(line);
      if (f.size() != t.header_.size())
        throw Error(path + ":" + std::to_string(line_no) + ": " + std::to_string(f.size()) + " fields, the header has " +
                    std::to_string(t.header_.size()));
      t.rows_.push_back(std::move(f));
      t.line_.push_back(line_no);
    }
    return t;
  }

  const std::string& path() const { return path_; }
  size_t size() const { return rows_.size(); }
  bool has(const std::string& col) const { return index_.count(col) != 0; }

  // Fail now, naming every column that is missing, rather than at the first row that needs one.
  void require(const std::vector<std::string>& cols) const {
    std::string missing;
    for (const auto& c : cols)
      if (!has(c)) missing += (missing.empty() ? "" : ", ") + c;
    if (!missing.empty()) throw Error(path_ + ": missing column(s): " + missing);
  }

  const std::string& str(size_t row, const std::string& col) const { return rows_.at(row)[column(col)]; }

  double num(size_t row, const std::string& col) const {
    const std::string& s = str(row, col);
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (s.empty() || used != s.size())
      throw Error(path_ + ":" + std::to_string(line_[row]) + ": column " + col + ": '" + s + "' is not a number");
    return v;
  }

 private:
  size_t column(const std::string& col) const {
    auto it = index_.find(col);
    if (it == index_.end()) throw Error(path_ + ": no column '" + col + "'");
    return it->second;
  }

  static std::vector<std::string> split(const std::string& line) {
    std::vector<std::string> out(1);
    bool quoted = false;
    for (size_t i = 0; i < line.size(); ++i) {
      const char c = line[i];
      if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') out.back() += '"', ++i;
      else if (c == '"') quoted = !quoted;
      else if (c == ',' && !quoted) out.emplace_back();
      else if (c != '\r') out.back() += c;
    }
    return out;
  }

  std::string path_;
  std::vector<std::string> header_;
  std::map<std::string, size_t> index_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<int> line_;
};

// A label for gnuplot's enhanced text inside single quotes: '_' would start a subscript (shown as
// a space instead) and a single quote is doubled.
inline std::string label(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '_') out += ' ';
    else if (c == '\'') out += "''";
    else out += c;
  }
  return out;
}

// A data file that must exist, have these columns and at least one row; otherwise an Error that
// names the file and what is missing.
inline Table read_table(const std::string& path, const std::vector<std::string>& cols) {
  Table t = Table::read(path);
  t.require(cols);
  if (t.size() == 0) throw Error(path + ": no rows");
  return t;
}

// The PNG terminal every plot here uses; the pixel size is the caller's.
inline void begin_png(Gnuplot& gp, const std::string& png, int width = 1000, int height = 640) {
  gp << "set encoding utf8\nset terminal pngcairo size " << width << "," << height << " font ',11'\n"
     << "set output '" << png << "'\n";
}

// N on a log-2 axis, a tic at every power of two from lo to hi, a little room either side.
inline void n_axis(Gnuplot& gp, int64_t lo, int64_t hi) {
  gp << "set logscale x 2\nset xlabel 'N = Nk (sequence length)'\nset xtics (";
  for (int64_t n = lo; n <= hi; n *= 2) gp << (n == lo ? "" : ", ") << n;
  gp << ")\nset xrange [" << lo * 25 / 32 << ":" << hi * 41 / 32 << "]\n";
}

// One plotted curve: its key entry, a gnuplot style ("linespoints lw 2 pt 7", ...), its points.
struct Curve {
  std::string title;
  std::string style;
  Series data;
};

// `plot` with one inline data block per curve; curves without points are left out (gnuplot
// rejects an empty block), a curve with an empty title has no key entry. key_only: entries for the
// key alone (drawn as NaN), for a legend shared by several panels. Returns how many curves were drawn.
inline size_t plot(Gnuplot& gp, const std::vector<Curve>& curves, const std::vector<Curve>& key_only = {}) {
  size_t n = 0;
  for (const auto& c : key_only) gp << (n++ ? ", " : "plot ") << "NaN with " << c.style << " title '" << label(c.title) << "'";
  const size_t keys = n;
  for (const auto& c : curves)
    if (!c.data.empty()) gp << (n++ ? ", " : "plot ") << "'-' with " << c.style << " title '" << label(c.title) << "'";
  if (n == 0) return 0;
  gp << "\n";
  for (const auto& c : curves)
    if (!c.data.empty()) gp.send1d(c.data);
  return n - keys;
}

// ------------------------------------------------------------------------------------------------
// Curves of one per step: styles, coincidence, end labels.

// One look per curve: a colour, a dash pattern and a point type, all three different for every
// slot below kStyleSlots (32: room for twice the steps there are, their backward schedules and
// the references). A plot gives a curve the slot of what it shows, so that the same step looks the
// same in every plot of one program; slots past the table repeat it.
struct Style {
  const char* color;
  const char* dash;  // gnuplot's dt: 1 is solid, (a,b,...) dash and gap lengths
  int point;
};

inline const std::vector<Style>& style_table() {
  static const std::vector<Style> t = {
      {"#1f77b4", "1", 7},                  {"#ff7f0e", "(12,6)", 5},
      {"#2ca02c", "(3,4)", 9},              {"#d62728", "(14,4,3,4)", 11},
      {"#9467bd", "(24,6)", 13},            {"#8c564b", "(10,4,3,4,3,4)", 15},
      {"#e377c2", "(6,4)", 6},              {"#7f7f7f", "(2,8)", 4},
      {"#bcbd22", "(24,4,6,4)", 8},         {"#17becf", "(8,8)", 10},
      {"#000000", "(18,4,3,4,3,4,3,4)", 12}, {"#393b79", "(4,2)", 14},
      {"#637939", "(30,4)", 1},             {"#843c39", "(12,3,12,9)", 2},
      {"#7b4173", "(1,3)", 3},              {"#00a087", "(20,5,5,5,5,5)", 7},
      {"#6b6ecf", "(16,10)", 5},            {"#e7ba52", "(6,3,2,3)", 9},
      {"#ad494a", "(40,6)", 11},            {"#a55194", "(2,3,2,9)", 13},
      {"#8ca252", "(10,3,2,3,2,3,2,3)", 15}, {"#5254a3", "(5,10)", 6},
      {"#de9ed6", "(28,4,10,4)", 4},        {"#525252", "(14,4,2,4,14,12)", 8},
      {"#1b9e77", "(8,4,2,4)", 10},         {"#d95f02", "(3,6,12,6)", 12},
      {"#7570b3", "(36,8)", 14},            {"#e7298a", "(2,4,8,4)", 1},
      {"#66a61e", "(16,4,16,4,2,4)", 2},    {"#e6ab02", "(10,10,2,10)", 3},
      {"#a6761d", "(4,4,4,12)", 7},         {"#666666", "(22,3,3,3,3,3,3,3)", 5},
  };
  return t;
}
inline const size_t kStyleSlots = style_table().size();

inline const Style& style(size_t slot) { return style_table()[slot % style_table().size()]; }

// The gnuplot `with` clause of a slot: lines and points, or lines alone (references).
inline std::string with_style(const Style& s, bool points = true, double lw = 2) {
  std::ostringstream o;
  o << (points ? "linespoints" : "lines") << " lw " << lw << " dt " << s.dash;
  if (points) o << " pt " << s.point << " ps 1.1";
  o << " lc rgb '" << s.color << "'";
  return o.str();
}

// One curve of a plot of one curve per step (or schedule, or reference).
struct Line {
  std::string title;  // its key entry when it is drawn alone ("step 04: fa2 q outer")
  std::string tag;    // its label at the right end ("04", "08 bwd fused")
  std::string name;   // what a shared key entry says of it after the tags ("fa2 q outer")
  Series data;        // by x, ascending
  size_t slot = 0;    // its style
  bool points = true;
};

// Two curves coincide when they have points at the same x and their values agree within `rel`
// (relative) at every one of them.
inline bool coincide(const Series& a, const Series& b, double rel) {
  if (a.empty() || a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].first != b[i].first ||
        std::abs(a[i].second - b[i].second) > rel * std::max(std::abs(a[i].second), std::abs(b[i].second)))
      return false;
  return true;
}

// The curves that coincide, as groups of indices into `lines` in their order (every curve is in
// one group; a curve joins the first group whose first curve it coincides with). rel 0.005: 0.5%.
inline std::vector<std::vector<size_t>> coinciding(const std::vector<Line>& lines, double rel = 0.005) {
  std::vector<std::vector<size_t>> groups;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].data.empty()) continue;
    bool joined = false;
    for (auto& g : groups)
      if (coincide(lines[g.front()].data, lines[i].data, rel)) {
        g.push_back(i);
        joined = true;
        break;
      }
    if (!joined) groups.push_back({i});
  }
  return groups;
}

// Tags joined for one label: runs of three or more consecutive step numbers read as a range
// ("04", "05", "06", "07", "09", "10" -> "04–07, 09, 10"); other tags are listed as they are.
inline std::string joined_tags(const std::vector<std::string>& tags) {
  auto number = [](const std::string& t) {
    return !t.empty() && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }) ? std::stoi(t) : -1;
  };
  std::string out;
  for (size_t i = 0; i < tags.size();) {
    size_t j = i + 1;
    if (number(tags[i]) >= 0)
      while (j < tags.size() && number(tags[j]) == number(tags[j - 1]) + 1 && tags[j].size() == tags[i].size()) ++j;
    out += out.empty() ? "" : ", ";
    if (j - i >= 3) {
      out += tags[i] + "\u2013" + tags[j - 1];
    } else {
      for (size_t k = i; k < j; ++k) out += (k == i ? "" : ", ") + tags[k];
    }
    i = j;
  }
  return out;
}

// A label at a curve's right end: its text and colour, and the curve's last point (data coordinates).
struct EndLabel {
  std::string text, color;
  double x, y;
};

// What style_lines makes of a list of lines: the curves to plot (one per group of coinciding
// lines, in the style of its first line) and their end labels.
struct Styled {
  std::vector<Curve> curves;
  std::vector<EndLabel> labels;
};

// A shared key entry longer than max_title characters names only the tags: "steps 11–14 (one curve)".
inline Styled style_lines(const std::vector<Line>& lines, const std::vector<std::vector<size_t>>& groups,
                          size_t max_title = 100) {
  Styled out;
  for (const auto& g : groups) {
    const Line& first = lines[g.front()];
    if (first.data.empty()) continue;  // groups made from other lines (another panel's)
    std::vector<std::string> tags;
    std::string names;  // "fa2 q outer = warp split": one curve, several names (each once)
    std::vector<std::string> seen;
    bool steps = true;
    for (size_t i : g) {
      tags.push_back(lines[i].tag);
      const std::string& n = lines[i].name;
      if (!n.empty() && std::find(seen.begin(), seen.end(), n) == seen.end())
        names += (names.empty() ? "" : " = ") + n, seen.push_back(n);
      steps = steps && !lines[i].tag.empty() && lines[i].tag[0] >= '0' && lines[i].tag[0] <= '9';
    }
    const std::string tag = joined_tags(tags);
    std::string title =
        g.size() == 1 ? first.title : (steps ? "steps " : "") + tag + (names.empty() ? " (one curve)" : ": " + names);
    if (g.size() > 1 && title.size() > max_title) title = (steps ? "steps " : "") + tag + " (one curve)";
    const Style& s = style(first.slot);
    out.curves.push_back({title, with_style(s, first.points), first.data});
    out.labels.push_back({tag, s.color, first.data.back().first, first.data.back().second});
  }
  return out;
}

inline Styled style_lines(const std::vector<Line>& lines, size_t max_title = 100, double rel = 0.005) {
  return style_lines(lines, coinciding(lines, rel), max_title);
}

// The label font's metrics in pixels (pngcairo, font ',9'), to keep labels apart.
constexpr double kLabelCharPx = 7.0, kLabelLinePx = 13.0;

// A plot's frame fixed in pixels, so that labels can be placed by the pixel: the canvas, the
// frame's edges (pixels from the canvas's left and top), the ranges; x on a log axis, y on a log
// axis too unless told.
struct Frame {
  int width = 1200, height = 700;
  double left = 80, right = 900, top = 45, bottom = 600;
  double xlo = 1, xhi = 2, ylo = 1, yhi = 2;
  bool logy = true;

  double px(double x) const { return left + (std::log(x / xlo) / std::log(xhi / xlo)) * (right - left); }
  double py(double y) const {
    const double f = logy ? std::log(y / ylo) / std::log(yhi / ylo) : (y - ylo) / (yhi - ylo);
    return bottom - f * (bottom - top);
  }
  // The right edge such that `room` pixels after x = last end at pixel `limit` (the ranges set).
  void fit_right(double last, double limit, double room) {
    const double a = std::log(xhi / last) / std::log(xhi / xlo);  // the part of the frame after `last`
    right = std::min(limit, (limit - room - left * a) / (1 - a));
  }
  // Screen coordinates (0..1 from the bottom left) of a pixel.
  double sx(double p) const { return p / width; }
  double sy(double p) const { return 1 - p / height; }

  void apply(Gnuplot& gp) const {
    gp << "set lmargin at screen " << sx(left) << "\nset rmargin at screen " << sx(right) << "\nset tmargin at screen "
       << sy(top) << "\nset bmargin at screen " << sy(bottom) << "\nset xrange [" << xlo << ":" << xhi << "]\nset yrange ["
       << ylo << ":" << yhi << "]\n";
  }
};

// The y range of some curves, with room either side: on a log axis, `pad` times below and above.
inline std::pair<double, double> y_span(const std::vector<Curve>& curves, double pad = 1.5) {
  double lo = 0, hi = 0;
  for (const Curve& c : curves)
    for (const auto& [x, y] : c.data)
      if (y > 0) lo = lo > 0 ? std::min(lo, y) : y, hi = std::max(hi, y);
  if (lo <= 0) return {1, 10};
  return {lo / pad, hi * pad};
}

// Raises the top of the y range (a factor `step` at a time) until no curve passes through a box of
// w × h pixels at the frame's top left: room for a key there.
inline void clear_top_left(Frame& f, const std::vector<Curve>& curves, double w, double h, double step = 2) {
  auto hits = [&] {
    for (const Curve& c : curves)
      for (size_t i = 0; i + 1 < c.data.size(); ++i)
        for (int k = 0; k <= 16; ++k) {  // along the segment, in pixels
          const double t = k / 16.0;
          const double x = f.px(c.data[i].first) * (1 - t) + f.px(c.data[i + 1].first) * t;
          const double y = f.py(c.data[i].second) * (1 - t) + f.py(c.data[i + 1].second) * t;
          if (x < f.left + w && y < f.top + h) return true;
        }
    return false;
  };
  for (int i = 0; i < 40 && hits(); ++i) f.yhi *= step;
}

// The pixels of a key of these curves' titles, one entry a line (font ',9').
inline std::pair<double, double> key_size(const std::vector<Curve>& curves) {
  size_t chars = 0, n = 0;
  for (const Curve& c : curves)
    if (!c.data.empty()) chars = std::max(chars, c.title.size()), ++n;
  return {70 + 7.5 * double(chars), 14.5 * double(n) + 12};  // gnuplot sizes its box generously
}

// The width in pixels the end labels will take right of the rightmost point they follow.
inline double end_label_room(const std::vector<EndLabel>& labels) {
  size_t chars = 0;
  for (const auto& l : labels) chars = std::max(chars, l.text.size());
  return 18 + kLabelCharPx * double(chars);
}

// The labels at the curves' right ends, `gap` pixels right of each last point, in the curve's
// colour. Labels whose boxes would overlap are moved apart vertically (a cluster of them centred
// on where they belong), and a moved label gets a thin line from its curve's end. Tags from `tag0`
// on (the caller's labels are below it). Returns how many labels it set (for clear_end_labels).
inline int end_labels(Gnuplot& gp, const Frame& f, const std::vector<EndLabel>& labels, int tag0 = 100) {
  struct Box {
    size_t i;
    double x0, x1, want, at;
  };
  std::vector<Box> boxes;
  const double gap = 16;
  for (size_t i = 0; i < labels.size(); ++i) {
    const double x0 = f.px(labels[i].x) + gap;
    // Text width in characters: the UTF-8 continuation bytes take no room of their own.
    size_t chars = 0;
    for (unsigned char c : labels[i].text) chars += (c & 0xC0) != 0x80;
    boxes.push_back({i, x0, x0 + kLabelCharPx * double(chars), f.py(labels[i].y), f.py(labels[i].y)});
  }
  // Columns: labels whose horizontal extents overlap (transitively) compete for the same rows.
  std::vector<int> column(boxes.size(), -1);
  int columns = 0;
  for (size_t i = 0; i < boxes.size(); ++i) {
    if (column[i] >= 0) continue;
    column[i] = columns;
    for (bool grew = true; grew;) {
      grew = false;
      for (size_t j = 0; j < boxes.size(); ++j) {
        if (column[j] >= 0) continue;
        for (size_t k = 0; k < boxes.size(); ++k)
          if (column[k] == columns && boxes[j].x0 < boxes[k].x1 && boxes[k].x0 < boxes[j].x1) {
            column[j] = columns, grew = true;
            break;
          }
      }
    }
    ++columns;
  }
  const double h = kLabelLinePx;
  for (int c = 0; c < columns; ++c) {
    std::vector<Box*> col;
    for (size_t i = 0; i < boxes.size(); ++i)
      if (column[i] == c) col.push_back(&boxes[i]);
    std::sort(col.begin(), col.end(), [](const Box* a, const Box* b) { return a->want < b->want; });
    // Clusters of consecutive labels, each centred on the mean of where its labels belong; two
    // clusters that overlap merge, until none do. Then the column is kept inside the frame.
    struct Cluster {
      size_t first, n;
      double sum;
      double top() const { return sum / double(n) - (double(n) - 1) / 2 * kLabelLinePx; }
    };
    std::vector<Cluster> cl;
    for (size_t i = 0; i < col.size(); ++i) {
      cl.push_back({i, 1, col[i]->want});
      while (cl.size() > 1) {
        const Cluster& a = cl[cl.size() - 2];
        const Cluster& b = cl.back();
        if (a.top() + double(a.n) * h <= b.top()) break;
        Cluster m{a.first, a.n + b.n, a.sum + b.sum};
        cl.pop_back();
        cl.back() = m;
      }
    }
    for (const Cluster& k : cl)
      for (size_t j = 0; j < k.n; ++j) col[k.first + j]->at = k.top() + double(j) * h;
    if (!col.empty()) {
      const double lo = f.top + h / 2, hi = f.bottom - h / 2;
      if (col.back()->at > hi) {
        const double shift = col.back()->at - hi;
        for (Box* b : col) b->at -= shift;
      }
      for (size_t j = 0; j < col.size(); ++j) col[j]->at = std::max(col[j]->at, j ? col[j - 1]->at + h : lo);
    }
  }
  int tag = tag0;
  for (const Box& b : boxes) {
    const EndLabel& l = labels[b.i];
    std::string q;
    for (char ch : l.text) q += ch == '"' ? std::string("\\\"") : std::string(1, ch);
    gp << "set label " << tag << " \"" << q << "\" at screen " << f.sx(b.x0) << "," << f.sy(b.at)
       << " left font ',9' tc rgb '" << l.color << "' noenhanced front\n";
    if (std::abs(b.at - b.want) > 2)
      gp << "set arrow " << tag << " from screen " << f.sx(b.x0 - gap + 5) << "," << f.sy(b.want) << " to screen "
         << f.sx(b.x0 - 2) << "," << f.sy(b.at) << " nohead lw 1 lc rgb '" << l.color << "' front\n";
    ++tag;
  }
  return tag - tag0;
}

inline void clear_end_labels(Gnuplot& gp, int count, int tag0 = 100) {
  for (int t = tag0; t < tag0 + count; ++t) gp << "unset label " << t << "\nunset arrow " << t << "\n";
}

// The key right of the frame, one entry a line, top-aligned with the frame, `x` pixels from the left.
inline void key_at(Gnuplot& gp, const Frame& f, double x) {
  gp << "set key at screen " << f.sx(x) << "," << f.sy(f.top) << " left top Left reverse samplen 4 spacing 1.1 "
     << "font ',9' width -2\n";
}

// The pixels a key entry of this title takes (its sample line included).
inline double key_width(const std::vector<Curve>& curves) {
  size_t chars = 0;
  for (const Curve& c : curves) chars = std::max(chars, c.title.size());
  return 70 + 6.3 * double(chars);
}

}  // namespace fa::plot
