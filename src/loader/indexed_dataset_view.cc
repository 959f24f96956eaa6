#include "pileprep/indexed_dataset_view.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "loader/npy.h"
#include "pileprep/status_macros.h"

namespace pileprep {
namespace {

using internal::ErrnoStatus;
using internal::WithErrno;

// An open, mapped, read-only file; unmapped and closed on destruction unless released.
struct Mapping {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  ~Mapping() {
    if (data != nullptr) munmap(const_cast<uint8_t*>(data), size);
  }
};

absl::Status MapFile(const std::string& path, Mapping* mapping) {
  // O_NONBLOCK: a FIFO named like the dataset is refused below instead of waited on for ever (a
  // training job's open would hang); it changes nothing for the regular file that is mapped.
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return ErrnoStatus(errno, path, "open");
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return ErrnoStatus(err, path, "stat");
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    absl::Status not_regular =
        absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
    // A directory is what open() refuses for reading in Python (IsADirectoryError): its errno goes
    // with the status; the code is the core reader's for anything not a regular file.
    if (S_ISDIR(st.st_mode)) return WithErrno(std::move(not_regular), EISDIR);
    return not_regular;
  }
  mapping->size = static_cast<uint64_t>(st.st_size);
  if (mapping->size > 0) {
    void* p = mmap(nullptr, mapping->size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      close(fd);
      return ErrnoStatus(err, path, "mmap");
    }
    mapping->data = static_cast<const uint8_t*>(p);
  }
  close(fd);  // the mapping keeps the file
  return absl::OkStatus();
}

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // unaligned: never cast the pointer
  return v;
}

}  // namespace

std::optional<int> ErrnoOf(const absl::Status& status) {
  const auto payload = status.GetPayload(internal::kErrnoPayload);  // absl::optional
  int err = 0;
  if (!payload || !absl::SimpleAtoi(std::string(*payload), &err)) return std::nullopt;
  return err;
}

IndexedDatasetView::~IndexedDatasetView() {
  if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), bin_bytes_);
  if (idx_ != nullptr) munmap(const_cast<uint8_t*>(idx_), idx_bytes_);
}

