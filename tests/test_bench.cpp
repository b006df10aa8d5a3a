// The CPU micro-benchmarks: byte and FLOP counts, the statistics, and the quick mode end to end.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "backend/cpu/layouts.h"
#include "backend/ref/ref_ops.h"
#include "bench/cpu_bench.h"
#include "bench/machine_profile.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/rng.h"
#include "hw/cpu_info.h"
#include "hw/host_load.h"

namespace dlperf::test {
namespace {

TEST(Bench, CountsBytesAndFlopsAsStreamDoes) {
  EXPECT_DOUBLE_EQ(bench::stream_bytes("copy", 1000), 8000.0);   // read a, write b
  EXPECT_DOUBLE_EQ(bench::stream_bytes("triad", 1000), 12000.0);  // read b and c, write a
  EXPECT_DOUBLE_EQ(bench::stream_flops("triad", 1000), 2000.0);
  EXPECT_DOUBLE_EQ(bench::stream_flops("copy", 1000), 0.0);
  EXPECT_THROW(bench::stream_bytes("scale", 1), Error);
  // Threads' slices cover the arrays once, in order, and meet on cache-line boundaries.
  for (size_t n : {size_t(1365), size_t(2048), size_t(10), size_t(100003)})
    for (size_t threads : {1, 2, 3, 16}) {
      size_t next = 0;
      for (size_t t = 0; t < threads; ++t) {
        const auto [lo, hi] = bench::thread_slice(n, t, threads);
        EXPECT_EQ(lo, next) << n << " " << threads;
        EXPECT_LE(lo, hi);
        if (t > 0) {
          EXPECT_EQ(lo % 16, 0u) << n << " " << threads;
        }
        next = hi;
      }
      EXPECT_EQ(next, n);
    }
}

TEST(Bench, SpreadIsMedianMinMax) {
  auto s = bench::spread_of({5, 1, 3});
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 5);
  EXPECT_DOUBLE_EQ(bench::spread_of({4, 1, 3, 2}).median, 2.5);
  EXPECT_THROW(bench::spread_of({}), Error);
}

// A round that a neighbour slowed throughout does not lower the figure: the best round's median
// is, while the spread keeps every sample (the slow round's included).
TEST(Bench, MemoryFigureIsTheBestRoundsMedian) {
  const auto [spread, best] = bench::best_round({{200, 210, 205}, {120, 130, 125}, {190, 220, 208}});
  EXPECT_DOUBLE_EQ(best, 208);
  EXPECT_DOUBLE_EQ(spread.min, 120);
  EXPECT_DOUBLE_EQ(spread.max, 220);
  EXPECT_DOUBLE_EQ(spread.median, 200);  // of all nine
  // One fast sample in a round does not make it the best: its median decides.
  EXPECT_DOUBLE_EQ(bench::best_round({{100, 100, 400}, {150, 150, 150}}).second, 150);
  EXPECT_THROW(bench::best_round({}), Error);
}

TEST(Bench, QuickMemoryCoversCacheAndMemorySizes) {
  bench::Options o;
  o.quick = true;
  const auto points = bench::memory_bandwidth(o);
  ASSERT_EQ(points.size() % 2, 0u);
  const size_t half = points.size() / 2;
  EXPECT_LE(points.front().working_set, size_t(32) << 10);         // fits any L1
  EXPECT_GE(points[half - 1].working_set, size_t(256) << 20);      // larger than any L3 here
  for (size_t i = 0; i < points.size(); ++i) {
    EXPECT_EQ(points[i].kernel, i < half ? "copy" : "triad");
    EXPECT_GT(points[i].gbps.median, 0.1);
    EXPECT_LE(points[i].gbps.min, points[i].gbps.median);
    EXPECT_LE(points[i].gbps.median, points[i].gbps.max);
    EXPECT_GE(points[i].best_round_gbps, points[i].gbps.min);
    EXPECT_LE(points[i].best_round_gbps, points[i].gbps.max);
    EXPECT_EQ(points[i].rounds, bench::kRounds);
    auto j = bench::to_json(points[i]);
    for (const char* key : {"kernel", "working_set_bytes", "gbps_best_round", "gbps_median", "gbps_min", "gbps_max", "repeats", "rounds"})
      EXPECT_TRUE(j.contains(key)) << key;
  }
}

TEST(Bench, QuickFmaPeakIsPositiveAndValidated) {
  bench::Options o;
  o.quick = true;
  o.threads = 1;
  const auto r = bench::fma_peak(o);
  EXPECT_EQ(r.threads, 1);
  EXPECT_GT(r.gflops.median, 0.5);
  EXPECT_DOUBLE_EQ(r.per_core_gflops, r.gflops.median);
  EXPECT_EQ(r.vector_bits, bench::fma_widths(hw::cpu_info()).front());  // the widest
  auto j = bench::to_json(r);
  for (const char* key : {"isa", "dtype", "vector_bits", "lanes", "threads", "gflops_median", "gflops_min", "gflops_max", "implied_ghz"})
    EXPECT_TRUE(j.contains(key)) << key;
}

// Every width the CPU has runs (each validated inside) and counts its own lanes.
TEST(Bench, QuickFmaPeaksRunAtEveryWidthTheCpuHas) {
  bench::Options o;
  o.quick = true;
  o.threads = 1;
  const std::vector<int> widths = bench::fma_widths(hw::cpu_info());
  ASSERT_FALSE(widths.empty()) << "every x86-64 CPU this project builds on has FMA";
  const auto peaks = bench::fma_peaks(o, widths);
  ASSERT_EQ(peaks.size(), widths.size());
  for (size_t i = 0; i < peaks.size(); ++i) {
    EXPECT_EQ(peaks[i].vector_bits, widths[i]);
    EXPECT_EQ(peaks[i].lanes, widths[i] / 32);
    EXPECT_EQ(peaks[i].repeats, 5);
    EXPECT_GT(peaks[i].gflops.median, 0.1) << peaks[i].isa;
  }
  EXPECT_THROW(bench::fma_peaks(o, {64}), Error);
}

TEST(Bench, FmaWidthsFollowTheCpuFlags) {
  hw::CpuInfo cpu;
  EXPECT_TRUE(bench::fma_widths(cpu).empty());  // no FMA: nothing to measure
  cpu.fma = true;
  EXPECT_EQ(bench::fma_widths(cpu), (std::vector<int>{128, 32}));
  cpu.avx2 = true;
  EXPECT_EQ(bench::fma_widths(cpu), (std::vector<int>{256, 128, 32}));
  cpu.avx512f = true;
  EXPECT_EQ(bench::fma_widths(cpu), (std::vector<int>{512, 256, 128, 32}));
}

// The sentence reads the units' width from the measured ratio, and says so where dlperf's
// counted lanes disagree.
TEST(Bench, WidthSentenceReadsTheUnitsFromTheRatio) {
  auto at = [](int bits, double gflops) {
    bench::FlopsResult r;
    r.vector_bits = bits;
    r.lanes = bits / 32;
    r.gflops.median = gflops;
    return r;
  };
  const auto w256 = at(256, 100);
  auto says = [&](double g512, int unit_lanes, const std::string& text) {
    const std::string s = bench::width_sentence(at(512, g512), w256, unit_lanes);
    EXPECT_NE(s.find(text), std::string::npos) << s;
    return s;
  };
  EXPECT_EQ(says(198, 16, "units are 512 bits wide"), "512-bit FMAs ran at 1.98x the 256-bit rate: this CPU's FMA units are 512 bits wide.");
  EXPECT_EQ(says(101, 8, "in parts").find("dlperf counts"), std::string::npos);  // Zen 4, counted right
  says(101, 16, "dlperf counts 16 f32 lanes a unit for this CPU's counted peak; the measurement says 8");
  says(198, 8, "the measurement says 16");
  says(70, 16, "clock down for 512-bit work");
  says(150, 16, "short of the 2x the width allows");
}

// The clock the peak implies against the OS's: boost above, something taking the cores away (or
// an AVX-512 licence clock) below, silence between.
TEST(Bench, ClockNoteSaysWhichWayThePeakMissedTheCountedOne) {
  bench::FlopsResult r;
  r.vector_bits = 512;
  r.gflops.median = 232, r.implied_ghz = 3.62;
  EXPECT_EQ(bench::clock_note(r, 166.2, 2.6),
            "(above 100%: the cores ran at about 3.62 GHz, faster than the 2.60 GHz the OS reports; boost clocks)");
  r.gflops.median = 117.2, r.implied_ghz = 1.83;  // one of a Zen 4 VM's halved quick runs
  EXPECT_EQ(bench::clock_note(r, 166.2, 2.6),
            "(under 90%: the cores ran at about 1.83 GHz, slower than the 2.60 GHz the OS reports. Some Xeons clock 512-bit work "
            "lower; on a VM, other guests on the same physical cores can halve a run for a while. If a rerun reads higher, it was the latter)");
  r.gflops.median = 160;
  EXPECT_EQ(bench::clock_note(r, 166.2, 2.6), "");
}

// A run whose peak reads under its floor runs again, at most twice, and the fastest is kept; one
// that reads above it runs once. The same for fma_peaks' widths, led by the widest.
TEST(Bench, ALowPeakRunsAgainAndTheFastestIsKept) {
  auto scripted = [](std::vector<double> medians) {
    return [medians, i = size_t(0)]() mutable {
      bench::FlopsResult r;
      r.gflops.median = medians.at(i++);
      return r;
    };
  };
  auto floor = [](double f) { return [f](const bench::FlopsResult&) { return f; }; };
  std::vector<double> leads;
  EXPECT_EQ(bench::fastest_run(scripted({232}), floor(150), leads).gflops.median, 232);
  EXPECT_EQ(leads, std::vector<double>{232});
  EXPECT_EQ(bench::rerun_note(leads, "fp32 FMA peak"), "");
  EXPECT_EQ(bench::fastest_run(scripted({117, 231, 999}), floor(150), leads).gflops.median, 231);  // the third never runs
  EXPECT_EQ(leads, (std::vector<double>{117, 231}));
  EXPECT_EQ(bench::rerun_note(leads, "fp32 FMA peak"),
            "(fp32 FMA peak: the first run read 117.0 GFLOP/s, low for this CPU, so it ran again (231.0) and keeps the fastest: a "
            "VM's other guests on the same cores halve a run now and then)");
  EXPECT_EQ(bench::fastest_run(scripted({117, 110, 118}), floor(150), leads).gflops.median, 118);  // low throughout: three runs
  EXPECT_EQ(leads, (std::vector<double>{117, 110, 118}));
  EXPECT_EQ(bench::rerun_note(leads, "x"), "");  // no rerun read 10% faster: nothing to say
  // A vector of widths, the lead (widest) deciding.
  int calls = 0;
  const auto widths = bench::fastest_run(
      [&] {
        std::vector<bench::FlopsResult> w(2);
        w[0].gflops.median = ++calls == 1 ? 100 : 200, w[1].gflops.median = 50;
        return w;
      },
      floor(150), leads);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(widths[0].gflops.median, 200);
}

// bf16 runs where the CPU has AVX512-BF16 (validated exactly inside), and says why not elsewhere.
// Both lengths: the full one runs its lanes up to 15.3, near where exact growth ends (16), and
// once ran past it (`dlperf bench all` failed its own validation on a Zen 4).
TEST(Bench, Bf16PeakRunsOrSaysWhyNot) {
  for (const bool quick : {true, false}) {
    bench::Options o;
    o.quick = quick;
    o.threads = 1;
    std::string why;
    const auto r = bench::bf16_peak(o, &why);
    if (!hw::cpu_info().avx512_bf16) {
      EXPECT_TRUE(r.isa.empty());
      EXPECT_NE(why.find("AVX512-BF16"), std::string::npos) << why;
      return;
    }
    EXPECT_EQ(r.isa, "avx512-bf16");
    EXPECT_GT(r.gflops.median, 1.0);
  }
}

// AMX's bf16 peak (Xeons from Sapphire Rapids on): measured and checked exactly where oneDNN uses
// the tiles, else a reason. On the 2-vCPU Xeon VM of 2026-11-29 it read 14.5x the FMA peak.
TEST(Bench, AmxPeakRunsOrSaysWhyNot) {
  bench::Options o;
  o.quick = true;
  o.threads = 1;
  std::string why;
  const auto r = bench::amx_peak(o, &why);
  if (!cpu::has_amx_kernels()) {
    EXPECT_TRUE(r.isa.empty());
    EXPECT_NE(why.find("AMX"), std::string::npos) << why;
    GTEST_SKIP() << why;
  }
  EXPECT_EQ(r.isa, "amx-bf16");
  EXPECT_GT(r.gflops.median, 2 * bench::fma_peak(o).gflops.median) << "TDPBF16PS does 16x AVX-512's FMAs a cycle";
}

// The counted peak and the implied clock use the FMA units' width, not the ISA's: Zen 4 runs
// AVX-512 on 256-bit units (its measured peak is the AVX2 one), Zen 5 and Intel on 512-bit ones.
TEST(Bench, FmaDatapathFollowsTheCore) {
  EXPECT_EQ(hw::fma_datapath_lanes("AuthenticAMD", 0x19, true, true), 8);    // Zen 4 (EPYC 9004)
  EXPECT_EQ(hw::fma_datapath_lanes("AuthenticAMD", 0x1A, true, true), 16);   // Zen 5
  EXPECT_EQ(hw::fma_datapath_lanes("AuthenticAMD", 0x17, false, true), 8);   // Zen 2, AVX2
  EXPECT_EQ(hw::fma_datapath_lanes("GenuineIntel", 6, true, true), 16);
  EXPECT_EQ(hw::fma_datapath_lanes("GenuineIntel", 6, false, true), 8);
  EXPECT_EQ(hw::fma_datapath_lanes("GenuineIntel", 6, false, false), 4);
}

}  // namespace
}  // namespace dlperf::test

