#include "pileprep/indexed_dataset.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "format/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pileprep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

// A fresh directory per test (mode 0755 so that a test may drop privileges and still reach it).
class IndexedDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = ::testing::TempDir() + "pileprep_idx_XXXXXX";
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::permissions(dir_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(dir_, ec);
  }

  std::string Prefix(const std::string& name = "ds") const { return dir_ + "/" + name; }

  std::vector<std::string> Files() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string dir_;
};

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <typename T>
void Put(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(value));
}

// The .idx spelled out field by field; pointers and document indices are given by hand, not
// computed.
std::string IdxBytes(uint8_t dtype_code, const std::vector<int32_t>& lengths,
                     const std::vector<int64_t>& pointers,
                     const std::vector<int64_t>& doc_indices) {
  std::string out("MMIDIDX\0\0", 9);
  Put<uint64_t>(&out, 1);
  Put<uint8_t>(&out, dtype_code);
  Put<uint64_t>(&out, lengths.size());
  Put<uint64_t>(&out, doc_indices.size());
  for (int32_t v : lengths) Put(&out, v);
  for (int64_t v : pointers) Put(&out, v);
  for (int64_t v : doc_indices) Put(&out, v);
  return out;
}

std::string U16Bytes(const std::vector<uint16_t>& tokens) {
  std::string out;
  for (uint16_t t : tokens) Put(&out, t);
  return out;
}

std::string I32Bytes(const std::vector<int32_t>& tokens) {
  std::string out;
  for (int32_t t : tokens) Put(&out, t);
  return out;
}

struct Doc {
  std::vector<uint32_t> tokens;
  std::vector<int32_t> lengths;
};

absl::StatusOr<IndexedDatasetWriter::Result> WriteDataset(
    const std::string& prefix, const std::vector<Doc>& docs,
    IndexedDatasetWriterOptions options = {}) {
  auto writer = IndexedDatasetWriter::Create(prefix, options);
  if (!writer.ok()) return writer.status();
  for (const Doc& doc : docs) {
    absl::Status s = (*writer)->AddDocument(doc.tokens, doc.lengths);
    if (!s.ok()) return s;
  }
  return (*writer)->Finish();
}

TEST(IndexedDatasetDType, FollowsMegatronVocabularyRule) {
  EXPECT_EQ(DTypeForVocabSize(50257), TokenDType::kUint16);
  EXPECT_EQ(DTypeForVocabSize(65499), TokenDType::kUint16);
  EXPECT_EQ(DTypeForVocabSize(65500), TokenDType::kInt32);
  EXPECT_EQ(DTypeForVocabSize(128256), TokenDType::kInt32);
  EXPECT_EQ(static_cast<int>(TokenDType::kUint16), 8);
  EXPECT_EQ(static_cast<int>(TokenDType::kInt32), 4);
  EXPECT_EQ(DTypeSize(TokenDType::kUint16), 2u);
  EXPECT_EQ(DTypeSize(TokenDType::kInt32), 4u);
}

TEST_F(IndexedDatasetTest, OneDocumentIsByteExact) {
  auto writer = IndexedDatasetWriter::Create(Prefix());
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->AddDocument(std::vector<uint32_t>{15496, 995, 50256}).ok());
  auto result = (*writer)->Finish();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->published);
  EXPECT_EQ(result->num_tokens, 3u);
  EXPECT_EQ(result->num_sequences, 1u);
  EXPECT_EQ(result->num_documents, 1u);
  EXPECT_EQ(result->bin_bytes, 6u);
  EXPECT_EQ(result->idx_bytes, 34u + 12 + 16);

  EXPECT_EQ(ReadBytes(Prefix() + ".bin"), std::string("\x88\x3c\xe3\x03\x50\xc4", 6));
  EXPECT_EQ(ReadBytes(Prefix() + ".idx"), IdxBytes(8, {3}, {0}, {0, 1}));
  EXPECT_THAT(Files(), ElementsAre("ds.bin", "ds.idx"));
}

TEST_F(IndexedDatasetTest, EmptyDocumentInTheMiddleRepeatsDocumentIndex) {
  auto writer = IndexedDatasetWriter::Create(Prefix());
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->AddDocument(std::vector<uint32_t>{1, 50256}).ok());
  ASSERT_TRUE((*writer)->AddDocument(std::vector<uint32_t>{}).ok());
  ASSERT_TRUE((*writer)->AddDocument(std::vector<uint32_t>{2, 3, 50256}).ok());
  EXPECT_EQ((*writer)->num_documents(), 3u);
  EXPECT_EQ((*writer)->num_sequences(), 2u);
  EXPECT_EQ((*writer)->num_tokens(), 5u);
  auto result = (*writer)->Finish();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(ReadBytes(Prefix() + ".bin"), U16Bytes({1, 50256, 2, 3, 50256}));
  EXPECT_EQ(ReadBytes(Prefix() + ".idx"), IdxBytes(8, {2, 3}, {0, 4}, {0, 1, 1, 2}));
}

