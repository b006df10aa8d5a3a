// The one place that maps an op kind to its CPU implementation.
#include <fmt/format.h>

#include "backend/cpu/ops.h"
#include "core/error.h"

namespace dlperf::cpu {

std::unique_ptr<Op> make_conv2d(const ops::OpAttrs& a, const md& producer, const Dims& x,
                                const std::string& name, const OpOptions& o);
std::unique_ptr<Op> make_batchnorm(const ops::OpAttrs& a, const md& src, const Dims& x,
                                   const std::string& name, bool fuse_relu);
std::unique_ptr<Op> make_relu(const md& src);
std::unique_ptr<Op> make_add(const md& src, bool fuse_relu);
std::unique_ptr<Op> make_dropout(const ops::OpAttrs& a, const md& src, uint64_t seed);
std::unique_ptr<Op> make_flatten(const md& src, const Dims& x);
std::unique_ptr<Op> make_pool(ops::OpKind kind, const ops::OpAttrs& a, const md& src, const Dims& x);
std::unique_ptr<Op> make_linear(const ops::OpAttrs& a, const Dims& x, const std::string& name, const OpOptions& o);

Footprint conv2d_footprint(const ops::OpAttrs& a, const md& producer, const Dims& x, const OpOptions& o);
Footprint batchnorm_footprint(const md& src, const Dims& x, bool fuse_relu);
Footprint relu_footprint(const md& src);
Footprint add_footprint(const md& src);
Footprint dropout_footprint(const md& src);
Footprint flatten_footprint(const md& src, const Dims& x);
Footprint pool_footprint(ops::OpKind kind, const ops::OpAttrs& a, const md& src, const Dims& x);
Footprint linear_footprint(const ops::OpAttrs& a, const Dims& x, const OpOptions& o);

std::unique_ptr<Op> make_op(ops::OpKind kind, const ops::OpAttrs& a, const std::vector<md>& in,
                            const std::vector<Dims>& dims, const std::string& name, const OpOptions& o) {
  using ops::OpKind;
  check(!o.fuse_relu || kind == OpKind::batchnorm2d || kind == OpKind::add, "only batchnorm2d and add can fuse a relu");
  switch (kind) {
    case OpKind::conv2d: return make_conv2d(a, in[0], dims[0], name, o);
    case OpKind::batchnorm2d: return make_batchnorm(a, in[0], dims[0], name, o.fuse_relu);
    case OpKind::relu: return make_relu(in[0]);
    case OpKind::maxpool2d:
    case OpKind::avgpool2d:
    case OpKind::global_avgpool: return make_pool(kind, a, in[0], dims[0]);
    case OpKind::linear: return make_linear(a, dims[0], name, o);
    case OpKind::flatten: return make_flatten(in[0], dims[0]);
    case OpKind::add: return make_add(in[0], o.fuse_relu);
    case OpKind::dropout: return make_dropout(a, in[0], o.seed);
    case OpKind::softmax_cross_entropy: break;
  }
  throw Error(fmt::format("the CPU backend has no '{}' op for layer {}", ops::to_string(kind), name));
}

Footprint footprint(ops::OpKind kind, const ops::OpAttrs& a, const std::vector<md>& in, const std::vector<Dims>& dims,
                    const OpOptions& o) {
  using ops::OpKind;
  switch (kind) {
    case OpKind::conv2d: return conv2d_footprint(a, in[0], dims[0], o);
    case OpKind::batchnorm2d: return batchnorm_footprint(in[0], dims[0], o.fuse_relu);
    case OpKind::relu: return relu_footprint(in[0]);
    case OpKind::maxpool2d:
    case OpKind::avgpool2d:
    case OpKind::global_avgpool: return pool_footprint(kind, a, in[0], dims[0]);
    case OpKind::linear: return linear_footprint(a, dims[0], o);
    case OpKind::flatten: return flatten_footprint(in[0], dims[0]);
    case OpKind::add: return add_footprint(in[0]);  // the same with its relu fused in
    case OpKind::dropout: return dropout_footprint(in[0]);
    case OpKind::softmax_cross_entropy: break;
  }
  throw Error(fmt::format("the CPU backend has no '{}' op", ops::to_string(kind)));
}

}  // namespace dlperf::cpu
