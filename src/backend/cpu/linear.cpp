// linear (fully connected) over oneDNN inner product: y[N,O] = x[N,I] W[O,I]^T + b[O].
//
// bf16: as conv2d.cpp, the passes read bf16 copies of the input, weights and output gradient and
// accumulate in fp32; the output (the logits, for the last layer) and the gradients stay fp32.
#include "backend/cpu/ops.h"

namespace dlperf::cpu {

namespace {
using namespace dnnl;

class Linear final : public Op {
 public:
  Linear(const ops::OpAttrs& a, const Dims& x, const std::string& name, Compute compute) {
    const bool copies = makes_copies(compute);
    const dt low = copy_type(compute);
    const Dims w = {a.out_features, x[1]};
    const md bias_md = a.bias ? md({a.out_features}, dt::f32, tag::a) : md();
    // Dense layers keep plain [N, features] activations: tiny, and the loss reads them.
    const md src = with_type(plain_md(x), low), dst = plain_md({x[0], a.out_features});
    const md dy = with_type(dst, low);
    auto fd = inner_product_forward::desc(prop_kind::forward_training, src, with_type(any_md(w), low), bias_md, dst);
    fwd_pd_ = inner_product_forward::primitive_desc(fd, default_attr(), engine());
    fwd_ = Prim::of<inner_product_forward>(fwd_pd_);
    auto bdd = inner_product_backward_data::desc(src, fwd_pd_.weights_desc(), dy);
    bwd_data_ = Prim::of<inner_product_backward_data>(
        inner_product_backward_data::primitive_desc(bdd, default_attr(), engine(), fwd_pd_));
    // fp32 writes the weight gradient in the weights' layout; bf16 in the one oneDNN picks for
    // an fp32 gradient, which is then where the master weights live.
    auto bwd = inner_product_backward_weights::desc(src, copies ? any_md(w) : fwd_pd_.weights_desc(), bias_md, dy);
    auto bww_pd = inner_product_backward_weights::primitive_desc(bwd, default_attr(), engine(), fwd_pd_);
    bwd_weights_ = Prim::of<inner_product_backward_weights>(bww_pd);
    add_param(name + ".weight", w, bww_pd.diff_weights_desc(), Init::uniform_fan_in, x[1]);
    if (a.bias) add_param(name + ".bias", {a.out_features}, bias_md, Init::uniform_fan_in, x[1]);
    if (copies) {
      w_low_ = Mem(fwd_pd_.weights_desc(), MemCategory::parameters);
      dy_low_ = Mem(dy, MemCategory::activations);
    }
  }
  md input_md(int) const override { return fwd_pd_.src_desc(); }
  md output_md() const override { return fwd_pd_.dst_desc(); }
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
    if (diff_in[0]) run(bwd_data_, {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, weights().mem}, {DNNL_ARG_DIFF_SRC, diff_in[0]}});
  }

 private:
  /// The weights forward and backward-data read: the master weights, or their bf16 copy.
  const Mem& weights() const { return w_low_.empty() ? params_[0]->value : w_low_; }

  inner_product_forward::primitive_desc fwd_pd_;
  Prim fwd_, bwd_data_, bwd_weights_;
  Mem w_low_;   ///< copies: the weights' copy, refreshed from the master weights every forward
  Mem dy_low_;  ///< copies: the output gradient the backward passes read
};
}  // namespace

std::unique_ptr<Op> make_linear(const ops::OpAttrs& a, const Dims& x, const std::string& name, Compute compute) {
  return std::make_unique<Linear>(a, x, name, compute);
}

}  // namespace dlperf::cpu
