#include "jsonl/python_json.h"

#include <cstdint>
#include <cstring>
#include <string>

#include "jsonl/utf8.h"

namespace pileprep::internal {
namespace {

// Follows CPython's Modules/_json.c (scan_once_unicode, scanstring_unicode, _match_number_unicode)
// and Lib/json/decoder.py, including which position each error names.
class Scanner {
 public:
  static constexpr size_t kMaxIntDigits = 4300;

  Scanner(std::string_view doc, size_t max_depth) : s_(doc), max_depth_(max_depth) {}

  bool Load(const std::vector<std::string>& keys, PythonJsonResult* result) {
    size_t pos = SkipWhitespace(0);
    if (!Value(pos, 0, &result->top_type, nullptr, &keys, result)) return false;
    pos = SkipWhitespace(pos_);
    if (pos != s_.size()) return Fail("extra data", pos);
    return true;
  }

  const std::string& error() const { return error_; }

 private:
  static bool IsDigit(char c) { return c >= '0' && c <= '9'; }

  size_t SkipWhitespace(size_t pos) const {
    while (pos < s_.size() && IsJsonWhitespace(s_[pos])) ++pos;
    return pos;
  }

  // Python's column counts characters of the str json.loads was given, not bytes: each character
  // here is one UTF-8 lead byte (the line is valid UTF-8 by now, each invalid sequence one U+FFFD,
  // as Python's errors="replace" made it one character).
  bool Fail(std::string_view what, size_t pos) {
    size_t column = 1;
    for (size_t i = 0; i < pos && i < s_.size(); ++i) {
      column += (static_cast<unsigned char>(s_[i]) & 0xC0) != 0x80;
    }
    error_ = std::string(what) + " at column " + std::to_string(column);
    return false;
  }

  bool Match(size_t pos, std::string_view word) const {
    return s_.substr(pos, word.size()) == word;
  }

  // Parses the value starting at `pos` (whitespace already skipped); on success pos_ is just past
  // it. `text` receives a string's decoded value when not null. `keys`/`result` are set only at top
  // level.
  bool Value(size_t pos, size_t depth, JsonType* type, std::string* text,
             const std::vector<std::string>* keys, PythonJsonResult* result) {
    if (pos >= s_.size()) return Fail("expecting value", pos);
    switch (s_[pos]) {
      case '"':
        *type = JsonType::kString;
        return String(pos, text);
      case '{':
        *type = JsonType::kObject;
        if (depth >= max_depth_) return Fail("nesting too deep", pos);
        return Object(pos, depth + 1, keys, result);
      case '[':
        *type = JsonType::kArray;
        if (depth >= max_depth_) return Fail("nesting too deep", pos);
        return Array(pos, depth + 1);
      case 'n':
        if (Match(pos, "null")) return Literal(pos, 4, JsonType::kNull, type);
        break;
      case 't':
        if (Match(pos, "true")) return Literal(pos, 4, JsonType::kBoolean, type);
        break;
      case 'f':
        if (Match(pos, "false")) return Literal(pos, 5, JsonType::kBoolean, type);
        break;
      case 'N':
        if (Match(pos, "NaN")) return Literal(pos, 3, JsonType::kNumber, type);
        break;
      case 'I':
        if (Match(pos, "Infinity")) return Literal(pos, 8, JsonType::kNumber, type);
        break;
      case '-':
        if (Match(pos, "-Infinity")) return Literal(pos, 9, JsonType::kNumber, type);
        break;
      default:
        break;
    }
    *type = JsonType::kNumber;
    return Number(pos);
  }

  bool Literal(size_t pos, size_t n, JsonType t, JsonType* type) {
    *type = t;
    pos_ = pos + n;
    return true;
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)? ; a '.' or 'e' not followed by digits ends the
  // number before it (the next token then fails), as in Python.
  bool Number(size_t start) {
    size_t i = start;
    const size_t n = s_.size();
    if (i < n && s_[i] == '-') ++i;
    if (i < n && s_[i] == '0') {
      ++i;
    } else if (i < n && s_[i] >= '1' && s_[i] <= '9') {
      while (i < n && IsDigit(s_[i])) ++i;
    } else {
      return Fail("expecting value", start);
    }
    const size_t int_end = i;
    bool is_integer = true;
    if (i + 1 < n && s_[i] == '.' && IsDigit(s_[i + 1])) {
      is_integer = false;
      i += 2;
      while (i < n && IsDigit(s_[i])) ++i;
    }
    if (i < n && (s_[i] == 'e' || s_[i] == 'E')) {
      size_t e = i + 1;
      if (e < n && (s_[e] == '-' || s_[e] == '+')) ++e;
      if (e < n && IsDigit(s_[e])) {
        while (e < n && IsDigit(s_[e])) ++e;
        i = e;
        is_integer = false;
      }
    }
    // int() refuses more than sys.get_int_max_str_digits() (4300) digits since CPython 3.11
    // / 3.10.7, and json.loads lets that ValueError through.
    const size_t digits = int_end - start - (s_[start] == '-' ? 1 : 0);
    if (is_integer && digits > kMaxIntDigits)
      return Fail("integer with more than 4300 digits", start);
    pos_ = i;
    return true;
  }

