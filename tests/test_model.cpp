// The per-resource model (common/perf/model.hpp): occupancy, coverage, each term against its formula,
// the overlap rule, the ceilings file and the recorded launches' round trip.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <tuple>

#include "perf/launches.hpp"
#include "perf/model.hpp"
#include "core/problem.hpp"
#include "harness/runner.hpp"

using namespace fa;

namespace {

// An H200-like device with round numbers, so each term can be worked out by hand.
Ceilings round_device() {
  DeviceSpec d = h200_datasheet();
  d.sm_clock_hz = 2e9;
  Ceilings c = ceilings_for(d);
  c.sms = 100;
  c.smem_per_sm = 228 * 1024;
  c.hbm_read = c.hbm_write = 4e12;
  c.l2_read = 1e13;
  c.smem_read = c.smem_write = c.ldmatrix = 3e13;
  c.wmma = c.mma_sync = 6e14;
  c.wgmma = 9e14;
  c.fma = 5e13;
  c.ex2 = 4e12;
  c.issue = 8e11;
  c.barrier = 3e10;
  c.atomic = 1e12;
  c.hbm_latency_ns = 350;
  c.l2_latency_ns = 150;
  c.barrier_latency_ns = 10;
  c.launch_us = 0;  // no launch cost: the terms alone
  return c;
}

KernelLaunch launch(const std::string& name, int64_t blocks, int threads, int regs, int64_t smem) {
  KernelLaunch k;
  k.name = name;
  k.blocks = blocks;
  k.threads = threads;
  k.regs = regs;
  k.smem = smem;
  return k;
}

const Term* term(const KernelModel& k, const std::string& r) {
  for (const Term& t : k.terms)
    if (t.resource == r) return &t;
  return nullptr;
}

}  // namespace

TEST_CASE("model: blocks per SM come from the scarcest of threads, registers and shared memory") {
  const Ceilings c = round_device();
  LedgerSet ls;
  ls["k"].matmul_flops = 1'000'000'000;
  struct Case { KernelLaunch l; int want; const char* limit; };
  const Case cases[] = {
      {launch("k", 10000, 128, 255, 0), 2, "registers"},        // 256 regs/thread·128 = 32k: two fit in 64k
      {launch("k", 10000, 128, 32, 100 * 1024), 2, "shared memory"},  // (100 KB + 1 KB) twice in 228 KB
      {launch("k", 10000, 1024, 32, 0), 2, "threads"},          // 2048 threads per SM
      {launch("k", 10000, 32, 16, 0), 32, "blocks"},            // at most 32 blocks
  };
  for (const Case& x : cases) {
    const ModelPrediction m = model_predict(ls, {x.l}, MmaUnit::mma_sync, c);
    REQUIRE(m.kernels.size() == 1);
    CHECK(m.kernels[0].blocks_per_sm == x.want);
    CHECK(m.kernels[0].occupancy_limit == x.limit);
  }
}

TEST_CASE("model: a grid smaller than the GPU works at its coverage, a thin last wave likewise") {
  const Ceilings c = round_device();
  LedgerSet ls;
  ls["k"].matmul_flops = 6'000'000'000'000;  // 10 ms at 6e14 FLOP/s on the whole GPU
  const double full = 6e12 / c.mma_sync * 1e3;
  const ModelPrediction half = model_predict(ls, {launch("k", 50, 512, 64, 0)}, MmaUnit::mma_sync, c);
  CHECK(half.kernels[0].coverage == doctest::Approx(0.5));
  CHECK(term(half.kernels[0], "tensor")->ms == doctest::Approx(2 * full));
  // 150 blocks on 100 SMs: the busiest SM runs two, so the GPU works at 150 / 200 of its width.
  const ModelPrediction tail = model_predict(ls, {launch("k", 150, 512, 64, 0)}, MmaUnit::mma_sync, c);
  CHECK(tail.kernels[0].coverage == doctest::Approx(0.75));
  CHECK(term(tail.kernels[0], "tensor")->ms == doctest::Approx(full / 0.75));
}