TEST_F(IndexedDatasetTest, MultiSequenceDocumentsAreByteExact) {
  ASSERT_TRUE(WriteDataset(
                  Prefix(),
                  {{{1, 2, 3, 4, 5, 6}, {2, 3, 1}}, {{7, 8}, {2}}, {{}, {}}, {{9, 10, 11}, {1, 2}}})
                  .ok());
  EXPECT_EQ(ReadBytes(Prefix() + ".bin"), U16Bytes({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(ReadBytes(Prefix() + ".idx"),
            IdxBytes(8, {2, 3, 1, 2, 1, 2}, {0, 4, 10, 12, 16, 18}, {0, 3, 4, 4, 6}));
}

TEST_F(IndexedDatasetTest, Int32DTypeIsByteExact) {
  IndexedDatasetWriterOptions options;
  options.dtype = TokenDType::kInt32;
  auto result =
      WriteDataset(Prefix(), {{{100000, 2147483647u, 0}, {3}}, {{65536, 50256}, {1, 1}}}, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->bin_bytes, 20u);
  EXPECT_EQ(ReadBytes(Prefix() + ".bin"), I32Bytes({100000, 2147483647, 0, 65536, 50256}));
  EXPECT_EQ(ReadBytes(Prefix() + ".idx"), IdxBytes(4, {3, 1, 1}, {0, 12, 16}, {0, 1, 3}));
}

// Documents given as 16-bit ids make the same files as the same ids given as 32-bit ones, in a
// uint16 .bin (copied as they are) and an int32 one (widened).
TEST_F(IndexedDatasetTest, SixteenBitDocumentsWriteTheSameFiles) {
  std::vector<std::vector<uint32_t>> docs = {{15496, 995, 50256}, {}, {65535, 0, 1}};
  std::vector<uint32_t> big(10000);  // more than one widening block
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint32_t>(i * 7 % 65536);
  docs.push_back(big);
  for (TokenDType dtype : {TokenDType::kUint16, TokenDType::kInt32}) {
    IndexedDatasetWriterOptions options;
    options.dtype = dtype;
    options.buffer_bytes = 4096;  // flushes inside a document
    std::string files[2][2];
    for (int narrow = 0; narrow < 2; ++narrow) {
      const std::string prefix = Prefix() + std::to_string(narrow);
      auto writer = IndexedDatasetWriter::Create(prefix, options);
      ASSERT_TRUE(writer.ok()) << writer.status();
      for (const std::vector<uint32_t>& doc : docs) {
        const std::vector<uint16_t> doc16(doc.begin(), doc.end());
        ASSERT_TRUE((narrow ? (*writer)->AddDocument16(doc16)
                            : (*writer)->AddDocument(absl::MakeConstSpan(doc)))
                        .ok());
      }
      ASSERT_TRUE((*writer)->Finish().ok());
      files[narrow][0] = ReadBytes(prefix + ".bin");
      files[narrow][1] = ReadBytes(prefix + ".idx");
    }
    EXPECT_EQ(files[1][0], files[0][0]);
    EXPECT_EQ(files[1][1], files[0][1]);
    EXPECT_EQ(files[0][0].size(), (3 + 3 + 10000) * DTypeSize(dtype));
  }
}

TEST_F(IndexedDatasetTest, HeaderFieldsAreAtDocumentedOffsets) {
  ASSERT_TRUE(WriteDataset(Prefix(), {{{1, 2}, {2}}, {{}, {}}, {{3}, {1}}}).ok());
  const std::string idx = ReadBytes(Prefix() + ".idx");
  ASSERT_EQ(idx.size(), 34u + 12 * 2 + 8 * 4);
  auto u64_at = [&](size_t offset) {
    uint64_t v;
    std::memcpy(&v, idx.data() + offset, 8);
    return v;
  };
  EXPECT_EQ(idx.substr(0, 9), std::string("MMIDIDX\0\0", 9));
  EXPECT_EQ(kIdxVersionOffset, 9u);
  EXPECT_EQ(u64_at(9), 1u);
  EXPECT_EQ(kIdxDTypeOffset, 17u);
  EXPECT_EQ(static_cast<uint8_t>(idx[17]), 8);
  EXPECT_EQ(kIdxSequenceCountOffset, 18u);
  EXPECT_EQ(u64_at(18), 2u);  // S
  EXPECT_EQ(kIdxDocumentCountOffset, 26u);
  EXPECT_EQ(u64_at(26), 4u);  // documents + 1
  EXPECT_EQ(kIdxHeaderBytes, 34u);
  int32_t length1;
  std::memcpy(&length1, idx.data() + 34 + 4, 4);  // unaligned, as in every .idx
  EXPECT_EQ(length1, 1);
  EXPECT_EQ(u64_at(34 + 4 * 2 + 8), 4u);       // pointers[1] = 2 tokens * 2 bytes
  EXPECT_EQ(u64_at(34 + 12 * 2 + 8 * 3), 2u);  // last document index = S
}

// Golden files written by tests/data/format/make_golden.py, a transcription of Megatron's
// IndexedDatasetBuilder (numpy), with the same documents as below.
class MegatronGoldenTest : public IndexedDatasetTest {
 protected:
  void ExpectSameAsGolden(const std::string& name, const std::vector<Doc>& docs,
                          IndexedDatasetWriterOptions options, const std::string& out = "ours") {
    const std::string golden = std::string(PILEPREP_TEST_DATA_DIR) + "/format/" + name;
    const std::string golden_bin = ReadBytes(golden + ".bin");
    const std::string golden_idx = ReadBytes(golden + ".idx");
    ASSERT_FALSE(golden_bin.empty()) << golden << ".bin missing";
    ASSERT_FALSE(golden_idx.empty()) << golden << ".idx missing";
    auto result = WriteDataset(Prefix(out), docs, options);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_TRUE(ReadBytes(Prefix(out) + ".bin") == golden_bin) << name << ".bin differs";
    EXPECT_TRUE(ReadBytes(Prefix(out) + ".idx") == golden_idx) << name << ".idx differs";
    EXPECT_EQ(result->bin_bytes, golden_bin.size());
    EXPECT_EQ(result->idx_bytes, golden_idx.size());
  }
};

// make_golden.py's lcg_documents: 0..40 tokens per document, EOD-terminated, empty when 0.
std::vector<Doc> LcgDocuments(int count, uint64_t seed) {
  uint64_t x = seed;
  auto next = [&x]() {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return x >> 33;
  };
  std::vector<Doc> docs;
  for (int i = 0; i < count; ++i) {
    const int32_t n = static_cast<int32_t>(next() % 41);
    Doc doc;
    if (n > 0) {
      for (int32_t j = 0; j + 1 < n; ++j)
        doc.tokens.push_back(static_cast<uint32_t>(next() % 50257));
      doc.tokens.push_back(50256);
      doc.lengths.push_back(n);
    }
    docs.push_back(std::move(doc));
  }
  return docs;
}

TEST_F(MegatronGoldenTest, HandWrittenUint16MatchesMegatronBuilder) {
  ExpectSameAsGolden("hand_uint16",
                     {{{15496, 995, 50256}, {3}},
                      {{}, {}},
                      {{0, 65535, 50256}, {3}},
                      {{1, 2, 3, 4, 5, 6}, {2, 3, 1}},
                      {{}, {}},
                      {{7, 50256}, {2}}},
                     {});
}

TEST_F(MegatronGoldenTest, HandWrittenInt32MatchesMegatronBuilder) {
  IndexedDatasetWriterOptions options;
  options.dtype = TokenDType::kInt32;
  ExpectSameAsGolden(
      "hand_int32",
      {{{100000, 2147483647u, 0}, {3}}, {{}, {}}, {{5, 6, 7, 8}, {1, 3}}, {{65536, 50256}, {2}}},
      options);
}

TEST_F(MegatronGoldenTest, GeneratedDocumentsMatchMegatronBuilderWithAnyBufferSize) {
  const std::vector<Doc> docs = LcgDocuments(300, 2024);
  ExpectSameAsGolden("lcg300_uint16", docs, {});
  IndexedDatasetWriterOptions tiny;
  tiny.buffer_bytes = 9;  // odd on purpose: a uint16 never straddles a flush
  tiny.spill_buffer_bytes = 12;
  tiny.sync = false;
  ExpectSameAsGolden("lcg300_uint16", docs, tiny, "ours_tiny_buffers");
}

TEST_F(IndexedDatasetTest, ZeroTokenDatasetPublishesNothingAndLeavesNoFiles) {
  {
    auto writer = IndexedDatasetWriter::Create(Prefix());
    ASSERT_TRUE(writer.ok()) << writer.status();
    auto result = (*writer)->Finish();
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_FALSE(result->published);
    EXPECT_EQ(result->num_documents, 0u);
  }
  EXPECT_THAT(Files(), IsEmpty());
  {
    auto writer = IndexedDatasetWriter::Create(Prefix());
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)->AddDocument(std::vector<uint32_t>{}).ok());
    ASSERT_TRUE((*writer)->AddDocument(std::vector<uint32_t>{}).ok());
    auto result = (*writer)->Finish();
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_FALSE(result->published);
    EXPECT_EQ(result->num_documents, 2u);
    EXPECT_EQ(result->num_tokens, 0u);
    EXPECT_EQ(result->bin_bytes, 0u);
    EXPECT_THAT(Files(), IsEmpty());
  }
  EXPECT_THAT(Files(), IsEmpty());
}

TEST_F(IndexedDatasetTest, AbortLeavesNoTemporaries) {
  auto writer = IndexedDatasetWriter::Create(Prefix());
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->AddDocument(std::vector<uint32_t>{1, 2, 3}).ok());
  EXPECT_THAT(Files(), UnorderedElementsAre("ds.bin.pileprep-tmp", "ds.lengths.pileprep-tmp",
                                            "ds.docidx.pileprep-tmp"));
  (*writer)->Abort();
  EXPECT_THAT(Files(), IsEmpty());
  EXPECT_EQ((*writer)->AddDocument(std::vector<uint32_t>{1}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*writer)->Finish().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Files(), IsEmpty());
}

