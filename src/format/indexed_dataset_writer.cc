#include <bit>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "format/file_util.h"
#include "pileprep/indexed_dataset.h"
#include "pileprep/status_macros.h"

namespace pileprep {

// The .bin and .idx are little-endian; tokens and array entries are copied in host order.
static_assert(std::endian::native == std::endian::little, "pileprep writes host-order arrays");

using internal::BufferedFileWriter;

// The four temporaries. Destroying it closes the descriptors but removes nothing.
class IndexedDatasetWriter::Files {
 public:
  explicit Files(const std::string& prefix)
      : bin_tmp(absl::StrCat(prefix, ".bin", kIndexedDatasetTempSuffix)),
        idx_tmp(absl::StrCat(prefix, ".idx", kIndexedDatasetTempSuffix)),
        lengths_tmp(absl::StrCat(prefix, ".lengths", kIndexedDatasetTempSuffix)),
        docidx_tmp(absl::StrCat(prefix, ".docidx", kIndexedDatasetTempSuffix)) {}

  // Closes everything and unlinks every temporary; best effort (this runs on error paths).
  void RemoveAll() {
    bin.reset();
    idx.reset();
    lengths.reset();
    docidx.reset();
    for (const std::string* path : {&bin_tmp, &idx_tmp, &lengths_tmp, &docidx_tmp}) {
      internal::RemoveFileIfExists(*path).IgnoreError();
    }
  }

  const std::string bin_tmp, idx_tmp, lengths_tmp, docidx_tmp;
  std::unique_ptr<BufferedFileWriter> bin, idx, lengths, docidx;
};

namespace {

constexpr size_t kMinBufferBytes = 8;

// Streams the spill file `path` to `sink`, one chunk at a time; returns the bytes read.
// `chunk_bytes` is a multiple of `unit`, so every chunk but the last holds whole entries.
template <typename Sink>
absl::StatusOr<uint64_t> StreamFile(const std::string& path, char* chunk, size_t chunk_bytes,
                                    Sink&& sink) {
  PILEPREP_ASSIGN_OR_RETURN(internal::UniqueFd fd, internal::OpenForRead(path));
  uint64_t total = 0;
  while (true) {
    PILEPREP_ASSIGN_OR_RETURN(size_t n,
                              internal::ReadFull(fd.get(), chunk, chunk_bytes, path, total));
    if (n == 0) break;
    PILEPREP_RETURN_IF_ERROR(sink(chunk, n));
    total += n;
    if (n < chunk_bytes) break;
  }
  return total;
}

}  // namespace

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, IndexedDatasetWriterOptions options)
    : prefix_(std::move(prefix)), options_(options), files_(std::make_unique<Files>(prefix_)) {}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (!closed_) Abort();
}

absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> IndexedDatasetWriter::Create(
    std::string prefix, IndexedDatasetWriterOptions options) {
  if (prefix.empty() || prefix.back() == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("indexed dataset prefix '", prefix, "' has no file name"));
  }
  if (options.dtype != TokenDType::kUint16 && options.dtype != TokenDType::kInt32) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, ": dtype code ", static_cast<int>(options.dtype), " is not a token dtype"));
  }
  if (options.buffer_bytes < kMinBufferBytes || options.spill_buffer_bytes < kMinBufferBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, ": buffer_bytes and spill_buffer_bytes must be at least ", kMinBufferBytes));
  }
  std::unique_ptr<IndexedDatasetWriter> writer(
      new IndexedDatasetWriter(std::move(prefix), options));
  Files& f = *writer->files_;
  absl::Status status = [&]() -> absl::Status {
    PILEPREP_ASSIGN_OR_RETURN(
        f.bin, BufferedFileWriter::Open(f.bin_tmp, options.buffer_bytes, options.direct_io));
    if (options.sync) f.bin->SetEarlyWriteback(uint64_t{32} << 20);
    PILEPREP_ASSIGN_OR_RETURN(f.lengths,
                              BufferedFileWriter::Open(f.lengths_tmp, options.spill_buffer_bytes));
    PILEPREP_ASSIGN_OR_RETURN(f.docidx,
                              BufferedFileWriter::Open(f.docidx_tmp, options.spill_buffer_bytes));
    return absl::OkStatus();
  }();
  if (!status.ok()) {
    f.RemoveAll();
    writer->closed_ = true;
    return status;
  }
  return writer;
}

