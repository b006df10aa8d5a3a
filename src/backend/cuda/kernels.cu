// dlperf's own CUDA kernels (see kernels.h). Element-wise kernels use grid-stride loops with a
// grid sized to the SM count's order of magnitude, so one launch covers any n.
#include <cfloat>
#include <chrono>
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pool_index.h"
#include "core/rng.h"
#include "data/augment.h"

namespace dlperf::cuda {

namespace {

// The element-wise passes (relu, its gradient, the residual add) load and store 16 bytes at a
// time (Pack, kernel_util.cuh): 4 floats or 8 bf16/fp16 values. One 2-byte load a thread keeps
// about half a megabyte of bf16 in flight on a full H200, under 1 TB/s by Little's law at its
// 0.6-0.8 us latency (as the batchnorm passes ran before they loaded several at once); a 16-byte
// one keeps 8 times as much. Where an array is not 16-byte aligned, or past the last whole pack,
// the elements go one at a time.

// `pack(p)` for each whole pack p of n elements (when every array is aligned), then `element(i)`
// for each element left, over the grid's threads.
template <class T, class PackBody, class ElementBody>
__device__ void by_packs(int64_t n, bool aligned, const PackBody& pack, const ElementBody& element) {
  const int64_t packs = aligned ? n / Pack<T>::kSize : 0, done = packs * Pack<T>::kSize;
  GRID_STRIDE(p, packs) pack(p);
  GRID_STRIDE(i, n - done) element(done + i);
}

template <class T>
__global__ void relu_forward_k(const T* x, T* y, int64_t n, bool aligned) {
  by_packs<T>(
      n, aligned,
      [&](int64_t p) {
        Pack<T> v = reinterpret_cast<const Pack<T>*>(x)[p];
        UNROLL
        for (int j = 0; j < Pack<T>::kSize; ++j) st(v.e, j, fmaxf(ld(v.e, j), 0.f));
        reinterpret_cast<Pack<T>*>(y)[p] = v;
      },
      [&](int64_t i) { st(y, i, fmaxf(ld(x, i), 0.f)); });
}

// Pack p of the relu's gradient: dy where y > 0, else 0.
template <class T>
__device__ Pack<T> relu_grad_pack(const T* y, const T* dy, int64_t p) {
  const Pack<T> vy = reinterpret_cast<const Pack<T>*>(y)[p];
  Pack<T> g = reinterpret_cast<const Pack<T>*>(dy)[p];
  UNROLL
  for (int j = 0; j < Pack<T>::kSize; ++j)
    if (!(ld(vy.e, j) > 0.f)) st(g.e, j, 0.f);
  return g;
}

template <class T>
__global__ void relu_backward_k(const T* y, const T* dy, T* dx, int64_t n, bool aligned) {
  by_packs<T>(
      n, aligned, [&](int64_t p) { reinterpret_cast<Pack<T>*>(dx)[p] = relu_grad_pack(y, dy, p); },
      [&](int64_t i) { st(dx, i, ld(y, i) > 0.f ? ld(dy, i) : 0.f); });
}

// The relu clamps the sum as stored (rounded to T), as a relu pass reading it would.
template <class T>
__global__ void add_k(const T* a, const T* b, T* y, int64_t n, bool aligned, bool relu) {
  by_packs<T>(
      n, aligned,
      [&](int64_t p) {
        Pack<T> va = reinterpret_cast<const Pack<T>*>(a)[p];
        const Pack<T> vb = reinterpret_cast<const Pack<T>*>(b)[p];
        UNROLL
        for (int j = 0; j < Pack<T>::kSize; ++j) {
          st(va.e, j, ld(va.e, j) + ld(vb.e, j));
          if (relu) st(va.e, j, fmaxf(ld(va.e, j), 0.f));
        }
        reinterpret_cast<Pack<T>*>(y)[p] = va;
      },
      [&](int64_t i) {
        st(y, i, ld(a, i) + ld(b, i));
        if (relu) st(y, i, fmaxf(ld(y, i), 0.f));
      });
}

// g = dy where y > 0 (relu_backward_k), then d0 = g or d0 + g, and the same into d1 where there is one.
template <class T>
__global__ void relu_grad_to_inputs_k(const T* y, const T* dy, T* d0, bool add0, T* d1, bool add1, int64_t n, bool aligned) {
  by_packs<T>(
      n, aligned,
      [&](int64_t p) {
        const Pack<T> g = relu_grad_pack(y, dy, p);
        auto put = [&](T* d, bool sum) {
          if (!d) return;
          Pack<T> out = g;
          if (sum) {
            const Pack<T> old = reinterpret_cast<const Pack<T>*>(d)[p];
            UNROLL
            for (int j = 0; j < Pack<T>::kSize; ++j) st(out.e, j, ld(old.e, j) + ld(g.e, j));
          }
          reinterpret_cast<Pack<T>*>(d)[p] = out;
        };
        put(d0, add0);
        put(d1, add1);
      },
      [&](int64_t i) {
        const float g = ld(y, i) > 0.f ? ld(dy, i) : 0.f;  // dy's value or 0: exact in T
        if (d0) st(d0, i, add0 ? ld(d0, i) + g : g);
        if (d1) st(d1, i, add1 ? ld(d1, i) + g : g);
      });
}

template <class T>
__global__ void dropout_forward_k(const T* x, T* y, uint8_t* mask, int64_t n, float p, float scale, uint64_t seed,
                                  const StepArgs* args) {
  const uint64_t step_seed = args ? hash_coords(seed, args->dropout_step) : seed;
  GRID_STRIDE(i, n) {
    const bool keep = uniform01(mix64(step_seed ^ uint64_t(i))) >= p;
    mask[i] = keep;
    st(y, i, keep ? ld(x, i) * scale : 0.f);
  }
}

template <class T>
__global__ void dropout_backward_k(const T* dy, const uint8_t* mask, T* dx, int64_t n, float scale) {
  GRID_STRIDE(i, n) st(dx, i, mask[i] ? ld(dy, i) * scale : 0.f);
}

// One block a row: max, sum of exponentials, loss and gradient in double like the CPU's.
template <class T>
__global__ void softmax_ce_k(const T* logits, const int32_t* labels, int64_t classes, int64_t valid, float eps,
                             double* loss_sum, int32_t* correct, T* dlogits, const float* loss_scale) {
  const int64_t row = blockIdx.x;
  const T* z = logits + row * classes;
  if (row >= valid) {
    if (dlogits)
      for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) st(dlogits, row * classes + c, 0.f);
    return;
  }
  __shared__ double s_max, s_sum;
  if (threadIdx.x == 0) {  // classes are few (10-1000): one thread per row is simple and exact
    int64_t arg = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (ld(z, c) > ld(z, arg)) arg = c;
    const double mx = ld(z, arg);
    double sum = 0, mean = 0;
    for (int64_t c = 0; c < classes; ++c) sum += exp(double(ld(z, c)) - mx);
    const double log_sum = log(sum);
    for (int64_t c = 0; c < classes; ++c) mean += (log_sum - (double(ld(z, c)) - mx)) / double(classes);
    const double nll = log_sum - (double(ld(z, labels[row])) - mx);
    atomicAdd(loss_sum, (1 - double(eps)) * nll + double(eps) * mean);
    if (arg == labels[row]) atomicAdd(correct, 1);
    s_max = mx;
    s_sum = sum;
  }
  __syncthreads();
  if (!dlogits) return;
  const double scale = loss_scale ? double(*loss_scale) : 1.0;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    const double target = (c == labels[row] ? 1 - double(eps) : 0.0) + double(eps) / double(classes);
    st(dlogits, row * classes + c, float(scale * (exp(double(ld(z, c)) - s_max) / s_sum - target) / double(valid)));
  }
}

