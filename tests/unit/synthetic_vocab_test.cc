// The tokenizer against the reference BPE (encoder.py's algorithm) on made-up vocabularies: the
// paths of the merge table that GPT-2's own files never take. A one-bucket table, a merges file
// that repeats a pair (encoder.py's dict(zip(merges, ranks)) keeps the repeat's later rank), and a
// vocabulary of 2^16 tokens or more (the hash-map table, no pre-token cache).
#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pileprep/gpt2_tokenizer.h"
#include "testing/files.h"
#include "testing/reference_bpe.h"

namespace pileprep {
namespace {

using ::pileprep::testing::ReadFile;
using ::pileprep::testing::ReferenceBpe;
using ::pileprep::testing::ScopedTempDir;
using ::pileprep::testing::WriteFile;

// GPT-2's bytes_to_unicode(): the byte alphabet of encoder.json and vocab.bpe, as UTF-8.
std::string Alphabet(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    uint32_t cp = b;
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (!printable) {
      int n = 0;
      for (int c = 0; c < b; ++c) {
        const bool p = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
        if (!p) ++n;
      }
      cp = 256 + n;
    }
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

struct Vocab {
  std::vector<std::string> tokens;                          // raw bytes; id = index
  std::vector<std::pair<std::string, std::string>> merges;  // raw bytes, in rank order
};

Vocab Bytes() {
  Vocab v;
  for (int b = 0; b < 256; ++b) v.tokens.emplace_back(1, static_cast<char>(b));
  return v;
}

// Writes encoder.json and vocab.bpe (with <|endoftext|> last) into a fresh directory, removed when
// the returned object goes.
ScopedTempDir WriteVocab(const Vocab& v, const std::string& name) {
  ScopedTempDir tmp("synthetic_vocab_" + name);
  const std::string& dir = tmp.path();
  std::string json = "{";
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    json += JsonString(Alphabet(v.tokens[id])) + ": " + std::to_string(id) + ", ";
  }
  json += "\"<|endoftext|>\": " + std::to_string(v.tokens.size()) + "}";
  WriteFile(dir + "/encoder.json", json);
  std::string merges = "#version: 0.2\n";
  for (const auto& [a, b] : v.merges) merges += Alphabet(a) + " " + Alphabet(b) + "\n";
  WriteFile(dir + "/vocab.bpe", merges);
  return tmp;
}

struct Pair {
  std::unique_ptr<Gpt2Tokenizer> tok;
  ReferenceBpe ref;
};

Pair Load(const std::string& dir) {
  Gpt2Tokenizer::Options options;
  options.endoftext_is_special = false;  // the reference has no special tokens
  // Encode() below makes a cache per text: tiers small to fault in (its 528 KiB table of lone
  // characters is the same at any size).
  options.cache_entries = 4096;
  auto tok = Gpt2Tokenizer::FromFiles(dir + "/encoder.json", dir + "/vocab.bpe", options);
  EXPECT_TRUE(tok.ok()) << tok.status();
  auto ref = ReferenceBpe::Load(dir);
  EXPECT_TRUE(ref.ok()) << ref.status();
  return Pair{std::move(*tok), std::move(*ref)};
}

std::vector<uint32_t> Encode(const Gpt2Tokenizer& tok, const std::string& text) {
  Gpt2Tokenizer::Cache cache(tok);
  std::vector<uint32_t> ids;
  tok.Encode(text, cache, &ids);
  return ids;
}

std::string RandomText(std::mt19937_64& rng, const std::string& alphabet, size_t max_len) {
  std::string s;
  const size_t n = 1 + rng() % max_len;
  for (size_t i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
  return s;
}

// A cache holds one vocabulary's ids: used with a tokenizer of another vocabulary, it forgets
// them first, and a cache made before any tokenizer (from Options) serves the first one it meets.
// The text has short pieces, and "é" and "語" repeated into long pieces and a short one: their lone
// characters' ids come from the cache's table of characters (one id in b, two and three in a).
TEST(SyntheticVocab, CacheUsedWithAnotherTokenizerGivesThatTokenizersIds) {
  Vocab a = Bytes();
  a.merges = {{"a", "b"}};
  a.tokens.push_back("ab");  // 256
  Vocab b = Bytes();
  b.merges = {{"x", "y"}, {"a", "b"}, {"\xC3", "\xA9"}, {"\xE8", "\xAA"}, {"\xE8\xAA", "\x9E"}};
  b.tokens.push_back("xy");  // 256
  b.tokens.push_back("ab");  // 257
  b.tokens.push_back("é");   // 258
  b.tokens.push_back("\xE8\xAA");  // 259
  b.tokens.push_back("語");  // 260
  Pair ta = Load(WriteVocab(a, "cache_a").path());
  Pair tb = Load(WriteVocab(b, "cache_b").path());
  std::string text = "ab xy ab abab ";
  for (int i = 0; i < 12; ++i) text += "é";
  text += " ";
  for (int i = 0; i < 8; ++i) text += "語";
  text += " é語é";
  const std::vector<uint32_t> want_a = Encode(*ta.tok, text), want_b = Encode(*tb.tok, text);
  ASSERT_NE(want_a, want_b);
  Gpt2Tokenizer::Options options;
  options.cache_entries = 4096;
  Gpt2Tokenizer::Cache cache(options);
  for (const Pair* t : {&ta, &tb, &tb, &ta, &tb}) {
    std::vector<uint32_t> ids;
    t->tok->Encode(text, cache, &ids);
    EXPECT_EQ(ids, t == &ta ? want_a : want_b);
  }
}

TEST(SyntheticVocab, RepeatedMergeLineTakesItsLaterRankLikeEncoderPy) {
  Vocab v = Bytes();
  v.tokens.push_back("ab");
  v.tokens.push_back("bc");
  v.tokens.push_back("abc");
  v.merges = {{"a", "b"}, {"b", "c"}, {"ab", "c"}, {"a", "b"}};  // "a b" again: rank 3, not 0
  auto [tok, ref] = Load(WriteVocab(v, "repeat").path());
  // With "a b" at rank 0, "abc" would merge to "ab" + "c" and then "abc"; at rank 3 "b c" (rank 1)
  // goes first and "a" + "bc" is final.
  EXPECT_EQ(ref.Encode("abc"), (std::vector<uint32_t>{'a', 257}));
  EXPECT_EQ(Encode(*tok, "abc"), ref.Encode("abc"));
  std::mt19937_64 rng(11);
  for (int i = 0; i < 2000; ++i) {
    const std::string text = RandomText(rng, "abc ab", 40);
    ASSERT_EQ(Encode(*tok, text), ref.Encode(text)) << text;
  }
}

// encoder.py merges every occurrence of the lowest pair at once. With "a a" listed again after
// "aa a", merging one occurrence at a time would give "aaaa" -> "aa" "a" "a" -> "aaa" "a", where
// encoder.py gives "aa" "aa"; such a merges file is merged the encoder.py way. Pieces of every
// length take it: short ones, ones over 64 bytes, through a cache and the smallest one.
TEST(SyntheticVocab, MergeListedAgainAfterOneThatUsesItsResultMatchesEncoderPy) {
  Vocab v = Bytes();
  v.tokens.push_back("aa");   // 256
  v.tokens.push_back("aaa");  // 257
  v.tokens.push_back("ab");   // 258
  v.merges = {{"a", "a"}, {"aa", "a"}, {"a", "b"}, {"a", "a"}};  // "a a" again: rank 3
  const ScopedTempDir vocab = WriteVocab(v, "relisted");
  auto [tok, ref] = Load(vocab.path());
  EXPECT_EQ(ref.Encode("aaaa"), (std::vector<uint32_t>{256, 256}));
  EXPECT_EQ(Encode(*tok, "aaaa"), ref.Encode("aaaa"));
  std::mt19937_64 rng(13);
  for (int i = 0; i < 2000; ++i) {
    const std::string text = RandomText(rng, "aaaab ", i % 10 == 0 ? 300 : 40);
    ASSERT_EQ(Encode(*tok, text), ref.Encode(text)) << text;
  }
  Gpt2Tokenizer::Options options;
  options.endoftext_is_special = false;
  options.cache_entries = 2;
  const std::string& dir = vocab.path();
  auto tiny = Gpt2Tokenizer::FromFiles(dir + "/encoder.json", dir + "/vocab.bpe", options);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  Gpt2Tokenizer::Cache cache(**tiny);
  for (int i = 0; i < 500; ++i) {
    const std::string text = RandomText(rng, "aaab ", 200);
    std::vector<uint32_t> ids;
    (*tiny)->Encode(text, cache, &ids);
    ASSERT_EQ(ids, ref.Encode(text)) << text;
  }
}

TEST(SyntheticVocab, VocabularyThatReusesAnIdIsRefused) {
  const ScopedTempDir vocab = WriteVocab(Bytes(), "reused_id");
  const std::string& dir = vocab.path();
  std::string json = ReadFile(dir + "/encoder.json");
  json.insert(1, "\"zz\": 7, ");  // id 7 is a byte's
  WriteFile(dir + "/encoder.json", json);
  auto tok = Gpt2Tokenizer::FromFiles(dir + "/encoder.json", dir + "/vocab.bpe", {});
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(tok.status().message().find("has id 7, which another entry has already"),
            std::string::npos)
      << tok.status();
}

// encoder.json and vocab.bpe as buffers; `respelled`: the same vocabulary and merges written
// another way (keys in reverse order, other whitespace, CRLF lines, no "#version" line).
std::pair<std::string, std::string> VocabBuffers(const Vocab& v, bool respelled = false) {
  std::vector<std::string> entries;
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    entries.push_back(JsonString(Alphabet(v.tokens[id])) + (respelled ? " :" : ": ") +
                      std::to_string(id));
  }
  entries.push_back("\"<|endoftext|>\": " + std::to_string(v.tokens.size()));
  if (respelled) std::reverse(entries.begin(), entries.end());
  std::string json = respelled ? "{\n  " : "{";
  for (size_t i = 0; i < entries.size(); ++i) {
    json += (i ? (respelled ? ",\n  " : ", ") : "") + entries[i];
  }
  json += respelled ? "\n}\n" : "}";
  std::string merges = respelled ? "" : "#version: 0.2\n";
  for (const auto& [a, b] : v.merges) {
    merges += Alphabet(a) + " " + Alphabet(b) + (respelled ? "\r\n" : "\n");
  }
  return {json, merges};
}

uint64_t FingerprintOf(const Vocab& v, bool respelled = false,
                       Gpt2Tokenizer::Options options = {}) {
  options.cache_entries = 4096;
  const auto [json, merges] = VocabBuffers(v, respelled);
  auto tok = Gpt2Tokenizer::FromBuffers(json, merges, options);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? (*tok)->fingerprint() : 0;
}

// Two merges that compete in "the": their order decides how it splits.
Vocab ThHe() {
  Vocab v = Bytes();
  v.tokens.push_back("th");
  v.tokens.push_back("he");
  v.merges = {{"t", "h"}, {"h", "e"}};
  return v;
}

// An encoder.json that leaves ids out: vocab_size() counts its entries (what Megatron sizes the
// embedding and picks the dtype by), id_limit() bounds the ids Encode gives.
TEST(SyntheticVocab, VocabularyWithHolesInItsIdsIsBoundedByItsLargestId) {
  const ScopedTempDir vocab = WriteVocab(ThHe(), "holes");
  const std::string& dir = vocab.path();
  std::string json = ReadFile(dir + "/encoder.json");
  const std::string eot = "\"<|endoftext|>\": 258";
  ASSERT_NE(json.find(eot), std::string::npos);
  json.replace(json.find(eot), eot.size(), "\"<|endoftext|>\": 300");
  WriteFile(dir + "/encoder.json", json);
  auto tok = Gpt2Tokenizer::FromFiles(dir + "/encoder.json", dir + "/vocab.bpe", {});
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 259u);
  EXPECT_EQ((*tok)->id_limit(), 301u);
  EXPECT_EQ((*tok)->eod_id(), 300u);
  Gpt2Tokenizer::Cache cache(**tok);
  std::vector<uint32_t> ids;
  (*tok)->Encode("the<|endoftext|>", cache, &ids);
  EXPECT_THAT(ids, ::testing::ElementsAre(256, 'e', 300));
}

// Files Megatron's reader takes as they are: a key repeated with its id (json.load keeps one), a
// byte-order mark before the merges' "#version" line (Megatron drops the first line whatever it
// holds). Loaded, with the ids of the plain files and Megatron's entry count (len(encoder), which
// picks the .bin's dtype: a repeated key counted twice could make it int32 where Megatron writes
// uint16).
TEST(SyntheticVocab, ARepeatedKeyAndAMergesByteOrderMarkAreReadAsMegatronReadsThem) {
  const auto [json, merges] = VocabBuffers(ThHe());
  Gpt2Tokenizer::Options options;
  options.cache_entries = 4096;
  auto plain = Gpt2Tokenizer::FromBuffers(json, merges, options);
  ASSERT_TRUE(plain.ok()) << plain.status();
  std::string repeated = json;
  repeated.insert(1, JsonString(Alphabet("th")) + ": 256, ");
  auto with_repeat = Gpt2Tokenizer::FromBuffers(repeated, "\xEF\xBB\xBF" + merges, options);
  ASSERT_TRUE(with_repeat.ok()) << with_repeat.status();
  EXPECT_EQ((*with_repeat)->vocab_size(), (*plain)->vocab_size());
  EXPECT_EQ((*with_repeat)->fingerprint(), (*plain)->fingerprint());
  // A byte-order mark before encoder.json is no JSON (json.load fails too): refused, named.
  auto bom = Gpt2Tokenizer::FromBuffers("\xEF\xBB\xBF" + json, merges, options);
  EXPECT_EQ(bom.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bom.status().message().find("byte-order mark"), std::string::npos) << bom.status();
  // A merge whose result the vocabulary lacks names that token, not the line's two.
  auto lacking = Gpt2Tokenizer::FromBuffers(
      json, merges + Alphabet("e") + " " + Alphabet("h") + "\n", options);
  EXPECT_EQ(lacking.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(lacking.status().message().find(": \"eh\" not in the vocabulary"), std::string::npos)
      << lacking.status();
}

// PILEPREP_TOKENIZER_DIR set to a directory without the two files: NotFound naming it, not the
// shipped files in its place (another vocabulary than the one asked for, without a word).
TEST(SyntheticVocab, ATokenizerDirThatLacksTheFilesIsNotFoundNotReplaced) {
  const ScopedTempDir empty("tokenizer_dir_empty");
  ::setenv("PILEPREP_TOKENIZER_DIR", empty.path().c_str(), 1);
  auto files = Gpt2Tokenizer::DefaultFiles();
  auto tok = Gpt2Tokenizer::FromDefaultFiles({});
  ::unsetenv("PILEPREP_TOKENIZER_DIR");
  EXPECT_EQ(files.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(tok.status().message().find("PILEPREP_TOKENIZER_DIR=" + empty.path()),
            std::string::npos)
      << tok.status();
  auto shipped = Gpt2Tokenizer::DefaultFiles();
  ASSERT_TRUE(shipped.ok()) << shipped.status();
  EXPECT_NE(shipped->second.find("vocab.bpe"), std::string::npos);
}

// The fingerprint names the mapping from text to ids: not the files' spelling, not the cache.
TEST(SyntheticVocab, FingerprintIgnoresSpellingAndCacheOptions) {
  const Vocab v = ThHe();
  const uint64_t base = FingerprintOf(v);
  EXPECT_EQ(FingerprintOf(v, /*respelled=*/true), base);
  Gpt2Tokenizer::Options other_cache;
  other_cache.cache_long_cjk_runs = true;
  other_cache.prefill_cache_with_vocabulary = false;
  EXPECT_EQ(FingerprintOf(v, false, other_cache), base);
}

// ...and changes with anything in the files that can change an id.
TEST(SyntheticVocab, FingerprintChangesWithMergesAndTokens) {
  const Vocab v = ThHe();
  const uint64_t base = FingerprintOf(v);

  Vocab reordered = v;  // the same merges at other ranks: "the" splits the other way
  std::swap(reordered.merges[0], reordered.merges[1]);
  EXPECT_NE(FingerprintOf(reordered), base);

  Vocab renumbered = v;  // the same tokens under other ids
  std::swap(renumbered.tokens[256], renumbered.tokens[257]);
  EXPECT_NE(FingerprintOf(renumbered), base);

  Vocab fewer = v;  // one merge less
  fewer.merges.pop_back();
  EXPECT_NE(FingerprintOf(fewer), base);

  // The end-of-text rule is an option: apart from the fingerprint.
  Gpt2Tokenizer::Options as_text;
  as_text.endoftext_is_special = false;
  EXPECT_EQ(FingerprintOf(v, false, as_text), base);
}

// encoder.json may give one spelling two ids (the last one counts, as in json.load): which one
// comes last decides the ids, and so the fingerprint.
TEST(SyntheticVocab, FingerprintFollowsTheIdARepeatedSpellingEndsWith) {
  Vocab v = Bytes();
  v.tokens.push_back("ab");  // 256
  v.merges = {{"a", "b"}};
  auto [json, merges] = VocabBuffers(v);
  // "ab" at 256, then again at 300 (the merge's result is 300), or at 300 first and then at 256
  // (it is 256). Both ids hold the bytes "ab" either way: only the merge's result differs. (257
  // is <|endoftext|>; 258..299 are holes.)
  const std::string ab = JsonString(Alphabet("ab"));
  std::string last_300 = json, last_256 = json;
  last_300.insert(json.size() - 1, ", " + ab + ": 300");
  last_256.insert(1, ab + ": 300, ");
  Gpt2Tokenizer::Options options;
  options.cache_entries = 4096;
  auto a = Gpt2Tokenizer::FromBuffers(last_300, merges, options);
  auto b = Gpt2Tokenizer::FromBuffers(last_256, merges, options);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_NE(Encode(**a, "ab"), Encode(**b, "ab"));
  EXPECT_NE((*a)->fingerprint(), (*b)->fingerprint());
}

TEST(SyntheticVocab, TinyMergeTableInOneBucketMatchesReference) {
  Vocab v = Bytes();
  v.tokens.push_back("th");
  v.tokens.push_back("the");
  v.tokens.push_back(" the");
  v.merges = {{"t", "h"}, {"th", "e"}, {" ", "the"}};
  auto [tok, ref] = Load(WriteVocab(v, "tiny").path());
  std::mt19937_64 rng(12);
  for (int i = 0; i < 2000; ++i) {
    const std::string text = RandomText(rng, "the th e t h  x", 60);
    ASSERT_EQ(Encode(*tok, text), ref.Encode(text)) << text;
  }
}

// The packed pair table is sized from the number of merges (buckets of 8, at most 7/8 full). Counts
// around its size steps, and one far larger, must build, find every merge and end every probe for
// pairs that do not merge: a table that could fill up would loop forever here.
TEST(SyntheticVocab, PairTablesOfEverySizeMatchReference) {
  // Merges of printable ASCII (Encode takes valid UTF-8): every pair of two characters, shuffled, then
  // pair + character triples as needed.
  std::mt19937_64 rng(14);
  std::vector<std::pair<std::string, std::string>> merges;
  for (char a = ' '; a <= '~'; ++a) {
    for (char b = ' '; b <= '~'; ++b) merges.emplace_back(std::string(1, a), std::string(1, b));
  }
  std::shuffle(merges.begin(), merges.end(), rng);
  const size_t num_pairs = merges.size();  // 9,025
  std::set<std::string> triples;
  while (merges.size() < 20000) {
    const auto& [a, b] = merges[rng() % num_pairs];
    const std::string c(1, static_cast<char>(' ' + rng() % 95));
    if (triples.insert(a + b + c).second) merges.emplace_back(a + b, c);
  }
  for (size_t count : {size_t{7}, size_t{8}, size_t{9}, size_t{12}, size_t{16}, size_t{24}, size_t{57},
                       size_t{20000}}) {
    Vocab v = Bytes();
    for (size_t i = 0; i < count; ++i) {
      v.tokens.push_back(merges[i].first + merges[i].second);
      v.merges.push_back(merges[i]);
    }
    auto [tok, ref] = Load(WriteVocab(v, "size" + std::to_string(count)).path());
    // Text from the first merges' own characters, so that most adjacent pairs are looked up.
    std::string alphabet;
    for (size_t i = 0; i < std::min<size_t>(count, 40); ++i) alphabet += merges[i].first + merges[i].second;
    for (int i = 0; i < 300; ++i) {
      const std::string text = RandomText(rng, alphabet, 60);
      ASSERT_EQ(Encode(*tok, text), ref.Encode(text)) << count << " merges: " << text;
    }
  }
}

TEST(SyntheticVocab, VocabularyOfTwoToTheSixteenOrMoreMatchesReference) {
  // Every byte pair is a token (65,536 merges in a shuffled order), then some triples: 66,305
  // tokens with <|endoftext|>, past the packed table's 16-bit ids.
  Vocab v = Bytes();
  std::vector<std::pair<std::string, std::string>> pairs;
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) {
      pairs.emplace_back(std::string(1, static_cast<char>(a)), std::string(1, static_cast<char>(b)));
    }
  }
  std::mt19937_64 rng(13);
  std::shuffle(pairs.begin(), pairs.end(), rng);
  for (const auto& [a, b] : pairs) {
    v.tokens.push_back(a + b);
    v.merges.emplace_back(a, b);
  }
  const std::string letters = "abcdefghij ";
  for (int i = 0; i < 512; ++i) {
    const std::string ab = {letters[rng() % 10], letters[rng() % 10]};
    const std::string c(1, letters[rng() % letters.size()]);
    if (std::find(v.tokens.begin(), v.tokens.end(), ab + c) != v.tokens.end()) continue;
    v.tokens.push_back(ab + c);
    v.merges.emplace_back(ab, c);
  }
  ASSERT_GE(v.tokens.size() + 1, size_t{65536});
  auto [tok, ref] = Load(WriteVocab(v, "wide").path());
  EXPECT_EQ(tok->vocab_size(), v.tokens.size() + 1);
  // Ids past 65,535: the 16-bit form refuses and appends nothing.
  EXPECT_FALSE(tok->ids_fit_16_bits());
  Gpt2Tokenizer::Cache cache(*tok);
  std::vector<uint16_t> narrow;
  EXPECT_FALSE(tok->Encode("abc", cache, &narrow));
  EXPECT_TRUE(narrow.empty());
  for (int i = 0; i < 300; ++i) {
    const std::string text = RandomText(rng, "abcdefghij  .,'s\n", 80);
    ASSERT_EQ(Encode(*tok, text), ref.Encode(text)) << text;
  }
}

}  // namespace
}  // namespace pileprep
