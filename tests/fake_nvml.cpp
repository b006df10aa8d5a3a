// A stand-in for the NVIDIA driver's NVML (libnvidia-ml.so.1) with the entry points dlperf's
// power meter reads (src/hw/nvml.cpp), so that the meter, its sampler thread and the GPU trainer's
// per-epoch energy run on machines without a GPU: the tests load it by path, and the emulated GPU
// tests find it first on LD_LIBRARY_PATH (tests/CMakeLists.txt).
//
// The board draws a constant power, and its energy counter moves in steps, once per update period
// (an H100's moves about every 100 ms), as the real one does. Calls outside nvmlInit_v2 ..
// nvmlShutdown, or a shutdown without an init, are counted as misuse, which the tests check is 0.
// Built twice: as this NVML, and with FAKE_NVML_WITHOUT_ENERGY as an old driver's, which lacks the
// energy counter's entry point.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>

namespace {

using Clock = std::chrono::steady_clock;
const Clock::time_point loaded = Clock::now();

std::mutex mutex;  // guards the settings and the PCI id; reads of the counter take it too
int init_rc = 0, handle_rc = 0, energy_rc = 0;
double board_watts = 250, update_period_s = 0.02;
std::string asked_pci;
std::atomic<int> inits{0}, misuse{0};
int board = 0;  // what a device handle points at

bool in_use() {
  if (inits.load() > 0) return true;
  ++misuse;
  return false;
}

}  // namespace

extern "C" {

// What the next calls return: NVML error codes (0 = success) for init, getting a handle and
// reading the energy counter; the board's watts and how often its counter moves.
void fake_nvml_configure(int init, int handle, int energy, double watts, double period_s) {
  const std::lock_guard lock(mutex);
  init_rc = init, handle_rc = handle, energy_rc = energy;
  board_watts = watts, update_period_s = period_s;
}
int fake_nvml_initialized() { return inits.load(); }  ///< inits not yet shut down
int fake_nvml_misuse() { return misuse.load(); }
void fake_nvml_last_pci(char* out, int n) {
  const std::lock_guard lock(mutex);
  std::strncpy(out, asked_pci.c_str(), size_t(n - 1));
  out[n - 1] = 0;
}

int nvmlInit_v2() {
  const std::lock_guard lock(mutex);
  if (init_rc == 0) ++inits;
  return init_rc;
}

int nvmlShutdown() {
  if (inits.load() <= 0) {
    ++misuse;
    return 1;  // NVML_ERROR_UNINITIALIZED
  }
  --inits;
  return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int /*index*/, void** device) {
  const std::lock_guard lock(mutex);
  if (!in_use()) return 1;
  asked_pci.clear();
  if (handle_rc != 0) return handle_rc;
  *device = &board;
  return 0;
}

int nvmlDeviceGetHandleByPciBusId_v2(const char* pci, void** device) {
  const std::lock_guard lock(mutex);
  if (!in_use()) return 1;
  asked_pci = pci;
  if (handle_rc != 0) return handle_rc;
  *device = &board;
  return 0;
}

#ifndef FAKE_NVML_WITHOUT_ENERGY
// Millijoules since the library loaded, as of the counter's last update.
int nvmlDeviceGetTotalEnergyConsumption(void* device, unsigned long long* mj) {
  const std::lock_guard lock(mutex);
  if (!in_use() || device != &board) return 1;
  if (energy_rc != 0) return energy_rc;
  const double s = std::chrono::duration<double>(Clock::now() - loaded).count();
  *mj = static_cast<unsigned long long>(board_watts * 1e3 * std::floor(s / update_period_s) * update_period_s);
  return 0;
}
#endif

int nvmlDeviceGetPowerUsage(void* device, unsigned int* mw) {
  const std::lock_guard lock(mutex);
  if (!in_use() || device != &board) return 1;
  *mw = static_cast<unsigned int>(board_watts * 1e3);
  return 0;
}

}  // extern "C"
