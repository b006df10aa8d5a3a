#include "backend/cuda/network.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "backend/cuda/batchnorm.h"
#include "backend/cuda/bn_split.h"
#include "backend/cuda/check.h"
#include "backend/cuda/conv.h"
#include "backend/cuda/small_conv.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/second_look.h"
#include "core/error.h"
#include "core/rng.h"
#include "plan/memory.h"
#include "profile/nvtx.h"

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

// A convolution's bias over its output y [N, K, OH, OW]: one value a channel, which NHWC stores
// innermost (outer N * OH * OW, inner 1) and NCHW per map (outer N, inner OH * OW).
void add_conv_bias(DType t, Layout l, const Dims& y, void* out, const float* bias, cudaStream_t s) {
  const int64_t hw = y[2] * y[3];
  if (l == Layout::nhwc) add_bias(t, out, bias, y[0] * hw, y[1], 1, s);
  else add_bias(t, out, bias, y[0], y[1], hw, s);
}
void conv_bias_grad(DType t, Layout l, const Dims& y, const void* dy, float* db, cudaStream_t s) {
  const int64_t hw = y[2] * y[3];
  if (l == Layout::nhwc) bias_grad(t, dy, db, y[0] * hw, y[1], 1, s);
  else bias_grad(t, dy, db, y[0], y[1], hw, s);
}

}  // namespace

struct Network::Layer {
  const nn::Node* node = nullptr;
  std::vector<int> in;  // input values
  int out = 0;
  float *w = nullptr, *b = nullptr, *dw = nullptr, *db = nullptr;  // fp32 master values and gradients
  void* wh = nullptr;   // the weight the conv or GEMM reads: its half copy in mixed precision, else w
  void* dwh = nullptr;  // a conv's half weight gradient in mixed precision, else dw
  std::unique_ptr<CudnnConv> conv;
  ConvShape shape;                         // a convolution's
  bool small = false;                      // small_conv_fits: the own kernels may run it (--small-conv)
  bool own_forward = false, own_weight_grad = false;  // they do, for these passes
  std::string own_times;                   // what choose_small_convs measured, for conv_algorithms
  std::unique_ptr<CudnnConv> weight_grad_nchw;  // NHWC with under 8 input channels: the weight gradient in NCHW (set_up_op)
  void *x_nchw = nullptr, *dw_nchw = nullptr;   // with over one: its input in NCHW, and the gradient [K, C, R, S] it writes
  std::unique_ptr<LtGemm> fwd, bwd_data, bwd_weight;
  BatchnormShape bn_shape;
  BatchnormParams bn;  // batchnorm: its parameters and statistics (bn.relu: the next relu runs inside it)
  bool fused_away = false;  // a relu that runs inside the batchnorm or linear layer before it
  bool relu_after = false;  // a linear layer or add that runs the relu after it (GEMM epilogue, bias add, the add's pass)
  bool view = false;        // a flatten that moves nothing (or a fused relu): shares its input's buffers
  PoolShape pool;
  uint8_t* mask = nullptr;
  uint64_t seed = 0;
  std::string name;           // the span and NVTX name: the node's, "bn1+relu1" when a relu is fused in
  std::string backward_name;  // the NVTX range of its backward pass
};