absl::Status IndexedDatasetWriter::CheckUsable() const {
  if (!error_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(prefix_, ": indexed dataset writer failed earlier: ", error_.message()));
  }
  if (closed_ || prepared_) {
    return absl::FailedPreconditionError(
        absl::StrCat(prefix_, ": indexed dataset writer already ",
                     prepared_ ? "prepared" : "finished or aborted"));
  }
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::Fail(absl::Status status) {
  error_ = status;
  closed_ = true;
  files_->RemoveAll();
  return status;
}

void IndexedDatasetWriter::Abort() {
  if (closed_ && error_.ok()) return;  // finished (or aborted) already: nothing of ours remains
  closed_ = true;
  prepared_ = false;  // nothing left to publish
  files_->RemoveAll();
}

absl::Status IndexedDatasetWriter::WriteTokens(absl::Span<const uint32_t> tokens) {
  // Validate the whole document before writing any of it: a fast max, and a scan only on failure.
  const uint32_t limit = options_.dtype == TokenDType::kUint16
                             ? std::numeric_limits<uint16_t>::max()
                             : static_cast<uint32_t>(std::numeric_limits<int32_t>::max());
  uint32_t max_token = 0;
  for (uint32_t t : tokens) max_token = t > max_token ? t : max_token;
  if (max_token > limit) {
    size_t pos = 0;
    while (tokens[pos] <= limit) ++pos;
    return absl::InvalidArgumentError(
        absl::StrCat(bin_path(), ": document ", num_documents_, " (0-based): token ", tokens[pos],
                     " at position ", pos, " does not fit ", DTypeName(options_.dtype)));
  }

  BufferedFileWriter& bin = *files_->bin;
  if (options_.dtype == TokenDType::kInt32) {
    // Ids below 2^31 have the same bytes as uint32 and int32.
    return bin.Append(tokens.data(), tokens.size() * sizeof(uint32_t));
  }
  // uint16: narrow straight into the write buffer.
  size_t done = 0;
  while (done < tokens.size()) {
    size_t room = bin.available() / sizeof(uint16_t);
    if (room == 0) {
      PILEPREP_RETURN_IF_ERROR(bin.Flush());
      continue;
    }
    size_t n = std::min(room, tokens.size() - done);
    char* out = bin.cursor();
    const uint32_t* in = tokens.data() + done;
    for (size_t i = 0; i < n; ++i) {
      uint16_t v = static_cast<uint16_t>(in[i]);
      std::memcpy(out + i * sizeof(uint16_t), &v, sizeof(v));
    }
    bin.Commit(n * sizeof(uint16_t));
    done += n;
  }
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::WriteTokens(absl::Span<const uint16_t> tokens) {
  if (options_.dtype == TokenDType::kUint16) {
    return files_->bin->Append(tokens.data(), tokens.size() * sizeof(uint16_t));
  }
  // int32: widen in blocks (every 16-bit id fits).
  uint32_t wide[4096];
  for (size_t done = 0; done < tokens.size();) {
    const size_t n = std::min(std::size(wide), tokens.size() - done);
    std::copy(tokens.begin() + done, tokens.begin() + done + n, wide);
    PILEPREP_RETURN_IF_ERROR(files_->bin->Append(wide, n * sizeof(uint32_t)));
    done += n;
  }
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::AddDocument(absl::Span<const uint32_t> tokens) {
  return AddOneSequence(tokens);
}

absl::Status IndexedDatasetWriter::AddDocument16(absl::Span<const uint16_t> tokens) {
  return AddOneSequence(tokens);
}

template <typename Id>
absl::Status IndexedDatasetWriter::AddOneSequence(absl::Span<const Id> tokens) {
  PILEPREP_RETURN_IF_ERROR(CheckUsable());
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat(bin_path(), ": document ", num_documents_, " (0-based): ", tokens.size(),
                     " tokens do not fit an int32 sequence length")));
  }
  if (tokens.empty()) return AddTokens(tokens, {});
  const int32_t length = static_cast<int32_t>(tokens.size());
  return AddTokens(tokens, absl::MakeConstSpan(&length, 1));
}

