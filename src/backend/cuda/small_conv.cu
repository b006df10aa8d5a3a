// The own convolution of small_conv.h: forward, and the weight gradient in two launches (partial
// sums a block, then their sum in a fixed order). Both are memory-bound: what matters is moving
// the K-channel output (or its gradient) once at the memory's speed, with enough of it in flight.
#include "backend/cuda/small_conv.h"

#include <algorithm>

#include "backend/cuda/kernel_util.cuh"

namespace dlperf::cuda {
namespace {

constexpr int kMaxK = 256;   // output channels: a block's kThreads threads cover them
constexpr int kR = 3;        // filter size

// A ConvShape with its output size worked out, for device code. Indices are 32-bit (small_conv_fits
// keeps every tensor under 2^31 elements): a 64-bit division costs several times a 32-bit one,
// and with 9 multiply-adds an output the index arithmetic would otherwise decide the speed.
struct Geometry {
  int n, c, h, w, k, stride, pad, oh, ow;
  explicit Geometry(const ConvShape& s)
      : n(int(s.n)), c(int(s.c)), h(int(s.h)), w(int(s.w)), k(int(s.k)), stride(int(s.stride)), pad(int(s.pad)),
        oh(int(s.out_h())), ow(int(s.out_w())) {}
  __host__ __device__ int pixels() const { return n * oh * ow; }
  // Element (n, c, y, x) of the input, and (n, k, y, x) of the output, in either layout.
  __host__ __device__ int in_at(bool nhwc, int b, int ch, int y, int x, int channels) const {
    return nhwc ? ((b * h + y) * w + x) * channels + ch : ((b * channels + ch) * h + y) * w + x;
  }
  __host__ __device__ int out_at(bool nhwc, int b, int ch, int y, int x) const {
    return nhwc ? ((b * oh + y) * ow + x) * k + ch : ((b * k + ch) * oh + y) * ow + x;
  }
};

// Filter element (k, c, ry, rx): [K, R, S, C] in NHWC networks, [K, C, R, S] in NCHW ones.
__host__ __device__ inline int filter_at(bool nhwc, int k, int c, int ry, int rx, int ch) {
  return nhwc ? ((k * kR + ry) * kR + rx) * ch + c : ((k * ch + c) * kR + ry) * kR + rx;
}

// The input window of output pixel (b, oy, ox), tap by tap as [c][ry][rx], zeros outside.
template <class T, int C>
__device__ inline void load_window(const T* x, const Geometry& s, bool nhwc, int b, int oy, int ox, float* v) {
  UNROLL for (int c = 0; c < C; ++c)
    UNROLL for (int ry = 0; ry < kR; ++ry)
      UNROLL for (int rx = 0; rx < kR; ++rx) {
        const int iy = oy * s.stride - s.pad + ry, ix = ox * s.stride - s.pad + rx;
        v[(c * kR + ry) * kR + rx] = iy >= 0 && iy < s.h && ix >= 0 && ix < s.w ? ld(x, s.in_at(nhwc, b, c, iy, ix, C)) : 0.f;
      }
}

// G adjacent elements of an array of T at p (G * sizeof(T) a multiple of 16, p 16-byte aligned
// when `packed`): 16-byte loads and stores then, one element at a time otherwise. Adjacent threads
// reading or writing adjacent groups one element at a time would touch every 32-byte sector of
// memory G times.
template <int G, class T>
__device__ inline void load_group(const T* p, bool packed, float* out) {
  constexpr int kPer = Pack<T>::kSize;
  if constexpr (G % kPer == 0) {
    if (packed) {
      UNROLL for (int q = 0; q < G / kPer; ++q) {
        const Pack<T> v = reinterpret_cast<const Pack<T>*>(p)[q];
        UNROLL for (int e = 0; e < kPer; ++e) out[q * kPer + e] = ld(v.e, e);
      }
      return;
    }
  }
  UNROLL for (int j = 0; j < G; ++j) out[j] = ld(p, j);
}
template <int G, class T>
__device__ inline void store_group(T* p, bool packed, const float* in) {
  constexpr int kPer = Pack<T>::kSize;
  if constexpr (G % kPer == 0) {
    if (packed) {
      UNROLL for (int q = 0; q < G / kPer; ++q) {
        Pack<T> v;
        UNROLL for (int e = 0; e < kPer; ++e) st(v.e, e, in[q * kPer + e]);
        reinterpret_cast<Pack<T>*>(p)[q] = v;
      }
      return;
    }
  }
  UNROLL for (int j = 0; j < G; ++j) st(p, j, in[j]);
}

// A thread computes G adjacent output channels of one pixel from one load of its input window;
// the filters wait in shared memory as [k][c][ry][rx] in fp32. In NHWC a pixel's channel groups
// go to adjacent threads (their stores are adjacent), in NCHW a group's pixels do.
template <class T, int C, int G>
__global__ void forward_k(const T* x, const T* w, T* y, Geometry s, bool nhwc, bool packed) {
  constexpr int kTaps = C * kR * kR;
  __shared__ float ws[kMaxK * kTaps];
  for (int i = int(threadIdx.x); i < s.k * kTaps; i += int(blockDim.x)) {
    const int k = i / kTaps, tap = i % kTaps;
    ws[i] = ld(w, filter_at(nhwc, k, tap / (kR * kR), tap / kR % kR, tap % kR, C));
  }
  __syncthreads();
  const int groups = s.k / G, pixels = s.pixels(), ohw = s.oh * s.ow;
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < pixels * groups; i += int(gridDim.x * blockDim.x)) {
    const int g = nhwc ? i % groups : i / pixels, p = nhwc ? i / groups : i % pixels;
    const int b = p / ohw, oy = p % ohw / s.ow, ox = p % s.ow;
    float v[kTaps], out[G];
    load_window<T, C>(x, s, nhwc, b, oy, ox, v);
    UNROLL for (int j = 0; j < G; ++j) {
      const float* wk = ws + (g * G + j) * kTaps;
      float acc = 0;
      UNROLL for (int t = 0; t < kTaps; ++t) acc += v[t] * wk[t];
      out[j] = acc;
    }
    if (nhwc) {
      store_group<G>(y + s.out_at(true, b, g * G, oy, ox), packed, out);
    } else {
      UNROLL for (int j = 0; j < G; ++j) st(y, s.out_at(false, b, g * G + j, oy, ox), out[j]);
    }
  }
}

// Partial sums of the weight gradient. Block b takes the b-th even share of the N * OH * OW
// output pixels. Its threads cover the K channels in groups of G, `lanes` = kThreads / (K / G)
// times over, each lane every lanes-th pixel of the share: for a pixel it loads the output
// gradient of its G channels (in flight together) and the input window once, and adds their
// G x taps products. The lanes' sums of a group then meet: across a warp by shuffles, across the
// block's warps one warp after another, in a fixed order; partial[b][k][tap] gets the block's.
// The channel groups of a pixel are adjacent threads in NHWC (dy's channels of a pixel are
// adjacent), the lanes of a group in NCHW (a channel's pixels are). K / G is a power of two.
template <class T, int C, int G>
__global__ void partial_k(const T* x, const T* dy, float* partial, Geometry s, bool nhwc, bool packed) {
  constexpr int kTaps = C * kR * kR, kWarps = kThreads / 32;
  __shared__ float red[kMaxK * kTaps];  // [k][tap]
  const int t = int(threadIdx.x), groups = s.k / G, lanes = kThreads / groups;
  const int g = nhwc ? t % groups : t / lanes, lane = nhwc ? t / groups : t % lanes;
  const int pixels = s.pixels(), ohw = s.oh * s.ow;
  const int per = (pixels + int(gridDim.x) - 1) / int(gridDim.x), first = int(blockIdx.x) * per;
  const int last = first + per < pixels ? first + per : pixels;
  float acc[G][kTaps] = {};
  for (int m = first + lane; m < last; m += lanes) {
    const int b = m / ohw, oy = m % ohw / s.ow, ox = m % s.ow;
    float d[G], v[kTaps];
    // The output gradient's loads first, all of them: one at a time keeps too little in flight.
    if (nhwc) {
      load_group<G>(dy + s.out_at(true, b, g * G, oy, ox), packed, d);
    } else {
      UNROLL for (int j = 0; j < G; ++j) d[j] = ld(dy, s.out_at(false, b, g * G + j, oy, ox));
    }
    load_window<T, C>(x, s, nhwc, b, oy, ox, v);
    UNROLL for (int j = 0; j < G; ++j)
      UNROLL for (int q = 0; q < kTaps; ++q) acc[j][q] += d[j] * v[q];
  }
  // Within a warp the threads of a group are `stride` apart, `count` of them (both powers of two).
  const int stride = nhwc ? groups : 1, count = nhwc ? (groups < 32 ? 32 / groups : 1) : (lanes < 32 ? lanes : 32);
  for (int off = stride * count / 2; off >= stride; off /= 2)
    UNROLL for (int j = 0; j < G; ++j)
      UNROLL for (int q = 0; q < kTaps; ++q) acc[j][q] += __shfl_down_sync(0xffffffffu, acc[j][q], off);
  const bool holds = nhwc ? t % 32 < groups : t % 32 % count == 0;  // its warp's sums for group g
  for (int i = t; i < s.k * kTaps; i += int(blockDim.x)) red[i] = 0;
  __syncthreads();
  for (int warp = 0; warp < kWarps; ++warp) {
    if (t / 32 == warp && holds)
      UNROLL for (int j = 0; j < G; ++j)
        UNROLL for (int q = 0; q < kTaps; ++q) red[(g * G + j) * kTaps + q] += acc[j][q];
    __syncthreads();
  }
  for (int i = t; i < s.k * kTaps; i += int(blockDim.x)) partial[int64_t(blockIdx.x) * s.k * kTaps + i] = red[i];
}

// dw[k][tap] = the blocks' partial sums, added by a block of its own in a fixed order (each
// thread every kThreads-th block's, then a tree over the threads), stored in w's layout.
template <class T, int C>
__global__ void finish_k(const float* partial, int blocks, T* dw, int64_t K, bool nhwc) {
  constexpr int kTaps = C * kR * kR;
  __shared__ float sum[kThreads];
  const int64_t q = blockIdx.x;  // k * kTaps + tap
  float v = 0;
  for (int b = int(threadIdx.x); b < blocks; b += int(blockDim.x)) v += partial[int64_t(b) * K * kTaps + q];
  sum[threadIdx.x] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) sum[threadIdx.x] += sum[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const int k = int(q / kTaps), tap = int(q % kTaps);
    st(dw, filter_at(nhwc, k, tap / (kR * kR), tap / kR % kR, tap % kR, C), sum[0]);
  }
}

