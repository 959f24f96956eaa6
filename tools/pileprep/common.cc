// Shared pieces of the CLI commands.
#include "common.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "format/file_util.h"
#include "oneapi/tbb/info.h"
#include "pileprep/gpt2_tokenizer.h"
#include "pileprep/indexed_dataset.h"
#include "pileprep/pipeline.h"
#include "pileprep/shard_plan.h"
#include "signals.h"

namespace pileprep::cli {

namespace {
std::vector<Command>& Registry() {
  static std::vector<Command>* commands = new std::vector<Command>();
  return *commands;
}
}  // namespace

std::vector<std::string> DatasetTemporaries(const std::string& prefix) {
  std::vector<std::string> paths;
  for (const char* ext : {".bin", ".idx", ".lengths", ".docidx"}) {
    paths.push_back(absl::StrCat(prefix, ext, kIndexedDatasetTempSuffix));
  }
  return paths;
}

void RemoveStaleFiles(const std::vector<std::string>& paths, bool quiet) {
  for (const std::string& path : paths) {
    if (::unlink(path.c_str()) == 0 && !quiet) {
      std::fprintf(stderr, "removed a stale temporary file of an interrupted run: %s\n",
                   path.c_str());
    }
  }
}

std::string DatasetLockPath(const std::string& prefix) { return prefix + ".pileprep-lock"; }

bool LockOutputs(const std::vector<std::string>& lock_paths, const std::string& outputs_name,
                 const std::vector<std::string>& stale, bool quiet, PathLocks* locks) {
  std::string held_path, held_by, unsupported, error;
  std::vector<std::string> sorted = lock_paths;
  std::sort(sorted.begin(), sorted.end());
  if (!locks->TryAcquireAll(sorted, &held_path, &held_by, &unsupported, &error)) {
    if (!error.empty()) {
      PrintError(absl::StrCat(outputs_name, ": cannot open its lock file (", error,
                              "); nothing was written"));
      return false;
    }
    PrintError(absl::StrCat(outputs_name, ": another pileprep process is writing it (", held_by,
                            ", lock ", held_path, "); rerun once it has stopped"));
    return false;
  }
  if (!unsupported.empty() && !quiet) {
    std::fprintf(stderr,
                 "pileprep: running without a lock (%s): make sure no other run writes %s at the "
                 "same time\n",
                 unsupported.c_str(), outputs_name.c_str());
  }
  RemoveStaleFiles(stale, quiet);
  return true;
}

CommandRegistration::CommandRegistration(const char* name, const char* summary, CommandFn fn) {
  Registry().push_back({name, summary, fn});
}
const std::vector<Command>& Commands() { return Registry(); }


void PrintError(const std::string& message) {
  std::fprintf(stderr, "pileprep: error: %s\n", message.c_str());
}

std::optional<int> ParseOrHelp(Args& args, int argc, char** argv, int first,
                               const std::string& intro, const std::string& exit_status) {
  if (auto s = args.Parse(argc, argv, first); !s.ok()) {
    PrintError(std::string(s.message()));
    return kExitUsage;
  }
  if (args.Has("help")) {
    std::printf("%sFlags:\n%s\n%s", intro.c_str(), args.Help().c_str(), exit_status.c_str());
    return kExitOk;
  }
  return std::nullopt;
}

std::string ExitCodeHelp(ExitHelpFor command) {
  const bool shard_job = command == ExitHelpFor::kShardJob;
  return absl::StrCat(
      "Exit status:\n"
      "  0  every input was processed and its outputs published\n"
      "  1  one or more inputs failed (each is named above the summary); the others completed",
      shard_job ? ";\n     or the summary JSON could not be written\n"
                : ";\n     or another pileprep process is writing the output (its lock)\n",
      "  2  usage or set-up error (bad flag, vocabulary not found, output directory unusable",
      shard_job
          ? ";\n     a --keep-downloads directory unusable; a local --url that is no directory;\n"
            "     a --ca-file that cannot be read; outputs there whose records say other\n"
            "     settings made them, unless --remake-other-settings or --force)\n"
          : ")\n",
      "  129, 130, 143  stopped by SIGHUP / SIGINT / SIGTERM: the input in progress was\n"
      "     abandoned (its temporary files removed, nothing published), later inputs not\n"
      "     started; completed outputs stay. A second signal stops at once; the next run\n"
      "     removes what is left.\n");
}

void AddCommonFlags(Args& args) {
  const PipelineOptions defaults;
  args.Add("vocab-file", Args::Kind::kValue, "FILE",
           "GPT-2 encoder.json / vocab.json, given with --merge-file (default: "
           "$PILEPREP_TOKENIZER_DIR/encoder.json when that is set and not empty, else the copy "
           "shipped in tokenizers/gpt2)");
  args.Add(
      "merge-file", Args::Kind::kValue, "FILE",
      "GPT-2 vocab.bpe / merges.txt, given with --vocab-file (default: "
      "$PILEPREP_TOKENIZER_DIR/vocab.bpe when that is set and not empty, else the copy shipped in "
      "tokenizers/gpt2)");
  args.Add("endoftext-as-text", Args::Kind::kSwitch, "",
           "tokenize a literal <|endoftext|> in text as ordinary text, as legacy Megatron-LM's "
           "preprocess_data.py and tiktoken's encode_ordinary do, instead of the single id 50256, "
           "as NeMo's data preparation and current Megatron-LM (Hugging Face's GPT-2 tokenizer) "
           "do");
  args.Add("max-bad-records", Args::Kind::kValue, "N",
           "fail an input with more than N bad records (blank lines, invalid JSON, a line not "
           "an object, a key missing or not a string); -1 for no limit",
           absl::StrCat(defaults.jsonl.max_bad_records));
  args.Add("zstd-window-log-max", Args::Kind::kValue, "N",
           "largest zstd window accepted, as a power of two (10-31); memory per input grows with it",
           absl::StrCat(defaults.zstd.window_log_max));
  args.Add("batch-bytes", Args::Kind::kValue, "N",
           "decompressed bytes per unit of parallel work", absl::StrCat(defaults.batch_bytes), true);
  args.Add("mmap-input", Args::Kind::kSwitch, "",
           "parse plain .jsonl where it lies in a mapping of the file instead of read(2)-ing it: "
           "saves a copy where page faults are cheap (bare metal); slower under some hypervisors",
           "", true);
  args.Add("progress-interval", Args::Kind::kValue, "SECONDS",
           "seconds between progress lines when stderr is not a terminal, or when several "
           "shards run at once (the shard job's --shards-at-once)",
           absl::StrCat(ConsoleOptions{}.log_interval_s));
  args.Add("quiet", Args::Kind::kSwitch, "",
           "print only errors, skipped bad records, U+FFFD replacements and the summary (-q)");
  args.Add("verbose", Args::Kind::kSwitch, "",
           "list the kept bad records, the first 100 with their lines (-v)");
  args.Add("help", Args::Kind::kSwitch, "", "show this help (-h)");
}

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
  v = static_cast<long long>(c->console.log_interval_s);  // ConsoleOptions' default
  if (auto s = args.GetInt("progress-interval", 1, 86400, &v); !s.ok()) return s;
  c->console.log_interval_s = static_cast<double>(v);
  c->console.quiet = args.Has("quiet");
  c->console.tty = isatty(STDERR_FILENO) != 0;
  c->verbose = args.Has("verbose");
  c->file_source.map = args.Has("mmap-input");
  c->tokenizer.endoftext_is_special = !args.Has("endoftext-as-text");
  // Given empty (`--vocab-file=$VOCAB` with VOCAB unset), a path must not quietly mean the
  // shipped GPT-2 files: another vocabulary was meant.
  for (const char* flag : {"vocab-file", "merge-file"}) {
    if (args.Has(flag) && args.Get(flag).empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, " is empty: name the file (leave both flags out for GPT-2's shipped files)"));
    }
  }
  c->vocab_file = args.Get("vocab-file");
  c->merge_file = args.Get("merge-file");
  // Every command that takes these flags runs the pipeline: SIGINT/SIGTERM cancel it cleanly.
  InstallCancelHandlers();
  c->pipeline.cancel = &CancelFlag();
  c->file_source.cancel = &CancelFlag();  // a stalled pipe as input, too
  if (c->vocab_file.empty() != c->merge_file.empty()) {
    return absl::InvalidArgumentError("--vocab-file and --merge-file go together: give both");
  }
  return absl::OkStatus();
}

