// The random crop and flip of one sample in one epoch, shared by the host loader (loader.cpp) and
// the GPU's on-device loader (backend/cuda/kernels.cu), so both draw the same augmentation.
#pragma once

#include <cstdint>

#include "core/rng.h"  // hash_coords, DLPERF_HD

namespace dlperf::data {

struct Crop {
  int64_t dy = 0, dx = 0;  ///< shift of the crop window in [-pad, pad]
  bool flip = false;       ///< horizontal flip
};

/// A function of (seed, epoch, sample) only, so any number of workers, and the GPU, agree.
DLPERF_HD inline Crop random_crop(uint64_t seed, int64_t epoch, int64_t sample, int64_t pad, bool flip_ok) {
  const uint64_t h = hash_coords(seed, 0xA06, uint64_t(epoch), uint64_t(sample));
  const int64_t span = 2 * pad + 1;
  Crop c;
  c.dy = int64_t(h % uint64_t(span)) - pad;
  c.dx = int64_t((h >> 16) % uint64_t(span)) - pad;
  c.flip = flip_ok && ((h >> 40) & 1);
  return c;
}

}  // namespace dlperf::data
