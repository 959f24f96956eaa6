// Zero-copy, memory-mapped reader of a Megatron `.bin/.idx` pair (docs/format.md), the C++ twin of
// Megatron-core's `IndexedDataset`. Part of the lean `pileprep::loader` target (Abseil only).
//
//   PILEPREP_ASSIGN_OR_RETURN(std::shared_ptr<const IndexedDatasetView> ds,
//                             IndexedDatasetView::Open("data/my-gpt3_00_text_document"));
//   absl::Span<const uint16_t> seq = ds->Sequence<uint16_t>(7);   // points into the mapped .bin
//
// Open maps the .idx, copies its three arrays out with memcpy (the 34-byte header leaves them
// unaligned; the copies are aligned and cheap: 12 bytes per sequence) and unmaps it, then maps the
// .bin read-only. Token arrays inside the .bin are aligned (the mapping is page-aligned and every
// pointer is a multiple of the item size, which Open checks), so typed spans are safe.
//
// Validation on open (each failure is InvalidArgument naming the file and byte offset or entry):
// magic, version 1, dtype code 4 (int32) or 8 (uint16), an .idx long enough for its counts
// (trailing bytes are accepted, as Megatron's readers do), lengths >= 0, every pointer a multiple of
// the item size, every sequence inside the .bin, document_indices starting at 0, non-decreasing and
// <= the sequence count. Open errors: NotFound / PermissionDenied ... with path and strerror.
//
// Lifetime: spans returned point into the mapping and stay valid while the view lives (hold the
// shared_ptr). Thread model: immutable after Open; any number of threads may read concurrently.
#ifndef PILEPREP_INDEXED_DATASET_VIEW_H_
#define PILEPREP_INDEXED_DATASET_VIEW_H_

#include <cstddef>
#include <cstdint>
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
  int64_t num_documents() const { return static_cast<int64_t>(document_indices_.size()) - 1; }
  // Σ sequence_lengths.
  int64_t num_tokens() const { return num_tokens_; }
  // Size of the .bin in bytes.
  uint64_t bin_bytes() const { return bin_bytes_; }

  absl::Span<const int32_t> sequence_lengths() const { return sequence_lengths_; }
  absl::Span<const int64_t> sequence_pointers() const { return sequence_pointers_; }
  absl::Span<const int64_t> document_indices() const { return document_indices_; }

  // Raw bytes of sequence `i` (0 <= i < num_sequences(), unchecked): itemsize() * length bytes.
  const uint8_t* sequence_data(int64_t i) const {
    return data_ + sequence_pointers_[static_cast<size_t>(i)];
  }
  // Sequence `i` as tokens. T must be the storage type: uint16_t for kUint16, int32_t for kInt32
  // (unchecked; use dtype()). Zero-copy.
  template <typename T>
  absl::Span<const T> Sequence(int64_t i) const {
    static_assert(std::is_same_v<T, uint16_t> || std::is_same_v<T, int32_t>);
    return absl::Span<const T>(reinterpret_cast<const T*>(sequence_data(i)),
                               static_cast<size_t>(sequence_lengths_[static_cast<size_t>(i)]));
  }
  // Copies `count` tokens of sequence `i` starting at token `offset` into `out`, widened to int64
  // (what Megatron's GPTDataset returns). Unchecked: the caller keeps offset + count <= length.
  void CopyTokens(int64_t i, int64_t offset, int64_t count, int64_t* out) const;

 private:
  IndexedDatasetView() = default;

  std::string prefix_;
  TokenDType dtype_ = TokenDType::kUint16;
  size_t itemsize_ = 2;
  std::vector<int32_t> sequence_lengths_;
  std::vector<int64_t> sequence_pointers_;
  std::vector<int64_t> document_indices_;
  int64_t num_tokens_ = 0;
  const uint8_t* data_ = nullptr;  // the .bin mapping (nullptr for an empty .bin)
  uint64_t bin_bytes_ = 0;
};

}  // namespace pileprep

#endif  // PILEPREP_INDEXED_DATASET_VIEW_H_
