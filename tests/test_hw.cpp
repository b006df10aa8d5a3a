// Reading the machine: an energy counter that updates only now and then (hw/energy_trace.h), the
// GPU's power meter through NVML (hw/nvml.h, against tests/fake_nvml.cpp), denormals.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <omp.h>

#include "core/timer.h"
#include "hw/cpu_info.h"
#include "hw/energy_trace.h"
#include "hw/nvml.h"

using namespace dlperf;

namespace {

// A board like the H100's: its counter moves every 100 ms (at 37 ms past each tenth of a
// second), drawing 200 W until t = 1 s and 600 W after.
double true_joules(double t) { return t < 1 ? 200 * t : 200 + 600 * (t - 1); }
double counter_at(double t) {  // the value at the last update at or before t
  const double update = std::floor((t - 0.037) / 0.1) * 0.1 + 0.037;
  return update < 0 ? 0 : true_joules(update);
}
hw::EnergyTrace read_every_5_ms(double until) {
  hw::EnergyTrace trace;
  for (int n = 0; n * 0.005 <= until; ++n) trace.add(n * 0.005, counter_at(n * 0.005));
  return trace;
}

}  // namespace

// Two reads of such a counter around a 90 ms window see one value, 0 J: what an H100 epoch of
// 79 ms recorded (2026-11-28). The trace puts the window between the updates around it.
TEST(EnergyTrace, AWindowBetweenTwoUpdatesIsInterpolatedNotZero) {
  const hw::EnergyTrace trace = read_every_5_ms(3);
  EXPECT_EQ(counter_at(1.33) - counter_at(1.24), 0);  // the two plain reads
  const auto r = trace.between(1.24, 1.33);
  ASSERT_TRUE(r);
  EXPECT_NEAR(r->joules, 600 * 0.09, 1.5);
  EXPECT_EQ(r->updates, 0);
  EXPECT_EQ(r->low, 0);                  // no update period lies wholly inside it
  EXPECT_NEAR(r->high, 600 * 0.1, 1e-9);  // the one period it lies in
  EXPECT_NEAR(trace.update_period_s(), 0.1, 1e-9);
}

// Long windows come out close, and every window's truth lies in the range the updates allow,
// also where the power changed inside it.
TEST(EnergyTrace, TheTruthLiesInTheRangeTheUpdatesAllow) {
  const hw::EnergyTrace trace = read_every_5_ms(3);
  for (const auto& [a, b] : std::vector<std::pair<double, double>>{{0.2, 0.9}, {0.95, 1.05}, {0.5, 1.5}, {1.21, 2.77}, {0.04, 0.06}, {1.9, 2.9}}) {
    const auto r = trace.between(a, b);
    ASSERT_TRUE(r) << a << "-" << b;
    const double truth = true_joules(b) - true_joules(a);
    EXPECT_LE(r->low, truth + 1e-9) << a << "-" << b;
    EXPECT_GE(r->high, truth - 1e-9) << a << "-" << b;
    EXPECT_LE(r->low, r->joules);
    EXPECT_GE(r->high, r->joules);
    // Where the power changed within an update period, the even rise puts some of it on the
    // wrong side: up to (600 - 200) W x 0.1 s; elsewhere only the 2.5 ms the reads leave open.
    const bool step_inside = a < 1.037 && b > 0.937;
    EXPECT_NEAR(r->joules, truth, step_inside ? 40 : 3) << a << "-" << b;
    EXPECT_EQ(r->updates, int(std::floor((b - 0.037) / 0.1)) - int(std::floor((a - 0.037) / 0.1))) << a << "-" << b;
  }
  const auto long_window = trace.between(1.2, 2.8);
  EXPECT_LT(long_window->high - long_window->low, 0.15 * long_window->joules);  // 16 updates pin it within 7%
}

TEST(EnergyTrace, AWindowWaitsForTheUpdatesAroundIt) {
  const hw::EnergyTrace trace = read_every_5_ms(1);
  EXPECT_FALSE(trace.between(0.01, 0.5));  // before the first update seen (0.037 s)
  EXPECT_FALSE(trace.between(0.5, 0.99));  // the update after it (1.037 s) is not read yet
  EXPECT_TRUE(trace.between(0.5, 0.9));
  EXPECT_FALSE(trace.between(0.9, 0.5));
  EXPECT_EQ(hw::EnergyTrace().update_period_s(), 0);
  // A counter that starts again (the driver reloaded) starts the trace again.
  hw::EnergyTrace restarted = read_every_5_ms(1);
  restarted.add(1.1, 5);
  EXPECT_FALSE(restarted.between(0.5, 0.9));
}

