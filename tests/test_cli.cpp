// The dlperf binary itself on bad input: each mistake gets one clear message on stderr, a non-zero
// exit, and nothing on stdout before it (no half-printed table or plan that then ends in an error).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <pty.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <omp.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <string>

#include "backend/cpu/layouts.h"
#include "backend/cpu/ops.h"
#include "bench/cpu_bench.h"
#include "core/memory.h"
#include "core/timer.h"
#include "hw/cpu_info.h"
#include "nn/graph.h"
#include "plan/step_time.h"
#include "test_util.h"

namespace dlperf::test {
namespace {

struct Outcome {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

/// Runs `dlperf ARGS` in `dir` (so nothing lands in the build tree), with stdout and stderr apart.
Outcome run_dlperf(const TempDir& dir, const std::string& args) {
  const std::string cmd = fmt::format("cd '{}' && '{}' {} >out.txt 2>err.txt", dir.path.string(), DLPERF_BIN, args);
  const int status = std::system(cmd.c_str());
  Outcome o;
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  o.out = slurp(dir.path / "out.txt");
  o.err = slurp(dir.path / "err.txt");
  return o;
}

bool has_gpu() { return std::filesystem::exists("/dev/nvidia0"); }

struct BadInput {
  std::string args, message;
};

TEST(Cli, BadInputGetsOneClearMessageAndANonZeroExit) {
  TempDir dir;
  std::ofstream(dir.path / "truncated.json") << "{\"layers\": [";
  std::ofstream(dir.path / "no-layers.json") << "{}";
  std::ofstream(dir.path / "damaged-record.json") << R"({"command": "train", "summary": {}, "config": {"batch_size": "x"}})";
  std::vector<BadInput> cases = {
      {"train --batch-size 0", "--batch-size must be between 1 and 65536"},
      {"train --epochs 0", "--epochs must be between 1 and 1000000, not 0"},
      {"profile --epochs 9223372036854775807", "--epochs must be between 1 and 1000000"},  // epochs x steps wrapped negative
      {"train --lr -1", "--lr must be a positive number"},
      {"train --momentum 1.5", "--momentum must be in [0, 1)"},
      {"train --weight-decay -1", "--weight-decay must be a finite number, 0 or more, not -1"},
      {"train --lr nan", "--lr must be a positive number, not nan"},
      {"train --profile-skip 3", "--profile-skip requires --profile"},
      {"train --gzip", "--gzip requires --profile"},
      {"train --threads 100000", "--threads 100000 is not between 0 (all) and the"},
      {"train --workers 100000", "--workers must be between 0 and 256"},  // not "needs 80 GB: lower --batch-size"
      // Flags the run would ignore, or a warm-up it would not finish.
      {"train --step-epochs 2", "--step-epochs sets when the step schedule decays, and this run's schedule is onecycle"},
      {"train --optimizer adamw --momentum 0.5", "--momentum is SGD's, and this run's optimizer is adamw"},
      {"profile --optimizer adamw --no-nesterov", "--no-nesterov is SGD's"},
      {"train --crop-pad 0", "--crop-pad sets the random crop of --augment, and this run is not augmented"},
      {"train --data synthetic:1x8x8:100 --augment --crop-pad 0", "asks for horizontal flips only, and dlperf does not flip synthetic"},
      {"train --augment --crop-pad 9", "--crop-pad: must be between 0 and 8, not 9"},
      {"train --schedule cosine --warmup-epochs 3 --epochs 2", "--warmup-epochs 3 is longer than the run (2 epochs)"},
      {"bench flops --threads 100000", "--threads 100000 is not between 0 (all) and the"},
      {"lab --redraw --epochs 2 batch", "--redraw runs nothing, so --epochs and the experiments named would be ignored"},
      {"lab --redraw --resume", "--resume excludes --redraw"},
      {"lab --redraw -o nowhere", "nowhere has no lab.json: there is no lab report to redraw"},
      {"train --model nosuch", "model 'nosuch' is neither a preset nor a readable file"},
      {"train --model truncated.json", "model spec truncated.json is not valid JSON: line 1, column"},  // no "[json.exception"
      {"plan --model mlp --input 1x28x2147483648", "an image of 1x28x2147483648 holds more than 2^31 - 1 values"},  // was SIGFPE in oneDNN
      {"train --model no-layers.json", "needs a non-empty 'layers' list"},
      {"train --data /nonexistent", "--data /nonexistent: no such directory"},
      {"train --resume", "--resume needs --checkpoint DIR"},
      {"train --checkpoint ck --resume", "no checkpoint to resume from"},
      {"train --overwrite-checkpoint", "--overwrite-checkpoint needs --checkpoint DIR"},
      {"train --precision bf16 --warmup-epochs 1", "--warmup-epochs does not apply to --schedule onecycle"},
      {"train --profile --profile-steps -1", "--profile-skip and --profile-steps count steps: they cannot be negative"},
      {"profile --steps -1", "--skip and --steps count steps: they cannot be negative"},
      {"profile --checkpoint ck", "dlperf profile writes no checkpoint: it stops mid-epoch"},
      {"plan --model medium --targets cpu,nosuch", "no device 'nosuch' in the hardware catalog"},
      {"plan --model medium --targets h100", "no device 'h100' in the hardware catalog; did you mean h100-sxm or h100-pcie?\n"},
      {"plan --model medium --targets rtx-4080", "no device 'rtx-4080' in the hardware catalog\n"},  // not rtx-4090: another GPU
      {"plan --model medium --region mars", "no grid carbon intensity for region 'mars'"},
      {"plan --model medium --batch-size 100000", "--batch-size 100000 is larger than --dataset-size 60000"},
      {"plan --epochs 0", "--epochs: must be at least 1, not 0"},
      {"plan --pue 0.5", "--pue: must be between 1 and 10, not 0.5"},
      {"plan --grid-intensity -1", "--grid-intensity: must be between 0 and 5000, not -1"},
      {"plan --tp 2", "--tp requires --transformer"},
      // Flags that would be ignored (they were): a CNN run's with a Transformer, the CPU's watts without the cpu target.
      {"plan --transformer gpt2-small --model large", "--model describes a CNN training run, and --transformer plans a Transformer\n"},
      {"plan --transformer gpt2-small --epochs 3", "--epochs describes a CNN training run"},
      {"plan --targets h100-sxm --cpu-watts 100", "--cpu-watts is this CPU's power, for the cpu target, and the targets are h100-sxm\n"},
      {"plan --transformer gpt2-small --cpu-watts 100", "and the targets are a100-80gb, h100-sxm, h200\n"},
      {"plan --json .", "--json . is a directory"},
      {"plan --transformer gpt2-small --layers", "--layers excludes --transformer"},
      {"plan --transformer 12,768,12,1024,50257 --tp 5", "--tp 5 does not divide the 12 attention heads"},
      {"plan --transformer 12,768,7,1024,50257", "HIDDEN 768 does not split into 7 heads"},
      {"plan --transformer llama-7b", "the known sizes are gpt2-small, gpt2-medium, gpt2-large, gpt3-1.3b, gpt2-xl, gpt3-6.7b"},
      {"plan --transformer 0,768,12,1024,50257", "LAYERS, HIDDEN, HEADS, SEQ and VOCAB must each be at least 1"},
      {"plan --transformer gpt2-small --batch-size 6 --dp 4", "the global batch must be a multiple of 4"},
      {"plan --transformer gpt2-small --batch-size 8 --dp 4 --micro-batch 4", "the global batch must be a multiple of 16"},
      {"plan --virtual-stages 2", "--virtual-stages requires --transformer"},
      {"plan --devices 8", "--devices requires --transformer"},
      // listed every layout at 0 us and -100% MFU
      {"plan --transformer gpt2-small --devices 8 --targets tpu-v4", "tpu-v4 cannot run this job: no fp32 peak in the catalog (it lists bf16)"},
      {"plan --transformer gpt2-small --devices 8 --dp 8", "--dp follows from --devices and the other degrees: the search sets it"},
      {"plan --transformer gpt3-175b --devices 8", "none of the 1782 layouts of 8 h100-sxm fits: the leanest needs"},
      {"plan --transformer gpt2-small --devices 8 --targets cpu", "--devices searches the layouts of GPUs or TPUs, and the first target is this CPU"},
      {"plan --transformer gpt2-small --tokens inf", "--tokens: must be between 1 and 1e+18, not inf"},  // planned a job of inf years
      {"plan --pue 1e308", "--pue: must be between 1 and 10, not 1e308"},  // energy of inf kWh
      {"plan --transformer gpt2-small --zero 7", "--zero: must be between 0 and 3, not 7"},
      {"plan --transformer gpt2-small --virtual-stages 2", "--virtual-stages 2 interleaves pipeline stages, and there is no pipeline (--pp 1)"},
      {"plan --transformer gpt2-small --pp 4 --virtual-stages 2", "--virtual-stages 2 does not divide the 3 layers each of the --pp 4 devices holds"},
      // pp x virtual stages and dp x micro-batch overflowed int64 (the second to 0: a crash on % 0)
      {"plan --transformer gpt2-small --pp 2 --virtual-stages 9223372036854775807", "--virtual-stages 9223372036854775807 does not divide the 6 layers"},
      {"plan --transformer gpt2-small --dp 4611686018427387904 --micro-batch 4",
       "--batch-size 64 is smaller than --dp 4611686018427387904 replicas x --micro-batch 4: each replica takes whole micro-batches"},
      {"plan --transformer gpt2-small --pp 2 --virtual-stages 0", "--virtual-stages: must be at least 1, not 0"},
      {"plan --against damaged-record.json --model large", "--model does not apply with --against: each run record is planned with"},  // was ignored
      {"plan --against damaged-record.json --no-augment", "--augment does not apply with --against"},
      {"plan --against damaged-record.json --threads 1", "--threads does not apply with --against"},
      {"plan --transformer gpt2-small --threads 1", "--threads describes a CNN training run"},
      {"plan --threads 100000", "--threads 100000 is not between 0 (all) and the"},
      {"plan --against nonexistent.json", "none of the files given to --against could be compared (the lines above say why)"},
      {"plan --against nonexistent.json", "skipped nonexistent.json: no such file"},
      {"plan --against damaged-record.json", "skipped damaged-record.json: a damaged run record: /config/batch_size is missing"},
      // A note about the data (here the limit; on a machine without Fashion-MNIST, its fallback
      // to synthetic data) waits for the run's header, and a refused run has none.
      {"train --model nosuch --data synthetic:1x8x8:100 --train-limit 1000", "model 'nosuch' is neither a preset nor a readable file"},
      {"models show nosuch", "model 'nosuch' is neither a preset nor a readable file"},
      {"models nosuch", "model 'nosuch' is neither a preset nor a readable file"},
      {"models --foo", "'dlperf models' has no flag --foo\n"},
      {"models medium extra", "unexpected argument 'extra' after 'dlperf models'\n"},
      {"models medium --json", "the short form 'dlperf models NAME' takes no flags: use 'dlperf models show medium --json'"},
      {"models show medium --foo", "'dlperf models show' has no flag --foo\n"},  // was ignored: 'show' took 'models' extras
      {"models show medium --jsn", "did you mean --json?"},
      {"models show medium --input 1x4x4", "hint: medium needs images of at least 8x8, and these are 4x4: use larger ones (--input"},
      {"models show small --classes 0", "--classes: must be at least 1, not 0\n  hint: 'dlperf models show --help' lists"},
      {"lab nosuch", "'dlperf lab' has no experiment 'nosuch' (experiments: device, batch, model, workers, precision)\n"},
      {"lab devices", "'dlperf lab' has no experiment 'devices'; did you mean 'device'? (experiments: device,"},
      {"lab --batches 16,0", "--batches: must be at least 1, not 0"},
      {"lab --models small,nosuch", "model 'nosuch' is neither a preset nor a readable file"},
      {"lab --batches 64,256,64", "--batches lists 64 twice"},
      {"lab model --models small,large,small", "--models lists small twice"},
      // A flag for an experiment the lab does not run (it was ignored).
      {"lab device --batches 16,64", "--batches is for the batch experiment, and this lab runs device\n"},
      {"lab device batch --max-workers 2", "--max-workers is for the workers experiment, and this lab runs device, batch\n"},
      {"lab --data /nonexistent", "the lab's base run (medium at batch 64 on /nonexistent) cannot train: --data /nonexistent"},
      {"bench nosuch", "'dlperf bench' has no benchmark 'nosuch' (benchmarks: memory, flops, gemm,"},
      {"bench memroy", "did you mean 'memory'?"},
      {"train --precision fp8", "--precision: 'fp8' is not one of its values (fp32, tf32, bf16, fp16)\n"},
      {"train --optimizer adam", "--optimizer: 'adam' is not one of its values; did you mean 'adamw'? (sgd, adamw)\n"},
      {"bench flops --ranks 4", "--ranks is for 'dlperf bench allreduce', not 'dlperf bench flops'"},
      {"bench all --steps 5", "--steps is for 'dlperf bench roofline', not 'dlperf bench all'"},
      {"bench flops --json .", "--json . is a directory"},
      // A directory that refuses files though access(W_OK) passes (as root, or a read-only mount).
      {"bench memory --quick --json /proc/dlperf-test.json", "--json /proc/dlperf-test.json: cannot write to /proc"},
      {"bench all --quick --models small,nosuch", "model 'nosuch' is neither a preset"},  // before a minute of other benchmarks
      {"bench conv --input 3x2x2", "does not fit a 1x1 input"},
      {"bench allreduce --ranks 1", "--ranks: must be between 2 and 256, not 1"},
      {"bench roofline --steps 0", "--steps: must be between 3 and 100000, not 0"},
      {"bench gemm --shape 1x1x1", "hint: 'dlperf bench --help' lists its flags"},
      {"--foo", "hint: 'dlperf help' lists the commands"},
      // A flag a command lacks: the first one, as given, and the flag meant (CLI11 listed them
      // all, last first: "not expected: 10 --profile-steps 3 --profile-skip").
      {"train --epoch 3", "'dlperf train' has no flag --epoch; did you mean --epochs?\n"},
      {"train --batch=64", "'dlperf train' has no flag --batch; did you mean --batch-size?\n"},
      {"profile --profile-skip 3 --profile-steps 10", "'dlperf profile' has no flag --profile-skip; did you mean --skip?\n"},
      {"train --steps 10", "'dlperf train' has no flag --steps; did you mean --profile-steps?\n"},
      {"train --skip 3", "did you mean --profile-skip?"},  // not --gzip, two edits from it
      {"train --pro", "'dlperf train' has no flag --pro\n"},  // starts four flags: no guess
      {"train resnet18", "unexpected argument 'resnet18' after 'dlperf train'; did you mean --model resnet18?\n"},
      {"plan --layers --model medium extra", "unexpected argument 'extra' after 'dlperf plan'\n"},
      {"lab --workers 0,2", "'dlperf lab' has no flag --workers; did you mean --max-workers?\n"},  // not "0,2 not in {device,..."
      {"--foo", "'dlperf' has no flag --foo\n"},  // not "A subcommand is required"
      // Values CLI11 refuses, said as dlperf says its own ("Could not convert: --batch-size = abc").
      {"train --batch-size abc", "--batch-size: 'abc' is not a whole number\n"},
      {"plan --pue abc", "--pue: 'abc' is not a number\n"},
      {"train --epochs", "--epochs needs a value (a whole number) before --runs-dir\n"},  // the flags run_dlperf adds
      {"profile --epochs", "--epochs needs a value (a whole number)\n"},
      {"train -b 64 -b 32", "--batch-size is given 2 times: give it once\n"},
      {"models show", "'dlperf models show' needs its model argument\n"},
      {"trian", "unknown command 'trian'; did you mean 'train'?"},
      {"tran", "unknown command 'tran'; did you mean 'train'?\n"},  // one suggestion: plan is 2 edits away, train 1
  };
  // Without a GPU, asking for one, or for what only a GPU trains, is refused up front.
  if (!has_gpu()) {
#ifdef DLPERF_HAVE_CUDA
    cases.push_back({"train --device cuda", "--device cuda: no NVIDIA GPU on this machine"});
#else  // a machine without the CUDA toolkit, as a fresh Debian 12 is, builds no CUDA backend
    cases.push_back({"train --device cuda", "--device cuda: this dlperf build has no CUDA backend"});
#endif
    cases.push_back({"train --precision fp16", "--precision fp16 cannot train on this CPU"});
    cases.push_back({"train --no-graphs", "--no-graphs turns off CUDA graphs, and this run is on the CPU"});
    cases.push_back({"train --pin-memory off", "--pin-memory off changes how batches reach a GPU"});
    cases.push_back({"train --small-conv cudnn", "--small-conv cudnn picks who runs a GPU's convolutions of few channels"});
  } else {  // a GPU that is not there: one message before any benchmark, not each one's cudaSetDevice failure
    cases.push_back({"bench launch --gpu 99", "--gpu 99: this machine has "});
  }
  for (const auto& c : cases) {
    SCOPED_TRACE("dlperf " + c.args);
    const Outcome o = run_dlperf(dir, c.args + (c.args.rfind("train", 0) == 0 ? " --runs-dir runs --no-progress" : ""));
    EXPECT_NE(o.exit_code, 0);
    EXPECT_NE(o.err.find(c.message), std::string::npos) << o.err;
    EXPECT_EQ(o.out.find("dlperf: error"), std::string::npos) << "the error belongs on stderr";
    // Every error, dlperf's own and the flag parser's, comes once, in one form, before anything
    // is printed on stdout.
    EXPECT_NE(o.err.find("dlperf: error: "), std::string::npos) << o.err;
    EXPECT_EQ(o.err.find("dlperf: error"), o.err.rfind("dlperf: error")) << o.err;
    EXPECT_EQ(o.out, "") << "output before the error";
  }
}

TEST(Cli, GoodInputExitsZero) {
  TempDir dir;
  for (const std::string args : {"models", "models show medium", "models medium", "plan --model small --batch-size 16 --targets cpu,t4", "--version"}) {
    SCOPED_TRACE("dlperf " + args);
    const Outcome o = run_dlperf(dir, args);
    EXPECT_EQ(o.exit_code, 0) << o.err;
    EXPECT_FALSE(o.out.empty());
  }
  // 'help COMMAND' is 'COMMAND --help'.
  const Outcome h = run_dlperf(dir, "help train");
  EXPECT_EQ(h.exit_code, 0) << h.err;
  EXPECT_NE(h.out.find("--epochs"), std::string::npos) << h.out;
  // --model's help names every preset (it named all but logreg while it was written by hand).
  for (const std::string& preset : nn::preset_names())
    EXPECT_TRUE(h.out.find(preset + ",") != std::string::npos || h.out.find(preset + ")") != std::string::npos) << preset;
  const Outcome bad = run_dlperf(dir, "help trian");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("did you mean 'train'?"), std::string::npos) << bad.err;
}

// One of a thing reads singular: "1 thread", "1 epoch" (the bench and plan lines said "1 threads"
// and "1 epochs").
TEST(Cli, OneOfAThingIsSingular) {
  TempDir dir;
  const Outcome b = run_dlperf(dir, "bench flops --quick --threads 1 --json b.json");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(b.out.find("(1 thread, median of"), std::string::npos) << b.out;
  EXPECT_EQ(b.out.find("1 threads"), std::string::npos) << b.out;
  const Outcome p = run_dlperf(dir, "plan --model small --epochs 1");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.out.find("(1 epoch of "), std::string::npos) << p.out;
  EXPECT_NE(p.out.find(" for 1 epoch\n"), std::string::npos) << p.out;
}

// 'bench gemm conv' runs both (as 'lab batch model' does), once each however often named, and
// reads them against an FMA peak measured now, not one counted at the OS's base clock. oneDNN
// runs them on the --threads asked for (it ran them on every core, against one core's peak).
TEST(Cli, BenchRunsSeveralBenchmarksNamedTogether) {
  TempDir dir;
  const Outcome o = run_dlperf(dir, "bench gemm conv gemm --quick --threads 1 --json b.json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const auto j = nlohmann::json::parse(slurp(dir.path / "b.json"));
  ASSERT_TRUE(j.contains("gemm") && j.contains("conv")) << j.dump().substr(0, 300);
  for (const char* what : {"gemm", "conv"})
    for (const auto& row : j[what]) EXPECT_EQ(row.value("threads", 0), 1) << what << ": " << row.dump();
  EXPECT_FALSE(j.contains("memory"));
  EXPECT_EQ(o.out.find("GEMM through oneDNN"), o.out.rfind("GEMM through oneDNN")) << "gemm ran twice";
  EXPECT_NE(o.out.find("(% of peak against the FMA peak of"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("measured just now"), std::string::npos) << o.out;
  const Outcome bad = run_dlperf(dir, "bench gemm memory --steps 5");
  EXPECT_NE(bad.err.find("--steps is for 'dlperf bench roofline', not 'dlperf bench gemm memory'"), std::string::npos) << bad.err;
}

// bench roofline on the CPU: every layer pass with FLOPs against the FMA peak, with the bf16 roof
// beside it where the engine trains bf16 (AVX512-BF16), and a bf16 step under it there.
TEST(Cli, BenchRooflinePlacesTheCpuStepUnderEachPrecisionsRoof) {
  TempDir dir;
  const Outcome o = run_dlperf(dir, "bench roofline -m small -d synthetic:1x12x12:256 -b 16 --steps 3 --threads 1 --json r.json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const auto r = nlohmann::json::parse(slurp(dir.path / "r.json")).at("roofline");
  ASSERT_GE(r.at("peaks").size(), 1u);
  EXPECT_EQ(r["peaks"][0]["label"], "FMA peak");
  EXPECT_FALSE(r.at("points").empty());
  if (cpu::has_bf16_kernels()) {
    ASSERT_EQ(r["peaks"].size(), 2u) << r["peaks"].dump();
    EXPECT_EQ(r["peaks"][1]["label"], "bf16 peak (VDPBF16PS)");
    EXPECT_GT(r["peaks"][1]["gflops"].get<double>(), 0);
    EXPECT_NE(o.out.find("(the other precisions' roofs, drawn dashed: bf16 peak (VDPBF16PS) "), std::string::npos) << o.out;
  } else {
    EXPECT_EQ(r["peaks"].size(), 1u) << r["peaks"].dump();
  }
  const Outcome bf16 = run_dlperf(dir, "bench roofline -m small -d synthetic:1x12x12:256 -b 16 --steps 3 --threads 1 --device cpu "
                                       "--precision bf16 --json rb.json");
  if (cpu::has_bf16_kernels()) {
    ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
    const auto rb = nlohmann::json::parse(slurp(dir.path / "rb.json")).at("roofline");
    EXPECT_EQ(rb["peaks"][0]["label"], "bf16 peak (VDPBF16PS)");
    EXPECT_EQ(rb["peaks"][1]["label"], "FMA peak (fp32)");
    EXPECT_TRUE(std::filesystem::exists(dir.path / "runs" / "roofline-small-b16-cpu-bf16.csv"));
    // A bf16 conv moves fewer bytes than the same fp32 conv: its intensity is higher.
    auto conv2 = [](const nlohmann::json& roof) {
      for (const auto& p : roof["points"])
        if (p["layer"] == "conv2" && p["pass"] == "forward") return p["flops"].get<double>() / p["bytes"].get<double>();
      return 0.0;
    };
    EXPECT_GT(conv2(rb), 1.5 * conv2(r)) << rb["points"].dump();
  } else {
    EXPECT_NE(bf16.exit_code, 0);
    EXPECT_NE(bf16.err.find("a bf16 step on the CPU needs AVX512-BF16"), std::string::npos) << bf16.err;
  }
  const Outcome fp16 = run_dlperf(dir, "bench roofline --device cpu --precision fp16");
  EXPECT_NE(fp16.exit_code, 0);
  EXPECT_NE(fp16.err.find("--precision fp16 is a GPU format"), std::string::npos) << fp16.err;
}

// bench all keeps the ceilings in the machine profile: the FMA peak, the bandwidth per level, the
// cost of an engine call, and the bf16 peak where the CPU has AVX512-BF16 (which the roofline draws).
// Each at its best: the fastest repeat of the peaks and the call, each bandwidth level from its
// points' best rounds. Other work only ever slows a sample down, and the plan predicts a machine
// that runs nothing else.
TEST(Cli, BenchAllKeepsTheCeilingsInTheMachineProfile) {
  TempDir dir;
  const Outcome o = run_dlperf(dir, "bench all --quick --threads 1 --json b.json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const auto p = nlohmann::json::parse(slurp(dir.path / "runs" / "machine-profile.json"));
  const auto b = nlohmann::json::parse(slurp(dir.path / "b.json"));
  EXPECT_EQ(p.at("threads"), 1);
  EXPECT_EQ(p.at("f32_gflops"), b.at("flops").at("gflops_max"));
  EXPECT_EQ(p.at("call_overhead_us"), b.at("cpu_launch").at("us_min"));
  std::vector<bench::MemoryPoint> points;
  for (const auto& m : b.at("memory"))
    points.push_back({m["kernel"], m["working_set_bytes"], {m["gbps_median"], m["gbps_min"], m["gbps_max"]}, m["gbps_best_round"],
                      m["repeats"], m["rounds"]});
  // What else ran meanwhile, in both (a busy run would have been said on the console).
  EXPECT_EQ(b.at("host_load").at("known"), true) << b["host_load"].dump();
  EXPECT_EQ(p.at("host_load").at("busy"), b["host_load"].at("busy"));
  EXPECT_EQ(b["host_load"]["busy"] == true, o.out.find("other processes used") != std::string::npos ||
                                                 o.out.find("the hypervisor took") != std::string::npos) << o.out;
  // A level is placed by the cache sizes (/sys); where they are unknown (a chroot without /sys)
  // none is, and the plan takes typical figures.
  const hw::CpuInfo cpu = hw::cpu_info();
  EXPECT_EQ(p.at("bandwidth_gbps").empty(), cpu.l1d_bytes <= 0 || cpu.l2_bytes <= 0 || cpu.l3_bytes <= 0) << p.dump();
  EXPECT_EQ(p.at("bandwidth_gbps"), bench::bandwidth_levels(points, cpu.l1d_bytes, cpu.l2_bytes, cpu.l3_bytes, 1));
  if (b["flops"].at("bf16").contains("gflops_median"))
    EXPECT_EQ(p.at("bf16_gflops"), b["flops"]["bf16"]["gflops_max"]);
  else
    EXPECT_FALSE(p.contains("bf16_gflops")) << "skipped or failed: " << b["flops"]["bf16"].dump();
  EXPECT_EQ(b["flops"]["bf16"].contains("gflops_median"), cpu::has_bf16_kernels()) << b["flops"]["bf16"].dump();
  // The peak is the widest width's, and each width the CPU has has its row, widest first.
  const auto& widths = b["flops"].at("by_width");
  ASSERT_FALSE(widths.empty());
  EXPECT_EQ(widths[0].at("gflops_median"), b["flops"]["gflops_median"]);
  // Every run's peak (one, or up to three where the first read low), the kept one the fastest.
  const auto& runs = b["flops"].at("runs_gflops_median");
  ASSERT_TRUE(runs.size() >= 1 && runs.size() <= 3) << runs.dump();
  double fastest = 0;
  for (const auto& g : runs) fastest = std::max(fastest, g.get<double>());
  EXPECT_EQ(fastest, b["flops"]["gflops_median"].get<double>());
  for (size_t i = 0; i < widths.size(); ++i) {
    EXPECT_EQ(widths[i].at("vector_bits").get<int>(), bench::fma_widths(hw::cpu_info())[i]);
    EXPECT_GT(widths[i].at("counted_peak_gflops").get<double>(), 0);
  }
  EXPECT_EQ(o.out.find("FMAs ran at") != std::string::npos, widths.size() > 1) << o.out;
  // The kernel choices' medians, where both kernels of a pair are here (AVX-512: Winograd, and
  // dlperf's nChw16c max pooling), which every later run here takes in place of timing them.
  const auto& kernels = b.at("cpu_kernels");
  EXPECT_EQ(kernels.at("rounds"), 3) << "--quick";
  for (const char* key : {"direct_over_winograd", "max_pool_onednn_over_dlperf"}) {
    if (kernels.at(key).contains("median")) {
      EXPECT_EQ(p.at("cpu_kernels").at(key), kernels[key]["median"]) << key;
      EXPECT_NE(o.out.find(fmt::format("{:.2f}x (median of", kernels[key]["median"].get<double>())), std::string::npos) << o.out;
    } else {
      EXPECT_FALSE(p.value("cpu_kernels", nlohmann::json::object()).contains(key)) << key << ": " << kernels[key].dump();
    }
  }
  EXPECT_EQ(kernels["direct_over_winograd"].contains("median"), cpu::winograd_kernel_here()) << kernels.dump();
}

// bench loader: a row per worker count, plain and augmented, in the table and the JSON; its
// flags belong to it alone.
TEST(Cli, BenchLoaderTimesTheWorkerCountsAsked) {
  TempDir dir;
  const Outcome o = run_dlperf(dir, "bench loader --quick -d synthetic:1x8x8:300 -b 32 -j 0 -j 1 --json b.json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("Data loader alone (synthetic: 300 training images of 1x8x8; batches of 32"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("vs -j 0"), std::string::npos) << o.out;
  const auto j = nlohmann::json::parse(slurp(dir.path / "b.json"));
  const auto& l = j.at("loader");
  EXPECT_EQ(l.at("batch"), 32);
  EXPECT_EQ(l.at("images"), 300);
  EXPECT_EQ(l.at("input"), nlohmann::json::array({1, 8, 8}));
  ASSERT_EQ(l.at("points").size(), 4u);
  for (const auto& p : l.at("points")) {
    EXPECT_EQ(p.at("images_per_epoch"), 288) << "9 whole batches of 32";
    EXPECT_GT(p.at("images_per_s_median").get<double>(), 0);
  }
  EXPECT_FALSE(j.contains("memory"));
  const Outcome big = run_dlperf(dir, "bench loader --quick -d synthetic:1x8x8:300 -b 400");
  EXPECT_NE(big.exit_code, 0);
  EXPECT_NE(big.err.find("--batch-size 400 is larger than the 300 training images"), std::string::npos) << big.err;
  const Outcome bad = run_dlperf(dir, "bench gemm --workers 2");
  EXPECT_NE(bad.err.find("--workers is for 'dlperf bench loader', not 'dlperf bench gemm'"), std::string::npos) << bad.err;
}

// A --train-limit or --test-limit past the set's size uses all of it, and says so; within it, no note.
TEST(Cli, ALimitPastTheDataSaysAllOfItIsUsed) {
  TempDir dir;
  const std::string run = "train --device cpu --model mlp --data synthetic:1x8x8:256 --epochs 1 --no-progress --runs-dir '' ";
  const Outcome o = run_dlperf(dir, run + "--train-limit 100000 --test-limit 20");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("note: --train-limit 100000 is more than the 256 training images: all of them are used"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("--test-limit"), std::string::npos) << o.out;  // 20 of the 51 test images: a subset, as asked
  const Outcome t = run_dlperf(dir, run + "--test-limit 1000");
  EXPECT_NE(t.out.find("note: --test-limit 1000 is more than the 51 test images"), std::string::npos) << t.out;
}

// plan --against: a row per run record, and the worst step-time error named by its run.
TEST(Cli, PlanAgainstRunRecordsNamesTheWorstRun) {
  TempDir dir;
  const std::string run = "train --device cpu --data synthetic:1x12x12:512 --epochs 1 --no-progress --runs-dir runs ";
  ASSERT_EQ(run_dlperf(dir, run + "--model mlp").exit_code, 0);
  ASSERT_EQ(run_dlperf(dir, run + "--model small").exit_code, 0);
  ASSERT_EQ(run_dlperf(dir, run + "--model mlp --augment").exit_code, 0);  // planned with the slower fill, and named so
  const Outcome o = run_dlperf(dir, "plan --against runs/*.json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("Predicted vs measured, 3 training runs"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("\nmlp b64 w1 "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("\nmlp b64 w1 aug "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("\nsmall b64 w1 "), std::string::npos) << o.out;
  EXPECT_TRUE(std::regex_search(o.out, std::regex(R"(step time: median \|error\| [0-9.]+%, worst [0-9.]+% \((mlp|small) b64 w1( aug)?\))"))) << o.out;
  // Energy that is not compared says why for every run, not only the first run's reason.
  ASSERT_EQ(run_dlperf(dir, "profile --device cpu --data synthetic:1x12x12:512 --model mlp --skip 1 --steps 2 --no-progress --runs-dir runs").exit_code, 0);
  const Outcome p = run_dlperf(dir, "plan --against runs/*.json");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.out.find("a dlperf profile run: its energy covers a few steps, not an epoch (1 run)"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find(" (3 runs)"), std::string::npos) << p.out;
  // A folder stands for its .json files (the profile's trace left out unread), as the glob did.
  const Outcome f = run_dlperf(dir, "plan --against runs");
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_NE(f.out.find("Predicted vs measured, 4 training runs"), std::string::npos) << f.out;
  EXPECT_EQ(f.err.find("trace"), std::string::npos) << f.err;
  std::filesystem::create_directory(dir.path / "empty");
  const Outcome e = run_dlperf(dir, "plan --against empty");
  EXPECT_NE(e.exit_code, 0);
  EXPECT_NE(e.err.find("skipped empty: a folder with no .json files in or below it"), std::string::npos) << e.err;
  // and a folder above it, as a lab's report folder holds its records in runs/
  const Outcome above = run_dlperf(dir, "plan --against .");
  ASSERT_EQ(above.exit_code, 0) << above.err;
  EXPECT_NE(above.out.find("Predicted vs measured, 4 training runs"), std::string::npos) << above.out;
}

// A partial last batch that is a tenth of the training set or more is said (training skips it);
// a small remainder is not. A tiny epoch's time keeps its digits ("0.0038", not "0.00").
TEST(Cli, APartialLastBatchThatSkipsMuchOfTheSetIsSaid) {
  TempDir dir;
  const std::string run = "train --device cpu --model mlp --epochs 1 --no-progress --runs-dir '' --batch-size 64 ";
  const Outcome o = run_dlperf(dir, run + "--data synthetic:1x8x8:100");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("note: batch 64 makes 1 step per epoch on 100 training images: the other 36 (36%) would fill only part"),
            std::string::npos) << o.out;
  EXPECT_TRUE(std::regex_search(o.out, std::regex(R"(\n    1  +0\.0[0-9]+ )"))) << o.out;
  const Outcome quiet = run_dlperf(dir, run + "--data synthetic:1x8x8:1000");  // 40 of 1000 left over
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.out.find("note:"), std::string::npos) << quiet.out;
}

// More loader workers than CPUs train, with a note saying what they cost (as PyTorch's DataLoader
// warns); as many as the CPUs, no note.
TEST(Cli, MoreLoaderWorkersThanCpusTrainWithANote) {
  TempDir dir;
  const int cpus = hw::usable_cpus();
  const std::string run = "train --device cpu --model small --data synthetic:1x12x12:256 --epochs 1 --no-progress --runs-dir runs --workers ";
  const Outcome over = run_dlperf(dir, run + std::to_string(cpus + 1));
  ASSERT_EQ(over.exit_code, 0) << over.err;
  EXPECT_NE(over.out.find(fmt::format("note: {} loader workers on {} CPU", cpus + 1, cpus)), std::string::npos) << over.out;
  const Outcome fits = run_dlperf(dir, run + std::to_string(cpus));
  ASSERT_EQ(fits.exit_code, 0) << fits.err;
  EXPECT_EQ(fits.out.find("loader workers on"), std::string::npos) << fits.out;
}

// A profile with nowhere to write its files says so, since its table points to "the JSON" for
// the rows it leaves out.
TEST(Cli, AProfileWithoutFilesSaysSo) {
  TempDir dir;
  const Outcome o = run_dlperf(dir, "profile --device cpu --model small --data synthetic:1x12x12:256 --runs-dir '' --skip 1 --steps 2 --no-progress");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("no trace or table file: --runs-dir is empty and no --out was given"), std::string::npos) << o.out;
  for (const auto& f : std::filesystem::directory_iterator(dir.path))
    EXPECT_NE(f.path().extension(), ".json") << f.path();
}

// A profile file that cannot be written (a full disk: /dev/full stands in for it) names the flag
// that chose its path, in each command's own words.
TEST(Cli, AProfileFileThatCannotBeWrittenNamesItsFlag) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  TempDir dir;
  const std::string run = "--device cpu --model small --data synthetic:1x12x12:256 --runs-dir '' --no-progress";
  for (const auto& [command, flag] : {std::pair{"profile --skip 1 --steps 2 --out p", "--out"},
                                      std::pair{"train --profile --profile-steps 2 --profile-out p", "--profile-out"}}) {
    std::filesystem::create_symlink("/dev/full", dir.path / "p.trace.json.tmp");  // the failed write removes it
    const Outcome o = run_dlperf(dir, fmt::format("{} {}", command, run));
    EXPECT_EQ(o.exit_code, 1) << command;
    EXPECT_FALSE(std::filesystem::exists(dir.path / "p.trace.json")) << command;
    EXPECT_NE(o.err.find("could not write p.trace.json (is the disk full, or the directory read-only?)"), std::string::npos) << o.err;
    EXPECT_NE(o.err.find(fmt::format("hint: check {}\n", flag)), std::string::npos) << o.err;
  }
}

// Runs within one second keep their own default files, and a bench whose default results file
// cannot be written says so before it measures anything.
TEST(Cli, DefaultOutputFilesAreNeverReplacedAndCheckedFirst) {
  TempDir dir;
  for (int i = 0; i < 2; ++i) {
    const Outcome b = run_dlperf(dir, "bench launch --quick");
    ASSERT_EQ(b.exit_code, 0) << b.err;
  }
  const std::string profile = "profile --device cpu --model mlp --data synthetic:1x8x8:256 --skip 1 --steps 2 --no-progress --out ";
  for (const std::string out : {"p/", "p/", "q/a", "q/a"}) {
    const Outcome p = run_dlperf(dir, profile + out);
    ASSERT_EQ(p.exit_code, 0) << p.err;
  }
  const auto count = [&](const std::string& sub, const std::string& ending) {
    int n = 0;
    for (const auto& f : std::filesystem::directory_iterator(dir.path / sub)) {
      const std::string name = f.path().filename().string();
      n += name.size() >= ending.size() && name.compare(name.size() - ending.size(), ending.size(), ending) == 0;
    }
    return n;
  };
  EXPECT_EQ(count("runs", "-bench.json") + count("runs", "-bench-2.json"), 2);
  EXPECT_EQ(count("p", ".trace.json"), 2);  // two profiles, each with its table beside its trace
  EXPECT_EQ(count("p", ".json"), 4);
  EXPECT_EQ(count("q", ".json"), 2);  // a prefix the user named is replaced, as --json is: a.json and a.trace.json
  std::filesystem::remove_all(dir.path / "runs");
  std::ofstream(dir.path / "runs") << "a file where the directory would go";
  const Outcome bad = run_dlperf(dir, "bench flops --quick");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("cannot write the results to runs/"), std::string::npos) << bad.err;
  EXPECT_EQ(bad.out, "") << "measured before finding it could not write";
}

// On a terminal (a pseudo-terminal 80 columns wide here) the progress bars fit the width, so each
// redraw replaces the last instead of wrapping onto a new line, and the test pass has its own bar.
TEST(Cli, ProgressBarsFitTheTerminal) {
  TempDir dir;
  winsize size{};
  size.ws_col = 80, size.ws_row = 24;
  int fd = -1;
  const pid_t pid = forkpty(&fd, nullptr, nullptr, &size);
  if (pid < 0) GTEST_SKIP() << "no pseudo-terminal to run dlperf on: forkpty: " << std::strerror(errno);
  if (pid == 0) {
    if (chdir(dir.path.c_str()) != 0) _exit(127);
    execl(DLPERF_BIN, DLPERF_BIN, "train", "--device", "cpu", "--model", "small", "--data", "synthetic:1x16x16:2048",
          "--epochs", "12", "--runs-dir", "", static_cast<char*>(nullptr));
    _exit(127);
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, size_t(n));  // EIO once the child has exited
  close(fd);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_NE(out.find("  epoch 12/12 ["), std::string::npos) << out;
  EXPECT_NE(out.find("  epoch 12/12 test ["), std::string::npos) << out;
  size_t start = 0;
  for (size_t end; (end = out.find_first_of("\r\n", start)) != std::string::npos; start = end + 1) {
    const std::string piece = out.substr(start, end - start);
    if (piece.find("img/s  ") != std::string::npos && piece.find(" [") != std::string::npos) {
      EXPECT_LT(piece.size(), 80u) << piece;
    }
  }
}

// The lab says up front how many runs it will train and how long the planner expects them to
// take, numbers each run with the time left after it, and ends with the plan against the time.
TEST(Cli, TheLabSaysWhatIsComingAndHowLongItTook) {
  TempDir dir;
  const Outcome o = run_dlperf(dir, "lab model --models small,mlp --data synthetic:1x12x12:256 --batch-size 32 --model small "
                                    "--train-limit 0 --test-limit 0 --no-progress --out lab");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_TRUE(std::regex_search(o.out, std::regex(R"(\n4 runs to train; dlperf plan expects about [0-9.]+ (us|ms|s) of training and testing\n)")))
      << o.out;
  EXPECT_TRUE(std::regex_search(o.out, std::regex(R"(\n  \[1/4, +[0-9.]+ s\] base .*; about [0-9.]+ (us|ms|s) left\n)"))) << o.out;
  EXPECT_TRUE(std::regex_search(o.out, std::regex(R"(\n  \[4/4, .*\] base +small at batch 32 at the end \(drift over the lab\) .*test acc [0-9.]+%\n)")))
      << o.out;  // the drift run last, with nothing left after it
  EXPECT_TRUE(std::regex_search(o.out, std::regex(R"(\nthe lab's 4 runs trained and tested in .*; dlperf plan had expected .* \([0-9.]+x\)\n)")))
      << o.out;
}

// A model made for ImageNet is planned and shown on ImageNet's images, classes and training set
// unless told otherwise, and says so; --input, --classes and --dataset-size still decide where given.
TEST(Cli, AModelMadeForAnInputIsPlannedOnIt) {
  TempDir dir;
  const Outcome p = run_dlperf(dir, "plan --model resnet18-imagenet -b 8 --dataset-size 64 --epochs 1");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.out.find("dlperf plan: resnet18-imagenet on 3x224x224, batch 8"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("(3x224x224 and 1000 classes: what resnet18-imagenet is made for; --input, --classes and --dataset-size "
                       "plan others)"),
            std::string::npos)
      << p.out;
  EXPECT_NE(p.out.find("(1 epoch of 8 steps)"), std::string::npos) << p.out;
  // Without --dataset-size an epoch is ImageNet's 1,281,167 images: 5004 steps of 256.
  const Outcome imagenet = run_dlperf(dir, "plan --model resnet18-imagenet -b 256 --epochs 90");
  ASSERT_EQ(imagenet.exit_code, 0) << imagenet.err;
  EXPECT_NE(imagenet.out.find("(3x224x224, 1000 classes and 1281167 training images: what resnet18-imagenet is made for"),
            std::string::npos)
      << imagenet.out;
  EXPECT_NE(imagenet.out.find("(90 epochs of 5004 steps)"), std::string::npos) << imagenet.out;
  EXPECT_NE(p.out.find("parameters        11689512 "), std::string::npos) << p.out;  // torchvision's count, with 1000 classes
  const Outcome other = run_dlperf(dir, "plan --model resnet18-imagenet --input 3x64x64 -b 8 --dataset-size 64 --epochs 1");
  ASSERT_EQ(other.exit_code, 0) << other.err;
  EXPECT_NE(other.out.find("resnet18-imagenet on 3x64x64"), std::string::npos) << other.out;
  EXPECT_NE(other.out.find("(1000 classes: what resnet18-imagenet is made for"), std::string::npos) << other.out;
  const Outcome medium = run_dlperf(dir, "plan --model medium --epochs 1");
  EXPECT_EQ(medium.out.find("made for"), std::string::npos) << medium.out;
  const Outcome shown = run_dlperf(dir, "models show resnet18-imagenet");
  EXPECT_NE(shown.out.find("input 3x224x224, 1000 classes (per image; what resnet18-imagenet is made for"), std::string::npos) << shown.out;
  const Outcome listed = run_dlperf(dir, "models");
  EXPECT_NE(listed.out.find("3x224x224, 1000 classes"), std::string::npos) << listed.out;
}

// GPT-3 on one H100 takes centuries and millions of dollars: said as such, not as 2231805.6 h
// and $27428890.
// Where 'dlperf bench all' timed the engine's kernel pairs, every process here chooses by its
// medians instead of timing them itself (where they time close, single timings fell either side
// of the rule), and says so: the plan names the convolutions it planned as Winograd and why.
TEST(Cli, PlanChoosesTheKernelsBenchAllKept) {
  const hw::CpuInfo cpu = hw::cpu_info();
  auto plan_with = [&](double direct_over_winograd) {
    TempDir dir;
    const nlohmann::json profile = {{"cpu", cpu.model}, {"cpu_identity", hw::cpu_identity(hw::to_json(cpu))},
                                    {"threads", omp_get_max_threads()}, {"f32_gflops", 100.0}, {"bandwidth_gbps", {{"DRAM", 20.0}}},
                                    {"cpu_kernels", {{"direct_over_winograd", direct_over_winograd}, {"rounds", 7}}}};
    std::filesystem::create_directories(dir.path / "runs");
    std::ofstream(dir.path / "runs" / "machine-profile.json") << profile.dump();
    const Outcome o = run_dlperf(dir, "plan -m medium -b 64");
    EXPECT_EQ(o.exit_code, 0) << o.err;
    return o.out;
  };
  if (!cpu::winograd_kernel_here()) {  // no Winograd kernel here: the kept ratio cannot choose it
    const std::string out = plan_with(5.0);
    EXPECT_NE(out.find("convolutions      direct: direct only (oneDNN 2.6 has a Winograd kernel"), std::string::npos) << out;
    return;
  }
  const std::string kept = ", the median of 7 rounds of 'dlperf bench all', kept in runs/machine-profile.json; Winograd is taken above 1.3x)";
  const std::string fast = plan_with(5.0), close = plan_with(1.29);
  EXPECT_NE(fast.find("convolutions      Winograd for conv2, conv3: Winograd for 3x3 convolutions large enough (the direct kernel timed "
                      "5.00x Winograd's on 64 channels at 28x28, batch 4" + kept),
            std::string::npos) << fast;
  EXPECT_NE(close.find("convolutions      direct: direct only (the direct kernel timed 1.29x Winograd's on 64 channels at 28x28, batch 4" +
                       kept),
            std::string::npos) << close;
}

// Where the kernel's THP mode is madvise, dlperf's main starts itself again with glibc's malloc
// asking for huge pages for its heap (glibc 2.35 on; memory.cpp says why): then small
// buffers, oneDNN's and the data's sit in huge pages too. The record says what asked and how much
// of the process the kernel backed so. A logreg run's buffers are all under 2 MiB, so without the
// heap's asking nothing of it is in huge pages.
TEST(Cli, TheWholeHeapAsksForHugePagesWhereTheKernelWaitsToBeAsked) {
  auto record_with = [](const std::string& env) {
    TempDir dir;
    const std::string cmd = fmt::format("cd '{}' && env {} '{}' train -m logreg -d synthetic:1x28x28:6000 -b 16 --epochs 1 "
                                        "--no-progress >out.txt 2>err.txt",
                                        dir.path.string(), env, DLPERF_BIN);
    EXPECT_EQ(std::system(cmd.c_str()), 0) << slurp(dir.path / "err.txt");
    for (const auto& f : std::filesystem::directory_iterator(dir.path / "runs"))
      if (f.path().extension() == ".json") return nlohmann::json::parse(slurp(f.path()));
    ADD_FAILURE() << "no run record";
    return nlohmann::json();
  };
  const nlohmann::json asked = record_with("DLPERF_HUGE_PAGES=on"), not_heap = record_with("GLIBC_TUNABLES=glibc.malloc.hugetlb=0"),
                       off = record_with("DLPERF_HUGE_PAGES=off");
  const std::string malloc_asks = "asked for by glibc's malloc (glibc.malloc.hugetlb=1; transparent huge pages: madvise)";
  EXPECT_EQ(off["machine"]["huge_pages"], "off (DLPERF_HUGE_PAGES=off)");
  EXPECT_NE(not_heap["machine"]["huge_pages"], malloc_asks);
  int major = 0, minor = 0;
  std::sscanf(gnu_get_libc_version(), "%d.%d", &major, &minor);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizer's malloc: no second start. (Nor can a library be preloaded before its runtime.)
  const bool sanitized = true;
#else
  const bool sanitized = false;
  // Under valgrind, whose malloc replaces glibc's (its preloaded vgpreload_*.so says so), no second
  // start: valgrind itself cannot run this build (its AVX-512 code), so a harmless library under
  // that name stands in for it.
  TempDir preload;
  std::filesystem::create_symlink(DLPERF_FAKE_NVML, preload.path / "vgpreload_memcheck-amd64-linux.so");
  const nlohmann::json valgrind = record_with(fmt::format("LD_PRELOAD='{}'", (preload.path / "vgpreload_memcheck-amd64-linux.so").string()));
  EXPECT_NE(valgrind["machine"]["huge_pages"], malloc_asks);
#endif
  if (transparent_huge_pages_mode() != "madvise" || major * 100 + minor < 235 || sanitized) {
    EXPECT_NE(asked["machine"]["huge_pages"], malloc_asks);
    return;
  }
  EXPECT_EQ(asked["machine"]["huge_pages"], malloc_asks);
  EXPECT_EQ(not_heap["machine"]["huge_pages"], "asked for buffers of 2 MiB and more (transparent huge pages: madvise)");
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_EQ(valgrind["machine"]["huge_pages"], not_heap["machine"]["huge_pages"]);
#endif
  if (!std::filesystem::exists("/proc/self/smaps_rollup")) return;
  EXPECT_GT(asked["summary"]["huge_page_bytes"].get<double>(), 0) << "the heap asked, and the kernel gave none";
  EXPECT_EQ(not_heap["summary"]["huge_page_bytes"].get<double>(), 0);
  EXPECT_EQ(off["summary"]["huge_page_bytes"].get<double>(), 0);
}

TEST(Cli, PlanSaysLongJobsInYearsAndGroupsTheDigitsOfCosts) {
  TempDir dir;
  const Outcome o = run_dlperf(dir, "plan --transformer gpt3-175b --tokens 300e9 --batch-size 1536 --targets h100-sxm");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_TRUE(std::regex_search(o.out, std::regex(R"(  \d+ years  )"))) << o.out;
  EXPECT_TRUE(std::regex_search(o.out, std::regex(R"(\$\d{1,3}(,\d{3}){2,}  )"))) << o.out;
}

// A job that no change the planner tries can fit says so in words, not "it would with nothing";
// a size beyond terabytes reads in PB or EB.
TEST(Cli, PlanSaysWhenNothingMakesAJobFit) {
  TempDir dir;
  const Outcome o = run_dlperf(dir, "plan --transformer 96,1000000,100,2048,50257 --targets h100-sxm --json t.json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("h100-sxm does not fit at --tp 1 --pp 1, even with ZeRO-3, full activation checkpointing and "
                       "micro-batch 1: raise --tp or --pp"),
            std::string::npos)
      << o.out;
  EXPECT_EQ(o.out.find("with nothing"), std::string::npos) << o.out;
  EXPECT_TRUE(std::regex_search(o.out, std::regex(R"(\d+\.\d\d PB / 80\.00 GB)"))) << o.out;
  const nlohmann::json j = nlohmann::json::parse(slurp(dir.path / "t.json"));
  EXPECT_FALSE(j["targets"]["rows"][0]["fits"].get<bool>());
  EXPECT_TRUE(j["targets"]["rows"][0]["what_fits"].is_null());
  // A CNN that does not fit even one image per device says that, not a batch size of 0.
  // (At 3x4096x4096 its first linear layer's weight holds 1e11 values, which the CPU engine
  // refuses; at 512x512, 1.6e9 parameters with their gradients and momentum take 20 GB.)
  const Outcome c = run_dlperf(dir, "plan --model large --input 3x512x512 --batch-size 1 --targets t4");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.out.find("t4 does not fit even at batch 1 per device"), std::string::npos) << c.out;
}

// plan --json writes what the console shows: the same parameters, peak memory, targets and
// layers, numbers in SI units (it only wrote --against's comparison before).
TEST(Cli, PlanWritesItsPlanAsJson) {
  TempDir dir;
  const Outcome o = run_dlperf(dir, "plan --model small --batch-size 32 --targets cpu,h100-sxm,t4 --precision bf16 --scaling 4 --layers --json p.json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const nlohmann::json j = nlohmann::json::parse(slurp(dir.path / "p.json"));
  EXPECT_EQ(j["model"], "small");
  EXPECT_NE(o.out.find(fmt::format("parameters        {} ", j["parameters"].get<int64_t>())), std::string::npos) << o.out;
  EXPECT_NE(o.out.find(format_bytes(j["memory_bytes"]["total"].get<double>())), std::string::npos);
  double sum = 0;
  for (const auto& [k, v] : j["memory_bytes"].items())
    if (k != "total" && k != "available" && k != "fits") sum += v.get<double>();
  EXPECT_EQ(sum, j["memory_bytes"]["total"].get<double>());
  // The step's parts add up to the step, the per-step overhead included (the console named only
  // forward, backward and optimizer, which left a third of a tiny model's step unexplained).
  const nlohmann::json& step = j["step"];
  EXPECT_GT(step["overhead_s"].get<double>(), 0);
  EXPECT_NEAR(step["forward_s"].get<double>() + step["backward_s"].get<double>() + step["optimizer_s"].get<double>() +
                  step["overhead_s"].get<double>(),
              step["step_s"].get<double>(), 1e-12);
  EXPECT_NE(o.out.find(", per-step overhead "), std::string::npos) << o.out;
  // Where this CPU plans bf16 (AVX512-BF16), it plans fp32 beside it: step and peak memory.
  ASSERT_EQ(j["fp32_here"].is_object(), j["cpu_precision"] == "bf16") << j["fp32_here"].dump();
  if (j["fp32_here"].is_object()) {
    const double fp32_s = j["fp32_here"]["step_s"], bf16_s = step["step_s"];
    EXPECT_GT(j["fp32_here"]["peak_bytes"].get<double>(), j["memory_bytes"]["total"].get<double>()) << "bf16 activations are half";
    EXPECT_NE(o.out.find(fmt::format("against fp32      {} a step in fp32: bf16 is planned {:.2f}x {}", format_seconds(fp32_s),
                                     fp32_s >= bf16_s ? fp32_s / bf16_s : bf16_s / fp32_s, fp32_s >= bf16_s ? "faster" : "slower")),
              std::string::npos)
        << o.out;
  }
  ASSERT_EQ(j["targets"]["rows"].size(), 3u);
  EXPECT_EQ(j["targets"]["rows"][1]["target"], "h100-sxm");
  EXPECT_GT(j["targets"]["rows"][1]["step_s"].get<double>(), 0);
  EXPECT_EQ(j["targets"]["rows"][2]["unsupported"], "no bf16 peak in the catalog (it lists fp16, fp32)");
  // With --layers a GPU target's step is also listed pass by pass, the passes adding up to its
  // row's step; none for the T4, which cannot run the job.
  ASSERT_TRUE(j["targets"]["gpu_passes"].contains("h100-sxm")) << j["targets"].dump();
  EXPECT_FALSE(j["targets"]["gpu_passes"].contains("t4"));
  double passes = 0;
  for (const auto& p : j["targets"]["gpu_passes"]["h100-sxm"]) passes += p["predicted_s"].get<double>();
  EXPECT_NEAR(passes, j["targets"]["rows"][1]["step_s"].get<double>(), 1e-9 * passes);
  EXPECT_NE(o.out.find("On h100-sxm, pass by pass (dlperf's GPU kernels in bf16, nhwc layout"), std::string::npos) << o.out;
  EXPECT_EQ(j["scaling"]["rows"].size(), 3u);  // 1, 2, 4 devices
  EXPECT_EQ(j["layers"].size(), nn::build_graph(nn::load_model("small"), {1, 28, 28}, 10, 32).nodes.size());
  EXPECT_EQ(j["layers"][0]["layer"], "conv1");
  EXPECT_EQ(j["augment"], false);
  // Random crops and flips fill the batch at their own rate (the rest of the overhead: 3 calls at
  // the cost measured for this plan, and the hand-off from the one worker); said in the header.
  const Outcome aug = run_dlperf(dir, "plan --model small --batch-size 32 --augment --json a.json");
  ASSERT_EQ(aug.exit_code, 0) << aug.err;
  EXPECT_NE(aug.out.find("1 loader worker, augmented, on this CPU"), std::string::npos) << aug.out;
  const nlohmann::json a = nlohmann::json::parse(slurp(dir.path / "a.json"));
  EXPECT_EQ(a["augment"], true);
  const plan::EngineModel m = plan::engine_model(hw::cpu_info().isa);
  EXPECT_NEAR(a["step"]["overhead_s"].get<double>(), 32 * 28 * 28 * m.loader_augmented_ns_per_pixel * 1e-9 +
                  m.step_calls * a["ceilings"]["call_overhead_us"].get<double>() * 1e-6 + m.loader_handoff_s, 1e-12);
  EXPECT_EQ(a["threads"], hw::usable_cpus());  // all of them, as train's default
  // --threads plans this CPU's section and its cpu target on that many threads, as train takes it.
  const Outcome one = run_dlperf(dir, "plan --model mlp --batch-size 16 --threads 1 --targets cpu --json one.json");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.out.find("on this CPU (1 thread, fp32)"), std::string::npos) << one.out;
  const nlohmann::json oj = nlohmann::json::parse(slurp(dir.path / "one.json"));
  EXPECT_EQ(oj["threads"], 1);
  EXPECT_EQ(oj["targets"]["rows"][0]["step_s"], oj["step"]["step_s"]);
  EXPECT_TRUE(oj["one_thread"].is_null());  // asked for: nothing to compare with
  // A step under a millisecond on all cores is also planned on one thread, and said where faster.
  const Outcome all = run_dlperf(dir, "plan --model mlp --batch-size 16 --targets cpu --json all.json");
  ASSERT_EQ(all.exit_code, 0) << all.err;
  const nlohmann::json aj = nlohmann::json::parse(slurp(dir.path / "all.json"));
  // (On a busy machine an engine call, measured as the plan runs, can take milliseconds: the step
  // is then over the millisecond, and not planned on one thread.)
  EXPECT_EQ(aj["one_thread"].is_object(), aj["step"]["step_s"].get<double>() < 1e-3 && hw::usable_cpus() > 1) << aj.dump();
  if (aj["one_thread"].is_object()) {
    const double speedup = aj["one_thread"]["speedup"];
    EXPECT_NEAR(speedup, aj["step"]["step_s"].get<double>() / aj["one_thread"]["step_s"].get<double>(), 1e-9);
    EXPECT_EQ(all.out.find("fewer threads     1 thread is planned at") != std::string::npos, speedup >= 1.05) << all.out;
  } else {
    EXPECT_TRUE(aj["one_thread"].is_null());
  }
  // small at batch 32: a step of milliseconds here, so not planned on one thread (a fast CPU may differ)
  EXPECT_EQ(j["one_thread"].is_null(), j["step"]["step_s"].get<double>() >= 1e-3 || hw::usable_cpus() == 1);
  const Outcome t = run_dlperf(dir, "plan --transformer gpt2-small --json t.json");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const nlohmann::json tj = nlohmann::json::parse(slurp(dir.path / "t.json"));
  EXPECT_EQ(tj["transformer"]["layers"], 12);
  EXPECT_EQ(tj["targets"]["rows"].size(), 3u);  // the default a100-80gb, h100-sxm, h200
  for (const auto& row : tj["targets"]["rows"]) {  // the model FLOPs utilization each row comes to, in its own column
    EXPECT_GT(row["mfu"].get<double>(), 0) << row.dump();
    EXPECT_LE(row["mfu"].get<double>(), 1) << row.dump();
  }
  EXPECT_TRUE(std::regex_search(t.out, std::regex(R"(scaling eff +MFU +job)"))) << t.out;
  EXPECT_NE(t.out.find("* MFU: the model's training FLOPs a step"), std::string::npos) << t.out;
  EXPECT_TRUE(tj["scaling"].is_null());
  // A CNN plan has no MFU column, and null in its JSON rows.
  EXPECT_EQ(run_dlperf(dir, "plan --model small --targets h100-sxm").out.find("MFU"), std::string::npos);
}

// A pipelined Transformer's plan says how long its pipeline idles and what would cut that; with
// --virtual-stages it plans Megatron's interleaved schedule, and the JSON has both.
TEST(Cli, PlanSaysHowLongThePipelineIdles) {
  TempDir dir;
  const std::string job = "plan --transformer gpt3-175b --precision bf16 --optimizer adamw --dp 64 --tp 8 --pp 16 --zero 1 --targets h100-sxm";
  const Outcome o = run_dlperf(dir, job + " --batch-size 1536 --json p.json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("micro-batch 1 (24 a step)\npipeline idle  62% of the busy time: (pp - 1) / micro-batches = 15 / 24\n"
                       "  * --virtual-stages V (Megatron's interleaved 1F1B: each device's 6 layers in V chunks) divides it by V where "
                       "micro-batches are a multiple of pp, for V = 2, 3, 6;\n    it holds 1.47x the activations at V = 2\n"),
            std::string::npos)
      << o.out;
  EXPECT_TRUE(std::regex_search(o.out, std::regex(R"(ring \(tp [0-9.]+ ms, pp [0-9.]+ ms\))"))) << o.out;
  const nlohmann::json p = nlohmann::json::parse(slurp(dir.path / "p.json"));
  EXPECT_EQ(p["layout"]["virtual_stages"], 1);
  EXPECT_EQ(p["layout"]["micro_batches"], 24);
  EXPECT_DOUBLE_EQ(p["layout"]["pipeline_bubble"].get<double>(), 15.0 / 24);
  EXPECT_GT(p["targets"]["rows"][0]["pp_comm_s"].get<double>(), 0);
  const Outcome v = run_dlperf(dir, job + " --batch-size 3072 --virtual-stages 3 --json v.json");
  ASSERT_EQ(v.exit_code, 0) << v.err;
  EXPECT_NE(v.out.find("pipeline 16 (interleaved: 3 chunks a device), ZeRO 1, checkpointing none, micro-batch 1 (48 a step)\n"
                       "pipeline idle  10% of the busy time: (pp - 1) / (virtual stages x micro-batches) = 15 / 144\n"),
            std::string::npos)
      << v.out;
  const nlohmann::json vj = nlohmann::json::parse(slurp(dir.path / "v.json"));
  EXPECT_EQ(vj["layout"]["virtual_stages"], 3);
  EXPECT_GT(vj["targets"]["rows"][0]["mfu"].get<double>(), p["targets"]["rows"][0]["mfu"].get<double>());
  // Too few micro-batches to fill the stages: said, with what would fill them.
  const Outcome few = run_dlperf(dir, "plan --transformer gpt3-175b --batch-size 8 --tp 8 --pp 16 --virtual-stages 3 --targets h100-sxm");
  ASSERT_EQ(few.exit_code, 0) << few.err;
  EXPECT_NE(few.out.find("pipeline idle  129% of the busy time: (pp - 1 + (virtual stages - 1) x (pp - micro-batches mod pp)) / "
                         "(virtual stages x micro-batches) = (15 + 2 x 8) / 24\n"
                         "  * 8 micro-batches a step cannot fill 16 stages: a larger --batch-size gives each step 16 or more\n"),
            std::string::npos)
      << few.out;
}