TEST_F(IndexedDatasetTest, DestructorWithoutFinishLeavesNoTemporaries) {
  {
    auto writer = IndexedDatasetWriter::Create(Prefix());
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (uint32_t i = 0; i < 1000; ++i) {
      ASSERT_TRUE((*writer)->AddDocument(std::vector<uint32_t>{i, 50256}).ok());
    }
    EXPECT_FALSE(Files().empty());
  }
  EXPECT_THAT(Files(), IsEmpty());
}

TEST_F(IndexedDatasetTest, NothingAppearsUnderFinalNamesUntilFinish) {
  IndexedDatasetWriterOptions options;
  options.buffer_bytes = 64 << 10;
  auto writer = IndexedDatasetWriter::Create(Prefix(), options);
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (uint32_t i = 0; i < 100000; ++i) {  // more than one buffer of .bin
    ASSERT_TRUE((*writer)->AddDocument(std::vector<uint32_t>{i % 50000, 7, 50256}).ok());
  }
  EXPECT_FALSE(std::filesystem::exists(Prefix() + ".bin"));
  EXPECT_FALSE(std::filesystem::exists(Prefix() + ".idx"));
  EXPECT_GT(std::filesystem::file_size(Prefix() + ".bin.pileprep-tmp"), 0u);
  auto result = (*writer)->Finish();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(Files(), ElementsAre("ds.bin", "ds.idx"));
  EXPECT_EQ(std::filesystem::file_size(Prefix() + ".bin"), 600000u);
}

TEST_F(IndexedDatasetTest, ExistingFinalFilesAreReplacedAtomically) {
  ASSERT_TRUE(WriteDataset(Prefix(), {{{1, 2, 3}, {3}}}).ok());
  const std::string old_bin = ReadBytes(Prefix() + ".bin");
  struct stat old_stat;
  ASSERT_EQ(stat((Prefix() + ".bin").c_str(), &old_stat), 0);
  // A reader holding the old .bin open (as a training job's mmap does).
  int old_fd = open((Prefix() + ".bin").c_str(), O_RDONLY);
  ASSERT_GE(old_fd, 0);

  auto writer = IndexedDatasetWriter::Create(Prefix());
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->AddDocument(std::vector<uint32_t>{9, 8, 7, 6, 5}).ok());
  EXPECT_EQ(ReadBytes(Prefix() + ".bin"), old_bin);  // untouched until Finish
  ASSERT_TRUE((*writer)->Finish().ok());

  EXPECT_EQ(ReadBytes(Prefix() + ".bin"), U16Bytes({9, 8, 7, 6, 5}));
  EXPECT_EQ(ReadBytes(Prefix() + ".idx"), IdxBytes(8, {5}, {0}, {0, 1}));
  struct stat new_stat;
  ASSERT_EQ(stat((Prefix() + ".bin").c_str(), &new_stat), 0);
  EXPECT_NE(new_stat.st_ino, old_stat.st_ino);  // renamed over, never rewritten in place
  char buf[16] = {};
  EXPECT_EQ(pread(old_fd, buf, sizeof(buf), 0), 6);
  EXPECT_EQ(std::string(buf, 6), old_bin);
  close(old_fd);
  EXPECT_THAT(Files(), ElementsAre("ds.bin", "ds.idx"));
}

