// Merging: byte-identical to preprocessing the concatenated inputs; Megatron's --input order; flat
// memory over many inputs; refusals named clearly; nothing published on failure.
#include "pileprep/merge.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pileprep/indexed_reader.h"
#include "pileprep/pipeline.h"
#include "pileprep/validate.h"
#include "testing/files.h"
#include "testing/memory_source.h"
#include "testing/peak_rss.h"
#include "zstd.h"

namespace pileprep {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using testing::ProcStatusKiB;
using testing::ReadFile;
using testing::ResetPeakRss;
using testing::WriteFile;

std::string Decompress(const std::string& zst) {
  ZSTD_DStream* d = ZSTD_createDStream();
  ZSTD_initDStream(d);
  std::string out;
  std::vector<char> buf(1 << 16);
  ZSTD_inBuffer in{zst.data(), zst.size(), 0};
  while (in.pos < in.size) {
    ZSTD_outBuffer o{buf.data(), buf.size(), 0};
    const size_t r = ZSTD_decompressStream(d, &o, &in);
    EXPECT_FALSE(ZSTD_isError(r));
    if (ZSTD_isError(r)) break;
    out.append(buf.data(), o.pos);
  }
  ZSTD_freeDStream(d);
  return out;
}

class MergeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("pileprep_merge_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Preprocesses JSON-lines text into `prefix` as Megatron's preprocess_data.py --append-eod.
  void Preprocess(ByteSource& source, InputFormat format, const std::string& prefix) {
    static const Gpt2Tokenizer* tokenizer = [] {
      auto t = Gpt2Tokenizer::FromDefaultFiles({});
      EXPECT_TRUE(t.ok()) << t.status();
      return t.ok() ? t->release() : nullptr;
    }();
    ASSERT_NE(tokenizer, nullptr);
    PipelineOptions options;
    options.writer.sync = false;
    ShardStats stats;
    absl::Status s = RunPipeline(source, format, *tokenizer, {prefix}, options, &stats);
    ASSERT_TRUE(s.ok()) << s;
  }

  // A tiny dataset written directly: `docs` documents of a few tokens (and an empty one).
  void WriteTiny(const std::string& prefix, int seed, TokenDType dtype = TokenDType::kUint16) {
    IndexedDatasetWriterOptions options;
    options.dtype = dtype;
    options.sync = false;
    options.buffer_bytes = 64;
    options.spill_buffer_bytes = 64;
    auto writer = IndexedDatasetWriter::Create(prefix, options);
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (int d = 0; d < 3; ++d) {
      std::vector<uint32_t> ids;
      if (d != 1 || seed % 3 != 0) {
        for (int t = 0; t <= (seed + d) % 5; ++t) ids.push_back((seed * 31 + d * 7 + t) % 50000);
        ids.push_back(50256);
      }
      ASSERT_TRUE((*writer)->AddDocument(ids).ok());
    }
    auto result = (*writer)->Finish();
    ASSERT_TRUE(result.ok()) << result.status();
  }

  // A dataset of 600 documents of 1000 tokens: a 1.2 MB .bin, far more than a pipe holds.
  void WriteLarge(const std::string& prefix) {
    IndexedDatasetWriterOptions options;
    options.sync = false;
    auto writer = IndexedDatasetWriter::Create(prefix, options);
    ASSERT_TRUE(writer.ok()) << writer.status();
    std::vector<uint32_t> ids(1000);
    for (int d = 0; d < 600; ++d) {
      for (int t = 0; t < 999; ++t) ids[t] = static_cast<uint32_t>((d * 1009 + t) % 50000);
      ids[999] = 50256;
      ASSERT_TRUE((*writer)->AddDocument(ids).ok());
    }
    ASSERT_TRUE((*writer)->Finish().ok());
  }

  // Merges `inputs` into dir_/out and calls `change` between the merge's first pass (which counts
  // the inputs and records each one's device, inode, size and modification time) and its later
  // passes, deterministically: the .bin temporary is made a FIFO that this test reads. The merge
  // writes to it only once pass 1 is over (the first bytes are the first input's), and it cannot
  // copy more of the first input than the pipe and its buffers hold until the test reads on, so
  // `change`, called when the first bytes arrive, comes before any later pass looks at another
  // input. Then the FIFO is drained to its end (the merge closed it) and the merge's result
  // returned. The first input must be far larger than the pipe and the merge's buffers.
  absl::StatusOr<MergeResult> MergeChangingAnInputBetweenPasses(
      const std::vector<std::string>& inputs, const std::function<void()>& change) {
    const std::string out = (dir_ / "out").string();
    const std::string fifo = out + ".bin.pileprep-tmp";
    if (::mkfifo(fifo.c_str(), 0600) != 0) return absl::InternalError("mkfifo failed");
    // Opened before the merge (non-blocking: no writer yet), so that its open for writing does not
    // wait, and the pipe has a reader for as long as the merge may write.
    const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (reader < 0) return absl::InternalError("cannot open the FIFO");
    const long pipe_bytes = ::fcntl(reader, F_GETPIPE_SZ);
    MergeOptions options;
    options.sync = false;  // no fsync of a FIFO
    options.buffer_bytes = 1 << 16;
    // The merge holds at most the pipe, its 64 KiB .bin write buffer and one block of the first
    // input before it must wait for this test to read.
    EXPECT_LT(pipe_bytes + 2 * (1 << 16), static_cast<long>(fs::file_size(inputs[0] + ".bin")))
        << "the first input is too small for the merge to wait on the pipe within it";
    // Should the merge write after this test stopped reading: EPIPE, not the process killed.
    struct sigaction ignore = {}, old = {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, &old);
    absl::StatusOr<MergeResult> result = absl::UnknownError("the merge did not return");
    std::thread merge([&] { result = MergeDatasets(inputs, out, options); });
    bool changed = false;
    std::vector<char> buffer(1 << 16);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p = {reader, POLLIN, 0};
      if (::poll(&p, 1, 1000) <= 0) continue;
      const ssize_t n = ::read(reader, buffer.data(), buffer.size());
      if (n > 0 && !changed) {
        change();
        changed = true;
      }
      if (n == 0) break;  // the merge closed its end (POLLHUP): it returned, or moved past the .bin
    }
    merge.join();
    ::close(reader);
    ::sigaction(SIGPIPE, &old, nullptr);
    EXPECT_TRUE(changed) << "the merge wrote nothing to its .bin temporary: " << result.status();
    return result;
  }

