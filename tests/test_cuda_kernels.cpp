// dlperf's own CUDA kernels (kernels.cu, batchnorm.cu) against the float64 reference and the
// CPU engine, op by op, and cuBLASLt's epilogues as the linear layer uses them. Built twice (cuda_kernel_util.h): on a GPU in dlperf_tests (suite Cuda),
// and in dlperf_emu_tests (suite CudaEmu) under the CPU emulation, so every CI run executes the
// kernels' code, GPU or not.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "cuda_kernel_util.h"

// A CPU-only build has neither the kernels nor their emulation.
#if defined(DLPERF_HAVE_CUDA) || defined(DLPERF_CUDA_EMULATION)
#include "backend/cpu/ops.h"
#include "backend/cuda/batchnorm.h"
#include "backend/cuda/bn_split.h"
#include "backend/cuda/conv.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/loss_scale.h"
#include "backend/cuda/pool_index.h"
#include "backend/cuda/small_conv.h"
#include "backend/ref/ref_ops.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "nn/optimizer.h"
#include "ops/op.h"

namespace dlperf::test {
namespace {

TEST(KERNEL_SUITE, ElementwiseKernelsMatchTheReference) {
  REQUIRE_GPU();
  const size_t n = 100003;  // not a multiple of the block size
  const auto x = randn(n, 1), b = randn(n, 2);
  Dev<float> dx(x), db(b), y(n), dy(b), g(n);
  cuda::relu_forward(dx.p, y.p, int64_t(n), nullptr);
  const auto yh = y.host();
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(yh[i], x[i] > 0 ? x[i] : 0.f);
  cuda::relu_backward(y.p, dy.p, g.p, int64_t(n), nullptr);
  const auto gh = g.host();
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(gh[i], yh[i] > 0 ? b[i] : 0.f);
  cuda::add(dx.p, db.p, y.p, int64_t(n), nullptr);
  const auto sum = y.host();
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(sum[i], double(x[i]) + double(b[i]), 1e-6);

  // These passes move 16-byte packs where all their arrays are aligned, and single elements
  // where one is not and after the last whole pack: both ways give the same bits, in every type.
  const int64_t m = int64_t(n) - 8;  // 99995: elements left after the last pack of 4 and of 8
  for (cuda::DType t : {cuda::DType::f32, cuda::DType::bf16, cuda::DType::f16}) {
    SCOPED_TRACE(int(t));
    const size_t es = cuda::bytes_of(t);
    // `v` in type t, as bytes, `offset` elements into the buffer.
    auto typed = [&](const std::vector<float>& v, int64_t offset) {
      std::vector<uint8_t> bytes(size_t(offset) * es + v.size() * es, 0);
      if (t == cuda::DType::f32) std::memcpy(bytes.data() + size_t(offset) * es, v.data(), v.size() * es);
      else std::memcpy(bytes.data() + size_t(offset) * es, to_half(t, v).data(), v.size() * es);
      return bytes;
    };
    std::vector<std::vector<float>> by_offset;
    for (int64_t offset : {0, 1}) {  // 0 keeps every array 16-byte aligned, 1 none
      Dev<uint8_t> xb(typed(x, offset)), bb(typed(b, offset)), yb((n + 1) * es), gb((n + 1) * es), sb((n + 1) * es);
      const size_t at = size_t(offset) * es;
      cuda::relu_forward(t, xb.p + at, yb.p + at, m, nullptr);
      cuda::relu_backward(t, yb.p + at, bb.p + at, gb.p + at, m, nullptr);
      cuda::add(t, xb.p + at, bb.p + at, sb.p + at, m, nullptr);
      std::vector<float> all;
      for (const Dev<uint8_t>* out : {&yb, &gb, &sb}) {
        const auto v = from_device(t, out->p + at, size_t(m));
        all.insert(all.end(), v.begin(), v.end());
      }
      by_offset.push_back(all);
    }
    for (size_t i = 0; i < by_offset[0].size(); ++i) ASSERT_EQ(by_offset[0][i], by_offset[1][i]) << i;
  }
}

// A residual add with its relu in one pass, forward (add with relu) and backward (the relu's mask
// handed to both inputs, copied or summed into each): the bits of the separate passes, in every
// type, aligned or not; and, in fp32, the float64 reference's values.
TEST(KERNEL_SUITE, ResidualAddWithItsReluGivesTheSeparatePassesBits) {
  REQUIRE_GPU();
  const size_t n = 100003;
  const int64_t m = int64_t(n) - 8;  // a tail after the last whole pack
  const auto a = randn(n, 11), b = randn(n, 12), dy = randn(n, 13), old0 = randn(n, 14), old1 = randn(n, 15);
  for (cuda::DType t : {cuda::DType::f32, cuda::DType::bf16, cuda::DType::f16}) {
    const size_t es = cuda::bytes_of(t);
    auto typed = [&](const std::vector<float>& v, int64_t offset) {  // `v` in type t, `offset` elements in
      std::vector<uint8_t> bytes(size_t(offset) * es + v.size() * es, 0);
      if (t == cuda::DType::f32) std::memcpy(bytes.data() + size_t(offset) * es, v.data(), v.size() * es);
      else std::memcpy(bytes.data() + size_t(offset) * es, to_half(t, v).data(), v.size() * es);
      return bytes;
    };
    for (int64_t offset : {0, 1}) {  // 0 keeps every array 16-byte aligned, 1 none
      SCOPED_TRACE(fmt::format("type {}, offset {}", int(t), offset));
      const size_t at = size_t(offset) * es;
      auto bytes_of_result = [&](const Dev<uint8_t>& d) {
        const auto h = d.host();
        return std::vector<uint8_t>(h.begin() + std::ptrdiff_t(at), h.begin() + std::ptrdiff_t(at + size_t(m) * es));
      };
      Dev<uint8_t> da(typed(a, offset)), db(typed(b, offset)), ddy(typed(dy, offset)), sum((n + 1) * es), y_sep((n + 1) * es),
          y((n + 1) * es), g((n + 1) * es);
      cuda::add(t, da.p + at, db.p + at, sum.p + at, m, nullptr);
      cuda::relu_forward(t, sum.p + at, y_sep.p + at, m, nullptr);
      cuda::add(t, da.p + at, db.p + at, y.p + at, m, nullptr, true);
      ASSERT_EQ(bytes_of_result(y), bytes_of_result(y_sep));
      // Backward: the relu's gradient, then a copy or a sum into each input's gradient.
      cuda::relu_backward(t, y.p + at, ddy.p + at, g.p + at, m, nullptr);
      for (int sums = 0; sums < 4; ++sums) {
        const bool add0 = sums & 1, add1 = sums & 2;
        SCOPED_TRACE(fmt::format("sum into d0 {}, d1 {}", add0, add1));
        Dev<uint8_t> d0(typed(old0, offset)), d1(typed(old1, offset)), r0(typed(old0, offset)), r1(typed(old1, offset));
        cuda::relu_grad_to_inputs(t, y.p + at, ddy.p + at, d0.p + at, add0, d1.p + at, add1, m, nullptr);
        for (auto [r, sum_into] : {std::pair{&r0, add0}, std::pair{&r1, add1}}) {
          if (sum_into) cuda::add(t, r->p + at, g.p + at, r->p + at, m, nullptr);
          else ASSERT_EQ(cudaMemcpy(r->p + at, g.p + at, size_t(m) * es, cudaMemcpyDeviceToDevice), cudaSuccess);
        }
        ASSERT_EQ(bytes_of_result(d0), bytes_of_result(r0));
        ASSERT_EQ(bytes_of_result(d1), bytes_of_result(r1));
        if (t == cuda::DType::f32 && offset == 0) {  // against float64
          const auto h0 = from_device(t, d0.p, size_t(m));
          for (size_t i = 0; i < size_t(m); ++i) {
            const double s = double(a[i]) + double(b[i]), want = (s > 0 ? double(dy[i]) : 0.0) + (add0 ? double(old0[i]) : 0.0);
            ASSERT_NEAR(h0[i], want, 1e-6 * (1 + std::fabs(want))) << i;
          }
        }
      }
      // One input taking a gradient (the other is the model input): d1 null.
      Dev<uint8_t> only(typed(old0, offset));
      cuda::relu_grad_to_inputs(t, y.p + at, ddy.p + at, only.p + at, false, nullptr, false, m, nullptr);
      ASSERT_EQ(bytes_of_result(only), bytes_of_result(g));
    }
  }
}

TEST(KERNEL_SUITE, DropoutDrawsTheCpuEnginesMask) {
  REQUIRE_GPU();
  const size_t n = 50000;
  const float p = 0.25f;
  const uint64_t step_seed = hash_coords(7, 3);
  const auto x = randn(n, 3);
  Dev<float> dx(x), y(n), back(n);
  Dev<uint8_t> mask(n);
  cuda::dropout_forward(dx.p, y.p, mask.p, int64_t(n), p, step_seed, nullptr, nullptr);
  const auto yh = y.host();
  const auto mh = mask.host();
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool keep = uniform01(mix64(step_seed ^ uint64_t(i))) >= p;  // cpu::Dropout's rule
    ASSERT_EQ(bool(mh[i]), keep) << i;
    ASSERT_NEAR(yh[i], keep ? x[i] / (1 - p) : 0.f, 1e-6);
    kept += keep;
  }
  EXPECT_NEAR(double(kept) / double(n), 0.75, 0.01);
  cuda::dropout_backward(dx.p, mask.p, back.p, int64_t(n), p, nullptr);
  const auto bh = back.host();
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(bh[i], mh[i] ? x[i] / (1 - p) : 0.f, 1e-6);
}

TEST(KERNEL_SUITE, SoftmaxCrossEntropyMatchesTheCpuLoss) {
  REQUIRE_GPU();
  const int64_t rows = 37, classes = 10, valid = 33;
  const auto z = randn(size_t(rows * classes), 4);
  std::vector<int32_t> labels(static_cast<size_t>(rows), 0);
  for (int64_t i = 0; i < rows; ++i) labels[size_t(i)] = int32_t((i * 7) % classes);
  for (float eps : {0.0f, 0.1f}) {
    std::vector<float> cpu_grad(size_t(rows * classes));
    const auto ref = cpu::softmax_cross_entropy(z.data(), labels.data(), rows, classes, valid, eps, cpu_grad.data());
    Dev<float> dz(z), grad(size_t(rows * classes));
    Dev<int32_t> dl(labels), correct(1);
    Dev<double> loss(1);
    cuda::softmax_cross_entropy(dz.p, dl.p, rows, classes, valid, eps, loss.p, correct.p, grad.p, nullptr);
    EXPECT_NEAR(loss.host()[0] / double(valid), ref.loss, 1e-9);
    EXPECT_EQ(correct.host()[0], ref.correct);
    const auto gh = grad.host();
    for (size_t i = 0; i < gh.size(); ++i) ASSERT_NEAR(gh[i], cpu_grad[i], 1e-6) << i;
  }
}

TEST(KERNEL_SUITE, OptimizerUpdatesMatchTheCpuOptimizer) {
  REQUIRE_GPU();
  const size_t n = 4099;
  for (const char* name : {"sgd", "adamw"}) {
    SCOPED_TRACE(name);
    auto w = randn(n, 5);
    const auto g = randn(n, 6);
    nn::OptimizerConfig cfg;
    cfg.name = name;
    cfg.weight_decay = 0.01;
    std::vector<float> w_cpu = w, g_cpu = g;
    nn::Optimizer opt(cfg, {{w_cpu.data(), g_cpu.data(), n}});
    Dev<float> dw(w), dg(g), m(n), v(n);
    for (int64_t step = 1; step <= 3; ++step) {
      opt.step(0.05);
      if (cfg.name == "sgd")
        cuda::sgd_update(dw.p, dg.p, m.p, int64_t(n), 0.05f, float(cfg.momentum), float(cfg.weight_decay), cfg.nesterov, nullptr, nullptr, nullptr);
      else
        cuda::adamw_update(dw.p, dg.p, m.p, v.p, int64_t(n), 0.05f, float(cfg.beta1), float(cfg.beta2), float(cfg.eps),
                           float(cfg.weight_decay), step, nullptr, nullptr, nullptr);
    }
    const auto wh = dw.host();
    for (size_t i = 0; i < n; ++i) ASSERT_NEAR(wh[i], w_cpu[i], 1e-5 * (1 + std::fabs(w_cpu[i]))) << i;
  }
}

// Mixed precision's one-launch update: the first gradients come from a half buffer, the first
// weights go to one too, and everything else is the plain update; fp16's unscale reads the half
// gradients likewise. Reference: the CPU optimizer on the gradients as the half buffer holds them.
TEST(KERNEL_SUITE, OptimizerReadsAndWritesTheHalfCopies) {
  REQUIRE_GPU();
  const size_t n = 4099, grads_h = 1000, weights_h = 3000;
  for (const auto t : {cuda::DType::bf16, cuda::DType::f16}) {
    for (const char* name : {"sgd", "adamw"}) {
      SCOPED_TRACE(fmt::format("{} {}", name, t == cuda::DType::bf16 ? "bf16" : "fp16"));
      const auto w = randn(n, 5), g = randn(n, 6);
      Dev<float> dw(w), dg(g), m(n), v(n), g_half32(grads_h);
      Dev<uint16_t> gh(grads_h), wh(weights_h);
      // The half gradients, and the fp32 values they stand for (the fp32 buffer's copy is stale).
      cuda::cast_from_f32(t, dg.p, gh.p, int64_t(grads_h), nullptr);
      cuda::cast_to_f32(t, gh.p, g_half32.p, int64_t(grads_h), nullptr);
      std::vector<float> g_cpu = g, w_cpu = w;
      const auto gh32 = g_half32.host();
      std::copy(gh32.begin(), gh32.end(), g_cpu.begin());
      nn::OptimizerConfig cfg;
      cfg.name = name;
      cfg.weight_decay = 0.01;
      nn::Optimizer opt(cfg, {{w_cpu.data(), g_cpu.data(), n}});
      const cuda::HalfCopies half{t, gh.p, int64_t(grads_h), wh.p, int64_t(weights_h)};
      for (int64_t step = 1; step <= 3; ++step) {
        opt.step(0.05);
        if (cfg.name == "sgd")
          cuda::sgd_update(dw.p, dg.p, m.p, int64_t(n), 0.05f, float(cfg.momentum), float(cfg.weight_decay), cfg.nesterov, nullptr,
                           nullptr, nullptr, half);
        else
          cuda::adamw_update(dw.p, dg.p, m.p, v.p, int64_t(n), 0.05f, float(cfg.beta1), float(cfg.beta2), float(cfg.eps),
                             float(cfg.weight_decay), step, nullptr, nullptr, nullptr, half);
      }
      const auto w_gpu = dw.host();
      for (size_t i = 0; i < n; ++i) ASSERT_NEAR(w_gpu[i], w_cpu[i], 1e-5 * (1 + std::fabs(w_cpu[i]))) << i;
      // The half copy holds the fp32 weights rounded, exactly as the cast kernel rounds them.
      Dev<uint16_t> rounded(weights_h);
      cuda::cast_from_f32(t, dw.p, rounded.p, int64_t(weights_h), nullptr);
      EXPECT_EQ(wh.host(), rounded.host());
    }
    // Unscaling reads the half gradients into fp32 and finds an overflow among them.
    std::vector<float> g32 = {8.f, 8.f, 8.f};
    Dev<float> dg(g32), two(std::vector<float>{2.f, 4.f}), inf(std::vector<float>{INFINITY});
    Dev<uint16_t> gh(2), gh_inf(1);
    Dev<int32_t> found(1);
    cuda::cast_from_f32(t, two.p, gh.p, 2, nullptr);
    cuda::unscale_and_check(dg.p, 3, 0.5f, found.p, nullptr, nullptr, t, gh.p, 2);
    EXPECT_EQ(dg.host(), (std::vector<float>{1.f, 2.f, 4.f}));
    EXPECT_EQ(found.host()[0], 0);
    cuda::cast_from_f32(t, inf.p, gh_inf.p, 1, nullptr);
    cuda::unscale_and_check(dg.p, 3, 1.f, found.p, nullptr, nullptr, t, gh_inf.p, 1);
    EXPECT_EQ(found.host()[0], 1);
  }
}

TEST(KERNEL_SUITE, CastsRoundTripWithinTheFormatsPrecision) {
  REQUIRE_GPU();
  const size_t n = 10000;
  const auto x = randn(n, 8);
  Dev<float> dx(x), back(n);
  Dev<uint16_t> half(n);
  cuda::cast_from_f32(cuda::DType::bf16, dx.p, half.p, int64_t(n), nullptr);
  cuda::cast_to_f32(cuda::DType::bf16, half.p, back.p, int64_t(n), nullptr);
  auto bh = back.host();
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(bh[i], x[i], std::fabs(x[i]) * 0x1p-8 + 1e-30) << i;  // 8 significant bits
  cuda::cast_from_f32(cuda::DType::f16, dx.p, half.p, int64_t(n), nullptr);
  cuda::cast_to_f32(cuda::DType::f16, half.p, back.p, int64_t(n), nullptr);
  bh = back.host();
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(bh[i], x[i], std::fabs(x[i]) * 0x1p-11 + 6e-8) << i;  // 11 bits, subnormals
  // Loss scaling: an inf is found, finite values are unscaled.
  std::vector<float> g = {2.f, 4.f, INFINITY};
  Dev<float> dg(g);
  Dev<int32_t> found(1);
  cuda::unscale_and_check(dg.p, 2, 0.5f, found.p, nullptr);
  EXPECT_EQ(found.host()[0], 0);
  EXPECT_EQ(dg.host()[1], 2.f);
  cuda::unscale_and_check(dg.p, 3, 1.f, found.p, nullptr);
  EXPECT_EQ(found.host()[0], 1);
}

TEST(KERNEL_SUITE, NormalizeMatchesTheLoadersFormula) {
  REQUIRE_GPU();
  const int64_t n = 3, c = 2, hw = 5;
  std::vector<uint8_t> img(size_t(n * c * hw));
  for (size_t i = 0; i < img.size(); ++i) img[i] = uint8_t(i * 37);
  const std::vector<float> scale = {0.5f, 2.f}, shift = {-1.f, 3.f};
  Dev<uint8_t> di(img);
  Dev<float> out(img.size()), ds(scale), dsh(shift);
  cuda::normalize_u8(di.p, out.p, n, c, hw, ds.p, dsh.p, nullptr);
  const auto o = out.host();
  for (size_t i = 0; i < o.size(); ++i) {
    const size_t ch = (i / size_t(hw)) % size_t(c);
    ASSERT_EQ(o[i], float(img[i]) * scale[ch] + shift[ch]);
  }
}

// The pooling test's cases, in either layout: max with padding, max, average
// counting padding, global average; their PoolShape on input `xd` and the reference's attributes.
struct PoolCase {
  const char* name;
  ops::OpKind kind;
  int64_t k, stride, pad;
};
const PoolCase kPoolCases[] = {{"max 3/2 pad 1", ops::OpKind::maxpool2d, 3, 2, 1}, {"max 2/2", ops::OpKind::maxpool2d, 2, 2, 0},
                               {"avg 3/1 pad 1", ops::OpKind::avgpool2d, 3, 1, 1}, {"global", ops::OpKind::global_avgpool, 0, 1, 0}};
cuda::PoolShape pool_shape(const PoolCase& c, const Dims& xd, cuda::Layout layout, ops::OpAttrs& a) {
  a.kernel = c.k, a.stride = c.stride, a.padding = c.pad;
  const bool global = c.kind == ops::OpKind::global_avgpool;
  cuda::PoolShape p;
  p.planes = xd[0] * xd[1], p.h = xd[2], p.w = xd[3], p.channels = xd[1], p.layout = layout;
  p.out_h = global ? 1 : ops::window_out(xd[2], c.k, c.stride, c.pad), p.out_w = global ? 1 : ops::window_out(xd[3], c.k, c.stride, c.pad);
  p.kh = global ? xd[2] : c.k, p.kw = global ? xd[3] : c.k, p.stride = c.stride, p.pad = c.pad;
  p.max = c.kind == ops::OpKind::maxpool2d;
  return p;
}
// The float64 reference's output and input gradient for case `c`.
void pool_reference(const PoolCase& c, const ref::Vec& x, const Dims& xd, const ops::OpAttrs& a, const ref::Vec& dy, ref::Vec& y,
                    ref::Vec& dx) {
  switch (c.kind) {
    case ops::OpKind::maxpool2d: y = ref::maxpool_forward(x, xd, a), dx = ref::maxpool_backward(x, xd, a, dy); break;
    case ops::OpKind::avgpool2d: y = ref::avgpool_forward(x, xd, a), dx = ref::avgpool_backward(xd, a, dy); break;
    default: y = ref::global_avgpool_forward(x, xd), dx = ref::global_avgpool_backward(xd, dy); break;
  }
}

// Pooling (max with padding, average counting padding, global average), forward and backward,
// against the float64 reference in fp32, and in bf16 and fp16 to their precision.
TEST(KERNEL_SUITE, PoolingMatchesTheReference) {
  REQUIRE_GPU();
  const Dims xd{2, 3, 9, 7};
  const auto x = randn(size_t(numel(xd)), 21);
  ref::Vec x64(x.begin(), x.end());
  for (const PoolCase& c : kPoolCases)
  for (cuda::Layout layout : {cuda::Layout::nchw, cuda::Layout::nhwc}) {
    SCOPED_TRACE(fmt::format("{} {}", c.name, cuda::to_string(layout)));
    ops::OpAttrs a;
    const cuda::PoolShape p = pool_shape(c, xd, layout, a);
    const Dims yd{xd[0], xd[1], p.out_h, p.out_w};
    const size_t ny = size_t(p.planes * p.out_h * p.out_w);
    const auto dy = randn(ny, 22);
    // The device holds both in the layout; results come back to NCHW for the comparison.
    const auto xl = to_layout(x, xd, layout), dyl = to_layout(dy, yd, layout);
    auto nchw_y = [&](const std::vector<float>& v) { return from_layout(v, yd, layout); };
    auto nchw_x = [&](const std::vector<float>& v) { return from_layout(v, xd, layout); };
    ref::Vec dy64(dy.begin(), dy.end());
    ref::Vec y_ref, dx_ref;
    pool_reference(c, x64, xd, a, dy64, y_ref, dx_ref);
    ASSERT_EQ(y_ref.size(), ny);
    Dev<float> dx(xl), ddy(dyl), y(ny), g(x.size());
    cuda::pool_forward(cuda::DType::f32, p, dx.p, y.p, nullptr);
    cuda::pool_backward(cuda::DType::f32, p, dx.p, ddy.p, g.p, nullptr);
    const auto yh = nchw_y(y.host()), gh = nchw_x(g.host());
    for (size_t i = 0; i < ny; ++i) ASSERT_NEAR(yh[i], y_ref[i], 1e-5) << i;
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(gh[i], dx_ref[i], 1e-5) << i;
    for (cuda::DType t : {cuda::DType::bf16, cuda::DType::f16}) {
      const double tol = t == cuda::DType::bf16 ? 2e-2 : 2e-3;
      Dev<uint16_t> hx(to_half(t, xl)), hdy(to_half(t, dyl)), hy(ny), hg(x.size());
      cuda::pool_forward(t, p, hx.p, hy.p, nullptr);
      cuda::pool_backward(t, p, hx.p, hdy.p, hg.p, nullptr);
      const auto yt = nchw_y(from_device(t, hy.p, ny));
      for (size_t i = 0; i < ny; ++i) ASSERT_NEAR(yt[i], y_ref[i], tol * (1 + std::fabs(y_ref[i]))) << i;
      if (!p.max) {  // a max's gradient may pick another element where rounding made a tie
        const auto gt = nchw_x(from_device(t, hg.p, x.size()));
        for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(gt[i], dx_ref[i], tol * (1 + std::fabs(dx_ref[i]))) << i;
      }
    }
  }
}

// The presets' pooling (2x2, stride 2, no padding) runs on a path of its own (pool2_forward_k,
// pool2_backward_k): the same floats, bit for bit, as the general per-window bodies of
// pool_index.h give, run here on the host, in even maps and odd ones (whose last row and column
// no window reads: their gradient is zero).
TEST(KERNEL_SUITE, PresetPoolingTakesItsOwnPathToTheSameBits) {
  REQUIRE_GPU();
  for (const Dims& xd : {Dims{2, 3, 8, 6}, Dims{2, 3, 9, 7}})
    for (const bool max : {true, false})
      for (cuda::Layout layout : {cuda::Layout::nchw, cuda::Layout::nhwc}) {
        SCOPED_TRACE(fmt::format("{}x{} {} {}", xd[2], xd[3], max ? "max" : "avg", cuda::to_string(layout)));
        cuda::PoolShape p;
        p.planes = xd[0] * xd[1], p.h = xd[2], p.w = xd[3], p.channels = xd[1], p.layout = layout;
        p.out_h = xd[2] / 2, p.out_w = xd[3] / 2, p.kh = p.kw = p.stride = 2, p.pad = 0, p.max = max;
        ASSERT_TRUE(cuda::pool2_fits(p));
        std::vector<float> x = randn(size_t(numel(xd)), 23);
        x[5] = x[4];  // a tie: the first of the two takes a max's gradient
        const size_t ny = size_t(p.planes * p.out_h * p.out_w);
        const auto dy = randn(ny, 24);
        auto load_x = [&](int64_t i) { return x[size_t(i)]; };
        auto load_dy = [&](int64_t i) { return dy[size_t(i)]; };
        std::vector<float> want_y(ny), want_dx(x.size(), 0.f);
        for (size_t e = 0; e < ny; ++e) {
          want_y[e] = cuda::pool_output(p, int64_t(e), load_x);
          cuda::pool_tile_grad(p, int64_t(e), load_x, load_dy, [&](int64_t i, float v) { want_dx[size_t(i)] = v; });
        }
        // NaN where nothing writes: every input element's gradient must be written, the odd
        // map's last row and column (no window reads them) as zeros.
        Dev<float> dx_in(x), ddy(dy), y(ny), g(std::vector<float>(x.size(), NAN));
        cuda::pool_forward(cuda::DType::f32, p, dx_in.p, y.p, nullptr);
        cuda::pool_backward(cuda::DType::f32, p, dx_in.p, ddy.p, g.p, nullptr);
        EXPECT_EQ(y.host(), want_y);
        EXPECT_EQ(g.host(), want_dx);
      }
}

// dlperf's batchnorm kernels (with and without the fused relu) against the float64 reference:
// training forward, running statistics, inference forward and backward, in fp32, bf16 and fp16,
// on shapes that take one block a channel and several. The mean sits far from zero on purpose
// (the one-pass variance must not cancel). Half types compare against the reference fed the
// same rounded inputs, so the tolerance covers the kernels' arithmetic and the output's rounding.
TEST(KERNEL_SUITE, BatchnormMatchesTheReference) {
  REQUIRE_GPU();
  // NCHW: one block a channel, split with the finish folded into the next pass (up to 64 splits),
  // and split with a finishing launch (130 x 64 x 64: 65 splits). NHWC: one tile, two tiles (the
  // second partial), folded (64 x 16 x 16: 64 splits), finished apart (300 x 8 x 8: 75), and more
  // rows than kBnMaxRowSplits blocks of kBnRowsPerBlock.
  for (const Dims& xd : {Dims{2, 5, 3, 7}, Dims{64, 3, 16, 16}, Dims{300, 2, 8, 8}, Dims{4, 40, 5, 5}, Dims{1100, 2, 16, 16},
                         Dims{130, 1, 64, 64}})
    for (cuda::Layout layout : {cuda::Layout::nchw, cuda::Layout::nhwc})
      for (bool relu : {false, true})
      for (cuda::DType t : {cuda::DType::f32, cuda::DType::bf16, cuda::DType::f16}) {
        SCOPED_TRACE(fmt::format("{}x{}x{}x{} {} relu {} type {}", xd[0], xd[1], xd[2], xd[3], cuda::to_string(layout), relu, int(t)));
        const int64_t C = xd[1], M = xd[0] * xd[2] * xd[3];
        const size_t count = size_t(numel(xd));
        std::vector<float> x = randn(count, 41), dy = randn(count, 42), gamma = randn(size_t(C), 43), beta = randn(size_t(C), 44);
        for (auto& v : x) v = 5.f + 3.f * v;
        x = to_layout(x, xd, layout), dy = to_layout(dy, xd, layout);  // stored in the layout; compared in NCHW
        const bool half = t != cuda::DType::f32;
        const double tol = t == cuda::DType::bf16 ? 2e-2 : half ? 3e-3 : 2e-5;
        // Device inputs in the type, and the values the kernels actually see.
        Dev<float> fx(x), fdy(dy);
        Dev<uint16_t> hx(half ? to_half(t, x) : std::vector<uint16_t>(1)), hdy(half ? to_half(t, dy) : std::vector<uint16_t>(1));
        Dev<float> fy(count), fdx(count);
        Dev<uint16_t> hy(half ? count : 1), hdx(half ? count : 1);
        const void* dx_in = half ? static_cast<const void*>(hx.p) : fx.p;
        const void* ddy = half ? static_cast<const void*>(hdy.p) : fdy.p;
        void* dev_y = half ? static_cast<void*>(hy.p) : fy.p;
        void* dev_dx = half ? static_cast<void*>(hdx.p) : fdx.p;
        const std::vector<float> xs = from_layout(from_device(t, dx_in, count), xd, layout),
                                 dys = from_layout(from_device(t, ddy, count), xd, layout);
        auto read = [&](const void* d) { return from_layout(from_device(t, d, count), xd, layout); };

        const size_t cn = static_cast<size_t>(C);
        Dev<float> g(gamma), b(beta), rm(std::vector<float>(cn, 0.f)), rv(std::vector<float>(cn, 1.f)), bm(cn), bi(cn), dg(cn), db(cn);
        Dev<uint8_t> ws(size_t(cuda::bn_workspace_bytes(xd[0], C, xd[2] * xd[3], layout == cuda::Layout::nhwc)));
        const cuda::BatchnormShape shape{xd[0], C, xd[2] * xd[3], layout};
        cuda::BatchnormParams p;
        p.gamma = g.p, p.beta = b.p, p.running_mean = rm.p, p.running_var = rv.p, p.batch_mean = bm.p, p.batch_inv_std = bi.p;
        p.eps = 1e-5f, p.momentum = 0.1f, p.relu = relu;

        const ref::Vec x64(xs.begin(), xs.end()), g64(gamma.begin(), gamma.end()), b64(beta.begin(), beta.end());
        ref::Vec mean, var;
        ref::Vec y_ref = ref::batchnorm_forward_train(x64, xd, g64, b64, 1e-5, mean, var);
        if (relu) y_ref = ref::relu_forward(y_ref);
        cuda::batchnorm_forward_train(t, shape, p, dx_in, dev_y, ws.p, nullptr);
        const auto y = read(dev_y);
        for (size_t i = 0; i < count; ++i) ASSERT_NEAR(y[i], y_ref[i], tol * (1 + std::fabs(y_ref[i]))) << i;
        const auto rmh = rm.host(), rvh = rv.host(), inv = bi.host();
        for (int64_t c = 0; c < C; ++c) {
          const size_t k = size_t(c);
          EXPECT_NEAR(rmh[k], 0.1 * mean[k], 1e-5 * (1 + std::fabs(mean[k])));
          EXPECT_NEAR(rvh[k], 0.9 + 0.1 * var[k] * double(M) / double(M - 1), 1e-5 * (1 + var[k]));
          EXPECT_NEAR(inv[k], 1 / std::sqrt(var[k] + 1e-5), 1e-5 / std::sqrt(var[k]));
        }

        // Backward from the forward's output (the relu's mask) and saved statistics.
        ref::Vec dy64(dys.begin(), dys.end());
        if (relu)
          for (size_t i = 0; i < count; ++i) dy64[i] = y[i] > 0 ? dy64[i] : 0.0;
        ref::Vec dx_ref, dg_ref, db_ref;
        ref::batchnorm_backward(x64, xd, g64, mean, var, 1e-5, dy64, dx_ref, dg_ref, db_ref);
        cuda::batchnorm_backward(t, shape, p, dx_in, dev_y, ddy, dev_dx, dg.p, db.p, ws.p, nullptr);
        const auto dx = read(dev_dx), dgh = dg.host(), dbh = db.host();
        double dx_scale = 0;
        for (double v : dx_ref) dx_scale = std::max(dx_scale, std::fabs(v));
        for (size_t i = 0; i < count; ++i) ASSERT_NEAR(dx[i], dx_ref[i], tol * (1 + dx_scale)) << i;
        for (int64_t c = 0; c < C; ++c) {
          const size_t k = size_t(c);
          EXPECT_NEAR(dgh[k], dg_ref[k], 1e-4 * (std::sqrt(double(M)) + std::fabs(dg_ref[k])));
          EXPECT_NEAR(dbh[k], db_ref[k], 1e-4 * (std::sqrt(double(M)) + std::fabs(db_ref[k])));
        }
        // Without dx (the model's first layer), the parameter gradients are the same, up to the
        // order the finishing kernel adds the partials in where the dx pass would have added them.
        cuda::batchnorm_backward(t, shape, p, dx_in, dev_y, ddy, nullptr, dg.p, db.p, ws.p, nullptr);
        const auto dg_alone = dg.host();
        for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(dg_alone[size_t(c)], dgh[size_t(c)], 1e-6 * (1 + std::fabs(dgh[size_t(c)])));

        // Inference with the running statistics the step left.
        const auto rm_now = rm.host(), rv_now = rv.host();
        ref::Vec y_eval = ref::batchnorm_forward_eval(x64, xd, g64, b64, ref::Vec(rm_now.begin(), rm_now.end()),
                                                      ref::Vec(rv_now.begin(), rv_now.end()), 1e-5);
        if (relu) y_eval = ref::relu_forward(y_eval);
        cuda::batchnorm_forward_eval(t, shape, p, dx_in, dev_y, ws.p, nullptr);
        const auto ye = read(dev_y);
        for (size_t i = 0; i < count; ++i) ASSERT_NEAR(ye[i], y_eval[i], tol * (1 + std::fabs(y_eval[i]))) << i;
      }
}

// With the forward's scales (BatchnormParams::fwd_scale), the saved means and beta, the backward
// pass recomputes the fused relu's output from x instead of reading it: the same dx, dgamma and
// dbeta, bit for bit, in every path (one block or tile, folded, finished apart) and type. Channel
// 0 has gamma 0 and beta 1e-8, so its y is 1e-8 in fp32 and bf16 (mask on) and rounds to 0 in
// fp16 (mask off): a recomputation that skipped the rounding to the stored type would differ
// there. Channel 1 is constant, as a dead relu leaves a channel: its y is beta exactly (below).
TEST(KERNEL_SUITE, BatchnormRecomputesTheReluMaskToTheSameBits) {
  REQUIRE_GPU();
  for (const Dims& xd : {Dims{2, 5, 3, 7}, Dims{64, 3, 16, 16}, Dims{300, 2, 8, 8}, Dims{130, 1, 64, 64}})
    for (cuda::Layout layout : {cuda::Layout::nchw, cuda::Layout::nhwc})
      for (cuda::DType t : {cuda::DType::f32, cuda::DType::bf16, cuda::DType::f16}) {
        SCOPED_TRACE(fmt::format("{}x{}x{}x{} {} type {}", xd[0], xd[1], xd[2], xd[3], cuda::to_string(layout), int(t)));
        const int64_t C = xd[1];
        const size_t count = size_t(numel(xd)), cn = size_t(C);
        std::vector<float> x = randn(count, 51), dy = randn(count, 52), gamma = randn(cn, 53), beta = randn(cn, 54);
        gamma[0] = 0.f, beta[0] = 1e-8f;
        // Channel 1 (where there is one) is constant, with beta 0: every y is exactly 0, as on the
        // CPU engine and in PyTorch, so the relu passes no gradient into it. (y = scale x + shift
        // with shift = -mean scale, as until 2026-11-28, left the rounding residue of scale mean.)
        if (C > 1) {
          gamma[1] = 1.7f, beta[1] = 0.f;
          const int64_t hw = xd[2] * xd[3];
          for (int64_t n = 0; n < xd[0]; ++n)
            for (int64_t i = 0; i < hw; ++i) x[size_t(layout == cuda::Layout::nchw ? (n * C + 1) * hw + i : (n * hw + i) * C + 1)] = 0.3f;
        }
        const bool half = t != cuda::DType::f32;
        Dev<float> fx(x), fdy(dy), fy(count), fdx(count);
        Dev<uint16_t> hx(half ? to_half(t, x) : std::vector<uint16_t>(1)), hdy(half ? to_half(t, dy) : std::vector<uint16_t>(1)),
            hy(half ? count : 1), hdx(half ? count : 1);
        const void* dev_x = half ? static_cast<const void*>(hx.p) : fx.p;
        const void* dev_dy = half ? static_cast<const void*>(hdy.p) : fdy.p;
        void* dev_y = half ? static_cast<void*>(hy.p) : fy.p;
        void* dev_dx = half ? static_cast<void*>(hdx.p) : fdx.p;
        Dev<float> g(gamma), b(beta), rm(std::vector<float>(cn, 0.f)), rv(std::vector<float>(cn, 1.f)), bm(cn), bi(cn), dg(cn), db(cn),
            scale(cn);
        Dev<uint8_t> ws(size_t(cuda::bn_workspace_bytes(xd[0], C, xd[2] * xd[3], layout == cuda::Layout::nhwc)));
        const cuda::BatchnormShape shape{xd[0], C, xd[2] * xd[3], layout};
        cuda::BatchnormParams p;
        p.gamma = g.p, p.beta = b.p, p.running_mean = rm.p, p.running_var = rv.p, p.batch_mean = bm.p, p.batch_inv_std = bi.p;
        p.relu = true, p.fwd_scale = scale.p;
        cuda::batchnorm_forward_train(t, shape, p, dev_x, dev_y, ws.p, nullptr);
        const std::vector<float> y = from_device(t, dev_y, count);
        // Channel 0's stored y: about 1e-8 where the type holds it, 0 in fp16.
        const float y0 = y[size_t(shape.first(0))];
        if (t == cuda::DType::f16) EXPECT_EQ(y0, 0.f);
        else EXPECT_NEAR(y0, 1e-8, 1e-10);
        if (C > 1)
          for (int64_t n = 0; n < xd[0]; ++n)
            for (int64_t i = 0; i < xd[2] * xd[3]; ++i) {
              const size_t at = size_t(layout == cuda::Layout::nchw ? (n * C + 1) * xd[2] * xd[3] + i : (n * xd[2] * xd[3] + i) * C + 1);
              ASSERT_EQ(y[at], 0.f) << "constant channel, element " << at;
            }
        auto backward = [&](bool recompute) {
          cuda::BatchnormParams q = p;
          if (!recompute) q.fwd_scale = nullptr;
          cuda::batchnorm_backward(t, shape, q, dev_x, dev_y, dev_dy, dev_dx, dg.p, db.p, ws.p, nullptr);
          std::vector<float> out = from_device(t, dev_dx, count);
          const auto dgh = dg.host(), dbh = db.host();
          out.insert(out.end(), dgh.begin(), dgh.end());
          out.insert(out.end(), dbh.begin(), dbh.end());
          return out;
        };
        const std::vector<float> read = backward(false);
        EXPECT_EQ(backward(true), read);
        // The recomputation reads no y: a y overwritten after the forward changes nothing.
        ASSERT_EQ(cudaMemset(dev_y, 0, count * cuda::bytes_of(t)), cudaSuccess);
        EXPECT_EQ(backward(true), read);
      }
}

// The element-wise kernels and the loss in bf16 and fp16 agree with fp32 to the type's precision.
TEST(KERNEL_SUITE, HalfPrecisionKernelsTrackFp32) {
  REQUIRE_GPU();
  const size_t n = 6000;
  const auto x = randn(n, 31), b = randn(n, 32);
  Dev<float> fy(n);
  Dev<uint8_t> mask(n);
  for (cuda::DType t : {cuda::DType::bf16, cuda::DType::f16}) {
    SCOPED_TRACE(t == cuda::DType::bf16 ? "bf16" : "fp16");
    const double tol = t == cuda::DType::bf16 ? 1e-2 : 1e-3;
    Dev<uint16_t> hx(to_half(t, x)), hb(to_half(t, b)), hy(n);
    // The fp32 kernels run on the values the half ones see (the inputs rounded to the type), so
    // what differs is the half kernels' own rounding: a tolerance on the inputs' rounding would
    // have to grow where an add cancels.
    Dev<float> rx(from_device(t, hx.p, n)), rb(from_device(t, hb.p, n));
    auto near = [&](const std::vector<float>& got, const std::vector<float>& want) {
      for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << i;
    };
    cuda::relu_forward(rx.p, fy.p, int64_t(n), nullptr);
    cuda::relu_forward(t, hx.p, hy.p, int64_t(n), nullptr);
    near(from_device(t, hy.p, n), fy.host());
    cuda::add(rx.p, rb.p, fy.p, int64_t(n), nullptr);
    cuda::add(t, hx.p, hb.p, hy.p, int64_t(n), nullptr);
    near(from_device(t, hy.p, n), fy.host());
    cuda::dropout_forward(rx.p, fy.p, mask.p, int64_t(n), 0.3f, 99, nullptr, nullptr);
    cuda::dropout_forward(t, hx.p, hy.p, mask.p, int64_t(n), 0.3f, 99, nullptr, nullptr);
    near(from_device(t, hy.p, n), fy.host());
    const int64_t rows = 60, classes = 100;
    std::vector<int32_t> labels(static_cast<size_t>(rows), 0);
    for (int64_t r = 0; r < rows; ++r) labels[size_t(r)] = int32_t((r * 13) % classes);
    Dev<int32_t> dl(labels), c32(1), c16(1);
    Dev<double> l32(1), l16(1);
    Dev<float> g32(n);
    Dev<uint16_t> g16(n);
    cuda::softmax_cross_entropy(rx.p, dl.p, rows, classes, rows, 0.1f, l32.p, c32.p, g32.p, nullptr);
    cuda::softmax_cross_entropy(t, hx.p, dl.p, rows, classes, rows, 0.1f, l16.p, c16.p, g16.p, nullptr, nullptr);
    EXPECT_NEAR(l16.host()[0], l32.host()[0], tol * l32.host()[0]);
    near(from_device(t, g16.p, n), g32.host());
    Dev<float> db32(static_cast<size_t>(classes)), db16(static_cast<size_t>(classes));
    cuda::bias_grad(rx.p, db32.p, rows, classes, 1, nullptr);
    cuda::bias_grad(t, hx.p, db16.p, rows, classes, 1, nullptr);
    const auto d32 = db32.host(), d16 = db16.host();
    for (int64_t c = 0; c < classes; ++c) ASSERT_NEAR(d16[size_t(c)], d32[size_t(c)], 10 * tol * (1 + std::fabs(d32[size_t(c)])));
  }
}

// The layout moves (the NHWC input cast, a flatten's transposes) and the bias kernels in both of a
// convolution's layouts, against host loops; in bf16 against the same loops on rounded values.
TEST(KERNEL_SUITE, LayoutAndBiasKernelsMatchHostLoops) {
  REQUIRE_GPU();
  const Dims d{3, 5, 4, 6};  // N, C, H, W
  const int64_t n = d[0], c = d[1], hw = d[2] * d[3];
  const size_t count = size_t(numel(d));
  const auto x = randn(count, 61), bias = randn(size_t(c), 62);
  Dev<float> dx(x), dbias(bias), out(count), back(count);
  cuda::cast_from_f32_to_nhwc(cuda::DType::f32, dx.p, out.p, n, c, hw, nullptr);
  EXPECT_EQ(out.host(), to_layout(x, d, cuda::Layout::nhwc));
  cuda::change_layout(cuda::DType::f32, out.p, back.p, n, c, hw, cuda::Layout::nhwc, nullptr);
  EXPECT_EQ(back.host(), x);
  cuda::change_layout(cuda::DType::f32, back.p, out.p, n, c, hw, cuda::Layout::nchw, nullptr);
  EXPECT_EQ(out.host(), to_layout(x, d, cuda::Layout::nhwc));
  // bf16: the cast rounds once, the transposes move bits.
  Dev<uint16_t> h(count), h_back(count), x_half(to_half(cuda::DType::bf16, x));
  cuda::cast_from_f32_to_nhwc(cuda::DType::bf16, dx.p, h.p, n, c, hw, nullptr);
  const std::vector<float> rounded = from_device(cuda::DType::bf16, x_half.p, count);
  EXPECT_EQ(from_device(cuda::DType::bf16, h.p, count), to_layout(rounded, d, cuda::Layout::nhwc));
  cuda::change_layout(cuda::DType::bf16, h.p, h_back.p, n, c, hw, cuda::Layout::nhwc, nullptr);
  EXPECT_EQ(from_device(cuda::DType::bf16, h_back.p, count), rounded);

  // A conv's bias as the executor adds it: NCHW (outer N, inner H*W) and NHWC (outer N*H*W, inner 1).
  for (cuda::Layout layout : {cuda::Layout::nchw, cuda::Layout::nhwc}) {
    SCOPED_TRACE(cuda::to_string(layout));
    const bool nhwc = layout == cuda::Layout::nhwc;
    const int64_t outer = nhwc ? n * hw : n, inner = nhwc ? 1 : hw;
    const auto stored = to_layout(x, d, layout);
    Dev<float> y(stored), dy(stored), db(static_cast<size_t>(c));
    cuda::add_bias(y.p, dbias.p, outer, c, inner, nullptr);
    const auto got = from_layout(y.host(), d, layout);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(got[i], x[i] + bias[(i / size_t(hw)) % size_t(c)]) << i;
    cuda::bias_grad(dy.p, db.p, outer, c, inner, nullptr);
    std::vector<double> want(size_t(c), 0.0);
    for (size_t i = 0; i < count; ++i) want[(i / size_t(hw)) % size_t(c)] += x[i];
    const auto dbh = db.host();
    for (int64_t k = 0; k < c; ++k) EXPECT_NEAR(dbh[size_t(k)], want[size_t(k)], 1e-5 * (1 + std::fabs(want[size_t(k)]))) << k;
  }
}

// A linear layer's bias with the relu after it, forward (one launch) and backward (the relu's
// backward in place, then the bias gradient, one launch), in fp32 and bf16, against host loops.
TEST(KERNEL_SUITE, LinearBiasWithTheReluAfterIt) {
  REQUIRE_GPU();
  const int64_t rows = 37, features = 150;  // features not a multiple of the block: partial blocks
  const size_t count = size_t(rows * features);
  const auto x = randn(count, 81), dy = randn(count, 82), bias = randn(size_t(features), 83);
  Dev<float> dbias(bias);
  for (cuda::DType t : {cuda::DType::f32, cuda::DType::bf16}) {
    SCOPED_TRACE(t == cuda::DType::f32 ? "f32" : "bf16");
    // Forward: y = max(x + bias, 0), each sum rounded to the type once.
    Dev<uint16_t> xh(to_half(cuda::DType::bf16, x));
    Dev<float> xf(x);
    void* y = t == cuda::DType::f32 ? static_cast<void*>(xf.p) : static_cast<void*>(xh.p);
    const std::vector<float> xin = t == cuda::DType::f32 ? x : from_device(cuda::DType::bf16, xh.p, count);
    cuda::add_bias(t, y, dbias.p, rows, features, 1, nullptr, true);
    std::vector<float> want(count);
    for (size_t i = 0; i < count; ++i) want[i] = std::max(xin[i] + bias[i % size_t(features)], 0.f);
    if (t != cuda::DType::f32) {  // rounded to bf16 as the kernel's store rounds
      Dev<uint16_t> w(to_half(t, want));
      want = from_device(t, w.p, count);
    }
    const std::vector<float> got = t == cuda::DType::f32 ? xf.host() : from_device(t, y, count);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(got[i], want[i]) << i;
    // Backward: dy masked where y is not positive (in place), db its column sums in fp32.
    Dev<uint16_t> dyh(to_half(cuda::DType::bf16, dy));
    Dev<float> dyf(dy), db(static_cast<size_t>(features));
    void* g = t == cuda::DType::f32 ? static_cast<void*>(dyf.p) : static_cast<void*>(dyh.p);
    const std::vector<float> gin = t == cuda::DType::f32 ? dy : from_device(cuda::DType::bf16, dyh.p, count);
    cuda::relu_bias_grad(t, y, g, db.p, rows, features, nullptr);
    const std::vector<float> masked = t == cuda::DType::f32 ? dyf.host() : from_device(t, g, count);
    std::vector<double> sums(size_t(features), 0.0);
    for (size_t i = 0; i < count; ++i) {
      const float m = got[i] > 0 ? gin[i] : 0.f;
      ASSERT_EQ(masked[i], m) << i;
      sums[i % size_t(features)] += m;
    }
    const auto dbh = db.host();
    for (int64_t f = 0; f < features; ++f)
      EXPECT_NEAR(dbh[size_t(f)], sums[size_t(f)], 1e-5 * (1 + std::fabs(sums[size_t(f)]))) << f;
  }
}

// cuBLASLt's epilogues as the linear layer uses them: bias, bias + relu, and the bias gradient.
// On a GPU these check cuBLASLt; under the emulation they check that its stand-in
// (emu/gemm_emu.cpp) means by each epilogue what cuBLASLt does, so the executor's tests there
// stand for the GPU.
// The linear layer's forward GEMM with its bias inside (cuBLASLt's bias epilogue, fp32 and
// tf32) against float64: D[m x n] = A^T B + bias per row.
TEST(KERNEL_SUITE, GemmAddsTheBiasInsideTheGemm) {
  REQUIRE_GPU();
  const int64_t m = 10, n = 7, k = 33;
  const auto a = randn(size_t(k * m), 51), b = randn(size_t(k * n), 52), bias = randn(size_t(m), 53);
  for (cuda::Precision p : {cuda::Precision::fp32, cuda::Precision::tf32})
    for (bool relu : {false, true}) {  // relu: the RELU_BIAS epilogue of a linear layer with a relu after it
      SCOPED_TRACE(fmt::format("{}{}", cuda::to_string(p), relu ? " + relu" : ""));
      Dev<float> da(a), db(b), dbias(bias), dd(size_t(m * n));
      cuda::LtGemm g(p, true, false, m, n, k, size_t(4) << 20, true, {dbias.p, relu});
      EXPECT_TRUE(g.fuses_bias()) << "cuBLASLt offered no bias epilogue here; the layer adds the bias itself";
      EXPECT_TRUE(!relu || g.fuses_relu()) << "cuBLASLt offered no relu epilogue here; the layer launches its own relu";
      g.run(da.p, db.p, dd.p, nullptr);
      if (!g.fuses_bias()) cuda::add_bias(cuda::DType::f32, dd.p, dbias.p, n, m, 1, nullptr, relu);
      else if (relu && !g.fuses_relu()) cuda::relu_forward(dd.p, dd.p, m * n, nullptr);
      const auto d = dd.host();
      const double tol = p == cuda::Precision::tf32 ? 1e-2 : 1e-5;
      for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < m; ++i) {
          double want = bias[size_t(i)];
          for (int64_t q = 0; q < k; ++q) want += double(a[size_t(i * k + q)]) * double(b[size_t(j * k + q)]);
          if (relu) want = std::max(want, 0.0);
          ASSERT_NEAR(d[size_t(j * m + i)], want, tol * (1 + std::sqrt(double(k)))) << i << "," << j;
        }
    }
}

