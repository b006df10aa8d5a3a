#include "plan/memory.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/layouts.h"    // oneDNN-free: the CPU engine's buffers, laid out by oneDNN
#include "backend/cuda/bn_split.h"  // CUDA-free: the GPU batchnorm kernels' workspace
#include "backend/cuda/layout.h"    // CUDA-free: which layout the GPU executor stores activations in
#include "core/memory.h"
#include "data/loader.h"

namespace dlperf::plan {

bool relu_fused_into_batchnorm(const nn::Graph& g, size_t i) {
  const nn::Node& n = g.nodes[i];
  return n.kind == ops::OpKind::relu && n.inputs[0] >= 0 && g.nodes[size_t(n.inputs[0])].kind == ops::OpKind::batchnorm2d &&
         g.consumers(n.inputs[0]).size() == 1;
}

bool relu_fused_into_linear(const nn::Graph& g, size_t i) {
  const nn::Node& n = g.nodes[i];
  return n.kind == ops::OpKind::relu && n.inputs[0] >= 0 && g.nodes[size_t(n.inputs[0])].kind == ops::OpKind::linear &&
         g.consumers(n.inputs[0]).size() == 1;
}

bool relu_fused_into_add(const nn::Graph& g, size_t i) {
  const nn::Node& n = g.nodes[i];
  return n.kind == ops::OpKind::relu && n.inputs[0] >= 0 && g.nodes[size_t(n.inputs[0])].kind == ops::OpKind::add &&
         g.consumers(n.inputs[0]).size() == 1;
}

namespace {
bool relu_after_add_apart = false;  // ScopedReluAfterAddApart's
}  // namespace

bool relu_fused_on_cpu(const nn::Graph& g, size_t i) {
  return relu_fused_into_batchnorm(g, i) || (!relu_after_add_apart && relu_fused_into_add(g, i));
}

ScopedReluAfterAddApart::ScopedReluAfterAddApart() { relu_after_add_apart = true; }
ScopedReluAfterAddApart::~ScopedReluAfterAddApart() { relu_after_add_apart = false; }

bool flatten_folds_into_linear(const nn::Graph& g, size_t i, cuda::Layout stored) {
  const nn::Node& n = g.nodes[i];
  if (n.kind != ops::OpKind::flatten || !cuda::stored_differently(stored, n.in_dims[0])) return false;
  const std::vector<int> readers = g.consumers(int(i));
  return readers.size() == 1 && g.nodes[size_t(readers[0])].kind == ops::OpKind::linear;
}

bool view_on_gpu(const nn::Graph& g, size_t i, cuda::Layout stored) {
  const nn::Node& n = g.nodes[i];
  return relu_fused_into_batchnorm(g, i) || relu_fused_into_linear(g, i) || relu_fused_into_add(g, i) ||
         (n.kind == ops::OpKind::flatten &&
          (!cuda::stored_differently(stored, n.in_dims[0]) || flatten_folds_into_linear(g, i, stored)));
}

bool conv_adds_to_input_gradient_on_gpu(const nn::Graph& g, size_t i, cuda::Layout stored) {
  const nn::Node& n = g.nodes[i];
  if (n.kind != ops::OpKind::conv2d || !n.needs_dx || n.inputs[0] < 0) return false;
  // Each value's gradient buffer, by the node that owns it (-1: the model input's, which has none).
  std::vector<int> buffer(g.nodes.size());
  for (size_t j = 0; j < g.nodes.size(); ++j) {
    const int in = g.nodes[j].inputs[0];
    buffer[j] = !view_on_gpu(g, j, stored) ? int(j) : in < 0 ? -1 : buffer[size_t(in)];
  }
  // Backward runs in reverse: a later reader of the same buffer has written it by then.
  const int mine = buffer[size_t(n.inputs[0])];
  for (size_t j = i + 1; j < g.nodes.size(); ++j)
    for (const int v : g.nodes[j].inputs)
      if (v >= 0 && buffer[size_t(v)] == mine) return true;
  return false;
}

bool flatten_is_a_view_on_cpu(const nn::Graph& g, size_t i) {
  const nn::Node& n = g.nodes[i];
  if (n.kind != ops::OpKind::flatten) return false;
  const int in = n.inputs[0];
  return in < 0 || (n.in_dims[0].size() == 2 && g.consumers(in).size() == 1);
}

double optimizer_states(const nn::OptimizerConfig& opt) {
  if (opt.name == "adamw") return 2;
  return opt.momentum != 0 ? 1 : 0;
}

void check_gpu_engine_indexes(const nn::Graph& g) {
  for (const auto& n : g.nodes)
    if (n.kind == ops::OpKind::conv2d) nn::check_indexable(n, "cuDNN's convolution");
}

// Mirrors the GPU trainer's feed (train/gpu_trainer.cpp: PinnedUploader, DeviceDataset).
double gpu_feed_bytes(const nn::Graph& g, const GpuFeed& feed) {
  auto block = [](double bytes) { return double(CachingAllocator::block_bytes(size_t(std::max(bytes, 1.0)))); };
  const double channels = double(g.input[1]), pixels = double(numel(g.input) / g.batch());
  if (feed.data_on_device) {
    double sum = 0;
    for (const double n : {double(feed.train_images), double(feed.test_images)})
      sum += block(n * pixels) + block(n) + block(4 * n) + block(8 * channels);
    return sum;
  }
  return feed.pin_memory ? 2 * block(4 * double(numel(g.input)) + 4 * double(g.batch())) : 0;
}

// Mirrors cuda::Network's constructor (backend/cuda/network.cpp), buffer by buffer.
MemoryEstimate gpu_engine_memory(const nn::Graph& g, const std::string& optimizer, const std::string& precision,
                                 const std::string& layout) {
  MemoryEstimate m;
  // A buffer, as the caching allocator books it (CachingAllocator::block_bytes).
  auto add = [&](MemCategory c, double bytes) { m[c] += double(CachingAllocator::block_bytes(size_t(std::max(bytes, 1.0)))); };
  const bool mixed = precision == "bf16" || precision == "fp16";
  const cuda::Layout stored = cuda::resolve_layout(layout, precision);
  const bool nhwc = stored == cuda::Layout::nhwc;
  // NHWC moves multi-channel maps: the input gets its own copy, and so does a flatten's output.
  auto moves = [&](const Dims& d) { return cuda::stored_differently(stored, d); };
  const double es = mixed ? 2 : 4;
  auto padded = [](int64_t n) { return double((n + 63) / 64 * 64); };  // 256-byte aligned tensors
  double params = 0, conv_weights = 0, matmul_weights = 0;
  for (const auto& n : g.nodes)
    for (size_t i = 0; i < n.params.size(); ++i) {
      const double p = padded(numel(n.params[i].dims));
      params += p;
      if (i == 0 && n.kind == ops::OpKind::conv2d) conv_weights += p;
      if (i == 0 && (n.kind == ops::OpKind::conv2d || n.kind == ops::OpKind::linear)) matmul_weights += p;
    }
  add(MemCategory::parameters, 4 * params);
  add(MemCategory::gradients, 4 * params);
  add(MemCategory::optimizer_state, 4 * params);
  if (optimizer == "adamw") add(MemCategory::optimizer_state, 4 * params);
  if (mixed) {  // half copies of the conv and linear weights, half conv weight gradients, fp32 logits
    add(MemCategory::parameters, es * matmul_weights);
    add(MemCategory::gradients, es * conv_weights);
    add(MemCategory::workspace, 4 * double(numel(g.nodes.back().out_dims)));
  }
  if (mixed || moves(g.input)) add(MemCategory::data, es * double(numel(g.input)));  // the input in the step's type and layout
  if (precision == "fp16") add(MemCategory::workspace, 24);  // the loss scale's state
  add(MemCategory::data, 4 * double(numel(g.input)));       // the fp32 input the loaders fill
  add(MemCategory::data, 4 * double(g.batch()));            // labels
  for (double bytes : {8.0, 4.0, kGpuStepArgsBytes}) add(MemCategory::workspace, bytes);  // loss sum, correct count, step values
  double biggest = 0, bn_workspace = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const nn::Node& n = g.nodes[i];
    biggest = std::max(biggest, double(numel(n.in_dims[0])));
    const double out = double(numel(n.out_dims));
    // A value and its gradient; flatten is a view (unless NHWC moves its maps for a reader other
    // than a linear layer), and a relu fused into its batchnorm, linear layer or add shares that layer's.
    if (!view_on_gpu(g, i, stored)) {
      add(MemCategory::activations, es * out);
      add(MemCategory::activations, es * out);
    }
    if (n.kind == ops::OpKind::batchnorm2d) {
      const Dims& x = n.in_dims[0];
      for (int k = 0; k < 2; ++k) add(MemCategory::parameters, 4 * double(x[1]));   // running statistics
      for (int k = 0; k < 2; ++k) add(MemCategory::activations, 4 * double(x[1]));  // saved mean, inverse std
      const std::vector<int> readers = g.consumers(int(i));
      if (readers.size() == 1 && relu_fused_into_batchnorm(g, size_t(readers[0])))
        add(MemCategory::activations, 4 * double(x[1]));  // y's scales, for the relu's mask
      bn_workspace = std::max(bn_workspace, double(cuda::bn_workspace_bytes(x[0], x[1], x[2] * x[3], nhwc)));
    }
    if (n.kind == ops::OpKind::dropout) add(MemCategory::activations, 4 * std::floor((out + 3) / 4));  // byte masks
    if (n.kind == ops::OpKind::linear) add(MemCategory::workspace, 3.0 * double(size_t(4) << 20));   // three cuBLASLt workspaces
    if (n.kind == ops::OpKind::conv2d && cuda::weight_grad_in_nchw(stored, n.in_dims[0]) && n.in_dims[0][1] > 1) {
      const Dims& x = n.in_dims[0];  // its weight gradient's input moved to NCHW, and the gradient before it is moved back
      add(MemCategory::workspace, es * double(numel(x)));
      add(MemCategory::workspace, es * double(n.attrs.out_channels * x[1] * n.attrs.kernel * n.attrs.kernel));
    }
  }
  add(MemCategory::workspace, es * biggest);  // the backward scratch buffer
  if (bn_workspace > 0) add(MemCategory::workspace, bn_workspace);  // the batchnorm kernels' partial sums
  return m;
}