// Channels a thread takes: the forward pass G = 8 where they divide K; the weight gradient 8 of
// one input channel's (8 x 9 sums a thread) and 2 of three's (2 x 27), fewer where K is smaller.
int forward_group(const ConvShape& s) { return s.k % 8 == 0 ? 8 : 1; }
int grad_group(const ConvShape& s) { return int(std::min<int64_t>(s.c == 1 ? 8 : 2, s.k)); }

// Blocks of partial sums: about 8 pixels a lane each, at most 1024 (several per SM on any GPU,
// and 1024 * K * taps floats of workspace at most).
int partial_blocks(const ConvShape& s) {
  const int64_t lanes = kThreads / (s.k / grad_group(s)), pixels = s.n * s.out_h() * s.out_w();
  return int(std::clamp<int64_t>((pixels + lanes * 8 - 1) / (lanes * 8), 1, 1024));
}

int64_t taps(const ConvShape& s) { return s.c * kR * kR; }

}  // namespace

bool small_conv_fits(const ConvShape& s) {
  const bool power_of_two = s.k >= 1 && (s.k & (s.k - 1)) == 0;  // the weight gradient's lanes meet by halves
  const int64_t limit = int64_t(1) << 31;
  return (s.c == 1 || s.c == 3) && s.r == kR && power_of_two && s.k <= kMaxK && s.stride >= 1 && s.pad >= 0 && s.out_h() >= 1 &&
         s.out_w() >= 1 && s.n * s.c * s.h * s.w < limit && s.n * s.k * s.out_h() * s.out_w() < limit;
}

