// The shard job: `pileprep --url SRC --files 0-29 --output-dir DIR [--nodes N --rank R]`.
//
// Per process: resolve the rank (flags, then the launcher's environment), take the launcher's
// contiguous block of the file list, remove stale temporaries of those shards, skip shards whose
// outputs already validate (unless --force; refusing the run when their records say other settings
// made them: shard_record.h), and stream the rest from a directory or over HTTP(S)
// (with one shard at a time, the next shard's download starts while the current one is processed;
// its queue bounds the memory).
// A download that must start over (the file changed, the server ignores Range) reruns the shard
// from byte 0; the pipeline's writers publish nothing from the aborted run. With --shards-at-once K
// > 1, K runners each take the next shard not yet started (no prefetch: K downloads run at once).
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common.h"
#include "fetch/url.h"
#include "format/file_util.h"
#include "oneapi/tbb/info.h"
#include "path_lock.h"
#include "pileprep/fetch.h"
#include "pileprep/gpt2_tokenizer.h"
#include "pileprep/indexed_dataset.h"
#include "pileprep/pipeline.h"
#include "pileprep/shard_plan.h"
#include "pileprep/validate.h"
#include "pileprep/zstd_stream.h"
#include "pipeline/thread_arena.h"
#include "shard_record.h"
#include "signals.h"

