// The GPU run's batch feed (gpu_feed.h): pageable copies, pinned buffers on a copy stream, and
// the dataset kept on the GPU.
#include "train/gpu_feed.h"

#include <cstring>

#include "backend/cuda/check.h"
#include "backend/cuda/runtime.h"

namespace dlperf::train::detail {

using cuda::ok;

void upload_pageable(cuda::Network& net, const data::Batch& b) {
  ok(cudaMemcpyAsync(net.input(), b.data(), b.images->bytes(), cudaMemcpyHostToDevice, net.stream()), "copying the batch");
  ok(cudaMemcpyAsync(net.labels(), b.labels.data(), b.labels.size() * sizeof(int32_t), cudaMemcpyHostToDevice, net.stream()),
     "copying the labels");
}

PinnedUploader::PinnedUploader(cuda::Network& net, int device) : net_(net), device_(device) {
  images_bytes_ = size_t(numel(net.graph().input)) * sizeof(float);
  labels_bytes_ = size_t(net.graph().batch()) * sizeof(int32_t);
  ok(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "cudaStreamCreate");
  for (Slot& s : slots_) {
    ok(cudaMallocHost(&s.host, images_bytes_ + labels_bytes_), "allocating pinned host memory (--pin-memory off avoids it)");
    s.dev = cuda::device_allocator(device).allocate(images_bytes_ + labels_bytes_, MemCategory::data);
    ok(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming), "cudaEventCreate");
    ok(cudaEventCreateWithFlags(&s.consumed, cudaEventDisableTiming), "cudaEventCreate");
  }
}

PinnedUploader::~PinnedUploader() {
  cudaStreamSynchronize(net_.stream());
  cudaStreamSynchronize(copy_);
  for (Slot& s : slots_) {
    cudaEventDestroy(s.copied);
    cudaEventDestroy(s.consumed);
    cudaFreeHost(s.host);
    cuda::device_allocator(device_).release(s.dev);
  }
  cudaStreamDestroy(copy_);
}

void PinnedUploader::upload(const data::Batch& b) {
  Slot& s = slots_[next_];
  next_ ^= 1;
  if (s.used) ok(cudaEventSynchronize(s.consumed), "waiting for a pinned buffer");
  s.used = true;
  auto* host = static_cast<unsigned char*>(s.host);
  auto* dev = static_cast<unsigned char*>(s.dev);
  std::memcpy(host, b.data(), images_bytes_);
  std::memcpy(host + images_bytes_, b.labels.data(), labels_bytes_);
  ok(cudaMemcpyAsync(dev, host, images_bytes_ + labels_bytes_, cudaMemcpyHostToDevice, copy_), "copying the batch");
  ok(cudaEventRecord(s.copied, copy_), "cudaEventRecord");
  ok(cudaStreamWaitEvent(net_.stream(), s.copied, 0), "cudaStreamWaitEvent");
  ok(cudaMemcpyAsync(net_.input(), dev, images_bytes_, cudaMemcpyDeviceToDevice, net_.stream()), "moving the batch");
  ok(cudaMemcpyAsync(net_.labels(), dev + images_bytes_, labels_bytes_, cudaMemcpyDeviceToDevice, net_.stream()), "moving the labels");
  ok(cudaEventRecord(s.consumed, net_.stream()), "cudaEventRecord");
}

DeviceDataset::DeviceDataset(const data::Dataset& d, const data::LoaderConfig& lc, const std::vector<float>& mean,
                             const std::vector<float>& stddev, int device)
    : lc_(lc), flip_ok_(d.flip_ok), device_(device) {
  CachingAllocator& mem = cuda::device_allocator(device);
  const size_t image_bytes = d.images.size(), n = size_t(d.size());
  try {  // a constructor that throws runs no destructor
    images_ = mem.allocate(image_bytes, MemCategory::data);
    labels_ = mem.allocate(n, MemCategory::data);
    order_ = mem.allocate(n * sizeof(int32_t), MemCategory::data);
    norm_ = mem.allocate(2 * size_t(d.channels) * sizeof(float), MemCategory::data);
  } catch (...) {
    release();
    throw;
  }
  // The gathers run on the network's non-blocking stream: copies it waits for (check.h).
  cuda::copy_to_device(images_, d.images.data(), image_bytes, nullptr, "copying the dataset to the GPU");
  cuda::copy_to_device(labels_, d.labels.data(), n, nullptr, "copying the labels to the GPU");
  std::vector<float> norm;  // scale then shift, as data::Loader computes them
  for (int64_t c = 0; c < d.channels; ++c) norm.push_back(1.0f / (255.0f * stddev[size_t(c)]));
  for (int64_t c = 0; c < d.channels; ++c) norm.push_back(-mean[size_t(c)] / stddev[size_t(c)]);
  cuda::copy_to_device(norm_, norm.data(), norm.size() * sizeof(float), nullptr, "copying the normalization");
  images_view_ = {static_cast<const uint8_t*>(images_), static_cast<const uint8_t*>(labels_), d.size(), d.channels, d.height, d.width};
  set_order(0, nullptr);
}

void DeviceDataset::release() {
  CachingAllocator& mem = cuda::device_allocator(device_);
  for (void* p : {images_, labels_, order_, norm_})
    if (p) mem.release(p);
  images_ = labels_ = order_ = norm_ = nullptr;
}

void DeviceDataset::set_order(int64_t epoch, cudaStream_t s) {
  const std::vector<int64_t> order = data::epoch_order(images_view_.count, lc_.shuffle, lc_.seed, epoch);
  order32_.assign(order.begin(), order.end());
  ok(cudaMemcpyAsync(order_, order32_.data(), order32_.size() * sizeof(int32_t), cudaMemcpyHostToDevice, s), "copying the order");
  if (!s) ok(cudaDeviceSynchronize(), "copying the order");
}

std::function<void(cudaStream_t)> DeviceDataset::loader(cuda::Network& net, int64_t index) const {
  const float* scale = static_cast<const float*>(norm_);
  const float* shift = scale + images_view_.channels;
  const int64_t first = index < 0 ? 0 : index * lc_.batch;
  const cuda::StepArgs* args = index < 0 ? net.step_args() : nullptr;
  // The network was built with input_as_stored: the batch lands in its type and layout.
  const cuda::StoredInput in = net.stored_input();
  return [this, &net, scale, shift, first, args, in](cudaStream_t s) {
    cuda::gather_batch(images_view_, static_cast<const int32_t*>(order_), first, 0, args, lc_.batch, lc_.augment,
                       lc_.pad_crop, flip_ok_, lc_.seed, scale, shift, in.data, net.labels(), s, in.type, in.layout);
  };
}

}  // namespace dlperf::train::detail