absl::Status IndexedDatasetWriter::AddDocument(absl::Span<const uint32_t> tokens,
                                               absl::Span<const int32_t> sequence_lengths) {
  return AddTokens(tokens, sequence_lengths);
}

template <typename Id>
absl::Status IndexedDatasetWriter::AddTokens(absl::Span<const Id> tokens,
                                             absl::Span<const int32_t> sequence_lengths) {
  PILEPREP_RETURN_IF_ERROR(CheckUsable());
  uint64_t sum = 0;
  for (size_t i = 0; i < sequence_lengths.size(); ++i) {
    if (sequence_lengths[i] <= 0) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          bin_path(), ": document ", num_documents_, " (0-based): sequence ", i, " has length ",
          sequence_lengths[i], " (sequences must hold at least one token)")));
    }
    sum += static_cast<uint64_t>(sequence_lengths[i]);
  }
  if (sum != tokens.size()) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        bin_path(), ": document ", num_documents_, " (0-based): sequence lengths sum to ", sum,
        " but the document has ", tokens.size(), " tokens")));
  }
  absl::Status status = [&]() -> absl::Status {
    PILEPREP_RETURN_IF_ERROR(WriteTokens(tokens));
    PILEPREP_RETURN_IF_ERROR(files_->lengths->Append(sequence_lengths.data(),
                                                     sequence_lengths.size() * sizeof(int32_t)));
    const int64_t end = static_cast<int64_t>(num_sequences_ + sequence_lengths.size());
    return files_->docidx->AppendValue(end);
  }();
  if (!status.ok()) return Fail(std::move(status));
  num_tokens_ += tokens.size();
  num_sequences_ += sequence_lengths.size();
  ++num_documents_;
  return absl::OkStatus();
}

absl::StatusOr<IndexedDatasetWriter::Result> IndexedDatasetWriter::Finish() {
  PILEPREP_ASSIGN_OR_RETURN(Result prepared, Prepare());
  if (!prepared_) return prepared;  // no tokens: nothing to publish
  return Publish();
}

std::string IndexedDatasetWriter::bin_temp_path() const { return files_->bin_tmp; }
std::string IndexedDatasetWriter::idx_temp_path() const { return files_->idx_tmp; }

absl::StatusOr<IndexedDatasetWriter::Result> IndexedDatasetWriter::Prepare() {
  PILEPREP_RETURN_IF_ERROR(CheckUsable());
  Result result;
  result.num_tokens = num_tokens_;
  result.num_sequences = num_sequences_;
  result.num_documents = num_documents_;
  if (num_tokens_ == 0) {
    // No reader can mmap an empty .bin: publish nothing.
    closed_ = true;
    files_->RemoveAll();
    return result;
  }
  absl::StatusOr<Result> prepared = PrepareImpl();
  if (!prepared.ok()) return Fail(prepared.status());
  prepared_ = true;
  prepared_result_ = *prepared;
  return prepared;
}

