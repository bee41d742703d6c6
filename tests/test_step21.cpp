// Step 21 (the FP8 forward): the layouts the kernel relies on (the A fragment's key order, the byte
// transpose, the e4m3 tile's swizzle), the quantization (scales, the Hadamard transform), the blueprint
// against the reference on the dequantized inputs over every way of quantizing, a check that fails on
// a missed tile, the ledger's closed form, and the command line's storage type.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/arch.hpp"
#include "core/registry.hpp"
#include "core/rng.hpp"
#include "core/shapes.hpp"
#include "harness/cli.hpp"
#include "harness/runner.hpp"
#include "reference/checks.hpp"
#include "reference/quantize.hpp"
#include "blueprint/wgmma_emu.hpp"
#include "kernel/fp8.hpp"

#include "../steps/21_fp8/schedule.hpp"

using namespace fa;

namespace fa::step21 {
const StepInfo& info();  // the registration (blueprint.cpp)
}

namespace {

Shape fp8_shape(int64_t B, int64_t H, int64_t N, int64_t Nk, int64_t d, bool causal, bool block, bool incoherent) {
  Shape s;
  s.B = B, s.H = H, s.N = N, s.Nk = Nk, s.d = d, s.causal = causal;
  set_type(s, "e4m3");
  s.fp8_block = block, s.incoherent = incoherent;
  return s;
}

}  // namespace

TEST_CASE("step 21 [key-order]: each lane packs its own accumulators into the e4m3 A fragment, and Vᵀ's columns follow") {
  std::set<int> keys, slots;
  for (int k = 0; k < 32; ++k) {
    CHECK(step21::key_of_slot(step21::slot_of_key(k)) == k);
    keys.insert(step21::key_of_slot(k));
    slots.insert(step21::slot_of_key(k));
  }
  CHECK(keys.size() == 32);  // both are permutations of 0 .. 31
  CHECK(slots.size() == 32);
  int checked = 0;
  for (int lane = 0; lane < 32; ++lane)
    for (int kk = 0; kk < 4; ++kk)
      for (int q = 0; q < 4; ++q)
        for (int i = 0; i < 4; ++i) {
          CAPTURE(lane);
          CAPTURE(kk);
          CAPTURE(q);
          CAPTURE(i);
          const int g = m16n8k16::group(lane), t = m16n8k16::thread_in_group(lane);
          // The A fragment's place (PTX: register q, byte i of lane 4g + t) ...
          const int row = g + 8 * (q % 2), slot = 4 * t + i + 16 * (q / 2);
          // ... holds the key the kernel's register acc_reg_of(kk, q, i) of the same lane holds.
          const int r = step21::acc_reg_of(kk, q, i);
          const m16n8k16::Coord c = wgmma::acc_elem(0, lane, r);
          CHECK(c.row == row);
          CHECK(c.col == 32 * kk + step21::key_of_slot(slot));
          CHECK(r == step21::acc_reg_of(kk, q, 0) + (i < 2 ? i : i + 2));  // the kernel's r, r + 1, r + 4, r + 5
          ++checked;
        }
  CHECK(checked == 32 * 4 * 4 * 4);
}

TEST_CASE("step 21 [transpose4]: prmt's selectors as PTX defines them, and four rows of four bytes into columns") {
  CHECK(step21::byte_perm(0x33221100u, 0x77665544u, 0x3210) == 0x33221100u);
  CHECK(step21::byte_perm(0x33221100u, 0x77665544u, 0x7654) == 0x77665544u);
  CHECK(step21::byte_perm(0x33221100u, 0x77665544u, 0x5140) == 0x55114400u);
  Rng rng(21);
  for (int trial = 0; trial < 1000; ++trial) {
    uint32_t r[4], out[4];
    for (uint32_t& x : r) x = uint32_t(rng.next_u64());
    step21::transpose4(r, out);
    for (int i = 0; i < 4; ++i)
      for (int k = 0; k < 4; ++k) REQUIRE(((out[i] >> (8 * k)) & 0xff) == ((r[k] >> (8 * i)) & 0xff));
  }
}

TEST_CASE("step 21 [sw128]: an e4m3 tile's bytes sit where the 16-bit layout puts the same bytes, each once") {
  for (int R : {64, 128, 256})
    for (int C : {128, 256}) {
      std::vector<int> seen(size_t(R * C), 0);
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
          const uint32_t at = step21::sw8_offset(r, c, R);
          REQUIRE(at < uint32_t(R * C));
          ++seen[at];
          if (c % 2 == 0) REQUIRE(at == wgmma::sw128_offset(r, c / 2, R));  // a 16-bit element's first byte
        }
      CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
    }
}

