#include "perf/model.hpp"

#include "harness/csv.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <map>
#include <set>
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
  const char* works[] = {"bar", "mma", "sfu", "smem", "gmem"};
  for (const char* need : {"step", "kernel", "dtype", "d", "function", "regs_used", "loop", "parent", "trip_kind", "trip_bound", "trip_step",
                           "instructions", "chain_cycles", "chain_cycles_hbm", "work_bar", "work_mma", "work_sfu", "work_smem", "work_gmem"})
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
      l.function = v[col["function"]];
      l.regs_used = std::stoi(v[col["regs_used"]]);
      l.loop = std::stoi(v[col["loop"]]);
      l.parent = v[col["parent"]].empty() ? -2 : std::stoi(v[col["parent"]]);
      l.trip_kind = v[col["trip_kind"]];
      if (l.trip_kind != "once" && l.trip_kind != "imm" && l.trip_kind != "ntid" && l.trip_kind != "runtime")
        throw std::runtime_error(path + ": trip_kind '" + l.trip_kind + "' is none of once, imm, ntid, runtime");
      if ((l.loop < 0) != (l.parent == -2))
        throw std::runtime_error(path + ": loop " + std::to_string(l.loop) + ": only the root (-1) has no parent");
      l.trip_bound = std::stoll(v[col["trip_bound"]]);
      l.trip_step = std::stoll(v[col["trip_step"]]);
      l.instructions = std::stoll(v[col["instructions"]]);
      for (const char* k : classes) l.classes[k] = std::stoll(v[col[k]]);
      l.chain_cycles = std::stod(v[col["chain_cycles"]]);
      l.chain_cycles_hbm = std::stod(v[col["chain_cycles_hbm"]]);
      for (const char* k : works) l.work[k] = std::stod(v[col[std::string("work_") + k]]);
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
    // "" and 0: a kernel not templated on the type or on d (step 01's softmax, step 08's naive kernels)
    if (l.step == step && (l.dtype == dtype || l.dtype.empty()) && (l.d == d || l.d == 0)) out.push_back(l);
  return out;
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string fmt_g(double x) {
  std::ostringstream os;
  os << std::setprecision(4) << x;
  return os.str();
}

// [latency] The work the ledger counts in the unit of a marker class (sass_profile.py's `work`).
double ledger_work(const Ledger& led, const std::string& marker) {
  if (marker == "bar") return double(led.barriers);
  if (marker == "mma") return double(led.matmul_flops);
  if (marker == "sfu") return double(led.exps);
  if (marker == "smem") return double(led.smem_read + led.smem_write);
  if (marker == "gmem") return double(led.gmem_read + led.gmem_write);
  return double(led.cuda_core_flops) / 2 + double(std::max<int64_t>(0, led.nonmatmul_ops - led.exps));
}

// [latency] One warp's path through the kernel's loop tree. Each loop's trips per entry come from the
// listing where its bounds are constants ("imm": bound / step; "ntid": bound / the block's threads); a
// loop whose bound the problem sets ("runtime") makes one trip, except the hot one: the deepest
// runtime loop whose subtree does at least half of the listing's marker work, whose trips are set so
// that the warp's marker work is the ledger's share. The marker is the block barrier where the kernel has one:
// every warp passes every __syncthreads, so a warp's count is the block's, even where warps take turns
// at other work (`if (warp == w)`: the listing's per-warp walk overcounts that work, not the barriers).
// Else the MMAs, shared, then global memory, then the exponentials, a warp's share of the ledger's.
// The exponentials come last because the listing counts a MUFU as 32 of them, one per lane, and a
// kernel whose softmax state is the same in every lane (step 02: one query row per warp) has all 32
// compute the same one: the ledger's count would then give the loop 1/32 of its trips. The bytes a
// lane loads or stores are its own.
// Every loop's own code then counts once per execution: cycles (its chain), instructions, classes.
struct WarpPath {
  double cycles = 0, instructions = 0, hot_trips = 0, queue_cycles = 0;
  int hot = -1;
  std::string marker;
  std::map<std::string, double> classes;
  std::vector<KernelModel::PathLoop> loops;
};

