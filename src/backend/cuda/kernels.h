// dlperf's own CUDA kernels, called from host code with device pointers and a stream. Each
// launcher returns after queuing its kernel (no synchronization) and throws nothing: errors
// surface at the next synchronizing call, which runtime.cpp checks.
//
// Conventions match the CPU engine (backend/cpu): the same dropout masks (counter-based hash of
// seed, step, element), the same loss with label smoothing, PyTorch's SGD and AdamW formulas.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/layout.h"
#include "backend/cuda/loss_scale.h"
#include "backend/cuda/pool_index.h"
#include "core/rng.h"

namespace dlperf::cuda {

/// What changes from one training step to the next, read by the kernels from device memory: a
/// step captured once in a CUDA graph replays with new values without being captured again.
/// The host writes it (cudaMemcpyAsync on the step's stream) before each step.
struct StepArgs {
  float lr = 0;
  float adam_c1 = 1, adam_c2 = 1;  ///< AdamW's bias corrections 1 / (1 - beta^t)
  float unused = 0;
  uint64_t dropout_step = 0;  ///< the global step: dropout masks hash it
  int64_t batch = 0;          ///< which batch of the epoch the on-device loader gathers
  int64_t epoch = 0;          ///< the on-device augmentation hashes it
};

/// The element type of activations and their gradients: fp32, or bf16/fp16 in mixed precision
/// (arithmetic in fp32 inside the kernels either way). Pointers typed void* hold this type.
enum class DType { f32, bf16, f16 };
inline size_t bytes_of(DType t) { return t == DType::f32 ? 4 : 2; }

void relu_forward(DType t, const void* x, void* y, int64_t n, cudaStream_t s);
/// dx = dy where y > 0, else 0 (from the output, as the fused CPU path does).
void relu_backward(DType t, const void* y, const void* dy, void* dx, int64_t n, cudaStream_t s);
/// y = a + b, rounded to the type; then, with `relu`, max(y, 0), as a relu after it would give.
void add(DType t, const void* a, const void* b, void* y, int64_t n, cudaStream_t s, bool relu = false);
/// The backward of a residual add with a relu after it: g = dy where y > 0, else 0 (relu_backward),
/// handed to both of the add's inputs at once, d0 = g (or d0 + g with `add0`) and likewise d1
/// (null: none). The same bits as relu_backward then a copy or a sum into each (one pass reading
/// dy and y once, where those were three). d0 and d1 must differ.
void relu_grad_to_inputs(DType t, const void* y, const void* dy, void* d0, bool add0, void* d1, bool add1, int64_t n,
                         cudaStream_t s);
/// y = x * mask / (1 - p), mask[i] = uniform(hash(step_seed ^ i)) >= p, as cpu::Dropout. The step's
/// seed is `seed` itself when `args` is null, else hash_coords(seed, args->dropout_step) (the CPU
/// engine's per-layer seed and step).
void dropout_forward(DType t, const void* x, void* y, uint8_t* mask, int64_t n, float p, uint64_t seed, const StepArgs* args,
                     cudaStream_t s);
void dropout_backward(DType t, const void* dy, const uint8_t* mask, void* dx, int64_t n, float p, cudaStream_t s);

/// Softmax cross-entropy over rows [0, valid) of [rows, classes] logits, label smoothing `eps`.
/// Adds the summed loss to *loss_sum and the number of correct rows to *correct (device
/// scalars); writes d(mean loss)/d(logits) to dlogits when it is not null (zero for padded rows),
/// multiplied by *loss_scale when that is not null (fp16's dynamic loss scaling).
void softmax_cross_entropy(DType t, const void* logits, const int32_t* labels, int64_t rows, int64_t classes, int64_t valid,
                           float eps, double* loss_sum, int32_t* correct, void* dlogits, const float* loss_scale, cudaStream_t s);

/// Pooling (pool_index.h: PoolShape, in either layout), forward and backward.
void pool_forward(DType t, const PoolShape& p, const void* x, void* y, cudaStream_t s);
void pool_backward(DType t, const PoolShape& p, const void* x, const void* dy, void* dx, cudaStream_t s);

// fp32 forms of the above, for tests and callers that only ever hold fp32.
inline void relu_forward(const float* x, float* y, int64_t n, cudaStream_t s) { relu_forward(DType::f32, x, y, n, s); }
inline void relu_backward(const float* y, const float* dy, float* dx, int64_t n, cudaStream_t s) {
  relu_backward(DType::f32, y, dy, dx, n, s);
}
inline void add(const float* a, const float* b, float* y, int64_t n, cudaStream_t s) { add(DType::f32, a, b, y, n, s); }
inline void dropout_forward(const float* x, float* y, uint8_t* mask, int64_t n, float p, uint64_t seed, const StepArgs* args,
                            cudaStream_t s) {
  dropout_forward(DType::f32, x, y, mask, n, p, seed, args, s);
}
inline void dropout_backward(const float* dy, const uint8_t* mask, float* dx, int64_t n, float p, cudaStream_t s) {
  dropout_backward(DType::f32, dy, mask, dx, n, p, s);
}
inline void softmax_cross_entropy(const float* logits, const int32_t* labels, int64_t rows, int64_t classes, int64_t valid,
                                  float eps, double* loss_sum, int32_t* correct, float* dlogits, cudaStream_t s) {
  softmax_cross_entropy(DType::f32, logits, labels, rows, classes, valid, eps, loss_sum, correct, dlogits, nullptr, s);
}

/// Mixed precision's half-type copies at the front of the flat fp32 buffers, which the update
/// reads and writes in the same launch instead of three: gradients [0, grads_count) come from
/// `grads` (cuDNN writes a conv weight's gradient in the half type), and updated weights
/// [0, weights_count) are also stored to `weights` (the copies the next step's convolutions and
/// GEMMs read). `type` f32 (the default) means none.
struct HalfCopies {
  DType type = DType::f32;
  const void* grads = nullptr;
  int64_t grads_count = 0;
  void* weights = nullptr;
  int64_t weights_count = 0;
};

/// One launch for all parameters, which the backend keeps in one flat buffer each for weights,
/// gradients and states. SGD: PyTorch's momentum (dampening 0) with optional Nesterov, L2 decay.
/// With `args`, the learning rate is args->lr instead of `lr`. With `skip`, nothing changes when
/// *skip is non-zero (fp16 loss scaling found an overflow). `half` as HalfCopies says.
void sgd_update(float* w, const float* g, float* momentum, int64_t n, float lr, float mu, float weight_decay,
                bool nesterov, const StepArgs* args, const int32_t* skip, cudaStream_t s, const HalfCopies& half = {});
/// AdamW (decoupled decay), `step` 1-based for the bias corrections; with `args`, the learning
/// rate and bias corrections come from it. `skip` and `half` as for sgd_update.
void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int64_t step, const StepArgs* args, const int32_t* skip, cudaStream_t s,
                  const HalfCopies& half = {});

