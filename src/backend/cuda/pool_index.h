// The GPU pooling kernels' arithmetic, per element, in a header the host compiles too: the
// kernels (kernels.cu) call these bodies with loads of their element type, and the CPU test
// suite (tests/test_cuda.cpp, PoolWindows.* and PoolBodies.*) runs the same bodies on floats
// against a float64 reference, in both layouts, without a GPU.
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/cuda/layout.h"
#include "core/rng.h"  // DLPERF_HD

namespace dlperf::cuda {

/// Pooling over [N, C, H, W] (planes = N * C) into [N, C, OH, OW], both stored in `layout`: max
/// (padding never wins) or average (padding counted, PyTorch's default, as the CPU engine); a
/// global average pool is a window of the whole map. The backward pass writes each input element
/// from one thread (no atomics, deterministic): per output element where the windows tile the
/// input, else per input element, gathering from the windows holding it; a max window's gradient
/// goes to its first largest element.
struct PoolShape {
  int64_t planes = 0, h = 0, w = 0, out_h = 0, out_w = 0, kh = 1, kw = 1, stride = 1, pad = 0;
  bool max = true;
  int64_t channels = 1;  ///< C: NHWC indexing needs it
  Layout layout = Layout::nchw;
};

/// The output rows (or columns) whose window holds input row `i`: windows o with
/// o * stride - pad <= i <= o * stride - pad + k - 1, clipped to [0, out). Empty when first > last.
struct WindowRange {
  int64_t first, last;
};
DLPERF_HD inline WindowRange windows_holding(int64_t i, int64_t k, int64_t stride, int64_t pad, int64_t out) {
  // first = ceil((i + pad - k + 1) / stride), written for a numerator that may be negative.
  const int64_t num = i + pad - k + 1;
  int64_t first = num <= 0 ? 0 : (num + stride - 1) / stride;
  int64_t last = (i + pad) / stride;  // i + pad >= 0 always
  if (last > out - 1) last = out - 1;
  if (first < 0) first = 0;
  return {first, last};
}

/// Where an element's map starts in the input and in the output, the distance between
/// neighbouring pixels of a map (1 in NCHW, C in NHWC), and the element's row and column.
struct PoolAt {
  int64_t in_base, out_base, pixel, y, x;
};
/// Element e of a map of `rows` x `cols` pixels, numbered in the layout's own order.
DLPERF_HD inline PoolAt pool_at(const PoolShape& p, int64_t e, int64_t rows, int64_t cols) {
  const int64_t in_map = p.h * p.w, out_map = p.out_h * p.out_w;
  if (p.layout == Layout::nchw) {
    const int64_t plane = e / (rows * cols), r = e % (rows * cols);
    return {plane * in_map, plane * out_map, 1, r / cols, r % cols};
  }
  const int64_t C = p.channels, c = e % C, pixel = e / C, n = pixel / (rows * cols), r = pixel % (rows * cols);
  return {n * in_map * C + c, n * out_map * C + c, C, r / cols, r % cols};
}

/// Windows of up to kSmallWindow rows and columns (every preset's) have their elements loaded
/// all at once, before any is used (load_window): one at a time, in a loop whose bounds the
/// compiler cannot see, a GPU thread waited out the memory's latency for each element in turn,
/// and pooling ran at 0.3 to 0.8 TB/s on an H200. The constant bounds let nvcc unroll the loads
/// into registers. Elements are visited in the same order either way, so the floats are the same.
constexpr int kSmallWindow = 4;
struct WindowValues {
  float v[kSmallWindow * kSmallWindow];
  bool in[kSmallWindow * kSmallWindow];  ///< in the window and in the map (not padding)
};
DLPERF_HD inline bool small_window(const PoolShape& p) { return p.kh <= kSmallWindow && p.kw <= kSmallWindow; }
/// The window whose top-left corner is (y0, x0), row by row; element (ky, kx) at ky * kSmallWindow + kx.
template <class Load>
DLPERF_HD WindowValues load_window(const PoolShape& p, const PoolAt& a, int64_t y0, int64_t x0, const Load& x) {
  WindowValues w;
  for (int ky = 0; ky < kSmallWindow; ++ky)
    for (int kx = 0; kx < kSmallWindow; ++kx) {
      const int64_t yy = y0 + ky, xx = x0 + kx;
      const bool in = ky < p.kh && kx < p.kw && yy >= 0 && yy < p.h && xx >= 0 && xx < p.w;
      w.in[ky * kSmallWindow + kx] = in;
      w.v[ky * kSmallWindow + kx] = in ? x(a.in_base + (yy * p.w + xx) * a.pixel) : 0.f;
    }
  return w;
}

/// Calls f(offset, value) for each element of the window whose top-left corner is (y0, x0) that
/// lies in the map (padding left out), row by row; `offset` is row * w + column in the map. A
/// small window is loaded whole first (load_window); a larger one element by element.
template <class Load, class F>
DLPERF_HD void each_in_window(const PoolShape& p, const PoolAt& a, int64_t y0, int64_t x0, const Load& x, F f) {
  if (small_window(p)) {
    const WindowValues w = load_window(p, a, y0, x0, x);
    for (int ky = 0; ky < kSmallWindow; ++ky)
      for (int kx = 0; kx < kSmallWindow; ++kx)
        if (w.in[ky * kSmallWindow + kx]) f((y0 + ky) * p.w + x0 + kx, w.v[ky * kSmallWindow + kx]);
    return;
  }
  for (int64_t yy = y0; yy < y0 + p.kh; ++yy)
    for (int64_t xx = x0; xx < x0 + p.kw; ++xx)
      if (yy >= 0 && yy < p.h && xx >= 0 && xx < p.w) f(yy * p.w + xx, x(a.in_base + (yy * p.w + xx) * a.pixel));
}

/// Output element e's value; `x(offset)` loads an input element as a float.
template <class Load>
DLPERF_HD float pool_output(const PoolShape& p, int64_t e, const Load& x) {
  const PoolAt a = pool_at(p, e, p.out_h, p.out_w);
  float acc = p.max ? -INFINITY : 0.f;  // padding: never the max, zero in the sum
  each_in_window(p, a, a.y * p.stride - p.pad, a.x * p.stride - p.pad, x,
                 [&](int64_t, float v) { acc = p.max ? fmaxf(acc, v) : acc + v; });
  return p.max ? acc : acc / float(p.kh * p.kw);
}

/// The offset (row * w + column in the map) of the first largest input element of the window
/// whose top-left corner is (y0, x0), padding left out; -1 when the whole window is padding.
template <class Load>
DLPERF_HD int64_t window_argmax(const PoolShape& p, const PoolAt& a, int64_t y0, int64_t x0, const Load& x) {
  int64_t best = -1;
  float bv = -INFINITY;
  each_in_window(p, a, y0, x0, x, [&](int64_t at, float v) {
    if (best < 0 || v > bv) best = at, bv = v;
  });
  return best;
}

/// Whether each input element lies in at most one window: no padding, and a stride at least the
/// kernel (or one window across). The backward pass then runs per output element
/// (pool_tile_grad): a window's index arithmetic once, not once for each of its elements, each
/// of which would also look for the windows holding it (ten 64-bit divisions an element in all;
/// the per-element pass ran at 75 to 175 GB/s on an H200).
DLPERF_HD inline bool pool_windows_tile(const PoolShape& p) {
  return p.pad == 0 && (p.stride >= p.kh || p.out_h == 1) && (p.stride >= p.kw || p.out_w == 1);
}

/// The presets' pooling, which the kernels run on a path of its own (kernels.cu, pool2_forward_k):
/// 2x2 windows, stride 2, no padding, every tensor under 2^31 elements (32-bit indices).
DLPERF_HD inline bool pool2_fits(const PoolShape& p) {
  return p.kh == 2 && p.kw == 2 && p.stride == 2 && p.pad == 0 && p.planes * p.h * p.w < (int64_t(1) << 31);
}

/// Where the windows tile the input (pool_windows_tile), output element e's part of the input
/// gradient: `store(offset, value)` for each input element of its tile, the rows from its
/// window's first to the next window's (the last window's to the map's end) and the columns
/// alike, so the outputs together write every input element once. The window's gradient goes to
/// its first largest element (max) or to each of its elements (average); the rest of the tile,
/// outside the window, gets 0. The same floats as pool_input_grad's.
template <class LoadX, class LoadDy, class Store>
DLPERF_HD void pool_tile_grad(const PoolShape& p, int64_t e, const LoadX& x, const LoadDy& dy, const Store& store) {
  const PoolAt a = pool_at(p, e, p.out_h, p.out_w);
  const int64_t y0 = a.y * p.stride, x0 = a.x * p.stride;
  const int64_t y1 = a.y == p.out_h - 1 ? p.h : y0 + p.stride, x1 = a.x == p.out_w - 1 ? p.w : x0 + p.stride;
  const float g = dy(a.out_base + (a.y * p.out_w + a.x) * a.pixel);
  const int64_t best = p.max ? window_argmax(p, a, y0, x0, x) : -1;
  const float share = g / float(p.kh * p.kw);
  for (int64_t yy = y0; yy < y1; ++yy)
    for (int64_t xx = x0; xx < x1; ++xx) {
      const int64_t at = yy * p.w + xx;
      const bool in_window = yy < y0 + p.kh && xx < x0 + p.kw;
      store(a.in_base + at * a.pixel, !in_window ? 0.f : !p.max ? share : at == best ? g : 0.f);
    }
}

/// Input element e's gradient: the sum over the windows holding it. `x` and `dy` load elements
/// of the input and of the output's gradient.
template <class LoadX, class LoadDy>
DLPERF_HD float pool_input_grad(const PoolShape& p, int64_t e, const LoadX& x, const LoadDy& dy) {
  const PoolAt a = pool_at(p, e, p.h, p.w);
  const int64_t iy = a.y, ix = a.x;
  const WindowRange ry = windows_holding(iy, p.kh, p.stride, p.pad, p.out_h), rx = windows_holding(ix, p.kw, p.stride, p.pad, p.out_w);
  float sum = 0.f;
  for (int64_t oy = ry.first; oy <= ry.last; ++oy)
    for (int64_t ox = rx.first; ox <= rx.last; ++ox) {
      const int64_t y0 = oy * p.stride - p.pad, x0 = ox * p.stride - p.pad;
      if (iy < y0 || iy >= y0 + p.kh || ix < x0 || ix >= x0 + p.kw) continue;
      const float g = dy(a.out_base + (oy * p.out_w + ox) * a.pixel);
      if (!p.max) {
        sum += g / float(p.kh * p.kw);
        continue;
      }
      if (window_argmax(p, a, y0, x0, x) == iy * p.w + ix) sum += g;
    }
  return sum;
}

}  // namespace dlperf::cuda