// [queue] Latency under load: what the memory system can deliver, and how many warps ask at once.
struct LoadQueue {
  double warps = 0;                       // resident on the whole GPU at once (one round of every SM)
  double l2_bw = 0, hbm_bw = 0;           // bytes/s: the l2-read and hbm-read ceilings
  double l2_cycles = 0, hbm_cycles = 0;   // the idle latencies, in cycles
  double clock_hz = 0;
};

// [queue] The cycles one trip of loop l adds to its chain when every resident warp loads at once. The profile
// replays each trip twice, every global load at the L2's latency and at HBM's; the chain grows by the
// number of global loads it waits out one after another times the difference, so
//   waits = (chain_hbm − chain_l2) / (L_hbm − L_l2)           global waits per trip
//   b     = work_gmem / waits                                 bytes a warp has in flight at each wait
//   Q     = warps × b                                         bytes outstanding on the GPU at that wait
//   D     = max(Q / BW_l2, f · Q / BW_hbm)                    the time to deliver them (f of them from HBM)
// and a wait lasts max(L_l2, D) for a hit, max(L_hbm, D) for a miss: the trip gains
//   waits · ((1 − f) · max(0, D − L_l2) + f · max(0, D − L_hbm)).
double queue_cycles(const SassLoop& l, const LoadQueue& q, double from_hbm) {
  const double gap = q.hbm_cycles - q.l2_cycles, bytes = l.work.count("gmem") ? l.work.at("gmem") : 0.0;
  if (gap <= 0 || q.warps <= 0 || q.l2_bw <= 0 || q.hbm_bw <= 0 || bytes <= 0) return 0;
  const double waits = (l.chain_cycles_hbm - l.chain_cycles) / gap;
  if (waits <= 0) return 0;  // no global load on the chain (none, or all hidden behind other work)
  const double outstanding = q.warps * bytes / waits;
  const double drain = std::max(outstanding / q.l2_bw, from_hbm * outstanding / q.hbm_bw) * q.clock_hz;
  return waits * ((1 - from_hbm) * std::max(0.0, drain - q.l2_cycles) + from_hbm * std::max(0.0, drain - q.hbm_cycles));
}

