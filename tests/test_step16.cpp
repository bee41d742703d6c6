// Step 16 (ping-pong and intra-warpgroup overlap): the consumers' turns through named barriers,
// simulated; the tiles per head dimension and the register split; d = 256 on the blueprint; the
// turns' order in the blueprint (a wrong one fails); its ledger against step 15's; refusals.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "core/arch.hpp"
#include "reference/checks.hpp"
#include "core/rng.hpp"
#include "second_config.hpp"
#include "core/shapes.hpp"
#include "blueprint/wgmma_forward.hpp"

#include "../steps/15_tma_warpspec/schedule.hpp"
#include "../steps/16_pingpong/schedule.hpp"

using namespace fa;

namespace fa::step12 {
const StepInfo& info();
}
namespace fa::step16 {
const StepInfo& info();  // the registration (blueprint.cpp)
}

namespace {

// A named barrier of 256 threads as two warpgroups use it: one bar.sync (which waits) and one
// bar.arrive (which does not) complete a phase. Two arrivals in one phase would complete it without
// the waiter — the turns would fall out of step — and count as a violation.
struct NamedBarrier {
  int units = 0;        // warpgroups in the current phase
  bool waiter = false;  // a warpgroup waits in bar.sync
  int phases = 0;
};

// The kernel's turns (turn_begin / turn_end) for C consumers of `turns` turns each, in a random
// interleaving of the warpgroups. Returns the order in which turns ran (consumer ids), or an empty
// vector on a deadlock or a violation. `pre_arrive` and `skip_last` are the kernel's two special
// cases; turning one off must break the protocol.
std::vector<int> run_turns(int C, int turns, uint64_t seed, bool pre_arrive = true, bool skip_last = true) {
  std::vector<NamedBarrier> bar(static_cast<size_t>(C + 1));  // ids 1 .. C
  std::vector<int> done(static_cast<size_t>(C), 0);           // turns finished per consumer
  std::vector<bool> waiting(static_cast<size_t>(C), false);   // in bar.sync of its next turn
  std::vector<int> order;
  auto arrive = [&](int id, bool sync) {
    NamedBarrier& b = bar[size_t(id)];
    if (!sync && b.units == 1 && !b.waiter) return false;  // a second arrival in the phase
    ++b.units;
    b.waiter = b.waiter || sync;
    if (b.units == 2) b.units = 0, b.waiter = false, ++b.phases;
    return true;
  };
  if (pre_arrive && !arrive(1, false)) return {};  // the last consumer hands consumer 0 the first turn
  Rng rng(seed);
  for (int steps = 0; steps < 100000; ++steps) {
    bool all = true;
    for (int c = 0; c < C; ++c) all = all && done[size_t(c)] == turns;
    if (all) {
      for (int id = 1; id <= C; ++id)
        if (bar[size_t(id)].units != 0) return {};  // an arrival left over
      return order;
    }
    const int c = int(rng.below(uint64_t(C)));
    if (done[size_t(c)] == turns) continue;
    NamedBarrier& mine = bar[size_t(1 + c)];
    if (!waiting[size_t(c)]) {  // turn_begin: bar.sync on its own barrier
      const int before = mine.phases;
      if (!arrive(1 + c, true)) return {};
      waiting[size_t(c)] = true;
      if (mine.phases == before) continue;  // still waiting
    } else if (mine.waiter) {
      continue;  // the phase has not completed yet
    }
    // The turn runs; turn_end hands the next one on (not after the last consumer's last turn).
    waiting[size_t(c)] = false;
    order.push_back(c);
    const bool last = done[size_t(c)] == turns - 1;
    ++done[size_t(c)];
    if (!(skip_last && c == C - 1 && last) && !arrive(1 + (c + 1) % C, false)) return {};
  }
  return {};  // deadlock
}

}  // namespace

TEST_CASE("step 16: the turns go round the consumers in order, in any interleaving, and every arrival meets its wait") {
  for (int C : {2, 3})
    for (int turns : {1, 2, 5, 9})
      for (uint64_t seed = 1; seed <= 20; ++seed) {
        CAPTURE(C);
        CAPTURE(turns);
        CAPTURE(seed);
        const std::vector<int> order = run_turns(C, turns, seed);
        REQUIRE(order.size() == size_t(C * turns));
        for (size_t i = 0; i < order.size(); ++i) CHECK(order[i] == int(i % size_t(C)));
      }
  // The checks can fail: without the first hand-over nobody starts; without the last turn's
  // exception an arrival is left on consumer 0's barrier.
  CHECK(run_turns(2, 3, 1, false).empty());
  CHECK(run_turns(3, 3, 1, true, false).empty());
}