namespace pileprep::cli {
namespace {
constexpr char kDefaultUrl[] =
    "https://huggingface.co/datasets/monology/pile-uncopyrighted/resolve/main/train/";
constexpr int kMaxRestarts = 3;  // whole-shard restarts of a download before the shard fails
constexpr char kDefaultOutputPrefix[] = "my-gpt3";

struct JobConfig {
  ShardSource source;
  std::string output_dir, output_prefix, keep_downloads;
  FetchOptions fetch;
  bool force = false;
  bool remake_other_settings = false;
};

// The summary's file name in the output directory: one per rank (or array task), and per
// --output-prefix other than the default, so that two jobs sharing a directory with their own
// prefixes (a training and a validation set) do not overwrite each other's verdicts.
std::string SummaryFileName(const JobConfig& job, int rank) {
  return job.output_prefix == kDefaultOutputPrefix
             ? absl::StrCat("pileprep-summary-rank", rank, ".json")
             : absl::StrCat("pileprep-summary-", job.output_prefix, "-rank", rank, ".json");
}

std::vector<std::string> PrefixesFor(const JobConfig& job, const Common& c, int n) {
  std::vector<std::string> prefixes;
  for (const std::string& key : c.pipeline.jsonl.json_keys) {
    prefixes.push_back(ShardOutputPrefix(job.output_dir, job.output_prefix, n, key));
  }
  return prefixes;
}

std::string CachePath(const JobConfig& job, int n) {
  if (job.keep_downloads.empty()) return "";
  return (std::filesystem::path(job.keep_downloads) / ShardFileName(n)).string();
}

// Two jobs with their own outputs may keep into one --keep-downloads directory (or a straggler and
// its requeue): the shard lock does not cover the kept file, so it has a lock of its own. The one
// that finds it held only streams the shard.
std::string KeptDownloadLockPath(const std::string& cache) { return cache + ".pileprep-lock"; }

// A kept download's source, beside it (`DIR/NN.jsonl.zst.pileprep-source`): the URL without
// credentials or query (a signed URL's query changes from run to run; its path does not). Kept
// files are named by shard number alone, so without it a run with another --url (--force, after a
// change of source) would read the shards an earlier source left there.
std::string KeptSourcePath(const std::string& cache) { return cache + ".pileprep-source"; }
std::string KeptSourceStamp(const std::string& url) { return RedactUrl(url) + "\n"; }

// One process at a time per shard. Two runs on the same output directory (a requeued job whose old
// allocation still runs, two launchers' rank variables both set, a rerun started by hand) would
// otherwise delete and truncate each other's temporaries, and one could rename the other's half
// .bin beside its own .idx. Each shard of this run is locked (PathLock on this path) before its
// temporaries are touched, and held until the run is done with it; a shard another process holds
// is reported FAILED, untouched. A file system without flock runs unlocked, saying so.
std::string ShardLockPath(const JobConfig& job, int n) {
  return (std::filesystem::path(job.output_dir) /
          absl::StrFormat("%s_%02d.pileprep-lock", job.output_prefix, n))
      .string();
}

// The locks a run holds while it works on shard n: the shard's, then each of its datasets' (the
// lock merge and preprocess take for the same names), sorted as they sort theirs (LockOutputs).
std::vector<std::string> ShardLockPaths(const JobConfig& job, const Common& c, int n) {
  std::vector<std::string> paths = {ShardLockPath(job, n)};
  for (const std::string& p : PrefixesFor(job, c, n)) paths.push_back(DatasetLockPath(p));
  std::sort(paths.begin() + 1, paths.end());
  return paths;
}

// Temporaries a killed run may have left for shard n: they are never valid input to anything.
void RemoveStaleTemporaries(const JobConfig& job, const Common& c, int n) {
  std::vector<std::string> paths;
  for (const std::string& p : PrefixesFor(job, c, n)) {
    for (std::string& t : DatasetTemporaries(p)) paths.push_back(std::move(t));
    paths.push_back(RecordPath(p) + kIndexedDatasetTempSuffix);
    paths.push_back(PendingRecordPath(p) + kIndexedDatasetTempSuffix);
  }
  RemoveStaleFiles(paths, c.console.quiet);
  // The kept download's temporary, under its own lock (KeptDownloadLockPath): one that another
  // job is writing is left alone.
  if (!job.keep_downloads.empty()) {
    std::string held_by, unsupported, error;
    const std::unique_ptr<PathLock> lock = PathLock::TryAcquire(
        KeptDownloadLockPath(CachePath(job, n)), &held_by, &unsupported, &error);
    if (lock != nullptr || (held_by.empty() && error.empty())) {
      RemoveStaleFiles({CachePath(job, n) + kIndexedDatasetTempSuffix,
                        KeptSourcePath(CachePath(job, n)) + kIndexedDatasetTempSuffix},
                       c.console.quiet);
    }
  }
}

// This run's settings for the dataset of shard n and key `json_key`, as a record (ShardRecord);
// source and sizes not filled in.
ShardRecord RecordOfThisRun(const Common& c, const Gpt2Tokenizer& tokenizer, int n,
                            const std::string& json_key) {
  ShardRecord r;
  r.pileprep_version = PILEPREP_VERSION;
  r.shard = ShardFileName(n);
  r.json_key = json_key;
  r.json_keys = c.pipeline.jsonl.json_keys;
  r.vocabulary_fingerprint = tokenizer.fingerprint();
  r.vocab_size = tokenizer.vocab_size();
  r.eod_id = tokenizer.eod_id();
  r.endoftext_as_text = !tokenizer.options().endoftext_is_special;
  r.append_eod = c.pipeline.append_eod;
  return r;
}

// Whether every .bin and .idx of shard n is there (unchecked). The error_code forms: one that
// cannot be checked (EACCES, EIO) is made again, and that run names the error, rather than a
// filesystem_error thrown out of the job.
bool HasOutputs(const JobConfig& job, const Common& c, int n) {
  for (const std::string& p : PrefixesFor(job, c, n)) {
    std::error_code ec_bin, ec_idx;
    if (!std::filesystem::exists(p + ".bin", ec_bin) ||
        !std::filesystem::exists(p + ".idx", ec_idx)) {
      return false;
    }
  }
  return true;
}

// What the records of shard n's datasets (one per key, in PrefixesFor's order) say of them, given
// what its pending records say (ReadPendingStates).
std::vector<RecordCheck> CheckRecords(const JobConfig& job, const Common& c,
                                      const Gpt2Tokenizer& tokenizer, int n,
                                      const absl::StatusOr<PendingStates>& pending) {
  std::vector<RecordCheck> checks;
  const std::vector<std::string> prefixes = PrefixesFor(job, c, n);
  // A shard with a key's dataset missing is made again whole, every key with this run's key set:
  // the set its other datasets were made beside then decides nothing kept (a key added to a
  // finished job is no reason to refuse it).
  const bool made_again_whole = !HasOutputs(job, c, n);
  // A pending record that names the files in place is theirs, unless the shard is torn (its
  // renamed keys are withdrawn at its start) or a pending record cannot be read.
  for (size_t k = 0; k < prefixes.size(); ++k) {
    const bool theirs =
        pending.ok() && !pending->torn && pending->state[k] == PendingStates::kNamesFiles;
    ShardRecord now = RecordOfThisRun(c, tokenizer, n, c.pipeline.jsonl.json_keys[k]);
    if (made_again_whole) now.json_keys.clear();  // not compared
    checks.push_back(CheckRecord(prefixes[k], now, theirs));
  }
  return checks;
}
std::vector<RecordCheck> CheckRecords(const JobConfig& job, const Common& c,
                                      const Gpt2Tokenizer& tokenizer, int n) {
  return CheckRecords(job, c, tokenizer, n, ReadPendingStates(PrefixesFor(job, c, n)));
}

// The key of the first of a shard's records that is there but cannot be read, or -1: what made
// its outputs is then not known, and the run (and the dry run's plan) leaves the shard alone.
int RecordThatCannotBeRead(const std::vector<RecordCheck>& checks) {
  for (size_t k = 0; k < checks.size(); ++k) {
    if (checks[k].verdict == RecordCheck::kCannotRead) return static_cast<int>(k);
  }
  return -1;
}

// "PREFIX.{bin,idx}: made with other settings (...)".
std::string OtherSettingsLine(const std::string& prefix, const RecordCheck& check) {
  return absl::StrCat(prefix, ".{bin,idx}: ", check.why);
}

// Each of this run's datasets (every shard of --files, not only this rank's, and every key) whose
// record says other settings made it, as OtherSettingsLine. Before any work: ranks that share the
// directory all see the same records, so they all refuse alike, and a Slurm array task refuses
// for the others' shards as well as its own. Only records and file sizes are read.
std::vector<std::string> DatasetsMadeWithOtherSettings(const JobConfig& job, const Common& c,
                                                       const Gpt2Tokenizer& tokenizer,
                                                       const std::vector<int>& files) {
  std::vector<std::string> found;
  for (int n : files) {
    const std::vector<std::string> prefixes = PrefixesFor(job, c, n);
    const std::vector<RecordCheck> checks = CheckRecords(job, c, tokenizer, n);
    for (size_t k = 0; k < prefixes.size(); ++k) {
      if (checks[k].verdict == RecordCheck::kOtherSettings) {
        found.push_back(OtherSettingsLine(prefixes[k], checks[k]));
      }
    }
  }
  return found;
}

// Gpt2Tokenizer::fingerprint() of GPT-2's own vocabulary and merges (tokenizers/gpt2/), which
// never writes id 0 twice in a row within a document ("!" repeated merges into "!!", "!!!!"..., and
// a run of "!" is one pre-token; EOD is 50256). Another vocabulary may: one whose id 0 has no merge
// with itself, or is <|endoftext|> (GPT-NeoX's), writes runs of zeros that validate's zero_fill
// check (made for copies filled with zeros) would take for damage, and its shards would be made
// again on every run. nodes_resume_test checks that a GPT-2 output filled with zeros is still
// caught (this value right) and that another vocabulary's runs of zeros are not.
constexpr uint64_t kGpt2Fingerprint = 0x545cbcbf8f1c2374;

// True when every output of shard n exists and validates; fills the outcome's counts from them.
bool AlreadyComplete(const JobConfig& job, const Common& c, const Gpt2Tokenizer& tokenizer, int n,
                     ShardOutcome* outcome) {
  ValidateOptions v;
  // Every id this tokenizer can give, not the entry count: a vocabulary with holes in its ids
  // would otherwise find its own outputs invalid and make them again on every run.
  v.vocab_size = tokenizer.id_limit();
  v.expect_eod = c.pipeline.append_eod;
  v.eod_id = tokenizer.eod_id();
  v.check_tokens = true;
  v.check_zero_fill = tokenizer.fingerprint() == kGpt2Fingerprint;
  v.threads = c.pipeline.threads;
  v.cancel = &CancelFlag();  // a signal need not wait for a many-GB .bin's token check
  if (!HasOutputs(job, c, n)) return false;
  uint64_t documents = 0, empty_documents = 0, tokens = 0;
  // Into the outcome only when every key validates: a shard whose second key is made again (or
  // fails) must not list the first twice, or as published by a run that published nothing.
  std::vector<std::string> outputs;
  for (const std::string& p : PrefixesFor(job, c, n)) {
    auto report = ValidateDataset(p, v);
    if (!report.ok() && absl::IsCancelled(report.status())) return false;  // the run stops
    if (!report.ok() || !report->ok()) {
      if (!c.console.quiet) {
        std::fprintf(stderr, "%s: existing outputs do not validate (%s); making them again\n",
                     p.c_str(),
                     !report.ok() ? std::string(report.status().message()).c_str()
                                  : report->violations.front().message.c_str());
      }
      return false;
    }
    documents = report->documents;
    // One sequence per document with tokens in a key (no sentence splitting): the rest are that
    // key's empty documents. A run counts a document empty when every key is, at most the fewest
    // of any key's: that (exact with one key).
    const uint64_t empty_here = report->documents - std::min(report->documents, report->sequences);
    empty_documents = outputs.empty() ? empty_here : std::min(empty_documents, empty_here);
    tokens += report->tokens;
    outputs.push_back(p);
  }
  outcome->outputs.insert(outcome->outputs.end(), outputs.begin(), outputs.end());
  outcome->status = "skipped";
  outcome->stats.documents = documents;
  outcome->stats.empty_documents = empty_documents;
  outcome->stats.tokens = tokens;
  outcome->stats.published = true;
  return true;
}

// Writes `data` to `tmp`, then renames it to `path`. Callers hold a lock that covers `tmp`.
absl::Status WriteFileAtomically(const std::string& path, const std::string& data,
                                 const std::string& tmp) {
  // O_NOFOLLOW: a stamp's temporary has a fixed name in a directory jobs of several users may
  // share (--keep-downloads); a symbolic link planted there is not written through.
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return absl::PermissionDeniedError(absl::StrCat(tmp, ": ", std::strerror(errno)));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t w = ::write(fd, data.data() + done, data.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {  // 0: no progress, which a regular file does not make; said, not looped on
      const int err = w < 0 ? errno : EIO;
      ::close(fd);
      ::unlink(tmp.c_str());
      return absl::DataLossError(absl::StrCat(tmp, ": write: ", std::strerror(err)));
    }
    done += static_cast<size_t>(w);
  }
  int err = 0;
  const char* step = "fsync";
  if (::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) {  // closed either way
    err = errno;
    step = "close";
  }
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    step = "rename to its final name";
  }
  if (err != 0) {
    ::unlink(tmp.c_str());
    return absl::DataLossError(absl::StrCat(tmp, ": ", step, ": ", std::strerror(err)));
  }
  if (absl::Status synced = internal::SyncDirectory(internal::DirName(path)); !synced.ok()) {
    return absl::DataLossError(
        absl::StrCat(path, ": written, but its directory was not synced: ", synced.message()));
  }
  return absl::OkStatus();
}

// Whether the kept download `cache` is there and its stamp names `url`'s source.
bool KeptFromSource(const std::string& cache, const std::string& url) {
  std::error_code ec;
  if (!std::filesystem::exists(cache, ec)) return false;
  std::ifstream in(KeptSourcePath(cache), std::ios::binary);
  const std::string stamp((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return stamp == KeptSourceStamp(url);  // none (a copy kept before stamps): not known
}

// An open input: a file, a cached download, or an HTTP download in flight.
struct OpenedSource {
  // A kept download's lock (KeptDownloadLockPath), released only once the download below has
  // stopped (its destructor removes an incomplete temporary): declared first for the destructor,
  // and the move assignment stops the download before it lets the lock go.
  std::unique_ptr<PathLock> cache_lock;
  std::unique_ptr<ByteSource> source;
  HttpSource* http = nullptr;  // source.get() when downloading
  absl::Status status;
  std::string input;           // path or redacted URL, for messages
  bool keeps = false;          // the download is written to --keep-downloads
  // A kept copy read (not downloaded): the file opened, when known (OpenKeptCopy), so that a copy
  // found damaged is removed only if the path still names it.
  std::optional<std::pair<dev_t, ino_t>> kept_file;

  OpenedSource() = default;
  OpenedSource(OpenedSource&&) = default;
  OpenedSource& operator=(OpenedSource&& o) noexcept {
    source.reset();
    cache_lock = std::move(o.cache_lock);
    source = std::move(o.source);
    http = o.http;
    status = std::move(o.status);
    input = std::move(o.input);
    keeps = o.keeps;
    kept_file = o.kept_file;
    return *this;
  }
};

// Opens o->input, a local file (a shard of a local source directory or a kept download).
void OpenLocalFile(const Common& c, OpenedSource* o) {
  auto file = OpenFileSource(o->input, c.file_source);
  if (!file.ok()) {
    o->status = file.status();
  } else {
    o->source = std::move(*file);
  }
}

// The file `path` names now: (device, inode), or nullopt.
std::optional<std::pair<dev_t, ino_t>> FileAt(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return std::make_pair(st.st_dev, st.st_ino);
}

// Opens o->input, a kept download, as OpenLocalFile does, and notes which file was opened: the one
// the path names both before and after the open (unknown if another job replaced it meanwhile).
void OpenKeptCopy(const Common& c, OpenedSource* o) {
  const auto before = FileAt(o->input);
  OpenLocalFile(c, o);
  if (o->status.ok() && before.has_value() && FileAt(o->input) == before) o->kept_file = before;
}

// What became of a kept download whose bytes the decoder found damaged.
enum class DamagedCopy {
  kNone,      // not a kept copy's bytes, or not damaged
  kRemoved,   // removed: the next run downloads the shard again
  kReplaced,  // left: the path names another file than the one read (another job's download)
  kLeft,      // left: another job holds its lock (downloading it again), or it is gone already
};

// Removes the kept copy `cache` found damaged, under its lock (`lock`: the one this run downloaded
// it under, else taken now), and only while the path still names the file read (`read`; a copy this
// run downloaded needs no check: no other job writes it under the lock). Without the lock and the
// check, a job that read a damaged copy could remove a fresh one that a third job had downloaded
// meanwhile (after the first job's lock went), leaving the next run to download it once more.
DamagedCopy RemoveDamagedCopy(const std::string& cache, std::unique_ptr<PathLock> lock,
                              bool downloaded_here,
                              const std::optional<std::pair<dev_t, ino_t>>& read) {
  if (lock == nullptr) {
    std::string held_by, unsupported, error;  // unsupported: no flock here, removed unlocked
    lock = PathLock::TryAcquire(KeptDownloadLockPath(cache), &held_by, &unsupported, &error);
    if (lock == nullptr && (!held_by.empty() || !error.empty())) return DamagedCopy::kLeft;
  }
  if (!downloaded_here && (!read.has_value() || FileAt(cache) != read)) {
    return DamagedCopy::kReplaced;
  }
  return ::unlink(cache.c_str()) == 0 ? DamagedCopy::kRemoved : DamagedCopy::kLeft;
}

OpenedSource OpenShard(const JobConfig& job, const Common& c, int n, FetchObserver* observer) {
  OpenedSource o;
  const std::string input = ShardInput(job.source, n);
  if (job.source.kind == SourceKind::kLocalDirectory) {
    o.input = input;
  } else {
    o.input = RedactUrl(input);
    const std::string cache = CachePath(job, n);
    std::error_code ec;  // never thrown from a runner thread (std::terminate): downloaded again
    if (!cache.empty() && KeptFromSource(cache, input)) {
      o.input = cache;  // a complete earlier download (written by rename once its length matched)
      OpenKeptCopy(c, &o);
      // Gone between the check and the open: another job is replacing a copy kept from another
      // source (it unlinks the copy before it stamps its own): download, as that job does.
      if (!absl::IsNotFound(o.status)) return o;
      o = OpenedSource{};
      o.input = RedactUrl(input);
    }
    {
      FetchOptions f = job.fetch;
      f.cancel = &CancelFlag();
      if (!cache.empty()) {
        std::string held_by, unsupported, error;
        o.cache_lock =
            PathLock::TryAcquire(KeptDownloadLockPath(cache), &held_by, &unsupported, &error);
        // No flock here: kept unlocked. Its lock file not to be opened (out of descriptors):
        // read without keeping, as when another process keeps it.
        o.keeps = o.cache_lock != nullptr || (held_by.empty() && error.empty());
        if (o.cache_lock != nullptr && KeptFromSource(cache, input)) {
          // Another job finished keeping it just now: read that copy.
          o.cache_lock.reset();
          o.keeps = false;
          o.input = cache;
          OpenKeptCopy(c, &o);
          return o;
        }
        if (!o.keeps && !c.console.quiet) {
          std::lock_guard<std::mutex> console(ConsoleMutex());  // not inside another's report
          if (!error.empty()) {
            std::fprintf(stderr,
                         "%s: cannot open the lock of its kept copy (%s); this run reads it "
                         "without keeping a copy\n",
                         ShardFileName(n).c_str(), error.c_str());
          } else {
            std::fprintf(stderr,
                         "%s: another process is keeping it in %s (%s); this run reads it "
                         "without keeping a copy\n",
                         ShardFileName(n).c_str(), job.keep_downloads.c_str(), held_by.c_str());
          }
        }
        if (o.keeps) {
          // A copy kept from another source (or without a stamp) goes before the stamp names
          // this one, so that a stamp never stands beside a file it does not describe, whenever
          // the run is killed; this download's copy replaces it once complete.
          const bool stale = std::filesystem::exists(cache, ec);
          if (stale && !c.console.quiet) {
            std::lock_guard<std::mutex> console(ConsoleMutex());
            std::fprintf(stderr,
                         "%s: the copy kept in %s is not known to come from %s: downloading it "
                         "again\n",
                         ShardFileName(n).c_str(), job.keep_downloads.c_str(), o.input.c_str());
          }
          absl::Status stamped = stale ? internal::RemoveFileIfExists(cache) : absl::OkStatus();
          if (stamped.ok()) {
            stamped = WriteFileAtomically(KeptSourcePath(cache), KeptSourceStamp(input),
                                          KeptSourcePath(cache) + kIndexedDatasetTempSuffix);
          }
          if (!stamped.ok()) {
            // Reading on without keeping loses nothing but the copy.
            o.keeps = false;
            o.cache_lock.reset();
            std::lock_guard<std::mutex> console(ConsoleMutex());
            std::fprintf(stderr, "%s: not keeping a copy (%s)\n", ShardFileName(n).c_str(),
                         std::string(stamped.message()).c_str());
          }
        }
      }
      if (o.keeps) f.cache_path = cache;
      auto http = OpenHttpSource(input, f, observer);
      if (!http.ok()) {
        o.status = http.status();
        return o;
      }
      o.http = http->get();
      o.source = std::move(*http);
      return o;
    }
  }
  OpenLocalFile(c, &o);
  return o;
}

// The temporaries `summary_path`.HOST.PID.pileprep-tmp that runs killed while writing their summary
// left. This host's, while this process holds the summary lock (`locked`) and its PID names no
// process here, are stale. flock may not reach across nodes, and two containers may share a host
// name, so any other only once 10 minutes old: a summary is written in moments. The age is measured
// from the mtime of `lock_path`, which taking the lock has just written (the file system's clock,
// which on NFS may differ from this node's), or from this node's clock where it cannot be read.
std::vector<std::string> StaleSummaryTemporaries(const std::string& summary_path,
                                                 const std::string& lock_path, bool locked) {
  const std::filesystem::path summary(summary_path);
  const std::string head = summary.filename().string() + ".";
  const size_t tail = std::strlen(kIndexedDatasetTempSuffix);
  const std::string host = PathLock::HostName();
  std::error_code now_ec;
  std::filesystem::file_time_type now = std::filesystem::last_write_time(lock_path, now_ec);
  if (now_ec) now = std::filesystem::file_time_type::clock::now();
  const std::filesystem::file_time_type old = now - std::chrono::minutes(10);
  std::vector<std::string> stale;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(summary.parent_path(), ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= head.size() + tail || !absl::StartsWith(name, head) ||
        !absl::EndsWith(name, kIndexedDatasetTempSuffix)) {
      continue;
    }
    const std::string middle = name.substr(head.size(), name.size() - head.size() - tail);
    const size_t dot = middle.rfind('.');  // HOST.PID (a host name may hold dots)
    if (dot == std::string::npos) continue;
    int pid = 0;
    const bool writer_gone = locked && middle.substr(0, dot) == host &&
                             absl::SimpleAtoi(middle.substr(dot + 1), &pid) && pid > 0 &&
                             ::kill(pid, 0) != 0 && errno == ESRCH;
    std::error_code time_ec;
    const std::filesystem::file_time_type mtime =
        std::filesystem::last_write_time(it->path(), time_ec);
    if (writer_gone || (!time_ec && mtime < old)) stale.push_back(it->path().string());
  }
  return stale;
}

// What a run would do with shard n, from the files and records in the output directory (read
// only; the outputs are not validated: that is the run's first step), its lock aside.
std::string PlanStateOfFiles(const JobConfig& job, const Common& c, const Gpt2Tokenizer& tokenizer,
                             int n, bool* refused) {
  const std::vector<std::string> prefixes = PrefixesFor(job, c, n);
  const absl::StatusOr<PendingStates> states = ReadPendingStates(prefixes);
  const std::vector<RecordCheck> checks = CheckRecords(job, c, tokenizer, n, states);
  size_t present = 0, same = 0;
  bool pending = false;
  std::vector<std::string> other;
  for (size_t k = 0; k < prefixes.size(); ++k) {
    std::error_code e1, e2;
    present += std::filesystem::exists(prefixes[k] + ".bin", e1) &&
               std::filesystem::exists(prefixes[k] + ".idx", e2);
    same += checks[k].verdict == RecordCheck::kSameSettings;
    pending |= states.ok() && states->state[k] != PendingStates::kNone;
    if (checks[k].verdict == RecordCheck::kOtherSettings) other.push_back(checks[k].why);
  }
  const std::string resolve =
      pending ? " (an interrupted run's pending record is resolved first)" : "";
  if (!other.empty() && !job.force && !job.remake_other_settings) {
    *refused = true;  // the whole run is, before any shard's pending records are resolved
    return absl::StrCat("REFUSED: ", absl::StrJoin(other, "; "));
  }
  if (!states.ok()) {
    return absl::StrCat("FAILED, left alone: an interrupted run's pending records cannot be read (",
                        states.status().message(), ")");
  }
  if (const int k = RecordThatCannotBeRead(checks); k >= 0 && !job.force) {
    return absl::StrCat("FAILED, left alone: ", checks[k].why);
  }
  if (states->torn) {
    return "made again: an interrupted run published it for some of its keys only";
  }
  if (job.force) return present == 0 ? "made" : "made again (--force)";
  if (!other.empty()) {
    return absl::StrCat("made again (--remake-other-settings): ", absl::StrJoin(other, "; "));
  }
  if (present == 0) return absl::StrCat("made", resolve);
  if (present < prefixes.size()) return absl::StrCat("incomplete: made again", resolve);
  if (same == prefixes.size()) {
    return absl::StrCat("made with these settings: skipped if it validates", resolve);
  }
  return absl::StrCat("present, without a record that describes it: skipped if it validates",
                      resolve);
}

// The same with its lock: the run takes each shard's lock before it touches anything of it (a
// refused run takes none). *left_alone: the shard is certainly held by another process.
std::string ShardPlanState(const JobConfig& job, const Common& c, const Gpt2Tokenizer& tokenizer,
                           int n, bool* refused, bool* left_alone) {
  *left_alone = false;
  const std::string state = PlanStateOfFiles(job, c, tokenizer, n, refused);
  if (absl::StartsWith(state, "REFUSED")) return state;
  std::optional<PathLock::Seen> seen;  // a certain holder before an uncertain one
  std::string seen_path;
  const std::vector<std::string> lock_paths = ShardLockPaths(job, c, n);
  for (const std::string& path : lock_paths) {
    std::optional<PathLock::Seen> s = PathLock::Holder(path);
    if (s && (!seen || (s->certain && !seen->certain))) {
      seen = std::move(s);
      seen_path = path;
    }
  }
  if (!seen) return state;
  if (seen->certain) {
    *left_alone = true;
    return seen_path == lock_paths.front()
               ? absl::StrCat("FAILED, left alone: another pileprep process is making it (",
                              seen->holder, ")")
               : absl::StrCat(
                     "FAILED, left alone: another pileprep process is writing one of its "
                     "datasets (",
                     seen->holder, ", lock ", seen_path, ")");
  }
  return absl::StrCat(state, "; unless ", seen->holder, " still holds its lock (",
                      seen->why_uncertain, "): left alone and FAILED if so");
}

// Returns whether the run would be refused (datasets made with other settings).
bool PrintPlan(const std::vector<int>& files, const RankAssignment& a, const JobConfig& job,
               const Common& c, const Gpt2Tokenizer& tokenizer) {
  std::printf("pileprep plan: %zu file(s) from %s\n", files.size(),
              RedactUrl(job.source.base).c_str());
  std::printf("decided by: %s\n", a.decided_by.c_str());
  auto names = [](const std::vector<int>& v) {
    std::vector<std::string> s;
    for (int n : v) s.push_back(absl::StrFormat("%02d", n));
    return s.empty() ? std::string("(none)") : absl::StrJoin(s, " ");
  };
  if (a.array_task >= 0) {
    std::printf("Slurm array task %d: this process takes file %02d only\n", a.array_task,
                a.array_task);
  } else {
    for (int r = 0; r < a.size;) {
      // A run of ranks without a file (more nodes than files) is one line: --nodes 1000000 printed
      // a million.
      int end = r + 1;
      if (FilesForRank(files, r, a.size).empty() && r != a.rank) {
        while (end < a.size && end != a.rank && FilesForRank(files, end, a.size).empty()) ++end;
      }
      if (end - r > 1) {
        std::printf("  ranks %d..%d of %d: (none)\n", r, end - 1, a.size);
      } else {
        std::printf("  rank %d of %d: %s%s\n", r, a.size,
                    names(FilesForRank(files, r, a.size)).c_str(),
                    r == a.rank ? "   <- this process" : "");
      }
      r = end;
    }
  }
  auto mine = FilesForAssignment(files, a);
  bool refused = false;
  int left_alone = 0, missing_inputs = 0;
  if (mine.ok()) {
    for (int n : *mine) {
      bool held = false;
      std::string state = ShardPlanState(job, c, tokenizer, n, &refused, &held);
      const std::string input = ShardInput(job.source, n);
      // A local input that is not there, or is a directory, fails the shard where it would be
      // made (the plan said "made" of a directory, exit 0, where the run fails it, exit 1).
      std::error_code ec;
      const bool local = job.source.kind == SourceKind::kLocalDirectory;
      const std::filesystem::file_status st =
          local ? std::filesystem::status(input, ec) : std::filesystem::file_status();
      const bool absent = local && !std::filesystem::exists(st);
      if (local && (absent || std::filesystem::is_directory(st))) {
        const std::string missing =
            absl::StrCat(input, absent ? ": no such file" : ": is a directory, not a file");
        if (absl::StartsWith(state, "made") || absl::StartsWith(state, "incomplete")) {
          state = absl::StrCat("FAILED: ", missing);
          ++missing_inputs;
        } else if (!absl::StartsWith(state, "FAILED") && !absl::StartsWith(state, "REFUSED")) {
          absl::StrAppend(&state, "; FAILED if it does not (", missing, ")");
        }
      }
      left_alone +=
          held || (absl::StartsWith(state, "FAILED") && !absl::StartsWith(state, "FAILED: "));
      // A complete kept copy is what the run would read (OpenShard), not the URL: shown, as a
      // stale copy after the files at the URL changed is what a user checks the plan for.
      std::string shown = RedactUrl(input);
      if (const std::string cache = CachePath(job, n);
          job.source.kind != SourceKind::kLocalDirectory && !cache.empty() &&
          KeptFromSource(cache, input)) {
        shown = absl::StrCat(cache, " (kept from ", shown, ": what the run reads, not downloaded)");
      }
      std::printf("  %s -> %s.{bin,idx}: %s\n", shown.c_str(),
                  absl::StrJoin(PrefixesFor(job, c, n), ".{bin,idx}, ").c_str(), state.c_str());
    }
  }
  if (!refused && !job.force && !job.remake_other_settings) {
    // Every rank refuses over any dataset of --files made with other settings, not only its own.
    refused = !DatasetsMadeWithOtherSettings(job, c, tokenizer, files).empty();
  }
  if (refused) {
    std::printf(
        "the run would be refused (exit 2): datasets of --files were made with other settings "
        "(--remake-other-settings makes them again)\n");
  } else {
    if (left_alone > 0) {
      std::printf("the run would leave %d shard(s) alone (FAILED above) and exit 1\n", left_alone);
    }
    if (missing_inputs > 0) {
      std::printf(
          "the run would fail %d shard(s) whose input is missing or a directory (FAILED above) "
          "and exit 1\n",
          missing_inputs);
    }
  }
  if (const std::vector<int> unmade = FilesNoArrayTaskMakes(files, a); !unmade.empty()) {
    std::printf(
        "note: %zu of the --files numbers (the first %02d) are outside this Slurm array's "
        "task ids %d-%d%s: no task of this array makes them\n",
        unmade.size(), unmade.front(), a.array_min, a.array_max,
        a.array_step > 1 ? absl::StrCat(" by steps of ", a.array_step).c_str() : "");
  }
  if (const int missing = ArrayTasksMissingInRange(a); missing > 0) {
    std::printf(
        "note: this Slurm array has %d tasks, %d fewer than the ids %d-%d: the --files "
        "numbers among those no task has are made by no task of this array\n",
        a.array_count, missing, a.array_min, a.array_max);
  }
  std::printf("summary: %s/%s\n", job.output_dir.c_str(),
              SummaryFileName(job, a.array_task >= 0 ? a.array_task : a.rank).c_str());
  return refused;
}

}  // namespace

int RunShardJob(int argc, char** argv, int first) {
  const auto job_start = std::chrono::steady_clock::now();
  const FetchOptions fetch_defaults;
  Args args;
  args.Add("url", Args::Kind::kValue, "SRC",
           "where shards NN.jsonl.zst are: https://, http://, file:// or a local directory (a "
           "URL's ?query, e.g. a SAS token, goes after each file name)",
           kDefaultUrl);
  args.Add("files", Args::Kind::kValue, "LIST", "shard numbers, e.g. 0-29 or 0,3,5-7", "0-29");
  args.Add("output-dir", Args::Kind::kValue, "DIR", "where the .bin/.idx pairs go", ".");
  args.Add("output-prefix", Args::Kind::kValue, "NAME",
           "outputs are DIR/NAME_NN_text_document.{bin,idx} (the NeMo launcher's names)",
           kDefaultOutputPrefix);
  args.Add("json-keys", Args::Kind::kMulti, "KEY", "JSON field(s) holding the text", "text");
  args.Add("threads", Args::Kind::kValue, "N", "worker threads", "all cores");
  args.Add("shards-at-once", Args::Kind::kValue, "K",
           "shards processed at the same time, the threads split between them: one zstd stream "
           "decodes at about 1.2 GB/s, which four to five cores' parsing and tokenizing keep up "
           "with, so a single shard cannot use a large node; with K > 1, K downloads run at once "
           "(no next-shard prefetch)",
           "one per 4 threads; at most the threads and the shards to make");
  args.Add("nodes", Args::Kind::kValue, "N",
           "number of ranks sharing --files (default: from the first family whose size and rank "
           "are both set: NGC_ARRAY_SIZE, WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE (MPICH; "
           "under Slurm only for mpiexec's processes), SLURM_STEP_NUM_TASKS (an srun step), "
           "WORLD_SIZE first under torchrun; with --rank given, the first of them that is set; "
           "else 1)");
  args.Add("rank", Args::Kind::kValue, "R",
           "this process's rank, 0..N-1 (default: that family's rank: NGC_ARRAY_INDEX, RANK, "
           "OMPI_COMM_WORLD_RANK, PMI_RANK (MPICH; under Slurm only for mpiexec's processes), "
           "SLURM_PROCID (an srun step), RANK first under torchrun; with --nodes given, the first "
           "of them that is set; SLURM_ARRAY_TASK_ID alone processes just that file)");
  args.Add(
      "dry-run", Args::Kind::kSwitch, "",
      "print which rank does which shards (and which variables decided it), what it would do "
      "with each (make, skip if valid, make again, refuse, leave alone: from the files, records "
      "and locks there), and exit: 2 if the run would be refused (or for bad flags), else 0");
  args.Add("force", Args::Kind::kSwitch, "",
           "make every shard again, even those whose outputs already validate (after a change "
           "of source; --keep-downloads copies are read again, not fetched: remove them to "
           "download a changed source)");
  args.Add("remake-other-settings", Args::Kind::kSwitch, "",
           "make again the shards whose datasets' records say another vocabulary, merges file, "
           "end-of-text rule or set of --json-keys made them (without it such a run is refused); "
           "keeps those made with this run's settings, so a requeued job with it still resumes. "
           "Each rank then judges its own shards only");
  args.Add("keep-downloads", Args::Kind::kValue, "DIR",
           "also keep the downloaded NN.jsonl.zst in DIR (complete files only); a rerun reads them "
           "instead of downloading. Jobs may share DIR: a shard another job is keeping is read "
           "without keeping a copy");
  args.Add("header", Args::Kind::kMulti, "\"NAME: VALUE\"",
           "extra HTTP request header(s), e.g. \"Authorization: Bearer $HF_TOKEN\" (never printed)");
  args.Add("retries", Args::Kind::kValue, "N",
           "retries in a row, each without one new byte, before a shard fails",
           absl::StrCat(fetch_defaults.max_retries));
  args.Add("retry-wait", Args::Kind::kValue, "SECONDS",
           absl::StrCat("first wait before a retry; doubles each time (with jitter) up to ",
                        fetch_defaults.backoff_max_s, " s (or this wait, if longer)"),
           absl::StrCat(fetch_defaults.backoff_initial_s));
  args.Add("connect-timeout", Args::Kind::kValue, "SECONDS", "TCP + TLS connect timeout",
           absl::StrCat(fetch_defaults.connect_timeout_s));
  args.Add("low-speed-time", Args::Kind::kValue, "SECONDS",
           absl::StrCat("a download below ", fetch_defaults.low_speed_limit,
                        " bytes/s for this long is dropped and resumed (libcurl's speed, an "
                        "average over its last 5 s: one that stops dead after a fast start is "
                        "dropped about 5 s later)"),
           absl::StrCat(fetch_defaults.low_speed_time_s));
  args.Add("download-buffer-mb", Args::Kind::kValue, "MiB",
           "memory between the socket and the pipeline, per download, in MiB (two with prefetch, "
           "K with --shards-at-once K)",
           absl::StrCat(fetch_defaults.queue_bytes >> 20));
  args.Add("ca-file", Args::Kind::kValue, "FILE", "CA bundle for TLS (default: the system's)");
  args.Add("insecure", Args::Kind::kSwitch, "", "do not verify TLS certificates (testing only)",
           "", true);
  AddCommonFlags(args);
  std::string commands;
  for (const Command& cmd : Commands()) {
    absl::StrAppendFormat(&commands, "  pileprep %-11s %s\n", cmd.name, cmd.summary);
  }
  const std::optional<int> done = ParseOrHelp(
      args, argc, argv, first,
      "Usage: pileprep [--url SRC] [--files LIST] [--output-dir DIR] [--nodes N --rank R] [flags]\n"
      "       pileprep COMMAND [flags]\n\n"
      "Prepares GPT pre-training data: each shard SRC/NN.jsonl.zst is streamed (from a directory "
      "or\n"
      "over HTTP(S), with retries and Range resume), decompressed (zstd), parsed (one JSON "
      "document\n"
      "per line), tokenized with GPT-2 BPE and written as a Megatron indexed dataset\n"
      "DIR/NAME_NN_text_document.{bin,idx}, byte-identical to Megatron's tools/preprocess_data.py\n"
      "--append-eod. Outputs appear only when complete; a rerun skips shards whose outputs "
      "validate.\n"
      "Ranks split --files as the NeMo launcher does; a JSON summary goes to\n"
      "DIR/pileprep-summary-rankR.json (DIR/pileprep-summary-NAME-rankR.json for another\n"
      "--output-prefix).\n\n"
      "Other commands (pileprep help COMMAND for their flags):\n" +
          commands +
          "  pileprep --version   the version (also: pileprep version, or --version after a "
          "command)\n\n",
      ExitCodeHelp(ExitHelpFor::kShardJob));
  if (done) return *done;
  if (!args.positional().empty()) {
    PrintError(absl::StrCat("unexpected argument \"", args.positional().front(),
                            "\" (see pileprep --help for the commands)"));
    return kExitUsage;
  }
  Common c;
  if (auto s = ReadCommon(args, &c); !s.ok()) {
    PrintError(std::string(s.message()));
    return kExitUsage;
  }
  long long threads = 0, at_once = 0, nodes = -1, rank = -1, retries = fetch_defaults.max_retries,
            connect = fetch_defaults.connect_timeout_s, low_speed = fetch_defaults.low_speed_time_s,
            buffer_mb = static_cast<long long>(fetch_defaults.queue_bytes >> 20);
  for (absl::Status s : {args.GetInt("threads", 1, 4096, &threads),
                         args.GetInt("shards-at-once", 1, 4096, &at_once),
                         args.GetInt("nodes", 1, 1000000, &nodes),
                         args.GetInt("rank", 0, 999999, &rank),
                         args.GetInt("retries", 0, 1000, &retries),
                         args.GetInt("connect-timeout", 1, 3600, &connect),
                         args.GetInt("low-speed-time", 1, 3600, &low_speed),
                         args.GetInt("download-buffer-mb", 1, 65536, &buffer_mb)}) {
    if (!s.ok()) {
      PrintError(std::string(s.message()));
      return kExitUsage;
    }
  }
  c.pipeline.threads = static_cast<int>(threads);
  c.pipeline.append_eod = true;
  if (args.Has("json-keys")) c.pipeline.jsonl.json_keys = UniqueKeys(args.GetAll("json-keys"));
  for (const std::string& key : c.pipeline.jsonl.json_keys) {
    // A key is part of each output's name ({prefix}_NN_{key}_document): a '/' would put outputs
    // in another directory (whose entries the publish would not sync), outside --output-dir.
    if (key.empty() || key.find('/') != std::string::npos || key == "." || key == "..") {
      PrintError(absl::StrCat("--json-keys \"", key,
                              "\": a key names the outputs' files, so it cannot be empty, "
                              "\".\" or \"..\", or hold '/'"));
      return kExitUsage;
    }
  }

  JobConfig job;
  job.fetch.max_retries = static_cast<int>(retries);
  job.fetch.connect_timeout_s = static_cast<long>(connect);
  job.fetch.low_speed_time_s = static_cast<long>(low_speed);
  job.fetch.queue_bytes = static_cast<size_t>(buffer_mb) << 20;
  job.fetch.insecure = args.Has("insecure");
  job.fetch.ca_file = args.Get("ca-file");
  if (args.Has("ca-file") && job.fetch.ca_file.empty()) {
    // (`--ca-file=$CA` with CA unset verified against the system's CAs without a word, and every
    // shard of a private server then failed on TLS.)
    PrintError("--ca-file is empty: name a PEM file of CA certificates, or leave the flag out");
    return kExitUsage;
  }
  job.fetch.user_agent = absl::StrCat("pileprep/", PILEPREP_VERSION);
  if (args.Has("retry-wait")) {
    double wait = 0;
    if (auto s = args.GetSeconds("retry-wait", 0, 3600, &wait); !s.ok()) {
      PrintError(std::string(s.message()));
      return kExitUsage;
    }
    job.fetch.backoff_initial_s = wait;
    job.fetch.backoff_max_s = std::max(wait, job.fetch.backoff_max_s);
  }
  if (args.Has("header")) job.fetch.headers = args.GetAll("header");
  for (const std::string& h : job.fetch.headers) {
    if (absl::Status s = CheckHeader(h); !s.ok()) {
      PrintError(std::string(s.message()));
      return kExitUsage;
    }
  }
  job.force = args.Has("force");
  job.remake_other_settings = args.Has("remake-other-settings");
  job.keep_downloads = args.Get("keep-downloads");
  if (args.Has("keep-downloads") && job.keep_downloads.empty()) {
    // (`--keep-downloads=$DIR` with DIR unset turned keeping off without a word.)
    PrintError("--keep-downloads is empty: name a directory, or leave the flag out");
    return kExitUsage;
  }

  auto files = ParseFileNumbers(args.Get("files", "0-29"));
  auto source = ParseShardSource(args.Get("url", kDefaultUrl));
  if (!files.ok() || !source.ok()) {
    PrintError(std::string((!files.ok() ? files.status() : source.status()).message()));
    return kExitUsage;
  }
  // The default source holds train/00..29 alone: a number past 29 there would be a 404 found only
  // when its turn came, hours into a job (a dry run cannot tell, as it asks no server). The default
  // named again counts too: without its last '/' or with a query (the base is the same), its scheme
  // or host in capitals, or http:// (redirected to https).
  const auto without_scheme = [](absl::string_view url) {
    return url.substr(std::min(url.find("://"), url.size()));
  };
  if (source->kind == SourceKind::kHttp &&
      absl::EqualsIgnoreCase(without_scheme(source->base), without_scheme(kDefaultUrl)) &&
      !files->empty() && files->back() > 29) {
    PrintError(absl::StrCat("--files: shard ", files->back(),
                            " is not in The Pile at the default --url, which has train/00 to "
                            "29.jsonl.zst; give numbers from 0 to 29, or --url for a source "
                            "that has it"));
    return kExitUsage;
  }
  job.source = *source;
  // A local source that is no directory (a typo, a file, a share not mounted) is the run's set-up,
  // not each shard's failure.
  if (std::error_code ec; job.source.kind == SourceKind::kLocalDirectory &&
                          !std::filesystem::is_directory(job.source.base, ec)) {
    // Not there, or not to be looked at (EACCES, ELOOP, a stale NFS handle): the cause as it is.
    const std::filesystem::file_status st = std::filesystem::status(job.source.base, ec);
    std::string why = "not a directory";
    if (st.type() == std::filesystem::file_type::not_found) {
      why = "no such directory";
    } else if (ec) {
      why = ec.message();
    }
    // A mistyped URL ("https:/host/pile?sig=...") arrives here as a directory name: its query is
    // left out of the message, as from a URL's (a SAS token's signature was printed whole).
    std::string shown = job.source.base;
    const std::string lower = absl::AsciiStrToLower(shown.substr(0, 8));
    const bool url_typo = absl::StartsWith(lower, "http:/") || absl::StartsWith(lower, "https:/");
    if (const size_t colon = shown.find(":/"); url_typo) {
      // Redacted as the URL it was meant to be (user:password@ too), then shown as typed.
      shown = RedactUrl(shown.substr(0, colon) + "://" + shown.substr(colon + 2));
      shown.replace(colon, 3, ":/");
    } else {
      // Or a URL without its scheme ("alice:pw@host/pile"): a password in it is not printed.
      shown = internal::MaskNonUrlPassword(shown);
    }
    if (const size_t q = shown.find('?'); q != std::string::npos)
      shown.replace(q, std::string::npos, "?...");
    PrintError(absl::StrCat("--url ", shown, ": ", why,
                            url_typo ? " (a URL needs \"://\" after its scheme)" : ""));
    return kExitUsage;
  }
  // Shards in a local directory are read where they are: nothing is downloaded to keep. Said,
  // rather than an empty --keep-downloads directory made and the flag taken without a word; not
  // refused, as one job script may point --url at a server or at a local mirror.
  if (job.source.kind == SourceKind::kLocalDirectory && !job.keep_downloads.empty()) {
    if (!c.console.quiet) {
      std::fprintf(stderr,
                   "pileprep: note: --keep-downloads %s is not used: the shards are read where "
                   "they are in the local --url\n",
                   job.keep_downloads.c_str());
    }
    job.keep_downloads.clear();
  }
  // A CA bundle that cannot be read failed every shard in turn, each naming it, and the run ended
  // as "some shards failed" (exit 1, which reads as "run it again"): the run's set-up, refused
  // before any work, the dry run's too.
  // Only where libcurl reads it: https, certificates verified (with --insecure it notes an
  // unreadable file and goes on; plain http never reads it). Opened without waiting (a FIFO's open
  // waits for a writer, and restarts after a signal's handler); a regular file only, as libcurl
  // reads it again for each download (a pipe would give its certificates to the first alone).
  if (const std::string& ca = job.fetch.ca_file;
      !ca.empty() && !job.fetch.insecure &&
      absl::StartsWithIgnoreCase(job.source.base, "https://")) {
    std::string why;
    if (const int fd = ::open(ca.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY); fd < 0) {
      why = errno == ENOENT ? "no such file" : std::strerror(errno);
    } else {
      struct stat st;
      if (::fstat(fd, &st) != 0) {
        why = std::strerror(errno);
      } else if (S_ISDIR(st.st_mode)) {
        why = "a directory, not a file";
      } else if (!S_ISREG(st.st_mode)) {
        why = "not a regular file (it is read again for each download)";
      }
      ::close(fd);
    }
    if (!why.empty()) {
      PrintError(absl::StrCat("--ca-file ", ca, ": ", why,
                              " (it must name a readable PEM file of CA certificates)"));
      return kExitUsage;
    }
  }
  job.output_dir = args.Get("output-dir", ".");
  if (job.output_dir.empty()) {
    // (The dry run planned in the current directory and a summary at the root, "/pileprep-...",
    // while the real run refused it later: both refuse it here.)
    PrintError("--output-dir is empty: name a directory (\".\" for the current one)");
    return kExitUsage;
  }
  job.output_prefix = args.Get("output-prefix", kDefaultOutputPrefix);
  if (job.output_prefix.empty()) {
    PrintError(
        absl::StrCat("--output-prefix is empty: name the datasets' prefix, or leave the flag ",
                     "out (", kDefaultOutputPrefix, ")"));
    return kExitUsage;
  }
  if (job.output_prefix.find('/') != std::string::npos) {
    PrintError("--output-prefix must be a plain name without '/'; use --output-dir for the directory");
    return kExitUsage;
  }
  auto assignment = ResolveRank({static_cast<int>(nodes), static_cast<int>(rank)},
                                CurrentEnvironment());
  if (!assignment.ok()) {
    PrintError(std::string(assignment.status().message()));
    return kExitUsage;
  }
  auto mine = FilesForAssignment(*files, *assignment);
  if (!mine.ok()) {
    PrintError(std::string(mine.status().message()));
    return kExitUsage;
  }
  // What the run would refuse before any work (exit 2), checked before anything is created, for
  // the dry run as for the run: both directories (a --keep-downloads that cannot be made left an
  // empty --output-dir behind), then the tokenizer (PILEPREP_TOKENIZER_DIR naming no vocabulary
  // did too); a plan also says which outputs were made with these settings.
  for (const auto& [dir, flag] : {std::pair{job.output_dir, "--output-dir"},
                                  std::pair{job.keep_downloads, "--keep-downloads"}}) {
    if (dir.empty()) continue;
    if (auto s = CheckDirectoryCouldBeMade(dir, flag); !s.ok()) {
      PrintError(std::string(s.message()));
      return kExitUsage;
    }
  }
  auto tokenizer = LoadTokenizer(c);
  if (!tokenizer.ok()) {
    PrintError(std::string(tokenizer.status().message()));
    return kExitUsage;
  }
  if (args.Has("dry-run")) {
    // The exit status the run would have where it is known before any work: refused, 2.
    return PrintPlan(*files, *assignment, job, c, **tokenizer) ? kExitUsage : kExitOk;
  }
  const int summary_rank = assignment->array_task >= 0 ? assignment->array_task : assignment->rank;
  if (auto s = EnsureDirectory(job.output_dir, "--output-dir"); !s.ok()) {
    PrintError(std::string(s.message()));
    return kExitUsage;
  }
  if (!job.keep_downloads.empty()) {
    if (auto s = EnsureDirectory(job.keep_downloads, "--keep-downloads"); !s.ok()) {
      PrintError(std::string(s.message()));
      return kExitUsage;
    }
  }
  const int used_threads =
      c.pipeline.threads > 0 ? c.pipeline.threads : tbb::info::default_concurrency();
  if (!c.console.quiet) {
    std::fprintf(
        stderr, "pileprep %s: rank %d of %d (%s): %zu of %zu shard(s) from %s -> %s, %d thread%s\n",
        PILEPREP_VERSION, assignment->rank, assignment->size, assignment->decided_by.c_str(),
        mine->size(), files->size(), RedactUrl(job.source.base).c_str(), job.output_dir.c_str(),
        used_threads, used_threads == 1 ? "" : "s");
  }
  if (mine->empty() && !c.console.quiet) {
    std::fprintf(stderr,
                 "pileprep: note: rank %d has no shard to make: %d ranks share %zu file(s), and "
                 "with more ranks than files some have none (exit 0)\n",
                 assignment->rank, assignment->size, files->size());
  }
  // `--array 0-1` with `--files 0-29` makes files 00 and 01 and exits 0; said in every task's log,
  // not refused: `--array 3,17` with the same script reruns two failed shards on purpose.
  if (const std::vector<int> unmade = FilesNoArrayTaskMakes(*files, *assignment); !unmade.empty()) {
    std::fprintf(stderr,
                 "pileprep: note: %zu of the --files numbers (the first %d) are outside this Slurm "
                 "array's task ids %d-%d%s (SLURM_ARRAY_TASK_MIN/MAX%s): no task of this array "
                 "makes them (as intended when rerunning some shards; else give --array the "
                 "numbers of --files)\n",
                 unmade.size(), unmade.front(), assignment->array_min, assignment->array_max,
                 assignment->array_step > 1
                     ? absl::StrCat(" by steps of ", assignment->array_step).c_str()
                     : "",
                 assignment->array_step > 1 ? "/STEP" : "");
  }
  if (const int missing = ArrayTasksMissingInRange(*assignment); missing > 0) {
    std::fprintf(stderr,
                 "pileprep: note: this Slurm array has %d tasks (SLURM_ARRAY_TASK_COUNT), %d "
                 "fewer than the ids %d-%d: the --files numbers among those no task has are made "
                 "by no task of this array (as intended when rerunning some shards)\n",
                 assignment->array_count, missing, assignment->array_min, assignment->array_max);
  }

  // Outputs made with other settings (their records say so): this run would leave a directory of
  // two tokenizations (what it makes beside what it skips), so it makes and changes nothing.
  auto refuse_other_settings = [&](const std::vector<std::string>& found) {
    for (const std::string& m : found) PrintError(m);
    std::fprintf(stderr,
                 "pileprep: %zu dataset(s) in %s were made with other settings (above); nothing "
                 "was made. Rerun with the settings they were made with; or add "
                 "--remake-other-settings to make those again with these (keeping the ones "
                 "made with these); or choose another --output-dir.\n",
                 found.size(), job.output_dir.c_str());
    return kExitUsage;
  };
  if (!job.force && !job.remake_other_settings) {
    const std::vector<std::string> found =
        DatasetsMadeWithOtherSettings(job, c, **tokenizer, *files);
    if (!found.empty()) return refuse_other_settings(found);
  }

  // Resume: a killed run's temporaries go; complete, valid outputs stay and are not made again.
  // Each shard is locked first (PathLock: the shard and its datasets), and stays locked until
  // this run is done with it: a rank with many files holds as many descriptors (one more per
  // key), so the soft limit goes up to the hard one.
  if (struct rlimit nofile;
      ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  std::vector<ShardOutcome> outcomes(mine->size());
  std::vector<PathLocks> locks(mine->size());
  std::vector<size_t> todo;
  // Shards whose outputs were there when a signal stopped the run before it checked them.
  std::vector<char> unchecked(mine->size(), false);
  std::vector<std::string> other_settings;  // complete datasets made with other settings
  int busy = 0;  // shards left alone: another process holds them, or their pending records
                 // cannot be read
  bool said_unlocked = false;
  for (size_t i = 0; i < mine->size(); ++i) {
    const int n = (*mine)[i];
    outcomes[i].name = ShardFileName(n);
    outcomes[i].source = RedactUrl(ShardInput(job.source, n));
    std::string held_path, held_by, unsupported, error;
    const std::vector<std::string> lock_paths = ShardLockPaths(job, c, n);
    if (!locks[i].TryAcquireAll(lock_paths, &held_path, &held_by, &unsupported, &error)) {
      outcomes[i].status = "FAILED";
      outcomes[i].error =
          !error.empty() ? absl::StrCat(outcomes[i].name, ": cannot open its lock file (", error,
                                        "); not made. Fix the cause and rerun")
          : held_path == lock_paths.front()
              ? absl::StrCat(outcomes[i].name, ": another pileprep process is making it (", held_by,
                             ", lock ", held_path,
                             "); left alone. Check for a second job or launcher on ",
                             job.output_dir, ", and rerun once it has stopped")
              : absl::StrCat(outcomes[i].name,
                             ": another pileprep process is writing one of its "
                             "datasets (",
                             held_by, ", lock ", held_path,
                             ": a merge or preprocess onto this job's names, or another job); "
                             "left alone. Rerun once it has stopped");
      PrintError(outcomes[i].error);
      ++busy;
      continue;
    }
    if (!unsupported.empty() && !said_unlocked) {
      said_unlocked = true;
      std::fprintf(stderr,
                   "pileprep: running without shard locks (%s): make sure no other run "
                   "writes to %s at the same time\n",
                   unsupported.c_str(), job.output_dir.c_str());
    }
    RemoveStaleTemporaries(job, c, n);
    // Records a killed run left pending: completed if their outputs were published, else
    // removed; a shard published for some keys only is withdrawn, and so made again below.
    absl::StatusOr<PendingResolution> pending = ResolvePendingRecords(PrefixesFor(job, c, n));
    if (!pending.ok()) {
      // Which way the interrupted run went is not known, and its pending records are the only
      // word on what made the outputs: the shard is left alone, pending records and all.
      outcomes[i].status = "FAILED";
      outcomes[i].error = absl::StrCat(
          outcomes[i].name, ": an interrupted run's pending records: ", pending.status().message(),
          "; left alone (neither skipped nor made again). Fix the cause and rerun");
      PrintError(outcomes[i].error);
      locks[i].clear();
      ++busy;
      continue;
    }
    if (!c.console.quiet) {
      for (const std::string& path : pending->completed) {
        std::fprintf(stderr,
                     "%s: an interrupted run's pending record %s: its outputs were published; it "
                     "is their record now\n",
                     outcomes[i].name.c_str(), path.c_str());
      }
      if (!pending->withdrawn.empty()) {
        std::fprintf(stderr,
                     "%s: an interrupted run published %s and not the shard's other key(s): "
                     "withdrawn, the shard is made again\n",
                     outcomes[i].name.c_str(), absl::StrJoin(pending->withdrawn, ", ").c_str());
      } else {
        for (const std::string& path : pending->removed) {
          std::fprintf(stderr,
                       "%s: an interrupted run's pending record %s: its outputs were not "
                       "published; removed\n",
                       outcomes[i].name.c_str(), path.c_str());
        }
      }
    }
    if (job.force || Cancelled()) {
      // Stopped before this shard was checked: an earlier run's outputs may be in place, which
      // the summary must not call unpublished.
      if (!job.force && HasOutputs(job, c, n)) unchecked[i] = true;
      todo.push_back(i);
      continue;
    }
    // Records (checked for every shard above already; one written since by another run is
    // caught here), then validation: a dataset made with other settings is made again only
    // with --remake-other-settings, even when it does not validate under this run's tokenizer.
    const std::vector<std::string> prefixes = PrefixesFor(job, c, n);
    const std::vector<RecordCheck> checks = CheckRecords(job, c, **tokenizer, n);
    if (const int k = RecordThatCannotBeRead(checks); k >= 0) {
      outcomes[i].status = "FAILED";
      outcomes[i].error = absl::StrCat(
          outcomes[i].name, ": ", prefixes[k], ".{bin,idx}: ", checks[k].why,
          "; left alone (neither skipped nor made again). Fix the cause and rerun, or make it "
          "again with --force");
      PrintError(outcomes[i].error);
      locks[i].clear();
      ++busy;
      continue;
    }
    bool other = false;
    for (size_t k = 0; k < prefixes.size(); ++k) {
      if (checks[k].verdict != RecordCheck::kOtherSettings) continue;
      other = true;
      if (job.remake_other_settings) {
        if (!c.console.quiet) {
          std::fprintf(stderr, "%s: making it again (--remake-other-settings)\n",
                       OtherSettingsLine(prefixes[k], checks[k]).c_str());
        }
      } else {
        other_settings.push_back(OtherSettingsLine(prefixes[k], checks[k]));
      }
    }
    if (other) {
      if (!job.remake_other_settings) continue;
      // A shard is made whole: its other keys' datasets are made again with it.
      for (size_t k = 0; k < prefixes.size() && !c.console.quiet; ++k) {
        if (checks[k].verdict == RecordCheck::kOtherSettings) continue;
        std::fprintf(stderr, "%s.{bin,idx}: made again with its shard's other key(s)\n",
                     prefixes[k].c_str());
      }
      todo.push_back(i);
      continue;
    }
    // A run already bound to be refused need not validate the rest (many GB of tokens).
    if (!other_settings.empty()) continue;
    if (AlreadyComplete(job, c, **tokenizer, n, &outcomes[i])) {
      std::string notes;
      for (size_t k = 0; k < prefixes.size(); ++k) {
        if (checks[k].verdict == RecordCheck::kSameSettings) continue;
        absl::StrAppend(&notes, "; ", std::filesystem::path(prefixes[k]).filename().string(), ": ",
                        checks[k].why);
      }
      locks[i].clear();  // complete: nothing more to guard, and one descriptor fewer
      if (!c.console.quiet) {
        std::fprintf(stderr,
                     "%s: outputs already complete and valid; skipped (--force redoes it)%s\n",
                     outcomes[i].name.c_str(), notes.c_str());
      }
      continue;
    }
    if (Cancelled() && HasOutputs(job, c, n)) unchecked[i] = true;  // stopped while checking them
    todo.push_back(i);
  }
  if (!other_settings.empty()) {
    // A signal meanwhile says how the run ended; the refusal's reasons are still printed.
    const int refused = refuse_other_settings(other_settings);
    return CancelExitCode() != 0 ? CancelExitCode() : refused;
  }

  // Shards at once: one zstd stream decodes at about 1.2 GB/s in the pipeline's serial read stage,
  // which four to five workers keep up with, so on a large node several shards run side by side,
  // each in its own pipeline with a share of the threads (runner r gets one more while r < the
  // remainder, so all the threads work).
  const int shards_at_once = static_cast<int>(std::clamp<long long>(
      at_once > 0 ? at_once : used_threads / 4, 1,
      std::max<long long>(1, std::min<long long>(used_threads, static_cast<long long>(todo.size())))));
  if (at_once > used_threads && !todo.empty() && !c.console.quiet) {
    // Each shard at once needs a worker of its own: asked for more, the run takes fewer, and says
    // so.
    std::fprintf(stderr,
                 "pileprep: note: --shards-at-once %lld is more than the %d thread%s: at most %d "
                 "at once (a shard needs a thread; see --threads)\n",
                 static_cast<long long>(at_once), used_threads, used_threads == 1 ? "" : "s",
                 used_threads);
  }
  Common shard_c = c;
  const int base_threads = used_threads / shards_at_once;  // >= 1: shards_at_once <= used_threads
  const int extra_threads = used_threads % shards_at_once;
  auto runner_threads = [&](int r) { return base_threads + (r < extra_threads ? 1 : 0); };
  if (shards_at_once > 1) {
    shard_c.console.tty = false;  // one live line cannot show several shards: plain lines instead
    if (!c.console.quiet) {
      std::fprintf(stderr, "%d shards at once, %s thread%s each\n", shards_at_once,
                   extra_threads > 0 ? absl::StrCat(base_threads, " or ", base_threads + 1).c_str()
                                     : absl::StrCat(base_threads).c_str(),
                   base_threads == 1 && extra_threads == 0 ? "" : "s");
    }
  }

  ConsoleFetchObserver observer(shard_c.console);
  // Processes todo[t] (opened already when `cur` holds it), restarting a download that must start
  // over; with one shard at a time the next shard's download is opened here too, so that it fills
  // its bounded queue while this one is processed.
  // `caches`: the runner's pre-token caches, kept from one shard to the next (PipelineOptions).
  auto process = [&](size_t t, OpenedSource cur, OpenedSource* next, int threads,
                     std::vector<std::unique_ptr<Gpt2Tokenizer::Cache>>* caches) {
    const size_t i = todo[t];
    const int n = (*mine)[i];
    ShardOutcome& outcome = outcomes[i];
    // What a download did, into the shard's row (its retries are in the log as they happen).
    auto count_download = [&outcome](const OpenedSource& opened) {
      if (opened.http == nullptr) return;
      const FetchStats f = opened.http->stats();
      outcome.bytes_downloaded += f.bytes_delivered + f.bytes_skipped;
      outcome.retries += f.retries;
      outcome.resumes += f.resumes;
    };
    outcome.threads = threads;
    PipelineOptions pipeline = shard_c.pipeline;
    pipeline.threads = threads;
    pipeline.caches = caches;
    // Each dataset's record (ShardRecord) is written before its outputs are renamed into place,
    // as a pending record naming the finished temporaries' inodes, and renamed over the older
    // record once they are published (below): there is no instant at which the outputs under
    // the final names have no record or the older one describes them (shard_record.h). Until the
    // publish the older record stays: a run killed or failed before it leaves the old outputs
    // with what made them (a --force run with new settings, preempted, then rerun without
    // --force, must not take the old outputs for new ones). A pending record that cannot be
    // written publishes nothing: the shard fails, and its failure below removes the pending
    // records already written.
    OpenedSource* source_of_shard = &cur;
    pipeline.before_publish = [&, source_of_shard,
                               n](const std::vector<PreparedDataset>& prepared) -> absl::Status {
      for (size_t k = 0; k < prepared.size(); ++k) {
        ShardRecord record =
            RecordOfThisRun(shard_c, **tokenizer, n, shard_c.pipeline.jsonl.json_keys[k]);
        record.source = source_of_shard->input;
        record.bin_bytes = prepared[k].bin_bytes;
        record.idx_bytes = prepared[k].idx_bytes;
        struct stat bin, idx;
        if (::stat(prepared[k].bin_temp_path.c_str(), &bin) != 0 ||
            ::stat(prepared[k].idx_temp_path.c_str(), &idx) != 0) {
          return absl::DataLossError(
              absl::StrCat(prepared[k].prefix,
                           ": cannot stat the finished temporaries: ", std::strerror(errno)));
        }
        record.bin_inode = static_cast<uint64_t>(bin.st_ino);
        record.idx_inode = static_cast<uint64_t>(idx.st_ino);
        const std::string path = PendingRecordPath(prepared[k].prefix);
        if (absl::Status s = WriteFileAtomically(path, ShardRecordJson(record),
                                                 path + kIndexedDatasetTempSuffix);
            !s.ok()) {
          return absl::DataLossError(absl::StrCat("the record of ", prepared[k].prefix,
                                                  " could not be written (", s.message(),
                                                  "): nothing was published"));
        }
      }
      return absl::OkStatus();
    };
    if (Cancelled()) {
      // Stopped by a signal: the shards not started yet are listed as such in the summary. One
      // whose download ran ahead while the shard before it was made says what it did (a row of
      // 0 retries under log lines of its retries read as a shard never tried).
      outcome.status = "cancelled";
      count_download(cur);
      outcome.error = unchecked[i] ? "not checked: stopped by a signal; the outputs of an "
                                     "earlier run are left in place (a rerun checks them)"
                      : cur.http != nullptr
                          ? "not started: stopped by a signal (its download, begun ahead, stopped)"
                          : "not started: stopped by a signal";
      return;
    }
    const std::vector<std::string> prefixes = PrefixesFor(job, shard_c, n);
    if (cur.source == nullptr && cur.status.ok()) cur = OpenShard(job, shard_c, n, &observer);
    // The next shard's download starts now, also while this one is read from a kept copy (which
    // goes fast: the download would otherwise wait for it). Not for a local source directory:
    // nothing to fetch.
    if (next != nullptr && job.source.kind != SourceKind::kLocalDirectory && t + 1 < todo.size()) {
      *next = OpenShard(job, shard_c, (*mine)[todo[t + 1]], &observer);
    }
    absl::Status status;
    // The seconds of the attempts a restart threw away: the shard's row counts all its attempts'
    // time, as bytes_downloaded counts all their bytes (it showed the last attempt's alone).
    double earlier_seconds = 0;
    while (true) {
      if (!cur.status.ok()) {
        status = cur.status;
        break;
      }
      ConsoleProgress progress(shard_c.console, outcome.name);
      if (cur.http != nullptr) {
        HttpSource* http = cur.http;
        progress.set_download([http] { return http->stats(); });
      }
      status = RunPipeline(*cur.source, InputFormat::kZstd, **tokenizer, prefixes, pipeline,
                           &outcome.stats, &progress);
      progress.Finish();
      count_download(cur);
      if (IsRestartRequired(status) && outcome.restarts < kMaxRestarts) {
        ++outcome.restarts;
        earlier_seconds += outcome.stats.seconds;
        outcome.stats.seconds = 0;  // a next attempt that cannot open has none of its own
        if (!c.console.quiet) {
          std::lock_guard<std::mutex> console(ConsoleMutex());
          std::fprintf(stderr, "%s; restart %d of %d\n", std::string(status.message()).c_str(),
                       outcome.restarts, kMaxRestarts);
        }
        cur = OpenedSource{};  // stop the old download before the new one starts
        cur = OpenShard(job, shard_c, n, &observer);
        continue;
      }
      // Out of restarts: the message, which ends "restarting the shard ...", must not say it will.
      if (IsRestartRequired(status)) {
        absl::string_view cause = status.message();
        if (const size_t at = cause.rfind("; restarting the shard");
            at != absl::string_view::npos) {
          cause = cause.substr(0, at);
        }
        absl::Status gave_up(status.code(), absl::StrCat("gave up after ", kMaxRestarts,
                                                         " restarts of the shard: ", cause));
        status.ForEachPayload([&](absl::string_view type, const absl::Cord& payload) {
          gave_up.SetPayload(type, payload);
        });
        status = std::move(gave_up);
      }
      break;
    }
    outcome.stats.seconds += earlier_seconds;
    outcome.source = cur.input;
    // A kept download whose bytes turn out damaged (a close-delimited answer cut short passes for
    // complete when the server sent no length) must not be read again by every rerun: it goes, and
    // the next run downloads the shard afresh. Only for the decoder's verdict on bytes that came
    // from the cache or were downloaded into it: not for bad records, read errors, or a local
    // source directory that is also the --keep-downloads one.
    const std::string cache = CachePath(job, n);
    const bool cache_bytes = !cache.empty() && job.source.kind != SourceKind::kLocalDirectory &&
                             ((cur.http != nullptr && cur.keeps) || cur.input == cache);
    const std::string input = cur.input;
    // A download stops here, its lock still held (it cannot rename its cache file after the
    // removal below, nor can another job's download start before it).
    std::unique_ptr<PathLock> cache_lock = std::move(cur.cache_lock);
    cur.source.reset();
    const DamagedCopy damaged_copy =
        cache_bytes && IsDamagedZstdInput(status)
            ? RemoveDamagedCopy(cache, std::move(cache_lock), cur.http != nullptr, cur.kept_file)
            : DamagedCopy::kNone;
    cache_lock.reset();
    cur = OpenedSource{};
    // A shard's report stays in one piece: other shards' reports, progress and retry lines wait.
    std::lock_guard<std::mutex> lock(ConsoleMutex());
    ReportOutcome(outcome.name, input, std::move(status), prefixes, shard_c, &outcome);
    if (outcome.status == "done") {
      // Published: each pending record becomes the record (the older one goes by the rename).
      for (const std::string& p : prefixes) {
        absl::Status s = internal::RenameFile(PendingRecordPath(p), RecordPath(p));
        if (!s.ok()) {
          std::fprintf(stderr,
                       "%s: outputs published; their record stays pending at %s (%s): the next "
                       "run completes it\n",
                       outcome.name.c_str(), PendingRecordPath(p).c_str(),
                       std::string(s.message()).c_str());
        } else if (s = internal::SyncDirectory(internal::DirName(p)); !s.ok()) {
          // Renamed, so no longer pending: only its directory entry may not survive a crash,
          // which the next run finds as a pending record again (kept) or as this record.
          std::fprintf(stderr,
                       "%s: outputs published and their record renamed to %s, but its directory "
                       "was not synced (%s): a crash now may leave it pending, which the next run "
                       "completes\n",
                       outcome.name.c_str(), RecordPath(p).c_str(),
                       std::string(s.message()).c_str());
        }
      }
    } else {
      // Nothing of this run was published (the pipeline withdraws a partial publish): pending
      // records, if the hook wrote them, describe nothing. Unless the withdrawal failed too (a
      // later key's rename failed, then removing an earlier key's files did): that key's outputs
      // are in place, maybe beside another key's older ones. Then every pending record stays, and
      // the next run finds the shard torn, withdraws it and makes it again (ResolvePendingRecords);
      // without them it would take the shard for made, keys from two runs.
      std::vector<std::string> in_place;
      absl::StatusOr<PendingStates> states = ReadPendingStates(prefixes);
      for (size_t k = 0; states.ok() && k < prefixes.size(); ++k) {
        if (states->state[k] == PendingStates::kNamesFiles) in_place.push_back(prefixes[k]);
      }
      if (!states.ok() || !in_place.empty()) {
        const std::string why =
            states.ok() ? absl::StrCat("this run's outputs of ", absl::StrJoin(in_place, ", "),
                                       " could not be withdrawn")
                        : absl::StrCat("its pending records cannot be read (",
                                       states.status().message(), ")");
        // Torn (some keys in place, not all): the next run withdraws and remakes the shard; every
        // key in place: it completes the records and judges the outputs by validation.
        std::fprintf(stderr, "%s: %s; its pending records stay: %s\n", outcome.name.c_str(),
                     why.c_str(),
                     states.ok() && !states->torn
                         ? "the next run takes them as the outputs' records if the outputs "
                           "validate"
                         : "the next run withdraws what is in place and makes the shard again");
      } else {
        for (const std::string& p : prefixes) ::unlink(PendingRecordPath(p).c_str());
      }
    }
    locks[i].clear();  // published or not, this run is done with the shard
    if (damaged_copy == DamagedCopy::kRemoved) {
      std::fprintf(stderr,
                   "removed the kept download %s: its bytes are damaged; the next run "
                   "downloads it again\n",
                   cache.c_str());
    } else if (damaged_copy == DamagedCopy::kReplaced) {
      std::fprintf(stderr,
                   "the kept download %s read by this run is damaged, but another job replaced it "
                   "meanwhile: the new copy stays\n",
                   cache.c_str());
    }
  };
  if (shards_at_once == 1) {
    OpenedSource next;
    std::vector<std::unique_ptr<Gpt2Tokenizer::Cache>> caches;
    for (size_t t = 0; t < todo.size(); ++t) {
      OpenedSource cur = std::move(next);
      next = OpenedSource{};
      process(t, std::move(cur), &next, used_threads, &caches);
    }
  } else {
    // More threads than cores, split between runners: TBB's limit is raised once for them all
    // (the smallest of several raises would win, and cap the others' arenas).
    const std::optional<tbb::global_control> allow_threads = internal::AllowThreads(used_threads);
    // Each runner takes the next shard not yet started; a shard's messages are whole lines.
    std::atomic<size_t> next_todo{0};
    std::vector<std::thread> runners;
    auto run = [&](int threads) {
      std::vector<std::unique_ptr<Gpt2Tokenizer::Cache>> caches;
      for (size_t t; (t = next_todo.fetch_add(1)) < todo.size();) {
        process(t, {}, nullptr, threads, &caches);
      }
    };
    for (int r = 0; r < shards_at_once; ++r) {
      try {
        runners.emplace_back(run, runner_threads(r));
      } catch (const std::system_error& e) {
        // No thread to be had (a cgroup's pids.max, ulimit -u): fewer shards at once, not an
        // abort that leaves every shard unmade and no summary. With none started, this one runs
        // them all.
        std::fprintf(stderr,
                     "pileprep: %d of %d shards at once (cannot start another thread: %s)\n",
                     std::max(r, 1), shards_at_once, e.what());
        if (r == 0) run(runner_threads(0));
        break;
      }
    }
    for (std::thread& runner : runners) runner.join();
  }
  int failed = busy;
  int cancelled = 0;
  for (size_t i : todo) {
    failed += outcomes[i].status != "done";
    cancelled += outcomes[i].status == "cancelled";
  }
  // A signal that came once every shard had ended (while the last one was published, or the
  // summary written) cancelled nothing: the exit status is the shards', and the summary says so.
  // It said "stopped by a signal ... the rest (marked cancelled) were not made", exit 128+N, of a
  // run whose every shard was done.
  const int signal_exit = CancelExitCode();
  const int cancel_exit = cancelled > 0 ? signal_exit : 0;

  std::fprintf(stderr, "\n%s", SummaryTable(outcomes, used_threads).c_str());
  if (shards_at_once > 1) {
    std::fprintf(stderr, "(%d shards at once: seconds add up over shards; the run took %.1fs)\n",
                 shards_at_once,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - job_start).count());
  }
  RunInfo info;
  info.version = PILEPREP_VERSION;
  info.source = RedactUrl(job.source.base);
  info.output_dir = job.output_dir;
  info.rank = assignment->rank;
  info.nodes = assignment->size;
  info.array_task = assignment->array_task;
  info.decided_by = assignment->decided_by;
  info.files = *mine;
  info.exit_status = cancel_exit != 0 ? cancel_exit : failed > 0 ? kExitFailed : kExitOk;
  info.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - job_start).count();
  const std::string summary_path =
      (std::filesystem::path(job.output_dir) / SummaryFileName(job, summary_rank)).string();
  const std::string summary_base = summary_path.substr(0, summary_path.size() - 5);  // no .json
  // A straggler and its requeue (same rank, same directory, maybe another node) would write one
  // temporary: the summary is written under a lock of its own, held for moments, waited for, and
  // through a temporary of this process's own (where flock is local to a node the lock does not
  // reach the other node).
  // (A lock file that cannot be opened, out of descriptors: written all the same, and any error in
  // writing it said.)
  std::string summary_holder, no_lock, lock_error;
  const std::string summary_lock_path = summary_base + ".pileprep-lock";
  std::unique_ptr<PathLock> summary_lock =
      PathLock::Acquire(summary_lock_path, 5.0, &summary_holder, &no_lock, &lock_error);
  // Held by another process: not written. Not held for want of flock: written all the same.
  const bool held_by_another = summary_lock == nullptr && !summary_holder.empty();
  if (!held_by_another) {
    RemoveStaleFiles(
        StaleSummaryTemporaries(summary_path, summary_lock_path, summary_lock != nullptr),
        c.console.quiet);
  }
  absl::Status summary_written =
      held_by_another
          ? absl::UnavailableError(
                absl::StrCat(summary_path, ": not written: ", summary_holder, " is writing it"))
          : WriteFileAtomically(summary_path, SummaryJson(info, outcomes),
                                absl::StrCat(summary_path, ".", PathLock::HostName(), ".",
                                             ::getpid(), kIndexedDatasetTempSuffix));
  // The lock goes before the last words below, so that they can report a signal that came while
  // the summary was written or its lock removed (the handler's "stopping" line was the log's last).
  summary_lock.reset();
  if (auto s = summary_written; !s.ok()) {
    PrintError(absl::StrCat("summary: ", s.message()));
    if (cancel_exit != 0) return cancel_exit;
    if (failed == 0) return kExitFailed;
  }
  if (cancel_exit != 0) {
    // Shards that FAILED before or beside the signal are not the signal's: a rerun meets their
    // cause again, which "Rerun to finish them" alone did not say.
    const int not_cancelled = failed - cancelled;
    const std::string failed_note =
        not_cancelled > 0
            ? absl::StrCat(not_cancelled,
                           " shard(s) FAILED (see the errors above: fix the cause first), ")
            : "";
    std::fprintf(stderr,
                 "pileprep: stopped by a signal; completed shards are in place, %sthe rest "
                 "(marked cancelled) were not made by this run. Rerun to finish them.\n",
                 failed_note.c_str());
    return cancel_exit;
  }
  // Read again: a signal may have come since signal_exit was (the summary's writing takes moments).
  // Said under -q too: it answers the handler's "stopping" line, which -q does not hold back.
  if (const int late = CancelExitCode(); late != 0) {
    std::fprintf(stderr, "pileprep: %s came too late to cancel any shard: nothing was cancelled\n",
                 SignalNameOf(late));
  }
  if (failed > 0) {
    std::fprintf(stderr, "pileprep: %d of %zu shard(s) FAILED (see the errors above); nothing was "
                         "published for them. Fix the cause and rerun.\n",
                 failed, outcomes.size());
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace pileprep::cli
