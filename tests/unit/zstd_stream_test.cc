#include "pileprep/zstd_stream.h"

#define ZDICT_STATIC_LINKING_ONLY  // ZDICT_finalizeDictionary, to make a frame with a dictionary ID
#include <zdict.h>
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_frameHeaderSize, to find a block to damage
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pileprep {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Debian's Abseil has its own absl::string_view, which gmock's string matchers do not take.
std::string Msg(const absl::Status& s) { return std::string(s.message()); }

std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string BadFile(const std::string& name) {
  return ReadFileOrDie(std::string(PILEPREP_TEST_DATA_DIR) + "/bad/" + name);
}
std::string SampleFile(const std::string& name) {
  return ReadFileOrDie(std::string(PILEPREP_SOURCE_DIR) + "/data/samples/" + name);
}

struct Decoded {
  absl::Status status;  // first error of Feed or Finish
  std::string out;
  uint64_t bytes_in = 0;
  uint64_t num_frames = 0;
  size_t largest_sink_chunk = 0;
};

// Decodes `data` fed in pieces whose sizes come from `next_size` (called until the data is used
// up).
template <typename NextSize>
Decoded DecodeChunked(std::string_view data, NextSize next_size, ZstdDecoderOptions options = {}) {
  Decoded d;
  ZstdDecoder decoder(std::move(options));
  auto sink = [&](std::string_view bytes) {
    d.out.append(bytes);
    d.largest_sink_chunk = std::max(d.largest_sink_chunk, bytes.size());
    return absl::OkStatus();
  };
  size_t pos = 0;
  while (pos < data.size() && d.status.ok()) {
    const size_t n = std::min(data.size() - pos, std::max<size_t>(1, next_size()));
    d.status = decoder.Feed(data.substr(pos, n), sink);
    pos += n;
  }
  if (d.status.ok()) d.status = decoder.Finish();
  EXPECT_EQ(decoder.bytes_out(), d.out.size());
  d.bytes_in = decoder.bytes_in();
  d.num_frames = decoder.num_frames();
  return d;
}

Decoded DecodeAll(std::string_view data, ZstdDecoderOptions options = {}) {
  return DecodeChunked(
      data, [&] { return data.size(); }, std::move(options));
}

Decoded DecodeByteByByte(std::string_view data, ZstdDecoderOptions options = {}) {
  return DecodeChunked(
      data, [] { return size_t{1}; }, std::move(options));
}

// zstd's one-shot API (multi-frame and skippable aware), as an independent reference.
std::string ReferenceDecompress(std::string_view data, size_t expected_size) {
  std::string out(expected_size + 1, '\0');  // +1: a longer output would show as a size mismatch
  const size_t n = ZSTD_decompress(out.data(), out.size(), data.data(), data.size());
  EXPECT_FALSE(ZSTD_isError(n)) << ZSTD_getErrorName(n);
  out.resize(ZSTD_isError(n) ? 0 : n);
  return out;
}

std::string Compress(std::string_view text, int level = 3, bool checksum = true) {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, checksum ? 1 : 0);
  std::string out(ZSTD_compressBound(text.size()), '\0');
  const size_t n = ZSTD_compress2(cctx, out.data(), out.size(), text.data(), text.size());
  ZSTD_freeCCtx(cctx);
  EXPECT_FALSE(ZSTD_isError(n)) << ZSTD_getErrorName(n);
  out.resize(ZSTD_isError(n) ? 0 : n);
  return out;
}

std::string SkippableFrame(uint32_t magic_variant, std::string_view payload) {
  std::string f;
  const uint32_t magic = 0x184D2A50u + magic_variant;
  const uint32_t size = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) f.push_back(static_cast<char>((magic >> (8 * i)) & 0xff));
  for (int i = 0; i < 4; ++i) f.push_back(static_cast<char>((size >> (8 * i)) & 0xff));
  f.append(payload);
  return f;
}

std::string SomeText(size_t n) {
  std::string s;
  std::mt19937 rng(7);
  static constexpr std::string_view kWords[] = {
      "the ",           "pile ",       "zstd ", "frame ",  "window ",
      "\u00e9t\u00e9 ", "{\"text\": ", "\n",    "tokens ", "megatron "};
  while (s.size() < n) s.append(kWords[rng() % std::size(kWords)]);
  s.resize(n);
  return s;
}

