#include "backend/ref/ref_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dlperf::ref {

namespace {
struct Win {  // a pooling/conv window geometry
  int64_t N, C, H, W, P, Q, k, s, pad;
  Win(const Dims& d, const ops::OpAttrs& a)
      : N(d[0]), C(d[1]), H(d[2]), W(d[3]),
        P(ops::window_out(d[2], a.kernel, a.stride, a.padding)),
        Q(ops::window_out(d[3], a.kernel, a.stride, a.padding)), k(a.kernel), s(a.stride),
        pad(a.padding) {}
};
}  // namespace

Vec conv2d_forward(const Vec& x, const Dims& xd, const Vec& w, const Vec& b, const ops::OpAttrs& a) {
  Win g(xd, a);
  const int64_t K = a.out_channels;
  Vec y(size_t(g.N * K * g.P * g.Q));
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t o = 0; o < K; ++o)
      for (int64_t p = 0; p < g.P; ++p)
        for (int64_t q = 0; q < g.Q; ++q) {
          double acc = b.empty() ? 0.0 : b[o];
          for (int64_t c = 0; c < g.C; ++c)
            for (int64_t r = 0; r < g.k; ++r)
              for (int64_t t = 0; t < g.k; ++t) {
                const int64_t h = p * g.s - g.pad + r, ww = q * g.s - g.pad + t;
                if (h < 0 || h >= g.H || ww < 0 || ww >= g.W) continue;
                acc += x[((n * g.C + c) * g.H + h) * g.W + ww] * w[((o * g.C + c) * g.k + r) * g.k + t];
              }
          y[((n * K + o) * g.P + p) * g.Q + q] = acc;
        }
  return y;
}

void conv2d_backward(const Vec& x, const Dims& xd, const Vec& w, const ops::OpAttrs& a,
                     const Vec& dy, Vec& dx, Vec& dw, Vec& db) {
  Win g(xd, a);
  const int64_t K = a.out_channels;
  dx.assign(x.size(), 0.0);
  dw.assign(w.size(), 0.0);
  db.assign(a.bias ? size_t(K) : 0, 0.0);
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t o = 0; o < K; ++o)
      for (int64_t p = 0; p < g.P; ++p)
        for (int64_t q = 0; q < g.Q; ++q) {
          const double d = dy[((n * K + o) * g.P + p) * g.Q + q];
          if (a.bias) db[o] += d;
          for (int64_t c = 0; c < g.C; ++c)
            for (int64_t r = 0; r < g.k; ++r)
              for (int64_t t = 0; t < g.k; ++t) {
                const int64_t h = p * g.s - g.pad + r, ww = q * g.s - g.pad + t;
                if (h < 0 || h >= g.H || ww < 0 || ww >= g.W) continue;
                const size_t xi = size_t(((n * g.C + c) * g.H + h) * g.W + ww);
                const size_t wi = size_t(((o * g.C + c) * g.k + r) * g.k + t);
                dx[xi] += d * w[wi];
                dw[wi] += d * x[xi];
              }
        }
}

namespace {
void bn_stats(const Vec& x, const Dims& d, Vec& mean, Vec& var) {
  const int64_t N = d[0], C = d[1], HW = d[2] * d[3];
  mean.assign(size_t(C), 0.0);
  var.assign(size_t(C), 0.0);
  const double m = double(N * HW);
  for (int64_t c = 0; c < C; ++c) {
    double s = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) s += x[size_t((n * C + c) * HW + i)];
    mean[c] = s / m;
    double v = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        const double t = x[size_t((n * C + c) * HW + i)] - mean[c];
        v += t * t;
      }
    var[c] = v / m;
  }
}

Vec bn_apply(const Vec& x, const Dims& d, const Vec& g, const Vec& b, const Vec& mean,
             const Vec& var, double eps) {
  const int64_t N = d[0], C = d[1], HW = d[2] * d[3];
  Vec y(x.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const double inv = 1.0 / std::sqrt(var[c] + eps);
      for (int64_t i = 0; i < HW; ++i) {
        const size_t j = size_t((n * C + c) * HW + i);
        y[j] = (x[j] - mean[c]) * inv * g[c] + b[c];
      }
    }
  return y;
}
}  // namespace

Vec batchnorm_forward_train(const Vec& x, const Dims& xd, const Vec& gamma, const Vec& beta,
                            double eps, Vec& mean, Vec& var) {
  bn_stats(x, xd, mean, var);
  return bn_apply(x, xd, gamma, beta, mean, var, eps);
}

Vec batchnorm_forward_eval(const Vec& x, const Dims& xd, const Vec& gamma, const Vec& beta,
                           const Vec& running_mean, const Vec& running_var, double eps) {
  return bn_apply(x, xd, gamma, beta, running_mean, running_var, eps);
}

