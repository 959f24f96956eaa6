#include "console.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "jsonl/utf8.h"
#include "signals.h"

namespace pileprep::cli {

std::string HumanBytes(double b) {
  if (b < 1e3) return absl::StrFormat("%.0f B", b);
  if (b < 1e6) return absl::StrFormat("%.1f kB", b / 1e3);
  if (b < 1e9) return absl::StrFormat("%.1f MB", b / 1e6);
  return absl::StrFormat("%.2f GB", b / 1e9);
}

std::string HumanCount(double n) {
  if (n < 1e4) return absl::StrFormat("%.0f", n);
  if (n < 1e6) return absl::StrFormat("%.1fk", n / 1e3);
  if (n < 1e9) return absl::StrFormat("%.2fM", n / 1e6);
  return absl::StrFormat("%.2fB", n / 1e9);
}

std::string HumanDuration(double s) {
  if (s < 0) return "?";
  const long long t = static_cast<long long>(s + 0.5);
  if (t < 60) return absl::StrFormat("%llds", t);
  if (t < 3600) return absl::StrFormat("%lldm%02llds", t / 60, t % 60);
  return absl::StrFormat("%lldh%02lldm", t / 3600, (t % 3600) / 60);
}

std::mutex& ConsoleMutex() {
  static std::mutex mu;
  return mu;
}

ConsoleProgress::ConsoleProgress(ConsoleOptions options, std::string label)
    : options_(options), label_(std::move(label)) {
  const auto now = std::chrono::steady_clock::now();
  start_ = last_batch_.at = last_print_ = now;
  if (options_.quiet) return;
  try {
    ticker_ = std::thread([this] { Tick(); });
  } catch (const std::system_error&) {
    // No thread to be had (ulimit -u, pids.max): lines come with batches only.
  }
}

ConsoleProgress::~ConsoleProgress() { Finish(); }

void ConsoleProgress::set_download(std::function<FetchStats()> download) {
  std::lock_guard<std::mutex> lock(mu_);
  download_ = std::move(download);
  // The next shard's download starts while this one runs: what it delivered before its own line
  // began is not counted in its rate, which would otherwise start out as if those bytes had come
  // in no time.
  download_baseline_ = download_ ? download_().bytes_delivered : 0;
}

std::vector<ProgressField> ConsoleProgress::Fields(const Snapshot& s) const {
  // Seconds until now, not until the last batch (s.seconds): during a stall the rate falls and the
  // ETA grows, where they stood still at the last batch's values.
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double seconds = std::max(elapsed, s.seconds);
  const double rate = seconds > 0 ? s.bytes_decompressed / seconds : 0;
  std::vector<ProgressField> fields;
  std::string head = label_ + ": ";
  FetchStats fetch;
  int64_t size = s.size_hint;
  if (download_) {
    fetch = download_();
    absl::StrAppend(&head, "downloaded ", HumanBytes(static_cast<double>(fetch.bytes_delivered)));
    if (size <= 0) size = fetch.total_bytes;  // before the first batch
  } else {
    absl::StrAppend(&head, HumanBytes(s.bytes_in));
  }
  double frac = 0;
  if (size > 0) {
    frac = static_cast<double>(s.bytes_in) / size;
    // Beside a download's counter the share is labelled: it is what the pipeline has processed,
    // and "downloaded 704.6 kB / 704.6 kB (43%)" read as a download stuck at 43%.
    if (download_) {
      absl::StrAppendFormat(&head, " / %s, %.0f%% processed", HumanBytes(size), 100 * frac);
    } else {
      absl::StrAppendFormat(&head, " / %s (%.0f%%)", HumanBytes(size), 100 * frac);
    }
  }
  fields.push_back({std::move(head), 0});
  // Bytes downloaded per second since this line began.
  const double got = download_ && fetch.bytes_delivered > download_baseline_
                         ? static_cast<double>(fetch.bytes_delivered - download_baseline_)
                         : 0;
  double eta = frac > 0.001 ? seconds * (1 - frac) / frac : -1;
  // A shard whose download began ahead (while the shard before it was made) is processed fast
  // while its head start lasts: the processed share alone promised an end seconds before the
  // bytes still to come could arrive at the rate they come in.
  if (download_ && elapsed > 0 && got > 0 && size > 0 &&
      static_cast<double>(fetch.bytes_delivered) < static_cast<double>(size)) {
    eta = std::max(eta, (static_cast<double>(size) - static_cast<double>(fetch.bytes_delivered)) /
                            (got / elapsed));
  }
  if (eta >= 0) fields.push_back({absl::StrCat(", ETA ", HumanDuration(eta)), 2});
  if (download_ && elapsed > 0) {
    fields.push_back({absl::StrCat(", ", HumanBytes(got / elapsed), "/s in"), 4});
  }
  fields.push_back({absl::StrCat(", ", HumanBytes(rate), "/s of JSON"), 3});
  fields.push_back({absl::StrCat(", ", HumanCount(s.documents), " docs"), 5});
  fields.push_back({absl::StrCat(", ", HumanCount(s.tokens), " tokens"), 6});
  if (s.bad_records > 0) fields.push_back({absl::StrCat(", ", s.bad_records, " bad records"), 1});
  if (fetch.retries > 0) {
    fields.push_back(
        {absl::StrCat(", ", fetch.retries, fetch.retries == 1 ? " retry" : " retries"), 1});
  }
  return fields;
}

namespace {

// The columns a terminal may give `s`, at most: a file name may be UTF-8, whose characters take
// one column (Latin, Cyrillic) or two (CJK, emoji). Each non-ASCII character is counted as two:
// a line of wide characters then still fits, and one of narrow ones loses a field too many.
size_t Columns(std::string_view s) {
  size_t n = 0;
  for (const char c : s) {
    const auto b = static_cast<unsigned char>(c);
    n += b < 0x80 ? 1 : (b & 0xC0) != 0x80 ? 2 : 0;
  }
  return n;
}

}  // namespace

std::string FitProgressLine(std::vector<ProgressField> fields, size_t width) {
  auto columns = [&] {
    size_t n = 0;
    for (const ProgressField& f : fields) n += Columns(f.text);
    return n;
  };
  // Drop the least wanted field (the highest rank; the later of equals) until the line fits.
  while (width > 0 && columns() > width) {
    auto drop = fields.end();
    for (auto it = fields.begin(); it != fields.end(); ++it) {
      if (it->drop_rank > 0 && (drop == fields.end() || it->drop_rank >= drop->drop_rank))
        drop = it;
    }
    if (drop == fields.end()) break;
    fields.erase(drop);
  }
  std::string line;
  for (const ProgressField& f : fields) line += f.text;
  if (width > 0 && columns() > width) {
    // Still too wide (a long name): cut at a character's start, within width columns.
    size_t n = 0, used = 0;
    while (n < line.size()) {
      size_t end = n + 1;
      while (end < line.size() && (static_cast<unsigned char>(line[end]) & 0xC0) == 0x80) ++end;
      const size_t cols = Columns(std::string_view(line).substr(n, end - n));
      if (used + cols > width) break;
      used += cols;
      n = end;
    }
    line.resize(n);
  }
  return line;
}

void ConsoleProgress::Print(std::vector<ProgressField> fields) {
  // Under mu_, then the console's: a report takes only the console's, so no order is reversed.
  std::lock_guard<std::mutex> console(ConsoleMutex());
  if (options_.tty) {
    // Fit to the terminal's width: a line that wraps leaves its first rows behind at every redraw
    // (\r and \033[K reach only the last row), and the screen scrolls five times a second. Fields
    // are dropped whole, the counts first, before anything is cut.
    size_t width = 0;
    struct winsize ws;
    // One column short of the width: a line that fills the last column wraps on some terminals.
    if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
      width = std::max<size_t>(1, ws.ws_col - 1);
    }
    std::fprintf(stderr, "\r\033[K%s", FitProgressLine(std::move(fields), width).c_str());
    drew_ = true;
  } else {
    std::fprintf(stderr, "%s\n", FitProgressLine(std::move(fields), 0).c_str());
  }
  std::fflush(stderr);
  last_print_ = std::chrono::steady_clock::now();
}