TEST_CASE("model: each term is its work over its ceiling, on its MMA path") {
  const Ceilings c = round_device();
  LedgerSet ls;
  Ledger& l = ls["k"];
  l.gmem_read = 4'000'000'000;
  l.gmem_write = 4'000'000'000;
  l.smem_read = l.smem_write = 30'000'000'000;
  l.matmul_flops = 900'000'000'000;
  l.nonmatmul_ops = 6'000'000'000;
  l.exps = 4'000'000'000;
  const std::vector<KernelLaunch> full = {launch("k", 100 * 16, 256, 32, 0)};  // 16 waves of 8 blocks: coverage 1
  const ModelPrediction m = model_predict(ls, full, MmaUnit::wgmma, c);
  const KernelModel& k = m.kernels[0];
  CHECK(k.coverage == doctest::Approx(1.0));
  CHECK(term(k, "hbm")->ms == doctest::Approx(2.0).epsilon(1e-6));     // 4 GB / 4 TB/s read + the same written
  CHECK(term(k, "l2")->ms == doctest::Approx(0.8).epsilon(1e-6));      // 8 GB / 10 TB/s
  CHECK(term(k, "smem")->ms == doctest::Approx(2.0).epsilon(1e-6));    // 60 GB / 30 TB/s
  CHECK(term(k, "tensor")->ms == doctest::Approx(1.0).epsilon(1e-6));  // wgmma's 9e14
  CHECK(term(k, "ex2")->ms == doctest::Approx(1.0).epsilon(1e-6));     // 4e9 / 4e12
  CHECK(term(k, "fma")->ms == doctest::Approx(0.08).epsilon(1e-6));    // the 2e9 other ops, 2 FLOPs each, at 5e13
  // The same ledger on mma.sync: the tensor term at that path's ceiling.
  const ModelPrediction ms = model_predict(ls, full, MmaUnit::mma_sync, c);
  CHECK(term(ms.kernels[0], "tensor")->ms == doctest::Approx(1.5).epsilon(1e-6));
  // HBM capped by the tensors: re-reads are L2's.
  const ModelPrediction capped = model_predict(ls, full, MmaUnit::wgmma, c, 1e9);
  CHECK(term(capped.kernels[0], "hbm")->ms == doctest::Approx(1.25).epsilon(1e-6));  // 1 GB read + 4 GB written
}

TEST_CASE("model: with few warps per scheduler the pipes overlap less, and the bound says so") {
  const Ceilings c = round_device();
  LedgerSet ls;
  ls["k"].matmul_flops = 600'000'000'000;           // 1 ms of mma.sync
  ls["k"].smem_read = 30'000'000'000;                // 1 ms of shared memory
  // 16 warps per SM (4 per scheduler): 1 + 1/4 ms; 4 warps per SM (1 per scheduler): 2 ms.
  const ModelPrediction many = model_predict(ls, {launch("k", 400, 128, 64, 0)}, MmaUnit::mma_sync, c);
  CHECK(many.kernels[0].warps_per_scheduler == doctest::Approx(4.0));
  CHECK(many.ms == doctest::Approx(1.25).epsilon(1e-3));
  const ModelPrediction few = model_predict(ls, {launch("k", 100, 128, 64, 0)}, MmaUnit::mma_sync, c);
  CHECK(few.kernels[0].warps_per_scheduler == doctest::Approx(1.0));
  CHECK(few.ms >= 2.0 * 0.999);
  CHECK(few.bound_by.find("+serial") != std::string::npos);
  // One resource alone: nothing to overlap, the bound is that resource.
  LedgerSet one;
  one["k"].smem_read = 30'000'000'000;
  const ModelPrediction m1 = model_predict(one, {launch("k", 400, 128, 64, 0)}, MmaUnit::mma_sync, c);
  CHECK(m1.bound_by == "smem");
  CHECK(m1.ms == doctest::Approx(1.0).epsilon(1e-3));  // 30 GB at 30 TB/s
}

