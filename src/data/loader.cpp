#include "data/loader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "core/timer.h"
#include "data/augment.h"
#include "hw/cpu_info.h"
#include "profile/recorder.h"

namespace dlperf::data {

std::vector<int> worker_counts(int cores, int max_workers) {
  const int bound = max_workers > 0 ? max_workers : std::max(cores, 1);
  std::vector<int> w;
  for (int n : {0, 2, 4, 8})
    if (n <= bound) w.push_back(n);
  if (w.size() < 3 && bound >= 1) w.insert(w.begin() + 1, 1);  // 0, 1, 2 on two cores
  return w;
}

std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  if (shuffle) {  // Fisher-Yates from a stream that depends on (seed, epoch) only
    Rng rng(hash_coords(seed, 0x5A0F, uint64_t(epoch)));
    for (int64_t i = n - 1; i > 0; --i) std::swap(order[size_t(i)], order[rng.below(uint64_t(i + 1))]);
  }
  return order;
}

void channel_stats(const Dataset& d, std::vector<float>& mean, std::vector<float>& stddev) {
  const int64_t C = d.channels, HW = d.height * d.width, N = d.size();
  mean.assign(size_t(C), 0.f);
  stddev.assign(size_t(C), 1.f);
  for (int64_t c = 0; c < C; ++c) {
    double s = 0, s2 = 0;
    for (int64_t n = 0; n < N; ++n) {
      const uint8_t* p = &d.images[size_t((n * C + c) * HW)];
      uint64_t a = 0, a2 = 0;
      for (int64_t i = 0; i < HW; ++i) a += p[i], a2 += uint64_t(p[i]) * p[i];
      s += double(a), s2 += double(a2);
    }
    const double cnt = double(N * HW), m = s / cnt / 255.0;
    const double var = std::max(s2 / cnt / (255.0 * 255.0) - m * m, 1e-12);
    mean[size_t(c)] = float(m);
    stddev[size_t(c)] = float(std::sqrt(var));
  }
}

Loader::Loader(const Dataset& data, LoaderConfig cfg, std::vector<float> mean, std::vector<float> stddev)
    : data_(data), cfg_(cfg) {
  check(cfg_.batch > 0, "--batch-size must be at least 1");
  check(cfg_.workers >= 0 && cfg_.workers <= kMaxWorkers, fmt::format("--workers must be between 0 and {}", kMaxWorkers));
  check(data_.size() > 0, "the dataset is empty");
  check(!cfg_.drop_last || cfg_.batch <= data_.size(),
        fmt::format("--batch-size {} is larger than the {} training images", cfg_.batch, data_.size()),
        "use a smaller --batch-size or more data");
  for (int64_t c = 0; c < data_.channels; ++c) {
    scale_.push_back(1.0f / (255.0f * stddev[size_t(c)]));
    shift_.push_back(-mean[size_t(c)] / stddev[size_t(c)]);
  }
  batches_ = cfg_.drop_last ? data_.size() / cfg_.batch : (data_.size() + cfg_.batch - 1) / cfg_.batch;
  const size_t batch_bytes = size_t(cfg_.batch * data_.image_bytes()) * sizeof(float);
  slots_.resize(size_t(cfg_.workers == 0 ? 1 : cfg_.prefetch > 0 ? std::max(2, cfg_.prefetch) : loader_slots(cfg_.workers, double(batch_bytes))));
  ready_ = std::vector<std::atomic<int64_t>>(slots_.size());
  spin_ = cfg_.workers > 0 && cfg_.workers < hw::usable_cpus();
  worker_spin_ = cfg_.workers > 0 && cfg_.compute_threads > 0 && cfg_.compute_threads + cfg_.workers <= hw::usable_cpus();
  for (Slot& s : slots_) {
    s.batch.images = make_buffer(batch_bytes, MemCategory::data);
    s.batch.labels.resize(size_t(cfg_.batch));
  }
  order_.resize(size_t(data_.size()));
}

Loader::~Loader() { stop_workers(); }

int64_t Loader::batches_per_epoch() const { return batches_; }

void Loader::stop_workers() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  produced_.notify_all();
  consumed_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void Loader::start_epoch(int64_t epoch) {
  stop_workers();
  epoch_ = epoch;
  order_ = epoch_order(data_.size(), cfg_.shuffle, cfg_.seed, epoch);
  stopping_ = false;
  error_ = nullptr;
  next_id_ = want_ = 0;
  released_ = 0;
  held_ = -1;
  wake_at_ = INT64_MAX;
  worker_waits_ = 0;
  for (Slot& s : slots_) s.id = -1;
  for (auto& r : ready_) r.store(-1);  // batch ids start again at 0
  for (int w = 0; w < cfg_.workers; ++w) threads_.emplace_back([this, w] { worker_loop(w); });
}

