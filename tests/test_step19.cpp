// Step 19 (the backward on Hopper): the accumulator layout the writer's bulk adds rely on, the tiles
// and stages per head dimension, the MN-major wgmma that forms dQ, every ablation against the
// reference and its own closed form (and what each changes in the ledger), its ledger against step
// 13's, and the refusals. (The shape matrix and the closed form on random shapes run for every
// backward step in test_backward.cpp.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "blueprint/wgmma_emu.hpp"
#include "core/rng.hpp"
#include "core/shapes.hpp"
#include "kernel/wgmma_layout.hpp"
#include "reference/checks.hpp"
#include "reference/reference.hpp"

#include "dropout_backward.hpp"
#include "dropout_probe.hpp"
#include "kernel/dropout.hpp"
#include "../steps/13_mma_backward/schedule.hpp"
#include "../steps/19_hopper_backward/schedule.hpp"

using namespace fa;

namespace fa::step19 {
const StepInfo& info();  // the registration (blueprint.cpp)
}

namespace {

struct Prepared {
  Inputs in;
  Forward fwd;
  Tensor4 dO;
  Gradients ref;
};
Prepared prepare(const Shape& s, const InputSpec& spec) {
  Prepared p;
  p.in = make_inputs(s, spec);
  p.fwd = step19::info().blueprint(s, p.in, {}).out;  // step 16's forward
  p.dO = make_grad_output(s, spec.seed);
  p.ref = reference_backward(s, p.in, p.dO);
  return p;
}

}  // namespace

TEST_CASE("step 19 [dq-layout]: each Q tile's accumulator is a permutation of its Br·d floats, a thread's register quad 16 contiguous bytes, a warp's quad store 512") {
  for (int d : {64, 128}) {
    CAPTURE(d);
    const step19::Schedule sc = step19::schedule_for(d);
    std::set<int64_t> seen;
    for (int r = 0; r < sc.Br; ++r)
      for (int c = 0; c < d; ++c) {
        const int64_t at = step19::acc_offset(r, c);
        CHECK(at >= 0);
        CHECK(at < int64_t(sc.Br) * d);
        seen.insert(at);
      }
    CHECK(seen.size() == size_t(sc.Br) * size_t(d));
    // Register r of thread t of the warpgroup's m64n64 accumulator (wgmma_layout.hpp [acc]) is at
    // 4·(128·(r / 4) + t) + r % 4 of its chunk: the quad's four floats are consecutive, and lanes
    // 0 .. 31 of a warp tile 512 bytes.
    for (int chunk = 0; chunk < d / 64; ++chunk)
      for (int w = 0; w < 4; ++w)
        for (int lane = 0; lane < 32; ++lane)
          for (int reg = 0; reg < 32; ++reg) {
            const m16n8k16::Coord rc = wgmma::acc_elem(w, lane, reg);
            const int64_t at = step19::acc_offset(rc.row, 64 * chunk + rc.col);
            CHECK(at == int64_t(chunk) * step19::kChunkFloats + 4 * (128 * (reg / 4) + 32 * w + lane) + reg % 4);
          }
  }
}

// [dq-layout] Transposed (--ablate tiles at d = 128): a consumer's chunk is dQᵀ's m64nBr accumulator in
// register order, dQ's column its row and the query its column. The same two properties, over that tile.
TEST_CASE("step 19 [dq-layout]: the transposed accumulator of an 80-row Q tile is a permutation, in dQᵀ's register order") {
  const step19::Schedule sc = step19::schedule_for(128, step19::kTiles);
  REQUIRE(step19::dq_transposed(sc));
  const int d = 128, R = step19::acc_rows(sc);
  CHECK(R == sc.Br);
  std::set<int64_t> seen;
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < d; ++c) {
      const int64_t at = step19::acc_offset_t(r, c, R);
      CHECK(at >= 0);
      CHECK(at < int64_t(R) * d);
      seen.insert(at);
    }
  CHECK(seen.size() == size_t(R) * size_t(d));
  for (int chunk = 0; chunk < d / 64; ++chunk)
    for (int w = 0; w < 4; ++w)
      for (int lane = 0; lane < 32; ++lane)
        for (int reg = 0; reg < R / 2; ++reg) {
          const m16n8k16::Coord rc = wgmma::acc_elem(w, lane, reg);  // (row of dQᵀ = dQ's column, query)
          const int64_t at = step19::acc_offset_t(rc.col, 64 * chunk + rc.row, R);
          CHECK(at == int64_t(chunk) * step19::chunk_floats(sc) + 4 * (128 * (reg / 4) + 32 * w + lane) + reg % 4);
        }
}