// While profiling, a stamp of the GPU's clock before and after the work queued in its lifetime;
// nothing otherwise.
class Network::Span {
 public:
  /// A layer's pass.
  Span(Network& net, const std::string& name, ops::OpKind kind, profile::Phase phase, int node) : net_(net) {
    if (net.profiling_) index_ = net.begin_span(name, std::string(ops::to_string(kind)), phase, node);
  }
  /// The loss or the update.
  Span(Network& net, const char* name, profile::Phase phase) : net_(net) {
    if (net.profiling_) index_ = net.begin_span(name, "", phase, -1);
  }
  ~Span() {
    if (index_ != kNone) net_.end_span(index_);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  static constexpr size_t kNone = ~size_t(0);
  Network& net_;
  size_t index_ = kNone;
};

// Queues the slot's next stamp and returns its index. A stamp is a kernel, so in a capture it
// becomes a node of the graph, writing the same place at each replay.
//
// In the profiled step's graph a stamp hangs off the step instead of sitting in it: it waits for
// the work queued before it, and the work after it does not wait for the stamp. In line, each
// stamp added a hop between two kernels: on an H100 (2026-11-28) 0.79 us, what an empty kernel
// costs in a graph, so medium's fp32 step at batch 64 (about 430 us, some 57 span boundaries)
// ran 10.5% slower recorded. Forked, the stamp and the next kernel are released together when
// the work before them ends, so the stamp reads the clock as that kernel starts. The stamps
// follow one another on their own stream (so they stay in order), at the device's highest
// priority (so a stamp's one thread is placed before the next kernel's waiting blocks). Eager
// steps keep them in line: there every fork would cost the host two more API calls a stamp.
size_t Network::record_mark(ProfileSlot& s) {
  check(s.step.marks_used < stamp_capacity_, "a profiled step has more span boundaries than the profiler made room for",
        "this is a bug in dlperf's GPU executor: please report it with the model");
  const size_t m = s.step.marks_used++;
  if (fork_stamps_) {
    ok(cudaEventRecord(fork_, stream_), "forking a stamp off the step");
    ok(cudaStreamWaitEvent(stamp_stream_, fork_, 0), "forking a stamp off the step");
    stamp_time(s.stamps + m, stamp_stream_);
    forked_ = true;
  } else {
    stamp_time(s.stamps + m, stream_);
  }
  return m;
}

// Spans are never nested on the GPU and all of a step's work after its load and input cast runs
// inside one, so a span that begins right after another ended begins at that end's stamp.
size_t Network::begin_span(const std::string& name, const std::string& op, profile::Phase phase, int node) {
  ProfileSlot& s = slots_[slot_];
  const size_t begin = chained_ ? s.step.marks_used - 1 : record_mark(s);
  chained_ = false;
  s.step.spans.push_back({name, op, phase, node, 0, 0});
  s.step.marks.push_back({begin, begin});
  return s.step.spans.size() - 1;
}

// Called from a destructor, so it must not throw: a failed launch surfaces at the next CUDA call
// that checks for errors, and a stamp never written reads as one out of order (read_profiled).
void Network::end_span(size_t i) noexcept {
  try {
    ProfileSlot& s = slots_[slot_];
    s.step.marks[i].second = record_mark(s);
    chained_ = true;
  } catch (...) {
    chained_ = false;
  }
}

// Room for every stamp a step takes: its start, and at most two for each span (a forward pass,
// two backward passes (weight and data) and a gradient sum per layer, the loss and the update).
void Network::begin_profile() {
  const bool first = !stamps_;
  if (first) {
    stamp_capacity_ = 1 + 2 * (4 * layers_.size() + 2);
    const size_t bytes = (2 + 2 * stamp_capacity_) * sizeof(uint64_t);
    ok(cudaMalloc(&stamps_, bytes), "allocating the profiler's timestamps");
    ok(cudaMemsetAsync(stamps_, 0, bytes, stream_), "cudaMemset");
    void* host = nullptr;
    ok(cudaHostAlloc(&host, bytes, cudaHostAllocDefault), "pinning the profiler's timestamps");
    stamps_host_ = static_cast<uint64_t*>(host);
    for (int i = 0; i < 2; ++i) {
      slots_[i].stamps = stamps_ + 2 + size_t(i) * stamp_capacity_;
      ok(cudaEventCreateWithFlags(&slots_[i].end, cudaEventDisableTiming), "cudaEventCreate");
    }
    int least = 0, greatest = 0;
    ok(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    ok(cudaStreamCreateWithPriority(&stamp_stream_, cudaStreamNonBlocking, greatest), "creating the stamps' stream");
    ok(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming), "cudaEventCreate");
    ok(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming), "cudaEventCreate");
    clock_tick(stamps_ + 1, stream_);  // microseconds at most, once
  }
  for (ProfileSlot& s : slots_) s.pending = false;
  profiled_.clear();
  slot_ = 0;
  stamp_time(stamps_, stream_);
  ok(cudaStreamSynchronize(stream_), "starting the profile");  // the GPU is idle: the origin is now
  ok(cudaMemcpy(stamps_host_, stamps_, 2 * sizeof(uint64_t), cudaMemcpyDeviceToHost), "reading the profile's origin");
  origin_ns_ = stamps_host_[0];
  if (first) clock_tick_ns_ = double(stamps_host_[1]);
}

void Network::begin_profiled_step() {
  ProfileSlot& s = slots_[slot_];
  if (s.pending) read_profiled(s);  // the step two before this one: the GPU is busy with the last
  s.step = {};
  chained_ = false;  // the step's load comes next, outside any span
  record_mark(s);    // stamp 0: the step's start
  profiling_ = true;
}

