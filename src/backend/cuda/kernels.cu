// dlperf's own CUDA kernels (see kernels.h). Element-wise kernels use grid-stride loops with a
// grid sized to the SM count's order of magnitude, so one launch covers any n.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>

#include "backend/cuda/kernels.h"
#include "core/rng.h"

namespace dlperf::cuda {

namespace {

constexpr int kThreads = 256;

// Enough blocks to fill a large GPU several times over, capped so tiny tensors launch few.
unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return unsigned(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

#define GRID_STRIDE(i, n) for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

__global__ void relu_forward_k(const float* x, float* y, int64_t n) {
  GRID_STRIDE(i, n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

__global__ void relu_backward_k(const float* y, const float* dy, float* dx, int64_t n) {
  GRID_STRIDE(i, n) dx[i] = y[i] > 0.f ? dy[i] : 0.f;
}

__global__ void add_k(const float* a, const float* b, float* y, int64_t n) {
  GRID_STRIDE(i, n) y[i] = a[i] + b[i];
}

__global__ void dropout_forward_k(const float* x, float* y, uint8_t* mask, int64_t n, float p, float scale, uint64_t seed,
                                  const StepArgs* args) {
  const uint64_t step_seed = args ? hash_coords(seed, args->dropout_step) : seed;
  GRID_STRIDE(i, n) {
    const bool keep = uniform01(mix64(step_seed ^ uint64_t(i))) >= p;
    mask[i] = keep;
    y[i] = keep ? x[i] * scale : 0.f;
  }
}

__global__ void dropout_backward_k(const float* dy, const uint8_t* mask, float* dx, int64_t n, float scale) {
  GRID_STRIDE(i, n) dx[i] = mask[i] ? dy[i] * scale : 0.f;
}

// One block a row: max, sum of exponentials, loss and gradient in double like the CPU's.
__global__ void softmax_ce_k(const float* logits, const int32_t* labels, int64_t classes, int64_t valid, float eps,
                             double* loss_sum, int32_t* correct, float* dlogits) {
  const int64_t row = blockIdx.x;
  const float* z = logits + row * classes;
  if (row >= valid) {
    if (dlogits)
      for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) dlogits[row * classes + c] = 0.f;
    return;
  }
  __shared__ double s_max, s_sum;
  if (threadIdx.x == 0) {  // classes are few (10-1000): one thread per row is simple and exact
    int64_t arg = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (z[c] > z[arg]) arg = c;
    const double mx = z[arg];
    double sum = 0, mean = 0;
    for (int64_t c = 0; c < classes; ++c) sum += exp(double(z[c]) - mx);
    const double log_sum = log(sum);
    for (int64_t c = 0; c < classes; ++c) mean += (log_sum - (double(z[c]) - mx)) / double(classes);
    const double nll = log_sum - (double(z[labels[row]]) - mx);
    atomicAdd(loss_sum, (1 - double(eps)) * nll + double(eps) * mean);
    if (arg == labels[row]) atomicAdd(correct, 1);
    s_max = mx;
    s_sum = sum;
  }
  __syncthreads();
  if (!dlogits) return;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    const double target = (c == labels[row] ? 1 - double(eps) : 0.0) + double(eps) / double(classes);
    dlogits[row * classes + c] = float((exp(double(z[c]) - s_max) / s_sum - target) / double(valid));
  }
}

__global__ void sgd_k(float* w, const float* g, float* buf, int64_t n, float lr, float mu, float wd, bool nesterov,
                      const StepArgs* args, const int32_t* skip) {
  if (skip && *skip) return;
  if (args) lr = args->lr;
  GRID_STRIDE(i, n) {
    float d = g[i] + wd * w[i];
    if (buf) {
      buf[i] = mu * buf[i] + d;
      d = nesterov ? d + mu * buf[i] : buf[i];
    }
    w[i] -= lr * d;
  }
}

__global__ void adamw_k(float* w, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2, float eps,
                        float wd, float c1, float c2, const StepArgs* args, const int32_t* skip) {
  if (skip && *skip) return;
  if (args) lr = args->lr, c1 = args->adam_c1, c2 = args->adam_c2;
  GRID_STRIDE(i, n) {
    w[i] *= 1.0f - lr * wd;
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    w[i] -= lr * (m[i] * c1) / (sqrtf(v[i] * c2) + eps);
  }
}

__global__ void f32_to_bf16_k(const float* x, uint16_t* y, int64_t n) {
  GRID_STRIDE(i, n) y[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}
__global__ void bf16_to_f32_k(const uint16_t* x, float* y, int64_t n) {
  GRID_STRIDE(i, n) y[i] = __bfloat162float(__ushort_as_bfloat16(x[i]));
}
__global__ void f32_to_f16_k(const float* x, uint16_t* y, int64_t n) {
  GRID_STRIDE(i, n) y[i] = __half_as_ushort(__float2half_rn(x[i]));
}
__global__ void f16_to_f32_k(const uint16_t* x, float* y, int64_t n) {
  GRID_STRIDE(i, n) y[i] = __half2float(__ushort_as_half(x[i]));
}

__global__ void unscale_k(float* g, int64_t n, float inv_scale, int32_t* found_inf) {
  GRID_STRIDE(i, n) {
    const float v = g[i] * inv_scale;
    if (!isfinite(v)) *found_inf = 1;
    g[i] = v;
  }
}

__global__ void normalize_k(const uint8_t* x, float* y, int64_t total, int64_t channels, int64_t hw, const float* scale,
                            const float* shift) {
  GRID_STRIDE(i, total) {
    const int64_t c = (i / hw) % channels;
    y[i] = float(x[i]) * scale[c] + shift[c];
  }
}

// One thread an output element; the hash and crop arithmetic are the host loader's (loader.cpp).
__global__ void gather_k(DeviceImages d, const int32_t* order, int64_t first, int64_t epoch, const StepArgs* args,
                         int64_t batch, bool augment, int64_t pad, bool flip_ok, uint64_t seed, const float* scale,
                         const float* shift, float* out, int32_t* labels) {
  const int64_t C = d.channels, H = d.height, W = d.width, HW = H * W, total = batch * C * HW;
  if (args) first = args->batch * batch, epoch = args->epoch;
  GRID_STRIDE(e, total) {
    const int64_t row = e / (C * HW), c = (e / HW) % C, y = (e / W) % H, x = e % W;
    if (first + row >= d.count) {
      out[e] = 0.f;
      if (c == 0 && y == 0 && x == 0) labels[row] = 0;
      continue;
    }
    const int64_t sample = order[first + row];
    if (c == 0 && y == 0 && x == 0) labels[row] = d.labels[sample];
    int64_t dy = 0, dx = 0;
    bool flip = false;
    if (augment) {
      const uint64_t h = hash_coords(seed, 0xA06, uint64_t(epoch), uint64_t(sample));
      const int64_t span = 2 * pad + 1;
      dy = int64_t(h % uint64_t(span)) - pad;
      dx = int64_t((h >> 16) % uint64_t(span)) - pad;
      flip = flip_ok && ((h >> 40) & 1);
    }
    const int64_t sy = y + dy, sx = (flip ? W - 1 - x : x) + dx;
    const float v = (sy >= 0 && sy < H && sx >= 0 && sx < W) ? float(d.images[(sample * C + c) * HW + sy * W + sx]) : 0.f;
    out[e] = v * scale[c] + shift[c];
  }
}

__global__ void add_bias_k(float* y, const float* bias, int64_t total, int64_t channels, int64_t inner) {
  GRID_STRIDE(i, total) y[i] += bias[(i / inner) % channels];
}

// One block a channel: a tree reduction over its outer x inner elements, in double.
__global__ void bias_grad_k(const float* dy, float* db, int64_t outer, int64_t channels, int64_t inner) {
  __shared__ double part[kThreads];
  const int64_t c = blockIdx.x;
  double sum = 0;
  for (int64_t j = threadIdx.x; j < outer * inner; j += blockDim.x) {
    const int64_t o = j / inner, i = j % inner;
    sum += dy[(o * channels + c) * inner + i];
  }
  part[threadIdx.x] = sum;
  __syncthreads();
  for (int step = kThreads / 2; step > 0; step /= 2) {
    if (int(threadIdx.x) < step) part[threadIdx.x] += part[threadIdx.x + step];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[c] = float(part[0]);
}

__global__ void empty_k() {}

__global__ void copy_k(const float* a, float* b, int64_t n) {
  GRID_STRIDE(i, n) b[i] = a[i];
}

__global__ void triad_k(float* a, const float* b, const float* c, float s, int64_t n) {
  GRID_STRIDE(i, n) a[i] = b[i] + s * c[i];
}

__global__ void read_k(const float* x, int64_t n, double* out) {
  __shared__ double part[kThreads];
  double sum = 0;
  GRID_STRIDE(i, n) sum += x[i];
  part[threadIdx.x] = sum;
  __syncthreads();
  for (int step = kThreads / 2; step > 0; step /= 2) {
    if (int(threadIdx.x) < step) part[threadIdx.x] += part[threadIdx.x + step];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, part[0]);
}

__global__ void fill_k(float* x, int64_t n, float value) {
  GRID_STRIDE(i, n) x[i] = value;
}

}  // namespace

void relu_forward(const float* x, float* y, int64_t n, cudaStream_t s) { relu_forward_k<<<blocks_for(n), kThreads, 0, s>>>(x, y, n); }
void relu_backward(const float* y, const float* dy, float* dx, int64_t n, cudaStream_t s) {
  relu_backward_k<<<blocks_for(n), kThreads, 0, s>>>(y, dy, dx, n);
}
void add(const float* a, const float* b, float* y, int64_t n, cudaStream_t s) { add_k<<<blocks_for(n), kThreads, 0, s>>>(a, b, y, n); }
void dropout_forward(const float* x, float* y, uint8_t* mask, int64_t n, float p, uint64_t seed, const StepArgs* args,
                     cudaStream_t s) {
  dropout_forward_k<<<blocks_for(n), kThreads, 0, s>>>(x, y, mask, n, p, 1.0f / (1.0f - p), seed, args);
}
void dropout_backward(const float* dy, const uint8_t* mask, float* dx, int64_t n, float p, cudaStream_t s) {
  dropout_backward_k<<<blocks_for(n), kThreads, 0, s>>>(dy, mask, dx, n, 1.0f / (1.0f - p));
}
void softmax_cross_entropy(const float* logits, const int32_t* labels, int64_t rows, int64_t classes, int64_t valid,
                           float eps, double* loss_sum, int32_t* correct, float* dlogits, cudaStream_t s) {
  if (rows > 0) softmax_ce_k<<<unsigned(rows), 64, 0, s>>>(logits, labels, classes, valid, eps, loss_sum, correct, dlogits);
}
void sgd_update(float* w, const float* g, float* momentum, int64_t n, float lr, float mu, float weight_decay, bool nesterov,
                const StepArgs* args, const int32_t* skip, cudaStream_t s) {
  sgd_k<<<blocks_for(n), kThreads, 0, s>>>(w, g, momentum, n, lr, mu, weight_decay, nesterov, args, skip);
}
void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int64_t step, const StepArgs* args, const int32_t* skip, cudaStream_t s) {
  const float c1 = 1.0f / (1.0f - powf(beta1, float(step))), c2 = 1.0f / (1.0f - powf(beta2, float(step)));
  adamw_k<<<blocks_for(n), kThreads, 0, s>>>(w, g, m, v, n, lr, beta1, beta2, eps, weight_decay, c1, c2, args, skip);
}
void gather_batch(const DeviceImages& d, const int32_t* order, int64_t first, int64_t epoch, const StepArgs* args,
                  int64_t batch, bool augment, int64_t pad_crop, bool flip_ok, uint64_t seed, const float* scale,
                  const float* shift, float* out, int32_t* labels, cudaStream_t s) {
  const int64_t total = batch * d.channels * d.height * d.width;
  gather_k<<<blocks_for(total), kThreads, 0, s>>>(d, order, first, epoch, args, batch, augment, pad_crop, flip_ok, seed, scale,
                                                  shift, out, labels);
}
void cast_f32_to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t s) { f32_to_bf16_k<<<blocks_for(n), kThreads, 0, s>>>(x, y, n); }
void cast_bf16_to_f32(const uint16_t* x, float* y, int64_t n, cudaStream_t s) { bf16_to_f32_k<<<blocks_for(n), kThreads, 0, s>>>(x, y, n); }
void cast_f32_to_f16(const float* x, uint16_t* y, int64_t n, cudaStream_t s) { f32_to_f16_k<<<blocks_for(n), kThreads, 0, s>>>(x, y, n); }
void cast_f16_to_f32(const uint16_t* x, float* y, int64_t n, cudaStream_t s) { f16_to_f32_k<<<blocks_for(n), kThreads, 0, s>>>(x, y, n); }
void unscale_and_check(float* g, int64_t n, float inv_scale, int32_t* found_inf, cudaStream_t s) {
  unscale_k<<<blocks_for(n), kThreads, 0, s>>>(g, n, inv_scale, found_inf);
}
void normalize_u8(const uint8_t* images, float* out, int64_t n, int64_t channels, int64_t hw, const float* scale,
                  const float* shift, cudaStream_t s) {
  const int64_t total = n * channels * hw;
  normalize_k<<<blocks_for(total), kThreads, 0, s>>>(images, out, total, channels, hw, scale, shift);
}
void add_bias(float* y, const float* bias, int64_t outer, int64_t channels, int64_t inner, cudaStream_t s) {
  const int64_t total = outer * channels * inner;
  add_bias_k<<<blocks_for(total), kThreads, 0, s>>>(y, bias, total, channels, inner);
}
void bias_grad(const float* dy, float* db, int64_t outer, int64_t channels, int64_t inner, cudaStream_t s) {
  if (channels > 0) bias_grad_k<<<unsigned(channels), kThreads, 0, s>>>(dy, db, outer, channels, inner);
}
void empty_kernel(cudaStream_t s) { empty_k<<<1, 1, 0, s>>>(); }
void stream_copy(const float* a, float* b, int64_t n, cudaStream_t s) { copy_k<<<blocks_for(n), kThreads, 0, s>>>(a, b, n); }
void stream_triad(float* a, const float* b, const float* c, float scalar, int64_t n, cudaStream_t s) {
  triad_k<<<blocks_for(n), kThreads, 0, s>>>(a, b, c, scalar, n);
}
void stream_read(const float* x, int64_t n, double* out, cudaStream_t s) { read_k<<<blocks_for(n), kThreads, 0, s>>>(x, n, out); }
void fill(float* x, int64_t n, float value, cudaStream_t s) { fill_k<<<blocks_for(n), kThreads, 0, s>>>(x, n, value); }

}  // namespace dlperf::cuda
