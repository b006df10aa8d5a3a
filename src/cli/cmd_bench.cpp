// dlperf bench [memory|flops|gemm|conv|copy|launch|gpu-memory|loader|roofline|allreduce|all] [--quick] [--json FILE]
#include <fmt/format.h>
#include <omp.h>

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <functional>
#include <fstream>

#include "backend/cpu/ops.h"
#include "backend/cuda/runtime.h"
#include "bench/collective.h"
#include "bench/gpu_bench.h"
#include "bench/loader_bench.h"
#include "bench/cpu_bench.h"
#include "bench/machine_profile.h"
#include "bench/ops_bench.h"
#include "bench/roofline.h"
#include "cli/bench_args.h"
#include "plan/catalog.h"
#include "plan/step_time.h"
#include "report/plot.h"
#include "train/trainer.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/files.h"
#include "core/interrupt.h"
#include "core/memory.h"
#include "core/stats.h"
#include "core/text.h"
#include "data/loader.h"
#include "hw/cpu_info.h"
#include "hw/host_load.h"
#include "report/table.h"

namespace dlperf::cli {

nlohmann::json guarded(BenchArgs& a, const std::string& what, const std::function<nlohmann::json()>& run) {
  try {
    return run();
  } catch (const Error& e) {
    std::printf("\n%s: failed: %s\n", what.c_str(), e.what());
    a.failures.push_back(what + ": " + e.what());
    return {{"failed", e.what()}};
  }
}

std::vector<std::string> conv_models(const BenchArgs& a) {
  return a.opt.quick && !a.models_given ? std::vector<std::string>{"medium"} : split_commas(a.models);
}

namespace {

// All-reduce over MPI ranks on this machine: runs dlperf-allreduce (built beside dlperf when MPI
// is installed) under mpirun and reads the JSON it prints; null when Ctrl-C cut it short.
nlohmann::json run_allreduce(const BenchArgs& a) {
  const auto self = std::filesystem::read_symlink("/proc/self/exe");
  const auto helper = self.parent_path() / "dlperf-allreduce";
  check(std::filesystem::exists(helper), "this build has no MPI all-reduce benchmark (dlperf-allreduce)",
        "install Open MPI (apt-get install libopenmpi-dev openmpi-bin) and build again (scripts/setup.sh)");
  check(std::system("command -v mpirun >/dev/null 2>&1") == 0, "mpirun is not on the PATH", "apt-get install openmpi-bin");
  const std::string cmd = bench::mpirun_command(helper.string(), a.ranks, a.opt.quick);
  std::string output;
  FILE* p = ::popen(cmd.c_str(), "r");
  check(p != nullptr, "cannot start mpirun");
  char buf[4096];
  while (size_t got = std::fread(buf, 1, sizeof buf, p)) output.append(buf, got);
  const int rc = ::pclose(p);
  nlohmann::json r;
  try {
    r = nlohmann::json::parse(output.substr(output.find('{')));
  } catch (const std::exception&) {
    if (stop_signal() != 0) return nullptr;  // Ctrl-C reached mpirun too: cut short, not failed
    throw Error(fmt::format("the MPI all-reduce benchmark failed (status {}): {}", rc, output.substr(0, 400)),
                "run the command by hand to see MPI's message: " + cmd);
  }
  check(r.value("correct", false), "the MPI all-reduce returned wrong sums", "the MPI installation is faulty");
  std::printf("\nAll-reduce (f32 sum) over %d MPI ranks on this machine (median; nccl-tests' algbw and busbw):\n", a.ranks);
  report::Table t({"size", "time us", "spread us", "algbw GB/s", "busbw GB/s"});
  for (const auto& row : r["sizes"])
    t.add({format_binary_bytes(row["bytes"].get<double>()), fmt::format("{:.1f}", row["time_us_median"].get<double>()),
           fmt::format("{:.1f}-{:.1f}", row["time_us_min"].get<double>(), row["time_us_max"].get<double>()),
           fmt::format("{:.2f}", row["algbw_gbps"].get<double>()), fmt::format("{:.2f}", row["busbw_gbps"].get<double>())});
  t.print();
  // mpirun --oversubscribe lets more ranks than CPUs start; they then take turns on the cores and
  // busy-poll while they wait, so the large sizes measure the scheduler, not the all-reduce.
  const int cpus = hw::usable_cpus();
  r["ranks_over_cpus"] = a.ranks > cpus;
  if (a.ranks > cpus)
    std::printf("(%d ranks on %d CPUs: the ranks take turns on the cores, so these times include waiting for a core;\n"
                " --ranks %d or fewer measures the all-reduce itself)\n", a.ranks, cpus, cpus);
  return r;
}

// The roofline of one model's training step on the CPU or a GPU (bench/roofline.h says against
// which ceilings): a PNG, its data and script, and a table of every layer pass against its roof.
nlohmann::json run_roofline(const BenchArgs& a) {
  bench::RooflineRequest req;
  req.model = a.model, req.data = a.data, req.batch = a.batch, req.steps = a.steps, req.device = a.device;
  req.precision = a.precision, req.threads = a.opt.threads;
  const bench::Roofline r = bench::measure_roofline(req);
  const bool draw = report::gnuplot_available();
  if (!draw) std::printf("gnuplot (with pngcairo) is not installed: writing the data and script only (apt-get install gnuplot-nox)\n");
  const std::string where = r.device == "cpu" ? "cpu" : "cuda";
  // The CPU's fp32 files keep their name (-cpu); any other precision is named, as on a GPU.
  const std::string stem = fmt::format("runs/roofline-{}-b{}-{}{}", r.model, a.batch, where,
                                       where == "cpu" && a.precision == "fp32" ? "" : "-" + a.precision);
  const auto files = bench::write_roofline(r.points, r.peaks, r.bandwidth_gbps, stem,
                                           fmt::format("{} at batch {} on {}", r.model, a.batch, r.processor), draw);
  // Each pass against the roof of the memory level its bytes fit in: a batchnorm served from L3
  // read "132% of roof" against DRAM's.
  const double peak = r.peaks[0].gflops;
  const std::string slowest = r.bandwidth_gbps.contains("DRAM") ? "DRAM" : "HBM";
  report::Table t({"layer", "pass", "FLOP/byte", "GFLOP/s", "MB moved", "read from", "roof GFLOP/s", "of roof"});
  nlohmann::json points = nlohmann::json::array();
  for (const auto& p : r.points) {
    const std::string level = bench::level_for(p.bytes, r);
    const double gbps = r.bandwidth_gbps.value(level, 0.0);
    const double roof = gbps > 0 ? bench::roof(p.intensity(), peak, gbps) : peak;
    t.add({p.layer, p.pass, fmt::format("{:.2f}", p.intensity()), fmt::format("{:.1f}", p.gflops()), format_decimals(p.bytes / 1e6, 1),
           gbps > 0 ? level : "-", fmt::format("{:.1f}", roof), fmt::format("{:.0f}%", 100 * p.gflops() / roof)});
    points.push_back({{"layer", p.layer}, {"pass", p.pass}, {"flops", p.flops}, {"padding_flops", p.padding_flops}, {"bytes", p.bytes}, {"seconds", p.seconds},
                      {"memory_level", gbps > 0 ? nlohmann::json(level) : nlohmann::json()}, {"roof_gflops", roof}});
  }
  std::string levels;
  for (const char* level : {"L2", "L3", "DRAM", "HBM"})
    if (r.bandwidth_gbps.value(level, 0.0) > 0) levels += fmt::format("{}{} {:.0f}", levels.empty() ? "" : " / ", level, r.bandwidth_gbps[level].get<double>());
  std::printf("\nRoofline on %s: %s %.1f GFLOP/s%s; ceilings %s\n", r.processor.c_str(), r.peaks[0].label.c_str(), peak,
              levels.empty() ? "" : fmt::format(", {} GB/s", levels).c_str(), r.ceilings_source.c_str());
  std::vector<std::string> others;
  for (size_t i = 1; i < r.peaks.size(); ++i) others.push_back(fmt::format("{} {:.1f} GFLOP/s", r.peaks[i].label, r.peaks[i].gflops));
  if (!others.empty()) std::printf("(the other precisions' roofs, drawn dashed: %s)\n", fmt::format("{}", fmt::join(others, ", ")).c_str());
  t.print();
  if (!r.level_bytes.empty())
    std::printf("(each pass is held to the roof of the level its bytes fit in, the level dlperf plan picks for it: L2 up to\n"
                " %s, L3 up to %s, then %s)\n", format_binary_bytes(r.level_bytes.value("L2", 0.0)).c_str(),
                format_binary_bytes(r.level_bytes.value("L3", 0.0)).c_str(), slowest.c_str());
  if (std::any_of(r.points.begin(), r.points.end(), [](const bench::RooflinePoint& p) { return p.padding_flops > 0; }))
    std::printf("(FLOP/byte and GFLOP/s count the work run: a convolution's taps on its zero padding, which oneDNN skips and\n"
                " PyTorch's FLOP counters count, are left out; the JSON keeps both)\n");
  if (!r.note.empty()) std::printf("%s\n", r.note.c_str());
  for (const auto& f : files) std::printf("wrote %s\n", f.c_str());
  nlohmann::json peaks = nlohmann::json::array();
  for (const auto& p : r.peaks) peaks.push_back({{"label", p.label}, {"gflops", p.gflops}});
  return {{"device", r.device}, {"processor", r.processor}, {"peak_gflops", peak}, {"peaks", peaks},
          {"bandwidth_gbps", r.bandwidth_gbps}, {"level_bytes", r.level_bytes}, {"ceilings_source", r.ceilings_source},
          {"points", points}, {"files", files}, {"note", r.note.empty() ? nlohmann::json() : nlohmann::json(r.note)}};
}

nlohmann::json run_gemm(const bench::Options& o, double peak) {
  std::printf("\nGEMM through oneDNN matmul (f32; the sweep runs %d times: each shape's best round's median, the spread over\n"
              "all its samples; inputs rotate over copies spanning 2x the L3):\n", bench::kRounds);
  report::Table t({"M", "N", "K", "GFLOP/s", "spread", "% of FMA peak", "max rel. error", "input copies"});
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& g : bench::gemm_sweep(o)) {
    t.add({std::to_string(g.m), std::to_string(g.n), std::to_string(g.k), fmt::format("{:.1f}", g.best_round_gflops),
           fmt::format("{:.1f}-{:.1f}", g.gflops.min, g.gflops.max), fmt::format("{:.0f}%", 100 * g.best_round_gflops / peak),
           fmt::format("{:.1e}", g.max_rel_error), std::to_string(g.rotated_sets)});
    rows.push_back(bench::to_json(g));
  }
  t.print();
  return rows;
}

// conv's --input, and its models checked against it: called before anything is measured, so
// 'bench all' with a typo in --models fails at once, not after a minute of other benchmarks.
void check_conv_input(const BenchArgs& a) {
  const Dims chw = parse_chw(a.input);
  for (const auto& model : conv_models(a)) nn::build_graph(nn::load_model(model), chw, 10, a.batch);  // throws, saying why
}

// After check_conv_input checked the shape and models (in the command's callback).
nlohmann::json run_conv(const BenchArgs& a, double peak) {
  const Dims chw = parse_chw(a.input);
  const auto models = conv_models(a);
  std::printf("\nConvolutions of %s at batch %lld on %s (the engine's conv op; GFLOP/s per pass, each its best round's median\n"
              "of %d rounds):\n", fmt::format("{}", fmt::join(models, ",")).c_str(), (long long)a.batch, a.input.c_str(), bench::kRounds);
  report::Table t({"model", "layer", "input", "layout", "algorithm", "out", "k/s/p", "forward", "bwd data", "bwd weights", "on padding",
                   "fwd % of peak", "max rel. error", "input copies"});
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& p : bench::conv_sweep(a.opt, models, chw, a.batch)) {
    t.add({p.model, p.layer, dims_str(Dims(p.input.begin() + 1, p.input.end())), p.input_layout, p.algorithm, std::to_string(p.attrs.out_channels),
           fmt::format("{}/{}/{}", p.attrs.kernel, p.attrs.stride, p.attrs.padding), fmt::format("{:.1f}", p.forward_gflops),
           p.backward_data_gflops > 0 ? fmt::format("{:.1f}", p.backward_data_gflops) : "-",
           fmt::format("{:.1f}", p.backward_weights_gflops), fmt::format("{:.0f}%", 100 * p.padding_share()),
           fmt::format("{:.0f}%", 100 * p.forward_gflops * (1 - p.padding_share()) / peak),
           fmt::format("{:.1e}", p.max_rel_error), std::to_string(p.rotated_sets)});
    rows.push_back(bench::to_json(p));
  }
  t.print();
  std::printf("(each conv reads the layout training gives it; bwd data is backward with the data gradient minus backward without\n"
              " it, so it is noisier; each pass checked at 16 sampled outputs against float64; the tensors rotate over copies\n"
              " spanning 2x the L3. GFLOP/s count every multiply-add, as PyTorch's FLOP counters do; 'on padding' is the share\n"
              " of them whose input is the zero padding, which oneDNN skips, and %% of peak counts only the others)\n");
  if (std::any_of(rows.begin(), rows.end(), [](const nlohmann::json& r) { return r["algorithm"] == "winograd"; }))
    std::printf("(winograd: oneDNN's F(4x4, 3x3) kernel, which does 36 multiplies per 4x4 tile of outputs and channel pair where\n"
                " the direct convolution does 144, so its GFLOP/s, counting the direct convolution's, can pass 100%% of the peak.\n"
                " The engine picks it where it pays on this CPU:\n %s)\n", cpu::winograd_choice().why.c_str());
  return rows;
}

