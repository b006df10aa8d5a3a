// Models: a JSON spec (a list of layers) and the graph it resolves to for a given input.
//
// Spec format (docs/model-spec.md): {"name": ..., "description": ..., "layers": [ {"type":
// "conv2d", "out_channels": 32, "kernel": 3, "padding": 1}, ... ]}. Each layer reads the
// previous layer's output unless it names another with "input"; "add" sums its input with the
// layer named in "from". Input channels and linear in-features are inferred, so one spec
// serves 1x28x28 and 3x32x32 data; "out_features": "classes" takes the dataset's class count.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "ops/op.h"

namespace dlperf::nn {

struct LayerSpec {
  std::string name;
  ops::OpKind kind{};
  ops::OpAttrs attrs;
  std::string input;          ///< producer's name; empty = the previous layer
  std::string from;           ///< add: the other operand
  bool out_is_classes = false;  ///< linear: out_features = dataset classes
};

struct ModelSpec {
  std::string name;
  std::string description;
  std::vector<LayerSpec> layers;
  /// The image shape (C, H, W) and class count the model is made for, where its spec says
  /// ("input", "classes"): what 'dlperf models show' and 'dlperf plan' take unless --input or
  /// --classes say otherwise (resnet18-imagenet: 3x224x224, 1000). Empty / 0: none; training
  /// always takes its data's.
  Dims input;
  int64_t classes = 0;
  /// The training set's size the model is made for ("train_images"; resnet18-imagenet:
  /// ImageNet's 1,281,167): what 'dlperf plan' counts an epoch in unless --dataset-size says
  /// otherwise. 0: none (plan takes Fashion-MNIST's 60,000).
  int64_t train_images = 0;
};

/// Parses and validates a spec; `source` names it in errors (a path or preset name).
ModelSpec parse_model_spec(const nlohmann::json& j, const std::string& source);
/// A preset name ("medium") or a path to a .json spec file.
ModelSpec load_model(const std::string& name_or_path);
std::vector<std::string> preset_names();

/// One resolved node: its inputs (indices of earlier nodes; -1 = the model input), shapes,
/// parameters and cost, all at the graph's batch size.
struct Node {
  std::string name;
  ops::OpKind kind{};
  ops::OpAttrs attrs;
  std::vector<int> inputs;
  std::vector<Dims> in_dims;
  Dims out_dims;
  std::vector<ops::ParamShape> params;
  /// Whether anything needs the gradient of this node's input: not where it reads the model
  /// input, directly or through a flatten (both engines skip that backward-data pass).
  bool needs_dx = true;
  ops::OpCost cost;  ///< cost_at(4): fp32
  /// The op's cost with `elem_bytes`-byte activations; without backward-data unless needs_dx.
  ops::OpCost cost_at(double elem_bytes) const;
  int64_t param_count() const;
};

struct Graph {
  std::string model;
  Dims input;  ///< N, C, H, W
  int64_t classes = 0;
  std::vector<Node> nodes;
  int64_t batch() const { return input[0]; }
  int64_t param_count() const;
  double forward_flops() const;
  double backward_flops() const;
  double activation_bytes() const;  ///< sum of op outputs
  /// Indices of the nodes reading node i's output.
  std::vector<int> consumers(int i) const;
};

/// Resolves `spec` for input [batch, C, H, W] and `classes` classes. Throws Error naming the
/// layer whose shapes do not fit.
Graph build_graph(const ModelSpec& spec, const Dims& chw, int64_t classes, int64_t batch);

/// Throws Error unless each tensor of `n` (its inputs, output and weights, the batch included)
/// holds at most kMaxIndexedValues: what an engine that indexes with 32-bit integers can take.
/// `engine` names it in the message ("the CPU engine (oneDNN)"). The graph does not check this
/// itself, so the planner can still answer for a GPU whether a model with a larger tensor fits.
void check_indexable(const Node& n, const std::string& engine);

/// The resolved spec: every layer with its inferred in_channels / in_features and input names.
nlohmann::json resolved_json(const ModelSpec& spec, const Graph& g);

}  // namespace dlperf::nn
