// An exact emulation of Python's `json.loads` (strict=True, the C scanner of CPython 3.11) for one
// line: it decides acceptance and decodes the top-level string values of the requested keys.
// The fast paths (fast_json.h, then simdjson) go first; this settles the lines simdjson rejects (Python also accepts NaN,
// Infinity, -Infinity and numbers of any size) and words their error messages. Private to
// src/jsonl.
#ifndef PILEPREP_SRC_JSONL_PYTHON_JSON_H_
#define PILEPREP_SRC_JSONL_PYTHON_JSON_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace pileprep::internal {

enum class JsonType { kNull, kBoolean, kNumber, kString, kArray, kObject };

// "null", "a boolean", "a number", "a string", "an array", "an object".
std::string_view JsonTypePhrase(JsonType type);

struct PythonJsonResult {
  bool ok = false;
  std::string error;    // when !ok, e.g. "expecting ',' delimiter at column 27"
  JsonType top_type{};  // when ok
  struct Field {
    bool found = false;
    JsonType type{};
    std::string text;  // when type == kString; lone surrogates become U+FFFD
  };
  std::vector<Field>
      fields;  // when ok and top_type == kObject: one per key, the last occurrence wins
};

// `doc` must be valid UTF-8. Nesting deeper than `max_depth` arrays/objects is rejected.
void PythonJsonLoads(std::string_view doc, const std::vector<std::string>& keys, size_t max_depth,
                     PythonJsonResult* result);

}  // namespace pileprep::internal

#endif  // PILEPREP_SRC_JSONL_PYTHON_JSON_H_
