#include "loader/npy.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <mutex>
#include <new>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pileprep/status_macros.h"

namespace pileprep::internal {

// Arrays are mapped and written in the host's byte order; .npy files here are little-endian.
static_assert(std::endian::native == std::endian::little,
              "the .npy cache assumes a little-endian host");

namespace {

constexpr char kNpyMagic[] = "\x93NUMPY";

}  // namespace

absl::Status WithErrno(absl::Status status, int err) {
  status.SetPayload(kErrnoPayload, absl::Cord(absl::StrCat(err)));
  return status;
}

absl::Status ErrnoStatus(int err, const std::string& path, absl::string_view what) {
  std::string m = absl::StrCat(path, ": ", what, ": ", std::strerror(err));
  // Abseil's code for the errno, as the core library gives it (file_util.cc), so that one fault has
  // one code from both libraries (it was Unknown for ENOTDIR, ENAMETOOLONG, EEXIST, ...).
  return WithErrno(absl::Status(absl::ErrnoToStatusCode(err), m), err);
}

std::string EncodeNpyHeader(const std::string& descr, const std::vector<int64_t>& shape) {
  std::string shape_text = shape.size() == 1 ? absl::StrCat("(", shape[0], ",)")
                                             : absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
  std::string dict =
      absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ", shape_text, ", }");
  // numpy pads with spaces so that data starts on a 64-byte boundary, header ending in '\n'.
  size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict.push_back('\n');
  std::string out(kNpyMagic, 6);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(dict.size() & 0xff));
  out.push_back(static_cast<char>(dict.size() >> 8));
  return out + dict;
}

namespace {

size_t ItemSize(const std::string& descr) {
  if (descr == "<i2") return 2;
  if (descr == "<i4" || descr == "<u4") return 4;
  if (descr == "<i8") return 8;
  return 0;
}

template <typename T>
std::string Encode(const std::string& descr, const std::vector<int64_t>& shape, const T* values,
                   size_t count) {
  std::string out = EncodeNpyHeader(descr, shape);
  size_t item = ItemSize(descr);
  size_t base = out.size();
  out.resize(base + item * count);
  char* p = out.data() + base;
  for (size_t i = 0; i < count; ++i, p += item) {
    if (item == 2) {
      int16_t v = static_cast<int16_t>(values[i]);
      std::memcpy(p, &v, 2);
    } else if (item == 4) {
      uint32_t v = static_cast<uint32_t>(values[i]);  // same bits for <i4 and <u4
      std::memcpy(p, &v, 4);
    } else {
      int64_t v = static_cast<int64_t>(values[i]);
      std::memcpy(p, &v, 8);
    }
  }
  return out;
}

}  // namespace

std::string EncodeNpy(const std::string& descr, const std::vector<int64_t>& shape,
                      const int64_t* values, size_t count) {
  return Encode(descr, shape, values, count);
}
std::string EncodeNpy(const std::string& descr, const std::vector<int64_t>& shape,
                      const int32_t* values, size_t count) {
  return Encode(descr, shape, values, count);
}

absl::StatusOr<NpyHeader> ParseNpyHeader(absl::string_view bytes, const std::string& name) {
  auto bad = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(name, ": ", what));
  };
  if (bytes.size() < 10 || bytes.substr(0, 6) != absl::string_view(kNpyMagic, 6)) {
    return bad("not a .npy file");
  }
  size_t header_len, start;
  if (bytes[6] == 1) {
    header_len = static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
    start = 10;
  } else {
    if (bytes.size() < 12) return bad("truncated header");
    uint32_t n;
    std::memcpy(&n, bytes.data() + 8, 4);
    header_len = n;
    start = 12;
  }
  if (bytes.size() < start + header_len) return bad("truncated header");
  const absl::string_view header = bytes.substr(start, header_len);
  NpyHeader out;
  size_t d = header.find("'descr': '");
  if (d == absl::string_view::npos) return bad("no descr");
  size_t d_end = header.find('\'', d + 10);
  if (d_end == absl::string_view::npos) return bad("no descr");
  out.descr = std::string(header.substr(d + 10, d_end - (d + 10)));
  const size_t item = ItemSize(out.descr);
  if (item == 0) return bad(absl::StrCat("unsupported dtype ", out.descr));
  if (header.find("'fortran_order': False") == absl::string_view::npos) return bad("not C order");
  size_t sh = header.find("'shape': (");
  if (sh == absl::string_view::npos) return bad("no shape");
  const char* p = header.data() + sh + 10;
  const char* end = header.data() + header.size();
  int64_t count = 1;
  while (p < end && *p != ')') {
    if (*p == ' ' || *p == ',') {
      ++p;
      continue;
    }
    int64_t v = 0;
    auto r = std::from_chars(p, end, v);
    if (r.ec != std::errc() || v < 0) return bad("bad shape");
    out.shape.push_back(v);
    if (__builtin_mul_overflow(count, v, &count)) return bad("shape too large");
    p = r.ptr;
  }
  const size_t data = start + header_len;
  // Checked without overflow: a hostile shape must not pass as a small file.
  if (static_cast<uint64_t>(count) > (bytes.size() - data) / item ||
      bytes.size() != data + item * static_cast<size_t>(count)) {
    return bad("size does not match shape");
  }
  out.data_offset = data;
  out.count = static_cast<size_t>(count);
  out.itemsize = item;
  return out;
}

