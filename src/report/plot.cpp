#include "report/plot.h"

#include <fmt/format.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace dlperf::report {

bool gnuplot_available() {
  return std::system("gnuplot -e \"set terminal pngcairo\" >/dev/null 2>&1") == 0;
}

bool png_is_whole(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  const std::streamoff size = f ? std::streamoff(f.tellg()) : 0;
  constexpr std::array<unsigned char, 8> signature = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  // The last chunk of every PNG: IEND, no data, and its fixed CRC.
  constexpr std::array<unsigned char, 12> iend = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82};
  if (size < std::streamoff(signature.size() + iend.size())) return false;
  std::array<unsigned char, 8> head{};
  std::array<unsigned char, 12> tail{};
  f.seekg(0);
  f.read(reinterpret_cast<char*>(head.data()), std::streamsize(head.size()));
  f.seekg(size - std::streamoff(tail.size()));
  f.read(reinterpret_cast<char*>(tail.data()), std::streamsize(tail.size()));
  return f && head == signature && tail == iend;
}

void run_gnuplot(const std::string& script_path, const std::string& png_path) {
  const int rc = std::system(fmt::format("gnuplot '{}' 2>&1", script_path).c_str());
  check(rc == 0, fmt::format("gnuplot failed on {} (status {})", script_path, rc), "run it by hand to see gnuplot's message");
  // gnuplot exits 0 when its output cannot be written (a full disk leaves a PNG cut short), so
  // the plot is checked here, and a damaged one removed rather than left for a report to embed.
  if (png_is_whole(png_path)) return;
  std::error_code ignored;
  std::filesystem::remove(png_path, ignored);
  throw Error(fmt::format("gnuplot did not write a whole {} (is the disk full, or the directory read-only?)", png_path),
              fmt::format("free some space, then rerun: gnuplot {}", script_path));
}

}  // namespace dlperf::report
