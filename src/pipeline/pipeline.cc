#include "pileprep/pipeline.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <system_error>
#include <thread>
#include <type_traits>
#include <unordered_set>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "format/file_util.h"
#include "oneapi/tbb/info.h"
#include "oneapi/tbb/parallel_pipeline.h"
#include "oneapi/tbb/task_arena.h"
#include "pileprep/status_macros.h"
#include "pipeline/read_ahead.h"
#include "pipeline/thread_arena.h"
#include "tokenizer/huge_page_array.h"

namespace pileprep {
namespace {

size_t PageSize() {
  static const size_t page = [] {
    const long n = ::sysconf(_SC_PAGESIZE);
    return n > 0 ? static_cast<size_t>(n) : size_t{4096};
  }();
  return page;
}

class FileSource final : public ByteSource {
 public:
  // `size`: the file's size when it is a regular file, else -1. `map`: View() maps a regular file.
  FileSource(int fd, std::string name, int64_t size, const FileSourceOptions& options)
      : fd_(fd),
        name_(std::move(name)),
        size_(size),
        map_failed_(!options.map),
        readahead_(size > 0 ? options.readahead_bytes : 0),
        cancel_(options.cancel) {}
  ~FileSource() override {
    if (map_ != nullptr) ::munmap(const_cast<char*>(map_), map_bytes_);
    ::close(fd_);
  }
  // A regular file is read up to the size fstat saw at open, as a mapping of it would be: bytes
  // appended later are not read, and an end of file before that size is an error, not a shorter
  // input (another process truncated the file while it was read). A size of 0 says nothing (a
  // /proc file has content all the same): such a file is read to its end.
  absl::StatusOr<size_t> Read(char* buffer, size_t capacity) override {
    if (size_ > 0) capacity = std::min<uint64_t>(capacity, static_cast<uint64_t>(size_) - read_);
    if (capacity == 0) return 0;
    ReadAhead();
    while (true) {
      if (size_ < 0) PILEPREP_RETURN_IF_ERROR(WaitReadable());
      const ssize_t n = ::read(fd_, buffer, capacity);
      if (n > 0) {
        read_ += static_cast<uint64_t>(n);
        return static_cast<size_t>(n);
      }
      if (n == 0) {
        if (size_ > 0) {
          struct stat st;
          const int64_t now = ::fstat(fd_, &st) == 0 ? st.st_size : static_cast<int64_t>(read_);
          return absl::DataLossError(absl::StrCat(name_, ": the file shrank from ", size_, " to ",
                                                  now, " bytes while it was being read"));
        }
        return 0;
      }
      // EAGAIN: a FIFO (opened non-blocking, OpenFileSource) whose poll woke with nothing to read.
      if (errno == EINTR || (size_ < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) continue;
      return absl::DataLossError(absl::StrCat(name_, ": read error: ", std::strerror(errno)));
    }
  }
  int64_t size_hint() const override { return size_; }
  const std::string& name() const override { return name_; }
  void Interrupt() override { interrupted_.store(true, std::memory_order_relaxed); }

  // Mapped on first use: a source read with Read() (a .jsonl.zst: its compressed bytes are copied
  // once, into the decoder) never maps. The size is the one fstat saw at open; bytes appended
  // later are not read.
  std::optional<std::string_view> View() override {
    if (map_ == nullptr && size_ > 0 && !map_failed_) {
      // The file, then one page that cannot be read: a read past the bytes a caller may read (the
      // file, and the zeros that fill its last page) faults at once instead of reading whatever
      // mapping the kernel happened to place there.
      const size_t page = PageSize();
      map_bytes_ = (static_cast<size_t>(size_) + page - 1) / page * page + page;
      void* area = ::mmap(nullptr, map_bytes_, PROT_NONE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      void* p = area == MAP_FAILED ? MAP_FAILED
                                   : ::mmap(area, static_cast<size_t>(size_), PROT_READ,
                                            MAP_SHARED | MAP_FIXED, fd_, 0);
      if (p == MAP_FAILED) {
        if (area != MAP_FAILED) ::munmap(area, map_bytes_);
        map_failed_ = true;  // a file system without mmap: Read() still works
      } else {
        map_ = static_cast<const char*>(p);
        // Advice: read ahead, drop behind.
        ::madvise(p, static_cast<size_t>(size_), MADV_SEQUENTIAL);
      }
    }
    if (map_ == nullptr) return std::nullopt;
    return std::string_view(map_, static_cast<size_t>(size_));
  }
  // The zeros that fill the mapping's last page (the guard page after it faults).
  size_t ViewSlack() const override {
    const size_t page = PageSize();
    return map_ == nullptr ? 0 : (page - static_cast<size_t>(size_) % page) % page;
  }

  // One madvise per batch (a few where its last line is long) fills its page-table entries (rather
  // than a fault per 64 KiB), reads what is not cached yet, and fails, rather than leaving a SIGBUS
  // for a worker, where the file has shrunk since it was mapped.
  absl::Status Fetch(size_t from, size_t to) override {
#ifdef MADV_POPULATE_READ
    if (map_ == nullptr || from >= to || populate_unsupported_) return absl::OkStatus();
    const size_t start = from / PageSize() * PageSize();
    while (::madvise(const_cast<char*>(map_) + start, to - start, MADV_POPULATE_READ) != 0) {
      const int err = errno;
      if (err == EINTR) continue;  // only with a fatal signal pending: that ends the loop
      if (err == EINVAL) {  // a kernel before 5.14: the bytes fault in as they are read
        populate_unsupported_ = true;
        return absl::OkStatus();
      }
      struct stat st;
      if (err == EFAULT && ::fstat(fd_, &st) == 0 && st.st_size < size_) {
        return absl::DataLossError(absl::StrCat(name_, ": the file shrank from ", size_, " to ",
                                                st.st_size, " bytes while it was being read"));
      }
      // EFAULT on a file that did not shrink: the pages could not be read (an I/O error).
      return absl::DataLossError(absl::StrCat(name_, ": read error in bytes ", from, "..", to, ": ",
                                              err == EFAULT ? "I/O error" : std::strerror(err)));
    }
#else
    (void)from;
    (void)to;
#endif
    return absl::OkStatus();
  }

  // In steps of 32 MiB: each madvise of a range other threads have used makes the kernel flush
  // their TLBs (an interrupt per core, costly in a VM).
  void Release(size_t offset) override {
    const size_t upto = std::min(offset, static_cast<size_t>(std::max<int64_t>(size_, 0))) /
                        PageSize() * PageSize();
    if (map_ == nullptr || upto < released_ + kReleaseStep) return;
    ::madvise(const_cast<char*>(map_) + released_, upto - released_, MADV_DONTNEED);
    released_ = upto;
  }

 private:
  // Asks for the bytes NextReadAhead says (read_ahead.h). WILLNEED starts the reads of what is not
  // cached and returns without waiting for them (it may wait to submit them); over cached pages it
  // only looks them up.
  void ReadAhead() {
    const internal::ReadAheadRange r = internal::NextReadAhead(
        read_, advised_, static_cast<uint64_t>(std::max<int64_t>(size_, 0)), readahead_);
    if (r.from >= r.to) return;
#ifdef POSIX_FADV_WILLNEED
    ::posix_fadvise(fd_, static_cast<off_t>(r.from), static_cast<off_t>(r.to - r.from),
                    POSIX_FADV_WILLNEED);  // advice: a failure only leaves the kernel's readahead
#endif
    advised_ = r.to;
  }

  static constexpr size_t kReleaseStep = size_t{32} << 20;
  int fd_;
  std::string name_;
  int64_t size_;
  const char* map_ = nullptr;
  size_t map_bytes_ = 0;  // the file's pages and the guard page
  bool map_failed_;       // or not asked for: View() gives nullopt
  bool populate_unsupported_ = false;
  size_t released_ = 0;
  uint64_t read_ = 0;  // bytes returned by Read
  const uint64_t readahead_;  // FileSourceOptions::readahead_bytes; 0 for a pipe
  uint64_t advised_ = 0;      // bytes before this have been advised WILLNEED
  const std::atomic<bool>* const cancel_;  // FileSourceOptions::cancel
  std::atomic<bool> interrupted_{false};

  // A pipe (`--input <(zstdcat ...)`, a FIFO) whose writer stalls would hold read(2) until it
  // writes or closes: a signal's stop waited for it (read restarts after the handler), and so
  // did a failed run's other stages. The wait is polled instead, a tenth of a second at a time.
  absl::Status WaitReadable() {
    while (true) {
      if (interrupted_.load(std::memory_order_relaxed) ||
          (cancel_ != nullptr && cancel_->load(std::memory_order_relaxed))) {
        return absl::CancelledError(absl::StrCat(name_, ": cancelled"));
      }
      struct pollfd p = {fd_, POLLIN, 0};
      const int ready = ::poll(&p, 1, 100);
      if (ready > 0 || (ready < 0 && errno != EINTR)) return absl::OkStatus();  // read(2) says
    }
  }
};

// A batch's buffers are mappings of their own with transparent huge pages (HugePageArray), kept
// for the next batch (BatchPool): a 2 MB page is one page fault where 4 KB pages are 512, and a
// fault is costly in a VM (on this project's, a PVM guest, ~10 us for a 4 KB page; malloc's 4 KB
// pages for these buffers made 8,000 of a 600 MB job's 16,000 faults), and a few TLB entries cover
// all of a buffer. Neither kind of buffer is filled by anything but its data.

// Bytes of whole lines, with room for JsonRecordParser::kPadding bytes after the end, which Pad()
// zeroes so that every line can be parsed where it lies.
class LineBuffer {
 public:
  size_t size() const { return size_; }
  std::string_view view() const { return std::string_view(bytes_.data(), size_); }
  void Reserve(size_t n) {
    if (n <= capacity()) return;
    bytes_.Grow(n + JsonRecordParser::kPadding);  // keeps the bytes (moved, from 1 MB on)
  }
  // Makes n more bytes, not yet written, and returns them. Growth doubles, but not past
  // growth_limit (unless n needs it): a batch with a line near max_line_bytes (4 GiB by default)
  // would otherwise double to 8 GiB (every page touched) just before the line is refused.
  char* Extend(size_t n) {
    if (size_ + n > capacity()) {
      Reserve(std::max(size_ + n, std::min(2 * capacity(), growth_limit_)));
    }
    char* at = bytes_.data() + size_;
    size_ += n;
    return at;
  }
  void Append(std::string_view b) {
    if (!b.empty()) std::memcpy(Extend(b.size()), b.data(), b.size());
  }
  void Truncate(size_t n) { size_ = n; }  // n <= size()
  void set_growth_limit(size_t n) { growth_limit_ = n; }
  // Bytes that fit before the padding: the whole mapping but kPadding.
  size_t capacity() const {
    return bytes_.capacity() > JsonRecordParser::kPadding
               ? bytes_.capacity() - JsonRecordParser::kPadding
               : 0;
  }
  void Pad() {
    if (bytes_.data() != nullptr) std::memset(bytes_.data() + size_, 0, JsonRecordParser::kPadding);
  }

 private:
  internal::HugePageArray<char> bytes_;
  size_t size_ = 0;
  size_t growth_limit_ = SIZE_MAX;
};

// A batch's ids (Gpt2Tokenizer::EncodeTo writes straight into it).
template <typename Id>
class IdBuffer {
 public:
  size_t size() const { return size_; }
  const Id* data() const { return ids_.data(); }
  // Room for n more ids after size(); returns where they go.
  Id* Room(size_t n) {
    if (size_ + n > ids_.capacity()) {
      ids_.Grow(std::max(size_ + n, 2 * ids_.capacity()));  // keeps the ids (moved, from 1 MB on)
    }
    return ids_.data() + size_;
  }
  void Grow(size_t n) { size_ += n; }  // n <= the last Room's n
  void Clear() { size_ = 0; }
  size_t capacity() const { return ids_.capacity(); }

 private:
  internal::HugePageArray<Id> ids_;
  size_t size_ = 0;
};

// One unit of parallel work: whole lines of JSON, then what the workers made of them.
struct Batch {
  // Whole lines (the last batch may end without '\n'): `bytes`, which are a part of the source's
  // View(), or `data`'s.
  std::string_view bytes;
  LineBuffer data;
  // The read stage's running totals after this batch. The in-order write stage copies them into
  // the stats, so ShardStats is only ever touched by one stage (the two serial stages run on
  // different threads at once).
  uint64_t bytes_in_total = 0;
  uint64_t bytes_decompressed_total = 0;
  // Filled by the parallel stage.
  uint64_t num_lines = 0;
  // All documents' ids, key-major within each document: 16-bit for a uint16 .bin (GPT-2; the
  // tokenizer writes them at that width and the writer copies them as they are), else 32-bit.
  IdBuffer<uint16_t> tokens16;
  IdBuffer<uint32_t> tokens;
  std::vector<uint32_t> doc_lengths;  // num_keys entries per good document
  struct Bad {
    uint64_t line_in_batch;  // 1-based
    BadRecordKind kind;
    std::string detail;
  };
  // The batch's first bad records (up to PipelineOptions::max_bad_record_reports: no later one of
  // the batch can be among the run's first that many), and how many there are in all before the
  // first line too long, if any, after which nothing is parsed. One entry per bad line held ~48
  // bytes each: 30 M blank lines made 1.1 GB with 4 workers.
  std::vector<Bad> bad;
  uint64_t bad_count = 0;
  // The line (1-based) of each bad record, up to max_bad_records + 1 of them and at most
  // kBadLinesKept (24 bytes a line where a limit of millions meets a batch of blank lines), with
  // the batch's U+FFFD repairs up to and including it: where the run's limit passes, if it is in
  // this batch, and so what the run got to (write_batch; past kBadLinesKept it parses the batch
  // again).
  static constexpr size_t kBadLinesKept = size_t{1} << 16;
  struct BadLine {
    uint32_t line;
    uint64_t replaced_invalid_utf8, replaced_lone_surrogates;
  };
  std::vector<BadLine> bad_lines;
  uint64_t replaced_invalid_utf8 = 0;
  uint64_t replaced_lone_surrogates = 0;
  // Set when the input cannot go on after the batch's lines (num_lines of them). By the read stage,
  // on the last batch it reads: the line after them grew past max_line_bytes before its end came,
  // or reading or decoding failed (then_error). By the parallel stage: the parser found the line
  // after them too long (the batch's lines after it are not parsed, a read-stage error comes later
  // in the input, and batches read after this one are dropped). The input fails there
  // (write_batch), once the batch's documents and the batches before it are written:
  // the error an input fails with is the first in the input's order, not the first in time, so it
  // does not depend on the thread count or on how far the read stage ran ahead (a bad-records
  // limit reached early in a .zst that is also damaged later fails with the first).
  bool then_line_too_long = false;
  absl::Status then_error;
  bool EndsInput() const { return then_line_too_long || !then_error.ok(); }

  // Empties the batch for reuse, keeping its buffers.
  void Clear() {
    bytes = {};
    data.Truncate(0);
    then_line_too_long = false;
    then_error = absl::OkStatus();
    bytes_in_total = bytes_decompressed_total = num_lines = 0;
    tokens16.Clear();
    tokens.Clear();
    doc_lengths.clear();
    bad.clear();
    bad_lines.clear();
    bad_count = 0;
    replaced_invalid_utf8 = replaced_lone_surrogates = 0;
  }
};

// Batches written, for the read stage to fill again with their buffers as they are. Holds at most
// as many batches as are in flight. A batch whose buffers grew past four times the usual (for lines
// of several MB: the sample corpus has documents of 2-3 MB, which double a batch's ids) is freed
// instead, so that a run of very long lines does not hold its memory for the rest of the run.
class BatchPool {
 public:
  // `usual_bytes`: a batch's bytes, and as many ids, before any growth.
  explicit BatchPool(size_t usual_bytes) : keep_(4 * usual_bytes) {}
  std::unique_ptr<Batch> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) return std::make_unique<Batch>();
    std::unique_ptr<Batch> b = std::move(free_.back());
    free_.pop_back();
    return b;
  }
  void Give(std::unique_ptr<Batch> b) {
    if (b == nullptr || b->data.capacity() > keep_ || b->tokens16.capacity() > keep_ ||
        b->tokens.capacity() > keep_) {
      return;
    }
    b->Clear();
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::move(b));
  }

