// The JSON-lines stage: one document per line, `json.loads(line)[key]` as Megatron's
// preprocess_data.py does it, plus pileprep's policies for damaged input (docs/gpt2.md §4,
// tests/data/bad/README.md).
//
//   JsonRecordParser parser({.json_keys = {"text"}});     // one per thread
//   ForEachLine(chunk, [&](std::string_view line) {
//     JsonRecordParser::Result r = parser.Parse(line);
//     if (r.ok) {
//       Tokenize(parser.texts()[0]);  // valid UTF-8, valid until the next Parse()
//     } else {
//       CountBad(r.kind, r.detail);
//     }
//   });
//
// Lines. Split on '\n' only; one trailing '\r' is removed (CRLF files equal their LF twins). A last
// line without '\n' counts. A lone '\r' elsewhere is not a line break, where Python's universal
// newlines split: a line holding two records joined by one is one bad line here and two documents
// for Megatron (a file with lone-CR line ends is one long bad line); a '\r' used as whitespace
// inside a record leaves a document here where Megatron sees two bad lines; "\r\r\n" ends a line
// here where Megatron also sees a blank one (a bad record). JSON writers put a raw '\r' only in
// CRLF line ends. No line-length
// limit other than JsonlOptions::max_line_bytes (default: the parser's 4 GiB ceiling).
//
// What a record becomes, checked in this order:
//   1. Empty, or only JSON whitespace (' ', '\t', '\r', '\n')             -> kBlankLine.
//   2. Raw invalid UTF-8: each maximal invalid subsequence becomes U+FFFD, exactly Python's
//      `bytes.decode('utf-8', 'replace')`, counted. Happens before JSON parsing, so a bad byte
//      inside a key makes that key not match.
//   3. Escaped lone or misordered UTF-16 surrogates (`\ud800`, `\udc00`, `\udc00\ud800`, a high
//      one not followed by a low `\u` escape) each become U+FFFD, counted; a proper high+low pair
//      is one code point (Python would keep the lone surrogate and Megatron would crash encoding
//      it).
//   4. Anything Python's `json.loads` (strict=True) rejects                -> kInvalidJson. That
//      includes raw control characters U+0000..U+001F inside strings (Python's strict mode rejects
//      them, as does RFC 8259; the README counts agree) and a leading UTF-8 BOM. Python's
//      extensions are accepted like Python does: NaN, Infinity, -Infinity and numbers of any
//      exponent; an integer of more than 4,300 digits is invalid, as Python 3.11's int conversion
//      limit makes it. Nesting deeper than 1024 is invalid (Python raises RecursionError near 1000;
//      Megatron would crash).
//   5. Top level not an object                                              -> kNotAnObject.
//   6. A requested key absent (keys are compared after unescaping, `"te\u0078t"` is "text")
//                                                                           -> kMissingKey.
//   7. A requested key's value not a string (number, null, bool, array, object) -> kNotAString.
//      "" is a valid (empty) document. Duplicate keys: the last one wins, as in json.loads.
//   8. A line longer than max_line_bytes (before or after U+FFFD repair)    -> kLineTooLong. Unlike
//      the others this is a resource limit: JsonlReader fails with an error, and the pipeline
//      should too.
// Texts are returned exactly as decoded (no normalization), always valid UTF-8; they may contain
// U+0000.
//
// Implementation: simdjson's DOM parser (validates the whole document, UTF-8 included). Lines
// simdjson rejects are re-checked by a small exact emulation of Python's json scanner, which
// settles the verdict and supplies a Python-like message ("expecting ',' delimiter at column 27";
// columns count characters from 1, as Python's: an invalid UTF-8 sequence is one). ParsePadded
// first offers the line, where it lies, to a one-pass scanner that settles plain records (RFC 8259
// objects, valid UTF-8, nothing to repair: in practice every line of a real shard) and declines
// everything else, then to simdjson where it lies, and takes the general path only when simdjson
// refuses it. Every path gives the same verdicts and texts.
#ifndef PILEPREP_JSONL_H_
#define PILEPREP_JSONL_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace pileprep {

struct JsonlOptions {
  // Top-level keys whose string values are the documents (Megatron --json-keys), at least one
  // (RunPipeline refuses none). A record is good only if every key is present with a string value.
  std::vector<std::string> json_keys = {"text"};
  // More bad records than this fail the shard (JsonlReader returns kDataLoss); -1 = unlimited.
  int64_t max_bad_records = 1000;
  // Longest line accepted, in bytes, before and after U+FFFD repair; at most the parser's ceiling
  // (0xFFFFFFFF). Memory use is a small multiple of the longest line.
  uint64_t max_line_bytes = 0xFFFFFFFFull;
  // Names the input in error messages ("00.jsonl.zst: line 12: ...").
  std::string source_name = "<input>";
};

enum class BadRecordKind {
  kBlankLine,
  kInvalidJson,
  kNotAnObject,
  kMissingKey,
  kNotAString,
  kLineTooLong
};

// "blank line", "invalid JSON", "not an object", "missing key", "not a string", "line too long".
std::string_view BadRecordKindName(BadRecordKind kind);

// "00.jsonl.zst: line 12: invalid JSON: expecting ',' delimiter at column 27".
std::string BadRecordMessage(std::string_view source_name, uint64_t line_number, BadRecordKind kind,
                             std::string_view detail);

