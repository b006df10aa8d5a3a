// Runs a resolved model graph on the CPU: forward, loss, backward, with activations in
// oneDNN's chosen layouts and a reorder only where a consumer wants another layout.
//
// Built once for one batch size (the training batch); evaluation reuses it and pads a last,
// partial batch. Where a batchnorm2d feeds only a relu, the relu runs inside the batchnorm.
// In bf16 (`precision`, on CPUs with AVX512-BF16) convolutions and linear layers compute in bf16
// (the ops PyTorch's CPU autocast runs in bf16) and write bf16, which the ops between them
// (batchnorm, relu, pooling, add) take and write as autocast hands them on; activations and their
// gradients are bf16 from the first convolution to the logits, which are fp32. Master weights,
// their gradients and batchnorm's statistics are fp32.
#pragma once

#include <memory>
#include <vector>

#include "backend/cpu/ops.h"
#include "nn/graph.h"

namespace dlperf::cpu {

/// Seconds spent in one node's passes, when timing is on.
struct NodeTime {
  double forward_s = 0;
  double backward_s = 0;
  int64_t forward_calls = 0;
  int64_t backward_calls = 0;
};

class Network {
 public:
  /// `seed` drives parameter init and dropout masks; `precision` is "fp32" or "bf16" (or, in
  /// tests, "f32-copies": see Compute). `fuse`: a relu runs inside the batchnorm or residual add
  /// before it where plan::relu_fused_on_cpu says so (false runs every relu on its own; the
  /// memory planner, layouts.cpp, counts the fused network's buffers).
  Network(const nn::Graph& graph, uint64_t seed, bool fuse = true, const std::string& precision = "fp32");
  ~Network();

  const nn::Graph& graph() const { return graph_; }
  bool bf16() const { return compute_ == Compute::bf16; }
  int64_t batch() const { return graph_.batch(); }
  /// The plain NCHW input the caller fills before forward().
  float* input() { return input_.f32(); }
  /// Plain [batch, classes] logits after forward().
  const float* logits() const;

  void forward(bool training);
  /// Loss over rows [0, valid); with `grad`, also writes the logits' gradient for backward().
  LossResult loss(const int32_t* labels, int64_t valid, double smoothing, bool grad);
  void backward();

  std::vector<Param*> params();
  std::vector<std::pair<std::string, Mem*>> buffers();
  /// The name of the node that runs node i ("bn1+relu1" when fused), empty if fused away.
  std::string step_name(int node) const;
  /// The layers whose op runs `algorithm` (Op::algorithm), by name, in graph order.
  std::vector<std::string> layers_running(const std::string& algorithm) const;
  /// The convolutions that run as Winograd (cpu::conv_runs_winograd).
  std::vector<std::string> winograd_layers() const { return layers_running("winograd"); }
  /// The bf16 convolutions and linear layers whose forward pass runs on AMX tiles (Op::algorithm).
  std::vector<std::string> amx_layers() const { return layers_running("amx"); }
  /// The layers too small to share between the threads, which run on one (small_layers.h), by
  /// name, in graph order; none on one thread.
  std::vector<std::string> one_thread_layers() const;
  /// The convolutions with passes that run as matrix products (Op::matrix_product_passes), by
  /// name, in graph order, with those passes ("backward-data, backward-weights").
  std::vector<std::pair<std::string, std::string>> matrix_product_layers() const;

  void set_timing(bool on) { timing_ = on; }
  const std::vector<NodeTime>& node_times() const { return times_; }
  void reset_times();

 private:
  struct Link;
  struct Step;
  void init_params(uint64_t seed);
  nn::Graph graph_;
  std::vector<Step> steps_;
  std::vector<int> value_of_;  // node -> value index (0 = model input)
  std::vector<Mem> act_, diff_;
  Mem input_;
  Compute compute_ = Compute::fp32;
  bool timing_ = false;
  std::vector<NodeTime> times_;
};

}  // namespace dlperf::cpu
