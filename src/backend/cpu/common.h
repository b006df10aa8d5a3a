// Shared pieces of the oneDNN CPU backend: engine and stream, memories that own tracked
// buffers, the user-managed scratchpad, parameters, and the op interface the network runs.
//
// Layout rule: an op asks oneDNN for its preferred layouts (format_tag::any) and the network
// keeps activations in them from layer to layer; reorders happen only where a consumer wants a
// different layout, which in practice is at the model's edges (input, flatten).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <atomic>
#include <bit>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "core/memory.h"
#include "core/tensor.h"
#include "nn/graph.h"
#include "profile/recorder.h"

namespace dlperf::bench {
struct Ceilings;
}  // namespace dlperf::bench

namespace dlperf::cpu {

using dnnl::memory;
using md = dnnl::memory::desc;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

dnnl::engine& engine();
dnnl::stream& stream();

memory::dims to_dnnl(const Dims& d);
/// Dense row-major layout: x, nc or nchw.
md plain_md(const Dims& d);
/// "Let the primitive choose".
md any_md(const Dims& d);
/// The same dims and layout holding another data type (a bf16 copy of an f32 tensor).
md with_type(const md& m, dt type);
/// Number of floats a layout occupies, padding included.
inline size_t floats_in(const md& m) { return m.get_size() / sizeof(float); }

/// bf16 is the top half of an fp32: widened exactly, and narrowed rounding to nearest even (as
/// VCVTNEPS2BF16 and oneDNN's kernels round), a NaN kept a (quiet) NaN. Own code's scalar paths.
inline float from_bf16(uint16_t v) { return std::bit_cast<float>(uint32_t(v) << 16); }
inline uint16_t to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/// What conv2d and linear compute from and write. fp32: fp32 inputs and weights as stored. bf16
/// (CPUs with AVX512-BF16): bf16 inputs, output gradients and copies of the fp32 master weights;
/// they write bf16 (network.h). f32_copies: the bf16 path's weight copies and conversions with f32
/// copies, so tests run that path on CPUs where oneDNN has no bf16 (precision "f32-copies", which
/// no command offers).
enum class Compute { fp32, bf16, f32_copies };
inline bool makes_copies(Compute c) { return c != Compute::fp32; }
inline dt copy_type(Compute c) { return c == Compute::bf16 ? dt::bf16 : dt::f32; }
/// "fp32", "bf16" or "f32-copies"; anything else throws.
Compute compute_for(const std::string& precision);

/// Times each of `passes` in turn, round after round after a warm-up each, on OpenMP's threads,
/// and keeps each one's best time among its undisturbed samples: those in which the scheduler
/// took the CPU from none of the threads (getrusage's involuntary context switches; a VM's
/// hypervisor giving the vCPU to another guest is not seen there). Another
/// process's time slice cutting into a sample stalls every thread at the next barrier, and a
/// best of a few did not see through a steady load: while two busy loops shared the 2-core Xeon VM, the
/// direct convolution's time over Winograd's read 0.38x to 1.50x in four processes (1.57x idle),
/// and each process trained with what it read. Stops once every pass has `need` undisturbed
/// samples, or after `most` rounds; nullopt where one got fewer: the machine was too busy to
/// compare them. `disturbed` (optional) gets how many samples were left out.
std::optional<std::vector<double>> best_undisturbed_times(const std::vector<std::function<void()>>& passes, int need, int most,
                                                          int* disturbed = nullptr);
/// The kernel timings `dlperf bench all` kept in the machine profile for this CPU and the engine's
/// thread count (bench::Ceilings::direct_over_winograd, max_pool_onednn_over_dlperf: 0 where none),
/// read once. The kernel choices take them in place of timing, so every run here chooses alike.
const bench::Ceilings& kept_kernel_timings();

/// A choice the engine makes once per process, such as which of two kernels timed faster here:
/// made on the first get() (again on the next if making it threw), then the same; if_made()
/// reads it without making it, for run records that report it only where a run needed it.
template <class T>
class ChosenOnce {
 public:
  const T& get(const std::function<T()>& make) {
    std::call_once(once_, [&] {
      value_ = make();
      made_ = true;
    });
    return value_;
  }
  const T* if_made() const { return made_ ? &value_ : nullptr; }

 private:
  std::once_flag once_;
  T value_{};
  std::atomic<bool> made_{false};
};

/// A oneDNN memory over a buffer from the tracked allocator.
struct Mem {
  Mem() = default;
  Mem(const md& desc, MemCategory category);
  memory mem;
  BufferPtr buffer;
  bool empty() const { return !buffer; }
  float* f32() const { return static_cast<float*>(buffer->data()); }
  const md& desc() const { return mem_desc_; }
  /// The same bytes seen through another layout of equal size (a view, e.g. flatten).
  memory view(const md& other) const;
  /// A Mem sharing this one's buffer through another layout of equal size.
  Mem alias(const md& other) const;
  void zero();

