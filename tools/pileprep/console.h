// What the CLI prints while a job runs: a live line on a terminal, plain periodic lines in batch logs
// (no TTY, as on BCP or Slurm), and the end-of-run summary. All output goes to stderr, so stdout stays
// free for machine-readable output.
#ifndef PILEPREP_TOOLS_PILEPREP_CONSOLE_H_
#define PILEPREP_TOOLS_PILEPREP_CONSOLE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "pileprep/fetch.h"
#include "pileprep/pipeline.h"

namespace pileprep::cli {

struct ConsoleOptions {
  bool quiet = false;           // only errors and the summary
  bool tty = false;             // live line with carriage returns
  double log_interval_s = 30;   // seconds between plain progress lines when not a TTY
};

// Held while anything of several lines, or a line that must not fall inside one, goes to stderr: a
// shard's report (its bad records listed under its name) and, from other shards' threads under
// --shards-at-once, their progress and retry lines, which once landed inside such a list.
std::mutex& ConsoleMutex();

// Thread model: OnProgress comes from the pipeline's in-order stage, one batch at a time; a thread
// of its own (unless quiet) prints the line again when no batch has come for a while (a slow or
// stalled download, a long document), every log_interval_s in batch logs and every second on a
// terminal: lines tied to batches alone went silent for minutes. All under one mutex.
// A piece of a progress line, with its leading separator ("", ", ETA 5m", " (no batch ...)").
struct ProgressField {
  std::string text;
  int drop_rank;  // 0: always shown; a line too wide loses the highest first, the later of equals
};

// The fields joined, in at most `width` columns (0: no limit; a non-ASCII character counted as
// two): whole fields dropped first (the counts before the rates before the ETA before the notes of
// bad records, retries and a stall), then, if the kept ones are still too wide, the line cut at a
// character's start.
std::string FitProgressLine(std::vector<ProgressField> fields, size_t width);

class ConsoleProgress : public ProgressObserver {
 public:
  ConsoleProgress(ConsoleOptions options, std::string label);
  ~ConsoleProgress() override;
  ConsoleProgress(const ConsoleProgress&) = delete;
  ConsoleProgress& operator=(const ConsoleProgress&) = delete;
  void OnProgress(const ShardStats& s, int64_t source_size_hint) override;
  // For a download: the line then shows bytes downloaded and retries from this snapshot.
  void set_download(std::function<FetchStats()> download);
  // Stops the periodic lines and clears the live line before other output.
  void Finish();

 private:
  // What a line shows of the run: the stats of the last batch, and when it came.
  struct Snapshot {
    uint64_t bytes_in = 0, bytes_decompressed = 0, documents = 0, tokens = 0, bad_records = 0;
    double seconds = 0;
    int64_t size_hint = -1;
    std::chrono::steady_clock::time_point at;
  };
  std::vector<ProgressField> Fields(const Snapshot& s) const;  // mu_ held
  void Print(std::vector<ProgressField> fields);               // mu_ held
  void Tick();
  ConsoleOptions options_;
  std::string label_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  Snapshot last_batch_;
  std::chrono::steady_clock::time_point start_, last_print_;
  bool drew_ = false;
  std::function<FetchStats()> download_;
  uint64_t download_baseline_ = 0;  // bytes delivered when set_download was called
  std::thread ticker_;
};

// Prints download retries as they happen (from the download thread), clearing a live line first.
class ConsoleFetchObserver : public FetchObserver {
 public:
  explicit ConsoleFetchObserver(ConsoleOptions options) : options_(options) {}
  void OnRetry(const std::string& url, int attempt, double delay_s, uint64_t resume_from,
               const std::string& cause) override;
  // Printed even when quiet, as the CLI's other "not keeping a copy" note: a copy the user asked
  // for is missing.
  void OnKeepDropped(const std::string& url, const std::string& cause) override;

 private:
  ConsoleOptions options_;
};

// "12.3 MB", "1.20 GB".
std::string HumanBytes(double bytes);
std::string HumanCount(double n);
std::string HumanDuration(double seconds);

struct ShardOutcome {
  std::string name;       // "00.jsonl.zst"
  std::string status;     // "done", "FAILED", "skipped" (outputs already complete)
  ShardStats stats;
  std::string error;      // when failed
  std::vector<std::string> outputs;
  // Downloads only.
  std::string source;     // URL (redacted) or path
  uint64_t bytes_downloaded = 0;  // over every attempt and restart (prefixes sent again included)
  int retries = 0;
  int resumes = 0;        // Range requests that continued a dropped transfer
  int restarts = 0;       // times the shard was started again from byte 0 (file changed, no Range)
  int threads = 0;        // its pipeline's threads (0: SummaryTable's `threads`)
};

// A JSON string literal; invalid UTF-8 becomes U+FFFD so the file always parses.
std::string JsonString(std::string_view in);

// The end-of-run table. MB/s/core divides by each outcome's threads, else by `threads`.
std::string SummaryTable(const std::vector<ShardOutcome>& outcomes, int threads);

// The per-rank JSON summary (pileprep-summary-rank{R}.json): what ran, where, and per shard bytes in,
// documents, tokens, bad records with line numbers, replaced characters, retries, seconds, status.
struct RunInfo {
  std::string version;
  std::string source;      // --url, redacted
  std::string output_dir;
  int rank = 0, nodes = 1, array_task = -1;
  std::string decided_by;
  std::vector<int> files;  // this rank's files
  int exit_status = 0;
  double seconds = 0;
};
std::string SummaryJson(const RunInfo& info, const std::vector<ShardOutcome>& outcomes);

}  // namespace pileprep::cli

#endif  // PILEPREP_TOOLS_PILEPREP_CONSOLE_H_
