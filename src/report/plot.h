// PNG plots through gnuplot (Debian's gnuplot-nox, pngcairo terminal), run as a separate
// program: dlperf writes the data and a script next to the PNG, so a user can restyle and rerun.
#pragma once

#include <string>

namespace dlperf::report {

/// True when `gnuplot` runs and has the pngcairo terminal.
bool gnuplot_available();
/// Runs `gnuplot script_path`; throws Error with gnuplot's exit status on failure.
void run_gnuplot(const std::string& script_path);

}  // namespace dlperf::report
