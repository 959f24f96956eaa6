#include "pileprep/gpt2_tokenizer.h"

#include <malloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pileprep {
namespace {

using ::testing::ElementsAre;

const std::string kDir = PILEPREP_SOURCE_DIR "/tokenizers/gpt2/";

std::unique_ptr<Gpt2Tokenizer> Load(Gpt2Tokenizer::Options options = {}) {
  auto tok = Gpt2Tokenizer::FromFiles(kDir + "encoder.json", kDir + "vocab.bpe", options);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return std::move(tok).value();
}

// Encodes `text` `rounds` times with each tokenizer, each through a cache of its own kept from
// round to round: in every round every tokenizer's ids equal the first one's, which decode to the
// text.
void ExpectSameIdsThroughKeptCaches(const std::string& text,
                                    const std::vector<const Gpt2Tokenizer*>& tokenizers,
                                    int rounds) {
  std::vector<std::unique_ptr<Gpt2Tokenizer::Cache>> caches;
  for (const Gpt2Tokenizer* tok : tokenizers) {
    caches.push_back(std::make_unique<Gpt2Tokenizer::Cache>(*tok));
  }
  for (int round = 0; round < rounds; ++round) {
    std::vector<uint32_t> want;
    tokenizers[0]->Encode(text, *caches[0], &want);
    EXPECT_EQ(tokenizers[0]->Decode(want), text) << round;
    for (size_t i = 1; i < tokenizers.size(); ++i) {
      std::vector<uint32_t> ids;
      tokenizers[i]->Encode(text, *caches[i], &ids);
      EXPECT_EQ(ids, want) << "tokenizer " << i << ", round " << round;
    }
  }
}

std::vector<uint32_t> Encode(const Gpt2Tokenizer& tok, std::string_view text) {
  Gpt2Tokenizer::Cache cache(tok);
  std::vector<uint32_t> ids;
  tok.Encode(text, cache, &ids);
  return ids;
}

TEST(Gpt2Tokenizer, LoadsShippedVocabulary) {
  auto tok = Load();
  EXPECT_EQ(tok->vocab_size(), 50257u);
  EXPECT_EQ(tok->id_limit(), 50257u);  // ids 0..50256, no holes
  EXPECT_EQ(tok->eod_id(), 50256u);
}

// The shard job records this value beside its outputs and compares it on every rerun: a change
// here (of the hash or of what it covers) would make every earlier output directory look as if
// another tokenizer had made it.
TEST(Gpt2Tokenizer, FingerprintOfGpt2IsStable) {
  EXPECT_EQ(Load()->fingerprint(), 0x545cbcbf8f1c2374ull);
}

TEST(Gpt2Tokenizer, EncodesKnownIds) {
  auto tok = Load();
  EXPECT_THAT(Encode(*tok, "Hello world"), ElementsAre(15496, 995));
  // Two ideographic spaces then a letter: three pieces (gpt2.md §1), GPT-2 ids 5099 222 each.
  EXPECT_THAT(Encode(*tok, "\u3000\u3000a"), ElementsAre(5099, 222, 5099, 222, 64));
  EXPECT_THAT(Encode(*tok, "\xef\xbf\xbd"), ElementsAre(4210));  // U+FFFD
  EXPECT_TRUE(Encode(*tok, "").empty());
}

TEST(Gpt2Tokenizer, LiteralEndOfTextIsOneIdByDefault) {
  auto tok = Load();
  EXPECT_THAT(Encode(*tok, "a<|endoftext|>b"), ElementsAre(64, 50256, 65));
  EXPECT_THAT(Encode(*tok, "<|endoftext|><|endoftext|>"), ElementsAre(50256, 50256));
}

// The marker is found wherever it lies against the search's blocks, among near misses ("<", "<|",
// "|<", "<|endoftext|" cut short), and again after a first one, and not when the text ends inside
// it: the ids equal those of the text split at the marker by hand.
TEST(Gpt2Tokenizer, LiteralEndOfTextFoundAtEveryOffsetAmongNearMisses) {
  auto tok = Load();
  Gpt2Tokenizer::Cache cache(*tok);
  auto encode = [&](const std::string& text) {
    std::vector<uint32_t> ids;
    tok->Encode(text, cache, &ids);
    return ids;
  };
  const std::string marker = "<|endoftext|>";
  for (const std::string filler : {"x", "<", "<|", "|<", "a<|endoftext", "<<||"}) {
    for (size_t before = 0; before < 140; ++before) {
      for (size_t after = 0; after < 20; ++after) {
        std::string head, tail;
        while (head.size() < before) head += filler;
        while (tail.size() < after) tail += filler;
        head.resize(before);
        tail.resize(after);
        std::vector<uint32_t> want = encode(head);
        want.push_back(tok->eod_id());
        const std::vector<uint32_t> rest = encode(tail);
        want.insert(want.end(), rest.begin(), rest.end());
        ASSERT_EQ(encode(head + marker + tail), want) << head << marker << tail;
        want.push_back(tok->eod_id());
        ASSERT_EQ(encode(head + marker + tail + marker), want) << head << marker << tail << marker;
        // Cut short by the end of the text: ordinary text, no end-of-text id.
        const std::string cut = head + marker.substr(0, marker.size() - 1 - after % 12);
        const std::vector<uint32_t> ids = encode(cut);
        ASSERT_EQ(std::count(ids.begin(), ids.end(), tok->eod_id()), 0) << cut;
        ASSERT_EQ(tok->Decode(ids), cut);
      }
    }
  }
}

TEST(Gpt2Tokenizer, LiteralEndOfTextCanBeOrdinaryText) {
  auto tok = Load({.endoftext_is_special = false});
  const std::vector<uint32_t> ids = Encode(*tok, "<|endoftext|>");
  EXPECT_GT(ids.size(), 1u);
  EXPECT_EQ(tok->Decode(ids), "<|endoftext|>");
}

TEST(Gpt2Tokenizer, HasExactlyTheVocabularysIds) {
  auto tok = Load({});
  EXPECT_TRUE(tok->HasId(0));
  EXPECT_TRUE(tok->HasId(50256));
  EXPECT_FALSE(tok->HasId(50257));
  EXPECT_FALSE(tok->HasId(65535));
  EXPECT_EQ(tok->Decode({31373, 50257, 995}), "hello world");  // an unknown id has no bytes
}

TEST(Gpt2Tokenizer, CacheNeverChangesResults) {
  auto tok = Load({.cache_entries = 2});  // constant collisions and evictions
  auto two_sets = Load({.cache_entries = 8});
  auto big = Load();
  const std::string text =
      "The quick brown fox jumps over the lazy dog. The quick brown fox! 12345 ünïcödé "
      "日本語のテキスト and emoji 🦊🦊 again the quick brown fox";
  ExpectSameIdsThroughKeptCaches(text, {big.get(), tok.get(), two_sets.get()}, 3);
}

// A short piece of more than 8 ids takes both ways of its set (its ids past the 8th in the second):
// pieces of both kinds, in a cache of two sets, in a random order that puts every kind of piece
// after every other in one set, hit and evicted over and over, always give the ids of a fresh
// encoding. Checked both through the 32-bit and the 16-bit form.
TEST(Gpt2Tokenizer, ShortPiecesOfMoreThanEightIdsShareSetsWithOthersInAnyOrder) {
  auto tok = Load({.cache_entries = 4});
  auto fresh = Load();
  const std::vector<std::string> pieces = {
      " \xf0\x9f\xa6\x8a\xf0\x9f\xa6\x8a\xf0\x9f\xa6\x8a",  // 13 bytes, one id per byte or so
      " \xe2\x8a\x97\xe2\x8a\x95\xe2\x8a\x98\xe2\x8a\x99",  // " ⊗⊕⊘⊙"
      "\xf0\x9f\xa6\x8a\xf0\x9f\xa6\x8a\xf0\x9f\xa6\x8a",  " the", " fox", ",", " quick", "!"};
  std::vector<std::vector<uint32_t>> want;
  size_t long_ones = 0;
  for (const std::string& p : pieces) {
    want.push_back(Encode(*fresh, p));
    if (want.back().size() > 8 && p.size() <= 15) ++long_ones;
  }
  ASSERT_EQ(long_ones, 3u) << "the first three must be short pieces of more than 8 ids";
  Gpt2Tokenizer::Cache cache(*tok), cache16(*tok);
  uint64_t x = 12345;
  for (int step = 0; step < 4000; ++step) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const size_t k = (x >> 33) % pieces.size();
    std::vector<uint32_t> got;
    std::vector<uint16_t> got16;
    tok->Encode(pieces[k], cache, &got);
    ASSERT_TRUE(tok->Encode(pieces[k], cache16, &got16));
    ASSERT_EQ(got, want[k]) << "step " << step << ", piece " << k;
    ASSERT_TRUE(std::equal(want[k].begin(), want[k].end(), got16.begin(), got16.end())) << step;
  }
  EXPECT_GT(cache.stats().pieces - cache.stats().merged, 1000u);  // hits too, not only merges
}

