// cuBLASLt's matrix multiply as plain loops, for the executor under the CPU emulation
// (cuda_emu.h): LtGemm's interface (src/backend/cuda/gemm.h), column-major D = op(A) op(B) with
// the bias epilogue, inputs in the precision's type, sums in fp32. A stand-in for testing what is
// around the GEMMs; cuBLASLt itself is checked on a GPU.
#include "emu/cuda_emu.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "backend/cuda/gemm.h"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/runtime.h"
#include "core/error.h"
#include "core/memory.h"

namespace dlperf::cuda {

namespace {

struct Problem {
  bool transa, transb, half_out;
  const float* bias;
  bool relu;
  float* bias_grad;
};

template <class Tin, class Tout>
void multiply(const Problem& q, int64_t m, int64_t n, int64_t k, const void* a, const void* b, void* d) {
  const Tin* pa = static_cast<const Tin*>(a);
  const Tin* pb = static_cast<const Tin*>(b);
  Tout* pd = static_cast<Tout*>(d);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      float sum = q.bias ? q.bias[i] : 0.f;
      for (int64_t l = 0; l < k; ++l) {
        const float x = ld(pa, q.transa ? l + i * k : i + l * m), y = ld(pb, q.transb ? j + l * n : l + j * k);
        sum += x * y;
      }
      st(pd, i + j * m, q.relu ? std::max(sum, 0.f) : sum);
    }
  if (q.bias_grad)  // BGRADB: the sums of op(B) over k, one per column of D
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t l = 0; l < k; ++l) sum += ld(pb, q.transb ? j + l * n : l + j * k);
      q.bias_grad[j] = float(sum);
    }
}

}  // namespace

// Takes its workspace from the device allocator as cuBLASLt's LtGemm does, so the executor's
// memory account is the GPU's.
LtGemm::LtGemm(Precision p, bool transa, bool transb, int64_t m, int64_t n, int64_t k, size_t workspace, bool half_out,
               GemmEpilogue e)
    : p_(p), m_(m), n_(n), k_(k), workspace_bytes_(workspace) {
  check(p != Precision::fp8, "the CPU emulation has no fp8 GEMM");
  const bool own_type = half_out && (p == Precision::bf16 || p == Precision::fp16);
  check((!e.bias && !e.relu && !e.bias_grad) || !own_type, "a fused epilogue needs an fp32 output");
  check(!e.bias_grad || (!e.bias && !e.relu), "a GEMM's epilogue adds a bias or computes a bias gradient, not both");
  // cuBLASLt may offer no algorithm with an epilogue; DLPERF_EMU_GEMM_PLAIN=1 declines the relu
  // and the bias gradient here too, for the executor's fallbacks (launches of its own).
  if (std::getenv("DLPERF_EMU_GEMM_PLAIN") != nullptr) e.relu = false, e.bias_grad = nullptr;
  desc_ = new Problem{transa, transb, own_type, e.bias, e.relu, e.bias_grad};
  fuses_bias_ = e.bias != nullptr;
  fuses_relu_ = e.relu;
  fuses_bias_grad_ = e.bias_grad != nullptr;
  cudaGetDevice(&device_);
  workspace_ = device_allocator(device_).allocate(workspace_bytes_, MemCategory::workspace);
}
LtGemm::~LtGemm() {
  if (workspace_) device_allocator(device_).release(workspace_);
  delete static_cast<Problem*>(desc_);
}

// Queued as one "kernel" of the emulation's stream (emu_stream.h).
void LtGemm::run(const void* a, const void* b, void* d, cudaStream_t stream) {
  emu::submit(emu::NodeKind::kernel, stream, [q = *static_cast<const Problem*>(desc_), p = p_, m = m_, n = n_, k = k_, a, b, d] {
    switch (p) {
      case Precision::bf16:
        if (q.half_out) multiply<__nv_bfloat16, __nv_bfloat16>(q, m, n, k, a, b, d);
        else multiply<__nv_bfloat16, float>(q, m, n, k, a, b, d);
        break;
      case Precision::fp16:
        if (q.half_out) multiply<__half, __half>(q, m, n, k, a, b, d);
        else multiply<__half, float>(q, m, n, k, a, b, d);
        break;
      default: multiply<float, float>(q, m, n, k, a, b, d); break;
    }
  });
}

}  // namespace dlperf::cuda
