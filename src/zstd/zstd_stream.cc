#include "pileprep/zstd_stream.h"

#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace pileprep {
namespace internal {

constexpr char kDamagedInputPayload[] = "type.pileprep/zstd.damaged_input";

namespace {

constexpr uint32_t kZstdMagic = 0xFD2FB528u;
constexpr unsigned char kZstdMagicBytes[4] = {0x28, 0xb5, 0x2f, 0xfd};  // kZstdMagic, as stored
constexpr uint32_t kSkippableMagicMask = 0xFFFFFFF0u;
constexpr uint32_t kSkippableMagic = 0x184D2A50u;
constexpr int kMinWindowLog = 10;  // ZSTD_WINDOWLOG_ABSOLUTEMIN
constexpr int kMaxWindowLog = 31;  // ZSTD_WINDOWLOG_MAX on 64-bit targets
// A frame header is at most 4 (magic) + 1 (descriptor) + 1 (window) + 4 (dict ID) + 8 (size).
constexpr size_t kMaxFrameHeaderBytes = 18;

uint32_t ReadLe32(const unsigned char* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

uint64_t ReadLe(const unsigned char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

std::string HexBytes(const unsigned char* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) absl::StrAppendFormat(&s, "%s%02x", i == 0 ? "" : " ", p[i]);
  return s;
}

std::string HumanBytes(uint64_t n) {
  if (n >= (uint64_t{1} << 30) && n % (uint64_t{1} << 30) == 0)
    return absl::StrCat(n >> 30, " GiB");
  if (n >= (uint64_t{1} << 20) && n % (uint64_t{1} << 20) == 0)
    return absl::StrCat(n >> 20, " MiB");
  if (n >= (uint64_t{1} << 10) && n % (uint64_t{1} << 10) == 0)
    return absl::StrCat(n >> 10, " KiB");
  return absl::StrCat(n, " bytes");
}

// Smallest L with 2^L >= window_size: the ZSTD_d_windowLogMax a frame needs.
int WindowLogFor(uint64_t window_size) {
  int log = kMinWindowLog;
  while (log < 63 && (uint64_t{1} << log) < window_size) ++log;
  return log;
}

bool IsValidMagic(uint32_t magic) {
  return magic == kZstdMagic || (magic & kSkippableMagicMask) == kSkippableMagic;
}

// Whether the first `n` (< 4) bytes could start a zstd or skippable frame.
bool IsMagicPrefix(const unsigned char* p, size_t n) {
  static constexpr unsigned char kSkip[4] = {0x50, 0x2a, 0x4d, 0x18};
  bool zstd = true, skip = true;
  for (size_t i = 0; i < n; ++i) {
    zstd = zstd && p[i] == kZstdMagicBytes[i];
    skip = skip && (i == 0 ? (p[0] & 0xf0) == 0x50 : p[i] == kSkip[i]);
  }
  return zstd || skip;
}

// Names the format that `n` leading bytes (n <= 4) look like, or returns "" when unrecognised.
// Input in the wrong format is the most common reason a shard fails at byte 0, so the message says
// what it is.
std::string SniffFormat(const unsigned char* p, size_t n) {
  auto starts = [&](std::initializer_list<unsigned char> magic) {
    if (magic.size() > n) return false;
    return std::equal(magic.begin(), magic.end(), p);
  };
  if (starts({0x1f, 0x8b})) return "gzip";
  if (starts({'B', 'Z', 'h'})) return "bzip2";
  if (starts({0xfd, '7', 'z', 'X'})) return "xz";
  if (starts({0x04, 0x22, 0x4d, 0x18})) return "lz4";
  if (starts({'P', 'K', 0x03, 0x04})) return "zip";
  // zstd v0.1 used 0xFD2FB51E; v0.2..v0.7 used 0xFD2FB522..0xFD2FB527.
  if (n == 4 && p[1] == 0xb5 && p[2] == 0x2f && p[3] == 0xfd &&
      (p[0] == 0x1e || (p[0] >= 0x22 && p[0] <= 0x27))) {
    return absl::StrCat("a legacy zstd v0.", p[0] == 0x1e ? 1 : p[0] - 0x20,
                        " frame, which is not supported");
  }
  size_t i = 0;
  if (starts({0xef, 0xbb, 0xbf})) i = 3;  // UTF-8 byte order mark
  while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n')) ++i;
  if (i < n && p[i] == '{') return "plain JSON lines";
  if (i < n && p[i] == '[') return "plain JSON";
  // "<!DOCTYPE html>", "<html>", "<?xml ...>": a proxy's sign-in page or a mirror's error page
  // served with 200 in place of the file is the usual way a download yields markup.
  if (i + 1 < n && p[i] == '<' &&
      (p[i + 1] == '!' || p[i + 1] == '?' || absl::ascii_isalpha(p[i + 1]))) {
    return "an HTML or XML page (an error or sign-in page served in place of the file?)";
  }
  // Text: no control bytes, and UTF-8 where a byte is not ASCII (a character may run past the n
  // bytes): a PNG's 89 50 4e 47 was "plain text".
  bool text = n > 0;
  for (size_t j = 0; j < n && text;) {
    const unsigned char c = p[j];
    if (c < 0x80) {
      if ((c < 0x20 && c != '\t' && c != '\r' && c != '\n') || c == 0x7f) text = false;
      ++j;
      continue;
    }
    const size_t len = c >= 0xc2 && c <= 0xdf   ? 2
                       : c >= 0xe0 && c <= 0xef ? 3
                       : c >= 0xf0 && c <= 0xf4 ? 4
                                                : 0;
    if (len == 0) {
      text = false;
      break;
    }
    for (size_t k = 1; k < len && j + k < n; ++k) {
      if ((p[j + k] & 0xc0) != 0x80) text = false;
    }
    j += len;
  }
  return text ? "plain text" : "";
}

struct FrameHeader {
  static constexpr uint64_t kUnknownSize = UINT64_MAX;
  uint64_t window_size = 0;
  uint32_t dict_id = 0;
  uint64_t content_size = kUnknownSize;  // Frame_Content_Size, where the header states it
};

// Bytes the header starting with magic+descriptor `p[0..4]` occupies (p holds at least 5 bytes).
size_t ZstdHeaderSize(const unsigned char* p) {
  static constexpr size_t kDictIdBytes[4] = {0, 1, 2, 4};
  const unsigned char fhd = p[4];
  const bool single_segment = (fhd >> 5) & 1;
  const unsigned fcs_flag = fhd >> 6;
  const size_t fcs_bytes = fcs_flag == 0 ? (single_segment ? 1 : 0) : size_t{1} << fcs_flag;
  return 5 + (single_segment ? 0 : 1) + kDictIdBytes[fhd & 3] + fcs_bytes;
}

// Parses a complete zstd frame header (RFC 8878 §3.1.1.1), done here rather than with zstd's
// experimental ZSTD_getFrameHeader so that only zstd's stable ABI is used.
FrameHeader ParseZstdHeader(const unsigned char* p) {
  static constexpr size_t kDictIdBytes[4] = {0, 1, 2, 4};
  FrameHeader h;
  const unsigned char fhd = p[4];
  const bool single_segment = (fhd >> 5) & 1;
  const unsigned fcs_flag = fhd >> 6;
  size_t pos = 5;
  if (!single_segment) {
    const unsigned char wd = p[pos++];
    const uint64_t base = uint64_t{1} << (kMinWindowLog + (wd >> 3));
    h.window_size = base + (base / 8) * (wd & 7);
  }
  const size_t did_bytes = kDictIdBytes[fhd & 3];
  h.dict_id = static_cast<uint32_t>(ReadLe(p + pos, did_bytes));
  pos += did_bytes;
  const size_t fcs_bytes = fcs_flag == 0 ? (single_segment ? 1 : 0) : size_t{1} << fcs_flag;
  if (fcs_bytes > 0) h.content_size = ReadLe(p + pos, fcs_bytes) + (fcs_bytes == 2 ? 256 : 0);
  if (single_segment) h.window_size = h.content_size;
  h.window_size = std::max(h.window_size, uint64_t{1} << kMinWindowLog);
  return h;
}

}  // namespace
}  // namespace internal

struct ZstdDecoder::Impl {
  enum class State { kHeader, kFrame, kSkip };

