#include "backend/cuda/conv.h"

#include <cudnn.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/check.h"
#include "backend/cuda/conv_choice.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/second_look.h"
#include "core/error.h"

namespace dlperf::cuda {

namespace {

cudnnDataType_t data_type(Precision p) {
  switch (p) {
    case Precision::bf16: return CUDNN_DATA_BFLOAT16;
    case Precision::fp16: return CUDNN_DATA_HALF;
    default: return CUDNN_DATA_FLOAT;
  }
}

// Algorithms chosen per (shape, precision), for the life of the process.
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, size_t>;
struct Algos {
  int fwd = -1, bwd_data = -1, bwd_filter = -1;
  // Each pass's math type as cuDNN reported it with the algorithm: since cuDNN 7.4 the pair
  // (algorithm, math type) names the kernel, and the workspace it needs, so a pass runs under
  // the math type it was timed with (PyTorch's Conv_v7.cpp does the same).
  cudnnMathType_t fwd_math = CUDNN_DEFAULT_MATH, bwd_data_math = CUDNN_DEFAULT_MATH, bwd_filter_math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
  bool timed = true;  ///< all three from the timed search
  /// Faster algorithms the timed search found that the workspace limit ruled out, per pass
  /// ("fwd 6 in 0.61x the time with 1.3 GB"): whether the limit costs speed at this shape.
  std::string over_limit;
  /// What the timed search measured for each pass it chose: the time and how much slower the
  /// next allowed algorithm was ("fwd 52 us, next 1.03x"). A runner-up within a few percent
  /// means a noisy search may pick either in another process.
  std::string search;
  /// Passes whose search winner lost when the candidates ran again on data (conv_choice.h's overturned).
  std::string overturned;
};

// Buffers of random values in [-1, 1] for running a convolution's candidate algorithms on data
// (second_look.h; retime_candidates in conv_choice.h says why), with an output buffer of their
// own so no pass feeds the next. Allocated with cudaMalloc, outside the executor's accounting as
// cuDNN's own search buffers are, on first need; freed with the search.
class DataForTiming {
 public:
  DataForTiming(const ConvShape& s, Precision p)
      : s_(s), t_(p == Precision::bf16 ? DType::bf16 : p == Precision::fp16 ? DType::f16 : DType::f32) {}
  ~DataForTiming() {
    for (void* b : {x, y, w, out, workspace})
      if (b) cudaFree(b);
  }
  DataForTiming(const DataForTiming&) = delete;
  DataForTiming& operator=(const DataForTiming&) = delete;
  /// Ready with `workspace_bytes` of workspace; false where the memory is not there (then the
  /// search's choice stands).
  bool ready(size_t workspace_bytes) {
    if (failed) return false;
    const size_t e = bytes_of(t_), xb = size_t(s_.n * s_.c * s_.h * s_.w) * e, yb = size_t(s_.n * s_.k * s_.out_h() * s_.out_w()) * e,
                 wb = size_t(s_.k * s_.c * s_.r * s_.r) * e;
    if (!x) {
      if (!alloc(x, xb) || !alloc(y, yb) || !alloc(w, wb) || !alloc(out, std::max({xb, yb, wb})) ||
          !second_look::fill_random(x, t_, xb / e) || !second_look::fill_random(y, t_, yb / e) ||
          !second_look::fill_random(w, t_, wb / e))
        return fail();
    }
    if (workspace_bytes > workspace_size) {
      if (workspace) cudaFree(workspace), workspace = nullptr, workspace_size = 0;
      if (!alloc(workspace, workspace_bytes)) return fail();
      workspace_size = workspace_bytes;
    }
    return true;
  }
  void *x = nullptr, *y = nullptr, *w = nullptr, *out = nullptr, *workspace = nullptr;
  size_t workspace_size = 0;

