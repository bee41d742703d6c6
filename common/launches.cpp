#include "launches.hpp"

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

#ifdef FA_HAVE_CUPTI
namespace {

// CUPTI hands records over in buffers it asks us for; the records are copied out as they arrive.
std::mutex g_mu;
std::vector<KernelLaunch>* g_sink = nullptr;

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
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
    if (!g_sink) continue;
    int status = 0;
    std::unique_ptr<char, void (*)(void*)> dem(abi::__cxa_demangle(k->name, nullptr, nullptr, &status), std::free);
    KernelLaunch l;
    l.name = ledger_name_of(status == 0 && dem ? dem.get() : k->name);
    l.blocks = int64_t(k->gridX) * k->gridY * k->gridZ;
    l.threads = k->blockX * k->blockY * k->blockZ;
    l.regs = k->registersPerThread;
    l.smem = int64_t(k->staticSharedMemory) + k->dynamicSharedMemory;
    l.ms = double(k->end - k->start) * 1e-6;
    g_sink->push_back(l);
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

}  // namespace

std::vector<KernelLaunch> record_launches(const std::function<void()>& work, std::string& why) {
  std::vector<KernelLaunch> got;
  const char* env = std::getenv("FA_RECORD_LAUNCHES");
  if (env && std::string(env) == "0") {
    why = "FA_RECORD_LAUNCHES=0";
    work();
    return got;
  }
  static bool registered = false;
  static std::string register_why;
  if (!registered && register_why.empty()) {
    if (ok(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "register", register_why)) registered = true;
  }
  if (!registered) {
    why = register_why;
    work();
    return got;
  }
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_sink = &got;
  }
  const bool on = ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable", why);
  work();
  if (on) {
    cuptiActivityFlushAll(1);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  }
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_sink = nullptr;
  }
  if (on && got.empty()) why = "CUPTI recorded no kernel (a profiler or sanitizer may hold it)";
  return got;
}
#else
std::vector<KernelLaunch> record_launches(const std::function<void()>& work, std::string& why) {
  why = "this build has no CUPTI (launches not recorded)";
  work();
  return {};
}
#endif

}  // namespace fa
