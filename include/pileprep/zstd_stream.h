// Streaming Zstandard decoder: compressed bytes in, decompressed bytes out, over any chunking.
//
//   ZstdDecoder decoder({.source_name = "00.jsonl.zst"});
//   for (std::string_view chunk : chunks) {
//     PILEPREP_RETURN_IF_ERROR(decoder.Feed(chunk, [&](std::string_view bytes) {
//       return jsonl.Feed(bytes, on_document);  // a JsonlReader; bytes valid only during the call
//     }));
//   }
//   PILEPREP_RETURN_IF_ERROR(decoder.Finish());   // the stream must end on a frame boundary
//                                                  // (so a stream cut exactly between two frames
//                                                  // cannot be told from a whole one)
//   PILEPREP_RETURN_IF_ERROR(jsonl.Finish(on_document));  // a last line without '\n' counts too
//
// Accepts what `zstd -d` accepts: one or more frames back to back (a frame may end anywhere, also
// in the middle of a line or a UTF-8 character), skippable frames (magic 0x184D2A50..0x184D2A5F)
// anywhere, content checksums (verified when present). A frame whose header states a content size
// its blocks do not hold is damage (DataLoss), also where its last block is empty, which libzstd
// (1.5.4), and so `zstd -d` for a frame it streams, lets pass. Output is identical whatever the
// chunking of the input, down to one byte per Feed; the sink sees it in chunks of at most
// ZSTD_DStreamOutSize() (~128 KiB).
//
// Options (every knob, with its default):
//
//   | field          | default | meaning                                                       |
//   |----------------|---------|---------------------------------------------------------------|
//   | source_name    | ""      | file name put at the start of every error message             |
//   | window_log_max | 27      | frames needing a window above 2^window_log_max bytes are      |
//   |                |         | refused; 10..31                                               |
//
// Errors. Every message of a decoding error reads `<source_name>: byte <N>: <cause>`, N being an
// offset into the compressed stream, the same whatever the chunking. For damage inside a frame, N
// is the start of the block (or of the content checksum) that fails to decode, and the message also
// names the byte where that frame starts; for damage in a frame header, N is the frame's start (or
// its descriptor byte, frame start + 4, for a reserved bit set); for a truncated stream N is its
// length.
//   InvalidArgument     not a zstd stream at byte 0, and the cause says what it looks like instead
//                       ("not a zstd stream: looks like plain JSON lines", gzip, bzip2, xz, lz4,
//                       zip, legacy zstd v0.x, plain text); an empty (0-byte) input; a frame
//                       that needs a dictionary (its dictionary ID is named); window_log_max
//                       outside 10..31.
//   ResourceExhausted   a frame needs a window above 2^window_log_max (up to window log 31):
//                       the message names the window log the frame needs and says that
//                       --zstd-window-log-max raises the limit; zstd out of memory.
//   DataLoss            truncated stream (ends inside a frame or a frame header); trailing
//                       garbage after the last frame (bad magic at byte N); corrupted frame
//                       header (one that claims a window above log 31, which no zstd writes, or
//                       a content size its blocks do not hold, included) or block; content
//                       checksum mismatch.
//   FailedPrecondition  Feed after a successful Finish (a caller's error; no source or offset).
//   (anything)          an error returned by the sink, passed through unchanged.
// After any error the decoder stays failed: Feed and Finish return that same status again.
//
// Lifetime and threads: the decoder owns its zstd context and a ~128 KiB output buffer; it holds no
// pointer into a fed chunk after Feed returns. It is not thread-safe: one decoder per stream, used
// by one thread at a time. Movable, not copyable.
#ifndef PILEPREP_ZSTD_STREAM_H_
#define PILEPREP_ZSTD_STREAM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pileprep {

struct ZstdDecoderOptions {
  // File name used at the start of every error message.
  std::string source_name;
  // Frames needing a window larger than 2^window_log_max bytes are refused (zstd's
  // ZSTD_d_windowLogMax; the decoder may allocate up to that much per stream). zstd's own default
  // is 27. Range 10..31.
  int window_log_max = 27;
};

class ZstdDecoder {
 public:
  // Receives decompressed bytes; the view is valid only during the call. A non-OK status stops
  // decoding and is returned from Feed unchanged.
  using Sink = absl::FunctionRef<absl::Status(std::string_view)>;

  explicit ZstdDecoder(ZstdDecoderOptions options = {});
  ~ZstdDecoder();
  // A moved-from decoder may only be destroyed or assigned to.
  ZstdDecoder(ZstdDecoder&&) noexcept;
  ZstdDecoder& operator=(ZstdDecoder&&) noexcept;
  ZstdDecoder(const ZstdDecoder&) = delete;
  ZstdDecoder& operator=(const ZstdDecoder&) = delete;

  // Decodes `compressed` (any number of bytes, frame boundaries anywhere) and hands everything that
  // can be decoded so far to `sink`. Sink errors propagate unchanged.
  absl::Status Feed(std::string_view compressed, Sink sink);

  // As Feed, but stops once it has handed `max_out` bytes or more to `sink` in this call (at most
  // one block, 128 KiB, more; 0 counts as 1), and returns how many bytes of `compressed` it took;
  // the rest is the caller's to give again. A caller's memory is then bounded by what it asks for,
  // whatever the compression ratio: a block of one repeated byte is 4 bytes for 128 KiB, and 64 KiB
  // of such a stream is 2 GB.
  absl::StatusOr<size_t> FeedSome(std::string_view compressed, Sink sink, uint64_t max_out);

  // Declares the end of input. Errors if the input was empty or ends inside a frame (or frame
  // header); OK once every frame has ended (a stream of only skippable frames decodes to nothing
  // and is OK).
  absl::Status Finish();

  uint64_t bytes_in() const;    // compressed bytes consumed so far
  uint64_t bytes_out() const;   // decompressed bytes handed to the sink so far
  uint64_t num_frames() const;  // frames completed so far, skippable frames included

  const ZstdDecoderOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// True for a ZstdDecoder error that says its input bytes are damaged or not zstd at all (a corrupt
// or truncated stream, trailing garbage, a bad checksum, no zstd magic), as opposed to a limit, a
// dictionary, or memory: what a kept copy of the input should not be read again for.
bool IsDamagedZstdInput(const absl::Status& status);

// The compressed format the first bytes of an input (`head`, up to 4 are looked at) start with:
// "zstd" (a zstd or skippable frame), "legacy zstd" (a v0.1-v0.7 frame, which the decoder refuses),
// "gzip", "bzip2", "xz", "lz4", "zip", or "" for anything else (plain text, or too few bytes to
// tell). For an input named as plain JSON lines: each of these would be read as lines of binary,
// every one a bad record, where a word can say what it is.
std::string CompressedFormatOf(std::string_view head);

}  // namespace pileprep

#endif  // PILEPREP_ZSTD_STREAM_H_
