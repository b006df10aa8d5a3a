// CPU package energy from RAPL (Linux powercap: /sys/class/powercap/intel-rapl:N/energy_uj, which
// AMD Zen CPUs expose too). Readable only where the kernel has the driver and the file is
// readable (often root only); elsewhere `available()` is false and records say why.
#pragma once

#include <string>
#include <vector>

namespace dlperf::hw {

class EnergyMeter {
 public:
  EnergyMeter();
  bool available() const { return !zones_.empty(); }
  /// Why there is no reading, when !available().
  const std::string& why_not() const { return why_; }
  /// Joules used by all CPU packages since construction (handles counter wrap-around).
  double joules();

 private:
  struct Zone {
    std::string path;
    double max_uj = 0, last_uj = 0, total_j = 0;
  };
  std::vector<Zone> zones_;
  std::string why_;
};

}  // namespace dlperf::hw
