// Training end to end: it learns, it is deterministic whatever the number of loader workers,
// a resumed run ends with the same weights as an uninterrupted one, and bad settings or a
// diverging loss stop it with a clear message.
#include <gtest/gtest.h>
#include <omp.h>
#include <zlib.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include "backend/cpu/ops.h"
#include "backend/cuda/runtime.h"
#include "core/error.h"
#include "core/files.h"
#include "core/interrupt.h"
#include "core/version.h"
#include "hw/cpu_info.h"
#include "nn/graph.h"
#include "plan/memory.h"
#include "train/checkpoint.h"
#include "train/detail.h"
#include "train/trainer.h"
#include "test_util.h"

namespace dlperf::test {
namespace {

namespace fs = std::filesystem;

train::TrainConfig tiny() {
  train::TrainConfig c;
  c.model = "small";
  c.device = "cpu";  // the CPU engine's tests; the GPU's are in test_cuda.cpp
  c.data = "synthetic:1x12x12:1500";
  c.epochs = 3;
  c.batch = 32;
  c.lr = 0.05;
  c.workers = 0;
  c.threads = 2;
  c.quiet = true;
  c.runs_dir = "";
  c.augment = true;  // exercise crops and flips in determinism and resume checks
  return c;
}

TEST(Train, LearnsTheSyntheticTaskAndWritesARunRecord) {
  TempDir runs;
  auto c = tiny();
  c.runs_dir = runs.path.string();
  auto r = train::train(c);
  ASSERT_EQ(r.epochs.size(), 3u);
  EXPECT_LT(r.epochs.back().train_loss, 0.5 * r.epochs.front().train_loss);
  EXPECT_GE(r.epochs.back().test_acc, 0.90);
  EXPECT_GT(r.epochs.back().images_per_s, 0);
  EXPECT_GT(r.epochs.back().peak_bytes, 0);
  ASSERT_TRUE(fs::exists(r.record_path));
  auto j = nlohmann::json::parse(std::ifstream(r.record_path));
  EXPECT_EQ(j["config"]["model"], "small");
  EXPECT_EQ(j["config"]["deterministic"], false);  // --deterministic (GPU convolutions) was not asked for
  EXPECT_EQ(j["dlperf_commit"], dlperf_commit());  // the code behind the numbers
  EXPECT_FALSE(j["dlperf_commit"].get<std::string>().empty());
  EXPECT_EQ(j["epochs"].size(), 3u);
  EXPECT_GT(j["machine"]["cpu"]["peak_gflops_f32"].get<double>(), 0);
  EXPECT_GT(j["epochs"][0]["peak_bytes_by_category"]["parameters"].get<double>(), 0);
  EXPECT_GT(j["epochs"][0]["peak_bytes_by_category"]["activations"].get<double>(), 0);
  EXPECT_EQ(j["summary"]["final_test_acc"], r.epochs.back().test_acc);
  // Whether 3x3 convolutions may run as Winograd here, and which did: none of small's at batch 32
  // on 12x12 maps, too few tiles (cpu::winograd_pays).
  EXPECT_EQ(j["cpu_step"]["winograd"], cpu::winograd_choice().why);
  EXPECT_EQ(j["cpu_step"]["winograd_layers"], nlohmann::json::array());
  c.model = "mlp";  // no convolution: nothing to say
  c.epochs = 1;
  const auto mlp = nlohmann::json::parse(std::ifstream(train::train(c).record_path));
  EXPECT_FALSE(mlp.contains("cpu_step") && mlp["cpu_step"].contains("winograd")) << mlp["cpu_step"];
}

// On a CPU with AVX512-BF16, bf16 (conv and linear from bf16 copies) learns what fp32 learns, its
// record says bf16, and the memory model's bf16 rules stay within 10% of the measured peak.
TEST(Train, Bf16OnTheCpuLearnsLikeFp32) {
  if (!hw::cpu_info().avx512_bf16) GTEST_SKIP() << "this CPU has no AVX512-BF16; bf16 training is refused on it";
  TempDir runs;
  auto c = tiny();
  c.runs_dir = runs.path.string();
  const auto fp32 = train::train(c);
  c.precision = "bf16";
  const auto bf16 = train::train(c);
  EXPECT_EQ(bf16.record["config"]["precision"], "bf16");
  EXPECT_LT(bf16.epochs.back().train_loss, 0.5 * bf16.epochs.front().train_loss);
  EXPECT_NEAR(bf16.epochs.back().test_acc, fp32.epochs.back().test_acc, 0.05);
  EXPECT_NE(bf16.epochs.back().train_loss, fp32.epochs.back().train_loss);  // bf16 really ran
  const nn::Graph g = nn::build_graph(nn::load_model(c.model), {1, 12, 12}, 10, c.batch);
  // Laid out on the run's threads, as plan --against does: oneDNN sizes some scratchpads by the
  // threads it will fork: at a 16-thread default (the GPU host; OMP_NUM_THREADS=16 here does the
  // same) the plan came out 1.28 times this 2-thread run's peak.
  const hw::ScopedThreads run_threads(c.threads);
  const double predicted = plan::engine_memory(g, c.optimizer, c.workers, "bf16").total();
  EXPECT_NEAR(predicted / bf16.record["summary"]["peak_bytes"].get<double>(), 1.0, 0.05);  // as fp32's (PlanMemory.*)
}

TEST(Train, SameWeightsForAnyNumberOfWorkers) {
  auto c = tiny();
  c.epochs = 1;
  c.model = "medium";  // has dropout too
  auto a = train::train(c);
  c.workers = 3;
  auto b = train::train(c);
  EXPECT_EQ(a.weights, b.weights);
  c.seed = 43;
  EXPECT_NE(train::train(c).weights, a.weights);
}

TEST(Train, ResumeEndsWithTheSameWeightsAsAnUninterruptedRun) {
  TempDir ck;
  auto c = tiny();
  c.model = "medium";
  auto whole = train::train(c);
  c.checkpoint_dir = ck.path.string();
  c.stop_after_epochs = 1;  // as if killed after epoch 1
  train::train(c);
  ASSERT_TRUE(fs::exists(train::checkpoint_path(c.checkpoint_dir)));
  EXPECT_FALSE(fs::exists(train::checkpoint_path(c.checkpoint_dir) + ".tmp"));
  c.stop_after_epochs = 0;
  c.resume = true;
  auto resumed = train::train(c);
  EXPECT_EQ(resumed.weights, whole.weights);
  ASSERT_EQ(resumed.epochs.size(), 3u);  // history carried over
  EXPECT_EQ(resumed.epochs[0].train_loss, whole.epochs[0].train_loss);
  EXPECT_EQ(resumed.epochs[2].test_acc, whole.epochs[2].test_acc);
  // What resuming says: the epochs it trains, or that --epochs leaves none.
  EXPECT_NE(train::detail::resumed_line(c, 1).find("training epochs 2 to 3"), std::string::npos) << train::detail::resumed_line(c, 1);
  EXPECT_NE(train::detail::resumed_line(c, 3).find("nothing to train (raise --epochs"), std::string::npos) << train::detail::resumed_line(c, 3);
  // Settings other than the checkpoint's run are said: all of them, with the schedule's curve
  // where --epochs changes one that spans the run; a longer constant-rate run is no change.
  nlohmann::json was = train::to_json(c);
  EXPECT_EQ(train::detail::resumed_line(c, 1, was).find("note:"), std::string::npos);
  was["lr"] = 0.4, was["epochs"] = 2, was["seed"] = 7, was["workers"] = 3;
  const std::string changed = train::detail::resumed_line(c, 1, was);
  EXPECT_NE(changed.find(fmt::format("note: resumed with other settings than the checkpoint's run: --epochs 2 -> 3, --lr 0.4 -> {:g}, --seed 7 -> {}",
                                     c.lr, c.seed)),
            std::string::npos) << changed;
  EXPECT_EQ(changed.find("workers"), std::string::npos) << changed;
  EXPECT_NE(changed.find(fmt::format("the {} rate spans --epochs", c.schedule.name)), std::string::npos) << changed;
  train::TrainConfig constant = c;
  constant.schedule.name = "constant";
  was = train::to_json(constant);
  was["epochs"] = 2;
  EXPECT_EQ(train::detail::resumed_line(constant, 1, was).find("note:"), std::string::npos);
  // The same directory spelled another way is the same data, not a change.
  TempDir d;
  fs::create_directory(d.path / "set");
  train::TrainConfig in_dir = c;
  in_dir.data = (d.path / "set").string() + "/";
  was = train::to_json(in_dir);
  in_dir.data = (d.path / "set" / ".").string();
  EXPECT_EQ(train::detail::resumed_line(in_dir, 1, was).find("note:"), std::string::npos) << train::detail::resumed_line(in_dir, 1, was);
  was["data"] = d.path.string();
  EXPECT_NE(train::detail::resumed_line(in_dir, 1, was).find("--data " + d.path.string() + " -> "), std::string::npos);
  // Resumed with nothing left to train: no second copy of the last record in runs/.
  TempDir runs;
  c.runs_dir = runs.path.string();
  const auto again = train::train(c);
  EXPECT_EQ(again.epochs.size(), 3u);
  EXPECT_EQ(again.record_path, "");
  EXPECT_TRUE(fs::is_empty(runs.path));
}

TEST(Train, CtrlCStopsAtTheNextStepAndKeepsTheFinishedEpochs) {
  const SigintAsAtATerminal sigint;
  TempDir dir;
  auto c = tiny();
  const auto whole = train::train(c);
  const int64_t per_epoch = 1500 / 32;
  c.checkpoint_dir = (dir.path / "ck").string();
  c.runs_dir = (dir.path / "runs").string();
  c.sigint_at_step = per_epoch + 5;  // in epoch 2
  try {
    train::train(c);
    FAIL() << "the run was not stopped";
  } catch (const Interrupted& e) {
    EXPECT_EQ(e.signal(), SIGINT);
    EXPECT_NE(std::string(e.what()).find("stopped by SIGINT (Ctrl-C) in epoch 2 of 3: the run record"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("keeps the 1 finished epoch"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("run the same command with --resume (the checkpoint in " + c.checkpoint_dir + " holds epoch 1)"),
              std::string::npos) << e.hint();
  }
  // Handled only while the run lasts: SIGINT's action is the default again.
  struct sigaction now {};
  sigaction(SIGINT, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
  // The record keeps epoch 1 as it was measured, and says what stopped the run where.
  ASSERT_EQ(records_in(c.runs_dir), 1u);
  const nlohmann::json rec = nlohmann::json::parse(std::ifstream(fs::directory_iterator(c.runs_dir)->path()));
  EXPECT_EQ(rec["summary"]["epochs_run"], 1);
  EXPECT_EQ(rec["epochs"][0]["train_loss"], whole.epochs[0].train_loss);
  EXPECT_EQ(rec["stopped"]["in_epoch"], 2);
  EXPECT_EQ(rec["stopped"]["epochs_asked"], 3);
  // Resumed, it ends as the run nobody stopped.
  c.sigint_at_step = -1;
  c.resume = true;
  EXPECT_EQ(train::train(c).weights, whole.weights);
  ASSERT_EQ(records_in(c.runs_dir), 2u);
  // Stopped again before a new epoch finished: no record (its epochs are in the last one) and
  // the checkpoint as it was.
  const auto saved = fs::last_write_time(train::checkpoint_path(c.checkpoint_dir));
  c.epochs = 5;
  c.sigint_at_step = 3 * per_epoch + 1;
  EXPECT_NE(error_of([&] { train::train(c); }).find("stopped by SIGINT (Ctrl-C) in epoch 4 of 5 |"), std::string::npos)
      << error_of([&] { train::train(c); });
  EXPECT_EQ(records_in(c.runs_dir), 2u);
  EXPECT_EQ(fs::last_write_time(train::checkpoint_path(c.checkpoint_dir)), saved);
}

// Ctrl-C's handling: the first signal asks, a second ends the process, and the handlers and
// the request last as long as the outermost StopOnSignal.
TEST(StopOnSignal, FirstSignalAsksASecondEndsTheProcess) {
  const SigintAsAtATerminal sigint;  // and as the program found it afterwards
  {
    const StopOnSignal outer;
    {
      const StopOnSignal inner;  // a training run inside a lab
      std::raise(SIGTERM);
      EXPECT_EQ(stop_signal(), SIGTERM);
    }
    EXPECT_EQ(stop_signal(), SIGTERM);  // the lab still sees it
  }
  EXPECT_EQ(stop_signal(), 0);
  struct sigaction now {};
  sigaction(SIGTERM, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
  // A signal the process ignores (nohup, a background job) stays ignored.
  std::signal(SIGINT, SIG_IGN);
  {
    const StopOnSignal guard;
    std::raise(SIGINT);
    EXPECT_EQ(stop_signal(), 0);
  }
  std::signal(SIGINT, SIG_DFL);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const StopOnSignal guard;
        std::raise(SIGINT);
        if (stop_signal() == SIGINT) std::raise(SIGINT);
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGINT), "");
}

// The tiny run of one epoch, trained with its checkpoint in `ck`.
train::TrainConfig checkpointed_run(const TempDir& ck) {
  auto c = tiny();
  c.epochs = 1;
  c.checkpoint_dir = ck.path.string();
  train::train(c);
  return c;
}

TEST(Train, DamagedOrMismatchedCheckpointsAreRefused) {
  TempDir ck;
  auto c = checkpointed_run(ck);
  c.resume = true;
  c.model = "medium";
  EXPECT_NE(error_of([&] { train::train(c); }).find("is for model small"), std::string::npos);
  c.model = "small";
  c.data = "synthetic:3x12x12:1500";
  EXPECT_NE(error_of([&] { train::train(c); }).find("was trained on 1x12x12 images (synthetic:1x12x12:1500), not 3x12x12"),
            std::string::npos);
  c.data = tiny().data;
  c.optimizer.name = "adamw";
  EXPECT_NE(error_of([&] { train::train(c); }).find("holds sgd's state, not adamw's"), std::string::npos);
  c.optimizer.name = "sgd";
  const auto path = train::checkpoint_path(c.checkpoint_dir);
  auto flip = [&](std::streamoff at, std::ios::seekdir from) {  // one bit: same size, wrong bytes
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(at, from);
    const char b = char(f.get() ^ 0x10);
    f.seekp(at, from);
    f.put(b);
  };
  flip(-7, std::ios::end);  // in the last weights (the header's CRC-32 is the last 4 bytes)
  EXPECT_NE(error_of([&] { train::train(c); }).find("is damaged: the CRC-32 of its weights and optimizer state is"), std::string::npos)
      << error_of([&] { train::train(c); });
  flip(-7, std::ios::end);
  EXPECT_EQ(error_of([&] { train::load_checkpoint(c.checkpoint_dir); }), "");
  // In the header: a flip that still parses (a letter of a name, a digit of a recorded loss) was
  // resumed from until 2026-11-28.
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  const size_t name = bytes.find("\"model\":\"small\"");
  ASSERT_NE(name, std::string::npos);
  flip(std::streamoff(name + 10), std::ios::beg);  // "small" -> "cmall"
  EXPECT_NE(error_of([&] { train::train(c); }).find("is damaged: the CRC-32 of its header is"), std::string::npos)
      << error_of([&] { train::train(c); });
  flip(std::streamoff(name + 10), std::ios::beg);
  fs::resize_file(path, fs::file_size(path) - 8);
  EXPECT_NE(error_of([&] { train::train(c); }).find("truncated"), std::string::npos);
  std::ofstream(path) << "garbage";
  EXPECT_NE(error_of([&] { train::train(c); }).find("not a dlperf checkpoint"), std::string::npos);
  fs::remove(path);
  EXPECT_NE(error_of([&] { train::train(c); }).find("no checkpoint to resume from"), std::string::npos);
}

// A version 2 checkpoint file taken apart: its JSON header, and the data between the header and
// the header's CRC-32; write_checkpoint_file puts one together again, with that CRC-32 made anew
// (as if dlperf had written the header) or, for a version 1 file, without it.
struct CheckpointFile {
  nlohmann::json header;
  std::string data;
};
CheckpointFile read_checkpoint_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(f), {}};
  uint64_t length = 0;
  std::memcpy(&length, bytes.data() + 8, 8);
  return {nlohmann::json::parse(bytes.substr(16, length)), bytes.substr(16 + length, bytes.size() - 16 - length - 4)};
}
void write_checkpoint_file(const std::string& path, const CheckpointFile& file, bool with_crc) {
  const std::string body = file.header.dump();
  const uint64_t n = body.size();
  const uint32_t crc = uint32_t(crc32_z(crc32_z(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(body.data()), body.size()));
  std::ofstream f(path, std::ios::binary);
  f.write("DLPERFCK", 8);
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << body << file.data;
  if (with_crc) f.write(reinterpret_cast<const char*>(&crc), 4);
}

// Found by scripts/fuzz_inputs.py: a header field of the wrong type ended a resume in
// "[json.exception.type_error.302] type must be number, but is string", naming neither the file
// nor the field; a count past the file's size could wrap the sum checked against it.
TEST(Train, ACheckpointHeaderFieldOfTheWrongTypeIsNamed) {
  TempDir ck;
  const auto c = checkpointed_run(ck);
  const auto path = train::checkpoint_path(c.checkpoint_dir);
  const CheckpointFile file = read_checkpoint_file(path);
  const nlohmann::json& header = file.header;
  auto refusal = [&](const nlohmann::json& h) {  // the checkpoint with header h, and what loading it says
    // Written with its CRC-32, as if dlperf had written these fields: the checks behind the CRC's
    // (and for version 1 files, which have none) still name the field.
    write_checkpoint_file(path, {h, file.data}, true);
    const std::string error = error_of([&] { train::load_checkpoint(c.checkpoint_dir); });
    if (!error.empty()) {
      EXPECT_NE(error.find(path), std::string::npos) << error;
    }
    return error;
  };
  for (const auto& [pointer, value, said] : std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"/model", 0, "its model is not a name"},
           {"/epoch_done", "x", "its epoch_done is not a whole number"},
           {"/input", "1x12x12", "its input is not a shape"},
           {"/config/epochs", "nan", "its config.epochs is not a whole number"},
           {"/config/data", 5, "its config.data is not a name"},
           {"/tensors/0/count", "nan", "its tensors is not a list of names and counts"},
           {"/tensors/1/count", uint64_t(1) << 62, "its header counts more values than its"},
           {"/history/0/train_acc", nlohmann::json::object(), "has a damaged header: its history's epoch 1 reads 'train_acc: type must be number, but is object'"},
           {"/history/0/peak_bytes_by_category/activations", true, "epoch 1 reads 'activations: type must be number, but is boolean'"},
           {"/history/0/peak_bytes_by_category", 7, "epoch 1 reads 'peak_bytes_by_category: type must be object, but is number'"},
           {"/history", 3, "its history is not a list of the finished epochs"},
           // found by scripts/fuzz_inputs.py (seed 9139): "cannot use at() with number", unnamed
           {"/history/0", 1e308, "its history's epoch 1 is not an object of the epoch's figures"}}) {
    nlohmann::json h = header;
    h[nlohmann::json::json_pointer(pointer)] = value;
    EXPECT_NE(refusal(h).find(said), std::string::npos) << pointer << ": " << refusal(h);
  }
  nlohmann::json h = header;
  h.erase("optimizer_steps");
  EXPECT_NE(refusal(h).find("its optimizer_steps is not a whole number"), std::string::npos) << refusal(h);
  EXPECT_EQ(refusal(header), "");  // the header as written loads
  h = header;
  h["version"] = 3;
  EXPECT_NE(refusal(h).find("is a checkpoint of version 3, which this dlperf cannot read"), std::string::npos) << refusal(h);
}

// Version 1 checkpoints (before 2026-11-28) end with the data, without the header's CRC-32, and
// still resume.
TEST(Train, AVersionOneCheckpointStillLoads) {
  TempDir ck;
  const auto c = checkpointed_run(ck);
  const auto path = train::checkpoint_path(c.checkpoint_dir);
  const train::Checkpoint now = train::load_checkpoint(c.checkpoint_dir);
  CheckpointFile file = read_checkpoint_file(path);
  EXPECT_EQ(file.header["version"], 2);
  file.header["version"] = 1;
  write_checkpoint_file(path, file, false);  // no CRC-32 after the data
  const train::Checkpoint then = train::load_checkpoint(c.checkpoint_dir);
  EXPECT_EQ(then.tensors, now.tensors);
  EXPECT_EQ(then.meta["epoch_done"], 1);
  {
    std::ofstream f(path, std::ios::binary | std::ios::app);
    f.write("\0\0\0\0", 4);  // a version 1 file with 4 bytes too many
  }
  EXPECT_NE(error_of([&] { train::load_checkpoint(c.checkpoint_dir); }).find("is truncated or damaged: expected"), std::string::npos);
}

// The header's recipe says what shapes learning, so a run with --augment or --label-smoothing
// reads differently from one without.
TEST(Train, TheHeaderSaysTheRecipe) {
  train::TrainConfig c;  // the defaults: no augmentation, no label smoothing
  data::Dataset flips, no_flips;
  flips.flip_ok = true;
  EXPECT_EQ(train::detail::recipe_text(c, flips), "sgd lr 0.1 onecycle");
  c.label_smoothing = 0.1, c.augment = true;
  EXPECT_EQ(train::detail::recipe_text(c, flips), "sgd lr 0.1 onecycle, label smoothing 0.1, augmented (random 2-px crops and horizontal flips)");
  EXPECT_EQ(train::detail::recipe_text(c, no_flips), "sgd lr 0.1 onecycle, label smoothing 0.1, augmented (random 2-px crops)");
  c.crop_pad = 0;  // --crop-pad 0
  EXPECT_EQ(train::detail::recipe_text(c, flips), "sgd lr 0.1 onecycle, label smoothing 0.1, augmented (random horizontal flips)");
}

// A new run in a directory that holds a checkpoint would replace it after its first epoch, and
// the earlier run's epochs with it: refused, saying what the file holds, unless asked for.
TEST(Train, ANewRunDoesNotReplaceAnEarlierRunsCheckpointUnlessAsked) {
  TempDir ck;
  auto c = tiny();
  c.epochs = 1;
  c.checkpoint_dir = ck.path.string();
  train::train(c);
  const std::string path = train::checkpoint_path(c.checkpoint_dir);
  const auto saved = fs::last_write_time(path);
  try {
    train::train(c);
    ADD_FAILURE() << "a second run replaced the checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + " already exists (a checkpoint of small after epoch 1 of 1)"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("add --resume to go on from it, --overwrite-checkpoint to start afresh"), std::string::npos) << e.hint();
  }
  EXPECT_EQ(fs::last_write_time(path), saved);
  auto both = c;
  both.resume = both.overwrite_checkpoint = true;
  EXPECT_NE(error_of([&] { train::train(both); }).find("--overwrite-checkpoint starts afresh, and --resume goes on"), std::string::npos);
  auto none = tiny();
  none.overwrite_checkpoint = true;
  EXPECT_NE(error_of([&] { train::train(none); }).find("--overwrite-checkpoint needs --checkpoint DIR"), std::string::npos);
  // Asked for, the run starts afresh and its checkpoint replaces the earlier one.
  c.overwrite_checkpoint = true;
  c.epochs = 2;
  train::train(c);
  EXPECT_EQ(train::checkpoint_held(c.checkpoint_dir)->what, "a checkpoint of small after epoch 2 of 2");
  // A file that is no checkpoint is not offered to --resume.
  std::ofstream(path) << "garbage";
  c.overwrite_checkpoint = false;
  try {
    train::train(c);
    ADD_FAILURE() << "a run replaced an unreadable checkpoint file without being asked";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a checkpoint dlperf can read"), std::string::npos) << e.what();
    EXPECT_EQ(e.hint().find("--resume"), std::string::npos) << e.hint();
  }
}

// Run records, reports and the machine profile are written aside and moved into place.
TEST(Files, AreWrittenWholeOrNotAtAll) {
  TempDir dir;
  const std::string path = (dir.path / "sub" / "record.json").string();
  write_file_atomically(path, "first", "hint");
  write_file_atomically(path, "second", "hint");
  std::ifstream f(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), "second");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path / "sub"), fs::directory_iterator()), 1);
  // A directory that cannot exist (its parent is a file): one Error with the hint, nothing left.
  std::ofstream(dir.path / "plain") << "x";
  const std::string bad = (dir.path / "plain" / "record.json").string();
  EXPECT_EQ(error_of([&] { write_file_atomically(bad, "body", "check --runs-dir"); }),
            "could not write " + bad + " (is the disk full, or the directory read-only?) | check --runs-dir");
  // A directory is not a file to write, and is said to be one, before any work for check_file_path.
  EXPECT_EQ(error_of([&] { write_file_atomically(dir.path.string(), "body", "h"); }),
            "could not write " + dir.path.string() + ": it is a directory | h");
  EXPECT_NE(error_of([&] { check_file_path((dir.path / "sub").string(), "--json"); }).find("is a directory"), std::string::npos);
  EXPECT_NE(error_of([&] { check_file_path(bad, "--json"); }).find("cannot write to"), std::string::npos);
  EXPECT_EQ(error_of([&] { check_file_path((dir.path / "new" / "r.json").string(), "--json"); }), "");
  // A full disk: a short body fails only when the stream is flushed, at close.
  if (fs::exists("/dev/full")) {
    const auto target = dir.path / "full.json";
    fs::create_symlink("/dev/full", target.string() + ".tmp");
    EXPECT_NE(error_of([&] { write_file_atomically(target.string(), std::string(100, 'x'), "h"); }).find("could not write"),
              std::string::npos);
    EXPECT_FALSE(fs::exists(target));
  }
}

