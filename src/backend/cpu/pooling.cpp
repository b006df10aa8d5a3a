// maxpool2d, avgpool2d (padding counted, PyTorch's default) and global average pooling.
//
// Pooling writes the data type it reads (fp32, or bf16 between a bf16 network's convolutions).
// Max pooling is own code for the fp32 layouts the network keeps activations in (nChw8c and
// nChw16c blocks, and nhwc): oneDNN 2.6's training-mode max pooling (the one that records argmax)
// ran at about 2-3 GB/s on the benchmark machine, several times slower than a plain loop over the
// channel vectors (see docs/benchmarks.md). Average pooling and other layouts go to oneDNN.
//
// The nChw16c blocks of AVX-512 CPUs are the exception: there oneDNN's AVX-512 kernel was as fast
// as this code forward and 20% faster backward on a Zen 4 EPYC (2026-11-22, medium at batch 64),
// and on a Zen 5 (2026-11-24) this code, taking nChw16c as two vectors of 8, ran 1.5-1.8x slower
// forward and 1.1x backward. On an Intel Xeon (family 6 model 207, 2026-11-28) the same oneDNN
// kernel ran 4-15x slower than this code's AVX-512 one below (medium's pool1 at batch 64: 0.89
// against 0.21 ms forward, 0.71 against 0.28 backward, warm), though oneDNN's inference pooling
// there, which stores no argmax, ran at this code's speed. So for nChw16c the engine times both
// once per process and keeps oneDNN's unless it is clearly slower (max_pool_16c_choice). Where
// it runs, it also takes a bf16 network's nChw16c pooling (2x2 windows at stride 2): oneDNN's bf16
// kernel was as slow there (medium at batch 64 in bf16: 4.5 ms of pooling a step against 0.8).
// A bf16 network on AMX keeps its activations in nhwc (conv2d.cpp); there the same 16-lane code
// takes 2x2 windows over whole vectors of 16 channels, always: on a Xeon with AMX (2026-11-29)
// oneDNN's nhwc bf16 pooling took `medium`'s pool2 at batch 64 0.32 ms forward and 0.38 backward
// a step, this code 0.05 and 0.07 (`dlperf profile --precision bf16`).
#include <fmt/format.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>
#include <tuple>

#include "backend/cpu/ops.h"
#include "bench/machine_profile.h"
#include "core/error.h"

namespace dlperf::cpu {

namespace {
using namespace dnnl;

// A pooling window: kernel, stride and padding, the same in both dimensions unless kernel is
// the whole plane (global average pooling).
struct Window {
  algorithm alg;
  int64_t kh, kw, stride, pad;
};
Window window_of(ops::OpKind kind, const ops::OpAttrs& a, const Dims& x) {
  switch (kind) {
    case ops::OpKind::maxpool2d: return {algorithm::pooling_max, a.kernel, a.kernel, a.stride, a.padding};
    case ops::OpKind::avgpool2d: return {algorithm::pooling_avg_include_padding, a.kernel, a.kernel, a.stride, a.padding};
    default: return {algorithm::pooling_avg_exclude_padding, x[2], x[3], 1, 0};  // one window over the whole plane
  }
}

// oneDNN's pooling passes.
struct PoolPasses {
  pooling_forward::primitive_desc fwd;
  pooling_backward::primitive_desc bwd;
  PoolPasses(const Window& w, const md& src, const Dims& x) {
    const Dims y = {x[0], x[1], ops::window_out(x[2], w.kh, w.stride, w.pad), ops::window_out(x[3], w.kw, w.stride, w.pad)};
    const memory::dims strides{w.stride, w.stride}, kernel{w.kh, w.kw}, padding{w.pad, w.pad};
    fwd = pooling_forward::primitive_desc(pooling_forward::desc(prop_kind::forward_training, w.alg, src,
                                                                with_type(any_md(y), src.data_type()), strides, kernel, padding, padding),
                                          default_attr(), engine());
    bwd = pooling_backward::primitive_desc(pooling_backward::desc(w.alg, src, fwd.dst_desc(), strides, kernel, padding, padding),
                                           default_attr(), engine(), fwd);
  }
};

class Pool final : public Op {
 public:
  Pool(const Window& w, const md& src, const Dims& x) : src_(src) {
    const PoolPasses p(w, src, x);
    fwd_pd_ = p.fwd;
    fwd_ = Prim::of<pooling_forward>(p.fwd);
    bwd_ = Prim::of<pooling_backward>(p.bwd);
    if (w.alg == algorithm::pooling_max) workspace_ = Mem(p.fwd.workspace_desc(), MemCategory::activations);
  }
  md input_md(int) const override { return src_; }
  md output_md() const override { return fwd_pd_.dst_desc(); }
  void forward(const std::vector<memory>& in, const memory& out, bool) override {
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, in[0]}, {DNNL_ARG_DST, out}};
    if (!workspace_.empty()) args.emplace(DNNL_ARG_WORKSPACE, workspace_.mem);
    run(fwd_, std::move(args));
  }
  void backward(const std::vector<memory>&, const memory&, const memory& diff_out,
                const std::vector<memory>& diff_in) override {
    std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, diff_out}, {DNNL_ARG_DIFF_SRC, diff_in[0]}};
    if (!workspace_.empty()) args.emplace(DNNL_ARG_WORKSPACE, workspace_.mem);
    run(bwd_, std::move(args));
  }

 private:
  md src_;
  pooling_forward::primitive_desc fwd_pd_;
  Prim fwd_, bwd_;
  Mem workspace_;
};