 private:
  const size_t keep_;  // bytes, and ids
  std::mutex mu_;
  std::vector<std::unique_ptr<Batch>> free_;
};

// The batches handed to TBB as raw pointers, from the read stage to the write stage. A stage that
// throws cancels the pipeline, and TBB does not destroy the items it holds then: they are deleted
// with this registry. (Two locks per batch of megabytes.)
class InFlight {
 public:
  InFlight() = default;
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight() {
    for (Batch* b : held_) delete b;
  }
  Batch* Hand(std::unique_ptr<Batch> b) {
    std::lock_guard<std::mutex> lock(mu_);
    held_.insert(b.get());
    return b.release();
  }
  std::unique_ptr<Batch> Take(Batch* raw) {
    if (raw == nullptr) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    held_.erase(raw);
    return std::unique_ptr<Batch>(raw);
  }

 private:
  std::mutex mu_;
  std::unordered_set<Batch*> held_;
};

// The input's error for an exception that escaped its processing: std::bad_alloc (a buffer that
// could not grow under ulimit -v or with overcommit off) is ResourceExhausted, anything else
// Internal.
absl::Status ExceptionStatus(const ByteSource& source, const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(source.name(), ": out of memory: a buffer could not be allocated"));
  }
  return absl::InternalError(absl::StrCat(source.name(), ": ", e.what()));
}

