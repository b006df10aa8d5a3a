// What dlperf's .cu files share: the launch shape of element-wise kernels, loads and stores of
// every activation type with fp32 arithmetic, and a dispatch from DType to its C++ type. For
// kernel sources only (device code, inside namespace dlperf::cuda).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <initializer_list>

#include "backend/cuda/kernels.h"

namespace dlperf::cuda {
namespace {

constexpr int kThreads = 256;

// Enough blocks to fill a large GPU several times over, capped so tiny tensors launch few.
inline unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return unsigned(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

// A kernel launch: LAUNCH(grid, block, shared bytes, stream, kernel)(arguments). Under the CPU
// emulation the CPU test suite uses (tests/emu/cuda_emu.h) it runs the kernel there instead.
#ifdef DLPERF_CUDA_EMULATION
#define LAUNCH(grid, block, shmem, stream, ...) ::emu::launcher(dim3(grid), dim3(block), (stream), __VA_ARGS__)
#else
#define LAUNCH(grid, block, shmem, stream, ...) __VA_ARGS__<<<grid, block, shmem, stream>>>
#endif

// Fully unrolls the loop after it under nvcc, so a small array it indexes stays in registers
// (g++, compiling the kernels for the emulation, has no such pragma).
#ifdef __CUDACC__
#define UNROLL _Pragma("unroll")
#else
#define UNROLL
#endif

#define GRID_STRIDE(i, n) for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// Loads and stores of any activation type, with arithmetic in fp32 (host and device alike, so
// the host-compiled per-element bodies of pool_index.h can take them).
__host__ __device__ inline float ld(const float* p, int64_t i) { return p[i]; }
__host__ __device__ inline float ld(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__host__ __device__ inline float ld(const __half* p, int64_t i) { return __half2float(p[i]); }
__host__ __device__ inline void st(float* p, int64_t i, float v) { p[i] = v; }
__host__ __device__ inline void st(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
__host__ __device__ inline void st(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }

// 16 bytes of T, moved as one: a 16-byte load or store where the address is 16-byte aligned.
// Copied as a whole (never through a pointer of another type, which g++, compiling the kernels
// for the emulation, may reorder under its aliasing rules).
template <class T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / int(sizeof(T));
  T e[kSize];
};

// Whether every array starts on a 16-byte boundary, so whole Packs of it can move (host side).
inline bool aligned16(std::initializer_list<const void*> arrays) {
  for (const void* p : arrays)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// Loads element i of an array of T as a float: what pool_index.h's bodies take.
template <class T>
struct Loader {
  const T* p;
  __host__ __device__ float operator()(int64_t i) const { return ld(p, i); }
};

// Stores a float as element i of an array of T: what pool_index.h's tile body takes.
template <class T>
struct Storer {
  T* p;
  __host__ __device__ void operator()(int64_t i, float v) const { st(p, i, v); }
};

// Calls `body` with T set to the C++ type of `t`.
#define DISPATCH(t, ...)                  \
  switch (t) {                            \
    case DType::f32: {                    \
      using T = float;                    \
      __VA_ARGS__;                        \
      break;                              \
    }                                     \
    case DType::bf16: {                   \
      using T = __nv_bfloat16;            \
      __VA_ARGS__;                        \
      break;                              \
    }                                     \
    case DType::f16: {                    \
      using T = __half;                   \
      __VA_ARGS__;                        \
      break;                              \
    }                                     \
  }

}  // namespace
}  // namespace dlperf::cuda
