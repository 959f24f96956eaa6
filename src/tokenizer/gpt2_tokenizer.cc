#include "pileprep/gpt2_tokenizer.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <new>
#include <queue>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "format/file_util.h"
#include "pileprep/status_macros.h"
#include "simdjson.h"
#include "tokenizer/huge_page_array.h"
#include "tokenizer/pretokenizer.h"

namespace pileprep {
namespace {

constexpr std::string_view kEndOfText = "<|endoftext|>";
constexpr uint32_t kNoRank = UINT32_MAX;

// Position of the first "<|endoftext|>" in `text` at or after `from`, or npos. Looks for "<|", 16
// places at a time: '<' alone is common in code and markup, and std::string_view::find stops at
// every one (memchr, then a compare: 2% of the tokenizer's time on the sample corpus); "<|" is rare.
size_t FindEndOfText(std::string_view text, size_t from) {
  const char* p = text.data();
  const size_t n = text.size();
  const size_t k = kEndOfText.size();
  auto at = [&](size_t j) { return j + k <= n && std::memcmp(p + j, kEndOfText.data(), k) == 0; };
  size_t i = from;
#ifdef PILEPREP_SSE2
  // Candidates i..i+15; reads p[i..i+16].
  for (; i + 17 <= n; i += 16) {
    const __m128i lt = _mm_cmpeq_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)),
                                      _mm_set1_epi8('<'));
    const __m128i bar = _mm_cmpeq_epi8(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 1)), _mm_set1_epi8('|'));
    for (uint32_t m = static_cast<uint32_t>(_mm_movemask_epi8(_mm_and_si128(lt, bar))); m != 0;
         m &= m - 1) {
      const size_t j = i + static_cast<size_t>(__builtin_ctz(m));
      if (at(j)) return j;
    }
  }
#endif
  for (; i + k <= n; ++i) {
    if (p[i] == '<' && at(i)) return i;
  }
  return std::string_view::npos;
}

// GPT-2's bytes_to_unicode(): the printable bytes map to themselves, the other 68 to U+0100 onwards.
// Returns the inverse: code point -> byte, or -1.
std::vector<int> UnicodeToByteTable() {
  std::vector<int> inverse(512, -1);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    inverse[printable ? b : next++] = b;
  }
  return inverse;
}

// Decodes a token written in GPT-2's byte alphabet back to raw bytes.
bool AlphabetToBytes(std::string_view s, const std::vector<int>& inverse, std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    uint32_t cp;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < s.size()) {
      cp = ((c & 0x1F) << 6) | (s[i + 1] & 0x3F);
      i += 2;
    } else {
      return false;
    }
    if (cp >= inverse.size() || inverse[cp] < 0) return false;
    out->push_back(static_cast<char>(inverse[cp]));
  }
  return true;
}

inline uint64_t PairKey(uint32_t a, uint32_t b) { return (uint64_t{a} << 32) | b; }

// kPrefixMask.bytes[n]: n bytes of 0xFF, then zeros.
struct PrefixMasks {
  alignas(16) unsigned char bytes[16][16];
  constexpr PrefixMasks() : bytes() {
    for (int n = 0; n < 16; ++n) {
      for (int i = 0; i < 16; ++i) bytes[n][i] = i < n ? 0xFF : 0;
    }
  }
};
constexpr PrefixMasks kPrefixMask{};

// One of `n` slots (a power of two) from the top bits of a 64-bit hash, the bits a multiplicative
// hash mixes best. With one slot the shift stays 63 and the mask makes the index 0.
struct TopBitsIndex {
  int shift = 63;
  size_t mask = 0;
  void Init(size_t n) {
    mask = n - 1;
    shift = n > 1 ? 64 - __builtin_ctzll(n) : 63;
  }
  size_t operator()(uint64_t h) const { return (h >> shift) & mask; }
};

// Whether the n >= 16 bytes at a and at b are equal: 16-byte blocks from the front and the last 16
// (overlapping), never a byte past either end. Inline, for the long tiers' hits (16..256 bytes),
// where a call to memcmp cost 3% of a whole job.
inline bool Equal16Plus(const char* a, const char* b, size_t n) {
#ifdef PILEPREP_SSE2
  auto eq = [&](size_t i) {
    return _mm_cmpeq_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)),
                          _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
  };
  __m128i all = eq(n - 16);
  for (size_t i = 0; i + 16 < n; i += 16) all = _mm_and_si128(all, eq(i));
  return _mm_movemask_epi8(all) == 0xFFFF;
#else
  return std::memcmp(a, b, n) == 0;
#endif
}

// Whether a pre-token of 16 bytes or more starts, after its leading space if it has one, with a
// character in U+3000..U+9FFF (lead bytes E3..E9: CJK punctuation and symbols, kana, Bopomofo,
// Hangul compatibility jamo, ideographs). Chinese and Japanese are written without spaces, so a
// letter run of those scripts is a clause or a sentence: nearly always new (see
// Options::cache_long_cjk_runs). Only the first character is looked at: a run is one script in
// practice, and a mixed piece merges the same either way.
inline bool StartsCjkRun(const char* p) {
  const auto lead = static_cast<unsigned char>(p[p[0] == ' ']);
  return lead >= 0xE3 && lead <= 0xE9;
}

}  // namespace

// Merges by pair of ids. Rank(a, b) returns the merge's order value: lower merges first; kNoRank when
// the pair does not merge; IdOf(value) is the merged token. For vocabularies below 2^16 entries with
// fewer than 2^16 merges (GPT-2: 50,257 and 50,000) the value is rank << 16 | id, so a merge needs no
// second lookup for its id, and the table is bucketed: a pair's key (a << 16 | b, 32 bits) hashes to
// a bucket of 8 keys and their 8 values in one cache line; the keys are compared all at once (SSE2).
// A lookup is one line and no probe loop: most lookups are of pairs that do not merge, and with linear
// probing over slots those paid a long, unpredictable probe; with keys and values in separate lines a
// hit paid two misses (the table does not stay in L2 while a whole job streams through the core). A
// full bucket spills into the next. The table is small rather than sparse (at most 7/8 full; 512 KB
// and 76% full for GPT-2): a fifth of the buckets spill, but a lookup that passes the filter below is
// nearly always a real merge, and a smaller table keeps more of itself in L2 (measured against 2 MB
// at 19%: +6% cold, +4% warm, same on unseen text).
// Larger vocabularies fall back to a hash map and a rank -> id array.
class PairTable {
 public:
  struct Entry {
    uint32_t a, b, rank, id;
  };
  // `entries` in rank order. A pair listed twice keeps its later rank, as encoder.py's and
  // Megatron's dict(zip(merges, range(len(merges)))) does: entries go in from the last, and a pair
  // already in the table is skipped. Returns whether every pair was listed once.
  bool Build(const std::vector<Entry>& entries, size_t vocab_limit) {
    bool distinct = true;
    compact_ = vocab_limit < 65536 && entries.size() < 65535;
    if (compact_) {
      size_t buckets = 1;
      // More slots than merges (at most 7/8 full), so some bucket always has room and every probe
      // below ends; GPT-2's 50,000 merges get 8,192 buckets, 76% full.
      while (buckets * kBucket * 7 < entries.size() * 8) buckets <<= 1;
      if (buckets * kBucket <= entries.size()) std::abort();  // a full table: probes would not end
      buckets_.Reset(buckets);
      for (size_t i = 0; i < buckets; ++i) std::fill_n(buckets_[i].k, kBucket, kEmptyKey);
      home_.Init(buckets);
      size_t words = 64;
      while (words * 64 < entries.size() * 10) words <<= 1;
      filter_.assign(words, 0);
      filter_shift_ = 64 - __builtin_ctzll(words);
      for (const Entry& e : entries) {
        const uint64_t h = Hash(Key(e.a, e.b));
        filter_[h >> filter_shift_] |= FilterBits(h);
      }
      for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
        const Entry& e = *it;
        const uint32_t key = Key(e.a, e.b);
        if (Rank(e.a, e.b) != kNoRank) {  // a later line of the same pair is in
          distinct = false;
          continue;
        }
        for (size_t b = home_(Hash(key));; b = (b + 1) & home_.mask) {
          uint32_t* k = buckets_[b].k;
          const size_t used = std::find(k, k + kBucket, kEmptyKey) - k;
          if (used < kBucket) {
            k[used] = key;
            buckets_[b].v[used] = (e.rank << 16) | e.id;
            break;
          }
        }
      }
    } else {
      rank_id_.resize(entries.size());
      for (const Entry& e : entries) rank_id_[e.rank] = e.id;
      size_t slots = 16;
      while (slots < entries.size() * 2) slots <<= 1;  // at most half full: probes stay short
      wide_.assign(slots, WideSlot{kEmptyWideKey, 0});
      wide_mask_ = slots - 1;
      for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
        const uint64_t key = PairKey(it->a, it->b);
        WideSlot* slot = &wide_[WideHome(key)];
        while (slot->key != kEmptyWideKey && slot->key != key) {
          slot = &wide_[(static_cast<size_t>(slot - wide_.data()) + 1) & wide_mask_];
        }
        if (slot->key == key) {
          distinct = false;
          continue;
        }
        *slot = {key, it->rank};
      }
    }
    return distinct;
  }
  uint32_t Rank(uint32_t a, uint32_t b) const {
    if (compact_) {
      const uint32_t key = Key(a, b);
      const uint64_t h = Hash(key);
      if (!MayHold(h)) return kNoRank;
      for (size_t bucket = home_(h);; bucket = (bucket + 1) & home_.mask) {
        const Bucket& slots = buckets_[bucket];
        const uint32_t hit = MatchMask(slots, key);
        if (hit != 0) return slots.v[__builtin_ctz(hit)];
        // Not here: absent unless the bucket is full and spilled into the next.
        if (slots.k[kBucket - 1] == kEmptyKey) return kNoRank;
      }
    }
    const uint64_t key = PairKey(a, b);
    for (size_t i = WideHome(key);; i = (i + 1) & wide_mask_) {
      if (wide_[i].key == key) return wide_[i].rank;
      if (wide_[i].key == kEmptyWideKey) return kNoRank;
    }
  }
  uint32_t IdOf(uint32_t value) const { return compact_ ? (value & 0xFFFF) : rank_id_[value]; }

 private:
  static constexpr size_t kBucket = 8;
  // Keys are below 65535 * 65536 (ids < 65535), so all ones is never a real key.
  static constexpr uint32_t kEmptyKey = UINT32_MAX;
  struct alignas(64) Bucket {
    uint32_t k[kBucket];  // filled from the front
    uint32_t v[kBucket];
  };
  // Bit i set when keys.k[i] == key.
  static uint32_t MatchMask(const Bucket& keys, uint32_t key) {
#ifdef PILEPREP_SSE2
    const __m128i want = _mm_set1_epi32(static_cast<int>(key));
    const __m128i* k = reinterpret_cast<const __m128i*>(keys.k);
    const __m128i k0 = _mm_load_si128(k), k1 = _mm_load_si128(k + 1);
    return static_cast<uint32_t>(_mm_movemask_epi8(_mm_packs_epi16(
        _mm_packs_epi32(_mm_cmpeq_epi32(k0, want), _mm_cmpeq_epi32(k1, want)), _mm_setzero_si128())));
#else
    uint32_t mask = 0;
    for (size_t i = 0; i < kBucket; ++i) mask |= uint32_t{keys.k[i] == key} << i;
    return mask;
#endif
  }
  // Two thirds of the lookups a merge makes are of pairs that do not merge. A blocked Bloom filter
  // (three bits in one 64-bit word, ~10 bits per merge: 64 KB for GPT-2, which stays in L2) answers
  // most of those without touching the table, whose lines the cache traffic pushes out of L2.
  // Ids are below 2^16 here, so a pair's key is a shift and an or, not a multiply.
  static uint32_t Key(uint32_t a, uint32_t b) { return (a << 16) | b; }
  // One multiply serves the filter and the table: the top bits pick the filter word and the bucket,
  // bits 20..37 the three filter bits (independent of the top bits for a multiplicative hash).
  static uint64_t Hash(uint32_t key) { return (key + 0x632BE59BD9B4E019ull) * 0x9E3779B97F4A7C15ull; }
  static uint64_t FilterBits(uint64_t h) {
    return (uint64_t{1} << ((h >> 20) & 63)) | (uint64_t{1} << ((h >> 26) & 63)) |
           (uint64_t{1} << ((h >> 32) & 63));
  }
  bool MayHold(uint64_t h) const {
    const uint64_t bits = FilterBits(h);
    return (filter_[h >> filter_shift_] & bits) == bits;
  }
  bool compact_ = true;
  internal::HugePageArray<Bucket> buckets_;
  TopBitsIndex home_;  // a pair's first bucket
  std::vector<uint64_t> filter_;
  int filter_shift_ = 58;
  std::vector<uint32_t> rank_id_;
  // Larger vocabularies: pair key -> rank, open addressing with linear probing. Not absl's
  // flat_hash_map: its growth is not exception-safe (see spelled_to_id in Load), and a vocabulary
  // of millions of merges may well meet a memory limit while it loads.
  struct WideSlot {
    uint64_t key;
    uint32_t rank;
  };
  static constexpr uint64_t kEmptyWideKey = UINT64_MAX;  // ids are 32-bit and below 2^31
  size_t WideHome(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & wide_mask_;
  }
  std::vector<WideSlot> wide_;
  size_t wide_mask_ = 0;
};

