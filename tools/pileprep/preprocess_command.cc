// `pileprep preprocess`: a drop-in for Megatron's tools/preprocess_data.py.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common.h"
#include "oneapi/tbb/info.h"
#include "pileprep/gpt2_tokenizer.h"
#include "pileprep/pipeline.h"
#include "pileprep/shard_plan.h"
#include "shard_record.h"
#include "signals.h"

namespace pileprep::cli {
namespace {

int RunPreprocess(int argc, char** argv, int first) {
  Args args;
  args.Add("input", Args::Kind::kValue, "FILE", "JSON lines, plain (.jsonl) or zstd (.jsonl.zst)");
  args.Add("output-prefix", Args::Kind::kValue, "P",
           "outputs are P_KEY_document.{bin,idx} (Megatron's naming)");
  args.Add("json-keys", Args::Kind::kMulti, "KEY", "JSON field(s) to tokenize, one dataset each",
           "text");
  args.Add("append-eod", Args::Kind::kSwitch, "",
           "append <|endoftext|> (50256) after each non-empty document");
  args.Add("workers", Args::Kind::kValue, "N", "worker threads", "all cores");
  args.Add("threads", Args::Kind::kValue, "N", "same as --workers", "", true);
  args.Add("tokenizer-type", Args::Kind::kValue, "TYPE", "only GPT2BPETokenizer",
           "GPT2BPETokenizer");
  // Accepted for drop-in compatibility with Megatron's command lines; they do not change the output.
  args.Add("dataset-impl", Args::Kind::kValue, "mmap", "accepted for compatibility (mmap only)", "",
           true);
  args.Add("log-interval", Args::Kind::kValue, "N", "accepted for compatibility", "", true);
  args.Add("partitions", Args::Kind::kValue, "N", "accepted for compatibility", "", true);
  args.Add("keep-sequential-samples", Args::Kind::kSwitch, "", "accepted for compatibility", "",
           true);
  args.Add("split-sentences", Args::Kind::kSwitch, "", "not supported", "", true);
  AddCommonFlags(args);
  const std::optional<int> done = ParseOrHelp(
      args, argc, argv, first,
        "Usage: pileprep preprocess --input FILE --output-prefix P [--json-keys text] "
        "[--append-eod] [--workers N]\n\n"
        "A drop-in for Megatron's tools/preprocess_data.py (GPT-2, no sentence splitting): writes\n"
        "P_KEY_document.{bin,idx} byte-identical to Megatron's for the same input.\n\n",
      ExitCodeHelp());
  if (done) return *done;
  Common c;
  if (auto s = ReadCommon(args, &c); !s.ok()) {
    PrintError(std::string(s.message()));
    return kExitUsage;
  }
  if (!args.positional().empty()) {
    PrintError(absl::StrCat("unexpected argument \"", args.positional().front(),
                            "\" (preprocess takes one --input FILE; see --help)"));
    return kExitUsage;
  }
  const std::string input = args.Get("input");
  const std::string prefix = args.Get("output-prefix");
  if (input.empty() || prefix.empty()) {
    PrintError("preprocess needs --input FILE and --output-prefix P (see --help)");
    return kExitUsage;
  }
  if (args.Get("tokenizer-type", "GPT2BPETokenizer") != "GPT2BPETokenizer") {
    PrintError(absl::StrCat("--tokenizer-type ", args.Get("tokenizer-type"),
                            ": only GPT2BPETokenizer is supported"));
    return kExitUsage;
  }
  if (args.Has("dataset-impl") && args.Get("dataset-impl") != "mmap") {
    PrintError("--dataset-impl: only mmap (the .bin/.idx format) is written");
    return kExitUsage;
  }
  if (args.Has("split-sentences")) {
    PrintError("--split-sentences is not supported (GPT pre-training does not split sentences)");
    return kExitUsage;
  }
  // --workers (Megatron's name) wins over --threads; both are checked.
  long long threads = 0, workers = 0;
  for (auto [flag, value] : {std::pair{"threads", &threads}, std::pair{"workers", &workers}}) {
    if (auto s = args.GetInt(flag, 1, 4096, value); !s.ok()) {
      PrintError(std::string(s.message()));
      return kExitUsage;
    }
  }
  if (args.Has("workers")) threads = workers;
  c.pipeline.threads = static_cast<int>(threads);
  c.pipeline.append_eod = args.Has("append-eod");
  if (args.Has("json-keys")) c.pipeline.jsonl.json_keys = UniqueKeys(args.GetAll("json-keys"));
  if (auto s = EnsureDirectory(DirectoryOf(prefix), "--output-prefix"); !s.ok()) {
    PrintError(std::string(s.message()));
    return kExitUsage;
  }
  std::vector<std::string> prefixes, lock_paths, stale;
  for (const std::string& key : c.pipeline.jsonl.json_keys) {
    prefixes.push_back(absl::StrCat(prefix, "_", key, "_document"));
    lock_paths.push_back(DatasetLockPath(prefixes.back()));
    for (std::string& t : DatasetTemporaries(prefixes.back())) stale.push_back(std::move(t));
  }
  // Two writers of one dataset (two preprocess runs, a merge, a shard job) would share its
  // temporaries: one at a time. Then a killed run's temporaries go.
  PathLocks locks;
  if (!LockOutputs(lock_paths, absl::StrJoin(prefixes, ", "), stale, c.console.quiet, &locks)) {
    return kExitFailed;
  }
  const int used_threads =
      c.pipeline.threads > 0 ? c.pipeline.threads : tbb::info::default_concurrency();
  std::vector<std::unique_ptr<Gpt2Tokenizer::Cache>> caches;
  auto tokenizer = LoadTokenizerMakingCaches(c, used_threads, &caches);
  if (!tokenizer.ok()) {
    PrintError(std::string(tokenizer.status().message()));
    return kExitUsage;
  }
  c.pipeline.caches = &caches;
  // A shard job's record beside these names would vouch for bytes it was not written for.
  c.pipeline.before_publish = [&prefixes](const std::vector<PreparedDataset>&) {
    return ForgetRecords(prefixes);
  };
  ShardOutcome outcome = RunOne(std::filesystem::path(input).filename().string(), input,
                                InputFormatForPath(input), prefixes, **tokenizer, c);
  // Always, as the shard job's: -q means errors and the summary only.
  std::fprintf(stderr, "\n%s", SummaryTable({outcome}, used_threads).c_str());
  if (CancelExitCode() != 0) return CancelExitCode();
  return outcome.status == "done" ? kExitOk : kExitFailed;
}

const CommandRegistration kRegistration(
    "preprocess", "a drop-in for Megatron's tools/preprocess_data.py on one .jsonl or .jsonl.zst",
    RunPreprocess);

}  // namespace
}  // namespace pileprep::cli
