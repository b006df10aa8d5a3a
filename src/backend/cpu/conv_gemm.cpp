#include "backend/cpu/conv_gemm.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "core/error.h"

namespace dlperf::cpu {

namespace {
using namespace dnnl;

constexpr int64_t kChunkRows = 512;                      // forward and backward-data (conv_gemm.h)
constexpr size_t kWeightsChunkBytes = size_t(32) << 20;  // backward-weights' unfolded input
int64_t chunk_rows = kChunkRows;                         // for_tests_set_conv_gemm_chunks
size_t weights_chunk_bytes = kWeightsChunkBytes;
constexpr size_t kAlign = 64;

size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

md rows(int64_t r, int64_t cols, dt type) { return md({r, cols}, type, tag::ab); }
}  // namespace

void for_tests_set_conv_gemm_chunks(int64_t rows, size_t weights_bytes) {
  chunk_rows = rows > 0 ? rows : kChunkRows;
  weights_chunk_bytes = weights_bytes > 0 ? weights_bytes : kWeightsChunkBytes;
}

std::string ConvGemmPasses::names() const {
  std::string s;
  for (auto [on, name] : {std::pair{forward, "forward"}, {backward_data, "backward-data"}, {backward_weights, "backward-weights"}})
    if (on) s += (s.empty() ? "" : ", ") + std::string(name);
  return s;
}

namespace {
const std::string* scoped_mode = nullptr;  // a ScopedConvGemm's
}

std::string conv_gemm_mode() {
  if (scoped_mode) return *scoped_mode;
  const char* env = std::getenv("DLPERF_CPU_CONV_GEMM");
  const std::string asked = env && *env ? env : "auto";
  check(asked == "auto" || asked == "off" || asked == "all", fmt::format("DLPERF_CPU_CONV_GEMM={} is none of auto, off and all", asked),
        "unset it, or set auto (the rule), off (oneDNN's convolutions) or all (matrix products)");
  return asked;
}

ScopedConvGemm::ScopedConvGemm(std::string mode) : mode_(std::move(mode)) {
  check(mode_ == "auto" || mode_ == "off" || mode_ == "all", fmt::format("no conv matrix-product mode '{}'", mode_));
  scoped_mode = &mode_;
}
ScopedConvGemm::~ScopedConvGemm() { scoped_mode = nullptr; }

ConvGemmPasses conv_gemm_passes(const ConvGemmShape& s) {
  const std::string mode = conv_gemm_mode();
  if (mode == "off") return {};
  if (mode == "all") return {true, true, true};
  // As resnet18's (on 28x28 and 224x224 images) and medium's passes timed in training, each both
  // ways (docs/benchmarks.md): oneDNN's 1x1 forward kernel fills the tiles with whole maps; its
  // strided 3x3 kernels on 14x14 outputs, its strided 1x1 backward-weights on 28x28, and its
  // kernels on medium's 64 channels stayed faster than the products.
  const bool strided = s.stride > 1, pointwise = s.k == 1, wide = s.c >= 128;
  return {.forward = wide && s.ow <= 4 && !pointwise,
          .backward_data = wide && (s.ow <= 4 || (strided && s.ow <= 7)),
          .backward_weights = (wide && s.ow <= 7) || (strided && pointwise && s.ow <= 14)};
}

void unfold_bf16(const uint16_t* x, uint16_t* cols, const ConvGemmShape& s, int64_t first, int64_t images) {
  const int64_t rpi = s.rows_per_image(), K = s.cols(), bytes = s.c * int64_t(sizeof(uint16_t));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < images * rpi; ++r) {
    const int64_t n = first + r / rpi, oy = r % rpi / s.ow, ox = r % s.ow;
    uint16_t* out = cols + r * K;
    for (int64_t ky = 0; ky < s.k; ++ky) {
      const int64_t iy = oy * s.stride - s.pad + ky;
      for (int64_t kx = 0; kx < s.k; ++kx, out += s.c) {
        const int64_t ix = ox * s.stride - s.pad + kx;
        if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w)
          std::memset(out, 0, size_t(bytes));
        else
          std::memcpy(out, x + ((n * s.h + iy) * s.w + ix) * s.c, size_t(bytes));
      }
    }
  }
}