// A short piece and its ids, packed as the short tier packs them (Gpt2Tokenizer::PrefillEntries).
struct Gpt2Tokenizer::PrefillEntry {
  uint64_t k0, k1;
  uint16_t num;
  uint16_t ids[15];
};

struct Gpt2Tokenizer::Tables {
  uint32_t byte_id[256];
  // Merge value (PairTable::Rank) of two raw bytes, indexed by (first << 8) | second: the first round
  // of every merge needs no hashing.
  internal::HugePageArray<uint32_t> byte_pair_rank;
  PairTable merges;
  // Bit (x << 8 | y) set when bytes x and y stand side by side in some merge's result. A merge
  // joins two symbols into its result, so it can only ever join across bytes x, y that are set
  // here: between any other two bytes of a piece no token can form, and BPE of the piece is BPE of
  // the parts on either side, one after the other (their merges never meet). GPT-2's 50,000 merges
  // set 2,689 of the 65,536 pairs.
  uint64_t joinable[1024] = {};
  bool Joinable(unsigned char x, unsigned char y) const {
    const size_t k = (size_t{x} << 8) | y;
    return (joinable[k >> 6] >> (k & 63)) & 1;
  }
  std::vector<std::string> id_bytes;
  bool has_endoftext = false;
  // Whether merging one occurrence of the lowest pair at a time (what MergeShort and MergePiece do)
  // gives what encoder.py does: merge every occurrence of that pair at once, left to right. It does
  // when no pair is listed twice and every merge comes after every merge that makes either of its
  // parts (GPT-2's files): a merged symbol then only takes part in pairs ranked after the one that
  // made it, so the pair's other occurrences are still the lowest and go next, left to right. A
  // merges file that breaks this (a pair listed again later, as encoder.py's dict allows) is merged
  // by EncoderPyMerge instead, slowly but exactly.
  bool merges_monotone = true;
  // The pieces Gpt2Tokenizer::PrefillEntries puts into a cache, made on first use: the bytes of
  // each vocabulary entry that are one pre-token of up to 15 bytes (packed as the short tier packs
  // them), with their ids, the highest id first. 48 bytes each: 2.3 MB for GPT-2.
  mutable std::once_flag prefill_once;
  mutable std::vector<PrefillEntry> prefill;
};

