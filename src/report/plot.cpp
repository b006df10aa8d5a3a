#include "report/plot.h"

#include <fmt/format.h>

#include <cstdlib>

#include "core/error.h"

namespace dlperf::report {

bool gnuplot_available() {
  return std::system("gnuplot -e \"set terminal pngcairo\" >/dev/null 2>&1") == 0;
}

void run_gnuplot(const std::string& script_path) {
  const int rc = std::system(fmt::format("gnuplot '{}' 2>&1", script_path).c_str());
  check(rc == 0, fmt::format("gnuplot failed on {} (status {})", script_path, rc), "run it by hand to see gnuplot's message");
}

}  // namespace dlperf::report
