// The CUDA runtime interface in a build without the CUDA backend: no devices, and why.
#include <fmt/format.h>

#include "backend/cuda/runtime.h"
#include "core/error.h"

namespace dlperf::cuda {

bool built() { return false; }
int device_count() { return 0; }
std::string why_no_device() {
  return "this dlperf build has no CUDA backend (CMake found no CUDA toolkit with cuDNN when it was configured)";
}
GpuInfo gpu_info(int index) { throw Error(fmt::format("no GPU {}: {}", index, why_no_device())); }
nlohmann::json to_json(const GpuInfo&) { return nlohmann::json::object(); }
nlohmann::json gpus_json() { return nlohmann::json::array(); }

int resolve_device(const std::string& flag) {
  if (flag == "cpu" || flag == "auto") return -1;
  check(flag == "cuda" || flag.rfind("cuda:", 0) == 0, fmt::format("--device {} is not auto, cpu, cuda or cuda:N", flag));
  throw Error(fmt::format("--device {}: {}", flag, why_no_device()),
              "rebuild on a machine with the CUDA toolkit and cuDNN (see README), or use --device cpu");
}

CachingAllocator& device_allocator(int) { throw Error("no GPU memory: " + why_no_device()); }

}  // namespace dlperf::cuda