// The 16-bit form, which the pipeline uses for a uint16 .bin, gives the very same ids: short, long,
// huge and over-256-byte pieces, cache hits and misses (a cache of two entries evicts constantly),
// literal <|endoftext|>.
TEST(Gpt2Tokenizer, SixteenBitIdsEqualThirtyTwoBitIds) {
  std::string text =
      "The quick brown fox jumps over the lazy dog. 12345 ünïcödé 日本語のテキスト 🦊🦊 "
      "Пример текста на русском языке<|endoftext|>  indented\n\tcode(x) {}\n"
      " 🦊🦊🦊 ⊗⊕⊘⊙⊚ ";  // short pieces of more than eight ids
  text += std::string(40, 'a') + " " + std::string(200, ' ') + "x" + std::string(1000, '7');
  for (int i = 0; i < 40; ++i) text += "日本語" + std::to_string(i * 7919) + " ";
  for (size_t entries : {size_t{2}, size_t{1} << 18}) {
    auto tok = Load({.cache_entries = entries});
    ASSERT_TRUE(tok->ids_fit_16_bits());
    Gpt2Tokenizer::Cache c32(*tok), c16(*tok);
    for (int round = 0; round < 2; ++round) {
      std::vector<uint32_t> wide;
      std::vector<uint16_t> narrow = {7};  // appended to, like the wide form
      tok->Encode(text, c32, &wide);
      ASSERT_TRUE(tok->Encode(text, c16, &narrow));
      ASSERT_EQ(narrow.size(), wide.size() + 1);
      EXPECT_EQ(narrow[0], 7);
      EXPECT_TRUE(std::equal(wide.begin(), wide.end(), narrow.begin() + 1)) << entries;
      EXPECT_GT(std::count(wide.begin(), wide.end(), 50256u), 0);
    }
  }
}

