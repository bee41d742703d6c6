// Docs point into the code by named anchors (a comment such as `// [online-update]`), never by line
// numbers. This fails when a doc names an anchor that no source file has any more.
#include <doctest/doctest.h>

#include "files.hpp"
#include "core/registry.hpp"
#include "core/shapes.hpp"
#include "../steps/13_mma_backward/schedule.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <string>

namespace fs = std::filesystem;

using fa::test::slurp;

TEST_CASE("every anchor a doc names exists in its own step's code or in common/") {
  // A step's doc (docs/NN_slug.md) may name anchors of steps/NN_slug/ and common/ only, so that a
  // doc never sends its reader into another step's files; the other docs may name any step's.
  const fs::path root = FA_SOURCE_DIR;
  auto code_of = [&](const fs::path& dir) {
    std::string code;
    for (const auto& e : fs::recursive_directory_iterator(dir))
      if (e.is_regular_file()) code += slurp(e.path());
    return code;
  };
  // The Python package's code (python/: C++ and Python, whose anchors are `# [tag]` comments) counts
  // as common/ does: any doc may name its anchors.
  const std::string common = code_of(root / "common") + code_of(root / "python"), every_step = code_of(root / "steps");
  const std::regex named("`\\[([a-z0-9-]+)\\]`");
  int docs = 0, anchors = 0, step_docs = 0;
  for (const auto& e : fs::directory_iterator(root / "docs")) {
    if (e.path().extension() != ".md") continue;
    ++docs;
    const fs::path own = root / "steps" / e.path().stem();
    const bool is_step = fs::is_directory(own);
    step_docs += is_step;
    const std::string code = common + (is_step ? code_of(own) : every_step);
    const std::string text = slurp(e.path());
    for (auto it = std::sregex_iterator(text.begin(), text.end(), named); it != std::sregex_iterator(); ++it) {
      const std::string anchor = "// [" + (*it)[1].str() + "]";
      const std::string where = e.path().filename().string() + " names " + anchor +
                                (is_step ? " (looked in steps/" + e.path().stem().string() + "/ and common/)" : "");
      CAPTURE(where);
      CHECK((code.find(anchor) != std::string::npos || code.find("# [" + (*it)[1].str() + "]") != std::string::npos));
      ++anchors;
    }
  }
  CHECK(docs > 0);
  CHECK(step_docs > 0);
  CHECK(anchors > 0);
}

// The other direction: every anchor in a step's code (a `//` comment that begins with `[tag]`, or
// with several, `// [a] [b]`) is named, as `[tag]` in backticks, by that step's doc, so that no
// anchor marks a place no doc explains. An anchor that common/ has too may be named by any doc, as
// the test above lets any step's doc name common/'s anchors.
TEST_CASE("every anchor in a step's code is named by its own doc, or common/'s by any doc") {
  const fs::path root = FA_SOURCE_DIR;
  const std::regex anchor("//\\s*((?:\\[[a-z][a-z0-9-]*\\](?=\\s|$)\\s*)+)"), tag("\\[([a-z][a-z0-9-]*)\\]");
  const std::regex named("`\\[([a-z0-9-]+)\\]`");
  auto anchors_of = [&](const fs::path& dir) {
    std::set<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      if (!e.is_regular_file()) continue;
      const std::string text = slurp(e.path());
      for (auto a = std::sregex_iterator(text.begin(), text.end(), anchor); a != std::sregex_iterator(); ++a) {
        const std::string tags = (*a)[1].str();
        for (auto t = std::sregex_iterator(tags.begin(), tags.end(), tag); t != std::sregex_iterator(); ++t)
          out.insert((*t)[1].str());
      }
    }
    return out;
  };
  auto names_of = [&](const std::string& text) {
    std::set<std::string> out;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), named); it != std::sregex_iterator(); ++it)
      out.insert((*it)[1].str());
    return out;
  };
  const std::set<std::string> common = anchors_of(root / "common");
  std::set<std::string> any_doc;
  for (const auto& e : fs::directory_iterator(root / "docs"))
    if (e.path().extension() == ".md")
      for (const std::string& t : names_of(slurp(e.path()))) any_doc.insert(t);
  int steps = 0, anchors = 0;
  for (const auto& e : fs::directory_iterator(root / "steps")) {
    if (!e.is_directory()) continue;
    const fs::path doc = root / "docs" / (e.path().filename().string() + ".md");
    REQUIRE(fs::exists(doc));
    ++steps;
    const std::set<std::string> own = names_of(slurp(doc));
    for (const std::string& t : anchors_of(e.path())) {
      const std::string where = "steps/" + e.path().filename().string() + "/ has // [" + t + "], which " +
                                doc.filename().string() + " does not name";
      CAPTURE(where);
      CHECK((own.count(t) || (common.count(t) && any_doc.count(t))));
      ++anchors;
    }
  }
  CHECK(steps > 0);
  CHECK(anchors > 0);
}

