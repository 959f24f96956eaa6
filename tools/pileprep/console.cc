#include "console.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

ConsoleProgress::ConsoleProgress(ConsoleOptions options, std::string label)
    : options_(options), label_(std::move(label)), last_(std::chrono::steady_clock::now()) {}

std::string ConsoleProgress::Line(const ShardStats& s, int64_t size_hint) const {
  const double rate = s.seconds > 0 ? s.bytes_decompressed / s.seconds : 0;
  std::string line = absl::StrCat(label_, ": ", HumanBytes(s.bytes_in));
  if (size_hint > 0) {
    const double frac = static_cast<double>(s.bytes_in) / size_hint;
    absl::StrAppendFormat(&line, " / %s (%.0f%%)", HumanBytes(size_hint), 100 * frac);
    if (frac > 0.001) {
      absl::StrAppend(&line, ", ETA ", HumanDuration(s.seconds * (1 - frac) / frac));
    }
  }
  absl::StrAppend(&line, ", ", HumanBytes(rate), "/s of JSON, ", HumanCount(s.documents), " docs, ",
                  HumanCount(s.tokens), " tokens");
  if (s.bad_records > 0) absl::StrAppend(&line, ", ", s.bad_records, " bad records");
  return line;
}

void ConsoleProgress::OnProgress(const ShardStats& s, int64_t size_hint) {
  if (options_.quiet) return;
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_).count();
  if (options_.tty) {
    if (since < 0.2) return;
    std::fprintf(stderr, "\r\033[K%s", Line(s, size_hint).c_str());
    drew_ = true;
  } else {
    if (since < options_.log_interval_s) return;
    std::fprintf(stderr, "%s\n", Line(s, size_hint).c_str());
  }
  std::fflush(stderr);
  last_ = now;
}

void ConsoleProgress::Finish() {
  if (drew_) std::fprintf(stderr, "\r\033[K");
  drew_ = false;
}

std::string SummaryTable(const std::vector<ShardOutcome>& outcomes, int threads) {
  std::string out = absl::StrFormat("%-16s %-8s %11s %11s %14s %6s %9s %10s\n", "shard", "status",
                                    "input", "documents", "tokens", "bad", "seconds", "MB/s/core");
  ShardStats total;
  for (const ShardOutcome& o : outcomes) {
    const ShardStats& s = o.stats;
    const double per_core =
        s.seconds > 0 ? s.bytes_decompressed / 1e6 / s.seconds / std::max(1, threads) : 0;
    absl::StrAppendFormat(&out, "%-16s %-8s %11s %11d %14d %6d %9.1f %10.2f\n", o.name, o.status,
                          HumanBytes(s.bytes_in), s.documents, s.tokens, s.bad_records, s.seconds,
                          per_core);
    total.bytes_in += s.bytes_in;
    total.bytes_decompressed += s.bytes_decompressed;
    total.documents += s.documents;
    total.tokens += s.tokens;
    total.bad_records += s.bad_records;
    total.seconds += s.seconds;
  }
  if (outcomes.size() > 1) {
    const double per_core = total.seconds > 0 ? total.bytes_decompressed / 1e6 / total.seconds /
                                                    std::max(1, threads)
                                              : 0;
    absl::StrAppendFormat(&out, "%-16s %-8s %11s %11d %14d %6d %9.1f %10.2f\n", "total", "",
                          HumanBytes(total.bytes_in), total.documents, total.tokens,
                          total.bad_records, total.seconds, per_core);
  }
  return out;
}

}  // namespace pileprep::cli
