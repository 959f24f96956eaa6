#include "pileprep/shard_plan.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pileprep {
namespace {

using ::testing::ElementsAre;

TEST(ParseFileNumbers, AcceptsListsAndInclusiveRanges) {
  EXPECT_THAT(*ParseFileNumbers("0,3,5-7"), ElementsAre(0, 3, 5, 6, 7));
  EXPECT_EQ(ParseFileNumbers("0-29")->size(), 30u);
  EXPECT_THAT(*ParseFileNumbers("7,1-2,2"), ElementsAre(1, 2, 7));  // sorted, no duplicates
}

TEST(ParseFileNumbers, RejectsGarbage) {
  for (const char* bad : {"", "a", "1,", "5-3", "-1", "1-", "10000", "1.5"}) {
    EXPECT_FALSE(ParseFileNumbers(bad).ok()) << bad;
  }
}

TEST(ShardNames, FollowTheNemoLauncher) {
  EXPECT_EQ(ShardFileName(3), "03.jsonl.zst");
  EXPECT_EQ(ShardFileName(123), "123.jsonl.zst");
  EXPECT_EQ(ShardOutputPrefix("/data", "my-gpt3", 7), "/data/my-gpt3_07_text_document");
  EXPECT_EQ(ShardOutputPrefix("out/", "p", 12, "code"), "out/p_12_code_document");
}

TEST(ParseShardSource, ClassifiesUrls) {
  EXPECT_EQ(ParseShardSource("/data/pile")->kind, SourceKind::kLocalDirectory);
  EXPECT_EQ(ParseShardSource("file:///data/pile")->base, "/data/pile");
  EXPECT_EQ(ParseShardSource("https://h/x")->kind, SourceKind::kHttp);
  EXPECT_EQ(ShardInput(*ParseShardSource("https://h/x"), 2), "https://h/x/02.jsonl.zst");
  EXPECT_FALSE(ParseShardSource("ftp://h/x").ok());
  EXPECT_FALSE(ParseShardSource("file://relative").ok());
}

}  // namespace
}  // namespace pileprep
