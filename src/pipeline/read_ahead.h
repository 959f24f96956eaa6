// The read-ahead window of a file read front to back (FileSource::Read): which bytes to ask into
// the page cache next. A pure function, so that its ranges can be tested without a disk. Private to
// src/.
#ifndef PILEPREP_SRC_PIPELINE_READ_AHEAD_H_
#define PILEPREP_SRC_PIPELINE_READ_AHEAD_H_

#include <algorithm>
#include <cstdint>

namespace pileprep::internal {

struct ReadAheadRange {
  uint64_t from = 0, to = 0;  // empty when from == to
};

// A reader has returned bytes [0, read) of a file of `size` bytes and has asked for [0, advised)
// already. Keeps at least `window` bytes ahead of `read` asked for (or up to the end of the file):
// once less than the window is ahead, the next range runs from where the last ended to half a
// window past the window, so each call covers about half a window and none overlap.
inline ReadAheadRange NextReadAhead(uint64_t read, uint64_t advised, uint64_t size,
                                    uint64_t window) {
  if (window == 0 || advised >= size || advised >= read + window) return {};
  const uint64_t step = std::max<uint64_t>(window / 2, 1);
  const uint64_t from = std::max(advised, read);
  return {from, std::min(size, read + window + step)};
}

}  // namespace pileprep::internal

#endif  // PILEPREP_SRC_PIPELINE_READ_AHEAD_H_
