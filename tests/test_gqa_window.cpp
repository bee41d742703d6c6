// Grouped-query attention (--hkv) and sliding windows (--window) in the steps that take them (12, 13
// and 16): the window's tile classification against the mask element by element, the blueprints
// against the reference, their ledgers against the closed forms, and that tiles left of a window
// are really skipped (their K/V bytes are not read).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernel/causal.hpp"
#include "reference/checks.hpp"
#include "reference/reference_lowp.hpp"
#include "core/registry.hpp"
#include "harness/runner.hpp"
#include "core/rng.hpp"
#include "core/shapes.hpp"

#include "../steps/12_warp_tiling/schedule.hpp"

using namespace fa;

namespace fa::step12 {
const StepInfo& info();
}

TEST_CASE("window: classify_tile and first_kv_tile agree with the mask element by element, and window = 0 is the causal mask") {
  Rng rng(5);
  int diagonal_left = 0, masked_left = 0;  // tiles only the window's left edge makes diagonal / masked
  for (int t = 0; t < 400; ++t) {
    const int64_t N = 1 + int64_t(rng.below(300)), Nk = 1 + int64_t(rng.below(300)), Br = 16 * (1 + int64_t(rng.below(8))),
                  Bc = 16 * (1 + int64_t(rng.below(8)));
    const int64_t W = t % 5 == 0 ? 0 : 1 + int64_t(rng.below(t % 2 ? 40 : 400));
    CAPTURE(N);
    CAPTURE(Nk);
    CAPTURE(Br);
    CAPTURE(Bc);
    CAPTURE(W);
    for (int64_t i0 = 0; i0 < N; i0 += Br) {
      const int64_t i1 = std::min(i0 + Br, N), first = first_kv_tile(i0, i1, N, Nk, Bc, true, W),
                    end = kv_tiles_for(i0, i1, N, Nk, Bc, true);
      REQUIRE(first <= end);
      bool any_row_sees = false;
      for (int64_t j0 = 0; j0 < Nk; j0 += Bc) {
        const int64_t j1 = std::min(j0 + Bc, Nk);
        int64_t seen = 0;
        for (int64_t i = i0; i < i1; ++i)
          for (int64_t j = j0; j < j1; ++j) seen += key_visible(i, j, N, Nk, true, W);
        const int64_t all = (i1 - i0) * (j1 - j0);
        const TileKind k = classify_tile(i0, i1, j0, j1, N, Nk, true, W);
        CHECK((k == TileKind::Visible) == (seen == all));
        CHECK((k == TileKind::Masked) == (seen == 0));
        const int64_t j = j0 / Bc;
        CHECK((j >= first && j < end) == (seen > 0));  // the loop visits exactly the tiles with a visible entry
        CHECK(needs_mask(i0, i1, j0, N, Nk, Bc, true, W) == (k != TileKind::Visible || j0 + Bc > Nk));
        any_row_sees = any_row_sees || seen > 0;
        const TileKind plain = classify_tile(i0, i1, j0, j1, N, Nk, true);
        diagonal_left += k == TileKind::Diagonal && plain == TileKind::Visible;
        masked_left += k == TileKind::Masked && plain != TileKind::Masked;
      }
      if (!any_row_sees) CHECK(first == end);
      if (W == 0) CHECK(first == 0);
    }
    // Row by row, the key range [first_key, visible_keys) is the Shape's own.
    Shape s;
    s.N = N;
    s.Nk = Nk;
    s.causal = true;
    s.window = W;
    for (int64_t i = 0; i < N; ++i)
      if (s.last_visible_key(i) >= 0) CHECK(first_key(i, N, Nk, W) == s.first_visible_key(i));
  }
  CHECK(diagonal_left > 0);  // the draws reach both new cases
  CHECK(masked_left > 0);
}

TEST_CASE("rows-seeing: the row range of each key is the mask read by key, with and without the mask and the window") {
  Rng rng(11);
  int64_t cells = 0, seen = 0;
  for (int t = 0; t < 300; ++t) {
    const int64_t N = 1 + int64_t(rng.below(200)), Nk = 1 + int64_t(rng.below(200));
    const bool causal = t % 3 != 0;
    const int64_t W = t % 4 == 0 ? 0 : 1 + int64_t(rng.below(t % 2 ? 30 : 300));
    CAPTURE(N);
    CAPTURE(Nk);
    CAPTURE(causal);
    CAPTURE(W);
    for (int64_t j = 0; j < Nk + 3; ++j) {  // three keys past Nk: seen by no row
      const int64_t lo = first_row_seeing(j, N, Nk, causal), hi = end_row_seeing(j, N, Nk, causal, W);
      for (int64_t i = 0; i < N; ++i) {
        const bool want = j < Nk && key_visible(i, j, N, Nk, causal, W);
        CHECK((i >= lo && i < hi) == want);
        ++cells;
        seen += want;
      }
    }
  }
  CHECK(seen > 0);  // the draws reach both answers
  CHECK(seen < cells);
}