// Sizes of `zstd -dc FILE | wc -c` for the files that decode (zstd 1.5.4 CLI).
struct Expected {
  const char* name;
  bool sample;  // data/samples/ rather than tests/data/bad/
  size_t zstd_dc_bytes;
  uint64_t frames;  // skippable frames included
};
constexpr Expected kDecodable[] = {
    {"00.jsonl.zst", true, 10331376, 1},
    {"01.jsonl.zst", true, 3580381, 4},
    {"blank-lines.jsonl.zst", false, 2692, 1},
    {"crlf-lf-twin.jsonl.zst", false, 5612, 1},
    {"crlf.jsonl.zst", false, 5632, 1},
    {"empty-and-tiny-texts.jsonl.zst", false, 876, 1},
    {"invalid-json.jsonl.zst", false, 1921, 1},
    {"invalid-utf8.jsonl.zst", false, 1469, 1},
    {"json-escapes.jsonl.zst", false, 926, 1},
    {"lone-surrogates.jsonl.zst", false, 1019, 1},
    {"long-lines.jsonl.zst", false, 23216638, 1},
    {"missing-text.jsonl.zst", false, 1129, 1},
    {"multi-frame.jsonl.zst", false, 35977, 37},
    {"no-final-newline.jsonl.zst", false, 2675, 1},
    {"skippable-frames.jsonl.zst", false, 45894, 5},
    {"text-not-string.jsonl.zst", false, 1289, 1},
};

std::string LoadExpected(const Expected& e) {
  return e.sample ? SampleFile(e.name) : BadFile(e.name);
}

TEST(ZstdDecoder, DecodesEveryValidFileLikeZstdCli) {
  for (const Expected& e : kDecodable) {
    SCOPED_TRACE(e.name);
    const std::string data = LoadExpected(e);
    const Decoded d = DecodeAll(data, {.source_name = e.name});
    ASSERT_TRUE(d.status.ok()) << d.status;
    EXPECT_EQ(d.out.size(), e.zstd_dc_bytes);
    EXPECT_TRUE(d.out == ReferenceDecompress(data, e.zstd_dc_bytes));
    EXPECT_EQ(d.bytes_in, data.size());
    EXPECT_EQ(d.num_frames, e.frames);
  }
}

TEST(ZstdDecoder, OneByteFeedsEqualOneBigFeed) {
  // 01.jsonl.zst is several frames cut in the middle of lines; multi-frame cuts inside characters.
  for (const char* name : {"01.jsonl.zst", "multi-frame.jsonl.zst", "skippable-frames.jsonl.zst"}) {
    SCOPED_TRACE(name);
    const std::string data =
        std::string_view(name).starts_with("01") ? SampleFile(name) : BadFile(name);
    const Decoded big = DecodeAll(data);
    const Decoded small = DecodeByteByByte(data);
    ASSERT_TRUE(big.status.ok()) << big.status;
    ASSERT_TRUE(small.status.ok()) << small.status;
    EXPECT_TRUE(small.out == big.out);
    EXPECT_EQ(small.bytes_in, data.size());
    EXPECT_EQ(small.num_frames, big.num_frames);
  }
}

TEST(ZstdDecoder, RandomChunkingsEqualOneBigFeed) {
  for (const Expected& e : kDecodable) {
    if (e.zstd_dc_bytes > 5'000'000) continue;  // the two largest add time, not coverage
    SCOPED_TRACE(e.name);
    const std::string data = LoadExpected(e);
    const Decoded big = DecodeAll(data);
    ASSERT_TRUE(big.status.ok()) << big.status;
    for (uint32_t seed = 1; seed <= 6; ++seed) {
      SCOPED_TRACE(seed);
      std::mt19937 rng(seed);
      const size_t max_chunk = size_t{1} << (seed * 3);  // 8 B .. 256 KiB
      const Decoded d = DecodeChunked(data, [&] { return 1 + rng() % max_chunk; });
      ASSERT_TRUE(d.status.ok()) << d.status;
      EXPECT_TRUE(d.out == big.out);
    }
  }
}

// FeedSome hands out what it is asked for (at most a block more), whatever the ratio: 16 MiB of one
// repeated line compress to a few KiB, which Feed would decode in one call. Given again what it did
// not take, it ends with the same bytes as Feed, over every frame of a multi-frame file too.
TEST(ZstdDecoder, FeedSomeBoundsWhatOneCallDecodes) {
  std::string lines;
  while (lines.size() < (size_t{16} << 20)) lines += "{\"text\": \"a\"}\n";
  const std::string repeated = Compress(lines, 19);
  ASSERT_LT(repeated.size(), size_t{64} << 10);
  for (const std::string& data :
       {repeated, SampleFile("01.jsonl.zst"), BadFile("skippable-frames.jsonl.zst")}) {
    const Decoded whole = DecodeAll(data);
    ASSERT_TRUE(whole.status.ok()) << whole.status;
    for (uint64_t max_out : {uint64_t{0}, uint64_t{1000}, uint64_t{1} << 20}) {
      SCOPED_TRACE(max_out);
      ZstdDecoder decoder;
      std::string out;
      std::string_view rest = data;
      size_t calls = 0;
      while (!rest.empty()) {
        size_t this_call = 0;
        absl::StatusOr<size_t> took = decoder.FeedSome(
            rest,
            [&](std::string_view bytes) {
              this_call += bytes.size();
              out.append(bytes);
              return absl::OkStatus();
            },
            max_out);
        ASSERT_TRUE(took.ok()) << took.status();
        ASSERT_LE(*took, rest.size());
        EXPECT_LE(this_call, std::max<uint64_t>(max_out, 1) + ZSTD_BLOCKSIZE_MAX);
        rest.remove_prefix(*took);
        ASSERT_LT(++calls, size_t{1} << 24) << "no progress";
      }
      ASSERT_TRUE(decoder.Finish().ok());
      EXPECT_TRUE(out == whole.out);
      if (max_out == (uint64_t{1} << 20) && data == repeated) {
        EXPECT_GE(calls, 16u);
      }
    }
  }
}