TEST_CASE("model: a kernel without a recorded launch is modelled and says so, and kernels add up") {
  const Ceilings c = round_device();
  LedgerSet ls;
  ls["a"].gmem_write = 4'000'000'000;
  ls["b"].gmem_write = 8'000'000'000;
  const ModelPrediction m = model_predict(ls, {launch("a", 1600, 256, 32, 0)}, MmaUnit::none, c);
  REQUIRE(m.kernels.size() == 2);
  CHECK(m.kernels[0].launch_known);
  CHECK_FALSE(m.kernels[1].launch_known);
  CHECK(m.kernels[1].occupancy_limit == "launch not recorded");
  CHECK(m.ms == doctest::Approx(m.kernels[0].ms + m.kernels[1].ms));
  CHECK(m.bound_by == "hbm");
  CHECK(m.kernels[1].ms > m.kernels[0].ms);
}

TEST_CASE("model: the ceilings file gives this device's measured rows, and refuses a broken one") {
  const std::string path = "fa_model_test_peaks.csv";
  {
    std::ofstream f(path);
    f << "date,commit,cuda,driver,device,peak,unit,value,amount,reps,ms\n"
         "d,c,13.0,580,NVIDIA H200,hbm-read,bytes/s,4.4e12,1,10,1\n"
         "d,c,13.0,580,Other GPU,hbm-read,bytes/s,1e12,1,10,1\n"
         "d,c,13.0,580,NVIDIA H200,ex2,ops/s,3.6e12,1,10,1\n";
  }
  DeviceSpec d = h200_datasheet();  // "NVIDIA H200 (datasheet)": takes the H200's rows
  Ceilings c = ceilings_for(d);
  CHECK(apply_peaks_csv(c, path) == 2);
  CHECK(c.hbm_read == doctest::Approx(4.4e12));
  CHECK(c.ex2 == doctest::Approx(3.6e12));
  CHECK(std::find(c.assumed.begin(), c.assumed.end(), "hbm-read") == c.assumed.end());
  CHECK(std::find(c.assumed.begin(), c.assumed.end(), "l2-read") != c.assumed.end());
  {
    std::ofstream f(path);
    f << "date,device,peak,value\nd,NVIDIA H200,ex2,fast\n";
  }
  Ceilings c2 = ceilings_for(d);
  CHECK_THROWS_WITH_AS(apply_peaks_csv(c2, path), doctest::Contains("not a number"), std::runtime_error);
  {
    std::ofstream f(path);
    f << "date,device,peak\n";
  }
  CHECK_THROWS_WITH_AS(apply_peaks_csv(c2, path), doctest::Contains("no column 'value'"), std::runtime_error);
  std::remove(path.c_str());
  CHECK_THROWS_AS(apply_peaks_csv(c2, "no/such/file.csv"), std::runtime_error);
}

TEST_CASE("launches: the ledger's names from the GPU's, and the CSV field's round trip") {
  CHECK(ledger_name_of("void fa::step01_scores<__half, 128>(fa::AttnParams, float*)") == "scores");
  CHECK(ledger_name_of("fa::step12_warp_tiling(fa::AttnParams)") == "warp_tiling");
  CHECK(ledger_name_of("void cutlass::Kernel<x>(y)") == "Kernel");
  CHECK(ledger_name_of("nvjet_sm90_hss_256x128") == "nvjet_sm90_hss_256x128");
  const std::vector<KernelLaunch> v = {launch("scores", 262144, 128, 80, 38912), launch("pv", 4096, 128, 96, 30720)};
  const std::string f = format_launches(v);
  CHECK(f == "scores:262144:128:80:38912;pv:4096:128:96:30720");
  const std::vector<KernelLaunch> back = parse_launches(f);
  REQUIRE(back.size() == 2);
  CHECK(back[1].name == "pv");
  CHECK(back[0].blocks == 262144);
  CHECK(back[1].smem == 30720);
  CHECK(parse_launches("").empty());
  CHECK_THROWS_AS(parse_launches("scores:1:2"), std::invalid_argument);
}

