// The profiler's recorder: timed events (what ran, in which phase, for which layer, on which
// thread) and memory samples, collected only while recording is on. When it is off, a Scope
// costs one relaxed atomic load and nothing is allocated or timed.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/memory.h"
#include "hw/host_load.h"

namespace dlperf::profile {

/// What part of a training step an event belongs to. `forward` and `backward` are a layer's
/// whole pass; `backward_data` and `backward_weight` the primitives inside a backward pass;
/// `grad_sum` adds a layer's input gradient into the one a later reader of that input already
/// wrote (a value several layers read, as a residual block's input).
enum class Phase : uint8_t { step, data, copy, forward, backward, backward_data, backward_weight, grad_sum, loss, optimizer, load };
std::string_view to_string(Phase p);

/// The track of GPU work: device times from the GPU's clock (cuda::stamp_time), placed on the recorder's clock. When a
/// profile has it, the per-op table and the step split come from it (time on the device).
inline constexpr int kGpuTrack = 100;

struct Event {
  std::string name;  ///< the layer ("conv2", "bn1+relu1"), or what ran ("reorder", "optimizer")
  std::string op;    ///< op type ("conv2d"); empty outside layers
  Phase phase{};
  double t0 = 0, t1 = 0;  ///< seconds since recording started
  int track = 0;          ///< 0 = the training thread; 1.. = loader workers; kGpuTrack = the GPU
  int depth = 0;          ///< nesting on its track
  int node = -1;          ///< graph node, -1 outside layers
  int64_t step = 0;       ///< the training step it belongs to (0-based within the recording)
  bool launch = false;    ///< a kernel or primitive execution
};

struct MemorySample {
  double t = 0;
  std::array<double, kMemCategories> bytes{};
};

class Recorder {
 public:
  static Recorder& get();
  /// Whether events are taken now: between start() and stop(), and not paused.
  bool on() const { return on_.load(std::memory_order_acquire); }
  /// Whether a recording is under way (started, not yet stopped), paused or not.
  bool started() const { return started_.load(std::memory_order_acquire); }
  /// Clears everything and starts recording (and memory sampling).
  void start();
  void stop();
  /// Training thread, between steps (no event open): a recording that samples one step in N
  /// (--profile-every) takes no events during the steps it skips; memory is still sampled.
  void pause();
  void resume();
  void set_step(int64_t s) { step_.store(s, std::memory_order_relaxed); }
  int64_t step() const { return step_.load(std::memory_order_relaxed); }

  /// Training thread: open and close nested events.
  void push(std::string name, std::string op, Phase phase, int node, bool launch);
  void pop();
  /// The innermost open event's layer (name, op, node) for events opened below it.
  const Event* current() const { return stack_.empty() ? nullptr : &open_[stack_.back()]; }
  /// Any thread: a finished event on `track`.
  void add(Event e);
  /// Called by the allocator on every change while recording.
  void sample_memory(const MemoryStats& s);
  double now() const;

  /// The finished events, sorted by track then start time.
  std::vector<Event> events() const;
  std::vector<MemorySample> memory() const;
  /// What else the CPUs did between start() and stop() (other processes, the hypervisor).
  hw::HostLoad host_load() const { return hw::host_load(cpu_start_, cpu_stop_); }

 private:
  // Atomic: the loader's workers read them (step(), now()) while the training thread sets them.
  std::atomic<bool> on_{false};
  std::atomic<bool> started_{false};
  std::atomic<int64_t> step_{0};
  std::atomic<double> origin_{0};
  std::vector<Event> open_;   // storage of the training thread's events
  std::vector<size_t> stack_;  // indices into open_ of the events still open
  mutable std::mutex mutex_;  // guards others_ and memory_
  std::vector<Event> others_;
  std::vector<MemorySample> memory_;
  hw::CpuTimes cpu_start_, cpu_stop_;  // the training thread's: set by start() and stop()
};

/// An event on the training thread for the lifetime of the scope, when recording is on.
class Scope {
 public:
  // Nothing is copied or built unless recording is on: these sit on the training step's path.
  Scope(const char* name, Phase phase) : Scope(std::string_view(name), std::string_view(), phase, -1, false) {}
  Scope(std::string_view name, std::string_view op, Phase phase, int node, bool launch = false) {
    if (Recorder::get().on()) {
      Recorder::get().push(std::string(name), std::string(op), phase, node, launch);
      active_ = true;
    }
  }
  /// A primitive execution inside the current layer event, named after that layer.
  static Scope launch(Phase phase);
  ~Scope() {
    if (active_) Recorder::get().pop();
  }
  Scope(Scope&& o) noexcept : active_(o.active_) { o.active_ = false; }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Scope() = default;
  bool active_ = false;
};

}  // namespace dlperf::profile
