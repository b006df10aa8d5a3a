// The caching allocator: exact current and peak bytes per category, reuse of freed blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "core/error.h"
#include "core/memory.h"
#include "core/text.h"
#include "core/timer.h"

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

// The VmFlags of the mapping that holds `p`, as /proc/self/smaps lists them ("rd wr mr mw me ac hg"),
// empty if none does.
std::string vm_flags_at(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find('-') < line.find(' ')) inside = lo <= at && at < hi;
    if (inside && line.rfind("VmFlags:", 0) == 0) return line.substr(8);
  }
  return "";
}

// Buffers of 2 MiB and more are aligned to 2 MiB with their whole pages advised for transparent
// huge pages (VmFlags "hg"), which trained medium about 10% faster where the kernel's THP mode is
// madvise; smaller ones are as before. Where glibc's malloc asks for huge pages itself
// (GLIBC_TUNABLES=glibc.malloc.hugetlb=1, which dlperf's main sets, and the tests do not), no
// block is aligned beyond 64 bytes.
// DLPERF_HUGE_PAGES (unset: on) is not set in the tests.
TEST(HostAllocator, LargeBuffersAskForHugePages) {
  if (!host_huge_pages_asked()) GTEST_SKIP() << "DLPERF_HUGE_PAGES=off";
  const std::string note = host_huge_pages_note();
  const bool malloc_asks = note == "asked for by glibc's malloc (glibc.malloc.hugetlb=1; transparent huge pages: madvise)";
  const bool asked = malloc_asks || note.rfind("asked for buffers of 2 MiB and more (transparent huge pages: ", 0) == 0;
  EXPECT_TRUE(asked || note == "none: the kernel's transparent huge pages are off (never)") << note;
  HostAllocator::instance().trim();  // fresh blocks, not a larger one cached by another test
  Buffer large(5 << 20, MemCategory::activations), small(1 << 20, MemCategory::activations);
  if (!malloc_asks) {  // with it, no need
    EXPECT_EQ(reinterpret_cast<uintptr_t>(large.data()) % (2 << 20), 0u);
  }
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % 64, 0u);
  const std::string flags = vm_flags_at(large.data());
  // Where /proc is there and the kernel has THP (its mode known; without THP madvise refuses).
  if (!flags.empty() && asked && note.find("(transparent huge pages: unknown)") == std::string::npos) {
    EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
    if (!malloc_asks) {  // then glibc asks as it sees fit: all of its heap, not a 1 MiB block it maps apart
      EXPECT_EQ(vm_flags_at(static_cast<const char*>(large.data()) + (4 << 20)).find(" hg"), std::string::npos)
          << "the block's tail, short of a whole huge page, stays in small pages";
      EXPECT_EQ(vm_flags_at(small.data()).find(" hg"), std::string::npos);
    }
  }
}

TEST(HostAllocator, SaysHowMuchOfTheProcessIsInHugePages) {
  const double bytes = process_huge_page_bytes();
  if (!std::filesystem::exists("/proc/self/smaps_rollup")) {
    EXPECT_EQ(bytes, -1);
    return;
  }
  EXPECT_GE(bytes, 0);
  EXPECT_EQ(std::fmod(bytes, 4096), 0) << bytes;  // whole pages, read in kB
}

// A small "device" of 3 MiB for the allocator below: its allocations fail beyond that.
std::map<void*, size_t> small_device_blocks;
size_t small_device_used = 0;
void* small_device_alloc(size_t bytes) {
  if (small_device_used + bytes > (size_t(3) << 20)) return nullptr;
  void* p = std::malloc(bytes);
  small_device_blocks[p] = bytes;
  small_device_used += bytes;
  return p;
}
void small_device_free(void* p) {
  small_device_used -= small_device_blocks.at(p);
  small_device_blocks.erase(p);
  std::free(p);
}

// Freed blocks of other sizes are given back when memory runs out, and the allocation retried;
// an allocation that cannot fit even then says so, with what to do.
TEST(CachingAllocator, GivesBackCachedBlocksBeforeRunningOutOfMemory) {
  CachingAllocator a(small_device_alloc, small_device_free, "test device");
  void* p = a.allocate(size_t(1) << 20, MemCategory::activations);
  void* q = a.allocate(size_t(1) << 20, MemCategory::activations);
  a.release(p);
  a.release(q);
  EXPECT_EQ(a.stats().cached_bytes, size_t(2) << 20);
  EXPECT_EQ(small_device_used, size_t(2) << 20);
  // 3 MiB: more than the cache's blocks could serve (at most 2x), more than the device has left.
  void* big = a.allocate(size_t(3) << 20, MemCategory::workspace);
  EXPECT_NE(big, nullptr);
  EXPECT_EQ(a.stats().cached_bytes, 0u);
  const std::string e = [&] {
    try {
      a.allocate(size_t(1) << 20, MemCategory::activations);
    } catch (const Error& err) {
      return std::string(err.what()) + " / " + err.hint();
    }
    return std::string();
  }();
  EXPECT_NE(e.find("out of test device memory allocating 1.05 MB"), std::string::npos) << e;
  EXPECT_NE(e.find("--batch-size"), std::string::npos) << e;
  a.release(big);
  a.trim();
  EXPECT_EQ(small_device_used, 0u);
}