TEST_CASE("model: the tensors' bytes, the floor of what HBM delivers") {
  Shape s;
  s.B = 2;
  s.H = 4;
  s.N = 8;
  s.Nk = 16;
  s.d = 32;
  // Q and O 2·4·8·32 elements each, K and V 2·4·16·32, 2 bytes each; L 2·4·8 floats.
  const double fwd = 2.0 * (2 * 2048 + 2 * 4096) + 4.0 * 64;
  CHECK(model_tensor_bytes(s, false) == doctest::Approx(fwd));
  CHECK(model_tensor_bytes(s, true) == doctest::Approx(2 * fwd));
}

namespace {
// One row of a SASS profile: loop `loop` of kernel k (its own code: instructions, chain, work by class).
SassLoop node(int loop, int parent, const std::string& kind, int64_t bound, int64_t step, int64_t instr, double chain,
              std::map<std::string, double> work = {}, const std::string& function = "_Zk") {
  SassLoop l;
  l.step = "03";
  l.kernel = "k";
  l.function = function;
  l.regs_used = 126;
  l.dtype = "fp16";
  l.d = 64;
  l.loop = loop;
  l.parent = parent;
  l.trip_kind = kind;
  l.trip_bound = bound;
  l.trip_step = step;
  l.instructions = instr;
  l.chain_cycles = l.chain_cycles_hbm = chain;
  l.work = std::move(work);
  return l;
}
}  // namespace

TEST_CASE("model [latency]: one warp's path through the loop tree, the hot loop's trips from the ledger's barriers") {
  const Ceilings c = round_device();  // 100 SMs at 2 GHz
  LedgerSet ls;
  ls["k"].barriers = int64_t(400) * 1000;  // 400 blocks, 1000 barriers each
  // 400 blocks of 128 threads (4 warps), 128 registers: 4 resident per SM (16 warps, W = 4 per
  // scheduler), 4 per SM: one round.
  const std::vector<KernelLaunch> l = {launch("k", 400, 128, 128, 0)};
  std::vector<SassLoop> code = {
      node(-1, -2, "once", 1, 0, 30, 900),                     // outside the loops: once
      node(0, -1, "runtime", 0, 0, 50, 500, {{"bar", 1}}),      // the tile loop: one barrier a trip
      node(1, 0, "ntid", 512, 0, 10, 40),                       // a strided load: 512 / 128 threads = 4 trips
      node(2, 0, "imm", 6, 2, 5, 20)};                          // 6 / 2 = 3 trips
  ModelPrediction m = model_predict(ls, l, MmaUnit::mma_sync, c, 0, code);
  const KernelModel& k = m.kernels.at(0);
  CHECK(k.marker == "bar");
  CHECK(k.hot_loop == 0);
  CHECK(k.hot_trips == doctest::Approx(1000));
  CHECK(k.path_cycles == doctest::Approx(900 + 1000 * (500 + 4 * 40 + 3 * 20)));
  CHECK(k.path_instructions == doctest::Approx(30 + 1000 * (50 + 4 * 10 + 3 * 5)));
  CHECK(k.latency_by == "chain");  // 4 warps issue 4 · 105 030 < 720 900
  CHECK(k.latency_ms == doctest::Approx((900 + 1000 * 720.0) / 2e9 * 1e3));
  REQUIRE(term(k, "latency"));
  REQUIRE(!k.path_loops.empty());
  CHECK(k.path_loops.front().loop == 0);  // the largest part of the path: 500 of 720 cycles a trip
  // 200 instructions a trip: 4 warps issue more than one warp's chain takes.
  code[1].instructions = 200;
  m = model_predict(ls, l, MmaUnit::mma_sync, c, 0, code);
  CHECK(m.kernels.at(0).latency_by == "issue");
  CHECK(m.kernels.at(0).latency_ms == doctest::Approx(4 * (30 + 1000 * (200 + 40 + 15.0)) / 2e9 * 1e3));
  // Twice the blocks, the same barriers per block: two rounds per SM, each as long.
  ls["k"].barriers *= 2;
  const ModelPrediction two = model_predict(ls, {launch("k", 800, 128, 128, 0)}, MmaUnit::mma_sync, c, 0, code);
  CHECK(two.kernels.at(0).hot_trips == doctest::Approx(1000));
  CHECK(two.kernels.at(0).latency_ms == doctest::Approx(2 * m.kernels.at(0).latency_ms));
  // Without a listing for the kernel: no term.
  m = model_predict(ls, l, MmaUnit::mma_sync, c, 0, {});
  CHECK(m.kernels.at(0).latency_ms == 0);
  CHECK(!term(m.kernels.at(0), "latency"));
}