  // Nothing published, no temporary (the FIFO included) left.
  void ExpectNothingPublished() {
    for (const char* name : {"out.bin", "out.idx", "out.bin.pileprep-tmp", "out.idx.pileprep-tmp"}) {
      EXPECT_FALSE(fs::exists(fs::symlink_status(dir_ / name))) << name;
    }
  }

  fs::path dir_;
};

TEST_F(MergeTest, MergingDevShardsEqualsPreprocessingTheirConcatenation) {
  std::string concatenated;
  std::vector<std::string> inputs;
  for (const char* n : {"00", "01"}) {
    const std::string path = std::string(PILEPREP_SOURCE_DIR "/data/samples/") + n + ".jsonl.zst";
    auto source = OpenFileSource(path);
    ASSERT_TRUE(source.ok()) << source.status();
    inputs.push_back((dir_ / (std::string("my-gpt3_") + n + "_text_document")).string());
    Preprocess(**source, InputFormat::kZstd, inputs.back());
    concatenated += Decompress(ReadFile(path));
  }
  testing::MemorySource whole(concatenated, std::numeric_limits<size_t>::max(), "concatenated.jsonl");
  const std::string expected = (dir_ / "whole").string();
  Preprocess(whole, InputFormat::kPlain, expected);

  MergeOptions options;
  options.sync = false;
  options.buffer_bytes = 1000;  // many blocks, and not a multiple of anything
  const std::string merged = (dir_ / "merged").string();
  auto result = MergeDatasets(inputs, merged, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->published);
  EXPECT_EQ(result->documents, 5150u);
  EXPECT_TRUE(ReadFile(merged + ".bin") == ReadFile(expected + ".bin"));
  EXPECT_TRUE(ReadFile(merged + ".idx") == ReadFile(expected + ".idx"));
  EXPECT_EQ(result->idx_bytes, fs::file_size(merged + ".idx"));
  EXPECT_EQ(result->bin_bytes, fs::file_size(merged + ".bin"));
  EXPECT_FALSE(fs::exists(merged + ".bin.pileprep-tmp"));

  // The directory form sorts prefixes: the same inputs, the same bytes.
  auto found = FindDatasetPrefixes(dir_.string());
  ASSERT_TRUE(found.ok());
  std::vector<std::string> shards;
  for (const std::string& p : *found) {
    if (p.find("my-gpt3_") != std::string::npos) shards.push_back(p);
  }
  EXPECT_EQ(shards, inputs);
}

