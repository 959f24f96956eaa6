#include "tokenizer/huge_page_array.h"

#include <cstdint>
#include <utility>

#include "gtest/gtest.h"

namespace pileprep::internal {
namespace {

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
