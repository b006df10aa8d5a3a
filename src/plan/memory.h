// Memory a training run needs, predicted from the model graph before anything is allocated.
//
// Three models. `engine_memory` predicts dlperf's own CPU engine byte for byte: the buffers its
// network builds, each laid out as oneDNN lays it out on this CPU (cpu::engine_buffers) and
// counted as the allocator books it (every buffer is allocated once, at start, so the peak is
// their sum); and
// `gpu_engine_memory` its GPU executor's (backend/cuda/network.cpp); `plan --against` checks
// them against the peaks run records measured. `analytic_memory` is the textbook model for
// any framework and device: bytes per parameter by precision and optimizer, ZeRO sharding, and
// activations with or without checkpointing.
#pragma once

#include <array>
#include <functional>
#include <string>

#include "backend/cuda/layout.h"  // CUDA-free
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

/// dlperf's CPU engine on this CPU (oneDNN picks other layouts on AVX2 and AVX-512) training `g`
/// (at its batch size) with `opt` and `workers` loader threads, in `precision` fp32 or bf16
/// (bf16 activations, fp32 master weights and their bf16 copies: network.h; bf16 needs oneDNN's
/// bf16 kernels here, cpu::has_bf16_kernels, else Error).
MemoryEstimate engine_memory(const nn::Graph& g, const nn::OptimizerConfig& opt, int workers,
                             const std::string& precision = "fp32");
/// The same, layer by layer: one row per graph node (a layer's parameters with their gradients
/// and optimizer states, its output and gradient, masks, the copies of its inputs it converts,
/// its workspace; gradient-sum temporaries go to the layer whose output several layers read),
/// and a last row for what no layer owns: the model input, the shared scratchpad, the loaders'
/// batches. engine_memory is their sum.
std::vector<MemoryEstimate> engine_memory_by_layer(const nn::Graph& g, const nn::OptimizerConfig& opt, int workers,
                                                   const std::string& precision = "fp32");

/// The largest batch size from 1 to `upto` at which `bytes` of the model `spec` on `chw` images
/// with `classes` classes is at most `cap` (a bisection: memory grows with the batch); 0 when not
/// even batch 1 fits. The advice `dlperf train` and `dlperf plan` give when a run does not fit.
int64_t largest_batch_within(const nn::ModelSpec& spec, const Dims& chw, int64_t classes, int64_t upto, double cap,
                             const std::function<double(const nn::Graph&)>& bytes);

/// dlperf's GPU executor (cuda::Network) training `g` with `optimizer` ("sgd" | "adamw") in
/// `precision` (fp32, tf32, bf16, fp16) and activation `layout` (auto, nchw, nhwc: --layout):
/// its allocations by category, without the convolutions' shared workspace (the largest any
/// algorithm cuDNN's timed search chose at run time needs: Network::conv_workspace_bytes, which
/// run records keep) and without the trainer's feed (gpu_feed_bytes).
/// Cuda.PlannedBytesMatchTheAllocations checks it against the allocator.
MemoryEstimate gpu_engine_memory(const nn::Graph& g, const std::string& optimizer, const std::string& precision,
                                 const std::string& layout = "auto");
/// How the GPU trainer feeds batches to `g` (train/gpu_trainer.cpp), for gpu_feed_bytes.
struct GpuFeed {
  bool data_on_device = false;  ///< --data-on-device
  bool pin_memory = true;       ///< --pin-memory on (with data from the host)
  int64_t train_images = 0, test_images = 0;  ///< with data_on_device: the sets it holds
};
/// The GPU trainer's device bytes beside the executor's (MemCategory::data), as the allocator
/// books them: with the dataset on the GPU, for each of the training and test sets its images
/// (a byte a pixel), a label byte and a 4-byte place in the epoch's order an image, and the
/// normalization's scale and shift per channel; else with pinned copies two staging slots of a
/// batch's fp32 images and int32 labels; pageable copies hold none.
double gpu_feed_bytes(const nn::Graph& g, const GpuFeed& feed);
/// Throws Error naming the first convolution of `g` too big for dlperf's GPU engine: cuDNN's
/// legacy convolution descriptors take 32-bit sizes, while its other layers (cuBLASLt, its own
/// kernels) index in 64 bits. cuda::Network checks it before allocating; the planner's GPU rows too.
void check_gpu_engine_indexes(const nn::Graph& g);
/// Device bytes of the GPU step's values (cuda::StepArgs; network.cpp asserts the size).
inline constexpr double kGpuStepArgsBytes = 40;