// A worker's JSON parser and pre-token cache: its own, or one the caller keeps
// (PipelineOptions::caches).
struct Worker {
  Worker(const Gpt2Tokenizer& tokenizer, const JsonlOptions& jsonl,
         std::unique_ptr<Gpt2Tokenizer::Cache>* kept)
      : parser(jsonl) {
    std::unique_ptr<Gpt2Tokenizer::Cache>& c = kept != nullptr ? *kept : own;
    if (c == nullptr) c = std::make_unique<Gpt2Tokenizer::Cache>(tokenizer);
    cache = c.get();
  }
  JsonRecordParser parser;
  std::unique_ptr<Gpt2Tokenizer::Cache> own;
  Gpt2Tokenizer::Cache* cache;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ByteSource>> OpenFileSource(const std::string& path,
                                                           const FileSourceOptions& options) {
  // An empty path (an unset variable in the caller's code) read as ": no such file", naming
  // nothing.
  if (path.empty()) return absl::InvalidArgumentError("OpenFileSource: the path is empty");
  // O_NONBLOCK, as internal::OpenForRead opens: a FIFO is opened without waiting for its writer
  // (open(2) of one waits until a writer opens it, and restarts after a signal's handler: a
  // signal's stop waited for a writer that may never come), and Read() polls until the writer
  // writes or closes, as for a pipe whose writer stalls. Taken off again for anything else, as
  // the file itself (not an earlier stat of its path) says.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  struct stat st;
  int64_t size = -1;
  if (::fstat(fd, &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, not a file"));
    }
    if (S_ISREG(st.st_mode)) size = st.st_size;
    if (!S_ISFIFO(st.st_mode)) {
      // (Should it fail, a non-blocking read of anything but a regular file is polled first and
      // EAGAIN read again, as for a FIFO.)
      const int flags = ::fcntl(fd, F_GETFL);
      if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    }
  }
#ifdef POSIX_FADV_SEQUENTIAL
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
  return std::make_unique<FileSource>(fd, path, size, options);
}

InputFormat InputFormatForPath(const std::string& path) {
  return path.size() >= 4 && path.compare(path.size() - 4, 4, ".zst") == 0 ? InputFormat::kZstd
                                                                          : InputFormat::kPlain;
}

namespace {

absl::Status RunPipelineImpl(ByteSource& source, InputFormat format, const Gpt2Tokenizer& tokenizer,
                             const std::vector<std::string>& output_prefixes,
                             const PipelineOptions& options, ShardStats* stats_out,
                             ProgressObserver* observer) {
  const auto start = std::chrono::steady_clock::now();
  ShardStats& stats = *stats_out;
  stats = ShardStats{};
  const size_t num_keys = options.jsonl.json_keys.size();
  if (num_keys == 0) {
    return absl::InvalidArgumentError(
        "no JSON key: options.jsonl.json_keys names none (a document is the string value of each)");
  }
  if (output_prefixes.size() != num_keys) {
    return absl::InvalidArgumentError(absl::StrCat(
        output_prefixes.size(), output_prefixes.size() == 1 ? " output prefix" : " output prefixes",
        " for ", num_keys, num_keys == 1 ? " JSON key" : " JSON keys",
        ": one is needed per key, in order"));
  }
  // Two datasets under one prefix would share their temporaries: found at the end, after all the
  // work, as a missing temporary.
  for (size_t k = 0; k < num_keys; ++k) {
    for (size_t j = 0; j < k; ++j) {
      if (output_prefixes[j] == output_prefixes[k]) {
        return absl::InvalidArgumentError(
            absl::StrCat("output prefix ", output_prefixes[k], " given for two JSON keys (",
                         options.jsonl.json_keys[j], ", ", options.jsonl.json_keys[k], ")"));
      }
    }
  }
  // A read of 0 bytes is the end of the input: every input would look empty.
  if (options.read_bytes == 0 || options.batch_bytes == 0) {
    return absl::InvalidArgumentError("PipelineOptions: read_bytes and batch_bytes must be > 0");
  }
  // 0 is documented (all cores; 2 x threads + 2); a negative count was taken for it silently.
  if (options.threads < 0 || options.max_batches_in_flight < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("PipelineOptions: threads (", options.threads, ") and max_batches_in_flight (",
                     options.max_batches_in_flight, ") must be >= 0 (0: the default)"));
  }

  // Writers first: an unwritable output directory fails before any work.
  IndexedDatasetWriterOptions writer_options = options.writer;
  writer_options.dtype = DTypeForVocabSize(tokenizer.vocab_size());
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (const std::string& prefix : output_prefixes) {
    PILEPREP_ASSIGN_OR_RETURN(auto w, IndexedDatasetWriter::Create(prefix, writer_options));
    writers.push_back(std::move(w));
  }