// A layout whose innermost dimension is a run of `V` channels: nChw8c or nChw16c (V = 8 or 16,
// channels in blocks) or nhwc (V = C, one block), in fp32; in bf16, nChw16c, or nhwc with whole
// vectors of 16 channels (only the 2x2 16-lane code takes bf16). Strides are in elements.
struct ChannelVectors {
  int64_t V = 0, blocks = 0, sn = 0, sb = 0, sh = 0, sw = 0;
  dt type = dt::f32;
  bool blocked() const { return sb != 0; }
  static bool of(const md& m, const Dims& d, ChannelVectors& out) {
    const int64_t C = d[1], H = d[2], W = d[3];
    for (const auto& [V, t, type] : {std::tuple{int64_t(8), tag::nChw8c, dt::f32}, std::tuple{int64_t(16), tag::nChw16c, dt::f32},
                                     std::tuple{int64_t(16), tag::nChw16c, dt::bf16}})
      if (m == md(to_dnnl(d), type, t)) {
        const int64_t blocks = (C + V - 1) / V;
        out = {V, blocks, blocks * H * W * V, H * W * V, W * V, V, type};
        return true;
      }
    for (const dt type : {dt::f32, dt::bf16})
      if (m == md(to_dnnl(d), type, tag::nhwc) && (type == dt::f32 || C % 16 == 0)) {
        out = {C, 1, H * W * C, 0, W * C, C, type};
        return true;
      }
    return false;
  }
};

// Window geometry of one max pooling, passed by value to the plane kernels so that the
// compiler keeps it in registers (stores through float* could alias an object's members).
struct PoolGeometry {
  int64_t H, W, P, Q, k, s, pad;
  ChannelVectors in, out;
};

// Max of 8 lanes over one window; `pos` gets the window position (r * k + t) of each max.
// AVX2 when the compiler targets it, else a loop. Strict '>' keeps the first max, like PyTorch.
inline void max8(const float* __restrict xp, const PoolGeometry& g, int64_t p, int64_t q, float* best_out,
                 float* pos_out) {
#ifdef __AVX2__
  __m256 best = _mm256_set1_ps(-std::numeric_limits<float>::infinity()), pos = _mm256_setzero_ps();
#else
  float best[8], pos[8];
  for (int v = 0; v < 8; ++v) best[v] = -std::numeric_limits<float>::infinity(), pos[v] = 0;
#endif
  for (int64_t r = 0; r < g.k; ++r) {
    const int64_t h = p * g.s - g.pad + r;
    if (h < 0 || h >= g.H) continue;
    for (int64_t t = 0; t < g.k; ++t) {
      const int64_t w = q * g.s - g.pad + t;
      if (w < 0 || w >= g.W) continue;
      const float* xi = xp + h * g.in.sh + w * g.in.sw;
#ifdef __AVX2__
      const __m256 x = _mm256_loadu_ps(xi);
      const __m256 more = _mm256_cmp_ps(x, best, _CMP_GT_OQ);
      best = _mm256_blendv_ps(best, x, more);
      pos = _mm256_blendv_ps(pos, _mm256_set1_ps(float(r * g.k + t)), more);
#else
      for (int v = 0; v < 8; ++v)
        if (xi[v] > best[v]) best[v] = xi[v], pos[v] = float(r * g.k + t);
#endif
    }
  }
#ifdef __AVX2__
  _mm256_storeu_ps(best_out, best);
  _mm256_storeu_ps(pos_out, pos);
#else
  std::copy_n(best, 8, best_out);
  std::copy_n(pos, 8, pos_out);
#endif
}