/// Whether the engine runs relu node i inside the batchnorm before it (network.cpp's rule: a
/// relu whose only input is a batchnorm that feeds nothing else).
bool relu_fused_into_batchnorm(const nn::Graph& g, size_t i);
/// Whether the GPU executor runs relu node i inside the linear layer before it (in its GEMM's
/// epilogue or its bias add, and its backward in the bias gradient's pass): a relu whose only
/// input is a linear that feeds nothing else. The CPU engine runs such a relu on its own.
bool relu_fused_into_linear(const nn::Graph& g, size_t i);
/// Whether both engines run relu node i inside the residual add before it (one pass adds and
/// clamps, and the add's backward applies the relu's mask as it hands the gradient to both
/// inputs): a relu whose only input is an add that feeds nothing else.
bool relu_fused_into_add(const nn::Graph& g, size_t i);
/// Whether the CPU engine runs relu node i inside the layer before it, a batchnorm or a residual
/// add (relu_fused_into_batchnorm, relu_fused_into_add): such a relu runs no pass and holds no
/// buffer of its own; it shares the layer's output and gradient.
bool relu_fused_on_cpu(const nn::Graph& g, size_t i);
/// For its scope, relu_fused_on_cpu leaves the relu after a residual add on its own, as the CPU
/// engine ran it before 2026-11-29: `plan --against` plans the runs recorded then (their records
/// lack cpu_step.add_relu_fused) as they ran, their memory and step time. Not nested.
class ScopedReluAfterAddApart {
 public:
  ScopedReluAfterAddApart();
  ~ScopedReluAfterAddApart();
  ScopedReluAfterAddApart(const ScopedReluAfterAddApart&) = delete;
  ScopedReluAfterAddApart& operator=(const ScopedReluAfterAddApart&) = delete;
};

/// Whether the GPU executor's flatten node i, of maps NHWC stores differently from NCHW, is a view
/// all the same: when its one reader is a linear layer, whose weight columns are then kept in the
/// maps' (h, w, c) order on the GPU, as a conv's weights are kept [K, R, S, C], so the features
/// need no transpose either way (host copies and checkpoints stay in the CPU engine's order).
bool flatten_folds_into_linear(const nn::Graph& g, size_t i, cuda::Layout stored);

/// Whether the GPU executor's node i is a view, its value and gradient its input's buffers: a
/// relu fused into the layer before it (the three rules above), or a flatten of maps NHWC stores
/// no differently or folded into its linear layer.
bool view_on_gpu(const nn::Graph& g, size_t i, cuda::Layout stored);
/// Whether the GPU executor's convolution node i adds its input gradient into the one a later
/// reader of its input (or of a view of it) has written, in its backward-data pass (cuDNN's
/// beta = 1), rather than writing it: the pass then reads that gradient too, and no gradient-sum
/// pass follows.
bool conv_adds_to_input_gradient_on_gpu(const nn::Graph& g, size_t i, cuda::Layout stored);

/// Whether the CPU engine's flatten node i is a view of its input's bytes rather than a copy:
/// when it reads a plain value, the model input or a 2-D one (the latter read by nothing else, so
/// that its gradient can be shared too). Its input gradient then has its own buffer only where it
/// reads the model input (which has none).
bool flatten_is_a_view_on_cpu(const nn::Graph& g, size_t i);

/// Optimizer state floats per parameter: SGD with momentum 1, without 0; AdamW 2.
double optimizer_states(const nn::OptimizerConfig& opt);

}  // namespace dlperf::plan
