// What each GEMM precision is, apart from cuBLASLt (gemm.h), so code that only asks, and the
// tests' CPU emulation of LtGemm, need no cuBLASLt.
#include "backend/cuda/gemm.h"

namespace dlperf::cuda {

const char* to_string(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::tf32: return "tf32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
    case Precision::fp8: return "fp8";
  }
  return "?";
}

size_t input_bytes(Precision p) { return p == Precision::fp8 ? 1 : (p == Precision::bf16 || p == Precision::fp16) ? 2 : 4; }
size_t output_bytes(Precision p) { return p == Precision::fp8 ? 2 : 4; }

bool supported(Precision p, int major, int minor) {
  switch (p) {
    case Precision::fp32: return true;
    case Precision::fp16: return major >= 7;
    case Precision::tf32: case Precision::bf16: return major >= 8;
    case Precision::fp8: return major > 8 || (major == 8 && minor >= 9);
  }
  return false;
}

}  // namespace dlperf::cuda
