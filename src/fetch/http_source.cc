#include <curl/curl.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "fetch/url.h"
#include "pileprep/fetch.h"

namespace pileprep {
namespace {

constexpr char kRestartPayload[] = "type.pileprep/fetch.restart";

absl::Status RestartStatus(const std::string& message) {
  absl::Status s = absl::AbortedError(message);
  s.SetPayload(kRestartPayload, absl::Cord("restart"));
  return s;
}

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == '\n' || s.back() == ' ' || s.back() == '\t')) {
    s.pop_back();
  }
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

// A server's text as it may be printed (its status line, an ETag or Last-Modified in a message):
// control bytes (no valid header holds them, but a reason phrase of "\x1b[31m..." reached the
// terminal raw) become '?', a tab a space, and so does every byte past ASCII (a C1 control, 0x9B,
// is a CSI to some terminals; header values are ASCII in practice). Values are compared raw.
std::string Printable(std::string s) {
  for (char& c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u == '\t') {
      c = ' ';
    } else if (u < 0x20 || u >= 0x7f) {
      c = '?';
    }
  }
  return s;
}

// Curl errors that a new attempt may cure: the network, the server going away, timeouts.
bool IsTransientCurlError(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_BAD_CONTENT_ENCODING:
    case CURLE_AGAIN:
      return true;
    default:
      return false;
  }
}

// Curl errors whose CURLOPT_ERRORBUFFER text says more than curl_easy_strerror (which host and port
// failed, why a certificate was rejected) and holds only host names, ports, file names and TLS
// reasons. Other codes keep strerror: some of their texts quote a whole proxy string, credentials
// and all.
bool HasSafeDetail(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:  // also CURLE_SSL_CACERT, its alias since curl 7.62
    case CURLE_SSL_CACERT_BADFILE:
      return true;
    default:
      return false;
  }
}

// The proxy libcurl takes from the environment for `url`, for messages: "via the proxy
// http://host:port from http_proxy", or "" when none is set. libcurl's rules: <scheme>_proxy, then
// its uppercase name except HTTP_PROXY (a CGI request can set that one through a "Proxy:" header),
// then all_proxy, ALL_PROXY; an empty value means no proxy. no_proxy is not matched here (libcurl's
// own matching has CIDR ranges and more), only mentioned.
std::string EnvProxyNote(const std::string& url) {
  const bool https = absl::StartsWith(absl::AsciiStrToLower(url.substr(0, 8)), "https://");
  std::string var = https ? "https_proxy" : "http_proxy";
  const char* value = std::getenv(var.c_str());
  if (value == nullptr && https) value = std::getenv((var = "HTTPS_PROXY").c_str());
  if (value == nullptr) value = std::getenv((var = "all_proxy").c_str());
  if (value == nullptr) value = std::getenv((var = "ALL_PROXY").c_str());
  if (value == nullptr || *value == '\0') return "";
  // Only scheme://host:port is shown: user:password@ and any path or query (which can hold a
  // token) are cut.
  std::string proxy = value;
  const size_t scheme = proxy.find("://");
  const size_t start = scheme == std::string::npos ? 0 : scheme + 3;
  const size_t at = proxy.rfind('@');
  if (at != std::string::npos && at >= start) proxy.erase(start, at + 1 - start);
  const size_t rest = proxy.find_first_of("/?#", start);
  if (rest != std::string::npos) proxy.resize(rest);
  std::string note = absl::StrCat("via the proxy ", proxy, " from ", var);
  const char* no_proxy = std::getenv("no_proxy");
  if (no_proxy == nullptr) no_proxy = std::getenv("NO_PROXY");
  if (no_proxy != nullptr && *no_proxy != '\0') {
    absl::StrAppend(&note, ", unless no_proxy exempts the host");
  }
  return note;
}

// Everything one request learned from the headers of its final response.
struct Response {
  long code = 0;
  std::string status_line;
  std::string etag;
  std::string last_modified;
  int64_t content_length = -1;
  int64_t range_start = -1, range_end = -1, range_total = -1;  // from Content-Range
  std::string content_encoding;
  bool checked = false;                        // the first body byte has been judged
};

class HttpSourceImpl final : public HttpSource {
 public:
  HttpSourceImpl(std::string url, FetchOptions options, FetchObserver* observer)
      : url_(std::move(url)), name_(RedactUrl(url_)), proxy_note_(EnvProxyNote(url_)),
        options_(std::move(options)), observer_(observer), rng_(std::random_device{}()) {
    multi_ = curl_multi_init();
    easy_ = curl_easy_init();
  }