  const bool ids16 = writer_options.dtype == TokenDType::kUint16 && tokenizer.ids_fit_16_bits();
  const int threads =
      options.threads > 0 ? options.threads : std::max(1, tbb::info::default_concurrency());
  const int in_flight =
      options.max_batches_in_flight > 0 ? options.max_batches_in_flight : 2 * threads + 2;

  ZstdDecoderOptions zstd_options = options.zstd;
  zstd_options.source_name = source.name();
  std::optional<ZstdDecoder> decoder;
  if (format == InputFormat::kZstd) decoder.emplace(zstd_options);

  // One Worker (JSON parser, 56 MiB pre-token cache) per arena slot, made when the slot first
  // works. Not one per OS thread (tbb::enumerable_thread_specific): TBB's pool threads move between
  // arenas, so with several pipelines at once, or fewer threads than cores, each pipeline would
  // in time make a Worker, and fault in a cache, for every thread in the process. Two tasks that
  // run at once never share a slot, so a slot's Worker is only ever used by one thread at a time.
  std::vector<std::unique_ptr<Worker>> workers(static_cast<size_t>(threads));
  // The caller's caches: one per slot, each touched only by its slot's worker during the run.
  if (options.caches != nullptr && options.caches->size() < workers.size()) {
    options.caches->resize(workers.size());
  }

  // State of the serial input stage. Plain input the source can View() is cut into batches where it
  // lies; everything else is read (and decoded) into each batch's buffer.
  const std::optional<std::string_view> view = decoder ? std::nullopt : source.View();
  size_t view_pos = 0;
  std::string carry;  // bytes after the last '\n' of the previous batch
  std::vector<char> read_buffer(options.read_bytes);
  // Compressed bytes of read_buffer not decoded yet: a batch takes only what fills it, whatever
  // the compression ratio (64 KiB of a stream of repeated lines can decode to gigabytes).
  std::string_view undecoded;
  // The longest line accepted (max_line_bytes as the parser clamps it), and the longest an unended
  // line may grow before its end comes: two more bytes, for the two '\r' a line may end in and not
  // count (ForEachLine takes one off with the '\n', the parser another). With one, a line of
  // max_line_bytes that ended in "\r\r\n" was refused when the read stage saw it grow and
  // accepted when the parser saw it whole, so the outcome depended on the read size (found by a
  // review of the pipeline fuzz target).
  const uint64_t max_line_bytes =
      std::min<uint64_t>(options.jsonl.max_line_bytes, JsonRecordParser::kMaxLineBytes);
  const uint64_t max_unended_line = max_line_bytes + 2;
  // A batch's bytes: batch_bytes, and room to finish the line that crosses its end; with the
  // padding, 2 MiB by default: one huge page.
  const size_t batch_reserve =
      std::max(options.batch_bytes + options.read_bytes * 16, 2 * JsonRecordParser::kPadding) -
      JsonRecordParser::kPadding;
  BatchPool pool(batch_reserve);
  InFlight in_tbb;  // after the pool: deleted first, whatever TBB left of a cancelled run
  bool input_done = false;
  uint64_t bytes_in = 0;            // read stage's totals (see Batch::bytes_in_total)
  uint64_t bytes_decompressed = 0;
  // First error wins; every stage stops doing work once it is set.
  std::mutex error_mu;
  absl::Status error;
  std::atomic<bool> failed{false};
  auto fail = [&](absl::Status s) {
    {
      std::lock_guard<std::mutex> lock(error_mu);
      if (error.ok()) error = std::move(s);
      failed.store(true, std::memory_order_relaxed);
    }
    // A read blocked on a stalled download would hold the failed input (and the stages waiting for
    // it) until the download's timeouts and retries give up: minutes.
    source.Interrupt();
  };

  auto cancelled = [&] {
    return options.cancel != nullptr && options.cancel->load(std::memory_order_relaxed);
  };
  auto fail_cancelled = [&] {
    fail(absl::CancelledError(absl::StrCat(source.name(), ": cancelled")));
  };
  // The most a batch holds: its whole lines before an unended one (up to about batch_bytes, and a
  // read past it), that line up to max_unended_line, and one more read or decoding step (at most
  // batch_bytes) before the read loop looks at the line again.
  const size_t batch_growth_limit = static_cast<size_t>(std::min<uint64_t>(
      uint64_t{batch_reserve} + max_unended_line + options.batch_bytes + options.read_bytes,
      SIZE_MAX / 2));
  // Fills `batch` with whole lines read (and decoded) from the source, carrying the bytes after
  // its last line end over to the next batch. False when the run failed (the error is set). A batch
  // left empty means the input has ended. Used by one thread at a time.
  auto fill_from_stream = [&](Batch* batch) -> bool {
    batch->data.set_growth_limit(batch_growth_limit);
    batch->data.Reserve(batch_reserve);
    batch->data.Append(carry);
    carry.clear();
    auto append = [&](std::string_view bytes) -> absl::Status {
      batch->data.Append(bytes);
      return absl::OkStatus();
    };
    // A read or decode error: the batch keeps its whole lines and ends the input with the error.
    // A line already longer than the limit before the error comes first in the input: its error
    // wins, as it would had a smaller read found it before the error (one decoding step can append
    // the line's end and then fail).
    auto end_with = [&](absl::Status s) {
      const size_t last_nl = batch->data.view().rfind('\n');
      const size_t whole = last_nl == std::string_view::npos ? 0 : last_nl + 1;
      if (batch->data.size() - whole > max_unended_line) {
        batch->then_line_too_long = true;
      } else {
        batch->then_error = std::move(s);
      }
      batch->data.Truncate(whole);
      input_done = true;
    };
    // Read until the batch is full and holds a line end, or the input ends. The line that crosses
    // batch_bytes ends the batch, however long it is (the batch grows to hold it), up to
    // max_line_bytes: past that the line cannot be parsed, and buffering the rest of it (a file
    // with no line end at all, or a small .zst that decodes to gigabytes of one line) would take
    // memory without bound before the parser said so. The batch then ends at the line's start and
    // the input fails there.
    size_t scan_from = 0;
    size_t line_from = 0;   // where the batch's unended line starts, once the limit is in sight
    size_t scanned_to = 0;  // how far line_from has been looked for (each byte looked at once)
    while (true) {
      if (batch->data.size() >= options.batch_bytes &&
          batch->data.view().find('\n', scan_from) != std::string_view::npos) {
        break;
      }
      if (batch->data.size() - line_from > max_unended_line) {
        const std::string_view added = batch->data.view().substr(scanned_to);
        if (const size_t nl = added.rfind('\n'); nl != std::string_view::npos) {
          line_from = scanned_to + nl + 1;
        }
        scanned_to = batch->data.size();
        if (batch->data.size() - line_from > max_unended_line) {
          batch->data.Truncate(line_from);
          batch->then_line_too_long = true;
          input_done = true;  // nothing after the line is read: the input fails at it
          break;
        }
      }
      scan_from = batch->data.size();
      // Another stage failed: stop reading now rather than at the end of the batch (a stalled
      // source could take long to fill it).
      if (failed.load(std::memory_order_relaxed)) return false;
      if (!undecoded.empty()) {
        // What fills the batch (a line longer than a batch: a batch's worth more at a time).
        const size_t size = batch->data.size();
        const size_t room =
            size < options.batch_bytes ? options.batch_bytes - size : options.batch_bytes;
        absl::StatusOr<size_t> took = decoder->FeedSome(undecoded, append, room);
        if (!took.ok()) {
          end_with(took.status());
          break;
        }
        undecoded.remove_prefix(*took);
        continue;
      }
      // Plain input is read straight into the batch; compressed input through the read buffer.
      const size_t at = batch->data.size();
      absl::StatusOr<size_t> n =
          decoder ? source.Read(read_buffer.data(), read_buffer.size())
                  : source.Read(batch->data.Extend(read_buffer.size()), read_buffer.size());
      if (!decoder) batch->data.Truncate(at + (n.ok() ? *n : 0));
      if (!n.ok()) {
        end_with(n.status());
        break;
      }
      if (*n == 0) {
        if (decoder) {
          if (absl::Status s = decoder->Finish(); !s.ok()) {
            end_with(std::move(s));
            break;
          }
        }
        input_done = true;
        break;
      }
      bytes_in += *n;
      if (decoder) undecoded = std::string_view(read_buffer.data(), *n);
    }
    if (!input_done) {
      const size_t last_nl = batch->data.view().rfind('\n');
      carry.assign(batch->data.view().substr(last_nl + 1));
      batch->data.Truncate(last_nl + 1);
    }
    bytes_decompressed += batch->data.size();
    batch->bytes_in_total = bytes_in;
    batch->bytes_decompressed_total = bytes_decompressed;
    batch->data.Pad();
    batch->bytes = batch->data.view();
    return true;
  };

