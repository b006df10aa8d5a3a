// A CPU emulation of CUDA's execution model, so the CPU test suite runs dlperf's own kernels
// (src/backend/cuda/kernels.cu and batchnorm.cu, unchanged) against the float64 references.
//
// Why: the machines CI and most sessions run on have no GPU, and those kernels (batchnorm's
// reductions, NHWC tiles, warp shuffles, the fused optimizer) would otherwise be tested only on
// the rare sessions that get one. No emulator for this is packaged in Debian, and it takes
// little: our kernels use only blocks, threads, __syncthreads, __shfl_down_sync, __shared__
// variables and atomicAdd.
//
// How: a block's threads are fibers on the calling thread (Boost.Context: a switch costs
// nanoseconds, where ucontext's swapcontext makes a system call), run in turn. Each runs until it
// finishes or waits at __syncthreads or a warp shuffle, and a barrier opens once every thread
// still running has reached it (threads that returned are not waited for, as on Volta and
// later). Blocks run one after another, so a kernel's __shared__ variables can be statics. A
// barrier no thread can pass (a __syncthreads some threads skip) throws instead of hanging.
// Not modelled: concurrency itself (races and memory ordering), timing, warp-synchronous code
// that relies on lockstep without __syncwarp. "Device" memory is host memory.
//
// Include it before any CUDA header, in place of nvcc: a .cpp that includes this, then a .cu.
#pragma once

#define DLPERF_CUDA_EMULATION 1
#define __global__
#define __device__
#define __host__
#define __shared__ static

#include <cuda_runtime.h>  // dim3, uint3, float2 and friends, cudaStream_t (no runtime calls)

#include <boost/context/fiber.hpp>

#include "emu/emu_stream.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

// CUDA's built-in variables: set by the scheduler before it resumes each thread.
inline uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

namespace emu {

class Scheduler {
 public:
  /// Runs `kernel` (its arguments bound) over the grid, block by block.
  void run(dim3 grid, dim3 block, const std::function<void()>& kernel) {
    const int64_t threads = int64_t(block.x) * block.y * block.z;
    if (threads < 1 || threads > 1024) throw std::invalid_argument("emulated launch: a block has 1 to 1024 threads");
    gridDim = grid, blockDim = block;
    kernel_ = &kernel;
    count_ = size_t(threads);
    while (threads_.size() < count_) threads_.push_back(make_thread());
    slots_.assign((count_ + 31) / 32 * 32, 0);
    for (unsigned z = 0; z < grid.z; ++z)
      for (unsigned y = 0; y < grid.y; ++y)
        for (unsigned x = 0; x < grid.x; ++x) {
          blockIdx = {x, y, z};
          run_block();
        }
    kernel_ = nullptr;
  }

  /// __syncthreads: wait until every running thread of the block is here.
  void block_barrier() { wait(State::block_barrier); }
  /// A warp-wide exchange: every running lane of the warp publishes `bits`, then reads lane
  /// `from`'s (its own where `from` is past the warp).
  uint64_t exchange(uint64_t bits, unsigned from) {
    const size_t lane = current_ % 32, base = current_ - lane;
    slots_[current_] = bits;
    wait(State::warp_barrier);
    const uint64_t got = from < 32 && base + from < count_ ? slots_[base + from] : bits;
    wait(State::warp_barrier);  // nobody overwrites a slot before every lane has read
    return got;
  }
  unsigned lane() const { return unsigned(current_ % 32); }

  static Scheduler& get() {
    static Scheduler s;
    return s;
  }

 private:
  enum class State { runnable, block_barrier, warp_barrier, done };
  // An emulated thread: a fiber that lives as long as the scheduler and runs its thread of one
  // block after another, parked (done) in between.
  struct Thread {
    boost::context::fiber fiber;  // where it resumes, while suspended
    State state = State::done;
  };
  static constexpr size_t kStack = 256 * 1024;

  Thread make_thread() {
    Thread t;
    t.fiber = boost::context::fiber(std::allocator_arg, boost::context::fixedsize_stack(kStack),
                                    [this](boost::context::fiber&& scheduler) {
                                      scheduler_ = std::move(scheduler);
                                      for (;;) {
                                        (*kernel_)();
                                        wait(State::done);
                                      }
                                      return std::move(scheduler_);
                                    });
    return t;
  }

