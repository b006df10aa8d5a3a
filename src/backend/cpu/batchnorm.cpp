// batchnorm2d over oneDNN, optionally with the following relu fused into it (one pass over
// the activation instead of two, forward and backward).
//
// oneDNN normalizes with the batch's biased variance, as PyTorch does; the running variance
// is updated with the unbiased one (n / (n - 1)), as PyTorch does.
//
// In bf16 (nhwc or nChw16c, whole vectors of 16 channels) training runs dlperf's own passes
// instead (batchnorm_bf16.h says why), which need no workspace for the fused relu: backward
// recomputes its mask from the input.
#include <algorithm>

#include "backend/cpu/batchnorm_bf16.h"
#include "backend/cpu/ops.h"

namespace dlperf::cpu {

namespace {
using namespace dnnl;

// The passes' descriptors: training forward, inference forward, backward.
struct BatchNormPasses {
  batch_normalization_forward::primitive_desc train, eval;
  batch_normalization_backward::primitive_desc bwd;
  BatchNormPasses(const md& src, float eps, bool fuse_relu) {
    auto flags = normalization_flags::use_scale | normalization_flags::use_shift;
    if (fuse_relu) flags |= normalization_flags::fuse_norm_relu;
    train = batch_normalization_forward::primitive_desc(
        batch_normalization_forward::desc(prop_kind::forward_training, src, eps, flags), default_attr(), engine());
    eval = batch_normalization_forward::primitive_desc(
        batch_normalization_forward::desc(prop_kind::forward_inference, src, eps, flags | normalization_flags::use_global_stats),
        default_attr(), engine());
    bwd = batch_normalization_backward::primitive_desc(batch_normalization_backward::desc(prop_kind::backward, src, src, eps, flags),
                                                       default_attr(), engine(), train);
  }
};

class BatchNorm final : public Op {
 public:
  BatchNorm(const ops::OpAttrs& a, const md& src, const Dims& x, const std::string& name,
            bool fuse_relu)
      : eps_(float(a.eps)), momentum_(float(a.momentum)), count_(x[0] * x[2] * x[3]) {
    src_ = src;
    name_ = name;
    const BatchNormPasses p(src, eps_, fuse_relu);
    train_pd_ = p.train;
    own_ = bf16_batchnorm_layout(src, x);
    fuse_relu_ = fuse_relu;
    eval_ = Prim::of<batch_normalization_forward>(p.eval);
    if (!own_) {
      train_ = Prim::of<batch_normalization_forward>(p.train);
      bwd_ = Prim::of<batch_normalization_backward>(p.bwd);
    }

    const md c_md({x[1]}, dt::f32, tag::a);
    add_param(name + ".weight", {x[1]}, c_md, Init::ones, 1);
    add_param(name + ".bias", {x[1]}, c_md, Init::zeros, 1);
    mean_ = Mem(c_md, MemCategory::activations);
    var_ = Mem(c_md, MemCategory::activations);
    running_mean = Mem(c_md, MemCategory::parameters);
    running_var = Mem(c_md, MemCategory::parameters);
    running_mean.zero();
    std::fill_n(running_var.f32(), x[1], 1.0f);
    if (fuse_relu && !own_) workspace_ = Mem(train_pd_.workspace_desc(), MemCategory::activations);
  }

  md input_md(int) const override { return src_; }
  md output_md() const override { return train_pd_.dst_desc(); }

  void forward(const std::vector<memory>& in, const memory& out, bool training) override {
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, in[0]},
                                         {DNNL_ARG_SCALE, params_[0]->value.mem},
                                         {DNNL_ARG_SHIFT, params_[1]->value.mem},
                                         {DNNL_ARG_DST, out}};
    if (!training) {
      args.emplace(DNNL_ARG_MEAN, running_mean.mem);
      args.emplace(DNNL_ARG_VARIANCE, running_var.mem);
      run(eval_, std::move(args));
      return;
    }
    if (own_) {
      const auto scope = profile::Scope::launch(profile::Phase::forward);  // a pass as a primitive's is
      bf16_batchnorm_forward(static_cast<const uint16_t*>(in[0].get_data_handle()), static_cast<uint16_t*>(out.get_data_handle()), *own_,
                             params_[0]->value.f32(), params_[1]->value.f32(), eps_, fuse_relu_, mean_.f32(), var_.f32());
    } else {
      args.emplace(DNNL_ARG_MEAN, mean_.mem);
      args.emplace(DNNL_ARG_VARIANCE, var_.mem);
      if (!workspace_.empty()) args.emplace(DNNL_ARG_WORKSPACE, workspace_.mem);
      run(train_, std::move(args));
    }
    const float m = momentum_;
    const float unbias = count_ > 1 ? float(count_) / float(count_ - 1) : 1.0f;
    const int64_t C = int64_t(floats_in(mean_.desc()));
    for (int64_t c = 0; c < C; ++c) {
      running_mean.f32()[c] = (1 - m) * running_mean.f32()[c] + m * mean_.f32()[c];
      running_var.f32()[c] = (1 - m) * running_var.f32()[c] + m * var_.f32()[c] * unbias;
    }
  }

