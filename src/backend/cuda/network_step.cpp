// The Network's training step: forward, loss, backward and the update, queued on its stream
// without waiting for the GPU, run eagerly or captured once in a CUDA graph and replayed.
#include <cuda_runtime.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/check.h"
#include "backend/cuda/network_internal.h"
#include "backend/cuda/small_conv.h"
#include "core/error.h"
#include "profile/nvtx.h"

namespace dlperf::cuda {

namespace {

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

}  // namespace dlperf::cuda
