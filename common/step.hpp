// A step's registration: what the shared runner, the tests and the tools need from it.
#pragma once
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "attn_params.hpp"
#include "ledger.hpp"
#include "problem.hpp"

namespace fa {

// A flag of the step's own (e.g. step 01's --gemm wmma|cublas). Always a choice among strings.
struct StepFlag {
  std::string name;                  // without the dashes: "gemm"
  std::vector<std::string> choices;  // the first is the default
  std::string help;
};
using StepOptions = std::map<std::string, std::string>;  // flag name -> chosen value

struct BlueprintResult {
  Forward out;       // O rounded to the storage type, L in fp32
  LedgerSet ledger;  // counted while it ran
};

struct BackwardBlueprintResult {
  Grads grads;       // dQ, dK, dV rounded to the storage type
  LedgerSet ledger;  // counted while it ran
};

struct StepInfo {
  std::string id;       // "01"
  std::string slug;     // "naive" (the folder is steps/01_naive)
  std::string title;    // "naive three-kernel attention"
  std::string teaches;  // one line for tables
  std::vector<StepFlag> flags;

  // The schedule run on the CPU, counting its ledger.
  BlueprintResult (*blueprint)(const Shape&, const Inputs&, const StepOptions&) = nullptr;
  // The same ledger in closed form (what the doc derives).
  LedgerSet (*closed_form)(const Shape&, const StepOptions&) = nullptr;

  // The GPU side; null when the project was built without CUDA. `stream` is a cudaStream_t.
  void (*launch)(const AttnParams&, const StepOptions&, void* stream) = nullptr;
  size_t (*workspace_bytes)(const Shape&, const StepOptions&) = nullptr;
  // Prefix shared by the step's kernel names (Nsight filters on it), e.g. "step01_".
  std::string kernel_prefix;

  // A step that runs another step's forward (step 08 runs step 07's) names it here; "" = its own.
  // blueprint / closed_form / launch above are then that step's.
  std::string forward_from;

  // The backward pass, for steps that have one (null otherwise). Inputs: Q, K, V, the forward's O
  // and L, and dO. The launcher gets BwdParams; its scratch is backward_workspace_bytes().
  BackwardBlueprintResult (*backward_blueprint)(const Shape&, const Inputs&, const Forward&, const Tensor4& dO,
                                                const StepOptions&) = nullptr;
  LedgerSet (*backward_closed_form)(const Shape&, const StepOptions&) = nullptr;
  void (*launch_backward)(const BwdParams&, const StepOptions&, void* stream) = nullptr;
  size_t (*backward_workspace_bytes)(const Shape&, const StepOptions&) = nullptr;
  bool has_backward() const { return backward_blueprint != nullptr; }

  std::string program_name;  // set only by tools that are not a step (the tour)
  std::string program() const { return program_name.empty() ? "step" + id : program_name; }
  // Every option at its default value.
  StepOptions default_options() const {
    StepOptions o;
    for (const auto& f : flags) o[f.name] = f.choices.front();
    return o;
  }
  // Every combination of the step's own flags, the defaults first (tour, bench, tests).
  std::vector<StepOptions> all_variants() const {
    std::vector<StepOptions> out = {StepOptions{}};
    for (const auto& f : flags) {
      std::vector<StepOptions> next;
      for (const auto& o : out)
        for (const auto& c : f.choices) {
          StepOptions x = o;
          x[f.name] = c;
          next.push_back(x);
        }
      out = next;
    }
    return out;
  }
};

}  // namespace fa
