// GPT-2 pre-tokenizer (docs/gpt2.md §1), hand-written. Equivalent to the reference pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// scanned left to right, with an ASCII fast path and the Unicode 16.0 class table for the rest.
// Stateless and allocation-free; safe from any thread.
#ifndef PILEPREP_SRC_TOKENIZER_PRETOKENIZER_H_
#define PILEPREP_SRC_TOKENIZER_PRETOKENIZER_H_

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <cstring>
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
// Straight-line code per length, and the BMP's class from one flat table (a loop over the continuation
// bytes and the two-stage table before: tokenizer_benchmark BM_Pretokenize 873 -> 934 MB/s).
inline CharClass ClassAt(const unsigned char* p, const unsigned char* end, size_t* len) {
  const unsigned char c = p[0];
  if (c < 0x80) {
    *len = 1;
    return static_cast<CharClass>(kAsciiClass.cls[c]);
  }
  auto cont = [&](size_t k) { return (p[k] & 0xC0) == 0x80; };
  const size_t avail = static_cast<size_t>(end - p);
  *len = 1;
  if (static_cast<unsigned>(c - 0xC2) < 0x1E) {  // C2..DF: two bytes
    if (avail < 2 || !cont(1)) return kOther;
    *len = 2;
    return ClassOfBmp(((c & 0x1Fu) << 6) | (p[1] & 0x3Fu));
  }
  if (static_cast<unsigned>(c - 0xE0) < 0x10) {  // E0..EF: three bytes
    if (avail < 3 || !cont(1) || !cont(2)) return kOther;
    *len = 3;
    return ClassOfBmp(((c & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu));
  }
  if (static_cast<unsigned>(c - 0xF0) < 5) {  // F0..F4: four bytes
    if (avail < 4 || !cont(1) || !cont(2) || !cont(3)) return kOther;
    *len = 4;
    return ClassOfCodePoint(((c & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) |
                            (p[3] & 0x3Fu));
  }
  return kOther;
}

#ifdef PILEPREP_SSE2
// 0xFF in each byte of x within [lo, lo + n), else 0: (x + 0x80 - lo) as a signed byte is below
// -128 + n exactly then (one wrapping add and a signed compare; SSE2 has no unsigned one).
inline __m128i InRange8(__m128i x, char lo, char n) {
  return _mm_cmplt_epi8(_mm_add_epi8(x, _mm_set1_epi8(static_cast<char>(0x80 - lo))),
                        _mm_set1_epi8(static_cast<char>(-128 + n)));
}
#endif

// Bit i set when p[i] (i < 16) is an ASCII byte of class `cls` (never kWhitespace here): three SSE2
// compares per 16 bytes. Non-ASCII bytes are in no class, so a scan stops on them and decodes.
inline uint32_t AsciiClassMask16(const unsigned char* p, CharClass cls) {
#ifndef PILEPREP_SSE2
  uint32_t mask = 0;  // portable form (compilers vectorize it where they can)
  for (int i = 0; i < 16; ++i) mask |= uint32_t{p[i] < 0x80 && kAsciiClass.cls[p[i]] == cls} << i;
  return mask;
#else
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i letter = InRange8(_mm_or_si128(v, _mm_set1_epi8(0x20)), 'a', 26);
  if (cls == kLetter) return static_cast<uint32_t>(_mm_movemask_epi8(letter));
  const __m128i digit = InRange8(v, '0', 10);
  if (cls == kNumber) return static_cast<uint32_t>(_mm_movemask_epi8(digit));
  // kOther: ASCII and none of letter, digit, whitespace (space or \t..\r).
  const __m128i ws = _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(' ')), InRange8(v, 0x09, 5));
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
    if (*p < 0x80) {
      if (end - p >= 16) {
        const uint32_t m = AsciiClassMask16(p, cls);
        if (m == 0xFFFF) {
          p += 16;
          continue;
        }
        p += __builtin_ctz(~m);
        if (*p < 0x80) return p;  // an ASCII byte of another class
      } else {
        if (kAsciiClass.cls[*p] != cls) return p;
        ++p;
        continue;
      }
    }
    // Non-ASCII characters one at a time until the next ASCII byte, without the 16-byte masks,
    // which would find nothing in a run of Cyrillic or CJK letters.
    do {
      size_t len;
      if (ClassAt(p, end, &len) != cls) return p;
      p += len;
    } while (p < end && *p >= 0x80);
  }
  return p;
}

// Byte-class masks of the 64 bytes at p: bit i describes p[i].
struct AsciiMasks64 {
  uint64_t letter = 0, digit = 0, space = 0, other_ws = 0, apostrophe = 0, high = 0;
};
inline AsciiMasks64 ClassMasks64(const unsigned char* p) {
  AsciiMasks64 m;
#ifdef PILEPREP_SSE2
  for (int k = 0; k < 4; ++k) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * k));
    auto bits = [&](__m128i x) { return uint64_t{static_cast<uint16_t>(_mm_movemask_epi8(x))} << (16 * k); };
    m.letter |= bits(InRange8(_mm_or_si128(v, _mm_set1_epi8(0x20)), 'a', 26));
    m.digit |= bits(InRange8(v, '0', 10));
    m.space |= bits(_mm_cmpeq_epi8(v, _mm_set1_epi8(' ')));
    m.other_ws |= bits(InRange8(v, 0x09, 5));
    m.apostrophe |= bits(_mm_cmpeq_epi8(v, _mm_set1_epi8('\'')));
    m.high |= bits(v);  // movemask takes the top bit: non-ASCII
  }