// cuBLASLt's plain GEMM in the three layouts the linear layer uses (TN forward, NN backward-data,
// NT backward-weight), every precision, fp32 or the half type's own output, against float64 on
// the rounded inputs; tolerances relative to the sum of the products' magnitudes, as the
// convolutions' (fp32 output 2e-5, tf32 5e-3, fp16 output 2e-3, bf16 output 1e-2).
TEST(KERNEL_SUITE, GemmMatchesTheReferenceInEveryLayoutAndPrecision) {
  REQUIRE_GPU();
  const int64_t m = 12, n = 9, k = 40;
  const auto a = randn(size_t(m * k), 71), b = randn(size_t(k * n), 72);
  for (cuda::Precision p : {cuda::Precision::fp32, cuda::Precision::tf32, cuda::Precision::bf16, cuda::Precision::fp16})
    for (auto [transa, transb] : {std::pair{true, false}, std::pair{false, false}, std::pair{false, true}})
      for (bool half_out : {false, true}) {
        const bool half = p == cuda::Precision::bf16 || p == cuda::Precision::fp16;
        if (half_out && !half) continue;
        SCOPED_TRACE(fmt::format("{} {}{}{}", cuda::to_string(p), transa ? "T" : "N", transb ? "T" : "N", half_out ? ", half output" : ""));
        const cuda::DType t = p == cuda::Precision::bf16 ? cuda::DType::bf16 : cuda::DType::f16;
        Dev<float> af(a), bf(b), d(size_t(m * n));
        Dev<uint16_t> ah(to_half(t, a)), bh(to_half(t, b));
        const std::vector<float> as = half ? from_device(t, ah.p, a.size()) : a, bs = half ? from_device(t, bh.p, b.size()) : b;
        cuda::LtGemm g(p, transa, transb, m, n, k, size_t(4) << 20, half_out);
        g.run(half ? static_cast<const void*>(ah.p) : af.p, half ? static_cast<const void*>(bh.p) : bf.p, d.p, nullptr);
        const std::vector<float> got = half_out ? from_device(t, d.p, size_t(m * n)) : d.host();
        const double tol = p == cuda::Precision::tf32 ? 5e-3 : !half_out ? 2e-5 : p == cuda::Precision::fp16 ? 2e-3 : 1e-2;
        double worst = 0;
        for (int64_t j = 0; j < n; ++j)
          for (int64_t i = 0; i < m; ++i) {
            double want = 0, scale = 0;
            for (int64_t q = 0; q < k; ++q) {  // op(A)(i, q) op(B)(q, j), column-major storage
              const double v = double(as[size_t(transa ? q + i * k : i + q * m)]) * double(bs[size_t(transb ? j + q * n : q + j * k)]);
              want += v, scale += std::fabs(v);
            }
            worst = std::max(worst, std::fabs(got[size_t(i + j * m)] - want) / scale);
          }
        EXPECT_LT(worst, tol);
      }
}

