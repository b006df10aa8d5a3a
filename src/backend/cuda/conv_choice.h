#pragma once
// Choosing a convolution algorithm from cuDNN's timed search, apart from cuDNN itself so that the
// tests check the choice on any machine: conv.cpp reduces each cudnnConvolution*AlgoPerf_t to an
// AlgoResult and asks these functions which to take and what to report.

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace dlperf::cuda {

/// One result of cuDNN's search, fastest first as cuDNN sorts them.
struct AlgoResult {
  int algo = 0;
  double time_ms = -1;   ///< the search's measure; not positive where it did not time it (heuristics)
  size_t memory = 0;     ///< the workspace it needs, bytes
  bool allowed = false;  ///< it ran, in the math type asked for (FMA only for fp32), deterministic where asked
};

/// The index of the first (fastest) allowed result within the workspace limit; -1 when none is.
/// Raises `workspace` to its need.
inline int pick_algorithm(const std::vector<AlgoResult>& r, size_t limit, size_t& workspace) {
  for (size_t i = 0; i < r.size(); ++i)
    if (r[i].allowed && r[i].memory <= limit) {
      workspace = std::max(workspace, r[i].memory);
      return int(i);
    }
  return -1;
}

/// The fastest timed result the workspace limit ruled out, ahead of the one taken (`picked`), as
/// "<pass> <algo> in <ratio>x the time with <size>"; empty when the limit ruled out nothing faster.
inline std::string faster_over_limit(const std::vector<AlgoResult>& r, int picked, size_t limit, const char* pass) {
  const size_t end = picked < 0 ? r.size() : size_t(picked);
  for (size_t i = 0; i < end; ++i)
    if (r[i].allowed && r[i].memory > limit && r[i].time_ms > 0)
      return fmt::format("{} {} in {}x the time with {:.2f} GB", pass, r[i].algo,
                         picked < 0 ? std::string("-") : fmt::format("{:.2f}", r[i].time_ms / r[size_t(picked)].time_ms),
                         double(r[i].memory) / 1e9);
  return "";
}

/// What the search measured for the one taken and how much slower the next allowed one within
/// the limit was, as "<pass> <time> us, next <ratio>x" ("no other" where none is): a runner-up
/// within a few percent is one a noisy search may pick instead in another process. Empty when
/// nothing was taken or the search did not time it.
inline std::string search_times(const std::vector<AlgoResult>& r, int picked, size_t limit, const char* pass) {
  if (picked < 0 || r[size_t(picked)].time_ms <= 0) return "";
  const double t = r[size_t(picked)].time_ms;
  const std::string s = fmt::format("{} {:.0f} us", pass, t * 1e3);
  for (size_t i = size_t(picked) + 1; i < r.size(); ++i)
    if (r[i].allowed && r[i].memory <= limit && r[i].time_ms > 0) return s + fmt::format(", next {:.2f}x", r[i].time_ms / t);
  return s + ", no other";
}

}  // namespace dlperf::cuda
