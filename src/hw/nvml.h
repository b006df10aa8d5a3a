// GPU power and energy from NVML, loaded at run time with dlopen: machines without the NVIDIA
// driver need no NVML to build or run dlperf, and say why there is no reading.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "hw/energy_trace.h"

namespace dlperf::hw {

class GpuPowerMeter {
 public:
  /// `device`: a PCI bus id ("0000:41:00.0", as cudaDeviceGetPCIBusId gives, which matches
  /// CUDA's numbering whatever CUDA_DEVICE_ORDER says) or an NVML index ("0"). `library`: the
  /// NVML to load, by name (the driver's, found as the dynamic loader finds libraries) or by path
  /// (the tests' stand-in, tests/fake_nvml.cpp).
  explicit GpuPowerMeter(const std::string& device, const std::string& library = "libnvidia-ml.so.1");
  ~GpuPowerMeter();
  GpuPowerMeter(const GpuPowerMeter&) = delete;
  GpuPowerMeter& operator=(const GpuPowerMeter&) = delete;

  bool available() const { return device_ != nullptr; }
  const std::string& why_not() const { return why_; }
  /// Joules since construction, from the board's energy counter (Volta and later), as read now:
  /// it lags by up to one of the counter's updates (about 100 ms), so time a window with `energy`.
  double joules() const;
  /// The board's energy over [a, b] (now_s() times, core/timer.h) from the counter's updates,
  /// which a thread watches every 5 ms (energy_trace.h), waiting up to `wait_s` for the update
  /// after `b`; none when unavailable or when no update came.
  std::optional<EnergyReading> energy(double a, double b, double wait_s = 0.5);
  /// How often the counter moved: the median seconds between its updates (0 until seen twice).
  double update_period_s() const;
  /// The board's power draw now, in watts.
  double watts() const;

 private:
  void* lib_ = nullptr;
  void* device_ = nullptr;
  bool initialized_ = false;  ///< nvmlInit_v2 succeeded: nvmlShutdown is owed
  unsigned long long start_mj_ = 0;
  std::string why_;
  int (*energy_)(void*, unsigned long long*) = nullptr;
  int (*power_)(void*, unsigned int*) = nullptr;
  std::unique_ptr<EnergySampler> sampler_;  ///< while available()
};

}  // namespace dlperf::hw