  ~HttpSourceImpl() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancel_ = true;
    }
    cv_.notify_all();
    if (multi_ != nullptr) curl_multi_wakeup(multi_);
    if (thread_.joinable()) thread_.join();
    if (easy_ != nullptr) curl_easy_cleanup(easy_);
    if (multi_ != nullptr) curl_multi_cleanup(multi_);
    if (cache_fd_ >= 0) {
      ::close(cache_fd_);
      ::unlink(CacheTemp().c_str());
    }
  }

  absl::Status Start() {
    if (multi_ == nullptr || easy_ == nullptr) {
      return absl::InternalError(absl::StrCat(name_, ": cannot initialise libcurl"));
    }
    if (!options_.cache_path.empty()) {
      // The caller keeps two downloads into one cache_path apart (FetchOptions::cache_path), so
      // a temporary here is a killed download's: removed first, so that one another user left in
      // a shared directory is replaced rather than refused (EACCES on opening it for writing).
      ::unlink(CacheTemp().c_str());
      // O_EXCL | O_NOFOLLOW: in a directory other users can write, a symlink planted between
      // the unlink and the open would otherwise be followed and its target truncated.
      cache_fd_ =
          ::open(CacheTemp().c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
      if (cache_fd_ < 0)
        DropCache(absl::StrCat(CacheTemp(), ": cannot create: ", std::strerror(errno)));
    }
    try {
      thread_ = std::thread([this] { Run(); });
    } catch (const std::system_error& e) {
      // EAGAIN under a cgroup's pids.max or ulimit -u: this download fails, the process goes on.
      return absl::ResourceExhaustedError(
          absl::StrCat(name_, ": cannot start the download's thread: ", e.what()));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<size_t> Read(char* buffer, size_t capacity) override {
    std::unique_lock<std::mutex> lock(mu_);
    const auto ready = [&] { return !chunks_.empty() || finished_ || interrupted_; };
    if (options_.cancel == nullptr) {
      cv_.wait(lock, ready);
    } else {
      // Poll the external flag: a signal handler cannot notify a condition variable. Asked on
      // every Read, not only when one waits in vain: a download that keeps delivering would
      // otherwise run to its end after the flag was set (RunPipeline asks it too, but an
      // embedder reading the source directly may not).
      const auto cancelled = [&] { return options_.cancel->load(std::memory_order_relaxed); };
      while (!cancelled() && !cv_.wait_for(lock, std::chrono::milliseconds(100), ready)) {
      }
      if (cancelled()) return absl::CancelledError(absl::StrCat(name_, ": cancelled"));
    }
    if (interrupted_) {
      return absl::CancelledError(absl::StrCat(name_, ": interrupted (the input failed)"));
    }
    if (!error_.ok() && (chunks_.empty() || IsRestartRequired(error_))) return error_;
    if (chunks_.empty()) return size_t{0};
    size_t copied = 0;
    while (copied < capacity && !chunks_.empty()) {
      std::string& front = chunks_.front();
      const size_t n = std::min(capacity - copied, front.size() - front_offset_);
      std::memcpy(buffer + copied, front.data() + front_offset_, n);
      copied += n;
      front_offset_ += n;
      if (front_offset_ == front.size()) {
        chunks_.pop_front();
        front_offset_ = 0;
      }
    }
    queued_bytes_ -= copied;
    // The download thread polls with a timeout, so a missed wakeup only costs latency; deciding under
    // the lock keeps the queue's state out of a data race. curl_multi_wakeup is the one libcurl call
    // that may come from another thread.
    const bool wake = paused_ && queued_bytes_ < options_.queue_bytes;
    lock.unlock();
    if (wake) curl_multi_wakeup(multi_);
    return copied;
  }

  void Interrupt() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      interrupted_ = true;
    }
    cv_.notify_all();
  }

  int64_t size_hint() const override { return total_.load(std::memory_order_relaxed); }
  const std::string& name() const override { return name_; }

  FetchStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    FetchStats s = stats_;
    s.total_bytes = total_.load();
    return s;
  }

 private:
  std::string CacheTemp() const { return options_.cache_path + ".pileprep-tmp"; }

  static size_t HeaderCallback(char* data, size_t size, size_t count, void* self) {
    auto* me = static_cast<HttpSourceImpl*>(self);
    const size_t n = size * count;
    std::string line = Trim(std::string(data, n));
    Response& r = me->response_;
    if (absl::StartsWith(line, "HTTP/")) {
      // A new response (after a redirect or a 100 Continue): forget the previous one's headers.
      r = Response{};
      r.status_line = Printable(line);  // only ever printed
      return n;
    }
    const size_t colon = line.find(':');
    if (colon == std::string::npos) return n;
    const std::string key = absl::AsciiStrToLower(line.substr(0, colon));
    const std::string value = Trim(line.substr(colon + 1));
    if (key == "etag") {
      r.etag = value;
    } else if (key == "last-modified") {
      r.last_modified = value;
    } else if (key == "content-encoding") {
      r.content_encoding = absl::AsciiStrToLower(value);
    } else if (key == "content-length") {
      int64_t v;
      if (absl::SimpleAtoi(value, &v)) r.content_length = v;
    } else if (key == "content-range") {
      // "bytes START-END/TOTAL" (TOTAL may be '*').
      long long a = -1, b = -1, t = -1;
      if (std::sscanf(value.c_str(), "bytes %lld-%lld/%lld", &a, &b, &t) >= 2) {
        r.range_start = a;
        r.range_end = b;
        r.range_total = t;
      } else if (std::sscanf(value.c_str(), "bytes */%lld", &t) == 1) {  // a 416's: the size
        r.range_total = t;
      }
    }
    return n;
  }

  static size_t WriteCallback(char* data, size_t size, size_t count, void* self) {
    return static_cast<HttpSourceImpl*>(self)->OnBody(data, size * count);
  }

  // Judges the response at its first body byte: deliver, skip a prefix, restart, or fail.
  // The first answer's ETag if it is strong, else "": a weak ETag vouches for meaning, not bytes.
  const std::string& StrongEtag() const {
    static const std::string kNone;
    return absl::StartsWith(etag_, "W/") ? kNone : etag_;
  }

  // Why answer `r` is not of the file the first answer began, or "" if nothing shows a change.
  // The validator If-Range carried is the one compared: the strong ETag when there is one
  // (mirrors behind one name may serve the same bytes with other file times), else
  // Last-Modified; Last-Modified also when `r` has no ETag (servers that leave it out of ranges).
  // With `unproven_is_change`, an answer that has no validator to compare with the first
  // answer's is a change too: a server that ignores If-Range and sends no ETag or Last-Modified
  // with its 206 would otherwise splice another file of the same size onto this one's head.
  std::string ValidatorChange(const Response& r, bool unproven_is_change) const {
    if (!StrongEtag().empty() && !r.etag.empty()) {
      if (r.etag == StrongEtag()) return "";
      return absl::StrCat("the file changed: ETag ", Printable(etag_), ", now ", Printable(r.etag));
    }
    if (!last_modified_.empty() && !r.last_modified.empty()) {
      if (r.last_modified == last_modified_) return "";
      return absl::StrCat("the file changed: Last-Modified ", Printable(last_modified_), ", now ",
                          Printable(r.last_modified));
    }
    if (!unproven_is_change) return "";
    return absl::StrCat("the first answer had ",
                        StrongEtag().empty()
                            ? absl::StrCat("Last-Modified ", Printable(last_modified_))
                            : absl::StrCat("ETag ", Printable(etag_)),
                        ", this one no ", StrongEtag().empty() ? "Last-Modified" : "ETag",
                        " to prove the file unchanged");
  }

  // The host (and port, if given) the last transfer was redirected to, when not the URL's own;
  // else "".
  std::string RedirectedToAnotherHost() const {
    char* effective = nullptr;
    if (Redirects() == 0 ||
        curl_easy_getinfo(easy_, CURLINFO_EFFECTIVE_URL, &effective) != CURLE_OK ||
        effective == nullptr) {
      return "";
    }
    auto host_of = [](const std::string& url) {
      std::string out;
      CURLU* u = curl_url();
      char* host = nullptr;
      char* port = nullptr;
      if (u != nullptr && curl_url_set(u, CURLUPART_URL, url.c_str(), 0) == CURLUE_OK &&
          curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
        out = host;
        if (curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
          absl::StrAppend(&out, ":", port);
        }
      }
      curl_free(host);
      curl_free(port);
      curl_url_cleanup(u);
      return out;
    };
    const std::string to = host_of(effective);
    return !to.empty() && to != host_of(url_) ? Printable(to) : "";
  }

  // One with a value: libcurl sends no header for "Authorization:" with nothing after it (a
  // script's --header "Authorization: $TOKEN" with TOKEN unset), so none was refused.
  bool HasAuthorizationHeader() const {
    for (const std::string& h : options_.headers) {
      if (absl::StartsWithIgnoreCase(h, "authorization:") &&
          !absl::StripAsciiWhitespace(absl::string_view(h).substr(14)).empty()) {
        return true;
      }
    }
    return false;
  }

  // How many redirects the last transfer followed.
  long Redirects() const {
    long n = 0;
    return curl_easy_getinfo(easy_, CURLINFO_REDIRECT_COUNT, &n) == CURLE_OK ? n : 0;
  }

  // "HTTP/1.1 404 Not Found" -> "HTTP 404 Not Found", cut to a reason's length.
  static std::string StatusLine(const Response& r) {
    std::string line = r.status_line.empty() ? absl::StrCat("HTTP ", r.code) : r.status_line;
    if (line.size() > 200) line = absl::StrCat(line.substr(0, 200), "...");  // a reason, not a page
    if (absl::StartsWith(line, "HTTP/")) {
      const size_t space = line.find(' ');
      line = absl::StrCat("HTTP ", space == std::string::npos ? line : line.substr(space + 1));
    }
    return line;
  }

  bool CheckResponse() {
    Response& r = response_;
    r.checked = true;
    curl_easy_getinfo(easy_, CURLINFO_RESPONSE_CODE, &r.code);
    if (r.code < 200 || r.code >= 300) return false;  // judged after the transfer
    if (r.code != 200 && r.code != 203 && r.code != 206) {
      // 204 No Content, 202 Accepted, 205 Reset Content, 207 Multi-Status...: a success that does
      // not carry the file's bytes (a URL of an API, or a server still preparing the file). Taken
      // for the file, a 204 was an empty shard ("the input is empty").
      // To a resumed request the URL was right a moment ago: say so, as for a 404.
      abort_status_ = absl::FailedPreconditionError(
          absl::StrCat(name_, ": the server answered ", StatusLine(r),
                       ", which does not carry the file (a file comes as 200 or 206)",
                       delivered_ > 0 ? absl::StrCat(" to a resumed request, after ", delivered_,
                                                     " bytes of the file had arrived")
                                      : ": is the URL the file's own?"));
      return false;
    }
    const uint64_t offset = attempt_offset_;
    // Asked for the file's own bytes (Accept-Encoding: identity), a server answered in a content
    // coding: its bytes are not the file's. Spliced after a resume they failed the zstd decoder
    // at an offset of its own, blaming the file; a whole answer in gzip failed as "not a zstd
    // stream". A coding of zstd is a .zst served as what it is (a server's type map, as Apache's
    // AddEncoding labels .gz files gzip): its bytes are the file's.
    // The header is a list (RFC 9110), applied in order; "none" is libcurl's other name for
    // identity.
    bool coded = false;
    for (absl::string_view coding : absl::StrSplit(r.content_encoding, ',')) {
      coding = absl::StripAsciiWhitespace(coding);
      coded |= !coding.empty() && coding != "identity" && coding != "none" && coding != "zstd";
    }
    if (coded) {
      abort_status_ = absl::FailedPreconditionError(absl::StrCat(
          name_, ": the server answered in a content coding (Content-Encoding: ",
          Printable(r.content_encoding), ")",
          accept_encoding_named_ ? " that the request's Accept-Encoding (--header) allowed"
                                 : " though asked for the file's own bytes (Accept-Encoding: "
                                   "identity)",
          offset > 0 ? absl::StrCat(", to a request for bytes from ", offset) : "",
          ": its bytes are not the file's; fetch the file from a server or proxy that serves it "
          "as it is"));
      return false;
    }
    if (r.code == 206) {
      if (r.range_start < 0) {
        abort_status_ = RestartStatus(absl::StrCat(
            name_, ": asked for bytes from ", offset,
            ", the server sent a part (206) without a readable Content-Range; restarting the "
            "shard"));
        return false;
      }
      if (static_cast<uint64_t>(r.range_start) != offset) {
        abort_status_ = RestartStatus(absl::StrCat(
            name_, ": asked for bytes from ", offset, ", the server sent a range starting at ",
            r.range_start, "; restarting the shard"));
        return false;
      }
      if (r.range_end < r.range_start) {
        // "bytes 0--1/*", or a range that ends before it starts: not a part of any file, and
        // where its end is unreadable nothing says where the part stops.
        abort_status_ = RestartStatus(absl::StrCat(name_, ": the server sent a range from byte ",
                                                   r.range_start, " to ", r.range_end,
                                                   ", which is none; restarting the shard"));
        return false;
      }
      const int64_t total = total_.load();
      if (r.range_total >= 0 && total >= 0 && r.range_total != total) {
        abort_status_ = RestartStatus(absl::StrCat(
            name_, ": the file changed size from ", total, " to ", r.range_total,
            " bytes between requests; restarting the shard"));
        return false;
      }
      if (offset == 0) {
        // A range of a request that asked for none (a server or cache that answers in parts, or
        // a 206 of the whole file): a first answer, whose validators resumes are checked against,
        // and whose stated total, not its own end, is where the file ends. Taken for the whole
        // file, its first part was published as the shard (exit 0).
        etag_ = r.etag;
        last_modified_ = r.last_modified;
        if (r.range_total >= 0) SetTotal(r.range_total, /*from_range=*/true);
      } else {
        // If-Range makes a server answer a changed file with the whole of it (200, below); but a
        // server may ignore If-Range, and without a validator none was sent: the answer's own
        // validators must match the first answer's, or the tail of another file would be spliced
        // onto this one's head.
        const std::string why =
            StrongEtag().empty() && last_modified_.empty()
                ? "no strong ETag or Last-Modified in the first answer to prove "
                  "the file unchanged"
                : ValidatorChange(r, /*unproven_is_change=*/true);
        if (!why.empty()) {
          abort_status_ =
              RestartStatus(absl::StrCat(name_, ": a resumed download from byte ", offset, " (",
                                         why, "); restarting the shard from byte 0"));
          return false;
        }
        // A first answer of unknown length (chunked): the range's total tells it now.
        if (total < 0 && r.range_total >= 0) SetTotal(r.range_total, /*from_range=*/true);
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.resumes;
      }
      return true;
    }
    // 200: the whole file from byte 0.
    if (offset == 0) {
      etag_ = r.etag;
      last_modified_ = r.last_modified;
      if (r.content_length >= 0) SetTotal(r.content_length, /*from_range=*/false);
      return true;
    }
    // The length this answer states fits the file's: its total, or where a first answer of
    // unknown length (chunked) left that unknown, at least the bytes already delivered (a cache
    // may stream a miss chunked and then serve its copy with a length).
    const int64_t known_total = total_.load();
    const bool same_size = r.content_length < 0 ? true
                           : known_total >= 0   ? r.content_length == known_total
                                                : static_cast<uint64_t>(r.content_length) >= offset;
    const bool same_file = !StrongEtag().empty() && r.etag == StrongEtag() && same_size;
    if (same_file) {
      // The server ignores Range but the file is the same: drop what was already delivered.
      if (known_total < 0 && r.content_length >= 0)
        SetTotal(r.content_length, /*from_range=*/false);
      skip_ = offset;
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.skipped_prefixes;
      return true;
    }
    // Why the prefix cannot be skipped. Validators that all match, but no strong ETag among them,
    // do not prove the bytes the same (a Last-Modified has one-second resolution); they do not
    // say the file changed either (a mirror that ignores Range, such as python -m http.server).
    const bool changed = r.etag != etag_ || r.last_modified != last_modified_ || !same_size;
    abort_status_ = RestartStatus(absl::StrCat(
        name_, ": the server answered a request for bytes ", offset, "- with the whole file (",
        etag_.empty() && last_modified_.empty() ? "no ETag or Last-Modified to prove it unchanged"
        : changed                               ? "the file changed"
                  : "it ignores Range, and without a strong ETag the file is not proven unchanged",
        "); restarting the shard from byte 0"));
    return false;
  }

  size_t OnBody(char* data, size_t n) {
    if (!response_.checked && !CheckResponse()) return 0;
    if (response_.code < 200 || response_.code >= 300) return 0;
    size_t skip = static_cast<size_t>(std::min<uint64_t>(skip_, n));
    const size_t len = n - skip;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cancel_) return 0;
      if (len > 0 && queued_bytes_ >= options_.queue_bytes) {
        paused_ = true;
        return CURL_WRITEFUNC_PAUSE;  // curl hands the same bytes again after the unpause
      }
    }
    skip_ -= skip;
    if (skip > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.bytes_skipped += skip;
    }
    if (len == 0) return n;
    const int64_t total = total_.load();
    if (total >= 0 && delivered_ + len > static_cast<uint64_t>(total)) {
      abort_status_ = absl::DataLossError(
          absl::StrCat(name_, ": the server sent more than the ", total, " bytes of the file (",
                       total_from_range_ ? "its Content-Range total" : "its Content-Length",
                       "): its answer goes on past byte ", total - 1));
      return 0;
    }
    if (cache_fd_ >= 0) {
      const char* p = data + skip;
      size_t left = len;
      while (left > 0) {
        const ssize_t w = ::write(cache_fd_, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
          DropCache(absl::StrCat(CacheTemp(), ": write error: ", std::strerror(errno)));
          break;
        }
        p += w;
        left -= static_cast<size_t>(w);
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      chunks_.emplace_back(data + skip, len);
      queued_bytes_ += len;
      delivered_ += len;
      attempt_delivered_ += len;
      stats_.bytes_delivered = delivered_;
    }
    cv_.notify_one();
    return n;
  }

  // One request from `delivered_`. Returns the curl code; response_ and abort_status_ say the rest.
  CURLcode Perform() {
    response_ = Response{};
    abort_status_ = absl::OkStatus();
    attempt_offset_ = delivered_;
    attempt_delivered_ = 0;
    skip_ = 0;
    curl_easy_reset(easy_);
    curl_easy_setopt(easy_, CURLOPT_URL, url_.c_str());
    curl_easy_setopt(easy_, CURLOPT_NOSIGNAL, 1L);
#if LIBCURL_VERSION_NUM >= 0x075700  // 7.87
    // Removing the handle otherwise joins a name lookup still running in libcurl's resolver
    // thread, which no timeout bounds: a signal or a failed shard during a slow DNS lookup kept
    // the process (and a Slurm job's grace period) waiting for getaddrinfo to give up.
    curl_easy_setopt(easy_, CURLOPT_QUICK_EXIT, 1L);
#endif
    error_buffer_[0] = '\0';
    curl_easy_setopt(easy_, CURLOPT_ERRORBUFFER, error_buffer_);
    curl_easy_setopt(easy_, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(easy_, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(easy_, CURLOPT_PROTOCOLS_STR, "http,https");
    // An https URL is followed to https only: a redirect to plain http would hand the shard's
    // bytes (and the --header values libcurl keeps on a redirect) to anyone on the path, with
    // the run reporting the https URL it was given.
    curl_easy_setopt(easy_, CURLOPT_REDIR_PROTOCOLS_STR,
                     absl::StartsWithIgnoreCase(url_, "https://") ? "https" : "http,https");
    curl_easy_setopt(easy_, CURLOPT_CONNECTTIMEOUT, options_.connect_timeout_s);
    curl_easy_setopt(easy_, CURLOPT_LOW_SPEED_LIMIT, options_.low_speed_limit);
    curl_easy_setopt(easy_, CURLOPT_LOW_SPEED_TIME, options_.low_speed_time_s);
    curl_easy_setopt(easy_, CURLOPT_USERAGENT, options_.user_agent.c_str());
    curl_easy_setopt(easy_, CURLOPT_SSL_VERIFYPEER, options_.insecure ? 0L : 1L);
    curl_easy_setopt(easy_, CURLOPT_SSL_VERIFYHOST, options_.insecure ? 0L : 2L);
    if (!options_.ca_file.empty()) curl_easy_setopt(easy_, CURLOPT_CAINFO, options_.ca_file.c_str());
    curl_easy_setopt(easy_, CURLOPT_HEADERFUNCTION, &HeaderCallback);
    curl_easy_setopt(easy_, CURLOPT_HEADERDATA, this);
    curl_easy_setopt(easy_, CURLOPT_WRITEFUNCTION, &WriteCallback);
    curl_easy_setopt(easy_, CURLOPT_WRITEDATA, this);
    curl_easy_setopt(easy_, CURLOPT_BUFFERSIZE, 256L * 1024);
    curl_slist* headers = nullptr;
    bool encoding_named = false;
    for (const std::string& h : options_.headers) {
      headers = curl_slist_append(headers, h.c_str());
      encoding_named |= absl::StartsWithIgnoreCase(h, "Accept-Encoding:");
    }
    // The shard's own bytes: a request without Accept-Encoding lets a server answer in any
    // content coding (RFC 9110), and a gzip'd answer would reach the zstd decoder as "not a zstd
    // stream". (Unless the user's --header names one.)
    if (!encoding_named) headers = curl_slist_append(headers, "Accept-Encoding: identity");
    accept_encoding_named_ = encoding_named;
    std::string range;
    if (attempt_offset_ > 0) {
      range = absl::StrCat(attempt_offset_, "-");
      curl_easy_setopt(easy_, CURLOPT_RANGE, range.c_str());
      const std::string& validator = StrongEtag().empty() ? last_modified_ : StrongEtag();
      if (!validator.empty()) {
        headers = curl_slist_append(headers, absl::StrCat("If-Range: ", validator).c_str());
      }
    }
    if (headers != nullptr) curl_easy_setopt(easy_, CURLOPT_HTTPHEADER, headers);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.requests;
    }

    CURLcode result = CURLE_OK;
    curl_multi_add_handle(multi_, easy_);
    while (true) {
      int running = 0;
      curl_multi_perform(multi_, &running);
      int pending = 0;
      bool got = false;
      while (CURLMsg* msg = curl_multi_info_read(multi_, &pending)) {
        if (msg->msg == CURLMSG_DONE) {
          result = msg->data.result;
          got = true;
        }
      }
      if (got || running == 0) break;
      bool resume = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (cancel_) {
          result = CURLE_ABORTED_BY_CALLBACK;
          break;
        }
        if (paused_ && queued_bytes_ < options_.queue_bytes) {
          paused_ = false;
          resume = true;
        }
      }
      if (resume) {
        curl_easy_pause(easy_, CURLPAUSE_CONT);
        continue;
      }
      curl_multi_poll(multi_, nullptr, 0, 250, nullptr);
    }
    curl_multi_remove_handle(multi_, easy_);
    curl_slist_free_all(headers);
    return result;
  }

  // Every byte has come: the kept copy takes its name. Never an error for the download itself:
  // a copy that cannot be kept is dropped (DropCache), the shard's bytes are all there.
  absl::Status FinishCache() {
    if (cache_fd_ < 0) return absl::OkStatus();
    const int fd = cache_fd_;
    cache_fd_ = -1;  // closed below either way, and the temporary removed on any failure
    const char* step = "fsync";
    int err = ::fsync(fd) != 0 ? errno : 0;
    if (::close(fd) != 0 && err == 0) {
      err = errno;
      step = "close";
    }
    if (err == 0 && ::rename(CacheTemp().c_str(), options_.cache_path.c_str()) != 0) {
      err = errno;
      step = "rename";
    }
    if (err == 0) {
      // The rename made durable, as a published dataset's is: a crash after it could otherwise
      // lose the kept copy (never damage it).
      const std::string dir = std::filesystem::path(options_.cache_path).parent_path().string();
      const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dfd >= 0) {
        ::fsync(dfd);  // a failure loses at most the copy, which the next run makes again
        ::close(dfd);
      }
    }
    if (err != 0) {
      DropCache(absl::StrCat(options_.cache_path, ": keeping the download (", step, " of ",
                             CacheTemp(), "): ", std::strerror(err)));
    }
    return absl::OkStatus();
  }

  // The kept copy cannot be made (its directory full or over quota, not writable): the copy is
  // given up, its temporary removed, and the download goes on; only the copy is lost, never the
  // shard, which would otherwise fail on every rerun until the space was freed.
  void DropCache(const std::string& cause) {
    if (cache_fd_ >= 0) ::close(cache_fd_);
    cache_fd_ = -1;
    ::unlink(CacheTemp().c_str());
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.keep_error = cause;
    }
    if (observer_ != nullptr) observer_->OnKeepDropped(name_, cause);
  }

  void Finish(absl::Status status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::move(status);
      finished_ = true;
    }
    cv_.notify_all();
  }

  double Backoff(int failures) {
    const double base =
        std::min(options_.backoff_max_s, options_.backoff_initial_s * std::pow(2.0, failures - 1));
    return base * std::uniform_real_distribution<double>(0.5, 1.0)(rng_);
  }

  void Run() {
    int failures = 0;  // consecutive attempts that delivered nothing
    while (true) {
      bool cancelled;
      {
        std::lock_guard<std::mutex> lock(mu_);
        cancelled = cancel_;
      }
      // Outside the lock: Finish takes mu_ itself, and a std::mutex locked twice by one thread
      // deadlocks (the source destroyed during a retry wait hung the whole process, unkillable
      // but by SIGKILL).
      if (cancelled) return Finish(absl::CancelledError(absl::StrCat(name_, ": cancelled")));
      const int64_t total = total_.load();
      if (delivered_ > 0 && total >= 0 && delivered_ == static_cast<uint64_t>(total)) {
        return Finish(FinishCache());  // every byte arrived; the connection failed after them
      }
      // Whether this request asks for what follows a range that came whole to its stated end.
      const bool after_whole_range = std::exchange(range_came_whole_, false);
      const CURLcode code = Perform();
      if (!abort_status_.ok()) return Finish(abort_status_);
      // An answer with no body is judged here as one with a body is at its first byte: a 200 to a
      // resumed request is the whole file, changed or not (If-Range); without this an empty 200
      // to a resumed download of unknown length passed for its end, and the bytes so far for the
      // whole file.
      if (!response_.checked && code == CURLE_OK && !CheckResponse() && !abort_status_.ok()) {
        return Finish(abort_status_);
      }
      const Response r = response_;
      std::string cause;
      bool transient = false;
      double retry_after = -1;
      if (r.code == 416 && total_.load() < 0 && delivered_ > 0 && r.range_total >= 0 &&
          static_cast<uint64_t>(r.range_total) == delivered_) {
        // Asked for the bytes after the last one of a file of unknown length (no Content-Length)
        // whose connection failed after its last byte: every byte has arrived, unless the file
        // changed meanwhile. (A length known from the first answer is never settled here: a 416
        // then means the file is no longer the one being read.)
        // (Without validators every byte came from one answer: nothing was spliced.)
        const std::string why = ValidatorChange(r, /*unproven_is_change=*/false);
        if (!why.empty()) {
          return Finish(
              RestartStatus(absl::StrCat(name_, ": a request for bytes ", delivered_,
                                         "- was answered 416 (", why, "); restarting the shard")));
        }
        SetTotal(r.range_total, /*from_range=*/true);
        return Finish(FinishCache());
      }
      if (r.code == 416 && total_.load() < 0 && delivered_ > 0 && r.range_total >= 0) {
        // The same request answered with another size (not delivered_, settled above): the file
        // is no longer the one whose first bytes arrived, as with a known length below.
        return Finish(
            RestartStatus(absl::StrCat(name_, ": the file is now ", r.range_total, " bytes, after ",
                                       delivered_, " bytes of it had arrived (a request for bytes ",
                                       delivered_, "- was answered 416); restarting the shard")));
      }
      if (r.code == 416 && total_.load() >= 0 && r.range_total >= 0 &&
          r.range_total != total_.load()) {
        // Every byte of the file as the 416 states its size has arrived, and its strong ETag is
        // unchanged: the first answer's Content-Length was wrong (a misconfigured server or
        // proxy), not the file changed. Downloading again would meet the same answer.
        if (static_cast<uint64_t>(r.range_total) == delivered_ && !StrongEtag().empty() &&
            r.etag == StrongEtag()) {
          return Finish(absl::DataLossError(
              absl::StrCat(name_, ": the server's Content-Length said ", total_.load(),
                           " bytes, but the file is ", r.range_total,
                           " (its ETag unchanged; a request for bytes ", delivered_,
                           "- was answered 416): a server or proxy that misstates the length; "
                           "not downloaded again")));
        }
        // Every byte up to the 416's size has arrived, and no pair of strong ETags tells whether
        // the file is the same (another ETag says it changed: below): a changed file and a
        // misstated length read alike, so neither is blamed alone (a server without ETags whose
        // Content-Length is wrong was said to change its file).
        if (static_cast<uint64_t>(r.range_total) == delivered_ &&
            (StrongEtag().empty() || r.etag.empty())) {
          return Finish(RestartStatus(absl::StrCat(
              name_, ": the server's Content-Length said ", total_.load(), " bytes, but a request ",
              "for bytes ", delivered_, "- was answered 416 stating ", r.range_total,
              ": the file changed, or the server or a proxy misstates the length (no strong ETag ",
              "to tell which); restarting the shard")));
        }
        return Finish(RestartStatus(
            absl::StrCat(name_, ": the file changed size from ", total_.load(), " to ",
                         r.range_total, " bytes between requests (a request for bytes ", delivered_,
                         "- was answered 416); restarting the shard")));
      }
      if (r.code == 416 && delivered_ > 0 && r.range_total < 0 && total_.load() < 0 &&
          after_whole_range) {
        // Of a size never stated ("bytes 100000-750650/*"), the server sent a range whole to its
        // stated end and now has nothing after it: the file ends there, unless it changed
        // (validators compared where the 416 has them). A server that answers in parts is told
        // from one that sent the rest only by this request.
        const std::string why = ValidatorChange(r, /*unproven_is_change=*/false);
        if (!why.empty()) {
          return Finish(
              RestartStatus(absl::StrCat(name_, ": a request for bytes ", delivered_,
                                         "- was answered 416 (", why, "); restarting the shard")));
        }
        return Finish(FinishCache());
      }
      if (r.code == 416 && delivered_ > 0 && r.range_total < 0) {
        // A 416 that does not state the file's size (no "Content-Range: bytes */N"): the file is
        // shorter than the bytes already here (a length known from the first answer, so it
        // changed), or of unknown length it may end right here, but nothing proves it: a server
        // that wrongly refuses a range would have the first bytes taken for the whole file. The
        // shard starts again rather than fail on an answer a fresh download does not meet.
        const int64_t known = total_.load();
        return Finish(RestartStatus(
            absl::StrCat(name_, ": a request for bytes ", delivered_,
                         "- was answered 416 without the file's size",
                         known >= 0 ? absl::StrCat(" (the file is no longer the ", known,
                                                   " bytes its first answer announced)")
                                    : absl::StrCat(", so nothing proves the ", delivered_,
                                                   " bytes so far are the whole file"),
                         "; restarting the shard")));
      }
      if ((r.checked || code == CURLE_OK) && r.code != 0 && (r.code < 200 || r.code >= 300)) {
        cause = StatusLine(r);
        if (r.code >= 500 || r.code == 408 || r.code == 429) {
          transient = true;
          curl_off_t ra = -1;
          if (curl_easy_getinfo(easy_, CURLINFO_RETRY_AFTER, &ra) == CURLE_OK && ra > 0) {
            retry_after = std::min<double>(static_cast<double>(ra), 10 * options_.backoff_max_s);
          }
        } else {
          std::string hint;
          if (r.code == 401 || r.code == 403) {
            hint = " (a gated dataset needs --header \"Authorization: Bearer TOKEN\")";
            // libcurl does not send a given Authorization header on to another host after a
            // redirect (as browsers do not): the hint to give one would then be wrong.
            if (const std::string host = RedirectedToAnotherHost();
                !host.empty() && HasAuthorizationHeader()) {
              hint = absl::StrCat(" (the server redirected it to another host, ", host,
                                  ", which libcurl does not send the Authorization header to: "
                                  "give that host's URL, or one signed for it)");
            } else if (HasAuthorizationHeader()) {
              // One was sent: telling the user to send one reads as if it had been lost.
              hint =
                  " (the Authorization header given was refused: a wrong or expired token, "
                  "or one without access to this file)";
            }
          }
          if (delivered_ > 0) {
            // Not a wrong URL: the file was there a moment ago (removed or moved since, or the
            // access granted for it expired, as a signed URL's does).
            absl::StrAppend(&cause, " (to a resumed request, after ", delivered_,
                            " bytes of the file had arrived)");
          }
          absl::Status s = absl::FailedPreconditionError(absl::StrCat(name_, ": ", cause));
          if (r.code == 404 || r.code == 410) s = absl::NotFoundError(absl::StrCat(name_, ": ", cause));
          if (r.code == 401 || r.code == 403) {
            s = absl::PermissionDeniedError(absl::StrCat(name_, ": ", cause, hint));
          }
          return Finish(s);
        }
      } else if (code == CURLE_OK) {
        // A 2xx answer that ended cleanly (an empty body is fine when the file is empty). Of a
        // length unknown, a whole file ends it (a 200 that covered any prefix it was to skip, or
        // another first answer), but a 206 never does: it says only where its range ends (every
        // 206 taken here names an end at or after its start, CheckResponse), and a server that
        // answers in parts ("bytes 50000-81743/*") says no more than one that sent the rest; the
        // next request shows which (the 416 after a range that came whole, or a 416 stating the
        // size).
        const int64_t t = total_.load();
        const bool whole =
            t >= 0 ? delivered_ == static_cast<uint64_t>(t)
                   : skip_ == 0 && r.code != 206 && (r.code == 200 || attempt_offset_ == 0);
        if (whole) return Finish(FinishCache());
        if (r.code == 206 && attempt_delivered_ > 0 &&
            delivered_ == static_cast<uint64_t>(r.range_end) + 1) {
          // The range came whole and the file goes on (or may): ask for the next part at once,
          // no retry counted or waited for: nothing failed.
          failures = 0;
          range_came_whole_ = true;
          continue;
        }
        if (t < 0 && r.code == 200) {
          return Finish(RestartStatus(absl::StrCat(
              name_, ": the server answered a request for bytes ", attempt_offset_,
              "- with the whole file, of fewer bytes than had arrived; restarting the shard "
              "from byte 0")));
        }
        cause = t >= 0 ? absl::StrCat("the answer ended at byte ", delivered_, " of ", t)
                       : absl::StrCat("the answer (HTTP ", r.code, ") ended at byte ", delivered_,
                                      ", the file's size not known");
        transient = true;
      } else {
        const bool detail = HasSafeDetail(code) && error_buffer_[0] != '\0';
        cause = absl::StrCat("curl: ", detail ? error_buffer_ : curl_easy_strerror(code));
        // A proxy is the first suspect when the connection fails, and a TLS-intercepting one when a
        // certificate does not verify: say which proxy libcurl was told to use.
        if (!proxy_note_.empty()) absl::StrAppend(&cause, ", ", proxy_note_);
        transient = IsTransientCurlError(code);
        if (!transient) {
          std::string hint;
          if (code == CURLE_PEER_FAILED_VERIFICATION) {
            hint =
                " (TLS certificate verification failed: the server's certificate must name this "
                "host and chain to a trusted CA (the system's, or --ca-file FILE); --insecure "
                "skips the check, for testing only)";
          } else if (code == CURLE_UNSUPPORTED_PROTOCOL &&
                     absl::StartsWithIgnoreCase(url_, "https://") && Redirects() > 0) {
            hint =
                " (an https download follows redirects to https only: the server redirected it "
                "to another scheme, such as plain http, whose bytes no certificate vouches for)";
          } else if (code == CURLE_UNSUPPORTED_PROTOCOL && Redirects() > 0) {
            hint =
                " (the server redirected it to a scheme other than http or https, such as file:// "
                "or ftp://, which downloads do not follow)";
          } else if (code == CURLE_SSL_CACERT_BADFILE && !options_.ca_file.empty()) {
            hint = " (--ca-file must name a readable PEM file of CA certificates)";
          } else if (code == CURLE_SSL_CACERT_BADFILE) {
            // libcurl4 only recommends ca-certificates, so a minimal Debian (a container image,
            // debootstrap, apt-get --no-install-recommends) has libcurl but no bundle to read.
            hint =
                " (the system's CA certificates could not be read: install them (Debian: "
                "apt-get install ca-certificates; scripts/setup.sh does), or name a PEM bundle "
                "with --ca-file FILE)";
          }
          return Finish(absl::UnavailableError(absl::StrCat(name_, ": ", cause, hint)));
        }
      }
      // A transient failure: wait and try again from the byte already delivered.
      failures = attempt_delivered_ > 0 ? 1 : failures + 1;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stats_.last_error = cause;
      }
      if (failures > options_.max_retries) {
        return Finish(absl::UnavailableError(absl::StrCat(
            name_, ": ", cause, " (gave up after ", options_.max_retries,
            " retries without progress, at byte ", delivered_, ")")));
      }
      const double delay = retry_after >= 0 ? retry_after : Backoff(failures);
      if (observer_ != nullptr) observer_->OnRetry(name_, failures, delay, delivered_, cause);
      std::unique_lock<std::mutex> lock(mu_);
      ++stats_.retries;
      cv_.wait_for(lock, std::chrono::duration<double>(delay), [&] { return cancel_; });
    }
  }

  const std::string url_;
  const std::string name_;
  const std::string proxy_note_;  // EnvProxyNote(url_)
  const FetchOptions options_;
  FetchObserver* const observer_;
  CURLM* multi_ = nullptr;
  CURL* easy_ = nullptr;
  std::thread thread_;
  int cache_fd_ = -1;

  // Download thread only.
  char error_buffer_[CURL_ERROR_SIZE] = {};  // CURLOPT_ERRORBUFFER of the current request
  Response response_;
  absl::Status abort_status_;
  std::string etag_, last_modified_;  // of the first answer
  uint64_t attempt_offset_ = 0;
  uint64_t attempt_delivered_ = 0;
  uint64_t skip_ = 0;
  bool range_came_whole_ = false;  // the last answer, a 206, ended at its stated range's end
  std::mt19937_64 rng_;

  std::atomic<int64_t> total_{-1};
  bool total_from_range_ = false;  // total_ came from a Content-Range (else a Content-Length)
  bool accept_encoding_named_ = false;  // a --header gave Accept-Encoding (no identity added)
  void SetTotal(int64_t total, bool from_range) {
    total_.store(total);
    total_from_range_ = from_range;
  }

  // Shared, under mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> chunks_;
  size_t front_offset_ = 0;
  size_t queued_bytes_ = 0;
  uint64_t delivered_ = 0;  // written by the download thread under mu_
  bool paused_ = false;
  bool cancel_ = false;
  bool finished_ = false;
  bool interrupted_ = false;  // Interrupt(): Read returns at once (the download itself goes on)
  absl::Status error_;
  FetchStats stats_;
};

}  // namespace

