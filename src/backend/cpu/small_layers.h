// Which layers run on one thread. A layer too small to share between OpenMP's threads runs its
// passes on one, as PyTorch's CPU ops and MKL's small matrix products do below a grain size: a
// call that forks and joins the team pays the threads' round trip (`dlperf bench launch`: 1-3 us
// idle, and in training up to 7 us, where a team thread must be woken) for less work than that.
// On the 2-vCPU Xeon VM the mlp's relu over 16x64 values took 7.9 us a call on 2 threads and 1.2
// on one, and logreg at batch 16 trained an epoch in 0.50x the time with its layer on one thread
// (docs/benchmarks.md, "Small layers on one thread").
#pragma once

#include <cstdint>

#include "nn/graph.h"

namespace dlperf::cpu {

/// A convolution or linear layer runs on one thread when its forward pass computes at most this
/// many FLOPs: one core does that in 5-20 us, about what forking the team costs on top of a half
/// share of it (on the Xeon VM logreg's layer at batch 64, 1.0 MFLOP, trained faster on one thread
/// of two; at 256, 4 MFLOP, slower).
inline constexpr double kOneThreadMaxFlops = 1 << 20;
/// Any other layer (relu, pooling, batchnorm, dropout, a flatten's reorder: passes that stream
/// memory) when its input and output hold at most this many values together: on the Xeon VM a
/// relu over 2,048 of them took 1.2 us on one thread and 7.9 on two, a flatten over 18,432 0.92x
/// as long on one, and a max pooling over 59,392 1.4-1.6x as long.
inline constexpr int64_t kOneThreadMaxValues = 32768;

/// Whether layer `i` of `g` runs its passes on one thread when the engine has `threads`: false
/// on one thread anyway, for a layer that runs inside another (a fused relu) or is a view (a
/// flatten), and where the rule is off (DLPERF_CPU_SMALL_LAYERS=all-threads, ScopedSmallLayers).
bool runs_on_one_thread(const nn::Graph& g, size_t i, int threads);

/// The threads a training step on `g` computes on with `threads`: one where every layer runs on
/// one thread and every parameter tensor is small enough for the optimizer's loop to run on one
/// (hw::kParallelMinElements), else `threads`. The loader's workers have the rest of the cores.
int step_compute_threads(const nn::Graph& g, int threads);

/// Whether small layers run on one thread: yes, unless DLPERF_CPU_SMALL_LAYERS=all-threads (for
/// comparison) or a ScopedSmallLayers says otherwise.
bool small_layers_on_one_thread();

/// Sets the rule on or off for its scope (tests; `plan --against` plans a record as it ran).
class ScopedSmallLayers {
 public:
  explicit ScopedSmallLayers(bool on_one_thread);
  ~ScopedSmallLayers();
  ScopedSmallLayers(const ScopedSmallLayers&) = delete;
  ScopedSmallLayers& operator=(const ScopedSmallLayers&) = delete;

 private:
  const int before_;
};

}  // namespace dlperf::cpu
