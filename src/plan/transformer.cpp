#include "plan/transformer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/error.h"

namespace dlperf::plan {

namespace {
// Sizes from the GPT-2 release (Radford et al. 2019) and the GPT-3 paper's Table 2.1 (Brown et
// al. 2020); GPT-2 context 1024, GPT-3 context 2048, vocabulary 50257.
const std::map<std::string, TransformerSpec>& known() {
  static const std::map<std::string, TransformerSpec> k = {
      {"gpt2-small", {"gpt2-small", 12, 768, 12, 1024, 50257}},   {"gpt2-medium", {"gpt2-medium", 24, 1024, 16, 1024, 50257}},
      {"gpt2-large", {"gpt2-large", 36, 1280, 20, 1024, 50257}},  {"gpt2-xl", {"gpt2-xl", 48, 1600, 25, 1024, 50257}},
      {"gpt3-1.3b", {"gpt3-1.3b", 24, 2048, 16, 2048, 50257}},    {"gpt3-6.7b", {"gpt3-6.7b", 32, 4096, 32, 2048, 50257}},
      {"gpt3-13b", {"gpt3-13b", 40, 5140, 40, 2048, 50257}},      {"gpt3-175b", {"gpt3-175b", 96, 12288, 96, 2048, 50257}}};
  return k;
}
}  // namespace

std::vector<std::string> transformer_names() {
  std::vector<std::pair<double, std::string>> by_size;  // smallest first, as the papers list them
  for (const auto& [k, v] : known()) by_size.push_back({double(v.layers) * double(v.hidden) * double(v.hidden), k});
  std::sort(by_size.begin(), by_size.end());
  std::vector<std::string> n;
  for (const auto& [size, name] : by_size) n.push_back(name);
  return n;
}

TransformerSpec transformer(const std::string& s) {
  if (auto it = known().find(s); it != known().end()) return it->second;
  const std::string hint = fmt::format("the known sizes are {}; or give LAYERS,HIDDEN,HEADS,SEQ,VOCAB, for example "
                                       "--transformer 24,2048,16,2048,50257 (HIDDEN divisible by HEADS)",
                                       fmt::join(transformer_names(), ", "));
  long long l, h, a, q, v;
  char tail;
  check(std::sscanf(s.c_str(), "%lld,%lld,%lld,%lld,%lld%c", &l, &h, &a, &q, &v, &tail) == 5,
        fmt::format("--transformer '{}' is neither a known size nor LAYERS,HIDDEN,HEADS,SEQ,VOCAB", s), hint);
  check(l > 0 && h > 0 && a > 0 && q > 0 && v > 0,
        fmt::format("--transformer '{}': LAYERS, HIDDEN, HEADS, SEQ and VOCAB must each be at least 1", s), hint);
  check(h % a == 0, fmt::format("--transformer '{}': HIDDEN {} does not split into {} heads", s, h, a), hint);
  return {s, l, h, a, q, v};
}

double transformer_params(const TransformerSpec& t) {
  const double L = double(t.layers), h = double(t.hidden);
  // Per layer: QKV 3h^2+3h, output projection h^2+h, MLP (h->4h->h) 8h^2+5h, two layer norms 4h.
  // Plus token and position embeddings (the output layer shares the token embedding) and the
  // final layer norm.
  return L * (12 * h * h + 13 * h) + double(t.vocab) * h + double(t.seq) * h + 2 * h;
}

double transformer_train_flops_per_token(const TransformerSpec& t) {
  // 2 FLOPs per parameter per token forward, 4 backward; attention scores and their weighted sum
  // add 4 L S h forward (2 S h each for QK^T and AV per layer), so 12 L S h for training.
  return 6 * transformer_params(t) + 12 * double(t.layers) * double(t.seq) * double(t.hidden);
}

StateBytes state_bytes_per_param(const std::string& precision, const std::string& optimizer) {
  const bool mixed = precision == "bf16" || precision == "fp16";
  const double states = optimizer == "adamw" ? 2 : 1;  // Adam m and v; SGD momentum
  StateBytes b;
  b.weights = mixed ? 2 : 4;
  // bf16's 8-bit mantissa loses small gradients summed over micro-batches and replicas, so
  // Megatron-LM accumulates and all-reduces bf16 runs' gradients in fp32 (arguments.py: "bfloat16
  // requires gradient accumulation and all-reduce to be done in fp32"), as DeepSpeed's bf16
  // optimizer does; fp16 runs keep fp16 gradients. Megatron's own theoretical_memory_usage.py
  // counts 18 bytes a parameter for bf16 Adam: 2 + 4 + 12. (The ZeRO paper's 16 is fp16's.)
  b.gradients = precision == "fp16" ? 2 : 4;
  // Mixed precision keeps an fp32 master copy with the fp32 optimizer states (ZeRO's K = 12 for Adam).
  b.optimizer = 4 * states + (mixed ? 4 : 0);
  return b;
}

// Each device runs vp chunks of a micro-batch, a slot of t/vp each; chunk c on device d is
// virtual stage c pp + d. Megatron's interleaved schedule takes the micro-batches in groups of pp
// (its microbatch_group_size_per_vp_stage), each group through chunk 0, then chunk 1, and so on.
// The devices fill and drain once: pp - 1 idle slots against vp m busy ones (Narayanan et al.
// 2021). A last group of r < pp micro-batches comes back to device 0 for its next chunk pp slots
// after it left, while device 0 had r slots of work: pp - r more idle slots at each of the vp - 1
// changes of chunk. Forward passes shown; backward mirrors them. A list-scheduling simulation of
// these dependencies gives the same figures (PlanTransformer.ThePipelineIdlesAsItsScheduleMakesIt).
double pipeline_bubble(const Layout& l, double micro_batches) {
  const int64_t m = std::max<int64_t>(1, int64_t(micro_batches));
  const int64_t gap = m % l.pp == 0 ? 0 : l.pp - m % l.pp;
  return (double(l.pp - 1) + double(l.vp - 1) * double(gap)) / (double(l.vp) * double(m));
}

// Megatron's 1F1B warms up with pp - 1 - rank forwards (interleaved: 2 (pp - 1 - rank) + (vp - 1) pp
// chunk forwards) before its first backward, so device 0 holds pp micro-batches of its L/pp layers
// at the peak (interleaved: (vp + 1) pp - 1 chunks of L/(pp vp) layers), and never more than
// all m micro-batches of its layers.
double activations_in_flight(const Layout& l, double micro_batches) {
  const double pp = double(l.pp), vp = double(l.vp);
  const double warm = l.vp > 1 ? 1 + (pp - 1) / (pp * vp) : 1.0;
  return l.pp > 1 ? std::min(warm, micro_batches / pp) : 1.0;
}

DeviceMemory transformer_memory(const TransformerSpec& t, int64_t micro_batch, const std::string& precision,
                                const std::string& optimizer, const Layout& l, double micro_batches) {
  check(l.dp >= 1 && l.tp >= 1 && l.pp >= 1 && l.vp >= 1, "parallel degrees must be at least 1");
  check(l.vp == 1 || l.pp > 1, fmt::format("--virtual-stages {} interleaves pipeline stages, and there is no pipeline (--pp 1)", l.vp),
        "add --pp (2 or more), or drop --virtual-stages");
  check(l.zero >= 0 && l.zero <= 3, "--zero must be 0, 1, 2 or 3");
  check(t.heads % l.tp == 0, fmt::format("--tp {} does not divide the {} attention heads", l.tp, t.heads));
  check(t.layers % l.pp == 0, fmt::format("--pp {} does not divide the {} layers", l.pp, t.layers));
  // Divided, not multiplied: pp x vp can overflow for a --virtual-stages no model has.
  check((t.layers / l.pp) % l.vp == 0,
        fmt::format("--virtual-stages {} does not divide the {} layers each of the --pp {} devices holds", l.vp, t.layers / l.pp, l.pp),
        "pick --virtual-stages so that pp x virtual stages divides the layers");
  const StateBytes b = state_bytes_per_param(precision, optimizer);
  const double params = transformer_params(t) / double(l.tp * l.pp);  // model parallelism splits the weights
  const double dp = double(l.dp);
  DeviceMemory m;
  m.parameters = params * b.weights / (l.zero >= 3 ? dp : 1);
  m.gradients = params * b.gradients / (l.zero >= 2 ? dp : 1);
  m.optimizer = params * b.optimizer / (l.zero >= 1 ? dp : 1);
  // Activations per layer, 16-bit (Korthikanti et al. 2022, with sequence parallelism over tp):
  // s b h (34 + 5 a s / h) / t; selective recomputation keeps 34 s b h / t; full keeps only the
  // layer's input, 2 s b h. fp32 activations take twice the bytes.
  const double s = double(t.seq), bsz = double(micro_batch), h = double(t.hidden), a = double(t.heads), tp = double(l.tp);
  double per_layer = s * bsz * h * (34 + 5 * a * s / h) / tp;
  if (l.checkpointing == "selective") per_layer = 34 * s * bsz * h / tp;
  else if (l.checkpointing == "full") per_layer = 2 * s * bsz * h / tp;
  else check(l.checkpointing == "none", fmt::format("--checkpointing {} is not none, selective or full", l.checkpointing));
  const double scale = (precision == "fp32" || precision == "tf32") ? 2 : 1;
  // The first pipeline stage holds the most micro-batches (transformer.h).
  m.activations = per_layer * double(t.layers) * scale * activations_in_flight(l, micro_batches);
  // With full recomputation one layer's activations are rebuilt at a time during backward.
  if (l.checkpointing == "full") m.activations += s * bsz * h * (34 + 5 * a * s / h) / tp * scale;
  // The logits of the last stage in fp32 (softmax and its gradient), split over tp.
  m.workspace = 2 * 4 * s * bsz * double(t.vocab) / tp;
  return m;
}

double recompute_overhead(const TransformerSpec& t, const std::string& checkpointing) {
  const double total = transformer_train_flops_per_token(t);
  if (checkpointing == "full") return (total / 3) / total;  // one more forward pass
  if (checkpointing == "selective")  // only the attention scores: 4 L S h of forward FLOPs
    return 4 * double(t.layers) * double(t.seq) * double(t.hidden) / total;
  return 0;
}

}  // namespace dlperf::plan
