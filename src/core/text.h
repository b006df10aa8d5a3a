// Small helpers for the sentences dlperf prints.
#pragma once

#include <string>

namespace dlperf {

/// "1 thread", "2 threads": a count with its noun, singular for one.
inline std::string counted(long long n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

}  // namespace dlperf
