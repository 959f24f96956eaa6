#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fetch/url.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pileprep/fetch.h"
#include "testing/fault_server.h"
#include "testing/files.h"

namespace pileprep {
namespace {

using ::pileprep::testing::FaultServer;
using ::testing::HasSubstr;

const std::string kSamples = std::string(PILEPREP_SOURCE_DIR) + "/data/samples";

using testing::ReadFile;

FetchOptions FastOptions() {
  FetchOptions o;
  o.backoff_initial_s = 0.02;
  o.backoff_max_s = 0.1;
  o.max_retries = 4;
  o.connect_timeout_s = 5;
  return o;
}

// Reads the whole source in odd-sized pieces.
absl::StatusOr<std::string> Drain(ByteSource& source) {
  std::string out;
  char buf[7001];
  while (true) {
    absl::StatusOr<size_t> n = source.Read(buf, sizeof(buf));
    if (!n.ok()) return n.status();
    if (*n == 0) return out;
    out.append(buf, *n);
  }
}

// Reads `bytes` or a few more, each Read delivering some.
void ReadAtLeast(ByteSource& source, size_t bytes) {
  std::vector<char> buf(1 << 16);
  for (size_t got = 0; got < bytes;) {
    auto n = source.Read(buf.data(), buf.size());
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_GT(*n, 0u);
    got += *n;
  }
}

int CountIn(const std::vector<std::string>& log, const std::string& needle) {
  int n = 0;
  for (const std::string& line : log) n += line.find(needle) != std::string::npos;
  return n;
}

// One download: a fault server started with `args`, `file` read from it whole (or until it fails).
struct Download {
  std::unique_ptr<FaultServer> server;
  std::unique_ptr<HttpSource> source;
  absl::StatusOr<std::string> bytes = absl::UnknownError("not downloaded");
  std::string message() const { return std::string(bytes.status().message()); }
};

void Fetch(const std::vector<std::string>& args, Download* d,
           const std::string& file = "01.jsonl.zst", const FetchOptions& o = FastOptions()) {
  auto server = FaultServer::Start(kSamples, args);
  ASSERT_TRUE(server.ok()) << server.status();
  d->server = *std::move(server);
  auto source = OpenHttpSource(d->server->Url(file), o);
  ASSERT_TRUE(source.ok()) << source.status();
  d->source = *std::move(source);
  d->bytes = Drain(*d->source);
}

TEST(HttpSource, CleanDownloadEqualsTheFile) {
  Download d;
  ASSERT_NO_FATAL_FAILURE(Fetch({}, &d));
  ASSERT_TRUE(d.bytes.ok()) << d.bytes.status();
  EXPECT_EQ(*d.bytes, ReadFile(kSamples + "/01.jsonl.zst"));
  EXPECT_EQ(d.source->size_hint(), static_cast<int64_t>(d.bytes->size()));
  EXPECT_EQ(d.source->stats().requests, 1);
  EXPECT_EQ(d.source->stats().retries, 0);
}

TEST(HttpSource, RetriesA503ThenResumesTwoDropsWithRangeRequests) {
  auto server =
      FaultServer::Start(kSamples, {"--plan", "01.jsonl.zst=503:1,drop:100000,drop:50000"});
  ASSERT_TRUE(server.ok()) << server.status();
  const auto start = std::chrono::steady_clock::now();
  auto source = OpenHttpSource((*server)->Url("01.jsonl.zst"), FastOptions());
  ASSERT_TRUE(source.ok());
  auto bytes = Drain(**source);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, ReadFile(kSamples + "/01.jsonl.zst"));
  // Retry-After: 1 was honoured rather than the 20 ms backoff.
  EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 0.9);
  const FetchStats st = (*source)->stats();
  EXPECT_EQ(st.requests, 4);
  EXPECT_EQ(st.retries, 3);
  EXPECT_EQ(st.resumes, 2);
  const std::vector<std::string> log = (*server)->Log(4);
  ASSERT_EQ(log.size(), 4u);
  EXPECT_THAT(log[0], HasSubstr("\"status\": 503"));
  EXPECT_THAT(log[1], HasSubstr("\"range\": null"));
  EXPECT_THAT(log[2], HasSubstr("\"range\": \"bytes=100000-\""));
  EXPECT_THAT(log[2], HasSubstr("\"status\": 206"));
  EXPECT_THAT(log[2], HasSubstr("\"if_range\": \"\\\""));  // guarded by the ETag
  EXPECT_THAT(log[3], HasSubstr("\"range\": \"bytes=150000-\""));
  EXPECT_THAT(log[3], HasSubstr("\"status\": 206"));
  EXPECT_EQ(CountIn(log, "\"status\": 200"), 1);  // one full answer: nothing downloaded twice
}

