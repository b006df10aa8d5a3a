// The emulation's streams of work (cuda_emu.h, cuda_runtime_emu.cpp and the cuDNN and cuBLASLt
// stand-ins): each queued operation runs when it is submitted, unless its stream is being
// captured, where it is recorded as a node of the graph being captured, to run when the graph is
// launched. Nodes run in the order they were captured, one valid order of the graph's edges.
//
// Capture follows CUDA's rules for the streams it spans, so the executor's forks (the profiled
// step's stamps on a stream of their own) are checked here as a GPU would check them: a stream
// joins the capture by waiting on an event recorded in it; work queued on a stream outside the
// capture runs at once; and the capture ends only after the origin stream has waited for each
// joined stream's last work (else cudaErrorStreamCaptureUnjoined).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

namespace emu {

enum class NodeKind { kernel, copy, memset, event };

struct Node {
  NodeKind kind;
  std::function<void()> run;
  int priority = 0;  // the priority of the stream it was captured from (CUDA copies it into kernel nodes)
};

/// A stream: a priority, nothing to queue (work runs as it is submitted).
struct Stream {
  int priority = 0;
};

inline int priority_of(const void* stream) { return stream ? static_cast<const Stream*>(stream)->priority : 0; }

struct Capture {
  bool open = false;
  bool broken = false;  // something that may not be captured was called during the capture
  int64_t number = 0;   // which capture of the process: an event recorded in an earlier one joins nothing
  const void* origin = nullptr;  // the stream that began it
  // Each other stream the capture spans: how many operations it has queued in the capture, and
  // how many of them the origin stream has waited for.
  struct Fork {
    int64_t queued = 0, joined = 0;
  };
  std::map<const void*, Fork> forks;
  std::vector<Node> nodes;
};

inline Capture& capture() {
  static Capture c;
  return c;
}

/// How many graphs were instantiated whose kernels were captured at different stream priorities
/// without cudaGraphInstantiateFlagUseNodePriority: a GPU runs all their nodes at the launch
/// stream's priority instead.
inline int& graphs_losing_priorities() {
  static int n = 0;
  return n;
}

/// Whether `stream`'s work is being captured.
inline bool captures(const void* stream) {
  const Capture& c = capture();
  return c.open && (stream == c.origin || c.forks.count(stream));
}

/// Runs `op` now, or records it while its stream is captured.
inline void submit(NodeKind kind, const void* stream, std::function<void()> op) {
  Capture& c = capture();
  if (!captures(stream)) return op();
  c.nodes.push_back({kind, std::move(op), priority_of(stream)});
  if (stream != c.origin) ++c.forks[stream].queued;
}

}  // namespace emu
