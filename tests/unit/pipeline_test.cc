// The whole pipeline on real shards: output bytes never depend on how the source chunks its bytes, on
// the thread count or on the batch size; failures publish nothing.
#include "pileprep/pipeline.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "oneapi/tbb/global_control.h"
#include "testing/files.h"
#include "testing/guarded_view_source.h"
#include "testing/memory_source.h"
#include "testing/peak_rss.h"

namespace pileprep {
namespace {

namespace fs = std::filesystem;

using testing::MemorySource;
using testing::ProcStatusKiB;
using testing::ReadFile;
using testing::ResetPeakRss;
using testing::WriteFile;

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = Gpt2Tokenizer::FromDefaultFiles({});
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(tok).value();
    dir_ = fs::temp_directory_path() /
           ("pileprep_pipeline_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::remove_all(dir_);
  }

  // No file in the test's directory has a name starting with `prefix` (outputs or temporaries).
  void ExpectNothingNamed(const std::string& prefix) const {
    for (const auto& entry : fs::directory_iterator(dir_)) {
      EXPECT_EQ(entry.path().string().rfind(prefix, 0), std::string::npos)
          << "left behind: " << entry.path();
    }
  }

  // Runs the pipeline and returns .bin + .idx bytes ("" when nothing was published).
  std::string Run(const std::string& input, InputFormat format, size_t chunk, int threads,
                  size_t batch_bytes, absl::Status* status = nullptr, ShardStats* stats_out = nullptr,
                  PipelineOptions options = {}) {
    MemorySource source(input, chunk);
    return RunSource(source, format, threads, batch_bytes, status, stats_out, options);
  }

  // Runs the pipeline on a file read where it lies (OpenFileSource's View(), asked for with
  // FileSourceOptions::map); same result as Run.
  std::string RunFile(const std::string& path, int threads, size_t batch_bytes,
                      absl::Status* status = nullptr, ShardStats* stats_out = nullptr) {
    auto source = OpenFileSource(path, {.map = true});
    if (!source.ok()) {
      ADD_FAILURE() << source.status();
      return "";
    }
    EXPECT_TRUE((*source)->View().has_value()) << path << " was not mapped";
    return RunSource(**source, InputFormat::kPlain, threads, batch_bytes, status, stats_out, {});
  }

  std::string RunSource(ByteSource& source, InputFormat format, int threads, size_t batch_bytes,
                        absl::Status* status, ShardStats* stats_out, PipelineOptions options) {
    options.threads = threads;
    options.batch_bytes = batch_bytes;
    options.writer.sync = false;
    const std::string prefix = (dir_ / ("out" + std::to_string(run_++))).string();
    ShardStats stats;
    absl::Status s = RunPipeline(source, format, *tokenizer_, {prefix}, options, &stats);
    if (status != nullptr) {
      *status = s;
    } else {
      EXPECT_TRUE(s.ok()) << s;
    }
    if (stats_out != nullptr) *stats_out = stats;
    if (!fs::exists(prefix + ".bin")) return "";
    return ReadFile(prefix + ".bin") + "|" + ReadFile(prefix + ".idx");
  }

  static std::string Decompress(const std::string& zst) {
    std::string out;
    ZstdDecoder decoder(ZstdDecoderOptions{});
    EXPECT_TRUE(decoder
                    .Feed(zst,
                          [&](std::string_view b) {
                            out.append(b);
                            return absl::OkStatus();
                          })
                    .ok());
    EXPECT_TRUE(decoder.Finish().ok());
    return out;
  }

  // `text`'s lines with every `every`th one replaced by `replacement` (a bad record).
  static std::string ReplaceEveryNthLine(const std::string& text, size_t every,
                                         const std::string& replacement) {
    std::string out;
    size_t line = 0;
    for (size_t pos = 0; pos < text.size();) {
      const size_t nl = std::min(text.find('\n', pos), text.size() - 1);
      out += (++line % every == 0) ? replacement : text.substr(pos, nl + 1 - pos);
      pos = nl + 1;
    }
    return out;
  }

  // The counts of two runs of the same input agree, bad records' line numbers included.
  static void ExpectSameCounts(const ShardStats& got, const ShardStats& want) {
    EXPECT_EQ(got.lines, want.lines);
    EXPECT_EQ(got.documents, want.documents);
    EXPECT_EQ(got.empty_documents, want.empty_documents);
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(got.bad_records, want.bad_records);
    ASSERT_EQ(got.bad_record_samples.size(), want.bad_record_samples.size());
    for (size_t k = 0; k < got.bad_record_samples.size(); ++k) {
      EXPECT_EQ(got.bad_record_samples[k].line, want.bad_record_samples[k].line);
    }
  }

  static std::string Compress(const std::string& plain) {
    std::string out(ZSTD_compressBound(plain.size()), '\0');
    const size_t n = ZSTD_compress(out.data(), out.size(), plain.data(), plain.size(), 3);
    EXPECT_FALSE(ZSTD_isError(n));
    out.resize(ZSTD_isError(n) ? 0 : n);
    return out;
  }

  std::unique_ptr<Gpt2Tokenizer> tokenizer_;
  fs::path dir_;
  int run_ = 0;
};

// A pipe whose writer stalls held Read() until it wrote or closed: Interrupt() (a failed stage)
// and the cancel flag (a signal) now end the wait within a tenth of a second or so.
TEST(FileSource, AReadOfAStalledPipeEndsOnInterruptAndOnCancel) {
  for (const bool by_flag : {false, true}) {
    SCOPED_TRACE(by_flag ? "cancel flag" : "Interrupt()");
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    std::atomic<bool> cancel{false};
    FileSourceOptions o;
    o.cancel = &cancel;
    auto source = OpenFileSource(absl::StrCat("/dev/fd/", fds[0]), o);
    ASSERT_TRUE(source.ok()) << source.status();
    ASSERT_EQ(::write(fds[1], "ab", 2), 2);
    char buf[16];
    auto first = (*source)->Read(buf, sizeof(buf));
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(*first, 2u);
    const auto start = std::chrono::steady_clock::now();
    std::thread stopper([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (by_flag) {
        cancel.store(true);
      } else {
        (*source)->Interrupt();
      }
    });
    auto second = (*source)->Read(buf, sizeof(buf));  // the writer is open and silent
    stopper.join();
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(second.status().code(), absl::StatusCode::kCancelled) << second.status();
    EXPECT_LT(waited, 5.0);
    ::close(fds[0]);
    ::close(fds[1]);
  }
}

// A FIFO that no writer has opened yet: open(2) waited for one (restarting after a signal's
// handler), so a signal's stop waited for a writer that might never come. It is opened at once now,
// and its Read() ends on the cancel flag as a stalled pipe's does. Should the open wait, a helper
// opens the writer after 3 s (and the test fails on the time taken) rather than hang.
TEST(FileSource, AFifoWithNoWriterYetOpensAtOnceAndItsReadEndsOnCancel) {
  const fs::path fifo = fs::path(::testing::TempDir()) / "pileprep_no_writer_fifo";
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::atomic<bool> done{false};
  std::thread rescuer([&] {
    for (int i = 0; i < 300 && !done.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (done.load()) return;
    const int w = ::open(fifo.c_str(), O_WRONLY | O_CLOEXEC);  // the reader is open or opening
    if (w >= 0) ::close(w);
  });
  std::atomic<bool> cancel{false};
  FileSourceOptions o;
  o.cancel = &cancel;
  const auto start = std::chrono::steady_clock::now();
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancel.store(true);
  });
  auto source = OpenFileSource(fifo.string(), o);
  char buf[16];
  absl::StatusOr<size_t> read = absl::UnknownError("not opened");
  if (source.ok()) read = (*source)->Read(buf, sizeof(buf));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  done.store(true);
  stopper.join();
  rescuer.join();
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ(read.status().code(), absl::StatusCode::kCancelled) << read.status();
  EXPECT_LT(waited, 2.0);
  source->reset();
  fs::remove(fifo);
}

// The same FIFO read to its end: a writer that comes later is waited for (not an empty input),
// its bytes read, and its close is the end; a writer that closes without writing is an empty one.
// An empty path is named as such, not as ": no such file" (a file of no name).
TEST(FileSource, AnEmptyPathIsRefusedAsEmpty) {
  auto source = OpenFileSource("");
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), absl::StatusCode::kInvalidArgument) << source.status();
  EXPECT_EQ(source.status().message(), "OpenFileSource: the path is empty");
}

TEST(FileSource, AFifoIsReadFromAWriterThatOpensItLater) {
  const fs::path fifo = fs::path(::testing::TempDir()) / "pileprep_late_writer_fifo";
  for (const std::string& payload : {std::string("{\"text\": \"late\"}\n"), std::string()}) {
    SCOPED_TRACE(payload.empty() ? "no bytes" : "some bytes");
    fs::remove(fifo);
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    std::thread writer([&] {  // started first: an open that waited for it would not hang
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      // Non-blocking, ENXIO until a reader is there; given up after 5 s (a reader that never
      // opened fails the test below rather than hang it).
      int w = -1;
      for (int i = 0; i < 500 && w < 0; ++i) {
        w = ::open(fifo.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK);
        if (w < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (w < 0) return;
      ::fcntl(w, F_SETFL, ::fcntl(w, F_GETFL) & ~O_NONBLOCK);
      if (!payload.empty()) {
        EXPECT_EQ(::write(w, payload.data(), payload.size()), static_cast<ssize_t>(payload.size()));
      }
      ::close(w);
    });
    auto source = OpenFileSource(fifo.string(), FileSourceOptions());
    std::string got;
    absl::Status status = source.status();
    char buf[4];
    while (status.ok()) {
      auto n = (*source)->Read(buf, sizeof(buf));
      status = n.status();
      if (!n.ok() || *n == 0) break;
      got.append(buf, *n);
    }
    writer.join();
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_EQ(got, payload);
    fs::remove(fifo);
  }
}

TEST_F(PipelineTest, OneByteFeedsEqualOneBigFeed) {
  const std::string zst = ReadFile(PILEPREP_TEST_DATA_DIR "/bad/multi-frame.jsonl.zst");
  const std::string big = Run(zst, InputFormat::kZstd, zst.size(), 2, 1 << 20);
  ASSERT_FALSE(big.empty());
  EXPECT_EQ(Run(zst, InputFormat::kZstd, 1, 2, 1 << 20), big);
  EXPECT_EQ(Run(zst, InputFormat::kZstd, 7, 3, 100), big);
}

TEST_F(PipelineTest, ThreadCountAndBatchSizeNeverChangeBytes) {
  const std::string zst = ReadFile(PILEPREP_SOURCE_DIR "/data/samples/01.jsonl.zst");
  const std::string one = Run(zst, InputFormat::kZstd, 1 << 16, 1, 1 << 20);
  ASSERT_FALSE(one.empty());
  EXPECT_EQ(Run(zst, InputFormat::kZstd, 1 << 16, 2, 1 << 20), one);
  EXPECT_EQ(Run(zst, InputFormat::kZstd, 1 << 16, 7, 1 << 20), one);
  EXPECT_EQ(Run(zst, InputFormat::kZstd, 4093, 7, 5000), one);
}

// One prefix for two keys: the two writers would share their temporaries; refused before any
// work (it failed at the end with a missing temporary).
TEST_F(PipelineTest, OnePrefixForTwoKeysIsRefusedBeforeAnyWork) {
  PipelineOptions options;
  options.jsonl.json_keys = {"text", "text"};
  const std::string prefix = (dir_ / "dup").string();
  MemorySource source("{\"text\": \"a\"}\n", 64);
  ShardStats stats;
  const absl::Status s =
      RunPipeline(source, InputFormat::kPlain, *tokenizer_, {prefix, prefix}, options, &stats);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(stats.documents, 0);
  ExpectNothingNamed(prefix);
}

// No key, or a prefix count that is not the key count: refused before any work, naming which.
TEST_F(PipelineTest, NoJsonKeyOrAPrefixCountOtherThanTheKeysIsRefusedNamingWhich) {
  PipelineOptions options;
  options.jsonl.json_keys = {};
  MemorySource source("{\"text\": \"a\"}\n", 64);
  ShardStats stats;
  absl::Status s = RunPipeline(source, InputFormat::kPlain, *tokenizer_, {}, options, &stats);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find("no JSON key"), std::string::npos) << s;
  options.jsonl.json_keys = {"text"};
  const std::string prefix = (dir_ / "count").string();
  s = RunPipeline(source, InputFormat::kPlain, *tokenizer_, {prefix, prefix + "2"}, options,
                  &stats);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find("2 output prefixes for 1 JSON key:"), std::string::npos)
      << s;
  ExpectNothingNamed(prefix);
}

