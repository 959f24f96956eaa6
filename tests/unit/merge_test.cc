// Merging: byte-identical to preprocessing the concatenated inputs; Megatron's --input order; flat
// memory over many inputs; refusals named clearly; nothing published on failure.
#include "pileprep/merge.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pileprep/indexed_reader.h"
#include "pileprep/pipeline.h"
#include "pileprep/validate.h"
#include "testing/files.h"
#include "testing/memory_source.h"
#include "zstd.h"

namespace pileprep {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using testing::ReadFile;

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

// Resets the kernel's high-water mark of this process's RSS (Linux 4.0+, /proc/self/clear_refs);
// false where it cannot. getrusage's ru_maxrss is no use here: it keeps the peak of everything
// before (writing the inputs, other tests in this process).
bool ResetPeakRss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  return clear.good();
}
// A field of /proc/self/status in KiB ("VmHWM", "VmRSS"), or -1.
long StatusKiB(const std::string& field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  }
  return -1;
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
  const long base = StatusKiB("VmRSS");
  auto result = MergeDatasets(*inputs, (dir_ / "merged").string(), options);
  const long peak = StatusKiB("VmHWM");
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

}  // namespace
}  // namespace pileprep