// Default file names never replace an earlier run's: a suffix is added when any of the files
// written together is taken, so a profile's table and trace keep one name.
TEST(Files, DefaultNamesNeverReplaceAnEarlierRunsFiles) {
  TempDir dir;
  const std::string d = dir.path.string();
  EXPECT_EQ(unused_stem(d, "run", {".json"}), d + "/run");
  std::ofstream(dir.path / "run.json") << "x";
  EXPECT_EQ(unused_stem(d, "run", {".json"}), d + "/run-2");
  std::ofstream(dir.path / "run-2.trace.json") << "x";  // only the trace of run-2 is there
  EXPECT_EQ(unused_stem(d, "run", {".json", ".trace.json"}), d + "/run-3");
  EXPECT_EQ(unused_stem(d, "run", {".csv"}), d + "/run");
  EXPECT_TRUE(std::regex_match(file_timestamp(), std::regex(R"(\d{8}-\d{6})"))) << file_timestamp();
}

TEST(Train, DivergenceStopsWithAClearMessage) {
  auto c = tiny();
  c.lr = 1e12;
  c.schedule.name = "constant";
  TempDir ck;
  c.checkpoint_dir = ck.path.string();
  try {
    train::train(c);
    FAIL() << "a learning rate of 1e12 trained";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("training diverged: the loss became NaN at epoch 1, step "), std::string::npos) << e.what();
    EXPECT_EQ(e.hint(), "lower --lr (now 1000000000000)");  // no checkpoint to point to: no epoch finished
  }
  // Diverging after a finished epoch, it points to the checkpoint of that epoch.
  c.lr = 0.05;
  c.stop_after_epochs = 1;
  train::train(c);
  c.stop_after_epochs = 0;
  c.resume = true;
  c.lr = 1e12;
  try {
    train::train(c);
    FAIL() << "a learning rate of 1e12 trained";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at epoch 2, step "), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("add --resume (the checkpoint in " + c.checkpoint_dir + " holds epoch 1)"), std::string::npos) << e.hint();
  }
}

