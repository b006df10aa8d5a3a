// Preset model specs, embedded into the binary at build time from models/*.json, so dlperf
// works from any directory.
#pragma once

#include <string>
#include <vector>

namespace dlperf::nn {

struct Preset {
  std::string name;
  std::string json;
};
const std::vector<Preset>& presets();

}  // namespace dlperf::nn