TEST_F(MergeTest, OrderGivenIsKept) {
  WriteTiny((dir_ / "a").string(), 1);
  WriteTiny((dir_ / "b").string(), 2);
  MergeOptions options;
  options.sync = false;
  ASSERT_TRUE(MergeDatasets({(dir_ / "b").string(), (dir_ / "a").string()},
                            (dir_ / "ba").string(), options).ok());
  auto r = IndexedDatasetReader::Open((dir_ / "ba").string());
  auto b = IndexedDatasetReader::Open((dir_ / "b").string());
  ASSERT_TRUE(r.ok() && b.ok());
  std::vector<uint32_t> x, y;
  ASSERT_TRUE((*r)->ReadDocument(0, &x).ok());
  ASSERT_TRUE((*b)->ReadDocument(0, &y).ok());
  EXPECT_EQ(x, y);
  EXPECT_TRUE(ValidateDataset((dir_ / "ba").string())->ok());
}

TEST_F(MergeTest, ManyInputsMergeInFlatMemory) {
  // 100 inputs of 20,000 documents each: 2,000,000 sequences, whose .idx arrays (20 bytes each,
  // 40 MB; the pointers alone 16 MB) a merge that held them would add to its RSS. A streaming
  // merge adds its buffers and one input's mapping at a time.
  constexpr int kInputs = 100, kDocuments = 20000;
  const fs::path shards = dir_ / "shards";
  fs::create_directories(shards);
  for (int k = 0; k < kInputs; ++k) {
    char name[32];
    std::snprintf(name, sizeof(name), "shard_%03d", k);
    IndexedDatasetWriterOptions wo;
    wo.sync = false;
    auto writer = IndexedDatasetWriter::Create((shards / name).string(), wo);
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (int d = 0; d < kDocuments; ++d) {
      const uint32_t ids[] = {static_cast<uint32_t>((k * 7919 + d) % 50000), 50256};
      ASSERT_TRUE((*writer)->AddDocument(absl::MakeConstSpan(ids + d % 2, 2 - d % 2)).ok());
    }
    ASSERT_TRUE((*writer)->Finish().ok());
  }
  auto inputs = FindDatasetPrefixes(shards.string());
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  ASSERT_EQ(inputs->size(), static_cast<size_t>(kInputs));

  MergeOptions options;
  options.sync = false;
  options.buffer_bytes = 1 << 16;
  // Warm up (allocator, first mappings), then measure the peak-RSS growth of a full merge.
  ASSERT_TRUE(MergeDatasets({inputs->front()}, (dir_ / "warm").string(), options).ok());
  const bool reset = ResetPeakRss();
  const long base = ProcStatusKiB("VmRSS");
  auto result = MergeDatasets(*inputs, (dir_ / "merged").string(), options);
  const long peak = ProcStatusKiB("VmHWM");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->inputs, static_cast<uint64_t>(kInputs));
  EXPECT_EQ(result->documents, uint64_t{kInputs} * kDocuments);

  ValidateOptions vo;
  vo.expect_eod = true;
  auto report = ValidateDataset((dir_ / "merged").string(), vo);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok()) << FormatValidationReport(*report);
  // Document kDocuments·k+d of the merge is document d of input k.
  auto merged = IndexedDatasetReader::Open((dir_ / "merged").string());
  auto shard = IndexedDatasetReader::Open((*inputs)[61]);
  ASSERT_TRUE(merged.ok() && shard.ok());
  for (int d : {0, 1, 7777, kDocuments - 1}) {
    std::vector<uint32_t> x, y;
    ASSERT_TRUE((*merged)->ReadDocument(uint64_t{kDocuments} * 61 + d, &x).ok());
    ASSERT_TRUE((*shard)->ReadDocument(d, &y).ok());
    EXPECT_EQ(x, y) << d;
    EXPECT_EQ(y.size(), static_cast<size_t>(2 - d % 2)) << d;
  }

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the allocator's quarantine and shadow memory make RSS meaningless here";
#endif
  if (!reset || base <= 0 || peak <= 0) {
    GTEST_SKIP() << "no /proc/self/clear_refs (Linux 4.0+) or /proc/self/status: the peak "
                    "cannot be measured";
  }
  // Measured: ~0.6 MB. One array held whole adds 7.6 MB (the lengths) or 15 MB (the pointers).
  EXPECT_LT(peak - base, 4 * 1024) << "KiB of peak RSS growth";
}