TEST_CASE("step 16: tiles per head dimension fit the block, and the consumers' registers fit the file") {
  const step16::Schedule s64 = step16::schedule_for(64), s128 = step16::schedule_for(128), s256 = step16::schedule_for(256);
  CHECK((s64.Br == 192 && s64.Bc == 128 && s64.stages == 6 && s64.consumers() == 3 && s64.threads() == 512));
  CHECK((s128.Br == 128 && s128.Bc == 128 && s128.stages == 3 && s128.threads() == 384));
  CHECK((s256.Br == 128 && s256.Bc == 64 && s256.stages == 2));
  for (int d : {64, 128, 256})
    for (int t = 0; t < step16::kTileChoices; ++t) {
      CAPTURE(d);
      CAPTURE(t);
      const step16::Schedule s = step16::schedule_for(d, t);
      const bool offered = !(d > 64 && t == step16::kTiles192x128) && !(d == 256 && t == step16::kTiles128x128);
      CHECK(step16::valid(s) == offered);
      if (offered) {
        CHECK(step16::smem_bytes(s, d) <= step16::kSmemBudget);
        // one more stage would not fit: the ring takes what the block has (up to 8)
        CHECK((s.stages == 8 || step16::smem_bytes(step16::Schedule{s.Br, s.Bc, s.stages + 1}, d) > step16::kSmemBudget));
      }
    }
  for (int C : {2, 3}) {
    CAPTURE(C);
    const int regs = step16::consumer_regs(C);
    CHECK(128 * step16::kProducerRegs + 128 * C * regs <= 65536);
    CHECK(regs % 8 == 0);  // setmaxnreg takes multiples of 8 in [24, 256]
    CHECK(regs <= 256);
  }
  // Three consumers of 160 registers hold O (32 floats at d = 64), S (64) and P (32) of two tiles: not at d = 128.
  CHECK(step16::consumer_regs(3) == 160);
  for (int t = 0; t < step16::kTileChoices; ++t) CHECK(step16::tiles_of(StepOptions{{"tiles", step16::kTileNames[t]}}) == t);
  for (int a = 0; a < step16::kAblations; ++a) CHECK(step16::ablation_of(StepOptions{{"ablate", step16::kAblationNames[a]}}) == a);
  CHECK_THROWS(step16::tiles_of(StepOptions{{"tiles", "256x256"}}));
  CHECK_THROWS(step16::ablation_of(StepOptions{{"ablate", "softmax"}}));
  CHECK_THROWS_AS(step16::blueprint(Shape{}, Inputs{}, step16::schedule_for(128, step16::kTiles192x128)), std::invalid_argument);
}

TEST_CASE("step 16: d = 256 and the other tiles on the blueprint match the reference and count their closed form") {
  const step16::Schedule wide = step16::schedule_for(256);
  test::check_wide_d("step16", [&](const Shape& s, const Inputs& in) { return step16::blueprint(s, in, wide); },
                     [&](const Shape& s) { return step16::closed_form(s, wide); });
  for (int t : {step16::kTiles128x64, step16::kTiles128x128}) {
    const step16::Schedule sc = step16::schedule_for(128, t);
    test::check_second_config(std::string("step16 ") + step16::kTileNames[t], [&](const Shape& s, const Inputs& in) { return step16::blueprint(s, in, sc); },
                              [&](const Shape& s) { return step16::closed_form(s, sc); });
  }
}

namespace {
// Turn orders that are not the kernel's, for the blueprint to catch.
void pv_after_softmax(int64_t Tcount, int64_t G, wgmma_bp::Consumer& c) {  // P·V of tile j − 1 after the softmax of j
  for (int64_t j = 0; j <= Tcount; ++j) {
    for (int64_t g = 0; g < G; ++g) {
      if (j < Tcount) c.s(g, j), c.softmax(g, j);
      if (j > 0) c.pv(g, j - 1);
    }
    if (j > 0) c.release(j - 1);
  }
}
void early_release(int64_t Tcount, int64_t G, wgmma_bp::Consumer& c) {  // the stage of tile j back before its P·V read it
  for (int64_t j = 0; j <= Tcount; ++j) {
    if (j > 0) c.release(j - 1);
    for (int64_t g = 0; g < G; ++g) {
      if (j < Tcount) c.s(g, j);
      if (j > 0) c.pv(g, j - 1);
      if (j < Tcount) c.softmax(g, j);
    }
  }
}
}  // namespace

