// CUDA and cuDNN status codes to dlperf::Error, naming what failed, and the one safe way to put
// host bytes where a stream will read them. CUDA builds only.
#pragma once

#include <cuda_runtime.h>
#include <cudnn.h>
#include <fmt/format.h>

#include "core/error.h"

namespace dlperf::cuda {

inline void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(fmt::format("CUDA failed in {}: {}", what, cudaGetErrorString(e)));
}

inline void ok(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) throw Error(fmt::format("cuDNN failed in {}: {}", what, cudnnGetErrorString(s)));
}

/// Copies `bytes` from host memory to the device, ordered before any later work on `s`, and
/// waits until they have landed (so the host buffer may go at once). Why not cudaMemcpy: from
/// pageable memory it returns once the bytes are staged, before the DMA lands ("API
/// synchronization behavior" in CUDA's runtime documentation), and it runs on the legacy
/// default stream, which the non-blocking streams dlperf computes on do not wait for: a kernel
/// queued next could read what was there before. The CPU emulation runs everything in order and
/// cannot show this; the first GPU run did (half-precision weights cast from the previous
/// network's values).
inline void copy_to_device(void* dst, const void* src, size_t bytes, cudaStream_t s, const char* what) {
  ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s), what);
  ok(cudaStreamSynchronize(s), what);
}

}  // namespace dlperf::cuda
