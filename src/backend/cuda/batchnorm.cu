// batchnorm2d kernels (see batchnorm.h). A layer small enough for one block a channel (NCHW) or
// a 32-channel tile (NHWC) runs each pass in one launch. A larger one runs each loop over the
// activation as a grid of (split, channel or tile) blocks walking their share (bn_split.h); sums
// over a channel go through a workspace of per-block partials that one warp per channel adds in
// a fixed order: two launches a pass where every block of the second adds them itself (up to
// kFoldSplits splits), three above that. The per-thread loops and the per-channel arithmetic are shared by both layouts.
//
// Forward (training): partial sums of x - shift -> mean, variance, coefficients -> y = a (x - mean) + beta.
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
  if (warp == 0) {
    a = lane < warps ? sa[lane] : 0.0;
    b = lane < warps ? sb[lane] : 0.0;
    for (int o = 16; o > 0; o /= 2) a += __shfl_down_sync(0xffffffffu, a, o), b += __shfl_down_sync(0xffffffffu, b, o);
  }
}

// The workspace: per-block partial sums, then three coefficients per channel.
struct Workspace {
  double2* part;
  float* coef;
};
Workspace split_workspace(void* w, const BatchnormShape& s) {
  auto* part = static_cast<double2*>(w);
  return {part, reinterpret_cast<float*>(part + s.channels * bn_layer_splits(s.n, s.hw, s.layout == Layout::nhwc))};
}

// Channel c's sums from its blocks' partials, by one warp: lane l adds partials l, l + 32, ... in
// order, then the lanes meet in a fixed shuffle tree, so the result is deterministic. One thread
// a channel would wait out `splits` (up to 1024) dependent loads from L2 in a row: tens of
// microseconds, more than a large layer's own passes. Lane 0 holds the sums.
__device__ inline void add_partials(const double2* part, int64_t c, int64_t splits, double& a, double& b) {
  a = 0, b = 0;
  for (int64_t k = threadIdx.x % 32; k < splits; k += 32) a += part[c * splits + k].x, b += part[c * splits + k].y;
  for (int o = 16; o > 0; o /= 2) a += __shfl_down_sync(0xffffffffu, a, o), b += __shfl_down_sync(0xffffffffu, b, o);
}

// This thread's walk over split `split` of channel c.
__device__ inline BnWalk walk(const BatchnormShape& s, int64_t splits, int64_t split) {
  return BnWalk(bn_rows(s.n, splits, split), s.hw, threadIdx.x, blockDim.x);
}

// The per-thread loops over a channel's share, and the per-channel arithmetic between them.
//
// Each loop takes its walk kInFlight elements at a time and issues all their loads before it
// uses any. One element at a time, a thread waited out the memory's latency (some 0.6-0.8 us)
// per element, with one load in flight: with the GPU full of threads that is about half a
// megabyte of bf16 in flight, about 1 TB/s by Little's law, which is what these passes ran at
// on an H200 (1.0-1.2 TB/s of its 4.8). Each thread still adds its elements in walk order, so
// the sums are the same, bit for bit.
constexpr int kInFlight = 8;

// The next (up to) kInFlight offsets of channel c along the walk; n = 0 when it is done. The
// loop is unrolled so that `at` stays in registers.
struct Offsets {
  int64_t at[kInFlight];
  int n;
};
template <class Walk>
__device__ inline bool next_offsets(Walk& w, const BatchnormShape& s, int64_t c, Offsets& o) {
  if (w.template take<kInFlight>(s.channels, c, o.at)) {  // all but a walk's last few batches
    o.n = kInFlight;
    return true;
  }
  o.n = 0;
  UNROLL
  for (int j = 0; j < kInFlight; ++j) {
    const bool more = w.more();
    o.at[j] = more ? w.at(s.channels, c) : 0;
    if (more) w.next(), o.n = j + 1;
  }
  return o.n > 0;
}

// One batch's elements of x, loaded before any is used.
template <class T>
struct Loads {
  float x[kInFlight];
  __device__ Loads(const T* xp, const Offsets& o) {
    UNROLL
    for (int j = 0; j < kInFlight; ++j) x[j] = j < o.n ? ld(xp, o.at[j]) : 0.f;
  }
};