 private:
  md mem_desc_;
};

/// A primitive and the scratchpad it needs (all primitives use a user scratchpad, so the
/// workspace bytes are counted by the allocator and shared between primitives).
struct Prim {
  dnnl::primitive prim;
  md scratch;
  profile::Phase phase = profile::Phase::forward;  ///< how the profiler files its executions
  template <class P>
  static Prim of(const typename P::primitive_desc& pd) {
    using namespace dnnl;
    constexpr bool weights = std::is_same_v<P, convolution_backward_weights> || std::is_same_v<P, inner_product_backward_weights>;
    constexpr bool data = std::is_same_v<P, convolution_backward_data> || std::is_same_v<P, inner_product_backward_data> ||
                          std::is_same_v<P, batch_normalization_backward> || std::is_same_v<P, eltwise_backward> ||
                          std::is_same_v<P, pooling_backward>;
    return {P(pd), pd.scratchpad_desc(),
            weights ? profile::Phase::backward_weight : data ? profile::Phase::backward_data : profile::Phase::forward};
  }
};
/// Throws Error unless oneDNN can index every tensor of `n` (its inputs, output and weights,
/// the batch included): at most kMaxIndexedValues each.
void check_indexable(const nn::Node& n);
dnnl::primitive_attr default_attr();
/// Runs `p` on the stream with `args` plus the shared scratchpad (from `scratch_offset` bytes on,
/// past what the caller keeps at its front: shared_scratch), then waits.
void run(const Prim& p, std::unordered_map<int, memory> args, size_t scratch_offset = 0);
/// The shared scratchpad's front, grown to at least `bytes` (its contents are lost when it grows):
/// room for an op's own temporaries between its primitives (conv_gemm.cpp's unfolded input),
/// counted as workspace and shared as the primitives' scratchpads are. Reserve the total first
/// (temporaries and the primitive's scratchpad behind them), then run with that offset.
std::byte* shared_scratch(size_t bytes);
void reorder(const memory& src, const memory& dst);
/// Gives the shared scratchpad back to the allocator. It only grows, and it is live memory, so a
/// run that follows a bigger one in the same process (the lab runs many; the tests run the
/// benchmarks' large shapes) would count the bigger run's scratchpad in its peak. Safe between
/// any two run() calls: the next one allocates what it needs.
void release_scratchpad();

/// How a parameter starts.
enum class Init { uniform_fan_in, ones, zeros };

/// A learnable tensor: plain logical dims, physical layout chosen by its op, value and grad
/// in that layout. The optimizer treats both as flat float arrays (padding stays zero).
struct Param {
  std::string name;
  Dims dims;
  md layout;
  Mem value, grad;
  Init init = Init::zeros;
  int64_t fan_in = 1;
  size_t floats() const { return floats_in(layout); }
};

/// Copies a parameter-shaped buffer in `layout` to/from plain row-major floats.
std::vector<float> to_plain(const md& layout, const Dims& dims, const Mem& m);
void from_plain(const md& layout, const Dims& dims, const float* plain, Mem& m);

/// One op of a network, as the network runs it. Inputs arrive in the layouts the op asked for
/// (input_md); a null diff_in memory means that gradient is not needed.
/// Whether oneDNN runs this pass on AMX tiles (Intel's matrix units: "brgconv:avx512_core_amx_bf16",
/// "brgemm:avx512_core_amx_bf16" and the like), which multiply bf16 at about 14x the AVX-512 FMA
/// peak on a Xeon with them (docs/benchmarks.md).
bool on_amx(const dnnl::primitive_desc_base& pd);

class Op {
 public:
  virtual ~Op() = default;
  virtual md input_md(int i) const = 0;
  virtual md output_md() const = 0;
  virtual void forward(const std::vector<memory>& in, const memory& out, bool training) = 0;
  virtual void backward(const std::vector<memory>& in, const memory& out, const memory& diff_out,
                        const std::vector<memory>& diff_in) = 0;
  std::vector<std::unique_ptr<Param>>& params() { return params_; }
  /// Persistent non-learnable state saved in checkpoints (batchnorm running statistics).
  virtual std::vector<std::pair<std::string, Mem*>> buffers() { return {}; }
  /// Where an op has more than one way to compute, the one it runs: "winograd" for a conv that
  /// runs so, "amx" for a bf16 conv or linear layer whose forward pass oneDNN runs on AMX tiles
  /// (on_amx); empty otherwise.
  virtual std::string algorithm() const { return {}; }
  /// The passes a conv runs as matrix products rather than as oneDNN's convolution (conv_gemm.h),
  /// in order: "forward, backward-data, backward-weights" or a part; empty for none.
  virtual std::string matrix_product_passes() const { return {}; }

 protected:
  Param& add_param(std::string name, Dims dims, const md& layout, Init init, int64_t fan_in);
  std::vector<std::unique_ptr<Param>> params_;
};

}  // namespace dlperf::cpu