// Hits of long pieces go straight to the output: a group of 128 pieces that are all 253-byte runs of
// emoji (about 190 ids each), or that alternate with short ones, give the ids of an encoding that
// never hits.
TEST(Gpt2Tokenizer, GroupsOfLongPieceHitsGiveTheSameIds) {
  std::string fox;
  for (int i = 0; i < 63; ++i) fox += "\xf0\x9f\xa6\x8a";
  std::string text;
  for (int i = 0; i < 300; ++i) text += " " + fox + (i % 3 == 0 ? " a b c" : "");
  std::string cjk;
  for (int i = 0; i < 20; ++i) cjk += "\xe6\x97\xa5";  // a 60-byte piece
  for (int i = 0; i < 300; ++i) text += " " + cjk + " x";
  auto tok = Load();
  auto tiny = Load({.cache_entries = 4});
  Gpt2Tokenizer::Cache cache(*tok), tiny_cache(*tiny);
  std::vector<uint32_t> want;
  tiny->Encode(text, tiny_cache, &want);
  for (int round = 0; round < 2; ++round) {
    std::vector<uint32_t> wide;
    std::vector<uint16_t> narrow;
    tok->Encode(text, cache, &wide);
    ASSERT_TRUE(tok->Encode(text, cache, &narrow));
    EXPECT_EQ(wide, want);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), narrow.begin(), narrow.end()));
  }
  EXPECT_GT(want.size(), 300u * 150);
}

