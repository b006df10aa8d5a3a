#include "plan/targets.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "backend/cpu/layouts.h"
#include "core/error.h"
#include "hw/cpu_info.h"
#include "plan/grad_overlap.h"
#include "plan/memory.h"

namespace dlperf::plan {

double ring_allreduce_s(double bytes, double n, double gbps, double alpha_s) {
  if (n <= 1) return 0;
  return 2 * (n - 1) / n * bytes / (gbps * 1e9) + 2 * (n - 1) * alpha_s;
}

double tree_allreduce_s(double bytes, double n, double gbps, double alpha_s) {
  if (n <= 1) return 0;
  return 2 * std::log2(n) * alpha_s + 2 * bytes / (gbps * 1e9);
}

Device host_device(const CpuCeilings& c, double watts) {
  Device d;
  d.id = "cpu";
  d.name = hw::cpu_info().model + " (this machine)";
  d.kind = "cpu";
  d.tflops["fp32"] = c.peak_gflops / 1e3;
  if (cpu::has_bf16_kernels()) d.tflops["bf16"] = with_precision(c, "bf16").peak_gflops / 1e3;  // as dlperf train runs it
  d.memory_gb = hw::usable_memory_bytes() / 1e9;  // as dlperf train counts it
  d.bandwidth_gbps = c.dram_gbps;
  d.tdp_w = watts;
  d.sources = {{"specs", c.source}};
  return d;
}

namespace {

// A CNN pass on a datasheet accelerator that is not a GPU (a TPU): at the roofline, with the
// assumed shares of peak, plus a kernel launch.
double datasheet_pass_s(const ops::PassCost& p, double peak_flops, double bw, double dtype_bytes, const JobSpec& job) {
  if (p.flops == 0 && p.bytes == 0) return 0;
  return std::max(p.flops / (peak_flops * job.gemm_share), p.bytes * dtype_bytes / 4 / (bw * job.bandwidth_share)) + job.launch_s;
}

// The backward pass as a timeline: which layer's passes run, in order, and for how long.
using BackwardPasses = std::vector<std::pair<int, double>>;  // graph node (-1: none), seconds

// When each layer's gradients are done, from the backward pass's start: at the end of its last
// pass. `bytes_per_param`: a gradient's bytes.
std::vector<GradientReady> gradients_ready(const nn::Graph& g, const BackwardPasses& passes, double bytes_per_param) {
  std::vector<double> done(g.nodes.size(), -1);
  double t = 0;
  for (const auto& [node, s] : passes) {
    t += s;
    if (node >= 0) done[size_t(node)] = t;
  }
  std::vector<GradientReady> ready;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (done[i] >= 0 && g.nodes[i].param_count() > 0) ready.push_back({done[i], double(g.nodes[i].param_count()) * bytes_per_param});
  std::stable_sort(ready.begin(), ready.end(), [](const GradientReady& a, const GradientReady& b) { return a.at_s < b.at_s; });
  return ready;
}

double total_s(const BackwardPasses& passes) {
  double t = 0;
  for (const auto& p : passes) t += p.second;
  return t;
}

// cuDNN picks each convolution's workspace at run time; the plan allows this much for them.
constexpr double kAssumedConvWorkspace = 64e6;

double memory_of(const JobSpec& job, const Device& d) {
  if (job.transformer)
    return transformer_memory(*job.transformer, job.micro_batch, job.precision, job.optimizer, job.layout, micro_batches(job)).total();
  const nn::Graph& g = *job.graph;
  nn::OptimizerConfig opt;
  opt.name = job.optimizer;
  if (d.id == "cpu") return engine_memory(g, opt, 1, job.precision).total();
  return gpu_engine_memory(g, job.optimizer, job.precision, job.gpu_layout).total() + kAssumedConvWorkspace;
}

// A target's row for a job dlperf's engine for it refuses (a tensor too big for it to index, say).
std::string cannot_run(const char* engine, const Error& e) { return fmt::format("dlperf's {} engine cannot run it: {}", engine, with_hint(e)); }

// The first change, in order of cost to the user, that makes the job fit on `d`.
std::string what_would_fit(const JobSpec& job, const Device& d) {
  const double cap = d.memory_gb * 1e9;
  if (!job.transformer) {
    check(job.spec != nullptr, "what_would_fit needs the model spec");
    const Dims chw(job.graph->input.begin() + 1, job.graph->input.end());
    const int64_t lo = largest_batch_within(*job.spec, chw, job.graph->classes, job.graph->batch(), cap, [&](const nn::Graph& g) {
      JobSpec j = job;
      j.graph = &g;
      return memory_of(j, d);
    });
    return lo >= 1 ? fmt::format("batch {} per device", lo) : "";
  }
  JobSpec j = job;
  for (int z = job.layout.zero + 1; z <= 3; ++z) {
    j.layout.zero = z;
    if (j.layout.dp > 1 && memory_of(j, d) <= cap) return fmt::format("ZeRO stage {}", z);
  }
  j = job;
  for (const char* ck : {"selective", "full"}) {
    if (j.layout.checkpointing == ck) continue;
    j.layout.checkpointing = ck;
    if (memory_of(j, d) <= cap) return fmt::format("{} activation checkpointing", ck);
  }
  j = job;
  j.layout.checkpointing = "full";
  j.layout.zero = 3;
  for (int64_t mb = job.micro_batch; mb >= 1; mb /= 2) {
    j.micro_batch = mb;
    for (int64_t dp = std::max<int64_t>(job.layout.dp, 1); dp <= (int64_t(1) << 20); dp *= 2) {
      j.layout.dp = dp;
      if (memory_of(j, d) <= cap)
        return fmt::format("ZeRO-3, full checkpointing, micro-batch {}, data-parallel {} ({} devices)", mb, dp, dp * j.layout.tp * j.layout.pp);
    }
  }
  return "";
}

}  // namespace

double micro_batches(const JobSpec& job) {
  return std::max(1.0, double(job.global_batch) / (double(job.layout.dp) * double(job.micro_batch)));
}

double peak_flops(const Device& d, const std::string& precision) {
  const double peak = d.peak_tflops(precision) * 1e12;
  return peak == 0 && precision == "tf32" && d.id != "cpu" ? d.peak_tflops("fp32") * 1e12 : peak;
}

std::string gpu_kernels_precision(const Device& d, const std::string& precision) {
  return precision == "tf32" && d.peak_tflops("tf32") == 0 ? "fp32" : precision;
}

std::vector<GpuPassOn> gpu_passes_on(const JobSpec& job, const Device& d) {
  const std::string kernels = gpu_kernels_precision(d, job.precision);
  const double peak = peak_flops(d, job.precision), bw = d.bandwidth_gbps * 1e9;
  std::vector<GpuPassOn> out;
  for (const GpuPass& p : gpu_step_passes(*job.graph, kernels, job.gpu_layout)) out.push_back({p, gpu_pass_time(p, kernels, peak, bw)});
  return out;
}

TargetEstimate estimate(const JobSpec& job, const Device& d, double grid, double pue) {
  TargetEstimate e;
  e.id = d.id;
  e.name = d.name;
  const Layout& l = job.layout;
  e.devices = double(l.dp) * double(l.tp) * double(l.pp);  // in doubles: --dp is bounded only by the batch
  e.capacity = d.memory_gb * 1e9;
  // tf32 runs on fp32 data where the hardware has no tf32 mode (dlperf's CPU engine trains fp32,
  // and bf16 where oneDNN has bf16 kernels).
  const double peak = peak_flops(d, job.precision);
  if (peak == 0 && d.id == "cpu") {
    e.unsupported = fmt::format("dlperf's CPU engine trains fp32{}, not {}", d.peak_tflops("bf16") > 0 ? " and bf16" : "", job.precision);
    return e;
  }
  if (peak == 0) {
    std::string has;
    for (const auto& [precision, tflops] : d.tflops) has += (has.empty() ? "" : ", ") + precision;
    e.unsupported = fmt::format("no {} peak in the catalog{}", job.precision, has.empty() ? "" : " (it lists " + has + ")");
    return e;
  }
  const StateBytes sb = state_bytes_per_param(job.precision, job.optimizer);
  const double dtype = (job.precision == "bf16" || job.precision == "fp16") ? 2 : 4;
  // Inside a node, devices talk over its interconnect at the all-reduce bus bandwidth NCCL was
  // measured at there (catalog; nccl-tests defines bus bandwidth so that it reads as one link's),
  // across nodes over the network, no faster than a device's own link (a T4's PCIe). A machine
  // without an interconnect (this CPU) is a node of its own, on the network.
  const auto link_gbps = [&](bool in_one_node) {
    if (d.interconnect_gbps <= 0) return job.network_gbps;
    return in_one_node ? d.node_busbw_gbps() : std::min(job.network_gbps, d.interconnect_gbps);
  };
  // A collective among n devices. NCCL picks ring or tree by size; so does the plan: whichever
  // the alpha-beta model says is faster.
  const auto allreduce = [&](double bytes, double n, bool in_one_node) {
    const double link = link_gbps(in_one_node);
    const double ring = ring_allreduce_s(bytes, n, link, job.alpha_s), tree = tree_allreduce_s(bytes, n, link, job.alpha_s);
    return std::pair{std::min(ring, tree), ring <= tree ? "ring" : "tree"};
  };
  double grad_bytes = 0, model_flops = 0;  // model_flops: a Transformer's a step, recomputation not counted
  double weight_bytes = 0;                 // a device's weights, which ZeRO gathers; 0 for a CNN (never sharded)
  // The data-parallel reduction's overlap with the backward pass (plan/grad_overlap.h): when each
  // gradient is done, in buckets of which size.
  std::vector<GradientReady> ready;
  double backward_s = 0;
  BucketRule buckets = ddp_buckets();
  if (job.transformer) {
    const TransformerSpec& t = *job.transformer;
    const double micro_steps = micro_batches(job);
    const DeviceMemory m = transformer_memory(t, job.micro_batch, job.precision, job.optimizer, l, micro_steps);
    e.memory = m.total();
    model_flops = transformer_train_flops_per_token(t) * double(job.global_batch) * double(t.seq);
    const double flops = model_flops * (1 + recompute_overhead(t, l.checkpointing)) / e.devices;
    const double bubble = pipeline_bubble(l, micro_steps);  // 1F1B's, interleaved or not
    e.compute_s = flops / (peak * job.gemm_share) * (1 + bubble);
    // And at least its kernels' launches, launch_s each: counted from Megatron's GPT layer, about
    // 10 forward (two layernorms; the QKV, attention-output, fc1 and fc2 GEMMs; attention; the
    // bias-gelu; two bias-dropout-adds) and twice that backward, a layer a micro-step. It binds
    // only at toy sizes (a 1-layer model of hidden 1 planned a step of 0.00 us): GPT-2 small's
    // layer at micro-batch 8 is 0.6 ms of GEMMs on an H100 against 0.15 ms of launches.
    constexpr double kKernelsPerLayer = 30;
    e.compute_s = std::max(e.compute_s, micro_steps * (1 + bubble) * double(t.layers) / double(l.pp) * kKernelsPerLayer * job.launch_s);
    // Tensor parallelism (Megatron's): each layer's attention and MLP blocks end in an all-reduce
    // of the micro-batch's activations over the tp devices, two forward and two backward, and two
    // more where full checkpointing reruns the forward (Narayanan et al. 2021; sequence
    // parallelism makes each a reduce-scatter and an all-gather of the same bytes). They sit in
    // every micro-step's critical path, the bubble's included, and are not overlapped.
    if (l.tp > 1) {
      const double bytes = double(t.seq) * double(job.micro_batch) * double(t.hidden) * dtype;
      const double per_layer = l.checkpointing == "full" ? 6 : 4;
      const double layers_per_stage = double(t.layers) / double(l.pp);
      // Megatron puts tp innermost in its rank order: groups of tp consecutive ranks, each inside
      // a node only where tp divides the node's devices (tp 6 on nodes of 8 puts ranks 6-11, the
      // second group, across two nodes, and every step waits for the slowest group).
      const bool in_one_node = job.node_size % l.tp == 0;
      e.tp_comm_s = allreduce(bytes, double(l.tp), in_one_node).first * per_layer * layers_per_stage * micro_steps * (1 + bubble);
    }
    // Pipeline parallelism: each micro-batch's activations go to the next stage and their
    // gradients come back, once per chunk a device holds (vp), a tp-th of the tensor from each tp
    // rank (Megatron scatters it over them). Megatron's 1F1B waits for these sends (only the
    // interleaved schedule can overlap them, --overlap-p2p-communication): every micro-step's
    // critical path, the bubble's included. Pipeline neighbours are tp x dp ranks apart in
    // Megatron's rank order (tp innermost, pp outermost), so a job over more than one node sends
    // over the network.
    if (l.pp > 1) {
      const double bytes = double(t.seq) * double(job.micro_batch) * double(t.hidden) * dtype / double(l.tp);
      const double send_s = bytes / (link_gbps(e.devices <= job.node_size) * 1e9) + job.alpha_s;
      e.pp_comm_s = 2 * double(l.vp) * send_s * micro_steps * (1 + bubble);
    }
    grad_bytes = transformer_params(t) / double(l.tp * l.pp) * sb.gradients;
    weight_bytes = transformer_params(t) / double(l.tp * l.pp) * sb.weights;
    // Megatron reduces the gradients during the last micro-batch's backward pass (the others'
    // only accumulate), in the backward's share of a micro-step (2/3 of the model's FLOPs, plus
    // what is recomputed). Its layers finish one after another, each its four weight matrices in
    // the order backward reaches them, fc2, fc1, the attention's projection and QKV (4, 4, 1 and 3
    // of its 12 h^2 weights), in time with their GEMMs; the embeddings, biases and norms are
    // spread over them. At most 1024 layers of that: a size from a typo (10^18 layers) plans in a
    // moment, and buckets fill to within a 4096th of a device's gradients alike.
    if (job.overlap_grad_reduce && l.dp > 1) {
      const double r = recompute_overhead(t, l.checkpointing);
      backward_s = flops / (peak * job.gemm_share) / micro_steps * (2.0 / 3 + r) / (1 + r);
      const int64_t layers = std::clamp<int64_t>(t.layers / l.pp, 1, 1024);
      double done = 0;
      for (int64_t k = 0; k < layers; ++k)
        for (const double twelfths : {4.0, 4.0, 1.0, 3.0}) {
          done += twelfths / 12 / double(layers);
          ready.push_back({backward_s * done, grad_bytes * twelfths / 12 / double(layers)});
        }
      buckets = megatron_buckets(double(l.dp), sb.gradients);
    }
  } else {
    const nn::Graph& g = *job.graph;
    nn::OptimizerConfig opt;
    opt.name = job.optimizer;
    // A job dlperf's own engine refuses is planned for the targets whose engine takes it, and
    // marked unsupported on the others.
    try {
      if (d.id == "cpu")
        e.memory = engine_memory(g, opt, 1, job.precision).total();  // lays it out, as oneDNN would or would not
      else
        check_gpu_engine_indexes(g);
    } catch (const Error& x) {
      e.unsupported = cannot_run(d.id == "cpu" ? "CPU" : "GPU", x);
      return e;
    }
    BackwardPasses backward;  // in the order the backward pass runs them
    if (d.id == "cpu") {  // our own engine, byte for byte and with its measured ceilings
      // On the threads the plan runs with (plan --threads; all cores by default).
      const StepPrediction p = predict_step(g, opt, with_precision(host_ceilings(omp_get_max_threads()), job.precision));
      e.compute_s = p.step_s;
      for (size_t i = g.nodes.size(); i-- > 0;) backward.emplace_back(int(i), p.layers[i].backward_s);
    } else {
      // dlperf's GPU executor byte for byte, plus an assumed allowance for cuDNN's workspaces.
      e.memory = memory_of(job, d);
      // On a GPU, its kernels pass by pass on the roofline fitted to them (plan/gpu_step.h); on
      // other accelerators, which dlperf's engine does not run on, the datasheet assumptions.
      if (d.kind == "gpu") {
        for (const GpuPassOn& p : gpu_passes_on(job, d)) {
          e.compute_s += p.time.total();
          // A layer's parameter gradients are done when its backward-weight pass (a batchnorm's
          // one backward pass) is: its backward-data and gradient sums come after.
          const bool weights = p.pass.phase == "backward-weight" || p.pass.phase == "backward";
          if (p.pass.phase != "forward" && p.pass.phase != "loss" && p.pass.phase != "optimizer")
            backward.emplace_back(weights ? p.pass.node : -1, p.time.total());
        }
      } else {
        const double bw = d.bandwidth_gbps * 1e9;
        for (const auto& n : g.nodes) e.compute_s += datasheet_pass_s(n.cost.forward, peak, bw, dtype, job);
        for (size_t i = g.nodes.size(); i-- > 0;) {
          const ops::OpCost& c = g.nodes[i].cost;
          backward.emplace_back(int(i), datasheet_pass_s(c.backward_data, peak, bw, dtype, job) +
                                            datasheet_pass_s(c.backward_weight, peak, bw, dtype, job));
        }
        e.compute_s += total_s(backward);
      }
    }
    // A CNN's gradients are fp32 in every precision: mixed precision computes in bf16 or fp16
    // but keeps fp32 parameters, so their gradients (PyTorch's autocast, which DDP all-reduces
    // as they are; dlperf's engine, plan/memory.cpp).
    constexpr double kCnnGradientBytes = 4;
    grad_bytes = double(g.param_count()) * kCnnGradientBytes;
    ready = gradients_ready(g, backward, kCnnGradientBytes);
    backward_s = total_s(backward);
  }
  // Data parallelism's collectives, inside a node where all the job's devices are in one, else
  // over the network. Without ZeRO, an all-reduce of the gradients. With ZeRO, a reduce-scatter of
  // them (half an all-reduce: each device keeps its shard) and all-gathers of the weights (half
  // an all-reduce of their bytes each): after the optimizer's step, and with ZeRO-3 once more
  // before the backward pass (1.5x the all-reduce's traffic where gradients and weights are
  // alike; a bf16 run's gradients are fp32, its weights bf16). Overlapped, the gradients go out
  // in buckets during the backward pass, and the step waits for what is left when it ends; the
  // gathers are not overlapped.
  if (job.bucket_bytes > 0) {  // the user's bucket size; DDP keeps its first of 1 MiB, or less
    buckets.bytes = job.bucket_bytes;
    buckets.first_bytes = job.transformer ? job.bucket_bytes : std::min(buckets.first_bytes, job.bucket_bytes);
  }
  if (l.dp > 1) {
    const bool in_one_node = e.devices <= job.node_size;
    const auto all_reduce_s = [&](double bytes) { return allreduce(bytes, double(l.dp), in_one_node).first; };
    const double reduce_share = l.zero >= 1 ? 0.5 : 1;                 // of an all-reduce of the gradients
    const double gathers = l.zero >= 3 ? 2 : l.zero >= 1 ? 1 : 0;     // of the weights
    const double gather_s = gathers * 0.5 * (weight_bytes > 0 ? all_reduce_s(weight_bytes) : 0);
    if (job.overlap_grad_reduce) {
      const auto reduce = overlap_reduction(ready, backward_s, buckets, [&](double bytes) { return reduce_share * all_reduce_s(bytes); });
      e.dp_comm_s = reduce.reduce_s + gather_s;
      e.hidden_comm_s = reduce.hidden_s;
      e.gradient_buckets = reduce.buckets;
      e.allreduce = allreduce(std::min(grad_bytes, buckets.bytes), double(l.dp), in_one_node).second;  // a full bucket's
    } else {
      e.dp_comm_s = reduce_share * all_reduce_s(grad_bytes) + gather_s;
      e.gradient_buckets = 1;
      e.allreduce = allreduce(grad_bytes, double(l.dp), in_one_node).second;
    }
  }
  e.comm_s = e.dp_comm_s + e.tp_comm_s + e.pp_comm_s;
  e.step_s = e.compute_s + e.comm_s - e.hidden_comm_s;
  e.efficiency = e.compute_s / e.step_s;
  if (job.transformer) e.mfu = model_flops / (e.step_s * e.devices * peak);
  e.fits = e.memory <= e.capacity;
  e.job_s = e.step_s * job.steps;
  const double hours = e.job_s / 3600;
  if (d.price_per_hour >= 0) e.cost = d.price_per_hour * hours * e.devices;
  if (d.tdp_w > 0) {
    e.energy_kwh = d.tdp_w * e.devices * hours * pue / 1000;  // at TDP: an upper bound
    if (grid >= 0) e.co2_kg = e.energy_kwh * grid / 1000;  // 0 for a carbon-free supply
  }
  if (!e.fits) e.what_fits = what_would_fit(job, d);
  return e;
}

}  // namespace dlperf::plan
