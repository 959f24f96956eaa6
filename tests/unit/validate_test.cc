// The validator: Megatron's golden pairs (regenerated from data/samples; byte-identical to Megatron's,
// checked by the golden test) are sound, and every corruption kind of issue 5 is caught with the
// right kind, offset, index and an actionable message.
#include "pileprep/validate.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pileprep/indexed_reader.h"
#include "pileprep/pipeline.h"
#include "testing/files.h"

namespace pileprep {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

using testing::ReadFile;
using testing::WriteFile;
template <typename T>
T Get(const std::string& s, size_t off) {
  T v;
  std::memcpy(&v, s.data() + off, sizeof(T));
  return v;
}
template <typename T>
void Put(std::string& s, size_t off, T v) {
  std::memcpy(s.data() + off, &v, sizeof(T));
}

class ValidateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("pileprep_validate_test_" + std::to_string(::getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    auto tokenizer = Gpt2Tokenizer::FromDefaultFiles({});
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    for (const char* n : {"00", "01"}) {
      auto source = OpenFileSource(std::string(PILEPREP_SOURCE_DIR "/data/samples/") + n +
                                   ".jsonl.zst");
      ASSERT_TRUE(source.ok()) << source.status();
      PipelineOptions options;
      options.writer.sync = false;
      ShardStats stats;
      const std::string prefix = (*dir_ / (std::string("my-gpt3_") + n + "_text_document")).string();
      ASSERT_TRUE(RunPipeline(**source, InputFormat::kZstd, **tokenizer, {prefix}, options, &stats)
                      .ok());
    }
    good_ = (*dir_ / "my-gpt3_00_text_document").string();
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  void SetUp() override {
    idx_ = ReadFile(good_ + ".idx");
    bin_ = ReadFile(good_ + ".bin");
    ASSERT_GT(idx_.size(), kIdxHeaderBytes);
    s_ = Get<uint64_t>(idx_, kIdxSequenceCountOffset);
    d1_ = Get<uint64_t>(idx_, kIdxDocumentCountOffset);
  }
  size_t LengthOffset(uint64_t i) const { return kIdxHeaderBytes + 4 * i; }
  size_t PointerOffset(uint64_t i) const { return kIdxHeaderBytes + 4 * s_ + 8 * i; }
  size_t DocOffset(uint64_t j) const { return kIdxHeaderBytes + 12 * s_ + 8 * j; }
  // Megatron 2023-06-26..2023-08-05 on the good pair's index: each sequence's last token (its EOD)
  // left out of its length, the pointers following those lengths.
  std::string WithEodOffByOne() const {
    std::string idx = idx_;
    int64_t pointer = 0;
    for (uint64_t i = 0; i < s_; ++i) {
      const int32_t length = Get<int32_t>(idx, LengthOffset(i)) - 1;
      Put<int32_t>(idx, LengthOffset(i), length);
      Put<int64_t>(idx, PointerOffset(i), pointer);
      pointer += 2 * length;
    }
    return idx;
  }

  // Writes the (corrupted) pair to files and validates it through the file path.
  ValidationReport Check(const std::string& idx, const std::string& bin,
                         ValidateOptions options = {}) {
    const std::string prefix =
        (*dir_ / ::testing::UnitTest::GetInstance()->current_test_info()->name()).string();
    WriteFile(prefix + ".idx", idx);
    WriteFile(prefix + ".bin", bin);
    auto report = ValidateDataset(prefix, options);
    EXPECT_TRUE(report.ok()) << report.status();
    // The in-memory entry point (the fuzzer's) agrees with the file one.
    ValidationReport again = ValidateBuffers(idx, bin, prefix, options);
    EXPECT_EQ(again.violations.size(), report->violations.size());
    return *std::move(report);
  }

  static fs::path* dir_;
  static std::string good_;
  std::string idx_, bin_;
  uint64_t s_ = 0, d1_ = 0;
};
fs::path* ValidateTest::dir_ = nullptr;
std::string ValidateTest::good_;

TEST_F(ValidateTest, GoldenDevShardsAreSound) {
  for (const char* n : {"00", "01"}) {
    ValidateOptions options;
    options.expect_eod = true;
    const std::string prefix = (*dir_ / (std::string("my-gpt3_") + n + "_text_document")).string();
    auto report = ValidateDataset(prefix, options);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->ok()) << FormatValidationReport(*report);
    EXPECT_TRUE(report->tokens_checked);
    EXPECT_EQ(report->dtype, TokenDType::kUint16);
    EXPECT_EQ(report->bin_bytes, 2 * report->tokens);
    EXPECT_EQ(report->documents, 2575u);
  }
}

TEST_F(ValidateTest, SameVerdictWithAnyThreadCount) {
  std::string bin = bin_;
  Put<uint16_t>(bin, 2 * 777777, 65535);
  Put<uint16_t>(bin, 2 * 12345, 50257);
  for (int threads : {1, 2, 7}) {
    ValidateOptions options;
    options.threads = threads;
    ValidationReport r = Check(idx_, bin, options);
    const Violation* v = r.Find("token_range");
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->file_offset, 2 * 12345);
    EXPECT_EQ(v->count, 2u);
  }
}

TEST_F(ValidateTest, OverLongBinIsCaught) {
  ValidationReport r = Check(idx_, bin_ + std::string("\x10\x00", 2));
  const Violation* v = r.Find("bin_size");
  ASSERT_NE(v, nullptr);
  EXPECT_THAT(v->message, HasSubstr("2 extra bytes"));
  EXPECT_THAT(v->message, HasSubstr(std::to_string(bin_.size())));
  EXPECT_EQ(r.violations.size(), 1u) << FormatValidationReport(r);
}

TEST_F(ValidateTest, TruncatedBinIsCaught) {
  ValidationReport r = Check(idx_, bin_.substr(0, bin_.size() - 100));
  const Violation* v = r.Find("bin_size");
  ASSERT_NE(v, nullptr);
  EXPECT_THAT(v->message, HasSubstr("100 bytes missing"));
  EXPECT_THAT(v->message, HasSubstr("truncated"));
}

// The .bin cut before its last sequences: not only the last one runs past the end.
TEST_F(ValidateTest, BinCutBeforeItsLastSequencesIsNamedTruncated) {
  ValidationReport r = Check(idx_, bin_.substr(0, bin_.size() / 2));
  const Violation* v = r.Find("bin_size");
  ASSERT_NE(v, nullptr);
  EXPECT_THAT(v->message, HasSubstr("truncated"));
  EXPECT_THAT(v->message, Not(HasSubstr("last sequence")));
}

// One damaged length, the pointers and the .bin intact: the length is named, at its own offset,
// not every pointer after it (each off by the same amount from the lengths' running sum) nor the
// .bin's size (the lengths' sum: "2 bytes missing: the .bin is truncated").
TEST_F(ValidateTest, DamagedLengthIsNamedNotThePointersAfterItNorTheBin) {
  for (int delta : {+1, -1}) {
    std::string idx = idx_;
    const int32_t length = Get<int32_t>(idx, LengthOffset(100));
    Put<int32_t>(idx, LengthOffset(100), length + delta);
    const ValidationReport r = Check(idx, bin_);
    ASSERT_EQ(r.violations.size(), 1u) << FormatValidationReport(r);
    const Violation* v = r.Find("length");
    ASSERT_NE(v, nullptr) << FormatValidationReport(r);
    EXPECT_EQ(v->index, 100);
    EXPECT_EQ(v->file_offset, static_cast<int64_t>(LengthOffset(100)));
    EXPECT_THAT(v->message, HasSubstr("sequence 100 has length " + std::to_string(length + delta) +
                                      " but its pointer and the next one's are " +
                                      std::to_string(length) + " tokens apart"));
    EXPECT_THAT(v->message, HasSubstr(delta > 0 ? "read 1 token of the next sequence"
                                                : "drop its last 1 token"));
  }
}