// Nsight rows are matched to ledger rows by kernel name (scripts/ncu_ledger.py): every kernel a
// ledger names must be a kernel of that step, `stepNN_<name>`, in its kernel.cu.
TEST_CASE("every kernel a ledger names is a kernel of its step") {
  const fs::path root = FA_SOURCE_DIR;
  fa::Shape s;
  s.N = s.Nk = 64;
  s.d = 64;
  int kernels = 0;
  for (const fa::StepInfo* st : fa::all_steps()) {
    auto kernel_cu = [&](const std::string& id) {
      for (const fa::StepInfo* o : fa::all_steps())
        if (o->id == id) return slurp(root / "steps" / (o->id + "_" + o->slug) / "kernel.cu");
      return std::string();
    };
    // The forward may be an earlier step's (step 08 runs step 07's); the backward is the step's own.
    const std::string fwd_id = st->forward_from.empty() ? st->id : st->forward_from;
    const std::string fwd_code = kernel_cu(fwd_id), own_code = kernel_cu(st->id);
    REQUIRE(!fwd_code.empty());
    REQUIRE(!own_code.empty());
    for (const fa::StepOptions& opt : fa::test::all_options(*st)) {
      for (const auto& [name, ledger] : st->closed_form(s, opt).kernels) {
        // Step 18 runs step 12's kernel on every shard, and its sends are copies (cudaMemcpyAsync, or
        // NCCL over several GPUs), not kernels of its own.
        if (st->id == "18" && name == "ring_send") continue;
        if (st->id == "18" && name == "warp_tiling") {
          CHECK(kernel_cu("12").find("step12_warp_tiling(") != std::string::npos);
          continue;
        }
        const std::string kernel = "step" + fwd_id + "_" + name + "(";
        CAPTURE(kernel);
        CHECK(fwd_code.find(kernel) != std::string::npos);
        ++kernels;
      }
      if (st->backward_closed_form)
        for (const auto& [name, ledger] : st->backward_closed_form(s, opt).kernels) {
          const std::string kernel = "step" + st->id + "_" + name + "(";
          CAPTURE(kernel);
          CHECK(own_code.find(kernel) != std::string::npos);
          ++kernels;
        }
    }
  }
  CHECK(kernels > 0);
}

// Each registered step names its own folder: ids unique and in order, steps/<id>_<slug>/ present.
TEST_CASE("every registered step has a unique id and its own folder") {
  const fs::path root = FA_SOURCE_DIR;
  std::set<std::string> ids;
  std::string last;
  for (const fa::StepInfo* st : fa::all_steps()) {
    CAPTURE(st->id);
    CHECK(ids.insert(st->id).second);
    CHECK(st->id > last);
    last = st->id;
    CHECK(fs::is_directory(root / "steps" / (st->id + "_" + st->slug)));
    CHECK(st->kernel_prefix == "step" + st->id + "_");
  }
  CHECK(ids.size() >= 2);
}

// ctest runs each doctest case by its name, as an element of a CMake list: a ';' in a name splits
// it, the truncated filter selects no case, and doctest exits 0 — the case would never run while
// ctest showed it passed (tests/CMakeLists.txt also fails any CPU entry that ran no case).
TEST_CASE("no test case name contains a semicolon") {
  const fs::path root = FA_SOURCE_DIR;
  const std::regex name("TEST_CASE\\(\"([^\"]*)\"\\)");
  int cases = 0;
  for (const auto& e : fs::directory_iterator(root / "tests")) {
    if (e.path().extension() != ".cpp") continue;
    const std::string text = slurp(e.path());
    for (auto it = std::sregex_iterator(text.begin(), text.end(), name); it != std::sregex_iterator(); ++it) {
      const std::string where = e.path().filename().string() + ": " + (*it)[1].str();
      CAPTURE(where);
      CHECK((*it)[1].str().find(';') == std::string::npos);
      ++cases;
    }
  }
  CHECK(cases > 50);
}

// docs/13_mma_backward.md, "The prediction": per warp and Q tile at d = 128 (Br = 64, Bc = 128) the
// kernel on FlashAttention-2's grid of warps issues 144 ldmatrix.x4 for 320 m16n8k16 products (the
// first kernel, each warp owning 16 keys and every query, issued 176; the first design's count was 184). One head, one K/V tile, one Q tile: the closed form's shared-memory reads
// less the lanes' L and D (16 bytes per C column of Sᵀ) and the staged dK/dV, over 512 bytes per fragment.
TEST_CASE("docs/13: fragments and products per warp and Q tile at d = 128, from the closed form") {
  fa::Shape s;
  s.B = s.H = 1;
  s.N = 64;
  s.Nk = 128;
  s.d = 128;
  const fa::step13::Schedule sc = fa::step13::schedule_for(128);
  REQUIRE(sc.Br == 64);
  REQUIRE(sc.Bc == 128);
  const fa::Ledger kv = fa::step13::closed_form(s, sc, false).kernels[1].second;
  const int64_t W = sc.warps(), lane_ld = W * (sc.sdp_queries() / 8) * 32 * 16, staged = s.Nk * s.d * 2 * 2;
  CHECK(kv.tiles_computed == 1);
  CHECK((kv.smem_read - lane_ld - staged) % (512 * W) == 0);
  CHECK((kv.smem_read - lane_ld - staged) / 512 / W == 144);
  CHECK(kv.matmul_flops / W / (2 * 16 * 8 * 16) == 320);
}