// [transpose-banks] The most 4-byte words one shared-memory bank is asked for by one warp-instruction of the
// transposers (32 lanes), over their four loads (raw V, keys' rows) and four stores (Vᵀ, dims' rows), for a
// way of handing units to lanes: 1 = every access one wavefront.
template <class Unit>
int worst_bank_load(int d, Unit unit, int& loads_worst, int& stores_worst) {
  constexpr int Bc = 128;
  loads_worst = stores_worst = 0;
  for (int g = 0; g < step21::transpose_units(Bc, d) / 32; ++g)
    for (int i = 0; i < 4; ++i) {
      std::vector<std::set<uint32_t>> load(32), store(32);
      for (int l = 0; l < 32; ++l) {
        const auto [sg, dg] = unit(32 * g + l);
        const int slot0 = 4 * sg, n0 = 4 * dg;
        const int key = 32 * (slot0 / 32) + step21::key_of_slot(slot0 % 32 + i);
        const uint32_t a = step21::sw8_offset(key, n0, Bc), b = step21::sw8_offset(n0 + i, slot0, d);
        load[(a / 4) % 32].insert(a / 4);
        store[(b / 4) % 32].insert(b / 4);
      }
      for (int k = 0; k < 32; ++k) {
        loads_worst = std::max(loads_worst, int(load[size_t(k)].size()));
        stores_worst = std::max(stores_worst, int(store[size_t(k)].size()));
      }
    }
  return std::max(loads_worst, stores_worst);
}

TEST_CASE("step 21 [transpose-banks]: every unit once, and no two lanes of a transposer's load or store on one bank") {
  for (int d : {128, 256}) {
    CAPTURE(d);
    const int units = step21::transpose_units(128, d);
    std::set<std::pair<int, int>> seen;
    for (int u = 0; u < units; ++u) {
      const step21::TransposeUnit t = step21::transpose_unit(u, d);
      REQUIRE(t.slot_group >= 0);
      REQUIRE(t.slot_group < 32);
      REQUIRE(t.dim_group >= 0);
      REQUIRE(t.dim_group < d / 4);
      seen.insert({t.slot_group, t.dim_group});
    }
    CHECK(int(seen.size()) == units);  // a permutation of the tile's units: the same transpose, another order
    int loads = 0, stores = 0;
    CHECK(worst_bank_load(d, [&](int u) { auto t = step21::transpose_unit(u, d); return std::pair{t.slot_group, t.dim_group}; },
                          loads, stores) == 1);
    // The order before: slot group u % 32, dim group u / 32. The count sees its conflicts, so the check above
    // can fail: a load's 32 keys (slot 4·sg + i, sg = 0..31) fall on as many swizzle rows (key mod 8) as
    // key_of_slot gives them, and the 32 words share that many banks.
    std::set<int> rows;
    for (int sg = 0; sg < 32; ++sg) rows.insert(step21::key_of_slot((4 * sg) % 32) % 8);
    worst_bank_load(d, [](int u) { return std::pair{u % 32, u / 32}; }, loads, stores);
    CHECK(loads == 32 / int(rows.size()));
    CHECK(loads > 1);
    CHECK(stores == 1);
  }
}

// [transpose-addr] The stepped addresses (--v kernel-stepped) against the ones the default rebuilds from
// transpose_unit, key_of_slot and sw8_offset: every unit, every one of its four loads and four stores, at
// both compiled head dimensions and two stage bases. A base that is not a multiple of 128 breaks them
// (the XOR would then flip bits the base owns), so the check can fail.
static int stepped_mismatches(int d, uint32_t raw, uint32_t vt) {
  constexpr int Bc = 128;
  int bad = 0;
  for (int g = 0; g < step21::transpose_units(Bc, d) / 32; ++g)
    for (int l = 0; l < 32; ++l) {
      const step21::TransposeUnit tu = step21::transpose_unit(32 * g + l, d);
      const int n0 = 4 * tu.dim_group, slot0 = 4 * tu.slot_group;
      const step21::TransposeLane tl = step21::transpose_lane(l);
      REQUIRE(step21::transpose_dims(tl, g, d) == n0);
      const uint32_t ld0 = step21::transpose_load0(raw, tl, g, n0, Bc), st0 = step21::transpose_store0(vt, tl, g, n0);
      for (int i = 0; i < 4; ++i) {
        const int key = 32 * (slot0 / 32) + step21::key_of_slot(slot0 % 32 + i);
        bad += step21::transpose_load(ld0, i) != raw + step21::sw8_offset(key, n0, Bc);
        bad += step21::transpose_store(st0, i) != vt + step21::sw8_offset(n0 + i, slot0, d);
      }
    }
  return bad;
}

