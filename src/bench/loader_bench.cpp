#include "bench/loader_bench.h"

#include <fmt/format.h>

#include <bit>

#include "core/error.h"
#include "core/rng.h"
#include "core/text.h"
#include "core/timer.h"
#include "data/loader.h"

namespace dlperf::bench {

std::vector<LoaderPoint> loader_sweep(const data::Dataset& d, int64_t batch, const std::vector<int>& workers, const Options& o,
                                      const std::vector<bool>& augments) {
  check(!workers.empty(), "the loader benchmark needs at least one worker count");
  std::vector<float> mean, stddev;
  data::channel_stats(d, mean, stddev);
  const int epochs = o.quick ? 3 : 7;
  std::vector<LoaderPoint> out;
  for (const bool augment : augments) {
    std::vector<uint64_t> reference;  // each timed epoch's checksum with workers[0]
    for (const int w : workers) {
      data::LoaderConfig cfg;
      cfg.batch = batch;
      cfg.augment = augment;
      cfg.workers = w;
      cfg.seed = 1;
      data::Loader loader(d, cfg, mean, stddev);
      LoaderPoint p{w, augment, {}, 0, epochs, loader.batches_per_epoch() * batch};
      std::vector<double> seconds;
      std::vector<uint64_t> sums;
      for (int e = 0; e <= epochs; ++e) {  // epoch 0 warms up: first touches of the data and the batches
        uint64_t sum = 0;
        const double t0 = now_s();
        loader.start_epoch(e);
        // A few values of each batch (first and last pixel, first label) cost nothing beside the
        // fill, and tell batches apart: a different order, crop or normalization changes them.
        while (const data::Batch* b = loader.next()) {
          const float* x = b->data();
          sum = hash_coords(sum, std::bit_cast<uint32_t>(x[0]), std::bit_cast<uint32_t>(x[batch * d.image_bytes() - 1]),
                            uint64_t(b->labels[0]));  // the running sum as the seed: order-sensitive
        }
        if (e == 0) continue;
        seconds.push_back(now_s() - t0);
        sums.push_back(sum);
      }
      if (reference.empty()) reference = sums;
      check(sums == reference,
            fmt::format("the data loader with {} delivered other batches than with {} ({}): a bug in dlperf", counted(w, "worker"),
                        workers.front(), augment ? "augmented" : "not augmented"),
            "report it with the command that showed it");
      const Spread s = spread_of(seconds);
      p.images_per_s = {double(p.images) / s.median, double(p.images) / s.max, double(p.images) / s.min};
      p.ns_per_pixel = s.median * 1e9 / (double(p.images) * double(d.image_bytes()));
      out.push_back(p);
    }
  }
  return out;
}

nlohmann::json to_json(const LoaderPoint& p) {
  return {{"workers", p.workers},
          {"augment", p.augment},
          {"images_per_s_median", p.images_per_s.median},
          {"images_per_s_min", p.images_per_s.min},
          {"images_per_s_max", p.images_per_s.max},
          {"ns_per_pixel", p.ns_per_pixel},
          {"epochs", p.epochs},
          {"images_per_epoch", p.images}};
}

}  // namespace dlperf::bench
