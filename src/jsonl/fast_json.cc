#include "jsonl/fast_json.h"

#include <simdjson.h>

#include <bit>
#include <cstdint>
#include <cstring>

#include "jsonl/utf8.h"

#if defined(__SSE2__) && !defined(PILEPREP_NO_SIMD)
#include <emmintrin.h>
#define PILEPREP_FAST_JSON_SSE2 1
#endif

namespace pileprep::internal {
namespace {

// Decoded byte of each one-character escape (\" \\ \/ \b \f \n \r \t); 0: not one ('u' aside).
struct SimpleEscapeTable {
  char out[256];
  constexpr SimpleEscapeTable() : out() {
    out['"'] = '"';
    out['\\'] = '\\';
    out['/'] = '/';
    out['b'] = '\b';
    out['f'] = '\f';
    out['n'] = '\n';
    out['r'] = '\r';
    out['t'] = '\t';
  }
};
constexpr SimpleEscapeTable kSimpleEscape;

// A code point below 0x10000 as UTF-8, without a branch on its length (escapes of 1-, 2- and 3-byte
// characters alternate unpredictably in real text): writes 4 bytes (one store; 3 on a big-endian
// machine), advances by the length. One store instead of three: BM_ParseLinesPadded 8.27 -> 8.09 ms.
inline char* PutBmp(uint32_t cp, char* d) {
  const uint32_t two = (0xC0 | (cp >> 6)) | ((0x80 | (cp & 0x3F)) << 8);
  const uint32_t three =
      (0xE0 | (cp >> 12)) | ((0x80 | ((cp >> 6) & 0x3F)) << 8) | ((0x80 | (cp & 0x3F)) << 16);
  uint32_t bytes = cp >= 0x800 ? three : two;
  bytes = cp >= 0x80 ? bytes : cp;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(d, &bytes, 4);  // one store for three bytes; the fourth means nothing
  } else {
    d[0] = static_cast<char>(bytes);
    d[1] = static_cast<char>(bytes >> 8);
    d[2] = static_cast<char>(bytes >> 16);
  }
  return d + 1 + (cp >= 0x80) + (cp >= 0x800);
}

// Bit i set when p[i] (i < 16) ends a string's plain run: '"', '\\' or a control character (which
// strict JSON refuses inside strings).
inline uint32_t SpecialMask16(const char* p) {
#ifdef PILEPREP_FAST_JSON_SSE2
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  // Unsigned v < 0x20 as a signed compare: flip the top bit of both sides (0x20 ^ 0x80 = -96).
  const __m128i control = _mm_cmplt_epi8(_mm_xor_si128(v, _mm_set1_epi8(static_cast<char>(0x80))),
                                         _mm_set1_epi8(-96));
  const __m128i quote = _mm_cmpeq_epi8(v, _mm_set1_epi8('"'));
  const __m128i backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'));
  return static_cast<uint32_t>(_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), control)));
#else
  uint32_t m = 0;
  for (int i = 0; i < 16; ++i) {
    const unsigned char c = static_cast<unsigned char>(p[i]);
    m |= uint32_t{c == '"' || c == '\\' || c < 0x20} << i;
  }
  return m;
#endif
}

class Scanner {
 public:
  Scanner(const char* p, const char* end) : p_(p), end_(end) {}
  const char* pos() const { return p_; }

  void SkipSpace() {
    while (p_ < end_ && IsJsonWhitespace(*p_)) ++p_;
  }
  bool Consume(char c) {
    if (p_ >= end_ || *p_ != c) return false;
    ++p_;
    return true;
  }
  bool At(char c) const { return p_ < end_ && *p_ == c; }

  // At the first byte after a string's opening quote: moves past its closing quote. kStore: writes
  // the decoded string from *dst on (16 bytes at a time: the buffer needs 16 bytes beyond the
  // decoded length) and advances *dst past it.
  template <bool kStore>
  bool String(char** dst_io) {
    // Locals, not members: stores through `dst` (a char*) could alias a member, which the compiler
    // would then reload and store around every block.
    const char* p = p_;
    const char* const end = end_;
    char* dst = kStore ? *dst_io : nullptr;
    while (true) {
      if (kStore) std::memcpy(dst, p, 16);
      const uint32_t mask = SpecialMask16(p);
      if (mask == 0) {
        p += 16;
        if (kStore) dst += 16;
        if (p >= end) return false;  // no closing quote on the line
        continue;
      }
      const int i = __builtin_ctz(mask);
      p += i;
      if (kStore) dst += i;
      if (p >= end) return false;
      const char c = *p;
      if (c == '"') {
        p_ = p + 1;
        if (kStore) *dst_io = dst;
        return true;
      }
      if (c != '\\') return false;  // a control character
      // Escapes one after another (a word of Cyrillic or CJK text is a run of \u escapes, "\n\t"
      // is common too) are decoded without the block search in between.
      do {
        if (end - p < 2) return false;  // a cut escape
        const unsigned char e = static_cast<unsigned char>(p[1]);
        if (e != 'u') {
          const char out = kSimpleEscape.out[e];
          if (out == 0) return false;
          if (kStore) *dst++ = out;
          p += 2;
          continue;
        }
        if (end - p < 6) return false;
        const int v = ParseHex4(p + 2);
        if (v < 0) return false;
        uint32_t cp = static_cast<uint32_t>(v);
        p += 6;
        if (__builtin_expect(cp >= 0xD800 && cp <= 0xDFFF, 0)) {
          // Only a high surrogate followed by a low one; a lone one is the general path's repair.
          if (cp >= 0xDC00 || end - p < 6 || p[0] != '\\' || p[1] != 'u') return false;
          const int lo = ParseHex4(p + 2);
          if (lo < 0xDC00 || lo > 0xDFFF) return false;
          cp = 0x10000 + ((cp - 0xD800) << 10) + (static_cast<uint32_t>(lo) - 0xDC00);
          p += 6;
          if (kStore) dst = PutUtf8(cp, dst);
          continue;
        }
        if (kStore) dst = PutBmp(cp, dst);
      } while (p < end && *p == '\\');
    }
  }