TEST_CASE("step 21 [transpose-addr]: the stepped addresses are sw8_offset's, unit for unit, on a swizzle-aligned stage") {
  for (int d : step21::kHeadDims) {
    if (d < step21::kRawVMinD) continue;  // [sw64] no transposer is built there (the test above refuses it)
    CAPTURE(d);
    CHECK(stepped_mismatches(d, 0, 0) == 0);
    CHECK(stepped_mismatches(d, 3 * 1024 + 5 * 16384, 7 * 1024) == 0);  // any 1024-aligned stage
    CHECK(stepped_mismatches(d, 16, 0) > 0);                            // a raw stage off by a chunk
    CHECK(stepped_mismatches(d, 0, 48) > 0);                            // Vᵀ's stage off by three chunks
  }
}

TEST_CASE("step 21 [v-transpose] pretransposed: the quantize kernel's staging tile gives each dim its 32 slots in order") {
  for (int d : step21::kHeadDims) {
    CAPTURE(d);
    const int L = step21::row_lanes(d), E = d / L;  // a lane's dims: E·(lane % L) .. + E − 1 ([half-rows])
    std::vector<int> tile(size_t(32 * d), -1);
    auto code = [&](int slot, int dim) { return (slot * 7 + dim * 13) % 256; };
    for (int slot = 0; slot < 32; ++slot)
      for (int dim = 0; dim < d; ++dim) {
        const int at = step21::vt_stage_byte(slot, dim, d);
        REQUIRE(at >= 0);
        REQUIRE(at < 32 * d);
        CHECK(tile[size_t(at)] == -1);  // each byte written once
        tile[size_t(at)] = code(slot, dim);
      }
    // the read-out: dim n takes words i·d + n, i = 0..7, and their bytes in order are Vᵀ's slots 0..31
    for (int n = 0; n < d; ++n)
      for (int i = 0; i < 8; ++i)
        for (int b = 0; b < 4; ++b) CHECK(tile[size_t(4 * (i * d + n) + b)] == code(4 * i + b, n));
    // a warp's byte store (a key for each L lanes: keys r and r + 4 at d = 64, the half-warps' turns two
    // dims apart; dim E·(lane % L) + e): words per bank, at most
    int worst = 0;
    for (int key = 0; key < 32; ++key)
      for (int e0 = 0; e0 < E; ++e0) {
        std::vector<std::set<int>> bank(32);
        for (int l = 0; l < 32; ++l) {
          const int half = l / L, slot = step21::slot_of_key((key + 4 * half) % 32), e = (e0 + 2 * half) % E;
          const int w = step21::vt_stage_byte(slot, E * (l % L) + e, d) / 4;
          bank[size_t(w % 32)].insert(w);
        }
        for (const auto& b : bank) worst = std::max(worst, int(b.size()));
      }
    CHECK(worst == d / 32);  // 32 lanes over d words a slot quartet: d / 32 words a bank
  }
}

TEST_CASE("step 21 [incoherent]: the transform is orthogonal, leaves QKᵀ as it was, and spreads an outlier") {
  for (int d : {32, 64, 128, 256}) {
    CAPTURE(d);
    std::vector<std::vector<float>> rows(size_t(d), std::vector<float>(size_t(d), 0.0f));
    for (int c = 0; c < d; ++c) {
      rows[size_t(c)][size_t(c)] = 1.0f;
      fp8::hadamard_row(rows[size_t(c)].data(), d);
    }
    double worst = 0;
    for (int a = 0; a < d; ++a)
      for (int b = 0; b < d; ++b) {
        double dot = 0;
        for (int c = 0; c < d; ++c) dot += double(rows[size_t(a)][size_t(c)]) * rows[size_t(b)][size_t(c)];
        worst = std::max(worst, std::fabs(dot - (a == b ? 1.0 : 0.0)));
      }
    CHECK(worst < 1e-6);
    // An outlier of 100 in one column: every entry of its transform is ±100/√d.
    std::vector<float> y(size_t(d), 0.0f);
    y[3] = 100.0f;
    fp8::hadamard_row(y.data(), d);
    for (float v : y) CHECK(std::fabs(std::fabs(v) - 100.0 / std::sqrt(double(d))) < 1e-3);
  }
  // Q and K through the same transform: the dequantized QKᵀ is within e4m3's error of the original's.
  const Shape s = fp8_shape(1, 1, 64, 64, 128, false, false, true);
  InputSpec spec{5};
  set_inputs(spec, "outliers");
  const Inputs in = make_inputs(s, spec);
  const Inputs dq = dequantize(quantize_fp8(s, in));
  double err = 0, mag = 0;
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 64; ++j) {
      double a = 0, b = 0, m = 0;
      for (int c = 0; c < 128; ++c) {
        a += double(in.q.at(0, 0, i, c)) * in.k.at(0, 0, j, c);
        b += double(dq.q.at(0, 0, i, c)) * dq.k.at(0, 0, j, c);
        m += std::fabs(double(dq.q.at(0, 0, i, c)) * dq.k.at(0, 0, j, c));
      }
      err = std::max(err, std::fabs(a - b) / m);
      mag = std::max(mag, std::fabs(a));
    }
  CHECK(mag > 1.0);                                   // the products are not all tiny
  CHECK(err <= 2.0 * kE4m3UnitRoundoff * 1.01);       // each product off by at most 2u relatively
}

