#pragma once
// What `dlperf bench` was asked (cmd_bench.cpp), shared with the runners of its GPU benchmarks
// (bench_gpu.cpp).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/cpu_bench.h"

namespace dlperf::cli {

struct BenchArgs {
  std::vector<std::string> what = {"all"};  ///< the benchmarks asked for ("bench gemm conv")
  bench::Options opt;
  /// Whether any of `names` was asked for.
  bool asked(const std::vector<std::string>& names) const {
    return std::any_of(what.begin(), what.end(), [&](const std::string& w) { return std::find(names.begin(), names.end(), w) != names.end(); });
  }
  std::string what_text() const { return fmt::format("{}", fmt::join(what, " ")); }
  std::string json_path;
  std::string models = "small,medium,large,resnet18";
  bool models_given = false;  ///< --models named: --quick times them instead of medium alone
  std::string input = "3x32x32";
  int64_t batch = 64;
  std::string model = "medium";  ///< roofline
  std::string data = "fashion-mnist";
  int64_t steps = 30;
  int ranks = 2;  ///< allreduce
  std::vector<int> workers;  ///< loader; empty: data::worker_counts of the cores
  int gpu = 0;    ///< the GPU benchmarks
  std::string device = "auto";     ///< roofline
  std::string precision = "fp32";  ///< roofline on a GPU
  std::vector<std::string> failures;  ///< benchmarks that failed, said again at the end (non-zero exit)
};

/// Runs one benchmark that is new to the machine it may run on (the GPU ones, the CPU's bf16); a
/// failure (a library refusing, wrong results) is printed and recorded in the JSON and
/// `a.failures`, and the other benchmarks still run and are written: on a first run on a new GPU
/// or CPU, one refusing part must not lose the rest.
nlohmann::json guarded(BenchArgs& a, const std::string& what, const std::function<nlohmann::json()>& run);

// The points of a GPU benchmark that failed, under its table, and into `a.failures`.
template <class Point>
void say_failed_points(BenchArgs& a, const std::string& what, const std::vector<Point>& pts,
                       const std::function<std::string(const Point&)>& label) {
  for (const auto& p : pts)
    if (!p.failed.empty()) {
      std::printf("  %s failed: %s\n", label(p).c_str(), p.failed.c_str());
      a.failures.push_back(what + " " + label(p) + ": " + p.failed);
    }
}

/// The models whose convolutions `bench conv` times: --models, or medium alone with --quick
/// unless --models was named.
std::vector<std::string> conv_models(const BenchArgs& a);

// The GPU benchmarks (bench_gpu.cpp). Without a GPU (or the CUDA backend) each says why and
// returns {"skipped": why}.

/// What `bench copy|launch|gpu-memory` measures, as its skipped or failed line names it.
const char* gpu_bench_title(const std::string& what);
/// Host<->device copies ("copy"), launch latency ("launch") or device-memory bandwidth ("gpu-memory").
nlohmann::json run_gpu(const std::string& what, const BenchArgs& a);
/// cuBLASLt GEMM per precision, beside the datasheet's peak where the catalog knows the GPU.
nlohmann::json run_gpu_gemm(BenchArgs& a);
/// cuDNN convolutions of conv_models' layers, per precision.
nlohmann::json run_gpu_conv(BenchArgs& a);
/// f32 all-reduce over NCCL across every visible GPU, as nccl-tests reports it.
nlohmann::json run_nccl(const BenchArgs& a);

}  // namespace dlperf::cli