// Sums of x - shift and its square.
template <class T, class Walk>
__device__ void sum_centered(const T* x, const BatchnormShape& s, int64_t c, Walk w, float shift, double& sa, double& sb) {
  float a = 0.f, b = 0.f;
  for (Offsets o; next_offsets(w, s, c, o);) {
    const Loads<T> v(x, o);
    UNROLL
    for (int j = 0; j < kInFlight; ++j)
      if (j < o.n) {
        const float d = v.x[j] - shift;
        a += d;
        b += d * d;
      }
  }
  sa = a, sb = b;
}

// A channel's y = scale (x - mean) + beta. Not y = scale x + (beta - scale mean), one
// operation fewer: that maps x = mean to beta plus the rounding of scale mean, so a channel a
// dead relu left constant came out 1e-6 or so either side of beta instead of beta, where the CPU
// engine and PyTorch give beta exactly, and with beta 0 a fused relu's mask passed gradients
// into the dead channel.
struct BnCoef {
  float scale, mean, beta;
  __device__ float y(float x) const { return fmaf(scale, x - mean, beta); }
};

template <class T, class Walk>
__device__ void apply(const T* x, T* y, const BatchnormShape& s, int64_t c, Walk w, BnCoef k, bool relu) {
  for (Offsets o; next_offsets(w, s, c, o);) {
    const Loads<T> v(x, o);
    UNROLL
    for (int j = 0; j < kInFlight; ++j)
      if (j < o.n) {
        const float r = k.y(v.x[j]);
        st(y, o.at[j], relu ? fmaxf(r, 0.f) : r);
      }
  }
}

// From a channel's sums of x - first and its square: y's coefficients, and, when `record` (once
// a channel), the batch statistics (saved) and the running statistics.
__device__ BnCoef finish_stats(int64_t c, double a, double b, float first, const BatchnormShape& s, const BatchnormParams& p,
                               bool record = true) {
  const double m = double(s.n * s.hw), d = a / m;
  const double mean = double(first) + d;
  const double var = fmax(b / m - d * d, 0.0);
  const double inv = 1.0 / sqrt(var + double(p.eps));
  if (record) {
    p.batch_mean[c] = float(mean);
    p.batch_inv_std[c] = float(inv);
    const double unbias = m > 1 ? m / (m - 1) : 1.0;
    p.running_mean[c] = (1 - p.momentum) * p.running_mean[c] + p.momentum * float(mean);
    p.running_var[c] = (1 - p.momentum) * p.running_var[c] + p.momentum * float(var * unbias);
  }
  const BnCoef k{float(double(p.gamma[c]) * inv), float(mean), p.beta[c]};
  if (record && p.fwd_scale) p.fwd_scale[c] = k.scale;  // backward's relu mask, with batch_mean and beta
  return k;
}

// dy where the fused relu passed its input (y > 0), else 0; dy itself without a relu.
__device__ inline float masked_grad(float y, float dy, bool relu) { return relu && !(y > 0.f) ? 0.f : dy; }

// v rounded to T and back, as storing it in a T tensor and loading it again gives it.
template <class T>
__device__ inline float as_stored(float v) {
  T t;
  st(&t, 0, v);
  return ld(&t, 0);
}

// The fused relu's forward output for one channel, from its coefficients (BatchnormParams'
// fwd_scale, the saved mean and beta): what `apply` stored, recomputed from x in the same arithmetic.
struct Refold {
  bool on = false;
  BnCoef k{0, 0, 0};
  __device__ Refold(const BatchnormParams& p, int64_t c) {
    if (p.relu && p.fwd_scale) on = true, k = {p.fwd_scale[c], p.batch_mean[c], p.beta[c]};
  }
};

// The loads of one batch of a backward loop: x, dy and (with a fused relu) y, read, or
// recomputed from x where `refold` is on. dy is loaded whether or not the relu passed it, so its
// load need not wait for y's.
template <class T>
struct GradLoads {
  float x[kInFlight], y[kInFlight], dy[kInFlight];
  __device__ GradLoads(const T* xp, const T* yp, const T* dyp, const Offsets& o, bool relu, const Refold& refold) {
    UNROLL
    for (int j = 0; j < kInFlight; ++j) {
      const bool in = j < o.n;
      x[j] = in ? ld(xp, o.at[j]) : 0.f;
      dy[j] = in ? ld(dyp, o.at[j]) : 0.f;
      y[j] = in && relu && !refold.on ? ld(yp, o.at[j]) : 0.f;
    }
    if (refold.on) {
      UNROLL
      for (int j = 0; j < kInFlight; ++j) y[j] = as_stored<T>(fmaxf(refold.k.y(x[j]), 0.f));
    }
  }
};