#include "backend/cpu/ops.h"
#include "bench/ops_bench.h"
#include "bench/loader_bench.h"
#include "data/dataset.h"

namespace dlperf::test {
namespace {

TEST(Bench, GemmCountsAndQuickSweepIsValidated) {
  EXPECT_DOUBLE_EQ(bench::gemm_flops(2, 3, 4), 48.0);
  bench::Options o;
  o.quick = true;
  const auto points = bench::gemm_sweep(o);
  ASSERT_GE(points.size(), 4u);
  for (const auto& p : points) {
    EXPECT_GT(p.gflops.median, 0.1);
    EXPECT_LT(p.max_rel_error, 1e-5);
    // In rounds, as the memory sweep: the figure is the best round's median.
    EXPECT_EQ(p.rounds, bench::kRounds);
    EXPECT_EQ(p.repeats, 3);
    EXPECT_GE(p.best_round_gflops, p.gflops.median);
    EXPECT_LE(p.best_round_gflops, p.gflops.max);
    const auto j = bench::to_json(p);
    EXPECT_DOUBLE_EQ(j.at("gflops_best_round").get<double>(), p.best_round_gflops);
    EXPECT_DOUBLE_EQ(j.at("gflops_median").get<double>(), p.gflops.median);
    EXPECT_EQ(j.at("rounds"), bench::kRounds);
  }
}

// The cost of a call into the engine: measured on the threads asked for, OpenMP's count put back
// after, microseconds that are positive and ordered, and recorded as such. Its buffers are not
// tracked: the plan measures it on the spot, also inside a run whose peak memory is reported.
TEST(Bench, EngineCallCostIsMeasuredOnTheThreadsAsked) {
  const int before = omp_get_max_threads();
  bench::Options o;
  o.quick = true;
  o.threads = 1;
  HostAllocator::instance().reset_peaks();
  const size_t peak_before = HostAllocator::instance().stats().peak_total;
  const auto r = bench::cpu_dispatch(o);
  EXPECT_EQ(HostAllocator::instance().stats().peak_total, peak_before);
  EXPECT_EQ(r.threads, 1);
  EXPECT_EQ(omp_get_max_threads(), before);
  EXPECT_GT(r.us.min, 0);
  EXPECT_LE(r.us.min, r.us.median);
  EXPECT_LE(r.us.median, r.us.max);
  // A unit check, not a speed test: 1-3 us idle; a machine shared many-fold can hold a sample's
  // calls up by whole time slices (PlanAgainst.ARunIsPlannedWithTheCallCostItsRecordMeasured).
  EXPECT_LT(r.us.median, 1e5) << "a relu on 1,024 floats takes microseconds";
  EXPECT_EQ(r.repeats, 5);
  const auto j = bench::to_json(r);
  EXPECT_DOUBLE_EQ(j.at("us_median").get<double>(), r.us.median);
  EXPECT_EQ(j.at("threads"), 1);
  o.threads = 0;
  EXPECT_EQ(bench::cpu_dispatch(o).threads, before);
}

// A call's cost is measured in a bounded time: on a machine whose other cores are busy a call
// can wait 10 ms for a time slice, and 2,500 of them made every training run 50 s longer.
TEST(Bench, EngineCallSamplesStopAfterTheirTime) {
  int calls = 0;
  bench::calls_per_s_within(100, 1.0, [&] { ++calls; });
  EXPECT_EQ(calls, 100) << "fast calls: all of them";
  calls = 0;
  const double rate = bench::calls_per_s_within(100, 0.01, [&] {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  });
  EXPECT_EQ(calls, 4) << "calls of 3 ms: the clock, read every 4 calls, is past 10 ms at the first read";
  EXPECT_GT(rate, 0);
  EXPECT_LE(rate, 4 / 0.012);
}

// The loader alone, each worker count plain then augmented, every count's batches checked
// against the first's; the images an epoch are whole batches.
TEST(Bench, LoaderSweepTimesEachWorkerCountPlainAndAugmented) {
  const data::Dataset d = data::make_synthetic(500, 3, 8, 8, 10, 3);
  bench::Options o;
  o.quick = true;
  const auto points = bench::loader_sweep(d, 16, {0, 2}, o);
  ASSERT_EQ(points.size(), 4u);
  const std::vector<std::pair<int, bool>> expected = {{0, false}, {2, false}, {0, true}, {2, true}};
  for (size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    EXPECT_EQ(std::make_pair(p.workers, p.augment), expected[i]);
    EXPECT_EQ(p.images, 496) << "31 whole batches of 16";
    EXPECT_EQ(p.epochs, 3);
    EXPECT_EQ(p.rounds, bench::kRounds);
    EXPECT_GT(p.images_per_s.min, 0);
    EXPECT_LE(p.images_per_s.min, p.images_per_s.median);
    EXPECT_LE(p.images_per_s.median, p.images_per_s.max);
    // The figure is the best round's median: no lower than the pooled median, within the spread.
    EXPECT_GE(p.best_round_images_per_s, p.images_per_s.median);
    EXPECT_LE(p.best_round_images_per_s, p.images_per_s.max);
    // That epoch's time, two ways: images / (images/s), and ns a pixel x pixels.
    EXPECT_NEAR(p.ns_per_pixel * 1e-9 * 496 * 3 * 8 * 8, 496 / p.best_round_images_per_s, 1e-9);
    const auto j = bench::to_json(p);
    EXPECT_EQ(j.at("workers"), p.workers);
    EXPECT_EQ(j.at("augment"), p.augment);
    EXPECT_DOUBLE_EQ(j.at("images_per_s_best_round").get<double>(), p.best_round_images_per_s);
    EXPECT_EQ(j.at("rounds"), bench::kRounds);
    EXPECT_DOUBLE_EQ(j.at("ns_per_pixel").get<double>(), p.ns_per_pixel);
    EXPECT_EQ(j.at("images_per_epoch"), 496);
  }
  EXPECT_THROW(bench::loader_sweep(d, 16, {}, o), Error);
}

TEST(Bench, ConvSweepTimesEachDistinctLayer) {
  bench::Options o;
  o.quick = true;
  const auto points = bench::conv_sweep(o, {"small", "small"}, {1, 16, 16}, 8);
  ASSERT_EQ(points.size(), 3u);  // small has three convs; the second model adds no new shape
  EXPECT_EQ(points[0].layer, "conv1");
  EXPECT_EQ(points[0].backward_data_gflops, 0.0);  // the first layer needs no data gradient
  for (const auto& p : points) {
    EXPECT_GT(p.forward_gflops, 0.0);
    EXPECT_GT(p.backward_weights_gflops, 0.0);
    // In rounds: the figure is a round's median, so it lies within every sample's spread.
    EXPECT_EQ(p.rounds, bench::kRounds);
    EXPECT_EQ(p.repeats, 3);
    EXPECT_GE(p.forward_gflops, p.forward_samples.min);
    EXPECT_LE(p.forward_gflops, p.forward_samples.max);
    EXPECT_GE(p.forward_gflops, p.forward_samples.median) << "the best round's median is no lower than the pooled median";
    EXPECT_GE(p.backward_weights_gflops, p.backward_weights_samples.median);
    EXPECT_LE(p.backward_weights_gflops, p.backward_weights_samples.max);
    const auto j = bench::to_json(p);
    EXPECT_DOUBLE_EQ(j.at("forward_gflops").get<double>(), p.forward_gflops);
    EXPECT_DOUBLE_EQ(j.at("forward_gflops_median").get<double>(), p.forward_samples.median);
    EXPECT_DOUBLE_EQ(j.at("backward_weights_gflops_max").get<double>(), p.backward_weights_samples.max);
    EXPECT_EQ(j.at("rounds"), bench::kRounds);
  }
  EXPECT_GT(points[1].backward_data_gflops, 0.0);
  EXPECT_EQ(bench::to_json(points[1])["input"], (Dims{8, 16, 8, 8}));
  // Each conv reads what training gives it: the first the plain model input, the others the
  // channel blocks oneDNN chose for the layers before them (on a plain input oneDNN would run
  // slower, other kernels), as the engine's own walk of the graph finds them.
  EXPECT_EQ(points[0].input_layout, "nchw");
  const nn::Graph g = nn::build_graph(nn::load_model("small"), {1, 16, 16}, 10, 8);
  const auto given = cpu::given_input_layouts(g, "fp32");
  auto node = [&](const std::string& name) {
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (g.nodes[i].name == name) return i;
    throw Error("no layer " + name);
  };
  EXPECT_EQ(given[node("conv1")][0], cpu::plain_md(g.nodes[node("conv1")].in_dims[0]));
  // conv1 writes its blocks; its batchnorm and pooling keep them; conv2 reads them.
  EXPECT_NE(given[node("bn1")][0], cpu::plain_md(g.nodes[node("bn1")].in_dims[0]));
  EXPECT_EQ(given[node("pool1")][0], given[node("bn1")][0]);
  EXPECT_EQ(given[node("conv2")][0].get_size(), given[node("pool1")][0].get_size() / 4);  // 2x2 pooling
  EXPECT_TRUE(given[node("relu1")].empty());  // inside bn1
  for (size_t p = 1; p < points.size(); ++p) {
    EXPECT_NE(points[p].input_layout, "nchw") << points[p].layer;
    EXPECT_EQ(bench::to_json(points[p])["input_layout"], points[p].input_layout);
    EXPECT_NE(given[node(points[p].layer)][0], cpu::plain_md(g.nodes[node(points[p].layer)].in_dims[0])) << points[p].layer;
  }
  for (const auto& p : points) {
    EXPECT_LT(p.max_rel_error, 1e-5);  // each pass checked against float64 (conv_sweep throws above 1e-5)
    EXPECT_GE(p.rotated_sets, 1);
    EXPECT_TRUE(bench::to_json(p).contains("max_rel_error"));
  }
}

// The conv benchmark's check: the float64 reference's own passes score as exact, and a pass that
// is off by 1% anywhere is caught, whichever of forward, weight and data gradient it is.
TEST(Bench, ConvCheckCatchesAWrongPass) {
  ops::OpAttrs a;
  a.out_channels = 5, a.kernel = 3, a.stride = 2, a.padding = 1, a.bias = true;
  const Dims xd{2, 3, 7, 7};
  Rng r(9);
  auto random = [&](int64_t n) {
    ref::Vec v(static_cast<size_t>(n));
    for (auto& e : v) e = 2 * r.uniform() - 1;
    return v;
  };
  const ref::Vec x = random(2 * 3 * 7 * 7), w = random(5 * 3 * 3 * 3), b = random(5), dy = random(2 * 5 * 4 * 4);
  const ref::Vec y = ref::conv2d_forward(x, xd, w, b, a);
  ref::Vec dx, dw, db;
  ref::conv2d_backward(x, xd, w, a, dy, dx, dw, db);
  auto f = [](const ref::Vec& v) { return std::vector<float>(v.begin(), v.end()); };
  auto off = [&](const ref::Vec& v) {  // 1% too large everywhere
    std::vector<float> o = f(v);
    for (auto& e : o) e *= 1.01f;
    return o;
  };
  EXPECT_LT(bench::conv_max_rel_error(xd, a, f(x), f(w), f(b), f(y), f(dy), f(dw), f(dx)), 1e-6);
  EXPECT_GT(bench::conv_max_rel_error(xd, a, f(x), f(w), f(b), off(y), f(dy), f(dw), f(dx)), 1e-3);
  EXPECT_GT(bench::conv_max_rel_error(xd, a, f(x), f(w), f(b), f(y), f(dy), off(dw), f(dx)), 1e-3);
  EXPECT_GT(bench::conv_max_rel_error(xd, a, f(x), f(w), f(b), f(y), f(dy), f(dw), off(dx)), 1e-3);
  EXPECT_LT(bench::conv_max_rel_error(xd, a, f(x), f(w), f(b), f(y), f(dy), f(dw), {}), 1e-6);  // no data gradient
}

}  // namespace
}  // namespace dlperf::test