// The server's reason phrase is printed: its control bytes (an escape sequence that recoloured or
// rewrote the terminal reached it raw) become '?'.
TEST(HttpSource, AReasonPhraseWithControlBytesIsPrintedWithoutThem) {
  Download d;
  // \x9b: the C1 CSI, one byte (the server writes its status line in Latin-1).
  ASSERT_NO_FATAL_FAILURE(Fetch({"--reason", "Not \\x1b[31mFound\\x07\\x9b"}, &d, "05.jsonl.zst"));
  ASSERT_FALSE(d.bytes.ok());
  EXPECT_EQ(d.bytes.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(d.message(), HasSubstr("/05.jsonl.zst: HTTP 404 Not ?[31mFound??"));
  for (char c : d.message()) {
    const unsigned char u = static_cast<unsigned char>(c);
    EXPECT_TRUE(u >= 0x20 && u < 0x7f) << int{u};
  }
}

TEST(HttpSource, NotFoundFailsAtOnceNamingTheUrlAndStatus) {
  Download d;
  ASSERT_NO_FATAL_FAILURE(Fetch({}, &d, "05.jsonl.zst?token=secret"));
  ASSERT_FALSE(d.bytes.ok());
  EXPECT_EQ(d.bytes.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(d.message(), HasSubstr("/05.jsonl.zst: HTTP 404"));
  EXPECT_THAT(d.message(), ::testing::Not(HasSubstr("secret")));
  EXPECT_EQ(d.server->Log(1).size(), 1u);
}

// A 404 to a resumed request is not a wrong URL: the message says bytes had arrived (it read as
// if the URL had never been right).
TEST(HttpSource, NotFoundToAResumedRequestSaysTheFileWasThere) {
  Download d;
  ASSERT_NO_FATAL_FAILURE(Fetch({"--plan", "01.jsonl.zst=drop:100000,404"}, &d));
  ASSERT_FALSE(d.bytes.ok());
  EXPECT_EQ(d.bytes.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(d.message(),
              HasSubstr("HTTP 404 Not Found (to a resumed request, after 100000 bytes of the file "
                        "had arrived)"));
}

// A success that carries no file (204 No Content; 202 Accepted, as a server still preparing the
// file may answer) fails at once naming the answer: a 204 was taken for an empty file, and the
// shard failed as "the input is empty" (or, with nothing to resume, a 202's empty body did).
TEST(HttpSource, ASuccessWithoutTheFileFailsAtOnceNamingTheAnswer) {
  for (const char* code : {"204", "202"}) {
    SCOPED_TRACE(code);
    Download d;
    ASSERT_NO_FATAL_FAILURE(Fetch({"--plan", absl::StrCat("01.jsonl.zst=", code)}, &d));
    ASSERT_FALSE(d.bytes.ok());
    EXPECT_EQ(d.bytes.status().code(), absl::StatusCode::kFailedPrecondition) << d.message();
    EXPECT_THAT(d.message(),
                HasSubstr(absl::StrCat("/01.jsonl.zst: the server answered HTTP ", code)));
    EXPECT_THAT(d.message(), HasSubstr("which does not carry the file (a file comes as 200 or "
                                       "206): is the URL the file's own?"));
    EXPECT_EQ(d.server->Log(1).size(), 1u);
  }
  // To a resumed request: the bytes that had arrived are named (the URL was right).
  Download d;
  ASSERT_NO_FATAL_FAILURE(Fetch({"--plan", "01.jsonl.zst=drop:100000,204"}, &d));
  ASSERT_FALSE(d.bytes.ok());
  EXPECT_EQ(d.bytes.status().code(), absl::StatusCode::kFailedPrecondition) << d.message();
  EXPECT_THAT(d.message(), HasSubstr("the server answered HTTP 204 No Content, which does not "
                                     "carry the file (a file comes as 200 or 206) to a resumed "
                                     "request, after 100000 bytes of the file had arrived"));
}

// A plain http download redirected to file:// (or any scheme but http and https) is refused, and
// the message says it was the redirect: "curl: Unsupported protocol" alone pointed at the URL
// given.
TEST(HttpSource, ARedirectToAnotherSchemeIsNamedAsTheCause) {
  Download d;
  ASSERT_NO_FATAL_FAILURE(Fetch({"--redirect-to", "file:///etc"}, &d));
  ASSERT_FALSE(d.bytes.ok());
  EXPECT_THAT(d.message(), HasSubstr("curl: Unsupported protocol (the server redirected it to a "
                                     "scheme other than http or https"));
  EXPECT_EQ(d.server->Log(1).size(), 1u);
}

TEST(HttpSource, ServerIgnoringRangeWithSameEtagSkipsTheDeliveredPrefix) {
  Download d;
  ASSERT_NO_FATAL_FAILURE(Fetch({"--no-range", "--plan", "01.jsonl.zst=drop:100000"}, &d));
  ASSERT_TRUE(d.bytes.ok()) << d.bytes.status();
  EXPECT_EQ(*d.bytes, ReadFile(kSamples + "/01.jsonl.zst"));
  EXPECT_EQ(d.source->stats().skipped_prefixes, 1);
  EXPECT_EQ(d.source->stats().bytes_skipped, 100000u);  // received again, counted as downloaded
}

// The first answer of unknown length (chunked), later ones the whole file with a Content-Length
// and the same strong ETag, as a cache may stream a miss and then serve its copy: the delivered
// prefix is skipped as when the first answer had a length. The shard restarted instead, saying
// that without a strong ETag the file was not proven unchanged.
TEST(HttpSource, AWholeFileAnswerWithALengthAfterAChunkedOneSkipsTheDeliveredPrefix) {
  Download d;
  ASSERT_NO_FATAL_FAILURE(
      Fetch({"--no-range", "--chunked-first", "1", "--plan", "01.jsonl.zst=drop:100000"}, &d));
  ASSERT_TRUE(d.bytes.ok()) << d.bytes.status();
  EXPECT_EQ(*d.bytes, ReadFile(kSamples + "/01.jsonl.zst"));
  EXPECT_EQ(d.source->stats().skipped_prefixes, 1);
  EXPECT_EQ(d.source->stats().bytes_skipped, 100000u);
  // The length it stated is the file's from then on: bytes past it are not taken.
  EXPECT_EQ(d.source->size_hint(), static_cast<int64_t>(d.bytes->size()));
}

TEST(HttpSource, ServerIgnoringRangeWithoutValidatorRequiresRestart) {
  Download d;
  ASSERT_NO_FATAL_FAILURE(
      Fetch({"--no-range", "--no-etag", "--plan", "01.jsonl.zst=drop:100000"}, &d));
  ASSERT_FALSE(d.bytes.ok());
  EXPECT_TRUE(IsRestartRequired(d.bytes.status())) << d.bytes.status();
  EXPECT_THAT(d.message(), HasSubstr("restarting the shard"));
}

// A server that ignores Range and has only a Last-Modified to show (python -m http.server): the
// same Last-Modified does not prove the bytes the same, so the shard restarts; but the message
// does not say the file changed, which it did not (it said so whenever any validator was there).
TEST(HttpSource, ServerIgnoringRangeWithOnlyLastModifiedRestartsWithoutSayingTheFileChanged) {
  Download d;
  ASSERT_NO_FATAL_FAILURE(
      Fetch({"--no-range", "--last-modified-only", "--plan", "01.jsonl.zst=drop:100000"}, &d));
  ASSERT_FALSE(d.bytes.ok());
  EXPECT_TRUE(IsRestartRequired(d.bytes.status())) << d.bytes.status();
  EXPECT_THAT(d.message(), HasSubstr("with the whole file (it ignores Range, and without a strong "
                                     "ETag the file is not proven unchanged)"));
  EXPECT_THAT(d.message(), ::testing::Not(HasSubstr("the file changed")));
}

TEST(HttpSource, FileChangedBetweenRequestsRequiresRestartThenGetsTheNewFile) {
  Download d;
  ASSERT_NO_FATAL_FAILURE(Fetch({"--plan", "01.jsonl.zst=drop:100000", "--change",
                                 "01.jsonl.zst=2:" + kSamples + "/00.jsonl.zst"},
                                &d));
  ASSERT_FALSE(d.bytes.ok());
  EXPECT_TRUE(IsRestartRequired(d.bytes.status())) << d.bytes.status();
  EXPECT_THAT(d.message(), HasSubstr("the file changed"));
  // The If-Range guard made the server send the new file whole rather than splice it. The server
  // logs that answer only once it notices the hang-up, which may be after Read() returned.
  const std::vector<std::string> log = d.server->Log(2);
  ASSERT_GE(log.size(), 2u);
  EXPECT_THAT(log[1], HasSubstr("\"if_range\": \"\\\""));
  EXPECT_THAT(log[1], HasSubstr("\"status\": 200"));
  auto again = OpenHttpSource(d.server->Url("01.jsonl.zst"), FastOptions());
  ASSERT_TRUE(again.ok());
  auto fresh = Drain(**again);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(*fresh, ReadFile(kSamples + "/00.jsonl.zst"));
}

// A file of the same size whose bytes differ from `from` on: a change that Content-Range's total
// cannot show.
std::string SameSizeVariant(const std::string& dir, size_t from) {
  std::string bytes = ReadFile(kSamples + "/01.jsonl.zst");
  for (size_t i = from; i < bytes.size(); ++i) bytes[i] = static_cast<char>(bytes[i] ^ 0x5A);
  const std::string path = dir + "/01-changed.jsonl.zst";
  testing::WriteFile(path, bytes);
  return path;
}

TEST(HttpSource, ResumedAnswerWithAnotherEtagRequiresRestartEvenWhenTheServerIgnoresIfRange) {
  testing::ScopedTempDir dir("pileprep-fetch");
  const std::string changed = SameSizeVariant(dir.path(), 0);
  Download d;
  ASSERT_NO_FATAL_FAILURE(Fetch({"--ignore-if-range", "--plan", "01.jsonl.zst=drop:100000",
                                 "--change", "01.jsonl.zst=2:" + changed},
                                &d));
  ASSERT_FALSE(d.bytes.ok()) << "a changed file's tail was spliced on";
  EXPECT_TRUE(IsRestartRequired(d.bytes.status())) << d.bytes.status();
  EXPECT_THAT(d.message(), HasSubstr("the file changed: ETag"));
  const std::vector<std::string> log = d.server->Log(2);
  ASSERT_GE(log.size(), 2u);
  EXPECT_THAT(log[1], HasSubstr("\"status\": 206"));  // the server did send the other file's tail
}

// A 206 without an ETag is judged by its Last-Modified, which tells the new file from the old.
TEST(HttpSource, ResumedAnswerWithoutAnEtagIsJudgedByItsLastModified) {
  testing::ScopedTempDir dir("pileprep-fetch");
  const std::string changed = SameSizeVariant(dir.path(), 100000);
  Download d;
  ASSERT_NO_FATAL_FAILURE(
      Fetch({"--ignore-if-range", "--no-etag-on-206", "--plan", "01.jsonl.zst=drop:100000",
             "--change", "01.jsonl.zst=2:" + changed},
            &d));
  ASSERT_FALSE(d.bytes.ok()) << "a changed file's tail was spliced on";
  EXPECT_TRUE(IsRestartRequired(d.bytes.status())) << d.bytes.status();
  EXPECT_THAT(d.message(), HasSubstr("the file changed: Last-Modified"));
}

// A 206 with neither validator, after a first answer with both, proves nothing: a server that
// ignores If-Range and sends none had another file of the same size spliced on (the shard was made
// of two versions). The unchanged file restarts too: nothing tells the two apart.
TEST(HttpSource, ResumedAnswerWithoutAnyValidatorRequiresRestart) {
  testing::ScopedTempDir dir("pileprep-fetch");
  const std::string changed = SameSizeVariant(dir.path(), 100000);
  for (const bool change : {true, false}) {
    std::vector<std::string> args = {"--ignore-if-range", "--no-validators-on-206", "--plan",
                                     "01.jsonl.zst=drop:100000"};
    if (change) {
      args.push_back("--change");
      args.push_back("01.jsonl.zst=2:" + changed);
    }
    Download d;
    ASSERT_NO_FATAL_FAILURE(Fetch(args, &d));
    ASSERT_FALSE(d.bytes.ok()) << "a tail no validator vouches for was spliced on; change "
                               << change;
    EXPECT_TRUE(IsRestartRequired(d.bytes.status())) << d.bytes.status();
    EXPECT_THAT(d.message(), HasSubstr("this one no ETag to prove the file unchanged"));
    const std::vector<std::string> log = d.server->Log(2);
    ASSERT_GE(log.size(), 2u);
    EXPECT_THAT(log[1], HasSubstr("\"status\": 206"));
  }
}

TEST(HttpSource, ResumeWithoutAValidatorRequiresRestart) {
  testing::ScopedTempDir dir("pileprep-fetch");
  const std::string changed = SameSizeVariant(dir.path(), 100000);
  Download d;
  ASSERT_NO_FATAL_FAILURE(Fetch(
      {"--no-etag", "--plan", "01.jsonl.zst=drop:100000", "--change", "01.jsonl.zst=2:" + changed},
      &d));
  ASSERT_FALSE(d.bytes.ok()) << "a tail no validator vouches for was spliced on";
  EXPECT_TRUE(IsRestartRequired(d.bytes.status())) << d.bytes.status();
  EXPECT_THAT(
      d.message(),
      HasSubstr("no strong ETag or Last-Modified in the first answer to prove the file unchanged"));
}

// The validator compared is the one If-Range carried: the strong ETag, which these answers share,
// not their file times.
TEST(HttpSource, ResumeFromAMirrorWithTheSameEtagButAnotherFileTimeGoesOn) {
  Download d;
  ASSERT_NO_FATAL_FAILURE(
      Fetch({"--vary-last-modified", "--plan", "01.jsonl.zst=drop:100000"}, &d));
  ASSERT_TRUE(d.bytes.ok()) << d.bytes.status();
  EXPECT_EQ(*d.bytes, ReadFile(kSamples + "/01.jsonl.zst"));
  EXPECT_EQ(d.source->stats().resumes, 1);
}

// A length known from the first answer is never settled by a 416: a file cut to the bytes already
// delivered is another file, and the shard restarts.
TEST(HttpSource, A416ForAFileOfKnownLengthRequiresRestart) {
  testing::ScopedTempDir dir("pileprep-fetch");
  const std::string cut = dir.path() + "/01-cut.jsonl.zst";
  testing::WriteFile(cut, ReadFile(kSamples + "/01.jsonl.zst").substr(0, 100000));
  Download d;
  ASSERT_NO_FATAL_FAILURE(Fetch({"--ignore-if-range", "--plan", "01.jsonl.zst=drop:100000",
                                 "--change", "01.jsonl.zst=2:" + cut},
                                &d));
  ASSERT_FALSE(d.bytes.ok()) << "a file cut short was taken for the whole";
  EXPECT_TRUE(IsRestartRequired(d.bytes.status())) << d.bytes.status();
  EXPECT_THAT(d.message(), HasSubstr("changed size"));
}

TEST(HttpSource, ErrorAnswersWithoutABodyAreJudgedAsWithOne) {
  struct Case {
    std::string plan;
    absl::StatusCode code;
    std::string says;
  };
  for (const Case& c :
       {Case{"404", absl::StatusCode::kNotFound, "HTTP 404"},
        Case{"403", absl::StatusCode::kPermissionDenied, "Authorization: Bearer"}}) {
    auto server =
        FaultServer::Start(kSamples, {"--empty-error-bodies", "--plan", "01.jsonl.zst=" + c.plan});
    ASSERT_TRUE(server.ok());
    auto source = OpenHttpSource((*server)->Url("01.jsonl.zst"), FastOptions());
    ASSERT_TRUE(source.ok());
    auto bytes = Drain(**source);
    ASSERT_FALSE(bytes.ok()) << c.plan;
    EXPECT_EQ(bytes.status().code(), c.code) << bytes.status();
    EXPECT_THAT(std::string(bytes.status().message()), HasSubstr(c.says));
  }
  // A 503 with Retry-After and no body: retried after the time it asks, not the 20 ms backoff.
  auto server =
      FaultServer::Start(kSamples, {"--empty-error-bodies", "--plan", "01.jsonl.zst=503:1"});
  ASSERT_TRUE(server.ok());
  const auto start = std::chrono::steady_clock::now();
  auto source = OpenHttpSource((*server)->Url("01.jsonl.zst"), FastOptions());
  ASSERT_TRUE(source.ok());
  auto bytes = Drain(**source);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, ReadFile(kSamples + "/01.jsonl.zst"));
  EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 0.9);
}

TEST(HttpSource, DownloadOfUnknownLengthCutAfterItsLastByteIsComplete) {
  const std::string file = ReadFile(kSamples + "/01.jsonl.zst");
  // Chunked answers (no Content-Length): the first is cut after every byte but before the last
  // chunk; the resume asks for the bytes after the end, and the server answers 416.
  Download d;
  ASSERT_NO_FATAL_FAILURE(
      Fetch({"--chunked", "--plan", "01.jsonl.zst=drop:" + std::to_string(file.size())}, &d));
  ASSERT_TRUE(d.bytes.ok()) << d.bytes.status();
  EXPECT_EQ(*d.bytes, file);
  const std::vector<std::string> log = d.server->Log(2);
  ASSERT_EQ(log.size(), 2u);
  EXPECT_THAT(log[1], HasSubstr("\"status\": 416"));
  // Cut part way, it resumes with ranges of unknown total and ends equal to the file.
  auto cut = FaultServer::Start(kSamples, {"--chunked", "--plan", "01.jsonl.zst=drop:100000"});
  ASSERT_TRUE(cut.ok());
  auto resumed = OpenHttpSource((*cut)->Url("01.jsonl.zst"), FastOptions());
  ASSERT_TRUE(resumed.ok());
  auto again = Drain(**resumed);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, file);
  EXPECT_EQ((*resumed)->stats().resumes, 1);
}

