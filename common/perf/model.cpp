#include "perf/model.hpp"

#include "harness/csv.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <map>
#include <ostream>
#include <sstream>
#include <stdexcept>

namespace fa {

const char* mma_unit_name(MmaUnit u) {
  switch (u) {
    case MmaUnit::none: return "none";
    case MmaUnit::wmma: return "wmma";
    case MmaUnit::mma_sync: return "mma.sync";
    case MmaUnit::wgmma: return "wgmma";
    case MmaUnit::cublas: return "cublas";
  }
  return "?";
}

double Ceilings::mma_flops(MmaUnit u) const {
  switch (u) {
    case MmaUnit::wmma: return wmma;
    case MmaUnit::mma_sync: return mma_sync;
    case MmaUnit::wgmma: return wgmma > 0 ? wgmma : mma_sync;
    case MmaUnit::cublas: return std::max({wgmma, mma_sync, wmma});  // cuBLAS picks the best path it has
    case MmaUnit::none: return mma_sync;
  }
  return mma_sync;
}

// [ceilings] Per-clock tables: what the hardware could do if nothing else limited it. The model
// prefers the measured rows (apply_peaks_csv); these stand in where a row is missing, and each one
// used is named in `assumed`.
Ceilings ceilings_for(const DeviceSpec& dev) {
  Ceilings c;
  c.device = dev.name;
  c.sms = dev.sm_count > 0 ? dev.sm_count : 132;
  c.clock_hz = dev.sm_clock_hz > 0 ? dev.sm_clock_hz : 1.98e9;
  c.smem_per_sm = dev.smem_per_sm > 0 ? dev.smem_per_sm : 228 * 1024;
  const double per_sm = c.sms * c.clock_hz;
  c.hbm_read = c.hbm_write = dev.hbm_bytes_per_s;
  c.l2_read = 2.5 * dev.hbm_bytes_per_s;  // no table: L2 a few times HBM
  c.smem_read = c.smem_write = c.ldmatrix = 128.0 * per_sm;  // 32 banks × 4 bytes per clock
  c.wgmma = dev.cc_major == 9 ? dev.tensor_flops : 0;
  c.mma_sync = dev.cc_major == 9 ? 0.5 * dev.tensor_flops : dev.tensor_flops;  // sm_90: wgmma's rate is not reachable by mma.sync
  c.wmma = c.mma_sync;
  c.fma = dev.fp32_flops;
  c.ex2 = 16.0 * per_sm;        // 4 special-function lanes-per-clock per scheduler, 4 schedulers
  c.issue = 4.0 * per_sm;       // one warp instruction per clock per scheduler
  c.barrier = 1.0 / 40.0 * per_sm;  // no table: a barrier per 40 clocks per SM
  c.atomic = c.l2_read / 32.0;  // no table: one 32-byte L2 sector per atomic
  c.hbm_latency_ns = 700;
  c.l2_latency_ns = 300;
  c.barrier_latency_ns = 20;
  c.launch_us = 3;
  c.assumed = {"hbm-read", "hbm-write", "l2-read", "smem-read", "smem-write", "ldmatrix", "wmma-f16", "mma-sync-f16",
               "wgmma-f16", "fp32-fma", "ex2", "barrier", "atomic-f32", "hbm-latency", "l2-latency",
               "barrier-latency", "launch"};
  c.source = "per-clock tables for " + dev.name;
  return c;
}


int apply_peaks_csv(Ceilings& c, const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot read the peaks file " + path);
  std::string line;
  if (!std::getline(f, line)) throw std::runtime_error(path + ": empty");
  const std::vector<std::string> head = csv_fields(line);
  auto col = [&](const char* name) {
    for (size_t i = 0; i < head.size(); ++i)
      if (head[i] == name) return int(i);
    throw std::runtime_error(path + ": no column '" + std::string(name) + "' (a bench --peaks file?)");
  };
  const int cdev = col("device"), cpeak = col("peak"), cval = col("value");
  std::map<std::string, double*> slot = {
      {"hbm-read", &c.hbm_read},       {"hbm-write", &c.hbm_write},
      {"l2-read", &c.l2_read},         {"smem-read", &c.smem_read},
      {"smem-write", &c.smem_write},   {"ldmatrix", &c.ldmatrix},
      {"wmma-f16", &c.wmma},           {"mma-sync-f16", &c.mma_sync},
      {"wgmma-f16", &c.wgmma},         {"fp32-fma", &c.fma},
      {"ex2", &c.ex2},                 {"barrier", &c.barrier},
      {"atomic-f32", &c.atomic},       {"hbm-latency", &c.hbm_latency_ns},
      {"l2-latency", &c.l2_latency_ns}, {"barrier-latency", &c.barrier_latency_ns},
      {"launch", &c.launch_us}};
  std::map<std::string, double> got;
  std::string device;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    const std::vector<std::string> v = csv_fields(line);
    if (int(v.size()) <= std::max({cdev, cpeak, cval})) throw std::runtime_error(path + ": short row: " + line);
    // The device's rows (a CPU run models the H200 of h200_datasheet(): "NVIDIA H200 (datasheet)").
    if (!c.device.empty() && v[cdev] != c.device && c.device.rfind(v[cdev] + " (", 0) != 0) continue;
    if (!slot.count(v[cpeak])) continue;
    double x = 0;
    try {
      x = std::stod(v[cval]);
    } catch (const std::exception&) {
      throw std::runtime_error(path + ": value '" + v[cval] + "' of " + v[cpeak] + " is not a number");
    }
    if (!(x > 0)) throw std::runtime_error(path + ": " + v[cpeak] + " is not positive");
    got[v[cpeak]] = x;
    device = v[cdev];
  }
  for (const auto& [name, x] : got) {
    *slot[name] = x;
    c.assumed.erase(std::remove(c.assumed.begin(), c.assumed.end(), name), c.assumed.end());
  }
  if (!got.empty()) c.source = "measured on " + device + " (" + path + ")" + (c.assumed.empty() ? "" : ", the rest per-clock tables");
  return int(got.size());
}

