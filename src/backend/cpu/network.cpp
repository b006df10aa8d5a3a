#include "backend/cpu/network.h"

#include <fmt/format.h>

#include <omp.h>

#include <cmath>

#include "backend/cpu/small_layers.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/timer.h"
#include "hw/cpu_info.h"
#include "plan/memory.h"

namespace dlperf::cpu {

using ops::OpKind;

// One input of a step: which value it reads, and how its layout and gradient are handled.
struct Network::Link {
  int value = 0;
  bool convert = false;       // the op wants another layout: reorder in, reorder the diff out
  Mem converted, diff_converted;
  bool accumulate = false;    // another consumer already wrote this value's diff
  Mem accum_tmp;
  Prim add_into;              // accumulate: diff += accum_tmp, in the diff's type (fp32 or bf16)
  Mem dummy_diff;             // for ops on the model input that always write a diff
};

struct Network::Step {
  int node = 0;
  std::unique_ptr<Op> op;
  std::vector<Link> links;
  int out = 0;
  bool fused_away = false;
  bool view = false;  // a flatten that shares its input's bytes: nothing to run
  bool one_thread = false;  // too small to share between the threads (small_layers.h): built and run on one
  std::string name;
};

Network::~Network() = default;

Network::Network(const nn::Graph& graph, uint64_t seed, bool fuse, const std::string& precision)
    : graph_(graph), compute_(compute_for(precision)) {
  const auto& nodes = graph_.nodes;
  input_ = Mem(plain_md(graph_.input), MemCategory::activations);
  act_.push_back(input_);
  diff_.emplace_back();  // no gradient for the model input
  value_of_.assign(nodes.size(), 0);
  steps_.resize(nodes.size());
  times_.assign(nodes.size(), {});
  for (size_t i = 0; i < nodes.size(); ++i) {
    const nn::Node& n = nodes[i];
    Step& s = steps_[i];
    s.node = int(i);
    s.name = n.name;
    // A relu whose only input is a batchnorm or a residual add that feeds nothing else runs
    // inside it (the rule the GPU executor, the profiler and the memory planner share).
    if (fuse && plan::relu_fused_on_cpu(graph_, i) && steps_[size_t(n.inputs[0])].op) {
      s.fused_away = true;
      value_of_[i] = value_of_[size_t(n.inputs[0])];
      steps_[size_t(n.inputs[0])].name += "+" + n.name;
      continue;
    }
    std::vector<md> in_mds;
    for (int in : n.inputs) in_mds.push_back(act_[size_t(in < 0 ? 0 : value_of_[size_t(in)])].desc());
    // A flatten of a plain value is the same bytes seen as [N, features] (PyTorch's is a view
    // too): it shares the value, and its gradient where the value has one.
    if (plan::flatten_is_a_view_on_cpu(graph_, i)) {
      const int from = n.inputs[0] < 0 ? 0 : value_of_[size_t(n.inputs[0])];
      const md out = with_type(plain_md(n.out_dims), in_mds[0].data_type());
      check(in_mds[0] == with_type(plain_md(n.in_dims[0]), in_mds[0].data_type()), "flatten: a view needs a plain input");
      s.view = true;
      s.out = int(act_.size());
      value_of_[i] = s.out;
      act_.push_back(act_[size_t(from)].alias(out));
      diff_.push_back(from == 0 ? Mem(out, MemCategory::activations) : diff_[size_t(from)].alias(out));
      continue;
    }
    const std::vector<int> readers = graph_.consumers(int(i));
    const bool fuse_relu = fuse && readers.size() == 1 && plan::relu_fused_on_cpu(graph_, size_t(readers[0]));
    check_indexable(n);
    // oneDNN sizes a primitive's work split and scratchpad by the threads when it is built.
    s.one_thread = runs_on_one_thread(graph_, i, omp_get_max_threads());
    const hw::ScopedThreads threads(s.one_thread ? 1 : 0);
    try {
      s.op = make_op(n.kind, n.attrs, in_mds, n.in_dims, n.name,
                     {.fuse_relu = fuse_relu,
                      .seed = hash_coords(seed, 0xD20, i),
                      .need_dx = n.needs_dx,
                      .compute = compute_,
                      .fp32_output = i + 1 == nodes.size()});  // the logits
    } catch (const dnnl::error& e) {
      throw Error(fmt::format("oneDNN cannot build layer '{}' ({}) for input {}{}: {}", n.name, ops::to_string(n.kind),
                              dims_str(n.in_dims[0]), bf16() ? " in bf16" : "", e.what()));
    }
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      Link l;
      l.value = n.inputs[k] < 0 ? 0 : value_of_[size_t(n.inputs[k])];
      const md want = s.op->input_md(int(k));
      if (want != act_[size_t(l.value)].desc()) {
        l.convert = true;
        l.converted = Mem(want, MemCategory::activations);
        if (l.value != 0) l.diff_converted = Mem(want, MemCategory::activations);
      }
      if (l.value == 0 && n.kind != OpKind::conv2d && n.kind != OpKind::linear)
        l.dummy_diff = Mem(want, MemCategory::workspace);
      s.links.push_back(std::move(l));
    }
    s.out = int(act_.size());
    value_of_[i] = s.out;
    act_.emplace_back(s.op->output_md(), MemCategory::activations);
    diff_.emplace_back(s.op->output_md(), MemCategory::activations);
  }
  check(graph_.nodes.back().out_dims.size() == 2 &&
            act_[size_t(value_of_.back())].desc() == plain_md(graph_.nodes.back().out_dims),
        "the model's last layer must produce plain [batch, classes] logits");
  // Backward runs steps in reverse; the first writer of a value's diff overwrites it, later
  // writers accumulate into it.
  std::vector<bool> written(act_.size(), false);
  for (auto it = steps_.rbegin(); it != steps_.rend(); ++it) {
    if (it->fused_away || it->view) continue;
    for (Link& l : it->links) {
      if (l.value == 0) continue;
      l.accumulate = written[size_t(l.value)];
      written[size_t(l.value)] = true;
      if (l.accumulate) {
        const md& d = act_[size_t(l.value)].desc();
        l.accum_tmp = Mem(d, MemCategory::activations);
        l.add_into = Prim::of<dnnl::binary>(add_pass(d));
        l.add_into.phase = profile::Phase::grad_sum;
      }
    }
  }
  init_params(seed);
}

