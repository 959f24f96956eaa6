#include "format/file_util.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pileprep/status_macros.h"

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
    // O_NOFOLLOW: the paths written are temporaries of fixed names beside the outputs, in
    // directories others may write; a symbolic link planted at one would have the truncate and
    // the writes land on the file it names.
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoError(errno, path, "cannot create");
  return UniqueFd(fd);
}

namespace {
// open(2) for reading, again while a signal interrupts it; an error names the path.
absl::StatusOr<UniqueFd> OpenReadOnly(const std::string& path, int extra_flags) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | extra_flags);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoError(errno, path, "cannot open");
  return UniqueFd(fd);
}
}  // namespace

absl::StatusOr<UniqueFd> OpenForRead(const std::string& path) {
  // O_NONBLOCK: opening a FIFO named like a dataset would otherwise wait for a writer forever
  // (`validate` hung on one); it is taken off again for the regular file this must be.
  PILEPREP_ASSIGN_OR_RETURN(UniqueFd owned, OpenReadOnly(path, O_NONBLOCK | O_NOCTTY));
  const int fd = owned.get();
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoError(errno, path, "stat");
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(path + ": not a regular file");
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return ErrnoError(errno, path, "fcntl");
  }
  return owned;
}

#ifndef O_DIRECT
#define O_DIRECT 0  // never set: BufferedFileWriter::Open leaves direct mode off where it does not exist
#endif

namespace {
// Takes O_DIRECT off `fd`: 1 when it was on, 0 when it was off already, -1 (errno set) when fcntl
// fails.
int LeaveDirect(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return -1;
  if ((flags & O_DIRECT) == 0) return 0;
  return ::fcntl(fd, F_SETFL, flags & ~O_DIRECT) == 0 ? 1 : -1;
}
}  // namespace

absl::Status WriteAll(int fd, const char* data, size_t size, const std::string& path,
                      uint64_t offset) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      // A file system that takes O_DIRECT at open but turns a write down (stricter alignment than
      // 4 KiB): the data goes through the page cache instead.
      if (errno == EINVAL) {
        if (LeaveDirect(fd) == 1) continue;
        errno = EINVAL;
      }
      // errno read before the message is made: its allocation may change errno, and GCC
      // evaluates arguments right to left.
      const int err = errno;
      return ErrnoError(err, path, absl::StrCat("write at byte ", offset));
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
      const int err = errno;  // before StrCat allocates (as in WriteFull)
      return ErrnoError(err, path, absl::StrCat("read at byte ", offset + done));
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path, ReadFileKind kind) {
  // kAnyFile: a plain open, not OpenForRead: a vocabulary may come through a pipe (`<(...)`).
  PILEPREP_ASSIGN_OR_RETURN(UniqueFd fd,
                            kind == kRegularFileOnly ? OpenForRead(path) : OpenReadOnly(path, 0));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError(errno, path, "stat");
  std::string out;
  if (S_ISREG(st.st_mode)) out.reserve(static_cast<size_t>(st.st_size));
  char chunk[1 << 16];
  while (true) {
    absl::StatusOr<size_t> n = ReadFull(fd.get(), chunk, sizeof(chunk), path, out.size());
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
    const int err = errno;  // before StrCat allocates (as in WriteFull)
    return ErrnoError(err, to, absl::StrCat("rename from ", from));
  }
  return absl::OkStatus();
}

absl::Status RemoveFileIfExists(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoError(errno, path, "remove");
  return absl::OkStatus();
}

