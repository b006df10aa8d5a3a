#include "bench/roofline.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <set>

#include "backend/cpu/layouts.h"
#include "backend/cuda/runtime.h"
#include "bench/cpu_bench.h"
#include "bench/machine_profile.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "hw/cpu_info.h"
#include "plan/catalog.h"
#include "plan/step_time.h"
#include "profile/report.h"
#include "report/plot.h"
#include "train/trainer.h"

namespace dlperf::bench {

std::vector<RooflinePoint> roofline_points(const nlohmann::json& layer_times) {
  std::vector<RooflinePoint> out;
  for (const auto& row : layer_times) {
    for (const char* pass : {"forward", "backward"}) {
      const double flops = row.value(std::string(pass) + "_flops", 0.0), bytes = row.value(std::string(pass) + "_bytes", 0.0),
                   seconds = row.value(std::string(pass) + "_s", 0.0), padding = row.value(std::string(pass) + "_padding_flops", 0.0);
      if (flops > 0 && bytes > 0 && seconds > 0) out.push_back({row.value("layer", "?"), pass, flops, bytes, seconds, padding});
    }
  }
  return out;
}

std::vector<RooflinePoint> roofline_points_from_profile(const nlohmann::json& profile) {
  std::vector<RooflinePoint> out;
  for (const auto& row : profile.value("rows", nlohmann::json::array())) {
    if (row.value("op", "").empty()) continue;  // data, copy, loss, optimizer: not a layer pass
    const double flops = row.value("flops", 0.0), bytes = row.value("bytes", 0.0), seconds = row.value("self_s", 0.0);
    if (flops > 0 && bytes > 0 && seconds > 0) out.push_back({row.value("name", "?"), row.value("phase", "?"), flops, bytes, seconds});
  }
  return out;
}

double roof(double intensity, double peak_gflops, double level_gbps) { return std::min(peak_gflops, intensity * level_gbps); }

std::string level_for(double bytes, const Roofline& r) {
  for (const char* level : {"L2", "L3"})
    if (r.level_bytes.value(level, 0.0) >= bytes && r.bandwidth_gbps.value(level, 0.0) > 0) return level;
  return r.bandwidth_gbps.contains("DRAM") ? "DRAM" : "HBM";
}

std::vector<std::string> write_roofline(const std::vector<RooflinePoint>& points, const std::vector<ComputeCeiling>& peaks,
                                        const nlohmann::json& bw, const std::string& stem, const std::string& title, bool draw) {
  check(!points.empty(), "no timed layers to place on the roofline");
  check(!peaks.empty() && peaks[0].gflops > 0, "the roofline needs a compute peak");
  const double peak = peaks[0].gflops;
  std::vector<std::string> written;
  const std::string csv = stem + ".csv", gp = stem + ".gp", png = stem + ".png";
  std::string rows = "layer,pass,flops,bytes,seconds,intensity_flop_per_byte,gflops,padding_flops\n";
  bool padding = false;  // whether the heights leave out taps on padding, which the y label then says
  for (const auto& p : points) {
    rows += fmt::format("{},{},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g}\n", p.layer, p.pass, p.flops, p.bytes, p.seconds, p.intensity(),
                        p.gflops(), p.padding_flops);
    padding = padding || p.padding_flops > 0;
  }
  write_file_atomically(csv, rows, "check that the directory is writable and the disk has room");
  written.push_back(csv);
  double lo = 1e9, hi = 0;
  for (const auto& p : points) lo = std::min(lo, p.intensity()), hi = std::max(hi, p.intensity());
  std::string roofs, plots;
  int k = 0;
  for (const char* level : {"L1", "L2", "L3", "DRAM", "HBM"}) {
    if (!bw.contains(level) || bw[level].get<double>() <= 0) continue;
    const double gbps = bw[level];
    roofs += fmt::format("r{}(x) = (x * {:.6g} < peak) ? x * {:.6g} : peak\n", k, gbps, gbps);
    plots += fmt::format("r{}(x) with lines lw 2 title '{} {:.0f} GB/s', ", k, level, gbps);
    ++k;
  }
  double top = peak;
  for (size_t i = 1; i < peaks.size(); ++i) {  // the other precisions' roofs, dashed
    if (peaks[i].gflops <= 0) continue;
    plots += fmt::format("{:.6g} with lines lw 1 dt 3 title '{} {:.0f} GFLOP/s', ", peaks[i].gflops, peaks[i].label, peaks[i].gflops);
    top = std::max(top, peaks[i].gflops);
  }
  std::set<std::string> passes;  // one point style per pass, in the order they first appear
  std::vector<std::string> pass_order;
  for (const auto& p : points)
    if (passes.insert(p.pass).second) pass_order.push_back(p.pass);
  std::string point_plots;
  int style = 0;
  for (const auto& pass : pass_order)
    point_plots += fmt::format("'{}' using ((stringcolumn(2) eq '{}') ? $6 : 1/0):7 with points pt {} ps 1.3 title '{}', ", csv, pass,
                               std::array{7, 5, 9, 13, 11}[size_t(style++ % 5)], pass);
  const std::string script = fmt::format(
      "# Made by dlperf: the roofline of {title}. Rerun with: gnuplot {gp}\n"
      "set terminal pngcairo size 1200,750 enhanced font 'Sans,10'\n"
      "set output '{png}'\n"
      "set title '{title}'\n"
      "set logscale xy\n"
      "set xlabel 'arithmetic intensity (FLOP per byte moved, from the op cost model)'\n"
      "set ylabel 'achieved GFLOP/s{ylabel_note}'\n"
      "set grid\nset key bottom right\nset datafile separator ','\n"
      "set xrange [{xlo:.3g}:{xhi:.3g}]\nset yrange [0.1:{ymax:.3g}]\nset samples 400\n"
      "peak = {peak:.6g}\n{roofs}"
      "plot peak with lines lw 2 dt 2 lc rgb 'black' title sprintf('{label} %.0f GFLOP/s', peak), {plots}{point_plots}"
      "'{csv}' using 6:7:1 with labels offset 0.8,0.6 font ',8' notitle\n",
      fmt::arg("title", title), fmt::arg("gp", gp), fmt::arg("png", png), fmt::arg("xlo", std::max(lo / 4, 1e-3)),
      fmt::arg("xhi", std::max(hi * 4, 100.0)), fmt::arg("ymax", top * 2), fmt::arg("peak", peak), fmt::arg("roofs", roofs),
      fmt::arg("plots", plots), fmt::arg("csv", csv), fmt::arg("label", peaks[0].label), fmt::arg("point_plots", point_plots),
      fmt::arg("ylabel_note", padding ? " of the work run (no taps on zero padding: oneDNN skips them)" : ""));
  write_file_atomically(gp, script, "check that the directory is writable and the disk has room");
  written.push_back(gp);
  if (draw) {
    report::run_gnuplot(gp, png);
    written.push_back(png);
  }
  return written;
}

namespace {

// The CPU: --layer-times against the machine profile's ceilings for this CPU and thread count,
// else those the plan and the profile measure now (plan::ceilings_measured_now, once a process: the
// training run's --layer-times reads the same peak). Not a quick run's median: a VM's neighbours
// halve a whole quick FMA run now and then (2 to 4 of 150 on the Zen 4), and the roof then stood at
// half the peak.
Roofline cpu_roofline(const RooflineRequest& r) {
  const hw::CpuInfo cpu = hw::cpu_info();
  const int threads = r.threads > 0 ? r.threads : omp_get_max_threads();
  Roofline out;
  out.device = "cpu", out.processor = fmt::format("{} ({})", cpu.model, counted(threads, "thread"));
  const Ceilings known = load_ceilings(cpu.model, threads);
  double peak = known.f32_gflops;
  out.bandwidth_gbps = known.bandwidth_gbps;
  out.ceilings_source = known.source();
  if (peak == 0) {
    std::printf("no machine profile for this CPU and %d threads (dlperf bench all writes one); measuring now\n", threads);
    const Ceilings now = plan::ceilings_measured_now(threads);
    peak = now.f32_gflops;
    out.bandwidth_gbps = now.bandwidth_gbps;
    out.ceilings_source = now.source();
  }
  // Where the engine can train bf16 (AVX512-BF16), that precision's roof beside fp32's: bench
  // all's, else measured now (half a second; the best repeat, as the fp32 peak). The step's own
  // precision's roof first.
  double bf16 = 0;
  if (cpu::has_bf16_kernels()) {
    bf16 = known.bf16_gflops;
    if (bf16 <= 0) {
      Options o;
      o.threads = threads;
      std::string why;
      bf16 = bf16_peak(o, &why).gflops.max;
    }
  }
  const bool in_bf16 = r.precision == "bf16";
  check(!in_bf16 || bf16 > 0, "this CPU's bf16 peak could not be measured", "run 'dlperf bench flops' to see why");
  out.peaks = {{in_bf16 ? "FMA peak (fp32)" : "FMA peak", peak}};
  if (bf16 > 0) out.peaks.insert(in_bf16 ? out.peaks.begin() : out.peaks.end(), {"bf16 peak (VDPBF16PS)", bf16});
  if (cpu.l2_bytes > 0) out.level_bytes["L2"] = double(cpu.l2_bytes) * threads;
  if (cpu.l3_bytes > 0) out.level_bytes["L3"] = double(cpu.l3_bytes);
  train::TrainConfig tc;
  tc.model = r.model, tc.data = r.data, tc.batch = r.batch, tc.epochs = 1, tc.threads = r.threads, tc.device = "cpu";
  tc.precision = r.precision;
  tc.train_limit = r.batch * r.steps, tc.test_limit = r.batch, tc.layer_times = true, tc.quiet = true, tc.runs_dir = "";
  std::printf("timing %lld training steps of %s at batch %lld on %s, on the CPU in %s...\n", (long long)r.steps, r.model.c_str(),
              (long long)r.batch, r.data.c_str(), r.precision.c_str());
  const auto result = train::train(tc);
  out.model = result.record["model"]["name"];
  out.points = roofline_points(result.record["layer_times"]);
  return out;
}

// A GPU: the profiler's device times per layer pass, against the ceilings the profile used (this
// GPU's measured ones from `dlperf bench all`, else its datasheet's), with the other precisions'
// roofs beside them.
Roofline gpu_roofline(const RooflineRequest& r, int gpu) {
  train::TrainConfig tc;
  tc.model = r.model, tc.data = r.data, tc.batch = r.batch, tc.epochs = 1, tc.device = fmt::format("cuda:{}", gpu);
  tc.precision = r.precision, tc.profile = true, tc.profile_only = true, tc.profile_skip = 3, tc.profile_steps = r.steps;
  tc.train_limit = r.batch * (r.steps + tc.profile_skip + 1), tc.test_limit = r.batch, tc.quiet = true, tc.runs_dir = "";
  tc.progress = false;
  std::printf("profiling %lld training steps of %s at batch %lld on %s, on GPU %d in %s...\n", (long long)r.steps, r.model.c_str(),
              (long long)r.batch, r.data.c_str(), gpu, r.precision.c_str());
  const auto result = train::train(tc);
  Roofline out;
  out.device = tc.device;
  out.model = result.record["model"]["name"];
  out.processor = result.record["device"].value("name", "?");
  const nlohmann::json& c = result.profile.at("ceilings");
  out.ceilings_source = c.value("source", "?");
  out.bandwidth_gbps = nlohmann::json::object();
  if (c.value("dram_gbps", 0.0) > 0) out.bandwidth_gbps["HBM"] = c["dram_gbps"];
  // A precision's roof as the profile picks it (gpu_trainer's gpu_ceilings): measured by bench
  // all, else the datasheet's; none where neither knows it.
  const GpuCeilings measured = load_gpu_ceilings(out.processor);
  const std::string id = plan::catalog_id_for_gpu(out.processor);
  const plan::Catalog catalog = plan::load_catalog();
  auto known_roof = [&](const std::string& p) -> ComputeCeiling {
    if (measured.peak(p) > 0) return {p + " GEMM (measured)", measured.peak(p)};
    const double sheet = id.empty() ? 0 : 1e3 * catalog.find(id).peak_tflops(p);
    return {p + " (datasheet)", sheet};
  };
  // The run's own roof is the profile's, labelled by where it came from.
  const ComputeCeiling own = known_roof(r.precision);
  out.peaks = {{own.gflops > 0 ? own.label : r.precision + " (estimated from the clock)", c.value("peak_gflops", 0.0)}};
  for (const char* p : {"fp32", "tf32", "bf16", "fp16", "fp8"})
    if (p != r.precision)
      if (const ComputeCeiling other = known_roof(p); other.gflops > 0) out.peaks.push_back(other);
  out.points = roofline_points_from_profile(result.profile);
  out.note = profile::unsteady_note_from_json(result.profile);
  return out;
}

}  // namespace

Roofline measure_roofline(const RooflineRequest& r) {
  check(r.steps >= 3 && r.steps <= 100000, "--steps must be between 3 and 100000");
  const int gpu = cuda::resolve_device(r.device);
  if (gpu < 0) {
    check(r.precision == "fp32" || (r.precision == "bf16" && cpu::has_bf16_kernels()),
          r.precision == "bf16" ? std::string("a bf16 step on the CPU needs AVX512-BF16, which this CPU lacks")
                                : fmt::format("--precision {} is a GPU format; the CPU trains fp32, and bf16 with AVX512-BF16", r.precision),
          "leave --precision out, or use --device cuda");
    return cpu_roofline(r);
  }
  return gpu_roofline(r, gpu);
}

}  // namespace dlperf::bench