TEST_CASE("step 21 [fp8-scales]: a descale per head or per 128 rows, every code within ±448 and the largest at it") {
  for (bool block : {false, true}) {
    CAPTURE(block);
    const Shape s = fp8_shape(2, 2, 300, 200, 64, false, block, false);
    const Inputs in = make_inputs(s, {9});
    const Fp8Inputs f = quantize_fp8(s, in);
    CHECK(f.q.groups == (block ? 3 : 1));
    CHECK(f.k.groups == (block ? 2 : 1));
    for (const Fp8Tensor* t : {&f.q, &f.k, &f.v}) {
      const Tensor4& src = t == &f.q ? in.q : t == &f.k ? in.k : in.v;
      for (int64_t bh = 0; bh < t->B * t->heads; ++bh)
        for (int64_t g = 0; g < t->groups; ++g) {
          const int64_t r0 = block ? g * 128 : 0, r1 = block ? std::min(t->rows, r0 + 128) : t->rows;
          float amax = 0, top = 0;
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = 0; c < t->d; ++c) {
              amax = std::max(amax, std::fabs(src.at(bh / t->heads, bh % t->heads, r, c)));
              top = std::max(top, std::fabs(e4m3_bits_to_float(t->code(bh / t->heads, bh % t->heads, r, c))));
            }
          CHECK(t->descale(bh / t->heads, bh % t->heads, r0) == amax / 448.0f);
          CHECK(top == 448.0f);  // the largest entry of the group lands on e4m3's largest value
        }
    }
  }
}

TEST_CASE("step 21 [two-level] [fp22]: a row's sum left in the 13-bit accumulator falls short by more than the check allows, a tile's at a time does not") {
  // One row of Õ: 16384 keys of positive weights (P·256, as codes) times values near 0.5 (as step 21's
  // default inputs), summed 32 keys per instruction. Left in the accumulator (fp22 after every
  // instruction) the sum loses bits at each of 512 instructions, always downwards; added into fp32 a
  // tile (kSumKeys) at a time it loses at most ⌈kSumKeys/32⌉ · 2⁻¹³ of its size: the check's term.
  Rng rng(21);
  const int n = 16384;
  double exact = 0, abs_sum = 0;
  float one_level = 0, two_level = 0, tile = 0;
  for (int k0 = 0; k0 < n; k0 += 32) {
    float chunk = 0;
    for (int k = k0; k < k0 + 32; ++k) {
      const float p = round_to_e4m3(float(256.0 * rng.uniform())), v = round_to_e4m3(float(0.5 + 0.25 * rng.normal()));
      chunk += p * v;
      exact += double(p) * double(v);
      abs_sum += std::fabs(double(p) * double(v));
    }
    one_level = wgmma::fp22(one_level + chunk);
    tile = wgmma::fp22((k0 % fp8::kSumKeys == 0 ? 0.0f : tile) + chunk);
    if ((k0 + 32) % fp8::kSumKeys == 0) two_level += tile;
  }
  const double allowed = double((fp8::kSumKeys + 31) / 32) * 0x1p-13 * abs_sum;
  CAPTURE(exact);
  CHECK(exact - double(one_level) > allowed);   // short, and by more than the tolerance
  CHECK(std::fabs(exact - double(two_level)) <= allowed);
  CHECK(double(one_level) < exact);              // toward zero: downwards for a positive sum
}

