// PyTorch's golden training steps, for the CPU engine's and the GPU executor's tests:
// tests/golden/pytorch_steps.json, made by scripts/make_pytorch_golden.py (which says what the
// two small networks cover). The tests load PyTorch's initial weights, run the same three steps
// on the same batches, and compare losses, logits, gradients, weights and batchnorm statistics.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nn/graph.h"
#include "nn/optimizer.h"
#include "op_harness.h"

namespace dlperf::test {

inline nlohmann::json load_pytorch_golden() {
  const std::string path = std::string(DLPERF_SOURCE_DIR) + "/tests/golden/pytorch_steps.json";
  std::ifstream f(path);
  if (!f) ADD_FAILURE() << "cannot read " << path;
  return nlohmann::json::parse(f);
}

/// A golden case's network, resolved by dlperf for the file's input shape, classes and batch.
inline nn::Graph golden_graph(const nlohmann::json& golden, const nlohmann::json& c) {
  const auto in = golden.at("input").get<std::vector<int64_t>>();
  return nn::build_graph(nn::parse_model_spec(c.at("spec"), c.at("name").get<std::string>()), {in[0], in[1], in[2]},
                         golden.at("classes").get<int64_t>(), golden.at("batch").get<int64_t>());
}

inline nn::OptimizerConfig golden_optimizer(const nlohmann::json& o) {
  nn::OptimizerConfig c;
  c.name = o.at("name").get<std::string>();
  c.weight_decay = o.at("weight_decay").get<double>();
  if (c.name == "sgd") {
    c.momentum = o.at("momentum").get<double>();
    c.nesterov = o.at("nesterov").get<bool>();
  } else {
    c.beta1 = o.at("beta1").get<double>(), c.beta2 = o.at("beta2").get<double>(), c.eps = o.at("eps").get<double>();
  }
  return c;
}

/// The largest difference between `got` and PyTorch's `want`, relative to want's largest
/// magnitude (op_harness.h's rel_err): fp32 results that differ only in summation order come out
/// near 1e-6.
inline double golden_error(const std::vector<float>& got, const nlohmann::json& want) { return rel_err(got, want.get<Vec>()); }

}  // namespace dlperf::test