#ifndef FA_DEFAULT_PEAKS
#define FA_DEFAULT_PEAKS ""
#endif

Ceilings default_ceilings(const DeviceSpec& dev) {
  static std::map<std::string, Ceilings> cache;  // one read of the file per device and process
  const auto it = cache.find(dev.name);
  if (it != cache.end()) return it->second;
  Ceilings c = ceilings_for(dev);
  const char* env = std::getenv("FA_PEAKS");
  const std::string path = env && *env ? env : FA_DEFAULT_PEAKS;
  if (!path.empty() && (env || std::ifstream(path).good())) apply_peaks_csv(c, path);
  cache[dev.name] = c;
  return c;
}

std::vector<SassLoop> read_sass_profile(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot read the SASS profile " + path);
  std::string line;
  auto chomp = [](std::string& l) {
    if (!l.empty() && l.back() == '\r') l.pop_back();  // a file written with CRLF line ends
  };
  if (!std::getline(f, line)) throw std::runtime_error(path + ": empty");
  chomp(line);
  const std::vector<std::string> head = csv_fields(line);
  std::map<std::string, int> col;
  for (size_t i = 0; i < head.size(); ++i) col[head[i]] = int(i);
  const char* classes[] = {"gmem", "smem", "mma", "sfu", "barrier", "control", "alu"};
  for (const char* need : {"step", "kernel", "dtype", "d", "loop", "instructions", "chain_cycles", "marker",
                           "marker_per_trip", "marker_work"})
    if (!col.count(need)) throw std::runtime_error(path + ": no column '" + std::string(need) + "' (a sass_profile.py file?)");
  for (const char* need : classes)
    if (!col.count(need)) throw std::runtime_error(path + ": no column '" + std::string(need) + "'");
  std::vector<SassLoop> out;
  while (std::getline(f, line)) {
    chomp(line);
    if (line.empty()) continue;
    const std::vector<std::string> v = csv_fields(line);
    if (v.size() < head.size()) throw std::runtime_error(path + ": short row: " + line);
    try {
      SassLoop l;
      l.step = v[col["step"]];
      l.kernel = v[col["kernel"]];
      l.dtype = v[col["dtype"]];
      l.d = std::stoi(v[col["d"]]);
      l.loop = std::stoi(v[col["loop"]]);
      l.instructions = std::stoll(v[col["instructions"]]);
      for (const char* k : classes) l.classes[k] = std::stoll(v[col[k]]);
      l.chain_cycles = std::stod(v[col["chain_cycles"]]);
      l.marker = v[col["marker"]];
      l.marker_per_trip = std::stoll(v[col["marker_per_trip"]]);
      l.marker_work = std::stod(v[col["marker_work"]]);
      out.push_back(std::move(l));
    } catch (const std::logic_error&) {
      throw std::runtime_error(path + ": a value is not a number: " + line);
    }
  }
  return out;
}

#ifndef FA_DEFAULT_SASS_PROFILE
#define FA_DEFAULT_SASS_PROFILE ""
#endif