// Per-thread cache from pre-token bytes to ids, in tiers so that a lookup never allocates: pieces
// of up to 15 bytes are packed with their length into two words, and a two-way set keeps both keys
// and up to 8 ids of each in one cache line (least recently used out), so a lookup reads one line.
// A piece of 9 to 15 ids (1% of pieces on real text) takes the whole set, its ids past the 8th in
// the second way, so that it too is read from one line. A piece of 15 bytes has at most 15 ids, so
// every short piece is cached, Cyrillic and CJK words included.
// Pieces of 16..64 bytes (non-Latin words, long identifiers) and of 65..256 bytes (indentation
// runs, long words) are stored with a 64-bit hash and their bytes. Longer pieces are not stored
// (rare and mostly unique), nor are CJK runs (StartsCjkRun: clauses, mostly unique); like a long
// piece that misses, they are split into parts that go through the short tier or, a lone
// character, a table by its bytes (merge_split in EncodeOrdinary).
struct Gpt2Tokenizer::Cache::Impl {
  static constexpr size_t kShortKeyBytes = 15;
  static constexpr size_t kLongKeyBytes = 64;
  static constexpr size_t kHugeKeyBytes = 256;
  // The key's last byte holds the length in its low four bits; a stored key keeps the number of
  // ids (at most 15: one per byte) in the high four, which a lookup masks off. An all-zero entry
  // matches no key (length >= 1). Ids are stored as 16 bits: the cache is used only for
  // vocabularies of at most 65,536 entries (GPT-2 has 50,257); larger ones merge every piece.
  //
  // One line per set: a lookup prefetches one line. With four-way sets (keys in one line, ids in
  // two more) the lookups were bound by how many lines the core can have in flight: the prefetch
  // instructions themselves stalled. Same memory, two ways instead of four, alternating runs of
  // tokenize_bench --ids16: sample corpus unseen 173.1 -> 188.9 MB/s, cold 149.4 -> 163.2; Debian
  // corpus unseen 180.0 -> 196.4, cold 123.9 -> 150.7.
  static constexpr uint64_t kCountMask = uint64_t{0xF} << 60;
  struct ShortWay {
    uint64_t k0, k1;  // k1's top four bits: how many ids
    uint16_t ids[8];  // the first 8 (read 8 at a time)
  };
  // Way 0 is the most recently used. A piece of more than 8 ids is always in way 0, and way 1 then
  // holds its ids 8..14 under an all-zero key, which matches no piece.
  //
  // (Before, those ids were in a side array of 16 bytes per way, 16 MiB per cache, read only after
  // the set's line: a second miss, not prefetched, that took 14% of the lookups' time in a whole
  // job for 1% of the pieces.)
  struct alignas(64) ShortSet {
    ShortWay way[2] = {};
  };
  static bool Holds(const ShortWay& w, uint64_t k0, uint64_t k1) {
    return w.k0 == k0 && (w.k1 & ~kCountMask) == k1;
  }
  PILEPREP_TSAN_INLINE static size_t Count(const ShortWay& w) { return w.k1 >> 60; }
  // The piece (k0, k1) with its num (1..15) ids into way 0 of a set. A piece of up to 8 ids moves
  // way 0 to way 1 (its old piece, the least recently used, out), or, when way 0 holds a piece of
  // more than 8, empties way 1 (that piece out whole). A piece of more than 8 takes both ways.
  template <typename Id>  // uint32_t (a merge's ids) or uint16_t (a prefill entry's)
  PILEPREP_TSAN_INLINE static void Insert(ShortSet& set, uint64_t k0, uint64_t k1, const Id* ids,
                                          size_t num) {
    // Through a zeroed copy: reading ids[i] only for i < num (at most 15) also keeps GCC's
    // -Warray-bounds from seeing a read of ids[15] in a loop to 16.
    uint16_t narrow[16] = {};
    for (size_t i = 0; i < num && i < 16; ++i) narrow[i] = static_cast<uint16_t>(ids[i]);
    if (num > 8) {
      set.way[1] = ShortWay{};
      std::memcpy(set.way[1].ids, narrow + 8, sizeof set.way[1].ids);
    } else if (Count(set.way[0]) > 8) {
      set.way[1] = ShortWay{};
    } else {
      set.way[1] = set.way[0];
    }
    ShortWay& w = set.way[0];
    w.k0 = k0;
    w.k1 = k1 | (uint64_t{num} << 60);
    std::memcpy(w.ids, narrow, sizeof w.ids);
  }
  // A hit in way 1 becomes way 0. Both ways hold pieces of at most 8 ids then: a hit in way 1 is
  // never the ids of a longer piece (their key matches nothing).
  static void Promote(ShortSet& set) { std::swap(set.way[0], set.way[1]); }
  // The vocabulary's entries into the short tier of a cache being bound (no other thread sees it
  // yet): uninstrumented under ThreadSanitizer, as the pages' first faults (PILEPREP_NO_TSAN).
  PILEPREP_NO_TSAN void Prefill(const std::vector<PrefillEntry>& entries) {
    for (const PrefillEntry& e : entries) {
      Insert(short_sets[ShortIndex(e.k0, e.k1)], e.k0, e.k1, e.ids, e.num);
    }
  }
  // The long and huge tiers: eight-way sets, a 32-bit tag of each way's hash in one line (odd, so
  // zero is empty), and the entries, with the piece's bytes for the exact compare, beside them.
  //
  // Eight ways rather than four, in the same memory: with four, on the sample corpus (23,000
  // distinct long pieces for 65,536 entries) a set that drew five or more of them evicted one on
  // every pass: 1,254 of a warm pass's long pieces missed and were merged again (a miss splits and
  // merges the piece: many times a hit's cost); with eight ways, 232 (four ways in twice the
  // memory: 128).
  static constexpr size_t kWays = 8;
  // A piece's tag: the hash's top 32 bits, odd. The set index takes bits 17 and up: 13 of them for
  // the default long tier, 10 for the huge one, so the two do not overlap (with 2^23 entries or
  // more they would: a weaker tag, more key compares, the same ids).
  static uint32_t Tag(uint64_t hash) { return static_cast<uint32_t>(hash >> 32) | 1; }
  template <size_t kKeyBytes, size_t kIds>
  struct BigTier {
    static constexpr size_t kMaxIds = kIds;
    // Entries never move: the tags line keeps the recency order and, for each way, which entry
    // holds it, so a hit or an insert rewrites one line (an entry is 200 or 776 bytes).
    struct alignas(64) Tags {
      uint32_t tag[kWays];   // most recently used first
      uint8_t entry[kWays];  // way w's piece is entries[set * kWays + entry[w]]
    };
    struct Entry {
      uint32_t len;
      uint32_t num_ids;
      char key[kKeyBytes];
      uint16_t ids[kIds];
    };
    internal::HugePageArray<Tags> tags;
    internal::HugePageArray<Entry> entries;  // way w of set i at i * kWays + w
    size_t mask = 0;
    void Init(size_t num_entries) {
      const size_t sets = std::max<size_t>(1, num_entries / kWays);
      tags.Reset(sets);
      for (size_t i = 0; i < sets; ++i) {
        for (size_t w = 0; w < kWays; ++w) tags[i].entry[w] = static_cast<uint8_t>(w);
      }
      entries.Reset(sets * kWays);
      mask = sets - 1;
    }
  };
  bool enabled = true;
  uint64_t bound = 0;  // Gpt2Tokenizer::instance_ of the tokenizer served; 0: none yet
  size_t entries = 0;  // short entries (a power of two); the other tiers are sized from it

  // Every tier, new and empty (fresh zero pages), sized from `entries`.
  //
  // Long pieces are about a twentieth as frequent as short ones and their entries four times
  // larger; huge ones are rarer still and sixteen times larger. A long piece that misses costs
  // little more than a lookup of each of its parts in the short tier or char_ids (merge_split in
  // EncodeOrdinary), so the short tier gets the room: by default 2^20 short entries (32 MiB), and
  // 2^16 and 2^13 long and huge ones: 12.5 and 6.1 MiB, taking 14 and 8 MiB of 2 MB pages, and
  // their tags 512 and 64 KiB; with char_ids (528 KiB, any size of cache) about 56 MiB per worker.
  void Allocate() {
    fresh = false;
    short_sets.Reset(entries / 2);
    short_index.Init(entries / 2);
    long_tier.Init(entries / 16);
    huge_tier.Init(entries / 128);
    char_ids.Reset(kCharIdsEntries);
    fresh = true;
  }
  // Whether the tiers are whole and empty, as Allocate left them: no tokenizer's pieces yet, and
  // not half-made by an Allocate that threw.
  bool fresh = false;
  Stats stats;
  internal::HugePageArray<ShortSet> short_sets;
  BigTier<kLongKeyBytes, 64> long_tier;
  BigTier<kHugeKeyBytes, 256> huge_tier;
  TopBitsIndex short_index;  // a piece's set
  // The ids of a character of 2 or 3 UTF-8 bytes on its own (its bytes merged with nothing around
  // them), filled in on first use: a long piece that misses is split where no merge can join two
  // bytes (merge_split in EncodeOrdinary), and so is a short one with non-ASCII bytes (merge_short),
  // and in Cyrillic, Greek or CJK text most of their characters then stand alone, a split on either
  // side. Their ids come from here, one load from a table that stays in cache, instead of a lookup
  // in the short tier (a hashed key, a random line) or a merge. Indexed by
  // CharIdsIndex; num == 0: not filled in yet. 2,048 + 65,536 entries of 8 bytes: 528 KiB, on 4 KB
  // pages (HugePageArray), all faulted in with the cache; the lookups touch only the lines of the
  // scripts they meet.
  struct CharIds {
    uint16_t ids[3];  // a character of L bytes has at most L ids
    uint16_t num;
  };
  static constexpr size_t kCharIdsEntries = 2048 + 65536;
  internal::HugePageArray<CharIds> char_ids;
  // The entry of the L bytes at b (L = 2: C0..DF then a continuation byte; L = 3: E0..EF then two),
  // one per byte sequence.
  static size_t CharIdsIndex(const unsigned char* b, size_t len) {
    return len == 2 ? ((size_t{b[0]} & 0x1F) << 6) | (b[1] & 0x3F)
                    : 2048 + (((size_t{b[0]} & 0x0F) << 12) | ((size_t{b[1]} & 0x3F) << 6) |
                              (b[2] & 0x3F));
  }
  // Scratch for merges, reused across calls, up to a piece of kScratchKept bytes.
  std::vector<uint32_t> ids, ranks, prev, next;
  std::vector<uint32_t> wide;  // a merge's ids on their way into the output
  std::vector<uint64_t> heap;
  static constexpr size_t kScratchKept = size_t{1} << 18;
  // (Not `wide`: it may be the merge's output; EncodeOrdinary gives it back after copying it.)
  void ReleaseScratch() {
    for (auto* v : {&ids, &ranks, &prev, &next}) std::vector<uint32_t>().swap(*v);
    std::vector<uint64_t>().swap(heap);
  }

  // Packs a piece of 1..15 bytes with its length (in byte 15), without a branch on the length: the
  // length is random from piece to piece, so a branch on it mispredicts. Reads 16 bytes at once when
  // that cannot cross into another page (the bytes past the piece are masked off), else copies.
  __attribute__((no_sanitize("address"))) static void Pack(const char* p, size_t n, uint64_t* k0,
                                                           uint64_t* k1) {
#ifdef PILEPREP_SSE2
    __m128i v;
    if (__builtin_expect((reinterpret_cast<uintptr_t>(p) & 4095) <= 4096 - 16, 1)) {
      v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    } else {
      unsigned char buf[16] = {0};
      std::memcpy(buf, p, n);
      v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf));
    }
    v = _mm_and_si128(v, _mm_load_si128(reinterpret_cast<const __m128i*>(kPrefixMask.bytes[n])));
    *k0 = static_cast<uint64_t>(_mm_cvtsi128_si64(v));
    *k1 = static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(v, v))) | (uint64_t{n} << 56);
#else
    unsigned char buf[16] = {0};
    std::memcpy(buf, p, n);
    std::memcpy(k0, buf, 8);
    std::memcpy(k1, buf + 8, 8);
    *k1 |= uint64_t{n} << 56;
