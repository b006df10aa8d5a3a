#include "core/rng.h"

#include <cmath>

namespace dlperf {

double Rng::normal() {
  double u1 = (double(next() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  double u2 = double(next() >> 11) * (1.0 / 9007199254740992.0);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace dlperf
