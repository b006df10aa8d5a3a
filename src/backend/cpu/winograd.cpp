// Which 3x3 convolutions run as Winograd: oneDNN's F(4x4, 3x3) kernel (jit_wino_4x3, AVX-512,
// fp32), which computes a 4x4 tile of outputs from a 6x6 tile of inputs with 36 multiplies per
// channel pair where the direct convolution does 144: it moves work from the FMA units into
// transforms that stream memory, and pays off where the transformed tiles make long enough
// GEMMs. The numbers behind the rule below (a oneDNN-only sweep on the Intel Xeon VM, family 6
// model 207, 2 threads, 2026-11-28; forward + backward-weights + backward-data, median of 7;
// scripts/winograd_sweep/, whose fit.py checks the rule on a sweep of another CPU):
//
//   64->64 on 28x28:    batch 1 1.45x faster, 4 2.24x, 16 1.89x, 64 2.45x, 256 2.57x
//   32->64 on 14x14:    batch 4 0.92x, 16 0.88x, 64 1.28x, 256 1.31x
//   64->128 on 7x7:     batch 4 0.53x, 16 0.85x, 64 1.37x, 256 1.33x
//   512->512 on 4x4:    batch 4 0.31x, 16 0.74x, 64 1.73x, 256 1.95x
//   16->32, 16->16:     0.36-1.09x at every batch
//
// Over 80 (shape, batch) points the rule picked the faster code in all but 5, which lost 2.7 ms
// of 1,169 (0.2%). Its error against float64 was 1-3e-6 of the largest output, where the direct
// kernel's is 3e-7: well inside fp32 training's tolerance (and cuDNN runs Winograd on GPUs).
// oneDNN's own convolution_auto took Winograd for every one of those shapes, batch 1 included,
// hence a rule of dlperf's. On other CPUs the balance may differ, so the engine times both codes
// once per process (winograd_choice) and uses Winograd only where it is clearly faster.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "backend/cpu/ops.h"
#include "bench/machine_profile.h"
#include "core/error.h"

namespace dlperf::cpu {

bool winograd_pays(const ops::OpAttrs& a, const Dims& x) {
  if (x.size() != 4 || a.kernel != 3 || a.stride != 1 || a.padding > 1) return false;
  const int64_t ic = x[1], oc = a.out_channels;
  if (ic % 16 != 0 || oc % 16 != 0 || ic < 32 || oc < 32) return false;  // oneDNN's kernel: 16-channel blocks
  const int64_t oh = x[2] + 2 * a.padding - 2, ow = x[3] + 2 * a.padding - 2;
  // Output tiles of 4x4 the outputs fill, which set the length of the transformed GEMMs.
  const double tiles = double(x[0] * oh * ow) / 16;
  return tiles >= (ic >= 64 ? 64 : 256);
}

namespace {
using namespace dnnl;

std::optional<WinogradUse> scoped;  // ScopedWinograd's

ChosenOnce<WinogradChoice> the_choice;  // winograd_choice

// A convolution's three training passes, ready to run with `alg` on 4 images of 64 channels at
// 28x28 (a `large` layer at batch 4, where Winograd timed 2.2x faster on the Xeon) in buffers of
// their own, untracked, seen by no profiler. Throws dnnl::error where oneDNN has no such kernel
// (Winograd on a CPU without AVX-512).
struct ConvPassesToTime {
  convolution_forward fwd;
  convolution_backward_weights bww;
  convolution_backward_data bwd;
  memory src, wei, dst, dw, w_bwd, dx;