// [ds-smem] The tiles kernel stores dS transposed ([query][key], Br rows) at four base addresses a thread
// forms once, plus 1024 bytes for every 8 query rows: it relies on SW128's XOR reading the row mod 8 only.
TEST_CASE("step 19 [ds-smem]: in the transposed dS tile, the query 8 rows further is 1024 bytes further, for every key") {
  const step19::Schedule sc = step19::schedule_for(128, step19::kTiles);
  REQUIRE(step19::dq_transposed(sc));
  for (int R : {64, sc.Br, 128}) {
    CAPTURE(R);
    REQUIRE(R % 8 == 0);  // whole 8-row groups: the tile's rows are queries, 80 of them in the tiles kernel
    for (int q = 0; q + 8 < R; ++q)
      for (int key = 0; key < sc.Bc; ++key)
        CHECK(wgmma::sw128_offset(q + 8, key, R) == wgmma::sw128_offset(q, key, R) + wgmma::kGroupBytes);
  }
}

TEST_CASE("step 19: two stages at d = 128 and four at d = 64 fit the block, d = 256 does not, the register split fits the file") {
  const step19::Schedule s64 = step19::schedule_for(64), s128 = step19::schedule_for(128), s256 = step19::schedule_for(256);
  CHECK((s128.Br == 64 && s128.Bc == 128 && s128.consumers() == 2 && s128.threads() == 384));
  CHECK(s128.stages == 2);
  CHECK(s64.stages == 4);
  CHECK(step19::valid(s64, 64));
  CHECK(step19::valid(s128, 128));
  CHECK_FALSE(step19::valid(s256, 256));
  // One stage more at d = 128 would not fit: the stages are all that fit, not fewer.
  const step19::Schedule more{s128.Br, s128.Bc, s128.stages + 1};
  CHECK(step19::smem_bytes(more, 128) > step19::kSmemBudget);
  CHECK(step19::smem_bytes(s128, 128) <= step19::kSmemBudget);
  CHECK(128 * step19::kProducerRegs + 256 * step19::kConsumerRegs <= 65536);
  // [dq-split]: by columns where half of d is a 64-column panel.
  CHECK(step19::dq_by_columns(128, 2));
  CHECK_FALSE(step19::dq_by_columns(64, 2));
  CHECK(step19::default_split(128, 2) == step19::kByColumns);
  CHECK(step19::default_split(64, 2) == step19::kByTurns);
  CHECK(step19::split_of(64, step19::kDqKeys) == step19::kByKeys);
  CHECK(step19::split_of(128, step19::kDqKeys) == step19::kByKeys);
  CHECK(step19::dq_panel_of(step19::kByColumns, 1, 0) == 1);
  CHECK(step19::dq_panel_of(step19::kByTurns, 1, 0) == 0);
  CHECK(step19::dq_panel_of(step19::kByKeys, 1, 1) == 1);
  // [dq-split] by turns: consumer t % 2 computes item t, each buffer of a consumer used every other turn
  for (int t = 0; t < 16; ++t) {
    CHECK(step19::dq_computes(step19::kByTurns, t % 2, t));
    CHECK_FALSE(step19::dq_computes(step19::kByTurns, 1 - t % 2, t));
    if (t >= 4) {  // the same buffer's previous use is the consumer's item t − 4, one use earlier
      CHECK(step19::dq_buffer_of(step19::kByTurns, 1, t, 0) == step19::dq_buffer_of(step19::kByTurns, 1, t - 4, 0));
      CHECK(step19::dq_use_of(step19::kByTurns, 1, t) == step19::dq_use_of(step19::kByTurns, 1, t - 4) + 1);
    }
    if (t >= 2) CHECK(step19::dq_buffer_of(step19::kByTurns, 1, t, 0) != step19::dq_buffer_of(step19::kByTurns, 1, t - 2, 0));
  }
}

