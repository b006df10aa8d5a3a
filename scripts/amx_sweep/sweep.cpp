// The sweep behind the plan's AMX figures (plan::EngineModel::amx_*): oneDNN's bf16 kernels as the
// CPU engine runs them on a CPU with AMX (Xeons from Sapphire Rapids on): convolutions with nhwc
// activations (src/backend/cpu/conv2d.cpp takes that layout there), inner products on plain rows,
// bf16 inputs, weights and output gradients, fp32 weight gradients. Each pass alone, the median of
// 9 calls after one warm-up, with oneDNN alone (no dlperf in the way). Run it on such a CPU:
//
//   g++ -O2 -std=c++17 scripts/amx_sweep/sweep.cpp -ldnnl -o /tmp/amx_sweep
//   OMP_NUM_THREADS=2 /tmp/amx_sweep > sweep.csv && python3 scripts/amx_sweep/fit.py sweep.csv
//
// CSV: kind (conv or linear), pass (forward, backward_data, backward_weights), batch n, channels or
// features in and out, map size h (square, 3x3, stride 1, padding 1; 1 for linear), GFLOP, ms,
// and the kernel oneDNN chose.
#include <dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;
static engine eng(engine::kind::cpu, 0);
static stream s(eng);

double median_ms(const primitive& p, const std::unordered_map<int, memory>& args) {
  p.execute(s, args);
  s.wait();
  std::vector<double> t;
  for (int i = 0; i < 9; ++i) {
    const auto a = std::chrono::steady_clock::now();
    p.execute(s, args);
    s.wait();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[4];
}

memory filled(const memory::desc& d) {
  memory m(d, eng);
  std::memset(m.get_data_handle(), 0x3c, d.get_size());  // bf16 0x3c3c is about 0.011; fp32 likewise small
  return m;
}

void row(const char* kind, const char* pass, int n, int in, int out, int h, double flops, double ms, const char* impl) {
  std::printf("%s,%s,%d,%d,%d,%d,%.6f,%.4f,%s\n", kind, pass, n, in, out, h, flops / 1e9, ms, impl);
}

void conv(int n, int ic, int oc, int h) {
  const memory::dims x{n, ic, h, h}, w{oc, ic, 3, 3}, y{n, oc, h, h}, st{1, 1}, pd{1, 1};
  const memory::desc xm(x, dt::bf16, tag::nhwc), ym(y, dt::bf16, tag::nhwc), wm(w, dt::bf16, tag::any), wf(w, dt::f32, tag::any);
  const convolution_forward::primitive_desc f(
      convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, xm, wm, memory::desc(), ym, st, pd, pd), eng);
  const convolution_backward_data::primitive_desc d(
      convolution_backward_data::desc(algorithm::convolution_direct, xm, wm, ym, st, pd, pd), eng, f);
  const convolution_backward_weights::primitive_desc g(
      convolution_backward_weights::desc(algorithm::convolution_direct, xm, wf, memory::desc(), ym, st, pd, pd), eng, f);
  const memory X = filled(xm), Y = filled(ym), W = filled(f.weights_desc()), WD = filled(d.weights_desc()), DX = filled(xm),
               DW = filled(g.diff_weights_desc());
  const double flops = 2.0 * n * oc * ic * 9 * h * h;
  row("conv", "forward", n, ic, oc, h, flops, median_ms(convolution_forward(f), {{DNNL_ARG_SRC, X}, {DNNL_ARG_WEIGHTS, W}, {DNNL_ARG_DST, Y}}),
      f.impl_info_str());
  row("conv", "backward_data", n, ic, oc, h, flops,
      median_ms(convolution_backward_data(d), {{DNNL_ARG_DIFF_DST, Y}, {DNNL_ARG_WEIGHTS, WD}, {DNNL_ARG_DIFF_SRC, DX}}), d.impl_info_str());
  row("conv", "backward_weights", n, ic, oc, h, flops,
      median_ms(convolution_backward_weights(g), {{DNNL_ARG_SRC, X}, {DNNL_ARG_DIFF_DST, Y}, {DNNL_ARG_DIFF_WEIGHTS, DW}}), g.impl_info_str());
}

void linear(int n, int in, int out) {
  const memory::desc xm({n, in}, dt::bf16, tag::ab), ym({n, out}, dt::bf16, tag::ab), wm({out, in}, dt::bf16, tag::any),
      wf({out, in}, dt::f32, tag::any), bm({out}, dt::f32, tag::a);
  const inner_product_forward::primitive_desc f(inner_product_forward::desc(prop_kind::forward_training, xm, wm, bm, ym), eng);
  const inner_product_backward_data::primitive_desc d(inner_product_backward_data::desc(xm, wm, ym), eng, f);
  const inner_product_backward_weights::primitive_desc g(inner_product_backward_weights::desc(xm, wf, bm, ym), eng, f);
  const memory X = filled(xm), Y = filled(ym), W = filled(f.weights_desc()), B = filled(bm), DX = filled(xm), DW = filled(g.diff_weights_desc()),
               DB = filled(bm);
  const double flops = 2.0 * n * in * out;
  row("linear", "forward", n, in, out, 1, flops,
      median_ms(inner_product_forward(f), {{DNNL_ARG_SRC, X}, {DNNL_ARG_WEIGHTS, W}, {DNNL_ARG_BIAS, B}, {DNNL_ARG_DST, Y}}), f.impl_info_str());
  row("linear", "backward_data", n, in, out, 1, flops,
      median_ms(inner_product_backward_data(d), {{DNNL_ARG_DIFF_DST, Y}, {DNNL_ARG_WEIGHTS, W}, {DNNL_ARG_DIFF_SRC, DX}}), d.impl_info_str());
  row("linear", "backward_weights", n, in, out, 1, flops,
      median_ms(inner_product_backward_weights(g),
                {{DNNL_ARG_SRC, X}, {DNNL_ARG_DIFF_DST, Y}, {DNNL_ARG_DIFF_WEIGHTS, DW}, {DNNL_ARG_DIFF_BIAS, DB}}),
      g.impl_info_str());
}

int main() {
  std::printf("kind,pass,n,in,out,h,gflop,ms,impl\n");
  // The presets' 3x3 layers past their first (small, medium, large, resnet18 on 28x28 and 32x32).
  const int convs[][3] = {{16, 32, 14}, {32, 64, 14}, {64, 128, 7}, {64, 64, 28}, {64, 128, 14}, {128, 128, 14}, {128, 256, 7},
                          {256, 256, 7}, {512, 512, 4}, {32, 64, 16}, {64, 64, 32}, {128, 128, 16}, {256, 256, 8}};
  for (int n : {16, 64, 256})
    for (const auto& c : convs)
      if (double(n) * c[0] * c[1] * c[2] * c[2] * 18 <= 2e11) conv(n, c[0], c[1], c[2]);
  const int linears[][2] = {{1152, 150}, {150, 10}, {784, 64}, {64, 10}, {784, 10}, {2048, 512}, {512, 10}, {4096, 256}, {512, 512}};
  for (int n : {16, 64, 256, 1024})
    for (const auto& l : linears) linear(n, l[0], l[1]);
}
