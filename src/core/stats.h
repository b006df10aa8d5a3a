// Repeated measurements summed up as the project quotes them: the median, and min-max as the spread.
#pragma once

#include <vector>

namespace dlperf {

struct Spread {
  double median = 0, min = 0, max = 0;
};
/// Median, min and max of samples (not empty).
Spread spread_of(std::vector<double> samples);

}  // namespace dlperf
