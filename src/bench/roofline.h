// The empirical roofline: measured ceilings (a compute peak per precision, and one bandwidth line
// per memory level) with the passes of a model's training step placed on them. A pass's
// arithmetic intensity is its FLOPs over its minimum bytes moved (from the op cost model); its
// height is FLOPs over the time measured for it: by --layer-times on the CPU, by the profiler's
// CUDA events on a GPU.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace dlperf::bench {

struct RooflinePoint {
  std::string layer, pass;  ///< forward | backward, or the profile row's phase
  double flops = 0, bytes = 0, seconds = 0;
  /// Of flops, a convolution's taps on zero padding, which the CPU engine (oneDNN) skips: a CPU
  /// point stands at the work it ran, so that none reads above the peak for work never done.
  double padding_flops = 0;
  double intensity() const { return (flops - padding_flops) / bytes; }
  double gflops() const { return (flops - padding_flops) / seconds / 1e9; }
};

/// A horizontal compute roof: "fp32 GEMM", "FMA peak", ...
struct ComputeCeiling {
  std::string label;
  double gflops = 0;
};

/// Points from a run record's "layer_times" (passes with no FLOPs are left out).
std::vector<RooflinePoint> roofline_points(const nlohmann::json& layer_times);
/// Points from a profile report's rows (`dlperf profile`, grouped by layer): every layer pass
/// with FLOPs, bytes and device time.
std::vector<RooflinePoint> roofline_points_from_profile(const nlohmann::json& profile);
/// The attainable GFLOP/s at `intensity` under the bandwidth of `level_gbps` and `peak_gflops`.
double roof(double intensity, double peak_gflops, double level_gbps);

/// Writes <stem>.csv (points), <stem>.gp (gnuplot script) and, when gnuplot is there,
/// <stem>.png. The bandwidth lines (levels L1, L2, L3, DRAM, HBM, those present) bend into
/// `peaks[0]`; further peaks are drawn as dashed lines. Returns the paths written.
std::vector<std::string> write_roofline(const std::vector<RooflinePoint>& points, const std::vector<ComputeCeiling>& peaks,
                                        const nlohmann::json& bandwidth_gbps, const std::string& stem,
                                        const std::string& title, bool draw);

/// What `dlperf bench roofline` measures.
struct RooflineRequest {
  std::string model = "medium", data = "fashion-mnist";
  int64_t batch = 64, steps = 30;
  std::string device = "auto";     ///< cpu | cuda[:N] | auto
  std::string precision = "fp32";  ///< the step's: a GPU's four, or the CPU's fp32 and (AVX512-BF16) bf16
  int threads = 0;                 ///< CPU compute threads (0 = all)
};

struct Roofline {
  std::vector<RooflinePoint> points;
  std::vector<ComputeCeiling> peaks;  ///< [0]: the run's precision
  nlohmann::json bandwidth_gbps;      ///< per level
  /// What each cache level holds for the threads used (CPU: "L2" = L2 per core x threads, "L3");
  /// empty on a GPU, whose passes are all read against HBM.
  nlohmann::json level_bytes = nlohmann::json::object();
  std::string device, model;          ///< "cpu" or "cuda:N"; the model's name
  std::string processor;              ///< the CPU or GPU model
  std::string ceilings_source;        ///< where the ceilings come from (measured, datasheet, counted)
  /// On a GPU, the profiler's unsteady-steps note (profile::unsteady_note): some steps ran slow,
  /// and every point's time sums them in. "" when steady, and on the CPU, where `dlperf bench`
  /// already says when other processes shared the CPUs (hw::busy_note over the whole command).
  std::string note;
};

/// The memory level a pass moving `bytes` is read against, as `dlperf plan` reads it: the threads'
/// L2 when the bytes fit there, else L3, else DRAM (HBM on a GPU), among the levels with a rate.
/// A pass that fits in a cache is held to that cache's roof, not to DRAM's, which it can beat.
std::string level_for(double bytes, const Roofline& r);

/// Trains `steps` steps and times every layer pass: on the CPU with --layer-times, against the
/// machine profile's measured ceilings (measured quickly now when there are none for this CPU
/// and thread count); on a GPU with the profiler, against the GPU's measured ceilings
/// (dlperf bench all), else its datasheet's.
Roofline measure_roofline(const RooflineRequest& r);

}  // namespace dlperf::bench
