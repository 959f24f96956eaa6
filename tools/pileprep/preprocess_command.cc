// `pileprep preprocess`: a drop-in for Megatron's tools/preprocess_data.py.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
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
#include "pileprep/zstd_stream.h"
#include "shard_record.h"
#include "signals.h"

namespace pileprep::cli {
namespace {

int RunPreprocess(int argc, char** argv, int first) {
  Args args;
  args.Add("input", Args::Kind::kValue, "FILE", "JSON lines, plain (.jsonl) or zstd (.jsonl.zst)");
  args.Add("output-prefix", Args::Kind::kValue, "P",
           "outputs are P_KEY_document.{bin,idx} (Megatron's naming)");
  args.Add("json-keys", Args::Kind::kList, "KEY", "JSON field(s) to tokenize, one dataset each",
           "text");
  args.Add("append-eod", Args::Kind::kSwitch, "",
           "append <|endoftext|> (50256) after each non-empty document");
  args.Add("workers", Args::Kind::kValue, "N", "worker threads", "all cores");
  args.Add("threads", Args::Kind::kValue, "N", "same as --workers", "", true);
  args.Add("tokenizer-type", Args::Kind::kValue, "TYPE", "only GPT2BPETokenizer",
           "GPT2BPETokenizer");
  // Accepted for drop-in compatibility with Megatron's and NeMo's command lines where they do not
  // change the output (checked below where they could).
  args.Add("dataset-impl", Args::Kind::kValue, "mmap", "accepted for compatibility (mmap only)", "",
           true);
  args.Add("log-interval", Args::Kind::kValue, "N", "accepted for compatibility", "", true);
  args.Add("partitions", Args::Kind::kValue, "N", "1, or N with --keep-sequential-samples", "",
           true);
  args.Add("keep-sequential-samples", Args::Kind::kSwitch, "", "accepted for compatibility", "",
           true);
  // Read by Megatron only with --split-sentences (refused), or only pace its worker pool.
  args.Add("keep-newlines", Args::Kind::kSwitch, "", "accepted for compatibility", "", true);
  args.Add("lang", Args::Kind::kValue, "LANG", "accepted for compatibility", "", true);
  args.Add("chunk-size", Args::Kind::kValue, "N", "accepted for compatibility", "", true);
  // NeMo's preprocess_data_for_megatron.py (the NeMo launcher's Pile step passes both).
  args.Add("tokenizer-library", Args::Kind::kValue, "megatron", "megatron only", "", true);
  args.Add("tokenizer-model", Args::Kind::kValue, "None", "None only (GPT-2 BPE takes files)", "",
           true);
  args.Add("split-sentences", Args::Kind::kSwitch, "", "not supported", "", true);
  AddCommonFlags(args);
  const std::optional<int> done = ParseOrHelp(
      args, argc, argv, first,
      "Usage: pileprep preprocess --input FILE --output-prefix P [--json-keys text] "
      "[--append-eod] [--workers N]\n\n"
      "A drop-in for Megatron's tools/preprocess_data.py (GPT-2, no sentence splitting): writes\n"
      "P_KEY_document.{bin,idx} byte-identical to Megatron's for the same input. A literal\n"
      "<|endoftext|> in text is one id, as NeMo and current Megatron-LM write it (legacy\n"
      "Megatron-LM's script read it as text, as --endoftext-as-text does).\n\n"
      "Megatron's and NeMo's other flags are accepted where they do not change the output:\n"
      "--dataset-impl mmap, --log-interval N, --keep-sequential-samples, --keep-newlines,\n"
      "--lang L, --chunk-size N, --tokenizer-library megatron, --tokenizer-model None, and\n"
      "--partitions N (N > 1 only with --keep-sequential-samples, which keeps the input's order);\n"
      "--split-sentences is refused. --threads N is --workers N.\n\n",
      ExitCodeHelp(ExitHelpFor::kPreprocess));
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
  // A compressed file under a plain name (gzip: Megatron reads .gz only on its --partitions path)
  // would be read as lines of binary, every one a bad record: said at once instead, naming what to
  // do. Only a regular file: a pipe's first bytes, read here, would be lost to the run.
  struct stat input_st;
  if (InputFormatForPath(input) == InputFormat::kPlain && ::stat(input.c_str(), &input_st) == 0 &&
      S_ISREG(input_st.st_mode)) {
    if (FILE* f = std::fopen(input.c_str(), "rb"); f != nullptr) {
      char head[4] = {};
      const size_t n = std::fread(head, 1, sizeof(head), f);
      std::fclose(f);
      const std::string format = CompressedFormatOf(std::string_view(head, n));
      if (format == "zstd") {
        PrintError(absl::StrCat(input,
                                ": zstd-compressed (it starts with a zstd frame), under a plain "
                                "name: pileprep reads a file as zstd when its name ends in .zst; "
                                "rename it (NAME.jsonl.zst)"));
        return kExitFailed;
      }
      if (format == "legacy zstd") {
        PrintError(absl::StrCat(input,
                                ": a legacy zstd frame (v0.1-v0.7), which pileprep does not read: "
                                "recompress it with a current zstd (NAME.jsonl.zst)"));
        return kExitFailed;
      }
      if (!format.empty()) {
        PrintError(absl::StrCat(input, ": ", format, "-compressed",
                                format == "gzip" ? " (it starts with 1f 8b)" : "",
                                "; pileprep reads JSON lines, plain or zstd (.jsonl.zst): "
                                "decompress it, or recompress it with zstd"));
        return kExitFailed;
      }
    }
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
  if (args.Has("tokenizer-library") && args.Get("tokenizer-library") != "megatron") {
    PrintError(absl::StrCat("--tokenizer-library ", args.Get("tokenizer-library"),
                            ": only megatron (GPT2BPETokenizer from --vocab-file/--merge-file)"));
    return kExitUsage;
  }
  if (args.Has("tokenizer-model") && args.Get("tokenizer-model") != "None") {
    PrintError(absl::StrCat("--tokenizer-model ", args.Get("tokenizer-model"),
                            ": GPT-2 BPE reads --vocab-file and --merge-file; drop the flag (or "
                            "give None)"));
    return kExitUsage;
  }
  // Megatron reads these as integers; --log-interval 0 would divide by zero there.
  long long partitions = 1, unused = 0;
  for (auto [flag, value] : {std::pair{"log-interval", &unused}, std::pair{"chunk-size", &unused},
                             std::pair{"partitions", &partitions}}) {
    if (auto s = args.GetInt(flag, 1, INT32_MAX, value); !s.ok()) {
      PrintError(std::string(s.message()));
      return kExitUsage;
    }
  }
  // --partitions N deals Megatron's input lines round-robin into N files and merges them in order
  // (lines 0, N, 2N, ..., then 1, N+1, ...): another document order than the input's, which is what
  // this writes. With --keep-sequential-samples the partitions are contiguous blocks: the input's
  // order. And with N > 1 Megatron takes --input as a glob, in the directory's (unsorted) order.
  if (partitions > 1) {
    if (!args.Has("keep-sequential-samples")) {
      PrintError(absl::StrCat(
          "--partitions ", partitions, ": Megatron then interleaves the documents (line i into ",
          "partition i mod ", partitions, ", the partitions merged in order), which pileprep does ",
          "not: drop --partitions (--workers sets the parallelism), or add ",
          "--keep-sequential-samples, with which Megatron keeps the input's order"));
      return kExitUsage;
    }
    if (input.find_first_of("*?[") != std::string::npos) {
      PrintError(absl::StrCat(
          "--input ", input, " with --partitions: Megatron globs it, in directory order; pileprep ",
          "takes one file (concatenate them in the order you want, or use `pileprep merge` on one ",
          "dataset per file)"));
      return kExitUsage;
    }
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
  // The vocabulary first: a set-up error found loading it leaves no output directory made for
  // nothing (as in the shard job). The caches are made meanwhile (the vocabulary takes ~45 ms on
  // one core, which they would otherwise add to every run's start), so a run then refused by
  // another's lock has made them too: ~0.4 s, and no more memory than the run would have taken.
  const int used_threads =
      c.pipeline.threads > 0 ? c.pipeline.threads : tbb::info::default_concurrency();
  std::vector<std::unique_ptr<Gpt2Tokenizer::Cache>> caches;
  auto tokenizer = LoadTokenizerMakingCaches(c, used_threads, &caches);
  if (!tokenizer.ok()) {
    PrintError(std::string(tokenizer.status().message()));
    return kExitUsage;
  }
  std::vector<std::string> prefixes, lock_paths, stale;
  for (const std::string& key : c.pipeline.jsonl.json_keys) {
    prefixes.push_back(absl::StrCat(prefix, "_", key, "_document"));
  }
  // The input is opened before the output directories are made: one that cannot be (missing, a
  // directory, "f.jsonl/", a symlink loop, unreadable) fails as the run would (exit 1, its row in
  // the summary) without leaving an empty directory tree behind, as a mistyped --input did.
  std::string display_name = std::filesystem::path(input).filename().string();
  if (display_name.empty()) display_name = input;  // "f.jsonl/": its row was unnamed
  auto source = OpenFileSource(input, c.file_source);
  if (!source.ok()) {
    ShardOutcome outcome;
    outcome.name = display_name;
    ReportOutcome(display_name, input, source.status(), prefixes, c, &outcome);
    std::fprintf(stderr, "\n%s", SummaryTable({outcome}, used_threads).c_str());
    return kExitFailed;
  }
  for (size_t k = 0; k < prefixes.size(); ++k) {
    const std::string& key = c.pipeline.jsonl.json_keys[k];
    // A key with a '/' puts its dataset in a directory of its own, as in Megatron (which writes
    // there only when it exists): created like --output-prefix's, not a failed input (exit 1).
    const std::string made_by = key.find('/') == std::string::npos
                                    ? std::string("--output-prefix")
                                    : absl::StrCat("--json-keys ", key, ": the directory");
    if (auto s = EnsureDirectory(DirectoryOf(prefixes[k]), made_by); !s.ok()) {
      PrintError(std::string(s.message()));
      return kExitUsage;
    }
    lock_paths.push_back(DatasetLockPath(prefixes[k]));
    for (std::string& t : DatasetTemporaries(prefixes[k])) stale.push_back(std::move(t));
  }
  // Two writers of one dataset (two preprocess runs, a merge, a shard job) would share its
  // temporaries: one at a time. Then a killed run's temporaries go.
  PathLocks locks;
  if (!LockOutputs(lock_paths, absl::StrJoin(prefixes, ", "), stale, c.console.quiet, &locks)) {
    return kExitFailed;
  }
  c.pipeline.caches = &caches;
  // A shard job's record beside these names would vouch for bytes it was not written for.
  c.pipeline.before_publish = [&prefixes](const std::vector<PreparedDataset>&) {
    return ForgetRecords(prefixes);
  };
  ShardOutcome outcome =
      RunOne(display_name, input, **source, InputFormatForPath(input), prefixes, **tokenizer, c);
  // Always, as the shard job's: -q means errors and the summary only.
  std::fprintf(stderr, "\n%s", SummaryTable({outcome}, used_threads).c_str());
  // The locks go before the last words, so that they report a signal that came while the lock files
  // were removed too (the handler's "stopping" line was the log's last).
  locks.clear();
  // A signal that came too late to cancel the input (while its outputs were published) leaves its
  // status, as in the shard job: it exited 128+N of a dataset in place.
  if (CancelExitCode() != 0) {
    if (outcome.status == "cancelled") return CancelExitCode();
    // Under -q too: it answers the handler's "stopping" line, which -q does not hold back.
    std::fprintf(stderr, "pileprep: %s came too late to cancel the input: nothing was cancelled\n",
                 SignalNameOf(CancelExitCode()));
  }
  return outcome.status == "done" ? kExitOk : kExitFailed;
}

const CommandRegistration kRegistration(
    "preprocess", "a drop-in for Megatron's tools/preprocess_data.py on one .jsonl or .jsonl.zst",
    RunPreprocess);

}  // namespace
}  // namespace pileprep::cli
