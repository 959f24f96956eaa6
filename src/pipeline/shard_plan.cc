#include "pileprep/shard_plan.h"

#include <algorithm>
#include <charconv>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/ascii.h"

namespace pileprep {
namespace {

constexpr int kMaxFileNumber = 9999;

bool ParseNumber(std::string_view s, int* out) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  if (s.empty()) return false;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size() && *out >= 0 && *out <= kMaxFileNumber;
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseFileNumbers(std::string_view spec) {
  std::vector<int> out;
  // Debian's Abseil has its own string_view type: split by hand to stay with std::string_view.
  std::vector<std::string_view> parts;
  for (size_t pos = 0;;) {
    const size_t comma = spec.find(',', pos);
    parts.push_back(spec.substr(pos, comma == std::string_view::npos ? comma : comma - pos));
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  for (std::string_view part : parts) {
    const auto bad = [&] {
      return absl::InvalidArgumentError(absl::StrCat(
          "--files: cannot read \"", std::string(part), "\" in \"", std::string(spec),
          "\"; use numbers 0-", kMaxFileNumber, " and inclusive ranges, e.g. 0-29 or 0,3,5-7"));
    };
    const size_t dash = part.find('-');
    int lo, hi;
    if (dash == std::string_view::npos) {
      if (!ParseNumber(part, &lo)) return bad();
      hi = lo;
    } else if (!ParseNumber(part.substr(0, dash), &lo) || !ParseNumber(part.substr(dash + 1), &hi) ||
               hi < lo) {
      return bad();
    }
    for (int i = lo; i <= hi; ++i) out.push_back(i);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string ShardFileName(int number) { return absl::StrFormat("%02d.jsonl.zst", number); }

absl::StatusOr<ShardSource> ParseShardSource(std::string_view url) {
  if (url.empty()) return absl::InvalidArgumentError("--url is empty");
  std::string_view rest = url;
  if (rest.substr(0, 7) == "file://") {
    rest.remove_prefix(7);
    if (rest.empty() || rest.front() != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("--url ", std::string(url), ": a file:// URL needs an absolute path (file:///data/pile)"));
    }
    return ShardSource{SourceKind::kLocalDirectory, std::string(rest)};
  }
  const std::string lower = absl::AsciiStrToLower(std::string(url.substr(0, 8)));
  if (lower.rfind("http://", 0) == 0 || lower.rfind("https://", 0) == 0) {
    std::string base(url);
    if (base.back() != '/') base.push_back('/');
    return ShardSource{SourceKind::kHttp, base};
  }
  if (const size_t colon = url.find("://"); colon != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--url ", std::string(url), ": unsupported scheme \"", std::string(url.substr(0, colon)),
        "\"; use https://, http://, file:// or a local directory"));
  }
  return ShardSource{SourceKind::kLocalDirectory, std::string(url)};
}

std::string ShardInput(const ShardSource& source, int number) {
  std::string base = source.base;
  if (!base.empty() && base.back() != '/') base.push_back('/');
  return base + ShardFileName(number);
}

std::string ShardOutputPrefix(std::string_view output_dir, std::string_view prefix, int number,
                              std::string_view json_key) {
  std::string dir(output_dir);
  if (!dir.empty() && dir.back() != '/') dir.push_back('/');
  return absl::StrFormat("%s%s_%02d_%s_document", dir, std::string(prefix), number,
                         std::string(json_key));
}

}  // namespace pileprep
