// The caching allocator: exact current and peak bytes per category, reuse of freed blocks.
#include <gtest/gtest.h>

#include "core/memory.h"

namespace dlperf::test {
namespace {

TEST(HostAllocator, CountsPerCategoryAndReusesFreedBlocks) {
  auto& a = HostAllocator::instance();
  a.trim();
  a.reset_peaks();
  const MemoryStats before = a.stats();
  const int acts = int(MemCategory::activations), grads = int(MemCategory::gradients);
  void* p1 = nullptr;
  {
    Buffer x(1 << 20, MemCategory::activations);  // 1 MiB: a whole number of 64 KiB steps
    Buffer y(1000, MemCategory::gradients);         // rounded up to 1024
    p1 = x.data();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(x.data()) % 64, 0u);
    const MemoryStats s = a.stats();
    EXPECT_EQ(s.current[acts] - before.current[acts], size_t(1) << 20);
    EXPECT_EQ(s.current[grads] - before.current[grads], 1024u);
    EXPECT_EQ(s.peak_total - before.current_total, (size_t(1) << 20) + 1024);
  }
  const MemoryStats after = a.stats();
  EXPECT_EQ(after.current_total, before.current_total);
  EXPECT_EQ(after.cached_bytes, (size_t(1) << 20) + 1024);
  EXPECT_EQ(after.peak[acts] - before.current[acts], size_t(1) << 20);  // peaks stay until reset
  // The same size comes back from the cache, now counted under another category.
  Buffer z(1 << 20, MemCategory::workspace);
  EXPECT_EQ(z.data(), p1);
  EXPECT_EQ(a.stats().current[int(MemCategory::workspace)] - before.current[int(MemCategory::workspace)], size_t(1) << 20);
  a.reset_peaks();
  EXPECT_EQ(a.stats().peak[acts], a.stats().current[acts]);
}

TEST(FormatBytes, ReadsLikeATable) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(60.13e6), "60.13 MB");
  EXPECT_EQ(format_bytes(2.5e9), "2.50 GB");
}

}  // namespace
}  // namespace dlperf::test
