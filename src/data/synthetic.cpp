#include <algorithm>
#include <cmath>

#include "core/rng.h"
#include "data/dataset.h"

namespace dlperf::data {

Dataset make_synthetic(int64_t n, int64_t c, int64_t h, int64_t w, int64_t classes, uint64_t seed) {
  Dataset d;
  d.name = "synthetic";
  d.channels = c;
  d.height = h;
  d.width = w;
  d.classes = classes;
  const int64_t pixels = c * h * w;
  // Each class: a sum of a few random low-frequency waves, so neighbouring pixels correlate as
  // in real images and convolutions have something to find.
  std::vector<float> proto(size_t(classes * pixels));
  Rng rng(seed);
  for (int64_t k = 0; k < classes; ++k)
    for (int wave = 0; wave < 3; ++wave) {
      const double fy = 1 + rng.below(3), fx = 1 + rng.below(3), ph = rng.uniform() * 6.283;
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t y = 0; y < h; ++y)
          for (int64_t x = 0; x < w; ++x)
            proto[size_t(k * pixels + (ch * h + y) * w + x)] +=
                float(std::sin(fy * 3.1416 * double(y) / double(h) + fx * 3.1416 * double(x) / double(w) + ph + double(ch)));
    }
  d.images.resize(size_t(n * pixels));
  d.labels.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = int64_t(rng.below(uint64_t(classes)));
    d.labels[size_t(i)] = uint8_t(k);
    for (int64_t j = 0; j < pixels; ++j) {
      const double v = 128 + 40 * proto[size_t(k * pixels + j)] + 30 * rng.normal();
      d.images[size_t(i * pixels + j)] = uint8_t(std::clamp(v, 0.0, 255.0));
    }
  }
  return d;
}

}  // namespace dlperf::data
