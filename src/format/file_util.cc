#include "format/file_util.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace pileprep::internal {
namespace {

std::string StrError(int err) {
  char buf[256];
  // GNU strerror_r returns a pointer that may or may not be `buf`; strerror itself is not
  // thread-safe.
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
  return strerror_r(err, buf, sizeof(buf));
#else
  if (strerror_r(err, buf, sizeof(buf)) != 0) return absl::StrCat("errno ", err);
  return buf;
#endif
}

}  // namespace

absl::Status ErrnoError(int err, absl::string_view path, absl::string_view what) {
  return absl::Status(absl::ErrnoToStatusCode(err),
                      absl::StrCat(path, ": ", what, ": ", StrError(err)));
}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = other.Release();
  }
  return *this;
}

int UniqueFd::Release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void UniqueFd::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int UniqueFd::Close() {
  if (fd_ < 0) return 0;
  int rc = ::close(fd_);
  fd_ = -1;
  // On Linux the descriptor is released even when close reports EINTR; retrying could close
  // another's.
  if (rc != 0 && errno != EINTR) return errno;
  return 0;
}

absl::StatusOr<UniqueFd> OpenForWrite(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoError(errno, path, "cannot create");
  return UniqueFd(fd);
}

absl::StatusOr<UniqueFd> OpenForRead(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoError(errno, path, "cannot open");
  return UniqueFd(fd);
}

absl::Status WriteAll(int fd, const char* data, size_t size, const std::string& path,
                      uint64_t offset) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, path, absl::StrCat("write at byte ", offset));
    }
    if (n == 0) return ErrnoError(ENOSPC, path, absl::StrCat("write at byte ", offset));
    data += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> ReadFull(int fd, char* data, size_t size, const std::string& path,
                                uint64_t offset) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::read(fd, data + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, path, absl::StrCat("read at byte ", offset + done));
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  absl::StatusOr<UniqueFd> fd = OpenForRead(path);
  if (!fd.ok()) return fd.status();
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return ErrnoError(errno, path, "stat");
  std::string out;
  if (S_ISREG(st.st_mode)) out.reserve(static_cast<size_t>(st.st_size));
  char chunk[1 << 16];
  while (true) {
    absl::StatusOr<size_t> n = ReadFull(fd->get(), chunk, sizeof(chunk), path, out.size());
    if (!n.ok()) return n.status();
    out.append(chunk, *n);
    if (*n < sizeof(chunk)) break;
  }
  return out;
}

absl::Status SyncFd(int fd, const std::string& path) {
  int rc;
  do {
    rc = ::fsync(fd);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) return ErrnoError(errno, path, "fsync");
  return absl::OkStatus();
}

absl::Status SyncDirectory(const std::string& dir) {
  int fd;
  do {
    fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoError(errno, dir, "cannot open directory to fsync it");
  UniqueFd owned(fd);
  int rc;
  do {
    rc = ::fsync(fd);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0 && errno != EINVAL && errno != ENOTSUP) {
    return ErrnoError(errno, dir, "fsync of directory");
  }
  return absl::OkStatus();
}

absl::Status RenameFile(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return ErrnoError(errno, to, absl::StrCat("rename from ", from));
  }
  return absl::OkStatus();
}

absl::Status RemoveFileIfExists(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoError(errno, path, "remove");
  return absl::OkStatus();
}

std::string DirName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  size_t end = path.find_last_not_of('/', slash);
  if (end == std::string::npos) return "/";
  return path.substr(0, end + 1);
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

absl::StatusOr<std::unique_ptr<BufferedFileWriter>> BufferedFileWriter::Open(std::string path,
                                                                             size_t buffer_bytes) {
  if (buffer_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": write buffer of 0 bytes"));
  }
  absl::StatusOr<UniqueFd> fd = OpenForWrite(path);
  if (!fd.ok()) return fd.status();
  return std::unique_ptr<BufferedFileWriter>(
      new BufferedFileWriter(std::move(path), std::move(*fd), buffer_bytes));
}

BufferedFileWriter::BufferedFileWriter(std::string path, UniqueFd fd, size_t buffer_bytes)
    : path_(std::move(path)),
      fd_(std::move(fd)),
      // Not value-initialised: pages are touched only as the buffer fills.
      buffer_(new char[buffer_bytes]),
      capacity_(buffer_bytes) {}

absl::Status BufferedFileWriter::Append(const void* data, size_t size) {
  if (size == 0) return absl::OkStatus();  // `data` may be null (an empty span)
  const char* p = static_cast<const char*>(data);
  if (size <= available()) {
    memcpy(cursor(), p, size);
    used_ += size;
    return absl::OkStatus();
  }
  // Top up the buffer so that writes stay buffer-sized, then bypass it for whole buffers.
  size_t head = available();
  memcpy(cursor(), p, head);
  used_ += head;
  p += head;
  size -= head;
  if (absl::Status s = Flush(); !s.ok()) return s;
  if (size >= capacity_) {
    size_t direct = size - size % capacity_;
    if (absl::Status s = WriteAll(fd_.get(), p, direct, path_, flushed_); !s.ok()) return s;
    flushed_ += direct;
    MaybeStartWriteback();
    p += direct;
    size -= direct;
  }
  memcpy(cursor(), p, size);
  used_ += size;
  return absl::OkStatus();
}

absl::Status BufferedFileWriter::Flush() {
  if (!fd_.valid()) return absl::FailedPreconditionError(absl::StrCat(path_, ": already closed"));
  if (used_ == 0) return absl::OkStatus();
  if (absl::Status s = WriteAll(fd_.get(), buffer_.get(), used_, path_, flushed_); !s.ok())
    return s;
  flushed_ += used_;
  used_ = 0;
  MaybeStartWriteback();
  return absl::OkStatus();
}

void BufferedFileWriter::MaybeStartWriteback() {
#ifdef __linux__
  if (writeback_every_ == 0 || flushed_ - writeback_from_ < writeback_every_) return;
  ::sync_file_range(fd_.get(), static_cast<off64_t>(writeback_from_),
                    static_cast<off64_t>(flushed_ - writeback_from_), SYNC_FILE_RANGE_WRITE);
  writeback_from_ = flushed_;
#endif
}

absl::Status BufferedFileWriter::Sync() {
  if (absl::Status s = Flush(); !s.ok()) return s;
  return SyncFd(fd_.get(), path_);
}

absl::Status BufferedFileWriter::Close() {
  if (absl::Status s = Flush(); !s.ok()) return s;
  if (int err = fd_.Close(); err != 0) return ErrnoError(err, path_, "close");
  return absl::OkStatus();
}

}  // namespace pileprep::internal
