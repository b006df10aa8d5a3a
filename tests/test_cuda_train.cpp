// dlperf train on the GPU (src/train/gpu_trainer.cpp): learning, mixed precision, tf32,
// checkpoints that resume on either device, feeds and graphs, and dlperf profile's device
// timing. Built twice (cuda_kernel_util.h): on a GPU in dlperf_tests (suite Cuda), and in
// dlperf_emu_tests (suite CudaEmu), where the trainer runs on the CPU around the emulated
// executor (test_cuda_network.cpp says how).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "cuda_kernel_util.h"
#include "test_util.h"

#ifdef DLPERF_CUDA_EMULATION
#include "emu/emu_stream.h"
#endif
#if defined(DLPERF_HAVE_CUDA) || defined(DLPERF_CUDA_EMULATION)
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/cuda/runtime.h"
#include "core/interrupt.h"
#include "nn/graph.h"
#include "plan/catalog.h"
#include "plan/gpu_step.h"
#include "plan/memory.h"
#include "profile/recorder.h"
#include "train/trainer.h"

namespace dlperf::test {
namespace {

// dlperf train on the GPU: learns the synthetic task as the CPU does, records the device.
TEST(KERNEL_SUITE, TrainingOnTheGpuLearns) {
  REQUIRE_GPU();
  TempDir dir;
  train::TrainConfig c;
  c.model = "small";
  c.data = "synthetic:1x12x12:1024";
  c.device = "cuda";
  c.batch = 32;
  c.epochs = 3;
  c.runs_dir = dir.path.string();
  c.quiet = true;
  c.progress = false;
  const auto r = train::train(c);
  ASSERT_EQ(r.epochs.size(), 3u);
  EXPECT_GE(r.epochs.back().test_acc, 0.9);
  EXPECT_LT(r.epochs.back().train_loss, r.epochs.front().train_loss);
  EXPECT_EQ(r.record["config"]["device_used"], "cuda:0");
  EXPECT_GT(r.record["summary"]["peak_bytes"].get<double>(), 0);
  // The board's energy each epoch, from NVML's counter: the driver's on a GPU; under the
  // emulation, ctest puts the stand-in (tests/fake_nvml.cpp: 250 W, an update every 20 ms) first
  // on LD_LIBRARY_PATH. Without either the record says why there is none.
  const std::string source = r.record["energy_source"];
  if (source.find("NVML board energy counter") == std::string::npos) {
    EXPECT_TRUE(source.find("NVML") != std::string::npos) << source;
    return;
  }
  double joules = 0;
  for (const auto& e : r.record["epochs"]) {
    ASSERT_TRUE(e["energy_j"].is_number()) << e.dump();
    ASSERT_TRUE(e["energy_j_range"].is_array()) << e.dump();
    const double j = e["energy_j"], low = e["energy_j_range"][0], high = e["energy_j_range"][1];
    EXPECT_GT(j, 0);
    EXPECT_LE(low, j);
    EXPECT_GE(high, j);
    joules += j;
  }
  EXPECT_NEAR(r.record["summary"]["energy_j"].get<double>(), joules, 1e-9 * joules);
#ifdef DLPERF_CUDA_EMULATION
  // The stand-in's 250 W over the training loops, as their updates allow.
  const double train_s = r.record["summary"]["train_s"];
  EXPECT_LE(r.record["summary"]["energy_j_range"][0].get<double>(), 250 * train_s * 1.05);
  EXPECT_GE(r.record["summary"]["energy_j_range"][1].get<double>(), 250 * train_s * 0.95);
  EXPECT_NE(source.find("moved every 20 ms"), std::string::npos) << source;
#endif
}

TEST(KERNEL_SUITE, CheckpointsResumeOnTheGpuAndOnTheCpu) {
  REQUIRE_GPU();
  TempDir dir;
  for (const char* optimizer : {"sgd", "adamw"}) {
    SCOPED_TRACE(optimizer);
    train::TrainConfig c = gpu_run("small", "synthetic:1x12x12:512", 32, 2);
    c.optimizer.name = optimizer;
    c.lr = std::string(optimizer) == "adamw" ? 0.003 : 0.05;
    c.graphs = false;  // eager steps on both sides: the same kernels in the same order
    c.small_conv = "own";  // not auto, whose timing may choose cuDNN's in one run and the own kernels in the next
    const auto whole = train::train(c);
    train::TrainConfig first = c;
    first.checkpoint_dir = (dir.path / optimizer).string();
    first.stop_after_epochs = 1;
    train::train(first);
    train::TrainConfig rest = first;
    rest.stop_after_epochs = 0;
    rest.resume = true;
    const auto resumed = train::train(rest);
    ASSERT_EQ(resumed.epochs.size(), 2u);
    ASSERT_EQ(resumed.weights.size(), whole.weights.size());
    for (size_t i = 0; i < whole.weights.size(); ++i)
      ASSERT_NEAR(resumed.weights[i], whole.weights[i], 1e-4 * (1 + std::fabs(whole.weights[i]))) << i;
    train::TrainConfig on_cpu = first;
    on_cpu.device = "cpu";
    on_cpu.graphs = true;  // the defaults: --no-graphs and --small-conv are GPU flags, refused on the CPU
    on_cpu.small_conv = train::TrainConfig{}.small_conv;
    on_cpu.stop_after_epochs = 0;
    on_cpu.resume = true;
    const auto cpu = train::train(on_cpu);  // must load without complaint, and go on learning
    EXPECT_EQ(cpu.epochs.size(), 2u);
    EXPECT_NEAR(cpu.epochs.back().test_acc, resumed.epochs.back().test_acc, 0.1);
  }
}

// Ctrl-C on the GPU: the run stops at the next step, its record keeps the finished epoch, and
// resumed from the checkpoint it ends as the run nobody stopped.
TEST(KERNEL_SUITE, CtrlCStopsAGpuRunAndResumeEndsItAsIfUnstopped) {
  REQUIRE_GPU();
  const SigintAsAtATerminal sigint;
  TempDir dir;
  train::TrainConfig c = gpu_run("small", "synthetic:1x12x12:256", 32, 2);
  c.graphs = false;  // eager steps on both sides: the same kernels in the same order
  c.small_conv = "own";  // not auto, whose timing may choose cuDNN's in one run and the own kernels in the next
  const auto whole = train::train(c);
  c.checkpoint_dir = (dir.path / "ck").string();
  c.runs_dir = (dir.path / "runs").string();
  c.sigint_at_step = 256 / 32 + 3;  // in epoch 2
  const std::string stopped = error_of([&] { train::train(c); });
  EXPECT_NE(stopped.find("stopped by SIGINT (Ctrl-C) in epoch 2 of 2: the run record"), std::string::npos) << stopped;
  EXPECT_NE(stopped.find("keeps the 1 finished epoch"), std::string::npos) << stopped;
  const auto record = std::filesystem::directory_iterator(c.runs_dir)->path();
  const nlohmann::json rec = nlohmann::json::parse(std::ifstream(record));
  EXPECT_EQ(rec["summary"]["epochs_run"], 1);
  EXPECT_EQ(rec["stopped"]["in_epoch"], 2);
  c.sigint_at_step = -1;
  c.resume = true;
  const auto resumed = train::train(c);
  ASSERT_EQ(resumed.weights.size(), whole.weights.size());
  for (size_t i = 0; i < whole.weights.size(); ++i)
    ASSERT_NEAR(resumed.weights[i], whole.weights[i], 1e-4 * (1 + std::fabs(whole.weights[i]))) << i;
}

// bf16 and fp16 train end to end (graphs, on-device data), fp16 reports its skipped steps.
TEST(KERNEL_SUITE, MixedPrecisionTrainingLearns) {
  REQUIRE_GPU();
  for (const char* precision : {"bf16", "fp16"}) {
    SCOPED_TRACE(precision);
    train::TrainConfig c = gpu_run("small", "synthetic:1x12x12:1024", 32, 3);
    c.precision = precision;
    c.data_on_device = true;
    const auto r = train::train(c);
    EXPECT_GE(r.epochs.back().test_acc, 0.9);
    EXPECT_LT(r.epochs.back().train_loss, r.epochs.front().train_loss);
    EXPECT_EQ(r.record["config"]["precision"], precision);
    EXPECT_EQ(r.record["summary"].contains("loss_scale_skips"), std::string(precision) == "fp16");
  }
}

// tf32 trains like fp32, to tf32's 10-bit mantissa.
TEST(KERNEL_SUITE, Tf32TrainingTracksFp32) {
  REQUIRE_GPU();
  train::TrainConfig c = gpu_run("small", "synthetic:1x12x12:1024", 32, 2);
  const auto fp32 = train::train(c);
  c.precision = "tf32";
  const auto tf32 = train::train(c);
  EXPECT_NEAR(tf32.epochs.back().train_loss, fp32.epochs.back().train_loss, 0.05 * (1 + fp32.epochs.back().train_loss));
  EXPECT_NEAR(tf32.epochs.back().test_acc, fp32.epochs.back().test_acc, 0.05);
  EXPECT_EQ(tf32.record["config"]["precision"], "tf32");
}


// A GPU run's peak device memory, as plan --against predicts it from the run's record: the
// executor's buffers, the trainer's feed and the convolutions' workspace the record keeps.
double planned_gpu_peak(const train::TrainConfig& c, const nlohmann::json& record) {
  const nlohmann::json& d = record["data"];
  const nn::Graph g = nn::build_graph(nn::load_model(c.model), {d["shape"][0], d["shape"][1], d["shape"][2]}, d["classes"], c.batch);
  const double conv = record["gpu_step"]["conv_workspace_bytes"].get<double>();
  return plan::gpu_engine_memory(g, c.optimizer.name, c.precision, c.layout).total() +
         plan::gpu_feed_bytes(g, {.data_on_device = c.data_on_device, .pin_memory = c.pin_memory,
                                  .train_images = d["train_images"].get<int64_t>(), .test_images = d["test_images"].get<int64_t>()}) +
         (conv > 0 ? double(CachingAllocator::block_bytes(size_t(conv))) : 0.0);
}

// The training options change how batches reach the GPU and how steps launch, never the result.
TEST(KERNEL_SUITE, FeedsAndGraphsTrainTheSameModel) {
  REQUIRE_GPU();
  train::TrainConfig c = gpu_run("small", "synthetic:1x12x12:1024", 32, 2);
  c.augment = true;
  std::vector<train::TrainResult> runs;
  for (int variant = 0; variant < 4; ++variant) {
    train::TrainConfig v = c;
    v.graphs = variant != 1;
    v.pin_memory = variant != 2;
    v.data_on_device = variant == 3;
    runs.push_back(train::train(v));
    // Byte for byte what the planner expects, whichever way the batches come.
    EXPECT_EQ(runs.back().record["summary"]["peak_bytes"].get<double>(), planned_gpu_peak(v, runs.back().record)) << variant;
  }
  for (size_t i = 1; i < runs.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(runs[i].epochs.size(), runs[0].epochs.size());
    const auto &a = runs[0].epochs.back(), &b = runs[i].epochs.back();
    EXPECT_NEAR(b.train_loss, a.train_loss, 1e-3 * (1 + a.train_loss));
    EXPECT_NEAR(b.test_acc, a.test_acc, 0.01);
  }
  EXPECT_TRUE(runs[0].record["gpu_step"]["cuda_graph"].get<bool>()) << runs[0].record["gpu_step"].dump();
  EXPECT_FALSE(runs[1].record["gpu_step"]["cuda_graph"].get<bool>());
  EXPECT_EQ(runs[3].record["gpu_step"]["feed"], "data on the GPU");
  // Each convolution's algorithms, by layer (small has three).
  const nlohmann::json& algorithms = runs[0].record["gpu_step"]["conv_algorithms"];
  EXPECT_EQ(algorithms.size(), 3u) << algorithms.dump();
  EXPECT_FALSE(algorithms.value("conv1", "").empty()) << algorithms.dump();
  // The linear layers' cuBLASLt choices, where timing overturned the heuristic: an object by
  // layer, only of layers small has, each naming its passes.
  const nlohmann::json& gemms = runs[0].record["gpu_step"]["gemm_algorithms"];
  ASSERT_TRUE(gemms.is_object()) << runs[0].record["gpu_step"].dump();
  for (const auto& [layer, choice] : gemms.items()) {
    EXPECT_EQ(layer.rfind("fc", 0), 0u) << gemms.dump();
    EXPECT_NE(choice.get<std::string>().find("heuristic's "), std::string::npos) << gemms.dump();
  }
  // bf16 NHWC: the on-device loader writes the stored input (bf16, channels last) itself, the
  // copy feeds hand over fp32 NCHW that the network casts; the same values either way.
  train::TrainConfig h = gpu_run("small", "synthetic:3x12x12:512", 32, 2);
  h.precision = "bf16";
  std::vector<train::TrainResult> half_runs;
  for (bool on_device : {false, true}) {
    h.data_on_device = on_device;
    half_runs.push_back(train::train(h));
    EXPECT_EQ(half_runs.back().record["summary"]["peak_bytes"].get<double>(), planned_gpu_peak(h, half_runs.back().record)) << on_device;
  }
  EXPECT_EQ(half_runs[1].record["gpu_step"]["layout"], "nhwc");
  // Three input channels: conv1's weight gradient runs in NCHW (cuda::weight_grad_in_nchw: under
  // 8 channels); conv2 reads 16 and stays NHWC.
  const nlohmann::json& half_algorithms = half_runs[1].record["gpu_step"]["conv_algorithms"];
  EXPECT_NE(half_algorithms.value("conv1", "").find("NCHW"), std::string::npos) << half_algorithms.dump();
  EXPECT_EQ(half_algorithms.value("conv2", "").find("NCHW"), std::string::npos) << half_algorithms.dump();
  EXPECT_NEAR(half_runs[1].epochs.back().train_loss, half_runs[0].epochs.back().train_loss,
              1e-3 * (1 + half_runs[0].epochs.back().train_loss));
}

// dlperf profile on a GPU: every layer's forward and backward pass timed on the device (the GPU
// track), FLOPs equal to the cost model's, shares adding up, and the GPU track in the trace.
TEST(KERNEL_SUITE, ProfileTimesEveryLayerOnTheDevice) {
  REQUIRE_GPU();
  TempDir dir;
  // With graphs the recorded steps replay the step captured with its event records; without,
  // they run eagerly. Both time every layer.
  for (bool graphs : {true, false}) {
    SCOPED_TRACE(graphs ? "graphs" : "eager");
    train::TrainConfig c = gpu_run("medium", "synthetic:1x12x12:512", 16, 1);
    c.graphs = graphs;
    c.profile = c.profile_only = true;
    c.profile_skip = 3;
    c.profile_steps = 5;
    c.profile_out = (dir.path / (graphs ? "prof-graph" : "prof-eager")).string();
#ifdef DLPERF_CUDA_EMULATION
    const int lost_before = emu::graphs_losing_priorities();
#endif
    const auto r = train::train(c);
    const std::string how = r.record["gpu_step"]["profiled_steps"];
    EXPECT_EQ(how.rfind(graphs ? "CUDA graph" : "eager", 0), 0u) << how;
#ifdef DLPERF_CUDA_EMULATION
    // The stamps, captured from a stream of the highest priority, keep it in the graph.
    EXPECT_EQ(emu::graphs_losing_priorities(), lost_before);
#endif
    // Stopped after its steps: accuracy not measured (not 0%), the GPU memory it measured kept.
    EXPECT_TRUE(r.record["summary"]["final_test_acc"].is_null()) << r.record["summary"].dump();
    EXPECT_GT(r.record["summary"]["peak_bytes"].get<double>(), 0);
    const nn::Graph g = nn::build_graph(nn::load_model("medium"), {1, 12, 12}, 10, 16);
    const nlohmann::json& p = r.profile;
    EXPECT_EQ(p["step"]["steps"], 5);
    EXPECT_GT(p["step"]["device_clock_tick_ns"].get<double>(), 0);  // the stamps' resolution, measured
    EXPECT_LT(p["step"]["device_clock_tick_ns"].get<double>(), 2000);
    EXPECT_NEAR(p["flops_per_step"].get<double>(), g.forward_flops() + g.backward_flops(), 1e-6 * g.forward_flops());
    // On a GPU the catalog knows, the plan's step is there to read the profile against (the
    // emulation's "GPU" is in no catalog).
    if (plan::catalog_id_for_gpu(cuda::gpus_json().at(0).value("name", "")).empty())
      EXPECT_TRUE(p["step"]["planned_s"].is_null()) << p["step"].dump();
    else
      EXPECT_GT(p["step"]["planned_s"].get<double>(), 0) << p["step"].dump();
    double share = 0;
    std::set<std::string> layers;
    for (const auto& row : p["rows"]) {
      EXPECT_LE(row["self_s"].get<double>(), row["total_s"].get<double>() + 1e-12) << row.dump();
      share += row["share"].get<double>();
      if (row["phase"] == "forward") layers.insert(row["name"].get<std::string>());
    }
    EXPECT_NEAR(share, 1.0, 0.01);
    EXPECT_TRUE(layers.count("conv1") && layers.count("fc1+relu4")) << p["rows"].dump();  // the relu runs inside fc1
    // A convolution's two backward passes are rows of their own, each with the cost model's FLOPs
    // (conv1 reads the model input: no backward-data).
    std::map<std::string, std::map<std::string, double>> flops;  // layer -> phase -> FLOPs a call
    for (const auto& row : p["rows"])
      flops[row["name"].get<std::string>()][row["phase"].get<std::string>()] = row["flops"].get<double>() / row["calls"].get<double>();
    EXPECT_EQ(flops["conv1"].count("backward-weight"), 1u);
    EXPECT_EQ(flops["conv1"].count("backward-data"), 0u);
    for (const auto& n : g.nodes)
      if (n.name == "conv2") {
        EXPECT_DOUBLE_EQ(flops["conv2"]["backward-weight"], n.cost.backward_weight.flops);
        EXPECT_DOUBLE_EQ(flops["conv2"]["backward-data"], n.cost.backward_data.flops);
        EXPECT_EQ(flops["conv2"].count("backward"), 0u);
      }
    EXPECT_GT(p["step"]["forward_s"].get<double>(), 0);
    EXPECT_GT(p["step"]["backward_s"].get<double>(), 0);
    EXPECT_GT(p["step"]["optimizer_s"].get<double>(), 0);
    // With a graph the launch count is the graph's own, at least one kernel a layer pass.
    EXPECT_EQ(p["step"]["launches_source"] == "counted in the step's CUDA graph", graphs) << p["step"].dump();
    EXPECT_GE(p["step"]["launches_per_step"].get<double>(), double(g.nodes.size())) << p["step"].dump();
    std::ifstream f(r.trace_path);
    const auto trace = nlohmann::json::parse(f);
    bool gpu_track = false;
    for (const auto& e : trace["traceEvents"])
      if (e["ph"] == "M" && e["args"].value("name", "") == "GPU (device clock)") gpu_track = true;
    EXPECT_TRUE(gpu_track);
  }
}

// dlperf profile on the GPU of the model `spec` (a spec's JSON, written into `dir`): 4 steps of
// batch 16 on 3x12x12 synthetic images recorded after 2. With the graph it ran and the recorded
// steps; the table's FLOPs a step are the graph's.
struct SpecProfile {
  nn::Graph graph;
  nlohmann::json profile;
  double steps = 0;
};
SpecProfile profile_spec(const TempDir& dir, const nlohmann::json& spec) {
  const auto path = dir.path / "model.json";
  std::ofstream(path) << spec.dump();
  train::TrainConfig c = gpu_run(path.string(), "synthetic:3x12x12:256", 16, 1);
  c.profile = c.profile_only = true;
  c.profile_skip = 2;
  c.profile_steps = 4;
  c.profile_out = (dir.path / "prof").string();
  SpecProfile out{nn::build_graph(nn::parse_model_spec(spec, "spec"), {3, 12, 12}, 10, 16), train::train(c).profile, 0};
  out.steps = out.profile["step"]["steps"].get<double>();
  const nn::Graph& g = out.graph;
  EXPECT_NEAR(out.profile["flops_per_step"].get<double>(), g.forward_flops() + g.backward_flops(), 1e-6 * g.forward_flops());
  return out;
}

// A value several layers read gets its gradient from each. Backward runs in reverse: the last
// reader writes the gradient, and an earlier add adds its own in a pass of its own, a
// `gradient-sum` row with the bytes it moves, as on the CPU; an earlier convolution adds its own
// in its backward-data pass (cuDNN's beta = 1), whose row then counts the read of the gradient
// it adds to. corner_case_model's r0 is read by a conv and two adds: the last add writes its
// gradient, s1 sums its own into it, and the conv adds its own.
TEST(KERNEL_SUITE, GradientSumsAreTheirOwnRowsOnTheDevice) {
  REQUIRE_GPU();
  TempDir dir;
  const SpecProfile r = profile_spec(dir, corner_case_model());
  const nn::Graph& g = r.graph;
  const nlohmann::json& p = r.profile;
  const double steps = r.steps;
  ASSERT_EQ(g.nodes[2].name, "r0");
  ASSERT_EQ(g.nodes[3].kind, ops::OpKind::conv2d);
  const double r0_bytes = 4.0 * double(numel(g.nodes[2].out_dims));
  std::map<std::string, std::pair<double, double>> sums;  // layer -> calls, bytes a step
  double conv_data_bytes = -1;                            // the conv's backward-data pass, a step
  for (const auto& row : p["rows"]) {
    const double bytes = row["bytes"].get<double>() / steps;
    if (row["phase"] == "gradient-sum") sums[row["name"].get<std::string>()] = {row["calls"].get<double>() / steps, bytes};
    if (row["phase"] == "backward-data" && row["name"] == g.nodes[3].name) conv_data_bytes = bytes;
  }
  ASSERT_EQ(sums.size(), 1u) << p["rows"].dump();
  ASSERT_TRUE(sums.count("s1")) << p["rows"].dump();
  EXPECT_EQ(sums["s1"].first, 1);
  EXPECT_DOUBLE_EQ(sums["s1"].second, 3 * r0_bytes);
  EXPECT_TRUE(plan::conv_adds_to_input_gradient_on_gpu(g, 3, cuda::Layout::nchw));
  EXPECT_DOUBLE_EQ(conv_data_bytes, g.nodes[3].cost_at(4).backward_data.bytes + r0_bytes) << p["rows"].dump();
}

// A relu after a residual add that feeds nothing else runs inside the add on the GPU: one row
// "sum+r1" a pass, whose backward hands the masked gradient to both inputs itself (no gradient
// sum of its own), with the FLOPs of both nodes; no row of the relu's.
TEST(KERNEL_SUITE, AReluAfterAResidualAddRunsInsideIt) {
  REQUIRE_GPU();
  TempDir dir;
  const SpecProfile r = profile_spec(dir, residual_cnn());
  const nlohmann::json& p = r.profile;
  const double steps = r.steps;
  std::map<std::string, double> calls;  // phase of "sum+r1" -> calls a step
  for (const auto& row : p["rows"]) {
    EXPECT_NE(row["name"], "r1") << row.dump();
    if (row["name"] == "sum+r1") calls[row["phase"].get<std::string>()] = row["calls"].get<double>() / steps;
  }
  EXPECT_EQ(calls["forward"], 1) << p["rows"].dump();
  EXPECT_EQ(calls["backward"], 1) << p["rows"].dump();
  EXPECT_EQ(calls.count("gradient-sum"), 0u) << p["rows"].dump();
}

// The planner predicts a GPU step from the passes it expects the executor to run
// (plan::gpu_step_passes), and the profile costs its GPU rows from the same list: so what this
// checks is that the executor runs exactly those passes, each as often a step as planned (and
// that the k-th span of a layer's phase got the k-th pass's cost). In fp32 (NCHW) and bf16 (NHWC: `large`'s flatten, read by a dropout, moves its
// maps), with a residual add and its relu, with gradient sums, an adding convolution and a plain
// add that copies the gradient to each input, and with a linear layer adding its gradient through
// a flatten into one a later convolution wrote.
TEST(KERNEL_SUITE, ThePlannersPassesAreTheProfilesRows) {
  REQUIRE_GPU();
  TempDir dir;
  struct Case {
    std::string model, precision;
    nlohmann::json spec;
  };
  const Case cases[] = {{"medium", "fp32", {}}, {"large", "bf16", {}}, {"residual", "fp32", residual_cnn()},
                        {"corner", "fp32", corner_case_model()}, {"branch", "bf16", flatten_branch_model()}};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.model + " " + k.precision);
    std::string model = k.model;
    if (!k.spec.is_null()) {
      model = (dir.path / (k.model + ".json")).string();
      std::ofstream(model) << k.spec.dump();
    }
    train::TrainConfig c = gpu_run(model, "synthetic:3x12x12:256", 16, 1);
    c.precision = k.precision;
    c.profile = c.profile_only = true;
    c.profile_skip = 2;
    c.profile_steps = 3;
    c.profile_out = (dir.path / ("prof-" + k.model)).string();
    const nlohmann::json p = train::train(c).profile;
    const double steps = p["step"]["steps"].get<double>();
    const nn::Graph g = nn::build_graph(k.spec.is_null() ? nn::load_model(k.model) : nn::parse_model_spec(k.spec, "spec"), {3, 12, 12}, 10, 16);
    // The profile's rows: (layer, phase) -> calls a step, FLOPs and bytes a call.
    std::map<std::pair<std::string, std::string>, std::array<double, 3>> rows;
    for (const auto& row : p["rows"]) {
      if (row["phase"] == "step" || row["phase"] == "copy" || row["phase"] == "data") continue;
      const double calls = row["calls"].get<double>();
      rows[{row["name"], row["phase"]}] = {calls / steps, row["flops"].get<double>() / calls, row["bytes"].get<double>() / calls};
    }
    std::map<std::pair<std::string, std::string>, std::array<double, 3>> planned;
    for (const plan::GpuPass& pass : plan::gpu_step_passes(g, k.precision)) {
      auto& r = planned[{plan::gpu_layer_name(g, pass), pass.phase}];
      r[0] += 1, r[1] = pass.cost.flops, r[2] = pass.cost.bytes;
    }
    for (const auto& [key, row] : rows) {
      ASSERT_TRUE(planned.count(key)) << key.first << " " << key.second << ": a profile row the plan has no pass for";
      EXPECT_EQ(planned[key][0], row[0]) << key.first << " " << key.second;
      EXPECT_DOUBLE_EQ(planned[key][1], row[1]) << key.first << " " << key.second;
      EXPECT_DOUBLE_EQ(planned[key][2], row[2]) << key.first << " " << key.second;
    }
    for (const auto& [key, pass] : planned) EXPECT_TRUE(rows.count(key)) << key.first << " " << key.second << ": a planned pass the profile did not time";
  }
}

