// batchnorm2d kernels (see batchnorm.h). Each pass over the activation runs as a grid of
// (split, channel) blocks walking their share of a channel (bn_split.h); sums over a channel go
// through a workspace of per-block partials that one thread per channel adds in order.
//
// Forward (training): partial sums of x - shift -> mean, variance, coefficients -> y = a x + b.
// Subtracting the channel's first element before squaring keeps the one-pass variance from
// cancelling when the mean is large against the spread.
// Backward: partial sums of g and g * xhat (g = dy masked by the fused relu) -> dgamma, dbeta,
// coefficients -> dx = gamma inv (g - mean(g) - xhat mean(g xhat)).
#include "backend/cuda/batchnorm.h"
#include "backend/cuda/bn_split.h"
#include "backend/cuda/kernel_util.cuh"

namespace dlperf::cuda {

namespace {

// Sums a and b over the block (blockDim.x a multiple of 32); thread 0 holds the result.
__device__ void block_sum2(double& a, double& b) {
  __shared__ double sa[32], sb[32];
  for (int o = 16; o > 0; o /= 2) a += __shfl_down_sync(0xffffffffu, a, o), b += __shfl_down_sync(0xffffffffu, b, o);
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32), warps = int(blockDim.x / 32);
  if (lane == 0) sa[warp] = a, sb[warp] = b;
  __syncthreads();
  if (warp != 0) return;
  a = lane < warps ? sa[lane] : 0.0;
  b = lane < warps ? sb[lane] : 0.0;
  for (int o = 16; o > 0; o /= 2) a += __shfl_down_sync(0xffffffffu, a, o), b += __shfl_down_sync(0xffffffffu, b, o);
}

// The workspace: per-block partial sums, then three coefficients per channel.
struct Workspace {
  double2* part;
  float* coef;
};
Workspace split_workspace(void* w, const BatchnormShape& s) {
  auto* part = static_cast<double2*>(w);
  return {part, reinterpret_cast<float*>(part + s.channels * bn_splits(s.n, s.hw))};
}

template <class T>
__global__ void stats_k(const T* x, BatchnormShape s, int64_t splits, double2* part) {
  const int64_t c = blockIdx.y, split = blockIdx.x;
  const float shift = ld(x, c * s.hw);
  float a = 0.f, b = 0.f;
  for (BnWalk w(bn_rows(s.n, splits, split), s.hw, threadIdx.x, blockDim.x); w.more(); w.next()) {
    const float v = ld(x, w.at(s.channels, c)) - shift;
    a += v;
    b += v * v;
  }
  double da = a, db = b;
  block_sum2(da, db);
  if (threadIdx.x == 0) part[c * splits + split] = make_double2(da, db);
}

// One thread a channel: statistics, running statistics, and y = coef[c] x + coef[C + c].
template <class T>
__global__ void finish_stats_k(const T* x, BatchnormShape s, int64_t splits, const double2* part, BatchnormParams p, float* coef) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= s.channels) return;
  double a = 0, b = 0;
  for (int64_t k = 0; k < splits; ++k) a += part[c * splits + k].x, b += part[c * splits + k].y;
  const double m = double(s.n * s.hw), d = a / m;
  const double mean = double(ld(x, c * s.hw)) + d;
  const double var = fmax(b / m - d * d, 0.0);
  const double inv = 1.0 / sqrt(var + double(p.eps));
  p.batch_mean[c] = float(mean);
  p.batch_inv_std[c] = float(inv);
  const double unbias = m > 1 ? m / (m - 1) : 1.0;
  p.running_mean[c] = (1 - p.momentum) * p.running_mean[c] + p.momentum * float(mean);
  p.running_var[c] = (1 - p.momentum) * p.running_var[c] + p.momentum * float(var * unbias);
  const double scale = double(p.gamma[c]) * inv;
  coef[c] = float(scale);
  coef[s.channels + c] = float(double(p.beta[c]) - mean * scale);
}

__global__ void eval_coef_k(BatchnormShape s, BatchnormParams p, float* coef) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= s.channels) return;
  const float scale = p.gamma[c] / sqrtf(p.running_var[c] + p.eps);
  coef[c] = scale;
  coef[s.channels + c] = p.beta[c] - p.running_mean[c] * scale;
}

template <class T>
__global__ void apply_k(const T* x, T* y, BatchnormShape s, int64_t splits, const float* coef, bool relu) {
  const int64_t c = blockIdx.y;
  const float a = coef[c], b = coef[s.channels + c];
  for (BnWalk w(bn_rows(s.n, splits, blockIdx.x), s.hw, threadIdx.x, blockDim.x); w.more(); w.next()) {
    const int64_t o = w.at(s.channels, c);
    const float v = fmaf(a, ld(x, o), b);
    st(y, o, relu ? fmaxf(v, 0.f) : v);
  }
}

// dy where the fused relu passed its input (y > 0), else 0; dy itself without a relu.
template <class T>
__device__ inline float masked_grad(const T* y, const T* dy, int64_t o, bool relu) {
  return relu && !(ld(y, o) > 0.f) ? 0.f : ld(dy, o);
}