// A program that caps oneTBB's threads itself (a global_control of its own, lower than the threads
// asked for): the library raised its limit but the smaller one stays in force, and the arena of
// the threads asked for made oneTBB print a warning on stderr, from a library that prints nothing.
// The same bytes, and nothing printed.
TEST_F(PipelineTest, AnEmbeddersLowerThreadLimitIsKeptWithoutAWarning) {
  const std::string zst = ReadFile(PILEPREP_TEST_DATA_DIR "/bad/multi-frame.jsonl.zst");
  const std::string free_run = Run(zst, InputFormat::kZstd, 1 << 16, 4, 1 << 20);
  ASSERT_FALSE(free_run.empty());
  tbb::global_control cap(tbb::global_control::max_allowed_parallelism, 1);
  ::testing::internal::CaptureStderr();
  const std::string capped = Run(zst, InputFormat::kZstd, 1 << 16, 4, 1 << 20);
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(capped, free_run);
  EXPECT_EQ(printed, "");
}

// Stats too: line numbers of bad records (some at batch edges when a batch is one line), counts,
// bytes read.
TEST_F(PipelineTest, MappedFileGivesTheBytesAndStatsOfTheStreamedOne) {
  const std::string sample = Decompress(ReadFile(PILEPREP_SOURCE_DIR "/data/samples/01.jsonl.zst"));
  ASSERT_GT(sample.size(), 100000u);
  const std::string plain = ReplaceEveryNthLine(sample, 97, "not json\n");
  ShardStats streamed_stats;
  const std::string streamed =
      Run(plain, InputFormat::kPlain, 1 << 16, 2, 1 << 20, nullptr, &streamed_stats);
  ASSERT_FALSE(streamed.empty());
  ASSERT_GT(streamed_stats.bad_records, 10u);
  const std::string path = (dir_ / "in.jsonl").string();
  WriteFile(path, plain);
  for (auto [threads, batch] : {std::pair{1, size_t{1} << 20}, {3, size_t{5000}}, {2, size_t{1}}}) {
    ShardStats stats;
    EXPECT_EQ(RunFile(path, threads, batch, nullptr, &stats), streamed) << batch;
    ExpectSameCounts(stats, streamed_stats);
    EXPECT_EQ(stats.bytes_in, plain.size());
    EXPECT_EQ(stats.bytes_decompressed, plain.size());
  }
}

// Lines are parsed where they lie in the mapping, reading up to kPadding bytes past their end; the
// last line has them only when the file's last page has that much room left after it (else the
// last batch is copied), and a batch's last line only when at least kPadding bytes follow it (else
// the rest joins the batch). The page after the file cannot be read, so an over-read would crash
// here. Files ending at several distances from a page end, with and without a final line end, with
// the last text ending at every offset within the scanner's 16-byte blocks, and with a short last
// line after a batch edge, give the streamed bytes.
TEST_F(PipelineTest, MappedFileEndingAnywhereInItsLastPageGivesTheStreamedBytes) {
  // Hundreds of small runs: a small pre-token cache (the default one is 56 MiB to fault in).
  Gpt2Tokenizer::Options small;
  small.cache_entries = 1024;
  auto tok = Gpt2Tokenizer::FromDefaultFiles(small);
  ASSERT_TRUE(tok.ok()) << tok.status();
  tokenizer_ = std::move(tok).value();
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t padding = JsonRecordParser::kPadding;
  for (size_t room : {size_t{0}, padding - 1, padding, page - 1}) {
    for (bool final_newline : {true, false}) {
      const std::string tail = final_newline ? "\"}\n" : "\"}";
      const size_t size = 2 * page - room;
      for (size_t shift = 0; shift < 16; ++shift) {
        std::string plain;
        while (plain.size() + 200 < size)
          plain += "{\"text\": \"Some words \\u00e9t\u00e9 and more\"}\n";
        // The last line fills the file to `size` exactly; `shift` spaces before its key move where
        // its text starts, and so where the scanner's blocks fall against the end of the file.
        std::string head = "{";
        head.append(shift, ' ').append("\"text\": \"");
        plain += head + std::string(size - plain.size() - head.size() - tail.size(), 'x') + tail;
        ASSERT_EQ(plain.size(), size);
        const std::string path = (dir_ / "end.jsonl").string();
        WriteFile(path, plain);
        const std::string streamed = Run(plain, InputFormat::kPlain, 1 << 16, 1, 1 << 20);
        ASSERT_FALSE(streamed.empty());
        EXPECT_EQ(RunFile(path, 1, 1 << 20), streamed)
            << "room " << room << " newline " << final_newline << " shift " << shift;
      }
      // A short last line after a line that ends a batch when each line is one. That line's key is
      // spelled with an escape, so simdjson parses it (the fast path declines such keys), and
      // simdjson reads up to 63 bytes past a string's end: `pad` spaces after the first line move
      // the string's end through every offset of simdjson's 64-byte blocks.
      for (size_t text = 0; text < 2 && room == 0; ++text) {
        for (size_t pad = 0; pad < 64; ++pad) {
          const std::string last = "{\"text\":\"" + std::string(text, 'y') + tail;
          std::string plain = "{\"text\": \"first\"}" + std::string(pad, ' ') + "\n";
          while (plain.size() + 200 < size) plain += "{\"text\": \"Some words\"}\n";
          const std::string head = "{\"te\\u0078t\": \"";
          plain += head + std::string(size - plain.size() - last.size() - head.size() - 3, 'x');
          plain += "\"}\n" + last;
          ASSERT_EQ(plain.size(), size);
          const std::string path = (dir_ / "short.jsonl").string();
          WriteFile(path, plain);
          const std::string streamed = Run(plain, InputFormat::kPlain, 1 << 16, 1, 1 << 20);
          ASSERT_FALSE(streamed.empty());
          EXPECT_EQ(RunFile(path, 1, 1), streamed)
              << "newline " << final_newline << " last " << last << " pad " << pad;
        }
      }
    }
  }
}

// A source's View() of any buffer (ViewSlack() 0, the default: nothing past the view may be read):
// the last lines are copied and padded, never read past the view's end. Here the buffer ends right
// before a page that cannot be read, so an over-read crashes; the pipeline took every view to be
// readable to the end of its last page, as a mapped file is, and read past such a buffer (found by
// tests/fuzz/pipeline_fuzz_target.h under ASan).
TEST_F(PipelineTest, AViewWithoutSlackIsNeverReadPastItsEnd) {
  std::string lines;
  for (int i = 0; i < 50; ++i)
    lines += "{\"text\": \"line " + std::to_string(i) + " caf\u00e9\"}\n";
  for (const std::string& plain :
       {lines, lines + "{\"text\": \"no final line end\"}", std::string("{\"text\": \"one\"}\n"),
        std::string("{\"text\": \"x\"}")}) {
    const std::string streamed = Run(plain, InputFormat::kPlain, 1 << 16, 1, 1 << 20);
    ASSERT_FALSE(streamed.empty());
    for (size_t batch_bytes : {size_t{1}, size_t{100}, size_t{1} << 20}) {
      testing::GuardedViewSource source(plain);
      ASSERT_TRUE(source.ok());
      absl::Status status;
      EXPECT_EQ(RunSource(source, InputFormat::kPlain, 2, batch_bytes, &status, nullptr, {}),
                streamed)
          << batch_bytes;
      EXPECT_TRUE(status.ok()) << status;
    }
  }
}

// A batch that ends before a line too long is parsed where it lies too, read up to kPadding bytes
// past its last line end; with a max_line_bytes below kPadding, fewer may follow it before the end
// of the file. A mapped file of exactly one page (no zeros after it, the guard page next): the
// batch is copied, and the run fails at that line as a streamed one does, instead of crashing.
TEST_F(PipelineTest, ABatchBeforeALineTooLongNearTheEndOfAViewIsNotReadPastIt) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  for (size_t max_line : {size_t{4}, size_t{20}, size_t{40}, size_t{60}}) {
    // Lines of at most 4 bytes (bad records: the limit is off), then one too long.
    const std::string line = "\"a\"\n";
    const std::string tail(max_line + 3, 'x');  // too long, and no line end
    std::string head;
    while (head.size() + line.size() + tail.size() + 3 <= page) head += "{}\n";
    head += std::string(page - head.size() - line.size() - tail.size(), '\n');  // blank lines
    const std::string plain = head + line + tail;
    ASSERT_EQ(plain.size(), page);
    const std::string path = (dir_ / "one_page.jsonl").string();
    WriteFile(path, plain);
    PipelineOptions options;
    options.jsonl.max_line_bytes = max_line;
    options.jsonl.max_bad_records = -1;
    absl::Status streamed_status, status;
    Run(plain, InputFormat::kPlain, 1 << 16, 1, head.size() + line.size() + 1, &streamed_status,
        nullptr, options);
    auto source = OpenFileSource(path, {.map = true});
    ASSERT_TRUE(source.ok()) << source.status();
    ASSERT_TRUE((*source)->View().has_value());
    RunSource(**source, InputFormat::kPlain, 1, head.size() + line.size() + 1, &status, nullptr,
              options);
    EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
    const std::string want(streamed_status.message());
    EXPECT_TRUE(absl::EndsWith(status.message(), want.substr(want.find(": line "))))
        << status << " against " << streamed_status;
    EXPECT_NE(
        want.find(": line " + std::to_string(std::count(plain.begin(), plain.end(), '\n') + 1) +
                  ": line too long"),
        std::string::npos)
        << streamed_status;
  }
}