// Sums of g and g * xhat.
template <class T, class Walk>
__device__ void sum_grads(const T* x, const T* y, const T* dy, const BatchnormShape& s, const BatchnormParams& p, int64_t c, Walk w,
                          double& sa, double& sb) {
  const float mean = p.batch_mean[c], inv = p.batch_inv_std[c];
  const Refold refold(p, c);
  float a = 0.f, b = 0.f;
  for (Offsets o; next_offsets(w, s, c, o);) {
    const GradLoads<T> v(x, y, dy, o, p.relu, refold);
    UNROLL
    for (int j = 0; j < kInFlight; ++j)
      if (j < o.n) {
        const float g = masked_grad(v.y[j], v.dy[j], p.relu);
        a += g;
        b += g * (v.x[j] - mean) * inv;
      }
  }
  sa = a, sb = b;
}

// dbeta = sum g, dgamma = sum g xhat (written when `record`, once a channel); returns dx's
// coefficients (gamma inv, mean g, mean g xhat).
__device__ float3 finish_grads(int64_t c, double a, double b, const BatchnormShape& s, const BatchnormParams& p, float* dgamma,
                               float* dbeta, bool record = true) {
  const double m = double(s.n * s.hw);
  if (record) {
    dbeta[c] = float(a);
    dgamma[c] = float(b);
  }
  return make_float3(p.gamma[c] * p.batch_inv_std[c], float(a / m), float(b / m));
}

template <class T, class Walk>
__device__ void grad_input(const T* x, const T* y, const T* dy, T* dx, const BatchnormShape& s, const BatchnormParams& p, int64_t c,
                           Walk w, float3 k) {
  const float mean = p.batch_mean[c], inv = p.batch_inv_std[c];
  const Refold refold(p, c);
  for (Offsets o; next_offsets(w, s, c, o);) {
    const GradLoads<T> v(x, y, dy, o, p.relu, refold);
    UNROLL
    for (int j = 0; j < kInFlight; ++j)
      if (j < o.n) {
        const float xhat = (v.x[j] - mean) * inv;
        st(dx, o.at[j], k.x * (masked_grad(v.y[j], v.dy[j], p.relu) - k.y - xhat * k.z));
      }
  }
}

// Layers of one block a channel (splits == 1), where launches rather than bytes are the cost:
// each pass in one launch, the block's thread 0 doing the per-channel arithmetic in between.

template <class T>
__global__ void train_one_block_k(const T* x, T* y, BatchnormShape s, BatchnormParams p) {
  const int64_t c = blockIdx.y;  // the grid is (1 split, channels)
  const float first = ld(x, s.first(c));
  double a, b;
  sum_centered(x, s, c, walk(s, 1, 0), first, a, b);
  block_sum2(a, b);
  __shared__ BnCoef coef;
  if (threadIdx.x == 0) coef = finish_stats(c, a, b, first, s, p);
  __syncthreads();
  apply(x, y, s, c, walk(s, 1, 0), coef, p.relu);
}

template <class T>
__global__ void backward_one_block_k(const T* x, const T* y, const T* dy, T* dx, BatchnormShape s, BatchnormParams p, float* dgamma,
                                     float* dbeta) {
  const int64_t c = blockIdx.y;  // the grid is (1 split, channels)
  double a, b;
  sum_grads(x, y, dy, s, p, c, walk(s, 1, 0), a, b);
  block_sum2(a, b);
  __shared__ float3 k;
  if (threadIdx.x == 0) k = finish_grads(c, a, b, s, p, dgamma, dbeta);
  __syncthreads();
  if (dx) grad_input(x, y, dy, dx, s, p, c, walk(s, 1, 0), k);
}

// Larger layers: a grid of (split, channel) blocks for each loop, partial sums through the
// workspace, and one thread a channel to add them (in order) between.

template <class T>
__global__ void stats_k(const T* x, BatchnormShape s, int64_t splits, double2* part) {
  const int64_t c = blockIdx.y;
  double a, b;
  sum_centered(x, s, c, walk(s, splits, blockIdx.x), ld(x, s.first(c)), a, b);
  block_sum2(a, b);
  if (threadIdx.x == 0) part[c * splits + blockIdx.x] = make_double2(a, b);
}