void ConsoleProgress::OnProgress(const ShardStats& s, int64_t size_hint) {
  if (options_.quiet) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_ || Cancelled()) return;
  const auto now = std::chrono::steady_clock::now();
  last_batch_ = {
      s.bytes_in, s.bytes_decompressed, s.documents, s.tokens, s.bad_records, s.seconds, size_hint,
      now};
  const double since = std::chrono::duration<double>(now - last_print_).count();
  if (since < (options_.tty ? 0.2 : options_.log_interval_s)) return;
  Print(Fields(last_batch_));
}

void ConsoleProgress::Tick() {
  const auto every = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(options_.tty ? 1.0 : options_.log_interval_s));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (wake_.wait_until(lock, last_print_ + every, [&] { return stop_; })) break;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_print_ < every) continue;  // a batch's line came meanwhile
    // After "stopping" a progress line (with "no batch finished for 3s" as the stop takes its time)
    // reads as if the run went on; what stopped and what was kept comes in the summary.
    if (Cancelled()) break;
    std::vector<ProgressField> fields = Fields(last_batch_);
    const double quiet_s = std::chrono::duration<double>(now - last_batch_.at).count();
    if (quiet_s >= 1) {
      fields.push_back({absl::StrCat(" (",
                                     last_batch_.documents > 0 || last_batch_.bytes_in > 0
                                         ? "no batch finished for "
                                         : "waiting for the first batch, ",
                                     HumanDuration(quiet_s), ")"),
                        1});
    }
    Print(std::move(fields));
  }
}