// One (image, channel block) plane.
void max_forward_plane(const float* __restrict x, float* __restrict y, uint8_t* __restrict argmax,
                       const PoolGeometry g, int64_t n, int64_t b) {
  const float* xp = x + n * g.in.sn + b * g.in.sb;
  float best[8], pos[8];
  for (int64_t p = 0; p < g.P; ++p)
    for (int64_t q = 0; q < g.Q; ++q) {
      const int64_t o = n * g.out.sn + b * g.out.sb + p * g.out.sh + q * g.out.sw;
      for (int64_t v0 = 0; v0 < g.in.V; v0 += 8) {
        const int64_t lanes = std::min<int64_t>(8, g.in.V - v0);
        if (lanes == 8) {
          max8(xp + v0, g, p, q, best, pos);
        } else {  // the last lanes of an nhwc row whose channels are not a multiple of 8
          for (int v = 0; v < 8; ++v) best[v] = -std::numeric_limits<float>::infinity(), pos[v] = 0;
          for (int64_t r = 0; r < g.k; ++r)
            for (int64_t t = 0; t < g.k; ++t) {
              const int64_t h = p * g.s - g.pad + r, w = q * g.s - g.pad + t;
              if (h < 0 || h >= g.H || w < 0 || w >= g.W) continue;
              const float* xi = xp + h * g.in.sh + w * g.in.sw + v0;
              for (int64_t v = 0; v < lanes; ++v)
                if (xi[v] > best[v]) best[v] = xi[v], pos[v] = float(r * g.k + t);
            }
        }
        for (int64_t v = 0; v < lanes; ++v) y[o + v0 + v] = best[v], argmax[o + v0 + v] = uint8_t(pos[v]);
      }
    }
}

// 2x2 windows at stride 2 without padding, every preset's max pooling, with the channels in
// whole vectors of 8. Each window lies inside the plane (no bounds checks) and each input
// element in at most one window, so backward writes every dx element once (the max's gradient
// or 0) instead of zeroing the plane and adding into it. Measured on small at batch 256 (the
// profile's pool rows): see docs/benchmarks.md.
// 2x2 windows at stride 2: an odd last row or column of a plane lies in no window, so its
// gradient is 0 (the backward passes below write every other element once).
template <class T>
void zero_rows_and_columns_outside_windows(T* plane, const PoolGeometry& g) {
  for (int64_t h = 2 * g.P; h < g.H; ++h)
    for (int64_t w = 0; w < g.W; ++w) std::memset(plane + h * g.in.sh + w * g.in.sw, 0, size_t(g.in.V) * sizeof(T));
  for (int64_t w = 2 * g.Q; w < g.W; ++w)
    for (int64_t h = 0; h < 2 * g.P; ++h) std::memset(plane + h * g.in.sh + w * g.in.sw, 0, size_t(g.in.V) * sizeof(T));
}

#ifdef __AVX2__
// 8 window positions as 8 bytes at `out`.
inline void store_positions(__m256 pos, uint8_t* out) {
  const __m256i i = _mm256_cvttps_epi32(pos);
  const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(words, words));
}

