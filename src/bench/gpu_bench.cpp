// GPU micro-benchmarks with the CUDA backend (see gpu_bench.h).
#include "bench/gpu_bench.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cmath>
#include <chrono>
#include <cstring>
#include <vector>

#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "bench/cpu_bench.h"
#include "core/error.h"

namespace dlperf::bench::gpu {

namespace {

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(fmt::format("CUDA failed in {}: {}", what, cudaGetErrorString(e)));
}

// Owns a stream and two events; times what `body` queues on the stream, in seconds.
struct Timer {
  cudaStream_t stream{};
  cudaEvent_t start{}, stop{};
  Timer() {
    ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    ok(cudaEventCreate(&start), "cudaEventCreate");
    ok(cudaEventCreate(&stop), "cudaEventCreate");
  }
  ~Timer() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaStreamDestroy(stream);
  }
  template <class F>
  double time(F&& body) {
    ok(cudaEventRecord(start, stream), "cudaEventRecord");
    body();
    ok(cudaEventRecord(stop, stream), "cudaEventRecord");
    ok(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    ok(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    return double(ms) / 1e3;
  }
};

struct DeviceMem {
  void* p = nullptr;
  explicit DeviceMem(size_t bytes) { ok(cudaMalloc(&p, bytes), "cudaMalloc"); }
  ~DeviceMem() { cudaFree(p); }
  float* f() const { return static_cast<float*>(p); }
};

}  // namespace

bool available() { return cuda::device_count() > 0; }
std::string why_not() { return cuda::why_no_device(); }

std::vector<CopyPoint> copies(int device, double max_bytes, int repeats) {
  ok(cudaSetDevice(device), "cudaSetDevice");
  Timer t;
  const size_t biggest = size_t(max_bytes);
  DeviceMem dev(biggest);
  void* pinned = nullptr;
  ok(cudaMallocHost(&pinned, biggest), "cudaMallocHost");
  std::vector<unsigned char> pageable(biggest);
  // Never zeros: a recognizable pattern, checked after the round trip.
  for (size_t i = 0; i < biggest; ++i) pageable[i] = static_cast<unsigned char>(i * 131 + 7);
  std::memcpy(pinned, pageable.data(), biggest);
  std::vector<CopyPoint> out;
  for (double bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    for (bool pin : {true, false})
      for (const char* dir : {"h2d", "d2h"}) {
        void* host = pin ? pinned : static_cast<void*>(pageable.data());
        const bool h2d = std::string(dir) == "h2d";
        std::vector<double> rates;
        for (int r = -2; r < repeats; ++r) {  // two warm-up copies
          const double s = t.time([&] {
            ok(cudaMemcpyAsync(h2d ? dev.p : host, h2d ? host : dev.p, size_t(bytes), h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                               t.stream),
               "cudaMemcpyAsync");
          });
          if (r >= 0) rates.push_back(bytes / s / 1e9);
        }
        const Spread sp = spread_of(rates);
        out.push_back({dir, pin, bytes, sp.median, sp.min, sp.max});
      }
  }
  // Validate: the device holds what the last h2d copy sent; bring it back and compare.
  std::vector<unsigned char> back(biggest / 4 * 4 >= 4096 ? 4096 : biggest);
  ok(cudaMemcpy(back.data(), dev.p, back.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  check(std::memcmp(back.data(), pageable.data(), back.size()) == 0, "GPU copy benchmark: the data came back changed");
  cudaFreeHost(pinned);
  return out;
}

LaunchResult launch_latency(int device, int kernels, int repeats) {
  ok(cudaSetDevice(device), "cudaSetDevice");
  Timer t;
  LaunchResult res;
  std::vector<double> plain, graph, sync;
  for (int r = -1; r < repeats; ++r) {
    const double s = t.time([&] {
      for (int k = 0; k < kernels; ++k) cuda::empty_kernel(t.stream);
    });
    ok(cudaGetLastError(), "empty kernel launch");
    if (r >= 0) plain.push_back(s / kernels * 1e6);
  }
  // The same launches captured once into a graph and replayed.
  cudaGraph_t g{};
  cudaGraphExec_t exec{};
  ok(cudaStreamBeginCapture(t.stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  for (int k = 0; k < kernels; ++k) cuda::empty_kernel(t.stream);
  ok(cudaStreamEndCapture(t.stream, &g), "cudaStreamEndCapture");
  ok(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
  for (int r = -1; r < repeats; ++r) {
    const double s = t.time([&] { ok(cudaGraphLaunch(exec, t.stream), "cudaGraphLaunch"); });
    if (r >= 0) graph.push_back(s / kernels * 1e6);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  // One kernel and a synchronize at a time, timed on the host.
  for (int r = -1; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < 100; ++k) {
      cuda::empty_kernel(t.stream);
      ok(cudaStreamSynchronize(t.stream), "cudaStreamSynchronize");
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r >= 0) sync.push_back(s / 100 * 1e6);
  }
  res.plain_us = spread_of(plain).median;
  res.graph_us = spread_of(graph).median;
  res.sync_us = spread_of(sync).median;
  return res;
}

std::vector<DeviceBandwidth> device_bandwidth(int device, double bytes, int repeats) {
  ok(cudaSetDevice(device), "cudaSetDevice");
  Timer t;
  const int64_t n = int64_t(bytes / 4);
  DeviceMem a(size_t(n) * 4), b(size_t(n) * 4), c(size_t(n) * 4), sum(sizeof(double));
  cuda::fill(a.f(), n, 1.0f, t.stream);
  cuda::fill(b.f(), n, 2.0f, t.stream);
  cuda::fill(c.f(), n, 0.5f, t.stream);
  std::vector<DeviceBandwidth> out;
  struct K {
    const char* name;
    double bytes_moved;
  };
  for (const K& k : {K{"copy", 2.0 * double(n) * 4}, K{"triad", 3.0 * double(n) * 4}, K{"read", double(n) * 4}}) {
    std::vector<double> rates;
    for (int r = -2; r < repeats; ++r) {
      ok(cudaMemsetAsync(sum.p, 0, sizeof(double), t.stream), "cudaMemsetAsync");
      const double s = t.time([&] {
        if (k.name == std::string("copy")) cuda::stream_copy(b.f(), a.f(), n, t.stream);
        else if (k.name == std::string("triad")) cuda::stream_triad(a.f(), b.f(), c.f(), 2.0f, n, t.stream);
        else cuda::stream_read(b.f(), n, static_cast<double*>(sum.p), t.stream);
      });
      ok(cudaGetLastError(), k.name);
      if (r >= 0) rates.push_back(k.bytes_moved / s / 1e9);
    }
    const Spread sp = spread_of(rates);
    out.push_back({k.name, k.bytes_moved, sp.median, sp.min, sp.max});
  }
  // Validate: triad wrote 2 + 2 x 0.5 = 3 everywhere; read summed 2 x n.
  float first = 0, last = 0;
  ok(cudaMemcpy(&first, a.f(), 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  ok(cudaMemcpy(&last, a.f() + n - 1, 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  double total = 0;
  ok(cudaMemcpy(&total, sum.p, sizeof(double), cudaMemcpyDeviceToHost), "cudaMemcpy");
  check(first == 3.0f && last == 3.0f, "GPU bandwidth benchmark: triad produced wrong values");
  check(std::fabs(total - 2.0 * double(n)) <= 1e-6 * double(n), "GPU bandwidth benchmark: read summed wrong");
  return out;
}

nlohmann::json to_json(const std::vector<CopyPoint>& c) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : c)
    out.push_back({{"direction", p.direction}, {"pinned", p.pinned}, {"bytes", p.bytes}, {"median_gbps", p.median_gbps},
                   {"min_gbps", p.min_gbps}, {"max_gbps", p.max_gbps}});
  return out;
}
nlohmann::json to_json(const LaunchResult& l) {
  return {{"plain_us", l.plain_us}, {"graph_us", l.graph_us}, {"launch_and_sync_us", l.sync_us}};
}
nlohmann::json to_json(const std::vector<DeviceBandwidth>& b) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& x : b)
    out.push_back({{"kernel", x.kernel}, {"bytes", x.bytes}, {"median_gbps", x.median_gbps}, {"min_gbps", x.min_gbps}, {"max_gbps", x.max_gbps}});
  return out;
}

}  // namespace dlperf::bench::gpu
