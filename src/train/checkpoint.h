// Checkpoints: every parameter, buffer and optimizer state in plain layout, plus where the run
// stands, in one file written atomically (temporary file, fsync, rename), so a crash never
// leaves a half-written checkpoint behind.
//
// File: "DLPERFCK" | u64 header length | JSON header | raw little-endian f32 data | u32 CRC-32 of
// the header's bytes; the header holds the data's CRC-32 (data_crc32). Both are checked on load,
// so a damaged byte anywhere is refused. (Version 1 files, from before 2026-11-28, end with the
// data and are read too.)
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace dlperf::train {

struct Checkpoint {
  nlohmann::json meta;  ///< model, input, epoch_done, optimizer_steps, config, history
  std::map<std::string, std::vector<float>> tensors;
};

/// Writes `ck` to dir/checkpoint.dlperf atomically, creating dir if needed.
void save_checkpoint(const std::string& dir, const Checkpoint& ck);
/// Reads dir/checkpoint.dlperf; throws Error on a missing, truncated or corrupt file.
Checkpoint load_checkpoint(const std::string& dir);
std::string checkpoint_path(const std::string& dir);
struct HeldCheckpoint {
  std::string what;      ///< "a checkpoint of small after epoch 14 of 40", or why it is none
  bool readable = true;  ///< false: not a checkpoint dlperf can read
};
/// What dir's checkpoint file holds, from its header alone, or nullopt where there is none.
std::optional<HeldCheckpoint> checkpoint_held(const std::string& dir);

/// A checkpoint's tensor `name` of `count` floats; throws Error with advice when it is missing or
/// sized for another model. Names are the CPU engine's ("conv1.weight", "bn1.running_mean",
/// "fc.weight.momentum"), so a checkpoint resumes on either device.
const std::vector<float>& checkpoint_tensor(const Checkpoint& ck, const std::string& name, size_t count);
/// Throws unless `ck` was written for this model, batch size, input shape (N, C, H, W; the
/// batch is not compared) and optimizer.
void check_checkpoint_matches(const Checkpoint& ck, const std::string& dir, const std::string& model, int64_t batch,
                              const Dims& input, const std::string& optimizer);

}  // namespace dlperf::train
