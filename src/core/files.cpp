#include "core/files.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace dlperf {

void write_file_atomically(const std::string& path, const std::string& body, const std::string& hint) {
  namespace fs = std::filesystem;
  std::error_code ec;
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

}  // namespace dlperf
