// Small helpers for the sentences dlperf prints.
#pragma once

#include <string>

namespace dlperf {

/// "1 thread", "2 threads": a count with its noun, singular for one.
inline std::string counted(long long n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

/// x with at least `decimals` decimals, and more where a small value would otherwise lose its
/// two leading significant digits: a 5.4 us layer is "0.0054" ms, not "0.005" read as half
/// of it or "0.000" read as free. Exact zero keeps `decimals` ("0.000").
std::string format_decimals(double x, int decimals);

}  // namespace dlperf
