// Shapes, dtypes and a plain host tensor.
//
// The engine's hot path works on oneDNN memories (which carry their own, possibly blocked,
// layouts); Tensor is the plain, dense NCHW/NC form used at the model's edges, by the
// reference backend, checkpoints and tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/memory.h"

namespace dlperf {

enum class DType { f32, f64, bf16, f16, u8, i32 };
size_t dtype_size(DType t);
std::string to_string(DType t);

using Dims = std::vector<int64_t>;
int64_t numel(const Dims& d);
/// "64x3x32x32"
std::string dims_str(const Dims& d);

/// A dense, row-major tensor in host memory.
class Tensor {
 public:
  Tensor() = default;
  Tensor(Dims dims, DType dtype, MemCategory category);
  const Dims& dims() const { return dims_; }
  DType dtype() const { return dtype_; }
  int64_t numel() const { return dlperf::numel(dims_); }
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype_); }
  bool empty() const { return !buffer_; }
  void* raw() const { return buffer_ ? buffer_->data() : nullptr; }
  float* f32() const { return static_cast<float*>(raw()); }
  void zero();

 private:
  Dims dims_;
  DType dtype_ = DType::f32;
  BufferPtr buffer_;
};

}  // namespace dlperf