TEST_CASE("step 21: the blueprint matches the reference on the dequantized inputs, every way of quantizing and of bringing V") {
  int ran = 0;
  for (const char* ops : step21::kOpsNames)  // [lean-ops] both ways of spending the consumers' instructions
  for (const char* v : step21::kVLayoutNames)
    for (bool block : {false, true})
      for (bool incoherent : {false, true})
        for (const char* inputs : {"default", "outliers"})
          for (const auto& [N, Nk, causal] : {std::tuple<int64_t, int64_t, bool>{200, 300, true}, {130, 77, false}, {1, 333, false}}) {
            const Shape s = fp8_shape(1, 2, N, Nk, 64, causal, block, incoherent);
            const std::string what = std::string(v) + " ops=" + ops + " " + s.str() + " " + inputs;
            CAPTURE(what);
            InputSpec spec{uint64_t(N + Nk)};
            set_inputs(spec, inputs);
            const Inputs in = make_inputs(s, spec);
            const StepOptions o{{"v", v}, {"ops", ops}};
            const BlueprintResult r = step21::info().blueprint(s, in, o);
            const Reference ref = reference_forward(s, in);
            const Check chk = check_forward(s, in, ref, r.out);
            INFO(chk.summary());
            CHECK(chk.pass);
            // FP8's own error against the unquantized inputs: larger than against the dequantized ones,
            // and a few percent of O's size, not more.
            const Reference raw = reference_forward(s.without_fp8(), in);
            double o2 = 0;
            for (double x : raw.o) o2 += x * x;
            const double rms = std::sqrt(o2 / double(raw.o.size()));
            CHECK(o_rmse(s, raw, r.out) > o_rmse(s, ref, r.out));
            CHECK(o_rmse(s, raw, r.out) < 0.1 * rms);
            const std::string diff = r.ledger.diff(step21::info().closed_form(s, o));
            INFO(diff);
            CHECK(diff.empty());
            ++ran;
          }
  CHECK(ran == step21::kOpsChoices * step21::kVLayouts * 2 * 2 * 2 * 3);
}

TEST_CASE("step 21 [lean-ops]: --ops lean counts fewer non-matmul operations than plain, by the rescale of O and P·256 per tile, and --ops fold by P·256 alone") {
  for (int64_t d : {64, 128, 256}) {
    const Shape s = fp8_shape(2, 2, 300, 260, d, true, false, false);
    const step21::Schedule sc = step21::schedule_for(int(d), step21::kVKernel);
    LedgerSet ps = step21::closed_form(s, sc, step21::kVKernel, step21::kOpsPlain),
              ls = step21::closed_form(s, sc, step21::kVKernel, step21::kOpsLean),
              fs = step21::closed_form(s, sc, step21::kVKernel, step21::kOpsFold);
    const Ledger plain = ps["fp8"], lean = ls["fp8"], fold = fs["fp8"];
    CAPTURE(d);
    // every (Q tile, K/V tile) pair a block computes, per warp: 16 rows × (d + Bc) multiplies fewer (lean),
    // 16 rows × Bc (fold: P·256 only; Õ's rescale stays a multiply)
    const int64_t warps = 4 * sc.consumers();
    CHECK(plain.nonmatmul_ops - lean.nonmatmul_ops == plain.tiles_computed * warps * 16 * (d + sc.Bc));
    CHECK(plain.nonmatmul_ops - fold.nonmatmul_ops == plain.tiles_computed * warps * 16 * sc.Bc);
    for (const Ledger* x : {&lean, &fold}) {
      CHECK(x->gmem_read == plain.gmem_read);
      CHECK(x->exps == plain.exps);
    }
  }
}

TEST_CASE("step 21 [per-d-defaults]: --pv and --ops default to auto (the head dimension's pair), --v to pretransposed, and a named value wins") {
  const StepInfo& st = step21::info();
  const StepOptions dflt = st.default_options();
  CHECK(dflt.at("v") == std::string(step21::kVLayoutNames[step21::kVPretransposed]));
  CHECK(step21::v_layout_of({}) == step21::kVPretransposed);
  for (const auto& f : st.flags)
    if (f.name == "pv" || f.name == "ops") {
      CAPTURE(f.name);
      CHECK(f.choices.front() == step21::kAuto);
      CHECK_FALSE(f.sweep);  // experiments: ablation_variants() runs each named value alone
    }
  // the fastest pair measured at each head dimension (docs/21_fp8.md, "The defaults")
  const std::map<int, std::pair<int, int>> want = {{64, {step21::kPvOverlap, step21::kOpsLean}},
                                                   {128, {step21::kPvOverlap, step21::kOpsLean}},
                                                   {256, {step21::kPvSerial, step21::kOpsFold}}};
  for (const auto& [d, pair] : want) {
    CAPTURE(d);
    for (const StepOptions& o : {StepOptions{}, StepOptions{{"pv", "auto"}, {"ops", "auto"}}}) {
      CHECK(step21::pv_order_of(o, d) == pair.first);
      CHECK(step21::ops_of(o, d) == pair.second);
    }
    for (int k = 0; k < step21::kPvOrders; ++k) CHECK(step21::pv_order_of({{"pv", step21::kPvOrderNames[k]}}, d) == k);
    for (int k = 0; k < step21::kOpsChoices; ++k) CHECK(step21::ops_of({{"ops", step21::kOpsNames[k]}}, d) == k);
    CHECK_THROWS_WITH_AS(step21::ops_of({{"ops", "fast"}}, d), doctest::Contains("--ops fast"), std::invalid_argument);
  }
  // the default's ledger is the named pair's: auto is only a name for it
  for (int64_t d : {128, 256}) {
    const Shape s = fp8_shape(1, 2, 300, 260, d, true, false, false);
    const StepOptions named{{"v", "pretransposed"}, {"pv", step21::kPvOrderNames[want.at(int(d)).first]},
                            {"ops", step21::kOpsNames[want.at(int(d)).second]}};
    CAPTURE(d);
    CHECK(st.closed_form(s, {}).diff(st.closed_form(s, named)).empty());
    CHECK_FALSE(st.closed_form(s, {{"ops", "plain"}}).diff(st.closed_form(s, named)).empty());
  }
  // ablations: the default, then each named value of --pv and --ops alone
  size_t named = 0;
  for (const auto& f : st.flags)
    if (!f.sweep) named += f.choices.size() - 1;
  CHECK(st.ablation_variants().size() == 1 + named);
}

