#include "ops/op.h"

#include <fmt/format.h>

#include "core/error.h"

namespace dlperf::ops {

std::string_view to_string(OpKind k) {
  switch (k) {
    case OpKind::conv2d: return "conv2d";
    case OpKind::batchnorm2d: return "batchnorm2d";
    case OpKind::relu: return "relu";
    case OpKind::maxpool2d: return "maxpool2d";
    case OpKind::avgpool2d: return "avgpool2d";
    case OpKind::global_avgpool: return "global_avgpool";
    case OpKind::linear: return "linear";
    case OpKind::flatten: return "flatten";
    case OpKind::add: return "add";
    case OpKind::dropout: return "dropout";
    case OpKind::softmax_cross_entropy: return "softmax_cross_entropy";
  }
  return "?";
}

static void need_rank(const Dims& d, size_t rank, std::string_view what) {
  check(d.size() == rank, fmt::format("{} expects a {}-D input, got {}", what, rank, dims_str(d)),
        rank == 4 ? "put it before 'flatten'" : "put 'flatten' before it");
}

static Dims window_shape(const OpAttrs& a, const Dims& in, int64_t out_c, std::string_view what) {
  need_rank(in, 4, what);
  check(a.kernel > 0 && a.stride > 0 && a.padding >= 0,
        fmt::format("{} needs kernel > 0, stride > 0, padding >= 0", what));
  check(a.padding * 2 <= a.kernel || what == "conv2d",
        fmt::format("{} padding {} is more than half the kernel {}", what, a.padding, a.kernel));
  const int64_t h = window_out(in[2], a.kernel, a.stride, a.padding);
  const int64_t w = window_out(in[3], a.kernel, a.stride, a.padding);
  check(h > 0 && w > 0,
        fmt::format("{} with kernel {} stride {} padding {} does not fit a {}x{} input", what,
                    a.kernel, a.stride, a.padding, in[2], in[3]),
        "use a smaller kernel or stride, or fewer pooling layers before it");
  return {in[0], out_c, h, w};
}

Dims infer_shape(OpKind kind, const OpAttrs& a, const std::vector<Dims>& in) {
  const Dims& x = in.at(0);
  switch (kind) {
    case OpKind::conv2d:
      check(a.out_channels > 0, "conv2d needs out_channels > 0");
      return window_shape(a, x, a.out_channels, "conv2d");
    case OpKind::maxpool2d:
    case OpKind::avgpool2d:
      return window_shape(a, x, x.size() == 4 ? x[1] : 0, to_string(kind));
    case OpKind::global_avgpool:
      need_rank(x, 4, "global_avgpool");
      return {x[0], x[1], 1, 1};
    case OpKind::batchnorm2d:
      need_rank(x, 4, "batchnorm2d");
      return x;
    case OpKind::relu:
    case OpKind::dropout:
      return x;
    case OpKind::flatten:
      check(x.size() >= 2, "flatten needs at least a 2-D input");
      return {x[0], numel(x) / x[0]};
    case OpKind::linear:
      need_rank(x, 2, "linear");
      check(a.out_features > 0, "linear needs out_features > 0");
      return {x[0], a.out_features};
    case OpKind::add:
      check(in.size() == 2 && in[0] == in[1],
            fmt::format("add needs two inputs of one shape, got {} and {}", dims_str(in[0]),
                        in.size() > 1 ? dims_str(in[1]) : "nothing"),
            "make both branches end in the same channels and size (a 1x1 conv shortcut with "
            "the same stride)");
      return x;
    case OpKind::softmax_cross_entropy:
      need_rank(x, 2, "softmax_cross_entropy");
      return {1};
  }
  throw Error("unknown op");
}

std::vector<ParamShape> param_shapes(OpKind kind, const OpAttrs& a, const Dims& in) {
  std::vector<ParamShape> p;
  switch (kind) {
    case OpKind::conv2d:
      p.push_back({"weight", {a.out_channels, in[1], a.kernel, a.kernel}});
      if (a.bias) p.push_back({"bias", {a.out_channels}});
      break;
    case OpKind::linear:
      p.push_back({"weight", {a.out_features, in[1]}});
      if (a.bias) p.push_back({"bias", {a.out_features}});
      break;
    case OpKind::batchnorm2d:
      p.push_back({"weight", {in[1]}});
      p.push_back({"bias", {in[1]}});
      break;
    default: break;
  }
  return p;
}

namespace {
// Along one axis: the kernel taps, over all output positions, that land inside the input.
double taps_inside(int64_t in, int64_t kernel, int64_t stride, int64_t pad) {
  int64_t inside = 0;
  for (int64_t o = 0, out = window_out(in, kernel, stride, pad); o < out; ++o)
    for (int64_t k = 0; k < kernel; ++k) inside += (o * stride - pad + k >= 0 && o * stride - pad + k < in) ? 1 : 0;
  return double(inside);
}
}  // namespace

double conv_taps_on_data_share(const OpAttrs& a, const Dims& x) {
  const double oh = double(window_out(x[2], a.kernel, a.stride, a.padding)), ow = double(window_out(x[3], a.kernel, a.stride, a.padding));
  const double all = oh * ow * double(a.kernel * a.kernel);
  return all > 0 ? taps_inside(x[2], a.kernel, a.stride, a.padding) * taps_inside(x[3], a.kernel, a.stride, a.padding) / all : 1.0;
}

OpCost cost(OpKind kind, const OpAttrs& a, const std::vector<Dims>& in, double e) {
  OpCost c;
  const Dims& x = in.at(0);
  const Dims y = infer_shape(kind, a, in);
  const double nx = double(numel(x)), ny = double(numel(y));
  c.output_bytes = ny * e;
  switch (kind) {
    case OpKind::conv2d: {
      const double macs = ny * double(x[1] * a.kernel * a.kernel);
      const double nw = double(a.out_channels * x[1] * a.kernel * a.kernel);
      const double nb = a.bias ? double(a.out_channels) : 0.0;
      // The taps on padding are the same in every pass: backward-data and backward-weight pair
      // the same outputs with the same inputs as forward.
      const double padding = 2 * macs * (1 - conv_taps_on_data_share(a, x));
      c.forward = {2 * macs + (a.bias ? ny : 0), (nx + nw + nb + ny) * e, padding};
      c.backward_data = {2 * macs, (ny + nw + nx) * e, padding};
      c.backward_weight = {2 * macs + (a.bias ? ny : 0), (nx + ny + nw + nb) * e, padding};
      c.saved_bytes = nx * e;  // the input, for the weight gradient
      break;
    }
    case OpKind::linear: {
      const double macs = double(x[0] * x[1] * a.out_features);
      const double nw = double(x[1] * a.out_features), nb = a.bias ? double(a.out_features) : 0;
      c.forward = {2 * macs + (a.bias ? ny : 0), (nx + nw + nb + ny) * e};
      c.backward_data = {2 * macs, (ny + nw + nx) * e};
      c.backward_weight = {2 * macs + (a.bias ? ny : 0), (nx + ny + nw + nb) * e};
      c.saved_bytes = nx * e;
      break;
    }
    case OpKind::batchnorm2d: {
      const double ch = double(x[1]);
      // mean, variance, normalize + scale + shift: ~8 flops an element; backward ~10.
      c.forward = {8 * nx, (2 * nx + 4 * ch) * e};
      c.backward_data = {10 * nx, (3 * nx + 4 * ch) * e};
      c.backward_weight = {0, 0};  // gamma/beta gradients come out of the same pass
      c.saved_bytes = (nx + 2 * ch) * e;
      break;
    }
    case OpKind::relu:
      c.forward = {nx, 2 * nx * e};
      c.backward_data = {nx, 3 * nx * e};
      c.saved_bytes = nx * e;
      break;
    case OpKind::dropout:
      c.forward = {2 * nx, (2 * nx) * e + nx};  // + 1-byte mask
      c.backward_data = {nx, (2 * nx) * e + nx};
      c.saved_bytes = nx;
      break;
    case OpKind::maxpool2d:
    case OpKind::avgpool2d: {
      const double window = double(a.kernel * a.kernel);
      c.forward = {ny * window, (nx + ny) * e + (kind == OpKind::maxpool2d ? ny : 0)};
      c.backward_data = {ny * window, (nx + ny) * e + (kind == OpKind::maxpool2d ? ny : 0)};
      c.saved_bytes = kind == OpKind::maxpool2d ? ny : 0;  // argmax indices, 1 byte each
      break;
    }
    case OpKind::global_avgpool:
      c.forward = {nx, (nx + ny) * e};
      c.backward_data = {nx, (nx + ny) * e};
      break;
    case OpKind::add:
      c.forward = {nx, 3 * nx * e};
      c.backward_data = {0, 3 * nx * e};
      break;
    case OpKind::flatten:
      c.output_bytes = 0;  // a view
      break;
    case OpKind::softmax_cross_entropy:
      c.forward = {5 * nx, nx * e};
      c.backward_data = {2 * nx, 2 * nx * e};
      c.saved_bytes = nx * e;  // probabilities
      c.output_bytes = e;
      break;
  }
  return c;
}

}  // namespace dlperf::ops
