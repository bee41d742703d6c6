// One line of the project's CSV files, split into fields: commas separate, double quotes protect
// (the `device` column is quoted). Used by bench (resume), the model's ceilings file and the model tool.
#pragma once
#include <string>
#include <vector>

namespace fa {

inline std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> f;
  std::string cur;
  bool quoted = false;
  for (char c : line) {
    if (c == '"') quoted = !quoted;
    else if (c == ',' && !quoted) { f.push_back(cur); cur.clear(); }
    else cur += c;
  }
  f.push_back(cur);
  return f;
}

}  // namespace fa