#endif
  }
  // Index of the piece's set: the top bits of a product, which depend on every bit of the key. (The
  // index used before, the low bits of h ^ h >> 29 for h = k0 * C ^ k1 * C', saw only the low 45 bits
  // of k0 and k1: bytes 0-5 and 8-13, not bytes 6-7 or the length. Pieces of up to 8 bytes that share
  // their first six, " config", " confirm", " confine", " confide", ..., fell into one set, and more
  // than four of them evicted one another on every pass: about 33,000 misses per pass over the
  // benchmark corpus, whose 103,000 short pieces the cache has room for.)
  size_t ShortIndex(uint64_t k0, uint64_t k1) const {
    const uint64_t h = ((k0 * 0x9E3779B97F4A7C15ull) ^ k1) * 0xC2B2AE3D27D4EB4Full;
    return short_index(h);
  }
  // Hash of a piece of 8 bytes or more (the long and huge tiers' pieces have 16 or more). The last,
  // partial word is the 8 bytes that end the piece shifted down, not a copy of its bytes into a zeroed
  // word: a load of a word just written byte by byte waits for the stores (no store forwarding), and
  // this ran for every long piece (1.6% of a whole job).
  static uint64_t HashBytes(std::string_view s) {
    uint64_t h = 0x243F6A8885A308D3ull ^ s.size();
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      h = (h ^ w) * 0x9E3779B97F4A7C15ull;
      h ^= h >> 32;
    }
    if (i < s.size()) {
      uint64_t w;
      std::memcpy(&w, s.data() + s.size() - 8, 8);
      w >>= 8 * (8 - (s.size() - i));  // the last size - i bytes, as the low bytes of w
      h = (h ^ w) * 0xC2B2AE3D27D4EB4Full;
      h ^= h >> 29;
    }
    return h;
  }
};

Gpt2Tokenizer::Cache::Cache(const Options& options) : impl_(std::make_unique<Impl>()) {
  size_t n = 4;  // at least two short sets
  while (n < options.cache_entries && n < kMaxCacheEntries) n <<= 1;
  impl_->entries = n;
  impl_->Allocate();
}

Gpt2Tokenizer::Cache::Cache(const Gpt2Tokenizer& tokenizer) : Cache(tokenizer.options()) {
  Bind(tokenizer);
}

void Gpt2Tokenizer::Cache::Bind(const Gpt2Tokenizer& tokenizer) {
  Impl& c = *impl_;
  if (c.bound == tokenizer.instance_) return;
  const bool enabled =
      tokenizer.vocab_size() <= 65536 && tokenizer.tables_->id_bytes.size() <= 65536;
  // What can throw comes first, and `bound` changes last: a Bind that threw leaves the cache bound
  // to no tokenizer (or, before anything changed, to the one it served), and the next Bind starts
  // over.
  const std::vector<PrefillEntry>* prefill =
      enabled && tokenizer.options_.prefill_cache_with_vocabulary ? &tokenizer.PrefillEntries()
                                                                  : nullptr;
  c.bound = 0;
  // Another vocabulary's ids, or tiers an Allocate left half-made: start empty, as when made.
  if (!c.fresh) c.Allocate();
  c.fresh = false;
  c.enabled = enabled;
  if (prefill != nullptr) c.Prefill(*prefill);
  c.bound = tokenizer.instance_;
}

const std::vector<Gpt2Tokenizer::PrefillEntry>& Gpt2Tokenizer::PrefillEntries() const {
  using Impl = Cache::Impl;
  const Tables& t = *tables_;
  std::call_once(t.prefill_once, [&] {
    // Made aside and moved in: a body that throws leaves the entries empty and the once_flag unset.
    std::vector<PrefillEntry> entries;
    entries.reserve(t.id_bytes.size());
    // Highest id first, so that where two pieces share a set the one of the lower id, the more
    // frequent (GPT-2's ids follow its merges, most frequent first), goes in last and stays. Only
    // entries whose bytes are one pre-token: the pieces of the others (" ." followed by "\n", say)
    // are mostly entries of their own.
    for (size_t id = t.id_bytes.size(); id-- > 0;) {
      const std::string& bytes = t.id_bytes[id];
      if (bytes.empty() || bytes.size() > Impl::kShortKeyBytes) continue;  // no such id, or long
      size_t pieces = 0;
      internal::Pretokenize(bytes, [&](std::string_view) { ++pieces; });
      if (pieces != 1) continue;
      PrefillEntry& e = entries.emplace_back();  // value-initialized: ids past num are 0
      Impl::Pack(bytes.data(), bytes.size(), &e.k0, &e.k1);
      uint32_t ids[Impl::kShortKeyBytes];
      e.num = static_cast<uint16_t>(
          MergeShort(t, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), ids));
      std::copy(ids, ids + e.num, e.ids);  // ids fit 16 bits: the cache is on
    }
    t.prefill = std::move(entries);
  });
  return t.prefill;
}

Gpt2Tokenizer::Cache::~Cache() = default;
Gpt2Tokenizer::Cache::Stats Gpt2Tokenizer::Cache::stats() const { return impl_->stats; }
Gpt2Tokenizer::~Gpt2Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Gpt2Tokenizer::FromFiles(
    const std::string& vocab_path, const std::string& merges_path, Options options) {
  absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> tok;
  try {  // the files' bytes, and what FromBuffers makes of them
    PILEPREP_ASSIGN_OR_RETURN(std::string vocab, internal::ReadFileToString(vocab_path));
    PILEPREP_ASSIGN_OR_RETURN(std::string merges, internal::ReadFileToString(merges_path));
    tok = FromBuffers(vocab, merges, options);
  } catch (const std::bad_alloc&) {
    tok = absl::ResourceExhaustedError("not enough memory to load the vocabulary");
  }
  if (!tok.ok()) {
    return absl::Status(tok.status().code(),
                        absl::StrCat(vocab_path, " / ", merges_path, ": ", tok.status().message()));
  }
  return tok;
}

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Gpt2Tokenizer::FromDefaultFiles(Options options) {
  PILEPREP_ASSIGN_OR_RETURN(auto files, DefaultFiles());
  return FromFiles(files.first, files.second, options);
}

absl::StatusOr<std::pair<std::string, std::string>> Gpt2Tokenizer::DefaultFiles() {
  std::vector<std::filesystem::path> dirs;
  std::error_code ec;
  if (const char* env = std::getenv("PILEPREP_TOKENIZER_DIR"); env && *env) {
    // Named, so meant: the shipped files in its place would tokenize with another vocabulary
    // than the one asked for, without a word.
    const std::filesystem::path dir(env);
    if (!std::filesystem::exists(dir / "encoder.json", ec) ||
        !std::filesystem::exists(dir / "vocab.bpe", ec)) {
      return absl::NotFoundError(absl::StrCat("PILEPREP_TOKENIZER_DIR=", env,
                                              ": no encoder.json and vocab.bpe there (unset it "
                                              "for the GPT-2 files shipped with pileprep)"));
    }
    return std::pair{(dir / "encoder.json").string(), (dir / "vocab.bpe").string()};
  }
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    dirs.push_back(exe.parent_path() / ".." / "share" / "pileprep" / "tokenizers" / "gpt2");
  }
#ifdef PILEPREP_INSTALL_TOKENIZER_DIR
  dirs.push_back(std::filesystem::path(PILEPREP_INSTALL_TOKENIZER_DIR) / "gpt2");
#endif
#ifdef PILEPREP_SOURCE_TOKENIZER_DIR
  dirs.push_back(std::filesystem::path(PILEPREP_SOURCE_TOKENIZER_DIR) / "gpt2");