// Profiled steps run back to back on the GPU (their events are read two steps later, from two
// sets used in turn): on the GPU track each step follows the one before, holds all its spans,
// and every step has the same passes. With graphs and eagerly, with the data on the GPU and
// copied from the host; 7 steps, so the last read of each set is at the profile's end. With
// --profile-every 3 it records steps 0, 3 and 6 of the window, the steps between replaying the
// plain training graph: the recorded ones line up the same way.
TEST(KERNEL_SUITE, ProfiledStepsLineUpOnTheGpuTrack) {
  REQUIRE_GPU();
  TempDir dir;
  const nn::Graph g = nn::build_graph(nn::load_model("small"), {1, 12, 12}, 10, 32);
  for (int64_t every : {1, 3})
    for (bool graphs : {true, false})
      for (bool on_device : {true, false}) {
        SCOPED_TRACE(fmt::format("every {}, graphs {}, data on the GPU {}", every, graphs, on_device));
        train::TrainConfig c = gpu_run("small", "synthetic:1x12x12:512", 32, 1);  // 16 steps
        c.graphs = graphs;
        c.data_on_device = on_device;
        c.profile = c.profile_only = true;
        c.profile_skip = 2;
        c.profile_steps = 7;
        c.profile_every = every;
        c.profile_out = (dir.path / "prof").string();
        const auto r = train::train(c);
        const std::set<int64_t> recorded = every == 1 ? std::set<int64_t>{0, 1, 2, 3, 4, 5, 6} : std::set<int64_t>{0, 3, 6};
        EXPECT_EQ(r.profile["step"]["steps"], int64_t(recorded.size()));
        std::map<int64_t, std::vector<profile::Event>> steps;
        std::set<int64_t> host_steps;
        for (const auto& e : profile::Recorder::get().events()) {
          if (e.track == profile::kGpuTrack) steps[e.step].push_back(e);
          if (e.track == 0) host_steps.insert(e.step);
        }
        ASSERT_EQ(steps.size(), recorded.size());
        EXPECT_EQ(host_steps, recorded);
        double before = -1;
        size_t passes = 0;
        for (const auto& [k, events] : steps) {
          EXPECT_TRUE(recorded.count(k)) << k;
          SCOPED_TRACE(fmt::format("step {}", k));
          std::vector<const profile::Event*> whole;
          for (const auto& e : events)
            if (e.phase == profile::Phase::step) whole.push_back(&e);
          ASSERT_EQ(whole.size(), 1u);
          const profile::Event& step = *whole[0];
          EXPECT_GE(step.t0, before);
          before = step.t1;
          std::vector<const profile::Event*> spans;
          for (const auto& e : events) {
            if (&e == &step) continue;
            EXPECT_LE(step.t0, e.t0) << e.name;
            EXPECT_LE(e.t0, e.t1) << e.name;
            EXPECT_LE(e.t1, step.t1) << e.name;
            if (e.phase != profile::Phase::data) spans.push_back(&e);
          }
          if (k == 0) passes = spans.size();
          EXPECT_EQ(spans.size(), passes);
          // Nothing runs between spans, so each begins at the previous one's end mark (one event
          // record a boundary): the spans tile the step from the first pass to the update.
          std::stable_sort(spans.begin(), spans.end(), [](auto* a, auto* b) { return a->t0 < b->t0; });
          for (size_t i = 1; i < spans.size(); ++i) EXPECT_EQ(spans[i]->t0, spans[i - 1]->t1) << spans[i]->name;
        }
        EXPECT_GT(passes, g.nodes.size());  // a forward and a backward pass a layer, the loss, the update
      }
}