TEST_CASE("model [latency]: a barrier-free kernel counts its trips by its MMAs, and a runtime load loop by its bytes") {
  const Ceilings c = round_device();
  LedgerSet ls;
  ls["k"].matmul_flops = int64_t(400) * 4 * 4096 * 1000;  // per warp: 1000 trips of one 4096-FLOP HMMA
  ls["k"].gmem_read = int64_t(400) * 4 * 1000 * 8 * 512;  // per warp and trip: 8 loads of 512 bytes
  const std::vector<KernelLaunch> l = {launch("k", 400, 128, 128, 0)};
  const std::vector<SassLoop> code = {node(-1, -2, "once", 1, 0, 30, 900), node(0, -1, "runtime", 0, 0, 50, 500, {{"mma", 4096}}),
                                      node(1, 0, "runtime", 0, 0, 7, 300, {{"gmem", 512}})};
  const KernelModel k = model_predict(ls, l, MmaUnit::mma_sync, c, 0, code).kernels.at(0);
  CHECK(k.marker == "mma");
  CHECK(k.hot_trips == doctest::Approx(1000));
  // loop 1's bound is the problem's: its trips are what brings the warp's bytes to the ledger's, 8.
  CHECK(k.path_cycles == doctest::Approx(900 + 1000 * (500 + 8 * 300)));
}

TEST_CASE("model [latency]: an outer loop's own barrier does not make it the hot loop") {
  const Ceilings c = round_device();
  LedgerSet ls;
  ls["k"].barriers = int64_t(400) * (10 * 64 * 64 + 64);  // 64 outer trips of (1 + 64 inner trips of 10 barriers)
  const std::vector<KernelLaunch> l = {launch("k", 400, 128, 128, 0)};
  const std::vector<SassLoop> code = {node(-1, -2, "once", 1, 0, 1, 1), node(0, -1, "runtime", 0, 0, 5, 50, {{"bar", 1}}),
                                      node(1, 0, "runtime", 0, 0, 50, 500, {{"bar", 10}})};
  const KernelModel k = model_predict(ls, l, MmaUnit::mma_sync, c, 0, code).kernels.at(0);
  CHECK(k.hot_loop == 1);  // its subtree holds 10 of the listing's 11 barriers
  // The outer loop keeps one trip (its count is not in the listing); the inner one takes the rest.
  CHECK(k.hot_trips == doctest::Approx((10.0 * 64 * 64 + 64 - 1) / 10.0));
}

