// CPU micro-benchmarks: memory bandwidth across working-set sizes (so the cache levels show as
// plateaus) and the fp32 FMA peak, measured as STREAM and empirical-roofline tools measure them.
//
// Method: warm-up, then `repeats` timed runs; the median is the figure, min and max the spread.
// The memory, GEMM, conv and loader sweeps run in rounds, and each point takes its best round's
// median (kRounds).
// Inputs are never zero and every kernel's output is checked after timing.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "core/stats.h"

namespace dlperf::hw {
struct CpuInfo;
}

namespace dlperf::bench {

// The benchmarks' figures are medians with their spread (core/stats.h).
using dlperf::Spread;
using dlperf::spread_of;

struct Options {
  bool quick = false;  ///< fewer sizes and repeats: seconds, not minutes
  int threads = 0;     ///< 0 = all cores this process may use
};

/// Bytes one pass of a memory kernel moves over `n` floats, as STREAM counts them (reads plus
/// writes, no write-allocate traffic): copy b = a moves 2n floats, triad a = b + s*c moves 3n.
double stream_bytes(const std::string& kernel, size_t n);
/// FLOPs of one pass: triad does a multiply and an add per element, copy none.
double stream_flops(const std::string& kernel, size_t n);
/// Thread t's static slice [lo, hi) of n floats out of `threads`, its ends on 64-byte cache lines
/// (the arrays start on lines): a line two threads write moves between their cores at every
/// pass. Triad's 1365-float L1 working set split at float 682 measured 300 GB/s on 2 threads, as
/// on one, while copy's line-aligned halves measured twice one thread's (docs/benchmarks.md).
std::pair<size_t, size_t> thread_slice(size_t n, size_t t, size_t threads);

/// The memory, GEMM, conv and loader sweeps run whole this many times, one round after another,
/// and each point's figure is its best round's median: a neighbour on a VM can slow a whole round of
/// samples (the Zen 4 VM once measured every level of a quick memory sweep 20-45% low, then the
/// next FMA benchmark at full speed), never speed one up. One round's samples of a point lie
/// milliseconds apart; the rounds lie a sweep apart.
constexpr int kRounds = 3;
/// The order the sweeps share: measure(i) for every point i, one round after another, kRounds
/// times, so that a point's rounds lie a whole sweep apart. What measure gave, per point, per round.
template <class Measure>
auto in_rounds(size_t points, Measure measure) {
  std::vector<std::vector<decltype(measure(size_t(0)))>> rounds(points);
  for (int round = 0; round < kRounds; ++round)
    for (size_t i = 0; i < points; ++i) rounds[i].push_back(measure(i));
  return rounds;
}

struct MemoryPoint {
  std::string kernel;        ///< copy | triad
  size_t working_set = 0;    ///< bytes of all arrays together
  Spread gbps;               ///< GB/s (1e9 bytes), over every sample of every round
  double best_round_gbps = 0;  ///< the best round's median: the point's figure
  int repeats = 0;           ///< samples per round
  int rounds = 0;
};
std::vector<MemoryPoint> memory_bandwidth(const Options& o);
/// The spread of all rounds' samples together, and the best round's median (rounds not empty).
std::pair<Spread, double> best_round(const std::vector<std::vector<double>>& rounds);

struct FlopsResult {
  std::string isa;   ///< the instructions used: "avx512", "avx2+fma", "fma-128", "fma-scalar" (bf16_peak: "avx512-bf16")
  int vector_bits = 0;  ///< 512, 256, 128, or 32 for scalar FMAs
  int lanes = 0;        ///< f32 lanes an instruction computes (vector_bits / 32)
  int threads = 0;
  Spread gflops;     ///< all threads together
  int repeats = 0;
  double per_core_gflops = 0;
  double implied_ghz = 0;  ///< median / (threads x 2 FMA units x lanes x 2): the clock the cores ran at
};
/// The vector widths this CPU has FMA instructions for, widest first: 512 (AVX-512F), 256 (AVX2
/// with FMA), 128 and 32 (scalar) where it has FMA; empty without FMA.
std::vector<int> fma_widths(const hw::CpuInfo& cpu);
/// The fp32 FMA peak at each of `widths` (bits, each one of fma_widths'): 12 independent chains a
/// thread, validated, the widths' repeats taken in turn. Narrower vectors show what code left
/// scalar, or vectorized for an older ISA, can reach; whether 512 bits double 256 shows how wide
/// the units are.
std::vector<FlopsResult> fma_peaks(const Options& o, const std::vector<int>& widths);
/// The peak at the widest width, the ceiling the engine's kernels (oneDNN's, which pick the
/// widest ISA) work against.
FlopsResult fma_peak(const Options& o);
/// What the widest FMA width's peak against the next one says about the FMA units, in words:
/// 512-bit instructions at twice the 256-bit rate (512-bit units), at about the same rate (256-bit
/// units running each in two halves, as Zen 4's: `unit_lanes` 8), or slower (the cores clock down
/// for 512-bit work). `unit_lanes` is what hw::CpuInfo counts (lanes_f32), which the sentence
/// contradicts where the measurement does.
std::string width_sentence(const FlopsResult& wide, const FlopsResult& narrow, int unit_lanes);
/// What the widest width's peak against the one counted at the clock the OS reports (`counted`,
/// at `os_ghz`) says about the clock, in words: above 105%, boost clocks; under 90%, the cores ran
/// slower than that clock (AVX-512 licence clocks on some Xeons; on a VM, other guests on the
/// same physical cores: fastest_run below); "" between.
std::string clock_note(const FlopsResult& widest, double counted, double os_ghz);
/// Runs `measure` (returning a FlopsResult, or fma_peaks' widths led by the widest) and, while
/// the lead's median reads under `floor(lead)`, up to twice more, keeping the fastest run. A VM's
/// other guests halve a whole quick run now and then (6 of 300 on the Zen 4), and never speed one
/// up; a machine profile kept from such a run would hold every later plan and profile to half the
/// machine. `leads` gets every run's lead median, in order.
template <class Measure, class Floor>
auto fastest_run(Measure measure, Floor floor, std::vector<double>& leads) {
  auto lead = [](const auto& r) -> const FlopsResult& {
    if constexpr (requires { r.front(); }) return r.front();
    else return r;
  };
  auto best = measure();
  leads = {lead(best).gflops.median};
  while (leads.size() < 3 && lead(best).gflops.median < floor(lead(best))) {
    auto again = measure();
    leads.push_back(lead(again).gflops.median);
    if (leads.back() > lead(best).gflops.median) best = std::move(again);
  }
  return best;
}
/// What fastest_run's `leads` say when a rerun read faster than the first run: "" otherwise.
std::string rerun_note(const std::vector<double>& leads, const std::string& what);
/// bf16 peak through AVX512-BF16's VDPBF16PS (16 lanes x 2 products x 2 FLOPs an instruction),
/// 12 independent chains, validated exactly. Empty `isa` with `why_not` set where the CPU lacks it.
FlopsResult bf16_peak(const Options& o, std::string* why_not);
/// bf16 peak on AMX tiles (Intel Xeons from Sapphire Rapids on): TDPBF16PS, 16 x 16 sums of 32
/// bf16 products an instruction, 4 independent chains a thread, validated exactly. oneDNN runs
/// bf16 convolutions in nhwc and inner products there (backend/cpu/conv2d.cpp). Empty `isa` with
/// `why_not` set where the CPU has no AMX or oneDNN does not use it.
FlopsResult amx_peak(const Options& o, std::string* why_not);
/// bf16's peak over fp32's under which a CPU has no more bf16 arithmetic to offer, so bf16 saves
/// memory but not time (the Intel Xeon VM: 0.49x; a Zen 4: 2.0x). The lab's precision
/// observation, `train --precision bf16`'s note and `plan`'s bf16-against-fp32 line draw it here.
inline constexpr double kBf16GainsAbove = 1.2;

/// Bandwidth plateau of each memory level: the median triad GB/s of working sets that fit well
/// inside the level (at most half of it, counting one private L1/L2 per thread) and exceed the
/// level below; DRAM is every working set of at least 4x the L3. Levels without points are left
/// out, and all of them when the cache sizes are unknown (0).
nlohmann::json bandwidth_levels(const std::vector<MemoryPoint>& points, int64_t l1, int64_t l2, int64_t l3, int threads);

nlohmann::json to_json(const MemoryPoint& p);
nlohmann::json to_json(const FlopsResult& r);

}  // namespace dlperf::bench