namespace dlperf::test {
namespace {

TEST(Bench, BandwidthLevelsTakeThePlateauOfEachCache) {
  auto pt = [](size_t ws, double gbps) { return bench::MemoryPoint{"triad", ws, {gbps - 1, gbps - 5, gbps}, gbps, 1, 3}; };
  // 1 thread, L1 32 KiB, L2 512 KiB, L3 8 MiB.
  const std::vector<bench::MemoryPoint> points = {pt(8 << 10, 300), pt(16 << 10, 320), pt(128 << 10, 200),
                                                  pt(256 << 10, 180), pt(2 << 20, 90), pt(16 << 20, 50),
                                                  pt(64 << 20, 20), pt(256 << 20, 22),
                                                  bench::MemoryPoint{"copy", 8 << 10, {999, 999, 999}, 999, 1, 3}};
  const auto levels = bench::bandwidth_levels(points, 32 << 10, 512 << 10, 8 << 20, 1);
  EXPECT_DOUBLE_EQ(levels["L1"].get<double>(), 310);   // median of the two points' figures in L1, copy ignored
  EXPECT_DOUBLE_EQ(levels["L2"].get<double>(), 190);
  EXPECT_DOUBLE_EQ(levels["L3"].get<double>(), 90);   // 16 MiB is past half the L3: neither L3 nor DRAM
  EXPECT_DOUBLE_EQ(levels["DRAM"].get<double>(), 21);
  // Unknown cache sizes: nothing can be placed.
  EXPECT_TRUE(bench::bandwidth_levels(points, 0, 0, 0, 1).empty());
}

}  // namespace
}  // namespace dlperf::test