absl::StatusOr<NpyArray> DecodeNpy(const std::string& bytes, const std::string& name) {
  PILEPREP_ASSIGN_OR_RETURN(NpyHeader h, ParseNpyHeader(bytes, name));
  NpyArray out;
  out.descr = h.descr;
  out.shape = h.shape;
  out.values.resize(h.count);
  const char* q = bytes.data() + h.data_offset;
  for (size_t i = 0; i < h.count; ++i, q += h.itemsize) {
    if (out.descr == "<i2") {
      int16_t v;
      std::memcpy(&v, q, 2);
      out.values[i] = v;
    } else if (out.descr == "<i4") {
      int32_t v;
      std::memcpy(&v, q, 4);
      out.values[i] = v;
    } else if (out.descr == "<u4") {
      uint32_t v;
      std::memcpy(&v, q, 4);
      out.values[i] = v;
    } else {
      std::memcpy(&out.values[i], q, 8);
    }
  }
  return out;
}

absl::StatusOr<MappedNpy> MapNpy(const std::string& path) {
  // O_NONBLOCK: a FIFO in the cache directory is refused below, not waited on (it is mapped, never
  // read, so the flag changes nothing for a regular file).
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return ErrnoStatus(errno, path, "open");
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoStatus(err, path, "stat");
  }
  if (!S_ISREG(st.st_mode) || st.st_size == 0) {
    close(fd);
    return absl::DataLossError(absl::StrCat(path, ": not a .npy file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* p = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  std::shared_ptr<const void> mapping;
  if (p != MAP_FAILED) {
    close(fd);  // the mapping keeps the file
    // The mapping lives as long as any array that points into it.
    mapping = std::shared_ptr<const void>(
        p, [size](const void* q) { munmap(const_cast<void*>(q), size); });
  } else {
    // A file system that cannot map files, or no address space left (ulimit -v): the file is read
    // into memory instead (8-byte aligned), as before mapping, rather than missing the cache and
    // rebuilding it at every open.
    std::shared_ptr<std::vector<int64_t>> copy;
    try {
      copy = std::make_shared<std::vector<int64_t>>(size / 8 + 1);
    } catch (const std::bad_alloc&) {
      close(fd);
      return absl::ResourceExhaustedError(
          absl::StrCat(path, ": neither mapped nor read: out of memory (", size, " bytes)"));
    }
    size_t done = 0;
    while (done < size) {
      const ssize_t n = pread(fd, reinterpret_cast<char*>(copy->data()) + done, size - done,
                              static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = n < 0 ? errno : EIO;
        close(fd);
        return ErrnoStatus(err, path, absl::StrCat("read at byte ", done));
      }
      done += static_cast<size_t>(n);
    }
    close(fd);
    p = copy->data();
    mapping = std::move(copy);
  }
  PILEPREP_ASSIGN_OR_RETURN(
      NpyHeader h, ParseNpyHeader(absl::string_view(static_cast<const char*>(p), size), path));
  if (h.data_offset % h.itemsize != 0) {  // numpy and EncodeNpy pad the header to 64 bytes
    return absl::DataLossError(absl::StrCat(path, ": data not aligned for ", h.descr));
  }
  MappedNpy out;
  out.descr = std::move(h.descr);
  out.shape = std::move(h.shape);
  out.count = h.count;
  out.data = static_cast<const char*>(p) + h.data_offset;
  out.mapping = std::move(mapping);
  return out;
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes) {
  return WriteFileAtomically(path, absl::Span<const absl::string_view>(&bytes, 1));
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::Span<const absl::string_view> parts) {
  static thread_local std::mt19937_64 rng(
      std::random_device{}() ^
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::string tmp = absl::StrCat(path, ".tmp.", getpid(), ".", rng());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return ErrnoStatus(errno, tmp, "open");
  uint64_t written = 0;  // bytes of the file so far, for the error's offset
  for (absl::string_view part : parts) {
    size_t done = 0;
    while (done < part.size()) {
      ssize_t n = write(fd, part.data() + done, part.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        close(fd);
        unlink(tmp.c_str());
        return ErrnoStatus(err, tmp, absl::StrCat("write at byte ", written + done));
      }
      done += static_cast<size_t>(n);
    }
    written += part.size();
  }
  if (fsync(fd) != 0 && errno != EINVAL) {
    int err = errno;
    close(fd);
    unlink(tmp.c_str());
    return ErrnoStatus(err, tmp, "fsync");
  }
  if (close(fd) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return ErrnoStatus(err, tmp, "close");
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return ErrnoStatus(err, path, "rename");
  }
  return absl::OkStatus();
}

namespace {

// The descriptors of the FileLocks alive in this process. A flock belongs to the open file, and
// a child forked meanwhile (a DataLoader's worker, while another thread opens a dataset) gets a
// copy of the descriptor (O_CLOEXEC acts at exec only): the lock would stay held, and other ranks
// wait on it, until the child exited. So a forked child closes its copies at once
// (pthread_atfork), and the set changes under a mutex that a fork holds across, so that a
// descriptor is never in flight between the set and the lock: one is entered before its flock
// and closed before it leaves.
struct HeldLocks {
  std::mutex mu;
  std::vector<int> fds;
};

HeldLocks& Held() {
  static HeldLocks* held = [] {
    auto* h = new HeldLocks;  // never destroyed: a fork may come during exit
    pthread_atfork([] { Held().mu.lock(); }, [] { Held().mu.unlock(); },
                   [] {
                     HeldLocks& h = Held();
                     for (int fd : h.fds) close(fd);
                     h.fds.clear();
                     h.mu.unlock();
                   });
    return h;
  }();
  return *held;
}

}  // namespace

FileLock::FileLock(const std::string& path, const std::function<bool()>& interrupted) {
  HeldLocks& held = Held();
  {
    std::lock_guard<std::mutex> lock(held.mu);
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    // Another user's lock file (0666 & ~umask: 0644 mostly): without this, each user's ranks
    // took no lock and built beside the other's.
    if (fd_ < 0 && errno == EACCES) fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return;
    held.fds.push_back(fd_);
  }
  // Without `interrupted`, one blocking flock. With it, a poll: a blocking flock returns on a
  // signal (EINTR) only in the thread the signal went to, which in a process of many threads (a
  // DataLoader's, TBB's) is seldom this one.
  const int how = interrupted ? LOCK_EX | LOCK_NB : LOCK_EX;
  while (flock(fd_, how) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK && interrupted) {
      if (interrupted()) {
        interrupted_ = true;
        Release();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    Release();
    return;
  }
}

void FileLock::Release() {
  HeldLocks& held = Held();
  std::lock_guard<std::mutex> lock(held.mu);
  const auto it = std::find(held.fds.begin(), held.fds.end(), fd_);
  // Not there: this is a forked child, which closed its copy at the fork (the number may name
  // another file by now).
  if (it != held.fds.end()) {
    held.fds.erase(it);
    close(fd_);  // releases the lock
  }
  fd_ = -1;
}

FileLock::~FileLock() {
  if (fd_ >= 0) Release();
}

namespace {

// Removes the files of the directory of `prefix` whose paths start with `prefix` and that are
// WriteFileAtomically's temporaries ("{path}.tmp.{pid}.{random}"). Best effort.
void RemoveTemporaries(const std::string& prefix) {
  const size_t slash = prefix.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : prefix.substr(0, slash + 1);
  const std::string stem = slash == std::string::npos ? prefix : prefix.substr(slash + 1);
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  while (const dirent* e = readdir(d)) {
    const absl::string_view name(e->d_name);
    if (absl::StartsWith(name, stem) && absl::StrContains(name.substr(stem.size()), ".tmp.")) {
      unlink(absl::StrCat(dir, name).c_str());
    }
  }
  closedir(d);
}

}  // namespace

absl::StatusOr<bool> AwaitStoredOrLock(const std::string& lock_path, const std::string& stored_path,
                                       const std::string& temporaries,
                                       const std::function<bool()>& load,
                                       const std::function<bool()>& interrupted,
                                       std::optional<FileLock>* building) {
  auto take = [&]() -> absl::Status {
    building->emplace(lock_path, interrupted);
    if (!(*building)->interrupted()) return absl::OkStatus();
    building->reset();
    return absl::CancelledError(
        absl::StrCat("interrupted while waiting for another process's build (", lock_path, ")"));
  };
  PILEPREP_RETURN_IF_ERROR(take());
  struct stat st;
  if (stat(stored_path.c_str(), &st) == 0) {
    building->reset();
    if (load()) return true;
    PILEPREP_RETURN_IF_ERROR(take());  // damaged: rebuilt, one rank at a time
  }
  // This rank builds. Without the lock (no flock here) another rank may be storing: nothing goes.
  if ((*building)->held()) RemoveTemporaries(temporaries);
  return false;
}

absl::Status MakeDirectories(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    std::string part = dir.substr(0, pos);
    if (mkdir(part.c_str(), 0777) != 0 && errno != EEXIST) return ErrnoStatus(errno, part, "mkdir");
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return ErrnoStatus(errno, dir, "stat");
  // os.makedirs(dir, exist_ok=True), Megatron's, raises FileExistsError here.
  if (!S_ISDIR(st.st_mode)) return ErrnoStatus(EEXIST, dir, "mkdir");
  return absl::OkStatus();
}

}  // namespace pileprep::internal
