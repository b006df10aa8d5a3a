#include "core/memory.h"

#include <fmt/format.h>
#include <gnu/libc-version.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <new>

#include "core/error.h"

namespace dlperf {

std::string_view to_string(MemCategory c) {
  switch (c) {
    case MemCategory::parameters: return "parameters";
    case MemCategory::gradients: return "gradients";
    case MemCategory::optimizer_state: return "optimizer_state";
    case MemCategory::activations: return "activations";
    case MemCategory::workspace: return "workspace";
    case MemCategory::data: return "data";
  }
  return "?";
}

CachingAllocator::CachingAllocator(RawAlloc alloc, RawFree free, std::string what)
    : raw_alloc_(alloc), raw_free_(free), what_(std::move(what)) {}

CachingAllocator::~CachingAllocator() { trim(); }

std::string transparent_huge_pages_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(f, line);
  const size_t open = line.find('['), close = line.find(']');
  return open != std::string::npos && close > open ? line.substr(open + 1, close - open - 1) : "";
}

namespace {
constexpr size_t kHugePage = 2u << 20;  // x86-64's transparent huge page

// GLIBC_TUNABLES' value for glibc.malloc.hugetlb, empty where it is not set.
std::string glibc_hugetlb_tunable() {
  const char* e = std::getenv("GLIBC_TUNABLES");
  const std::string_view all = e ? e : "", key = "glibc.malloc.hugetlb=";
  for (size_t at = 0; at <= all.size();) {
    const size_t end = std::min(all.find(':', at), all.size());
    if (const std::string_view t = all.substr(at, end - at); t.substr(0, key.size()) == key) return std::string(t.substr(key.size()));
    at = end + 1;
  }
  return "";
}

bool glibc_has_hugetlb_tunable() {  // since glibc 2.35
  int major = 0, minor = 0;
  return std::sscanf(gnu_get_libc_version(), "%d.%d", &major, &minor) == 2 && (major > 2 || (major == 2 && minor >= 35));
}

// Whether glibc's malloc can ask for huge pages here and it would matter: THP gives them only
// where asked, and glibc has the tunable.
bool malloc_can_ask_for_huge_pages() { return transparent_huge_pages_mode() == "madvise" && glibc_has_hugetlb_tunable(); }

// Whether this process started with glibc's malloc asking for huge pages for all its memory.
bool heap_asks_for_huge_pages() { return glibc_hugetlb_tunable() == "1" && malloc_can_ask_for_huge_pages(); }

// Training streams each activation and gradient through whole, layer after layer, tens of MB a
// step: in 4 KiB pages every MiB takes 256 TLB entries, in huge pages half of one. Kernels that
// run THP in "madvise" mode (this project's VMs, among others) give huge pages only to memory
// that asks, and aligned_alloc's does not. Asking for them trained medium at batch 64 in
// 0.89-0.93x the step time, at 256 in 0.85-0.94x, large at 64 in 0.89-0.92x (scripts/ab_profile.py,
// the AMX Xeon VM, 2026-11-30; docs/benchmarks.md). Only whole pages are asked for: a block's tail, shorter
// than a page, stays in small pages, so no memory is committed that the block does not touch and
// the allocator's counts stay the bytes in use.
void* host_alloc(size_t bytes) {
  // Where glibc's malloc asks for its whole heap (rerun_with_huge_page_heap), aligning would only
  // leave the gaps before the aligned blocks resident inside huge pages: resnet18 at batch 64 took
  // 1.437 GB so against 1.294 unaligned, with no step faster.
  static const bool heap_asks = heap_asks_for_huge_pages();
  if (bytes < kHugePage || !host_huge_pages_asked() || heap_asks) return std::aligned_alloc(64, bytes);
  void* p = nullptr;
  if (::posix_memalign(&p, kHugePage, bytes) != 0) return nullptr;
  ::madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);  // a hint: where THP is off it fails, harmlessly
  return p;
}
}  // namespace

// The allocator's own advice reaches only its blocks of 2 MiB and more. Its smaller blocks (a
// `medium` layer's activations at batch 64 are 0.2-1.6 MB), oneDNN's own buffers and the loaded
// dataset stayed in small pages between them, and passes over those ran up to 1.6x slower than
// with no huge pages at all. With glibc's malloc asking for huge pages for its heap they ran
// 0.71-0.89x their time with the allocator's advice alone, and the step 0.93-1.00x (across
// small, medium, large and resnet18, fp32 and bf16), 0.87-0.96x its time without huge pages
// (scripts/ab_profile.py, the AMX Xeon VM, 2026-11-30; docs/benchmarks.md). glibc reads that
// setting only as a program starts (GLIBC_TUNABLES; no call sets it later), hence a second start,
// before anything else has run. Without it (dlperf's library in another program, the tests) the
// allocator's advice still holds.
void rerun_with_huge_page_heap(char** argv) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  (void)argv;  // the sanitizer's malloc, not glibc's, holds the memory
#else
  try {
    if (!host_huge_pages_asked()) return;
  } catch (const Error&) {
    return;  // a bad DLPERF_HUGE_PAGES: the command says so where it first allocates
  }
  const char* preload = std::getenv("LD_PRELOAD");
  if (preload && std::string_view(preload).find("vgpreload") != std::string_view::npos) return;  // valgrind's malloc
  if (!malloc_can_ask_for_huge_pages() || !glibc_hugetlb_tunable().empty()) return;
  const char* before = std::getenv("GLIBC_TUNABLES");
  const std::string was = before ? before : "";
  const std::string tunables = was.empty() ? "glibc.malloc.hugetlb=1" : was + ":glibc.malloc.hugetlb=1";
  ::setenv("GLIBC_TUNABLES", tunables.c_str(), 1);
  ::execv("/proc/self/exe", argv);  // returns only where it failed: run on as we are
  if (before) ::setenv("GLIBC_TUNABLES", was.c_str(), 1);
  else ::unsetenv("GLIBC_TUNABLES");
