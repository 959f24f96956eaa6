// POSIX file helpers for the format stage: an owning fd, a buffered sequential writer, fsync of
// files and directories, rename, unlink, whole-file reads. Every error names the path, the
// operation (and byte offset where one applies) and strerror: "out/x.bin.pileprep-tmp: write at
// byte 4096: No space left on device". Not thread-safe; one owner at a time.
#ifndef PILEPREP_SRC_FORMAT_FILE_UTIL_H_
#define PILEPREP_SRC_FORMAT_FILE_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tokenizer/huge_page_array.h"

namespace pileprep::internal {

// "path: what: strerror(err)", as an absl::Status whose code follows errno (ENOENT -> NotFound,
// EACCES -> PermissionDenied, ENOSPC -> ResourceExhausted, ...).
absl::Status ErrnoError(int err, absl::string_view path, absl::string_view what);

// Owns a file descriptor; closes it (ignoring errors) on destruction. Close() reports close errors,
// which NFS uses to deliver deferred write errors.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release();
  void Reset();
  // Closes; returns the errno of close(2) (0 on success). EINTR counts as closed (Linux semantics).
  int Close();

 private:
  int fd_ = -1;
};

// Opens `path` for writing: created (mode 0666 & ~umask, as Python's open) or truncated; a
// symbolic link there is not followed (an error, ELOOP).
absl::StatusOr<UniqueFd> OpenForWrite(const std::string& path);
// Opens `path` read-only; it must be a regular file (a symlink to one is): anything else is
// InvalidArgument ("not a regular file") without waiting, as opening a FIFO would for a writer.
absl::StatusOr<UniqueFd> OpenForRead(const std::string& path);

// write(2) until all of `data` is written, retrying EINTR and short writes, and a write that
// O_DIRECT turns down (EINVAL) without it. `offset` is only for messages.
absl::Status WriteAll(int fd, const char* data, size_t size, const std::string& path,
                      uint64_t offset);

// Reads up to `size` bytes, retrying EINTR and short reads; returns the bytes read (< size only at
// EOF).
absl::StatusOr<size_t> ReadFull(int fd, char* data, size_t size, const std::string& path,
                                uint64_t offset);

// Reads the whole file. kAnyFile takes a pipe too (a vocabulary given as `<(...)`), read to its
// end; kRegularFileOnly opens through OpenForRead (anything else refused, without waiting).
enum ReadFileKind { kAnyFile, kRegularFileOnly };
absl::StatusOr<std::string> ReadFileToString(const std::string& path, ReadFileKind kind = kAnyFile);

// fsync(2) of an open file.
absl::Status SyncFd(int fd, const std::string& path);
// Opens the directory and fsyncs it, so that renames and unlinks in it are durable. Filesystems
// that cannot fsync a directory (EINVAL, ENOTSUP) are accepted silently.
absl::Status SyncDirectory(const std::string& dir);

// rename(2); both paths in one directory, so it never crosses filesystems.
absl::Status RenameFile(const std::string& from, const std::string& to);
// unlink(2); a missing file is success.
absl::Status RemoveFileIfExists(const std::string& path);

// Publishes a dataset written under temporary names as {prefix}.bin and {prefix}.idx (the writer's
// and merge's last step). The old .idx goes first, so that no reader pairs it with the new .bin
// (with `sync`, its removal is made durable before the .bin takes the name); then the .bin is
// renamed, the directory synced, the .idx renamed and the directory synced again: POSIX does not
// order renames on a power loss (ext4 and XFS journal them in order; others need not), so a
// durable new .idx is never beside the old .bin. A failure once the old .idx is gone removes both
// final names: neither the old pair nor the new one is left, never half a dataset.
absl::Status PublishDataset(const std::string& bin_tmp, const std::string& idx_tmp,
                            const std::string& prefix, bool sync);

// The directory part of `path` ("." when there is none, "/" for "/x").
std::string DirName(const std::string& path);
// Whether `path` exists (lstat succeeds).
bool PathExists(const std::string& path);

