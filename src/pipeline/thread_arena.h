// A oneTBB arena of exactly the threads asked for, even more than the cores (internal).
#ifndef PILEPREP_PIPELINE_THREAD_ARENA_H_
#define PILEPREP_PIPELINE_THREAD_ARENA_H_

#include <algorithm>
#include <cstddef>
#include <optional>
#include <utility>

#include "oneapi/tbb/global_control.h"
#include "oneapi/tbb/task_arena.h"

namespace pileprep::internal {

// `threads` > 0 threads, or all cores (0). More threads than cores are asked for as Megatron users
// give --workers 16 on smaller nodes: TBB's default limit (the core count) would cut the arena's
// workers and print a warning on stderr, from a library that prints nothing. While this object
// lives the process's limit is raised to `threads` (the results never depend on the thread count)
// when it is below that. Only raised: of several limits the smallest applies, so a caller running
// pipelines side by side (the shard job's runners) raises it once for their sum.
// TBB's process-wide thread limit raised to `threads` while the result lives, when it is below
// that; nullopt otherwise. Only raised: of several limits the smallest applies.
inline std::optional<tbb::global_control> AllowThreads(int threads) {
  if (threads <= 0 ||
      static_cast<size_t>(threads) <=
          tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism)) {
    return std::nullopt;
  }
  return std::make_optional<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                 static_cast<size_t>(threads));
}

// The arena's size: `threads`, but no more than the process-wide limit in force once AllowThreads
// has raised it: a lower limit the embedding program set (a global_control of its own) wins, and
// an arena larger than it made oneTBB print a warning on stderr.
inline int ArenaThreads(int threads) {
  if (threads <= 0) return tbb::task_arena::automatic;
  const size_t limit =
      tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism);
  return static_cast<int>(
      std::min<size_t>(static_cast<size_t>(threads), std::max<size_t>(limit, 1)));
}

class ThreadArena {
 public:
  explicit ThreadArena(int threads)
      : allow_(AllowThreads(threads)), arena_(ArenaThreads(threads)) {}

  template <typename F>
  void execute(F&& f) {
    arena_.execute(std::forward<F>(f));
  }

 private:
  std::optional<tbb::global_control> allow_;  // before arena_: the limit is raised first
  tbb::task_arena arena_;
};

}  // namespace pileprep::internal

#endif  // PILEPREP_PIPELINE_THREAD_ARENA_H_
