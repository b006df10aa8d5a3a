// The commands beyond `dlperf train` on a machine with a GPU: dlperf lab (the device
// experiment's cuda rows, the precision experiment on the GPU, the report's GPU line, --full as
// the default) and dlperf bench roofline (a GPU step's layer passes against the GPU's ceilings).
// Built twice (cuda_kernel_util.h): on a GPU in dlperf_tests (suite Cuda), and in
// dlperf_emu_tests (suite CudaEmu), where their GPU runs go through the emulated executor
// (test_cuda_network.cpp says how), so these paths are checked before a GPU session spends its
// minutes on them.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "cuda_kernel_util.h"
#include "test_util.h"

#if defined(DLPERF_HAVE_CUDA) || defined(DLPERF_CUDA_EMULATION)
#include <nlohmann/json.hpp>

#include "backend/cuda/runtime.h"
#include "bench/gpu_bench.h"
#include "bench/machine_profile.h"
#include "bench/roofline.h"
#include "hw/cpu_info.h"
#include "lab/lab.h"
#include "plan/catalog.h"

namespace dlperf::test {
namespace {

using nlohmann::json;

// dlperf bench's GPU half: each benchmark runs and validates its own results (under the
// emulation too, on sizes it can afford, so a GPU session's bench stage has run before).
TEST(KERNEL_SUITE, GpuBenchmarksValidateTheirResults) {
  REQUIRE_GPU();
#ifdef DLPERF_CUDA_EMULATION
  constexpr double kStreamBytes = 1e6, kMinGbps = 0;  // emulated kernels crawl
#else
  constexpr double kStreamBytes = 64e6, kMinGbps = 1;
#endif
  const auto copies = bench::gpu::copies(0, 1 << 20, 3);
  ASSERT_FALSE(copies.empty());
  for (const auto& c : copies) EXPECT_GT(c.median_gbps, 0);
  const auto l = bench::gpu::launch_latency(0, 100, 3);
  EXPECT_GT(l.plain_us, 0);
  EXPECT_GT(l.graph_us, 0);
  EXPECT_GT(l.graph_event_us, 0);  // the graph with an event record after each kernel (validated inside)
  EXPECT_GT(l.graph_stamp_us, 0);  // and with a clock stamp after each (validated inside)
  // The profiler's resolution: a clock that moved, and finely enough to time a 10 us kernel.
  EXPECT_GT(l.clock_tick_ns, 0);
  EXPECT_LT(l.clock_tick_ns, 2000);
  const auto bw = bench::gpu::device_bandwidth(0, kStreamBytes, 3);
  ASSERT_EQ(bw.size(), 3u);
  for (const auto& b : bw) EXPECT_GT(b.median_gbps, kMinGbps) << b.kernel;
  const auto gemms = bench::gpu::gemm(0, {256}, 2);  // validates every precision's results itself
  ASSERT_GE(gemms.size(), 4u);                     // fp32, tf32, bf16, fp16 (and fp8 on Hopper)
  for (const auto& g : gemms) {
#ifdef DLPERF_CUDA_EMULATION
    if (g.precision == "fp8") {  // the stand-in has none: the point says so, the others are measured
      EXPECT_NE(g.failed.find("no fp8"), std::string::npos) << g.failed;
      continue;
    }
#endif
    EXPECT_TRUE(g.failed.empty()) << g.precision << ": " << g.failed;
    EXPECT_GT(g.median_tflops, 0) << g.precision;
  }
  const auto convs = bench::gpu::conv(0, {"small"}, {3, 32, 32}, 8, 2);  // validates forward outputs itself
  ASSERT_GE(convs.size(), 3u);
  for (const auto& c : convs) {
    EXPECT_TRUE(c.failed.empty()) << c.layer << " " << c.precision << " " << c.layout << ": " << c.failed;
    EXPECT_GT(c.backward_filter_tflops, 0) << c.layer << " " << c.precision;
    EXPECT_GE(c.rotated_sets, 1);  // the input and output gradient cycle through copies spanning 2x the L2
  }
  // small's conv1 (3 channels to 16) again through the own kernels, in fp32 and in bf16 per layout:
  // timed and checked as cuDNN's are, with no input-gradient pass of their own.
  const auto own = std::count_if(convs.begin(), convs.end(), [](const auto& c) {
    const bool is_own = c.algorithms.rfind("own kernels", 0) == 0;
    if (is_own) {
      EXPECT_EQ(c.backward_data_tflops, 0) << c.precision << " " << c.layout;
      EXPECT_GT(c.forward_tflops, 0) << c.precision << " " << c.layout;
    }
    return is_own && c.layer == "conv1";
  });
  EXPECT_EQ(own, std::count_if(convs.begin(), convs.end(), [](const auto& c) {
              return c.layer == "conv1" && c.precision != "tf32" && c.algorithms.rfind("own kernels", 0) != 0;
            }));
  EXPECT_GE(own, 1);
  EXPECT_EQ(bench::gpu::to_json(gemms).dump().find("\"failed\"") != std::string::npos,
            std::any_of(gemms.begin(), gemms.end(), [](const auto& g) { return !g.failed.empty(); }));
  int gpus = 0;
  std::string why;
  const auto ar = bench::gpu::nccl_allreduce(4e6, 2, gpus, why);  // validates the sums itself
  if (ar.empty()) {
    EXPECT_FALSE(why.empty());
  } else {
    EXPECT_EQ(gpus, cuda::device_count());
    for (const auto& p : ar) EXPECT_GT(p.algbw_gbps, 0);
  }
  const auto info = cuda::gpu_info(0);
  EXPECT_GT(info.sm_count, 0);
  EXPECT_GT(info.memory_bytes, 1e9);
}


TEST(KERNEL_SUITE, LabMeasuresTheGpuRows) {
  REQUIRE_GPU();
  TempDir dir;
  lab::LabConfig c;
  c.experiments = {"device", "precision"};
  c.data = "synthetic:1x12x12:192";
  c.out = dir.path.string();
  c.base_model = "small";
  c.base_batch = 32;
  c.epochs = 1;
  c.train_limit = c.test_limit = 0;
  c.quiet = true;
  c.progress = false;
  const auto exps = lab::run_lab(c);
  ASSERT_EQ(exps.size(), 3u);  // and last the planner against the runs
  // plan: a row per run; the CPU runs' peaks to the byte; a GPU run planned from the catalog's
  // datasheet ("... on h100-sxm"), or, for a GPU the catalog lacks (the emulation), missing with why.
  const auto& planned = exps[2];
  ASSERT_EQ(planned.name, "plan");
  EXPECT_GE(planned.rows.size(), 6u);
  for (const auto& r : planned.rows) {
    SCOPED_TRACE(r.dump());
    if (r["status"] == "missing") {
      EXPECT_NE(r["note"].get<std::string>().find("catalog"), std::string::npos);
      continue;
    }
    EXPECT_EQ(r["status"], "measured");
    EXPECT_GT(r["step_ratio"].get<double>(), 0);
    if (r["run"].get<std::string>().find(" on ") == std::string::npos) {
      EXPECT_EQ(r["peak_error_bytes"].get<double>(), 0);
    }
  }

  // device: a cpu and a cuda row per workload (and the tiny ones' on one CPU thread where there
  // are more), all measured, the GPU's speed-up against the CPU.
  const auto& device = exps[0];
  ASSERT_EQ(device.name, "device");
  ASSERT_EQ(c.tiny_models.size(), 2u);
  ASSERT_EQ(device.rows.size(), hw::usable_cpus() > 1 ? 8u : 6u);
  int cuda_rows = 0;
  for (const auto& r : device.rows) {
    SCOPED_TRACE(r.dump());
    EXPECT_EQ(r["status"], "measured");
    EXPECT_GT(r["mflops_per_step"].get<double>(), 0);
    if (r["device"] != "cuda") {
      EXPECT_TRUE(r["kernels_per_step"].is_null());
      continue;
    }
    ++cuda_rows;
    EXPECT_GT(r["speedup_vs_cpu"].get<double>(), 0);
    const json rec = json::parse(std::ifstream(r["record"].get<std::string>()));
    EXPECT_EQ(rec["config"]["device_used"], "cuda:0");
    // The kernels of the captured step, which the tiny workload's observation reads.
    if (rec["gpu_step"]["cuda_graph"].get<bool>()) {
      EXPECT_EQ(r["kernels_per_step"], rec["gpu_step"]["graph_nodes"]["kernels"]);
      EXPECT_GT(r["kernels_per_step"].get<double>(), 0);
    }
  }
  EXPECT_EQ(cuda_rows, 3);

  // precision: all four run on the GPU; fp16 reports its loss-scale skips (a number, maybe 0).
  const auto& precision = exps[1];
  ASSERT_EQ(precision.name, "precision");
  ASSERT_EQ(precision.rows.size(), 4u);
  for (const auto& r : precision.rows) {
    SCOPED_TRACE(r.dump());
    EXPECT_EQ(r["status"], "measured");
    EXPECT_EQ(r["device"], "cuda");
    const json rec = json::parse(std::ifstream(r["record"].get<std::string>()));
    EXPECT_EQ(rec["config"]["precision"], r["precision"]);
    if (r["precision"] == "fp16") {
      EXPECT_TRUE(r["loss_scale_skips"].is_number());
    }
  }
  EXPECT_FALSE(precision.observations.empty());

  // The report names the GPU, and says the lab ran --full (the default with a GPU).
  const json j = json::parse(std::ifstream(dir.path / "lab.json"));
  EXPECT_EQ(j["mode"], "full");
  // The time estimate covers the CPU and GPU runs: the GPU's from the catalog's datasheet, or left
  // out for a GPU the catalog lacks (the emulation); every predicted run finished.
  const json& estimate = j["planned"];
  EXPECT_GE(estimate["runs"].get<int>(), 6);
  EXPECT_EQ(estimate["finished_runs"].get<int>() + estimate["unpredicted_runs"].get<int>(), estimate["runs"].get<int>());
  EXPECT_GT(estimate["finished_planned_seconds"].get<double>(), 0);
  const json& gpu = j["machine"]["gpu"];
  EXPECT_TRUE(gpu.value("present", false)) << gpu.dump();
  const std::string name = cuda::gpu_info(0).name;
  EXPECT_EQ(gpu.value("name", ""), name);
  std::stringstream readme;
  readme << std::ifstream(dir.path / "README.md").rdbuf();
  EXPECT_NE(readme.str().find("- **GPU:** " + name + " ("), std::string::npos);
  EXPECT_NE(readme.str().find("dlperf lab --full"), std::string::npos);
}

// bench roofline on the GPU: every layer pass with FLOPs (forward, backward) is a
// point; the roof is the GPU's ceiling for the precision, measured by bench all when the machine
// profile has this GPU, with the other measured precisions beside it.
TEST(KERNEL_SUITE, RooflineOfAGpuStep) {
  REQUIRE_GPU();
  TempDir dir;
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path);  // runs/machine-profile.json is read from here
  bench::RooflineRequest req;
  req.model = "small", req.data = "synthetic:1x12x12:512", req.batch = 32, req.steps = 3, req.device = "cuda";
  const bench::Roofline plain = bench::measure_roofline(req);
  EXPECT_EQ(plain.device, "cuda:0");
  EXPECT_EQ(plain.model, "small");
  EXPECT_EQ(plain.processor, cuda::gpu_info(0).name);
  ASSERT_FALSE(plain.peaks.empty());
  EXPECT_GT(plain.peaks[0].gflops, 0);
  EXPECT_EQ(plain.ceilings_source.find("measured"), std::string::npos) << plain.ceilings_source;  // no profile yet
  std::set<std::string> conv_passes;
  for (const auto& p : plain.points) {
    EXPECT_GT(p.gflops(), 0) << p.layer;
    if (p.layer == "conv1") conv_passes.insert(p.pass);
  }
  EXPECT_EQ(conv_passes, (std::set<std::string>{"forward", "backward-weight"}));  // the model input's conv: no backward-data
  // A GPU's note is the profiler's (its steps' spread), never the CPU path's host-load sentence.
  EXPECT_TRUE(plain.note.empty() || plain.note.rfind("Unsteady steps:", 0) == 0) << plain.note;