// Calls f(std::string_view line) for each line of `chunk` ('\n' removed, one trailing '\r'
// removed). A final piece without '\n' is a line too unless empty. The views point into `chunk`.
template <typename F>
void ForEachLine(std::string_view chunk, F&& f) {
  const char* p = chunk.data();
  const char* const end = p + chunk.size();
  while (p < end) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
    const char* line_end = nl != nullptr ? nl : end;
    size_t n = static_cast<size_t>(line_end - p);
    if (n > 0 && p[n - 1] == '\r') --n;
    f(std::string_view(p, n));
    if (nl == nullptr) break;
    p = nl + 1;
  }
}

// Parses one JSON line into the texts of the requested keys.
//
// Thread model: not thread-safe; use one parser per thread. It owns simdjson's parser and scratch
// buffers, reused from line to line; they grow to the current line (simdjson's DOM needs about 14
// bytes per input byte) and, above 32 MiB, are released again at the next ordinary line. Every
// outcome of a line is a Result; the one exception is std::bad_alloc, when the buffers for a long
// line cannot be had (ulimit -v, overcommit off), which JsonlReader::Feed passes on too
// (RunPipeline turns it into the input's ResourceExhausted error).
class JsonRecordParser {
 public:
  explicit JsonRecordParser(JsonlOptions options = {});
  ~JsonRecordParser();
  JsonRecordParser(const JsonRecordParser&) = delete;
  JsonRecordParser& operator=(const JsonRecordParser&) = delete;

  struct Result {
    bool ok = false;
    BadRecordKind kind{};  // when !ok
    // When !ok: "expecting ',' delimiter at column 27", "key \"text\" is a number", ...
    std::string detail;
    uint64_t replaced_invalid_utf8 = 0;     // U+FFFD substitutions in this line (raw bad bytes)
    uint64_t replaced_lone_surrogates = 0;  // U+FFFD substitutions in this line (surrogate escapes)
  };

  // `line` excludes '\n'; a trailing '\r' is tolerated. It need not outlive the call.
  Result Parse(std::string_view line);

  // Parse(), for a line followed in memory by at least kPadding readable, initialized bytes (any
  // values: the next lines of a batch, say). A line that is valid UTF-8 without lone surrogate
  // escapes (nearly all) is then parsed where it lies, not copied first. Same results as Parse().
  static constexpr size_t kPadding = 64;  // simdjson::SIMDJSON_PADDING
  // The parser's ceiling on JsonlOptions::max_line_bytes: a larger value is taken as this one.
  static constexpr uint64_t kMaxLineBytes = 0xFFFFFFFF;  // simdjson::SIMDJSON_MAXSIZE_BYTES
  Result ParsePadded(std::string_view line);

  // One text per json key, in json_keys order, after an ok Parse(); valid until the next Parse().
  const std::vector<std::string_view>& texts() const { return texts_; }
  // Cumulative over every Parse() (bad records included).
  uint64_t replaced_invalid_utf8() const { return replaced_invalid_utf8_; }
  uint64_t replaced_lone_surrogates() const { return replaced_lone_surrogates_; }
  const JsonlOptions& options() const { return options_; }
  // The longest line its buffers are sized for now (the scratch copy, simdjson's parser and
  // document, the Python emulation's texts): what a worker keeps between lines.
  size_t buffered_capacity() const;

 private:
  struct Impl;
  Result ParseImpl(std::string_view line, bool padded);
  JsonlOptions options_;
  std::unique_ptr<Impl> impl_;
  std::vector<std::string_view> texts_;
  uint64_t replaced_invalid_utf8_ = 0;
  uint64_t replaced_lone_surrogates_ = 0;
};

// Convenience push reader over a decompressed byte stream (any chunking): splits lines, numbers
// them from 1, parses each and calls back once per line, good or bad (blank lines included). For
// tests and simple embeddings; the pipeline uses ForEachLine + JsonRecordParser in parallel.
//
//   JsonlReader reader({.source_name = "00.jsonl.zst"});
//   auto cb = [&](const JsonlReader::Record& r) -> absl::Status { ...; return absl::OkStatus(); };
//   while (...) PILEPREP_RETURN_IF_ERROR(reader.Feed(bytes, cb));
//   PILEPREP_RETURN_IF_ERROR(reader.Finish(cb));
//
// Errors: whatever the callback returns (processing stops there); kDataLoss when bad records
// exceed max_bad_records (after the callback saw the one too many); kResourceExhausted for a line
// longer than max_line_bytes (the codes RunPipeline gives for the same). Messages name source_name and the line. After an error the reader
// must not be fed again. Thread model: one thread at a time.
class JsonlReader {
 public:
  struct Record {
    uint64_t line_number;
    bool ok;
    BadRecordKind kind;                          // when !ok
    std::string detail;                          // when !ok
    const std::vector<std::string_view>* texts;  // when ok; valid during the callback only
    uint64_t replaced_invalid_utf8;
    uint64_t replaced_lone_surrogates;
  };
  using Callback = absl::FunctionRef<absl::Status(const Record&)>;

  explicit JsonlReader(JsonlOptions options = {});
  ~JsonlReader();

  absl::Status Feed(std::string_view bytes, Callback cb);
  // Parses a last line without '\n', if any. Call once at end of input.
  absl::Status Finish(Callback cb);

  uint64_t num_lines() const { return line_number_; }
  uint64_t num_documents() const { return num_documents_; }
  uint64_t num_bad_records() const { return num_bad_records_; }
  const JsonRecordParser& parser() const { return parser_; }

 private:
  absl::Status ProcessLine(std::string_view line, Callback cb);
  absl::Status LineTooLongError(uint64_t line_number) const;

  JsonRecordParser parser_;
  std::string pending_;  // an incomplete last line
  uint64_t line_number_ = 0;
  uint64_t num_documents_ = 0;
  uint64_t num_bad_records_ = 0;
};

}  // namespace pileprep

#endif  // PILEPREP_JSONL_H_
