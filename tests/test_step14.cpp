// Step 14 (wgmma): the 128-byte-swizzled panels, the matrix descriptor's fields, the warpgroup's
// accumulator layout, a second tile configuration, its ledger against step 12's, and which GPUs
// and head dimensions it refuses.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "core/arch.hpp"
#include "second_config.hpp"
#include "core/shapes.hpp"
#include "kernel/wgmma_layout.hpp"

#include "../steps/12_warp_tiling/schedule.hpp"
#include "../steps/14_wgmma/schedule.hpp"

using namespace fa;

namespace fa::step14 {
const StepInfo& info();  // the registration (blueprint.cpp)
}

TEST_CASE("step 14: the swizzled panels place every element of a tile once, each 8-row group's chunks on distinct bank groups") {
  for (int D : {64, 128})
    for (int R : {64, 128}) {
      CAPTURE(D);
      CAPTURE(R);
      std::set<uint32_t> seen;
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < D; ++c) {
          const uint32_t off = wgmma::sw128_offset(r, c, R);
          CHECK(off % 2 == 0);
          CHECK(off < uint32_t(R * D * 2));
          seen.insert(off);
          // Panel c / 64, row r inside it: the swizzle only permutes the 16-byte chunks of a row.
          CHECK(off / (uint32_t(R) * 128) == uint32_t(c / 64));
          CHECK((off % (uint32_t(R) * 128)) / 128 == uint32_t(r));
        }
      CHECK(seen.size() == size_t(R * D));
    }
  // Logical chunk c of rows 0..7 lands on eight different chunk positions (16-byte bank groups).
  for (int c = 0; c < 8; ++c) {
    std::set<uint32_t> pos;
    for (int r = 0; r < 8; ++r) pos.insert((wgmma::sw128_offset(r, 8 * c, 64) % 128) / 16);
    CHECK(pos.size() == 8);
  }
  // The swizzle is of address bits 4-6 by bits 7-9: an 8-row group is 1024 bytes, so a tile must
  // start 1024-aligned (the kernel traps otherwise).
  CHECK(wgmma::sw128_offset(8, 0, 64) == 1024);
  CHECK(wgmma::sw128_offset(9, 8, 64) == 1024 + 128 + 16 * (1 ^ 1));
  CHECK(wgmma::sw128_offset(3, 8 * 5, 64) == 3 * 128 + 16 * (5 ^ 3));
}

TEST_CASE("step 14: a matrix descriptor holds address, LBO and SBO >> 4 at bits 0, 16 and 32, and the 128-byte swizzle at bit 62") {
  // Worked by hand: 0x1230 >> 4 = 0x123; LBO 16 >> 4 = 1 at bit 16; SBO 1024 >> 4 = 64 at bit 32.
  CHECK(wgmma::desc(0x1230) == 0x4000004000010123ull);
  for (uint32_t addr : {0u, 1024u, 0x1230u, 49152u, 163840u, 0x3FFF0u}) {
    const uint64_t dsc = wgmma::desc(addr, 16, 1024);
    CHECK(wgmma::desc_addr(dsc) == addr);
    CHECK(wgmma::desc_lbo(dsc) == 16);
    CHECK(wgmma::desc_sbo(dsc) == 1024);
    CHECK(wgmma::desc_swizzle(dsc) == 1);
  }
  CHECK(wgmma::desc_addr(wgmma::desc(0x40000)) == 0);  // 18 address bits: shared memory is below 256 KB
  // The start of a K-major slice (16 columns from a row that begins an 8-row group) is the
  // unswizzled position of its first element; an MN-major slice (16 rows of a panel) starts at its
  // first row.
  for (int R : {64, 128})
    for (int kk = 0; kk < 8; ++kk)
      for (int r0 : {0, 8, 64}) {
        if (r0 >= R) continue;
        CHECK(wgmma::kmajor_offset(r0, kk, R) == wgmma::sw128_offset(r0, 16 * kk, R));
        CHECK(wgmma::mnmajor_offset(kk, kk % 2, R) == wgmma::sw128_offset(16 * kk, 64 * (kk % 2), R));
      }
}

TEST_CASE("step 14: a warpgroup's accumulator is mma.sync's C layout, warp by warp, 16 rows each") {
  int covered = 0;
  std::set<std::pair<int, int>> cells;
  for (int w = 0; w < 4; ++w)
    for (int lane = 0; lane < 32; ++lane)
      for (int r = 0; r < 64; ++r) {  // N = 128: 64 registers per lane
        const m16n8k16::Coord a = wgmma::acc_elem(w, lane, r), c = m16n8k16::c_elem(lane, r % 4);
        CHECK(a.row == 16 * w + c.row);
        CHECK(a.col == 8 * (r / 4) + c.col);
        cells.insert({a.row, a.col});
        ++covered;
      }
  CHECK(covered == 64 * 128);
  CHECK(cells.size() == size_t(64 * 128));
}