// The window counts the run's steps: it may start in the second epoch, past the first epoch's
// eager step and graph capture, and record to that epoch's end (what the overhead benchmark does).
TEST(KERNEL_SUITE, ProfileWindowInALaterEpoch) {
  REQUIRE_GPU();
  TempDir dir;
  train::TrainConfig c = gpu_run("small", "synthetic:1x12x12:256", 32, 3);  // 8 steps an epoch
  c.profile = c.profile_only = true;
  c.profile_skip = 8 + 2;
  c.profile_steps = 0;
  c.profile_out = (dir.path / "prof").string();
  const auto r = train::train(c);
  EXPECT_EQ(r.epochs.size(), 2u);
  EXPECT_EQ(r.profile["step"]["steps"], 8 - 2);
  EXPECT_EQ(r.record["gpu_step"]["profiled_steps"].get<std::string>().rfind("CUDA graph", 0), 0u) << r.record["gpu_step"].dump();
  c.profile_skip = 3 * 8;
  const std::string e = error_of([&] { train::train(c); });
  EXPECT_NE(e.find("this run trains 24 steps (3 epochs of 8)"), std::string::npos) << e;
}

#ifdef DLPERF_CUDA_EMULATION
// Where a stream cannot be captured at all (the emulated runtime refuses when told to), the run
// goes on with eager steps and says why, rather than failing.
TEST(KERNEL_SUITE, StepsRunEagerlyWhereCaptureIsRefused) {
  ::setenv("DLPERF_EMU_NO_CAPTURE", "1", 1);
  train::TrainConfig c = gpu_run("small", "synthetic:1x12x12:256", 32, 1);
  const auto r = train::train(c);
  ::unsetenv("DLPERF_EMU_NO_CAPTURE");
  EXPECT_FALSE(r.record["gpu_step"]["cuda_graph"].get<bool>());
  EXPECT_NE(r.record["gpu_step"]["why_not_graph"].get<std::string>().find("capture"), std::string::npos)
      << r.record["gpu_step"].dump();
  EXPECT_EQ(r.epochs.size(), 1u);
}

