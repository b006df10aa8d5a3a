#include "backend/cpu/batchnorm_bf16.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace dlperf::cpu {

namespace {
std::optional<bool> scoped_own_code;  // ScopedBf16Batchnorm's
}  // namespace

bool bf16_batchnorm_own_code() {
#ifdef __AVX512F__
  if (scoped_own_code) return *scoped_own_code;
  const char* e = std::getenv("DLPERF_CPU_BF16_BATCHNORM");
  return !(e && std::string_view(e) == "onednn");
#else
  return false;
#endif
}

ScopedBf16Batchnorm::ScopedBf16Batchnorm(bool own_code) { scoped_own_code = own_code; }
ScopedBf16Batchnorm::~ScopedBf16Batchnorm() { scoped_own_code.reset(); }

std::optional<Bf16Vectors> bf16_batchnorm_layout(const md& m, const Dims& x) {
#ifdef __AVX512F__
  if (x.size() != 4 || x[1] % 16 != 0 || m.data_type() != dt::bf16 || !bf16_batchnorm_own_code()) return std::nullopt;
  const int64_t blocks = x[1] / 16, pixels = x[2] * x[3];
  if (m == md(to_dnnl(x), dt::bf16, tag::nhwc)) return Bf16Vectors{x[0], blocks, pixels, pixels * x[1], 16, x[1]};
  if (m == md(to_dnnl(x), dt::bf16, tag::nChw16c)) return Bf16Vectors{x[0], blocks, pixels, blocks * pixels * 16, pixels * 16, 16};
#else
  (void)m, (void)x;
#endif
  return std::nullopt;
}

#ifdef __AVX512F__
namespace {
// 16 bf16 values widen exactly to fp32 (their bits moved up); fp32 narrows to bf16 rounding to
// nearest even (VCVTNEPS2BF16, as oneDNN's kernels round). Compiled for AVX512-BF16 whatever the
// build's -march: bf16 training runs only where the CPU has it (cpu_precision_refusal).
#define DLPERF_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))
DLPERF_BF16_TARGET inline __m512 load16(const uint16_t* p) {
  const __m512i wide = _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, wide, 16));
}
DLPERF_BF16_TARGET inline void store16(uint16_t* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), (__m256i)_mm512_cvtneps_pbh(v));
}

DLPERF_BF16_TARGET inline void store_lanes(double* out, __m512 v) {
  alignas(64) float f[16];
  _mm512_store_ps(f, v);
  for (int l = 0; l < 16; ++l) out[l] = f[l];
}

// A sum of 16 lanes over a plane's pixels in four accumulators, pixel p into p % 4: one would be
// a chain of dependent additions, each waiting for the last (4 cycles), slower than the loads.
struct Sum4 {
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps(), s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
  DLPERF_BF16_TARGET void add(int64_t p, __m512 v) {
    switch (p & 3) {
      case 0: s0 = _mm512_add_ps(s0, v); break;
      case 1: s1 = _mm512_add_ps(s1, v); break;
      case 2: s2 = _mm512_add_ps(s2, v); break;
      default: s3 = _mm512_add_ps(s3, v); break;
    }
  }
  DLPERF_BF16_TARGET __m512 total() const { return _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)); }
};

// Per-channel sums over every image and pixel of `per_plane(n, b, lanes)`, which writes one image's
// block's sums, `sums` sets of 16 lanes (each over at most a plane's pixels, so fp32 holds them);
// the planes are summed in double, per thread, then the threads in order: the same sums for the
// same thread count.
template <class Plane>
std::vector<double> channel_sums(const Bf16Vectors& v, int sums, Plane per_plane) {
  const int64_t C = v.blocks * 16;
  const int threads = omp_get_max_threads();
  std::vector<double> partial(size_t(threads) * size_t(sums * C), 0.0);
#pragma omp parallel num_threads(threads)
  {
    double* mine = partial.data() + size_t(omp_get_thread_num()) * size_t(sums * C);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < v.images * v.blocks; ++i) {
      const int64_t n = i / v.blocks, b = i % v.blocks;
      double lanes[3][16] = {};
      per_plane(n, b, lanes);
      for (int s = 0; s < sums; ++s)
        for (int l = 0; l < 16; ++l) mine[s * C + b * 16 + l] += lanes[s][l];
    }
  }
  std::vector<double> total(size_t(sums * C), 0.0);
  for (int t = 0; t < threads; ++t)
    for (size_t k = 0; k < total.size(); ++k) total[k] += partial[size_t(t) * total.size() + k];
  return total;
}

