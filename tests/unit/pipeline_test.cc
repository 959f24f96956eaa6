// The whole pipeline on real shards: output bytes never depend on how the source chunks its bytes, on
// the thread count or on the batch size; failures publish nothing.
#include "pileprep/pipeline.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "testing/files.h"
#include "testing/memory_source.h"

namespace pileprep {
namespace {

namespace fs = std::filesystem;

using testing::MemorySource;
using testing::ReadFile;

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

  // Runs the pipeline and returns .bin + .idx bytes ("" when nothing was published).
  std::string Run(const std::string& input, InputFormat format, size_t chunk, int threads,
                  size_t batch_bytes, absl::Status* status = nullptr, ShardStats* stats_out = nullptr,
                  PipelineOptions options = {}) {
    MemorySource source(input, chunk);
    options.threads = threads;
    options.batch_bytes = batch_bytes;
    options.writer.sync = false;
    const std::string prefix = (dir_ / ("out" + std::to_string(run_++))).string();
    ShardStats stats;
    absl::Status s = RunPipeline(source, format, *tokenizer_, {prefix}, options, &stats);
    if (status != nullptr) *status = s;
    else EXPECT_TRUE(s.ok()) << s;
    if (stats_out != nullptr) *stats_out = stats;
    if (!fs::exists(prefix + ".bin")) return "";
    return ReadFile(prefix + ".bin") + "|" + ReadFile(prefix + ".idx");
  }

  std::unique_ptr<Gpt2Tokenizer> tokenizer_;
  fs::path dir_;
  int run_ = 0;
};

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

TEST_F(PipelineTest, PlainAndZstdInputsAgree) {
  const std::string plain =
      "{\"text\": \"Hello world\"}\n{\"text\": \"\"}\r\n{\"text\": \"second doc\"}";
  ShardStats stats;
  const std::string out = Run(plain, InputFormat::kPlain, 3, 2, 8, nullptr, &stats);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(stats.documents, 3u);
  EXPECT_EQ(stats.empty_documents, 1u);
  EXPECT_EQ(stats.tokens, 3u + 3u);  // Hello world EOD, second doc EOD
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
  EXPECT_NE(status.message().find("more than 10 bad records (first at line 2: missing key"),
            std::string::npos)
      << status;
  EXPECT_NE(status.message().find("--max-bad-records"), std::string::npos);
  for (const auto& e : fs::directory_iterator(dir_)) ADD_FAILURE() << "left " << e.path();
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

}  // namespace
}  // namespace pileprep
