// GPT-style decoder-only Transformers by size, and the standard formulas for their training
// cost: parameters (12 L h^2 + 13 L h + V h + S h), training FLOPs (6 N per token plus the
// attention scores' 12 L S h; Kaplan et al. 2020, Narayanan et al. 2021), model-state bytes per
// parameter by precision and optimizer (Rajbhandari et al. 2020, ZeRO), and activation bytes
// per layer with and without recomputation (Korthikanti et al. 2022).
#pragma once

#include <string>
#include <vector>

namespace dlperf::plan {

struct TransformerSpec {
  std::string name;
  int64_t layers = 12, hidden = 768, heads = 12, seq = 1024, vocab = 50257;
};

/// gpt2-small, gpt2-medium, gpt2-large, gpt2-xl, gpt3-1.3b, gpt3-6.7b, gpt3-13b, gpt3-175b, or
/// "L,H,A,S,V" (layers, hidden, heads, sequence, vocabulary). Throws Error otherwise.
TransformerSpec transformer(const std::string& name_or_sizes);
/// The known sizes, smallest first.
std::vector<std::string> transformer_names();

double transformer_params(const TransformerSpec& t);
/// Training FLOPs per token: 6 N + 12 L S h (forward and backward; no recomputation).
double transformer_train_flops_per_token(const TransformerSpec& t);

/// Parallel layout and memory-saving choices.
struct Layout {
  int64_t dp = 1, tp = 1, pp = 1;  ///< data, tensor, pipeline degrees
  /// Model chunks a pipeline device holds (Megatron's interleaved 1F1B schedule, its
  /// --num-layers-per-virtual-pipeline-stage): 1 = plain 1F1B, one run of L/pp layers a device.
  int64_t vp = 1;
  int zero = 0;                    ///< ZeRO stage 0-3 (sharding over dp)
  std::string checkpointing = "none";  ///< none | selective | full
};

/// Model-state bytes per parameter before sharding: weights + gradients + optimizer states.
struct StateBytes {
  double weights = 0, gradients = 0, optimizer = 0;
  double total() const { return weights + gradients + optimizer; }
};
/// `precision` fp32|tf32|bf16|fp16 (mixed precision keeps fp32 master weights in the
/// optimizer's share; bf16 fp32 gradients, as Megatron-LM; fp16 fp16 ones); `optimizer` adamw|sgd
/// (momentum).
StateBytes state_bytes_per_param(const std::string& precision, const std::string& optimizer);

/// Per-device bytes of a Transformer training step at `micro_batch` sequences per device, with
/// `micro_batches` micro-batches a pipeline in each step (global batch / (dp x micro_batch)).
struct DeviceMemory {
  double parameters = 0, gradients = 0, optimizer = 0, activations = 0, workspace = 0;
  double total() const { return parameters + gradients + optimizer + activations + workspace; }
};
DeviceMemory transformer_memory(const TransformerSpec& t, int64_t micro_batch, const std::string& precision,
                                const std::string& optimizer, const Layout& l, double micro_batches);

/// The pipeline's idle time in a step, as a fraction of its busy time, for m micro-batches:
/// (pp - 1) / (vp m) (Narayanan et al. 2021: interleaving vp chunks a device divides 1F1B's bubble
/// by vp), plus (vp - 1)(pp - m mod pp) / (vp m) where m is not a multiple of pp.
double pipeline_bubble(const Layout& l, double micro_batches);

/// The first pipeline stage's activations at their peak, in units of one micro-batch's through
/// all L layers: 1 with 1F1B (pp micro-batches of L/pp layers), 1 + (pp - 1)/(pp vp) interleaved
/// (Megatron-LM's theoretical_memory_usage.py), and at most m/pp for m micro-batches a step.
double activations_in_flight(const Layout& l, double micro_batches);

/// Extra forward FLOPs of recomputation, as a fraction of the no-recompute training FLOPs.
double recompute_overhead(const TransformerSpec& t, const std::string& checkpointing);

}  // namespace dlperf::plan