  explicit Impl(ZstdDecoderOptions opts) : options(std::move(opts)) {
    if (options.window_log_max < internal::kMinWindowLog ||
        options.window_log_max > internal::kMaxWindowLog) {
      Fail(absl::StatusCode::kInvalidArgument, 0,
           absl::StrFormat("zstd: window_log_max %d is outside %d..%d", options.window_log_max,
                           internal::kMinWindowLog, internal::kMaxWindowLog))
          .IgnoreError();  // kept in `error`, returned by every Feed and Finish
      return;
    }
    dctx = ZSTD_createDCtx();
    if (dctx == nullptr) {
      Fail(absl::StatusCode::kResourceExhausted, 0, "zstd: cannot allocate a decoder")
          .IgnoreError();
      return;
    }
    const size_t r = ZSTD_DCtx_setParameter(dctx, ZSTD_d_windowLogMax, options.window_log_max);
    if (ZSTD_isError(r)) {
      Fail(absl::StatusCode::kInvalidArgument, 0,
           absl::StrCat("zstd: cannot set window_log_max: ", ZSTD_getErrorName(r)))
          .IgnoreError();
      return;
    }
    out_capacity = ZSTD_DStreamOutSize();
    out = std::make_unique<char[]>(out_capacity);
  }

  ~Impl() { ZSTD_freeDCtx(dctx); }