// A download of unknown length cut part way, whose resume is answered 200 with no body (the file
// changed, If-Range answered with the whole new one, empty): not the end of the download (the
// bytes so far taken for the whole file), but a restart, as a 200 with a body would be.
TEST(HttpSource, AnEmptyWholeFileAnswerToAResumeOfUnknownLengthRequiresRestart) {
  testing::ScopedTempDir dir("pileprep-fetch");
  const std::string empty = dir.path() + "/empty.jsonl.zst";
  testing::WriteFile(empty, "");
  Download d;
  ASSERT_NO_FATAL_FAILURE(Fetch(
      {"--chunked", "--plan", "01.jsonl.zst=drop:100000", "--change", "01.jsonl.zst=2:" + empty},
      &d));
  ASSERT_FALSE(d.bytes.ok()) << "a download cut short was taken for the whole file";
  EXPECT_TRUE(IsRestartRequired(d.bytes.status())) << d.bytes.status();
  EXPECT_THAT(d.message(), HasSubstr("with the whole file (the file changed)"));
}

// A first answer whose Content-Length says more than the file has: every byte comes, then the
// resume is answered 416 with the file's true size and the same ETag. The file did not change:
// the error says what the server did, and no restart downloads it again to meet the same answer.
TEST(HttpSource, AContentLengthLongerThanTheFileIsNamedNotTakenForAChange) {
  const size_t size = ReadFile(kSamples + "/01.jsonl.zst").size();
  Download d;
  ASSERT_NO_FATAL_FAILURE(Fetch({"--plan", "01.jsonl.zst=longer:100"}, &d));
  ASSERT_FALSE(d.bytes.ok());
  EXPECT_FALSE(IsRestartRequired(d.bytes.status())) << d.bytes.status();
  EXPECT_EQ(d.bytes.status().code(), absl::StatusCode::kDataLoss) << d.bytes.status();
  EXPECT_THAT(d.message(),
              HasSubstr("the server's Content-Length said " + std::to_string(size + 100) +
                        " bytes, but the file is " + std::to_string(size)));
}