nlohmann::json run_memory(const bench::Options& o, const hw::CpuInfo& cpu, int threads, nlohmann::json& levels) {
  std::printf("\nMemory bandwidth (STREAM byte counts; the sweep runs %d times: each point's best round's median, min-max of\n"
              "all its samples in brackets):\n", bench::kRounds);
  const auto points = bench::memory_bandwidth(o);
  report::Table t({"working set", "copy GB/s", "triad GB/s"});
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& p : points) rows.push_back(bench::to_json(p));
  levels = bench::bandwidth_levels(points, cpu.l1d_bytes, cpu.l2_bytes, cpu.l3_bytes, threads);
  // The same sizes come for each kernel, copy first.
  const size_t half = points.size() / 2;
  auto cell = [](const bench::MemoryPoint& p) { return fmt::format("{:.1f} [{:.1f}-{:.1f}]", p.best_round_gbps, p.gbps.min, p.gbps.max); };
  for (size_t i = 0; i < half; ++i) t.add({format_binary_bytes(double(points[i].working_set)), cell(points[i]), cell(points[half + i])});
  t.print();
  // DRAM against the datasheet where the catalog knows the CPU: the figure is a whole socket's,
  // which a slice of its cores (a VM) cannot be expected to reach.
  const plan::Catalog catalog = plan::load_catalog();  // the sheet points into it
  if (const plan::CpuSheet* sheet = plan::cpu_sheet_for(catalog, cpu.model); sheet && levels.contains("DRAM"))
    std::printf("DRAM: %.1f GB/s measured with %s, %.0f%% of the %.1f GB/s datasheet figure for a whole %s socket (%d cores)\n",
                levels["DRAM"].get<double>(), counted(threads, "thread").c_str(), 100 * levels["DRAM"].get<double>() / sheet->dram_gbps, sheet->dram_gbps,
                sheet->name.c_str(), sheet->cores);
  return rows;
}

