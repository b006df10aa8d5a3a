// The CUDA runtime calls dlperf's GPU executor makes (src/backend/cuda/network*.cpp, runtime.cpp,
// the device allocator), answered on the CPU, so the executor runs in dlperf_emu_tests around
// the emulated kernels (cuda_emu.h) and CPU stand-ins for cuDNN and cuBLASLt (conv_emu.cpp,
// gemm_emu.cpp). These definitions take the place of libcudart's for this test program.
//
// One emulated device with 8 GiB: cudaMalloc beyond that fails as on a full GPU, and
// cudaMemGetInfo reports what is left, so the trainer's out-of-memory paths run here too.
// DLPERF_EMU_ALLOC_LIMIT_MB=N makes cudaMalloc fail beyond N MB while cudaMemGetInfo still
// reports the 8 GiB, as when another process takes the memory after the trainer's check.
// Memory is host memory; every queued operation runs before it returns,
// so streams and synchronization have nothing to wait for, and events read a host clock when
// they run. Stream capture records the captured streams' operations as a graph's nodes and a
// graph launch runs them in the order captured; which streams a capture spans, and whether it
// may end, follow CUDA's rules (emu_stream.h); a synchronous call during a capture breaks it, as
// on a GPU. DLPERF_EMU_NO_CAPTURE=1 refuses capture instead, for the
// executor's eager fallback.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "emu/emu_stream.h"

namespace {

struct Event {
  double ms = 0;
  // Where it was last recorded, if in a capture: the capture's number (emu::Capture::number; 0
  // outside any), its stream, and how many operations that stream had queued in the capture by
  // then (what a wait on it joins).
  int64_t capture = 0;
  const void* stream = nullptr;
  int64_t at = 0;
};

double now_ms() { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

cudaError_t last_error = cudaSuccess;

cudaError_t fail(cudaError_t e) {
  last_error = e;
  return e;
}

// A call that waits for the stream, or copies synchronously, may not come during a capture.
cudaError_t synchronous() {
  emu::Capture& c = emu::capture();
  if (!c.open) return cudaSuccess;
  c.broken = true;
  return fail(cudaErrorStreamCaptureUnsupported);
}

struct Graph {
  std::vector<emu::Node> nodes;
};

// Whether the graph's kernels were captured at more than one stream priority: a GPU honours those
// only when the graph is instantiated with cudaGraphInstantiateFlagUseNodePriority.
bool mixes_priorities(const Graph& g) {
  const emu::Node* first = nullptr;  // the first kernel: priorities are kernel nodes' only
  for (const emu::Node& n : g.nodes) {
    if (n.kind != emu::NodeKind::kernel) continue;
    if (first && n.priority != first->priority) return true;
    if (!first) first = &n;
  }
  return false;
}

// cudaMalloc's 256-byte alignment; aligned_alloc wants a size that is a multiple of it.
void* allocate(size_t bytes) { return std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256); }

// The device's memory: its size, and the bytes of each live cudaMalloc block.
constexpr size_t kDeviceBytes = size_t(8) << 30;
struct DeviceMemory {
  std::mutex m;
  std::map<void*, size_t> blocks;
  size_t used = 0;
};
DeviceMemory& device_memory() {
  static DeviceMemory* d = new DeviceMemory;  // never destroyed: allocators free into it at exit
  return *d;
}

}  // namespace

