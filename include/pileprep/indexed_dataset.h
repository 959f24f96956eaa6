// Megatron's indexed dataset: the `.bin` (token arrays) / `.idx` (lengths, byte pointers, document
// boundaries) pair that Megatron-LM, its 2023 `MMapIndexedDataset` and NeMo read. The layout is
// docs/format.md; the writer's output is byte-identical to Megatron's `IndexedDatasetBuilder`.
//
// Writing:
//
//   PILEPREP_ASSIGN_OR_RETURN(auto writer, IndexedDatasetWriter::Create("out/00_text_document"));
//   for (...) PILEPREP_RETURN_IF_ERROR(writer->AddDocument(ids));   // ids end with EOD (50256)
//   PILEPREP_ASSIGN_OR_RETURN(IndexedDatasetWriter::Result r, writer->Finish());
//   // r.published: out/00_text_document.{bin,idx} exist (false: zero tokens, nothing written)
//
// Reading the index (the .bin is plain little-endian tokens; see the loader for mmap access):
//
//   PILEPREP_ASSIGN_OR_RETURN(IndexedDatasetIndex index, ReadIndex("out/00_text_document.idx"));
#ifndef PILEPREP_INDEXED_DATASET_H_
#define PILEPREP_INDEXED_DATASET_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace pileprep {

// Token storage type. The values are the dtype codes of the .idx header. Megatron knows codes 1..8,
// but only these two hold tokens (6 and 7 are read differently by NeMo and Megatron: never
// written).
enum class TokenDType : uint8_t { kInt32 = 4, kUint16 = 8 };

// Inline, as the loader's headers use them and pileprep::loader does not link pileprep::core.
// Megatron's rule, shared by every writer: uint16 if vocab_size < 65500, else int32.
// GPT-2 (50257 entries) gives kUint16.
inline TokenDType DTypeForVocabSize(size_t vocab_size) {
  return vocab_size < 65500 ? TokenDType::kUint16 : TokenDType::kInt32;
}

// Bytes per token: 2 for kUint16, 4 for kInt32.
inline size_t DTypeSize(TokenDType dtype) { return dtype == TokenDType::kUint16 ? 2 : 4; }

// "uint16" / "int32", for messages.
inline const char* DTypeName(TokenDType dtype) {
  return dtype == TokenDType::kUint16 ? "uint16" : "int32";
}

// Suffix of the temporary files beside the final ones: `{prefix}.bin.pileprep-tmp` etc.
inline constexpr char kIndexedDatasetTempSuffix[] = ".pileprep-tmp";

struct IndexedDatasetWriterOptions {
  // Token type of the .bin (and dtype code of the .idx). Pick it with DTypeForVocabSize.
  TokenDType dtype = TokenDType::kUint16;
  // Write buffer of the .bin (writes are large and sequential). At least 8 bytes.
  size_t buffer_bytes = 4 << 20;
  // Write buffer of each spill file (sequence lengths, document indices) and of the .idx. At least
  // 8 bytes.
  size_t spill_buffer_bytes = 1 << 20;
  // fsync the .bin and .idx before renaming them into place, and the directory after.
  bool sync = true;
  // Write the .bin past the page cache (O_DIRECT) from a background thread where the file system
  // allows it, else through the page cache. Same bytes either way; it takes the kernel's copy of
  // every byte out of the caller's thread. Uses three buffers of buffer_bytes (rounded up to 4 KiB,
  // at least 8 KiB) and one thread per writer.
  bool direct_io = true;
};

