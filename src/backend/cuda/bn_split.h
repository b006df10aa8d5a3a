// How dlperf's GPU batchnorm kernels (batchnorm.cu) share out a channel's N x H x W elements
// among blocks and threads, in a header the host compiles too: the CPU test suite checks that
// every element is visited exactly once (tests/test_cuda.cpp, BatchnormSplit.*), and the memory
// planner sizes the kernels' workspace from it without the CUDA headers.
#pragma once

#include <cstdint>

#include "core/rng.h"  // DLPERF_HD

namespace dlperf::cuda {

constexpr int kBnThreads = 256;
/// About 32 elements a thread: at batch 1024 of 32x32 maps a 32-channel layer gets 4096 blocks,
/// enough to fill any GPU, while a channel's partial sums stay few enough for one thread to add.
constexpr int64_t kBnElemsPerBlock = 8192;

/// Blocks a channel is split into: the batch's samples are shared out in row ranges, so at most
/// one block a sample.
DLPERF_HD inline int64_t bn_splits(int64_t n, int64_t hw) {
  const int64_t s = (n * hw + kBnElemsPerBlock - 1) / kBnElemsPerBlock;
  return s < 1 ? 1 : s > n ? n : s;
}

/// Samples [first, last) of split `s` out of `splits`.
struct BnRows {
  int64_t first, last;
};
DLPERF_HD inline BnRows bn_rows(int64_t n, int64_t splits, int64_t s) { return {n * s / splits, n * (s + 1) / splits}; }

/// One thread's walk over a split's elements of one channel: its (sample, pixel) pairs number
/// k = thread, thread + threads, ... in sample-major order, stepped without a division per
/// element (the kernels are memory-bound; a 64-bit division per element would not be).
struct BnWalk {
  int64_t n, i;  ///< the sample and the pixel (y * W + x) now
  int64_t last, hw, step_n, step_i;
  DLPERF_HD BnWalk(BnRows r, int64_t hw_, int64_t thread, int64_t threads)
      : n(r.first + thread / hw_), i(thread % hw_), last(r.last), hw(hw_), step_n(threads / hw_), step_i(threads % hw_) {}
  DLPERF_HD bool more() const { return n < last; }
  /// The element's offset in an NCHW tensor of `channels` channels.
  DLPERF_HD int64_t at(int64_t channels, int64_t c) const { return (n * channels + c) * hw + i; }
  DLPERF_HD void next() {
    n += step_n;
    i += step_i;
    if (i >= hw) i -= hw, ++n;
  }
  /// The next kN elements' offsets in `at`, when the walk surely has kN left (each step moves at
  /// most step_n + 1 samples on), and the walk past them; false, the walk unchanged, otherwise.
  /// The offset moves by additions, without the per-element multiplies of at() or a check of
  /// each element against the end: with a few operations an element, the index arithmetic
  /// otherwise outweighs the loads and the math (in the PTX, about 23 instructions an element,
  /// most of them 64-bit).
  template <int kN>
  DLPERF_HD bool take(int64_t channels, int64_t c, int64_t* at) {
    if (n + (kN - 1) * (step_n + 1) >= last) return false;
    const int64_t plane = channels * hw, d = step_n * plane + step_i;
    int64_t o = (n * channels + c) * hw + i;
    for (int j = 0; j < kN; ++j) {
      at[j] = o;
      o += d, n += step_n, i += step_i;
      if (i >= hw) i -= hw, ++n, o += plane - hw;
    }
    return true;
  }
};

// NHWC: a channel is a column of the [N * H * W, C] matrix of rows (pixels). A block of
// kBnTileC x kBnTileRows threads takes 32 neighbouring channels, so a warp reads one row's 32
// channels in one go, and its rows are shared out among the block's rows of threads; the rows
// themselves are split among blocks as NCHW splits samples.
constexpr int kBnTileC = 32, kBnTileRows = 8;
/// Rows a block takes: 32 elements a thread, as in NCHW.
constexpr int64_t kBnRowsPerBlock = kBnElemsPerBlock / kBnTileC;
/// At most this many splits, so the warp adding a channel's partials stays quick (32 a lane).
constexpr int64_t kBnMaxRowSplits = 1024;

DLPERF_HD inline int64_t bn_nhwc_splits(int64_t rows) {
  const int64_t s = (rows + kBnRowsPerBlock - 1) / kBnRowsPerBlock;
  return s < 1 ? 1 : s > kBnMaxRowSplits ? kBnMaxRowSplits : s;
}

/// Channel tiles of an NHWC layer (the grid's other dimension).
DLPERF_HD inline int64_t bn_tiles(int64_t channels) { return (channels + kBnTileC - 1) / kBnTileC; }

/// One thread's walk down a split's rows (bn_rows over N * H * W rows) for its channel: rows
/// first + ty, first + ty + tys, ...
struct BnRowWalk {
  int64_t r, last, step;
  DLPERF_HD BnRowWalk(BnRows rows, int64_t ty, int64_t tys) : r(rows.first + ty), last(rows.last), step(tys) {}
  DLPERF_HD bool more() const { return r < last; }
  /// The element's offset in an NHWC tensor of `channels` channels.
  DLPERF_HD int64_t at(int64_t channels, int64_t c) const { return r * channels + c; }
  DLPERF_HD void next() { r += step; }
  /// As BnWalk::take: the next kN offsets by additions where kN rows are left.
  template <int kN>
  DLPERF_HD bool take(int64_t channels, int64_t c, int64_t* at) {
    if (r + (kN - 1) * step >= last) return false;
    const int64_t d = step * channels;
    int64_t o = r * channels + c;
    for (int j = 0; j < kN; ++j, o += d) at[j] = o;
    r += kN * step;
    return true;
  }
};

/// Splits of one channel in either layout.
DLPERF_HD inline int64_t bn_layer_splits(int64_t n, int64_t hw, bool nhwc) { return nhwc ? bn_nhwc_splits(n * hw) : bn_splits(n, hw); }

/// Bytes of the workspace one batchnorm layer uses: two double partial sums per block and three
/// float coefficients per channel. The GPU executor keeps one, sized for its largest layer.
DLPERF_HD inline int64_t bn_workspace_bytes(int64_t n, int64_t channels, int64_t hw, bool nhwc = false) {
  return 16 * channels * bn_layer_splits(n, hw, nhwc) + 12 * channels;
}

}  // namespace dlperf::cuda