// A text of 4 GiB or more: lengths inside are 32-bit, so one piece of 2^32 + 3 letters gave the ids
// of three, silently. Refused now (a documented precondition): abort, naming the limit, before a
// byte is read. The text is 4 GiB of a mapping no byte of which is ever touched (no memory used).
TEST(Gpt2TokenizerDeathTest, TextsOfMoreThanKMaxTextBytesAbort) {
  // No core file of the dying children (4 GiB of address space each: minutes to write).
  const rlimit no_core{0, 0};
  ASSERT_EQ(setrlimit(RLIMIT_CORE, &no_core), 0);
  auto tok = Load({.cache_entries = 4});
  const size_t n = Gpt2Tokenizer::kMaxTextBytes + 1;
  void* p = mmap(nullptr, n, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  const std::string_view huge(static_cast<const char*>(p), n);
  Gpt2Tokenizer::Cache cache(*tok);
  std::vector<uint32_t> ids;
  EXPECT_DEATH(tok->Encode(huge, cache, &ids),
               "a text of 4294967296 bytes, more than kMaxTextBytes");
  EXPECT_DEATH(tok->EncodeTo(huge, cache, static_cast<uint32_t*>(nullptr)), "kMaxTextBytes");
  EXPECT_DEATH(tok->EncodePiece(huge, &ids), "a text of 4294967296 bytes");
  munmap(p, n);
  // The limit itself is taken (here as the length of an empty text's limit check: nothing read).
  EXPECT_EQ(tok->EncodeTo(huge.substr(0, 0), cache, static_cast<uint32_t*>(nullptr)), 0u);
}

// Memory that runs out while the vocabulary loads (ulimit -v, a cgroup with overcommit off) is a
// status, ResourceExhausted, not std::bad_alloc out of the library (std::terminate in the CLI,
// where a status is exit 2 and a message). A child under an address-space limit a little above what
// it uses, for a range of margins: each load either works or says memory ran out; never an abort.
TEST(Gpt2TokenizerDeathTest, RunningOutOfMemoryWhileLoadingIsAStatus) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's shadow memory does not fit under an address-space limit";
#endif
  const rlimit no_core{0, 0};
  ASSERT_EQ(setrlimit(RLIMIT_CORE, &no_core), 0);
  const std::string vocab = kDir + "encoder.json", merges = kDir + "vocab.bpe";
  auto load_under_limit = [&](size_t margin) {
    long pages = 0;
    std::FILE* f = std::fopen("/proc/self/statm", "r");
    if (f == nullptr || std::fscanf(f, "%ld", &pages) != 1) std::_Exit(3);
    std::fclose(f);
    const rlim_t limit =
        static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + margin;
    const rlimit as{limit, limit};
    if (setrlimit(RLIMIT_AS, &as) != 0) std::_Exit(3);
    auto tok = Gpt2Tokenizer::FromFiles(vocab, merges, {.cache_entries = 4});
    if (tok.ok()) std::_Exit(0);
    std::fprintf(stderr, "%s\n", std::string(tok.status().message()).c_str());
    std::_Exit(tok.status().code() == absl::StatusCode::kResourceExhausted ? 1 : 2);
  };
  int out_of_memory = 0;
  for (size_t margin_mib : {1, 2, 4, 8, 16, 32, 64}) {
    SCOPED_TRACE(::testing::Message() << margin_mib << " MiB above the child's use");
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) load_under_limit(margin_mib << 20);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << "died of signal " << WTERMSIG(status);
    EXPECT_NE(WEXITSTATUS(status), 2) << "failed, but not for memory";
    EXPECT_NE(WEXITSTATUS(status), 3) << "the limit could not be set";
    out_of_memory += WEXITSTATUS(status) == 1;
  }
  EXPECT_GT(out_of_memory, 0) << "no margin was small enough to run out";
}

