#include <bit>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "format/file_util.h"
#include "pileprep/indexed_dataset.h"
#include "pileprep/status_macros.h"

namespace pileprep {

static_assert(std::endian::native == std::endian::little, "pileprep reads host-order arrays");

namespace {

template <typename T>
T Load(const std::string& data, size_t offset) {
  T value;
  std::memcpy(&value, data.data() + offset, sizeof(T));
  return value;
}

absl::Status Bad(const std::string& path, size_t offset, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": byte ", offset, ": ", what));
}

}  // namespace

absl::StatusOr<IndexedDatasetIndex> ReadIndex(const std::string& idx_path) {
  // Regular files only: an .idx that is a FIFO or a device (/dev/zero) is refused, not waited on
  // or read without end.
  PILEPREP_ASSIGN_OR_RETURN(std::string data,
                            internal::ReadFileToString(idx_path, internal::kRegularFileOnly));
  const size_t size = data.size();
  if (size < sizeof(kIdxMagic) || std::memcmp(data.data(), kIdxMagic, sizeof(kIdxMagic)) != 0) {
    return Bad(idx_path, 0, "bad magic: not a Megatron index (expected \"MMIDIDX\\0\\0\")");
  }
  if (size < kIdxHeaderBytes) {
    return Bad(idx_path, size,
               absl::StrCat("file ends inside the ", kIdxHeaderBytes, "-byte header"));
  }
  const uint64_t version = Load<uint64_t>(data, kIdxVersionOffset);
  if (version != kIdxVersion) {
    return Bad(idx_path, kIdxVersionOffset,
               absl::StrCat("version ", version, ", expected ", kIdxVersion));
  }
  const uint8_t code = Load<uint8_t>(data, kIdxDTypeOffset);
  if (code != static_cast<uint8_t>(TokenDType::kInt32) &&
      code != static_cast<uint8_t>(TokenDType::kUint16)) {
    return Bad(idx_path, kIdxDTypeOffset,
               absl::StrCat("dtype code ", code,
                            " is not a token dtype (expected 4 = int32 or 8 = uint16)"));
  }
  const uint64_t num_sequences = Load<uint64_t>(data, kIdxSequenceCountOffset);
  const uint64_t num_doc_indices = Load<uint64_t>(data, kIdxDocumentCountOffset);
  // Bound the counts by the file size first, so that the size arithmetic cannot overflow.
  const uint64_t body = size - kIdxHeaderBytes;
  if (num_sequences > body / 12 || num_doc_indices > body / 8 ||
      12 * num_sequences + 8 * num_doc_indices != body) {
    return Bad(
        idx_path, kIdxSequenceCountOffset,
        absl::StrCat("the header declares ", num_sequences, " sequences and ", num_doc_indices,
                     " document indices (", kIdxHeaderBytes, " + 12*", num_sequences, " + 8*",
                     num_doc_indices, " bytes) but the file has ", size, " bytes"));
  }

  IndexedDatasetIndex index;
  index.dtype = static_cast<TokenDType>(code);
  index.sequence_lengths.resize(num_sequences);
  index.sequence_pointers.resize(num_sequences);
  index.document_indices.resize(num_doc_indices);
  size_t offset = kIdxHeaderBytes;
  // Copies only what there is: an empty vector's data() may be null, and memcpy from or to null is
  // undefined even for 0 bytes (an index of no sequences).
  auto copy = [&](void* to, size_t bytes) {
    if (bytes != 0) std::memcpy(to, data.data() + offset, bytes);
    offset += bytes;
  };
  copy(index.sequence_lengths.data(), 4 * num_sequences);
  copy(index.sequence_pointers.data(), 8 * num_sequences);
  copy(index.document_indices.data(), 8 * num_doc_indices);
  return index;
}

}  // namespace pileprep
