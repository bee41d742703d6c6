// The per-resource model: what a step's ledger, on a GPU whose ceilings were measured, should take.
//
// The ledger counts each kernel's work by resource (bytes through HBM and L2, shared-memory bytes,
// tensor-core FLOPs on the MMA path the kernel uses, scalar operations, exponentials, barriers,
// atomics). Each resource r has a ceiling C_r measured on the GPU at hand (bench --peaks, common/
// peaks.cu), so alone it would take work_r / C_r. A launch rarely gets the whole ceiling:
//   • coverage — a grid of n blocks on S SMs keeps ⌈n/S⌉ blocks on the busiest SM, so the GPU works
//     at a = n / (S·⌈n/S⌉) of its width (64 blocks on 132 SMs: 48 %; a last, thin wave likewise);
//   • latency hiding — an SM hides a resource's latency only with enough work in flight: for memory,
//     the bytes its resident blocks have requested at once against bandwidth × latency (Little's
//     law); for the pipes, the resident warps against the warps a scheduler needs to issue every
//     cycle. Blocks per SM come from the launch's registers, shared memory and threads.
// The kernel takes the time of its busiest resource, t = max_r work_r / (C_r · a · h_r), or more
// when too few warps overlap the pipes ([overlap]: t_max + (Σ t_pipe − t_max) / warps per
// scheduler), plus the launch; the step the sum over its kernels. Every term is kept, so a report says what bounds a
// kernel and by how much the next resource trails it.
#pragma once
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "perf/launches.hpp"
#include "blueprint/ledger.hpp"
#include "perf/roofline.hpp"