// One thread an output element (pool_index.h's bodies, in either layout).
template <class T>
__global__ void pool_forward_k(PoolShape p, const T* x, T* y) {
  const int64_t total = p.planes * p.out_h * p.out_w;
  GRID_STRIDE(e, total) st(y, e, pool_output(p, e, Loader<T>{x}));
}

// One thread an input element: sums the gradient of every window that holds it.
template <class T>
__global__ void pool_backward_k(PoolShape p, const T* x, const T* dy, T* dx) {
  const int64_t total = p.planes * p.h * p.w;
  GRID_STRIDE(e, total) st(dx, e, pool_input_grad(p, e, Loader<T>{x}, Loader<T>{dy}));
}

// One thread an output element, where the windows tile the input: writes its tile of dx.
template <class T>
__global__ void pool_tile_backward_k(PoolShape p, const T* x, const T* dy, T* dx) {
  const int64_t total = p.planes * p.out_h * p.out_w;
  GRID_STRIDE(e, total) pool_tile_grad(p, e, Loader<T>{x}, Loader<T>{dy}, Storer<T>{dx});
}

// The presets' pooling: 2x2 windows, stride 2, no padding (pool2_fits). One output element a
// thread, its four inputs loaded at once, no bounds checks (unpadded windows lie inside the map),
// 32-bit indices. The general path above checks 16 window slots against the map's bounds in
// 64-bit arithmetic: by the PTX several times the instructions of the loads themselves, so it
// could not keep up with the memory. Same elements in the same order: the same floats.
struct Pool2At {
  int first, pixel;  // the window's top-left input element; the distance between neighbouring pixels
  int row;           // the distance between the window's rows
  // In an odd map the last column (row) of windows leaves one input column (row) that no window
  // reads; the backward pass's last windows zero it (the tile reaching the map's end).
  bool extra_column, extra_row;
};
__device__ inline Pool2At pool2_at(const PoolShape& p, int e) {
  const int oh = int(p.out_h), ow = int(p.out_w), h = int(p.h), w = int(p.w);
  const int r = (p.layout == Layout::nhwc ? e / int(p.channels) : e) % (oh * ow), oy = r / ow, ox = r % ow;
  const bool extra_column = (w & 1) && ox == ow - 1, extra_row = (h & 1) && oy == oh - 1;
  if (p.layout == Layout::nhwc) {
    const int C = int(p.channels), c = e % C, n = e / C / (oh * ow);
    return {((n * h + 2 * oy) * w + 2 * ox) * C + c, C, w * C, extra_column, extra_row};
  }
  const int plane = e / (oh * ow);
  return {(plane * h + 2 * oy) * w + 2 * ox, 1, w, extra_column, extra_row};
}