std::vector<SassLoop> sass_loops_for(const std::string& step, const std::string& dtype, int d) {
  static std::map<std::string, std::vector<SassLoop>> cache;  // one read per file and process
  const char* env = std::getenv("FA_SASS_PROFILE");
  const std::string path = env && *env ? env : FA_DEFAULT_SASS_PROFILE;
  if (path.empty() || (!env && !std::ifstream(path).good())) return {};
  if (!cache.count(path)) cache[path] = read_sass_profile(path);
  std::vector<SassLoop> out;
  for (const SassLoop& l : cache[path])
    if (l.step == step && l.dtype == dtype && l.d == d) out.push_back(l);
  return out;
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// [latency] The work the ledger counts in the unit of a marker class (sass_profile.py's `work`).
double ledger_work(const Ledger& led, const std::string& marker) {
  if (marker == "mma") return double(led.matmul_flops);
  if (marker == "sfu") return double(led.exps);
  if (marker == "smem") return double(led.smem_read + led.smem_write);
  if (marker == "gmem") return double(led.gmem_read + led.gmem_write);
  return double(led.cuda_core_flops) / 2 + double(std::max<int64_t>(0, led.nonmatmul_ops - led.exps));
}

// [latency] The kernel's hot loop: among its loops, those of the highest marker class any of them has
// (mma, then sfu, smem, alu), the one whose trip does the most of that work. nullptr: no loop.
const SassLoop* hot_loop(const std::vector<SassLoop>& code, const std::string& kernel) {
  const char* order[] = {"mma", "sfu", "smem", "alu"};
  for (const char* m : order) {
    const SassLoop* best = nullptr;
    for (const SassLoop& l : code)
      if (l.kernel == kernel && l.loop >= 0 && l.marker == m && l.marker_work > 0 &&
          (!best || l.marker_work > best->marker_work))
        best = &l;
    if (best) return best;
  }
  return nullptr;
}

// [occupancy] Blocks of this launch resident on one SM at once, and which resource stops the next.
int blocks_per_sm(const KernelLaunch& k, const Ceilings& c, std::string& limit) {
  const int warps = int(ceil_div(std::max(k.threads, 1), 32));
  int best = c.max_blocks_per_sm;
  limit = "blocks";
  auto take = [&](int n, const char* why) {
    if (n < best) { best = n; limit = why; }
  };
  take(c.max_threads_per_sm / std::max(k.threads, 1), "threads");
  if (k.regs > 0) {
    const int regs_per_warp = int(ceil_div(int64_t(k.regs) * 32, 256) * 256);  // allocated per warp, 256 at a time
    take((c.regs_per_sm / regs_per_warp) / warps, "registers");
  }
  if (k.smem > 0) take(int(c.smem_per_sm / (k.smem + 1024)), "shared memory");  // 1 KB per block is the system's
  return std::max(best, 1);
}

}  // namespace