// Buffered sequential writer to a new (or truncated) file. Data is copied into a buffer of fixed
// capacity and written with one write(2) per full buffer; appends larger than the buffer go
// straight to the file. Callers may also fill the buffer in place (WritableSpan/Commit) to convert
// data without a copy.
//
// Direct mode (Open(..., /*direct=*/true)) is for large outputs nobody reads back soon (the .bin):
// where the file system takes O_DIRECT, full buffers go to a background thread that writes them past
// the page cache while the caller fills the next one (three buffers in all). The kernel's copy into
// the page cache cost a fifth of a one-thread job and sat in the pipeline's serial write stage.
// Whole 4 KiB blocks go out that way; the last partial block is written normally at Sync or Close.
// A write error of the background thread is returned by the next Flush, Sync or Close (Append and
// Commit flush when the buffer is full). After Sync the writer carries on as a buffered one. Where
// O_DIRECT is refused (tmpfs, some FUSE file systems) the writer works as in buffered mode.
// Thread model: one caller thread at a time, as for the buffered mode; the background thread is the
// writer's own.
class BufferedFileWriter {
 public:
  static absl::StatusOr<std::unique_ptr<BufferedFileWriter>> Open(std::string path,
                                                                  size_t buffer_bytes,
                                                                  bool direct = false);
  ~BufferedFileWriter();  // closes without flushing; call Close() to keep the data

  absl::Status Append(const void* data, size_t size);
  template <typename T>
  absl::Status AppendValue(const T& value) {
    return Append(&value, sizeof(value));
  }

  // Free space in the buffer, starting at cursor(). Commit(n) marks n bytes of it written.
  size_t available() const { return capacity_ - used_; }
  char* cursor() { return buffer_.data() + used_; }
  void Commit(size_t n) { used_ += n; }
  size_t capacity() const { return capacity_; }

  // Every `bytes` written, gets the data on its way to stable storage, so that the final fsync of a
  // multi-GB output waits for little and the disk's work overlaps the work that produces the data.
  // Buffered mode: starts the kernel's writeback (sync_file_range, Linux). Direct mode: a second
  // background thread calls fdatasync, since there the data is written already and what an fsync
  // waits for is the device's flush of its cache, which grows with the bytes written since the last
  // one (a 424 MiB file: 215 ms at the end; 5-20 ms after fdatasyncs every 32-64 MiB, this
  // project's VM). Errors surface at Sync() or Close(). 0 (the default) turns it off. Call before
  // the first Append.
  void SetEarlyWriteback(uint64_t bytes);

  // Writes the buffer to the file (direct mode: hands over all of it but the last partial block,
  // which stays buffered until Sync or Close).
  absl::Status Flush();
  // Whether full buffers are being written past the page cache.
  bool direct() const { return async_ != nullptr; }
  // Flush, then fsync.
  absl::Status Sync();
  // Flush, then close (reporting close errors). The writer is unusable afterwards.
  absl::Status Close();

  // Bytes appended so far (written or buffered).
  uint64_t bytes() const { return flushed_ + used_; }
  const std::string& path() const { return path_; }

 private:
  BufferedFileWriter(std::string path, UniqueFd fd, size_t buffer_bytes, bool direct);
  // Page-aligned, as O_DIRECT needs, and of 2 MB pages from 1 MB on (HugePageArray): a buffer is
  // one or two page faults instead of hundreds, each costly in a VM.
  using Buffer = HugePageArray<char>;
  static Buffer NewBuffer(size_t bytes);
  struct Async;  // direct mode's background writer
  // Direct mode: waits until every handed-over buffer is written; the first write error, if any.
  absl::Status Drain();
  // Flush, then (direct mode) the last partial block too, leaving direct mode.
  absl::Status FlushAll();

  std::string path_;
  UniqueFd fd_;
  Buffer buffer_;
  std::unique_ptr<Async> async_;
  size_t capacity_;
  size_t used_ = 0;
  uint64_t flushed_ = 0;
  absl::Status failed_;  // an error of the background fdatasync, returned by every later call
  uint64_t writeback_every_ = 0;
  uint64_t writeback_from_ = 0;  // first byte not yet handed to writeback
  void MaybeStartWriteback();
};

}  // namespace pileprep::internal

#endif  // PILEPREP_SRC_FORMAT_FILE_UTIL_H_
