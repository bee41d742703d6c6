// Dropout (common/kernel/dropout.hpp, --dropout P): the mask's statistics and its 2 × 2 block layout against
// Random123 called directly; the reference forward against (P ∘ Z) V in plain loops; the reference
// backward against finite differences of the dropout forward; the command line and the runner.
#include <doctest/doctest.h>

#include <Random123/philox.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "harness/cli.hpp"
#include "kernel/dropout.hpp"
#include "grad_scales.hpp"
#include "reference/reference.hpp"
#include "core/registry.hpp"
#include "core/rng.hpp"
#include "harness/runner.hpp"

using namespace fa;

namespace {

Shape shape(int64_t B, int64_t H, int64_t N, int64_t Nk, int64_t d, bool causal, double p, uint64_t seed = 1234) {
  Shape s;
  s.B = B; s.H = H; s.N = N; s.Nk = Nk; s.d = d; s.causal = causal;
  s.dropout = p;
  s.dropout_seed = seed;
  return s;
}

// The probability of keeping a weight that the threshold realizes: 1 − t / 2^32.
double keep_probability(float p) { return 1.0 - double(dropout_threshold(p)) / 4294967296.0; }

struct Range {
  uint64_t seed, offset;
  int64_t bh, i0, j0, rows, cols;
};

int64_t kept(const Range& r, uint32_t t) {
  int64_t n = 0;
  for (int64_t i = r.i0; i < r.i0 + r.rows; ++i)
    for (int64_t j = r.j0; j < r.j0 + r.cols; ++j) n += dropout_keep(r.seed, r.offset, r.bh, i, j, t) ? 1 : 0;
  return n;
}

// Where two masks (a function of (i, j) each) agree, over a rows × cols block.
template <class A, class B>
double agreement(A a, B b, int64_t rows, int64_t cols) {
  int64_t same = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) same += a(i, j) == b(i, j) ? 1 : 0;
  return double(same) / double(rows * cols);
}

}  // namespace

TEST_CASE("dropout mask: the kept fraction is 1 − P within 5 sigma everywhere, and P = 0 keeps everything") {
  // Four blocks of 512 × 512 (1M elements): small and large indices, heads and offsets, both key words.
  const Range ranges[] = {{42, 0, 0, 0, 0, 512, 512},
                          {42, 0, 7, 1000, 3, 512, 512},
                          {uint64_t(1) << 40, 5, 123456, 3 * 65536 + 5, int64_t(1) << 20, 512, 512},
                          {0, 0xffffffffull, 1, 9, 100000, 512, 512}};
  for (float p : {0.1f, 0.5f, 0.9f}) {
    CAPTURE(p);
    const double q = keep_probability(p);
    CHECK(q == doctest::Approx(1.0 - p).epsilon(1e-9));
    int64_t total = 0, n_total = 0;
    for (const Range& r : ranges) {
      const int64_t n = r.rows * r.cols, k = kept(r, dropout_threshold(p));
      const double sigma = std::sqrt(double(n) * q * (1.0 - q));
      CAPTURE(r.bh);
      CHECK(std::fabs(double(k) - double(n) * q) <= 5.0 * sigma);
      total += k;
      n_total += n;
    }
    CHECK(n_total == int64_t(1) << 20);
    CHECK(std::fabs(double(total) - double(n_total) * q) <= 5.0 * std::sqrt(double(n_total) * q * (1.0 - q)));
  }
  CHECK(dropout_threshold(0.0f) == 0u);
  CHECK(dropout_rescale(0.0f) == 1.0f);
  CHECK(kept(ranges[2], dropout_threshold(0.0f)) == 512 * 512);
}

TEST_CASE("dropout mask: another seed, offset or head draws another mask, and neighbours are independent") {
  // For P = 1/2 two independent masks agree on half the elements (5 sigma over 128 × 128: ±0.02).
  const uint32_t t = dropout_threshold(0.5f);
  CHECK(t == 0x80000000u);
  auto mask = [&](uint64_t seed, uint64_t offset, int64_t bh, int64_t di = 0, int64_t dj = 0) {
    return [=](int64_t i, int64_t j) { return dropout_keep(seed, offset, bh, i + di, j + dj, t); };
  };
  const auto base = mask(7, 0, 3);
  CHECK(agreement(base, mask(7, 0, 3), 128, 128) == 1.0);
  for (const auto& [what, other] : {std::pair{"seed", mask(8, 0, 3)},
                                    {"seed's high word", mask(7 + (uint64_t(1) << 32), 0, 3)},
                                    {"offset", mask(7, 1, 3)},
                                    {"head", mask(7, 0, 4)},
                                    {"the next row", mask(7, 0, 3, 1, 0)},
                                    {"the next column", mask(7, 0, 3, 0, 1)},
                                    {"row + 8 (the same call)", mask(7, 0, 3, 8, 0)},
                                    {"column + 8 (the same call)", mask(7, 0, 3, 0, 8)}}) {
    CAPTURE(what);
    CHECK(std::fabs(agreement(base, other, 128, 128) - 0.5) < 0.02);
  }
  // Transposed: the mask of Sᵀ is not the mask of S read the other way (rows are queries, always).
  CHECK(std::fabs(agreement(base, [&](int64_t i, int64_t j) { return base(j, i); }, 128, 128) - 0.5) < 0.02);
}

