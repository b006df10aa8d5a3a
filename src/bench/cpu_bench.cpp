#include "bench/cpu_bench.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <tuple>

#include "backend/cpu/layouts.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/timer.h"
#include "hw/cpu_info.h"

namespace dlperf::bench {

double stream_bytes(const std::string& kernel, size_t n) {
  check(kernel == "copy" || kernel == "triad", "unknown memory kernel " + kernel);
  return (kernel == "copy" ? 2.0 : 3.0) * double(n) * sizeof(float);
}

double stream_flops(const std::string& kernel, size_t n) { return kernel == "triad" ? 2.0 * double(n) : 0.0; }

std::pair<size_t, size_t> thread_slice(size_t n, size_t t, size_t threads) {
  constexpr size_t line = 64 / sizeof(float);
  const auto cut = [&](size_t k) { return k == threads ? n : n * k / threads / line * line; };
  return {cut(t), cut(t + 1)};
}

namespace {

int thread_count(const Options& o) { return o.threads > 0 ? o.threads : omp_get_max_threads(); }

// `passes` passes of a kernel inside one parallel region: each thread repeats its own static
// slice, so small (cache-sized) working sets measure the cache, not the cost of forking threads.
void run_kernel(const std::string& kernel, float* a, float* b, const float* c, size_t n, int threads, int passes) {
  const bool copy = kernel == "copy";
#pragma omp parallel num_threads(threads)
  {
    const auto [lo, hi] = thread_slice(n, size_t(omp_get_thread_num()), size_t(omp_get_num_threads()));
    for (int p = 0; p < passes; ++p) {
      if (copy) {
        for (size_t i = lo; i < hi; ++i) b[i] = a[i];
      } else {
        for (size_t i = lo; i < hi; ++i) a[i] = b[i] + 3.0f * c[i];
      }
      // Keeps the compiler from merging passes; the data stays where it is.
      asm volatile("" ::: "memory");
    }
  }
}

}  // namespace

std::pair<Spread, double> best_round(const std::vector<std::vector<double>>& rounds) {
  check(!rounds.empty(), "best_round: no rounds");
  std::vector<double> all;
  double best = 0;
  for (const auto& r : rounds) {
    all.insert(all.end(), r.begin(), r.end());
    best = std::max(best, spread_of(r).median);
  }
  return {spread_of(all), best};
}

namespace {

// One point of the sweep: `repeats` samples (GB/s) of `kernel` over a working set of `ws` bytes
// (all its arrays together), after two warm-up samples, its result validated.
std::vector<double> memory_samples(const std::string& kernel, size_t ws, int threads, int repeats) {
  const size_t arrays = size_t(stream_bytes(kernel, 1)) / sizeof(float);  // each read or written once a pass
  const size_t n = ws / (arrays * sizeof(float));  // floats per array
  // The arrays' starts are spread evenly over a 4 KiB page's offsets (STREAM's OFFSET, chosen
  // rather than left to the allocator): a load whose address matches a pending store's in its
  // low 12 bits waits for it (4K aliasing). Where the allocator happened to place them so,
  // copy measured 67 to 166 GB/s in L1 against 470 at the sizes beside it (Zen 4); triad at a
  // 64 KiB working set measured 320 GB/s with its arrays 2 KiB apart and 390 with 1.3 KiB.
  const size_t spread = 4096 / arrays / 64 * 64;  // copy 2048 B, triad 1344 B
  const size_t stride = (n * sizeof(float) + 4095) / 4096 * 4096 + spread;
  Buffer block(arrays * stride + 4096, MemCategory::workspace);
  char* page = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(block.data()) + 4095) & ~uintptr_t(4095));
  float *a = reinterpret_cast<float*>(page), *b = reinterpret_cast<float*>(page + stride),
        *c = arrays == 3 ? reinterpret_cast<float*>(page + 2 * stride) : nullptr;  // copy reads a, writes b
  // First touch by the same static slices the kernel uses (pages land near their thread).
#pragma omp parallel num_threads(threads)
  {
    const auto [lo, hi] = thread_slice(n, size_t(omp_get_thread_num()), size_t(omp_get_num_threads()));
    for (size_t i = lo; i < hi; ++i) {
      a[i] = 1.0f + float(i % 7), b[i] = 2.0f;
      if (c) c[i] = 0.5f;
    }
  }
  // Enough passes per sample that one sample lasts about a millisecond or more.
  const int passes = int(std::clamp<size_t>((size_t(64) << 20) / ws, 1, 4096));
  std::vector<double> gbps;
  for (int r = -2; r < repeats; ++r) {  // two warm-up samples
    const double t0 = now_s();
    run_kernel(kernel, a, b, c, n, threads, passes);
    const double dt = now_s() - t0;
    if (r >= 0) gbps.push_back(stream_bytes(kernel, n) * passes / dt / 1e9);
  }
  // Validate: copy leaves b == a; triad leaves a == b + 3c == 3.5.
  for (size_t i = 0; i < n; i += std::max<size_t>(1, n / 64))
    check(kernel == "copy" ? b[i] == a[i] : a[i] == 3.5f,
          fmt::format("memory benchmark {}: wrong result at element {}", kernel, i), "the machine or compiler is faulty");
  return gbps;
}

}  // namespace