// The same without validators (--no-etag): the 416's size is every byte delivered, but nothing
// proves the file unchanged, so the shard restarts; the message names both readings instead of
// saying the file "changed size" (a server whose Content-Length is wrong was blamed for a change).
TEST(HttpSource, AContentLengthLongerThanTheFileWithoutAnEtagNamesBothCauses) {
  const size_t size = ReadFile(kSamples + "/01.jsonl.zst").size();
  Download d;
  ASSERT_NO_FATAL_FAILURE(Fetch({"--no-etag", "--plan", "01.jsonl.zst=longer:100"}, &d));
  ASSERT_FALSE(d.bytes.ok());
  EXPECT_TRUE(IsRestartRequired(d.bytes.status())) << d.bytes.status();
  EXPECT_THAT(d.message(),
              HasSubstr("the server's Content-Length said " + std::to_string(size + 100) +
                        " bytes, but a request for bytes " + std::to_string(size) +
                        "- was answered 416 stating " + std::to_string(size)));
  EXPECT_THAT(d.message(), HasSubstr("the file changed, or the server or a proxy misstates the "
                                     "length (no strong ETag to tell which)"));
  EXPECT_THAT(d.message(), Not(HasSubstr("changed size")));
}

// Every request asks for the bytes as they are (no content coding): a server free to gzip an
// answer to a request without Accept-Encoding would hand the zstd decoder gzip.
TEST(HttpSource, RequestsAskForNoContentCoding) {
  Download d;
  ASSERT_NO_FATAL_FAILURE(Fetch({"--plan", "01.jsonl.zst=drop:100000"}, &d));
  ASSERT_TRUE(d.bytes.ok()) << d.bytes.status();
  const std::vector<std::string> log = d.server->Log(2);
  ASSERT_EQ(log.size(), 2u);
  for (const std::string& line : log)
    EXPECT_THAT(line, HasSubstr("\"accept_encoding\": \"identity\""));
}

// The 416 that would settle a download of unknown length names another file: nothing settles.
TEST(HttpSource, A416WithAnotherEtagForADownloadOfUnknownLengthRequiresRestart) {
  testing::ScopedTempDir dir("pileprep-fetch");
  const std::string changed = SameSizeVariant(dir.path(), 0);
  const std::string size = std::to_string(ReadFile(kSamples + "/01.jsonl.zst").size());
  Download d;
  ASSERT_NO_FATAL_FAILURE(
      Fetch({"--chunked", "--ignore-if-range", "--plan", "01.jsonl.zst=drop:" + size, "--change",
             "01.jsonl.zst=2:" + changed},
            &d));
  ASSERT_FALSE(d.bytes.ok()) << "a 416 for a changed file settled the download";
  EXPECT_TRUE(IsRestartRequired(d.bytes.status())) << d.bytes.status();
  EXPECT_THAT(d.message(), HasSubstr("answered 416 (the file changed: ETag"));
}

// A download of unknown length cut part way, whose resume is answered 416 with another size (the
// file was replaced by a shorter one): not complete, and not an HTTP error either: it restarts.
TEST(HttpSource, A416WithAnotherSizeForADownloadOfUnknownLengthRequiresRestart) {
  testing::ScopedTempDir dir("pileprep-fetch");
  const std::string shorter = dir.path() + "/01-shorter.jsonl.zst";
  testing::WriteFile(shorter, ReadFile(kSamples + "/01.jsonl.zst").substr(0, 50000));
  Download d;
  ASSERT_NO_FATAL_FAILURE(
      Fetch({"--chunked", "--ignore-if-range", "--plan", "01.jsonl.zst=drop:100000", "--change",
             "01.jsonl.zst=2:" + shorter},
            &d));
  ASSERT_FALSE(d.bytes.ok()) << "a 416 for a shorter file settled the download";
  EXPECT_TRUE(IsRestartRequired(d.bytes.status())) << d.bytes.status();
  EXPECT_THAT(d.message(), HasSubstr("the file is now 50000 bytes, after 100000 bytes of it"));
}

// A server that does not state the file's size in its ranges ("bytes N-M/*"): a download of
// unknown length cut twice resumes from each cut; the 206 that brings the rest says only where
// its range ends (as a server that answers in parts would), so the next bytes are asked for, and
// the 416 ends it.
TEST(HttpSource, RangesOfUnstatedTotalResumeADownloadOfUnknownLength) {
  Download d;
  ASSERT_NO_FATAL_FAILURE(
      Fetch({"--chunked", "--unknown-total", "--plan", "01.jsonl.zst=drop:100000,drop:50000"}, &d));
  ASSERT_TRUE(d.bytes.ok()) << d.bytes.status();
  const std::string file = ReadFile(kSamples + "/01.jsonl.zst");
  EXPECT_EQ(*d.bytes, file);
  EXPECT_EQ(d.source->stats().resumes, 2);
  EXPECT_EQ(d.source->stats().retries, 2);  // the cuts; not the request after the last range
  EXPECT_EQ(d.source->size_hint(), -1) << "a size no answer stated";
  const std::vector<std::string> log = d.server->Log(4);
  ASSERT_EQ(log.size(), 4u);
  EXPECT_THAT(log[2], HasSubstr("\"range\": \"bytes=150000-\""));
  EXPECT_THAT(log[3], HasSubstr(absl::StrCat("\"range\": \"bytes=", file.size(), "-\"")));
  EXPECT_THAT(log[3], HasSubstr("\"status\": 416"));
}

// A server that answers in parts of at most 100,000 bytes, the first request (no Range) with a 206
// of the first part: the stated total, not the part's end, is where the file ends, and each whole
// part is followed at once by a request for the next (no retry waited for). The first part was
// taken for the whole file, and published as the shard (exit 0).
TEST(HttpSource, RangesOfAServerThatAnswersInPartsAreFollowedToTheStatedTotal) {
  Download d;
  ASSERT_NO_FATAL_FAILURE(Fetch({"--cap-ranges", "100000"}, &d));
  ASSERT_TRUE(d.bytes.ok()) << d.bytes.status();
  const std::string file = ReadFile(kSamples + "/01.jsonl.zst");
  ASSERT_GT(file.size(), 700000u);
  EXPECT_EQ(*d.bytes, file);
  EXPECT_EQ(d.source->size_hint(), static_cast<int64_t>(file.size()));
  const int parts = static_cast<int>((file.size() + 99999) / 100000);
  EXPECT_EQ(d.source->stats().requests, parts);
  EXPECT_EQ(d.source->stats().retries, 0);
  const std::vector<std::string> log = d.server->Log(parts);
  ASSERT_EQ(log.size(), static_cast<size_t>(parts));
  EXPECT_THAT(log[0], HasSubstr("\"range\": null"));
  EXPECT_THAT(log[0], HasSubstr("\"status\": 206"));
  EXPECT_THAT(log[1], HasSubstr("\"range\": \"bytes=100000-\""));
  // A 206 of the whole file ("bytes 0-750650/750651") is the file: one request.
  Download whole;
  ASSERT_NO_FATAL_FAILURE(Fetch({"--cap-ranges", "1000000"}, &whole));
  ASSERT_TRUE(whole.bytes.ok()) << whole.bytes.status();
  EXPECT_EQ(*whole.bytes, file);
  EXPECT_EQ(whole.source->stats().requests, 1);
}