nlohmann::json run_flops(BenchArgs& a, const hw::CpuInfo& cpu) {
  const bench::Options& o = a.opt;
  // Every vector width the cores run, widest first: the widest is the peak (the engine's
  // kernels use it); the others show what less vectorized code can reach, and whether the
  // widest units are as wide as the instructions. All measured again while the widest reads under
  // 90% of the peak counted at the OS's clock, which cores run at least as fast as unless
  // something takes them away (bench::fastest_run): the machine profile keeps this run's peak,
  // and every plan and profile after it reads against it.
  auto counted_at = [&](const bench::FlopsResult& w) {  // cores x units x lanes x 2 flops x clock, for this width
    return double(w.threads) * cpu.fma_units * std::min(w.lanes, cpu.lanes_f32) * 2.0 * cpu.ghz;
  };
  const std::vector<int> all_widths = bench::fma_widths(cpu);
  std::vector<double> leads;
  const std::vector<bench::FlopsResult> widths = bench::fastest_run(
      [&] { return bench::fma_peaks(o, all_widths); }, [&](const bench::FlopsResult& widest) { return 0.9 * counted_at(widest); }, leads);
  const bench::FlopsResult& r = widths.front();
  std::printf("\nfp32 FMA peak by vector width (%s, median of %d runs each):\n", counted(r.threads, "thread").c_str(), r.repeats);
  report::Table t({"instructions", "lanes", "measured GFLOP/s", "spread", "per core", "implied clock", "counted peak", "measured / counted"});
  for (const auto& w : widths)
    t.add({w.isa, std::to_string(w.lanes), fmt::format("{:.1f}", w.gflops.median), fmt::format("{:.1f}-{:.1f}", w.gflops.min, w.gflops.max),
           fmt::format("{:.1f}", w.per_core_gflops), fmt::format("{:.2f} GHz", w.implied_ghz),
           fmt::format("{:.1f} at {:.2f} GHz", counted_at(w), cpu.ghz), fmt::format("{:.0f}%", 100 * w.gflops.median / counted_at(w))});
  t.print();
  const double counted_peak = counted_at(r);
  if (const std::string note = bench::rerun_note(leads, "fp32 FMA peak"); !note.empty()) std::printf("%s\n", note.c_str());
  if (const std::string note = bench::clock_note(r, counted_peak, cpu.ghz); !note.empty()) std::printf("%s\n", note.c_str());
  if (widths.size() > 1) std::printf("%s\n", bench::width_sentence(widths[0], widths[1], cpu.lanes_f32).c_str());
  auto j = bench::to_json(r);
  j["counted_peak_gflops"] = counted_peak;
  j["runs_gflops_median"] = leads;
  j["by_width"] = nlohmann::json::array();
  for (const auto& w : widths) {
    j["by_width"].push_back(bench::to_json(w));
    j["by_width"].back()["counted_peak_gflops"] = counted_at(w);
  }
  const plan::Catalog catalog = plan::load_catalog();  // the sheet points into it
  if (const plan::CpuSheet* sheet = plan::cpu_sheet_for(catalog, cpu.model)) {
    const double spec = sheet->fp32_gflops(r.threads);
    std::printf("datasheet (%s): %.1f GFLOP/s for %d of its %d cores at the %.2f GHz base clock; measured %.0f%% of it "
                "(turbo clocks go above 100%%)\n",
                sheet->name.c_str(), spec, r.threads, sheet->cores, sheet->base_ghz, 100 * r.gflops.median / spec);
    j["datasheet"] = {{"id", sheet->id}, {"fp32_gflops_at_base", spec}, {"percent_of_datasheet", 100 * r.gflops.median / spec},
                      {"dram_gbps_socket", sheet->dram_gbps}};
  } else {
    std::printf("(the hardware catalog has no datasheet for '%s': no %% of spec)\n", cpu.model.c_str());
  }
  // A bf16 peak beside the fp32 one, measured again while it reads under `floor` x fp32's: the
  // instruction does at least that much more a cycle, so a lower read was disturbed.
  auto bf16_row = [&](const char* label, const char* rerun_name, const std::string& how, double floor, int decimals, const char* after,
                      const std::function<bench::FlopsResult(std::string*)>& measure) -> nlohmann::json {
    std::string why;
    std::vector<double> leads;
    const auto b = bench::fastest_run([&] { return measure(&why); },
                                      [&](const bench::FlopsResult& x) { return x.isa.empty() ? 0.0 : floor * r.gflops.median; }, leads);
    if (b.isa.empty()) {
      std::printf("%s: skipped: %s\n", label, why.c_str());
      return {{"skipped", why}};
    }
    std::printf("%s\n", fmt::format("{} ({}, {}, median of {} runs): {:.1f} GFLOP/s [{:.1f}-{:.1f}], {:.{}f}x the fp32 FMA peak{}", label, how,
                                    counted(b.threads, "thread"), b.repeats, b.gflops.median, b.gflops.min, b.gflops.max,
                                    b.gflops.median / r.gflops.median, decimals, after)
                           .c_str());
    if (const std::string note = bench::rerun_note(leads, rerun_name); !note.empty()) std::printf("%s\n", note.c_str());
    auto row = bench::to_json(b);
    row["dtype"] = "bf16";
    row["runs_gflops_median"] = leads;
    return row;
  };
  // VDPBF16PS does two multiply-adds a lane where an FMA does one (2.0x on the Zen 4, 1.84-1.88x on
  // the Zen 5): measured again under 1.2x.
  j["bf16"] = guarded(a, "CPU bf16 peak", [&] {
    return bf16_row("bf16 peak", "bf16 peak", "VDPBF16PS", 1.2, 2, "", [&](std::string* why) { return bench::bf16_peak(o, why); });
  });
  // TDPBF16PS does 16x a core's AVX-512 FMAs a cycle (14.5x measured on the Xeon VM of
  // 2026-11-29): measured again under 8x.
  j["amx"] = guarded(a, "CPU AMX peak", [&] {
    return bf16_row("AMX bf16 peak", "AMX peak", "TDPBF16PS", 8, 1, " (oneDNN's bf16 convolutions in nhwc and inner products run there)",
                    [&](std::string* why) { return bench::amx_peak(o, why); });
  });
  return j;
}