size_t small_conv_workspace(const ConvShape& s) { return size_t(partial_blocks(s)) * size_t(s.k * taps(s)) * sizeof(float); }

void small_conv_forward(DType t, bool nhwc, const ConvShape& s, const void* x, const void* w, void* y, cudaStream_t st) {
  const int G = forward_group(s);
  const unsigned blocks = blocks_for(s.n * s.out_h() * s.out_w() * (s.k / G));
  const bool packed = aligned16({y});
  const Geometry geo(s);
#define DLPERF_FORWARD(C, G) \
  DISPATCH(t, LAUNCH(blocks, kThreads, 0, st, forward_k<T, C, G>)(static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), geo, nhwc, packed))
  if (s.c == 1 && G == 8) DLPERF_FORWARD(1, 8)
  else if (s.c == 1) DLPERF_FORWARD(1, 1)
  else if (G == 8) DLPERF_FORWARD(3, 8)
  else DLPERF_FORWARD(3, 1)
#undef DLPERF_FORWARD
}

void small_conv_weight_grad(DType t, bool nhwc, const ConvShape& s, const void* x, const void* dy, void* dw, void* partial,
                            cudaStream_t st) {
  const int blocks = partial_blocks(s), G = grad_group(s);
  float* sums = static_cast<float*>(partial);
  const unsigned outputs = unsigned(s.k * taps(s));
  const bool packed = aligned16({dy});
  const Geometry geo(s);
#define DLPERF_PARTIAL(C, G)                                                                                          \
  DISPATCH(t, LAUNCH(unsigned(blocks), kThreads, 0, st, partial_k<T, C, G>)(static_cast<const T*>(x), static_cast<const T*>(dy), \
                                                                            sums, geo, nhwc, packed))
  if (s.c == 1 && G == 8) DLPERF_PARTIAL(1, 8)
  else if (s.c == 1 && G == 4) DLPERF_PARTIAL(1, 4)
  else if (s.c == 1 && G == 2) DLPERF_PARTIAL(1, 2)
  else if (s.c == 1) DLPERF_PARTIAL(1, 1)
  else if (G == 2) DLPERF_PARTIAL(3, 2)
  else DLPERF_PARTIAL(3, 1)
#undef DLPERF_PARTIAL
  if (s.c == 1) DISPATCH(t, LAUNCH(outputs, kThreads, 0, st, finish_k<T, 1>)(sums, blocks, static_cast<T*>(dw), s.k, nhwc))
  else DISPATCH(t, LAUNCH(outputs, kThreads, 0, st, finish_k<T, 3>)(sums, blocks, static_cast<T*>(dw), s.k, nhwc))
}

}  // namespace dlperf::cuda
