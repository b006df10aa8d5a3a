// Shapes and element types.
//
// A backend's tensor is its own (on the CPU, cpu::Mem: a oneDNN memory, whose descriptor
// carries element type and possibly blocked layout, over a buffer from the tracked allocator);
// what every part shares is the logical shape (Dims, NCHW or NC) and the element type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dlperf {

enum class DType { f32, f64, bf16, f16, u8, i32 };
size_t dtype_size(DType t);
std::string to_string(DType t);

using Dims = std::vector<int64_t>;
int64_t numel(const Dims& d);
/// numel counted in double, which cannot wrap: for checking a shape read from a file or a flag
/// before anything multiplies it in int64.
double values_in(const Dims& d);
/// The most values a tensor may hold where oneDNN or cuDNN index it with 32-bit integers: past it
/// oneDNN's inner product divided by zero (SIGFPE) on a 1x28x2147483648 image's 6e10 features.
inline constexpr double kMaxIndexedValues = 2147483647.0;
/// "64x3x32x32"
std::string dims_str(const Dims& d);
/// "3x32x32" -> {3, 32, 32}; throws Error naming `flag` when it is not CxHxW.
Dims parse_chw(const std::string& s, const std::string& flag = "--input");

}  // namespace dlperf