void fold_bf16(const float* dcols, uint16_t* dx, const ConvGemmShape& s, int64_t first, int64_t images) {
  const int64_t rpi = s.rows_per_image(), K = s.cols(), pixels = s.h * s.w;
#pragma omp parallel
  {
    std::vector<float> sum(size_t(s.c));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < images * pixels; ++i) {
      const int64_t n = i / pixels, iy = i % pixels / s.w, ix = i % s.w;
      std::fill(sum.begin(), sum.end(), 0.0f);
      // The taps (ky, kx) of output pixels (oy, ox) that read this input pixel:
      // iy = oy * stride - pad + ky.
      for (int64_t ky = 0; ky < s.k; ++ky) {
        const int64_t ty = iy + s.pad - ky;
        if (ty < 0 || ty % s.stride != 0 || ty / s.stride >= s.oh) continue;
        for (int64_t kx = 0; kx < s.k; ++kx) {
          const int64_t tx = ix + s.pad - kx;
          if (tx < 0 || tx % s.stride != 0 || tx / s.stride >= s.ow) continue;
          const float* g = dcols + (n * rpi + ty / s.stride * s.ow + tx / s.stride) * K + (ky * s.k + kx) * s.c;
          for (int64_t c = 0; c < s.c; ++c) sum[size_t(c)] += g[c];
        }
      }
      uint16_t* out = dx + ((first + n) * pixels + iy * s.w + ix) * s.c;
      for (int64_t c = 0; c < s.c; ++c) out[c] = to_bf16(sum[size_t(c)]);
    }
  }
}

/// One matmul and the layouts of its operands (views of the conv's tensors and of the scratchpad).
struct Matmul {
  bool used = false;
  matmul::primitive_desc pd;
  Prim prim;  ///< built unless the ConvGemm only sizes its scratchpad
  md a, b, c;
  explicit operator bool() const { return used; }
};

/// A pass's matmuls: one for a full chunk, one for the last, shorter one where the batch does not
/// divide (backward-weights: the first chunk's writes dw, the others' add to it).
struct ChunkedPass {
  int64_t images = 0;        ///< per full chunk
  Matmul first, full, rest;  ///< first: backward-weights only; rest: empty where the chunks divide the batch
  size_t front = 0;          ///< bytes of the shared scratchpad before the matmul's own
  size_t scratchpad() const {
    size_t own = 0;
    for (const Matmul* m : {&first, &full, &rest})
      if (*m) own = std::max(own, m->pd.scratchpad_desc().get_size());
    return front + own;
  }
};

struct ConvGemm::Passes {
  ChunkedPass fwd, bwd_data, bwd_weights;
  std::optional<reduction::primitive_desc> bias_grad_pd;  ///< the sum of dy's rows, where there is a bias
  Prim bias_grad;
  md bias, dy_rows;
};

md ConvGemm::weights_md(const ConvGemmShape& s, dt type) { return md({s.oc, s.c, s.k, s.k}, type, tag::ohwi); }