// Writes `{prefix}.bin` and `{prefix}.idx`, exactly as Megatron's IndexedDatasetBuilder with
// add_document(tokens, lengths) per document followed by finalize().
//
// Memory is independent of the number of documents: sequence lengths and document indices are
// streamed to spill files beside the outputs, and the .idx is assembled from them, a buffer at a
// time, at Finish(). Everything is written under temporary names in the same directory as the final
// ones (a rename within one directory never crosses filesystems; shared workspaces are Lustre/NFS):
//   {prefix}.bin.pileprep-tmp  {prefix}.idx.pileprep-tmp  {prefix}.lengths.pileprep-tmp
//   {prefix}.docidx.pileprep-tmp
// Existing temporaries of that name (a crashed run) are overwritten.
//
// Publishing (Finish): flush; fsync the .bin and .idx; remove the spill files; remove an existing
// `{prefix}.idx`; rename the .bin, then the .idx, into place; fsync the directory. Each final file
// is replaced atomically (a reader that has the old .bin open or mapped keeps the old bytes), and a
// .idx under the final name always describes the .bin beside it: between the two renames a reader
// finds no .idx rather than an old one.
//
// A dataset with zero tokens is never published (no reader can mmap an empty .bin): Finish removes
// the temporaries and reports published = false. Existing final files of that prefix are left as
// they are.
//
// Failure: the first error of any call (a bad token, a bad length, a write error such as ENOSPC,
// EACCES, EROFS, EDQUOT) removes all temporaries and is returned again, as FailedPrecondition, by
// every later call; a failed writer publishes nothing. Abort(), and the destructor if Finish() was
// not reached, remove all temporaries.
//
// Errors name the file (and byte offset where one applies) and strerror:
//   "out/00_text_document.bin.pileprep-tmp: write at byte 1048576: No space left on device"
//   "out/x.bin: document 41 (0-based): token 70000 at position 3 does not fit uint16"
//
// Thread model: not thread-safe; one thread at a time (the pipeline's in-order stage). With
// direct_io the writer owns one background thread that writes the .bin's full buffers; a write error
// it meets is returned by the next call that flushes (AddDocument or Finish).
class IndexedDatasetWriter {
 public:
  // Opens the temporaries. Errors: InvalidArgument (empty prefix or file name, bad options), or the
  // open error of a temporary (its path and strerror: a missing or read-only directory).
  static absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> Create(
      std::string prefix, IndexedDatasetWriterOptions options = {});
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // One document = one sequence holding `tokens` (EOD already appended by the caller if wanted).
  // Empty `tokens`: a document with no sequence (document_indices repeats the previous value), as
  // current Megatron does for an empty text.
  // Errors: InvalidArgument for a token id that does not fit the dtype (>= 65536 for uint16, >=
  // 2^31 for int32) or a document longer than 2^31 - 1 tokens; write errors; FailedPrecondition
  // after an error or after Finish/Abort.
  absl::Status AddDocument(absl::Span<const uint32_t> tokens);
  // AddDocument(tokens) for 16-bit ids: a uint16 .bin takes them as they are (no conversion, no
  // range check to make); an int32 one widens them. (Its own name: an overload would make
  // AddDocument({}) and AddDocument({1, 2}) ambiguous.)
  absl::Status AddDocument16(absl::Span<const uint16_t> tokens);

  // Megatron's add_document(tokens, lengths): one document of several sequences whose lengths sum
  // to tokens.size(). Zero or negative lengths are refused (Megatron never writes an empty
  // sequence); no lengths at all with no tokens is the empty document above.
  absl::Status AddDocument(absl::Span<const uint32_t> tokens,
                           absl::Span<const int32_t> sequence_lengths);

  struct Result {
    bool published = false;  // false: the dataset had zero tokens and no file was written
    uint64_t num_tokens = 0;
    uint64_t num_sequences = 0;
    uint64_t num_documents = 0;  // documents added; the .idx stores num_documents + 1 indices
    uint64_t bin_bytes = 0;
    uint64_t idx_bytes = 0;
  };
  // Assembles the .idx and publishes both files (see above). Call once. Errors: any write, fsync or
  // rename error (nothing is left published, no temporaries remain); FailedPrecondition after an
  // earlier error or a second call. Prepare() then Publish().
  absl::StatusOr<Result> Finish();

