// GPU micro-benchmarks in a build without the CUDA backend: none, and why.
#include "bench/gpu_bench.h"
#include "backend/cuda/runtime.h"
#include "core/error.h"

namespace dlperf::bench::gpu {

bool available() { return false; }
std::string why_not() { return cuda::why_no_device(); }
std::vector<CopyPoint> copies(int, double, int) { throw Error("no GPU to benchmark: " + why_not()); }
LaunchResult launch_latency(int, int, int) { throw Error("no GPU to benchmark: " + why_not()); }
std::vector<DeviceBandwidth> device_bandwidth(int, double, int) { throw Error("no GPU to benchmark: " + why_not()); }
std::vector<GemmPoint> gemm(int, const std::vector<int64_t>&, int) { throw Error("no GPU to benchmark: " + why_not()); }
nlohmann::json to_json(const std::vector<GemmPoint>&) { return nlohmann::json::array(); }
std::vector<AllReducePoint> nccl_allreduce(double, int, int& gpus, std::string& why) {
  gpus = 0;
  why = why_not();
  return {};
}
std::vector<ConvPoint> conv(int, const std::vector<std::string>&, const std::vector<int64_t>&, int64_t, int) {
  throw Error("no GPU to benchmark: " + why_not());
}
nlohmann::json to_json(const std::vector<ConvPoint>&) { return nlohmann::json::array(); }
nlohmann::json to_json(const std::vector<CopyPoint>&) { return nlohmann::json::array(); }
nlohmann::json to_json(const LaunchResult&) { return nlohmann::json::object(); }
nlohmann::json to_json(const std::vector<DeviceBandwidth>&) { return nlohmann::json::array(); }

}  // namespace dlperf::bench::gpu