// The old .idx goes first; if the new .bin then cannot take its name, the old .bin must not stay
// behind alone (a .bin without .idx): neither dataset is left.
TEST_F(IndexedDatasetTest, PublishFailingAfterTheOldIdxIsGoneLeavesNeitherName) {
  ASSERT_TRUE(WriteDataset(Prefix(), {{{1, 2, 3}, {3}}}).ok());
  WriteBytes(Prefix() + ".idx.new", "new idx");
  const absl::Status s = internal::PublishDataset(Prefix() + ".bin.missing", Prefix() + ".idx.new",
                                                  Prefix(), /*sync=*/true);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("ds.bin"));
  EXPECT_THAT(Files(), ElementsAre("ds.idx.new"));
}

// Prepare leaves both files complete under their temporary names (the old dataset still in place),
// Publish renames those very files (same inodes) into place.
TEST_F(IndexedDatasetTest, PrepareCompletesTheTemporariesAndPublishRenamesThem) {
  ASSERT_TRUE(WriteDataset(Prefix(), {{{1, 2, 3}, {3}}}).ok());
  const std::string old_bin = ReadBytes(Prefix() + ".bin");
  const std::string old_idx = ReadBytes(Prefix() + ".idx");
  auto writer = IndexedDatasetWriter::Create(Prefix());
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->AddDocument(std::vector<uint32_t>{9, 8, 7, 6, 5}).ok());
  auto prepared = (*writer)->Prepare();
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_FALSE(prepared->published);
  EXPECT_EQ(prepared->bin_bytes, 10u);
  EXPECT_EQ(prepared->idx_bytes, IdxBytes(8, {5}, {0}, {0, 1}).size());
  EXPECT_THAT(Files(),
              ElementsAre("ds.bin", "ds.bin.pileprep-tmp", "ds.idx", "ds.idx.pileprep-tmp"));
  EXPECT_EQ((*writer)->bin_temp_path(), Prefix() + ".bin.pileprep-tmp");
  EXPECT_EQ(ReadBytes((*writer)->bin_temp_path()), U16Bytes({9, 8, 7, 6, 5}));
  EXPECT_EQ(ReadBytes((*writer)->idx_temp_path()), IdxBytes(8, {5}, {0}, {0, 1}));
  EXPECT_EQ(ReadBytes(Prefix() + ".bin"), old_bin);
  EXPECT_EQ(ReadBytes(Prefix() + ".idx"), old_idx);
  struct stat bin_tmp, idx_tmp;
  ASSERT_EQ(stat((*writer)->bin_temp_path().c_str(), &bin_tmp), 0);
  ASSERT_EQ(stat((*writer)->idx_temp_path().c_str(), &idx_tmp), 0);
  // Only Publish or Abort may follow.
  EXPECT_EQ((*writer)->AddDocument(std::vector<uint32_t>{1}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*writer)->Prepare().status().code(), absl::StatusCode::kFailedPrecondition);

  auto published = (*writer)->Publish();
  ASSERT_TRUE(published.ok()) << published.status();
  EXPECT_TRUE(published->published);
  EXPECT_EQ(published->bin_bytes, 10u);
  EXPECT_EQ(published->num_documents, 1u);
  EXPECT_THAT(Files(), ElementsAre("ds.bin", "ds.idx"));
  struct stat bin, idx;
  ASSERT_EQ(stat((Prefix() + ".bin").c_str(), &bin), 0);
  ASSERT_EQ(stat((Prefix() + ".idx").c_str(), &idx), 0);
  EXPECT_EQ(bin.st_ino, bin_tmp.st_ino);
  EXPECT_EQ(idx.st_ino, idx_tmp.st_ino);
  EXPECT_EQ((*writer)->Publish().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(IndexedDatasetTest, AbortAfterPrepareKeepsTheOldDatasetAndRemovesTheTemporaries) {
  ASSERT_TRUE(WriteDataset(Prefix(), {{{1, 2, 3}, {3}}}).ok());
  const std::string old_bin = ReadBytes(Prefix() + ".bin");
  {
    auto writer = IndexedDatasetWriter::Create(Prefix());
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)->AddDocument(std::vector<uint32_t>{4}).ok());
    ASSERT_TRUE((*writer)->Prepare().ok());
    (*writer)->Abort();
    EXPECT_EQ((*writer)->Publish().status().code(), absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_THAT(Files(), ElementsAre("ds.bin", "ds.idx"));
  EXPECT_EQ(ReadBytes(Prefix() + ".bin"), old_bin);
  {
    auto writer = IndexedDatasetWriter::Create(Prefix());  // destroyed after Prepare
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)->AddDocument(std::vector<uint32_t>{4}).ok());
    ASSERT_TRUE((*writer)->Prepare().ok());
  }
  EXPECT_THAT(Files(), ElementsAre("ds.bin", "ds.idx"));
  EXPECT_EQ(ReadBytes(Prefix() + ".bin"), old_bin);
  // No tokens: Prepare is the end (nothing to publish), as Finish's empty case.
  auto writer = IndexedDatasetWriter::Create(Prefix());
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->AddDocument(std::vector<uint32_t>{}).ok());
  auto prepared = (*writer)->Prepare();
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_FALSE(prepared->published);
  EXPECT_EQ(prepared->num_documents, 1u);
  EXPECT_EQ((*writer)->Publish().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Files(), ElementsAre("ds.bin", "ds.idx"));
}