// Megatron's GPT2Tokenizer (as GPT-2's encoder.py) reads merges as read().split('\n')[1:-1]: it
// drops the first line whatever it is, and whatever follows the last newline. pileprep (as
// Hugging Face tokenizers and tiktoken) skips only a "#version" first line and keeps a last line
// without a newline: with a file lacking either, the two tokenize differently. Said, not refused
// (the file is the user's choice); a pipe is not read twice to look.
void WarnOfMergesMegatronReadsOtherwise(const std::string& path) {
  // A pipe is refused here (kRegularFileOnly), not read: the tokenizer has read it already.
  absl::StatusOr<std::string> merges = internal::ReadFileToString(path, internal::kRegularFileOnly);
  if (!merges.ok() || merges->empty()) return;
  std::vector<std::string> lost;
  // A byte-order mark before "#version" is dropped with the line by Megatron, and by pileprep.
  const size_t bom = merges->rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;
  // An empty first line is dropped by both (pileprep skips empty lines): no difference.
  if (merges->rfind("#version", bom) != bom && merges->front() != '\n' &&
      merges->rfind("\r\n", 0) != 0) {
    lost.push_back(
        absl::StrCat("its first line (\"", merges->substr(0, merges->find('\n')),
                     "\"), which is no \"#version\" header and is read as a merge here"));
  }
  if (merges->back() != '\n') {
    lost.push_back(absl::StrCat("its last line (\"", merges->substr(merges->rfind('\n') + 1),
                                "\"), which has no newline after it"));
  }
  if (lost.empty()) return;
  std::fprintf(stderr,
               "pileprep: warning: %s: Megatron's reader (and GPT-2's encoder.py) would drop %s; "
               "pileprep keeps it, as Hugging Face tokenizers and tiktoken do, so the ids can "
               "differ from Megatron's. Give the file a \"#version: 0.2\" first line and a "
               "final newline to make them agree\n",
               path.c_str(), absl::StrJoin(lost, ", and ").c_str());
}

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> LoadTokenizer(const Common& c) {
  // The files loaded, given or found (PILEPREP_TOKENIZER_DIR may name others than the shipped
  // ones): the warnings below are about them.
  std::string vocab_file = c.vocab_file, merge_file = c.merge_file;
  if (vocab_file.empty()) {
    absl::StatusOr<std::pair<std::string, std::string>> found = Gpt2Tokenizer::DefaultFiles();
    if (!found.ok()) return found.status();
    std::tie(vocab_file, merge_file) = *found;
  }
  auto tokenizer = Gpt2Tokenizer::FromFiles(vocab_file, merge_file, c.tokenizer);
  if (tokenizer.ok() && (*tokenizer)->id_limit() != (*tokenizer)->vocab_size()) {
    // Written as Megatron writes them, but a training job sizes its embedding by the entry count
    // (Megatron's vocab_size is len(encoder)): ids past it fail there, and `pileprep validate`
    // flags them unless --vocab-size says otherwise.
    std::fprintf(stderr,
                 "pileprep: warning: %s leaves ids out: %zu entries, ids up to %zu. Megatron "
                 "sizes its embedding by the entry count, so ids of %zu or more would fail "
                 "there (validate them with --vocab-size %zu)\n",
                 vocab_file.c_str(), (*tokenizer)->vocab_size(), (*tokenizer)->id_limit() - 1,
                 (*tokenizer)->vocab_size(), (*tokenizer)->id_limit());
  }
  if (tokenizer.ok()) WarnOfMergesMegatronReadsOtherwise(merge_file);
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> LoadTokenizerMakingCaches(
    const Common& c, int count, std::vector<std::unique_ptr<Gpt2Tokenizer::Cache>>* caches) {
  // No more than the cores: the pipeline's arena runs at most that many workers at once, and
  // makes a cache only for a slot that works, so --workers far above the cores must not make
  // (and fault in) a cache for each.
  count = std::min(count, tbb::info::default_concurrency());
  caches->resize(static_cast<size_t>(std::max(count, 0)));
  std::vector<std::thread> makers;
  makers.reserve(caches->size());
  for (std::unique_ptr<Gpt2Tokenizer::Cache>& cache : *caches) {
    try {
      makers.emplace_back([&cache, &options = c.tokenizer] {
        try {
          cache = std::make_unique<Gpt2Tokenizer::Cache>(options);
        } catch (const std::bad_alloc&) {
        }
      });
    } catch (const std::exception&) {
      break;  // no thread: the rest are made by the pipeline
    }
  }
  auto tokenizer = LoadTokenizer(c);
  for (std::thread& maker : makers) maker.join();
  return tokenizer;
}

std::string StripPairSuffix(const std::string& arg) {
  for (const char* ext : {".idx", ".bin"}) {
    if (arg.size() > 4 && arg.compare(arg.size() - 4, 4, ext) == 0) {
      // A Megatron prefix may itself end in .bin or .idx (`corpus.bin` for corpus.bin.idx and
      // corpus.bin.bin): it is taken as that prefix only where no file has the name itself and
      // the shorter prefix has no .idx (`x.bin` with x.idx there names the pair x, whose missing
      // .bin is then the error, even beside an x.bin.idx).
      const std::string shorter = arg.substr(0, arg.size() - 4);
      struct stat st;
      if (::stat(arg.c_str(), &st) != 0 && ::stat((shorter + ".idx").c_str(), &st) != 0 &&
          ::stat((arg + ".idx").c_str(), &st) == 0) {
        return arg;
      }
      return shorter;
    }
  }
  return arg;
}

std::string DirectoryOf(const std::string& prefix) {
  const std::filesystem::path dir = std::filesystem::path(prefix).parent_path();
  return dir.empty() ? std::string(".") : dir.string();
}

namespace {

// A publish syncs the output directory, which opens it for reading: a directory this process may
// write but not read (mode 0733) failed every output at its publish, after all the work. `path`
// is checked, `dir` named (as `flag` gave it).
absl::Status CheckReadable(const std::string& path, const std::string& dir,
                           absl::string_view flag) {
  if (::access(path.c_str(), R_OK) == 0) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      flag, " ", dir, ": not readable (outputs are made durable by syncing their directory): ",
      std::strerror(errno)));
}

}  // namespace

