// conv2d over oneDNN: forward, backward-data, backward-weights.
//
// Layouts: oneDNN's fast (JIT) kernels support only some layout combinations per pass; e.g. on
// AVX2 a 1-channel NCHW input has a JIT forward but only a reference backward-weights. So the
// op tries a short list of (input, output) layouts and keeps the first for which every pass it
// needs has a non-reference kernel. Backward-data may want its weights blocked differently from
// forward; then the weights are reordered for it each step (they are small).
//
// Algorithm: direct, or Winograd for the 3x3 convolutions where it pays on this CPU (winograd.cpp).
//
// bf16 (Compute::bf16, CPUs with AVX512-BF16): conv2d is one of the ops PyTorch's CPU autocast
// runs in bf16. Each pass reads a bf16 input, bf16 weights and a bf16 output gradient and
// accumulates in fp32; it writes its output and its input's gradient in bf16, as autocast hands
// them on, so the layers between two convolutions run in bf16 too and nothing is converted there.
// The first layer's input (fp32 from the loader) and an fp32 output gradient (the logits') are
// converted. The weight and bias gradients and the master weights stay fp32: the master weights
// are kept in the layout backward-weights writes their gradient in, and the bf16 copy the passes
// read is refreshed from them every forward pass. On CPUs with AMX (Xeons from Sapphire Rapids on)
// oneDNN 2.6 runs bf16 convolutions on its tiles only with nhwc activations, 7-12x faster than its
// AVX512-BF16 kernel on nChw16c (docs/benchmarks.md), so there the search takes nhwc first. Its
// passes on small output maps and strides run as matrix products instead (conv_gemm.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "backend/cpu/conv_gemm.h"
#include "backend/cpu/layouts.h"
#include "backend/cpu/ops.h"
#include "core/error.h"

namespace dlperf::cpu {

namespace {
using namespace dnnl;

bool is_ref(const dnnl::primitive_desc_base& pd) { return std::strncmp(pd.impl_info_str(), "ref", 3) == 0; }

/// The descriptors of a conv's passes for one layout pair (backward-data's empty without it).
struct ConvPasses {
  convolution_forward::primitive_desc fwd;
  convolution_backward_weights::primitive_desc bww;
  convolution_backward_data::primitive_desc bwd;
  bool fast = false;  ///< every pass needed has a non-reference kernel
};

/// A conv's shapes and types, and the layout search (shared by the op and its footprint).
struct ConvSetup {
  Dims x, y, w;
  memory::dims strides, pad;
  md bias;
  bool need_dx, copies;
  dt low;       ///< what the passes read: f32, or bf16 (the copies' type)
  dt out_type;  ///< what the output (and so its gradient) is stored in
  bool winograd;  ///< try Winograd first (winograd.cpp), direct where oneDNN turns it down

  ConvSetup(const ops::OpAttrs& a, const Dims& in, const OpOptions& o)
      : x(in), y(ops::infer_shape(ops::OpKind::conv2d, a, {in})), w({a.out_channels, in[1], a.kernel, a.kernel}),
        strides({a.stride, a.stride}), pad({a.padding, a.padding}),
        bias(a.bias ? md({a.out_channels}, dt::f32, tag::a) : md()), need_dx(o.need_dx), copies(makes_copies(o.compute)),
        low(copy_type(o.compute)), out_type(o.fp32_output ? dt::f32 : low), winograd(conv_runs_winograd(a, in, o.compute)) {}

