// dlperf's own convolution for inputs of one or three channels (a network's first layer:
// Fashion-MNIST's grey images, CIFAR's RGB ones), forward and weight gradient, 3x3 filters.
//
// Why by hand, beside cuDNN: with so few input channels the convolution is a memory-bound pass
// over its K-channel output (9 or 27 multiply-adds an output element), and cuDNN ran it far
// from the memory's speed on an H200 (2026-11-27, bf16, the recipe's conv1 at batch 256, one
// channel to 32 at 28x28: forward 28 to 32 us and the NCHW weight gradient 63 us a step, for a
// 12.8 MB output the memory moves in about 4 us). Network times these kernels against cuDNN's
// choice when it is built (--small-conv auto) and keeps the faster for each pass, so they can
// only help; the run record's conv_algorithms gives both times.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "backend/cuda/conv.h"     // ConvShape
#include "backend/cuda/kernels.h"  // DType

namespace dlperf::cuda {

/// Whether the own kernels take this shape: 1 or 3 input channels, 3x3 filters, any stride and
/// padding, and a power of two from 1 to 256 output channels (a block's threads cover them, and
/// the weight gradient's partial sums meet by halves); every tensor under 2^31 elements.
bool small_conv_fits(const ConvShape& s);

/// Bytes of partial sums small_conv_weight_grad needs as workspace (fp32, one set a block).
size_t small_conv_workspace(const ConvShape& s);

/// y = the convolution of x with w, summed in fp32. `nhwc`: x [N, H, W, C], w [K, R, S, C],
/// y [N, OH, OW, K] (as CudnnConv takes them); else x [N, C, H, W], w [K, C, R, S], y [N, K, OH, OW].
void small_conv_forward(DType t, bool nhwc, const ConvShape& s, const void* x, const void* w, void* y, cudaStream_t st);

/// dw = the weight gradient from x and the output gradient dy, in w's layout and type `t`. The
/// products are summed in fp32 in a fixed order (the same bits on every run): a block's share of
/// the output pixels into `partial` (small_conv_workspace bytes), then the blocks' sums in order.
void small_conv_weight_grad(DType t, bool nhwc, const ConvShape& s, const void* x, const void* dy, void* dw, void* partial,
                            cudaStream_t st);

}  // namespace dlperf::cuda