// Caches the caller keeps (PipelineOptions::caches), made ahead or by the run, carry from one run
// to the next and never change the output.
TEST_F(PipelineTest, CallersCachesAreFilledKeptAndReusedWithTheSameOutput) {
  // Every piece in the tiers, long CJK runs too (by default they are merged every time), so that what
  // the first run merged is what a kept cache holds.
  auto tok = Gpt2Tokenizer::FromDefaultFiles({.cache_long_cjk_runs = true});
  ASSERT_TRUE(tok.ok()) << tok.status();
  tokenizer_ = std::move(tok).value();
  const std::string sample = Decompress(ReadFile(PILEPREP_SOURCE_DIR "/data/samples/00.jsonl.zst"));
  const std::string want = Run(sample, InputFormat::kPlain, 1 << 16, 3, 1 << 16);
  ASSERT_FALSE(want.empty());
  std::vector<std::unique_ptr<Gpt2Tokenizer::Cache>> caches;
  caches.push_back(std::make_unique<Gpt2Tokenizer::Cache>(tokenizer_->options()));  // made ahead
  const Gpt2Tokenizer::Cache* ahead = caches[0].get();
  PipelineOptions options;
  options.caches = &caches;
  // One thread: one slot does all the work, so its cache sees every piece in every run.
  const uint64_t merged_before = ahead->stats().merged;
  uint64_t merged_first_run = 0;
  for (int run = 0; run < 3; ++run) {
    EXPECT_EQ(Run(sample, InputFormat::kPlain, 1 << 16, 1, 1 << 16, nullptr, nullptr, options),
              want)
        << run;
    ASSERT_EQ(caches.size(), 1u);
    EXPECT_EQ(caches[0].get(), ahead);
    if (run == 0) merged_first_run = ahead->stats().merged - merged_before;
  }
  // The later runs hit what the first merged (a fresh cache would merge as much again each run).
  EXPECT_GT(merged_first_run, 0u);
  EXPECT_LT(ahead->stats().merged - merged_before, merged_first_run + merged_first_run / 10);
  // Three threads: the vector grows to a cache per slot, the output stays the same.
  EXPECT_EQ(Run(sample, InputFormat::kPlain, 1 << 16, 3, 1 << 16, nullptr, nullptr, options), want);
  EXPECT_EQ(caches.size(), 3u);
  EXPECT_EQ(caches[0].get(), ahead);

  // With the default options a kept cache helps too: a second run merges the long CJK runs again
  // (about an eighth of what the first merged, in this sample), little else.
  auto plain = Gpt2Tokenizer::FromDefaultFiles({});
  ASSERT_TRUE(plain.ok()) << plain.status();
  tokenizer_ = std::move(plain).value();
  std::vector<std::unique_ptr<Gpt2Tokenizer::Cache>> kept;
  options.caches = &kept;
  EXPECT_EQ(Run(sample, InputFormat::kPlain, 1 << 16, 1, 1 << 16, nullptr, nullptr, options), want);
  ASSERT_EQ(kept.size(), 1u);
  const uint64_t first = kept[0]->stats().merged;
  EXPECT_EQ(Run(sample, InputFormat::kPlain, 1 << 16, 1, 1 << 16, nullptr, nullptr, options), want);
  EXPECT_GT(first, 0u);
  EXPECT_LT(kept[0]->stats().merged - first, first / 5);
}

// Read with read(2), a file is read to the size it had when opened: a file truncated meanwhile
// fails naming it (not a shorter input), and bytes appended meanwhile are not read.
TEST_F(PipelineTest, ReadFileThatShrinksFailsNamingItAndOneThatGrowsIsReadToItsOpeningSize) {
  const std::string plain(3 * 65536, 'x');
  const std::string path = (dir_ / "changes.jsonl").string();
  WriteFile(path, plain);
  auto source = OpenFileSource(path);
  ASSERT_TRUE(source.ok()) << source.status();
  std::string buffer(70000, '\0');
  absl::StatusOr<size_t> n = (*source)->Read(buffer.data(), 1000);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 1000u);
  ASSERT_EQ(::truncate(path.c_str(), 500), 0);
  n = (*source)->Read(buffer.data(), buffer.size());
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(n.status().message(), path + ": the file shrank from " + std::to_string(plain.size()) +
                                      " to 500 bytes while it was being read");

  WriteFile(path, plain);
  auto grows = OpenFileSource(path);
  ASSERT_TRUE(grows.ok()) << grows.status();
  {
    std::ofstream append(path, std::ios::app | std::ios::binary);
    append << "{\"text\": \"appended later\"}\n";
  }
  size_t total = 0;
  while (true) {
    n = (*grows)->Read(buffer.data(), buffer.size());
    ASSERT_TRUE(n.ok()) << n.status();
    if (*n == 0) break;
    total += *n;
  }
  EXPECT_EQ(total, plain.size());

  // A file whose size reads 0 but that has content (/proc) is read to its end.
  auto proc = OpenFileSource("/proc/self/status");
  ASSERT_TRUE(proc.ok()) << proc.status();
  n = (*proc)->Read(buffer.data(), buffer.size());
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_GT(*n, 0u);
}

TEST_F(PipelineTest, FileIsReadUnlessMappingIsAskedForAndGivesTheStreamedBytes) {
  std::string plain;
  while (plain.size() < 3 * 65536) plain += "{\"text\": \"a line of text\"}\n";
  const std::string streamed = Run(plain, InputFormat::kPlain, 1 << 16, 2, 1 << 16);
  ASSERT_FALSE(streamed.empty());
  const std::string path = (dir_ / "read.jsonl").string();
  WriteFile(path, plain);
  auto read = OpenFileSource(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_FALSE((*read)->View().has_value());
  EXPECT_EQ(RunSource(**read, InputFormat::kPlain, 2, 1 << 16, nullptr, nullptr, {}), streamed);
  auto mapped = OpenFileSource(path, {.map = true});
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_TRUE((*mapped)->View().has_value());
}

TEST_F(PipelineTest, ReadAheadWindowOfAnySizeReadsExactlyTheFile) {
  std::string bytes;
  for (int i = 0; bytes.size() < 300000; ++i) bytes += "line " + std::to_string(i) + "\n";
  const std::string path = (dir_ / "ahead.jsonl").string();
  WriteFile(path, bytes);
  for (size_t window : {size_t{0}, size_t{1}, size_t{4096}, size_t{100000}, size_t{64} << 20}) {
    auto source = OpenFileSource(path, {.readahead_bytes = window});
    ASSERT_TRUE(source.ok()) << source.status();
    std::string got;
    char buffer[7919];  // a prime: reads end at every offset modulo a page
    while (true) {
      absl::StatusOr<size_t> n = (*source)->Read(buffer, sizeof buffer);
      ASSERT_TRUE(n.ok()) << n.status();
      if (*n == 0) break;
      got.append(buffer, *n);
    }
    EXPECT_EQ(got, bytes) << "readahead window " << window;
  }
}

TEST_F(PipelineTest, MappedFileThatShrinksFailsNamingItAndPublishesNothing) {
#ifdef MADV_POPULATE_READ
  {
    // Fetch finds the shrink with MADV_POPULATE_READ (Linux 5.14); without it the read that
    // follows would raise SIGBUS, which this test is not about.
    void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    const bool supported = ::madvise(p, 4096, MADV_POPULATE_READ) == 0;
    ::munmap(p, 4096);
    if (!supported) GTEST_SKIP() << "this kernel has no MADV_POPULATE_READ";
  }
#else
  GTEST_SKIP() << "built without MADV_POPULATE_READ";
#endif
  std::string plain;
  while (plain.size() < 3 * 65536) plain += "{\"text\": \"a line of text\"}\n";
  const std::string path = (dir_ / "shrinks.jsonl").string();
  const size_t line_bytes = plain.find('\n') + 1;
  // The file in one batch, or in batches of 64 KiB: then the read stage looks for the end of the
  // line that crosses 64 KiB, past the file's new end (that search raised SIGBUS: it read the
  // bytes before fetching them). Cut to 1000 or 66,000 bytes, inside the first batch or inside its
  // search, the whole lines before the cut count, as a streamed input's do before a read error
  // (they were dropped with the batch).
  struct Case {
    size_t batch_bytes;
    size_t cut_to;
  };
  for (const Case c : {Case{PipelineOptions{}.batch_bytes, 1000}, Case{size_t{1} << 16, 1000},
                       Case{size_t{1} << 16, 66000}}) {
    SCOPED_TRACE(::testing::Message() << "batches of " << c.batch_bytes << ", cut to " << c.cut_to);
    WriteFile(path, plain);
    auto source = OpenFileSource(path, {.map = true});
    ASSERT_TRUE(source.ok()) << source.status();
    ASSERT_TRUE((*source)->View().has_value());
    ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(c.cut_to)), 0);
    absl::Status fetched = (*source)->Fetch(0, plain.size());
    EXPECT_EQ(fetched.code(), absl::StatusCode::kDataLoss) << fetched;
    EXPECT_NE(
        fetched.message().find(path + ": the file shrank from " + std::to_string(plain.size()) +
                               " to " + std::to_string(c.cut_to) + " bytes"),
        std::string::npos)
        << fetched;

    PipelineOptions options;
    options.writer.sync = false;
    options.batch_bytes = c.batch_bytes;
    ShardStats stats;
    const std::string prefix = (dir_ / "out").string();
    absl::Status s =
        RunPipeline(**source, InputFormat::kPlain, *tokenizer_, {prefix}, options, &stats);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_NE(s.message().find("shrank"), std::string::npos) << s;
    // The whole lines before the cut count, as a streamed input's before the read error (the page
    // that holds the cut can be read, and its rest, zeros, pads the last line).
    EXPECT_EQ(stats.lines, c.cut_to / line_bytes);
    EXPECT_EQ(stats.documents, stats.lines);
    EXPECT_FALSE(fs::exists(prefix + ".bin"));
    EXPECT_FALSE(fs::exists(prefix + ".idx"));
  }
}

