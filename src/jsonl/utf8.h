// UTF-8 repair and surrogate-escape rewriting for the JSON-lines stage. Private to src/jsonl.
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

// Rewrites, in place and at equal length, each JSON escape of a lone or misordered UTF-16 surrogate
// (`\udXXX` not part of a high+low pair) to `\ufffd`. Escape-aware: `\\ud800` is an escaped
// backslash followed by text. Malformed escapes are left for the JSON parser to reject. Returns the
// rewrites. Reads up to 32 bytes past `size` (the caller's simdjson padding), never writes there.
uint64_t RewriteLoneSurrogateEscapes(char* data, size_t size);

// Appends code point `cp` (< 0x110000, not a surrogate) as UTF-8.
void AppendUtf8(uint32_t cp, std::string* out);

// Value of the 4 hex digits at p, or -1.
int ParseHex4(const char* p);

}  // namespace pileprep::internal

#endif  // PILEPREP_SRC_JSONL_UTF8_H_