TEST_CASE("dropout mask: [dropout-block] one Philox4x32-10 call per 2 × 2 block, counter {col, row, bh, offset}") {
  Rng rng(99);
  for (int trial = 0; trial < 200; ++trial) {
    // A block's first element: i % 16 < 8 and j % 16 < 8.
    const int64_t i = 16 * int64_t(rng.below(4096)) + int64_t(rng.below(8));
    const int64_t j = 16 * int64_t(rng.below(4096)) + int64_t(rng.below(8));
    const int64_t bh = int64_t(rng.below(1000));
    const uint64_t seed = rng.next_u64(), offset = rng.below(1u << 20);
    CAPTURE(i);
    CAPTURE(j);
    // The documented counter and key, written out: block index x -> 8·(x / 16) + x % 8.
    r123::Philox4x32 philox;
    const r123::Philox4x32::ctr_type ctr = {{uint32_t(8 * (j / 16) + j % 8), uint32_t(8 * (i / 16) + i % 8),
                                             uint32_t(bh), uint32_t(offset)}};
    const r123::Philox4x32::key_type key = {{uint32_t(seed & 0xffffffffu), uint32_t(seed >> 32)}};
    const r123::Philox4x32::ctr_type w = philox(ctr, key);
    // Word 2·a + b belongs to (i + 8a, j + 8b).
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 2; ++b) {
        const int64_t ii = i + 8 * a, jj = j + 8 * b;
        const DropoutWords got = dropout_words(seed, offset, bh, ii, jj);
        for (int x = 0; x < 4; ++x) CHECK(got.w[x] == w[x]);
        CHECK(dropout_word_of(ii, jj) == 2 * a + b);
        for (float p : {0.25f, 0.5f, 0.75f}) {
          const uint32_t t = dropout_threshold(p);
          CHECK(dropout_keep(seed, offset, bh, ii, jj, t) == (w[2 * a + b] >= t));
        }
      }
    // The neighbouring blocks are other calls.
    CHECK(dropout_words(seed, offset, bh, i + 1, j).w[0] != w[0]);
    CHECK(dropout_words(seed, offset, bh, i, j + 16).w[0] != w[0]);
  }
  // Distinct (block, word) for every position: the packing loses no row or column.
  std::vector<char> seen(2 * 4096, 0);
  for (int64_t x = 0; x < 4096; ++x) {
    const size_t at = 2 * size_t(dropout_block_index(x)) + size_t((x >> 3) & 1);
    REQUIRE(at < seen.size());
    CHECK(!seen[at]);
    seen[at] = 1;
  }
}

namespace {

// (P ∘ Z) V of one row by the definition, in plain loops; Z drawn from dropout.hpp directly.
void naive_dropout_row(const Shape& s, const Inputs& in, int64_t b, int64_t h, int64_t i, std::vector<double>& o, double& L) {
  const double scale = 1.0 / std::sqrt(double(s.d)), inf = std::numeric_limits<double>::infinity();
  const uint32_t t = dropout_threshold(float(s.dropout));
  std::vector<double> S(size_t(s.Nk), -inf);
  double m = -inf;
  for (int64_t j = 0; j < s.Nk; ++j) {
    if (s.causal && j > i + s.Nk - s.N) continue;
    double acc = 0;
    for (int64_t c = 0; c < s.d; ++c) acc += double(in.q.at(b, h, i, c)) * double(in.k.at(b, h, j, c));
    S[size_t(j)] = acc * scale;
    m = std::max(m, S[size_t(j)]);
  }
  o.assign(size_t(s.d), 0.0);
  L = inf;
  if (std::isinf(m)) return;
  double l = 0;
  for (int64_t j = 0; j < s.Nk; ++j) l += std::exp(S[size_t(j)] - m);
  L = m + std::log(l);
  for (int64_t j = 0; j < s.Nk; ++j) {
    if (!dropout_keep(s.dropout_seed, s.dropout_offset, b * s.H + h, i, j, t)) continue;
    const double pz = std::exp(S[size_t(j)] - m) / l / (1.0 - s.dropout);
    for (int64_t c = 0; c < s.d; ++c) o[size_t(c)] += pz * double(in.v.at(b, h, j, c));
  }
}

}  // namespace

