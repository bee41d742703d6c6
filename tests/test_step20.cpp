// Step 20 (a persistent forward): the polynomial 2^x against its proven bound; the work order (every
// item once, chunks of heads, the longest first) and the static schedule's idle tail against its
// bound; the lazy rescale on logits that grow along the row; the tiles and [own-o]; the ledger's
// barriers per launch and exponentials per unit; refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <cfenv>
#include <functional>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <queue>
#include <string>
#include <vector>

#include "core/arch.hpp"
#include "core/rng.hpp"
#include "core/shapes.hpp"
#include "reference/checks.hpp"

#include "../steps/16_pingpong/schedule.hpp"
#include "../steps/20_persistent/schedule.hpp"

using namespace fa;

namespace fa::step16 {
const StepInfo& info();
}
namespace fa::step20 {
const StepInfo& info();  // the registration (blueprint.cpp)
}

TEST_CASE("step 20 [exp2-noconv]: the GPU's floor by an add rounded down, and its exponent add from the sum's bits, are floorf's") {
  // The device branch of poly_exp2, emulated on the CPU: x + 1.5·2^23 under round-toward-minus-infinity,
  // then minus 1.5·2^23 for n as a float, and the sum's bits shifted by 23 for n in the exponent field.
  const int mode = std::fegetround();
  int64_t checked = 0;
  auto check = [&](float x) {
    volatile float xv = x, magic = step20::kFloorMagic;
    std::fesetround(FE_DOWNWARD);
    const float t = xv + magic;
    std::fesetround(mode);
    const float n = t - step20::kFloorMagic;
    uint32_t tb = 0;
    std::memcpy(&tb, &t, 4);
    const float want = std::floor(x);
    CHECK(n == want);
    CHECK(int32_t(tb << 23) == int32_t(uint32_t(int32_t(want)) << 23));
    ++checked;
  };
  for (int n = -125; n < 8; ++n) {
    for (int k = 0; k < 4096; k += 7) check(float(n) + float(k) / 4096.0f);
    check(float(n));
    check(std::nextafter(float(n + 1), float(n)));
  }
  CHECK(checked > 0);
  // and the trick can fail: rounded to nearest instead, x = n + 0.75 lands on n + 1
  volatile float x = 2.75f, magic = step20::kFloorMagic;
  const float t = x + magic;
  CHECK(t - step20::kFloorMagic != std::floor(2.75f));
}

TEST_CASE("step 20 [exp2-poly]: 2^x within the cubic's bound on [-125, 8], 0 below and for a masked key") {
  // The bound docs/20 proves: the fit's relative error plus the float arithmetic's — the fraction, the
  // coefficients' own rounding and three FMAs — under 8u, u = 2^-24. Above 0: the lazy rescale's p up to 2^8.
  const double bound = step20::kExp2PolyRelErr + 8.0 * std::ldexp(1.0, -24);
  double worst = 0;
  int64_t checked = 0;
  Rng rng(20);
  auto check = [&](float x) {
    const double want = std::exp2(double(x)), got = double(step20::poly_exp2(x));
    worst = std::max(worst, std::abs(got - want) / want);
    ++checked;
  };
  for (int n = -125; n < 8; ++n) {  // every integer part, the fractions spread, and both sides of the integer
    for (int k = 0; k < 4096; ++k) check(float(n) + float(k) / 4096.0f);
    check(std::nextafter(float(n + 1), float(n)));
    if (n > -125) check(std::nextafter(float(n), float(n - 1)));
  }
  for (int k = 0; k < 200000; ++k) check(float(-125.0 + 133.0 * rng.uniform()));
  INFO("worst relative error " << worst << " over " << checked << " points; bound " << bound);
  CHECK(worst <= bound);
  CHECK(worst > 0.5 * step20::kExp2PolyRelErr);  // the fit's error is really there: the bound is tight
  CHECK(step20::poly_exp2(-std::numeric_limits<float>::infinity()) == 0.0f);  // a masked key
  CHECK(step20::poly_exp2(std::nextafter(-125.0f, -126.0f)) == 0.0f);          // below the range: flushed
  CHECK(step20::poly_exp2(-1000.0f) == 0.0f);
  CHECK(std::abs(step20::poly_exp2(0.0f) - 1.0) <= bound);
}

TEST_CASE("step 20 [exp2-poly]: --exp2 mixed puts one column group in kPolyOneIn on the FMA units, poly all, mufu none") {
  const int groups = 128 / 8;
  int mixed = 0, poly = 0, mufu = 0;
  for (int n = 0; n < groups; ++n) {
    mixed += step20::poly_at(step20::kExp2Mixed, n);
    poly += step20::poly_at(step20::kExp2Poly, n);
    mufu += step20::poly_at(step20::kExp2Mufu, n);
  }
  CHECK(mixed == groups / step20::kPolyOneIn);
  CHECK(poly == groups);
  CHECK(mufu == 0);
}

