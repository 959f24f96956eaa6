#include "pileprep/merge.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "format/file_util.h"
#include "format/mapped_file.h"
#include "pileprep/indexed_reader.h"
#include "pileprep/status_macros.h"
#include "pileprep/validate.h"

namespace pileprep {

static_assert(std::endian::native == std::endian::little, "pileprep writes host-order arrays");

namespace {

using internal::BufferedFileWriter;

bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

const char* CodeText(TokenDType dtype) {
  return dtype == TokenDType::kUint16 ? "uint16 (code 8)" : "int32 (code 4)";
}

// Removes the temporaries unless released (error paths).
class TempFiles {
 public:
  explicit TempFiles(const std::string& output_prefix)
      : bin(absl::StrCat(output_prefix, ".bin", kIndexedDatasetTempSuffix)),
        idx(absl::StrCat(output_prefix, ".idx", kIndexedDatasetTempSuffix)) {}
  ~TempFiles() {
    if (armed_) {
      internal::RemoveFileIfExists(bin).IgnoreError();
      internal::RemoveFileIfExists(idx).IgnoreError();
    }
  }
  void Release() { armed_ = false; }
  const std::string bin, idx;

 private:
  bool armed_ = true;
};

// What pass 1 saw of a file, to tell on every later pass whether it is still the same one.
struct Seen {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const Seen&) const = default;
};

Seen SeenOf(const struct stat& st) {
  return Seen{st.st_dev, st.st_ino, st.st_size,
              static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

absl::Status Changed(const std::string& path, const std::string& what) {
  return absl::FailedPreconditionError(
      absl::StrCat(path, ": changed while it was being merged (", what,
                   "); nothing was published: merge again once the inputs stay as they are"));
}

// `st` (fstat of an open descriptor, or stat of the path) against what pass 1 saw of `path`.
absl::Status CheckSame(const std::string& path, const Seen& before, const struct stat& st) {
  const Seen now = SeenOf(st);
  if (now.dev != before.dev || now.ino != before.ino) return Changed(path, "another file now");
  if (now.size != before.size) {
    return Changed(path, absl::StrCat(before.size, " bytes, now ", now.size));
  }
  if (now.mtime_ns != before.mtime_ns) return Changed(path, "written to");
  return absl::OkStatus();
}

using internal::MappedFile;
using ReleaseBehind = MappedFile::ReleaseBehind;
// Releases the pages of the reader's .idx (a file mapping: IndexedDatasetReader::Open) behind a
// scan of `array` (one of its arrays): merge's RSS then does not grow with an input's index (mapped
// pages count in it). At(i): the scan has read the array up to its byte i.
class Behind {
 public:
  Behind(const IndexedDatasetReader& reader, std::string_view array)
      : at_(static_cast<size_t>(array.data() - reader.idx_bytes().data())),
        behind_(reader.idx_bytes(), at_) {}
  void At(size_t i) { behind_.At(at_ + i); }

 private:
  size_t at_;  // the array's offset in the .idx
  ReleaseBehind behind_;
};

absl::Status CheckSamePath(const std::string& path, const Seen& before) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    // Only a file not there is gone; another failure (EACCES, EIO, ESTALE) is named as it is.
    const int err = errno;
    return err == ENOENT ? Changed(path, "gone") : internal::ErrnoError(err, path, "stat");
  }
  return CheckSame(path, before, st);
}

}  // namespace

