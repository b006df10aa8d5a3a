// The empirical roofline: measured ceilings (the FMA peak, and one bandwidth line per memory
// level) with the passes of a model's training step placed on them. A pass's arithmetic
// intensity is its FLOPs over its minimum bytes moved (from the op cost model); its height is
// FLOPs over the time measured for it.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace dlperf::bench {

struct RooflinePoint {
  std::string layer, pass;  ///< pass: forward | backward
  double flops = 0, bytes = 0, seconds = 0;
  double intensity() const { return flops / bytes; }
  double gflops() const { return flops / seconds / 1e9; }
  /// The roof at this intensity: min(peak, intensity x the slowest level's bandwidth it exceeds).
};

/// Points from a run record's "layer_times" (passes with no FLOPs are left out).
std::vector<RooflinePoint> roofline_points(const nlohmann::json& layer_times);
/// The attainable GFLOP/s at `intensity` under the bandwidth of `level_gbps` and `peak_gflops`.
double roof(double intensity, double peak_gflops, double level_gbps);

/// Writes <stem>.csv (points), <stem>.gp (gnuplot script) and, when gnuplot is there,
/// <stem>.png. Returns the paths written.
std::vector<std::string> write_roofline(const std::vector<RooflinePoint>& points, double peak_gflops,
                                        const nlohmann::json& bandwidth_gbps, const std::string& stem,
                                        const std::string& title, bool draw);

}  // namespace dlperf::bench
