#include "core/timer.h"

#include <fmt/format.h>

namespace dlperf {

namespace {
// Three significant digits under a unit's 1000: "5.41 ms", "78.0 ms", "977 ms" (not "977.34").
std::string three_digits(double x, const char* unit) {
  return fmt::format("{:.{}f} {}", x, x < 9.995 ? 2 : x < 99.95 ? 1 : 0, unit);
}
}  // namespace

std::string format_seconds(double s) {
  if (s < 0.9995e-3) return three_digits(s * 1e6, "us");
  if (s < 0.9995) return three_digits(s * 1e3, "ms");
  if (s < 120) return fmt::format("{:.1f} s", s);
  if (s < 7200) return fmt::format("{:.1f} min", s / 60);
  if (s < 72 * 3600) return fmt::format("{:.1f} h", s / 3600);  // GPU-hours are how jobs are counted
  constexpr double day = 86400, year = 365.25 * day;
  if (s < 2 * year) return fmt::format("{:.1f} days", s / day);
  return fmt::format("{:.3g} years", s / year);
}

}  // namespace dlperf