template <class T>
__global__ void pool2_forward_k(PoolShape p, const T* x, T* y, int total) {
  for (int e = int(blockIdx.x * blockDim.x + threadIdx.x); e < total; e += int(gridDim.x * blockDim.x)) {
    const Pool2At a = pool2_at(p, e);
    const float v0 = ld(x, a.first), v1 = ld(x, a.first + a.pixel), v2 = ld(x, a.first + a.row), v3 = ld(x, a.first + a.row + a.pixel);
    // As pool_output: from -inf (max) or 0 (average), the elements row by row.
    st(y, e, p.max ? fmaxf(fmaxf(fmaxf(fmaxf(-INFINITY, v0), v1), v2), v3) : (((0.f + v0) + v1) + v2 + v3) / 4.f);
  }
}

// Its backward: each output's window gets the gradient at its first largest element (max) or a
// quarter of it everywhere (average), and in an odd map the last windows zero the column or row
// past them, as pool_tile_grad gives it (medium's pool3, 7x7 to 3x3, took the general tile path
// until 2026-11-28: 7.3 us a step for 1 MB in bf16 at batch 64 on an H100).
template <class T>
__global__ void pool2_backward_k(PoolShape p, const T* x, const T* dy, T* dx, int total) {
  for (int e = int(blockIdx.x * blockDim.x + threadIdx.x); e < total; e += int(gridDim.x * blockDim.x)) {
    const Pool2At a = pool2_at(p, e);
    if (a.extra_column) st(dx, a.first + 2 * a.pixel, 0.f), st(dx, a.first + a.row + 2 * a.pixel, 0.f);
    if (a.extra_row) {
      st(dx, a.first + 2 * a.row, 0.f), st(dx, a.first + 2 * a.row + a.pixel, 0.f);
      if (a.extra_column) st(dx, a.first + 2 * a.row + 2 * a.pixel, 0.f);
    }
    const int at[4] = {a.first, a.first + a.pixel, a.first + a.row, a.first + a.row + a.pixel};
    const float g = ld(dy, e);
    if (!p.max) {
      UNROLL for (int j = 0; j < 4; ++j) st(dx, at[j], g / 4.f);
      continue;
    }
    float v[4];
    UNROLL for (int j = 0; j < 4; ++j) v[j] = ld(x, at[j]);
    int best = 0;
    UNROLL for (int j = 1; j < 4; ++j) if (v[j] > v[best]) best = j;
    UNROLL for (int j = 0; j < 4; ++j) st(dx, at[j], j == best ? g : 0.f);
  }
}

// One thread an element of the output, whose layout is the other one: reads are strided, writes
// coalesced. The tensors moved are small (a flatten's input) or the input's few channels.
template <class Tin, class Tout>
__global__ void change_layout_k(const Tin* x, Tout* y, int64_t n, int64_t channels, int64_t hw, Layout to) {
  const int64_t total = n * channels * hw;
  const Layout from = to == Layout::nchw ? Layout::nhwc : Layout::nchw;
  GRID_STRIDE(e, total) {
    int64_t b, c, i;
    if (to == Layout::nchw) b = e / (channels * hw), c = (e / hw) % channels, i = e % hw;
    else b = e / (channels * hw), i = (e / channels) % hw, c = e % channels;
    st(y, e, ld(x, offset_of(from, b, c, i, channels, hw)));
  }
}

