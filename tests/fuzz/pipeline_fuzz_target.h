// The pipeline's fuzz target (RunPipeline), shared by the libFuzzer binary
// (tests/fuzz/pipeline_fuzzer.cc) and the corpus replay gtest
// (tests/unit/fuzz_corpus_replay_test.cc).
//
// The stages have fuzz targets of their own; this one fuzzes what joins them: how the read stage
// cuts the input into batches of whole lines, hands them to worker threads and puts the results
// back in order, counting lines, bad records and repairs across batch boundaries, and when it
// stops. The property is the pipeline's promise: output bytes never depend on the thread count or
// on how the source chunks its bytes (pipeline.h).
//
// Input layout: byte 0 holds flags (bits 0-1: 1 to 3 worker threads; bit 2: the input
// zstd-compressed here first; bit 3: keys {"text", "meta"} instead of {"text"}; bit 4: append EOD;
// bit 5: a max_line_bytes of 64; bit 6: at most 2 bad records instead of any number; bit 7: zstd
// decoded in the read stage instead of on a thread of its own), byte 1 the batch size (1 to 4,336
// bytes), byte 2 the source's read size (1 to 766 bytes), byte 3 more flags (bit 0: plain input
// given through View(), as a mapped file is, ending right before a page that cannot be read; bit 1:
// the first 2 bad records kept with their lines instead of 100; bit 2: one batch in flight instead
// of 2 x threads + 2; bit 3, with byte 0's bit 2: the rest taken as zstd as it is, not compressed
// here, so that damaged and odd streams meet the pipeline too; bit 4, with byte 0's bit 5: a
// max_line_bytes of 16, below the parser's padding; bit 5, with bit 0: the view followed by
// kPadding zeros that ViewSlack() says may be read; bit 6: the run cancelled (options.cancel)
// before it starts or, with bit 7, when its third batch is reported), the rest is JSON lines.
// Oracle beyond "no crash" (ASan, UBSan, TSan in the replay test): the run equals a reference run
// of the same input and options with one thread, 1 MiB batches, 64 KiB reads and zstd decoded on a
// thread of its own (so byte 0's bit 7 compares the two decoders): the same status (code and
// message), the same counts (lines, documents, tokens, bad records with their line numbers, kinds
// and details, repairs), and when it succeeds the same .bin and .idx bytes; when it fails, nothing
// published. Once its cancel flag is set a run never succeeds: it ends Cancelled (always, when set
// before it began), with nothing published and its counts and bad records a prefix of the
// reference's (it stops at a batch boundary: what it did, it did as the reference did), or with
// the reference's failure, met first.
#ifndef PILEPREP_TESTS_FUZZ_PIPELINE_FUZZ_TARGET_H_
#define PILEPREP_TESTS_FUZZ_PIPELINE_FUZZ_TARGET_H_

#include <stdlib.h>
#include <unistd.h>
#include <zstd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pileprep/gpt2_tokenizer.h"
#include "pileprep/pipeline.h"
#include "testing/guarded_view_source.h"
#include "testing/memory_source.h"

namespace pileprep::fuzz {

struct PipelineFuzzState {
  std::unique_ptr<Gpt2Tokenizer> tokenizer;
  std::string dir;  // a private directory for the runs' outputs
  // Caches kept from run to run (PipelineOptions::caches), so that a run costs no fresh 56 MiB per
  // thread; small ones, so that they evict. The output never depends on them, which this checks
  // too.
  std::vector<std::unique_ptr<Gpt2Tokenizer::Cache>> caches;
};

inline PipelineFuzzState& PipelineFuzz() {
  static PipelineFuzzState* state = [] {
    auto* s = new PipelineFuzzState;
    const std::string tok = std::string(PILEPREP_SOURCE_DIR) + "/tokenizers/gpt2";
    Gpt2Tokenizer::Options o;
    o.cache_entries = 1 << 10;
    auto t = Gpt2Tokenizer::FromFiles(tok + "/encoder.json", tok + "/vocab.bpe", o);
    if (!t.ok()) {
      std::fprintf(stderr, "pipeline fuzz: %s\n", std::string(t.status().message()).c_str());
      std::abort();
    }
    s->tokenizer = std::move(*t);
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "pileprep-pipeline-fuzz-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::perror("pipeline fuzz: mkdtemp");
      std::abort();
    }
    s->dir = tmpl;
    // Removed at exit (libFuzzer exits through exit()); a crash leaves it, with the outputs.
    std::atexit([] { std::filesystem::remove_all(PipelineFuzz().dir); });
    return s;
  }();
  return *state;
}

