// The JSON-lines stage's fast path: one pass over a line that is plainly a well-formed JSON object,
// unescaping only the values of the wanted keys. Private to src/jsonl.
//
// Why: on The Pile the DOM parse cost about as much per byte as a fifth of the tokenizer, and nearly
// all of it went to unescaping the "text" value (json.dumps writes every non-ASCII character as a
// \uXXXX escape and every newline as \n: about one escape per 12 bytes on the sample corpus) and to
// building a tape of values nobody reads. This scanner validates the whole line in the same pass
// and writes only the wanted strings.
//
// It decides only what it is sure of. It returns true for a line that is, byte for byte, an RFC 8259
// object (strict json.loads accepts every RFC 8259 text, except integers of more than 4300 digits,
// CPython's int limit, and nesting past its recursion limit: numbers over 256 bytes and nesting past
// kMaxDepth are declined) in valid UTF-8, with no lone surrogate escape, no top-level key spelled with
// an escape (nested keys may be), and every occurrence of each wanted key a string (a non-string
// one, even if a later string overrides it, is declined). Anything else (an error to word, a repair to make, NaN, a huge number) returns false
// and the caller takes the general path, whose verdict it would have reached anyway. For the lines it
// accepts, the texts are exactly json.loads's: last occurrence of a key wins, escapes decoded,
// surrogate pairs joined.
#ifndef PILEPREP_SRC_JSONL_FAST_JSON_H_
#define PILEPREP_SRC_JSONL_FAST_JSON_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace pileprep::internal {

class FastJsonExtractor {
 public:
  // Bytes after a line that must be readable (any values): the scanner reads 16 bytes at a time.
  static constexpr size_t kReadPadding = 16;
  static constexpr size_t kMaxDepth = 64;

  // See above. `line` must be followed by kReadPadding readable bytes. The decoded values are written
  // to `storage`, which must hold line.size() + kReadPadding bytes (decoding never lengthens a
  // string; the scanner writes 16 bytes at a time) and not overlap the line. On true, texts() holds
  // one text per key, in `keys` order, in `storage`; valid until the next call or until `storage`
  // changes.
  bool Extract(std::string_view line, const std::vector<std::string>& keys, char* storage);
  const std::vector<std::string_view>& texts() const { return texts_; }

 private:
  std::vector<std::string_view> texts_;
  std::vector<size_t> begin_, size_;
};

}  // namespace pileprep::internal

#endif  // PILEPREP_SRC_JSONL_FAST_JSON_H_
