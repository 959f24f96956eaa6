// Which shards a job processes, where each comes from and where its outputs go.
//
//   PILEPREP_ASSIGN_OR_RETURN(std::vector<int> files, ParseFileNumbers("0,3,5-7"));  // {0,3,5,6,7}
//   ShardInput(src, 3)             -> "{src}/03.jsonl.zst"
//   ShardOutputPrefix(dir, "my-gpt3", 3) -> "{dir}/my-gpt3_03_text_document"
//
// Nodes: which rank this process is comes from flags, then from the launcher's environment:
//   PILEPREP_ASSIGN_OR_RETURN(RankAssignment a, ResolveRank({.nodes = -1, .rank = -1}, CurrentEnvironment()));
//   PILEPREP_ASSIGN_OR_RETURN(std::vector<int> mine, FilesForAssignment(files, a));
//
// Pure functions; safe from any thread.
#ifndef PILEPREP_SHARD_PLAN_H_
#define PILEPREP_SHARD_PLAN_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pileprep {

// Parses the NeMo launcher's `file_numbers` syntax: comma-separated integers or inclusive ranges
// ("0-29", "0,3,5-7"; empty parts skipped, as the launcher skips them). The result is sorted and
// free of duplicates, and not empty. Numbers are 0..9999.
absl::StatusOr<std::vector<int>> ParseFileNumbers(std::string_view spec);

// Shard file name: two digits at least ("03.jsonl.zst").
std::string ShardFileName(int number);

enum class SourceKind { kLocalDirectory, kHttp };
struct ShardSource {
  SourceKind kind;
  std::string base;  // directory path (file:// stripped) or URL ending in '/', without its query
  // An http(s) URL's query ("?sv=...&sig=..." of an Azure container's SAS token), kept after each
  // file name: {base}{NN}.jsonl.zst{query}. Empty for none; a fragment (#...) is dropped (never
  // sent).
  std::string query;
};
// Classifies --url: a local directory, a file:// URL, or http(s)://. Other schemes are refused.
absl::StatusOr<ShardSource> ParseShardSource(std::string_view url);

// Where shard `number` comes from: "{base}/{NN}.jsonl.zst{query}".
std::string ShardInput(const ShardSource& source, int number);

// Output prefix of shard `number`: "{dir}/{prefix}_{NN}_{key}_document" (Megatron's naming; the NeMo
// launcher's training configs point at my-gpt3_NN_text_document).
std::string ShardOutputPrefix(std::string_view output_dir, std::string_view prefix, int number,
                              std::string_view json_key = "text");

// --- Nodes -----------------------------------------------------------------------------------------

// Explicit --nodes / --rank; -1 when not given.
struct RankFlags {
  int nodes = -1;
  int rank = -1;
};

// Which share of the files this process takes.
struct RankAssignment {
  int rank = 0;
  int size = 1;
  // >= 0 for a Slurm array task (SLURM_ARRAY_TASK_ID without a rank/size family): process only the
  // file with this number; rank and size are then 0 and 1.
  int array_task = -1;
  // The array's lowest and highest task ids (SLURM_ARRAY_TASK_MIN / _MAX) when Slurm set them,
  // its step (SLURM_ARRAY_TASK_STEP, `--array 0-29:2`; 1 when unset) and its number of tasks
  // (SLURM_ARRAY_TASK_COUNT, -1 when unset; fewer than MIN..MAX by the step holds for a list,
  // `--array 0-9,20-29`) (FilesNoArrayTaskMakes, ArrayTasksMissingInRange).
  int array_min = -1, array_max = -1;
  int array_step = 1;
  int array_count = -1;
  // What decided it, for --dry-run and logs: "--nodes 4 --rank 1", "NGC_ARRAY_INDEX=1
  // NGC_ARRAY_SIZE=4", "SLURM_ARRAY_TASK_ID=7", "no rank flags or variables: one node".
  std::string decided_by;
};

using Environment = std::map<std::string, std::string>;

// A copy of this process's environment (the only function here that reads global state).
Environment CurrentEnvironment();

// Resolves rank and size. Flags win: --nodes and --rank together decide alone; --nodes alone takes
// the rank from the first variable family below that sets a rank (SLURM_PROCID only in an srun
// step); --rank alone takes the size likewise; the family's other variable, if set, must agree
// with the flag. Otherwise the first family with both variables set, in this order:
//   NGC_ARRAY_INDEX / NGC_ARRAY_SIZE (BCP), RANK / WORLD_SIZE (torchrun, BCP PyTorch arrays;
//   first in a process torchrun started, which TORCHELASTIC_RUN_ID or LOCAL_WORLD_SIZE tell),
//   OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE (Open MPI), PMI_RANK / PMI_SIZE (MPICH, Intel
//   MPI; under Slurm, whose srun's pmi2 sets them too, only where mpiexec started the processes:
//   PMI_SIZE >= 2 and not the srun step's task count), then SLURM_ARRAY_TASK_ID (a Slurm array
//   task, when SLURM_STEP_NUM_TASKS is unset or 1), then SLURM_PROCID / SLURM_STEP_NUM_TASKS (one
//   srun step over nodes). SLURM_NTASKS alone (a batch script run without srun: the allocation's
//   task count, with SLURM_PROCID 0 in the one process there is) does not split: rank 0 of 1, and
//   decided_by says so. With none of them: rank 0 of 1 (decided_by names a family's variable set
//   without its other half). InvalidArgument, naming the flag or
// variable, for a value that is not a whole number, a size below 1 or a rank outside [0, size), a
// flag its family contradicts, and a Slurm array task running a multi-task srun step or several
// mpiexec processes (or one flag in an array task): which split is meant cannot be told.
absl::StatusOr<RankAssignment> ResolveRank(const RankFlags& flags, const Environment& env);

// The NeMo launcher's split: rank r of g takes the contiguous block [floor(r*n/g), floor((r+1)*n/g))
// of the ordered list `files` (n = files.size()). A rank may get nothing when g > n.
std::vector<int> FilesForRank(const std::vector<int>& files, int rank, int size);

// FilesForRank, or the single array-task file (NotFound when it is not in `files`).
absl::StatusOr<std::vector<int>> FilesForAssignment(const std::vector<int>& files,
                                                    const RankAssignment& assignment);

// For a Slurm array task: the numbers of `files` outside the array's task ids [array_min,
// array_max] or off its step, which no task of this array makes (`--array 0-1` or `--array 0-29:2`
// with `--files 0-29`; or on purpose, `--array 3,17` rerunning two failed shards). Empty otherwise.
// The CLI says so.
std::vector<int> FilesNoArrayTaskMakes(const std::vector<int>& files,
                                       const RankAssignment& assignment);
// For a Slurm array task whose SLURM_ARRAY_TASK_COUNT is below the ids that MIN..MAX by its step
// hold (a list, `--array 0-9,20-29`): how many of them are not tasks (which ones Slurm does not
// say, so FilesNoArrayTaskMakes cannot name them). 0 otherwise.
int ArrayTasksMissingInRange(const RankAssignment& assignment);

}  // namespace pileprep

#endif  // PILEPREP_SHARD_PLAN_H_
