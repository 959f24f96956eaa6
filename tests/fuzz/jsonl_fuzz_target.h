// The JSON-lines stage's fuzz target (JsonRecordParser, JsonlReader), shared by the libFuzzer binary
// (tests/fuzz/jsonl_fuzzer.cc) and the corpus replay gtest (tests/unit/fuzz_corpus_replay_test.cc).
//
// Input layout: byte 0 picks the options (bit 0: keys {"text"} or {"text", "meta"}; bit 1: a small
// max_line_bytes of 64 instead of the default), byte 1 seeds the chunking, the rest is JSON lines.
// Oracles beyond "no crash, no out-of-bounds access, no stack overflow on deep nesting" (ASan):
//   - every accepted record's texts are valid UTF-8 (the stage's promise to the tokenizer), one
//     per key;
//   - parsing is deterministic: the same line parsed again (after other lines) gives the same verdict
//     and texts;
//   - ParsePadded, on the line where it lies in the input (the pipeline's way), agrees with Parse;
//   - JsonlReader fed in pseudo-random chunks (1 byte to 4 KiB) gives exactly the records of
//     ForEachLine + JsonRecordParser over the whole input, with the same line numbers.
#ifndef PILEPREP_TESTS_FUZZ_JSONL_FUZZ_TARGET_H_
#define PILEPREP_TESTS_FUZZ_JSONL_FUZZ_TARGET_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "pileprep/jsonl.h"

namespace pileprep::fuzz {

inline bool IsValidUtf8ForFuzz(std::string_view s) {
  size_t i = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  while (i < s.size()) {
    const unsigned c = p[i];
    size_t n;
    uint32_t cp, min;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { n = 1; cp = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { n = 2; cp = c & 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { n = 3; cp = c & 0x07; min = 0x10000; }
    else return false;
    if (i + n >= s.size()) return false;  // the continuation bytes i+1..i+n must exist
    for (size_t k = 1; k <= n; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

struct JsonlFuzzRecord {
  uint64_t line;
  bool ok;
  BadRecordKind kind;
  std::vector<std::string> texts;
  bool operator==(const JsonlFuzzRecord& o) const {
    return line == o.line && ok == o.ok && (ok || kind == o.kind) && texts == o.texts;
  }
};

inline int RunJsonlFuzzInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  JsonlOptions options;
  options.source_name = "fuzz.jsonl";
  options.max_bad_records = -1;
  if (data[0] & 1) options.json_keys = {"text", "meta"};
  if (data[0] & 2) options.max_line_bytes = 64;
  uint32_t state = data[1] * 2654435761u + 7;
  const std::string_view in(reinterpret_cast<const char*>(data) + 2, size - 2);

  // Reference: whole input, line by line. The padded copy puts kPadding bytes after the last line;
  // the other lines are followed by the input's next lines.
  std::vector<JsonlFuzzRecord> expected;
  JsonRecordParser parser(options), padded_parser(options);
  const std::string padded_input = std::string(in) + std::string(JsonRecordParser::kPadding, '}');
  uint64_t line_no = 0;
  ForEachLine(std::string_view(padded_input).substr(0, in.size()), [&](std::string_view line) {
    ++line_no;
    JsonRecordParser::Result r = parser.Parse(line);
    JsonlFuzzRecord rec{line_no, r.ok, r.kind, {}};
    JsonRecordParser::Result p = padded_parser.ParsePadded(line);
    if (p.ok != r.ok || p.kind != r.kind || p.detail != r.detail ||
        p.replaced_invalid_utf8 != r.replaced_invalid_utf8 ||
        p.replaced_lone_surrogates != r.replaced_lone_surrogates ||
        (r.ok && padded_parser.texts() != parser.texts())) {
      std::abort();
    }
    if (r.ok) {
      if (parser.texts().size() != options.json_keys.size()) std::abort();
      for (std::string_view t : parser.texts()) {
        if (!IsValidUtf8ForFuzz(t)) std::abort();  // the tokenizer is promised valid UTF-8
        rec.texts.emplace_back(t);
      }
    } else if (r.kind == BadRecordKind::kInvalidJson && r.detail.empty()) {
      std::abort();  // an invalid-JSON verdict always says why
    }
    expected.push_back(std::move(rec));
  });
  // Determinism: the first line again, after the parser saw all the others.
  if (!expected.empty()) {
    ForEachLine(in, [&, done = false](std::string_view line) mutable {
      if (done) return;
      done = true;
      JsonRecordParser::Result r = parser.Parse(line);
      JsonlFuzzRecord rec{1, r.ok, r.kind, {}};
      if (r.ok) for (std::string_view t : parser.texts()) rec.texts.emplace_back(t);
      if (!(rec == expected.front())) std::abort();
    });
  }

  // JsonlReader over random chunks. A line over max_line_bytes stops the reader with an error; the
  // records before it must still match.
  std::vector<JsonlFuzzRecord> got;
  JsonlReader reader(options);
  auto cb = [&](const JsonlReader::Record& r) -> absl::Status {
    JsonlFuzzRecord rec{r.line_number, r.ok, r.kind, {}};
    if (r.ok) for (std::string_view t : *r.texts) rec.texts.emplace_back(t);
    got.push_back(std::move(rec));
    return absl::OkStatus();
  };
  absl::Status s;
  size_t pos = 0;
  while (s.ok() && pos < in.size()) {
    state = state * 1664525u + 1013904223u;
    const uint32_t pick = state >> 24;
    size_t n = pick < 128 ? 1 + (pick & 15) : 1 + ((state >> 8) & 4095);
    n = n < in.size() - pos ? n : in.size() - pos;
    s = reader.Feed(in.substr(pos, n), cb);
    pos += n;
  }
  if (s.ok()) s = reader.Finish(cb);
  if (s.ok()) {
    if (got.size() != expected.size()) std::abort();
    for (size_t i = 0; i < got.size(); ++i) {
      if (!(got[i] == expected[i])) std::abort();
    }
  } else {
    if (s.message().empty()) std::abort();
    if (got.size() > expected.size()) std::abort();
    for (size_t i = 0; i < got.size(); ++i) {
      if (!(got[i] == expected[i])) std::abort();
    }
  }
  return 0;
}

}  // namespace pileprep::fuzz

#endif  // PILEPREP_TESTS_FUZZ_JSONL_FUZZ_TARGET_H_
