// Console tables: a header, rows of cells, columns sized to fit, numbers right-aligned.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace dlperf::report {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void separator() { rows_.push_back({}); }
  std::string str() const;
  void print(FILE* out = stdout) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;  // empty row = separator
};

}  // namespace dlperf::report
