// conv2d over oneDNN: forward, backward-data, backward-weights.
//
// Layouts: oneDNN's fast (JIT) kernels support only some layout combinations per pass; e.g. on
// AVX2 a 1-channel NCHW input has a JIT forward but only a reference backward-weights. So the
// op tries a short list of (input, output) layouts and keeps the first for which every pass it
// needs has a non-reference kernel. Backward-data may want its weights blocked differently from
// forward; then the weights are reordered for it each step (they are small).
//
// bf16 (Compute::bf16, CPUs with AVX512-BF16): conv2d is one of the ops PyTorch's CPU autocast
// runs in bf16. Each pass reads a bf16 input, bf16 weights and a bf16 output gradient and
// accumulates in fp32; it writes its output and its input's gradient in bf16, as autocast hands
// them on, so the layers between two convolutions run in bf16 too and nothing is converted there.
// The first layer's input (fp32 from the loader) and an fp32 output gradient (the logits') are
// converted. The weight and bias gradients and the master weights stay fp32: the master weights
// are kept in the layout backward-weights writes their gradient in, and the bf16 copy the passes
// read is refreshed from them every forward pass.
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
  Conv2d(const ops::OpAttrs& a, const md& producer, const Dims& x, const std::string& name, const OpOptions& o)
      : need_dx_(o.need_dx), copies_(makes_copies(o.compute)), low_(copy_type(o.compute)),
        out_type_(o.fp32_output ? dt::f32 : low_) {
    const Dims y = ops::infer_shape(ops::OpKind::conv2d, a, {x});
    const Dims w = {a.out_channels, x[1], a.kernel, a.kernel};
    strides_ = {a.stride, a.stride};
    pad_ = {a.padding, a.padding};
    bias_md_ = a.bias ? md({a.out_channels}, dt::f32, tag::a) : md();
    const md ax = any_md(x), ay = with_type(any_md(y), out_type_);
    auto with = [](const Dims& d, tag t, dt type = dt::f32) { return md(to_dnnl(d), type, t); };
    std::vector<std::pair<md, md>> candidates;
    if (!copies_) {
      candidates = {{producer, ay}, {ax, ay}, {with(x, tag::nChw8c), with(y, tag::nChw8c)},
                    {with(x, tag::nhwc), with(y, tag::nhwc)},
                    {producer, with(y, producer.data.format_desc.blocking.inner_nblks ? tag::nChw8c : tag::nchw)}};
    } else {
      // A producer in another type (the fp32 model input) is converted anyway, so its layout is
      // no candidate.
      if (producer.data_type() == low_) candidates.push_back({producer, ay});
      candidates.insert(candidates.end(), {{with_type(ax, low_), ay},
                                           {with(x, tag::nChw16c, low_), with(y, tag::nChw16c, out_type_)},
                                           {with(x, tag::nhwc, low_), with(y, tag::nhwc, out_type_)}});
    }
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
    if (!found) build(with_type(ax, low_), w, ay);  // oneDNN's own choice, even if only a reference kernel
    const int64_t fan_in = x[1] * a.kernel * a.kernel;
    const md master = copies_ ? bww_pd_.diff_weights_desc() : fwd_pd_.weights_desc();
    add_param(name + ".weight", w, master, Init::uniform_fan_in, fan_in);
    if (a.bias) add_param(name + ".bias", {a.out_channels}, bias_md_, Init::uniform_fan_in, fan_in);
    if (copies_) w_fwd_ = Mem(fwd_pd_.weights_desc(), MemCategory::parameters);
    if (bww_pd_.diff_weights_desc() != master) dw_tmp_ = Mem(bww_pd_.diff_weights_desc(), MemCategory::workspace);
    if (need_dx_ && bwd_pd_.weights_desc() != fwd_pd_.weights_desc())
      w_bwd_ = Mem(bwd_pd_.weights_desc(), MemCategory::workspace);
    if (bww_pd_.diff_dst_desc() != fwd_pd_.dst_desc()) dy_low_ = Mem(bww_pd_.diff_dst_desc(), MemCategory::activations);
  }

  md input_md(int) const override { return fwd_pd_.src_desc(); }
  md output_md() const override { return fwd_pd_.dst_desc(); }

  void forward(const std::vector<memory>& in, const memory& out, bool) override {
    if (!w_fwd_.empty()) reorder(params_[0]->value.mem, w_fwd_.mem);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, in[0]}, {DNNL_ARG_WEIGHTS, weights().mem}, {DNNL_ARG_DST, out}};
    if (params_.size() > 1) args.emplace(DNNL_ARG_BIAS, params_[1]->value.mem);
    run(fwd_, std::move(args));
  }

  void backward(const std::vector<memory>& in, const memory&, const memory& diff_out,
                const std::vector<memory>& diff_in) override {
    const memory& dw = dw_tmp_.empty() ? params_[0]->grad.mem : dw_tmp_.mem;
    if (!dy_low_.empty()) reorder(diff_out, dy_low_.mem);
    const memory& dy = dy_low_.empty() ? diff_out : dy_low_.mem;
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, in[0]}, {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_WEIGHTS, dw}};
    if (params_.size() > 1) args.emplace(DNNL_ARG_DIFF_BIAS, params_[1]->grad.mem);
    run(bwd_weights_, std::move(args));
    if (!dw_tmp_.empty()) reorder(dw_tmp_.mem, params_[0]->grad.mem);
    if (!diff_in[0]) return;
    check(need_dx_, "conv2d: input gradient requested from an op built without it");
    if (!w_bwd_.empty()) reorder(params_[0]->value.mem, w_bwd_.mem);
    run(bwd_data_, {{DNNL_ARG_DIFF_DST, dy},
                    {DNNL_ARG_WEIGHTS, w_bwd_.empty() ? weights().mem : w_bwd_.mem},
                    {DNNL_ARG_DIFF_SRC, diff_in[0]}});
  }

 private:
  // Creates the passes for this (src, dst) layout pair; true if all needed ones are JIT.
  // With copies the passes read bf16 weights and output gradients (the output's layout), and
  // backward-weights writes fp32 weight gradients.
  bool build(const md& src, const Dims& w, const md& dst) {
    const md aw = any_md(w), aw_low = with_type(aw, low_);
    auto fd = convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                        src, aw_low, bias_md_, dst, strides_, pad_, pad_);
    fwd_pd_ = convolution_forward::primitive_desc(fd, default_attr(), engine());
    const md dy = with_type(fwd_pd_.dst_desc(), low_);
    auto wd = convolution_backward_weights::desc(algorithm::convolution_direct, fwd_pd_.src_desc(), aw,
                                                 bias_md_, dy, strides_, pad_, pad_);
    bww_pd_ = convolution_backward_weights::primitive_desc(wd, default_attr(), engine(), fwd_pd_);
    bool fast = !is_ref(fwd_pd_) && !is_ref(bww_pd_);
    if (need_dx_) {
      auto dd = convolution_backward_data::desc(algorithm::convolution_direct, fwd_pd_.src_desc(), aw_low,
                                                dy, strides_, pad_, pad_);
      bwd_pd_ = convolution_backward_data::primitive_desc(dd, default_attr(), engine(), fwd_pd_);
      fast = fast && !is_ref(bwd_pd_);
      bwd_data_ = Prim::of<convolution_backward_data>(bwd_pd_);
    }
    fwd_ = Prim::of<convolution_forward>(fwd_pd_);
    bwd_weights_ = Prim::of<convolution_backward_weights>(bww_pd_);
    return fast;
  }

  /// The weights forward reads: the master weights, or their bf16 copy.
  const Mem& weights() const { return w_fwd_.empty() ? params_[0]->value : w_fwd_; }

  bool need_dx_;
  bool copies_;  ///< the passes read copies: bf16, or f32 in tests
  dt low_;       ///< the copies' type
  dt out_type_;  ///< what the output (and so its gradient) is stored in
  memory::dims strides_, pad_;
  md bias_md_;
  convolution_forward::primitive_desc fwd_pd_;
  convolution_backward_weights::primitive_desc bww_pd_;
  convolution_backward_data::primitive_desc bwd_pd_;
  Prim fwd_, bwd_data_, bwd_weights_;
  Mem dw_tmp_, w_bwd_;
  Mem w_fwd_;   ///< copies: the weights forward reads, refreshed from the master weights
  Mem dy_low_;  ///< an fp32 output's gradient converted for the backward passes
};
}  // namespace

std::unique_ptr<Op> make_conv2d(const ops::OpAttrs& a, const md& producer, const Dims& x,
                                const std::string& name, const OpOptions& o) {
  return std::make_unique<Conv2d>(a, producer, x, name, o);
}

}  // namespace dlperf::cpu
