// Replays every file of the .idx fuzz corpus (tests/fuzz/corpus/idx) through the fuzzer's entry
// point, so the corpus (and any crash reproducer added to it) runs in every CI build, with g++.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "fuzz/idx_fuzz_target.h"
#include "gtest/gtest.h"

namespace pileprep {
namespace {

namespace fs = std::filesystem;

TEST(IdxFuzzCorpus, EveryFileReplaysWithoutCrashing) {
  const fs::path corpus = fs::path(PILEPREP_SOURCE_DIR) / "tests/fuzz/corpus/idx";
  ASSERT_TRUE(fs::is_directory(corpus)) << corpus;
  int files = 0;
  for (const auto& entry : fs::directory_iterator(corpus)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string data = ss.str();
    SCOPED_TRACE(entry.path().filename().string());
    EXPECT_EQ(fuzz::RunIdxFuzzInput(reinterpret_cast<const uint8_t*>(data.data()), data.size()), 0);
    ++files;
  }
  EXPECT_GE(files, 10);
}

}  // namespace
}  // namespace pileprep