TEST_F(PipelineTest, PlainAndZstdInputsAgree) {
  const std::string plain =
      "{\"text\": \"Hello world\"}\n{\"text\": \"\"}\r\n{\"text\": \"second doc\"}";
  ShardStats stats;
  const std::string out = Run(plain, InputFormat::kPlain, 3, 2, 8, nullptr, &stats);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(stats.documents, 3u);
  EXPECT_EQ(stats.empty_documents, 1u);
  EXPECT_EQ(stats.tokens, 3u + 3u);  // Hello world EOD, second doc EOD
  // The same lines as .jsonl.zst, read in small pieces: the same outputs and counts.
  ShardStats zstd_stats;
  EXPECT_EQ(Run(Compress(plain), InputFormat::kZstd, 3, 2, 8, nullptr, &zstd_stats), out);
  ExpectSameCounts(zstd_stats, stats);
}

TEST_F(PipelineTest, BadRecordsAreCountedWithAbsoluteLineNumbers) {
  std::string plain;
  for (int i = 1; i <= 50; ++i) {
    plain += (i % 10 == 0) ? "not json\n" : "{\"text\": \"line " + std::to_string(i) + "\"}\n";
  }
  ShardStats stats;
  Run(plain, InputFormat::kPlain, 5, 3, 16, nullptr, &stats);
  EXPECT_EQ(stats.bad_records, 5u);
  ASSERT_EQ(stats.bad_record_samples.size(), 5u);
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(stats.bad_record_samples[k].line, 10u * (k + 1));
    EXPECT_EQ(stats.bad_record_samples[k].kind, BadRecordKind::kInvalidJson);
  }
  EXPECT_EQ(stats.documents, 45u);
}

TEST_F(PipelineTest, TooManyBadRecordsFailAndPublishNothing) {
  std::string plain = "{\"text\": \"fine\"}\n";
  for (int i = 0; i < 20; ++i) plain += "{\"txt\": \"wrong key\"}\n";
  PipelineOptions options;
  options.jsonl.max_bad_records = 10;
  absl::Status status;
  EXPECT_EQ(Run(plain, InputFormat::kPlain, 1 << 16, 2, 64, &status, nullptr, options), "");
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("more than 10 bad records (the first at line 2: missing key"),
            std::string::npos)
      << status;
  EXPECT_NE(status.message().find("the limit passed at line 12)"), std::string::npos) << status;
  EXPECT_NE(status.message().find("--max-bad-records"), std::string::npos);
  for (const auto& e : fs::directory_iterator(dir_)) ADD_FAILURE() << "left " << e.path();
  // The count the run stops at (the summary's "bad") is the limit plus one, and the documents and
  // lines are those before the line that passed it, however the input is cut into batches: one
  // batch for all, or a few lines each.
  for (size_t batch_bytes : {size_t{1} << 16, size_t{64}}) {
    ShardStats stats;
    Run(plain, InputFormat::kPlain, 1 << 16, 2, batch_bytes, &status, &stats, options);
    EXPECT_FALSE(status.ok());
    EXPECT_EQ(stats.bad_records, 11u) << "batches of " << batch_bytes << " bytes";
    EXPECT_EQ(stats.documents, 1u) << "batches of " << batch_bytes << " bytes";
    EXPECT_EQ(stats.tokens, 2u) << "batches of " << batch_bytes << " bytes";  // "fine", EOD
    EXPECT_EQ(stats.lines, 12u) << "batches of " << batch_bytes << " bytes";
  }
}

// A run stopped by the bad-records limit counts the U+FFFD repairs of the lines it got to, the
// line that passed the limit included, as it counts their documents, however the input is cut into
// batches: a batch that held the line counted none of its repairs, so one batch for all gave 0 and
// small batches all but the last batch's (found by tests/fuzz/pipeline_fuzz_target.h).
TEST_F(PipelineTest, ARunStoppedByBadRecordsCountsTheRepairsOfTheLinesItGotTo) {
  const std::string plain =
      "{\"text\": \"a\xff\"}\n"                        // a document, one repair
      "{\"text\" \xff\xfe: 1}\n"                       // bad, two repairs
      "not json \xff \\ud800\n"                        // bad: the limit passed, one repair
      "{\"text\": \"later \xff\xff\xff \\udc00\"}\n";  // not reached
  PipelineOptions options;
  options.jsonl.max_bad_records = 1;
  for (int threads : {1, 2, 3}) {
    for (size_t batch_bytes : {size_t{1}, size_t{20}, size_t{40}, size_t{1} << 20}) {
      SCOPED_TRACE(::testing::Message() << threads << " threads, batches of " << batch_bytes);
      absl::Status status;
      ShardStats stats;
      EXPECT_EQ(Run(plain, InputFormat::kPlain, 7, threads, batch_bytes, &status, &stats, options),
                "");
      EXPECT_NE(status.message().find("the limit passed at line 3)"), std::string::npos) << status;
      EXPECT_EQ(stats.lines, 3u);
      EXPECT_EQ(stats.documents, 1u);
      EXPECT_EQ(stats.replaced_invalid_utf8, 4u);
      EXPECT_EQ(stats.replaced_lone_surrogates, 1u);  // a bad line's repairs count too
    }
  }
}

// The same when the line that passes the limit comes after tens of thousands of bad lines in its
// batch (a high limit, a run of blank lines): the batch's documents, repairs and the line it got to
// count with any batch size. (The places of a batch's first 65,536 bad lines were kept; past them
// its counts were left out, and the message lost "the limit passed at line N".)
TEST_F(PipelineTest, ARunStoppedByBadRecordsDeepInABatchCountsWhatItGotTo) {
  std::string plain;
  for (int i = 0; i < 10; ++i) plain += "{\"text\": \"doc " + std::to_string(i) + " \xff\"}\n";
  plain += std::string(100000, '\n');
  plain += "{\"text\": \"after\"}\n";
  PipelineOptions options;
  options.jsonl.max_bad_records = 70000;
  for (size_t batch_bytes : {size_t{1} << 20, size_t{4096}}) {
    SCOPED_TRACE(::testing::Message() << "batches of " << batch_bytes);
    absl::Status status;
    ShardStats stats;
    EXPECT_EQ(Run(plain, InputFormat::kPlain, 1 << 16, 2, batch_bytes, &status, &stats, options),
              "");
    EXPECT_NE(status.message().find("the limit passed at line 70011)"), std::string::npos)
        << status;
    EXPECT_EQ(stats.bad_records, 70001u);
    EXPECT_EQ(stats.lines, 70011u);
    EXPECT_EQ(stats.documents, 10u);
    EXPECT_EQ(stats.replaced_invalid_utf8, 10u);
    EXPECT_GT(stats.tokens, 20u);
  }
}

TEST_F(PipelineTest, CorruptZstdFailsWithOffsetAndPublishesNothing) {
  std::string zst = ReadFile(PILEPREP_SOURCE_DIR "/data/samples/01.jsonl.zst");
  zst.resize(zst.size() / 2);
  absl::Status status;
  EXPECT_EQ(Run(zst, InputFormat::kZstd, 1 << 16, 2, 1 << 16, &status), "");
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("memory.jsonl.zst: byte"), std::string::npos) << status;
  for (const auto& e : fs::directory_iterator(dir_)) ADD_FAILURE() << "left " << e.path();
}

// zstd input is decoded on a thread of its own by default (PipelineOptions::zstd_decode_thread) or in
// the read stage: the same bytes and the same stats (bad records' line numbers, bytes read), for any
// chunking, thread count and batch size.
TEST_F(PipelineTest, ZstdDecodedOnItsOwnThreadOrInTheReadStageGivesTheSameBytesAndStats) {
  const std::string sample = Decompress(ReadFile(PILEPREP_SOURCE_DIR "/data/samples/01.jsonl.zst"));
  const std::string plain = ReplaceEveryNthLine(sample, 89, "{\"txt\": 1}\n");
  const std::string zst = Compress(plain);
  PipelineOptions in_stage;
  in_stage.zstd_decode_thread = false;
  ShardStats want;
  const std::string expected =
      Run(zst, InputFormat::kZstd, 1 << 16, 2, 1 << 20, nullptr, &want, in_stage);
  ASSERT_FALSE(expected.empty());
  ASSERT_GT(want.bad_records, 10u);
  EXPECT_EQ(want.bytes_in, zst.size());
  EXPECT_EQ(want.bytes_decompressed, plain.size());
  for (auto [chunk, threads, batch] :
       {std::tuple{size_t{1} << 16, 1, size_t{1} << 20}, {size_t{4093}, 2, size_t{5000}},
        {size_t{1} << 20, 3, size_t{1}}}) {
    for (bool own_thread : {true, false}) {
      PipelineOptions options;
      options.zstd_decode_thread = own_thread;
      ShardStats stats;
      EXPECT_EQ(Run(zst, InputFormat::kZstd, chunk, threads, batch, nullptr, &stats, options),
                expected)
          << own_thread << " " << threads << " " << batch;
      ExpectSameCounts(stats, want);
      EXPECT_EQ(stats.bytes_in, want.bytes_in);
      EXPECT_EQ(stats.bytes_decompressed, want.bytes_decompressed);
    }
  }
}

// A source that notes which threads read it.
class ThreadNotingSource : public ByteSource {
 public:
  explicit ThreadNotingSource(std::string data) : inner_(std::move(data), 4096) {}
  absl::StatusOr<size_t> Read(char* buffer, size_t capacity) override {
    std::lock_guard<std::mutex> lock(mu_);
    readers_.insert(std::this_thread::get_id());
    return inner_.Read(buffer, capacity);
  }
  const std::string& name() const override { return inner_.name(); }
  std::set<std::thread::id> readers() {
    std::lock_guard<std::mutex> lock(mu_);
    return readers_;
  }

 private:
  MemorySource inner_;
  std::mutex mu_;
  std::set<std::thread::id> readers_;
};

// With one worker the pipeline runs on the caller's thread; zstd input is read and decoded on
// another one, unless zstd_decode_thread is off. Plain input is always read in the read stage.
TEST_F(PipelineTest, ZstdIsReadOnAThreadOfItsOwnUnlessAskedNot) {
  const std::string sample = Decompress(ReadFile(PILEPREP_SOURCE_DIR "/data/samples/01.jsonl.zst"));
  const std::string zst = Compress(sample);
  const std::thread::id caller = std::this_thread::get_id();
  for (auto [format, own_thread, want_caller] :
       {std::tuple{InputFormat::kZstd, true, false}, {InputFormat::kZstd, false, true},
        {InputFormat::kPlain, true, true}}) {
    ThreadNotingSource source(format == InputFormat::kZstd ? zst : sample);
    PipelineOptions options;
    options.zstd_decode_thread = own_thread;
    const std::string out = RunSource(source, format, 1, 1 << 16, nullptr, nullptr, options);
    EXPECT_FALSE(out.empty());
    const std::set<std::thread::id> readers = source.readers();
    ASSERT_FALSE(readers.empty());
    EXPECT_EQ(readers.size(), 1u);
    EXPECT_EQ(readers.count(caller) == 1, want_caller)
        << (format == InputFormat::kZstd ? "zstd" : "plain") << " " << own_thread;
  }
}

