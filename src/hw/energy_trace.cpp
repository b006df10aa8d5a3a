#include "hw/energy_trace.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "core/timer.h"

namespace dlperf::hw {

void EnergyTrace::add(double t, double joules) {
  if (any_read_ && joules < last_read_j_) {
    updates_.clear();  // the counter started again (a driver reload): what came before no longer adds up
  } else if (any_read_ && joules != last_read_j_) {
    // It moved between the read before and this one: halfway is the best guess of when.
    updates_.push_back({(last_read_t_ + t) / 2, joules});
  }
  any_read_ = true;
  last_read_t_ = t;
  last_read_j_ = joules;
}

std::optional<EnergyReading> EnergyTrace::between(double a, double b) const {
  if (b < a) return std::nullopt;
  const auto later = [](double x, const Point& p) { return x < p.t; };
  // i: the last update at or before a; k: the first after b (so k - 1 is the last at or before b).
  const auto after_a = std::upper_bound(updates_.begin(), updates_.end(), a, later);
  const auto after_b = std::upper_bound(updates_.begin(), updates_.end(), b, later);
  if (after_a == updates_.begin() || after_b == updates_.end()) return std::nullopt;
  const size_t i = size_t(after_a - updates_.begin()) - 1, k = size_t(after_b - updates_.begin()), j = k - 1;
  // The counter at x, rising evenly from the update at or before x (index `at`) to the next.
  const auto at = [&](double x, size_t n) {
    const Point &p = updates_[n], &q = updates_[n + 1];
    return p.joules + (q.joules - p.joules) * (x - p.t) / (q.t - p.t);
  };
  EnergyReading r;
  r.joules = at(b, j) - at(a, i);
  r.low = j > i ? updates_[j].joules - updates_[i + 1].joules : 0;
  r.high = updates_[k].joules - updates_[i].joules;
  r.updates = int(j - i);
  return r;
}

double EnergyTrace::update_period_s() const {
  if (updates_.size() < 2) return 0;
  std::vector<double> gaps;
  for (size_t n = 1; n < updates_.size(); ++n) gaps.push_back(updates_[n].t - updates_[n - 1].t);
  std::nth_element(gaps.begin(), gaps.begin() + std::ptrdiff_t(gaps.size() / 2), gaps.end());
  return gaps[gaps.size() / 2];
}

double EnergyTrace::last_update_s() const {
  return updates_.empty() ? -std::numeric_limits<double>::infinity() : updates_.back().t;
}

EnergySampler::EnergySampler(Reader read, double period_s)
    : read_(std::move(read)), period_s_(period_s), thread_([this](const std::stop_token& stop) { run(stop); }) {}

// The jthread, the last member, stops first: its wait on `sleep_` wakes at the stop request.
EnergySampler::~EnergySampler() = default;

void EnergySampler::run(const std::stop_token& stop) {
  const auto period = std::chrono::duration<double>(period_s_);
  std::unique_lock lock(mutex_);
  while (!stop.stop_requested()) {
    lock.unlock();
    // The read's own time, where it took some (a driver call): halfway through it.
    const double t0 = now_s();
    const std::optional<double> joules = read_();
    const double t = (t0 + now_s()) / 2;
    lock.lock();
    if (joules) trace_.add(t, *joules);
    updated_.notify_all();
    sleep_.wait_for(lock, stop, period, [] { return false; });
  }
}

bool EnergySampler::wait_for_update_after(double t, double wait_s) {
  std::unique_lock lock(mutex_);
  return updated_.wait_for(lock, std::chrono::duration<double>(wait_s), [&] { return trace_.last_update_s() > t; });
}

std::optional<EnergyReading> EnergySampler::between(double a, double b, double wait_s) {
  wait_for_update_after(b, wait_s);
  const std::lock_guard lock(mutex_);
  return trace_.between(a, b);
}

double EnergySampler::update_period_s() const {
  const std::lock_guard lock(mutex_);
  return trace_.update_period_s();
}

}  // namespace dlperf::hw
