// The sweep behind the plan's linear-layer figures (plan::EngineModel::output_block and
// linear_weight_short_outputs): oneDNN's inner product (a linear layer) alone, its three training
// passes timed apart, the median of 41 calls each after 3, at batches 1-1024, 64-4096 inputs and
// 10-512 outputs. On another CPU:
//
//   g++ -O2 -std=c++17 scripts/linear_sweep/sweep.cpp -ldnnl -o /tmp/linear_sweep
//   OMP_NUM_THREADS=1 /tmp/linear_sweep > sweep.csv && python3 scripts/linear_sweep/blocks.py sweep.csv
//
// It prints CSV: batch mb, inputs ic, outputs oc, and each pass's microseconds.
#include <dnnl.hpp>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <unordered_map>
using namespace dnnl; using tag = memory::format_tag; using dt = memory::data_type;
static engine eng(engine::kind::cpu, 0); static stream s(eng);
double timeit(primitive p, const std::unordered_map<int, memory>& args){
  for(int i=0;i<3;i++){p.execute(s,args);} s.wait(); std::vector<double> t;
  for(int i=0;i<41;i++){auto a=std::chrono::steady_clock::now(); p.execute(s,args); s.wait(); t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now()-a).count());}
  std::sort(t.begin(),t.end()); return t[20];
}
void fill(memory& m){float*p=(float*)m.get_data_handle(); size_t k=m.get_desc().get_size()/4; for(size_t i=0;i<k;i++)p[i]=(i%17)*0.01f-0.08f;}
int main(){
  printf("mb,ic,oc,fwd_us,bww_us,bwd_us\n");
  for(int mb:{1,16,64,256,1024}) for(int ic:{64,128,512,784,1152,4096}) for(int oc:{10,16,32,64,128,512}){
    memory::desc xm({mb,ic},dt::f32,tag::ab), ym({mb,oc},dt::f32,tag::ab), wm({oc,ic},dt::f32,tag::any), bm({oc},dt::f32,tag::a);
    auto fpd=inner_product_forward::primitive_desc(inner_product_forward::desc(prop_kind::forward_training,xm,wm,bm,ym),eng);
    auto bwpd=inner_product_backward_weights::primitive_desc(inner_product_backward_weights::desc(xm,fpd.weights_desc(),bm,ym),eng,fpd);
    auto bdpd=inner_product_backward_data::primitive_desc(inner_product_backward_data::desc(xm,fpd.weights_desc(),ym),eng,fpd);
    memory X(xm,eng),W(fpd.weights_desc(),eng),B(bm,eng),Y(ym,eng),DY(ym,eng),DW(fpd.weights_desc(),eng),DB(bm,eng),DX(xm,eng);
    for(auto*m:{&X,&W,&B,&DY}) fill(*m);
    double f=timeit(inner_product_forward(fpd),{{DNNL_ARG_SRC,X},{DNNL_ARG_WEIGHTS,W},{DNNL_ARG_BIAS,B},{DNNL_ARG_DST,Y}});
    double w=timeit(inner_product_backward_weights(bwpd),{{DNNL_ARG_SRC,X},{DNNL_ARG_DIFF_DST,DY},{DNNL_ARG_DIFF_WEIGHTS,DW},{DNNL_ARG_DIFF_BIAS,DB}});
    double d=timeit(inner_product_backward_data(bdpd),{{DNNL_ARG_DIFF_DST,DY},{DNNL_ARG_WEIGHTS,W},{DNNL_ARG_DIFF_SRC,DX}});
    printf("%d,%d,%d,%.2f,%.2f,%.2f\n",mb,ic,oc,f*1e6,w*1e6,d*1e6); fflush(stdout);
  }
}
