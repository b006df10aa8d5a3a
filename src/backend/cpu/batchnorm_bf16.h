// Training batchnorm in bf16 (between a bf16 network's convolutions), own code: oneDNN 2.6's bf16
// kernel (bnorm_jit:avx512_core_bf16) took 3-8x the time its bytes take, on two Intel Xeons, in
// both layouts the engine keeps bf16 activations in (docs/benchmarks.md). This code makes
// oneDNN's passes over whole vectors of 16 channels, one fewer forward (the statistics in one
// pass, then normalize; backward's two sums, then the input's gradient), in fp32 inside, each
// image plane's sums in fp32 around the plane's mean and the planes' in double. Inference stays
// oneDNN's.
#pragma once

#include <cstdint>
#include <optional>

#include "backend/cpu/common.h"

namespace dlperf::cpu {

/// Where a bf16 activation's 16-channel vectors lie, in elements: image n's block b (channels
/// 16b..16b+15) at pixel p is at n * sn + b * sb + p * sp.
struct Bf16Vectors {
  int64_t images = 0, blocks = 0, pixels = 0;
  int64_t sn = 0, sb = 0, sp = 0;
};
/// The layout of `m` (shape `x`, NCHW order) where this code takes it: bf16 in nhwc or nChw16c,
/// channels a multiple of 16, in a build with AVX-512 code. Else nullopt (oneDNN's kernel runs).
std::optional<Bf16Vectors> bf16_batchnorm_layout(const md& m, const Dims& x);
/// Whether this code runs bf16 batchnorms at all here: a build with AVX-512 code, and
/// DLPERF_CPU_BF16_BATCHNORM not set to "onednn" (which runs oneDNN's kernel, to compare the two),
/// or within a ScopedBf16Batchnorm, as it says.
bool bf16_batchnorm_own_code();

/// For its scope, bf16 batchnorms built and planned run this code (where the build has it) or
/// oneDNN's kernel as `own_code` says, whatever DLPERF_CPU_BF16_BATCHNORM says: `plan --against`
/// plans a run as its record says it ran. Not nested.
class ScopedBf16Batchnorm {
 public:
  explicit ScopedBf16Batchnorm(bool own_code);
  ~ScopedBf16Batchnorm();
  ScopedBf16Batchnorm(const ScopedBf16Batchnorm&) = delete;
  ScopedBf16Batchnorm& operator=(const ScopedBf16Batchnorm&) = delete;
};

/// The forward training pass: `mean` and `var` (biased, as oneDNN and PyTorch normalize) per
/// channel, and y = (x - mean) / sqrt(var + eps) * gamma + beta, clamped at 0 with `relu`.
void bf16_batchnorm_forward(const uint16_t* x, uint16_t* y, const Bf16Vectors& v, const float* gamma, const float* beta,
                            float eps, bool relu, float* mean, float* var);
/// The backward pass: the scale's and shift's gradients and the input's, through the relu (its
/// mask recomputed from x as forward computed it) with `relu`.
void bf16_batchnorm_backward(const uint16_t* x, const uint16_t* dy, uint16_t* dx, const Bf16Vectors& v, const float* gamma,
                             const float* beta, float eps, bool relu, const float* mean, const float* var, float* dgamma,
                             float* dbeta);

}  // namespace dlperf::cpu
