// Step 18: ring attention — the plan (shards that partition the sequence, every rank seeing every
// K/V shard once, the calls covering every visible (query, key) pair exactly once), the balance of
// the zig-zag layout against the contiguous one, and the blueprint's P simulated ranks against the
// reference for P = 1 … 8, ragged shards, causal and not, N ≠ Nk and GQA, with the counted ledger
// equal to the closed form.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../steps/18_ring/schedule.hpp"
#include "reference/checks.hpp"
#include "core/shapes.hpp"

using namespace fa;
using fa::step18::Layout;

namespace fa::step18 {
const StepInfo& info();  // the registration (blueprint.cpp)
}

namespace {

StepOptions opts(int P, Layout l) {
  return {{"ranks", std::to_string(P)}, {"shard", l == Layout::zigzag ? "zigzag" : "contiguous"}};
}
const char* name(Layout l) { return l == Layout::zigzag ? "zigzag" : "contiguous"; }

// Lengths that are ragged for every P (not multiples of 2P), shorter than the ring, and one
// multiple of every 2P up to 16.
const int64_t kLens[] = {1, 3, 7, 16, 33, 100, 240};

}  // namespace

TEST_CASE("the shards partition the sequence, and every rank holds every K/V shard once over the P steps") {
  for (Layout l : {Layout::zigzag, Layout::contiguous})
    for (int P = 1; P <= step18::kMaxRanks; ++P)
      for (int64_t n : kLens) {
        INFO(name(l), " P=", P, " n=", n);
        std::vector<int> owner(size_t(n), -1);
        for (int r = 0; r < P; ++r) {
          const step18::Shard s = step18::shard_of(l, P, r, n);
          CHECK(s.size() <= step18::max_shard(l, P, n));
          for (int p = 0; p < s.parts; ++p)
            for (int64_t i = s.part[p].lo; i < s.part[p].hi; ++i) {
              REQUIRE(i >= 0);
              REQUIRE(i < n);
              CHECK(owner[size_t(i)] == -1);
              owner[size_t(i)] = r;
            }
          if (l == Layout::zigzag) CHECK(s.part[0].hi <= s.part[1].lo);  // local order = global order
        }
        CHECK(std::count(owner.begin(), owner.end(), -1) == 0);
        for (int r = 0; r < P; ++r) {
          std::vector<int> seen(size_t(P), 0);
          for (int t = 0; t < P; ++t) ++seen[size_t(step18::source_of(r, t, P))];
          CHECK(std::count(seen.begin(), seen.end(), 1) == P);
          for (int t = 1; t < P; ++t)  // what r holds at t, r − 1 held at t − 1 (the ring passes it on)
            CHECK(step18::source_of(r, t, P) == step18::source_of((r + P - 1) % P, t - 1, P));
        }
      }
}

TEST_CASE("the calls of all ranks and steps cover every visible (query, key) pair exactly once") {
  for (Layout l : {Layout::zigzag, Layout::contiguous})
    for (int P = 1; P <= step18::kMaxRanks; ++P)
      for (int64_t N : kLens)
        for (int64_t Nk : {N, N + 5, std::max<int64_t>(1, N / 2)})
          for (bool causal : {false, true}) {
            INFO(name(l), " P=", P, " N=", N, " Nk=", Nk, " causal=", causal);
            std::vector<int> hits(size_t(N * Nk), 0);
            for (int r = 0; r < P; ++r) {
              const step18::Shard q = step18::shard_of(l, P, r, N);
              for (int t = 0; t < P; ++t) {
                const step18::Shard k = step18::shard_of(l, P, step18::source_of(r, t, P), Nk);
                const step18::Calls cs = step18::step_calls(l, P, r, t, N, Nk, causal);
                REQUIRE(cs.n <= step18::kMaxCalls);
                int64_t pairs = 0;
                for (int c = 0; c < cs.n; ++c) {
                  const step18::Call& call = cs.c[c];
                  REQUIRE(call.rows() > 0);
                  REQUIRE(call.keys() > 0);
                  REQUIRE(call.q1 <= q.size());
                  REQUIRE(call.k1 <= k.size());
                  for (int64_t a = call.q0; a < call.q1; ++a)
                    for (int64_t b = call.k0; b < call.k1; ++b) {
                      // step 12's bottom-right mask inside the call
                      if (call.causal && b - call.k0 > (a - call.q0) + call.keys() - call.rows()) continue;
                      const int pa = a < q.part[0].size() ? 0 : 1, pb = b < k.part[0].size() ? 0 : 1;
                      const int64_t i = q.part[pa].lo + a - q.offset(pa), j = k.part[pb].lo + b - k.offset(pb);
                      ++hits[size_t(i * Nk + j)];
                      ++pairs;
                    }
                  if (call.causal) CHECK(call.keys() >= call.rows());  // every masked row sees a key
                }
                CHECK(pairs == step18::step_pairs(l, P, r, t, N, Nk, causal));
              }
            }
            int64_t wrong = 0;
            for (int64_t i = 0; i < N; ++i)
              for (int64_t j = 0; j < Nk; ++j) {
                const bool visible = !causal || j <= i + Nk - N;
                wrong += hits[size_t(i * Nk + j)] != (visible ? 1 : 0);
              }
            CHECK(wrong == 0);
          }
}