/// Dynamic loss scaling: sets *found_inf to 1 when any gradient is not finite, else leaves it;
/// multiplies all by `inv_scale`, or by 1 / *scale when `scale` (a device scalar) is not null.
/// Gradients [0, half_count) are read from `half` (of type `t`) instead, and written to g in fp32.
void unscale_and_check(float* g, int64_t n, float inv_scale, int32_t* found_inf, cudaStream_t s, const float* scale = nullptr,
                       DType t = DType::f32, const void* half = nullptr, int64_t half_count = 0);
/// Any type to fp32: out = float(x); x may be fp32 (a copy).
void cast_to_f32(DType t, const void* x, float* out, int64_t n, cudaStream_t s);
/// fp32 to any type (round to nearest even): mixed precision's casts.
void cast_from_f32(DType t, const float* x, void* out, int64_t n, cudaStream_t s);
/// The network's input, fp32 [N, C, H*W] as the loaders fill it, to type `t` stored NHWC.
void cast_from_f32_to_nhwc(DType t, const float* nchw, void* nhwc, int64_t n, int64_t channels, int64_t hw, cudaStream_t s);
/// [N, C, H*W] maps of type `t` from layout `from` to the other one (NHWC -> NCHW where a flatten
/// must hand the CPU engine's feature order to a linear layer, and back for its gradient).
void change_layout(DType t, const void* x, void* y, int64_t n, int64_t channels, int64_t hw, Layout from, cudaStream_t s);

/// advance_loss_scale on the device copy (one thread).
void update_loss_scale(LossScale* ls, cudaStream_t s);