TEST_CASE("model [latency]: a one-row-per-warp loop takes its trips from its bytes, not its lane-copied exponentials") {
  // Step 02's shape: one query row per warp, the lanes split d, every lane computes the same two
  // exponentials per key (the listing counts a MUFU as 32), and each lane loads its own slice of K
  // and V. The code outside the loop (an odd last key, the tail) moves more bytes than one trip.
  const Ceilings c = round_device();
  const int64_t warps = 400 * 4, keys = 4096, row_bytes = 256;
  LedgerSet ls;
  ls["k"].exps = warps * 2 * keys;                  // two per key and row, counted once each
  ls["k"].gmem_read = warps * 2 * row_bytes * keys;  // a K row and a V row per key
  const std::vector<KernelLaunch> l = {launch("k", 400, 128, 40, 0)};
  const double root_bytes = 5 * row_bytes, trip_bytes = 2 * 2 * row_bytes;  // two keys a trip
  const std::vector<SassLoop> code = {
      node(-1, -2, "once", 1, 0, 300, 3000, {{"gmem", root_bytes}, {"sfu", 64}}),
      node(0, -1, "runtime", 0, 0, 141, 1400, {{"gmem", trip_bytes}, {"sfu", 2 * 2 * 32}})};
  const KernelModel k = model_predict(ls, l, MmaUnit::mma_sync, c, 0, code).kernels.at(0);
  CHECK(k.marker == "gmem");
  CHECK(k.hot_loop == 0);  // the root's bytes (more than one trip's) do not stand in its way
  const double trips = (double(ls["k"].gmem_read) / double(warps) - root_bytes) / trip_bytes;
  CHECK(k.hot_trips == doctest::Approx(trips));
  CHECK(std::abs(trips - keys / 2.0) < 2);  // the kernel's trips, two keys each, less the root's few
  // By the exponentials it would have been 32 times fewer trips: the lanes' copies, not the ledger's.
  const double by_sfu = (double(ls["k"].exps) / double(warps) - 64) / (2 * 2 * 32);
  CHECK(trips / by_sfu == doctest::Approx(32).epsilon(0.01));
}

TEST_CASE("model [latency]: no loop is hot when every barrier is outside the loops") {
  // Step 01's softmax: its barriers sit between its row loops, none inside one. No loop can stand for
  // the ledger's barriers, so none is hot; the row loops take their trips from their bytes.
  const Ceilings c = round_device();
  LedgerSet ls;
  ls["k"].barriers = 400 * 4;
  ls["k"].gmem_read = int64_t(400) * 4 * (256 + 3 * 22 * 128);  // per warp: the root's, then 22 trips of each loop
  const std::vector<SassLoop> code = {node(-1, -2, "once", 1, 0, 300, 1600, {{"bar", 4}, {"gmem", 256}}),
                                      node(0, -1, "runtime", 0, 0, 9, 330, {{"gmem", 128}}),
                                      node(1, -1, "runtime", 0, 0, 19, 360, {{"gmem", 128}}),
                                      node(2, -1, "runtime", 0, 0, 29, 420, {{"gmem", 128}})};
  const KernelModel k = model_predict(ls, {launch("k", 400, 128, 40, 0)}, MmaUnit::mma_sync, c, 0, code).kernels.at(0);
  CHECK(k.marker == "bar");
  CHECK(k.hot_loop == -1);
  CHECK(k.path_cycles == doctest::Approx(1600 + 22 * (330 + 360 + 420)));
}

TEST_CASE("model [latency]: a kernel's instantiation is the one whose registers the launch reports") {
  const Ceilings c = round_device();
  LedgerSet ls;
  ls["k"].barriers = 400 * 100;
  std::vector<SassLoop> code;
  for (const auto& [fn, regs, chain] : {std::tuple<const char*, int, double>{"_Zk_false", 97, 100},
                                         std::tuple<const char*, int, double>{"_Zk_true", 102, 300}}) {
    code.push_back(node(-1, -2, "once", 1, 0, 1, 0, {}, fn));
    code.push_back(node(0, -1, "runtime", 0, 0, 10, chain, {{"bar", 1}}, fn));
    code[code.size() - 2].regs_used = code.back().regs_used = regs;
  }
  // The launch has 104 registers: the listing's 102 plus the system's 2.
  KernelModel k = model_predict(ls, {launch("k", 400, 128, 104, 0)}, MmaUnit::mma_sync, c, 0, code).kernels.at(0);
  CHECK(k.path_cycles == doctest::Approx(100 * 300));
  k = model_predict(ls, {launch("k", 400, 128, 99, 0)}, MmaUnit::mma_sync, c, 0, code).kernels.at(0);
  CHECK(k.path_cycles == doctest::Approx(100 * 100));
}

