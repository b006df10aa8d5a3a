// The CUDA side: device queries and --device parsing everywhere; the CUDA-free pieces of the GPU
// code (layouts, batchnorm's split, the loss-scale rule) on the CPU; with the CUDA backend and a
// GPU, the GPU benchmarks' validation. The kernels and the GEMM epilogues, the executor, the
// trainer (out-of-memory advice included) and the commands on a GPU have their own files
// (test_cuda_kernels.cpp, test_cuda_network.cpp, test_cuda_train.cpp, test_cuda_commands.cpp),
// which also run under the CPU emulation.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <thread>
#include <vector>

#include "backend/cuda/bn_split.h"
#include "backend/cuda/conv_choice.h"
#include "backend/cuda/layout.h"
#include "backend/cuda/loss_scale.h"
#include "backend/cuda/pool_index.h"
#include "backend/cuda/runtime.h"
#include "bench/gpu_bench.h"
#include "core/rng.h"
#include "core/timer.h"
#include "hw/nvml.h"
#include "ops/op.h"
#include "plan/catalog.h"
#include "cuda_kernel_util.h"
#include "test_util.h"

#ifdef DLPERF_HAVE_CUDA
#include <cuda_runtime.h>

#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "train/trainer.h"
#endif

namespace dlperf::test {
namespace {

// --layout's rule, the offsets, and the weight permutation NHWC convolutions need.
TEST(Layout, AutoPicksNhwcForHalfTypesAndWeightsRoundTrip) {
  EXPECT_EQ(cuda::resolve_layout("auto", "bf16"), cuda::Layout::nhwc);
  EXPECT_EQ(cuda::resolve_layout("auto", "fp16"), cuda::Layout::nhwc);
  EXPECT_EQ(cuda::resolve_layout("auto", "fp32"), cuda::Layout::nchw);
  EXPECT_EQ(cuda::resolve_layout("auto", "tf32"), cuda::Layout::nchw);
  EXPECT_EQ(cuda::resolve_layout("nhwc", "fp32"), cuda::Layout::nhwc);
  EXPECT_EQ(cuda::resolve_layout("nchw", "bf16"), cuda::Layout::nchw);
  EXPECT_THROW(cuda::resolve_layout("chw", "fp32"), Error);
  // Element (n=1, c=2, y=0, x=1) of a [2, 3, 2, 2] tensor.
  EXPECT_EQ(cuda::offset_of(cuda::Layout::nchw, 1, 2, 1, 3, 4), (1 * 3 + 2) * 4 + 1);
  EXPECT_EQ(cuda::offset_of(cuda::Layout::nhwc, 1, 2, 1, 3, 4), (1 * 4 + 1) * 3 + 2);
  EXPECT_FALSE(cuda::layouts_differ(1, 784));
  EXPECT_FALSE(cuda::layouts_differ(512, 1));
  EXPECT_TRUE(cuda::layouts_differ(2, 4));
  // [K=4, C=3, R=2, S=2]: element (k, c, r, s) moves to (k, r, s, c) and back.
  std::vector<float> kcrs(48), krsc(48), back(48);
  std::iota(kcrs.begin(), kcrs.end(), 0.f);
  cuda::weights_to_krsc(kcrs.data(), krsc.data(), 4, 3, 4);
  EXPECT_EQ(krsc[size_t(((2 * 2 + 1) * 2 + 0) * 3 + 1)], kcrs[size_t(((2 * 3 + 1) * 2 + 1) * 2 + 0)]);
  cuda::weights_to_kcrs(krsc.data(), back.data(), 4, 3, 4);
  EXPECT_EQ(back, kcrs);
}

TEST(Cuda, DeviceQueriesNeverThrowAndDeviceFlagsAreChecked) {
  const int n = cuda::device_count();
  EXPECT_GE(n, 0);
  if (n == 0) {
    EXPECT_FALSE(cuda::why_no_device().empty());
  }
  EXPECT_EQ(cuda::resolve_device("cpu"), -1);
  EXPECT_EQ(cuda::resolve_device("auto"), n > 0 ? 0 : -1);
  EXPECT_NE(error_of([] { cuda::resolve_device("gpu0"); }).find("not auto, cpu, cuda or cuda:N"), std::string::npos);
  EXPECT_NE(error_of([] { cuda::resolve_device("cuda:x"); }), "");
  EXPECT_NE(error_of([] { cuda::resolve_device("cuda:99"); }), "");
  const std::string huge = error_of([] { cuda::resolve_device("cuda:99999999999999999999"); });
  EXPECT_EQ(huge.rfind("--device cuda:99999999999999999999: ", 0), 0u) << huge;  // not stoi's out_of_range
  if (n == 0) {
    EXPECT_NE(error_of([] { cuda::resolve_device("cuda"); }).find(cuda::why_no_device()), std::string::npos);
  } else {
    EXPECT_EQ(cuda::resolve_device("cuda"), 0);
  }
  EXPECT_EQ(cuda::gpus_json().size(), size_t(n));
  EXPECT_EQ(bench::gpu::available(), n > 0);
}

TEST(Cuda, GpuNamesMapToCatalogEntries) {
  EXPECT_EQ(plan::catalog_id_for_gpu("NVIDIA H100 80GB HBM3"), "h100-sxm");
  EXPECT_EQ(plan::catalog_id_for_gpu("NVIDIA H100 PCIe"), "h100-pcie");
  EXPECT_EQ(plan::catalog_id_for_gpu("NVIDIA H200"), "h200");
  EXPECT_EQ(plan::catalog_id_for_gpu("NVIDIA A100-SXM4-80GB"), "a100-80gb");
  EXPECT_EQ(plan::catalog_id_for_gpu("NVIDIA A100-SXM4-40GB"), "a100-40gb");
  EXPECT_EQ(plan::catalog_id_for_gpu("Tesla T4"), "t4");
  EXPECT_EQ(plan::catalog_id_for_gpu("NVIDIA L4"), "l4");
  EXPECT_EQ(plan::catalog_id_for_gpu("NVIDIA L40S"), "l40s");
  EXPECT_EQ(plan::catalog_id_for_gpu("NVIDIA L40"), "");
  EXPECT_EQ(plan::catalog_id_for_gpu("NVIDIA B200"), "b200");
  EXPECT_EQ(plan::catalog_id_for_gpu("NVIDIA GeForce RTX 4090"), "rtx-4090");
}

// The pooling kernels' window arithmetic (a host-compiled header), against brute force.
TEST(PoolWindows, EachInputFindsExactlyTheWindowsHoldingIt) {
  for (int64_t k = 1; k <= 4; ++k)
    for (int64_t stride = 1; stride <= 3; ++stride)
      for (int64_t pad = 0; pad < k; ++pad)
        for (int64_t h = k; h <= 11; ++h) {
          const int64_t out = ops::window_out(h, k, stride, pad);
          for (int64_t i = 0; i < h; ++i) {
            int64_t lo = out, hi = -1;
            for (int64_t o = 0; o < out; ++o)
              if (o * stride - pad <= i && i <= o * stride - pad + k - 1) lo = std::min(lo, o), hi = std::max(hi, o);
            const auto r = cuda::windows_holding(i, k, stride, pad, out);
            if (hi < 0) {
              EXPECT_GT(r.first, r.last) << "k" << k << " s" << stride << " p" << pad << " h" << h << " i" << i;
            } else {
              EXPECT_EQ(r.first, lo) << "k" << k << " s" << stride << " p" << pad << " h" << h << " i" << i;
              EXPECT_EQ(r.last, hi) << "k" << k << " s" << stride << " p" << pad << " h" << h << " i" << i;
            }
          }
        }
}

// Every input element's gradient as the per-window backward pass (pool_tile_grad) writes it, and
// how often each was written. A function of its own: inlined into the test, GCC 12 warns of a
// free of a non-heap pointer in `writes`' destructor (-Wfree-nonheap-object, a false positive).
struct TileGrads {
  std::vector<float> values;
  std::vector<int> writes;
};
[[gnu::noinline]] TileGrads tile_grads(const cuda::PoolShape& p, const std::vector<float>& x, const std::vector<float>& dy) {
  TileGrads t{std::vector<float>(x.size(), -1.f), std::vector<int>(x.size(), 0)};
  const auto load = [](const std::vector<float>& v) { return [&v](int64_t i) { return v[size_t(i)]; }; };
  for (int64_t o = 0; o < int64_t(dy.size()); ++o)
    cuda::pool_tile_grad(p, o, load(x), load(dy), [&](int64_t i, float v) { t.values[size_t(i)] = v, ++t.writes[size_t(i)]; });
  return t;
}

// The pooling kernels' per-element bodies (pool_index.h, host-compiled), run here on floats
// against a float64 reference in both layouts: the forward pass, the per-element backward pass,
// and where the windows tile the input the per-window one, which must write every input element
// exactly once with the same floats. Inputs with ties (values 0 to 3) check that a max window's
// gradient goes to its first largest element; odd map sizes leave rows and columns in no window.
TEST(PoolBodies, ForwardAndBothBackwardPassesMatchTheReference) {
  struct Case {
    int64_t h, w, k, stride, pad;
    bool global;
  };
  const Case cases[] = {{8, 8, 2, 2, 0, false}, {7, 9, 2, 2, 0, false}, {7, 7, 2, 3, 0, false}, {9, 9, 3, 2, 1, false},
                        {6, 6, 3, 1, 1, false}, {5, 7, 0, 1, 0, true},  {1, 1, 1, 1, 0, false}};
  const int64_t n = 2, channels = 3;
  for (const Case& cs : cases)
    for (bool max : {true, false})
      for (cuda::Layout layout : {cuda::Layout::nchw, cuda::Layout::nhwc}) {
        if (cs.global && max) continue;  // a global pool is an average
        cuda::PoolShape p;
        p.planes = n * channels, p.h = cs.h, p.w = cs.w, p.channels = channels, p.layout = layout, p.max = max;
        p.kh = cs.global ? cs.h : cs.k, p.kw = cs.global ? cs.w : cs.k, p.stride = cs.stride, p.pad = cs.pad;
        p.out_h = cs.global ? 1 : ops::window_out(cs.h, cs.k, cs.stride, cs.pad);
        p.out_w = cs.global ? 1 : ops::window_out(cs.w, cs.k, cs.stride, cs.pad);
        SCOPED_TRACE(fmt::format("{}x{} k{} s{} p{} {} {}", cs.h, cs.w, p.kh, p.stride, p.pad, max ? "max" : "avg", cuda::to_string(layout)));
        // Offsets of [n, c, y, x] in the layout, for maps of rows x cols.
        auto at = [&](int64_t b, int64_t c, int64_t y, int64_t x, int64_t rows, int64_t cols) {
          return layout == cuda::Layout::nchw ? ((b * channels + c) * rows + y) * cols + x : ((b * rows + y) * cols + x) * channels + c;
        };
        Rng rng(uint64_t(cs.h * 100 + cs.k * 10 + cs.stride));
        std::vector<float> x(size_t(p.planes * p.h * p.w)), dy(size_t(p.planes * p.out_h * p.out_w));
        for (auto& v : x) v = float(rng.below(4));  // ties
        for (auto& v : dy) v = float(rng.normal());
        std::vector<double> want_y(dy.size()), want_dx(x.size(), 0.0);
        for (int64_t b = 0; b < n; ++b)
          for (int64_t c = 0; c < channels; ++c)
            for (int64_t oy = 0; oy < p.out_h; ++oy)
              for (int64_t ox = 0; ox < p.out_w; ++ox) {
                double acc = max ? -INFINITY : 0;
                int64_t best = -1;
                for (int64_t ky = 0; ky < p.kh; ++ky)
                  for (int64_t kx = 0; kx < p.kw; ++kx) {
                    const int64_t y = oy * p.stride - p.pad + ky, xx = ox * p.stride - p.pad + kx;
                    if (y < 0 || y >= p.h || xx < 0 || xx >= p.w) continue;
                    const int64_t i = at(b, c, y, xx, p.h, p.w);
                    if (max && (best < 0 || x[size_t(i)] > acc)) best = i, acc = x[size_t(i)];
                    if (!max) acc += x[size_t(i)];
                  }
                const int64_t o = at(b, c, oy, ox, p.out_h, p.out_w);
                want_y[size_t(o)] = max ? acc : acc / double(p.kh * p.kw);
                const double g = dy[size_t(o)];
                if (max) want_dx[size_t(best)] += g;
                for (int64_t ky = 0; !max && ky < p.kh; ++ky)
                  for (int64_t kx = 0; kx < p.kw; ++kx) {
                    const int64_t y = oy * p.stride - p.pad + ky, xx = ox * p.stride - p.pad + kx;
                    if (y >= 0 && y < p.h && xx >= 0 && xx < p.w) want_dx[size_t(at(b, c, y, xx, p.h, p.w))] += g / double(p.kh * p.kw);
                  }
              }
        auto load = [](const std::vector<float>& v) { return [&v](int64_t i) { return v[size_t(i)]; }; };
        for (size_t o = 0; o < dy.size(); ++o)
          ASSERT_NEAR(cuda::pool_output(p, int64_t(o), load(x)), want_y[o], 1e-6 * (1 + std::fabs(want_y[o]))) << "output " << o;
        std::vector<float> dx(x.size());
        for (size_t i = 0; i < x.size(); ++i) {
          dx[i] = cuda::pool_input_grad(p, int64_t(i), load(x), load(dy));
          ASSERT_NEAR(dx[i], want_dx[i], 1e-5 * (1 + std::fabs(want_dx[i]))) << "input " << i;
        }
        const bool tiles = !(cs.stride < cs.k && !cs.global) && cs.pad == 0;
        ASSERT_EQ(cuda::pool_windows_tile(p), tiles);
        if (!tiles) continue;
        const TileGrads t = tile_grads(p, x, dy);
        const std::vector<float>& tiled = t.values;
        for (size_t i = 0; i < x.size(); ++i) {
          ASSERT_EQ(t.writes[i], 1) << "input " << i;
          ASSERT_EQ(tiled[i], dx[i]) << "input " << i;  // bit for bit the per-element pass's
        }
      }
}

// A walk's offsets as the kernels take them (batchnorm.cu's next_offsets): 8 at a time by take()
// while it has them, then one at a time; they must be the ones next() steps through, in order.
template <class Walk>
std::vector<int64_t> offsets_in_batches(Walk w, int64_t channels, int64_t c) {
  std::vector<int64_t> out;
  int64_t at[8];
  while (w.template take<8>(channels, c, at)) out.insert(out.end(), at, at + 8);
  for (; w.more(); w.next()) out.push_back(w.at(channels, c));
  return out;
}
template <class Walk>
std::vector<int64_t> offsets_one_by_one(Walk w, int64_t channels, int64_t c) {
  std::vector<int64_t> out;
  for (; w.more(); w.next()) out.push_back(w.at(channels, c));
  return out;
}

// The GPU batchnorm kernels' division of a channel among blocks and threads (a host-compiled
// header): every element of the channel exactly once, nothing of another channel, and the same
// offsets in the same order whether taken 8 at a time or one by one.
TEST(BatchnormSplit, EveryElementOfAChannelOnceAcrossBlocksAndThreads) {
  const int64_t channels = 3, c = 1;
  for (int64_t n : {1, 2, 3, 7, 16, 33})
    for (int64_t hw : {1, 3, 16, 49, 300, 1100})
      for (int64_t threads : {256, 32, 7}) {
        const int64_t splits = cuda::bn_splits(n, hw);
        ASSERT_GE(splits, 1);
        ASSERT_LE(splits, n);
        std::vector<int> visits(size_t(n * channels * hw), 0);
        for (int64_t s = 0; s < splits; ++s)
          for (int64_t t = 0; t < threads; ++t) {
            const cuda::BnWalk start(cuda::bn_rows(n, splits, s), hw, t, threads);
            ASSERT_EQ(offsets_in_batches(start, channels, c), offsets_one_by_one(start, channels, c))
                << "n " << n << " hw " << hw << " threads " << threads << " split " << s << " thread " << t;
            for (cuda::BnWalk w = start; w.more(); w.next()) {
              const int64_t at = w.at(channels, c);
              ASSERT_GE(at, 0);
              ASSERT_LT(at, int64_t(visits.size()));
              ++visits[size_t(at)];
            }
          }
        for (int64_t k = 0; k < int64_t(visits.size()); ++k)
          ASSERT_EQ(visits[size_t(k)], (k / hw) % channels == c ? 1 : 0) << "n " << n << " hw " << hw << " threads " << threads << " at " << k;
      }
  // Big maps get more blocks, never more than one a sample; the workspace holds them.
  EXPECT_EQ(cuda::bn_splits(1024, 1024), 128);
  EXPECT_EQ(cuda::bn_splits(4, 1 << 20), 4);
  EXPECT_EQ(cuda::bn_workspace_bytes(1024, 32, 1024), 16 * 32 * 128 + 12 * 32);
}

// NHWC: the (row split, channel tile) blocks and their kBnTileC x kBnTileRows threads reach every
// element of every channel exactly once; threads past the last channel read nothing.
TEST(BatchnormSplit, NhwcTilesVisitEveryElementOnce) {
  for (int64_t rows : {1, 7, 256, 257, 3136, 300000})
    for (int64_t channels : {1, 3, 32, 40}) {
      const int64_t splits = cuda::bn_nhwc_splits(rows), tiles = cuda::bn_tiles(channels);
      ASSERT_GE(splits, 1);
      ASSERT_LE(splits, cuda::kBnMaxRowSplits);
      std::vector<int> visits(size_t(rows * channels), 0);
      for (int64_t s = 0; s < splits; ++s)
        for (int64_t tile = 0; tile < tiles; ++tile)
          for (int64_t ty = 0; ty < cuda::kBnTileRows; ++ty)
            for (int64_t tx = 0; tx < cuda::kBnTileC; ++tx) {
              const int64_t c = tile * cuda::kBnTileC + tx;
              if (c >= channels) continue;  // as the kernels skip them
              const cuda::BnRowWalk start(cuda::bn_rows(rows, splits, s), ty, cuda::kBnTileRows);
              ASSERT_EQ(offsets_in_batches(start, channels, c), offsets_one_by_one(start, channels, c))
                  << "rows " << rows << " channels " << channels << " split " << s << " row " << ty;
              for (cuda::BnRowWalk w = start; w.more(); w.next()) {
                const int64_t at = w.at(channels, c);
                ASSERT_GE(at, 0);
                ASSERT_LT(at, int64_t(visits.size()));
                ASSERT_EQ(at % channels, c);
                ++visits[size_t(at)];
              }
            }
      for (size_t k = 0; k < visits.size(); ++k) ASSERT_EQ(visits[k], 1) << "rows " << rows << " channels " << channels << " at " << k;
    }
  EXPECT_EQ(cuda::bn_nhwc_splits(300000), cuda::kBnMaxRowSplits);
  EXPECT_EQ(cuda::bn_workspace_bytes(16, 64, 196, true), 16 * 64 * cuda::bn_nhwc_splits(16 * 196) + 12 * 64);
}

// fp16's loss-scale rule (host-compiled): halve and skip on overflow, double after 2000 clean steps.
TEST(LossScaleRule, HalvesOnOverflowAndDoublesAfter2000CleanSteps) {
  cuda::LossScale ls;
  EXPECT_EQ(ls.scale, 65536.f);
  ls.found_inf = 1;
  cuda::advance_loss_scale(ls);
  EXPECT_EQ(ls.scale, 32768.f);
  EXPECT_EQ(ls.skipped, 1);
  EXPECT_EQ(ls.found_inf, 0);
  for (int i = 0; i < 1999; ++i) cuda::advance_loss_scale(ls);
  EXPECT_EQ(ls.scale, 32768.f);
  ls.found_inf = 1;  // an overflow resets the run of clean steps
  cuda::advance_loss_scale(ls);
  EXPECT_EQ(ls.scale, 16384.f);
  for (int i = 0; i < 2000; ++i) cuda::advance_loss_scale(ls);
  EXPECT_EQ(ls.scale, 32768.f);
  EXPECT_EQ(ls.skipped, 2);
}

// The choice among cuDNN's timed algorithms (a host-compiled header): the fastest allowed one
// within the workspace limit, and what the run record says about the ones passed over.
TEST(ConvChoice, TakesTheFastestAllowedWithinTheLimitAndSaysWhatItPassedOver) {
  using cuda::AlgoResult;
  constexpr size_t MB = size_t(1) << 20;
  // Fastest first, as cuDNN sorts them: a tf32 result in an fp32 search (not allowed), one over
  // the 256 MB limit, the one to take, a close one that did not run, another over the limit, and
  // the runner-up within it.
  const std::vector<AlgoResult> r{{7, 0.020, 0, false}, {6, 0.030, 1300 * MB, true}, {1, 0.050, 64 * MB, true},
                                  {0, 0.051, 0, false}, {2, 0.060, 300 * MB, true}, {3, 0.065, 8 * MB, true}};
  size_t workspace = 32 * MB;
  const int i = cuda::pick_algorithm(r, 256 * MB, workspace);
  ASSERT_EQ(i, 2);
  EXPECT_EQ(workspace, 64 * MB);  // raised to the one taken, never lowered
  EXPECT_EQ(cuda::faster_over_limit(r, i, 256 * MB, "fwd"), "fwd 6 in 0.60x the time with 1.36 GB");
  EXPECT_EQ(cuda::search_times(r, i, 256 * MB, "fwd"), "fwd 50 us, next 1.30x");  // algo 2 is over the limit too
  EXPECT_EQ(cuda::search_times(r, i, 1024 * MB, "fwd"), "fwd 50 us, next 1.20x");

  workspace = 0;  // with room for everything the fastest allowed one is taken and nothing is passed over
  EXPECT_EQ(cuda::pick_algorithm(r, 4096 * MB, workspace), 1);
  EXPECT_EQ(workspace, 1300 * MB);
  EXPECT_EQ(cuda::faster_over_limit(r, 1, 4096 * MB, "bwd-data"), "");

  // Nothing fits: none taken, the fastest over the limit named without a ratio; the last one
  // allowed has no runner-up; heuristics' results (untimed) report no search times.
  const std::vector<AlgoResult> big{{4, 0.040, 600 * MB, true}, {5, 0.045, 512 * MB, true}};
  workspace = 0;
  EXPECT_EQ(cuda::pick_algorithm(big, 256 * MB, workspace), -1);
  EXPECT_EQ(workspace, 0u);
  EXPECT_EQ(cuda::faster_over_limit(big, -1, 256 * MB, "bwd-filter"), "bwd-filter 4 in -x the time with 0.63 GB");
  EXPECT_EQ(cuda::search_times(big, -1, 256 * MB, "bwd-filter"), "");
  EXPECT_EQ(cuda::search_times(big, 1, 1024 * MB, "bwd-filter"), "bwd-filter 45 us, no other");
  const std::vector<AlgoResult> guessed{{1, -1, 0, true}, {0, -1, 0, true}};
  EXPECT_EQ(cuda::pick_algorithm(guessed, 256 * MB, workspace), 0);
  EXPECT_EQ(cuda::search_times(guessed, 0, 256 * MB, "fwd"), "");
}

// The second look (conv.cpp): which of the search's results run again on data, how their times
// there reorder them, and what the run record says when the search's first lost.
TEST(ConvChoice, RunsTheCloseCandidatesAgainAndTakesTheFastestOnData) {
  using cuda::AlgoResult;
  constexpr size_t MB = size_t(1) << 20;
  // As cuDNN sorted the recipe's conv3 backward-filter on an H100: algorithm 0 first by 9%.
  const std::vector<AlgoResult> r{{5, 0.100, 0, false}, {0, 0.230, 0, true}, {3, 0.240, 900 * MB, true}, {1, 0.251, 4 * MB, true},
                                  {2, 0.400, 0, true}, {6, 0.450, 0, true}, {7, 0.500, 0, true}};
  // Not allowed, over the limit: passed over. Within 2x of 230 us, three at most.
  EXPECT_EQ(cuda::retime_candidates(r, 256 * MB), (std::vector<int>{1, 3, 4}));
  EXPECT_EQ(cuda::retime_candidates(r, 256 * MB, 2), (std::vector<int>{1, 3}));
  EXPECT_EQ(cuda::retime_candidates(r, 256 * MB, 5), (std::vector<int>{1, 3, 4, 5}));  // 0.50 ms is over 2x
  EXPECT_EQ(cuda::retime_candidates(r, 256 * MB, 5, 1.5), (std::vector<int>{1, 3}));
  const std::vector<AlgoResult> untimed{{1, -1, 0, true}, {0, -1, 0, true}};
  EXPECT_TRUE(cuda::retime_candidates(untimed, 256 * MB).empty());

  // On data algorithm 0 took 1.47 ms, 1 took 250 us and 2 failed: 1 first, 0 next, 2 dropped.
  const std::vector<int> c{1, 3, 4};
  const std::vector<double> ms{1.470, 0.250, -1};
  const std::vector<AlgoResult> on_data = cuda::retimed(r, c, ms);
  ASSERT_EQ(on_data.size(), 2u);
  EXPECT_EQ(on_data[0].algo, 1);
  EXPECT_EQ(on_data[0].memory, 4 * MB);
  EXPECT_DOUBLE_EQ(on_data[0].time_ms, 0.250);
  EXPECT_EQ(on_data[1].algo, 0);
  EXPECT_EQ(cuda::search_times(on_data, 0, 256 * MB, "bwd-filter", " on data"), "bwd-filter 250 us on data, next 5.88x");
  EXPECT_EQ(cuda::fastest_measured(ms), 1);
  EXPECT_EQ(cuda::fastest_measured({-1, 0.3, 0.2}), 2);
  EXPECT_EQ(cuda::fastest_measured({-1, -1}), -1);
  EXPECT_EQ(cuda::fastest_measured({}), -1);
  EXPECT_EQ(cuda::overturned(r, c, ms, on_data, "bwd-filter"), "bwd-filter 0, first in cuDNN's search (230 us there), took 1470 us on data");
  // The search's first stayed first: nothing to say.
  const std::vector<double> agreed{0.240, 0.250, 0.300};
  EXPECT_EQ(cuda::overturned(r, c, agreed, cuda::retimed(r, c, agreed), "bwd-filter"), "");
  // The search's first failed on data.
  const std::vector<double> failed{-1, 0.250, 0.300};
  EXPECT_EQ(cuda::overturned(r, c, failed, cuda::retimed(r, c, failed), "fwd"),
            "fwd 0, first in cuDNN's search (230 us there), took an error on data");
}

TEST(Cuda, PowerMeterSaysWhyItHasNoReading) {
  hw::GpuPowerMeter m("0");
  if (!m.available()) {
    EXPECT_FALSE(m.why_not().empty());
    EXPECT_EQ(m.joules(), 0);
    return;
  }
  EXPECT_GT(m.watts(), 0);  // a GPU board draws power even when idle
  EXPECT_GE(m.joules(), 0);
  // A window from the counter's updates (about every 100 ms on an H100), which a thread watches.
  const double a = now_s();
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  const double b = now_s();
  const auto e = m.energy(a, b, 2.0);
  ASSERT_TRUE(e) << "no NVML energy counter update within 2 s of the window's end";
  EXPECT_GT(e->updates, 0);
  EXPECT_LE(e->low, e->joules);
  EXPECT_GE(e->high, e->joules);
  const double idle_w = e->joules / (b - a);
  EXPECT_GT(idle_w, 10);   // an idle data-centre board draws tens of watts
  EXPECT_LT(idle_w, 1500);  // and no board draws this much
  EXPECT_GT(m.update_period_s(), 0);
  EXPECT_LT(m.update_period_s(), 0.6);
  std::printf("NVML energy counter: moved every %.1f ms; idle board %.0f W (%.1f J in %.2f s, range %.1f-%.1f J over %d updates)\n",
              1e3 * m.update_period_s(), idle_w, e->joules, b - a, e->low, e->high, e->updates);
}

#ifdef DLPERF_HAVE_CUDA

#else

TEST(Cuda, KernelsNeedTheCudaBackend) { GTEST_SKIP() << "built without the CUDA backend: " << cuda::why_no_device(); }

#endif

}  // namespace
}  // namespace dlperf::test