absl::Status CheckDirectoryCouldBeMade(const std::string& dir, absl::string_view flag) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(dir, ec).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  const bool exists = std::filesystem::exists(p, ec);
  while (!ec && p.has_relative_path() && !std::filesystem::exists(p, ec)) p = p.parent_path();
  if (!std::filesystem::is_directory(p, ec)) {
    // Something other than a directory is there: named as such ("cannot create: File exists" read
    // as if a directory were in the way).
    return absl::PermissionDeniedError(
        exists ? absl::StrCat(flag, " ", dir, ": not a directory (a file of that name is there)")
               : absl::StrCat(flag, " ", dir, ": cannot create: ", std::strerror(ENOTDIR)));
  }
  if (::access(p.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        flag, " ", dir, exists ? ": not writable: " : ": cannot create: ", std::strerror(errno)));
  }
  if (exists) return CheckReadable(p.string(), dir, flag);
  return absl::OkStatus();
}

absl::Status EnsureDirectory(const std::string& dir, absl::string_view flag) {
  std::error_code ec;
  // The parents whose entries creating `dir` adds: made durable below, before any output is
  // published in it (a publish fsyncs only the directory it renames in).
  std::vector<std::filesystem::path> parents;
  std::filesystem::path p = std::filesystem::absolute(dir, ec).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "a/b/" -> "a/b"
  while (!ec && p.has_relative_path() && !std::filesystem::exists(p, ec)) {
    parents.push_back(p.parent_path());
    p = p.parent_path();
  }
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat(flag, " ", dir, ": cannot create: ", ec.message()));
  }
  for (const std::filesystem::path& parent : parents) {
    // Best effort: a parent this process may enter but not read (mode 0711) cannot be opened to
    // sync, which is no reason to refuse the run.
    internal::SyncDirectory(parent.string()).IgnoreError();
  }
  // Search permission too: files cannot be made in a directory that cannot be entered (mode
  // 0766), which failed later, at the first lock or temporary, as a failed input (exit 1).
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(flag, " ", dir, ": not writable: ", std::strerror(errno)));
  }
  return CheckReadable(dir, dir, flag);
}