TEST_CASE("reference with dropout: O = (P ∘ Z) V, L before dropout (causal and not, rows without keys)") {
  for (bool causal : {false, true})
    for (auto [N, Nk] : {std::pair<int64_t, int64_t>{37, 45}, {45, 37}}) {
      Shape s = shape(2, 3, N, Nk, 16, causal, 0.3);
      s.dropout_offset = 11;
      CAPTURE(s.str());
      const Inputs in = make_inputs(s, {5});
      const Reference ref = reference_forward(s, in);
      Shape plain = s;
      plain.dropout = 0.0;
      const Reference undropped = reference_forward(plain, in);
      double moved = 0.0;  // how far dropout moved O: the comparison must be able to tell
      for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.H; ++h)
          for (int64_t i = 0; i < s.N; ++i) {
            std::vector<double> o;
            double L;
            naive_dropout_row(s, in, b, h, i, o, L);
            const int64_t bh = b * s.H + h;
            CHECK(ref.lse_at(bh, i) == undropped.lse_at(bh, i));
            if (std::isinf(L)) CHECK(std::isinf(ref.lse_at(bh, i)));
            else CHECK(ref.lse_at(bh, i) == doctest::Approx(L).epsilon(1e-12));
            for (int64_t c = 0; c < s.d; ++c) {
              CHECK(std::fabs(ref.o_at(bh, i, c) - o[size_t(c)]) <= 1e-12 * (1.0 + std::fabs(o[size_t(c)])));
              moved = std::max(moved, std::fabs(ref.o_at(bh, i, c) - undropped.o_at(bh, i, c)));
            }
          }
      CHECK(moved > 0.1);
      // A sample of rows takes each row's own mask (by its index in the head, not its position).
      const std::vector<int64_t> rows = {0, 20, N - 1};
      const Reference some = reference_forward(s, in, rows);
      for (int64_t bh = 0; bh < s.B * s.H; ++bh)
        for (size_t r = 0; r < rows.size(); ++r)
          for (int64_t c = 0; c < s.d; ++c) CHECK(some.o_at(bh, int64_t(r), c) == ref.o_at(bh, rows[r], c));
    }
}

TEST_CASE("reference with dropout: P = 0 is the reference without dropout, bit for bit") {
  const Shape plain = shape(2, 2, 37, 45, 16, true, 0.0, 0);
  Shape zero = plain;
  zero.dropout_seed = 99;  // a seed and an offset without P change nothing
  zero.dropout_offset = 3;
  const Inputs in = make_inputs(plain, {8});
  const Reference a = reference_forward(plain, in), b = reference_forward(zero, in);
  CHECK(a.o == b.o);
  CHECK(a.lse == b.lse);
  const Tensor4 dO = make_grad_output(plain, 9);
  const Gradients ga = reference_backward(plain, in, dO), gb = reference_backward(zero, in, dO);
  CHECK(ga.dq == gb.dq);
  CHECK(ga.dk == gb.dk);
  CHECK(ga.dv == gb.dv);
  CHECK(ga.dq_mag == gb.dq_mag);
  CHECK(ga.dk_mag == gb.dk_mag);
  CHECK(ga.dv_mag == gb.dv_mag);
  CHECK(ga.D == gb.D);
  CHECK(dropout_factor(zero, 1, 5, 7) == 1.0);
  Shape on = zero;
  on.dropout = 0.5;
  const double z = dropout_factor(on, 1, 5, 7);
  CHECK((z == 0.0 || z == 2.0));
  CHECK(z == (dropout_keep(99, 3, 1, 5, 7, dropout_threshold(0.5f)) ? 2.0 : 0.0));
}