void batchnorm_backward(const Vec& x, const Dims& d, const Vec& gamma, const Vec& mean,
                        const Vec& var, double eps, const Vec& dy, Vec& dx, Vec& dgamma,
                        Vec& dbeta) {
  const int64_t N = d[0], C = d[1], HW = d[2] * d[3];
  const double m = double(N * HW);
  dx.assign(x.size(), 0.0);
  dgamma.assign(size_t(C), 0.0);
  dbeta.assign(size_t(C), 0.0);
  for (int64_t c = 0; c < C; ++c) {
    const double inv = 1.0 / std::sqrt(var[c] + eps);
    double sdy = 0, sdyx = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        const size_t j = size_t((n * C + c) * HW + i);
        sdy += dy[j];
        sdyx += dy[j] * (x[j] - mean[c]) * inv;
      }
    dbeta[c] = sdy;
    dgamma[c] = sdyx;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        const size_t j = size_t((n * C + c) * HW + i);
        const double xhat = (x[j] - mean[c]) * inv;
        dx[j] = gamma[c] * inv * (dy[j] - sdy / m - xhat * sdyx / m);
      }
  }
}

Vec relu_forward(const Vec& x) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] > 0 ? x[i] : 0.0;
  return y;
}

Vec relu_backward(const Vec& x, const Vec& dy) {
  Vec dx(x.size());
  for (size_t i = 0; i < x.size(); ++i) dx[i] = x[i] > 0 ? dy[i] : 0.0;
  return dx;
}

namespace {
// Index of the max in each window (first one on ties), -1 for an all-padding window.
std::vector<int64_t> argmax_windows(const Vec& x, const Win& g) {
  std::vector<int64_t> idx(size_t(g.N * g.C * g.P * g.Q), -1);
  for (int64_t nc = 0; nc < g.N * g.C; ++nc)
    for (int64_t p = 0; p < g.P; ++p)
      for (int64_t q = 0; q < g.Q; ++q) {
        double best = -std::numeric_limits<double>::infinity();
        int64_t bi = -1;
        for (int64_t r = 0; r < g.k; ++r)
          for (int64_t t = 0; t < g.k; ++t) {
            const int64_t h = p * g.s - g.pad + r, w = q * g.s - g.pad + t;
            if (h < 0 || h >= g.H || w < 0 || w >= g.W) continue;
            const int64_t j = (nc * g.H + h) * g.W + w;
            if (x[size_t(j)] > best) best = x[size_t(j)], bi = j;
          }
        idx[size_t((nc * g.P + p) * g.Q + q)] = bi;
      }
  return idx;
}
}  // namespace

Vec maxpool_forward(const Vec& x, const Dims& xd, const ops::OpAttrs& a) {
  Win g(xd, a);
  auto idx = argmax_windows(x, g);
  Vec y(idx.size());
  for (size_t i = 0; i < idx.size(); ++i) y[i] = x[size_t(idx[i])];
  return y;
}

Vec maxpool_backward(const Vec& x, const Dims& xd, const ops::OpAttrs& a, const Vec& dy) {
  Win g(xd, a);
  auto idx = argmax_windows(x, g);
  Vec dx(x.size(), 0.0);
  for (size_t i = 0; i < idx.size(); ++i) dx[size_t(idx[i])] += dy[i];
  return dx;
}

Vec avgpool_forward(const Vec& x, const Dims& xd, const ops::OpAttrs& a) {
  Win g(xd, a);
  Vec y(size_t(g.N * g.C * g.P * g.Q), 0.0);
  const double area = double(g.k * g.k);
  for (int64_t nc = 0; nc < g.N * g.C; ++nc)
    for (int64_t p = 0; p < g.P; ++p)
      for (int64_t q = 0; q < g.Q; ++q) {
        double s = 0;
        for (int64_t r = 0; r < g.k; ++r)
          for (int64_t t = 0; t < g.k; ++t) {
            const int64_t h = p * g.s - g.pad + r, w = q * g.s - g.pad + t;
            if (h >= 0 && h < g.H && w >= 0 && w < g.W) s += x[size_t((nc * g.H + h) * g.W + w)];
          }
        y[size_t((nc * g.P + p) * g.Q + q)] = s / area;
      }
  return y;
}

