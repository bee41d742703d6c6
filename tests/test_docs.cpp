// Docs point into the code by named anchors (a comment such as `// [online-update]`), never by line
// numbers. This fails when a doc names an anchor that no source file has any more.
#include <doctest/doctest.h>

#include "files.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <string>

namespace fs = std::filesystem;

using fa::test::slurp;

TEST_CASE("every anchor a doc names exists in the code") {
  const fs::path root = FA_SOURCE_DIR;
  std::string code;
  for (const char* dir : {"steps", "common"})
    for (const auto& e : fs::recursive_directory_iterator(root / dir))
      if (e.is_regular_file()) code += slurp(e.path());
  const std::regex named("`\\[([a-z0-9-]+)\\]`");
  int docs = 0, anchors = 0;
  for (const auto& e : fs::directory_iterator(root / "docs")) {
    if (e.path().extension() != ".md") continue;
    ++docs;
    const std::string text = slurp(e.path());
    for (auto it = std::sregex_iterator(text.begin(), text.end(), named); it != std::sregex_iterator(); ++it) {
      const std::string anchor = "// [" + (*it)[1].str() + "]";
      const std::string where = e.path().filename().string() + " names " + anchor;
      CAPTURE(where);
      CHECK(code.find(anchor) != std::string::npos);
      ++anchors;
    }
  }
  CHECK(docs > 0);
  CHECK(anchors > 0);
}