// A source that fails, or raises the cancel flag, after handing out `good` bytes.
class FailingSource : public ByteSource {
 public:
  FailingSource(std::string data, size_t good, std::atomic<bool>* cancel)
      : inner_(std::move(data), 4096), good_(good), cancel_(cancel) {}
  absl::StatusOr<size_t> Read(char* buffer, size_t capacity) override {
    if (given_ >= good_) {
      if (cancel_ == nullptr) return absl::UnavailableError("memory.jsonl.zst: connection reset");
      cancel_->store(true);
    }
    absl::StatusOr<size_t> n = inner_.Read(buffer, capacity);
    if (n.ok()) given_ += *n;
    return n;
  }
  const std::string& name() const override { return inner_.name(); }

 private:
  MemorySource inner_;
  size_t good_;
  size_t given_ = 0;
  std::atomic<bool>* cancel_;
};

// Whichever thread decodes: a read error, corrupt data, cancellation, or a failure in the write stage
// while the decoder is ahead of it (too many bad records) fails the run with its own message and
// publishes nothing, and the run returns (the decoding thread stops).
TEST_F(PipelineTest, ZstdRunFailsTheSameWhicheverThreadDecodes) {
  const std::string sample = Decompress(ReadFile(PILEPREP_SOURCE_DIR "/data/samples/01.jsonl.zst"));
  const std::string zst = Compress(sample);
  std::string bad_lines;
  for (int i = 0; i < 20000; ++i) bad_lines += "{\"txt\": \"wrong key " + std::to_string(i) + "\"}\n";
  const std::string bad_zst = Compress(bad_lines);
  for (bool own_thread : {true, false}) {
    SCOPED_TRACE(own_thread ? "own thread" : "read stage");
    for (int threads : {1, 3}) {
      PipelineOptions base;
      base.zstd_decode_thread = own_thread;
      base.threads = threads;
      base.batch_bytes = 4096;
      base.writer.sync = false;
      auto run = [&](ByteSource& source, PipelineOptions options) {
        const std::string prefix = (dir_ / "f").string() + std::to_string(run_++);
        ShardStats stats;
        absl::Status s =
            RunPipeline(source, InputFormat::kZstd, *tokenizer_, {prefix}, options, &stats);
        for (const auto& e : fs::directory_iterator(dir_)) ADD_FAILURE() << "left " << e.path();
        return s;
      };
      FailingSource reset(zst, zst.size() / 3, nullptr);
      absl::Status s = run(reset, base);
      EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
      EXPECT_NE(s.message().find("connection reset"), std::string::npos) << s;

      std::atomic<bool> cancel{false};
      FailingSource cancelling(zst, zst.size() / 3, &cancel);
      PipelineOptions with_cancel = base;
      with_cancel.cancel = &cancel;
      s = run(cancelling, with_cancel);
      EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
      EXPECT_EQ(s.message(), "memory.jsonl.zst: cancelled");

      std::string corrupt = zst;
      corrupt[corrupt.size() / 2] ^= 0x55;
      MemorySource corrupt_source(corrupt, 1 << 16);
      s = run(corrupt_source, base);
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
      EXPECT_NE(s.message().find("memory.jsonl.zst: byte "), std::string::npos) << s;

      PipelineOptions strict = base;
      strict.jsonl.max_bad_records = 10;
      MemorySource bad_source(bad_zst, 1 << 16);
      s = run(bad_source, strict);
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
      EXPECT_NE(s.message().find("more than 10 bad records"), std::string::npos) << s;
    }
  }
}

// A line past max_line_bytes fails the input at that line, in the same words however it is found:
// by the parser (the line ended within a batch, or the input is mapped) or by the read stage, which
// stops buffering an unended line once it is longer than that, rather than reading all of it into
// memory first (a file with no line end, or a small .zst that decodes to gigabytes of one line).
TEST_F(PipelineTest, LineTooLongFailsAtItsLineWithoutBufferingTheRestOfIt) {
  // Two good lines, then one of `long_bytes` bytes without an end; made as it is read.
  class LongLineSource : public ByteSource {
   public:
    LongLineSource(std::string head, uint64_t long_bytes)
        : head_(std::move(head)), total_(head_.size() + long_bytes) {}
    absl::StatusOr<size_t> Read(char* buffer, size_t capacity) override {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(capacity, total_ - served_));
      for (size_t i = 0; i < n; ++i) {
        const uint64_t at = served_ + i;
        buffer[i] = at < head_.size() ? head_[at] : 'x';
      }
      served_ += n;
      return n;
    }
    const std::string& name() const override { return name_; }
    uint64_t served() const { return served_; }

   private:
    std::string head_;
    uint64_t total_;
    uint64_t served_ = 0;
    std::string name_ = "long.jsonl";
  };
  const std::string head = "{\"text\": \"one\"}\n{\"text\": \"two\"}\n";
  const std::string want = ": line 3: line too long: more than 100000 bytes (max_line_bytes)";
  for (int threads : {1, 3}) {
    for (size_t batch_bytes : {size_t{64}, size_t{1} << 16}) {
      SCOPED_TRACE(::testing::Message() << threads << " threads, batches of " << batch_bytes);
      PipelineOptions options;
      options.jsonl.max_line_bytes = 100000;
      // 256 MB unended: the read stage stops within a read or two of the limit.
      LongLineSource source(head, uint64_t{256} << 20);
      absl::Status status;
      EXPECT_EQ(
          RunSource(source, InputFormat::kPlain, threads, batch_bytes, &status, nullptr, options),
          "");
      EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
      EXPECT_EQ(status.message(), "long.jsonl" + want);
      EXPECT_LT(source.served(), uint64_t{8} << 20);

      // The same line ended, where the parser finds it: the same error.
      std::string ended = head + std::string(100001, 'x') + "\n{\"text\": \"four\"}\n";
      EXPECT_EQ(
          Run(ended, InputFormat::kPlain, 1 << 12, threads, batch_bytes, &status, nullptr, options),
          "");
      EXPECT_EQ(status.message(), "memory.jsonl.zst" + want);
      // From .zst, decoded on its own thread or in the read stage.
      for (bool own_thread : {true, false}) {
        options.zstd_decode_thread = own_thread;
        EXPECT_EQ(Run(Compress(head + std::string(size_t{16} << 20, 'x')), InputFormat::kZstd,
                      1 << 16, threads, batch_bytes, &status, nullptr, options),
                  "");
        EXPECT_EQ(status.message(), "memory.jsonl.zst" + want);
      }
    }
  }
  for (const auto& e : fs::directory_iterator(dir_)) ADD_FAILURE() << "left " << e.path();
  // A line of max_line_bytes, and one more byte for a '\r' before its '\n': not too long, even
  // read a byte at a time (the read stage sees the '\r' before the '\n').
  const std::string at_limit = head + "{\"text\": \"" + std::string(100000 - 12, 'y') + "\"}\r\n";
  for (size_t batch_bytes : {size_t{64}, size_t{1} << 16}) {
    PipelineOptions options;
    options.jsonl.max_line_bytes = 100000;
    EXPECT_NE(Run(at_limit, InputFormat::kPlain, 1, 2, batch_bytes, nullptr, nullptr, options), "");
  }
}

// A line past max_line_bytes in a mapped input fails the input at its start, as when the input is
// streamed, without the rest of the line being read or copied. Where the line crosses a batch's
// end, the search for its end stops at the limit (it read the rest of the file: up to the rest of
// a 43 GB shard); in the last batch, copied (and padded) when the file ends within the parser's
// padding of a page boundary, the copy stops at the line (it was copied whole). The view's pages
// past what may be read are PROT_NONE: a read there is a crash, on any kernel (reading untouched
// anonymous memory costs no RSS where the kernel maps its zero page, but this VM's 6.18 gives it
// pages); a copy also shows in the peak RSS.
TEST_F(PipelineTest, AMappedLongLineFailsWithoutBeingReadOrCopiedPastTheLimit) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The allocator's quarantine and shadow memory make RSS meaningless here; the PROT_NONE pages
  // still catch a read too far.
  constexpr bool kRssMeaningful = false;
#else
  constexpr bool kRssMeaningful = true;
#endif
  // A view of anonymous memory: `head`, zeros after it, and no access from byte `readable` on
  // (rounded up to a page).
  class ViewSource : public ByteSource {
   public:
    ViewSource(const std::string& head, size_t size, size_t readable) : size_(size) {
      map_ = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (map_ == MAP_FAILED) return;
      std::memcpy(map_, head.data(), head.size());
      const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
      const size_t from = (readable + page - 1) / page * page;
      if (from < size_ &&
          ::mprotect(static_cast<char*>(map_) + from, size_ - from, PROT_NONE) != 0) {
        ::munmap(map_, size_);
        map_ = MAP_FAILED;
      }
    }
    ~ViewSource() override {
      if (map_ != MAP_FAILED) ::munmap(map_, size_);
    }
    bool ok() const { return map_ != MAP_FAILED; }
    absl::StatusOr<size_t> Read(char*, size_t) override {
      return absl::InternalError("read, not viewed");
    }
    const std::string& name() const override { return name_; }
    std::optional<std::string_view> View() override {
      return std::string_view(static_cast<const char*>(map_), size_);
    }

   private:
    size_t size_;
    void* map_;
    std::string name_ = "mapped.jsonl";
  };
  const std::string head = "{\"text\": \"one\"}\n{\"text\": \"two\"}\n";
  const std::string want =
      "mapped.jsonl: line 3: line too long: more than 100000 bytes (max_line_bytes)";
  constexpr size_t kMaxLine = 100000;
  constexpr size_t kBatch = size_t{1} << 20;
  // What may be read past the line's start: the limit, the '\r' of a CRLF and the '\n' looked
  // for, and the parser's padding.
  constexpr size_t kSlack = kMaxLine + 2 + JsonRecordParser::kPadding;
  struct Case {
    const char* what;
    size_t size;  // of the view
    size_t batch_bytes;
    size_t readable;  // bytes of the view that may be read
    bool check_rss;
  };
  const Case cases[] = {
      // The line crosses the first batch's end, 256 MB of it: the search for its end may read up
      // to the limit past the batch's end.
      {"crossing a batch's end, ending 10 bytes short of a page", (size_t{256} << 20) - 10, kBatch,
       kBatch + kSlack, true},
      {"crossing a batch's end, ending 1000 bytes short of a page", (size_t{256} << 20) - 1000,
       kBatch, kBatch + kSlack, true},
      // The input is one batch, the last, copied (it ends 10 bytes short of a page): the copy may
      // read up to the limit past the line's start. (The batch's 32 MB of ids weigh in the RSS.)
      {"in the last batch, copied", (size_t{8} << 20) - 10, size_t{16} << 20, head.size() + kSlack,
       false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ViewSource source(head, c.size, c.readable);
    ASSERT_TRUE(source.ok());
    PipelineOptions options;
    options.jsonl.max_line_bytes = kMaxLine;
    const bool check_rss = kRssMeaningful && c.check_rss && ResetPeakRss();
    const long base = check_rss ? ProcStatusKiB("VmHWM") : 0;
    absl::Status status;
    ShardStats stats;
    EXPECT_EQ(RunSource(source, InputFormat::kPlain, 2, c.batch_bytes, &status, &stats, options),
              "");
    EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
    EXPECT_EQ(status.message(), want);
    EXPECT_EQ(stats.lines, 2u);  // the lines before it count
    EXPECT_EQ(stats.documents, 2u);
    // Measured: 73-76 MB (the workers' caches, made in the run); 334 MB when the line was copied.
    // (Without /proc/self/clear_refs the peak cannot be reset, and only the crash is checked.)
    if (check_rss) {
      EXPECT_LT(ProcStatusKiB("VmHWM") - base, 160L << 10) << "KiB of peak RSS growth";
    }
  }
}

