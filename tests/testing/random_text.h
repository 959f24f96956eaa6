// Random UTF-8 text for differential tests of the GPT-2 pre-tokenizer and BPE: a seeded generator that
// mixes the whitespace set (all 25 White_Space code points and the look-alikes U+001C-001F, U+180E,
// U+FEFF, U+200B), letters and numbers of many scripts (Latin, Greek, Cyrillic, CJK, Hangul, Arabic,
// Devanagari, Thai, code points new in Unicode 15/16), emoji and ZWJ sequences, combining marks,
// apostrophes and contractions in both cases, ASCII digits and punctuation, random scalar values of any
// plane, and occasional long runs (1,000+ code points of one class).
//
//   RandomText gen(/*seed=*/42);
//   std::string s = gen.Next(/*max_atoms=*/24);
//
// Deterministic for a given seed (std::mt19937_64 with explicit arithmetic, no std distributions, so
// the same strings on every standard library). Always valid UTF-8. Not thread-safe.
#ifndef PILEPREP_TESTS_TESTING_RANDOM_TEXT_H_
#define PILEPREP_TESTS_TESTING_RANDOM_TEXT_H_

#include <cstdint>
#include <random>
#include <string>

namespace pileprep::testing {

class RandomText {
 public:
  explicit RandomText(uint64_t seed) : rng_(seed) {}

  // A string of 0..max_atoms atoms (an atom is a character, a short word, a contraction or a run).
  std::string Next(int max_atoms);
  // One atom.
  std::string Atom();
  // A run of `n` code points drawn from one class (letters of one script, digits, spaces, ...).
  std::string LongRun(int n);

  uint64_t Uniform(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

 private:
  uint32_t RandomScalar();
  std::mt19937_64 rng_;
};

// UTF-8 encoding of a Unicode scalar value.
std::string Utf8(uint32_t cp);

}  // namespace pileprep::testing

#endif  // PILEPREP_TESTS_TESTING_RANDOM_TEXT_H_