TEST_CASE("step 19 [desc-add]: a descriptor's low word plus offset >> 4 names the address plus the offset, wherever the block's operands lie, and not past 256 KB") {
  // Every 1024-aligned block start and every 16-byte offset that keeps the address inside the block's
  // shared memory (kSmemBudget, as large as a block may be): adding to the address field equals
  // building the descriptor anew. One CHECK over the count of mismatches, so doctest stays fast.
  int64_t pairs = 0, wrong = 0;
  for (uint32_t base = 0; base < step19::kSmemBudget; base += wgmma::kGroupBytes)
    for (uint32_t off = 0; base + off < step19::kSmemBudget; off += 16) {
      ++pairs;
      if (wgmma::desc_at(wgmma::desc_lo(base), off) != wgmma::desc(base + off)) ++wrong;
    }
  CHECK(pairs > 0);
  CHECK(wrong == 0);
  // The bound is real: at 256 KB the sum carries out of the 14-bit address field.
  CHECK(wgmma::desc_at(wgmma::desc_lo(0x3FFF0), 16) != wgmma::desc(0x40000));
  for (int d : step19::kHeadDims) CHECK(step19::smem_bytes(step19::schedule_for(d), d) <= step19::kSmemBudget);
}

TEST_CASE("step 19 [dq-wgmma]: the MN-major wgmma multiplies dS read from a dSᵀ tile by K, and a transposed read would be seen") {
  Ledger led;
  Smem smem(1 << 20, led);
  const Store st = Store::of(DType::f16);
  SmemTile dst = smem.tile(128, 64, st), kt = smem.tile(128, 128, st);  // dSᵀ: keys × queries; K: keys × dims
  Rng rng(7);
  for (int64_t r = 0; r < 128; ++r) {
    for (int64_t c = 0; c < 64; ++c) dst.write(r, c, st.apply(float(rng.normal())));
    for (int64_t c = 0; c < 128; ++c) kt.write(r, c, st.apply(float(rng.normal())));
  }
  const int64_t read0 = led.smem_read, flops0 = led.matmul_flops;
  std::vector<wgmma::Acc> out;
  for (int64_t n0 : {int64_t(0), int64_t(64)}) {
    out.emplace_back(64);
    for (int64_t kk = 0; kk < 8; ++kk) wgmma::mma_ss_mn(out.back(), dst, kk, kt, n0, kk > 0, led);
  }
  // (64 + 64)·16 elements read per instruction, 2·64·64·16 FLOPs.
  CHECK(led.matmul_flops - flops0 == 2 * 8 * 2 * 64 * 64 * 16);
  CHECK(led.smem_read - read0 == 2 * 8 * (64 + 64) * 16 * 2);
  for (int64_t n0 : {int64_t(0), int64_t(64)}) {
    const wgmma::Acc& dq = out[size_t(n0 / 64)];
    double worst = 0.0, worst_t = 0.0;
    for (int w = 0; w < 4; ++w)
      for (int lane = 0; lane < 32; ++lane)
        for (int reg = 0; reg < 32; ++reg) {
          const m16n8k16::Coord rc = wgmma::acc_elem(w, lane, reg);
          double want = 0.0, wrong = 0.0;  // dS(m, ·) · K(·, n0 + n), and with dSᵀ read untransposed
          for (int64_t k = 0; k < 128; ++k) {
            want += double(dst.read(k, rc.row)) * kt.read(k, n0 + rc.col);
            wrong += double(dst.read(rc.row, k % 64)) * kt.read(k, n0 + rc.col);
          }
          worst = std::max(worst, std::abs(want - dq.reg(w, lane, reg)));
          worst_t = std::max(worst_t, std::abs(wrong - dq.reg(w, lane, reg)));
        }
    CHECK(worst < 1e-3);
    CHECK(worst_t > 1.0);
  }
}

