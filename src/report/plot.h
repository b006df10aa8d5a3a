// PNG plots through gnuplot (Debian's gnuplot-nox, pngcairo terminal), run as a separate
// program: dlperf writes the data and a script next to the PNG, so a user can restyle and rerun.
#pragma once

#include <string>

namespace dlperf::report {

/// True when `gnuplot` runs and has the pngcairo terminal.
bool gnuplot_available();
/// Runs `gnuplot script_path`, whose output is `png_path`; throws Error with gnuplot's exit
/// status on failure, or when the PNG is missing or cut short (removing it).
void run_gnuplot(const std::string& script_path, const std::string& png_path);
/// True when `path` is a PNG from its signature to its closing IEND chunk.
bool png_is_whole(const std::string& path);

}  // namespace dlperf::report