// A warp a channel (warp_blocks), which adds the channel's partials and finishes it.
__device__ inline int64_t warp_channel() { return (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; }

template <class T>
__global__ void finish_stats_k(const T* x, BatchnormShape s, int64_t splits, const double2* part, BatchnormParams p, float* coef) {
  const int64_t c = warp_channel();
  if (c >= s.channels) return;  // the whole warp: c is the warp's
  double a, b;
  add_partials(part, c, splits, a, b);
  if (threadIdx.x % 32 != 0) return;
  const BnCoef k = finish_stats(c, a, b, ld(x, s.first(c)), s, p);
  coef[c] = k.scale, coef[s.channels + c] = k.mean, coef[2 * s.channels + c] = k.beta;
}

__global__ void eval_coef_k(BatchnormShape s, BatchnormParams p, float* coef) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= s.channels) return;
  coef[c] = p.gamma[c] / sqrtf(p.running_var[c] + p.eps);
  coef[s.channels + c] = p.running_mean[c];
  coef[2 * s.channels + c] = p.beta[c];
}

// Channel c's coefficients as finish_stats_k and eval_coef_k leave them in `coef`.
__device__ inline BnCoef coef_of(const float* coef, const BatchnormShape& s, int64_t c) {
  return {coef[c], coef[s.channels + c], coef[2 * s.channels + c]};
}

template <class T>
__global__ void apply_k(const T* x, T* y, BatchnormShape s, int64_t splits, const float* coef, bool relu) {
  const int64_t c = blockIdx.y;
  apply(x, y, s, c, walk(s, splits, blockIdx.x), coef_of(coef, s, c), relu);
}

template <class T>
__global__ void grad_stats_k(const T* x, const T* y, const T* dy, BatchnormShape s, int64_t splits, BatchnormParams p, double2* part) {
  const int64_t c = blockIdx.y;
  double a, b;
  sum_grads(x, y, dy, s, p, c, walk(s, splits, blockIdx.x), a, b);
  block_sum2(a, b);
  if (threadIdx.x == 0) part[c * splits + blockIdx.x] = make_double2(a, b);
}

__global__ void finish_grad_k(BatchnormShape s, int64_t splits, const double2* part, BatchnormParams p, float* dgamma, float* dbeta,
                              float* coef) {
  const int64_t c = warp_channel();
  if (c >= s.channels) return;  // the whole warp
  double a, b;
  add_partials(part, c, splits, a, b);
  if (threadIdx.x % 32 != 0) return;
  const float3 g = finish_grads(c, a, b, s, p, dgamma, dbeta);
  coef[c] = g.x, coef[s.channels + c] = g.y, coef[2 * s.channels + c] = g.z;
}

template <class T>
__global__ void grad_input_k(const T* x, const T* y, const T* dy, T* dx, BatchnormShape s, int64_t splits, BatchnormParams p,
                             const float* coef) {
  const int64_t c = blockIdx.y;
  const float3 k = make_float3(coef[c], coef[s.channels + c], coef[2 * s.channels + c]);
  grad_input(x, y, dy, dx, s, p, c, walk(s, splits, blockIdx.x), k);
}

// Layers of at most kFoldSplits splits skip the finishing launch: each block of the pass after
// the partial sums adds its channel's partials itself (warp 0, in add_partials' fixed order, so
// every block gets the same coefficients) and block 0 records what the finishing kernel would.
constexpr int64_t kFoldSplits = 64;

template <class T>
__global__ void apply_fold_k(const T* x, T* y, BatchnormShape s, int64_t splits, const double2* part, BatchnormParams p) {
  const int64_t c = blockIdx.y;
  __shared__ BnCoef coef;
  if (threadIdx.x < 32) {
    double a, b;
    add_partials(part, c, splits, a, b);
    if (threadIdx.x == 0) coef = finish_stats(c, a, b, ld(x, s.first(c)), s, p, blockIdx.x == 0);
  }
  __syncthreads();
  apply(x, y, s, c, walk(s, splits, blockIdx.x), coef, p.relu);
}

