// What plot_traffic and plot_measured share: a small CSV reader that names the file in every error,
// and the gnuplot set-up (PNG terminal, the log-2 N axis, a plot command from a list of curves).
#pragma once

#include <gnuplot-iostream.h>

#include <cstdint>
#include <fstream>
#include <map>
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

}  // namespace fa::plot
