// The runner's backward path, tested with a fake step (no kernels, no step 08 needed): its
// backward blueprint returns the reference gradients rounded to the storage type (mode=good), a
// gradient 5% off (mode=scaled), or a ledger that differs from its closed form (mode=miscounted).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "files.hpp"
#include "reference/reference.hpp"
#include "core/registry.hpp"
#include "harness/runner.hpp"

using namespace fa;

namespace {

LedgerSet fake_ledger(const std::string& kernel, const Shape& s, int64_t extra = 0) {
  LedgerSet ls;
  Ledger& led = ls[kernel];
  led.gmem_read = 2 * (s.q_elems() + 2 * s.kv_elems()) + extra;
  led.gmem_write = 2 * s.q_elems();
  led.matmul_flops = static_cast<int64_t>(s.flops_fa_convention());
  return ls;
}

BlueprintResult fake_forward(const Shape& s, const Inputs& in, const StepOptions&) {
  const Reference ref = reference_forward(s, in);
  BlueprintResult r{{Tensor4(s.B, s.H, s.N, s.d), Tensor4(s.B, s.H, s.N, 1)}, fake_ledger("fake_fwd", s)};
  for (int64_t bh = 0; bh < s.B * s.H; ++bh)
    for (int64_t i = 0; i < s.N; ++i) {
      r.out.lse.v[size_t(bh * s.N + i)] = float(ref.lse_at(bh, i));
      for (int64_t c = 0; c < s.d; ++c) r.out.o.v[size_t((bh * s.N + i) * s.d + c)] = round_to(s.dtype, float(ref.o_at(bh, i, c)));
    }
  return r;
}
LedgerSet fake_forward_closed(const Shape& s, const StepOptions&) { return fake_ledger("fake_fwd", s); }

BackwardBlueprintResult fake_backward(const Shape& s, const Inputs& in, const Forward& fwd, const Tensor4& dO,
                                      const StepOptions& opt) {
  REQUIRE(fwd.o.rows == s.N);  // the runner hands over the forward's output
  const Gradients g = reference_backward(s, in, dO);
  const std::string mode = opt.at("mode");
  const double f = mode == "scaled" ? 1.05 : 1.0;
  BackwardBlueprintResult r{{Tensor4(s.B, s.H, s.N, s.d), Tensor4(s.B, s.H, s.Nk, s.d), Tensor4(s.B, s.H, s.Nk, s.d)},
                            fake_ledger("fake_bwd", s, mode == "miscounted" ? 64 : 0), {}};
  for (size_t x = 0; x < g.dq.size(); ++x) r.grads.dq.v[x] = round_to(s.dtype, float(f * g.dq[x]));
  for (size_t x = 0; x < g.dk.size(); ++x) {
    r.grads.dk.v[x] = round_to(s.dtype, float(g.dk[x]));
    r.grads.dv.v[x] = round_to(s.dtype, float(g.dv[x]));
  }
  return r;
}
LedgerSet fake_backward_closed(const Shape& s, const StepOptions&) { return fake_ledger("fake_bwd", s); }

const StepInfo& fake_step() {
  static const StepInfo step = [] {
    StepInfo i;
    i.id = "99";
    i.slug = "fake";
    i.title = "a fake step with a backward";
    i.flags = {{"mode", {"good", "scaled", "miscounted"}, "what the fake backward returns"}};
    i.blueprint = fake_forward;
    i.closed_form = fake_forward_closed;
    i.backward_blueprint = fake_backward;
    i.backward_closed_form = fake_backward_closed;
    return i;
  }();
  return step;
}

const std::vector<std::string> kShape = {"--b", "2", "--h", "2", "--n", "40", "--nk", "56", "--d", "32", "--causal"};

RunRecord run_fake(const std::string& mode) {
  std::vector<std::string> args = kShape;
  args.insert(args.end(), {"--mode", mode});
  CliOptions o = parse_cli(fake_step(), args);
  apply_default_shape(o, false);
  return run_once(fake_step(), o, false);
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (char ch : line) {
    if (ch == '"') quoted = !quoted;
    else if (ch == ',' && !quoted) out.emplace_back();
    else out.back() += ch;
  }
  return out;
}

std::string column(const RunRecord& r, const std::string& name) {
  const std::vector<std::string> h = split_csv(csv_header()), v = split_csv(csv_row(r));
  REQUIRE(h.size() == v.size());
  const auto at = std::find(h.begin(), h.end(), name);
  REQUIRE(at != h.end());
  return v[size_t(at - h.begin())];
}

// run_step_main with stdout captured.
int run_main(const std::vector<std::string>& args, std::string& out) {
  std::vector<std::string> all = {"step99"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  std::ostringstream captured;
  std::streambuf* old = std::cout.rdbuf(captured.rdbuf());
  const int rc = run_step_main(fake_step(), int(argv.size()), argv.data());
  std::cout.rdbuf(old);
  out = captured.str();
  return rc;
}

}  // namespace

TEST_CASE("runner backward: correct gradients pass, and the record says so") {
  const RunRecord r = run_fake("good");
  INFO(r.bwd_check.summary());
  CHECK(r.has_backward);
  CHECK(r.bwd_check.pass);
  CHECK(r.bwd_check.checked_heads == 4);
  CHECK(r.backward_passed());
  CHECK(r.ok());
  CHECK(r.bwd_ledger_matches_closed_form);
  CHECK(r.bwd_reps == 1);
  CHECK(r.bwd_ms > 0.0);
  CHECK(r.bwd_predicted.ms > 0.0);
  CHECK(r.bwd_tflops() == doctest::Approx(2.5 * r.shape.flops_fa_convention() / (r.bwd_ms * 1e-3) / 1e12));
  CHECK(column(r, "pass") == "1");
  CHECK(column(r, "bwd_pass") == "1");
  CHECK(column(r, "bwd_matmul_flops") == std::to_string(r.bwd_ledger.total().matmul_flops));
  CHECK(column(r, "bwd_gmem_read_bytes") == std::to_string(r.bwd_ledger.total().gmem_read));
  CHECK(std::stod(column(r, "bwd_max_ratio")) > 0.0);
  CHECK(std::stod(column(r, "bwd_max_ratio")) <= 1.0);
}

TEST_CASE("runner backward: a wrong gradient fails the backward, not the forward") {
  const RunRecord r = run_fake("scaled");
  CHECK(r.forward_passed());
  CHECK_FALSE(r.bwd_check.pass);
  CHECK_FALSE(r.bwd_check.dq.pass);
  CHECK(r.bwd_check.dk.pass);
  CHECK_FALSE(r.backward_passed());
  CHECK_FALSE(r.passed());
  CHECK_FALSE(r.ok());
  CHECK(column(r, "pass") == "1");
  CHECK(column(r, "bwd_pass") == "0");
  CHECK(std::stod(column(r, "bwd_max_ratio")) > 1.0);
}

TEST_CASE("runner backward: a counted ledger that differs from its closed form is reported") {
  const RunRecord r = run_fake("miscounted");
  CHECK(r.passed());
  CHECK_FALSE(r.bwd_ledger_matches_closed_form);
  CHECK(r.bwd_ledger_diff.find("gmem_read") != std::string::npos);
  CHECK_FALSE(r.ok());
}

TEST_CASE("runner backward: a step without a backward leaves the bwd_* columns empty") {
  const StepInfo& st = *all_steps().front();
  REQUIRE_FALSE(st.has_backward());
  CliOptions o = parse_cli(st, {"--n", "20"});
  apply_default_shape(o, false);
  const RunRecord r = run_once(st, o, false);
  CHECK_FALSE(r.has_backward);
  for (const char* c : {"bwd_max_ratio", "bwd_pass", "bwd_ms", "bwd_tflops", "bwd_gmem_read_bytes", "bwd_gmem_write_bytes",
                               "bwd_matmul_flops", "bwd_workspace_bytes", "bwd_predicted_ms", "bwd_gmem_atomic_bytes",
                               "bwd_save_ms", "bwd_save_predicted_ms", "bwd_save_gmem_write_bytes",
                               "bwd_model_ms", "bwd_bound_by", "bwd_ms_min", "bwd_ms_max", "bwd_launches",
                               "bwd_kernel_ms", "bwd_graph_ms", "bwd_kernel_tflops", "bwd_kernels_ms"})
    CHECK(column(r, c).empty());
  // [model] The forward's model is there on the CPU too (no launches recorded).
  CHECK(std::stod(column(r, "model_ms")) > 0);
  CHECK_FALSE(column(r, "bound_by").empty());
  CHECK(column(r, "launches").empty());
  CHECK(column(r, "pass") == "1");
  // The backward's columns come after all of the forward's: older readers keep their positions.
  const std::vector<std::string> h = split_csv(csv_header());
  CHECK(h[15] == "pass");
  CHECK(h[23] == "predicted_ms");
  CHECK(h[24] == "bwd_max_ratio");
  CHECK(h[34] == "bwd_save_ms");
  // [model] [noise] [launches] appended after them.
  CHECK(h[37] == "model_ms");
  // [kernel-clock] [graph-time] appended after those: every column before them keeps its place.
  const auto at = [&](const char* name) { return std::find(h.begin(), h.end(), name) - h.begin(); };
  CHECK(at("kernel_ms") == at("bwd_launches") + 1);
  CHECK(at("clock") == at("bwd_kernels_ms") + 1);
  CHECK(h.back() == "raw_rmse");  // [fp8] [outliers] appended after the clock's columns
  // On the CPU no clock ran: its columns are empty (graph_calls 0), never a zero passed off as a time.
  for (const char* c : {"kernel_ms", "graph_ms", "kernel_tflops", "kernels_ms", "clock"}) CHECK(column(r, c).empty());
  CHECK(column(r, "graph_calls") == "0");
}

TEST_CASE("runner backward: the program's exit status, report, --ledger-csv and --save") {
  const std::string dir = std::filesystem::temp_directory_path() / "fa_runner_backward_test";
  std::filesystem::remove_all(dir);
  std::vector<std::string> args = kShape;
  args.insert(args.end(), {"--ledger-csv", dir + "_ledger.csv", "--save", dir});
  std::string out;
  CHECK(run_main(args, out) == 0);
  CHECK(out.find("backward  dO = randn") != std::string::npos);
  CHECK(out.find("PASS  dQ") != std::string::npos);
  CHECK(out.find("PASS  dV") != std::string::npos);
  const std::string ledger = test::slurp(dir + "_ledger.csv");
  CHECK(ledger.find("\nfake_fwd,") != std::string::npos);
  CHECK(ledger.find("\nfake_bwd,") != std::string::npos);
  CHECK(ledger.find("fake_fwd") < ledger.find("fake_bwd"));
  for (const char* f : {"q", "k", "v", "o", "lse", "do", "dq", "dk", "dv"}) {
    CAPTURE(f);
    CHECK(std::filesystem::exists(dir + "/" + f + ".npy"));
  }
  args = kShape;
  args.insert(args.end(), {"--mode", "scaled", "--csv"});
  CHECK(run_main(args, out) == 1);
  CHECK(out.find("bwd_max_ratio") != std::string::npos);
  args = kShape;
  args.insert(args.end(), {"--mode", "miscounted"});
  CHECK(run_main(args, out) == 1);
  CHECK(out.find("DIFFERS from the closed form") != std::string::npos);
}

TEST_CASE("runner backward: kernel names must differ between the forward and the backward") {
  RunRecord r;
  Shape s;
  r.ledger = fake_ledger("k", s);
  r.bwd_ledger = fake_ledger("k2", s);
  CHECK(all_kernels(r).kernels.size() == 2);
  r.bwd_ledger = fake_ledger("k", s);
  CHECK_THROWS_AS(all_kernels(r), std::logic_error);
}
