// Small helpers shared by the test suites.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

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