TEST_CASE("model [latency]: the SASS profile file is read, and a bad one is refused by name") {
  const std::string path = "test_model_sass_profile.csv";
  const std::string head =
      "step,kernel,dtype,d,function,regs_used,loop,parent,first,last,trip_kind,trip_bound,trip_step,instructions,gmem,smem,"
      "mma,sfu,barrier,control,alu,chain_cycles,chain_cycles_hbm,work_bar,work_mma,work_sfu,work_smem,work_gmem";
  const std::string rows[] = {"03,kv_outer,fp16,64,_Zfoo,97,-1,,0x0000,0x0900,once,1,0,30,1,0,0,0,0,2,27,900.0,950.0,0,0,0,0,128",
                              "03,kv_outer,fp16,64,_Zfoo,97,0,-1,0x0100,0x0400,ntid,512,0,49,1,8,0,2,1,1,36,812.5,1100.5,1,0,64,2048,512"};
  auto write = [&](const std::string& eol) {
    std::ofstream f(path, std::ios::binary);
    f << head << eol;
    for (const std::string& r : rows) f << r << eol;
  };
  for (const char* eol : {"\n", "\r\n"}) {  // Python's csv module ends lines with CRLF unless told otherwise
    write(eol);
    const std::vector<SassLoop> v = read_sass_profile(path);
    REQUIRE(v.size() == 2);
    CHECK(v[0].loop == -1);
    CHECK(v[0].parent == -2);
    CHECK(v[1].parent == -1);
    CHECK(v[1].kernel == "kv_outer");
    CHECK(v[1].function == "_Zfoo");
    CHECK(v[1].regs_used == 97);
    CHECK(v[1].trip_kind == "ntid");
    CHECK(v[1].trip_bound == 512);
    CHECK(v[1].classes.at("smem") == 8);
    CHECK(v[1].chain_cycles == doctest::Approx(812.5));
    CHECK(v[1].chain_cycles_hbm == doctest::Approx(1100.5));
    CHECK(v[1].work.at("smem") == doctest::Approx(2048));
    CHECK(v[1].work.at("bar") == doctest::Approx(1));
  }
  {
    std::ofstream f(path);
    f << head << "\n" << "03,kv_outer,fp16,64,_Zfoo,97,0,-1,0x0100,0x0400,sometimes,1,0,49,1,8,0,2,1,1,36,812.5,812.5,0,0,0,0,0\n";
  }
  CHECK_THROWS_WITH_AS(read_sass_profile(path), doctest::Contains("trip_kind"), std::runtime_error);
  {
    std::ofstream f(path);  // a loop without a parent
    f << head << "\n" << "03,kv_outer,fp16,64,_Zfoo,97,0,,0x0100,0x0400,imm,4,1,49,1,8,0,2,1,1,36,812.5,812.5,0,0,0,0,0\n";
  }
  CHECK_THROWS_WITH_AS(read_sass_profile(path), doctest::Contains("parent"), std::runtime_error);
  {
    std::ofstream f(path);
    f << "step,kernel\n03,kv_outer\n";
  }
  CHECK_THROWS_WITH_AS(read_sass_profile(path), doctest::Contains("no column"), std::runtime_error);
  std::remove(path.c_str());
  CHECK_THROWS_AS(read_sass_profile(path), std::runtime_error);
}

