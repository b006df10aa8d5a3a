#include "bench/roofline.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>

#include "core/error.h"
#include "report/plot.h"

namespace dlperf::bench {

std::vector<RooflinePoint> roofline_points(const nlohmann::json& layer_times) {
  std::vector<RooflinePoint> out;
  for (const auto& row : layer_times) {
    for (const char* pass : {"forward", "backward"}) {
      const double flops = row.value(std::string(pass) + "_flops", 0.0), bytes = row.value(std::string(pass) + "_bytes", 0.0),
                   seconds = row.value(std::string(pass) + "_s", 0.0);
      if (flops > 0 && bytes > 0 && seconds > 0) out.push_back({row.value("layer", "?"), pass, flops, bytes, seconds});
    }
  }
  return out;
}

double roof(double intensity, double peak_gflops, double level_gbps) { return std::min(peak_gflops, intensity * level_gbps); }

std::vector<std::string> write_roofline(const std::vector<RooflinePoint>& points, double peak, const nlohmann::json& bw,
                                        const std::string& stem, const std::string& title, bool draw) {
  check(!points.empty(), "no timed layers to place on the roofline");
  std::vector<std::string> written;
  const std::string csv = stem + ".csv", gp = stem + ".gp", png = stem + ".png";
  {
    std::ofstream f(csv);
    f << "layer,pass,flops,bytes,seconds,intensity_flop_per_byte,gflops\n";
    for (const auto& p : points)
      f << fmt::format("{},{},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g}\n", p.layer, p.pass, p.flops, p.bytes, p.seconds, p.intensity(), p.gflops());
    check(bool(f), "cannot write " + csv);
  }
  written.push_back(csv);
  double lo = 1e9, hi = 0;
  for (const auto& p : points) lo = std::min(lo, p.intensity()), hi = std::max(hi, p.intensity());
  std::string roofs, plots;
  int k = 0;
  for (const char* level : {"L1", "L2", "L3", "DRAM"}) {
    if (!bw.contains(level)) continue;
    const double gbps = bw[level];
    roofs += fmt::format("r{}(x) = (x * {:.6g} < peak) ? x * {:.6g} : peak\n", k, gbps, gbps);
    plots += fmt::format("r{}(x) with lines lw 2 title '{} {:.0f} GB/s', ", k, level, gbps);
    ++k;
  }
  std::ofstream f(gp);
  f << fmt::format(
      "# Made by dlperf: the roofline of {title}. Rerun with: gnuplot {gp}\n"
      "set terminal pngcairo size 1200,750 enhanced font 'Sans,10'\n"
      "set output '{png}'\n"
      "set title '{title}'\n"
      "set logscale xy\n"
      "set xlabel 'arithmetic intensity (FLOP per byte moved, from the op cost model)'\n"
      "set ylabel 'achieved GFLOP/s'\n"
      "set grid\nset key bottom right\nset datafile separator ','\n"
      "set xrange [{xlo:.3g}:{xhi:.3g}]\nset yrange [0.1:{ymax:.3g}]\nset samples 400\n"
      "peak = {peak:.6g}\n{roofs}"
      "plot peak with lines lw 2 dt 2 lc rgb 'black' title sprintf('FMA peak %.0f GFLOP/s', peak), {plots}"
      "'{csv}' using ((stringcolumn(2) eq 'forward') ? $6 : 1/0):7 with points pt 7 ps 1.3 title 'forward', "
      "'{csv}' using ((stringcolumn(2) eq 'backward') ? $6 : 1/0):7 with points pt 5 ps 1.3 title 'backward', "
      "'{csv}' using 6:7:1 with labels offset 0.8,0.6 font ',8' notitle\n",
      fmt::arg("title", title), fmt::arg("gp", gp), fmt::arg("png", png), fmt::arg("xlo", std::max(lo / 4, 1e-3)),
      fmt::arg("xhi", std::max(hi * 4, 100.0)), fmt::arg("ymax", peak * 2), fmt::arg("peak", peak), fmt::arg("roofs", roofs),
      fmt::arg("plots", plots), fmt::arg("csv", csv));
  f.close();
  check(bool(f), "cannot write " + gp);
  written.push_back(gp);
  if (draw) {
    report::run_gnuplot(gp);
    written.push_back(png);
  }
  return written;
}

}  // namespace dlperf::bench
