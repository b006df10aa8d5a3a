// How batches reach a GPU training run (train/gpu_trainer.cpp): copied from the host loaders
// through pageable memory (--pin-memory off) or pinned buffers on a copy stream that overlaps
// compute (--pin-memory on, the default), or gathered on the GPU from a copy of the dataset there
// (--data-on-device). docs/gpu.md says what each costs.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "backend/cuda/network.h"
#include "data/dataset.h"
#include "data/loader.h"

namespace dlperf::train::detail {

/// Pageable copies into the network's input, in the step's stream (--pin-memory off).
void upload_pageable(cuda::Network& net, const data::Batch& b);

/// --pin-memory on: two pinned host buffers and two device staging buffers. A batch is copied
/// into a pinned buffer, sent on a copy stream while the previous step computes, and moved into
/// the network's input by a device-to-device copy the step's stream waits for. A slot is reused
/// only after that copy has run.
class PinnedUploader {
 public:
  PinnedUploader(cuda::Network& net, int device);
  ~PinnedUploader();
  PinnedUploader(const PinnedUploader&) = delete;
  PinnedUploader& operator=(const PinnedUploader&) = delete;

  void upload(const data::Batch& b);

 private:
  struct Slot {
    void* host = nullptr;
    void* dev = nullptr;
    cudaEvent_t copied{}, consumed{};
    bool used = false;
  };
  cuda::Network& net_;
  int device_;
  size_t images_bytes_ = 0, labels_bytes_ = 0;
  cudaStream_t copy_{};
  Slot slots_[2];
  int next_ = 0;
};

/// --data-on-device: the dataset's bytes and labels on the GPU, an epoch's order, and the
/// normalization; batches are built there by cuda::gather_batch.
class DeviceDataset {
 public:
  DeviceDataset(const data::Dataset& d, const data::LoaderConfig& lc, const std::vector<float>& mean,
                const std::vector<float>& stddev, int device);
  ~DeviceDataset() { release(); }
  DeviceDataset(const DeviceDataset&) = delete;
  DeviceDataset& operator=(const DeviceDataset&) = delete;

  /// The order of `epoch` (data::epoch_order, as the host loader's), queued on `s`.
  void set_order(int64_t epoch, cudaStream_t s);
  int64_t batches() const {
    return lc_.drop_last ? images_view_.count / lc_.batch : (images_view_.count + lc_.batch - 1) / lc_.batch;
  }
  /// Fills the network's input and labels with batch `index` (from the step's values when < 0).
  std::function<void(cudaStream_t)> loader(cuda::Network& net, int64_t index) const;
  int64_t valid(int64_t index) const { return std::min(lc_.batch, images_view_.count - index * lc_.batch); }

 private:
  void release();

  data::LoaderConfig lc_;
  bool flip_ok_;
  int device_;
  void *images_ = nullptr, *labels_ = nullptr, *order_ = nullptr, *norm_ = nullptr;
  cuda::DeviceImages images_view_;
  std::vector<int32_t> order32_;  // kept alive until the next set_order (the copy is asynchronous)
};

}  // namespace dlperf::train::detail