namespace {

// The work order's items for a shape, in order.
std::vector<step20::Work> walk(const step20::WorkOrder& w, bool lpt) {
  std::vector<step20::Work> out;
  for (int64_t t = 0; t < w.items(); ++t) out.push_back(lpt ? step20::work_item(t, w) : step20::plain_item(t, w));
  return out;
}

// The greedy schedule's makespan (each item to the SM that is free first, as the counter hands them
// out), in K/V tiles.
int64_t makespan(const std::vector<int64_t>& cost, int64_t P) {
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<int64_t>> free_at;
  for (int64_t k = 0; k < P; ++k) free_at.push(0);
  int64_t end = 0;
  for (int64_t c : cost) {
    const int64_t t = free_at.top() + c;
    free_at.pop();
    free_at.push(t);
    end = std::max(end, t);
  }
  return end;
}

}  // namespace

TEST_CASE("step 20 [work-order]: every item once, a chunk's heads together, the longest first inside a chunk") {
  Rng rng(7);
  const int trials = 60;
  int shapes = 0;
  for (int trial = 0; trial < trials; ++trial) {
    step20::WorkOrder w;
    w.B = 1 + int64_t(rng.below(3)), w.H = 1 + int64_t(rng.below(9)), w.Tr = 1 + int64_t(rng.below(12));
    w.chunk = 1 + int64_t(rng.below(uint64_t(w.B * w.H + 2)));
    w.longest_first = rng.below(2) == 1;
    const std::string what = "B=" + std::to_string(w.B) + " H=" + std::to_string(w.H) + " Tr=" + std::to_string(w.Tr) +
                             " chunk=" + std::to_string(w.chunk) + " lpt=" + std::to_string(w.longest_first);
    CAPTURE(what);
    for (bool lpt : {true, false}) {
      const std::vector<step20::Work> items = walk(w, lpt);
      std::vector<int> seen(size_t(w.items()), 0);
      for (const auto& x : items) {
        REQUIRE((x.b >= 0 && x.b < w.B && x.h >= 0 && x.h < w.H && x.qtile >= 0 && x.qtile < w.Tr));
        ++seen[size_t((x.b * w.H + x.h) * w.Tr + x.qtile)];
      }
      CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
    }
    // Inside a chunk: the Q tiles go down (longest first) or up, each tile across the chunk's heads.
    const std::vector<step20::Work> items = walk(w, true);
    for (size_t t = 1; t < items.size(); ++t) {
      const int64_t c0 = (items[t - 1].b * w.H + items[t - 1].h) / w.chunk, c1 = (items[t].b * w.H + items[t].h) / w.chunk;
      CHECK(c0 <= c1);  // chunks in order
      if (c0 == c1) CHECK((w.longest_first ? items[t].qtile <= items[t - 1].qtile : items[t].qtile >= items[t - 1].qtile));
    }
    ++shapes;
  }
  CHECK(shapes == trials);
}

TEST_CASE("step 20 [lpt] [dynamic]: the greedy schedule's tail is under one longest item, for this order and step 16's") {
  // The bound (Graham; docs/20): an SM takes the next item when it is free, so the item that finishes
  // last started when all were busy: makespan ≤ W/P + (1 − 1/P)·c_max, whatever the order. Each term in
  // K/V tiles, on the target matrix's shapes (B·N = 16k, H = 16, d = 128).
  const step20::Schedule sc = step20::schedule_for(128);
  const std::vector<int64_t> ns = {1024, 2048, 4096, 8192, 16384}, sms = {132, 66};
  const std::vector<bool> masks = {true, false}, orders = {true, false};
  size_t checked = 0;
  for (const int64_t N : ns)
    for (const bool causal : masks)
      for (const int64_t P : sms) {
        const int64_t B = 16384 / N, H = 16;
        step20::WorkOrder w{B, H, num_tiles(N, sc.Br), step20::chunk_heads(H, H, N, 128, step20::kBlueprintL2), causal};
        for (const bool lpt : orders) {
          std::vector<int64_t> cost;
          for (const auto& x : walk(w, lpt)) cost.push_back(step20::item_tiles(x, N, N, sc.Br, sc.Bc, causal, 0));
          const int64_t work = std::accumulate(cost.begin(), cost.end(), int64_t(0));
          const int64_t cmax = *std::max_element(cost.begin(), cost.end()), span = makespan(cost, P);
          const std::string what = "N=" + std::to_string(N) + " causal=" + std::to_string(causal) + " P=" + std::to_string(P) +
                                   (lpt ? " this order" : " step 16's order") + ": makespan " + std::to_string(span) +
                                   " work " + std::to_string(work) + " c_max " + std::to_string(cmax);
          CAPTURE(what);
          CHECK(span * P <= work + (P - 1) * cmax);  // the bound, times P
          CHECK(span * P >= work);                    // and nothing beats the work itself
          ++checked;
        }
      }
  CHECK(checked == ns.size() * masks.size() * sms.size() * orders.size());
}

