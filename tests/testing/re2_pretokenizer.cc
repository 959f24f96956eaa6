#include "testing/re2_pretokenizer.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "re2/re2.h"
#include "tokenizer/unicode_class.h"

namespace pileprep::testing {
namespace {

using internal::CharClass;
using internal::ClassOfCodePoint;

// "[\x{a}-\x{b}\x{c}...]" of every code point of class `cls` (surrogates excluded: RE2 rejects them and
// they never occur in valid UTF-8).
std::string ClassOf(CharClass cls) {
  std::string out = "[";
  uint32_t cp = 0;
  while (cp <= 0x10FFFF) {
    if ((cp >= 0xD800 && cp <= 0xDFFF) || ClassOfCodePoint(cp) != cls) {
      ++cp;
      continue;
    }
    uint32_t last = cp;
    while (last + 1 <= 0x10FFFF && !(last + 1 >= 0xD800 && last + 1 <= 0xDFFF) &&
           ClassOfCodePoint(last + 1) == cls) {
      ++last;
    }
    char buf[40];
    if (last == cp) {
      std::snprintf(buf, sizeof(buf), "\\x{%X}", cp);
    } else {
      std::snprintf(buf, sizeof(buf), "\\x{%X}-\\x{%X}", cp, last);
    }
    out += buf;
    cp = last + 1;
  }
  out += "]";
  return out;
}

// Whether every code point of valid UTF-8 `s` is whitespace.
bool AllWhitespace(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    const size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
    if (ClassOfCodePoint(cp) != internal::kWhitespace) return false;
    i += n;
  }
  return true;
}

// Body of a class without the brackets, for building the negated "other" class.
std::string Inner(const std::string& cls) { return cls.substr(1, cls.size() - 2); }

struct Compiled {
  std::string pattern;
  std::unique_ptr<RE2> re;
};

const Compiled& GetCompiled() {
  static const Compiled* const kCompiled = [] {
    const std::string letter = ClassOf(internal::kLetter);
    const std::string number = ClassOf(internal::kNumber);
    const std::string space = ClassOf(internal::kWhitespace);
    const std::string other = "[^" + Inner(space) + Inner(letter) + Inner(number) + "]";
    auto* c = new Compiled;
    // RE2 alternation is leftmost-first (Perl order), as in Python's regex.
    c->pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?" + letter + "+| ?" + number + "+| ?" + other + "+|" +
                 space + "+";
    RE2::Options options;
    options.set_max_mem(int64_t{256} << 20);
    options.set_log_errors(false);
    options.set_dot_nl(true);
    c->re = std::make_unique<RE2>(c->pattern, options);
    return c;
  }();
  return *kCompiled;
}

}  // namespace

const std::string& Re2PretokenizerPattern() { return GetCompiled().pattern; }

std::vector<std::string> Re2Pretokenize(std::string_view text) {
  const Compiled& c = GetCompiled();
  std::vector<std::string> pieces;
  if (!c.re->ok()) {
    // A broken pattern must not pass silently as "no pieces".
    pieces.push_back("<RE2 error: " + c.re->error() + ">");
    return pieces;
  }
  const re2::StringPiece input(text.data(), text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    re2::StringPiece m;
    if (!c.re->Match(input, pos, text.size(), RE2::ANCHOR_START, &m, 1) || m.empty()) {
      pieces.emplace_back(text.substr(pos, 1));
      ++pos;
      continue;
    }
    size_t len = m.size();
    // Only the \s+ branch can match a piece made of whitespace alone (the others hold a non-space).
    if (pos + len < text.size() && AllWhitespace(text.substr(pos, len))) {
      // \s+(?!\S): a run followed by non-space backtracks one code point; a one-code-point run fails
      // the lookahead and falls to the plain \s+ branch, so it stays whole.
      size_t last = len - 1;
      while (last > 0 && (static_cast<unsigned char>(text[pos + last]) & 0xC0) == 0x80) --last;
      if (last > 0) len = last;
    }
    pieces.emplace_back(text.substr(pos, len));
    pos += len;
  }
  return pieces;
}

}  // namespace pileprep::testing