TEST_CASE("step 21: the FP8 check fails when a K/V tile is missed, or when O ignores V's descale") {
  const Shape s = fp8_shape(1, 1, 64, 400, 64, false, false, false);
  const Inputs in = make_inputs(s, {3});
  const Reference ref = reference_forward(s, in);
  const BlueprintResult good = step21::info().blueprint(s, in, step21::info().default_options());
  REQUIRE(check_forward(s, in, ref, good.out).pass);
  // The blueprint on K and V whose second tile is another draw: the tile it reads is not the reference's.
  Inputs other = in;
  const Inputs alt = make_inputs(s, {4});
  for (int64_t j = 128; j < 256; ++j)
    for (int64_t c = 0; c < s.d; ++c) other.v.at(0, 0, j, c) = alt.v.at(0, 0, j, c), other.k.at(0, 0, j, c) = alt.k.at(0, 0, j, c);
  const BlueprintResult wrong = step21::info().blueprint(s, other, step21::info().default_options());
  const Check missed = check_forward(s, in, ref, wrong.out);
  INFO(missed.summary());
  CHECK_FALSE(missed.pass);
  // O without V's descale: every value off by the factor.
  Forward off = good.out;
  const float dv = quantize_fp8(s, in).v.descales[0];
  for (float& x : off.o.v) x /= dv;
  CHECK_FALSE(check_forward(s, in, ref, off).pass);
}

TEST_CASE("step 21: the counted ledger equals the closed form on small shapes, both scales, the transform on and off, GQA and windows") {
  Rng rng(2121);
  int ran = 0;
  for (const char* v : {"kernel", "pretransposed"})
    for (int t = 0; t < 24; ++t) {
      Shape s = fp8_shape(1 + int64_t(rng.below(2)), 2, 1 + int64_t(rng.below(200)), 1 + int64_t(rng.below(300)), 32 << rng.below(3),
                          rng.below(2) == 1, rng.below(2) == 1, rng.below(2) == 1);
      if (t % 4 == 3) s.Hkv = 1;                                       // [gqa]
      if (t % 6 == 5) s.causal = true, s.window = 1 + int64_t(rng.below(100));  // [window]
      CAPTURE(v);
      const std::string shape = s.str();
      CAPTURE(shape);
      const StepOptions o{{"v", v}};
      const LedgerSet counted = step21::info().blueprint(s, make_inputs(s, {uint64_t(t)}), o).ledger;
      const std::string diff = counted.diff(step21::info().closed_form(s, o));
      INFO(diff);
      CHECK(diff.empty());
      ++ran;
    }
  CHECK(ran == 2 * 24);
}

TEST_CASE("step 21: half the bytes of step 16's operands, the quantize pass beside it, and Vᵀ's transpose in shared memory only") {
  const Shape s = fp8_shape(1, 16, 4096, 4096, 128, false, false, false);
  const LedgerSet k = step21::info().closed_form(s, {{"v", "kernel"}}), p = step21::info().closed_form(s, {{"v", "pretransposed"}});
  auto kernel = [](const LedgerSet& ls, const std::string& name) {
    for (const auto& [n, l] : ls.kernels)
      if (n == name) return l;
    FAIL("no kernel " << name);
    return Ledger{};
  };
  const Ledger fk = kernel(k, "fp8");
  // Q read once per block, K and V once per (block, tile): a byte each, plus the descales
  const int64_t blocks = 16 * 32, pairs = blocks * 32;
  CHECK(fk.gmem_read == 16 * (4096 * 128 + 2 * 32 * 4096 * 128) + 16 * (32 * 4 + pairs / 16 * 8));
  CHECK(fk.gmem_write == 16 * (4096 * 128 * 2 + 4096 * 4));
  // the transpose: V read and Vᵀ written once more per tile, in shared memory, not in HBM
  const Ledger fp = kernel(p, "fp8");
  CHECK(fk.gmem_read == fp.gmem_read);
  CHECK(fk.smem_read - fp.smem_read == pairs * 128 * 128);
  CHECK(fk.smem_write - fp.smem_write == pairs * 128 * 128);
  // the quantize kernels: bf16 read twice (the amax, then the codes), a byte written per element
  CHECK(kernel(k, "amax").gmem_read == 2 * 3 * int64_t(16) * 4096 * 128);
  CHECK(kernel(k, "quantize").gmem_read == 2 * 3 * int64_t(16) * 4096 * 128);
  CHECK(kernel(k, "quantize").gmem_write - kernel(k, "amax").gmem_write == 3 * int64_t(16) * 4096 * 128);
}

