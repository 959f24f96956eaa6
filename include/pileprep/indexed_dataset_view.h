// Zero-copy, memory-mapped reader of a Megatron `.bin/.idx` pair (docs/format.md), the C++ twin of
// Megatron-core's `IndexedDataset`. Part of the lean `pileprep::loader` target (Abseil only).
//
//   PILEPREP_ASSIGN_OR_RETURN(std::shared_ptr<const IndexedDatasetView> ds,
//                             IndexedDatasetView::Open("data/my-gpt3_00_text_document"));
//   absl::Span<const uint16_t> seq = ds->Sequence<uint16_t>(7);   // points into the mapped .bin
//
// Open maps the .idx and the .bin read-only and keeps both mapped, as Megatron's numpy memmaps do:
// every process that opens a dataset (one per GPU) shares its pages through the page cache. Only
// the sequence lengths are copied out (4 bytes per sequence; the 34-byte header leaves the arrays
// unaligned, and the lengths are wanted as an aligned span): the pointers and document indices are
// read where they lie (sequence_pointer(i), document_index(i)), so a dataset of The Pile's 210
// million documents costs each process 0.8 GB, not 4.2. Token arrays inside the .bin are aligned
// (the mapping is page-aligned and every pointer is a multiple of the item size, which Open
// checks), so typed spans are safe. The files must not be rewritten in place while open (pileprep
// publishes them by rename; Megatron's preprocess_data.py writes them in place): a file cut short
// under a mapping raises SIGBUS where it is read, and a pointer changed after Open is no longer the
// one checked, which SequenceInBounds(i) checks again.
//
// Validation on open (each failure is InvalidArgument naming the file and byte offset or entry):
// magic, version 1, dtype code 4 (int32) or 8 (uint16), an .idx long enough for its counts
// (trailing bytes are accepted, as Megatron's readers do), lengths >= 0, every pointer a multiple
// of the item size, every sequence inside the .bin, document_indices starting at 0, non-decreasing
// and <= the sequence count. Open errors: NotFound / PermissionDenied ... with path and strerror.
//
// Lifetime: spans returned point into the mapping and stay valid while the view lives (hold the
// shared_ptr). Thread model: immutable after Open; any number of threads may read concurrently.
#ifndef PILEPREP_INDEXED_DATASET_VIEW_H_
#define PILEPREP_INDEXED_DATASET_VIEW_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pileprep/indexed_dataset.h"  // TokenDType and the .idx layout constants (header-only use)

namespace pileprep {

struct IndexedDatasetViewOptions {
  // madvise(MADV_RANDOM) on the .bin mapping: training reads samples in shuffled order, so kernel
  // read-ahead mostly wastes page cache. Off gives the kernel's default (sequential read-ahead).
  bool advise_random = true;
};

class IndexedDatasetView {
 public:
  // Opens `{prefix}.idx` and `{prefix}.bin`. See the file comment for what is checked.
  static absl::StatusOr<std::shared_ptr<const IndexedDatasetView>> Open(
      const std::string& prefix, IndexedDatasetViewOptions options = {});
  ~IndexedDatasetView();
  IndexedDatasetView(const IndexedDatasetView&) = delete;
  IndexedDatasetView& operator=(const IndexedDatasetView&) = delete;

  const std::string& prefix() const { return prefix_; }
  TokenDType dtype() const { return dtype_; }
  // Bytes per token: 2 (uint16) or 4 (int32).
  size_t itemsize() const { return itemsize_; }

  int64_t num_sequences() const { return static_cast<int64_t>(sequence_lengths_.size()); }
  // Documents (document_indices has one more entry).
  int64_t num_documents() const { return num_documents_; }
  // Σ sequence_lengths.
  int64_t num_tokens() const { return num_tokens_; }
  // Size of the .bin in bytes.
  uint64_t bin_bytes() const { return bin_bytes_; }