namespace {

// f(Q, K, V) = Σ dO ∘ O through the dropout reference forward, in double.
double objective(const Shape& s, const Inputs& in, const Tensor4& dO) {
  const Reference r = reference_forward(s, in);
  double f = 0.0;
  for (int64_t bh = 0; bh < s.B * s.H; ++bh)
    for (int64_t i = 0; i < s.N; ++i)
      for (int64_t c = 0; c < s.d; ++c) f += r.o_at(bh, i, c) * double(dO.v[size_t((bh * s.N + i) * s.d + c)]);
  return f;
}

// Central differences with h = 2^-8 (x ± h exact in float for these inputs). The mask depends on
// indices only, so f is as smooth as without dropout.
void check_dropout_gradients(const Shape& s, uint64_t seed) {
  CAPTURE(s.str());
  Inputs in = make_inputs(s, {seed});
  const Tensor4 dO = make_grad_output(s, seed + 1);
  const Gradients g = reference_backward(s, in, dO);
  auto check_all = [&](Tensor4 Inputs::*which, const std::vector<double>& grad, const char* name) {
    CAPTURE(name);
    Tensor4& t = in.*which;
    REQUIRE(grad.size() == t.v.size());
    for (size_t x = 0; x < t.v.size(); ++x) {
      const float h = 0x1p-8f, v = t.v[x];
      t.v[x] = v + h;
      const double up = objective(s, in, dO);
      t.v[x] = v - h;
      const double down = objective(s, in, dO);
      t.v[x] = v;
      CAPTURE(x);
      CHECK(grad[x] == doctest::Approx((up - down) / (2.0 * double(h))).epsilon(1e-4).scale(1.0));
    }
  };
  check_all(&Inputs::q, g.dq, "dQ");
  check_all(&Inputs::k, g.dk, "dK");
  check_all(&Inputs::v, g.dv, "dV");
}

}  // namespace

TEST_CASE("backward reference with dropout: dQ, dK, dV match finite differences of the dropout forward") {
  check_dropout_gradients(shape(2, 2, 6, 10, 16, true, 0.4), 31);
  check_dropout_gradients(shape(1, 2, 9, 7, 16, false, 0.6, uint64_t(1) << 33), 32);
  check_dropout_gradients(shape(1, 2, 10, 4, 16, true, 0.25), 33);  // rows 0..5 see no key
}

TEST_CASE("backward reference with dropout: the error scales bound the gradients elementwise") {
  // With P = 0.7 a kept weight is multiplied by 3.3: scales without Z would not bound dV.
  for (const Shape& s : {shape(1, 2, 150, 140, 32, false, 0.7), shape(2, 1, 140, 170, 16, true, 0.5)}) {
    CAPTURE(s.str());
    const Inputs in = make_inputs(s, {41});
    const Tensor4 dO = make_grad_output(s, 42);
    const test::ScaleBound sb = test::scale_bound(reference_backward(s, in, dO));
    CHECK(sb.violations == 0);
    CHECK(sb.most_dv > 0.5);
  }
}