TEST(ZstdDecoder, SinkSeesChunksOfAtMostDStreamOutSize) {
  const Decoded d = DecodeAll(SampleFile("00.jsonl.zst"));
  ASSERT_TRUE(d.status.ok()) << d.status;
  EXPECT_GT(d.largest_sink_chunk, 0u);
  EXPECT_LE(d.largest_sink_chunk, ZSTD_DStreamOutSize());
}

TEST(ZstdDecoder, SkippableFramesAnywhere) {
  const std::string a = SomeText(5000), b = SomeText(7777);
  const std::string data = SkippableFrame(0, "first") + SkippableFrame(0xf, "") + Compress(a) +
                           SkippableFrame(3, std::string(70000, 'x')) + Compress(b, 19) +
                           SkippableFrame(0xf, "last");
  for (const Decoded& d : {DecodeAll(data), DecodeByteByByte(data)}) {
    ASSERT_TRUE(d.status.ok()) << d.status;
    EXPECT_TRUE(d.out == a + b);
    EXPECT_EQ(d.num_frames, 6u);
    EXPECT_TRUE(d.out == ReferenceDecompress(data, a.size() + b.size()));
  }
}

TEST(ZstdDecoder, OnlySkippableFramesDecodeToNothing) {
  const Decoded d = DecodeByteByByte(SkippableFrame(1, "meta") + SkippableFrame(2, ""));
  ASSERT_TRUE(d.status.ok()) << d.status;
  EXPECT_EQ(d.out, "");
  EXPECT_EQ(d.num_frames, 2u);
}

TEST(ZstdDecoder, TruncatedFileIsDataLoss) {
  const std::string data = BadFile("truncated.jsonl.zst");
  for (const Decoded& d : {DecodeAll(data, {.source_name = "truncated.jsonl.zst"}),
                           DecodeByteByByte(data, {.source_name = "truncated.jsonl.zst"})}) {
    EXPECT_EQ(d.status.code(), absl::StatusCode::kDataLoss) << d.status;
    EXPECT_THAT(
        Msg(d.status),
        AllOf(StartsWith("truncated.jsonl.zst: byte " + std::to_string(data.size()) + ": "),
              HasSubstr("truncated stream"), HasSubstr("inside the frame starting at byte 0"),
              HasSubstr("(in the block starting at byte ")));
    EXPECT_TRUE(IsDamagedZstdInput(d.status));
  }
}

TEST(ZstdDecoder, TruncatedInsideFrameHeaderIsDataLoss) {
  const std::string frame = Compress("hello\n");
  for (size_t cut : {size_t{2}, size_t{4}, size_t{5}}) {
    SCOPED_TRACE(cut);
    const Decoded d =
        DecodeByteByByte(Compress("first\n") + frame.substr(0, cut), {.source_name = "t.zst"});
    EXPECT_EQ(d.status.code(), absl::StatusCode::kDataLoss) << d.status;
    EXPECT_THAT(Msg(d.status), HasSubstr("truncated stream"));
    EXPECT_EQ(d.out, "first\n");
  }
}

TEST(ZstdDecoder, TruncatedSkippableFrameIsDataLoss) {
  const std::string data = Compress("x\n") + SkippableFrame(0, "0123456789").substr(0, 12);
  const Decoded d = DecodeAll(data, {.source_name = "s.zst"});
  EXPECT_EQ(d.status.code(), absl::StatusCode::kDataLoss) << d.status;
  EXPECT_THAT(Msg(d.status), AllOf(HasSubstr("truncated stream"), HasSubstr("6 bytes missing")));
}

TEST(ZstdDecoder, BitflipIsDataLossWithOffset) {
  const std::string data = BadFile("bitflip.jsonl.zst");
  for (const Decoded& d : {DecodeAll(data, {.source_name = "bitflip.jsonl.zst"}),
                           DecodeByteByByte(data, {.source_name = "bitflip.jsonl.zst"})}) {
    EXPECT_EQ(d.status.code(), absl::StatusCode::kDataLoss) << d.status;
    EXPECT_THAT(Msg(d.status), StartsWith("bitflip.jsonl.zst: byte "));
    EXPECT_THAT(Msg(d.status), ::testing::AnyOf(HasSubstr("corrupted"), HasSubstr("checksum")));
    EXPECT_THAT(Msg(d.status), HasSubstr("frame starting at byte 0"));
  }
}