TEST_F(MergeTest, MismatchedDTypesAreRefused) {
  WriteTiny((dir_ / "u16").string(), 1, TokenDType::kUint16);
  WriteTiny((dir_ / "i32").string(), 2, TokenDType::kInt32);
  auto result = MergeDatasets({(dir_ / "u16").string(), (dir_ / "i32").string()},
                              (dir_ / "out").string());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("i32.idx: dtype int32 (code 4)"));
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("uint16 (code 8)"));
  EXPECT_FALSE(fs::exists(dir_ / "out.bin"));
  EXPECT_FALSE(fs::exists(dir_ / "out.bin.pileprep-tmp"));
}

TEST_F(MergeTest, BrokenInputIsRefusedAndNothingPublished) {
  WriteTiny((dir_ / "a").string(), 1);
  WriteTiny((dir_ / "b").string(), 2);
  {
    std::ofstream out(dir_ / "b.bin", std::ios::binary | std::ios::app);
    out << "xx";
  }
  auto result = MergeDatasets({(dir_ / "a").string(), (dir_ / "b").string()},
                              (dir_ / "out").string());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("extra bytes"));
  EXPECT_FALSE(fs::exists(dir_ / "out.bin"));
  EXPECT_FALSE(fs::exists(dir_ / "out.idx"));
}

// Without validate_inputs too: the output's document indices are the inputs' shifted, so an
// input's that end short of its sequences or jump past them would make an output that Megatron's
// reader refuses (merged and published before; a jump near 2^63 wrapped in the shift).
TEST_F(MergeTest, InputDocumentIndicesAreCheckedEvenWithoutValidation) {
  WriteTiny((dir_ / "a").string(), 1);
  // seed 1: three documents of one sequence each, document_indices [0, 1, 2, 3] at byte 70 on
  // (34 header bytes, then 4 + 8 bytes per sequence).
  const std::string tiny_idx = ReadFile((dir_ / "a.idx").string());
  ASSERT_EQ(tiny_idx.size(), 70u + 4 * 8);
  struct Case {
    size_t entry;
    int64_t value;
    const char* want;
  };
  for (const Case& c : {Case{3, 2, "its document indices end at 2, not at its 3 sequences"},
                        Case{2, INT64_MAX, "document index 2 is 9223372036854775807"},
                        Case{1, -1, "document index 1 is -1 (after 0, of 3 sequences)"},
                        Case{0, 1, "document index 0 is 1 (the first must be 0)"}}) {
    std::string idx = tiny_idx;
    std::memcpy(idx.data() + 70 + 8 * c.entry, &c.value, sizeof(c.value));
    WriteFile((dir_ / "b.idx").string(), idx);
    fs::copy_file(dir_ / "a.bin", dir_ / "b.bin", fs::copy_options::overwrite_existing);
    MergeOptions options;
    options.validate_inputs = false;
    options.sync = false;
    auto result = MergeDatasets({(dir_ / "a").string(), (dir_ / "b").string()},
                                (dir_ / "out").string(), options);
    ASSERT_FALSE(result.ok()) << c.want;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(result.status().message()), HasSubstr(c.want));
    EXPECT_THAT(std::string(result.status().message()), HasSubstr("b.idx: "));
    EXPECT_FALSE(fs::exists(dir_ / "out.bin"));
    EXPECT_FALSE(fs::exists(dir_ / "out.idx"));
  }
}