// The same parts with no total stated ("bytes 0-99999/*"): each part's end says only that it ends
// there, so the next part is asked for, and the 416 after the last (without the size) ends the
// file. The first part was taken for the whole file.
TEST(HttpSource, PartsOfUnstatedTotalAreFollowedUntilA416) {
  Download d;
  ASSERT_NO_FATAL_FAILURE(Fetch({"--cap-ranges", "100000", "--unknown-total"}, &d));
  ASSERT_TRUE(d.bytes.ok()) << d.bytes.status();
  const std::string file = ReadFile(kSamples + "/01.jsonl.zst");
  EXPECT_EQ(*d.bytes, file);
  const int parts = static_cast<int>((file.size() + 99999) / 100000);
  EXPECT_EQ(d.source->stats().requests, parts + 1);  // and the 416
  EXPECT_EQ(d.source->stats().retries, 0);
}

// A 206 whose range ends before it starts ("bytes 0--1/*") is no part of any file: the shard
// restarts. Its first part, of unreadable end, was taken for the whole file (exit 0).
TEST(HttpSource, ARangeThatEndsBeforeItStartsRequiresRestart) {
  Download d;
  ASSERT_NO_FATAL_FAILURE(
      Fetch({"--cap-ranges", "100000", "--unknown-total", "--range-end-minus-one"}, &d));
  ASSERT_FALSE(d.bytes.ok()) << "a part of unreadable end settled the download";
  EXPECT_TRUE(IsRestartRequired(d.bytes.status())) << d.bytes.status();
  EXPECT_THAT(d.message(), HasSubstr("the server sent a range from byte 0 to -1, which is none"));
}

// A 206 whose Content-Range cannot be read ("bytes=N-M", a request's syntax): restarted as a
// range that does not start where asked, and said as what it is (it read "a range starting at -1").
TEST(HttpSource, APartWithoutAReadableContentRangeRequiresRestart) {
  Download d;
  ASSERT_NO_FATAL_FAILURE(
      Fetch({"--content-range-garbage", "--plan", "01.jsonl.zst=drop:100000"}, &d));
  ASSERT_FALSE(d.bytes.ok()) << "a part of unreadable range was spliced in";
  EXPECT_TRUE(IsRestartRequired(d.bytes.status())) << d.bytes.status();
  EXPECT_THAT(d.message(), HasSubstr("asked for bytes from 100000, the server sent a part (206) "
                                     "without a readable Content-Range"));
}

// An answer in a content coding other than the file's own (a server ignoring Accept-Encoding:
// identity) fails the shard at once, naming the header: first answers and resumes alike (a gzip'd
// resume was spliced in and failed the zstd decoder as damage of the file). Content-Encoding: zstd
// is a .zst labelled as what it is: its bytes are the file's.
TEST(HttpSource, AnAnswerInAContentCodingIsRefusedNamingIt) {
  for (const bool resumed : {false, true}) {
    SCOPED_TRACE(resumed ? "resumed" : "first answer");
    Download d;
    std::vector<std::string> args = {"--content-encoding", resumed ? "gzip" : "gzip!"};
    if (resumed) args.insert(args.end(), {"--plan", "01.jsonl.zst=drop:100000"});
    ASSERT_NO_FATAL_FAILURE(Fetch(args, &d));
    ASSERT_FALSE(d.bytes.ok()) << "an answer in gzip was taken for the file's bytes";
    EXPECT_EQ(d.bytes.status().code(), absl::StatusCode::kFailedPrecondition) << d.bytes.status();
    EXPECT_FALSE(IsRestartRequired(d.bytes.status()));
    EXPECT_THAT(d.message(), HasSubstr("/01.jsonl.zst: the server answered in a content coding "
                                       "(Content-Encoding: gzip)"));
    EXPECT_EQ(d.message().find("to a request for bytes from 100000") != std::string::npos, resumed);
    EXPECT_EQ(d.server->Log(resumed ? 2 : 1).size(), resumed ? 2u : 1u);
  }
  // The file's own bytes under any name of identity (libcurl's "none", a list of them) or zstd.
  for (const char* coding : {"zstd!", "none!", "Identity!", "identity, none!"}) {
    SCOPED_TRACE(coding);
    Download d;
    ASSERT_NO_FATAL_FAILURE(Fetch({"--content-encoding", coding}, &d));
    ASSERT_TRUE(d.bytes.ok()) << d.bytes.status();
    EXPECT_EQ(*d.bytes, ReadFile(kSamples + "/01.jsonl.zst"));
  }
  // A list with a coding in it is refused too.
  Download d;
  ASSERT_NO_FATAL_FAILURE(Fetch({"--content-encoding", "identity, gzip!"}, &d));
  ASSERT_FALSE(d.bytes.ok()) << "an answer in gzip was taken for the file's bytes";
  EXPECT_THAT(d.message(), HasSubstr("(Content-Encoding: identity, gzip)"));
}

// A 416 that does not state the file's size cannot settle a download of unknown length (a server
// that wrongly refuses the range would have the bytes so far taken for the whole file), nor is it
// an error to fail the shard on: the shard restarts, and a fresh download meets no cut.
TEST(HttpSource, A416WithoutTheFilesSizeRequiresRestartForEitherLength) {
  const std::string size = std::to_string(ReadFile(kSamples + "/01.jsonl.zst").size());
  for (const bool chunked : {true, false}) {
    testing::ScopedTempDir dir("pileprep-fetch");
    const std::string shorter = dir.path() + "/01-shorter.jsonl.zst";
    testing::WriteFile(shorter, ReadFile(kSamples + "/01.jsonl.zst").substr(0, 50000));
    // Unknown length: cut after every byte, the resume answered 416. Known: the file replaced by a
    // shorter one after 100000 bytes arrived.
    std::vector<std::string> args = {"--unknown-total", "--ignore-if-range"};
    if (chunked) {
      args.insert(args.end(), {"--chunked", "--plan", "01.jsonl.zst=drop:" + size});
    } else {
      args.insert(args.end(),
                  {"--plan", "01.jsonl.zst=drop:100000", "--change", "01.jsonl.zst=2:" + shorter});
    }
    Download d;
    ASSERT_NO_FATAL_FAILURE(Fetch(args, &d));
    ASSERT_FALSE(d.bytes.ok()) << (chunked ? "unknown length: " : "known length: ")
                               << "a 416 without a size settled the download";
    EXPECT_TRUE(IsRestartRequired(d.bytes.status())) << d.bytes.status();
    EXPECT_THAT(d.message(), HasSubstr("answered 416 without the file's size"));
    EXPECT_THAT(d.message(), HasSubstr(chunked ? "nothing proves the " + size + " bytes so far"
                                               : "no longer the " + size + " bytes"));
    const std::vector<std::string> log = d.server->Log(2);
    ASSERT_EQ(log.size(), 2u);
    EXPECT_THAT(log[1], HasSubstr("\"status\": 416"));
  }
}

TEST(HttpSource, StalledTransferIsDroppedByTheLowSpeedLimitAndResumed) {
  FetchOptions o = FastOptions();
  o.low_speed_limit = 1000;
  o.low_speed_time_s = 1;
  Download d;
  ASSERT_NO_FATAL_FAILURE(Fetch({"--plan", "01.jsonl.zst=stall:100000:30"}, &d, "01.jsonl.zst", o));
  ASSERT_TRUE(d.bytes.ok()) << d.bytes.status();
  EXPECT_EQ(*d.bytes, ReadFile(kSamples + "/01.jsonl.zst"));
  EXPECT_EQ(d.source->stats().resumes, 1);
}

TEST(HttpSource, CancelFlagEndsAReadBlockedOnAStalledDownload) {
  // The server stalls for 30 s after 100,000 bytes; the low-speed limit (60 s) would wait longer.
  auto server = FaultServer::Start(kSamples, {"--plan", "01.jsonl.zst=stall:100000:30"});
  ASSERT_TRUE(server.ok());
  std::atomic<bool> cancel{false};
  FetchOptions o = FastOptions();
  o.low_speed_time_s = 60;
  o.cancel = &cancel;
  auto source = OpenHttpSource((*server)->Url("01.jsonl.zst"), o);
  ASSERT_TRUE(source.ok());
  ASSERT_NO_FATAL_FAILURE(ReadAtLeast(**source, 100000));
  std::vector<char> buf(1 << 16);
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancel.store(true);
  });
  const auto start = std::chrono::steady_clock::now();
  auto n = (*source)->Read(buf.data(), buf.size());
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  canceller.join();
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), absl::StatusCode::kCancelled);
  EXPECT_LT(waited, 5.0);
}