// A frame whose header declares another content size than its blocks hold (a damaged Frame
// Content Size field) is named as such: zstd's own words ("Destination buffer is too small",
// "Src size is incorrect") read like a sizing fault of the reader, not damage to the file.
TEST(ZstdDecoder, AFrameHeaderThatMisstatesTheContentSizeIsNamedAsDamage) {
  const std::string text = SomeText(40000);
  const std::string frame = Compress(text);
  // Byte 4 is the frame header descriptor: single segment (bit 5) with a 2-byte content size
  // (bits 7-6 = 01) here, after which bytes 5-6 are the size - 256.
  ASSERT_EQ(static_cast<unsigned char>(frame[4]) & 0xE0, 0x60) << "not a 2-byte single segment";
  for (int delta : {-8, -1}) {  // declares fewer bytes than the blocks hold
    SCOPED_TRACE(delta);
    std::string bad = frame;
    const int declared =
        (static_cast<unsigned char>(bad[5]) | static_cast<unsigned char>(bad[6]) << 8) + delta;
    bad[5] = static_cast<char>(declared & 0xff);
    bad[6] = static_cast<char>(declared >> 8);
    for (const Decoded& d : {DecodeAll(bad, {.source_name = "fcs.zst"}),
                             DecodeByteByByte(bad, {.source_name = "fcs.zst"})}) {
      EXPECT_EQ(d.status.code(), absl::StatusCode::kDataLoss) << d.status;
      EXPECT_THAT(Msg(d.status), HasSubstr("corrupted frame: its blocks hold another size than "
                                           "its header declares"))
          << d.status;
      EXPECT_THAT(Msg(d.status), HasSubstr("frame starting at byte 0"));
    }
  }
}

TEST(ZstdDecoder, ErrorOffsetsDoNotDependOnChunking) {
  for (const char* name :
       {"bitflip.jsonl.zst", "truncated.jsonl.zst", "not-zstd-plain.jsonl.zst"}) {
    SCOPED_TRACE(name);
    const std::string data = BadFile(name);
    const absl::Status big = DecodeAll(data, {.source_name = name}).status;
    ASSERT_FALSE(big.ok());
    for (size_t chunk : {size_t{1}, size_t{2}, size_t{3}, size_t{100}, size_t{4096}}) {
      EXPECT_EQ(DecodeChunked(data, [&] { return chunk; }, {.source_name = name}).status, big);
    }
  }
}

TEST(ZstdDecoder, BitflipIsPinnedToTheDamagedBlock) {
  // Three frames, the middle one damaged in its second block: the error names that block's first
  // byte.
  const std::string a = Compress(SomeText(1000));
  std::string b = Compress(SomeText(300000), 1);  // > 128 KiB: several blocks
  const std::string c = Compress(SomeText(1000));
  const size_t header_size = ZSTD_frameHeaderSize(b.data(), b.size());
  ASSERT_FALSE(ZSTD_isError(header_size));
  const auto* u = reinterpret_cast<const unsigned char*>(b.data());
  const uint32_t bh0 = u[header_size] | u[header_size + 1] << 8 | u[header_size + 2] << 16;
  ASSERT_EQ((bh0 >> 1) & 3, 2u) << "first block should be compressed";
  const size_t second = header_size + 3 + (bh0 >> 3);
  const uint32_t bh1 = u[second] | u[second + 1] << 8 | u[second + 2] << 16;
  ASSERT_EQ((bh1 >> 1) & 3, 2u) << "second block should be compressed";
  b[second + 3 + (bh1 >> 3) / 2] ^= 0x5a;
  const std::string data = a + b + c;
  const std::string expected_offset = std::to_string(a.size() + second);
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{65536}, data.size()}) {
    SCOPED_TRACE(chunk);
    const Decoded d = DecodeChunked(data, [&] { return chunk; }, {.source_name = "b.zst"});
    EXPECT_EQ(d.status.code(), absl::StatusCode::kDataLoss) << d.status;
    EXPECT_THAT(Msg(d.status),
                AllOf(StartsWith("b.zst: byte " + expected_offset + ": "),
                      HasSubstr("frame starting at byte " + std::to_string(a.size()))));
  }
}

TEST(ZstdDecoder, ChecksumMismatchIsDataLoss) {
  std::string data = Compress(SomeText(3000), 3, /*checksum=*/true);
  data.back() ^= 0x01;  // the last 4 bytes are the content checksum
  const Decoded d = DecodeAll(data, {.source_name = "c.zst"});
  EXPECT_EQ(d.status.code(), absl::StatusCode::kDataLoss) << d.status;
  EXPECT_THAT(Msg(d.status),
              AllOf(StartsWith("c.zst: byte " + std::to_string(data.size() - 4) + ": "),
                    HasSubstr("checksum mismatch")));
}

TEST(ZstdDecoder, PlainJsonLinesAreNamedAsSuch) {
  const std::string data = BadFile("not-zstd-plain.jsonl.zst");
  for (const Decoded& d : {DecodeAll(data, {.source_name = "not-zstd-plain.jsonl.zst"}),
                           DecodeByteByByte(data, {.source_name = "not-zstd-plain.jsonl.zst"})}) {
    EXPECT_EQ(d.status.code(), absl::StatusCode::kInvalidArgument) << d.status;
    EXPECT_THAT(
        Msg(d.status),
        StartsWith(
            "not-zstd-plain.jsonl.zst: byte 0: not a zstd stream: looks like plain JSON lines"));
    EXPECT_EQ(d.bytes_in, 4u);  // refused as soon as the magic number is known
    EXPECT_TRUE(IsDamagedZstdInput(d.status));
  }
}

