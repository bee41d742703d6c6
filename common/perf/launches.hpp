// What the GPU was actually asked to run: each kernel's grid, block, registers and shared memory,
// recorded from the driver (CUPTI's activity records) during a step's checked launch. The
// per-resource model (common/perf/model.hpp) needs them to know how many blocks fit on an SM and how
// many waves a launch takes — facts of the compiled kernel (registers) that no schedule can count.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fa {

struct KernelLaunch {
  std::string name;      // the ledger's name for it ("scores" for step01_scores), or the demangled
                         // function's short name when it has no stepNN_ prefix (cuBLAS's kernels)
  int64_t blocks = 0;    // grid size, x·y·z
  int threads = 0;       // per block
  int regs = 0;          // registers per thread
  int64_t smem = 0;      // shared memory per block, static + dynamic, bytes
  double ms = 0;         // the launch's own duration on the GPU (start to end, as CUPTI saw it)
};

// The ledger's kernel name a GPU function name maps to: "NAME" for any "...stepNN_NAME..." (the
// course's convention, as scripts/ncu_ledger.py reads Nsight's names), else the name up to its
// first '(' or '<', without namespaces.
std::string ledger_name_of(const std::string& demangled);

// Runs `work` (which must synchronize) while the driver records every kernel it launches. Returns
// them in launch order; empty, with `why` saying why, when recording is not available (a build
// without CUPTI, a profiler or sanitizer that holds it, FA_RECORD_LAUNCHES=0).
std::vector<KernelLaunch> record_launches(const std::function<void()>& work, std::string& why);

// [kernel-clock] What the GPU itself did, as the driver timed it: each kernel, memset and memcpy with
// its start and end on the GPU (CUPTI's activity records, in CUPTI's clock: nanoseconds).
struct DeviceActivity {
  std::string name;      // as ledger_name_of gives it for a kernel; "memset" or "memcpy" otherwise
  bool kernel = false;
  uint64_t start = 0, end = 0;
  double ms() const { return double(end - start) * 1e-6; }
};

// Records every kernel, memset and memcpy the device runs while it lives (CUPTI's activity API, the
// one Nsight and torch.profiler read too), until stop(). on() is false, and why() says why, where
// there is no recording (a build without CUPTI, a profiler or sanitizer that holds it,
// FA_RECORD_LAUNCHES=0); stop() then returns nothing. One at a time in a process.
class ActivityTrace {
 public:
  ActivityTrace();
  ~ActivityTrace();
  ActivityTrace(const ActivityTrace&) = delete;
  ActivityTrace& operator=(const ActivityTrace&) = delete;
  bool on() const { return on_; }
  const std::string& why() const { return why_; }
  // CUPTI's clock now (nanoseconds), the time base of the records; 0 where there is no recording.
  // Work launched after a now() starts on the GPU after it, so windows of now() readings taken around
  // synchronized launches tell whose records are whose.
  uint64_t now() const;
  // Everything recorded, in start order (the device must be idle: synchronize first).
  std::vector<DeviceActivity> stop();

 private:
  bool on_ = false, stopped_ = false;
  std::string why_;
  std::vector<DeviceActivity> got_;
};

// The records whose start lies in [t0, t1]: one call's, when t0 and t1 were read around it.
std::vector<DeviceActivity> in_window(const std::vector<DeviceActivity>& all, uint64_t t0, uint64_t t1);

// One CSV field: "name:blocks:threads:regs:smem;..." (no commas, so it needs no quoting).
std::string format_launches(const std::vector<KernelLaunch>& v);
std::vector<KernelLaunch> parse_launches(const std::string& field);  // throws std::invalid_argument

}  // namespace fa
