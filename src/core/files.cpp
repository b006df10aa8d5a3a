#include "core/files.h"

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace dlperf {

bool names_a_directory(const std::string& path) {
  return !path.empty() && (path.back() == '/' || std::filesystem::is_directory(path));
}

std::error_code make_writable_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return ec;
  // A file made and removed, not access(W_OK): root passes access() everywhere, and a read-only
  // mount or /proc passes it too, yet refuses the file the run would write at its end.
  std::string probe = (std::filesystem::path(dir) / ".dlperf-write-test-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) return std::error_code(errno, std::generic_category());
  ::close(fd);
  ::unlink(probe.c_str());
  return ec;
}

void check_file_path(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  check(!path.empty() && !names_a_directory(path), fmt::format("{} {} is a directory", flag, path),
        fmt::format("give {} a file name, for example {}", flag, (fs::path(path) / "results.json").string()));
  const std::string dir = fs::path(path).parent_path().empty() ? "." : fs::path(path).parent_path().string();
  const std::error_code ec = make_writable_dir(dir);
  check(!ec, fmt::format("{} {}: cannot write to {}: {}", flag, path, dir, ec.message()), fmt::format("pick a writable {}", flag));
}

void write_file_atomically(const std::string& path, const std::string& body, const std::string& hint) {
  namespace fs = std::filesystem;
  std::error_code ec;
  check(!fs::is_directory(path), fmt::format("could not write {}: it is a directory", path), hint);
  if (const fs::path dir = fs::path(path).parent_path(); !dir.empty()) fs::create_directories(dir, ec);
  const std::string tmp = path + ".tmp";
  std::ofstream f(tmp, std::ios::binary);
  f << body;
  f.close();
  if (f.fail()) {
    fs::remove(tmp, ec);
    throw Error(fmt::format("could not write {} (is the disk full, or the directory read-only?)", path), hint);
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    throw Error(fmt::format("could not move {} into place: {}", path, why), hint);
  }
}

std::string file_timestamp() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&t));
  return buf;
}

std::string unused_stem(const std::string& dir, const std::string& stem, const std::vector<std::string>& extensions) {
  const auto taken = [&](const std::string& s) {
    for (const auto& ext : extensions)
      if (std::filesystem::exists(s + ext)) return true;
    return false;
  };
  const std::filesystem::path base = std::filesystem::path(dir) / stem;
  std::string path = base.string();
  for (int i = 2; taken(path); ++i) path = fmt::format("{}-{}", base.string(), i);
  return path;
}

}  // namespace dlperf
