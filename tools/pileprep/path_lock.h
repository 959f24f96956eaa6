// A lock on a path, for one process at a time across the processes (and, where the file system
// shares flock, the nodes) that write the files it stands for: an flock on a lock file that names
// its holder ("pid P on HOST"). The holder removes the file while it still holds the lock, and a
// locker checks that the path still names the file it locked, so two processes never both hold a
// lock on the path. Another user's lock file (mode 0644 in a shared directory) is locked through a
// read-only descriptor. A file system without flock (Lustre mounted -o noflock) cannot lock:
// TryAcquire says so and the caller runs unlocked; where flock is local to a node (Lustre
// -o localflock, BeeGFS by default) only one node's processes exclude each other.
//
// Users: every dataset a process writes ({dataset prefix}.pileprep-lock: the shard job's, merge's
// and preprocess's outputs, so that any two of them exclude each other on one name), a shard job's
// shards besides ({output-dir}/{prefix}_NN.pileprep-lock, which --dry-run reports), a kept
// download ({keep-downloads}/NN.jsonl.zst.pileprep-lock), a rank's summary.
#ifndef PILEPREP_TOOLS_PILEPREP_PATH_LOCK_H_
#define PILEPREP_TOOLS_PILEPREP_PATH_LOCK_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pileprep::cli {

class PathLock {
 public:
  static std::string HostName();

  // The lock, or nullptr with *held_by set (the holder's "pid P on HOST") when another process has
  // it, or nullptr with *unsupported set when the file system cannot lock, or nullptr with *error
  // set when the lock file cannot be opened for want of a resource (descriptors, memory, space,
  // quota) or by an I/O error: no reason to go on unlocked, as an unsupported lock is.
  static std::unique_ptr<PathLock> TryAcquire(const std::string& path, std::string* held_by,
                                              std::string* unsupported, std::string* error);
  // TryAcquire again every 0.1 s while another process holds it, for up to `wait_s` seconds: for
  // a lock held only for moments (a summary being written).
  static std::unique_ptr<PathLock> Acquire(const std::string& path, double wait_s,
                                           std::string* held_by, std::string* unsupported,
                                           std::string* error);

  // The holder a lock file names ("pid P on HOST", as TryAcquire writes it), or "".
  static std::string ReadHolderName(int fd);

  // For --dry-run, without taking the lock: a probe that took it, even for a moment, could turn a
  // real run away from the shard. `certain`: this node's kernel lists a flock on the lock file
  // (/proc/locks), so the run will find the shard held. Not certain: the lock file names another
  // host, whose locks this node cannot see (held there if that process still runs; where flock is
  // local to a node the run here takes it anyway), or /proc/locks cannot be read. Nothing when no
  // lock file is there, or when one of this host's was left by a holder that was killed (the run
  // takes it over). /proc/locks leaves out locks whose owner is in another PID namespace: a run
  // in another container of the same host name is not seen.
  struct Seen {
    std::string holder;  // "pid P on HOST", or "another process"
    bool certain = false;
    std::string why_uncertain;  // when not certain
  };
  static std::optional<Seen> Holder(const std::string& path);

  ~PathLock();
  PathLock(const PathLock&) = delete;
  PathLock& operator=(const PathLock&) = delete;

 private:
  PathLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

// Several PathLocks held together (a shard's and its datasets'), released in the reverse of the
// order they were taken: the shard's last, so that a process that gets the shard's lock finds its
// datasets' free.
class PathLocks {
 public:
  PathLocks() = default;
  PathLocks(PathLocks&&) = default;
  PathLocks& operator=(PathLocks&& other) {
    clear();
    held_ = std::move(other.held_);
    return *this;
  }
  ~PathLocks() { clear(); }

  // TryAcquire of each path in order, all or none: true with every lock held (those before
  // released first), those the file system cannot lock left out with *unsupported set. false
  // when another process holds one (*held_path and *held_by name it) or one's lock file cannot be
  // opened (*held_path and *error name it), and none is held. Two
  // callers that may want the same locks must ask in one order (sorted), or each can take one
  // and find the other's held: both refused, though neither waits.
  bool TryAcquireAll(const std::vector<std::string>& paths, std::string* held_path,
                     std::string* held_by, std::string* unsupported, std::string* error);
  void clear() {
    while (!held_.empty()) held_.pop_back();
  }

 private:
  std::vector<std::unique_ptr<PathLock>> held_;
};

}  // namespace pileprep::cli

#endif  // PILEPREP_TOOLS_PILEPREP_PATH_LOCK_H_
