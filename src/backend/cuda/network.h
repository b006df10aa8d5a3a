// Runs a resolved model graph on one GPU in fp32, NCHW: conv through cuDNN, batchnorm and
// pooling through cuDNN, linear through cuBLASLt, the rest with dlperf's own kernels. Parameters
// live in one flat buffer (gradients and optimizer states likewise), so the optimizer is one
// launch. Initialization draws the CPU engine's exact values, so CPU and GPU runs start equal.
//
// First version of the CUDA backend's executor: fp32 only, no fusion, no CUDA graphs; mixed
// precision and graph capture build on it.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "core/memory.h"
#include "nn/graph.h"
#include "nn/optimizer.h"

namespace dlperf::cuda {

struct GpuLoss {
  double loss = 0;      ///< mean over valid rows
  int64_t correct = 0;
};

class Network {
 public:
  Network(const nn::Graph& g, uint64_t seed, int device);
  ~Network();
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  const nn::Graph& graph() const { return graph_; }
  /// Device buffers the caller fills before forward(): images [N, C, H, W], labels [N].
  float* input();
  int32_t* labels();
  cudaStream_t stream() const { return stream_; }

  void forward(bool training, uint64_t dropout_step = 0);
  /// Loss over rows [0, valid), with the logits' gradient when `grad`. Waits for the GPU.
  GpuLoss loss(int64_t valid, double smoothing, bool grad);
  void backward();
  /// One update of all parameters (one launch), as nn::Optimizer does on the CPU.
  void step(const nn::OptimizerConfig& opt, double lr);

  /// Host copies, for tests and checkpoints: all parameters flat in graph order (weight, bias),
  /// and the logits [N, classes].
  std::vector<float> parameters() const;
  std::vector<float> logits() const;
  MemoryStats memory() const;

 private:
  struct Layer;
  float* alloc(size_t floats, MemCategory c);
  nn::Graph graph_;
  int device_;
  cudaStream_t stream_{};
  void* cudnn_ = nullptr;
  std::vector<void*> owned_;  // every device block, released in the destructor
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<float*> act_, diff_;  // per value: 0 = the input, i + 1 = node i's output
  float *params_ = nullptr, *grads_ = nullptr, *state_m_ = nullptr, *state_v_ = nullptr;
  int64_t param_count_ = 0, steps_ = 0;  // floats in the flat buffers, padding included
  std::vector<std::pair<int64_t, int64_t>> tensors_;  // (offset, count) of each parameter tensor
  float* scratch_ = nullptr;  // one input's worth: gradient sums and unread dx (allocated once)
  int32_t* labels_ = nullptr;
  double* loss_sum_ = nullptr;
  int32_t* correct_ = nullptr;
  uint64_t seed_;
};

}  // namespace dlperf::cuda
