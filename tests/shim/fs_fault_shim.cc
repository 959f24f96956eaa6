// An LD_PRELOAD shim for CLI tests: makes chosen file system calls fail, to reach error paths that
// no file system offers root on demand (an unlink refused right after a rename failed).
//
//   PILEPREP_FAULT_RENAME_TO=PATH       rename() onto exactly PATH fails with EIO.
//   PILEPREP_FAULT_UNLINK_AFTER=P1:P2   once such a rename has failed, unlink() of exactly P1 or P2
//                                       (any number, ':'-separated) fails with EIO.
//   PILEPREP_FAULT_FLOCK=1              every flock() fails with ENOLCK: a file system without locks.
//
// Everything else goes to the C library unchanged. Test-only: never linked into pileprep.
#include <dlfcn.h>
#include <errno.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace {

std::atomic<bool> rename_failed{false};

bool Named(const char* path, const char* variable, bool list) {
  const char* want = std::getenv(variable);
  if (want == nullptr || *want == '\0' || path == nullptr) return false;
  const size_t n = std::strlen(path);
  for (const char* p = want;;) {
    const char* end = list ? std::strchr(p, ':') : nullptr;
    const size_t len = end != nullptr ? static_cast<size_t>(end - p) : std::strlen(p);
    if (len == n && std::strncmp(p, path, n) == 0) return true;
    if (end == nullptr) return false;
    p = end + 1;
  }
}

template <typename F>
F Next(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" int rename(const char* from, const char* to) {
  if (Named(to, "PILEPREP_FAULT_RENAME_TO", false)) {
    rename_failed = true;
    errno = EIO;
    return -1;
  }
  static const auto real = Next<int (*)(const char*, const char*)>("rename");
  return real(from, to);
}

extern "C" int flock(int fd, int operation) {
  const char* fail = std::getenv("PILEPREP_FAULT_FLOCK");
  if (fail != nullptr && *fail != '\0') {
    errno = ENOLCK;
    return -1;
  }
  static const auto real = Next<int (*)(int, int)>("flock");
  return real(fd, operation);
}

extern "C" int unlink(const char* path) {
  if (rename_failed && Named(path, "PILEPREP_FAULT_UNLINK_AFTER", true)) {
    errno = EIO;
    return -1;
  }
  static const auto real = Next<int (*)(const char*)>("unlink");
  return real(path);
}
