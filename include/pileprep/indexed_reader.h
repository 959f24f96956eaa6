// Reading a Megatron .bin/.idx pair through memory maps: the read side of `inspect`, `merge` and the
// validator's callers. (The lean training-side loader is a separate library; this one lives in
// pileprep::core.)
//
//   PILEPREP_ASSIGN_OR_RETURN(auto reader, IndexedDatasetReader::Open("out/my-gpt3_00_text_document"));
//   std::vector<uint32_t> ids;
//   PILEPREP_RETURN_IF_ERROR(reader->ReadDocument(41, &ids));   // document 41's tokens
//
//   PILEPREP_ASSIGN_OR_RETURN(std::vector<std::string> prefixes, FindDatasetPrefixes("out"));
//
// Open checks the structure only (magic, version 1, dtype code 4 or 8, a .idx of exactly
// 34 + 12·S + 8·D1 bytes); it does not check the arrays' contents against each other or the .bin
// size (ValidateDataset in validate.h does). Every accessor is still safe on inconsistent files:
// array reads are bounds-checked by index (callers pass i < num_sequences()), and token reads
// check pointers and lengths against the .bin and return InvalidArgument instead of reading out of
// bounds.
//
// Lifetime: the maps live as long as the reader; views returned by *_bytes() die with it.
// Thread model: immutable after Open; any number of threads may read concurrently.
// Errors: open/mmap errors name the path and strerror; structural errors are InvalidArgument
// "x.idx: byte 17: dtype code 7 is not a token dtype (expected 4 = int32 or 8 = uint16)".
#ifndef PILEPREP_INDEXED_READER_H_
#define PILEPREP_INDEXED_READER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pileprep/indexed_dataset.h"

namespace pileprep {

class IndexedDatasetReader {
 public:
  // Maps `{prefix}.idx` and `{prefix}.bin`.
  static absl::StatusOr<std::unique_ptr<IndexedDatasetReader>> Open(const std::string& prefix);
  // Reads from bytes the caller keeps alive for the reader's lifetime (tests, the fuzzer).
  // `prefix` names the files in messages.
  static absl::StatusOr<std::unique_ptr<IndexedDatasetReader>> FromBuffers(
      std::string_view idx, std::string_view bin, const std::string& prefix);
  ~IndexedDatasetReader();
  IndexedDatasetReader(const IndexedDatasetReader&) = delete;
  IndexedDatasetReader& operator=(const IndexedDatasetReader&) = delete;

  const std::string& prefix() const { return prefix_; }
  TokenDType dtype() const { return dtype_; }
  size_t itemsize() const { return DTypeSize(dtype_); }
  uint64_t num_sequences() const { return num_sequences_; }
  // Entries of document_indices (documents + 1).
  uint64_t num_document_indices() const { return num_doc_indices_; }
  uint64_t num_documents() const { return num_doc_indices_ > 0 ? num_doc_indices_ - 1 : 0; }
  // Tokens the .bin holds (its size / itemsize).
  uint64_t bin_tokens() const { return bin_.size() / itemsize(); }

  // Array entries as stored (unaligned loads). Precondition: i < num_sequences(),
  // j < num_document_indices(); out-of-range indices return 0 rather than read out of bounds.
  int32_t sequence_length(uint64_t i) const;
  int64_t sequence_pointer(uint64_t i) const;
  int64_t document_index(uint64_t j) const;

  // Replaces `tokens` with sequence i's tokens. Errors: InvalidArgument for i out of range, a
  // negative length, or a pointer/length pair that leaves the .bin (naming the file and sequence).
  absl::Status ReadSequence(uint64_t i, std::vector<uint32_t>* tokens) const;
  // Replaces `tokens` with the concatenated tokens of document d's sequences
  // (document_indices[d] .. document_indices[d+1]). Same errors, plus document indices out of order
  // or beyond the sequence count.
  absl::Status ReadDocument(uint64_t d, std::vector<uint32_t>* tokens) const;
  // Document d's tokens in order, passed to `fn` at most `max_tokens` (0 counts as 1) at a time (a
  // sequence's tokens split into as many calls as need be): memory stays bounded whatever the index
  // claims (a corrupt one can make a document's sequences cover the .bin many times over). Each
  // sequence is checked, as ReadDocument checks it, before any of its tokens are passed; the first
  // error, or the first status other than OK that `fn` returns, ends the reading and is returned.
  // A reader from Open releases the .bin's pages behind the reading, so RSS stays flat however long
  // the document (mapped pages count in RSS).
  absl::Status ReadDocumentInChunks(
      uint64_t d, size_t max_tokens,
      absl::FunctionRef<absl::Status(const std::vector<uint32_t>&)> fn) const;

  // Raw bytes: the whole files and the three .idx arrays (for streaming copies, as in merge).
  std::string_view idx_bytes() const { return idx_; }
  std::string_view bin_bytes() const { return bin_; }
  std::string_view lengths_bytes() const;
  std::string_view pointers_bytes() const;
  std::string_view document_indices_bytes() const;

 private:
  struct Storage;
  IndexedDatasetReader() = default;
  absl::Status Parse();
  // Sequence i's bytes in the .bin, checked to lie within it; errors as ReadSequence's.
  absl::Status SequenceBytes(uint64_t i, const char** data, uint64_t* length) const;
  // `count` tokens of this dataset's dtype at `p`, widened into `tokens` (replaced).
  void DecodeTokens(const char* p, size_t count, std::vector<uint32_t>* tokens) const;

  std::string prefix_;
  std::unique_ptr<Storage> storage_;  // owns the maps when opened from files
  std::string_view idx_, bin_;
  TokenDType dtype_ = TokenDType::kUint16;
  uint64_t num_sequences_ = 0;
  uint64_t num_doc_indices_ = 0;
};

// The dataset prefixes in `dir`: every `NAME.idx` with a `NAME.bin` beside it, as `dir/NAME`,
// in the order of Megatron's tools/merge_datasets.py, Python's sorted() of os.listdir's names: by
// code point, a name that is not valid UTF-8 read as Python reads it (each byte that does not
// decode as U+DC00 + byte); for UTF-8 names that is their byte order. Files other than .bin/.idx
// are ignored, and directories; an entry so named that is no regular file (a dangling symlink, a
// FIFO) counts, and fails where it is opened. Errors: the directory cannot be listed; a .idx
// without its .bin or a .bin without its .idx (FailedPrecondition naming it), unless `unpaired` is
// given: then such files' paths go there (sorted) and the pairs are returned (validate checks the
// pairs it can).
absl::StatusOr<std::vector<std::string>> FindDatasetPrefixes(
    const std::string& dir, std::vector<std::string>* unpaired = nullptr);

}  // namespace pileprep

#endif  // PILEPREP_INDEXED_READER_H_
