#include "pileprep/jsonl.h"

#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>

#include "jsonl/fast_json.h"
#include "jsonl/python_json.h"
#include "jsonl/utf8.h"
#include "tokenizer/huge_page_array.h"

namespace pileprep {
namespace {

// simdjson's DOM default; the Python emulation uses the same limit. (simdjson counts a level more
// strictly, 1023 non-empty ones; a line it refuses goes on to the emulation, which decides.)
constexpr size_t kMaxDepth = simdjson::DEFAULT_MAX_DEPTH;
constexpr size_t kInitialCapacity = size_t{1} << 16;
constexpr size_t kKeepBytes = size_t{32} << 20;

// Debian's Abseil has its own string_view, which absl::StrCat will not take from std::string_view.
std::string Cat(std::initializer_list<std::string_view> parts) {
  size_t size = 0;
  for (std::string_view part : parts) size += part.size();
  std::string out;
  out.reserve(size);
  for (std::string_view part : parts) out.append(part);
  return out;
}

std::string Num(uint64_t n) { return std::to_string(n); }

std::string_view DomTypePhrase(simdjson::dom::element_type type) {
  using T = simdjson::dom::element_type;
  switch (type) {
    case T::ARRAY:
      return "an array";
    case T::OBJECT:
      return "an object";
    case T::INT64:
    case T::UINT64:
    case T::DOUBLE:
      return "a number";
    case T::STRING:
      return "a string";
    case T::BOOL:
      return "a boolean";
    case T::NULL_VALUE:
      return "null";
  }
  return "?";
}

std::string QuotedKey(std::string_view key) { return Cat({"key \"", key, "\""}); }

}  // namespace

std::string_view BadRecordKindName(BadRecordKind kind) {
  switch (kind) {
    case BadRecordKind::kBlankLine:
      return "blank line";
    case BadRecordKind::kInvalidJson:
      return "invalid JSON";
    case BadRecordKind::kNotAnObject:
      return "not an object";
    case BadRecordKind::kMissingKey:
      return "missing key";
    case BadRecordKind::kNotAString:
      return "not a string";
    case BadRecordKind::kLineTooLong:
      return "line too long";
  }
  return "unknown";
}

std::string BadRecordMessage(std::string_view source_name, uint64_t line_number, BadRecordKind kind,
                             std::string_view detail) {
  return Cat({source_name, ": line ", Num(line_number), ": ", BadRecordKindName(kind),
              detail.empty() ? "" : ": ", detail});
}

struct JsonRecordParser::Impl {
  internal::FastJsonExtractor fast;
  simdjson::dom::parser parser;
  // The line plus SIMDJSON_PADDING readable bytes, as simdjson requires (sized by Reserve, below);
  // the fast path's decoded texts go here too. On 2 MB pages from 1 MB on (HugePageArray): grown to
  // a document of 3 MB, malloc's 4 KB pages were 850 page faults per worker, a third of a 600 MB
  // job's faults once the batches were on huge pages (each ~10 us on this project's VM).
  // Its capacity(): 0 until made, and after a Reset that threw.
  internal::HugePageArray<char> padded;
  std::string repaired;  // the line after U+FFFD repair, when it had invalid UTF-8
  internal::PythonJsonResult fallback;
  std::vector<simdjson::dom::element> values;  // per key: its last value in the object
  std::vector<bool> found;

  Impl() : parser(simdjson::SIMDJSON_MAXSIZE_BYTES) {}

  // Buffers grow to the current line with 1/8 headroom; past kKeepBytes they are released again at
  // the next ordinary line, so one huge document does not pin its memory (simdjson's DOM takes
  // about 14 bytes per input byte) in every worker for the rest of the run.
  // Headroom never takes a buffer past kKeepBytes for a line within it: the next such line would
  // release and remake it.
  static size_t Grown(size_t size) {
    const size_t roomy = size + size / 8;
    return std::max(size <= kKeepBytes ? std::min(roomy, kKeepBytes) : roomy, kInitialCapacity);
  }
  static bool Shrink(size_t capacity, size_t size) {
    return capacity > kKeepBytes && size <= kKeepBytes;
  }

