// The checked examples of docs/gpt2.md §1, one behaviour per test.
#include "tokenizer/pretokenizer.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pileprep::internal {
namespace {

using ::testing::ElementsAre;

std::vector<std::string> Split(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view p : PretokenizeToVector(text)) out.emplace_back(p);
  return out;
}

TEST(Pretokenizer, SpaceRunGivesLastSpaceToNextWord) {
  EXPECT_THAT(Split("a  b"), ElementsAre("a", " ", " b"));
}

TEST(Pretokenizer, NewlineRunKeepsLastNewlineApart) {
  EXPECT_THAT(Split("x   \n\ny"), ElementsAre("x", "   \n", "\n", "y"));
}

TEST(Pretokenizer, SingleTabsBetweenWordsStandAlone) {
  EXPECT_THAT(Split("tab\t\tend"), ElementsAre("tab", "\t", "\t", "end"));
}

TEST(Pretokenizer, ContractionsAreLowerCaseOnly) {
  EXPECT_THAT(Split("I'm   can't  "), ElementsAre("I", "'m", "  ", " can", "'t", "  "));
  EXPECT_THAT(Split("'S 'LL"), ElementsAre("'", "S", " '", "LL"));
  EXPECT_THAT(Split("we're they've you'll he'd"),
              ElementsAre("we", "'re", " they", "'ve", " you", "'ll", " he", "'d"));
}

TEST(Pretokenizer, LeadingSpacesSplitBeforeWord) {
  EXPECT_THAT(Split("  lead"), ElementsAre(" ", " lead"));
}

TEST(Pretokenizer, GiveBackIsOneCodePointNotOneByte) {
  EXPECT_THAT(Split("\u3000\u3000a"), ElementsAre("\u3000", "\u3000", "a"));
}

TEST(Pretokenizer, TrailingWhitespaceRunStaysWhole) {
  EXPECT_THAT(Split("end \n \n"), ElementsAre("end", " \n \n"));
  EXPECT_THAT(Split(" "), ElementsAre(" "));
}

TEST(Pretokenizer, OnlyPlainSpaceJoinsTheNextRun) {
  // U+00A0 is whitespace but not U+0020: it does not prefix the word.
  EXPECT_THAT(Split("\u00a0word"), ElementsAre("\u00a0", "word"));
  EXPECT_THAT(Split(" 123 !?"), ElementsAre(" 123", " !?"));
}

TEST(Pretokenizer, LettersNumbersAndOthersAreSeparateRuns) {
  EXPECT_THAT(Split("abc123def!!"), ElementsAre("abc", "123", "def", "!!"));
  EXPECT_THAT(Split("Ⅻ²½"), ElementsAre("Ⅻ²½"));  // Nl and No are numbers
}

TEST(Pretokenizer, ApostropheInsidePunctuationRunStays) {
  EXPECT_THAT(Split("!'s"), ElementsAre("!'", "s"));
}

TEST(Pretokenizer, NonWhiteSpaceLookalikesAreOther) {
  // U+FEFF, U+200B, U+180E and U+001C are not White_Space.
  EXPECT_THAT(Split("\n\ufeffx"), ElementsAre("\n", "\ufeff", "x"));
  EXPECT_THAT(Split("a\x1c b"), ElementsAre("a", "\x1c", " b"));
}

TEST(Pretokenizer, InvalidBytesNeverStallTheScanner) {
  const std::string text = "ab\xff\xfe cd\xe2\x82";
  std::string joined;
  for (const std::string& p : Split(text)) joined += p;
  EXPECT_EQ(joined, text);
}

// ClassAt against a decoder written the plain way (the one it replaced): every lead byte, followed by
// bytes that are and are not continuation bytes (both ends of the range and either side of it), with
// the text ending after 1, 2, 3 or 4 bytes. A well-formed 2-, 3- or 4-byte sequence is one character of
// its code point's class; anything else is one "other" byte.
TEST(Pretokenizer, ClassAtDecodesEverySequenceLikeAPlainDecoder) {
  auto reference = [](const unsigned char* p, size_t avail, size_t* len) {
    const unsigned char c = p[0];
    *len = 1;
    if (c < 0x80) return ClassOfCodePoint(c);
    size_t n = 0;
    uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4;
      cp = c & 0x07;
    } else {
      return kOther;
    }
    if (avail < n) return kOther;
    for (size_t k = 1; k < n; ++k) {
      if ((p[k] & 0xC0) != 0x80) return kOther;
      cp = (cp << 6) | (p[k] & 0x3F);
    }
    *len = n;
    return ClassOfCodePoint(cp);
  };
  const unsigned char tails[] = {0x00, 0x20, 0x41, 0x7F, 0x80, 0x81, 0x8F, 0x90, 0x9F, 0xA0, 0xA3, 0xB7, 0xBF, 0xC0, 0xE3, 0xFF};
  size_t checked = 0;
  for (int lead = 0; lead < 256; ++lead) {
    for (unsigned char b1 : tails) {
      for (unsigned char b2 : tails) {
        for (unsigned char b3 : tails) {
          const unsigned char bytes[4] = {static_cast<unsigned char>(lead), b1, b2, b3};
          for (size_t avail = 1; avail <= 4; ++avail) {
            size_t got_len = 0, want_len = 0;
            const CharClass got = ClassAt(bytes, bytes + avail, &got_len);
            const CharClass want = reference(bytes, avail, &want_len);
            ASSERT_EQ(got, want) << lead << " " << int{b1} << " " << int{b2} << " " << int{b3} << " " << avail;
            ASSERT_EQ(got_len, want_len) << lead << " " << int{b1} << " " << int{b2} << " " << int{b3};
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 256u * 16 * 16 * 16 * 4);
  // And every well-formed character of the Basic Multilingual Plane, besides the spot checks above.
  for (uint32_t cp = 0x80; cp < 0x10000; ++cp) {
    unsigned char b[3];
    const size_t n = cp < 0x800 ? 2 : 3;
    if (n == 2) {
      b[0] = static_cast<unsigned char>(0xC0 | (cp >> 6));
      b[1] = static_cast<unsigned char>(0x80 | (cp & 0x3F));
    } else {
      b[0] = static_cast<unsigned char>(0xE0 | (cp >> 12));
      b[1] = static_cast<unsigned char>(0x80 | ((cp >> 6) & 0x3F));
      b[2] = static_cast<unsigned char>(0x80 | (cp & 0x3F));
    }
    size_t len = 0;
    ASSERT_EQ(ClassAt(b, b + n, &len), ClassOfCodePoint(cp)) << std::hex << cp;
    ASSERT_EQ(len, n);
  }
}

}  // namespace
}  // namespace pileprep::internal
