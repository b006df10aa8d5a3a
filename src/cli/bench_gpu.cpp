// dlperf bench's GPU benchmarks: copies, launch latency, device memory, cuBLASLt GEMM, cuDNN
// convolutions and NCCL all-reduce, each printed as a table and returned as JSON.
#include <fmt/format.h>

#include <cstdio>

#include "backend/cuda/runtime.h"
#include "bench/gpu_bench.h"
#include "cli/bench_args.h"
#include "core/tensor.h"
#include "core/text.h"
#include "plan/catalog.h"
#include "report/table.h"

namespace dlperf::cli {

// What `bench copy|launch|gpu-memory` measures, as its skipped or failed line names it.
const char* gpu_bench_title(const std::string& what) {
  return what == "copy" ? "Host-device copies" : what == "launch" ? "GPU launch latency" : "GPU memory bandwidth";
}

// GPU benchmarks: host<->device copies, launch latency, device-memory bandwidth. Without a GPU
// (or the CUDA backend) they say why and record nothing.
nlohmann::json run_gpu(const std::string& what, const BenchArgs& a) {
  if (!bench::gpu::available()) {
    std::printf("\n%s: skipped: %s\n", gpu_bench_title(what), bench::gpu::why_not().c_str());
    return {{"skipped", bench::gpu::why_not()}};
  }
  const int device = a.gpu;
  const int repeats = a.opt.quick ? 5 : 20;
  if (what == "copy") {
    const auto pts = bench::gpu::copies(device, a.opt.quick ? 16e6 : 256e6, repeats);
    std::printf("\nHost<->device copies on GPU %d (median GB/s, min-max; CUDA events):\n", device);
    report::Table t({"size", "h2d pinned", "h2d pageable", "d2h pinned", "d2h pageable"});
    for (size_t i = 0; i + 3 < pts.size(); i += 4) {
      auto cell = [](const bench::gpu::CopyPoint& p) { return fmt::format("{:.1f} [{:.1f}-{:.1f}]", p.median_gbps, p.min_gbps, p.max_gbps); };
      // order per size: pinned h2d, pinned d2h, pageable h2d, pageable d2h
      t.add({format_binary_bytes(pts[i].bytes), cell(pts[i]), cell(pts[i + 2]), cell(pts[i + 1]), cell(pts[i + 3])});
    }
    t.print();
    return bench::gpu::to_json(pts);
  }
  if (what == "launch") {
    const auto l = bench::gpu::launch_latency(device, 1000, repeats);
    std::printf("\nKernel launch on GPU %d (empty kernels, median): %.2f us each back to back, %.2f us from a CUDA graph, "
                "%.2f us launch + synchronize\n", device, l.plain_us, l.graph_us, l.sync_us);
    std::printf("A timing event recorded after each kernel in the graph: %.2f us a kernel, so %+.2f us an event\n", l.graph_event_us,
                l.graph_event_us - l.graph_us);
    std::printf("A stamp of the GPU's clock (a one-thread kernel) after each kernel in the graph: %.2f us a kernel, so %+.2f us a "
                "stamp (what dlperf profile pays per span boundary of a graphed step); the clock ticks every %.0f ns\n",
                l.graph_stamp_us, l.graph_stamp_us - l.graph_us, l.clock_tick_ns);
    return bench::gpu::to_json(l);
  }
  const auto bw = bench::gpu::device_bandwidth(device, a.opt.quick ? 256e6 : 1e9, repeats);
  const auto info = cuda::gpu_info(device);
  // The datasheet's bandwidth where the catalog knows the GPU, beside the clock-and-bus figure.
  double sheet = 0;
  std::string sheet_id = plan::catalog_id_for_gpu(info.name);
  const plan::Catalog catalog = plan::load_catalog();
  if (!sheet_id.empty()) sheet = catalog.find(sheet_id).bandwidth_gbps;
  std::printf("\nDevice memory bandwidth on GPU %d, %s (median GB/s; %% of the %.0f GB/s the clock and bus imply%s):\n", device,
              info.name.c_str(), info.peak_bandwidth_gbps,
              sheet > 0 ? fmt::format(", and of the datasheet's {:.0f} GB/s ({})", sheet, sheet_id).c_str() : "; no datasheet entry");
  report::Table t({"kernel", "bytes moved", "GB/s", "spread", "% of clock x bus", "% of datasheet"});
  for (const auto& b : bw)
    t.add({b.kernel, format_bytes(b.bytes), fmt::format("{:.0f}", b.median_gbps), fmt::format("{:.0f}-{:.0f}", b.min_gbps, b.max_gbps),
           info.peak_bandwidth_gbps > 0 ? fmt::format("{:.0f}%", 100 * b.median_gbps / info.peak_bandwidth_gbps) : "-",
           sheet > 0 ? fmt::format("{:.0f}%", 100 * b.median_gbps / sheet) : "-"});
  t.print();
  return {{"points", bench::gpu::to_json(bw)},
          {"clock_bus_gbps", info.peak_bandwidth_gbps},
          {"datasheet_gbps", sheet > 0 ? nlohmann::json(sheet) : nlohmann::json()},
          {"catalog_id", sheet_id}};
}

// cuBLASLt GEMM per precision on the GPU, beside the datasheet's peak where the catalog knows it.
nlohmann::json run_gpu_gemm(BenchArgs& a) {
  if (!bench::gpu::available()) {
    std::printf("\nGPU GEMM: skipped: %s\n", bench::gpu::why_not().c_str());
    return {{"skipped", bench::gpu::why_not()}};
  }
  const auto info = cuda::gpu_info(a.gpu);
  const std::string id = plan::catalog_id_for_gpu(info.name);
  const plan::Catalog cat = plan::load_catalog();
  const auto pts = bench::gpu::gemm(a.gpu, a.opt.quick ? std::vector<int64_t>{4096} : std::vector<int64_t>{1024, 4096, 8192},
                                    a.opt.quick ? 5 : 20);
  std::printf("\nGEMM through cuBLASLt on GPU %d, %s (TFLOP/s, median; inputs rotate over copies spanning 2x the L2):\n", a.gpu,
              info.name.c_str());
  report::Table t({"precision", "M=N=K", "TFLOP/s", "spread", "datasheet", "% of datasheet", "max rel. error"});
  nlohmann::json rows = bench::gpu::to_json(pts);
  for (size_t i = 0; i < pts.size(); ++i) {
    const auto& p = pts[i];
    if (!p.failed.empty()) continue;  // listed under the table
    const double spec = id.empty() ? 0 : cat.find(id).peak_tflops(p.precision);
    if (spec > 0) rows[i]["datasheet_tflops"] = spec;
    t.add({p.precision, std::to_string(p.m), fmt::format("{:.1f}", p.median_tflops), fmt::format("{:.1f}-{:.1f}", p.min_tflops, p.max_tflops),
           spec > 0 ? fmt::format("{:.1f}", spec) : "-", spec > 0 ? fmt::format("{:.0f}%", 100 * p.median_tflops / spec) : "-",
           fmt::format("{:.1e}", p.max_rel_error)});
  }
  t.print();
  say_failed_points<bench::gpu::GemmPoint>(a, "GPU GEMM", pts,
                                           [](const auto& p) { return fmt::format("{} {}x{}x{}", p.precision, p.m, p.n, p.k); });
  if (id.empty()) std::printf("(no catalog entry for %s: no datasheet column)\n", info.name.c_str());
  return rows;
}

// cuDNN convolutions of the presets' layers on the GPU, per precision.
nlohmann::json run_gpu_conv(BenchArgs& a) {
  if (!bench::gpu::available()) {
    std::printf("\nGPU conv: skipped: %s\n", bench::gpu::why_not().c_str());
    return {{"skipped", bench::gpu::why_not()}};
  }
  const Dims chw = parse_chw(a.input);
  const auto models = conv_models(a);
  const auto pts = bench::gpu::conv(a.gpu, models, {chw[0], chw[1], chw[2]}, a.batch, a.opt.quick ? 5 : 20);
  std::printf("\nConvolutions through cuDNN, and dlperf's own kernels where the input has 1 or 3 channels, on GPU %d at batch %lld\n"
              "on %s (TFLOP/s per pass, median; the input and output gradient rotate over copies spanning 2x the L2; forward\n"
              "checked at 16 sampled outputs against float64):\n",
              a.gpu, (long long)a.batch, a.input.c_str());
  report::Table t({"model", "layer", "precision", "layout", "input", "out", "forward", "bwd data", "bwd filter", "algorithms"});
  for (const auto& p : pts)
    if (p.failed.empty())  // failed points are listed under the table
      t.add({p.model, p.layer, p.precision, p.layout, fmt::format("{}x{}x{}", p.input[1], p.input[2], p.input[3]), std::to_string(p.out_channels),
             fmt::format("{:.1f}", p.forward_tflops), p.backward_data_tflops > 0 ? fmt::format("{:.1f}", p.backward_data_tflops) : "-",
             fmt::format("{:.1f}", p.backward_filter_tflops), p.algorithms});
  t.print();
  say_failed_points<bench::gpu::ConvPoint>(a, "GPU conv", pts,
                                           [](const auto& p) { return fmt::format("{} {} {} {}", p.model, p.layer, p.precision, p.layout); });
  return bench::gpu::to_json(pts);
}

// f32 all-reduce over NCCL across every visible GPU, as nccl-tests reports it.
nlohmann::json run_nccl(const BenchArgs& a) {
  int gpus = 0;
  std::string why;
  const auto pts = bench::gpu::nccl_allreduce(a.opt.quick ? 64e6 : 1e9, a.opt.quick ? 5 : 20, gpus, why);
  if (pts.empty()) {
    std::printf("\nNCCL all-reduce: skipped: %s\n", why.c_str());
    return {{"skipped", why}};
  }
  std::printf("\nAll-reduce (f32 sum) over NCCL on %d GPU%s (median; nccl-tests' algbw and busbw%s):\n", gpus, gpus == 1 ? "" : "s",
              gpus == 1 ? "; with one GPU it is a copy, so busbw equals algbw" : "");
  report::Table t({"size", "time us", "spread us", "algbw GB/s", "busbw GB/s"});
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& p : pts) {
    t.add({format_binary_bytes(p.bytes), fmt::format("{:.1f}", p.time_us), fmt::format("{:.1f}-{:.1f}", p.min_us, p.max_us),
           fmt::format("{:.2f}", p.algbw_gbps), fmt::format("{:.2f}", p.busbw_gbps)});
    rows.push_back({{"bytes", p.bytes}, {"time_us_median", p.time_us}, {"time_us_min", p.min_us}, {"time_us_max", p.max_us},
                    {"algbw_gbps", p.algbw_gbps}, {"busbw_gbps", p.busbw_gbps}, {"gpus", gpus}});
  }
  t.print();
  return rows;
}

}  // namespace dlperf::cli