TEST_CASE("step 16: the blueprint's turns catch a wrong order — a P·V without its P, or a stage refilled before its last product") {
  Shape s;
  s.B = 1;
  s.H = 1;
  s.N = 1;
  s.Nk = 600;  // five 128-key tiles through three stages: the ring refills
  s.d = 128;
  const Inputs in = make_inputs(s);
  const step16::Schedule sc = step16::schedule_for(128);
  const wgmma_bp::Tiles t{sc.Br, sc.Bc, sc.stages, wgmma_bp::Loads::Ring, step16::kSmemBudget, step16::smem_bytes(sc, 128)};
  wgmma_bp::Ops bad;
  bad.turns = pv_after_softmax;
  CHECK_THROWS_AS(wgmma_bp::forward(s, in, t, "pingpong", bad), std::logic_error);
  bad.turns = early_release;
  const BlueprintResult r = wgmma_bp::forward(s, in, t, "pingpong", bad);
  CHECK_FALSE(check_forward(s, in, reference_forward(s, in), r.out).pass);
  // and the step's own turns pass on the same case
  CHECK(check_forward(s, in, reference_forward(s, in), step16::blueprint(s, in, sc).out).pass);
}

TEST_CASE("step 16: with step 15's tiles the same bytes, products and barriers — the turns reorder, they add nothing") {
  for (bool causal : {false, true}) {
    Shape s;
    s.N = 1000;
    s.Nk = 1300;
    s.d = 128;
    s.causal = causal;
    CAPTURE(causal);
    const Ledger fifteen = step15::closed_form(s, step15::schedule_for(128)).total();
    const Ledger sixteen = step16::closed_form(s, step16::schedule_for(128)).total();
    CHECK(sixteen.gmem_read == fifteen.gmem_read);
    CHECK(sixteen.gmem_write == fifteen.gmem_write);
    CHECK(sixteen.smem_read == fifteen.smem_read);
    CHECK(sixteen.smem_write == fifteen.smem_write);
    CHECK(sixteen.matmul_flops == fifteen.matmul_flops);
    CHECK(sixteen.nonmatmul_ops == fifteen.nonmatmul_ops);
    CHECK(sixteen.barriers == fifteen.barriers);
    CHECK(sixteen.smem_peak == fifteen.smem_peak + 128 * 128 * 2 * 2);  // a third stage of K and V
  }
}

TEST_CASE("step 16: refused off sm_90, at head dimensions it does not compile, and d = 256 is for steps 14-16 only") {
  const StepInfo& st = step16::info();
  Shape s;
  s.N = s.Nk = 256;
  for (int64_t d : {16, 32, 64, 128, 256}) {
    s.d = d;
    CAPTURE(d);
    CHECK(st.takes_d(d));
    CHECK(unsupported_reason(st, s, {}, with_fake_cc(GpuCaps{}, 90)).empty() == (d >= 64));
    CHECK(unsupported_reason(st, s, {}, with_fake_cc(GpuCaps{}, 89)).find("step16: needs wgmma.mma_async, TMA and setmaxnreg (sm_90a)") == 0);
    CHECK(!unsupported_reason(st, s, {}, with_fake_cc(GpuCaps{}, 100)).empty());
  }
  // a --tiles choice a d does not offer is refused before any launch
  s.d = 128;
  CHECK(unsupported_reason(st, s, StepOptions{{"tiles", "192x128"}}, with_fake_cc(GpuCaps{}, 90)).find("step16: --tiles 192x128 is not offered at d = 128") == 0);
  s.d = 256;
  CHECK(!unsupported_reason(st, s, StepOptions{{"tiles", "128x128"}}, with_fake_cc(GpuCaps{}, 90)).empty());
  CHECK(unsupported_reason(st, s, StepOptions{{"tiles", "128x64"}}, with_fake_cc(GpuCaps{}, 90)).empty());
  CHECK_FALSE(step12::info().takes_d(256));
  CHECK(step12::info().takes_d(128));
}