  char* Reserve(size_t size) {
    const size_t needed = size + simdjson::SIMDJSON_PADDING;
    if (needed > padded.capacity() || Shrink(padded.capacity(), needed)) {
      padded.Reset(Grown(needed));
    }
    return padded.data();
  }

  simdjson::error_code EnsureCapacity(size_t size) {
    if (size <= parser.capacity() && !Shrink(parser.capacity(), size)) return simdjson::SUCCESS;
    const size_t capacity = std::min<size_t>(Grown(size), simdjson::SIMDJSON_MAXSIZE_BYTES);
    if (Shrink(parser.capacity(), size)) {
      // parser.allocate sizes the parser's own buffers only; its document's tape and strings (13
      // bytes per input byte, grown by parse, never shrunk) would stay as large as the largest
      // line.
      if (const auto e = parser.doc.allocate(capacity); e != simdjson::SUCCESS) return e;
    }
    return parser.allocate(capacity, kMaxDepth);
  }

  // The verdict on a record simdjson parsed: its object's texts, or why it is not a document.
  void FromDom(const simdjson::dom::element& root, const std::vector<std::string>& keys,
               std::vector<std::string_view>* texts, JsonRecordParser::Result* result) {
    if (root.type() != simdjson::dom::element_type::OBJECT) {
      result->kind = BadRecordKind::kNotAnObject;
      result->detail = Cat({"top level is ", DomTypePhrase(root.type())});
      return;
    }
    simdjson::dom::object object = root.get_object().value_unsafe();
    // dom::object::at_key() finds the first duplicate; json.loads keeps the last.
    values.assign(keys.size(), simdjson::dom::element());
    found.assign(keys.size(), false);
    for (simdjson::dom::key_value_pair field : object) {
      for (size_t k = 0; k < keys.size(); ++k) {
        if (field.key != keys[k]) continue;
        found[k] = true;
        values[k] = field.value;
      }
    }
    for (size_t k = 0; k < keys.size(); ++k) {
      if (!found[k]) {
        result->kind = BadRecordKind::kMissingKey;
        result->detail = Cat({"no ", QuotedKey(keys[k])});
        return;
      }
    }
    for (size_t k = 0; k < keys.size(); ++k) {
      if (values[k].type() != simdjson::dom::element_type::STRING) {
        result->kind = BadRecordKind::kNotAString;
        result->detail = Cat({QuotedKey(keys[k]), " is ", DomTypePhrase(values[k].type())});
        return;
      }
    }
    for (const simdjson::dom::element& value : values)
      texts->push_back(value.get_string().value_unsafe());
    result->ok = true;
  }
};

JsonRecordParser::JsonRecordParser(JsonlOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  static_assert(kMaxLineBytes == simdjson::SIMDJSON_MAXSIZE_BYTES);
  options_.max_line_bytes = std::min<uint64_t>(options_.max_line_bytes, kMaxLineBytes);
  texts_.reserve(options_.json_keys.size());
}

JsonRecordParser::~JsonRecordParser() = default;

size_t JsonRecordParser::buffered_capacity() const {
  size_t most =
      std::max({impl_->padded.capacity(), impl_->parser.capacity(), impl_->parser.doc.capacity()});
  for (const auto& field : impl_->fallback.fields) most = std::max(most, field.text.capacity());
  return most;
}

static_assert(JsonRecordParser::kPadding == simdjson::SIMDJSON_PADDING);

JsonRecordParser::Result JsonRecordParser::Parse(std::string_view line) {
  return ParseImpl(line, /*padded=*/false);
}

JsonRecordParser::Result JsonRecordParser::ParsePadded(std::string_view line) {
  return ParseImpl(line, /*padded=*/true);
}

JsonRecordParser::Result JsonRecordParser::ParseImpl(std::string_view line, bool padded) {
  Result result;
  texts_.clear();
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);

  const auto too_long = [&](size_t size) {
    result.kind = BadRecordKind::kLineTooLong;
    result.detail =
        Cat({Num(size), " bytes exceed max_line_bytes = ", Num(options_.max_line_bytes)});
    return result;
  };
  if (line.size() > options_.max_line_bytes) return too_long(line.size());

