#include "perf/launches.hpp"

#include <algorithm>
#include <cstdlib>
#include <regex>
#include <sstream>
#include <stdexcept>

#ifdef FA_HAVE_CUPTI
#include <cuda_runtime.h>
#include <cupti.h>
#include <cxxabi.h>

#include <cstring>
#include <memory>
#include <mutex>
#endif

namespace fa {

std::string ledger_name_of(const std::string& demangled) {
  static const std::regex step_kernel("step[0-9][0-9]_([A-Za-z0-9_]+)");
  std::smatch m;
  if (std::regex_search(demangled, m, step_kernel)) return m[1];
  std::string s = demangled;
  if (s.rfind("void ", 0) == 0) s = s.substr(5);
  const size_t cut = s.find_first_of("(<");
  if (cut != std::string::npos) s = s.substr(0, cut);
  const size_t ns = s.rfind("::");
  if (ns != std::string::npos) s = s.substr(ns + 2);
  for (char& c : s)
    if (c == ',' || c == ';' || c == ':' || c == ' ') c = '_';
  return s.empty() ? "kernel" : s;
}

std::string format_launches(const std::vector<KernelLaunch>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i)
    os << (i ? ";" : "") << v[i].name << ":" << v[i].blocks << ":" << v[i].threads << ":" << v[i].regs << ":" << v[i].smem;
  return os.str();
}

std::vector<KernelLaunch> parse_launches(const std::string& field) {
  std::vector<KernelLaunch> out;
  std::stringstream ss(field);
  for (std::string item; std::getline(ss, item, ';');) {
    if (item.empty()) continue;
    std::vector<std::string> f;
    std::stringstream is(item);
    for (std::string x; std::getline(is, x, ':');) f.push_back(x);
    if (f.size() != 5) throw std::invalid_argument("launches: '" + item + "' is not name:blocks:threads:regs:smem");
    KernelLaunch k;
    k.name = f[0];
    k.blocks = std::stoll(f[1]);
    k.threads = std::stoi(f[2]);
    k.regs = std::stoi(f[3]);
    k.smem = std::stoll(f[4]);
    out.push_back(k);
  }
  return out;
}

std::vector<DeviceActivity> in_window(const std::vector<DeviceActivity>& all, uint64_t t0, uint64_t t1) {
  std::vector<DeviceActivity> out;
  for (const DeviceActivity& a : all)
    if (a.start >= t0 && a.start <= t1) out.push_back(a);
  return out;
}

#ifdef FA_HAVE_CUPTI
namespace {

// CUPTI hands records over in buffers it asks us for; the records are copied out as they arrive,
// into the one sink that is open (a record_launches call or an ActivityTrace).
struct Raw {
  DeviceActivity a;
  KernelLaunch k;
};
std::mutex g_mu;
std::vector<Raw>* g_sink = nullptr;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  constexpr size_t kBytes = 1 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBytes));
  *size = kBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (!g_sink) continue;
    Raw r;
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      int status = 0;
      std::unique_ptr<char, void (*)(void*)> dem(abi::__cxa_demangle(k->name, nullptr, nullptr, &status), std::free);
      r.k.name = ledger_name_of(status == 0 && dem ? dem.get() : k->name);
      r.k.blocks = int64_t(k->gridX) * k->gridY * k->gridZ;
      r.k.threads = k->blockX * k->blockY * k->blockZ;
      r.k.regs = k->registersPerThread;
      r.k.smem = int64_t(k->staticSharedMemory) + k->dynamicSharedMemory;
      r.k.ms = double(k->end - k->start) * 1e-6;
      r.a = {r.k.name, true, k->start, k->end};
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
      r.a = {"memset", false, m->start, m->end};
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
      r.a = {"memcpy", false, m->start, m->end};
    } else {
      continue;
    }
    g_sink->push_back(r);
  }
  std::free(buffer);
}

bool ok(CUptiResult r, const char* what, std::string& why) {
  if (r == CUPTI_SUCCESS) return true;
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  why = std::string("CUPTI ") + what + ": " + (s ? s : "error");
  return false;
}

// Registers the buffer callbacks once; false (and why) where CUPTI is unavailable or switched off.
bool cupti_ready(std::string& why) {
  const char* env = std::getenv("FA_RECORD_LAUNCHES");
  if (env && std::string(env) == "0") {
    why = "FA_RECORD_LAUNCHES=0";
    return false;
  }
  static bool registered = false;
  static std::string register_why;
  if (!registered && register_why.empty()) {
    if (ok(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "register", register_why)) registered = true;
  }
  if (!registered) why = register_why;
  return registered;
}

constexpr CUpti_ActivityKind kTraced[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMSET,
                                          CUPTI_ACTIVITY_KIND_MEMCPY};

// Opens the sink and enables the kinds (kernels alone, or kernels, memsets and memcpys).
bool open_sink(std::vector<Raw>* sink, bool copies, std::string& why) {
  if (!cupti_ready(why)) return false;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_sink = sink;
  }
  for (CUpti_ActivityKind k : kTraced) {
    if (!copies && k != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    if (!ok(cuptiActivityEnable(k), "enable", why)) {
      for (CUpti_ActivityKind d : kTraced) cuptiActivityDisable(d);
      std::lock_guard<std::mutex> lock(g_mu);
      g_sink = nullptr;
      return false;
    }
  }
  return true;
}

void close_sink() {
  cuptiActivityFlushAll(1);
  for (CUpti_ActivityKind k : kTraced) cuptiActivityDisable(k);
  std::lock_guard<std::mutex> lock(g_mu);
  g_sink = nullptr;
}

std::vector<Raw> g_trace;  // the open ActivityTrace's records

}  // namespace

std::vector<KernelLaunch> record_launches(const std::function<void()>& work, std::string& why) {
  std::vector<Raw> raw;
  if (!open_sink(&raw, false, why)) {
    work();
    return {};
  }
  work();
  close_sink();
  std::vector<KernelLaunch> got;
  for (const Raw& r : raw)
    if (r.a.kernel) got.push_back(r.k);
  if (got.empty()) why = "CUPTI recorded no kernel (a profiler or sanitizer may hold it)";
  return got;
}

ActivityTrace::ActivityTrace() {
  g_trace.clear();
  on_ = open_sink(&g_trace, true, why_);
}

ActivityTrace::~ActivityTrace() {
  if (on_ && !stopped_) stop();
}

uint64_t ActivityTrace::now() const {
  uint64_t t = 0;
  if (on_) cuptiGetTimestamp(&t);
  return t;
}

std::vector<DeviceActivity> ActivityTrace::stop() {
  if (!on_ || stopped_) return got_;
  stopped_ = true;
  close_sink();
  for (const Raw& r : g_trace) got_.push_back(r.a);
  g_trace.clear();
  std::sort(got_.begin(), got_.end(), [](const DeviceActivity& a, const DeviceActivity& b) { return a.start < b.start; });
  if (got_.empty()) why_ = "CUPTI recorded nothing (a profiler or sanitizer may hold it)";
  return got_;
}
#else
std::vector<KernelLaunch> record_launches(const std::function<void()>& work, std::string& why) {
  why = "this build has no CUPTI (launches not recorded)";
  work();
  return {};
}

ActivityTrace::ActivityTrace() : why_("this build has no CUPTI (kernel time not recorded)") {}
ActivityTrace::~ActivityTrace() = default;
uint64_t ActivityTrace::now() const { return 0; }
std::vector<DeviceActivity> ActivityTrace::stop() { return {}; }
#endif

}  // namespace fa