std::vector<MemoryPoint> memory_bandwidth(const Options& o) {
  const int threads = thread_count(o);
  const int repeats = o.quick ? 5 : 15;
  std::vector<MemoryPoint> out;  // copy's sizes, then triad's
  for (const char* kernel : {"copy", "triad"})
    for (size_t ws = 16 << 10; ws <= (size_t(512) << 20); ws *= (o.quick ? 8 : 2)) {  // 16 KiB .. 512 MiB
      const size_t per_float = size_t(stream_bytes(kernel, 1));  // whole arrays: a multiple of this
      out.push_back({kernel, ws / per_float * per_float, {}, 0, repeats, kRounds});
    }
  const auto rounds = in_rounds(out.size(), [&](size_t i) { return memory_samples(out[i].kernel, out[i].working_set, threads, repeats); });
  for (size_t i = 0; i < out.size(); ++i) std::tie(out[i].gbps, out[i].best_round_gbps) = best_round(rounds[i]);
  return out;
}

namespace {

// 12 independent FMA chains: enough to keep 2 FMA pipes with 4-cycle latency busy, few enough
// to stay in 16 vector registers. Each chain x <- x * b + c converges to c / (1 - b) = 1; a run
// returns the chains' sum (12 when they got there), so that none can be optimized away.
//
// One function per vector width, each compiled for its instructions whatever the build's -march
// and called only where the CPU has them (fma_widths), so the peak is measured at every width the
// cores run, not only at the build's. They differ only in the intrinsics: a template could not
// call AVX-512 intrinsics from code compiled without AVX-512.
constexpr int kChains = 12;
constexpr float kB = 0.999f, kC = 0.001f;

// One lane of an xmm register (VFMADD...SS): written with intrinsics so that the compiler cannot
// vectorize the chains into the 128-bit case.
__attribute__((target("fma"))) float fma_chains_scalar(int64_t iters) {
  const __m128 b = _mm_set_ss(kB), c = _mm_set_ss(kC);
  __m128 x[kChains];
  for (int k = 0; k < kChains; ++k) x[k] = _mm_set_ss(0.5f + 0.01f * float(k));
  for (int64_t i = 0; i < iters; ++i)
    for (auto& v : x) v = _mm_fmadd_ss(v, b, c);
  float sum = 0;
  for (const auto& v : x) sum += _mm_cvtss_f32(v);
  return sum;
}

__attribute__((target("fma"))) float fma_chains_128(int64_t iters) {
  const __m128 b = _mm_set1_ps(kB), c = _mm_set1_ps(kC);
  __m128 x[kChains];
  for (int k = 0; k < kChains; ++k) x[k] = _mm_set1_ps(0.5f + 0.01f * float(k));
  for (int64_t i = 0; i < iters; ++i)
    for (auto& v : x) v = _mm_fmadd_ps(v, b, c);
  float sum = 0;
  for (const auto& v : x) sum += _mm_cvtss_f32(v);
  return sum;
}

__attribute__((target("avx2,fma"))) float fma_chains_256(int64_t iters) {
  const __m256 b = _mm256_set1_ps(kB), c = _mm256_set1_ps(kC);
  __m256 x[kChains];
  for (int k = 0; k < kChains; ++k) x[k] = _mm256_set1_ps(0.5f + 0.01f * float(k));
  for (int64_t i = 0; i < iters; ++i)
    for (auto& v : x) v = _mm256_fmadd_ps(v, b, c);
  float sum = 0;
  for (const auto& v : x) sum += _mm256_cvtss_f32(v);
  return sum;
}

__attribute__((target("avx512f"))) float fma_chains_512(int64_t iters) {
  const __m512 b = _mm512_set1_ps(kB), c = _mm512_set1_ps(kC);
  __m512 x[kChains];
  for (int k = 0; k < kChains; ++k) x[k] = _mm512_set1_ps(0.5f + 0.01f * float(k));
  for (int64_t i = 0; i < iters; ++i)
    for (auto& v : x) v = _mm512_fmadd_ps(v, b, c);
  float sum = 0;
  for (const auto& v : x) sum += _mm512_cvtss_f32(v);
  return sum;
}

const char* isa_of_width(int bits) {
  switch (bits) {
    case 512: return "avx512";
    case 256: return "avx2+fma";
    case 128: return "fma-128";
    case 32: return "fma-scalar";
  }
  throw Error(fmt::format("no FMA benchmark for {}-bit vectors", bits), "use 32, 128, 256 or 512");
}

}  // namespace

