// Builds the Network: its parameters, activations and workspaces, each layer's cuDNN, cuBLASLt
// or own kernels; and copies to and from the host (parameters, logits, checkpoints). The step
// itself is network_step.cpp's, its profiling network_profile.cpp's.
#include "backend/cuda/network.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "backend/cuda/bn_split.h"
#include "backend/cuda/check.h"
#include "backend/cuda/network_internal.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/second_look.h"
#include "backend/cuda/small_conv.h"
#include "core/error.h"
#include "core/rng.h"
#include "plan/memory.h"

namespace dlperf::cuda {

// plan::gpu_engine_memory mirrors this file's allocations without the CUDA headers.
static_assert(sizeof(StepArgs) == size_t(plan::kGpuStepArgsBytes), "plan::kGpuStepArgsBytes must follow cuda::StepArgs");
static_assert(sizeof(LossScale) == 24, "plan::gpu_engine_memory counts 24 bytes of loss-scale state");

namespace {

DType dtype_of(Precision p) { return p == Precision::bf16 ? DType::bf16 : p == Precision::fp16 ? DType::f16 : DType::f32; }

// Floats a parameter tensor takes in the flat buffers: each starts on a 256-byte boundary, since
// cuBLASLt and cuDNN pick faster algorithms for aligned pointers (the padding stays zero).
int64_t padded(int64_t n) { return (n + 63) / 64 * 64; }

bool is_matmul(ops::OpKind k) { return k == ops::OpKind::conv2d || k == ops::OpKind::linear; }

// The flat buffers' physical order: conv weights, then linear weights, then everything else
// (batchnorm scales and shifts, biases). In mixed precision the first two groups have half
// copies (weights) and conv weights half gradients, each one contiguous span, so casting them
// is one launch. The logical order (tensors_) stays the CPU engine's.
struct ParamPlan {
  std::vector<int64_t> offset;  // per tensor, in graph order
  int64_t conv_span = 0, matmul_span = 0, total = 0;
};
ParamPlan plan_params(const nn::Graph& g) {
  ParamPlan p;
  int64_t at = 0;
  for (int pass = 0; pass < 3; ++pass) {
    size_t t = 0;
    for (const auto& n : g.nodes)
      for (size_t i = 0; i < n.params.size(); ++i, ++t) {
        if (p.offset.size() <= t) p.offset.resize(t + 1, -1);
        const int group = n.kind == ops::OpKind::conv2d && i == 0 ? 0 : n.kind == ops::OpKind::linear && i == 0 ? 1 : 2;
        if (group != pass) continue;
        p.offset[t] = at;
        at += padded(numel(n.params[i].dims));
      }
    if (pass == 0) p.conv_span = at;
    if (pass == 1) p.matmul_span = at;
  }
  p.total = at;
  return p;
}

}  // namespace

void* Network::alloc_bytes(size_t bytes, MemCategory c) {
  void* p = device_allocator(device_).allocate(std::max<size_t>(bytes, 4), c);
  owned_.push_back(p);
  return p;
}

float* Network::alloc(size_t floats, MemCategory c) { return static_cast<float*>(alloc_bytes(floats * sizeof(float), c)); }

SmallConv parse_small_conv(const std::string& s) {
  if (s == "cudnn") return SmallConv::cudnn;
  if (s == "own") return SmallConv::own;
  check(s == "auto", fmt::format("--small-conv {} is not one of auto, own, cudnn", s));
  return SmallConv::timed;
}

Network::Network(const nn::Graph& g, uint64_t seed, int device, NetworkOptions opts)
    : graph_(g), device_(device), opts_(std::move(opts)), seed_(seed) {
  // A constructor that throws (out of GPU memory, say) runs no destructor: give back what was
  // taken so far, since the lab goes on to its next run in the same process.
  try {
    build(seed, device);
  } catch (...) {
    release();
    throw;
  }
}

void Network::build(uint64_t seed, int device) {
  check(opts_.precision != Precision::fp8, "the GPU executor trains in fp32, tf32, bf16 or fp16", "pick one of those");
  dt_ = dtype_of(opts_.precision);
  // Before anything is allocated, so a conv too big for cuDNN to describe is named rather than
  // reported as out of memory or a cuDNN status.
  plan::check_gpu_engine_indexes(graph_);
  if (opts_.graphs) why_not_graphed_ = "not captured yet (the first step runs eagerly)";
  ok(cudaSetDevice(device), "cudaSetDevice");
  ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  void* slots = nullptr;
  ok(cudaHostAlloc(&slots, sizeof(StepArgs) * kArgSlots, cudaHostAllocDefault), "pinning the step values' slots");
  arg_slots_ = static_cast<StepArgs*>(slots);
  const ParamPlan plan = plan_params(graph_);
  param_count_ = plan.total;
  conv_span_ = plan.conv_span;
  matmul_span_ = plan.matmul_span;
  init_parameters(seed, plan.offset);
  alloc_values();
  size_t tensor = 0, bn_workspace = 0, conv_workspace = 0;
  for (size_t i = 0; i < graph_.nodes.size(); ++i) add_layer(i, plan.offset, tensor, bn_workspace, conv_workspace);
  alloc_workspaces(bn_workspace, conv_workspace);
  choose_small_convs();
  check(graph_.nodes.back().out_dims.size() == 2, "the model's last layer must produce [batch, classes] logits");
  ok(cudaStreamSynchronize(stream_), "network set-up");
}

// Parameters: fp32 flat buffers for values, gradients and momentum, initialized with the CPU
// engine's exact values; in mixed precision also half copies of the conv and linear weights and
// half gradients of the conv weights (cuDNN writes a conv's weight gradient in its type).
void Network::init_parameters(uint64_t seed, const std::vector<int64_t>& offsets) {
  const bool mixed = dt_ != DType::f32;
  const size_t es = bytes_of(dt_);
  params_ = alloc(size_t(param_count_), MemCategory::parameters);
  grads_ = alloc(size_t(param_count_), MemCategory::gradients);
  state_m_ = alloc(size_t(param_count_), MemCategory::optimizer_state);
  ok(cudaMemsetAsync(state_m_, 0, size_t(param_count_) * 4, stream_), "cudaMemset");
  if (opts_.optimizer == "adamw") {  // up front: nothing may be allocated inside a captured step
    state_v_ = alloc(size_t(param_count_), MemCategory::optimizer_state);
    ok(cudaMemsetAsync(state_v_, 0, size_t(param_count_) * 4, stream_), "cudaMemset");
  }
  if (mixed) {
    params_h_ = alloc_bytes(size_t(matmul_span_) * es, MemCategory::parameters);
    grads_h_ = alloc_bytes(size_t(conv_span_) * es, MemCategory::gradients);
    ok(cudaMemsetAsync(grads_h_, 0, size_t(conv_span_) * es, stream_), "cudaMemset");
  }
  if (dt_ == DType::f16) {
    loss_scale_ = static_cast<LossScale*>(alloc_bytes(sizeof(LossScale), MemCategory::workspace));
    const LossScale initial;
    ok(cudaMemcpyAsync(loss_scale_, &initial, sizeof initial, cudaMemcpyHostToDevice, stream_), "cudaMemcpy");
  }
  const bool nhwc = opts_.layout == Layout::nhwc;
  std::vector<float> init(static_cast<size_t>(param_count_), 0.f);
  int index = 0;
  for (const auto& n : graph_.nodes)
    for (size_t pi = 0; pi < n.params.size(); ++pi) {
      const auto& p = n.params[pi];
      Rng rng(hash_coords(seed, 0x1417, uint64_t(index)));
      Place place{offsets[size_t(index++)], numel(p.dims)};
      if (nhwc && n.kind == ops::OpKind::conv2d && pi == 0) place.k = p.dims[0], place.c = p.dims[1], place.rs = p.dims[2] * p.dims[3];
      // A linear layer reading NHWC maps through a flatten that folds into it: its columns in the
      // maps' (h, w, c) order, [out, C, H * W] kept as [out, H * W, C] (the conv weights' move).
      if (pi == 0 && n.kind == ops::OpKind::linear && n.inputs[0] >= 0 &&
          plan::flatten_folds_into_linear(graph_, size_t(n.inputs[0]), opts_.layout)) {
        const Dims& maps = graph_.nodes[size_t(n.inputs[0])].in_dims[0];
        place.k = p.dims[0], place.c = maps[1], place.rs = maps[2] * maps[3];
      }
      const bool bn = n.kind == ops::OpKind::batchnorm2d;
      const int64_t fan_in = n.kind == ops::OpKind::conv2d ? n.in_dims[0][1] * n.attrs.kernel * n.attrs.kernel : n.in_dims[0][1];
      const float bound = 1.0f / std::sqrt(float(fan_in));
      std::vector<float> v(static_cast<size_t>(place.count));
      for (auto& x : v) x = bn ? (p.name == "weight" ? 1.f : 0.f) : (2 * rng.uniform() - 1) * bound;
      if (place.k) weights_to_krsc(v.data(), init.data() + place.at, place.k, place.c, place.rs);
      else std::copy(v.begin(), v.end(), init.begin() + place.at);
      tensors_.push_back(place);
    }
  ok(cudaMemsetAsync(grads_, 0, size_t(param_count_) * 4, stream_), "cudaMemset");
  // On the stream, before the half copies are cast from them (and `init` is freed at the end of
  // the constructor).
  copy_to_device(params_, init.data(), init.size() * 4, stream_, "copying the initial parameters");
  if (mixed) cast_from_f32(dt_, params_, params_h_, matmul_span_, stream_);
}

// The input (fp32 as the loaders make it; a copy in the activations' type and layout where they
// differ), the labels and the step's sums. Every node's output and gradient come with its layer.
void Network::alloc_values() {
  const auto& nodes = graph_.nodes;
  const int64_t batch = graph_.batch();
  const bool mixed = dt_ != DType::f32;
  const size_t es = bytes_of(dt_);
  act_.assign(nodes.size() + 1, nullptr);
  diff_.assign(nodes.size() + 1, nullptr);
  input32_ = alloc(size_t(numel(graph_.input)), MemCategory::data);
  const bool input_moves = stored_differently(opts_.layout, graph_.input);
  act_[0] = mixed || input_moves ? alloc_bytes(size_t(numel(graph_.input)) * es, MemCategory::data) : input32_;
  labels_ = reinterpret_cast<int32_t*>(alloc(size_t(batch), MemCategory::data));
  loss_sum_ = reinterpret_cast<double*>(alloc(2, MemCategory::workspace));
  correct_ = reinterpret_cast<int32_t*>(alloc(1, MemCategory::workspace));
  args_ = reinterpret_cast<StepArgs*>(alloc((sizeof(StepArgs) + 3) / 4, MemCategory::workspace));
  if (mixed) logits32_ = alloc(size_t(numel(nodes.back().out_dims)), MemCategory::workspace);
  ok(cudaMemsetAsync(loss_sum_, 0, sizeof(double), stream_), "cudaMemset");
  ok(cudaMemsetAsync(correct_, 0, sizeof(int32_t), stream_), "cudaMemset");
  write_args();
}

// Node i's layer: which relu it runs inside it, where its parameters and values live (a view
// shares its input's), and what it runs with (set_up_op). `tensor` walks the parameter tensors in
// graph order.
void Network::add_layer(size_t i, const std::vector<int64_t>& offsets, size_t& tensor, size_t& bn_workspace, size_t& conv_workspace) {
  const bool mixed = dt_ != DType::f32;
  const size_t es = bytes_of(dt_);
  const nn::Node& n = graph_.nodes[i];
  auto l = std::make_unique<Layer>();
  l->node = &n;
  l->name = n.name;
  l->out = int(i) + 1;
  for (int in : n.inputs) l->in.push_back(in < 0 ? 0 : in + 1);
  // A relu whose input is a batchnorm that feeds nothing else runs inside that batchnorm (the
  // CPU engine's rule, plan::relu_fused_into_batchnorm): it shares the batchnorm's output.
  if (plan::relu_fused_into_batchnorm(graph_, i)) {
    Layer& bn = *layers_[size_t(n.inputs[0])];
    bn.bn.relu = true;
    // The forward's scales, from which (with the saved means and beta) backward recomputes the
    // relu's mask instead of reading the output (BatchnormParams::fwd_scale; plan::memory counts them).
    bn.bn.fwd_scale = alloc(size_t(bn.bn_shape.channels), MemCategory::activations);
    bn.name += "+" + n.name;
    l->fused_away = true;
  }
  // Likewise a relu after a linear layer that feeds nothing else (plan::relu_fused_into_linear):
  // the linear's GEMM epilogue or bias add applies it, and its bias-gradient pass its backward.
  if (plan::relu_fused_into_linear(graph_, i)) {
    Layer& fc = *layers_[size_t(n.inputs[0])];
    fc.name += "+" + n.name;
    l->fused_away = true;
  }
  // And a relu after a residual add that feeds nothing else (plan::relu_fused_into_add): the add
  // clamps the sum it writes, and its backward applies the relu's mask as it hands the gradient
  // to both inputs. On an H100 (2026-11-28) resnet18's adds and the relus after them, as passes
  // of their own, took 12% of its bf16 step at batch 1024 (1.6 ms of 13.2): five tensor-sized
  // transfers forward and seven or eight backward, where the fused passes make three, and four or five.
  if (plan::relu_fused_into_add(graph_, i)) {
    Layer& sum = *layers_[size_t(n.inputs[0])];
    sum.relu_after = true;
    sum.name += "+" + n.name;
    l->fused_away = true;
  }
  if (!n.params.empty()) {
    const int64_t wo = offsets[tensor++];
    l->w = params_ + wo, l->dw = grads_ + wo;
    l->wh = l->w, l->dwh = l->dw;
    if (mixed && is_matmul(n.kind)) l->wh = static_cast<char*>(params_h_) + size_t(wo) * es;
    if (mixed && n.kind == ops::OpKind::conv2d) l->dwh = static_cast<char*>(grads_h_) + size_t(wo) * es;
    if (n.params.size() > 1) {
      const int64_t bo = offsets[tensor++];
      l->b = params_ + bo, l->db = grads_ + bo;
    }
  }
  const size_t out = size_t(numel(n.out_dims));
  // The relus fused away above are views. So is a flatten, except of maps NHWC stores
  // differently where its reader is no linear layer (plan::flatten_folds_into_linear): that
  // reader sees the CPU engine's NCHW feature order, so the flatten moves the features there.
  l->view = plan::view_on_gpu(graph_, i, opts_.layout);
  if (l->view) {
    act_[size_t(l->out)] = act_[size_t(l->in[0])];
    diff_[size_t(l->out)] = diff_[size_t(l->in[0])];
  } else {
    act_[size_t(l->out)] = alloc_bytes(out * es, MemCategory::activations);
    diff_[size_t(l->out)] = alloc_bytes(out * es, MemCategory::activations);
  }
  set_up_op(*l, bn_workspace, conv_workspace);
  layers_.push_back(std::move(l));
}

// What a layer runs with: cuDNN and cuBLASLt descriptors, batchnorm statistics, pooling shapes,
// a dropout mask. The workspaces it needs raise `bn_workspace` and `conv_workspace`, which all
// layers share (they run one at a time).
void Network::set_up_op(Layer& l, size_t& bn_workspace, size_t& conv_workspace) {
  const nn::Node& n = *l.node;
  const size_t i = size_t(l.out - 1);
  const int64_t batch = graph_.batch();
  const bool mixed = dt_ != DType::f32;
  const bool nhwc = opts_.layout == Layout::nhwc;
  const size_t out = size_t(numel(n.out_dims));
  const Dims& x = n.in_dims[0];
  switch (n.kind) {
    case ops::OpKind::conv2d: {
      const ConvShape shape{x[0], x[1], x[2], x[3], n.attrs.out_channels, n.attrs.kernel, n.attrs.stride, n.attrs.padding};
      l.shape = shape;
      l.conv = std::make_unique<CudnnConv>(shape, opts_.precision, nhwc, /*own_workspace=*/false, opts_.deterministic, opts_.conv_workspace);
      conv_workspace = std::max(conv_workspace, l.conv->workspace_bytes());
      // cuDNN stays built beside the own kernels: it runs the input's gradient, and auto times it.
      l.small = opts_.small_conv != SmallConv::cudnn && small_conv_fits(shape);
      if (l.small) conv_workspace = std::max(conv_workspace, small_conv_workspace(shape));
      // cuDNN 9's NHWC weight gradient for an input of few channels ran far slower than its NCHW
      // one on an H200 (bf16, medium's conv1 on one channel at batch 64: 302 us a step against
      // under 28 in NCHW, 39% of the step; the recipe's at batch 256: 1.06 ms, half the step; on
      // three channels, bench conv: 0.3 TFLOP/s against 2.2 in fp32 NCHW; 2026-11-27). So that
      // pass reads the output gradient moved to NCHW (one transpose into the scratch value) and
      // runs through cuDNN's NCHW path. A one-channel input and its [K, 1, R, S] gradient are
      // stored alike in both layouts; with more channels the input is moved too, and the
      // gradient moved back to [K, R, S, C], through buffers of their own (a few MB at most).
      if (weight_grad_in_nchw(opts_.layout, x)) {
        l.weight_grad_nchw = std::make_unique<CudnnConv>(shape, opts_.precision, /*nhwc=*/false, /*own_workspace=*/false,
                                                         opts_.deterministic, opts_.conv_workspace);
        conv_workspace = std::max(conv_workspace, l.weight_grad_nchw->workspace_bytes());
        if (x[1] > 1) {
          const size_t es = bytes_of(dt_);
          l.x_nchw = alloc_bytes(size_t(numel(x)) * es, MemCategory::workspace);
          l.dw_nchw = alloc_bytes(size_t(shape.k * shape.c * shape.r * shape.r) * es, MemCategory::workspace);
        }
      }
      break;
    }
    case ops::OpKind::linear: {
      const int64_t in_f = x[1], out_f = n.attrs.out_features;
      // Row-major y[N, out] = x[N, in] W^T is column-major D[out x N] = W^T x, and so on. In
      // mixed precision the activations' GEMMs write their type and the weight gradient fp32.
      // fp32 and tf32 add the bias inside the forward GEMM, and the relu after it when there is
      // one to fuse (cuBLASLt's bias takes the output's type, so the half types, whose
      // activations are half, add the fp32 bias, and the relu, in one launch of their own).
      const std::vector<int> readers = graph_.consumers(int(i));
      l.relu_after = readers.size() == 1 && plan::relu_fused_into_linear(graph_, size_t(readers[0]));
      constexpr size_t ws = size_t(4) << 20;
      GemmEpilogue fwd_epi, weight_epi;
      if (!mixed) fwd_epi.bias = l.b, fwd_epi.relu = l.relu_after;
      // The weight gradient's GEMM (fp32 in every precision) also sums dy over the batch into
      // the bias gradient, unless the relu's backward pass already does (relu_bias_grad).
      if (l.db && !l.relu_after) weight_epi.bias_grad = l.db;
      l.fwd = std::make_unique<LtGemm>(opts_.precision, true, false, out_f, batch, in_f, ws, true, fwd_epi);
      l.bwd_data = std::make_unique<LtGemm>(opts_.precision, false, false, in_f, batch, out_f, ws, true);
      l.bwd_weight = std::make_unique<LtGemm>(opts_.precision, false, true, in_f, out_f, batch, ws, false, weight_epi);
      break;
    }
    case ops::OpKind::batchnorm2d: {
      l.bn_shape = {x[0], x[1], x[2] * x[3], opts_.layout};
      BatchnormParams& b = l.bn;
      b.gamma = l.w, b.beta = l.b;
      b.running_mean = alloc(size_t(x[1]), MemCategory::parameters);
      b.running_var = alloc(size_t(x[1]), MemCategory::parameters);
      b.batch_mean = alloc(size_t(x[1]), MemCategory::activations);
      b.batch_inv_std = alloc(size_t(x[1]), MemCategory::activations);
      b.eps = float(n.attrs.eps), b.momentum = float(n.attrs.momentum);
      fill(b.running_mean, x[1], 0.f, stream_);
      fill(b.running_var, x[1], 1.f, stream_);
      bn_workspace = std::max(bn_workspace, size_t(bn_workspace_bytes(x[0], x[1], x[2] * x[3], nhwc)));
      break;
    }
    case ops::OpKind::maxpool2d:
    case ops::OpKind::avgpool2d:
    case ops::OpKind::global_avgpool: {
      const bool global = n.kind == ops::OpKind::global_avgpool;
      PoolShape& p = l.pool;
      p.planes = x[0] * x[1], p.h = x[2], p.w = x[3];
      p.out_h = global ? 1 : n.out_dims[2], p.out_w = global ? 1 : n.out_dims[3];  // global: [N, C] or [N, C, 1, 1] alike
      p.kh = global ? x[2] : n.attrs.kernel, p.kw = global ? x[3] : n.attrs.kernel;
      p.stride = global ? 1 : n.attrs.stride, p.pad = global ? 0 : n.attrs.padding;
      p.max = n.kind == ops::OpKind::maxpool2d;
      p.channels = x[1], p.layout = opts_.layout;
      break;
    }
    case ops::OpKind::dropout:
      l.mask = reinterpret_cast<uint8_t*>(alloc((out + 3) / 4, MemCategory::activations));
      l.seed = hash_coords(seed_, 0xD20, i);  // the CPU engine's per-layer dropout seed
      break;
    default: break;
  }
}

// What the layers share: the scratch value, batchnorm's partial sums and cuDNN's workspace.
void Network::alloc_workspaces(size_t bn_workspace, size_t conv_workspace) {
  const size_t es = bytes_of(dt_);
  // Where a second gradient of a value is summed from, and where an unread dx goes.
  size_t biggest = 0;
  for (const auto& n : graph_.nodes) biggest = std::max(biggest, size_t(numel(n.in_dims[0])));
  scratch_ = alloc_bytes(biggest * es, MemCategory::workspace);
  for (auto& l : layers_) l->backward_name = l->name + " backward";  // names are final once every relu is fused
  if (bn_workspace) bn_workspace_ = alloc_bytes(bn_workspace, MemCategory::workspace);  // batchnorm layers run one at a time
  // The convolutions run one at a time on one stream: one workspace, the largest any needs.
  conv_workspace_bytes_ = conv_workspace;
  if (conv_workspace) {
    void* w = conv_workspace_ = alloc_bytes(conv_workspace, MemCategory::workspace);
    for (auto& l : layers_)
      for (CudnnConv* c : {l->conv.get(), l->weight_grad_nchw.get()})
        if (c) c->set_workspace(w);
  }
}

// Which convolutions of few input channels the own kernels run (small_conv.h): all of them with
// --small-conv own; with auto each pass whichever of them and cuDNN's choice (the weight gradient
// as the step runs it, through NCHW where it does) ran faster here, on the layer's own buffers.
// The own kernels must win by 5%: a tie keeps cuDNN. The training step overwrites what this wrote.
void Network::choose_small_convs() {
  constexpr double kMargin = 0.95;
  for (auto& lp : layers_) {
    Layer& l = *lp;
    if (!l.small) continue;
    if (opts_.small_conv == SmallConv::own) {
      l.own_forward = l.own_weight_grad = true;
      l.own_times = "own kernels (--small-conv own)";
      continue;
    }
    const bool nhwc = opts_.layout == Layout::nhwc;
    void* x = act_[size_t(l.in[0])];
    void* y = act_[size_t(l.out)];
    void* dy = diff_[size_t(l.out)];
    // Random values, not zeros nor whatever the allocator held: a kernel's time can depend on
    // them (second_look.h), and the step overwrites them.
    ok(cudaStreamSynchronize(stream_), "timing the small convolutions");
    check(second_look::fill_random(x, dt_, size_t(numel(l.node->in_dims[0]))) &&
              second_look::fill_random(dy, dt_, size_t(numel(l.node->out_dims))),
          "CUDA failed while preparing to time the small convolutions", "run again; if it persists, pass --small-conv cudnn");
    // Four runs a sample: a pass may take a few microseconds, not much more than events resolve.
    auto time = [&](const std::function<void()>& run) {
      constexpr int kRuns = 4;
      const double ms = second_look::median_ms(
          [&] {
            for (int r = 0; r < kRuns; ++r) run();
            return true;
          },
          stream_);
      check(ms >= 0, "CUDA failed while timing the small convolutions", "run again; if it persists, pass --small-conv cudnn");
      return ms / kRuns;
    };
    const double cudnn_fwd = time([&] { l.conv->forward(x, l.wh, y, stream_); });
    const double own_fwd = time([&] { small_conv_forward(dt_, nhwc, l.shape, x, l.wh, y, stream_); });
    const double cudnn_wgrad = time([&] { conv_weight_grad(l, x, dy); });
    const double own_wgrad = time([&] { small_conv_weight_grad(dt_, nhwc, l.shape, x, dy, l.dwh, conv_workspace_, stream_); });
    l.own_forward = own_fwd < kMargin * cudnn_fwd;
    l.own_weight_grad = own_wgrad < kMargin * cudnn_wgrad;
    auto pass = [](const char* name, double own, double cudnn, bool taken) {
      return fmt::format("{} {:.1f} us against {:.1f} ({})", name, own * 1e3, cudnn * 1e3, taken ? "own taken" : "cuDNN kept");
    };
    l.own_times = "own kernels timed against cuDNN's: " + pass("fwd", own_fwd, cudnn_fwd, l.own_forward) + ", " +
                  pass("bwd-filter", own_wgrad, cudnn_wgrad, l.own_weight_grad);
  }
}

Network::~Network() { release(); }

void Network::release() {
  if (stream_) cudaStreamSynchronize(stream_);
  for (ProfileSlot& s : slots_) {
    if (s.end) cudaEventDestroy(s.end);
    if (s.exec) cudaGraphExecDestroy(s.exec);
    s = ProfileSlot{};
  }
  if (stamps_) cudaFree(stamps_);
  if (stamps_host_) cudaFreeHost(stamps_host_);
  stamps_ = nullptr, stamps_host_ = nullptr;
  if (fork_) cudaEventDestroy(fork_);
  if (join_) cudaEventDestroy(join_);
  if (stamp_stream_) cudaStreamDestroy(stamp_stream_);
  fork_ = join_ = nullptr, stamp_stream_ = nullptr;
  if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
  graph_exec_ = nullptr;
  layers_.clear();
  for (void* p : owned_) device_allocator(device_).release(p);
  owned_.clear();
  if (stream_) cudaStreamDestroy(stream_);
  stream_ = nullptr;
  for (cudaEvent_t& e : arg_copied_)
    if (e) cudaEventDestroy(e), e = nullptr;
  if (arg_slots_) cudaFreeHost(arg_slots_);
  arg_slots_ = nullptr;
}

float* Network::input() { return input32_; }
StoredInput Network::stored_input() {
  return {act_[0], dt_, stored_differently(opts_.layout, graph_.input) ? Layout::nhwc : Layout::nchw};
}
int32_t* Network::labels() { return labels_; }

std::vector<std::pair<std::string, std::string>> Network::conv_algorithms() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& l : layers_) {
    if (!l->conv) continue;
    std::string a = l->conv->algorithms();
    if (l->weight_grad_nchw) a += "; weight gradient in NCHW: " + l->weight_grad_nchw->algorithms();
    if (!l->own_times.empty()) a += "; " + l->own_times;
    out.emplace_back(l->node->name, a);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> Network::gemm_choices() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& l : layers_) {
    if (!l->fwd) continue;
    std::string a;
    for (const auto& [pass, g] : {std::pair{"fwd", l->fwd.get()}, {"bwd-data", l->bwd_data.get()}, {"bwd-weight", l->bwd_weight.get()}})
      if (g && !g->choice().empty()) a += (a.empty() ? "" : "; ") + std::string(pass) + " " + g->choice();
    if (!a.empty()) out.emplace_back(l->node->name, a);
  }
  return out;
}