#else
  for (int i = 0; i < 64; ++i) {
    const unsigned char c = p[i];
    const uint64_t bit = uint64_t{1} << i;
    if (c >= 0x80) { m.high |= bit; continue; }
    switch (kAsciiClass.cls[c]) {
      case kLetter: m.letter |= bit; break;
      case kNumber: m.digit |= bit; break;
      case kWhitespace: (c == ' ' ? m.space : m.other_ws) |= bit; break;
      default: break;
    }
    if (c == '\'') m.apostrophe |= bit;
  }
#endif
  return m;
}

// Adds the block's non-ASCII characters other than whitespace to m's letter and digit masks (all of
// a character's bytes; "other" needs nothing: it is what is neither), and returns how far the block
// can be decided: 64, or 3 bytes before its first non-ASCII whitespace character (`\s+(?!\S)` gives
// back a run's last code point, not byte: the scanner's to apply; a position's start depends on the
// class of the byte after it, so one byte would do, and three is the margin p[64..66] gets too). Characters are found from their
// first bytes (non-ASCII bytes that are not 10xxxxxx) and classified by ClassAt, so lengths, classes
// and invalid bytes come out as in the scanner's left-to-right walk: a byte ClassAt would not take
// into a character (a stray continuation byte, a lead byte without its continuation bytes) is one
// "other" character there and stays "other" here. The first bytes are taken from a mask, not from the
// previous character's length, so the lookups of successive characters do not wait on one another.
// Only characters that start at `from` or later are classified (the caller has the classes of the
// bytes before). Needs p[0..66] readable; p must start a character in that walk.
inline int ClassifyNonAscii(const unsigned char* p, int from, AsciiMasks64* m) {
  uint64_t continuation = 0;
#ifdef PILEPREP_SSE2
  for (int k = 0; k < 4; ++k) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * k));
    const __m128i cont = InRange8(v, static_cast<char>(0x80), 0x40);  // 0x80..0xBF
    continuation |= uint64_t{static_cast<uint16_t>(_mm_movemask_epi8(cont))} << (16 * k);
  }
#else
  for (int i = 0; i < 64; ++i) continuation |= uint64_t{(p[i] & 0xC0) == 0x80} << i;
#endif
  int limit = 64;
  for (uint64_t first = m->high & ~continuation & (~uint64_t{0} << from); first != 0; first &= first - 1) {
    const int j = __builtin_ctzll(first);
    size_t len;
    // p + 67 as the end: a character starting at j <= 63 has at most 4 bytes, all readable, and the
    // text goes on past them, so ClassAt sees it as it would with the text's own end.
    const CharClass cls = ClassAt(p + j, p + 67, &len);
    if (__builtin_expect(cls == kWhitespace, 0)) {
      limit = j - 3;
      break;
    }
    // Its bytes within the block (one running past it leaves a non-ASCII byte in p[64..66]).
    const uint64_t bytes = ((uint64_t{1} << len) - 1) << j;
    m->letter |= cls == kLetter ? bytes : 0;
    m->digit |= cls == kNumber ? bytes : 0;
  }
  return limit;
}

// The letter and digit masks of the last block, kept for a later block that starts within 60 bytes of
// it (blocks overlap: each usually starts at the previous one's last piece start), so that the
// characters they share need no second lookup (the sample corpus's non-ASCII documents: 795 -> 837
// MB/s). A block whose classification stopped at whitespace leaves none. Only a cache: every byte's
// class is the same from any block that starts at a character.
struct ClassCarry {
  const unsigned char* base = nullptr;  // that block's start; nullptr: none
  uint64_t letter = 0, digit = 0;
};