// An index whose header counts no sequences and no documents has no document_indices at all (not
// even the leading 0): the message says that, as validate does, not "end at 0, not at its 0".
TEST_F(MergeTest, InputWithNoDocumentIndicesIsRefusedNamingTheCount) {
  WriteTiny((dir_ / "a").string(), 1);
  std::string idx = ReadFile((dir_ / "a.idx").string()).substr(0, 34);
  const int64_t zero = 0;
  std::memcpy(idx.data() + 18, &zero, sizeof(zero));  // sequence count
  std::memcpy(idx.data() + 26, &zero, sizeof(zero));  // document count
  WriteFile((dir_ / "b.idx").string(), idx);
  WriteFile((dir_ / "b.bin").string(), "");
  MergeOptions options;
  options.validate_inputs = false;
  options.sync = false;
  auto result = MergeDatasets({(dir_ / "a").string(), (dir_ / "b").string()},
                              (dir_ / "out").string(), options);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("b.idx: byte 26: document count 0: document_indices must hold at least "
                        "its leading 0"));
  EXPECT_FALSE(fs::exists(dir_ / "out.bin"));
  EXPECT_FALSE(fs::exists(dir_ / "out.idx"));
}

TEST_F(MergeTest, OutputThatIsAnInputIsRefused) {
  WriteTiny((dir_ / "a").string(), 1);
  auto result = MergeDatasets({(dir_ / "a").string()}, (dir_ / "a").string());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateDataset((dir_ / "a").string())->ok());
}

TEST_F(MergeTest, OutputThatIsAnInputUnderAnotherNameIsRefused) {
  WriteTiny((dir_ / "a").string(), 1);
  WriteTiny((dir_ / "b").string(), 2);
  const std::string a_bin = ReadFile((dir_ / "a.bin").string());
  const std::string a_idx = ReadFile((dir_ / "a.idx").string());
  // Through a symlinked directory: publishing would replace input a with a + b.
  fs::create_directory_symlink(dir_, dir_ / "alias");
  MergeOptions options;
  options.sync = false;
  auto result = MergeDatasets({(dir_ / "a").string(), (dir_ / "b").string()},
                              (dir_ / "alias" / "a").string(), options);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("is also an input"));
  EXPECT_TRUE(ReadFile((dir_ / "a.bin").string()) == a_bin);
  EXPECT_TRUE(ReadFile((dir_ / "a.idx").string()) == a_idx);
  EXPECT_FALSE(fs::exists(dir_ / "a.bin.pileprep-tmp"));
  // Hard links: the output's names are an input's files. Publishing would only replace c's names
  // (b would keep its bytes), but this merges a dataset onto itself: refused too.
  const std::string b_bin = ReadFile((dir_ / "b.bin").string());
  const std::string b_idx = ReadFile((dir_ / "b.idx").string());
  fs::create_hard_link(dir_ / "b.bin", dir_ / "c.bin");
  fs::create_hard_link(dir_ / "b.idx", dir_ / "c.idx");
  result =
      MergeDatasets({(dir_ / "a").string(), (dir_ / "b").string()}, (dir_ / "c").string(), options);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("is also an input (" + (dir_ / "b").string() + ")"));
  EXPECT_TRUE(ReadFile((dir_ / "b.bin").string()) == b_bin);  // c.bin is the same file
  EXPECT_TRUE(ReadFile((dir_ / "b.idx").string()) == b_idx);
  EXPECT_FALSE(fs::exists(dir_ / "c.bin.pileprep-tmp"));
}

// An input whose .bin grows between pass 1 and the copy: refused, naming it and both sizes.
TEST_F(MergeTest, InputBinThatChangesSizeBetweenPassesIsRefusedAndNothingPublished) {
  WriteLarge((dir_ / "a").string());
  WriteTiny((dir_ / "b").string(), 2);
  const std::string b_bin = (dir_ / "b.bin").string();
  const uint64_t size = fs::file_size(b_bin);
  auto result = MergeChangingAnInputBetweenPasses(
      {(dir_ / "a").string(), (dir_ / "b").string()}, [&] {
        std::ofstream out(b_bin, std::ios::binary | std::ios::app);
        out << "xx";
      });
  ASSERT_FALSE(result.ok()) << "a merge of an input that grew meanwhile was published";
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr(b_bin + ": changed while it was being merged (" + std::to_string(size) +
                        " bytes, now " + std::to_string(size + 2) + "); nothing was published"));
  ExpectNothingPublished();
}