void Network::init_params(uint64_t seed) {
  int index = 0;
  for (Param* p : params()) {
    std::vector<float> v(size_t(numel(p->dims)));
    Rng rng(hash_coords(seed, 0x1417, uint64_t(index++)));
    // PyTorch's default: weights and biases uniform in +-1/sqrt(fan_in) (kaiming_uniform with
    // a = sqrt(5)); batchnorm weight 1, bias 0.
    const float bound = 1.0f / std::sqrt(float(p->fan_in));
    for (float& x : v)
      x = p->init == Init::ones ? 1.f : p->init == Init::zeros ? 0.f : (2 * rng.uniform() - 1) * bound;
    from_plain(p->layout, p->dims, v.data(), p->value);
  }
}

const float* Network::logits() const { return act_[size_t(value_of_.back())].f32(); }

void Network::forward(bool training) {
  std::vector<memory> ins;
  for (Step& s : steps_) {
    if (s.fused_away || s.view) continue;
    const double t0 = timing_ ? now_s() : 0;
    const profile::Scope scope(s.name, ops::to_string(graph_.nodes[size_t(s.node)].kind), profile::Phase::forward, s.node);
    const hw::ScopedThreads threads(s.one_thread ? 1 : 0);
    ins.clear();
    for (Link& l : s.links) {
      if (l.convert) {
        reorder(act_[size_t(l.value)].mem, l.converted.mem);
        ins.push_back(l.converted.mem);
      } else {
        ins.push_back(act_[size_t(l.value)].mem);
      }
    }
    s.op->forward(ins, act_[size_t(s.out)].mem, training);
    if (timing_) {
      times_[size_t(s.node)].forward_s += now_s() - t0;
      times_[size_t(s.node)].forward_calls++;
    }
  }
}

