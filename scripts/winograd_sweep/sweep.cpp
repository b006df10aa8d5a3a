// The sweep behind the CPU engine's Winograd rule (src/backend/cpu/winograd.cpp) and the plan's
// Winograd figure (plan::EngineModel::winograd_efficiency): oneDNN's direct and Winograd kernels
// on the presets' 3x3 layer shapes at batches 1-256, the three training passes summed, the median
// of 7 calls each, with oneDNN alone (no dlperf in the way). On another CPU, run it to see whether
// the rule holds there:
//
//   g++ -O2 -std=c++17 scripts/winograd_sweep/sweep.cpp -ldnnl -o /tmp/sweep
//   OMP_NUM_THREADS=2 /tmp/sweep > sweep.csv && python3 scripts/winograd_sweep/fit.py sweep.csv
//
// It prints CSV: batch n, channels in (ic) and out (oc), map size h (square, stride 1, padding 1),
// output tiles of 4x4, the three passes' GFLOP, each kernel's milliseconds, and direct / Winograd.
#include <dnnl.hpp>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
using namespace dnnl; using tag = memory::format_tag; using dt = memory::data_type;
static engine eng(engine::kind::cpu, 0); static stream s(eng);
double timeit(primitive p, const std::unordered_map<int, memory>& args){
  p.execute(s,args); s.wait(); std::vector<double> t;
  for(int i=0;i<7;i++){auto a=std::chrono::steady_clock::now(); p.execute(s,args); s.wait(); t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now()-a).count());}
  std::sort(t.begin(),t.end()); return t[3];
}
double run(algorithm alg,int n,int ic,int oc,int h){
  memory::dims x={n,ic,h,h}, w={oc,ic,3,3}, y={n,oc,h,h}, st={1,1}, pd={1,1};
  memory::desc xm(x,dt::f32,tag::any), wm(w,dt::f32,tag::any), ym(y,dt::f32,tag::any), bm({oc},dt::f32,tag::a);
  auto fpd = convolution_forward::primitive_desc(convolution_forward::desc(prop_kind::forward_training,alg,xm,wm,bm,ym,st,pd,pd),eng);
  auto bwpd = convolution_backward_weights::primitive_desc(convolution_backward_weights::desc(alg,fpd.src_desc(),wm,bm,fpd.dst_desc(),st,pd,pd),eng,fpd);
  auto bdpd = convolution_backward_data::primitive_desc(convolution_backward_data::desc(alg,fpd.src_desc(),wm,fpd.dst_desc(),st,pd,pd),eng,fpd);
  memory X(fpd.src_desc(),eng),W(fpd.weights_desc(),eng),B(bm,eng),Y(fpd.dst_desc(),eng),DW(bwpd.diff_weights_desc(),eng),DB(bm,eng),DX(bdpd.diff_src_desc(),eng),WB(bdpd.weights_desc(),eng), DY(bwpd.diff_dst_desc(),eng);
  for(auto*m:{&X,&W,&Y,&DY,&WB}){float*p=(float*)m->get_data_handle(); size_t k=m->get_desc().get_size()/4; for(size_t i=0;i<k;i++)p[i]=(i%17)*0.01f-0.08f;}
  return timeit(convolution_forward(fpd),{{DNNL_ARG_SRC,X},{DNNL_ARG_WEIGHTS,W},{DNNL_ARG_BIAS,B},{DNNL_ARG_DST,Y}})
   + timeit(convolution_backward_weights(bwpd),{{DNNL_ARG_SRC,X},{DNNL_ARG_DIFF_DST,DY},{DNNL_ARG_DIFF_WEIGHTS,DW},{DNNL_ARG_DIFF_BIAS,DB}})
   + timeit(convolution_backward_data(bdpd),{{DNNL_ARG_DIFF_DST,DY},{DNNL_ARG_WEIGHTS,WB},{DNNL_ARG_DIFF_SRC,DX}});
}
int main(){
  struct Sh{int ic,oc,h;}; std::vector<Sh> shs={{32,64,14},{64,128,7},{64,64,28},{64,128,14},{128,128,14},{128,256,7},{256,256,7},{512,512,4},{32,64,16},{64,128,8},{64,64,32},{128,128,16},{256,256,8},{16,32,16},{32,64,8},{16,16,32}};
  printf("n,ic,oc,h,tiles,gflop,direct_ms,wino_ms,ratio\n");
  for(int n:{1,4,16,64,256}) for(auto sh:shs){
    if((double)n*sh.ic*sh.oc*sh.h*sh.h*18 > 3e10) continue;
    double d=run(algorithm::convolution_direct,n,sh.ic,sh.oc,sh.h), w=run(algorithm::convolution_winograd,n,sh.ic,sh.oc,sh.h);
    int t=(sh.h+3)/4; printf("%d,%d,%d,%d,%d,%.3f,%.3f,%.3f,%.2f\n",n,sh.ic,sh.oc,sh.h,n*t*t,2.0*n*sh.ic*sh.oc*sh.h*sh.h*9*3/1e9,d*1e3,w*1e3,d/w); fflush(stdout);
  }
}
