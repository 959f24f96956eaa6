// A ByteSource over a string held in memory, for tests: hands out at most `chunk` bytes per Read, so
// a test can feed the pipeline in any chunking.
#ifndef PILEPREP_TESTS_TESTING_MEMORY_SOURCE_H_
#define PILEPREP_TESTS_TESTING_MEMORY_SOURCE_H_

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "pileprep/pipeline.h"

namespace pileprep::testing {

class MemorySource : public ByteSource {
 public:
  explicit MemorySource(std::string data, size_t chunk = std::numeric_limits<size_t>::max(),
                        std::string name = "memory.jsonl.zst")
      : data_(std::move(data)), chunk_(chunk), name_(std::move(name)) {}
  absl::StatusOr<size_t> Read(char* buffer, size_t capacity) override {
    const size_t n = std::min({chunk_, capacity, data_.size() - pos_});
    std::memcpy(buffer, data_.data() + pos_, n);
    pos_ += n;
    return n;
  }
  const std::string& name() const override { return name_; }

 private:
  std::string data_;
  size_t chunk_;
  std::string name_;
  size_t pos_ = 0;
};

}  // namespace pileprep::testing

#endif  // PILEPREP_TESTS_TESTING_MEMORY_SOURCE_H_