template <class T>
__global__ void grad_stats_k(const T* x, const T* y, const T* dy, BatchnormShape s, int64_t splits, BatchnormParams p, double2* part) {
  const int64_t c = blockIdx.y, split = blockIdx.x;
  const float mean = p.batch_mean[c], inv = p.batch_inv_std[c];
  float a = 0.f, b = 0.f;
  for (BnWalk w(bn_rows(s.n, splits, split), s.hw, threadIdx.x, blockDim.x); w.more(); w.next()) {
    const int64_t o = w.at(s.channels, c);
    const float g = masked_grad(y, dy, o, p.relu);
    a += g;
    b += g * (ld(x, o) - mean) * inv;
  }
  double da = a, db = b;
  block_sum2(da, db);
  if (threadIdx.x == 0) part[c * splits + split] = make_double2(da, db);
}

// One thread a channel: dbeta = sum g, dgamma = sum g xhat, and dx's coefficients.
__global__ void finish_grad_k(BatchnormShape s, int64_t splits, const double2* part, BatchnormParams p, float* dgamma, float* dbeta,
                              float* coef) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= s.channels) return;
  double a = 0, b = 0;
  for (int64_t k = 0; k < splits; ++k) a += part[c * splits + k].x, b += part[c * splits + k].y;
  const double m = double(s.n * s.hw);
  dbeta[c] = float(a);
  dgamma[c] = float(b);
  coef[c] = p.gamma[c] * p.batch_inv_std[c];
  coef[s.channels + c] = float(a / m);
  coef[2 * s.channels + c] = float(b / m);
}

template <class T>
__global__ void grad_input_k(const T* x, const T* y, const T* dy, T* dx, BatchnormShape s, int64_t splits, BatchnormParams p,
                             const float* coef) {
  const int64_t c = blockIdx.y;
  const float mean = p.batch_mean[c], inv = p.batch_inv_std[c];
  const float k = coef[c], mean_g = coef[s.channels + c], mean_gx = coef[2 * s.channels + c];
  for (BnWalk w(bn_rows(s.n, splits, blockIdx.x), s.hw, threadIdx.x, blockDim.x); w.more(); w.next()) {
    const int64_t o = w.at(s.channels, c);
    const float xhat = (ld(x, o) - mean) * inv;
    st(dx, o, k * (masked_grad(y, dy, o, p.relu) - mean_g - xhat * mean_gx));
  }
}

dim3 walk_grid(const BatchnormShape& s) { return dim3(unsigned(bn_splits(s.n, s.hw)), unsigned(s.channels)); }
unsigned channel_blocks(const BatchnormShape& s) { return unsigned((s.channels + 127) / 128); }

}  // namespace

void batchnorm_forward_train(DType t, const BatchnormShape& s, const BatchnormParams& p, const void* x, void* y, void* workspace,
                             cudaStream_t st) {
  if (s.n * s.channels * s.hw == 0) return;
  const Workspace w = split_workspace(workspace, s);
  const int64_t splits = bn_splits(s.n, s.hw);
  DISPATCH(t, {
    const T* xt = static_cast<const T*>(x);
    stats_k<T><<<walk_grid(s), kBnThreads, 0, st>>>(xt, s, splits, w.part);
    finish_stats_k<T><<<channel_blocks(s), 128, 0, st>>>(xt, s, splits, w.part, p, w.coef);
    apply_k<T><<<walk_grid(s), kBnThreads, 0, st>>>(xt, static_cast<T*>(y), s, splits, w.coef, p.relu);
  })
}

void batchnorm_forward_eval(DType t, const BatchnormShape& s, const BatchnormParams& p, const void* x, void* y, void* workspace,
                            cudaStream_t st) {
  if (s.n * s.channels * s.hw == 0) return;
  const Workspace w = split_workspace(workspace, s);
  eval_coef_k<<<channel_blocks(s), 128, 0, st>>>(s, p, w.coef);
  DISPATCH(t, apply_k<T><<<walk_grid(s), kBnThreads, 0, st>>>(static_cast<const T*>(x), static_cast<T*>(y), s, bn_splits(s.n, s.hw),
                                                              w.coef, p.relu))
}

void batchnorm_backward(DType t, const BatchnormShape& s, const BatchnormParams& p, const void* x, const void* y, const void* dy,
                        void* dx, float* dgamma, float* dbeta, void* workspace, cudaStream_t st) {
  if (s.n * s.channels * s.hw == 0) return;
  const Workspace w = split_workspace(workspace, s);
  const int64_t splits = bn_splits(s.n, s.hw);
  DISPATCH(t, {
    const T *xt = static_cast<const T*>(x), *yt = static_cast<const T*>(y), *dyt = static_cast<const T*>(dy);
    grad_stats_k<T><<<walk_grid(s), kBnThreads, 0, st>>>(xt, yt, dyt, s, splits, p, w.part);
    finish_grad_k<<<channel_blocks(s), 128, 0, st>>>(s, splits, w.part, p, dgamma, dbeta, w.coef);
    if (dx) grad_input_k<T><<<walk_grid(s), kBnThreads, 0, st>>>(xt, yt, dyt, static_cast<T*>(dx), s, splits, p, w.coef);
  })
}

}  // namespace dlperf::cuda
