// The emulation's one stream of work (cuda_emu.h, cuda_runtime_emu.cpp and the cuDNN and cuBLASLt
// stand-ins): each queued operation runs when it is submitted, unless a stream capture is open,
// where it is recorded as a node of the graph being captured, to run when the graph is launched.
// That is how CUDA graphs behave for code that captures one stream, as dlperf's executor does.
#pragma once

#include <functional>
#include <utility>
#include <vector>

namespace emu {

enum class NodeKind { kernel, copy, memset, event };

struct Node {
  NodeKind kind;
  std::function<void()> run;
};

struct Capture {
  bool open = false;
  bool broken = false;  // something that may not be captured was called during the capture
  std::vector<Node> nodes;
};

inline Capture& capture() {
  static Capture c;
  return c;
}

/// Runs `op` now, or records it while a capture is open.
inline void submit(NodeKind kind, std::function<void()> op) {
  Capture& c = capture();
  if (c.open) c.nodes.push_back({kind, std::move(op)});
  else op();
}

}  // namespace emu