TEST(Train, MemoryEstimateIsTheMeasuredPeakAndGuardsRuns) {
  auto c = tiny();
  c.epochs = 1;
  c.model = "medium";
  auto r = train::train(c);
  const nn::ModelSpec spec = nn::load_model("medium");
  const auto g = nn::build_graph(spec, {1, 12, 12}, 10, c.batch);
  const hw::ScopedThreads run_threads(c.threads);  // the run's, as Bf16OnTheCpuLearnsLikeFp32 says why
  const double estimate = train::estimate_train_bytes(g, c.optimizer, c.workers), measured = r.epochs[0].peak_bytes;
  EXPECT_EQ(estimate, measured);  // the engine's buffers, byte for byte (plan/memory.cpp)
  EXPECT_NO_THROW(train::check_fits(spec, g, c.optimizer, 4 * estimate, c.workers));
  const double available = estimate / 2;
  const std::string e = error_of([&] { train::check_fits(spec, g, c.optimizer, available, c.workers); });
  EXPECT_NE(e.find("needs about"), std::string::npos) << e;
  // The batch it advises is the largest that fits in 90% of what is available.
  const size_t at = e.find("use --batch-size ");
  ASSERT_NE(at, std::string::npos) << e;
  const int64_t advised = std::stoll(e.substr(at + 17));
  auto need = [&](int64_t batch) {
    return train::estimate_train_bytes(nn::build_graph(spec, {1, 12, 12}, 10, batch), c.optimizer, c.workers);
  };
  ASSERT_GE(advised, 1) << e;
  EXPECT_LE(need(advised), 0.9 * available);
  EXPECT_GT(need(advised + 1), 0.9 * available);
}

