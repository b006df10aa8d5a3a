// Helpers for running one CPU op on plain data and comparing it with the float64 reference.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/ref/ref_ops.h"
#include "core/rng.h"

namespace dlperf::test {

using ref::Vec;

inline Vec random_vec(size_t n, uint64_t seed, double lo = -1, double hi = 1) {
  Rng r(seed);
  Vec v(n);
  for (auto& x : v) x = lo + (hi - lo) * r.uniform();
  return v;
}

/// max |a - b| relative to max |b| (a normalized error, robust to scale).
inline double rel_err(const std::vector<float>& a, const Vec& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 1e-12;
  for (size_t i = 0; i < b.size() && i < a.size(); ++i) {
    num = std::max(num, std::abs(double(a[i]) - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return num / den;
}

/// x rounded to the nearest bf16 (ties to even), as the engine's conversions round.
inline Vec round_to_bf16(const Vec& x) {
  Vec r(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float f = float(x[i]);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    float b;
    std::memcpy(&b, &u, 4);
    r[i] = b;
  }
  return r;
}

/// Copies plain values into a memory of layout `layout`.
inline cpu::Mem to_layout(const cpu::md& layout, const Dims& dims, const Vec& v) {
  cpu::Mem m(layout, MemCategory::workspace);
  std::vector<float> f(v.begin(), v.end());
  cpu::from_plain(layout, dims, f.data(), m);
  return m;
}

/// Runs an op on the CPU backend with plain inputs; returns plain outputs and gradients.
struct CpuRun {
  std::vector<float> y;
  std::vector<std::vector<float>> dx;       ///< per input
  std::vector<std::vector<float>> dparams;  ///< per parameter
  std::vector<cpu::dt> in_types;            ///< the data type the op asked for per input
  cpu::dt y_type = cpu::dt::undef;          ///< the data type it wrote
  std::string algorithm;                    ///< cpu::Op::algorithm(): "winograd" for a conv that ran so
  std::string matrix_product_passes;        ///< cpu::Op::matrix_product_passes()
};

/// How run_cpu runs the op.
struct RunOptions {
  bool training = true;
  bool fuse_relu = false;
  bool want_dx = true;
  cpu::tag input_layout = cpu::tag::undef;  ///< the producer's layout; undef: plain
  cpu::dt input_type = cpu::dt::f32;        ///< the producer's data type
  cpu::Compute compute = cpu::Compute::fp32;
  bool fp32_output = false;
};

inline CpuRun run_cpu(ops::OpKind kind, const ops::OpAttrs& a, const std::vector<Dims>& in_dims,
                      const std::vector<Vec>& inputs, const std::vector<Vec>& params, const Vec& dy,
                      const RunOptions& o = {}) {
  const bool want_dx = o.want_dx;
  std::vector<cpu::md> mds;
  for (const auto& d : in_dims)
    mds.push_back(cpu::with_type(
        o.input_layout == cpu::tag::undef ? cpu::plain_md(d) : cpu::md(cpu::to_dnnl(d), cpu::dt::f32, o.input_layout), o.input_type));
  auto op = cpu::make_op(kind, a, mds, in_dims, "t",
                         {.fuse_relu = o.fuse_relu, .seed = 7, .need_dx = want_dx, .compute = o.compute, .fp32_output = o.fp32_output});
  EXPECT_EQ(op->params().size(), params.size());
  for (size_t i = 0; i < params.size() && i < op->params().size(); ++i) {
    auto& p = *op->params()[i];
    std::vector<float> f(params[i].begin(), params[i].end());
    cpu::from_plain(p.layout, p.dims, f.data(), p.value);
  }
  std::vector<cpu::Mem> xs, dxs;
  std::vector<dnnl::memory> xm, dxm;
  for (size_t i = 0; i < inputs.size(); ++i) {
    xs.push_back(to_layout(op->input_md(int(i)), in_dims[i], inputs[i]));
    xm.push_back(xs.back().mem);
    dxs.emplace_back(op->input_md(int(i)), MemCategory::workspace);
    dxm.push_back(want_dx ? dxs.back().mem : dnnl::memory());
  }
  const Dims y_dims = ops::infer_shape(kind, a, in_dims);
  cpu::Mem y(op->output_md(), MemCategory::workspace);
  op->forward(xm, y.mem, o.training);
  CpuRun r;
  r.y = cpu::to_plain(op->output_md(), y_dims, y);
  r.y_type = op->output_md().data_type();
  r.algorithm = op->algorithm();
  r.matrix_product_passes = op->matrix_product_passes();
  for (size_t i = 0; i < inputs.size(); ++i) r.in_types.push_back(op->input_md(int(i)).data_type());
  if (dy.empty()) return r;
  cpu::Mem dym = to_layout(op->output_md(), y_dims, dy);
  op->backward(xm, y.mem, dym.mem, dxm);
  for (size_t i = 0; i < inputs.size(); ++i)
    r.dx.push_back(want_dx ? cpu::to_plain(op->input_md(int(i)), in_dims[i], dxs[i]) : std::vector<float>{});
  for (auto& p : op->params()) r.dparams.push_back(cpu::to_plain(p->layout, p->dims, p->grad));
  return r;
}

/// Central finite difference of f at v[i].
inline double numeric_grad(const std::function<double(const Vec&)>& f, Vec v, size_t i, double h = 1e-6) {
  const double x = v[i];
  v[i] = x + h;
  const double up = f(v);
  v[i] = x - h;
  const double down = f(v);
  return (up - down) / (2 * h);
}

/// Checks analytic gradient `g` of scalar f at `v` against finite differences at a spread of
/// indices (all of them for small tensors).
inline void expect_grad_matches(const std::function<double(const Vec&)>& f, const Vec& v, const Vec& g,
                                const char* what, double tol = 1e-6) {
  ASSERT_EQ(v.size(), g.size()) << what;
  const size_t step = std::max<size_t>(1, v.size() / 40);
  for (size_t i = 0; i < v.size(); i += step) {
    const double n = numeric_grad(f, v, i);
    EXPECT_NEAR(g[i], n, tol * std::max(1.0, std::abs(n))) << what << " index " << i;
  }
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace dlperf::test