TEST(ZstdDecoder, OtherFormatsAtByteZeroAreNamed) {
  const struct {
    std::string data;
    const char* looks_like;
  } kCases[] = {
      {std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00", 8), "looks like gzip"},
      {"BZh91AY&SY", "looks like bzip2"},
      {std::string("\xfd"
                   "7zXZ\0\0",
                   7),
       "looks like xz"},
      {std::string("\x04\x22\x4d\x18\x64\x40", 6), "looks like lz4"},
      {std::string("\x27\xb5\x2f\xfd\x00\x00", 6), "legacy zstd v0.7"},
      {"Hello, world\n", "looks like plain text"},
      {"\n\n{\"text\": 1}\n", "looks like plain JSON lines"},
      {std::string("\x00\x01\x02\x03\x04", 5), "unknown format (starts with 00 01 02 03"},
      // Not text: bytes above 0x7f that are not UTF-8 (a PNG; "plain text" before).
      {std::string("\x89PNG\r\n", 6), "unknown format (starts with 89 50 4e 47"},
      // One bit off zstd's magic: a damaged file, not "plain text" as before.
      {std::string("\x2c\xb5\x2f\xfd\x00\x00", 6),
       "starts with 2c b5 2f fd, one byte off zstd's magic 28 b5 2f fd (a damaged zstd file?)"},
      {"na\xc3\xafve text\n", "looks like plain text"},  // UTF-8 text is still text
      // Markup where a download should be (a proxy's sign-in page, a mirror's error page).
      {"<!DOCTYPE html><html>", "looks like an HTML or XML page (an error or sign-in page"},
      {"\r\n<html>", "looks like an HTML or XML page"},
      {"<?xml version=\"1.0\"?>", "looks like an HTML or XML page"},
      {"< 3 is text\n", "looks like plain text"},
  };
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.looks_like);
    const Decoded d = DecodeByteByByte(c.data, {.source_name = "x.zst"});
    EXPECT_EQ(d.status.code(), absl::StatusCode::kInvalidArgument) << d.status;
    EXPECT_THAT(Msg(d.status),
                AllOf(StartsWith("x.zst: byte 0: not a zstd stream: "), HasSubstr(c.looks_like)));
  }
}

TEST(ZstdDecoder, TrailingGarbageNamesItsOffset) {
  const std::string frame = Compress("{\"text\": \"a\"}\n");
  const std::string offset = std::to_string(frame.size());
  {
    const Decoded d = DecodeAll(frame + "garbage!", {.source_name = "g.zst"});
    EXPECT_EQ(d.status.code(), absl::StatusCode::kDataLoss) << d.status;
    EXPECT_THAT(Msg(d.status), AllOf(StartsWith("g.zst: byte " + offset + ": "),
                                     HasSubstr("trailing garbage after the last frame"),
                                     HasSubstr("bad magic 67 61 72 62")));
    EXPECT_EQ(d.out, "{\"text\": \"a\"}\n");  // what came before is still delivered
  }
  {
    const Decoded d = DecodeByteByByte(frame + "{\"text\": \"b\"}\n", {.source_name = "g.zst"});
    EXPECT_EQ(d.status.code(), absl::StatusCode::kDataLoss) << d.status;
    EXPECT_THAT(Msg(d.status), AllOf(StartsWith("g.zst: byte " + offset + ": "),
                                     HasSubstr("(looks like plain JSON lines)")));
  }
  {
    const Decoded d = DecodeAll(frame + "\n\n", {.source_name = "g.zst"});  // too short for a magic
    EXPECT_EQ(d.status.code(), absl::StatusCode::kDataLoss) << d.status;
    EXPECT_THAT(Msg(d.status),
                AllOf(StartsWith("g.zst: byte " + offset + ": "),
                      HasSubstr("trailing garbage after the last frame: 2 stray bytes")));
  }
}

// A damaged magic where the next frame should start is named as possibly a damaged frame, not only
// as bytes appended after the last one (its compressed bytes follow it).
TEST(ZstdDecoder, ADamagedMagicAfterAFrameIsNamedAsADamagedFrame) {
  const std::string first = Compress("{\"text\": \"a\"}\n");
  std::string second = Compress("{\"text\": \"b\"}\n");
  second[0] = '\x2c';
  const Decoded d = DecodeAll(first + second, {.source_name = "d.zst"});
  EXPECT_EQ(d.status.code(), absl::StatusCode::kDataLoss) << d.status;
  EXPECT_THAT(Msg(d.status),
              AllOf(StartsWith("d.zst: byte " + std::to_string(first.size()) + ": "),
                    HasSubstr("bad magic 2c b5 2f fd, one byte off zstd's magic 28 b5 2f fd, where "
                              "the next frame should start: a damaged frame")));
}

