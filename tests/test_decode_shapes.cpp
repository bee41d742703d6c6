// The shapes of decoding (issue: step 17): grouped-query attention (--hkv) and sliding windows
// (--window) in the shape, its validation, the inputs and the reference forward; steps 12, 13, 16
// and 17 take them, every other step refuses them.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>

#include "harness/cli.hpp"
#include "reference/decode.hpp"
#include "reference/reference.hpp"
#include "core/registry.hpp"

using namespace fa;

namespace {
// Attention by hand, in double, for row i of head 0 against keys [j0, j1) alone: O normalized over
// those keys and their log-sum-exp (−inf for none) — a split's partial result, or a window's row.
decode::Partial partial(const Shape& s, const Inputs& in, int64_t i, int64_t j0, int64_t j1) {
  decode::Partial p;
  p.o.assign(static_cast<size_t>(s.d), 0.0);
  p.lse = -std::numeric_limits<double>::infinity();
  if (j1 <= j0) return p;
  std::vector<double> sc;
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = j0; j < j1; ++j) {
    double x = 0.0;
    for (int64_t c = 0; c < s.d; ++c) x += double(in.q.at(0, 0, i, c)) * double(in.k.at(0, 0, j, c));
    sc.push_back(s.softmax_scale() * x);
    m = std::max(m, sc.back());
  }
  double l = 0.0;
  for (double x : sc) l += std::exp(x - m);
  for (int64_t j = j0; j < j1; ++j)
    for (int64_t c = 0; c < s.d; ++c) p.o[size_t(c)] += std::exp(sc[size_t(j - j0)] - m) / l * double(in.v.at(0, 0, j, c));
  p.lse = m + std::log(l);
  return p;
}
}  // namespace

TEST_CASE("decode shapes: --hkv must divide --h, --window needs --causal, and both show in the shape's name") {
  Shape s;
  s.H = 8;
  s.Hkv = 3;
  CHECK(validate(s).find("--hkv must divide --h") == 0);
  s.Hkv = 2;
  CHECK(validate(s).empty());
  CHECK(s.hkv() == 2);
  CHECK(s.kv_head(3) == 0);
  CHECK(s.kv_head(4) == 1);
  CHECK(s.str().find("Hkv=2") != std::string::npos);
  s.window = 16;
  CHECK(validate(s).find("--window needs --causal") == 0);
  s.causal = true;
  CHECK(validate(s).empty());
  s.N = 10;
  s.Nk = 100;  // δ = 90: query 0 sees keys 75 .. 90
  CHECK(s.first_visible_key(0) == 75);
  CHECK(s.last_visible_key(0) == 90);
  s.window = 0;
  CHECK(s.first_visible_key(0) == 0);
  const Inputs in = make_inputs([] {
    Shape t;
    t.B = 2;
    t.H = 6;
    t.Hkv = 2;
    t.N = 5;
    t.Nk = 7;
    return t;
  }());
  CHECK(in.k.H == 2);
  CHECK(in.v.H == 2);
  CHECK(in.q.H == 6);
}

TEST_CASE("decode shapes: the reference with shared key/value heads equals the reference on the heads repeated") {
  Shape g;
  g.B = 2;
  g.H = 6;
  g.Hkv = 2;
  g.N = 9;
  g.Nk = 40;
  g.d = 16;
  g.causal = true;
  const Inputs in = make_inputs(g);
  Shape full = g;
  full.Hkv = 0;
  Inputs rep = in;
  rep.k = Tensor4(g.B, g.H, g.Nk, g.d);
  rep.v = Tensor4(g.B, g.H, g.Nk, g.d);
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t h = 0; h < g.H; ++h)
      for (int64_t j = 0; j < g.Nk; ++j)
        for (int64_t c = 0; c < g.d; ++c) {
          rep.k.at(b, h, j, c) = in.k.at(b, g.kv_head(h), j, c);
          rep.v.at(b, h, j, c) = in.v.at(b, g.kv_head(h), j, c);
        }
  const Reference a = reference_forward(g, in), r = reference_forward(full, rep);
  REQUIRE(a.o.size() == r.o.size());
  for (size_t i = 0; i < a.o.size(); ++i) CHECK(a.o[i] == r.o[i]);
  for (size_t i = 0; i < a.lse.size(); ++i) CHECK(a.lse[i] == r.lse[i]);
  // and a head's keys matter: another group's keys give another output
  bool differs = false;
  for (int64_t c = 0; c < g.d && !differs; ++c) differs = a.o_at(0, 0, c) != a.o_at(3, 0, c);
  CHECK(differs);
}