ConvGemm::ConvGemm(const ConvGemmShape& s, ConvGemmPasses passes, bool bias, bool build)
    : s_(s), p_(std::make_unique<Passes>()) {
  const int64_t rpi = s.rows_per_image(), K = s.cols();
  auto chunk = [&](int64_t images) { return std::clamp<int64_t>(images, 1, s.n); };
  p_->bias = md({1, s.oc}, dt::f32, tag::ab);
  auto matmul_of = [&](const md& a, const md& b, bool with_bias, const md& c, bool sum, profile::Phase phase) {
    primitive_attr attr = default_attr();
    if (sum) {
      post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    Matmul m{true, matmul::primitive_desc(with_bias ? matmul::desc(a, b, p_->bias, c) : matmul::desc(a, b, c), attr, engine()), {}, a, b, c};
    if (build) {
      m.prim = Prim::of<matmul>(m.pd);
      m.prim.phase = phase;
    }
    return m;
  };
  if (passes.forward) {
    ChunkedPass& f = p_->fwd;
    f.images = chunk(chunk_rows / rpi);
    auto make = [&](int64_t images) {
      const int64_t r = images * rpi;
      return matmul_of(rows(r, K, dt::bf16), md({K, s.oc}, dt::bf16, memory::dims{1, K}), bias, rows(r, s.oc, dt::bf16), false,
                       profile::Phase::forward);
    };
    f.full = make(f.images);
    if (s.n % f.images) f.rest = make(s.n % f.images);
    f.front = s.unfolds() ? aligned(size_t(f.images * rpi * K) * sizeof(uint16_t)) : 0;
  }
  if (passes.backward_data) {
    ChunkedPass& d = p_->bwd_data;
    d.images = chunk(chunk_rows / rpi);
    // A conv that does not unfold writes dx itself, in bf16; the others write fp32 rows to fold.
    const dt out = s.unfolds() ? dt::f32 : dt::bf16;
    auto make = [&](int64_t images) {
      const int64_t r = images * rpi;
      return matmul_of(rows(r, s.oc, dt::bf16), rows(s.oc, K, dt::bf16), false, rows(r, K, out), false, profile::Phase::backward_data);
    };
    d.full = make(d.images);
    if (s.n % d.images) d.rest = make(s.n % d.images);
    d.front = s.unfolds() ? aligned(size_t(d.images * rpi * K) * sizeof(float)) : 0;
  }
  if (passes.backward_weights) {
    ChunkedPass& g = p_->bwd_weights;
    g.images = s.unfolds() ? chunk(int64_t(weights_chunk_bytes / (size_t(rpi * K) * sizeof(uint16_t)))) : s.n;
    auto make = [&](int64_t images, bool sum) {
      const int64_t r = images * rpi;
      return matmul_of(md({s.oc, r}, dt::bf16, memory::dims{1, s.oc}), rows(r, K, dt::bf16), false, rows(s.oc, K, dt::f32), sum,
                       profile::Phase::backward_weight);
    };
    g.first = make(g.images, false);
    if (s.n / g.images > 1) g.full = make(g.images, true);
    if (s.n % g.images) g.rest = make(s.n % g.images, true);
    g.front = s.unfolds() ? aligned(size_t(g.images * rpi * K) * sizeof(uint16_t)) : 0;
    if (bias) {
      p_->dy_rows = rows(s.n * rpi, s.oc, dt::bf16);
      p_->bias_grad_pd = reduction::primitive_desc(reduction::desc(algorithm::reduction_sum, p_->dy_rows, p_->bias, 0.0f, 0.0f),
                                                   default_attr(), engine());
      if (build) {
        p_->bias_grad = Prim::of<reduction>(*p_->bias_grad_pd);
        p_->bias_grad.phase = profile::Phase::backward_weight;
      }
    }
  }
}

ConvGemm::~ConvGemm() = default;

size_t ConvGemm::scratchpad() const {
  size_t most = p_->bias_grad_pd ? p_->bias_grad_pd->scratchpad_desc().get_size() : 0;
  for (const ChunkedPass* c : {&p_->fwd, &p_->bwd_data, &p_->bwd_weights}) most = std::max(most, c->scratchpad());
  return most;
}

namespace {
template <class T>
T* at(const memory& m, int64_t elements) {
  return static_cast<T*>(m.get_data_handle()) + elements;
}
memory view(const md& d, void* p) { return memory(d, engine(), p); }

// Runs `chunk(first, images, matmul)` over the batch in the pass's chunks of whole images.
template <class Chunk>
void each_chunk(const ChunkedPass& p, int64_t n, Chunk chunk) {
  for (int64_t first = 0; first < n; first += p.images) {
    const int64_t images = std::min(p.images, n - first);
    chunk(first, images, first == 0 && p.first ? p.first : images == p.images ? p.full : p.rest);
  }
}

// The chunk's rows of the product's input: the unfolded input, at the scratchpad's front, or the
// input itself for a conv that does not unfold.
uint16_t* input_rows(const ConvGemmShape& s, const memory& x, std::byte* front, int64_t first, int64_t images, profile::Phase phase) {
  if (!s.unfolds()) return at<uint16_t>(x, first * s.rows_per_image() * s.cols());
  const auto scope = profile::Scope::launch(phase);
  auto* cols = reinterpret_cast<uint16_t*>(front);
  unfold_bf16(at<uint16_t>(x, 0), cols, s, first, images);
  return cols;
}
}  // namespace

void ConvGemm::forward(const memory& x, const memory& w, const memory* bias, const memory& y) const {
  const ChunkedPass& f = p_->fwd;
  std::byte* front = shared_scratch(f.scratchpad());
  each_chunk(f, s_.n, [&](int64_t first, int64_t images, const Matmul& m) {
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, view(m.a, input_rows(s_, x, front, first, images, profile::Phase::forward))},
                                         {DNNL_ARG_WEIGHTS, view(m.b, w.get_data_handle())},
                                         {DNNL_ARG_DST, view(m.c, at<uint16_t>(y, first * s_.rows_per_image() * s_.oc))}};
    if (bias) args.emplace(DNNL_ARG_BIAS, view(p_->bias, bias->get_data_handle()));
    run(m.prim, std::move(args), f.front);
  });
}