  // `quote` is the position of the opening '"'.
  bool String(size_t quote, std::string* out) {
    const size_t n = s_.size();
    size_t i = quote + 1;
    while (true) {
      size_t run = i;
      while (i < n && s_[i] != '"' && s_[i] != '\\' && static_cast<unsigned char>(s_[i]) >= 0x20)
        ++i;
      if (out != nullptr) out->append(s_.data() + run, i - run);
      if (i >= n) return Fail("unterminated string starting", quote);
      const char c = s_[i];
      if (c == '"') {
        pos_ = i + 1;
        return true;
      }
      if (c != '\\') return Fail("invalid control character", i);
      if (i + 1 >= n) return Fail("unterminated string starting", quote);
      const char e = s_[i + 1];
      if (e != 'u') {
        char decoded;
        switch (e) {
          case '"':
            decoded = '"';
            break;
          case '\\':
            decoded = '\\';
            break;
          case '/':
            decoded = '/';
            break;
          case 'b':
            decoded = '\b';
            break;
          case 'f':
            decoded = '\f';
            break;
          case 'n':
            decoded = '\n';
            break;
          case 'r':
            decoded = '\r';
            break;
          case 't':
            decoded = '\t';
            break;
          default:
            return Fail("invalid \\escape", i);
        }
        if (out != nullptr) out->push_back(decoded);
        i += 2;
        continue;
      }
      // Python's column for a bad \u escape is its 'u' (for other escapes, the backslash).
      if (i + 6 >= n) return Fail("invalid \\uXXXX escape", i + 1);
      int cp = ParseHex4(s_.data() + i + 2);
      if (cp < 0) return Fail("invalid \\uXXXX escape", i + 1);
      i += 6;
      if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 < n && s_[i] == '\\' && s_[i + 1] == 'u') {
        const int low = ParseHex4(s_.data() + i + 2);
        if (low < 0) return Fail("invalid \\uXXXX escape", i + 1);
        if (low >= 0xDC00 && low <= 0xDFFF) {
          cp = 0x10000 + (((cp - 0xD800) << 10) | (low - 0xDC00));
          i += 6;
        }
      }
      if (out != nullptr)
        AppendUtf8(cp >= 0xD800 && cp <= 0xDFFF ? 0xFFFD : static_cast<uint32_t>(cp), out);
    }
  }

  bool Object(size_t brace, size_t depth, const std::vector<std::string>* keys,
              PythonJsonResult* result) {
    size_t pos = SkipWhitespace(brace + 1);
    if (pos < s_.size() && s_[pos] == '}') {
      pos_ = pos + 1;
      return true;
    }
    std::string key;
    std::string value_text;
    while (true) {
      if (pos >= s_.size() || s_[pos] != '"') {
        return Fail("expecting property name enclosed in double quotes", pos);
      }
      key.clear();
      if (!String(pos, keys != nullptr ? &key : nullptr)) return false;
      pos = SkipWhitespace(pos_);
      if (pos >= s_.size() || s_[pos] != ':') return Fail("expecting ':' delimiter", pos);
      pos = SkipWhitespace(pos + 1);
      bool wanted = false;
      if (keys != nullptr) {
        for (const std::string& k : *keys) wanted |= (k == key);
      }
      value_text.clear();
      JsonType type;
      if (!Value(pos, depth, &type, wanted ? &value_text : nullptr, nullptr, nullptr)) return false;
      if (wanted) {
        for (size_t k = 0; k < keys->size(); ++k) {
          if ((*keys)[k] != key) continue;
          PythonJsonResult::Field& f = result->fields[k];
          f.found = true;
          f.type = type;
          f.text = value_text;
        }
      }
      pos = SkipWhitespace(pos_);
      if (pos < s_.size() && s_[pos] == '}') {
        pos_ = pos + 1;
        return true;
      }
      if (pos >= s_.size() || s_[pos] != ',') return Fail("expecting ',' delimiter", pos);
      pos = SkipWhitespace(pos + 1);
    }
  }

  bool Array(size_t bracket, size_t depth) {
    size_t pos = SkipWhitespace(bracket + 1);
    if (pos < s_.size() && s_[pos] == ']') {
      pos_ = pos + 1;
      return true;
    }
    while (true) {
      JsonType type;
      if (!Value(pos, depth, &type, nullptr, nullptr, nullptr)) return false;
      pos = SkipWhitespace(pos_);
      if (pos < s_.size() && s_[pos] == ']') {
        pos_ = pos + 1;
        return true;
      }
      if (pos >= s_.size() || s_[pos] != ',') return Fail("expecting ',' delimiter", pos);
      pos = SkipWhitespace(pos + 1);
    }
  }

  std::string_view s_;
  size_t max_depth_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace

std::string_view JsonTypePhrase(JsonType type) {
  switch (type) {
    case JsonType::kNull:
      return "null";
    case JsonType::kBoolean:
      return "a boolean";
    case JsonType::kNumber:
      return "a number";
    case JsonType::kString:
      return "a string";
    case JsonType::kArray:
      return "an array";
    case JsonType::kObject:
      return "an object";
  }
  return "?";
}

void PythonJsonLoads(std::string_view doc, const std::vector<std::string>& keys, size_t max_depth,
                     PythonJsonResult* result) {
  result->ok = false;
  result->error.clear();
  // Fresh fields, not assigned over the old ones: assigned, each kept the capacity of the largest
  // text it ever held (a worker kept a huge document's memory after it).
  result->fields.clear();
  result->fields.resize(keys.size());
  // json.loads(str) refuses a leading BOM before looking at anything else.
  if (doc.substr(0, 3) == "\xEF\xBB\xBF") {
    result->error = "unexpected UTF-8 BOM at column 1";
    return;
  }
  Scanner scanner(doc, max_depth);
  if (!scanner.Load(keys, result)) {
    result->error = scanner.error();
    result->fields.clear();
    result->fields.resize(keys.size());
    return;
  }
  result->ok = true;
}

}  // namespace pileprep::internal