// Runs in a forked child: as root, drops to nobody first, since root ignores directory permissions.
TEST_F(IndexedDatasetTest, ReadOnlyDirectoryGivesClearError) {
  const std::string ro = dir_ + "/ro";
  ASSERT_EQ(mkdir(ro.c_str(), 0555), 0);
  ASSERT_EQ(chmod(ro.c_str(), 0555), 0);
  EXPECT_EXIT(
      {
        if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(3);
        auto writer = IndexedDatasetWriter::Create(ro + "/ds");
        if (writer.ok()) _exit(1);
        const std::string message(writer.status().message());
        fprintf(stderr, "%s\n", message.c_str());
        bool clear = absl::StrContains(message, ro + "/ds.bin.pileprep-tmp") &&
                     absl::StrContains(message, "Permission denied") &&
                     writer.status().code() == absl::StatusCode::kPermissionDenied;
        _exit(clear ? 0 : 2);
      },
      ::testing::ExitedWithCode(0), "Permission denied");
  EXPECT_TRUE(std::filesystem::is_empty(ro));
}

TEST_F(IndexedDatasetTest, MissingDirectoryGivesClearError) {
  auto writer = IndexedDatasetWriter::Create(dir_ + "/no/such/dir/ds");
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(writer.status().message(), HasSubstr(dir_ + "/no/such/dir/ds.bin.pileprep-tmp"));
  EXPECT_THAT(writer.status().message(), HasSubstr("No such file or directory"));

  WriteBytes(dir_ + "/plainfile", "x");
  writer = IndexedDatasetWriter::Create(dir_ + "/plainfile/ds");
  ASSERT_FALSE(writer.ok());
  EXPECT_THAT(writer.status().message(), HasSubstr("Not a directory"));
  EXPECT_THAT(Files(), ElementsAre("plainfile"));
}

TEST_F(IndexedDatasetTest, InvalidPrefixOrOptionsAreRefused) {
  EXPECT_EQ(IndexedDatasetWriter::Create("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(IndexedDatasetWriter::Create(dir_ + "/").status().code(),
            absl::StatusCode::kInvalidArgument);
  IndexedDatasetWriterOptions options;
  options.buffer_bytes = 1;
  EXPECT_EQ(IndexedDatasetWriter::Create(Prefix(), options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = {};
  options.dtype = static_cast<TokenDType>(7);
  EXPECT_EQ(IndexedDatasetWriter::Create(Prefix(), options).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Files(), IsEmpty());
}

// Lowers RLIMIT_FSIZE for the test's lifetime, with SIGXFSZ ignored, so that writes past `bytes` fail
// with EFBIG (as root too, unlike a read-only or full file system).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    if (getrlimit(RLIMIT_FSIZE, &old_) != 0) return;
    old_handler_ = signal(SIGXFSZ, SIG_IGN);
    rlimit small = old_;
    small.rlim_cur = bytes;
    ok_ = setrlimit(RLIMIT_FSIZE, &small) == 0;
  }
  ~FileSizeLimit() {
    if (old_handler_ == SIG_ERR) return;
    setrlimit(RLIMIT_FSIZE, &old_);
    signal(SIGXFSZ, old_handler_);
  }
  bool ok() const { return ok_; }

 private:
  rlimit old_{};
  sighandler_t old_handler_ = SIG_ERR;
  bool ok_ = false;
};

// A write error mid-stream (here EFBIG from RLIMIT_FSIZE, which works as root, like ENOSPC would):
// the error names the file and strerror, the temporaries go, and nothing is published.
TEST_F(IndexedDatasetTest, WriteErrorNamesFileAndLeavesNoTemporaries) {
  FileSizeLimit limit(1 << 20);
  ASSERT_TRUE(limit.ok());

  IndexedDatasetWriterOptions options;
  options.buffer_bytes = 64 << 10;
  auto writer = IndexedDatasetWriter::Create(Prefix(), options);
  ASSERT_TRUE(writer.ok()) << writer.status();
  std::vector<uint32_t> doc(1000, 42);
  absl::Status status;
  for (int i = 0; i < 10000 && status.ok(); ++i) status = (*writer)->AddDocument(doc);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(Prefix() + ".bin.pileprep-tmp: write at byte "));
  EXPECT_THAT(status.message(), HasSubstr("File too large"));
  EXPECT_THAT(Files(), IsEmpty());
  // A failed writer stays failed and publishes nothing.
  auto result = (*writer)->Finish();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(result.status().message(), HasSubstr("File too large"));
  EXPECT_THAT(Files(), IsEmpty());
}

TEST(BufferedFileWriter, FullDeviceReportsNoSpaceWithPath) {
  auto writer = internal::BufferedFileWriter::Open("/dev/full", 16);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->Append("0123456789", 10).ok());  // buffered
  absl::Status status = (*writer)->Flush();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(), "/dev/full: write at byte 0: No space left on device");
}