std::vector<std::string> UniqueKeys(const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  for (const std::string& k : keys) {
    if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  }
  return out;
}

ShardOutcome RunOne(const std::string& display_name, const std::string& input, ByteSource& source,
                    InputFormat format, const std::vector<std::string>& prefixes,
                    const Gpt2Tokenizer& tokenizer, const Common& c) {
  ShardOutcome outcome;
  outcome.name = display_name;
  ConsoleProgress progress(c.console, display_name);
  absl::Status status =
      RunPipeline(source, format, tokenizer, prefixes, c.pipeline, &outcome.stats, &progress);
  progress.Finish();
  ReportOutcome(display_name, input, std::move(status), prefixes, c, &outcome);
  return outcome;
}

void ReportOutcome(const std::string& display_name, const std::string& input, absl::Status status,
                   const std::vector<std::string>& prefixes, const Common& c,
                   ShardOutcome* outcome_ptr) {
  ShardOutcome& outcome = *outcome_ptr;
  if (status.ok() && !outcome.stats.published) {
    std::string why;
    const ShardStats& st = outcome.stats;
    if (st.documents == 0 && st.bad_records > 0) {
      why = "; every record was bad (below)";
      // Lines end at LF only, as in json.loads of Megatron's lines: a file of CR-only line ends
      // (old Mac) is one line, whose second record is "extra data".
      if (st.bad_records == 1 && !st.bad_record_samples.empty() &&
          absl::StrContains(st.bad_record_samples.front().detail, "extra data")) {
        why += " (if its lines end in CR alone: lines end at LF, so the file is one line)";
      }
    }
    status = absl::FailedPreconditionError(
        absl::StrCat(input, ": no tokens in any document", why,
                     "; nothing published (no reader can open an empty dataset)"));
  }
  const ShardStats& s = outcome.stats;
  if (absl::IsCancelled(status)) {
    outcome.status = "cancelled";
    outcome.error = absl::StrCat(status.message(), " by a signal; nothing published for it");
    PrintError(outcome.error);
  } else if (!status.ok()) {
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
    // "skipped" only when the input was made: a failed one skipped nothing, its records were
    // found bad and nothing was made of them (not "before it stopped": a run that read the whole
    // input and then failed, on no tokens at all, did not stop early).
    std::fprintf(stderr, "%s: %llu %s %s:\n", display_name.c_str(),
                 static_cast<unsigned long long>(s.bad_records),
                 s.bad_records == 1 ? "bad record" : "bad records",
                 outcome.status == "done" ? "skipped" : "found; nothing was published");
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
}

}  // namespace pileprep::cli
