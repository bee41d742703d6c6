// ring_nccl — step 18 over P GPUs: one process per GPU (rank), the K/V shards passed around the ring
// with ncclSend/ncclRecv on a communication stream while the compute stream runs step 12's forward
// on the shard held. Started by scripts/ring.sh (or mpirun), which gives each process its rank:
//
//   scripts/ring.sh P [--n 131072] [--b 1] [--h 8] [--hkv H] [--d 128] [--dtype bf16] [--causal 0|1]
//                     [--shard zigzag|contiguous] [--reps 3] [--check-rows 4] [--commit HASH] [--out FILE]
//
// Each rank draws only its own shard (a counter-based hash of each element's position in the whole
// sequence, so the P shards are one sequence), runs the ring, and checks --check-rows of its rows of
// head 0 against a double-precision reference on its CPU, computed from the same hash. Rank 0
// writes one CSV row: the ring's time (the slowest rank, median of --reps), the per-shard compute
// and the wait for transfers, and the check.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

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
#include <thread>
#include <vector>

#include "harness/csv.hpp"
#include "kernel/cuda_check.cuh"
#include "core/dtype.hpp"
#include "harness/gpu.hpp"
#include "schedule.hpp"

using namespace fa;
using fa::step18::Layout;

#define NCCL_CHECK(call)                                                                                             \
  do {                                                                                                               \
    const ncclResult_t e_ = (call);                                                                                  \
    if (e_ != ncclSuccess) throw std::runtime_error(std::string(#call) + " failed: " + ncclGetErrorString(e_));      \
  } while (0)

namespace {

// The value of element e of a tensor (its index in the whole sequence's [B, heads, n, d]).
__host__ __device__ inline float draw(uint64_t e, uint64_t seed) {
  uint64_t z = (e + seed) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const float u1 = float(z >> 40) * 0x1p-24f, u2 = float((z >> 16) & 0xffffff) * 0x1p-24f;
  return 0.25f + 1.5f * (u1 + u2 - 1.0f);
}

// A rank's shard of a [B, heads, n, d] tensor, drawn into its buffer [B, heads, rows, d].
__global__ void rn_fill_shard(uint16_t* dst, step18::Shard s, int64_t B, int64_t heads, int64_t n, int64_t rows, int d,
                              uint64_t seed, bool bf16) {
  const int64_t total = B * heads * s.size() * d;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = e % d, i = (e / d) % s.size(), bh = e / (d * s.size());
    const int p = i < s.part[0].size() ? 0 : 1;
    const int64_t pos = s.part[p].lo + i - s.offset(p);
    const float v = draw(uint64_t((bh * n + pos) * d + c), seed);
    dst[(bh * rows + i) * d + c] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
  }
}

int env_int(std::initializer_list<const char*> names, int fallback) {
  for (const char* n : names)
    if (const char* v = std::getenv(n)) return std::atoi(v);
  return fallback;
}

// Rank 0 makes the communicator's id and leaves it in FA_NCCL_ID (written, then renamed, so a reader
// never sees half of it); the others wait for the file (60 s at most).
ncclUniqueId exchange_id(int rank) {
  const char* path = std::getenv("FA_NCCL_ID");
  if (!path) throw std::runtime_error("FA_NCCL_ID is not set: start ring_nccl through scripts/ring.sh");
  ncclUniqueId id;
  if (rank == 0) {
    NCCL_CHECK(ncclGetUniqueId(&id));
    const std::string tmp = std::string(path) + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(id.internal, sizeof id.internal);
    if (std::rename(tmp.c_str(), path) != 0) throw std::runtime_error(std::string("cannot write ") + path);
    return id;
  }
  for (int tries = 0; tries < 6000; ++tries) {
    std::ifstream f(path, std::ios::binary);
    if (f && f.read(id.internal, sizeof id.internal)) return id;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  throw std::runtime_error(std::string("rank ") + std::to_string(rank) + ": no communicator id in " + path + " after 60 s");
}

}  // namespace

int main(int argc, char** argv) {
  const int rank = env_int({"FA_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, -1);
  const int P = env_int({"FA_WORLD", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, -1);
  const int local = env_int({"FA_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}, rank);
  if (rank < 0 || P < 1) {
    std::cerr << "ring_nccl: no rank (FA_RANK/FA_WORLD, or mpirun's): start it as scripts/ring.sh P [flags]\n";
    return 2;
  }
  if (P > step18::kMaxRanks) {
    std::cerr << "ring_nccl: at most " << step18::kMaxRanks << " ranks\n";
    return 2;
  }
  int64_t N = 131072;
  int B = 1, H = 8, Hkv = 0, d = 128, reps = 3, check_rows = 4;
  bool bf16 = true, causal = true;
  Layout layout = Layout::zigzag;
  std::string out, commit = std::getenv("FA_COMMIT") ? std::getenv("FA_COMMIT") : "unknown";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::cerr << "ring_nccl: " << a << " needs a value\n";
      return 2;
    }
    const std::string v = argv[++i];
    try {
      if (a == "--n") N = std::stoll(v);
      else if (a == "--b") B = std::stoi(v);
      else if (a == "--h") H = std::stoi(v);
      else if (a == "--hkv") Hkv = std::stoi(v);
      else if (a == "--d") d = std::stoi(v);
      else if (a == "--dtype") bf16 = v == "bf16";
      else if (a == "--causal") causal = v != "0";
      else if (a == "--shard") layout = v == "contiguous" ? Layout::contiguous : Layout::zigzag;
      else if (a == "--reps") reps = std::stoi(v);
      else if (a == "--check-rows") check_rows = std::stoi(v);
      else if (a == "--commit") commit = v;
      else if (a == "--out") out = v;
      else {
        std::cerr << "ring_nccl: unknown flag " << a << "\n";
        return 2;
      }
    } catch (const std::exception&) {
      std::cerr << "ring_nccl: " << a << " " << v << " is not a number\n";
      return 2;
    }
  }
  if (Hkv == 0) Hkv = H;
  if (d != 64 && d != 128) {
    std::cerr << "ring_nccl: --d must be 64 or 128\n";
    return 2;
  }
  try {
    int devices = 0;
    CUDA_CHECK(cudaGetDeviceCount(&devices));
    if (devices < 1) throw std::runtime_error("no CUDA device");
    CUDA_CHECK(cudaSetDevice(local % devices));
    const ncclUniqueId id = exchange_id(rank);
    ncclComm_t comm;
    NCCL_CHECK(ncclCommInitRank(&comm, P, id, rank));

    step18::Ring g;
    g.B = B, g.H = H, g.Hkv = Hkv, g.N = int(N), g.Nk = int(N), g.d = d, g.causal = causal, g.bf16 = bf16;
    g.scale = float(1.0 / std::sqrt(double(d))), g.P = P, g.layout = layout;
    DeviceBuffer mem(step18::rank_bytes(g));
    CUDA_CHECK(cudaMemset(mem.get(), 0xFF, step18::rank_bytes(g)));
    const step18::RankMem m = step18::rank_mem(g, mem.get());
    const step18::Shard sq = step18::shard_of(layout, P, rank, N);
    const uint64_t seed_q = 1, seed_k = 1000003, seed_v = 2000029;
    if (sq.size()) {
      rn_fill_shard<<<2048, 256>>>(static_cast<uint16_t*>(m.q), sq, B, H, N, g.nq(), d, seed_q, bf16);
      rn_fill_shard<<<2048, 256>>>(static_cast<uint16_t*>(m.kv[0]), sq, B, Hkv, N, g.nk(), d, seed_k, bf16);
      rn_fill_shard<<<2048, 256>>>(reinterpret_cast<uint16_t*>(static_cast<unsigned char*>(m.kv[0]) + step18::kv_bytes(g) / 2), sq, B,
                                   Hkv, N, g.nk(), d, seed_v, bf16);
      CUDA_CHECK_LAUNCH("rn_fill_shard");
    }
    DeviceBuffer o(size_t(B) * H * N * d * 2), l(size_t(B) * H * N * 4);
    CUDA_CHECK(cudaMemset(o.get(), 0xFF, size_t(B) * H * N * d * 2));  // NaN until the ring writes it: the check reads it
    CUDA_CHECK(cudaMemset(l.get(), 0xFF, size_t(B) * H * N * 4));
    cudaStream_t comp, xfer;
    CUDA_CHECK(cudaStreamCreateWithFlags(&comp, cudaStreamNonBlocking));
    int least = 0, greatest = 0;  // [priority] NCCL's kernels first onto SMs the attention frees
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CUDA_CHECK(cudaStreamCreateWithPriority(&xfer, cudaStreamNonBlocking, greatest));
    std::vector<cudaEvent_t> arrived(static_cast<size_t>(P) + 1), computed(static_cast<size_t>(P));
    for (auto& e : arrived) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    for (auto& e : computed) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    cudaEvent_t t0, t1;
    CUDA_CHECK(cudaEventCreate(&t0));
    CUDA_CHECK(cudaEventCreate(&t1));
    const int next = (rank + 1) % P, prev = (rank + P - 1) % P;
    float* sync_buf = nullptr;
    CUDA_CHECK(cudaMalloc(&sync_buf, sizeof(float)));

    // [ring] One call: the same schedule as the P-streams launcher, with NCCL as the transport.
    auto ring = [&] {
      step18::enqueue_init(g, m, comp);
      for (int t = 0; t < P; ++t) {
        if (t + 1 < P) {
          // receive into the buffer of step t + 1 once its last compute (step t − 1) is done; send
          // the one held at step t (received at step t − 1, earlier on this stream)
          if (t >= 2) CUDA_CHECK(cudaStreamWaitEvent(xfer, computed[size_t(t - 1)], 0));
          NCCL_CHECK(ncclGroupStart());
          NCCL_CHECK(ncclSend(m.kv[step18::held(t)], step18::kv_bytes(g), ncclUint8, next, comm, xfer));
          NCCL_CHECK(ncclRecv(m.kv[step18::held(t + 1)], step18::kv_bytes(g), ncclUint8, prev, comm, xfer));
          NCCL_CHECK(ncclGroupEnd());
          CUDA_CHECK(cudaEventRecord(arrived[size_t(t + 1)], xfer));
        }
        if (t >= 1) CUDA_CHECK(cudaStreamWaitEvent(comp, arrived[size_t(t)], 0));
        step18::enqueue_step(g, m, rank, t, comp);
        CUDA_CHECK(cudaEventRecord(computed[size_t(t)], comp));
      }
      step18::enqueue_finish(g, m, rank, o.get(), int64_t(H) * N * d, N * d, d, l.as<float>(), int64_t(H) * N, N, comp);
    };
    // All ranks start together: an all-reduce before the timed call.
    auto barrier = [&] {
      NCCL_CHECK(ncclAllReduce(sync_buf, sync_buf, 1, ncclFloat, ncclSum, comm, comp));
      CUDA_CHECK(cudaStreamSynchronize(comp));
    };
    std::vector<float> times;
    for (int rep = 0; rep <= reps; ++rep) {  // rep 0: the warm-up
      barrier();
      CUDA_CHECK(cudaEventRecord(t0, comp));
      ring();
      CUDA_CHECK(cudaEventRecord(t1, comp));
      CUDA_CHECK(cudaEventSynchronize(t1));
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
      if (rep) times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    float med = times.empty() ? 0.0f : times[times.size() / 2];

    // [transport] With one rank there is nothing to pass on: send the home K/V buffer to this rank
    // itself through NCCL, into a ring buffer, and compare the bytes — the transport, checked on one GPU.
    bool loop_ok = true;
    if (P == 1) {
      NCCL_CHECK(ncclGroupStart());
      NCCL_CHECK(ncclSend(m.kv[0], step18::kv_bytes(g), ncclUint8, 0, comm, xfer));
      NCCL_CHECK(ncclRecv(m.kv[1], step18::kv_bytes(g), ncclUint8, 0, comm, xfer));
      NCCL_CHECK(ncclGroupEnd());
      CUDA_CHECK(cudaStreamSynchronize(xfer));
      std::vector<unsigned char> a(step18::kv_bytes(g)), b(step18::kv_bytes(g));
      CUDA_CHECK(cudaMemcpy(a.data(), m.kv[0], a.size(), cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemcpy(b.data(), m.kv[1], b.size(), cudaMemcpyDeviceToHost));
      loop_ok = a == b;
      std::cout << "ring_nccl: ncclSend/ncclRecv to itself, " << a.size() << " bytes: " << (loop_ok ? "identical" : "DIFFERENT") << "\n";
    }

    // [check] Rows of head (0, 0) against a double-precision reference from the same hash.
    const DType dt = bf16 ? DType::bf16 : DType::f16;
    std::vector<uint16_t> orow(static_cast<size_t>(d));
    double worst = 0.0;
    int checked = 0;
    const int64_t delta = 0;  // N = Nk: causal is plain top-left here
    for (int k = 0; k < check_rows && sq.size() > 0; ++k) {
      const int64_t li = (sq.size() - 1) * k / std::max(1, check_rows - 1);
      const int p = li < sq.part[0].size() ? 0 : 1;
      const int64_t i = sq.part[p].lo + li - sq.offset(p);
      const int64_t keys = causal ? i + delta + 1 : N;
      std::vector<double> qv(static_cast<size_t>(d)), acc(static_cast<size_t>(d), 0.0);
      for (int c = 0; c < d; ++c) qv[size_t(c)] = round_to(dt, draw(uint64_t(i * d + c), seed_q));
      double mx = -1e300, sum = 0.0;
      std::vector<double> s(static_cast<size_t>(keys));
      for (int64_t j = 0; j < keys; ++j) {
        double x = 0;
        for (int c = 0; c < d; ++c) x += qv[size_t(c)] * round_to(dt, draw(uint64_t(j * d + c), seed_k));
        s[size_t(j)] = x * g.scale;
        mx = std::max(mx, s[size_t(j)]);
      }
      for (int64_t j = 0; j < keys; ++j) {
        const double w = std::exp(s[size_t(j)] - mx);
        sum += w;
        for (int c = 0; c < d; ++c) acc[size_t(c)] += w * round_to(dt, draw(uint64_t(j * d + c), seed_v));
      }
      CUDA_CHECK(cudaMemcpy(orow.data(), static_cast<uint16_t*>(o.get()) + i * d, size_t(d) * 2, cudaMemcpyDeviceToHost));
      for (int c = 0; c < d; ++c) {
        const double got = from_bits(dt, orow[size_t(c)]), e = std::fabs(got - acc[size_t(c)] / sum);
        worst = std::isfinite(e) ? std::max(worst, e) : INFINITY;
      }
      ++checked;
    }
    const double tol = 4.0 * (bf16 ? 0x1p-8 : 0x1p-11) * 1.75 + 1e-6;
    float stats[3] = {med, float(worst), float(checked)};
    float* dstats = nullptr;
    CUDA_CHECK(cudaMalloc(&dstats, sizeof stats));
    CUDA_CHECK(cudaMemcpy(dstats, stats, sizeof stats, cudaMemcpyHostToDevice));
    NCCL_CHECK(ncclAllReduce(dstats, dstats, 2, ncclFloat, ncclMax, comm, comp));  // the slowest rank, the worst row
    NCCL_CHECK(ncclAllReduce(dstats + 2, dstats + 2, 1, ncclFloat, ncclSum, comm, comp));
    CUDA_CHECK(cudaMemcpy(stats, dstats, sizeof stats, cudaMemcpyDeviceToHost));
    const bool pass = std::isfinite(stats[1]) && stats[1] <= tol && stats[2] > 0 && loop_ok;
    if (rank == 0) {
      std::ostringstream row;
      row << csv_date(true) << "," << commit << ",\"" << gpu_device_spec().name << "\"," << N << "," << P << ","
          << (layout == Layout::zigzag ? "zigzag" : "contiguous") << "," << int(causal) << "," << B << "," << H << "," << Hkv << "," << d
          << "," << (bf16 ? "bf16" : "fp16") << "," << stats[0] << "," << stats[1] << "," << tol << "," << int(stats[2]) << ","
          << (pass ? "PASS" : "FAIL") << "\n";
      std::cout << "ring_nccl: P=" << P << " N=" << N << " " << (causal ? "causal" : "full") << ": " << stats[0] << " ms (slowest rank, median of "
                << reps << "), check " << (pass ? "PASS" : "FAIL") << " (max |dO| " << stats[1] << " over " << int(stats[2])
                << " rows, tol " << tol << ")\n";
      if (!out.empty()) {
        const bool fresh = !std::ifstream(out).good();
        std::ofstream f(out, std::ios::app);
        if (fresh) f << "date,commit,device,N,P,layout,causal,B,H,Hkv,d,dtype,ring_ms,max_abs_diff,tol,rows_checked,check\n";
        f << row.str();
      }
    }
    ncclCommDestroy(comm);
    return pass ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "ring_nccl rank " << rank << ": " << e.what() << "\n";
    return 1;
  }
}