  // zstd input is decoded on a thread of its own, up to kAheadBatches batches ahead of the read
  // stage, which then only hands them on. Decoding in the serial read stage hops from core to core
  // with the worker that runs the stage, and the matches zstd copies from its window (the last 2 MB
  // of output for zstd -3) are then read from the other core's cache: on this project's 2-core VM
  // zstd took 2.1 s of CPU for 1.2 GB of JSON lines in a 2-thread job against 1.2 s on one thread,
  // and the 2-thread job ran 7.6-10.5% faster with the decoder on its own thread (five alternating
  // rounds, 2026-12-03). Plain input is read in the read stage: read(2) is only a copy.
  // The thread's batches (one being filled, kAheadBatches ready) are in flight beyond
  // max_batches_in_flight: the shard job's peak RSS rose by 35-40 MB (to 243-268 MB on 111 MB and
  // 1 GB shards). Counting them within the limit kept the memory but gave back most of the gain.
  struct Ahead {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::unique_ptr<Batch>> ready;
    bool ended = false;  // the thread is done: input ended, the run failed or was cancelled, or stop
    bool stop = false;   // the pipeline is over: stop reading
  } ahead;
  constexpr size_t kAheadBatches = 2;
  std::thread ahead_thread;
  if (decoder && options.zstd_decode_thread) {
    try {
      ahead_thread = std::thread([&] {
        // An exception must not leave the thread (std::terminate, temporaries left behind): it
        // fails the run instead, as it would leave RunPipeline through TBB from the read stage.
        try {
          for (;;) {
            if (failed.load(std::memory_order_relaxed)) break;
            if (cancelled()) {
              fail_cancelled();
              break;
            }
            std::unique_ptr<Batch> batch = pool.Take();
            if (!fill_from_stream(batch.get()) ||
                (batch->data.size() == 0 && !batch->EndsInput())) {
              break;
            }
            const bool last = input_done;
            std::unique_lock<std::mutex> lock(ahead.mu);
            ahead.cv.wait(lock, [&] { return ahead.stop || ahead.ready.size() < kAheadBatches; });
            if (ahead.stop) break;
            ahead.ready.push_back(std::move(batch));
            ahead.cv.notify_all();
            if (last) break;
          }
        } catch (const std::bad_alloc& e) {
          fail(ExceptionStatus(source, e));  // the wording of every stage's
        } catch (const std::exception& e) {
          fail(absl::InternalError(
              absl::StrCat(source.name(), ": while reading and decoding: ", e.what())));
        }
        std::lock_guard<std::mutex> lock(ahead.mu);
        ahead.ended = true;
        ahead.cv.notify_all();
      });
    } catch (const std::exception&) {
      // No thread to be had: decode in the read stage instead, as with zstd_decode_thread off.
    }
  }
  const bool decode_ahead = ahead_thread.joinable();
  absl::Cleanup join_ahead = [&] {
    if (!ahead_thread.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(ahead.mu);
      ahead.stop = true;
      ahead.cv.notify_all();
    }
    ahead_thread.join();
  };

