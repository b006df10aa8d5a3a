#include "profile/recorder.h"

#include <algorithm>

#include "core/timer.h"
#include "profile/nvtx.h"

namespace dlperf::profile {

std::string_view to_string(Phase p) {
  switch (p) {
    case Phase::step: return "step";
    case Phase::data: return "data";
    case Phase::copy: return "copy";
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::backward_data: return "backward-data";
    case Phase::backward_weight: return "backward-weight";
    case Phase::grad_sum: return "gradient-sum";
    case Phase::loss: return "loss";
    case Phase::optimizer: return "optimizer";
    case Phase::load: return "load";
  }
  return "?";
}

Recorder& Recorder::get() {
  static Recorder r;
  return r;
}

double Recorder::now() const { return now_s() - origin_.load(std::memory_order_relaxed); }

void Recorder::start() {
  {
    std::lock_guard lock(mutex_);
    others_.clear();
    memory_.clear();
  }
  open_.clear();
  stack_.clear();
  step_.store(0, std::memory_order_relaxed);
  origin_.store(now_s(), std::memory_order_relaxed);
  cpu_start_ = hw::cpu_times_now();
  cpu_stop_ = {};
  started_.store(true, std::memory_order_release);
  on_.store(true, std::memory_order_release);
  sample_memory(HostAllocator::instance().stats());
  HostAllocator::instance().set_observer([](const MemoryStats& s) { Recorder::get().sample_memory(s); });
}

void Recorder::stop() {
  HostAllocator::instance().set_observer(nullptr);
  on_.store(false);
  started_.store(false, std::memory_order_release);
  while (!stack_.empty()) pop();
  cpu_stop_ = hw::cpu_times_now();
}

void Recorder::pause() { on_.store(false, std::memory_order_release); }

void Recorder::resume() {
  if (started()) on_.store(true, std::memory_order_release);
}

void Recorder::push(std::string name, std::string op, Phase phase, int node, bool launch) {
  Event e;
  e.name = std::move(name);
  e.op = std::move(op);
  e.phase = phase;
  e.node = node;
  e.launch = launch;
  e.step = step();
  e.depth = int(stack_.size());
  e.t0 = now();
  nvtx_push(e.name.c_str());  // the same ranges for Nsight Systems
  open_.push_back(std::move(e));
  stack_.push_back(open_.size() - 1);
}

void Recorder::pop() {
  if (stack_.empty()) return;
  open_[stack_.back()].t1 = now();
  nvtx_pop();
  stack_.pop_back();
}

void Recorder::add(Event e) {
  std::lock_guard lock(mutex_);
  others_.push_back(std::move(e));
}

void Recorder::sample_memory(const MemoryStats& s) {
  MemorySample m;
  m.t = now();
  for (size_t c = 0; c < m.bytes.size(); ++c) m.bytes[c] = double(s.current[c]);
  std::lock_guard lock(mutex_);
  memory_.push_back(m);
}

std::vector<Event> Recorder::events() const {
  std::vector<Event> out;
  for (const auto& e : open_)
    if (e.t1 > 0) out.push_back(e);
  {
    std::lock_guard lock(mutex_);
    out.insert(out.end(), others_.begin(), others_.end());
  }
  std::stable_sort(out.begin(), out.end(), [](const Event& a, const Event& b) {
    return a.track != b.track ? a.track < b.track : a.t0 != b.t0 ? a.t0 < b.t0 : a.depth < b.depth;
  });
  return out;
}

std::vector<MemorySample> Recorder::memory() const {
  std::lock_guard lock(mutex_);
  return memory_;
}

Scope Scope::launch(Phase phase) {
  Recorder& r = Recorder::get();
  if (!r.on()) return Scope();
  const Event* parent = r.current();
  return Scope(parent ? std::string_view(parent->name) : std::string_view("primitive"),
               parent ? std::string_view(parent->op) : std::string_view(), phase, parent ? parent->node : -1, true);
}

}  // namespace dlperf::profile