#endif
  std::string tried;
  for (const auto& dir : dirs) {
    const auto vocab = dir / "encoder.json";
    const auto merges = dir / "vocab.bpe";
    if (std::filesystem::exists(vocab, ec) && std::filesystem::exists(merges, ec)) {
      return std::pair{vocab.string(), merges.string()};
    }
    absl::StrAppend(&tried, tried.empty() ? "" : ", ", dir.string());
  }
  return absl::NotFoundError(absl::StrCat(
      "GPT-2 vocabulary not found (looked in ", tried,
      "); set PILEPREP_TOKENIZER_DIR, or give the files (FromFiles; the CLI's --vocab-file and "
      "--merge-file)"));
}

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Gpt2Tokenizer::FromBuffers(
    std::string_view vocab_json, std::string_view merges_txt, Options options) {
  // The tables are made of strings, maps and vectors, which throw when memory runs out (under
  // ulimit -v, or a cgroup's limit with overcommit off): a status at the library's boundary, so
  // that the CLI says so and exits 2 instead of dying in std::terminate.
  try {
    return Load(vocab_json, merges_txt, options);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("not enough memory to load the vocabulary");
  }
}

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Gpt2Tokenizer::Load(std::string_view vocab_json,
                                                                   std::string_view merges_txt,
                                                                   Options options) {
  if (options.cache_entries > kMaxCacheEntries) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache_entries ", options.cache_entries, " (at most ", kMaxCacheEntries,
                     ", about 3.5 GiB per cache; the default 2^20 takes 56 MiB)"));
  }
  auto tok = std::unique_ptr<Gpt2Tokenizer>(new Gpt2Tokenizer());
  static std::atomic<uint64_t> instances{0};
  tok->instance_ = instances.fetch_add(1, std::memory_order_relaxed) + 1;
  tok->options_ = options;
  tok->tables_ = std::make_unique<Tables>();
  Tables& t = *tok->tables_;
  const std::vector<int> inverse = UnicodeToByteTable();

  // Vocabulary: token (in the byte alphabet) -> id.
  simdjson::dom::parser parser;
  simdjson::padded_string padded(vocab_json);
  simdjson::dom::object obj;
  if (vocab_json.substr(0, 3) == "\xEF\xBB\xBF") {
    return absl::InvalidArgumentError(
        "vocabulary starts with a UTF-8 byte-order mark, which JSON does not allow (Megatron's "
        "json.load fails on it too): remove its first three bytes");
  }
  // simdjson reports memory it could not have as an error, not an exception: the padded copy
  // comes out empty, the parser says MEMALLOC.
  if (padded.size() != vocab_json.size()) throw std::bad_alloc();
  if (auto err = parser.parse(padded).get(obj)) {
    if (err == simdjson::MEMALLOC) throw std::bad_alloc();
    return absl::InvalidArgumentError(
        absl::StrCat("vocabulary is not a JSON object: ", simdjson::error_message(err)));
  }
  // Keyed by the token as spelled in encoder.json (views into the parser's strings): vocab.bpe
  // spells tokens the same way, and since the alphabet maps byte by byte, the spelling of a merge's
  // result is the two spellings joined. So the merges are looked up as they are written, with no
  // decoding and no allocation per line.
  // A std::unordered_map, not absl's: absl's flat_hash_map (20220623, Debian 12's) sets its new
  // capacity before allocating it, so a std::bad_alloc while it grows leaves a map whose destructor
  // frees a pointer malloc never gave ("free(): invalid pointer", an abort where a status was due).
  std::unordered_map<std::string_view, uint32_t> spelled_to_id;
  spelled_to_id.reserve(obj.size());
  std::vector<bool> id_taken;
  t.id_bytes.reserve(obj.size());  // ids are usually 0..size-1
  id_taken.reserve(obj.size());
  std::string bytes;
  for (auto field : obj) {
    int64_t id;
    if (field.value.get_int64().get(id) || id < 0 || id > INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocabulary entry \"", std::string(field.key), "\" has no valid id"));
    }
    if (field.key == kEndOfText) {
      tok->eod_id_ = static_cast<uint32_t>(id);
      t.has_endoftext = true;
    }
    if (!AlphabetToBytes(field.key, inverse, &bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "vocabulary entry \"", std::string(field.key), "\" is not in GPT-2's byte alphabet"));
    }
    spelled_to_id[field.key] = static_cast<uint32_t>(id);
    if (t.id_bytes.size() <= static_cast<size_t>(id)) {
      try {  // a table entry per id up to the largest: an id of 2^31 cannot have one
        t.id_bytes.resize(id + 1);
        id_taken.resize(id + 1);
      } catch (const std::exception&) {
        return absl::ResourceExhaustedError(
            absl::StrCat("vocabulary entry \"", std::string(field.key), "\" has id ", id,
                         ": the table of ids up to it does not fit in memory"));
      }
    }
    // Two tokens with one id would make Decode and the merges disagree about its bytes. (The
    // same token again with its id, a repeated key, is json.load's last-one-wins: nothing.)
    if (id_taken[id] && t.id_bytes[id] != bytes) {
      return absl::InvalidArgumentError(absl::StrCat("vocabulary entry \"", std::string(field.key),
                                                     "\" has id ", id,
                                                     ", which another entry has already"));
    }
    id_taken[id] = true;
    t.id_bytes[id] = bytes;
  }
  // Megatron's len(encoder): distinct keys (a repeated key counts once, as in json.load); it picks
  // the .bin's dtype.
  tok->vocab_size_ = spelled_to_id.size();
  if (!t.has_endoftext) {
    return absl::InvalidArgumentError("vocabulary has no <|endoftext|> entry");
  }
  std::vector<std::string> byte_spelling(256);
  for (uint32_t cp = 0; cp < inverse.size(); ++cp) {
    if (inverse[cp] < 0) continue;
    std::string& spelling = byte_spelling[inverse[cp]];
    if (cp < 0x80) {
      spelling.push_back(static_cast<char>(cp));
    } else {  // the alphabet stops below U+0800
      spelling.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      spelling.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  for (int b = 0; b < 256; ++b) {
    auto it = spelled_to_id.find(byte_spelling[b]);
    if (it == spelled_to_id.end()) {
      return absl::InvalidArgumentError(absl::StrCat("vocabulary lacks the token for byte ", b));
    }
    t.byte_id[b] = it->second;
  }

  // Merges, in rank order. Lines "A B"; a leading "#version" line and empty lines are skipped.
  std::vector<PairTable::Entry> pairs;
  uint32_t rank = 0;
  size_t line_no = 0;
  std::string a, b, joined;
  // A byte-order mark before the "#version" line: Megatron drops the first line whatever it holds.
  if (merges_txt.substr(0, 3) == "\xEF\xBB\xBF") merges_txt.remove_prefix(3);
  for (size_t pos = 0; pos < merges_txt.size();) {
    size_t nl = merges_txt.find('\n', pos);
    if (nl == std::string_view::npos) nl = merges_txt.size();
    std::string_view line = merges_txt.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.substr(0, 8) == "#version")) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("merges line ", line_no, ": expected two tokens separated by one space"));
    }
    const std::string_view sa = line.substr(0, sp), sb = line.substr(sp + 1);
    joined.assign(sa);
    joined.append(sb);
    auto ia = spelled_to_id.find(sa), ib = spelled_to_id.find(sb), iab = spelled_to_id.find(joined);
    if (ia == spelled_to_id.end() || ib == spelled_to_id.end() || iab == spelled_to_id.end()) {
      if (!AlphabetToBytes(sa, inverse, &a) || !AlphabetToBytes(sb, inverse, &b)) {
        return absl::InvalidArgumentError(
            absl::StrCat("merges line ", line_no, ": not in GPT-2's byte alphabet"));
      }
      std::string missing;
      for (const auto& [it, spelled] : {std::pair{ia, std::string(sa)},
                                        std::pair{ib, std::string(sb)}, std::pair{iab, joined}}) {
        if (it != spelled_to_id.end()) continue;
        absl::StrAppend(&missing, missing.empty() ? "" : ", ", "\"", spelled, "\"");
      }
      return absl::InvalidArgumentError(absl::StrCat("merges line ", line_no, " (\"",
                                                     std::string(line), "\"): ", missing,
                                                     " not in the vocabulary"));
    }
    // A repeated pair keeps its later rank (PairTable::Build).
    pairs.push_back({ia->second, ib->second, rank, iab->second});
    const std::string& merged = t.id_bytes[iab->second];  // bytes of a, then of b
    for (size_t i = 0; i + 1 < merged.size(); ++i) {
      const size_t k = (size_t{static_cast<unsigned char>(merged[i])} << 8) |
                       static_cast<unsigned char>(merged[i + 1]);
      t.joinable[k >> 6] |= uint64_t{1} << (k & 63);
    }
    ++rank;
  }
  if (rank == 0) return absl::InvalidArgumentError("merges file holds no merges");
  {
    // The last rank at which each token is made.
    std::vector<int64_t> made_at(t.id_bytes.size(), -1);
    for (const PairTable::Entry& e : pairs) {
      made_at[e.id] = std::max<int64_t>(made_at[e.id], e.rank);
    }
    for (const PairTable::Entry& e : pairs) {
      if (made_at[e.a] >= e.rank || made_at[e.b] >= e.rank) t.merges_monotone = false;
    }
  }
  tok->id_limit_ = t.id_bytes.size();  // ids run from 0 to id_bytes.size() - 1
  tok->ids_fit_16_bits_ = t.id_bytes.size() <= 65536;
  {
    // fingerprint(): FNV-1a over what decides the ids, each field fixed-size or length-prefixed
    // so that no two different tokenizers hash the same bytes. The ids a spelling maps to (the
    // bytes' ids, each merge's result) are hashed too: encoder.json may repeat a spelling, and
    // the last id given wins there, as in json.load.
    uint64_t h = 0xcbf29ce484222325ULL;
    auto mix = [&h](const void* data, size_t n) {
      const unsigned char* p = static_cast<const unsigned char*>(data);
      for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
    };
    auto mix32 = [&mix](uint32_t v) {
      const unsigned char le[4] = {
          static_cast<unsigned char>(v), static_cast<unsigned char>(v >> 8),
          static_cast<unsigned char>(v >> 16), static_cast<unsigned char>(v >> 24)};
      mix(le, 4);
    };
    mix("pileprep gpt2 v1", 16);
    mix32(static_cast<uint32_t>(t.id_bytes.size()));
    for (size_t id = 0; id < t.id_bytes.size(); ++id) {
      if (!id_taken[id]) {
        mix32(UINT32_MAX);  // an id no entry has
        continue;
      }
      mix32(static_cast<uint32_t>(t.id_bytes[id].size()));
      mix(t.id_bytes[id].data(), t.id_bytes[id].size());
    }
    for (int b = 0; b < 256; ++b) mix32(t.byte_id[b]);
    mix32(static_cast<uint32_t>(pairs.size()));
    for (const PairTable::Entry& e : pairs) {
      mix32(e.a);
      mix32(e.b);
      mix32(e.id);
    }
    mix32(tok->eod_id_);
    tok->fingerprint_ = h;
  }
  // A pair listed twice also breaks merging one occurrence at a time (Tables::merges_monotone).
  if (!t.merges.Build(pairs, t.id_bytes.size())) t.merges_monotone = false;
  t.byte_pair_rank.Reset(65536);
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) {
      t.byte_pair_rank[(a << 8) | b] = t.merges.Rank(t.byte_id[a], t.byte_id[b]);
    }
  }
  return tok;
}