bool IsRestartRequired(const absl::Status& status) {
  return status.code() == absl::StatusCode::kAborted &&
         status.GetPayload(kRestartPayload).has_value();
}

std::string RedactUrl(const std::string& url) {
  std::string out = url;
  size_t host_start = 0;
  if (const size_t scheme = out.find("://"); scheme != std::string::npos) {
    host_start = scheme + 3;
    out.erase(host_start, internal::UserinfoEnd(out, host_start) - host_start);
  }
  const size_t cut = out.find_first_of("?#", host_start);
  if (cut != std::string::npos) out.resize(cut);
  return out;
}

absl::Status CheckHeader(const std::string& header) {
  const size_t colon = header.find(':');
  if (colon == std::string::npos || colon == 0 ||
      header.find_first_of("\r\n") != std::string::npos) {
    const std::string name = colon == std::string::npos ? "" : header.substr(0, colon);
    return absl::InvalidArgumentError(absl::StrCat(
        "--header ", name.empty() ? "(value hidden)" : name,
        ": expected \"Name: value\" on one line, e.g. \"Authorization: Bearer TOKEN\""));
  }
  for (size_t i = 0; i < colon; ++i) {
    const char c = header[i];
    if (!(absl::ascii_isalnum(c) || c == '-' || c == '_')) {
      return absl::InvalidArgumentError(
          "--header: the name before ':' may hold only letters, digits, '-' and '_'");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HttpSource>> OpenHttpSource(const std::string& url,
                                                           const FetchOptions& options,
                                                           FetchObserver* observer) {
  GlobalInit();
  const std::string lower = absl::AsciiStrToLower(url.substr(0, 8));
  if (!absl::StartsWith(lower, "http://") && !absl::StartsWith(lower, "https://")) {
    // Not a URL ("https:/user:pw@host/x"): RedactUrl finds no user info to drop, so the password
    // of one is masked as a refused --url's is.
    std::string shown = internal::MaskNonUrlPassword(RedactUrl(url));
    return absl::InvalidArgumentError(absl::StrCat(shown, ": not an http:// or https:// URL"));
  }
  for (const std::string& h : options.headers) {
    if (absl::Status s = CheckHeader(h); !s.ok()) return s;
  }
  // A negative count or time was taken as it came: "gave up after -1 retries", a retry at once.
  if (options.max_retries < 0 || !(options.backoff_initial_s >= 0) ||
      !(options.backoff_max_s >= 0) || options.connect_timeout_s < 0 ||
      options.low_speed_limit < 0 || options.low_speed_time_s < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(RedactUrl(url), ": FetchOptions: max_retries (", options.max_retries,
                     "), backoff_initial_s (", options.backoff_initial_s, "), backoff_max_s (",
                     options.backoff_max_s, "), connect_timeout_s (", options.connect_timeout_s,
                     "), low_speed_limit (", options.low_speed_limit, ") and low_speed_time_s (",
                     options.low_speed_time_s, ") must be 0 or more"));
  }
  FetchOptions o = options;
  if (o.queue_bytes == 0) o.queue_bytes = 1;
  auto source = std::make_unique<HttpSourceImpl>(url, std::move(o), observer);
  if (absl::Status s = source->Start(); !s.ok()) return s;
  return std::unique_ptr<HttpSource>(std::move(source));
}

}  // namespace pileprep