absl::StatusOr<IndexedDatasetWriter::Result> IndexedDatasetWriter::PrepareImpl() {
  Files& f = *files_;
  const uint64_t itemsize = DTypeSize(options_.dtype);

  if (options_.sync) PILEPREP_RETURN_IF_ERROR(f.bin->Sync());
  PILEPREP_RETURN_IF_ERROR(f.bin->Close());
  const uint64_t bin_bytes = f.bin->bytes();
  PILEPREP_RETURN_IF_ERROR(f.lengths->Close());
  PILEPREP_RETURN_IF_ERROR(f.docidx->Close());
  if (bin_bytes != num_tokens_ * itemsize) {
    return absl::InternalError(
        absl::StrCat(f.bin_tmp, ": wrote ", bin_bytes, " bytes for ", num_tokens_, " tokens"));
  }

  // The .idx, assembled from the spill files a chunk at a time (Megatron's _IndexWriter.write
  // order).
  PILEPREP_ASSIGN_OR_RETURN(f.idx,
                            BufferedFileWriter::Open(f.idx_tmp, options_.spill_buffer_bytes));
  BufferedFileWriter& idx = *f.idx;
  PILEPREP_RETURN_IF_ERROR(idx.Append(kIdxMagic, sizeof(kIdxMagic)));
  PILEPREP_RETURN_IF_ERROR(idx.AppendValue(kIdxVersion));
  PILEPREP_RETURN_IF_ERROR(idx.AppendValue(static_cast<uint8_t>(options_.dtype)));
  PILEPREP_RETURN_IF_ERROR(idx.AppendValue(static_cast<uint64_t>(num_sequences_)));
  PILEPREP_RETURN_IF_ERROR(idx.AppendValue(static_cast<uint64_t>(num_documents_ + 1)));

  // A multiple of 8 bytes, so chunks of either spill file hold whole entries.
  const size_t chunk_bytes = std::max<size_t>(8, options_.spill_buffer_bytes & ~size_t{7});
  std::unique_ptr<char[]> chunk(new char[chunk_bytes]);

  PILEPREP_ASSIGN_OR_RETURN(
      uint64_t lengths_bytes,
      StreamFile(f.lengths_tmp, chunk.get(), chunk_bytes,
                 [&](const char* data, size_t n) { return idx.Append(data, n); }));
  uint64_t pointer = 0;
  uint64_t tokens_seen = 0;
  PILEPREP_RETURN_IF_ERROR(
      StreamFile(f.lengths_tmp, chunk.get(), chunk_bytes,
                 [&](const char* data, size_t n) -> absl::Status {
                   for (size_t i = 0; i + sizeof(int32_t) <= n; i += sizeof(int32_t)) {
                     int32_t length;
                     std::memcpy(&length, data + i, sizeof(length));
                     PILEPREP_RETURN_IF_ERROR(idx.AppendValue(static_cast<int64_t>(pointer)));
                     pointer += static_cast<uint64_t>(length) * itemsize;
                     tokens_seen += static_cast<uint64_t>(length);
                   }
                   return absl::OkStatus();
                 })
          .status());
  PILEPREP_RETURN_IF_ERROR(idx.AppendValue(int64_t{0}));
  PILEPREP_ASSIGN_OR_RETURN(
      uint64_t docidx_bytes,
      StreamFile(f.docidx_tmp, chunk.get(), chunk_bytes,
                 [&](const char* data, size_t n) { return idx.Append(data, n); }));
  if (lengths_bytes != num_sequences_ * sizeof(int32_t) || tokens_seen != num_tokens_ ||
      docidx_bytes != num_documents_ * sizeof(int64_t)) {
    return absl::InternalError(absl::StrCat(prefix_, ": spill files disagree with the counts (",
                                            lengths_bytes, " length bytes, ", docidx_bytes,
                                            " document index bytes)"));
  }
  if (options_.sync) PILEPREP_RETURN_IF_ERROR(idx.Sync());
  PILEPREP_RETURN_IF_ERROR(idx.Close());
  const uint64_t idx_bytes = idx.bytes();
  chunk.reset();
  PILEPREP_RETURN_IF_ERROR(internal::RemoveFileIfExists(f.lengths_tmp));
  PILEPREP_RETURN_IF_ERROR(internal::RemoveFileIfExists(f.docidx_tmp));

  Result result;
  result.num_tokens = num_tokens_;
  result.num_sequences = num_sequences_;
  result.num_documents = num_documents_;
  result.bin_bytes = bin_bytes;
  result.idx_bytes = idx_bytes;
  return result;
}

absl::StatusOr<IndexedDatasetWriter::Result> IndexedDatasetWriter::Publish() {
  if (!error_.ok() || !prepared_ || closed_) {
    return absl::FailedPreconditionError(absl::StrCat(
        prefix_, ": indexed dataset writer ",
        !error_.ok() ? absl::StrCat("failed earlier: ", error_.message())
                     : std::string(closed_ ? "already finished or aborted" : "not prepared")));
  }
  prepared_ = false;
  absl::Status status = PublishImpl();
  if (!status.ok()) return Fail(std::move(status));
  closed_ = true;
  Result result = prepared_result_;
  result.published = true;
  return result;
}

absl::Status IndexedDatasetWriter::PublishImpl() {
  // A failed writer publishes nothing, not half a dataset.
  return internal::PublishDataset(files_->bin_tmp, files_->idx_tmp, prefix_, options_.sync);
}

}  // namespace pileprep
