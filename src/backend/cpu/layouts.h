// What the CPU engine's layouts cost, for the memory model (plan/memory.cpp): oneDNN picks a
// weight layout per CPU and shape (on AVX-512, blocks that pad a linear layer's outputs to a
// multiple of 64), so the model asks it instead of copying its rules. Free of oneDNN's headers.
#pragma once

#include "core/tensor.h"

namespace dlperf::cpu {

struct WeightBytes {
  double master = 0;  ///< the fp32 master weights (their gradient and optimizer states take as much)
  double copy = 0;    ///< bf16: the copy the passes read; 0 in fp32
};

/// A linear layer's weights on input [N, features] `x`, with a bias, as this CPU's engine stores them.
WeightBytes linear_weight_bytes(const Dims& x, int64_t out_features, bool bf16);

}  // namespace dlperf::cpu