void max_forward_plane_2x2(const float* __restrict x, float* __restrict y, uint8_t* __restrict argmax,
                           const PoolGeometry g, int64_t n, int64_t b) {
  const float* xp = x + n * g.in.sn + b * g.in.sb;
  const __m256 one = _mm256_set1_ps(1), two = _mm256_set1_ps(2), three = _mm256_set1_ps(3);
  for (int64_t p = 0; p < g.P; ++p)
    for (int64_t q = 0; q < g.Q; ++q) {
      const int64_t o = n * g.out.sn + b * g.out.sb + p * g.out.sh + q * g.out.sw;
      const float* corner = xp + 2 * p * g.in.sh + 2 * q * g.in.sw;
      for (int64_t v = 0; v < g.in.V; v += 8) {
        const float* c = corner + v;
        // Window positions 0 1 / 2 3 in scan order; strict '>' keeps the first max, like PyTorch.
        __m256 best = _mm256_loadu_ps(c), pos = _mm256_setzero_ps();
        const __m256 x1 = _mm256_loadu_ps(c + g.in.sw), x2 = _mm256_loadu_ps(c + g.in.sh),
                     x3 = _mm256_loadu_ps(c + g.in.sh + g.in.sw);
        __m256 more = _mm256_cmp_ps(x1, best, _CMP_GT_OQ);
        best = _mm256_blendv_ps(best, x1, more), pos = _mm256_blendv_ps(pos, one, more);
        more = _mm256_cmp_ps(x2, best, _CMP_GT_OQ);
        best = _mm256_blendv_ps(best, x2, more), pos = _mm256_blendv_ps(pos, two, more);
        more = _mm256_cmp_ps(x3, best, _CMP_GT_OQ);
        best = _mm256_blendv_ps(best, x3, more), pos = _mm256_blendv_ps(pos, three, more);
        _mm256_storeu_ps(y + o + v, best);
        store_positions(pos, argmax + o + v);
      }
    }
}

void max_backward_plane_2x2(const float* __restrict dy, float* __restrict dx, const uint8_t* __restrict argmax,
                            const PoolGeometry g, int64_t n, int64_t b) {
  float* plane = dx + n * g.in.sn + b * g.in.sb;
  zero_rows_and_columns_outside_windows(plane, g);
  const __m256 zero = _mm256_setzero_ps();
  const int64_t where[4] = {0, g.in.sw, g.in.sh, g.in.sh + g.in.sw};  // window positions 0 1 / 2 3
  for (int64_t p = 0; p < g.P; ++p)
    for (int64_t q = 0; q < g.Q; ++q) {
      const int64_t o = n * g.out.sn + b * g.out.sb + p * g.out.sh + q * g.out.sw;
      float* corner = plane + 2 * p * g.in.sh + 2 * q * g.in.sw;
      for (int64_t v = 0; v < g.in.V; v += 8) {
        const __m256 d = _mm256_loadu_ps(dy + o + v);
        const __m256i at = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(argmax + o + v)));
        float* c = corner + v;
        for (int k = 0; k < 4; ++k) {
          const __m256 here = _mm256_castsi256_ps(_mm256_cmpeq_epi32(at, _mm256_set1_epi32(k)));
          _mm256_storeu_ps(c + where[k], _mm256_blendv_ps(zero, d, here));
        }
      }
    }
}
#endif

#ifdef __AVX512F__
// The same for whole vectors of 16 channels (nChw16c), on AVX-512's 16 lanes: the compares give
// masks, and a masked move takes the new max and its position. In fp32, or in bf16 between a
// bf16 network's convolutions: 16 bf16 values widen exactly to fp32 (their bits moved up), and
// a max or a gradient narrows back exactly (it was a bf16 value), so both compute the same.
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline void store16(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
// The maskz forms because GCC 12's plain ones warn of an undefined register they start from.
inline __m512 load16(const uint16_t* p) {
  const __m512i wide = _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, wide, 16));
}
inline void store16(uint16_t* p, __m512 v) {
  const __m512i bits = _mm512_maskz_srli_epi32(0xffff, _mm512_castps_si512(v), 16);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_maskz_cvtepi32_epi16(0xffff, bits));
}

template <class T>
void max_forward_plane_2x2_16(const T* __restrict x, T* __restrict y, uint8_t* __restrict argmax, const PoolGeometry g,
                              int64_t n, int64_t b) {
  const T* xp = x + n * g.in.sn + b * g.in.sb;
  const __m512i one = _mm512_set1_epi32(1), two = _mm512_set1_epi32(2), three = _mm512_set1_epi32(3);
  for (int64_t p = 0; p < g.P; ++p)
    for (int64_t q = 0; q < g.Q; ++q) {
      const int64_t o = n * g.out.sn + b * g.out.sb + p * g.out.sh + q * g.out.sw;
      const T* corner = xp + 2 * p * g.in.sh + 2 * q * g.in.sw;
      for (int64_t v = 0; v < g.in.V; v += 16) {
        const T* c = corner + v;
        __m512 best = load16(c);  // window positions 0 1 / 2 3; strict '>' keeps the first max
        __m512i pos = _mm512_setzero_si512();
        const __m512 x1 = load16(c + g.in.sw), x2 = load16(c + g.in.sh), x3 = load16(c + g.in.sh + g.in.sw);
        __mmask16 more = _mm512_cmp_ps_mask(x1, best, _CMP_GT_OQ);
        best = _mm512_mask_mov_ps(best, more, x1), pos = _mm512_mask_mov_epi32(pos, more, one);
        more = _mm512_cmp_ps_mask(x2, best, _CMP_GT_OQ);
        best = _mm512_mask_mov_ps(best, more, x2), pos = _mm512_mask_mov_epi32(pos, more, two);
        more = _mm512_cmp_ps_mask(x3, best, _CMP_GT_OQ);
        best = _mm512_mask_mov_ps(best, more, x3), pos = _mm512_mask_mov_epi32(pos, more, three);
        store16(y + o + v, best);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(argmax + o + v), _mm512_maskz_cvtepi32_epi8(0xffff, pos));
      }
    }
}