// The same .bin bytes under a new inode (replaced by a copy renamed over it).
TEST_F(MergeTest, InputBinReplacedByAnotherFileBetweenPassesIsRefusedAndNothingPublished) {
  WriteLarge((dir_ / "a").string());
  WriteTiny((dir_ / "b").string(), 2);
  const std::string b_bin = (dir_ / "b.bin").string();
  auto result = MergeChangingAnInputBetweenPasses(
      {(dir_ / "a").string(), (dir_ / "b").string()}, [&] {
        fs::copy_file(b_bin, b_bin + ".copy");
        fs::rename(b_bin + ".copy", b_bin);
      });
  ASSERT_FALSE(result.ok()) << "a merge of an input replaced meanwhile was published";
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr(b_bin + ": changed while it was being merged (another file now)"));
  ExpectNothingPublished();
}

// Written to in place: same inode, same size, another modification time.
TEST_F(MergeTest, InputBinWrittenToBetweenPassesIsRefusedAndNothingPublished) {
  WriteLarge((dir_ / "a").string());
  WriteTiny((dir_ / "b").string(), 2);
  const std::string b_bin = (dir_ / "b.bin").string();
  auto result = MergeChangingAnInputBetweenPasses(
      {(dir_ / "a").string(), (dir_ / "b").string()}, [&] {
        fs::last_write_time(b_bin, fs::last_write_time(b_bin) + std::chrono::seconds(10));
      });
  ASSERT_FALSE(result.ok()) << "a merge of an input written to meanwhile was published";
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr(b_bin + ": changed while it was being merged (written to)"));
  ExpectNothingPublished();
}

// The .idx, which the passes after the .bin copy map again, changed after pass 1 counted it.
TEST_F(MergeTest, InputIdxWrittenToBetweenPassesIsRefusedAndNothingPublished) {
  WriteLarge((dir_ / "a").string());
  WriteTiny((dir_ / "b").string(), 2);
  const std::string b_idx = (dir_ / "b.idx").string();
  auto result = MergeChangingAnInputBetweenPasses(
      {(dir_ / "a").string(), (dir_ / "b").string()}, [&] {
        fs::last_write_time(b_idx, fs::last_write_time(b_idx) + std::chrono::seconds(10));
      });
  ASSERT_FALSE(result.ok()) << "a merge of an input whose index changed meanwhile was published";
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr(b_idx + ": changed while it was being merged (written to)"));
  ExpectNothingPublished();
}

// Written to in place during the last pass, which reads the document indices: no pass after it
// checks the .idx again, so the final check before publishing must (a merged index with another
// file's last document index was published, exit 0).
TEST_F(MergeTest, InputIdxWrittenToDuringTheLastPassIsRefusedAndNothingPublished) {
  WriteLarge((dir_ / "a").string());
  WriteTiny((dir_ / "b").string(), 2);
  const std::string b_idx = (dir_ / "b.idx").string();
  MergeOptions options;
  options.sync = false;
  options.before_publish = [&] {
    fs::last_write_time(b_idx, fs::last_write_time(b_idx) + std::chrono::seconds(10));
    return absl::OkStatus();
  };
  auto result = MergeDatasets({(dir_ / "a").string(), (dir_ / "b").string()},
                              (dir_ / "out").string(), options);
  ASSERT_FALSE(result.ok()) << "a merge of an input whose index changed meanwhile was published";
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr(b_idx + ": changed while it was being merged (written to)"));
  ExpectNothingPublished();
}

// The harness itself: with no change the same FIFO merge succeeds (so the refusals above come from
// the change, not from merging through a FIFO).
TEST_F(MergeTest, MergeThroughTheFifoHarnessSucceedsWhenNothingChanges) {
  WriteLarge((dir_ / "a").string());
  WriteTiny((dir_ / "b").string(), 2);
  auto result =
      MergeChangingAnInputBetweenPasses({(dir_ / "a").string(), (dir_ / "b").string()}, [] {});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->published);
  EXPECT_EQ(result->inputs, 2u);
  EXPECT_TRUE(fs::exists(dir_ / "out.idx"));
}

}  // namespace
}  // namespace pileprep
