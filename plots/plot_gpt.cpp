// plot_gpt: the small GPT's training loss against the step, one curve per attention backend (the
// course's kernels through flash_attn_steps, and PyTorch's SDPA), from the rows python/examples/gpt.py
// writes (one per training step). Each backend's curve is the mean over its seeds of the loss
// smoothed over a window of steps, with the band between its lowest and highest seed: where the two
// bands overlap, the backends agree within the seed-to-seed spread.
//
//   plot_gpt [--csv FILE] [--out DIR] [--window K]     (default plots/data/gpt_steps_h200.csv, plots/)
#include "plotting.hpp"

#include <filesystem>
#include <map>
#include <set>

namespace fs = std::filesystem;
using namespace fa::plot;

namespace {

constexpr const char* kProgram = "plot_gpt";

struct Run {
  std::vector<double> steps, loss;
};

// backend -> seed -> the run's rows in step order
using Runs = std::map<std::string, std::map<std::string, Run>>;

Runs load(const std::string& path) {
  const Table t = read_table(path, {"backend", "seed", "step", "loss"});
  Runs runs;
  for (size_t r = 0; r < t.size(); ++r) {
    Run& run = runs[t.str(r, "backend")][t.str(r, "seed")];
    const double step = t.num(r, "step");
    if (!run.steps.empty() && step <= run.steps.back())
      throw Error(path + ": backend " + t.str(r, "backend") + ", seed " + t.str(r, "seed") + ": step " +
                  t.str(r, "step") + " after step " + std::to_string(int64_t(run.steps.back())) + " (two runs in one file?)");
    run.steps.push_back(step);
    run.loss.push_back(t.num(r, "loss"));
  }
  if (runs.size() < 2) throw Error(path + ": rows of " + std::to_string(runs.size()) + " backend(s); the plot compares two");
  for (const auto& [backend, seeds] : runs) {
    const Run& first = seeds.begin()->second;
    for (const auto& [seed, run] : seeds)
      if (run.steps != first.steps)
        throw Error(path + ": backend " + backend + ": seed " + seed + " has other steps than seed " + seeds.begin()->first);
  }
  return runs;
}

// The trailing mean over `window` steps (fewer at the start).
std::vector<double> smooth(const std::vector<double>& v, size_t window) {
  std::vector<double> out(v.size());
  double sum = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    sum += v[i];
    if (i >= window) sum -= v[i - window];
    out[i] = sum / double(std::min(i + 1, window));
  }
  return out;
}

void draw(const Runs& runs, size_t window, const std::string& png) {
  Gnuplot gp;
  begin_png(gp, png, 1000, 620);
  gp << "set xlabel 'training step'\nset ylabel 'training loss (mean of " << window << " steps)'\n"
     << "set key top right\nset grid\nset style fill transparent solid 0.25 noborder\n";
  std::vector<std::string> parts;
  std::vector<std::vector<std::tuple<double, double, double>>> bands;
  std::vector<Series> means;
  size_t slot = 0;
  std::ostringstream cmd;
  for (const auto& [backend, seeds] : runs) {
    const std::vector<double>& steps = seeds.begin()->second.steps;
    std::vector<std::vector<double>> smoothed;
    for (const auto& [seed, run] : seeds) smoothed.push_back(smooth(run.loss, window));
    std::vector<std::tuple<double, double, double>> band;
    Series mean;
    for (size_t i = 0; i < steps.size(); ++i) {
      double lo = smoothed[0][i], hi = lo, sum = 0;
      for (const auto& s : smoothed) lo = std::min(lo, s[i]), hi = std::max(hi, s[i]), sum += s[i];
      band.emplace_back(steps[i], lo, hi);
      mean.emplace_back(steps[i], sum / double(smoothed.size()));
    }
    const Style& st = style(slot++);
    cmd << (bands.empty() ? "plot " : ", ") << "'-' using 1:2:3 with filledcurves lc rgb '" << st.color
        << "' title '" << label(backend) << ": lowest to highest of " << seeds.size() << " seeds'";
    cmd << ", '-' with lines lw 2 dt " << st.dash << " lc rgb '" << st.color << "' title '" << label(backend)
        << ": mean'";
    bands.push_back(band);
    means.push_back(mean);
  }
  gp << cmd.str() << "\n";
  for (size_t i = 0; i < bands.size(); ++i) {
    gp.send1d(bands[i]);
    gp.send1d(means[i]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string csv = std::string(FA_PLOTS_DIR) + "/data/gpt_steps_h200.csv", out = FA_PLOTS_DIR;
  size_t window = 20;
  const std::string usage = "usage: plot_gpt [--csv FILE] [--out DIR] [--window K]\n";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--csv" && has_value) csv = argv[++i];
    else if (a == "--out" && has_value) out = argv[++i];
    else if (a == "--window" && has_value) {
      const long w = std::atol(argv[++i]);
      if (w < 1) {
        std::cerr << "plot_gpt: --window must be a positive number of steps\n";
        return 2;
      }
      window = size_t(w);
    } else {
      std::cerr << usage;
      return a == "--help" ? 0 : 2;
    }
  }
  if (report_errors(kProgram, [&] {
    const Runs runs = load(csv);
    fs::create_directories(out);
    draw(runs, window, out + "/gpt_loss.png");
  }))
    return 1;
  std::cout << "wrote " << out << "/gpt_loss.png\n";
  return 0;
}
