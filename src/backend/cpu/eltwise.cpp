// relu, residual add and flatten work in whatever layout and data type (fp32 or bf16) they get;
// dropout is own code for fp32 (a bf16 network converts around it).
#include <omp.h>

#include "backend/cpu/ops.h"
#include "core/rng.h"
#include "hw/cpu_info.h"

namespace dlperf::cpu {

namespace {
using namespace dnnl;

class Relu final : public Op {
 public:
  struct Passes {
    eltwise_forward::primitive_desc fwd;
    eltwise_backward::primitive_desc bwd;
    explicit Passes(const md& src) {
      fwd = eltwise_forward::primitive_desc(
          eltwise_forward::desc(prop_kind::forward_training, algorithm::eltwise_relu, src, 0.f), default_attr(), engine());
      // Backward from the output (relu(x) > 0 iff x > 0), so the input need not be kept.
      auto fwd_dst = eltwise_forward::primitive_desc(
          eltwise_forward::desc(prop_kind::forward_training, algorithm::eltwise_relu_use_dst_for_bwd, src, 0.f), default_attr(),
          engine());
      bwd = eltwise_backward::primitive_desc(eltwise_backward::desc(algorithm::eltwise_relu_use_dst_for_bwd, src, src, 0.f),
                                             default_attr(), engine(), fwd_dst);
    }
  };
  explicit Relu(const md& src) : src_(src) {
    const Passes p(src);
    fwd_ = Prim::of<eltwise_forward>(p.fwd);
    bwd_ = Prim::of<eltwise_backward>(p.bwd);
  }
  md input_md(int) const override { return src_; }
  md output_md() const override { return src_; }
  void forward(const std::vector<memory>& in, const memory& out, bool) override {
    run(fwd_, {{DNNL_ARG_SRC, in[0]}, {DNNL_ARG_DST, out}});
  }
  void backward(const std::vector<memory>&, const memory& out, const memory& diff_out,
                const std::vector<memory>& diff_in) override {
    run(bwd_, {{DNNL_ARG_DST, out}, {DNNL_ARG_DIFF_DST, diff_out}, {DNNL_ARG_DIFF_SRC, diff_in[0]}});
  }

 private:
  md src_;
  Prim fwd_, bwd_;
};

class Add final : public Op {
 public:
  explicit Add(const md& src) : src_(src) { fwd_ = Prim::of<binary>(add_pass(src)); }
  md input_md(int) const override { return src_; }
  md output_md() const override { return src_; }
  void forward(const std::vector<memory>& in, const memory& out, bool) override {
    run(fwd_, {{DNNL_ARG_SRC_0, in[0]}, {DNNL_ARG_SRC_1, in[1]}, {DNNL_ARG_DST, out}});
  }
  void backward(const std::vector<memory>&, const memory&, const memory& diff_out,
                const std::vector<memory>& diff_in) override {
    // d(a+b)/da = d(a+b)/db = 1: the gradient passes to both inputs unchanged.
    for (const memory& d : diff_in)
      if (d) reorder(diff_out, d);
  }

