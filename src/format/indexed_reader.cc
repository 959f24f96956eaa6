#include "pileprep/indexed_reader.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "format/mapped_file.h"
#include "pileprep/status_macros.h"

namespace pileprep {

static_assert(std::endian::native == std::endian::little, "pileprep reads host-order arrays");

namespace {

using internal::LoadUnaligned;

}  // namespace

struct IndexedDatasetReader::Storage {
  internal::MappedFile idx, bin;
};

IndexedDatasetReader::~IndexedDatasetReader() = default;

absl::StatusOr<std::unique_ptr<IndexedDatasetReader>> IndexedDatasetReader::Open(
    const std::string& prefix) {
  auto storage = std::make_unique<Storage>();
  PILEPREP_ASSIGN_OR_RETURN(storage->idx, internal::MappedFile::Open(prefix + ".idx"));
  PILEPREP_ASSIGN_OR_RETURN(
      storage->bin, internal::MappedFile::Open(prefix + ".bin", internal::MappedFile::Access::kRandom));
  std::unique_ptr<IndexedDatasetReader> reader(new IndexedDatasetReader());
  reader->prefix_ = prefix;
  reader->idx_ = storage->idx.view();
  reader->bin_ = storage->bin.view();
  reader->storage_ = std::move(storage);
  PILEPREP_RETURN_IF_ERROR(reader->Parse());
  return reader;
}

absl::StatusOr<std::unique_ptr<IndexedDatasetReader>> IndexedDatasetReader::FromBuffers(
    std::string_view idx, std::string_view bin, const std::string& prefix) {
  std::unique_ptr<IndexedDatasetReader> reader(new IndexedDatasetReader());
  reader->prefix_ = prefix;
  reader->idx_ = idx;
  reader->bin_ = bin;
  PILEPREP_RETURN_IF_ERROR(reader->Parse());
  return reader;
}

absl::Status IndexedDatasetReader::Parse() {
  const std::string path = prefix_ + ".idx";
  auto bad = [&](size_t offset, const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": byte ", offset, ": ", what));
  };
  const size_t size = idx_.size();
  if (size < sizeof(kIdxMagic) || std::memcmp(idx_.data(), kIdxMagic, sizeof(kIdxMagic)) != 0) {
    return bad(0, "bad magic: not a Megatron index (expected \"MMIDIDX\\0\\0\")");
  }
  if (size < kIdxHeaderBytes) {
    return bad(size, absl::StrCat("file ends inside the ", kIdxHeaderBytes, "-byte header"));
  }
  const uint64_t version = LoadUnaligned<uint64_t>(idx_.data() + kIdxVersionOffset);
  if (version != kIdxVersion) {
    return bad(kIdxVersionOffset, absl::StrCat("version ", version, ", expected ", kIdxVersion));
  }
  const uint8_t code = LoadUnaligned<uint8_t>(idx_.data() + kIdxDTypeOffset);
  if (code != static_cast<uint8_t>(TokenDType::kInt32) &&
      code != static_cast<uint8_t>(TokenDType::kUint16)) {
    return bad(kIdxDTypeOffset,
               absl::StrCat("dtype code ", code,
                            " is not a token dtype (expected 4 = int32 or 8 = uint16)"));
  }
  dtype_ = static_cast<TokenDType>(code);
  num_sequences_ = LoadUnaligned<uint64_t>(idx_.data() + kIdxSequenceCountOffset);
  num_doc_indices_ = LoadUnaligned<uint64_t>(idx_.data() + kIdxDocumentCountOffset);
  const uint64_t body = size - kIdxHeaderBytes;
  if (num_sequences_ > body / 12 || num_doc_indices_ > body / 8 ||
      12 * num_sequences_ + 8 * num_doc_indices_ != body) {
    return bad(kIdxSequenceCountOffset,
               absl::StrCat("the header declares ", num_sequences_, " sequences and ",
                            num_doc_indices_, " document indices (", kIdxHeaderBytes, " + 12*",
                            num_sequences_, " + 8*", num_doc_indices_,
                            " bytes) but the file has ", size, " bytes"));
  }
  return absl::OkStatus();
}

std::string_view IndexedDatasetReader::lengths_bytes() const {
  return idx_.substr(kIdxHeaderBytes, 4 * num_sequences_);
}
std::string_view IndexedDatasetReader::pointers_bytes() const {
  return idx_.substr(kIdxHeaderBytes + 4 * num_sequences_, 8 * num_sequences_);
}
std::string_view IndexedDatasetReader::document_indices_bytes() const {
  return idx_.substr(kIdxHeaderBytes + 12 * num_sequences_, 8 * num_doc_indices_);
}