namespace {
// How long next() spins for a batch before it sleeps. It spins by yielding, so that a worker
// that shares its core on a busy machine runs meanwhile.
constexpr double kSpinS = 30e-6;
// How long a worker with a core of its own spins for a free slot before it sleeps: longer than
// the steps of the tiny models, whose workers then never sleep (see worker_loop).
constexpr double kWorkerSpinS = 200e-6;
}  // namespace

int loader_slots(int workers, double batch_bytes) {
  if (workers == 0) return 1;
  const int by_bytes = int(std::clamp(kLoaderQueueBytes / std::max(batch_bytes, 1.0), 2.0, 8.0));
  return std::max(2 * workers, by_bytes);
}

namespace {
// out[i] = in[i] * scale + shift over n pixels; the arrays never overlap (restrict: no runtime
// alias check, whose scalar fallback the loop otherwise ran in).
void normalize(const uint8_t* __restrict in, float* __restrict out, int64_t n, float scale, float shift) {
  for (int64_t i = 0; i < n; ++i) out[i] = float(in[i]) * scale + shift;
}
}  // namespace

void Loader::fill(Batch& b, int64_t id) const {
  const int64_t C = data_.channels, H = data_.height, W = data_.width, HW = H * W;
  const int64_t first = id * cfg_.batch;
  b.index = id;
  b.valid = std::min(cfg_.batch, data_.size() - first);
  float* out = b.data();
  for (int64_t i = 0; i < cfg_.batch; ++i) {
    float* img = out + i * C * HW;
    if (i >= b.valid) {  // padding of a last eval batch
      std::fill_n(img, C * HW, 0.f);
      b.labels[size_t(i)] = 0;
      continue;
    }
    const int64_t sample = order_[size_t(first + i)];
    b.labels[size_t(i)] = data_.labels[size_t(sample)];
    const uint8_t* src = &data_.images[size_t(sample * C * HW)];
    const Crop crop = cfg_.augment ? random_crop(cfg_.seed, epoch_, sample, cfg_.pad_crop, data_.flip_ok) : Crop{};
    const int64_t dy = crop.dy, dx = crop.dx;
    // The crop shifts the image by (dy, dx): output pixel (y, x) reads source pixel (y + dy, x + dx)
    // where that lies inside the image, else it is the crop's zero padding (black before
    // normalization, so `sh`). Rows [y0, y1) and columns [x0, x1) read inside the image. The
    // offset is the same for every pixel, so the window is one run of pixels from its first to
    // its last (vectorized), whose stretches past a row's end (dx != 0) land on that row's
    // padding columns and are overwritten after. A flip mirrors each row of the shifted window:
    // output (y, x) reads source (y + dy, W - 1 - x + dx), the shifted pixel (y, W - 1 - x).
    // `dlperf bench loader -j 0` on the Zen 5 (Fashion-MNIST's 60,000 images at batch 64, then
    // synthetic 3x32x32): with a test per pixel, 0.90 and 0.56 ns a pixel, a quarter of a tiny
    // model's step; with each row its own short call, 0.35 and 0.20, but augmented 0.98 and 0.51
    // (Fashion-MNIST's flips were reversed reads); as one run with rows reversed in place for a
    // flip, augmented 0.61 and 0.29.
    // Clamped to the image: a shift as large as the image (pad 2 on 1-pixel rows) reads nothing.
    const int64_t y0 = std::clamp<int64_t>(-dy, 0, H), y1 = std::clamp<int64_t>(H - dy, y0, H);
    const int64_t x0 = std::clamp<int64_t>(-dx, 0, W), x1 = std::clamp<int64_t>(W - dx, x0, W);
    for (int64_t c = 0; c < C; ++c) {
      const float sc = scale_[size_t(c)], sh = shift_[size_t(c)];
      const uint8_t* plane = src + c * HW;
      float* dst = img + c * HW;
      std::fill(dst, dst + y0 * W, sh);
      std::fill(dst + y1 * W, dst + HW, sh);
      if (x0 == x1) {  // shifted clear of the image sideways
        std::fill(dst + y0 * W, dst + y1 * W, sh);
        continue;
      }
      const int64_t from = y0 * W + x0, to = (y1 - 1) * W + x1;
      if (from < to) normalize(plane + from + dy * W + dx, dst + from, to - from, sc, sh);
      if (dx == 0 && !crop.flip) continue;
      for (int64_t y = y0; y < y1; ++y) {
        float* row = dst + y * W;
        std::fill(row, row + x0, sh);
        std::fill(row + x1, row + W, sh);
        if (crop.flip) std::reverse(row, row + W);
      }
    }
  }
}