// A uint16 index of the given arrays (no checks: for building damaged ones).
std::string Uint16Index(const std::vector<int32_t>& lengths, const std::vector<int64_t>& pointers,
                        const std::vector<int64_t>& docs) {
  std::string idx("MMIDIDX\x00\x00", 9);
  auto append = [&idx](auto v) { idx.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  append(uint64_t{1});
  append(uint8_t{8});
  append(uint64_t{lengths.size()});
  append(uint64_t{docs.size()});
  for (int32_t n : lengths) append(n);
  for (int64_t p : pointers) append(p);
  for (int64_t d : docs) append(d);
  return idx;
}
std::string Uint16Tokens(const std::vector<uint16_t>& tokens) {
  return std::string(reinterpret_cast<const char*>(tokens.data()), 2 * tokens.size());
}

// Pointers off from a point on, the lengths intact (their sum is the .bin's size): the pointers
// are named, not the length before them, nor a "truncated" .bin.
TEST_F(ValidateTest, ShiftedPointersAreNotTakenForADamagedLength) {
  const std::string bin = Uint16Tokens({1, 2, 3, 4, 5, 6});
  ValidationReport r = Check(Uint16Index({2, 2, 2}, {0, 6, 10}, {0, 1, 2, 3}), bin);
  EXPECT_EQ(r.Find("length"), nullptr) << FormatValidationReport(r);
  EXPECT_EQ(r.Find("bin_size"), nullptr) << FormatValidationReport(r);
  ASSERT_NE(r.Find("pointer"), nullptr);
  EXPECT_EQ(r.Find("pointer")->index, 1);
  // Two neighbouring pointers damaged: each agrees with one side, yet no length is to blame.
  r = Check(Uint16Index({2, 2, 2, 2}, {0, 6, 10, 12}, {0, 4}),
            Uint16Tokens({1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(r.Find("length"), nullptr) << FormatValidationReport(r);
  ASSERT_NE(r.Find("pointer"), nullptr);
}

// The 2023 off-by-one in a dataset of another vocabulary (EOD 2, as Llama's): the same token at
// every place the bug puts one is named, without --eod-id.
TEST_F(ValidateTest, MegatronEodOffByOneIsNamedWithAnotherVocabularysEod) {
  const std::string bin = Uint16Tokens({5, 6, 2, 7, 8, 2, 9, 10, 2});
  const ValidationReport r = Check(Uint16Index({2, 2, 2}, {0, 4, 8}, {0, 1, 2, 3}), bin);
  const Violation* v = r.Find("bin_size");
  ASSERT_NE(v, nullptr) << FormatValidationReport(r);
  EXPECT_THAT(v->message, HasSubstr("EOD off-by-one"));
  EXPECT_THAT(v->message,
              HasSubstr("token 2 where each of the first 3 ends (its vocabulary's EOD?)"));
}

// A damaged pointer still is the pointer's fault: it disagrees with the lengths on both sides.
TEST_F(ValidateTest, DamagedPointerIsNotTakenForADamagedLength) {
  std::string idx = idx_;
  Put<int64_t>(idx, PointerOffset(100), Get<int64_t>(idx, PointerOffset(100)) + 20);
  const ValidationReport r = Check(idx, bin_);
  EXPECT_EQ(r.Find("length"), nullptr) << FormatValidationReport(r);
  ASSERT_NE(r.Find("pointer"), nullptr);
  EXPECT_EQ(r.Find("pointer")->index, 100);
}

// The last sequence's length damaged reads as a .bin cut inside that sequence: the message names
// the sequence and its length's offset, and says it may be either.
TEST_F(ValidateTest, LastSequencePastTheBinsEndIsNamed) {
  std::string idx = idx_;
  Put<int32_t>(idx, LengthOffset(s_ - 1), std::numeric_limits<int32_t>::max());
  const ValidationReport r = Check(idx, bin_);
  const Violation* v = r.Find("bin_size");
  ASSERT_NE(v, nullptr) << FormatValidationReport(r);
  EXPECT_THAT(v->message, HasSubstr("all in the last sequence (" + std::to_string(s_ - 1) +
                                    ", of length 2147483647 at "));
  EXPECT_THAT(v->message, HasSubstr(".idx byte " + std::to_string(LengthOffset(s_ - 1))));
  EXPECT_THAT(v->message, HasSubstr("or that length is corrupt"));
}

// The last sequence's length cut short leaves tokens after it that no sequence covers, which reads
// as bytes appended: named as that length, as above, not only as a pair that does not belong.
TEST_F(ValidateTest, LastSequenceShortOfTheBinsEndIsNamed) {
  std::string idx = idx_;
  const int32_t length = Get<int32_t>(idx, LengthOffset(s_ - 1));
  ASSERT_GT(length, 1);
  Put<int32_t>(idx, LengthOffset(s_ - 1), length - 1);
  const ValidationReport r = Check(idx, bin_);
  EXPECT_EQ(r.Find("length"), nullptr) << FormatValidationReport(r);
  const Violation* v = r.Find("bin_size");
  ASSERT_NE(v, nullptr) << FormatValidationReport(r);
  EXPECT_THAT(v->message, HasSubstr("2 extra bytes (1 token that no sequence covers), all after "
                                    "the last sequence (" +
                                    std::to_string(s_ - 1) + ", of length " +
                                    std::to_string(length - 1) + " at "));
  EXPECT_THAT(v->message, HasSubstr(".idx byte " + std::to_string(LengthOffset(s_ - 1))));
  EXPECT_THAT(v->message, HasSubstr("that length is corrupt (short by 1 token), the .bin and "
                                    ".idx do not belong together, or the writer lost count"));
}

TEST_F(ValidateTest, MegatronEodOffByOneIsNamed) {
  // Megatron 2023-06-26..2023-08-05: EOD written to the .bin but not counted in the lengths.
  ValidationReport r = Check(WithEodOffByOne(), bin_);
  const Violation* v = r.Find("bin_size");
  ASSERT_NE(v, nullptr);
  EXPECT_THAT(v->message, HasSubstr("EOD off-by-one"));
  EXPECT_THAT(v->message, HasSubstr("regenerate"));
}

TEST_F(ValidateTest, BadMagicIsCaught) {
  std::string idx = idx_;
  idx[3] = 'X';
  ValidationReport r = Check(idx, bin_);
  const Violation* v = r.Find("idx_magic");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->file_offset, 0);
  EXPECT_THAT(v->message, HasSubstr("byte 0: bad magic"));
}

TEST_F(ValidateTest, WrongVersionIsCaught) {
  std::string idx = idx_;
  Put<uint64_t>(idx, kIdxVersionOffset, 2);
  const ValidationReport report = Check(idx, bin_);
  const Violation* v = report.Find("idx_version");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->file_offset, 9);
  EXPECT_THAT(v->message, HasSubstr("version 2, expected 1"));
}

TEST_F(ValidateTest, FloatDTypeCodesAreRefused) {
  for (uint8_t code : {6, 7, 1, 0, 200}) {
    std::string idx = idx_;
    idx[kIdxDTypeOffset] = static_cast<char>(code);
    ValidationReport r = Check(idx, bin_);
    const Violation* v = r.Find("dtype");
    ASSERT_NE(v, nullptr) << int{code};
    EXPECT_EQ(v->file_offset, 17);
    EXPECT_THAT(v->message, HasSubstr("dtype code " + std::to_string(code)));
    if (code == 6 || code == 7) {
      EXPECT_THAT(v->message, HasSubstr("float"));
    }
    EXPECT_EQ(r.violations.size(), 1u) << FormatValidationReport(r);
  }
}

TEST_F(ValidateTest, TruncatedIdxIsCaught) {
  for (size_t cut : {size_t{1}, size_t{8}, idx_.size() - 20, idx_.size() - kIdxHeaderBytes}) {
    ValidationReport r = Check(idx_.substr(0, idx_.size() - cut), bin_);
    const Violation* v = r.Find("idx_size");
    ASSERT_NE(v, nullptr) << cut;
    EXPECT_THAT(v->message, HasSubstr("truncated"));
    // The offset the report gives (--json's file_offset) is the one its message names.
    EXPECT_THAT(v->message, HasSubstr(": byte " + std::to_string(v->file_offset) + ": ")) << cut;
  }
}

// One uncounted token per sequence that is not EOD: the size alone is no proof of the 2023 bug.
TEST_F(ValidateTest, ExtraTokensThatAreNotEodAreNotTakenForTheEodOffByOne) {
  const std::string idx = WithEodOffByOne();
  std::string bin = bin_;
  // The first sequence's uncounted last token (its EOD) made another id.
  const uint64_t first_end = 2 * static_cast<uint64_t>(Get<int32_t>(idx, LengthOffset(0)));
  ASSERT_EQ(Get<uint16_t>(bin, first_end), 50256);
  Put<uint16_t>(bin, first_end, 7);
  const ValidationReport r = Check(idx, bin);
  const Violation* v = r.Find("bin_size");
  ASSERT_NE(v, nullptr);
  EXPECT_THAT(v->message, Not(HasSubstr("EOD off-by-one")));
  EXPECT_THAT(v->message, HasSubstr("tokens that no sequence covers"));
  // Without reading the tokens (--index-only) the size is all there is: said so.
  const ValidationReport index_only = Check(idx, bin, ValidateOptions{.check_tokens = false});
  ASSERT_NE(index_only.Find("bin_size"), nullptr);
  EXPECT_THAT(index_only.Find("bin_size")->message, HasSubstr("the tokens not read"));
}

// A sequence count one short in the header: its arrays' bytes are left over at the end, and
// readers take every array from the wrong place; the message says which count fits the size.
TEST_F(ValidateTest, SequenceCountTooSmallIsNotCalledHarmlessTrailingBytes) {
  std::string idx = idx_;
  Put<uint64_t>(idx, kIdxSequenceCountOffset, s_ - 1);
  const ValidationReport r = Check(idx, bin_);
  const Violation* v = r.Find("idx_size");
  ASSERT_NE(v, nullptr);
  EXPECT_THAT(v->message, HasSubstr("12 trailing bytes"));
  EXPECT_THAT(v->message, HasSubstr("a header count too small"));
  EXPECT_THAT(v->message, HasSubstr("the size fits " + std::to_string(s_) +
                                    " sequences (byte 18 says " + std::to_string(s_ - 1) + ")"));
}

TEST_F(ValidateTest, TrailingIdxBytesAreCaught) {
  const ValidationReport report = Check(idx_ + "junk", bin_);
  const Violation* v = report.Find("idx_size");
  ASSERT_NE(v, nullptr);
  EXPECT_THAT(v->message, HasSubstr("4 trailing bytes"));
}

TEST_F(ValidateTest, PointerOffByOneTokenIsCaught) {
  std::string idx = idx_;
  Put<int64_t>(idx, PointerOffset(100), Get<int64_t>(idx, PointerOffset(100)) + 2);
  ValidationReport r = Check(idx, bin_);
  const Violation* v = r.Find("pointer");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->index, 100);
  EXPECT_EQ(v->file_offset, static_cast<int64_t>(PointerOffset(100)));
  EXPECT_EQ(v->count, 1u);
  EXPECT_THAT(v->message, HasSubstr("sequence 100"));
  EXPECT_THAT(v->message, HasSubstr("+1 token"));
}

TEST_F(ValidateTest, PointerOverflowedIn32BitsIsNamed) {
  // A shard past 4 GiB whose writer kept pointers in 32 bits: build the index only (the .bin size
  // check fails too, which is fine), with a length that pushes the running sum past 2^32.
  std::string idx = idx_;
  Put<int32_t>(idx, LengthOffset(0), 0x7fffffff);
  Put<int32_t>(idx, LengthOffset(1), 0x7fffffff);
  const int64_t true_ptr2 = int64_t{2} * 0x7fffffff * 2;
  Put<int64_t>(idx, PointerOffset(1), int64_t{2} * 0x7fffffff);
  Put<int64_t>(idx, PointerOffset(2), true_ptr2 & 0xffffffff);
  const ValidationReport report = Check(idx, bin_, ValidateOptions{.check_tokens = false});
  const Violation* v = report.Find("pointer");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->index, 2);
  EXPECT_THAT(v->message, HasSubstr("32 bits"));
}