void ConvGemm::backward_data(const memory& dy, const memory& w, const memory& dx) const {
  const ChunkedPass& d = p_->bwd_data;
  std::byte* front = shared_scratch(d.scratchpad());
  each_chunk(d, s_.n, [&](int64_t first, int64_t images, const Matmul& m) {
    // A conv that unfolds gets fp32 rows of its input's gradient to fold; the others, dx itself.
    void* out = s_.unfolds() ? static_cast<void*>(front) : static_cast<void*>(at<uint16_t>(dx, first * s_.rows_per_image() * s_.cols()));
    run(m.prim,
        {{DNNL_ARG_SRC, view(m.a, at<uint16_t>(dy, first * s_.rows_per_image() * s_.oc))},
         {DNNL_ARG_WEIGHTS, view(m.b, w.get_data_handle())},
         {DNNL_ARG_DST, view(m.c, out)}},
        d.front);
    if (s_.unfolds()) {
      const auto scope = profile::Scope::launch(profile::Phase::backward_data);
      fold_bf16(reinterpret_cast<const float*>(front), at<uint16_t>(dx, 0), s_, first, images);
    }
  });
}

void ConvGemm::backward_weights(const memory& x, const memory& dy, const memory& dw, const memory* dbias) const {
  const ChunkedPass& g = p_->bwd_weights;
  std::byte* front = shared_scratch(g.scratchpad());
  each_chunk(g, s_.n, [&](int64_t first, int64_t images, const Matmul& m) {
    run(m.prim,
        {{DNNL_ARG_SRC, view(m.a, at<uint16_t>(dy, first * s_.rows_per_image() * s_.oc))},
         {DNNL_ARG_WEIGHTS, view(m.b, input_rows(s_, x, front, first, images, profile::Phase::backward_weight))},
         {DNNL_ARG_DST, view(m.c, dw.get_data_handle())}},
        g.front);
  });
  if (dbias) run(p_->bias_grad, {{DNNL_ARG_SRC, view(p_->dy_rows, dy.get_data_handle())}, {DNNL_ARG_DST, view(p_->bias, dbias->get_data_handle())}});
}

}  // namespace dlperf::cpu