  // The running thread stops here, back to the scheduler, until it is made runnable again.
  void wait(State why) {
    threads_[current_].state = why;
    scheduler_ = std::move(scheduler_).resume();
  }

  void run_block() {
    for (size_t i = 0; i < count_; ++i) threads_[i].state = State::runnable;
    for (;;) {
      bool ran = false;
      for (size_t i = 0; i < count_; ++i)
        if (threads_[i].state == State::runnable) {
          current_ = i;
          threadIdx = {unsigned(i % blockDim.x), unsigned(i / blockDim.x % blockDim.y), unsigned(i / (size_t(blockDim.x) * blockDim.y))};
          threads_[i].fiber = std::move(threads_[i].fiber).resume();
          ran = true;
        }
      if (ran) continue;
      // Nobody can run: open a barrier every running thread (of the block, or of a warp) waits at.
      size_t running = 0, at_block = 0;
      for (size_t i = 0; i < count_; ++i) {
        running += threads_[i].state != State::done;
        at_block += threads_[i].state == State::block_barrier;
      }
      if (running == 0) return;
      if (at_block == running) {
        for (size_t i = 0; i < count_; ++i)
          if (threads_[i].state == State::block_barrier) threads_[i].state = State::runnable;
        continue;
      }
      bool opened = false;
      for (size_t w = 0; w < count_; w += 32) {
        const size_t end = std::min(w + 32, count_);
        size_t live = 0, waiting = 0;
        for (size_t i = w; i < end; ++i) {
          live += threads_[i].state != State::done;
          waiting += threads_[i].state == State::warp_barrier;
        }
        if (live > 0 && waiting == live) {
          for (size_t i = w; i < end; ++i)
            if (threads_[i].state == State::warp_barrier) threads_[i].state = State::runnable;
          opened = true;
        }
      }
      if (!opened) {
        const std::string where = std::to_string(blockIdx.x) + ", " + std::to_string(blockIdx.y);
        threads_.clear();  // unwinds the stuck threads, so the next launch starts clean
        kernel_ = nullptr;
        throw std::logic_error("emulated kernel deadlocked in block (" + where +
                               "): some threads wait at a __syncthreads or warp shuffle that others never reach");
      }
    }
  }

  const std::function<void()>* kernel_ = nullptr;
  std::vector<Thread> threads_;
  size_t count_ = 0;  // threads in this launch's blocks
  std::vector<uint64_t> slots_;
  size_t current_ = 0;
  boost::context::fiber scheduler_;  // the scheduler, while a thread runs
};

/// What LAUNCH expands to in emulation: launcher(grid, block, kernel)(args...) runs the kernel, or
/// records it as a graph node while a stream capture is open (emu_stream.h).
template <class Kernel>
struct Launcher {
  dim3 grid, block;
  const void* stream;
  Kernel kernel;
  template <class... Args>
  void operator()(Args... args) const {
    submit(NodeKind::kernel, stream, [grid = grid, block = block, kernel = kernel, args...] {
      Scheduler::get().run(grid, block, [&] { kernel(args...); });
    });
  }
};
template <class Kernel>
Launcher<Kernel> launcher(dim3 grid, dim3 block, const void* stream, Kernel k) {
  return {grid, block, stream, k};
}
template <class Kernel>
Launcher<Kernel> launcher(dim3 grid, dim3 block, Kernel k) {  // on the default stream
  return {grid, block, nullptr, k};
}

}  // namespace emu

// The device functions our kernels call that a host compiler lacks.
inline void __syncthreads() { emu::Scheduler::get().block_barrier(); }

template <class T>
T __shfl_down_sync(unsigned /*mask: every lane, in our kernels*/, T v, unsigned delta) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "emulated shuffles move up to 8 bytes");
  emu::Scheduler& s = emu::Scheduler::get();
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = s.exchange(bits, s.lane() + delta);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

// CUDA's math library has isfinite in the global namespace.
using std::isfinite;

// One OS thread runs every emulated thread, and a fiber switches only at a barrier: a plain
// read-modify-write is atomic here.
template <class T>
T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