TEST_CASE("step 14: a second tile configuration (128 x 128) passes and counts its closed form") {
  const step14::Schedule sc = step14::schedule_for(128, step14::kTiles128x128);
  REQUIRE(sc.Bc == 128);
  test::check_second_config("step14 128x128", [&](const Shape& s, const Inputs& in) { return step14::blueprint(s, in, sc); },
                            [&](const Shape& s) { return step14::closed_form(s, sc); });
}

TEST_CASE("step 14: with step 12's tiles the same HBM bytes and products, and K and V read from shared memory once per warpgroup, not per warp") {
  for (bool causal : {false, true}) {
    Shape s;
    s.N = 1000;
    s.Nk = 1300;
    s.d = 128;
    s.causal = causal;
    CAPTURE(causal);
    const Ledger twelve = step12::closed_form(s, step12::schedule_for(128)).total();  // 128 x 64, four warps of 32 rows
    const Ledger fourteen = step14::closed_form(s, step14::schedule_for(128)).total();  // 128 x 64, two warpgroups of 64 rows
    CHECK(fourteen.gmem_read == twelve.gmem_read);
    CHECK(fourteen.gmem_write == twelve.gmem_write);
    CHECK(fourteen.matmul_flops == twelve.matmul_flops);
    CHECK(fourteen.smem_write == twelve.smem_write);
    CHECK(fourteen.barriers == twelve.barriers + num_tiles(s.N, 128));  // one more per block, before O is staged
    // Step 12: per pair, each of 4 warps reads its 32 rows of Q and all of K and V; step 14: each
    // of 2 warpgroups its 64 rows of Q and all of K and V. Q's share is the same, K/V's halves.
    const int64_t pairs = twelve.tiles_computed, q_part = pairs * 128 * 128 * 2, o_part = s.N * 128 * 2;
    CHECK(twelve.smem_read - q_part - o_part == 2 * (fourteen.smem_read - q_part - o_part));
  }
}

TEST_CASE("step 14: --tiles names exist, unknown ones are refused, and the tiles fit sm_90's 227 KB") {
  for (int t = 0; t < step14::kTileChoices; ++t) CHECK(step14::tiles_of(StepOptions{{"tiles", step14::kTileNames[t]}}) == t);
  CHECK(step14::tiles_of(StepOptions{}) == step14::kTilesAuto);
  CHECK_THROWS(step14::tiles_of(StepOptions{{"tiles", "256x256"}}));
  CHECK(step14::smem_bytes(step14::schedule_for(128), 128) == 96 * 1024);  // two blocks per SM
  CHECK(step14::blocks_per_sm(step14::schedule_for(128), 128) == 2);
  CHECK(step14::smem_bytes(step14::schedule_for(128, step14::kTiles128x128), 128) == 160 * 1024);
  CHECK(step14::blocks_per_sm(step14::schedule_for(128, step14::kTiles128x128), 128) == 1);
  CHECK(step14::smem_bytes(step14::schedule_for(64), 64) == 48 * 1024);
  // d = 256: the same 128 × 64 tile, 192 KB, and one block per SM (Õ alone is 128 floats a thread).
  CHECK(step14::smem_bytes(step14::schedule_for(256), 256) == 192 * 1024);
  CHECK(step14::blocks_per_sm(step14::schedule_for(256), 256) == 1);
  CHECK(step14::smem_bytes(step14::schedule_for(256, step14::kTiles128x128), 256) > step14::kSmemBudget);
}

TEST_CASE("step 14: refused before sm_90, after it (sm_90a is Hopper's alone), and at head dimensions it does not compile") {
  const StepInfo& st = step14::info();
  Shape s;
  s.N = s.Nk = 256;
  for (int64_t d : {16, 32, 64, 128, 256}) {
    s.d = d;
    CAPTURE(d);
    const bool compiled = d == 64 || d == 128 || d == 256;
    CHECK(st.takes_d(d));
    const std::string h200 = unsupported_reason(st, s, {}, with_fake_cc(GpuCaps{}, 90));
    CHECK(h200.empty() == compiled);
    if (!compiled) CHECK(h200.find("step14: head dimension " + std::to_string(d) + " is not compiled for the GPU (d = 64, 128, 256)") == 0);
    const std::string a100 = unsupported_reason(st, s, {}, with_fake_cc(GpuCaps{}, 80));
    CHECK(a100.find("step14: needs wgmma.mma_async (sm_90a) (compute capability 9.0") == 0);
  }
  GpuCaps blackwell;
  blackwell.name = "a later GPU";
  blackwell.cc = blackwell.code_cc = 100;
  blackwell.smem_optin = 227 * 1024;
  s.d = 128;
  const std::string later = unsupported_reason(st, s, {}, blackwell);
  CHECK(later.find("step14: needs wgmma.mma_async (sm_90a), which only compute capability 9.0 has") == 0);
}

TEST_CASE("step 14: d = 256 on the blueprint matches the reference and counts its closed form") {
  const step14::Schedule wide = step14::schedule_for(256);
  test::check_wide_d("step14", [&](const Shape& s, const Inputs& in) { return step14::blueprint(s, in, wide); },
                     [&](const Shape& s) { return step14::closed_form(s, wide); });
}