  const auto g = bench::gpu_ceilings_from_bench(plain.processor, {{{"precision", "fp32"}, {"median_tflops", 12.5}},
                                                                  {{"precision", "bf16"}, {"median_tflops", 99.0}}},
                                                {{{"kernel", "read"}, {"median_gbps", 1234.0}}});
  bench::write_machine_profile({{"gpus", {bench::to_json(g)}}});
  const bench::Roofline measured = bench::measure_roofline(req);
  std::filesystem::current_path(cwd);
  EXPECT_DOUBLE_EQ(measured.peaks[0].gflops, 12500.0);
  EXPECT_EQ(measured.peaks[0].label, "fp32 GEMM (measured)");
  // Before bench all, the roof is the datasheet's where the catalog knows the GPU (an H100, say),
  // else the clock's estimate (the emulated GPU is in no catalog).
  const bool in_catalog = !plan::catalog_id_for_gpu(plain.processor).empty();
  EXPECT_EQ(plain.peaks[0].label, in_catalog ? "fp32 (datasheet)" : "fp32 (estimated from the clock)") << plain.processor;
  EXPECT_DOUBLE_EQ(measured.bandwidth_gbps.value("HBM", 0.0), 1234.0);
  EXPECT_NE(measured.ceilings_source.find("measured by 'dlperf bench all'"), std::string::npos) << measured.ceilings_source;
  bool bf16 = false;
  for (const auto& p : measured.peaks) bf16 |= p.label == "bf16 GEMM (measured)" && p.gflops == 99000.0;
  EXPECT_TRUE(bf16);
  const auto files = bench::write_roofline(measured.points, measured.peaks, measured.bandwidth_gbps, (dir.path / "r").string(), "t", false);
  EXPECT_EQ(files.size(), 2u);
}

}  // namespace
}  // namespace dlperf::test
#endif