  auto read_batch = [&](tbb::flow_control& fc) -> Batch* {
    if (decode_ahead) {
      if (!failed.load(std::memory_order_relaxed) && cancelled()) {
        fail_cancelled();
      }
      if (failed.load(std::memory_order_relaxed)) {
        fc.stop();
        return nullptr;
      }
      std::unique_ptr<Batch> batch;
      {
        std::unique_lock<std::mutex> lock(ahead.mu);
        ahead.cv.wait(lock, [&] { return ahead.ended || !ahead.ready.empty(); });
        if (!ahead.ready.empty()) {
          batch = std::move(ahead.ready.front());
          ahead.ready.pop_front();
          ahead.cv.notify_all();
        }
      }
      if (batch == nullptr || failed.load(std::memory_order_relaxed)) {
        fc.stop();
        return nullptr;
      }
      return in_tbb.Hand(std::move(batch));
    }
    if (!input_done && !failed.load(std::memory_order_relaxed) && cancelled()) {
      fail_cancelled();
    }
    if (input_done || failed.load(std::memory_order_relaxed)) {
      fc.stop();
      return nullptr;
    }
    std::unique_ptr<Batch> batch = pool.Take();
    if (view) {
      // The batch ends at the first line end at or after batch_bytes (a longer line makes one batch
      // of its own, as below), or at the end of the input.
      const std::string_view all = *view;
      const size_t from = view_pos;
      size_t to = all.size();
      bool line_too_long = false;
      // Every byte looked at is fetched first (Fetch), so that a file that shrank fails here with
      // a status rather than with SIGBUS in the search; [from, fetched) is.
      size_t fetched = from;
      size_t failed_upto = 0;  // the end of the range whose fetch failed
      auto fetch = [&](size_t upto) -> absl::Status {
        upto = std::min(upto, all.size());
        if (upto <= fetched) return absl::OkStatus();
        absl::Status s = source.Fetch(fetched, upto);
        if (s.ok()) {
          fetched = upto;
        } else {
          failed_upto = upto;
        }
        return s;
      };
      absl::Status fetch_error;
      if (all.size() - from > options.batch_bytes) {
        // The line end is looked for within max_unended_line + 1 bytes, as a streamed input's is:
        // past them the line that crosses batch_bytes is too long whatever follows, and the
        // input fails at its start. An unbounded search read the rest of the file (up to 43 GB
        // of a shard that is one line from there on) only to fail at the same line. It goes a
        // step at a time, from 64 KiB past batch_bytes (a line of real text ends within it)
        // doubling to 64 MiB, so that a long line is fetched only about as far as its end.
        const size_t at = from + std::max<size_t>(options.batch_bytes, 1) - 1;
        const size_t window =
            static_cast<size_t>(std::min<uint64_t>(all.size() - at, max_unended_line + 1));
        const void* found = nullptr;
        for (size_t pos = at, step = size_t{64} << 10; found == nullptr && pos < at + window;
             step = std::min(step * 2, size_t{64} << 20)) {
          const size_t upto = std::min(at + window, pos + step);
          fetch_error = fetch(upto);
          if (!fetch_error.ok()) break;
          found = std::memchr(all.data() + pos, '\n', upto - pos);
          pos = upto;
        }
        if (!fetch_error.ok()) {
          // Settled below.
        } else if (found == nullptr && at + window < all.size()) {
          // (The window is whole: a shorter one ends with the input.) The batch is the whole lines
          // before that line.
          const void* before = ::memrchr(all.data() + from, '\n', at - from);
          to = before == nullptr
                   ? from
                   : static_cast<size_t>(static_cast<const char*>(before) - all.data()) + 1;
          line_too_long = true;
        } else if (found != nullptr) {
          const size_t nl = static_cast<size_t>(static_cast<const char*>(found) - all.data());
          // The batch's last line is read up to kPadding bytes past its end: a shorter rest of
          // the input joins this batch, which is then the last one (padded below where it must
          // be).
          if (all.size() - (nl + 1) >= JsonRecordParser::kPadding) to = nl + 1;
        }
      }
      // The bytes read past the batch too, so that a file that shrank fails here.
      if (fetch_error.ok()) fetch_error = fetch(to + JsonRecordParser::kPadding);
      if (!fetch_error.ok()) {
        // The file shrank (or a page could not be read). As a streamed input does with a read
        // error, the batch is its whole lines that can still be read with their padding, and the
        // input fails after them; unless the line after them is already longer than the limit in
        // what can be read: then the input fails at that line, as a streamed one would. How far
        // the file can be read is found a page at a time within the range whose fetch failed (it
        // tells only that some page of it did).
        const size_t page = PageSize();
        const size_t walk_to = failed_upto;
        while (fetched < walk_to && fetch(std::min(walk_to, (fetched / page + 1) * page)).ok()) {
        }
        const void* nl = ::memrchr(all.data() + from, '\n', fetched - from);
        const size_t line_start =
            nl == nullptr ? from
                          : static_cast<size_t>(static_cast<const char*>(nl) - all.data()) + 1;
        if (fetched - line_start > max_unended_line &&
            fetched - line_start >= JsonRecordParser::kPadding) {
          to = line_start;
          line_too_long = true;
        } else {
          const size_t whole_end = fetched - std::min(fetched - from, JsonRecordParser::kPadding);
          const void* last = ::memrchr(all.data() + from, '\n', whole_end - from);
          to = last == nullptr
                   ? from
                   : static_cast<size_t>(static_cast<const char*>(last) - all.data()) + 1;
          line_too_long = false;
          batch->then_error = std::move(fetch_error);
        }
      }
      view_pos = to;
      input_done = to == all.size() || line_too_long || !batch->then_error.ok();
      batch->then_line_too_long = line_too_long;
      bytes_in += to - from;
      bytes_decompressed += to - from;
      batch->bytes_in_total = bytes_in;
      batch->bytes_decompressed_total = bytes_decompressed;
      // Lines are parsed where they lie, reading up to kPadding bytes past their end: the next
      // line's, or after the last line what the source says may be read past the view (a mapped
      // file: the zeros that fill its last page). Where the view's rest and that slack are less
      // than kPadding, the batch is copied and padded: the last batch, or one that ends before a
      // line too long when max_line_bytes is below kPadding. (A page's zeros were taken for
      // granted before: a View() of a heap buffer, or a file of whole pages, was read past its
      // end, which the pipeline fuzz target and a review found.)
      if (all.size() - to + source.ViewSlack() < JsonRecordParser::kPadding) {
        // Copied only up to a line longer than max_line_bytes, if the batch has one: the input
        // fails at that line's start, as when it is streamed, instead of copying the line whole
        // (up to the rest of the file) only for the parser to refuse it. Each line end is looked
        // for within the limit, so such a line is not even read past it.
        size_t copy_to = to;
        for (size_t line = from; line < to;) {
          const size_t window =
              static_cast<size_t>(std::min<uint64_t>(to - line, max_unended_line + 1));
          const void* nl = std::memchr(all.data() + line, '\n', window);
          if (nl == nullptr) {
            if (to - line > max_unended_line) {
              copy_to = line;
              batch->then_line_too_long = true;
            }
            break;
          }
          line = static_cast<size_t>(static_cast<const char*>(nl) - all.data()) + 1;
        }
        batch->data.Append(all.substr(from, copy_to - from));
        batch->data.Pad();
        batch->bytes = batch->data.view();
      } else {
        batch->bytes = all.substr(from, to - from);
      }
      return in_tbb.Hand(std::move(batch));
    }
    if (!fill_from_stream(batch.get())) {
      fc.stop();
      return nullptr;
    }
    if (batch->data.size() == 0 && !batch->EndsInput()) {  // the input ended
      fc.stop();
      return nullptr;
    }
    return in_tbb.Hand(std::move(batch));
  };

  auto process_batch = [&](Batch* batch) -> Batch* {
    if (batch == nullptr || failed.load(std::memory_order_relaxed)) return batch;
    const int slot = tbb::this_task_arena::current_thread_index();
    if (slot < 0 || slot >= threads) {  // never expected: a task outside this pipeline's arena
      fail(absl::InternalError(absl::StrCat(source.name(), ": worker slot ", slot, " outside 0..",
                                            threads - 1)));
      return batch;
    }
    std::unique_ptr<Worker>& worker = workers[static_cast<size_t>(slot)];
    if (worker == nullptr) {
      worker = std::make_unique<Worker>(
          tokenizer, options.jsonl,
          options.caches != nullptr ? &(*options.caches)[static_cast<size_t>(slot)] : nullptr);
    }
    Worker& w = *worker;
    const uint64_t utf8_before = w.parser.replaced_invalid_utf8();
    const uint64_t surrogates_before = w.parser.replaced_lone_surrogates();
    uint64_t line_no = 0;  // the batch's lines parsed: those before a line too long, if any
    bool line_too_long = false;
    uint64_t too_long_replaced = 0;  // U+FFFD repairs in it (what made it too long, maybe)
    // Room for a document's ids is its worst case (one per text byte). Up front, room for
    // batch_bytes ids: about twice what a batch of real text makes (2.1 bytes per token on the
    // sample corpus), and for GPT-2's 16-bit ids one 2 MB page, where room for the whole batch's
    // worst case took two. A batch of documents that comes close to their worst case grows it.
    auto tokenize = [&](auto& tokens) {
      using Id = std::decay_t<decltype(*tokens.data())>;
      tokens.Room(options.batch_bytes);
      ForEachLine(batch->bytes, [&](std::string_view line) {
        if (line_too_long) return;  // the input fails there
        JsonRecordParser::Result r = w.parser.ParsePadded(line);
        if (!r.ok && r.kind == BadRecordKind::kLineTooLong) {
          // The lines before it count as they do when the read stage stops at the line (which
          // finds it depends on where reads end, and whether the input is mapped).
          line_too_long = true;
          too_long_replaced = r.replaced_invalid_utf8;
          return;
        }
        ++line_no;
        if (!r.ok) {
          if (batch->bad.size() < options.max_bad_record_reports) {
            batch->bad.push_back({line_no, r.kind, std::move(r.detail)});
          }
          if (options.jsonl.max_bad_records >= 0 &&
              batch->bad_lines.size() <= static_cast<uint64_t>(options.jsonl.max_bad_records) &&
              batch->bad_lines.size() < Batch::kBadLinesKept) {
            batch->bad_lines.push_back({static_cast<uint32_t>(line_no),
                                        w.parser.replaced_invalid_utf8() - utf8_before,
                                        w.parser.replaced_lone_surrogates() - surrogates_before});
          }
          ++batch->bad_count;
          return;
        }
        for (std::string_view text : w.parser.texts()) {
          Id* out = tokens.Room(Gpt2Tokenizer::MaxIds(text.size()) + 1);
          size_t len = tokenizer.EncodeTo(text, *w.cache, out);  // 16-bit: ids16 checked the fit
          if (len > 0 && options.append_eod) out[len++] = static_cast<Id>(tokenizer.eod_id());
          tokens.Grow(len);
          batch->doc_lengths.push_back(static_cast<uint32_t>(len));
        }
      });
    };
    if (ids16) {
      tokenize(batch->tokens16);
    } else {
      tokenize(batch->tokens);
    }
    batch->num_lines = line_no;
    if (line_too_long) batch->then_line_too_long = true;
    batch->replaced_invalid_utf8 =
        w.parser.replaced_invalid_utf8() - utf8_before - too_long_replaced;
    batch->replaced_lone_surrogates = w.parser.replaced_lone_surrogates() - surrogates_before;
    return batch;
  };

