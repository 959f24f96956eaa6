// The hand-written pre-tokenizer against the RE2 reference (tests/testing/re2_pretokenizer.h) on
// thousands of generated strings.
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "testing/random_text.h"
#include "testing/re2_pretokenizer.h"
#include "tokenizer/pretokenizer.h"

namespace pileprep {
namespace {

using ::pileprep::internal::PretokenizeToVector;
using ::pileprep::testing::RandomText;
using ::pileprep::testing::Re2Pretokenize;
using ::pileprep::testing::Utf8;

std::vector<std::string> Fast(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view piece : PretokenizeToVector(text)) out.emplace_back(piece);
  return out;
}

// Escaped form for failure messages.
std::string Show(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string ShowPieces(const std::vector<std::string>& pieces) {
  std::string out = "[";
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i > 0) out += ", ";
    out += '"';
    out += Show(pieces[i]);
    out += '"';
  }
  return out + "]";
}

// Compares without flooding the log: reports the first differing piece.
::testing::AssertionResult SameSplit(std::string_view text) {
  const std::vector<std::string> want = Re2Pretokenize(text);
  const std::vector<std::string> got = Fast(text);
  if (got == want) return ::testing::AssertionSuccess();
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  auto window = [&](const std::vector<std::string>& v) {
    const size_t from = i >= 2 ? i - 2 : 0;
    return ShowPieces(std::vector<std::string>(v.begin() + std::min(from, v.size()),
                                               v.begin() + std::min(i + 3, v.size())));
  };
  std::string text_shown = Show(text.substr(0, 400));
  return ::testing::AssertionFailure()
         << "text (" << text.size() << " bytes): \"" << text_shown << "\"\nfirst difference at piece "
         << i << "\n  fast: " << window(got) << "\n  re2:  " << window(want);
}