TEST_CASE("step 19: every ablation passes against the reference and counts its own closed form, what each changes in the ledger") {
  int n = 0;
  for (const test::Case& c : test::shape_matrix(false)) {
    if (c.shape.dtype != DType::f16 || (c.shape.d != 64 && c.shape.d != 128) || n++ % 3 != 0) continue;  // a third of the fp16 cases
    CAPTURE(c.name());
    const Prepared p = prepare(c.shape, c.inputs);
    const step19::Schedule sc0 = step19::schedule_for(int(c.shape.d));
    const BackwardBlueprintResult base = step19::blueprint(c.shape, p.in, p.fwd, p.dO, sc0, step19::kFull);
    for (int a = 0; a < step19::kAblations; ++a) {
      CAPTURE(step19::kAblationNames[a]);
      const step19::Schedule sc = step19::schedule_for(int(c.shape.d), a);
      if (!step19::refusal(false, int(c.shape.d), false, {{"ablate", step19::kAblationNames[a]}}).empty()) {
        CHECK(a == step19::kNoProducerLast);  // by turns alone
        CHECK(c.shape.d == 128);
        CHECK_THROWS_AS(step19::blueprint(c.shape, p.in, p.fwd, p.dO, sc, a), Unsupported);
        continue;
      }
      CHECK(sc.Br == (a == step19::kTiles ? step19::tiles_br(int(c.shape.d)) : 64));
      const BackwardBlueprintResult r = step19::blueprint(c.shape, p.in, p.fwd, p.dO, sc, a);
      const BackwardCheck chk = check_backward(c.shape, p.in, p.dO, p.ref, r.grads);
      INFO(chk.summary());
      CHECK(chk.pass);
      const std::string diff = r.ledger.diff(step19::closed_form(c.shape, sc, a));
      INFO(diff);
      CHECK(diff.empty());
      const Ledger kv = r.ledger.kernels[1].second, kv0 = base.ledger.kernels[1].second;
      // 128- or 80-query tiles cover other padded rows than 64-query ones unless N fills its last tile
      // as far as 64-row tiles do, and no mask or Nk ≠ N moves the first tile (the next case).
      if (a == step19::kTiles && (c.shape.causal || num_tiles(c.shape.N, 64) * 64 != num_tiles(c.shape.N, sc.Br) * sc.Br)) continue;
      CHECK(kv.matmul_flops == kv0.matmul_flops);  // the same products in every variant
      CHECK(kv.gmem_read == kv0.gmem_read);
      if (a == step19::kAtomics) {  // the staging's write and the writer's read of every chunk gone
        CHECK(kv.gmem_atomic == kv0.gmem_atomic);
        CHECK(kv0.smem_write - kv.smem_write == kv.gmem_atomic);
        CHECK(kv0.smem_read - kv.smem_read == kv.gmem_atomic);
      }
      if (a == step19::kNoOverlap || a == step19::kDkFirst || a == step19::kNoProducer || a == step19::kNoProducerLast)
        CHECK(kv == kv0);  // an order of waits and issues (or who issues the loads), not of work
      if (a == step19::kDqKeys || a == step19::kSwapped) CHECK(kv.gmem_atomic == 2 * kv0.gmem_atomic);  // both consumers add every column
      if (a == step19::kSwapped) {  // [unswapped] dq-keys' traffic to global memory; P written to shared memory besides
        const Ledger keys = step19::closed_form(c.shape, sc, step19::kDqKeys).kernels[1].second;
        CHECK(kv.gmem_atomic == keys.gmem_atomic);
        CHECK(kv.smem_write > keys.smem_write);
      }
    }
  }
  CHECK(n > 0);
}

TEST_CASE("step 19 [dq-centered]: passes against the reference and counts its own closed form, adding a mean pass and a row sum per warp and query") {
  int n = 0;
  const StepOptions centered = {{"dq", "centered"}};
  for (const test::Case& c : test::shape_matrix(false)) {
    if ((c.shape.d != 64 && c.shape.d != 128) || n++ % 3 != 1) continue;  // a third of the cases, both types, GQA and windows among them
    CAPTURE(c.name());
    const Prepared p = prepare(c.shape, c.inputs);
    const step19::Schedule sc = step19::schedule_for(int(c.shape.d));
    const BackwardBlueprintResult r = step19::info().backward_blueprint(c.shape, p.in, p.fwd, p.dO, centered);
    const BackwardCheck chk = check_backward(c.shape, p.in, p.dO, p.ref, r.grads);
    INFO(chk.summary());
    CHECK(chk.pass);
    const std::string diff = r.ledger.diff(step19::info().backward_closed_form(c.shape, centered));
    INFO(diff);
    CHECK(diff.empty());
    LedgerSet plain = step19::closed_form(c.shape, sc, step19::kFull), cent = step19::closed_form(c.shape, sc, step19::kFull, false, true);
    CHECK(cent.kernels.size() == plain.kernels.size() + 1);
    CHECK(cent["key_mean"].gmem_read == c.shape.B * c.shape.hkv() * c.shape.Nk * c.shape.d * 2);  // every key once
    CHECK(cent["bwd_kv"].matmul_flops == plain["bwd_kv"].matmul_flops);                          // no product added
    CHECK(cent["bwd_kv"].gmem_atomic > plain["bwd_kv"].gmem_atomic);
  }
  CHECK(n > 0);
}

