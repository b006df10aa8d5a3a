#include "plan/memory.h"

#include <algorithm>
#include <cmath>

#include "backend/cuda/bn_split.h"  // CUDA-free: the GPU batchnorm kernels' workspace
#include "backend/cuda/layout.h"    // CUDA-free: which layout the GPU executor stores activations in
#include "backend/cpu/layouts.h"  // oneDNN-free: linear layers' padded weights and scratchpads
#include "hw/cpu_info.h"

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

namespace {
// oneDNN's blocked layouts (nChw8c) round channels up to a multiple of 8.
double padded_elems(const Dims& d) {
  if (d.size() != 4) return double(numel(d));
  return double(d[0]) * double((d[1] + 7) / 8 * 8) * double(d[2] * d[3]);
}

// Values in the layout of the first conv's output. On AVX2 a conv reading the model's few input
// channels writes a layout of its own (conv2d.cpp's candidate search); the layers after it keep
// that layout until the next conv, which wants the blocked one. On AVX-512 oneDNN writes the
// 16-channel blocks there too (seen with ONEDNN_VERBOSE on a Zen 4), so nothing is reordered.
std::vector<bool> first_layer_layout(const nn::Graph& g) {
  std::vector<bool> in(g.nodes.size(), false);
  if (hw::cpu_info().avx512f) return in;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const nn::Node& n = g.nodes[i];
    if (n.kind == ops::OpKind::conv2d) {
      in[i] = n.inputs[0] < 0 && n.in_dims[0][1] < 8;
    } else if (n.kind != ops::OpKind::linear && n.kind != ops::OpKind::flatten && n.inputs[0] >= 0) {
      in[i] = in[size_t(n.inputs[0])];
    }
  }
  return in;
}

// Whether layer i reorders an input: the first conv, or residual add, that meets a value still in
// the first conv's layout (once per model: after it, the reordered value's consumers agree).
bool reorders_input(const nn::Graph& g, size_t i, const std::vector<bool>& first_layer) {
  const nn::Node& n = g.nodes[i];
  if (n.kind != ops::OpKind::conv2d && n.kind != ops::OpKind::add) return false;
  bool meets = false, other = false;
  for (int in : n.inputs) (in >= 0 && first_layer[size_t(in)] ? meets : other) = true;
  if (!meets || (n.kind == ops::OpKind::add && !other)) return false;
  // Only the first such conv and the first such add.
  for (size_t j = 0; j < i; ++j)
    if (g.nodes[j].kind == n.kind) {
      bool earlier = false, earlier_other = false;
      for (int in : g.nodes[j].inputs) (in >= 0 && first_layer[size_t(in)] ? earlier : earlier_other) = true;
      if (earlier && (n.kind == ops::OpKind::conv2d || earlier_other)) return false;
    }
  return true;
}

}  // namespace

// Mirrors cuda::Network's constructor (backend/cuda/network.cpp); the caching allocator rounds
// each block up a little, which this ignores.
MemoryEstimate gpu_engine_memory(const nn::Graph& g, const std::string& optimizer, const std::string& precision,
                                 const std::string& layout) {
  MemoryEstimate m;
  auto add = [&](MemCategory c, double bytes) { m[c] += std::max(bytes, 4.0); };
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
  add(MemCategory::workspace, 8 + 4 + kGpuStepArgsBytes);   // loss sum, correct count, step values
  double biggest = 0, bn_workspace = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const nn::Node& n = g.nodes[i];
    biggest = std::max(biggest, double(numel(n.in_dims[0])));
    const double out = double(numel(n.out_dims));
    // A value and its gradient; flatten is a view (unless NHWC moves its maps), and a relu fused
    // into its batchnorm or linear layer shares that layer's.
    const bool view = relu_fused_into_batchnorm(g, i) || relu_fused_into_linear(g, i) ||
                      (n.kind == ops::OpKind::flatten && !moves(n.in_dims[0]));
    if (!view) {
      add(MemCategory::activations, es * out);
      add(MemCategory::activations, es * out);
    }
    if (n.kind == ops::OpKind::batchnorm2d) {
      const Dims& x = n.in_dims[0];
      for (int k = 0; k < 2; ++k) add(MemCategory::parameters, 4 * double(x[1]));   // running statistics
      for (int k = 0; k < 2; ++k) add(MemCategory::activations, 4 * double(x[1]));  // saved mean, inverse std
      bn_workspace = std::max(bn_workspace, double(cuda::bn_workspace_bytes(x[0], x[1], x[2] * x[3], nhwc)));
    }
    if (n.kind == ops::OpKind::dropout) add(MemCategory::activations, 4 * std::floor((out + 3) / 4));  // byte masks
    if (n.kind == ops::OpKind::linear) add(MemCategory::workspace, 3.0 * double(size_t(4) << 20));   // three cuBLASLt workspaces
  }
  add(MemCategory::workspace, es * biggest);  // the backward scratch buffer
  if (bn_workspace > 0) add(MemCategory::workspace, bn_workspace);  // the batchnorm kernels' partial sums
  return m;
}

