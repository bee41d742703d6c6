// The counting views count what they should, and refuse what the GPU would refuse.
#include <doctest/doctest.h>

#include <sstream>
#include <stdexcept>

#include "perf/roofline.hpp"
#include "blueprint/ledger.hpp"

using namespace fa;

TEST_CASE("global views count bytes by storage type and reject out-of-range accesses") {
  Ledger L;
  std::vector<float> a(12, 1.5f);
  GlobalMat g(a.data(), 3, 4, 4, Store::of(DType::f16), L);
  CHECK(g.load(2, 3) == 1.5f);
  g.store(0, 0, 0.1f);
  CHECK(a[0] == round_to(DType::f16, 0.1f));  // stores round to the storage type
  CHECK(L.gmem_read == 2);
  CHECK(L.gmem_write == 2);
  CHECK_THROWS_AS(g.load(3, 0), std::logic_error);
  CHECK_THROWS_AS(g.store(0, 4, 1.0f), std::logic_error);
  GlobalMat f(a.data(), 3, 4, 4, Store::f32(), L);
  f.load(1, 1);
  CHECK(L.gmem_read == 6);
}

TEST_CASE("tile loads count only the elements inside the matrix, zero-fill the rest") {
  Ledger L;
  std::vector<float> a(5 * 3, 2.0f);
  const GlobalMat g(static_cast<const float*>(a.data()), 5, 3, 3, Store::of(DType::bf16), L);
  Smem smem(1024, L);
  SmemTile t = smem.tile(4, 3, Store::of(DType::bf16));
  t.load_from(g, 3, 0);  // rows 3, 4 exist; rows 5, 6 do not
  CHECK(L.gmem_read == 2 * 3 * 2);
  CHECK(L.smem_write == 4 * 3 * 2);  // the zero-fill is written too
  CHECK(t.read(1, 2) == 2.0f);
  CHECK(t.read(2, 0) == 0.0f);
}

TEST_CASE("shared memory beyond the block's budget throws, the peak is recorded") {
  Ledger L;
  Smem smem(1000, L);
  smem.tile(10, 20, 24, Store::of(DType::f16));  // 480 bytes with padding
  CHECK(L.smem_peak == 480);
  CHECK_THROWS_AS(smem.tile(10, 20, 28, Store::of(DType::f16)), std::length_error);
}

TEST_CASE("a fragment product is 2·16³ FLOPs and matches a plain product") {
  Ledger L;
  Smem smem(1 << 16, L);
  SmemTile A = smem.tile(16, 16, Store::f32()), B = smem.tile(16, 16, Store::f32());
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) { A.write(r, c, float(r - c)); B.write(r, c, float(r + 2 * c)); }
  Frag16 acc;
  mma(acc, load_frag(A, 0, 0), load_frag_transposed(B, 0, 0), L);
  CHECK(L.matmul_flops == 8192);
  float want = 0;
  for (int k = 0; k < 16; ++k) want += float(3 - k) * float(5 + 2 * k);  // A(3,k) · Bᵀ(k,5) = A(3,k)·B(5,k)
  CHECK(acc.x[3][5] == want);
}

TEST_CASE("ledger sums, compares and names its differences") {
  Ledger a, b;
  a.gmem_read = 10; a.smem_peak = 5;
  b.gmem_read = 10; b.smem_peak = 7;
  CHECK_FALSE(a == b);
  CHECK(a.diff(b).find("smem_peak") != std::string::npos);
  a += b;
  CHECK(a.gmem_read == 20);
  CHECK(a.smem_peak == 7);  // a peak is a max, not a sum
  LedgerSet s;
  s["x"].gmem_write = 3;
  s["y"].gmem_write = 4;
  CHECK(s.total().gmem_write == 7);
}

TEST_CASE("exps are summed, compared, printed and written like the other counts") {
  Ledger a, b;
  a.exps = 5;
  b.exps = 6;
  CHECK_FALSE(a == b);
  CHECK(a.diff(b).find("exps: 5 vs 6") != std::string::npos);
  a += b;
  CHECK(a.exps == 11);
  LedgerSet s;
  s["x"].exps = 1234;
  s["x"].nonmatmul_ops = 5678;
  std::ostringstream table, csv;
  print_ledger(table, s);
  const std::string t = table.str();
  const size_t ops = t.find("other ops"), ex = t.find("exps"), tiles = t.find("S tiles");
  REQUIRE(ex != std::string::npos);
  CHECK(ops < ex);  // the column after "other ops"
  CHECK(ex < tiles);
  CHECK(t.find("5678       1234") != std::string::npos);  // each right-aligned in its 11 characters
  write_ledger_csv(csv, s);
  CHECK(csv.str().find(",exps,fma_exps\n") != std::string::npos);
  CHECK(csv.str().find(",1234,0\n") != std::string::npos);  // exps, then fma_exps (none here)
}

TEST_CASE("the roofline adds each kernel's bound") {
  LedgerSet s;
  s["mem"].gmem_read = 4'800'000'000;       // 1 ms at 4.8 TB/s
  s["cmp"].matmul_flops = 989'000'000'000;  // 1 ms at 989 TFLOP/s
  const Prediction p = predict(s, h200_datasheet());
  CHECK(p.ms == doctest::Approx(2.0));
  CHECK(p.ms_memory == doctest::Approx(1.0));
  CHECK(p.ms_compute == doctest::Approx(1.0));
}