TEST_CASE("step 20: chunks hold the heads whose K and V fit half the L2, a GQA group together, at least one") {
  CHECK(step20::chunk_heads(16, 16, 4096, 128, 50ll << 20) == (25ll << 20) / (2 * 4096 * 128 * 2));
  CHECK(step20::chunk_heads(32, 8, 4096, 128, 50ll << 20) == 4 * ((25ll << 20) / (2 * 4096 * 128 * 2)));  // 4 query heads per K/V head
  CHECK(step20::chunk_heads(16, 16, 1 << 20, 256, 50ll << 20) == 1);  // one head's K and V exceed it
}

TEST_CASE("step 20 [own-o]: O has a tile of its own where two stages fit beside it, and the tiles are step 16's") {
  for (int d : {64, 128, 256}) {
    CAPTURE(d);
    const step20::Schedule a = step20::schedule_for(d);
    const step16::Schedule b = step16::schedule_for(d);
    CHECK(a.Br == b.Br);
    CHECK(a.Bc == b.Bc);
    CHECK(step20::smem_bytes(a, d) <= step20::kSmemBudget);
    CHECK(a.stages >= 2);
    CHECK(a.own_o == (step20::stages_beside(d, a.Br, a.Bc, true) >= 2));
    if (!a.own_o) CHECK(a.stages == b.stages);  // over Q: step 16's stages
  }
}

namespace {

// Inputs whose logits grow along the row: key j is its random vector plus j·ramp times the mean
// query direction, so that a row's max rises tile after tile (the case the lazy rescale must get right).
Inputs growing_logits(const Shape& s, double ramp) {
  Inputs in = make_inputs(s, {31, 0.0});
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t g = 0; g < s.hkv(); ++g)
      for (int64_t j = 0; j < s.Nk; ++j)
        for (int64_t c = 0; c < s.d; ++c) {
          float& x = in.k.at(b, g, j, c);
          x = round_to(s.dtype, float(x + ramp * double(j) / double(s.Nk) * (c % 2 == 0 ? 1.0 : -1.0)));
        }
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.N; ++i)
        for (int64_t c = 0; c < s.d; ++c) in.q.at(b, h, i, c) = round_to(s.dtype, float(c % 2 == 0 ? 1.0 : -1.0) + in.q.at(b, h, i, c) * 0.1f);
  return in;
}

}  // namespace

TEST_CASE("step 20 [lazy-rescale]: logits that grow along the row give the reference, with fewer rescales than tiles") {
  const step20::Schedule sc = step20::schedule_for(64);
  const std::vector<DType> types = {DType::f16, DType::bf16};
  const std::vector<bool> masks = {false, true};
  size_t runs = 0;
  for (DType dt : types)
    for (bool causal : masks) {
      Shape s;
      s.B = 1, s.H = 2, s.N = 200, s.Nk = 1000, s.d = 64, s.causal = causal, s.dtype = dt;
      // a ramp of 2 per key in units of the logit's scale·log2 e over the keys: tens in log2 units
      const Inputs in = growing_logits(s, 2.0);
      const Reference ref = reference_forward(s, in);
      step20::Stats lazy, eager;
      step20::Variant v;
      const BlueprintResult a = step20::blueprint(s, in, sc, v, &lazy);
      v.lazy = false;
      const BlueprintResult b = step20::blueprint(s, in, sc, v, &eager);
      const std::string what = std::string(dtype_name(dt)) + " causal=" + std::to_string(causal) + ": lazy rescales " +
                               std::to_string(lazy.rescales) + " of " + std::to_string(lazy.row_tiles) + " row tiles";
      CAPTURE(what);
      const Check ca = check_forward(s, in, ref, a.out), cb = check_forward(s, in, ref, b.out);
      INFO(ca.summary());
      CHECK(ca.pass);
      CHECK(cb.pass);
      CHECK(eager.rescales == eager.row_tiles);       // without the rule every row's tile takes its max
      CHECK(lazy.row_tiles == eager.row_tiles);
      CHECK(lazy.rescales > lazy.row_tiles / 8);      // the max really grows: rows rescale past the first tile
      CHECK(lazy.rescales < lazy.row_tiles);          // and the rule skips some
      CHECK(a.ledger.diff(b.ledger).empty());          // the ledger counts the rescale either way
      ++runs;
    }
  CHECK(runs == types.size() * masks.size());
}