LossResult Network::loss(const int32_t* labels, int64_t valid, double smoothing, bool grad) {
  return softmax_cross_entropy(logits(), labels, batch(), graph_.classes, valid, smoothing,
                               grad ? diff_[size_t(value_of_.back())].f32() : nullptr);
}

void Network::backward() {
  std::vector<memory> ins, dins;
  for (auto it = steps_.rbegin(); it != steps_.rend(); ++it) {
    Step& s = *it;
    if (s.fused_away || s.view) continue;
    const double t0 = timing_ ? now_s() : 0;
    const profile::Scope scope(s.name, ops::to_string(graph_.nodes[size_t(s.node)].kind), profile::Phase::backward, s.node);
    const hw::ScopedThreads threads(s.one_thread ? 1 : 0);
    ins.clear();
    dins.clear();
    const nn::Node& n = graph_.nodes[size_t(s.node)];
    const bool skips_dx = !n.needs_dx && (n.kind == OpKind::conv2d || n.kind == OpKind::linear);
    for (Link& l : s.links) {
      ins.push_back(l.convert ? l.converted.mem : act_[size_t(l.value)].mem);
      if (skips_dx) dins.push_back(memory());  // reads the model input through a flatten: no gradient wanted
      else if (l.value == 0) dins.push_back(l.dummy_diff.empty() ? memory() : l.dummy_diff.mem);
      else if (l.convert) dins.push_back(l.diff_converted.mem);
      else dins.push_back(l.accumulate ? l.accum_tmp.mem : diff_[size_t(l.value)].mem);
    }
    s.op->backward(ins, act_[size_t(s.out)].mem, diff_[size_t(s.out)].mem, dins);
    for (Link& l : s.links) {
      if (l.value == 0 || skips_dx) continue;
      Mem& target = diff_[size_t(l.value)];
      if (l.convert) reorder(l.diff_converted.mem, l.accumulate ? l.accum_tmp.mem : target.mem);
      if (l.accumulate)
        run(l.add_into, {{DNNL_ARG_SRC_0, target.mem}, {DNNL_ARG_SRC_1, l.accum_tmp.mem}, {DNNL_ARG_DST, target.mem}});
    }
    if (timing_) {
      times_[size_t(s.node)].backward_s += now_s() - t0;
      times_[size_t(s.node)].backward_calls++;
    }
  }
}

std::vector<Param*> Network::params() {
  std::vector<Param*> out;
  for (Step& s : steps_)
    if (s.op)
      for (auto& p : s.op->params()) out.push_back(p.get());
  return out;
}

std::vector<std::pair<std::string, Mem*>> Network::buffers() {
  std::vector<std::pair<std::string, Mem*>> out;
  for (Step& s : steps_)
    if (s.op)
      for (auto& b : s.op->buffers()) out.push_back(b);
  return out;
}

std::string Network::step_name(int node) const {
  return steps_[size_t(node)].fused_away ? "" : steps_[size_t(node)].name;
}

std::vector<std::string> Network::layers_running(const std::string& algorithm) const {
  std::vector<std::string> names;
  for (const Step& s : steps_)
    if (s.op && s.op->algorithm() == algorithm) names.push_back(s.name);
  return names;
}

std::vector<std::string> Network::one_thread_layers() const {
  std::vector<std::string> names;
  for (const Step& s : steps_)
    if (s.one_thread) names.push_back(s.name);
  return names;
}

std::vector<std::pair<std::string, std::string>> Network::matrix_product_layers() const {
  std::vector<std::pair<std::string, std::string>> layers;
  for (const Step& s : steps_)
    if (s.op && !s.op->matrix_product_passes().empty()) layers.emplace_back(s.name, s.op->matrix_product_passes());
  return layers;
}

void Network::reset_times() { times_.assign(times_.size(), {}); }

}  // namespace dlperf::cpu
