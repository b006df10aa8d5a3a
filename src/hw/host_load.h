// What else the CPUs did while dlperf measured. A benchmark or a training run on CPUs that other
// processes (or, on a VM, the hypervisor) share reads slow, and nothing in its own numbers says
// why: a `bench all` taken during a compile keeps low ceilings in the machine profile, and the
// plan is off until it is run again. These figures say so, from the kernel's own accounting:
// /proc/stat for the CPUs this process may run on, /proc/self/stat for this process and the
// children it waited for (gnuplot, the MPI ranks of bench allreduce).
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace dlperf::hw {

/// Cumulative CPU time, in seconds, since boot.
struct CpuTimes {
  bool known = false;
  int cpus = 0;         ///< CPUs counted (those this process may run on)
  double total_s = 0;   ///< all their time, idle included
  double busy_s = 0;    ///< user, nice, system, irq and softirq time: every process's work on them
  double steal_s = 0;   ///< time the hypervisor gave these virtual CPUs to other guests
  double self_s = 0;    ///< this process's CPU time (all its threads) and its waited-for children's
};

/// /proc/stat's per-CPU lines ("cpuN user nice system idle iowait irq softirq steal ...") summed
/// over the CPUs numbered in `cpus`; self_s is left 0. Not `known` when none of them is there.
CpuTimes parse_proc_stat(const std::string& text, const std::vector<int>& cpus, double ticks_per_s);
/// utime + stime + cutime + cstime of a /proc/PID/stat line, in seconds; -1 when it cannot be read.
double parse_self_stat(const std::string& line, double ticks_per_s);
/// The readings now, for the CPUs in this process's affinity mask.
CpuTimes cpu_times_now();

/// What happened between two readings, as shares of those CPUs' time.
struct HostLoad {
  bool known = false;        ///< both readings were taken (/proc readable)
  int cpus = 0;
  double seconds = 0;        ///< wall time between the readings; 0 within one of the kernel's ticks (10 ms)
  double others_share = 0;   ///< used by other processes
  double steal_share = 0;    ///< taken by the hypervisor
  /// Whether a measurement over this window should be read as disturbed: at least a second long
  /// (the kernel counts in ticks of 10 ms), and others and the hypervisor together took
  /// kBusyShare or more. An idle 2-core VM shows 0-2% between dlperf's own runs.
  bool busy() const;
};
inline constexpr double kBusyShare = 0.10;
/// The shortest window busy() judges: the kernel counts CPU time in ticks of 10 ms.
inline constexpr double kLeastJudgedSeconds = 1.0;
HostLoad host_load(const CpuTimes& begin, const CpuTimes& end);
/// Windows one after another (a run's epochs) as one: their seconds added, shares weighted by them.
HostLoad combined(const std::vector<HostLoad>& windows);
nlohmann::json to_json(const HostLoad& h);
/// to_json's inverse; unknown where `j` is not such an object (records from before it existed).
HostLoad host_load_from_json(const nlohmann::json& j);
/// "other processes used 34% of the 2 CPUs' time, and the hypervisor took 3%"; empty where the
/// load is unknown or not busy().
std::string busy_note(const HostLoad& h);

/// A measurement taken once per thread count for the rest of the process (the plan's ceilings
/// when no machine profile holds them), with the load it was taken under. One taken while other
/// work shared the CPUs (HostLoad::busy) reads low, and is taken again at the first call a minute
/// or more later: a lab whose start overlapped other work would otherwise predict every run from
/// it (its runs' plan read 1.6x to 3x their measured step times; planned from ceilings measured
/// again once the machine was idle, 0.85x to 1.12x). Not sooner: on a machine that stays busy,
/// each call of a burst (a plan per run) would measure again.
template <class T>
class KeptMeasurements {
 public:
  struct Kept {
    T value;
    HostLoad load;
    std::chrono::steady_clock::time_point taken;
  };
  explicit KeptMeasurements(std::chrono::seconds retake_busy_after = std::chrono::seconds(60))
      : retake_busy_after_(retake_busy_after) {}
  /// measure(threads)'s result: the kept one, or measured now where none is kept or the kept one
  /// was busy() and is retake_busy_after old.
  template <class F>
  Kept get(int threads, F measure) {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto it = kept_.find(threads);
    if (it == kept_.end() || (it->second.load.busy() && std::chrono::steady_clock::now() - it->second.taken >= retake_busy_after_)) {
      const CpuTimes begin = cpu_times_now();
      T value = measure(threads);
      // Timed from the measurement's end: one that a busy machine drew out is not taken again at once.
      it = kept_.insert_or_assign(threads, Kept{std::move(value), host_load(begin, cpu_times_now()), std::chrono::steady_clock::now()}).first;
    }
    return it->second;
  }

 private:
  std::chrono::seconds retake_busy_after_;
  std::mutex mutex_;
  std::map<int, Kept> kept_;
};

}  // namespace dlperf::hw