// A pointer's upper bytes damaged in a small dataset: no 32-bit writer wrapped anything there.
TEST_F(ValidateTest, PointerDamagedInItsUpperBytesIsNotBlamedOnA32BitWriter) {
  std::string idx = idx_;
  Put<int64_t>(idx, PointerOffset(2), Get<int64_t>(idx, PointerOffset(2)) + (int64_t{1} << 32));
  const ValidationReport report = Check(idx, bin_);
  const Violation* v = report.Find("pointer");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->index, 2);
  EXPECT_THAT(v->message, Not(HasSubstr("32 bits")));
}

// The same bug in a --split-sentences dataset: one uncounted EOD per document, not per sequence.
TEST_F(ValidateTest, MegatronEodOffByOneIsNamedWhenSentencesWereSplit) {
  // Two documents of two sentences: tokens {1 2} {3 4 EOD} | {5 6} {7 EOD}, lengths not counting
  // either EOD, pointers following those lengths.
  const std::vector<int32_t> lengths = {2, 2, 2, 1};
  std::string bin;
  for (uint16_t t : {1, 2, 3, 4, 50256, 5, 6, 7, 50256}) bin.append(reinterpret_cast<char*>(&t), 2);
  std::string idx("MMIDIDX\x00\x00", 9);
  auto append = [&idx](auto v) { idx.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  append(uint64_t{1});
  append(uint8_t{8});  // uint16
  append(uint64_t{lengths.size()});
  append(uint64_t{3});  // documents + 1
  for (int32_t n : lengths) append(n);
  int64_t pointer = 0;
  for (int32_t n : lengths) {
    append(pointer);
    pointer += 2 * n;
  }
  for (int64_t d : {0, 2, 4}) append(d);
  ASSERT_EQ(idx.size(), kIdxHeaderBytes + 12 * lengths.size() + 8 * 3);
  const ValidationReport report = Check(idx, bin);
  const Violation* v = report.Find("bin_size");
  ASSERT_NE(v, nullptr) << FormatValidationReport(report);
  EXPECT_THAT(v->message, HasSubstr("one uncounted token per document"));
  EXPECT_THAT(v->message, HasSubstr("EOD off-by-one"));
}

TEST_F(ValidateTest, LastDocumentIndexNotSequenceCountIsCaught) {
  std::string idx = idx_;
  Put<int64_t>(idx, DocOffset(d1_ - 1), static_cast<int64_t>(s_ - 1));
  ValidationReport r = Check(idx, bin_);
  const Violation* v = r.Find("doc_index_end");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->index, static_cast<int64_t>(d1_ - 1));
  EXPECT_THAT(v->message, HasSubstr("sequences"));
  EXPECT_EQ(r.violations.size(), 1u) << FormatValidationReport(r);
}

