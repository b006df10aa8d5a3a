// Index arithmetic of the GPU pooling kernels, in a header the host compiles too, so the CPU test
// suite checks it (tests/test_cuda.cpp, PoolWindows.*) without a GPU.
#pragma once

#include <cstdint>

#include "core/rng.h"  // DLPERF_HD

namespace dlperf::cuda {

/// The output rows (or columns) whose window holds input row `i`: windows o with
/// o * stride - pad <= i <= o * stride - pad + k - 1, clipped to [0, out). Empty when first > last.
struct WindowRange {
  int64_t first, last;
};
DLPERF_HD inline WindowRange windows_holding(int64_t i, int64_t k, int64_t stride, int64_t pad, int64_t out) {
  // first = ceil((i + pad - k + 1) / stride), written for a numerator that may be negative.
  const int64_t num = i + pad - k + 1;
  int64_t first = num <= 0 ? 0 : (num + stride - 1) / stride;
  int64_t last = (i + pad) / stride;  // i + pad >= 0 always
  if (last > out - 1) last = out - 1;
  if (first < 0) first = 0;
  return {first, last};
}

}  // namespace dlperf::cuda
