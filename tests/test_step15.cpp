// Step 15 (TMA + warp specialization): the mbarrier handshake of the ring, simulated; a second tile
// configuration; its ledger against step 14's; the register split; which GPUs and head dimensions
// it refuses.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/arch.hpp"
#include "core/rng.hpp"
#include "second_config.hpp"
#include "core/shapes.hpp"

#include "../steps/14_wgmma/schedule.hpp"
#include "../steps/15_tma_warpspec/schedule.hpp"

using namespace fa;

namespace fa::step15 {
const StepInfo& info();  // the registration (blueprint.cpp)
}

namespace {

// An mbarrier as PTX describes it: a phase completes when its expected arrivals have come; a
// try_wait with parity P succeeds once the number of completed phases has a parity other than P.
struct MBarrier {
  int count = 1, arrived = 0, completed = 0;
  void arrive() {
    if (++arrived == count) arrived = 0, ++completed;
  }
  bool try_wait(uint32_t parity) const { return uint32_t(completed & 1) != parity; }
};

// The kernel's ring, with the kernel's parities, run in a random interleaving of one producer and
// `consumers` consumer warps: every consumer must see each tile in its stage exactly when it
// multiplies it, and the producer must never overwrite a stage a consumer still needs.
// Returns the number of steps taken (every actor done), or -1 on a violation.
int run_ring(int tiles, int stages, int consumers, uint64_t seed, bool use_empty = true) {
  std::vector<MBarrier> full(static_cast<size_t>(stages)), empty(static_cast<size_t>(stages));
  for (auto& e : empty) e.count = consumers;
  std::vector<int> content(static_cast<size_t>(stages), -1);
  std::vector<int> next(static_cast<size_t>(consumers), 0);  // the tile each consumer multiplies next
  int produced = 0, steps = 0;
  Rng rng(seed);
  for (;;) {
    bool done = produced == tiles;
    for (int c : next) done = done && c == tiles;
    if (done) return steps;
    if (++steps > 100000) return -1;  // deadlock
    const int who = int(rng.below(uint64_t(consumers + 1)));
    if (who == consumers) {  // the producer
      if (produced == tiles) continue;
      const int j = produced, st = j % stages;
      if (use_empty && j >= stages && !empty[size_t(st)].try_wait(step15::empty_parity(j, stages))) continue;
      for (int c : next)
        if (c <= j - stages) return -1;  // a consumer has not multiplied the tile this overwrites
      content[size_t(st)] = j;
      full[size_t(st)].arrive();  // the producer's arrival; the bytes land with it
      ++produced;
    } else {
      const int j = next[size_t(who)], st = j % stages;
      if (j == tiles || !full[size_t(st)].try_wait(step15::full_parity(j, stages))) continue;
      if (content[size_t(st)] != j) return -1;  // the wait passed on the wrong tile
      empty[size_t(st)].arrive();
      ++next[size_t(who)];
    }
  }
}

}  // namespace

TEST_CASE("step 15: the ring's mbarrier parities hand every tile over in order, in any interleaving, without overwriting a stage in use") {
  for (int stages : {2, 3, 4, 8})
    for (int tiles : {1, 2, 5, 17})
      for (uint64_t seed = 1; seed <= 20; ++seed) {
        CAPTURE(stages);
        CAPTURE(tiles);
        CAPTURE(seed);
        CHECK(run_ring(tiles, stages, 8, seed) > 0);
      }
  // The check can fail: without the producer's wait on "empty", some interleaving overwrites a stage.
  bool caught = false;
  for (uint64_t seed = 1; seed <= 50 && !caught; ++seed) caught = run_ring(17, 2, 8, seed, false) < 0;
  CHECK(caught);
  // And a fresh barrier passes parity 1 at once, blocks on 0: the first round of fills needs no wait.
  MBarrier fresh;
  CHECK(fresh.try_wait(1));
  CHECK(!fresh.try_wait(0));
  CHECK(step15::empty_parity(0, 2) == 1);
}