// Direct mode (O_DIRECT from a background thread) writes exactly the bytes it was given, whatever
// the append sizes, in-place fills, flushes and buffer size, the last partial block included, with
// and without early writeback (fdatasync from a second thread while the writes go on).
TEST_F(IndexedDatasetTest, DirectWriterWritesExactlyTheBytesGiven) {
  uint64_t seed = 7;
  auto next = [&] {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<size_t>(seed >> 33);
  };
  for (size_t buffer : {size_t{8}, size_t{4096}, size_t{10000}, size_t{1} << 16}) {
    for (size_t total : {size_t{0}, size_t{100}, size_t{4096}, size_t{12288}, size_t{100001},
                         size_t{1} << 20}) {
      for (uint64_t writeback : {uint64_t{0}, uint64_t{1}, uint64_t{40000}}) {
        const std::string path = Prefix("direct_" + std::to_string(buffer) + "_" +
                                        std::to_string(total) + "_" + std::to_string(writeback));
        auto w = internal::BufferedFileWriter::Open(path, buffer, /*direct=*/true);
        ASSERT_TRUE(w.ok()) << w.status();
        if (!(*w)->direct()) GTEST_SKIP() << ::testing::TempDir() << " does not take O_DIRECT";
        (*w)->SetEarlyWriteback(writeback);
        std::string want;
        while (want.size() < total) {
          const size_t n = std::min(total - want.size(), next() % 9000);
          std::string chunk(n, '\0');
          for (char& c : chunk) c = static_cast<char>(next());
          if (next() % 2 == 0 || (*w)->available() < n) {
            ASSERT_TRUE((*w)->Append(chunk.data(), n).ok());
          } else {  // filled in place, as the .bin's narrowing loop does
            std::memcpy((*w)->cursor(), chunk.data(), n);
            (*w)->Commit(n);
          }
          want += chunk;
          if (next() % 5 == 0) {
            ASSERT_TRUE((*w)->Flush().ok());
          }
        }
        EXPECT_EQ((*w)->bytes(), total);
        ASSERT_TRUE((*w)->Sync().ok());
        EXPECT_FALSE((*w)->direct());  // the last partial block went out through the page cache
        ASSERT_TRUE((*w)->Close().ok());
        const std::string got = ReadBytes(path);
        const size_t first_difference =
            std::mismatch(got.begin(), got.end(), want.begin(), want.end()).first - got.begin();
        EXPECT_TRUE(got == want) << "buffer " << buffer << ", " << total << " bytes, writeback "
                                 << writeback << ": got " << got.size()
                                 << " bytes, first difference at byte " << first_difference;
      }
    }
  }
}

// After Sync a direct writer goes on as a buffered one, at the end of the file.
TEST_F(IndexedDatasetTest, DirectWriterAppendsAfterSyncAtTheEnd) {
  auto w = internal::BufferedFileWriter::Open(Prefix("resync"), 8192, /*direct=*/true);
  ASSERT_TRUE(w.ok()) << w.status();
  if (!(*w)->direct()) GTEST_SKIP() << ::testing::TempDir() << " does not take O_DIRECT";
  const std::string first(8192, 'a'), second(8192 + 100, 'b');  // whole blocks, then more
  ASSERT_TRUE((*w)->Append(first.data(), first.size()).ok());
  ASSERT_TRUE((*w)->Sync().ok());
  ASSERT_TRUE((*w)->Append(second.data(), second.size()).ok());
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_TRUE(ReadBytes(Prefix("resync")) == first + second);
}

// The same documents make the same .bin and .idx with and without O_DIRECT.
TEST_F(IndexedDatasetTest, DirectAndBufferedWritersPublishTheSameFiles) {
  // Where the file system refuses O_DIRECT the writer falls back to buffered writes, and both runs
  // below would take the same path: nothing would be compared.
  {
    auto probe = internal::BufferedFileWriter::Open(Prefix("probe"), 4096, /*direct=*/true);
    ASSERT_TRUE(probe.ok()) << probe.status();
    if (!(*probe)->direct()) GTEST_SKIP() << ::testing::TempDir() << " does not take O_DIRECT";
  }
  std::mt19937_64 rng(5);
  std::vector<std::vector<uint32_t>> docs(3000);
  for (auto& d : docs) {
    d.resize(rng() % 700);
    for (uint32_t& id : d) id = static_cast<uint32_t>(rng() % 50257);
  }
  for (bool direct : {false, true}) {
    IndexedDatasetWriterOptions options;
    options.direct_io = direct;
    options.buffer_bytes = 12345;  // not a whole number of blocks
    auto writer = IndexedDatasetWriter::Create(Prefix(direct ? "direct" : "buffered"), options);
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (const auto& d : docs) ASSERT_TRUE((*writer)->AddDocument(d).ok());
    ASSERT_TRUE((*writer)->Finish().ok());
  }
  for (const char* ext : {".bin", ".idx"}) {
    const std::string a = ReadBytes(Prefix("buffered") + ext), b = ReadBytes(Prefix("direct") + ext);
    EXPECT_GT(a.size(), 1000u);
    EXPECT_TRUE(a == b) << ext << ": " << a.size() << " vs " << b.size() << " bytes";
  }
}

TEST_F(IndexedDatasetTest, DirectWriterDestroyedWithoutCloseStopsItsThreads) {
  for (uint64_t writeback : {uint64_t{0}, uint64_t{4096}}) {
    auto w = internal::BufferedFileWriter::Open(Prefix("abandoned"), 4096, /*direct=*/true);
    ASSERT_TRUE(w.ok()) << w.status();
    if (!(*w)->direct()) GTEST_SKIP() << ::testing::TempDir() << " does not take O_DIRECT";
    (*w)->SetEarlyWriteback(writeback);
    const std::string data(100000, 'x');
    ASSERT_TRUE((*w)->Append(data.data(), data.size()).ok());
    w->reset();  // joins the background threads; queued writes are dropped, nothing hangs
  }
}

// A write error of the background thread reaches the caller with the file and offset, and stays.
TEST_F(IndexedDatasetTest, DirectWriterReportsBackgroundWriteErrors) {
  FileSizeLimit limit(64 << 10);
  ASSERT_TRUE(limit.ok());
  auto w = internal::BufferedFileWriter::Open(Prefix("limited"), 16 << 10, /*direct=*/true);
  ASSERT_TRUE(w.ok()) << w.status();
  if (!(*w)->direct()) GTEST_SKIP() << ::testing::TempDir() << " does not take O_DIRECT";
  const std::string data(1 << 20, 'y');
  absl::Status status = (*w)->Append(data.data(), data.size());  // may still be queued
  if (status.ok()) status = (*w)->Sync();
  EXPECT_THAT(status.message(), HasSubstr(Prefix("limited") + ": write at byte "));
  EXPECT_THAT(status.message(), HasSubstr("File too large"));
  EXPECT_FALSE((*w)->Close().ok());
}

