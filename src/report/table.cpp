#include "report/table.h"

#include <algorithm>
#include <cctype>

namespace dlperf::report {

namespace {
// Numbers, percentages and sizes ("12.3", "-4%", "1.07 MB") align right; text aligns left.
bool numeric(const std::string& s) {
  if (s.empty() || s.size() > 14) return false;
  const size_t start = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  return start < s.size() && std::isdigit(static_cast<unsigned char>(s[start])) &&
         std::count(s.begin(), s.end(), ' ') <= 1;
}
}  // namespace

std::string Table::str() const {
  std::vector<size_t> w(header_.size(), 0);
  for (size_t i = 0; i < header_.size(); ++i) w[i] = header_[i].size();
  for (const auto& r : rows_)
    for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
  auto line = [&](const std::vector<std::string>& r, bool head) {
    std::string s;
    for (size_t i = 0; i < w.size(); ++i) {
      const std::string cell = i < r.size() ? r[i] : "";
      const std::string pad(w[i] - cell.size(), ' ');
      s += (i ? "  " : "") + ((!head && numeric(cell) && i > 0) ? pad + cell : cell + pad);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::string rule;
  for (size_t i = 0; i < w.size(); ++i) rule += (i ? "  " : "") + std::string(w[i], '-');
  std::string out = line(header_, true) + rule + "\n";
  for (const auto& r : rows_) out += r.empty() ? rule + "\n" : line(r, false);
  return out;
}

void Table::print(FILE* out) const { std::fputs(str().c_str(), out); }

}  // namespace dlperf::report