void Network::end_profiled_step() {
  ProfileSlot& s = slots_[slot_];
  profiling_ = false;
  ok(cudaEventRecord(s.end, stream_), "cudaEventRecord");
  s.pending = true;
  slot_ ^= 1;
}

// Span times as seconds since the origin. The copy back runs on no stream of ours, once the step
// is done, so it costs the GPU's stream of work nothing.
void Network::read_profiled(ProfileSlot& s) {
  ok(cudaEventSynchronize(s.end), "waiting for a profiled step");
  uint64_t* host = stamps_host_ + (s.stamps - stamps_);
  ok(cudaMemcpy(host, s.stamps, s.step.marks_used * sizeof(uint64_t), cudaMemcpyDeviceToHost), "reading a profiled step's timestamps");
  ProfiledStep p;
  std::vector<double> at(s.step.marks_used);  // each stamp's time
  for (size_t m = 0; m < s.step.marks_used; ++m) {
    // One stream runs the stamps in order: one that is not is one a failed launch never wrote.
    check(host[m] >= (m == 0 ? origin_ns_ : host[m - 1]), "the GPU's timestamps of a profiled step are out of order",
          "a stamp kernel failed to run: rerun, and report it if it happens again");
    at[m] = double(host[m] - origin_ns_) / 1e9;
  }
  p.start = at.empty() ? 0 : at[0];
  p.spans = s.step.spans;
  for (size_t i = 0; i < p.spans.size(); ++i) p.spans[i].t0 = at[s.step.marks[i].first], p.spans[i].t1 = at[s.step.marks[i].second];
  profiled_.push_back(std::move(p));
  s.pending = false;
}

std::vector<ProfiledStep> Network::take_profiled() {
  std::vector<ProfiledStep> out;
  out.swap(profiled_);
  return out;
}

void Network::end_profile() {
  // After end_profiled_step() the older pending step is in slot_, the newer in the other.
  for (int i = 0; i < 2; ++i)
    if (ProfileSlot& s = slots_[slot_ ^ i]; s.pending) read_profiled(s);
  profiling_ = false;
}

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

// A copy from pageable memory may make the driver wait for the stream before staging it, which
// would stall the host once a step; from a pinned slot it never does. A slot is refilled only
// after its last copy ran, which also bounds how far the host runs ahead (kArgSlots steps).
void Network::write_args() {
  const int slot = int(args_written_++ % kArgSlots);
  cudaEvent_t& copied = arg_copied_[slot];
  if (copied) ok(cudaEventSynchronize(copied), "waiting for a step-values slot");
  else ok(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming), "cudaEventCreate");
  arg_slots_[slot] = host_args_;
  ok(cudaMemcpyAsync(args_, &arg_slots_[slot], sizeof(StepArgs), cudaMemcpyHostToDevice, stream_), "copying the step's values");
  ok(cudaEventRecord(copied, stream_), "cudaEventRecord");
}

void Network::forward(bool training, uint64_t dropout_step) {
  host_args_.dropout_step = dropout_step;
  write_args();
  forward_pass(training);
}