// The reason for --dq centered (docs/19_hopper_backward.md, "dQ at long key ranges"): at long key
// ranges, with the inputs' mean at 0.5 (the programs' default), D's rounding leaves an error along the
// keys' mean that the centered sum does not have.
TEST_CASE("step 19 [dq-centered]: at Nk = 16384 in bf16 dQ's error against the reference is less than half the plain sum's, dK and dV unchanged") {
  Shape s;
  s.B = s.H = 1;
  s.N = 64;
  s.Nk = 16384;
  s.d = 64;
  s.dtype = DType::bf16;
  const Prepared p = prepare(s, InputSpec{});
  auto rel = [](const Tensor4& got, const std::vector<double>& want) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < want.size(); ++i) num += (got.v[i] - want[i]) * (got.v[i] - want[i]), den += want[i] * want[i];
    return std::sqrt(num / den);
  };
  const BackwardBlueprintResult plain = step19::info().backward_blueprint(s, p.in, p.fwd, p.dO, {});
  const BackwardBlueprintResult cent = step19::info().backward_blueprint(s, p.in, p.fwd, p.dO, {{"dq", "centered"}});
  const double e_plain = rel(plain.grads.dq, p.ref.dq), e_cent = rel(cent.grads.dq, p.ref.dq);
  INFO("dQ relative L2 error: plain " << e_plain << ", centered " << e_cent);
  CHECK(std::isfinite(e_cent));
  CHECK(e_cent < 0.5 * e_plain);
  CHECK(rel(cent.grads.dk, p.ref.dk) == rel(plain.grads.dk, p.ref.dk));  // dK and dV do not read the row sums
  CHECK(rel(cent.grads.dv, p.ref.dv) == rel(plain.grads.dv, p.ref.dv));
}

TEST_CASE("step 19: its ledger at N = 4096 against step 13's: the same products and HBM bytes of Q, dO, K, V, dQ's adds") {
  for (int64_t d : {int64_t(64), int64_t(128)}) {
    CAPTURE(d);
    Shape s;
    s.N = s.Nk = 4096;
    s.d = d;
    const Ledger kv = step19::closed_form(s, step19::schedule_for(int(d)), step19::kFull).kernels[1].second;
    const Ledger kv13 = step13::closed_form(s, step13::schedule_for(int(d)), false).kernels[1].second;
    const int64_t N = 4096;
    CHECK(kv.matmul_flops == 5 * 2 * N * N * d);  // Sᵀ, dPᵀ, dV, dK, dQ, nothing padded
    CHECK(kv.matmul_flops == kv13.matmul_flops);
    CHECK(kv.gmem_write == kv13.gmem_write);
    // Q tiles of 64 rows against 128 keys: at d = 128 step 13's tiles, at d = 64 half its rows per
    // Q tile (L and D re-read as often; the same Q and dO bytes per K/V tile).
    if (d == 128) {
      CHECK(kv.gmem_read == kv13.gmem_read);
      CHECK(kv.gmem_atomic == kv13.gmem_atomic);  // by columns: every element of dQ once per K/V tile
      // --ablate tiles (80 × 128, dQᵀ): without the mask, every product and add of the rows its Q tiles
      // cover (N rounded up to 80 rows: the last tile's padded rows are multiplied too), the same Q and
      // dO bytes; 4/5 of the items per block as the rows per item grow from 64 to 80.
      const step19::Schedule t80 = step19::schedule_for(int(d), step19::kTiles);
      const Ledger tiles = step19::closed_form(s, t80, step19::kTiles).kernels[1].second;
      const int64_t rows80 = num_tiles(N, t80.Br) * t80.Br;
      CHECK(tiles.matmul_flops * N == kv.matmul_flops * rows80);
      CHECK(tiles.gmem_atomic * N == kv.gmem_atomic * rows80);
      CHECK(tiles.exps * N == kv.exps * rows80);
      CHECK(tiles.tiles_computed * t80.Br == kv.tiles_computed * 64 * rows80 / N);
      CHECK(tiles.gmem_read - kv.gmem_read == (rows80 - N) * 4 * 2 * num_tiles(N, t80.Bc));  // the padded rows' L and D
      CHECK(tiles.smem_peak > kv.smem_peak);
      CHECK(tiles.smem_peak <= step19::kSmemBudget);
    } else {
      CHECK(kv.gmem_atomic == kv13.gmem_atomic);  // by turns: once, as by columns
      const Ledger keys = step19::closed_form(s, step19::schedule_for(int(d)), step19::kDqKeys).kernels[1].second;
      CHECK(keys.gmem_atomic == 2 * kv13.gmem_atomic);  // by keys (--ablate dq-keys): twice, one partial sum per consumer
      CHECK(keys.matmul_flops == kv.matmul_flops);
      // --ablate tiles (128 × 128, dQ by rows): with or without the mask, the same products, the same
      // HBM bytes and adds (Q, dO, L and D once per K/V tile either way) and exponentials; more shared
      // memory (two 128 × 128 dSᵀ buffers, 32 KB stages) and half the items, so half the barrier meetings.
      for (bool causal : {false, true}) {
        CAPTURE(causal);
        Shape m = s;
        m.causal = causal;
        const Ledger base = step19::closed_form(m, step19::schedule_for(int(d)), step19::kFull).kernels[1].second;
        const Ledger tiles = step19::closed_form(m, step19::schedule_for(int(d), step19::kTiles), step19::kTiles).kernels[1].second;
        CHECK(tiles.matmul_flops == base.matmul_flops);
        CHECK(tiles.gmem_read == base.gmem_read);
        CHECK(tiles.gmem_atomic == base.gmem_atomic);
        CHECK(tiles.exps == base.exps);
        CHECK(2 * tiles.tiles_computed == base.tiles_computed);
        CHECK(tiles.smem_peak > base.smem_peak);
      }
    }
    CHECK(kv.barriers == num_tiles(N, step19::schedule_for(int(d)).Bc));  // one __syncthreads per block (a K/V tile each); the rest are mbarriers and named barriers
  }
}