// The lab trains many runs in one process: each run's peak is its own, not inflated by memory a
// bigger run before it left behind (cached blocks, oneDNN's shared scratchpad).
TEST(Train, PeakMemoryIsTheRunsOwnAfterABiggerRunInTheSameProcess) {
  auto c = tiny();
  c.epochs = 1;
  c.augment = false;
  const double alone = train::train(c).epochs[0].peak_bytes;
  auto big = tiny();
  big.model = "medium";
  big.data = "synthetic:3x32x32:256";
  big.epochs = 1;
  big.batch = 256;
  const double big_peak = train::train(big).epochs[0].peak_bytes;
  ASSERT_GT(big_peak, 4 * alone);
  EXPECT_EQ(train::train(c).epochs[0].peak_bytes, alone);
}

// --threads is the run's own: a one-thread run leaves the next run in the same process (the lab
// trains both kinds in one) on all the cores, not on the one thread it set.
TEST(Train, AThreadCountIsTheRunsOwn) {
  const int all = omp_get_max_threads();
  auto c = tiny();
  c.epochs = 1;
  c.threads = 1;
  EXPECT_EQ(train::train(c).record["config"]["threads_used"], 1);
  EXPECT_EQ(omp_get_max_threads(), all);
  c.threads = 0;
  EXPECT_EQ(train::train(c).record["config"]["threads_used"], all);
}