TEST_CASE("gqa, window: the blueprints of the steps that take them match the reference, and count their closed form") {
  int ran = 0;
  for (const StepInfo* st : all_steps()) {
    if (!test::takes_gqa_window(*st)) continue;
    for (const test::Case& c0 : test::gqa_window_matrix()) {
      if (!test::takes_case(*st, c0.shape)) continue;
      const test::Case c = test::for_step(c0, *st);  // [fp8]
      const std::string name = "step" + st->id + " " + c.name();
      CAPTURE(name);
      const Inputs in = make_inputs(c.shape, c.inputs);
      const BlueprintResult r = st->blueprint(c.shape, in, st->default_options());
      const Check chk = check_forward(c.shape, in, reference_forward(c.shape, in), r.out);
      INFO(chk.summary());
      CHECK(chk.pass);
      const std::string diff = r.ledger.diff(st->closed_form(c.shape, st->default_options()));
      INFO(diff);
      CHECK(diff.empty());
      ++ran;
    }
  }
  CHECK(ran >= int(test::gqa_window_matrix().size()));  // step 12 at least takes every case
}

TEST_CASE("gqa, window: the matrix reaches what it says (MQA, a middle group, windows below and above a tile, rows without keys)") {
  bool mqa = false, middle = false, small_w = false, wide_w = false, no_key = false, long_cache = false;
  for (const test::Case& c : test::gqa_window_matrix()) {
    const Shape& s = c.shape;
    REQUIRE(validate(s).empty());
    mqa = mqa || (s.hkv() == 1 && s.H > 1);
    middle = middle || (s.hkv() > 1 && s.hkv() < s.H);
    small_w = small_w || (s.window > 0 && s.window < 64);
    wide_w = wide_w || s.window > 2 * 128;
    no_key = no_key || (s.window > 0 && s.N > s.Nk);
    long_cache = long_cache || (s.N == 1 && s.window > 0 && s.Nk >= 2 * s.window);
  }
  CHECK(mqa);
  CHECK(middle);
  CHECK(small_w);
  CHECK(wide_w);
  CHECK(no_key);
  CHECK(long_cache);
}

TEST_CASE("window: step 12 skips the tiles left of the band — their K/V bytes are not read, counted or in closed form") {
  // One query row against 65536 keys (the decoding shape), d = 128 (Bc = 64), a window of 1000 keys:
  // the row sees keys 64536 .. 65535, tiles 1008 .. 1023: 16 tiles of K and V, not 1024.
  Shape s;
  s.H = 4;
  s.Hkv = 1;
  s.N = 1;
  s.Nk = 65536;
  s.d = 128;
  s.causal = true;
  s.window = 1000;
  const Ledger w = step12::closed_form(s, step12::kSchedule).total();
  CHECK(w.tiles_computed == 4 * 16);
  CHECK(w.tiles_skipped == 4 * 1008);
  CHECK(w.gmem_read == 4 * (128 * 2 + 16 * 64 * 2 * 128 * 2));
  Shape full = s;
  full.window = 0;
  const Ledger f = step12::closed_form(full, step12::kSchedule).total();
  CHECK(f.gmem_read == 4 * (128 * 2 + int64_t(65536) * 2 * 128 * 2));
  // The counted ledger drops alike (a smaller cache, so the CPU runs it): window off, on.
  for (const StepInfo* sp : all_steps()) {
    if (!test::takes_gqa_window(*sp) || !sp->supports_window || !sp->supports_gqa) continue;
    const StepInfo& st = *sp;
    CAPTURE(st.id);
    Shape a = test::for_step(s, st);  // [fp8] in e4m3 for an FP8 step
    a.Nk = 2000;
    a.window = 0;
    Shape b = a;
    b.window = 100;  // keys 1900 .. 1999
    // [fp8] An FP8 step's quantize kernels read every key whatever the window: the forward's kernels alone.
    auto forward = [&](const LedgerSet& ls) {
      Ledger t;
      for (const auto& [name, l] : ls.kernels)
        if (!st.fp8 || (name != "amax" && name != "quantize")) t += l;
      return t;
    };
    const Ledger la = forward(st.blueprint(a, make_inputs(a), st.default_options()).ledger),
                 lb = forward(st.blueprint(b, make_inputs(b), st.default_options()).ledger);
    CHECK(lb.gmem_read < la.gmem_read / 8);
    CHECK(lb.tiles_skipped > la.tiles_skipped);
    CHECK(lb.tiles_computed + lb.tiles_skipped == la.tiles_computed + la.tiles_skipped);
    CHECK(lb.tiles_computed <= 3 * a.H);  // 100 keys touch at most three tiles of 64 keys (two of 128), per head
  }
}