#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/machine_profile.h"
#include "bench/roofline.h"
#include "report/plot.h"
#include "hw/cpu_info.h"
#include "test_util.h"

namespace dlperf::test {
namespace {

TEST(Roofline, PointsRoofsAndFiles) {
  const nlohmann::json layer_times = {
      {{"layer", "conv1"}, {"forward_flops", 2e9}, {"forward_bytes", 1e7}, {"forward_s", 0.02},
       {"backward_flops", 4e9}, {"backward_bytes", 2e7}, {"backward_s", 0.05}},
      {{"layer", "flatten"}, {"forward_flops", 0.0}, {"forward_bytes", 0.0}, {"forward_s", 0.001},
       {"backward_flops", 0.0}, {"backward_bytes", 0.0}, {"backward_s", 0.001}}};
  const auto points = bench::roofline_points(layer_times);
  ASSERT_EQ(points.size(), 2u);  // flatten does no arithmetic: left out
  EXPECT_DOUBLE_EQ(points[0].intensity(), 200.0);
  EXPECT_DOUBLE_EQ(points[0].gflops(), 100.0);
  EXPECT_EQ(points[1].pass, "backward");
  // A convolution's taps on zero padding, which oneDNN skips, are not placed as work done.
  const auto padded = bench::roofline_points({{{"layer", "conv"}, {"forward_flops", 2e9}, {"forward_padding_flops", 5e8},
                                               {"forward_bytes", 1e7}, {"forward_s", 0.02}}});
  ASSERT_EQ(padded.size(), 1u);
  EXPECT_DOUBLE_EQ(padded[0].gflops(), 75.0);
  EXPECT_DOUBLE_EQ(padded[0].intensity(), 150.0);
  EXPECT_DOUBLE_EQ(bench::roof(200, 150, 20), 150);  // compute-bound
  EXPECT_DOUBLE_EQ(bench::roof(2, 150, 20), 40);     // memory-bound
  TempDir t;
  const std::string stem = (t.path / "roof").string();
  const bool draw = report::gnuplot_available();
  const auto files = bench::write_roofline(points, {{"FMA peak", 150}}, {{"L1", 200.0}, {"DRAM", 20.0}}, stem, "test", draw);
  EXPECT_EQ(files.size(), draw ? 3u : 2u);
  std::ifstream csv(stem + ".csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header, "layer,pass,flops,bytes,seconds,intensity_flop_per_byte,gflops,padding_flops");
  if (draw) {  // a valid PNG, signature to IEND
    EXPECT_TRUE(report::png_is_whole(stem + ".png"));
    EXPECT_GT(std::filesystem::file_size(stem + ".png"), 1000u);
  }
  EXPECT_THROW(bench::write_roofline({}, {{"FMA peak", 150}}, {}, stem, "t", false), Error);
  EXPECT_THROW(bench::write_roofline(points, {}, {}, stem, "t", false), Error);
}

// gnuplot exits 0 when it cannot write its PNG, leaving the file cut short on a full disk (a
// 17 kB plot stopped at 8 kB): a plot is checked from its signature to its IEND chunk, and a
// damaged one is an error and removed, not embedded in a report.
TEST(Plot, APngCutShortIsAnErrorAndRemoved) {
  TempDir t;
  const std::string signature = "\x89PNG\r\n\x1a\n", header = std::string("\0\0\0\x0dIHDR", 8) + std::string(17, '\x01');
  const std::string iend = std::string("\0\0\0\0IEND\xae\x42\x60\x82", 12);
  const auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(t.path / name, std::ios::binary) << bytes;
    return (t.path / name).string();
  };
  EXPECT_TRUE(report::png_is_whole(write("whole.png", signature + header + iend)));
  EXPECT_FALSE(report::png_is_whole(write("cut.png", signature + header + iend.substr(0, 6))));
  EXPECT_FALSE(report::png_is_whole(write("text.png", "not a png at all, but long enough")));
  EXPECT_FALSE(report::png_is_whole((t.path / "missing.png").string()));
  if (!report::gnuplot_available() || !std::filesystem::exists("/dev/full")) GTEST_SKIP() << "needs gnuplot and /dev/full";
  const auto png = t.path / "full.png";
  std::filesystem::create_symlink("/dev/full", png);  // every write fails: no space left on device
  const std::string gp = write("full.gp", fmt::format("set terminal pngcairo\nset output '{}'\nplot x\n", png.string()));
  const std::string error = error_of([&] { report::run_gnuplot(gp, png.string()); });
  EXPECT_NE(error.find("gnuplot did not write a whole " + png.string()), std::string::npos) << error;
  EXPECT_NE(error.find("rerun: gnuplot " + gp), std::string::npos) << error;
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(png))) << "the damaged plot is left in place";
}