// A loss that climbs over an epoch is said after the run, with an lr to try: the linear scaling
// rule's below batch 64 (the default lr's batch), half above. A loss that only falls, or wobbles
// within 1.5x, gets no note.
TEST(Train, ARisingLossSaysTheLearningRateMayBeTooHigh) {
  auto epochs_with = [](std::vector<double> losses) {
    std::vector<train::EpochStats> out;
    for (size_t i = 0; i < losses.size(); ++i) {
      train::EpochStats e;
      e.epoch = int64_t(i) + 1;
      e.train_loss = losses[i];
      out.push_back(e);
    }
    return out;
  };
  train::TrainConfig c;
  c.batch = 16;
  c.lr = 0.1;
  const std::string note = train::detail::loss_rise_note(c, epochs_with({0.86, 2.21, 2.18, 1.50, 0.58}));
  EXPECT_NE(note.find("from 0.86 (epoch 1) to 2.21 (epoch 2), 2.6x"), std::string::npos) << note;
  EXPECT_NE(note.find("try --lr 0.025"), std::string::npos) << note;
  c.batch = 256;
  EXPECT_NE(train::detail::loss_rise_note(c, epochs_with({0.5, 0.4, 0.9})).find("from 0.4 (epoch 2) to 0.9 (epoch 3)"), std::string::npos);
  EXPECT_NE(train::detail::loss_rise_note(c, epochs_with({0.5, 0.4, 0.9})).find("try --lr 0.05"), std::string::npos);
  EXPECT_EQ(train::detail::loss_rise_note(c, epochs_with({0.9, 0.6, 0.5, 0.7})), "") << "within 1.5x of the lowest";
  EXPECT_EQ(train::detail::loss_rise_note(c, epochs_with({0.9})), "");
  EXPECT_EQ(train::detail::loss_rise_note(c, {}), "");
}