// A linear layer's weight gradient, dW[in x out] = x^T dy as the executor runs it (A stored in x
// batch, B stored out x batch and transposed), with cuBLASLt's BGRADB epilogue summing dy over
// the batch into the bias gradient: db[j] = sum over the batch of dy[j]. fp32 output, as the
// executor's weight gradients are in every precision.
TEST(KERNEL_SUITE, GemmSumsTheBiasGradient) {
  REQUIRE_GPU();
  const int64_t in = 12, out = 9, batch = 40;
  const auto x = randn(size_t(in * batch), 54), dy = randn(size_t(out * batch), 55);
  for (cuda::Precision p : {cuda::Precision::fp32, cuda::Precision::tf32, cuda::Precision::bf16, cuda::Precision::fp16}) {
    SCOPED_TRACE(cuda::to_string(p));
    const cuda::DType t = p == cuda::Precision::bf16 ? cuda::DType::bf16 : p == cuda::Precision::fp16 ? cuda::DType::f16 : cuda::DType::f32;
    Dev<float> xf(x), dyf(dy), dw{size_t(in * out)}, db{size_t(out)};
    const cuda::DType half = t == cuda::DType::f32 ? cuda::DType::bf16 : t;  // unused in fp32 and tf32
    Dev<uint16_t> xh(to_half(half, x)), dyh(to_half(half, dy));
    const void* a = t == cuda::DType::f32 ? static_cast<const void*>(xf.p) : xh.p;
    const void* b = t == cuda::DType::f32 ? static_cast<const void*>(dyf.p) : dyh.p;
    cuda::GemmEpilogue e;
    e.bias_grad = db.p;
    cuda::LtGemm g(p, false, true, in, out, batch, size_t(4) << 20, false, e);
    EXPECT_TRUE(g.fuses_bias_grad()) << "cuBLASLt offered no BGRADB epilogue here; the layer launches its own bias gradient";
    g.run(a, b, dw.p, nullptr);
    if (!g.fuses_bias_grad()) cuda::bias_grad(t, b, db.p, batch, out, 1, nullptr);
    const std::vector<float> xs = t == cuda::DType::f32 ? x : from_device(t, xh.p, x.size());
    const std::vector<float> ds = t == cuda::DType::f32 ? dy : from_device(t, dyh.p, dy.size());
    const double tol = p == cuda::Precision::fp32 ? 1e-5 : 1e-2;
    const auto w = dw.host(), bias = db.host();
    for (int64_t j = 0; j < out; ++j) {
      double sum = 0;
      for (int64_t l = 0; l < batch; ++l) sum += ds[size_t(j + l * out)];
      EXPECT_NEAR(bias[size_t(j)], sum, 1e-5 * (1 + std::fabs(sum))) << j;
      for (int64_t i = 0; i < in; ++i) {
        double want = 0;
        for (int64_t l = 0; l < batch; ++l) want += double(xs[size_t(i + l * in)]) * double(ds[size_t(j + l * out)]);
        ASSERT_NEAR(w[size_t(i + j * in)], want, tol * (1 + std::sqrt(double(batch)))) << i << "," << j;
      }
    }
  }
}

