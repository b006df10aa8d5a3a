// Runs a resolved model graph on one GPU: conv through cuDNN, linear through cuBLASLt, batchnorm,
// pooling and the rest with dlperf's own kernels. Parameters live in
// one flat buffer (gradients and optimizer states likewise), so the optimizer is one launch.
// Initialization draws the CPU engine's exact values, so CPU and GPU runs start equal.
//
// A training step never waits for the GPU: what changes per step (learning rate, dropout step,
// which batch to gather) is read by the kernels from device memory (StepArgs), and the loss and
// correct count accumulate on the device until the caller reads the tally. That makes the step
// static, so it is captured once in a CUDA graph and replayed (NetworkOptions::graphs).
//
// Precision: fp32 (FMA math, no silent tf32); tf32 (fp32 storage, tensor-core math in conv and
// GEMM); bf16 or fp16 mixed precision: activations and their gradients in the half type,
// convolutions and GEMMs on tensor cores with fp32 accumulation, batchnorm statistics, the loss,
// the master weights, their gradients and the optimizer in fp32; fp16 with dynamic loss scaling
// (steps whose gradients overflow are skipped and counted).
//
// Layout (NetworkOptions::layout): NCHW, or NHWC, where every 4-D activation and gradient is
// stored channels-innermost and the convolution weights the GPU holds (masters, gradients,
// optimizer states, half copies) are [K, R, S, C]. A flatten of multi-channel maps read by a
// linear layer moves nothing: that layer's weight columns are kept in the maps' (h, w, c) order;
// read by anything else, it hands over the CPU engine's NCHW feature order. Everything the host
// sees (parameters(), snapshot(), restore(), the input the loaders fill, the logits) keeps the
// CPU engine's order, so both layouts train the same model from the same initialization.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/conv.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/layout.h"
#include "core/memory.h"
#include "nn/graph.h"
#include "nn/optimizer.h"
#include "profile/recorder.h"

namespace dlperf::cuda {

struct GpuLoss {
  double loss = 0;      ///< mean over valid rows
  int64_t correct = 0;
};

/// Running totals of the loss kernel since the last reset.
struct GpuTally {
  double loss_sum = 0;  ///< summed over rows
  int64_t correct = 0;
};

/// A stretch of GPU work the profiler times with the GPU's clock: seconds since begin_profile().
struct GpuSpan {
  std::string name, op;
  profile::Phase phase{};
  int node = -1;
  double t0 = 0, t1 = 0;
};

/// One profiled step, read once the GPU ran it. Times are seconds since begin_profile().
struct ProfiledStep {
  double start = 0;            ///< when the GPU reached the step (its start stamp)
  std::vector<GpuSpan> spans;  ///< each layer pass, the loss and the update
};

/// Who runs the convolutions of 1 or 3 input channels (small_conv.h), forward and weight
/// gradient: cuDNN, dlperf's own kernels, or per pass whichever timed faster when the network was
/// built (auto; --small-conv).
enum class SmallConv { cudnn, own, timed };
SmallConv parse_small_conv(const std::string& s);  // "cudnn", "own", "auto"

struct NetworkOptions {
  Precision precision = Precision::fp32;  ///< fp32, tf32, bf16 or fp16
  std::string optimizer = "sgd";          ///< sgd | adamw: AdamW's second state is allocated up front
  bool graphs = false;                    ///< capture the training step in a CUDA graph and replay it
  Layout layout = Layout::nchw;           ///< how 4-D activations are stored (resolve_layout picks per precision)
  /// The loader writes stored_input() (the activations' type and layout) instead of the fp32
  /// NCHW input(): mixed precision and NHWC then need no cast launch per step.
  bool input_as_stored = false;
  /// Only convolution algorithms that give the same bits on every run (CudnnConv); the own
  /// kernels and cuBLASLt always do.
  bool deterministic = false;
  /// The most workspace a convolution's cuDNN algorithms may use (--conv-workspace); the fastest within it wins.
  size_t conv_workspace = kDefaultConvWorkspace;
  /// The convolutions of 1 or 3 input channels (--small-conv). cuDNN here, as in the tests that
  /// count launches; `dlperf train` times both (auto).
  SmallConv small_conv = SmallConv::cudnn;
};

/// The network's input as it stores it, for a loader that writes it directly.
struct StoredInput {
  void* data = nullptr;
  DType type = DType::f32;
  Layout layout = Layout::nchw;
};

/// What a captured training step holds, counted in its CUDA graph: the exact kernels a replay
/// launches (cuDNN's and cuBLASLt's own included), device copies and memsets.
struct GraphNodes {
  int64_t kernels = 0, copies = 0, memsets = 0, other = 0;
};

/// What one training step needs besides the batch.
struct StepValues {
  double lr = 0;
  uint64_t global_step = 0;  ///< dropout masks hash it
  int64_t batch = 0;         ///< the batch's index in its epoch (the on-device loader's position)
  int64_t epoch = 0;
};

class Network {
 public:
  Network(const nn::Graph& g, uint64_t seed, int device, NetworkOptions opts = {});
  ~Network();
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  const nn::Graph& graph() const { return graph_; }
  /// Device buffers a step reads: images [N, C, H, W] and labels [N].
  float* input();
  StoredInput stored_input();
  int32_t* labels();
  /// The device copy of the current step's values (for an on-device loader's kernels).
  const StepArgs* step_args() const { return args_; }
  cudaStream_t stream() const { return stream_; }

