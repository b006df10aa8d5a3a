#include "hw/nvml.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <limits>

namespace dlperf::hw {

// The few NVML entry points used, with their C signatures (nvml.h; NVML_SUCCESS is 0). Declared
// here rather than included so that building needs no NVIDIA headers.
namespace {
using InitFn = int (*)();
using ByIndexFn = int (*)(unsigned int, void**);
using ByPciFn = int (*)(const char*, void**);
using EnergyFn = int (*)(void*, unsigned long long*);
using PowerFn = int (*)(void*, unsigned int*);
}  // namespace

GpuPowerMeter::GpuPowerMeter(const std::string& device, const std::string& library) {
  lib_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib_) {
    why_ = fmt::format("NVML ({}, part of the NVIDIA driver) is not installed here", library);
    return;
  }
  auto init = reinterpret_cast<InitFn>(dlsym(lib_, "nvmlInit_v2"));
  auto by_index = reinterpret_cast<ByIndexFn>(dlsym(lib_, "nvmlDeviceGetHandleByIndex_v2"));
  auto by_pci = reinterpret_cast<ByPciFn>(dlsym(lib_, "nvmlDeviceGetHandleByPciBusId_v2"));
  energy_ = reinterpret_cast<EnergyFn>(dlsym(lib_, "nvmlDeviceGetTotalEnergyConsumption"));
  power_ = reinterpret_cast<PowerFn>(dlsym(lib_, "nvmlDeviceGetPowerUsage"));
  if (!init || !by_index || !by_pci || !energy_ || !power_) {
    why_ = "this NVML lacks the functions dlperf reads (driver too old)";
    return;
  }
  if (int rc = init(); rc != 0) {
    why_ = fmt::format("NVML did not initialize (error {})", rc);
    return;
  }
  initialized_ = true;  // shut down again however the rest goes: NVML counts its inits
  void* handle = nullptr;
  const bool pci = device.find(':') != std::string::npos;
  const int rc = pci ? by_pci(device.c_str(), &handle) : by_index(unsigned(std::atoi(device.c_str())), &handle);
  if (rc != 0) {
    why_ = fmt::format("NVML has no GPU {} (error {})", device, rc);
    return;
  }
  if (energy_(handle, &start_mj_) != 0) {
    why_ = "this GPU has no NVML energy counter (Volta or later needed)";
    return;
  }
  device_ = handle;
  sampler_ = std::make_unique<EnergySampler>(
      [this]() -> std::optional<double> {
        unsigned long long mj = 0;
        if (energy_(device_, &mj) != 0) return std::nullopt;
        return double(mj) / 1e3;
      },
      0.005);
  // A window that opens at once needs an update before it: the first comes within one period.
  sampler_->wait_for_update_after(-std::numeric_limits<double>::infinity(), 0.5);
}

GpuPowerMeter::~GpuPowerMeter() {
  sampler_.reset();  // its thread reads through NVML: stopped before NVML goes
  if (lib_) {
    if (auto shutdown = reinterpret_cast<int (*)()>(dlsym(lib_, "nvmlShutdown")); shutdown && initialized_) shutdown();
    dlclose(lib_);
  }
}

double GpuPowerMeter::joules() const {
  unsigned long long mj = 0;
  if (!device_ || energy_(device_, &mj) != 0) return 0;
  return double(mj - start_mj_) / 1e3;
}

std::optional<EnergyReading> GpuPowerMeter::energy(double a, double b, double wait_s) {
  if (!sampler_) return std::nullopt;
  return sampler_->between(a, b, wait_s);
}

double GpuPowerMeter::update_period_s() const { return sampler_ ? sampler_->update_period_s() : 0; }

double GpuPowerMeter::watts() const {
  unsigned int mw = 0;
  if (!device_ || power_(device_, &mw) != 0) return 0;
  return mw / 1e3;
}

}  // namespace dlperf::hw
