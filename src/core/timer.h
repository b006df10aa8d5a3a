// Wall-clock timing for the trainer's step split, and durations as people read them.
#pragma once

#include <chrono>
#include <string>

namespace dlperf {

inline double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

/// "5.41 ms", "12.3 s", "4.2 min", "50.8 h", "26.6 days", "11.2 years": the unit that keeps a
/// tiny run from reading "0.0 s" and a huge job from reading in millions of hours.
std::string format_seconds(double s);

}  // namespace dlperf
