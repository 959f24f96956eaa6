// A ByteSource read where it lies (View()), for tests: its bytes end `slack` zero bytes before a
// page that cannot be read, and ViewSlack() says `slack`, so that a read past what the source
// allows crashes at once, in code ASan does not instrument too (simdjson). Read() and a Fetch past
// the view are errors: a viewed source is never read, nor fetched beyond its end.
#ifndef PILEPREP_TESTS_TESTING_GUARDED_VIEW_SOURCE_H_
#define PILEPREP_TESTS_TESTING_GUARDED_VIEW_SOURCE_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pileprep/pipeline.h"

namespace pileprep::testing {

class GuardedViewSource : public ByteSource {
 public:
  GuardedViewSource(const std::string& data, size_t slack = 0, std::string name = "view.jsonl")
      : size_(data.size()), slack_(slack), name_(std::move(name)) {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    mapped_ = (size_ + slack_ + page - 1) / page * page + page;
    void* area =
        ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (area == MAP_FAILED) return;
    area_ = static_cast<char*>(area);
    if (::mprotect(area_ + mapped_ - page, page, PROT_NONE) != 0) {
      ::munmap(area_, mapped_);
      area_ = nullptr;
      return;
    }
    begin_ = area_ + mapped_ - page - slack_ - size_;
    if (size_ > 0)
      std::memcpy(begin_, data.data(), size_);  // the slack after it: the mapping's zeros
  }
  ~GuardedViewSource() override {
    if (area_ != nullptr) ::munmap(area_, mapped_);
  }
  GuardedViewSource(const GuardedViewSource&) = delete;
  GuardedViewSource& operator=(const GuardedViewSource&) = delete;
  bool ok() const { return area_ != nullptr; }
  absl::StatusOr<size_t> Read(char*, size_t) override {
    return absl::InternalError(absl::StrCat(name_, ": read, not viewed"));
  }
  const std::string& name() const override { return name_; }
  std::optional<std::string_view> View() override { return std::string_view(begin_, size_); }
  size_t ViewSlack() const override { return slack_; }
  absl::Status Fetch(size_t from, size_t to) override {
    if (from > to || to > size_) {
      return absl::InternalError(
          absl::StrCat(name_, ": Fetch(", from, ", ", to, ") of ", size_, " bytes"));
    }
    return absl::OkStatus();
  }

 private:
  size_t size_, slack_, mapped_ = 0;
  std::string name_;
  char* area_ = nullptr;
  char* begin_ = nullptr;
};

}  // namespace pileprep::testing

#endif  // PILEPREP_TESTS_TESTING_GUARDED_VIEW_SOURCE_H_
