// An LD_PRELOAD shim for CLI tests: makes chosen file system calls fail, to reach error paths that
// no file system offers root on demand (an unlink refused right after a rename failed).
//
// clang-format off
//   PILEPREP_FAULT_RENAME_TO=PATH       rename() onto exactly PATH fails with EIO.
//   PILEPREP_FAULT_UNLINK_AFTER=P1:P2   once such a rename has failed, unlink() of exactly P1 or P2
//                                       (any number, ':'-separated) fails with EIO.
//   PILEPREP_FAULT_FLOCK=1              every flock() fails with ENOLCK: a file system without
//                                       locks.
//   PILEPREP_FAULT_FLOCK=estale         every other flock() (the 1st, 3rd, ...) removes the file
//                                       its descriptor names and fails with ESTALE: NFS, where a
//                                       lock file was removed by its holder as the flock went out.
//   PILEPREP_FAULT_FOREIGN_LOCK=PATH    PATH is another user's file on NFS: open() of exactly PATH
//                                       for writing fails with EACCES (without O_EXCL), and
//                                       flock() on a descriptor open read-only fails with EBADF
//                                       (NFS takes flock as a POSIX lock, and an exclusive one
//                                       needs write access).
//   PILEPREP_FAULT_UNREADABLE=PATH      PATH is another user's file of mode 0600 (made under
//                                       umask 077): open() of exactly PATH fails with EACCES,
//                                       for reading too (without O_EXCL: a create that must be
//                                       new still meets the file there, EEXIST).
//   PILEPREP_FAULT_EMFILE=PATH          open() of exactly PATH fails with EMFILE: the process out
//                                       of descriptors (ulimit -n) just there.
//   PILEPREP_FAULT_PAUSE_OPEN=PATH      open() of exactly PATH first writes "fault shim: paused"
//                                       to stderr and waits for a signal (pause(): until a handler
//                                       has run), then opens: a run held at a known point, for a
//                                       signal test that must not depend on timing.
//   PILEPREP_FAULT_PAUSE_RESEND=N       after either pause above has ended (a handler has run),
//                                       send signal N to the process at once: the copy timeout(1)
//                                       sends, right after the first.
//   PILEPREP_FAULT_PAUSE_LINGER=S       after either pause above has ended, wait S seconds more
//                                       (signals that come meanwhile run their handlers): the
//                                       process is still there for a second signal.
//   PILEPREP_FAULT_PAUSE_RENAME_TO=PATH rename() onto exactly PATH first writes
//                                       "fault shim: paused" to stderr and waits for a signal, as
//                                       PILEPREP_FAULT_PAUSE_OPEN does, then renames: a run held
//                                       just before that rename (a SIGKILL there leaves what comes
//                                       before it done, not it).
//   PILEPREP_FAULT_PAUSE_UNLINK=PATH    unlink() of exactly PATH is held the same way, then
//                                       unlinks: a run held as it removes a lock file, its last
//                                       step.
//   PILEPREP_FAULT_MISSING=PATH         PATH is not there: open() and fopen() of exactly PATH
//                                       fail with ENOENT (a machine without the package that
//                                       installs it, such as ca-certificates for libcurl).
//   PILEPREP_FAULT_THREAD_N=N           the Nth pthread_create() made by the main thread fails
//                                       with EAGAIN (a cgroup's pids.max or ulimit -u reached);
//                                       threads others create are not counted, so N names the
//                                       same thread whatever the scheduling.
//   PILEPREP_FAULT_SLOW_DNS=S           getaddrinfo() of any name writes "fault shim: resolving"
//                                       to stderr, sleeps S seconds, then fails (EAI_AGAIN): a
//                                       resolver that does not answer.
//   PILEPREP_FAULT_REPLACE_AFTER_OPEN=PATH:OTHER
//                                       the first open() of exactly PATH that succeeds is followed
//                                       at once by rename(OTHER, PATH): the file replaced between
//                                       its opening and whatever the program does next with PATH.
//
// clang-format on
//
// Everything else goes to the C library unchanged. Test-only: never linked into pileprep.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

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

