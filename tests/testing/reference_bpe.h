// Reference GPT-2 byte-level BPE, for differential tests of pileprep's fast tokenizer.
//
//   absl::StatusOr<ReferenceBpe> ref = ReferenceBpe::Load(PILEPREP_SOURCE_DIR "/tokenizers/gpt2");
//   std::vector<uint32_t> ids = ref->Encode("Hello world");  // {15496, 995}
//
// Written like OpenAI's gpt-2 `encoder.py`, deliberately plain: bytes are mapped to printable unicode
// (bytes_to_unicode), a piece is a list of symbol strings, and `bpe()` repeatedly finds the lowest-ranked
// adjacent pair and merges ALL its occurrences, left to right. Pre-tokenization is Re2Pretokenize. No
// special tokens: "<|endoftext|>" in text is ordinary text. Slow; for tests only.
//
// Loads `encoder.json` and `vocab.bpe` from a directory; parsing follows encoder.py (the merges file is
// split on '\n', its first line and the text after the last '\n' dropped).
// Thread model: immutable after Load; const methods may be called from any thread.
#ifndef PILEPREP_TESTS_TESTING_REFERENCE_BPE_H_
#define PILEPREP_TESTS_TESTING_REFERENCE_BPE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"

namespace pileprep::testing {

class ReferenceBpe {
 public:
  // Reads `dir`/encoder.json and `dir`/vocab.bpe. Errors name the file.
  static absl::StatusOr<ReferenceBpe> Load(const std::string& dir);

  // BPE ids of one pre-token (any bytes), exactly as encoder.py's bpe() + encoder lookup.
  std::vector<uint32_t> EncodePiece(std::string_view piece) const;

  // Re2Pretokenize(text), then EncodePiece on each piece. No special tokens.
  std::vector<uint32_t> Encode(std::string_view text) const;

  size_t vocab_size() const { return encoder_.size(); }
  size_t num_merges() const { return bpe_ranks_.size(); }

 private:
  ReferenceBpe() = default;

  std::vector<std::string> Bpe(const std::vector<std::string>& word) const;

  std::unordered_map<std::string, uint32_t> encoder_;  // unicode token -> id
  std::unordered_map<std::string, int> bpe_ranks_;  // "A B" -> merge rank
  std::string byte_encoder_[256];                   // byte -> unicode symbol (UTF-8)
};

}  // namespace pileprep::testing

#endif  // PILEPREP_TESTS_TESTING_REFERENCE_BPE_H_