TEST_CASE("zig-zag gives every rank the same causal work at every step, and the contiguous split does not") {
  for (int P = 2; P <= step18::kMaxRanks; ++P) {
    CAPTURE(P);
    const int64_t n = 64 * 2 * P;  // shards of whole chunks
    int64_t zmin = -1, zmax = 0, cmax_total = 0, cmin_total = -1;
    for (int r = 0; r < P; ++r) {
      int64_t ctotal = 0;
      for (int t = 0; t < P; ++t) {
        const int64_t z = step18::step_pairs(Layout::zigzag, P, r, t, n, n, true);
        zmin = zmin < 0 ? z : std::min(zmin, z);
        zmax = std::max(zmax, z);
        ctotal += step18::step_pairs(Layout::contiguous, P, r, t, n, n, true);
      }
      cmax_total = std::max(cmax_total, ctotal);
      cmin_total = cmin_total < 0 ? ctotal : std::min(cmin_total, ctotal);
    }
    // Zig-zag: a step's pairs are half a shard's square (2c·2c/2 for shards of 2c) on every rank,
    // the diagonal step's c more (its two diagonal chunks).
    const int64_t c = n / (2 * P);
    CHECK(zmin == 2 * c * c);
    CHECK(zmax == 2 * c * c + c);
    // Contiguous: the last rank sees every earlier shard whole, the first only its own triangle.
    const int64_t s = n / P;
    CHECK(cmax_total == (P - 1) * s * s + s * (s + 1) / 2);
    CHECK(cmin_total == s * (s + 1) / 2);
  }
}

TEST_CASE("step 18's blueprint matches the reference for P = 1 ... 8, both layouts, ragged shards, causal and not") {
  std::vector<test::Case> cases = {
      test::make_case(1, 2, 37, 37, 32, true, DType::f16),     test::make_case(2, 1, 100, 100, 64, false, DType::bf16),
      test::make_case(1, 1, 5, 5, 16, true, DType::bf16),      test::make_case(1, 2, 77, 130, 32, true, DType::f16),
      test::make_case(1, 1, 130, 77, 64, true, DType::bf16),   test::make_case(1, 1, 64, 200, 128, false, DType::f16),
      test::make_case(1, 2, 96, 96, 64, true, DType::f16, 6.0),  // large logits
  };
  test::Case gqa = test::make_case(1, 4, 50, 50, 32, true, DType::bf16);
  gqa.shape.Hkv = 2;
  cases.push_back(gqa);
  for (const test::Case& c : cases) {
    const Inputs in = make_inputs(c.shape, c.inputs);
    const Reference ref = reference_forward(c.shape, in);
    for (Layout l : {Layout::zigzag, Layout::contiguous})
      for (int P = 1; P <= step18::kMaxRanks; ++P) {
        const std::string what = c.name() + " " + name(l) + " P=" + std::to_string(P);
        CAPTURE(what);
        const BlueprintResult r = step18::info().blueprint(c.shape, in, opts(P, l));
        const Check chk = check_forward(c.shape, in, ref, r.out);
        INFO(chk.summary());
        CHECK(chk.pass);
        const std::string diff = r.ledger.diff(step18::info().closed_form(c.shape, opts(P, l)));
        INFO(diff);
        CHECK(diff.empty());
      }
  }
}

