// Turns a Dataset into normalized float batches: shuffling, augmentation (random crop with
// padding, horizontal flip), normalization, with N worker threads and a bounded prefetch queue.
//
// Determinism: the epoch's order is a function of (seed, epoch), each sample's augmentation a
// function of (seed, epoch, sample), and batches are handed out in order, so the batches are
// identical for any number of workers. With workers = 0 the training thread loads each batch.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/memory.h"
#include "data/dataset.h"

namespace dlperf::data {

/// More loader threads than this only costs memory (each holds two batches ahead).
constexpr int kMaxWorkers = 256;

struct LoaderConfig {
  int64_t batch = 64;
  bool shuffle = true;
  bool augment = true;     ///< random crop (pad_crop) and, where the data allows, flip
  int64_t pad_crop = 2;    ///< pixels of zero padding for the random crop; 0 = no crop
  bool drop_last = true;   ///< training drops a last partial batch; eval pads it
  int workers = 0;
  int prefetch = 0;        ///< batches the loader holds; 0 = loader_slots
  uint64_t seed = 0;
  /// Threads that compute while the workers fill (the training's); 0 = not known. Where they and
  /// the workers fit on the usable CPUs, a worker waiting for a free slot spins for it a while
  /// before it sleeps (Loader::worker_loop).
  int compute_threads = 0;
};

struct Batch {
  BufferPtr images;             ///< batch x C x H x W floats, normalized
  std::vector<int32_t> labels;  ///< batch entries; padding rows repeat label 0
  int64_t valid = 0;            ///< real samples (the rest is padding)
  int64_t index = 0;
  float* data() const { return static_cast<float*>(images->data()); }
};

/// Batches a loader holds: 1 without workers (the training thread fills it); with workers, 2 per
/// worker, and at least as many as fit in kLoaderQueueBytes up to 8, so that a worker woken to
/// refill half of them (Loader::worker_loop) is woken once per several small batches.
inline constexpr double kLoaderQueueBytes = 32.0 * 1024 * 1024;
int loader_slots(int workers, double batch_bytes);

/// The worker counts worth comparing on a machine with `cores` cores (the lab's workers
/// experiment, bench loader): 0, 2, 4, 8 bounded by the core count, or by `max_workers` where
/// above 0 (and 0, 1, 2 on two cores, so there is more than one to compare).
std::vector<int> worker_counts(int cores, int max_workers = 0);

/// The order in which an epoch visits the samples: 0..n-1, shuffled (Fisher-Yates) by a stream
/// that depends on (seed, epoch) only. The GPU's on-device loader uses the same order.
std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch);

/// Per-channel mean and standard deviation of a dataset's pixels in [0, 1].
void channel_stats(const Dataset& d, std::vector<float>& mean, std::vector<float>& stddev);

class Loader {
 public:
  Loader(const Dataset& data, LoaderConfig cfg, std::vector<float> mean, std::vector<float> stddev);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  int64_t batches_per_epoch() const;
  /// Starts producing the batches of `epoch` (workers start ahead right away).
  void start_epoch(int64_t epoch);
  /// The next batch of the epoch, or nullptr at its end. Valid until the next call.
  const Batch* next();
  /// How often a worker had to wait for a free slot this epoch (each wait lasts until half the
  /// queue is free, so at most one per half a queue of batches, and one more).
  int64_t worker_waits() const;

 private:
  struct Slot {
    Batch batch;
    int64_t id = -1;
  };
  void fill(Batch& b, int64_t id) const;
  void worker_loop(int worker);
  void stop_workers();

  const Dataset& data_;
  LoaderConfig cfg_;
  std::vector<float> scale_, shift_;  // x * scale + shift == (x/255 - mean) / std
  std::vector<int64_t> order_;
  int64_t epoch_ = 0;
  int64_t batches_ = 0;

  std::vector<Slot> slots_;
  // Per slot, the batch filled in it (-1: none), stored under mutex_ and read without it by
  // next()'s spin. A slot's id is the batch a worker fills or filled in it (-1: free).
  std::vector<std::atomic<int64_t>> ready_;
  bool spin_ = false;                        // whether next() spins: the workers leave a core for it
  bool worker_spin_ = false;                 // whether a worker spins for a free slot: it has a core of its own
  std::atomic<int64_t> released_{0};         // batches the consumer is done with (next() releases them in order)
  std::vector<std::thread> threads_;
  mutable std::mutex mutex_;
  std::condition_variable produced_, consumed_;
  int64_t next_id_ = 0;    // next batch a worker takes
  int64_t want_ = 0;       // next batch the consumer takes
  int64_t held_ = -1;      // slot the consumer holds
  int64_t worker_waits_ = 0;  // worker_waits()
  int64_t wake_at_ = INT64_MAX;  // want_ past which a sleeping worker's slot is free (INT64_MAX: none sleeps)
  bool stopping_ = false;
  std::exception_ptr error_;
};

}  // namespace dlperf::data