template <class T>
void max_backward_plane_2x2_16(const T* __restrict dy, T* __restrict dx, const uint8_t* __restrict argmax, const PoolGeometry g,
                               int64_t n, int64_t b) {
  T* plane = dx + n * g.in.sn + b * g.in.sb;
  zero_rows_and_columns_outside_windows(plane, g);
  const int64_t where[4] = {0, g.in.sw, g.in.sh, g.in.sh + g.in.sw};
  for (int64_t p = 0; p < g.P; ++p)
    for (int64_t q = 0; q < g.Q; ++q) {
      const int64_t o = n * g.out.sn + b * g.out.sb + p * g.out.sh + q * g.out.sw;
      T* corner = plane + 2 * p * g.in.sh + 2 * q * g.in.sw;
      for (int64_t v = 0; v < g.in.V; v += 16) {
        const __m512 d = load16(dy + o + v);
        const __m512i at = _mm512_maskz_cvtepu8_epi32(0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(argmax + o + v)));
        for (int k = 0; k < 4; ++k)
          store16(corner + v + where[k], _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(at, _mm512_set1_epi32(k)), d));
      }
    }
}
#endif

// `offset[pos]` is where window position pos lies relative to the window's corner (a table,
// so that no division decodes it).
void max_backward_plane(const float* __restrict dy, float* __restrict dx, const uint8_t* __restrict argmax,
                        const int64_t* __restrict offset, const PoolGeometry g, int64_t n, int64_t b) {
  float* plane = dx + n * g.in.sn + b * g.in.sb;
  std::memset(plane, 0, size_t(g.in.sb == 0 ? g.in.sn : g.in.sb) * sizeof(float));
  for (int64_t p = 0; p < g.P; ++p)
    for (int64_t q = 0; q < g.Q; ++q) {
      const int64_t o = n * g.out.sn + b * g.out.sb + p * g.out.sh + q * g.out.sw;
      float* corner = plane + (p * g.s - g.pad) * g.in.sh + (q * g.s - g.pad) * g.in.sw;
      for (int64_t v = 0; v < g.in.V; ++v) corner[offset[argmax[o + v]] + v] += dy[o + v];
    }
}

// Runs plane(n, b) for every (image, channel block) plane, in parallel. Only whole planes go to
// threads: in backward, overlapping windows of one plane add into the same input element.
template <class Plane>
void each_plane(int64_t images, int64_t blocks, Plane plane) {
  const int64_t planes = images * blocks;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < planes; ++i) plane(i / blocks, i % blocks);
}

class MaxPool final : public Op {
 public:
  // It writes the layout it reads.
  static md output_md(const Dims& x, const ops::OpAttrs& a, const ChannelVectors& in) {
    const Dims y = {x[0], x[1], ops::window_out(x[2], a.kernel, a.stride, a.padding),
                    ops::window_out(x[3], a.kernel, a.stride, a.padding)};
    return md(to_dnnl(y), in.type, !in.blocked() ? tag::nhwc : in.V == 8 ? tag::nChw8c : tag::nChw16c);
  }
  MaxPool(const md& src, const Dims& x, const ops::OpAttrs& a, const ChannelVectors& in)
      : src_(src), dst_(output_md(x, a, in)), n_(x[0]) {
    const Dims y = {x[0], x[1], ops::window_out(x[2], a.kernel, a.stride, a.padding),
                    ops::window_out(x[3], a.kernel, a.stride, a.padding)};
    g_ = {x[2], x[3], y[2], y[3], a.kernel, a.stride, a.padding, in, {}};
#ifdef __AVX2__
    two_by_two_ = ops::pools_2x2_stride_2(a) && in.V % 8 == 0;  // its code takes whole vectors of 8 channels
#endif
#ifdef __AVX512F__
    two_by_two_16_ = ops::pools_2x2_stride_2(a) && in.V % 16 == 0;  // or of 16
#endif
    ChannelVectors::of(dst_, y, g_.out);
    argmax_ = make_buffer(argmax_bytes(dst_), MemCategory::activations);
    for (int64_t r = 0; r < a.kernel; ++r)
      for (int64_t t = 0; t < a.kernel; ++t) offset_.push_back(r * in.sh + t * in.sw);
  }
  md input_md(int) const override { return src_; }
  md output_md() const override { return dst_; }

