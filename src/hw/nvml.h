// GPU power and energy from NVML, loaded at run time with dlopen: machines without the NVIDIA
// driver need no NVML to build or run dlperf, and say why there is no reading.
#pragma once

#include <string>

namespace dlperf::hw {

class GpuPowerMeter {
 public:
  /// `device`: a PCI bus id ("0000:41:00.0", as cudaDeviceGetPCIBusId gives, which matches
  /// CUDA's numbering whatever CUDA_DEVICE_ORDER says) or an NVML index ("0").
  explicit GpuPowerMeter(const std::string& device);
  ~GpuPowerMeter();
  GpuPowerMeter(const GpuPowerMeter&) = delete;
  GpuPowerMeter& operator=(const GpuPowerMeter&) = delete;

  bool available() const { return device_ != nullptr; }
  const std::string& why_not() const { return why_; }
  /// Joules since construction, from the board's energy counter (Volta and later).
  double joules() const;
  /// The board's power draw now, in watts.
  double watts() const;

 private:
  void* lib_ = nullptr;
  void* device_ = nullptr;
  unsigned long long start_mj_ = 0;
  std::string why_;
  int (*energy_)(void*, unsigned long long*) = nullptr;
  int (*power_)(void*, unsigned int*) = nullptr;
};

}  // namespace dlperf::hw
