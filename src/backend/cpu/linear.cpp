// linear (fully connected) over oneDNN inner product: y[N,O] = x[N,I] W[O,I]^T + b[O].
#include "backend/cpu/ops.h"

namespace dlperf::cpu {

namespace {
using namespace dnnl;

class Linear final : public Op {
 public:
  Linear(const ops::OpAttrs& a, const Dims& x, const std::string& name) {
    const Dims w = {a.out_features, x[1]};
    const md bias_md = a.bias ? md({a.out_features}, dt::f32, tag::a) : md();
    // Dense layers keep plain [N, features] activations: tiny, and the loss reads them.
    const md src = plain_md(x), dst = plain_md({x[0], a.out_features});
    auto fd = inner_product_forward::desc(prop_kind::forward_training, src, any_md(w), bias_md, dst);
    fwd_pd_ = inner_product_forward::primitive_desc(fd, default_attr(), engine());
    fwd_ = Prim::of<inner_product_forward>(fwd_pd_);
    auto bdd = inner_product_backward_data::desc(src, fwd_pd_.weights_desc(), dst);
    bwd_data_ = Prim::of<inner_product_backward_data>(
        inner_product_backward_data::primitive_desc(bdd, default_attr(), engine(), fwd_pd_));
    auto bwd = inner_product_backward_weights::desc(src, fwd_pd_.weights_desc(), bias_md, dst);
    bwd_weights_ = Prim::of<inner_product_backward_weights>(
        inner_product_backward_weights::primitive_desc(bwd, default_attr(), engine(), fwd_pd_));
    add_param(name + ".weight", w, fwd_pd_.weights_desc(), Init::uniform_fan_in, x[1]);
    if (a.bias) add_param(name + ".bias", {a.out_features}, bias_md, Init::uniform_fan_in, x[1]);
  }
  md input_md(int) const override { return fwd_pd_.src_desc(); }
  md output_md() const override { return fwd_pd_.dst_desc(); }
  void forward(const std::vector<memory>& in, const memory& out, bool) override {
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, in[0]}, {DNNL_ARG_WEIGHTS, params_[0]->value.mem}, {DNNL_ARG_DST, out}};
    if (params_.size() > 1) args.emplace(DNNL_ARG_BIAS, params_[1]->value.mem);
    run(fwd_, std::move(args));
  }
  void backward(const std::vector<memory>& in, const memory&, const memory& diff_out,
                const std::vector<memory>& diff_in) override {
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, in[0]},
                                         {DNNL_ARG_DIFF_DST, diff_out},
                                         {DNNL_ARG_DIFF_WEIGHTS, params_[0]->grad.mem}};
    if (params_.size() > 1) args.emplace(DNNL_ARG_DIFF_BIAS, params_[1]->grad.mem);
    run(bwd_weights_, std::move(args));
    if (diff_in[0])
      run(bwd_data_, {{DNNL_ARG_DIFF_DST, diff_out},
                      {DNNL_ARG_WEIGHTS, params_[0]->value.mem},
                      {DNNL_ARG_DIFF_SRC, diff_in[0]}});
  }

 private:
  inner_product_forward::primitive_desc fwd_pd_;
  Prim fwd_, bwd_data_, bwd_weights_;
};
}  // namespace

std::unique_ptr<Op> make_linear(const ops::OpAttrs& a, const Dims& x, const std::string& name) {
  return std::make_unique<Linear>(a, x, name);
}

}  // namespace dlperf::cpu