  // The passes for this (src, dst) layout pair. With copies they read bf16 weights and output
  // gradients (the output's layout), and backward-weights writes fp32 weight gradients.
  ConvPasses passes(const md& src, const md& dst, algorithm alg = algorithm::convolution_direct) const {
    ConvPasses p;
    const md aw = any_md(w), aw_low = with_type(aw, low);
    auto fd = convolution_forward::desc(prop_kind::forward_training, alg, src, aw_low, bias, dst, strides, pad, pad);
    p.fwd = convolution_forward::primitive_desc(fd, default_attr(), engine());
    const md dy = with_type(p.fwd.dst_desc(), low);
    auto wd = convolution_backward_weights::desc(alg, p.fwd.src_desc(), aw, bias, dy, strides, pad, pad);
    p.bww = convolution_backward_weights::primitive_desc(wd, default_attr(), engine(), p.fwd);
    p.fast = !is_ref(p.fwd) && !is_ref(p.bww);
    if (need_dx) {
      auto dd = convolution_backward_data::desc(alg, p.fwd.src_desc(), aw_low, dy, strides, pad, pad);
      p.bwd = convolution_backward_data::primitive_desc(dd, default_attr(), engine(), p.fwd);
      p.fast = p.fast && !is_ref(p.bwd);
    }
    return p;
  }

  // The first candidate (input, output) layout pair whose passes are all fast; in bf16 the first
  // whose forward pass runs on AMX tiles, where one does. Else oneDNN's own choice, even if only
  // a reference kernel.
  ConvPasses search(const md& producer) const {
    const md ax = any_md(x), ay = with_type(any_md(y), out_type);
    auto with = [](const Dims& d, tag t, dt type = dt::f32) { return md(to_dnnl(d), type, t); };
    std::vector<std::pair<md, md>> candidates;
    if (!copies) {
      candidates = {{producer, ay}, {ax, ay}, {with(x, tag::nChw8c), with(y, tag::nChw8c)},
                    {with(x, tag::nhwc), with(y, tag::nhwc)},
                    {producer, with(y, producer.data.format_desc.blocking.inner_nblks ? tag::nChw8c : tag::nchw)}};
    } else {
      // A producer in another type (the fp32 model input) is converted anyway, so its layout is
      // no candidate.
      if (producer.data_type() == low) candidates.push_back({producer, ay});
      candidates.insert(candidates.end(), {{with_type(ax, low), ay},
                                           {with(x, tag::nChw16c, low), with(y, tag::nChw16c, out_type)},
                                           {with(x, tag::nhwc, low), with(y, tag::nhwc, out_type)}});
    }
    // Winograd on the first pair it takes (its kernel reads and writes nChw16c), else direct.
    const auto algorithms = winograd ? std::vector{algorithm::convolution_winograd, algorithm::convolution_direct}
                                     : std::vector{algorithm::convolution_direct};
    for (const algorithm alg : algorithms) {
      std::optional<ConvPasses> first;
      for (const auto& [src, dst] : candidates) {
        try {
          ConvPasses p = passes(src, dst, alg);
          if (!p.fast) continue;
          if (!copies || on_amx(p.fwd)) return p;
          if (!first) first = p;
        } catch (const dnnl::error&) {
        }
      }
      if (first) return *first;
    }
    return passes(with_type(ax, low), ay);
  }

  /// Which passes run as matrix products (conv_gemm.h): for bf16 passes on AMX tiles with nhwc
  /// activations, as the rule says.
  ConvGemmPasses gemm(const ConvPasses& p, const ops::OpAttrs& a) const {
    const md nhwc_x(to_dnnl(x), dt::bf16, tag::nhwc), nhwc_y(to_dnnl(y), dt::bf16, tag::nhwc);
    if (low != dt::bf16 || !on_amx(p.fwd) || p.fwd.src_desc() != nhwc_x || p.fwd.dst_desc() != nhwc_y) return {};
    ConvGemmPasses g = conv_gemm_passes(ConvGemmShape(a, x, y));
    g.backward_data = g.backward_data && need_dx;
    return g;
  }

