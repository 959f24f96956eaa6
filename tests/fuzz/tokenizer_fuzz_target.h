// The tokenizer's fuzz target (Gpt2Tokenizer), shared by the libFuzzer binary
// (tests/fuzz/tokenizer_fuzzer.cc) and the corpus replay gtest
// (tests/unit/fuzz_corpus_replay_test.cc).
//
// Input layout: byte 0 holds flags (bit 0: <|endoftext|> special, the default, or ordinary text),
// the rest is text. The text is first made valid UTF-8 the way the JSON stage does it (each maximal
// invalid subsequence -> U+FFFD, Python's errors="replace"), so the property is the one the
// pipeline relies on. Oracles:
//   - round trip: Decode(Encode(text)) == text, with <|endoftext|> special and ordinary;
//   - every id is below the vocabulary size;
//   - the cache never changes results: a second Encode with the now-warm cache, and one through a
//     tokenizer with a 2-entry cache (constant eviction), give the same ids;
//   - the 16-bit Encode (the pipeline's, for a uint16 .bin) gives the same ids as the 32-bit one;
//   - special: the ids are exactly the ordinary encodings of the pieces between literal
//     <|endoftext|>s, joined by 50256;
//   - ordinary, texts up to 4 KiB: the pre-tokens are those of the RE2 reference pre-tokenizer
//     (tests/testing/re2_pretokenizer.h, gpt2.md's pattern), and each one's BPE equals the plain
//     reference BPE (tests/testing/reference_bpe.h, encoder.py's algorithm), so the hand-written
//     pre-tokenizer and the merge-loop optimisations are checked against the textbook on
//     adversarial text.
#ifndef PILEPREP_TESTS_FUZZ_TOKENIZER_FUZZ_TARGET_H_
#define PILEPREP_TESTS_FUZZ_TOKENIZER_FUZZ_TARGET_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "jsonl/utf8.h"
#include "pileprep/gpt2_tokenizer.h"
#include "testing/re2_pretokenizer.h"
#include "testing/reference_bpe.h"
#include "tokenizer/pretokenizer.h"

namespace pileprep::fuzz {

struct TokenizerFuzzState {
  std::unique_ptr<Gpt2Tokenizer> special, ordinary, special_tiny_cache;
  std::unique_ptr<Gpt2Tokenizer::Cache> special_cache, ordinary_cache, tiny_cache;
  std::unique_ptr<testing::ReferenceBpe> reference;
};

inline TokenizerFuzzState& TokenizerFuzz() {
  static TokenizerFuzzState* state = [] {
    auto* s = new TokenizerFuzzState;
    const std::string dir = std::string(PILEPREP_SOURCE_DIR) + "/tokenizers/gpt2";
    auto load = [&](bool special, size_t cache_entries) {
      Gpt2Tokenizer::Options o;
      o.endoftext_is_special = special;
      o.cache_entries = cache_entries;
      auto t = Gpt2Tokenizer::FromFiles(dir + "/encoder.json", dir + "/vocab.bpe", o);
      if (!t.ok()) {
        std::fprintf(stderr, "tokenizer fuzz: %s\n", std::string(t.status().message()).c_str());
        std::abort();
      }
      return std::move(*t);
    };
    s->special = load(true, 1 << 12);
    s->ordinary = load(false, 1 << 12);
    s->special_tiny_cache = load(true, 2);
    s->special_cache = std::make_unique<Gpt2Tokenizer::Cache>(*s->special);
    s->ordinary_cache = std::make_unique<Gpt2Tokenizer::Cache>(*s->ordinary);
    s->tiny_cache = std::make_unique<Gpt2Tokenizer::Cache>(*s->special_tiny_cache);
    auto ref = testing::ReferenceBpe::Load(dir);
    if (!ref.ok()) std::abort();
    s->reference = std::make_unique<testing::ReferenceBpe>(std::move(*ref));
    return s;
  }();
  return *state;
}

inline int RunTokenizerFuzzInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  TokenizerFuzzState& f = TokenizerFuzz();
  const bool special = (data[0] & 1) == 0;
  std::string text;
  internal::AppendUtf8Replacing(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1),
                                &text);
  const Gpt2Tokenizer& tok = special ? *f.special : *f.ordinary;
  Gpt2Tokenizer::Cache& cache = special ? *f.special_cache : *f.ordinary_cache;

  std::vector<uint32_t> ids;
  tok.Encode(text, cache, &ids);
  for (uint32_t id : ids) {
    if (id >= tok.vocab_size()) std::abort();
  }
  if (tok.Decode(ids) != text) std::abort();  // round trip
  std::vector<uint32_t> again;
  tok.Encode(text, cache, &again);  // warm cache
  if (again != ids) std::abort();
  std::vector<uint16_t> narrow;
  if (!tok.Encode(text, cache, &narrow) || !std::equal(ids.begin(), ids.end(), narrow.begin(), narrow.end())) {
    std::abort();
  }

  if (special) {
    std::vector<uint32_t> tiny;
    f.special_tiny_cache->Encode(text, *f.tiny_cache, &tiny);
    if (tiny != ids) std::abort();
    // Special = ordinary pieces joined by the EOD id.
    std::vector<uint32_t> joined;
    static constexpr std::string_view kEot = "<|endoftext|>";
    size_t pos = 0;
    while (true) {
      const size_t at = text.find(kEot, pos);
      const std::string_view piece =
          std::string_view(text).substr(pos, at == std::string::npos ? std::string::npos : at - pos);
      f.ordinary->Encode(piece, *f.ordinary_cache, &joined);
      if (at == std::string::npos) break;
      joined.push_back(tok.eod_id());
      pos = at + kEot.size();
    }
    if (joined != ids) std::abort();
  } else if (text.size() <= 4096) {
    const std::vector<std::string_view> pieces = internal::PretokenizeToVector(text);
    const std::vector<std::string> re2_pieces = testing::Re2Pretokenize(text);
    if (!std::equal(pieces.begin(), pieces.end(), re2_pieces.begin(), re2_pieces.end())) {
      std::abort();
    }
    std::vector<uint32_t> ref;
    for (std::string_view piece : pieces) {
      std::vector<uint32_t> p = f.reference->EncodePiece(piece);
      ref.insert(ref.end(), p.begin(), p.end());
    }
    if (ref != ids) std::abort();
  }
  return 0;
}

}  // namespace pileprep::fuzz

#endif  // PILEPREP_TESTS_FUZZ_TOKENIZER_FUZZ_TARGET_H_
