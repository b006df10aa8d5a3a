// A second look at a library's choice: running its candidate algorithms again, on random data
// through the very call training makes, and taking the fastest there. cuDNN's timed search runs
// its candidates on buffers of its own, and cuBLASLt's heuristic runs nothing at all; on an H100
// (2026-11-28) cuDNN's search put an algorithm first that took six times as long on training's
// data (conv_choice.h, retime_candidates). Used by conv.cpp and gemm.cpp while they choose, and by
// the executor for its own small-convolution kernels, before any step is queued: everything here
// waits for the work it queued.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <random>
#include <vector>

#include "backend/cuda/kernels.h"

namespace dlperf::cuda::second_look {

/// Fills `n` elements of type `t` at `dst` with values in [-1, 1): a block of up to 1M values
/// from a fixed seed, repeated over the buffer (what matters to an algorithm's speed is that the
/// values are not all zero, not that they never repeat). False where CUDA failed.
inline bool fill_random(void* dst, DType t, size_t n) {
  const size_t block = std::min<size_t>(n, size_t(1) << 20);
  if (block == 0) return true;
  std::vector<float> host(block);
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (float& v : host) v = u(gen);
  float* dev = nullptr;
  if (cudaMalloc(&dev, block * sizeof(float)) != cudaSuccess) return false;
  bool ok = cudaMemcpy(dev, host.data(), block * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess;
  for (size_t at = 0; ok && at < n; at += block)
    cast_from_f32(t, dev, static_cast<char*>(dst) + at * bytes_of(t), int64_t(std::min(block, n - at)), nullptr);
  ok = ok && cudaDeviceSynchronize() == cudaSuccess;
  cudaFree(dev);
  return ok;
}

/// The median time of 5 runs of `pass` (after one to warm up) on `stream`, in ms; -1 where a run
/// failed (`pass` returns false) or CUDA did.
///
/// Each run waits behind a 100 us hold of the stream (hold_stream), queued with it. Timed on an
/// idle GPU, a run of a few microseconds (a linear layer's GEMM at batch 64) would include the
/// host's time to queue it, some microseconds of a library call that a CUDA graph's replay
/// never pays, and its jitter; behind the hold the events time the GPU's work alone, as the
/// step's graph runs it. 100 us is several times what a cuDNN or cuBLASLt call takes the host.
template <class Pass>
double median_ms(Pass pass, cudaStream_t stream = nullptr) {
  constexpr uint64_t kHoldNs = 100'000;
#ifdef DLPERF_CUDA_EMULATION
  constexpr int kWarm = 0, kSamples = 1;  // emulated kernels crawl, and their times say nothing
#else
  constexpr int kWarm = 1, kSamples = 5;
#endif
  for (int i = 0; i < kWarm; ++i)
    if (!pass()) return -1;
  cudaEvent_t a = nullptr, b = nullptr;
  if (cudaEventCreate(&a) != cudaSuccess || cudaEventCreate(&b) != cudaSuccess) {
    if (a) cudaEventDestroy(a);
    return -1;
  }
  std::vector<double> ms;
  for (int i = 0; i < kSamples; ++i) {
    hold_stream(kHoldNs, stream);
    cudaEventRecord(a, stream);
    const bool ran = pass();
    cudaEventRecord(b, stream);
    float t = 0;
    if (!ran || cudaEventSynchronize(b) != cudaSuccess || cudaEventElapsedTime(&t, a, b) != cudaSuccess) break;
    ms.push_back(t);
  }
  cudaEventDestroy(a), cudaEventDestroy(b);
  if (ms.size() < size_t(kSamples)) return -1;
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

/// Device memory of one's own for a second look, freed with it; null where there was none.
class Scratch {
 public:
  explicit Scratch(size_t bytes) {
    if (cudaMalloc(&p, std::max<size_t>(bytes, 1)) != cudaSuccess) p = nullptr, cudaGetLastError();
  }
  ~Scratch() {
    if (p) cudaFree(p);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* p = nullptr;
};

}  // namespace dlperf::cuda::second_look