// What forward and backward both need per channel: y = x * scale + shift (so backward recomputes
// the relu's mask exactly as forward decided it), and 1 / sqrt(var + eps).
struct Affine {
  std::vector<float> scale, shift, rstd;
};
Affine affine(int64_t C, const float* gamma, const float* beta, float eps, const float* mean, const float* var) {
  Affine a{std::vector<float>(size_t(C)), std::vector<float>(size_t(C)), std::vector<float>(size_t(C))};
  for (int64_t c = 0; c < C; ++c) {
    a.rstd[size_t(c)] = 1.0f / std::sqrt(var[c] + eps);
    a.scale[size_t(c)] = gamma[c] * a.rstd[size_t(c)];
    a.shift[size_t(c)] = beta[c] - mean[c] * a.scale[size_t(c)];
  }
  return a;
}

template <class Plane>
void each_plane(const Bf16Vectors& v, Plane plane) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < v.images * v.blocks; ++i) plane(i / v.blocks, i % v.blocks);
}
}  // namespace

DLPERF_BF16_TARGET void bf16_batchnorm_forward(const uint16_t* x, uint16_t* y, const Bf16Vectors& v, const float* gamma,
                                               const float* beta, float eps, bool relu, float* mean, float* var) {
  const int64_t C = v.blocks * 16;
  const double count = double(v.images * v.pixels);
  // One pass over the tensor (oneDNN makes two, mean then variance; the tensor comes from L2 or
  // beyond, a plane from L1). Each image plane's pixels are summed around the plane's own mean m_p
  // (its fp32 sum over the pixels P): the residual r = sum of (x - m_p) and q = sum of (x - m_p)^2,
  // small numbers fp32 holds well. Then, in double, sum of x = P m_p + r and sum of x^2 = q + 2 m_p r
  // + P m_p^2 for each plane, exactly as the decomposition goes, so E[x^2] - mean^2 over the whole
  // channel cancels only double's rounding, not fp32's (inputs around 1000 come out right).
  const std::vector<double> stats = channel_sums(v, 3, [&](int64_t n, int64_t b, double (*lanes)[16]) DLPERF_BF16_TARGET {
    const uint16_t* plane = x + n * v.sn + b * v.sb;
    Sum4 s;
    for (int64_t p = 0; p < v.pixels; ++p) s.add(p, load16(plane + p * v.sp));
    const __m512 m = _mm512_div_ps(s.total(), _mm512_set1_ps(float(v.pixels)));
    Sum4 r, q;
    for (int64_t p = 0; p < v.pixels; ++p) {
      const __m512 d = _mm512_sub_ps(load16(plane + p * v.sp), m);
      r.add(p, d);
      q.add(p, _mm512_mul_ps(d, d));
    }
    double mp[16], rp[16], qp[16];
    store_lanes(mp, m);
    store_lanes(rp, r.total());
    store_lanes(qp, q.total());
    const double P = double(v.pixels);
    for (int l = 0; l < 16; ++l) {
      lanes[0][l] = P * mp[l] + rp[l];
      lanes[1][l] = qp[l] + 2 * mp[l] * rp[l];
      lanes[2][l] = P * mp[l] * mp[l];
    }
  });
  for (int64_t c = 0; c < C; ++c) {
    const double m = stats[size_t(c)] / count;
    mean[c] = float(m);
    var[c] = float(std::max(0.0, (stats[size_t(C + c)] + stats[size_t(2 * C + c)] - count * m * m) / count));
  }
  const Affine a = affine(C, gamma, beta, eps, mean, var);
  each_plane(v, [&](int64_t n, int64_t b) DLPERF_BF16_TARGET {
    const __m512 scale = _mm512_loadu_ps(a.scale.data() + b * 16), shift = _mm512_loadu_ps(a.shift.data() + b * 16);
    const __m512 zero = _mm512_setzero_ps();
    const uint16_t* in = x + n * v.sn + b * v.sb;
    uint16_t* out = y + n * v.sn + b * v.sb;
    for (int64_t p = 0; p < v.pixels; ++p) {
      __m512 r = _mm512_fmadd_ps(load16(in + p * v.sp), scale, shift);
      if (relu) r = _mm512_maskz_max_ps(0xffff, r, zero);  // the maskz form: GCC 12 warns of the plain one
      store16(out + p * v.sp, r);
    }
  });
}