// The CPU engine's cost a call (bench::cpu_dispatch): what `dlperf plan` adds to every layer
// pass, as a GPU's launch latency is added to every kernel.
nlohmann::json run_cpu_launch(const bench::Options& o) {
  const auto r = bench::cpu_dispatch(o);
  std::printf("\nCPU engine call (launch latency's counterpart: a oneDNN relu on 16x64 floats through the engine's call path, "
              "back to back, %s, median of %d x %d calls): %.2f us a call [%.2f-%.2f]; dlperf plan takes the fastest, %.2f us\n",
              counted(r.threads, "thread").c_str(), r.repeats, r.calls, r.us.median, r.us.min, r.us.max, r.us.min);
  return bench::to_json(r);
}

// The CPU engine's kernel choices (cpu::winograd_choice, cpu::max_pool_16c_choice), each pair of
// kernels timed as a process without the machine profile times it once, here several times. bench
// all keeps the medians, which every later process here takes instead of its own timing: where
// two kernels time close, single timings fall either side of the rule's threshold, and runs of
// the same job would differ in speed and memory.
nlohmann::json run_cpu_kernels(const bench::Options& o) {
  const int rounds = o.quick ? 3 : 7;
  struct Pair {
    const char* key;
    const char* name;
    std::function<double()> time;
    std::function<std::string(double)> choice;  // what the engine runs at a ratio, and why
  };
  const Pair pairs[] = {
      {"direct_over_winograd", "3x3 convolutions: the direct kernel's time over Winograd's", cpu::time_direct_over_winograd,
       [](double r) { return cpu::choose_winograd("auto", [r] { return r; }).why; }},
      {"max_pool_onednn_over_dlperf", "nChw16c max pooling: oneDNN's time over dlperf's", cpu::time_max_pool_16c,
       [](double r) { return cpu::choose_max_pool_16c("auto", true, [r] { return r; }).why; }}};
  std::printf("\nCPU engine's kernel choices (each pair timed %d times, as a process without the machine profile times it once; "
              "'bench all' keeps the medians, and every run here then chooses by them):\n", rounds);
  nlohmann::json out = {{"rounds", rounds}};
  for (const Pair& p : pairs) {
    std::vector<double> ratios;
    int busy = 0;
    for (int i = 0; i < rounds && stop_signal() == 0; ++i) {
      const double r = p.time();
      if (r == 0) break;  // no such kernel here
      if (r == cpu::kTooBusyToTime)
        ++busy;
      else
        ratios.push_back(r);
    }
    if (ratios.empty()) {
      const std::string why = busy > 0 ? "other work held the CPUs in every round" : "not both kernels here";
      std::printf("  %s: not timed: %s\n", p.name, why.c_str());
      out[p.key] = {{"skipped", why}};
      continue;
    }
    const Spread r = spread_of(ratios);
    std::printf("  %s: %.2fx (median of %zu, %.2f-%.2fx%s): %s\n", p.name, r.median, ratios.size(), r.min, r.max,
                busy > 0 ? fmt::format("; {} cut into by other work", counted(busy, "round")).c_str() : "", p.choice(r.median).c_str());
    out[p.key] = {{"median", r.median}, {"min", r.min}, {"max", r.max}, {"ratios", ratios}, {"busy_rounds", busy}};
  }
  return out;
}

