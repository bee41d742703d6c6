// [arch] Which GPU runs which step (common/core/arch.hpp), without a GPU: the refusal rule for a step, a
// storage type and a compute capability; the FA_FAKE_CC override; and the README's table, which
// must be what the steps declare.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "core/arch.hpp"
#include "files.hpp"
#include "core/registry.hpp"

using namespace fa;

namespace {

const StepInfo& step(const std::string& id) {
  for (const StepInfo* st : all_steps())
    if (st->id == id) return *st;
  FAIL("no step " << id);
  throw 0;
}

Shape shape(int64_t d, DType t) {
  Shape s;
  s.B = 1, s.H = 2, s.N = s.Nk = 256, s.d = d, s.dtype = t;
  return s;
}

// A GPU of compute capability cc as FA_FAKE_CC makes it (no device behind it).
GpuCaps gpu(int cc) { return with_fake_cc(GpuCaps{}, cc); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

bool uses_mma_sync(const StepInfo& st) {  // 17: decoding, on step 12's instructions; 18: step 12's kernel per shard
  return (st.id >= "09" && st.id < "14") || st.id == "17" || st.id == "18";
}
bool uses_wgmma(const StepInfo& st) { return (st.id >= "14" && st.id <= "16") || st.id >= "19"; }  // the Hopper steps (sm_90a)

}  // namespace

TEST_CASE("arch: every step declares its shared memory per block, and what sets a minimum above 7.5") {
  for (const StepInfo* st : all_steps()) {
    CAPTURE(st->id);
    const bool smem = st->smem_bytes != nullptr, backward_smem = st->backward_smem_bytes != nullptr;
    CHECK(smem);
    CHECK(backward_smem == st->has_backward());
    CHECK(st->min_cc >= 75);
    CHECK(st->min_cc == (uses_wgmma(*st) ? 90 : uses_mma_sync(*st) ? 80 : 75));
    CHECK(st->max_cc == (uses_wgmma(*st) ? 90 : 0));
    if (uses_mma_sync(*st)) CHECK(contains(st->needs, "mma.sync.m16n8k16"));
    if (uses_mma_sync(*st) && st->id >= "11") CHECK(contains(st->needs, "cp.async"));
    if (uses_wgmma(*st)) CHECK(contains(st->needs, "(sm_90a)"));
  }
}

TEST_CASE("arch: sm_75 runs the WMMA steps in fp16, refuses bf16 and mma.sync, and names step, feature and 8.0") {
  for (const StepInfo* st : all_steps()) {
    CAPTURE(st->id);
    const std::string f16 = unsupported_reason(*st, shape(64, DType::f16), st->default_options(), gpu(75), true);
    const std::string bf16 = unsupported_reason(*st, shape(64, DType::bf16), st->default_options(), gpu(75), true);
    if (uses_mma_sync(*st) || uses_wgmma(*st)) {
      CHECK(contains(f16, "step" + st->id + ":"));
      CHECK(contains(f16, st->needs));
      CHECK(contains(f16, uses_wgmma(*st) ? "compute capability 9.0" : "compute capability 8.0"));
      CHECK(contains(f16, "is 7.5 (FA_FAKE_CC=75)"));
      CHECK(bf16 == f16);  // the instructions are named first
    } else if (st->id == "02") {
      CHECK(f16.empty());
      CHECK(bf16.empty());  // bf16 only stored: fp32 arithmetic on CUDA cores
    } else {
      CHECK(f16.empty());
      CHECK(contains(bf16, "step" + st->id + ": bf16 needs compute capability 8.0"));
      CHECK(contains(bf16, "is 7.5"));
    }
  }
}

TEST_CASE("arch: compute capability 8.0 and 9.0 run every step before the Hopper steps, every variant, dtype and head dimension, 8.6 and 8.9 all but step 13's backward at d >= 32") {
  // The only refusal from 8.0 on is shared memory: step 13's backward block (161 KB at d = 128, 162 KB
  // at d = 64, 114 KB at d = 32, 90 KB at d = 16) against the 99 KB of 8.6 and 8.9. Its forward
  // (step 12's) runs there at every d; the refusal is per shape, by backward_smem_bytes.
  int refused = 0;
  for (int cc : {80, 86, 89, 90})
    for (const StepInfo* st : all_steps())
      for (const StepOptions& opt : st->all_variants())
        for (int64_t d : kHeadDims)
          for (DType t : {DType::f16, DType::bf16}) {
            if (uses_wgmma(*st)) continue;  // sm_90a only, d = 64 and 128: tests/test_step14.cpp
            CAPTURE(cc);
            CAPTURE(st->id);
            CAPTURE(d);
            const std::string r = unsupported_reason(*st, shape(d, t), opt, gpu(cc), true);
            CHECK(unsupported_reason(*st, shape(d, t), opt, gpu(cc), false) == "");
            if ((cc == 86 || cc == 89) && st->id == "13" && d >= 32) {
              CHECK(contains(r, "step13: the backward needs " + std::to_string(st->backward_smem_bytes(shape(d, t), opt)) + " bytes"));
              CHECK(contains(r, "allows 101376 (99.0 KB)"));
              ++refused;
            } else {
              CHECK(r == "");
            }
          }
  CHECK(refused == 2 * 2 * 3 * 2);  // 8.6 and 8.9, --deterministic off and on, d = 32, 64, 128, both dtypes
}

TEST_CASE("arch: step 13's backward takes 161 KB at d = 128: sm_80 (163 KB) and sm_90 run it, sm_86 and sm_89 (99 KB) at d = 16 only") {
  const StepInfo& st = step("13");
  const StepOptions o = st.default_options();
  CHECK(st.backward_smem_bytes(shape(128, DType::f16), o) == 164864);
  CHECK(st.backward_smem_bytes(shape(64, DType::f16), o) == 165888);
  CHECK(st.backward_smem_bytes(shape(32, DType::f16), o) == 116736);
  CHECK(st.backward_smem_bytes(shape(16, DType::f16), o) == 92160);
  CHECK(st.smem_bytes(shape(128, DType::f16), o) == 96 * 1024);  // the forward is step 12's
  CHECK(smem_optin_for_cc(80) - 165888 == 1024);                   // d = 64 fits sm_80 with 1 KB to spare
  const std::string r = unsupported_reason(st, shape(128, DType::bf16), o, gpu(86), true);
  CHECK(contains(r, "step13: the backward needs 164864 bytes (161.0 KB) of shared memory per block at d = 128"));
  CHECK(contains(r, "this GPU is 8.6 (FA_FAKE_CC=86) and allows 101376 (99.0 KB)"));
  CHECK(unsupported_reason(st, shape(16, DType::bf16), o, gpu(89), true) == "");
  CHECK(unsupported_reason(st, shape(128, DType::f16), o, gpu(89), false) == "");  // the forward alone
  CHECK(contains(unsupported_reason(st, shape(16, DType::f16), o, gpu(75), true), "needs mma.sync.m16n8k16 and cp.async"));
  // --tiles (fp16, d = 64 and 128): on sm_90 every shape but 128x128 at d = 128 (258 KB); on sm_86
  // the smaller tiles bring d = 64 under 99 KB, d = 128 stays above it.
  for (const StepOptions& opt : st.ablation_variants()) {
    const auto it = opt.find("tiles");
    const std::string tiles = it == opt.end() ? "auto" : it->second;
    CAPTURE(tiles);
    const int64_t b64 = st.backward_smem_bytes(shape(64, DType::f16), opt), b128 = st.backward_smem_bytes(shape(128, DType::f16), opt);
    CHECK((unsupported_reason(st, shape(128, DType::f16), opt, gpu(90), true) == "") == (tiles != "128x128"));
    CHECK(unsupported_reason(st, shape(64, DType::f16), opt, gpu(90), true) == "");
    CHECK((unsupported_reason(st, shape(64, DType::f16), opt, gpu(86), true) == "") == (b64 <= 99 * 1024));
    CHECK((b64 <= 99 * 1024) == (tiles == "64x128" || tiles == "32x128" || tiles == "64x64"));
    CHECK(b128 > 99 * 1024);
  }
}

TEST_CASE("arch: step 12 at d = 128 takes 96 KB, which fits the 99 KB of sm_86 and sm_89") {
  const StepInfo& st = step("12");
  const Shape s = shape(128, DType::f16);
  CHECK(st.smem_bytes(s, st.default_options()) == 96 * 1024);
  CHECK(smem_optin_for_cc(86) == 99 * 1024);
  CHECK(smem_optin_for_cc(89) == 99 * 1024);
  CHECK(unsupported_reason(st, s, st.default_options(), gpu(86)) == "");
  CHECK(unsupported_reason(st, s, st.default_options(), gpu(89)) == "");
  for (const StepOptions& opt : st.ablation_variants()) CHECK(st.smem_bytes(s, opt) <= 99 * 1024);
}

TEST_CASE("arch: shared memory above the limit is refused with the step, the bytes needed and the limit") {
  // Step 08's fused backward takes 64.75 KB at d = 128: sm_75 allows 64 KB. Its forward (step 07's)
  // and its d = 64 backward fit.
  const StepInfo& st = step("08");
  const Shape s128 = shape(128, DType::f16);
  const int64_t need = st.backward_smem_bytes(s128, st.default_options());
  CHECK(need == 66304);
  const std::string r = unsupported_reason(st, s128, st.default_options(), gpu(75), true);
  CHECK(contains(r, "step08: the backward needs 66304 bytes (64.8 KB) of shared memory per block at d = 128"));
  CHECK(contains(r, "allows 65536 (64.0 KB)"));
  CHECK(unsupported_reason(st, s128, st.default_options(), gpu(75), false) == "");  // the forward alone
  CHECK(unsupported_reason(st, shape(64, DType::f16), st.default_options(), gpu(75), true) == "");
  CHECK(unsupported_reason(st, s128, {{"bwd", "naive"}}, gpu(75), true) == "");  // naive: small GEMM tiles
  // And a limit below a forward's need (a made-up 32 KB GPU) names the forward's bytes.
  GpuCaps small = gpu(90);
  small.smem_optin = 32 * 1024;
  CHECK(contains(unsupported_reason(step("11"), s128, {}, small), "step11: needs 65536 bytes (64.0 KB) of shared memory"));
}

TEST_CASE("arch: code compiled for an older architecture is refused what it lacks, and says how to rebuild") {
  GpuCaps h200;
  h200.name = "NVIDIA H200";
  h200.cc = 90;
  h200.code_cc = 75;  // a build for CMAKE_CUDA_ARCHITECTURES=75 runs compute_75 code on it
  h200.smem_optin = 227 * 1024;
  h200.built_for = "75";
  const std::string r = unsupported_reason(step("09"), shape(64, DType::f16), {}, h200);
  CHECK(contains(r, "step09: needs mma.sync.m16n8k16"));
  CHECK(contains(r, "this build runs compute_75 code on it"));
  CHECK(contains(r, "-DCMAKE_CUDA_ARCHITECTURES=90"));
  CHECK(contains(unsupported_reason(step("01"), shape(64, DType::bf16), step("01").default_options(), h200), "bf16"));
  CHECK(unsupported_reason(step("01"), shape(64, DType::f16), step("01").default_options(), h200) == "");
  h200.code_cc = -1;  // no code for it at all (e.g. a build for 80 alone on an sm_75)
  for (const StepInfo* st : all_steps())
    CHECK(contains(unsupported_reason(*st, shape(64, DType::f16), st->default_options(), h200), "no code for this GPU"));
}

TEST_CASE("arch: FA_FAKE_CC reads 75 or 7.5 and takes that architecture's shared-memory limit") {
  CHECK(parse_cc("75") == 75);
  CHECK(parse_cc("7.5") == 75);
  CHECK(parse_cc("8.6") == 86);
  CHECK(parse_cc("90") == 90);
  CHECK(parse_cc("12.0") == 120);
  for (const char* bad : {"", "abc", "7", "7.", "7.55", "75x", "-75", "0.5", "sm_75"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_cc(bad), std::invalid_argument);
  }
  CHECK(gpu(75).smem_optin == 64 * 1024);
  CHECK(gpu(80).smem_optin == 163 * 1024);
  CHECK(gpu(86).smem_optin == 99 * 1024);
  CHECK(gpu(90).smem_optin == 227 * 1024);
  CHECK(gpu(95).smem_optin == 48 * 1024);  // not in the table, no device: the 48 KB every GPU has
  GpuCaps h200;
  h200.name = "NVIDIA H200";
  h200.cc = 90;
  h200.code_cc = 90;
  h200.smem_optin = 227 * 1024;
  const GpuCaps t4 = with_fake_cc(h200, 75);
  CHECK(t4.cc == 75);
  CHECK(t4.usable_cc() == 75);
  CHECK(t4.smem_optin == 64 * 1024);
  CHECK(t4.fake_cc == 75);
  CHECK(t4.name == "NVIDIA H200");
  // A fake never raises what the device has: a real T4 at FA_FAKE_CC=86 still refuses step 12.
  GpuCaps real_t4;
  real_t4.name = "Tesla T4";
  real_t4.cc = real_t4.code_cc = 75;
  real_t4.smem_optin = 64 * 1024;
  const GpuCaps up = with_fake_cc(real_t4, 86);
  CHECK(up.cc == 75);
  CHECK(up.smem_optin == 64 * 1024);
  CHECK(contains(unsupported_reason(step("12"), shape(128, DType::f16), {}, up), "is 7.5 (FA_FAKE_CC=86 does not raise it)"));

  const char* old = std::getenv("FA_FAKE_CC");
  const std::string saved = old ? old : "";
  setenv("FA_FAKE_CC", "8.9", 1);
  CHECK(fake_cc_from_env() == 89);
  setenv("FA_FAKE_CC", "", 1);
  CHECK(!fake_cc_from_env().has_value());
  unsetenv("FA_FAKE_CC");
  CHECK(!fake_cc_from_env().has_value());
  if (old) setenv("FA_FAKE_CC", saved.c_str(), 1);
}

TEST_CASE("arch: the README's GPU table is what the steps declare") {
  // One row per step: minimum compute capability for fp16 and bf16, then shared memory per block at
  // d = 64 and 128 with the default options (forward or backward, whichever is larger).
  const std::string readme = fa::test::slurp(std::string(FA_SOURCE_DIR) + "/README.md");
  auto kb = [](int64_t b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f KB", double(b) / 1024.0);
    return std::string(buf);
  };
  for (const StepInfo* st : all_steps()) {
    auto smem = [&](int64_t d) {
      const Shape s = shape(d, DType::f16);
      int64_t b = st->smem_bytes(s, st->default_options());
      if (st->backward_smem_bytes) b = std::max(b, st->backward_smem_bytes(s, st->default_options()));
      return b;
    };
    const std::string row = "| " + st->id + " | " + (st->needs.empty() ? std::string("—") : st->needs) + " | " +
                            cc_string(st->min_cc) + " | " + cc_string(std::max(st->min_cc, st->bf16_min_cc)) + " | " +
                            kb(smem(64)) + " | " + kb(smem(128)) + " |";
    CAPTURE(row);
    CHECK(contains(readme, row));
  }
}