void Network::forward_pass(bool training) {
  chained_ = false;  // the input cast below runs outside any span
  const Dims& in = graph_.input;
  if (act_[0] != input32_ && !opts_.input_as_stored) {
    if (stored_differently(opts_.layout, in)) cast_from_f32_to_nhwc(dt_, input32_, act_[0], in[0], in[1], in[2] * in[3], stream_);
    else cast_from_f32(dt_, input32_, act_[0], numel(in), stream_);
  }
  for (auto& lp : layers_) {
    Layer& l = *lp;
    if (l.view) continue;
    const nn::Node& n = *l.node;
    const profile::NvtxRange range(l.name.c_str());  // Nsight Systems shows the layer names
    const Span span(*this, l.name, n.kind, profile::Phase::forward, l.out - 1);
    const void* x = act_[size_t(l.in[0])];
    void* y = act_[size_t(l.out)];
    const int64_t count = numel(n.out_dims);
    switch (n.kind) {
      case ops::OpKind::conv2d:
        if (l.own_forward) small_conv_forward(dt_, opts_.layout == Layout::nhwc, l.shape, x, l.wh, y, stream_);
        else l.conv->forward(x, l.wh, y, stream_);
        if (l.b) add_conv_bias(dt_, opts_.layout, n.out_dims, y, l.b, stream_);
        break;
      case ops::OpKind::linear:
        l.fwd->run(l.wh, x, y, stream_);
        if (l.b && !l.fwd->fuses_bias()) add_bias(dt_, y, l.b, n.out_dims[0], n.out_dims[1], 1, stream_, l.relu_after);
        else if (l.relu_after && !l.fwd->fuses_relu()) relu_forward(dt_, y, y, count, stream_);
        break;
      case ops::OpKind::batchnorm2d:
        if (training) batchnorm_forward_train(dt_, l.bn_shape, l.bn, x, y, bn_workspace_, stream_);
        else batchnorm_forward_eval(dt_, l.bn_shape, l.bn, x, y, bn_workspace_, stream_);
        break;
      case ops::OpKind::relu: relu_forward(dt_, x, y, count, stream_); break;
      case ops::OpKind::maxpool2d:
      case ops::OpKind::avgpool2d:
      case ops::OpKind::global_avgpool: pool_forward(dt_, l.pool, x, y, stream_); break;
      case ops::OpKind::dropout:
        if (training) dropout_forward(dt_, x, y, l.mask, count, float(n.attrs.p), l.seed, args_, stream_);
        else ok(cudaMemcpyAsync(y, x, size_t(count) * bytes_of(dt_), cudaMemcpyDeviceToDevice, stream_), "dropout (eval)");
        break;
      case ops::OpKind::add: add(dt_, x, act_[size_t(l.in[1])], y, count, stream_, l.relu_after); break;
      case ops::OpKind::flatten: {  // NHWC maps to the NCHW features the next layer reads
        const Dims& d = n.in_dims[0];
        change_layout(dt_, x, y, d[0], d[1], d[2] * d[3], Layout::nhwc, stream_);
        break;
      }
      default: throw Error(fmt::format("the CUDA backend has no {} layer yet ({})", ops::to_string(n.kind), n.name));
    }
  }
}

void Network::accumulate_loss(int64_t valid, double smoothing, bool grad) {
  const Span span(*this, "loss", profile::Phase::loss);
  const nn::Node& last = graph_.nodes.back();
  softmax_cross_entropy(dt_, act_.back(), labels_, last.out_dims[0], last.out_dims[1], valid, float(smoothing), loss_sum_, correct_,
                        grad ? diff_.back() : nullptr, grad && loss_scale_ ? &loss_scale_->scale : nullptr, stream_);
}

GpuLoss Network::loss(int64_t valid, double smoothing, bool grad) {
  tally(true);
  accumulate_loss(valid, smoothing, grad);
  const GpuTally t = tally(true);
  return {t.loss_sum / double(std::max<int64_t>(valid, 1)), t.correct};
}

GpuTally Network::tally(bool reset) {
  double sum = 0;
  int32_t correct = 0;
  ok(cudaMemcpyAsync(&sum, loss_sum_, sizeof sum, cudaMemcpyDeviceToHost, stream_), "cudaMemcpy");
  ok(cudaMemcpyAsync(&correct, correct_, sizeof correct, cudaMemcpyDeviceToHost, stream_), "cudaMemcpy");
  ok(cudaStreamSynchronize(stream_), "reading the loss");
  if (reset) {
    ok(cudaMemsetAsync(loss_sum_, 0, sizeof(double), stream_), "cudaMemset");
    ok(cudaMemsetAsync(correct_, 0, sizeof(int32_t), stream_), "cudaMemset");
  }
  return {sum, correct};
}

LossScale Network::loss_scale() const {
  LossScale s;
  if (!loss_scale_) return s;
  ok(cudaMemcpyAsync(&s, loss_scale_, sizeof s, cudaMemcpyDeviceToHost, stream_), "cudaMemcpy");
  ok(cudaStreamSynchronize(stream_), "reading the loss scale");
  return s;
}