// The data loader alone on `--data`'s training images (bench::loader_sweep): the images/s no
// training run on that data can beat, by workers, plain and augmented.
nlohmann::json run_loader(const BenchArgs& a) {
  const data::DataPair d = data::load_data(a.data);
  if (!d.notice.empty()) std::printf("\n%s\n", d.notice.c_str());
  const data::Dataset& t = d.train;
  check(a.batch <= t.size(), fmt::format("--batch-size {} is larger than the {} training images of {}", a.batch, t.size(), a.data),
        "use a smaller --batch-size");
  const std::vector<int> workers = a.workers.empty() ? data::worker_counts(hw::cpu_info().cores) : a.workers;
  const auto points = bench::loader_sweep(t, a.batch, workers, a.opt);
  std::printf("\nData loader alone (%s: %s training images of %lldx%lldx%lld; batches of %lld, shuffled, the consumer only taking\n"
              "them; augmented: random crop of a 2-pixel pad%s; the sweep runs %d times: each point's best round's median of %d\n"
              "epochs, the spread over all its epochs):\n",
              t.name.c_str(), std::to_string(t.size()).c_str(), (long long)t.channels, (long long)t.height, (long long)t.width,
              (long long)a.batch, t.flip_ok ? " and flips" : "", bench::kRounds, points.front().epochs);
  report::Table table({"workers", "augmented", "k images/s", "spread", "ns/pixel", fmt::format("vs -j {}", workers.front())});
  for (const auto& p : points) {
    const auto& first = *std::find_if(points.begin(), points.end(), [&](const bench::LoaderPoint& q) { return q.augment == p.augment; });
    table.add({std::to_string(p.workers), p.augment ? "yes" : "no", fmt::format("{:.0f}", p.best_round_images_per_s / 1e3),
               fmt::format("{:.0f}-{:.0f}", p.images_per_s.min / 1e3, p.images_per_s.max / 1e3), fmt::format("{:.2f}", p.ns_per_pixel),
               fmt::format("{:.2f}x", p.best_round_images_per_s / first.best_round_images_per_s)});
  }
  table.print();
  std::printf("(a training run on this data cannot take more images/s than its row here; one whose model alone would is waiting "
              "for data: 'dlperf profile' shows the wait)\n");
  nlohmann::json pts = nlohmann::json::array();
  for (const auto& p : points) pts.push_back(bench::to_json(p));
  return {{"data", d.source},       {"dataset", t.name},   {"images", t.size()}, {"input", {t.channels, t.height, t.width}},
          {"batch", a.batch},      {"flips", t.flip_ok}, {"points", pts}};
}


