#include "train/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/json_error.h"
#include "train/trainer.h"

namespace dlperf::train {

namespace fs = std::filesystem;
using json = nlohmann::json;
static constexpr char kMagic[8] = {'D', 'L', 'P', 'E', 'R', 'F', 'C', 'K'};
static constexpr int kVersion = 2;  ///< 2: the header's CRC-32 after the data

namespace {
// CRC-32 (zlib's) of the tensors' bytes in file order, which is the map's (save writes them in
// it): a flipped bit in the weights changes no size, so without it a damaged checkpoint would
// resume and train on from wrong weights.
uint32_t data_crc32(const std::map<std::string, std::vector<float>>& tensors) {
  uLong crc = crc32_z(0L, Z_NULL, 0);
  for (const auto& [name, v] : tensors) crc = crc32_z(crc, reinterpret_cast<const Bytef*>(v.data()), v.size() * sizeof(float));
  return uint32_t(crc);
}

// CRC-32 (zlib's) of the header's bytes as written. data_crc32 covers the weights; this covers
// the rest: a damaged byte in the header's config or history (an lr, a test loss) most often
// still parses, and the run would resume from it and record it as measured.
uint32_t header_crc32(const std::string& h) {
  return uint32_t(crc32_z(crc32_z(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(h.data()), h.size()));
}

// The magic, the header length and the JSON header of the checkpoint open in `f` (`size` bytes);
// `f` is left where the data begin. Throws Error with `hint` on a file that is not a checkpoint,
// or one of a version this dlperf cannot read.
struct Header {
  json meta;
  std::string text;  ///< as written: what its CRC-32 covers
};
Header read_header(std::ifstream& f, uint64_t size, const std::string& path, const std::string& hint) {
  char magic[8];
  uint64_t hlen = 0;
  f.read(magic, 8);
  f.read(reinterpret_cast<char*>(&hlen), 8);
  check(f && std::memcmp(magic, kMagic, 8) == 0, fmt::format("{} is not a dlperf checkpoint", path), hint);
  check(hlen < size - 16, fmt::format("{} is truncated (header)", path), hint);
  Header h;
  h.text.resize(hlen);
  f.read(h.text.data(), std::streamsize(hlen));
  try {
    h.meta = json::parse(h.text);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{} has a corrupt header: {}", path, json_error_text(e)), hint);
  }
  const json version = h.meta.is_object() ? h.meta.value("version", json(1)) : json(1);
  check(version == 1 || version == kVersion,
        fmt::format("{} is a checkpoint of version {}, which this dlperf cannot read (it reads 1 and {})", path, version.dump(), kVersion),
        "resume it with the dlperf that wrote it, or " + hint);
  return h;
}

bool has_header_crc(const json& meta) { return meta.is_object() && meta.value("version", json(1)) == kVersion; }

// Checks the header against its CRC-32, the file's last 4 bytes (version 2; version 1 files have
// none), and leaves `f` where it was.
void check_header_crc(std::ifstream& f, uint64_t size, const Header& h, const std::string& path, const std::string& hint) {
  if (!has_header_crc(h.meta)) return;
  check(size >= 16 + h.text.size() + 4, fmt::format("{} is truncated (no header CRC-32 at its end)", path), hint);
  const std::streampos at = f.tellg();
  uint32_t want = 0;
  f.seekg(std::streamoff(size - 4));
  f.read(reinterpret_cast<char*>(&want), 4);
  f.seekg(at);
  const uint32_t got = header_crc32(h.text);
  check(f && got == want, fmt::format("{} is damaged: the CRC-32 of its header is {:08x}, and it was written as {:08x}", path, got, want),
        hint);
}

// Checks the header fields a resume reads (check_checkpoint_matches, the trainers' resume,
// resumed_line) have the types they are read as, so a damaged or hand-edited header is refused
// here, naming its field, and not deep in a resume as "type must be number, but is string".
void check_header(const json& meta, const std::string& path, const std::string& hint) {
  auto need = [&](bool ok, const std::string& field, const char* what) {
    check(ok, fmt::format("{} has a damaged header: its {} is not {}", path, field, what), hint);
  };
  auto count = [](const json& v) { return v.is_number_integer() && v.get<int64_t>() >= 0; };
  need(meta.is_object(), "header", "a JSON object");
  need(meta.contains("model") && meta["model"].is_string(), "model", "a name");
  need(meta.contains("batch_size") && count(meta["batch_size"]), "batch_size", "a whole number");
  need(meta.contains("epoch_done") && count(meta["epoch_done"]), "epoch_done", "a whole number");
  need(meta.contains("optimizer_steps") && count(meta["optimizer_steps"]), "optimizer_steps", "a whole number");
  if (meta.contains("input"))
    need(meta["input"].is_array() && std::all_of(meta["input"].begin(), meta["input"].end(), count), "input", "a shape");
  need(meta.contains("tensors") && meta["tensors"].is_array(), "tensors", "a list");
  for (const auto& t : meta["tensors"])
    need(t.is_object() && t.value("name", json()).is_string() && count(t.value("count", json())), "tensors",
         "a list of names and counts");
  if (meta.contains("data_crc32"))
    need(meta["data_crc32"].is_number_unsigned() && meta["data_crc32"].get<uint64_t>() <= UINT32_MAX, "data_crc32", "a CRC-32");
  const json config = meta.value("config", json::object());
  need(config.is_object(), "config", "a JSON object");
  for (const char* key : {"data", "optimizer", "schedule"})
    need(!config.contains(key) || config[key].is_string(), fmt::format("config.{}", key), "a name");
  need(!config.contains("epochs") || config["epochs"].is_number_integer(), "config.epochs", "a whole number");
  need(meta.contains("history") && meta["history"].is_array(), "history", "a list of the finished epochs");
  for (size_t i = 0; i < meta["history"].size(); ++i) try {
      // found by scripts/fuzz_inputs.py (seed 9139): a number there read "cannot use at() with number"
      need(meta["history"][i].is_object(), fmt::format("history's epoch {}", i + 1), "an object of the epoch's figures");
      epoch_from_json(meta["history"][i]);
    } catch (const json::exception& e) {
      throw Error(fmt::format("{} has a damaged header: its history's epoch {} reads '{}'", path, i + 1, json_error_text(e)), hint);
    }
}
}  // namespace

std::string checkpoint_path(const std::string& dir) { return (fs::path(dir) / "checkpoint.dlperf").string(); }

std::optional<HeldCheckpoint> checkpoint_held(const std::string& dir) {
  const std::string path = checkpoint_path(dir);
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return std::nullopt;
  const uint64_t size = uint64_t(f.tellg());
  f.seekg(0);
  try {
    const Header h = read_header(f, size, path, "");
    check_header_crc(f, size, h, path, "");
    const json& meta = h.meta;
    const json& config = meta.value("config", json::object());
    return HeldCheckpoint{fmt::format("a checkpoint of {} after epoch {}{}", meta.value("model", std::string("?")),
                                      meta.value("epoch_done", int64_t(0)),
                                      config.contains("epochs") ? fmt::format(" of {}", config["epochs"].dump()) : "")};
  } catch (const std::exception& e) {
    return HeldCheckpoint{fmt::format("not a checkpoint dlperf can read: {}", e.what()), false};
  }
}

void save_checkpoint(const std::string& dir, const Checkpoint& ck) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  check(!ec, fmt::format("cannot create checkpoint directory {}: {}", dir, ec.message()));
  nlohmann::json header = ck.meta;
  header["format"] = "dlperf-checkpoint";
  header["version"] = kVersion;
  nlohmann::json index = nlohmann::json::array();
  uint64_t offset = 0;
  for (const auto& [name, v] : ck.tensors) {
    index.push_back({{"name", name}, {"offset", offset}, {"count", v.size()}});
    offset += v.size();
  }
  header["tensors"] = index;
  header["data_crc32"] = data_crc32(ck.tensors);
  const std::string h = header.dump();
  const std::string final_path = checkpoint_path(dir), tmp = final_path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  check(fd >= 0, fmt::format("cannot write {}: {}", tmp, std::strerror(errno)));
  auto write_all = [&](const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      const ssize_t w = ::write(fd, c, n);
      if (w < 0) {
        const std::string err = std::strerror(errno);
        ::close(fd);
        ::unlink(tmp.c_str());
        throw Error(fmt::format("writing checkpoint {} failed: {}", tmp, err), "free disk space or pick another --checkpoint");
      }
      c += w;
      n -= size_t(w);
    }
  };
  const uint64_t hlen = h.size();
  write_all(kMagic, 8);
  write_all(&hlen, 8);
  write_all(h.data(), h.size());
  for (const auto& [name, v] : ck.tensors) write_all(v.data(), v.size() * sizeof(float));
  const uint32_t crc = header_crc32(h);
  write_all(&crc, 4);
  check(::fsync(fd) == 0 && ::close(fd) == 0, fmt::format("cannot flush {}", tmp));
  fs::rename(tmp, final_path, ec);
  check(!ec, fmt::format("cannot move {} into place: {}", tmp, ec.message()));
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {  // make the rename itself durable
    ::fsync(dfd);
    ::close(dfd);
  }
}