void Network::train_step(const std::function<void(cudaStream_t)>& load, int64_t valid, double smoothing,
                         const nn::OptimizerConfig& opt, const StepValues& v) {
  set_update_values(opt, v.lr);
  host_args_.dropout_step = v.global_step;
  host_args_.batch = v.batch;
  host_args_.epoch = v.epoch;
  write_args();
  if (opts_.graphs && !graph_exec_ && eager_steps_ > 0) capture(load, valid, smoothing, opt);
  if (graph_exec_ && valid == graph_valid_ && !profiling_) {
    ok(cudaGraphLaunch(graph_exec_, stream_), "replaying the training step's CUDA graph");
    return;
  }
  // A profiled step replays its slot's graph, the step captured with the slot's stamp kernels, so
  // the profile times the kernels as training runs them; eagerly where that graph cannot be had.
  if (profiling_ && graph_exec_ && valid == graph_valid_) {
    ProfileSlot& s = slots_[slot_];
    if (!s.exec && why_not_profiled_graph_.empty()) {
      const SpanRecords started = s.step;  // the step's start stamp, queued already; the capture's follow it
      std::string failed;
      fork_stamps_ = true, forked_ = false;  // record_mark: the stamps hang off the captured step
      s.exec = capture_step(load, valid, smoothing, opt, failed);
      fork_stamps_ = false;
      s.captured = s.step;
      s.step = started;  // a failed capture's records are no step's; an eager step records its own
      if (!s.exec) why_not_profiled_graph_ = "CUDA graph capture with stamp kernels failed: " + failed;
      // While the host captured, the GPU sat past the step's start stamp with nothing to run, and
      // the step would count the capture as its own time: on an H100 the two steps that captured
      // (one a slot) took 1.7 and 1.4 ms against a 286 us median, a fifth of a 40-step profile,
      // all of it "idle/loop". So the step starts again, stamped after the capture.
      if (s.step.marks_used == 1 && s.step.spans.empty()) {
        s.step.marks_used = 0;
        record_mark(s);  // stamp 0 again: it overwrites the first, later in the stream
      }
    }
    if (s.exec) {
      s.step = s.captured;
      ok(cudaGraphLaunch(s.exec, stream_), "replaying the profiled step's CUDA graph");
      return;
    }
  }
  eager_step(load, valid, smoothing, opt);
}

void Network::eager_step(const std::function<void(cudaStream_t)>& load, int64_t valid, double smoothing,
                         const nn::OptimizerConfig& opt) {
  ++eager_steps_;
  if (load) load(stream_);
  forward_pass(true);
  accumulate_loss(valid, smoothing, true);
  backward();
  update(opt);
}

namespace {

// Adds up a graph's nodes by type, child graphs (a library may capture one) included. Counting
// is a report, never a reason to fail: a query that fails leaves the counts short.
void count_nodes(cudaGraph_t g, GraphNodes& out) {
  size_t n = 0;
  if (cudaGraphGetNodes(g, nullptr, &n) != cudaSuccess) return;
  std::vector<cudaGraphNode_t> nodes(n);
  if (n > 0 && cudaGraphGetNodes(g, nodes.data(), &n) != cudaSuccess) return;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    if (cudaGraphNodeGetType(node, &type) != cudaSuccess) continue;
    cudaGraph_t child = nullptr;
    switch (type) {
      case cudaGraphNodeTypeKernel: ++out.kernels; break;
      case cudaGraphNodeTypeMemcpy: ++out.copies; break;
      case cudaGraphNodeTypeMemset: ++out.memsets; break;
      case cudaGraphNodeTypeGraph:
        if (cudaGraphChildGraphNodeGetGraph(node, &child) == cudaSuccess) count_nodes(child, out);
        break;
      default: ++out.other; break;
    }
  }
}

}  // namespace

// Captures one step into a graph (nothing runs), or returns null with the reason: whatever
// fails during capture (an operation a library cannot capture) leaves the step to run eagerly.
// `nodes`, when given, gets the captured graph's node counts.
cudaGraphExec_t Network::capture_step(const std::function<void(cudaStream_t)>& load, int64_t valid, double smoothing,
                                      const nn::OptimizerConfig& opt, std::string& failed, GraphNodes* nodes) {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  // A stream that cannot be captured at all is a capture that failed, not a failed run.
  if (const cudaError_t begin = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal); begin != cudaSuccess) {
    failed = cudaGetErrorString(begin);
    cudaGetLastError();
    return nullptr;
  }
  try {
    if (load) load(stream_);
    forward_pass(true);
    accumulate_loss(valid, smoothing, true);
    backward();
    update(opt);
  } catch (const std::exception& e) {
    failed = e.what();
  }
  // The stamps' branch joins the step at its end, so the graph ends after its stamps.
  const bool forked = forked_;
  if (forked) {
    cudaEventRecord(join_, stamp_stream_);
    cudaStreamWaitEvent(stream_, join_, 0);
    forked_ = false;
  }
  const cudaError_t end = cudaStreamEndCapture(stream_, &g);
  if (failed.empty() && end != cudaSuccess) failed = cudaGetErrorString(end);
  if (failed.empty() && nodes) {
    *nodes = {};
    count_nodes(g, *nodes);
  }
  if (failed.empty()) {
    // A captured kernel keeps its stream's priority as an attribute, but a graph runs every node
    // at its launch stream's priority unless told to use the nodes' own: without the flag the
    // stamps would wait behind the next kernel's blocks, reading the clock late.
    const cudaError_t inst = cudaGraphInstantiate(&exec, g, forked ? cudaGraphInstantiateFlagUseNodePriority : 0);
    if (inst != cudaSuccess) failed = cudaGetErrorString(inst), exec = nullptr;
  }
  if (g) cudaGraphDestroy(g);
  if (!failed.empty()) cudaGetLastError();  // clear the capture's error so the eager steps start clean
  return exec;
}