TEST(HttpSource, CancelFlagEndsReadsOfADownloadThatKeepsDelivering) {
  // Bytes keep coming (200 kB/s: the file would take seconds more), so no Read waits in vain for
  // 0.1 s: the flag was once asked only then, and the download ran to its end after it was set.
  auto server = FaultServer::Start(kSamples, {"--rate", "200000"});
  ASSERT_TRUE(server.ok());
  std::atomic<bool> cancel{false};
  FetchOptions o = FastOptions();
  o.cancel = &cancel;
  auto source = OpenHttpSource((*server)->Url("01.jsonl.zst"), o);
  ASSERT_TRUE(source.ok());
  ASSERT_NO_FATAL_FAILURE(ReadAtLeast(**source, 100000));
  std::vector<char> buf(1 << 16);
  cancel.store(true);
  auto n = (*source)->Read(buf.data(), buf.size());
  ASSERT_FALSE(n.ok()) << "read " << *n << " more bytes after the cancel flag was set";
  EXPECT_EQ(n.status().code(), absl::StatusCode::kCancelled);
  EXPECT_LT((*source)->stats().bytes_delivered, ReadFile(kSamples + "/01.jsonl.zst").size());
}

TEST(HttpSource, NegativeCountsOrTimesAreRefusedAtOnce) {
  // max_retries -1 once gave "gave up after -1 retries"; a negative backoff retried at once.
  for (int field = 0; field < 3; ++field) {
    FetchOptions o = FastOptions();
    if (field == 0) o.max_retries = -1;
    if (field == 1) o.backoff_initial_s = -1;
    if (field == 2) o.low_speed_time_s = -5;
    auto source = OpenHttpSource("http://127.0.0.1:9/00.jsonl.zst", o);
    ASSERT_FALSE(source.ok()) << field;
    EXPECT_EQ(source.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(source.status().message(), HasSubstr("must be 0 or more"));
  }
}

TEST(HttpSource, PersistentServerErrorsGiveUpAfterMaxRetries) {
  FetchOptions o = FastOptions();
  o.max_retries = 2;
  Download d;
  ASSERT_NO_FATAL_FAILURE(Fetch({"--plan", "01.jsonl.zst=500,500,500,500"}, &d, "01.jsonl.zst", o));
  ASSERT_FALSE(d.bytes.ok());
  EXPECT_EQ(d.bytes.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(d.message(), HasSubstr("HTTP 500"));
  EXPECT_THAT(d.message(), HasSubstr("gave up after 2 retries"));
  EXPECT_EQ(d.server->Log(3).size(), 3u);
}

TEST(HttpSource, QueueBoundsMemoryWhenTheConsumerIsSlow) {
  auto server = FaultServer::Start(kSamples, {});
  ASSERT_TRUE(server.ok());
  FetchOptions o = FastOptions();
  o.queue_bytes = 64 << 10;
  auto source = OpenHttpSource((*server)->Url("00.jsonl.zst"), o);
  ASSERT_TRUE(source.ok());
  // Wait (up to 20 s, for a loaded machine or a sanitizer) until the download has started and then
  // stopped growing for 300 ms: the queue is full, and the download waits on the consumer.
  uint64_t delivered = 0;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const uint64_t now = (*source)->stats().bytes_delivered;
    if (now > 0 && now == delivered) break;
    delivered = now;
  }
  EXPECT_LE((*source)->stats().bytes_delivered, (64u << 10) + (256u << 10));
  EXPECT_GE((*source)->stats().bytes_delivered, 32u << 10);
  auto bytes = Drain(**source);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, ReadFile(kSamples + "/00.jsonl.zst"));
}

TEST(HttpSource, DestroyingMidDownloadCancelsQuickly) {
  auto server = FaultServer::Start(kSamples, {"--plan", "00.jsonl.zst=stall:1000:30"});
  ASSERT_TRUE(server.ok());
  auto source = OpenHttpSource((*server)->Url("00.jsonl.zst"), FastOptions());
  ASSERT_TRUE(source.ok());
  // Mid-download: the first 1000 bytes have come (then the server stalls for 30 s).
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       (*source)->stats().bytes_delivered < 1000 && std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE((*source)->stats().bytes_delivered, 1000u);
  const auto start = std::chrono::steady_clock::now();
  source->reset();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
}

// Destroyed while it waits to retry (a 503 asking for 30 s): the download thread, woken, must
// end. It once locked its mutex twice there and hung the process: a shard failing for another
// reason during a retry wait, or a signal, never got past the source's destructor.
TEST(HttpSource, DestroyingDuringARetryWaitEndsQuickly) {
  auto server = FaultServer::Start(kSamples, {"--plan", "00.jsonl.zst=503:30"});
  ASSERT_TRUE(server.ok());
  FetchOptions o = FastOptions();
  o.backoff_max_s = 10;  // Retry-After is honoured up to 10 x this: the whole 30 s
  auto source = OpenHttpSource((*server)->Url("00.jsonl.zst"), o);
  ASSERT_TRUE(source.ok());
  // In the retry wait: the 503 has been answered and counted as a retry.
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       (*source)->stats().retries < 1 && std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ((*source)->stats().retries, 1);
  // The destructor runs on a thread of its own, so that a hang fails this test instead of
  // holding it until CTest's timeout.
  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    source->reset();
    destroyed = true;
  });
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
       !destroyed && std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!destroyed) {
    destroyer.detach();
    GTEST_FAIL() << "the source's destructor did not return within 5 s of a retry wait";
  }
  destroyer.join();
}

struct KeepDroppedRecorder : FetchObserver {
  void OnKeepDropped(const std::string& url, const std::string& cause) override {
    causes.push_back(cause);
  }
  std::vector<std::string> causes;  // read after the download thread has finished
};

// A copy that cannot be kept (here its temporary cannot be created: no such directory) is given
// up; the download itself succeeds, and says why there is no copy.
TEST(HttpSource, ACopyThatCannotBeCreatedIsDroppedAndTheDownloadGoesOn) {
  const testing::ScopedTempDir dir("fetch_cache");
  FetchOptions o = FastOptions();
  o.cache_path = dir.path() + "/missing/01.jsonl.zst";
  auto server = FaultServer::Start(kSamples, {});
  ASSERT_TRUE(server.ok());
  KeepDroppedRecorder recorder;
  auto source = OpenHttpSource((*server)->Url("01.jsonl.zst"), o, &recorder);
  ASSERT_TRUE(source.ok()) << source.status();
  auto bytes = Drain(**source);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, ReadFile(kSamples + "/01.jsonl.zst"));
  EXPECT_THAT((*source)->stats().keep_error, HasSubstr("01.jsonl.zst.pileprep-tmp: cannot create"));
  ASSERT_EQ(recorder.causes.size(), 1u);
  EXPECT_EQ(recorder.causes[0], (*source)->stats().keep_error);
}

// The same when the copy is complete but cannot take its name (here a directory holds it): the
// download succeeds, the temporary is removed.
TEST(HttpSource, ACopyThatCannotBeRenamedIsDroppedAndTheDownloadSucceeds) {
  const testing::ScopedTempDir dir("fetch_cache");
  FetchOptions o = FastOptions();
  o.cache_path = dir.path() + "/01.jsonl.zst";
  std::filesystem::create_directories(o.cache_path + "/occupied");
  Download d;
  ASSERT_NO_FATAL_FAILURE(Fetch({}, &d, "01.jsonl.zst", o));
  ASSERT_TRUE(d.bytes.ok()) << d.bytes.status();
  EXPECT_EQ(*d.bytes, ReadFile(kSamples + "/01.jsonl.zst"));
  EXPECT_THAT(d.source->stats().keep_error, HasSubstr("keeping the download (rename"));
  EXPECT_FALSE(std::filesystem::exists(o.cache_path + ".pileprep-tmp"));
}

