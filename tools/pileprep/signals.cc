#include "signals.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>

namespace pileprep::cli {
namespace {

std::atomic<bool> g_cancel{false};
std::atomic<int> g_signal{0};
std::atomic<int64_t> g_first_signal_ns{0};  // CLOCK_MONOTONIC when the first signal was handled
std::atomic<bool> g_bus_error_reading{false};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free &&
                  std::atomic<int64_t>::is_always_lock_free,
              "the handler may only touch lock-free atomics");

void WriteStderr(const char* s) {
  // write(2) is async-signal-safe; stdio is not.
  ssize_t ignored = ::write(STDERR_FILENO, s, std::strlen(s));
  (void)ignored;
}

// timeout(1) sends its signal twice, to the process and then to its process group, and a batch
// system ending a job may do as well: the same signal again this soon is that copy, not a second
// request to stop at once (which left the run without its summary, temporaries in place). Short
// enough that a person pressing Ctrl-C twice (150 ms apart or more) is heard.
constexpr int64_t kSameSignalNs = 100'000'000;

int64_t MonotonicNs() {
  timespec ts;  // clock_gettime is async-signal-safe
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

void OnSignal(int sig) {
  const int64_t now = MonotonicNs();
  int64_t unset = 0;
  // Before g_signal: a copy handled on another thread meanwhile finds the time already set.
  g_first_signal_ns.compare_exchange_strong(unset, now);
  int expected = 0;
  if (!g_signal.compare_exchange_strong(expected, sig)) {
    if (expected == sig && now - g_first_signal_ns.load() < kSameSignalNs) return;
    // Second signal: stop now, as if no handler were installed.
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_cancel.store(true);
  WriteStderr(sig == SIGINT   ? "\npileprep: SIGINT: stopping; removing temporary files (again to "
                                "stop at once)\n"
              : sig == SIGHUP ? "\npileprep: SIGHUP (the terminal or session went away): "
                                "stopping; removing temporary files (run it under nohup, tmux or "
                                "the batch system to outlive a session)\n"
                              : "\npileprep: SIGTERM: stopping; removing temporary files (again "
                                "to stop at once)\n");
}

void OnBusError(int sig) {
  WriteStderr(
      g_bus_error_reading.load()
          ? "\npileprep: SIGBUS: a .bin or .idx read through a memory mapping shrank while being "
            "read (another process truncating or rewriting it?), or the storage under it failed: "
            "no verdict; run again once nothing writes the dataset\n"
          : "\npileprep: SIGBUS: a file read through a memory mapping (an input .jsonl, a .bin or "
            ".idx) shrank while in use, or the storage under it failed; nothing was published for "
            "the input in progress (the next run removes its temporaries)\n");
  ::raise(sig);  // SA_RESETHAND made the action the default again: the process ends by SIGBUS
}

}  // namespace

void InstallBusErrorHandler() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnBusError;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  ::sigaction(SIGBUS, &sa, nullptr);
}

void SetBusErrorReadOnly() { g_bus_error_reading.store(true); }

void InstallCancelHandlers() {
  static const bool installed = [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // reads and writes continue; the flag is polled between batches
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
    // A dropped ssh session (SIGHUP) stops cleanly too, unless SIGHUP is ignored (nohup).
    struct sigaction hup;
    if (::sigaction(SIGHUP, nullptr, &hup) == 0 && hup.sa_handler != SIG_IGN) {
      ::sigaction(SIGHUP, &sa, nullptr);
    }
    // Progress and errors go to stderr, often a pipe (`2>&1 | tee log`): when its reader goes
    // (tee killed by the same Ctrl-C), the next write would end the process by SIGPIPE, before
    // the summary, with temporaries left. Ignored, such a write fails with EPIPE and the run goes
    // on to its clean end. (inspect, a filter, keeps SIGPIPE's default: `| head` ends it.)
    ::signal(SIGPIPE, SIG_IGN);
    return true;
  }();
  (void)installed;
}

const std::atomic<bool>& CancelFlag() { return g_cancel; }

bool Cancelled() { return g_cancel.load(); }

int CancelExitCode() {
  const int sig = g_signal.load();
  return sig == 0 ? 0 : 128 + sig;
}

const char* SignalNameOf(int exit_code) {
  switch (exit_code - 128) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "a signal";
  }
}

}  // namespace pileprep::cli
