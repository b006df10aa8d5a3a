#include <fmt/format.h>

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "data/dataset.h"

namespace dlperf::data {

Dataset read_cifar10(const std::vector<std::string>& files, const std::string& name) {
  constexpr int64_t kImage = 3 * 32 * 32, kRecord = 1 + kImage;
  Dataset d;
  d.name = name;
  d.channels = 3;
  d.height = d.width = 32;
  d.classes = 10;
  d.flip_ok = true;
  for (const auto& path : files) {
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    check(bool(f), fmt::format("cannot open {}", path), "check the path given to --data");
    const int64_t bytes = f.tellg();
    check(bytes > 0 && bytes % kRecord == 0,
          fmt::format("{} is not a CIFAR-10 binary batch: {} bytes is not a whole number of "
                      "{}-byte records (truncated?)", path, bytes, kRecord),
          "download the files again (the 'binary version' of CIFAR-10)");
    f.seekg(0);
    std::vector<uint8_t> raw(static_cast<size_t>(bytes));
    f.read(reinterpret_cast<char*>(raw.data()), bytes);
    check(bool(f), fmt::format("cannot read {}", path));
    const int64_t n = bytes / kRecord;
    const size_t base = d.images.size();
    d.images.resize(base + size_t(n * kImage));
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t label = raw[size_t(i * kRecord)];
      check(label < 10, fmt::format("{}: label {} of record {} is out of range (0..9)", path, label, i),
            "the file is corrupt; download it again");
      d.labels.push_back(label);
      std::memcpy(&d.images[base + size_t(i * kImage)], &raw[size_t(i * kRecord + 1)], kImage);
    }
  }
  return d;
}

}  // namespace dlperf::data