  /// A whole training step, queued on stream(): `load` (may be empty) queues what fills input()
  /// and labels(); then forward, loss (added to the tally), backward and the update. With
  /// graphs, the first step runs eagerly (warm-up), the second is captured and every later one
  /// replays the graph; a step the graph cannot take (another `valid`) runs eagerly. Never waits.
  void train_step(const std::function<void(cudaStream_t)>& load, int64_t valid, double smoothing,
                  const nn::OptimizerConfig& opt, const StepValues& v);
  /// Evaluation of one batch, queued: `load`, forward (inference), loss over rows [0, valid)
  /// added to the tally.
  void eval_step(const std::function<void(cudaStream_t)>& load, int64_t valid);
  /// The tally since the last reset (waits for the GPU); `reset` starts a new one.
  GpuTally tally(bool reset);
  /// Profiling (dlperf profile on a GPU): in a profiled step every layer pass, the loss and the
  /// update are bracketed by stamps of the GPU's clock, each a one-thread kernel (stamp_time: in
  /// an H200's graphs an empty kernel cost about a quarter of an event record; bench launch
  /// measures a stamp's own cost). With graphs, a profiled step
  /// replays the step captured once more with those stamp kernels, so kernels run as in training;
  /// else eagerly. Steps between profiled ones (--profile-every) replay the plain training graph.
  /// Nothing waits for the GPU between profiled steps: two sets of stamps (and graphs) are used
  /// in turn, and a step's stamps are read when its set comes round again, two profiled steps
  /// later, so the GPU runs profiled steps back to back as it runs training.
  ///   begin_profile()        waits for the GPU once; its time is the profile's time origin
  ///   begin_profiled_step()  before a profiled step's work is queued (its data included)
  ///   end_profiled_step()    after it; a step queued outside this pair is not profiled
  ///   take_profiled()        the steps read so far, oldest first
  ///   end_profile()          waits for the steps not yet read (take_profiled() returns them)
  void begin_profile();
  void begin_profiled_step();
  void end_profiled_step();
  std::vector<ProfiledStep> take_profiled();
  void end_profile();
  /// How finely the stamps resolve a span: the smallest step of the GPU's clock (cuda::clock_tick),
  /// measured at the first begin_profile(); 0 before.
  double clock_tick_ns() const { return clock_tick_ns_; }

  /// fp16's loss scale and skipped steps (waits for the GPU); the initial values otherwise.
  LossScale loss_scale() const;
  /// Whether steps replay a CUDA graph, and why not when they do not.
  bool graphed() const { return graph_exec_ != nullptr; }
  /// The training step's graph, node by node type (zeros until it is captured).
  const GraphNodes& step_nodes() const { return step_nodes_; }
  const std::string& why_not_graphed() const { return why_not_graphed_; }
  /// Each convolution's cuDNN algorithms and math types by layer name (CudnnConv::algorithms; the
  /// weight gradient's own where it runs in NCHW): the run record keeps them, since a timed search
  /// may pick differently from one process to the next.
  std::vector<std::pair<std::string, std::string>> conv_algorithms() const;
  /// Bytes of the convolutions' shared workspace: the largest any of cuDNN's chosen algorithms
  /// (or the own kernels' partial sums) needs, known only once the timed search has chosen. The
  /// one buffer plan::gpu_engine_memory cannot count; the run record keeps it, so that
  /// `plan --against` checks the rest byte for byte.
  size_t conv_workspace_bytes() const { return conv_workspace_bytes_; }
  /// By linear layer, the passes whose cuBLASLt algorithm timing on data chose over the
  /// heuristic's first (LtGemm::choice); layers where the first stayed are left out.
  std::vector<std::pair<std::string, std::string>> gemm_choices() const;
  /// How profiled steps ran: "CUDA graph" (the step's graph with stamp kernels), or "eager"
  /// with the reason.
  std::string profiled_steps() const {
    if (slots_[0].exec) return "CUDA graph";
    return "eager: " + (why_not_profiled_graph_.empty() ? why_not_graphed_ : why_not_profiled_graph_);
  }

