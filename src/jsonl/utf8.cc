#include "jsonl/utf8.h"

#include <algorithm>
#include <cstring>

#if defined(__SSE2__) && !defined(PILEPREP_NO_SIMD)
#include <emmintrin.h>
#endif

namespace pileprep::internal {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";

}  // namespace

uint64_t AppendUtf8Replacing(std::string_view in, std::string* out) {
  const auto* s = reinterpret_cast<const unsigned char*>(in.data());
  const size_t n = in.size();
  out->reserve(out->size() + n + n / 8);
  uint64_t replaced = 0;
  size_t run_start = 0;  // start of bytes not yet copied
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // Table 3-7 of the Unicode standard: the allowed range of the second byte depends on the first.
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      need = 1;
    } else if (c == 0xE0) {
      need = 2, lo = 0xA0;
    } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
      need = 2;
    } else if (c == 0xED) {
      need = 2, hi = 0x9F;
    } else if (c == 0xF0) {
      need = 3, lo = 0x90;
    } else if (c >= 0xF1 && c <= 0xF3) {
      need = 3;
    } else if (c == 0xF4) {
      need = 3, hi = 0x8F;
    } else {
      need = 0;  // 0x80..0xC1, 0xF5..0xFF never start a character
    }
    size_t j = i + 1;
    size_t got = 0;
    while (got < need && j < n) {
      const unsigned char d = s[j];
      if (got == 0 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) break;
      ++j;
      ++got;
    }
    if (need > 0 && got == need) {
      i = j;
      continue;
    }
    // [i, j) is a maximal invalid subpart (at least the one byte at i).
    out->append(in.data() + run_start, i - run_start);
    out->append(kReplacement, 3);
    ++replaced;
    i = j;
    run_start = j;
  }
  out->append(in.data() + run_start, n - run_start);
  return replaced;
}

namespace {

// First i in [from, size) with data[i..i+2] == `\\u` + 'd' or 'D' (the start of a possible
// surrogate escape), or size. Reads up to 32 bytes past `size`.
size_t FindSurrogateCandidate(const char* data, size_t from, size_t size) {
  size_t i = from;
#if defined(__SSE2__) && !defined(PILEPREP_NO_SIMD)
  const __m128i backslash = _mm_set1_epi8('\\');
  const __m128i u = _mm_set1_epi8('u');
  const __m128i d = _mm_set1_epi8('d');
  const __m128i lower = _mm_set1_epi8(0x20);
  for (; i < size; i += 16) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + i + 1));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(data + i + 2));
    const __m128i hit =
        _mm_and_si128(_mm_and_si128(_mm_cmpeq_epi8(a, backslash), _mm_cmpeq_epi8(b, u)),
                      _mm_cmpeq_epi8(_mm_or_si128(c, lower), d));
    const int mask = _mm_movemask_epi8(hit);
    if (mask != 0) {
      const size_t found = i + static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(mask)));
      return found < size ? found : size;
    }
  }
  return size;
#else
  for (; i < size; ++i) {
    if (data[i] == '\\' && data[i + 1] == 'u' && (data[i + 2] | 0x20) == 'd') return i;
  }
  return size;
#endif
}

}  // namespace

std::string JsonQuote(std::string_view in) {
  std::string valid;
  AppendUtf8Replacing(in, &valid);
  std::string out = "\"";
  for (const char ch : valid) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

uint64_t RewriteLoneSurrogateEscapes(char* data, size_t size) {
  uint64_t rewritten = 0;
  size_t next = 0;  // candidates before this were consumed (e.g. the low half of a pair)
  for (size_t i = FindSurrogateCandidate(data, 0, size); i < size;
       i = FindSurrogateCandidate(data, std::max(i + 1, next), size)) {
    if (i < next) continue;
    // Inside a JSON string a run of backslashes pairs up from its left end, so `\\ud800` is an
    // escaped backslash and then text; the candidate is an escape only after an even number of
    // backslashes.
    size_t run = 0;
    while (run < i && data[i - 1 - run] == '\\') ++run;
    if (run % 2 != 0 || size - i < 6) continue;
    const int cp = ParseHex4(data + i + 2);
    if (cp < 0xD800 || cp > 0xDFFF) continue;  // also -1: malformed, left for the parser
    if (cp <= 0xDBFF && size - i >= 12 && data[i + 6] == '\\' && data[i + 7] == 'u') {
      const int low = ParseHex4(data + i + 8);
      if (low >= 0xDC00 && low <= 0xDFFF) {
        next = i + 12;
        continue;
      }
    }
    std::memcpy(data + i + 2, "fffd", 4);
    ++rewritten;
    next = i + 6;
  }
  return rewritten;
}

}  // namespace pileprep::internal
