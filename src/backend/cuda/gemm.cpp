#include "backend/cuda/gemm.h"

#include <cublasLt.h>
#include <fmt/format.h>

#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/conv_choice.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/second_look.h"
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

// Algorithms chosen per problem, for the life of the process (LtGemm::LtGemm).
// The key: precision, transa, transb, m, n, k, workspace, half output, the epilogue taken.
using Key = std::tuple<int, bool, bool, int64_t, int64_t, int64_t, size_t, bool, int>;
struct Chosen {
  std::array<unsigned char, 64> algo{};  // cublasLtMatmulAlgo_t
  std::string choice;                    // LtGemm::choice()
};
std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}
std::map<Key, Chosen>& cache() {
  static std::map<Key, Chosen> c;
  return c;
}

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
  if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
    cublasLtMatmulPreferenceDestroy(pref);
    throw Error(fmt::format("cuBLASLt has no {} algorithm for {}x{}x{} on this GPU", to_string(p), m, n, k));
  }
  static_assert(sizeof(cublasLtMatmulAlgo_t) <= sizeof algo_, "algo storage too small");
  std::memcpy(algo_, &result.algo, sizeof(cublasLtMatmulAlgo_t));

  // The heuristic's first is a guess, made without running anything: for medium's small linear
  // layers at batch 64 on an H100 (2026-11-28) a GEMM of 64 x 10 x 150 took 17.8 us in fp32 and
  // 7 us in bf16, where a kernel launch costs under 1 us in a graph. So its first few candidates
  // run on random data and the fastest is taken (second_look.h), once per problem in a process,
  // as cuDNN's convolutions are. fp8 (the GEMM benchmark's only) keeps the heuristic's first:
  // random bytes are not fp8 values.
  const int epilogue = int(fuses_bias_) + 2 * int(fuses_relu_) + 4 * int(fuses_bias_grad_);
  const Key key{int(p), transa, transb, m, n, k, workspace_bytes_, own_type, epilogue};
  {
    std::lock_guard lock(cache_mutex());
    auto it = cache().find(key);
    if (it != cache().end()) {
      std::memcpy(algo_, it->second.algo.data(), sizeof(cublasLtMatmulAlgo_t));
      choice_ = it->second.choice;
      cublasLtMatmulPreferenceDestroy(pref);
      return;
    }
  }
  if (p != Precision::fp8) choose_on_data(pref, a_rows * a_cols, b_rows * b_cols, d_type);
  cublasLtMatmulPreferenceDestroy(pref);
  Chosen chosen;
  std::memcpy(chosen.algo.data(), algo_, sizeof algo_);
  chosen.choice = choice_;
  std::lock_guard lock(cache_mutex());
  cache().emplace(key, chosen);
}

// Times the heuristic's first candidates (up to 8) on random inputs and keeps the fastest in
// algo_. The bias and bias-gradient pointers point at scratch while it runs, so the layer's own
// vectors are never written; anything that fails leaves the heuristic's first.
void LtGemm::choose_on_data(void* pref_ptr, int64_t a_elems, int64_t b_elems, int d_type_int) {
  auto h = static_cast<cublasLtHandle_t>(handle_);
  auto desc = static_cast<cublasLtMatmulDesc_t>(desc_);
  auto la = static_cast<cublasLtMatrixLayout_t>(a_), lb = static_cast<cublasLtMatrixLayout_t>(b_),
       ld = static_cast<cublasLtMatrixLayout_t>(d_);
  constexpr int kMax = 8;
  cublasLtMatmulHeuristicResult_t results[kMax] = {};
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, static_cast<cublasLtMatmulPreference_t>(pref_ptr), kMax, results, &found) !=
          CUBLAS_STATUS_SUCCESS ||
      found < 2)
    return;
  const DType in = p_ == Precision::bf16 ? DType::bf16 : p_ == Precision::fp16 ? DType::f16 : DType::f32;
  const DType out = cudaDataType_t(d_type_int) == CUDA_R_32F ? DType::f32 : in;
  second_look::Scratch a(size_t(a_elems) * bytes_of(in)), b(size_t(b_elems) * bytes_of(in)), d(size_t(m_ * n_) * bytes_of(out)),
      vec(size_t(std::max(m_, n_)) * sizeof(float));
  if (!a.p || !b.p || !d.p || !vec.p || !second_look::fill_random(a.p, in, size_t(a_elems)) ||
      !second_look::fill_random(b.p, in, size_t(b_elems)) || !second_look::fill_random(vec.p, DType::f32, size_t(std::max(m_, n_)))) {
    cudaGetLastError();
    return;
  }
  const void* own_vector = nullptr;
  size_t size = 0;
  const bool has_vector = fuses_bias_ || fuses_bias_grad_;
  if (has_vector) {
    cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &own_vector, sizeof own_vector, &size);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec.p, sizeof vec.p);
  }
  const float alpha = 1.0f, beta = 0.0f;
  std::vector<double> ms;
  for (int i = 0; i < found; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS || results[i].workspaceSize > workspace_bytes_) {
      ms.push_back(-1);
      continue;
    }
    ms.push_back(second_look::median_ms([&] {
      return cublasLtMatmul(h, desc, &alpha, a.p, la, b.p, lb, &beta, d.p, ld, d.p, ld, &results[i].algo, workspace_, workspace_bytes_,
                            nullptr) == CUBLAS_STATUS_SUCCESS;
    }));
  }
  if (has_vector) cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &own_vector, sizeof own_vector);
  cudaGetLastError();  // a candidate that failed leaves no error behind
  const int best = fastest_measured(ms);
  if (best < 0) return;
  std::memcpy(algo_, &results[best].algo, sizeof(cublasLtMatmulAlgo_t));
  if (best > 0)
    choice_ = fmt::format("heuristic's {} of {}: {:.1f} us on data, its first {}", best + 1, found, ms[size_t(best)] * 1e3,
                          ms[0] > 0 ? fmt::format("{:.1f} us", ms[0] * 1e3) : std::string("failed"));
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