// A failed input's counts are how far it got: the lines before a line too long are parsed,
// tokenized and counted whoever finds the line, the read stage (the line unended past the limit at
// the end of a read, or at the end of a mapped batch's search) or the parser (the line ended within
// what was read, or mapped). The parser's find counted none of its batch's lines, so the counts
// of the same input depended on where reads ended and on whether it was mapped.
TEST_F(PipelineTest, ALineTooLongCountsTheLinesBeforeItHoweverItIsFound) {
  const std::string head = "{\"text\": \"one\"}\n{\"text\": \"two \\ud800\"}\n";
  const std::string plain = head + std::string(300000, 'x') + "\n{\"text\": \"four\"}\n";
  const std::string path = (dir_ / "long.jsonl").string();
  WriteFile(path, plain);
  const std::string want = ": line 3: line too long: more than 100000 bytes (max_line_bytes)";
  PipelineOptions options;
  options.jsonl.max_line_bytes = 100000;
  ShardStats before;  // the counts of the two lines before it
  ASSERT_NE(Run(head, InputFormat::kPlain, 1 << 16, 1, 1 << 16, nullptr, &before, options), "");
  ASSERT_EQ(before.documents, 2u);
  ASSERT_EQ(before.replaced_lone_surrogates, 1u);
  fs::remove(dir_ / "out0.bin");
  fs::remove(dir_ / "out0.idx");
  for (int threads : {1, 3}) {
    for (size_t batch_bytes : {size_t{64}, size_t{1} << 16, size_t{1} << 20}) {
      for (int how = 0; how < 4; ++how) {
        const char* what[] = {"reads of 4 KiB", "one read", "mapped", ".zst"};
        SCOPED_TRACE(::testing::Message()
                     << threads << " threads, batches of " << batch_bytes << ", " << what[how]);
        absl::Status status;
        ShardStats stats;
        if (how < 2) {
          EXPECT_EQ(Run(plain, InputFormat::kPlain, how == 0 ? 4096 : 1 << 20, threads, batch_bytes,
                        &status, &stats, options),
                    "");
        } else if (how == 2) {
          auto source = OpenFileSource(path, {.map = true});
          ASSERT_TRUE(source.ok()) << source.status();
          ASSERT_TRUE((*source)->View().has_value());
          EXPECT_EQ(RunSource(**source, InputFormat::kPlain, threads, batch_bytes, &status, &stats,
                              options),
                    "");
        } else {
          EXPECT_EQ(Run(Compress(plain), InputFormat::kZstd, 1 << 16, threads, batch_bytes, &status,
                        &stats, options),
                    "");
        }
        EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
        EXPECT_TRUE(absl::EndsWith(status.message(), want)) << status;
        ExpectSameCounts(stats, before);
        EXPECT_EQ(stats.replaced_lone_surrogates, 1u);
      }
    }
  }
  // The long line's file is all that is left: no output, no temporary.
  for (const auto& e : fs::directory_iterator(dir_)) {
    if (e.path() != path) ADD_FAILURE() << "left " << e.path();
  }
}

// A line too long fails the input at that line whatever comes after it: batches already read
// (and parsed) after its own, bad records after it (even past the bad-records limit), damage
// after it in a .zst. A bad record before it in the same batch that passes the limit comes first.
// The counts are those of the lines before it, however the input is read.
TEST_F(PipelineTest, ALineTooLongFailsAtItsLineWhateverIsReadAfterIt) {
  std::string head;
  for (int i = 0; i < 500; ++i) head += "{\"text\": \"line " + std::to_string(i) + "\"}\n";
  std::string tail;
  for (int i = 0; i < 20000; ++i) {
    tail += i % 3 == 0 ? "{\"txt\": 1}\n" : "{\"text\": \"more " + std::to_string(i) + "\"}\n";
  }
  const std::string plain = head + "{\"text\": \"" + std::string(3000, 'y') + "\"}\n" + tail;
  const std::string path = (dir_ / "long.jsonl").string();
  WriteFile(path, plain);
  ShardStats before;  // the lines before it
  ASSERT_NE(Run(head, InputFormat::kPlain, 1 << 16, 1, 1 << 16, nullptr, &before), "");
  // A frame header with its reserved bit set: damage the decoder refuses at once.
  const std::string damaged("\x28\xb5\x2f\xfd\x08\x00\x00\x00", 8);
  const char* what[] = {"reads of 64 KiB", "reads of 1 MiB", "mapped", ".zst, decode thread",
                        ".zst, decoded in the read stage"};
  for (int64_t max_bad : {int64_t{-1}, int64_t{0}, int64_t{5}}) {
    for (int threads : {1, 3}) {
      for (size_t batch_bytes : {size_t{64}, size_t{4096}, size_t{1} << 20}) {
        for (int how = 0; how < 5; ++how) {
          SCOPED_TRACE(::testing::Message()
                       << "max_bad_records " << max_bad << ", " << threads
                       << " threads, batches of " << batch_bytes << ", " << what[how]);
          PipelineOptions options;
          options.jsonl.max_line_bytes = 2000;
          options.jsonl.max_bad_records = max_bad;
          options.max_batches_in_flight = 16;
          absl::Status status;
          ShardStats stats;
          if (how < 2) {
            EXPECT_EQ(Run(plain, InputFormat::kPlain, how == 0 ? 1 << 16 : 1 << 20, threads,
                          batch_bytes, &status, &stats, options),
                      "");
          } else if (how == 2) {
            auto source = OpenFileSource(path, {.map = true});
            ASSERT_TRUE(source.ok()) << source.status();
            EXPECT_EQ(RunSource(**source, InputFormat::kPlain, threads, batch_bytes, &status,
                                &stats, options),
                      "");
          } else {
            options.zstd_decode_thread = how == 3;
            EXPECT_EQ(Run(Compress(plain) + damaged, InputFormat::kZstd, 1 << 20, threads,
                          batch_bytes, &status, &stats, options),
                      "");
          }
          EXPECT_TRUE(absl::EndsWith(
              status.message(), ": line 501: line too long: more than 2000 bytes (max_line_bytes)"))
              << status;
          ExpectSameCounts(stats, before);
        }
      }
    }
  }
  // A bad record before it, in the same batch, past a limit of 0: the limit fails the input.
  const std::string good = "{\"text\": \"one\"}\n";
  const std::string too_long = "{\"text\": \"" + std::string(3000, 'y') + "\"}\n";
  for (int threads : {1, 3}) {
    PipelineOptions options;
    options.jsonl.max_line_bytes = 2000;
    options.jsonl.max_bad_records = 0;
    absl::Status status;
    ShardStats stats;
    EXPECT_EQ(Run(good + "{\"txt\": \"x\"}\n" + good + too_long + good, InputFormat::kPlain,
                  1 << 16, threads, 1 << 20, &status, &stats, options),
              "");
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_NE(status.message().find("the limit passed at line 2"), std::string::npos) << status;
    EXPECT_EQ(stats.lines, 2u);
    EXPECT_EQ(stats.documents, 1u);
  }
}

// A line that U+FFFD repairs make longer than max_line_bytes (600 bytes 0xFF become 1,800) is
// found by the parser alone: the repairs in it are not counted, those before it are.
TEST_F(PipelineTest, RepairsInALineTooLongAreNotCounted) {
  const std::string head = "{\"text\": \"a\xff\"}\n";
  const std::string plain =
      head + "{\"text\": \"" + std::string(600, '\xff') + "\"}\n" + "{\"text\": \"b\xfe\"}\n";
  const std::string path = (dir_ / "repairs.jsonl").string();
  WriteFile(path, plain);
  PipelineOptions options;
  options.jsonl.max_line_bytes = 1000;
  for (int threads : {1, 3}) {
    for (int how = 0; how < 3; ++how) {
      SCOPED_TRACE(::testing::Message() << threads << " threads, "
                                        << (how == 0   ? "reads of 7 bytes"
                                            : how == 1 ? "one read"
                                                       : "mapped"));
      absl::Status status;
      ShardStats stats;
      if (how < 2) {
        EXPECT_EQ(Run(plain, InputFormat::kPlain, how == 0 ? 7 : 1 << 16, threads, 64, &status,
                      &stats, options),
                  "");
      } else {
        auto source = OpenFileSource(path, {.map = true});
        ASSERT_TRUE(source.ok()) << source.status();
        EXPECT_EQ(
            RunSource(**source, InputFormat::kPlain, threads, 1 << 20, &status, &stats, options),
            "");
      }
      EXPECT_TRUE(absl::EndsWith(status.message(),
                                 ": line 2: line too long: more than 1000 bytes (max_line_bytes)"))
          << status;
      EXPECT_EQ(stats.lines, 1u);
      EXPECT_EQ(stats.documents, 1u);
      EXPECT_EQ(stats.replaced_invalid_utf8, 1u);
    }
  }
}

// A read of 0 bytes is the end of the input: with read_bytes = 0 every input would pass as empty
// (plain) or fail as "empty" (zstd). Refused instead, naming the option.
TEST_F(PipelineTest, ZeroReadOrBatchBytesAreRefusedNotTakenForAnEmptyInput) {
  const std::string plain = "{\"text\": \"one\"}\n";
  for (bool zero_read : {true, false}) {
    PipelineOptions options;
    if (zero_read) options.read_bytes = 0;
    const size_t batch_bytes = zero_read ? 1 << 16 : 0;
    absl::Status status;
    EXPECT_EQ(Run(plain, InputFormat::kPlain, 1 << 16, 1, batch_bytes, &status, nullptr, options),
              "");
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("read_bytes and batch_bytes"), std::string_view::npos)
        << status;
  }
}