void Loader::worker_loop(int worker) {
  for (;;) {
    int64_t id;
    Slot* slot;
    {
      std::unique_lock lock(mutex_);
      if (stopping_ || next_id_ >= batches_) return;
      id = next_id_++;
      slot = &slots_[size_t(id % int64_t(slots_.size()))];
      // The slot is free once the consumer is done with the batch that used it before: once it
      // has taken the batch after that one. A worker that must wait sleeps until half the slots
      // are free, so that it refills several in a row and the training thread wakes it once per
      // several batches: one wake a batch cost the mlp's 35 us step about 10 us (a futex call
      // and a VM's wake-up) and made 1 loader worker 1.4x slower than none.
      // Where the worker has a core of its own, it first spins for the slot, outside the lock:
      // a tiny model's steps are shorter than a wake-up, and even one wake per half a queue
      // held its steps back (logreg at batch 16 on one compute thread and a 2-vCPU VM: one step
      // in seven took twice the median). Spinning, its epoch took 0.84x the time, the mlp's 0.81x.
      const int64_t n = int64_t(slots_.size());
      if (worker_spin_ && released_.load(std::memory_order_acquire) <= id - n) {
        lock.unlock();
        const double give_up = now_s() + kWorkerSpinS;
        while (released_.load(std::memory_order_acquire) <= id - n && now_s() < give_up) std::this_thread::yield();
        lock.lock();
        if (stopping_) return;
      }
      auto free_once_past = [&](int64_t taken) { return slot->id == -1 && want_ > taken; };
      if (!free_once_past(id - n)) {
        ++worker_waits_;
        const int64_t wake = id - n + std::max<int64_t>(1, n / 2);  // want_ past this: the slot and those after it are free
        while (!stopping_ && !free_once_past(wake)) {
          wake_at_ = std::min(wake_at_, wake);  // set again after every wake: next() clears it
          consumed_.wait(lock);
        }
      }
      if (stopping_) return;
      slot->id = id;
    }
    try {
      profile::Recorder& rec = profile::Recorder::get();
      // Through the whole window, the steps --profile-every skips included: workers fill in bursts
      // (half the queue at a time), which one step in N could see always or never.
      const bool was_on = rec.started();
      const double t0 = was_on ? rec.now() : 0;
      fill(slot->batch, id);
      if (was_on && rec.started()) {  // the batch on this worker's own track of the trace
        profile::Event e;
        e.name = fmt::format("batch {}", id);
        e.phase = profile::Phase::load;
        e.t0 = t0;
        e.t1 = rec.now();
        e.track = worker + 1;
        e.step = rec.step();
        rec.add(std::move(e));
      }
    } catch (...) {
      std::lock_guard lock(mutex_);
      error_ = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      ready_[size_t(id % int64_t(slots_.size()))].store(id, std::memory_order_release);
    }
    produced_.notify_all();  // no system call unless the consumer sleeps
  }
}

int64_t Loader::worker_waits() const {
  const std::lock_guard lock(mutex_);
  return worker_waits_;
}

const Batch* Loader::next() {
  std::unique_lock lock(mutex_);
  if (held_ >= 0) {  // the previous batch is done with
    slots_[size_t(held_)].id = -1;
    held_ = -1;
    released_.store(want_, std::memory_order_release);  // every batch taken so far
  }
  if (want_ >= batches_) return nullptr;
  const int64_t id = want_;
  const size_t s = size_t(id % int64_t(slots_.size()));
  if (cfg_.workers == 0) {
    lock.unlock();
    fill(slots_[s].batch, id);
    lock.lock();
  } else {
    // A batch that is not ready yet is often a few microseconds away: spin for it a while
    // before sleeping, where the workers leave a core free for that. Waking a sleeping consumer
    // costs the worker a system call each batch and the batch a VM's wake-up: `dlperf bench
    // loader -j 1` on 2 cores delivered 0.58-0.75x of what the thread alone fills, a median
    // 0.93x spinning. With as many workers as cores the spin takes a worker's core (2 workers
    // on 2 cores: 0.91-1.01x instead of 1.19-1.29x), so it does not spin there.
    if (spin_ && ready_[s].load(std::memory_order_acquire) != id && !error_) {
      lock.unlock();
      const double give_up = now_s() + kSpinS;
      while (ready_[s].load(std::memory_order_acquire) != id && now_s() < give_up) std::this_thread::yield();
      lock.lock();
    }
    produced_.wait(lock, [&] { return error_ || ready_[s].load(std::memory_order_acquire) == id; });
    if (error_) std::rethrow_exception(error_);
  }
  ++want_;
  held_ = int64_t(s);
  if (want_ > wake_at_) {  // a sleeping worker's slot is free: wake the workers
    wake_at_ = INT64_MAX;
    consumed_.notify_all();
  }
  return &slots_[s].batch;
}

}  // namespace dlperf::data