// Every buffer the engine allocates (cpu::engine_buffers, which asks oneDNN for each layout),
// counted as the allocator books it (CachingAllocator::block_bytes rounds blocks up).
std::vector<MemoryEstimate> engine_memory_by_layer(const nn::Graph& g, const nn::OptimizerConfig& opt, int workers,
                                                   const std::string& precision) {
  std::vector<MemoryEstimate> m(g.nodes.size() + 1);
  auto block = [](double bytes) { return double(CachingAllocator::block_bytes(size_t(bytes))); };
  auto row = [&](int node) -> MemoryEstimate& { return m[node < 0 ? g.nodes.size() : size_t(node)]; };
  const cpu::EngineBuffers engine = cpu::engine_buffers(g, precision);
  const double states = optimizer_states(opt);
  for (const auto& p : engine.params) {  // a parameter tensor's value, gradient and optimizer states
    row(p.node)[MemCategory::parameters] += block(p.bytes);
    row(p.node)[MemCategory::gradients] += block(p.bytes);
    row(p.node)[MemCategory::optimizer_state] += states * block(p.bytes);
  }
  for (const auto& b : engine.buffers) row(b.node)[b.category] += block(b.bytes);
  MemoryEstimate& shared = m.back();
  if (engine.scratchpad > 0) shared[MemCategory::workspace] += block(engine.scratchpad);
  // The train and test loaders each hold data::loader_slots batches.
  const double batch_bytes = double(numel(g.input)) * 4;
  shared[MemCategory::data] = 2 * data::loader_slots(workers, batch_bytes) * block(batch_bytes);
  return m;
}

int64_t largest_batch_within(const nn::ModelSpec& spec, const Dims& chw, int64_t classes, int64_t upto, double cap,
                             const std::function<double(const nn::Graph&)>& bytes) {
  int64_t lo = 0, hi = upto;  // lo fits (0 trivially), everything above hi does not
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (bytes(nn::build_graph(spec, chw, classes, mid)) <= cap) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

MemoryEstimate engine_memory(const nn::Graph& g, const nn::OptimizerConfig& opt, int workers, const std::string& precision) {
  MemoryEstimate sum;
  for (const MemoryEstimate& layer : engine_memory_by_layer(g, opt, workers, precision))
    for (size_t c = 0; c < kMemCategories; ++c) sum.bytes[c] += layer.bytes[c];
  return sum;
}

}  // namespace dlperf::plan