  auto write_batch = [&](Batch* raw) {
    std::unique_ptr<Batch> batch = in_tbb.Take(raw);
    absl::Cleanup recycle = [&] { pool.Give(std::move(batch)); };
    if (batch == nullptr || failed.load(std::memory_order_relaxed)) return;
    stats.bytes_in = batch->bytes_in_total;
    stats.bytes_decompressed = batch->bytes_decompressed_total;
    // A resource limit, not a bad record. The same words whether the parser found the line too
    // long or the read stage stopped buffering it (which one depends on where reads end).
    auto fail_line_too_long = [&](uint64_t line) {
      fail(absl::ResourceExhaustedError(absl::StrCat(source.name(), ": line ", line,
                                                     ": line too long: more than ", max_line_bytes,
                                                     " bytes (max_line_bytes)")));
    };
    for (uint64_t i = 0; i < batch->bad_count; ++i) {
      ++stats.bad_records;
      // Kept: i < max_bad_record_reports whenever the run still wants samples.
      if (stats.bad_record_samples.size() < options.max_bad_record_reports &&
          i < batch->bad.size()) {
        const Batch::Bad& bad = batch->bad[i];
        stats.bad_record_samples.push_back({stats.lines + bad.line_in_batch, bad.kind, bad.detail});
      }
      // Checked at each one, not once per batch: the count the run stops at (the summary's) is then
      // the limit plus one, however the input was cut into batches.
      if (options.jsonl.max_bad_records >= 0 &&
          stats.bad_records > static_cast<uint64_t>(options.jsonl.max_bad_records)) {
        // The run got as far as this line: the batch's documents and U+FFFD repairs before it
        // (and its own repairs) count, as the batches' before did (a FAILED row's counts are how
        // far it got, however the input was cut into batches). Where it is, the batch's i-th bad
        // line, and the repairs up to it, the parallel stage kept (bad_lines). Past the first
        // kBadLinesKept of a batch (a limit over 65,535 and a run of blank lines) they are found
        // again by parsing the batch's lines as the parallel stage did, once per run: the batch's
        // counts were left out there before, so they depended on the batch size. (Not always: a
        // huge bad line at the limit was then parsed twice at once, here and in its worker's
        // parser, which keeps its buffers; 2x the peak memory, and under a limit another error.)
        // Of the lines before it, i were bad and the rest documents.
        uint64_t at = 0;
        bool known = false;
        if (i < batch->bad_lines.size()) {
          const Batch::BadLine& b = batch->bad_lines[i];
          known = true;
          at = b.line;
          stats.replaced_invalid_utf8 += b.replaced_invalid_utf8;
          stats.replaced_lone_surrogates += b.replaced_lone_surrogates;
        } else {
          JsonRecordParser again(options.jsonl);
          uint64_t bad_before = 0;
          bool stop = false;
          ForEachLine(batch->bytes, [&](std::string_view line) {
            if (known || stop) return;
            JsonRecordParser::Result r = again.ParsePadded(line);
            if (!r.ok && r.kind == BadRecordKind::kLineTooLong) {
              stop = true;  // where the parallel stage stopped (never before the i-th bad line)
              return;
            }
            ++at;
            if (!r.ok && bad_before++ == i) known = true;
          });
          if (known) {
            stats.replaced_invalid_utf8 += again.replaced_invalid_utf8();
            stats.replaced_lone_surrogates += again.replaced_lone_surrogates();
          } else {
            at = 0;  // (cannot be: the parallel stage counted it) the batch is left out
          }
        }
        const uint64_t docs = known ? at - 1 - i : 0;
        for (uint64_t doc = 0; doc < docs; ++doc) {
          bool empty = true;
          for (size_t k = 0; k < num_keys; ++k) {
            const uint32_t len = batch->doc_lengths[doc * num_keys + k];
            stats.tokens += len;
            if (len > 0) empty = false;
          }
          ++stats.documents;
          if (empty) ++stats.empty_documents;
        }
        stats.lines += at;
        std::string where;
        if (!stats.bad_record_samples.empty()) {
          const BadRecord& b = stats.bad_record_samples.front();
          where = absl::StrCat(
              " (the first at line ", b.line, ": ", std::string(BadRecordKindName(b.kind)),
              b.detail.empty() ? "" : ": ", b.detail,
              known ? absl::StrCat("; the limit passed at line ", stats.lines) : std::string(),
              ")");
        }
        fail(absl::DataLossError(absl::StrCat(
            source.name(), ": more than ", options.jsonl.max_bad_records, " bad records", where,
            "; is this JSON lines with a \"", options.jsonl.json_keys.front(),
            "\" field? Raise --max-bad-records to accept more")));
        return;
      }
    }
    stats.lines += batch->num_lines;
    stats.replaced_invalid_utf8 += batch->replaced_invalid_utf8;
    stats.replaced_lone_surrogates += batch->replaced_lone_surrogates;
    size_t offset = 0;
    for (size_t d = 0; d < batch->doc_lengths.size(); d += num_keys) {
      bool empty = true;
      for (size_t k = 0; k < num_keys; ++k) {
        const uint32_t len = batch->doc_lengths[d + k];
        absl::Status s =
            ids16 ? writers[k]->AddDocument16(absl::MakeConstSpan(batch->tokens16.data() + offset, len))
                  : writers[k]->AddDocument(absl::MakeConstSpan(batch->tokens.data() + offset, len));
        if (!s.ok()) {
          fail(std::move(s));
          return;
        }
        offset += len;
        stats.tokens += len;
        if (len > 0) empty = false;
      }
      ++stats.documents;
      if (empty) ++stats.empty_documents;
    }
    // An error that ends the input after the batch's whole lines (damage, a read error, a line
    // too long that the read stage stopped buffering or the parser found) comes after them: they
    // were parsed and tokenized, and count (written too, never published), as a FAILED row's
    // counts are how far it got. Failing first left them out: a .zst damaged after one 1 MB batch
    // of lines counted none of them.
    if (batch->then_line_too_long) {
      fail_line_too_long(stats.lines + 1);
      return;
    }
    if (!batch->then_error.ok()) {
      fail(batch->then_error);
      return;
    }
    // From a View(), bytes_in_total is where the batch ends in it; the batches before are written.
    if (view) source.Release(batch->bytes_in_total);
    if (observer != nullptr) {
      stats.seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      observer->OnProgress(stats, source.size_hint());
    }
  };