// EncodeTo writes into a buffer of exactly MaxIds(n) (heap, so ASan sees a write past it): the text
// of most ids per byte (every byte its own one-byte piece and token, the last one a cache hit that
// copies 8 slots), short and long hits and misses, literal <|endoftext|>; the same ids as Encode.
TEST(Gpt2Tokenizer, EncodeToFitsMaxIdsAndEqualsEncode) {
  std::string dense;
  for (int i = 0; i < 500; ++i) dense += "a!";
  std::string mixed = "The quick brown fox 12345 \u00fc \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e<|endoftext|>\n\tx";
  mixed += std::string(300, ' ') + "y" + std::string(90, '9') + " Пример текста на русском языке";
  for (size_t entries : {size_t{4}, size_t{1} << 18}) {
    auto tok = Load({.cache_entries = entries});
    Gpt2Tokenizer::Cache cache(*tok), other(*tok);
    for (const std::string& text : {dense, mixed, std::string("a"), std::string()}) {
      for (int round = 0; round < 2; ++round) {  // misses, then hits
        std::vector<uint32_t> want;
        tok->Encode(text, other, &want);
        auto wide = std::make_unique<uint32_t[]>(Gpt2Tokenizer::MaxIds(text.size()));
        auto narrow = std::make_unique<uint16_t[]>(Gpt2Tokenizer::MaxIds(text.size()));
        const size_t n32 = tok->EncodeTo(text, cache, wide.get());
        const size_t n16 = tok->EncodeTo(text, cache, narrow.get());
        ASSERT_EQ(n32, want.size());
        ASSERT_EQ(n16, want.size());
        EXPECT_TRUE(std::equal(want.begin(), want.end(), wide.get())) << entries;
        EXPECT_TRUE(std::equal(want.begin(), want.end(), narrow.get())) << entries;
      }
    }
    std::vector<uint32_t> ids;
    tok->Encode(dense, cache, &ids);
    EXPECT_EQ(ids.size(), dense.size());  // one id per byte: the bound is reached
  }
}

// The long tier's sets have eight ways: in the smallest cache (one long set), eight distinct pieces
// of 16..64 bytes taken in turn all hit from the second round on; with a ninth they evict one
// another (least recently used out) and every one misses.
TEST(Gpt2Tokenizer, LongTierSetHoldsEightPieces) {
  auto tok = Load({.cache_entries = 4});
  auto misses_per_round = [&](int pieces) {
    Gpt2Tokenizer::Cache cache(*tok);
    std::vector<uint64_t> misses;
    for (int round = 0; round < 3; ++round) {
      const uint64_t before = cache.stats().merged;
      for (int i = 0; i < pieces; ++i) {
        std::vector<uint32_t> ids;
        // One pre-token of 22 bytes: letters only.
        tok->Encode(" internationalization" + std::string(1, static_cast<char>('a' + i)), cache,
                    &ids);
        EXPECT_EQ(tok->Decode(ids).size(), 22u);
      }
      misses.push_back(cache.stats().merged - before);
    }
    return misses;
  };
  EXPECT_THAT(misses_per_round(8), ElementsAre(8, 0, 0));
  EXPECT_THAT(misses_per_round(9), ElementsAre(9, 9, 9));
}

TEST(Gpt2Tokenizer, CacheCountsPiecesAndMerges) {
  auto tok = Load({.prefill_cache_with_vocabulary = false});
  Gpt2Tokenizer::Cache cache(*tok);
  std::vector<uint32_t> ids;
  tok->Encode("a cat and a cat", cache, &ids);  // "a", " cat", " and", " a", " cat"
  EXPECT_EQ(cache.stats().pieces, 5u);
  EXPECT_EQ(cache.stats().merged, 4u);  // " cat" the second time is a hit
  tok->Encode("a cat and a cat", cache, &ids);
  EXPECT_EQ(cache.stats().pieces, 10u);
  EXPECT_EQ(cache.stats().merged, 4u);
}

