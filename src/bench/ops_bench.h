// GEMM and convolution throughput on the CPU, through the same oneDNN code paths the engine
// uses: GEMM over a sweep of shapes (square, and the dense layers of training), convolutions
// for the presets' layers (forward, backward-data and backward-weights timed separately). Both
// sweeps run in rounds, as the memory sweep does (kRounds), and each figure is its best round's
// median.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "bench/cpu_bench.h"
#include "core/timer.h"
#include "ops/op.h"

namespace dlperf::bench {

struct GemmPoint {
  int64_t m = 0, n = 0, k = 0;
  Spread gflops;                 ///< over every sample of every round
  double best_round_gflops = 0;  ///< the best round's median: the point's figure
  int repeats = 0;               ///< samples per round
  int rounds = 0;
  double max_rel_error = 0;  ///< sampled outputs against a float64 dot product
  int rotated_sets = 1;      ///< input copies the repeats rotate over (2x the last-level cache)
  int threads = 0;           ///< the threads oneDNN ran it on (omp_get_max_threads when measured)
};
/// FLOPs of C[m,n] = A[m,k] B[k,n]: 2mnk.
double gemm_flops(int64_t m, int64_t n, int64_t k);
std::vector<GemmPoint> gemm_sweep(const Options& o);

struct ConvPoint {
  std::string model, layer;
  Dims input;  ///< N, C, H, W
  ops::OpAttrs attrs;
  /// Each pass's figure, its best round's median. Backward-data is derived from two such
  /// figures (backward with the data gradient, minus backward without it): 0 for a first
  /// layer, which computes no data gradient.
  double forward_gflops = 0, backward_data_gflops = 0, backward_weights_gflops = 0;
  Spread forward_samples{}, backward_weights_samples{};  ///< over every sample of every round
  int repeats = 0;  ///< samples per round, of each pass
  int rounds = 0;
  double max_rel_error = 0;  ///< of sampled outputs of the three passes against float64
  int rotated_sets = 1;      ///< copies of the tensors the calls cycle through (2x the L3)
  int threads = 0;           ///< the threads oneDNN ran it on (omp_get_max_threads when measured)
  /// The input layout it read: training's (cpu::given_input_layouts), "nchw" for a first layer,
  /// oneDNN's channel blocks ("nChw16c" on AVX-512, "nChw8c" on AVX2) after it.
  std::string input_layout{};
  /// How the engine's conv computed: "direct", "winograd" (cpu::conv_runs_winograd), whose
  /// passes do fewer multiply-adds than counted, so their GFLOP/s can pass the FMA peak, or "amx"
  /// (bf16 on AMX tiles, far beyond it).
  std::string algorithm{};
  /// Of the counted multiply-adds, the share on the zero padding, which oneDNN skips
  /// (ops::PassCost::padding_flops): % of peak counts the rest.
  double padding_share() const { return 1 - ops::conv_taps_on_data_share(attrs, input); }
};
/// The largest error of 16 sampled outputs of each of a conv's passes (forward y, weight
/// gradient dw, data gradient dx) against float64 sums, each relative to the sum of its terms'
/// magnitudes. x [N, C, H, W], w [K, C, R, R], b [K] or empty, dy and y [N, K, OH, OW]; all
/// plain row-major; dx empty for a layer that computes none.
double conv_max_rel_error(const Dims& x_dims, const ops::OpAttrs& a, const std::vector<float>& x, const std::vector<float>& w,
                          const std::vector<float>& b, const std::vector<float>& y, const std::vector<float>& dy,
                          const std::vector<float>& dw, const std::vector<float>& dx);
/// The distinct conv layers of `models` at `batch` on input `chw`, each timed per pass, each
/// pass validated (conv_max_rel_error < 1e-5), the tensors rotated over copies spanning 2x the L3.
std::vector<ConvPoint> conv_sweep(const Options& o, const std::vector<std::string>& models, const Dims& chw, int64_t batch);

/// What one call into the CPU engine costs beyond its work: the CPU's counterpart of a GPU's
/// kernel launch latency, and the plan's per-pass overhead. A oneDNN relu on 1,024 floats (the
/// mlp's hidden layer at batch 16, where the work takes nanoseconds) runs through the engine's
/// call path (cpu::run: argument map, scratchpad, execute on the OpenMP threads, wait) back to back.
struct DispatchResult {
  int threads = 0;
  Spread us;         ///< microseconds a call; each sample the mean over `calls` calls, or fewer where they pass 10 ms
  int repeats = 0, calls = 0;
};
/// Calls `call` up to `most` times, or until `seconds` have passed (the clock is read every 4
/// calls, so calls of a microsecond are timed with little of the clock in them); returns the
/// calls made per second. Where another process keeps the other cores busy, a call into the
/// engine waits for a time slice (about 10 ms on the 2-core VM while a second training run shared
/// it): uncapped, the 2,500 calls of one measurement took 25 s, at the start and end of every run.
template <class F>
double calls_per_s_within(int most, double seconds, F&& call) {
  const double t0 = now_s();
  int done = 0;
  while (done < most && (done % 4 != 0 || now_s() - t0 < seconds)) {
    call();
    ++done;
  }
  return done / (now_s() - t0);
}
/// On `threads` OpenMP threads (0: as many as OpenMP runs now); the relu's outputs are checked;
/// each sample stops after 10 ms (calls_per_s_within).
DispatchResult cpu_dispatch(const Options& o);
/// A call's cost now, in a few ms: cpu_dispatch --quick's fastest sample, the figure plan and
/// the machine profile take (another process's time slices only ever slow a sample down).
double cpu_call_now_us(int threads);

nlohmann::json to_json(const GemmPoint& p);
nlohmann::json to_json(const ConvPoint& p);
nlohmann::json to_json(const DispatchResult& r);

}  // namespace dlperf::bench