WarpPath warp_path(const std::vector<const SassLoop*>& nodes, const Ledger& led, double blocks, double warps_total,
                   int threads, double from_hbm, const LoadQueue& queue) {
  WarpPath w;
  std::map<int, const SassLoop*> by;
  for (const SassLoop* l : nodes) by[l->loop] = l;
  if (!by.count(-1) || warps_total <= 0) return w;
  auto trips = [&](const SassLoop& l) -> double {
    if (l.trip_kind == "imm" && l.trip_step > 0) return double(ceil_div(l.trip_bound, l.trip_step));
    if (l.trip_kind == "ntid" && threads > 0) return double(ceil_div(l.trip_bound, threads));
    return 1.0;
  };
  std::map<int, double> per_entry;
  for (const auto& [id, l] : by) per_entry[id] = id < 0 ? 1.0 : std::max(1.0, trips(*l));
  auto parent_of = [&](int id) { return by.count(id) ? by[id]->parent : -2; };
  auto executions = [&](int id) {  // per warp: the product of trips from the root down to id
    double e = 1;
    for (int k = id; k != -2 && by.count(k); k = parent_of(k)) e *= per_entry[k];
    return e;
  };
  for (const char* m : {"bar", "mma", "smem", "gmem", "sfu"}) {
    double listing = 0;
    for (const auto& [id, l] : by) listing += l->work.count(m) ? l->work.at(m) : 0;
    if (listing > 0 && ledger_work(led, m) > 0) { w.marker = m; break; }
  }
  if (!w.marker.empty()) {
    auto own = [&](int id) { return by[id]->work.count(w.marker) ? by[id]->work.at(w.marker) : 0.0; };
    auto inside = [&](int id, int top) {  // whether loop id lies in top's subtree
      for (int k = id; k != -2 && by.count(k); k = parent_of(k))
        if (k == top) return true;
      return false;
    };
    auto subtree_work = [&](int top) {
      double sum = 0;
      for (const auto& [id, l] : by)
        if (inside(id, top)) sum += executions(id) * own(id);
      return sum;
    };
    double total = subtree_work(-1);
    // The hot loop: the deepest runtime loop whose subtree does at least half of the loops' marker
    // work, each loop at its trips so far (an outer loop's own barrier, before its inner loop starts,
    // does not make it the hot one). The code outside every loop is left out of that half: it runs
    // once, the hot loop many times, so one trip of each says nothing of which does more (step 02's
    // tail, an odd last key and the fallbacks its shuffles never take, has more global bytes than one
    // trip of its key loop).
    const double in_loops = total - own(-1);
    int depth_best = -1;
    for (const auto& [id, l] : by) {
      if (id < 0 || l->trip_kind != "runtime" || in_loops <= 0 || subtree_work(id) < 0.5 * in_loops) continue;
      int depth = 0;
      for (int k = id; k >= 0 && by.count(k); k = parent_of(k)) ++depth;
      if (depth > depth_best) { depth_best = depth; w.hot = id; }
    }
    if (w.hot >= 0 && total > 0) {
      const double want = ledger_work(led, w.marker) / (w.marker == "bar" ? blocks : warps_total);
      const double in = subtree_work(w.hot), out = total - in;
      if (in > 0 && want > out) per_entry[w.hot] *= (want - out) / in;
      w.hot_trips = executions(w.hot);
    }
    // The other runtime loops inside the hot one (the whole kernel where none is hot): a tile loaded
    // row by row up to the rows it has, a row of the scores read column by column, bounds the problem
    // sets. One trip count shared by those that move a class's work, set so that the warp's work of
    // that class reaches the ledger's share: global memory first, then shared memory, the
    // exponentials, the MMAs. Where the listing already covers the ledger they keep one trip.
    const int top = w.hot;
    std::set<int> settled;
    for (const char* cls : {"gmem", "smem", "sfu", "mma"}) {
      if (cls == w.marker) continue;
      auto own_c = [&](int id) { return by[id]->work.count(cls) ? by[id]->work.at(cls) : 0.0; };
      std::vector<int> open;
      for (const auto& [id, l] : by)
        if (id >= 0 && id != top && !settled.count(id) && l->trip_kind == "runtime" && inside(id, top) && own_c(id) > 0)
          open.push_back(id);
      if (open.empty()) continue;
      double have = 0, part = 0;
      for (const auto& [id, l] : by) {
        const double x = executions(id) * own_c(id);
        have += x;
        for (int u : open)
          if (inside(id, u)) { part += x; break; }
      }
      const double want_c = ledger_work(led, cls) / warps_total;
      if (part > 0 && want_c > have)
        for (int u : open) per_entry[u] *= 1 + (want_c - have) / part;
      for (int u : open) settled.insert(u);
    }
  }
  for (const auto& [id, l] : by) {
    const double e = executions(id);
    const double wait = e * queue_cycles(*l, queue, from_hbm);
    const double cyc = e * (l->chain_cycles + from_hbm * (l->chain_cycles_hbm - l->chain_cycles)) + wait;
    w.cycles += cyc;
    w.queue_cycles += wait;
    w.loops.push_back({id, l->parent, l->trip_kind, per_entry[id], e, cyc, wait});
    w.instructions += e * double(l->instructions);
    for (const auto& [k, n] : l->classes) w.classes[k] += e * double(n);
  }
  std::sort(w.loops.begin(), w.loops.end(), [](const auto& a, const auto& b) { return a.cycles > b.cycles; });
  return w;
}