// The header's document count is documents + 1 (document_indices holds a leading 0): 0 is no
// count any writer makes, and leaves no array to check.
TEST_F(ValidateTest, DocumentCountOfZeroIsCaught) {
  std::string idx = idx_.substr(0, DocOffset(0));  // the size that count describes
  Put<uint64_t>(idx, kIdxDocumentCountOffset, 0);
  const ValidationReport r = Check(idx, bin_);
  ASSERT_EQ(r.violations.size(), 1u) << FormatValidationReport(r);
  const Violation& v = r.violations[0];
  EXPECT_EQ(v.kind, "document_count");
  EXPECT_EQ(v.file_offset, static_cast<int64_t>(kIdxDocumentCountOffset));
  EXPECT_EQ(v.index, -1);
  EXPECT_EQ(v.message, r.prefix + ".idx: byte 26: document count 0: document_indices must hold "
                                  "at least its leading 0 (documents + 1 entries); regenerate the "
                                  "index");
  EXPECT_EQ(r.documents, 0u);
  EXPECT_EQ(r.sequences, s_);
}

// A count of 1 (no documents: document_indices is just its leading 0) over an index of sequences:
// the last document index is not the sequence count.
TEST_F(ValidateTest, DocumentCountOfOneOverSequencesIsCaught) {
  std::string idx = idx_.substr(0, DocOffset(1));
  Put<uint64_t>(idx, kIdxDocumentCountOffset, 1);
  const ValidationReport r = Check(idx, bin_);
  ASSERT_EQ(r.violations.size(), 1u) << FormatValidationReport(r);
  const Violation& v = r.violations[0];
  EXPECT_EQ(v.kind, "doc_index_end");
  EXPECT_EQ(v.file_offset, static_cast<int64_t>(DocOffset(0)));
  EXPECT_EQ(v.index, 0);
  EXPECT_EQ(v.message, r.prefix + ".idx: byte " + std::to_string(DocOffset(0)) +
                           ": the last document index (document_indices[0]) is 0 but the index "
                           "has " + std::to_string(s_) +
                           " sequences: current Megatron asserts they are equal; regenerate the "
                           "index");
  EXPECT_EQ(r.documents, 0u);
}

// A count one short of the array the file holds: its last entry is left over as trailing bytes,
// and the entry the count makes the last is not the sequence count.
TEST_F(ValidateTest, DocumentCountOneShortOfTheArrayIsCaught) {
  std::string idx = idx_;
  Put<uint64_t>(idx, kIdxDocumentCountOffset, d1_ - 1);
  const ValidationReport r = Check(idx, bin_);
  ASSERT_EQ(r.violations.size(), 2u) << FormatValidationReport(r);
  const Violation* size = r.Find("idx_size");
  ASSERT_NE(size, nullptr);
  EXPECT_EQ(size->file_offset, static_cast<int64_t>(DocOffset(d1_ - 1)));
  EXPECT_THAT(size->message, HasSubstr("the .idx is " + std::to_string(idx.size()) +
                                       " bytes but its header describes " +
                                       std::to_string(idx.size() - 8)));
  EXPECT_THAT(size->message, HasSubstr("8 trailing bytes"));
  EXPECT_THAT(size->message, HasSubstr(std::to_string(d1_) + " document indices (byte 26 says " +
                                       std::to_string(d1_ - 1) + ")"));
  const Violation* end = r.Find("doc_index_end");
  ASSERT_NE(end, nullptr);
  EXPECT_EQ(end->index, static_cast<int64_t>(d1_ - 2));
  EXPECT_THAT(end->message, HasSubstr("(document_indices[" + std::to_string(d1_ - 2) + "]) is " +
                                      std::to_string(Get<int64_t>(idx_, DocOffset(d1_ - 2))) +
                                      " but the index has " + std::to_string(s_) + " sequences"));
  EXPECT_EQ(r.documents, d1_ - 2);
}

// A count past what the file holds: the arrays are not read at all.
TEST_F(ValidateTest, DocumentCountPastTheEndOfTheFileIsCaught) {
  std::string idx = idx_;
  Put<uint64_t>(idx, kIdxDocumentCountOffset, d1_ + 1);
  const ValidationReport r = Check(idx, bin_);
  ASSERT_EQ(r.violations.size(), 1u) << FormatValidationReport(r);
  const Violation& v = r.violations[0];
  EXPECT_EQ(v.kind, "idx_size");
  EXPECT_EQ(v.file_offset, static_cast<int64_t>(kIdxSequenceCountOffset));
  EXPECT_THAT(v.message,
              HasSubstr(": byte 18: the header declares " + std::to_string(s_) + " sequences and " +
                        std::to_string(d1_ + 1) + " document indices, which need 34 + 12×" +
                        std::to_string(s_) + " + 8×" + std::to_string(d1_ + 1) +
                        " bytes, but the file has only " + std::to_string(idx.size()) + " bytes"));
}

TEST_F(ValidateTest, DocumentIndicesMustStartAtZeroAndNotDecrease) {
  std::string idx = idx_;
  Put<int64_t>(idx, DocOffset(0), 1);
  Put<int64_t>(idx, DocOffset(10), Get<int64_t>(idx, DocOffset(9)) - 1);
  ValidationReport r = Check(idx, bin_);
  ASSERT_NE(r.Find("doc_index_start"), nullptr);
  const Violation* v = r.Find("doc_index_order");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->index, 10);
}

TEST_F(ValidateTest, NegativeLengthIsCaught) {
  std::string idx = idx_;
  Put<int32_t>(idx, LengthOffset(3), -5);
  ValidationReport r = Check(idx, bin_);
  const Violation* v = r.Find("negative_length");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->index, 3);
  EXPECT_EQ(v->file_offset, static_cast<int64_t>(LengthOffset(3)));
  EXPECT_THAT(v->message, HasSubstr("negative length -5"));
  // The pointers agree with the other lengths and the .bin: none of them is blamed.
  EXPECT_EQ(r.Find("pointer"), nullptr) << FormatValidationReport(r);
  // The lengths' sum, with a negative one in it, is no size: no bin_size diagnosis from it ("N
  // tokens that no sequence covers" was said of a .bin every sequence covers).
  EXPECT_EQ(r.Find("bin_size"), nullptr);
}

// Lengths that sum to a negative size leave no .bin size to compare: no bin_size violation that
// says "the index describes -N bytes".
TEST_F(ValidateTest, NegativeLengthsSummingBelowZeroGiveNoNegativeBinSize) {
  std::string idx = idx_;
  Put<int32_t>(idx, LengthOffset(0), std::numeric_limits<int32_t>::min());
  ValidationReport r = Check(idx, bin_);
  EXPECT_NE(r.Find("negative_length"), nullptr);
  EXPECT_EQ(r.Find("bin_size"), nullptr);
  for (const Violation& v : r.violations) EXPECT_GE(v.file_offset, -1) << v.message;
}

TEST_F(ValidateTest, ZeroLengthSequenceIsCaught) {
  std::string idx = idx_;
  Put<int32_t>(idx, LengthOffset(7), 0);
  const ValidationReport report = Check(idx, bin_);
  const Violation* v = report.Find("zero_length");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->index, 7);
  EXPECT_THAT(v->message, HasSubstr("sequence 7 has length 0"));
}