  internal::ThreadArena arena(threads);  // threads as asked, even above the core count
  // An exception in a stage (std::bad_alloc when a buffer cannot grow: under ulimit -v, or with
  // overcommit off) stops the pipeline and comes back here, where it becomes this input's error
  // like any other: the writers abort and the caller goes on to its next input. Escaping, it
  // ended the whole process (std::terminate: no summary, the remaining shards never tried).
  try {
    arena.execute([&] {
      tbb::parallel_pipeline(
          static_cast<size_t>(in_flight),
          tbb::make_filter<void, Batch*>(tbb::filter_mode::serial_in_order, read_batch) &
              tbb::make_filter<Batch*, Batch*>(tbb::filter_mode::parallel, process_batch) &
              tbb::make_filter<Batch*, void>(tbb::filter_mode::serial_in_order, write_batch));
    });
  } catch (const std::exception& e) {
    fail(ExceptionStatus(source, e));
  }
  std::move(join_ahead).Invoke();
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // After the pipeline the read stage's totals are final (on failure too: how far the run got).
  stats.bytes_in = bytes_in;
  stats.bytes_decompressed = bytes_decompressed;
  if (!failed.load() && cancelled()) {
    // Cancelled during the last batch: the outputs are complete, but the caller asked to stop and
    // will report the input as not done, so nothing may appear under the final names.
    fail_cancelled();
  }
  if (failed.load()) {
    for (auto& w : writers) w->Abort();
    return error;
  }
  // Several keys are published all or none: a key with no tokens at all (which publishes nothing:
  // no reader can open an empty dataset) beside keys that have some, or a failure, stops the
  // shard, and a rename that fails withdraws the datasets already renamed into place. Otherwise
  // the shard would read as made while a key's outputs were missing, and a --force run would leave
  // an older input's dataset for that key.
  std::vector<bool> renamed(writers.size(), false);
  // Keys whose older .idx was removed before the renames (below), their older .bin left.
  std::vector<bool> unpaired(writers.size(), false);
  // Removes the renamed keys' files and syncs their directories (the removal must last as the
  // renames did); returns what could not be removed, "" when all went, for the caller's error: a
  // key left published beside a failed one must be named, not found later.
  auto withdraw = [&]() -> std::string {
    std::string left;
    std::vector<std::string> dirs;
    for (size_t j = 0; j < writers.size(); ++j) {
      // Older outputs not yet replaced are left as they are, but an older .bin whose .idx went
      // first: never half a dataset.
      if (!renamed[j] && !unpaired[j]) continue;
      for (const std::string& path : {writers[j]->idx_path(), writers[j]->bin_path()}) {
        if (absl::Status s = internal::RemoveFileIfExists(path); !s.ok()) {
          absl::StrAppend(&left, left.empty() ? "" : "; ", s.message());
        }
        const std::string dir = internal::DirName(path);
        if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) dirs.push_back(dir);
      }
    }
    if (options.writer.sync) {
      for (const std::string& dir : dirs) {
        if (absl::Status s = internal::SyncDirectory(dir); !s.ok()) {
          absl::StrAppend(&left, left.empty() ? "" : "; ", s.message());
        }
      }
    }
    return left;
  };
  // `status`, with what a withdrawal left behind.
  auto withdrawn = [&](const absl::Status& status) {
    const std::string left = withdraw();
    if (left.empty()) return status;
    return absl::Status(status.code(), absl::StrCat(status.message(),
                                                    "; the keys published before it could not "
                                                    "all be withdrawn (",
                                                    left, ")"));
  };
  // Every key's files complete under their temporary names first, then (the caller's hook
  // between) every rename: a key that fails or has no tokens stops the shard before any key is
  // in place.
  auto abort_all = [&] {
    for (auto& w : writers) w->Abort();
  };
  auto guarded = [&](auto step) -> absl::StatusOr<IndexedDatasetWriter::Result> {
    try {
      return step();
    } catch (const std::exception& e) {
      return absl::StatusOr<IndexedDatasetWriter::Result>(ExceptionStatus(source, e));
    }
  };
  std::vector<PreparedDataset> prepared;
  std::string empty_key_prefix;
  for (size_t k = 0; k < writers.size(); ++k) {
    absl::StatusOr<IndexedDatasetWriter::Result> r =
        guarded([&] { return writers[k]->Prepare(); });  // assembles the .idx: buffers
    if (!r.ok()) {
      abort_all();
      return r.status();
    }
    if (r->num_tokens == 0) {
      if (empty_key_prefix.empty()) empty_key_prefix = output_prefixes[k];
      continue;
    }
    prepared.push_back(PreparedDataset{output_prefixes[k], writers[k]->bin_temp_path(),
                                       writers[k]->idx_temp_path(), r->bin_bytes, r->idx_bytes});
  }
  if (prepared.empty()) return absl::OkStatus();  // no tokens in any key: nothing published
  if (prepared.size() < writers.size()) {
    abort_all();
    return absl::FailedPreconditionError(absl::StrCat(
        empty_key_prefix,
        ": no tokens in any document of its key, while the other keys have "
        "some; the keys of a shard are published all or none, so nothing was published"));
  }
  if (options.before_publish) {
    absl::Status s = options.before_publish(prepared);
    if (!s.ok()) {
      abort_all();
      return s;
    }
  }
  // Asked to stop while the files were completed and synced (seconds, for a large .bin on a
  // network file system) or in the hook: the caller will report the input as not done, so nothing
  // may appear under the final names.
  if (cancelled()) {
    abort_all();
    return absl::CancelledError(absl::StrCat(source.name(), ": cancelled"));
  }
  // Several keys: every key's older .idx goes before the first rename (its removal made durable),
  // so that a kill between two keys' renames leaves no older dataset whole beside a newer one of
  // another key, both sound and nothing to tell that they describe other documents: each key is
  // then new, or lacks its .idx (visibly incomplete) until a rerun. One key: PublishDataset
  // removes it, as it does there anyway.
  if (writers.size() > 1) {
    std::vector<std::string> dirs;
    for (size_t k = 0; k < writers.size(); ++k) {
      const std::string& idx = writers[k]->idx_path();
      const bool had = internal::PathExists(idx);
      if (absl::Status s = internal::RemoveFileIfExists(idx); !s.ok()) {
        abort_all();
        return withdrawn(s);
      }
      unpaired[k] = had;
      const std::string dir = internal::DirName(idx);
      if (had && std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) dirs.push_back(dir);
    }
    if (options.writer.sync) {
      for (const std::string& dir : dirs) {
        if (absl::Status s = internal::SyncDirectory(dir); !s.ok()) {
          abort_all();
          return withdrawn(s);
        }
      }
    }
  }
  for (size_t k = 0; k < writers.size(); ++k) {
    absl::StatusOr<IndexedDatasetWriter::Result> r = guarded([&] { return writers[k]->Publish(); });
    if (!r.ok()) {
      for (size_t j = k + 1; j < writers.size(); ++j) writers[j]->Abort();
      return withdrawn(r.status());
    }
    renamed[k] = true;
  }
  stats.published = true;
  return absl::OkStatus();
}

}  // namespace

absl::Status RunPipeline(ByteSource& source, InputFormat format, const Gpt2Tokenizer& tokenizer,
                         const std::vector<std::string>& output_prefixes,
                         const PipelineOptions& options, ShardStats* stats_out,
                         ProgressObserver* observer) {
  // What throws outside the stages (a worker's pre-token cache, a writer's buffers) is the input's
  // error too; the writers' destructors remove their temporaries on the way out.
  try {
    return RunPipelineImpl(source, format, tokenizer, output_prefixes, options, stats_out,
                           observer);
  } catch (const std::exception& e) {
    stats_out->published = false;
    return ExceptionStatus(source, e);
  }
}

}  // namespace pileprep
