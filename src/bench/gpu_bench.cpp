// GPU micro-benchmarks with the CUDA backend (see gpu_bench.h).
#include "bench/gpu_bench.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#ifdef DLPERF_HAVE_NCCL
#include <nccl.h>
#endif
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/conv.h"
#include "backend/cuda/small_conv.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "bench/collective.h"
#include "bench/cpu_bench.h"
#include "core/error.h"
#include "core/rng.h"
#include "nn/graph.h"

namespace dlperf::bench::gpu {

namespace {

using cuda::ok;

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
  /// Calls per timed sample, so a sample lasts about `target_s` (one call of a small problem is
  /// shorter than the events resolve well): from the time of one call after a warm-up call
  /// (lazy module loading, first touch), between 1 and 200.
  template <class F>
  int calls_for(F&& one_call, double target_s = 1e-3) {
    one_call();
    const double one = time(one_call);
    return int(std::clamp(target_s / std::max(one, 1e-7), 1.0, 200.0));
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
  for (size_t size = 4096; size <= biggest; size *= 4) {
    const double bytes = double(size);
    for (bool pin : {true, false})
      for (const char* dir : {"h2d", "d2h"}) {
        void* host = pin ? pinned : static_cast<void*>(pageable.data());
        const bool h2d = std::string(dir) == "h2d";
        std::vector<double> rates;
        for (int r = -2; r < repeats; ++r) {  // two warm-up copies
          const double s = t.time([&] {
            ok(cudaMemcpyAsync(h2d ? dev.p : host, h2d ? host : dev.p, size, h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
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
  // The same launches captured once into a graph and replayed; then again with a timing event
  // recorded after each kernel, as graph nodes (cudaEventRecordExternal); then with a stamp of
  // the GPU's clock after each kernel, the way a profiled step's graph marks its span boundaries
  // (cuda::Network::begin_profile).
  enum class After { nothing, event, stamp };
  std::vector<cudaEvent_t> events(static_cast<size_t>(kernels));
  for (auto& e : events) ok(cudaEventCreate(&e), "cudaEventCreate");
  DeviceMem stamps(size_t(kernels) * sizeof(uint64_t));
  ok(cudaMemsetAsync(stamps.p, 0, size_t(kernels) * sizeof(uint64_t), t.stream), "cudaMemsetAsync");
  auto* stamp = static_cast<uint64_t*>(stamps.p);
  auto replayed = [&](After after, std::vector<double>& per_kernel) {
    cudaGraph_t g{};
    cudaGraphExec_t exec{};
    ok(cudaStreamBeginCapture(t.stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    for (int k = 0; k < kernels; ++k) {
      cuda::empty_kernel(t.stream);
      if (after == After::event) ok(cudaEventRecordWithFlags(events[size_t(k)], t.stream, cudaEventRecordExternal), "cudaEventRecordWithFlags");
      if (after == After::stamp) cuda::stamp_time(stamp + k, t.stream);
    }
    ok(cudaStreamEndCapture(t.stream, &g), "cudaStreamEndCapture");
    ok(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
    for (int r = -1; r < repeats; ++r) {
      const double s = t.time([&] { ok(cudaGraphLaunch(exec, t.stream), "cudaGraphLaunch"); });
      if (r >= 0) per_kernel.push_back(s / kernels * 1e6);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
  };
  std::vector<double> graph_events, graph_stamps;
  replayed(After::nothing, graph);
  replayed(After::event, graph_events);
  replayed(After::stamp, graph_stamps);
  // Validate: the events were recorded, in order, by the last replay; the stamps were written,
  // in order, and span some time.
  float first_to_last = -1;
  ok(cudaEventElapsedTime(&first_to_last, events.front(), events.back()), "cudaEventElapsedTime (the graph's event records)");
  check(first_to_last >= 0, "GPU launch benchmark: the graph's last event was recorded before its first");
  for (auto& e : events) cudaEventDestroy(e);
  std::vector<uint64_t> stamped(static_cast<size_t>(kernels));
  ok(cudaMemcpy(stamped.data(), stamp, stamped.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost), "cudaMemcpy (the graph's stamps)");
  check(stamped.front() > 0 && std::is_sorted(stamped.begin(), stamped.end()) && stamped.back() > stamped.front(),
        "GPU launch benchmark: the graph's clock stamps are missing or out of order");
  cuda::clock_tick(stamp, t.stream);
  uint64_t tick = 0;
  ok(cudaMemcpy(&tick, stamp, sizeof tick, cudaMemcpyDeviceToHost), "cudaMemcpy (the clock's tick)");
  res.clock_tick_ns = double(tick);
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
  res.graph_event_us = spread_of(graph_events).median;
  res.graph_stamp_us = spread_of(graph_stamps).median;
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

namespace {
// Host-side rounding of a float to each input format, as bytes, and the value it now holds.
struct Quantized {
  std::vector<unsigned char> bytes;
  std::vector<float> values;
};
Quantized quantize(const std::vector<float>& x, cuda::Precision p) {
  Quantized q;
  const size_t e = cuda::input_bytes(p);
  q.bytes.resize(x.size() * e);
  q.values.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    float v = x[i];
    unsigned char* dst = &q.bytes[i * e];
    switch (p) {
      case cuda::Precision::fp32:
      case cuda::Precision::tf32:  // tf32 rounds inside the tensor cores; the reference keeps fp32
        std::memcpy(dst, &v, 4);
        break;
      case cuda::Precision::bf16: {
        const __nv_bfloat16 h = __float2bfloat16_rn(v);
        std::memcpy(dst, &h, 2);
        v = __bfloat162float(h);
        break;
      }
      case cuda::Precision::fp16: {
        const __half h = __float2half_rn(v);
        std::memcpy(dst, &h, 2);
        v = __half2float(h);
        break;
      }
      case cuda::Precision::fp8: {
        const __nv_fp8_e4m3 h(v);
        std::memcpy(dst, &h, 1);
        v = float(h);
        break;
      }
    }
    q.values[i] = v;
  }
  return q;
}

// `sets` device copies of `host`: the GEMM and conv benchmarks cycle their calls through copies
// spanning twice the L2, so each call reads its inputs from device memory, as a training step does.
std::vector<std::unique_ptr<DeviceMem>> device_copies(const std::vector<unsigned char>& host, int sets) {
  std::vector<std::unique_ptr<DeviceMem>> out;
  for (int r = 0; r < sets; ++r) {
    out.push_back(std::make_unique<DeviceMem>(host.size()));
    cuda::copy_to_device(out.back()->p, host.data(), host.size(), nullptr, "copying a benchmark's inputs");  // landed before the timed stream reads them
  }
  return out;
}
/// How many copies of `set_bytes` span twice an L2 of `l2` bytes (1 to 16).
int rotated_sets(int l2, double set_bytes) { return int(std::clamp(std::ceil(2.0 * l2 / set_bytes), 1.0, 16.0)); }

double tolerance(cuda::Precision p) {
  switch (p) {
    case cuda::Precision::tf32: return 5e-3;  // inputs rounded to 10 mantissa bits in the tensor cores
    case cuda::Precision::fp8: return 1e-2;   // output rounded to bf16
    default: return 1e-5;                     // exact inputs, fp32 accumulation and output
  }
}
}  // namespace

std::vector<GemmPoint> gemm(int device, const std::vector<int64_t>& sizes, int repeats) {
  ok(cudaSetDevice(device), "cudaSetDevice");
  const cuda::GpuInfo info = cuda::gpu_info(device);
  int l2 = 0;
  cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device);
  Timer t;
  std::vector<GemmPoint> out;
  for (auto p : {cuda::Precision::fp32, cuda::Precision::tf32, cuda::Precision::bf16, cuda::Precision::fp16, cuda::Precision::fp8}) {
    if (!cuda::supported(p, info.cc_major, info.cc_minor)) continue;
    for (int64_t s : sizes) {
      const int64_t m = s, n = s, k = s;
      try {
        Rng rng(uint64_t(s) * 31 + uint64_t(p));
        std::vector<float> a(size_t(k * m)), b(size_t(k * n));
        for (auto& v : a) v = 2 * rng.uniform() - 1;  // never zeros: uniform in [-1, 1)
        for (auto& v : b) v = 2 * rng.uniform() - 1;
        const Quantized qa = quantize(a, p), qb = quantize(b, p);
        const int sets = rotated_sets(l2, double(qa.bytes.size() + qb.bytes.size()));
        const auto as = device_copies(qa.bytes, sets), bs = device_copies(qb.bytes, sets);
        DeviceMem d(size_t(m * n) * cuda::output_bytes(p));
        cuda::LtGemm g(p, m, n, k);
        const int calls = t.calls_for([&] { g.run(as[0]->p, bs[0]->p, d.p, t.stream); });
        int next = 0;
        std::vector<double> rates;
        for (int r = -2; r < repeats; ++r) {
          const double sec = t.time([&] {
            for (int c = 0; c < calls; ++c, next = (next + 1) % sets) g.run(as[size_t(next)]->p, bs[size_t(next)]->p, d.p, t.stream);
          });
          if (r >= 0) rates.push_back(g.flops() * calls / sec / 1e12);
        }
        // Validate set 0's product at 16 sampled outputs.
        g.run(as[0]->p, bs[0]->p, d.p, t.stream);
        ok(cudaStreamSynchronize(t.stream), "cudaStreamSynchronize");
        std::vector<unsigned char> dh(size_t(m * n) * cuda::output_bytes(p));
        ok(cudaMemcpy(dh.data(), d.p, dh.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
        GemmPoint pt{cuda::to_string(p), m, n, k, 0, 0, 0, 0, sets, ""};
        Rng pick(7);
        for (int smp = 0; smp < 16; ++smp) {
          const int64_t i = int64_t(pick.below(uint64_t(m))), j = int64_t(pick.below(uint64_t(n)));
          double ref = 0, scale = 0;
          for (int64_t kk = 0; kk < k; ++kk) {
            const double x = double(qa.values[size_t(kk + i * k)]) * double(qb.values[size_t(kk + j * k)]);
            ref += x, scale += std::fabs(x);
          }
          float got = 0;
          if (p == cuda::Precision::fp8) {
            __nv_bfloat16 h;
            std::memcpy(&h, &dh[size_t(i + j * m) * 2], 2);
            got = __bfloat162float(h);
          } else {
            std::memcpy(&got, &dh[size_t(i + j * m) * 4], 4);
          }
          pt.max_rel_error = std::max(pt.max_rel_error, std::fabs(double(got) - ref) / std::max(scale, 1e-30));
        }
        check(pt.max_rel_error < tolerance(p), fmt::format("GPU GEMM {} {}x{}x{} gave wrong results (relative error {:.2g})",
                                                           pt.precision, m, n, k, pt.max_rel_error));
        const Spread sp = spread_of(rates);
        pt.median_tflops = sp.median, pt.min_tflops = sp.min, pt.max_tflops = sp.max;
        out.push_back(pt);
      } catch (const Error& e) {  // one precision's failure leaves the others measured
        GemmPoint pt{cuda::to_string(p), m, n, k, 0, 0, 0, 0, 1, e.what()};
        out.push_back(pt);
        cudaGetLastError();
      }
    }
  }
  return out;
}

std::vector<ConvPoint> conv(int device, const std::vector<std::string>& models, const std::vector<int64_t>& chw, int64_t batch,
                            int repeats) {
  ok(cudaSetDevice(device), "cudaSetDevice");
  const cuda::GpuInfo info = cuda::gpu_info(device);
  int l2 = 0;
  cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device);
  Timer t;
  std::vector<ConvPoint> out;
  std::set<std::string> seen;
  for (const auto& model : models) {
    const nn::Graph g = nn::build_graph(nn::load_model(model), Dims(chw.begin(), chw.end()), 10, batch);
    for (const auto& node : g.nodes) {
      if (node.kind != ops::OpKind::conv2d) continue;
      const Dims& x = node.in_dims[0];
      cuda::ConvShape s{x[0], x[1], x[2], x[3], node.attrs.out_channels, node.attrs.kernel, node.attrs.stride, node.attrs.padding};
      const std::string key = fmt::format("{}/{}/{}/{}/{}/{}/{}", s.n, s.c, s.h, s.k, s.r, s.stride, s.pad);
      if (!seen.insert(key).second) continue;  // ResNet blocks repeat shapes
      // bf16 in both layouts: NHWC is what training runs, but cuDNN's NHWC kernels for inputs of
      // few channels were slower than its NCHW ones (cuda::weight_grad_in_nchw).
      struct Config {
        cuda::Precision p;
        bool nhwc;
      };
      for (const Config& config : {Config{cuda::Precision::fp32, false}, Config{cuda::Precision::tf32, false},
                                   Config{cuda::Precision::bf16, true}, Config{cuda::Precision::bf16, false}}) {
        // Copies, not a structured binding: lambdas below capture them, which Clang before 16 refuses.
        const cuda::Precision p = config.p;
        const bool nhwc = config.nhwc;
        if (!cuda::supported(p, info.cc_major, info.cc_minor)) continue;
        const std::string layout = nhwc ? "nhwc" : "nchw";
        try {
          cuda::CudnnConv c(s, p, nhwc);
          const int64_t oh = s.out_h(), ow = s.out_w();
          Rng rng(uint64_t(s.c * 131 + s.k) + uint64_t(p));
          std::vector<float> xv(size_t(s.n * s.c * s.h * s.w)), wv(size_t(s.k * s.c * s.r * s.r)), dyv(size_t(s.n * s.k * oh * ow));
          for (auto* v : {&xv, &wv, &dyv})
            for (auto& e : *v) e = 2 * rng.uniform() - 1;
          const Quantized qx = quantize(xv, p), qw = quantize(wv, p), qdy = quantize(dyv, p);
          const size_t e = cuda::input_bytes(p);
          DeviceMem dw_in(qw.bytes.size()), dy_out(size_t(s.n * s.k * oh * ow) * e), dx_out(qx.bytes.size()), dw_out(qw.bytes.size());
          cuda::copy_to_device(dw_in.p, qw.bytes.data(), qw.bytes.size(), nullptr, "copying the conv benchmark's weights");
          // As the GEMMs: the input and the output gradient rotate over copies spanning twice the L2.
          const int sets = rotated_sets(l2, double(qx.bytes.size() + qdy.bytes.size()));
          const auto xs = device_copies(qx.bytes, sets), dys = device_copies(qdy.bytes, sets);
          size_t next = 0;
          auto turn = [&] { return std::exchange(next, (next + 1) % size_t(sets)); };
          auto rate = [&](auto&& pass) {
            const int calls = t.calls_for(pass);
            std::vector<double> r;
            for (int i = -2; i < repeats; ++i) {
              const double sec = t.time([&] {
                for (int k = 0; k < calls; ++k) pass();
              });
              if (i >= 0) r.push_back(s.flops() * calls / sec / 1e12);
            }
            return spread_of(r).median;
          };
          ConvPoint pt{model, node.name, cuda::to_string(p), c.algorithms(), layout, {s.n, s.c, s.h, s.w}, s.k, s.r, s.stride, s.pad, 0, 0, 0, 0, ""};
          pt.rotated_sets = sets;
          pt.forward_tflops = rate([&] { c.forward(xs[turn()]->p, dw_in.p, dy_out.p, t.stream); });
          pt.backward_data_tflops = rate([&] { c.backward_data(dw_in.p, dys[turn()]->p, dx_out.p, t.stream); });
          pt.backward_filter_tflops = rate([&] {
            const size_t i = turn();
            c.backward_filter(xs[i]->p, dys[i]->p, dw_out.p, t.stream);
          });
          // Validate 16 outputs of a forward pass just run into dy_out against float64 in the
          // tensors' own layouts; max_rel_error gets the worst.
          auto validate = [&](ConvPoint& pt) {
            ok(cudaStreamSynchronize(t.stream), "cudaStreamSynchronize");
            std::vector<unsigned char> yh(size_t(s.n * s.k * oh * ow) * e);
            ok(cudaMemcpy(yh.data(), dy_out.p, yh.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
            auto xi = [&](int64_t n, int64_t ch, int64_t y, int64_t xx) {
              return size_t(nhwc ? ((n * s.h + y) * s.w + xx) * s.c + ch : ((n * s.c + ch) * s.h + y) * s.w + xx);
            };
            auto wi = [&](int64_t k, int64_t ch, int64_t r, int64_t q) {
              return size_t(nhwc ? ((k * s.r + r) * s.r + q) * s.c + ch : ((k * s.c + ch) * s.r + r) * s.r + q);
            };
            auto yi = [&](int64_t n, int64_t k, int64_t y, int64_t xx) {
              return size_t(nhwc ? ((n * oh + y) * ow + xx) * s.k + k : ((n * s.k + k) * oh + y) * ow + xx);
            };
            Rng pick(11);
            for (int smp = 0; smp < 16; ++smp) {
              const int64_t n = int64_t(pick.below(uint64_t(s.n))), k = int64_t(pick.below(uint64_t(s.k)));
              const int64_t y = int64_t(pick.below(uint64_t(oh))), xx = int64_t(pick.below(uint64_t(ow)));
              double ref = 0, scale = 0;
              for (int64_t ch = 0; ch < s.c; ++ch)
                for (int64_t r = 0; r < s.r; ++r)
                  for (int64_t q = 0; q < s.r; ++q) {
                    const int64_t iy = y * s.stride - s.pad + r, ix = xx * s.stride - s.pad + q;
                    if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
                    const double v = double(qx.values[xi(n, ch, iy, ix)]) * double(qw.values[wi(k, ch, r, q)]);
                    ref += v, scale += std::fabs(v);
                  }
              float got = 0;
              const unsigned char* src = &yh[yi(n, k, y, xx) * e];
              if (p == cuda::Precision::bf16) {
                __nv_bfloat16 h;
                std::memcpy(&h, src, 2);
                got = __bfloat162float(h);
              } else {
                std::memcpy(&got, src, 4);
              }
              pt.max_rel_error = std::max(pt.max_rel_error, std::fabs(double(got) - ref) / std::max(scale, 1e-30));
            }
            // bf16 writes its output in bf16: 8 significant bits.
            const double tol = p == cuda::Precision::bf16 ? 1e-2 : tolerance(p);
            check(pt.max_rel_error < tol, fmt::format("{} conv {} of {} in {} gave wrong results (relative error {:.2g})", pt.algorithms,
                                                      node.name, model, pt.precision, pt.max_rel_error));
          };
          c.forward(xs[0]->p, dw_in.p, dy_out.p, t.stream);
          validate(pt);
          out.push_back(pt);
          // dlperf's own kernels for few input channels (small_conv.h), where they take the
          // shape: the forward pass and weight gradient (the input's gradient stays cuDNN's, and
          // a network's first layer needs none), beside cuDNN's on the same buffers. tf32 would
          // time the fp32 kernels again.
          if (cuda::small_conv_fits(s) && p != cuda::Precision::tf32) {
            const cuda::DType dt = p == cuda::Precision::bf16 ? cuda::DType::bf16 : cuda::DType::f32;
            DeviceMem partial(cuda::small_conv_workspace(s));
            ConvPoint own = pt;
            own.algorithms = "own kernels (small_conv.h; bwd data: cuDNN's)", own.max_rel_error = 0, own.backward_data_tflops = 0;
            own.forward_tflops = rate([&] { cuda::small_conv_forward(dt, nhwc, s, xs[turn()]->p, dw_in.p, dy_out.p, t.stream); });
            own.backward_filter_tflops = rate([&] {
              const size_t i = turn();
              cuda::small_conv_weight_grad(dt, nhwc, s, xs[i]->p, dys[i]->p, dw_out.p, partial.p, t.stream);
            });
            cuda::small_conv_forward(dt, nhwc, s, xs[0]->p, dw_in.p, dy_out.p, t.stream);
            validate(own);
            out.push_back(own);
          }
        } catch (const Error& e) {  // one layer's or precision's failure leaves the others measured
          ConvPoint pt{model, node.name, cuda::to_string(p), "", layout, {s.n, s.c, s.h, s.w}, s.k, s.r, s.stride, s.pad, 0, 0, 0, 0, e.what()};
          out.push_back(pt);
          cudaGetLastError();
        }
      }
    }
  }
  return out;
}

nlohmann::json to_json(const std::vector<ConvPoint>& c) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& x : c)
    out.push_back({{"model", x.model}, {"layer", x.layer}, {"precision", x.precision}, {"layout", x.layout}, {"input", x.input},
                   {"out_channels", x.out_channels}, {"kernel", x.kernel}, {"stride", x.stride}, {"padding", x.padding},
                   {"forward_tflops", x.forward_tflops}, {"backward_data_tflops", x.backward_data_tflops},
                   {"backward_filter_tflops", x.backward_filter_tflops}, {"algorithms", x.algorithms},
                   {"max_rel_error", x.max_rel_error}, {"rotated_input_sets", x.rotated_sets}});
  for (size_t i = 0; i < c.size(); ++i)
    if (!c[i].failed.empty()) out[i]["failed"] = c[i].failed;
  return out;
}

#ifdef DLPERF_HAVE_NCCL
std::vector<AllReducePoint> nccl_allreduce(double max_bytes, int repeats, int& gpus, std::string& why) {
  gpus = cuda::device_count();
  if (gpus == 0) {
    why = why_not();
    return {};
  }
  std::vector<ncclComm_t> comms(static_cast<size_t>(gpus));
  std::vector<int> devs(static_cast<size_t>(gpus));
  for (int i = 0; i < gpus; ++i) devs[size_t(i)] = i;
  if (ncclCommInitAll(comms.data(), gpus, devs.data()) != ncclSuccess) {
    why = "NCCL could not set up its communicators";
    return {};
  }
  const size_t most = size_t(max_bytes / 4);
  std::vector<float*> send(static_cast<size_t>(gpus)), recv(static_cast<size_t>(gpus));
  std::vector<cudaStream_t> streams(static_cast<size_t>(gpus));
  for (int i = 0; i < gpus; ++i) {
    ok(cudaSetDevice(i), "cudaSetDevice");
    ok(cudaMalloc(&send[size_t(i)], most * 4), "cudaMalloc");
    ok(cudaMalloc(&recv[size_t(i)], most * 4), "cudaMalloc");
    ok(cudaStreamCreateWithFlags(&streams[size_t(i)], cudaStreamNonBlocking), "cudaStreamCreate");
    cuda::fill(send[size_t(i)], int64_t(most), float(i + 1), streams[size_t(i)]);  // rank r sends r + 1
  }
  auto once = [&](size_t count) {
    ncclGroupStart();
    for (int i = 0; i < gpus; ++i)
      ncclAllReduce(send[size_t(i)], recv[size_t(i)], count, ncclFloat, ncclSum, comms[size_t(i)], streams[size_t(i)]);
    ncclGroupEnd();
    for (int i = 0; i < gpus; ++i) {
      ok(cudaSetDevice(i), "cudaSetDevice");
      ok(cudaStreamSynchronize(streams[size_t(i)]), "all-reduce");
    }
  };
  std::vector<AllReducePoint> out;
  for (size_t size = 1024; double(size) <= max_bytes; size *= 4) {
    const double bytes = double(size);
    const size_t count = size / 4;
    std::vector<double> us;
    for (int r = -3; r < repeats; ++r) {  // timed on the host around the synchronized group
      const auto t0 = std::chrono::steady_clock::now();
      once(count);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r >= 0) us.push_back(s * 1e6);
    }
    const Spread sp = spread_of(us);
    AllReducePoint p{bytes, sp.median, sp.min, sp.max, algbw_gbps(bytes, sp.median / 1e6), 0};
    p.busbw_gbps = allreduce_busbw(p.algbw_gbps, gpus);
    out.push_back(p);
  }
  // Validate: every rank holds 1 + 2 + ... + n everywhere.
  const float want = float(gpus * (gpus + 1) / 2);
  for (int i = 0; i < gpus; ++i) {
    float first = 0, last = 0;
    ok(cudaSetDevice(i), "cudaSetDevice");
    ok(cudaMemcpy(&first, recv[size_t(i)], 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
    ok(cudaMemcpy(&last, recv[size_t(i)] + size_t(out.back().bytes / 4) - 1, 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
    check(first == want && last == want, fmt::format("NCCL all-reduce gave {} and {} on GPU {}, not {}", first, last, i, want));
    cudaFree(send[size_t(i)]);
    cudaFree(recv[size_t(i)]);
    cudaStreamDestroy(streams[size_t(i)]);
    ncclCommDestroy(comms[size_t(i)]);
  }
  return out;
}
#else
std::vector<AllReducePoint> nccl_allreduce(double, int, int& gpus, std::string& why) {
  gpus = cuda::device_count();
  why = "this build has no NCCL (CMake did not find nccl.h and libnccl)";
  return {};
}
#endif

nlohmann::json to_json(const std::vector<GemmPoint>& g) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& x : g)
    out.push_back({{"precision", x.precision}, {"m", x.m}, {"n", x.n}, {"k", x.k}, {"median_tflops", x.median_tflops},
                   {"min_tflops", x.min_tflops}, {"max_tflops", x.max_tflops}, {"max_rel_error", x.max_rel_error},
                   {"rotated_input_sets", x.rotated_sets}});
  for (size_t i = 0; i < g.size(); ++i)
    if (!g[i].failed.empty()) out[i]["failed"] = g[i].failed;
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
  return {{"plain_us", l.plain_us},
          {"graph_us", l.graph_us},
          {"graph_with_events_us", l.graph_event_us},
          {"event_record_us", l.graph_event_us - l.graph_us},
          {"graph_with_stamps_us", l.graph_stamp_us},
          {"stamp_us", l.graph_stamp_us - l.graph_us},
          {"clock_tick_ns", l.clock_tick_ns},
          {"launch_and_sync_us", l.sync_us}};
}
nlohmann::json to_json(const std::vector<DeviceBandwidth>& b) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& x : b)
    out.push_back({{"kernel", x.kernel}, {"bytes", x.bytes}, {"median_gbps", x.median_gbps}, {"min_gbps", x.min_gbps}, {"max_gbps", x.max_gbps}});
  return out;
}

}  // namespace dlperf::bench::gpu
