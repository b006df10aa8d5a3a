// NVTX ranges, so Nsight Systems shows dlperf's layer and phase names on its timeline. NVTX 3
// is header-only and costs a few nanoseconds when no tool is attached; builds without CUDA get
// no-ops.
#pragma once

#ifdef DLPERF_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

namespace dlperf::profile {

inline void nvtx_push(const char* name) {
#ifdef DLPERF_HAVE_CUDA
  nvtxRangePushA(name);
#else
  (void)name;
#endif
}

inline void nvtx_pop() {
#ifdef DLPERF_HAVE_CUDA
  nvtxRangePop();
#endif
}

/// A range for the lifetime of the scope.
class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtx_push(name); }
  ~NvtxRange() { nvtx_pop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace dlperf::profile
