// Replays the seed corpora of the .idx, zstd, JSON-lines, tokenizer and pipeline fuzzers
// (tests/fuzz/corpus/NAME) through the fuzzers' entry points, so the corpora (and any crash
// reproducer added to them) run in every build, with g++ and under scripts/test.sh --sanitize. A
// target that finds a violated property aborts, which fails the test.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "fuzz/idx_fuzz_target.h"
#include "fuzz/jsonl_fuzz_target.h"
#include "fuzz/pipeline_fuzz_target.h"
#include "fuzz/tokenizer_fuzz_target.h"
#include "fuzz/zstd_fuzz_target.h"
#include "gtest/gtest.h"

namespace pileprep {
namespace {

namespace fs = std::filesystem;

template <typename Fn>
int ReplayCorpus(const std::string& name, Fn fn) {
  const fs::path corpus = fs::path(PILEPREP_SOURCE_DIR) / "tests/fuzz/corpus" / name;
  EXPECT_TRUE(fs::is_directory(corpus)) << corpus;
  int files = 0;
  for (const auto& entry : fs::directory_iterator(corpus)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string data = ss.str();
    SCOPED_TRACE(entry.path().filename().string());
    EXPECT_EQ(fn(reinterpret_cast<const uint8_t*>(data.data()), data.size()), 0);
    ++files;
  }
  return files;
}

TEST(IdxFuzzCorpus, EveryFileReplaysWithoutCrashing) {
  EXPECT_GE(ReplayCorpus("idx", fuzz::RunIdxFuzzInput), 10);
}

TEST(ZstdFuzzCorpus, EveryFileReplaysWithoutCrashing) {
  EXPECT_GE(ReplayCorpus("zstd", fuzz::RunZstdFuzzInput), 10);
}

TEST(JsonlFuzzCorpus, EveryFileReplaysWithoutCrashing) {
  EXPECT_GE(ReplayCorpus("jsonl", fuzz::RunJsonlFuzzInput), 10);
}

TEST(TokenizerFuzzCorpus, EveryFileRoundTripsAndMatchesTheReference) {
  EXPECT_GE(ReplayCorpus("tokenizer", fuzz::RunTokenizerFuzzInput), 10);
}

TEST(PipelineFuzzCorpus, EveryFileGivesTheBytesOfOneThreadAndWholeBatches) {
  EXPECT_GE(ReplayCorpus("pipeline", fuzz::RunPipelineFuzzInput), 10);
}

}  // namespace
}  // namespace pileprep
