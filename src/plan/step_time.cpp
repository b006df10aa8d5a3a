#include "plan/step_time.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "backend/cpu/batchnorm_bf16.h"
#include "backend/cpu/conv_gemm.h"
#include "backend/cpu/layouts.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/small_layers.h"
#include "bench/cpu_bench.h"
#include "bench/machine_profile.h"
#include "bench/ops_bench.h"
#include "hw/cpu_info.h"
#include "hw/host_load.h"
#include "plan/memory.h"

namespace dlperf::plan {

using nlohmann::json;

namespace {
// measure(threads), run once per thread count per process (each caller, each lambda type, keeps
// its own results), and again where the kept result was measured while other work shared the
// CPUs (hw::KeptMeasurements).
template <class F>
auto once_per_thread_count(int threads, F measure) {
  static hw::KeptMeasurements<decltype(measure(threads))> kept;
  return kept.get(threads, measure);
}

// The AMX tiles' bf16 peak where oneDNN runs bf16 there (about 0.1 s, once per thread count), else
// 0: 14x the FMA peak on a 2-vCPU Xeon VM (2026-11-29).
double amx_peak_now(int threads) {
  if (!cpu::has_amx_kernels()) return 0;
  return once_per_thread_count(threads, [](int t) {
    bench::Options o;
    o.threads = t;
    o.quick = true;
    std::string why_not;
    return bench::amx_peak(o, &why_not).gflops.max;
  }).value;
}
}  // namespace

// Without a machine profile, the ceilings are measured on the spot (about two seconds) rather than
// counted: a VM's /proc/cpuinfo reports the base clock, not the boost its cores run at, and
// typical cache bandwidths are guesses. On the Zen 4 development VM the counted peak was 28% under
// the measured one, the assumed bandwidths 30-60% off, and the plan's step times came out a
// median 59% over the lab's runs (2% with these ceilings). The FMA peak is the best of bench's
// full repeats (half a second): a VM's neighbours can halve a whole quick run's samples, never
// raise one; and where even that best is under 90% of the peak counted at the base clock (cores
// run at least that fast unless something takes them away), it is measured twice more. The
// memory sweep is bench --quick's, each point its best round's (bench::kRounds). Measured
// once per thread count per process, and again later where other work shared the CPUs
// meanwhile (hw::KeptMeasurements); the source says so while they stand.
bench::Ceilings ceilings_measured_now(int threads) {
  const auto kept = once_per_thread_count(threads, [](int t) {
    const hw::CpuInfo cpu = hw::cpu_info();
    bench::Options o;
    o.threads = t;
    const double counted = cpu.peak_gflops() * t / std::max(cpu.cores, 1);
    bench::Ceilings m;
    m.f32_gflops = bench::fma_peak(o).gflops.max;
    for (int retry = 0; retry < 2 && m.f32_gflops < 0.9 * counted; ++retry) m.f32_gflops = std::max(m.f32_gflops, bench::fma_peak(o).gflops.max);
    o.quick = true;
    m.bandwidth_gbps = bench::bandwidth_levels(bench::memory_bandwidth(o), cpu.l1d_bytes, cpu.l2_bytes, cpu.l3_bytes, t);
    // The bf16 dot-product peak, where there is one (about 0.15 s): its ratio to the fp32 FMA
    // peak is the CPU's, 2.0x on the Zen 4, 1.84-1.88x on the Zen 5, 0.49x on an Intel Xeon VM
    // (2026-11-28), where a bf16 plan at twice fp32's peak came out 3.5x too fast.
    if (cpu.avx512_bf16) {
      std::string why_not;
      if (const bench::FlopsResult bf16 = bench::bf16_peak(o, &why_not); !bf16.isa.empty()) m.bf16_gflops = bf16.gflops.max;
    }
    m.amx_bf16_gflops = amx_peak_now(t);
    m.measured_now = true;
    return m;
  });
  bench::Ceilings m = kept.value;
  m.busy_note = hw::busy_note(kept.load);
  return m;
}

namespace {
// A call into the engine (bench launch's CPU figure), measured in a few milliseconds. Always now,
// not from the machine profile: it is the fork and join of the OpenMP threads, so it moves with
// how far apart the CPUs are, and a VM's two vCPUs read 1.2 us and, half an hour later, 2.7 us
// (2026-11-24, the Zen 5 VM idle both times; one thread: 0.4 us). Training moves with it: the
// mlp's step took 33 us in the first state and 71 us in the second.
double call_overhead_now_us(int threads) {
  // A lambda of its own: each measurement's type keeps its own cache in once_per_thread_count.
  return once_per_thread_count(threads, [](int t) { return bench::cpu_call_now_us(t); }).value;
}
}  // namespace

CpuCeilings host_ceilings(int threads, const std::string& precision) {
  const hw::CpuInfo cpu = hw::cpu_info();
  CpuCeilings c;
  c.threads = threads;
  c.cpus = hw::usable_cpus();
  c.l2_bytes = double(cpu.l2_bytes) * threads;
  c.l3_bytes = double(cpu.l3_bytes);
  c.isa = cpu.isa;
  c.lanes_f32 = cpu.lanes_f32;
  const cpu::WinogradChoice& winograd = cpu::winograd_choice();
  c.winograd = winograd.on;
  bench::Ceilings measured = bench::load_ceilings(cpu.model, threads);
  c.source = measured.source();
  const bool from_profile = measured.f32_gflops > 0;
  if (!from_profile) {
    measured = ceilings_measured_now(threads);
    c.source = measured.source();
  }
  c.peak_gflops = measured.f32_gflops;
  c.bf16_measured_gflops = measured.bf16_gflops;
  // A profile from before AMX was measured has none: then AMX's is measured now (a tenth of a second).
  c.amx_gflops = measured.amx_bf16_gflops > 0 ? measured.amx_bf16_gflops : amx_peak_now(threads);
  double call_us = call_overhead_now_us(threads);
  if (from_profile) {
    const double kept_us = measured.call_overhead_us;
    if (kept_us > 0 && call_us > kCallBusyRatio * kept_us) {
      // Other work holds the cores: each call waits for a time slice (8 ms against 1.9 us while a
      // PyTorch benchmark trained on both of the VM's cores, 2026-11-29), and a plan with that
      // figure had medium's step at 303 ms. The profile's ceilings are an idle machine's, so its
      // call is too: the plan is of a run on the idle machine, and says so.
      c.source += fmt::format("; a call's cost from the profile ({:.2f} us): measured just now it took {:.2f} us, more than {:.0f}x "
                              "that, so other work holds the cores (rerun on an idle machine to plan with a fresh figure)",
                              kept_us, call_us, kCallBusyRatio);
      call_us = kept_us;
    } else {
      c.source += kept_us > 0 && std::fabs(call_us / kept_us - 1) > 0.25
                      ? fmt::format("; a call's cost measured just now ({:.2f} us; {:.2f} us when the profile was measured: the "
                                    "threads' fork and join moves with how far apart a VM's CPUs are placed)", call_us, kept_us)
                      : "; a call's cost measured just now";
    }
  } else if (!measured.busy_note.empty()) {
    c.source += fmt::format("; a call's cost measured then too ({:.2f} us; it may read high)", call_us);
  }
  c.call_overhead_s = call_us * 1e-6;
  if (threads > 1) c.one_thread_call_overhead_s = call_overhead_now_us(1) * 1e-6;
  if (winograd.too_busy && !winograd.on)
    c.source += "; 3x3 convolutions planned direct, as the engine would run them: other work held the CPUs while it timed "
                "Winograd against direct (an idle machine times them; DLPERF_CPU_WINOGRAD=on plans Winograd)";
  const json& b = measured.bandwidth_gbps;
  c.l1_gbps = b.value("L1", 0.0);
  c.l2_gbps = b.value("L2", 0.0);
  c.l3_gbps = b.value("L3", 0.0);
  c.dram_gbps = b.value("DRAM", 0.0);
  // Typical server-core figures for a level the sweep could not place (cache sizes unknown):
  // per-thread L1/L2 rates, a shared L3, and one socket's DRAM.
  if (c.l1_gbps <= 0) c.l1_gbps = 60.0 * threads;
  if (c.l2_gbps <= 0) c.l2_gbps = 40.0 * threads;
  if (c.l3_gbps <= 0) c.l3_gbps = 25.0 * threads;
  if (c.dram_gbps <= 0) c.dram_gbps = std::min(12.0 * threads, 100.0);
  return with_precision(c, precision);
}

CpuCeilings with_precision(CpuCeilings c, const std::string& precision) {
  const std::string note = c.bf16_measured_gflops > 0 ? "; bf16: its measured VDPBF16PS peak" : "; bf16: twice the fp32 peak (AVX512-BF16 dot products)";
  if (precision == "bf16" && c.precision != "bf16") {
    c.fp32_peak_gflops = c.peak_gflops;
    c.peak_gflops = c.bf16_measured_gflops > 0 ? c.bf16_measured_gflops : 2 * c.peak_gflops;
    c.source += note;
  } else if (precision != "bf16" && c.precision == "bf16") {  // back to fp32's ceilings
    c.peak_gflops = c.fp32_peak_gflops;
    if (const auto at = c.source.find(note); at != std::string::npos) c.source.erase(at);
  }
  c.precision = precision;
  return c;
}

json to_json(const CpuCeilings& c) {
  return {{"peak_gflops", c.peak_gflops}, {"l1_gbps", c.l1_gbps},     {"l2_gbps", c.l2_gbps},
          {"l3_gbps", c.l3_gbps},         {"dram_gbps", c.dram_gbps}, {"call_overhead_us", c.call_overhead_s * 1e6},
          {"winograd", c.winograd},       {"amx_gflops", c.amx_gflops}, {"source", c.source}};
}

namespace {

// The bandwidth a pass streaming `bytes` sees: L2's when they fit in the threads' L2, else
// DRAM's. A pass over a tensor larger than L2 ran at about DRAM speed on the Zen 3, even where
// L3 could hold it (the next layer's data had evicted it by then); the Zen 4 streamed such passes
// at 41% of its L3's triad rate, twice its DRAM's (`l3_share`).
double bandwidth_for(double bytes, const CpuCeilings& c, const EngineModel& m) {
  if (bytes <= c.l2_bytes) return c.l2_gbps * 1e9;
  if (m.l3_share > 0 && bytes <= c.l3_bytes) return std::max(c.l3_gbps * m.l3_share, c.dram_gbps) * 1e9;
  return c.dram_gbps * 1e9;
}

// A conv or linear pass is a GEMM whose outputs each sum over a reduction of length K; a short
// reduction cannot keep the FMA units fed from registers. Efficiency = peak share x K / (K + k0).
double gemm_efficiency(double k, const EngineModel& m) { return m.gemm_efficiency * k / (k + m.short_reduction); }

// The share of a pass's FMAs that land on real outputs where `outputs` features are computed
// in whole blocks (EngineModel::output_block): 10 of 16 for a 10-class linear layer.
double output_block_share(int64_t outputs, const EngineModel& m) {
  if (m.output_block <= 0 || outputs <= 0) return 1;
  const int64_t padded = (outputs + m.output_block - 1) / m.output_block * m.output_block;
  return double(outputs) / double(padded);
}

// A pass of a Winograd convolution (EngineModel::winograd_efficiency): its GEMMs' FLOPs and the
// efficiency they run at; the bytes are the direct pass's.
struct WinogradPass {
  double flops = 0, efficiency = 0;
};
WinogradPass winograd_pass(const nn::Node& n, const EngineModel& m) {
  const double in = double(n.in_dims[0][1]), out = double(n.out_dims[1]);
  const double tiles = double(n.out_dims[0]) * std::ceil(double(n.out_dims[2]) / 4) * std::ceil(double(n.out_dims[3]) / 4);
  return {2 * 36 * in * out * tiles, m.winograd_efficiency * in / (in + m.winograd_short_channels) * tiles / (tiles + m.winograd_few_tiles)};
}

// The reduction length of each pass: forward sums over input channels x kernel, backward-data
// over output channels x kernel, backward-weight over the batch's output pixels.
std::array<double, 3> reductions(const nn::Node& n) {
  const Dims& x = n.in_dims[0];
  if (n.kind == ops::OpKind::conv2d) {
    const double kk = double(n.attrs.kernel * n.attrs.kernel);
    return {double(x[1]) * kk, double(n.out_dims[1]) * kk, double(n.out_dims[0] * n.out_dims[2] * n.out_dims[3])};
  }
  return {double(x[1]), double(n.out_dims[1]), double(x[0])};
}

struct PassTime {
  double s = 0;
  bool compute_bound = false;
};

// Where a pass's bytes stream from, beyond the level its own size fits in.
struct Sources {
  double from_dram = 0;  ///< bytes from DRAM whatever their size (written past the caches: see written_past_the_caches)
  double cold = 0;       ///< bytes last touched a step ago (EngineModel::cold_step_l3_share)
  double cold_bps = 0;   ///< the rate of the level the step's buffers fit in; 0 = not modelled
};

// Seconds to stream a pass's `bytes`, some of them from `from` and the rest from the cache
// level the whole pass fits in.
double stream_s(double bytes, const Sources& from, const CpuCeilings& c, const EngineModel& m) {
  const double dram = std::min(from.from_dram, bytes), cold = from.cold_bps > 0 ? std::min(from.cold, bytes - dram) : 0;
  return dram / (c.dram_gbps * 1e9) + (cold > 0 ? cold / from.cold_bps : 0) + (bytes - dram - cold) / bandwidth_for(bytes, c, m);
}

// The rate of the level a step's buffers of `footprint` bytes fit in, for what it comes back
// to a step later (EngineModel::cold_step_l3_share); 0 where the model has no such level.
double cold_bytes_per_s(double footprint, const CpuCeilings& c, const EngineModel& m) {
  if (m.cold_step_l3_share <= 0 || c.l2_bytes <= 0 || c.l3_bytes <= 0) return 0;
  if (footprint <= c.l2_bytes) return c.l2_gbps * 1e9;
  if (footprint <= m.cold_step_l3_share * c.l3_bytes) return std::max(c.l3_gbps * m.l3_share, c.dram_gbps) * 1e9;
  return c.dram_gbps * 1e9;
}

// `busy`: the threads the pass keeps working, of c.threads (the rest wait at its join).
PassTime pass_time(const ops::PassCost& p, double efficiency, const CpuCeilings& c, const EngineModel& m, double from_dram = 0,
                   int busy = 0) {
  if (p.flops == 0 && p.bytes == 0) return {};
  const double compute = p.flops / (c.peak_gflops * 1e9 * efficiency);
  const double memory = stream_s(p.bytes, Sources{from_dram}, c, m);
  const double idle = busy > 0 && busy < c.threads ? double(c.threads) / busy : 1;
  return {std::max(compute, memory) * idle + m.call_overhead_s, compute >= memory};
}

// The threads oneDNN's inner product keeps busy in a linear layer's forward pass on AVX-512 (its
// brgemm kernels; 0 = all, elsewhere). It hands each thread whole blocks of up to 64 output
// features by 16-64 images, so a small layer has fewer blocks than threads: the mlp's fc1 (16
// images, 64 features) is one block, and took 16 us a step on 1 thread and on 2 (2026-11-24, Zen
// 4), where 32 images (two blocks) went from 30 to 17 us. Written out here because oneDNN does not
// expose its split; this follows jit_brgemm_inner_product_utils.cpp (init_ip_conf_fwd,
// get_os_block, get_oc_block), leaving out the kernel shapes no dlperf model reaches (AMX, int8).
int linear_forward_threads(const nn::Node& n, const CpuCeilings& c) {
  if (c.isa != "avx512" || c.threads <= 1) return 0;
  const int64_t os = n.in_dims[0][0], ic = numel(n.in_dims[0]) / os, oc = n.out_dims[1], nthr = c.threads;
  const bool f32 = c.precision != "bf16";
  auto div_up = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  const int64_t oc_block = oc >= 64 ? 64 : oc >= 32 ? 32 : 16, nb_oc = div_up(oc, oc_block);
  const int64_t oc_chunks = os <= 8 && oc <= 256 ? 1 : nb_oc;  // a tiny batch takes every feature block at once
  const bool gigantic = ic >= 9216 && oc >= 4096 && os >= 512;
  int64_t max_os_block = gigantic ? 128 : 64;
  if (f32 && double(div_up(os, max_os_block) * nb_oc) < 1.8 * double(nthr))  // aims at about 2 blocks a thread
    max_os_block = std::clamp<int64_t>(div_up(os * nb_oc, 2 * nthr), 16, max_os_block);
  int64_t os_block = std::min(os, max_os_block);  // the largest divisor of the batch from 6 up, else the cap
  for (int64_t b = max_os_block; b >= 6; --b)
    if (os % b == 0) {
      os_block = b;
      break;
    }
  const int64_t nb_os = div_up(os, os_block);
  int64_t nb_os_blocking = 1;
  if (f32 && os > 256)
    nb_os_blocking = std::clamp<int64_t>(std::min(std::max<int64_t>(oc / os / 2, 1), div_up(nb_os * nb_oc, 2 * nthr)), 1,
                                         std::min<int64_t>(8, nb_os));
  const int64_t blocks = oc_chunks * div_up(nb_os, nb_os_blocking);
  // Few blocks and many input features: the threads also split the sum over the features (not
  // for shapes with plenty of blocks anyway, which oneDNN tells by a looser "gigantic" test here).
  const bool many_blocks = oc >= 4096 && os >= 512;
  if (f32 && ic > 1024 && blocks < div_up(ic, 16) && !many_blocks) return 0;
  return int(std::min<int64_t>(blocks, nthr));
}

// Whether node `i`'s value was written past the caches: oneDNN's fp32 batchnorm (jit bnorm, 2.6
// and later) stores its output, and in backward its input's gradient, with non-temporal stores
// wherever the tensor is aligned to the vector width, as every dlperf buffer is. So the pass that
// reads such a value next reads DRAM, however small the value: a pooling after a batchnorm ran at
// the same rate at batch 64 (in L3) as at 1024 (in DRAM) on the Zen 4, and on the Zen 5 pool1 of
// medium at batch 64 took 0.32 ms after oneDNN's batchnorm against 0.06 ms on the same tensor in
// cache (oneDNN alone, 2026-11-23). Storing normally would not pay: with medium's batchnorm outputs
// placed off the vector alignment, the poolings ran 0.4-0.5x as long and the batchnorms 1.1-1.5x
// as long (each store reads its line first), the step 1.00x. bf16 batchnorm stores normally.
// oneDNN's Winograd convolution (fp32 only) does the same: its output transform stores the
// forward output, and backward-data's input gradient, non-temporally wherever a row is aligned
// (jit_avx512_core_f32_wino_conv_4x3_kernel.cpp, store_dst). medium at batch 64 on the Xeon VM,
// `scripts/plan_vs_profile.py`, 2 rounds of 3 profiles each way (2026-11-28): bn2+relu2's
// forward took 0.323-0.330 ms after a Winograd conv2 and 0.224-0.253 after a direct one, bn3's
// 0.155-0.156 against 0.111-0.131.
bool written_past_the_caches(const nn::Graph& g, int i, const CpuCeilings& c) {
  if (i < 0 || c.precision == "bf16") return false;
  const nn::Node& n = g.nodes[size_t(i)];
  if (n.kind == ops::OpKind::conv2d) return c.winograd && cpu::winograd_pays(n.attrs, n.in_dims[0]);
  return n.kind == ops::OpKind::batchnorm2d || relu_fused_into_batchnorm(g, size_t(i));
}

// A training batchnorm's forward and backward as oneDNN's jit batchnorm (bnorm_jit, nChw16c)
// runs them. Forward reads its input three times (mean, variance, normalize) and writes its
// output; backward reads the input and the output's gradient twice each (the scale and shift
// gradients, then the input's) and writes the input's gradient. It runs over chunks of 16-channel
// blocks sized to what it takes for L3 (per-core L3 x threads / 2), each chunk's passes one after
// the other, so the first read of a tensor streams from where the tensor lies and the re-reads
// from where a chunk fits. oneDNN 2.6 reads cache sizes from Intel's CPUID leaf only and guesses 1
// MiB of L3 a core elsewhere, as on every AMD CPU; the plan takes that guess for all. (Intel's
// 1.25-2 MiB a core would make chunks of about the same size, but a VM may say otherwise: a
// 2-vCPU Xeon VM's CPUID gives the host's 260 MiB L3 shared by 2, so oneDNN takes 130 MiB a core
// there and never splits. Not modelled: the plan keeps the AMD fits' rates, docs/plan.md.)
// The output and the input's gradient go past the caches in fp32 (written_past_the_caches), to DRAM; backward's input was written in
// forward, a step's traffic ago (EngineModel::cold_step_l3_share). On the Zen 4 (`medium` and
// `small` at batch 16-1024, --layer-times, 3 runs each, 2026-11-24) the batchnorms' time a step
// was planned a median 9% off, against 16% with twice the minimal bytes: medium's bn1 at batch
// 256 took 1.9-2.4 ms forward, planned 1.84 so and 3.24 before, when all three reads came from
// DRAM. docs/plan.md has the table.
struct PassPair {
  double forward_s = 0, backward_s = 0;
};
// `forward_dram`, `backward_dram`: the input's and the output gradient's bytes a batchnorm before
// wrote past the caches (layer_time's); `cold_bps`: cold_bytes_per_s's rate.
PassPair batchnorm_passes_s(const nn::Node& n, double element_bytes, bool past_caches, double forward_dram, double backward_dram,
                            double cold_bps, const CpuCeilings& c, const EngineModel& m) {
  constexpr double kOnednnL3PerCore = 1 << 20;
  constexpr int64_t kChannelBlock = 16;
  const Dims& x = n.in_dims[0];
  const int64_t blocks = (x[1] + kChannelBlock - 1) / kChannelBlock;
  const double pixels = double(x[0]) * double(numel(x) / (x[0] * x[1]));  // N x H x W
  const double bytes = element_bytes * double(numel(x)), block_bytes = element_bytes * pixels * kChannelBlock;
  const double l3 = kOnednnL3PerCore * std::max(c.threads, 1) / 2;
  auto chunk_bytes = [&](double tensors) {  // oneDNN's cache_balance
    if (block_bytes * double(blocks) < l3 / 2) return bytes * tensors;  // small enough not to split
    return block_bytes * tensors * std::clamp(std::floor(l3 / (block_bytes * tensors)), 1.0, double(blocks));
  };
  const double write_s = past_caches ? bytes / (c.dram_gbps * 1e9) : stream_s(bytes, {}, c, m);
  PassPair t;
  t.forward_s = stream_s(bytes, Sources{forward_dram}, c, m) + write_s + 2 * bytes / bandwidth_for(chunk_bytes(1), c, m) + m.call_overhead_s;
  t.backward_s = stream_s(bytes, Sources{backward_dram}, c, m) + stream_s(bytes, Sources{0, bytes, cold_bps}, c, m) + write_s +
                 2 * bytes / bandwidth_for(chunk_bytes(2), c, m) + m.call_overhead_s;
  return t;
}

// Bytes an element in the CPU engine, per node (backend/cpu/network.h).
struct ElementBytes {
  /// Of its value (and gradient): 4, or in bf16 2 from the first conv on, except the logits and
  /// dropout's output.
  std::vector<double> value;
  /// Of the input it computes from: where this differs from its producer's value, the engine
  /// converts the input (and the gradient back).
  std::vector<double> input;
};
ElementBytes engine_element_bytes(const nn::Graph& g, const std::string& precision) {
  const double low = precision == "bf16" ? 2 : 4;  // what conv and linear read and write
  ElementBytes b{std::vector<double>(g.nodes.size(), 4), std::vector<double>(g.nodes.size(), 4)};
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const nn::Node& n = g.nodes[i];
    const double in = n.inputs[0] < 0 ? 4 : b.value[size_t(n.inputs[0])];
    const bool computes = n.kind == ops::OpKind::conv2d || n.kind == ops::OpKind::linear;
    b.input[i] = computes ? low : n.kind == ops::OpKind::dropout ? 4 : in;
    b.value[i] = i + 1 == g.nodes.size() || n.kind == ops::OpKind::dropout ? 4 : computes ? low : in;
  }
  return b;
}

}  // namespace