// Timestamped, and never an earlier run's file: 'bench copy' then 'bench launch' can finish
// within one second.
std::string default_json_path() { return unused_stem("runs", file_timestamp() + "-bench", {".json"}) + ".json"; }

}  // namespace

void add_bench(CLI::App& app, const Command& self) {
  auto args = std::make_shared<BenchArgs>();
  auto* c = app.add_subcommand(self.name, self.summary);
  c->add_option("benchmark", args->what,
                "memory | flops | gemm | conv | kernels | copy | launch | gpu-memory | loader | roofline | allreduce | all, one or more "
                "(loader, roofline and allreduce are not part of all; kernels times the pairs of CPU kernels the engine chooses between; "
                "launch times a call into the CPU engine, and a GPU's kernel launch where there is one; "
                "copy and gpu-memory need a GPU and are skipped, saying why, without one)")
      ->capture_default_str()
      ->check(CLI::IsMember(
          {"memory", "flops", "gemm", "conv", "kernels", "copy", "launch", "gpu-memory", "loader", "roofline", "allreduce", "all"}));
  c->add_option("--gpu", args->gpu, "gemm, conv, copy, launch, gpu-memory: which GPU")->capture_default_str()->check(at_least(0));
  c->add_option("--ranks", args->ranks, "allreduce: MPI ranks (processes) on this machine")->capture_default_str()->check(between(2, 256));
  c->add_option("--model,-m", args->model, "roofline: the model whose training step is placed")->capture_default_str();
  c->add_option("--data,-d", args->data, "roofline: the data it trains on; loader: the data it loads")->capture_default_str();
  c->add_option("--workers,-j", args->workers, "loader: the worker counts to time (default: 0, 1, 2 on two cores; 0, 2, 4, 8 "
                "up to the cores on more)")->check(between(0, data::kMaxWorkers));
  c->add_option("--steps", args->steps, "roofline: training steps timed")->capture_default_str()->check(between(3, 100000));
  c->add_option("--device", args->device, "roofline: auto (a GPU when there is one), cpu, cuda, cuda:N")->capture_default_str();
  c->add_option("--precision", args->precision, "roofline: fp32, tf32, bf16, fp16 on a GPU; fp32, and bf16 with AVX512-BF16, on a CPU")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16", "fp16"}))
      ->capture_default_str();
  c->add_option("--models", args->models, "conv: the presets (or .json specs) whose conv layers to time (--quick: medium)")->capture_default_str();
  c->add_option("--input", args->input, "conv: input shape CxHxW")->capture_default_str();
  c->add_option("--batch-size,-b", args->batch, "conv, roofline, loader: batch size")->capture_default_str()->check(between(1, 4096));
  c->add_flag("--quick", args->opt.quick, "fewer sizes and repeats: seconds instead of about a minute");
  c->add_option("--threads", args->opt.threads, "threads (0 = all cores)")->capture_default_str();
  c->add_option("--json", args->json_path, "where the results go (default runs/<time>-bench.json)");
  c->callback([args, c] {
    hw::check_threads(args->opt.threads);
    // oneDNN's primitives (GEMM, conv, the roofline's training step) run on OpenMP's thread count,
    // not on a count passed to them: without this, 'bench gemm --threads 1' ran on every core and
    // read "161% of the FMA peak" of one.
    if (args->opt.threads > 0) omp_set_num_threads(args->opt.threads);
    // A flag that only other benchmarks read is refused, not ignored. ("all" runs conv and the
    // GPU ones, not roofline or allreduce.)
    const std::vector<std::pair<const char*, std::vector<std::string>>> used_by = {
        {"--ranks", {"allreduce"}},           {"--model", {"roofline"}},         {"--data", {"roofline", "loader"}},
        {"--workers", {"loader"}},
        {"--steps", {"roofline"}},            {"--device", {"roofline"}},        {"--precision", {"roofline"}},
        {"--models", {"conv", "all"}},        {"--input", {"conv", "all"}},      {"--batch-size", {"conv", "roofline", "loader", "all"}},
        {"--gpu", {"gemm", "conv", "copy", "launch", "gpu-memory", "all"}}};
    // Each benchmark runs once, in the sweep's order, however often it is named.
    std::sort(args->what.begin(), args->what.end());
    args->what.erase(std::unique(args->what.begin(), args->what.end()), args->what.end());
    for (const auto& [flag, whats] : used_by)
      check(c->count(flag) == 0 || args->asked(whats),
            fmt::format("{} is for 'dlperf bench {}', not 'dlperf bench {}'", flag, fmt::join(whats, "|"), args->what_text()),
            fmt::format("drop {}, or run one of the benchmarks it is for", flag));
    // A GPU that is not there: said before any benchmark runs, not as each GPU benchmark's
    // cudaSetDevice failure. (Without a GPU the GPU benchmarks say they are skipped, and why.)
    if (const int gpus = cuda::device_count(); gpus > 0)
      check(args->gpu < gpus, fmt::format("--gpu {}: this machine has {} GPU{}, numbered from 0", args->gpu, gpus, gpus == 1 ? "" : "s"),
            fmt::format("use --gpu 0{}", gpus > 1 ? fmt::format(" to {}", gpus - 1) : ""));
    args->models_given = c->count("--models") > 0;
    if (!args->json_path.empty()) check_file_path(args->json_path, "--json");
    // Checked before any benchmark runs, not after the last one: the default results file, the
    // machine profile 'all' writes and the roofline's files go in runs/.
    if (args->json_path.empty() || args->asked({"all", "roofline"})) {
      const std::error_code ec = make_writable_dir("runs");
      check(!ec, fmt::format("cannot write the results to runs/: {}", ec.message()),
            "run dlperf bench from a directory it may write in, or give --json PATH (bench all and roofline always write in runs/)");
    }
    if (args->asked({"conv", "all"})) check_conv_input(*args);
    const hw::CpuInfo cpu = hw::cpu_info();
    const int threads = args->opt.threads > 0 ? args->opt.threads : omp_get_max_threads();
    std::printf("dlperf bench on %s (%s, %s)\n",  // every section starts with its blank line
                cpu.model.c_str(), counted(threads, "thread").c_str(), cpu.isa.c_str());
    nlohmann::json out = {{"command", "bench"}, {"quick", args->opt.quick}, {"machine", hw::machine_json()}};
    // What else ran on these CPUs meanwhile: a benchmark that shared them reads low, and says so.
    const hw::CpuTimes times_before = hw::cpu_times_now();
    // Ctrl-C (or SIGTERM) ends the sweep after the benchmark it stops, and what finished is still
    // written; a second one ends the process at once.
    const StopOnSignal stop_on_signal;
    // For tests only: raise SIGINT once this benchmark finishes, as a user's Ctrl-C would.
    const char* stop_after = std::getenv("DLPERF_TEST_SIGINT_AFTER");
    std::vector<std::string> done;  // in the order they ran
    auto runs = [&](const std::vector<std::string>& whats) { return stop_signal() == 0 && args->asked(whats); };
    auto record = [&](const std::string& key, nlohmann::json result) {
      if (result.is_null()) return;  // cut short by the signal: neither written nor finished
      const bool skipped = result.is_object() && result.contains("skipped");  // no GPU, say: nothing measured
      out[key] = std::move(result);
      if (!skipped) done.push_back(key);
      if (stop_after != nullptr && key == stop_after) std::raise(SIGINT);
    };
    nlohmann::json levels;
    if (runs({"memory", "all"})) record("memory", run_memory(args->opt, cpu, threads, levels));
    // GEMM and conv are read against the measured FMA peak: of this run, else of the machine
    // profile, else measured now as plan and profile do (a fraction of a second). Not the peak
    // counted at the clock the OS reports: cores boost past it, and a VM reports its base clock
    // (GEMM read "129% of peak" on the Zen 4 VM).
    const double profiled = bench::load_ceilings(cpu.model, threads).f32_gflops;
    const bool peak_from_elsewhere = args->asked({"gemm", "conv"}) && !args->asked({"flops", "all"});
    double peak = profiled > 0 ? profiled : peak_from_elsewhere ? plan::host_ceilings(threads).peak_gflops : 0;
    if (runs({"flops", "all"})) {
      record("flops", run_flops(*args, cpu));
      peak = out["flops"]["gflops_median"];
    }
    if (runs({"gemm", "all"})) record("gemm", run_gemm(args->opt, peak));
    if (runs({"conv", "all"})) record("conv", run_conv(*args, peak));
    // Against which peak, where this run did not measure it.
    if (peak_from_elsewhere && profiled == 0)
      std::printf("(%% of peak against the FMA peak of %.1f GFLOP/s measured just now, quickly; 'dlperf bench all' keeps a fuller "
                  "measurement in %s)\n", peak, bench::kMachineProfile);
    else if (peak_from_elsewhere)
      std::printf("(%% of peak against the %.1f GFLOP/s measured in %s)\n", peak, bench::kMachineProfile);
    if (runs({"gemm", "all"})) record("gpu_gemm", guarded(*args, "GPU GEMM", [&] { return run_gpu_gemm(*args); }));
    if (runs({"conv", "all"})) record("gpu_conv", guarded(*args, "GPU conv", [&] { return run_gpu_conv(*args); }));
    if (runs({"kernels", "all"})) record("cpu_kernels", run_cpu_kernels(args->opt));
    if (runs({"launch", "all"})) record("cpu_launch", run_cpu_launch(args->opt));
    for (const char* g : {"copy", "launch", "gpu-memory"})
      if (runs({g, "all"})) record(g, guarded(*args, gpu_bench_title(g), [&] { return run_gpu(g, *args); }));
    if (bench::gpu::available()) out["machine"]["gpus"] = cuda::gpus_json();
    if (runs({"loader"})) record("loader", run_loader(*args));
    if (runs({"roofline"})) record("roofline", run_roofline(*args));
    if (runs({"allreduce"})) {
      // NCCL across the GPUs when there are any; MPI across CPU processes when Open MPI is there.
      record("nccl_allreduce", run_nccl(*args));
      const bool nccl_ran = out["nccl_allreduce"].is_array();
      if (!nccl_ran || std::filesystem::exists(std::filesystem::read_symlink("/proc/self/exe").parent_path() / "dlperf-allreduce")) {
        if (runs({"allreduce"})) record("allreduce", run_allreduce(*args));
      } else {
        std::printf("\nMPI all-reduce on the CPU: skipped: this build has no dlperf-allreduce (Open MPI was not found)\n");
      }
    }
    const hw::HostLoad load = hw::host_load(times_before, hw::cpu_times_now());
    out["host_load"] = hw::to_json(load);
    if (load.busy())
      std::printf("\nnote: %s while this ran, so the figures above may read low; run it again on an idle machine "
                  "('top' shows what else runs)\n", hw::busy_note(load).c_str());
    if (runs({"all"})) {  // the measured ceilings, for train --layer-times (and later profile, plan)
      nlohmann::json profile = {{"cpu", cpu.model}, {"cpu_identity", hw::cpu_identity(hw::to_json(cpu))}, {"threads", threads}, {"isa", cpu.isa},
                                {"f32_gflops", out["flops"]["gflops_max"]}, {"bandwidth_gbps", levels},
                                {"quick", args->opt.quick}, {"source", "dlperf bench all"}, {"gpus", nlohmann::json::array()}};
      // Every ceiling at its best sample (the FMA peaks, a call) or round (the bandwidths): another
      // process's time slices only ever slow a sample down, and the plan predicts a machine that
      // runs nothing else. The plan's on-the-spot ceilings take the FMA peak the same way.
      if (out.contains("cpu_launch")) profile["call_overhead_us"] = out["cpu_launch"]["us_min"];
      if (out.contains("cpu_kernels")) {  // the medians of the pairs timed (not those skipped)
        nlohmann::json kernels;
        for (const auto& [key, timed] : out["cpu_kernels"].items())
          if (timed.is_object() && timed.contains("median")) kernels[key] = timed["median"];
        if (!kernels.empty()) {
          kernels["rounds"] = out["cpu_kernels"]["rounds"];
          profile["cpu_kernels"] = kernels;
        }
      }
      profile["host_load"] = out["host_load"];
      if (const auto& b = out["flops"].value("bf16", nlohmann::json()); b.is_object() && b.contains("gflops_max"))
        profile["bf16_gflops"] = b["gflops_max"];  // measured, not skipped (no AVX512-BF16) or failed
      if (const auto& x = out["flops"].value("amx", nlohmann::json()); x.is_object() && x.contains("gflops_max"))
        profile["amx_bf16_gflops"] = x["gflops_max"];  // likewise (no AMX)
      std::printf("\nbandwidth plateaus (triad):");
      for (const char* level : {"L1", "L2", "L3", "DRAM"})
        if (levels.contains(level)) std::printf(" %s %.0f GB/s", level, levels[level].get<double>());
      if (bench::gpu::available()) {  // the GPU's GEMM peak per precision and device bandwidth
        bench::GpuCeilings g = bench::gpu_ceilings_from_bench(cuda::gpu_info(args->gpu).name, out["gpu_gemm"],
                                                               out["gpu-memory"].value("points", nlohmann::json()));
        g.quick = args->opt.quick;
        if (!g.empty()) {
          profile["gpus"].push_back(bench::to_json(g));
          std::printf("\nGPU ceilings (%s):", g.name.c_str());
          for (const auto& [p, v] : g.peak_gflops.items()) std::printf(" %s %.1f TFLOP/s", p.c_str(), v.get<double>() / 1e3);
          if (g.hbm_gbps() > 0) std::printf(", device memory %.0f GB/s (%s)", g.hbm_gbps(), g.bandwidth_kernel.c_str());
        }
      }
      if (const std::string kept = bench::why_machine_profile_kept(profile); kept.empty()) {
        bench::write_machine_profile(profile);
        std::printf("\nmachine profile: %s\n", bench::kMachineProfile);
      } else {
        std::printf("\nmachine profile: %s kept as it was: %s\n", bench::kMachineProfile, kept.c_str());
      }
    }
    if (const int sig = stop_signal()) out["stopped"] = {{"signal", signal_name(sig)}, {"finished", done}};
    const std::string path = args->json_path.empty() ? default_json_path() : args->json_path;
    write_file_atomically(path, out.dump(2) + "\n", "pick another --json path");
    std::printf("\nresults: %s\n", path.c_str());
    if (const int sig = stop_signal())
      throw Interrupted(sig,
                        done.empty() ? fmt::format("stopped by {} before any benchmark finished", signal_name(sig))
                                     : fmt::format("stopped by {}: the finished benchmarks ({}) are in {}{}", signal_name(sig),
                                                   fmt::join(done, ", "), path,
                                                   args->asked({"all"}) ? fmt::format(", and {} was left as it was", bench::kMachineProfile) : ""),
                        fmt::format("run 'dlperf bench {}' again{}", args->what_text(), done.empty() ? "" : " for the rest"));
    if (!args->failures.empty()) {
      std::string list;
      for (const auto& f : args->failures) list += "\n  " + f;
      throw Error(fmt::format("{} benchmark{} failed (the others' results are written):{}", args->failures.size(),
                              args->failures.size() == 1 ? "" : "s", list),
                  "the messages say what refused; the JSON records each failure under \"failed\"");
    }
  });
}

}  // namespace dlperf::cli