TEST_CASE("gqa: a step's blueprint with shared key/value heads gives the bits it gives on the heads repeated") {
  for (const StepInfo* sp : all_steps()) {
    if (!test::takes_gqa_window(*sp) || !sp->supports_window || !sp->supports_gqa) continue;
    const StepInfo& st = *sp;
    CAPTURE(st.id);
    Shape g;
    if (st.fp8) set_type(g, "e4m3");  // [fp8]
    g.H = 6;
    g.Hkv = 2;
    g.N = 70;
    g.Nk = 150;
    g.d = 64;
    g.causal = true;
    g.window = 90;
    const Inputs in = make_inputs(g);
    Shape full = g;
    full.Hkv = 0;
    Inputs rep = in;
    rep.k = Tensor4(g.B, g.H, g.Nk, g.d);
    rep.v = Tensor4(g.B, g.H, g.Nk, g.d);
    for (int64_t h = 0; h < g.H; ++h)
      for (int64_t j = 0; j < g.Nk; ++j)
        for (int64_t c = 0; c < g.d; ++c) {
          rep.k.at(0, h, j, c) = in.k.at(0, g.kv_head(h), j, c);
          rep.v.at(0, h, j, c) = in.v.at(0, g.kv_head(h), j, c);
        }
    const Forward a = st.blueprint(g, in, st.default_options()).out, b = st.blueprint(full, rep, st.default_options()).out;
    CHECK(a.o.v == b.o.v);
    CHECK(a.lse.v == b.lse.v);
    // and the head matters: with the two key/value heads swapped, another output
    Inputs swapped = in;
    for (int64_t j = 0; j < g.Nk; ++j)
      for (int64_t c = 0; c < g.d; ++c) {
        std::swap(swapped.k.at(0, 0, j, c), swapped.k.at(0, 1, j, c));
        std::swap(swapped.v.at(0, 0, j, c), swapped.v.at(0, 1, j, c));
      }
    CHECK(st.blueprint(g, swapped, st.default_options()).out.o.v != a.o.v);
  }
}

namespace {
// Σ dO ∘ O over every head, row and column, by the forward reference (which takes GQA and windows).
double loss(const Shape& s, const Inputs& in, const Tensor4& dO) {
  const Reference r = reference_forward(s, in);
  double x = 0.0;
  for (int64_t bh = 0; bh < s.B * s.H; ++bh)
    for (int64_t i = 0; i < s.N; ++i)
      for (int64_t c = 0; c < s.d; ++c) x += double(dO.at(bh / s.H, bh % s.H, i, c)) * r.o_at(bh, i, c);
  return x;
}
}  // namespace

