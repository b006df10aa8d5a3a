// Counter-based random numbers.
//
// Why counter-based: a value depends only on (seed, stream, index), never on which thread or
// in which order it was drawn. That is what makes a run identical for any --workers and
// --threads count: each sample's augmentation and each dropout mask element hashes its own
// coordinates.
#pragma once

#include <cstdint>

// The hash functions also compile for the GPU, so GPU dropout draws the CPU's masks.
#ifdef __CUDACC__
#define DLPERF_HD __host__ __device__
#else
#define DLPERF_HD
#endif

namespace dlperf {

/// SplitMix64 finalizer: a well-mixed 64-bit hash.
DLPERF_HD inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

DLPERF_HD inline uint64_t hash_coords(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  return mix64(seed ^ mix64(a ^ mix64(b ^ mix64(c))));
}

/// Uniform in [0, 1) from the top 24 bits of a hash.
DLPERF_HD inline float uniform01(uint64_t h) { return float(h >> 40) * (1.0f / 16777216.0f); }

/// A small sequential generator (SplitMix64) for one stream of draws.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix64(state_++ * 0x632BE59BD9B4E019ull); }
  float uniform() { return uniform01(next()); }
  /// Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return next() % n; }
  /// Standard normal (Box-Muller).
  double normal();

 private:
  uint64_t state_;
};

}  // namespace dlperf