// A pass is held to the roof of the level its bytes fit in (the level the planner picks), so a
// pass served from a cache is not read as beating DRAM; a GPU's passes all read against HBM.
TEST(Roofline, EachPassIsReadAgainstTheLevelItsBytesFitIn) {
  bench::Roofline cpu;
  cpu.bandwidth_gbps = {{"L1", 800.0}, {"L2", 350.0}, {"L3", 180.0}, {"DRAM", 40.0}};
  cpu.level_bytes = {{"L2", 2.0 * (1 << 20)}, {"L3", 32.0 * (1 << 20)}};
  EXPECT_EQ(bench::level_for(1e3, cpu), "L2");
  EXPECT_EQ(bench::level_for(2.0 * (1 << 20), cpu), "L2");
  EXPECT_EQ(bench::level_for(2.0 * (1 << 20) + 1, cpu), "L3");
  EXPECT_EQ(bench::level_for(1e9, cpu), "DRAM");
  cpu.bandwidth_gbps.erase("L3");  // a level without a measured rate is skipped
  EXPECT_EQ(bench::level_for(1e7, cpu), "DRAM");
  bench::Roofline gpu;
  gpu.bandwidth_gbps = {{"HBM", 3350.0}};
  EXPECT_EQ(bench::level_for(1e3, gpu), "HBM");
}

// A GPU's roofline: the profiler's layer passes (backward split into data and weight), the run's
// precision as the roof the HBM line bends into, the other precisions dashed above it.
TEST(Roofline, GpuPassesFromTheProfileAndACeilingPerPrecision) {
  const nlohmann::json profile = {
      {"rows",
       {{{"name", "conv1"}, {"op", "conv2d"}, {"phase", "forward"}, {"flops", 4e9}, {"bytes", 2e7}, {"self_s", 0.001}},
        {{"name", "conv1"}, {"op", "conv2d"}, {"phase", "backward-weight"}, {"flops", 4e9}, {"bytes", 2e7}, {"self_s", 0.002}},
        {{"name", "conv1"}, {"op", "conv2d"}, {"phase", "backward-data"}, {"flops", 4e9}, {"bytes", 2e7}, {"self_s", 0.002}},
        {{"name", "optimizer"}, {"op", ""}, {"phase", "optimizer"}, {"flops", 1e6}, {"bytes", 1e7}, {"self_s", 0.001}},
        {{"name", "relu1"}, {"op", "relu"}, {"phase", "forward"}, {"flops", 0.0}, {"bytes", 1e7}, {"self_s", 0.0005}}}}};
  const auto points = bench::roofline_points_from_profile(profile);
  ASSERT_EQ(points.size(), 3u);  // the optimizer is no layer; relu does no arithmetic
  EXPECT_EQ(points[1].pass, "backward-weight");
  EXPECT_DOUBLE_EQ(points[0].gflops(), 4000.0);
  EXPECT_DOUBLE_EQ(points[0].intensity(), 200.0);
  TempDir t;
  const std::string stem = (t.path / "gpu").string();
  const bool draw = report::gnuplot_available();  // gnuplot must accept the script
  const auto files = bench::write_roofline(points, {{"fp32 peak", 51000}, {"bf16 (datasheet)", 989000}}, {{"HBM", 3350.0}}, stem,
                                           "medium on a GPU", draw);
  if (draw) {
    ASSERT_EQ(files.size(), 3u);
    EXPECT_GT(std::filesystem::file_size(stem + ".png"), 1000u);
  }
  std::ifstream gp(stem + ".gp");
  std::stringstream script;
  script << gp.rdbuf();
  for (const char* s : {"peak = 51000", "x * 3350", "'HBM 3350 GB/s'", "989000 with lines", "bf16 (datasheet) 989000 GFLOP/s",
                        "eq 'backward-data'", "eq 'backward-weight'", "[0.1:1.98e+06]"})
    EXPECT_NE(script.str().find(s), std::string::npos) << s << "\n" << script.str();
}

