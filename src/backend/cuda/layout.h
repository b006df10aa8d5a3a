// How the GPU executor stores 4-D activations: NCHW (the CPU engine's order), or NHWC (channels
// innermost, PyTorch's channels_last). NHWC is what tensor cores read: cuDNN runs bf16 and fp16
// convolutions on it directly, where NCHW costs a transpose on each side of every convolution.
// CUDA-free and compiled for host and device: the kernels index with it, the CPU test suite
// checks it, and the memory planner asks which flattens move data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"  // DLPERF_HD

namespace dlperf::cuda {

enum class Layout { nchw, nhwc };

inline const char* to_string(Layout l) { return l == Layout::nchw ? "nchw" : "nhwc"; }

/// --layout: "nchw" or "nhwc" as named; "auto" picks NHWC for bf16 and fp16 (tensor cores' own
/// layout) and NCHW for fp32 and tf32, where cuDNN's NCHW kernels need no transposes.
inline Layout resolve_layout(const std::string& option, const std::string& precision) {
  if (option == "nchw") return Layout::nchw;
  if (option == "nhwc") return Layout::nhwc;
  check(option == "auto", "--layout must be auto, nchw or nhwc, not '" + option + "'");
  return precision == "bf16" || precision == "fp16" ? Layout::nhwc : Layout::nchw;
}

/// Offset of element (n, c, i) of an [N, C, H, W] tensor stored in `l`; i = y * W + x.
DLPERF_HD inline int64_t offset_of(Layout l, int64_t n, int64_t c, int64_t i, int64_t channels, int64_t hw) {
  return l == Layout::nchw ? (n * channels + c) * hw + i : (n * hw + i) * channels + c;
}

/// Whether [C, H, W] maps are stored differently in NHWC than in NCHW: not with one channel
/// (Fashion-MNIST's input) or one pixel (after a global pooling), where converting moves nothing.
DLPERF_HD inline bool layouts_differ(int64_t channels, int64_t hw) { return channels > 1 && hw > 1; }

/// Whether a value of shape `dims` is stored differently in `l` than in NCHW: a 4-D value in NHWC
/// whose maps layouts_differ. Such an input gets its own copy, and such a flatten moves data.
inline bool stored_differently(Layout l, const std::vector<int64_t>& dims) {
  return l == Layout::nhwc && dims.size() == 4 && layouts_differ(dims[1], dims[2] * dims[3]);
}

/// Whether an NHWC convolution reading `dims` [N, C, H, W] computes its weight gradient through
/// cuDNN's NCHW path (cuda::Network, set_up_op, says why): fewer than 8 input channels, where
/// cuDNN's NHWC kernels for that pass ran 8 to 10 times slower on an H200. With more than one
/// channel, that path reads the input moved to NCHW and writes the gradient [K, C, R, S] into
/// buffers of its own, which the memory planner counts too.
inline bool weight_grad_in_nchw(Layout l, const std::vector<int64_t>& dims) { return l == Layout::nhwc && dims[1] < 8; }

/// Convolution weights between [K, C, R, S] (the CPU engine's and checkpoints' order) and
/// [K, R, S, C] (cuDNN's filter layout for NHWC tensors); rs = R * S.
inline void weights_to_krsc(const float* kcrs, float* krsc, int64_t k, int64_t c, int64_t rs) {
  for (int64_t o = 0; o < k; ++o)
    for (int64_t i = 0; i < c; ++i)
      for (int64_t j = 0; j < rs; ++j) krsc[(o * rs + j) * c + i] = kcrs[(o * c + i) * rs + j];
}
inline void weights_to_kcrs(const float* krsc, float* kcrs, int64_t k, int64_t c, int64_t rs) {
  for (int64_t o = 0; o < k; ++o)
    for (int64_t i = 0; i < c; ++i)
      for (int64_t j = 0; j < rs; ++j) kcrs[(o * c + i) * rs + j] = krsc[(o * rs + j) * c + i];
}

}  // namespace dlperf::cuda
