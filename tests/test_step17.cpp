// Step 17: decoding — the blueprint over decoding's matrix (GQA, paging, ragged caches with 0 and 1
// tokens, several new tokens with the causal mask, windows) against the reference, splits = 1 and
// many agreeing, the counted ledger against the closed form, the cache read once per group, the
// split ranges against common/reference/decode.hpp, and the refusals of bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../steps/17_decode/schedule.hpp"
#include "reference/checks.hpp"
#include "harness/cli.hpp"
#include "reference/decode.hpp"
#include "core/shapes.hpp"

using namespace fa;

namespace fa::step17 {
const StepInfo& info();  // the registration (blueprint.cpp)
}

namespace {
StepOptions opts(const std::string& page, const std::string& splits = "auto") {
  StepOptions o{{"page-size", page}};
  if (splits != "auto") o["splits"] = splits;
  return o;
}
}  // namespace

TEST_CASE("step 17's blueprint matches the reference over decoding's matrix, every page size, one split and many") {
  for (const test::Case& c : test::decode_matrix())
    for (const char* page : {"none", "16", "64", "256"})
      for (const char* splits : {"auto", "1", "3", "128"}) {
        const std::string what = c.name() + " page-size=" + page + " splits=" + splits;
        CAPTURE(what);
        REQUIRE(validate(c.shape).empty());
        const Inputs in = make_inputs(c.shape, c.inputs);
        const BlueprintResult r = step17::blueprint(c.shape, in, opts(page, splits));
        const Check chk = check_forward(c.shape, in, reference_forward(c.shape, in), r.out);
        INFO(chk.summary());
        CHECK(chk.pass);
      }
}

TEST_CASE("one split and many give the same O and L up to rounding") {
  for (const test::Case& c : test::decode_matrix()) {
    CAPTURE(c.name());
    const Inputs in = make_inputs(c.shape, c.inputs);
    const Forward one = step17::blueprint(c.shape, in, opts("none", "1")).out;
    const Forward many = step17::blueprint(c.shape, in, opts("none", "16")).out;
    const double tol = o_tolerance(c.shape, magnitudes(in));
    double worst = 0;
    for (size_t e = 0; e < one.o.v.size(); ++e) worst = std::max(worst, double(std::fabs(one.o.v[e] - many.o.v[e])));
    CHECK(worst <= tol);
    for (size_t e = 0; e < one.lse.v.size(); ++e) {
      const float a = one.lse.v[e], b = many.lse.v[e];
      if (std::isinf(a)) CHECK(a == b);  // a row that sees no key: +inf either way
      else CHECK(std::fabs(a - b) <= 1e-4f * std::max(1.0f, std::fabs(a)));
    }
  }
}

TEST_CASE("the counted ledger equals the closed form") {
  for (const test::Case& c : test::decode_matrix())
    for (const char* page : {"none", "32"})
      for (const char* splits : {"auto", "1", "4"}) {
        const std::string what = c.name() + " page-size=" + page + " splits=" + splits;
        CAPTURE(what);
        const Inputs in = make_inputs(c.shape, c.inputs);
        const LedgerSet counted = step17::blueprint(c.shape, in, opts(page, splits)).ledger;
        const std::string diff = counted.diff(step17::closed_form(c.shape, opts(page, splits)));
        INFO(diff);
        CHECK(diff.empty());
        CHECK(counted.kernels.size() == 1);  // [fused-combine]: the last block merges
        StepOptions k = opts(page, splits);
        k["combine"] = "kernel";
        const LedgerSet separate = step17::blueprint(c.shape, in, k).ledger;
        CHECK(separate.diff(step17::closed_form(c.shape, k)).empty());
        const Shape& s = c.shape;
        const int64_t n = step17::choose_splits(s.B, s.H, s.hkv(), s.N, s.Nk, s.window, k, step17::kBlueprintSms,
                                                step17::kBlueprintBlocksPerSm);
        CHECK((separate.kernels.size() == 2) == (n > 1));  // a combine kernel, with more than one split
      }
}

