// GPU tests: every registered step's kernels against the Eigen reference over the shape matrix (and
// the backward of every step that has one over a smaller one), with every tensor inside NaN-padded
// buffers (a read past a ragged edge poisons the output; a write outside O, L, dQ, dK or dV shows
// up in the padding). Without a CUDA device every case reports 77, which
// ctest counts as skipped — never as passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstring>
#include <vector>
#include <iostream>

#include "gpu.hpp"
#include "metrics.hpp"
#include "registry.hpp"
#include "runner.hpp"
#include "shapes.hpp"

using namespace fa;

namespace {

// Run every case of the matrix on every step and variant with one padding layout.
void run_matrix(const Padding& pad) {
  int ran = 0;
  for (const StepInfo* st : all_steps()) {
    if (!st->launch) continue;
    for (const StepOptions& opt : test::all_options(*st))
      for (const test::Case& c : test::shape_matrix(true)) {
        const std::string what = "step" + st->id + " " + variant_name(opt) + " " + c.name();
        CAPTURE(what);
        const Inputs in = make_inputs(c.shape, c.inputs);
        const Reference ref = reference_forward(c.shape, in);
        GpuConfig cfg;
        cfg.reps = 0;
        cfg.pad = pad;
        const GpuResult g = run_on_gpu(*st, c.shape, in, opt, cfg);
        const Check chk = check_forward(c.shape, in, ref, g.out);
        INFO(chk.summary());
        CHECK(chk.pass);
        CHECK(g.stray_writes == 0);
        ++ran;
      }
  }
  CHECK(ran > 0);
}

// The backward's shapes: ragged N, Nk != N both ways, causal (with rows that see no key when
// Nk < N), d = 64 and 128, both storage types, B and H > 1.
std::vector<test::Case> backward_cases() {
  return {test::make_case(1, 2, 113, 113, 64, false, DType::f16), test::make_case(1, 2, 113, 113, 64, true, DType::bf16),
          test::make_case(2, 2, 64, 200, 128, true, DType::f16),  test::make_case(1, 2, 200, 64, 128, true, DType::bf16),
          test::make_case(1, 3, 255, 113, 64, false, DType::bf16), test::make_case(2, 1, 113, 255, 128, false, DType::f16),
          test::make_case(1, 2, 1, 17, 64, true, DType::f16),     test::make_case(1, 1, 1023, 700, 128, true, DType::bf16)};
}

// Every step with a backward: its forward on the GPU, then its backward on the GPU's O and L,
// against the reference gradients. Returns the number of runs.
int run_backward_matrix(const Padding& pad) {
  int ran = 0;
  for (const StepInfo* st : all_steps()) {
    if (!st->has_backward()) continue;
    CAPTURE(st->id);
    const bool has_launcher = st->launch_backward != nullptr;
    REQUIRE(has_launcher);
    for (const StepOptions& opt : test::all_options(*st))
      for (const test::Case& c : backward_cases()) {
        const std::string what = "step" + st->id + " " + variant_name(opt) + " " + c.name();
        CAPTURE(what);
        const Inputs in = make_inputs(c.shape, c.inputs);
        const Tensor4 dO = make_grad_output(c.shape, c.inputs.seed + 1);
        GpuConfig cfg;
        cfg.reps = 0;
        cfg.pad = pad;
        const GpuResult f = run_on_gpu(*st, c.shape, in, opt, cfg);
        const GpuBackwardResult b = run_backward_on_gpu(*st, c.shape, in, f.out, dO, opt, cfg);
        const BackwardCheck chk = check_backward(c.shape, reference_backward(c.shape, in, dO), b.grads);
        INFO(chk.summary());
        CHECK(chk.pass);
        CHECK(b.stray_writes == 0);
        ++ran;
      }
  }
  return ran;
}

bool any_backward() {
  for (const StepInfo* st : all_steps()) if (st->has_backward()) return true;
  return false;
}

}  // namespace

TEST_CASE("kernels match the reference in contiguous buffers") { run_matrix(Padding{}); }

TEST_CASE("kernels match the reference inside NaN-padded buffers") { run_matrix(Padding{8, 24, 40}); }

TEST_CASE("the padding check catches a kernel that reads past its rows") {
  // Guard the guard: NaN really sits in the padding, so a stray read would surface as NaN in O.
  // We check it through the harness on a case where the last K tile is ragged (Nk = 17).
  const StepInfo& st = *all_steps().front();
  test::Case c = test::make_case(1, 1, 17, 17, 16, false, DType::f16);
  const Inputs in = make_inputs(c.shape, c.inputs);
  GpuConfig cfg;
  cfg.reps = 0;
  cfg.pad = Padding{8, 8, 8};
  const GpuResult g = run_on_gpu(st, c.shape, in, st.default_options(), cfg);
  CHECK(g.stray_writes == 0);
  for (float x : g.out.o.v) CHECK(std::isfinite(x));
}

TEST_CASE("timing returns the requested number of positive samples and their median") {
  const StepInfo& st = *all_steps().front();
  test::Case c = test::make_case(1, 2, 256, 256, 64, false, DType::bf16);
  const Inputs in = make_inputs(c.shape, c.inputs);
  GpuConfig cfg;
  cfg.warmup = 1;
  cfg.reps = 5;
  const GpuResult g = run_on_gpu(st, c.shape, in, st.default_options(), cfg);
  REQUIRE(g.ms.size() == 5);
  for (double ms : g.ms) CHECK(ms > 0.0);
  CHECK(g.ms_median > 0.0);
}

TEST_CASE("backward kernels match the reference gradients inside NaN-padded buffers") {
  const int ran = run_backward_matrix(Padding{8, 24, 40});
  CHECK((ran > 0) == any_backward());
}

TEST_CASE("backward kernels match the reference gradients in contiguous buffers") {
  const int ran = run_backward_matrix(Padding{});
  CHECK((ran > 0) == any_backward());
}

TEST_CASE("backward timing returns the requested number of positive samples") {
  for (const StepInfo* st : all_steps()) {
    if (!st->has_backward()) continue;
    CAPTURE(st->id);
    test::Case c = test::make_case(1, 2, 256, 256, 64, true, DType::f16);
    const Inputs in = make_inputs(c.shape, c.inputs);
    GpuConfig cfg;
    cfg.warmup = 1;
    cfg.reps = 5;
    const GpuResult f = run_on_gpu(*st, c.shape, in, st->default_options(), cfg);
    const GpuBackwardResult b =
        run_backward_on_gpu(*st, c.shape, in, f.out, make_grad_output(c.shape, 3), st->default_options(), cfg);
    REQUIRE(b.ms.size() == 5);
    for (double ms : b.ms) CHECK(ms > 0.0);
    CHECK(b.ms_median > 0.0);
  }
}

int main(int argc, char** argv) {
  // Listing the tests (ctest's discovery at build time) needs no GPU.
  bool listing = false;
  for (int i = 1; i < argc; ++i) listing = listing || std::strncmp(argv[i], "--list", 6) == 0 || std::strncmp(argv[i], "-l", 2) == 0;
  std::string why;
  if (!listing && !gpu_available(why)) {
    std::cout << "SKIPPED: " << why << "\n";
    return 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