ModelPrediction model_predict(const LedgerSet& ls, const std::vector<KernelLaunch>& launches, MmaUnit unit,
                              const Ceilings& c, double tensor_bytes, const std::vector<SassLoop>& code) {
  ModelPrediction out;
  out.ceilings_source = c.source;
  for (const auto& [name, led] : ls.kernels) {
    KernelModel km;
    km.kernel = name;
    int count = 0;
    for (const KernelLaunch& l : launches)
      if (l.name == name) {
        if (count == 0) km.launch = l;
        else km.launch.blocks += l.blocks;
        ++count;
      }
    km.launch_known = count > 0;
    const int S = c.sms;
    int64_t n = km.launch.blocks;
    int resident = 1, warps = 4;
    if (km.launch_known) {
      km.blocks_per_sm = blocks_per_sm(km.launch, c, km.occupancy_limit);
      warps = int(ceil_div(std::max(km.launch.threads, 1), 32));
    } else {
      km.blocks_per_sm = 2;  // unknown: eight blocks per SM, two resident at a time
      km.occupancy_limit = "launch not recorded";
      n = int64_t(S) * 8;
    }
    const int64_t per_sm = ceil_div(std::max<int64_t>(n, 1), S);  // blocks the busiest SM runs
    km.coverage = double(n) / double(S * per_sm);
    resident = int(std::min<int64_t>(km.blocks_per_sm, per_sm));
    km.waves = double(per_sm) / resident;
    const double warps_sm = double(resident) * warps;

    // [hiding] Memory: the bytes a block has requested at once (one phase between barriers), times
    // the resident blocks, against what the SM must keep in flight: its share of the bandwidth
    // times the latency (Little's law). Pipes: resident warps against two per scheduler.
    const double phases = std::max<double>(1.0, double(led.barriers) / std::max<int64_t>(n, 1));
    const double bytes_phase = double(led.gmem_read + led.gmem_write) / std::max<int64_t>(n, 1) / phases;
    auto mem_hiding = [&](double bw, double lat_ns) {
      const double need = bw / S * lat_ns * 1e-9;
      return need > 0 ? std::min(1.0, resident * bytes_phase / need) : 1.0;
    };
    const double pipe_hiding = std::min(1.0, warps_sm / 8.0);
    const double issue_hiding = std::min(1.0, warps_sm / 16.0);

    auto add = [&](const char* res, double work, double ceiling, double eff) {
      if (work <= 0) return;
      Term t;
      t.resource = res;
      t.work = work;
      t.ceiling = ceiling;
      t.efficiency = std::max(1e-6, eff * km.coverage);
      t.ms = ceiling > 0 ? work / (ceiling * t.efficiency) * 1e3 : 0.0;
      km.terms.push_back(t);
    };
    const double gread = double(led.gmem_read), gwrite = double(led.gmem_write), gatom = double(led.gmem_atomic);
    // HBM: every byte written, and the bytes read once — L2 serves the re-reads (of K and V by the
    // Q tiles, of Q by the K/V tiles), so what reaches HBM is capped by the tensors and workspace.
    const double hread = tensor_bytes > 0 ? std::min(gread, tensor_bytes + double(led.workspace)) : gread;
    // (Like smem below, a sum of two rates: the term's work is in seconds at full ceilings.)
    add("hbm", hread / c.hbm_read + gwrite / c.hbm_write, 1.0, mem_hiding(c.hbm_read, c.hbm_latency_ns));
    add("l2", gread + gwrite + gatom, c.l2_read, mem_hiding(c.l2_read, c.l2_latency_ns));
    const double smem_s = double(led.smem_read) / c.smem_read + double(led.smem_write) / c.smem_write;
    add("smem", smem_s, 1.0, pipe_hiding);
    add("tensor", double(led.matmul_flops), c.mma_flops(unit), pipe_hiding);
    const double scalar_ops = double(led.cuda_core_flops) / 2 + double(std::max<int64_t>(0, led.nonmatmul_ops - led.exps));
    add("fma", 2 * scalar_ops, c.fma, pipe_hiding);
    add("ex2", double(led.exps), c.ex2, pipe_hiding);
    add("barrier", double(led.barriers), c.barrier, 1.0);
    add("atomic", gatom / 4, c.atomic, 1.0);
    // Issue: one warp instruction per 32 scalar operations, per 4096 tensor FLOPs (an HMMA.16816;
    // wgmma's are 64 times fewer), per 32 lanes × 8 bytes of shared or global memory.
    const double mma_instr = double(led.matmul_flops) / (unit == MmaUnit::wgmma ? 65536.0 : 4096.0);
    const double instr = (scalar_ops + double(led.exps)) / 32 + mma_instr +
                         double(led.smem_read + led.smem_write + led.gmem_read + led.gmem_write) / 256;
    add("issue", instr, c.issue, issue_hiding);
    // The chain: a block's barriers one after another, each at least a barrier's latency; an SM
    // runs its blocks `resident` at a time.
    if (led.barriers > 0) {
      Term t;
      t.resource = "chain";
      t.work = phases * std::ceil(km.waves);
      t.ceiling = 1e9 / c.barrier_latency_ns;
      t.ms = t.work * c.barrier_latency_ns * 1e-6;
      km.terms.push_back(t);
    }
    // [latency] One warp's dependent chain through the hot loop, trip after trip: each trip takes the
    // longer of its chain (one warp alone) and the issue of the W warps a scheduler holds (one
    // instruction a clock), so W warps hide each other's waits until issue is full (Little's law).
    // Trips per warp: the ledger's work of the loop's marker class over the warps, over one trip's.
    // The SM runs its blocks `resident` at a time. Code outside the hot loop is left out.
    if (const SassLoop* hot = km.launch_known ? hot_loop(code, name) : nullptr) {
      const double warps_total = double(n) * warps, W = warps_sm / 4.0;
      km.trips = ledger_work(led, hot->marker) / (warps_total * hot->marker_work);
      km.chain_cycles = hot->chain_cycles;
      km.loop_instructions = double(hot->instructions);
      const double issue = W * km.loop_instructions;
      km.latency_by = km.chain_cycles >= issue ? "chain" : "issue";
      const double rounds = std::ceil(double(per_sm) / resident);
      km.latency_ms = rounds * km.trips * std::max(km.chain_cycles, issue) / c.clock_hz * 1e3;
      Term t;
      t.resource = "latency";
      t.work = km.trips * km.chain_cycles;
      t.ceiling = c.clock_hz;
      t.ms = km.latency_ms;
      km.terms.push_back(t);
    }
    double best = 0, second = 0;
    for (const Term& t : km.terms) {
      if (t.ms > best) { second = best; best = t.ms; km.bound_by = t.resource; }
      else if (t.ms > second) second = t.ms;
    }
    km.runner_up = best > 0 ? second / best : 0;
    // [overlap] The busiest resource bounds a kernel only if the other pipes work while it does.
    // A warp's dependent instructions wait on each other; only other warps fill the gaps, so with
    // w warps per scheduler the model hides all but 1/w of the other pipes' time behind the
    // busiest one: t = t_max + (Σ t_pipe − t_max) / w. Memory counts once (the larger of L2 and HBM).
    {
      double pipe_sum = 0, pipe_max = 0, l2 = 0, hbm = 0;
      for (const Term& t : km.terms) {
        if (t.resource == "l2") l2 = t.ms;
        else if (t.resource == "hbm") hbm = t.ms;
        else if (t.resource == "smem" || t.resource == "tensor" || t.resource == "fma" || t.resource == "ex2") {
          pipe_sum += t.ms;
          pipe_max = std::max(pipe_max, t.ms);
        }
      }
      const double mem = std::max(l2, hbm);
      pipe_sum += mem;
      pipe_max = std::max(pipe_max, mem);
      km.warps_per_scheduler = std::max(1.0, warps_sm / 4.0);
      km.serial_ms = pipe_sum;
      km.overlap_ms = pipe_max + (pipe_sum - pipe_max) / km.warps_per_scheduler;
    }
    // Bound by the busiest resource; "+serial" when the pipes' imperfect overlap costs more.
    if (km.overlap_ms > best * 1.0001) km.bound_by += "+serial";
    km.ms = std::max(best, km.overlap_ms) + std::max(count, 1) * c.launch_us * 1e-3;
    out.ms += km.ms;
    out.kernels.push_back(km);
  }
  double longest = -1;
  for (const KernelModel& k : out.kernels)
    if (k.ms > longest) { longest = k.ms; out.bound_by = k.bound_by; }
  return out;
}

