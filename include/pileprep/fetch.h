// Streaming download of one shard over HTTP(S) as a ByteSource: bytes flow from the socket into the
// pipeline with no temporary file, through a bounded queue.
//
//   FetchOptions options;                          // every knob and its default
//   options.headers = {"Authorization: Bearer ..."};
//   PILEPREP_ASSIGN_OR_RETURN(std::unique_ptr<HttpSource> source,
//                             OpenHttpSource("https://host/train/00.jsonl.zst", options));
//   absl::Status s = RunPipeline(*source, InputFormat::kZstd, tokenizer, prefixes, popts, &stats);
//   if (IsRestartRequired(s)) { /* throw the outputs away and run the shard again from byte 0 */ }
//
// Faults handled inside the source (the consumer sees one unbroken byte stream):
//   - connection errors, timeouts (no byte for `connect_timeout_s`; slower than `low_speed_limit`
//     bytes/s for `low_speed_time_s`), HTTP 5xx, 408 and 429: retried with exponential backoff
//     and jitter; each honours Retry-After (up to 10x backoff_max_s). The download gives up once
//     `max_retries` retries in a row have each delivered no byte (0: no retry).
//   - a connection dropped mid-body: the download resumes with `Range: bytes=N-` where N is the
//     exact number of bytes already delivered, guarded by `If-Range` with the first answer's strong
//     ETag (else its Last-Modified); the 206 answer's own validator must match the first answer's
//     too (one with no validator of a kind the first answer had is taken as a change), so a changed
//     file is never spliced onto the old one, even by a server that ignores If-Range. A file of
//     unknown length (no Content-Length) whose connection fails after its last byte is complete
//     when the resume is answered 416 with that size.
// Faults the source reports (Read returns the error):
//   - the file may have changed: a ranged request answered with the whole file (new ETag, or no
//     validator), or with a 206 of another ETag or Last-Modified or with no validator to compare,
//     or a resume with no strong ETag or Last-Modified in the first answer to prove the file
//     unchanged, or a resume answered 416 without the file's size: an Aborted status for which
//     IsRestartRequired() is true. Bytes already delivered are stale; the caller must discard
//     everything made from them and open the source again. (When the server merely ignores Range
//     and the strong ETag is unchanged, the source skips the bytes already delivered itself and no
//     restart is needed.)
//   - HTTP 404 and other 4xx: NotFound / PermissionDenied / FailedPrecondition at once, naming
//     the URL and the status line, with a body or without; no retry.
//   - fewer bytes than Content-Length: resumed as any cut answer is (Unavailable once retries
//     run out); every byte of the file arrived and a 416 with the same strong ETag stating more
//     (a server or proxy that misstates the length), or more bytes than Content-Length or
//     Content-Range's total: DataLoss. Bytes past a 200's Content-Length are not read (HTTP/1.1
//     framing; libcurl drops them).
//   - TLS verification failures: Unavailable naming the cause (no retry).
//   - retries exhausted: Unavailable with the last cause.
// TLS certificates are verified unless `insecure`; proxies come from the usual environment
// variables (http_proxy, https_proxy, all_proxy, no_proxy), as libcurl reads them, and a libcurl
// error (not an HTTP status) names the proxy they set, without user:password@. Header values are
// sent, never put in a message; URLs in messages have no user:password@ and no ?query.
//
// Thread model: OpenHttpSource starts one download thread per source. Read() is called from one
// thread at a time. The queue holds at most about `queue_bytes` (the socket is paused while it is
// full), so opening the next shard's source early prefetches at most that much. Destroying the
// source cancels the download and joins the thread. A FetchObserver is called on the download
// thread (but see OnKeepDropped).
#ifndef PILEPREP_FETCH_H_
#define PILEPREP_FETCH_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pileprep/pipeline.h"