  size_t first = 0;
  while (first < line.size() && internal::IsJsonWhitespace(line[first])) ++first;
  if (first == line.size()) {
    result.kind = BadRecordKind::kBlankLine;
    return result;
  }

  Impl& impl = *impl_;
  const std::vector<std::string>& keys = options_.json_keys;
  // Nearly every line of a real shard is a plain object the fast path settles alone (see
  // jsonl/fast_json.h); it declines everything else, which then takes the paths below.
  // Its decoded texts go to the buffer the general path copies lines into: unused when it succeeds.
  static_assert(kPadding >= internal::FastJsonExtractor::kReadPadding);
  static_assert(simdjson::SIMDJSON_PADDING >= internal::FastJsonExtractor::kReadPadding);
  if (padded && impl.fast.Extract(line, keys, impl.Reserve(line.size()))) {
    texts_ = impl.fast.texts();
    result.ok = true;
    return result;
  }
  // json.loads refuses a line that starts with a UTF-8 BOM ("Unexpected UTF-8 BOM"), and so does
  // Debian 12's simdjson (3.0); simdjson 3.6 and later skip one. Such a line goes to the Python
  // path whatever the version, so that a build against a newer simdjson does not take it for a
  // document (the BOM tests of jsonl_test and hardening_test would catch that build).
  const bool bom = line.substr(0, 3) == "\xEF\xBB\xBF";
  // In place: simdjson checks the UTF-8 itself and refuses every lone or misordered surrogate escape
  // (SimdjsonQuirks.DomRejectsEveryLoneOrMisorderedSurrogateEscape), so a line it accepts has
  // nothing to repair or rewrite, and the copy below would hold the very same bytes. Any refusal
  // takes the general path, which repairs, rewrites and explains.
  if (padded && !bom && impl.EnsureCapacity(line.size()) == simdjson::SUCCESS) {
    simdjson::dom::element root;
    if (impl.parser.parse(line.data(), line.size(), /*realloc_if_needed=*/false).get(root) ==
        simdjson::SUCCESS) {
      impl.FromDom(root, keys, &texts_, &result);
      return result;
    }
  }

  if (!simdjson::validate_utf8(line.data(), line.size())) {
    if (Impl::Shrink(impl.repaired.capacity(), line.size())) std::string().swap(impl.repaired);
    impl.repaired.clear();
    result.replaced_invalid_utf8 = internal::AppendUtf8Replacing(line, &impl.repaired);
    replaced_invalid_utf8_ += result.replaced_invalid_utf8;
    line = impl.repaired;
    if (line.size() > options_.max_line_bytes) return too_long(line.size());
  }

  char* buf = impl.Reserve(line.size());
  std::memcpy(buf, line.data(), line.size());
  std::memset(buf + line.size(), 0, simdjson::SIMDJSON_PADDING);
  result.replaced_lone_surrogates = internal::RewriteLoneSurrogateEscapes(buf, line.size());
  replaced_lone_surrogates_ += result.replaced_lone_surrogates;
  const std::string_view doc(buf, line.size());

  simdjson::dom::element root;
  simdjson::error_code error = bom ? simdjson::UTF8_ERROR : impl.EnsureCapacity(doc.size());
  if (error == simdjson::SUCCESS) {
    error = impl.parser.parse(buf, doc.size(), /*realloc_if_needed=*/false).get(root);
  }
  if (error == simdjson::SUCCESS) {
    impl.FromDom(root, keys, &texts_, &result);
    return result;
  }