// The sampler reads a counter on its own thread, as the GPU trainer's NVML meter does: here one
// that moves every 20 ms at 250 W.
TEST(EnergySampler, ReadsTheCounterOnItsOwnThread) {
  const double t0 = now_s();
  hw::EnergySampler sampler([t0]() -> std::optional<double> { return 250 * std::floor((now_s() - t0) / 0.02) * 0.02; }, 0.002);
  ASSERT_TRUE(sampler.wait_for_update_after(-INFINITY, 1));
  const double a = now_s();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double b = now_s();
  const auto r = sampler.between(a, b, 1);
  ASSERT_TRUE(r);
  // Loose: on a busy machine the thread's reads come late, and each late read blurs an update.
  EXPECT_NEAR(r->joules, 250 * (b - a), 0.1 * 250 * (b - a));
  EXPECT_LE(r->low, r->joules);
  EXPECT_GE(r->high, r->joules);
  EXPECT_GE(r->updates, 8);
  EXPECT_NEAR(sampler.update_period_s(), 0.02, 0.01);
}

TEST(EnergySampler, ACounterThatCannotBeReadGivesNoWindow) {
  std::atomic<int> reads = 0;
  hw::EnergySampler sampler(
      [&]() -> std::optional<double> {
        ++reads;
        return std::nullopt;
      },
      0.002);
  EXPECT_FALSE(sampler.wait_for_update_after(-INFINITY, 0.05));
  EXPECT_FALSE(sampler.between(now_s() - 0.04, now_s(), 0.02));
  EXPECT_GT(reads.load(), 1);  // it kept trying
  EXPECT_EQ(sampler.update_period_s(), 0);
}

namespace {

// The stand-in NVML (tests/fake_nvml.cpp), held open for its settings and counts: the meter's
// own dlopen of the same path shares this copy.
class FakeNvml {
 public:
  explicit FakeNvml(const char* path = DLPERF_FAKE_NVML) : lib_(dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
    if (!lib_) return;
    configure_ = reinterpret_cast<void (*)(int, int, int, double, double)>(dlsym(lib_, "fake_nvml_configure"));
    initialized_ = reinterpret_cast<int (*)()>(dlsym(lib_, "fake_nvml_initialized"));
    misuse_ = reinterpret_cast<int (*)()>(dlsym(lib_, "fake_nvml_misuse"));
    last_pci_ = reinterpret_cast<void (*)(char*, int)>(dlsym(lib_, "fake_nvml_last_pci"));
    configure(0, 0, 0, 250, 0.02);
  }
  ~FakeNvml() {
    if (lib_) dlclose(lib_);
  }
  FakeNvml(const FakeNvml&) = delete;
  FakeNvml& operator=(const FakeNvml&) = delete;
  bool loaded() const { return lib_ && configure_ && initialized_ && misuse_ && last_pci_; }
  /// NVML's return codes for init, a device handle and the energy counter; the board's watts and
  /// how often its counter moves.
  void configure(int init, int handle, int energy, double watts, double period_s) const { configure_(init, handle, energy, watts, period_s); }
  int initialized() const { return initialized_(); }
  int misuse() const { return misuse_(); }
  std::string last_pci() const {
    char out[64];
    last_pci_(out, sizeof out);
    return out;
  }

 private:
  void* lib_;
  void (*configure_)(int, int, int, double, double) = nullptr;
  int (*initialized_)() = nullptr;
  int (*misuse_)() = nullptr;
  void (*last_pci_)(char*, int) = nullptr;
};

}  // namespace

// A board at 250 W whose counter moves every 20 ms: the meter finds it by PCI id (as the GPU
// trainer does) or by index, reads its power, and its sampler thread gives a window's energy.
// NVML is shut down once the meter goes, after its thread stopped reading.
TEST(GpuPowerMeter, ReadsTheBoardsEnergyCounterThroughNvml) {
  const FakeNvml nvml;
  ASSERT_TRUE(nvml.loaded()) << DLPERF_FAKE_NVML << ": " << dlerror();
  {
    hw::GpuPowerMeter m("0000:41:00.0", DLPERF_FAKE_NVML);
    ASSERT_TRUE(m.available()) << m.why_not();
    EXPECT_EQ(nvml.last_pci(), "0000:41:00.0");
    EXPECT_EQ(nvml.initialized(), 1);
    EXPECT_DOUBLE_EQ(m.watts(), 250);
    EXPECT_GE(m.joules(), 0);
    const double a = now_s();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const double b = now_s();
    const auto e = m.energy(a, b, 1.0);
    ASSERT_TRUE(e) << "no counter update within 1 s of the window's end";
    // Loose: on a busy machine the thread's reads come late, and each late read blurs an update.
    EXPECT_NEAR(e->joules, 250 * (b - a), 0.1 * 250 * (b - a));
    EXPECT_LE(e->low, e->joules);
    EXPECT_GE(e->high, e->joules);
    EXPECT_GE(e->updates, 8);
    EXPECT_NEAR(m.update_period_s(), 0.02, 0.01);
    EXPECT_GT(m.joules(), 0);
  }
  EXPECT_EQ(nvml.initialized(), 0);
  {
    hw::GpuPowerMeter by_index("0", DLPERF_FAKE_NVML);
    EXPECT_TRUE(by_index.available()) << by_index.why_not();
    EXPECT_EQ(nvml.last_pci(), "");  // asked by index
  }
  EXPECT_EQ(nvml.initialized(), 0);
  EXPECT_EQ(nvml.misuse(), 0);  // no read outside init .. shutdown, no shutdown without an init
}

