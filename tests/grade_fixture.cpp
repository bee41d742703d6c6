// A step that misbehaves on purpose, for the tests of --grade's isolation (common/harness/grade.hpp):
// step 02's blueprint, except on the cases FA_GRADE_FIXTURE names, where it crashes, hangs, throws,
// exits, answers wrong or counts a wrong ledger. The grader must turn each into a failed check with
// a message, and never hang or crash itself.
#include <csignal>
#include <cstdlib>
#include <string>
#include <unistd.h>

#include "harness/runner.hpp"

namespace fa::step02 { const StepInfo& info(); }

namespace {

std::string mode() {
  const char* m = std::getenv("FA_GRADE_FIXTURE");
  return m ? m : "";
}

fa::BlueprintResult misbehave(const fa::Shape& s, const fa::Inputs& in, const fa::StepOptions& opt) {
  fa::BlueprintResult r = fa::step02::info().blueprint(s, in, opt);
  const std::string m = mode();
  const bool here = s.N == 113;  // the two cases N = 113, Nk = 255, per d and mask
  if (m == "crash" && here) std::raise(SIGSEGV);
  if (m == "abort" && here) std::abort();
  if (m == "hang" && here) {
    volatile bool forever = true;
    while (forever) {}
  }
  if (m == "throw" && here) throw std::runtime_error("fixture: thrown on N = 113");
  if (m == "exit" && here) _exit(3);
  if (m == "wrong" && s.causal) r.out.o.v[0] += 1.0f;
  if (m == "ledger" && here) r.ledger.kernels.front().second.gmem_read += 2;
  if (m == "print" && here) {
    fprintf(stderr, "fixture: about to crash\n");
    std::raise(SIGSEGV);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  fa::StepInfo st = fa::step02::info();
  st.program_name = "grade_fixture";
  st.blueprint = misbehave;
  return fa::run_step_main(st, argc, argv);
}
