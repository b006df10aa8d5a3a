// relu, residual add (with the relu after it fused in where it is the add's only reader) and
// flatten work in whatever layout and data type (fp32 or bf16) they get; dropout is own code for
// fp32 (a bf16 network converts around it).
#include <omp.h>

#include <type_traits>

#include "backend/cpu/ops.h"
#include "core/error.h"
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

// The residual add is own code, one pass each way, in whatever layout its inputs share (a blocked
// one's padding stays zero: its inputs' and gradients' is). Where the relu after it is fused in
// (OpOptions::fuse_relu, plan::relu_fused_into_add), forward clamps the sum and backward masks the
// gradient by the output, so the relu needs no pass or buffers of its own. Not oneDNN's: its
// binary add with a relu post-op (2.6, Debian 12's) crashes on AVX-512 CPUs for nChw8c tensors
// whose channels are not a multiple of 16 (the layout a conv with few channels gives), and the
// gradient, handed to both inputs, is a pass with two outputs, which no primitive has (a relu
// backward and a copy move five tensors' bytes where this moves four).

template <class T, bool Relu>
void add_inputs(const T* __restrict a, const T* __restrict b, T* __restrict y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > hw::kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, float>) {
      const float sum = a[i] + b[i];
      y[i] = Relu && sum < 0.f ? 0.f : sum;
    } else {
      const float sum = from_bf16(a[i]) + from_bf16(b[i]);
      y[i] = to_bf16(Relu && sum < 0.f ? 0.f : sum);
    }
  }
}

// dy, masked where the output is not positive if `out` is given, to both inputs' gradients (a
// bf16 is positive iff its bits as int16 are: sign clear and not all zero).
template <class T>
void hand_gradient_to_both(const T* __restrict out, const T* __restrict dy, T* __restrict dx0, T* __restrict dx1,
                           int64_t n) {
  auto positive = [](T v) {
    if constexpr (std::is_same_v<T, float>) return v > 0.f;
    else return int16_t(v) > 0;
  };
#pragma omp parallel for schedule(static) if (n > hw::kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    const T g = out == nullptr || positive(out[i]) ? dy[i] : T(0);
    dx0[i] = g;
    if (dx1 != nullptr) dx1[i] = g;
  }
}

class Add final : public Op {
 public:
  Add(const md& src, bool fuse_relu) : src_(src), fuse_relu_(fuse_relu) {
    check(src.data_type() == dt::f32 || src.data_type() == dt::bf16, "add: fp32 or bf16 values only");
  }
  md input_md(int) const override { return src_; }
  md output_md() const override { return src_; }
  void forward(const std::vector<memory>& in, const memory& out, bool) override {
    const auto scope = profile::Scope::launch(profile::Phase::forward);  // filed as a primitive's pass is
    if (src_.data_type() == dt::f32) add_as<float>(in[0], in[1], out);
    else add_as<uint16_t>(in[0], in[1], out);
  }
  void backward(const std::vector<memory>&, const memory& out, const memory& diff_out,
                const std::vector<memory>& diff_in) override {
    // d(a+b)/da = d(a+b)/db = 1: the gradient passes to both inputs unchanged (through the relu's mask).
    const memory* to[2] = {nullptr, nullptr};
    int n = 0;
    for (const memory& d : diff_in)
      if (d) {
        check(n < 2, "add: at most two inputs' gradients to write");
        to[n++] = &d;
      }
    check(n > 0, "add: no input's gradient to write");
    const auto scope = profile::Scope::launch(profile::Phase::backward_data);
    if (src_.data_type() == dt::f32) hand_back_as<float>(out, diff_out, to);
    else hand_back_as<uint16_t>(out, diff_out, to);
  }

 private:
  template <class T>
  void add_as(const memory& a, const memory& b, const memory& y) const {
    (fuse_relu_ ? add_inputs<T, true> : add_inputs<T, false>)(as<T>(a), as<T>(b), as<T>(y), elements());
  }
  template <class T>
  void hand_back_as(const memory& out, const memory& dy, const memory* const (&to)[2]) const {
    hand_gradient_to_both(fuse_relu_ ? as<T>(out) : nullptr, as<T>(dy), as<T>(*to[0]), to[1] ? as<T>(*to[1]) : nullptr, elements());
  }
  // The element count of the buffer, padding included; every tensor the add touches has its layout.
  int64_t elements() const { return int64_t(src_.get_size() / (src_.data_type() == dt::f32 ? 4 : 2)); }
  template <class T>
  T* as(const memory& m) const {
    check(m.get_desc() == src_, "add: a tensor in another layout than the add's");
    return static_cast<T*>(m.get_data_handle());
  }
  md src_;
  bool fuse_relu_;
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
  return {{src, src}, src, {}, {}, 0};
}
Footprint dropout_footprint(const md& src) {
  const md f32 = with_type(src, dt::f32);
  return {{f32}, f32, {}, {{MemCategory::activations, floats_in(f32)}}, 0};
}
Footprint flatten_footprint(const md& src, const Dims& x) { return {{src}, Flatten(src, x).output_md(), {}, {}, 0}; }

std::unique_ptr<Op> make_relu(const md& src) { return std::make_unique<Relu>(src); }
std::unique_ptr<Op> make_add(const md& src, bool fuse_relu) { return std::make_unique<Add>(src, fuse_relu); }
std::unique_ptr<Op> make_dropout(const ops::OpAttrs& a, const md& src, uint64_t seed) {
  return std::make_unique<Dropout>(a, src, seed);
}
std::unique_ptr<Op> make_flatten(const md& src, const Dims& x) {
  return std::make_unique<Flatten>(src, x);
}

}  // namespace dlperf::cpu