TEST(ZstdDecoder, EmptyInputIsAnError) {
  ZstdDecoder decoder({.source_name = "empty.jsonl.zst"});
  auto sink = [](std::string_view) { return absl::OkStatus(); };
  ASSERT_TRUE(decoder.Feed("", sink).ok());
  const absl::Status s = decoder.Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(Msg(s), AllOf(StartsWith("empty.jsonl.zst: byte 0: "), HasSubstr("empty (0 bytes)")));
}

TEST(ZstdDecoder, TooShortInputIsNotZstd) {
  const Decoded d = DecodeAll("{}\n", {.source_name = "s.zst"});
  EXPECT_EQ(d.status.code(), absl::StatusCode::kInvalidArgument) << d.status;
  EXPECT_THAT(Msg(d.status), AllOf(StartsWith("s.zst: byte 0: not a zstd stream: only 3 bytes"),
                                   HasSubstr("plain JSON lines")));
}

// A frame whose header declares a 2^28-byte window: streamed without a pledged size, so the
// compressor cannot shrink the window to fit the content.
std::string CompressWithWindowLog28(std::string_view text) {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 1);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_windowLog, 28);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  std::string out(ZSTD_compressBound(text.size()) + 1024, '\0');
  ZSTD_outBuffer o{out.data(), out.size(), 0};
  ZSTD_inBuffer in{text.data(), text.size(), 0};
  // ZSTD_e_continue first: a single ZSTD_e_end call would tell the compressor the total size.
  size_t r = ZSTD_compressStream2(cctx, &o, &in, ZSTD_e_continue);
  EXPECT_FALSE(ZSTD_isError(r));
  ZSTD_inBuffer none{nullptr, 0, 0};
  do {
    r = ZSTD_compressStream2(cctx, &o, &none, ZSTD_e_end);
    EXPECT_FALSE(ZSTD_isError(r));
  } while (r != 0 && !ZSTD_isError(r));
  ZSTD_freeCCtx(cctx);
  out.resize(o.pos);
  return out;
}

TEST(ZstdDecoder, WindowAboveLimitIsRefusedWithAdvice) {
  const std::string text = SomeText(100000);
  const std::string data = SkippableFrame(0, "hdr") + CompressWithWindowLog28(text);
  {
    const Decoded d = DecodeAll(data, {.source_name = "w.zst"});
    EXPECT_EQ(d.status.code(), absl::StatusCode::kResourceExhausted) << d.status;
    EXPECT_THAT(Msg(d.status), AllOf(StartsWith("w.zst: byte 11: "), HasSubstr("window log 28"),
                                     HasSubstr("limit of 128 MiB (window log 27)"),
                                     HasSubstr("--zstd-window-log-max=28")));
    EXPECT_EQ(d.out, "");
    EXPECT_FALSE(IsDamagedZstdInput(d.status));  // a limit, not damage
  }
  for (int window_log_max : {28, 31}) {
    const Decoded d =
        DecodeByteByByte(data, {.source_name = "w.zst", .window_log_max = window_log_max});
    ASSERT_TRUE(d.status.ok()) << d.status;
    EXPECT_TRUE(d.out == text);
  }
}

// A window allowed by a raised limit that memory cannot hold (ulimit -v, a cgroup with overcommit
// off): ResourceExhausted naming the frame and its window, which is what took the memory. A child
// under an address-space limit 64 MiB above what it uses decodes a frame of a 256 MiB window.
TEST(ZstdDecoderDeathTest, OutOfMemoryForAWindowNamesTheWindow) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's shadow memory does not fit under an address-space limit";
#endif
  const std::string data = SkippableFrame(0, "hdr") + CompressWithWindowLog28(SomeText(100000));
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pipe_fds[0]);
    const rlimit no_core{0, 0};  // the child's only: the test process keeps its core dumps
    if (setrlimit(RLIMIT_CORE, &no_core) != 0) std::_Exit(3);
    long pages = 0;
    std::FILE* f = std::fopen("/proc/self/statm", "r");
    if (f == nullptr || std::fscanf(f, "%ld", &pages) != 1) std::_Exit(3);
    std::fclose(f);
    const rlim_t limit = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) +
                         (rlim_t{64} << 20);
    const rlimit as{limit, limit};
    if (setrlimit(RLIMIT_AS, &as) != 0) std::_Exit(3);
    const Decoded d = DecodeAll(data, {.source_name = "w.zst", .window_log_max = 31});
    const std::string message(d.status.message());
    if (write(pipe_fds[1], message.data(), message.size()) < 0) std::_Exit(3);
    std::_Exit(d.status.code() == absl::StatusCode::kResourceExhausted ? 1 : 2);
  }
  close(pipe_fds[1]);
  std::string message;
  char buf[512];
  for (ssize_t n; (n = read(pipe_fds[0], buf, sizeof buf)) > 0;) message.append(buf, n);
  close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "died of signal " << WTERMSIG(status);
  ASSERT_NE(WEXITSTATUS(status), 3) << "the limit could not be set";
  EXPECT_EQ(WEXITSTATUS(status), 1) << "not ResourceExhausted: " << message;
  EXPECT_THAT(message, AllOf(StartsWith("w.zst: byte 11: zstd: out of memory for the frame "
                                        "starting at byte 11, whose window of 256 MiB (window log "
                                        "28)"),
                             HasSubstr("--zstd-window-log-max (now 31)")));
}