// Where pre-tokens start among the 64 bytes at p, as bits (bit i: one starts at p + i; bit 0, p
// itself, is left out: the caller knows p starts one). Needs p[0..66] readable and the text to go
// on past p + 66; p must start a character. Non-ASCII characters are classified (ClassifyNonAscii);
// positions three bytes or less before a non-ASCII whitespace character or before a non-ASCII byte
// in p[64..66] are not decided: the bits at and after `*decided` are zero and mean nothing.
//
// With every byte's class known the pattern's splits are local, which is what makes this exact (a
// letter, digit or other run is the same run of bytes whatever its characters' lengths): a piece
// starts at i when
//   - a letter, digit or other run starts at i after a non-space of another class, or after a
//     whitespace other than ' ' (a plain space before it starts the piece instead: ` ?\p{L}+`);
//   - whitespace starts at i after a non-space;
//   - i is the last whitespace of a run of two or more that a non-space follows (`\s+(?!\S)` leaves
//     it to the next piece, itself or with the word after it when it is ' ');
//   - a contraction ('s 't 're 've 'm 'll 'd) at a piece start ends at i; inside one no piece starts.
// Every rule looks at most one byte back and three ahead, and pretokenizer_differential_test holds it
// to the reference on long mixed texts. A run-length rule across blocks needs no state (ClassCarry
// only saves lookups): the caller restarts each block at the last piece start of the previous one.
__attribute__((always_inline)) inline uint64_t BlockStarts(const unsigned char* p, int* decided,
                                                           ClassCarry* carry) {
  AsciiMasks64 m = ClassMasks64(p);
  int limit = 64;
  if (m.high != 0) {
    int from = 0;
    const ptrdiff_t d = carry->base != nullptr ? p - carry->base : 0;
    if (d > 0 && d <= 60) {
      // The classes are facts about the bytes (every character's first byte is found the same way
      // from any block), so the previous block's masks hold for the bytes both blocks cover; its
      // characters starting in its last three bytes may have run past it and are classified again.
      m.letter |= carry->letter >> d;
      m.digit |= carry->digit >> d;
      from = static_cast<int>(61 - d);
    }
    limit = ClassifyNonAscii(p, from, &m);
  }
  carry->base = limit == 64 ? p : nullptr;  // a stop at whitespace left characters unclassified
  carry->letter = m.letter;
  carry->digit = m.digit;
  int after = 64;  // the first non-ASCII byte of p[64..66]: the classes past the block are not known
  while (after < 67 && p[after] < 0x80) ++after;
  *decided = std::min(limit, after - 3);
  if (*decided < 2) return 0;
  const uint64_t ws = m.space | m.other_ws;
  const uint64_t non_ws = ~ws;
  const uint64_t other = non_ws & ~m.letter & ~m.digit;
  const bool ws_after = p[64] < 0x80 && kAsciiClass.cls[p[64]] == kWhitespace;
  auto run_start = [](uint64_t x) { return x & ~(x << 1); };
  uint64_t s = (run_start(m.letter) | run_start(m.digit) | run_start(other)) & (non_ws << 1);
  s |= non_ws & (m.other_ws << 1);
  s |= (non_ws & (m.space << 1)) >> 1;
  s |= ws & (non_ws << 1);
  s |= ws & (ws << 1) & ~((ws >> 1) | (uint64_t{ws_after} << 63));
  // Contractions: an apostrophe that starts a piece (after a letter, digit or non-space whitespace,
  // or at p) and is followed by one of the endings.
  for (uint64_t c = m.apostrophe & (((m.letter | m.digit | m.other_ws) << 1) | 1); c != 0; c &= c - 1) {
    const int i = __builtin_ctzll(c);
    const unsigned char d = p[i + 1], e = p[i + 2];
    int k = 0;
    if (d == 's' || d == 't' || d == 'm' || d == 'd') {
      k = 2;
    } else if (((d == 'r' || d == 'v') && e == 'e') || (d == 'l' && e == 'l')) {
      k = 3;
    }
    if (k == 0) continue;
    for (int j = i + 1; j < i + k && j < 64; ++j) s &= ~(uint64_t{1} << j);
    if (i + k < 64) s |= uint64_t{1} << (i + k);
  }
  const uint64_t keep = *decided == 64 ? ~uint64_t{0} : (uint64_t{1} << *decided) - 1;
  return s & keep & ~uint64_t{1};
}

// Calls emit(std::string_view piece) for each pre-token of `text`, in order. The pieces concatenate
// back to `text`.
template <typename Emit>
__attribute__((always_inline)) inline void Pretokenize(std::string_view text, Emit&& emit) {
  const unsigned char* const begin = reinterpret_cast<const unsigned char*>(text.data());
  const unsigned char* const end = begin + text.size();
  const unsigned char* p = begin;
  auto piece = [&](const unsigned char* from, const unsigned char* to) __attribute__((always_inline)) {
    emit(std::string_view(reinterpret_cast<const char*>(from), static_cast<size_t>(to - from)));
  };
  // Text is split up to 64 bytes at a time from bit masks; the scanner below takes one piece at a
  // time at non-ASCII whitespace, at pieces longer than a block and near the end of the text. Where
  // the masks decide too little they are not tried again for 32 bytes, so such text pays for them
  // about once a block rather than once a piece.
  const unsigned char* masks_from = begin;
  ClassCarry carry;
  while (p < end) {
    if (p >= masks_from && end - p > 67) {
      int decided;
      uint64_t starts = BlockStarts(p, &decided, &carry);
      if (starts != 0) {
        const unsigned char* const base = p;
        do {
          const unsigned char* next = base + __builtin_ctzll(starts);
          piece(p, next);
          p = next;
          starts &= starts - 1;
        } while (starts != 0);
        continue;
      }
      if (decided < 4) masks_from = p + 32;
    }
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
