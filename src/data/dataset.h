// Image classification datasets held in memory as bytes: IDX (MNIST, Fashion-MNIST; raw or
// .gz), CIFAR-10 binary batches, and a deterministic synthetic set.
//
// Readers check everything a damaged download can get wrong (magic numbers, sizes, short
// files, labels out of range, counts that disagree) and say which file and what to do.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dlperf::data {

struct Dataset {
  std::string name;
  int64_t channels = 0, height = 0, width = 0, classes = 0;
  std::vector<uint8_t> images;  ///< N x C x H x W bytes
  std::vector<uint8_t> labels;  ///< N labels in [0, classes)
  bool flip_ok = false;         ///< horizontal flips keep the label's meaning
  int64_t size() const { return int64_t(labels.size()); }
  int64_t image_bytes() const { return channels * height * width; }
  /// Keeps the first n samples (n <= 0 keeps all).
  void truncate(int64_t n);
};

struct DataPair {
  Dataset train, test;
  std::string source;  ///< where it came from, for the run record
  std::string notice;  ///< a line to show the user (e.g. falling back to synthetic)
};

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

/// Resolves --data: "fashion-mnist" (Debian's package; synthetic with a notice when absent),
/// "synthetic[:CxHxW[:N]]", or a directory holding IDX files or CIFAR-10 binary batches.
DataPair load_data(const std::string& spec);

/// Whether two --data values name the same data: the same text, or two paths to one directory
/// ("fm", "./fm/" and "/data/fm" are one set; a resumed run must not call that a change).
bool same_data(const std::string& a, const std::string& b);

/// IDX image and label files, raw or gzip (zlib reads both). `classes` 0: as many as the labels
/// name (the largest label + 1); otherwise a label past it is an error.
Dataset read_idx(const std::string& images_path, const std::string& labels_path,
                 const std::string& name, int64_t classes = 10);
/// CIFAR-10 binary batch files (each record: 1 label byte + 3072 image bytes).
Dataset read_cifar10(const std::vector<std::string>& files, const std::string& name);
/// Deterministic, learnable data: each class is a random smooth pattern plus noise.
Dataset make_synthetic(int64_t n, int64_t c, int64_t h, int64_t w, int64_t classes, uint64_t seed);

}  // namespace dlperf::data