int32_t IndexedDatasetReader::sequence_length(uint64_t i) const {
  if (i >= num_sequences_) return 0;
  return LoadUnaligned<int32_t>(idx_.data() + kIdxHeaderBytes + 4 * i);
}
int64_t IndexedDatasetReader::sequence_pointer(uint64_t i) const {
  if (i >= num_sequences_) return 0;
  return LoadUnaligned<int64_t>(idx_.data() + kIdxHeaderBytes + 4 * num_sequences_ + 8 * i);
}
int64_t IndexedDatasetReader::document_index(uint64_t j) const {
  if (j >= num_doc_indices_) return 0;
  return LoadUnaligned<int64_t>(idx_.data() + kIdxHeaderBytes + 12 * num_sequences_ + 8 * j);
}

absl::Status IndexedDatasetReader::SequenceBytes(uint64_t i, const char** data,
                                                 uint64_t* length) const {
  if (i >= num_sequences_) {
    return absl::InvalidArgumentError(absl::StrCat(prefix_, ": sequence ", i,
                                                   " does not exist (the dataset has ",
                                                   num_sequences_, " sequences)"));
  }
  const int32_t len = sequence_length(i);
  const int64_t pointer = sequence_pointer(i);
  if (len < 0 || pointer < 0 || static_cast<uint64_t>(pointer) > bin_.size() ||
      static_cast<uint64_t>(len) * itemsize() > bin_.size() - static_cast<uint64_t>(pointer)) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix_, ".bin: sequence ", i, " (", len, " tokens at byte ", pointer,
        ") does not lie within the ", bin_.size(), "-byte .bin; run `pileprep validate` on it"));
  }
  *data = bin_.data() + pointer;
  *length = static_cast<uint64_t>(len);
  return absl::OkStatus();
}

void IndexedDatasetReader::DecodeTokens(const char* p, size_t count,
                                        std::vector<uint32_t>* tokens) const {
  tokens->resize(count);
  if (dtype_ == TokenDType::kUint16) {
    for (size_t k = 0; k < count; ++k) (*tokens)[k] = LoadUnaligned<uint16_t>(p + 2 * k);
  } else {
    for (size_t k = 0; k < count; ++k) {
      (*tokens)[k] = static_cast<uint32_t>(LoadUnaligned<int32_t>(p + 4 * k));
    }
  }
}

absl::Status IndexedDatasetReader::ReadSequence(uint64_t i, std::vector<uint32_t>* tokens) const {
  tokens->clear();
  const char* data;
  uint64_t length;
  PILEPREP_RETURN_IF_ERROR(SequenceBytes(i, &data, &length));
  DecodeTokens(data, static_cast<size_t>(length), tokens);
  return absl::OkStatus();
}

absl::Status IndexedDatasetReader::ReadDocumentInChunks(
    uint64_t d, size_t max_tokens,
    absl::FunctionRef<absl::Status(const std::vector<uint32_t>&)> fn) const {
  if (d + 1 >= num_doc_indices_ || d >= num_doc_indices_) {
    return absl::InvalidArgumentError(absl::StrCat(prefix_, ": document ", d,
                                                   " does not exist (the dataset has ",
                                                   num_documents(), " documents)"));
  }
  const int64_t first = document_index(d);
  const int64_t last = document_index(d + 1);
  if (first < 0 || last < first || static_cast<uint64_t>(last) > num_sequences_) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix_, ".idx: document ", d, " spans sequences ", first, "..", last,
                     ", not within 0..", num_sequences_, "; run `pileprep validate` on it"));
  }
  max_tokens = std::max<size_t>(max_tokens, 1);
  std::vector<uint32_t> chunk;
  // The .bin's pages are released behind the reading (only where it is a file mapping: Open), so
  // that reading a document of gigabytes keeps RSS flat (mapped pages count in it: `inspect --doc`
  // of a 450 MB document peaked at 441 MB). A document's sequences lie one after another; where a
  // corrupt index points back, nothing behind is released until the reading passes it again.
  std::optional<internal::MappedFile::ReleaseBehind> behind;
  for (int64_t i = first; i < last; ++i) {
    const char* data;
    uint64_t length;
    PILEPREP_RETURN_IF_ERROR(SequenceBytes(static_cast<uint64_t>(i), &data, &length));
    const size_t at = static_cast<size_t>(data - bin_.data());
    if (!behind) behind.emplace(bin_, at, storage_ != nullptr);
    for (uint64_t done = 0; done < length;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(length - done, max_tokens));
      DecodeTokens(data + done * itemsize(), n, &chunk);
      PILEPREP_RETURN_IF_ERROR(fn(chunk));
      done += n;
      behind->At(at + static_cast<size_t>(done) * itemsize());
    }
  }
  return absl::OkStatus();
}

absl::Status IndexedDatasetReader::ReadDocument(uint64_t d, std::vector<uint32_t>* tokens) const {
  tokens->clear();
  return ReadDocumentInChunks(d, size_t{1} << 20, [tokens](const std::vector<uint32_t>& chunk) {
    tokens->insert(tokens->end(), chunk.begin(), chunk.end());
    return absl::OkStatus();
  });
}