// Whether files in `dir` show a region never written as a hole (lseek SEEK_HOLE): not on every
// file system (NFSv3, 9p, some FUSE mounts answer the file's end).
bool HolesShowIn(const fs::path& dir) {
  const std::string probe = (dir / "hole-probe").string();
  WriteFile(probe, "x");
  fs::resize_file(probe, 8 << 20);
  const int fd = ::open(probe.c_str(), O_RDONLY | O_CLOEXEC);
  const off_t hole = fd >= 0 ? ::lseek(fd, 0, SEEK_HOLE) : -1;
  if (fd >= 0) ::close(fd);
  fs::remove(probe);
  return hole >= 0 && hole < (8 << 20);
}

// A .bin cut short into a file of its full size (truncated, then extended: a hole, as a download
// into a preallocated file leaves) has the size the index describes; its zeros are the violation,
// unless holes are accepted (check_holes = false: a sparse copy).
TEST_F(ValidateTest, BinWithAHoleIsCaughtWithoutReadingIt) {
  if (!HolesShowIn(*dir_)) GTEST_SKIP() << *dir_ << ": this file system shows no holes";
  const std::string prefix = (*dir_ / "holed").string();
  constexpr size_t kKept = size_t{1} << 20;  // a whole record of any file system's (ZFS: 128 KiB)
  ASSERT_GT(bin_.size(), 2 * kKept);
  WriteFile(prefix + ".idx", idx_);
  WriteFile(prefix + ".bin", bin_.substr(0, kKept));
  fs::resize_file(prefix + ".bin", bin_.size());
  for (bool tokens : {true, false}) {
    ValidateOptions options;
    options.check_tokens = tokens;
    auto report = ValidateDataset(prefix, options);
    ASSERT_TRUE(report.ok()) << report.status();
    const Violation* v = report->Find("hole");
    ASSERT_NE(v, nullptr) << FormatValidationReport(*report);
    EXPECT_GE(v->file_offset, static_cast<int64_t>(kKept));
    EXPECT_THAT(v->message, HasSubstr(prefix + ".bin: byte "));
    EXPECT_THAT(v->message, HasSubstr(std::to_string(bin_.size() - 1) + " hold no data (a hole"));
    EXPECT_EQ(report->violations.size(), 1u) << FormatValidationReport(*report);
    // The verdict needs no page of the .bin: its tokens are not read, and the message says so.
    EXPECT_FALSE(report->tokens_checked);
    EXPECT_THAT(v->message, HasSubstr("the tokens were not read"));
    options.check_holes = false;
    report = ValidateDataset(prefix, options);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(report->Find("hole"), nullptr) << FormatValidationReport(*report);
  }
}

// A .bin whose back part is zeros written out (a hole copied dense, or a preallocated file that a
// copy cut short left zero-filled) has the right size and no hole: each block of 4096 tokens (at a
// multiple of 4096) that are all 0 counts as zero_fill, placed at the first, whatever the thread
// count. Fewer zeros than a block pass; check_zero_fill = false accepts the blocks.
TEST_F(ValidateTest, ZeroFilledBinIsCaughtWhereItHasNoHole) {
  constexpr uint64_t kBlock = 4096;
  const uint64_t num_tokens = bin_.size() / 2;
  const uint64_t zeros_from = (uint64_t{1} << 19) + 1000;  // a token index, not at a block start
  ASSERT_GT(num_tokens, zeros_from + 3 * kBlock);
  std::string bin = bin_;
  std::fill(bin.begin() + static_cast<std::ptrdiff_t>(2 * zeros_from), bin.end(), '\0');
  const uint64_t first = (zeros_from + kBlock - 1) / kBlock * kBlock;
  const uint64_t blocks = (num_tokens / kBlock * kBlock - first) / kBlock;  // whole blocks only
  for (int threads : {1, 2, 7}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    ValidateOptions options;
    options.threads = threads;
    ValidationReport r = Check(idx_, bin, options);
    const Violation* v = r.Find("zero_fill");
    ASSERT_NE(v, nullptr) << FormatValidationReport(r);
    EXPECT_EQ(r.violations.size(), 1u) << FormatValidationReport(r);
    EXPECT_EQ(v->file_offset, static_cast<int64_t>(2 * first));
    EXPECT_EQ(v->count, blocks);
    EXPECT_GE(v->index, 0);
    EXPECT_THAT(v->message, HasSubstr(".bin: byte " + std::to_string(2 * first) + ": bytes " +
                                      std::to_string(2 * first) + ".." +
                                      std::to_string(2 * first + 2 * kBlock - 1)));
    EXPECT_THAT(v->message, HasSubstr("the first of " + std::to_string(blocks) + " such blocks"));
    options.check_zero_fill = false;
    EXPECT_TRUE(Check(idx_, bin, options).ok());
  }
  // One token short of a block of zeros, at a block's start: not a zero fill.
  bin = bin_;
  std::fill(bin.begin() + static_cast<std::ptrdiff_t>(2 * first),
            bin.begin() + static_cast<std::ptrdiff_t>(2 * (first + kBlock - 1)), '\0');
  ValidationReport r = Check(idx_, bin);
  EXPECT_TRUE(r.ok()) << FormatValidationReport(r);
}

// Without --append-eod, documents of the single token 0 ("!") follow one another as often as the
// input has them, and GPT-2 writes nothing else twice in a row: a block of 4096 such sequences is
// sound. One sequence among them holding two of the block's zeros makes the block a zero fill
// again (no tokenizer call wrote it), named with the sequences it spans.
TEST_F(ValidateTest, BlockOfOneTokenZeroSequencesIsNoZeroFill) {
  const std::string prefix = (*dir_ / "bangs").string();
  for (bool one_longer : {false, true}) {
    SCOPED_TRACE(one_longer ? "one sequence of two zeros" : "sequences of one zero");
    auto writer = IndexedDatasetWriter::Create(prefix);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)->AddDocument16(std::vector<uint16_t>{464, 318}).ok());  // "The is"
    for (int i = 0; i < 2 * 4096; ++i) {
      const size_t n = one_longer && i == 5000 ? 2 : 1;
      ASSERT_TRUE((*writer)->AddDocument16(std::vector<uint16_t>(n, 0)).ok());
    }
    ASSERT_TRUE((*writer)->Finish().ok());
    auto report = ValidateDataset(prefix, ValidateOptions{});
    ASSERT_TRUE(report.ok()) << report.status();
    if (!one_longer) {
      EXPECT_TRUE(report->ok()) << FormatValidationReport(*report);
      continue;
    }
    const Violation* v = report->Find("zero_fill");
    ASSERT_NE(v, nullptr) << FormatValidationReport(*report);
    EXPECT_EQ(v->count, 1u);
    EXPECT_EQ(v->file_offset, 2 * 4096);  // the block of tokens 4096..8191, which holds the pair
    EXPECT_THAT(v->message, HasSubstr("(in sequences 4095 to 8189)"));
  }
}

