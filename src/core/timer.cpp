#include "core/timer.h"

#include <fmt/format.h>

namespace dlperf {

std::string format_seconds(double s) {
  if (s < 1e-3) return fmt::format("{:.1f} us", s * 1e6);
  if (s < 1) return fmt::format("{:.2f} ms", s * 1e3);
  if (s < 120) return fmt::format("{:.1f} s", s);
  if (s < 7200) return fmt::format("{:.1f} min", s / 60);
  if (s < 72 * 3600) return fmt::format("{:.1f} h", s / 3600);  // GPU-hours are how jobs are counted
  constexpr double day = 86400, year = 365.25 * day;
  if (s < 2 * year) return fmt::format("{:.1f} days", s / day);
  return fmt::format("{:.3g} years", s / year);
}

}  // namespace dlperf