// The training step's graph, captured once; a failure keeps the run on eager steps, with the
// reason kept for the run record.
void Network::capture(const std::function<void(cudaStream_t)>& load, int64_t valid, double smoothing,
                      const nn::OptimizerConfig& opt) {
  std::string failed;
  // The training graph has no stamps, even if profiling began before it was captured.
  struct Restore {
    bool& flag;
    bool value;
    ~Restore() { flag = value; }
  } restore{profiling_, profiling_};
  profiling_ = false;
  graph_exec_ = capture_step(load, valid, smoothing, opt, failed, &step_nodes_);
  if (!graph_exec_) {
    opts_.graphs = false;
    why_not_graphed_ = "CUDA graph capture failed: " + failed;
    return;
  }
  graph_valid_ = valid;
  why_not_graphed_.clear();
}

void Network::eval_step(const std::function<void(cudaStream_t)>& load, int64_t valid) {
  if (load) load(stream_);
  forward_pass(false);
  accumulate_loss(valid, 0.0, false);
}

void Network::backward() {
  const size_t es = bytes_of(dt_);
  // A value's first gradient writer (in reverse order) writes it; later ones add to it through
  // a scratch buffer, in a pass of its own (profiled as the layer's gradient sum, as on the CPU).
  // A view's gradient is its input's buffer, so what has been written is kept per buffer: a
  // reader of the view and a later reader of its input add up in it. The logits' gradient came
  // from the loss.
  std::vector<int> buffer(act_.size(), 0);  // the value whose gradient buffer a value's is
  for (const auto& l : layers_) buffer[size_t(l->out)] = l->view ? buffer[size_t(l->in[0])] : l->out;
  std::vector<bool> buffer_written(act_.size(), false);
  auto written = [&](int value) { return buffer_written[size_t(buffer[size_t(value)])]; };
  auto set_written = [&](int value) { buffer_written[size_t(buffer[size_t(value)])] = true; };
  set_written(int(act_.size()) - 1);
  auto target = [&](int value) -> void* {
    if (diff_[size_t(value)] == nullptr) return nullptr;  // the model input (or a view of it): no gradient
    return written(value) ? scratch_ : diff_[size_t(value)];
  };
  // Adds `from` into `value`'s gradient, as the gradient-sum pass of layer `l`.
  auto sum_into = [&](const Layer& l, int value, const void* from) {
    const Span span(*this, l.name, l.node->kind, profile::Phase::grad_sum, l.out - 1);
    void* d = diff_[size_t(value)];
    add(dt_, d, from, d, numel(graph_.nodes[size_t(value - 1)].out_dims), stream_);
  };
  auto settle = [&](const Layer& l, int value, void* dst) {
    if (!dst) return;
    if (dst != diff_[size_t(value)]) sum_into(l, value, dst);
    set_written(value);
  };
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) {
    Layer& l = **it;
    const nn::Node& n = *l.node;
    if (l.view) continue;  // a view, or a relu run by the layer before it: their gradient is their input's
    const profile::NvtxRange range(l.backward_name.c_str());
    if (n.kind == ops::OpKind::add) {  // each input's gradient is the output's: copied, or added where one was written
      if (l.relu_after) {  // first the relu's mask, from the add's (clamped) output
        std::vector<int> to;  // the inputs that take a gradient
        for (const int v : {l.in[0], l.in[1]})
          if (v != 0 && diff_[size_t(v)] != nullptr) to.push_back(v);
        void* dy = diff_[size_t(l.out)];
        const bool in_one_pass = !to.empty() && (to.size() == 1 || buffer[size_t(to[0])] != buffer[size_t(to[1])]);  // not x + x
        {
          const Span span(*this, l.name, n.kind, profile::Phase::backward, l.out - 1);
          if (in_one_pass) {  // masked and handed to each input at once
            void* d1 = to.size() > 1 ? diff_[size_t(to[1])] : nullptr;
            relu_grad_to_inputs(dt_, act_[size_t(l.out)], dy, diff_[size_t(to[0])], written(to[0]), d1,
                                to.size() > 1 && written(to[1]), numel(n.out_dims), stream_);
          } else {
            relu_backward(dt_, act_[size_t(l.out)], dy, dy, numel(n.out_dims), stream_);  // masked in place, handed on below
          }
        }
        if (in_one_pass) {
          for (const int v : to) set_written(v);
          continue;
        }
      }
      for (const int v : {l.in[0], l.in[1]}) {
        if (v == 0 || diff_[size_t(v)] == nullptr) continue;
        if (written(v)) {
          sum_into(l, v, diff_[size_t(l.out)]);
        } else {
          const Span span(*this, l.name, n.kind, profile::Phase::backward, l.out - 1);
          ok(cudaMemcpyAsync(diff_[size_t(v)], diff_[size_t(l.out)], size_t(numel(n.out_dims)) * es, cudaMemcpyDeviceToDevice, stream_),
             "add backward");
          set_written(v);
        }
      }
      continue;
    }
    void* dx = l.in[0] == 0 || !n.needs_dx ? nullptr : target(l.in[0]);  // needs_dx: not of the model input
    // A convolution adds its input gradient into one written already itself, in cuDNN's
    // epilogue (plan::conv_adds_to_input_gradient_on_gpu): one read of that gradient instead of
    // a pass that reads both and writes the sum. On an H100 (2026-11-28) resnet18's eight such
    // passes, its residual blocks' inputs, took 0.48 ms of its 13.2 ms bf16 step at batch 1024.
    const bool add = dx == scratch_ && n.kind == ops::OpKind::conv2d;
    if (add) dx = diff_[size_t(l.in[0])];
    backward_layer(l, dx, add);
    if (l.in[0] != 0) settle(l, l.in[0], dx);
  }
}