#endif
}

double process_huge_page_bytes() {
  std::ifstream f("/proc/self/smaps_rollup");
  std::string key, unit;
  double kb = 0;
  while (f >> key) {
    if (key == "AnonHugePages:" && f >> kb >> unit) return kb * 1024;
    f.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return -1;
}

bool host_huge_pages_asked() {
  static const bool asked = [] {
    const char* e = std::getenv("DLPERF_HUGE_PAGES");
    const std::string_view v = e ? e : "on";
    if (v != "on" && v != "off")
      throw Error(fmt::format("DLPERF_HUGE_PAGES={} is not a choice: use on or off (or unset it)", v));
    return v == "on";
  }();
  return asked;
}

std::string host_huge_pages_note() {
  const std::string mode = transparent_huge_pages_mode();
  if (!host_huge_pages_asked()) return "off (DLPERF_HUGE_PAGES=off)";
  if (mode == "never") return "none: the kernel's transparent huge pages are off (never)";
  if (heap_asks_for_huge_pages())
    return "asked for by glibc's malloc (glibc.malloc.hugetlb=1; transparent huge pages: madvise)";
  return fmt::format("asked for buffers of 2 MiB and more (transparent huge pages: {})", mode.empty() ? "unknown" : mode);
}

HostAllocator::HostAllocator() : CachingAllocator(host_alloc, [](void* p) { std::free(p); }, "host") {}

HostAllocator& HostAllocator::instance() {
  static HostAllocator a;
  return a;
}

size_t CachingAllocator::block_bytes(size_t bytes) {
  // Round to 256 bytes below 1 MiB and to 64 KiB above, so near-equal sizes share blocks.
  const size_t q = bytes < (1u << 20) ? 256 : (64u << 10);
  return (bytes + q - 1) / q * q;
}

void CachingAllocator::notify() {
  if (Observer f = observer_.load()) f(stats());
}

void* CachingAllocator::allocate(size_t bytes, MemCategory category) {
  void* ptr = allocate_locked(bytes, category);
  notify();
  return ptr;
}

void* CachingAllocator::allocate_locked(size_t bytes, MemCategory category) {
  const size_t size = block_bytes(bytes == 0 ? 1 : bytes);
  std::lock_guard lock(mutex_);
  void* ptr = nullptr;
  // Reuse a cached block of exactly this rounded size, or one at most 2x larger.
  auto it = cache_.lower_bound(size);
  if (it != cache_.end() && it->first <= 2 * size) {
    ptr = it->second;
    stats_.cached_bytes -= it->first;
    const size_t got = it->first;
    cache_.erase(it);
    live_[ptr] = {got, category};
    stats_.current[int(category)] += got;
    stats_.current_total += got;
  } else {
    ptr = raw_alloc_(size);
    if (!ptr && !cache_.empty()) {
      // Out of memory while holding freed blocks of other sizes: give them back and try once
      // more, as PyTorch's caching allocator does, so a cache of stale sizes never causes an
      // out-of-memory error the memory itself would not.
      release_cache_locked();
      ptr = raw_alloc_(size);
    }
    if (!ptr)
      throw Error(fmt::format("out of {} memory allocating {} for {} ({} already in use)", what_, format_bytes(double(size)),
                              to_string(category), format_bytes(double(stats_.current_total))),
                  "use a smaller --batch-size or model; 'dlperf plan' shows what fits");
    live_[ptr] = {size, category};
    stats_.current[int(category)] += size;
    stats_.current_total += size;
  }
  auto& c = stats_.current[int(category)];
  if (c > stats_.peak[int(category)]) stats_.peak[int(category)] = c;
  if (stats_.current_total > stats_.peak_total) stats_.peak_total = stats_.current_total;
  return ptr;
}

void CachingAllocator::release(void* ptr) {
  if (!ptr) return;
  {
    std::lock_guard lock(mutex_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return;
    stats_.current[int(it->second.category)] -= it->second.bytes;
    stats_.current_total -= it->second.bytes;
    cache_.emplace(it->second.bytes, ptr);
    stats_.cached_bytes += it->second.bytes;
    live_.erase(it);
  }
  notify();
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peaks() {
  std::lock_guard lock(mutex_);
  stats_.peak = stats_.current;
  stats_.peak_total = stats_.current_total;
}

void CachingAllocator::trim() {
  std::lock_guard lock(mutex_);
  release_cache_locked();
}

void CachingAllocator::release_cache_locked() {
  for (auto& [size, ptr] : cache_) raw_free_(ptr);
  cache_.clear();
  stats_.cached_bytes = 0;
}

Buffer::Buffer(size_t bytes, MemCategory category)
    : ptr_(HostAllocator::instance().allocate(bytes, category)), bytes_(bytes), category_(category) {}

Buffer::~Buffer() { HostAllocator::instance().release(ptr_); }

namespace {
// Divides `bytes` by `base` while it is `base` or more and a larger unit is left; the unit's index.
int scale(double& bytes, double base, int largest) {
  int u = 0;
  for (; bytes >= base && u < largest; ++u) bytes /= base;
  return u;
}
}  // namespace

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB"};
  const int u = scale(bytes, 1000, 6);
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.2f} {}", bytes, units[u]);
}

std::string format_binary_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  const int u = scale(bytes, 1024, 4);
  return bytes == std::floor(bytes) ? fmt::format("{:.0f} {}", bytes, units[u]) : fmt::format("{:.1f} {}", bytes, units[u]);
}

}  // namespace dlperf