  // Finish in two steps, for a caller that acts between them (the pipeline publishes several keys
  // all or none; the shard job writes a pending record naming the temporaries' inodes, which the
  // renames keep). Prepare assembles and syncs the .idx and leaves both files complete under
  // bin_temp_path() / idx_temp_path(): Result with the sizes, published = false. A dataset with
  // zero tokens is done there (temporaries removed, nothing to publish: Finish's empty case).
  // Publish then renames them into place as Finish does. After Prepare only Publish or Abort (or
  // the destructor, which removes the temporaries) may follow.
  absl::StatusOr<Result> Prepare();
  absl::StatusOr<Result> Publish();

  // Removes all temporaries; later calls fail with FailedPrecondition. No effect after Finish or
  // Publish.
  void Abort();

  uint64_t num_tokens() const { return num_tokens_; }
  uint64_t num_sequences() const { return num_sequences_; }
  uint64_t num_documents() const { return num_documents_; }
  const std::string& prefix() const { return prefix_; }
  std::string bin_path() const { return prefix_ + ".bin"; }
  std::string idx_path() const { return prefix_ + ".idx"; }
  std::string bin_temp_path() const;
  std::string idx_temp_path() const;

 private:
  class Files;
  IndexedDatasetWriter(std::string prefix, IndexedDatasetWriterOptions options);
  absl::Status CheckUsable() const;
  absl::Status Fail(absl::Status status);  // records the error, removes temporaries, returns it
  template <typename Id>
  absl::Status AddOneSequence(absl::Span<const Id> tokens);
  template <typename Id>
  absl::Status AddTokens(absl::Span<const Id> tokens, absl::Span<const int32_t> sequence_lengths);
  absl::Status WriteTokens(absl::Span<const uint32_t> tokens);
  absl::Status WriteTokens(absl::Span<const uint16_t> tokens);
  absl::StatusOr<Result> PrepareImpl();
  absl::Status PublishImpl();

  std::string prefix_;
  IndexedDatasetWriterOptions options_;
  std::unique_ptr<Files> files_;
  absl::Status error_;   // first error; non-OK means failed
  bool closed_ = false;  // Finish, Publish or Abort reached
  bool prepared_ = false;  // Prepare done, Publish not yet
  Result prepared_result_;
  uint64_t num_tokens_ = 0;
  uint64_t num_sequences_ = 0;
  uint64_t num_documents_ = 0;
};

// The parsed .idx. Arrays are copied out with memcpy (the 34-byte header leaves them unaligned).
struct IndexedDatasetIndex {
  TokenDType dtype = TokenDType::kUint16;
  std::vector<int32_t> sequence_lengths;   // S entries, tokens per sequence
  std::vector<int64_t> sequence_pointers;  // S entries, byte offset of each sequence in the .bin
  std::vector<int64_t> document_indices;   // documents + 1 entries
};

// Byte layout of the .idx header (docs/format.md).
inline constexpr char kIdxMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr uint64_t kIdxVersion = 1;
inline constexpr size_t kIdxVersionOffset = 9;
inline constexpr size_t kIdxDTypeOffset = 17;
inline constexpr size_t kIdxSequenceCountOffset = 18;
inline constexpr size_t kIdxDocumentCountOffset = 26;
inline constexpr size_t kIdxHeaderBytes = 34;

// Reads and checks `idx_path`: magic, version 1, dtype code 4 or 8, and a size of exactly
// 34 + 12·S + 8·D1 bytes. It does not check the arrays' contents or the .bin (a validator's job).
// Errors: the open/read error (path and strerror), InvalidArgument "x.idx: not a regular file"
// for a FIFO or a device (refused at once, never waited on or read without end), or
// InvalidArgument naming the file and byte offset:
//   "x.idx: byte 17: dtype code 7 is not a token dtype (expected 4 = int32 or 8 = uint16)"
absl::StatusOr<IndexedDatasetIndex> ReadIndex(const std::string& idx_path);

}  // namespace pileprep

#endif  // PILEPREP_INDEXED_DATASET_H_