ElementBytes engine_element_bytes(const nn::Graph& g, const std::string& precision) {
  const double low = precision == "bf16" ? 2 : 4;  // what conv and linear read and write
  ElementBytes b{std::vector<double>(g.nodes.size(), 4), std::vector<double>(g.nodes.size(), 4)};
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const nn::Node& n = g.nodes[i];
    const double in = n.inputs[0] < 0 ? 4 : b.value[size_t(n.inputs[0])];
    const bool computes = n.kind == ops::OpKind::conv2d || n.kind == ops::OpKind::linear;
    b.input[i] = computes ? low : n.kind == ops::OpKind::dropout ? 4 : in;
    b.value[i] = i + 1 == g.nodes.size() || n.kind == ops::OpKind::dropout ? 4 : computes ? low : in;
  }
  return b;
}

// The rules mirror backend/cpu/network.cpp and the ops' constructors; keep them in step.
MemoryEstimate engine_memory(const nn::Graph& g, const nn::OptimizerConfig& opt, int workers, const std::string& precision) {
  MemoryEstimate m;
  const double f = 4;  // f32
  const bool bf16 = precision == "bf16";
  const double params = double(g.param_count());
  m[MemCategory::parameters] = params * f;
  m[MemCategory::gradients] = params * f;
  m[MemCategory::optimizer_state] = params * f * optimizer_states(opt);

  const double low = bf16 ? 2 : f;  // bytes an element conv and linear read and write
  const ElementBytes elem = engine_element_bytes(g, precision);
  // bf16 runs on AVX-512 CPUs only, where nothing carries over from the first conv either.
  const std::vector<bool> first_layer = bf16 ? std::vector<bool>(g.nodes.size(), false) : first_layer_layout(g);
  double act = double(numel(g.input)) * f;  // the network's input buffer
  double workspace = 0;
  // The primitives share one scratchpad, the largest any asks for; the convolutions' is not
  // modelled (their layouts come from a search), so this is a floor.
  double scratchpad = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const nn::Node& n = g.nodes[i];
    const int in = n.inputs[0];
    const double in_elem = in < 0 ? f : elem.value[size_t(in)];
    if (relu_fused_into_batchnorm(g, i)) continue;  // shares the batchnorm's output
    const bool computes = n.kind == ops::OpKind::conv2d || n.kind == ops::OpKind::linear;
    const double e = elem.value[i];
    const double out = n.kind == ops::OpKind::flatten || n.out_dims.size() != 4 ? double(numel(n.out_dims)) : padded_elems(n.out_dims);
    if (flatten_is_a_view_on_cpu(g, i)) {  // the input's bytes; a gradient of its own on the model input
      if (in < 0) act += out * e;
      continue;
    }
    act += 2 * out * e;  // the output and its gradient
    switch (n.kind) {
      case ops::OpKind::batchnorm2d: {
        const double ch = double(n.out_dims[1]);
        act += 2 * ch * f;                          // batch mean and variance
        m[MemCategory::parameters] += 2 * ch * f;   // running mean and variance
        const std::vector<int> readers = g.consumers(int(i));
        const bool relu_next = readers.size() == 1 && relu_fused_into_batchnorm(g, size_t(readers[0]));
        if (relu_next) act += out / 8;              // the fused relu's mask, a bit an element
        break;
      }
      case ops::OpKind::maxpool2d: act += out; break;            // argmax, a byte an output
      case ops::OpKind::dropout: act += out; break;              // the mask, a byte an element
      case ops::OpKind::conv2d: workspace += double(numel(n.params[0].dims)) * low;  // weights reordered for backward-data
        break;
      default: break;
    }
    const double weights = computes ? double(numel(n.params[0].dims)) : 0;
    if (n.kind == ops::OpKind::linear) {  // oneDNN's blocked layouts pad the weights
      const cpu::LinearBytes lb = cpu::linear_bytes(n.in_dims[0], n.attrs.out_features, bf16);
      const double padding = lb.master - weights * f;
      m[MemCategory::parameters] += padding + lb.copy;  // and their bf16 copy
      m[MemCategory::gradients] += padding;
      m[MemCategory::optimizer_state] += padding * optimizer_states(opt);
      scratchpad = std::max(scratchpad, lb.scratchpad);
    }
    if (bf16 && n.kind == ops::OpKind::conv2d) m[MemCategory::parameters] += 2 * weights;  // the weights' bf16 copy
    if (bf16 && computes && e != 2) act += 2 * out;  // the logits' gradient converted to bf16
    // A layer that wants its input in another type converts it, and its gradient back (a copy of
    // each; none for the model input's gradient).
    const double want = elem.input[i];
    if (want != in_elem) act += padded_elems(n.in_dims[0]) * want * (in < 0 ? 1 : 2);
    // A layer other than conv/linear reading the model input writes its input gradient into a
    // scratch buffer nobody reads.
    if (in < 0 && !computes) workspace += double(numel(n.in_dims[0])) * f;
    // A value read by several layers gets a temporary to sum their gradients into.
    if (g.consumers(int(i)).size() > 1) act += out * e;
    if (reorders_input(g, i, first_layer)) act += 2 * padded_elems(n.in_dims[0]) * f;  // the input reordered, and its gradient
  }
  m[MemCategory::activations] = act;
  m[MemCategory::workspace] = workspace + scratchpad;
  // The train and test loaders each hold 1 batch (no workers) or 2 per worker.
  const double slots = workers == 0 ? 1 : std::max(2, 2 * workers);
  m[MemCategory::data] = 2 * slots * double(numel(g.input)) * f;
  return m;
}

}  // namespace dlperf::plan