namespace pileprep {

struct FetchOptions {
  int max_retries = 10;  // retries in a row, each delivering no byte, before giving up
  double backoff_initial_s = 1.0;       // first retry delay; doubles per consecutive failure
  double backoff_max_s = 60.0;          // cap of the delay (and of an honoured Retry-After: 10x this)
  long connect_timeout_s = 30;          // TCP + TLS connect
  long low_speed_limit = 1024;          // bytes/s; a transfer slower than this ...
  long low_speed_time_s = 60;           // ... for this many seconds is dropped and resumed
  size_t queue_bytes = size_t{16} << 20;  // bytes buffered between the socket and the consumer
  std::vector<std::string> headers;     // extra request headers, "Name: value" (values never logged)
  bool insecure = false;                // skip TLS certificate verification (testing only)
  std::string ca_file;                  // CA bundle; empty: the system's
  std::string user_agent = "pileprep";
  // When set, every delivered byte is also written to `cache_path + ".pileprep-tmp"`, which is
  // fsynced and renamed to `cache_path` once the download completes with the expected length. The
  // caller keeps two downloads into one cache_path apart (the CLI locks
  // `cache_path + ".pileprep-lock"`); a temporary already there is a killed download's and is
  // replaced. A copy that cannot be written, synced or renamed (a full or read-only directory) is
  // given up, its temporary removed, and the download goes on (FetchStats::keep_error,
  // FetchObserver::OnKeepDropped): only the copy is lost.
  std::string cache_path;
  // When it becomes true, a Read() waiting for bytes returns Cancelled within ~0.1 s (the CLI sets it
  // on SIGINT/SIGTERM), so a stalled download cannot delay shutdown. Null: never cancelled.
  const std::atomic<bool>* cancel = nullptr;
};

// What happened so far; a consistent snapshot.
struct FetchStats {
  uint64_t bytes_delivered = 0;   // body bytes put into the queue (the resume offset)
  int64_t total_bytes = -1;       // Content-Length of the whole file when known
  int requests = 0;               // transfers started (the redirects each follows not counted)
  int retries = 0;                // requests after a failure (resumes included)
  int resumes = 0;                // ranged requests answered 206 from a non-zero offset
  int skipped_prefixes = 0;       // 200 answers to a ranged request whose delivered prefix was skipped
  uint64_t bytes_skipped = 0;     // body bytes received again in those answers and dropped
  std::string last_error;         // the cause of the last attempt retried, "" if none (a failure
                                  // that ends the download is Read()'s status)
  std::string keep_error;         // why the copy for cache_path was given up, "" if it was not
};

// Events for logs. Called on the download thread (OnKeepDropped also from OpenHttpSource, on the
// caller's, when the copy's temporary cannot be created); must be cheap and thread-safe, and must
// not throw: an exception from the download thread ends the process (std::terminate).
class FetchObserver {
 public:
  virtual ~FetchObserver() = default;
  // A failed attempt will be retried after `delay_s` seconds; `cause` names the status or curl error.
  virtual void OnRetry(const std::string& /*url*/, int /*attempt*/, double /*delay_s*/,
                       uint64_t /*resume_from*/, const std::string& /*cause*/) {}
  // The copy for FetchOptions::cache_path cannot be made (`cause`: the file and errno); the
  // download goes on without it.
  virtual void OnKeepDropped(const std::string& /*url*/, const std::string& /*cause*/) {}
};

class HttpSource : public ByteSource {
 public:
  ~HttpSource() override = default;
  virtual FetchStats stats() const = 0;
};

// Starts downloading `url`. Fails at once (InvalidArgument) for a URL that is not http:// or
// https://, for a header that is not "Name: value" and for a negative count, time or speed in
// `options`; anything else, a URL that libcurl then refuses included, surfaces from Read().
// `observer` (may be null) must outlive the source.
absl::StatusOr<std::unique_ptr<HttpSource>> OpenHttpSource(const std::string& url,
                                                           const FetchOptions& options,
                                                           FetchObserver* observer = nullptr);

// True for the status HttpSource returns when the shard must be processed again from byte 0.
bool IsRestartRequired(const absl::Status& status);

// `url` without user:password@ and without ?query / #fragment, for messages.
std::string RedactUrl(const std::string& url);

// Parses one "Name: value" header flag; InvalidArgument (without the value) when malformed.
absl::Status CheckHeader(const std::string& header);

}  // namespace pileprep

#endif  // PILEPREP_FETCH_H_