  /// A byte an output element: its window position.
  static size_t argmax_bytes(const md& dst) { return dst.get_size() / (dst.data_type() == dt::bf16 ? 2 : 4); }

  void forward(const std::vector<memory>& in, const memory& out, bool) override {
    const PoolGeometry g = g_;
    uint8_t* am = static_cast<uint8_t*>(argmax_->data());
    const auto scope = profile::Scope::launch(profile::Phase::forward);  // a pass as a primitive's is
#ifdef __AVX512F__
    if (g.in.type == dt::bf16) {  // only the 2x2 16-lane code takes bf16 (runs_own_max_pool)
      const auto* x = static_cast<const uint16_t*>(in[0].get_data_handle());
      auto* y = static_cast<uint16_t*>(out.get_data_handle());
      return each_plane(n_, g.in.blocks, [&](int64_t n, int64_t b) { max_forward_plane_2x2_16(x, y, am, g, n, b); });
    }
#endif
    const float* x = static_cast<const float*>(in[0].get_data_handle());
    float* y = static_cast<float*>(out.get_data_handle());
#ifdef __AVX512F__
    if (two_by_two_16_)
      return each_plane(n_, g.in.blocks, [&](int64_t n, int64_t b) { max_forward_plane_2x2_16(x, y, am, g, n, b); });
#endif
#ifdef __AVX2__
    if (two_by_two_)
      return each_plane(n_, g.in.blocks, [&](int64_t n, int64_t b) { max_forward_plane_2x2(x, y, am, g, n, b); });
#endif
    each_plane(n_, g.in.blocks, [&](int64_t n, int64_t b) { max_forward_plane(x, y, am, g, n, b); });
  }

  void backward(const std::vector<memory>&, const memory&, const memory& diff_out,
                const std::vector<memory>& diff_in) override {
    const PoolGeometry g = g_;
    const uint8_t* am = static_cast<const uint8_t*>(argmax_->data());
    const int64_t* off = offset_.data();
    const auto scope = profile::Scope::launch(profile::Phase::backward_data);  // filed as oneDNN's pooling is
#ifdef __AVX512F__
    if (g.in.type == dt::bf16) {
      const auto* dy = static_cast<const uint16_t*>(diff_out.get_data_handle());
      auto* dx = static_cast<uint16_t*>(diff_in[0].get_data_handle());
      return each_plane(n_, g.in.blocks, [&](int64_t n, int64_t b) { max_backward_plane_2x2_16(dy, dx, am, g, n, b); });
    }
#endif
    const float* dy = static_cast<const float*>(diff_out.get_data_handle());
    float* dx = static_cast<float*>(diff_in[0].get_data_handle());
#ifdef __AVX512F__
    if (two_by_two_16_)
      return each_plane(n_, g.in.blocks, [&](int64_t n, int64_t b) { max_backward_plane_2x2_16(dy, dx, am, g, n, b); });
#endif
#ifdef __AVX2__
    if (two_by_two_)
      return each_plane(n_, g.in.blocks, [&](int64_t n, int64_t b) { max_backward_plane_2x2(dy, dx, am, g, n, b); });
#endif
    each_plane(n_, g.in.blocks, [&](int64_t n, int64_t b) { max_backward_plane(dy, dx, am, off, g, n, b); });
  }

 private:
  md src_, dst_;
  int64_t n_;
  PoolGeometry g_;
  bool two_by_two_ = false;     // the 2x2, stride 2 code runs (AVX2 builds)
  bool two_by_two_16_ = false;  // its 16-lane version does (AVX-512 builds)
  BufferPtr argmax_;  // kept for backward: counted as activations
  std::vector<int64_t> offset_;
};