TEST_CASE("step 15: a second tile configuration (128 x 64, twice the stages) passes and counts its closed form") {
  for (int d : {64, 128}) {
    const step15::Schedule sc = step15::schedule_for(d, step15::kTiles128x64);
    CAPTURE(d);
    REQUIRE(sc.Bc == 64);
    CHECK(sc.stages == 2 * step15::schedule_for(d).stages);
  }
  // Two stages of 64 keys: the matrix's longest rows (255 keys, four tiles) refill each stage, so
  // the ring's refills run; the default stages hold every tile of the matrix at once.
  const step15::Schedule ring{128, 64, 2};
  REQUIRE(step15::valid(ring));
  test::check_second_config("step15 128x64, 2 stages", [&](const Shape& s, const Inputs& in) { return step15::blueprint(s, in, ring); },
                            [&](const Shape& s) { return step15::closed_form(s, ring); });
  const step15::Schedule sc = step15::schedule_for(128, step15::kTiles128x64);
  test::check_second_config("step15 128x64", [&](const Shape& s, const Inputs& in) { return step15::blueprint(s, in, sc); },
                            [&](const Shape& s) { return step15::closed_form(s, sc); });
}

TEST_CASE("step 15: with step 14's tiles the same bytes and products, and one block-wide barrier per block instead of one per tile") {
  for (bool causal : {false, true}) {
    Shape s;
    s.N = 1000;
    s.Nk = 1300;
    s.d = 128;
    s.causal = causal;
    CAPTURE(causal);
    const Ledger fourteen = step14::closed_form(s, step14::schedule_for(128, step14::kTiles128x128)).total();
    const Ledger fifteen = step15::closed_form(s, step15::schedule_for(128)).total();
    CHECK(fifteen.gmem_read == fourteen.gmem_read);
    CHECK(fifteen.gmem_write == fourteen.gmem_write);
    CHECK(fifteen.smem_read == fourteen.smem_read);
    CHECK(fifteen.smem_write == fourteen.smem_write);
    CHECK(fifteen.matmul_flops == fourteen.matmul_flops);
    CHECK(fifteen.nonmatmul_ops == fourteen.nonmatmul_ops);
    const int64_t blocks = num_tiles(s.N, 128);
    CHECK(fifteen.barriers == blocks);
    CHECK(fourteen.barriers == fourteen.tiles_computed + blocks);
    CHECK(fifteen.smem_peak == fourteen.smem_peak + 1024);  // two stages of 128 keys, as step 14's 128x128, plus the barriers' 1 KB
  }
}

TEST_CASE("step 15: setmaxnreg's split fills the register file, the tiles fit 227 KB, --tiles names exist") {
  CHECK(128 * step15::kProducerRegs + 256 * step15::kConsumerRegs == 64512);
  CHECK(step15::kProducerRegs % 8 == 0);  // setmaxnreg takes multiples of 8 in [24, 256]
  CHECK(step15::kConsumerRegs % 8 == 0);
  CHECK(step15::kProducerRegs >= 24);
  CHECK(step15::kConsumerRegs <= 256);
  for (int d : {64, 128})
    for (int t = 0; t < step15::kTileChoices; ++t) {
      const step15::Schedule sc = step15::schedule_for(d, t);
      CHECK(step15::smem_bytes(sc, d) <= 227 * 1024);
      CHECK(sc.threads() == 384);
      CHECK(step15::tiles_of(StepOptions{{"tiles", step15::kTileNames[t]}}) == t);
    }
  CHECK(step15::smem_bytes(step15::schedule_for(128), 128) == 160 * 1024 + 1024);
  CHECK_THROWS(step15::tiles_of(StepOptions{{"tiles", "64x64"}}));
}

TEST_CASE("step 15: refused before and after sm_90, and at head dimensions it does not compile") {
  const StepInfo& st = step15::info();
  Shape s;
  s.N = s.Nk = 256;
  for (int64_t d : {16, 32, 64, 128, 256}) {
    s.d = d;
    CAPTURE(d);
    CHECK(st.takes_d(d));
    const std::string h200 = unsupported_reason(st, s, {}, with_fake_cc(GpuCaps{}, 90));
    CHECK(h200.empty() == (d == 64 || d == 128 || d == 256));
    CHECK(unsupported_reason(st, s, {}, with_fake_cc(GpuCaps{}, 89)).find("step15: needs wgmma.mma_async, TMA and setmaxnreg (sm_90a)") == 0);
  }
}

TEST_CASE("step 15: d = 256 on the blueprint matches the reference and counts its closed form") {
  const step15::Schedule wide = step15::schedule_for(256);
  test::check_wide_d("step15", [&](const Shape& s, const Inputs& in) { return step15::blueprint(s, in, wide); },
                     [&](const Shape& s) { return step15::closed_form(s, wide); });
}
