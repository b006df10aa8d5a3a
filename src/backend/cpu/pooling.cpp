// maxpool2d, avgpool2d (padding counted, PyTorch's default) and global average pooling.
#include "backend/cpu/ops.h"

namespace dlperf::cpu {

namespace {
using namespace dnnl;

class Pool final : public Op {
 public:
  Pool(algorithm alg, const md& src, const Dims& x, int64_t kh, int64_t kw, int64_t stride,
       int64_t pad)
      : src_(src) {
    const Dims y = {x[0], x[1], ops::window_out(x[2], kh, stride, pad),
                    ops::window_out(x[3], kw, stride, pad)};
    const memory::dims strides{stride, stride}, kernel{kh, kw}, padding{pad, pad};
    auto fd = pooling_forward::desc(prop_kind::forward_training, alg, src, any_md(y), strides,
                                    kernel, padding, padding);
    fwd_pd_ = pooling_forward::primitive_desc(fd, default_attr(), engine());
    fwd_ = Prim::of<pooling_forward>(fwd_pd_);
    auto bd = pooling_backward::desc(alg, src, fwd_pd_.dst_desc(), strides, kernel, padding, padding);
    bwd_ = Prim::of<pooling_backward>(
        pooling_backward::primitive_desc(bd, default_attr(), engine(), fwd_pd_));
    if (alg == algorithm::pooling_max)
      workspace_ = Mem(fwd_pd_.workspace_desc(), MemCategory::activations);
  }
  md input_md(int) const override { return src_; }
  md output_md() const override { return fwd_pd_.dst_desc(); }
  void forward(const std::vector<memory>& in, const memory& out, bool) override {
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, in[0]}, {DNNL_ARG_DST, out}};
    if (!workspace_.empty()) args.emplace(DNNL_ARG_WORKSPACE, workspace_.mem);
    run(fwd_, std::move(args));
  }
  void backward(const std::vector<memory>&, const memory&, const memory& diff_out,
                const std::vector<memory>& diff_in) override {
    std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, diff_out}, {DNNL_ARG_DIFF_SRC, diff_in[0]}};
    if (!workspace_.empty()) args.emplace(DNNL_ARG_WORKSPACE, workspace_.mem);
    run(bwd_, std::move(args));
  }

 private:
  md src_;
  pooling_forward::primitive_desc fwd_pd_;
  Prim fwd_, bwd_;
  Mem workspace_;
};
}  // namespace

std::unique_ptr<Op> make_pool(ops::OpKind kind, const ops::OpAttrs& a, const md& src, const Dims& x) {
  switch (kind) {
    case ops::OpKind::maxpool2d:
      return std::make_unique<Pool>(algorithm::pooling_max, src, x, a.kernel, a.kernel, a.stride, a.padding);
    case ops::OpKind::avgpool2d:
      return std::make_unique<Pool>(algorithm::pooling_avg_include_padding, src, x, a.kernel,
                                    a.kernel, a.stride, a.padding);
    default:  // global average pooling: one window over the whole plane
      return std::make_unique<Pool>(algorithm::pooling_avg_exclude_padding, src, x, x[2], x[3], 1, 0);
  }
}

}  // namespace dlperf::cpu