void print_model(std::ostream& os, const ModelPrediction& m) {
  os << "model     " << std::defaultfloat << std::setprecision(4) << m.ms << " ms predicted, bound by " << m.bound_by
     << "\n          ceilings " << m.ceilings_source << "\n";
  for (const KernelModel& k : m.kernels) {
    os << "  " << std::left << std::setw(12) << k.kernel << std::right;
    if (k.launch_known)
      os << k.launch.blocks << " blocks of " << k.launch.threads << " threads, " << k.launch.regs << " regs, "
         << k.launch.smem / 1024.0 << " KB smem: " << k.blocks_per_sm << "/SM (" << k.occupancy_limit << "), ";
    else
      os << "(" << k.occupancy_limit << ") ";
    os << "coverage " << std::fixed << std::setprecision(2) << k.coverage << ", " << std::defaultfloat << std::setprecision(3)
       << k.ms << " ms, bound by " << k.bound_by << " (next at " << std::fixed << std::setprecision(0) << 100 * k.runner_up
       << " %)\n      overlap: " << std::setprecision(1) << k.warps_per_scheduler << " warps per scheduler hide the other pipes: "
       << std::defaultfloat << std::setprecision(3) << k.serial_ms << " ms one after another -> " << k.overlap_ms << " ms\n";
    if (k.latency_ms > 0)
      os << "      latency: " << std::setprecision(4) << k.trips << " trips of the hot loop per warp, " << k.chain_cycles
         << " cycles of chain and " << k.loop_instructions << " instructions per trip -> " << std::setprecision(3)
         << k.latency_ms << " ms (" << k.latency_by << ")\n";
    std::vector<Term> t = k.terms;
    std::sort(t.begin(), t.end(), [](const Term& a, const Term& b) { return a.ms > b.ms; });
    os << "      ";
    for (size_t i = 0; i < t.size(); ++i)
      os << (i ? ", " : "") << t[i].resource << " " << std::defaultfloat << std::setprecision(3) << t[i].ms
         << (t[i].efficiency < 0.995 ? " (eff " + std::to_string(int(std::lround(100 * t[i].efficiency))) + "%)" : "");
    os << "\n";
  }
}

}  // namespace fa
