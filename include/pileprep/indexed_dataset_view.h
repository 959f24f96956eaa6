// Zero-copy, memory-mapped reader of a Megatron `.bin/.idx` pair (docs/format.md), the C++ twin of
// Megatron-core's `IndexedDataset`. Part of the lean `pileprep::loader` target (Abseil only).
//
//   PILEPREP_ASSIGN_OR_RETURN(std::shared_ptr<const IndexedDatasetView> ds,
//                             IndexedDatasetView::Open("data/my-gpt3_00_text_document"));
//   absl::Span<const uint16_t> seq = ds->Sequence<uint16_t>(7);   // points into the mapped .bin
//
// Open maps the .idx and the .bin read-only and keeps both mapped, as Megatron's numpy memmaps do:
// every process that opens a dataset (one per GPU) shares its pages through the page cache, and
// nothing proportional to the dataset is copied into the process. The .idx's arrays are read where
// they lie (sequence_lengths(), sequence_pointer(i), document_index(i)): the 34-byte header leaves
// them unaligned, so they are read by memcpy, never through a cast pointer. At The Pile's scale
// (210 million documents) a copied index would cost each process 4.2 GB (0.8 GB for the lengths
// alone). Token arrays inside the .bin are aligned (the mapping is page-aligned and every pointer
// is a multiple of the item size, which Open checks), so typed spans are safe. The files must not
// be rewritten in place while open (pileprep publishes them by rename; Megatron's
// preprocess_data.py writes them in place): a file cut short under a mapping raises SIGBUS where
// it is read, and a pointer or length changed after Open is no longer the one checked, which
// CheckedSequenceData(i) checks again.
//
// Validation on open (each failure is InvalidArgument naming the file and byte offset or entry):
// magic, version 1, dtype code 4 (int32) or 8 (uint16), an .idx long enough for its counts
// (trailing bytes are accepted, as Megatron's readers do), lengths >= 0, every pointer a multiple
// of the item size, every sequence inside the .bin, document_indices starting at 0, non-decreasing
// and ending at the sequence count; a prefix holding a NUL byte is InvalidArgument. Open errors:
// Abseil's code for the errno (NotFound, PermissionDenied, ...; a directory named as a file is
// InvalidArgument, as the core reader has it) with path and strerror, and the errno (ErrnoOf).
//
// Lifetime: spans returned point into the mapping and stay valid while the view lives (hold the
// shared_ptr). Thread model: immutable after Open; any number of threads may read concurrently.
#ifndef PILEPREP_INDEXED_DATASET_VIEW_H_
#define PILEPREP_INDEXED_DATASET_VIEW_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pileprep/indexed_dataset.h"  // TokenDType and the .idx layout constants (header-only use)