std::optional<bool> forced_16c;  // for_tests_run_max_pool_16c

ChosenOnce<MaxPool16cChoice> the_choice;  // max_pool_16c_choice
}  // namespace

// dlperf's 2x2 max pooling against oneDNN's on nChw16c blocks, forward and backward, on 32
// images of 32 channels at 28x28 (medium's pool1 at batch 32: 3.2 MB in), with the engine's
// threads: the best of 5 undisturbed samples each (best_undisturbed_times), alternating. In
// buffers of its own, untracked, and no profiler sees it.
double time_max_pool_16c() {
  using namespace dnnl;
  const Dims x = {32, 32, 28, 28}, y = {32, 32, 14, 14};
  const md src(to_dnnl(x), dt::f32, tag::nChw16c), dst(to_dnnl(y), dt::f32, tag::nChw16c);
  const memory::dims two{2, 2}, none{0, 0};
  const auto fwd_pd = pooling_forward::primitive_desc(
      pooling_forward::desc(prop_kind::forward_training, algorithm::pooling_max, src, dst, two, two, none, none), engine());
  const auto bwd_pd = pooling_backward::primitive_desc(
      pooling_backward::desc(algorithm::pooling_max, src, dst, two, two, none, none), engine(), fwd_pd);
  const pooling_forward fwd(fwd_pd);
  const pooling_backward bwd(bwd_pd);
  memory in(src, engine()), out(dst, engine()), ws(fwd_pd.workspace_desc(), engine()), d_in(src, engine()), d_out(dst, engine());
  float* xs = static_cast<float*>(in.get_data_handle());
  for (size_t i = 0; i < floats_in(src); ++i) xs[i] = float((i * 7919) % 1001);  // few ties, no pattern a window sees
  std::fill_n(static_cast<float*>(d_out.get_data_handle()), floats_in(dst), 1.0f);
  std::vector<uint8_t> argmax(floats_in(dst));

  PoolGeometry g{28, 28, 14, 14, 2, 2, 0, {}, {}};
  ChannelVectors::of(src, x, g.in);
  ChannelVectors::of(dst, y, g.out);
  std::vector<std::function<void()>> passes = {[&] {
    fwd.execute(stream(), {{DNNL_ARG_SRC, in}, {DNNL_ARG_DST, out}, {DNNL_ARG_WORKSPACE, ws}});
    bwd.execute(stream(), {{DNNL_ARG_DIFF_DST, d_out}, {DNNL_ARG_DIFF_SRC, d_in}, {DNNL_ARG_WORKSPACE, ws}});
    stream().wait();
  }};
#ifdef __AVX512F__
  float* ys = static_cast<float*>(out.get_data_handle());
  const float* dys = static_cast<const float*>(d_out.get_data_handle());
  float* dxs = static_cast<float*>(d_in.get_data_handle());
  passes.push_back([&] {
    each_plane(x[0], g.in.blocks, [&](int64_t n, int64_t b) { max_forward_plane_2x2_16<float>(xs, ys, argmax.data(), g, n, b); });
    each_plane(x[0], g.in.blocks, [&](int64_t n, int64_t b) { max_backward_plane_2x2_16<float>(dys, dxs, argmax.data(), g, n, b); });
  });
#else
  return 0;  // no code of its own to time against (choose_max_pool_16c does not ask)
#endif
  const auto best = best_undisturbed_times(passes, 5, 20);
  return best ? (*best)[0] / (*best)[1] : kTooBusyToTime;
}