std::vector<int> fma_widths(const hw::CpuInfo& cpu) {
  std::vector<int> bits;
  if (cpu.avx512f) bits.push_back(512);
  if (cpu.avx2 && cpu.fma) bits.push_back(256);
  if (cpu.fma) {
    bits.push_back(128);
    bits.push_back(32);
  }
  return bits;
}

std::vector<FlopsResult> fma_peaks(const Options& o, const std::vector<int>& widths) {
  const hw::CpuInfo cpu = hw::cpu_info();
  const std::vector<int> can = fma_widths(cpu);
  check(!can.empty(), "this CPU has no FMA instructions, which dlperf's peak benchmark measures",
        "run dlperf on an x86-64 CPU from 2013 on (Haswell, Piledriver or later)");
  std::vector<FlopsResult> out;
  std::vector<float (*)(int64_t)> chains;
  for (const int bits : widths) {
    check(std::find(can.begin(), can.end(), bits) != can.end(),
          fmt::format("this CPU ({}, {}) cannot run {}-bit FMAs", cpu.model, cpu.isa, bits), "measure a width fma_widths lists");
    chains.push_back(bits == 512 ? fma_chains_512 : bits == 256 ? fma_chains_256 : bits == 128 ? fma_chains_128 : fma_chains_scalar);
    FlopsResult r;
    r.isa = isa_of_width(bits);
    r.vector_bits = bits;
    r.lanes = bits / 32;
    r.threads = thread_count(o);
    r.repeats = o.quick ? 5 : 15;
    out.push_back(r);
  }
  const int64_t iters = o.quick ? 2'000'000 : 10'000'000;
  std::vector<std::vector<double>> gflops(out.size());
  // Round-robin over the widths, so that a neighbour slowing the machine for a while slows them
  // alike and their ratios stay true.
  for (int rep = -2; rep < (o.quick ? 5 : 15); ++rep) {
    for (size_t w = 0; w < out.size(); ++w) {
      FlopsResult& r = out[w];
      std::vector<float> result(size_t(r.threads), 0.f);
      const double t0 = now_s();
#pragma omp parallel num_threads(r.threads)
      result[size_t(omp_get_thread_num())] = chains[w](iters);
      const double dt = now_s() - t0;
      // After many rounds every chain sits at the fixed point 0.001 / (1 - 0.999) = 1.
      for (float v : result)
        check(std::abs(v - float(kChains)) < 1e-2f * kChains,
              fmt::format("FMA benchmark ({}): chains ended at {} instead of {}", r.isa, v, kChains), "the machine or compiler is faulty");
      if (rep >= 0) gflops[w].push_back(double(r.threads) * double(iters) * kChains * r.lanes * 2 / dt / 1e9);
    }
  }
  for (size_t w = 0; w < out.size(); ++w) {
    FlopsResult& r = out[w];
    r.gflops = spread_of(gflops[w]);
    r.per_core_gflops = r.gflops.median / r.threads;
    // The clock at which the FMA units would give this: lanes as the instructions count them, or
    // as the units compute them where they are narrower (Zen 4's AVX-512).
    r.implied_ghz = r.per_core_gflops / (double(cpu.fma_units) * std::min(r.lanes, cpu.lanes_f32) * 2);
  }
  return out;
}