// [latency] Which instantiation of a kernel (its template flags: one mangled name each) a launch ran: the
// one whose registers are nearest the launch's (the listing's highest register + 1, plus the 2 the
// system keeps); among equals the first name in order (a step's defaults are its 0s and falses).
std::string instantiation(const std::vector<SassLoop>& code, const std::string& kernel, int launch_regs) {
  std::string best;
  int gap = 1 << 30;
  for (const SassLoop& l : code) {
    if (l.kernel != kernel || l.loop != -1) continue;
    const int g = std::abs(l.regs_used + 2 - launch_regs);
    if (g < gap || (g == gap && l.function < best)) { gap = g; best = l.function; }
  }
  return best;
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
    // [latency] One warp's whole path (warp_path): alone it needs path_cycles; a scheduler issues one
    // instruction a clock to the W warps it holds, so W warps hide each other's waits until issue is
    // full (Little's law): each round of resident blocks takes the longer of the path and W times its
    // instructions. The SM runs its blocks `resident` at a time.
    std::vector<const SassLoop*> mine;
    const std::string fn = km.launch_known ? instantiation(code, name, km.launch.regs) : "";
    for (const SassLoop& l : code)
      if (l.kernel == name && l.function == fn) mine.push_back(&l);
    if (km.launch_known && !mine.empty()) {
      const double warps_total = double(n) * warps, W = warps_sm / 4.0;
      // The share of the requested reads that miss L2 (the hbm term's reads over all reads) waits for HBM.
      const double from_hbm = gread > 0 ? std::min(1.0, hread / gread) : 0.0;
      // [queue] The warps resident at once: `resident` blocks on each SM that has work, the grid's at most.
      LoadQueue queue;
      queue.warps = double(std::min<int64_t>(n, int64_t(S) * resident)) * warps;
      queue.l2_bw = c.l2_read;
      queue.hbm_bw = c.hbm_read;
      queue.l2_cycles = c.l2_latency_ns * 1e-9 * c.clock_hz;
      queue.hbm_cycles = c.hbm_latency_ns * 1e-9 * c.clock_hz;
      queue.clock_hz = c.clock_hz;
      const WarpPath path = warp_path(mine, led, double(n), warps_total, km.launch.threads, from_hbm, queue);
      km.queue_warps = queue.warps;
      km.queue_cycles = path.queue_cycles;
      km.path_cycles = path.cycles;
      km.path_instructions = path.instructions;
      km.path_classes = path.classes;
      km.path_loops = path.loops;
      km.function = fn;
      km.hot_loop = path.hot;
      km.hot_trips = path.hot_trips;
      km.marker = path.marker;
      const double issue = W * path.instructions;
      km.latency_by = path.cycles >= issue ? "chain" : "issue";
      const double rounds = std::ceil(double(per_sm) / resident);
      km.latency_ms = rounds * std::max(path.cycles, issue) / c.clock_hz * 1e3;
      Term t;
      t.resource = "latency";
      t.work = path.cycles;
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
      os << "      latency: one warp's path " << std::setprecision(4) << k.path_cycles << " cycles, "
         << k.path_instructions << " instructions"
         << (k.hot_loop >= 0 ? " (loop " + std::to_string(k.hot_loop) + " run " + fmt_g(k.hot_trips) + " times, from the ledger's " + k.marker + ")"
                             : std::string(" (no loop's trips from the ledger)"))
         << " -> " << std::setprecision(3) << k.latency_ms << " ms (" << k.latency_by << ")\n";
    if (k.latency_ms > 0 && k.queue_cycles > 0)
      os << "      queue: " << std::setprecision(4) << k.queue_warps << " warps resident load at once; their wait behind each other adds "
         << k.queue_cycles << " cycles to the path (" << std::lround(100 * k.queue_cycles / k.path_cycles) << " %)\n";
    if (k.latency_ms > 0 && k.path_cycles > 0) {
      os << "      the path's largest parts:";
      for (size_t i = 0; i < k.path_loops.size() && i < 3; ++i) {
        const auto& p = k.path_loops[i];
        os << (i ? ";" : "") << " " << (p.loop < 0 ? std::string("outside the loops") : "loop " + std::to_string(p.loop))
           << " x" << fmt_g(p.executions) << " = " << std::lround(100 * p.cycles / k.path_cycles) << " %";
      }
      os << "\n";
    }
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