template <class T>
__global__ void grad_input_fold_k(const T* x, const T* y, const T* dy, T* dx, BatchnormShape s, int64_t splits, BatchnormParams p,
                                  const double2* part, float* dgamma, float* dbeta) {
  const int64_t c = blockIdx.y;
  __shared__ float3 k;
  if (threadIdx.x < 32) {
    double a, b;
    add_partials(part, c, splits, a, b);
    if (threadIdx.x == 0) k = finish_grads(c, a, b, s, p, dgamma, dbeta, blockIdx.x == 0);
  }
  __syncthreads();
  grad_input(x, y, dy, dx, s, p, c, walk(s, splits, blockIdx.x), k);
}

// NHWC layers (bn_split.h): blocks of kBnTileC x kBnTileRows threads over (row split, channel
// tile); threadIdx.x picks the channel, threadIdx.y the rows. Threads past the last channel
// take part in the block's reductions with zeros.

__device__ inline int64_t tile_channel() { return int64_t(blockIdx.y) * kBnTileC + threadIdx.x; }

__device__ inline BnRowWalk row_walk(const BatchnormShape& s, int64_t splits, int64_t split) {
  return BnRowWalk(bn_rows(s.n * s.hw, splits, split), threadIdx.y, blockDim.y);
}

// Sums a and b over the block's rows of threads, in order; row 0 holds its channel's result.
__device__ void column_sum2(double& a, double& b) {
  __shared__ double sa[kBnTileRows][kBnTileC], sb[kBnTileRows][kBnTileC];
  sa[threadIdx.y][threadIdx.x] = a, sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0)
    for (unsigned k = 1; k < blockDim.y; ++k) a += sa[k][threadIdx.x], b += sb[k][threadIdx.x];
}

template <class T>
__global__ void train_one_tile_k(const T* x, T* y, BatchnormShape s, BatchnormParams p) {
  const int64_t c = tile_channel();
  const bool mine = c < s.channels;
  const float first = mine ? ld(x, s.first(c)) : 0.f;
  double a = 0, b = 0;
  if (mine) sum_centered(x, s, c, row_walk(s, 1, 0), first, a, b);
  column_sum2(a, b);
  __shared__ BnCoef coef[kBnTileC];
  if (threadIdx.y == 0 && mine) coef[threadIdx.x] = finish_stats(c, a, b, first, s, p);
  __syncthreads();
  if (mine) apply(x, y, s, c, row_walk(s, 1, 0), coef[threadIdx.x], p.relu);
}

template <class T>
__global__ void backward_one_tile_k(const T* x, const T* y, const T* dy, T* dx, BatchnormShape s, BatchnormParams p, float* dgamma,
                                    float* dbeta) {
  const int64_t c = tile_channel();
  const bool mine = c < s.channels;
  double a = 0, b = 0;
  if (mine) sum_grads(x, y, dy, s, p, c, row_walk(s, 1, 0), a, b);
  column_sum2(a, b);
  __shared__ float3 k[kBnTileC];
  if (threadIdx.y == 0 && mine) k[threadIdx.x] = finish_grads(c, a, b, s, p, dgamma, dbeta);
  __syncthreads();
  if (dx && mine) grad_input(x, y, dy, dx, s, p, c, row_walk(s, 1, 0), k[threadIdx.x]);
}

template <class T>
__global__ void stats_tile_k(const T* x, BatchnormShape s, int64_t splits, double2* part) {
  const int64_t c = tile_channel();
  double a = 0, b = 0;
  if (c < s.channels) sum_centered(x, s, c, row_walk(s, splits, blockIdx.x), ld(x, s.first(c)), a, b);
  column_sum2(a, b);
  if (threadIdx.y == 0 && c < s.channels) part[c * splits + blockIdx.x] = make_double2(a, b);
}

template <class T>
__global__ void apply_tile_k(const T* x, T* y, BatchnormShape s, int64_t splits, const float* coef, bool relu) {
  const int64_t c = tile_channel();
  if (c < s.channels) apply(x, y, s, c, row_walk(s, splits, blockIdx.x), coef_of(coef, s, c), relu);
}

template <class T>
__global__ void grad_stats_tile_k(const T* x, const T* y, const T* dy, BatchnormShape s, int64_t splits, BatchnormParams p, double2* part) {
  const int64_t c = tile_channel();
  double a = 0, b = 0;
  if (c < s.channels) sum_grads(x, y, dy, s, p, c, row_walk(s, splits, blockIdx.x), a, b);
  column_sum2(a, b);
  if (threadIdx.y == 0 && c < s.channels) part[c * splits + blockIdx.x] = make_double2(a, b);
}