// The machine profile keeps each GPU's measured ceilings: the best GEMM median per precision,
// the best device-memory kernel; dlperf profile and bench roofline find them by the GPU's name.
TEST(MachineProfile, GpuCeilingsFromTheBenchAndBack) {
  const nlohmann::json gemm = {{{"precision", "fp32"}, {"median_tflops", 40.0}},
                               {{"precision", "fp32"}, {"median_tflops", 51.5}},
                               {{"precision", "bf16"}, {"median_tflops", 700.0}}};
  const nlohmann::json memory = {{{"kernel", "copy"}, {"median_gbps", 2900.0}}, {{"kernel", "read"}, {"median_gbps", 3100.0}},
                                 {{"kernel", "triad"}, {"median_gbps", 3000.0}}};
  const auto g = bench::gpu_ceilings_from_bench("NVIDIA H100 80GB HBM3", gemm, memory);
  EXPECT_DOUBLE_EQ(g.peak("fp32"), 51500.0);
  EXPECT_DOUBLE_EQ(g.peak("bf16"), 7e5);
  EXPECT_EQ(g.peak("fp16"), 0.0);
  EXPECT_DOUBLE_EQ(g.hbm_gbps(), 3100.0);
  EXPECT_EQ(g.bandwidth_kernel, "read");
  EXPECT_TRUE(bench::gpu_ceilings_from_bench("x", {{"skipped", "no GPU"}}, nullptr).empty());

  TempDir t;
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(t.path);  // the profile lives at runs/machine-profile.json
  EXPECT_TRUE(bench::load_gpu_ceilings("NVIDIA H100 80GB HBM3").empty());  // no file yet
  bench::write_machine_profile({{"cpu", "some CPU"}, {"threads", 2}, {"f32_gflops", 80.0}, {"gpus", {bench::to_json(g)}}});
  const auto back = bench::load_gpu_ceilings("NVIDIA H100 80GB HBM3");
  EXPECT_DOUBLE_EQ(back.peak("bf16"), 7e5);
  EXPECT_DOUBLE_EQ(back.hbm_gbps(), 3100.0);
  EXPECT_TRUE(bench::load_gpu_ceilings("NVIDIA A100-SXM4-80GB").empty());  // another GPU
  EXPECT_DOUBLE_EQ(bench::load_ceilings("some CPU", 2).f32_gflops, 80.0);
  EXPECT_EQ(bench::load_ceilings("some CPU", 2).call_overhead_us, 0.0);  // written before bench measured it
  bench::write_machine_profile({{"cpu", "some CPU"}, {"threads", 2}, {"f32_gflops", 80.0}, {"call_overhead_us", 1.7}});
  EXPECT_DOUBLE_EQ(bench::load_ceilings("some CPU", 2).call_overhead_us, 1.7);
  bench::write_machine_profile({{"cpu", "some CPU"}, {"threads", 2}, {"f32_gflops", 80.0}, {"call_overhead_us", -1}});
  EXPECT_EQ(bench::load_ceilings("some CPU", 2).f32_gflops, 0.0) << "a damaged field makes the whole profile count as none";
  EXPECT_EQ(bench::load_ceilings("some CPU", 2).bf16_gflops, 0.0);
  bench::write_machine_profile({{"cpu", "some CPU"}, {"threads", 2}, {"f32_gflops", 80.0}, {"bf16_gflops", 150.0}});
  EXPECT_DOUBLE_EQ(bench::load_ceilings("some CPU", 2).bf16_gflops, 150.0);
  bench::write_machine_profile({{"cpu", "some CPU"}, {"threads", 2}, {"f32_gflops", 80.0}, {"bf16_gflops", "fast"}});
  EXPECT_EQ(bench::load_ceilings("some CPU", 2).f32_gflops, 0.0);
  // The kernel choices' timed ratios, which every process here then takes (cpu::winograd_choice).
  EXPECT_EQ(bench::load_ceilings("some CPU", 2).direct_over_winograd, 0.0) << "none kept";
  bench::write_machine_profile({{"cpu", "some CPU"}, {"threads", 2}, {"f32_gflops", 80.0},
                                {"cpu_kernels", {{"direct_over_winograd", 1.29}, {"max_pool_onednn_over_dlperf", 3.86}, {"rounds", 7}}}});
  const bench::Ceilings kept = bench::load_ceilings("some CPU", 2);
  EXPECT_DOUBLE_EQ(kept.direct_over_winograd, 1.29);
  EXPECT_DOUBLE_EQ(kept.max_pool_onednn_over_dlperf, 3.86);
  EXPECT_EQ(kept.kernels_source(), "the median of 7 rounds of 'dlperf bench all', kept in runs/machine-profile.json");
  EXPECT_EQ(bench::load_ceilings("some CPU", 1).direct_over_winograd, 0.0) << "timed on 2 threads, not 1";
  bench::write_machine_profile({{"cpu", "some CPU"}, {"threads", 2}, {"f32_gflops", 80.0}, {"cpu_kernels", {{"direct_over_winograd", 0}}}});
  EXPECT_EQ(bench::load_ceilings("some CPU", 2).f32_gflops, 0.0) << "a ratio of 0 is a damaged file";
  bench::write_machine_profile({{"cpu", "some CPU"}, {"threads", 2}, {"f32_gflops", 80.0}, {"cpu_kernels", {{"rounds", 2.5}}}});
  EXPECT_EQ(bench::load_ceilings("some CPU", 2).f32_gflops, 0.0) << "rounds are whole";
  std::ofstream(bench::kMachineProfile) << "{ damaged";
  EXPECT_TRUE(bench::load_gpu_ceilings("NVIDIA H100 80GB HBM3").empty());
  std::filesystem::current_path(cwd);
}