// Each way NVML can fail gives no reading, a reason, zeros where a figure is asked for, and
// leaves NVML shut down as it found it.
TEST(GpuPowerMeter, SaysWhyNvmlGivesNoReading) {
  const FakeNvml nvml;
  ASSERT_TRUE(nvml.loaded()) << DLPERF_FAKE_NVML << ": " << dlerror();
  auto why = [&](const char* device, const char* library = DLPERF_FAKE_NVML) {
    hw::GpuPowerMeter m(device, library);
    EXPECT_FALSE(m.available());
    EXPECT_EQ(m.joules(), 0);
    EXPECT_EQ(m.watts(), 0);
    EXPECT_FALSE(m.energy(now_s() - 0.1, now_s(), 0.05));
    EXPECT_EQ(m.update_period_s(), 0);
    return m.why_not();
  };
  EXPECT_EQ(why("0", "/nonexistent/libnvidia-ml.so.1"), "NVML (/nonexistent/libnvidia-ml.so.1, part of the NVIDIA driver) is not installed here");
  EXPECT_EQ(why("0", DLPERF_FAKE_NVML_OLD), "this NVML lacks the functions dlperf reads (driver too old)");
  nvml.configure(9, 0, 0, 250, 0.02);  // NVML_ERROR_DRIVER_NOT_LOADED
  EXPECT_EQ(why("0"), "NVML did not initialize (error 9)");
  nvml.configure(0, 6, 0, 250, 0.02);  // NVML_ERROR_NOT_FOUND
  EXPECT_EQ(why("3"), "NVML has no GPU 3 (error 6)");
  EXPECT_EQ(why("0000:c1:00.0"), "NVML has no GPU 0000:c1:00.0 (error 6)");
  nvml.configure(0, 0, 3, 250, 0.02);  // NVML_ERROR_NOT_SUPPORTED: a board before Volta
  EXPECT_EQ(why("0"), "this GPU has no NVML energy counter (Volta or later needed)");
  EXPECT_EQ(nvml.initialized(), 0);  // each failure after init shut NVML down again
  EXPECT_EQ(nvml.misuse(), 0);
}

namespace dlperf::hw {
namespace {

// A product that is denormal in float: 1e-30 x 1e-10 = 1e-40 (floats go denormal below 1.2e-38).
// volatile, so that the compiler does not fold it and the CPU multiplies under the thread's MXCSR.
float denormal_product() {
  volatile float a = 1e-30f, b = 1e-10f;
  return a * b;
}
// A float's bits: comparing the float itself would read a denormal as 0 on a thread that flushes
// (DAZ makes compares and conversions treat denormal inputs as zero).
uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
// The product on each of OpenMP's threads: 0 where that thread flushes.
std::vector<float> products_on_the_team(int threads) {
  std::vector<float> out(size_t(threads), -1.0f);
#pragma omp parallel num_threads(threads)
  out[size_t(omp_get_thread_num())] = denormal_product();
  return out;
}

TEST(Denormals, FlushedOnEveryComputeThreadForTheScopeThenPutBack) {
  const ScopedThreads threads(2);  // a team of 2 even on 1 CPU: each thread has its own MXCSR
  const ScopedDenormals keep_first(false);
  ASSERT_NE(bits(denormal_product()), 0u);
  for (float p : products_on_the_team(2)) EXPECT_NE(bits(p), 0u);
  {
    const ScopedDenormals flush(true);
    EXPECT_TRUE(flushes_denormals());
    EXPECT_EQ(bits(denormal_product()), 0u);
    for (float p : products_on_the_team(2)) EXPECT_EQ(bits(p), 0u) << "an OpenMP thread kept denormals";
    float in_new_thread = -1;
    std::thread([&] { in_new_thread = denormal_product(); }).join();  // a loader worker starts so
    EXPECT_EQ(bits(in_new_thread), 0u) << "a thread started in the scope does not inherit the flush";
    {
      const ScopedDenormals keep(false);  // --keep-denormals inside, as a lab run could be
      EXPECT_NE(bits(denormal_product()), 0u);
    }
    EXPECT_EQ(bits(denormal_product()), 0u);
  }
  EXPECT_FALSE(flushes_denormals());
  EXPECT_NE(bits(denormal_product()), 0u);
  for (float p : products_on_the_team(2)) EXPECT_NE(bits(p), 0u) << "an OpenMP thread still flushes after the scope";
}

}  // namespace
}  // namespace dlperf::hw
