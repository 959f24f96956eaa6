// pileprep::Gpt2Tokenizer against the plain encoder.py-style reference (tests/testing/reference_bpe.h):
// single pieces (including long ones that take the fast merge path) and whole texts.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "pileprep/gpt2_tokenizer.h"
#include "testing/random_text.h"
#include "testing/re2_pretokenizer.h"
#include "testing/reference_bpe.h"
#include "tokenizer/pretokenizer.h"

namespace pileprep {
namespace {

using ::pileprep::testing::RandomText;
using ::pileprep::testing::ReferenceBpe;

constexpr char kVocab[] = PILEPREP_SOURCE_DIR "/tokenizers/gpt2/encoder.json";
constexpr char kMerges[] = PILEPREP_SOURCE_DIR "/tokenizers/gpt2/vocab.bpe";

class BpeDifferential : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto ref = ReferenceBpe::Load(PILEPREP_SOURCE_DIR "/tokenizers/gpt2");
    ASSERT_TRUE(ref.ok()) << ref.status();
    reference_ = new ReferenceBpe(*std::move(ref));
    Gpt2Tokenizer::Options options;
    options.endoftext_is_special = false;
    auto tok = Gpt2Tokenizer::FromFiles(kVocab, kMerges, options);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = tok->release();
  }
  static void TearDownTestSuite() {
    delete reference_;
    delete tokenizer_;
    reference_ = nullptr;
    tokenizer_ = nullptr;
  }

  static std::vector<uint32_t> FastPiece(std::string_view piece) {
    std::vector<uint32_t> ids = {7};  // EncodePiece appends: keep a sentinel in front
    tokenizer_->EncodePiece(piece, &ids);
    ids.erase(ids.begin());
    return ids;
  }
  static std::vector<uint32_t> FastText(std::string_view text, Gpt2Tokenizer::Cache& cache) {
    std::vector<uint32_t> ids;
    tokenizer_->Encode(text, cache, &ids);
    return ids;
  }

  static ReferenceBpe* reference_;
  static Gpt2Tokenizer* tokenizer_;
};

ReferenceBpe* BpeDifferential::reference_ = nullptr;
Gpt2Tokenizer* BpeDifferential::tokenizer_ = nullptr;

std::string Head(std::string_view s) {
  std::string out(s.substr(0, 120));
  if (s.size() > 120) out += "...";
  return out;
}

TEST_F(BpeDifferential, ReferenceLoadsTheWholeVocabulary) {
  EXPECT_EQ(reference_->vocab_size(), 50257u);
  EXPECT_EQ(reference_->num_merges(), 50000u);
  EXPECT_EQ(reference_->Encode("Hello world"), (std::vector<uint32_t>{15496, 995}));
  EXPECT_EQ(reference_->EncodePiece(" \xE3\x80\x80"), (std::vector<uint32_t>{220, 5099, 222}));
}

TEST_F(BpeDifferential, EverySingleByte) {
  for (int b = 0; b < 256; ++b) {
    const std::string piece(1, static_cast<char>(b));
    EXPECT_EQ(FastPiece(piece), reference_->EncodePiece(piece)) << b;
  }
}

TEST_F(BpeDifferential, PiecesOfRandomTextMatchReference) {
  RandomText gen(/*seed=*/314159);
  int checked = 0;
  for (int i = 0; i < 3000; ++i) {
    for (const std::string& piece : testing::Re2Pretokenize(gen.Next(/*max_atoms=*/16))) {
      ASSERT_EQ(FastPiece(piece), reference_->EncodePiece(piece)) << "piece: " << Head(piece);
      ++checked;
    }
  }
  EXPECT_GT(checked, 10000);
}

