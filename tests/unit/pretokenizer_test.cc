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

}  // namespace
}  // namespace pileprep::internal