namespace fa {

// The MMA instruction family a kernel's matrix products run on (each has its own ceiling).
enum class MmaUnit { none, wmma, mma_sync, wgmma, cublas };
const char* mma_unit_name(MmaUnit u);

// What the GPU at hand delivers, per resource: measured (bench --peaks rows) or, where no row was
// measured, from per-clock tables and stated assumptions (`assumed` lists those).
struct Ceilings {
  std::string device, source;
  int sms = 0;
  double clock_hz = 0;
  int64_t smem_per_sm = 0;
  int regs_per_sm = 65536, max_threads_per_sm = 2048, max_blocks_per_sm = 32;
  // throughputs, per second, the whole GPU
  double hbm_read = 0, hbm_write = 0, l2_read = 0;              // bytes/s
  double smem_read = 0, smem_write = 0, ldmatrix = 0;           // bytes/s
  double wmma = 0, mma_sync = 0, wgmma = 0;                     // FLOP/s (fp16/bf16 in, fp32 accumulate)
  double fma = 0;                                               // FLOP/s (an FMA is two)
  double ex2 = 0;                                               // exponentials/s
  double barrier = 0;                                           // block barriers/s
  double atomic = 0;                                            // fp32 atomic adds/s
  double issue = 0;                                             // warp instructions/s (4 per clock per SM)
  // latencies
  double hbm_latency_ns = 0, l2_latency_ns = 0, barrier_latency_ns = 0, launch_us = 0;
  std::vector<std::string> assumed;  // the ceilings not measured here
  double mma_flops(MmaUnit u) const;
};

// From the device's queried properties and per-clock tables (what a datasheet would say).
Ceilings ceilings_for(const DeviceSpec& dev);
// Overrides every ceiling the file measured (bench --peaks CSV: rows whose `device` column names
// this device; the last row of each peak wins). Returns the number of ceilings taken; throws
// std::runtime_error on a file that cannot be read or parsed.
int apply_peaks_csv(Ceilings& c, const std::string& path);
// The ceilings the step programs use: ceilings_for(dev), then the file named by FA_PEAKS if set.
Ceilings default_ceilings(const DeviceSpec& dev);

// One resource's share of one kernel.
struct Term {
  std::string resource;  // "hbm", "l2", "smem", "tensor", "fma", "ex2", "barrier", "atomic", "issue", "chain"
  double work = 0;       // in the resource's unit
  double ceiling = 0;    // per second, the whole GPU
  double efficiency = 1; // coverage × latency hiding, 0..1
  double ms = 0;         // work / (ceiling · efficiency)
};

// [latency] One loop of one kernel as the compiler emitted it: a row of scripts/sass_profile.py (which reads
// `cuobjdump -sass`). The loops form a tree (loop -1: the code outside every loop, the root; `parent`: the
// loop that holds this one). Each row counts the loop's own instructions (those no inner loop holds), by
// class, their chain for one trip of one warp (the compiler's stall counts and scoreboards replayed with
// the measured latencies), their work in the ledger's units by class, and how many trips one entry makes:
// "imm" (bound / step, constants in the listing), "ntid" (bound / blockDim: a strided loop over a tile),
// "runtime" (a bound the problem sets: the model takes it from the ledger) or "once" (the root).
struct SassLoop {
  std::string step, kernel, dtype;
  std::string function;  // the mangled name: one kernel may have several instantiations (template flags)
  int regs_used = 0;     // 1 + the highest register the listing names (the launch adds the system's 2)
  int d = 0, loop = -1, parent = -2;  // parent -2: none (the root)
  std::string trip_kind = "once";
  int64_t trip_bound = 1, trip_step = 0;
  int64_t instructions = 0;
  std::map<std::string, int64_t> classes;  // gmem smem mma sfu barrier control alu
  double chain_cycles = 0;      // global loads served by L2
  double chain_cycles_hbm = 0;  // the same with every global load from HBM (the model mixes the two)
  std::map<std::string, double> work;      // mma (FLOPs), sfu (exponentials), smem, gmem (bytes)
};
// Reads a sass_profile.py CSV; throws std::runtime_error on a file that cannot be read or parsed.
std::vector<SassLoop> read_sass_profile(const std::string& path);
// The loops of one step's kernels at one type and head dimension: from the file FA_SASS_PROFILE names,
// else the committed plots/data/sass_profile_h200.csv where it exists; empty when neither has them.
std::vector<SassLoop> sass_loops_for(const std::string& step, const std::string& dtype, int d);

struct KernelModel {
  std::string kernel;
  bool launch_known = false;
  KernelLaunch launch;
  int blocks_per_sm = 0;   // resident at once, and what limits it
  std::string occupancy_limit;
  double coverage = 1;     // a
  double waves = 1;
  std::vector<Term> terms;
  double ms = 0;           // max of the terms + the launch
  std::string bound_by;
  double runner_up = 0;    // how far the next term trails: its ms / the bound's ms
  // [overlap] the pipes' terms one after another, the warps per scheduler that overlap them, and
  // what is left: max + (sum − max) / warps per scheduler
  double serial_ms = 0, warps_per_scheduler = 1, overlap_ms = 0;
  // [latency] One warp's whole path through the kernel's loop tree: the cycles it needs alone and the
  // instructions it issues (by class too), the loop whose trips the ledger set (hot_loop, -1: none) and
  // by how much, the term's time (0 where the kernel has no SASS profile), and whether the path or the
  // issue of the W warps a scheduler holds sets it. path_cycles includes queue_cycles ([queue] below).
  double path_cycles = 0, path_instructions = 0, latency_ms = 0, hot_trips = 0;
  int hot_loop = -1;
  std::string marker;
  std::map<std::string, double> path_classes;
  struct PathLoop {
    int loop = -1, parent = -2;
    std::string kind;  // how the listing bounds it (SassLoop::trip_kind)
    double per_entry = 1, executions = 0, cycles = 0;
    double queue_cycles = 0;  // [queue] of `cycles`, what the wait behind other warps' loads adds
  };
  std::string function;  // the instantiation the launch ran (its mangled name)
  std::vector<PathLoop> path_loops;  // each loop's executions per warp and its cycles on the path, largest first
  std::string latency_by;  // "chain" or "issue"
  // [queue] Latency under load. A global load waits at least its idle latency, and at least as long as the
  // memory system needs to deliver the bytes every resident warp has asked for at that point (Little's
  // law: outstanding bytes / bandwidth). queue_warps: the warps resident on the GPU at once;
  // queue_cycles: what that adds to path_cycles (0 where the idle latency is the longer).
  double queue_warps = 0, queue_cycles = 0;
};

struct ModelPrediction {
  double ms = 0;
  std::string bound_by;    // the bound of the kernel that takes longest
  std::vector<KernelModel> kernels;
  std::string ceilings_source;
};

// `launches` as recorded (record_launches) — matched to the ledger's kernels by name; a ledger
// kernel with no record (a CPU run, cuBLAS's kernels) is modelled as a grid that fills the GPU.
// `unit`: the MMA path of the step's kernels (StepInfo::mma_unit).
// `tensor_bytes`: the bytes of the problem's tensors (Q, K, V, O, L; the gradients too for a
// backward): what HBM must deliver at least once. A kernel's reads that reach HBM are modelled as
// min(its requested reads, tensor_bytes + its workspace) — L2 serves every re-read (0: no cap).
// `code`: the kernels' SASS loops (sass_loops_for); with them each kernel also gets the latency term.
ModelPrediction model_predict(const LedgerSet& ls, const std::vector<KernelLaunch>& launches, MmaUnit unit,
                              const Ceilings& c, double tensor_bytes = 0, const std::vector<SassLoop>& code = {});
void print_model(std::ostream& os, const ModelPrediction& m);

}  // namespace fa