TEST_CASE("step 20 [lazy-rescale]: on the course's inputs a row takes a new max on its first tile and rarely after") {
  Shape s;
  s.B = 2, s.H = 2, s.N = 300, s.Nk = 1500, s.d = 128;
  step20::Stats st;
  step20::blueprint(s, make_inputs(s), step20::schedule_for(128), step20::Variant{}, &st);
  const int64_t first_tiles = s.B * s.H * num_tiles(s.N, 128) * 128;  // every row's first tile (rows past N included)
  CAPTURE(st.rescales);
  CAPTURE(st.row_tiles);
  CHECK(st.rescales >= first_tiles);
  CHECK(st.rescales < first_tiles + st.row_tiles / 20);
}

TEST_CASE("step 20: the ledger counts one barrier per block of the launch, and the polynomial's exponentials apart") {
  Shape s;
  s.B = 3, s.H = 5, s.N = 700, s.Nk = 900, s.d = 64, s.causal = true;
  const step20::Schedule sc = step20::schedule_for(64);
  const int64_t items = s.B * s.H * num_tiles(s.N, sc.Br);
  for (int e : {step20::kExp2Mufu, step20::kExp2Poly, step20::kExp2Mixed}) {
    CAPTURE(e);
    step20::Variant v;
    v.exp2 = e;
    const Ledger led = step20::closed_form(s, sc, v).total();
    CHECK(led.barriers == std::min(items, step20::kBlueprintSms));
    v.persistent = false;
    CHECK(step20::closed_form(s, sc, v).total().barriers == items);
    // Every exponential counted once, on one unit or the other: step 16's count (the same tiles), its
    // entries' share on the FMA units as --exp2 says; the rescales' alphas (4 per row and tile) on MUFU.
    const Ledger s16 = step16::info().closed_form(s, {}).total();
    REQUIRE(step16::schedule_for(64).Br == sc.Br);
    REQUIRE(step16::schedule_for(64).Bc == sc.Bc);
    CHECK(led.exps + led.fma_exps == s16.exps);
    const int64_t alphas = s16.exps / (sc.Bc + 4) * 4, entries = s16.exps - alphas;
    if (e == step20::kExp2Mufu) CHECK(led.fma_exps == 0);
    if (e == step20::kExp2Poly) CHECK(led.exps == alphas);
    if (e == step20::kExp2Mixed) CHECK(led.fma_exps * step20::kPolyOneIn == entries);
    CHECK(led.nonmatmul_ops == s16.nonmatmul_ops + led.fma_exps * step20::kPolyOps);
  }
}

TEST_CASE("step 20 refuses what it does not compile: rescale's ablation outside fp16 at d <= 128, an ablation with another --exp2") {
  const StepInfo& st = step20::info();
  Shape s;
  s.d = 128;
  CHECK(st.options_reason(s, {{"ablate", "rescale"}}).empty());
  CHECK(st.options_reason(s, {{"ablate", "persistent"}, {"exp2", "mufu"}}).empty());
  CHECK(!st.options_reason(s, {{"ablate", "persistent"}, {"exp2", "mixed"}}).empty());
  CHECK(!st.options_reason(s, {{"ablate", "lpt"}, {"exp2", "poly"}}).empty());
  s.dtype = DType::bf16;
  CHECK(!st.options_reason(s, {{"ablate", "rescale"}}).empty());
  CHECK(st.options_reason(s, {{"ablate", "persistent"}}).empty());
  s.dtype = DType::f16, s.d = 256;
  CHECK(!st.options_reason(s, {{"ablate", "rescale"}}).empty());
  // the GPU side: sm_90a alone, d = 64, 128, 256
  GpuCaps h100;
  h100.cc = 90, h100.code_cc = 90, h100.smem_optin = 227 * 1024;
  s.d = 64;
  CHECK(unsupported_reason(st, s, st.default_options(), h100).empty());
  s.d = 32;
  CHECK(!unsupported_reason(st, s, st.default_options(), h100).empty());
  GpuCaps a100 = h100;
  a100.cc = 80, a100.code_cc = 80, a100.smem_optin = 163 * 1024;
  s.d = 64;
  CHECK(!unsupported_reason(st, s, st.default_options(), a100).empty());
}