TEST_CASE("step 21: the command line runs e4m3 by default, refuses fp16 and bf16, other steps refuse e4m3 and its flags") {
  const StepInfo& st = step21::info();
  CliOptions o = parse_cli(st, {});
  CHECK(o.shape.fp8);
  CHECK(o.shape.dtype == DType::bf16);
  CHECK(std::string(o.shape.type_name()) == "e4m3");
  o = parse_cli(st, {"--dtype", "e4m3", "--fp8-scales", "block", "--incoherent"});
  CHECK(o.shape.fp8_block);
  CHECK(o.shape.incoherent);
  CHECK(o.shape.str().find("e4m3 fp8-scales=block incoherent") != std::string::npos);
  CHECK_THROWS_WITH_AS(parse_cli(st, {"--dtype", "bf16"}), doctest::Contains("runs FP8 only"), CliError);
  CHECK_THROWS_WITH_AS(parse_cli(st, {"--fp8-scales", "row"}), doctest::Contains("tensor or block"), CliError);
  CHECK_THROWS_WITH_AS(parse_cli(st, {"--dtype", "fp8"}), doctest::Contains("e4m3"), CliError);
  CHECK_THROWS_WITH_AS(parse_cli(st, {"--inputs", "wild"}), doctest::Contains("default, normal or outliers"), CliError);
  const Shape d96 = fp8_shape(1, 1, 64, 64, 96, false, false, true);  // no step takes d = 96; the quantizer still refuses it
  CHECK_THROWS_AS(quantize_fp8(d96, make_inputs(d96, {1})), std::invalid_argument);
  for (const StepInfo* other : all_steps()) {
    if (other->fp8) continue;
    CAPTURE(other->id);
    CHECK_THROWS_WITH_AS(parse_cli(*other, {"--dtype", "e4m3"}), doctest::Contains("has no FP8 path (step 21 runs it)"), CliError);
    CHECK_THROWS_WITH_AS(parse_cli(*other, {"--incoherent"}), doctest::Contains("no FP8 path"), CliError);
  }
}

TEST_CASE("step 21: the blueprint refuses what the FP8 wgmma cannot take, and the GPU what is not compiled") {
  const StepInfo& st = step21::info();
  Shape s = fp8_shape(1, 1, 64, 64, 16, false, false, false);
  CHECK_THROWS_AS(st.blueprint(s, make_inputs(s, {1}), st.default_options()), std::invalid_argument);  // k = 32 > 16
  Shape plain = s;
  plain.fp8 = false;
  plain.d = 64;
  CHECK_THROWS_AS(st.blueprint(plain, make_inputs(plain, {1}), st.default_options()), std::invalid_argument);
  GpuCaps h200;
  h200.name = "NVIDIA H200", h200.cc = h200.code_cc = 90, h200.smem_optin = 227 * 1024;
  s.d = 32;
  CHECK(unsupported_reason(st, s, st.default_options(), h200).find("head dimension 32 is not compiled") != std::string::npos);
  CHECK(unsupported_reason(st, plain, st.default_options(), h200).find("runs FP8 only") != std::string::npos);
  // [sw64] Every compiled d runs the default; the transposers (--v kernel, kernel-stepped) from kRawVMinD only,
  // refused below it with the reason, and every choice's shared memory fits where it is built.
  int refused = 0;
  for (int d : step21::kHeadDims)
    for (int v = 0; v < step21::kVLayouts; ++v) {
      s.d = d;
      const StepOptions o{{"v", step21::kVLayoutNames[v]}};
      CAPTURE(d);
      CAPTURE(step21::kVLayoutNames[v]);
      CHECK(unsupported_reason(st, s, st.default_options(), h200).empty());
      const std::string why = unsupported_reason(st, s, o, h200);
      if (d >= step21::kRawVMinD || v == step21::kVPretransposed) {
        CHECK(why.empty());
        CHECK(st.smem_bytes(s, o) <= 227 * 1024);
      } else {
        CHECK(why.find("is not built at d = " + std::to_string(d)) != std::string::npos);
        ++refused;
      }
    }
  CHECK(refused == (step21::kVLayouts - 1) * int(std::count_if(std::begin(step21::kHeadDims), std::end(step21::kHeadDims),
                                                               [](int d) { return d < step21::kRawVMinD; })));
  CHECK(refused > 0);
}