// A bf16 run on a CPU whose bf16 dot products are no faster than its fp32 FMAs says, before
// it starts, that fp32 will train faster (the Intel Xeon VM of 2026-11-28: 0.49x); a CPU with
// twice fp32's bf16 arithmetic (a Zen 4), or peaks unknown, gets no note.
TEST(Train, Bf16OnACpuWithoutBf16ArithmeticSaysFp32IsFaster) {
  const std::string note = train::detail::cpu_bf16_note(161, 330, "measured just now, quickly");
  EXPECT_NE(note.find("peak at 0.49x its fp32 multiply-adds (161 vs 330 GFLOP/s, measured just now, quickly)"), std::string::npos) << note;
  EXPECT_NE(note.find("expect it to train slower than fp32 (--precision fp32 for speed)"), std::string::npos) << note;
  EXPECT_NE(train::detail::cpu_bf16_note(390, 330, "x"), "") << "1.18x: under the 1.2x line";
  EXPECT_EQ(train::detail::cpu_bf16_note(460, 230, "x"), "") << "a Zen 4's 2.0x";
  EXPECT_EQ(train::detail::cpu_bf16_note(0, 330, "x"), "") << "no bf16 peak measured";
  EXPECT_EQ(train::detail::cpu_bf16_note(161, 0, "x"), "");
}