// Holes in both files are one violation of kind "hole" (a report keeps one per kind, counting all):
// placed at the .idx's first, the .bin's named after it, the count the sum of both files'.
TEST_F(ValidateTest, HolesInBothFilesAreOneViolationNamingBoth) {
  if (!HolesShowIn(*dir_)) GTEST_SKIP() << *dir_ << ": this file system shows no holes";
  const std::string prefix = (*dir_ / "holed2").string();
  constexpr size_t kKept = size_t{1} << 20;
  WriteFile(prefix + ".idx", idx_);
  fs::resize_file(prefix + ".idx", idx_.size() + 4 * kKept);  // an index extended, never written
  WriteFile(prefix + ".bin", bin_.substr(0, kKept));
  fs::resize_file(prefix + ".bin", bin_.size());
  auto report = ValidateDataset(prefix, ValidateOptions{});
  ASSERT_TRUE(report.ok()) << report.status();
  int holes = 0;
  for (const Violation& v : report->violations) holes += v.kind == "hole";
  EXPECT_EQ(holes, 1) << FormatValidationReport(*report);
  const Violation* v = report->Find("hole");
  ASSERT_NE(v, nullptr) << FormatValidationReport(*report);
  EXPECT_EQ(v->count, 2u) << v->message;
  EXPECT_GE(v->file_offset, static_cast<int64_t>(idx_.size()) & ~int64_t{4095});
  EXPECT_THAT(v->message, HasSubstr(prefix + ".idx: byte "));
  EXPECT_THAT(v->message, HasSubstr("; " + prefix + ".bin has holes too (the first at bytes "));
  EXPECT_THAT(v->message, HasSubstr("validate --allow-holes accepts them"));
}

// An .idx whose arrays are a hole (its header written, the file extended to the size the header
// claims: 1M sequences, 12 MB of zeros) fails as a hole without its arrays being read: the hole is
// the only violation, not also a zero_length for each length read as 0 (a sparse .idx claiming
// gigabytes was read whole, its time and page cache growing with the size it claims).
TEST_F(ValidateTest, IdxWhoseArraysAreAHoleIsNotReadForThem) {
  if (!HolesShowIn(*dir_)) GTEST_SKIP() << *dir_ << ": this file system shows no holes";
  const std::string prefix = (*dir_ / "holed_idx").string();
  constexpr uint64_t kSequences = uint64_t{1} << 20;
  std::string header = idx_.substr(0, kIdxHeaderBytes);
  Put<uint64_t>(header, kIdxSequenceCountOffset, kSequences);
  Put<uint64_t>(header, kIdxDocumentCountOffset, kSequences + 1);
  WriteFile(prefix + ".idx", header);
  fs::resize_file(prefix + ".idx", kIdxHeaderBytes + 12 * kSequences + 8 * (kSequences + 1));
  WriteFile(prefix + ".bin", bin_);
  auto report = ValidateDataset(prefix, ValidateOptions{});
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->violations.size(), 1u) << FormatValidationReport(*report);
  EXPECT_EQ(report->violations[0].kind, "hole");
  EXPECT_THAT(report->violations[0].message,
              HasSubstr("the index's arrays and the tokens were not read"));
  EXPECT_EQ(report->sequences, kSequences);
  // --allow-holes reads them: zeros, lengths 0.
  ValidateOptions allow;
  allow.check_holes = false;
  report = ValidateDataset(prefix, allow);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_NE(report->Find("zero_length"), nullptr) << FormatValidationReport(*report);
}

// A .idx that says int32 over a .bin of uint16 tokens: the .bin is half the size the index
// describes, which the message names as a dtype mismatch.
TEST_F(ValidateTest, Int32IndexOverUint16TokensIsNamed) {
  std::string idx = idx_;
  idx[kIdxDTypeOffset] = 4;
  for (uint64_t i = 0; i < s_; ++i) {
    Put<int64_t>(idx, PointerOffset(i), 2 * Get<int64_t>(idx_, PointerOffset(i)));
  }
  const ValidationReport report = Check(idx, bin_);
  const Violation* v = report.Find("bin_size");
  ASSERT_NE(v, nullptr) << FormatValidationReport(report);
  EXPECT_THAT(v->message,
              HasSubstr("exactly half the size: the .bin holds 2-byte (uint16) tokens"));
}

TEST_F(ValidateTest, TokenOutsideVocabularyIsCaught) {
  std::string bin = bin_;
  const int64_t seq = 9;
  const size_t at = static_cast<size_t>(Get<int64_t>(idx_, PointerOffset(seq))) + 2 * 4;
  Put<uint16_t>(bin, at, 50257);
  ValidationReport r = Check(idx_, bin);
  const Violation* v = r.Find("token_range");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->file_offset, static_cast<int64_t>(at));
  EXPECT_EQ(v->index, seq);
  EXPECT_THAT(v->message, HasSubstr("token 50257"));
  EXPECT_THAT(v->message, HasSubstr("position 4"));
  // A larger vocabulary accepts it.
  ValidateOptions big;
  big.vocab_size = 50304;
  EXPECT_TRUE(Check(idx_, bin, big).ok());
}

// uint16 cannot hold the ids of a vocabulary past 65536: ids above 65535 were wrapped when written,
// which the token range check cannot see.
TEST_F(ValidateTest, Uint16DatasetOfAVocabularyPast65536IsCaught) {
  ValidateOptions large;
  large.vocab_size = 100000;
  ValidationReport r = Check(idx_, bin_, large);
  const Violation* v = r.Find("dtype");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->file_offset, static_cast<int64_t>(kIdxDTypeOffset));
  EXPECT_THAT(v->message, HasSubstr("uint16 cannot hold the ids of a vocabulary of 100000"));
  large.vocab_size = 65536;  // every id fits
  EXPECT_TRUE(Check(idx_, bin_, large).ok());
}

TEST_F(ValidateTest, MissingEodIsCaughtOnlyWhenExpected) {
  std::string bin = bin_;
  const int64_t end = Get<int64_t>(idx_, PointerOffset(5)) + 2 * Get<int32_t>(idx_, LengthOffset(5));
  Put<uint16_t>(bin, static_cast<size_t>(end - 2), 13);
  EXPECT_TRUE(Check(idx_, bin).ok());
  ValidateOptions options;
  options.expect_eod = true;
  const ValidationReport report = Check(idx_, bin, options);
  const Violation* v = report.Find("eod");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->index, 5);
  EXPECT_THAT(v->message, HasSubstr("sequence 5 (the last of document 5) ends with token 13"));
  EXPECT_THAT(v->message, HasSubstr("not EOD 50256"));
}

// The EOD check runs inside the token scan's tasks (each reads its span of the .bin once, then
// releases its pages): every document is checked once, whichever task its last token falls in,
// also where documents end exactly on the blocks at which tasks split, and the last one, the same
// with any thread count, with document indices and without (every sequence then).
TEST_F(ValidateTest, EodIsCheckedOnceForEveryDocumentWhateverTheTaskBoundaries) {
  constexpr int kDocs = 600;
  constexpr size_t kTokens = 4096;  // a block: every document ends where a task may end
  // Nearly every document without EOD: one checked twice (by the tasks on both sides of where it
  // ends) or missed shows in the count, wherever the tasks split.
  std::set<int> without;
  for (int d = 0; d < kDocs; ++d) {
    if (d < 1 || d > 3) without.insert(d);
  }
  std::string idx, bin;
  for (bool broken_documents : {false, true}) {
    SCOPED_TRACE(broken_documents ? "document indices broken" : "document indices sound");
    const std::string prefix = (*dir_ / "eods").string();
    auto writer = IndexedDatasetWriter::Create(prefix);
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (int d = 0; d < kDocs; ++d) {
      std::vector<uint16_t> tokens(kTokens, 464);
      tokens.back() = without.count(d) ? 13 : 50256;
      ASSERT_TRUE((*writer)->AddDocument16(tokens).ok());
    }
    ASSERT_TRUE((*writer)->Finish().ok());
    idx = ReadFile(prefix + ".idx");
    bin = ReadFile(prefix + ".bin");
    if (broken_documents) {  // the last document index short of the sequence count
      Put<int64_t>(idx, idx.size() - 8, kDocs - 1);
    }
    for (int threads : {1, 2, 7}) {
      SCOPED_TRACE(::testing::Message() << threads << " threads");
      ValidateOptions options;
      options.expect_eod = true;
      options.threads = threads;
      const ValidationReport report = Check(idx, bin, options);
      const Violation* v = report.Find("eod");
      ASSERT_NE(v, nullptr) << FormatValidationReport(report);
      EXPECT_EQ(v->count, without.size());
      EXPECT_EQ(v->index, 0);
      EXPECT_EQ(v->file_offset, static_cast<int64_t>(2 * (kTokens - 1)));
    }
  }
}

