// linear (fully connected) over oneDNN inner product: y[N,O] = x[N,I] W[O,I]^T + b[O].
//
// bf16: as conv2d.cpp, the passes read a bf16 input, weights and output gradient, accumulate in
// fp32 and write the output and input gradient in bf16, except the logits (fp32_output), which the
// loss reads in fp32. The weight and bias gradients and the master weights stay fp32.
#include <algorithm>

#include "backend/cpu/layouts.h"
#include "backend/cpu/ops.h"
#include "core/error.h"

namespace dlperf::cpu {

namespace {
using namespace dnnl;

// The passes' descriptors: forward and backward-weights fix the weights' layouts.
struct LinearPasses {
  inner_product_forward::primitive_desc fwd;
  inner_product_backward_weights::primitive_desc bww;
  inner_product_backward_data::primitive_desc bwd;
  md src, dst, dy, bias;
  LinearPasses(const Dims& x, int64_t out_features, bool bias_on, Compute compute, bool fp32_output) {
    const dt low = copy_type(compute);
    const Dims w = {out_features, x[1]};
    bias = bias_on ? md({out_features}, dt::f32, tag::a) : md();
    // Dense layers keep plain [N, features] activations: tiny, and the loss reads them.
    src = with_type(plain_md(x), low);
    dst = with_type(plain_md({x[0], out_features}), fp32_output ? dt::f32 : low);
    dy = with_type(dst, low);
    fwd = inner_product_forward::primitive_desc(
        inner_product_forward::desc(prop_kind::forward_training, src, with_type(any_md(w), low), bias, dst), default_attr(), engine());
    // fp32 writes the weight gradient in the weights' layout; bf16 in the one oneDNN picks for
    // an fp32 gradient, which is then where the master weights live.
    auto bwd = inner_product_backward_weights::desc(src, makes_copies(compute) ? any_md(w) : fwd.weights_desc(), bias, dy);
    bww = inner_product_backward_weights::primitive_desc(bwd, default_attr(), engine(), fwd);
    this->bwd = inner_product_backward_data::primitive_desc(inner_product_backward_data::desc(src, fwd.weights_desc(), dy),
                                                            default_attr(), engine(), fwd);
  }
};

class Linear final : public Op {
 public:
  Linear(const ops::OpAttrs& a, const Dims& x, const std::string& name, const OpOptions& o) : need_dx_(o.need_dx) {
    const bool copies = makes_copies(o.compute);
    const LinearPasses passes(x, a.out_features, a.bias, o.compute, o.fp32_output);
    const Dims w = {a.out_features, x[1]};
    const md& dy = passes.dy;
    fwd_pd_ = passes.fwd;
    fwd_ = Prim::of<inner_product_forward>(fwd_pd_);
    if (need_dx_) bwd_data_ = Prim::of<inner_product_backward_data>(passes.bwd);  // not for a layer reading the model input
    bwd_weights_ = Prim::of<inner_product_backward_weights>(passes.bww);
    add_param(name + ".weight", w, passes.bww.diff_weights_desc(), Init::uniform_fan_in, x[1]);
    if (a.bias) add_param(name + ".bias", {a.out_features}, passes.bias, Init::uniform_fan_in, x[1]);
    if (copies) w_low_ = Mem(fwd_pd_.weights_desc(), MemCategory::parameters);
    if (dy != passes.dst) dy_low_ = Mem(dy, MemCategory::activations);
  }
  md input_md(int) const override { return fwd_pd_.src_desc(); }
  md output_md() const override { return fwd_pd_.dst_desc(); }
  std::string algorithm() const override { return on_amx(fwd_pd_) ? "amx" : ""; }
  void forward(const std::vector<memory>& in, const memory& out, bool) override {
    if (!w_low_.empty()) reorder(params_[0]->value.mem, w_low_.mem);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, in[0]}, {DNNL_ARG_WEIGHTS, weights().mem}, {DNNL_ARG_DST, out}};
    if (params_.size() > 1) args.emplace(DNNL_ARG_BIAS, params_[1]->value.mem);
    run(fwd_, std::move(args));
  }
  void backward(const std::vector<memory>& in, const memory&, const memory& diff_out,
                const std::vector<memory>& diff_in) override {
    if (!dy_low_.empty()) reorder(diff_out, dy_low_.mem);
    const memory& dy = dy_low_.empty() ? diff_out : dy_low_.mem;
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, in[0]}, {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_WEIGHTS, params_[0]->grad.mem}};
    if (params_.size() > 1) args.emplace(DNNL_ARG_DIFF_BIAS, params_[1]->grad.mem);
    run(bwd_weights_, std::move(args));
    if (!diff_in[0]) return;
    check(need_dx_, "linear: input gradient requested from an op built without it");
    run(bwd_data_, {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, weights().mem}, {DNNL_ARG_DIFF_SRC, diff_in[0]}});
  }

 private:
  /// The weights forward and backward-data read: the master weights, or their bf16 copy.
  const Mem& weights() const { return w_low_.empty() ? params_[0]->value : w_low_; }

  bool need_dx_;
  inner_product_forward::primitive_desc fwd_pd_;
  Prim fwd_, bwd_data_, bwd_weights_;
  Mem w_low_;   ///< copies: the weights' copy, refreshed from the master weights every forward
  Mem dy_low_;  ///< an fp32 output's gradient (the logits') converted for the backward passes
};
}  // namespace

bool linear_runs_amx(const ops::OpAttrs& a, const Dims& x, bool logits) {
  return has_amx_kernels() && on_amx(LinearPasses(x, a.out_features, a.bias, Compute::bf16, logits).fwd);
}

Footprint linear_footprint(const ops::OpAttrs& a, const Dims& x, const OpOptions& o) {
  const LinearPasses p(x, a.out_features, a.bias, o.compute, o.fp32_output);
  // As the constructor allocates.
  Footprint f;
  f.inputs = {p.fwd.src_desc()};
  f.output = p.fwd.dst_desc();
  f.params = {p.bww.diff_weights_desc().get_size()};
  if (a.bias) f.params.push_back(p.bias.get_size());
  if (makes_copies(o.compute)) f.buffers.push_back({MemCategory::parameters, p.fwd.weights_desc().get_size()});
  if (p.dy != p.dst) f.buffers.push_back({MemCategory::activations, p.dy.get_size()});
  // The shared scratchpad grows to the passes that run: no backward-data without need_dx.
  f.scratchpad = std::max(p.fwd.scratchpad_desc().get_size(), p.bww.scratchpad_desc().get_size());
  if (o.need_dx) f.scratchpad = std::max(f.scratchpad, p.bwd.scratchpad_desc().get_size());
  return f;
}

std::unique_ptr<Op> make_linear(const ops::OpAttrs& a, const Dims& x, const std::string& name, const OpOptions& o) {
  return std::make_unique<Linear>(a, x, name, o);
}

}  // namespace dlperf::cpu
