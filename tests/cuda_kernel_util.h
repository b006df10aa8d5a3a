// What the CUDA tests share: host-side layout conversion, random inputs, and device buffers.
// The kernel tests (test_cuda_kernels.cpp) build twice: against CUDA in dlperf_tests (suite Cuda,
// skipped without a GPU) and against the CPU emulation in dlperf_emu_tests (suite CudaEmu,
// tests/emu/cuda_emu.h), where "device" buffers are host memory and every launch runs before it
// returns.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cuda/layout.h"
#include "core/rng.h"
#include "core/tensor.h"  // Dims

#if defined(DLPERF_HAVE_CUDA) || defined(DLPERF_CUDA_EMULATION)
#include "backend/cuda/kernels.h"
#endif
#if defined(DLPERF_HAVE_CUDA) && !defined(DLPERF_CUDA_EMULATION)
#include <cuda_runtime.h>

#include "backend/cuda/runtime.h"
#endif

namespace dlperf::test {

// Host copies between NCHW and the executor's layout `l`, for comparing kernels in either:
// `to_nchw` false stores an NCHW tensor in `l`, true reads one stored in `l` back to NCHW.
template <class V>
inline V convert(const V& from, const Dims& d, cuda::Layout l, bool to_nchw) {
  if (l == cuda::Layout::nchw) return from;
  V out(from.size());
  const int64_t C = d[1], hw = d.size() == 4 ? d[2] * d[3] : 1;
  for (int64_t n = 0; n < d[0]; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < hw; ++i) {
        const size_t nchw = size_t((n * C + c) * hw + i), stored = size_t(cuda::offset_of(l, n, c, i, C, hw));
        if (to_nchw) out[nchw] = from[stored];
        else out[stored] = from[nchw];
      }
  return out;
}
template <class V>
inline V to_layout(const V& nchw, const Dims& d, cuda::Layout l) { return convert(nchw, d, l, false); }
template <class V>
inline V from_layout(const V& stored, const Dims& d, cuda::Layout l) { return convert(stored, d, l, true); }

inline std::vector<float> randn(size_t n, uint64_t seed) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(r.normal());
  return v;
}

#ifdef DLPERF_CUDA_EMULATION
#define KERNEL_SUITE CudaEmu
#define REQUIRE_GPU() (void)0

// "Device" buffers of the emulation: host memory, zeroed like the CUDA version's.
template <class T>
struct Dev {
  std::vector<T> storage;
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(const std::vector<T>& h) : storage(h), n(h.size()) { storage.resize(std::max<size_t>(n, 1)), p = storage.data(); }
  explicit Dev(size_t count) : storage(std::max<size_t>(count, 1)), p(storage.data()), n(count) {}
  std::vector<T> host() const { return {storage.begin(), storage.begin() + std::ptrdiff_t(n)}; }
};
#elif defined(DLPERF_HAVE_CUDA)
#define KERNEL_SUITE Cuda
#define REQUIRE_GPU() \
  if (cuda::device_count() == 0) GTEST_SKIP() << cuda::why_no_device()

// Device copies of host vectors, freed at scope end.
template <class T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(const std::vector<T>& h) : n(h.size()) {
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  explicit Dev(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, 0, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
  }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  std::vector<T> host() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};
#endif

#if defined(DLPERF_HAVE_CUDA) || defined(DLPERF_CUDA_EMULATION)
// Device copies in a half type, and back, for the kernels' bf16/fp16 paths.
inline std::vector<uint16_t> to_half(cuda::DType t, const std::vector<float>& x) {
  Dev<float> d(x);
  Dev<uint16_t> h(x.size());
  cuda::cast_from_f32(t, d.p, h.p, int64_t(x.size()), nullptr);
  return h.host();
}
inline std::vector<float> from_device(cuda::DType t, const void* p, size_t n) {
  Dev<float> out(n);
  cuda::cast_to_f32(t, p, out.p, int64_t(n), nullptr);
  return out.host();
}
#endif

}  // namespace dlperf::test
