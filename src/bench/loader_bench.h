// How fast dlperf's data loader turns a dataset's bytes into normalized float batches, alone:
// the rate no training run on this data can beat, by loader workers and with and without
// augmentation. A model whose step consumes images faster than this waits for data.
#pragma once

#include <nlohmann/json.hpp>

#include <vector>

#include "bench/cpu_bench.h"
#include "data/dataset.h"

namespace dlperf::bench {

struct LoaderPoint {
  int workers = 0;       ///< loader threads; 0: the calling thread fills each batch
  bool augment = false;  ///< random crop (2-pixel pad) and, where the data allows, flip
  Spread images_per_s{};  ///< over every timed epoch of every round, each from start_epoch to its last batch
  double best_round_images_per_s = 0;  ///< the best round's median epoch: the point's figure
  double ns_per_pixel = 0;  ///< wall time per pixel delivered, at the point's figure
  int epochs = 0;         ///< timed a round, after one untimed warm-up epoch
  int rounds = 0;         ///< kRounds: a fresh loader each
  int64_t images = 0;     ///< delivered an epoch (whole batches: the last partial one is dropped)
};

/// Each of `workers` for each of `augment` (off, then on, by default): batches of `batch`,
/// shuffled, the consumer doing nothing but take them; the sweep in rounds (kRounds). Validated: every worker count must
/// deliver the batches the first count delivered, epoch by epoch (the loader's order and
/// augmentation do not depend on its workers), else an Error.
std::vector<LoaderPoint> loader_sweep(const data::Dataset& d, int64_t batch, const std::vector<int>& workers, const Options& o,
                                      const std::vector<bool>& augment = {false, true});

nlohmann::json to_json(const LoaderPoint& p);

}  // namespace dlperf::bench