// [sw64] d = 64: Q's and K's rows of 64 bytes under the 64-byte swizzle. The slices' offsets are
// wgmma::kmajor_offset's at 128-byte rows; at 64-byte rows both k = 32 slices stay inside a row. The
// swizzle moves a row's four chunks among themselves, differently on rows 2 apart within 8 rows (so
// the 8 rows of a core group meet 4 banks' chunks each), and the descriptor carries mode 2 and SBO 512.
TEST_CASE("step 21 [sw64]: d = 64's Q and K offsets, the 64-byte swizzle, and its descriptor") {
  for (int d : {128, 256})
    for (int R : {64, 128})
      for (int kk = 0; kk < d / 32; ++kk)
        for (int r0 : {0, 8, 64}) CHECK(step21::qk_offset(r0, kk, R, d) == wgmma::kmajor_offset(r0, kk, R));
  CHECK(step21::qk_row_bytes(64) == 64);
  for (int r0 : {0, 8, 64})
    for (int kk = 0; kk < 2; ++kk) CHECK(step21::qk_offset(r0, kk, 128, 64) == uint32_t(64 * r0 + 32 * kk));
  std::vector<int> seen(8 * 64, 0);
  std::set<int> chunk_of_c0;
  for (int r = 0; r < 8; ++r) {
    for (int c = 0; c < 64; ++c) {
      const uint32_t at = step21::sw64_offset(r, c);
      REQUIRE(at < 8u * 64u);
      CHECK(at / 64 == uint32_t(r));  // a row's bytes stay in its row
      CHECK(at % 16 == uint32_t(c % 16));
      ++seen[at];
    }
    chunk_of_c0.insert(int(step21::sw64_offset(r, 0) % 64 / 16));
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  CHECK(chunk_of_c0.size() == 4);  // chunk 0 of the 8 rows lands in all four positions
  CHECK(step21::sw64_offset(8, 5) == 8 * 64 + step21::sw64_offset(0, 5));  // the pattern repeats every 8 rows
  const uint64_t dsc = wgmma::desc(4096 + 32, 16, 512, wgmma::kSwizzle64);
  CHECK(wgmma::desc_swizzle(dsc) == 2);
  CHECK(wgmma::desc_sbo(dsc) == 512);
  CHECK(wgmma::desc_addr(dsc) == 4096 + 32);
  CHECK(wgmma::desc_swizzle(wgmma::desc(4096)) == 1);
}

TEST_CASE("step 21: --save writes the codes (uint8) and the descales beside q, k, v, o and lse, and a non-finite input is refused") {
  const StepInfo& st = step21::info();
  const std::string dir = (std::filesystem::temp_directory_path() / "fa_save_test21").string();
  std::filesystem::remove_all(dir);
  CliOptions o = parse_cli(st, {"--n", "40", "--nk", "70", "--d", "64", "--fp8-scales", "block", "--save", dir});
  apply_default_shape(o, false);
  const RunRecord r = run_once(st, o, false);
  CHECK(r.check.pass);
  CHECK(r.raw_rmse > 0);
  for (const char* t : {"q", "k", "v"}) {
    CAPTURE(t);
    const bool q = std::string(t) == "q";
    const uint64_t codes = uint64_t(o.shape.B * (q ? o.shape.H : o.shape.hkv()) * (q ? 40 : 70) * 64);
    const uint64_t size = std::filesystem::file_size(dir + "/" + t + "8.npy");  // a byte per code after the .npy header
    CHECK(size > codes);
    CHECK(size - codes <= 256);
    CHECK(std::filesystem::file_size(dir + "/" + t + "_descale.npy") > 0);
  }
  for (const char* f : {"q.npy", "k.npy", "v.npy", "o.npy", "lse.npy"}) CHECK(std::filesystem::exists(dir + "/" + f));
  Shape s = fp8_shape(1, 1, 16, 16, 64, false, false, false);
  Inputs in = make_inputs(s, {1});
  in.k.at(0, 0, 3, 5) = std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH_AS(quantize_fp8(s, in), doctest::Contains("non-finite"), std::invalid_argument);
}