// [gqa-pack] Each cache byte is read once per (sequence, key/value head), however many query heads
// share it and however many splits cut it: the split kernel's HBM reads are the visible cache,
// the new tokens' rows twice more (the append's load and the copy), Q, and the merge's partials.
TEST_CASE("the cache is read once per group, whatever the group size and the splits") {
  for (int64_t H : {8, 16, 32})
    for (const char* splits : {"1", "4", "auto"}) {
      Shape s;
      s.B = 2, s.H = H, s.Hkv = 8, s.N = 1, s.Nk = 700, s.d = 64;
      s.cache_lens = {699, 311};
      const Ledger l = step17::closed_form(s, opts("none", splits)).kernels.front().second;
      const int64_t cache_rows = (699 + 1) + (311 + 1), fresh = 2;
      // Q's rows are read by every split that has keys: subtract them, what is left is the cache.
      const int64_t splits_n = std::string(splits) == "auto"
                                   ? step17::choose_splits(s.B, s.H, s.hkv(), s.N, s.Nk, 0, opts("none"), step17::kBlueprintSms,
                                                           step17::kBlueprintBlocksPerSm)
                                   : std::stoll(splits);
      int64_t q_bytes = 0;
      for (int64_t b = 0; b < s.B; ++b)
        for (int64_t sp = 0; sp < splits_n; ++sp) {
          const step17::KeyRange r = step17::split_range({0, s.keys(b)}, splits_n, sp);
          if (r.hi > r.lo) q_bytes += s.Hkv * (H / s.Hkv) * s.d * 2;
        }
      // [fused-combine] The last blocks' merge reads every split's partial O and L once.
      const int64_t merge_bytes = splits_n > 1 ? s.B * H * s.N * splits_n * (s.d + 1) * 4 : 0;
      CHECK(l.gmem_read - q_bytes - merge_bytes == s.Hkv * 2 * (cache_rows - fresh + 2 * fresh) * s.d * 2);
    }
}

TEST_CASE("split ranges are common/reference/decode.hpp's, shifted to the visible range") {
  for (int64_t lo : {0, 5, 64, 130})
    for (int64_t len : {0, 1, 63, 64, 65, 640, 1001})
      for (int64_t splits : {1, 2, 3, 7, 16, 128}) {
        const std::vector<decode::Range> want = decode::split_keys(len, splits, step17::kBc);
        for (int64_t sp = 0; sp < splits; ++sp) {
          const step17::KeyRange got = step17::split_range({lo, lo + len}, splits, sp);
          if (sp < int64_t(want.size())) {
            CHECK(got.lo == lo + want[size_t(sp)].begin);
            CHECK(got.hi == lo + want[size_t(sp)].end);
          } else {
            CHECK(got.lo == got.hi);  // past the tiles: empty
          }
        }
      }
}

TEST_CASE("a window narrows the keys a chunk visits, and a tile inside every row's band needs no mask") {
  // keys_b = 400, 4 new tokens: query i sits at 396 + i; with W = 50 it sees 347 + i .. 396 + i.
  const step17::KeyRange r = step17::chunk_keys(400, 4, 0, 3, true, 50);
  CHECK(r.lo == 347);
  CHECK(r.hi == 400);
  CHECK(!step17::tile_needs_mask(0, 1000, 1000, 1, 0, 0, false, 0));
  CHECK(step17::tile_needs_mask(0, 50, 1000, 1, 0, 0, false, 0));       // the split ends inside the tile
  CHECK(step17::tile_needs_mask(960, 1000, 1000, 4, 0, 3, true, 0));    // the diagonal of the new tokens
  CHECK(step17::tile_needs_mask(300, 1000, 1000, 1, 0, 0, true, 650));  // the window's left edge
}