TEST(FormatBytes, ReadsLikeATable) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(60.13e6), "60.13 MB");
  EXPECT_EQ(format_bytes(2.5e9), "2.50 GB");
  EXPECT_EQ(format_bytes(3.2e15), "3.20 PB");
  EXPECT_EQ(format_bytes(4e21), "4000.00 EB");
  EXPECT_EQ(format_binary_bytes(16 << 10), "16 KiB");
  EXPECT_EQ(format_binary_bytes(64 << 20), "64 MiB");
  EXPECT_EQ(format_binary_bytes(1.5 * (1 << 30)), "1.5 GiB");
  EXPECT_EQ(format_binary_bytes(100), "100 B");
}

// A tiny run's epoch reads in ms, not "0.0 s"; a huge job in days and years, not millions of hours.
TEST(FormatSeconds, PicksTheUnitThatKeepsTheDigits) {
  EXPECT_EQ(format_seconds(362e-6), "362 us");
  EXPECT_EQ(format_seconds(53.64e-6), "53.6 us");
  EXPECT_EQ(format_seconds(0.00541), "5.41 ms");
  EXPECT_EQ(format_seconds(0.07797), "78.0 ms");
  EXPECT_EQ(format_seconds(0.97734), "977 ms");
  EXPECT_EQ(format_seconds(0.9996), "1.0 s");  // rounds up into the next unit, not to "1000 ms"
  EXPECT_EQ(format_seconds(12.34), "12.3 s");
  EXPECT_EQ(format_seconds(600), "10.0 min");
  EXPECT_EQ(format_seconds(50.8 * 3600), "50.8 h");
  EXPECT_EQ(format_seconds(26.6 * 86400), "26.6 days");
  EXPECT_EQ(format_seconds(11.2 * 365.25 * 86400), "11.2 years");
}

TEST(Closest, SuggestsOneCandidateWithinTwoEdits) {
  EXPECT_EQ(edit_distance("tran", "train"), 1u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("fp23", "fp32"), 1u);  // a swap of neighbours is one typo
  EXPECT_EQ(edit_distance("abc", "ca"), 3u);     // not two: each letter is swapped or edited once
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(closest("tran", {"plan", "train"}), "train");  // 1 edit beats 2
  EXPECT_EQ(closest("tflop", {"tflops", "tdp_w"}), "tflops");
  EXPECT_EQ(closest("xyzzy", {"train", "plan"}), "");
  EXPECT_EQ(listed({}), "");
  EXPECT_EQ(listed({"a"}), "a");
  EXPECT_EQ(listed({"a", "b"}), "a and b");
  EXPECT_EQ(listed({"a", "b", "c"}), "a, b and c");
  EXPECT_EQ(closest("fp8", {"fp32", "fp16"}), "");  // two edits in three letters: another word
  EXPECT_EQ(closest("trian", {"train", "plan"}), "train");
}

// Found by fuzzing checkpoints: a parse error quoted the damaged bytes it read ("last read:
// '"ten\x82'"), which reached the terminal as they were.
TEST(Printable, DamagedBytesAreEscapedAndTextIsKept) {
  EXPECT_EQ(printable("plain text, 1.5 MB\n"), "plain text, 1.5 MB\n");
  EXPECT_EQ(printable("gr\xc3\xb6\xc3\x9f" "e \xe2\x86\x92 \xf0\x9f\x98\x80"), "gr\xc3\xb6\xc3\x9f" "e \xe2\x86\x92 \xf0\x9f\x98\x80");  // UTF-8 kept
  EXPECT_EQ(printable("\"ten\x82\""), "\"ten\\x82\"");     // a lone continuation byte
  EXPECT_EQ(printable("a\xc3"), "a\\xc3");                 // a sequence cut short
  EXPECT_EQ(printable("\xc3(x"), "\\xc3(x");               // a lead byte without its continuation
  EXPECT_EQ(printable(std::string("\x01\x7f\0", 3)), "\\x01\\x7f\\x00");  // control characters
  EXPECT_EQ(printable("\xff\xc0\xaf"), "\\xff\\xc0\\xaf");   // bytes UTF-8 never has
}

TEST(FormatDecimals, SmallValuesKeepTwoSignificantDigits) {
  EXPECT_EQ(format_decimals(0.0054, 3), "0.0054");  // a 5.4 us layer in a ms column
  EXPECT_EQ(format_decimals(0.036, 3), "0.036");
  EXPECT_EQ(format_decimals(2.2241, 3), "2.224");
  EXPECT_EQ(format_decimals(-0.00012, 1), "-0.00012");
  EXPECT_EQ(format_decimals(57.83, 1), "57.8");
  EXPECT_EQ(format_decimals(0.0, 3), "0.000");  // free is free
  EXPECT_EQ(format_decimals(387781.2, 0), "387781");
  EXPECT_EQ(format_decimals(1, 0), "1");  // a count: 1 worker, not "1.0"
  EXPECT_EQ(format_decimals(5.4, 0), "5");
}

}  // namespace
}  // namespace dlperf::test