 private:
  md src_;
  Prim fwd_;
};

uint64_t g_dropout_step = 0;

// dnnl 2.6 has no dropout primitive, so this is own code: one pass, mask kept as bytes. It takes
// fp32 only (input_md): in the presets it acts on a few thousand features per image after the
// convolutions, where converting a bf16 network's activations costs less than a second kernel.
class Dropout final : public Op {
 public:
  Dropout(const ops::OpAttrs& a, const md& src, uint64_t seed)
      : src_(with_type(src, dt::f32)), p_(float(a.p)), seed_(seed), n_(int64_t(floats_in(src_))),
        mask_(make_buffer(size_t(n_), MemCategory::activations)) {}
  md input_md(int) const override { return src_; }
  md output_md() const override { return src_; }
  void forward(const std::vector<memory>& in, const memory& out, bool training) override {
    const auto* x = static_cast<const float*>(in[0].get_data_handle());
    auto* y = static_cast<float*>(out.get_data_handle());
    const int64_t n = n_;
    uint8_t* mask = static_cast<uint8_t*>(mask_->data());
    if (!training || p_ == 0.f) {
      std::copy_n(x, n, y);
      return;
    }
    const float scale = 1.0f / (1.0f - p_);
    const uint64_t step_seed = hash_coords(seed_, g_dropout_step);
#pragma omp parallel for schedule(static) if (n > hw::kParallelMinElements)
    for (int64_t i = 0; i < n; ++i) {
      const bool keep = uniform01(mix64(step_seed ^ uint64_t(i))) >= p_;
      mask[i] = keep;
      y[i] = keep ? x[i] * scale : 0.f;
    }
  }
  void backward(const std::vector<memory>&, const memory&, const memory& diff_out,
                const std::vector<memory>& diff_in) override {
    const auto* dy = static_cast<const float*>(diff_out.get_data_handle());
    auto* dx = static_cast<float*>(diff_in[0].get_data_handle());
    const float scale = p_ == 0.f ? 1.f : 1.0f / (1.0f - p_);
    const int64_t n = n_;
    const uint8_t* mask = static_cast<const uint8_t*>(mask_->data());
#pragma omp parallel for schedule(static) if (n > hw::kParallelMinElements)
    for (int64_t i = 0; i < n; ++i) dx[i] = mask[i] ? dy[i] * scale : 0.f;
  }

 private:
  md src_;
  float p_;
  uint64_t seed_;
  int64_t n_;
  BufferPtr mask_;  // kept for backward: counted as activations
};

// Flatten is where blocked activations meet dense layers: reorder to plain NCHW and view the
// bytes as [N, C*H*W] (PyTorch's flatten order, so weights are interchangeable).
class Flatten final : public Op {
 public:
  Flatten(const md& src, const Dims& x)
      : src_(src), plain4_(with_type(plain_md(x), src.data_type())),
        out_(with_type(plain_md({x[0], numel(x) / x[0]}), src.data_type())) {}
  md input_md(int) const override { return src_; }
  md output_md() const override { return out_; }
  void forward(const std::vector<memory>& in, const memory& out, bool) override {
    reorder(in[0], memory(plain4_, engine(), out.get_data_handle()));
  }
  void backward(const std::vector<memory>&, const memory&, const memory& diff_out,
                const std::vector<memory>& diff_in) override {
    reorder(memory(plain4_, engine(), diff_out.get_data_handle()), diff_in[0]);
  }

 private:
  md src_, plain4_, out_;
};
}  // namespace

void set_dropout_step(uint64_t step) { g_dropout_step = step; }

dnnl::binary::primitive_desc add_pass(const md& m) {
  return binary::primitive_desc(binary::desc(algorithm::binary_add, m, m, m), default_attr(), engine());
}

// As the constructors allocate (no memory but the dropout mask and the primitives' scratchpads).
Footprint relu_footprint(const md& src) {
  const Relu::Passes p(src);
  return {{src}, src, {}, {}, std::max(p.fwd.scratchpad_desc().get_size(), p.bwd.scratchpad_desc().get_size())};
}
Footprint add_footprint(const md& src) {
  return {{src, src}, src, {}, {}, add_pass(src).scratchpad_desc().get_size()};
}
Footprint dropout_footprint(const md& src) {
  const md f32 = with_type(src, dt::f32);
  return {{f32}, f32, {}, {{MemCategory::activations, floats_in(f32)}}, 0};
}
Footprint flatten_footprint(const md& src, const Dims& x) { return {{src}, Flatten(src, x).output_md(), {}, {}, 0}; }

std::unique_ptr<Op> make_relu(const md& src) { return std::make_unique<Relu>(src); }
std::unique_ptr<Op> make_add(const md& src) { return std::make_unique<Add>(src); }
std::unique_ptr<Op> make_dropout(const ops::OpAttrs& a, const md& src, uint64_t seed) {
  return std::make_unique<Dropout>(a, src, seed);
}
std::unique_ptr<Op> make_flatten(const md& src, const Dims& x) {
  return std::make_unique<Flatten>(src, x);
}

}  // namespace dlperf::cpu
