// ring_bench — step 18 measured the ways one GPU allows (docs/18_ring.md, "What one GPU measures"):
//
//   ring_bench [--n 32768,65536,...] [--ranks 2,4,8] [--b 1] [--h 8] [--hkv H] [--d 128] [--dtype bf16]
//              [--causal 0,1] [--reps 3] [--link-gbs 450] [--budget-s 400] [--commit HASH]
//              [--timeline-n N --timeline-p P --timeline FILE] [--comm-priority high|normal] --out FILE
//
// For every N and causal: step 12's forward over the whole sequence on this GPU (t1, the one-GPU
// time), then for every P and layout (zig-zag; contiguous too when causal):
//   - ring_ms:   the ring of P ranks as P pairs of streams on this GPU, and its O checked against
//                step 12's (the same inputs): what splitting into shards and merging costs here;
//   - serial:    the same ring with its ranks one after another, each rank's step timed alone — what
//                that step takes on a GPU of its own. Σ_t max_r is the ring's critical path with
//                every transfer hidden; max_r Σ_t over mean_r Σ_t the ranks' imbalance;
//   - xfer_ms:   one K/V buffer copied device to device here, and link_ms the same bytes over a link
//                of --link-gbs GB/s each way (450: the H200's NVLink, 900 GB/s both ways, datasheet);
//   - proj_ms = Σ_t max(max_r compute[r][t], link_ms) + a rank's start and finish: the ring's time on
//                P GPUs projected from those measurements, and proj_eff = t1 / (P · proj_ms). A
//                projection, not a multi-GPU measurement: the CSV says so in every row.
// Rows are written as they are measured (a long run keeps what it has); points past --budget-s are
// written with status "not run: budget", never left out.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "harness/csv.hpp"
#include "kernel/cuda_check.cuh"
#include "harness/gpu.hpp"
#include "schedule.hpp"

namespace fa::step12 {
const StepInfo& info();
}

using namespace fa;
using fa::step18::Layout;

namespace {

__global__ void rb_fill(uint16_t* x, int64_t n, uint64_t seed, bool bf16) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    uint64_t z = (uint64_t(e) + seed) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u1 = float(z >> 40) * 0x1p-24f, u2 = float((z >> 16) & 0xffffff) * 0x1p-24f;
    const float v = 0.25f + 1.5f * (u1 + u2 - 1.0f);  // offset + spread · (a triangle in [−1, 1])
    x[e] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
  }
}

// max |a − b| over n elements (NaN counts as +inf), as the bits of a non-negative float.
__global__ void rb_maxdiff(const uint16_t* a, const uint16_t* b, int64_t n, bool bf16, unsigned* out) {
  float m = 0.0f;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const float x = bf16 ? __bfloat162float(__ushort_as_bfloat16(a[e])) : __half2float(__ushort_as_half(a[e]));
    const float y = bf16 ? __bfloat162float(__ushort_as_bfloat16(b[e])) : __half2float(__ushort_as_half(b[e]));
    const float d = fabsf(x - y);
    m = fmaxf(m, d == d ? d : INFINITY);
  }
  atomicMax(out, __float_as_uint(m));
}

std::vector<int64_t> list_of(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) v.push_back(std::stoll(x));
  return v;
}

double median_ms(const std::vector<float>& v) {
  std::vector<float> s = v;
  std::sort(s.begin(), s.end());
  return s.empty() ? 0.0 : (s.size() % 2 ? s[s.size() / 2] : 0.5 * (s[s.size() / 2 - 1] + s[s.size() / 2]));
}

// The median of `reps` timed runs after a warm-up; a run longer than a second is timed once (the
// million-token points take seconds each, and their spread is what the short ones show).
template <class F>
double time_ms(F&& f, int reps) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  CUDA_CHECK(cudaEventRecord(a, nullptr));
  f();  // warm-up
  CUDA_CHECK(cudaEventRecord(b, nullptr));
  CUDA_CHECK(cudaEventSynchronize(b));
  float first = 0;
  CUDA_CHECK(cudaEventElapsedTime(&first, a, b));
  if (first > 1000.0f) reps = 1;
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    CUDA_CHECK(cudaEventRecord(a, nullptr));
    f();
    CUDA_CHECK(cudaEventRecord(b, nullptr));
    CUDA_CHECK(cudaEventSynchronize(b));
    float x = 0;
    CUDA_CHECK(cudaEventElapsedTime(&x, a, b));
    ms.push_back(x);
  }
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  return median_ms(ms);
}