// Where the check before starting passes but an allocation fails anyway (another process took
// the memory in between; the emulated runtime does so when told to), the run stops with the
// same clear message, not a bare allocator error, and leaves nothing allocated behind it.
TEST(KERNEL_SUITE, AnAllocationThatFailsAnywaySaysWhatFits) {
  ::setenv("DLPERF_EMU_ALLOC_LIMIT_MB", "64", 1);  // large at batch 64 needs about 280 MB
  const train::TrainConfig c = gpu_run("large", "synthetic:3x32x32:64", 64, 1);
  const std::string e = error_of([&] { train::train(c); });
  ::unsetenv("DLPERF_EMU_ALLOC_LIMIT_MB");
  EXPECT_NE(e.find("does not fit on GPU 0 (allocation failed)"), std::string::npos) << e;
  EXPECT_NE(e.find("--batch-size"), std::string::npos) << e;
  cuda::device_allocator(0).trim();
  EXPECT_EQ(cuda::device_allocator(0).stats().current_total, 0u) << "the failed run left device memory allocated";
  EXPECT_EQ(train::train(gpu_run("small", "synthetic:1x12x12:256", 32, 1)).epochs.size(), 1u);  // and the next run goes on
}
#endif

// A batch far beyond the GPU's memory is refused before training, with the batch that fits.
// `large` keeps about 4.3 MB of activations per 3x32x32 image in fp32, so the batch is chosen to
// need several times the memory: 65536 on a GPU with more than 16 GB, 8192 on the emulation's
// 8 GiB (whose cudaMalloc fails beyond it and whose cudaMemGetInfo counts what is allocated).
TEST(KERNEL_SUITE, OutOfMemorySaysWhichBatchFits) {
  REQUIRE_GPU();
  const int64_t batch = cuda::gpu_info(0).memory_bytes > 16e9 ? 65536 : 8192;
  const train::TrainConfig c = gpu_run("large", fmt::format("synthetic:3x32x32:{}", batch), batch, 1);
  const std::string e = error_of([&] { train::train(c); });
  EXPECT_NE(e.find("does not fit on GPU 0"), std::string::npos) << e;
  EXPECT_NE(e.find("--batch-size"), std::string::npos) << e;
}