FlopsResult fma_peak(const Options& o) {
  const std::vector<int> all = fma_widths(hw::cpu_info());
  return fma_peaks(o, all.empty() ? all : std::vector<int>{all.front()}).front();  // the widest (none: fma_peaks says why)
}

std::string width_sentence(const FlopsResult& wide, const FlopsResult& narrow, int unit_lanes) {
  const double ratio = wide.gflops.median / narrow.gflops.median;
  const double width_ratio = double(wide.lanes) / double(narrow.lanes);
  std::string s = fmt::format("{}-bit FMAs ran at {:.2f}x the {}-bit rate", wide.vector_bits, ratio, narrow.vector_bits);
  std::string why;
  int measured_lanes = 0;  // the units' width the ratio points to (0: neither)
  if (ratio >= 0.85 * width_ratio) {
    why = fmt::format("this CPU's FMA units are {} bits wide", wide.vector_bits);
    measured_lanes = wide.lanes;
  } else if (ratio >= 0.85 && ratio <= 1.15) {
    why = fmt::format("its FMA units are {} bits wide, and run each {}-bit instruction in parts (as AMD's Zen 4 does)", narrow.vector_bits,
                      wide.vector_bits);
    measured_lanes = narrow.lanes;
  } else if (ratio < 0.85) {
    why = fmt::format("the cores clock down for {}-bit work, so narrower code runs faster here", wide.vector_bits);
  } else {
    why = fmt::format("short of the {:.0f}x the width allows: the cores clock lower for {}-bit work, or a neighbour shared them", width_ratio,
                      wide.vector_bits);
  }
  s += ": " + why;
  if (measured_lanes > 0 && std::min(wide.lanes, unit_lanes) != measured_lanes)
    s += fmt::format(" (dlperf counts {} f32 lanes a unit for this CPU's counted peak; the measurement says {})", unit_lanes, measured_lanes);
  return s + ".";
}

std::string clock_note(const FlopsResult& widest, double counted, double os_ghz) {
  const double share = widest.gflops.median / counted;
  if (share > 1.05)
    return fmt::format("(above 100%: the cores ran at about {:.2f} GHz, faster than the {:.2f} GHz the OS reports; boost clocks)",
                       widest.implied_ghz, os_ghz);
  if (share < 0.9)
    return fmt::format("(under 90%: the cores ran at about {:.2f} GHz, slower than the {:.2f} GHz the OS reports. Some Xeons clock "
                       "{}-bit work lower; on a VM, other guests on the same physical cores can halve a run for a while. If a rerun reads "
                       "higher, it was the latter)",
                       widest.implied_ghz, os_ghz, widest.vector_bits);
  return "";
}

std::string rerun_note(const std::vector<double>& leads, const std::string& what) {
  if (leads.size() < 2) return "";
  const double best = *std::max_element(leads.begin(), leads.end());
  if (best < 1.1 * leads.front()) return "";
  return fmt::format("({}: the first run read {:.1f} GFLOP/s, low for this CPU, so it ran again ({:.1f}) and keeps the fastest: a "
                     "VM's other guests on the same cores halve a run now and then)",
                     what, leads.front(), fmt::join(leads.begin() + 1, leads.end(), ", "));
}