TEST(HttpSource, CacheFileAppearsOnlyWhenComplete) {
  const testing::ScopedTempDir dir("fetch_cache");
  FetchOptions o = FastOptions();
  o.cache_path = dir.path() + "/01.jsonl.zst";
  Download d;
  ASSERT_NO_FATAL_FAILURE(Fetch({"--plan", "01.jsonl.zst=drop:100000"}, &d, "01.jsonl.zst", o));
  ASSERT_TRUE(d.bytes.ok()) << d.bytes.status();
  EXPECT_EQ(ReadFile(o.cache_path), ReadFile(kSamples + "/01.jsonl.zst"));
  EXPECT_FALSE(std::filesystem::exists(o.cache_path + ".pileprep-tmp"));
}

TEST(HttpSource, ConnectionRefusedIsRetriedThenReportedNamingTheCause) {
  FetchOptions o = FastOptions();
  o.max_retries = 1;
  auto source = OpenHttpSource("http://127.0.0.1:1/00.jsonl.zst", o);
  ASSERT_TRUE(source.ok());
  auto bytes = Drain(**source);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*source)->stats().requests, 2);
  // The message names the URL, the cause (libcurl's detail: which host and port refused) and that
  // it gave up, not merely that the download failed.
  const std::string message(bytes.status().message());
  EXPECT_THAT(message, HasSubstr("http://127.0.0.1:1/00.jsonl.zst: curl: "));
  EXPECT_THAT(message, HasSubstr("127.0.0.1 port 1"));
  EXPECT_THAT(message, ::testing::AnyOf(HasSubstr("Couldn't connect"), HasSubstr("refused")));
  EXPECT_THAT(message, HasSubstr("gave up after 1 retries without progress, at byte 0"));
  EXPECT_THAT(message, HasSubstr((*source)->stats().last_error));
}

// Records each OnRetry with the time it came.
struct RetryRecorder : FetchObserver {
  void OnRetry(const std::string& url, int attempt, double delay_s, uint64_t resume_from,
               const std::string& cause) override {
    std::lock_guard<std::mutex> lock(mu);
    at.push_back(std::chrono::steady_clock::now());
    attempts.push_back(attempt);
    delays.push_back(delay_s);
  }
  std::mutex mu;
  std::vector<std::chrono::steady_clock::time_point> at;
  std::vector<int> attempts;
  std::vector<double> delays;
};

// HTTP 429 (Too Many Requests) is retried as 5xx are; its Retry-After is honoured.
TEST(HttpSource, A429IsRetriedAfterItsRetryAfter) {
  for (const bool empty_body : {false, true}) {
    std::vector<std::string> args = {"--plan", "01.jsonl.zst=429:1"};
    if (empty_body) args.push_back("--empty-error-bodies");
    const auto start = std::chrono::steady_clock::now();
    Download d;
    ASSERT_NO_FATAL_FAILURE(Fetch(args, &d));
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(d.bytes.ok()) << d.bytes.status() << " (empty body: " << empty_body << ")";
    EXPECT_EQ(*d.bytes, ReadFile(kSamples + "/01.jsonl.zst"));
    // Retry-After: 1 rather than the 20 ms backoff (at most 0.1 s: FastOptions).
    EXPECT_GE(took, 0.9) << "empty body: " << empty_body;
    EXPECT_EQ(d.source->stats().requests, 2);
    EXPECT_EQ(d.source->stats().retries, 1);
    const std::vector<std::string> log = d.server->Log(2);
    ASSERT_EQ(log.size(), 2u);
    EXPECT_THAT(log[0], HasSubstr("\"status\": 429"));
    EXPECT_THAT(log[1], HasSubstr("\"status\": 200"));
  }
}

// Without Retry-After a 429 is retried all the same, after the exponential backoff.
TEST(HttpSource, A429WithoutRetryAfterIsRetriedAfterTheBackoff) {
  for (const bool empty_body : {false, true}) {
    std::vector<std::string> args = {"--plan", "01.jsonl.zst=429:none,429:none"};
    if (empty_body) args.push_back("--empty-error-bodies");
    auto server = FaultServer::Start(kSamples, args);
    ASSERT_TRUE(server.ok()) << server.status();
    RetryRecorder recorder;
    auto source = OpenHttpSource((*server)->Url("01.jsonl.zst"), FastOptions(), &recorder);
    ASSERT_TRUE(source.ok());
    auto bytes = Drain(**source);
    ASSERT_TRUE(bytes.ok()) << bytes.status() << " (empty body: " << empty_body << ")";
    EXPECT_EQ(*bytes, ReadFile(kSamples + "/01.jsonl.zst"));
    EXPECT_EQ((*source)->stats().requests, 3);
    EXPECT_EQ((*source)->stats().retries, 2);
    EXPECT_THAT((*source)->stats().last_error, HasSubstr("HTTP 429"));
    {
      std::lock_guard<std::mutex> lock(recorder.mu);  // the download thread has finished
      ASSERT_EQ(recorder.delays.size(), 2u);
      for (double delay : recorder.delays) {
        // The backoff of FastOptions (at most backoff_max_s = 0.1 s), not some default wait.
        EXPECT_GT(delay, 0);
        EXPECT_LE(delay, 0.1);
      }
    }
    const std::vector<std::string> log = (*server)->Log(3);
    ASSERT_EQ(log.size(), 3u);
    EXPECT_EQ(CountIn(log, "\"status\": 429"), 2);
  }
}

// HTTP 408 (Request Timeout) is retried as 5xx are, not failed as other 4xx.
TEST(HttpSource, A408IsRetried) {
  for (const bool empty_body : {false, true}) {
    std::vector<std::string> args = {"--plan", "01.jsonl.zst=408"};
    if (empty_body) args.push_back("--empty-error-bodies");
    Download d;
    ASSERT_NO_FATAL_FAILURE(Fetch(args, &d));
    ASSERT_TRUE(d.bytes.ok()) << d.bytes.status() << " (empty body: " << empty_body << ")";
    EXPECT_EQ(*d.bytes, ReadFile(kSamples + "/01.jsonl.zst"));
    EXPECT_EQ(d.source->stats().requests, 2);
    EXPECT_THAT(d.source->stats().last_error, HasSubstr("HTTP 408"));
    const std::vector<std::string> log = d.server->Log(2);
    ASSERT_EQ(log.size(), 2u);
    EXPECT_THAT(log[0], HasSubstr("\"status\": 408"));
  }
}

// A resumed answer (206) that goes on past the total its Content-Range gave: an error naming it,
// never a shard with bytes of something else appended. (Chunked answers: nothing but the total
// bounds the body, so the client sees every byte the server sends.)
TEST(HttpSource, MoreBytesThanTheRangesTotalIsAnError) {
  const std::string file = ReadFile(kSamples + "/01.jsonl.zst");
  Download d;
  ASSERT_NO_FATAL_FAILURE(
      Fetch({"--chunked", "--plan", "01.jsonl.zst=drop:100000,overlong:1000"}, &d));
  ASSERT_FALSE(d.bytes.ok()) << "the bytes past the end were taken as the shard's";
  EXPECT_EQ(d.bytes.status().code(), absl::StatusCode::kDataLoss) << d.bytes.status();
  EXPECT_FALSE(IsRestartRequired(d.bytes.status()));
  EXPECT_THAT(d.message(), HasSubstr("/01.jsonl.zst: the server sent more than the " +
                                     std::to_string(file.size()) +
                                     " bytes of the file (its Content-Range total)"));
  const std::vector<std::string> log = d.server->Log(2);
  ASSERT_GE(log.size(), 2u);
  EXPECT_THAT(log[1], HasSubstr("\"status\": 206"));
  EXPECT_THAT(log[1], HasSubstr("overlong:1000"));
}

