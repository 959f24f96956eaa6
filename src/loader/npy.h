// Minimal .npy (format 1.0) reading and writing for the loader's index cache: little-endian
// int32/int64/uint32/int16 arrays of one or two dimensions, C order.
#ifndef PILEPREP_SRC_LOADER_NPY_H_
#define PILEPREP_SRC_LOADER_NPY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace pileprep::internal {

// "<i4", "<i8", "<u4", "<i2".
struct NpyArray {
  std::string descr;
  std::vector<int64_t> shape;
  std::vector<int64_t> values;  // widened
};

// The whole file contents of an array with `descr` and `shape` holding `values` (narrowed).
std::string EncodeNpy(const std::string& descr, const std::vector<int64_t>& shape,
                      const int64_t* values, size_t count);
std::string EncodeNpy(const std::string& descr, const std::vector<int64_t>& shape,
                      const int32_t* values, size_t count);
// The header of an array with `descr` and `shape` (magic, version 1.0, the dict padded so that
// the items start on a 64-byte boundary, as numpy.save writes it): the items' little-endian bytes
// follow it in the file.
std::string EncodeNpyHeader(const std::string& descr, const std::vector<int64_t>& shape);

struct NpyHeader {
  std::string descr;
  std::vector<int64_t> shape;
  size_t data_offset = 0;  // where the items start
  size_t count = 0;        // the product of the shape
  size_t itemsize = 0;
};
// Checks the header of a .npy file's `bytes` (and that the file holds exactly its items).
absl::StatusOr<NpyHeader> ParseNpyHeader(absl::string_view bytes, const std::string& name);

// A .npy file mapped read-only: `count` items of `descr` at `data` (aligned for it), valid while
// `mapping` (shared by the arrays that point into it) lives.
struct MappedNpy {
  std::string descr;
  std::vector<int64_t> shape;
  size_t count = 0;
  const void* data = nullptr;
  std::shared_ptr<const void> mapping;
};
// Where the file cannot be mapped (mmap fails), it is read into memory instead. Errors: the
// file's (open, read) as NotFound, PermissionDenied...; DataLoss for a header or size that is
// wrong, or items not aligned.
absl::StatusOr<MappedNpy> MapNpy(const std::string& path);

// Parses what EncodeNpy writes (and numpy's own 1-D/2-D C-order files of those dtypes).
absl::StatusOr<NpyArray> DecodeNpy(const std::string& bytes, const std::string& name);

// Writes `bytes` to a unique temporary beside `path`, fsyncs it and renames it to `path`, so that
// concurrent writers of identical contents and readers never see a partial file.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes);
// The same for a file that is `parts` one after the other, each written from where it lies: an
// index array of gigabytes goes to its .npy file behind its header with no copy of it made.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::Span<const absl::string_view> parts);
// mkdir -p.
absl::Status MakeDirectories(const std::string& dir);

// The payload ErrnoOf reads.
inline constexpr absl::string_view kErrnoPayload = "type.googleapis.com/pileprep.Errno";
// `status` carrying `err` for ErrnoOf (include/pileprep/indexed_dataset_view.h).
absl::Status WithErrno(absl::Status status, int err);
// The status of a failed system call: "path: what: strerror", its code from the errno, the errno
// attached.
absl::Status ErrnoStatus(int err, const std::string& path, absl::string_view what);

// An exclusive flock(2) on `path` (created if missing), held until destruction: the ranks that
// open one dataset at once build its indices one at a time, so that the first builds and stores
// them and the others, once it is theirs, find them stored (Megatron builds on rank 0 behind a
// barrier). Blocks until the lock is free, or, given `interrupted`, until that returns true (asked
// every 0.1 s while another holds the lock; then nothing is held and interrupted() is true). Best
// effort: where the file cannot be opened or flock is refused (a filesystem without it), nothing is
// held and each caller builds, as without it. The lock file stays (removing it would let a waiter
// lock an unlinked file beside a new one). A process forked while one is held or awaited does not
// hold it (its copy is closed at the fork). Another user's lock file (0644) is locked through a
// read-only descriptor, which flock takes on a local file system.
class FileLock {
 public:
  explicit FileLock(const std::string& path, const std::function<bool()>& interrupted = {});
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  // Whether the lock is held (false where the file could not be opened or flock was refused).
  bool held() const { return fd_ >= 0; }
  // Whether the wait was given up because `interrupted` said so.
  bool interrupted() const { return interrupted_; }

 private:
  void Release();
  int fd_ = -1;
  bool interrupted_ = false;
};

// The wait of a rank whose cached files missed: takes the build lock at `lock_path` into
// *building. If `stored_path` (the file a store writes last) is there by then, another rank built
// and stored the files while this one waited: the lock is released and `load` (a check of every
// stored value: seconds at The Pile's scale) runs without it, so that the ranks that waited check
// at once rather than one after another under the lock (Megatron's ranks load after a barrier, in
// parallel). Returns what `load` returned; on false (nothing stored, or stored files that fail
// their check) *building holds the lock again for the build and store that follow, and, where it
// is held, the temporaries of WriteFileAtomically whose paths start with `temporaries` are removed
// first: a rank killed while it stored (preempted, out of memory) left them, up to GBs each, and
// only the lock's holder writes them. Cancelled, with nothing held, when `interrupted` (FileLock's)
// ends a wait.
absl::StatusOr<bool> AwaitStoredOrLock(const std::string& lock_path, const std::string& stored_path,
                                       const std::string& temporaries,
                                       const std::function<bool()>& load,
                                       const std::function<bool()>& interrupted,
                                       std::optional<FileLock>* building);

}  // namespace pileprep::internal

#endif  // PILEPREP_SRC_LOADER_NPY_H_
