#include "bench/loader_bench.h"

#include <fmt/format.h>

#include <bit>
#include <tuple>

#include "core/error.h"
#include "core/rng.h"
#include "core/text.h"
#include "core/timer.h"
#include "data/loader.h"

namespace dlperf::bench {

namespace {

// One round of point `p`: a fresh loader (the same seed every round), one untimed warm-up epoch,
// then p.epochs timed ones. Their images/s; each epoch's checksum goes in `sums`.
std::vector<double> loader_round(const data::Dataset& d, int64_t batch, const std::vector<float>& mean, const std::vector<float>& stddev,
                                 LoaderPoint& p, std::vector<uint64_t>& sums) {
  data::LoaderConfig cfg;
  cfg.batch = batch;
  cfg.augment = p.augment;
  cfg.workers = p.workers;
  cfg.seed = 1;
  data::Loader loader(d, cfg, mean, stddev);
  p.images = loader.batches_per_epoch() * batch;
  std::vector<double> rates;
  for (int e = 0; e <= p.epochs; ++e) {  // epoch 0 warms up: first touches of the data and the batches
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
    rates.push_back(double(p.images) / (now_s() - t0));
    sums.push_back(sum);
  }
  return rates;
}

}  // namespace

std::vector<LoaderPoint> loader_sweep(const data::Dataset& d, int64_t batch, const std::vector<int>& workers, const Options& o,
                                      const std::vector<bool>& augments) {
  check(!workers.empty(), "the loader benchmark needs at least one worker count");
  std::vector<float> mean, stddev;
  data::channel_stats(d, mean, stddev);
  std::vector<LoaderPoint> out;
  for (const bool augment : augments)
    for (const int w : workers) out.push_back({.workers = w, .augment = augment, .epochs = o.quick ? 3 : 4, .rounds = kRounds});
  // In rounds, as the other sweeps (kRounds): a quick epoch of Fashion-MNIST takes 15-40 ms, so a
  // slow spell of the VM took a whole point's epochs (in 3 of 12 quick sweeps on the Zen 4, a
  // point read 0.6-0.8x its median).
  std::vector<std::vector<uint64_t>> reference(augments.size());  // per augment: each epoch's checksum with workers[0]
  const auto rounds = in_rounds(out.size(), [&](size_t i) {
    std::vector<uint64_t> sums;
    std::vector<double> rates = loader_round(d, batch, mean, stddev, out[i], sums);
    std::vector<uint64_t>& first = reference[i / workers.size()];
    if (first.empty()) first = sums;
    check(sums == first,
          fmt::format("the data loader with {} delivered other batches than with {} ({}): a bug in dlperf", counted(out[i].workers, "worker"),
                      workers.front(), out[i].augment ? "augmented" : "not augmented"),
          "report it with the command that showed it");
    return rates;
  });
  for (size_t i = 0; i < out.size(); ++i) {
    LoaderPoint& p = out[i];
    std::tie(p.images_per_s, p.best_round_images_per_s) = best_round(rounds[i]);
    p.ns_per_pixel = 1e9 / (p.best_round_images_per_s * double(d.image_bytes()));
  }
  return out;
}

nlohmann::json to_json(const LoaderPoint& p) {
  return {{"workers", p.workers},
          {"augment", p.augment},
          {"images_per_s_best_round", p.best_round_images_per_s},
          {"images_per_s_median", p.images_per_s.median},
          {"images_per_s_min", p.images_per_s.min},
          {"images_per_s_max", p.images_per_s.max},
          {"ns_per_pixel", p.ns_per_pixel},
          {"epochs", p.epochs},
          {"rounds", p.rounds},
          {"images_per_epoch", p.images}};
}

}  // namespace dlperf::bench