std::vector<double> engine_input_bytes(const nn::Graph& g, const std::string& precision) {
  return engine_element_bytes(g, precision).input;
}

std::vector<double> engine_value_bytes(const nn::Graph& g, const std::string& precision) {
  return engine_element_bytes(g, precision).value;
}

std::vector<size_t> inputs_summing_gradients(const nn::Graph& g, size_t i) {
  // Layers that run no backward of their own write no gradient: a relu inside its batchnorm, a
  // flatten that is a view (backend/cpu/network.cpp skips both); nor does one whose input is the
  // model's. (The memory model counts the same sums' temporaries on the engine's values:
  // backend/cpu/layouts.cpp.)
  auto writes_gradients = [&](size_t r) { return !relu_fused_on_cpu(g, r) && !flatten_is_a_view_on_cpu(g, r); };
  std::vector<size_t> out;
  if (!writes_gradients(i) || !g.nodes[i].needs_dx) return out;
  for (size_t k = 0; k < g.nodes[i].inputs.size(); ++k) {
    const int v = g.nodes[i].inputs[k];
    if (v < 0) continue;
    for (int r : g.consumers(v))
      if (size_t(r) > i && writes_gradients(size_t(r))) {
        out.push_back(k);
        break;
      }
  }
  return out;
}

double step_footprint_bytes(const nn::Graph& g, const nn::OptimizerConfig& opt, const std::string& precision) {
  const std::vector<double> value = engine_element_bytes(g, precision).value;
  double bytes = 4 * double(numel(g.input));
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!relu_fused_on_cpu(g, i) && !flatten_is_a_view_on_cpu(g, i))  // these share their input's buffers
      bytes += 2 * value[i] * double(numel(g.nodes[i].out_dims));
  return bytes + 4 * double(g.param_count()) * (2 + optimizer_states(opt));
}

