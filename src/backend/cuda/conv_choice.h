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
/// `where` follows the time (" on data" for times from conv.cpp's second look).
inline std::string search_times(const std::vector<AlgoResult>& r, int picked, size_t limit, const char* pass, const char* where = "") {
  if (picked < 0 || r[size_t(picked)].time_ms <= 0) return "";
  const double t = r[size_t(picked)].time_ms;
  const std::string s = fmt::format("{} {:.0f} us{}", pass, t * 1e3, where);
  for (size_t i = size_t(picked) + 1; i < r.size(); ++i)
    if (r[i].allowed && r[i].memory <= limit && r[i].time_ms > 0) return s + fmt::format(", next {:.2f}x", r[i].time_ms / t);
  return s + ", no other";
}

/// The results worth timing again on data (conv.cpp's second look): the allowed ones within the
/// limit that the search timed, at most `most`, none more than `factor` times the fastest. Why:
/// cuDNN's search runs each algorithm on buffers it allocates itself, and on an H100 (cuDNN 9.19)
/// it timed bf16 backward-filter algorithm 0 (atomics) at 230 us for the recipe's conv3, first by
/// 9%; in training, on real gradients, it took 1.47 ms a step, two thirds of the step.
inline std::vector<int> retime_candidates(const std::vector<AlgoResult>& r, size_t limit, int most = 3, double factor = 2.0) {
  std::vector<int> c;
  double fastest = -1;
  for (size_t i = 0; i < r.size() && int(c.size()) < most; ++i) {
    if (!r[i].allowed || r[i].memory > limit || r[i].time_ms <= 0) continue;
    if (fastest < 0) fastest = r[i].time_ms;
    if (r[i].time_ms > factor * fastest) break;  // cuDNN sorts by its time: all later ones are slower still
    c.push_back(int(i));
  }
  return c;
}

/// The index of the smallest positive time in `measured_ms` (a time not positive is a run that
/// failed); -1 where none is.
inline int fastest_measured(const std::vector<double>& measured_ms) {
  int best = -1;
  for (size_t j = 0; j < measured_ms.size(); ++j)
    if (measured_ms[j] > 0 && (best < 0 || measured_ms[j] < measured_ms[size_t(best)])) best = int(j);
  return best;
}

/// The candidates (indices into `r`) again, fastest first by the times measured on data
/// (`measured_ms[j]` for `candidates[j]`; not positive where the pass failed, which drops it).
/// Each keeps its algorithm and workspace; its time is the one on data.
inline std::vector<AlgoResult> retimed(const std::vector<AlgoResult>& r, const std::vector<int>& candidates,
                                       const std::vector<double>& measured_ms) {
  std::vector<AlgoResult> out;
  for (size_t j = 0; j < candidates.size() && j < measured_ms.size(); ++j)
    if (measured_ms[j] > 0) {
      AlgoResult a = r[size_t(candidates[j])];
      a.time_ms = measured_ms[j];
      out.push_back(a);
    }
  std::stable_sort(out.begin(), out.end(), [](const AlgoResult& a, const AlgoResult& b) { return a.time_ms < b.time_ms; });
  return out;
}

/// When timing on data overturned the search's choice: "<pass> <algo>, first in cuDNN's search
/// (<t> us there), took <t'> us on data"; empty when the search's first stayed first.
inline std::string overturned(const std::vector<AlgoResult>& r, const std::vector<int>& candidates,
                              const std::vector<double>& measured_ms, const std::vector<AlgoResult>& on_data, const char* pass) {
  if (candidates.empty() || on_data.empty()) return "";
  const AlgoResult& first = r[size_t(candidates[0])];
  if (on_data[0].algo == first.algo) return "";
  return fmt::format("{} {}, first in cuDNN's search ({:.0f} us there), took {} on data", pass, first.algo, first.time_ms * 1e3,
                     measured_ms[0] > 0 ? fmt::format("{:.0f} us", measured_ms[0] * 1e3) : std::string("an error"));
}

}  // namespace dlperf::cuda