TEST_CASE("model [latency]: under load a global wait lasts at least the time to deliver every resident warp's bytes") {
  // [queue] One loop whose chain waits twice per trip on global memory (the HBM replay is two latency
  // gaps longer than the L2 one) for the 16 loads of 512 bytes it issued; a quarter of the reads miss L2.
  const Ceilings c = round_device();
  const double l2 = c.l2_latency_ns * 1e-9 * c.clock_hz, hbm = c.hbm_latency_ns * 1e-9 * c.clock_hz;
  const double waits = 2, trip_bytes = 16 * 512.0, trips = 100, chain = 500, root = 50, f = 0.25;
  const std::vector<SassLoop> idle_code = {node(-1, -2, "once", 1, 0, 10, root),
                                           node(0, -1, "runtime", 0, 0, 20, chain, {{"gmem", trip_bytes}})};
  std::vector<SassLoop> code = idle_code;
  code[1].chain_cycles_hbm = chain + waits * (hbm - l2);
  auto run = [&](int64_t blocks, const std::vector<SassLoop>& listing) {
    LedgerSet ls;
    const double warps = double(blocks) * 256 / 32;
    ls["k"].gmem_read = int64_t(warps * trips * trip_bytes);  // the loop's trips come from these bytes
    return model_predict(ls, {launch("k", blocks, 256, 32, 0)}, MmaUnit::mma_sync, c, f * double(ls["k"].gmem_read), listing)
        .kernels.at(0);
  };
  const double idle_path = root + trips * (chain + f * waits * (hbm - l2));  // the chain at the idle latencies
  // The wait behind the others: Q bytes outstanding on the GPU, delivered at the L2's ceiling (and a
  // quarter of them at HBM's); a hit waits max(L_l2, D), a miss max(L_hbm, D).
  auto queued_path = [&](double resident_warps) {
    const double q = resident_warps * trip_bytes / waits;
    const double d = std::max(q / c.l2_read, f * q / c.hbm_read) * c.clock_hz;
    return idle_path + trips * waits * ((1 - f) * std::max(0.0, d - l2) + f * std::max(0.0, d - hbm));
  };
  // Few warps: 4 blocks of 8 warps on 4 SMs. 32 warps' loads drain in far less than an idle L2 latency.
  const KernelModel few = run(4, code);
  CHECK(few.hot_trips == doctest::Approx(trips));
  CHECK(few.queue_warps == doctest::Approx(4 * 8));
  CHECK(few.queue_cycles == 0);
  CHECK(few.path_cycles == doctest::Approx(idle_path));
  // Many: 8 blocks of 8 warps resident on each of the 100 SMs (threads and registers allow 8), all at once.
  const KernelModel many = run(int64_t(c.sms) * 8, code);
  REQUIRE(many.blocks_per_sm == 8);
  const double warps_many = double(c.sms) * 8 * 8;
  CHECK(many.queue_warps == doctest::Approx(warps_many));
  CHECK(queued_path(warps_many) > 2 * idle_path);  // the queueing bound takes over, by far
  CHECK(many.path_cycles == doctest::Approx(queued_path(warps_many)));
  CHECK(many.queue_cycles == doctest::Approx(queued_path(warps_many) - idle_path));
  CHECK(many.latency_ms == doctest::Approx(queued_path(warps_many) / c.clock_hz * 1e3));  // one round, the chain
  // Saturated, a trip is its chain without its global waits (the L2 replay less one L2 latency a wait)
  // plus what the memory system needs for every resident warp's bytes of the trip: with the 16 loads
  // behind one wait, a hit or a miss alike waits the delivery.
  code[1].chain_cycles_hbm = chain + 1 * (hbm - l2);
  const KernelModel one_wait = run(int64_t(c.sms) * 8, code);
  const double per_trip_delivery = std::max(warps_many * trip_bytes / c.l2_read, f * warps_many * trip_bytes / c.hbm_read) * c.clock_hz;
  CHECK(one_wait.path_cycles == doctest::Approx(root + trips * (chain - 1 * l2 + per_trip_delivery)));
  // A loop whose chain waits on no global load (its loads hidden, or cp.async's, waited as shared memory)
  // keeps its chain: the queue acts only through the waits the listing shows.
  CHECK(run(int64_t(c.sms) * 8, idle_code).queue_cycles == 0);
}
