// What the CPU engine's layouts cost, for the memory model (plan/memory.cpp): oneDNN picks a
// weight layout per CPU and shape (on AVX-512, blocks that pad a linear layer's outputs to a
// multiple of 64) and the scratchpad its kernels want, so the model asks it instead of copying
// its rules. Free of oneDNN's headers.
#pragma once

#include "core/tensor.h"

namespace dlperf::cpu {

struct LinearBytes {
  double master = 0;      ///< the fp32 master weights (their gradient and optimizer states take as much)
  double copy = 0;        ///< bf16: the copy the passes read; 0 in fp32
  double scratchpad = 0;  ///< the most any of its three passes asks for (the engine shares one)
};

/// A linear layer on input [N, features] `x`, with a bias, as this CPU's engine builds it.
LinearBytes linear_bytes(const Dims& x, int64_t out_features, bool bf16);

}  // namespace dlperf::cpu
