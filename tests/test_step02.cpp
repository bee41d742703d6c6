// Step 02 (online softmax, one fused kernel): the ledger the doc derives — S and P never touch
// HBM, but K and V are read once per (query, visible key).
#include <doctest/doctest.h>

#include "reference/checks.hpp"
#include "core/shapes.hpp"

#include "../steps/02_online_softmax/schedule.hpp"

using namespace fa;

TEST_CASE("step 02: K and V are read once per query row, and nothing of size N x Nk is written") {
  Shape s;
  s.N = 1000;
  s.Nk = 700;
  s.d = 64;
  const Ledger a = step02::closed_form(s).total();
  // Q once, K and V once per (query, key): N·Nk·d·2 bytes each; O and L written once.
  CHECK(a.gmem_read == int64_t(1000) * 64 * 2 + int64_t(1000) * 700 * 64 * 2 * 2);
  CHECK(a.gmem_write == int64_t(1000) * 64 * 2 + 1000 * 4);
  // The products run on CUDA cores here (4·N·Nk·d FLOPs), not on tensor cores.
  CHECK(a.matmul_flops == 0);
  CHECK(a.cuda_core_flops == int64_t(4) * 1000 * 700 * 64);
  // Causal with Nk < N (bottom-right): rows that see no key read nothing; fewer pairs in all.
  s.causal = true;
  const Ledger c = step02::closed_form(s).total();
  CHECK(c.gmem_read < a.gmem_read);
  CHECK(c.gmem_write == a.gmem_write);
}

TEST_CASE("step 02: the counted blueprint equals the closed form and the reference, with rows that see no key") {
  const test::Case c = test::make_case(1, 2, 90, 40, 32, true, DType::bf16);
  const Inputs in = make_inputs(c.shape, c.inputs);
  const BlueprintResult r = step02::blueprint(c.shape, in);
  CHECK(r.ledger.total() == step02::closed_form(c.shape).total());
  const Check chk = check_forward(c.shape, in, reference_forward(c.shape, in), r.out);
  INFO(chk.summary());
  CHECK(chk.pass);
}

TEST_CASE("step 02: exp of every visible score, and alpha on every key but a row's first") {
  // p = exp(s − m_new) per visible key; alpha = exp(m − m_new) per key too, except the first, where
  // m = −inf and the guard gives 0 without an exp ([rescale-guard]). Rows that see no key: none.
  for (const bool causal : {false, true}) {
    const test::Case c = test::make_case(1, 2, 90, 40, 32, causal, DType::bf16);
    CAPTURE(c.name());
    const Ledger a = step02::blueprint(c.shape, make_inputs(c.shape, c.inputs)).ledger.total();
    const int64_t vis = 2 * visible_pairs(90, 40, causal), rows = 2 * rows_with_keys(90, 40, causal);
    CHECK(a.exps == 2 * vis - rows);
    CHECK(rows == (causal ? 2 * 40 : 2 * 90));
  }
}