struct PipelineFuzzRun {
  absl::Status status;
  ShardStats stats;
  std::string bin, idx;  // per key, joined; empty when nothing was published
  bool cancel_set = false;  // options.cancel was set before the run returned
};

inline std::string ReadWholeFileForFuzz(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Sets the cancel flag when the in-order stage reports its `after`th batch (0: before the run).
class CancelAfterBatches : public ProgressObserver {
 public:
  CancelAfterBatches(std::atomic<bool>* flag, int after) : flag_(flag), after_(after) {
    if (after_ == 0) flag_->store(true);
  }
  void OnProgress(const ShardStats&, int64_t) override {
    if (++reported_ == after_) flag_->store(true);
  }

 private:
  std::atomic<bool>* flag_;
  int after_;
  int reported_ = 0;
};

inline PipelineFuzzRun RunPipelineForFuzz(const std::string& input, InputFormat format,
                                          size_t chunk, const PipelineOptions& options,
                                          const std::string& name, bool view = false,
                                          size_t slack = 0, int cancel_after = -1) {
  PipelineFuzzState& st = PipelineFuzz();
  PipelineFuzzRun run;
  std::vector<std::string> prefixes;
  for (const std::string& key : options.jsonl.json_keys) {
    prefixes.push_back(st.dir + "/" + name + "_" + key);
  }
  testing::MemorySource read_source(input, chunk, "fuzz.jsonl");
  // Read where it lies, as a mapped file is: the bytes end before a page that cannot be read.
  std::optional<testing::GuardedViewSource> view_source;
  if (view) {
    view_source.emplace(input, slack, "fuzz.jsonl");
    if (!view_source->ok()) {
      std::perror("pipeline fuzz: mmap");
      std::abort();
    }
  }
  ByteSource& source = view ? static_cast<ByteSource&>(*view_source) : read_source;
  PipelineOptions o = options;
  o.caches = &st.caches;
  o.writer.sync = false;
  std::atomic<bool> cancel{false};
  std::optional<CancelAfterBatches> canceller;
  if (cancel_after >= 0) {
    o.cancel = &cancel;
    canceller.emplace(&cancel, cancel_after);
  }
  run.status = RunPipeline(source, format, *st.tokenizer, prefixes, o, &run.stats,
                           canceller ? &*canceller : nullptr);
  run.cancel_set = cancel.load();
  for (const std::string& p : prefixes) {
    const bool bin = std::filesystem::exists(p + ".bin"), idx = std::filesystem::exists(p + ".idx");
    if (bin != idx || (bin && !run.status.ok())) {
      std::fprintf(stderr, "pipeline fuzz: %s: .bin %d, .idx %d after %s\n", p.c_str(), bin, idx,
                   run.status.ToString().c_str());
      std::abort();
    }
    if (bin) {
      run.bin += ReadWholeFileForFuzz(p + ".bin") + "|";
      run.idx += ReadWholeFileForFuzz(p + ".idx") + "|";
    }
  }
  // Nothing else may be left: temporaries and spill files go whatever the outcome.
  for (const auto& entry : std::filesystem::directory_iterator(st.dir)) {
    const std::string file = entry.path().filename().string();
    bool published = false;
    for (const std::string& p : prefixes) {
      const std::string base = std::filesystem::path(p).filename().string();
      published |= run.status.ok() && (file == base + ".bin" || file == base + ".idx");
    }
    if (!published) {
      std::fprintf(stderr, "pipeline fuzz: left behind: %s after %s\n", file.c_str(),
                   run.status.ToString().c_str());
      std::abort();
    }
    std::filesystem::remove(entry.path());
  }
  return run;
}

// Whether `got`'s bad records are the first of `want`'s: line, kind and detail each.
inline bool BadRecordsArePrefixForFuzz(const std::vector<BadRecord>& got,
                                       const std::vector<BadRecord>& want) {
  if (got.size() > want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].line != want[i].line || got[i].kind != want[i].kind ||
        got[i].detail != want[i].detail) {
      return false;
    }
  }
  return true;
}

// A run cancelled at a batch boundary did part of what the reference did, and published nothing
// (RunPipelineForFuzz checks that).
inline void ExpectCancelledPrefixForFuzz(const PipelineFuzzRun& got, const PipelineFuzzRun& want) {
  auto fail = [&](const char* what) {
    std::fprintf(stderr, "pipeline fuzz: cancelled run: %s: got %s, want %s\n", what,
                 got.status.ToString().c_str(), want.status.ToString().c_str());
    std::abort();
  };
  if (!absl::IsCancelled(got.status) || got.status.message() != "fuzz.jsonl: cancelled") {
    fail("status");
  }
  const ShardStats& a = got.stats;
  const ShardStats& b = want.stats;
  if (a.published || a.lines > b.lines || a.documents > b.documents ||
      a.empty_documents > b.empty_documents || a.tokens > b.tokens ||
      a.bad_records > b.bad_records || a.replaced_invalid_utf8 > b.replaced_invalid_utf8 ||
      a.replaced_lone_surrogates > b.replaced_lone_surrogates) {
    fail("counts beyond the reference's");
  }
  if (!BadRecordsArePrefixForFuzz(a.bad_record_samples, b.bad_record_samples)) {
    fail("bad records not the reference's first");
  }
}

