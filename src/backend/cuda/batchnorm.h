// dlperf's own batchnorm2d kernels for the GPU executor, with the following relu fused in as the
// CPU engine fuses it (one pass over the activation instead of two, each way).
//
// Why not cuDNN's: cuDNN 9 marks its legacy batchnorm API deprecated (cudnn_ops.h), PyTorch does
// not send bf16 batchnorm to it (it runs its own kernels there), its graph API would add a second
// way of building ops for one layer type, and the legacy API does not fuse the relu's backward. These follow PyTorch's and the CPU
// engine's definitions: normalize with the batch's biased variance, update the running variance
// with the unbiased one, running = (1 - momentum) * running + momentum * batch.
//
// Layout NCHW or NHWC, activations in any DType, everything else fp32; sums over a channel in double
// across blocks (fixed order: results are deterministic). Launchers only queue work.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels.h"
#include "backend/cuda/layout.h"

namespace dlperf::cuda {

struct BatchnormShape {
  int64_t n = 0, channels = 0, hw = 0;  ///< batch, channels, pixels per map (H * W)
  Layout layout = Layout::nchw;
  /// Offset of channel c's first element (sample 0, pixel 0).
  DLPERF_HD int64_t first(int64_t c) const { return layout == Layout::nchw ? c * hw : c; }
};

/// One layer's parameters and statistics (fp32 device arrays of `channels`).
struct BatchnormParams {
  const float* gamma = nullptr;  ///< scale (the layer's weight)
  const float* beta = nullptr;   ///< shift (its bias)
  float* running_mean = nullptr;
  float* running_var = nullptr;
  float* batch_mean = nullptr;     ///< written by the training forward, read by backward
  float* batch_inv_std = nullptr;  ///< 1 / sqrt(biased variance + eps), likewise
  float eps = 1e-5f, momentum = 0.1f;
  bool relu = false;  ///< a relu follows, fused: y = max(0, bn(x)), and backward masks by y > 0
  /// With the fused relu, optionally: the training forward writes each channel's scale in y =
  /// scale (x - mean) + beta here, and backward recomputes y from x with it, batch_mean and beta,
  /// as the forward rounded it, instead of reading y: the same mask from two tensors read instead
  /// of three (x and dy), in both of backward's passes. Null: backward reads y.
  float* fwd_scale = nullptr;
};

/// Training forward: batch statistics, running statistics, y. `workspace` holds
/// bn_workspace_bytes(n, channels, hw) bytes (bn_split.h).
void batchnorm_forward_train(DType t, const BatchnormShape& s, const BatchnormParams& p, const void* x, void* y, void* workspace,
                             cudaStream_t st);
/// Inference forward with the running statistics.
void batchnorm_forward_eval(DType t, const BatchnormShape& s, const BatchnormParams& p, const void* x, void* y, void* workspace,
                            cudaStream_t st);
/// Backward from the saved batch statistics: dgamma and dbeta (written, not added), and dx
/// unless it is null. `y` is the forward's output (read only for the fused relu's mask).
void batchnorm_backward(DType t, const BatchnormShape& s, const BatchnormParams& p, const void* x, const void* y, const void* dy,
                        void* dx, float* dgamma, float* dbeta, void* workspace, cudaStream_t st);

}  // namespace dlperf::cuda
