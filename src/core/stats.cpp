#include "core/stats.h"

#include <algorithm>

#include "core/error.h"

namespace dlperf {

Spread spread_of(std::vector<double> s) {
  check(!s.empty(), "spread_of: no samples");
  std::sort(s.begin(), s.end());
  const size_t n = s.size();
  const double median = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  return {median, s.front(), s.back()};
}

}  // namespace dlperf