TEST_F(IndexedDatasetTest, TokenTooLargeForUint16NamesDocumentAndFailsWriter) {
  auto writer = IndexedDatasetWriter::Create(Prefix());
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->AddDocument(std::vector<uint32_t>{1, 2}).ok());
  ASSERT_TRUE((*writer)->AddDocument(std::vector<uint32_t>{}).ok());
  absl::Status status = (*writer)->AddDocument(std::vector<uint32_t>{5, 65535, 65536, 50256});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            Prefix() + ".bin: document 2 (0-based): token 65536 at position 2 does not fit uint16");
  EXPECT_THAT(Files(), IsEmpty());
  EXPECT_EQ((*writer)->AddDocument(std::vector<uint32_t>{1}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE((*writer)->Finish().ok());
  EXPECT_THAT(Files(), IsEmpty());
}

TEST_F(IndexedDatasetTest, TokenTooLargeForInt32IsRefused) {
  IndexedDatasetWriterOptions options;
  options.dtype = TokenDType::kInt32;
  auto writer = IndexedDatasetWriter::Create(Prefix(), options);
  ASSERT_TRUE(writer.ok()) << writer.status();
  absl::Status status = (*writer)->AddDocument(std::vector<uint32_t>{2147483648u});
  EXPECT_THAT(status.message(), HasSubstr("document 0 (0-based): token 2147483648 at position 0"));
  EXPECT_THAT(Files(), IsEmpty());
}

TEST_F(IndexedDatasetTest, BadSequenceLengthsAreRefused) {
  for (const Doc& doc : std::vector<Doc>{{{1, 2}, {2, 0}},   // zero length
                                         {{1, 2}, {3, -1}},  // negative
                                         {{1, 2, 3}, {2}},   // sum too small
                                         {{1}, {}},          // tokens without sequences
                                         {{}, {1}}}) {       // sequences without tokens
    auto writer = IndexedDatasetWriter::Create(Prefix());
    ASSERT_TRUE(writer.ok()) << writer.status();
    absl::Status status = (*writer)->AddDocument(doc.tokens, doc.lengths);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("document 0 (0-based)"));
    EXPECT_THAT(Files(), IsEmpty());
  }
}

TEST_F(IndexedDatasetTest, DocumentLongerThanInt32IsRefusedBeforeReadingIt) {
  auto writer = IndexedDatasetWriter::Create(Prefix());
  ASSERT_TRUE(writer.ok()) << writer.status();
  uint32_t one = 1;
  // The length is checked first; the (bogus) data behind the span is never read.
  absl::Span<const uint32_t> huge(&one, size_t{1} << 31);
  absl::Status status = (*writer)->AddDocument(huge);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("2147483648 tokens do not fit an int32 sequence length"));
}

TEST_F(IndexedDatasetTest, FinishTwiceFails) {
  auto writer = IndexedDatasetWriter::Create(Prefix());
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->AddDocument(std::vector<uint32_t>{1}).ok());
  ASSERT_TRUE((*writer)->Finish().ok());
  EXPECT_EQ((*writer)->Finish().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*writer)->AddDocument(std::vector<uint32_t>{1}).code(),
            absl::StatusCode::kFailedPrecondition);
  (*writer)->Abort();  // no effect after Finish
  EXPECT_THAT(Files(), ElementsAre("ds.bin", "ds.idx"));
}

size_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t total = 0, resident = 0;
  statm >> total >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

long PeakResidentKiB() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

// 1,000,000 documents: the per-document arrays (12 bytes each) go to spill files, not to memory.
TEST_F(IndexedDatasetTest, MillionDocumentsStreamThroughSpillFiles) {
  constexpr uint32_t kDocs = 1000000;
  constexpr uint32_t kWarmup = 100000;
  IndexedDatasetWriterOptions options;
  options.buffer_bytes = 64 << 10;
  options.spill_buffer_bytes = 64 << 10;
  options.sync = false;
  auto writer = IndexedDatasetWriter::Create(Prefix(), options);
  ASSERT_TRUE(writer.ok()) << writer.status();
  std::vector<uint32_t> doc = {0, 50256};
  auto add = [&](uint32_t i) {
    doc[0] = i % 50000;
    // Every 10th document is empty text: it costs a document index but no sequence.
    return i % 10 == 9 ? (*writer)->AddDocument(absl::Span<const uint32_t>())
                       : (*writer)->AddDocument(doc);
  };
  for (uint32_t i = 0; i < kWarmup; ++i) ASSERT_TRUE(add(i).ok());
  const size_t rss_before = ResidentBytes();
  for (uint32_t i = kWarmup; i < kDocs; ++i) ASSERT_TRUE(add(i).ok());
  const size_t rss_after = ResidentBytes();
  // In-memory arrays would add 900,000 * (4 + 8) bytes at least; the writer adds nothing per
  // document.
  EXPECT_LT(rss_after, rss_before + (2 << 20)) << rss_before << " -> " << rss_after;

  const uint64_t sequences = kDocs / 10 * 9;
  EXPECT_EQ((*writer)->num_sequences(), sequences);
  EXPECT_GE(std::filesystem::file_size(Prefix() + ".lengths.pileprep-tmp"),
            sequences * 4 - options.spill_buffer_bytes);
  EXPECT_GE(std::filesystem::file_size(Prefix() + ".docidx.pileprep-tmp"),
            uint64_t{kDocs} * 8 - options.spill_buffer_bytes);

  // Finish assembles the 12 MB .idx a chunk at a time: the peak RSS barely moves.
  const long peak_before = PeakResidentKiB();
  auto result = (*writer)->Finish();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_LT(PeakResidentKiB(), peak_before + 2048);
  EXPECT_THAT(Files(), ElementsAre("ds.bin", "ds.idx"));
  EXPECT_EQ(result->idx_bytes, 34 + 12 * sequences + 8 * (kDocs + 1));
  EXPECT_EQ(std::filesystem::file_size(Prefix() + ".idx"), result->idx_bytes);
  EXPECT_EQ(std::filesystem::file_size(Prefix() + ".bin"), sequences * 4);

  auto index = ReadIndex(Prefix() + ".idx");
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->sequence_lengths.size(), sequences);
  ASSERT_EQ(index->document_indices.size(), kDocs + 1u);
  EXPECT_EQ(index->sequence_pointers.back(), static_cast<int64_t>((sequences - 1) * 4));
  EXPECT_EQ(index->document_indices[10], 9);
  EXPECT_EQ(index->document_indices[kDocs], static_cast<int64_t>(sequences));
  for (size_t i = 0; i < sequences; ++i) {
    ASSERT_EQ(index->sequence_lengths[i], 2);
    ASSERT_EQ(index->sequence_pointers[i], static_cast<int64_t>(i * 4));
  }
}