// With `relu`, the relu after a linear layer too, in the same pass (max(half(v), 0) equals
// half(max(v, 0)): rounding keeps the order, so the fused result is the two launches' bit for bit).
template <class T, bool Relu>
__global__ void add_bias_k(T* y, const float* bias, int64_t total, int64_t channels, int64_t inner) {
  GRID_STRIDE(i, total) {
    const float v = ld(y, i) + bias[(i / inner) % channels];
    st(y, i, Relu ? fmaxf(v, 0.f) : v);
  }
}

// One block a channel: a tree reduction over its outer x inner elements, in double. With Relu,
// the backward of the relu after the layer first, in place: masked (dy itself) = 0 where the
// relu's output y is not positive (each element belongs to one channel, so one thread reads and
// writes it).
template <class T, bool Relu>
__global__ void bias_grad_k(const T* y, const T* dy, T* masked, float* db, int64_t outer, int64_t channels, int64_t inner) {
  __shared__ double part[kThreads];
  const int64_t c = blockIdx.x;
  double sum = 0;
  for (int64_t j = threadIdx.x; j < outer * inner; j += blockDim.x) {
    const int64_t o = j / inner, i = j % inner, e = (o * channels + c) * inner + i;
    if (Relu && !(ld(y, e) > 0.f)) {
      st(masked, e, 0.f);
      continue;
    }
    sum += ld(dy, e);
  }
  part[threadIdx.x] = sum;
  __syncthreads();
  for (int step = kThreads / 2; step > 0; step /= 2) {
    if (int(threadIdx.x) < step) part[threadIdx.x] += part[threadIdx.x + step];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[c] = float(part[0]);
}

template <class T>
__global__ void to_f32_k(const T* x, float* y, int64_t n) {
  GRID_STRIDE(i, n) y[i] = ld(x, i);
}
template <class T>
__global__ void from_f32_k(const float* x, T* y, int64_t n) {
  GRID_STRIDE(i, n) st(y, i, x[i]);
}

__global__ void update_loss_scale_k(LossScale* ls) { advance_loss_scale(*ls); }

// HalfCopies with its pointers typed: gradient i from the half copy where there is one, and the
// updated weight i stored to the half copy too.
template <class T>
struct Halves {
  const T* grads;
  int64_t grads_count;
  T* weights;
  int64_t weights_count;
  __device__ float grad(const float* g, int64_t i) const { return i < grads_count ? ld(grads, i) : g[i]; }
  __device__ void store(int64_t i, float w) const {
    if (i < weights_count) st(weights, i, w);
  }
};
template <class T>
Halves<T> typed(const HalfCopies& h) {
  return {static_cast<const T*>(h.grads), h.grads ? h.grads_count : 0, static_cast<T*>(h.weights), h.weights ? h.weights_count : 0};
}

template <class T>
__global__ void sgd_k(float* w, const float* g, float* buf, int64_t n, float lr, float mu, float wd, bool nesterov,
                      const StepArgs* args, const int32_t* skip, Halves<T> h) {
  if (skip && *skip) return;
  if (args) lr = args->lr;
  GRID_STRIDE(i, n) {
    float d = h.grad(g, i) + wd * w[i];
    if (buf) {
      buf[i] = mu * buf[i] + d;
      d = nesterov ? d + mu * buf[i] : buf[i];
    }
    const float wi = w[i] - lr * d;
    w[i] = wi;
    h.store(i, wi);
  }
}

template <class T>
__global__ void adamw_k(float* w, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2, float eps,
                        float wd, float c1, float c2, const StepArgs* args, const int32_t* skip, Halves<T> h) {
  if (skip && *skip) return;
  if (args) lr = args->lr, c1 = args->adam_c1, c2 = args->adam_c2;
  GRID_STRIDE(i, n) {
    const float gi = h.grad(g, i);
    float wi = w[i] * (1.0f - lr * wd);
    m[i] = b1 * m[i] + (1 - b1) * gi;
    v[i] = b2 * v[i] + (1 - b2) * gi * gi;
    wi -= lr * (m[i] * c1) / (sqrtf(v[i] * c2) + eps);
    w[i] = wi;
    h.store(i, wi);
  }
}

template <class T>
__global__ void unscale_k(float* g, int64_t n, float inv_scale, int32_t* found_inf, const float* scale, Halves<T> h) {
  if (scale) inv_scale = 1.0f / *scale;
  GRID_STRIDE(i, n) {
    const float v = h.grad(g, i) * inv_scale;
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

// One thread an output element (e counts in NCHW order; it is stored at its place in `layout`);
// the crop is the host loader's (data/augment.h).
template <class T>
__global__ void gather_k(DeviceImages d, const int32_t* order, int64_t first, int64_t epoch, const StepArgs* args,
                         int64_t batch, bool augment, int64_t pad, bool flip_ok, uint64_t seed, const float* scale,
                         const float* shift, T* out, Layout layout, int32_t* labels) {
  const int64_t C = d.channels, H = d.height, W = d.width, HW = H * W, total = batch * C * HW;
  if (args) first = args->batch * batch, epoch = args->epoch;
  GRID_STRIDE(e, total) {
    const int64_t row = e / (C * HW), c = (e / HW) % C, y = (e / W) % H, x = e % W;
    const int64_t at = offset_of(layout, row, c, y * W + x, C, HW);
    if (first + row >= d.count) {
      st(out, at, 0.f);
      if (c == 0 && y == 0 && x == 0) labels[row] = 0;
      continue;
    }
    const int64_t sample = order[first + row];
    if (c == 0 && y == 0 && x == 0) labels[row] = d.labels[sample];
    const data::Crop crop = augment ? data::random_crop(seed, epoch, sample, pad, flip_ok) : data::Crop{};
    const int64_t sy = y + crop.dy, sx = (crop.flip ? W - 1 - x : x) + crop.dx;
    const float v = (sy >= 0 && sy < H && sx >= 0 && sx < W) ? float(d.images[(sample * C + c) * HW + sy * W + sx]) : 0.f;
    st(out, at, v * scale[c] + shift[c]);
  }
}

__global__ void empty_k() {}

// The emulation has no %globaltimer: the host's steady clock stands in, in nanoseconds as well.
#ifdef DLPERF_CUDA_EMULATION
inline uint64_t global_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}
#else
__device__ inline uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
#endif
__global__ void stamp_k(uint64_t* at) { *at = global_ns(); }
__global__ void hold_k(uint64_t ns) {
  const uint64_t start = global_ns();
  while (global_ns() - start < ns) {
  }
}
__global__ void clock_tick_k(uint64_t* out) {
  uint64_t best = 0;
  for (int change = 0; change < 64; ++change) {
    const uint64_t t0 = global_ns();
    uint64_t t = t0;
    for (int read = 0; read < (1 << 20) && t == t0; ++read) t = global_ns();
    if (t != t0 && (best == 0 || t - t0 < best)) best = t - t0;
  }
  *out = best;
}

// STREAM's kernels (dlperf bench memory) move 16 bytes a load (float4) and start kLoadsInFlight
// loads a thread before using any. With one 4-byte load at a time too few bytes were in flight for
// HBM3e: on an H200 copy measured 2991 GB/s, 62% of the datasheet's 4800, where a device copy
// through PyTorch moved about 4300 (2026-11-27). Arrays from cudaMalloc are 16-byte aligned; the
// last n % 4 floats go one a thread. `body(i)` handles float4 i, `tail(i)` float i.
constexpr int kLoadsInFlight = 4;

template <class Body, class Tail>
__device__ void stream_loop(int64_t n, const Body& body, const Tail& tail) {
  const int64_t n4 = n / 4, stride = int64_t(gridDim.x) * blockDim.x, first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = first; i < n4; i += stride * kLoadsInFlight) body(i, stride, n4);
  if (first < n - n4 * 4) tail(n4 * 4 + first);
}

__global__ void copy_k(const float* a, float* b, int64_t n) {
  const float4* a4 = reinterpret_cast<const float4*>(a);
  float4* b4 = reinterpret_cast<float4*>(b);
  stream_loop(
      n,
      [&](int64_t i, int64_t stride, int64_t n4) {
        float4 v[kLoadsInFlight] = {};
        for (int u = 0; u < kLoadsInFlight; ++u)
          if (i + u * stride < n4) v[u] = a4[i + u * stride];
        for (int u = 0; u < kLoadsInFlight; ++u)
          if (i + u * stride < n4) b4[i + u * stride] = v[u];
      },
      [&](int64_t i) { b[i] = a[i]; });
}

__global__ void triad_k(float* a, const float* b, const float* c, float s, int64_t n) {
  float4* a4 = reinterpret_cast<float4*>(a);
  const float4 *b4 = reinterpret_cast<const float4*>(b), *c4 = reinterpret_cast<const float4*>(c);
  stream_loop(
      n,
      [&](int64_t i, int64_t stride, int64_t n4) {
        float4 vb[kLoadsInFlight] = {}, vc[kLoadsInFlight] = {};
        for (int u = 0; u < kLoadsInFlight; ++u)
          if (i + u * stride < n4) vb[u] = b4[i + u * stride], vc[u] = c4[i + u * stride];
        for (int u = 0; u < kLoadsInFlight; ++u)
          if (i + u * stride < n4)
            a4[i + u * stride] = make_float4(vb[u].x + s * vc[u].x, vb[u].y + s * vc[u].y, vb[u].z + s * vc[u].z, vb[u].w + s * vc[u].w);
      },
      [&](int64_t i) { a[i] = b[i] + s * c[i]; });
}

__global__ void read_k(const float* x, int64_t n, double* out) {
  __shared__ double part[kThreads];
  double sum = 0;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  stream_loop(
      n,
      [&](int64_t i, int64_t stride, int64_t n4) {
        float4 v[kLoadsInFlight] = {};
        for (int u = 0; u < kLoadsInFlight; ++u) v[u] = i + u * stride < n4 ? x4[i + u * stride] : make_float4(0, 0, 0, 0);
        for (int u = 0; u < kLoadsInFlight; ++u) sum += double(v[u].x) + double(v[u].y) + double(v[u].z) + double(v[u].w);
      },
      [&](int64_t i) { sum += x[i]; });
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

// Whether every array starts on a 16-byte boundary (the packed passes' loads need it).
// The threads a packed pass needs: a pack each, and the elements after the last whole pack.
int64_t packed(int64_t n, DType t, bool aligned) {
  const int64_t k = aligned ? 16 / int64_t(bytes_of(t)) : 1;
  return n / k + n % k;
}

}  // namespace

void sgd_update(float* w, const float* g, float* momentum, int64_t n, float lr, float mu, float weight_decay, bool nesterov,
                const StepArgs* args, const int32_t* skip, cudaStream_t s, const HalfCopies& half) {
  DISPATCH(half.type,
           LAUNCH(blocks_for(n), kThreads, 0, s, sgd_k<T>)(w, g, momentum, n, lr, mu, weight_decay, nesterov, args, skip, typed<T>(half)))
}
void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int64_t step, const StepArgs* args, const int32_t* skip, cudaStream_t s,
                  const HalfCopies& half) {
  const float c1 = 1.0f / (1.0f - powf(beta1, float(step))), c2 = 1.0f / (1.0f - powf(beta2, float(step)));
  DISPATCH(half.type, LAUNCH(blocks_for(n), kThreads, 0, s, adamw_k<T>)(w, g, m, v, n, lr, beta1, beta2, eps, weight_decay, c1, c2, args,
                                                                    skip, typed<T>(half)))
}
void gather_batch(const DeviceImages& d, const int32_t* order, int64_t first, int64_t epoch, const StepArgs* args,
                  int64_t batch, bool augment, int64_t pad_crop, bool flip_ok, uint64_t seed, const float* scale,
                  const float* shift, void* out, int32_t* labels, cudaStream_t s, DType t, Layout layout) {
  const int64_t total = batch * d.channels * d.height * d.width;
  DISPATCH(t, LAUNCH(blocks_for(total), kThreads, 0, s, gather_k<T>)(d, order, first, epoch, args, batch, augment, pad_crop, flip_ok,
                                                                 seed, scale, shift, static_cast<T*>(out), layout, labels))
}
void unscale_and_check(float* g, int64_t n, float inv_scale, int32_t* found_inf, cudaStream_t s, const float* scale, DType t,
                       const void* half, int64_t half_count) {
  if (n <= 0) return;
  const HalfCopies h{t, half, half_count, nullptr, 0};
  DISPATCH(t, LAUNCH(blocks_for(n), kThreads, 0, s, unscale_k<T>)(g, n, inv_scale, found_inf, scale, typed<T>(h)))
}
void relu_forward(DType t, const void* x, void* y, int64_t n, cudaStream_t s) {
  const bool aligned = aligned16({x, y});
  DISPATCH(t, LAUNCH(blocks_for(packed(n, t, aligned)), kThreads, 0, s, relu_forward_k<T>)(static_cast<const T*>(x), static_cast<T*>(y), n,
                                                                                          aligned))
}
void relu_backward(DType t, const void* y, const void* dy, void* dx, int64_t n, cudaStream_t s) {
  const bool aligned = aligned16({y, dy, dx});
  DISPATCH(t, LAUNCH(blocks_for(packed(n, t, aligned)), kThreads, 0, s, relu_backward_k<T>)(
                  static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx), n, aligned))
}
void add(DType t, const void* a, const void* b, void* y, int64_t n, cudaStream_t s, bool relu) {
  const bool aligned = aligned16({a, b, y});
  DISPATCH(t, LAUNCH(blocks_for(packed(n, t, aligned)), kThreads, 0, s, add_k<T>)(static_cast<const T*>(a), static_cast<const T*>(b),
                                                                                 static_cast<T*>(y), n, aligned, relu))
}
void relu_grad_to_inputs(DType t, const void* y, const void* dy, void* d0, bool add0, void* d1, bool add1, int64_t n,
                         cudaStream_t s) {
  const bool aligned = aligned16({y, dy, d0, d1});
  DISPATCH(t, LAUNCH(blocks_for(packed(n, t, aligned)), kThreads, 0, s, relu_grad_to_inputs_k<T>)(
                  static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(d0), add0, static_cast<T*>(d1), add1, n, aligned))
}
void dropout_forward(DType t, const void* x, void* y, uint8_t* mask, int64_t n, float p, uint64_t seed, const StepArgs* args,
                     cudaStream_t s) {
  DISPATCH(t, LAUNCH(blocks_for(n), kThreads, 0, s, dropout_forward_k<T>)(static_cast<const T*>(x), static_cast<T*>(y), mask, n, p,
                                                                       1.0f / (1.0f - p), seed, args))
}
void dropout_backward(DType t, const void* dy, const uint8_t* mask, void* dx, int64_t n, float p, cudaStream_t s) {
  DISPATCH(t, LAUNCH(blocks_for(n), kThreads, 0, s, dropout_backward_k<T>)(static_cast<const T*>(dy), mask, static_cast<T*>(dx), n,
                                                                        1.0f / (1.0f - p)))
}
void softmax_cross_entropy(DType t, const void* logits, const int32_t* labels, int64_t rows, int64_t classes, int64_t valid,
                           float eps, double* loss_sum, int32_t* correct, void* dlogits, const float* loss_scale, cudaStream_t s) {
  if (rows <= 0) return;
  DISPATCH(t, LAUNCH(unsigned(rows), 64, 0, s, softmax_ce_k<T>)(static_cast<const T*>(logits), labels, classes, valid, eps, loss_sum,
                                                            correct, static_cast<T*>(dlogits), loss_scale))
}
void pool_forward(DType t, const PoolShape& p, const void* x, void* y, cudaStream_t s) {
  const int64_t total = p.planes * p.out_h * p.out_w;
  if (pool2_fits(p)) {
    DISPATCH(t, LAUNCH(blocks_for(total), kThreads, 0, s, pool2_forward_k<T>)(p, static_cast<const T*>(x), static_cast<T*>(y), int(total)))
    return;
  }
  DISPATCH(t, LAUNCH(blocks_for(total), kThreads, 0, s, pool_forward_k<T>)(p, static_cast<const T*>(x), static_cast<T*>(y)))
}
void pool_backward(DType t, const PoolShape& p, const void* x, const void* dy, void* dx, cudaStream_t s) {
  if (pool2_fits(p)) {
    const int64_t outputs = p.planes * p.out_h * p.out_w;
    DISPATCH(t, LAUNCH(blocks_for(outputs), kThreads, 0, s, pool2_backward_k<T>)(p, static_cast<const T*>(x), static_cast<const T*>(dy),
                                                                              static_cast<T*>(dx), int(outputs)))
    return;
  }
  if (pool_windows_tile(p)) {
    const int64_t outputs = p.planes * p.out_h * p.out_w;
    DISPATCH(t, LAUNCH(blocks_for(outputs), kThreads, 0, s, pool_tile_backward_k<T>)(p, static_cast<const T*>(x),
                                                                                  static_cast<const T*>(dy), static_cast<T*>(dx)))
    return;
  }
  const int64_t total = p.planes * p.h * p.w;
  DISPATCH(t, LAUNCH(blocks_for(total), kThreads, 0, s, pool_backward_k<T>)(p, static_cast<const T*>(x), static_cast<const T*>(dy),
                                                                         static_cast<T*>(dx)))
}
void add_bias(DType t, void* y, const float* bias, int64_t outer, int64_t channels, int64_t inner, cudaStream_t s, bool relu) {
  const int64_t total = outer * channels * inner;
  if (relu) {
    DISPATCH(t, LAUNCH(blocks_for(total), kThreads, 0, s, add_bias_k<T, true>)(static_cast<T*>(y), bias, total, channels, inner))
  } else {
    DISPATCH(t, LAUNCH(blocks_for(total), kThreads, 0, s, add_bias_k<T, false>)(static_cast<T*>(y), bias, total, channels, inner))
  }
}
void bias_grad(DType t, const void* dy, float* db, int64_t outer, int64_t channels, int64_t inner, cudaStream_t s) {
  if (channels <= 0) return;
  DISPATCH(t, LAUNCH(unsigned(channels), kThreads, 0, s, bias_grad_k<T, false>)(nullptr, static_cast<const T*>(dy), nullptr, db,
                                                                              outer, channels, inner))
}
void relu_bias_grad(DType t, const void* y, void* dy, float* db, int64_t rows, int64_t features, cudaStream_t s) {
  if (features <= 0) return;
  DISPATCH(t, LAUNCH(unsigned(features), kThreads, 0, s, bias_grad_k<T, true>)(static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dy), db, rows,
                                                                             features, 1))
}
void cast_to_f32(DType t, const void* x, float* out, int64_t n, cudaStream_t s) {
  DISPATCH(t, LAUNCH(blocks_for(n), kThreads, 0, s, to_f32_k<T>)(static_cast<const T*>(x), out, n))
}
void cast_from_f32(DType t, const float* x, void* out, int64_t n, cudaStream_t s) {
  DISPATCH(t, LAUNCH(blocks_for(n), kThreads, 0, s, from_f32_k<T>)(x, static_cast<T*>(out), n))
}
void cast_from_f32_to_nhwc(DType t, const float* nchw, void* nhwc, int64_t n, int64_t channels, int64_t hw, cudaStream_t s) {
  const int64_t total = n * channels * hw;
  DISPATCH(t, LAUNCH(blocks_for(total), kThreads, 0, s, change_layout_k<float, T>)(nchw, static_cast<T*>(nhwc), n, channels, hw, Layout::nhwc))
}
void change_layout(DType t, const void* x, void* y, int64_t n, int64_t channels, int64_t hw, Layout from, cudaStream_t s) {
  const int64_t total = n * channels * hw;
  const Layout to = from == Layout::nchw ? Layout::nhwc : Layout::nchw;
  DISPATCH(t, LAUNCH(blocks_for(total), kThreads, 0, s, change_layout_k<T, T>)(static_cast<const T*>(x), static_cast<T*>(y), n, channels, hw, to))
}
void update_loss_scale(LossScale* ls, cudaStream_t s) { LAUNCH(1, 1, 0, s, update_loss_scale_k)(ls); }
void normalize_u8(const uint8_t* images, float* out, int64_t n, int64_t channels, int64_t hw, const float* scale,
                  const float* shift, cudaStream_t s) {
  const int64_t total = n * channels * hw;
  LAUNCH(blocks_for(total), kThreads, 0, s, normalize_k)(images, out, total, channels, hw, scale, shift);
}
void empty_kernel(cudaStream_t s) { LAUNCH(1, 1, 0, s, empty_k)(); }
void stamp_time(uint64_t* at, cudaStream_t s) { LAUNCH(1, 1, 0, s, stamp_k)(at); }
void clock_tick(uint64_t* out, cudaStream_t s) { LAUNCH(1, 1, 0, s, clock_tick_k)(out); }
void hold_stream(uint64_t ns, cudaStream_t s) { LAUNCH(1, 1, 0, s, hold_k)(ns); }
void stream_copy(const float* a, float* b, int64_t n, cudaStream_t s) { LAUNCH(blocks_for(n), kThreads, 0, s, copy_k)(a, b, n); }
void stream_triad(float* a, const float* b, const float* c, float scalar, int64_t n, cudaStream_t s) {
  LAUNCH(blocks_for(n), kThreads, 0, s, triad_k)(a, b, c, scalar, n);
}
void stream_read(const float* x, int64_t n, double* out, cudaStream_t s) { LAUNCH(blocks_for(n), kThreads, 0, s, read_k)(x, n, out); }
void fill(float* x, int64_t n, float value, cudaStream_t s) { LAUNCH(blocks_for(n), kThreads, 0, s, fill_k)(x, n, value); }

}  // namespace dlperf::cuda