 private:
  ConvShape s_;
  DType t_;
  bool failed = false;
  bool fail() {
    failed = true;
    cudaGetLastError();  // a failed allocation leaves no error behind for the next call
    return false;
  }
  static bool alloc(void*& p, size_t bytes) { return cudaMalloc(&p, std::max<size_t>(bytes, 1)) == cudaSuccess; }
};

// A search result as the choice (conv_choice.h) reads it. The search runs under the descriptor's
// math type (FMA only for fp32); `fma_only` also passes over any result that came back with another
// math type, so fp32 never runs as tf32; `deterministic` over any that cuDNN marks as not giving
// the same bits on every run.
template <class Perf>
std::vector<AlgoResult> results(const Perf* perf, int n, bool fma_only, bool deterministic) {
  std::vector<AlgoResult> r;
  for (int i = 0; i < n; ++i)
    r.push_back({int(perf[i].algo), double(perf[i].time), perf[i].memory,
                 perf[i].status == CUDNN_STATUS_SUCCESS && (!fma_only || perf[i].mathType == CUDNN_FMA_MATH) &&
                     (!deterministic || perf[i].determinism == CUDNN_DETERMINISTIC)});
  return r;
}
std::mutex cache_mutex;
std::map<Key, Algos> algo_cache;

// One cuDNN handle per device and thread: creating one costs milliseconds and device memory, and a
// network has a convolution per layer. Each pass sets the handle's stream first. Never destroyed:
// the process's end reclaims them, and cuDNN's teardown against the CUDA runtime's at exit is
// not an order to depend on.
cudnnHandle_t shared_handle() {
  thread_local std::map<int, cudnnHandle_t> handles;
  int device = 0;
  ok(cudaGetDevice(&device), "cudaGetDevice");
  cudnnHandle_t& h = handles[device];
  if (!h) ok(cudnnCreate(&h), "cudnnCreate");
  return h;
}

}  // namespace

CudnnConv::CudnnConv(const ConvShape& s, Precision p, bool nhwc, bool own_workspace, bool deterministic, size_t workspace_limit)
    : s_(s), p_(p), nhwc_(nhwc), deterministic_(deterministic), own_workspace_(own_workspace), workspace_limit_(workspace_limit) {
  check(p != Precision::fp8, "cuDNN convolutions here run in fp32, tf32, bf16 or fp16");
  const cudnnHandle_t h = shared_handle();
  handle_ = h;
  // The timed search runs on the handle's stream: the default one, not a stream an earlier user
  // of the handle may since have destroyed.
  ok(cudnnSetStream(h, nullptr), "cudnnSetStream");
  const cudnnTensorFormat_t fmt = nhwc_ ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  const cudnnDataType_t dt = data_type(p);
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  ok(cudnnCreateTensorDescriptor(&xd), "cudnnCreateTensorDescriptor");
  ok(cudnnCreateTensorDescriptor(&yd), "cudnnCreateTensorDescriptor");
  ok(cudnnCreateFilterDescriptor(&wd), "cudnnCreateFilterDescriptor");
  ok(cudnnCreateConvolutionDescriptor(&cd), "cudnnCreateConvolutionDescriptor");
  x_ = xd, y_ = yd, w_ = wd, conv_ = cd;
  ok(cudnnSetTensor4dDescriptor(xd, fmt, dt, int(s.n), int(s.c), int(s.h), int(s.w)), "input descriptor");
  ok(cudnnSetTensor4dDescriptor(yd, fmt, dt, int(s.n), int(s.k), int(s.out_h()), int(s.out_w())), "output descriptor");
  ok(cudnnSetFilter4dDescriptor(wd, dt, fmt, int(s.k), int(s.c), int(s.r), int(s.r)), "filter descriptor");
  ok(cudnnSetConvolution2dDescriptor(cd, int(s.pad), int(s.pad), int(s.stride), int(s.stride), 1, 1, CUDNN_CROSS_CORRELATION,
                                     CUDNN_DATA_FLOAT),
     "convolution descriptor");
  // fp32 means fp32: no silent tf32. tf32, bf16 and fp16 run on tensor cores.
  ok(cudnnSetConvolutionMathType(cd, p == Precision::fp32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH), "math type");

  const Key key{s.n, s.c, s.h, s.w, s.k, s.r, s.stride, s.pad, (int(p) * 2 + int(nhwc_)) * 2 + int(deterministic), workspace_limit};
  std::lock_guard lock(cache_mutex);
  auto it = algo_cache.find(key);
  if (it == algo_cache.end()) {
    Algos a{};
    constexpr int kMax = 16;
    // First a timed search (cuDNN runs each candidate, as PyTorch's cudnn.benchmark does); then,
    // for a pass it could not time (its buffers did not fit, say), cuDNN's heuristics.
    // Each pass: `find` and `guess` fill perf results of one cuDNN perf type; the chosen
    // algorithm and its math type land in `algo` and `math` (-1 when none fits).
    const bool fma_only = p == Precision::fp32;
    // A second look (retime_candidates in conv_choice.h says why): the search's candidates within
    // a factor of 2 of its fastest run again, on random data through the call training makes
    // (`run`: algorithm, math type, workspace), and the fastest there is taken.
    DataForTiming data(s, p);
    const cudnnMathType_t search_math = p == Precision::fp32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
    auto choose = [&](auto* perf, auto find, auto guess, auto run, const char* what, const char* pass, int& algo, cudnnMathType_t& math) {
      int got = 0;
      const bool timed = find(perf, &got) == CUDNN_STATUS_SUCCESS;
      int i = -1;
      size_t need = 0;
      if (timed) {
        const std::vector<AlgoResult> r = results(perf, got, fma_only, deterministic);
        i = pick_algorithm(r, workspace_limit, need);
        const std::string over = faster_over_limit(r, i, workspace_limit, pass);
        std::string times = search_times(r, i, workspace_limit, pass);
        const std::vector<int> candidates = retime_candidates(r, workspace_limit);
        size_t most = 0;
        for (int c : candidates) most = std::max(most, r[size_t(c)].memory);
        if (candidates.size() > 1 && data.ready(most)) {
          std::vector<double> ms;
          for (int c : candidates) {
            ok(cudnnSetConvolutionMathType(cd, perf[c].mathType), "math type");
            ms.push_back(second_look::median_ms([&] { return run(perf[c].algo) == CUDNN_STATUS_SUCCESS; }));
          }
          ok(cudnnSetConvolutionMathType(cd, search_math), "math type");  // the next pass's search runs under it
          const std::vector<AlgoResult> on_data = retimed(r, candidates, ms);
          if (!on_data.empty()) {
            i = candidates[size_t(fastest_measured(ms))];
            need = r[size_t(i)].memory;
            times = search_times(on_data, 0, workspace_limit, pass, " on data");
            const std::string o = overturned(r, candidates, ms, on_data, pass);
            if (!o.empty()) a.overturned += (a.overturned.empty() ? "" : "; ") + o;
          }
        }
        if (!over.empty()) a.over_limit += (a.over_limit.empty() ? "" : "; ") + over;
        if (!times.empty()) a.search += (a.search.empty() ? "" : "; ") + times;
      }
      if (i < 0) {
        ok(guess(perf, &got), what);
        i = pick_algorithm(results(perf, got, fma_only, deterministic), workspace_limit, need), a.timed = false;
      }
      a.workspace = std::max(a.workspace, need);
      algo = i < 0 ? -1 : int(perf[i].algo);
      if (i >= 0) math = perf[i].mathType;
    };
    const float one = 1, zero = 0;
    cudnnConvolutionFwdAlgoPerf_t fp[kMax];
    choose(
        fp, [&](auto* p, int* n) { return cudnnFindConvolutionForwardAlgorithm(h, xd, wd, cd, yd, kMax, n, p); },
        [&](auto* p, int* n) { return cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, kMax, n, p); },
        [&](cudnnConvolutionFwdAlgo_t algo) {
          return cudnnConvolutionForward(h, &one, xd, data.x, wd, data.w, cd, algo, data.workspace, data.workspace_size, &zero, yd,
                                         data.out);
        },
        "forward heuristics", "fwd", a.fwd, a.fwd_math);
    cudnnConvolutionBwdDataAlgoPerf_t dp[kMax];
    choose(
        dp, [&](auto* p, int* n) { return cudnnFindConvolutionBackwardDataAlgorithm(h, wd, yd, cd, xd, kMax, n, p); },
        [&](auto* p, int* n) { return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wd, yd, cd, xd, kMax, n, p); },
        [&](cudnnConvolutionBwdDataAlgo_t algo) {
          return cudnnConvolutionBackwardData(h, &one, wd, data.w, yd, data.y, cd, algo, data.workspace, data.workspace_size, &zero, xd,
                                              data.out);
        },
        "backward-data heuristics", "bwd-data", a.bwd_data, a.bwd_data_math);
    cudnnConvolutionBwdFilterAlgoPerf_t wp[kMax];
    choose(
        wp, [&](auto* p, int* n) { return cudnnFindConvolutionBackwardFilterAlgorithm(h, xd, yd, cd, wd, kMax, n, p); },
        [&](auto* p, int* n) { return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, xd, yd, cd, wd, kMax, n, p); },
        [&](cudnnConvolutionBwdFilterAlgo_t algo) {
          return cudnnConvolutionBackwardFilter(h, &one, xd, data.x, yd, data.y, cd, algo, data.workspace, data.workspace_size, &zero, wd,
                                                data.out);
        },
        "backward-filter heuristics", "bwd-filter", a.bwd_filter, a.bwd_filter_math);
    cudaGetLastError();  // a failed timed search leaves no error behind for the next call
    check(a.fwd >= 0 && a.bwd_data >= 0 && a.bwd_filter >= 0,
          fmt::format("cuDNN has no {}{} algorithm for a {}x{}x{}x{} convolution to {} channels within {} MB of workspace",
                      deterministic ? "deterministic " : "", to_string(p), s.n, s.c, s.h, s.w, s.k, workspace_limit >> 20),
          "allow more with --conv-workspace MB, or use a smaller batch");
    it = algo_cache.emplace(key, a).first;
  }
  fwd_algo_ = it->second.fwd, bwd_data_algo_ = it->second.bwd_data, bwd_filter_algo_ = it->second.bwd_filter;
  fwd_math_ = int(it->second.fwd_math), bwd_data_math_ = int(it->second.bwd_data_math), bwd_filter_math_ = int(it->second.bwd_filter_math);
  timed_ = it->second.timed;
  over_limit_ = it->second.over_limit;
  search_ = it->second.search;
  overturned_ = it->second.overturned;
  workspace_bytes_ = it->second.workspace;
  cudaGetDevice(&device_);
  if (own_workspace_ && workspace_bytes_ > 0) workspace_ = device_allocator(device_).allocate(workspace_bytes_, MemCategory::workspace);
}