MaxPool16cChoice choose_max_pool_16c(std::string_view asked, bool own_code_built, const std::function<double()>& onednn_over_dlperf,
                                     std::string_view timed_by) {
  if (asked == "onednn") return {false, "oneDNN's (DLPERF_CPU_MAX_POOL=onednn)", 0};
  if (asked != "auto" && asked != "dlperf")
    throw Error(fmt::format("DLPERF_CPU_MAX_POOL={} is not a choice: use auto, dlperf or onednn (or unset it)", asked));
  if (!own_code_built) return {false, "oneDNN's (this build has no AVX-512 code of its own for nChw16c)", 0};
  if (asked == "dlperf") return {true, "dlperf's (DLPERF_CPU_MAX_POOL=dlperf)", 0};
  MaxPool16cChoice c;
  c.onednn_over_dlperf = onednn_over_dlperf();
  if (c.onednn_over_dlperf == kTooBusyToTime)
    return {false, "oneDNN's (other work held the CPUs while the two max poolings were timed, so neither time could be trusted: an "
                   "idle machine times them, or DLPERF_CPU_MAX_POOL=dlperf sets dlperf's)", 0};
  // Only where oneDNN's is clearly slower, so that machines where the two are close (the Zens)
  // keep one code from run to run, the one the AVX-512 fits' pooling figures were set on.
  c.own = c.onednn_over_dlperf > 1.25;
  c.why = fmt::format("{} (oneDNN's training max pooling timed {:.2f}x dlperf's here, forward and backward{}; dlperf's is "
                      "taken above 1.25x)",
                      c.own ? "dlperf's" : "oneDNN's", c.onednn_over_dlperf, timed_by.empty() ? "" : fmt::format(", {}", timed_by));
  return c;
}

const MaxPool16cChoice& max_pool_16c_choice() {
  return the_choice.get([] {
    const char* env = std::getenv("DLPERF_CPU_MAX_POOL");
#ifdef __AVX512F__
    const bool built = true;
#else
    const bool built = false;
#endif
    // As winograd_choice: one choice for every run here where bench all timed the two codes.
    const bench::Ceilings& kept = kept_kernel_timings();
    if (kept.max_pool_onednn_over_dlperf > 0)
      return choose_max_pool_16c(env ? env : "auto", built, [&] { return kept.max_pool_onednn_over_dlperf; }, kept.kernels_source());
    return choose_max_pool_16c(env ? env : "auto", built, time_max_pool_16c);
  });
}

const MaxPool16cChoice* max_pool_16c_choice_if_made() { return the_choice.if_made(); }

void for_tests_run_max_pool_16c(std::optional<bool> own) {
#ifndef __AVX512F__
  if (own == true) throw Error("this build has no AVX-512 max pooling of its own");
#endif
  forced_16c = own;
}

namespace {
// Max pooling in a layout of whole channel vectors is own code (the header says why), on
// nChw16c only where it timed clearly faster than oneDNN's.
bool runs_own_max_pool(ops::OpKind kind, const ops::OpAttrs& a, const md& src, const Dims& x, ChannelVectors& layout) {
  if (kind != ops::OpKind::maxpool2d || a.kernel > 15 || !ChannelVectors::of(src, x, layout)) return false;
#ifndef __AVX512F__
  if (layout.type == dt::bf16) return false;  // only the AVX-512 code takes bf16
#endif
  if (layout.type == dt::bf16 && !ops::pools_2x2_stride_2(a)) return false;  // nor other windows in bf16
  if (layout.V != 16 || !layout.blocked()) return true;
  // The choice timed fp32; oneDNN's bf16 kernel is of the same family (jit:avx512_core_bf16 beside
  // jit:avx512_core), as slow on the Xeon as its fp32 one.
  return forced_16c ? *forced_16c : max_pool_16c_choice().own;
}
}  // namespace

std::unique_ptr<Op> make_pool(ops::OpKind kind, const ops::OpAttrs& a, const md& src, const Dims& x) {
  ChannelVectors layout;
  if (runs_own_max_pool(kind, a, src, x, layout)) return std::make_unique<MaxPool>(src, x, a, layout);
  return std::make_unique<Pool>(window_of(kind, a, x), src, x);
}

Footprint pool_footprint(ops::OpKind kind, const ops::OpAttrs& a, const md& src, const Dims& x) {
  // As the constructors allocate: max pooling keeps its argmax (own code: a byte an output).
  ChannelVectors layout;
  if (runs_own_max_pool(kind, a, src, x, layout)) {
    const md dst = MaxPool::output_md(x, a, layout);
    return {{src}, dst, {}, {{MemCategory::activations, MaxPool::argmax_bytes(dst)}}, 0};
  }
  const Window w = window_of(kind, a, x);
  const PoolPasses p(w, src, x);
  Footprint f{{src}, p.fwd.dst_desc(), {}, {}, std::max(p.fwd.scratchpad_desc().get_size(), p.bwd.scratchpad_desc().get_size())};
  if (w.alg == algorithm::pooling_max) f.buffers.push_back({MemCategory::activations, p.fwd.workspace_desc().get_size()});
  return f;
}

}  // namespace dlperf::cpu
