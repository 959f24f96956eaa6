// Reference GPT-2 pre-tokenizer built on RE2, for differential tests of the hand-written one.
//
//   std::vector<std::string> pieces = pileprep::testing::Re2Pretokenize("I'm here");  // "I" "'m" " here"
//
// Implements the reference pattern of docs/gpt2.md §1
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with explicit Unicode 16.0 classes (built from ClassOfCodePoint, since RE2's \s is ASCII-only and its
// \p tables follow RE2's own Unicode version) and, since RE2 has no lookahead, `\s+(?!\S)|\s+` as
// "match \s+; if the run has two or more code points and does not end the text, give back its last code
// point". Slow (one RE2 match per piece); for tests only.
//
// Input must be valid UTF-8; a byte RE2 cannot match (invalid UTF-8) becomes a one-byte piece.
// Thread-safe (the compiled RE2 is built once and shared).
#ifndef PILEPREP_TESTS_TESTING_RE2_PRETOKENIZER_H_
#define PILEPREP_TESTS_TESTING_RE2_PRETOKENIZER_H_

#include <string>
#include <string_view>
#include <vector>

namespace pileprep::testing {

// Splits `text` into pre-tokens, in order; they concatenate back to `text`.
std::vector<std::string> Re2Pretokenize(std::string_view text);

// The RE2 pattern used (without the whitespace give-back rule), for diagnostics.
const std::string& Re2PretokenizerPattern();

}  // namespace pileprep::testing

#endif  // PILEPREP_TESTS_TESTING_RE2_PRETOKENIZER_H_