  absl::Span<const int32_t> sequence_lengths() const { return sequence_lengths_; }
  // Byte offset of sequence `i` in the .bin (0 <= i < num_sequences(), unchecked).
  int64_t sequence_pointer(int64_t i) const { return LoadInt64(pointers_ + 8 * i); }
  // Entry `i` of document_indices (0 <= i <= num_documents(), unchecked).
  int64_t document_index(int64_t i) const { return LoadInt64(documents_ + 8 * i); }
  // The .idx's pointer and document-index arrays where they lie in its mapping: little-endian
  // int64, num_sequences() and num_documents() + 1 of them, not aligned to 8 bytes (for zero-copy
  // views, such as the Python module's numpy arrays; C++ reads them with the accessors above).
  const uint8_t* raw_sequence_pointers() const { return pointers_; }
  const uint8_t* raw_document_indices() const { return documents_; }

  // Whether sequence `i`'s pointer, as the .idx holds it now, still passes Open's check (a multiple
  // of the item size, the sequence inside the .bin). Open checked every pointer, but they are read
  // where they lie: an .idx rewritten in place since (Megatron's preprocess_data.py writes its
  // outputs in place) could hold another. GptDataset::GetSample and the Python module check it
  // before reading a sequence (a few compares); the accessors below do not.
  bool SequenceInBounds(int64_t i) const { return CheckedSequenceData(i) != nullptr; }
  // Sequence `i`'s bytes if its pointer, read once, passes that check; else nullptr.
  const uint8_t* CheckedSequenceData(int64_t i) const {
    const int64_t ptr = sequence_pointer(i);
    const auto len = static_cast<uint64_t>(sequence_lengths_[static_cast<size_t>(i)]);
    const bool in = ptr >= 0 && ptr % static_cast<int64_t>(itemsize_) == 0 &&
                    static_cast<uint64_t>(ptr) <= bin_bytes_ &&
                    len * itemsize_ <= bin_bytes_ - static_cast<uint64_t>(ptr);
    if (!in) return nullptr;
    return data_ != nullptr ? data_ + ptr : kEmptyBin;  // an empty .bin is not mapped
  }

  // Raw bytes of sequence `i` (0 <= i < num_sequences(), unchecked): itemsize() * length bytes.
  const uint8_t* sequence_data(int64_t i) const { return data_ + sequence_pointer(i); }
  // Sequence `i` as tokens. T must be the storage type: uint16_t for kUint16, int32_t for kInt32
  // (unchecked; use dtype()). Zero-copy.
  template <typename T>
  absl::Span<const T> Sequence(int64_t i) const {
    static_assert(std::is_same_v<T, uint16_t> || std::is_same_v<T, int32_t>);
    return absl::Span<const T>(reinterpret_cast<const T*>(sequence_data(i)),
                               static_cast<size_t>(sequence_lengths_[static_cast<size_t>(i)]));
  }
  // Copies `count` tokens of sequence `i` starting at token `offset` into `out`, widened to int64
  // (what Megatron's GPTDataset returns). The caller keeps offset + count <= length; the pointer is
  // checked (CheckedSequenceData): false, nothing copied, when it no longer passes.
  bool CopyTokens(int64_t i, int64_t offset, int64_t count, int64_t* out) const;

 private:
  IndexedDatasetView() = default;

  std::string prefix_;
  TokenDType dtype_ = TokenDType::kUint16;
  size_t itemsize_ = 2;
  // What CheckedSequenceData gives for the (empty) sequences of an empty .bin: not nullptr.
  alignas(8) static constexpr uint8_t kEmptyBin[8] = {};

  static int64_t LoadInt64(const uint8_t* p) {
    int64_t v;
    std::memcpy(&v, p, 8);  // unaligned: never cast the pointer
    return v;
  }

  std::vector<int32_t> sequence_lengths_;
  int64_t num_documents_ = 0;
  int64_t num_tokens_ = 0;
  const uint8_t* idx_ = nullptr;        // the .idx mapping
  uint64_t idx_bytes_ = 0;
  const uint8_t* pointers_ = nullptr;   // in it: the sequence pointers
  const uint8_t* documents_ = nullptr;  // and the document indices
  const uint8_t* data_ = nullptr;       // the .bin mapping (nullptr for an empty .bin)
  uint64_t bin_bytes_ = 0;
};

}  // namespace pileprep

#endif  // PILEPREP_INDEXED_DATASET_VIEW_H_