absl::StatusOr<std::shared_ptr<const IndexedDatasetView>> IndexedDatasetView::Open(
    const std::string& prefix, IndexedDatasetViewOptions options) {
  if (prefix.empty()) return absl::InvalidArgumentError("IndexedDatasetView: empty prefix");
  // A path stops at its first NUL for open(): another file than the one named would be read.
  if (prefix.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("IndexedDatasetView: embedded null byte in the prefix");
  }
  const std::string idx_path = prefix + ".idx";
  const std::string bin_path = prefix + ".bin";
  std::shared_ptr<IndexedDatasetView> view(new IndexedDatasetView());
  view->prefix_ = prefix;

  Mapping idx;
  PILEPREP_RETURN_IF_ERROR(MapFile(idx_path, &idx));
  auto bad = [&](uint64_t offset, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(idx_path, ": byte ", offset, ": ", what));
  };
  if (idx.size < kIdxHeaderBytes) {
    return bad(idx.size, absl::StrCat("file of ", idx.size, " bytes is shorter than the ",
                                      kIdxHeaderBytes, "-byte header"));
  }
  if (std::memcmp(idx.data, kIdxMagic, sizeof(kIdxMagic)) != 0) {
    return bad(0, "bad magic (expected \"MMIDIDX\\0\\0\": not a Megatron .idx)");
  }
  uint64_t version = Load<uint64_t>(idx.data + kIdxVersionOffset);
  if (version != kIdxVersion) {
    return bad(kIdxVersionOffset, absl::StrCat("version ", version, " (expected 1)"));
  }
  uint8_t code = idx.data[kIdxDTypeOffset];
  if (code == static_cast<uint8_t>(TokenDType::kUint16)) {
    view->dtype_ = TokenDType::kUint16;
    view->itemsize_ = 2;
  } else if (code == static_cast<uint8_t>(TokenDType::kInt32)) {
    view->dtype_ = TokenDType::kInt32;
    view->itemsize_ = 4;
  } else {
    return bad(kIdxDTypeOffset,
               absl::StrCat("dtype code ", code,
                            " is not a token dtype (expected 4 = int32 or 8 = uint16)"));
  }
  const uint64_t s_count = Load<uint64_t>(idx.data + kIdxSequenceCountOffset);
  const uint64_t d_count = Load<uint64_t>(idx.data + kIdxDocumentCountOffset);
  const uint64_t body = idx.size - kIdxHeaderBytes;
  // Division keeps the check free of overflow for absurd counts.
  if (s_count > body / 12 || d_count > (body - 12 * s_count) / 8) {
    return bad(kIdxSequenceCountOffset,
               absl::StrCat("counts (", s_count, " sequences, ", d_count,
                            " document indices) need more bytes than the file's ", idx.size));
  }
  if (d_count < 1) return bad(kIdxDocumentCountOffset, "document index count is 0 (expected >= 1)");
  const uint8_t* lengths = idx.data + kIdxHeaderBytes;
  view->num_sequences_ = static_cast<int64_t>(s_count);
  view->lengths_ = lengths;
  view->pointers_ = lengths + 4 * s_count;
  view->documents_ = view->pointers_ + 8 * s_count;
  view->num_documents_ = static_cast<int64_t>(d_count) - 1;
  view->idx_ = idx.data;  // owned by the view now
  view->idx_bytes_ = idx.size;
  idx.data = nullptr;

  Mapping bin;
  PILEPREP_RETURN_IF_ERROR(MapFile(bin_path, &bin));
  const int64_t item = static_cast<int64_t>(view->itemsize_);
  const uint64_t lengths_offset = kIdxHeaderBytes;
  const uint64_t pointers_offset = kIdxHeaderBytes + 4 * s_count;
  int64_t total = 0;
  for (size_t i = 0; i < s_count; ++i) {
    const int64_t len = view->sequence_length(static_cast<int64_t>(i));
    const int64_t ptr = view->sequence_pointer(static_cast<int64_t>(i));
    if (len < 0) {
      return absl::InvalidArgumentError(absl::StrCat(idx_path, ": byte ", lengths_offset + 4 * i,
                                                     ": sequence ", i, " has length ", len));
    }
    if (ptr >= 0 && ptr % item != 0) {  // inside the file or not, tokens would be read askew
      return absl::InvalidArgumentError(
          absl::StrCat(idx_path, ": byte ", pointers_offset + 8 * i, ": sequence ", i, " (pointer ",
                       ptr, ") does not start at a token: the pointer is not a multiple of the ",
                       item, "-byte token size"));
    }
    if (ptr < 0 || static_cast<uint64_t>(ptr) > bin.size ||
        static_cast<uint64_t>(len * item) > bin.size - static_cast<uint64_t>(ptr)) {
      return absl::InvalidArgumentError(absl::StrCat(
          idx_path, ": byte ", pointers_offset + 8 * i, ": sequence ", i, " (pointer ", ptr,
          ", ", len, " tokens of ", item, " bytes) is not inside ", bin_path, " (", bin.size,
          " bytes)"));
    }
    total += len;
  }
  const uint64_t docs_offset = pointers_offset + 8 * s_count;
  int64_t prev = 0;
  for (size_t i = 0; i < d_count; ++i) {
    const int64_t d = view->document_index(static_cast<int64_t>(i));
    if ((i == 0 && d != 0) || d < prev || d > view->num_sequences()) {
      return absl::InvalidArgumentError(absl::StrCat(
          idx_path, ": byte ", docs_offset + 8 * i, ": document index ", i, " = ", d,
          i == 0 ? " (expected 0)" : absl::StrCat(" (expected ", prev, "..", view->num_sequences(), ")")));
    }
    prev = d;
  }
  if (prev != view->num_sequences()) {
    // Megatron's reader asserts it (sequence_lengths.shape[0] == document_indices[-1]).
    return absl::InvalidArgumentError(absl::StrCat(
        idx_path, ": byte ", docs_offset + 8 * (d_count - 1), ": the last document index is ", prev,
        ", but there are ", view->num_sequences(), " sequences (Megatron refuses this index)"));
  }
  view->num_tokens_ = total;
  view->bin_bytes_ = bin.size;
  view->data_ = bin.data;
  bin.data = nullptr;  // owned by the view now
  if (options.advise_random && view->data_ != nullptr) {
    madvise(const_cast<uint8_t*>(view->data_), view->bin_bytes_, MADV_RANDOM);
  }
  return std::shared_ptr<const IndexedDatasetView>(std::move(view));
}

bool IndexedDatasetView::CopyTokens(int64_t i, int64_t offset, int64_t count, int64_t* out) const {
  int64_t length = 0;
  const uint8_t* data = CheckedSequenceData(i, &length);
  if (data == nullptr || offset < 0 || count < 0 || offset > length || count > length - offset) {
    return false;
  }
  if (dtype_ == TokenDType::kUint16) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(data) + offset;
    for (int64_t k = 0; k < count; ++k) out[k] = p[k];
  } else {
    const int32_t* p = reinterpret_cast<const int32_t*>(data) + offset;
    for (int64_t k = 0; k < count; ++k) out[k] = p[k];
  }
  return true;
}

}  // namespace pileprep