// 0 is the documented default of threads and max_batches_in_flight; a negative count is refused,
// naming both, where it was taken for the default without a word.
TEST_F(PipelineTest, NegativeThreadsOrBatchesInFlightAreRefused) {
  const std::string plain = "{\"text\": \"one\"}\n";
  for (bool negative_threads : {true, false}) {
    PipelineOptions options;
    if (!negative_threads) options.max_batches_in_flight = -3;
    absl::Status status;
    EXPECT_EQ(Run(plain, InputFormat::kPlain, 1 << 16, negative_threads ? -1 : 1, 1 << 16, &status,
                  nullptr, options),
              "");
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("threads (" + std::to_string(negative_threads ? -1 : 1) +
                                    ") and max_batches_in_flight (" +
                                    std::to_string(negative_threads ? 0 : -3) + ")"),
              std::string_view::npos)
        << status;
  }
}

// A line past max_line_bytes comes before damage later in the .zst: its error wins even when one
// decoding step appends the whole line and then meets the damage (the read stage looks at the line
// only between steps), as it does when the damage falls in a later read.
TEST_F(PipelineTest, ALineTooLongBeforeDamageInTheSameDecodingStepFailsAsTooLong) {
  const std::string head = "{\"text\": \"one\"}\n{\"text\": \"two\"}\n";
  // A frame header with its reserved bit set: damage the decoder refuses at once.
  const std::string damaged("\x28\xb5\x2f\xfd\x08\x00\x00\x00", 8);
  const std::string zst = Compress(head + std::string(300000, 'x')) + damaged;
  for (int threads : {1, 3}) {
    for (bool own_thread : {true, false}) {
      for (size_t chunk : {size_t{1} << 16, size_t{7}}) {  // all of it in one read, or in many
        SCOPED_TRACE(::testing::Message() << threads << " threads, decode thread " << own_thread
                                          << ", reads of " << chunk);
        PipelineOptions options;
        options.jsonl.max_line_bytes = 100000;
        options.zstd_decode_thread = own_thread;
        absl::Status status;
        EXPECT_EQ(Run(zst, InputFormat::kZstd, chunk, threads, size_t{1} << 20, &status, nullptr,
                      options),
                  "");
        EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
        EXPECT_EQ(status.message(),
                  "memory.jsonl.zst: line 3: line too long: more than 100000 bytes "
                  "(max_line_bytes)");
      }
    }
  }
}

// An input that fails on damage after whole lines (a .zst whose second frame is damaged) counts
// every line and document before the damage, as a FAILED row's counts are how far it got: the
// batch that ended at the damage was parsed and tokenized but left out of the counts (here 20,000
// documents counted as the first batch's few thousand).
TEST_F(PipelineTest, DamageAfterWholeLinesCountsTheDocumentsBeforeIt) {
  std::string plain;
  for (int i = 0; i < 20000; ++i) plain += "{\"text\": \"line " + std::to_string(i) + "\"}\n";
  const std::string damaged("\x28\xb5\x2f\xfd\x08\x00\x00\x00", 8);
  const std::string zst = Compress(plain) + damaged;
  ShardStats whole;  // the same lines undamaged
  ASSERT_NE(Run(Compress(plain), InputFormat::kZstd, 1 << 16, 1, 1 << 20, nullptr, &whole), "");
  ASSERT_EQ(whole.documents, 20000u);
  for (int threads : {1, 3}) {
    for (bool own_thread : {true, false}) {
      for (size_t batch_bytes : {size_t{1} << 12, size_t{1} << 20}) {
        SCOPED_TRACE(::testing::Message() << threads << " threads, decode thread " << own_thread
                                          << ", batches of " << batch_bytes);
        PipelineOptions options;
        options.zstd_decode_thread = own_thread;
        absl::Status status;
        ShardStats stats;
        EXPECT_EQ(
            Run(zst, InputFormat::kZstd, 1 << 16, threads, batch_bytes, &status, &stats, options),
            "");
        EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
        EXPECT_EQ(stats.lines, 20000u);
        EXPECT_EQ(stats.documents, 20000u);
        EXPECT_EQ(stats.tokens, whole.tokens);
      }
    }
  }
}

// The error an input fails with is the first in the input's order, whatever the thread count,
// batch size or decoding thread, and however far the read stage ran ahead: here too many bad
// records in the first lines of a .zst whose second frame is damaged a few KB later.
TEST_F(PipelineTest, FirstErrorInTheInputWinsOverALaterReadError) {
  std::string bad_lines;
  for (int i = 0; bad_lines.size() < 6000; ++i) {
    bad_lines += "{\"txt\": \"wrong key " + std::to_string(i) + "\"}\n";
  }
  std::string good_lines;
  for (int i = 0; good_lines.size() < 200000; ++i) {
    good_lines += "{\"text\": \"line " + std::to_string(i) + " of many\"}\n";
  }
  std::string second = Compress(good_lines);
  second[second.size() / 2] ^= 0x55;  // a damaged block, well inside the frame
  const std::string zst = Compress(bad_lines) + second;
  for (bool own_thread : {true, false}) {
    for (int threads : {1, 3}) {
      for (size_t batch_bytes : {size_t{4096}, size_t{1} << 16}) {
        SCOPED_TRACE(::testing::Message() << (own_thread ? "own thread, " : "read stage, ")
                                          << threads << " threads, batches of " << batch_bytes);
        PipelineOptions options;
        options.zstd_decode_thread = own_thread;
        options.jsonl.max_bad_records = 10;
        for (int round = 0; round < 10; ++round) {
          absl::Status status;
          EXPECT_EQ(Run(zst, InputFormat::kZstd, 1 << 16, threads, batch_bytes, &status, nullptr,
                        options),
                    "");
          ASSERT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
          ASSERT_NE(status.message().find("more than 10 bad records (the first at line 1"),
                    std::string::npos)
              << status;
        }
      }
    }
  }
  // The damaged frame alone: its error, as before.
  absl::Status status;
  Run(Compress(good_lines.substr(0, 100000)) + second, InputFormat::kZstd, 1 << 16, 2, 4096,
      &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find("memory.jsonl.zst: byte "), std::string::npos) << status;
  for (const auto& e : fs::directory_iterator(dir_)) ADD_FAILURE() << "left " << e.path();
}

TEST_F(PipelineTest, ZeroTokensPublishNothing) {
  ShardStats stats;
  EXPECT_EQ(Run("{\"text\": \"\"}\n", InputFormat::kPlain, 100, 1, 100, nullptr, &stats), "");
  EXPECT_FALSE(stats.published);
  EXPECT_EQ(stats.documents, 1u);
}

TEST_F(PipelineTest, UnwritableOutputLocationIsAnErrorNamingThePath) {
  // A path below a regular file cannot be created, even by root.
  std::ofstream(dir_ / "file") << "x";
  MemorySource source("{\"text\": \"x\"}\n", 100);
  ShardStats stats;
  const std::string prefix = (dir_ / "file" / "out").string();
  absl::Status s = RunPipeline(source, InputFormat::kPlain, *tokenizer_, {prefix}, {}, &stats);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(prefix), std::string::npos) << s;
}

TEST_F(PipelineTest, MultipleKeysWriteOneDatasetEach) {
  const std::string plain = "{\"a\": \"one\", \"b\": \"two words\"}\n{\"a\": \"x\", \"b\": \"\"}\n";
  MemorySource source(plain, 1000);
  PipelineOptions options;
  options.jsonl.json_keys = {"a", "b"};
  options.writer.sync = false;
  ShardStats stats;
  const std::string pa = (dir_ / "k_a").string(), pb = (dir_ / "k_b").string();
  ASSERT_TRUE(RunPipeline(source, InputFormat::kPlain, *tokenizer_, {pa, pb}, options, &stats).ok());
  auto ia = ReadIndex(pa + ".idx");
  auto ib = ReadIndex(pb + ".idx");
  ASSERT_TRUE(ia.ok() && ib.ok());
  EXPECT_EQ(ia->sequence_lengths, (std::vector<int32_t>{2, 2}));  // "one" EOD, "x" EOD
  EXPECT_EQ(ib->sequence_lengths, (std::vector<int32_t>{3}));     // "two words" EOD
  EXPECT_EQ(ib->document_indices, (std::vector<int64_t>{0, 1, 1}));
}

// A MemorySource that hands out the first half of its bytes 100 at a time, then throws
// std::bad_alloc, as a stage does when a buffer cannot grow (ulimit -v, overcommit off).
class ThrowingSource : public MemorySource {
 public:
  explicit ThrowingSource(const std::string& bytes)
      : MemorySource(bytes, 100, "throwing.jsonl"), half_(bytes.size() / 2) {}
  absl::StatusOr<size_t> Read(char* buffer, size_t capacity) override {
    if (delivered_ >= half_) throw std::bad_alloc();
    absl::StatusOr<size_t> n = MemorySource::Read(buffer, capacity);
    if (n.ok()) delivered_ += *n;
    return n;
  }

 private:
  const size_t half_;
  size_t delivered_ = 0;
};

TEST_F(PipelineTest, OutOfMemoryInAStageIsTheInputsErrorNotACrash) {
  std::string plain;
  for (int i = 0; i < 200; ++i)
    plain += "{\"text\": \"document number " + std::to_string(i) + "\"}\n";
  PipelineOptions options;
  options.writer.sync = false;
  // zstd input is read and decoded on a thread of its own: its out-of-memory error is worded as
  // the other stages' (the README quotes the one message).
  for (InputFormat format : {InputFormat::kPlain, InputFormat::kZstd}) {
    for (int threads : {1, 2}) {
      options.threads = threads;
      ThrowingSource source(format == InputFormat::kZstd ? Compress(plain) : plain);
      ShardStats stats;
      const std::string prefix =
          (dir_ / absl::StrCat("oom", threads, format == InputFormat::kZstd ? "z" : "")).string();
      const absl::Status s = RunPipeline(source, format, *tokenizer_, {prefix}, options, &stats);
      EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
      EXPECT_EQ(s.message(), "throwing.jsonl: out of memory: a buffer could not be allocated");
      EXPECT_FALSE(stats.published);
      ExpectNothingNamed(prefix);
    }
  }
}

// Throws std::bad_alloc from the write stage (progress is reported there) on its third batch, while
// later batches are in flight: TBB drops them without destroying them, the pipeline must (the
// sanitizer builds' leak check would see them).
class ThrowingObserver : public ProgressObserver {
 public:
  void OnProgress(const ShardStats&, int64_t) override {
    if (++calls_ == 3) throw std::bad_alloc();
  }

