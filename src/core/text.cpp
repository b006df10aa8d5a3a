#include "core/text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace dlperf {

std::string format_decimals(double x, int decimals) {
  int d = std::max(decimals, 0);
  if (x != 0 && std::isfinite(x)) d = std::max(d, 1 - int(std::floor(std::log10(std::fabs(x)))));
  return fmt::format("{:.{}f}", x, d);
}

}  // namespace dlperf
