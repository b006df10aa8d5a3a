// Dataset readers on good and damaged files, the synthetic set, and the loader: every sample
// once per epoch, identical batches for any number of workers, padding of a last eval batch.
#include <gtest/gtest.h>
#include <zlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "data/dataset.h"
#include "data/augment.h"
#include "data/loader.h"
#include "hw/cpu_info.h"
#include "train/trainer.h"
#include "test_util.h"

namespace dlperf::test {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> be32(uint32_t v) { return {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)}; }

std::vector<uint8_t> idx_images(uint32_t n, uint32_t h, uint32_t w, uint32_t magic = 0x803) {
  std::vector<uint8_t> b = be32(magic);
  for (uint32_t v : {n, h, w}) {
    auto x = be32(v);
    b.insert(b.end(), x.begin(), x.end());
  }
  for (uint32_t i = 0; i < n * h * w; ++i) b.push_back(uint8_t(i * 7));
  return b;
}

std::vector<uint8_t> idx_labels(uint32_t n, uint8_t bad_at = 255) {
  std::vector<uint8_t> b = be32(0x801);
  auto x = be32(n);
  b.insert(b.end(), x.begin(), x.end());
  for (uint32_t i = 0; i < n; ++i) b.push_back(i == bad_at ? 12 : uint8_t(i % 10));
  return b;
}