namespace pileprep {

// The errno of the system call (open, mmap, mkdir, write, ...) a loader error comes from, where it
// comes from one: the status carries it as a payload, so that a caller can tell ENOTDIR from
// ENAMETOOLONG as open() would (the Python module raises OSError with it, as Megatron's open and
// numpy do). nullopt for any other status.
std::optional<int> ErrnoOf(const absl::Status& status);

struct IndexedDatasetViewOptions {
  // madvise(MADV_RANDOM) on the .bin mapping: training reads samples in shuffled order, so kernel
  // read-ahead mostly wastes page cache. Off gives the kernel's default (sequential read-ahead).
  bool advise_random = true;
};

// Little-endian int32 values where they lie in a mapping: `size()` of them from `data()`, with no
// alignment assumed (each is read by memcpy, a plain load on the targets pileprep builds for).
// Valid while the mapping lives.
class MappedInt32s {
 public:
  MappedInt32s() = default;
  MappedInt32s(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const uint8_t* data() const { return data_; }
  int32_t operator[](size_t i) const {
    int32_t v;
    std::memcpy(&v, data_ + 4 * i, 4);
    return v;
  }
  std::vector<int32_t> ToVector() const {
    std::vector<int32_t> out(size_);
    if (size_ > 0) std::memcpy(out.data(), data_, 4 * size_);
    return out;
  }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
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

  int64_t num_sequences() const { return num_sequences_; }
  // Documents (document_indices has one more entry).
  int64_t num_documents() const { return num_documents_; }
  // Σ sequence_lengths.
  int64_t num_tokens() const { return num_tokens_; }
  // Size of the .bin in bytes.
  uint64_t bin_bytes() const { return bin_bytes_; }

  // The lengths where they lie in the mapped .idx (Open checked each is >= 0).
  MappedInt32s sequence_lengths() const {
    return MappedInt32s(lengths_, static_cast<size_t>(num_sequences_));
  }
  // Length of sequence `i` (0 <= i < num_sequences(), unchecked).
  int32_t sequence_length(int64_t i) const { return LoadInt32(lengths_ + 4 * i); }
  // Byte offset of sequence `i` in the .bin (0 <= i < num_sequences(), unchecked).
  int64_t sequence_pointer(int64_t i) const { return LoadInt64(pointers_ + 8 * i); }
  // Entry `i` of document_indices (0 <= i <= num_documents(), unchecked).
  int64_t document_index(int64_t i) const { return LoadInt64(documents_ + 8 * i); }
  // The .idx's pointer and document-index arrays where they lie in its mapping: little-endian
  // int64, num_sequences() and num_documents() + 1 of them, not aligned to 8 bytes (for zero-copy
  // views, such as the Python module's numpy arrays; C++ reads them with the accessors above).
  const uint8_t* raw_sequence_pointers() const { return pointers_; }
  const uint8_t* raw_document_indices() const { return documents_; }

  // Whether sequence `i`'s pointer and length, as the .idx holds them now, still pass Open's check
  // (a length >= 0, a pointer that is a multiple of the item size, the sequence inside the .bin).
  // Open checked every one, but they are read where they lie: an .idx rewritten in place since
  // (Megatron's preprocess_data.py writes its outputs in place) could hold others. GptDataset::
  // GetSample and the Python module check before reading a sequence (a few compares); the
  // accessors below do not.
  bool SequenceInBounds(int64_t i) const { return CheckedSequenceData(i) != nullptr; }
  // Sequence `i`'s bytes if `i` is a sequence (0 <= i < num_sequences()) and its pointer and
  // length, each read once, pass that check; else nullptr. `length`, when given, receives the
  // length checked (tokens).
  const uint8_t* CheckedSequenceData(int64_t i, int64_t* length = nullptr) const {
    if (i < 0 || i >= num_sequences_) return nullptr;  // the pointer array ends there
    const int64_t ptr = sequence_pointer(i);
    const int64_t len = sequence_length(i);
    const bool in =
        len >= 0 && ptr >= 0 && ptr % static_cast<int64_t>(itemsize_) == 0 &&
        static_cast<uint64_t>(ptr) <= bin_bytes_ &&
        static_cast<uint64_t>(len) * itemsize_ <= bin_bytes_ - static_cast<uint64_t>(ptr);
    if (!in) return nullptr;
    if (length != nullptr) *length = len;
    return data_ != nullptr ? data_ + ptr : kEmptyBin;  // an empty .bin is not mapped
  }

  // The .bin's bytes [offset, offset + size) if they lie inside it, else nullptr: for reads that
  // Megatron's IndexedDataset makes from the whole .bin rather than one sequence (a slice read
  // from its first sequence's pointer; get() past a sequence's end), which the Python module
  // reproduces. Checked, whatever the .idx holds now.
  const uint8_t* BinBytes(uint64_t offset, uint64_t size) const {
    if (offset > bin_bytes_ || size > bin_bytes_ - offset) return nullptr;
    return data_ != nullptr ? data_ + offset : kEmptyBin;  // an empty .bin is not mapped
  }

  // Raw bytes of sequence `i` (0 <= i < num_sequences(), unchecked): itemsize() * length bytes.
  const uint8_t* sequence_data(int64_t i) const { return data_ + sequence_pointer(i); }
  // Sequence `i` as tokens. T must be the storage type: uint16_t for kUint16, int32_t for kInt32
  // (unchecked; use dtype()). Zero-copy.
  template <typename T>
  absl::Span<const T> Sequence(int64_t i) const {
    static_assert(std::is_same_v<T, uint16_t> || std::is_same_v<T, int32_t>);
    return absl::Span<const T>(reinterpret_cast<const T*>(sequence_data(i)),
                               static_cast<size_t>(sequence_length(i)));
  }
  // Copies `count` tokens of sequence `i` starting at token `offset` into `out`, widened to int64
  // (what Megatron's GPTDataset returns). Checked (CheckedSequenceData, i included; 0 <= offset,
  // 0 <= count, offset + count <= the length read there): false, nothing copied, when it fails.
  bool CopyTokens(int64_t i, int64_t offset, int64_t count, int64_t* out) const;

 private:
  IndexedDatasetView() = default;

  std::string prefix_;
  TokenDType dtype_ = TokenDType::kUint16;
  size_t itemsize_ = 2;
  // What CheckedSequenceData gives for the (empty) sequences of an empty .bin: not nullptr.
  alignas(8) static constexpr uint8_t kEmptyBin[8] = {};

  static int32_t LoadInt32(const uint8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);  // unaligned: never cast the pointer
    return v;
  }
  static int64_t LoadInt64(const uint8_t* p) {
    int64_t v;
    std::memcpy(&v, p, 8);  // unaligned: never cast the pointer
    return v;
  }

  int64_t num_sequences_ = 0;
  int64_t num_documents_ = 0;
  int64_t num_tokens_ = 0;
  const uint8_t* idx_ = nullptr;  // the .idx mapping
  uint64_t idx_bytes_ = 0;
  const uint8_t* lengths_ = nullptr;    // in it: the sequence lengths,
  const uint8_t* pointers_ = nullptr;   // the sequence pointers
  const uint8_t* documents_ = nullptr;  // and the document indices
  const uint8_t* data_ = nullptr;       // the .bin mapping (nullptr for an empty .bin)
  uint64_t bin_bytes_ = 0;
};

}  // namespace pileprep

#endif  // PILEPREP_INDEXED_DATASET_VIEW_H_