template <class T>
__global__ void grad_input_tile_k(const T* x, const T* y, const T* dy, T* dx, BatchnormShape s, int64_t splits, BatchnormParams p,
                                  const float* coef) {
  const int64_t c = tile_channel();
  if (c >= s.channels) return;
  const float3 k = make_float3(coef[c], coef[s.channels + c], coef[2 * s.channels + c]);
  grad_input(x, y, dy, dx, s, p, c, row_walk(s, splits, blockIdx.x), k);
}

// The folded passes for NHWC (kFoldSplits): thread (x, y) adds partials y, y + 8, ... of channel x,
// and the block's rows meet in column_sum2's fixed order; row 0 finishes its channel.
__device__ void add_tile_partials(const double2* part, int64_t c, bool mine, int64_t splits, double& a, double& b) {
  a = 0, b = 0;
  if (mine)
    for (int64_t k = threadIdx.y; k < splits; k += blockDim.y) a += part[c * splits + k].x, b += part[c * splits + k].y;
  column_sum2(a, b);
}

template <class T>
__global__ void apply_tile_fold_k(const T* x, T* y, BatchnormShape s, int64_t splits, const double2* part, BatchnormParams p) {
  const int64_t c = tile_channel();
  const bool mine = c < s.channels;
  double a, b;
  add_tile_partials(part, c, mine, splits, a, b);
  __shared__ BnCoef coef[kBnTileC];
  if (threadIdx.y == 0 && mine) coef[threadIdx.x] = finish_stats(c, a, b, ld(x, s.first(c)), s, p, blockIdx.x == 0);
  __syncthreads();
  if (mine) apply(x, y, s, c, row_walk(s, splits, blockIdx.x), coef[threadIdx.x], p.relu);
}

template <class T>
__global__ void grad_input_tile_fold_k(const T* x, const T* y, const T* dy, T* dx, BatchnormShape s, int64_t splits, BatchnormParams p,
                                       const double2* part, float* dgamma, float* dbeta) {
  const int64_t c = tile_channel();
  const bool mine = c < s.channels;
  double a, b;
  add_tile_partials(part, c, mine, splits, a, b);
  __shared__ float3 k[kBnTileC];
  if (threadIdx.y == 0 && mine) k[threadIdx.x] = finish_grads(c, a, b, s, p, dgamma, dbeta, blockIdx.x == 0);
  __syncthreads();
  if (mine) grad_input(x, y, dy, dx, s, p, c, row_walk(s, splits, blockIdx.x), k[threadIdx.x]);
}

bool nhwc(const BatchnormShape& s) { return s.layout == Layout::nhwc; }
int64_t splits_of(const BatchnormShape& s) { return bn_layer_splits(s.n, s.hw, nhwc(s)); }
// The grid over a layer's (split, channel) blocks in its layout, and its blocks' shape.
dim3 walk_grid(const BatchnormShape& s) {
  return dim3(unsigned(splits_of(s)), unsigned(nhwc(s) ? bn_tiles(s.channels) : s.channels));
}
dim3 walk_block(const BatchnormShape& s) { return nhwc(s) ? dim3(kBnTileC, kBnTileRows) : dim3(kBnThreads); }
// Blocks of 128 threads: one thread a channel, or one warp a channel.
unsigned channel_blocks(const BatchnormShape& s) { return unsigned((s.channels + 127) / 128); }
unsigned warp_blocks(const BatchnormShape& s) { return unsigned((s.channels * 32 + 127) / 128); }

// y = scale (x - mean) + beta with each channel's coefficients from `coef` (relu'd when fused), over the
// layer's grid in its layout: the last pass of the training forward and the whole inference one.
template <class T>
void apply_coefficients(const T* x, T* y, const BatchnormShape& s, const float* coef, bool relu, cudaStream_t st) {
  if (nhwc(s)) LAUNCH(walk_grid(s), walk_block(s), 0, st, apply_tile_k<T>)(x, y, s, splits_of(s), coef, relu);
  else LAUNCH(walk_grid(s), walk_block(s), 0, st, apply_k<T>)(x, y, s, splits_of(s), coef, relu);
}

}  // namespace