  // simdjson refused: Python decides (it also takes NaN, Infinity and numbers of any size), and
  // words the message. Rare, so the slow exact scanner is fine here.
  internal::PythonJsonResult& py = impl.fallback;
  internal::PythonJsonLoads(doc, keys, kMaxDepth, &py);
  if (!py.ok) {
    result.kind = BadRecordKind::kInvalidJson;
    result.detail = py.error;
    return result;
  }
  if (py.top_type != internal::JsonType::kObject) {
    result.kind = BadRecordKind::kNotAnObject;
    result.detail = Cat({"top level is ", internal::JsonTypePhrase(py.top_type)});
    return result;
  }
  for (size_t k = 0; k < keys.size(); ++k) {
    if (!py.fields[k].found) {
      result.kind = BadRecordKind::kMissingKey;
      result.detail = Cat({"no ", QuotedKey(keys[k])});
      return result;
    }
  }
  for (size_t k = 0; k < keys.size(); ++k) {
    if (py.fields[k].type != internal::JsonType::kString) {
      result.kind = BadRecordKind::kNotAString;
      result.detail =
          Cat({QuotedKey(keys[k]), " is ", internal::JsonTypePhrase(py.fields[k].type)});
      return result;
    }
  }
  for (const internal::PythonJsonResult::Field& field : py.fields) texts_.push_back(field.text);
  result.ok = true;
  return result;
}

JsonlReader::JsonlReader(JsonlOptions options) : parser_(std::move(options)) {}

JsonlReader::~JsonlReader() = default;

absl::Status JsonlReader::LineTooLongError(uint64_t line_number) const {
  return absl::ResourceExhaustedError(Cat(
      {parser_.options().source_name, ": line ", Num(line_number), ": line too long: more than ",
       Num(parser_.options().max_line_bytes), " bytes (max_line_bytes)"}));
}

absl::Status JsonlReader::ProcessLine(std::string_view line, Callback cb) {
  ++line_number_;
  JsonRecordParser::Result r = parser_.Parse(line);
  const JsonlOptions& options = parser_.options();
  if (!r.ok && r.kind == BadRecordKind::kLineTooLong) return LineTooLongError(line_number_);
  Record record{line_number_,
                r.ok,
                r.kind,
                std::move(r.detail),
                r.ok ? &parser_.texts() : nullptr,
                r.replaced_invalid_utf8,
                r.replaced_lone_surrogates};
  if (record.ok) {
    ++num_documents_;
  } else {
    ++num_bad_records_;
  }
  absl::Status status = cb(record);
  if (!status.ok()) return status;
  if (!record.ok && options.max_bad_records >= 0 &&
      num_bad_records_ > static_cast<uint64_t>(options.max_bad_records)) {
    return absl::DataLossError(
        Cat({options.source_name, ": line ", Num(line_number_), ": more than ",
             std::to_string(options.max_bad_records), " bad records (max_bad_records); the last: ",
             BadRecordKindName(record.kind), record.detail.empty() ? "" : ": ", record.detail}));
  }
  return absl::OkStatus();
}

absl::Status JsonlReader::Feed(std::string_view bytes, Callback cb) {
  const uint64_t max_line_bytes = parser_.options().max_line_bytes;
  const char* p = bytes.data();
  const char* const end = p + bytes.size();
  if (!pending_.empty()) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', bytes.size()));
    const size_t take = static_cast<size_t>((nl != nullptr ? nl : end) - p);
    // +1: a '\r' that a later '\n' turns into CRLF is not part of the line.
    if (pending_.size() + take > max_line_bytes + 1) return LineTooLongError(line_number_ + 1);
    pending_.append(p, take);
    if (nl == nullptr) return absl::OkStatus();
    absl::Status status = ProcessLine(pending_, cb);
    pending_.clear();
    if (!status.ok()) return status;
    p = nl + 1;
  }
  while (p < end) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
    if (nl == nullptr) {
      if (static_cast<uint64_t>(end - p) > max_line_bytes + 1)
        return LineTooLongError(line_number_ + 1);
      pending_.assign(p, static_cast<size_t>(end - p));
      break;
    }
    std::string_view line(p, static_cast<size_t>(nl - p));
    absl::Status status = ProcessLine(line, cb);
    if (!status.ok()) return status;
    p = nl + 1;
  }
  return absl::OkStatus();
}

absl::Status JsonlReader::Finish(Callback cb) {
  if (pending_.empty()) return absl::OkStatus();
  std::string line = std::move(pending_);
  pending_.clear();
  return ProcessLine(line, cb);
}

}  // namespace pileprep
