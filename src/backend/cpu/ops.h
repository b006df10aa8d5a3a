// The CPU ops over oneDNN (and a little own code where oneDNN has no primitive). Each one is
// built for fixed shapes: it asks oneDNN for primitives once and runs them every step.
//
// `src` is the layout the producer has; an op that can take it as is (pooling, batchnorm,
// relu) keeps it, one that has a preference (conv, linear) states it via input_md().
#pragma once

#include <functional>
#include <optional>
#include <string_view>

#include "backend/cpu/common.h"
#include "nn/graph.h"
#include "ops/op.h"

namespace dlperf::cpu {

/// How make_op builds an op, beyond its shapes.
struct OpOptions {
  bool fuse_relu = false;  ///< batchnorm2d and add only: the relu after it runs inside it
  uint64_t seed = 0;       ///< drives dropout's masks
  bool need_dx = true;     ///< false: the op may skip its input's gradient (the first layer: nothing needs the data's)
  Compute compute = Compute::fp32;  ///< what conv2d and linear compute from and write (common.h)
  bool fp32_output = false;         ///< conv2d, linear: write fp32 whatever `compute` (the logits the loss reads)
};

/// Makes the op for `kind`. `in` are the producer layouts (their data type included: ops other
/// than conv2d and linear compute in the type they get), `dims` the logical input shapes.
std::unique_ptr<Op> make_op(ops::OpKind kind, const ops::OpAttrs& a, const std::vector<md>& in,
                            const std::vector<Dims>& dims, const std::string& name, const OpOptions& options = {});

/// What an op built by make_op takes and allocates, found from oneDNN's descriptors without
/// building it (no memory, no JIT code): the memory planner's view of the op (layouts.cpp). Each
/// op's footprint function sits beside its constructor and follows the same decisions.
struct Footprint {
  std::vector<md> inputs;      ///< the layouts it reads (input_md)
  md output;                   ///< the layout it writes (output_md)
  std::vector<size_t> params;  ///< each parameter tensor's bytes (its gradient and optimizer states alike)
  std::vector<std::pair<MemCategory, size_t>> buffers;  ///< its other allocations
  size_t scratchpad = 0;       ///< the most any of its primitives asks for
};
Footprint footprint(ops::OpKind kind, const ops::OpAttrs& a, const std::vector<md>& in, const std::vector<Dims>& dims,
                    const OpOptions& options = {});

/// The layouts each layer is given, graph node by node: its inputs as Network's constructor hands
/// them over (the model input plain, then what each producer chose to write), from the walk
/// engine_buffers makes (layouts.cpp). Empty for a relu that runs inside its batchnorm and for a
/// flatten that is a view. `dlperf bench conv` builds each conv on these, so that it times the
/// kernels training runs (oneDNN picks another one for a plain input).
std::vector<std::vector<md>> given_input_layouts(const nn::Graph& g, const std::string& precision);

/// oneDNN's element-wise sum of two `m`-laid-out tensors into a third: how the network sums a
/// value's gradients from several readers.
dnnl::binary::primitive_desc add_pass(const md& m);

/// What the engine's kernel timings (time_direct_over_winograd, time_max_pool_16c) return in
/// place of a ratio where other work on the CPUs left too few undisturbed samples
/// (best_undisturbed_times): the choice then keeps the default kernel and says why.
inline constexpr double kTooBusyToTime = -1;
/// Who runs max pooling on nChw16c blocks, AVX-512 CPUs' activation layout: dlperf's own code or
/// oneDNN's. Both are timed once per process (pooling.cpp says why: 4-15x apart on an Intel Xeon,
/// close on the Zens), or DLPERF_CPU_MAX_POOL=dlperf|onednn says. Run records keep `why`.
struct MaxPool16cChoice {
  bool own = false;               ///< dlperf's code runs
  std::string why;                ///< "dlperf's (oneDNN's training max pooling timed 4.21x dlperf's here ...)"
  double onednn_over_dlperf = 0;  ///< the timed ratio; 0 = not timed
};
/// Made on the first call, then the same for the process: from the machine profile's timing
/// where `dlperf bench all` kept one for this CPU and thread count (so that every run here
/// chooses alike), else timed now (about 10 ms). Throws Error for a DLPERF_CPU_MAX_POOL that is
/// none of auto, dlperf and onednn.
const MaxPool16cChoice& max_pool_16c_choice();
/// The choice if a network or a plan has made it already (it had a max pooling on nChw16c), else null.
const MaxPool16cChoice* max_pool_16c_choice_if_made();
/// How the choice is made: `asked` is DLPERF_CPU_MAX_POOL's value ("auto" when unset), and
/// `onednn_over_dlperf` times the two codes (only called for "auto" in a build with the own code);
/// `timed_by` says how, where not by this process ("the median of 7 rounds of 'dlperf bench all'").
MaxPool16cChoice choose_max_pool_16c(std::string_view asked, bool own_code_built,
                                     const std::function<double()>& onednn_over_dlperf, std::string_view timed_by = {});
/// oneDNN's nChw16c max pooling's time over dlperf's, forward and backward on `medium`'s pool1 at
/// batch 32, the best of 5 undisturbed samples each (about 5-20 ms); kTooBusyToTime where other
/// work left too few; 0 in a build without AVX-512 code of its own.
double time_max_pool_16c();
/// Tests only: build nChw16c max pooling with dlperf's code (true) or oneDNN's (false) whatever
/// the choice, or (nullopt) as it says again. Throws for true in a build without AVX-512.
void for_tests_run_max_pool_16c(std::optional<bool> own);

/// Whether 3x3 convolutions may run as Winograd (oneDNN's F(4x4, 3x3) kernel on AVX-512, fp32;
/// winograd.cpp says why and when it pays). The direct and Winograd kernels are timed once per
/// process, or DLPERF_CPU_WINOGRAD=on|off says. Run records keep `why`.
struct WinogradChoice {
  bool on = false;                  ///< convs that winograd_pays run as Winograd
  std::string why;                  ///< "Winograd for 3x3 convolutions large enough (the direct kernel timed 2.20x ...)"
  double direct_over_winograd = 0;  ///< the timed ratio; 0 = not timed, or no Winograd kernel here
  bool too_busy = false;            ///< other work left too few undisturbed samples to time (kTooBusyToTime)
};
/// Made on the first call, then the same for the process: from the machine profile's timing
/// where `dlperf bench all` kept one for this CPU and thread count (so that every run here
/// chooses alike), else timed now (about 50 ms). Throws Error for a DLPERF_CPU_WINOGRAD that is
/// none of auto, on and off.
const WinogradChoice& winograd_choice();
/// The choice if a network or a plan has made it already (it had a conv that could use it), else null.
const WinogradChoice* winograd_choice_if_made();
/// How the choice is made: `asked` is DLPERF_CPU_WINOGRAD's value ("auto" when unset), and
/// `direct_over_winograd` times the two kernels (0 where oneDNN has no Winograd one); `timed_by`
/// says how, where not by this process ("the median of 7 rounds of 'dlperf bench all'").
WinogradChoice choose_winograd(std::string_view asked, const std::function<double()>& direct_over_winograd,
                               std::string_view timed_by = {});
/// The direct kernel's time over Winograd's for a 3x3 convolution's three training passes on 4
/// images of 64 channels at 28x28, the best of 9 undisturbed samples each, alternating (about 50
/// ms); kTooBusyToTime where other work left too few; 0 where oneDNN has no Winograd kernel.
double time_direct_over_winograd();
/// Whether oneDNN has a Winograd kernel here (AVX-512, fp32; not under ONEDNN_MAX_CPU_ISA=AVX2),
/// whatever the choice says.
bool winograd_kernel_here();
/// The rule, by shape: a 3x3 stride-1 conv of 16-channel blocks, at least 32 channels in and out,
/// whose output fills enough 4x4 tiles (64 from 64 input channels on, else 256). `x` is its input.
bool winograd_pays(const ops::OpAttrs& a, const Dims& x);
/// Which convolutions run as Winograd, where it is not the process's choice to say.
enum class WinogradUse {
  off,             ///< none
  where_it_pays,   ///< those winograd_pays picks, as where the choice is on
  every_3x3,       ///< every 3x3 stride-1 conv oneDNN takes (tests, on shapes the rule leaves direct)
};
/// For its scope, convolutions built use Winograd as `use` says instead of as winograd_choice()
/// does: `plan --against` lays out a run made under another choice (an older record, or
/// DLPERF_CPU_WINOGRAD), and tests force either code. Not nested.
class ScopedWinograd {
 public:
  explicit ScopedWinograd(WinogradUse use);
  ~ScopedWinograd();
  ScopedWinograd(const ScopedWinograd&) = delete;
  ScopedWinograd& operator=(const ScopedWinograd&) = delete;
};
/// Whether the conv runs as Winograd: fp32, the choice on (or a ScopedWinograd's) and the rule
/// met. Where oneDNN turns a layout down, the conv falls back to direct (conv2d.cpp).
bool conv_runs_winograd(const ops::OpAttrs& a, const Dims& x, Compute compute);

/// Whether the engine runs a bf16 conv of input `x` on AMX tiles (its forward pass; the layout
/// search prefers such a layout, conv2d.cpp), as a run records it (Network::amx_layers). For the
/// plan, which times such passes against the AMX peak. False without AMX (has_amx_kernels).
bool conv_runs_amx(const ops::OpAttrs& a, const Dims& x);
/// The same for a bf16 linear layer of input `x` ([N, features]); `logits`: it writes fp32.
bool linear_runs_amx(const ops::OpAttrs& a, const Dims& x, bool logits);

/// Dropout's mask for one step is a function of (seed, step, element) only.
void set_dropout_step(uint64_t step);

/// Softmax cross-entropy with label smoothing over plain [N, C] logits. Rows at or past
/// `valid` (padding of a last, partial batch) count for nothing.
struct LossResult {
  double loss = 0;      ///< mean over valid rows
  int64_t correct = 0;  ///< argmax == label among valid rows
};
LossResult softmax_cross_entropy(const float* logits, const int32_t* labels, int64_t n,
                                 int64_t classes, int64_t valid, double smoothing,
                                 float* dlogits /* nullable */);

}  // namespace dlperf::cpu
