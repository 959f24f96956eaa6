// GPT-2 pre-tokenizer (docs/gpt2.md §1), hand-written. Equivalent to the reference pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// scanned left to right, with an ASCII fast path and the Unicode 16.0 class table for the rest.
// Stateless and allocation-free; safe from any thread.
#ifndef PILEPREP_SRC_TOKENIZER_PRETOKENIZER_H_
#define PILEPREP_SRC_TOKENIZER_PRETOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#if defined(__SSE2__) && !defined(PILEPREP_NO_SIMD)
#include <emmintrin.h>  // SSE2: part of the x86-64 baseline
#define PILEPREP_SSE2 1
#endif

#include "tokenizer/unicode_class.h"

namespace pileprep::internal {

// Class of each ASCII byte; the regex's \s in ASCII is exactly \t \n \v \f \r and space.
struct AsciiClassTable {
  uint8_t cls[128];
  constexpr AsciiClassTable() : cls() {
    for (int c = 0; c < 128; ++c) {
      CharClass k = kOther;
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) k = kLetter;
      else if (c >= '0' && c <= '9') k = kNumber;
      else if (c == ' ' || (c >= 0x09 && c <= 0x0D)) k = kWhitespace;
      cls[c] = k;
    }
  }
};
inline constexpr AsciiClassTable kAsciiClass;

// Class and byte length of the code point starting at p[0] (p < end). A byte that does not start a
// well-formed sequence counts as one "other" character, so scanning never stalls or overruns.
inline CharClass ClassAt(const unsigned char* p, const unsigned char* end, size_t* len) {
  const unsigned char c = p[0];
  if (c < 0x80) {
    *len = 1;
    return static_cast<CharClass>(kAsciiClass.cls[c]);
  }
  uint32_t cp;
  size_t n;
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
    *len = 1;
    return kOther;
  }
  if (static_cast<size_t>(end - p) < n) {
    *len = 1;
    return kOther;
  }
  for (size_t k = 1; k < n; ++k) {
    if ((p[k] & 0xC0) != 0x80) {
      *len = 1;
      return kOther;
    }
    cp = (cp << 6) | (p[k] & 0x3F);
  }
  *len = n;
  return ClassOfCodePoint(cp);
}

// Bit i set when p[i] (i < 16) is an ASCII byte of class `cls` (never kWhitespace here): three SSE2
// compares per 16 bytes. Non-ASCII bytes are in no class, so a scan stops on them and decodes.
inline uint32_t AsciiClassMask16(const unsigned char* p, CharClass cls) {
#ifndef PILEPREP_SSE2
  uint32_t mask = 0;  // portable form (compilers vectorize it where they can)
  for (int i = 0; i < 16; ++i) mask |= uint32_t{p[i] < 0x80 && kAsciiClass.cls[p[i]] == cls} << i;
  return mask;
#else
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  // x in [lo, lo + n) iff (x + 0x80 - lo) as a signed byte is below -128 + n (one wrapping add).
  auto in_range = [](__m128i x, char lo, char n) {
    return _mm_cmplt_epi8(_mm_add_epi8(x, _mm_set1_epi8(static_cast<char>(0x80 - lo))),
                          _mm_set1_epi8(static_cast<char>(-128 + n)));
  };
  const __m128i letter = in_range(_mm_or_si128(v, _mm_set1_epi8(0x20)), 'a', 26);
  if (cls == kLetter) return static_cast<uint32_t>(_mm_movemask_epi8(letter));
  const __m128i digit = in_range(v, '0', 10);
  if (cls == kNumber) return static_cast<uint32_t>(_mm_movemask_epi8(digit));
  // kOther: ASCII and none of letter, digit, whitespace (space or \t..\r).
  const __m128i ws = _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(' ')), in_range(v, 0x09, 5));
  const __m128i not_other = _mm_or_si128(_mm_or_si128(letter, digit), ws);
  const __m128i ascii = _mm_cmpgt_epi8(v, _mm_set1_epi8(-1));
  return static_cast<uint32_t>(_mm_movemask_epi8(_mm_andnot_si128(not_other, ascii)));
#endif
}

// End of the run of characters of class `cls` starting at p (p < end); for kOther the run is of
// characters that are neither whitespace, letters nor numbers. ASCII stretches are measured 16 bytes
// at a time with a count of trailing ones, so the run's end costs no mispredicted branch per byte.
inline const unsigned char* RunEnd(const unsigned char* p, const unsigned char* end, CharClass cls) {
  while (p < end) {
    if (end - p >= 16) {
      const uint32_t m = AsciiClassMask16(p, cls);
      if (m == 0xFFFF) {
        p += 16;
        continue;
      }
      p += __builtin_ctz(~m);
      if (*p < 0x80) return p;  // an ASCII byte of another class
    } else if (*p < 0x80) {
      if (kAsciiClass.cls[*p] != cls) return p;
      ++p;
      continue;
    }
    size_t len;
    if (ClassAt(p, end, &len) != cls) return p;
    p += len;
  }
  return p;
}

// Calls emit(std::string_view piece) for each pre-token of `text`, in order. The pieces concatenate
// back to `text`.
template <typename Emit>
inline void Pretokenize(std::string_view text, Emit&& emit) {
  const unsigned char* const begin = reinterpret_cast<const unsigned char*>(text.data());
  const unsigned char* const end = begin + text.size();
  const unsigned char* p = begin;
  auto piece = [&](const unsigned char* from, const unsigned char* to) {
    emit(std::string_view(reinterpret_cast<const char*>(from), static_cast<size_t>(to - from)));
  };
  while (p < end) {
    const unsigned char c = *p;
    // 1. Contractions: 's 't 're 've 'm 'll 'd, lower case only.
    if (c == '\'' && p + 1 < end) {
      const unsigned char d = p[1];
      if (d == 's' || d == 't' || d == 'm' || d == 'd') {
        piece(p, p + 2);
        p += 2;
        continue;
      }
      if (p + 2 < end && ((d == 'r' && p[2] == 'e') || (d == 'v' && p[2] == 'e') ||
                          (d == 'l' && p[2] == 'l'))) {
        piece(p, p + 3);
        p += 3;
        continue;
      }
    }
    // 2. ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional plain space, then a run.
    const unsigned char* q = (c == ' ' && p + 1 < end) ? p + 1 : p;
    size_t len;
    const CharClass cls = ClassAt(q, end, &len);
    if (cls != kWhitespace) {
      const unsigned char* r = RunEnd(q + len, end, cls);
      piece(p, r);
      p = r;
      continue;
    }
    // 3. Whitespace run at p. `\s+(?!\S)` leaves the run's last code point (not byte) to the next
    // piece when the run has two or more code points and does not reach the end of the text.
    size_t first_len;
    ClassAt(p, end, &first_len);
    const unsigned char* last = p;  // start of the run's last code point
    const unsigned char* r = p + first_len;
    while (r < end) {
      size_t l;
      if (ClassAt(r, end, &l) != kWhitespace) break;
      last = r;
      r += l;
    }
    if (r == end || last == p) {
      piece(p, r);
      p = r;
    } else {
      piece(p, last);
      p = last;
    }
  }
}

// Splits `text` (UTF-8) into pre-tokens, in order; they concatenate back to `text`.
std::vector<std::string_view> PretokenizeToVector(std::string_view text);

}  // namespace pileprep::internal

#endif  // PILEPREP_SRC_TOKENIZER_PRETOKENIZER_H_