// A window descriptor past window log 31, which no zstd writes: damage (a kept download so damaged
// is dropped), not a limit to raise.
TEST(ZstdDecoder, WindowPastAnyZstdIsDamage) {
  std::string data = SkippableFrame(0, "hdr") + CompressWithWindowLog28(SomeText(100000));
  ASSERT_EQ(data[11 + 4] & 0x20, 0) << "a single-segment frame has no window descriptor";
  data[11 + 5] = static_cast<char>(0xF8);  // exponent 31: window log 41
  const Decoded d = DecodeAll(data, {.source_name = "w.zst", .window_log_max = 31});
  EXPECT_EQ(d.status.code(), absl::StatusCode::kDataLoss) << d.status;
  EXPECT_THAT(Msg(d.status), AllOf(StartsWith("w.zst: byte 11: zstd: corrupted frame header"),
                                   HasSubstr("window log 41")));
  EXPECT_TRUE(IsDamagedZstdInput(d.status));
}

// A frame whose header states a content size its blocks do not hold is damage, also where its last
// block is empty: libzstd (1.5.4) checks the size only after a last block with data, so such a
// frame, stating 200 bytes and holding none, passed (found by a differential of the decoder against
// zstd's one-shot API, which refuses it). The same frame stating its true size, 0, is sound.
TEST(ZstdDecoder, AStatedContentSizeThatIsWrongIsDamage) {
  auto frame = [](unsigned char stated) {
    // Magic; single segment, checksum, a 1-byte content size; an empty raw last block; the
    // content checksum of no bytes (XXH64 of "", low 32 bits: 0x51D8E999).
    const unsigned char bytes[] = {0x28, 0xB5, 0x2F, 0xFD, 0x24, stated, 0x01,
                                   0x00, 0x00, 0x99, 0xE9, 0xD8, 0x51};
    return std::string(reinterpret_cast<const char*>(bytes), sizeof bytes);
  };
  const std::string first = Compress("{\"text\": \"hello\"}\n");
  EXPECT_TRUE(DecodeAll(first + frame(0)).status.ok());
  for (const Decoded& d : {DecodeAll(first + frame(200), {.source_name = "s.zst"}),
                           DecodeByteByByte(first + frame(200), {.source_name = "s.zst"})}) {
    EXPECT_EQ(d.status.code(), absl::StatusCode::kDataLoss) << d.status;
    EXPECT_EQ(Msg(d.status), absl::StrCat("s.zst: byte ", first.size(),
                                          ": zstd: corrupted frame header: the frame starting at "
                                          "byte ",
                                          first.size(),
                                          " states 200 bytes of content, but its "
                                          "blocks hold 0"));
    EXPECT_TRUE(IsDamagedZstdInput(d.status));
  }
}

TEST(ZstdDecoder, WindowLogMaxOutOfRangeIsInvalidArgument) {
  for (int bad : {9, 32}) {
    const Decoded d = DecodeAll(Compress("x"), {.source_name = "w.zst", .window_log_max = bad});
    EXPECT_EQ(d.status.code(), absl::StatusCode::kInvalidArgument) << d.status;
    EXPECT_THAT(Msg(d.status), HasSubstr("window_log_max"));
    EXPECT_FALSE(IsDamagedZstdInput(d.status));
  }
}

TEST(ZstdDecoder, FrameNeedingADictionaryIsRefused) {
  // A finalized dictionary carries its ID into every frame compressed with it.
  std::string samples;
  std::vector<size_t> sample_sizes;
  for (int i = 0; i < 200; ++i) {
    const std::string s = SomeText(200 + i);
    samples += s;
    sample_sizes.push_back(s.size());
  }
  const std::string content = SomeText(4096);
  std::string dict(16384, '\0');
  ZDICT_params_t params{};
  params.compressionLevel = 3;
  params.dictID = 4242;
  const size_t dict_size = ZDICT_finalizeDictionary(
      dict.data(), dict.size(), content.data(), content.size(), samples.data(), sample_sizes.data(),
      static_cast<unsigned>(sample_sizes.size()), params);
  ASSERT_FALSE(ZDICT_isError(dict_size)) << ZDICT_getErrorName(dict_size);
  dict.resize(dict_size);
  ASSERT_EQ(ZDICT_getDictID(dict.data(), dict.size()), 4242u);

  const std::string text = SomeText(5000);
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  std::string frame(ZSTD_compressBound(text.size()), '\0');
  const size_t n = ZSTD_compress_usingDict(cctx, frame.data(), frame.size(), text.data(),
                                           text.size(), dict.data(), dict.size(), 3);
  ZSTD_freeCCtx(cctx);
  ASSERT_FALSE(ZSTD_isError(n));
  frame.resize(n);

  const std::string lead = Compress("first\n");
  const Decoded d = DecodeByteByByte(lead + frame, {.source_name = "d.zst"});
  EXPECT_EQ(d.status.code(), absl::StatusCode::kInvalidArgument) << d.status;
  EXPECT_THAT(Msg(d.status), AllOf(StartsWith("d.zst: byte " + std::to_string(lead.size()) + ": "),
                                   HasSubstr("needs dictionary ID 4242")));
  EXPECT_EQ(d.out, "first\n");
  EXPECT_FALSE(IsDamagedZstdInput(d.status));

  // A frame compressed with a dictionary without its ID (zstd -D --no-dictID) whose first block
  // uses the dictionary's literal tables: zstd's own words, "Dictionary is corrupted", pointed at a
  // dictionary nobody gave (tests/data/zstd/README.md).
  const Decoded u = DecodeAll(
      ReadFileOrDie(std::string(PILEPREP_TEST_DATA_DIR) + "/zstd/dictionary-without-id.jsonl.zst"),
      {.source_name = "u.zst"});
  EXPECT_EQ(u.status.code(), absl::StatusCode::kDataLoss) << u.status;
  EXPECT_THAT(Msg(u.status),
              AllOf(Not(HasSubstr("Dictionary is corrupted")),
                    HasSubstr("corrupted block in the frame starting at byte 0, or a frame "
                              "compressed with a dictionary its header does not name")));
}