absl::Status PublishDataset(const std::string& bin_tmp, const std::string& idx_tmp,
                            const std::string& prefix, bool sync) {
  const std::string bin = prefix + ".bin", idx = prefix + ".idx", dir = DirName(prefix);
  const bool had_idx = PathExists(idx);
  PILEPREP_RETURN_IF_ERROR(RemoveFileIfExists(idx));
  // From here on a failure removes both names: an old .bin left without its .idx is half a dataset.
  absl::Status status;
  if (had_idx && sync) status = SyncDirectory(dir);
  if (status.ok()) status = RenameFile(bin_tmp, bin);
  if (status.ok() && sync) status = SyncDirectory(dir);
  if (status.ok()) status = RenameFile(idx_tmp, idx);
  if (status.ok() && sync) status = SyncDirectory(dir);
  if (!status.ok()) {
    RemoveFileIfExists(bin).IgnoreError();
    RemoveFileIfExists(idx).IgnoreError();
    // Best effort: the removal lasts as the rename before it would have (the status says what
    // failed already).
    if (sync) SyncDirectory(dir).IgnoreError();
  }
  return status;
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

namespace {
// O_DIRECT alignment every Linux file system accepts (buffer address, file offset and length).
constexpr size_t kDirectBlock = 4096;
constexpr size_t kDirectBuffers = 3;  // one being filled, up to two being written
}  // namespace

struct BufferedFileWriter::Async {
  std::mutex mu;
  std::condition_variable cv;
  struct Job {
    Buffer data;
    size_t size;
    uint64_t offset;  // where `data` goes in the file, for messages
  };
  std::deque<Job> jobs;       // guarded by mu
  std::vector<Buffer> spare;  // guarded by mu
  bool busy = false;          // guarded by mu: the thread is writing a job
  bool stop = false;          // guarded by mu
  absl::Status error;         // guarded by mu: the first write or fdatasync error
  std::thread thread;
  // Early writeback (SetEarlyWriteback): the writing thread asks `syncer` for an fdatasync every
  // `sync_every` bytes it has written, and goes on writing while the flush runs.
  std::condition_variable sync_cv;
  std::thread syncer;
  uint64_t sync_every = 0;     // guarded by mu
  uint64_t written = 0;        // guarded by mu
  uint64_t sync_asked_at = 0;  // guarded by mu: `written` at the last request
  bool sync_wanted = false;    // guarded by mu

  // The background thread: writes the jobs in order. While it runs nobody else writes to `fd`, so
  // plain sequential writes leave the file position at the end for the writer to carry on from.
  void Run(int fd, const std::string& path) {
    std::unique_lock<std::mutex> lock(mu);
    while (true) {
      cv.wait(lock, [&] { return stop || !jobs.empty(); });
      if (jobs.empty()) return;  // stop, and nothing left
      Job job = std::move(jobs.front());
      jobs.pop_front();
      busy = true;
      const bool write = error.ok();  // after an error, jobs are dropped: the output is lost anyway
      lock.unlock();
      absl::Status s =
          write ? WriteAll(fd, job.data.data(), job.size, path, job.offset) : absl::OkStatus();
      lock.lock();
      if (!s.ok() && error.ok()) error = std::move(s);
      written += job.size;
      if (sync_every != 0 && written - sync_asked_at >= sync_every && error.ok()) {
        sync_asked_at = written;
        sync_wanted = true;
        sync_cv.notify_one();
      }
      spare.push_back(std::move(job.data));
      busy = false;
      cv.notify_all();
    }
  }
  // The syncer: one fdatasync per request (requests made while one runs fold into one).
  void RunSyncer(int fd, const std::string& path) {
    std::unique_lock<std::mutex> lock(mu);
    while (true) {
      sync_cv.wait(lock, [&] { return stop || sync_wanted; });
      if (stop) return;  // the caller's final fsync covers what was asked for
      sync_wanted = false;
      lock.unlock();
      int rc;
      do {
        rc = ::fdatasync(fd);
      } while (rc != 0 && errno == EINTR);
      const int err = errno;
      lock.lock();
      if (rc != 0 && error.ok()) error = ErrnoError(err, path, "fdatasync");
    }
  }
  // Ends the thread once the queue is empty; `drop` (not OK) makes it skip the jobs still queued.
  void Stop(absl::Status drop = absl::OkStatus()) {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
      if (!drop.ok()) error = std::move(drop);
    }
    cv.notify_all();
    sync_cv.notify_all();
    thread.join();
    if (syncer.joinable()) syncer.join();  // after a flush in progress ends
  }
};

BufferedFileWriter::Buffer BufferedFileWriter::NewBuffer(size_t bytes) {
  static_assert(kDirectBlock <= 4096, "HugePageArray aligns to 4 KB pages at least");
  return Buffer(bytes);
}

absl::StatusOr<std::unique_ptr<BufferedFileWriter>> BufferedFileWriter::Open(std::string path,
                                                                             size_t buffer_bytes,
                                                                             bool direct) {
  if (buffer_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": write buffer of 0 bytes"));
  }
  absl::StatusOr<UniqueFd> fd = OpenForWrite(path);
  if (!fd.ok()) return fd.status();
  if (direct && O_DIRECT != 0) {
    // Set on the open descriptor: a file system without O_DIRECT refuses here and the file stays
    // buffered. Direct mode needs room for at least one whole block besides a partial one.
    const int flags = ::fcntl(fd->get(), F_GETFL);
    direct = flags >= 0 && ::fcntl(fd->get(), F_SETFL, flags | O_DIRECT) == 0;
    if (direct) {
      buffer_bytes = std::max<size_t>(2, (buffer_bytes + kDirectBlock - 1) / kDirectBlock) * kDirectBlock;
    }
  } else {
    direct = false;
  }
  return std::unique_ptr<BufferedFileWriter>(
      new BufferedFileWriter(std::move(path), std::move(*fd), buffer_bytes, direct));
}

