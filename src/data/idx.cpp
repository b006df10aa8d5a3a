#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "data/dataset.h"

namespace dlperf::data {

namespace {
const char* kHint = "download the files again, or pick another --data";

struct GzFile {
  gzFile f = nullptr;
  std::string path;
  explicit GzFile(const std::string& p) : f(gzopen(p.c_str(), "rb")), path(p) {
    check(f != nullptr, fmt::format("cannot open {}", p), "check the path given to --data");
    gzbuffer(f, 1 << 20);
  }
  ~GzFile() {
    if (f) gzclose(f);
  }
  // Reads up to n bytes, fewer only where the file ends; says what is wrong when it is corrupt.
  size_t read_some(void* dst, size_t n, const std::string& what) {
    size_t got = 0;
    while (got < n) {
      const unsigned chunk = unsigned(std::min<size_t>(n - got, 1u << 30));
      const int r = gzread(f, static_cast<char*>(dst) + got, chunk);
      if (r < 0) {
        int code = 0;
        std::string msg = gzerror(f, &code);
        if (msg.rfind(path + ": ", 0) == 0) msg.erase(0, path.size() + 2);  // zlib names the file too
        throw Error(fmt::format("{} is corrupt while reading {}: {}", path, what, msg), kHint);
      }
      if (r == 0) break;
      got += size_t(r);
    }
    return got;
  }
  [[noreturn]] void truncated(size_t got, size_t n, const std::string& what) const {
    throw Error(fmt::format("{} is truncated: it ends {} bytes into {} ({} bytes)", path, got, what, n), kHint);
  }
  // Reads exactly n bytes; says what is wrong when it cannot.
  void read(void* dst, size_t n, const std::string& what) {
    if (const size_t got = read_some(dst, n, what); got != n) truncated(got, n, what);
  }
  // Reads n bytes into `out`, growing it as they arrive: the header's count is not trusted for
  // the allocation, or a damaged count field (20 million images in a 1 MB file) would have
  // dlperf zero gigabytes before finding the file short. Growing costs a copy or two of a
  // real set's bytes (47 MB for Fashion-MNIST's training images), nothing next to inflating them.
  void read_into(std::vector<uint8_t>& out, size_t n, const std::string& what) {
    constexpr size_t kChunk = size_t(64) << 20;
    out.clear();
    out.reserve(std::min(n, kChunk));
    while (out.size() < n) {
      const size_t had = out.size(), step = std::min(n - had, std::max(kChunk, had));
      out.resize(had + step);
      const size_t got = read_some(out.data() + had, step, what);
      if (got < step) truncated(had + got, n, what);
    }
  }
  bool at_end() {
    char c;
    return gzread(f, &c, 1) == 0;
  }
};

uint32_t be32(const uint8_t* b) { return uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | b[3]; }
}  // namespace

Dataset read_idx(const std::string& images_path, const std::string& labels_path,
                 const std::string& name, int64_t classes) {
  Dataset d;
  d.name = name;
  d.channels = 1;
  d.classes = classes;
  {
    GzFile f(images_path);
    uint8_t h[16];
    f.read(h, 16, "the IDX image header");
    check(be32(h) == 0x00000803,
          fmt::format("{} is not an IDX image file (magic 0x{:08x}, expected 0x00000803)", images_path, be32(h)), kHint);
    const uint32_t n = be32(h + 4), rows = be32(h + 8), cols = be32(h + 12);
    check(n > 0 && n <= 100'000'000 && rows > 0 && rows <= 4096 && cols > 0 && cols <= 4096,
          fmt::format("{} has an impossible shape {}x{}x{}", images_path, n, rows, cols), kHint);
    d.height = rows;
    d.width = cols;
    f.read_into(d.images, size_t(n) * rows * cols, fmt::format("{} images of {}x{}", n, rows, cols));
    check(f.at_end(), fmt::format("{} has bytes past its {} images", images_path, n), kHint);
  }
  {
    GzFile f(labels_path);
    uint8_t h[8];
    f.read(h, 8, "the IDX label header");
    check(be32(h) == 0x00000801,
          fmt::format("{} is not an IDX label file (magic 0x{:08x}, expected 0x00000801)", labels_path, be32(h)), kHint);
    const uint32_t n = be32(h + 4);
    check(int64_t(n) * d.height * d.width == int64_t(d.images.size()),
          fmt::format("{} has {} labels but {} has {} images", labels_path, n, images_path,
                      d.images.size() / size_t(d.height * d.width)),
          "the image and label files must come from the same set");
    f.read_into(d.labels, n, fmt::format("{} labels", n));
    check(f.at_end(), fmt::format("{} has bytes past its {} labels", labels_path, n), kHint);
    if (classes == 0) {  // as many classes as the labels name (EMNIST has 47, MNIST 10)
      d.classes = d.labels.empty() ? 1 : int64_t(*std::max_element(d.labels.begin(), d.labels.end())) + 1;
    } else {
      for (size_t i = 0; i < d.labels.size(); ++i)
        check(d.labels[i] < classes,
              fmt::format("{}: label {} of sample {} is out of range (classes 0..{})", labels_path,
                          d.labels[i], i, classes - 1), kHint);
    }
  }
  return d;
}

}  // namespace dlperf::data