TEST_F(BpeDifferential, RandomByteStringsAsPieces) {
  // Any bytes, including invalid UTF-8: both sides work on bytes only.
  RandomText gen(/*seed=*/2718);
  for (int i = 0; i < 3000; ++i) {
    std::string piece;
    const int n = 1 + static_cast<int>(gen.Uniform(i % 10 == 0 ? 200 : 40));
    const bool printable = gen.Uniform(2) == 0;
    for (int k = 0; k < n; ++k) {
      piece += static_cast<char>(printable ? 0x20 + gen.Uniform(95) : gen.Uniform(256));
    }
    ASSERT_EQ(FastPiece(piece), reference_->EncodePiece(piece)) << "case " << i;
  }
}

TEST_F(BpeDifferential, LongPiecesTakeTheFastMergeAndStillMatch) {
  RandomText gen(/*seed=*/161803);
  std::vector<std::string> pieces = {
      std::string(10000, 'a'),
      std::string(10001, 'a'),
      std::string(1, ' ').append(9999, 'a'),  // (" " + std::string: a GCC 12 false -Wrestrict)
      std::string(10000, '0'),
      std::string(10000, '9'),
      std::string(4096, ' '),
      std::string(5000, '-'),
      std::string(3000, '='),
      std::string(2000, '\n'),
  };
  {
    std::string digits;
    for (int i = 0; i < 10000; ++i) digits += static_cast<char>('0' + gen.Uniform(10));
    pieces.push_back(digits);
    std::string abab;
    for (int i = 0; i < 5000; ++i) abab += "ab";
    pieces.push_back(abab);
    std::string mixed;
    for (int i = 0; i < 3000; ++i) mixed += (i % 7 == 0) ? "aab" : "a";
    pieces.push_back(mixed);
    pieces.push_back(std::string(33, 'x'));  // just past the short-piece path
    pieces.push_back(std::string(32, 'x'));
  }
  // Base64 of random bytes, as one piece (as it would be inside a data: URI after pre-tokenization
  // splits off nothing but "+" and "/" runs; the merge has to cope with the whole string anyway).
  static constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int len : {64, 100, 1000, 4000, 10000}) {
    std::string b64;
    for (int i = 0; i < len; ++i) b64 += kBase64[gen.Uniform(64)];
    pieces.push_back(b64);
    std::string letters;
    for (int i = 0; i < len; ++i) letters += kBase64[gen.Uniform(52)];
    pieces.push_back(letters);
  }
  // Minified-code-like runs of punctuation and letters.
  {
    std::string code;
    static constexpr char kCode[] = "(){}[];,.=+-*/<>!&|?:abcdefxyz_$";
    for (int i = 0; i < 6000; ++i) code += kCode[gen.Uniform(sizeof(kCode) - 1)];
    pieces.push_back(code);
  }
  for (const std::string& piece : pieces) {
    EXPECT_EQ(FastPiece(piece), reference_->EncodePiece(piece))
        << piece.size() << " bytes: " << Head(piece);
  }
}

TEST_F(BpeDifferential, RandomTextMatchesReferenceWithAndWithoutCacheHits) {
  Gpt2Tokenizer::Cache cache(*tokenizer_);
  RandomText gen(/*seed=*/42);
  std::vector<std::string> texts;
  for (int i = 0; i < 4000; ++i) texts.push_back(gen.Next(/*max_atoms=*/24));
  int failures = 0;
  for (int round = 0; round < 2; ++round) {  // round 2 is served largely from the cache
    for (size_t i = 0; i < texts.size() && failures < 10; ++i) {
      const std::vector<uint32_t> want = reference_->Encode(texts[i]);
      const std::vector<uint32_t> got = FastText(texts[i], cache);
      if (got != want) ++failures;
      EXPECT_EQ(got, want) << "round " << round << " case " << i << ": " << Head(texts[i]);
    }
  }
}