namespace {

// A file name as Python's os.listdir gives it, as code points: UTF-8 decoded strictly (no
// surrogates, no overlong forms, nothing past U+10FFFF), each byte that does not decode taken as
// U+DC00 + byte (the surrogateescape error handler). Python's sorted() of the names is the order
// of these sequences; a byte order differs from it only where a name is not valid UTF-8 (a byte
// 0x80..0xFF that does not decode sorts as U+DC80..U+DCFF, below U+E000..U+FFFF and the
// supplementary planes).
std::vector<uint32_t> PythonFsDecode(std::string_view name) {
  std::vector<uint32_t> out;
  const auto* b = reinterpret_cast<const unsigned char*>(name.data());
  const size_t n = name.size();
  auto cont = [&](size_t i, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return i < n && b[i] >= lo && b[i] <= hi;
  };
  for (size_t i = 0; i < n;) {
    const unsigned char c = b[i];
    if (c < 0x80) {
      out.push_back(c);
      ++i;
    } else if (c >= 0xC2 && c <= 0xDF && cont(i + 1)) {
      out.push_back((uint32_t{c} & 0x1F) << 6 | (b[i + 1] & 0x3F));
      i += 2;
    } else if (c >= 0xE0 && c <= 0xEF &&
               cont(i + 1, c == 0xE0 ? 0xA0 : 0x80, c == 0xED ? 0x9F : 0xBF) && cont(i + 2)) {
      out.push_back((uint32_t{c} & 0x0F) << 12 | (b[i + 1] & 0x3F) << 6 | (b[i + 2] & 0x3F));
      i += 3;
    } else if (c >= 0xF0 && c <= 0xF4 &&
               cont(i + 1, c == 0xF0 ? 0x90 : 0x80, c == 0xF4 ? 0x8F : 0xBF) && cont(i + 2) &&
               cont(i + 3)) {
      out.push_back((uint32_t{c} & 0x07) << 18 | (b[i + 1] & 0x3F) << 12 | (b[i + 2] & 0x3F) << 6 |
                    (b[i + 3] & 0x3F));
      i += 4;
    } else {
      // The bytes of a maximal invalid subsequence each escape alone; a byte after its first is a
      // continuation byte, which never starts a character, so one at a time gives the same.
      out.push_back(0xDC00 + c);
      ++i;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> FindDatasetPrefixes(const std::string& dir,
                                                             std::vector<std::string>* unpaired) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(dir, ": cannot list: ", ec.message()));
  std::set<std::string> idx, bin;
  std::set<std::string> directories;  // named like half of a dataset: said where a half is missing
  // A read error part way through sets `ec` and ends the iteration like the last entry: it is
  // checked after the loop, or a merge or validate would go on with part of the directory.
  // Every entry named like half of a dataset counts but a directory (which Megatron's
  // merge_datasets.py skips too): a dangling symlink (a shard on storage that is not mounted) or a
  // FIFO then fails where it is opened, named, where Megatron's skips it unseen (a merge went on
  // without the shard, and validate passed).
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_directory(type_ec)) {
      directories.insert(it->path().filename().string());
      continue;
    }
    const std::string name = it->path().filename().string();
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".idx") == 0) {
      idx.insert(name.substr(0, name.size() - 4));
    } else if (name.size() > 4 && name.compare(name.size() - 4, 4, ".bin") == 0) {
      bin.insert(name.substr(0, name.size() - 4));
    }
  }
  if (ec) return absl::UnavailableError(absl::StrCat(dir, ": cannot list: ", ec.message()));
  std::vector<std::string> prefixes;
  const std::string base = (dir.empty() || dir.back() == '/') ? dir : dir + "/";
  // "d/b.idx has no b.bin beside it" where `ls` shows a b.bin: say what it is.
  auto if_directory = [&](const std::string& file) {
    return directories.count(file) ? absl::StrCat(" (", base, file, " is a directory)")
                                   : std::string();
  };
  // Python's order of the names (merge_datasets.py: sorted() of os.listdir's str names).
  std::vector<std::pair<std::vector<uint32_t>, std::string>> names;
  for (const std::string& name : idx) names.emplace_back(PythonFsDecode(name), name);
  std::sort(names.begin(), names.end());
  for (const auto& [decoded, name] : names) {
    if (!bin.count(name)) {
      if (unpaired == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(
            base, name, ".idx has no ", name, ".bin beside it", if_directory(name + ".bin")));
      }
      unpaired->push_back(base + name + ".idx");
      continue;
    }
    prefixes.push_back(base + name);
  }
  for (const std::string& name : bin) {
    if (!idx.count(name)) {
      if (unpaired == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(
            base, name, ".bin has no ", name, ".idx beside it", if_directory(name + ".idx")));
      }
      unpaired->push_back(base + name + ".bin");
    }
  }
  if (unpaired != nullptr) std::sort(unpaired->begin(), unpaired->end());
  return prefixes;
}

}  // namespace pileprep