EngineModel engine_model(const std::string& isa, int lanes_f32) {
  EngineModel m;  // the AVX2 fit (Zen 3, 2026-11-21)
  if (isa != "avx512") return m;
  // The AVX-512 fit (Zen 4 EPYC, 2026-11-22): `--layer-times` of medium at batch 64 and 1024,
  // set by hand to the measured passes; docs/plan.md has the figures and the lab runs it was
  // checked on. Batchnorm's passes follow oneDNN's chunks (batchnorm_passes_s) instead of the
  // AVX2 fit's 2 passes.
  // Above 1: oneDNN skips the taps on zero padding, which the FLOPs count (PassCost::padding_flops).
  // Counting only the FLOPs on data, with this refitted to 0.91, planned the Zen 4 sample worse
  // (docs/plan.md), so the plan keeps the full count.
  m.name = "the AVX-512 fit (Zen 4)";
  m.gemm_efficiency = 1.05;
  m.backward_share = 0.89;
  m.l3_share = 0.41;
  m.batchnorm_in_chunks = true;
  // oneDNN's AVX-512 pooling (dlperf's own is for AVX2's 8-channel blocks), fitted at batch 1024
  // (in DRAM): at batch 64, in L3, it ran at the same rate, so it is predicted faster there.
  m.maxpool_efficiency = m.maxpool_2x2_efficiency = 0.64;
  m.maxpool_backward_efficiency = m.maxpool_2x2_backward_efficiency = 0.84;
  // Set on the Zen 5 (2026-11-24, docs/plan.md): medium's pool3 backward at batch 64 took 0.025
  // ms alone with its buffers warm and 0.073 ms after 96 MB of other traffic (oneDNN alone), 0.089
  // in training. `small` at batch 64 (26 MB of buffers) ran its poolings' backward about DRAM's
  // rate, `medium` at batch 16 (16 MB) and `small` at 16 (7 MB) about L3's: the VM's 32 MB L3,
  // which other tenants share, kept about half its size of a step.
  m.cold_step_l3_share = 0.5;
  // With the above, what the poolings' backward still took beyond the plan grew with images x
  // channel blocks, not bytes: pool3 (7x7 maps, 8 blocks) 2x the plan, pool1 (28x28, 2 blocks)
  // within 10%. Fitted on the 21 rows of docs/plan.md's table (0.07 us of wall time a block on 2
  // threads); checked on runs outside it there.
  m.maxpool_backward_ns_per_block = 140;
  m.dropout_ns_per_element = 0.25;
  m.output_block = 16;  // AVX-512's 16 floats, whatever the datapath's width
  m.linear_weight_short_outputs = 9;
  m.bf16_batchnorm_forward_slowdown = 7, m.bf16_batchnorm_backward_slowdown = 3.6;
  m.bf16_own_batchnorm = true;
  if (lanes_f32 < 16) return m;
  // A full-width AVX-512 datapath (the Zen 5: 16 f32 lanes, twice the Zen 4's FMA rate a cycle)
  // doubles the measured peak, and oneDNN 2.6's convolutions keep up with less of it. `dlperf
  // profile` of medium at batch 64, 256 and 1024 beside `dlperf plan --layers` (2026-11-27,
  // docs/plan.md): the 3x3 convolutions' forward passes took a median 1.135x the Zen 4 fit's
  // time (1.13-1.18 over all three batches, so not a cache effect), their backward passes 1.08x.
  // Intel's AVX-512 cores have 512-bit units too and take this fit: on a 2-vCPU Xeon VM it
  // planned three labs a median 8.4-11.8% off, not refitted there (docs/plan.md says why).
  m.name = "the AVX-512 fit, refitted for a full-width datapath (Zen 5)";
  m.gemm_efficiency = 1.05 / 1.135;
  m.backward_share = 0.89 * 1.135 / 1.08;
  // conv1's forward (one input channel, memory-bound) took 1.35x, 2.2x and 1.9x its plan at
  // batch 64, 256 and 1024: its output's lines are read before they are written, and at 256 its
  // 26 MB output, so doubled, no longer stays in the L3.
  m.output_read_first = true;
  return m;
}

