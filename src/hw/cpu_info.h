// What the CPU is and what it can do at most: model, cores, ISA, caches, clock, and the FMA
// peak (cores x FMA units x vector lanes x 2 flops x clock) that achieved FLOP/s is read against.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>

#include <string>

namespace dlperf::hw {

struct CpuInfo {
  std::string model;
  int cores = 1;        ///< CPUs this process may run on
  double ghz = 0;       ///< max clock where the OS tells it, else the current one
  bool avx2 = false, fma = false, avx512f = false, avx512_bf16 = false, amx_bf16 = false;
  int fma_units = 2;    ///< per core; 2 on every x86 server core since Haswell / Zen 2
  int lanes_f32 = 4;    ///< f32 lanes of the FMA units' datapath (8 on Zen 4, which runs AVX-512 in two halves)
  std::string isa;      ///< "avx2+fma", "avx512", ...
  std::string caches;   ///< "L1d 32 KiB, L2 512 KiB, L3 32 MiB"
  int64_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;  ///< one instance of each level
  double memory_gb = 0;  ///< installed memory (MemTotal) in GB of 1e9 bytes
  /// fp32 peak of the cores this process may use, in GFLOP/s.
  double peak_gflops() const { return cores * fma_units * lanes_f32 * 2.0 * ghz; }
};

CpuInfo cpu_info();
/// CPUs this process may run on (its affinity mask, as OpenMP counts them).
int usable_cpus();
/// Refuses a --threads above usable_cpus(): OpenMP's threads then wait on each other at every
/// barrier (one step of `medium` took 48 s with 1000 threads on 2 CPUs). 0 means all of them.
void check_threads(int threads);
/// dlperf's own element-wise loops (the optimizer's update per parameter tensor, dropout) run on
/// one thread up to this many elements: forking and joining the threads costs 1-3 us on the VMs
/// measured (`dlperf bench launch`), what one thread takes to update tens of thousands of
/// elements. `dlperf plan` times those loops by the same rule.
constexpr int64_t kParallelMinElements = 65536;
/// OpenMP's thread count, which oneDNN forks, set to `threads` (0: left as it is) for this
/// object's scope and put back after: a --threads 1 run must not leave the runs after it in the
/// same process (the lab's, the tests') on one thread.
class ScopedThreads {
 public:
  explicit ScopedThreads(int threads);
  ~ScopedThreads();
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;
  int count() const { return count_; }  ///< the threads it runs with

 private:
  int before_, count_;
};
/// Denormal floats flushed to zero (x86's MXCSR FTZ and DAZ bits) on this thread and OpenMP's
/// for this object's scope, then put back; threads started meanwhile (the loader's workers, a
/// larger OpenMP team) inherit it from this thread. Arithmetic on denormals takes a microcode
/// assist on Intel cores, about 100 cycles an instruction: `logreg` trained up to 14x slower over a
/// full Fashion-MNIST epoch on an Intel Xeon with them kept (its saturated softmax's gradients
/// go denormal; docs/benchmarks.md), at the same loss and accuracy to the digits printed.
/// TensorFlow flushes them in its CPU threads too; PyTorch keeps them unless
/// torch.set_flush_denormal(True). `train --keep-denormals` keeps them (flush = false).
class ScopedDenormals {
 public:
  explicit ScopedDenormals(bool flush);
  ~ScopedDenormals();
  ScopedDenormals(const ScopedDenormals&) = delete;
  ScopedDenormals& operator=(const ScopedDenormals&) = delete;

 private:
  unsigned before_ = 0;  // this thread's FTZ and DAZ bits
  bool changed_ = false;
};
/// Whether this thread flushes denormals to zero (both FTZ and DAZ set).
bool flushes_denormals();

/// f32 lanes an FMA unit computes per cycle: the widest vector the ISA has, except that AMD's
/// Zen 4 (family 0x19) executes AVX-512 on 256-bit units. Zen 5 (0x1A) and Intel's AVX-512 cores
/// have 512-bit units.
int fma_datapath_lanes(const std::string& vendor, int family, bool avx512f, bool avx);
nlohmann::json to_json(const CpuInfo& c);
/// The facts of a CPU (to_json's, as run records keep them) that its speed and oneDNN's layouts
/// depend on: model, ISA, vector width and cache sizes, those `cpu` has. Measurements stand for
/// a machine only where these match: VMs name a Zen 3, 4 and 5 all "AMD EPYC".
nlohmann::json cpu_identity(const nlohmann::json& cpu);
/// Those facts in words: "AMD EPYC (avx512, 16 f32 lanes, L1d 48 KiB, L2 1 MiB, L3 32 MiB)".
std::string cpu_facts(const nlohmann::json& cpu);
/// Bytes the OS says can be allocated without swapping (MemAvailable), or 0 if unknown.
double available_memory_bytes();
/// The share of MemAvailable a run may plan its buffers in (train refuses above it, plan says
/// "does not fit"): the rest stays for what the byte count leaves out (the process's libraries,
/// threads and heap, about 0.2-0.3 GB of RSS here) and the page cache. 0 if unknown.
inline constexpr double kUsableMemoryShare = 0.9;
inline double usable_memory_bytes() { return kUsableMemoryShare * available_memory_bytes(); }
/// The machine: CPU, OS, library versions, for run records.
nlohmann::json machine_json();

}  // namespace dlperf::hw