  // A key of the top-level object, at the byte after its quote: its bytes, when it has no escape.
  bool PlainKey(std::string_view* key) {
    const char* from = p_;
    while (p_ < end_ && *p_ != '"' && *p_ != '\\' && static_cast<unsigned char>(*p_) >= 0x20) ++p_;
    if (p_ >= end_ || *p_ != '"') return false;
    *key = std::string_view(from, static_cast<size_t>(p_ - from));
    ++p_;
    return true;
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, at most 256 bytes long (which leaves CPython's
  // 4300-digit integer limit to the general path).
  bool Number() {
    const char* from = p_;
    auto digit = [&] { return p_ < end_ && *p_ >= '0' && *p_ <= '9'; };
    auto digits = [&] {
      if (!digit()) return false;
      while (digit()) ++p_;
      return true;
    };
    if (p_ < end_ && *p_ == '-') ++p_;
    if (p_ < end_ && *p_ == '0') {
      ++p_;
    } else if (!digits()) {
      return false;  // also "-Infinity": the general path's
    }
    if (p_ < end_ && *p_ == '.') {
      ++p_;
      if (!digits()) return false;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (!digits()) return false;
    }
    return p_ - from <= 256;
  }

  bool Word(std::string_view w) {
    if (static_cast<size_t>(end_ - p_) < w.size() || std::memcmp(p_, w.data(), w.size()) != 0) {
      return false;
    }
    p_ += w.size();
    return true;
  }

  // Any value, not stored. `depth`: the nesting of the arrays and objects around it.
  bool Value(size_t depth) {
    if (p_ >= end_) return false;
    switch (*p_) {
      case '"':
        ++p_;
        return String<false>(nullptr);
      case '{':
        ++p_;
        return depth < FastJsonExtractor::kMaxDepth && Object(depth + 1);
      case '[':
        ++p_;
        return depth < FastJsonExtractor::kMaxDepth && Array(depth + 1);
      case 't':
        return Word("true");
      case 'f':
        return Word("false");
      case 'n':
        return Word("null");
      default:
        return Number();
    }
  }

  // After '{' of a nested object.
  bool Object(size_t depth) {
    SkipSpace();
    if (Consume('}')) return true;
    while (true) {
      if (!Consume('"') || !String<false>(nullptr)) return false;
      SkipSpace();
      if (!Consume(':')) return false;
      SkipSpace();
      if (!Value(depth)) return false;
      SkipSpace();
      if (Consume('}')) return true;
      if (!Consume(',')) return false;
      SkipSpace();
    }
  }

  // After '['.
  bool Array(size_t depth) {
    SkipSpace();
    if (Consume(']')) return true;
    while (true) {
      if (!Value(depth)) return false;
      SkipSpace();
      if (Consume(']')) return true;
      if (!Consume(',')) return false;
      SkipSpace();
    }
  }

 private:
  const char* p_;
  const char* end_;
};

}  // namespace

bool FastJsonExtractor::Extract(std::string_view line, const std::vector<std::string>& keys,
                                char* storage) {
  texts_.clear();
  // Invalid UTF-8 is the general path's to repair. simdjson's check runs at many GB/s.
  if (!simdjson::validate_utf8(line.data(), line.size())) return false;
  char* const base = storage;
  char* dst = base;
  begin_.assign(keys.size(), 0);
  size_.assign(keys.size(), SIZE_MAX);  // SIZE_MAX: not found (yet)

  Scanner s(line.data(), line.data() + line.size());
  s.SkipSpace();
  if (!s.Consume('{')) return false;
  s.SkipSpace();
  if (!s.Consume('}')) {
    while (true) {
      std::string_view key;
      if (!s.Consume('"') || !s.PlainKey(&key)) return false;
      s.SkipSpace();
      if (!s.Consume(':')) return false;
      s.SkipSpace();
      size_t match = keys.size();
      for (size_t k = 0; k < keys.size(); ++k) {
        if (key == keys[k]) {
          match = k;
          break;
        }
      }
      if (match == keys.size()) {
        if (!s.Value(1)) return false;
      } else {
        if (!s.Consume('"')) return false;  // not a string: the general path says so
        char* from = dst;
        if (!s.String<true>(&dst)) return false;
        for (size_t k = match; k < keys.size(); ++k) {  // a key listed twice gets the text twice
          if (keys[k] != key) continue;
          begin_[k] = static_cast<size_t>(from - base);
          size_[k] = static_cast<size_t>(dst - from);
        }
      }
      s.SkipSpace();
      if (s.Consume('}')) break;
      if (!s.Consume(',')) return false;
      s.SkipSpace();
    }
  }
  s.SkipSpace();
  if (s.pos() != line.data() + line.size()) return false;
  for (size_t k = 0; k < keys.size(); ++k) {
    if (size_[k] == SIZE_MAX) return false;  // missing: the general path words it
  }
  for (size_t k = 0; k < keys.size(); ++k) texts_.emplace_back(base + begin_[k], size_[k]);
  return true;
}

}  // namespace pileprep::internal