// 'bench all --quick' (seconds of sampling) does not replace a full measurement of the same CPU,
// whatever its thread count; a full one replaces anything, and the ceilings say how they were measured.
TEST(MachineProfile, AQuickMeasurementNeverReplacesAFullOne) {
  TempDir t;
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(t.path);
  auto replaces = [](const nlohmann::json& p) { return bench::why_machine_profile_kept(p).empty(); };
  const nlohmann::json full = {{"cpu", "some CPU"}, {"threads", 2}, {"f32_gflops", 80.0}, {"quick", false}};
  nlohmann::json quick = full;
  quick["quick"] = true;
  EXPECT_TRUE(replaces(quick));  // no profile yet
  bench::write_machine_profile(full);
  EXPECT_EQ(bench::load_ceilings("some CPU", 2).source(), "measured by 'dlperf bench all', in runs/machine-profile.json");
  EXPECT_FALSE(replaces(quick));
  quick["threads"] = 1;
  EXPECT_FALSE(replaces(quick));
  quick["cpu"] = "another CPU";
  EXPECT_TRUE(replaces(quick));
  nlohmann::json full_1 = full;
  full_1["threads"] = 1;
  EXPECT_TRUE(replaces(full_1));
  quick = full;
  quick["quick"] = true;
  bench::write_machine_profile(quick);  // a quick one is replaced by another
  EXPECT_TRUE(replaces(quick));
  EXPECT_EQ(bench::load_ceilings("some CPU", 2).source(), "measured by 'dlperf bench all --quick', in runs/machine-profile.json");
  // A profile whose CPU facts are another CPU's (the same "AMD EPYC" name on a Zen 3 and a Zen 5
  // VM) holds no ceilings for this one; with this CPU's facts it does.
  const hw::CpuInfo cpu = hw::cpu_info();
  nlohmann::json here = {{"cpu", cpu.model}, {"threads", 2}, {"f32_gflops", 80.0}, {"cpu_identity", hw::cpu_identity(hw::to_json(cpu))}};
  bench::write_machine_profile(here);
  EXPECT_DOUBLE_EQ(bench::load_ceilings(cpu.model, 2).f32_gflops, 80.0);
  here["cpu_identity"]["isa"] = "another ISA";
  bench::write_machine_profile(here);
  EXPECT_EQ(bench::load_ceilings(cpu.model, 2).f32_gflops, 0.0);
  std::filesystem::current_path(cwd);
}

// The kernel's accounting, read as bench and train read it: per-CPU lines of the CPUs this
// process may run on (not the first, all-CPU line), this process's own time and its children's
// (the name in /proc/PID/stat may hold spaces and parentheses), and the shares between readings.
TEST(HostLoad, ReadsTheKernelsAccountingOfTheCpusItMayRunOn) {
  const std::string stat0 =
      "cpu  300 0 100 1000 0 0 0 10 0 0\n"
      "cpu0 100 0 50 500 0 0 0 5 0 0\n"
      "cpu1 200 0 50 500 0 0 0 5 0 0\n"
      "cpu2 999 0 0 0 0 0 0 0 0 0\n"
      "intr 12345\n";
  hw::CpuTimes a = hw::parse_proc_stat(stat0, {0, 1}, 100);
  ASSERT_TRUE(a.known);
  EXPECT_EQ(a.cpus, 2);
  EXPECT_DOUBLE_EQ(a.busy_s, 4.0);   // (100 + 50 + 200 + 50) ticks
  EXPECT_DOUBLE_EQ(a.steal_s, 0.1);
  EXPECT_DOUBLE_EQ(a.total_s, 14.1);
  EXPECT_FALSE(hw::parse_proc_stat(stat0, {7}, 100).known) << "none of its CPUs listed";
  EXPECT_DOUBLE_EQ(hw::parse_proc_stat("cpu0 100 0 100 800\n", {0}, 100).total_s, 10.0) << "an old kernel's line, without steal";

  EXPECT_DOUBLE_EQ(hw::parse_self_stat("42 (dl perf (x)) R 1 2 3 4 5 6 7 8 9 10 120 30 40 10 20 0", 100), 2.0);
  EXPECT_EQ(hw::parse_self_stat("42 (dlperf) R 1 2", 100), -1);
  EXPECT_EQ(hw::parse_self_stat("", 100), -1);

  // 10 s on 2 CPUs: this process used 12 s of the 20, other processes 4, the hypervisor 1.
  hw::CpuTimes b = a;
  a.self_s = 1;
  b.self_s = 13;
  b.busy_s = a.busy_s + 16;
  b.steal_s = a.steal_s + 1;
  b.total_s = a.total_s + 20;
  const hw::HostLoad h = hw::host_load(a, b);
  ASSERT_TRUE(h.known);
  EXPECT_DOUBLE_EQ(h.seconds, 10.0);
  EXPECT_NEAR(h.others_share, 0.2, 1e-12);
  EXPECT_NEAR(h.steal_share, 0.05, 1e-12);
  EXPECT_TRUE(h.busy());
  EXPECT_EQ(hw::busy_note(h), "other processes used 20% of the 2 CPUs' time, and the hypervisor took 5% for other guests");
  // Below the threshold, or too short a window to tell, it is not busy.
  b.busy_s = a.busy_s + 12.5, b.steal_s = a.steal_s;
  EXPECT_FALSE(hw::host_load(a, b).busy());
  EXPECT_EQ(hw::busy_note(hw::host_load(a, b)), "");
  b.busy_s = a.busy_s + 16, b.total_s = a.total_s + 1.6;
  EXPECT_FALSE(hw::host_load(a, b).busy()) << "0.8 s";
  // Ticks sampled apart can make this process's time exceed the CPUs' busy time: that is no load.
  b.total_s = a.total_s + 20, b.busy_s = a.busy_s + 11.9;
  EXPECT_EQ(hw::host_load(a, b).others_share, 0.0);
  EXPECT_FALSE(hw::host_load(a, hw::CpuTimes{}).known);
  const hw::HostLoad instant = hw::host_load(a, a);  // within one tick
  EXPECT_TRUE(instant.known);
  EXPECT_EQ(instant.seconds, 0.0);
  EXPECT_EQ(instant.others_share, 0.0);
  EXPECT_FALSE(instant.busy());
  // The machine's own counters move forward.
  const hw::CpuTimes now = hw::cpu_times_now();
  ASSERT_TRUE(now.known) << "/proc/stat or /proc/self/stat unreadable";
  EXPECT_EQ(now.cpus, hw::usable_cpus());
  EXPECT_GT(now.total_s, 0.0);
  EXPECT_GE(now.self_s, 0.0);
}

