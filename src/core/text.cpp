#include "core/text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace dlperf {

std::string format_decimals(double x, int decimals) {
  int d = std::max(decimals, 0);
  // Only values under 1 lose their digits to rounding; 1 worker stays "1", not "1.0".
  if (x != 0 && std::fabs(x) < 1 && std::isfinite(x)) d = std::max(d, 1 - int(std::floor(std::log10(std::fabs(x)))));
  return fmt::format("{:.{}f}", x, d);
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = 3;  // more than two edits away is no suggestion
  for (const auto& c : candidates)
    if (const size_t d = edit_distance(word, c); d < best_d) best = c, best_d = d;
  return best;
}

}  // namespace dlperf