inline void ExpectSameRunForFuzz(const PipelineFuzzRun& got, const PipelineFuzzRun& want) {
  auto fail = [&](const char* what) {
    std::fprintf(stderr, "pipeline fuzz: %s differs: got %s, want %s\n", what,
                 got.status.ToString().c_str(), want.status.ToString().c_str());
    std::abort();
  };
  if (got.status.code() != want.status.code() || got.status.message() != want.status.message()) {
    fail("status");
  }
  const ShardStats& a = got.stats;
  const ShardStats& b = want.stats;
  if (a.lines != b.lines || a.documents != b.documents || a.empty_documents != b.empty_documents ||
      a.tokens != b.tokens || a.bad_records != b.bad_records ||
      a.replaced_invalid_utf8 != b.replaced_invalid_utf8 ||
      a.replaced_lone_surrogates != b.replaced_lone_surrogates || a.published != b.published) {
    fail("counts");
  }
  if (a.bad_record_samples.size() != b.bad_record_samples.size()) fail("bad record samples");
  if (!BadRecordsArePrefixForFuzz(a.bad_record_samples, b.bad_record_samples)) {
    fail("a bad record");
  }
  if (got.status.ok() &&
      (a.bytes_in != b.bytes_in || a.bytes_decompressed != b.bytes_decompressed)) {
    fail("bytes read");
  }
  if (got.bin != want.bin) fail(".bin");
  if (got.idx != want.idx) fail(".idx");
}

inline int RunPipelineFuzzInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const uint8_t flags = data[0];
  std::string input(reinterpret_cast<const char*>(data) + 4, size - 4);
  InputFormat format = InputFormat::kPlain;
  if ((flags & 4) && (data[3] & 8)) {
    format = InputFormat::kZstd;  // the bytes as they are: damaged frames, skippable ones, garbage
  } else if (flags & 4) {
    std::string zst(ZSTD_compressBound(input.size()), '\0');
    const size_t n = ZSTD_compress(zst.data(), zst.size(), input.data(), input.size(), 1);
    if (ZSTD_isError(n)) std::abort();
    zst.resize(n);
    input = std::move(zst);
    format = InputFormat::kZstd;
  }
  PipelineOptions options;
  if (flags & 8) options.jsonl.json_keys = {"text", "meta"};
  options.append_eod = (flags & 16) != 0;
  if (flags & 32) options.jsonl.max_line_bytes = (data[3] & 16) ? 16 : 64;
  options.jsonl.max_bad_records = (flags & 64) ? 2 : -1;
  options.zstd_decode_thread = (flags & 128) == 0;
  if (data[3] & 2) options.max_bad_record_reports = 2;

  PipelineOptions reference = options;
  reference.threads = 1;
  reference.zstd_decode_thread = true;
  const PipelineFuzzRun want =
      RunPipelineForFuzz(input, format, size_t{64} << 10, reference, "reference");

  options.threads = 1 + (flags & 3) % 3;
  options.batch_bytes = 1 + size_t{data[1]} * 17;
  const size_t chunk = 1 + size_t{data[2]} * 3;
  options.read_bytes = chunk;
  if (data[3] & 4) options.max_batches_in_flight = 1;
  const bool view = format == InputFormat::kPlain && (data[3] & 1) != 0;
  const size_t slack = (data[3] & 32) ? JsonRecordParser::kPadding : 0;
  const int cancel_after = (data[3] & 64) ? ((data[3] & 128) ? 3 : 0) : -1;
  const PipelineFuzzRun got =
      RunPipelineForFuzz(input, format, chunk, options, "fuzzed", view, slack, cancel_after);
  // Once the flag is set the run may not succeed: it ends Cancelled or with the failure it had met
  // already (the reference's). Set before the run began: Cancelled, always.
  if (got.cancel_set && (cancel_after == 0 || absl::IsCancelled(got.status) || got.status.ok())) {
    ExpectCancelledPrefixForFuzz(got, want);
  } else {
    ExpectSameRunForFuzz(got, want);
  }
  return 0;
}

}  // namespace pileprep::fuzz

#endif  // PILEPREP_TESTS_FUZZ_PIPELINE_FUZZ_TARGET_H_
