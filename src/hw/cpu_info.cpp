#include "hw/cpu_info.h"

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>
#include <pmmintrin.h>
#include <xmmintrin.h>
#include <sched.h>
#include <sys/utsname.h>

#include <fstream>
#include <set>
#include <sstream>

#include "backend/cuda/runtime.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/version.h"

namespace dlperf::hw {

namespace {
std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}
}  // namespace

int fma_datapath_lanes(const std::string& vendor, int family, bool avx512f, bool avx) {
  if (avx512f) return vendor == "AuthenticAMD" && family == 0x19 ? 8 : 16;
  return avx ? 8 : 4;
}

int usable_cpus() {
  cpu_set_t set;
  return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
}

ScopedThreads::ScopedThreads(int threads) : before_(omp_get_max_threads()), count_(threads > 0 ? threads : before_) {
  omp_set_num_threads(count_);
}
ScopedThreads::~ScopedThreads() { omp_set_num_threads(before_); }

namespace {
constexpr unsigned kFlushBits = _MM_FLUSH_ZERO_ON | _MM_DENORMALS_ZERO_ON;  // MXCSR's FTZ and DAZ
// Sets the bits on this thread and on each of OpenMP's current team (each thread has its own MXCSR).
void set_flush_bits(unsigned bits) {
  auto set = [bits] { _mm_setcsr((_mm_getcsr() & ~kFlushBits) | bits); };
  set();
#pragma omp parallel
  set();
}
}  // namespace

ScopedDenormals::ScopedDenormals(bool flush) : before_(_mm_getcsr() & kFlushBits) {
  const unsigned want = flush ? kFlushBits : 0;
  changed_ = want != before_;
  if (changed_) set_flush_bits(want);
}
ScopedDenormals::~ScopedDenormals() {
  if (changed_) set_flush_bits(before_);
}
bool flushes_denormals() { return (_mm_getcsr() & kFlushBits) == kFlushBits; }

void check_threads(int threads) {
  const int cpus = usable_cpus();
  check(threads >= 0 && threads <= cpus,
        fmt::format("--threads {} is not between 0 (all) and the {} CPU{} this process may run on", threads, cpus, cpus == 1 ? "" : "s"),
        "more threads than CPUs wait on each other at every step; use --threads 0 for all of them");
}

CpuInfo cpu_info() {
  CpuInfo c;
  c.cores = usable_cpus();
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  double mhz = 0;
  std::string vendor;
  int family = 0;
  std::set<std::string> flags;
  while (std::getline(f, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    std::string val = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && c.model.empty()) c.model = val;
    if (key == "cpu MHz" && mhz == 0) mhz = std::atof(val.c_str());
    if (key == "vendor_id" && vendor.empty()) vendor = val;
    if (key == "cpu family" && family == 0) family = std::atoi(val.c_str());
    if (key == "flags" && flags.empty()) {
      std::istringstream is(val);
      for (std::string w; is >> w;) flags.insert(w);
    }
  }
  const std::string max_khz = read_line("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  c.ghz = !max_khz.empty() ? std::atof(max_khz.c_str()) / 1e6 : mhz / 1e3;
  c.avx2 = flags.count("avx2");
  c.fma = flags.count("fma");
  c.avx512f = flags.count("avx512f");
  c.avx512_bf16 = flags.count("avx512_bf16");
  c.amx_bf16 = flags.count("amx_bf16");
  c.lanes_f32 = fma_datapath_lanes(vendor, family, c.avx512f, c.avx2 || flags.count("avx"));
  if (!c.fma && !c.avx512f) c.fma_units = 1;  // separate add and multiply: count one "FMA"
  c.isa = c.avx512f ? "avx512" : c.avx2 && c.fma ? "avx2+fma" : flags.count("avx") ? "avx" : "sse";
  for (int i = 0; i < 8; ++i) {
    const std::string base = fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/", i);
    const std::string level = read_line(base + "level"), type = read_line(base + "type"), size = read_line(base + "size");
    if (level.empty()) break;
    if (type == "Instruction" || size.empty()) continue;
    // sysfs sizes read like "32K" or "32768K"; said as "32 KiB" and "32 MiB"
    const int64_t bytes = std::atoll(size.c_str()) * (size.back() == 'M' ? 1 << 20 : size.back() == 'K' ? 1 << 10 : 1);
    c.caches += fmt::format("{}L{}{} {}", c.caches.empty() ? "" : ", ", level, type == "Data" ? "d" : "", format_binary_bytes(double(bytes)));
    (level == "1" ? c.l1d_bytes : level == "2" ? c.l2_bytes : c.l3_bytes) = bytes;
  }
  std::ifstream mi("/proc/meminfo");
  std::string k;
  double kb = 0;
  if (mi >> k >> kb) c.memory_gb = kb * 1024 / 1e9;  // meminfo's "kB" are KiB; GB as everywhere in dlperf
  return c;
}

nlohmann::json cpu_identity(const nlohmann::json& cpu) {
  nlohmann::json id = nlohmann::json::object();
  if (cpu.is_object())
    for (const char* key : {"model", "isa", "f32_lanes", "l1d_bytes", "l2_bytes", "l3_bytes"})
      if (cpu.contains(key)) id[key] = cpu[key];
  return id;
}

std::string cpu_facts(const nlohmann::json& cpu) {
  const nlohmann::json id = cpu_identity(cpu);
  // A record's or profile's facts as they are, even hand-edited into another type.
  auto text = [&](const char* key) {
    const nlohmann::json v = id.value(key, nlohmann::json());
    return v.is_string() ? v.get<std::string>() : v.is_null() ? std::string("?") : v.dump();
  };
  std::string s = text("model") + " (" + text("isa");
  if (id.contains("f32_lanes")) s += fmt::format(", {} f32 lanes", id["f32_lanes"].dump());
  for (const auto& [key, name] : {std::pair{"l1d_bytes", "L1d"}, {"l2_bytes", "L2"}, {"l3_bytes", "L3"}})
    if (id.value(key, nlohmann::json()).is_number()) s += fmt::format(", {} {}", name, format_binary_bytes(id[key].get<double>()));
  return s + ")";
}

nlohmann::json to_json(const CpuInfo& c) {
  return {{"model", c.model},       {"cores", c.cores},         {"ghz", c.ghz},
          {"isa", c.isa},           {"avx512_bf16", c.avx512_bf16},
          {"fma_units_per_core", c.fma_units}, {"f32_lanes", c.lanes_f32},
          {"peak_gflops_f32", c.peak_gflops()}, {"caches", c.caches}, {"l1d_bytes", c.l1d_bytes}, {"l2_bytes", c.l2_bytes},
          {"l3_bytes", c.l3_bytes}, {"memory_gb", c.memory_gb}};
}

double available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  double kb = 0;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

nlohmann::json machine_json() {
  utsname u{};
  uname(&u);
  const dnnl_version_t* v = dnnl_version();
  return {{"cpu", to_json(cpu_info())},
          {"os", fmt::format("{} {}", u.sysname, u.release)},
          {"hostname", u.nodename},
          {"onednn", fmt::format("{}.{}.{}", v->major, v->minor, v->patch)},
          {"huge_pages", host_huge_pages_note()},
          {"dlperf", dlperf_version()},
          {"dlperf_commit", dlperf_commit()},
          {"cuda_backend", cuda::built()},
          {"gpus", cuda::gpus_json()}};
}

}  // namespace dlperf::hw
