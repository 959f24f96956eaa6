// The preparation pipeline: bytes (zstd or plain JSON lines) -> documents -> GPT-2 ids ->
// .bin/.idx.
//
//   PILEPREP_ASSIGN_OR_RETURN(auto source, OpenFileSource("00.jsonl.zst"));
//   PipelineOptions options;                       // every knob and its default
//   ShardStats stats;
//   PILEPREP_RETURN_IF_ERROR(RunPipeline(*source, InputFormat::kZstd, *tokenizer,
//                                        {"out/my-gpt3_00_text_document"}, options, &stats));
//
// Stages, joined by an order-preserving oneTBB parallel_pipeline with a bounded number of batches
// in flight (memory is a small multiple of threads x batch size; a line longer than a batch is a
// batch of its own, so with many such lines up to the batches in flight x the longest line, a few
// times over: its bytes, the parser's copy, its ids):
//   1. serial, in order: read the source, decompress, cut the stream into batches of whole lines
//      (zstd input is read and decoded on a thread of its own, two batches ahead, and the stage
//      only hands its batches on: PipelineOptions::zstd_decode_thread);
//   2. parallel: parse each line's JSON (JsonRecordParser) and tokenize it (Gpt2Tokenizer), one
//   parser
//      and one pre-token cache per worker thread;
//   3. serial, in order: append documents (ids + EOD) to one IndexedDatasetWriter per JSON key,
//   count bad
//      records with their line numbers, report progress.
// Output bytes never depend on the thread count or on how the source chunks its bytes.
//
// Thread model: RunPipeline blocks the calling thread and uses up to `options.threads` threads, in
// its own oneTBB arena, so several pipelines can run at once, and, for zstd input, one more thread
// that reads and decodes (PipelineOptions::zstd_decode_thread); a .bin written with O_DIRECT is
// written from a thread of its own. The tokenizer is shared read-only. Each of
// the arena's thread slots gets its own JSON parser and pre-token cache when it first works, so
// there are at most `options.threads` of them however TBB moves its threads between arenas. A
// ProgressObserver is called from one thread at a time. While it runs, oneTBB's process-wide
// max_allowed_parallelism is raised to `options.threads` where it is below (a global_control); a
// lower one the embedding program set stays in force (TBB applies the smallest), and the arena
// then takes that many threads (the output is the same).
#ifndef PILEPREP_PIPELINE_H_
#define PILEPREP_PIPELINE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "pileprep/gpt2_tokenizer.h"
#include "pileprep/indexed_dataset.h"
#include "pileprep/jsonl.h"
#include "pileprep/zstd_stream.h"

namespace pileprep {

// A stream of input bytes: a local file here; an HTTP download implements the same interface.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads up to `capacity` bytes into `buffer`; 0 means end of input. Errors name the source.
  virtual absl::StatusOr<size_t> Read(char* buffer, size_t capacity) = 0;
  // Total size in bytes when known in advance (for progress and ETA), else -1.
  virtual int64_t size_hint() const { return -1; }
  // A short name for messages: the file name or URL (never with credentials).
  virtual const std::string& name() const = 0;

  // Zero-copy reading, for a source already addressable in memory (a local file, mapped): the whole
  // input as one view that lives as long as the source, or nullopt (the default): then use Read.
  // Never mix the two. Before reading bytes [from, to) of the view, call Fetch(from, to): it pages
  // them in at once, so that an I/O error or a file that shrank comes back as a status here rather
  // than as SIGBUS wherever the bytes are read. Release(offset) says bytes before `offset` will not
  // be read again: their pages leave the process's RSS, which so stays flat over a 43 GB input.
  virtual std::optional<std::string_view> View() { return std::nullopt; }
  // How many bytes past the end of View() may be read (as a file's mapping may be read to the end
  // of its last page, which zeros fill). Lines are parsed where they lie, read up to
  // JsonRecordParser::kPadding bytes past their end; a batch with fewer bytes than that after it,
  // in the view and its slack together, is copied and padded (the last lines, and lines before one
  // too long when max_line_bytes is that small). The default, 0, suits a view of any buffer.
  virtual size_t ViewSlack() const { return 0; }
  virtual absl::Status Fetch(size_t /*from*/, size_t /*to*/) { return absl::OkStatus(); }
  virtual void Release(size_t /*offset*/) {}

