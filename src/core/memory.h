// A caching host allocator that counts bytes by category.
//
// Why: dlperf reports peak memory split into parameters, gradients, optimizer state,
// activations and workspace, and the planner predicts the same split. Every buffer the engine
// owns comes from here, so current and peak bytes are exact, not sampled. Freed blocks are
// kept by size and reused, so a training step that reallocates (a new batch size, eval) does
// not go back to the system allocator.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace dlperf {

enum class MemCategory { parameters, gradients, optimizer_state, activations, workspace, data };
inline constexpr int kMemCategories = 6;
std::string_view to_string(MemCategory c);

struct MemoryStats {
  std::array<size_t, kMemCategories> current{};  ///< live bytes per category
  std::array<size_t, kMemCategories> peak{};     ///< highest live bytes per category
  size_t current_total = 0;
  size_t peak_total = 0;    ///< highest live bytes over all categories at once
  size_t cached_bytes = 0;  ///< freed blocks kept for reuse (not counted as live)
};

/// Caches freed blocks by size and counts live bytes by category. The raw allocation comes from
/// the functions it is built with: aligned host memory for HostAllocator, cudaMalloc for the
/// GPU's (backend/cuda/runtime.h).
class CachingAllocator {
 public:
  using RawAlloc = void* (*)(size_t bytes);
  using RawFree = void (*)(void* ptr);
  /// `what` names the memory in out-of-memory errors ("host", "GPU 0").
  CachingAllocator(RawAlloc alloc, RawFree free, std::string what);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;
  /// A block of at least `bytes`; never returns null (throws Error, with a hint, on failure).
  void* allocate(size_t bytes, MemCategory category);
  void release(void* ptr);
  MemoryStats stats() const;
  /// Starts peak counting afresh from the current live bytes (e.g. per epoch).
  void reset_peaks();
  /// Returns cached blocks to the system.
  void trim();
  /// The block a request of `bytes` gets, and the bytes it counts (the memory planner's rule too).
  static size_t block_bytes(size_t bytes);
  /// Called with the new stats after every allocation and release (the profiler's memory
  /// timeline); null = none. Not called under the allocator's lock.
  using Observer = void (*)(const MemoryStats&);
  void set_observer(Observer f) { observer_.store(f); }

 private:
  struct Block {
    size_t bytes;
    MemCategory category;
  };
  RawAlloc raw_alloc_;
  RawFree raw_free_;
  std::string what_;
  mutable std::mutex mutex_;
  std::map<void*, Block> live_;
  std::multimap<size_t, void*> cache_;  // size -> free block
  MemoryStats stats_;
  std::atomic<Observer> observer_{nullptr};
  void notify();
  void* allocate_locked(size_t bytes, MemCategory category);
  void release_cache_locked();  ///< gives every cached block back (the caller holds mutex_)
};

/// The process's host allocator: 64-byte aligned blocks, and from 2 MiB up blocks aligned to 2 MiB
/// whose whole 2 MiB pages the kernel is asked to back with transparent huge pages (memory.cpp
/// says why), unless DLPERF_HUGE_PAGES=off or glibc's malloc asks for them itself
/// (rerun_with_huge_page_heap).
class HostAllocator : public CachingAllocator {
 public:
  static HostAllocator& instance();

 private:
  HostAllocator();
};

/// Whether HostAllocator asks for huge pages: DLPERF_HUGE_PAGES unset or "on", not "off"; Error
/// for any other value.
bool host_huge_pages_asked();
/// The kernel's transparent huge page mode, as /sys/kernel/mm/transparent_hugepage/enabled marks
/// it ("always [madvise] never" -> "madvise"); empty where that file is missing (no THP in this
/// kernel, a chroot without /sys).
std::string transparent_huge_pages_mode();
/// Where the kernel gives transparent huge pages only to memory that asks (THP "madvise") and
/// glibc's malloc can ask for all of its memory (glibc 2.35 on), starts this program again at once
/// with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 added (memory.cpp says why). Returns, changing
/// nothing, where it does not: DLPERF_HUGE_PAGES=off, another THP mode, an older glibc, a
/// sanitizer's or valgrind's malloc, glibc.malloc.hugetlb already set, or the start failing.
/// For main, before anything else.
void rerun_with_huge_page_heap(char** argv);
/// The same in words for run records and reports, with the kernel's transparent huge page mode:
/// "asked for by glibc's malloc (glibc.malloc.hugetlb=1; transparent huge pages: madvise)",
/// "asked for buffers of 2 MiB and more (transparent huge pages: madvise)" where malloc did not, "off
/// (DLPERF_HUGE_PAGES=off)", or "none: the kernel's transparent huge pages are off (never)".
std::string host_huge_pages_note();

/// This process's memory in transparent huge pages now (AnonHugePages in /proc/self/smaps_rollup),
/// in bytes; -1 where that file cannot be read.
double process_huge_page_bytes();

/// An owned block from HostAllocator, freed (into the cache) when the last owner goes.
class Buffer {
 public:
  Buffer(size_t bytes, MemCategory category);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  MemCategory category() const { return category_; }

 private:
  void* ptr_;
  size_t bytes_;
  MemCategory category_;
};

using BufferPtr = std::shared_ptr<Buffer>;
inline BufferPtr make_buffer(size_t bytes, MemCategory category) {
  return std::make_shared<Buffer>(bytes, category);
}

/// "1.23 MB" style formatting for tables.
std::string format_bytes(double bytes);

/// "16 KiB", "32 MiB", "1.5 GiB": for the power-of-two sizes benchmarks sweep (working sets,
/// messages, copies), which decimal units turn into "16.38 KB" and "33.55 MB".
std::string format_binary_bytes(double bytes);

}  // namespace dlperf
