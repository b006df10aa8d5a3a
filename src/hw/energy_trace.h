// Energy over a window from a counter that updates only now and then.
//
// NVML's board energy counter on recent NVIDIA GPUs moves about every 100 ms (on the A100 and
// H100 its power is also sampled only part of each period: Yang et al., "Part-time Power
// Measurements: nvidia-smi's Lack of Attention", 2023). Two reads around a window then each lag
// the truth by up to a whole update, and a GPU epoch often lasts 0.1-0.5 s: on an H100 one of
// 79 ms read 0 J, and one of 145 ms read 733 W from a 700 W board (2026-11-28). So the counter is
// read often, from a thread (`EnergySampler`); the trace keeps the moments it moved and takes
// the energy of a window from them:
//   - `joules`: the counter between its updates taken as rising evenly (power constant within
//     one update period);
//   - `low`, `high`: what the updates alone allow, whatever the power did between them: `low`
//     counts only update periods wholly inside the window, `high` every period that overlaps it.
// A window spanning many updates has a narrow range; one shorter than an update period, a wide
// one, and whoever reads the record can tell which it is.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>
#include <vector>

namespace dlperf::hw {

struct EnergyReading {
  double joules = 0;           ///< interpolated between the counter's updates
  double low = 0, high = 0;    ///< the range the updates alone allow
  int updates = 0;             ///< counter updates inside the window
};

/// The counter's updates as they were seen: (time, joules) each time its value moved.
class EnergyTrace {
 public:
  /// One read of the counter at time `t` (seconds, now_s()'s clock), in joules. Reads come in time order.
  void add(double t, double joules);
  /// The window [a, b], once the counter has updated before `a` and after `b`; none before that.
  std::optional<EnergyReading> between(double a, double b) const;
  /// The median time between updates; 0 until two have been seen.
  double update_period_s() const;
  /// The time of the last update seen; -infinity before the first.
  double last_update_s() const;

 private:
  struct Point {
    double t, joules;
  };
  std::vector<Point> updates_;  ///< when the counter moved: halfway between the read before and the read that saw it
  double last_read_t_ = 0;
  double last_read_j_ = 0;
  bool any_read_ = false;
};

/// Reads a counter every `period_s` on its own thread and keeps its trace.
class EnergySampler {
 public:
  using Reader = std::function<std::optional<double>()>;  ///< the counter in joules; none when a read fails
  /// Times are now_s()'s (core/timer.h), the trainer's clock.
  EnergySampler(Reader read, double period_s);
  ~EnergySampler();
  EnergySampler(const EnergySampler&) = delete;
  EnergySampler& operator=(const EnergySampler&) = delete;

  /// Waits up to `wait_s` for an update at or after `t` (a window ending at `t` needs one).
  bool wait_for_update_after(double t, double wait_s);
  /// The window [a, b], waiting up to `wait_s` for the update after `b`; none if it did not come.
  std::optional<EnergyReading> between(double a, double b, double wait_s);
  double update_period_s() const;

 private:
  void run(const std::stop_token& stop);

  Reader read_;
  double period_s_;
  mutable std::mutex mutex_;
  std::condition_variable_any updated_, sleep_;
  EnergyTrace trace_;
  std::jthread thread_;  ///< last: it starts once everything it reads is built
};

}  // namespace dlperf::hw
