#include "data/dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "hw/cpu_info.h"

namespace dlperf::data {

namespace fs = std::filesystem;

void Dataset::truncate(int64_t n) {
  if (n <= 0 || n >= size()) return;
  labels.resize(size_t(n));
  images.resize(size_t(n * image_bytes()));
}

namespace {
// The directory's own name, as the user spelled it: "data/fm/" is "fm" (its filename() is
// empty), and "." or ".." are named after the folder they stand for.
std::string dir_name(const fs::path& dir) {
  fs::path p = dir.lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  if (p.empty() || p.filename() == "." || p.filename() == "..") p = fs::weakly_canonical(fs::absolute(dir));
  return p.filename().string();
}

// The first of name, name.gz that exists in dir.
std::string find_file(const fs::path& dir, const std::string& name) {
  for (const auto& cand : {name, name + ".gz"})
    if (fs::exists(dir / cand)) return (dir / cand).string();
  return "";
}

// The classes below the highest label that no training image has, as ranges ("3, 10..199"); ""
// when every class has one. The class count is the highest label + 1, so one corrupt label
// (200 in a 10-class set) makes a model with 201 outputs: said, not refused, since a real set
// may lack a class in training.
std::string classes_without_images(const Dataset& d) {
  std::vector<bool> seen(size_t(d.classes), false);
  for (const uint8_t l : d.labels) seen[l] = true;
  std::string out;
  for (size_t c = 0; c < seen.size();) {
    if (seen[c]) { ++c; continue; }
    size_t e = c;
    while (e + 1 < seen.size() && !seen[e + 1]) ++e;
    out += fmt::format("{}{}", out.empty() ? "" : ", ", e == c ? fmt::format("{}", c) : fmt::format("{}..{}", c, e));
    c = e + 1;
  }
  return out;
}

// A --data folder holding neither dataset kind: say what it should hold, and name a folder
// inside it that does (CIFAR-10's archive unpacks into cifar-10-batches-bin/, and a
// downloaded MNIST often lands in a raw/ folder).
[[noreturn]] void no_dataset_in(const fs::path& dir) {
  std::string inside;
  try {  // only for the hint: a folder that cannot be walked gets the message without it
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      std::error_code entry;  // an unreadable entry (a dangling link) is passed over
      if (e.is_directory(entry) && (fs::exists(e.path() / "data_batch_1.bin", entry) || !find_file(e.path(), "train-images-idx3-ubyte").empty())) {
        inside = e.path().string();
        break;
      }
    }
  } catch (const fs::filesystem_error&) {
  }
  throw Error(fmt::format("--data {}: no dataset in this folder: neither IDX files (train-images-idx3-ubyte[.gz] and its "
                          "labels, t10k-images and labels) nor CIFAR-10's binary batches (data_batch_1..5.bin, test_batch.bin)",
                          dir.string()),
              inside.empty() ? "point --data at the folder that holds them, or use fashion-mnist or synthetic"
                             : fmt::format("the folder {} holds one: --data {}", dir_name(inside), inside));
}

DataPair load_idx_dir(const fs::path& dir, const std::string& name, bool flip_ok) {
  DataPair p;
  const std::string names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
  std::string paths[4];
  for (int i = 0; i < 4; ++i) {
    paths[i] = find_file(dir, names[i]);
    check(!paths[i].empty(), fmt::format("{} has no {}[.gz]", dir.string(), names[i]),
          "an IDX dataset directory needs the train and t10k image and label files");
  }
  // The classes are those the labels name: MNIST-style sets in IDX files have 10, EMNIST's
  // splits 10 to 62. A test set that lacks the highest class still has the training set's count.
  p.train = read_idx(paths[0], paths[1], name, 0);
  p.test = read_idx(paths[2], paths[3], name, 0);
  p.train.classes = p.test.classes = std::max(p.train.classes, p.test.classes);
  if (const std::string missing = classes_without_images(p.train); !missing.empty())
    p.notice = fmt::format("{}'s labels name {} classes (0..{}), but no training image is labelled {}: "
                           "the model gets an output for each; if the set has fewer classes, a label file is corrupt",
                           dir.string(), p.train.classes, p.train.classes - 1, missing);
  check(p.train.height == p.test.height && p.train.width == p.test.width,
        fmt::format("{}: the training images are {}x{} and the test images {}x{}", dir.string(), p.train.height, p.train.width,
                    p.test.height, p.test.width),
        "the train and t10k files must come from the same dataset");
  p.train.flip_ok = p.test.flip_ok = flip_ok;
  p.source = dir.string();
  return p;
}

DataPair load_cifar_dir(const fs::path& dir) {
  DataPair p;
  std::vector<std::string> train;
  const char* needs = "a CIFAR-10 directory needs data_batch_1..5.bin and test_batch.bin";
  for (int i = 1; i <= 5; ++i) {
    auto f = dir / fmt::format("data_batch_{}.bin", i);
    check(fs::exists(f), fmt::format("{} is missing", f.string()), needs);
    train.push_back(f.string());
  }
  check(fs::exists(dir / "test_batch.bin"), fmt::format("{} is missing", (dir / "test_batch.bin").string()), needs);
  p.train = read_cifar10(train, "cifar10");
  p.test = read_cifar10({(dir / "test_batch.bin").string()}, "cifar10");
  p.source = dir.string();
  return p;
}

DataPair synthetic_pair(const std::string& spec) {
  // synthetic[:CxHxW[:N]]
  int64_t c = 1, h = 28, w = 28, n = 10000;
  const auto colon = spec.find(':');
  if (colon != std::string::npos) {
    std::string rest = spec.substr(colon + 1);
    long long n_ll = n;
    long long cc, hh, ww;
    int used = -1;  // characters read: anything after the numbers ("1x28x28:100:5", "...:10e3") is refused, not ignored
    int got = std::sscanf(rest.c_str(), "%lldx%lldx%lld%n:%lld%n", &cc, &hh, &ww, &used, &n_ll, &used);
    if (used != int(rest.size())) got = 0;
    check(got >= 3 && cc > 0 && cc <= 64 && hh >= 4 && hh <= 1024 && ww >= 4 && ww <= 1024 && n_ll >= 10 && n_ll <= 1000000000,
          fmt::format("--data {}: expected synthetic[:CxHxW[:N]] with C 1..64, H and W 4..1024, N 10..10^9", spec));
    c = cc, h = hh, w = ww, n = n_ll;
  }
  // The images are made in memory (train plus a fifth for test): more than the machine has would
  // end in "out of memory" with a hint about the batch size, or in the OOM killer.
  const int64_t images = n + n / 5;  // whole images: the test set is the integer fifth
  const double bytes = double(images) * double(c * h * w + 1);
  if (const double avail = hw::available_memory_bytes(); avail > 0)
    check(bytes < 0.8 * avail,
          fmt::format("--data {}: {} synthetic images of {}x{}x{} take {:.1f} GB, and {:.1f} GB of memory is available", spec,
                      images, c, h, w, bytes / 1e9, avail / 1e9),
          "use fewer images (the N in synthetic:CxHxW:N) or smaller ones");
  DataPair p;
  // One stream of samples split into train and test, so both follow the same classes.
  Dataset all = make_synthetic(images, c, h, w, 10, 0x5EED);
  p.train = all;
  p.train.truncate(n);
  p.test = all;
  p.test.labels.erase(p.test.labels.begin(), p.test.labels.begin() + n);
  p.test.images.erase(p.test.images.begin(), p.test.images.begin() + n * all.image_bytes());
  p.source = fmt::format("synthetic:{}x{}x{}:{}", c, h, w, n);
  return p;
}
}  // namespace