struct Opts {
  std::vector<int64_t> ns{32768, 65536, 131072, 262144, 524288, 1048576}, ranks{2, 4, 8}, causal{0, 1};
  int B = 1, H = 8, Hkv = 0, d = 128, reps = 3;
  bool bf16 = true;
  double link_gbs = 450.0, budget_s = 400.0;
  int64_t tl_n = 0, tl_p = 0;
  std::string out, timeline, commit;
  bool comm_high = true;  // [priority] --comm-priority high|normal
};

int usage(const char* why) {
  std::cerr << "ring_bench: " << why << "\n"
            << "usage: ring_bench [--n LIST] [--ranks LIST] [--b B] [--h H] [--hkv HKV] [--d 64|128] [--dtype bf16|fp16]\n"
               "                  [--causal LIST of 0/1] [--reps R] [--link-gbs GBS] [--budget-s S] [--commit HASH]\n"
               "                  [--comm-priority high|normal]\n"
               "                  [--timeline-n N --timeline-p P --timeline FILE] --out FILE\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--help") return usage("step 18 on one GPU: the ring as P streams, its ranks alone, and the projection");
      if (i + 1 >= argc) return usage((a + " needs a value").c_str());
      const std::string v = argv[++i];
      if (a == "--n") o.ns = list_of(v);
      else if (a == "--ranks") o.ranks = list_of(v);
      else if (a == "--causal") o.causal = list_of(v);
      else if (a == "--b") o.B = std::stoi(v);
      else if (a == "--h") o.H = std::stoi(v);
      else if (a == "--hkv") o.Hkv = std::stoi(v);
      else if (a == "--d") o.d = std::stoi(v);
      else if (a == "--dtype") o.bf16 = v == "bf16";
      else if (a == "--reps") o.reps = std::stoi(v);
      else if (a == "--link-gbs") o.link_gbs = std::stod(v);
      else if (a == "--budget-s") o.budget_s = std::stod(v);
      else if (a == "--timeline-n") o.tl_n = std::stoll(v);
      else if (a == "--timeline-p") o.tl_p = std::stoll(v);
      else if (a == "--timeline") o.timeline = v;
      else if (a == "--commit") o.commit = v;
      else if (a == "--comm-priority") {
        if (v != "high" && v != "normal") return usage("--comm-priority must be high or normal");
        o.comm_high = v == "high";
      }
      else if (a == "--out") o.out = v;
      else return usage(("unknown flag " + a).c_str());
    }
  } catch (const std::exception&) {
    return usage("a value is not a number");
  }
  if (o.out.empty()) return usage("--out FILE is required");
  if (o.d != 64 && o.d != 128) return usage("--d must be 64 or 128");
  for (int64_t P : o.ranks)
    if (P < 1 || P > step18::kMaxRanks) return usage("--ranks: each between 1 and 8");
  if (o.Hkv == 0) o.Hkv = o.H;
  if (o.H % o.Hkv) return usage("--hkv must divide --h");
  if (o.commit.empty() && std::getenv("FA_COMMIT")) o.commit = std::getenv("FA_COMMIT");
  if (o.commit.empty()) o.commit = "unknown";
  std::string why;
  if (!gpu_available(why)) {
    std::cerr << "ring_bench: no GPU: " << why << "\n";
    return 77;
  }
  const std::string device = gpu_device_spec().name;
  step18::set_comm_priority(o.comm_high);
  std::ofstream out(o.out);
  out << "date,commit,device,N,P,layout,causal,B,H,Hkv,d,dtype,t1_ms,ring_ms,serial_ms,crit_ms,busiest_ms,mean_rank_ms,"
         "imbalance,xfer_ms,link_ms,proj_ms,proj_eff,max_abs_diff,tol,check,status,comm_priority\n";
  std::ofstream tl;
  if (!o.timeline.empty()) {
    tl.open(o.timeline);
    tl << "N,P,layout,causal,mode,rank,step,what,t0_ms,t1_ms,comm_priority\n";
  }
  const auto t_start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count(); };
  int failed = 0;
  const StepInfo& per_shard = step12::info();

  for (int64_t N : o.ns)  // both masks at each N before the next, longer N
    for (int64_t causal : o.causal) {
      Shape s;
      s.B = o.B, s.H = o.H, s.Hkv = o.Hkv, s.N = s.Nk = N, s.d = o.d, s.causal = causal != 0;
      s.dtype = o.bf16 ? DType::bf16 : DType::f16;
      auto row_prefix = [&](int64_t P, Layout l) {
        std::ostringstream r;
        r << csv_date(true) << "," << o.commit << ",\"" << device << "\"," << N << "," << P << "," << (l == Layout::zigzag ? "zigzag" : "contiguous")
          << "," << causal << "," << o.B << "," << o.H << "," << o.Hkv << "," << o.d << "," << (o.bf16 ? "bf16" : "fp16");
        return r.str();
      };
      std::vector<std::pair<int64_t, Layout>> points;
      for (int64_t P : o.ranks) {
        points.push_back({P, Layout::zigzag});
        if (causal) points.push_back({P, Layout::contiguous});
      }
      if (elapsed() > o.budget_s) {
        for (auto [P, l] : points) out << row_prefix(P, l) << ",,,,,,,,,,,,,,,not run: budget," << (o.comm_high ? "high" : "normal") << "\n" << std::flush;
        std::cerr << "ring_bench: N=" << N << " causal=" << causal << ": not run (past --budget-s " << o.budget_s << ")\n";
        continue;
      }
      const int64_t qe = s.q_elems(), ke = s.kv_elems();
      DeviceBuffer q(size_t(qe) * 2), k(size_t(ke) * 2), v(size_t(ke) * 2), o1(size_t(qe) * 2), oring(size_t(qe) * 2),
          l1(size_t(s.rows()) * 4), lring(size_t(s.rows()) * 4), diff(4);
      rb_fill<<<4096, 256>>>(q.as<uint16_t>(), qe, 1, o.bf16);
      rb_fill<<<4096, 256>>>(k.as<uint16_t>(), ke, 2 * uint64_t(qe) + 7, o.bf16);
      rb_fill<<<4096, 256>>>(v.as<uint16_t>(), ke, 5 * uint64_t(qe) + 11, o.bf16);
      CUDA_CHECK_LAUNCH("rb_fill");
      AttnParams p;
      p.q = q.get(), p.k = k.get(), p.v = v.get(), p.o = o1.get(), p.lse = l1.as<float>();
      p.q_sb = o.H * N * o.d, p.q_sh = N * o.d, p.q_sn = o.d;
      p.k_sb = p.v_sb = o.Hkv * N * o.d, p.k_sh = p.v_sh = N * o.d, p.k_sn = p.v_sn = o.d;
      p.o_sb = p.q_sb, p.o_sh = p.q_sh, p.o_sn = o.d, p.lse_sb = o.H * N, p.lse_sh = N;
      p.B = o.B, p.H = o.H, p.Hkv = o.Hkv, p.N = p.Nk = int(N), p.d = o.d, p.causal = s.causal, p.bf16 = o.bf16;
      p.scale = float(s.softmax_scale());
      const double t1 = time_ms([&] { per_shard.launch(p, {}, nullptr); }, o.reps);
      std::cerr << "ring_bench: N=" << N << " causal=" << causal << ": step 12 on one GPU " << t1 << " ms\n";
      for (auto [P, l] : points) {
        const StepOptions so{{"ranks", std::to_string(P)}, {"shard", l == Layout::zigzag ? "zigzag" : "contiguous"}};
        DeviceBuffer ws(step18::workspace_bytes(s, so));
        AttnParams pr = p;
        pr.o = oring.get(), pr.lse = lring.as<float>(), pr.workspace = ws.get();
        step18::prepare(s, pr, so, nullptr);
        // NaN until the ring writes it: a row no launch writes fails the check below.
        CUDA_CHECK(cudaMemset(oring.get(), 0xFF, size_t(qe) * 2));
        CUDA_CHECK(cudaMemset(lring.get(), 0xFF, size_t(s.rows()) * 4));
        // The ring as P streams, with the timeline of its first (warm-up) run kept for the plot.
        step18::set_ring_mode(step18::RingMode::concurrent, true);
        step18::launch(pr, so, nullptr);
        const std::vector<step18::RingSpan> conc = step18::last_timeline();
        step18::set_ring_mode(step18::RingMode::concurrent, false);
        const double ring_ms = time_ms([&] { step18::launch(pr, so, nullptr); }, o.reps);
        CUDA_CHECK(cudaMemset(diff.get(), 0, 4));
        rb_maxdiff<<<2048, 256>>>(oring.as<uint16_t>(), o1.as<uint16_t>(), qe, o.bf16, diff.as<unsigned>());
        CUDA_CHECK_LAUNCH("rb_maxdiff");
        unsigned bits = 0;
        CUDA_CHECK(cudaMemcpy(&bits, diff.get(), 4, cudaMemcpyDeviceToHost));
        float maxdiff;
        std::memcpy(&maxdiff, &bits, 4);
        // Both are within a few units of the storage type's roundoff of the exact O (|V| <= 1.75).
        const double tol = 8.0 * (o.bf16 ? 0x1p-8 : 0x1p-11) * 1.75;
        const bool ok = maxdiff <= tol;
        failed += !ok;
        // Each rank's step alone (serial), the timeline of one run.
        step18::set_ring_mode(step18::RingMode::serial, true);
        cudaEvent_t a, b;
        CUDA_CHECK(cudaEventCreate(&a));
        CUDA_CHECK(cudaEventCreate(&b));
        CUDA_CHECK(cudaEventRecord(a, nullptr));
        step18::launch(pr, so, nullptr);
        CUDA_CHECK(cudaEventRecord(b, nullptr));
        CUDA_CHECK(cudaEventSynchronize(b));
        float serial_ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&serial_ms, a, b));
        CUDA_CHECK(cudaEventDestroy(a));
        CUDA_CHECK(cudaEventDestroy(b));
        const std::vector<step18::RingSpan> ser = step18::last_timeline();
        step18::set_ring_mode(step18::RingMode::concurrent, false);
        std::vector<std::vector<double>> comp(size_t(P), std::vector<double>(size_t(P), 0.0));
        double xfer = 0;
        int nx = 0;
        double spans_end = 0, first_begin = 1e30;
        for (const step18::RingSpan& sp : ser) {
          if (sp.transfer) xfer += sp.t1 - sp.t0, ++nx;
          else comp[size_t(sp.rank)][size_t(sp.step)] = sp.t1 - sp.t0;
          spans_end = std::max(spans_end, sp.t1);
          first_begin = std::min(first_begin, sp.t0);
        }
        xfer = nx ? xfer / nx : 0.0;
        const double rest = serial_ms - (spans_end - first_begin) > 0 ? serial_ms - (spans_end - first_begin) : 0.0;
        const double link_ms = double(step18::kv_bytes(step18::ring_of(s, so))) / (o.link_gbs * 1e9) * 1e3;
        // What is left of the serial run is every rank's start and finish, one after another: on P
        // GPUs each rank does its own, at the same time.
        double crit = 0, proj = rest / double(P), busiest = 0, mean = 0;
        for (int64_t t = 0; t < P; ++t) {
          double mx = 0;
          for (int64_t r = 0; r < P; ++r) mx = std::max(mx, comp[size_t(r)][size_t(t)]);
          crit += mx;
          proj += t + 1 < P ? std::max(mx, link_ms) : mx;
        }
        for (int64_t r = 0; r < P; ++r) {
          double tot = 0;
          for (int64_t t = 0; t < P; ++t) tot += comp[size_t(r)][size_t(t)];
          busiest = std::max(busiest, tot);
          mean += tot / double(P);
        }
        out << row_prefix(P, l) << "," << t1 << "," << ring_ms << "," << serial_ms << "," << crit << "," << busiest << "," << mean << ","
            << (mean > 0 ? busiest / mean : 0.0) << "," << xfer << "," << link_ms << "," << proj << "," << t1 / (double(P) * proj) << ","
            << maxdiff << "," << tol << "," << (ok ? "PASS" : "FAIL") << ",projected from one GPU," << (o.comm_high ? "high" : "normal") << "\n"
            << std::flush;
        std::cerr << "  P=" << P << " " << (l == Layout::zigzag ? "zigzag" : "contiguous") << ": ring on one GPU " << ring_ms
                  << " ms, critical path " << crit << " ms, projected " << proj << " ms on " << P << " GPUs (eff "
                  << t1 / (double(P) * proj) << "), check " << (ok ? "PASS" : "FAIL") << " (max diff " << maxdiff << ")\n";
        if (tl.is_open() && N == o.tl_n && P == o.tl_p)
          for (const auto* spans : {&conc, &ser})
            for (const step18::RingSpan& sp : *spans)
              tl << N << "," << P << "," << (l == Layout::zigzag ? "zigzag" : "contiguous") << "," << causal << ","
                 << (spans == &conc ? "concurrent" : "serial") << "," << sp.rank << "," << sp.step << "," << (sp.transfer ? "transfer" : "compute")
                 << "," << sp.t0 << "," << sp.t1 << "," << (o.comm_high ? "high" : "normal") << "\n";
      }
    }
  if (failed) std::cerr << "ring_bench: " << failed << " point(s) FAILED their check against step 12\n";
  return failed ? 1 : 0;
}