// A new cache holds the vocabulary's one-piece entries: the words of "a cat and a cat" are all
// tokens, so none is merged; a word that is no entry is. Every entry's bytes, taken as text, get
// the same ids from a prefilled cache as from one that starts empty, and nearly all of them from
// the cache.
TEST(Gpt2Tokenizer, PrefilledCacheHoldsTheVocabularysPiecesWithTheirIds) {
  auto tok = Load();
  Gpt2Tokenizer::Cache cache(*tok);
  std::vector<uint32_t> ids;
  tok->Encode("a cat and a cat", cache, &ids);
  EXPECT_EQ(cache.stats().pieces, 5u);
  EXPECT_EQ(cache.stats().merged, 0u);
  tok->Encode(" qxzqv", cache, &ids);
  EXPECT_EQ(cache.stats().merged, 1u);
  auto plain = Load({.prefill_cache_with_vocabulary = false});
  Gpt2Tokenizer::Cache empty(*plain);
  const auto before = cache.stats();
  for (uint32_t id = 0; id < tok->vocab_size(); ++id) {
    const std::string text = tok->Decode({id});
    std::vector<uint32_t> prefilled, merged;
    tok->Encode(text, cache, &prefilled);
    plain->Encode(text, empty, &merged);
    ASSERT_EQ(prefilled, merged) << id;
  }
  // And from the cache: only the entries of more than 15 bytes or of several pieces were merged
  // (195 of 50,273 pieces; a cache that starts empty merges nearly all of them).
  const uint64_t pieces = cache.stats().pieces - before.pieces;
  EXPECT_LT(cache.stats().merged - before.merged, pieces / 100) << pieces;
}

TEST(Gpt2Tokenizer, CacheCountsEveryTier) {
  auto tok = Load({.prefill_cache_with_vocabulary = false});
  Gpt2Tokenizer::Cache cache(*tok);
  std::vector<uint32_t> ids;
  // " qqq...": a space and a run of q (built in place: GCC 12 warns, wrongly, on " " + std::string).
  auto word = [](size_t n) {
    std::string w(n, 'q');
    w[0] = ' ';
    return w;
  };
  const std::string long_word = word(20);    // the 16..64-byte tier
  const std::string huge_word = word(100);   // the 65..256-byte tier
  const std::string giant_word = word(300);  // never cached
  for (const std::string& word : {long_word, huge_word}) {
    const auto before = cache.stats();
    tok->Encode(word + word, cache, &ids);  // the same piece twice: one merge, one hit
    EXPECT_EQ(cache.stats().pieces - before.pieces, 2u) << word.size();
    EXPECT_EQ(cache.stats().merged - before.merged, 1u) << word.size();
  }
  const auto before = cache.stats();
  tok->Encode(giant_word + giant_word, cache, &ids);
  EXPECT_EQ(cache.stats().pieces - before.pieces, 2u);
  EXPECT_EQ(cache.stats().merged - before.merged, 2u);
  Gpt2Tokenizer::Cache fresh(*tok);
  tok->Encode("a<|endoftext|>a", fresh, &ids);  // the end-of-text id is not a piece
  EXPECT_EQ(fresh.stats().pieces, 2u);
  EXPECT_EQ(fresh.stats().merged, 1u);
}

