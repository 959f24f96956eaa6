// A read-only memory mapping of a whole file, for the validator, the reader and merge. The bytes are
// shared with the page cache; nothing is copied. A zero-length file maps to an empty view (mmap(2)
// refuses length 0). Errors name the path and strerror. Movable, not copyable; the view lives as long
// as the object. Thread-safe for concurrent reads.
#ifndef PILEPREP_SRC_FORMAT_MAPPED_FILE_H_
#define PILEPREP_SRC_FORMAT_MAPPED_FILE_H_

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace pileprep::internal {

// Reads a T stored at any address: the .idx arrays follow a 34-byte header, so they are never aligned.
template <typename T>
T LoadUnaligned(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

class MappedFile {
 public:
  enum class Access { kSequential, kRandom };
  // Where a file was never written: regions that read as zeros (a file extended by truncate or a
  // seek past its end, or preallocated and not filled). `first`..`first_end` is the first hole;
  // `count` holes, `bytes` in all. None where the file system cannot tell.
  struct Holes {
    uint64_t first = 0, first_end = 0, count = 0, bytes = 0;
  };
  // Maps `path` read-only. `access` is a hint to the kernel (madvise) about the read pattern.
  // `holes`, if given, gets the file's holes (lseek SEEK_HOLE/SEEK_DATA on the descriptor opened
  // here: no page read, no second open of the path).
  static absl::StatusOr<MappedFile> Open(const std::string& path,
                                         Access access = Access::kSequential,
                                         Holes* holes = nullptr);

  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const char* data() const { return data_; }
  size_t size() const { return size_; }
  // Drops the pages of bytes [from, to) of a MappedFile's bytes at `base` (of `size` bytes) that
  // the range covers whole from this process's resident set (madvise MADV_DONTNEED: they stay in
  // the page cache, and a later read maps them again). A scan that calls it behind itself keeps
  // its RSS flat: mapped pages count in RSS, which a job scheduler may enforce (Slurm's
  // jobacct_gather/linux), though the kernel can reclaim them. Never for memory that is not a
  // file mapping: on anonymous memory MADV_DONTNEED discards the contents.
  static void ReleaseMapped(const char* base, size_t size, size_t from, size_t to);
  static constexpr size_t kReleaseStep = size_t{16} << 20;
  // Releases a file mapping's pages behind a scan in order, a step of kReleaseStep bytes at a time
  // (each madvise makes the kernel flush the other threads' TLBs). At(offset): read up to there;
  // the pages behind the last step go. Disabled (enabled = false) it does nothing: for a view that
  // may not be a file mapping.
  class ReleaseBehind {
   public:
    ReleaseBehind(std::string_view mapping, size_t from, bool enabled = true)
        : base_(mapping.data()), size_(mapping.size()), released_(from), enabled_(enabled) {}
    void At(size_t offset) {
      if (enabled_ && offset >= released_ + kReleaseStep) {
        ReleaseMapped(base_, size_, released_, offset);
        released_ = offset;
      }
    }
    // The rest up to `offset`, at the scan's end.
    void Finish(size_t offset) {
      if (enabled_) ReleaseMapped(base_, size_, released_, offset);
      released_ = offset;
    }

   private:
    const char* base_;
    size_t size_;
    size_t released_;
    bool enabled_;
  };
  std::string_view view() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  void Unmap();
  std::string path_;
  const char* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
};

}  // namespace pileprep::internal

#endif  // PILEPREP_SRC_FORMAT_MAPPED_FILE_H_