Checkpoint load_checkpoint(const std::string& dir) {
  const std::string path = checkpoint_path(dir);
  const std::string hint = "delete it to start afresh, or point --checkpoint at another directory";
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  check(bool(f), fmt::format("no checkpoint to resume from at {}", path), "run once without --resume first");
  const uint64_t size = uint64_t(f.tellg());
  f.seekg(0);
  Checkpoint ck;
  const Header header = read_header(f, size, path, hint);
  ck.meta = header.meta;
  check_header(ck.meta, path, hint);
  const uint64_t hlen = uint64_t(f.tellg()) - 16;
  uint64_t total = 0;  // floats; each count is checked against the file's size first, so the sum cannot wrap
  for (const auto& t : ck.meta.at("tensors")) {
    const uint64_t count = t.at("count").get<uint64_t>();
    check(count <= size / 4 && total + count <= size / 4,
          fmt::format("{} is truncated or damaged: its header counts more values than its {} bytes hold", path, size), hint);
    total += count;
  }
  const uint64_t expected = 16 + hlen + total * 4 + (has_header_crc(ck.meta) ? 4 : 0);
  check(expected == size, fmt::format("{} is truncated or damaged: expected {} bytes, found {}", path, expected, size), hint);
  check_header_crc(f, size, header, path, hint);
  for (const auto& t : ck.meta.at("tensors")) {
    std::vector<float> v(t.at("count").get<size_t>());
    f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * 4));
    ck.tensors[t.at("name").get<std::string>()] = std::move(v);
  }
  check(bool(f), fmt::format("{} could not be read completely", path), hint);
  if (ck.meta.contains("data_crc32")) {  // checkpoints from before it was written have none
    const uint32_t want = ck.meta["data_crc32"].get<uint32_t>(), got = data_crc32(ck.tensors);
    check(got == want, fmt::format("{} is damaged: the CRC-32 of its weights and optimizer state is {:08x}, and it was written as {:08x}", path, got, want), hint);
  }
  ck.meta.erase("tensors");
  return ck;
}

