// conv2d over oneDNN: forward, backward-data, backward-weights.
//
// Layouts: oneDNN's fast (JIT) kernels support only some layout combinations per pass; e.g. on
// AVX2 a 1-channel NCHW input has a JIT forward but only a reference backward-weights. So the
// op tries a short list of (input, output) layouts and keeps the first for which every pass it
// needs has a non-reference kernel. Backward-data may want its weights blocked differently from
// forward; then the weights are reordered for it each step (they are small).
#include <fmt/format.h>

#include <cstring>

#include "backend/cpu/ops.h"
#include "core/error.h"

namespace dlperf::cpu {

namespace {
using namespace dnnl;

bool is_ref(const dnnl::primitive_desc_base& pd) { return std::strncmp(pd.impl_info_str(), "ref", 3) == 0; }

class Conv2d final : public Op {
 public:
  Conv2d(const ops::OpAttrs& a, const md& producer, const Dims& x, const std::string& name, bool need_dx)
      : need_dx_(need_dx) {
    const Dims y = ops::infer_shape(ops::OpKind::conv2d, a, {x});
    const Dims w = {a.out_channels, x[1], a.kernel, a.kernel};
    strides_ = {a.stride, a.stride};
    pad_ = {a.padding, a.padding};
    bias_md_ = a.bias ? md({a.out_channels}, dt::f32, tag::a) : md();
    const md ax = any_md(x), ay = any_md(y);
    auto with = [](const Dims& d, tag t) { return md(to_dnnl(d), dt::f32, t); };
    const std::pair<md, md> candidates[] = {
        {producer, ay}, {ax, ay}, {with(x, tag::nChw8c), with(y, tag::nChw8c)},
        {with(x, tag::nhwc), with(y, tag::nhwc)}, {producer, md(to_dnnl(y), dt::f32, producer.data.format_desc.blocking.inner_nblks ? tag::nChw8c : tag::nchw)}};
    bool found = false;
    for (const auto& [src, dst] : candidates) {
      try {
        if (build(src, w, dst)) {
          found = true;
          break;
        }
      } catch (const dnnl::error&) {
      }
    }
    if (!found) build(ax, w, ay);  // oneDNN's own choice, even if only a reference kernel
    const int64_t fan_in = x[1] * a.kernel * a.kernel;
    add_param(name + ".weight", w, fwd_pd_.weights_desc(), Init::uniform_fan_in, fan_in);
    if (a.bias) add_param(name + ".bias", {a.out_channels}, bias_md_, Init::uniform_fan_in, fan_in);
    if (bww_pd_.diff_weights_desc() != fwd_pd_.weights_desc())
      dw_tmp_ = Mem(bww_pd_.diff_weights_desc(), MemCategory::workspace);
    if (need_dx_ && bwd_pd_.weights_desc() != fwd_pd_.weights_desc())
      w_bwd_ = Mem(bwd_pd_.weights_desc(), MemCategory::workspace);
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
    const memory& dw = dw_tmp_.empty() ? params_[0]->grad.mem : dw_tmp_.mem;
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, in[0]}, {DNNL_ARG_DIFF_DST, diff_out}, {DNNL_ARG_DIFF_WEIGHTS, dw}};
    if (params_.size() > 1) args.emplace(DNNL_ARG_DIFF_BIAS, params_[1]->grad.mem);
    run(bwd_weights_, std::move(args));
    if (!dw_tmp_.empty()) reorder(dw_tmp_.mem, params_[0]->grad.mem);
    if (!diff_in[0]) return;
    check(need_dx_, "conv2d: input gradient requested from an op built without it");
    if (!w_bwd_.empty()) reorder(params_[0]->value.mem, w_bwd_.mem);
    run(bwd_data_, {{DNNL_ARG_DIFF_DST, diff_out},
                    {DNNL_ARG_WEIGHTS, w_bwd_.empty() ? params_[0]->value.mem : w_bwd_.mem},
                    {DNNL_ARG_DIFF_SRC, diff_in[0]}});
  }

 private:
  // Creates the passes for this (src, dst) layout pair; true if all needed ones are JIT.
  bool build(const md& src, const Dims& w, const md& dst) {
    const md aw = any_md(w);
    auto fd = convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                        src, aw, bias_md_, dst, strides_, pad_, pad_);
    fwd_pd_ = convolution_forward::primitive_desc(fd, default_attr(), engine());
    auto wd = convolution_backward_weights::desc(algorithm::convolution_direct, fwd_pd_.src_desc(), aw,
                                                 bias_md_, fwd_pd_.dst_desc(), strides_, pad_, pad_);
    bww_pd_ = convolution_backward_weights::primitive_desc(wd, default_attr(), engine(), fwd_pd_);
    bool fast = !is_ref(fwd_pd_) && !is_ref(bww_pd_);
    if (need_dx_) {
      auto dd = convolution_backward_data::desc(algorithm::convolution_direct, fwd_pd_.src_desc(), aw,
                                                fwd_pd_.dst_desc(), strides_, pad_, pad_);
      bwd_pd_ = convolution_backward_data::primitive_desc(dd, default_attr(), engine(), fwd_pd_);
      fast = fast && !is_ref(bwd_pd_);
      bwd_data_ = Prim::of<convolution_backward_data>(bwd_pd_);
    }
    fwd_ = Prim::of<convolution_forward>(fwd_pd_);
    bwd_weights_ = Prim::of<convolution_backward_weights>(bww_pd_);
    return fast;
  }

  bool need_dx_;
  memory::dims strides_, pad_;
  md bias_md_;
  convolution_forward::primitive_desc fwd_pd_;
  convolution_backward_weights::primitive_desc bww_pd_;
  convolution_backward_data::primitive_desc bwd_pd_;
  Prim fwd_, bwd_data_, bwd_weights_;
  Mem dw_tmp_, w_bwd_;
};
}  // namespace

std::unique_ptr<Op> make_conv2d(const ops::OpAttrs& a, const md& producer, const Dims& x,
                                const std::string& name, bool need_dx) {
  return std::make_unique<Conv2d>(a, producer, x, name, need_dx);
}

}  // namespace dlperf::cpu