// --devices N searches the layouts of N devices, prints the fastest that fit, and plans the first.
TEST(Cli, PlanFindsTheFastestLayoutOfTheDevices) {
  TempDir dir;
  const Outcome o = run_dlperf(dir, "plan --transformer gpt2-small --batch-size 64 --precision bf16 --optimizer adamw --devices 8 "
                                    "--targets h100-sxm,a100-80gb --json p.json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_TRUE(std::regex_search(o.out, std::regex(R"(Layouts of 8 h100-sxm devices, fastest first \(\d+ of the \d+ tried fit; the plan takes the first\):)")))
      << o.out;
  EXPECT_NE(o.out.find("\nlayout: data 8 x tensor 1 x pipeline 1, ZeRO 1, checkpointing none, micro-batch 8 (1 a step)\n"), std::string::npos)
      << o.out;
  const nlohmann::json p = nlohmann::json::parse(slurp(dir.path / "p.json"));
  EXPECT_EQ(p["layouts"]["target"], "h100-sxm");
  EXPECT_EQ(p["layouts"]["rows"][0]["dp"], 8);
  EXPECT_EQ(p["layout"]["dp"], 8);  // the plan is the first row's
  EXPECT_DOUBLE_EQ(p["layouts"]["rows"][0]["estimate"]["step_s"].get<double>(), p["targets"]["rows"][0]["step_s"].get<double>());
  EXPECT_EQ(p["targets"]["rows"].size(), 2u);  // and every target is planned at it
  // The degrees given stay.
  const Outcome kept = run_dlperf(dir, "plan --transformer gpt2-small --batch-size 64 --devices 8 --tp 2 --checkpointing full");
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  EXPECT_NE(kept.out.find("\nlayout: data 4 x tensor 2 x pipeline 1, ZeRO 0, checkpointing full"), std::string::npos) << kept.out;
}

// --grad-overlap: a CNN's scaling overlaps its all-reduce as PyTorch DDP does unless told not to;
// a Transformer's only when asked, as Megatron-LM; the comm column says how much is hidden; a plan
// without data parallelism refuses the flag rather than ignore it.
TEST(Cli, PlanOverlapsTheGradientsAllReduceAsTheFrameworksDo) {
  TempDir dir;
  const Outcome cnn = run_dlperf(dir, "plan --model resnet18-imagenet --batch-size 64 --targets h100-sxm --scaling 16 --json on.json");
  ASSERT_EQ(cnn.exit_code, 0) << cnn.err;
  EXPECT_NE(cnn.out.find("(data parallel; the gradients all-reduced in buckets during the backward pass"), std::string::npos) << cnn.out;
  const Outcome off = run_dlperf(dir, "plan --model resnet18-imagenet --batch-size 64 --targets h100-sxm --scaling 16 --grad-overlap off --json off.json");
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_NE(off.out.find("not overlapped (--grad-overlap on overlaps them)"), std::string::npos) << off.out;
  const auto weak_s = [&](const char* file) {
    return nlohmann::json::parse(slurp(dir.path / file))["scaling"]["rows"][4]["weak"]["step_s"].get<double>();  // 16 devices
  };
  EXPECT_LT(weak_s("on.json"), weak_s("off.json"));
  // The weak-scaling comm column says how much of it the backward pass hides.
  const nlohmann::json weak16 = nlohmann::json::parse(slurp(dir.path / "on.json"))["scaling"]["rows"][4]["weak"];
  EXPECT_GT(weak16["comm_hidden_s"].get<double>(), 0);
  EXPECT_TRUE(std::regex_search(cnn.out, std::regex("\n16 +" + format_seconds(weak16["step_s"].get<double>()) + " +" +
                                                     format_seconds(weak16["comm_s"].get<double>()) + " (ring|tree) \\(" +
                                                     format_seconds(weak16["comm_hidden_s"].get<double>()) + " hidden\\) ")))
      << cnn.out;

  const std::string gpt = "plan --transformer gpt2-small --batch-size 64 --precision bf16 --optimizer adamw --dp 4 --targets h100-sxm";
  const Outcome megatron = run_dlperf(dir, gpt + " --json t.json");
  ASSERT_EQ(megatron.exit_code, 0) << megatron.err;
  EXPECT_EQ(nlohmann::json::parse(slurp(dir.path / "t.json"))["targets"]["rows"][0]["comm_hidden_s"], 0.0);
  const Outcome overlapped = run_dlperf(dir, gpt + " --grad-overlap on --json t.json");
  ASSERT_EQ(overlapped.exit_code, 0) << overlapped.err;
  const nlohmann::json row = nlohmann::json::parse(slurp(dir.path / "t.json"))["targets"]["rows"][0];
  EXPECT_GT(row["comm_hidden_s"].get<double>(), 0);
  EXPECT_GT(row["gradient_buckets"].get<int>(), 1);
  EXPECT_NE(overlapped.out.find(format_seconds(row["comm_hidden_s"].get<double>()) + " hidden)"), std::string::npos) << overlapped.out;

  // Smaller buckets start sooner: ResNet-18's 23 MB of bf16 gradients in DDP's 25 MiB buckets
  // are all but one bucket that fills as the backward pass ends.
  const std::string bf16 = "plan --model resnet18-imagenet --batch-size 64 --precision bf16 --targets h100-sxm --scaling 16 --json b.json";
  ASSERT_EQ(run_dlperf(dir, bf16).exit_code, 0);
  const double ddp_s = weak_s("b.json");
  ASSERT_EQ(run_dlperf(dir, bf16 + " --bucket-mb 5").exit_code, 0);
  EXPECT_LT(weak_s("b.json"), ddp_s);
  const Outcome not_overlapped = run_dlperf(dir, "plan --model small --scaling 4 --grad-overlap off --bucket-mb 5");
  EXPECT_NE(not_overlapped.exit_code, 0);
  EXPECT_NE(not_overlapped.err.find("--bucket-mb sizes the buckets of an all-reduce overlapped with the backward pass, and --grad-overlap is off"),
            std::string::npos)
      << not_overlapped.err;
  const Outcome megatron_default = run_dlperf(dir, gpt + " --bucket-mb 5");
  EXPECT_NE(megatron_default.exit_code, 0);
  EXPECT_NE(megatron_default.err.find("add --grad-overlap on, or drop --bucket-mb"), std::string::npos) << megatron_default.err;

  const Outcome alone = run_dlperf(dir, "plan --model small --grad-overlap on");
  EXPECT_NE(alone.exit_code, 0);
  EXPECT_NE(alone.err.find("--grad-overlap changes how data parallelism's all-reduce runs, and this plan has no data parallelism"),
            std::string::npos)
      << alone.err;
  EXPECT_NE(alone.err.find("add --scaling N"), std::string::npos) << alone.err;
}

// --nic-gbits and --node-size: a slower network slows the steps that cross nodes and no other;
// tensor parallelism over smaller nodes goes over the network; a plan of one device refuses both.
TEST(Cli, PlanTakesTheClustersNetworkAndNodes) {
  TempDir dir;
  const std::string scaling = "plan --model small --targets h100-sxm --scaling 16 --json p.json";
  const auto weak_steps = [&](const std::string& flags) {
    const Outcome o = run_dlperf(dir, scaling + flags);
    EXPECT_EQ(o.exit_code, 0) << o.err;
    const nlohmann::json plan = nlohmann::json::parse(slurp(dir.path / "p.json"));
    std::vector<double> steps;
    for (const auto& row : plan["scaling"]["rows"]) steps.push_back(row["weak"]["step_s"]);
    return steps;  // 1, 2, 4, 8, 16 devices
  };
  const std::vector<double> ndr = weak_steps(""), slow = weak_steps(" --nic-gbits 25");
  ASSERT_EQ(slow.size(), 5u);
  for (size_t i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(slow[i], ndr[i]) << "inside a node of 8";
  EXPECT_GT(slow[4], ndr[4]);
  const std::vector<double> small_nodes = weak_steps(" --node-size 4");
  EXPECT_DOUBLE_EQ(small_nodes[2], ndr[2]);
  EXPECT_GT(small_nodes[3], ndr[3]);  // 8 devices are two nodes of 4

  const std::string gpt = "plan --transformer gpt2-small --batch-size 64 --precision bf16 --tp 4 --targets h100-sxm --json t.json";
  const auto tp_comm_s = [&](const std::string& flags) {
    EXPECT_EQ(run_dlperf(dir, gpt + flags).exit_code, 0);
    return nlohmann::json::parse(slurp(dir.path / "t.json"))["targets"]["rows"][0]["tp_comm_s"].get<double>();
  };
  EXPECT_GT(tp_comm_s(" --node-size 2"), 2 * tp_comm_s(""));  // NVLink's 480 GB/s against the network's 50

  // This CPU, which has no interconnect, is a node of its own on the network (its link was a
  // fixed 1 GB/s whatever the network).
  const auto cpu_pair_s = [&](const std::string& flags) {
    EXPECT_EQ(run_dlperf(dir, "plan --model small --scaling 2 --grad-overlap off --json c.json" + flags).exit_code, 0);
    // One ring all-reduce over 2: the bytes over the link, plus 2 messages' 10 us latency.
    return nlohmann::json::parse(slurp(dir.path / "c.json"))["scaling"]["rows"][1]["weak"]["comm_s"].get<double>() - 20e-6;
  };
  EXPECT_NEAR(cpu_pair_s(" --nic-gbits 10") / cpu_pair_s(" --nic-gbits 400"), 40, 1e-6);

  for (const char* flag : {"--nic-gbits 100", "--node-size 4"}) {
    const Outcome one = run_dlperf(dir, std::string("plan --model small ") + flag);
    EXPECT_NE(one.exit_code, 0) << flag;
    EXPECT_NE(one.err.find("describes how a job's devices are connected, and this plan is of one device"), std::string::npos) << one.err;
  }
}

// A target without a peak for the precision is a row of dashes with the reason below, not the
// reason in the CO2 column (which pushed every other row's CO2 figure 30 columns right).
TEST(Cli, PlanSaysBelowTheTableWhyATargetHasNoRow) {
  TempDir dir;
  const Outcome o = run_dlperf(dir, "plan --model small --precision bf16 --targets h100-sxm,t4");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_TRUE(std::regex_search(o.out, std::regex(R"(\nt4( +-){10}\n)"))) << o.out;
  EXPECT_NE(o.out.find("  * t4: no bf16 peak in the catalog (it lists fp16, fp32)"), std::string::npos) << o.out;
  EXPECT_TRUE(std::regex_search(o.out, std::regex(R"(\nh100-sxm .* <\$0\.01 )"))) << o.out;  // a second on an H100: under a cent, not "$0.00"
}

// A job one of dlperf's engines cannot run (a tensor past the 2^31 - 1 values it indexes) is still
// planned for the targets whose engine takes it: the plan used to end in the CPU engine's error,
// whatever the targets. The CPU engine indexes every tensor in 32 bits; the GPU engine only its
// convolutions (cuDNN's descriptors), so a big linear layer runs on a GPU and a big conv does not.
TEST(Cli, AJobOneEngineCannotRunIsPlannedForTheOthers) {
  TempDir dir;
  const Outcome o = run_dlperf(dir, "plan --model mlp --input 3x512x512 --batch-size 4096 --targets h100-sxm,cpu --scaling 2 --layers --json p.json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const std::string refusal = "layer 'fc1' (linear): its input 4096x786432 holds 3.22e+09 values, more than the 2^31 - 1 the CPU engine (oneDNN) indexes";
  EXPECT_NE(o.out.find("this CPU          dlperf's CPU engine cannot run it: " + refusal), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("  * cpu: dlperf's CPU engine cannot run it: " + refusal), std::string::npos) << o.out;
  EXPECT_TRUE(std::regex_search(o.out, std::regex(R"(\nh100-sxm +1 +[0-9.]+ GB / 80\.00 GB +yes )"))) << o.out;
  EXPECT_NE(o.out.find("Scaling on h100-sxm"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("No per-layer plan"), std::string::npos) << o.out;
  const nlohmann::json j = nlohmann::json::parse(slurp(dir.path / "p.json"));
  EXPECT_TRUE(j["memory_bytes"].is_null());
  EXPECT_TRUE(j["step"].is_null());
  EXPECT_NE(j["cpu_cannot_run"].get<std::string>().find(refusal), std::string::npos);
  EXPECT_TRUE(j["targets"]["rows"][0]["fits"].get<bool>());
  EXPECT_NE(j["targets"]["rows"][1]["unsupported"].get<std::string>().find(refusal), std::string::npos);
  EXPECT_EQ(j["scaling"]["rows"].size(), 2u);

  // Every GPU refuses the same conv: one note names them all.
  const Outcome conv = run_dlperf(dir, "plan --model small --input 3x512x512 --batch-size 4096 --targets h100-sxm,h200");
  ASSERT_EQ(conv.exit_code, 0) << conv.err;
  EXPECT_NE(conv.out.find("  * h100-sxm, h200: dlperf's GPU engine cannot run it: layer 'conv1' (conv2d): its input 4096x3x512x512 holds "
                          "3.22e+09 values, more than the 2^31 - 1 cuDNN's convolution indexes"),
            std::string::npos)
      << conv.out;
  // Scaling on a target that cannot run the job says why; it printed a table of inf and nan.
  const Outcome fp16 = run_dlperf(dir, "plan --model small --precision fp16 --scaling 2");
  ASSERT_EQ(fp16.exit_code, 0) << fp16.err;
  EXPECT_NE(fp16.out.find("No scaling on cpu: dlperf's CPU engine trains fp32"), std::string::npos) << fp16.out;
  EXPECT_EQ(fp16.out.find("nan"), std::string::npos) << fp16.out;
}

// A real Ctrl-C (SIGINT) once the first epoch's row is out: training stops at its next step, says
// where it stopped without calling it an error, keeps the finished epochs' record, exits 130.
TEST(Cli, CtrlCStopsTrainingKeepingTheFinishedEpochsAndExits130) {
  TempDir dir;
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::signal(SIGINT, SIG_DFL);  // as at a terminal, whatever the test runner ignores
    if (::chdir(dir.path.c_str()) != 0) std::_Exit(127);
    const int err = ::open("err.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    ::close(out[0]);
    ::execl(DLPERF_BIN, "dlperf", "train", "--device", "cpu", "--model", "small", "--data", "synthetic:1x12x12:512", "--batch-size",
            "32", "--epochs", "10000", "--runs-dir", "runs", "--no-progress", static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  ::close(out[1]);
  std::string printed;
  char buf[4096];
  ssize_t n = 0;
  while (printed.find("\n    1 ") == std::string::npos && (n = ::read(out[0], buf, sizeof buf)) > 0) printed.append(buf, size_t(n));
  ::kill(pid, SIGINT);
  while ((n = ::read(out[0], buf, sizeof buf)) > 0) printed.append(buf, size_t(n));
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "ended by a signal: the first Ctrl-C must only ask";
  EXPECT_EQ(WEXITSTATUS(status), 130);
  const std::string err = slurp(dir.path / "err.txt");
  EXPECT_NE(err.find("dlperf: stopped by SIGINT (Ctrl-C) in epoch "), std::string::npos) << err;
  EXPECT_EQ(err.find("error"), std::string::npos) << err;
  EXPECT_NE(printed.find("run record: runs/"), std::string::npos) << printed;
  size_t records = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir.path / "runs")) {
    const nlohmann::json rec = nlohmann::json::parse(std::ifstream(f.path()));
    EXPECT_EQ(rec["stopped"]["in_epoch"], rec["summary"]["epochs_run"].get<int>() + 1);
    ++records;
  }
  EXPECT_EQ(records, 1u);
}

// Ctrl-C in a bench sweep ends it after the benchmark it stops: what finished is written, with
// the signal, the machine profile (which needs the whole sweep) is left alone, and the exit is 130.
TEST(Cli, CtrlCStopsABenchSweepKeepingTheFinishedBenchmarks) {
  TempDir dir;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::signal(SIGINT, SIG_DFL);  // as at a terminal, whatever the test runner ignores
    if (::chdir(dir.path.c_str()) != 0) std::_Exit(127);
    ::setenv("DLPERF_TEST_SIGINT_AFTER", "copy", 1);  // the user's Ctrl-C, once the host-device copies finished
    const int out = ::open("out.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open("err.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    ::execl(DLPERF_BIN, "dlperf", "bench", "all", "--quick", "--json", "b.json", static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "ended by a signal: the first Ctrl-C must only ask";
  EXPECT_EQ(WEXITSTATUS(status), 130);
  const std::string err = slurp(dir.path / "err.txt");
  // Without a GPU the GPU benchmarks are skipped, written but not counted as finished.
  const std::string finished =
      has_gpu() ? "memory, flops, gemm, conv, gpu_gemm, gpu_conv, cpu_kernels, cpu_launch, copy" : "memory, flops, gemm, conv, cpu_kernels, cpu_launch";
  EXPECT_NE(err.find("stopped by SIGINT (Ctrl-C): the finished benchmarks (" + finished +
                     ") are in b.json, and runs/machine-profile.json was left as it was"),
            std::string::npos)
      << err;
  const nlohmann::json b = nlohmann::json::parse(slurp(dir.path / "b.json"));
  EXPECT_TRUE(b.contains("memory") && b.contains("flops") && b.contains("copy"));
  EXPECT_FALSE(b.contains("launch")) << "the sweep went on after the signal";
  EXPECT_EQ(b["stopped"]["finished"].size(), has_gpu() ? 9u : 6u);
  EXPECT_FALSE(std::filesystem::exists(dir.path / "runs" / "machine-profile.json"));
}

}  // namespace
}  // namespace dlperf::test
