// pileprep: prepare GPT pre-training data (Pile shards -> Megatron .bin/.idx).
//
// The library is silent; this tool owns printing, exit codes and advice.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "args.h"
#include "console.h"
#include "oneapi/tbb/info.h"
#include "pileprep/gpt2_tokenizer.h"
#include "pileprep/pipeline.h"
#include "pileprep/shard_plan.h"

#ifndef PILEPREP_VERSION
#define PILEPREP_VERSION "dev"
#endif

namespace pileprep::cli {
namespace {

// Exit codes (documented in --help and the README).
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;  // one or more inputs failed; the others completed
constexpr int kExitUsage = 2;   // bad flags or set-up (vocabulary, output directory)

constexpr char kDefaultUrl[] =
    "https://huggingface.co/datasets/monology/pile-uncopyrighted/resolve/main/train/";

void PrintError(const std::string& message) {
  std::fprintf(stderr, "pileprep: error: %s\n", message.c_str());
}

std::string ExitCodeHelp() {
  return "Exit status:\n"
         "  0  every input was processed and its outputs published\n"
         "  1  one or more inputs failed (each is named above the summary); the others completed\n"
         "  2  usage or set-up error (bad flag, vocabulary not found, output directory unusable)\n";
}

// Flags shared by the shard job and `preprocess`. Defaults come from the library's options structs.
void AddCommonFlags(Args& args) {
  const PipelineOptions defaults;
  args.Add("vocab-file", Args::Kind::kValue, "FILE",
           "GPT-2 encoder.json / vocab.json (default: the copy shipped in tokenizers/gpt2)");
  args.Add("merge-file", Args::Kind::kValue, "FILE",
           "GPT-2 vocab.bpe / merges.txt (default: the copy shipped in tokenizers/gpt2)");
  args.Add("endoftext-as-text", Args::Kind::kSwitch, "",
           "tokenize a literal <|endoftext|> in text as ordinary text (legacy Megatron, tiktoken "
           "encode_ordinary) instead of the single id 50256");
  args.Add("max-bad-records", Args::Kind::kValue, "N",
           "fail an input with more than N bad records (blank lines, invalid JSON, missing or "
           "non-string key); -1 for no limit",
           absl::StrCat(defaults.jsonl.max_bad_records));
  args.Add("zstd-window-log-max", Args::Kind::kValue, "N",
           "largest zstd window accepted, as a power of two (10-31); memory per input grows with it",
           absl::StrCat(defaults.zstd.window_log_max));
  args.Add("batch-bytes", Args::Kind::kValue, "N",
           "decompressed bytes per unit of parallel work", absl::StrCat(defaults.batch_bytes), true);
  args.Add("progress-interval", Args::Kind::kValue, "SECONDS",
           "seconds between progress lines when stderr is not a terminal", "30");
  args.Add("quiet", Args::Kind::kSwitch, "", "print only errors and the summary (-q)");
  args.Add("verbose", Args::Kind::kSwitch, "", "list every kept bad record (-v)");
  args.Add("help", Args::Kind::kSwitch, "", "show this help (-h)");
}

struct Common {
  PipelineOptions pipeline;
  Gpt2Tokenizer::Options tokenizer;
  std::string vocab_file, merge_file;
  ConsoleOptions console;
  bool verbose = false;
};

absl::Status ReadCommon(const Args& args, Common* c) {
  long long v = c->pipeline.jsonl.max_bad_records;
  if (auto s = args.GetInt("max-bad-records", -1, INT64_MAX, &v); !s.ok()) return s;
  c->pipeline.jsonl.max_bad_records = v;
  v = c->pipeline.zstd.window_log_max;
  if (auto s = args.GetInt("zstd-window-log-max", 10, 31, &v); !s.ok()) return s;
  c->pipeline.zstd.window_log_max = static_cast<int>(v);
  v = static_cast<long long>(c->pipeline.batch_bytes);
  if (auto s = args.GetInt("batch-bytes", 4096, 1LL << 30, &v); !s.ok()) return s;
  c->pipeline.batch_bytes = static_cast<size_t>(v);
  v = 30;
  if (auto s = args.GetInt("progress-interval", 1, 86400, &v); !s.ok()) return s;
  c->console.log_interval_s = static_cast<double>(v);
  c->console.quiet = args.Has("quiet");
  c->console.tty = isatty(STDERR_FILENO) != 0;
  c->verbose = args.Has("verbose");
  c->tokenizer.endoftext_is_special = !args.Has("endoftext-as-text");
  c->vocab_file = args.Get("vocab-file");
  c->merge_file = args.Get("merge-file");
  if (c->vocab_file.empty() != c->merge_file.empty()) {
    return absl::InvalidArgumentError("--vocab-file and --merge-file go together: give both");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> LoadTokenizer(const Common& c) {
  if (!c.vocab_file.empty()) {
    return Gpt2Tokenizer::FromFiles(c.vocab_file, c.merge_file, c.tokenizer);
  }
  return Gpt2Tokenizer::FromDefaultFiles(c.tokenizer);
}

absl::Status EnsureDirectory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("--output-dir ", dir, ": cannot create: ", ec.message()));
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("--output-dir ", dir, ": not writable: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// Runs one input and turns the result into an outcome line for the summary.
ShardOutcome RunOne(const std::string& display_name, const std::string& input, InputFormat format,
                    const std::vector<std::string>& prefixes, const Gpt2Tokenizer& tokenizer,
                    const Common& c) {
  ShardOutcome outcome;
  outcome.name = display_name;
  absl::Status status;
  auto source = OpenFileSource(input);
  if (!source.ok()) {
    status = source.status();
  } else {
    ConsoleProgress progress(c.console, display_name);
    status = RunPipeline(**source, format, tokenizer, prefixes, c.pipeline, &outcome.stats,
                         &progress);
    progress.Finish();
  }
  if (status.ok() && !outcome.stats.published) {
    status = absl::FailedPreconditionError(absl::StrCat(
        input, ": no tokens in any document; nothing published (no reader can open an empty "
               "dataset)"));
  }
  const ShardStats& s = outcome.stats;
  if (!status.ok()) {
    outcome.status = "FAILED";
    outcome.error = std::string(status.message());
    PrintError(outcome.error);
  } else {
    outcome.status = "done";
    for (const std::string& p : prefixes) outcome.outputs.push_back(p);
    if (!c.console.quiet) {
      std::fprintf(stderr, "%s: %llu documents, %llu tokens in %.1fs -> %s.{bin,idx}\n",
                   display_name.c_str(), static_cast<unsigned long long>(s.documents),
                   static_cast<unsigned long long>(s.tokens), s.seconds,
                   absl::StrJoin(prefixes, ".{bin,idx}, ").c_str());
    }
  }
  if (s.bad_records > 0) {
    std::fprintf(stderr, "%s: %llu bad records skipped:\n", display_name.c_str(),
                 static_cast<unsigned long long>(s.bad_records));
    const size_t shown = c.verbose ? s.bad_record_samples.size()
                                   : std::min<size_t>(5, s.bad_record_samples.size());
    for (size_t i = 0; i < shown; ++i) {
      const BadRecord& b = s.bad_record_samples[i];
      std::fprintf(stderr, "  line %llu: %s%s%s\n", static_cast<unsigned long long>(b.line),
                   std::string(BadRecordKindName(b.kind)).c_str(), b.detail.empty() ? "" : ": ",
                   b.detail.c_str());
    }
    if (shown < s.bad_records) {
      std::fprintf(stderr, "  ... %llu more%s\n",
                   static_cast<unsigned long long>(s.bad_records - shown),
                   c.verbose ? "" : " (--verbose lists the first 100)");
    }
  }
  if (s.replaced_invalid_utf8 + s.replaced_lone_surrogates > 0) {
    std::fprintf(stderr,
                 "%s: replaced with U+FFFD: %llu invalid UTF-8 sequences, %llu lone surrogate "
                 "escapes\n",
                 display_name.c_str(), static_cast<unsigned long long>(s.replaced_invalid_utf8),
                 static_cast<unsigned long long>(s.replaced_lone_surrogates));
  }
  return outcome;
}

int RunShardJob(int argc, char** argv, int first) {
  Args args;
  args.Add("url", Args::Kind::kValue, "SRC",
           "where shards NN.jsonl.zst are: a local directory or file:// URL (http(s) arrives with "
           "the download stage)",
           kDefaultUrl);
  args.Add("files", Args::Kind::kValue, "LIST", "shard numbers, e.g. 0-29 or 0,3,5-7", "0-29");
  args.Add("output-dir", Args::Kind::kValue, "DIR", "where the .bin/.idx pairs go", ".");
  args.Add("output-prefix", Args::Kind::kValue, "NAME",
           "outputs are DIR/NAME_NN_text_document.{bin,idx} (the NeMo launcher's names)",
           "my-gpt3");
  args.Add("json-keys", Args::Kind::kMulti, "KEY", "JSON field(s) holding the text", "text");
  args.Add("threads", Args::Kind::kValue, "N", "worker threads", "all cores");
  AddCommonFlags(args);
  if (auto s = args.Parse(argc, argv, first); !s.ok()) {
    PrintError(std::string(s.message()));
    return kExitUsage;
  }
  if (args.Has("help")) {
    std::printf(
        "Usage: pileprep [--url SRC] [--files LIST] [--output-dir DIR] [flags]\n"
        "       pileprep preprocess --input FILE --output-prefix P [flags]   (see: pileprep "
        "preprocess --help)\n\n"
        "Prepares GPT pre-training data: each shard SRC/NN.jsonl.zst is decompressed (zstd), parsed\n"
        "(one JSON document per line), tokenized with GPT-2 BPE and written as a Megatron indexed\n"
        "dataset DIR/NAME_NN_text_document.{bin,idx}, byte-identical to Megatron's\n"
        "tools/preprocess_data.py --append-eod. Outputs appear only when complete.\n\n"
        "Flags:\n%s\n%s",
        args.Help().c_str(), ExitCodeHelp().c_str());
    return kExitOk;
  }
  if (!args.positional().empty()) {
    PrintError(absl::StrCat("unexpected argument \"", args.positional().front(),
                            "\"; commands are: preprocess, help, version"));
    return kExitUsage;
  }
  Common c;
  if (auto s = ReadCommon(args, &c); !s.ok()) {
    PrintError(std::string(s.message()));
    return kExitUsage;
  }
  long long threads = 0;
  if (auto s = args.GetInt("threads", 1, 4096, &threads); !s.ok()) {
    PrintError(std::string(s.message()));
    return kExitUsage;
  }
  c.pipeline.threads = static_cast<int>(threads);
  c.pipeline.append_eod = true;
  if (args.Has("json-keys")) c.pipeline.jsonl.json_keys = args.GetAll("json-keys");

  auto files = ParseFileNumbers(args.Get("files", "0-29"));
  auto source = ParseShardSource(args.Get("url", kDefaultUrl));
  if (!files.ok() || !source.ok()) {
    PrintError(std::string((!files.ok() ? files.status() : source.status()).message()));
    return kExitUsage;
  }
  if (source->kind == SourceKind::kHttp) {
    PrintError(absl::StrCat(
        "--url ", source->base,
        ": downloading over HTTP(S) is not in this build yet; download the shards and pass "
        "--url /path/to/shards"));
    return kExitUsage;
  }
  const std::string output_dir = args.Get("output-dir", ".");
  const std::string output_prefix = args.Get("output-prefix", "my-gpt3");
  if (output_prefix.empty() || output_prefix.find('/') != std::string::npos) {
    PrintError("--output-prefix must be a plain name without '/'; use --output-dir for the directory");
    return kExitUsage;
  }
  if (auto s = EnsureDirectory(output_dir); !s.ok()) {
    PrintError(std::string(s.message()));
    return kExitUsage;
  }
  auto tokenizer = LoadTokenizer(c);
  if (!tokenizer.ok()) {
    PrintError(std::string(tokenizer.status().message()));
    return kExitUsage;
  }
  const int used_threads =
      c.pipeline.threads > 0 ? c.pipeline.threads : tbb::info::default_concurrency();
  if (!c.console.quiet) {
    std::fprintf(stderr, "pileprep %s: %zu shard(s) from %s -> %s, %d threads\n", PILEPREP_VERSION,
                 files->size(), source->base.c_str(), output_dir.c_str(), used_threads);
  }

  std::vector<ShardOutcome> outcomes;
  int failed = 0;
  for (int n : *files) {
    std::vector<std::string> prefixes;
    for (const std::string& key : c.pipeline.jsonl.json_keys) {
      prefixes.push_back(ShardOutputPrefix(output_dir, output_prefix, n, key));
    }
    outcomes.push_back(RunOne(ShardFileName(n), ShardInput(*source, n), InputFormat::kZstd,
                              prefixes, **tokenizer, c));
    if (outcomes.back().status != "done") ++failed;
  }
  std::fprintf(stderr, "\n%s", SummaryTable(outcomes, used_threads).c_str());
  if (failed > 0) {
    std::fprintf(stderr, "pileprep: %d of %zu shard(s) FAILED (see the errors above); nothing was "
                         "published for them. Fix the cause and rerun.\n",
                 failed, outcomes.size());
    return kExitFailed;
  }
  return kExitOk;
}

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
  if (auto s = args.Parse(argc, argv, first); !s.ok()) {
    PrintError(std::string(s.message()));
    return kExitUsage;
  }
  if (args.Has("help")) {
    std::printf(
        "Usage: pileprep preprocess --input FILE --output-prefix P [--json-keys text] "
        "[--append-eod] [--workers N]\n\n"
        "A drop-in for Megatron's tools/preprocess_data.py (GPT-2, no sentence splitting): writes\n"
        "P_KEY_document.{bin,idx} byte-identical to Megatron's for the same input.\n\n"
        "Flags:\n%s\n%s",
        args.Help().c_str(), ExitCodeHelp().c_str());
    return kExitOk;
  }
  Common c;
  if (auto s = ReadCommon(args, &c); !s.ok()) {
    PrintError(std::string(s.message()));
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
  long long threads = 0;
  const char* threads_flag = args.Has("workers") ? "workers" : "threads";
  if (auto s = args.GetInt(threads_flag, 1, 4096, &threads); !s.ok()) {
    PrintError(std::string(s.message()));
    return kExitUsage;
  }
  c.pipeline.threads = static_cast<int>(threads);
  c.pipeline.append_eod = args.Has("append-eod");
  if (args.Has("json-keys")) c.pipeline.jsonl.json_keys = args.GetAll("json-keys");
  const std::string dir = std::filesystem::path(prefix).parent_path().string();
  if (!dir.empty()) {
    if (auto s = EnsureDirectory(dir); !s.ok()) {
      PrintError(std::string(s.message()));
      return kExitUsage;
    }
  }
  auto tokenizer = LoadTokenizer(c);
  if (!tokenizer.ok()) {
    PrintError(std::string(tokenizer.status().message()));
    return kExitUsage;
  }
  std::vector<std::string> prefixes;
  for (const std::string& key : c.pipeline.jsonl.json_keys) {
    prefixes.push_back(absl::StrCat(prefix, "_", key, "_document"));
  }
  const int used_threads =
      c.pipeline.threads > 0 ? c.pipeline.threads : tbb::info::default_concurrency();
  ShardOutcome outcome = RunOne(std::filesystem::path(input).filename().string(), input,
                                InputFormatForPath(input), prefixes, **tokenizer, c);
  if (!c.console.quiet) std::fprintf(stderr, "\n%s", SummaryTable({outcome}, used_threads).c_str());
  return outcome.status == "done" ? kExitOk : kExitFailed;
}

int Main(int argc, char** argv) {
  if (argc >= 2) {
    const std::string cmd = argv[1];
    if (cmd == "--version" || cmd == "version") {
      std::printf("pileprep %s\n", PILEPREP_VERSION);
      return kExitOk;
    }
    if (cmd == "preprocess") return RunPreprocess(argc, argv, 2);
    if (cmd == "help") {
      if (argc >= 3 && std::string(argv[2]) == "preprocess") {
        char* help_argv[] = {argv[0], argv[2], const_cast<char*>("--help")};
        return RunPreprocess(3, help_argv, 2);
      }
      char* help_argv[] = {argv[0], const_cast<char*>("--help")};
      return RunShardJob(2, help_argv, 1);
    }
  }
  return RunShardJob(argc, argv, 1);
}

}  // namespace
}  // namespace pileprep::cli

int main(int argc, char** argv) { return pileprep::cli::Main(argc, argv); }
