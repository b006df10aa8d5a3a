// Small helpers shared by the test suites.
#pragma once

#include <unistd.h>

#include <csignal>

#include <filesystem>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/trainer.h"

namespace dlperf::test {

/// The message (and hint) of the dlperf::Error that f throws; empty if it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return std::string(e.what()) + (e.hint().empty() ? "" : " | " + e.hint());
  }
  return "";
}

/// A small model that exercises the memory models' corners: channels that blocked layouts pad
/// (12), a value three layers read, max and average pooling, a linear layer without bias, dropout
/// before the head.
inline nlohmann::json corner_case_model() {
  return {{"layers", {{{"type", "conv2d"}, {"out_channels", 12}, {"padding", 1}},
                      {{"type", "batchnorm2d"}},
                      {{"type", "relu"}, {"name", "r0"}},
                      {{"type", "conv2d"}, {"out_channels", 12}, {"padding", 1}},
                      {{"type", "add"}, {"name", "s1"}, {"from", "r0"}},
                      {{"type", "add"}, {"from", "r0"}},
                      {{"type", "maxpool2d"}, {"kernel", 2}},
                      {{"type", "avgpool2d"}, {"kernel", 2}, {"stride", 1}},
                      {{"type", "flatten"}},
                      {{"type", "linear"}, {"out_features", 20}, {"bias", false}},
                      {{"type", "relu"}},
                      {{"type", "dropout"}, {"p", 0.5}},
                      {{"type", "linear"}, {"out_features", "classes"}}}}};
}

/// While it lives, SIGINT has its default action, as at a terminal. A test program started as a
/// background job of a shell without job control (`cmd &` in a script) inherits SIGINT ignored,
/// and dlperf rightly leaves an ignored signal ignored (nohup), so a test of Ctrl-C would see none.
struct SigintAsAtATerminal {
  struct sigaction before {};
  SigintAsAtATerminal() {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGINT, &dfl, &before);
  }
  ~SigintAsAtATerminal() { sigaction(SIGINT, &before, nullptr); }
  SigintAsAtATerminal(const SigintAsAtATerminal&) = delete;
  SigintAsAtATerminal& operator=(const SigintAsAtATerminal&) = delete;
};

/// A small residual CNN: a stem, one block whose add feeds a relu (sum, then r1), a strided conv,
/// pooling and two linear layers; what the engines' residual paths are checked on.
inline nlohmann::json residual_cnn() {
  return {{"layers",
                {{{"type", "conv2d"}, {"name", "stem"}, {"out_channels", 8}, {"padding", 1}, {"bias", false}},
                 {{"type", "batchnorm2d"}, {"name", "bn0"}},
                 {{"type", "relu"}, {"name", "r0"}},
                 {{"type", "conv2d"}, {"name", "c1"}, {"out_channels", 8}, {"padding", 1}, {"bias", false}},
                 {{"type", "batchnorm2d"}, {"name", "bn1"}},
                 {{"type", "add"}, {"name", "sum"}, {"from", "r0"}},
                 {{"type", "relu"}, {"name", "r1"}},
                 {{"type", "maxpool2d"}, {"name", "pool"}, {"kernel", 2}},
                 {{"type", "conv2d"}, {"name", "down"}, {"out_channels", 12}, {"kernel", 3}, {"stride", 2}, {"padding", 1}},
                 {{"type", "relu"}, {"name", "r2"}},
                 {{"type", "avgpool2d"}, {"name", "ap"}, {"kernel", 2}, {"stride", 1}},
                 {{"type", "flatten"}},
                 {{"type", "linear"}, {"name", "fc1"}, {"out_features", 16}},
                 {{"type", "relu"}, {"name", "r3"}},
                 {{"type", "linear"}, {"name", "fc2"}, {"out_features", "classes"}}}}};
}

/// A map read twice: first through a flatten into a linear layer (a view on the GPU), then by a
/// later convolution. That convolution's gradient is written first in the backward pass, and the
/// linear layer's, through the flatten, must add to it.
inline nlohmann::json flatten_branch_model() {
  return {{"layers",
           {{{"type", "conv2d"}, {"name", "c1"}, {"out_channels", 8}, {"padding", 1}},
            {{"type", "relu"}, {"name", "r1"}},
            {{"type", "flatten"}, {"name", "f"}},
            {{"type", "linear"}, {"name", "a"}, {"out_features", 10}},
            {{"type", "conv2d"}, {"name", "c2"}, {"input", "r1"}, {"out_channels", 8}, {"padding", 1}},
            {{"type", "global_avgpool"}, {"name", "g"}},
            {{"type", "flatten"}, {"name", "f2"}},
            {{"type", "linear"}, {"name", "b"}, {"out_features", 10}},
            {{"type", "add"}, {"name", "sum"}, {"from", "a"}},
            {{"type", "linear"}, {"name", "fc"}, {"out_features", "classes"}}}}};
}

/// A fresh directory under the system's temporary folder, removed with everything in it.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("dlperf_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

/// How many run records (.json files) `dir` holds.
inline size_t records_in(const std::filesystem::path& dir) {
  size_t n = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) n += f.path().extension() == ".json";
  return n;
}

/// A quiet training run's settings (no console output, no progress bar, no run record).
inline train::TrainConfig quiet_run(const std::string& model, const std::string& data, int64_t batch, int64_t epochs,
                                    const std::string& device) {
  train::TrainConfig c;
  c.model = model;
  c.data = data;
  c.device = device;
  c.batch = batch;
  c.epochs = epochs;
  c.runs_dir = "";
  c.quiet = true;
  c.progress = false;
  return c;
}

// A quiet dlperf train run on GPU 0 that writes no run record.
inline train::TrainConfig gpu_run(const std::string& model, const std::string& data, int64_t batch, int64_t epochs) {
  return quiet_run(model, data, batch, epochs, "cuda");
}

}  // namespace dlperf::test
