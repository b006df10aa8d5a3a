// The commands beyond `dlperf train` on a machine with a GPU: dlperf lab (the device
// experiment's cuda rows, the precision experiment on the GPU, the report's GPU line, --full as
// the default) and dlperf bench roofline (a GPU step's layer passes against the GPU's ceilings).
// Built twice (cuda_kernel_util.h): on a GPU in dlperf_tests (suite Cuda), and in
// dlperf_emu_tests (suite CudaEmu), where their GPU runs go through the emulated executor
// (test_cuda_network.cpp says how), so these paths are checked before a GPU session spends its
// minutes on them.
#include <gtest/gtest.h>

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
#include "bench/machine_profile.h"
#include "bench/roofline.h"
#include "lab/lab.h"

namespace dlperf::test {
namespace {

using nlohmann::json;

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
  ASSERT_EQ(exps.size(), 2u);

  // device: a cpu and a cuda row per workload, all measured, the GPU's speed-up against the CPU.
  const auto& device = exps[0];
  ASSERT_EQ(device.name, "device");
  ASSERT_EQ(device.rows.size(), 4u);
  int cuda_rows = 0;
  for (const auto& r : device.rows) {
    SCOPED_TRACE(r.dump());
    EXPECT_EQ(r["status"], "measured");
    if (r["device"] != "cuda") continue;
    ++cuda_rows;
    EXPECT_GT(r["speedup_vs_cpu"].get<double>(), 0);
    const json rec = json::parse(std::ifstream(r["record"].get<std::string>()));
    EXPECT_EQ(rec["config"]["device_used"], "cuda:0");
  }
  EXPECT_EQ(cuda_rows, 2);

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
  EXPECT_EQ(conv_passes, (std::set<std::string>{"forward", "backward"}));

  const auto g = bench::gpu_ceilings_from_bench(plain.processor, {{{"precision", "fp32"}, {"median_tflops", 12.5}},
                                                                  {{"precision", "bf16"}, {"median_tflops", 99.0}}},
                                                {{{"kernel", "read"}, {"median_gbps", 1234.0}}});
  bench::write_machine_profile({{"gpus", {bench::to_json(g)}}});
  const bench::Roofline measured = bench::measure_roofline(req);
  std::filesystem::current_path(cwd);
  EXPECT_DOUBLE_EQ(measured.peaks[0].gflops, 12500.0);
  EXPECT_EQ(measured.peaks[0].label, "fp32 GEMM (measured)");
  EXPECT_EQ(plain.peaks[0].label, "fp32 (estimated from the clock)");  // the emulated GPU is in no catalog
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