// An int32 dataset's corrupt -1 is -1 in every message that names it (the eod line printed it as
// 4294967295 while token_range said -1), as inspect shows it.
TEST_F(ValidateTest, NegativeInt32TokenIsShownSignedInEveryMessage) {
  std::string idx = idx_;
  idx[kIdxDTypeOffset] = 4;
  for (uint64_t i = 0; i < s_; ++i) {
    Put<int64_t>(idx, PointerOffset(i), 2 * Get<int64_t>(idx_, PointerOffset(i)));
  }
  std::string bin(bin_.size() * 2, '\0');
  for (size_t t = 0; t < bin_.size() / 2; ++t) {
    Put<int32_t>(bin, 4 * t, Get<uint16_t>(bin_, 2 * t));
  }
  ValidateOptions options;
  options.expect_eod = true;
  ASSERT_TRUE(Check(idx, bin, options).ok());
  const int64_t end = Get<int64_t>(idx, PointerOffset(5)) + 4 * Get<int32_t>(idx, LengthOffset(5));
  Put<int32_t>(bin, static_cast<size_t>(end - 4), -1);
  const ValidationReport report = Check(idx, bin, options);
  const Violation* eod = report.Find("eod");
  ASSERT_NE(eod, nullptr) << FormatValidationReport(report);
  EXPECT_THAT(eod->message, HasSubstr("sequence 5 (the last of document 5) ends with token -1,"));
  const Violation* range = report.Find("token_range");
  ASSERT_NE(range, nullptr) << FormatValidationReport(report);
  EXPECT_THAT(range->message, HasSubstr("token -1 at token"));
}

// --append-eod ends each document with EOD, not each sequence: a document of several sequences
// (Megatron's --split-sentences) has it on its last only. Documents 0 and 1 made one (two
// sequences): sequence 0 without EOD is sound, sequence 1 without it is not.
TEST_F(ValidateTest, ExpectEodLooksAtTheLastSequenceOfEachDocument) {
  ASSERT_GT(d1_, 3u);
  ASSERT_EQ(Get<int64_t>(idx_, DocOffset(1)), 1);  // one sequence per document as written
  std::string idx = idx_.substr(0, DocOffset(1)) + idx_.substr(DocOffset(2));
  Put<uint64_t>(idx, kIdxDocumentCountOffset, d1_ - 1);
  ValidateOptions options;
  options.expect_eod = true;
  ASSERT_TRUE(Check(idx, bin_, options).ok());
  auto last_token_at = [&](uint64_t i) {
    return static_cast<size_t>(Get<int64_t>(idx_, PointerOffset(i)) +
                               2 * Get<int32_t>(idx_, LengthOffset(i)) - 2);
  };
  std::string bin = bin_;
  Put<uint16_t>(bin, last_token_at(0), 13);
  EXPECT_TRUE(Check(idx, bin, options).ok());
  Put<uint16_t>(bin, last_token_at(1), 13);
  const ValidationReport report = Check(idx, bin, options);
  const Violation* v = report.Find("eod");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->index, 1);
  EXPECT_EQ(v->count, 1u);
  EXPECT_THAT(v->message, HasSubstr("sequence 1 (the last of document 0) ends with token 13"));
}

// With the document indices broken, every sequence is looked at, and the message says so rather
// than calling each sequence the last of its document.
TEST_F(ValidateTest, ExpectEodWithBrokenDocumentIndicesNamesSequences) {
  std::string idx = idx_;
  Put<int64_t>(idx, DocOffset(d1_ - 1), static_cast<int64_t>(s_ - 1));
  std::string bin = bin_;
  const size_t last_of_3 = static_cast<size_t>(Get<int64_t>(idx_, PointerOffset(3)) +
                                               2 * Get<int32_t>(idx_, LengthOffset(3)) - 2);
  Put<uint16_t>(bin, last_of_3, 13);
  ValidateOptions options;
  options.expect_eod = true;
  const ValidationReport report = Check(idx, bin, options);
  ASSERT_NE(report.Find("doc_index_end"), nullptr);
  const Violation* v = report.Find("eod");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->index, 3);
  EXPECT_THAT(v->message, HasSubstr("sequence 3 ends with token 13"));
  EXPECT_THAT(v->message,
              HasSubstr("1 sequence lacks a final EOD (the document indices are broken"));
}

// A set cancel flag stops the token checks: ValidateDataset says Cancelled rather than a verdict
// on tokens it did not read (a damaged token is there and would otherwise be found).
TEST_F(ValidateTest, CancelFlagStopsTheTokenChecks) {
  std::string bin = bin_;
  Put<uint16_t>(bin, 2 * 777, 65535);
  std::atomic<bool> cancel{true};
  ValidateOptions options;
  options.cancel = &cancel;
  const std::string prefix = (*dir_ / "cancelled").string();
  WriteFile(prefix + ".idx", idx_);
  WriteFile(prefix + ".bin", bin);
  auto report = ValidateDataset(prefix, options);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kCancelled);
  cancel = false;
  report = ValidateDataset(prefix, options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_NE(report->Find("token_range"), nullptr);
}

TEST_F(ValidateTest, IndexOnlySkipsTokensButStillChecksBinSize) {
  std::string bin = bin_;
  Put<uint16_t>(bin, 0, 65535);
  ValidateOptions options;
  options.check_tokens = false;
  ValidationReport r = Check(idx_, bin, options);
  EXPECT_TRUE(r.ok());
  EXPECT_FALSE(r.tokens_checked);
  EXPECT_NE(Check(idx_, bin + "xx", options).Find("bin_size"), nullptr);
}

TEST_F(ValidateTest, EmptyDatasetIsReported) {
  std::string idx(kIdxMagic, sizeof(kIdxMagic));
  idx.append(reinterpret_cast<const char*>(&kIdxVersion), 8);
  idx.push_back(8);
  const uint64_t zero = 0, one = 1;
  idx.append(reinterpret_cast<const char*>(&zero), 8);
  idx.append(reinterpret_cast<const char*>(&one), 8);
  idx.append(reinterpret_cast<const char*>(&zero), 8);
  ValidationReport r = Check(idx, "");
  ASSERT_NE(r.Find("empty_dataset"), nullptr) << FormatValidationReport(r);
}

TEST_F(ValidateTest, MissingFileIsAnError) {
  auto r = ValidateDataset((*dir_ / "nope").string());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("nope.idx"));
}

TEST_F(ValidateTest, JsonReportHasKindsAndOffsets) {
  std::string idx = idx_;
  Put<uint64_t>(idx, kIdxVersionOffset, 3);
  const std::string json = ValidationReportToJson(Check(idx, bin_));
  EXPECT_THAT(json, HasSubstr("\"ok\":false"));
  EXPECT_THAT(json, HasSubstr("\"kind\":\"idx_version\""));
  EXPECT_THAT(json, HasSubstr("\"file_offset\":9"));
  // A path's bytes that are not UTF-8 (and control characters) still give JSON that parses.
  ValidationReport odd;
  odd.prefix = "data/caf\xe9\t\x01/x";
  EXPECT_THAT(ValidationReportToJson(odd),
              HasSubstr("\"prefix\":\"data/caf\xef\xbf\xbd\\t\\u0001/x\""));
}

