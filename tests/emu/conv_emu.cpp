// cuDNN's convolutions as plain loops, for the executor under the CPU emulation (cuda_emu.h):
// CudnnConv's interface (src/backend/cuda/conv.h) in either layout (NCHW with [K, C, R, S]
// filters, NHWC with [K, R, S, C]) and any activation type, summing in fp32 as cuDNN does. A
// stand-in for testing what is around the convolutions, not a reference for them: the op tests
// check convolutions against float64, and cuDNN's own are checked on a GPU.
#include "emu/cuda_emu.h"

#include <vector>

#include "backend/cuda/conv.h"
#include "backend/cuda/kernel_util.cuh"

namespace dlperf::cuda {

namespace {

// Element offsets of activations [n, c, y, x] and filters [k, c, ry, rx] in a layout.
struct Places {
  const ConvShape& s;
  bool nhwc;
  int64_t act(int64_t n, int64_t c, int64_t y, int64_t x, int64_t channels, int64_t h, int64_t w) const {
    return nhwc ? ((n * h + y) * w + x) * channels + c : ((n * channels + c) * h + y) * w + x;
  }
  int64_t in(int64_t n, int64_t c, int64_t y, int64_t x) const { return act(n, c, y, x, s.c, s.h, s.w); }
  int64_t out(int64_t n, int64_t k, int64_t y, int64_t x) const { return act(n, k, y, x, s.k, s.out_h(), s.out_w()); }
  int64_t filter(int64_t k, int64_t c, int64_t ry, int64_t rx) const {
    return nhwc ? ((k * s.r + ry) * s.r + rx) * s.c + c : ((k * s.c + c) * s.r + ry) * s.r + rx;
  }
};

// Calls f(input offset, filter offset, output offset) for every multiply-add of the convolution,
// the input channel innermost.
template <class F>
void each_product(const ConvShape& s, bool nhwc, F f) {
  const Places at{s, nhwc};
  const int64_t in_step = nhwc ? 1 : s.h * s.w, filter_step = nhwc ? 1 : s.r * s.r;
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t k = 0; k < s.k; ++k)
      for (int64_t oy = 0; oy < s.out_h(); ++oy)
        for (int64_t ox = 0; ox < s.out_w(); ++ox) {
          const int64_t o = at.out(n, k, oy, ox);
          for (int64_t ry = 0; ry < s.r; ++ry)
            for (int64_t rx = 0; rx < s.r; ++rx) {
              const int64_t y = oy * s.stride - s.pad + ry, x = ox * s.stride - s.pad + rx;
              if (y < 0 || y >= s.h || x < 0 || x >= s.w) continue;
              const int64_t i0 = at.in(n, 0, y, x), f0 = at.filter(k, 0, ry, rx);
              for (int64_t c = 0; c < s.c; ++c) f(i0 + c * in_step, f0 + c * filter_step, o);
            }
        }
}

enum class Pass { forward, data, filter };

// The operands widened to fp32 once, so the loops multiply floats.
template <class T>
std::vector<float> widened(const void* p, int64_t count) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[size_t(i)] = ld(static_cast<const T*>(p), i);
  return v;
}

// `add`: the sums start from what `out` holds (cuDNN's beta = 1), rather than from zero.
template <class T>
void run(const ConvShape& s, bool nhwc, Pass pass, const void* a, const void* b, void* out, bool add) {
  const int64_t xs = s.n * s.c * s.h * s.w, ys = s.n * s.k * s.out_h() * s.out_w(), ws = s.k * s.c * s.r * s.r;
  std::vector<float> acc(size_t(pass == Pass::forward ? ys : pass == Pass::data ? xs : ws), 0.f);
  if (pass == Pass::forward) {  // a = x, b = w
    const auto x = widened<T>(a, xs), w = widened<T>(b, ws);
    each_product(s, nhwc, [&](int64_t i, int64_t f, int64_t o) { acc[size_t(o)] += x[size_t(i)] * w[size_t(f)]; });
  } else if (pass == Pass::data) {  // a = w, b = dy
    const auto w = widened<T>(a, ws), dy = widened<T>(b, ys);
    each_product(s, nhwc, [&](int64_t i, int64_t f, int64_t o) { acc[size_t(i)] += dy[size_t(o)] * w[size_t(f)]; });
  } else {  // a = x, b = dy
    const auto x = widened<T>(a, xs), dy = widened<T>(b, ys);
    each_product(s, nhwc, [&](int64_t i, int64_t f, int64_t o) { acc[size_t(f)] += x[size_t(i)] * dy[size_t(o)]; });
  }
  T* po = static_cast<T*>(out);
  for (size_t e = 0; e < acc.size(); ++e) st(po, int64_t(e), add ? acc[e] + ld(po, int64_t(e)) : acc[e]);
}

DType dtype_of(Precision p) { return p == Precision::bf16 ? DType::bf16 : p == Precision::fp16 ? DType::f16 : DType::f32; }

// Queued as one "kernel" of the emulation's stream (emu_stream.h): run now, or recorded into a
// graph being captured.
void dispatch(Precision p, const ConvShape& s, bool nhwc, Pass pass, const void* a, const void* b, void* out, cudaStream_t stream,
              bool add = false) {
  emu::submit(emu::NodeKind::kernel, stream, [=] { DISPATCH(dtype_of(p), run<T>(s, nhwc, pass, a, b, out, add)) });
}

}  // namespace

CudnnConv::CudnnConv(const ConvShape& s, Precision p, bool nhwc, bool own_workspace, bool deterministic,  // the loops always are
                     size_t workspace_limit)                                                         // and need none
    : s_(s), p_(p), nhwc_(nhwc), deterministic_(deterministic), own_workspace_(own_workspace), workspace_limit_(workspace_limit) {
  timed_ = false;
}
CudnnConv::~CudnnConv() = default;
void CudnnConv::set_workspace(void* w) { workspace_ = w; }
void CudnnConv::forward(const void* x, const void* w, void* y, cudaStream_t st) {
  dispatch(p_, s_, nhwc_, Pass::forward, x, w, y, st);
}
void CudnnConv::backward_data(const void* w, const void* dy, void* dx, cudaStream_t st, bool add) {
  dispatch(p_, s_, nhwc_, Pass::data, w, dy, dx, st, add);
}
void CudnnConv::backward_filter(const void* x, const void* dy, void* dw, cudaStream_t st) {
  dispatch(p_, s_, nhwc_, Pass::filter, x, dy, dw, st);
}
std::string CudnnConv::algorithms() const { return "loops (CPU emulation)"; }

}  // namespace dlperf::cuda