const std::vector<float>& checkpoint_tensor(const Checkpoint& ck, const std::string& name, size_t count) {
  auto it = ck.tensors.find(name);
  check(it != ck.tensors.end(), fmt::format("the checkpoint has no tensor '{}'", name),
        "it was written for another model; use the same --model, or another --checkpoint");
  check(it->second.size() == count, fmt::format("checkpoint tensor '{}' has {} values, the model needs {}", name, it->second.size(), count),
        "it was written for another model or input shape");
  return it->second;
}

void check_checkpoint_matches(const Checkpoint& ck, const std::string& dir, const std::string& model, int64_t batch,
                              const Dims& input, const std::string& optimizer) {
  check(ck.meta.value("model", "") == model && ck.meta.value("batch_size", int64_t(0)) == batch,
        fmt::format("the checkpoint in {} is for model {} at batch size {}, not {} at {}", dir, ck.meta.value("model", "?"),
                    ck.meta.value("batch_size", int64_t(0)), model, batch),
        "resume with the same --model and --batch-size");
  // Said here rather than as a tensor of the wrong size or a missing optimizer state, which read
  // as if the model were another one.
  const json config = ck.meta.value("config", json::object());
  if (ck.meta.contains("input") && input.size() == 4) {
    const Dims was = ck.meta["input"].get<Dims>();
    check(was.size() == 4 && std::equal(was.begin() + 1, was.end(), input.begin() + 1),
          fmt::format("the checkpoint in {} was trained on {} images ({}), not {}", dir,
                      was.size() == 4 ? dims_str(Dims(was.begin() + 1, was.end())) : "other", config.value("data", "?"),
                      dims_str(Dims(input.begin() + 1, input.end()))),
          "resume with the same --data");
  }
  if (const std::string was = config.value("optimizer", ""); !was.empty())
    check(was == optimizer, fmt::format("the checkpoint in {} holds {}'s state, not {}'s", dir, was, optimizer),
          fmt::format("resume with --optimizer {}", was));
}

}  // namespace dlperf::train
