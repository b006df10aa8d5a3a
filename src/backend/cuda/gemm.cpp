#include "backend/cuda/gemm.h"

#include <cublasLt.h>
#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/runtime.h"
#include "core/error.h"

namespace dlperf::cuda {

namespace {

void ok(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error(fmt::format("cuBLASLt failed in {} (status {})", what, int(s)));
}

cudaDataType_t in_type(Precision p) {
  switch (p) {
    case Precision::fp32: case Precision::tf32: return CUDA_R_32F;
    case Precision::bf16: return CUDA_R_16BF;
    case Precision::fp16: return CUDA_R_16F;
    case Precision::fp8: return CUDA_R_8F_E4M3;
  }
  return CUDA_R_32F;
}

// fp8 writes bf16 (its usual pairing); the others write fp32, so accuracy is the inputs' only.
cudaDataType_t out_type(Precision p) { return p == Precision::fp8 ? CUDA_R_16BF : CUDA_R_32F; }

}  // namespace

LtGemm::LtGemm(Precision p, bool transa, bool transb, int64_t m, int64_t n, int64_t k, size_t workspace, bool half_out,
               GemmEpilogue epi)
    : p_(p), m_(m), n_(n), k_(k), workspace_bytes_(workspace) {
  cudaGetDevice(&device_);
  check(p != Precision::fp8 || (transa && !transb), "fp8 GEMMs must be TN (A transposed, B not)");
  cublasLtHandle_t h;
  ok(cublasLtCreate(&h), "cublasLtCreate");
  handle_ = h;
  const cublasComputeType_t compute = p == Precision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cublasLtMatmulDesc_t desc;
  ok(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
  desc_ = desc;
  const cublasOperation_t op_a = transa ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a), "TRANSA");
  ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b), "TRANSB");
  if (p == Precision::fp8) {  // fp8 needs scale factors; 1.0 keeps the values as they are
    const float one = 1.0f;
    if (cudaMalloc(&one_, sizeof(float)) != cudaSuccess) throw Error("cudaMalloc failed for the fp8 scales");
    copy_to_device(one_, &one, sizeof one, nullptr, "the fp8 scales");
    for (auto attr : {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER})
      ok(cublasLtMatmulDescSetAttribute(desc, attr, &one_, sizeof one_), "SCALE_POINTER");
  }
  cublasLtMatrixLayout_t la, lb, ld;
  const int64_t a_rows = transa ? k : m, a_cols = transa ? m : k, b_rows = transb ? n : k, b_cols = transb ? k : n;
  ok(cublasLtMatrixLayoutCreate(&la, in_type(p), uint64_t(a_rows), uint64_t(a_cols), a_rows), "layout A");
  ok(cublasLtMatrixLayoutCreate(&lb, in_type(p), uint64_t(b_rows), uint64_t(b_cols), b_rows), "layout B");
  const bool own_type = half_out && (p == Precision::bf16 || p == Precision::fp16);
  const cudaDataType_t d_type = own_type ? in_type(p) : out_type(p);
  check((!epi.bias && !epi.relu && !epi.bias_grad) || d_type == CUDA_R_32F,
        "a fused epilogue needs an fp32 output (cuBLASLt's bias and bias gradient have the output's type)");
  check(!epi.bias_grad || (!epi.bias && !epi.relu), "a GEMM's epilogue adds a bias or computes a bias gradient, not both");
  ok(cublasLtMatrixLayoutCreate(&ld, d_type, uint64_t(m), uint64_t(n), m), "layout D");
  a_ = la, b_ = lb, d_ = ld;
  workspace_ = device_allocator(device_).allocate(workspace_bytes_, MemCategory::workspace);
  cublasLtMatmulPreference_t pref;
  ok(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_, sizeof workspace_bytes_),
     "MAX_WORKSPACE_BYTES");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  // Ask for the most fused epilogue first (relu and bias, then bias alone, then none; or the
  // bias gradient, then none), each with its vector's pointer set, since the heuristic reads its
  // alignment; where no algorithm offers one, the next, and the caller does what the GEMM does not.
  struct Try {
    bool bias, relu, bias_grad;
    cublasLtEpilogue_t kind;
  };
  std::vector<Try> tries;
  if (epi.relu) tries.push_back({epi.bias != nullptr, true, false, epi.bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU});
  if (epi.bias) tries.push_back({true, false, false, CUBLASLT_EPILOGUE_BIAS});
  if (epi.bias_grad) tries.push_back({false, false, true, CUBLASLT_EPILOGUE_BGRADB});
  tries.push_back({false, false, false, CUBLASLT_EPILOGUE_DEFAULT});
  cublasStatus_t s = CUBLAS_STATUS_NOT_SUPPORTED;
  for (const Try& t : tries) {
    const void* v = t.bias ? static_cast<const void*>(epi.bias) : t.bias_grad ? static_cast<const void*>(epi.bias_grad) : nullptr;
    ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &t.kind, sizeof t.kind), "EPILOGUE");
    ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &v, sizeof v), "BIAS_POINTER");
    s = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 1, &result, &found);
    if (s == CUBLAS_STATUS_SUCCESS && found > 0) {
      fuses_bias_ = t.bias, fuses_relu_ = t.relu, fuses_bias_grad_ = t.bias_grad;
      break;
    }
  }
  cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || found == 0)
    throw Error(fmt::format("cuBLASLt has no {} algorithm for {}x{}x{} on this GPU", to_string(p), m, n, k));
  static_assert(sizeof(cublasLtMatmulAlgo_t) <= sizeof algo_, "algo storage too small");
  std::memcpy(algo_, &result.algo, sizeof(cublasLtMatmulAlgo_t));
}

LtGemm::~LtGemm() {
  if (d_) cublasLtMatrixLayoutDestroy(static_cast<cublasLtMatrixLayout_t>(d_));
  if (b_) cublasLtMatrixLayoutDestroy(static_cast<cublasLtMatrixLayout_t>(b_));
  if (a_) cublasLtMatrixLayoutDestroy(static_cast<cublasLtMatrixLayout_t>(a_));
  if (desc_) cublasLtMatmulDescDestroy(static_cast<cublasLtMatmulDesc_t>(desc_));
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
  if (workspace_) device_allocator(device_).release(workspace_);
  cudaFree(one_);
}

void LtGemm::run(const void* a, const void* b, void* d, cudaStream_t s) {
  const float alpha = 1.0f, beta = 0.0f;
  cublasLtMatmulAlgo_t algo;
  std::memcpy(&algo, algo_, sizeof algo);
  auto la = static_cast<cublasLtMatrixLayout_t>(a_), lb = static_cast<cublasLtMatrixLayout_t>(b_),
       ld = static_cast<cublasLtMatrixLayout_t>(d_);
  ok(cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), static_cast<cublasLtMatmulDesc_t>(desc_), &alpha, a, la, b, lb, &beta,
                    d, ld, d, ld, &algo, workspace_, workspace_bytes_, s),
     "cublasLtMatmul");
}

}  // namespace dlperf::cuda
