#include "testing/reference_bpe.h"

#include <cstdint>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "simdjson.h"
#include "testing/re2_pretokenizer.h"

namespace pileprep::testing {
namespace {

std::string Utf8(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// encoder.py: merge_str.split(). Python also splits on U+001C-001F, U+0085 and U+00A0, but none of them
// occurs in the byte alphabet (those bytes map to U+0100 and up), so ASCII whitespace is the same split.
std::vector<std::string> SplitWhitespace(std::string_view s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) ++i;
    size_t j = i;
    while (j < s.size() && !(s[j] == ' ' || s[j] == '\t' || s[j] == '\r' || s[j] == '\n')) ++j;
    if (j > i) out.emplace_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace

absl::StatusOr<ReferenceBpe> ReferenceBpe::Load(const std::string& dir) {
  ReferenceBpe bpe;

  // bytes_to_unicode(): printable bytes map to themselves, the others to 256, 257, ... in byte order.
  {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      bpe.byte_encoder_[b] = printable ? Utf8(b) : Utf8(256 + n++);
    }
  }

  const std::string encoder_path = dir + "/encoder.json";
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (auto error = parser.load(encoder_path).get(root); error) {
    return absl::InvalidArgumentError(absl::StrCat(encoder_path, ": ", simdjson::error_message(error)));
  }
  simdjson::dom::object object;
  if (auto error = root.get(object); error) {
    return absl::InvalidArgumentError(absl::StrCat(encoder_path, ": not a JSON object"));
  }
  for (auto field : object) {
    uint64_t id = 0;
    if (auto error = field.value.get(id); error || id > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat(encoder_path, ": entry \"", std::string(field.key), "\": id is not a uint32"));
    }
    bpe.encoder_[std::string(field.key)] = static_cast<uint32_t>(id);
  }

  const std::string merges_path = dir + "/vocab.bpe";
  auto merges = ReadFile(merges_path);
  if (!merges.ok()) return merges.status();
  // bpe_data.split('\n')[1:-1]
  std::vector<std::string_view> lines;
  {
    std::string_view rest = *merges;
    while (true) {
      const size_t nl = rest.find('\n');
      if (nl == std::string_view::npos) {
        lines.push_back(rest);
        break;
      }
      lines.push_back(rest.substr(0, nl));
      rest.remove_prefix(nl + 1);
    }
  }
  for (size_t i = 1; i + 1 < lines.size(); ++i) {
    std::vector<std::string> parts = SplitWhitespace(lines[i]);
    if (parts.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(merges_path, ": line ", i + 1, ": expected two symbols"));
    }
    // dict(zip(bpe_merges, range(len(bpe_merges)))): a repeated pair keeps its last rank. Keyed by
    // "A B" (symbols never hold a space: byte 0x20 is U+0120 in the byte alphabet).
    bpe.bpe_ranks_[parts[0] + " " + parts[1]] = static_cast<int>(i - 1);
  }
  return bpe;
}

std::vector<std::string> ReferenceBpe::Bpe(const std::vector<std::string>& initial) const {
  std::vector<std::string> word = initial;
  if (word.size() < 2) return word;
  std::string key;
  while (true) {
    // bigram = min(pairs, key=lambda pair: self.bpe_ranks.get(pair, float('inf'))), scanning the
    // adjacent pairs directly (the same minimum as over the set of pairs).
    const std::string* first = nullptr;
    const std::string* second = nullptr;
    int best_rank = std::numeric_limits<int>::max();
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      key.assign(word[i]).append(" ").append(word[i + 1]);
      auto it = bpe_ranks_.find(key);
      if (it != bpe_ranks_.end() && it->second < best_rank) {
        best_rank = it->second;
        first = &word[i];
        second = &word[i + 1];
      }
    }
    if (first == nullptr) break;
    const std::string a = *first;  // copies: `word` is rebuilt below
    const std::string b = *second;
    std::vector<std::string> new_word;
    size_t i = 0;
    while (i < word.size()) {
      if (word[i] == a && i + 1 < word.size() && word[i + 1] == b) {
        new_word.push_back(a + b);
        i += 2;
      } else {
        new_word.push_back(word[i]);
        i += 1;
      }
    }
    word = std::move(new_word);
    if (word.size() == 1) break;
  }
  return word;
}

std::vector<uint32_t> ReferenceBpe::EncodePiece(std::string_view piece) const {
  std::vector<std::string> word;
  word.reserve(piece.size());
  for (unsigned char b : piece) word.push_back(byte_encoder_[b]);
  std::vector<uint32_t> ids;
  for (const std::string& token : Bpe(word)) {
    auto it = encoder_.find(token);
    // encoder.py would raise KeyError; a sentinel keeps the differential test's diff readable.
    ids.push_back(it == encoder_.end() ? std::numeric_limits<uint32_t>::max() : it->second);
  }
  return ids;
}

std::vector<uint32_t> ReferenceBpe::Encode(std::string_view text) const {
  std::vector<uint32_t> ids;
  for (const std::string& piece : Re2Pretokenize(text)) {
    std::vector<uint32_t> piece_ids = EncodePiece(piece);
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
  }
  return ids;
}

}  // namespace pileprep::testing