std::string engine_fit_name(const CpuCeilings& c) { return engine_model(c.isa, c.lanes_f32).name; }

StepPrediction predict_step(const nn::Graph& g, const nn::OptimizerConfig& opt, const CpuCeilings& c) {
  return predict_step(g, opt, c, engine_model(c.isa, c.lanes_f32));
}

namespace {

// Whether node i is a bf16 conv or linear layer the engine runs on AMX tiles.
bool runs_on_amx(const nn::Graph& g, size_t i, const CpuCeilings& c) {
  if (c.precision != "bf16" || c.amx_gflops <= 0) return false;
  const nn::Node& n = g.nodes[i];
  if (n.kind == ops::OpKind::conv2d) return c.amx_convolutions && cpu::conv_runs_amx(n.attrs, n.in_dims[0]);
  if (n.kind != ops::OpKind::linear) return false;
  const int64_t batch = n.in_dims[0][0];
  return cpu::linear_runs_amx(n.attrs, {batch, numel(n.in_dims[0]) / batch}, i + 1 == g.nodes.size());
}

// A conv's or linear layer's three passes on AMX tiles (EngineModel::amx_conv_efficiency, fitted
// by scripts/amx_sweep/fit.py, which plans them the same way).
void amx_passes(const nn::Node& n, const ops::PassCost& forward, const ops::PassCost& backward_data, const ops::PassCost& backward_weight,
                double forward_dram, double backward_dram, const CpuCeilings& c, const EngineModel& m, LayerTime& lt) {
  CpuCeilings amx = c;
  amx.peak_gflops = c.amx_gflops;
  const auto& e = n.kind == ops::OpKind::conv2d ? m.amx_conv_efficiency : m.amx_linear_efficiency;
  const auto [kf, kd, kw] = reductions(n);
  lt.amx = true;
  EngineModel tiles = m;
  tiles.output_block = 16;  // a tile's 16 fp32 columns
  auto efficiency = [&](double share, double k, int64_t outputs) {
    return share * k / (k + m.amx_short_reduction) * output_block_share(outputs, tiles);
  };
  const int64_t in = n.in_dims[0][1], out = n.out_dims[1];
  // The passes that run as matrix products (cpu::conv_gemm_passes), timed as oneDNN's matmul:
  // its reduction and output columns are the unfolded input's (K = kh * kw * in) where the
  // convolution's differ, and every tap counts, the padding's too.
  const bool conv = n.kind == ops::OpKind::conv2d;
  const cpu::ConvGemmShape s = conv ? cpu::ConvGemmShape(n.attrs, n.in_dims[0], n.out_dims) : cpu::ConvGemmShape();
  const cpu::ConvGemmPasses products = conv ? cpu::conv_gemm_passes(s) : cpu::ConvGemmPasses{};
  const double K = double(s.cols()), unfolded = double(s.n * s.rows_per_image()) * K;
  const auto& g = m.amx_matmul_efficiency;
  auto product = [&](ops::PassCost p, double share, double k, int64_t outputs, double moved_bytes) {
    p.padding_flops = 0;
    return pass_time(p, efficiency(share, k, outputs), amx, m).s + (s.unfolds() ? stream_s(moved_bytes, {}, c, m) : 0);
  };
  if (products.forward) {
    lt.forward_s += product(forward, g[0], kf, out, 2 * 2 * unfolded);  // bf16 rows written, then read
    lt.bound = "compute";
  } else {
    const PassTime f = pass_time(forward, efficiency(e[0], kf, out), amx, m, forward_dram);
    lt.forward_s += f.s;
    lt.bound = f.compute_bound ? "compute" : "memory";
  }
  if (n.needs_dx)
    lt.backward_s += products.backward_data ? product(backward_data, g[1], double(out), int64_t(K), 2 * 4 * unfolded)  // fp32 rows
                                            : pass_time(backward_data, efficiency(e[1], kd, in), amx, m).s;
  lt.backward_s += products.backward_weights ? product(backward_weight, g[2], kw, int64_t(K), 2 * 2 * unfolded)
                                             : pass_time(backward_weight, efficiency(e[2], kw, out), amx, m, backward_dram).s;
}

// One layer's forward and backward time (graph node i) on the roofline, with the engine's
// efficiencies and the bf16 conversions around it.
LayerTime layer_time(const nn::Graph& g, size_t i, const CpuCeilings& c, const EngineModel& m, const ElementBytes& elem, double cold_bps) {
  const bool bf16 = c.precision == "bf16";
  const nn::Node& n = g.nodes[i];
  LayerTime lt{n.name, std::string(ops::to_string(n.kind)), 0, 0, 0, "memory"};
  const bool has_dx = n.needs_dx;  // no input gradient of the model input (through a flatten too)
  // Bytes read from DRAM: forward, the inputs a batchnorm or Winograd conv wrote past the caches;
  // backward (its first pass), the output's gradient where such a layer reading the output wrote it so.
  double forward_dram = 0, backward_dram = 0;
  for (size_t k = 0; k < n.inputs.size(); ++k)
    if (written_past_the_caches(g, n.inputs[k], c)) forward_dram += 4 * double(numel(n.in_dims[k]));
  // The layer whose output this one writes: its own, or that of the relu fused into it.
  int last = int(i);
  for (int r : g.consumers(int(i)))
    if (relu_fused_on_cpu(g, size_t(r))) last = r;
  for (int r : g.consumers(last)) {  // a batchnorm's or Winograd conv's input gradient: stored as its output
    const nn::Node& reader = g.nodes[size_t(r)];
    const bool stores_dx = reader.kind == ops::OpKind::batchnorm2d || (reader.kind == ops::OpKind::conv2d && reader.needs_dx);
    if (stores_dx && written_past_the_caches(g, r, c)) backward_dram = 4 * double(numel(n.out_dims));
  }
  auto memory_pass = [&](double bytes, double efficiency, double from_dram = 0, double cold = 0) {
    return bytes > 0 ? stream_s(bytes, Sources{from_dram, cold, cold_bps}, c, m) / efficiency + m.call_overhead_s : 0.0;
  };
  // The passes' bytes at the element size they read (bf16 between convolutions in bf16).
  const double in_bytes = elem.input[i];
  const ops::OpCost cost = n.cost_at(in_bytes);
  // A conversion between fp32 and bf16 reads one and writes the other: the input where its
  // producer stored another type (and its gradient back), the logits' gradient, and the weights'
  // bf16 copy every step.
  const double in = double(numel(n.in_dims[0]));
  const double producer_bytes = n.inputs[0] >= 0 ? elem.value[size_t(n.inputs[0])] : 4;
  if (in_bytes != producer_bytes) {
    lt.forward_s += memory_pass((in_bytes + producer_bytes) * in, m.bf16_conversion_efficiency);
    if (has_dx) lt.backward_s += memory_pass((in_bytes + producer_bytes) * in, m.bf16_conversion_efficiency);
  }
  switch (n.kind) {
    case ops::OpKind::conv2d:
    case ops::OpKind::linear: {
      const auto [kf, kd, kw] = reductions(n);
      const int busy = n.kind == ops::OpKind::linear ? linear_forward_threads(n, c) : 0;
      ops::PassCost forward = cost.forward, backward_data = cost.backward_data;
      if (m.output_read_first) {  // the lines of the output (forward) and input gradient (backward) read before written
        forward.bytes += elem.value[i] * double(numel(n.out_dims));
        backward_data.bytes += in_bytes * in;
      }
      if (n.kind == ops::OpKind::conv2d && c.winograd && !bf16 && cpu::winograd_pays(n.attrs, n.in_dims[0])) {
        const WinogradPass w = winograd_pass(n, m);
        lt.winograd = true;
        auto as_winograd = [&](ops::PassCost p) { return p.flops = w.flops, p.padding_flops = 0, p; };
        // Its output transform stores past the caches (written_past_the_caches): no line is read
        // before it is written, so the direct passes' output_read_first bytes are left out.
        const PassTime f = pass_time(as_winograd(cost.forward), w.efficiency, c, m, forward_dram);
        lt.forward_s += f.s;
        lt.bound = f.compute_bound ? "compute" : "memory";
        if (has_dx) lt.backward_s += pass_time(as_winograd(cost.backward_data), w.efficiency, c, m).s;
        lt.backward_s += pass_time(as_winograd(cost.backward_weight), w.efficiency, c, m, backward_dram).s;
        break;
      }
      if (runs_on_amx(g, i, c)) {
        amx_passes(n, forward, backward_data, cost.backward_weight, forward_dram, backward_dram, c, m, lt);
      } else {
        const double blocks = output_block_share(n.out_dims[1], m);  // forward and backward-weights compute whole blocks
        const PassTime f = pass_time(forward, blocks * gemm_efficiency(kf, m), c, m, forward_dram, busy);
        lt.forward_s += f.s;
        lt.bound = f.compute_bound ? "compute" : "memory";
        double weight_share = bf16 ? m.bf16_backward_weight_share : 1;
        if (n.kind == ops::OpKind::linear && m.linear_weight_short_outputs > 0) {
          const double rows = double(n.out_dims[1]) / blocks;  // the outputs, padded to whole blocks
          weight_share *= rows / (rows + m.linear_weight_short_outputs);
        }
        if (has_dx) lt.backward_s += pass_time(backward_data, m.backward_share * gemm_efficiency(kd, m), c, m).s;
        // Backward-weights runs first (backend/cpu/conv2d.cpp, linear.cpp): it reads the gradient from DRAM.
        lt.backward_s +=
            pass_time(cost.backward_weight, blocks * weight_share * m.backward_share * gemm_efficiency(kw, m), c, m, backward_dram).s;
      }
      if (bf16) {
        lt.forward_s += memory_pass(6 * double(numel(n.params[0].dims)), m.bf16_conversion_efficiency);
        if (elem.value[i] == 4) lt.backward_s += memory_pass(6 * double(numel(n.out_dims)), m.bf16_conversion_efficiency);
      }
      break;
    }
    case ops::OpKind::batchnorm2d:
      // EngineModel::bf16_own_batchnorm, where the engine runs that code (not under DLPERF_CPU_BF16_BATCHNORM=onednn)
      if (in_bytes == 2 && m.bf16_own_batchnorm && cpu::bf16_batchnorm_own_code() && n.in_dims[0][1] % 16 == 0) {
        const double bytes = 2 * in;
        lt.forward_s += stream_s(3 * bytes, Sources{forward_dram}, c, m) + m.call_overhead_s;
        lt.backward_s += stream_s(5 * bytes, Sources{backward_dram}, c, m) + m.call_overhead_s;
        break;
      }
      if (m.batchnorm_in_chunks) {
        const PassPair t =
            batchnorm_passes_s(n, in_bytes, written_past_the_caches(g, int(i), c), forward_dram, backward_dram, cold_bps, c, m);
        const bool slow = in_bytes == 2;  // oneDNN's bf16 kernel (EngineModel::bf16_batchnorm_forward_slowdown)
        lt.forward_s += t.forward_s * (slow ? m.bf16_batchnorm_forward_slowdown : 1);
        lt.backward_s += t.backward_s * (slow ? m.bf16_batchnorm_backward_slowdown : 1);
        break;
      }
      // As an efficiency, so that the cache level is the one the tensors fit in.
      lt.forward_s += memory_pass(cost.forward.bytes, 1 / m.batchnorm_passes, forward_dram);
      lt.backward_s += memory_pass(cost.backward_data.bytes, 1 / m.batchnorm_passes, backward_dram);
      break;
    case ops::OpKind::relu:
      if (relu_fused_on_cpu(g, i)) {  // inside the batchnorm or add: no pass of its own
        lt.forward_s = lt.backward_s = 0;
        break;
      }
      lt.forward_s += memory_pass(cost.forward.bytes, 1, forward_dram);
      lt.backward_s += memory_pass(cost.backward_data.bytes, 1, backward_dram);
      break;
    case ops::OpKind::add:
      // One pass each way (backend/cpu/eltwise.cpp): forward reads both inputs and writes their
      // sum, clamped where the relu after it runs inside; backward reads the output's gradient
      // (and then the output, for the relu's mask) and writes both inputs' gradients.
      lt.forward_s += memory_pass(cost.forward.bytes, 1, forward_dram);
      lt.backward_s += memory_pass(cost.backward_data.bytes + (last != int(i) ? in_bytes * in : 0), 1, backward_dram);
      break;
    case ops::OpKind::maxpool2d: {
      const bool two_by_two = ops::pools_2x2_stride_2(n.attrs);
      lt.forward_s += memory_pass(cost.forward.bytes, two_by_two ? m.maxpool_2x2_efficiency : m.maxpool_efficiency, forward_dram);
      // The input gradient it zeroes and writes, and the argmax (a byte an output), were last
      // touched a step ago (EngineModel::cold_step_l3_share).
      const double cold = in_bytes * in + double(numel(n.out_dims));
      lt.backward_s += memory_pass(cost.backward_data.bytes,
                                  two_by_two ? m.maxpool_2x2_backward_efficiency : m.maxpool_backward_efficiency, backward_dram, cold);
      const double blocks = double(n.in_dims[0][0]) * std::ceil(double(n.in_dims[0][1]) / 16);
      lt.backward_s += blocks * m.maxpool_backward_ns_per_block * 1e-9 / std::max(c.threads, 1);
      break;
    }
    case ops::OpKind::dropout: {
      // Own loops (backend/cpu/eltwise.cpp), on one thread up to hw::kParallelMinElements.
      const int64_t elems = numel(n.out_dims);
      const int threads = elems > hw::kParallelMinElements ? std::max(c.threads, 1) : 1;
      const double share = double(threads) / std::max(c.threads, 1);
      lt.forward_s += double(elems) * m.dropout_ns_per_element * 1e-9 / threads + memory_pass(cost.forward.bytes, share, forward_dram);
      lt.backward_s += memory_pass(cost.backward_data.bytes, share, backward_dram);
      break;
    }
    case ops::OpKind::flatten: {  // a reorder to the plain layout, both ways, unless a view
      const double bytes = flatten_is_a_view_on_cpu(g, i) ? 0 : 2 * double(numel(n.out_dims)) * in_bytes;
      lt.forward_s += memory_pass(bytes, 1);
      lt.backward_s += memory_pass(bytes, 1);
      break;
    }
    default:
      lt.forward_s += memory_pass(cost.forward.bytes, 1, forward_dram);
      lt.backward_s += has_dx ? memory_pass(cost.backward_data.bytes, 1, backward_dram) : 0;
      break;
  }
  if (!has_dx && n.kind != ops::OpKind::conv2d && n.kind != ops::OpKind::linear) lt.backward_s = 0;
  // A value several layers read: each reader but the last adds its gradient into the sum so far,
  // reading both and writing one.
  for (size_t k : inputs_summing_gradients(g, i))
    lt.gradient_sum_s += memory_pass(3 * double(numel(n.in_dims[k])) * elem.value[size_t(n.inputs[k])], 1);
  lt.backward_s += lt.gradient_sum_s;
  return lt;
}

// `c` for a layer that runs on one thread (cpu::runs_on_one_thread): one core's share of the
// compute peaks and of each level's bandwidth and of L2, and a call with no team to fork.
std::pair<CpuCeilings, EngineModel> on_one_thread(const CpuCeilings& c, const EngineModel& m) {
  CpuCeilings one = c;
  const double share = 1.0 / std::max(c.threads, 1);
  one.threads = 1;
  for (double* v : {&one.peak_gflops, &one.bf16_measured_gflops, &one.fp32_peak_gflops, &one.amx_gflops, &one.l1_gbps, &one.l2_gbps,
                    &one.l3_gbps, &one.dram_gbps, &one.l2_bytes})
    *v *= share;
  EngineModel single = m;
  single.call_overhead_s = c.one_thread_call_overhead_s > 0 ? c.one_thread_call_overhead_s : m.one_thread_call_s;
  return {one, single};
}

}  // namespace