// A run of CJK ideographs or kana of 16 bytes or more (a clause, in text written without spaces:
// nearly always new) is split and merged every time instead of taking a place in the long or huge
// tier; a long word of another script, Hangul (lead bytes just above the range) and symbols (just
// below) are still cached; Options::cache_long_cjk_runs puts the runs back in the tiers. The ids
// are the same either way, and equal the ones of a cache of two entries, whose pieces are merged
// nearly every time.
TEST(Gpt2Tokenizer, LongCjkRunsSkipTheLongTiersUnlessAsked) {
  const std::string run = "日本語のテキストです";            // 30 bytes: the long tier
  const std::string spaced = " 中文文本的一个句子";           // a space and 27 bytes
  const std::string huge_run = run + run + run;                // 90 bytes: the huge tier
  const std::string cyrillic = " интернационализация";         // 39 bytes
  const std::string hangul = "대한민국의수도는서울";           // 30 bytes, lead bytes EA..ED
  const std::string arrows = "→→→→→→";                         // 18 bytes, lead byte E2
  auto merges_of_twice = [](Gpt2Tokenizer& tok, const std::string& piece) {
    Gpt2Tokenizer::Cache cache(tok);
    std::vector<uint32_t> first, second;
    tok.Encode(piece, cache, &first);
    tok.Encode(piece, cache, &second);
    EXPECT_EQ(second, first);
    EXPECT_EQ(cache.stats().pieces, 2u) << piece;
    return cache.stats().merged;
  };
  auto skipping = Load({.cache_entries = 1024, .prefill_cache_with_vocabulary = false});
  auto caching = Load(
      {.cache_entries = 1024, .prefill_cache_with_vocabulary = false, .cache_long_cjk_runs = true});
  for (const std::string& piece : {run, spaced, huge_run}) {
    EXPECT_EQ(merges_of_twice(*skipping, piece), 2u) << piece;
    EXPECT_EQ(merges_of_twice(*caching, piece), 1u) << piece;
  }
  for (const std::string& piece : {cyrillic, hangul, arrows}) {
    EXPECT_EQ(merges_of_twice(*skipping, piece), 1u) << piece;
    EXPECT_EQ(merges_of_twice(*caching, piece), 1u) << piece;
  }
  // A short run (up to 15 bytes) is a short piece like any other: cached.
  EXPECT_EQ(merges_of_twice(*skipping, "日本語の"), 1u);

  auto tiny = Load({.cache_entries = 2});
  const std::string text = "日本語のテキストです。" + spaced + " and" + cyrillic + " " + huge_run +
                           "」「中文文本的一个句子" + run + " " + hangul + arrows;
  ExpectSameIdsThroughKeptCaches(text, {tiny.get(), skipping.get(), caching.get()}, 2);
}

TEST(Gpt2Tokenizer, CacheKeepsPiecesThatShareTheirFirstBytes) {
  // 64 words " confiXY" in a cache of 1,024 entries: with room for all of them, a second pass merges
  // none. (The set index used before saw bytes 0-5 and 8-13 of a piece: all 64 fell into one
  // four-way set and evicted one another.)
  auto tok = Load({.cache_entries = 1024, .prefill_cache_with_vocabulary = false});
  Gpt2Tokenizer::Cache cache(*tok);
  std::string text;
  for (char x = 'a'; x < 'a' + 8; ++x) {
    for (char y = 'a'; y < 'a' + 8; ++y) text += std::string(" confi") + x + y;
  }
  std::vector<uint32_t> first, second;
  tok->Encode(text, cache, &first);
  ASSERT_EQ(cache.stats().pieces, 64u);
  ASSERT_EQ(cache.stats().merged, 64u);
  tok->Encode(text, cache, &second);
  EXPECT_EQ(second, first);
  EXPECT_EQ(cache.stats().pieces, 128u);
  EXPECT_EQ(cache.stats().merged, 64u) << "pieces evicted while the cache had room";
}