// The descriptor is shared by the three passes; each runs under the math type it was timed with.
void CudnnConv::set_math(int math) {
  ok(cudnnSetConvolutionMathType(static_cast<cudnnConvolutionDescriptor_t>(conv_), cudnnMathType_t(math)), "cudnnSetConvolutionMathType");
}

void CudnnConv::set_workspace(void* w) {
  check(!own_workspace_, "this convolution owns its workspace");
  workspace_ = w;
}

CudnnConv::~CudnnConv() {
  if (own_workspace_ && workspace_) device_allocator(device_).release(workspace_);
  if (conv_) cudnnDestroyConvolutionDescriptor(static_cast<cudnnConvolutionDescriptor_t>(conv_));
  if (w_) cudnnDestroyFilterDescriptor(static_cast<cudnnFilterDescriptor_t>(w_));
  if (y_) cudnnDestroyTensorDescriptor(static_cast<cudnnTensorDescriptor_t>(y_));
  if (x_) cudnnDestroyTensorDescriptor(static_cast<cudnnTensorDescriptor_t>(x_));
}

void CudnnConv::forward(const void* x, const void* w, void* y, cudaStream_t s) {
  auto h = static_cast<cudnnHandle_t>(handle_);
  ok(cudnnSetStream(h, s), "cudnnSetStream");
  set_math(fwd_math_);
  const float alpha = 1, beta = 0;
  ok(cudnnConvolutionForward(h, &alpha, static_cast<cudnnTensorDescriptor_t>(x_), x, static_cast<cudnnFilterDescriptor_t>(w_), w,
                             static_cast<cudnnConvolutionDescriptor_t>(conv_), cudnnConvolutionFwdAlgo_t(fwd_algo_), workspace_,
                             workspace_bytes_, &beta, static_cast<cudnnTensorDescriptor_t>(y_), y),
     "cudnnConvolutionForward");
}