  absl::Status Fail(absl::StatusCode code, uint64_t offset, absl::string_view cause) {
    std::string message = options.source_name.empty()
                              ? absl::StrCat("byte ", offset, ": ", cause)
                              : absl::StrCat(options.source_name, ": byte ", offset, ": ", cause);
    error = absl::Status(code, message);
    // Every kDataLoss here is about the bytes; of the kInvalidArgument causes, only those that say
    // the input is not zstd (the others are options and dictionaries).
    if (code == absl::StatusCode::kDataLoss || absl::StartsWith(cause, "not a zstd stream")) {
      error.SetPayload(internal::kDamagedInputPayload, absl::Cord("damaged"));
    }
    return error;
  }

  // Stops once bytes_out reaches out_stop (FeedSome), or when the input is all taken; *taken: how
  // much of it was.
  absl::Status Feed(const unsigned char* p, size_t n, Sink sink, uint64_t out_stop, size_t* taken);
  absl::Status Finish();

  // Gathers header bytes from p[0..n) into `header`; starts the frame once the header is complete.
  absl::Status TakeHeaderBytes(const unsigned char*& p, size_t& n, Sink sink);
  absl::Status CheckMagic();
  absl::Status StartFrame(Sink sink);
  // Gives frame bytes from p[0..n) to zstd, one part (block or checksum) at a time, until the frame
  // ends or the input runs out.
  absl::Status DecodeFrameBytes(const unsigned char*& p, size_t& n, Sink sink);
  // Runs zstd over all of p[0..n), stopping early only at the end of the frame; `*consumed` is how
  // much of it zstd took.
  absl::Status RunZstd(const unsigned char* p, size_t n, Sink sink, size_t* consumed);
  void EndBlock();
  absl::Status ZstdError(size_t code, uint64_t offset);
  void EndFrame() {
    ++num_frames;
    state = State::kHeader;
    header_len = 0;
  }

  ZstdDecoderOptions options;
  ZSTD_DCtx* dctx = nullptr;
  std::unique_ptr<char[]> out;
  size_t out_capacity = 0;
  absl::Status error;
  bool finished = false;