// A convolution test's tensors on the device in a type and layout: `upload` stores an NCHW tensor
// and gives what the device holds (rounded to the type) back in NCHW, `download` reads one back.
struct StoredConv {
  cuda::DType t;
  cuda::Layout layout;
  bool half() const { return t != cuda::DType::f32; }
  std::unique_ptr<Dev<float>> upload(const std::vector<float>& v, const Dims& d, std::vector<float>& values) const {
    const std::vector<float> stored = to_layout(v, d, layout);
    auto dev = std::make_unique<Dev<float>>(stored.size());
    if (half()) {
      const auto h = to_half(t, stored);
      EXPECT_EQ(cudaMemcpy(dev->p, h.data(), h.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
      values = from_device(t, dev->p, stored.size());
    } else {
      values = stored;
      EXPECT_EQ(cudaMemcpy(dev->p, stored.data(), stored.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    }
    values = from_layout(values, d, layout);
    return dev;
  }
  std::vector<float> download(const Dev<float>& dev, const Dims& d) const {
    const std::vector<float> stored = half() ? from_device(t, dev.p, size_t(numel(d))) : dev.host();
    return from_layout(stored, d, layout);
  }
};

// A convolution's input, weights and output gradient, random from seeds `seed`, `seed + 1` and
// `seed + 2`, on the device as `io` stores them, with the values the device holds (NCHW, fp32).
struct ConvInputs {
  Dims xd, wd, yd;
  std::vector<float> xs, ws, dys;
  std::unique_ptr<Dev<float>> x, w, dy;
  ConvInputs(const StoredConv& io, const cuda::ConvShape& s, uint64_t seed)
      : xd{s.n, s.c, s.h, s.w}, wd{s.k, s.c, s.r, s.r}, yd{s.n, s.k, s.out_h(), s.out_w()} {
    x = io.upload(randn(size_t(numel(xd)), seed), xd, xs);
    w = io.upload(randn(size_t(numel(wd)), seed + 1), wd, ws);
    dy = io.upload(randn(size_t(numel(yd)), seed + 2), yd, dys);
  }
};

// A convolution's passes in float64 on the values the device holds, with the sums of the
// products' magnitudes (the same passes on |x|, |w|, |dy|) that each element's error is measured
// against.
struct ConvReference {
  ref::Vec y, dx, dw, scale_y, scale_dx, scale_dw;
  ConvReference(const cuda::ConvShape& s, const std::vector<float>& xs, const std::vector<float>& ws, const std::vector<float>& dys) {
    ops::OpAttrs a;
    a.out_channels = s.k, a.kernel = s.r, a.stride = s.stride, a.padding = s.pad, a.bias = false;
    const Dims xd{s.n, s.c, s.h, s.w};
    const ref::Vec X(xs.begin(), xs.end()), W(ws.begin(), ws.end()), DY(dys.begin(), dys.end());
    auto abs_of = [](ref::Vec v) {
      for (double& e : v) e = std::fabs(e);
      return v;
    };
    ref::Vec db;
    y = ref::conv2d_forward(X, xd, W, {}, a), scale_y = ref::conv2d_forward(abs_of(X), xd, abs_of(W), {}, a);
    ref::conv2d_backward(X, xd, W, a, DY, dx, dw, db);
    ref::conv2d_backward(abs_of(X), xd, abs_of(W), a, abs_of(DY), scale_dx, scale_dw, db);
  }
  /// The largest error of `got` against `want`, relative to `scale`.
  static double worst(const std::vector<float>& got, const ref::Vec& want, const ref::Vec& scale) {
    EXPECT_EQ(got.size(), want.size());
    double w = 0;
    for (size_t i = 0; i < want.size() && i < got.size(); ++i) w = std::max(w, std::fabs(got[i] - want[i]) / (scale[i] + 1e-6));
    return w;
  }
};

// cuDNN's convolution as the executor calls it (CudnnConv: forward, backward-data,
// backward-filter) against the float64 reference, in every precision and both layouts, over
// shapes with padding, stride 2, 1x1 kernels, no padding and odd sizes. The inputs are rounded to
// the precision first, so what is left is the accumulation and the output's rounding, measured
// against the sum of the products' magnitudes (the reference run on |x|, |w|, |dy|): fp32 2e-5
// (cuDNN may pick Winograd or FFT), tf32 5e-3 (its inputs keep 10 mantissa bits), fp16 2e-3 and
// bf16 1e-2 (the output's rounding). In NHWC the filters are [K, R, S, C]: the same move as the
// activations', with K for N. Backward-data also adds into a gradient already there.
TEST(KERNEL_SUITE, ConvolutionMatchesTheReference) {
  REQUIRE_GPU();
  const std::vector<cuda::ConvShape> shapes = {
      {2, 3, 9, 7, 5, 3, 1, 1}, {2, 8, 8, 8, 16, 3, 2, 1}, {3, 6, 5, 5, 4, 1, 1, 0}, {2, 16, 6, 6, 8, 3, 1, 0}};
  for (const cuda::ConvShape& s : shapes)
    for (cuda::Precision p : {cuda::Precision::fp32, cuda::Precision::tf32, cuda::Precision::bf16, cuda::Precision::fp16})
      for (cuda::Layout layout : {cuda::Layout::nchw, cuda::Layout::nhwc}) {
        SCOPED_TRACE(fmt::format("{}x{}x{}x{} to {} channels, kernel {} stride {} padding {}, {} {}", s.n, s.c, s.h, s.w, s.k, s.r,
                                 s.stride, s.pad, cuda::to_string(p), cuda::to_string(layout)));
        const StoredConv io{p == cuda::Precision::bf16 ? cuda::DType::bf16 : p == cuda::Precision::fp16 ? cuda::DType::f16 : cuda::DType::f32,
                            layout};
        const ConvInputs in(io, s, 61);
        const Dims &xd = in.xd, &wd = in.wd, &yd = in.yd;
        const std::vector<float>&xs = in.xs, &ws = in.ws, &dys = in.dys;
        const auto &x = in.x, &w = in.w, &dy = in.dy;
        Dev<float> y(size_t(numel(yd))), dx(size_t(numel(xd))), dw(size_t(numel(wd)));
        cuda::CudnnConv conv(s, p, layout == cuda::Layout::nhwc);
        conv.forward(x->p, w->p, y.p, nullptr);
        conv.backward_data(w->p, dy->p, dx.p, nullptr);
        conv.backward_filter(x->p, dy->p, dw.p, nullptr);
        const ConvReference want(s, xs, ws, dys);
        const double tol = p == cuda::Precision::fp32 ? 2e-5 : p == cuda::Precision::tf32 ? 5e-3 : p == cuda::Precision::fp16 ? 2e-3 : 1e-2;
        EXPECT_LT(ConvReference::worst(io.download(y, yd), want.y, want.scale_y), tol) << "forward (" << conv.algorithms() << ")";
        EXPECT_LT(ConvReference::worst(io.download(dx, xd), want.dx, want.scale_dx), tol) << "backward-data (" << conv.algorithms() << ")";
        EXPECT_LT(ConvReference::worst(io.download(dw, wd), want.dw, want.scale_dw), tol) << "backward-filter (" << conv.algorithms() << ")";
        // Backward-data adding into a gradient another reader of x wrote (beta = 1): x's
        // gradient plus what was there, within the same tolerance of both sums' magnitudes.
        std::vector<float> before;
        const auto summed = io.upload(randn(size_t(numel(xd)), 64), xd, before);
        conv.backward_data(w->p, dy->p, summed->p, nullptr, /*add=*/true);
        ref::Vec want_sum = want.dx, scale_sum = want.scale_dx;
        for (size_t i = 0; i < before.size(); ++i) want_sum[i] += before[i], scale_sum[i] += std::fabs(before[i]);
        EXPECT_LT(ConvReference::worst(io.download(*summed, xd), want_sum, scale_sum), tol)
            << "backward-data adding (" << conv.algorithms() << ")";
      }
}

// The own kernels for convolutions of 1 or 3 input channels (small_conv.h), forward and weight
// gradient, against float64 in both layouts and every type: every channel grouping (1 output
// channel, 4, 8 with one group, 16 from three channels, 256 with a group a thread of a warp), a
// stride of 2, no padding, and enough pixels for several blocks of partial sums with a short
// last share. The weight gradient gives the same bits on a second run, and in NHWC arrays off
// 16-byte alignment (loaded and stored one element at a time) give the packed path's bits.
TEST(KERNEL_SUITE, SmallConvolutionMatchesTheReference) {
  REQUIRE_GPU();
  EXPECT_FALSE(cuda::small_conv_fits({2, 2, 8, 8, 8, 3, 1, 1}));    // 2 channels: cuDNN's
  EXPECT_FALSE(cuda::small_conv_fits({2, 1, 8, 8, 8, 5, 1, 2}));    // 5x5
  EXPECT_FALSE(cuda::small_conv_fits({2, 3, 8, 8, 512, 3, 1, 1}));  // more channels than a block's threads
  EXPECT_FALSE(cuda::small_conv_fits({2, 1, 8, 8, 24, 3, 1, 1}));   // not a power of two
  const std::vector<cuda::ConvShape> shapes = {{2, 1, 9, 7, 4, 3, 1, 1},   {3, 3, 8, 8, 16, 3, 2, 1},    {2, 1, 6, 5, 256, 3, 1, 0},
                                               {40, 1, 12, 12, 8, 3, 1, 1}, {2, 3, 7, 9, 32, 3, 1, 1}, {2, 3, 5, 5, 1, 3, 1, 1}};
  for (const cuda::ConvShape& s : shapes)
    for (cuda::DType t : {cuda::DType::f32, cuda::DType::bf16, cuda::DType::f16})
      for (cuda::Layout layout : {cuda::Layout::nchw, cuda::Layout::nhwc}) {
        SCOPED_TRACE(fmt::format("{}x{}x{}x{} to {} channels, stride {} padding {}, {} {}", s.n, s.c, s.h, s.w, s.k, s.stride, s.pad,
                                 t == cuda::DType::f32 ? "fp32" : t == cuda::DType::bf16 ? "bf16" : "fp16", cuda::to_string(layout)));
        ASSERT_TRUE(cuda::small_conv_fits(s));
        const StoredConv io{t, layout};
        const bool nhwc = layout == cuda::Layout::nhwc;
        const ConvInputs in(io, s, 71);
        const Dims &wd = in.wd, &yd = in.yd;
        const std::vector<float>&xs = in.xs, &ws = in.ws, &dys = in.dys;
        const auto &x = in.x, &w = in.w, &dy = in.dy;
        Dev<float> y(size_t(numel(yd))), dw(size_t(numel(wd))), dw2(size_t(numel(wd)));
        Dev<uint8_t> partial(cuda::small_conv_workspace(s));
        cuda::small_conv_forward(t, nhwc, s, x->p, w->p, y.p, nullptr);
        cuda::small_conv_weight_grad(t, nhwc, s, x->p, dy->p, dw.p, partial.p, nullptr);
        cuda::small_conv_weight_grad(t, nhwc, s, x->p, dy->p, dw2.p, partial.p, nullptr);
        EXPECT_EQ(dw.host(), dw2.host()) << "the weight gradient's bits changed between runs";
        if (nhwc) {  // one element past alignment: the same bits, one element at a time
          const size_t es = io.half() ? 2 : 4;
          Dev<float> dy_off(size_t(numel(yd)) + 1), y_off(size_t(numel(yd)) + 1), dw_off(size_t(numel(wd)));
          EXPECT_EQ(cudaMemcpy(reinterpret_cast<char*>(dy_off.p) + es, dy->p, size_t(numel(yd)) * es, cudaMemcpyDeviceToDevice), cudaSuccess);
          cuda::small_conv_forward(t, nhwc, s, x->p, w->p, reinterpret_cast<char*>(y_off.p) + es, nullptr);
          cuda::small_conv_weight_grad(t, nhwc, s, x->p, reinterpret_cast<char*>(dy_off.p) + es, dw_off.p, partial.p, nullptr);
          const auto packed_y = y.host(), unpacked_y = y_off.host();
          EXPECT_EQ(std::memcmp(reinterpret_cast<const char*>(unpacked_y.data()) + es, packed_y.data(), size_t(numel(yd)) * es), 0)
              << "forward off alignment";
          EXPECT_EQ(dw_off.host(), dw.host()) << "weight gradient off alignment";
        }
        // Sums in fp32 either way; in bf16 and fp16 the result's rounding to the type.
        const double tol = t == cuda::DType::f32 ? 2e-5 : t == cuda::DType::f16 ? 2e-3 : 1e-2;
        const ConvReference want(s, xs, ws, dys);
        EXPECT_LT(ConvReference::worst(io.download(y, yd), want.y, want.scale_y), tol) << "forward";
        EXPECT_LT(ConvReference::worst(io.download(dw, wd), want.dw, want.scale_dw), tol) << "weight gradient";
      }
}

// The bandwidth benchmark's kernels compute what they claim to move: a size whose last floats
// are not a whole float4, and one past the grid's threads x 4 floats x kLoadsInFlight (4096
// blocks of 256), whose threads run the loop with several loads in flight.
TEST(KERNEL_SUITE, StreamKernelsComputeWhatTheyMove) {
  REQUIRE_GPU();
  for (const size_t n : {size_t(70001), size_t(4096) * 256 * 4 * 4 * 2 + 7}) {
  SCOPED_TRACE(n);
  const auto a = randn(n, 71), b = randn(n, 72);
  Dev<float> da(a), db(b), dc(n), sum_in(n);
  Dev<double> sum(1);
  cuda::stream_copy(da.p, dc.p, int64_t(n), nullptr);
  EXPECT_EQ(dc.host(), a);
  cuda::stream_triad(dc.p, da.p, db.p, 3.f, int64_t(n), nullptr);
  const auto t = dc.host();
  for (size_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(t[i], a[i] + 3.f * b[i]) << i;
  cuda::fill(sum_in.p, int64_t(n), 0.5f, nullptr);
  cuda::stream_read(sum_in.p, int64_t(n), sum.p, nullptr);
  EXPECT_DOUBLE_EQ(sum.host()[0], 0.5 * double(n));
  }
  cuda::empty_kernel(nullptr);
}

// fp16's dynamic loss scale: an overflow halves the scale and skips the step; 2000 clean steps
// double it.
TEST(KERNEL_SUITE, LossScaleSkipsOverflowsAndGrowsBack) {
  REQUIRE_GPU();
  Dev<cuda::LossScale> ls(std::vector<cuda::LossScale>{cuda::LossScale{}});
  Dev<float> g(std::vector<float>{1.f, INFINITY, 2.f});
  cuda::unscale_and_check(g.p, 3, 1.f, &ls.p->found_inf, nullptr, &ls.p->scale);
  cuda::update_loss_scale(ls.p, nullptr);
  auto s = ls.host()[0];
  EXPECT_EQ(s.scale, 32768.f);
  EXPECT_EQ(s.skipped, 1);
  EXPECT_EQ(s.found_inf, 0);
  Dev<float> ok_g(std::vector<float>{32768.f, -65536.f});
  for (int i = 0; i < 2000; ++i) cuda::update_loss_scale(ls.p, nullptr);
  s = ls.host()[0];
  EXPECT_EQ(s.scale, 65536.f);
  EXPECT_EQ(s.skipped, 1);
  cuda::unscale_and_check(ok_g.p, 2, 1.f, &ls.p->found_inf, nullptr, &ls.p->scale);
  EXPECT_EQ(ok_g.host(), (std::vector<float>{0.5f, -1.f}));
}

// The on-device loader builds the host loader's batches: same order, crops, flips and
// normalization, with the default crop and with flips alone (--crop-pad 0).
TEST(KERNEL_SUITE, OnDeviceBatchesMatchTheHostLoader) {
  REQUIRE_GPU();
  data::Dataset d = data::make_synthetic(200, 3, 10, 12, 10, 4);
  d.flip_ok = true;
  std::vector<float> mean, stddev;
  data::channel_stats(d, mean, stddev);
  for (const int64_t pad : {2, 0}) {
    SCOPED_TRACE(fmt::format("crop pad {}", pad));
    data::LoaderConfig lc;
    lc.batch = 32;
    lc.seed = 11;
    lc.augment = true;
    lc.pad_crop = pad;
    lc.shuffle = true;
    data::Loader loader(d, lc, mean, stddev);
    const int64_t epoch = 2;
    loader.start_epoch(epoch);
    const auto order64 = data::epoch_order(d.size(), true, lc.seed, epoch);
    std::vector<int32_t> order(order64.begin(), order64.end());
    std::vector<float> norm;
    for (size_t c = 0; c < 3; ++c) norm.push_back(1.0f / (255.0f * stddev[c]));
    for (size_t c = 0; c < 3; ++c) norm.push_back(-mean[c] / stddev[c]);
    Dev<uint8_t> images(d.images), labels(d.labels);
    Dev<int32_t> dorder(order), out_labels(size_t(lc.batch));
    Dev<float> dnorm(norm), out(size_t(lc.batch * d.image_bytes()));
    cuda::StepArgs args;
    args.epoch = epoch;
    for (int64_t b = 0; b < loader.batches_per_epoch(); ++b) {
      const data::Batch* hb = loader.next();
      ASSERT_NE(hb, nullptr);
      args.batch = b;
      Dev<cuda::StepArgs> dargs(std::vector<cuda::StepArgs>{args});
      const cuda::DeviceImages view{images.p, labels.p, d.size(), d.channels, d.height, d.width};
      cuda::gather_batch(view, dorder.p, 0, 0, dargs.p, lc.batch, true, lc.pad_crop, true, lc.seed, dnorm.p, dnorm.p + 3, out.p,
                         out_labels.p, nullptr);
      const auto x = out.host();
      const auto y = out_labels.host();
      for (int64_t i = 0; i < lc.batch; ++i) ASSERT_EQ(y[size_t(i)], hb->labels[size_t(i)]) << "batch " << b << " row " << i;
      for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], hb->data()[i], 1e-5) << "batch " << b << " element " << i;
      // Gathered straight into bf16 NHWC (a mixed-precision network's stored input): the fp32
      // batch cast and transposed, bit for bit, as the cast kernel would make it.
      Dev<uint16_t> stored(x.size()), expected(x.size());
      cuda::gather_batch(view, dorder.p, 0, 0, dargs.p, lc.batch, true, lc.pad_crop, true, lc.seed, dnorm.p, dnorm.p + 3, stored.p,
                         out_labels.p, nullptr, cuda::DType::bf16, cuda::Layout::nhwc);
      cuda::cast_from_f32_to_nhwc(cuda::DType::bf16, out.p, expected.p, lc.batch, d.channels, d.height * d.width, nullptr);
      ASSERT_EQ(stored.host(), expected.host()) << "batch " << b;
    }
  }
}

}  // namespace
}  // namespace dlperf::test

#endif