// Pieces of more than 15 bytes that miss the cache are split where no merge can join two bytes
// and their parts looked up in the short tier (Gpt2Tokenizer::Tables::joinable). Long single
// pre-tokens of non-ASCII letters, digits and symbols, mixed with ASCII, 16 to 600 bytes (the long
// and huge tiers and beyond), and long ASCII runs (parts of more than 15 bytes) inside them, through
// a fresh cache, again from the cache, and through the smallest cache (cache_entries = 2 rounds up
// to two short sets and one long and one huge set), whose parts evict one another; 32- and 16-bit.
TEST_F(BpeDifferential, LongPiecesSplitWhereNoMergeJoinsStillMatch) {
  static const std::vector<std::string> kLetters = {
      "а", "б", "в", "е", "и", "к", "л", "н", "о", "р", "с", "т", "ы", "я", "ё", "Ж", "П",      // Cyrillic
      "α", "β", "γ", "ε", "κ", "λ", "ο", "π", "ρ", "σ", "τ", "ω", "ά", "Ω",                  // Greek
      "中", "文", "字", "日", "本", "語", "の", "は", "が", "を", "ン", "ア", "한", "국", "어",  // CJK
      "ا", "ل", "م", "ن", "ה", "ש", "ל", "é", "è", "ü", "ß", "ñ", "ç", "ő", "ł",             // others
      "a", "e", "t", "n", "s", "th", "er", "in"};
  static const std::vector<std::string> kDigits = {"٣", "٤", "۵", "१", "२", "൩", "1", "7", "0"};
  static const std::vector<std::string> kSymbols = {"🦊", "😀", "→", "•", "©", "—", "…", "«", "»",
                                                    "!", "#", "%", "(", "*", "-", "~"};
  RandomText gen(/*seed=*/27182);
  std::vector<std::string> texts;
  auto ascii_run = [&](size_t len) {  // letters only: a part of more than 15 bytes, or none split
    std::string run;
    while (run.size() < len) run += static_cast<char>('a' + gen.Uniform(26));
    return run;
  };
  for (int i = 0; i < 1500; ++i) {
    const std::vector<std::string>& atoms =
        i % 5 == 3 ? kDigits : (i % 5 == 4 ? kSymbols : kLetters);
    const size_t target = 16 + gen.Uniform(i % 10 == 0 ? 600 : 120);
    std::string piece = i % 2 == 0 ? " " : "";
    while (piece.size() < target) {
      piece += atoms[gen.Uniform(atoms.size())];
      if (&atoms == &kLetters && gen.Uniform(8) == 0) piece += ascii_run(16 + gen.Uniform(300));
    }
    texts.push_back(piece);
  }
  for (size_t len : {16, 17, 40, 64, 65, 100, 256, 257, 300, 1000}) texts.push_back(ascii_run(len));
  Gpt2Tokenizer::Options options;
  options.endoftext_is_special = false;
  options.cache_entries = 2;
  auto tiny = Gpt2Tokenizer::FromFiles(kVocab, kMerges, options);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  Gpt2Tokenizer::Cache cache(*tokenizer_), cache16(*tokenizer_), tiny_cache(**tiny);
  int failures = 0;
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < texts.size() && failures < 10; ++i) {
      const std::vector<uint32_t> want = reference_->Encode(texts[i]);
      std::vector<uint32_t> small;
      std::vector<uint16_t> narrow;
      (*tiny)->Encode(texts[i], tiny_cache, &small);
      const std::vector<uint32_t> got = FastText(texts[i], cache);
      ASSERT_TRUE(tokenizer_->Encode(texts[i], cache16, &narrow));
      const bool narrow_ok = std::equal(want.begin(), want.end(), narrow.begin(), narrow.end());
      if (got != want || small != want || !narrow_ok) ++failures;
      EXPECT_EQ(got, want) << "round " << round << " case " << i << ": " << Head(texts[i]);
      EXPECT_EQ(small, want) << "smallest cache, round " << round << " case " << i << ": "
                             << Head(texts[i]);
      EXPECT_TRUE(narrow_ok) << "16-bit, round " << round << " case " << i << ": " << Head(texts[i]);
    }
  }
}