  void backward(const std::vector<memory>& in, const memory&, const memory& diff_out,
                const std::vector<memory>& diff_in) override {
    if (own_) {
      const auto scope = profile::Scope::launch(profile::Phase::backward_data);  // filed as oneDNN's backward is
      bf16_batchnorm_backward(static_cast<const uint16_t*>(in[0].get_data_handle()), static_cast<const uint16_t*>(diff_out.get_data_handle()),
                              static_cast<uint16_t*>(diff_in[0].get_data_handle()), *own_, params_[0]->value.f32(), params_[1]->value.f32(),
                              eps_, fuse_relu_, mean_.f32(), var_.f32(), params_[0]->grad.f32(), params_[1]->grad.f32());
      return;
    }
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, in[0]},
                                         {DNNL_ARG_MEAN, mean_.mem},
                                         {DNNL_ARG_VARIANCE, var_.mem},
                                         {DNNL_ARG_DIFF_DST, diff_out},
                                         {DNNL_ARG_SCALE, params_[0]->value.mem},
                                         // oneDNN 2.6 counts shift as an input of backward too
                                         {DNNL_ARG_SHIFT, params_[1]->value.mem},
                                         {DNNL_ARG_DIFF_SRC, diff_in[0]},
                                         {DNNL_ARG_DIFF_SCALE, params_[0]->grad.mem},
                                         {DNNL_ARG_DIFF_SHIFT, params_[1]->grad.mem}};
    if (!workspace_.empty()) args.emplace(DNNL_ARG_WORKSPACE, workspace_.mem);
    run(bwd_, std::move(args));
  }

  std::vector<std::pair<std::string, Mem*>> buffers() override {
    return {{name_ + ".running_mean", &running_mean}, {name_ + ".running_var", &running_var}};
  }

 private:
  std::string name_;
  Mem running_mean, running_var;
  float eps_, momentum_;
  int64_t count_;
  md src_;
  batch_normalization_forward::primitive_desc train_pd_;
  std::optional<Bf16Vectors> own_;  ///< training runs dlperf's bf16 passes (bf16_batchnorm_layout)
  bool fuse_relu_ = false;
  Prim train_, eval_, bwd_;
  Mem mean_, var_, workspace_;
};
}  // namespace

Footprint batchnorm_footprint(const md& src, const Dims& x, bool fuse_relu) {
  const BatchNormPasses p(src, 1e-5f, fuse_relu);  // layouts and sizes do not depend on epsilon
  // As the constructor allocates: weight and bias; batch mean and variance; running ones; the
  // fused relu's mask.
  const size_t c = size_t(x[1]) * sizeof(float);
  Footprint f;
  f.inputs = {src};
  f.output = p.train.dst_desc();
  f.params = {c, c};
  f.buffers = {{MemCategory::activations, c}, {MemCategory::activations, c}, {MemCategory::parameters, c}, {MemCategory::parameters, c}};
  if (bf16_batchnorm_layout(src, x)) {  // dlperf's own training passes: no relu mask, no scratchpad of theirs
    f.scratchpad = p.eval.scratchpad_desc().get_size();
    return f;
  }
  if (fuse_relu) f.buffers.push_back({MemCategory::activations, p.train.workspace_desc().get_size()});
  f.scratchpad = std::max({p.train.scratchpad_desc().get_size(), p.eval.scratchpad_desc().get_size(), p.bwd.scratchpad_desc().get_size()});
  return f;
}

std::unique_ptr<Op> make_batchnorm(const ops::OpAttrs& a, const md& src, const Dims& x,
                                   const std::string& name, bool fuse_relu) {
  return std::make_unique<BatchNorm>(a, src, x, name, fuse_relu);
}

}  // namespace dlperf::cpu
