#include "core/tensor.h"

#include <fmt/format.h>

#include <cstdio>

#include "core/error.h"

namespace dlperf {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::u8: return 1;
    case DType::i32: return 4;
  }
  return 0;
}

std::string to_string(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
  }
  return "?";
}

double values_in(const Dims& d) {
  double n = 1;
  for (auto x : d) n *= double(x);
  return n;
}

int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (auto x : d) n *= x;
  return n;
}

std::string dims_str(const Dims& d) {
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) s += 'x';  // not ("x" + to_string(...)): GCC 12 warns falsely on that (-Wrestrict, bug 105651)
    s += std::to_string(d[i]);
  }
  return s;
}

Dims parse_chw(const std::string& s, const std::string& flag) {
  long long c, h, w;
  char tail;
  check(std::sscanf(s.c_str(), "%lldx%lldx%lld%c", &c, &h, &w, &tail) == 3 && c > 0 && h > 0 && w > 0,
        fmt::format("{} '{}' is not CxHxW", flag, s), fmt::format("for example {} 3x32x32", flag));
  return {c, h, w};
}

}  // namespace dlperf