// A run flushes denormals to zero in its compute threads unless --keep-denormals, says which in
// its record, and leaves the process as it found it (hw::ScopedDenormals; test_hw.cpp checks
// the threads).
TEST(Train, DenormalsAreFlushedForTheRunOnly) {
  auto c = tiny();
  c.epochs = 1;
  ASSERT_FALSE(hw::flushes_denormals());
  EXPECT_EQ(train::train(c).record["config"]["flush_denormals"], true);
  EXPECT_FALSE(hw::flushes_denormals());
  c.flush_denormals = false;
  EXPECT_EQ(train::train(c).record["config"]["flush_denormals"], false);
  EXPECT_FALSE(hw::flushes_denormals());
}

// An epoch's record round-trips (checkpoints keep the history), an unevaluated one as null
// accuracy rather than a 0% that was never measured.
TEST(Train, EpochRecordsRoundTripEvaluatedOrNot) {
  train::EpochStats e;
  e.epoch = 2, e.train_s = 1.5, e.images_per_s = 100, e.train_loss = 0.5, e.train_acc = 0.8, e.test_loss = 0.6, e.test_acc = 0.75;
  e.peak_bytes = 1e6;
  const auto back = train::epoch_from_json(train::to_json(e));
  EXPECT_TRUE(back.evaluated);
  EXPECT_EQ(back.test_acc, 0.75);
  EXPECT_EQ(back.test_loss, 0.6);
  e.evaluated = false;
  const nlohmann::json j = train::to_json(e);
  EXPECT_TRUE(j["test_acc"].is_null());
  EXPECT_TRUE(j["test_loss"].is_null());
  EXPECT_FALSE(train::epoch_from_json(j).evaluated);
  EXPECT_EQ(train::epoch_from_json(j).train_acc, 0.8);
  // Energy, and on a GPU the range NVML's counter updates allow for it; null where unmeasured.
  EXPECT_TRUE(j["energy_j"].is_null());
  EXPECT_TRUE(j["energy_j_range"].is_null());
  EXPECT_LT(train::epoch_from_json(j).energy_low_j, 0);
  e.energy_j = 40, e.energy_low_j = 30, e.energy_high_j = 55;
  const auto measured = train::epoch_from_json(train::to_json(e));
  EXPECT_EQ(measured.energy_j, 40);
  EXPECT_EQ(measured.energy_low_j, 30);
  EXPECT_EQ(measured.energy_high_j, 55);
}

// --eval-every 2 over 3 epochs: test accuracy after epochs 2 and 3 (the last), not after 1,
// whose record says so (null) and whose evaluation took no time.
TEST(Train, EvalEveryMeasuresEveryNthEpochAndTheLast) {
  TempDir runs;
  auto c = tiny();
  c.runs_dir = runs.path.string();
  c.eval_every = 2;
  const auto r = train::train(c);
  ASSERT_EQ(r.epochs.size(), 3u);
  EXPECT_FALSE(r.epochs[0].evaluated);
  EXPECT_EQ(r.epochs[0].eval_s, 0.0) << "nothing was evaluated";
  EXPECT_TRUE(r.epochs[1].evaluated);
  EXPECT_TRUE(r.epochs[2].evaluated);
  EXPECT_GE(r.epochs[2].test_acc, 0.90);
  const auto j = nlohmann::json::parse(std::ifstream(r.record_path));
  EXPECT_EQ(j["config"]["eval_every"], 2);
  EXPECT_TRUE(j["epochs"][0]["test_acc"].is_null());
  EXPECT_EQ(j["summary"]["final_test_acc"], r.epochs[2].test_acc);
  for (int64_t e = 0; e < 7; ++e) {  // every 3rd of 7 epochs: after 3, 6 and 7
    train::TrainConfig k;
    k.epochs = 7, k.eval_every = 3;
    EXPECT_EQ(train::evaluates_after(k, e), e == 2 || e == 5 || e == 6) << e;
  }
}