// PILEPREP_FAULT_PAUSE_LINGER: the whole time, whatever handlers interrupt the sleep.
static void Linger() {
  const char* resend = std::getenv("PILEPREP_FAULT_PAUSE_RESEND");
  if (resend != nullptr && *resend != '\0') kill(getpid(), std::atoi(resend));
  const char* linger = std::getenv("PILEPREP_FAULT_PAUSE_LINGER");
  if (linger == nullptr) return;
  const double seconds = std::atof(linger);
  timespec left{static_cast<time_t>(seconds),
                static_cast<long>((seconds - static_cast<time_t>(seconds)) * 1e9)};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

// The PILEPREP_FAULT_PAUSE_* hold: says so on stderr, waits for a handler to have run, then
// lingers.
static void PauseHere() {
  static const char kPaused[] = "fault shim: paused\n";
  ssize_t ignored = write(STDERR_FILENO, kPaused, sizeof(kPaused) - 1);
  (void)ignored;
  pause();
  Linger();
}

extern "C" int rename(const char* from, const char* to) {
  if (Named(to, "PILEPREP_FAULT_RENAME_TO", false)) {
    rename_failed = true;
    errno = EIO;
    return -1;
  }
  if (Named(to, "PILEPREP_FAULT_PAUSE_RENAME_TO", false)) {
    PauseHere();
  }
  static const auto real = Next<int (*)(const char*, const char*)>("rename");
  return real(from, to);
}

extern "C" int open(const char* path, int flags, ...) {
  mode_t mode = 0;
  if ((flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE) {
    va_list args;
    va_start(args, flags);
    mode = va_arg(args, mode_t);
    va_end(args);
  }
  if ((flags & O_ACCMODE) != O_RDONLY && (flags & O_EXCL) == 0 &&
      Named(path, "PILEPREP_FAULT_FOREIGN_LOCK", false)) {
    errno = EACCES;
    return -1;
  }
  if ((flags & O_EXCL) == 0 && Named(path, "PILEPREP_FAULT_UNREADABLE", false)) {
    errno = EACCES;
    return -1;
  }
  if (Named(path, "PILEPREP_FAULT_MISSING", false)) {
    errno = ENOENT;
    return -1;
  }
  if (Named(path, "PILEPREP_FAULT_EMFILE", false)) {
    errno = EMFILE;
    return -1;
  }
  if (Named(path, "PILEPREP_FAULT_PAUSE_OPEN", false)) {
    PauseHere();
  }
  static const auto real = Next<int (*)(const char*, int, ...)>("open");
  const int fd = real(path, flags, mode);
  if (const char* replace = std::getenv("PILEPREP_FAULT_REPLACE_AFTER_OPEN");
      fd >= 0 && replace != nullptr) {
    static std::atomic<bool> done{false};
    const char* colon = std::strchr(replace, ':');
    const size_t n = std::strlen(path);
    if (colon != nullptr && static_cast<size_t>(colon - replace) == n &&
        std::strncmp(replace, path, n) == 0 && !done.exchange(true)) {
      const int saved = errno;
      static const auto real_rename = Next<int (*)(const char*, const char*)>("rename");
      real_rename(colon + 1, path);
      errno = saved;
    }
  }
  return fd;
}

// OpenSSL reads a CA bundle through fopen (or fopen64), which does not go through open() above.
using FopenFn = FILE* (*)(const char*, const char*);
static FILE* FopenUnlessMissing(FopenFn real, const char* path, const char* mode) {
  if (Named(path, "PILEPREP_FAULT_MISSING", false)) {
    errno = ENOENT;
    return nullptr;
  }
  return real(path, mode);
}

extern "C" FILE* fopen(const char* path, const char* mode) {
  static const auto real = Next<FopenFn>("fopen");
  return FopenUnlessMissing(real, path, mode);
}

extern "C" FILE* fopen64(const char* path, const char* mode) {
  static const auto real = Next<FopenFn>("fopen64");
  return FopenUnlessMissing(real, path, mode);
}

extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*start)(void*),
                              void* arg) {
  static std::atomic<int> created{0};
  const char* nth = std::getenv("PILEPREP_FAULT_THREAD_N");
  if (nth != nullptr && *nth != '\0' && gettid() == getpid() &&
      created.fetch_add(1) + 1 == std::atoi(nth)) {
    return EAGAIN;
  }
  static const auto real =
      Next<int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*)>("pthread_create");
  return real(thread, attr, start, arg);
}

extern "C" int getaddrinfo(const char* node, const char* service, const struct addrinfo* hints,
                           struct addrinfo** res) {
  const char* slow = std::getenv("PILEPREP_FAULT_SLOW_DNS");
  if (slow != nullptr && *slow != '\0') {
    static const char kResolving[] = "fault shim: resolving\n";
    ssize_t ignored = write(STDERR_FILENO, kResolving, sizeof(kResolving) - 1);
    (void)ignored;
    sleep(static_cast<unsigned>(std::atoi(slow)));
    return EAI_AGAIN;
  }
  static const auto real =
      Next<int (*)(const char*, const char*, const struct addrinfo*, struct addrinfo**)>(
          "getaddrinfo");
  return real(node, service, hints, res);
}

extern "C" int flock(int fd, int operation) {
  const char* fail = std::getenv("PILEPREP_FAULT_FLOCK");
  if (fail != nullptr && std::strcmp(fail, "estale") == 0) {
    static std::atomic<int> calls{0};
    if (calls++ % 2 == 0) {
      char link[64], path[4096];
      snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
      const ssize_t n = readlink(link, path, sizeof(path) - 1);
      if (n > 0) {
        path[n] = '\0';
        unlink(path);
      }
      errno = ESTALE;
      return -1;
    }
  } else if (fail != nullptr && *fail != '\0') {
    errno = ENOLCK;
    return -1;
  }
  const char* foreign = std::getenv("PILEPREP_FAULT_FOREIGN_LOCK");
  if (foreign != nullptr && *foreign != '\0' && (operation & LOCK_EX) != 0 &&
      (fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY) {
    errno = EBADF;
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
  if (Named(path, "PILEPREP_FAULT_PAUSE_UNLINK", false)) PauseHere();
  static const auto real = Next<int (*)(const char*)>("unlink");
  return real(path);
}