  // The reader has failed and will not read again: a Read() blocked waiting for bytes (a stalled
  // download) returns soon (Cancelled), and later ones at once, instead of holding the failed input
  // until the source's own timeouts give up. May be called from any thread, during a Read too.
  virtual void Interrupt() {}
};

struct FileSourceOptions {
  // Whether a regular file may be read through View(), a mapping of it, so that plain JSON lines
  // are parsed where they lie instead of being read(2) into each batch. Off by default: what it
  // saves (read(2)'s copy) and what it costs (a page-table entry per 4 KiB page, and faults that
  // a hypervisor may handle for the guest) depend on the machine. Measured as the mean of
  // alternating runs, 2 threads: on one VM, 2081 -> 2052 ms mapped (1.2 GB job); on a PVM guest
  // (page tables shadowed by the host), 1814 -> 2016 ms mapped (600 MB job; 1 thread 2850 -> 3127).
  // A mapped file that another process truncates between Fetch and the read of its bytes raises
  // SIGBUS, as any mapping does; the CLI says what happened (tools/pileprep/signals.h).
  bool map = false;
  // How far ahead of what Read() has returned a regular file is asked into the page cache
  // (posix_fadvise WILLNEED, a step of half the window at a time), so that the serial read stage
  // rarely waits on the disk: a read(2) that waits blocks the thread that reads (for plain input
  // the worker that runs the read stage).
  // Measured on a 1.2 GB job whose file the host kept partly evicting from the page cache (DAMON
  // pageout): 199 reads waited 0.42 s in all. 0: the kernel's own readahead only.
  size_t readahead_bytes = size_t{64} << 20;
  // Set (by a signal handler) to stop: a Read() of a pipe waiting for bytes returns Cancelled
  // within about 0.1 s, as Interrupt() makes it. Null: only Interrupt() does.
  const std::atomic<bool>* cancel = nullptr;
};

// Opens a local file as a ByteSource: read with Read(), or, with `options.map` and a regular
// file, through View(). Anything else (a pipe) is only ever read.
absl::StatusOr<std::unique_ptr<ByteSource>> OpenFileSource(const std::string& path,
                                                           const FileSourceOptions& options = {});

enum class InputFormat {
  kZstd,   // zstd-compressed JSON lines (.jsonl.zst)
  kPlain,  // uncompressed JSON lines (.jsonl)
};
// kZstd when `path` ends in ".zst", else kPlain.
InputFormat InputFormatForPath(const std::string& path);

// A dataset complete under its temporary names (IndexedDatasetWriter::Prepare), about to be
// renamed into place.
struct PreparedDataset {
  std::string prefix;
  std::string bin_temp_path, idx_temp_path;  // renamed to {prefix}.bin / .idx: same inodes
  uint64_t bin_bytes = 0, idx_bytes = 0;
};

