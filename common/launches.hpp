// What the GPU was actually asked to run: each kernel's grid, block, registers and shared memory,
// recorded from the driver (CUPTI's activity records) during a step's checked launch. The
// per-resource model (common/model.hpp) needs them to know how many blocks fit on an SM and how
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

// One CSV field: "name:blocks:threads:regs:smem;..." (no commas, so it needs no quoting).
std::string format_launches(const std::vector<KernelLaunch>& v);
std::vector<KernelLaunch> parse_launches(const std::string& field);  // throws std::invalid_argument

}  // namespace fa
