// Pieces shared by the CLI's commands: exit codes, error printing, the flags every processing command
// takes, and running one input with progress and a report.
#ifndef PILEPREP_TOOLS_PILEPREP_COMMON_H_
#define PILEPREP_TOOLS_PILEPREP_COMMON_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "args.h"
#include "console.h"
#include "path_lock.h"
#include "pileprep/gpt2_tokenizer.h"
#include "pileprep/pipeline.h"

#ifndef PILEPREP_VERSION
#define PILEPREP_VERSION "dev"
#endif

namespace pileprep::cli {

// Exit codes (documented in --help and the README).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // one or more inputs failed; the others completed
inline constexpr int kExitUsage = 2;   // bad flags or set-up (vocabulary, output directory)

void PrintError(const std::string& message);
// The exit codes' part of --help: the shard job's and preprocess's differ in what makes 1 and 2.
enum class ExitHelpFor { kPreprocess, kShardJob };
std::string ExitCodeHelp(ExitHelpFor command);

// How every command starts: parses argv[first..argc) into `args`. A usage error is printed and
// gives kExitUsage; --help prints `intro`, "Flags:" with the flags, then `exit_status`, and gives
// kExitOk. nullopt: neither, the command goes on.
std::optional<int> ParseOrHelp(Args& args, int argc, char** argv, int first,
                               const std::string& intro, const std::string& exit_status);

// Flags shared by the shard job and `preprocess`. Defaults come from the library's options structs.
void AddCommonFlags(Args& args);

struct Common {
  PipelineOptions pipeline;
  FileSourceOptions file_source;
  Gpt2Tokenizer::Options tokenizer;
  std::string vocab_file, merge_file;
  ConsoleOptions console;
  bool verbose = false;
};
absl::Status ReadCommon(const Args& args, Common* c);
absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> LoadTokenizer(const Common& c);
// LoadTokenizer, while `count` other threads each make a pre-token cache into `caches` for the
// pipeline (PipelineOptions::caches): a cache's 56 MiB take 5-150 ms to fault in on this project's
// VM, and the vocabulary ~45 ms on one core, so the other cores make the caches meanwhile. At most
// one per core is made; a cache not made here is left to the pipeline, which makes it when the
// worker of its slot first runs.
absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> LoadTokenizerMakingCaches(
    const Common& c, int count, std::vector<std::unique_ptr<Gpt2Tokenizer::Cache>>* caches);
// Creates `dir` (and its parents, synced) if need be and checks that it is writable; errors name
// `flag`, the option that gave it ("--output-dir").
absl::Status EnsureDirectory(const std::string& dir, absl::string_view flag);
// What EnsureDirectory would say, without creating anything (--dry-run): OK when `dir` is a
// writable directory, or the first of its parents that exists is one (it could be made).
absl::Status CheckDirectoryCouldBeMade(const std::string& dir, absl::string_view flag);
// The directory an output prefix writes in: "." for a bare prefix ("out" -> ".", "d/out" -> "d").
std::string DirectoryOf(const std::string& prefix);
// The keys in the order given, each once: Megatron keeps one dataset per key name (a dict), and two
// writers on one prefix would share their temporaries.
std::vector<std::string> UniqueKeys(const std::vector<std::string>& keys);

// The temporaries a writer of dataset `prefix` makes (IndexedDatasetWriter's, merge's a subset):
// never valid input to anything, so a killed run's are removed by the next run that holds the lock.
std::vector<std::string> DatasetTemporaries(const std::string& prefix);

// Removes each of `paths` that exists (a killed run's temporaries), naming it on stderr unless
// quiet.
void RemoveStaleFiles(const std::vector<std::string>& paths, bool quiet);

// "{prefix}.pileprep-lock": the lock every writer of the dataset `prefix` holds (the shard job,
// preprocess, merge), so that two of them never share its temporaries.
std::string DatasetLockPath(const std::string& prefix);

// One process at a time writes the outputs that `lock_paths` stand for (PathLocks::TryAcquireAll,
// in sorted order):
// true with *locks set (a path the file system cannot lock left out: a note is printed, unless
// quiet, and the run goes on), then the files in `stale` that exist are removed, each named
// unless quiet. false when another process holds one: the error, naming `outputs_name`, the
// holder and the lock, is printed.
bool LockOutputs(const std::vector<std::string>& lock_paths, const std::string& outputs_name,
                 const std::vector<std::string>& stale, bool quiet, PathLocks* locks);

// A dataset named on the command line: "x.idx" and "x.bin" name the pair "x" too, unless neither
// a file "x.bin" nor "x.idx" is there but "x.bin.idx" is (the prefix "x.bin").
std::string StripPairSuffix(const std::string& arg);

// Runs one input, opened by the caller (OpenFileSource), and turns the result into an outcome line
// for the summary, printing errors, bad records and replacement counts as it goes.
ShardOutcome RunOne(const std::string& display_name, const std::string& input, ByteSource& source,
                    InputFormat format, const std::vector<std::string>& prefixes,
                    const Gpt2Tokenizer& tokenizer, const Common& c);

// The reporting half of RunOne, for callers that run the pipeline themselves (the shard job, which
// downloads and may restart): fills outcome->status/error/outputs from `status` and outcome->stats,
// and prints the error, the bad records and the replacement counts.
void ReportOutcome(const std::string& display_name, const std::string& input, absl::Status status,
                   const std::vector<std::string>& prefixes, const Common& c,
                   ShardOutcome* outcome);

// A subcommand: `pileprep NAME ...`. Each command file registers itself, so adding one touches no
// other file. `first` is the index of the first argument after the command name.
using CommandFn = int (*)(int argc, char** argv, int first);
struct CommandRegistration {
  CommandRegistration(const char* name, const char* summary, CommandFn fn);
};
struct Command {
  const char* name;
  const char* summary;
  CommandFn fn;
};
const std::vector<Command>& Commands();

// The default command (no subcommand name): the shard job.
int RunShardJob(int argc, char** argv, int first);

}  // namespace pileprep::cli

#endif  // PILEPREP_TOOLS_PILEPREP_COMMON_H_
