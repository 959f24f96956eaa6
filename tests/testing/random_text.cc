#include "testing/random_text.h"

#include <cstdint>
#include <iterator>
#include <string>

namespace pileprep::testing {
namespace {

struct Range {
  uint32_t lo, hi;  // inclusive
};

// Whitespace (White_Space) and the look-alikes other engines call whitespace.
constexpr uint32_t kSpaces[] = {0x09,   0x0A,   0x0B,   0x0C,   0x0D,   0x20,   0x85,   0xA0,
                                0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006,
                                0x2007, 0x2008, 0x2009, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F,
                                0x3000, 0x1C,   0x1D,   0x1E,   0x1F,   0x180E, 0xFEFF, 0x200B};

// Letters, numbers, marks and symbols of many scripts (ranges chosen to be mostly one class, but
// mixing is fine: the references decide).
constexpr Range kScripts[] = {
    {'a', 'z'},         {'A', 'Z'},         {'0', '9'},         {0xC0, 0xFF},       // Latin-1
    {0x100, 0x17F},     {0x391, 0x3C9},     {0x410, 0x44F},     {0x4E00, 0x9FFF},   // Greek Cyrl CJK
    {0x3041, 0x3096},   {0x30A1, 0x30FC},   {0xAC00, 0xD7A3},   {0x621, 0x64A},     // kana Hangul Arab
    {0x64B, 0x652},     {0x660, 0x669},     {0x905, 0x939},     {0x93E, 0x94D},     // Arab marks, Deva
    {0x966, 0x96F},     {0xE01, 0xE30},     {0xE31, 0xE3A},     {0xE50, 0xE59},     // Deva digits, Thai
    {0x300, 0x36F},     {0x1F600, 0x1F64F}, {0x1F3FB, 0x1F3FF}, {0x2160, 0x2188},   // marks emoji Nl
    {0xB2, 0xB3},       {0xBC, 0xBE},       {0x2460, 0x249B},   {0x1D400, 0x1D7FF}, // No, math
    {0x20000, 0x2A6DF}, {0x31350, 0x323AF}, {0x10D40, 0x10D8F}, {0x16100, 0x1613F}, // Ext B/H, 16.0
    {0x1E5D0, 0x1E5FF}, {0x11F00, 0x11F5F}, {0x1CCF0, 0x1CCF9}, {0xFF10, 0xFF5A},   // 16.0, 15.0, FW
    {0x2000, 0x206F},   {0x20A0, 0x20C0},   {0x2190, 0x22FF},   {0xE000, 0xE0FF},   // punct, PUA
    {0xFE00, 0xFE0F},   {0x200C, 0x200D},   {0xFFF0, 0xFFFD},                       // VS, ZWJ
};

const char* const kWords[] = {
    "'",      "'s",     "'t",     "'re",     "'ve",     "'m",      "'ll",     "'d",     "'S",
    "'T",     "'RE",    "'VE",    "'M",      "'LL",     "'D",      "'x",      "''",     "'''s",
    "\u2019s", "it's",  "can't",  "I'm",     "we'll",   "they're", "you've",  "he'd",   "O'Neil",
    " '",     " 's",    "\n's",   "the",     " the",    "Hello",   " world",  "123",    " 4567",
    "3.14",   "1,000",  "...",    "!!!",     "?!",      "--",      "()",      "{}",     "<|",
    "|>",     "<|endoftext|>",    "\r\n",    "\n\n",    "  ",      "\t\t",    "    ",   " \n ",
    "e\u0301", "\u00e9", "na\u00efve", "\u0416\u0443\u043a", "\u4e2d\u6587",
    "\u0645\u0631\u062d\u0628\u0627", "\u0928\u092e\u0938\u094d\u0924\u0947",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35", "\U0001F600", "\U0001F469\u200D\U0001F469\u200D\U0001F467",
    "\U0001F44D\U0001F3FD", "\u216B", "\u00B2", "\u00BD", "\u0663", "http://x.io/a?b=c", "a_b",
    "snake_case", "camelCase", "x+=1;", "#include", "$$", "@user", "\u00A0\u00A0", "\u3000\u3000",
};

}  // namespace

std::string Utf8(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

uint32_t RandomText::RandomScalar() {
  // Bias towards the BMP, where most assigned characters are.
  uint32_t cp = Uniform(4) == 0 ? static_cast<uint32_t>(Uniform(0x110000))
                                : static_cast<uint32_t>(Uniform(0x10000));
  if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
  return cp;
}

std::string RandomText::LongRun(int n) {
  std::string unit;
  switch (Uniform(8)) {
    case 0: unit.push_back(' '); break;
    case 1: unit.push_back('\n'); break;
    case 2: unit = Utf8(kSpaces[Uniform(std::size(kSpaces))]); break;
    case 3: unit.push_back('a'); break;
    case 4: unit = std::string(1, static_cast<char>('0' + Uniform(10))); break;
    case 5: unit.push_back('-'); break;
    default: {
      const Range r = kScripts[Uniform(std::size(kScripts))];
      std::string run;
      for (int i = 0; i < n; ++i) run += Utf8(r.lo + static_cast<uint32_t>(Uniform(r.hi - r.lo + 1)));
      return run;
    }
  }
  std::string run;
  for (int i = 0; i < n; ++i) run += unit;
  return run;
}

std::string RandomText::Atom() {
  const uint64_t r = Uniform(100);
  if (r < 25) return Utf8(kSpaces[Uniform(std::size(kSpaces))]);
  if (r < 45) return kWords[Uniform(std::size(kWords))];
  if (r < 60) {
    static constexpr char kAscii[] = "abcxyzABCXYZ0123456789.,;:!?-_()[]\"'/\\#%&*+=<>|~`^@$";
    return std::string(1, kAscii[Uniform(sizeof(kAscii) - 1)]);
  }
  if (r < 85) {
    const Range range = kScripts[Uniform(std::size(kScripts))];
    std::string s;
    const int n = 1 + static_cast<int>(Uniform(4));
    for (int i = 0; i < n; ++i) s += Utf8(range.lo + static_cast<uint32_t>(Uniform(range.hi - range.lo + 1)));
    return s;
  }
  if (r < 95) return Utf8(RandomScalar());
  if (r < 99) return LongRun(2 + static_cast<int>(Uniform(40)));
  return LongRun(1000 + static_cast<int>(Uniform(500)));
}

std::string RandomText::Next(int max_atoms) {
  std::string s;
  const int n = static_cast<int>(Uniform(static_cast<uint64_t>(max_atoms) + 1));
  for (int i = 0; i < n; ++i) s += Atom();
  return s;
}

}  // namespace pileprep::testing
