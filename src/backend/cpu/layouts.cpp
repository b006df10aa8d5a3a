// The CPU engine's allocations without allocating: Network's constructor (network.cpp), step by
// step, with each op's footprint() in place of the op. Keep the two in step; the test
// PlanMemory.EngineModelMatchesTheCpuEnginesAllocationsExactly compares them byte for byte.
#include "backend/cpu/layouts.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>

#include "backend/cpu/ops.h"
#include "backend/cpu/small_layers.h"
#include "core/error.h"
#include "hw/cpu_info.h"
#include "plan/memory.h"

namespace dlperf::cpu {

namespace {
// The walk both answers share; `given`, where asked for, gets each node's input layouts.
EngineBuffers walk(const nn::Graph& g, const std::string& precision, std::vector<std::vector<md>>* given) {
  using ops::OpKind;
  if (given != nullptr) given->assign(g.nodes.size(), {});
  const Compute compute = compute_for(precision);
  EngineBuffers b;
  int node = -1;  // the node whose buffers these are
  auto add = [&](MemCategory c, size_t bytes) { b.buffers.push_back({c, double(bytes), node}); };
  std::vector<md> value{plain_md(g.input)};  // value index -> layout; 0 is the model input
  std::vector<int> producer{-1};             // value index -> the node that writes it
  std::vector<int> links{0};                 // value index -> how many layer inputs read it
  std::vector<int> value_of(g.nodes.size(), 0);
  add(MemCategory::activations, value[0].get_size());
  auto new_value = [&](const md& m) {
    value.push_back(m);
    producer.push_back(node);
    links.push_back(0);
    return int(value.size()) - 1;
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const nn::Node& n = g.nodes[i];
    node = int(i);
    if (plan::relu_fused_on_cpu(g, i)) {  // runs inside the batchnorm or add, on its output
      value_of[i] = value_of[size_t(n.inputs[0])];
      continue;
    }
    std::vector<md> in;
    for (int k : n.inputs) in.push_back(value[size_t(k < 0 ? 0 : value_of[size_t(k)])]);
    if (plan::flatten_is_a_view_on_cpu(g, i)) {  // the input's bytes; a gradient of its own on the model input
      const md out = with_type(plain_md(n.out_dims), in[0].data_type());
      if (n.inputs[0] < 0) add(MemCategory::activations, out.get_size());
      value_of[i] = new_value(out);
      continue;
    }
    if (given != nullptr) (*given)[i] = in;
    const std::vector<int> readers = g.consumers(int(i));
    const bool fuse_relu = readers.size() == 1 && plan::relu_fused_on_cpu(g, size_t(readers[0]));
    check_indexable(n);
    Footprint f;
    // Laid out as the engine builds it: a layer small enough for one thread on one (its scratchpad).
    const hw::ScopedThreads threads(runs_on_one_thread(g, i, omp_get_max_threads()) ? 1 : 0);
    try {
      f = footprint(n.kind, n.attrs, in, n.in_dims,
                    {.fuse_relu = fuse_relu, .need_dx = n.needs_dx, .compute = compute, .fp32_output = i + 1 == g.nodes.size()});
    } catch (const dnnl::error& e) {
      throw Error(fmt::format("oneDNN cannot lay out layer '{}' ({}) for input {} in {}: {}", n.name, ops::to_string(n.kind),
                              dims_str(n.in_dims[0]), precision, e.what()));
    }
    for (size_t p : f.params) b.params.push_back({MemCategory::parameters, double(p), node});
    for (const auto& [category, bytes] : f.buffers) add(category, bytes);
    b.scratchpad = std::max(b.scratchpad, double(f.scratchpad));
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const int v = n.inputs[k] < 0 ? 0 : value_of[size_t(n.inputs[k])];
      if (f.inputs[k] != value[size_t(v)]) {  // converted, and its gradient back
        add(MemCategory::activations, f.inputs[k].get_size());
        if (v != 0) add(MemCategory::activations, f.inputs[k].get_size());
      }
      // The model input's gradient, which nothing reads: conv and linear skip it, others write it here.
      if (v == 0 && n.kind != OpKind::conv2d && n.kind != OpKind::linear) add(MemCategory::workspace, f.inputs[k].get_size());
      if (v != 0) ++links[size_t(v)];
    }
    value_of[i] = new_value(f.output);
    add(MemCategory::activations, f.output.get_size());  // the output
    add(MemCategory::activations, f.output.get_size());  // and its gradient
  }
  // Where several inputs read a value, all but the first to run backward sum their gradient into
  // it through a temporary of their own, with oneDNN's binary add.
  for (size_t v = 1; v < value.size(); ++v)
    if (links[v] > 1) {
      node = producer[v];
      for (int k = 1; k < links[v]; ++k) add(MemCategory::activations, value[v].get_size());
      b.scratchpad = std::max(b.scratchpad, double(add_pass(value[v]).scratchpad_desc().get_size()));
    }
  return b;
}
}  // namespace

EngineBuffers engine_buffers(const nn::Graph& g, const std::string& precision) { return walk(g, precision, nullptr); }

std::vector<std::vector<md>> given_input_layouts(const nn::Graph& g, const std::string& precision) {
  std::vector<std::vector<md>> given;
  walk(g, precision, &given);
  return given;
}

}  // namespace dlperf::cpu
