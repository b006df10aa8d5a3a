// Matrix multiply through cuBLASLt: one configured problem (precision and shape), its algorithm
// picked once (the fastest on random data of cuBLASLt's heuristic's first few, once a problem in
// a process), then run as often as needed. The layout is "TN": D[m x n]
// (column-major) = A^T B with A stored k x m and B stored k x n, both K-major, the one layout
// every precision supports, fp8 included. The linear layer and `dlperf bench gemm` use it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace dlperf::cuda {

enum class Precision { fp32, tf32, bf16, fp16, fp8 };
const char* to_string(Precision p);
/// Bytes of one input element and of one output element.
size_t input_bytes(Precision p);
size_t output_bytes(Precision p);
/// Whether a GPU of compute capability major.minor runs `p` on tensor cores (fp32 always runs).
bool supported(Precision p, int cc_major, int cc_minor);

/// What a GEMM does to its output besides D = op(A) op(B), inside cuBLASLt's epilogue where it
/// offers an algorithm for it (fp32 D only: cuBLASLt's bias and bias gradient have D's type).
/// LtGemm says what it took (fuses_bias, fuses_relu, fuses_bias_grad); the caller does the rest.
struct GemmEpilogue {
  const float* bias = nullptr;  ///< m floats added to D's rows (a linear layer's bias)
  bool relu = false;            ///< then D = max(D, 0): the relu after a linear layer
  float* bias_grad = nullptr;   ///< n floats: the sums of op(B) over k (a linear layer's bias gradient from its dy)
};

class LtGemm {
 public:
  /// The "TN" problem above.
  LtGemm(Precision p, int64_t m, int64_t n, int64_t k) : LtGemm(p, true, false, m, n, k) {}
  /// D[m x n] = op(A) op(B), column-major, with A stored m x k (k x m when `transa`) and B
  /// stored k x n (n x k when `transb`), leading dimensions the stored row counts. fp8 needs TN.
  /// `workspace` bytes come from the device allocator (category workspace).
  /// `half_out`: bf16 and fp16 write D in their own type (a layer's activations) instead of fp32.
  /// `epilogue`: see GemmEpilogue; each part taken saves the caller a launch.
  LtGemm(Precision p, bool transa, bool transb, int64_t m, int64_t n, int64_t k, size_t workspace = size_t(32) << 20,
         bool half_out = false, GemmEpilogue epilogue = {});
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  /// D = A^T B (alpha 1, beta 0). Queued on `s`; pointers are device memory.
  void run(const void* a, const void* b, void* d, cudaStream_t s);
  double flops() const { return 2.0 * double(m_) * double(n_) * double(k_); }
  bool fuses_bias() const { return fuses_bias_; }
  bool fuses_relu() const { return fuses_relu_; }
  bool fuses_bias_grad() const { return fuses_bias_grad_; }
  /// How the algorithm was chosen when timing on data overturned cuBLASLt's heuristic ("heuristic's
  /// 3 of 8: 4.1 us on data, its first 17.2 us"); empty where its first stayed, or nothing was timed.
  const std::string& choice() const { return choice_; }

 private:
  Precision p_;
  int64_t m_, n_, k_;
  void* handle_ = nullptr;  // cublasLtHandle_t
  void* desc_ = nullptr;    // cublasLtMatmulDesc_t
  void* a_ = nullptr;       // cublasLtMatrixLayout_t of A, B, C/D
  void* b_ = nullptr;
  void* d_ = nullptr;
  unsigned char algo_[64] = {};  // cublasLtMatmulAlgo_t, opaque
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  int device_ = 0;
  float* one_ = nullptr;     // device scalars 1.0 for fp8's scale pointers
  bool fuses_bias_ = false;
  bool fuses_relu_ = false;
  bool fuses_bias_grad_ = false;
  std::string choice_;
  void choose_on_data(void* pref, int64_t a_elems, int64_t b_elems, int d_type);
};

}  // namespace dlperf::cuda
