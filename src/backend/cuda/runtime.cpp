// The CUDA runtime interface with the CUDA backend built in.
#include "backend/cuda/runtime.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <limits>
#include <map>
#include <memory>
#include <mutex>

#include "core/error.h"

namespace dlperf::cuda {

namespace {
std::string no_device_reason;
}

bool built() { return true; }

int device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    no_device_reason = ::access("/dev/nvidia0", F_OK) != 0
                           ? "no NVIDIA GPU on this machine (no /dev/nvidia0)"
                           : fmt::format("the CUDA runtime finds no usable GPU: {}", cudaGetErrorString(e));
    cudaGetLastError();  // clear it
    return 0;
  }
  if (n == 0) no_device_reason = "the CUDA driver reports no GPU";
  return n;
}

std::string why_no_device() {
  if (device_count() > 0) return "";
  return no_device_reason;
}

GpuInfo gpu_info(int index) {
  check(index >= 0 && index < device_count(), fmt::format("there is no GPU {} ({} visible)", index, device_count()),
        "use --device cuda:N with N from nvidia-smi, or --device cpu");
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, index) == cudaSuccess, fmt::format("cannot read the properties of GPU {}", index));
  GpuInfo g;
  g.index = index;
  g.name = p.name;
  g.sm_count = p.multiProcessorCount;
  g.cc_major = p.major;
  g.cc_minor = p.minor;
  g.memory_bytes = double(p.totalGlobalMem);
  g.bus_width_bits = p.memoryBusWidth;
  cudaDriverGetVersion(&g.driver_version);
  cudaRuntimeGetVersion(&g.runtime_version);
  int khz = 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, index) == cudaSuccess) g.clock_mhz = khz / 1e3;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, index) == cudaSuccess) g.memory_clock_mhz = khz / 1e3;
  g.peak_bandwidth_gbps = 2.0 * g.memory_clock_mhz * 1e6 * g.bus_width_bits / 8 / 1e9;
  return g;
}

nlohmann::json to_json(const GpuInfo& g) {
  auto version = [](int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); };
  return {{"index", g.index},
          {"name", g.name},
          {"sm_count", g.sm_count},
          {"compute_capability", fmt::format("{}.{}", g.cc_major, g.cc_minor)},
          {"memory_bytes", g.memory_bytes},
          {"driver_version", version(g.driver_version)},
          {"runtime_version", version(g.runtime_version)},
          {"clock_mhz", g.clock_mhz},
          {"memory_clock_mhz", g.memory_clock_mhz},
          {"bus_width_bits", g.bus_width_bits},
          {"peak_bandwidth_gbps", g.peak_bandwidth_gbps}};
}

nlohmann::json gpus_json() {
  nlohmann::json out = nlohmann::json::array();
  for (int i = 0; i < device_count(); ++i) out.push_back(to_json(gpu_info(i)));
  return out;
}

int resolve_device(const std::string& flag) {
  if (flag == "cpu") return -1;
  if (flag == "auto") return device_count() > 0 ? 0 : -1;
  int index = 0;
  if (flag != "cuda") {
    check(flag.rfind("cuda:", 0) == 0 && flag.size() > 5 && flag.find_first_not_of("0123456789", 5) == std::string::npos,
          fmt::format("--device {} is not auto, cpu, cuda or cuda:N", flag));
    // from_chars, not stoi: a number past int's range is an index past the last GPU, not an exception.
    const auto [end, ec] = std::from_chars(flag.data() + 5, flag.data() + flag.size(), index);
    if (ec != std::errc()) index = std::numeric_limits<int>::max();
  }
  const int n = device_count();
  check(n > 0, fmt::format("--device {}: {}", flag, no_device_reason), "use --device cpu, or run on a machine with an NVIDIA GPU");
  check(index < n, fmt::format("--device {}: there {} (0 to {})", flag, n == 1 ? "is 1 GPU" : fmt::format("are {} GPUs", n), n - 1),
        "use --device cuda:N with N from nvidia-smi");
  return index;
}

CachingAllocator& device_allocator(int device) {
  static std::mutex m;
  static std::map<int, std::unique_ptr<CachingAllocator>> allocators;
  std::lock_guard lock(m);
  auto& a = allocators[device];
  if (!a) {
    check(device >= 0 && device < device_count(), fmt::format("there is no GPU {}", device));
    // cudaMalloc on the current device; callers set the device before allocating.
    a = std::make_unique<CachingAllocator>(
        [](size_t bytes) -> void* {
          void* p = nullptr;
          if (cudaMalloc(&p, bytes) != cudaSuccess) {
            cudaGetLastError();
            return nullptr;
          }
          return p;
        },
        [](void* p) { cudaFree(p); }, fmt::format("GPU {}", device));
  }
  return *a;
}

}  // namespace dlperf::cuda
