// dlperf bench [memory|flops|all] [--quick] [--threads N] [--json FILE]
#include <fmt/format.h>
#include <omp.h>

#include <ctime>
#include <filesystem>
#include <fstream>

#include "bench/cpu_bench.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/memory.h"
#include "hw/cpu_info.h"
#include "report/table.h"

namespace dlperf::cli {

namespace {

struct BenchArgs {
  std::string what = "all";
  bench::Options opt;
  std::string json_path;
};

nlohmann::json run_memory(const bench::Options& o) {
  std::printf("Memory bandwidth (STREAM byte counts; median of repeats, min-max in brackets):\n");
  const auto points = bench::memory_bandwidth(o);
  report::Table t({"working set", "copy GB/s", "triad GB/s"});
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& p : points) rows.push_back(bench::to_json(p));
  // The same sizes come for each kernel, copy first.
  const size_t half = points.size() / 2;
  auto cell = [](const bench::MemoryPoint& p) { return fmt::format("{:.1f} [{:.1f}-{:.1f}]", p.gbps.median, p.gbps.min, p.gbps.max); };
  for (size_t i = 0; i < half; ++i) t.add({format_bytes(double(points[i].working_set)), cell(points[i]), cell(points[half + i])});
  t.print();
  return rows;
}

nlohmann::json run_flops(const bench::Options& o, const hw::CpuInfo& cpu) {
  const auto r = bench::fma_peak(o);
  std::printf("\nfp32 FMA peak (%s, %d threads, median of %d runs):\n", r.isa.c_str(), r.threads, r.repeats);
  report::Table t({"measured GFLOP/s", "spread", "per core", "implied clock", "counted peak", "measured / counted"});
  const double counted = cpu.peak_gflops() * double(r.threads) / double(cpu.cores);
  t.add({fmt::format("{:.1f}", r.gflops.median), fmt::format("{:.1f}-{:.1f}", r.gflops.min, r.gflops.max),
         fmt::format("{:.1f}", r.per_core_gflops), fmt::format("{:.2f} GHz", r.implied_ghz),
         fmt::format("{:.1f} at {:.2f} GHz", counted, cpu.ghz), fmt::format("{:.0f}%", 100 * r.gflops.median / counted)});
  t.print();
  auto j = bench::to_json(r);
  j["counted_peak_gflops"] = counted;
  return j;
}

std::string default_json_path() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&t));
  return fmt::format("runs/{}-bench.json", buf);
}

}  // namespace

void add_bench(CLI::App& app, const Command& self) {
  auto args = std::make_shared<BenchArgs>();
  auto* c = app.add_subcommand(self.name, self.summary);
  c->add_option("what", args->what, "memory | flops | all (GEMM, conv, copies, launch and all-reduce are not measured yet)")
      ->capture_default_str()->check(CLI::IsMember({"memory", "flops", "all"}));
  c->add_flag("--quick", args->opt.quick, "fewer sizes and repeats: seconds instead of about a minute");
  c->add_option("--threads", args->opt.threads, "threads (0 = all cores)")->capture_default_str();
  c->add_option("--json", args->json_path, "where the results go (default runs/<time>-bench.json)");
  c->callback([args] {
    check(args->opt.threads >= 0 && args->opt.threads <= 1024, "--threads must be between 0 and 1024");
    const hw::CpuInfo cpu = hw::cpu_info();
    const int threads = args->opt.threads > 0 ? args->opt.threads : omp_get_max_threads();
    std::printf("dlperf bench on %s (%d threads, %s)\n\n", cpu.model.c_str(), threads, cpu.isa.c_str());
    nlohmann::json out = {{"command", "bench"}, {"quick", args->opt.quick}, {"machine", hw::machine_json()}};
    if (args->what == "memory" || args->what == "all") out["memory"] = run_memory(args->opt);
    if (args->what == "flops" || args->what == "all") out["flops"] = run_flops(args->opt, cpu);
    const std::string path = args->json_path.empty() ? default_json_path() : args->json_path;
    std::error_code ec;
    if (std::filesystem::path(path).has_parent_path()) std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    std::ofstream f(path);
    f << out.dump(2) << "\n";
    check(bool(f), "cannot write " + path, "pick another --json path");
    std::printf("\nresults: %s\n", path.c_str());
  });
}

}  // namespace dlperf::cli
