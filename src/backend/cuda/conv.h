// 2-D convolution through cuDNN: forward, backward-data and backward-filter for one shape and
// precision, with each pass's algorithm chosen once per shape (cuDNN's timed search, as PyTorch's
// cudnn.benchmark, whose close candidates then run again on random data; cuDNN's heuristics where
// the search fails; within a workspace limit) and cached for the process. Layout NCHW or NHWC
// (what tensor cores want; bf16's and fp16's default).
// Square kernels, equal stride and padding both ways.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backend/cuda/gemm.h"

namespace dlperf::cuda {

struct ConvShape {
  int64_t n = 1, c = 1, h = 1, w = 1;  ///< input
  int64_t k = 1, r = 3;                ///< output channels, kernel size
  int64_t stride = 1, pad = 0;
  int64_t out_h() const { return (h + 2 * pad - r) / stride + 1; }
  int64_t out_w() const { return (w + 2 * pad - r) / stride + 1; }
  /// FLOPs of one forward pass (2 per multiply-add); backward-data and backward-filter match it.
  double flops() const { return 2.0 * double(n * k * out_h() * out_w()) * double(c * r * r); }
};

/// The most workspace a convolution's algorithms may use, unless told otherwise (--conv-workspace):
/// the fastest algorithm within it is taken. TensorFlow's cap (TF_CUDNN_WORKSPACE_LIMIT_IN_MB);
/// PyTorch's cudnn.benchmark allows whatever memory is free. It was 256 MB until an H100 showed
/// what that cost at batch 1024 in fp32: resnet18 trained at 10244 img/s within 256 MB and
/// 18167 within 4 GB, whose algorithms took 1.16 GB more (docs/gpu.md).
inline constexpr size_t kDefaultConvWorkspace = size_t(4096) << 20;

class CudnnConv {
 public:
  /// `p`: fp32, tf32, bf16 or fp16. `nhwc`: the tensors' layout (filters [K, R, S, C] then); by
  /// default NHWC for bf16 and fp16 (what tensor cores want), NCHW otherwise, as --layout auto.
  CudnnConv(const ConvShape& s, Precision p) : CudnnConv(s, p, p == Precision::bf16 || p == Precision::fp16) {}
  /// `own_workspace` false: the caller provides the workspace (set_workspace, workspace_bytes()
  /// bytes) before the first pass, so a network's convolutions, which run one at a time, share one.
  /// `deterministic`: only algorithms cuDNN reports as giving the same bits on every run (as
  /// PyTorch's torch.backends.cudnn.deterministic); some backward ones add up partial sums with
  /// atomics, in whatever order they arrive.
  /// `workspace_limit`: the most workspace bytes the chosen algorithms may need.
  CudnnConv(const ConvShape& s, Precision p, bool nhwc, bool own_workspace = true, bool deterministic = false,
            size_t workspace_limit = kDefaultConvWorkspace);
  ~CudnnConv();
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;

  void forward(const void* x, const void* w, void* y, cudaStream_t s);
  /// `add`: adds the input gradient into what `dx` holds (cuDNN's beta = 1, in the epilogue)
  /// instead of writing it, where another reader of the input has written its gradient already.
  void backward_data(const void* w, const void* dy, void* dx, cudaStream_t s, bool add = false);
  void backward_filter(const void* x, const void* dy, void* dw, cudaStream_t s);

  bool nhwc() const { return nhwc_; }
  /// Workspace the chosen algorithms need.
  size_t workspace_bytes() const { return workspace_bytes_; }
  /// Where the passes find their workspace (built without one of its own).
  void set_workspace(void* w);
  /// The algorithms chosen and their math types, for reports
  /// ("fwd 1/tensor-op, bwd-data 1/tensor-op, bwd-filter 3/default (timed search)"; ", deterministic" when asked;
  /// and any faster algorithm the timed search found that the workspace limit ruled out).
  std::string algorithms() const;

 private:
  ConvShape s_;
  Precision p_;
  bool nhwc_ = false;
  void* handle_ = nullptr;  // this thread's cuDNN handle for the device (shared, not owned)
  void *x_ = nullptr, *y_ = nullptr, *w_ = nullptr, *conv_ = nullptr;  // cuDNN descriptors
  int fwd_algo_ = 0, bwd_data_algo_ = 0, bwd_filter_algo_ = 0;
  int fwd_math_ = 0, bwd_data_math_ = 0, bwd_filter_math_ = 0;  // cudnnMathType_t of each pass's algorithm
  bool timed_ = true;  // chosen by cuDNN's timed search rather than its heuristics
  std::string over_limit_;  // faster algorithms the workspace limit ruled out (Algos::over_limit)
  std::string search_;      // the timed search's times for the ones taken (Algos::search)
  std::string overturned_;  // search winners that lost on data (Algos::overturned)
  bool deterministic_ = false;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  bool own_workspace_ = true;
  size_t workspace_limit_ = kDefaultConvWorkspace;
  int device_ = 0;
  void set_math(int math);
};

}  // namespace dlperf::cuda
