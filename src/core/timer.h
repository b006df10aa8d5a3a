// Wall-clock timing for the trainer's step split.
#pragma once

#include <chrono>

namespace dlperf {

inline double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

}  // namespace dlperf