struct PipelineOptions {
  int threads = 0;                          // 0: all cores (negative: InvalidArgument)
  size_t batch_bytes = size_t{1} << 20;     // decompressed bytes per unit of parallel work (> 0)
  size_t read_bytes = size_t{1} << 16;      // bytes read from the source per call (> 0)
  int max_batches_in_flight = 0;            // 0: 2 x threads + 2; for zstd input with
                                            // zstd_decode_thread, 3 more beside them
  // Megatron's --append-eod. On by default, as the shard job makes its outputs; `pileprep
  // preprocess`, a drop-in for preprocess_data.py, sets it only when given --append-eod.
  bool append_eod = true;
  size_t max_bad_record_reports = 100;      // bad records kept with line numbers (all are counted)
  JsonlOptions jsonl;                       // keys and the bad-record limit
  ZstdDecoderOptions zstd;                  // window limit (source_name is filled in per source)
  // zstd input is decoded on a thread of its own beside the workers (busy about a fifth of the time
  // a worker is: decoding runs at ~1 GB/s of JSON lines), up to two batches ahead; false: in the
  // serial read stage, by whichever worker runs it. The output is the same either way.
  bool zstd_decode_thread = true;
  IndexedDatasetWriterOptions writer;       // dtype is chosen from the tokenizer's vocabulary size
  // Cancellation (e.g. set by a SIGINT/SIGTERM handler): when it becomes true the run stops at the
  // next batch boundary, removes its temporaries and returns Cancelled ("NAME: cancelled"). A read
  // blocked in the source ends first: HttpSource takes the same flag (FetchOptions::cancel) and
  // returns within ~0.1 s. Null: never cancelled. Only
  // read (relaxed) by the pipeline; the pointee must outlive the call.
  const std::atomic<bool>* cancel = nullptr;
  // Pre-token caches for the workers, kept by the caller: the worker of the arena's thread slot i
  // uses (*caches)[i], made there when missing (the vector is first grown to `threads` entries).
  // Lets a caller make them ahead, on other cores while the vocabulary loads (the CLI does), and
  // keep them, warm, for the next input of the same pipeline width. Never shared between runs
  // at once. Null: each run makes its own and frees them. The output never depends on them.
  std::vector<std::unique_ptr<Gpt2Tokenizer::Cache>>* caches = nullptr;
  // Called on RunPipeline's thread once every key's dataset is complete under its temporary names
  // and before any is renamed into place (one entry per output prefix, in their order); not called
  // when the run fails or publishes nothing. An error from it publishes nothing (the temporaries
  // are removed) and is RunPipeline's. The shard job writes its pending records here.
  std::function<absl::Status(const std::vector<PreparedDataset>&)> before_publish;
};

struct BadRecord {
  uint64_t line = 0;
  BadRecordKind kind{};
  std::string detail;
};

// What a run did. RunPipeline fills it in as the run goes, from its own threads: read it from
// ProgressObserver::OnProgress (handed the stats so far) or after RunPipeline returns, not from
// another thread meanwhile. RunPipeline's `stats` must not be null.
struct ShardStats {
  uint64_t bytes_in = 0;             // bytes read from the source (compressed, for .zst)
  uint64_t bytes_decompressed = 0;   // JSON-lines bytes
  uint64_t lines = 0;
  uint64_t documents = 0;            // good records (documents written, empty ones included)
  uint64_t empty_documents = 0;      // documents with no tokens (no sequence written)
  uint64_t tokens = 0;               // ids written, EOD included, over all keys
  uint64_t bad_records = 0;
  std::vector<BadRecord> bad_record_samples;  // the first max_bad_record_reports of them
  // U+FFFD substitutions, counted over whole lines (every field, bad records' lines too: the
  // repair comes before parsing): raw invalid bytes, and lone \ud800-style escapes.
  uint64_t replaced_invalid_utf8 = 0;
  uint64_t replaced_lone_surrogates = 0;
  bool published = false;                     // outputs are in place under their final names
  double seconds = 0;
};

// Receives progress from the in-order stage after each batch. Must be cheap; may be called often.
class ProgressObserver {
 public:
  virtual ~ProgressObserver() = default;
  virtual void OnProgress(const ShardStats& so_far, int64_t source_size_hint) = 0;
};

// Processes one input. `output_prefixes` holds one prefix per JSON key (options.jsonl.json_keys
// order); each gets {prefix}.bin/.idx, published only when the whole input succeeded and holds
// tokens. Errors name the source and the line or byte offset: container damage (zstd), read errors,
// too many bad records (options.jsonl.max_bad_records: DataLoss), a line longer than
// options.jsonl.max_line_bytes or memory not to be had (ResourceExhausted), write errors; Cancelled
// when options.cancel was set. On error nothing is published (a dataset of several keys is published all or none: a key
// with no tokens at all beside keys that have some is FailedPrecondition, naming its prefix);
// `stats` still tells how far the run got (bad records seen, bytes read).
absl::Status RunPipeline(ByteSource& source, InputFormat format, const Gpt2Tokenizer& tokenizer,
                         const std::vector<std::string>& output_prefixes,
                         const PipelineOptions& options, ShardStats* stats,
                         ProgressObserver* observer = nullptr);

}  // namespace pileprep

#endif  // PILEPREP_PIPELINE_H_
