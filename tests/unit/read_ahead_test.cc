#include "pipeline/read_ahead.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace pileprep::internal {
namespace {

// A file read front to back in reads of `chunk` bytes, NextReadAhead asked before each read, as
// FileSource::Read does. Returns the ranges advised.
std::vector<ReadAheadRange> Simulate(uint64_t size, uint64_t chunk, uint64_t window) {
  std::vector<ReadAheadRange> advised;
  uint64_t read = 0, upto = 0;
  while (read < size) {
    const ReadAheadRange r = NextReadAhead(read, upto, size, window);
    if (r.from < r.to) {
      advised.push_back(r);
      upto = r.to;
    }
    // What must be asked for by now: the window ahead of the read, or the rest of the file.
    EXPECT_GE(upto, std::min(size, read + window)) << "size " << size << " window " << window;
    read = std::min(size, read + chunk);
  }
  return advised;
}

TEST(ReadAhead, KeepsTheWindowAheadInRangesThatNeitherOverlapNorPassTheEnd) {
  for (uint64_t window :
       {uint64_t{1}, uint64_t{2}, uint64_t{4096}, uint64_t{100000}, uint64_t{64} << 20}) {
    for (uint64_t size : {uint64_t{1}, uint64_t{4095}, uint64_t{300000}, uint64_t{10} << 20}) {
      for (uint64_t chunk : {uint64_t{1}, uint64_t{7919}, uint64_t{65536}}) {
        if (size / chunk > 20000) continue;  // enough steps
        const std::vector<ReadAheadRange> ranges = Simulate(size, chunk, window);
        ASSERT_FALSE(ranges.empty());
        EXPECT_EQ(ranges.front().from, 0u);
        uint64_t end = 0;
        for (const ReadAheadRange& r : ranges) {
          EXPECT_LT(r.from, r.to);
          EXPECT_GE(r.from, end) << "ranges overlap";  // a gap is bytes already read
          EXPECT_LE(r.to, size) << "advised past the end";
          end = r.to;
        }
        // With reads no longer than the window every byte is asked for before it is read (longer
        // reads take bytes nobody asked for, which they read at once).
        if (chunk <= window) {
          EXPECT_EQ(end, size) << "the whole file is asked for";
        }
        // Each range but the last is at least half a window long: few calls, however small the
        // reads.
        for (size_t i = 0; i + 1 < ranges.size(); ++i) {
          EXPECT_GE(ranges[i].to - ranges[i].from, std::max<uint64_t>(window / 2, 1));
        }
      }
    }
  }
}

TEST(ReadAhead, FirstRangeIsTheWindowAndHalfAndNothingWhenOff) {
  EXPECT_EQ(NextReadAhead(0, 0, 1000, 100).to, 150u);
  EXPECT_EQ(NextReadAhead(0, 0, 120, 100).to, 120u);  // not past the end
  const ReadAheadRange off = NextReadAhead(0, 0, 1000, 0);
  EXPECT_EQ(off.from, off.to);
  const ReadAheadRange ahead = NextReadAhead(10, 150, 1000, 100);  // 140 ahead: enough
  EXPECT_EQ(ahead.from, ahead.to);
}

}  // namespace
}  // namespace pileprep::internal
