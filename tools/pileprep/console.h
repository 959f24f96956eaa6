// What the CLI prints while a job runs: a live line on a terminal, plain periodic lines in batch logs
// (no TTY, as on BCP or Slurm), and the end-of-run summary. All output goes to stderr, so stdout stays
// free for machine-readable output.
#ifndef PILEPREP_TOOLS_PILEPREP_CONSOLE_H_
#define PILEPREP_TOOLS_PILEPREP_CONSOLE_H_

#include <chrono>
#include <string>
#include <vector>

#include "pileprep/pipeline.h"

namespace pileprep::cli {

struct ConsoleOptions {
  bool quiet = false;           // only errors and the summary
  bool tty = false;             // live line with carriage returns
  double log_interval_s = 30;   // seconds between plain progress lines when not a TTY
};

class ConsoleProgress : public ProgressObserver {
 public:
  ConsoleProgress(ConsoleOptions options, std::string label);
  void OnProgress(const ShardStats& s, int64_t source_size_hint) override;
  // Clears the live line before other output.
  void Finish();

 private:
  std::string Line(const ShardStats& s, int64_t size_hint) const;
  ConsoleOptions options_;
  std::string label_;
  std::chrono::steady_clock::time_point last_;
  bool drew_ = false;
};

// "12.3 MB", "1.20 GB".
std::string HumanBytes(double bytes);
std::string HumanCount(double n);
std::string HumanDuration(double seconds);

struct ShardOutcome {
  std::string name;       // "00.jsonl.zst"
  std::string status;     // "done", "FAILED", "skipped"
  ShardStats stats;
  std::string error;      // when failed
  std::vector<std::string> outputs;
};

// The end-of-run table.
std::string SummaryTable(const std::vector<ShardOutcome>& outcomes, int threads);

}  // namespace pileprep::cli

#endif  // PILEPREP_TOOLS_PILEPREP_CONSOLE_H_
