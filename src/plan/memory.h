// Memory a training run needs, predicted from the model graph before anything is allocated.
//
// Two models. `engine_memory` predicts dlperf's own CPU engine byte for byte by its allocation
// rules (every buffer is allocated once, at start, so the peak is their sum); `plan --against`
// checks it against the peaks run records measured. `analytic_memory` is the textbook model for
// any framework and device: bytes per parameter by precision and optimizer, ZeRO sharding, and
// activations with or without checkpointing.
#pragma once

#include <array>
#include <string>

#include "core/memory.h"
#include "nn/graph.h"
#include "nn/optimizer.h"

namespace dlperf::plan {

/// Bytes by category (core/memory.h's MemCategory order) and their sum.
struct MemoryEstimate {
  std::array<double, kMemCategories> bytes{};
  double total() const {
    double t = 0;
    for (double b : bytes) t += b;
    return t;
  }
  double& operator[](MemCategory c) { return bytes[size_t(c)]; }
  double operator[](MemCategory c) const { return bytes[size_t(c)]; }
};

/// dlperf's CPU engine training `g` (at its batch size) with `opt` and `workers` loader threads.
MemoryEstimate engine_memory(const nn::Graph& g, const nn::OptimizerConfig& opt, int workers);

/// Whether the engine runs relu node i inside the batchnorm before it (network.cpp's rule: a
/// relu whose only input is a batchnorm that feeds nothing else).
bool relu_fused_into_batchnorm(const nn::Graph& g, size_t i);

/// Optimizer state floats per parameter: SGD with momentum 1, without 0; AdamW 2.
double optimizer_states(const nn::OptimizerConfig& opt);

}  // namespace dlperf::plan