void ConsoleProgress::Finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    if (drew_) {
      std::lock_guard<std::mutex> console(ConsoleMutex());
      std::fprintf(stderr, "\r\033[K");
    }
    drew_ = false;
  }
  wake_.notify_all();
  if (ticker_.joinable()) ticker_.join();
}

void ConsoleFetchObserver::OnRetry(const std::string& url, int attempt, double delay_s,
                                   uint64_t resume_from, const std::string& cause) {
  if (options_.quiet) return;
  std::lock_guard<std::mutex> console(ConsoleMutex());
  std::fprintf(stderr, "%s%s: %s; retry %d in %.1fs%s\n", options_.tty ? "\r\033[K" : "",
               url.c_str(), cause.c_str(), attempt, delay_s,
               resume_from > 0 ? absl::StrCat(" from byte ", resume_from, " (Range)").c_str() : "");
  std::fflush(stderr);
}

void ConsoleFetchObserver::OnKeepDropped(const std::string& url, const std::string& cause) {
  std::lock_guard<std::mutex> console(ConsoleMutex());
  std::fprintf(stderr, "%s%s: not keeping a copy (%s); the download goes on\n",
               options_.tty ? "\r\033[K" : "", url.c_str(), cause.c_str());
  std::fflush(stderr);
}

