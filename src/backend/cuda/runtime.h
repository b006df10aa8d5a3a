// The CUDA runtime as dlperf uses it: which GPUs there are and what they are, --device parsing,
// and device memory from a caching allocator that counts bytes by category (the same counting
// as the host's). Declared in every build; a build without the CUDA backend (runtime_stub.cpp)
// has no devices, and says why.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/memory.h"

namespace dlperf::cuda {

/// Whether this binary has the CUDA backend.
bool built();
/// GPUs the CUDA driver shows this process; 0 without a driver or device (never throws).
int device_count();
/// Why device_count() is 0.
std::string why_no_device();

struct GpuInfo {
  int index = 0;
  std::string name;
  int sm_count = 0, cc_major = 0, cc_minor = 0;
  double memory_bytes = 0;
  int driver_version = 0, runtime_version = 0;  ///< e.g. 13000 for 13.0
  double clock_mhz = 0, memory_clock_mhz = 0;
  int bus_width_bits = 0;
  double peak_bandwidth_gbps = 0;  ///< 2 x memory clock x bus width (DDR)
};
GpuInfo gpu_info(int index);
nlohmann::json to_json(const GpuInfo& g);
/// Every visible GPU; [] when there is none.
nlohmann::json gpus_json();

/// Parses --device: "cpu" -> -1; "cuda" or "cuda:N" -> N (throws Error when the build or the
/// machine has no such GPU); "auto" -> GPU 0 when there is one, else -1.
int resolve_device(const std::string& flag);

/// The allocator of GPU `device`'s memory (cudaMalloc underneath). Only with the backend.
CachingAllocator& device_allocator(int device);

}  // namespace dlperf::cuda