TEST(PretokenizerDifferential, ReferenceReproducesTheDocumentedExamples) {
  // docs/gpt2.md §1 "Checked examples", for the reference itself.
  using V = std::vector<std::string>;
  EXPECT_EQ(Re2Pretokenize("a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(Re2Pretokenize("x   \n\ny"), (V{"x", "   \n", "\n", "y"}));
  EXPECT_EQ(Re2Pretokenize("tab\t\tend"), (V{"tab", "\t", "\t", "end"}));
  EXPECT_EQ(Re2Pretokenize("I'm   can't  "), (V{"I", "'m", "  ", " can", "'t", "  "}));
  EXPECT_EQ(Re2Pretokenize("'S 'LL"), (V{"'", "S", " '", "LL"}));
  EXPECT_EQ(Re2Pretokenize("  lead"), (V{" ", " lead"}));
  EXPECT_EQ(Re2Pretokenize("\u3000\u3000a"), (V{"\u3000", "\u3000", "a"}));
  EXPECT_EQ(Re2Pretokenize(""), V{});
  EXPECT_EQ(Re2Pretokenize(" "), V{" "});
  // U+FEFF is not whitespace: the blank line keeps its give-back, and the BOM is an "other" piece.
  EXPECT_EQ(Re2Pretokenize("\n\n\xEF\xBB\xBFUnicode"), (V{"\n", "\n", "\xEF\xBB\xBF", "Unicode"}));
}

TEST(PretokenizerDifferential, DocumentedExamples) {
  for (const char* text : {"a  b", "x   \n\ny", "tab\t\tend", "I'm   can't  ", "'S 'LL", "  lead",
                           "\u3000\u3000a", "", " ", "  ", "\n", "\n\n\xEF\xBB\xBFUnicode", "'", "'s",
                           "''s", " 's", "\n's", "'ll've", "a'", "' ", "a\r\nb", "x \xC2\xA0y"}) {
    EXPECT_TRUE(SameSplit(text));
  }
}

TEST(PretokenizerDifferential, EveryWhitespaceAndLookalikeInEveryPosition) {
  std::vector<uint32_t> chars = {0x09,   0x0A,   0x0B,   0x0C,   0x0D,   0x20,   0x85,   0xA0,
                                 0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006,
                                 0x2007, 0x2008, 0x2009, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F,
                                 0x3000, 0x1C,   0x1D,   0x1E,   0x1F,   0x180E, 0xFEFF, 0x200B};
  const char* const kContexts[] = {"", "a", "1", ".", "'s", "\u00e9", "\u4e2d", "\U0001F600", " "};
  int cases = 0;
  for (uint32_t a : chars) {
    for (uint32_t b : chars) {
      for (const char* before : kContexts) {
        for (const char* after : kContexts) {
          const std::string text = std::string(before) + Utf8(a) + Utf8(b) + after;
          EXPECT_TRUE(SameSplit(text));
          EXPECT_TRUE(SameSplit(std::string(before) + Utf8(a) + after));
          cases += 2;
        }
      }
    }
  }
  EXPECT_GT(cases, 150000);
}

TEST(PretokenizerDifferential, ContractionsInAllCasesAndContexts) {
  const char* const kTails[] = {"s", "t", "re", "ve", "m", "ll", "d", "S", "T", "RE", "Re", "rE", "VE",
                                "M", "LL", "Ll", "D", "x", "r", "v", "l", "", "'", "1", " "};
  const char* const kHeads[] = {"", "a", "A", " ", "  ", "1", ".", "'", "\n", "\u00e9", "\u2019"};
  for (const char* head : kHeads) {
    for (const char* tail : kTails) {
      for (const char* next : {"", "a", " ", "s", "'", "1"}) {
        EXPECT_TRUE(SameSplit(std::string(head) + "'" + tail + next));
        EXPECT_TRUE(SameSplit(std::string(head) + "\u2019" + tail + next));
      }
    }
  }
}

TEST(PretokenizerDifferential, RandomMixedTextMatchesRe2) {
  RandomText gen(/*seed=*/20240901);
  int failures = 0;
  for (int i = 0; i < 100000 && failures < 10; ++i) {
    const std::string text = gen.Next(/*max_atoms=*/24);
    const auto result = SameSplit(text);
    if (!result) ++failures;
    EXPECT_TRUE(result) << "case " << i;
  }
}

TEST(PretokenizerDifferential, ShortRandomAlphabetStrings) {
  // Exhaustive-ish over a tiny alphabet that exercises every branch of the scanner.
  const std::vector<std::string> alphabet = {" ", "\n", "\u00A0", "\u3000", "a", "1", ".", "'", "s",
                                             "l", "\u0301", "\u00BD", "\uFEFF"};
  RandomText gen(/*seed=*/7);
  for (int i = 0; i < 30000; ++i) {
    std::string text;
    const int n = 1 + static_cast<int>(gen.Uniform(8));
    for (int k = 0; k < n; ++k) text += alphabet[gen.Uniform(alphabet.size())];
    ASSERT_TRUE(SameSplit(text)) << "case " << i;
  }
}

TEST(PretokenizerDifferential, LongRunsOfOneClass) {
  RandomText gen(/*seed=*/99);
  for (int i = 0; i < 200; ++i) {
    const std::string run = gen.LongRun(1000 + static_cast<int>(gen.Uniform(2000)));
    EXPECT_TRUE(SameSplit(run));
    EXPECT_TRUE(SameSplit("x" + run + "y"));
    EXPECT_TRUE(SameSplit(" " + run + " "));
    EXPECT_TRUE(SameSplit("\n" + run + "\n\n"));
  }
  EXPECT_TRUE(SameSplit(std::string(100000, ' ')));
  EXPECT_TRUE(SameSplit(std::string(100000, ' ') + "a"));
  EXPECT_TRUE(SameSplit(std::string(100000, 'a')));
}

// Long texts, mostly ASCII, so that the 64-byte mask path splits most of them: every rule it
// applies (class changes, a space joining the next word, the last whitespace of a run, contractions
// only at a piece start) lands at every offset of a block and across block boundaries, and the odd
// non-ASCII character hands over to the scanner and back.
TEST(PretokenizerDifferential, LongMostlyAsciiTextsMatchRe2) {
  const std::vector<std::string> atoms = {
      "a", "s", "t", "m", "d", "r", "e", "v", "l", "x", "Q", "S", "LL", "word", "the", "0", "7", "42",
      " ", " ", " ", "  ", "   ", "\n", "\n\n", "\t", "\r\n", " \n", "\n ", "\v", "\f",
      "'", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "''", "'S", "'r", "'l",
      ".", ",", "!", "-", "--", "...", "(", ")", "\"", "_", "#", "\\", "~",
      std::string(70, ' '), std::string(65, '\n'), std::string(66, ' ') + "\n",
      "\u00e9", "\u4e2d", "\u00a0", "\u3000", "\U0001F600", "\u2019", "\u0301", "\u00bd"};
  RandomText gen(/*seed=*/314159);
  int failures = 0;
  for (int i = 0; i < 3000 && failures < 10; ++i) {
    std::string text;
    const size_t target = 64 + gen.Uniform(2000);
    // Non-ASCII atoms (the last eight) are rare in most texts and common in a few.
    const uint64_t rare = i % 4 == 0 ? 2 : 40;
    while (text.size() < target) {
      const size_t k = gen.Uniform(atoms.size());
      if (k + 8 >= atoms.size() && gen.Uniform(rare) != 0) continue;
      text += atoms[k];
    }
    const auto result = SameSplit(text);
    if (!result) ++failures;
    EXPECT_TRUE(result) << "case " << i;
  }
}

// The 64-byte mask path classifies non-ASCII characters (and bytes that start none) itself, from
// their first bytes; the reference cannot take invalid UTF-8. So: a text whose every non-ASCII
// character, valid or not, is replaced by as many ASCII bytes of its class ('x' letter, '0' number,
// '#' other; non-ASCII whitespace kept) must split at the same byte offsets. The stand-in text goes
// through the ASCII masks; the original through the classification, dense or sparse, at every offset
// of a block, with characters running across block ends.
TEST(PretokenizerDifferential, NonAsciiAndInvalidBytesSplitLikeAsciiOfTheirClass) {
  const std::vector<std::string> atoms = {
      "a", "word", "s", "t", "'", "'s", "'ll", "7", "42", " ", " ", "  ", "\n", "\t", ".", ",", "--",
      "\u00e9", "\u0416\u0438\u0437\u043d\u044c", "\u4e2d\u6587", "\U0001F600", "\u00bd", "\u0663",
      "\u2019", "\u0301", "\u00a0", "\u3000",
      "\xff", "\x80", "\xc3", "\xe4\xb8", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe0\x80\x80",
      "\xc0\xaf", "\xf8"};
  RandomText gen(/*seed=*/271828);
  int failures = 0;
  for (int i = 0; i < 3000 && failures < 10; ++i) {
    std::string text;
    const size_t target = 70 + gen.Uniform(600);
    const uint64_t sparse = i % 3 == 0 ? 1 : 4;  // mostly non-ASCII texts, and mostly ASCII ones
    while (text.size() < target) {
      const size_t k = gen.Uniform(atoms.size());
      if (k >= 17 && gen.Uniform(sparse) != 0) continue;
      text += atoms[k];
    }
    std::string ascii;
    const auto* b = reinterpret_cast<const unsigned char*>(text.data());
    for (size_t at = 0; at < text.size();) {
      size_t len;
      const internal::CharClass cls = internal::ClassAt(b + at, b + text.size(), &len);
      if (b[at] < 0x80 || cls == internal::kWhitespace) {
        ascii.append(text, at, len);
      } else {
        ascii.append(len, cls == internal::kLetter ? 'x' : cls == internal::kNumber ? '0' : '#');
      }
      at += len;
    }
    ASSERT_EQ(ascii.size(), text.size());
    auto offsets = [](std::string_view t) {
      std::vector<size_t> out;
      for (std::string_view piece : internal::PretokenizeToVector(t)) out.push_back(piece.data() - t.data());
      return out;
    };
    const bool same = offsets(text) == offsets(ascii);
    if (!same) ++failures;
    EXPECT_TRUE(same) << "case " << i << ": \"" << Show(text.substr(0, 300)) << "\"\n  stand-in: \""
                      << Show(ascii.substr(0, 300)) << "\"\n  " << ShowPieces(Fast(text)) << "\n  "
                      << ShowPieces(Fast(ascii));
  }
}

TEST(PretokenizerDifferential, PiecesConcatenateBackToTheText) {
  RandomText gen(/*seed=*/5);
  for (int i = 0; i < 2000; ++i) {
    const std::string text = gen.Next(/*max_atoms=*/32);
    std::string joined;
    for (std::string_view piece : internal::PretokenizeToVector(text)) {
      EXPECT_FALSE(piece.empty());
      joined += piece;
    }
    EXPECT_EQ(joined, text);
  }
}

}  // namespace
}  // namespace pileprep
