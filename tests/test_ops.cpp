// Every CPU op against the float64 reference, forward and all gradients, and every reference
// gradient against finite differences. The scalar checked is L = sum(y * r) for a fixed random
// r, so dL/dy = r.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <ostream>
#include <thread>
#include <tuple>
#include <vector>

#include "backend/cpu/batchnorm_bf16.h"
#include "backend/cpu/conv_gemm.h"
#include "backend/cpu/layouts.h"
#include "core/error.h"
#include "core/tensor.h"
#include "hw/cpu_info.h"
#include "op_harness.h"

namespace dlperf::test {
namespace {

using ops::OpAttrs;
using ops::OpKind;

constexpr double kF32Tol = 2e-5;  // f32 vs f64, relative to the largest value

OpAttrs conv_attrs(int64_t out, int64_t k, int64_t stride, int64_t pad, bool bias) {
  OpAttrs a;
  a.out_channels = out, a.kernel = k, a.stride = stride, a.padding = pad, a.bias = bias;
  return a;
}

struct ConvCase {
  Dims x;
  OpAttrs a;
};

// The case as gtest prints it, and so as ctest names it (gtest_discover_tests): without a
// PrintTo, gtest printed the struct's bytes, heap pointers and padding included, so the names
// changed from build to build.
void PrintTo(const ConvCase& c, std::ostream* os) {
  *os << dims_str(c.x) << "_out" << c.a.out_channels << "_k" << c.a.kernel << "s" << c.a.stride << "p" << c.a.padding
      << (c.a.bias ? "_bias" : "");
}

class Conv2dTest : public ::testing::TestWithParam<ConvCase> {};

// A conv's random input, weights, bias and output gradient, and its float64 reference passes.
struct ConvData {
  Vec x, w, b, dy;
  std::vector<Vec> params;  ///< w, and b with a bias
  Vec y, dx, dw, db;        ///< the reference's
  ConvData(const Dims& xd, const OpAttrs& a, uint64_t seed) {
    const Dims wd = {a.out_channels, xd[1], a.kernel, a.kernel};
    x = random_vec(size_t(numel(xd)), seed), w = random_vec(size_t(numel(wd)), seed + 1, -0.5, 0.5);
    if (a.bias) b = random_vec(size_t(a.out_channels), seed + 2);
    dy = random_vec(size_t(numel(ops::infer_shape(OpKind::conv2d, a, {xd}))), seed + 3);
    params = {w};
    if (a.bias) params.push_back(b);
    y = ref::conv2d_forward(x, xd, w, b, a);
    ref::conv2d_backward(x, xd, w, a, dy, dx, dw, db);
  }
  void expect_matched_by(const CpuRun& r) const {
    EXPECT_LT(rel_err(r.y, y), kF32Tol);
    EXPECT_LT(rel_err(r.dx[0], dx), kF32Tol);
    EXPECT_LT(rel_err(r.dparams[0], dw), kF32Tol);
    if (!b.empty()) {
      EXPECT_LT(rel_err(r.dparams[1], db), kF32Tol);
    }
  }
};

TEST_P(Conv2dTest, MatchesReferenceForwardAndBackward) {
  const auto& [xd, a] = GetParam();
  const ConvData d(xd, a, 1);
  d.expect_matched_by(run_cpu(OpKind::conv2d, a, {xd}, {d.x}, d.params, d.dy));
}

INSTANTIATE_TEST_SUITE_P(Shapes, Conv2dTest,
                         ::testing::Values(ConvCase{{2, 3, 8, 8}, conv_attrs(8, 3, 1, 1, true)},
                                           ConvCase{{2, 1, 7, 7}, conv_attrs(4, 3, 1, 1, false)},
                                           ConvCase{{2, 8, 9, 9}, conv_attrs(16, 3, 2, 1, false)},
                                           ConvCase{{1, 16, 6, 6}, conv_attrs(8, 1, 2, 0, true)},
                                           ConvCase{{2, 5, 6, 5}, conv_attrs(3, 5, 1, 2, true)}));

TEST(Conv2dTest, SkipsDataGradientWhenNotNeeded) {
  const Dims xd = {2, 3, 6, 6};
  auto a = conv_attrs(4, 3, 1, 1, true);
  const Dims yd = ops::infer_shape(OpKind::conv2d, a, {xd});
  Vec x = random_vec(72 * 3, 5), w = random_vec(4 * 27, 6), b = random_vec(4, 7), dy = random_vec(size_t(numel(yd)), 8);
  auto r = run_cpu(OpKind::conv2d, a, {xd}, {x}, {w, b}, dy, {.want_dx = false});
  Vec dx, dw, db;
  ref::conv2d_backward(x, xd, w, a, dy, dx, dw, db);
  EXPECT_LT(rel_err(r.dparams[0], dw), kF32Tol);
}

// 3x3 convolutions may run as Winograd (oneDNN's F(4x4, 3x3) kernel on AVX-512 CPUs; elsewhere
// the conv falls back to direct): forced here on shapes the rule would leave direct, odd sizes,
// partial tiles, no padding, a batch of one, and a plain input that oneDNN's kernel cannot read.
TEST(Conv2dTest, WinogradMatchesReferenceForwardAndBackward) {
  const bool kernel_here = cpu::winograd_kernel_here();
  const cpu::ScopedWinograd every(cpu::WinogradUse::every_3x3);
  const std::vector<ConvCase> cases = {{{2, 32, 8, 8}, conv_attrs(32, 3, 1, 1, true)},
                                       {{3, 16, 7, 9}, conv_attrs(48, 3, 1, 1, false)},
                                       {{1, 64, 4, 4}, conv_attrs(32, 3, 1, 1, true)},
                                       {{2, 16, 10, 6}, conv_attrs(16, 3, 1, 0, true)}};
  for (const auto& [xd, a] : cases) {
    SCOPED_TRACE(::testing::PrintToString(ConvCase{xd, a}));
    const ConvData d(xd, a, 11);
    for (const bool blocked : {true, false}) {  // the layout the network hands over, and a plain one
      const auto r = run_cpu(OpKind::conv2d, a, {xd}, {d.x}, d.params, d.dy, {.input_layout = blocked ? cpu::tag::nChw16c : cpu::tag::nchw});
      EXPECT_EQ(r.algorithm, kernel_here ? "winograd" : "direct") << (blocked ? "nChw16c input" : "nchw input");
      d.expect_matched_by(r);
    }
  }
}

// Which convolutions run as Winograd: those the rule says pay (winograd.cpp's sweep), on a CPU
// where it timed clearly faster than direct, in fp32 only, or as the variable says.
TEST(Conv2dTest, WinogradIsChosenByShapeAndTiming) {
  const OpAttrs three = conv_attrs(64, 3, 1, 1, false);
  EXPECT_TRUE(cpu::winograd_pays(three, {64, 32, 14, 14})) << "medium's conv2 at batch 64: 1.28x faster";
  EXPECT_FALSE(cpu::winograd_pays(three, {16, 32, 14, 14})) << "at batch 16: 0.88x";
  EXPECT_TRUE(cpu::winograd_pays(conv_attrs(128, 3, 1, 1, false), {64, 64, 7, 7})) << "medium's conv3 at 64: 1.37x";
  EXPECT_FALSE(cpu::winograd_pays(conv_attrs(128, 3, 1, 1, false), {16, 64, 7, 7})) << "at 16: 0.85x";
  EXPECT_TRUE(cpu::winograd_pays(conv_attrs(512, 3, 1, 1, false), {64, 512, 4, 4})) << "1.73x";
  EXPECT_FALSE(cpu::winograd_pays(conv_attrs(512, 3, 1, 1, false), {16, 512, 4, 4})) << "0.74x";
  EXPECT_FALSE(cpu::winograd_pays(conv_attrs(32, 3, 1, 1, false), {256, 16, 16, 16})) << "16 channels in: never clearly faster";
  EXPECT_FALSE(cpu::winograd_pays(conv_attrs(64, 3, 2, 1, false), {64, 64, 28, 28})) << "stride 2";
  EXPECT_FALSE(cpu::winograd_pays(conv_attrs(64, 1, 1, 0, false), {64, 64, 28, 28})) << "1x1";
  EXPECT_FALSE(cpu::winograd_pays(conv_attrs(40, 3, 1, 1, false), {64, 64, 28, 28})) << "not in blocks of 16";

  int timed = 0;
  auto ratio = [&timed](double r) {
    return [&timed, r] {
      ++timed;
      return r;
    };
  };
  const cpu::WinogradChoice fast = cpu::choose_winograd("auto", ratio(2.2));
  EXPECT_TRUE(fast.on);
  EXPECT_NE(fast.why.find("2.20x"), std::string::npos) << fast.why;
  EXPECT_EQ(fast.why.find("bench all"), std::string::npos) << "timed by this process";
  // Timed by 'dlperf bench all' (the machine profile's median): the why says so.
  const cpu::WinogradChoice kept = cpu::choose_winograd("auto", ratio(1.29), "the median of 7 rounds of 'dlperf bench all'");
  EXPECT_FALSE(kept.on);
  EXPECT_NE(kept.why.find("timed 1.29x Winograd's on 64 channels at 28x28, batch 4, the median of 7 rounds of 'dlperf bench all'; "),
            std::string::npos) << kept.why;
  EXPECT_FALSE(cpu::choose_winograd("auto", ratio(1.2)).on) << "close: direct stays";
  EXPECT_FALSE(cpu::choose_winograd("auto", ratio(0)).on) << "no Winograd kernel on this CPU";
  EXPECT_FALSE(cpu::choose_winograd("on", ratio(0)).on) << "nor when asked for";
  EXPECT_TRUE(cpu::choose_winograd("on", ratio(1.1)).on);
  EXPECT_EQ(timed, 6);
  EXPECT_FALSE(cpu::choose_winograd("off", ratio(2.2)).on);
  EXPECT_EQ(timed, 6) << "not timed when turned off";
  EXPECT_THROW(cpu::choose_winograd("fast", ratio(2.2)), Error);
  // Other work on the CPUs left too few undisturbed samples: direct, as where it is not clearly faster.
  const cpu::WinogradChoice busy = cpu::choose_winograd("auto", ratio(cpu::kTooBusyToTime));
  EXPECT_FALSE(busy.on);
  EXPECT_EQ(busy.direct_over_winograd, 0) << "not timed";
  EXPECT_NE(busy.why.find("other work held the CPUs while the direct and Winograd kernels were timed"), std::string::npos) << busy.why;
  EXPECT_TRUE(cpu::choose_winograd("on", ratio(cpu::kTooBusyToTime)).on) << "asked for";

  // This machine's choice, timed for real once per process.
  const cpu::WinogradChoice& here = cpu::winograd_choice();
  EXPECT_EQ(cpu::winograd_choice_if_made(), &here);
  EXPECT_FALSE(here.why.empty());
  const bool kernel_here = cpu::winograd_kernel_here();
  if (!std::getenv("DLPERF_CPU_WINOGRAD") && here.why.find("other work held the CPUs") == std::string::npos) {
    EXPECT_EQ(here.direct_over_winograd > 0, kernel_here) << here.why;
  }
  EXPECT_EQ(cpu::conv_runs_winograd(three, {64, 32, 14, 14}, cpu::Compute::fp32), here.on);
  EXPECT_FALSE(cpu::conv_runs_winograd(three, {64, 32, 14, 14}, cpu::Compute::bf16)) << "oneDNN's Winograd is fp32 only";
  std::printf("[ info ] 3x3 convolutions here: %s\n", here.why.c_str());
}

TEST(RefGradients, Conv2dFiniteDifferences) {
  const Dims xd = {2, 2, 5, 5};
  auto a = conv_attrs(3, 3, 2, 1, true);
  const Dims yd = ops::infer_shape(OpKind::conv2d, a, {xd});
  Vec x = random_vec(100, 11), w = random_vec(54, 12), b = random_vec(3, 13), r = random_vec(size_t(numel(yd)), 14);
  Vec dx, dw, db;
  ref::conv2d_backward(x, xd, w, a, r, dx, dw, db);
  expect_grad_matches([&](const Vec& v) { return dot(ref::conv2d_forward(v, xd, w, b, a), r); }, x, dx, "dx");
  expect_grad_matches([&](const Vec& v) { return dot(ref::conv2d_forward(x, xd, v, b, a), r); }, w, dw, "dw");
  expect_grad_matches([&](const Vec& v) { return dot(ref::conv2d_forward(x, xd, w, v, a), r); }, b, db, "db");
}

class BatchNormTest : public ::testing::TestWithParam<bool> {};

TEST_P(BatchNormTest, TrainingMatchesReference) {
  const bool fuse_relu = GetParam();
  const Dims xd = {4, 10, 5, 5};  // 10 channels: not a multiple of the 8-channel blocks
  OpAttrs a;
  Vec x = random_vec(size_t(numel(xd)), 21, -2, 3), g = random_vec(10, 22, 0.5, 1.5), b = random_vec(10, 23);
  Vec dy = random_vec(x.size(), 24);
  auto r = run_cpu(OpKind::batchnorm2d, a, {xd}, {x}, {g, b}, dy, {.fuse_relu = fuse_relu});
  Vec mean, var, dx, dg, db;
  Vec y = ref::batchnorm_forward_train(x, xd, g, b, a.eps, mean, var);
  Vec dy_eff = dy;
  if (fuse_relu) {
    dy_eff = ref::relu_backward(y, dy);
    y = ref::relu_forward(y);
  }
  ref::batchnorm_backward(x, xd, g, mean, var, a.eps, dy_eff, dx, dg, db);
  EXPECT_LT(rel_err(r.y, y), kF32Tol);
  EXPECT_LT(rel_err(r.dx[0], dx), 1e-4);
  EXPECT_LT(rel_err(r.dparams[0], dg), 1e-4);
  EXPECT_LT(rel_err(r.dparams[1], db), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(FusedRelu, BatchNormTest, ::testing::Bool());

TEST(BatchNormTest, EvalUsesRunningStatistics) {
  const Dims xd = {2, 8, 3, 3};
  OpAttrs a;
  auto op = cpu::make_op(OpKind::batchnorm2d, a, {cpu::plain_md(xd)}, {xd}, "bn");
  // After one training step from mean 0 / var 1, running stats move 10% towards the batch's.
  Vec x = random_vec(size_t(numel(xd)), 31, 1, 4);
  Vec g(8, 1.0), b(8, 0.0);
  std::vector<float> ones(8, 1.f);
  cpu::from_plain(op->params()[0]->layout, {8}, ones.data(), op->params()[0]->value);
  cpu::Mem xm = to_layout(op->input_md(0), xd, x), y(op->output_md(), MemCategory::workspace);
  op->forward({xm.mem}, y.mem, true);
  op->forward({xm.mem}, y.mem, false);
  Vec mean, var;
  ref::batchnorm_forward_train(x, xd, g, b, a.eps, mean, var);
  Vec rm(8), rv(8);
  const double n = 2 * 9;
  for (int c = 0; c < 8; ++c) rm[c] = 0.1 * mean[c], rv[c] = 0.9 + 0.1 * var[c] * n / (n - 1);
  Vec expect = ref::batchnorm_forward_eval(x, xd, g, b, rm, rv, a.eps);
  EXPECT_LT(rel_err(cpu::to_plain(op->output_md(), xd, y), expect), kF32Tol);
}

TEST(RefGradients, BatchNormFiniteDifferences) {
  const Dims xd = {3, 2, 2, 3};
  Vec x = random_vec(36, 41, -1, 2), g = random_vec(2, 42, 0.5, 1.5), b = random_vec(2, 43), r = random_vec(36, 44);
  Vec mean, var, dx, dg, db;
  ref::batchnorm_forward_train(x, xd, g, b, 1e-5, mean, var);
  ref::batchnorm_backward(x, xd, g, mean, var, 1e-5, r, dx, dg, db);
  auto f = [&](const Vec& xx, const Vec& gg, const Vec& bb) {
    Vec m, v;
    return dot(ref::batchnorm_forward_train(xx, xd, gg, bb, 1e-5, m, v), r);
  };
  expect_grad_matches([&](const Vec& v) { return f(v, g, b); }, x, dx, "dx", 1e-5);
  expect_grad_matches([&](const Vec& v) { return f(x, v, b); }, g, dg, "dgamma");
  expect_grad_matches([&](const Vec& v) { return f(x, g, v); }, b, db, "dbeta");
}

TEST(ReluTest, MatchesReference) {
  const Dims xd = {2, 3, 4, 4};
  Vec x = random_vec(96, 51), dy = random_vec(96, 52);
  auto r = run_cpu(OpKind::relu, {}, {xd}, {x}, {}, dy);
  EXPECT_LT(rel_err(r.y, ref::relu_forward(x)), kF32Tol);
  EXPECT_LT(rel_err(r.dx[0], ref::relu_backward(x, dy)), kF32Tol);
  Vec rr = random_vec(96, 53);
  Vec xs = random_vec(96, 54, 0.1, 1);  // away from the kink
  for (size_t i = 0; i < xs.size(); i += 2) xs[i] = -xs[i];
  expect_grad_matches([&](const Vec& v) { return dot(ref::relu_forward(v), rr); }, xs, ref::relu_backward(xs, rr), "relu");
}

struct PoolCase {
  OpKind kind;
  Dims x;
  int64_t k, s, p;
  cpu::tag layout = cpu::tag::undef;  ///< producer layout; undef = plain nchw
};

void PrintTo(const PoolCase& c, std::ostream* os) {
  *os << ops::to_string(c.kind) << "_" << dims_str(c.x) << "_k" << c.k << "s" << c.s << "p" << c.p;
  switch (c.layout) {
    case cpu::tag::undef: break;
    case cpu::tag::nhwc: *os << "_nhwc"; break;
    case cpu::tag::nChw8c: *os << "_nChw8c"; break;
    case cpu::tag::nChw16c: *os << "_nChw16c"; break;
    default: *os << "_tag" << int(c.layout); break;
  }
}

class PoolTest : public ::testing::TestWithParam<PoolCase> {};

// The CPU engine's pooling of `x` (random when empty) and the gradient of a random dy.
struct PoolRun {
  OpAttrs a;
  Vec x, dy;
  CpuRun r;
};
PoolRun run_pool(const PoolCase& c, Vec x = {}) {
  PoolRun p;
  p.a.kernel = c.k, p.a.stride = c.s, p.a.padding = c.p;
  p.x = x.empty() ? random_vec(size_t(numel(c.x)), 61) : std::move(x);
  p.dy = random_vec(size_t(numel(ops::infer_shape(c.kind, p.a, {c.x}))), 62);
  p.r = run_cpu(c.kind, p.a, {c.x}, {p.x}, {}, p.dy, {.input_layout = c.layout});
  return p;
}

TEST_P(PoolTest, MatchesReference) {
  const auto& c = GetParam();
  const auto [a, x, dy, r] = run_pool(c);
  Vec y, dx;
  if (c.kind == OpKind::maxpool2d) {
    y = ref::maxpool_forward(x, c.x, a), dx = ref::maxpool_backward(x, c.x, a, dy);
  } else if (c.kind == OpKind::avgpool2d) {
    y = ref::avgpool_forward(x, c.x, a), dx = ref::avgpool_backward(c.x, a, dy);
  } else {
    y = ref::global_avgpool_forward(x, c.x), dx = ref::global_avgpool_backward(c.x, dy);
  }
  EXPECT_LT(rel_err(r.y, y), kF32Tol);
  EXPECT_LT(rel_err(r.dx[0], dx), kF32Tol);
}

INSTANTIATE_TEST_SUITE_P(Kinds, PoolTest,
                         ::testing::Values(PoolCase{OpKind::maxpool2d, {2, 3, 8, 8}, 2, 2, 0},
                                           PoolCase{OpKind::maxpool2d, {2, 10, 7, 7}, 3, 2, 1},
                                           PoolCase{OpKind::maxpool2d, {2, 10, 7, 7}, 3, 2, 1, cpu::tag::nChw8c},
                                           PoolCase{OpKind::maxpool2d, {2, 16, 8, 8}, 2, 2, 0, cpu::tag::nChw8c},
                                           PoolCase{OpKind::maxpool2d, {2, 5, 9, 9}, 3, 3, 1, cpu::tag::nhwc},
                                           PoolCase{OpKind::maxpool2d, {3, 32, 6, 6}, 2, 2, 0, cpu::tag::nhwc},
                                           // 2x2 at stride 2 (its own code): odd sizes leave a row
                                           // and a column in no window; 10 channels pad a block
                                           PoolCase{OpKind::maxpool2d, {2, 16, 7, 9}, 2, 2, 0, cpu::tag::nChw8c},
                                           PoolCase{OpKind::maxpool2d, {2, 10, 8, 6}, 2, 2, 0, cpu::tag::nChw8c},
                                           PoolCase{OpKind::maxpool2d, {2, 16, 9, 7}, 2, 2, 0, cpu::tag::nhwc},
                                           // blocks of 16 (AVX-512 CPUs; oneDNN pools them);
                                           // 20 channels pad a block
                                           PoolCase{OpKind::maxpool2d, {2, 20, 7, 9}, 2, 2, 0, cpu::tag::nChw16c},
                                           PoolCase{OpKind::maxpool2d, {2, 20, 7, 7}, 3, 2, 1, cpu::tag::nChw16c},
                                           PoolCase{OpKind::avgpool2d, {2, 3, 8, 8}, 2, 2, 0},
                                           PoolCase{OpKind::avgpool2d, {1, 9, 7, 7}, 3, 2, 1},
                                           PoolCase{OpKind::global_avgpool, {2, 12, 5, 5}, 0, 1, 0}));

// After a relu, windows of zeros are common: a tie's gradient goes to the first maximum in
// scan order, as PyTorch's does (and the reference's). Inputs of only 0 and 1 tie everywhere.
TEST(PoolTest, MaxPoolTiesGoToTheFirstMax) {
  const std::vector<PoolCase> cases = {{OpKind::maxpool2d, {2, 16, 7, 9}, 2, 2, 0, cpu::tag::nChw8c},
                                       {OpKind::maxpool2d, {2, 16, 8, 6}, 2, 2, 0, cpu::tag::nhwc},
                                       {OpKind::maxpool2d, {2, 20, 7, 9}, 2, 2, 0, cpu::tag::nChw16c},
                                       {OpKind::maxpool2d, {2, 10, 7, 7}, 3, 2, 1, cpu::tag::nChw8c},
                                       {OpKind::maxpool2d, {2, 5, 9, 9}, 3, 3, 1, cpu::tag::nhwc}};
  for (const PoolCase& c : cases) {
    Vec ties = random_vec(size_t(numel(c.x)), 63);
    for (double& v : ties) v = v > 0.3 ? 1 : 0;
    const auto [a, x, dy, r] = run_pool(c, ties);
    EXPECT_LT(rel_err(r.y, ref::maxpool_forward(x, c.x, a)), kF32Tol) << c.x[1] << " channels, kernel " << c.k;
    EXPECT_LT(rel_err(r.dx[0], ref::maxpool_backward(x, c.x, a, dy)), kF32Tol) << c.x[1] << " channels, kernel " << c.k;
  }
}

// nChw16c (AVX-512 CPUs) has two max poolings, dlperf's and oneDNN's, and each process runs the
// one that timed faster (cpu::max_pool_16c_choice): both must match the reference, ties too. The
// same 16-lane code pools nhwc with whole vectors of 16 channels in bf16 (a bf16 network on AMX).
TEST(PoolTest, MaxPoolOnBlocksOf16MatchesReferenceInBothCodes) {
  std::vector<bool> codes = {false};
#ifdef __AVX512F__
  codes.push_back(true);
#endif
  const std::vector<PoolCase> cases = {{OpKind::maxpool2d, {2, 20, 7, 9}, 2, 2, 0, cpu::tag::nChw16c},
                                       {OpKind::maxpool2d, {3, 32, 8, 6}, 2, 2, 0, cpu::tag::nChw16c},
                                       {OpKind::maxpool2d, {2, 20, 7, 7}, 3, 2, 1, cpu::tag::nChw16c},
                                       {OpKind::maxpool2d, {2, 32, 7, 9}, 2, 2, 0, cpu::tag::nhwc},
                                       {OpKind::maxpool2d, {3, 48, 6, 6}, 2, 2, 0, cpu::tag::nhwc}};
  std::vector<cpu::dt> types = {cpu::dt::f32};
  if (hw::cpu_info().avx512_bf16) types.push_back(cpu::dt::bf16);  // between a bf16 network's convolutions
  for (const bool own : codes) {
    cpu::for_tests_run_max_pool_16c(own);
    for (const cpu::dt type : types)
      for (const PoolCase& c : cases)
        for (const bool ties : {false, true}) {
          const bool bf16 = type == cpu::dt::bf16;
          if (bf16 && c.k != 2) continue;  // dlperf's bf16 code is for 2x2 windows; oneDNN pools the rest
          SCOPED_TRACE(::testing::Message() << (own ? "dlperf's" : "oneDNN's") << " code, " << (bf16 ? "bf16 " : "fp32 ")
                                            << dims_str(c.x) << " k" << c.k << (ties ? ", inputs of 0 and 1" : ""));
          Vec x = random_vec(size_t(numel(c.x)), 64);
          if (ties)
            for (double& v : x) v = v > 0.3 ? 1 : 0;
          OpAttrs a;
          a.kernel = c.k, a.stride = c.s, a.padding = c.p;
          if (bf16) x = round_to_bf16(x);
          Vec dy = random_vec(size_t(numel(ops::infer_shape(c.kind, a, {c.x}))), 62);
          if (bf16) dy = round_to_bf16(dy);
          const auto r = run_cpu(c.kind, a, {c.x}, {x}, {}, dy, {.input_layout = c.layout, .input_type = type});
          EXPECT_EQ(r.y_type, type);
          // A max and its gradient are values the pooling read, so bf16 is as exact as fp32.
          EXPECT_LT(rel_err(r.y, ref::maxpool_forward(x, c.x, a)), kF32Tol);
          EXPECT_LT(rel_err(r.dx[0], ref::maxpool_backward(x, c.x, a, dy)), kF32Tol);
        }
  }
  cpu::for_tests_run_max_pool_16c(std::nullopt);
}

// The engine's kernel timings keep only samples in which the scheduler took the CPU from none of
// its threads: a pass whose threads share the cores with as many busy threads again is never
// compared; one whose threads compute, or sleep (a passive OpenMP wait is no disturbance), is,
// on a machine with a moment to spare.
TEST(CpuTiming, OnlySamplesNoOtherWorkCutIntoCount) {
  auto spin_for = [](std::chrono::milliseconds ms) {
    const auto end = std::chrono::steady_clock::now() + ms;
    while (std::chrono::steady_clock::now() < end) {
    }
  };
  auto spin = [&] {
#pragma omp parallel
    spin_for(std::chrono::milliseconds(2));
  };
  auto crowded = [&] {  // 30 ms beside twice as many threads as there are CPUs, all computing
    std::vector<std::thread> others;
    for (unsigned i = 0; i < 2 * std::max(1u, std::thread::hardware_concurrency()); ++i)
      others.emplace_back([&] { spin_for(std::chrono::milliseconds(30)); });
#pragma omp parallel
    spin_for(std::chrono::milliseconds(30));
    for (auto& t : others) t.join();
  };
  int left_out = 0;
  EXPECT_FALSE(cpu::best_undisturbed_times({crowded}, 1, 2, &left_out).has_value());
  EXPECT_EQ(left_out, 2);
  // At most 200 rounds of 2 ms: one undisturbed sample is all it asks of a shared machine.
  for (const auto& pass : std::vector<std::function<void()>>{spin, [] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); }}) {
    const auto times = cpu::best_undisturbed_times({pass}, 1, 200, &left_out);
    ASSERT_TRUE(times.has_value()) << left_out << " samples disturbed";
    EXPECT_GE((*times)[0], 0.002);
    EXPECT_LT((*times)[0], 0.1);
  }
}

// Who pools nChw16c: oneDNN's code unless dlperf's timed clearly faster, or as the variable says.
TEST(PoolTest, MaxPoolOnBlocksOf16IsChosenByTiming) {
  int timed = 0;
  auto ratio = [&timed](double r) {
    return [&timed, r] {
      ++timed;
      return r;
    };
  };
  const cpu::MaxPool16cChoice slow = cpu::choose_max_pool_16c("auto", true, ratio(4.2));
  EXPECT_TRUE(slow.own);
  EXPECT_NE(slow.why.find("4.20x"), std::string::npos) << slow.why;
  const cpu::MaxPool16cChoice kept = cpu::choose_max_pool_16c("auto", true, ratio(3.86), "the median of 7 rounds of 'dlperf bench all'");
  EXPECT_TRUE(kept.own);
  EXPECT_NE(kept.why.find("timed 3.86x dlperf's here, forward and backward, the median of 7 rounds of 'dlperf bench all'; "),
            std::string::npos) << kept.why;
  EXPECT_FALSE(cpu::choose_max_pool_16c("auto", true, ratio(1.2)).own) << "close: oneDNN's stays";
  EXPECT_FALSE(cpu::choose_max_pool_16c("auto", true, ratio(0.8)).own);
  EXPECT_EQ(timed, 4);
  EXPECT_FALSE(cpu::choose_max_pool_16c("onednn", true, ratio(4.2)).own);
  EXPECT_TRUE(cpu::choose_max_pool_16c("dlperf", true, ratio(0.5)).own);
  EXPECT_FALSE(cpu::choose_max_pool_16c("dlperf", false, ratio(4.2)).own) << "no AVX-512 code in this build";
  EXPECT_FALSE(cpu::choose_max_pool_16c("auto", false, ratio(4.2)).own);
  EXPECT_EQ(timed, 4) << "timed only where the choice is open";
  EXPECT_THROW(cpu::choose_max_pool_16c("fast", true, ratio(4.2)), Error);
  const cpu::MaxPool16cChoice busy = cpu::choose_max_pool_16c("auto", true, ratio(cpu::kTooBusyToTime));
  EXPECT_FALSE(busy.own) << "too busy to time: oneDNN's, as where the two are close";
  EXPECT_NE(busy.why.find("other work held the CPUs while the two max poolings were timed"), std::string::npos) << busy.why;

  // This machine's choice, timed for real once per process.
  const cpu::MaxPool16cChoice& here = cpu::max_pool_16c_choice();
  EXPECT_EQ(cpu::max_pool_16c_choice_if_made(), &here);
  EXPECT_FALSE(here.why.empty());
#ifdef __AVX512F__
  if (!std::getenv("DLPERF_CPU_MAX_POOL") && here.why.find("other work held the CPUs") == std::string::npos) {
    EXPECT_GT(here.onednn_over_dlperf, 0) << here.why;
  }
#endif
  std::printf("[ info ] max pooling on nChw16c here: %s\n", here.why.c_str());
}

TEST(RefGradients, PoolingFiniteDifferences) {
  const Dims xd = {1, 2, 5, 5};
  OpAttrs a;
  a.kernel = 3, a.stride = 2, a.padding = 1;
  const Dims yd = ops::infer_shape(OpKind::maxpool2d, a, {xd});
  Vec x = random_vec(50, 71), r = random_vec(size_t(numel(yd)), 72);
  expect_grad_matches([&](const Vec& v) { return dot(ref::maxpool_forward(v, xd, a), r); }, x,
                      ref::maxpool_backward(x, xd, a, r), "maxpool");
  expect_grad_matches([&](const Vec& v) { return dot(ref::avgpool_forward(v, xd, a), r); }, x,
                      ref::avgpool_backward(xd, a, r), "avgpool");
  Vec rg = random_vec(2, 73);
  expect_grad_matches([&](const Vec& v) { return dot(ref::global_avgpool_forward(v, xd), rg); }, x,
                      ref::global_avgpool_backward(xd, rg), "global_avgpool");
}

// bf16 (CPUs with AVX512-BF16): conv2d and linear compute from bf16 copies of their input,
// weights and output gradient with fp32 accumulation, so they match float64 to bf16's precision,
// and differ from it by more than fp32 would (the bf16 path really ran). The same copies and
// conversions in f32 (Compute::f32_copies) run on every CPU and match to fp32's precision.
constexpr double kBf16Tol = 1e-2;

void expect_close(const std::vector<float>& got, const Vec& want, cpu::Compute compute, const char* what) {
  const double e = rel_err(got, want);
  if (compute == cpu::Compute::f32_copies) {
    EXPECT_LT(e, kF32Tol) << what;
    return;
  }
  EXPECT_LT(e, kBf16Tol) << what;
  EXPECT_GT(e, 1e-5) << what << ": as close as fp32, so the bf16 path did not run";
}

void check_conv_copies(cpu::Compute compute) {
  for (const ConvCase& c : {ConvCase{{4, 16, 8, 8}, conv_attrs(32, 3, 1, 1, true)}, ConvCase{{2, 1, 12, 12}, conv_attrs(8, 3, 1, 1, false)},
                            ConvCase{{2, 8, 9, 9}, conv_attrs(16, 3, 2, 1, true)}}) {
    const auto& [xd, a] = c;
    SCOPED_TRACE(dims_str(xd));
    const Dims wd = {a.out_channels, xd[1], a.kernel, a.kernel};
    const Dims yd = ops::infer_shape(OpKind::conv2d, a, {xd});
    Vec x = random_vec(size_t(numel(xd)), 101), w = random_vec(size_t(numel(wd)), 102, -0.5, 0.5);
    Vec b = a.bias ? random_vec(size_t(a.out_channels), 103) : Vec{}, dy = random_vec(size_t(numel(yd)), 104);
    std::vector<Vec> params{w};
    if (a.bias) params.push_back(b);
    auto r = run_cpu(OpKind::conv2d, a, {xd}, {x}, params, dy, {.compute = compute});
    Vec dx, dw, db;
    ref::conv2d_backward(x, xd, w, a, dy, dx, dw, db);
    expect_close(r.y, ref::conv2d_forward(x, xd, w, b, a), compute, "y");
    expect_close(r.dx[0], dx, compute, "dx");
    expect_close(r.dparams[0], dw, compute, "dw");
    if (a.bias) {
      EXPECT_LT(rel_err(r.dparams[1], db), compute == cpu::Compute::bf16 ? kBf16Tol : kF32Tol);
    }
  }
}

void check_linear_copies(cpu::Compute compute) {
  const Dims xd = {6, 40};
  OpAttrs a;
  a.out_features = 24;
  Vec x = random_vec(240, 111), w = random_vec(24 * 40, 112), b = random_vec(24, 113), dy = random_vec(6 * 24, 114);
  auto r = run_cpu(OpKind::linear, a, {xd}, {x}, {w, b}, dy, {.compute = compute});
  Vec dx, dw, db;
  ref::linear_backward(x, xd, w, 24, dy, dx, dw, db);
  expect_close(r.y, ref::linear_forward(x, xd, w, b, 24), compute, "y");
  expect_close(r.dx[0], dx, compute, "dx");
  expect_close(r.dparams[0], dw, compute, "dw");
  EXPECT_LT(rel_err(r.dparams[1], db), compute == cpu::Compute::bf16 ? kBf16Tol : kF32Tol);
}

TEST(CpuBf16, ConvMatchesTheReference) {
  if (!hw::cpu_info().avx512_bf16) GTEST_SKIP() << "this CPU has no AVX512-BF16; bf16 training is refused on it";
  check_conv_copies(cpu::Compute::bf16);
}

TEST(CpuBf16, LinearMatchesTheReference) {
  if (!hw::cpu_info().avx512_bf16) GTEST_SKIP() << "this CPU has no AVX512-BF16; bf16 training is refused on it";
  check_linear_copies(cpu::Compute::bf16);
}

TEST(CpuBf16, LogitsStayFp32) {
  if (!hw::cpu_info().avx512_bf16) GTEST_SKIP() << "this CPU has no AVX512-BF16; bf16 training is refused on it";
  const Dims xd = {6, 40};
  OpAttrs a;
  a.out_features = 10;
  const Vec x = random_vec(240, 115), w = random_vec(400, 116), b = random_vec(10, 117), dy = random_vec(60, 118);
  const auto hidden = run_cpu(OpKind::linear, a, {xd}, {x}, {w, b}, dy, {.compute = cpu::Compute::bf16});
  const auto logits = run_cpu(OpKind::linear, a, {xd}, {x}, {w, b}, dy, {.compute = cpu::Compute::bf16, .fp32_output = true});
  EXPECT_EQ(hidden.y_type, cpu::dt::bf16);
  EXPECT_EQ(logits.y_type, cpu::dt::f32);
  Vec dx, dw, db;
  ref::linear_backward(x, xd, w, 10, dy, dx, dw, db);
  expect_close(logits.y, ref::linear_forward(x, xd, w, b, 10), cpu::Compute::bf16, "y");
  expect_close(logits.dx[0], dx, cpu::Compute::bf16, "dx");
  expect_close(logits.dparams[0], dw, cpu::Compute::bf16, "dw");
  // Rounding the output to bf16 is the only difference between the two.
  EXPECT_GT(rel_err(hidden.y, Vec(logits.y.begin(), logits.y.end())), 1e-5);
}

// In a bf16 network the ops between convolutions take and write bf16 (as PyTorch's autocast
// hands them on), computing in fp32 inside: on bf16 inputs they match float64 to the rounding of
// what they write. Selection, copies and relu write exactly what they read. Dropout is fp32 code:
// it asks for fp32 (the network converts) and writes fp32.
TEST(CpuBf16, OpsBetweenConvolutionsKeepBf16) {
  if (!hw::cpu_info().avx512_bf16) GTEST_SKIP() << "this CPU has no AVX512-BF16; bf16 training is refused on it";
  constexpr double kRounded = 1e-2;  // a bf16 step is 2^-8 of a value: 0.4%
  const cpu::dt bf16 = cpu::dt::bf16;
  for (cpu::tag layout : {cpu::tag::nChw16c, cpu::tag::undef}) {
    SCOPED_TRACE(layout == cpu::tag::undef ? "plain" : "nChw16c");
    const Dims xd = {3, 20, 7, 9};  // 20 channels pad a 16-block
    const Vec x = round_to_bf16(random_vec(size_t(numel(xd)), 131, -2, 3)), dy = round_to_bf16(random_vec(x.size(), 132));
    const RunOptions in_bf16{.input_layout = layout, .input_type = bf16};
    for (bool fuse_relu : {false, true}) {
      OpAttrs a;
      const Vec g = random_vec(20, 133, 0.5, 1.5), b = random_vec(20, 134);
      RunOptions o = in_bf16;
      o.fuse_relu = fuse_relu;
      auto r = run_cpu(OpKind::batchnorm2d, a, {xd}, {x}, {g, b}, dy, o);
      Vec mean, var, dx, dg, db, y = ref::batchnorm_forward_train(x, xd, g, b, a.eps, mean, var), dy_eff = dy;
      if (fuse_relu) dy_eff = ref::relu_backward(y, dy), y = ref::relu_forward(y);
      ref::batchnorm_backward(x, xd, g, mean, var, a.eps, dy_eff, dx, dg, db);
      EXPECT_EQ(r.y_type, bf16);
      EXPECT_LT(rel_err(r.y, y), kRounded) << "batchnorm, relu fused: " << fuse_relu;
      EXPECT_LT(rel_err(r.dx[0], dx), kRounded);
      EXPECT_LT(rel_err(r.dparams[0], dg), kRounded);
      EXPECT_LT(rel_err(r.dparams[1], db), kRounded);
    }
    auto relu = run_cpu(OpKind::relu, {}, {xd}, {x}, {}, dy, in_bf16);
    EXPECT_EQ(relu.y_type, bf16);
    EXPECT_LT(rel_err(relu.y, ref::relu_forward(x)), 1e-7);
    EXPECT_LT(rel_err(relu.dx[0], ref::relu_backward(x, dy)), 1e-7);
    for (auto [kind, k, s, p] : {std::tuple{OpKind::maxpool2d, 2, 2, 0}, {OpKind::maxpool2d, 3, 2, 1},
                                 {OpKind::avgpool2d, 3, 2, 1}, {OpKind::global_avgpool, 0, 1, 0}}) {
      OpAttrs a;
      a.kernel = k, a.stride = s, a.padding = p;
      const Vec pdy = round_to_bf16(random_vec(size_t(numel(ops::infer_shape(kind, a, {xd}))), 135));
      auto r = run_cpu(kind, a, {xd}, {x}, {}, pdy, in_bf16);
      Vec y, dx;
      if (kind == OpKind::maxpool2d) y = ref::maxpool_forward(x, xd, a), dx = ref::maxpool_backward(x, xd, a, pdy);
      else if (kind == OpKind::avgpool2d) y = ref::avgpool_forward(x, xd, a), dx = ref::avgpool_backward(xd, a, pdy);
      else y = ref::global_avgpool_forward(x, xd), dx = ref::global_avgpool_backward(xd, pdy);
      const double tol = kind == OpKind::maxpool2d && k == 2 ? 1e-7 : kRounded;  // 3x3 windows overlap: sums
      EXPECT_EQ(r.y_type, bf16) << ops::to_string(kind);
      EXPECT_LT(rel_err(r.y, y), kind == OpKind::maxpool2d ? 1e-7 : kRounded) << ops::to_string(kind);
      EXPECT_LT(rel_err(r.dx[0], dx), tol) << ops::to_string(kind);
    }
    const Vec x2 = round_to_bf16(random_vec(x.size(), 136));
    auto add = run_cpu(OpKind::add, {}, {xd, xd}, {x, x2}, {}, dy, in_bf16);
    EXPECT_EQ(add.y_type, bf16);
    EXPECT_LT(rel_err(add.y, ref::add_forward(x, x2)), kRounded);
    EXPECT_LT(rel_err(add.dx[0], dy), 1e-7);
    EXPECT_LT(rel_err(add.dx[1], dy), 1e-7);
    RunOptions fused = in_bf16;
    fused.fuse_relu = true;
    auto add_relu = run_cpu(OpKind::add, {}, {xd, xd}, {x, x2}, {}, dy, fused);
    EXPECT_EQ(add_relu.y_type, bf16);
    EXPECT_LT(rel_err(add_relu.y, ref::relu_forward(ref::add_forward(x, x2))), kRounded);
    EXPECT_LT(rel_err(add_relu.dx[0], ref::relu_backward(ref::add_forward(x, x2), dy)), 1e-7);
    EXPECT_LT(rel_err(add_relu.dx[1], ref::relu_backward(ref::add_forward(x, x2), dy)), 1e-7);
    auto flat = run_cpu(OpKind::flatten, {}, {xd}, {x}, {}, dy, in_bf16);
    EXPECT_EQ(flat.y_type, bf16);
    EXPECT_LT(rel_err(flat.y, x), 1e-7);
    EXPECT_LT(rel_err(flat.dx[0], dy), 1e-7);
    OpAttrs drop;
    drop.p = 0.25;
    auto d = run_cpu(OpKind::dropout, drop, {xd}, {x}, {}, dy, in_bf16);
    EXPECT_EQ(d.in_types[0], cpu::dt::f32);
    EXPECT_EQ(d.y_type, cpu::dt::f32);
  }
}

// bf16 batchnorm over whole vectors of 16 channels (nhwc on AMX CPUs, nChw16c elsewhere) is
// dlperf's own code (backend/cpu/batchnorm_bf16.h): it matches float64 to bf16's rounding, its
// relu too, also where the mean lies far from 0 (the variance around each plane's mean, combined
// in double: no cancellation in fp32).
TEST(CpuBf16, BatchnormOnWholeVectorsIsOwnCodeAndMatchesTheReference) {
  if (!hw::cpu_info().avx512_bf16) GTEST_SKIP() << "this CPU has no AVX512-BF16; bf16 training is refused on it";
  const cpu::dt bf16 = cpu::dt::bf16;
  const Dims xd = {3, 32, 7, 9};
  EXPECT_TRUE(cpu::bf16_batchnorm_layout(cpu::md(cpu::to_dnnl(xd), bf16, cpu::tag::nhwc), xd));
  EXPECT_TRUE(cpu::bf16_batchnorm_layout(cpu::md(cpu::to_dnnl(xd), bf16, cpu::tag::nChw16c), xd));
  EXPECT_FALSE(cpu::bf16_batchnorm_layout(cpu::md(cpu::to_dnnl(xd), cpu::dt::f32, cpu::tag::nhwc), xd)) << "fp32 is oneDNN's";
  EXPECT_FALSE(cpu::bf16_batchnorm_layout(cpu::md(cpu::to_dnnl(xd), bf16, cpu::tag::nchw), xd));
  const Dims odd = {3, 20, 7, 9};
  EXPECT_FALSE(cpu::bf16_batchnorm_layout(cpu::md(cpu::to_dnnl(odd), bf16, cpu::tag::nhwc), odd)) << "20 channels: no whole vectors";
  constexpr double kRounded = 1e-2;
  for (const Dims& d : {xd, Dims{2, 48, 5, 5}})
    for (cpu::tag layout : {cpu::tag::nhwc, cpu::tag::nChw16c})
      for (double offset : {0.0, 40.0, 1000.0})
        for (bool fuse_relu : {false, true}) {
          SCOPED_TRACE(::testing::Message() << dims_str(d) << (layout == cpu::tag::nhwc ? " nhwc" : " nChw16c") << ", inputs around "
                                            << offset << (fuse_relu ? ", relu fused" : ""));
          Vec x = random_vec(size_t(numel(d)), 141, -2, 3);
          for (double& v : x) v += offset;
          x = round_to_bf16(x);
          const Vec dy = round_to_bf16(random_vec(x.size(), 142)), g = random_vec(size_t(d[1]), 143, 0.5, 1.5),
                    b = random_vec(size_t(d[1]), 144);
          RunOptions o{.input_layout = layout, .input_type = bf16};
          o.fuse_relu = fuse_relu;
          OpAttrs a;
          const auto r = run_cpu(OpKind::batchnorm2d, a, {d}, {x}, {g, b}, dy, o);
          Vec mean, var, dx, dg, db, y = ref::batchnorm_forward_train(x, d, g, b, a.eps, mean, var), dy_eff = dy;
          if (fuse_relu) dy_eff = ref::relu_backward(y, dy), y = ref::relu_forward(y);
          ref::batchnorm_backward(x, d, g, mean, var, a.eps, dy_eff, dx, dg, db);
          EXPECT_EQ(r.y_type, bf16);
          EXPECT_LT(rel_err(r.y, y), kRounded);
          EXPECT_LT(rel_err(r.dx[0], dx), kRounded);
          EXPECT_LT(rel_err(r.dparams[0], dg), kRounded);
          EXPECT_LT(rel_err(r.dparams[1], db), kRounded);
        }
}

// On AMX tiles the bf16 convolutions' passes on small maps and strides run as matrix products
// over an unfolded input (backend/cpu/conv_gemm.h). Every pass of each shape here runs so
// (DLPERF_CPU_CONV_GEMM=all), in chunks of a few images with a shorter last one (backward-weights'
// later chunks add to the gradient), and matches float64 to bf16's rounding: padding, strides,
// 1x1 convolutions (unfolded where strided, read as they are otherwise) and the bias.
TEST(CpuBf16, ConvAsMatrixProductsOnAmxMatchesTheReference) {
  if (!cpu::has_amx_kernels()) GTEST_SKIP() << "no AMX tiles here: bf16 convolutions stay oneDNN's";
  struct Env {
    Env() { ::setenv("DLPERF_CPU_CONV_GEMM", "all", 1), cpu::for_tests_set_conv_gemm_chunks(48, 20000); }
    ~Env() { ::unsetenv("DLPERF_CPU_CONV_GEMM"), cpu::for_tests_set_conv_gemm_chunks(0, 0); }
  } env;
  for (const ConvCase& c : {ConvCase{{7, 32, 4, 4}, conv_attrs(48, 3, 1, 1, true)}, ConvCase{{5, 16, 9, 9}, conv_attrs(32, 3, 2, 1, false)},
                            ConvCase{{6, 16, 7, 7}, conv_attrs(32, 1, 2, 0, false)}, ConvCase{{5, 32, 3, 5}, conv_attrs(16, 1, 1, 0, true)}}) {
    const auto& [xd, a] = c;
    SCOPED_TRACE(::testing::Message() << dims_str(xd) << " k" << a.kernel << " s" << a.stride);
    const Dims wd = {a.out_channels, xd[1], a.kernel, a.kernel}, yd = ops::infer_shape(OpKind::conv2d, a, {xd});
    const Vec x = round_to_bf16(random_vec(size_t(numel(xd)), 151)), w = random_vec(size_t(numel(wd)), 152, -0.5, 0.5);
    const Vec b = a.bias ? random_vec(size_t(a.out_channels), 153) : Vec{}, dy = round_to_bf16(random_vec(size_t(numel(yd)), 154));
    std::vector<Vec> params{w};
    if (a.bias) params.push_back(b);
    const auto r = run_cpu(OpKind::conv2d, a, {xd}, {x}, params, dy,
                           {.input_layout = cpu::tag::nhwc, .input_type = cpu::dt::bf16, .compute = cpu::Compute::bf16});
    EXPECT_EQ(r.matrix_product_passes, "forward, backward-data, backward-weights");
    Vec dx, dw, db;
    ref::conv2d_backward(x, xd, w, a, dy, dx, dw, db);
    expect_close(r.y, ref::conv2d_forward(x, xd, w, b, a), cpu::Compute::bf16, "y");
    expect_close(r.dx[0], dx, cpu::Compute::bf16, "dx");
    EXPECT_LT(rel_err(r.dparams[0], dw), kBf16Tol) << "dw";
    if (a.bias) {
      EXPECT_LT(rel_err(r.dparams[1], db), kBf16Tol) << "db";
    }
  }
  // The rule DLPERF_CPU_CONV_GEMM=auto follows: by output width and stride.
  ::setenv("DLPERF_CPU_CONV_GEMM", "auto", 1);
  auto rule = [](const Dims& x, const OpAttrs& a) {
    return cpu::conv_gemm_passes(cpu::ConvGemmShape(a, x, ops::infer_shape(OpKind::conv2d, a, {x}))).names();
  };
  EXPECT_EQ(rule({64, 512, 4, 4}, conv_attrs(512, 3, 1, 1, false)), "forward, backward-data, backward-weights");
  EXPECT_EQ(rule({64, 256, 7, 7}, conv_attrs(512, 3, 2, 1, false)), "forward, backward-data, backward-weights");
  EXPECT_EQ(rule({64, 256, 7, 7}, conv_attrs(512, 1, 2, 0, false)), "backward-data, backward-weights");
  EXPECT_EQ(rule({64, 256, 7, 7}, conv_attrs(256, 3, 1, 1, false)), "backward-weights");
  EXPECT_EQ(rule({64, 128, 14, 14}, conv_attrs(256, 3, 2, 1, false)), "backward-data, backward-weights");
  EXPECT_EQ(rule({64, 64, 28, 28}, conv_attrs(128, 1, 2, 0, false)), "backward-weights");
  EXPECT_EQ(rule({16, 64, 56, 56}, conv_attrs(128, 1, 2, 0, false)), "") << "resnet18-imagenet's first shortcut: oneDNN's";
  EXPECT_EQ(rule({64, 64, 28, 28}, conv_attrs(128, 3, 2, 1, false)), "");
  EXPECT_EQ(rule({64, 64, 7, 7}, conv_attrs(128, 3, 1, 1, false)), "") << "medium's conv3: oneDNN's kernels";
  EXPECT_EQ(rule({64, 64, 28, 28}, conv_attrs(64, 3, 1, 1, false)), "");
  ::setenv("DLPERF_CPU_CONV_GEMM", "off", 1);
  EXPECT_EQ(rule({64, 512, 4, 4}, conv_attrs(512, 3, 1, 1, false)), "");
  ::setenv("DLPERF_CPU_CONV_GEMM", "sometimes", 1);
  EXPECT_THROW(rule({64, 512, 4, 4}, conv_attrs(512, 3, 1, 1, false)), Error);
}

TEST(CpuF32Copies, ConvAndLinearMatchTheReference) {
  check_conv_copies(cpu::Compute::f32_copies);
  check_linear_copies(cpu::Compute::f32_copies);
}

TEST(LinearTest, MatchesReference) {
  const Dims xd = {5, 37};
  OpAttrs a;
  a.out_features = 13;
  Vec x = random_vec(185, 81), w = random_vec(13 * 37, 82), b = random_vec(13, 83), dy = random_vec(65, 84);
  auto r = run_cpu(OpKind::linear, a, {xd}, {x}, {w, b}, dy);
  Vec dx, dw, db;
  ref::linear_backward(x, xd, w, 13, dy, dx, dw, db);
  EXPECT_LT(rel_err(r.y, ref::linear_forward(x, xd, w, b, 13)), kF32Tol);
  EXPECT_LT(rel_err(r.dx[0], dx), kF32Tol);
  EXPECT_LT(rel_err(r.dparams[0], dw), kF32Tol);
  EXPECT_LT(rel_err(r.dparams[1], db), kF32Tol);
  Vec rr = random_vec(65, 85);
  ref::linear_backward(x, xd, w, 13, rr, dx, dw, db);
  expect_grad_matches([&](const Vec& v) { return dot(ref::linear_forward(v, xd, w, b, 13), rr); }, x, dx, "dx");
  expect_grad_matches([&](const Vec& v) { return dot(ref::linear_forward(x, xd, v, b, 13), rr); }, w, dw, "dw");
  expect_grad_matches([&](const Vec& v) { return dot(ref::linear_forward(x, xd, w, v, 13), rr); }, b, db, "db");
}

TEST(FlattenTest, KeepsNchwOrderBothWays) {
  const Dims xd = {2, 3, 2, 2};
  Vec x = random_vec(24, 91), dy = random_vec(24, 92);
  auto r = run_cpu(OpKind::flatten, {}, {xd}, {x}, {}, dy);
  EXPECT_LT(rel_err(r.y, x), 1e-7);
  EXPECT_LT(rel_err(r.dx[0], dy), 1e-7);
}

TEST(AddTest, MatchesReferenceAndPassesGradientToBoth) {
  const Dims xd = {2, 4, 3, 3};
  Vec a = random_vec(72, 101), b = random_vec(72, 102), dy = random_vec(72, 103);
  auto r = run_cpu(OpKind::add, {}, {xd, xd}, {a, b}, {}, dy);
  EXPECT_LT(rel_err(r.y, ref::add_forward(a, b)), kF32Tol);
  EXPECT_LT(rel_err(r.dx[0], dy), 1e-7);
  EXPECT_LT(rel_err(r.dx[1], dy), 1e-7);
}

// The add with the relu after it fused in (a residual block's sum): relu(a + b) forward, and the
// output's gradient masked by the relu handed to both inputs, in every layout the network gives
// it; 24 channels pad a 16-channel block and fill three 8-channel ones (oneDNN 2.6's binary add
// with a relu post-op crashed on AVX-512 for nChw8c at such counts: eltwise.cpp), and gradients
// agree with finite differences of the float64 reference.
TEST(AddTest, WithTheReluFusedInMatchesReferenceInEveryLayout) {
  const Dims xd = {2, 24, 3, 5};
  const size_t n = size_t(numel(xd));
  const Vec a = random_vec(n, 104), b = random_vec(n, 105), dy = random_vec(n, 106);
  const Vec sum = ref::add_forward(a, b), y = ref::relu_forward(sum), dx = ref::relu_backward(sum, dy);
  for (auto [layout, name] : {std::pair{cpu::tag::undef, "plain"}, {cpu::tag::nChw8c, "nChw8c"}, {cpu::tag::nChw16c, "nChw16c"},
                              {cpu::tag::nhwc, "nhwc"}}) {
    SCOPED_TRACE(name);
    const auto r = run_cpu(OpKind::add, {}, {xd, xd}, {a, b}, {}, dy, {.fuse_relu = true, .input_layout = layout});
    EXPECT_LT(rel_err(r.y, y), kF32Tol);
    EXPECT_LT(rel_err(r.dx[0], dx), 1e-7);
    EXPECT_LT(rel_err(r.dx[1], dx), 1e-7);
    const auto plain = run_cpu(OpKind::add, {}, {xd, xd}, {a, b}, {}, dy, {.input_layout = layout});
    EXPECT_LT(rel_err(plain.y, sum), kF32Tol);
    EXPECT_LT(rel_err(plain.dx[1], dy), 1e-7);
  }
  const auto r = run_cpu(OpKind::add, {}, {xd, xd}, {a, b}, {}, dy, {.fuse_relu = true});
  expect_grad_matches([&](const Vec& v) { return dot(ref::relu_forward(ref::add_forward(v, b)), dy); }, a, Vec(r.dx[0].begin(), r.dx[0].end()), "da");
  expect_grad_matches([&](const Vec& v) { return dot(ref::relu_forward(ref::add_forward(a, v)), dy); }, b, Vec(r.dx[1].begin(), r.dx[1].end()), "db");
}

TEST(DropoutTest, ScalesKeptValuesAndDropsAboutP) {
  const Dims xd = {8, 1000};
  OpAttrs a;
  a.p = 0.3;
  Vec x = random_vec(8000, 111, 0.5, 1.5), dy = random_vec(8000, 112);
  cpu::set_dropout_step(5);
  auto r = run_cpu(OpKind::dropout, a, {xd}, {x}, {}, dy);
  std::vector<uint8_t> keep(8000);
  size_t kept = 0;
  for (size_t i = 0; i < 8000; ++i) kept += keep[i] = r.y[i] != 0.f;
  EXPECT_NEAR(double(kept) / 8000, 0.7, 0.03);
  EXPECT_LT(rel_err(r.y, ref::dropout_forward(x, keep, a.p)), kF32Tol);
  EXPECT_LT(rel_err(r.dx[0], ref::dropout_backward(dy, keep, a.p)), kF32Tol);
  // Same step, same mask; eval passes values through.
  auto again = run_cpu(OpKind::dropout, a, {xd}, {x}, {}, {});
  EXPECT_EQ(again.y, r.y);
  auto eval = run_cpu(OpKind::dropout, a, {xd}, {x}, {}, {}, {.training = false});
  EXPECT_LT(rel_err(eval.y, x), 1e-7);
}

TEST(LossTest, SoftmaxCrossEntropyMatchesReference) {
  const int64_t n = 6, c = 10;
  for (double smoothing : {0.0, 0.1}) {
    Vec z = random_vec(size_t(n * c), 121, -3, 3);
    std::vector<int32_t> labels = {0, 3, 9, 1, 1, 7};
    std::vector<float> zf(z.begin(), z.end()), dz(size_t(n * c));
    auto r = cpu::softmax_cross_entropy(zf.data(), labels.data(), n, c, n, smoothing, dz.data());
    EXPECT_NEAR(r.loss, ref::softmax_cross_entropy(z, labels, c, smoothing), 1e-5);
    Vec g = ref::softmax_cross_entropy_backward(z, labels, c, smoothing);
    EXPECT_LT(rel_err(dz, g), kF32Tol);
    expect_grad_matches([&](const Vec& v) { return ref::softmax_cross_entropy(v, labels, c, smoothing); }, z, g, "dlogits");
  }
}

TEST(LossTest, PaddingRowsCountForNothing) {
  const int64_t c = 4;
  std::vector<float> z = {1, 2, 3, 4, 9, 9, 9, -9};
  std::vector<int32_t> labels = {3, 0};
  std::vector<float> dz(8);
  auto r = cpu::softmax_cross_entropy(z.data(), labels.data(), 2, c, 1, 0.0, dz.data());
  auto only = cpu::softmax_cross_entropy(z.data(), labels.data(), 1, c, 1, 0.0, nullptr);
  EXPECT_DOUBLE_EQ(r.loss, only.loss);
  EXPECT_EQ(r.correct, 1);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(dz[size_t(i)], 0.f);
}

}  // namespace
}  // namespace dlperf::test
