#include "hw/energy.h"

#include <filesystem>
#include <fstream>

namespace dlperf::hw {

namespace fs = std::filesystem;

namespace {
bool read_number(const std::string& path, double& out) {
  std::ifstream f(path);
  return bool(f >> out);
}
}  // namespace

EnergyMeter::EnergyMeter() {
  const fs::path root = "/sys/class/powercap";
  std::error_code ec;
  if (!fs::exists(root, ec)) {
    why_ = "no RAPL energy counters on this machine (no /sys/class/powercap; virtual machines rarely expose them)";
    return;
  }
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    // Package zones are intel-rapl:N; their sub-zones (intel-rapl:N:M) are parts of them.
    if (name.rfind("intel-rapl:", 0) != 0 || name.find(':', 11) != std::string::npos) continue;
    Zone z;
    z.path = (e.path() / "energy_uj").string();
    if (!read_number(z.path, z.last_uj)) {
      why_ = "the RAPL energy counters are not readable by this user (" + z.path + "; root can read them)";
      continue;
    }
    read_number((e.path() / "max_energy_range_uj").string(), z.max_uj);
    zones_.push_back(z);
  }
  if (zones_.empty() && why_.empty()) why_ = "no RAPL package zones under /sys/class/powercap";
}

double EnergyMeter::joules() {
  double total = 0;
  for (Zone& z : zones_) {
    double now = 0;
    if (read_number(z.path, now)) {
      const double delta = now >= z.last_uj ? now - z.last_uj : now + z.max_uj - z.last_uj;  // wrapped
      z.total_j += delta / 1e6;
      z.last_uj = now;
    }
    total += z.total_j;
  }
  return total;
}

}  // namespace dlperf::hw