// A convolution's weight gradient through cuDNN, into l.dwh.
void Network::conv_weight_grad(Layer& l, const void* x, const void* dy) {
  const nn::Node& n = *l.node;
  if (l.weight_grad_nchw) {  // the scratch buffer is free here: a dx summed through it was added in already
    const Dims &d = n.out_dims, &in = n.in_dims[0];
    change_layout(dt_, dy, scratch_, d[0], d[1], d[2] * d[3], Layout::nhwc, stream_);
    if (l.x_nchw) {
      change_layout(dt_, x, l.x_nchw, in[0], in[1], in[2] * in[3], Layout::nhwc, stream_);
      l.weight_grad_nchw->backward_filter(l.x_nchw, scratch_, l.dw_nchw, stream_);
      const int64_t k = n.attrs.kernel;
      change_layout(dt_, l.dw_nchw, l.dwh, d[1], in[1], k * k, Layout::nchw, stream_);  // [K, C, R*S] to [K, R*S, C]
    } else {
      l.weight_grad_nchw->backward_filter(x, scratch_, l.dwh, stream_);
    }
  } else {
    l.conv->backward_filter(x, dy, l.dwh, stream_);
  }
}

// Layer `l`'s backward pass: its parameters' gradients, and its input's into `dx` (null: none),
// added to what dx holds where `add` (a convolution's only).
// A convolution's and a linear layer's two passes are spans of their own (backward-weight, then
// backward-data), as the CPU engine's primitives are: the profile then says which pass is slow.
void Network::backward_layer(Layer& l, void* dx, bool add) {
  const nn::Node& n = *l.node;
  const void* x = act_[size_t(l.in[0])];
  const void* y = act_[size_t(l.out)];
  const void* dy = diff_[size_t(l.out)];
  const int64_t count = numel(n.out_dims);
  auto pass = [&](profile::Phase phase) { return Span(*this, l.name, n.kind, phase, l.out - 1); };
  if (n.kind == ops::OpKind::conv2d) {
    {
      const Span weights = pass(profile::Phase::backward_weight);
      if (l.own_weight_grad)
        small_conv_weight_grad(dt_, opts_.layout == Layout::nhwc, l.shape, x, dy, l.dwh, conv_workspace_, stream_);
      else
        conv_weight_grad(l, x, dy);
      if (l.db) conv_bias_grad(dt_, opts_.layout, n.out_dims, dy, l.db, stream_);
    }
    if (dx) {
      const Span data = pass(profile::Phase::backward_data);
      l.conv->backward_data(l.wh, dy, dx, stream_, add);
    }
    return;
  }
  if (n.kind == ops::OpKind::linear) {
    {
      // The relu's gradient becomes the linear's, in place, before the GEMMs read it (its time
      // counts with the weight gradient's, fused as it is with the bias gradient).
      const Span weights = pass(profile::Phase::backward_weight);
      if (l.relu_after) {
        void* g = diff_[size_t(l.out)];
        if (l.db) relu_bias_grad(dt_, y, g, l.db, n.out_dims[0], n.out_dims[1], stream_);
        else relu_backward(dt_, y, g, g, count, stream_);
      } else if (l.db && !l.bwd_weight->fuses_bias_grad()) {
        bias_grad(dt_, dy, l.db, n.out_dims[0], n.out_dims[1], 1, stream_);
      }
      l.bwd_weight->run(x, dy, l.dw, stream_);
    }
    if (dx) {
      const Span data = pass(profile::Phase::backward_data);
      l.bwd_data->run(l.wh, dy, dx, stream_);
    }
    return;
  }
  const Span span = pass(profile::Phase::backward);
  switch (n.kind) {
    case ops::OpKind::batchnorm2d:
      batchnorm_backward(dt_, l.bn_shape, l.bn, x, y, dy, dx, l.dw, l.db, bn_workspace_, stream_);
      break;
    case ops::OpKind::relu:
      if (dx) relu_backward(dt_, y, dy, dx, count, stream_);
      break;
    case ops::OpKind::maxpool2d:
    case ops::OpKind::avgpool2d:
    case ops::OpKind::global_avgpool:
      if (dx) pool_backward(dt_, l.pool, x, dy, dx, stream_);
      break;
    case ops::OpKind::dropout:
      if (dx) dropout_backward(dt_, dy, l.mask, dx, count, float(n.attrs.p), stream_);
      break;
    case ops::OpKind::flatten:  // NCHW feature gradients back to NHWC maps
      if (dx) {
        const Dims& d = n.in_dims[0];
        change_layout(dt_, dy, dx, d[0], d[1], d[2] * d[3], Layout::nchw, stream_);
      }
      break;
    default: break;  // add: Network::backward
  }
}

