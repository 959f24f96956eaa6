// Byte-level helpers of the JSON-lines stage: UTF-8 repair and encoding, surrogate-escape
// rewriting, \u escape digits, JSON whitespace, JSON string quoting. Shared by the fast path
// (fast_json.cc), the Python emulation (python_json.cc) and jsonl.cc. Private to src/jsonl.
#ifndef PILEPREP_SRC_JSONL_UTF8_H_
#define PILEPREP_SRC_JSONL_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pileprep::internal {

// Appends `in` to `out` with each maximal invalid subsequence replaced by U+FFFD, exactly as
// Python's `bytes.decode('utf-8', 'replace')` (Unicode's "maximal subpart" practice). Returns the
// replacements.
uint64_t AppendUtf8Replacing(std::string_view in, std::string* out);

// A JSON string literal of `in`, quotes included: invalid UTF-8 becomes U+FFFD (as above) and
// control characters are escaped, so that a report always parses (validate's --json, the CLI's
// summaries and records, whatever bytes a path holds).
std::string JsonQuote(std::string_view in);

// Rewrites, in place and at equal length, each JSON escape of a lone or misordered UTF-16 surrogate
// (`\udXXX` not part of a high+low pair) to `\ufffd`. Escape-aware: `\\ud800` is an escaped
// backslash followed by text. Malformed escapes are left for the JSON parser to reject. Returns the
// rewrites. Reads up to 32 bytes past `size` (the caller's simdjson padding), never writes there.
uint64_t RewriteLoneSurrogateEscapes(char* data, size_t size);

// Writes code point `cp` (< 0x110000, not a surrogate) as UTF-8 at `out`; returns the end.
inline char* PutUtf8(uint32_t cp, char* out) {
  if (cp < 0x80) {
    *out++ = static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out++ = static_cast<char>(0xC0 | (cp >> 6));
    *out++ = static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out++ = static_cast<char>(0xE0 | (cp >> 12));
    *out++ = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out++ = static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out++ = static_cast<char>(0xF0 | (cp >> 18));
    *out++ = static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out++ = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out++ = static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// Appends code point `cp` (< 0x110000, not a surrogate) as UTF-8.
inline void AppendUtf8(uint32_t cp, std::string* out) {
  char buf[4];
  out->append(buf, static_cast<size_t>(PutUtf8(cp, buf) - buf));
}

// Hex digit values; -1 for every other byte, so that OR-ing four lookups is negative if any is.
struct HexDigitTable {
  int8_t v[256];
  constexpr HexDigitTable() : v() {
    for (int c = 0; c < 256; ++c) v[c] = -1;
    for (int c = '0'; c <= '9'; ++c) v[c] = static_cast<int8_t>(c - '0');
    for (int c = 'a'; c <= 'f'; ++c) v[c] = static_cast<int8_t>(c - 'a' + 10);
    for (int c = 'A'; c <= 'F'; ++c) v[c] = static_cast<int8_t>(c - 'A' + 10);
  }
};
inline constexpr HexDigitTable kHexDigit;

// Value of the 4 hex digits at p, or -1. Inline and without a branch per digit: the fast path
// decodes a \uXXXX escape every few bytes of non-English text.
__attribute__((always_inline)) inline int ParseHex4(const char* p) {
  const int a = kHexDigit.v[static_cast<unsigned char>(p[0])];
  const int b = kHexDigit.v[static_cast<unsigned char>(p[1])];
  const int c = kHexDigit.v[static_cast<unsigned char>(p[2])];
  const int d = kHexDigit.v[static_cast<unsigned char>(p[3])];
  if ((a | b | c | d) < 0) return -1;
  return (a << 12) | (b << 8) | (c << 4) | d;
}

// JSON's whitespace (RFC 8259, and Python's json module): space, \t, \n, \r.
inline bool IsJsonWhitespace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace pileprep::internal

#endif  // PILEPREP_SRC_JSONL_UTF8_H_
