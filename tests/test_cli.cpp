// The shared command line: good flags parse, bad ones throw a CliError that names the flag.
#include <doctest/doctest.h>

#include "harness/cli.hpp"
#include <filesystem>

#include "core/registry.hpp"
#include "harness/runner.hpp"

using namespace fa;

namespace {
const StepInfo& step01() { return *all_steps().front(); }
std::string error_of(std::vector<std::string> args) {
  try {
    CliOptions o = parse_cli(step01(), args);
    apply_default_shape(o, false);
  } catch (const CliError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("flags parse, with separate or inline values") {
  const CliOptions o = parse_cli(step01(), {"--b", "2", "--h=3", "--n", "100", "--d", "32", "--causal", "--dtype", "bf16",
                                            "--seed", "5", "--reps", "0", "--csv", "--save", "out", "--gemm", "cublas"});
  CHECK(o.shape.B == 2);
  CHECK(o.shape.H == 3);
  CHECK(o.shape.N == 100);
  CHECK(o.shape.Nk == 100);  // Nk defaults to N
  CHECK(o.shape.d == 32);
  CHECK(o.shape.causal);
  CHECK(o.shape.dtype == DType::bf16);
  CHECK(o.seed == 5);
  CHECK(o.reps == 0);
  CHECK(o.csv);
  CHECK(o.save_dir == "out");
  CHECK(o.step.at("gemm") == "cublas");
}

TEST_CASE("defaults depend on where the step runs, and never override a given flag") {
  CliOptions o = parse_cli(step01(), {"--n", "77"});
  apply_default_shape(o, false);
  CHECK(o.shape.N == 77);
  CHECK(o.shape.Nk == 77);
  CHECK(o.shape.d == 64);
  CliOptions g = parse_cli(step01(), {});
  apply_default_shape(g, true);
  CHECK(g.shape.B * g.shape.N == 16384);   // FlashAttention's benchmark shapes: B·N = 16k
  CHECK(g.shape.H * g.shape.d == 2048);    // and H·d = 2048
  CHECK(g.step.at("gemm") == "wmma");
}

TEST_CASE("bad values name their flag") {
  CHECK(error_of({"--n", "0"}).find("--n") != std::string::npos);
  CHECK(error_of({"--n", "12x"}).find("--n") != std::string::npos);
  CHECK(error_of({"--nk", "-1"}).find("--nk") != std::string::npos);
  CHECK(error_of({"--b", ""}).find("--b") != std::string::npos);
  CHECK(error_of({"--h"}).find("--h needs a value") != std::string::npos);
  CHECK(error_of({"--d", "48"}).find("--d") != std::string::npos);
  CHECK(error_of({"--dtype", "fp32"}).find("--dtype") != std::string::npos);
  CHECK(error_of({"--scale", "-1"}).find("--scale") != std::string::npos);
  CHECK(error_of({"--backend", "tpu"}).find("--backend") != std::string::npos);
  CHECK(error_of({"--gemm", "magma"}).find("--gemm") != std::string::npos);
  CHECK(error_of({"--reps", "many"}).find("--reps") != std::string::npos);
  CHECK(error_of({"--runs", "0"}).find("--runs") != std::string::npos);  // [noise] at least one timed run
  CHECK(error_of({"--runs", "3"}).empty());
  CHECK(error_of({"--check-heads", "0"}).find("--check-heads") != std::string::npos);
  CHECK(error_of({"--unknown"}).find("unknown flag --unknown") != std::string::npos);
  CHECK(error_of({"stray"}).find("stray") != std::string::npos);
  CHECK(error_of({"--b", "100000", "--h", "100000", "--n", "100000"}).find("2^31") != std::string::npos);
  CHECK(error_of({"--n", "5"}).empty());
}

TEST_CASE("usage lists every shared flag and the step's own") {
  const std::string u = usage(step01());
  for (const char* f : {"--b", "--h", "--n", "--nk", "--d", "--causal", "--dtype", "--seed", "--reps", "--runs", "--csv",
                        "--save", "--help", "--gemm"})
    CHECK(u.find(f) != std::string::npos);
}

TEST_CASE("--save writes q, k, v, o and lse as .npy files") {
  const std::string dir = (std::filesystem::temp_directory_path() / "fa_save_test").string();
  std::filesystem::remove_all(dir);
  CliOptions o = parse_cli(step01(), {"--n", "20", "--nk", "9", "--d", "16", "--save", dir});
  apply_default_shape(o, false);
  const RunRecord r = run_once(step01(), o, false);
  CHECK(r.check.pass);
  for (const char* f : {"q.npy", "k.npy", "v.npy", "o.npy", "lse.npy"}) {
    CAPTURE(f);
    CHECK(std::filesystem::file_size(dir + "/" + f) > 128);
  }
}

TEST_CASE("a step flag of choices off|on may be given bare, meaning on") {
  StepInfo fake;
  fake.id = "97";
  fake.flags = {{"deterministic", {"off", "on"}, "a switch"}, {"gemm", {"wmma", "cublas"}, "not a switch"}};
  CHECK(parse_cli(fake, {}).step.at("deterministic") == "off");
  CHECK(parse_cli(fake, {"--deterministic"}).step.at("deterministic") == "on");
  CHECK(parse_cli(fake, {"--deterministic", "--n", "5"}).step.at("deterministic") == "on");
  CHECK(parse_cli(fake, {"--deterministic", "--n", "5"}).shape.N == 5);
  CHECK(parse_cli(fake, {"--deterministic", "off"}).step.at("deterministic") == "off");
  CHECK(parse_cli(fake, {"--deterministic", "on"}).step.at("deterministic") == "on");
  CHECK(parse_cli(fake, {"--deterministic=off"}).step.at("deterministic") == "off");
  CHECK(parse_cli(fake, {"--deterministic"}).step_flags_given == std::vector<std::string>{"deterministic"});
  CHECK_THROWS_WITH_AS(parse_cli(fake, {"--deterministic", "maybe"}), "--deterministic must be one of off, on (got 'maybe')",
                       CliError);
  CHECK_THROWS_WITH_AS(parse_cli(fake, {"--deterministic="}), "--deterministic must be one of off, on (got '')", CliError);
  CHECK_THROWS_WITH_AS(parse_cli(fake, {"--gemm"}), "--gemm needs a value", CliError);  // only off|on is a switch
  CHECK(usage(fake).find("--deterministic [off|on]") != std::string::npos);
  CHECK(usage(fake).find("--gemm wmma|cublas") != std::string::npos);
}