// What dlperf train prints on the GPU (the other tests run quiet): the device line, an epoch row
// per epoch, the resumed epochs, fp16's loss-scale account, the graph's kernel count, the
// summary and the run record's path. Printing reads run-record fields, so it must not throw.
TEST(KERNEL_SUITE, TrainingOnTheGpuSaysWhatItDid) {
  REQUIRE_GPU();
  TempDir dir;
  train::TrainConfig c = gpu_run("small", "synthetic:1x12x12:256", 32, 2);
  c.precision = "fp16";
  c.quiet = false;
  c.runs_dir = (dir.path / "runs").string();
  c.checkpoint_dir = (dir.path / "ckpt").string();
  c.stop_after_epochs = 1;
  testing::internal::CaptureStdout();
  train::train(c);
  c.stop_after_epochs = 0;
  c.resume = true;
  train::train(c);
  const std::string out = testing::internal::GetCapturedStdout();
  for (const char* line : {"dlperf train: model small", "device cuda:0 (", "fp16", "CUDA graphs on", "resumed from ",
                           "fp16 loss scaling: ", "CUDA graph: a step is ", "done: 2 epochs in ", "peak GPU memory ",
                           "run record: "})
    EXPECT_NE(out.find(line), std::string::npos) << line << "\n" << out;
}

}  // namespace
}  // namespace dlperf::test

#endif