// A measurement the plan keeps for the process (its ceilings, measured now) is taken again when
// it was taken while other processes shared the CPUs, and kept when it was not. The load is real:
// as many spinning processes as this process may use CPUs, orphaned (their time is not counted as
// this process's children's), for 1.4 s of the 1.5 s the first measurement takes.
TEST(HostLoad, AMeasurementTakenUnderLoadIsTakenAgainLater) {
  if (!hw::cpu_times_now().known) GTEST_SKIP() << "/proc/stat or /proc/self/stat unreadable";
  hw::KeptMeasurements<int> kept(std::chrono::seconds(0));  // retaken at the next call, not a minute later
  int calls = 0;
  auto measure = [&](int) {
    if (++calls == 1) {
      const std::string spin = fmt::format(
          "for i in $(seq {}); do (timeout 1.4 sh -c 'while :; do :; done' > /dev/null 2>&1 &); done", hw::usable_cpus());
      EXPECT_EQ(std::system(spin.c_str()), 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    }
    return calls;
  };
  const auto first = kept.get(2, measure);
  EXPECT_EQ(first.value, 1);
  EXPECT_TRUE(first.load.busy()) << "others " << first.load.others_share << " over " << first.load.seconds << " s";
  EXPECT_NE(hw::busy_note(first.load), "");
  const auto second = kept.get(2, measure);
  EXPECT_EQ(second.value, 2) << "taken again";
  EXPECT_FALSE(second.load.busy());
  EXPECT_EQ(kept.get(2, measure).value, 2) << "an idle one is kept";
  EXPECT_EQ(kept.get(1, measure).value, 3) << "each thread count its own";
  EXPECT_EQ(calls, 3);
  // Ceilings measured so say it, and how they were disturbed.
  bench::Ceilings now;
  now.measured_now = true;
  EXPECT_EQ(now.source(), "measured just now, quickly; 'dlperf bench all' keeps a fuller measurement in runs/machine-profile.json");
  now.busy_note = hw::busy_note(first.load);
  EXPECT_EQ(now.source(), fmt::format("measured just now, quickly, while {} (they may read low); 'dlperf bench all' keeps a fuller "
                                      "measurement in runs/machine-profile.json", now.busy_note));
  // A busy one within the minute is kept (a burst of calls on a busy machine measures once).
  hw::KeptMeasurements<int> patient;
  calls = 0;
  EXPECT_TRUE(patient.get(2, measure).load.busy());
  EXPECT_EQ(patient.get(2, measure).value, 1);
}

// A bench all that shared the CPUs with other work (hw::HostLoad::busy) reads low: it does not
// replace a profile measured on an idle machine, a calm one replaces it, and the ceilings it left
// say how they were measured.
TEST(MachineProfile, AMeasurementOnABusyMachineDoesNotReplaceACalmOne) {
  TempDir t;
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(t.path);
  const nlohmann::json calm = {{"cpu", "some CPU"}, {"threads", 2}, {"f32_gflops", 80.0}, {"quick", false},
                               {"host_load", {{"known", true}, {"others_share", 0.01}, {"steal_share", 0.0}, {"busy", false}}}};
  nlohmann::json busy = calm;
  busy["f32_gflops"] = 50.0;
  busy["host_load"] = hw::to_json(hw::HostLoad{.known = true, .cpus = 2, .seconds = 5, .others_share = 0.34, .steal_share = 0});
  EXPECT_TRUE(bench::why_machine_profile_kept(busy).empty()) << "no profile yet: the busy one is better than none";
  bench::write_machine_profile(busy);
  EXPECT_EQ(bench::load_ceilings("some CPU", 2).source(),
            "measured by 'dlperf bench all', in runs/machine-profile.json, while other processes used 34% of the 2 CPUs' time "
            "(they may read low: rerun it on an idle machine)");
  nlohmann::json calm_quick = calm;
  calm_quick["quick"] = true;
  EXPECT_TRUE(bench::why_machine_profile_kept(calm_quick).empty()) << "an idle quick run replaces a busy full one";
  bench::write_machine_profile(calm);
  EXPECT_EQ(bench::load_ceilings("some CPU", 2).source(), "measured by 'dlperf bench all', in runs/machine-profile.json");
  const std::string kept = bench::why_machine_profile_kept(busy);
  EXPECT_NE(kept.find("measured on an idle machine, this run was not"), std::string::npos) << kept;
  nlohmann::json other_cpu = busy;
  other_cpu["cpu"] = "another CPU";
  EXPECT_TRUE(bench::why_machine_profile_kept(other_cpu).empty());
  // A profile from before host loads were recorded counts as calm.
  nlohmann::json old = calm;
  old.erase("host_load");
  bench::write_machine_profile(old);
  EXPECT_FALSE(bench::why_machine_profile_kept(busy).empty());
  std::filesystem::current_path(cwd);
}

}  // namespace
}  // namespace dlperf::test

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "bench/collective.h"

namespace dlperf::test {
namespace {

TEST(Collective, BusBandwidthFollowsNcclTests) {
  EXPECT_DOUBLE_EQ(bench::algbw_gbps(2e9, 0.5), 4.0);
  EXPECT_DOUBLE_EQ(bench::allreduce_busbw(4.0, 2), 4.0);   // 2(n-1)/n = 1
  EXPECT_DOUBLE_EQ(bench::allreduce_busbw(4.0, 8), 7.0);   // 2 * 7/8
  EXPECT_DOUBLE_EQ(bench::allreduce_busbw(4.0, 1), 4.0);
}

TEST(Collective, MpiAllReduceRunsAndIsCorrect) {
#ifndef DLPERF_ALLREDUCE_BIN
  GTEST_SKIP() << "built without MPI";
#else
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun not installed";
  const std::string cmd = bench::mpirun_command(DLPERF_ALLREDUCE_BIN, 2, true);
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (size_t got = std::fread(buf, 1, sizeof buf, p)) out.append(buf, got);
  ASSERT_EQ(::pclose(p), 0) << out;
  const auto r = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(r["ranks"], 2);
  EXPECT_TRUE(r["correct"].get<bool>());
  for (const auto& row : r["sizes"]) {
    EXPECT_GT(row["algbw_gbps"].get<double>(), 0);
    EXPECT_DOUBLE_EQ(row["busbw_gbps"].get<double>(), row["algbw_gbps"].get<double>());  // 2 ranks
  }
#endif
}

// More ranks than CPUs: mpirun --oversubscribe starts them, and the table says that its times
// include waiting for a core (4 ranks on 2 CPUs took 8.5 us for 1 KB, 2 ranks 0.5 us).
TEST(Collective, MpiOversubscribedRanksAreSaid) {
#ifndef DLPERF_ALLREDUCE_BIN
  GTEST_SKIP() << "built without MPI";
#else
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun not installed";
  TempDir dir;
  const int cpus = hw::usable_cpus(), ranks = cpus + 1;
  const std::string cmd = fmt::format("cd '{}' && '{}' bench allreduce --quick --ranks {} --json b.json > out.txt 2>&1",
                                      dir.path.string(), DLPERF_BIN, ranks);
  const int status = std::system(cmd.c_str());
  std::ifstream f(dir.path / "out.txt");
  const std::string out{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find(fmt::format("({} ranks on {} CPUs: the ranks take turns on the cores", ranks, cpus)), std::string::npos) << out;
  std::ifstream b(dir.path / "b.json");
  EXPECT_TRUE(nlohmann::json::parse(b)["allreduce"]["ranks_over_cpus"].get<bool>());
#endif
}

}  // namespace
}  // namespace dlperf::test