namespace {

// A fake step that takes --dropout: its "blueprint" is the reference rounded to the storage type,
// computed with dropout (mode=good) or without it (mode=ignores).
BlueprintResult fake_forward(const Shape& s, const Inputs& in, const StepOptions& opt) {
  Shape used = s;
  if (opt.at("mode") == "ignores") used.dropout = 0.0;
  const Reference ref = reference_forward(used, in);
  BlueprintResult r{{Tensor4(s.B, s.H, s.N, s.d), Tensor4(s.B, s.H, s.N, 1)}, {}};
  for (int64_t bh = 0; bh < s.B * s.H; ++bh)
    for (int64_t i = 0; i < s.N; ++i) {
      r.out.lse.v[size_t(bh * s.N + i)] = float(ref.lse_at(bh, i));
      for (int64_t c = 0; c < s.d; ++c) r.out.o.v[size_t((bh * s.N + i) * s.d + c)] = round_to(s.dtype, float(ref.o_at(bh, i, c)));
    }
  return r;
}
BackwardBlueprintResult fake_backward(const Shape& s, const Inputs& in, const Forward&, const Tensor4& dO,
                                      const StepOptions& opt) {
  Shape used = s;
  if (opt.at("mode") == "ignores") used.dropout = 0.0;
  const Gradients g = reference_backward(used, in, dO);
  BackwardBlueprintResult r{{Tensor4(s.B, s.H, s.N, s.d), Tensor4(s.B, s.H, s.Nk, s.d), Tensor4(s.B, s.H, s.Nk, s.d)}, {}, {}};
  for (size_t x = 0; x < g.dq.size(); ++x) r.grads.dq.v[x] = round_to(s.dtype, float(g.dq[x]));
  for (size_t x = 0; x < g.dk.size(); ++x) {
    r.grads.dk.v[x] = round_to(s.dtype, float(g.dk[x]));
    r.grads.dv.v[x] = round_to(s.dtype, float(g.dv[x]));
  }
  return r;
}
LedgerSet no_ledger(const Shape&, const StepOptions&) { return {}; }

const StepInfo& dropout_step() {
  static const StepInfo step = [] {
    StepInfo i;
    i.id = "98";
    i.slug = "fake_dropout";
    i.title = "a fake step with dropout";
    i.flags = {{"mode", {"good", "ignores"}, "whether the fake applies dropout"}};
    i.supports_dropout = true;
    i.blueprint = fake_forward;
    i.closed_form = no_ledger;
    i.backward_blueprint = fake_backward;
    i.backward_closed_form = no_ledger;
    return i;
  }();
  return step;
}

std::string cli_error(const StepInfo& st, const std::vector<std::string>& args) {
  try {
    CliOptions o = parse_cli(st, args);
    apply_default_shape(o, false);
  } catch (const CliError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("--dropout: a step without dropout refuses it, naming itself and the steps that have it") {
  const StepInfo& step01 = *all_steps().front();
  REQUIRE(!step01.supports_dropout);
  CHECK_THROWS_AS(parse_cli(step01, {"--dropout", "0.1"}), CliError);
  const std::string e = cli_error(step01, {"--dropout", "0.1"});
  CHECK(e.find("step01") != std::string::npos);
  for (const StepInfo* st : all_steps())  // the message names every step that applies dropout
    if (st->supports_dropout) CHECK(e.find(st->id) != std::string::npos);
  CHECK(cli_error(step01, {"--dropout", "0"}).empty());  // P = 0 is no dropout: any step takes it
  CHECK(cli_error(step01, {"--dropout", "0.1", "--help"}).empty());
  for (const StepInfo* st : all_steps()) {
    CAPTURE(st->id);
    const std::string err = cli_error(*st, {"--dropout", "0.5", "--n", "8"});
    CHECK(err.empty() == st->supports_dropout);
  }
}

TEST_CASE("--dropout P and --dropout-seed S fill the shape, and bad values are CliErrors") {
  const StepInfo& st = dropout_step();
  CliOptions o = parse_cli(st, {"--dropout", "0.25", "--seed", "9"});
  CHECK(o.shape.dropout == 0.25);
  CHECK(o.shape.dropout_seed == 9);  // --seed, unless --dropout-seed
  CHECK(o.shape.dropout_offset == 0);
  o = parse_cli(st, {"--dropout=0.5", "--dropout-seed", "77", "--seed", "9"});
  CHECK(o.shape.dropout == 0.5);
  CHECK(o.shape.dropout_seed == 77);
  CHECK(o.seed == 9);
  o = parse_cli(st, {});
  CHECK(o.shape.dropout == 0.0);
  CHECK(o.shape.dropout_seed == 42);
  for (const char* bad : {"1", "1.5", "-0.1", "nan", "abc", "0.99999999999"}) {
    CAPTURE(bad);
    CHECK(cli_error(st, {"--dropout", bad}).find("--dropout") != std::string::npos);
  }
  CHECK(cli_error(st, {"--dropout-seed", "3"}).find("--dropout-seed goes with --dropout") != std::string::npos);
  CHECK(cli_error(st, {"--dropout", "0.1", "--dropout-seed", "x"}).find("--dropout-seed") != std::string::npos);
  CHECK(cli_error(st, {"--grade", "--dropout", "0.1"}).find("--grade cannot go with --dropout") != std::string::npos);
  // validate() holds the range too, for shapes that do not come from the command line.
  Shape s = shape(1, 1, 8, 8, 16, false, 1.0);
  CHECK(validate(s).find("--dropout") != std::string::npos);
  s.dropout = 0.9;
  CHECK(validate(s).empty());
  CHECK(s.str().find(" dropout=0.9") != std::string::npos);
  s.dropout = 0.0;
  CHECK(s.str().find("dropout") == std::string::npos);
  const std::string u = usage(st);
  CHECK(u.find("--dropout P") != std::string::npos);
  CHECK(u.find("--dropout-seed S") != std::string::npos);
}

TEST_CASE("the runner checks a dropout step against the dropout reference, forward and backward") {
  const StepInfo& st = dropout_step();
  const std::vector<std::string> args = {"--b", "2", "--h", "2", "--n", "40", "--nk", "56", "--d", "32", "--causal",
                                         "--dropout", "0.3", "--backend", "cpu"};
  CliOptions o = parse_cli(st, args);
  apply_default_shape(o, false);
  const RunRecord good = run_once(st, o, false);
  CHECK(good.variant == "mode=good;dropout=0.3");
  CHECK(good.check.pass);
  CHECK(good.bwd_check.pass);
  std::vector<std::string> ignoring = args;
  ignoring.insert(ignoring.end(), {"--mode", "ignores"});
  o = parse_cli(st, ignoring);
  apply_default_shape(o, false);
  const RunRecord bad = run_once(st, o, false);
  CHECK(!bad.check.pass);
  CHECK(!bad.bwd_check.pass);
}