void write(const fs::path& p, const std::vector<uint8_t>& bytes, bool gz = false) {
  if (gz) {
    gzFile f = gzopen(p.c_str(), "wb");
    gzwrite(f, bytes.data(), unsigned(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
}

void write_idx_set(const fs::path& dir, bool gz) {
  const std::string ext = gz ? ".gz" : "";
  write(dir / ("train-images-idx3-ubyte" + ext), idx_images(20, 6, 5), gz);
  write(dir / ("train-labels-idx1-ubyte" + ext), idx_labels(20), gz);
  write(dir / ("t10k-images-idx3-ubyte" + ext), idx_images(7, 6, 5), gz);
  write(dir / ("t10k-labels-idx1-ubyte" + ext), idx_labels(7), gz);
}

TEST(Idx, ReadsRawAndGzipDirectories) {
  for (bool gz : {false, true}) {
    TempDir t;
    write_idx_set(t.path, gz);
    auto d = data::load_data(t.path.string());
    EXPECT_EQ(d.train.size(), 20);
    EXPECT_EQ(d.test.size(), 7);
    EXPECT_EQ(d.train.height, 6);
    EXPECT_EQ(d.train.width, 5);
    EXPECT_EQ(d.train.images[3], uint8_t(21));
    EXPECT_EQ(d.train.labels[13], 3);
    EXPECT_EQ(d.train.classes, 10);  // the labels name 0..9; the test set's 0..6 has the training set's count
    EXPECT_EQ(d.test.classes, 10);
  }
  TempDir t;  // a test set from another dataset
  write_idx_set(t.path, false);
  write(t.path / "t10k-images-idx3-ubyte", idx_images(7, 5, 5));
  EXPECT_NE(error_of([&] { data::load_data(t.path.string()); }).find("the training images are 6x5 and the test images 5x5"),
            std::string::npos);
}

TEST(Idx, ADirectoryIsNamedAndKnownHoweverItIsSpelled) {
  TempDir t;
  const fs::path dir = t.path / "clothes";
  fs::create_directory(dir);
  write_idx_set(dir, false);
  // "clothes/" has an empty filename(): the set must still be "clothes", in the console and
  // in the run record's file name.
  for (const fs::path& spelled : {dir, fs::path(dir.string() + "/"), dir / ".", dir / "sub" / ".."}) {
    if (spelled.string().find("sub") != std::string::npos) fs::create_directory(dir / "sub");
    EXPECT_EQ(data::load_data(spelled.string()).train.name, "clothes") << spelled;
    EXPECT_TRUE(data::same_data(dir.string(), spelled.string())) << spelled;
  }
  EXPECT_TRUE(data::same_data("synthetic:1x8x8:64", "synthetic:1x8x8:64"));
  EXPECT_FALSE(data::same_data("synthetic:1x8x8:64", "synthetic:1x8x8:128"));
  EXPECT_FALSE(data::same_data(dir.string(), t.path.string()));
  EXPECT_FALSE(data::same_data(dir.string(), (t.path / "gone").string()));
}

// An IDX set has the classes its labels name: EMNIST's balanced split has 47, and trains as such
// (its labels were refused as "out of range (classes 0..9)").
TEST(Idx, ASetHasTheClassesItsLabelsName) {
  TempDir t;
  std::vector<uint8_t> labels = be32(0x801), n = be32(94);
  labels.insert(labels.end(), n.begin(), n.end());
  for (uint32_t i = 0; i < 94; ++i) labels.push_back(uint8_t(i % 47));
  write(t.path / "train-images-idx3-ubyte", idx_images(94, 8, 8));
  write(t.path / "train-labels-idx1-ubyte", labels);
  write(t.path / "t10k-images-idx3-ubyte", idx_images(7, 8, 8));
  write(t.path / "t10k-labels-idx1-ubyte", idx_labels(7));
  const auto d = data::load_data(t.path.string());
  EXPECT_EQ(d.train.classes, 47);
  EXPECT_EQ(d.test.classes, 47);
  train::TrainConfig c;
  c.data = t.path.string(), c.model = "mlp", c.device = "cpu", c.batch = 16, c.epochs = 1;
  c.runs_dir = "", c.quiet = true, c.progress = false;
  const train::TrainResult r = train::train(c);
  EXPECT_EQ(r.record["data"]["classes"], 47);
  EXPECT_EQ(d.notice, "");  // every class has training images
}

// One corrupt label (200 in a 10-class set) makes 201 classes. That is said, naming the classes
// no training image has, since a model with 191 unused outputs is rarely what was meant.
TEST(Idx, ClassesNoTrainingImageHasAreSaid) {
  TempDir t;
  write_idx_set(t.path, false);
  EXPECT_EQ(data::load_data(t.path.string()).notice, "");
  std::vector<uint8_t> labels = idx_labels(20);
  labels[8 + 3] = 200;  // sample 3 had label 3 (i % 10); sample 13 keeps class 3
  write(t.path / "train-labels-idx1-ubyte", labels);
  const auto d = data::load_data(t.path.string());
  EXPECT_EQ(d.train.classes, 201);
  EXPECT_NE(d.notice.find("labels name 201 classes (0..200), but no training image is labelled 10..199: "), std::string::npos)
      << d.notice;
  labels[8 + 5] = labels[8 + 15] = 6;  // class 5's two samples: now neither 5 nor 10..199 has one
  write(t.path / "train-labels-idx1-ubyte", labels);
  EXPECT_NE(data::load_data(t.path.string()).notice.find("no training image is labelled 5, 10..199: "), std::string::npos);
}

TEST(Idx, DamagedFilesGiveOneClearError) {
  TempDir t;
  const auto img = t.path / "img", lab = t.path / "lab";
  auto read = [&] { return error_of([&] { data::read_idx(img.string(), lab.string(), "x"); }); };
  write(lab, idx_labels(4));
  write(img, idx_images(4, 3, 3, 0x801));
  EXPECT_NE(read().find("is not an IDX image file"), std::string::npos) << read();
  auto short_img = idx_images(4, 3, 3);
  short_img.resize(short_img.size() - 5);
  write(img, short_img);
  EXPECT_NE(read().find("is truncated"), std::string::npos) << read();
  write(img, idx_images(4, 3, 3));
  write(lab, idx_labels(5));
  EXPECT_NE(read().find("has 5 labels but"), std::string::npos) << read();
  write(lab, idx_labels(4, 2));
  EXPECT_NE(read().find("label 12 of sample 2 is out of range"), std::string::npos) << read();
  auto extra = idx_images(4, 3, 3);
  extra.push_back(1);
  write(img, extra);
  write(lab, idx_labels(4));
  EXPECT_NE(read().find("bytes past its 4 images"), std::string::npos) << read();
  write(img, {0, 0});
  EXPECT_NE(read().find("truncated"), std::string::npos) << read();
  // A damaged count field is found short, not believed: 100 million 28x28 images (78 GB) in a
  // file of 4 is read as far as it goes (it was allocated first: 'out of memory', or with a
  // count that fits the RAM, gigabytes zeroed for a minute before the same finding).
  auto lying = idx_images(4, 28, 28);
  const auto count = be32(100'000'000);
  std::copy(count.begin(), count.end(), lying.begin() + 4);
  for (bool gz : {false, true}) {
    write(img, lying, gz);
    EXPECT_NE(read().find("is truncated: it ends 3136 bytes into 100000000 images of 28x28 (78400000000 bytes)"),
              std::string::npos) << read();
  }
  // A gzip file cut short is reported, not read as zeros.
  std::vector<uint8_t> big = idx_images(50, 28, 28);
  write(img, big, true);
  auto bytes = [&] {
    std::ifstream f(img, std::ios::binary);
    return std::vector<char>((std::istreambuf_iterator<char>(f)), {});
  }();
  std::ofstream(img, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size() / 2));
  EXPECT_FALSE(read().empty());
  EXPECT_NE(error_of([&] { data::read_idx("/no/such/file", lab.string(), "x"); }).find("cannot open"), std::string::npos);
  EXPECT_NE(error_of([&] { data::load_data("/no/such/dir"); }).find("no such directory"), std::string::npos);
}

// A folder with no dataset says what it should hold, and names a folder inside that holds one
// (CIFAR-10's archive unpacks into cifar-10-batches-bin/).
TEST(Data, AFolderWithoutADatasetSaysWhatItShouldHold) {
  TempDir t;
  const std::string empty = error_of([&] { data::load_data(t.path.string()); });
  EXPECT_NE(empty.find("no dataset in this folder: neither IDX files"), std::string::npos) << empty;
  EXPECT_NE(empty.find("point --data at the folder that holds them"), std::string::npos) << empty;
  std::filesystem::create_directory(t.path / "cifar-10-batches-bin");
  write(t.path / "cifar-10-batches-bin" / "data_batch_1.bin", std::vector<uint8_t>(3073, 1));
  const std::string parent = error_of([&] { data::load_data(t.path.string()); });
  EXPECT_NE(parent.find("the folder cifar-10-batches-bin holds one: --data " + (t.path / "cifar-10-batches-bin").string()),
            std::string::npos) << parent;
}

TEST(Cifar, ReadsBatchesAndRejectsDamage) {
  TempDir t;
  auto record = [](uint8_t label) {
    std::vector<uint8_t> r(3073, 9);
    r[0] = label;
    return r;
  };
  std::vector<uint8_t> batch;
  for (int i = 0; i < 3; ++i) {
    auto r = record(uint8_t(i));
    batch.insert(batch.end(), r.begin(), r.end());
  }
  for (int i = 1; i <= 5; ++i) write(t.path / ("data_batch_" + std::to_string(i) + ".bin"), batch);
  write(t.path / "test_batch.bin", batch);
  auto d = data::load_data(t.path.string());
  EXPECT_EQ(d.train.size(), 15);
  EXPECT_EQ(d.train.channels, 3);
  EXPECT_EQ(d.test.labels[2], 2);
  auto cut = batch;
  cut.pop_back();
  write(t.path / "test_batch.bin", cut);
  EXPECT_NE(error_of([&] { data::load_data(t.path.string()); }).find("not a whole number"), std::string::npos);
  auto bad = batch;
  bad[3073] = 11;
  write(t.path / "test_batch.bin", bad);
  EXPECT_NE(error_of([&] { data::load_data(t.path.string()); }).find("label 11 of record 1"), std::string::npos);
}

TEST(Synthetic, IsDeterministicAndShaped) {
  auto a = data::load_data("synthetic:3x8x8:100"), b = data::load_data("synthetic:3x8x8:100");
  EXPECT_EQ(a.train.images, b.train.images);
  EXPECT_EQ(a.train.size(), 100);
  EXPECT_EQ(a.test.size(), 20);
  EXPECT_EQ(a.train.channels, 3);
  EXPECT_NE(error_of([] { data::load_data("synthetic:0x8"); }).find("expected synthetic"), std::string::npos);
  EXPECT_EQ(data::load_data("synthetic:1x8x8").train.size(), 10000);
  // Whatever follows the numbers is refused, not ignored (":10e3" read as 10, ":100:5" as 100).
  for (const char* spec : {"synthetic:1x8x8:10e3", "synthetic:1x8x8:100:5", "synthetic:1x8x8x2", "synthetic:1x8x8:", "synthetic:1x8x8:100 "})
    EXPECT_NE(error_of([&] { data::load_data(spec); }).find("expected synthetic"), std::string::npos) << spec;
  // More images than memory: said as such, before "out of memory" with a hint about the batch.
  const std::string big = error_of([] { data::load_data("synthetic:64x1024x1024:1000000"); });
  EXPECT_NE(big.find("1200000 synthetic images of 64x1024x1024 take 80530.6 GB"), std::string::npos) << big;
}

std::vector<std::vector<float>> epoch_batches(const data::Dataset& d, data::LoaderConfig cfg, int64_t epoch) {
  std::vector<float> mean, sd;
  data::channel_stats(d, mean, sd);
  data::Loader l(d, cfg, mean, sd);
  l.start_epoch(epoch);
  std::vector<std::vector<float>> out;
  while (const data::Batch* b = l.next()) {
    std::vector<float> v(b->data(), b->data() + b->images->bytes() / 4);
    for (int32_t y : b->labels) v.push_back(float(y));
    out.push_back(std::move(v));
  }
  return out;
}

TEST(Loader, BatchesAreIdenticalForAnyNumberOfWorkers) {
  auto d = data::load_data("synthetic:1x12x12:500").train;
  d.flip_ok = true;
  data::LoaderConfig cfg;
  cfg.batch = 32;
  cfg.seed = 7;
  cfg.workers = 0;
  auto ref = epoch_batches(d, cfg, 3);
  EXPECT_EQ(ref.size(), 500u / 32);
  for (int w : {1, 2, 5}) {
    cfg.workers = w;
    EXPECT_EQ(epoch_batches(d, cfg, 3), ref) << w << " workers";
  }
  cfg.prefetch = 1;  // smallest queue still works
  cfg.workers = 3;
  EXPECT_EQ(epoch_batches(d, cfg, 3), ref);
  EXPECT_NE(epoch_batches(d, cfg, 4), ref);  // another epoch, another order
  // Queues of any length, an odd one too: workers sleep until half of it is free (at least one
  // slot), and one woken that way must find its own slot free.
  for (const int prefetch : {2, 3, 7, 16})
    for (const int w : {1, 2, 3}) {
      cfg.prefetch = prefetch;
      cfg.workers = w;
      EXPECT_EQ(epoch_batches(d, cfg, 3), ref) << w << " workers, " << prefetch << " slots";
    }
  // Workers that spin for their slots (a core each beside one compute thread, where there are cores).
  cfg.compute_threads = 1;
  for (const int prefetch : {2, 3, 8})
    for (const int w : {1, 2}) {
      cfg.prefetch = prefetch;
      cfg.workers = w;
      EXPECT_EQ(epoch_batches(d, cfg, 3), ref) << w << " spinning workers, " << prefetch << " slots";
    }
}

// A worker with a core of its own (one compute thread beside it) spins for its slot a while
// instead of sleeping: behind a consumer that takes a batch every 50 us it hardly ever sleeps,
// where one that shares the cores sleeps about once per half a queue. Behind one that holds each
// batch 1 ms it stops spinning and sleeps.
TEST(Loader, AWorkerWithACoreOfItsOwnSpinsForItsSlot) {
  if (hw::usable_cpus() < 2) GTEST_SKIP() << "one usable CPU: no core for the worker alone";
  const auto d = data::load_data("synthetic:1x8x8:640").train;
  data::LoaderConfig cfg;
  cfg.batch = 4;  // 160 batches
  cfg.workers = 1;
  cfg.augment = false;
  cfg.prefetch = 8;
  auto waits = [&](int compute_threads, int consumer_us) {
    cfg.compute_threads = compute_threads;
    data::Loader l(d, cfg, {0.5f}, {0.25f});
    l.start_epoch(0);
    int64_t batches = 0;
    while (l.next()) {
      ++batches;
      std::this_thread::sleep_for(std::chrono::microseconds(consumer_us));
    }
    EXPECT_EQ(batches, 160);
    return l.worker_waits();
  };
  const int64_t sleeping = waits(hw::usable_cpus(), 50), spinning = waits(1, 50);
  EXPECT_GE(sleeping, 20);  // 160 batches, a wait per 4
  EXPECT_LE(spinning, sleeping / 4);  // a preempted spin may still run out now and then
  EXPECT_GE(waits(1, 1000), 20);  // a spin lasts 200 us
}

// A worker that finds its slot taken waits until half the queue is free and then refills it in
// a run: over an epoch it waits at most once per half a queue of batches (and once more), not
// once a batch, whichever thread runs ahead. A consumer that holds each batch a while lets the
// worker fill the queue and wait; one that takes them back to back mostly finds them ready.
TEST(Loader, AWorkerWaitsOncePerHalfAQueueNotOnceABatch) {
  const auto d = data::load_data("synthetic:1x8x8:640").train;
  data::LoaderConfig cfg;
  cfg.batch = 4;  // 160 batches
  cfg.workers = 1;
  cfg.augment = false;
  for (const int slots : {8, 5, 2}) {
    cfg.prefetch = slots;
    data::Loader l(d, cfg, {0.5f}, {0.25f});
    for (const bool slow : {true, false}) {
      l.start_epoch(0);
      int64_t batches = 0;
      while (l.next()) {
        ++batches;
        if (slow) std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      EXPECT_EQ(batches, 160);
      const int64_t half = std::max(1, slots / 2);
      EXPECT_LE(l.worker_waits(), batches / half + 1) << slots << " slots" << (slow ? ", slow consumer" : "");
      // Not vacuous: a consumer 50 us a batch behind a worker that fills one in a microsecond
      // keeps it waiting (about 40 times with 8 slots).
      if (slow) {
        EXPECT_GE(l.worker_waits(), 1) << slots << " slots";
      }
    }
  }
}

// Small batches queue up to 8 deep (within 32 MiB), so that a worker refills several a wake;
// large ones 2 per worker; without workers the training thread fills the only one.
TEST(Loader, QueueHoldsSeveralSmallBatchesAndTwoPerWorker) {
  EXPECT_EQ(data::loader_slots(0, 50e3), 1);
  EXPECT_EQ(data::loader_slots(1, 50e3), 8);     // the mlp's 16 Fashion-MNIST images: 50 KB
  EXPECT_EQ(data::loader_slots(1, 8e6), 4);      // 32 MiB / 8 MB
  EXPECT_EQ(data::loader_slots(1, 12.6e6), 2);   // batch 1024 of 3x32x32
  EXPECT_EQ(data::loader_slots(6, 50e3), 12);    // 2 per worker beats the byte budget
  EXPECT_EQ(data::loader_slots(2, 1e9), 4);
}

// Checks every pixel of an epoch of augmented batches of C x H x W images; counts the samples
// flipped and shifted.
void expect_crops_and_flips_as_defined(int64_t C, int64_t H, int64_t W, int64_t pad, int& flipped, int& shifted) {
  const data::Dataset d = [&] {
    data::Dataset s = data::make_synthetic(64, C, H, W, 10, 4);
    s.flip_ok = true;
    return s;
  }();
  data::LoaderConfig cfg;
  cfg.batch = 16;
  cfg.seed = 3;
  cfg.augment = true;
  cfg.pad_crop = pad;
  cfg.workers = 0;
  const std::vector<float> mean = {0.2f, 0.5f, 0.7f}, sd = {0.3f, 0.25f, 0.2f};
  data::Loader l(d, cfg, mean, sd);
  const int64_t epoch = 1;
  l.start_epoch(epoch);
  const auto order = data::epoch_order(d.size(), true, cfg.seed, epoch);
  while (const data::Batch* b = l.next()) {
    for (int64_t i = 0; i < cfg.batch; ++i) {
      const int64_t sample = order[size_t(b->index * cfg.batch + i)];
      const data::Crop crop = data::random_crop(cfg.seed, epoch, sample, cfg.pad_crop, true);
      flipped += crop.flip, shifted += crop.dx != 0 || crop.dy != 0;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t y = 0; y < H; ++y)
          for (int64_t x = 0; x < W; ++x) {
            const int64_t sy = y + crop.dy, sx = (crop.flip ? W - 1 - x : x) + crop.dx;
            const double v = sy >= 0 && sy < H && sx >= 0 && sx < W ? d.images[size_t(((sample * C + c) * H + sy) * W + sx)] : 0.0;
            const double want = (v / 255.0 - mean[size_t(c)]) / sd[size_t(c)];
            ASSERT_NEAR(b->data()[((i * C + c) * H + y) * W + x], want, 1e-5)
                << "sample " << sample << " channel " << c << " at " << y << "," << x << " (crop " << crop.dy << "," << crop.dx
                << (crop.flip ? ", flipped)" : ")");
          }
    }
  }
}

// Every pixel of an augmented batch is its definition: the source pixel the crop and flip of its
// sample point at (the crop's zero padding where they point outside), normalized per channel.
TEST(Loader, CropsAndFlipsAreTheirDefinition) {
  int flipped = 0, shifted = 0;
  // pad 3, wider than the default 2: windows that shift by more than a third of the width
  expect_crops_and_flips_as_defined(3, 7, 9, 3, flipped, shifted);
  EXPECT_GT(flipped, 8);
  EXPECT_GT(shifted, 40);
  // Shifts as large as the image or larger: windows that read nothing but padding.
  expect_crops_and_flips_as_defined(2, 1, 2, 3, flipped, shifted);
  // No padding (--crop-pad 0): flips alone, about half the samples, and no window shifted.
  int flipped_only = 0, shifted_none = 0;
  expect_crops_and_flips_as_defined(3, 7, 9, 0, flipped_only, shifted_none);
  EXPECT_GT(flipped_only, 16);
  EXPECT_LT(flipped_only, 48);
  EXPECT_EQ(shifted_none, 0);
}

// The order the GPU's on-device loader is given is the host loader's order.
TEST(Loader, EpochOrderIsTheLoadersOrder) {
  auto d = data::load_data("synthetic:1x4x4:300").train;
  for (int64_t i = 0; i < d.size(); ++i) d.labels[size_t(i)] = uint8_t(i % 10);
  data::LoaderConfig cfg;
  cfg.batch = 300;
  cfg.seed = 5;
  cfg.augment = false;
  std::vector<float> mean{0.f}, stddev{1.f};
  data::Loader loader(d, cfg, mean, stddev);
  loader.start_epoch(3);
  const data::Batch* b = loader.next();
  const auto order = data::epoch_order(d.size(), true, cfg.seed, 3);
  for (int64_t i = 0; i < d.size(); ++i) ASSERT_EQ(b->labels[size_t(i)], int32_t(order[size_t(i)] % 10)) << i;
  EXPECT_NE(order, data::epoch_order(d.size(), true, cfg.seed, 4));
  const auto plain = data::epoch_order(5, false, cfg.seed, 3);
  EXPECT_EQ(plain, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(Loader, EachSampleOncePerEpochAndEvalPadsTheLastBatch) {
  auto d = data::load_data("synthetic:1x4x4:100").train;
  for (int64_t i = 0; i < d.size(); ++i) d.labels[size_t(i)] = uint8_t(i % 10);
  data::LoaderConfig cfg;
  cfg.batch = 30;
  cfg.augment = false;
  cfg.drop_last = false;
  cfg.workers = 2;
  std::vector<float> mean, sd;
  data::channel_stats(d, mean, sd);
  data::Loader l(d, cfg, mean, sd);
  l.start_epoch(0);
  std::vector<int> seen(10, 0);
  int64_t batches = 0, valid = 0;
  while (const data::Batch* b = l.next()) {
    ++batches;
    valid += b->valid;
    for (int64_t i = 0; i < b->valid; ++i) seen[size_t(b->labels[size_t(i)])]++;
  }
  EXPECT_EQ(batches, 4);
  EXPECT_EQ(valid, 100);
  for (int c : seen) EXPECT_EQ(c, 10);
  // Normalized data has mean about 0 and std about 1 without augmentation.
  cfg.shuffle = false;
  data::Loader plain(d, cfg, mean, sd);
  plain.start_epoch(0);
  double s = 0, s2 = 0;
  int64_t n = 0;
  while (const data::Batch* b = plain.next())
    for (int64_t i = 0; i < b->valid * 16; ++i) s += b->data()[i], s2 += double(b->data()[i]) * b->data()[i], ++n;
  EXPECT_NEAR(s / double(n), 0.0, 1e-3);
  EXPECT_NEAR(s2 / double(n), 1.0, 1e-2);
}

TEST(Loader, RejectsImpossibleSettings) {
  auto d = data::load_data("synthetic:1x4x4:100").train;
  std::vector<float> mean{0}, sd{1};
  data::LoaderConfig cfg;
  cfg.batch = 101;
  EXPECT_NE(error_of([&] { data::Loader l(d, cfg, mean, sd); }).find("larger than the 100 training images"), std::string::npos);
  cfg.batch = 0;
  EXPECT_FALSE(error_of([&] { data::Loader l(d, cfg, mean, sd); }).empty());
  cfg.batch = 10;
  cfg.workers = -1;
  EXPECT_FALSE(error_of([&] { data::Loader l(d, cfg, mean, sd); }).empty());
}

}  // namespace
}  // namespace dlperf::test