TEST(ZstdDecoder, ErrorsAreSticky) {
  ZstdDecoder decoder({.source_name = "n.zst"});
  auto sink = [](std::string_view) { return absl::OkStatus(); };
  const absl::Status first = decoder.Feed("not zstd at all", sink);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(decoder.Feed(Compress("fine"), sink), first);
  EXPECT_EQ(decoder.Finish(), first);
  EXPECT_EQ(decoder.Finish(), first);
}

TEST(ZstdDecoder, SinkErrorPropagatesUnchangedAndSticks) {
  ZstdDecoder decoder({.source_name = "s.zst"});
  const absl::Status stop = absl::CancelledError("downstream said stop");
  int calls = 0;
  auto sink = [&](std::string_view) {
    ++calls;
    return stop;
  };
  const std::string data = Compress(SomeText(1000));
  EXPECT_EQ(decoder.Feed(data, sink), stop);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(decoder.Feed(data, sink), stop);
  EXPECT_EQ(decoder.Finish(), stop);
  EXPECT_EQ(calls, 1);
}

TEST(ZstdDecoder, FeedAfterFinishIsFailedPrecondition) {
  ZstdDecoder decoder;
  auto sink = [](std::string_view) { return absl::OkStatus(); };
  ASSERT_TRUE(decoder.Feed(Compress("a"), sink).ok());
  ASSERT_TRUE(decoder.Finish().ok());
  EXPECT_EQ(decoder.Feed(Compress("b"), sink).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ZstdDecoder, FramesMayEndAnywhereIncludingMidCharacter) {
  // "été" split inside its two-byte characters across three frames.
  const std::string text = "{\"text\": \"\u00e9t\u00e9\"}\n";
  const std::string data =
      Compress(text.substr(0, 11)) + Compress(text.substr(11, 3)) + Compress(text.substr(14));
  const Decoded d = DecodeByteByByte(data);
  ASSERT_TRUE(d.status.ok()) << d.status;
  EXPECT_EQ(d.out, text);
  EXPECT_EQ(d.num_frames, 3u);
}

TEST(ZstdDecoder, CountsBytesInAndOut) {
  const std::string data = BadFile("multi-frame.jsonl.zst");
  ZstdDecoder decoder;
  uint64_t seen = 0;
  auto sink = [&](std::string_view b) {
    seen += b.size();
    return absl::OkStatus();
  };
  ASSERT_TRUE(decoder.Feed(std::string_view(data).substr(0, 1000), sink).ok());
  EXPECT_EQ(decoder.bytes_in(), 1000u);
  ASSERT_TRUE(decoder.Feed(std::string_view(data).substr(1000), sink).ok());
  ASSERT_TRUE(decoder.Finish().ok());
  EXPECT_EQ(decoder.bytes_in(), data.size());
  EXPECT_EQ(decoder.bytes_out(), 35977u);
  EXPECT_EQ(seen, 35977u);
}

TEST(ZstdDecoder, IsMovable) {
  ZstdDecoder a({.source_name = "m.zst"});
  std::string out;
  auto sink = [&](std::string_view b) {
    out.append(b);
    return absl::OkStatus();
  };
  const std::string data = Compress("moved\n");
  ASSERT_TRUE(a.Feed(std::string_view(data).substr(0, 5), sink).ok());
  ZstdDecoder b = std::move(a);
  ASSERT_TRUE(b.Feed(std::string_view(data).substr(5), sink).ok());
  ASSERT_TRUE(b.Finish().ok());
  EXPECT_EQ(out, "moved\n");
  EXPECT_EQ(b.options().source_name, "m.zst");
}

}  // namespace
}  // namespace pileprep