BufferedFileWriter::BufferedFileWriter(std::string path, UniqueFd fd, size_t buffer_bytes,
                                       bool direct)
    : path_(std::move(path)),
      fd_(std::move(fd)),
      buffer_(NewBuffer(buffer_bytes)),
      capacity_(buffer_bytes) {
  if (!direct) return;
  try {
    auto async = std::make_unique<Async>();
    for (size_t i = 1; i < kDirectBuffers; ++i) async->spare.push_back(NewBuffer(buffer_bytes));
    async_ = std::move(async);
    async_->thread = std::thread([this] { async_->Run(fd_.get(), path_); });
  } catch (const std::exception&) {
    // No memory for the spare buffers or no thread: write as a buffered writer instead.
    async_.reset();
    LeaveDirect(fd_.get());
  }
}

BufferedFileWriter::~BufferedFileWriter() {
  if (async_ == nullptr) return;
  async_->Stop(absl::CancelledError("closing"));  // drop what is queued: not flushed on purpose
}

absl::Status BufferedFileWriter::Drain() {
  if (async_ == nullptr) return absl::OkStatus();
  std::unique_lock<std::mutex> lock(async_->mu);
  async_->cv.wait(lock, [&] { return async_->jobs.empty() && !async_->busy; });
  return async_->error;
}

absl::Status BufferedFileWriter::Append(const void* data, size_t size) {
  if (size == 0) return absl::OkStatus();  // `data` may be null (an empty span)
  const char* p = static_cast<const char*>(data);
  while (async_ != nullptr && size > available()) {
    // Direct mode writes only whole blocks of its own aligned buffers: fill, flush, repeat (a flush
    // keeps less than one block, so each round makes room).
    const size_t head = available();
    memcpy(cursor(), p, head);
    used_ += head;
    p += head;
    size -= head;
    if (absl::Status s = Flush(); !s.ok()) return s;
  }
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
  if (!failed_.ok()) return failed_;
  if (used_ == 0 && async_ == nullptr) return absl::OkStatus();
  if (async_ != nullptr) {
    const size_t whole = used_ / kDirectBlock * kDirectBlock;
    Buffer next;
    {
      std::unique_lock<std::mutex> lock(async_->mu);
      if (!async_->error.ok()) return async_->error;
      if (whole == 0) return absl::OkStatus();
      // Wait for a spare buffer: the disk sets the pace when it is slower than the caller.
      async_->cv.wait(lock, [&] { return !async_->spare.empty(); });
      next = std::move(async_->spare.back());
      async_->spare.pop_back();
      memcpy(next.data(), buffer_.data() + whole, used_ - whole);  // the partial block stays
      async_->jobs.push_back({std::move(buffer_), whole, flushed_});
    }
    async_->cv.notify_all();
    buffer_ = std::move(next);
    flushed_ += whole;
    used_ -= whole;
    return absl::OkStatus();
  }
  if (absl::Status s = WriteAll(fd_.get(), buffer_.data(), used_, path_, flushed_); !s.ok())
    return s;
  flushed_ += used_;
  used_ = 0;
  MaybeStartWriteback();
  return absl::OkStatus();
}

absl::Status BufferedFileWriter::FlushAll() {
  if (async_ == nullptr) return Flush();
  if (absl::Status s = Flush(); !s.ok()) return s;
  if (absl::Status s = Drain(); !s.ok()) return s;
  // The background thread is idle. Stop it, then write the last partial block as usual. An
  // fdatasync that was running may have failed after the drain.
  async_->Stop();
  absl::Status synced = std::move(async_->error);  // the threads have ended: no lock needed
  async_.reset();
  if (!synced.ok()) {
    failed_ = synced;  // and for every later call: the kernel reports a writeback error once
    return synced;
  }
  // From here on the writer is a buffered one, also for appends after a Sync; its early writeback
  // starts from here (the bytes before went out direct).
  writeback_from_ = flushed_;
  if (LeaveDirect(fd_.get()) < 0) return ErrnoError(errno, path_, "leaving O_DIRECT");
  return Flush();
}

void BufferedFileWriter::SetEarlyWriteback(uint64_t bytes) {
  writeback_every_ = bytes;
  if (async_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(async_->mu);
    async_->sync_every = bytes;
  }
  if (bytes == 0 || async_->syncer.joinable()) return;
  try {
    async_->syncer = std::thread([this] { async_->RunSyncer(fd_.get(), path_); });
  } catch (const std::exception&) {
    std::lock_guard<std::mutex> lock(async_->mu);
    async_->sync_every = 0;  // no thread: the final fsync does it all, as without the hint
  }
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
  if (absl::Status s = FlushAll(); !s.ok()) return s;
  return SyncFd(fd_.get(), path_);
}

absl::Status BufferedFileWriter::Close() {
  if (absl::Status s = FlushAll(); !s.ok()) return s;
  if (int err = fd_.Close(); err != 0) return ErrnoError(err, path_, "close");
  return absl::OkStatus();
}

}  // namespace pileprep::internal