  // The step's parts, for tests: forward, loss (resets the tally first; waits), backward, update.
  void forward(bool training, uint64_t dropout_step = 0);
  GpuLoss loss(int64_t valid, double smoothing, bool grad);
  void backward();
  void step(const nn::OptimizerConfig& opt, double lr);

  /// Host copies, for tests and checkpoints: all parameters flat in graph order (weight, bias),
  /// and the logits [N, classes].
  std::vector<float> parameters() const;
  std::vector<float> logits() const;

  /// What a checkpoint holds, under the CPU engine's names (so either device resumes it):
  /// "<layer>.weight" and ".bias", batchnorm "<layer>.running_mean" and ".running_var", and the
  /// optimizer's state "<param>.momentum" (SGD with momentum) or ".adam_m" and ".adam_v". Waits.
  std::vector<std::pair<std::string, std::vector<float>>> snapshot(const nn::OptimizerConfig& opt) const;
  /// Loads a checkpoint's tensors (`get` returns one by name and size, or throws) and the number
  /// of updates done (AdamW's bias corrections continue from it).
  void restore(const std::function<const std::vector<float>&(const std::string&, size_t)>& get, const nn::OptimizerConfig& opt,
               int64_t updates_done);
  int64_t updates_done() const { return steps_; }
  MemoryStats memory() const;


 private:
  struct Layer;
  class Span;  // brackets GPU work with stamps of the GPU's clock while profiling
  size_t begin_span(const std::string& name, const std::string& op, profile::Phase phase, int node);
  void end_span(size_t index) noexcept;
  struct ProfileSlot;
  void read_profiled(ProfileSlot& slot);  // waits for the slot's step and reads its stamps
  void build(uint64_t seed, int device);  // the constructor's work: the steps below, in order
  void init_parameters(uint64_t seed, const std::vector<int64_t>& offsets);
  void alloc_values();
  void add_layer(size_t i, const std::vector<int64_t>& offsets, size_t& tensor, size_t& bn_workspace, size_t& conv_workspace);
  void set_up_op(Layer& l, size_t& bn_workspace, size_t& conv_workspace);
  void alloc_workspaces(size_t bn_workspace, size_t conv_workspace);
  void choose_small_convs();
  void conv_weight_grad(Layer& l, const void* x, const void* dy);
  void release();                          // gives back every resource (destructor, failed build)
  float* alloc(size_t floats, MemCategory c);
  void* alloc_bytes(size_t bytes, MemCategory c);
  void write_args();
  void set_update_values(const nn::OptimizerConfig& opt, double lr);
  void forward_pass(bool training);
  void accumulate_loss(int64_t valid, double smoothing, bool grad);
  void update(const nn::OptimizerConfig& opt);
  void backward_layer(Layer& l, void* dx, bool add);
  void eager_step(const std::function<void(cudaStream_t)>& load, int64_t valid, double smoothing, const nn::OptimizerConfig& opt);
  void capture(const std::function<void(cudaStream_t)>& load, int64_t valid, double smoothing, const nn::OptimizerConfig& opt);
  cudaGraphExec_t capture_step(const std::function<void(cudaStream_t)>& load, int64_t valid, double smoothing,
                               const nn::OptimizerConfig& opt, std::string& failed, GraphNodes* nodes = nullptr);