std::string SummaryTable(const std::vector<ShardOutcome>& outcomes, int threads) {
  // The first column as wide as the longest name (preprocess names a row after its input file),
  // at least 16: a longer name pushed every column of its row off the header's. Counted in
  // characters, not bytes, for a UTF-8 name.
  size_t name_width = 16;
  auto characters = [](const std::string& s) {
    return static_cast<size_t>(std::count_if(
        s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
  };
  for (const ShardOutcome& o : outcomes) name_width = std::max(name_width, characters(o.name));
  auto name = [&](const std::string& s) {
    return absl::StrCat(s, std::string(name_width - std::min(name_width, characters(s)), ' '));
  };
  std::string out =
      absl::StrFormat("%s %-9s %11s %11s %14s %6s %7s %9s %10s\n", name("shard"), "status", "input",
                      "documents", "tokens", "bad", "retries", "seconds", "MB/s/core");
  int total_retries = 0;
  ShardStats total;
  double core_seconds = 0;
  for (const ShardOutcome& o : outcomes) {
    const ShardStats& s = o.stats;
    const int cores = std::max(1, o.threads > 0 ? o.threads : threads);
    const double per_core = s.seconds > 0 ? s.bytes_decompressed / 1e6 / s.seconds / cores : 0;
    core_seconds += s.seconds * cores;
    absl::StrAppendFormat(&out, "%s %-9s %11s %11d %14d %6d %7d %9.1f %10.2f\n", name(o.name),
                          o.status, HumanBytes(s.bytes_in), s.documents, s.tokens, s.bad_records,
                          o.retries, s.seconds, per_core);
    total_retries += o.retries;
    total.bytes_in += s.bytes_in;
    total.bytes_decompressed += s.bytes_decompressed;
    total.documents += s.documents;
    total.tokens += s.tokens;
    total.bad_records += s.bad_records;
    total.seconds += s.seconds;
  }
  if (outcomes.size() > 1) {
    const double per_core = core_seconds > 0 ? total.bytes_decompressed / 1e6 / core_seconds : 0;
    absl::StrAppendFormat(&out, "%s %-9s %11s %11d %14d %6d %7d %9.1f %10.2f\n", name("total"), "",
                          HumanBytes(total.bytes_in), total.documents, total.tokens,
                          total.bad_records, total_retries, total.seconds, per_core);
  }
  return out;
}

std::string JsonString(std::string_view in) { return internal::JsonQuote(in); }

std::string SummaryJson(const RunInfo& info, const std::vector<ShardOutcome>& outcomes) {
  std::string out = "{\n";
  absl::StrAppend(&out, "  \"pileprep_version\": ", JsonString(info.version), ",\n");
  absl::StrAppend(&out, "  \"source\": ", JsonString(info.source), ",\n");
  absl::StrAppend(&out, "  \"output_dir\": ", JsonString(info.output_dir), ",\n");
  absl::StrAppend(&out, "  \"rank\": ", info.rank, ",\n  \"nodes\": ", info.nodes, ",\n");
  if (info.array_task >= 0) absl::StrAppend(&out, "  \"slurm_array_task\": ", info.array_task, ",\n");
  absl::StrAppend(&out, "  \"decided_by\": ", JsonString(info.decided_by), ",\n");
  out += "  \"files\": [";
  for (size_t i = 0; i < info.files.size(); ++i) absl::StrAppend(&out, i ? ", " : "", info.files[i]);
  out += "],\n";
  absl::StrAppend(&out, "  \"exit_status\": ", info.exit_status, ",\n");
  absl::StrAppendFormat(&out, "  \"seconds\": %.3f,\n", info.seconds);
  out += "  \"shards\": [";
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const ShardOutcome& o = outcomes[i];
    const ShardStats& s = o.stats;
    absl::StrAppend(&out, i ? "," : "", "\n    {\n");
    absl::StrAppend(&out, "      \"shard\": ", JsonString(o.name), ",\n");
    absl::StrAppend(&out, "      \"status\": ", JsonString(o.status), ",\n");
    if (!o.error.empty()) absl::StrAppend(&out, "      \"error\": ", JsonString(o.error), ",\n");
    absl::StrAppend(&out, "      \"source\": ", JsonString(o.source), ",\n");
    out += "      \"outputs\": [";
    for (size_t k = 0; k < o.outputs.size(); ++k) {
      absl::StrAppend(&out, k ? ", " : "", JsonString(o.outputs[k]));
    }
    out += "],\n";
    absl::StrAppend(&out, "      \"bytes_in\": ", s.bytes_in, ",\n");
    absl::StrAppend(&out, "      \"bytes_downloaded\": ", o.bytes_downloaded, ",\n");
    absl::StrAppend(&out, "      \"bytes_decompressed\": ", s.bytes_decompressed, ",\n");
    absl::StrAppend(&out, "      \"lines\": ", s.lines, ",\n");
    absl::StrAppend(&out, "      \"documents\": ", s.documents, ",\n");
    absl::StrAppend(&out, "      \"empty_documents\": ", s.empty_documents, ",\n");
    absl::StrAppend(&out, "      \"tokens\": ", s.tokens, ",\n");
    absl::StrAppend(&out, "      \"bad_records\": ", s.bad_records, ",\n");
    out += "      \"bad_record_samples\": [";
    for (size_t k = 0; k < s.bad_record_samples.size(); ++k) {
      const BadRecord& b = s.bad_record_samples[k];
      absl::StrAppend(&out, k ? ",\n        " : "\n        ", "{\"line\": ", b.line,
                      ", \"kind\": ", JsonString(BadRecordKindName(b.kind)),
                      ", \"detail\": ", JsonString(b.detail), "}");
    }
    out += s.bad_record_samples.empty() ? "],\n" : "\n      ],\n";
    absl::StrAppend(&out, "      \"replaced_invalid_utf8\": ", s.replaced_invalid_utf8, ",\n");
    absl::StrAppend(&out, "      \"replaced_lone_surrogates\": ", s.replaced_lone_surrogates, ",\n");
    absl::StrAppend(&out, "      \"retries\": ", o.retries, ",\n");
    absl::StrAppend(&out, "      \"resumes\": ", o.resumes, ",\n");
    absl::StrAppend(&out, "      \"restarts\": ", o.restarts, ",\n");
    absl::StrAppendFormat(&out, "      \"seconds\": %.3f\n    }", s.seconds);
  }
  out += outcomes.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

}  // namespace pileprep::cli