TEST_CASE("step 17 refuses bad decoding input with a message naming the flag") {
  const StepInfo& st = step17::info();
  auto parse = [&](std::vector<std::string> a) {
    CliOptions o = parse_cli(st, a);
    apply_default_shape(o, false);
    return o;
  };
  auto refused = [&](std::vector<std::string> a, const std::string& flag) {
    CAPTURE(flag);
    try {
      parse(a);
      FAIL("accepted");
    } catch (const CliError& e) {
      CHECK(std::string(e.what()).find(flag) != std::string::npos);
    }
  };
  refused({"--page-size", "48"}, "--page-size");
  refused({"--page-size", "8"}, "--page-size");
  refused({"--nk", "100", "--cache-lens", "100"}, "--cache-lens");  // no room for the new token
  refused({"--b", "3", "--cache-lens", "1,2"}, "--cache-lens");     // one length per sequence
  refused({"--h", "6", "--hkv", "4"}, "--hkv");
  refused({"--qlen", "17"}, "--qlen");
  refused({"--ragged", "--cache-lens", "5"}, "--ragged");
  refused({"--window", "8"}, "--window");  // without --causal
  // Accepted: the defaults, one length for all, ragged lengths inside the cache.
  CHECK(parse({}).shape.cache_lens == std::vector<int64_t>{299, 299});
  CHECK(parse({"--cache-lens", "7"}).shape.cache_lens == std::vector<int64_t>{7, 7});
  const CliOptions r = parse({"--ragged", "--b", "16", "--qlen", "4", "--causal"});
  for (int64_t len : r.shape.cache_lens) CHECK((len >= 0 && len <= r.shape.Nk - 4));
  // Another step has no cache.
  CHECK_THROWS_AS(parse_cli(*[] { static StepInfo x; x.id = "12"; return &x; }(), {"--cache-lens", "3"}), CliError);
  // A block table entry outside the pool is refused on the host before any launch (decode::validate).
  decode::PagedLayout pl = decode::contiguous_layout({10, 20}, 64, 16);
  pl.block_table[0] = int32_t(pl.num_pages);  // sequence 0's first page
  CHECK(decode::validate(pl, 64).find("outside the pool") != std::string::npos);
}

TEST_CASE("step 17: exps — every key a row sees at least once in the split kernel, and the combine's one per split and batch") {
  // The combine merges online: exp(L_s − m) for each of a row's splits, and one rescale per batch of
  // kMergeBatch splits; every decoding row sees at least its own token. Fused or a kernel: the same exps.
  for (const test::Case& c : test::decode_matrix()) {
    const Shape& s = c.shape;
    CAPTURE(c.name());
    int64_t vis = 0;  // (row, key) pairs the rows see, over every query head
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t i = 0; i < s.N; ++i) vis += s.H * std::max<int64_t>(0, s.last_visible_key(i, b) - s.first_visible_key(i, b) + 1);
    const Inputs in = make_inputs(s, c.inputs);
    const LedgerSet one = step17::blueprint(s, in, opts("none", "1")).ledger;
    CHECK(one.total().exps >= vis);
    const LedgerSet kernel = step17::blueprint(s, in, {{"page-size", "none"}, {"splits", "3"}, {"combine", "kernel"}}).ledger;
    const LedgerSet fused = step17::blueprint(s, in, {{"page-size", "none"}, {"splits", "3"}, {"combine", "fused"}}).ledger;
    REQUIRE(kernel.kernels.size() == 2);
    CHECK(kernel.kernels[1].first == "combine");
    CHECK(kernel.kernels[1].second.exps == (3 + step17::merge_batches(3)) * s.B * s.H * s.N);
    CHECK(kernel.kernels[0].second.exps >= vis);
    CHECK(fused.total().exps == kernel.total().exps);
    for (const auto& [name, led] : kernel.kernels) CHECK(led.exps <= led.nonmatmul_ops);
  }
}