TEST(Gpt2Tokenizer, RoundTripsBytes) {
  auto tok = Load();
  std::string all;
  for (int b = 1; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(tok->Decode(Encode(*tok, all)), all);
}

// A naive merge is quadratic on one long piece; each of these must stay linear-ish.
// Merging a piece of megabytes takes scratch of ~30 bytes per byte of it; a cache gives it back
// afterwards rather than holding it for the rest of the run (with a worker per core, GBs held by
// one odd document). Heap bytes in use (glibc's mallinfo2) before and after.
TEST(Gpt2Tokenizer, CacheGivesBackTheScratchOfAHugePiece) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizers' allocators do not report through mallinfo2";
#endif
  auto tok = Load();
  Gpt2Tokenizer::Cache cache(*tok);
  auto in_use = [] {
    const struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;  // small blocks in use + mmapped blocks
  };
  const std::string letters(size_t{1} << 21, 'a');
  std::string blob;  // U+FFFD, as a binary blob's bytes become
  while (blob.size() < (size_t{1} << 21)) blob += "\xef\xbf\xbd";
  std::vector<uint32_t> ids;
  ids.reserve((size_t{1} << 22) + Gpt2Tokenizer::kIdOverhang);
  std::vector<uint16_t> ids16;
  ids16.reserve((size_t{1} << 22) + Gpt2Tokenizer::kIdOverhang);
  tok->Encode("warm the scratch with a few ordinary words", cache, &ids);
  const size_t before = in_use();
  for (const std::string* piece : {&letters, static_cast<const std::string*>(&blob)}) {
    ids.clear();
    tok->Encode(*piece, cache, &ids);
    ASSERT_TRUE(tok->Decode(ids) == *piece) << ids.size() << " ids";
    // The merge held > 60 MB for a 2 MB piece, its ids (`wide`) 1 to 3 MB: none of it is kept.
    EXPECT_LT(in_use(), before + (size_t{1} << 19))
        << "held after a 2 MB piece: " << (in_use() - before) / 1024 << " KiB";
  }
  ASSERT_TRUE(tok->Encode(letters, cache, &ids16));
  EXPECT_LT(in_use(), before + (size_t{1} << 19));
}

TEST(Gpt2Tokenizer, LongSinglePiecesAreNotQuadratic) {
  auto tok = Load();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"letters", std::string(1 << 20, 'a')},
      {"digits", std::string(1 << 20, '7')},
      {"spaces", std::string(1 << 20, ' ')},
      {"punctuation", std::string(1 << 20, '=')},
      {"base64", [] {
         std::string b;
         for (size_t i = 0; b.size() < (1u << 20); ++i) {
           b.push_back("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[(i * 7919) % 64]);
         }
         return b;
       }()},
      {"cjk", [] {
         std::string b;
         while (b.size() < (1u << 20)) b += "\xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97";  // 中文字
         return b;
       }()},
      {"emoji", [] {
         std::string b;
         while (b.size() < (1u << 20)) b += "\xf0\x9f\xa6\x8a";  // one emoji, repeated
         return b;
       }()},
  };
  // This thread's CPU time, not the wall clock: on a 2-core machine running other tests (ctest -j)
  // the wall time of a sanitizer build's run doubled (5.02 s for "punctuation" under ASan).
  auto cpu_seconds = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  for (const auto& [name, text] : cases) {
    const double start = cpu_seconds();
    const std::vector<uint32_t> ids = Encode(*tok, text);
    const double s = cpu_seconds() - start;
    // Well under a second in a release build (README has the measured figures); the bound is
    // generous for sanitizer builds. A quadratic merge would take hours.
    EXPECT_LT(s, 5.0) << name;
    EXPECT_EQ(tok->Decode(ids), text) << name;
  }
}

TEST(Gpt2Tokenizer, RejectsMalformedMerges) {
  auto bad = Gpt2Tokenizer::FromBuffers(R"({"a": 0})", "#version: 0.2\na b c\n", {});
  EXPECT_FALSE(bad.ok());
}

// A cache size no machine can map is refused when the tokenizer is made, with a status, rather
// than std::bad_alloc from the first Cache (2^40 entries: tens of terabytes).
TEST(Gpt2Tokenizer, RefusesCacheSizesAboveTheLimit) {
  for (size_t entries : {Gpt2Tokenizer::kMaxCacheEntries + 1, size_t{1} << 40, SIZE_MAX}) {
    auto tok = Gpt2Tokenizer::FromFiles(kDir + "encoder.json", kDir + "vocab.bpe",
                                        {.cache_entries = entries});
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument) << entries;
    EXPECT_THAT(std::string(tok.status().message()), ::testing::HasSubstr("cache_entries"))
        << entries;
  }
}

TEST(Gpt2Tokenizer, FindsShippedFilesWithoutFlags) {
  auto tok = Gpt2Tokenizer::FromDefaultFiles({});
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 50257u);
}

}  // namespace
}  // namespace pileprep
