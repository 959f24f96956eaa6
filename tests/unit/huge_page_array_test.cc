#include "tokenizer/huge_page_array.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "testing/peak_rss.h"

namespace pileprep::internal {
namespace {

using ::pileprep::testing::ProcStatusKiB;
using ::pileprep::testing::ResetPeakRss;

struct alignas(64) Line {
  uint64_t words[8];
};

TEST(HugePageArray, StartsZeroFilledAtEverySize) {
  // Below, at and above the size where huge pages are asked for (1 MB), and not a multiple of a page.
  for (size_t n : {size_t{1}, size_t{1000}, size_t{16384}, size_t{16385}, size_t{50000}}) {
    HugePageArray<Line> a(n);
    ASSERT_EQ(a.size(), n);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; ++i) {
      for (uint64_t w : a[i].words) sum |= w;
    }
    EXPECT_EQ(sum, 0u) << n;
  }
}

TEST(HugePageArray, ElementsAreAlignedAndWritableToTheEnd) {
  HugePageArray<Line> a(50000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % alignof(Line), 0u);
  for (size_t i = 0; i < a.size(); ++i) a[i].words[7] = i;
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i].words[7], i);
}

TEST(HugePageArray, CapacityIsTheWholePagesAndAllOfItIsWritable) {
  // 4 KB pages below 1 MB, 2 MB pages from there on; buffers use the rounding as room to grow.
  for (size_t n : {size_t{1}, size_t{4097}, size_t{(1 << 20) - 1}, size_t{(1 << 20) + 1},
                   size_t{(2 << 20) + 64}}) {
    HugePageArray<char> a(n);
    const size_t page = n < (1 << 20) ? 4096 : (2 << 20);
    EXPECT_EQ(a.capacity(), (n + page - 1) / page * page) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % page, 0u) << n;
    a[a.capacity() - 1] = 'x';
    EXPECT_EQ(a[a.capacity() - 1], 'x');
  }
  EXPECT_EQ(HugePageArray<Line>(3).capacity(), size_t{4096} / sizeof(Line));
  EXPECT_EQ(HugePageArray<char>().capacity(), 0u);
}

// Grow keeps the contents and zero-fills the rest, below and above the 1 MB where pages are 2 MB
// and moved rather than copied; the array stays aligned to its page size.
TEST(HugePageArray, GrowKeepsTheContentsAndZeroFillsTheRest) {
  const std::vector<std::pair<size_t, size_t>> steps = {
      {100, 5000},                               // 4 KB pages, copied
      {5000, size_t{3} << 20},                   // 4 KB pages to 2 MB pages
      {size_t{3} << 20, size_t{9} << 20},        // 2 MB pages, moved
      {size_t{9} << 20, (size_t{9} << 20) + 7},  // inside the last page: no move
  };
  for (const auto& [from, to] : steps) {
    HugePageArray<char> a(from);
    // The whole capacity, not just size(): buffers write up to capacity().
    const size_t old_capacity = a.capacity();
    for (size_t i = 0; i < old_capacity; ++i) a[i] = static_cast<char>('a' + i % 23);
    a.Grow(to);
    ASSERT_EQ(a.size(), to);
    ASSERT_GE(a.capacity(), to);
    const size_t page = to < (size_t{1} << 20) ? 4096 : (size_t{2} << 20);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % page, 0u) << from << " -> " << to;
    size_t wrong = 0;
    for (size_t i = 0; i < old_capacity; ++i) wrong += a[i] != static_cast<char>('a' + i % 23);
    for (size_t i = old_capacity; i < a.capacity(); ++i) wrong += a[i] != 0;
    EXPECT_EQ(wrong, 0u) << from << " -> " << to;
    a[a.capacity() - 1] = 'z';  // all of it writable
  }
}

// Growing a large array moves its pages: the process never holds the old and the new at once
// (a buffer near the parser's 4 GiB line ceiling peaked at 8 GiB while it was copied). Checked by
// the peak RSS (VmHWM) reset before, as the largest allocation is otherwise not visible.
TEST(HugePageArray, GrowingALargeArrayDoesNotHoldTwoCopies) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizers' shadow memory makes RSS meaningless here";
#endif
  HugePageArray<char> a(size_t{256} << 20);  // 256 MB, every page faulted in
  if (!ResetPeakRss()) GTEST_SKIP() << "no /proc/self/clear_refs: the peak cannot be reset";
  const long base = ProcStatusKiB("VmHWM");
  ASSERT_GT(base, 200L << 10);
  a.Grow(size_t{384} << 20);
  const long peak = ProcStatusKiB("VmHWM");
  // Moved: the peak is the new 384 MB (+128 MB). Copied, it was 256 + 384 MB (+384 MB).
  EXPECT_LT(peak - base, 200L << 10) << "peak grew by " << (peak - base) / 1024 << " MB";
}

TEST(HugePageArray, MoveTransfersAndResetReplaces) {
  HugePageArray<uint32_t> a(10);
  a[9] = 7;
  HugePageArray<uint32_t> b(std::move(a));
  EXPECT_EQ(b.size(), 10u);
  EXPECT_EQ(b[9], 7u);
  EXPECT_EQ(a.size(), 0u);  // NOLINT(bugprone-use-after-move): documented empty after a move
  b.Reset(20);
  EXPECT_EQ(b.size(), 20u);
  EXPECT_EQ(b[9], 0u);
  b.Reset(0);
  EXPECT_EQ(b.size(), 0u);
  EXPECT_EQ(b.data(), nullptr);
}

}  // namespace
}  // namespace pileprep::internal
