// fp16's dynamic loss scale: the state the GPU keeps, and the rule that updates it. CUDA-free
// and compiled for host and device, so the CPU test suite checks the rule.
#pragma once

#include <cstdint>

#include "core/rng.h"  // DLPERF_HD

namespace dlperf::cuda {

/// fp16's dynamic loss scale, kept on the device so a captured step updates it (PyTorch's
/// GradScaler rules: start at 2^16, halve and skip the step on overflow, double after 2000
/// clean steps).
struct LossScale {
  float scale = 65536.f;
  int32_t found_inf = 0;
  int32_t clean_steps = 0;
  int64_t skipped = 0;
};
/// GradScaler's rule after a step's gradients were checked (compiled for host and device, so the
/// CPU tests check it): an overflow halves the scale and counts a skipped step; 2000 clean
/// steps in a row double it.
DLPERF_HD inline void advance_loss_scale(LossScale& ls) {
  if (ls.found_inf) {
    ls.scale *= 0.5f;
    ls.clean_steps = 0;
    ++ls.skipped;
  } else if (++ls.clean_steps >= 2000) {
    ls.scale *= 2.f;
    ls.clean_steps = 0;
  }
  ls.found_inf = 0;
}

}  // namespace dlperf::cuda