  explicit ConvPassesToTime(algorithm alg) {
    const memory::dims x = {4, 64, 28, 28}, w = {64, 64, 3, 3}, one = {1, 1};
    const md ax(x, dt::f32, tag::any), aw(w, dt::f32, tag::any);
    const auto fwd_pd = convolution_forward::primitive_desc(
        convolution_forward::desc(prop_kind::forward_training, alg, ax, aw, ax, one, one, one), engine());
    const auto bww_pd = convolution_backward_weights::primitive_desc(
        convolution_backward_weights::desc(alg, fwd_pd.src_desc(), aw, fwd_pd.dst_desc(), one, one, one), engine(), fwd_pd);
    const auto bwd_pd = convolution_backward_data::primitive_desc(
        convolution_backward_data::desc(alg, fwd_pd.src_desc(), aw, fwd_pd.dst_desc(), one, one, one), engine(), fwd_pd);
    fwd = convolution_forward(fwd_pd), bww = convolution_backward_weights(bww_pd), bwd = convolution_backward_data(bwd_pd);
    src = memory(fwd_pd.src_desc(), engine()), wei = memory(fwd_pd.weights_desc(), engine());
    dst = memory(fwd_pd.dst_desc(), engine()), dw = memory(bww_pd.diff_weights_desc(), engine());
    w_bwd = memory(bwd_pd.weights_desc(), engine()), dx = memory(bwd_pd.diff_src_desc(), engine());
    for (const memory* m : {&src, &wei, &dst, &w_bwd}) {
      float* p = static_cast<float*>(m->get_data_handle());
      for (size_t i = 0; i < floats_in(m->get_desc()); ++i) p[i] = float(i % 17) * 0.01f - 0.08f;
    }
  }
  void run() {
    fwd.execute(stream(), {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
    bww.execute(stream(), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, dst}, {DNNL_ARG_DIFF_WEIGHTS, dw}});
    bwd.execute(stream(), {{DNNL_ARG_DIFF_DST, dst}, {DNNL_ARG_WEIGHTS, w_bwd}, {DNNL_ARG_DIFF_SRC, dx}});
    stream().wait();
  }
};

}  // namespace

double time_direct_over_winograd() try {
  ConvPassesToTime winograd(algorithm::convolution_winograd), direct(algorithm::convolution_direct);
  const auto best = best_undisturbed_times({[&] { winograd.run(); }, [&] { direct.run(); }}, 9, 25);
  return best ? (*best)[1] / (*best)[0] : kTooBusyToTime;
} catch (const dnnl::error&) {
  return 0.0;  // no Winograd kernel here
}

bool winograd_kernel_here() {
  static const bool here = [] {
    try {
      ConvPassesToTime probe(algorithm::convolution_winograd);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return here;
}

WinogradChoice choose_winograd(std::string_view asked, const std::function<double()>& direct_over_winograd, std::string_view timed_by) {
  if (asked == "off") return {false, "direct only (DLPERF_CPU_WINOGRAD=off)", 0};
  if (asked != "auto" && asked != "on")
    throw Error(fmt::format("DLPERF_CPU_WINOGRAD={} is not a choice: use auto, on or off (or unset it)", asked));
  WinogradChoice c;
  c.direct_over_winograd = direct_over_winograd();  // 0: oneDNN has no Winograd kernel here
  c.too_busy = c.direct_over_winograd == kTooBusyToTime;
  if (c.too_busy) c.direct_over_winograd = 0;  // not timed
  if (c.direct_over_winograd == 0 && !c.too_busy) {
    c.why = "direct only (oneDNN 2.6 has a Winograd kernel for AVX-512 CPUs only)";
  } else if (asked == "on") {
    c.on = true;
    c.why = "Winograd for 3x3 convolutions large enough (DLPERF_CPU_WINOGRAD=on)";
  } else if (c.too_busy) {
    c.why = "direct only (other work held the CPUs while the direct and Winograd kernels were timed, so neither time could "
            "be trusted: an idle machine times them, or DLPERF_CPU_WINOGRAD=on sets Winograd)";
  } else {
    // Only where clearly faster: its transformed tiles take memory, and its error is several times
    // the direct kernel's.
    c.on = c.direct_over_winograd > 1.3;
    c.why = fmt::format("{} (the direct kernel timed {:.2f}x Winograd's on 64 channels at 28x28, batch 4{}; "
                        "Winograd is taken above 1.3x)",
                        c.on ? "Winograd for 3x3 convolutions large enough" : "direct only", c.direct_over_winograd,
                        timed_by.empty() ? "" : fmt::format(", {}", timed_by));
  }
  return c;
}

const WinogradChoice& winograd_choice() {
  return the_choice.get([] {
    const char* env = std::getenv("DLPERF_CPU_WINOGRAD");
    const std::string_view asked = env ? env : "auto";
    // Where the two kernels time close, each process's own timing falls either side of 1.3x (10
    // processes on the AMX Xeon VM: 1.26-1.40x, 4 direct, 6 Winograd), so runs of the same job
    // differed in speed and memory; bench all's median makes one choice for all of them.
    const bench::Ceilings& kept = kept_kernel_timings();
    if (kept.direct_over_winograd > 0 && winograd_kernel_here())
      return choose_winograd(asked, [&] { return kept.direct_over_winograd; }, kept.kernels_source());
    return choose_winograd(asked, time_direct_over_winograd);
  });
}

const WinogradChoice* winograd_choice_if_made() { return the_choice.if_made(); }

ScopedWinograd::ScopedWinograd(WinogradUse use) { scoped = use; }
ScopedWinograd::~ScopedWinograd() { scoped.reset(); }

bool conv_runs_winograd(const ops::OpAttrs& a, const Dims& x, Compute compute) {
  if (compute != Compute::fp32) return false;  // oneDNN 2.6's Winograd is fp32 only
  if (!scoped) return winograd_pays(a, x) && winograd_choice().on;
  switch (*scoped) {
    case WinogradUse::off: return false;
    case WinogradUse::where_it_pays: return winograd_pays(a, x);
    case WinogradUse::every_3x3: return a.kernel == 3 && a.stride == 1;
  }
  return false;
}

}  // namespace dlperf::cpu
