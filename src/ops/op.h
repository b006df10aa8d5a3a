// Device-independent op descriptions: attributes, shape inference and cost.
//
// Every op knows its FLOPs and the minimum bytes it must move for forward, backward-data and
// backward-weight, and the bytes it keeps from forward for backward. The engine runs ops, the
// profiler divides measured time by these counts, and the planner predicts from them; all three
// count the same things. Shapes are logical (NCHW or NC), whatever layout a backend uses.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace dlperf::ops {

enum class OpKind {
  conv2d,
  batchnorm2d,
  relu,
  maxpool2d,
  avgpool2d,
  global_avgpool,
  linear,
  flatten,
  add,
  dropout,
  softmax_cross_entropy,
};
std::string_view to_string(OpKind k);

/// Attributes of one op; each kind reads the fields it needs.
struct OpAttrs {
  int64_t out_channels = 0;  ///< conv2d
  int64_t kernel = 0;        ///< conv2d, pools
  int64_t stride = 1;        ///< conv2d, pools
  int64_t padding = 0;       ///< conv2d, pools
  int64_t out_features = 0;  ///< linear
  bool bias = true;          ///< conv2d, linear
  double p = 0.5;            ///< dropout probability
  double eps = 1e-5;         ///< batchnorm2d
  double momentum = 0.1;     ///< batchnorm2d running-stat update (PyTorch's convention)
  double label_smoothing = 0.0;  ///< softmax_cross_entropy
};

/// FLOPs and minimum bytes moved by one pass of an op.
struct PassCost {
  double flops = 0;
  double bytes = 0;
  /// Of `flops`, the multiply-adds whose input tap lies on a convolution's zero padding. They
  /// are counted, as PyTorch's and fvcore's FLOP counters count them (so a model's total reads
  /// as users know it: 3.65 GFLOP forward for ResNet-18 at 224x224), but oneDNN's convolutions
  /// skip them: what a CPU pass runs against its FMA peak is flops - padding_flops. 16% of a
  /// 3x3 convolution's on 8x8, 31% on 4x4.
  double padding_flops = 0;
  PassCost& operator+=(const PassCost& o) {
    flops += o.flops, bytes += o.bytes, padding_flops += o.padding_flops;
    return *this;
  }
};

struct OpCost {
  PassCost forward;
  PassCost backward_data;
  PassCost backward_weight;  ///< zero for ops without parameters
  double saved_bytes = 0;    ///< kept from forward for backward (training only)
  double output_bytes = 0;   ///< the activation this op produces
  PassCost total_backward() const { return PassCost(backward_data) += backward_weight; }
};

/// A learnable tensor of an op, in its logical (plain) shape.
struct ParamShape {
  std::string name;  ///< "weight", "bias"
  Dims dims;
};

/// Output shape of `kind` for the given input shapes (batch included). Throws Error with the
/// reason when the shapes do not fit; the caller adds the layer's name.
Dims infer_shape(OpKind kind, const OpAttrs& a, const std::vector<Dims>& inputs);

/// Parameters `kind` owns for this input shape (conv weight OIHW, linear weight OI, bn
/// weight/bias C). Batchnorm running statistics are state, not parameters, and are not listed.
std::vector<ParamShape> param_shapes(OpKind kind, const OpAttrs& a, const Dims& input);

/// Cost of `kind` with these input shapes, for elements of `elem_bytes` bytes.
OpCost cost(OpKind kind, const OpAttrs& a, const std::vector<Dims>& inputs, double elem_bytes = 4);

/// Output size of a convolution or pooling window along one axis.
inline int64_t window_out(int64_t in, int64_t kernel, int64_t stride, int64_t pad) {
  const int64_t span = in + 2 * pad - kernel;  // where the last window may start
  // A window wider than its padded input fits nowhere: C++ division truncates toward zero, and
  // span / stride + 1 would then call a 2x2 pooling of a 1x1 input 1x1.
  return span < 0 ? 0 : span / stride + 1;
}

/// Of a convolution's multiply-adds on an `in_dims` (NCHW) input, the share whose input tap lies
/// inside the image rather than on its zero padding: 1 without padding.
double conv_taps_on_data_share(const OpAttrs& a, const Dims& in_dims);

/// A pooling of 2x2 windows at stride 2 without padding (every preset's): windows that never
/// overlap, which the CPU engine's max pooling has code of its own for (and the plan its figures).
inline bool pools_2x2_stride_2(const OpAttrs& a) { return a.kernel == 2 && a.stride == 2 && a.padding == 0; }

}  // namespace dlperf::ops