TEST(IndexedDatasetReader, ReadsDocumentsOfASoundPairAndRefusesBadPointers) {
  // One document [1 2 3], an empty one, then [4 5].
  std::string idx(kIdxMagic, sizeof(kIdxMagic));
  auto put = [&](auto v) { idx.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(kIdxVersion);
  put(uint8_t{8});
  put(uint64_t{2});
  put(uint64_t{4});
  put(int32_t{3});
  put(int32_t{2});
  put(int64_t{0});
  put(int64_t{6});
  for (int64_t d : {0, 1, 1, 2}) put(d);
  std::string bin;
  for (uint16_t t : {1, 2, 3, 4, 5}) bin.append(reinterpret_cast<const char*>(&t), 2);
  EXPECT_TRUE(ValidateBuffers(idx, bin, "mem").ok());
  auto reader = IndexedDatasetReader::FromBuffers(idx, bin, "mem");
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->num_documents(), 3u);
  std::vector<uint32_t> ids;
  ASSERT_TRUE((*reader)->ReadDocument(0, &ids).ok());
  EXPECT_EQ(ids, (std::vector<uint32_t>{1, 2, 3}));
  ASSERT_TRUE((*reader)->ReadDocument(1, &ids).ok());
  EXPECT_TRUE(ids.empty());
  ASSERT_TRUE((*reader)->ReadDocument(2, &ids).ok());
  EXPECT_EQ(ids, (std::vector<uint32_t>{4, 5}));
  EXPECT_FALSE((*reader)->ReadDocument(3, &ids).ok());
  // A pointer past the .bin is refused, not read.
  std::string bad = idx;
  const int64_t far = 1 << 20;
  std::memcpy(bad.data() + kIdxHeaderBytes + 8 + 8, &far, 8);
  auto bad_reader = IndexedDatasetReader::FromBuffers(bad, bin, "mem");
  ASSERT_TRUE(bad_reader.ok());
  EXPECT_FALSE((*bad_reader)->ReadSequence(1, &ids).ok());
}

TEST(IndexedDatasetReader, ReadsADocumentInBoundedChunksWhateverItsIndexClaims) {
  // A corrupt index: one document of 100,000 sequences, each the whole 1,000-token .bin. Read in
  // one piece it would take 400 MB; in chunks no call sees more than the limit.
  constexpr uint64_t kSequences = 100000;
  std::string idx(kIdxMagic, sizeof(kIdxMagic));
  auto put = [&](auto v) { idx.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(kIdxVersion);
  put(uint8_t{8});
  put(kSequences);
  put(uint64_t{2});
  for (uint64_t i = 0; i < kSequences; ++i) put(int32_t{1000});
  for (uint64_t i = 0; i < kSequences; ++i) put(int64_t{0});
  put(int64_t{0});
  put(static_cast<int64_t>(kSequences));
  std::string bin;
  for (uint16_t t = 0; t < 1000; ++t) bin.append(reinterpret_cast<const char*>(&t), 2);
  auto reader = IndexedDatasetReader::FromBuffers(idx, bin, "mem");
  ASSERT_TRUE(reader.ok()) << reader.status();
  size_t largest = 0, calls = 0;
  uint64_t tokens = 0;
  uint32_t expect = 0;
  bool in_order = true;
  absl::Status s = (*reader)->ReadDocumentInChunks(0, 300, [&](const std::vector<uint32_t>& ids) {
    largest = std::max(largest, ids.size());
    ++calls;
    tokens += ids.size();
    for (uint32_t id : ids) {
      in_order = in_order && id == expect;
      expect = (expect + 1) % 1000;
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(largest, 300u);
  EXPECT_EQ(tokens, kSequences * 1000);
  EXPECT_EQ(calls, kSequences * 4);  // 300 + 300 + 300 + 100 per sequence
  EXPECT_TRUE(in_order);
  // The callback's error ends the reading and is returned.
  calls = 0;
  s = (*reader)->ReadDocumentInChunks(0, 300, [&](const std::vector<uint32_t>&) {
    return ++calls == 3 ? absl::CancelledError("enough") : absl::OkStatus();
  });
  EXPECT_EQ(s, absl::CancelledError("enough"));
  EXPECT_EQ(calls, 3u);
}

TEST(FindDatasetPrefixes, SortsLikePythonAndRefusesOrListsLoneFiles) {
  const fs::path dir = fs::temp_directory_path() /
                       ("pileprep_find_prefixes_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* name : {"b.bin", "b.idx", "a_10.bin", "a_10.idx", "a_9.bin", "a_9.idx",
                           "B.bin", "B.idx", "README.md", "x.bin.pileprep-tmp"}) {
    WriteFile(dir / name, "x");
  }
  auto found = FindDatasetPrefixes(dir.string());
  ASSERT_TRUE(found.ok()) << found.status();
  const std::string d = dir.string() + "/";
  EXPECT_EQ(*found, (std::vector<std::string>{d + "B", d + "a_10", d + "a_9", d + "b"}));
  WriteFile(dir / "c.idx", "x");
  auto lone = FindDatasetPrefixes(dir.string());
  EXPECT_EQ(lone.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(lone.status().message()), HasSubstr("c.idx has no c.bin"));
  // A directory named like the missing half is skipped, as Megatron's isfile() skips it, and said.
  fs::create_directory(dir / "c.bin");
  lone = FindDatasetPrefixes(dir.string());
  EXPECT_THAT(
      std::string(lone.status().message()),
      HasSubstr("c.idx has no c.bin beside it (" + dir.string() + "/c.bin is a directory)"));
  fs::remove(dir / "c.bin");
  // Asked for, the lone files are listed and the pairs returned.
  WriteFile(dir / "d.bin", "x");
  std::vector<std::string> unpaired;
  auto pairs = FindDatasetPrefixes(dir.string(), &unpaired);
  ASSERT_TRUE(pairs.ok()) << pairs.status();
  EXPECT_EQ(*pairs, (std::vector<std::string>{d + "B", d + "a_10", d + "a_9", d + "b"}));
  EXPECT_EQ(unpaired, (std::vector<std::string>{d + "c.idx", d + "d.bin"}));
  fs::remove_all(dir);
}

// Names that are not valid UTF-8 sort as Python's sorted(os.listdir()) sorts them: each byte that
// does not decode as U+DC00 + byte (surrogateescape), so "\xff" (U+DCFF) comes before "\ue000"
// (EE 80 80) and after "\ud7ff" (ED 9F BF), where a byte order put it last; "\xed\xa0\x80" (an
// encoded surrogate, which Python does not decode) is three escapes, U+DCED first.
TEST(FindDatasetPrefixes, NamesThatAreNotUtf8SortAsPythonDecodesThem) {
  const fs::path dir =
      fs::temp_directory_path() / ("pileprep_find_prefixes_bytes_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::vector<std::string> python_order = {"a",    "\xed\x9f\xbf", "\xed\xa0\x80",
                                                 "\xff", "\xee\x80\x80", "\xf0\x9f\x98\x80"};
  for (const std::string& name : python_order) {
    WriteFile(dir / (name + ".bin"), "x");
    WriteFile(dir / (name + ".idx"), "x");
  }
  auto found = FindDatasetPrefixes(dir.string());
  ASSERT_TRUE(found.ok()) << found.status();
  std::vector<std::string> want;
  for (const std::string& name : python_order) want.push_back(dir.string() + "/" + name);
  EXPECT_EQ(*found, want);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pileprep