TEST_CASE("decode shapes: the reference with a window is the softmax over the window's keys alone") {
  Shape s;
  s.B = 1;
  s.H = 1;
  s.N = 12;
  s.Nk = 30;
  s.d = 16;
  s.causal = true;
  s.window = 5;
  const Inputs in = make_inputs(s);
  const Reference ref = reference_forward(s, in);
  for (int64_t i = 0; i < s.N; ++i) {
    CAPTURE(i);
    const int64_t lo = i + (s.Nk - s.N) - s.window + 1, hi = i + (s.Nk - s.N);
    const decode::Partial want = partial(s, in, i, lo, hi + 1);
    CHECK(ref.lse_at(0, i) == doctest::Approx(want.lse).epsilon(1e-12));
    for (int64_t c = 0; c < s.d; ++c) CHECK(ref.o_at(0, i, c) == doctest::Approx(want.o[size_t(c)]).epsilon(1e-12));
  }
}

// [gqa] [window] The steps that take them; every other step refuses.
const std::set<std::string> kTakesGqa = {"12", "13", "16", "17", "18", "19", "20", "21"},
                            kTakesWindow = {"12", "13", "16", "17", "19", "20", "21"};

TEST_CASE("decode shapes: the steps that take --hkv and --window parse them, and every other step refuses them with a message naming the flag") {
  for (const StepInfo* st : all_steps()) {
    CAPTURE(st->id);
    CHECK(st->supports_gqa == (kTakesGqa.count(st->id) == 1));
    CHECK(st->supports_window == (kTakesWindow.count(st->id) == 1));
    if (st->supports_gqa) {
      const CliOptions o = parse_cli(*st, {"--h", "8", "--hkv", "2"});
      CHECK(o.shape.hkv() == 2);
    } else {
      CHECK_THROWS_WITH_AS(parse_cli(*st, {"--h", "8", "--hkv", "2"}), doctest::Contains("--hkv"), CliError);
    }
    if (st->supports_window) {
      const CliOptions o = parse_cli(*st, {"--causal", "--window", "64"});
      CHECK(o.shape.window == 64);
      CHECK(validate(parse_cli(*st, {"--window", "64"}).shape).find("--window needs --causal") == 0);
    } else {
      CHECK_THROWS_WITH_AS(parse_cli(*st, {"--causal", "--window", "64"}), doctest::Contains("--window"), CliError);
    }
    CHECK_NOTHROW(parse_cli(*st, {"--h", "8", "--hkv", "8"}));  // HKV = H is ordinary attention
  }
}


TEST_CASE("decode: the key ranges of a split cover the cache once, in whole tiles, never empty") {
  for (int64_t nk : {1, 5, 64, 65, 1000, 4096})
    for (int64_t splits : {1, 2, 3, 7, 64, 1000}) {
      CAPTURE(nk);
      CAPTURE(splits);
      const std::vector<decode::Range> r = decode::split_keys(nk, splits, 64);
      const int64_t tiles = (nk + 63) / 64;
      CHECK(int64_t(r.size()) == std::min(splits, tiles));
      int64_t at = 0;
      for (const decode::Range& x : r) {
        CHECK(x.begin == at);
        CHECK(x.end > x.begin);
        CHECK((x.begin % 64 == 0 && (x.end % 64 == 0 || x.end == nk)));
        at = x.end;
      }
      CHECK(at == nk);
    }
  CHECK(decode::split_keys(0, 4, 64).empty());
  CHECK_THROWS_AS(decode::split_keys(100, 0, 64), std::invalid_argument);
}

TEST_CASE("decode: merging the splits' partial results by log-sum-exp gives the reference, for one split and many") {
  Shape s;
  s.B = 1;
  s.H = 1;
  s.N = 3;
  s.Nk = 700;
  s.d = 32;
  const Inputs in = make_inputs(s, InputSpec{7, 0.5, 3.0, 1.0});  // large logits: the maxima differ by split
  const Reference ref = reference_forward(s, in);
  for (int64_t i = 0; i < s.N; ++i)
    for (int64_t splits : {1, 2, 5, 11}) {
      CAPTURE(i);
      CAPTURE(splits);
      std::vector<decode::Partial> parts;
      for (const decode::Range& r : decode::split_keys(s.Nk, splits, 64)) parts.push_back(partial(s, in, i, r.begin, r.end));
      parts.push_back(partial(s, in, i, 5, 5));  // a split that saw no key weighs nothing
      std::vector<double> o(static_cast<size_t>(s.d));
      const double L = decode::merge(parts, s.d, o.data());
      CHECK(L == doctest::Approx(ref.lse_at(0, i)).epsilon(1e-12));
      for (int64_t c = 0; c < s.d; ++c) CHECK(o[size_t(c)] == doctest::Approx(ref.o_at(0, i, c)).epsilon(1e-11));
    }
  // A row whose splits all saw nothing: O = 0, L = +inf, as the reference's row with no visible key.
  std::vector<double> o(4, 1.0);
  CHECK(decode::merge({decode::Partial{{0, 0, 0, 0}, -std::numeric_limits<double>::infinity()}}, 4, o.data()) ==
        std::numeric_limits<double>::infinity());
  CHECK(o[0] == 0.0);
  // The merge can fail: weights without the rescaling by exp(L_s − L) do not give the reference.
  std::vector<decode::Partial> two = {partial(s, in, 0, 0, 64), partial(s, in, 0, 64, 700)};
  double naive = 0.0;
  for (const auto& p : two) naive += p.o[0] / 2.0;
  CHECK(naive != doctest::Approx(ref.o_at(0, 0, 0)).epsilon(1e-6));
}