 private:
  int calls_ = 0;
};

TEST_F(PipelineTest, OutOfMemoryInTheWriteStageWithBatchesInFlightLeavesNothing) {
  std::string plain;
  for (int i = 0; i < 3000; ++i) {
    plain += "{\"text\": \"document number " + std::to_string(i) + " with a few more words\"}\n";
  }
  PipelineOptions options;
  options.writer.sync = false;
  options.batch_bytes = 4096;  // about 30 batches
  options.read_bytes = 4096;
  for (int threads : {1, 2}) {
    options.threads = threads;
    MemorySource source(plain, 4096);
    ThrowingObserver observer;
    ShardStats stats;
    const std::string prefix = (dir_ / ("oomw" + std::to_string(threads))).string();
    const absl::Status s =
        RunPipeline(source, InputFormat::kPlain, *tokenizer_, {prefix}, options, &stats, &observer);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_FALSE(stats.published);
    ExpectNothingNamed(prefix);
  }
}

// A key whose every text is empty publishes nothing (no reader can open an empty dataset); beside
// keys that do publish, the shard would look made with a key's outputs missing. All or none: the
// other keys' datasets are withdrawn and the run fails, naming the empty key's prefix.
TEST_F(PipelineTest, KeyWithNoTokensBesideOthersPublishesNoKey) {
  const std::string plain = "{\"a\": \"one\", \"b\": \"\"}\n{\"a\": \"x\", \"b\": \"\"}\n";
  MemorySource source(plain, 1000);
  PipelineOptions options;
  options.jsonl.json_keys = {"a", "b"};
  options.writer.sync = false;
  ShardStats stats;
  const std::string pa = (dir_ / "e_a").string(), pb = (dir_ / "e_b").string();
  const absl::Status s =
      RunPipeline(source, InputFormat::kPlain, *tokenizer_, {pa, pb}, options, &stats);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find(pb + ": no tokens in any document of its key"), std::string::npos)
      << s;
  EXPECT_FALSE(stats.published);
  for (const std::string& p : {pa, pb}) {
    EXPECT_FALSE(fs::exists(p + ".bin")) << p;
    EXPECT_FALSE(fs::exists(p + ".idx")) << p;
  }
  // Over a shard made before: both keys' older outputs stay as they were (no key is renamed into
  // place before every key is known to have tokens).
  MemorySource good("{\"a\": \"old\", \"b\": \"old\"}\n", 1000);
  ASSERT_TRUE(RunPipeline(good, InputFormat::kPlain, *tokenizer_, {pa, pb}, options, &stats).ok());
  const std::string old_a = ReadFile(pa + ".bin") + ReadFile(pa + ".idx");
  const std::string old_b = ReadFile(pb + ".bin") + ReadFile(pb + ".idx");
  MemorySource again(plain, 1000);
  EXPECT_EQ(RunPipeline(again, InputFormat::kPlain, *tokenizer_, {pa, pb}, options, &stats).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadFile(pa + ".bin") + ReadFile(pa + ".idx"), old_a);
  EXPECT_EQ(ReadFile(pb + ".bin") + ReadFile(pb + ".idx"), old_b);
  EXPECT_FALSE(fs::exists(pa + ".bin.pileprep-tmp"));
}

// A signal while the outputs are completed and synced (the hook stands in for that moment): the
// caller reports the input as abandoned, so nothing is published and the older outputs stay.
TEST_F(PipelineTest, CancelAfterTheFilesAreCompletePublishesNothing) {
  PipelineOptions options;
  options.writer.sync = false;
  const std::string prefix = (dir_ / "late_text_document").string();
  ShardStats stats;
  {
    MemorySource old_source("{\"text\": \"old\"}\n", 1000);
    ASSERT_TRUE(
        RunPipeline(old_source, InputFormat::kPlain, *tokenizer_, {prefix}, options, &stats).ok());
  }
  const std::string old = ReadFile(prefix + ".bin") + ReadFile(prefix + ".idx");
  std::atomic<bool> cancel{false};
  options.cancel = &cancel;
  options.before_publish = [&](const std::vector<PreparedDataset>&) {
    cancel.store(true);
    return absl::OkStatus();
  };
  MemorySource source("{\"text\": \"new text\"}\n", 1000);
  const absl::Status s =
      RunPipeline(source, InputFormat::kPlain, *tokenizer_, {prefix}, options, &stats);
  EXPECT_TRUE(absl::IsCancelled(s)) << s;
  EXPECT_FALSE(stats.published);
  EXPECT_EQ(ReadFile(prefix + ".bin") + ReadFile(prefix + ".idx"), old);
  EXPECT_FALSE(fs::exists(prefix + ".bin.pileprep-tmp"));
  EXPECT_FALSE(fs::exists(prefix + ".idx.pileprep-tmp"));
}

// The hook between the two halves of publishing: it sees every key's dataset complete under its
// temporary name with the old outputs still in place; its error publishes nothing and keeps the
// old outputs; without an error, the very files it saw (same inodes) are renamed into place.
TEST_F(PipelineTest, BeforePublishSeesEveryKeyCompleteAndItsErrorPublishesNothing) {
  PipelineOptions options;
  options.jsonl.json_keys = {"a", "b"};
  options.writer.sync = false;
  const std::string pa = (dir_ / "h_a").string(), pb = (dir_ / "h_b").string();
  ShardStats stats;
  {
    MemorySource old_source("{\"a\": \"old\", \"b\": \"old text\"}\n", 1000);
    ASSERT_TRUE(
        RunPipeline(old_source, InputFormat::kPlain, *tokenizer_, {pa, pb}, options, &stats).ok());
  }
  const std::string old_a = ReadFile(pa + ".bin") + ReadFile(pa + ".idx");
  const std::string old_b = ReadFile(pb + ".bin") + ReadFile(pb + ".idx");
  const std::string input =
      "{\"a\": \"one two\", \"b\": \"three\"}\n{\"a\": \"x\", \"b\": \"y\"}\n";
  std::vector<ino_t> inodes;
  int calls = 0;
  options.before_publish = [&](const std::vector<PreparedDataset>& prepared) -> absl::Status {
    ++calls;
    inodes.clear();
    EXPECT_EQ(prepared.size(), 2u);
    for (size_t k = 0; k < prepared.size(); ++k) {
      const PreparedDataset& d = prepared[k];
      EXPECT_EQ(d.prefix, k == 0 ? pa : pb);
      EXPECT_EQ(fs::file_size(d.bin_temp_path), d.bin_bytes) << d.prefix;
      EXPECT_EQ(fs::file_size(d.idx_temp_path), d.idx_bytes) << d.prefix;
      EXPECT_EQ(ReadFile(d.prefix + ".bin") + ReadFile(d.prefix + ".idx"), k == 0 ? old_a : old_b);
      struct stat st;
      EXPECT_EQ(::stat(d.bin_temp_path.c_str(), &st), 0);
      inodes.push_back(st.st_ino);
      EXPECT_EQ(::stat(d.idx_temp_path.c_str(), &st), 0);
      inodes.push_back(st.st_ino);
    }
    return calls == 1 ? absl::DataLossError("hook refused") : absl::OkStatus();
  };
  {
    MemorySource source(input, 1000);
    const absl::Status s =
        RunPipeline(source, InputFormat::kPlain, *tokenizer_, {pa, pb}, options, &stats);
    EXPECT_EQ(s, absl::DataLossError("hook refused"));
    EXPECT_FALSE(stats.published);
  }
  EXPECT_EQ(ReadFile(pa + ".bin") + ReadFile(pa + ".idx"), old_a);
  EXPECT_EQ(ReadFile(pb + ".bin") + ReadFile(pb + ".idx"), old_b);
  EXPECT_FALSE(fs::exists(pa + ".bin.pileprep-tmp"));
  EXPECT_FALSE(fs::exists(pb + ".idx.pileprep-tmp"));
  {
    MemorySource source(input, 1000);
    ASSERT_TRUE(
        RunPipeline(source, InputFormat::kPlain, *tokenizer_, {pa, pb}, options, &stats).ok());
    EXPECT_TRUE(stats.published);
  }
  EXPECT_EQ(calls, 2);
  ASSERT_EQ(inodes.size(), 4u);
  size_t i = 0;
  for (const std::string& p : {pa, pb}) {
    for (const char* ext : {".bin", ".idx"}) {
      struct stat st;
      ASSERT_EQ(::stat((p + ext).c_str(), &st), 0);
      EXPECT_EQ(st.st_ino, inodes[i++]) << p << ext;
    }
  }
  EXPECT_NE(ReadFile(pa + ".bin") + ReadFile(pa + ".idx"), old_a);
}

// Bad records cost a batch a bounded amount, not memory per bad line: the batch keeps its first
// max_bad_record_reports of them and counts the rest (one entry per line held ~48 bytes each, and
// a batch of 1 MB of blank lines held 48 MB: 30 M blank lines made 1.1 GB with 4 workers). Peak
// RSS growth over a run of 8 M blank lines, the workers' caches made before the peak is reset.
TEST_F(PipelineTest, BadRecordsCostABatchBoundedMemory) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the allocator's quarantine and shadow memory make RSS meaningless here";
#endif
  const std::string input =
      "{\"text\": \"first\"}\n" + std::string(size_t{8} << 20, '\n') + "{\"text\": \"last\"}\n";
  std::vector<std::unique_ptr<Gpt2Tokenizer::Cache>> caches;
  for (int i = 0; i < 2; ++i) caches.push_back(std::make_unique<Gpt2Tokenizer::Cache>(*tokenizer_));
  PipelineOptions options;
  options.caches = &caches;
  options.jsonl.max_bad_records = -1;
  if (!ResetPeakRss()) GTEST_SKIP() << "no /proc/self/clear_refs: the peak cannot be reset";
  const long base = ProcStatusKiB("VmHWM");
  ShardStats stats;
  const std::string out = Run(input, InputFormat::kPlain, size_t{1} << 20, 2, size_t{1} << 20,
                              nullptr, &stats, options);
  const long peak = ProcStatusKiB("VmHWM");
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(stats.documents, 2u);
  EXPECT_EQ(stats.bad_records, size_t{8} << 20);
  ASSERT_EQ(stats.bad_record_samples.size(), options.max_bad_record_reports);
  EXPECT_EQ(stats.bad_record_samples.front().line, 2u);
  EXPECT_EQ(stats.bad_record_samples.back().line, options.max_bad_record_reports + 1);
  // Measured: ~38 MB (the batches and the writer's buffers); one entry per bad line: ~360 MB.
  EXPECT_LT(peak - base, 96L << 10) << "KiB of peak RSS growth";
}

}  // namespace
}  // namespace pileprep