// A long piece that misses, and a short one with non-ASCII bytes, is split where no merge joins two
// bytes, and a character of 2 or 3 bytes with a split on either side takes its ids from a per-cache
// table by its bytes, filled on first use (Cache::Impl::char_ids). Texts of any bytes from C0..FF
// and 80..BF: whole characters of 2 and 3 bytes (surrogates and overlong forms included), lead bytes
// without their continuation bytes, stray continuation bytes, characters cut short, 4-byte
// characters, next to ASCII symbols. Each text's pieces are merged by the reference one by one;
// through a fresh cache, again from it, and through the smallest cache.
TEST_F(BpeDifferential, SplitPiecesGiveTheirLoneCharactersTheIdsOfTheirBytesWhateverTheBytes) {
  RandomText gen(/*seed=*/16180);
  auto cont = [&] { return static_cast<char>(0x80 + gen.Uniform(64)); };
  std::vector<std::string> texts;
  for (int i = 0; i < 3000; ++i) {
    std::string text;
    const size_t target = 16 + gen.Uniform(i % 10 == 0 ? 400 : 80);
    while (text.size() < target) {
      switch (gen.Uniform(8)) {
        case 0:
        case 1:  // two bytes: C0..DF (C0, C1: overlong), one continuation byte
          text += static_cast<char>(0xC0 + gen.Uniform(32));
          text += cont();
          break;
        case 2:
        case 3:  // three bytes: E0..EF (ED A0..BF: surrogates), two continuation bytes
          text += static_cast<char>(0xE0 + gen.Uniform(16));
          text += cont();
          text += cont();
          break;
        case 4:  // C0..FF and one continuation byte or none: a lead byte alone, a 2-byte
                 // character, a longer one cut short, or bytes no UTF-8 has
          text += static_cast<char>(0xC0 + gen.Uniform(64));
          if (gen.Uniform(2) == 0) text += cont();
          break;
        case 5:  // a stray continuation byte
          text += cont();
          break;
        case 6:  // four bytes
          text += static_cast<char>(0xF0 + gen.Uniform(5));
          for (int k = 0; k < 3; ++k) text += cont();
          break;
        default:  // an ASCII symbol, which can join some of the bytes around it
          text += "!#%&*-.~"[gen.Uniform(8)];
          break;
      }
    }
    texts.push_back(text);
  }
  // Characters that a merge joins to the byte after them, so that they do not stand alone: C0 BF
  // before BD ("¿½" is a token), and "о" (D0 BE) before D0 (GPT-2 merges "о" and a D0 across two
  // Cyrillic letters), once in a short piece and repeated into a long one.
  for (const std::string unit : {"\xC0\xBF\xBD", "\xD0\xBE\xD0\x82"}) {
    std::string repeated;
    for (int i = 0; i < 8; ++i) repeated += unit;
    texts.insert(texts.begin(), {unit, repeated});
  }
  Gpt2Tokenizer::Options options;
  options.endoftext_is_special = false;
  options.cache_entries = 2;
  auto tiny = Gpt2Tokenizer::FromFiles(kVocab, kMerges, options);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  Gpt2Tokenizer::Cache cache(*tokenizer_), tiny_cache(**tiny);
  size_t long_pieces = 0;
  int failures = 0;
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < texts.size() && failures < 10; ++i) {
      std::vector<uint32_t> want;
      for (std::string_view piece : internal::PretokenizeToVector(texts[i])) {
        const std::vector<uint32_t> ids = reference_->EncodePiece(piece);
        want.insert(want.end(), ids.begin(), ids.end());
        if (round == 0 && piece.size() > 15) ++long_pieces;
      }
      std::vector<uint32_t> small;
      (*tiny)->Encode(texts[i], tiny_cache, &small);
      const std::vector<uint32_t> got = FastText(texts[i], cache);
      if (got != want || small != want) ++failures;
      EXPECT_EQ(got, want) << "round " << round << " case " << i;
      EXPECT_EQ(small, want) << "smallest cache, round " << round << " case " << i;
    }
  }
  EXPECT_GE(long_pieces, 600u);  // the texts do reach the long tiers and merge_split (728)
}