// [deterministic] The order of every Q tile's adds, against a brute force over the K/V tiles: the
// blocks that see tile i are exactly the run kv_first_of .. kv_end_of − 1, their ranks 0, 1, ... in
// ascending j (descending with a mask), and a block only ever waits for blocks launched before it.
TEST_CASE("step 19 [deterministic]: every Q tile's adds in one order, each block waiting only for blocks launched before it") {
  constexpr int kTrials = 400;
  Rng rng(1919);
  int shapes = 0, waits = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    const int64_t N = 1 + int64_t(rng.below(1400)), Nk = 1 + int64_t(rng.below(1400));
    const bool causal = trial % 3 != 0;
    const int64_t window = causal && trial % 2 ? 1 + int64_t(rng.below(600)) : 0;
    const int64_t Br = 64, Bc = 128, Tr = num_tiles(N, Br), Tc = num_tiles(Nk, Bc);
    CAPTURE(N);
    CAPTURE(Nk);
    CAPTURE(causal);
    CAPTURE(window);
    std::vector<int64_t> launched(static_cast<size_t>(Tc), 0);  // block index of K/V tile j
    for (int64_t x = 0; x < Tc; ++x) launched[size_t(step19::kv_tile_of_block(x, Tc, true, causal))] = x;
    for (int64_t i = 0; i < Tr; ++i) {
      std::vector<int64_t> seen;  // the K/V tiles whose Q tiles include i
      for (int64_t j = 0; j < Tc; ++j) {
        const int64_t j0 = j * Bc, j1 = std::min(j0 + Bc, Nk), first = step19::first_q_tile(j0, N, Nk, Br, causal);
        const int64_t n = step19::q_tiles_of(j0, j1, N, Nk, Br, causal, window);
        if (i >= first && i < first + n) seen.push_back(j);
      }
      const int64_t lo = step19::kv_first_of(i, N, Nk, Br, Bc, causal, window), end = step19::kv_end_of(i, N, Nk, Br, Bc, causal);
      if (seen.empty()) {
        CHECK(lo >= end);
        continue;
      }
      CHECK(seen.front() == lo);
      CHECK(seen.back() == end - 1);
      CHECK(int64_t(seen.size()) == end - lo);  // a run, no gaps
      for (int64_t j : seen) {
        const int64_t r = step19::add_rank(i, j, N, Nk, Br, Bc, causal, window);
        CHECK(r == (causal ? seen.back() - j : j - seen.front()));
        for (int64_t k : seen)  // every block that adds before j was launched before it
          if (step19::add_rank(i, k, N, Nk, Br, Bc, causal, window) < r) {
            CHECK(launched[size_t(k)] < launched[size_t(j)]);
            ++waits;
          }
      }
    }
    ++shapes;
  }
  CHECK(shapes == kTrials);  // no shape left the loop early
  CHECK(waits > 0);
}