void CudnnConv::backward_data(const void* w, const void* dy, void* dx, cudaStream_t s, bool add) {
  auto h = static_cast<cudnnHandle_t>(handle_);
  ok(cudnnSetStream(h, s), "cudnnSetStream");
  set_math(bwd_data_math_);
  const float alpha = 1, beta = add ? 1 : 0;
  ok(cudnnConvolutionBackwardData(h, &alpha, static_cast<cudnnFilterDescriptor_t>(w_), w, static_cast<cudnnTensorDescriptor_t>(y_), dy,
                                  static_cast<cudnnConvolutionDescriptor_t>(conv_), cudnnConvolutionBwdDataAlgo_t(bwd_data_algo_),
                                  workspace_, workspace_bytes_, &beta, static_cast<cudnnTensorDescriptor_t>(x_), dx),
     "cudnnConvolutionBackwardData");
}

void CudnnConv::backward_filter(const void* x, const void* dy, void* dw, cudaStream_t s) {
  auto h = static_cast<cudnnHandle_t>(handle_);
  ok(cudnnSetStream(h, s), "cudnnSetStream");
  set_math(bwd_filter_math_);
  const float alpha = 1, beta = 0;
  ok(cudnnConvolutionBackwardFilter(h, &alpha, static_cast<cudnnTensorDescriptor_t>(x_), x, static_cast<cudnnTensorDescriptor_t>(y_), dy,
                                    static_cast<cudnnConvolutionDescriptor_t>(conv_), cudnnConvolutionBwdFilterAlgo_t(bwd_filter_algo_),
                                    workspace_, workspace_bytes_, &beta, static_cast<cudnnFilterDescriptor_t>(w_), dw),
     "cudnnConvolutionBackwardFilter");
}

namespace {
const char* math_name(int m) {
  switch (cudnnMathType_t(m)) {
    case CUDNN_DEFAULT_MATH: return "default";
    case CUDNN_TENSOR_OP_MATH: return "tensor-op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor-op-conversion";
    case CUDNN_FMA_MATH: return "fma";
  }
  return "?";
}
}  // namespace

std::string CudnnConv::algorithms() const {
  return fmt::format("fwd {}/{}, bwd-data {}/{}, bwd-filter {}/{} ({}{}{}{}{})", fwd_algo_, math_name(fwd_math_), bwd_data_algo_,
                     math_name(bwd_data_math_), bwd_filter_algo_, math_name(bwd_filter_math_), timed_ ? "timed search" : "heuristics",
                     search_.empty() ? "" : ": " + search_, deterministic_ ? ", deterministic" : "",
                     overturned_.empty() ? "" : "; overturned on data: " + overturned_,
                     over_limit_.empty() ? "" : fmt::format("; faster over the {} MB workspace limit: {}", workspace_limit_ >> 20, over_limit_));
}

}  // namespace dlperf::cuda