// A short piece keeps up to 8 ids beside its key and the rest (up to 15) in a side array that must
// move with it when it is promoted or pushed back in its two-way set. Short pieces of 9..15 ids
// and of fewer, in random order, through caches of 4 and 16 entries (constant evictions and
// promotions) and a default one.
TEST_F(BpeDifferential, ShortPiecesOfMoreThanEightIdsSurviveEvictionsAndPromotions) {
  const std::vector<std::string> pieces = {
      "⊗⊕⊘⊙⊚", "🦊🦊🦊", "⌘⌥⇧⌃⏎", "𓀀𓀁𓀂", "ᚠᚢᚦᚨᚱ", "▓▒░▓▒", "☃☄★☆☇", "⊗⊕", "🦊", "→", "…", ".",
      "!?", "©®", "ж", "語"};
  size_t more_than_eight = 0;
  for (const std::string& p : pieces) {
    ASSERT_LE(p.size(), 15u) << p;
    if (reference_->EncodePiece(p).size() > 8) ++more_than_eight;
  }
  ASSERT_GE(more_than_eight, 5u);
  RandomText gen(/*seed=*/31415);
  std::string text;
  for (int i = 0; i < 3000; ++i) text += "1" + pieces[gen.Uniform(pieces.size())];  // one piece each
  const std::vector<uint32_t> want = reference_->Encode(text);
  for (size_t entries : {size_t{4}, size_t{16}, size_t{1} << 19}) {
    Gpt2Tokenizer::Options options;
    options.endoftext_is_special = false;
    options.cache_entries = entries;
    auto tok = Gpt2Tokenizer::FromFiles(kVocab, kMerges, options);
    ASSERT_TRUE(tok.ok()) << tok.status();
    Gpt2Tokenizer::Cache cache(**tok);
    for (int round = 0; round < 2; ++round) {
      std::vector<uint32_t> wide;
      std::vector<uint16_t> narrow;
      (*tok)->Encode(text, cache, &wide);
      ASSERT_TRUE((*tok)->Encode(text, cache, &narrow));
      EXPECT_EQ(wide, want) << entries << " entries, round " << round;
      EXPECT_TRUE(std::equal(want.begin(), want.end(), narrow.begin(), narrow.end()))
          << entries << " entries, round " << round;
    }
  }
}

TEST_F(BpeDifferential, TinyCacheGivesTheSameIds) {
  // A two-entry cache collides constantly; results must not depend on it.
  Gpt2Tokenizer::Options options;
  options.endoftext_is_special = false;
  options.cache_entries = 2;
  auto tiny = Gpt2Tokenizer::FromFiles(kVocab, kMerges, options);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  Gpt2Tokenizer::Cache cache(**tiny);
  RandomText gen(/*seed=*/43);
  for (int i = 0; i < 1500; ++i) {
    const std::string text = gen.Next(/*max_atoms=*/24);
    std::vector<uint32_t> got;
    (*tiny)->Encode(text, cache, &got);
    ASSERT_EQ(got, reference_->Encode(text)) << "case " << i << ": " << Head(text);
  }
}

TEST_F(BpeDifferential, EndOfTextIsOrdinaryTextWhenNotSpecial) {
  Gpt2Tokenizer::Cache cache(*tokenizer_);
  for (const char* text : {"<|endoftext|>", "a<|endoftext|>b", " <|endoftext|> ", "<|endoftext"}) {
    EXPECT_EQ(FastText(text, cache), reference_->Encode(text)) << text;
  }
  EXPECT_EQ(FastText("<|endoftext|>", cache), (std::vector<uint32_t>{27, 91, 437, 1659, 5239, 91, 29}));
}

}  // namespace
}  // namespace pileprep