void Gpt2Tokenizer::EncoderPyMerge(const Tables& t, const unsigned char* bytes, size_t n,
                                   std::vector<uint32_t>* out) {
  // encoder.py's bpe() on ids: find the lowest-ranked adjacent pair, merge all its occurrences left
  // to right (non-overlapping), repeat. Quadratic; used only for merges files that are not
  // monotone (Tables::merges_monotone), never for GPT-2's.
  std::vector<uint32_t> word(n), next;
  for (size_t i = 0; i < n; ++i) word[i] = t.byte_id[bytes[i]];
  while (word.size() > 1) {
    uint32_t best = kNoRank;
    size_t at = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const uint32_t v = t.merges.Rank(word[i], word[i + 1]);
      if (v < best) {
        best = v;
        at = i;
      }
    }
    if (best == kNoRank) break;
    const uint32_t a = word[at], b = word[at + 1], merged = t.merges.IdOf(best);
    next.clear();
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == a && word[i + 1] == b) {
        next.push_back(merged);
        i += 2;
      } else {
        next.push_back(word[i++]);
      }
    }
    word.swap(next);
  }
  out->insert(out->end(), word.begin(), word.end());
}

size_t Gpt2Tokenizer::MergeShort(const Tables& t, const unsigned char* bytes, size_t n,
                                 uint32_t* out) {
  if (!t.merges_monotone) {
    std::vector<uint32_t> ids;
    EncoderPyMerge(t, bytes, n, &ids);
    std::copy(ids.begin(), ids.end(), out);
    return ids.size();
  }
  // Short pieces (nearly all of them): symbols stay where they started, in stack arrays, linked to
  // their right neighbour; a merged-away symbol's pair value becomes kNoRank. Each merge takes the
  // minimum of (value, position) over all positions, a branch-free scan, and looks up only the two
  // pairs it changed. No shifting, no allocation.
  uint32_t id[64], value[64];
  uint8_t next[64], prev[64];
  for (size_t i = 0; i < n; ++i) {
    id[i] = t.byte_id[bytes[i]];
    value[i] = i + 1 < n ? t.byte_pair_rank[(size_t{bytes[i]} << 8) | bytes[i + 1]] : kNoRank;
    next[i] = static_cast<uint8_t>(i + 1);
    prev[i] = static_cast<uint8_t>(i - 1);  // 255 for the first: never read
  }
  while (true) {
    // Four running minima, so the scan is not one chain of dependent compares.
    uint64_t b0 = ~uint64_t{0}, b1 = b0, b2 = b0, b3 = b0;
    size_t i = 0;
    for (; i + 4 < n; i += 4) {
      b0 = std::min(b0, (uint64_t{value[i]} << 8) | i);
      b1 = std::min(b1, (uint64_t{value[i + 1]} << 8) | (i + 1));
      b2 = std::min(b2, (uint64_t{value[i + 2]} << 8) | (i + 2));
      b3 = std::min(b3, (uint64_t{value[i + 3]} << 8) | (i + 3));
    }
    for (; i + 1 < n; ++i) b0 = std::min(b0, (uint64_t{value[i]} << 8) | i);
    const uint64_t best = std::min(std::min(b0, b1), std::min(b2, b3));
    const uint32_t v = static_cast<uint32_t>(best >> 8);
    if (v == kNoRank) break;
    i = best & 0xFF;
    const size_t right = next[i];
    id[i] = t.merges.IdOf(v);
    value[right] = kNoRank;  // `right` is merged into i
    next[i] = next[right];
    if (next[i] < n) {
      prev[next[i]] = static_cast<uint8_t>(i);
      value[i] = t.merges.Rank(id[i], id[next[i]]);
    } else {
      value[i] = kNoRank;
    }
    if (i > 0) value[prev[i]] = t.merges.Rank(id[prev[i]], id[i]);
  }
  size_t count = 0;
  for (size_t i = 0; i < n; i = next[i]) out[count++] = id[i];
  return count;
}

void Gpt2Tokenizer::MergePiece(const Tables& t, std::string_view piece, Cache::Impl& s,
                               std::vector<uint32_t>* out) {
  const size_t n = piece.size();
  const auto* bytes = reinterpret_cast<const unsigned char*>(piece.data());
  if (n == 1) {
    out->push_back(t.byte_id[bytes[0]]);
    return;
  }
  if (n <= 64) {
    uint32_t local[64];
    out->insert(out->end(), local, local + MergeShort(t, bytes, n, local));
    return;
  }
  if (!t.merges_monotone) {
    EncoderPyMerge(t, bytes, n, out);
    return;
  }

  std::vector<uint32_t>& ids = s.ids;
  ids.resize(n);
  for (size_t i = 0; i < n; ++i) ids[i] = t.byte_id[bytes[i]];

  // Long pieces (base64, runs of one letter, CJK runs, minified code): a doubly linked list of symbols,
  // the current rank of the pair starting at each symbol, and a min-heap of (rank << 32 | position) so
  // the lowest rank, then the leftmost position, merges first: O(n log n). A heap entry is stale when
  // its rank no longer matches the pair's current rank.
  std::vector<uint32_t>& prev = s.prev;
  std::vector<uint32_t>& next = s.next;
  std::vector<uint32_t>& pair_rank = s.ranks;
  prev.resize(n);
  next.resize(n);
  pair_rank.resize(n);
  constexpr uint32_t kNone = UINT32_MAX;
  auto& heap = s.heap;
  heap.clear();
  for (size_t i = 0; i < n; ++i) {
    prev[i] = i == 0 ? kNone : static_cast<uint32_t>(i - 1);
    next[i] = i + 1 == n ? kNone : static_cast<uint32_t>(i + 1);
    pair_rank[i] =
        i + 1 < n ? t.byte_pair_rank[(size_t{bytes[i]} << 8) | bytes[i + 1]] : kNoRank;
    if (pair_rank[i] != kNoRank) heap.push_back((uint64_t{pair_rank[i]} << 32) | i);
  }
  const auto greater = std::greater<uint64_t>();
  std::make_heap(heap.begin(), heap.end(), greater);
  auto update = [&](uint32_t pos) {
    pair_rank[pos] = next[pos] == kNone ? kNoRank : t.merges.Rank(ids[pos], ids[next[pos]]);
    if (pair_rank[pos] != kNoRank) {
      heap.push_back((uint64_t{pair_rank[pos]} << 32) | pos);
      std::push_heap(heap.begin(), heap.end(), greater);
    }
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), greater);
    const uint64_t top = heap.back();
    heap.pop_back();
    const uint32_t pos = static_cast<uint32_t>(top);
    const uint32_t rank = static_cast<uint32_t>(top >> 32);
    if (pair_rank[pos] != rank) continue;  // the pair changed since this entry was pushed
    const uint32_t right = next[pos];
    ids[pos] = t.merges.IdOf(rank);
    pair_rank[right] = kNoRank;  // `right` is gone
    next[pos] = next[right];
    if (next[right] != kNone) prev[next[right]] = pos;
    update(pos);
    if (prev[pos] != kNone) update(prev[pos]);
  }
  for (uint32_t i = 0; i != kNone; i = next[i]) out->push_back(ids[i]);
  // A piece of megabytes (a run of one letter; a binary blob, every byte of it U+FFFD) sized the
  // scratch to about 30 bytes per byte of it; kept, each worker held its largest piece's scratch
  // for the rest of the run (GBs on a 16-core node). Given back: freeing is cheap beside merging
  // such a piece.
  if (n > Cache::Impl::kScratchKept) s.ReleaseScratch();
}

namespace {
// Gpt2Tokenizer::kMaxTextBytes, enforced: a precondition, as ids_fit_16_bits() is EncodeTo's.
void CheckTextSize(size_t bytes) {
  if (__builtin_expect(bytes <= Gpt2Tokenizer::kMaxTextBytes, 1)) return;
  std::fprintf(stderr,
               "pileprep: Gpt2Tokenizer: a text of %zu bytes, more than kMaxTextBytes (%zu): its "
               "pieces' lengths are 32-bit\n",
               bytes, Gpt2Tokenizer::kMaxTextBytes);
  std::abort();
}
}  // namespace

void Gpt2Tokenizer::EncodePiece(std::string_view piece, std::vector<uint32_t>* ids) const {
  CheckTextSize(piece.size());
  if (piece.empty()) return;
  Cache::Impl scratch;
  MergePiece(*tables_, piece, scratch, ids);
}

void Gpt2Tokenizer::EncodePiece(std::string_view piece, Cache& scratch,
                                std::vector<uint32_t>* ids) const {
  CheckTextSize(piece.size());
  if (piece.empty()) return;
  MergePiece(*tables_, piece, *scratch.impl_, ids);
}