TEST_CASE("step 19 [deterministic]: the ledger adds a semaphore read and increment per pair and zeroes the semaphores, nothing else") {
  for (const test::Case& c : test::shape_matrix(false)) {
    if (c.shape.d != 64 && c.shape.d != 128) continue;
    CAPTURE(c.name());
    const step19::Schedule sc = step19::schedule_for(int(c.shape.d));
    const LedgerSet a = step19::closed_form(c.shape, sc, step19::kFull, false), b = step19::closed_form(c.shape, sc, step19::kFull, true);
    const Ledger &pre = a.kernels[0].second, &pre_d = b.kernels[0].second, &kv = a.kernels[1].second, &kv_d = b.kernels[1].second;
    const int64_t BH = c.shape.B * c.shape.H, sems = step19::semaphores(BH, c.shape.N), pairs = kv.tiles_computed;
    CHECK(pre_d.gmem_write - pre.gmem_write == 4 * sems);
    CHECK(pre_d.workspace - pre.workspace == 4 * sems);
    CHECK(kv_d.gmem_read - kv.gmem_read == 4 * pairs);
    CHECK(kv_d.gmem_atomic - kv.gmem_atomic == 4 * pairs);
    Ledger kv_same = kv_d;
    kv_same.gmem_read = kv.gmem_read;
    kv_same.gmem_atomic = kv.gmem_atomic;
    CHECK(kv_same == kv);
    CHECK(a.kernels[2].second == b.kernels[2].second);
  }
}

TEST_CASE("step 19: refused where the kernels are not compiled: an ablation in bf16 or with --deterministic or --dropout, --dq centered with any, d = 256") {
  Shape s;
  s.N = s.Nk = 128;
  s.d = 64;
  CHECK(step19::refusal(false, 64, false, {}).empty());
  // [dropout] Refused by default, naming the flag that runs it; run: the default kernel, both types, --deterministic
  // on or off, and nothing else.
  CHECK(step19::refusal(false, 64, true, {}).find("--dropout-kernel run") != std::string::npos);
  CHECK(step19::refusal(true, 128, true, {{"deterministic", "on"}}).find("10 %") != std::string::npos);
  const StepOptions run = {{"dropout-kernel", "run"}};
  CHECK(step19::refusal(false, 64, true, run).empty());
  CHECK(step19::refusal(true, 128, true, {{"dropout-kernel", "run"}, {"deterministic", "on"}}).empty());
  CHECK(step19::refusal(false, 64, false, run).empty());  // without --dropout the flag changes nothing
  CHECK(step19::refusal(false, 64, true, {{"dropout-kernel", "run"}, {"dq", "centered"}}).find("--dropout") != std::string::npos);
  CHECK(step19::refusal(false, 128, true, {{"dropout-kernel", "run"}, {"ablate", "atomics"}}).find("--dropout") != std::string::npos);
  CHECK_THROWS_AS(step19::refusal(false, 64, true, {{"dropout-kernel", "yes"}}), std::invalid_argument);
  CHECK(step19::refusal(true, 128, false, {{"ablate", "atomics"}}).find("fp16 only") != std::string::npos);
  CHECK(step19::refusal(false, 64, false, {{"ablate", "dq-keys"}}).empty());
  CHECK(step19::refusal(false, 128, false, {{"ablate", "dq-keys"}}).empty());
  CHECK(step19::refusal(true, 64, false, {{"ablate", "dq-keys"}}).find("fp16 only") != std::string::npos);
  CHECK_THROWS_AS(step19::refusal(false, 64, false, {{"ablate", "dq-turns"}}), std::invalid_argument);  // the default at d = 64 now
  CHECK_THROWS_AS(step19::refusal(false, 128, false, {{"ablate", "nonsense"}}), std::invalid_argument);
  CHECK(step19::refusal(true, 128, false, {{"deterministic", "on"}}).empty());  // both types, every d compiled
  CHECK(step19::refusal(false, 64, false, {{"deterministic", "on"}, {"ablate", "atomics"}}).find("without --deterministic") !=
        std::string::npos);
  CHECK_THROWS_AS(step19::refusal(false, 64, false, {{"deterministic", "yes"}}), std::invalid_argument);
  CHECK(step19::refusal(true, 64, false, {{"dq", "centered"}}).empty());  // [dq-centered] both types, every d compiled
  CHECK(step19::refusal(false, 128, false, {{"dq", "centered"}, {"deterministic", "on"}}).find("--deterministic") != std::string::npos);
  CHECK(step19::refusal(false, 128, false, {{"dq", "centered"}, {"ablate", "atomics"}}).find("--ablate") != std::string::npos);
  CHECK_THROWS_AS(step19::refusal(false, 64, false, {{"dq", "mean"}}), std::invalid_argument);
  const StepInfo& st = step19::info();
  CHECK_FALSE(st.takes_d(256));
  CHECK(st.forward_from == "16");
  CHECK(st.forward_from_dropout == "12");
  CHECK(st.supports_dropout);
  const Inputs in = make_inputs(s, InputSpec{});
  const Forward fwd = st.blueprint(s, in, {}).out;
  Shape drop = s;
  drop.dropout = 0.1;
  CHECK_THROWS_AS(st.backward_blueprint(drop, in, fwd, make_grad_output(s, 1), {}), Unsupported);
  CHECK_NOTHROW(st.backward_blueprint(drop, in, fwd, make_grad_output(s, 1), run));
  CHECK_THROWS_AS(st.backward_blueprint(drop, in, fwd, make_grad_output(s, 1), {{"dropout-kernel", "run"}, {"dq", "centered"}}), Unsupported);
  CHECK_THROWS_AS(st.backward_blueprint(drop, in, fwd, make_grad_output(s, 1), {{"dropout-kernel", "run"}, {"ablate", "overlap"}}), Unsupported);
  CHECK_NOTHROW(st.backward_blueprint(s, in, fwd, make_grad_output(s, 1), {}));
}

