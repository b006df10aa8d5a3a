// What the Network's three source files share: a layer's state and the profiler's span.
// network.cpp builds the network and copies to and from the host; network_step.cpp queues the
// training step (forward, loss, backward, the update, its CUDA graph); network_profile.cpp
// stamps that step's passes with the GPU's clock for `dlperf profile`.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/batchnorm.h"
#include "backend/cuda/conv.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/network.h"
#include "backend/cuda/pool_index.h"

namespace dlperf::cuda {

struct Network::Layer {
  const nn::Node* node = nullptr;
  std::vector<int> in;  // input values
  int out = 0;
  float *w = nullptr, *b = nullptr, *dw = nullptr, *db = nullptr;  // fp32 master values and gradients
  void* wh = nullptr;   // the weight the conv or GEMM reads: its half copy in mixed precision, else w
  void* dwh = nullptr;  // a conv's half weight gradient in mixed precision, else dw
  std::unique_ptr<CudnnConv> conv;
  ConvShape shape;                         // a convolution's
  bool small = false;                      // small_conv_fits: the own kernels may run it (--small-conv)
  bool own_forward = false, own_weight_grad = false;  // they do, for these passes
  std::string own_times;                   // what choose_small_convs measured, for conv_algorithms
  std::unique_ptr<CudnnConv> weight_grad_nchw;  // NHWC with under 8 input channels: the weight gradient in NCHW (set_up_op)
  void *x_nchw = nullptr, *dw_nchw = nullptr;   // with over one: its input in NCHW, and the gradient [K, C, R, S] it writes
  std::unique_ptr<LtGemm> fwd, bwd_data, bwd_weight;
  BatchnormShape bn_shape;
  BatchnormParams bn;  // batchnorm: its parameters and statistics (bn.relu: the next relu runs inside it)
  bool fused_away = false;  // a relu that runs inside the batchnorm or linear layer before it
  bool relu_after = false;  // a linear layer or add that runs the relu after it (GEMM epilogue, bias add, the add's pass)
  bool view = false;        // a flatten that moves nothing (or a fused relu): shares its input's buffers
  PoolShape pool;
  uint8_t* mask = nullptr;
  uint64_t seed = 0;
  std::string name;           // the span and NVTX name: the node's, "bn1+relu1" when a relu is fused in
  std::string backward_name;  // the NVTX range of its backward pass
};

// While profiling, a stamp of the GPU's clock before and after the work queued in its lifetime;
// nothing otherwise.
class Network::Span {
 public:
  /// A layer's pass.
  Span(Network& net, const std::string& name, ops::OpKind kind, profile::Phase phase, int node) : net_(net) {
    if (net.profiling_) index_ = net.begin_span(name, std::string(ops::to_string(kind)), phase, node);
  }
  /// The loss or the update.
  Span(Network& net, const char* name, profile::Phase phase) : net_(net) {
    if (net.profiling_) index_ = net.begin_span(name, "", phase, -1);
  }
  ~Span() {
    if (index_ != kNone) net_.end_span(index_);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  static constexpr size_t kNone = ~size_t(0);
  Network& net_;
  size_t index_ = kNone;
};

}  // namespace dlperf::cuda
