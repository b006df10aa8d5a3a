// Small helpers shared by the test suites.
#pragma once

#include <unistd.h>

#include <csignal>

#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/rng.h"
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

/// A random model for 3x8x8 inputs: layers of every kind the presets use (dropout where
/// `dropout`), reading earlier layers through `input` and `add` (x + x too), so values with
/// several readers, views among them, and flattens of maps and of vectors, in orders no preset has.
inline nlohmann::json random_model(uint64_t seed, bool dropout = true) {
  Rng rng(seed * 0x9E3779B97F4A7C15ull);  // Rng(s + 1)'s draws are Rng(s)'s shifted by one
  struct Value {
    std::string name;
    std::vector<int64_t> shape;  // [C, H, W] or [F]
  };
  std::vector<Value> values = {{"input", {3, 8, 8}}};
  nlohmann::json layers = nlohmann::json::array();
  Value at = values[0];
  auto pick = [&](int n) { return int(rng.below(uint64_t(n))); };
  const int count = 4 + pick(9);
  for (int i = 0; i < count; ++i) {
    const std::string name = fmt::format("l{}", i);  // not "l" + std::to_string(i): GCC 12 warns falsely there (-Wrestrict, its bug 105329)
    nlohmann::json l = {{"name", name}};
    if (i > 1 && pick(4) == 0) at = values[size_t(1 + pick(int(values.size()) - 1))];  // an earlier layer, not the model input
    if (i > 0) l["input"] = at.name;
    std::vector<int64_t> out = at.shape;
    const bool maps = at.shape.size() == 3;
    std::vector<Value> same;  // earlier values of this shape, for an add (x + x among them)
    for (const Value& v : values)
      if (v.shape == at.shape && v.name != "input") same.push_back(v);
    const int choice = pick(10);
    if (choice == 0 && !same.empty()) {
      l["type"] = "add";
      l["from"] = same[size_t(pick(int(same.size())))].name;
    } else if (choice == 1) {
      l["type"] = "relu";
    } else if (maps && choice <= 4) {
      const int64_t k = pick(2) ? 3 : 1, stride = at.shape[1] >= 4 && pick(3) == 0 ? 2 : 1, pad = k == 3 ? pick(2) : 0;
      // At least 2 channels: behind a 1-channel map every later channel is a multiple of one
      // map, which batchnorm's scale invariance leaves with gradients of rounding noise alone.
      const int64_t c = int64_t(2) << pick(4);
      if ((at.shape[1] + 2 * pad - k) / stride + 1 < 1) continue;
      // No bias: before a batchnorm a bias's true gradient is 0, and what the engines make of it
      // is rounding noise times 1 / std, which over a few values (after a global pooling, say)
      // reaches 1e-5 in three steps, and differs with each engine's order of summation.
      l.update({{"type", "conv2d"}, {"out_channels", c}, {"kernel", k}, {"stride", stride}, {"padding", pad}, {"bias", false}});
      out = {c, (at.shape[1] + 2 * pad - k) / stride + 1, (at.shape[2] + 2 * pad - k) / stride + 1};
    } else if (maps && choice == 5) {
      l["type"] = "batchnorm2d";
    } else if (maps && choice == 6 && at.shape[1] >= 2 && at.shape[2] >= 2) {
      l.update({{"type", pick(2) ? "maxpool2d" : "avgpool2d"}, {"kernel", 2}});
      out = {at.shape[0], at.shape[1] / 2, at.shape[2] / 2};
    } else if (maps && choice == 7) {
      l["type"] = "global_avgpool";
      out = {at.shape[0], 1, 1};
    } else if (choice == 8) {
      l["type"] = "flatten";
      out = {maps ? at.shape[0] * at.shape[1] * at.shape[2] : at.shape[0]};
    } else if (!maps && choice == 9 && dropout) {
      l.update({{"type", "dropout"}, {"p", 0.25}});
    } else if (!maps) {
      const int64_t f = 4 + pick(13);
      l.update({{"type", "linear"}, {"out_features", f}, {"bias", pick(2) == 0}});
      out = {f};
    } else {
      l["type"] = "relu";
    }
    layers.push_back(l);
    at = {name, out};
    values.push_back(at);
  }
  if (at.shape.size() == 3) {
    layers.push_back({{"type", "flatten"}, {"name", "features"}, {"input", at.name}});
    at.name = "features";
  }
  layers.push_back({{"type", "linear"}, {"name", "logits"}, {"input", at.name}, {"out_features", "classes"}});
  // Branches left behind by a jump back reach nothing: drop them (build_graph refuses them).
  for (bool dropped = true; dropped;) {
    dropped = false;
    std::set<std::string> read;
    for (const auto& l : layers)
      for (const char* key : {"input", "from"})
        if (l.contains(key)) read.insert(l[key].get<std::string>());
    for (size_t i = 0; i + 1 < layers.size(); ++i)
      if (!read.count(layers[i]["name"].get<std::string>())) {
        layers.erase(layers.begin() + std::ptrdiff_t(i));
        dropped = true;
        break;
      }
  }
  return {{"layers", layers}};
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