namespace {

// Each VDPBF16PS adds a.b over pairs to every fp32 lane: with a = b = 2^-10 (exact in bf16) a
// lane grows by 2 x 2^-20 an instruction. The two products are added one after the other, each
// rounded (Intel's definition, and Zen 4's), so growth is exact only while 2^-20 is a whole ulp
// of the lane: below 2^4. From 16 on, each addition is half an ulp and rounds away (ties to
// even): a Zen 4 stopped every lane at exactly 16. Compiled for AVX512-BF16 whatever the build's
// -march, and called only where the CPU has it.
__attribute__((target("avx512f,avx512bf16"))) float bf16_chains(int64_t iters) {
  const __m512 w = _mm512_set1_ps(1.0f / 1024.0f);
  const __m512bh a = _mm512_cvtne2ps_pbh(w, w);
  __m512 x[kChains];
  for (auto& v : x) v = _mm512_setzero_ps();
  for (int64_t i = 0; i < iters; ++i) {
    x[0] = _mm512_dpbf16_ps(x[0], a, a), x[1] = _mm512_dpbf16_ps(x[1], a, a), x[2] = _mm512_dpbf16_ps(x[2], a, a);
    x[3] = _mm512_dpbf16_ps(x[3], a, a), x[4] = _mm512_dpbf16_ps(x[4], a, a), x[5] = _mm512_dpbf16_ps(x[5], a, a);
    x[6] = _mm512_dpbf16_ps(x[6], a, a), x[7] = _mm512_dpbf16_ps(x[7], a, a), x[8] = _mm512_dpbf16_ps(x[8], a, a);
    x[9] = _mm512_dpbf16_ps(x[9], a, a), x[10] = _mm512_dpbf16_ps(x[10], a, a), x[11] = _mm512_dpbf16_ps(x[11], a, a);
  }
  float sum = 0;
  for (const auto& v : x) sum += _mm512_cvtss_f32(v);
  return sum;
}

// Times `chains` (which does `flops` a call) on r.threads threads at once, after two calls to warm
// up, r.repeats times, into r.gflops; each thread's result must be `expect` exactly (`what` says
// whose it was where it is not).
template <class Chains>
void time_chains(FlopsResult& r, Chains chains, float expect, double flops, const char* what) {
  std::vector<double> gflops;
  for (int rep = -2; rep < r.repeats; ++rep) {
    std::vector<float> result(size_t(r.threads), 0.f);
    const double t0 = now_s();
#pragma omp parallel num_threads(r.threads)
    result[size_t(omp_get_thread_num())] = chains();
    const double dt = now_s() - t0;
    for (float v : result) check(v == expect, fmt::format("{} summed to {} instead of {}", what, v, expect), "the machine or compiler is faulty");
    if (rep >= 0) gflops.push_back(double(r.threads) * flops / dt / 1e9);
  }
  r.gflops = spread_of(gflops);
  r.per_core_gflops = r.gflops.median / r.threads;
}

}  // namespace

FlopsResult bf16_peak(const Options& o, std::string* why_not) {
  FlopsResult r;
  const hw::CpuInfo cpu = hw::cpu_info();
  if (!cpu.avx512_bf16) {
    *why_not = fmt::format("this CPU ({}) has no AVX512-BF16 ({})", cpu.model, cpu.isa);
    return r;
  }
  r.isa = "avx512-bf16";
  r.threads = thread_count(o);
  r.repeats = o.quick ? 5 : 15;
  const int64_t iters = o.quick ? 2'000'000 : 8'000'000;  // lanes stay below 2^4: 8M x 2^-19 = 15.3
  const float expect = float(kChains) * float(double(iters) * 2.0 / (1024.0 * 1024.0));
  time_chains(r, [&] { return bf16_chains(iters); }, expect, double(iters) * kChains * 16 * 2 * 2, "bf16 benchmark: chains");
  r.implied_ghz = r.per_core_gflops / (double(cpu.fma_units) * cpu.lanes_f32 * 2 * 2);  // units x lanes x 2 products x 2 FLOPs
  return r;
}