// One more update: its learning rate and AdamW's bias corrections for the update count.
void Network::set_update_values(const nn::OptimizerConfig& opt, double lr) {
  ++steps_;
  host_args_.lr = float(lr);
  host_args_.adam_c1 = float(1.0 / (1.0 - std::pow(opt.beta1, double(steps_))));
  host_args_.adam_c2 = float(1.0 / (1.0 - std::pow(opt.beta2, double(steps_))));
}

void Network::step(const nn::OptimizerConfig& opt, double lr) {
  set_update_values(opt, lr);
  write_args();
  update(opt);
}

// One update of all parameters in one launch: it reads the conv weights' gradients from their
// half copies and writes the weights' half copies as it goes (mixed precision). fp16 first
// unscales and checks every gradient (the half ones into fp32), since an overflow anywhere skips
// the whole update; then the loss scale's bookkeeping.
void Network::update(const nn::OptimizerConfig& opt) {
  const Span span(*this, "optimizer", profile::Phase::optimizer);
  HalfCopies half;
  if (dt_ != DType::f32) half = {dt_, grads_h_, conv_span_, params_h_, matmul_span_};
  int32_t* skip = nullptr;
  if (loss_scale_) {
    unscale_and_check(grads_, param_count_, 1.f, &loss_scale_->found_inf, stream_, &loss_scale_->scale, dt_, grads_h_, conv_span_);
    skip = &loss_scale_->found_inf;
    half.grads = nullptr;  // now in grads_, unscaled
  }
  if (opt.name == "adamw") {
    check(state_v_ != nullptr, "this network was built for SGD", "construct it with NetworkOptions::optimizer = \"adamw\"");
    adamw_update(params_, grads_, state_m_, state_v_, param_count_, 0.f, float(opt.beta1), float(opt.beta2), float(opt.eps),
                 float(opt.weight_decay), 1, args_, skip, stream_, half);
  } else {
    sgd_update(params_, grads_, opt.momentum != 0 ? state_m_ : nullptr, param_count_, 0.f, float(opt.momentum),
               float(opt.weight_decay), opt.nesterov, args_, skip, stream_, half);
  }
  if (loss_scale_) update_loss_scale(loss_scale_, stream_);
}

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