  /// The layouts of the weights: the fp32 master (where backward-weights writes their gradient)
  /// and the copies forward and backward-data read.
  struct Weights {
    md master, fwd, bwd;
  };
  Weights weights(const ConvPasses& p, const ConvGemmPasses& g, const ops::OpAttrs& a) const {
    const ConvGemmShape s(a, x, y);
    Weights w;
    w.master = !copies ? p.fwd.weights_desc() : g.backward_weights ? ConvGemm::weights_md(s, dt::f32) : p.bww.diff_weights_desc();
    w.fwd = g.forward ? ConvGemm::weights_md(s, low) : p.fwd.weights_desc();
    if (need_dx) w.bwd = g.backward_data ? ConvGemm::weights_md(s, low) : p.bwd.weights_desc();
    return w;
  }
};

class Conv2d final : public Op {
 public:
  Conv2d(const ops::OpAttrs& a, const md& producer, const Dims& x, const std::string& name, const OpOptions& o)
      : need_dx_(o.need_dx) {
    const ConvSetup setup(a, x, o);
    const ConvPasses p = setup.search(producer);
    const ConvGemmPasses g = setup.gemm(p, a);
    const ConvSetup::Weights w = setup.weights(p, g, a);
    fwd_pd_ = p.fwd;
    algorithm_ = std::strstr(p.fwd.impl_info_str(), "wino") != nullptr ? "winograd" : on_amx(p.fwd) ? "amx" : "direct";
    if (g.any()) gemm_ = std::make_unique<ConvGemm>(ConvGemmShape(a, x, setup.y), g, a.bias);
    gemm_passes_ = g;
    if (!g.forward) fwd_ = Prim::of<convolution_forward>(p.fwd);
    if (!g.backward_weights) bwd_weights_ = Prim::of<convolution_backward_weights>(p.bww);
    if (need_dx_ && !g.backward_data) bwd_data_ = Prim::of<convolution_backward_data>(p.bwd);
    const int64_t fan_in = x[1] * a.kernel * a.kernel;
    add_param(name + ".weight", setup.w, w.master, Init::uniform_fan_in, fan_in);
    if (a.bias) add_param(name + ".bias", {a.out_channels}, setup.bias, Init::uniform_fan_in, fan_in);
    if (setup.copies) w_fwd_ = Mem(w.fwd, MemCategory::parameters);
    if (!g.backward_weights && p.bww.diff_weights_desc() != w.master) dw_tmp_ = Mem(p.bww.diff_weights_desc(), MemCategory::workspace);
    if (need_dx_ && w.bwd != w.fwd) w_bwd_ = Mem(w.bwd, MemCategory::workspace);
    if (p.bww.diff_dst_desc() != p.fwd.dst_desc()) dy_low_ = Mem(p.bww.diff_dst_desc(), MemCategory::activations);
  }

  md input_md(int) const override { return fwd_pd_.src_desc(); }
  md output_md() const override { return fwd_pd_.dst_desc(); }
  std::string algorithm() const override { return algorithm_; }
  std::string matrix_product_passes() const override { return gemm_passes_.names(); }

  void forward(const std::vector<memory>& in, const memory& out, bool) override {
    if (!w_fwd_.empty()) reorder(params_[0]->value.mem, w_fwd_.mem);
    const memory* bias = params_.size() > 1 ? &params_[1]->value.mem : nullptr;
    if (gemm_passes_.forward) return gemm_->forward(in[0], weights().mem, bias, out);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, in[0]}, {DNNL_ARG_WEIGHTS, weights().mem}, {DNNL_ARG_DST, out}};
    if (bias) args.emplace(DNNL_ARG_BIAS, *bias);
    run(fwd_, std::move(args));
  }