namespace {
// AMX's tile registers as TDPBF16PS uses them: palette 1, each tile 16 rows of 64 bytes (16 fp32
// sums, or 32 bf16 values, a row). The layout is the ISA's (Intel SDM, LDTILECFG).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// Four independent TDPBF16PS chains (tiles 0-3), each instruction 16 x 16 sums of 32 bf16 products
// from tiles 4-7, which never change. Every product is 2^-10 x 2^-10, so each instruction adds
// 32 x 2^-20 = 2^-15 to every sum, exactly while the sums stay below 2^9 (iters < 2^24). Returns
// one sum of each chain's tile, all four: 4 x iters x 2^-15 where nothing was lost. Compiled for
// AMX whatever the build's -march, and called only where oneDNN may use AMX (the kernel allowed
// the process its tile state: cpu::has_amx_kernels).
__attribute__((target("amx-tile,amx-bf16"))) float amx_chains(int64_t iters) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.bytes_per_row[t] = 64, cfg.rows[t] = 16;
  _tile_loadconfig(&cfg);
  alignas(64) uint16_t operand[16 * 32];
  std::fill(std::begin(operand), std::end(operand), uint16_t(0x3a80));  // bf16 2^-10
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float sums[4][16 * 16];
  _tile_stored(0, sums[0], 64);
  _tile_stored(1, sums[1], 64);
  _tile_stored(2, sums[2], 64);
  _tile_stored(3, sums[3], 64);
  _tile_release();
  return sums[0][0] + sums[1][17] + sums[2][100] + sums[3][255];
}
}  // namespace

FlopsResult amx_peak(const Options& o, std::string* why_not) {
  FlopsResult r;
  const hw::CpuInfo cpu = hw::cpu_info();
  if (!cpu.amx_bf16) {
    *why_not = fmt::format("this CPU ({}) has no AMX", cpu.model);
    return r;
  }
  if (!cpu::has_amx_kernels()) {
    *why_not = "oneDNN does not use AMX here (ONEDNN_MAX_CPU_ISA caps it, or the kernel did not grant the tile state)";
    return r;
  }
  r.isa = "amx-bf16";
  r.threads = thread_count(o);
  r.repeats = o.quick ? 5 : 15;
  const int64_t iters = o.quick ? 250'000 : 1'000'000;  // about 20 and 80 ms at 1024 FLOPs a cycle
  constexpr double kFlopsPerInstruction = 16 * 16 * 32 * 2;
  const float expect = float(4.0 * double(iters) / 32768.0);
  time_chains(r, [&] { return amx_chains(iters); }, expect, double(iters) * 4 * kFlopsPerInstruction, "AMX benchmark: tiles");
  r.implied_ghz = r.per_core_gflops / 1024;  // TDPBF16PS: 16,384 FLOPs every 16 cycles a core (Sapphire Rapids)
  return r;
}

nlohmann::json bandwidth_levels(const std::vector<MemoryPoint>& points, int64_t l1, int64_t l2, int64_t l3, int threads) {
  nlohmann::json out = nlohmann::json::object();
  if (l1 <= 0 || l2 <= 0 || l3 <= 0) return out;  // cache sizes unknown: no level can be told apart
  const double t = double(threads);
  const std::pair<const char*, std::pair<double, double>> levels[] = {
      {"L1", {0, 0.5 * double(l1) * t}},
      {"L2", {double(l1) * t, 0.5 * double(l2) * t}},
      {"L3", {double(l2) * t, 0.5 * double(l3)}},
      {"DRAM", {4.0 * double(l3), 1e18}}};
  for (const auto& [name, range] : levels) {
    std::vector<double> v;
    for (const auto& p : points)
      if (p.kernel == "triad" && double(p.working_set) > range.first && double(p.working_set) <= range.second)
        v.push_back(p.best_round_gbps);
    if (!v.empty()) out[name] = spread_of(v).median;
  }
  return out;
}

nlohmann::json to_json(const MemoryPoint& p) {
  return {{"kernel", p.kernel}, {"working_set_bytes", p.working_set}, {"gbps_best_round", p.best_round_gbps},
          {"gbps_median", p.gbps.median}, {"gbps_min", p.gbps.min}, {"gbps_max", p.gbps.max}, {"repeats", p.repeats}, {"rounds", p.rounds}};
}

nlohmann::json to_json(const FlopsResult& r) {
  return {{"isa", r.isa}, {"dtype", "f32"}, {"vector_bits", r.vector_bits}, {"lanes", r.lanes}, {"threads", r.threads}, {"gflops_median", r.gflops.median},
          {"gflops_min", r.gflops.min}, {"gflops_max", r.gflops.max}, {"repeats", r.repeats},
          {"per_core_gflops", r.per_core_gflops}, {"implied_ghz", r.implied_ghz}};
}

}  // namespace dlperf::bench