StepPrediction predict_step(const nn::Graph& g, const nn::OptimizerConfig& opt, const CpuCeilings& c, const EngineModel& fit) {
  EngineModel m = fit;
  if (c.call_overhead_s > 0) m.call_overhead_s = c.call_overhead_s;  // measured beats the fit's figure
  StepPrediction p;
  const ElementBytes elem = engine_element_bytes(g, c.precision);
  const double cold_bps = cold_bytes_per_s(step_footprint_bytes(g, opt, c.precision), c, m);
  const auto [one, single] = on_one_thread(c, m);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const bool one_thread = cpu::runs_on_one_thread(g, i, c.threads);
    LayerTime lt = one_thread ? layer_time(g, i, one, single, elem, cold_bps) : layer_time(g, i, c, m, elem, cold_bps);
    lt.one_thread = one_thread;
    p.forward_s += lt.forward_s;
    p.backward_s += lt.backward_s;
    p.layers.push_back(lt);
  }
  // Where every layer and the optimizer run on one thread (cpu::step_compute_threads), no call of
  // the step forks the team: it is a step on one thread, whose other threads wait idle, and the
  // loader's workers have their cores.
  CpuCeilings step = c;
  step.threads = cpu::step_compute_threads(g, c.threads);
  const double call_s = step.threads < c.threads ? single.call_overhead_s : m.call_overhead_s;
  // The optimizer streams weights, gradients and state once: read all, write weights and state.
  // Each parameter tensor is a loop of its own (nn/optimizer.cpp), on one thread up to
  // hw::kParallelMinElements (at one thread's share of the bandwidth), else on all of them.
  const double element_bytes = 4 * (2 + 2 * optimizer_states(opt) + 1);
  const double bandwidth = bandwidth_for(double(g.param_count()) * element_bytes, c, m);
  p.optimizer_s = call_s;
  for (const nn::Node& n : g.nodes)
    for (const auto& param : n.params) {
      const int64_t elements = numel(param.dims);
      const double share = elements > hw::kParallelMinElements ? 1.0 : 1.0 / std::max(c.threads, 1);
      p.optimizer_s += double(elements) * element_bytes / (bandwidth * share);
    }
  const double fill_ns = c.augment ? m.loader_augmented_ns_per_pixel : m.loader_ns_per_pixel;
  const double fill_s = double(numel(g.input)) * fill_ns * 1e-9, calls_s = m.step_calls * call_s;
  if (workers_have_own_cores(step)) {
    // Workers with cores of their own take turns filling batches while the step computes: it
    // waits for the hand-off, and for the fill only where one worker's turn outlasts the step.
    const double compute_s = p.forward_s + p.backward_s + p.optimizer_s + calls_s + m.loader_handoff_s;
    p.overhead_s = calls_s + m.loader_handoff_s + std::max(0.0, fill_s / c.loader_workers - compute_s);
  } else {
    p.overhead_s = fill_s + calls_s + (c.loader_workers > 0 ? m.loader_handoff_s : 0.0);
  }
  p.step_s = p.forward_s + p.backward_s + p.optimizer_s + p.overhead_s;
  return p;
}

}  // namespace dlperf::plan