TEST_CASE("decode: the number of splits fills the GPU when the problems alone do not, and never exceeds the tiles") {
  // 132 SMs, one block each: B·HKV = 8 problems want many splits; 264 problems want none.
  const int64_t many = decode::num_splits(132, 1, 8, 32768, 128);
  CHECK(many > 1);
  CHECK(8 * many >= 100);  // most of the SMs busy
  CHECK(decode::num_splits(132, 1, 264, 32768, 128) == 1);
  CHECK(decode::num_splits(132, 1, 8, 256, 128) <= 2);  // two tiles: at most two splits
  CHECK(decode::num_splits(132, 1, 1, 1 << 20, 64, 16) <= 16);
  for (int64_t rb : {1, 3, 8, 33, 100, 131})
    for (int64_t len : {64, 1000, 4096, 131072}) {
      const int64_t s = decode::num_splits(132, 1, rb, len, 128);
      CAPTURE(rb);
      CAPTURE(len);
      CHECK(s >= 1);
      CHECK(s <= std::max<int64_t>(1, (len + 127) / 128));
    }
  CHECK_THROWS_AS(decode::num_splits(0, 1, 1, 1, 1), std::invalid_argument);
}

TEST_CASE("decode: a paged cache finds every token through its block table, shuffled or not, and bad layouts are named") {
  const std::vector<int64_t> lens = {0, 1, 17, 300, 512};
  const int64_t cap = 512;
  for (int64_t ps : {16, 64, 256}) {
    CAPTURE(ps);
    for (const decode::PagedLayout& p : {decode::contiguous_layout(lens, cap, ps), decode::shuffled_layout(lens, cap, ps, 3)}) {
      CHECK(decode::validate(p, cap).empty());
      // every (sequence, token) has its own (page, slot): no two tokens share a place in the pool
      std::vector<char> used(static_cast<size_t>(p.num_pages * ps), 0);
      for (int64_t b = 0; b < p.batch(); ++b)
        for (int64_t t = 0; t < lens[size_t(b)]; ++t) {
          const int64_t at = p.page_of(b, t) * ps + t % ps;
          CHECK(used[size_t(at)] == 0);
          used[size_t(at)] = 1;
        }
    }
    const decode::PagedLayout c = decode::contiguous_layout(lens, cap, ps);
    CHECK(c.page_of(3, 299) == 3 * c.pages_per_seq + 299 / ps);  // contiguous: the plain cache's order
  }
  CHECK(decode::shuffled_layout(lens, cap, 16, 3).block_table != decode::contiguous_layout(lens, cap, 16).block_table);
  decode::PagedLayout p = decode::contiguous_layout(lens, cap, 64);
  p.page_size = 48;
  CHECK(decode::validate(p, cap).find("--page-size must be a power of two") == 0);
  p = decode::contiguous_layout(lens, cap, 64);
  p.cache_lens[2] = cap + 1;
  CHECK(decode::validate(p, cap).find("--cache-lens: sequence 2 holds 513 tokens") == 0);
  p = decode::contiguous_layout(lens, cap, 64);
  p.block_table[size_t(4 * p.pages_per_seq + 7)] = int32_t(p.num_pages);
  CHECK(decode::validate(p, cap).find("block table: sequence 4's page 7 is") == 0);
  // a page past a sequence's length is never read: what it holds does not matter
  p = decode::contiguous_layout(lens, cap, 64);
  p.block_table[size_t(1 * p.pages_per_seq + 3)] = -5;
  CHECK(decode::validate(p, cap).empty());
  CHECK(decode::validate(decode::contiguous_layout(lens, 256, 64), cap).find("block table: 4 pages per sequence") == 0);
  CHECK(!decode::valid_page_size(8));
  CHECK(!decode::valid_page_size(512));
  CHECK(decode::valid_page_size(128));
}
