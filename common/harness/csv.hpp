// One line of the project's CSV files, split into fields: commas separate, double quotes protect
// (the `device` column is quoted). Used by bench (resume), the model's ceilings file and the model tool;
// and the date column every measured row starts with.
#pragma once
#include <ctime>
#include <string>
#include <vector>

namespace fa {

// The `date` column of a row: now, in UTC, ISO 8601 ("2026-12-02T02:20Z", or with seconds
// "2026-12-02T02:20:03Z" for tools that write a row per point of a long run).
inline std::string csv_date(bool seconds = false) {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, seconds ? "%Y-%m-%dT%H:%M:%SZ" : "%Y-%m-%dT%H:%MZ", std::gmtime(&t));
  return buf;
}

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
