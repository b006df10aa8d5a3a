#include "plan/gpu_step.h"

#include <algorithm>

#include "plan/memory.h"

namespace dlperf::plan {

std::vector<int> nodes_run_by(const nn::Graph& g, int n, bool gpu) {
  std::vector<int> out = {n};
  for (size_t i = size_t(n) + 1; i < g.nodes.size(); ++i)
    if (g.nodes[i].inputs[0] == n &&
        (relu_fused_into_batchnorm(g, i) || relu_fused_into_add(g, i) || (gpu && relu_fused_into_linear(g, i))))
      out.push_back(int(i));
  return out;
}

ops::PassCost pass_cost(const nn::Graph& g, int n, Pass p, bool gpu, cuda::Layout gpu_layout, const std::vector<double>& elem_bytes) {
  ops::PassCost c;
  for (int i : nodes_run_by(g, n, gpu)) {
    const ops::OpCost k = g.nodes[size_t(i)].cost_at(elem_bytes[size_t(i)]);
    c += p == Pass::forward ? k.forward : p == Pass::backward_weight ? k.backward_weight : k.backward_data;
  }
  const nn::Node& node = g.nodes[size_t(n)];
  if (gpu && p == Pass::backward_data && conv_adds_to_input_gradient_on_gpu(g, size_t(n), gpu_layout))
    c.bytes += double(numel(node.in_dims[0])) * elem_bytes[size_t(n)];
  // The cost model counts a flatten as the view it is on the CPU; a GPU flatten that is not one
  // transposes the maps (backend/cuda/network_step.cpp): 12.5 us a pass for `large` at batch 1024 in
  // bf16 on an H100 (2026-11-28), which the profile's table had at 0 bytes.
  if (gpu && node.kind == ops::OpKind::flatten && !view_on_gpu(g, size_t(n), gpu_layout) &&
      (p == Pass::forward || (p == Pass::backward_data && node.needs_dx)))
    c.bytes += 2 * double(numel(node.in_dims[0])) * elem_bytes[size_t(n)];
  return c;
}

double optimizer_step_bytes(const nn::Graph& g) { return double(g.param_count()) * 4 * 5; }

ops::PassCost loss_cost(const nn::Graph& g) {
  const ops::OpCost c = ops::cost(ops::OpKind::softmax_cross_entropy, {}, {{g.batch(), g.classes}}, 4);
  return {c.forward.flops + c.backward_data.flops, c.forward.bytes + c.backward_data.bytes};
}

namespace {

bool on_tensor_cores(const std::string& precision) { return precision != "fp32"; }

GpuPassKind kind_of(ops::OpKind k) {
  return k == ops::OpKind::conv2d ? GpuPassKind::conv : k == ops::OpKind::linear ? GpuPassKind::gemm : GpuPassKind::streaming;
}

bool has_cost(const ops::PassCost& c) { return c.flops > 0 || c.bytes > 0; }

}  // namespace

std::vector<GpuPass> gpu_step_passes(const nn::Graph& g, const std::string& precision, const std::string& layout) {
  const cuda::Layout stored = cuda::resolve_layout(layout, precision);
  // The GPU engine keeps every activation in bf16 or fp16 in those precisions (as the profile counts it).
  const double e = precision == "bf16" || precision == "fp16" ? 2 : 4;
  const std::vector<double> elem(g.nodes.size(), e);
  std::vector<GpuPass> out;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!view_on_gpu(g, i, stored)) out.push_back({int(i), "forward", kind_of(g.nodes[i].kind), pass_cost(g, int(i), Pass::forward, true, stored, elem)});
  out.push_back({-1, "loss", GpuPassKind::streaming, loss_cost(g)});
  // Backward walks the layers in reverse as Network::backward does: a value's first gradient
  // writer writes it, later ones add theirs to it in a gradient-sum pass (a convolution in its
  // backward-data pass). A view's gradient is its input's buffer, so what has been written is
  // kept per buffer (-1: the model input's, which has none); the logits' came from the loss.
  std::vector<int> buffer(g.nodes.size());
  for (size_t j = 0; j < g.nodes.size(); ++j) {
    const int in = g.nodes[j].inputs[0];
    buffer[j] = !view_on_gpu(g, j, stored) ? int(j) : in < 0 ? -1 : buffer[size_t(in)];
  }
  std::vector<bool> written(g.nodes.size(), false);
  if (buffer.back() >= 0) written[size_t(buffer.back())] = true;
  auto has_gradient = [&](int v) { return v >= 0 && buffer[size_t(v)] >= 0; };
  auto value_bytes = [&](int v) { return double(numel(g.nodes[size_t(v)].out_dims)) * e; };
  auto sum_into = [&](int n, int v) { out.push_back({n, "gradient-sum", GpuPassKind::streaming, {0, 3 * value_bytes(v)}}); };
  for (size_t r = g.nodes.size(); r-- > 0;) {
    if (view_on_gpu(g, r, stored)) continue;
    const int n = int(r);
    const nn::Node& node = g.nodes[r];
    if (node.kind == ops::OpKind::add) {  // each input's gradient is the output's: copied, or added where one was written
      std::vector<int> to;
      for (const int v : node.inputs)
        if (has_gradient(v)) to.push_back(v);
      const bool relu_after = nodes_run_by(g, n, true).size() > 1;
      if (relu_after) {  // the relu's mask first, handed to both inputs in the same pass unless they share a buffer (x + x)
        const bool in_one_pass = !to.empty() && (to.size() == 1 || buffer[size_t(to[0])] != buffer[size_t(to[1])]);
        ops::PassCost mask = pass_cost(g, n, Pass::backward_data, true, stored, elem);
        if (!in_one_pass) mask = g.nodes[size_t(nodes_run_by(g, n, true)[1])].cost_at(e).backward_data;  // the relu's alone
        out.push_back({n, "backward", GpuPassKind::streaming, mask});
        if (in_one_pass) {
          for (const int v : to) written[size_t(buffer[size_t(v)])] = true;
          continue;
        }
      }
      for (const int v : to) {
        if (written[size_t(buffer[size_t(v)])]) {
          sum_into(n, v);
        } else {
          out.push_back({n, "backward", GpuPassKind::streaming, {0, 2 * value_bytes(v)}});  // a copy
          written[size_t(buffer[size_t(v)])] = true;
        }
      }
      continue;
    }
    const int in = node.inputs[0];
    const bool dx = node.needs_dx && has_gradient(in);
    const GpuPassKind kind = kind_of(node.kind);
    if (kind != GpuPassKind::streaming) {  // cuDNN's or cuBLASLt's two passes
      const ops::PassCost bw = pass_cost(g, n, Pass::backward_weight, true, stored, elem);
      if (has_cost(bw)) out.push_back({n, "backward-weight", kind, bw});
      if (dx) out.push_back({n, "backward-data", kind, pass_cost(g, n, Pass::backward_data, true, stored, elem)});
    } else {
      ops::PassCost b = pass_cost(g, n, Pass::backward_data, true, stored, elem);
      b += pass_cost(g, n, Pass::backward_weight, true, stored, elem);
      out.push_back({n, "backward", kind, b});
    }
    if (!dx) continue;
    // A convolution adds into a gradient written already itself (conv_adds_to_input_gradient_on_gpu); others in a pass of their own.
    if (written[size_t(buffer[size_t(in)])] && node.kind != ops::OpKind::conv2d) sum_into(n, in);
    written[size_t(buffer[size_t(in)])] = true;
  }
  out.push_back({-1, "optimizer", GpuPassKind::streaming, {0, optimizer_step_bytes(g)}});
  return out;
}

std::string gpu_layer_name(const nn::Graph& g, const GpuPass& p) {
  if (p.node < 0) return p.phase;
  std::string name;
  for (const int i : nodes_run_by(g, p.node, true)) name += (name.empty() ? "" : "+") + g.nodes[size_t(i)].name;
  return name;
}

GpuPassTime gpu_pass_time(const GpuPass& p, const std::string& precision, double peak_flops, double bandwidth, const GpuEngineModel& m) {
  const bool tc = on_tensor_cores(precision);
  double share = 0;
  GpuPassTime t;
  t.fill = m.streaming_fill_s;
  if (p.kind == GpuPassKind::conv)
    share = tc ? m.conv_share_tensor_cores : m.conv_share_fp32, t.fill = tc ? m.conv_fill_tensor_cores_s : m.conv_fill_fp32_s;
  if (p.kind == GpuPassKind::gemm) share = tc ? m.gemm_share_tensor_cores : m.gemm_share_fp32, t.fill = m.gemm_fill_s;
  t.compute = share > 0 ? p.cost.flops / (share * peak_flops) : 0;
  t.traffic = p.cost.bytes / (m.bandwidth_share * bandwidth);
  return t;
}

}  // namespace dlperf::plan