template <typename Id>
Id* Gpt2Tokenizer::EncodeOrdinary(std::string_view text, Cache::Impl& c, Id* out) const {
  static_assert(std::is_same_v<Id, uint32_t> || std::is_same_v<Id, uint16_t>);
  const Tables& t = *tables_;
  using Impl = Cache::Impl;
  // Pieces are resolved in groups: the cache slots of a whole group are prefetched first, so the
  // lookups overlap their memory latency instead of paying it one after another. Measured on the
  // sample corpus: 32 pieces gave 89 MB/s warm, 128 gave 113; larger groups gained nothing.
  constexpr size_t kGroup = 128;
  struct Pending {
    const char* p;
    uint32_t n;
    uint32_t slot;
    uint64_t k0, k1;  // short pieces: packed key; long pieces: k0 = hash, or kUntiered
  };
  Pending group[kGroup];
  // A long piece's k0 when it goes through neither the long nor the huge tier: a CJK run, or a
  // piece of more than 256 bytes (a tiered piece's k0 is odd).
  constexpr uint64_t kUntiered = 0;
  const bool cjk_in_tiers = options_.cache_long_cjk_runs;
  size_t count = 0;
  uint8_t long_at[kGroup];  // which of the group's pieces are of 16..64 bytes
  size_t long_count = 0;
  // Ids go straight to the caller's buffer: out[0..out_n). A text of n bytes has at most n ids (a
  // token is at least one byte), and a short hit writes at most 7 slots past its last id, a lone
  // character of a long piece at most 2 (kIdOverhang: 16), so the caller's MaxIds(n) slots always
  // suffice, with no check per piece.
  size_t out_n = 0;
  // Merges a piece into out[out_n...] through the scratch (merges are rare: cache misses).
  auto merge_into_ids = [&](std::string_view piece) {
    c.wide.clear();
    MergePiece(t, piece, c, &c.wide);
    std::copy(c.wide.begin(), c.wide.end(), out + out_n);
    out_n += c.wide.size();
    if (piece.size() > Impl::kScratchKept) std::vector<uint32_t>().swap(c.wide);  // as MergePiece
  };
  // Copies a short entry's ids (way w's 8, and `more`'s 8 for a piece of more than 8) to
  // out[pos...], 8 or 16 slots (no loop over a variable count, so no mispredicted branch), and
  // returns the position after the true count.
  auto copy_ids = [out](const Impl::ShortWay& w, const Impl::ShortWay& more, size_t pos) {
    const size_t num = Impl::Count(w);
#ifndef PILEPREP_SSE2
    for (size_t i = 0; i < 8; ++i) out[pos + i] = w.ids[i];
    if (num > 8) {
      for (size_t i = 0; i < 8; ++i) out[pos + 8 + i] = more.ids[i];
    }
#else
    if constexpr (std::is_same_v<Id, uint16_t>) {  // the entry's own width: 8 or 16 ids as they are
      __m128i* dst = reinterpret_cast<__m128i*>(out + pos);
      _mm_storeu_si128(dst, _mm_load_si128(reinterpret_cast<const __m128i*>(w.ids)));
      if (num > 8) {
        _mm_storeu_si128(dst + 1, _mm_load_si128(reinterpret_cast<const __m128i*>(more.ids)));
      }
    } else {
      const __m128i zero = _mm_setzero_si128();
      const __m128i lo = _mm_load_si128(reinterpret_cast<const __m128i*>(w.ids));
      __m128i* dst = reinterpret_cast<__m128i*>(out + pos);
      _mm_storeu_si128(dst, _mm_unpacklo_epi16(lo, zero));
      _mm_storeu_si128(dst + 1, _mm_unpackhi_epi16(lo, zero));
      if (num > 8) {  // rare: most pieces are one to three tokens
        const __m128i hi = _mm_load_si128(reinterpret_cast<const __m128i*>(more.ids));
        _mm_storeu_si128(dst + 2, _mm_unpacklo_epi16(hi, zero));
        _mm_storeu_si128(dst + 3, _mm_unpackhi_epi16(hi, zero));
      }
    }
#endif
    return pos + num;
  };

  // The ids of a character of 2 or 3 bytes on its own (Impl::char_ids), merged on first use.
  auto char_entry = [&](const unsigned char* b, size_t len) -> const Impl::CharIds& {
    Impl::CharIds& ch = c.char_ids[Impl::CharIdsIndex(b, len)];
    if (__builtin_expect(ch.num == 0, 0)) {  // the character's first time in this cache
      uint32_t merged[3];
      ch.num = static_cast<uint16_t>(MergeShort(t, b, len, merged));
      for (size_t i = 0; i < ch.num; ++i) ch.ids[i] = static_cast<uint16_t>(merged[i]);
    }
    return ch;
  };
  // The length (2 or 3) of the character at b[j] of the piece b[0..n) when it merges with nothing
  // after it: a lead byte C0..DF or E0..EF, its continuation bytes, then the piece's end or a pair of
  // bytes no merge joins. Else 0. A split before j is the caller's to know: with it, the character's
  // bytes are one or more whole parts (Tables::joinable), whose ids are the character's merged alone.
  auto lone_char = [&](const unsigned char* b, size_t n, size_t j) -> size_t {
    const unsigned char lead = b[j];
    if (lead < 0xC0 || lead >= 0xF0) return 0;
    const size_t len = lead >= 0xE0 ? 3 : 2;
    const bool whole = j + len <= n && (b[j + 1] & 0xC0) == 0x80 &&
                       (len == 2 || (b[j + 2] & 0xC0) == 0x80) &&
                       (j + len == n || !t.Joinable(b[j + len - 1], b[j + len]));
    return whole ? len : 0;
  };
  // Where the part of the piece b[0..n) that starts at b[j] ends: at the first pair of bytes after j
  // that no merge joins (Tables::joinable), or at n. The one split rule of merge_short and merge_split.
  auto part_end = [&](const unsigned char* b, size_t n, size_t j) {
    size_t end = j + 1;
    while (end < n && t.Joinable(b[end - 1], b[end])) ++end;
    return end;
  };
  // The ids of a short pre-token that missed (packed as k0, k1), into merged[0..15). One with
  // non-ASCII bytes is split where no merge joins two bytes, as merge_split splits long pieces: its
  // characters that stand alone take their ids from char_ids, and the other parts are merged on
  // their own, which costs less than merging the whole (a new CJK word of two to five characters is
  // then a few loads). An ASCII piece is merged whole: Latin letters nearly all join, and the search
  // for a split would mostly find none.
  auto merge_short = [&](const unsigned char* b, size_t n, uint64_t k0, uint64_t k1,
                         uint32_t* merged) -> size_t {
    if (((k0 | k1) & 0x8080808080808080ull) == 0) return MergeShort(t, b, n, merged);
    size_t count = 0;
    for (size_t j = 0; j < n;) {
      if (const size_t len = lone_char(b, n, j); len != 0) {
        const Impl::CharIds& ch = char_entry(b + j, len);
        for (size_t i = 0; i < ch.num; ++i) merged[count + i] = ch.ids[i];
        count += ch.num;
        j += len;
        continue;
      }
      const size_t end = part_end(b, n, j);
      count += MergeShort(t, b + j, end - j, merged + count);
      j = end;
    }
    return count;
  };
  // The ids of a piece of 1..15 bytes (packed as k0, k1; its set `slot`) to out[pos...], from the
  // short tier or merged (at most 15 ids: one per byte) and remembered there; returns the position
  // after them. `piece`: a pre-token, counted in the stats when it misses, and split by merge_short;
  // else a part of a long piece, which no split point divides: merged whole.
  auto short_piece = [&](const char* p, size_t n, uint64_t k0, uint64_t k1, size_t slot, size_t pos,
                         bool piece) __attribute__((always_inline)) {
    Impl::ShortSet& set = c.short_sets[slot];
    const bool in0 = Impl::Holds(set.way[0], k0, k1);
    const bool in1 = Impl::Holds(set.way[1], k0, k1);
    if (__builtin_expect(in0 | in1, 1)) {
      // The way picked by a select, not a branch: which way holds a piece is unpredictable.
      const size_t w = in0 ? 0 : 1;
      pos = copy_ids(set.way[w], set.way[1], pos);  // way 1: more ids only for a hit in way 0
      if (!in0) Impl::Promote(set);                 // least recently used last
      return pos;
    }
    if (piece) ++c.stats.merged;
    uint32_t merged[Impl::kShortKeyBytes];
    const auto* bytes = reinterpret_cast<const unsigned char*>(p);
    const size_t produced =
        piece ? merge_short(bytes, n, k0, k1, merged) : MergeShort(t, bytes, n, merged);
    std::copy(merged, merged + produced, out + pos);
    Impl::Insert(set, k0, k1, merged, produced);
    return pos + produced;
  };
  // A piece of more than 15 bytes that no tier holds: split where no merge can join two bytes
  // (Tables::joinable); a part that is one character of 2 or 3 bytes takes its ids from char_ids,
  // another part of up to 15 bytes is taken as a short piece, a longer one merged. The long pieces
  // of multilingual text (Cyrillic and Greek words, CJK runs) fall apart into parts of one to a few
  // characters, nearly all of them lone characters or already in the short tier, so such a piece
  // costs a few loads and lookups instead of tens of merges. The parts' lines are prefetched
  // together before the first is read.
  auto merge_split = [&](std::string_view piece) {
    const auto* b = reinterpret_cast<const unsigned char*>(piece.data());
    const size_t n = piece.size();
    struct Part {
      uint32_t from, len;
      bool lone_char;   // one character of 2 or 3 bytes: its ids from char_ids
      uint32_t slot;    // else, up to 15 bytes: its set in the short tier
      uint64_t k0, k1;  // and its packed key
    };
    constexpr size_t kParts = 64;
    Part part[kParts];
    for (size_t from = 0; from < n;) {
      size_t count = 0;
      size_t j = from;
      for (; j < n && count < kParts; ++count) {
        Part& q = part[count];
        q.from = static_cast<uint32_t>(j);
        q.lone_char = false;
        if (const size_t len = lone_char(b, n, j); len != 0) {  // j starts a part: a split before
          q.len = static_cast<uint32_t>(len);
          q.lone_char = true;
          __builtin_prefetch(&c.char_ids[Impl::CharIdsIndex(b + j, len)]);
          j += len;
          continue;
        }
        const size_t end = part_end(b, n, j);
        q.len = static_cast<uint32_t>(end - j);
        if (q.len <= Impl::kShortKeyBytes) {
          Impl::Pack(piece.data() + j, q.len, &q.k0, &q.k1);
          q.slot = static_cast<uint32_t>(c.ShortIndex(q.k0, q.k1));
          __builtin_prefetch(&c.short_sets[q.slot]);
        }
        j = end;
      }
      if (count == 1 && part[0].len == n) {  // no split
        merge_into_ids(piece);
        return;
      }
      for (size_t k = 0; k < count; ++k) {
        const Part& q = part[k];
        if (q.lone_char) {
          const Impl::CharIds& ch = char_entry(b + q.from, q.len);
          // All three slots, whatever the count: no branch on it (within kIdOverhang).
          out[out_n] = ch.ids[0];
          out[out_n + 1] = ch.ids[1];
          out[out_n + 2] = ch.ids[2];
          out_n += ch.num;
        } else if (q.len > Impl::kShortKeyBytes) {
          merge_into_ids(piece.substr(q.from, q.len));
        } else {
          out_n = short_piece(piece.data() + q.from, q.len, q.k0, q.k1, q.slot, out_n, false);
        }
      }
      from = j;
    }
  };

  // Hit, or merge and remember, for the tiers keyed by hash and bytes.
  auto big_lookup = [&](auto& tier, const Pending& q, std::string_view piece) {
    auto& tags = tier.tags[q.slot];
    auto* entries = &tier.entries[size_t{q.slot} * Impl::kWays];
    const uint32_t tag = Impl::Tag(q.k0);
    for (size_t way = 0; way < Impl::kWays; ++way) {
      if (tags.tag[way] != tag) continue;
      auto& e = entries[tags.entry[way]];
      if (e.len == q.n && Equal16Plus(e.key, q.p, q.n)) {
        std::copy(e.ids, e.ids + e.num_ids, out + out_n);
        out_n += e.num_ids;
        if (way > 0) {  // one step towards the front per hit: cheaper than moving to the front
          std::swap(tags.tag[way], tags.tag[way - 1]);
          std::swap(tags.entry[way], tags.entry[way - 1]);
        }
        return;
      }
    }
    ++c.stats.merged;
    const size_t before = out_n;
    merge_split(piece);
    const size_t produced = out_n - before;
    if (produced <= std::remove_reference_t<decltype(tier)>::kMaxIds) {
      const uint8_t victim = tags.entry[Impl::kWays - 1];  // least recently used out
      for (size_t w = Impl::kWays - 1; w > 0; --w) {
        tags.tag[w] = tags.tag[w - 1];
        tags.entry[w] = tags.entry[w - 1];
      }
      tags.tag[0] = tag;
      tags.entry[0] = victim;
      auto& e = entries[victim];
      e.len = q.n;
      e.num_ids = static_cast<uint32_t>(produced);
      std::memcpy(e.key, q.p, q.n);
      std::copy(out + before, out + out_n, e.ids);
    }
  };
  auto resolve = [&] {
    c.stats.pieces += count;
    // The long pieces' tags lines were prefetched when they were found; now the one entry that
    // matches (its key and ids span four lines) is prefetched, a group's work ahead of its use.
    // Prefetching the first line of all four entries of the set instead, with the tags: a second pass
    // over the sample corpus 329.8 -> 342.1 MB/s (tokenize_bench --ids16, alternating runs).
    for (size_t k = 0; k < long_count; ++k) {
      const Pending& q = group[long_at[k]];
      const auto& tags = c.long_tier.tags[q.slot];
      const uint32_t tag = Impl::Tag(q.k0);
      for (size_t way = 0; way < Impl::kWays; ++way) {
        if (tags.tag[way] != tag) continue;
        const auto* e = &c.long_tier.entries[size_t{q.slot} * Impl::kWays + tags.entry[way]];
        const char* bytes = reinterpret_cast<const char*>(e);
        for (size_t off = 0; off < sizeof *e; off += 64) __builtin_prefetch(bytes + off);
        __builtin_prefetch(bytes + sizeof *e - 1);
        break;
      }
    }
    long_count = 0;
    if (!c.enabled) {
      for (size_t g = 0; g < count; ++g) merge_into_ids(std::string_view(group[g].p, group[g].n));
      c.stats.merged += count;
      count = 0;
      return;
    }
    // The output position lives in a local here, not in out_n, which the lambdas share: the compiler
    // would otherwise keep it in memory and reload it around every store to `out`.
    size_t pos = out_n;
    for (size_t g = 0; g < count; ++g) {
      const Pending& q = group[g];
      if (__builtin_expect(q.n <= Impl::kShortKeyBytes, 1)) {
        // Every piece of up to 15 bytes, single bytes included, takes this one path.
        pos = short_piece(q.p, q.n, q.k0, q.k1, q.slot, pos, true);
      } else {
        out_n = pos;
        if (q.k0 == kUntiered) {
          ++c.stats.merged;
          merge_split(std::string_view(q.p, q.n));
        } else if (q.n <= Impl::kLongKeyBytes) {
          big_lookup(c.long_tier, q, std::string_view(q.p, q.n));
        } else {
          big_lookup(c.huge_tier, q, std::string_view(q.p, q.n));
        }
        pos = out_n;
      }
    }
    out_n = pos;
    count = 0;
  };

  internal::Pretokenize(text, [&](std::string_view piece) __attribute__((always_inline)) {
    Pending& q = group[count++];
    q.p = piece.data();
    q.n = static_cast<uint32_t>(piece.size());
    if (!c.enabled) {
      // no cache: resolve() merges every piece
    } else if (__builtin_expect(q.n <= Impl::kShortKeyBytes, 1)) {
      Impl::Pack(q.p, q.n, &q.k0, &q.k1);
      q.slot = static_cast<uint32_t>(c.ShortIndex(q.k0, q.k1));
      __builtin_prefetch(&c.short_sets[q.slot]);
    } else if (!cjk_in_tiers && StartsCjkRun(q.p)) {
      q.k0 = kUntiered;  // resolve() splits and merges it, no tier
    } else if (q.n <= Impl::kLongKeyBytes) {
      q.k0 = Impl::HashBytes(piece) | 1;
      q.slot = static_cast<uint32_t>((q.k0 >> 17) & c.long_tier.mask);
      __builtin_prefetch(&c.long_tier.tags[q.slot]);
      long_at[long_count++] = static_cast<uint8_t>(count - 1);
    } else if (q.n <= Impl::kHugeKeyBytes) {
      q.k0 = Impl::HashBytes(piece) | 1;
      q.slot = static_cast<uint32_t>((q.k0 >> 17) & c.huge_tier.mask);
      __builtin_prefetch(&c.huge_tier.tags[q.slot]);
    } else {
      q.k0 = kUntiered;  // longer than any tier
    }
    if (count == kGroup) resolve();
  });
  resolve();
  return out + out_n;
}

