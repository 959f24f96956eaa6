#include "path_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace pileprep::cli {

std::string PathLock::HostName() {
  char host[256] = "";
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

std::unique_ptr<PathLock> PathLock::TryAcquire(const std::string& path, std::string* held_by,
                                               std::string* unsupported, std::string* error) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    bool created = true;
    bool read_only = false;
    // O_NOFOLLOW: in a directory others can write, a symbolic link planted at the lock's path
    // would have the truncate and write below land on whatever file it names.
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0 && errno == EEXIST) {
      created = false;
      fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
      // Another user's lock file (mode 0644 in a shared directory): flock works on a read-only
      // descriptor too, on a local file system; only the holder's name is not written.
      if (fd < 0 && errno == EACCES) {
        fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        read_only = fd >= 0;
        if (fd < 0 && (errno == EACCES || errno == EPERM)) {
          // Another user's lock file this user cannot even read (made under umask 077): its job
          // may hold it. Going on unlocked (below) would write beside that job; this says
          // nothing about whether the file system can lock.
          *held_by =
              "another user's job, in a lock file this user cannot open: remove the "
              "file if that job is over";
          return nullptr;
        }
      }
      if (fd < 0 && errno == ELOOP) {
        *held_by =
            "or so it seems: the lock file is a symbolic link, which pileprep does not "
            "follow; remove it if no job is using it";
        return nullptr;
      }
      // Removed by its holder meanwhile (ESTALE: NFS's word for the same, the handle gone).
      if (fd < 0 && (errno == ENOENT || errno == ESTALE)) continue;
    }
    if (fd < 0) {
      // Out of descriptors, memory, space or quota, or an I/O error: nothing to do with whether
      // this file system can lock, and whatever the run would write next would meet it too.
      const int err = errno;
      const bool resource = err == EMFILE || err == ENFILE || err == ENOMEM || err == ENOSPC ||
                            err == EDQUOT || err == EIO;
      *(resource ? error : unsupported) = absl::StrCat(path, ": ", std::strerror(err));
      return nullptr;
    }
    const bool locked = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    const int err = errno;
    // Whether the path still names the file this descriptor holds: its holder removes it
    // while it still holds the lock, so a lock taken on a removed file means nothing.
    struct stat held, named;
    const bool current = ::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 &&
                         held.st_dev == named.st_dev && held.st_ino == named.st_ino;
    if (locked && current) {
      const std::string me = absl::StrCat("pid ", ::getpid(), " on ", HostName(), "\n");
      if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) < 0) {
        // Only the holder's name is lost (a read-only descriptor); the lock holds.
      }
      return std::unique_ptr<PathLock>(new PathLock(fd, path));
    }
    if (!locked && err == EWOULDBLOCK && current) {
      const std::string who = ReadHolderName(fd);
      *held_by = who.empty() ? "another process" : who;
      ::close(fd);
      return nullptr;
    }
    if (!locked && err == EBADF && read_only && current) {
      // NFS takes flock as a POSIX lock, and an exclusive one needs a descriptor open for
      // writing: this says nothing about locking on this file system, only that the file is
      // another user's, whose job may hold it. Going on unlocked (below) could write beside it.
      const std::string who = ReadHolderName(fd);
      *held_by = absl::StrCat(who.empty() ? "another user's job" : who,
                              ", in a lock file this user cannot write, which flock needs here: "
                              "remove the file if that job is over");
      ::close(fd);
      return nullptr;
    }
    if (!locked && err == ESTALE && !current) {
      // NFS: the file was removed by its holder as this flock went out; as a file replaced under
      // us (below), try the one the path names now. Not "this file system cannot lock". (An
      // ESTALE while the path still names this file is no such race: unsupported, below.)
      ::close(fd);
      continue;
    }
    if (!locked && err != EWOULDBLOCK) {
      *unsupported = absl::StrCat(path, ": flock: ", std::strerror(err));
      if (created) ::unlink(path.c_str());  // no lock file left behind by an unlocked run
      ::close(fd);
      return nullptr;
    }
    ::close(fd);  // the file was replaced under us (its holder finished): try the new one
  }
  *held_by = "processes that keep replacing the lock file";
  return nullptr;
}

bool PathLocks::TryAcquireAll(const std::vector<std::string>& paths, std::string* held_path,
                              std::string* held_by, std::string* unsupported, std::string* error) {
  clear();
  for (const std::string& path : paths) {
    std::string by, failed;
    std::unique_ptr<PathLock> lock = PathLock::TryAcquire(path, &by, unsupported, &failed);
    if (lock == nullptr && (!by.empty() || !failed.empty())) {
      clear();
      *held_path = path;
      *held_by = by;
      *error = failed;
      return false;
    }
    if (lock != nullptr) held_.push_back(std::move(lock));
  }
  return true;
}

std::unique_ptr<PathLock> PathLock::Acquire(const std::string& path, double wait_s,
                                            std::string* held_by, std::string* unsupported,
                                            std::string* error) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  while (true) {
    held_by->clear();
    std::unique_ptr<PathLock> lock = TryAcquire(path, held_by, unsupported, error);
    if (lock != nullptr || held_by->empty() || std::chrono::steady_clock::now() >= until) {
      return lock;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::string PathLock::ReadHolderName(int fd) {
  char buf[256];
  const ssize_t got = ::pread(fd, buf, sizeof(buf) - 1, 0);
  std::string who(buf, got > 0 ? static_cast<size_t>(got) : 0);
  while (!who.empty() && (who.back() == '\n' || who.back() == '\0')) who.pop_back();
  return who;
}

std::optional<PathLock::Seen> PathLock::Holder(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st;
  const bool statted = ::fstat(fd, &st) == 0;
  std::string who = ReadHolderName(fd);
  ::close(fd);
  if (!statted) return std::nullopt;
  const bool named = !who.empty();
  if (!named) who = "another process";
  // Lines "N: FLOCK  ADVISORY  WRITE PID MAJ:MIN:INODE START END". Matched on the inode alone:
  // on overlayfs and btrfs the device listed is not the one stat reports.
  std::ifstream locks("/proc/locks");
  if (!locks) return Seen{who, false, "/proc/locks cannot be read here"};
  const std::string ino = absl::StrCat(":", st.st_ino, " ");
  for (std::string line; std::getline(locks, line);) {
    if (line.find(" FLOCK ") != std::string::npos && line.find(ino) != std::string::npos) {
      return Seen{who, true, ""};
    }
  }
  const std::string here = absl::StrCat(" on ", HostName());
  if (!named || (who.size() >= here.size() &&
                 who.compare(who.size() - here.size(), here.size(), here) == 0)) {
    return std::nullopt;  // this host's (or unnamed), and not held
  }
  return Seen{who, false, "a lock file of another host, whose locks this node cannot see"};
}

PathLock::~PathLock() {
  ::unlink(path_.c_str());  // while still held: see above
  ::close(fd_);
}

}  // namespace pileprep::cli