void batchnorm_forward_train(DType t, const BatchnormShape& s, const BatchnormParams& p, const void* x, void* y, void* workspace,
                             cudaStream_t st) {
  if (s.n * s.channels * s.hw == 0) return;
  const Workspace w = split_workspace(workspace, s);
  const int64_t splits = splits_of(s);
  const dim3 grid = walk_grid(s), block = walk_block(s);
  DISPATCH(t, {
    const T* xt = static_cast<const T*>(x);
    T* yt = static_cast<T*>(y);
    if (splits == 1) {
      if (nhwc(s)) LAUNCH(grid, block, 0, st, train_one_tile_k<T>)(xt, yt, s, p);
      else LAUNCH(grid, block, 0, st, train_one_block_k<T>)(xt, yt, s, p);
      return;
    }
    if (nhwc(s)) LAUNCH(grid, block, 0, st, stats_tile_k<T>)(xt, s, splits, w.part);
    else LAUNCH(grid, block, 0, st, stats_k<T>)(xt, s, splits, w.part);
    if (splits <= kFoldSplits) {
      if (nhwc(s)) LAUNCH(grid, block, 0, st, apply_tile_fold_k<T>)(xt, yt, s, splits, w.part, p);
      else LAUNCH(grid, block, 0, st, apply_fold_k<T>)(xt, yt, s, splits, w.part, p);
      return;
    }
    LAUNCH(warp_blocks(s), 128, 0, st, finish_stats_k<T>)(xt, s, splits, w.part, p, w.coef);
    apply_coefficients(xt, yt, s, w.coef, p.relu, st);
  })
}

void batchnorm_forward_eval(DType t, const BatchnormShape& s, const BatchnormParams& p, const void* x, void* y, void* workspace,
                            cudaStream_t st) {
  if (s.n * s.channels * s.hw == 0) return;
  const Workspace w = split_workspace(workspace, s);
  LAUNCH(channel_blocks(s), 128, 0, st, eval_coef_k)(s, p, w.coef);
  DISPATCH(t, apply_coefficients(static_cast<const T*>(x), static_cast<T*>(y), s, w.coef, p.relu, st))
}

void batchnorm_backward(DType t, const BatchnormShape& s, const BatchnormParams& p, const void* x, const void* y, const void* dy,
                        void* dx, float* dgamma, float* dbeta, void* workspace, cudaStream_t st) {
  if (s.n * s.channels * s.hw == 0) return;
  const Workspace w = split_workspace(workspace, s);
  const int64_t splits = splits_of(s);
  const dim3 grid = walk_grid(s), block = walk_block(s);
  DISPATCH(t, {
    const T *xt = static_cast<const T*>(x), *yt = static_cast<const T*>(y), *dyt = static_cast<const T*>(dy);
    T* dxt = static_cast<T*>(dx);
    if (splits == 1) {
      if (nhwc(s)) LAUNCH(grid, block, 0, st, backward_one_tile_k<T>)(xt, yt, dyt, dxt, s, p, dgamma, dbeta);
      else LAUNCH(grid, block, 0, st, backward_one_block_k<T>)(xt, yt, dyt, dxt, s, p, dgamma, dbeta);
      return;
    }
    if (nhwc(s)) LAUNCH(grid, block, 0, st, grad_stats_tile_k<T>)(xt, yt, dyt, s, splits, p, w.part);
    else LAUNCH(grid, block, 0, st, grad_stats_k<T>)(xt, yt, dyt, s, splits, p, w.part);
    if (dx && splits <= kFoldSplits) {
      if (nhwc(s)) LAUNCH(grid, block, 0, st, grad_input_tile_fold_k<T>)(xt, yt, dyt, dxt, s, splits, p, w.part, dgamma, dbeta);
      else LAUNCH(grid, block, 0, st, grad_input_fold_k<T>)(xt, yt, dyt, dxt, s, splits, p, w.part, dgamma, dbeta);
      return;
    }
    LAUNCH(warp_blocks(s), 128, 0, st, finish_grad_k)(s, splits, w.part, p, dgamma, dbeta, w.coef);
    if (!dx) return;
    if (nhwc(s)) LAUNCH(grid, block, 0, st, grad_input_tile_k<T>)(xt, yt, dyt, dxt, s, splits, p, w.coef);
    else LAUNCH(grid, block, 0, st, grad_input_k<T>)(xt, yt, dyt, dxt, s, splits, p, w.coef);
  })
}

}  // namespace dlperf::cuda
