// bf16 convolutions as matrix products on AMX tiles, for the passes oneDNN 2.6's convolution
// kernels run slowly there: small output maps and strides.
//
// oneDNN's AMX convolution kernels fill a tile's 16 rows with an output row's pixels, so a 4x4
// map uses a quarter of each tile; its strided and backward-weights kernels are slower still. On a
// 2-core Xeon with AMX (oneDNN 2.6, batch 64, each pass alone), resnet18's 512-channel 4x4 layer
// took 6.8 ms forward, 8.4 backward-data and 17.3 backward-weights (280-720 GFLOP/s of a 6,500
// peak); the same products through oneDNN's matmul (brgemm on the tiles) ran at 1,100-1,750
// GFLOP/s, and the input unfolded for them (im2col) in 0.4 ms. The 1x1 stride-2 shortcuts'
// backward-weights ran at 84-122 GFLOP/s. oneDNN's matmul is the library's; this file only lays
// the convolution out for it: unfolding the input (one copy per tap, the channels contiguous in
// nhwc) and folding the input gradient back (a sum per input pixel, in fp32, rounded once).
//
// Layout: activations nhwc, so an image's output pixels are rows of an [pixels, channels]
// matrix. The unfolded input has a row per output pixel and kh*kw*C columns ordered (kh, kw, c);
// the weights [OC, kh*kw*C] are then ohwi, which the master weights take when backward-weights
// runs here (it writes their gradient).
//
//   forward:          y[rows, OC]        = cols[rows, K] x w^T[K, OC] (+ bias)
//   backward-data:    dcols[rows, K]     = dy[rows, OC] x w[OC, K], folded into dx
//   backward-weights: dw[OC, K]         += dy^T[OC, rows] x cols[rows, K]
//
// The rows go in chunks of whole images: forward and backward-data about 512 rows at a time
// (measured as fast as or faster than whole batches, and the unfolded chunk stays in cache),
// backward-weights up to 32 MB of unfolded input at a time (each further chunk adds to dw, which
// costs a pass over it). The unfolded chunk sits at the shared scratchpad's front.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/cpu/common.h"
#include "ops/op.h"

namespace dlperf::cpu {

/// A conv's shape as its matrix products see it.
struct ConvGemmShape {
  int64_t n = 0, c = 0, h = 0, w = 0;  ///< the input, nhwc
  int64_t oc = 0, oh = 0, ow = 0;      ///< the output
  int64_t k = 0, stride = 1, pad = 0;  ///< a square kernel

  ConvGemmShape() = default;
  ConvGemmShape(const ops::OpAttrs& a, const Dims& x, const Dims& y)
      : n(x[0]), c(x[1]), h(x[2]), w(x[3]), oc(y[1]), oh(y[2]), ow(y[3]), k(a.kernel), stride(a.stride), pad(a.padding) {}
  int64_t rows_per_image() const { return oh * ow; }
  int64_t cols() const { return k * k * c; }
  /// A 1x1 stride-1 conv without padding reads its input as it is: its unfolding is itself.
  bool unfolds() const { return !(k == 1 && stride == 1 && pad == 0); }
};

/// Which of a conv's passes run as matrix products.
struct ConvGemmPasses {
  bool forward = false, backward_data = false, backward_weights = false;
  bool any() const { return forward || backward_data || backward_weights; }
  /// "forward, backward-data, backward-weights" or a part; empty for none.
  std::string names() const;
};

/// The rule, for a bf16 conv whose oneDNN passes run on AMX with nhwc activations (conv2d.cpp
/// asks only for those), where the products timed faster than oneDNN's kernels in training
/// (docs/benchmarks.md). With at least 128 input channels: forward for output maps at most 4 wide
/// (not 1x1 convolutions: oneDNN's 1x1 kernel fills the tiles), backward-data for maps at most 4
/// wide or 7 with a stride, backward-weights for maps at most 7 wide. And backward-weights of
/// strided 1x1 convolutions (shortcuts) on maps at most 14 wide.
/// DLPERF_CPU_CONV_GEMM=off runs oneDNN's convolutions for every pass, =all runs every pass as
/// matrix products (to compare, and for tests); auto (or unset) is the rule. Throws Error for
/// another value.
ConvGemmPasses conv_gemm_passes(const ConvGemmShape& s);
/// The mode in effect: "auto", "off" or "all" (DLPERF_CPU_CONV_GEMM's value, or a ScopedConvGemm's).
std::string conv_gemm_mode();
/// For its scope, convolutions built follow `mode` whatever DLPERF_CPU_CONV_GEMM says: `plan
/// --against` lays out a run as its record says it ran ("off" for records from before the
/// products). Not nested.
class ScopedConvGemm {
 public:
  explicit ScopedConvGemm(std::string mode);
  ~ScopedConvGemm();
  ScopedConvGemm(const ScopedConvGemm&) = delete;
  ScopedConvGemm& operator=(const ScopedConvGemm&) = delete;

 private:
  std::string mode_;
};

/// Tests only: the chunks' sizes (forward and backward-data rows, backward-weights' unfolded
/// bytes), so that small shapes run in several; 0 restores the default. For ConvGemms built after.
void for_tests_set_conv_gemm_chunks(int64_t rows, size_t weights_bytes);

/// Unfolds images [first, first + images) of the nhwc bf16 input `x` into `cols`, their rows
/// only (zeros where a tap falls on the padding).
void unfold_bf16(const uint16_t* x, uint16_t* cols, const ConvGemmShape& s, int64_t first, int64_t images);
/// Folds those images' gradient rows `dcols` (fp32) into the nhwc bf16 input gradient `dx`: each
/// input pixel's sum over the taps that read it, rounded to bf16 once.
void fold_bf16(const float* dcols, uint16_t* dx, const ConvGemmShape& s, int64_t first, int64_t images);

/// The chosen passes of one conv, over oneDNN's matmul. Activations nhwc bf16, weights ohwi
/// (bf16 for forward and backward-data, fp32 for their gradient), bias and its gradient fp32.
class ConvGemm {
 public:
  /// `passes`: those it runs (backward-data only where the input's gradient is needed). `build`
  /// false: only the primitives' descriptors, no JIT code, for scratchpad() (the memory planner's
  /// footprint).
  ConvGemm(const ConvGemmShape& s, ConvGemmPasses passes, bool bias, bool build = true);
  ~ConvGemm();
  ConvGemm(const ConvGemm&) = delete;
  ConvGemm& operator=(const ConvGemm&) = delete;

  /// The weights' layout for the passes here: ohwi in `type`.
  static md weights_md(const ConvGemmShape& s, dt type);
  /// The most any pass here takes of the shared scratchpad (its unfolded chunk and its matmul's
  /// own), for the memory planner.
  size_t scratchpad() const;

  void forward(const memory& x, const memory& w, const memory* bias, const memory& y) const;
  void backward_data(const memory& dy, const memory& w, const memory& dx) const;
  void backward_weights(const memory& x, const memory& dy, const memory& dw, const memory* dbias) const;

 private:
  struct Passes;
  ConvGemmShape s_;
  std::unique_ptr<Passes> p_;
};

}  // namespace dlperf::cpu
