// Step 11 (the cp.async pipeline): a second tile configuration, and its ledger against step 10's —
// the pipeline changes when tiles arrive, not what is moved.
#include <doctest/doctest.h>

#include "reference/checks.hpp"
#include "second_config.hpp"
#include "core/shapes.hpp"

#include "../steps/10_ldmatrix/schedule.hpp"
#include "../steps/11_cp_async/schedule.hpp"

using namespace fa;

TEST_CASE("step 11: a second tile configuration (Br = 16, Bc = 32: one warp, two stages of 32 keys)") {
  const step11::Schedule s11{16, 32};
  test::check_second_config("step11", [&](const Shape& s, const Inputs& in) { return step11::blueprint(s, in, s11); },
                            [&](const Shape& s) { return step11::closed_form(s, s11); });
}

TEST_CASE("step 11: the same bytes, products and barriers as step 10, two stages of K and V in shared memory") {
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    Shape s;
    s.N = 1000;
    s.Nk = 1300;
    s.d = 128;
    s.causal = causal;
    const Ledger ten = step10::closed_form(s, step10::kSchedule).total();
    const Ledger eleven = step11::closed_form(s, step11::kSchedule).total();
    CHECK(eleven.gmem_read == ten.gmem_read);
    CHECK(eleven.gmem_write == ten.gmem_write);
    CHECK(eleven.smem_read == ten.smem_read);
    CHECK(eleven.smem_write == ten.smem_write);
    CHECK(eleven.matmul_flops == ten.matmul_flops);
    CHECK(eleven.barriers == ten.barriers);  // two per tile: tile j landed; its stage is free again
    CHECK(eleven.smem_peak == 2 * ten.smem_peak);
  }
  CHECK(step11::smem_bytes(step11::kSchedule, 128) == 65536);  // more than 48 KB: dynamic, opted in
}

TEST_CASE("step 11: the counted blueprint keeps the pipeline's order and still equals the closed form") {
  // Tc = 1, 2 and many tiles: the prologue load, the steady state and the last tile (no prefetch).
  for (int64_t nk : {int64_t(20), int64_t(64), int64_t(65), int64_t(300)}) {
    CAPTURE(nk);
    const test::Case c = test::make_case(1, 2, 70, nk, 32, true, DType::f16);
    const Inputs in = make_inputs(c.shape, c.inputs);
    const BlueprintResult r = step11::blueprint(c.shape, in, step11::kSchedule);
    const Ledger counted = r.ledger.total(), closed = step11::closed_form(c.shape, step11::kSchedule).total();
    CHECK(counted == closed);
    CHECK(check_forward(c.shape, in, reference_forward(c.shape, in), r.out).pass);
  }
}