extern "C" {

cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaSetDevice(int device) { return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }
cudaError_t CUDARTAPI cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  std::memset(p, 0, sizeof(*p));
  std::strncpy(p->name, "dlperf CUDA emulation (CPU)", sizeof(p->name) - 1);
  p->totalGlobalMem = kDeviceBytes;
  p->multiProcessorCount = 1;
  p->major = 9, p->minor = 0;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->l2CacheSize = 1 << 20;
  p->memoryBusWidth = 64;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  *value = attr == cudaDevAttrClockRate || attr == cudaDevAttrMemoryClockRate ? 1000000 : 0;  // kHz
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaRuntimeGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaDriverGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  DeviceMemory& d = device_memory();
  std::lock_guard lock(d.m);
  *total = kDeviceBytes;
  *free_bytes = kDeviceBytes - d.used;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMalloc(void** p, size_t bytes) {
  DeviceMemory& d = device_memory();
  std::lock_guard lock(d.m);
  *p = nullptr;
  size_t limit = kDeviceBytes;
  if (const char* mb = std::getenv("DLPERF_EMU_ALLOC_LIMIT_MB")) limit = std::min(limit, size_t(std::atoll(mb)) << 20);
  if (d.used > limit || bytes > limit - d.used) return fail(cudaErrorMemoryAllocation);
  *p = allocate(bytes);
  if (!*p) return fail(cudaErrorMemoryAllocation);
  d.blocks[*p] = bytes;
  d.used += bytes;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaFree(void* p) {
  DeviceMemory& d = device_memory();
  std::lock_guard lock(d.m);
  if (auto it = d.blocks.find(p); it != d.blocks.end()) {
    d.used -= it->second;
    d.blocks.erase(it);
  }
  std::free(p);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaHostAlloc(void** p, size_t bytes, unsigned int) {  // host memory: not the device's
  *p = allocate(bytes);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
cudaError_t CUDARTAPI cudaMallocHost(void** p, size_t bytes) { return cudaHostAlloc(p, bytes, 0); }
cudaError_t CUDARTAPI cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind) {
  if (const cudaError_t e = synchronous()) return e;
  if (n) std::memmove(dst, src, n);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind, cudaStream_t s) {
  emu::submit(emu::NodeKind::copy, s, [=] {
    if (n) std::memmove(dst, src, n);
  });
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemset(void* p, int value, size_t n) {
  if (const cudaError_t e = synchronous()) return e;
  if (n) std::memset(p, value, n);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t s) {
  emu::submit(emu::NodeKind::memset, s, [=] {
    if (n) std::memset(p, value, n);
  });
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  *s = reinterpret_cast<cudaStream_t>(new emu::Stream);
  return cudaSuccess;
}
// Work runs in the order it is queued here, so a priority changes no timing; it is kept for the
// kernels captured from the stream (cudaGraphInstantiate).
cudaError_t CUDARTAPI cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int, int priority) {
  *s = reinterpret_cast<cudaStream_t>(new emu::Stream{std::clamp(priority, -5, 0)});
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;  // CUDA's convention: a lower number is a higher priority
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t s) {
  delete reinterpret_cast<emu::Stream*>(s);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t) { return synchronous(); }
cudaError_t CUDARTAPI cudaDeviceSynchronize(void) { return synchronous(); }
// Within a capture, a wait on an event recorded in it draws the waiting stream into the capture,
// or, where the origin stream waits, joins the recording stream's work up to the record.
cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
  emu::Capture& c = emu::capture();
  const Event& ev = *reinterpret_cast<Event*>(e);
  if (!c.open || ev.capture != c.number) return cudaSuccess;
  if (s != c.origin) {
    c.forks[s];  // joins the capture, if it had not
  } else if (ev.stream != c.origin) {
    int64_t& joined = c.forks[ev.stream].joined;
    joined = std::max(joined, ev.at);
  }
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t* e) {
  *e = reinterpret_cast<cudaEvent_t>(new Event);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) { return cudaEventCreate(e); }
cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<Event*>(e);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  emu::submit(emu::NodeKind::event, s, [e] { reinterpret_cast<Event*>(e)->ms = now_ms(); });
  Event& ev = *reinterpret_cast<Event*>(e);
  const emu::Capture& c = emu::capture();
  const bool captured = emu::captures(s);
  ev.capture = captured ? c.number : 0;
  ev.stream = s;
  ev.at = captured && s != c.origin ? c.forks.at(s).queued : 0;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned int) { return cudaEventRecord(e, s); }
cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t) { return synchronous(); }
cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t CUDARTAPI cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = float(reinterpret_cast<Event*>(b)->ms - reinterpret_cast<Event*>(a)->ms);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  const char* refuse = std::getenv("DLPERF_EMU_NO_CAPTURE");
  if (refuse && *refuse == '1') return fail(cudaErrorStreamCaptureUnsupported);
  emu::Capture& c = emu::capture();
  if (c.open) return fail(cudaErrorIllegalState);
  const int64_t number = c.number + 1;
  c = {};
  c.open = true, c.origin = s, c.number = number;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) {
  emu::Capture& c = emu::capture();
  *g = nullptr;
  if (!c.open) return fail(cudaErrorIllegalState);
  if (s != c.origin) return fail(cudaErrorStreamCaptureUnmatched);
  c.open = false;
  if (c.broken) return fail(cudaErrorStreamCaptureInvalidated);
  for (const auto& [stream, fork] : c.forks)
    if (fork.queued > fork.joined) return fail(cudaErrorStreamCaptureUnjoined);
  *g = reinterpret_cast<cudaGraph_t>(new Graph{std::move(c.nodes)});
  c.nodes.clear();
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t g, unsigned long long flags) {
  if (mixes_priorities(*reinterpret_cast<Graph*>(g)) && !(flags & cudaGraphInstantiateFlagUseNodePriority))
    ++emu::graphs_losing_priorities();
  *exec = reinterpret_cast<cudaGraphExec_t>(new Graph(*reinterpret_cast<Graph*>(g)));
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t) {
  for (const emu::Node& n : reinterpret_cast<Graph*>(exec)->nodes) n.run();
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t g) {
  delete reinterpret_cast<Graph*>(g);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete reinterpret_cast<Graph*>(exec);
  return cudaSuccess;
}
// A graph's nodes are its emu::Node entries.
cudaError_t CUDARTAPI cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t* nodes, size_t* n) {
  auto& all = reinterpret_cast<Graph*>(g)->nodes;
  if (nodes)
    for (size_t i = 0; i < std::min(*n, all.size()); ++i) nodes[i] = reinterpret_cast<cudaGraphNode_t>(&all[i]);
  *n = all.size();
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
  switch (reinterpret_cast<const emu::Node*>(node)->kind) {
    case emu::NodeKind::kernel: *type = cudaGraphNodeTypeKernel; break;
    case emu::NodeKind::copy: *type = cudaGraphNodeTypeMemcpy; break;
    case emu::NodeKind::memset: *type = cudaGraphNodeTypeMemset; break;
    case emu::NodeKind::event: *type = cudaGraphNodeTypeEventRecord; break;
  }
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGraphChildGraphNodeGetGraph(cudaGraphNode_t, cudaGraph_t*) { return fail(cudaErrorInvalidValue); }

cudaError_t CUDARTAPI cudaGetLastError(void) {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}
cudaError_t CUDARTAPI cudaPeekAtLastError(void) { return last_error; }
const char* CUDARTAPI cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaError (emulated)"; }
const char* CUDARTAPI cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorStreamCaptureUnsupported: return "stream capture is not supported by the CPU emulation";
    case cudaErrorMemoryAllocation: return "out of memory (emulated)";
    case cudaErrorInvalidDevice: return "invalid device ordinal (emulated)";
    default: return "error (emulated)";
  }
}

}  // extern "C"
