// Every registered step, in order (generated from CMakeLists.txt's FA_STEPS; link fa_registry).
#pragma once
#include <vector>

#include "core/step.hpp"

namespace fa {
const std::vector<const StepInfo*>& all_steps();
}  // namespace fa