DataPair load_data(const std::string& spec) {
  if (spec == "synthetic" || spec.rfind("synthetic:", 0) == 0) return synthetic_pair(spec);
  if (spec == "fashion-mnist") {
    if (!fs::exists(kFashionMnistDir)) {
      DataPair p = synthetic_pair("synthetic");
      p.notice = fmt::format("Fashion-MNIST not found at {} (install it with: apt-get install "
                             "dataset-fashion-mnist); using synthetic 1x28x28 data instead", kFashionMnistDir);
      return p;
    }
    return load_idx_dir(kFashionMnistDir, "fashion-mnist", true);
  }
  const fs::path dir(spec);
  check(fs::is_directory(dir), fmt::format("--data {}: no such directory", spec),
        "use fashion-mnist, synthetic[:CxHxW[:N]], or a directory with IDX or CIFAR-10 files");
  if (fs::exists(dir / "data_batch_1.bin")) return load_cifar_dir(dir);
  if (find_file(dir, "train-images-idx3-ubyte").empty()) no_dataset_in(dir);
  const std::string dir_base = dir_name(dir);
  const std::string name = dir_base.find("fashion") != std::string::npos ? "fashion-mnist" : dir_base;
  // Digits change meaning when mirrored; clothes and most other images do not.
  const bool flip_ok = name.find("mnist") == std::string::npos || name.find("fashion") != std::string::npos;
  return load_idx_dir(dir, name, flip_ok);
}

bool same_data(const std::string& a, const std::string& b) {
  if (a == b) return true;
  auto dir = [](const std::string& spec) { return spec == "fashion-mnist" ? std::string(kFashionMnistDir) : spec; };
  std::error_code ec;  // a path that is gone or was never one is simply not the same
  return fs::is_directory(dir(a), ec) && fs::is_directory(dir(b), ec) && fs::equivalent(dir(a), dir(b), ec);
}

}  // namespace dlperf::data