// A 200 whose body goes on past its Content-Length: the file is the announced bytes and what follows
// is not read (libcurl stops at Content-Length, as HTTP/1.1 framing says, and drops the rest with
// "Excess found"), never appended to the shard. (A Content-Length too small shows as a truncated
// zstd stream; a resumed 206 past its Content-Range total is an error: the test above.)
TEST(HttpSource, BytesPastContentLengthAreNotRead) {
  const std::string file = ReadFile(kSamples + "/01.jsonl.zst");
  Download d;
  ASSERT_NO_FATAL_FAILURE(Fetch({"--plan", "01.jsonl.zst=overlong:1000"}, &d));
  ASSERT_TRUE(d.bytes.ok()) << d.bytes.status();
  EXPECT_TRUE(*d.bytes == file) << d.bytes->size() << " bytes, want " << file.size();
  const std::vector<std::string> log = d.server->Log(1);
  ASSERT_GE(log.size(), 1u);
  EXPECT_THAT(log[0], HasSubstr("overlong:1000"));  // the server did send more
}

// "--retry-wait, doubling, up to 60 s, with jitter": the k-th retry in a row waits about
// initial * 2^(k-1) (jitter may shorten it), and the waits really happen, so the times between
// attempts grow.
TEST(HttpSource, BackoffDoublesFromOneFailureToTheNext) {
  FetchOptions o = FastOptions();
  o.backoff_initial_s = 0.1;
  o.backoff_max_s = 60;
  o.max_retries = 10;
  auto server = FaultServer::Start(kSamples, {"--plan", "01.jsonl.zst=500,500,500,500"});
  ASSERT_TRUE(server.ok()) << server.status();
  RetryRecorder recorder;
  auto source = OpenHttpSource((*server)->Url("01.jsonl.zst"), o, &recorder);
  ASSERT_TRUE(source.ok());
  auto bytes = Drain(**source);
  const auto end = std::chrono::steady_clock::now();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  std::lock_guard<std::mutex> lock(recorder.mu);  // the download thread has finished
  ASSERT_EQ(recorder.delays.size(), 4u);
  for (size_t k = 0; k < 4; ++k) {
    const double base = 0.1 * (1 << k);
    EXPECT_EQ(recorder.attempts[k], static_cast<int>(k + 1));
    // Generous: jitter within [base/4, 1.5 base]; a backoff that did not double leaves the fourth
    // wait at most 0.15 s, below 0.2.
    EXPECT_GE(recorder.delays[k], base / 4) << "retry " << k + 1;
    EXPECT_LE(recorder.delays[k], base * 1.5) << "retry " << k + 1;
  }
  // The time from one retry's announcement to the next (or to the end) is its wait plus a request.
  std::vector<double> gaps;
  for (size_t k = 0; k < 4; ++k) {
    const auto next = k + 1 < 4 ? recorder.at[k + 1] : end;
    gaps.push_back(std::chrono::duration<double>(next - recorder.at[k]).count());
    EXPECT_GE(gaps[k], recorder.delays[k] - 0.002) << "retry " << k + 1 << " did not wait";
  }
  // The attempts come further apart. With the backoff as built (jitter in [base/2, base]) the
  // fourth wait is at least 0.4 s, the first two at most 0.1 and 0.2 s: a margin of 0.2 s or more
  // for what a loaded machine adds to a request.
  EXPECT_GT(gaps[3], gaps[0]);
  EXPECT_GT(gaps[3], gaps[1]);
}

// The doubling stops at backoff_max_s.
TEST(HttpSource, BackoffStopsGrowingAtItsCap) {
  FetchOptions o = FastOptions();
  o.backoff_initial_s = 0.05;
  o.backoff_max_s = 0.1;
  o.max_retries = 10;
  RetryRecorder recorder;
  auto server = FaultServer::Start(kSamples, {"--plan", "01.jsonl.zst=500,500,500,500,500,500"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto source = OpenHttpSource((*server)->Url("01.jsonl.zst"), o, &recorder);
  ASSERT_TRUE(source.ok());
  auto bytes = Drain(**source);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  std::lock_guard<std::mutex> lock(recorder.mu);
  ASSERT_EQ(recorder.delays.size(), 6u);
  // Uncapped, the sixth would be 0.05 * 32 = 1.6 s before jitter.
  for (size_t k = 0; k < 6; ++k) EXPECT_LE(recorder.delays[k], 0.1) << "retry " << k + 1;
}

TEST(RedactUrl, DropsCredentialsAndQuery) {
  EXPECT_EQ(RedactUrl("https://user:pw@host/a/00.jsonl.zst?sig=x#f"),
            "https://host/a/00.jsonl.zst");
  EXPECT_EQ(RedactUrl("http://host:8080/x"), "http://host:8080/x");
  // A password holding '?' or '#': the credentials go first ("http://alice:pw/" was printed).
  EXPECT_EQ(RedactUrl("http://alice:pw?x@127.0.0.1:18081/00.jsonl.zst"),
            "http://127.0.0.1:18081/00.jsonl.zst");
  EXPECT_EQ(RedactUrl("http://alice:p#w@host/a"), "http://host/a");
  EXPECT_EQ(RedactUrl("ftp://bob:hunter2@host/pile/?sig=s"), "ftp://host/pile/");
  EXPECT_EQ(RedactUrl("https://host/a?mail=x@y/z"), "https://host/a");  // '@' past the path
  // A valid host[:port] keeps the RFC 3986 reading: the '@' is the query's.
  EXPECT_EQ(RedactUrl("https://host?sig=SECRET@evil.com"), "https://host");
  EXPECT_EQ(RedactUrl("https://host:8443#f@x"), "https://host:8443");
  EXPECT_EQ(RedactUrl("http://[::1]:8080?x=a@b"), "http://[::1]:8080");
  EXPECT_EQ(RedactUrl("http://alice:p?w@[::1]:8080/a"), "http://[::1]:8080/a");
  // A password holding '/': "pa" is no port either ("https://bob:pa/ss@host/..." was printed
  // whole).
  EXPECT_EQ(RedactUrl("https://bob:pa/ss@host/pile/00.jsonl.zst"),
            "https://host/pile/00.jsonl.zst");
  EXPECT_EQ(RedactUrl("https://bob:a/b/c@host/pile/"), "https://host/pile/");
  EXPECT_EQ(RedactUrl("http://alice:p?x/y@host/a"), "http://host/a");  // '?' then '/' in it
  // Not URLs: local paths are shown as they are (summaries, plans), an '@' and a ':' included.
  EXPECT_EQ(RedactUrl("run-10:00@node1/pile"), "run-10:00@node1/pile");
  EXPECT_EQ(RedactUrl("data@v2/train"), "data@v2/train");
  // Where such a string is refused as a URL or a directory, a password in it is masked.
  EXPECT_EQ(internal::MaskNonUrlPassword("https:/user:pw@host/x"), "https:/user:...@host/x");
  EXPECT_EQ(internal::MaskNonUrlPassword("user:pw@host/x?sig=S"), "user:...@host/x?sig=S");
  EXPECT_EQ(internal::MaskNonUrlPassword("run-10:00@node1"), "run-10:...@node1");
  EXPECT_EQ(internal::MaskNonUrlPassword("data@v2/train"), "data@v2/train");
  EXPECT_EQ(internal::MaskNonUrlPassword("host/a:b@c"), "host/a:b@c");  // '@' past the first '/'
  EXPECT_EQ(internal::MaskNonUrlPassword("file:/data/pile"), "file:/data/pile");
  for (const std::string url : {"https:/user:pw@host/x", "user:pw@host/x"}) {
    auto refused = OpenHttpSource(url, FetchOptions{});
    ASSERT_FALSE(refused.ok()) << url;
    EXPECT_THAT(refused.status().message(), ::testing::Not(HasSubstr("pw"))) << url;
  }
  // ... while a valid host[:port] keeps its path, '@' and all.
  EXPECT_EQ(RedactUrl("https://host:8443/a@b/c"), "https://host:8443/a@b/c");
  EXPECT_EQ(RedactUrl("https://host/a@b"), "https://host/a@b");
}

TEST(CheckHeader, AcceptsNameValueAndNeverEchoesTheValue) {
  EXPECT_TRUE(CheckHeader("Authorization: Bearer abc").ok());
  absl::Status s = CheckHeader("Bearer hf_secret_token");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), ::testing::Not(HasSubstr("secret")));
  EXPECT_FALSE(CheckHeader("X: a\r\nY: b").ok());
}

}  // namespace
}  // namespace pileprep