TEST_F(IndexedDatasetTest, ReadIndexRoundTrips) {
  IndexedDatasetWriterOptions options;
  options.dtype = TokenDType::kInt32;
  ASSERT_TRUE(
      WriteDataset(Prefix(), {{{1, 2, 3, 4, 5, 6}, {2, 3, 1}}, {{}, {}}, {{70000}, {1}}}, options)
          .ok());
  auto index = ReadIndex(Prefix() + ".idx");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->dtype, TokenDType::kInt32);
  EXPECT_THAT(index->sequence_lengths, ElementsAre(2, 3, 1, 1));
  EXPECT_THAT(index->sequence_pointers, ElementsAre(0, 8, 20, 24));
  EXPECT_THAT(index->document_indices, ElementsAre(0, 3, 3, 4));

  auto golden = ReadIndex(std::string(PILEPREP_TEST_DATA_DIR) + "/format/hand_uint16.idx");
  ASSERT_TRUE(golden.ok()) << golden.status();
  EXPECT_EQ(golden->dtype, TokenDType::kUint16);
  EXPECT_THAT(golden->sequence_lengths, ElementsAre(3, 3, 2, 3, 1, 2));
  EXPECT_THAT(golden->sequence_pointers, ElementsAre(0, 6, 12, 16, 22, 24));
  EXPECT_THAT(golden->document_indices, ElementsAre(0, 1, 1, 2, 5, 5, 6));
}

// An index of no sequences (S = 0, one document index) reads as empty arrays: nothing is copied
// into them (an empty vector's data() may be null, and memcpy to null is undefined, which the
// UBSan build would stop on).
TEST_F(IndexedDatasetTest, ReadIndexOfNoSequences) {
  WriteBytes(Prefix() + ".idx", IdxBytes(8, {}, {}, {0}));
  auto index = ReadIndex(Prefix() + ".idx");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_TRUE(index->sequence_lengths.empty());
  EXPECT_TRUE(index->sequence_pointers.empty());
  EXPECT_THAT(index->document_indices, ElementsAre(0));
}

class ReadIndexRejects : public IndexedDatasetTest {
 protected:
  // A valid index (S = 2, D1 = 3) to corrupt.
  std::string Valid() const { return IdxBytes(8, {2, 1}, {0, 4}, {0, 1, 2}); }
  absl::Status ReadCorrupt(const std::string& bytes) {
    WriteBytes(Prefix() + ".idx", bytes);
    return ReadIndex(Prefix() + ".idx").status();
  }
};

TEST_F(ReadIndexRejects, BadMagic) {
  std::string bytes = Valid();
  bytes[3] = 'X';
  absl::Status status = ReadCorrupt(bytes);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(Prefix() + ".idx: byte 0: bad magic"));
  EXPECT_THAT(ReadCorrupt("").message(), HasSubstr("byte 0: bad magic"));
}

TEST_F(ReadIndexRejects, VersionOtherThanOne) {
  std::string bytes = Valid();
  bytes[9] = 2;
  EXPECT_THAT(ReadCorrupt(bytes).message(),
              HasSubstr(Prefix() + ".idx: byte 9: version 2, expected 1"));
}

TEST_F(ReadIndexRejects, NonTokenDTypes) {
  for (uint8_t code : {0, 1, 2, 3, 5, 6, 7, 9}) {
    std::string bytes = Valid();
    bytes[17] = static_cast<char>(code);
    EXPECT_THAT(ReadCorrupt(bytes).message(),
                HasSubstr(Prefix() + ".idx: byte 17: dtype code " + std::to_string(code) +
                          " is not a token dtype"));
  }
  std::string int32 = Valid();
  int32[17] = 4;
  EXPECT_TRUE(ReadCorrupt(int32).ok());
}

TEST_F(ReadIndexRejects, SizeThatDisagreesWithHeader) {
  const std::string valid = Valid();
  ASSERT_TRUE(ReadCorrupt(valid).ok());
  EXPECT_THAT(ReadCorrupt(valid.substr(0, valid.size() - 1)).message(),
              HasSubstr(Prefix() + ".idx: byte 18: the header declares 2 sequences and 3"));
  EXPECT_THAT(ReadCorrupt(valid + "x").message(), HasSubstr("but the file has 83 bytes"));
  EXPECT_THAT(ReadCorrupt(valid.substr(0, 20)).message(), HasSubstr("byte 20: file ends inside"));
  // Counts so large that 12·S would overflow 64 bits.
  std::string huge = valid;
  const uint64_t s = uint64_t{1} << 62;
  std::memcpy(huge.data() + 18, &s, 8);
  EXPECT_THAT(ReadCorrupt(huge).message(), HasSubstr("but the file has 82 bytes"));
}

TEST_F(ReadIndexRejects, MissingFileNamesPath) {
  absl::Status status = ReadIndex(Prefix() + ".idx").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(),
              HasSubstr(Prefix() + ".idx: cannot open: No such file or directory"));
}

}  // namespace
}  // namespace pileprep