TEST(Train, ImpossibleSettingsAreRefused) {
  auto c = tiny();
  c.batch = 0;
  EXPECT_NE(error_of([&] { train::train(c); }).find("--batch-size"), std::string::npos);
  if (cuda::device_count() == 0) {
    c = tiny();
    c.device = "cuda";
    EXPECT_NE(error_of([&] { train::train(c); }).find("--device cuda"), std::string::npos);
  }
  c = tiny();
  c.resume = true;
  EXPECT_NE(error_of([&] { train::train(c); }).find("--resume needs --checkpoint"), std::string::npos);
  c = tiny();
  c.batch = 5000;
  EXPECT_NE(error_of([&] { train::train(c); }).find("larger than the"), std::string::npos);
  c = tiny();
  c.model = "nosuchmodel";
  EXPECT_NE(error_of([&] { train::train(c); }).find("neither a preset"), std::string::npos);
  c = tiny();
  c.lr = -1;
  EXPECT_NE(error_of([&] { train::train(c); }).find("--lr"), std::string::npos);
  c = tiny();
  c.schedule.warmup_epochs = 1;  // onecycle (the default) has its own warm-up
  EXPECT_NE(error_of([&] { train::train(c); }).find("--warmup-epochs does not apply"), std::string::npos);
  c.schedule.name = "cosine";
  c.epochs = 1;
  EXPECT_EQ(error_of([&] { train::train(c); }), "");
  c.schedule.warmup_epochs = 1.5;  // a warm-up the run would not finish
  EXPECT_NE(error_of([&] { train::train(c); }).find("--warmup-epochs 1.5 is longer than the run (1 epoch)"), std::string::npos);
  c = tiny();
  c.schedule.step_epochs = 0;
  EXPECT_NE(error_of([&] { train::train(c); }).find("--step-epochs"), std::string::npos);
  c = tiny();
  c.precision = "fp8";
  EXPECT_NE(error_of([&] { train::train(c); }).find("not one of fp32, tf32, bf16, fp16"), std::string::npos);
  // Outputs that cannot be written are refused before training, not after an epoch's work.
  const std::string file = (fs::temp_directory_path() / "dlperf-test-not-a-dir").string();
  std::ofstream(file) << "x";
  c = tiny();
  c.checkpoint_dir = file + "/ckpt";
  EXPECT_NE(error_of([&] { train::train(c); }).find("cannot write checkpoints to"), std::string::npos);
  c = tiny();
  c.runs_dir = file + "/runs";
  EXPECT_NE(error_of([&] { train::train(c); }).find("cannot write run records to"), std::string::npos);
  c = tiny();
  c.profile = true;
  c.profile_out = file + "/prof/p";
  EXPECT_NE(error_of([&] { train::train(c); }).find("cannot write the profile to"), std::string::npos);
  fs::remove(file);
}

// On the CPU: fp32 trains; tf32 and fp16 are refused with the reason, bf16 unless the CPU has
// AVX512-BF16; GPU-only settings say they need a GPU.
TEST(Train, CpuPrecisionsAndGpuOnlySettingsAreExplained) {
  auto c = tiny();
  c.device = "cpu";
  c.precision = "tf32";
  EXPECT_NE(error_of([&] { train::train(c); }).find("tf32 is a GPU tensor-core format"), std::string::npos);
  c.precision = "fp16";
  EXPECT_NE(error_of([&] { train::train(c); }).find("fp16 training needs a GPU"), std::string::npos);
  c.precision = "bf16";
  if (hw::cpu_info().avx512_bf16) {
    EXPECT_EQ(train::cpu_precision_refusal("bf16"), "");  // Train.Bf16OnTheCpuLearnsLikeFp32 trains it
  } else {
    EXPECT_NE(error_of([&] { train::train(c); }).find("AVX512-BF16"), std::string::npos);
  }
  EXPECT_EQ(train::cpu_precision_refusal("fp32"), "");
  c.precision = "fp32";
  c.data_on_device = true;
  EXPECT_NE(error_of([&] { train::train(c); }).find("--data-on-device"), std::string::npos);
  c.data_on_device = false;
  c.conv_workspace_mb = 256;
  EXPECT_NE(error_of([&] { train::train(c); }).find("--conv-workspace 256 sets what cuDNN's convolutions on a GPU may use"), std::string::npos);
  c.conv_workspace_mb = train::TrainConfig{}.conv_workspace_mb;
  c.small_conv = "own";
  EXPECT_NE(error_of([&] { train::train(c); }).find("--small-conv own picks who runs a GPU's convolutions of few channels"), std::string::npos);
  c.small_conv = train::TrainConfig{}.small_conv;
  const auto r = train::train(c);
  EXPECT_EQ(r.record["config"]["precision"], "fp32");
  EXPECT_EQ(r.record["config"]["conv_workspace_mb"], 4096);
  EXPECT_EQ(r.record["config"]["small_conv"], "auto");
  EXPECT_TRUE(r.record["config"].contains("graphs"));
  EXPECT_TRUE(r.record["config"].contains("pin_memory"));
}

}  // namespace
}  // namespace dlperf::test