TEST_CASE("the ring sends P - 1 whole K/V buffers per rank, and P = 1 sends nothing") {
  const test::Case c = test::make_case(1, 2, 100, 100, 64, true, DType::f16);
  for (int P = 1; P <= step18::kMaxRanks; ++P)
    for (Layout l : {Layout::zigzag, Layout::contiguous}) {
      INFO("P=", P, " ", name(l));
      const LedgerSet ls = step18::info().closed_form(c.shape, opts(P, l));
      int64_t sent = -1;
      for (const auto& [k, led] : ls.kernels)
        if (k == "ring_send") sent = led.gmem_write;
      const int64_t buffer = 2 * c.shape.B * c.shape.hkv() * step18::max_shard(l, P, c.shape.Nk) * c.shape.d * 2;
      CHECK(sent == int64_t(P) * (P - 1) * buffer);
    }
}

TEST_CASE("step 18 refuses a sliding window, and an unknown --ranks or --shard") {
  test::Case c = test::make_case(1, 1, 64, 64, 32, true, DType::f16);
  c.shape.window = 8;
  const Inputs in = make_inputs(c.shape, c.inputs);
  CHECK_THROWS_AS(step18::info().blueprint(c.shape, in, opts(2, Layout::zigzag)), Unsupported);
  c.shape.window = 0;
  CHECK_THROWS_AS(step18::info().blueprint(c.shape, in, {{"ranks", "9"}}), std::invalid_argument);
  CHECK_THROWS_AS(step18::info().blueprint(c.shape, in, {{"shard", "striped"}}), std::invalid_argument);
}

namespace fa::step12 {
const StepInfo& info();
}

TEST_CASE("docs/18: the worked example of the ring's ledger (N = Nk = 4096, d = 128, one head, causal, P = 4)") {
  Shape s;
  s.N = s.Nk = 4096;
  s.d = 128;
  s.causal = true;
  const LedgerSet ring = step18::info().closed_form(s, opts(4, Layout::zigzag));
  const Ledger one = step12::info().closed_form(s, {}).total();
  auto row = [&](const std::string& k) {
    for (const auto& [name, led] : ring.kernels)
      if (name == k) return led;
    FAIL("no ledger row " << k);
    return Ledger{};
  };
  // Chunks of 512 are whole tiles of step 12's: the ring computes exactly its tiles and products.
  CHECK(one.matmul_flops == 4429185024);
  CHECK(one.tiles_computed == 1056);
  CHECK(one.tiles_masked == 64);
  CHECK(one.gmem_read == 35651584);
  CHECK(one.gmem_write == 1064960);
  const Ledger k = row("warp_tiling");
  CHECK(k.matmul_flops == one.matmul_flops);
  CHECK(k.tiles_computed == one.tiles_computed);
  CHECK(k.tiles_masked == one.tiles_masked);
  CHECK(k.gmem_read == 38010880);
  CHECK(k.gmem_write == 3461120);
  CHECK(row("ring_init").gmem_write == 2113536);       // 4 ranks · 1024 rows · (128 + 1) · 4 bytes
  CHECK(row("ring_merge").gmem_read == 10330112);
  CHECK(row("ring_merge").gmem_write == 6868992);      // 13 312 merged rows · 516 bytes
  CHECK(row("ring_send").gmem_read == 6291456);        // 12 sends · 524 288 bytes
  CHECK(row("ring_send").gmem_write == 6291456);
  CHECK(row("ring_finish").gmem_read == 2113536);
  CHECK(row("ring_finish").gmem_write == 1064960);
  CHECK(ring.total().gmem_read == 56745984);
  CHECK(ring.total().gmem_write == 19800064);
}
