// CUDA and cuDNN status codes to dlperf::Error, naming what failed. CUDA builds only.
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

}  // namespace dlperf::cuda