  nn::Graph graph_;
  int device_;
  NetworkOptions opts_;
  cudaStream_t stream_{};
  std::vector<void*> owned_;  // every device block, released in the destructor
  std::vector<std::unique_ptr<Layer>> layers_;
  DType dt_ = DType::f32;            // the activations' type
  std::vector<void*> act_, diff_;    // per value: 0 = the input, i + 1 = node i's output
  float* input32_ = nullptr;         // the fp32 input the loaders fill (act_[0] itself in fp32)
  float *params_ = nullptr, *grads_ = nullptr, *state_m_ = nullptr, *state_v_ = nullptr;
  void* params_h_ = nullptr;         // mixed precision: half copies of the conv and linear weights
  void* grads_h_ = nullptr;          // mixed precision: half gradients of the conv weights
  int64_t param_count_ = 0, steps_ = 0;  // floats in the flat buffers, padding included; updates done
  int64_t conv_span_ = 0, matmul_span_ = 0;  // the flat buffers start with conv, then linear weights
  // Where each parameter tensor lives in the flat buffers, in graph order; conv weights in NHWC
  // are stored [K, R, S, C] (k > 0), and host copies convert them.
  struct Place {
    int64_t at = 0, count = 0;
    int64_t k = 0, c = 0, rs = 0;  // a weight stored [K, RS, C] (NHWC) rather than [K, C, RS]: its dimensions
  };
  std::vector<Place> tensors_;
  std::vector<float> to_host(const float* flat_device, const Place& t) const;  // in the CPU engine's order (waits)
  void to_device(float* flat_device, const Place& t, const std::vector<float>& v) const;
  void* scratch_ = nullptr;  // one input's worth: gradient sums and unread dx (allocated once)
  void* conv_workspace_ = nullptr;  // cuDNN's, shared by the convolutions (and the own kernels' partial sums)
  size_t conv_workspace_bytes_ = 0;
  void* bn_workspace_ = nullptr;  // the batchnorm kernels' partial sums, sized for the largest layer
  float* logits32_ = nullptr;  // mixed precision: the logits in fp32, for logits()
  LossScale* loss_scale_ = nullptr;  // fp16 only (device)
  int32_t* labels_ = nullptr;
  double* loss_sum_ = nullptr;
  int32_t* correct_ = nullptr;
  StepArgs* args_ = nullptr;  // device
  StepArgs host_args_;
  // The step values' way to the GPU: pinned slots used in turn, each reused only once the copy
  // out of it ran (its event), so a step never waits on the GPU to stage a pageable copy.
  static constexpr int kArgSlots = 8;
  StepArgs* arg_slots_ = nullptr;
  cudaEvent_t arg_copied_[kArgSlots] = {};
  int64_t args_written_ = 0;
  uint64_t seed_;
  // The captured step and what it was captured for.
  cudaGraphExec_t graph_exec_ = nullptr;
  int64_t graph_valid_ = -1;
  GraphNodes step_nodes_;
  int64_t eager_steps_ = 0;
  std::string why_not_graphed_ = "--no-graphs";
  // Profiling: two slots used by profiled steps in turn. A slot's stamps are reused step after
  // step once read; its graph is the step captured with that slot's stamp kernels.
  struct SpanRecords {  // a step's spans and which of the slot's stamps bound each
    std::vector<GpuSpan> spans;
    std::vector<std::pair<size_t, size_t>> marks;  // each span's begin and end stamp
    size_t marks_used = 0;                         // stamp 0 is the step's start
  };
  struct ProfileSlot {
    cudaEvent_t end = nullptr;  // after the step's queued work: reading the slot waits for it
    uint64_t* stamps = nullptr;  // device: the GPU clock at the step's start, then at each span boundary
    SpanRecords step;                // the step queued with this slot
    cudaGraphExec_t exec = nullptr;  // the step captured with these stamps
    SpanRecords captured;            // what that graph records
    bool pending = false;            // queued, not yet read
  };
  bool profiling_ = false;  // between begin_profiled_step() and end_profiled_step(): spans are timed
  // Whether the last thing queued was a span's end: the next span then begins at that stamp, one
  // stamp instead of two. Work queued outside spans (the step's load, the input cast) clears it,
  // so that work is never counted in a span.
  bool chained_ = false;
  // While the profiled step's graph is captured, stamps fork off the step onto a stream of their
  // own (record_mark says why) and join it at the capture's end; `forked_` once one has.
  bool fork_stamps_ = false, forked_ = false;
  cudaStream_t stamp_stream_ = nullptr;  // the stamps' stream, at the device's highest priority
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  size_t record_mark(ProfileSlot& s);
  ProfileSlot slots_[2];
  int slot_ = 0;  // the slot of the step being queued
  // The profiler's stamps, outside the caching allocator so a profiled run's memory is a plain
  // run's: [0] the origin, [1] the clock's tick, then each slot's `stamp_capacity_`. Read back
  // into `stamps_host_`.
  uint64_t* stamps_ = nullptr;
  uint64_t* stamps_host_ = nullptr;  // pinned
  size_t stamp_capacity_ = 0;
  uint64_t origin_ns_ = 0;  // the GPU clock at begin_profile()
  double clock_tick_ns_ = 0;
  std::vector<ProfiledStep> profiled_;  // read, not yet taken
  std::string why_not_profiled_graph_;
};

}  // namespace dlperf::cuda