// Both vector forms size the vector for the worst case, encode into it, and trim it: value-
// initialising the room costs a memset, which the pipeline avoids by calling EncodeTo on a buffer of
// its own.
template <typename Id>
void Gpt2Tokenizer::AppendEncoded(std::string_view text, Cache& cache, std::vector<Id>* ids) const {
  CheckTextSize(text.size());  // before the room for its ids is made (16 GiB for 4 GiB of text)
  const size_t before = ids->size();
  ids->resize(before + MaxIds(text.size()));
  ids->resize(before + EncodeTo(text, cache, ids->data() + before));
}

void Gpt2Tokenizer::Encode(std::string_view text, Cache& cache, std::vector<uint32_t>* ids) const {
  AppendEncoded(text, cache, ids);
}

bool Gpt2Tokenizer::Encode(std::string_view text, Cache& cache, std::vector<uint16_t>* ids) const {
  if (!ids_fit_16_bits_) return false;
  AppendEncoded(text, cache, ids);
  return true;
}

size_t Gpt2Tokenizer::EncodeTo(std::string_view text, Cache& cache, uint32_t* out) const {
  return static_cast<size_t>(EncodeWithSpecial(text, cache, out) - out);
}

size_t Gpt2Tokenizer::EncodeTo(std::string_view text, Cache& cache, uint16_t* out) const {
  if (!ids_fit_16_bits_) std::abort();  // documented precondition: no id may be cut to 16 bits
  return static_cast<size_t>(EncodeWithSpecial(text, cache, out) - out);
}

template <typename Id>
Id* Gpt2Tokenizer::EncodeWithSpecial(std::string_view text, Cache& cache, Id* out) const {
  CheckTextSize(text.size());
  if (__builtin_expect(cache.impl_->bound != instance_, 0)) cache.Bind(*this);
  if (!options_.endoftext_is_special) return EncodeOrdinary(text, *cache.impl_, out);
  // Literal <|endoftext|> is split out first; the text on each side is tokenized on its own.
  size_t pos = 0;
  while (true) {
    const size_t hit = FindEndOfText(text, pos);
    if (hit == std::string_view::npos) break;
    out = EncodeOrdinary(text.substr(pos, hit - pos), *cache.impl_, out);
    *out++ = static_cast<Id>(eod_id_);
    pos = hit + kEndOfText.size();
  }
  return EncodeOrdinary(text.substr(pos), *cache.impl_, out);
}

std::string Gpt2Tokenizer::Decode(const std::vector<uint32_t>& ids) const {
  std::string out;
  for (uint32_t id : ids) {
    if (id < tables_->id_bytes.size()) out += tables_->id_bytes[id];
  }
  return out;
}

bool Gpt2Tokenizer::HasId(uint32_t id) const {
  return id < tables_->id_bytes.size() && !tables_->id_bytes[id].empty();
}

}  // namespace pileprep