TEST_CASE("gqa, window: the backward reference is the forward reference's derivative (dK, dV summed over the group)") {
  Shape s;
  s.B = 2;
  s.H = 4;
  s.Hkv = 2;
  s.N = 9;
  s.Nk = 20;
  s.d = 16;
  s.causal = true;
  s.window = 5;  // rows 0 .. 8 see keys i + 7 .. i + 11
  const Inputs in = make_inputs(s);
  const Tensor4 dO = make_grad_output(s, 3);
  const std::vector<int64_t> heads = {1, 6};  // b = 0, h = 1 (key/value head 0); b = 1, h = 2 (key/value head 1)
  const Gradients g = reference_backward(s, in, dO, heads);
  REQUIRE(g.dk.size() == size_t(2 * s.Nk * s.d));
  int checked = 0, nonzero = 0;
  // Central differences with the steps the float inputs really take.
  auto numeric = [&](Tensor4 Inputs::*t, int64_t b, int64_t h, int64_t r, int64_t c) {
    Inputs a = in, z = in;
    float& up = (a.*t).at(b, h, r, c);
    float& dn = (z.*t).at(b, h, r, c);
    const float x = up;
    up = x + 1e-3f;
    dn = x - 1e-3f;
    return (loss(s, a, dO) - loss(s, z, dO)) / (double(up) - double(dn));
  };
  for (size_t hi = 0; hi < heads.size(); ++hi) {
    const int64_t b = heads[hi] / s.H, h = heads[hi] % s.H, hk = s.kv_head(h);
    for (int64_t j : {0, 6, 7, 12, 19})  // keys no row sees (0, 6, 19), and seen ones
      for (int64_t c : {0, 5, 15}) {
        CAPTURE(hi);
        CAPTURE(j);
        CAPTURE(c);
        const double dk = numeric(&Inputs::k, b, hk, j, c), dv = numeric(&Inputs::v, b, hk, j, c);
        CHECK(g.dk[g.kv_index(int64_t(hi), j, c)] == doctest::Approx(dk).epsilon(1e-5).scale(1.0));
        CHECK(g.dv[g.kv_index(int64_t(hi), j, c)] == doctest::Approx(dv).epsilon(1e-5).scale(1.0));
        nonzero += std::fabs(dk) > 1e-3;
        checked += 2;
      }
    for (int64_t i : {0, 4, 8})
      for (int64_t c : {1, 9}) {
        const double dq = numeric(&Inputs::q, b, h, i, c);
        CHECK(g.dq[g.q_index(int64_t(hi), i, c)] == doctest::Approx(dq).epsilon(1e-5).scale(1.0));
        ++checked;
      }
  }
  CHECK(checked == 72);
  CHECK(nonzero >= 4);  // a derivative that is 0 everywhere would prove nothing
  // The naive low-precision backward takes the same shapes, within its own rounding of the reference.
  const LowpGradients lp = naive_backward_lowp(s, in, dO, heads);
  double worst = 0.0, scale = 0.0;
  for (size_t x = 0; x < g.dk.size(); ++x) worst = std::max(worst, std::fabs(double(lp.dk[x]) - g.dk[x])), scale = std::max(scale, std::fabs(g.dk[x]));
  for (size_t x = 0; x < g.dv.size(); ++x) worst = std::max(worst, std::fabs(double(lp.dv[x]) - g.dv[x])), scale = std::max(scale, std::fabs(g.dv[x]));
  CHECK(scale > 0.0);
  CHECK(worst < 0.02 * scale);
}

TEST_CASE("gqa, window: the backward blueprints of the steps that take them match the reference gradients, and count their closed form") {
  int ran = 0;
  for (const StepInfo* st : all_steps()) {
    if (!st->has_backward() || !test::takes_gqa_window(*st)) continue;
    for (const StepOptions& opt : st->all_variants())
      for (const test::Case& c : test::gqa_window_matrix()) {
        if (!test::takes_case(*st, c.shape) || c.shape.N * c.shape.Nk > 200 * 200) continue;
        const std::string name = "step" + st->id + " " + variant_name(opt) + " " + c.name();
        CAPTURE(name);
        const Inputs in = make_inputs(c.shape, c.inputs);
        const Tensor4 dO = make_grad_output(c.shape, c.inputs.seed + 1);
        const Forward fwd = st->blueprint(c.shape, in, opt).out;
        const BackwardBlueprintResult r = st->backward_blueprint(c.shape, in, fwd, dO, opt);
        CHECK(r.grads.dk.H == c.shape.hkv());
        const BackwardCheck chk = check_backward(c.shape, in, dO, reference_backward(c.shape, in, dO), r.grads);
        INFO(chk.summary());
        CHECK(chk.pass);
        const std::string diff = r.ledger.diff(st->backward_closed_form(c.shape, opt));
        INFO(diff);
        CHECK(diff.empty());
        ++ran;
      }
  }
  CHECK(ran > 0);
}

TEST_CASE("gqa, window: step 13's backward reads K and V once per key/value head, and skips the Q tiles left of a tile's band") {
  for (const StepInfo* st : all_steps()) {
    if (!st->has_backward() || !st->supports_gqa || !st->supports_window) continue;
    CAPTURE(st->id);
    Shape s;
    s.H = 8;
    s.N = s.Nk = 4096;
    s.d = 128;
    s.causal = true;
    const Ledger full = st->backward_closed_form(s, st->default_options()).total();
    Shape g = s;
    g.Hkv = 2;
    const Ledger grouped = st->backward_closed_form(g, st->default_options()).total();
    // K, V in and dK, dV out: 4 · Nk·d·2 bytes per key/value head instead of per query head
    CHECK(full.gmem_read - grouped.gmem_read == (8 - 2) * int64_t(4096) * 128 * 2 * 2);
    CHECK(full.gmem_write - grouped.gmem_write == (8 - 2) * int64_t(4096) * 128 * 2 * 2);
    CHECK(grouped.matmul_flops == full.matmul_flops);
    Shape w = s;
    w.window = 256;
    const Ledger windowed = st->backward_closed_form(w, st->default_options()).total();
    CHECK(windowed.tiles_computed < full.tiles_computed / 4);
    CHECK(windowed.tiles_computed + windowed.tiles_skipped == full.tiles_computed + full.tiles_skipped);
  }
}