// [dropout] The forward with a mask is step 12's (step 16 has none): its O and L pass the dropout
// reference, so the backward below starts from the forward a run would give it.
TEST_CASE("step 19 [dropout]: with --dropout the forward is step 12's and applies the mask") {
  const test::Case c = test::make_case(1, 2, 150, 211, 64, true, DType::bf16);
  Shape s = c.shape;
  s.dropout = 0.3;
  s.dropout_seed = 77;
  const Inputs in = make_inputs(s, c.inputs);
  const Forward with = step19::info().blueprint(s, in, {}).out;
  CHECK(check_forward(s, in, reference_forward(s, in), with).pass);
  Shape s0 = s;
  s0.dropout = 0.0;
  CHECK_FALSE(check_forward(s0, in, reference_forward(s0, in), with).pass);  // the mask is in O
}

TEST_CASE("step 19 [dropout]: p = 0.1 and 0.5 pass against the reference, deterministic too, and count their closed form") {
  const std::vector<test::Case> cases = {
      test::make_case(1, 2, 150, 211, 64, false, DType::f16), test::make_case(1, 2, 211, 150, 128, true, DType::bf16),
      test::make_case(2, 3, 17, 64, 16, true, DType::f16),    test::make_case(1, 2, 113, 255, 32, false, DType::bf16),
      test::make_case(1, 2, 200, 200, 64, true, DType::bf16, 6.0)};
  auto forward = [](const Shape& s, const Inputs& in) { return step19::info().blueprint(s, in, {}).out; };  // step 12's
  test::check_dropout_backward(
      cases, forward,
      [](const Shape& s, const Inputs& in, const Forward& fwd, const Tensor4& dO, bool det) {
        return step19::blueprint(s, in, fwd, dO, step19::schedule_for(int(s.d)), step19::kFull, det, false);
      },
      [](const Shape& s, bool det) { return step19::closed_form(s, step19::schedule_for(int(s.d)), step19::kFull, det, false); });
}

TEST_CASE("step 19 [dropout]: the mask in dV is dropout_keep's bit for bit (dO = one-hot rows), and a wrong seed or offset is seen") {
  // As step 13's test: with dO_ic = [c == i] (N <= d), dV_ji = P_ij·Z_ij, nonzero exactly where
  // query i sees key j and the weight was kept. Ragged N, Nk ≠ N both ways, causal, both types.
  const int checked = test::check_dropout_mask(
      [](const Shape& s, const Inputs& in) { return step19::info().blueprint(s, in, {}).out; },
      [](const Shape& s, const Inputs& in, const Forward& fwd, const Tensor4& dO) {
        return step19::blueprint(s, in, fwd, dO, step19::schedule_for(int(s.d)), step19::kFull, false, false).grads.dv;
      });
  CHECK(checked == 2 * int(test::backward_probe_shapes(0.1, 99, 7).size()));
}
