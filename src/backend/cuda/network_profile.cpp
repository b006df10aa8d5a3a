// The profiler's side of the Network: stamps of the GPU's clock around each pass of a profiled
// step (network.h, begin_profile), read back two profiled steps later so nothing waits.
#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/network_internal.h"
#include "core/error.h"

namespace dlperf::cuda {

// Queues the slot's next stamp and returns its index. A stamp is a kernel, so in a capture it
// becomes a node of the graph, writing the same place at each replay.
//
// In the profiled step's graph a stamp hangs off the step instead of sitting in it: it waits for
// the work queued before it, and the work after it does not wait for the stamp. In line, each
// stamp added a hop between two kernels: on an H100 (2026-11-28) 0.79 us, what an empty kernel
// costs in a graph, so medium's fp32 step at batch 64 (about 430 us, some 57 span boundaries)
// ran 10.5% slower recorded. Forked, the stamp and the next kernel are released together when
// the work before them ends, so the stamp reads the clock as that kernel starts. The stamps
// follow one another on their own stream (so they stay in order), at the device's highest
// priority (so a stamp's one thread is placed before the next kernel's waiting blocks). Eager
// steps keep them in line: there every fork would cost the host two more API calls a stamp.
size_t Network::record_mark(ProfileSlot& s) {
  check(s.step.marks_used < stamp_capacity_, "a profiled step has more span boundaries than the profiler made room for",
        "this is a bug in dlperf's GPU executor: please report it with the model");
  const size_t m = s.step.marks_used++;
  if (fork_stamps_) {
    ok(cudaEventRecord(fork_, stream_), "forking a stamp off the step");
    ok(cudaStreamWaitEvent(stamp_stream_, fork_, 0), "forking a stamp off the step");
    stamp_time(s.stamps + m, stamp_stream_);
    forked_ = true;
  } else {
    stamp_time(s.stamps + m, stream_);
  }
  return m;
}

// Spans are never nested on the GPU and all of a step's work after its load and input cast runs
// inside one, so a span that begins right after another ended begins at that end's stamp.
size_t Network::begin_span(const std::string& name, const std::string& op, profile::Phase phase, int node) {
  ProfileSlot& s = slots_[slot_];
  const size_t begin = chained_ ? s.step.marks_used - 1 : record_mark(s);
  chained_ = false;
  s.step.spans.push_back({name, op, phase, node, 0, 0});
  s.step.marks.push_back({begin, begin});
  return s.step.spans.size() - 1;
}

// Called from a destructor, so it must not throw: a failed launch surfaces at the next CUDA call
// that checks for errors, and a stamp never written reads as one out of order (read_profiled).
void Network::end_span(size_t i) noexcept {
  try {
    ProfileSlot& s = slots_[slot_];
    s.step.marks[i].second = record_mark(s);
    chained_ = true;
  } catch (...) {
    chained_ = false;
  }
}

// Room for every stamp a step takes: its start, and at most two for each span (a forward pass,
// two backward passes (weight and data) and a gradient sum per layer, the loss and the update).
void Network::begin_profile() {
  const bool first = !stamps_;
  if (first) {
    stamp_capacity_ = 1 + 2 * (4 * layers_.size() + 2);
    const size_t bytes = (2 + 2 * stamp_capacity_) * sizeof(uint64_t);
    ok(cudaMalloc(&stamps_, bytes), "allocating the profiler's timestamps");
    ok(cudaMemsetAsync(stamps_, 0, bytes, stream_), "cudaMemset");
    void* host = nullptr;
    ok(cudaHostAlloc(&host, bytes, cudaHostAllocDefault), "pinning the profiler's timestamps");
    stamps_host_ = static_cast<uint64_t*>(host);
    for (int i = 0; i < 2; ++i) {
      slots_[i].stamps = stamps_ + 2 + size_t(i) * stamp_capacity_;
      ok(cudaEventCreateWithFlags(&slots_[i].end, cudaEventDisableTiming), "cudaEventCreate");
    }
    int least = 0, greatest = 0;
    ok(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    ok(cudaStreamCreateWithPriority(&stamp_stream_, cudaStreamNonBlocking, greatest), "creating the stamps' stream");
    ok(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming), "cudaEventCreate");
    ok(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming), "cudaEventCreate");
    clock_tick(stamps_ + 1, stream_);  // microseconds at most, once
  }
  for (ProfileSlot& s : slots_) s.pending = false;
  profiled_.clear();
  slot_ = 0;
  stamp_time(stamps_, stream_);
  ok(cudaStreamSynchronize(stream_), "starting the profile");  // the GPU is idle: the origin is now
  ok(cudaMemcpy(stamps_host_, stamps_, 2 * sizeof(uint64_t), cudaMemcpyDeviceToHost), "reading the profile's origin");
  origin_ns_ = stamps_host_[0];
  if (first) clock_tick_ns_ = double(stamps_host_[1]);
}

void Network::begin_profiled_step() {
  ProfileSlot& s = slots_[slot_];
  if (s.pending) read_profiled(s);  // the step two before this one: the GPU is busy with the last
  s.step = {};
  chained_ = false;  // the step's load comes next, outside any span
  record_mark(s);    // stamp 0: the step's start
  profiling_ = true;
}

void Network::end_profiled_step() {
  ProfileSlot& s = slots_[slot_];
  profiling_ = false;
  ok(cudaEventRecord(s.end, stream_), "cudaEventRecord");
  s.pending = true;
  slot_ ^= 1;
}

// Span times as seconds since the origin. The copy back runs on no stream of ours, once the step
// is done, so it costs the GPU's stream of work nothing.
void Network::read_profiled(ProfileSlot& s) {
  ok(cudaEventSynchronize(s.end), "waiting for a profiled step");
  uint64_t* host = stamps_host_ + (s.stamps - stamps_);
  ok(cudaMemcpy(host, s.stamps, s.step.marks_used * sizeof(uint64_t), cudaMemcpyDeviceToHost), "reading a profiled step's timestamps");
  ProfiledStep p;
  std::vector<double> at(s.step.marks_used);  // each stamp's time
  for (size_t m = 0; m < s.step.marks_used; ++m) {
    // One stream runs the stamps in order: one that is not is one a failed launch never wrote.
    check(host[m] >= (m == 0 ? origin_ns_ : host[m - 1]), "the GPU's timestamps of a profiled step are out of order",
          "a stamp kernel failed to run: rerun, and report it if it happens again");
    at[m] = double(host[m] - origin_ns_) / 1e9;
  }
  p.start = at.empty() ? 0 : at[0];
  p.spans = s.step.spans;
  for (size_t i = 0; i < p.spans.size(); ++i) p.spans[i].t0 = at[s.step.marks[i].first], p.spans[i].t1 = at[s.step.marks[i].second];
  profiled_.push_back(std::move(p));
  s.pending = false;
}

std::vector<ProfiledStep> Network::take_profiled() {
  std::vector<ProfiledStep> out;
  out.swap(profiled_);
  return out;
}

void Network::end_profile() {
  // After end_profiled_step() the older pending step is in slot_, the newer in the other.
  for (int i = 0; i < 2; ++i)
    if (ProfileSlot& s = slots_[slot_ ^ i]; s.pending) read_profiled(s);
  profiling_ = false;
}

}  // namespace dlperf::cuda