/// uint8 images [n, C, H, W] to normalized floats: out = x * scale[c] + shift[c].
void normalize_u8(const uint8_t* images, float* out, int64_t n, int64_t channels, int64_t hw, const float* scale,
                  const float* shift, cudaStream_t s);

/// A dataset held on the GPU (--data-on-device): N x C x H x W bytes and N labels.
struct DeviceImages {
  const uint8_t* images = nullptr;
  const uint8_t* labels = nullptr;
  int64_t count = 0, channels = 0, height = 0, width = 0;
};
/// Builds a batch on the GPU exactly as data::Loader::fill does on the host: rows [first, first +
/// batch) of the epoch's `order` (first = args->batch * batch when `args` is set), each sample
/// cropped (pad_crop pixels) and flipped by the loader's hash of (seed, epoch, sample) when
/// `augment`, then normalized (x * scale[c] + shift[c]). Rows past the end are zeros, label 0.
/// `scale` and `shift` are device arrays of C floats. `out` holds type `t` in layout `layout`, so
/// a network storing its input in bf16 or NHWC gets it without a cast launch of its own.
void gather_batch(const DeviceImages& d, const int32_t* order, int64_t first, int64_t epoch, const StepArgs* args,
                  int64_t batch, bool augment, int64_t pad_crop, bool flip_ok, uint64_t seed, const float* scale,
                  const float* shift, void* out, int32_t* labels, cudaStream_t s, DType t = DType::f32,
                  Layout layout = Layout::nchw);

/// y[(o * channels + c) * inner + i] += bias[c]: a linear layer's bias (inner 1) or a conv's (inner H*W).
/// The bias is fp32 in every precision. With `relu`, y = max(y + bias, 0): the relu after a linear
/// layer in the same launch.
void add_bias(DType t, void* y, const float* bias, int64_t outer, int64_t channels, int64_t inner, cudaStream_t s,
              bool relu = false);
/// db[c] = sum over o, i of dy[(o * channels + c) * inner + i], in fp32.
void bias_grad(DType t, const void* dy, float* db, int64_t outer, int64_t channels, int64_t inner, cudaStream_t s);
/// The backward of a linear layer's bias and of the relu after it, in one launch: dy[r, f] = 0
/// where the relu's output y[r, f] is not positive (in place), then db[f] = sum over r of dy[r, f].
void relu_bias_grad(DType t, const void* y, void* dy, float* db, int64_t rows, int64_t features, cudaStream_t s);
inline void add_bias(float* y, const float* bias, int64_t outer, int64_t channels, int64_t inner, cudaStream_t s) {
  add_bias(DType::f32, y, bias, outer, channels, inner, s);
}
inline void bias_grad(const float* dy, float* db, int64_t outer, int64_t channels, int64_t inner, cudaStream_t s) {
  bias_grad(DType::f32, dy, db, outer, channels, inner, s);
}

/// Writes the GPU's nanosecond clock (%globaltimer, one clock for every SM) to *at when the work
/// queued before it on `s` has finished: the profiler's span boundaries (cuda::Network::Span).
/// A one-thread kernel, since in a CUDA graph a kernel node costs the GPU about a quarter of
/// what an event record node does (bench launch measures both).
void stamp_time(uint64_t* at, cudaStream_t s);
/// Keeps `s` busy for `ns` nanoseconds of that clock (one thread spinning). Queued ahead of work
/// timed with events, it lets the host queue that work before the GPU gets to it, so the events
/// time the GPU's work alone rather than the host's calls that queue it.
void hold_stream(uint64_t ns, cudaStream_t s);
/// *out = the smallest step of that clock seen in 64 changes (0 if it never moved): how finely
/// the stamps resolve a span. One thread, a few microseconds.
void clock_tick(uint64_t* out, cudaStream_t s);

// Benchmarks (dlperf bench): an empty kernel for launch latency, and streaming kernels for
// device-memory bandwidth.
void empty_kernel(cudaStream_t s);
void stream_copy(const float* a, float* b, int64_t n, cudaStream_t s);
void stream_triad(float* a, const float* b, const float* c, float scalar, int64_t n, cudaStream_t s);
/// Sums x into *out (a device double) so the reads cannot be optimized away.
void stream_read(const float* x, int64_t n, double* out, cudaStream_t s);
void fill(float* x, int64_t n, float value, cudaStream_t s);

}  // namespace dlperf::cuda