  State state = State::kHeader;
  unsigned char header[internal::kMaxFrameHeaderBytes];
  size_t header_len = 0;
  uint64_t frame_start = 0;  // stream offset of the current (or next) frame
  uint64_t frame_window = 0;  // the current frame's window, from its header
  uint64_t frame_content_size = 0;  // its stated content size (FrameHeader::kUnknownSize: none)
  uint64_t frame_out_start = 0;     // bytes_out where it began
  uint64_t skip_left = 0;    // bytes of the current skippable frame still to skip

  // Where zstd is inside the current frame, followed through the block headers. zstd never reports
  // how far into its input it got when it fails, so it is given no input past the end of the
  // current part: an error then belongs to the part that starts at `part_start`, whatever the
  // chunking.
  enum class Part { kBlockHeader, kBlockBody, kChecksum, kTail };
  Part part = Part::kBlockHeader;
  uint64_t part_left = 0;  // bytes left in a block body or checksum
  unsigned char block_header[3];
  size_t block_header_len = 0;
  bool last_block = false;
  bool has_checksum = false;
  uint64_t part_start = 0;  // offset of the frame header, block header or checksum being decoded

  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  uint64_t num_frames = 0;
  uint64_t out_stop = UINT64_MAX;  // Feed's, while it runs
};

absl::Status ZstdDecoder::Impl::Feed(const unsigned char* p, size_t n, Sink sink, uint64_t stop_at,
                                     size_t* taken) {
  *taken = 0;
  if (!error.ok()) return error;
  if (finished) return absl::FailedPreconditionError("ZstdDecoder::Feed called after Finish");
  out_stop = stop_at;
  const size_t given = n;
  absl::Cleanup count_taken = [&] { *taken = given - n; };
  while (n > 0 && bytes_out < out_stop) {
    switch (state) {
      case State::kHeader: {
        absl::Status s = TakeHeaderBytes(p, n, sink);
        if (!s.ok()) return s;
        break;
      }
      case State::kSkip: {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(skip_left, n));
        skip_left -= take;
        bytes_in += take;
        p += take;
        n -= take;
        if (skip_left == 0) EndFrame();
        break;
      }
      case State::kFrame: {
        absl::Status s = DecodeFrameBytes(p, n, sink);
        if (!s.ok()) return s;
        break;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ZstdDecoder::Impl::TakeHeaderBytes(const unsigned char*& p, size_t& n, Sink sink) {
  if (header_len == 0) frame_start = bytes_in;
  for (;;) {
    size_t need = 4;
    if (header_len >= 4) {
      if (internal::ReadLe32(header) != internal::kZstdMagic) {
        need = 8;  // skippable: magic + frame size
      } else {
        need = header_len < 5 ? 5 : internal::ZstdHeaderSize(header);
      }
    }
    if (header_len == need) return StartFrame(sink);
    if (n == 0) return absl::OkStatus();
    const size_t take = std::min(need - header_len, n);
    std::memcpy(header + header_len, p, take);
    header_len += take;
    bytes_in += take;
    p += take;
    n -= take;
    if (header_len == 4) {  // reached exactly once per frame, as take > 0
      absl::Status s = CheckMagic();
      if (!s.ok()) return s;
    }
  }
}

absl::Status ZstdDecoder::Impl::CheckMagic() {
  if (internal::IsValidMagic(internal::ReadLe32(header))) return absl::OkStatus();
  // Three of zstd's four magic bytes, and not a legacy zstd magic: a damaged frame, not another
  // format or text.
  int same = 0;
  for (int i = 0; i < 4; ++i) same += header[i] == internal::kZstdMagicBytes[i];
  std::string looks_like = internal::SniffFormat(header, 4);
  const bool near_magic = same == 3 && (looks_like.empty() || looks_like == "plain text");
  if (near_magic) looks_like.clear();
  const std::string hex = internal::HexBytes(header, 4);
  if (frame_start == 0) {
    return Fail(absl::StatusCode::kInvalidArgument, 0,
                near_magic ? absl::StrCat("not a zstd stream: starts with ", hex,
                                          ", one byte off zstd's magic 28 b5 2f fd (a damaged "
                                          "zstd file?)")
                : looks_like.empty()
                    ? absl::StrCat("not a zstd stream: unknown format (starts with ", hex,
                                   "; zstd frames start with 28 b5 2f fd)")
                    : absl::StrCat("not a zstd stream: looks like ", looks_like, " (starts with ",
                                   hex, ")"));
  }
  // The stream cannot tell bytes appended after the last frame from a frame whose start was
  // damaged (its compressed bytes follow): both are named.
  return Fail(absl::StatusCode::kDataLoss, frame_start,
              absl::StrCat("zstd: bad magic ", hex,
                           near_magic           ? ", one byte off zstd's magic 28 b5 2f fd,"
                           : looks_like.empty() ? ""
                                                : absl::StrCat(" (looks like ", looks_like, ")"),
                           " where the next frame should start: ",
                           near_magic ? "a damaged frame"
                                      : "trailing garbage after the last frame, or a damaged "
                                        "frame"));
}

absl::Status ZstdDecoder::Impl::StartFrame(Sink sink) {
  if ((internal::ReadLe32(header) & internal::kSkippableMagicMask) == internal::kSkippableMagic) {
    skip_left = internal::ReadLe32(header + 4);
    state = State::kSkip;
    if (skip_left == 0) EndFrame();
    return absl::OkStatus();
  }
  if (header[4] & 0x08) {
    return Fail(absl::StatusCode::kDataLoss, frame_start + 4,
                absl::StrCat(
                    "zstd: corrupted frame header: reserved bit set in the frame starting at byte ",
                    frame_start));
  }
  const internal::FrameHeader h = internal::ParseZstdHeader(header);
  if (h.dict_id != 0) {
    return Fail(
        absl::StatusCode::kInvalidArgument, frame_start,
        absl::StrCat("zstd: the frame starting at byte ", frame_start, " needs dictionary ID ",
                     h.dict_id, "; only frames compressed without a dictionary can be decoded"));
  }
  if (h.window_size > (uint64_t{1} << options.window_log_max)) {
    const int need = internal::WindowLogFor(h.window_size);
    if (need > internal::kMaxWindowLog) {
      // No zstd writes such a frame (its format stops at window log 31): the header is damaged,
      // and the input with it (a kept download so damaged is dropped, as for any damage).
      return Fail(
          absl::StatusCode::kDataLoss, frame_start,
          absl::StrCat("zstd: corrupted frame header: the frame starting at byte ", frame_start,
                       " claims a ", internal::HumanBytes(h.window_size), " window (window log ",
                       need, "), past the largest any zstd writes (window log ",
                       internal::kMaxWindowLog, ")"));
    }
    return Fail(absl::StatusCode::kResourceExhausted, frame_start,
                absl::StrCat("zstd: the frame starting at byte ", frame_start, " needs a ",
                             internal::HumanBytes(h.window_size), " window (window log ", need,
                             "), above the limit of ",
                             internal::HumanBytes(uint64_t{1} << options.window_log_max),
                             " (window log ", options.window_log_max,
                             "); --zstd-window-log-max=", need, " raises the limit"));
  }
  // zstd re-reads the header itself; hand it the bytes gathered so far.
  frame_window = h.window_size;
  frame_content_size = h.content_size;
  frame_out_start = bytes_out;
  state = State::kFrame;
  part = Part::kBlockHeader;
  block_header_len = 0;
  has_checksum = (header[4] & 0x04) != 0;
  part_start = frame_start;
  size_t consumed = 0;
  absl::Status s = RunZstd(header, header_len, sink, &consumed);
  if (!s.ok()) return s;
  if (consumed != header_len || state != State::kFrame) {
    return Fail(absl::StatusCode::kInternal, frame_start,
                "zstd: decoder did not accept a complete frame header");
  }
  part_start = bytes_in;
  return absl::OkStatus();
}

absl::Status ZstdDecoder::Impl::DecodeFrameBytes(const unsigned char*& p, size_t& n, Sink sink) {
  // Each step gives zstd at most one block's bytes, so it hands out at most one block (128 KiB)
  // past out_stop.
  while (n > 0 && state == State::kFrame && bytes_out < out_stop) {
    size_t give = n;
    if (part == Part::kBlockHeader) {
      give = std::min(n, sizeof(block_header) - block_header_len);
      std::memcpy(block_header + block_header_len, p, give);
    } else if (part != Part::kTail) {
      give = static_cast<size_t>(std::min<uint64_t>(n, part_left));
    }
    size_t consumed = 0;
    absl::Status s = RunZstd(p, give, sink, &consumed);
    bytes_in += consumed;
    p += consumed;
    n -= consumed;
    if (!s.ok()) return s;
    if (state != State::kFrame) break;  // zstd saw the frame end
    switch (part) {
      case Part::kBlockHeader:
        block_header_len += give;
        if (block_header_len == sizeof(block_header)) {
          const uint32_t bh = internal::ReadLe(block_header, 3);
          last_block = (bh & 1) != 0;
          const uint32_t type = (bh >> 1) & 3;
          part = Part::kBlockBody;
          part_left = type == 1 ? 1 : bh >> 3;  // an RLE block stores its one byte
          if (part_left == 0) EndBlock();
        }
        break;
      case Part::kBlockBody:
        part_left -= give;
        if (part_left == 0) EndBlock();
        break;
      case Part::kChecksum:
        part_left -= give;
        // zstd ends the frame on the checksum's last byte; if not, it judges what follows.
        if (part_left == 0) part = Part::kTail;
        break;
      case Part::kTail:
        break;
    }
  }
  return absl::OkStatus();
}

void ZstdDecoder::Impl::EndBlock() {
  part_start = bytes_in;
  if (!last_block) {
    part = Part::kBlockHeader;
    block_header_len = 0;
  } else if (has_checksum) {
    part = Part::kChecksum;
    part_left = 4;
  } else {
    part = Part::kTail;  // zstd has ended the frame already, unless the stream is inconsistent
  }
}

absl::Status ZstdDecoder::Impl::RunZstd(const unsigned char* p, size_t n, Sink sink,
                                        size_t* consumed) {
  ZSTD_inBuffer in{p, n, 0};
  for (;;) {
    const size_t pos_before = in.pos;
    ZSTD_outBuffer o{out.get(), out_capacity, 0};
    const size_t r = ZSTD_decompressStream(dctx, &o, &in);
    if (ZSTD_isError(r)) {
      *consumed = pos_before;
      return ZstdError(r, part_start);
    }
    *consumed = in.pos;
    if (o.pos > 0) {
      bytes_out += o.pos;
      absl::Status s = sink(std::string_view(out.get(), o.pos));
      if (!s.ok()) return error = std::move(s);
    }
    if (r == 0) {  // frame complete and fully flushed; zstd stops here, at the frame's end
      // zstd compares a stated content size with the output only after a last block that holds
      // data (libzstd 1.5.4): a header whose size is wrong, over an empty last block, passed.
      const uint64_t produced = bytes_out - frame_out_start;
      if (frame_content_size != internal::FrameHeader::kUnknownSize &&
          produced != frame_content_size) {
        return Fail(absl::StatusCode::kDataLoss, frame_start,
                    absl::StrCat("zstd: corrupted frame header: the frame starting at byte ",
                                 frame_start, " states ", frame_content_size,
                                 " bytes of content, but its blocks hold ", produced));
      }
      EndFrame();
      return absl::OkStatus();
    }
    if (o.pos == o.size) continue;  // zstd may hold more output: flush before anything else
    // All input taken and all output given: zstd needs more input.
    if (in.pos == n) return absl::OkStatus();
    if (in.pos == pos_before && o.pos == 0) {  // never expected; guards against spinning forever
      return Fail(absl::StatusCode::kInternal, part_start, "zstd: decoder made no progress");
    }
  }
}

absl::Status ZstdDecoder::Impl::ZstdError(size_t code, uint64_t offset) {
  const std::string in_frame = absl::StrCat(" in the frame starting at byte ", frame_start);
  switch (ZSTD_getErrorCode(code)) {
    case ZSTD_error_checksum_wrong:
      return Fail(
          absl::StatusCode::kDataLoss, offset,
          absl::StrCat("zstd: content checksum mismatch", in_frame, " (the data is corrupted)"));
    case ZSTD_error_corruption_detected:
      return Fail(absl::StatusCode::kDataLoss, offset,
                  absl::StrCat("zstd: corrupted block", in_frame));
    // No dictionary is ever given, so zstd's "Dictionary is corrupted" can only mean damage or a
    // frame compressed with a dictionary its header does not name (zstd -D --no-dictID); the
    // name alone pointed at a dictionary nobody passed.
    case ZSTD_error_dictionary_corrupted:
      return Fail(absl::StatusCode::kDataLoss, offset,
                  absl::StrCat("zstd: corrupted block", in_frame,
                               ", or a frame compressed with a dictionary its header does not name "
                               "(zstd -D --no-dictID; only frames compressed without a dictionary "
                               "can be decoded)"));
    case ZSTD_error_dictionary_wrong:
      return Fail(
          absl::StatusCode::kInvalidArgument, offset,
          absl::StrCat("zstd: the frame starting at byte ", frame_start,
                       " needs a dictionary; only frames compressed without a dictionary can be "
                       "decoded"));
    case ZSTD_error_frameParameter_windowTooLarge:
      return Fail(
          absl::StatusCode::kResourceExhausted, offset,
          absl::StrCat("zstd: the frame starting at byte ", frame_start,
                       " needs a window above the limit (window log ", options.window_log_max,
                       "); --zstd-window-log-max raises the limit"));
    // Nearly all of a decoder's memory is the frame's window (zstd holds that much of the output),
    // so the message names it and the limit that let it in: a 2 GiB window, allowed by a raised
    // --zstd-window-log-max, is what a user can change.
    case ZSTD_error_memory_allocation:
      return Fail(absl::StatusCode::kResourceExhausted, offset,
                  absl::StrCat("zstd: out of memory for the frame starting at byte ", frame_start,
                               ", whose window of ", internal::HumanBytes(frame_window),
                               " (window log ", internal::WindowLogFor(frame_window),
                               ") the decoder holds in memory; free memory, or refuse such frames "
                               "at once with a lower --zstd-window-log-max (now ",
                               options.window_log_max, ")"));
    // A frame whose blocks hold more than its header declares (a damaged Frame Content Size):
    // zstd's "Destination buffer is too small" read like a fault of the reader's buffers.
    case ZSTD_error_dstSize_tooSmall:
    case ZSTD_error_srcSize_wrong:
      return Fail(absl::StatusCode::kDataLoss, offset,
                  absl::StrCat("zstd: corrupted frame: its blocks hold another size than its "
                               "header declares (",
                               ZSTD_getErrorName(code), ")", in_frame));
    default:
      return Fail(absl::StatusCode::kDataLoss, offset,
                  absl::StrCat("zstd: ", ZSTD_getErrorName(code), in_frame));
  }
}

absl::Status ZstdDecoder::Impl::Finish() {
  if (!error.ok()) return error;
  if (finished) return absl::OkStatus();
  if (bytes_in == 0) {
    return Fail(absl::StatusCode::kInvalidArgument, 0,
                "not a zstd stream: the input is empty (0 bytes)");
  }
  switch (state) {
    case State::kHeader:
      if (header_len == 0) break;
      if (header_len < 4 && !internal::IsMagicPrefix(header, header_len)) {
        if (frame_start == 0) {
          const std::string looks_like = internal::SniffFormat(header, header_len);
          return Fail(
              absl::StatusCode::kInvalidArgument, 0,
              absl::StrCat("not a zstd stream: only ", header_len, " bytes (",
                           internal::HexBytes(header, header_len), ")",
                           looks_like.empty() ? "" : absl::StrCat(", looks like ", looks_like)));
        }
        return Fail(absl::StatusCode::kDataLoss, frame_start,
                    absl::StrCat("zstd: trailing garbage after the last frame: ", header_len,
                                 " stray bytes (", internal::HexBytes(header, header_len), ")"));
      }
      return Fail(absl::StatusCode::kDataLoss, bytes_in,
                  absl::StrCat("zstd: truncated stream: input ends inside the header of the frame "
                               "starting at byte ",
                               frame_start));
    case State::kFrame:
      return Fail(
          absl::StatusCode::kDataLoss, bytes_in,
          absl::StrCat("zstd: truncated stream: input ends inside the frame starting at byte ",
                       frame_start,
                       part == Part::kChecksum
                           ? absl::StrCat(" (in its checksum, at byte ", part_start, ")")
                           : absl::StrCat(" (in the block starting at byte ", part_start, ")")));
    case State::kSkip:
      return Fail(
          absl::StatusCode::kDataLoss, bytes_in,
          absl::StrCat("zstd: truncated stream: input ends inside the skippable frame starting at "
                       "byte ",
                       frame_start, " (", skip_left, " bytes missing)"));
  }
  finished = true;
  return absl::OkStatus();
}

ZstdDecoder::ZstdDecoder(ZstdDecoderOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
ZstdDecoder::~ZstdDecoder() = default;
ZstdDecoder::ZstdDecoder(ZstdDecoder&&) noexcept = default;
ZstdDecoder& ZstdDecoder::operator=(ZstdDecoder&&) noexcept = default;

absl::Status ZstdDecoder::Feed(std::string_view compressed, Sink sink) {
  size_t taken = 0;
  return impl_->Feed(reinterpret_cast<const unsigned char*>(compressed.data()), compressed.size(),
                     sink, UINT64_MAX, &taken);
}

absl::StatusOr<size_t> ZstdDecoder::FeedSome(std::string_view compressed, Sink sink,
                                             uint64_t max_out) {
  size_t taken = 0;
  const uint64_t start = impl_->bytes_out;
  const uint64_t stop =
      max_out > UINT64_MAX - start ? UINT64_MAX : start + std::max<uint64_t>(max_out, 1);
  absl::Status s = impl_->Feed(reinterpret_cast<const unsigned char*>(compressed.data()),
                               compressed.size(), sink, stop, &taken);
  if (!s.ok()) return s;
  return taken;
}

absl::Status ZstdDecoder::Finish() { return impl_->Finish(); }

uint64_t ZstdDecoder::bytes_in() const { return impl_->bytes_in; }
uint64_t ZstdDecoder::bytes_out() const { return impl_->bytes_out; }
uint64_t ZstdDecoder::num_frames() const { return impl_->num_frames; }
const ZstdDecoderOptions& ZstdDecoder::options() const { return impl_->options; }

bool IsDamagedZstdInput(const absl::Status& status) {
  return !status.ok() && status.GetPayload(internal::kDamagedInputPayload).has_value();
}

std::string CompressedFormatOf(std::string_view head) {
  const auto* p = reinterpret_cast<const unsigned char*>(head.data());
  const size_t n = std::min<size_t>(head.size(), 4);
  if (n == 4 && internal::IsValidMagic(internal::ReadLe32(p))) return "zstd";
  std::string format = internal::SniffFormat(p, n);
  if (absl::StartsWith(format, "a legacy zstd")) return "legacy zstd";
  for (const char* compressed : {"gzip", "bzip2", "xz", "lz4", "zip"}) {
    if (format == compressed) return format;
  }
  return "";
}

}  // namespace pileprep
