// The CPU emulation of CUDA (emu/cuda_emu.h) is only worth its tests if it runs kernels as a GPU
// would where our kernels depend on it: every (block, thread) once, barriers that hold every
// thread back, shuffles that read the right lane, and a barrier some threads skip reported
// rather than run past; and if its stream capture spans streams as CUDA's does, since the
// profiler forks its stamps onto a stream of their own.
#include "emu/cuda_emu.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

__global__ void count_k(int* hits, int* order) {
  const unsigned block = blockIdx.y * gridDim.x + blockIdx.x;
  const unsigned thread = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  hits[block * threads + thread] += 1;
  order[block] = int(block);
}

// Each thread writes its slot, waits, then reads its neighbour's: wrong without the barrier.
__global__ void rotate_k(const int* in, int* out) {
  __shared__ int slot[64];
  slot[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = slot[(threadIdx.x + 1) % blockDim.x];
}

// A warp's tree reduction by shuffles, as batchnorm's block sums do it.
__global__ void warp_sum_k(const double* in, double* out) {
  double v = in[threadIdx.x];
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) out[threadIdx.x / 32] = v;
}

__global__ void set_k(int* at, int value) { *at = value; }

// Half the threads return before the barrier, the others wait at it: legal on Volta and later.
__global__ void early_exit_k(int* out) {
  if (threadIdx.x % 2) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

// Threads wait at two different barriers: a kernel bug the emulation must report.
__global__ void divergent_k(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
    out[threadIdx.x] = 1;
  } else {
    out[threadIdx.x] = 2;
    __shfl_down_sync(0xffffffffu, 0, 1);
  }
}

TEST(CudaEmulation, RunsEveryThreadOfEveryBlockOnce) {
  const dim3 grid(3, 2), block(8, 4, 2);
  std::vector<int> hits(6 * 64, 0), order(6, -1);
  emu::launcher(grid, block, count_k)(hits.data(), order.data());
  for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], 1) << i;
  for (int b = 0; b < 6; ++b) EXPECT_EQ(order[size_t(b)], b);
}

TEST(CudaEmulation, BarriersHoldEveryThreadBackAndSharedMemoryIsTheBlocks) {
  std::vector<int> in(128), out(128, -1);
  for (size_t i = 0; i < in.size(); ++i) in[i] = int(i);
  emu::launcher(dim3(2), dim3(64), rotate_k)(in.data(), out.data());
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 64; ++t) ASSERT_EQ(out[size_t(b * 64 + t)], b * 64 + (t + 1) % 64) << b << " " << t;
}

TEST(CudaEmulation, ShufflesReadTheLaneDeltaAway) {
  std::vector<double> in(64), out(2, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = double(i);
  emu::launcher(dim3(1), dim3(64), warp_sum_k)(in.data(), out.data());
  EXPECT_EQ(out[0], 31.0 * 32 / 2);
  EXPECT_EQ(out[1], (32.0 + 63) * 32 / 2);
}

TEST(CudaEmulation, ExitedThreadsDoNotHoldABarrier) {
  std::vector<int> out(64, 0);
  emu::launcher(dim3(1), dim3(64), early_exit_k)(out.data());
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], i % 2 ? 0 : 1) << i;
}

TEST(CudaEmulation, ABarrierSomeThreadsNeverReachIsReported) {
  std::vector<int> out(32, 0);
  EXPECT_THROW(emu::launcher(dim3(1), dim3(32), divergent_k)(out.data()), std::logic_error);
  // The scheduler starts clean after the deadlock.
  std::vector<int> again(64, 0);
  emu::launcher(dim3(1), dim3(64), early_exit_k)(again.data());
  EXPECT_EQ(again[0], 1);
}

// A capture takes in a stream that waits on an event recorded in it, records that stream's work
// as nodes (nothing runs until the graph is launched), runs other streams' work at once, and ends
// only once the origin has waited for the forked stream's last work, as CUDA requires.
TEST(CudaEmulation, ACaptureSpansTheStreamsForkedFromItAndEndsOnlyJoined) {
  cudaStream_t origin = nullptr, fork = nullptr, other = nullptr;
  cudaEvent_t forked = nullptr, joined = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&origin, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithPriority(&fork, cudaStreamNonBlocking, -5), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&forked), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&joined), cudaSuccess);
  std::vector<int> v(3, 0);
  auto capture = [&](bool join) {
    EXPECT_EQ(cudaStreamBeginCapture(origin, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    emu::launcher(dim3(1), dim3(1), origin, set_k)(&v[0], 1);
    cudaEventRecord(forked, origin);
    cudaStreamWaitEvent(fork, forked, 0);
    emu::launcher(dim3(1), dim3(1), fork, set_k)(&v[1], 2);
    emu::launcher(dim3(1), dim3(1), other, set_k)(&v[2], 3);  // not in the capture: runs now
    if (join) {
      cudaEventRecord(joined, fork);
      cudaStreamWaitEvent(origin, joined, 0);
    }
    cudaGraph_t g = nullptr;
    const cudaError_t end = cudaStreamEndCapture(origin, &g);
    return std::pair{end, g};
  };
  const auto [unjoined, none] = capture(false);
  EXPECT_EQ(unjoined, cudaErrorStreamCaptureUnjoined);
  EXPECT_EQ(none, nullptr);
  EXPECT_EQ(v, (std::vector<int>{0, 0, 3}));
  v[2] = 0;
  const auto [ok, g] = capture(true);
  ASSERT_EQ(ok, cudaSuccess);
  EXPECT_EQ(v, (std::vector<int>{0, 0, 3}));
  cudaGraphExec_t exec = nullptr;
  const int lost = emu::graphs_losing_priorities();
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  EXPECT_EQ(emu::graphs_losing_priorities(), lost + 1);  // the fork's kernel had a priority of its own
  ASSERT_EQ(cudaGraphLaunch(exec, origin), cudaSuccess);
  EXPECT_EQ(v, (std::vector<int>{1, 2, 3}));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  // An event recorded in an earlier capture draws no stream into the next one.
  ASSERT_EQ(cudaStreamBeginCapture(origin, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  cudaStreamWaitEvent(other, forked, 0);
  emu::launcher(dim3(1), dim3(1), other, set_k)(&v[2], 4);
  EXPECT_EQ(v[2], 4);
  cudaGraph_t empty = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(origin, &empty), cudaSuccess);
  cudaGraphDestroy(empty);
  for (cudaEvent_t e : {forked, joined}) cudaEventDestroy(e);
  for (cudaStream_t st : {origin, fork, other}) cudaStreamDestroy(st);
}

}  // namespace