DLPERF_BF16_TARGET void bf16_batchnorm_backward(const uint16_t* x, const uint16_t* dy, uint16_t* dx, const Bf16Vectors& v,
                                                const float* gamma, const float* beta, float eps, bool relu, const float* mean,
                                                const float* var, float* dgamma, float* dbeta) {
  const int64_t C = v.blocks * 16;
  const double count = double(v.images * v.pixels);
  const Affine a = affine(C, gamma, beta, eps, mean, var);
  // The output's gradient where the relu let the output through (x * scale + shift > 0).
  auto gradient = [&](const uint16_t* in, const uint16_t* d, int64_t p, __m512 scale, __m512 shift) DLPERF_BF16_TARGET {
    const __m512 g = load16(d + p * v.sp);
    if (!relu) return g;
    const __mmask16 through = _mm512_cmp_ps_mask(_mm512_fmadd_ps(load16(in + p * v.sp), scale, shift), _mm512_setzero_ps(), _CMP_GT_OQ);
    return _mm512_maskz_mov_ps(through, g);
  };
  // dbeta = sum of the gradient; dgamma = sum of the gradient x the normalized input.
  const std::vector<double> sums = channel_sums(v, 2, [&](int64_t n, int64_t b, double (*lanes)[16]) DLPERF_BF16_TARGET {
    const __m512 scale = _mm512_loadu_ps(a.scale.data() + b * 16), shift = _mm512_loadu_ps(a.shift.data() + b * 16);
    const __m512 m = _mm512_loadu_ps(mean + b * 16), rstd = _mm512_loadu_ps(a.rstd.data() + b * 16);
    const uint16_t* in = x + n * v.sn + b * v.sb;
    const uint16_t* d = dy + n * v.sn + b * v.sb;
    Sum4 sg, sgx;
    for (int64_t p = 0; p < v.pixels; ++p) {
      const __m512 g = gradient(in, d, p, scale, shift);
      sg.add(p, g);
      sgx.add(p, _mm512_mul_ps(g, _mm512_mul_ps(_mm512_sub_ps(load16(in + p * v.sp), m), rstd)));
    }
    store_lanes(lanes[0], sg.total());
    store_lanes(lanes[1], sgx.total());
  });
  for (int64_t c = 0; c < C; ++c) dbeta[c] = float(sums[size_t(c)]), dgamma[c] = float(sums[size_t(C + c)]);
  // dx = gamma * rstd * (g - dbeta / count - xhat * dgamma / count)
  each_plane(v, [&](int64_t n, int64_t b) DLPERF_BF16_TARGET {
    const __m512 scale = _mm512_loadu_ps(a.scale.data() + b * 16), shift = _mm512_loadu_ps(a.shift.data() + b * 16);
    const __m512 m = _mm512_loadu_ps(mean + b * 16), rstd = _mm512_loadu_ps(a.rstd.data() + b * 16);
    const __m512 inv = _mm512_set1_ps(float(1 / count));
    const __m512 db = _mm512_mul_ps(_mm512_loadu_ps(dbeta + b * 16), inv), dg = _mm512_mul_ps(_mm512_loadu_ps(dgamma + b * 16), inv);
    const uint16_t* in = x + n * v.sn + b * v.sb;
    const uint16_t* d = dy + n * v.sn + b * v.sb;
    uint16_t* out = dx + n * v.sn + b * v.sb;
    for (int64_t p = 0; p < v.pixels; ++p) {
      const __m512 g = gradient(in, d, p, scale, shift);
      const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(load16(in + p * v.sp), m), rstd);
      store16(out + p * v.sp, _mm512_mul_ps(scale, _mm512_sub_ps(_mm512_sub_ps(g, db), _mm512_mul_ps(xhat, dg))));
    }
  });
}
#else
void bf16_batchnorm_forward(const uint16_t*, uint16_t*, const Bf16Vectors&, const float*, const float*, float, bool, float*, float*) {}
void bf16_batchnorm_backward(const uint16_t*, const uint16_t*, uint16_t*, const Bf16Vectors&, const float*, const float*, float, bool,
                             const float*, const float*, float*, float*) {}
#endif

}  // namespace dlperf::cpu