Vec avgpool_backward(const Dims& xd, const ops::OpAttrs& a, const Vec& dy) {
  Win g(xd, a);
  Vec dx(size_t(numel(xd)), 0.0);
  const double area = double(g.k * g.k);
  for (int64_t nc = 0; nc < g.N * g.C; ++nc)
    for (int64_t p = 0; p < g.P; ++p)
      for (int64_t q = 0; q < g.Q; ++q)
        for (int64_t r = 0; r < g.k; ++r)
          for (int64_t t = 0; t < g.k; ++t) {
            const int64_t h = p * g.s - g.pad + r, w = q * g.s - g.pad + t;
            if (h >= 0 && h < g.H && w >= 0 && w < g.W)
              dx[size_t((nc * g.H + h) * g.W + w)] += dy[size_t((nc * g.P + p) * g.Q + q)] / area;
          }
  return dx;
}

Vec global_avgpool_forward(const Vec& x, const Dims& xd) {
  const int64_t NC = xd[0] * xd[1], HW = xd[2] * xd[3];
  Vec y(size_t(NC), 0.0);
  for (int64_t i = 0; i < NC; ++i) {
    for (int64_t j = 0; j < HW; ++j) y[i] += x[size_t(i * HW + j)];
    y[i] /= double(HW);
  }
  return y;
}

Vec global_avgpool_backward(const Dims& xd, const Vec& dy) {
  const int64_t NC = xd[0] * xd[1], HW = xd[2] * xd[3];
  Vec dx(size_t(NC * HW));
  for (int64_t i = 0; i < NC; ++i)
    for (int64_t j = 0; j < HW; ++j) dx[size_t(i * HW + j)] = dy[i] / double(HW);
  return dx;
}

Vec linear_forward(const Vec& x, const Dims& xd, const Vec& w, const Vec& b, int64_t out) {
  const int64_t N = xd[0], I = xd[1];
  Vec y(size_t(N * out));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : b[o];
      for (int64_t i = 0; i < I; ++i) acc += x[size_t(n * I + i)] * w[size_t(o * I + i)];
      y[size_t(n * out + o)] = acc;
    }
  return y;
}

void linear_backward(const Vec& x, const Dims& xd, const Vec& w, int64_t out, const Vec& dy,
                     Vec& dx, Vec& dw, Vec& db) {
  const int64_t N = xd[0], I = xd[1];
  dx.assign(x.size(), 0.0);
  dw.assign(w.size(), 0.0);
  db.assign(size_t(out), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < out; ++o) {
      const double d = dy[size_t(n * out + o)];
      db[o] += d;
      for (int64_t i = 0; i < I; ++i) {
        dx[size_t(n * I + i)] += d * w[size_t(o * I + i)];
        dw[size_t(o * I + i)] += d * x[size_t(n * I + i)];
      }
    }
}

Vec add_forward(const Vec& a, const Vec& b) {
  Vec y(a.size());
  for (size_t i = 0; i < a.size(); ++i) y[i] = a[i] + b[i];
  return y;
}

Vec dropout_forward(const Vec& x, const std::vector<uint8_t>& keep, double p) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = keep[i] ? x[i] / (1.0 - p) : 0.0;
  return y;
}

Vec dropout_backward(const Vec& dy, const std::vector<uint8_t>& keep, double p) {
  return dropout_forward(dy, keep, p);
}

namespace {
// Softmax of one row, computed stably.
void softmax_row(const double* z, int64_t C, double* p) {
  double mx = z[0];
  for (int64_t c = 1; c < C; ++c) mx = std::max(mx, z[c]);
  double s = 0;
  for (int64_t c = 0; c < C; ++c) s += (p[c] = std::exp(z[c] - mx));
  for (int64_t c = 0; c < C; ++c) p[c] /= s;
}
}  // namespace

double softmax_cross_entropy(const Vec& logits, const std::vector<int32_t>& labels,
                             int64_t C, double eps) {
  const int64_t N = int64_t(labels.size());
  Vec p(static_cast<size_t>(C), 0.0);
  double loss = 0;
  for (int64_t n = 0; n < N; ++n) {
    softmax_row(&logits[size_t(n * C)], C, p.data());
    double mean_neg_logp = 0;
    for (int64_t c = 0; c < C; ++c) mean_neg_logp -= std::log(p[c]) / double(C);
    loss += (1 - eps) * -std::log(p[labels[n]]) + eps * mean_neg_logp;
  }
  return loss / double(N);
}

Vec softmax_cross_entropy_backward(const Vec& logits, const std::vector<int32_t>& labels,
                                   int64_t C, double eps) {
  const int64_t N = int64_t(labels.size());
  Vec d(logits.size());
  for (int64_t n = 0; n < N; ++n) {
    double* row = &d[size_t(n * C)];
    softmax_row(&logits[size_t(n * C)], C, row);
    for (int64_t c = 0; c < C; ++c) {
      const double target = (c == labels[n] ? 1 - eps : 0.0) + eps / double(C);
      row[c] = (row[c] - target) / double(N);
    }
  }
  return d;
}

}  // namespace dlperf::ref