absl::StatusOr<MergeResult> MergeDatasets(const std::vector<std::string>& inputs,
                                          const std::string& output_prefix,
                                          const MergeOptions& options) {
  if (inputs.empty()) return absl::InvalidArgumentError("merge: no input datasets");
  if (output_prefix.empty() || output_prefix.back() == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("merge: output prefix \"", output_prefix,
                     "\" names no file (P.bin and P.idx are written; P must not end in '/')"));
  }
  const size_t block = std::max<size_t>(options.buffer_bytes & ~size_t{7}, 8);
  // Polled per input and per block copied: a merge of hundreds of GB stops within one block, and
  // its temporaries go with the TempFiles below.
  auto cancelled = [&] { return options.cancel != nullptr && options.cancel->load(); };
  auto cancelled_error = [&] {
    return absl::CancelledError(absl::StrCat(output_prefix, ": cancelled"));
  };

  // Pass 1: check every input and count. Only the counts are kept, never the arrays.
  MergeResult result;
  // A few dozen bytes per input: flat enough.
  std::vector<uint64_t> sequences(inputs.size()), documents(inputs.size());
  std::vector<uint64_t> bin_sizes(inputs.size());
  std::vector<Seen> seen_idx(inputs.size()), seen_bin(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (cancelled()) return cancelled_error();
    const std::string& prefix = inputs[k];
    if (prefix == output_prefix || SameFile(prefix + ".bin", output_prefix + ".bin") ||
        SameFile(prefix + ".idx", output_prefix + ".idx")) {
      return absl::InvalidArgumentError(
          absl::StrCat("merge: the output ", output_prefix, " is also an input (", prefix, ")"));
    }
    // Each file is stat'ed before and after it is opened and mapped: the later passes check
    // against what pass 1 saw, so pass 1 must have seen the file it mapped. One stat after the
    // open alone would record a file renamed over the path meanwhile, and the later passes would
    // read its lengths and pointers unchecked (--no-validate) as the file pass 1 counted.
    Seen before[2];
    for (int f = 0; f < 2; ++f) {
      const std::string path = prefix + (f == 0 ? ".idx" : ".bin");
      struct stat st;
      if (::stat(path.c_str(), &st) == 0) before[f] = SeenOf(st);  // else Open names the error
    }
    PILEPREP_ASSIGN_OR_RETURN(auto reader, IndexedDatasetReader::Open(prefix));
    for (int f = 0; f < 2; ++f) {
      const std::string path = prefix + (f == 0 ? ".idx" : ".bin");
      Seen& seen = f == 0 ? seen_idx[k] : seen_bin[k];
      struct stat st;
      if (::stat(path.c_str(), &st) != 0) return Changed(path, "gone");
      seen = SeenOf(st);
      if (seen != before[f]) return Changed(path, "replaced as it was opened");
    }
    // And the mappings are of the sizes seen.
    if (static_cast<uint64_t>(seen_bin[k].size) != reader->bin_bytes().size() ||
        static_cast<uint64_t>(seen_idx[k].size) != reader->idx_bytes().size()) {
      return Changed(prefix, "replaced as it was opened");
    }
    if (k == 0) {
      result.dtype = reader->dtype();
    } else if (reader->dtype() != result.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, ".idx: dtype ", CodeText(reader->dtype()), " but ", inputs[0], ".idx is ",
          CodeText(result.dtype),
          ": all inputs of a merge must share one dtype (datasets tokenized with different "
          "vocabularies cannot be merged); re-tokenize one side"));
    }
    if (options.validate_inputs) {
      ValidateOptions vo;
      vo.check_tokens = false;
      vo.check_holes = !options.allow_holes;
      PILEPREP_ASSIGN_OR_RETURN(ValidationReport report, ValidateDataset(prefix, vo));
      // An input with no tokens cannot be produced by any writer, but merging it is harmless.
      const Violation* v = report.violations.empty() ? nullptr : &report.violations.front();
      if (v != nullptr && !(report.violations.size() == 1 && v->kind == "empty_dataset")) {
        return absl::FailedPreconditionError(absl::StrCat(
            "merge: input ", prefix, " is not sound (run `pileprep validate` on it): ", v->message,
            v->kind == "hole" ? " (merge --allow-holes takes such inputs)" : ""));
      }
    }
    // Checked here, before any .bin is copied, and even without validate_inputs: a pair whose
    // lengths do not cover its .bin (an EOD written but not counted, a .bin of another dataset)
    // would shift every later input.
    {
      const std::string_view lengths = reader->lengths_bytes();
      uint64_t input_tokens = 0;
      Behind behind(*reader, lengths);
      for (size_t i = 0; i < lengths.size(); i += sizeof(int32_t)) {
        behind.At(i);
        int32_t length;
        std::memcpy(&length, lengths.data() + i, sizeof(length));
        if (length < 0) {
          return absl::FailedPreconditionError(absl::StrCat(
              prefix, ".idx: sequence ", i / sizeof(int32_t), " has length ", length,
              ": not a sound dataset (run `pileprep validate` on it); nothing was published"));
        }
        input_tokens += static_cast<uint64_t>(length);
      }
      const uint64_t itemsize_k = DTypeSize(reader->dtype());
      if (input_tokens * itemsize_k != reader->bin_bytes().size()) {
        return absl::FailedPreconditionError(absl::StrCat(
            prefix, ": its .idx lengths add up to ", input_tokens, " tokens (",
            input_tokens * itemsize_k, " bytes) but its .bin has ", reader->bin_bytes().size(),
            " bytes: the pair does not belong together (run `pileprep validate` on it); "
            "nothing was published"));
      }
    }
    // Also without validate_inputs: the output's document_indices are the inputs' shifted, so
    // an input's that do not start at 0, go back or end short of its sequence count would make an
    // output that Megatron's reader refuses (and a value near 2^63 would overflow the shift).
    {
      const std::string_view doc = reader->document_indices_bytes();
      const size_t count = doc.size() / sizeof(int64_t);
      int64_t previous = 0;
      Behind behind(*reader, doc);
      for (size_t j = 0; j < count; ++j) {
        behind.At(j * sizeof(int64_t));
        int64_t value;
        std::memcpy(&value, doc.data() + j * sizeof(int64_t), sizeof(value));
        const bool wrong =
            j == 0 ? value != 0
                   : value < previous || static_cast<uint64_t>(value) > reader->num_sequences();
        if (wrong) {
          return absl::FailedPreconditionError(absl::StrCat(
              prefix, ".idx: document index ", j, " is ", value,
              j == 0 ? " (the first must be 0)"
                     : absl::StrCat(" (after ", previous, ", of ", reader->num_sequences(),
                                    " sequences)"),
              ": not a sound dataset (run `pileprep validate` on it); nothing was published"));
        }
        previous = value;
      }
      // A document count of 0 leaves no document_indices at all (not even the leading 0): said so,
      // as validate says it, rather than as indices that "end at 0, not at 0".
      if (count == 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            prefix, ".idx: byte ", kIdxDocumentCountOffset,
            ": document count 0: document_indices must hold at least its "
            "leading 0: not a sound dataset (run `pileprep validate` on it); nothing was "
            "published"));
      }
      if (static_cast<uint64_t>(previous) != reader->num_sequences()) {
        return absl::FailedPreconditionError(absl::StrCat(
            prefix, ".idx: its document indices end at ", previous, ", not at its ",
            reader->num_sequences(),
            " sequences: not a sound dataset (run `pileprep validate` on it); nothing was "
            "published"));
      }
    }
    sequences[k] = reader->num_sequences();
    documents[k] = reader->num_documents();
    bin_sizes[k] = reader->bin_bytes().size();
    result.sequences += reader->num_sequences();
    result.documents += reader->num_documents();
    result.bin_bytes += reader->bin_bytes().size();
    ++result.inputs;
  }
  const size_t itemsize = DTypeSize(result.dtype);
  if (result.bin_bytes == 0) return result;  // nothing to publish (no reader opens an empty .bin)

  TempFiles temps(output_prefix);
  // Pass 2: the .bin, block by block; appends larger than the writer's buffer go straight through.
  // Read with read(2), not through the reader's mapping: that is opened for random access
  // (MADV_RANDOM), under which every 4 KiB page of a cold 43 GB shard would be a read of its own,
  // with no readahead; and a file cut short while it is copied is an error here, not SIGBUS.
  {
    PILEPREP_ASSIGN_OR_RETURN(auto bin, BufferedFileWriter::Open(temps.bin, 1 << 16));
    std::vector<char> buffer(block);
    for (size_t k = 0; k < inputs.size(); ++k) {
      const std::string path = inputs[k] + ".bin";
      PILEPREP_ASSIGN_OR_RETURN(internal::UniqueFd fd, internal::OpenForRead(path));
      struct stat st;
      if (::fstat(fd.get(), &st) != 0) return internal::ErrnoError(errno, path, "stat");
      PILEPREP_RETURN_IF_ERROR(CheckSame(path, seen_bin[k], st));
      ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);  // advice: a failure changes nothing
      uint64_t copied = 0;
      while (true) {
        PILEPREP_ASSIGN_OR_RETURN(const size_t n, internal::ReadFull(fd.get(), buffer.data(),
                                                                     buffer.size(), path, copied));
        if (n == 0) break;
        if (cancelled()) return cancelled_error();
        copied += n;
        if (copied > bin_sizes[k]) {
          return Changed(path, absl::StrCat(bin_sizes[k], " bytes, now more"));
        }
        PILEPREP_RETURN_IF_ERROR(bin->Append(buffer.data(), n));
      }
      if (copied != bin_sizes[k]) {
        return Changed(path, absl::StrCat(bin_sizes[k], " bytes, now ", copied));
      }
      // Written to in place while copied: same size, another modification time.
      if (::fstat(fd.get(), &st) != 0) return internal::ErrnoError(errno, path, "stat");
      PILEPREP_RETURN_IF_ERROR(CheckSame(path, seen_bin[k], st));
    }
    if (options.sync) PILEPREP_RETURN_IF_ERROR(bin->Sync());
    PILEPREP_RETURN_IF_ERROR(bin->Close());
  }

  // Each later pass maps an input's .idx again: it must be the file pass 1 counted.
  auto reopen = [&](size_t k) -> absl::StatusOr<std::unique_ptr<IndexedDatasetReader>> {
    PILEPREP_ASSIGN_OR_RETURN(auto reader, IndexedDatasetReader::Open(inputs[k]));
    PILEPREP_RETURN_IF_ERROR(CheckSamePath(inputs[k] + ".idx", seen_idx[k]));
    if (reader->num_sequences() != sequences[k] || reader->num_documents() != documents[k]) {
      return Changed(inputs[k] + ".idx", "other counts");
    }
    return reader;
  };
  // Passes 3-5: the .idx in Megatron's order: header, lengths, pointers, document indices.
  {
    PILEPREP_ASSIGN_OR_RETURN(auto idx, BufferedFileWriter::Open(temps.idx, block));
    PILEPREP_RETURN_IF_ERROR(idx->Append(kIdxMagic, sizeof(kIdxMagic)));
    PILEPREP_RETURN_IF_ERROR(idx->AppendValue(kIdxVersion));
    PILEPREP_RETURN_IF_ERROR(idx->AppendValue(static_cast<uint8_t>(result.dtype)));
    PILEPREP_RETURN_IF_ERROR(idx->AppendValue(result.sequences));
    PILEPREP_RETURN_IF_ERROR(idx->AppendValue(result.documents + 1));
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (cancelled()) return cancelled_error();
      PILEPREP_ASSIGN_OR_RETURN(auto reader, reopen(k));
      const std::string_view lengths = reader->lengths_bytes();
      Behind behind(*reader, lengths);
      for (size_t i = 0; i < lengths.size(); i += MappedFile::kReleaseStep) {
        const size_t n = std::min(MappedFile::kReleaseStep, lengths.size() - i);
        PILEPREP_RETURN_IF_ERROR(idx->Append(lengths.data() + i, n));
        behind.At(i + n);
      }
    }
    uint64_t pointer = 0;
    uint64_t tokens = 0;
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (cancelled()) return cancelled_error();
      PILEPREP_ASSIGN_OR_RETURN(auto reader, reopen(k));
      const std::string_view lengths = reader->lengths_bytes();
      Behind behind(*reader, lengths);
      for (size_t i = 0; i < lengths.size(); i += sizeof(int32_t)) {
        behind.At(i);
        int32_t length;  // not negative: pass 1 checked the file, and it is the same file
        std::memcpy(&length, lengths.data() + i, sizeof(length));
        PILEPREP_RETURN_IF_ERROR(idx->AppendValue(static_cast<int64_t>(pointer)));
        pointer += static_cast<uint64_t>(length) * itemsize;
        tokens += static_cast<uint64_t>(length);
      }
    }
    result.tokens = tokens;
    PILEPREP_RETURN_IF_ERROR(idx->AppendValue(int64_t{0}));
    uint64_t before = 0;  // sequences of the inputs before this one
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (cancelled()) return cancelled_error();
      PILEPREP_ASSIGN_OR_RETURN(auto reader, reopen(k));
      const std::string_view doc = reader->document_indices_bytes();
      Behind behind(*reader, doc);
      for (size_t j = sizeof(int64_t); j < doc.size(); j += sizeof(int64_t)) {
        behind.At(j);
        int64_t value;
        std::memcpy(&value, doc.data() + j, sizeof(value));
        // In 0..sequences[k] (pass 1), so the sum does not overflow.
        PILEPREP_RETURN_IF_ERROR(idx->AppendValue(static_cast<int64_t>(value + before)));
      }
      before += sequences[k];
    }
    if (options.sync) PILEPREP_RETURN_IF_ERROR(idx->Sync());
    PILEPREP_RETURN_IF_ERROR(idx->Close());
    result.idx_bytes = idx->bytes();
  }

  if (cancelled()) return cancelled_error();
  if (options.before_publish) PILEPREP_RETURN_IF_ERROR(options.before_publish());
  // Each pass checked an input's .idx before reading it, so a write during the last pass (the
  // document indices) went unseen: the merged index was published with another file's last
  // document index, exit 0. Checked once more now that nothing more is read.
  for (size_t k = 0; k < inputs.size(); ++k) {
    PILEPREP_RETURN_IF_ERROR(CheckSamePath(inputs[k] + ".idx", seen_idx[k]));
  }
  // Published as IndexedDatasetWriter publishes (internal::PublishDataset).
  PILEPREP_RETURN_IF_ERROR(
      internal::PublishDataset(temps.bin, temps.idx, output_prefix, options.sync));
  temps.Release();
  result.published = true;
  return result;
}

}  // namespace pileprep