std::vector<float> Network::parameters() const {
  std::vector<float> out;  // in graph order, without the alignment padding
  for (const Place& t : tensors_) {
    const std::vector<float> v = to_host(params_, t);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// One tensor of a flat buffer (parameters, or an optimizer state laid out like them) to the
// host in the CPU engine's order, and back.
std::vector<float> Network::to_host(const float* flat, const Place& t) const {
  std::vector<float> h(static_cast<size_t>(t.count));
  ok(cudaStreamSynchronize(stream_), "copying to the host");
  ok(cudaMemcpy(h.data(), flat + t.at, h.size() * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (!t.k) return h;
  std::vector<float> kcrs(h.size());
  weights_to_kcrs(h.data(), kcrs.data(), t.k, t.c, t.rs);
  return kcrs;
}

void Network::to_device(float* flat, const Place& t, const std::vector<float>& v) const {
  check(v.size() == size_t(t.count), "a parameter tensor has the wrong size");
  std::vector<float> krsc;
  const float* src = v.data();
  if (t.k) {
    krsc.resize(v.size());
    weights_to_krsc(v.data(), krsc.data(), t.k, t.c, t.rs);
    src = krsc.data();
  }
  copy_to_device(flat + t.at, src, v.size() * 4, stream_, "copying a parameter tensor to the GPU");
}

std::vector<float> Network::logits() const {
  const int64_t n = numel(graph_.nodes.back().out_dims);
  std::vector<float> out(static_cast<size_t>(n));
  const float* src = static_cast<const float*>(act_.back());
  if (dt_ != DType::f32) {
    cast_to_f32(dt_, act_.back(), logits32_, n, stream_);
    src = logits32_;
  }
  ok(cudaStreamSynchronize(stream_), "logits");
  ok(cudaMemcpy(out.data(), src, out.size() * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  return out;
}

namespace {
// Copies between the host and device `count` floats, waiting for the stream first.
std::vector<float> fetch(const float* d, int64_t count, cudaStream_t s) {
  std::vector<float> h(static_cast<size_t>(count));
  ok(cudaStreamSynchronize(s), "checkpoint");
  ok(cudaMemcpy(h.data(), d, h.size() * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  return h;
}
}  // namespace

std::vector<std::pair<std::string, std::vector<float>>> Network::snapshot(const nn::OptimizerConfig& opt) const {
  std::vector<std::pair<std::string, std::vector<float>>> out;
  size_t t = 0;
  std::vector<std::pair<std::string, Place>> named;  // parameter name, where it lives
  for (const auto& n : graph_.nodes)
    for (const auto& p : n.params) named.push_back({n.name + "." + p.name, tensors_[t++]});
  for (const auto& [name, at] : named) out.emplace_back(name, to_host(params_, at));
  for (const auto& l : layers_)
    if (l->bn.running_mean) {
      const int64_t c = l->node->in_dims[0][1];
      out.emplace_back(l->node->name + ".running_mean", fetch(l->bn.running_mean, c, stream_));
      out.emplace_back(l->node->name + ".running_var", fetch(l->bn.running_var, c, stream_));
    }
  const bool adam = opt.name == "adamw";
  if (adam || opt.momentum != 0)
    for (const auto& [name, at] : named) {
      out.emplace_back(name + (adam ? ".adam_m" : ".momentum"), to_host(state_m_, at));
      if (adam) out.emplace_back(name + ".adam_v", to_host(state_v_, at));
    }
  return out;
}

void Network::restore(const std::function<const std::vector<float>&(const std::string&, size_t)>& get, const nn::OptimizerConfig& opt,
                      int64_t updates_done) {
  auto put = [&](float* d, const std::vector<float>& v) {
    copy_to_device(d, v.data(), v.size() * 4, stream_, "restoring a checkpoint");
  };
  ok(cudaStreamSynchronize(stream_), "restoring a checkpoint");
  size_t t = 0;
  const bool adam = opt.name == "adamw";
  check(!adam || state_v_ != nullptr, "this network was built for SGD", "construct it with NetworkOptions::optimizer = \"adamw\"");
  for (const auto& n : graph_.nodes)
    for (const auto& p : n.params) {
      const Place& at = tensors_[t++];
      const std::string name = n.name + "." + p.name;
      to_device(params_, at, get(name, size_t(at.count)));
      if (adam || opt.momentum != 0) to_device(state_m_, at, get(name + (adam ? ".adam_m" : ".momentum"), size_t(at.count)));
      if (adam) to_device(state_v_, at, get(name + ".adam_v", size_t(at.count)));
    }
  for (const auto& l : layers_)
    if (l->bn.running_mean) {
      const size_t c = size_t(l->node->in_dims[0][1]);
      put(l->bn.running_mean, get(l->node->name + ".running_mean", c));
      put(l->bn.running_var, get(l->node->name + ".running_var", c));
    }
  if (dt_ != DType::f32) cast_from_f32(dt_, params_, params_h_, matmul_span_, stream_);
  steps_ = updates_done;
  ok(cudaStreamSynchronize(stream_), "restoring a checkpoint");
}

MemoryStats Network::memory() const { return device_allocator(device_).stats(); }

}  // namespace dlperf::cuda