  void backward(const std::vector<memory>& in, const memory&, const memory& diff_out,
                const std::vector<memory>& diff_in) override {
    const memory& dw = dw_tmp_.empty() ? params_[0]->grad.mem : dw_tmp_.mem;
    if (!dy_low_.empty()) reorder(diff_out, dy_low_.mem);
    const memory& dy = dy_low_.empty() ? diff_out : dy_low_.mem;
    const memory* dbias = params_.size() > 1 ? &params_[1]->grad.mem : nullptr;
    if (gemm_passes_.backward_weights) {
      gemm_->backward_weights(in[0], dy, dw, dbias);
    } else {
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, in[0]}, {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_WEIGHTS, dw}};
      if (dbias) args.emplace(DNNL_ARG_DIFF_BIAS, *dbias);
      run(bwd_weights_, std::move(args));
    }
    if (!dw_tmp_.empty()) reorder(dw_tmp_.mem, params_[0]->grad.mem);
    if (!diff_in[0]) return;
    check(need_dx_, "conv2d: input gradient requested from an op built without it");
    if (!w_bwd_.empty()) reorder(params_[0]->value.mem, w_bwd_.mem);
    const memory& w = w_bwd_.empty() ? weights().mem : w_bwd_.mem;
    if (gemm_passes_.backward_data) return gemm_->backward_data(dy, w, diff_in[0]);
    run(bwd_data_, {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DIFF_SRC, diff_in[0]}});
  }

 private:
  /// The weights forward reads: the master weights, or their bf16 copy.
  const Mem& weights() const { return w_fwd_.empty() ? params_[0]->value : w_fwd_; }

  bool need_dx_;
  std::string algorithm_;  ///< "winograd" (oneDNN's jit_wino_4x3), "amx" (direct on AMX tiles) or "direct"
  convolution_forward::primitive_desc fwd_pd_;
  Prim fwd_, bwd_data_, bwd_weights_;
  Mem dw_tmp_, w_bwd_;
  Mem w_fwd_;   ///< copies: the weights forward reads, refreshed from the master weights
  Mem dy_low_;  ///< an fp32 output's gradient converted for the backward passes
  ConvGemmPasses gemm_passes_;       ///< the passes that run as matrix products
  std::unique_ptr<ConvGemm> gemm_;  ///< them, where there are any
};
}  // namespace

Footprint conv2d_footprint(const ops::OpAttrs& a, const md& producer, const Dims& x, const OpOptions& o) {
  const ConvSetup setup(a, x, o);
  const ConvPasses p = setup.search(producer);
  const ConvGemmPasses g = setup.gemm(p, a);
  const ConvSetup::Weights w = setup.weights(p, g, a);
  // As the constructor allocates.
  Footprint f;
  f.inputs = {p.fwd.src_desc()};
  f.output = p.fwd.dst_desc();
  f.params = {w.master.get_size()};
  if (a.bias) f.params.push_back(setup.bias.get_size());
  if (setup.copies) f.buffers.push_back({MemCategory::parameters, w.fwd.get_size()});
  if (!g.backward_weights && p.bww.diff_weights_desc() != w.master)
    f.buffers.push_back({MemCategory::workspace, p.bww.diff_weights_desc().get_size()});
  if (o.need_dx && w.bwd != w.fwd) f.buffers.push_back({MemCategory::workspace, w.bwd.get_size()});
  if (p.bww.diff_dst_desc() != p.fwd.dst_desc()) f.buffers.push_back({MemCategory::activations, p.bww.diff_dst_desc().get_size()});
  if (!g.forward) f.scratchpad = p.fwd.scratchpad_desc().get_size();
  if (!g.backward_weights) f.scratchpad = std::max(f.scratchpad, p.bww.scratchpad_desc().get_size());
  if (o.need_dx && !g.backward_data) f.scratchpad = std::max(f.scratchpad, p.bwd.scratchpad_desc().get_size());
  if (g.any()) f.scratchpad = std::max(f.scratchpad, ConvGemm(ConvGemmShape(a, x, setup.y), g, a.bias, false).scratchpad());
  return f;
}

bool conv_runs_amx(const ops::OpAttrs& a, const Dims& x) {
  if (!has_amx_kernels()) return false;
  // The search as for a conv fed fp32 (the model input): it tries the bf16 layouts, AMX's first.
  const ConvSetup setup(a, x, {.compute = Compute::bf16});
  return on_amx(setup.search(md(to_dnnl(x), dt::f32, tag::nchw)).fwd);
}

std::unique_ptr<Op> make_conv2d(const ops::OpAttrs& a, const md& producer, const Dims& x,
                                const std::string& name, const OpOptions& o) {
  return std::make_unique<Conv2d>(a, producer, x, name, o);
}

}  // namespace dlperf::cpu
