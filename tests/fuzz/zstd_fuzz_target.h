// The zstd stage's fuzz target (ZstdDecoder), shared by the libFuzzer binary
// (tests/fuzz/zstd_fuzzer.cc) and the corpus replay gtest (tests/unit/fuzz_corpus_replay_test.cc).
//
// Input layout: byte 0 picks the window limit (10 + b % 22, i.e. 10..31), byte 1 seeds the
// chunking, the rest is the compressed stream. Oracles beyond "no crash, no out-of-bounds access"
// (ASan):
//   - the stream is fed once whole and once cut into pseudo-random chunks (1 byte to 4 KiB);
//     both must agree on success, and on success give the same bytes in the same order;
//   - bytes_in/bytes_out account exactly for what was fed and produced on success;
//   - what the decoder accepts, zstd's own streaming decoder, given the whole input at once,
//     accepts too, with the same bytes (the decoder hands zstd one block at a time, which once let
//     a frame with a wrong content size through).
// Output is capped (a decompression bomb would only slow the fuzzer down): past kMaxOutput the
// sink stops the decoder, and the comparison is skipped.
#ifndef PILEPREP_TESTS_FUZZ_ZSTD_FUZZ_TARGET_H_
#define PILEPREP_TESTS_FUZZ_ZSTD_FUZZ_TARGET_H_

#include <zstd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "pileprep/zstd_stream.h"

namespace pileprep::fuzz {

inline constexpr size_t kZstdFuzzMaxOutput = size_t{64} << 20;

struct ZstdFuzzResult {
  bool ok = false;
  bool capped = false;
  std::string out;
  uint64_t bytes_in = 0, bytes_out = 0;
};

inline ZstdFuzzResult DecodeForFuzz(std::string_view in, int window_log_max, uint32_t chunk_seed,
                                    bool chunked) {
  ZstdDecoderOptions options;
  options.source_name = "fuzz.jsonl.zst";
  options.window_log_max = window_log_max;
  ZstdDecoder decoder(options);
  ZstdFuzzResult r;
  auto sink = [&](std::string_view bytes) -> absl::Status {
    if (r.out.size() + bytes.size() > kZstdFuzzMaxOutput) {
      r.capped = true;
      return absl::ResourceExhaustedError("fuzz output cap");
    }
    r.out.append(bytes);
    return absl::OkStatus();
  };
  uint32_t state = chunk_seed * 2654435761u + 1;
  size_t pos = 0;
  absl::Status s;
  while (s.ok() && pos < in.size()) {
    size_t n = in.size() - pos;
    if (chunked) {
      state = state * 1664525u + 1013904223u;
      // Mostly tiny chunks (frame headers and blocks cut everywhere), sometimes larger ones.
      const uint32_t pick = state >> 24;
      const size_t want = pick < 160 ? 1 + (pick & 7) : 1 + ((state >> 8) & 4095);
      n = want < n ? want : n;
    }
    s = decoder.Feed(in.substr(pos, n), sink);
    pos += n;
  }
  if (s.ok()) s = decoder.Finish();
  r.ok = s.ok();
  if (!s.ok() && s.message().empty()) std::abort();  // every error explains itself
  r.bytes_in = decoder.bytes_in();
  r.bytes_out = decoder.bytes_out();
  return r;
}

// zstd's streaming decoder over all of `in` at once: true with *out its output when every frame
// decodes and the input ends at a frame's end; false past `limit` bytes of output.
inline bool ReferenceZstdDecode(std::string_view in, size_t limit, std::string* out) {
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  if (dctx == nullptr) std::abort();
  ZSTD_DCtx_setParameter(dctx, ZSTD_d_windowLogMax, 31);
  std::string buf(ZSTD_DStreamOutSize(), '\0');
  ZSTD_inBuffer ib{in.data(), in.size(), 0};
  bool ok = false;
  while (true) {
    ZSTD_outBuffer ob{buf.data(), buf.size(), 0};
    const size_t ret = ZSTD_decompressStream(dctx, &ob, &ib);
    if (ZSTD_isError(ret)) break;
    out->append(buf.data(), ob.pos);
    if (out->size() > limit) break;
    // Done: all input taken and the last frame ended and flushed. Input left, or output still to
    // flush: go on. All taken mid-frame with nothing more to give: truncated.
    if (ib.pos == ib.size && (ret == 0 || ob.pos == 0)) {
      ok = ret == 0;
      break;
    }
  }
  ZSTD_freeDCtx(dctx);
  return ok;
}

inline int RunZstdFuzzInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int window_log_max = 10 + data[0] % 22;
  const uint32_t seed = data[1];
  const std::string_view in(reinterpret_cast<const char*>(data) + 2, size - 2);
  const ZstdFuzzResult whole = DecodeForFuzz(in, window_log_max, seed, false);
  const ZstdFuzzResult pieces = DecodeForFuzz(in, window_log_max, seed, true);
  if (whole.capped || pieces.capped) return 0;
  if (whole.ok != pieces.ok) std::abort();  // the verdict must not depend on the chunking
  if (whole.ok) {
    if (whole.out != pieces.out) std::abort();
    if (whole.bytes_in != in.size() || pieces.bytes_in != in.size()) std::abort();
    if (whole.bytes_out != whole.out.size() || pieces.bytes_out != pieces.out.size()) std::abort();
    std::string reference;
    if (!ReferenceZstdDecode(in, whole.out.size(), &reference)) std::abort();  // zstd refuses it
    if (reference != whole.out) std::abort();
  }
  return 0;
}

}  // namespace pileprep::fuzz

#endif  // PILEPREP_TESTS_FUZZ_ZSTD_FUZZ_TARGET_H_
