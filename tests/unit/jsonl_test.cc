#include "pileprep/jsonl.h"

#include <simdjson.h>
#include <unistd.h>
#include <zstd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "jsonl/fast_json.h"
#include "jsonl/python_json.h"
#include "jsonl/utf8.h"

namespace pileprep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------------------------------
// Helpers

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The whole decompressed content of a .zst file (frames and skippable frames), using libzstd
// directly so this test does not depend on pileprep's zstd stage.
std::string Decompress(const std::string& path) {
  const std::string compressed = ReadFile(path);
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  std::string out;
  std::vector<char> buf(ZSTD_DStreamOutSize());
  ZSTD_inBuffer in{compressed.data(), compressed.size(), 0};
  while (in.pos < in.size) {
    ZSTD_outBuffer o{buf.data(), buf.size(), 0};
    size_t r = ZSTD_decompressStream(dctx, &o, &in);
    if (ZSTD_isError(r)) {
      ADD_FAILURE() << path << ": " << ZSTD_getErrorName(r);
      break;
    }
    out.append(buf.data(), o.pos);
  }
  for (;;) {  // flush
    ZSTD_outBuffer o{buf.data(), buf.size(), 0};
    size_t r = ZSTD_decompressStream(dctx, &o, &in);
    out.append(buf.data(), o.pos);
    if (ZSTD_isError(r) || o.pos == 0) break;
  }
  ZSTD_freeDCtx(dctx);
  return out;
}

uint64_t Fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// One line of tests/data/jsonl/*.expected (written by make_expected.py from Python's json.loads).
struct Expected {
  uint64_t line = 0;
  std::string outcome;  // "ok" or a BadRecordKind name
  uint64_t size = 0;
  uint64_t digest = 0;
  uint64_t utf8_fixes = 0;
  uint64_t surrogate_fixes = 0;
};

std::vector<Expected> ParseExpected(const std::string& content) {
  std::vector<Expected> out;
  std::istringstream in(content);
  std::string row;
  while (std::getline(in, row)) {
    std::vector<std::string> f;
    std::istringstream cols(row);
    std::string col;
    while (std::getline(cols, col, '\t')) f.push_back(col);
    if (f.size() != 6) {
      ADD_FAILURE() << "bad expectation row: " << row;
      continue;
    }
    out.push_back({std::stoull(f[0]), f[1], std::stoull(f[2]), std::stoull(f[3], nullptr, 16),
                   std::stoull(f[4]), std::stoull(f[5])});
  }
  return out;
}

struct Got {
  uint64_t line;
  bool ok;
  BadRecordKind kind;
  std::string detail;
  std::vector<std::string> texts;
  uint64_t utf8_fixes;
  uint64_t surrogate_fixes;
};

// Feeds `data` to a JsonlReader in pieces of `chunk` bytes and records every callback.
std::vector<Got> ReadAll(std::string_view data, size_t chunk, JsonlOptions options = {}) {
  options.max_bad_records = -1;
  JsonlReader reader(std::move(options));
  std::vector<Got> got;
  auto cb = [&](const JsonlReader::Record& r) {
    Got g{r.line_number,
          r.ok,
          r.kind,
          r.detail,
          {},
          r.replaced_invalid_utf8,
          r.replaced_lone_surrogates};
    if (r.ok) {
      for (std::string_view t : *r.texts) g.texts.emplace_back(t);
    }
    got.push_back(std::move(g));
    return absl::OkStatus();
  };
  for (size_t pos = 0; pos < data.size(); pos += chunk) {
    absl::Status s = reader.Feed(data.substr(pos, chunk), cb);
    EXPECT_TRUE(s.ok()) << s;
  }
  absl::Status s = reader.Finish(cb);
  EXPECT_TRUE(s.ok()) << s;
  return got;
}

std::string OutcomeName(const Got& g) {
  return g.ok ? "ok" : std::string(BadRecordKindName(g.kind));
}

// Surrogate counts are per line here but per decoded object in Python, so they differ when a
// duplicate key drops a value holding one; `lines` (the inputs) make failures readable.
void ExpectMatches(const std::vector<Got>& got, const std::vector<Expected>& want,
                   const std::string& what, const std::vector<std::string>* lines = nullptr,
                   bool compare_surrogates = true) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const Got& g = got[i];
    const Expected& w = want[i];
    std::string context = what + " line " + std::to_string(w.line) + " (" + g.detail + ")";
    if (lines != nullptr) context += ": " + (*lines)[i].substr(0, 300);
    EXPECT_EQ(g.line, w.line) << context;
    EXPECT_EQ(OutcomeName(g), w.outcome) << context;
    EXPECT_EQ(g.utf8_fixes, w.utf8_fixes) << context;
    if (w.outcome == "ok") {
      ASSERT_EQ(g.texts.size(), 1u) << context;
      EXPECT_EQ(g.texts[0].size(), w.size) << context;
      EXPECT_EQ(Fnv1a64(g.texts[0]), w.digest)
          << context << "\n text: " << g.texts[0].substr(0, 200);
    }
    if (compare_surrogates && w.outcome != "invalid JSON" && w.outcome != "blank line") {
      EXPECT_EQ(g.surrogate_fixes, w.surrogate_fixes) << context;
    }
  }
}

std::string ParseText(std::string_view line) {
  JsonRecordParser p;
  JsonRecordParser::Result r = p.Parse(line);
  EXPECT_TRUE(r.ok) << line << ": " << BadRecordKindName(r.kind) << ": " << r.detail;
  return r.ok ? std::string(p.texts()[0]) : std::string("<bad>");
}

BadRecordKind ParseKind(std::string_view line, std::string* detail = nullptr) {
  JsonRecordParser p;
  JsonRecordParser::Result r = p.Parse(line);
  EXPECT_FALSE(r.ok) << line;
  if (detail != nullptr) *detail = r.detail;
  return r.kind;
}

// ---------------------------------------------------------------------------------------------------
// ForEachLine

std::vector<std::string> Lines(std::string_view chunk) {
  std::vector<std::string> out;
  ForEachLine(chunk, [&](std::string_view line) { out.emplace_back(line); });
  return out;
}

TEST(ForEachLine, SplitsOnNewlineAndStripsOneCarriageReturn) {
  EXPECT_THAT(Lines("a\nb\r\nc"), ElementsAre("a", "b", "c"));
  EXPECT_THAT(Lines("a\r\r\n"), ElementsAre("a\r"));
  EXPECT_THAT(Lines("a\rb\n"), ElementsAre("a\rb"));  // a lone CR is no line break
}

TEST(ForEachLine, EmptyLinesCountButAnEmptyFinalPieceDoesNot) {
  EXPECT_THAT(Lines(""), ElementsAre());
  EXPECT_THAT(Lines("\n"), ElementsAre(""));
  EXPECT_THAT(Lines("\n\n"), ElementsAre("", ""));
  EXPECT_THAT(Lines("x\n"), ElementsAre("x"));
  EXPECT_THAT(Lines("x\n\r"), ElementsAre("x", ""));
}

// ---------------------------------------------------------------------------------------------------
// UTF-8 repair and surrogate rewriting

std::string Repaired(std::string_view in, uint64_t* n = nullptr) {
  std::string out;
  uint64_t count = internal::AppendUtf8Replacing(in, &out);
  if (n != nullptr) *n = count;
  return out;
}

TEST(Utf8Repair, ReplacesEachMaximalInvalidSubpartLikePython) {
  // Expected values from Python: bytes.decode('utf-8', 'replace').
  const std::string r = "\xEF\xBF\xBD";
  uint64_t n = 0;
  EXPECT_EQ(Repaired("abc", &n), "abc");
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(Repaired("\xC0\xAF", &n), r + r);  // overlong: C0 never starts a character
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(Repaired("\xE0\x80\xAF"), r + r + r);          // E0 needs A0..BF next
  EXPECT_EQ(Repaired("\xED\xA0\x80"), r + r + r);          // CESU-8 surrogate
  EXPECT_EQ(Repaired("\xF4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(Repaired("\xF8\x88\x80\x80\x80"), r + r + r + r + r);
  EXPECT_EQ(Repaired("\xE6\x97 x"), r + " x");                  // truncated 3-byte: one U+FFFD
  EXPECT_EQ(Repaired("\xF0\x9F\x98"), r);                       // truncated 4-byte at the end
  EXPECT_EQ(Repaired("\xF0\x9F\x98\xC3\xA9"), r + "\xC3\xA9");  // truncated, then a valid char
  EXPECT_EQ(Repaired("caf\xE9!"), "caf" + r + "!");
  EXPECT_EQ(Repaired("\x80\xBF"), r + r);
  EXPECT_EQ(Repaired("\xEF\xBF\xBD\xF4\x8F\xBF\xBF\xF0\x9F\x98\x80"),
            "\xEF\xBF\xBD\xF4\x8F\xBF\xBF\xF0\x9F\x98\x80");
  EXPECT_EQ(Repaired(std::string_view("a\0b", 3)), std::string("a\0b", 3));
}

// The rewrite reads up to 32 bytes past the end (simdjson's padding holds them).
std::string Rewritten(const std::string& s, uint64_t* n = nullptr) {
  std::vector<char> padded(s.begin(), s.end());
  padded.resize(s.size() + 64, 'x');
  uint64_t count = internal::RewriteLoneSurrogateEscapes(padded.data(), s.size());
  if (n != nullptr) *n = count;
  return std::string(padded.data(), s.size());
}

TEST(SurrogateRewrite, LoneAndMisorderedSurrogatesBecomeReplacementEscapes) {
  uint64_t n = 0;
  EXPECT_EQ(Rewritten(R"(\ud800)", &n), R"(\ufffd)");
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(Rewritten(R"(\udc00\ud800)", &n), R"(\ufffd\ufffd)");
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(Rewritten(R"(\ud83d\ude00)", &n), R"(\ud83d\ude00)");
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(Rewritten(R"(\uD83D\uDE00)", &n), R"(\uD83D\uDE00)");
  EXPECT_EQ(Rewritten(R"(\ud800\ud800\udc00)", &n), R"(\ufffd\ud800\udc00)");
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(Rewritten(R"(\ud83d\u0041)"), R"(\ufffd\u0041)");
  EXPECT_EQ(Rewritten(R"(\ud83dx)"), R"(\ufffdx)");
}

TEST(SurrogateRewrite, IsEscapeAware) {
  uint64_t n = 0;
  EXPECT_EQ(Rewritten(R"(\\ud800)", &n), R"(\\ud800)");  // an escaped backslash, then text
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(Rewritten(R"(\\\ud800)", &n), R"(\\\ufffd)");
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(Rewritten(R"(\"\ud800)"), R"(\"\ufffd)");
  EXPECT_EQ(Rewritten(R"(\ud8G0 \ud8)"), R"(\ud8G0 \ud8)");  // malformed: left for the parser
  EXPECT_EQ(Rewritten(R"(\\\\\udfff)"), R"(\\\\\ufffd)");
  EXPECT_EQ(Rewritten(R"(\\\\\\udfff)"), R"(\\\\\\udfff)");
}

TEST(SurrogateRewrite, FindsCandidatesAtEveryOffset) {
  // Exercises the vector scan's block boundaries and the bytes past the end.
  for (size_t prefix = 0; prefix < 40; ++prefix) {
    const std::string pad(prefix, 'a');
    EXPECT_EQ(Rewritten(pad + R"(\udc00)"), pad + R"(\ufffd)") << prefix;
    EXPECT_EQ(Rewritten(pad + R"(\ud83d\ude00)" + pad), pad + R"(\ud83d\ude00)" + pad) << prefix;
    EXPECT_EQ(Rewritten(pad + R"(\ud)"), pad + R"(\ud)") << prefix;
    EXPECT_EQ(Rewritten(pad + R"(\Ud800 \uDBFF)"), pad + R"(\Ud800 \ufffd)") << prefix;
  }
}

// ---------------------------------------------------------------------------------------------------
// JsonRecordParser

TEST(JsonRecordParser, ReturnsTheTextOfACommonRecord) {
  JsonRecordParser p;
  auto r = p.Parse(R"({"text": "Hello\nworld \u00e9", "meta": {"pile_set_name": "Pile-CC"}})");
  ASSERT_TRUE(r.ok) << r.detail;
  EXPECT_THAT(p.texts(), ElementsAre("Hello\nworld \xC3\xA9"));
}

TEST(JsonRecordParser, ToleratesATrailingCarriageReturn) {
  EXPECT_EQ(ParseText("{\"text\": \"a\"}\r"), "a");
}

TEST(JsonRecordParser, BlankLinesAreOnlyJsonWhitespace) {
  EXPECT_EQ(ParseKind(""), BadRecordKind::kBlankLine);
  EXPECT_EQ(ParseKind(" \t \r"), BadRecordKind::kBlankLine);
  EXPECT_EQ(ParseKind("\r"), BadRecordKind::kBlankLine);
  EXPECT_EQ(ParseKind("\f"), BadRecordKind::kInvalidJson);  // Python: not whitespace in JSON
}

TEST(JsonRecordParser, DecodesEveryEscape) {
  EXPECT_EQ(ParseText(R"({"text": "\" \\ \/ \b \f \n \r \t"})"), "\" \\ / \b \f \n \r \t");
  EXPECT_EQ(ParseText(R"({"text": "a\u0000b"})"), std::string("a\0b", 3));
  EXPECT_EQ(ParseText(R"({"text": "\ud83d\ude00 \uD83D\uDE00"})"),
            "\xF0\x9F\x98\x80 \xF0\x9F\x98\x80");
  EXPECT_EQ(ParseText("{\"text\": \"raw DEL \x7f ok\"}"), "raw DEL \x7f ok");
}

TEST(JsonRecordParser, LoneSurrogateEscapesBecomeReplacementCharacters) {
  JsonRecordParser p;
  auto r = p.Parse(R"({"text": "a\ud800b\udc00\ud83d\ude00"})");
  ASSERT_TRUE(r.ok) << r.detail;
  EXPECT_EQ(p.texts()[0],
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD\xF0\x9F\x98\x80");
  EXPECT_EQ(r.replaced_lone_surrogates, 2u);
  r = p.Parse(R"({"text": "\\ud800"})");
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(p.texts()[0], "\\ud800");
  EXPECT_EQ(p.replaced_lone_surrogates(), 2u);
}

TEST(JsonRecordParser, RawInvalidUtf8IsReplacedBeforeParsing) {
  JsonRecordParser p;
  auto r = p.Parse("{\"text\": \"caf\xE9\"}");
  ASSERT_TRUE(r.ok) << r.detail;
  EXPECT_EQ(p.texts()[0], "caf\xEF\xBF\xBD");
  EXPECT_EQ(r.replaced_invalid_utf8, 1u);
  r = p.Parse("{\"te\xFFxt\": \"x\"}");
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.kind, BadRecordKind::kMissingKey);
  EXPECT_EQ(p.replaced_invalid_utf8(), 2u);
}

TEST(JsonRecordParser, ComparesKeysAfterUnescaping) {
  EXPECT_EQ(ParseText(R"({"te\u0078t": "x"})"), "x");
}

TEST(JsonRecordParser, LastDuplicateKeyWins) {
  EXPECT_EQ(ParseText(R"({"text": "first", "text": "second"})"), "second");
  std::string detail;
  EXPECT_EQ(ParseKind(R"({"text": "first", "text": 1})", &detail), BadRecordKind::kNotAString);
  EXPECT_EQ(ParseText(R"({"text": 1, "text": "second"})"), "second");
}

TEST(JsonRecordParser, ClassifiesStructurallyBadRecords) {
  std::string detail;
  EXPECT_EQ(ParseKind(R"({"text": "unterminated)", &detail), BadRecordKind::kInvalidJson);
  EXPECT_THAT(detail, HasSubstr("unterminated string starting at column 10"));
  EXPECT_EQ(ParseKind(R"({"text": "x",})", &detail), BadRecordKind::kInvalidJson);
  EXPECT_EQ(detail, "expecting property name enclosed in double quotes at column 14");
  EXPECT_EQ(ParseKind(R"([{"text": "x"}])", &detail), BadRecordKind::kNotAnObject);
  EXPECT_EQ(detail, "top level is an array");
  EXPECT_EQ(ParseKind(R"({"Text": "x"})", &detail), BadRecordKind::kMissingKey);
  EXPECT_EQ(detail, "no key \"text\"");
  EXPECT_EQ(ParseKind(R"({"text": 12345})", &detail), BadRecordKind::kNotAString);
  EXPECT_EQ(detail, "key \"text\" is a number");
  EXPECT_EQ(ParseKind(R"({"text": null})", &detail), BadRecordKind::kNotAString);
  EXPECT_EQ(detail, "key \"text\" is null");
}

// Python's column is a character count in the decoded line (an invalid UTF-8 sequence is one
// U+FFFD): /usr/bin/python3 json.loads gave these three columns.
TEST(JsonRecordParser, ErrorColumnsCountCharactersAsPythonDoes) {
  std::string detail;
  EXPECT_EQ(ParseKind("{\"text\":\"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\", x}", &detail),
            BadRecordKind::kInvalidJson);
  EXPECT_EQ(detail, "expecting property name enclosed in double quotes at column 16");
  EXPECT_EQ(ParseKind("{\"text\":\"\xff\", x}", &detail), BadRecordKind::kInvalidJson);
  EXPECT_EQ(detail, "expecting property name enclosed in double quotes at column 14");
  EXPECT_EQ(ParseKind("{\"text\":\"\xf0\x9f\x98\x80\" \"x\"}", &detail),
            BadRecordKind::kInvalidJson);
  EXPECT_EQ(detail, "expecting ',' delimiter at column 13");
  // A bad \u escape is placed at its 'u', another bad escape at its backslash, as Python does.
  EXPECT_EQ(ParseKind(R"({"text":"\u41"})", &detail), BadRecordKind::kInvalidJson);
  EXPECT_EQ(detail, "invalid \\uXXXX escape at column 11");
  EXPECT_EQ(ParseKind(R"({"text":"\u004"})", &detail), BadRecordKind::kInvalidJson);
  EXPECT_EQ(detail, "invalid \\uXXXX escape at column 11");
  EXPECT_EQ(ParseKind(R"({"text":"\ud800\uzzzz"})", &detail), BadRecordKind::kInvalidJson);
  EXPECT_EQ(detail, "invalid \\uXXXX escape at column 17");
  EXPECT_EQ(ParseKind(R"({"text":"ab\q"})", &detail), BadRecordKind::kInvalidJson);
  EXPECT_EQ(detail, "invalid \\escape at column 12");
}

TEST(JsonRecordParser, RejectsRawControlCharactersInStringsLikePythonStrictMode) {
  std::string detail;
  EXPECT_EQ(ParseKind("{\"text\": \"a\tb\"}", &detail), BadRecordKind::kInvalidJson);
  EXPECT_EQ(detail, "invalid control character at column 12");
  EXPECT_EQ(ParseKind(std::string("{\"text\": \"a\0b\"}", 15)), BadRecordKind::kInvalidJson);
}

TEST(JsonRecordParser, RejectsALeadingByteOrderMarkLikePython) {
  EXPECT_EQ(ParseKind("\xEF\xBB\xBF{\"text\": \"x\"}"), BadRecordKind::kInvalidJson);
}

TEST(JsonRecordParser, AcceptsPythonsNumberExtensions) {
  EXPECT_EQ(ParseText(R"({"text": "x", "a": NaN, "b": Infinity, "c": -Infinity})"), "x");
  EXPECT_EQ(ParseText(R"({"text": "x", "n": 123456789012345678901234567890, "f": 1e400})"), "x");
  EXPECT_EQ(ParseKind(R"({"text": NaN})"), BadRecordKind::kNotAString);
  // int() refuses more than 4300 digits.
  EXPECT_EQ(ParseText("{\"text\": \"x\", \"n\": " + std::string(4300, '7') + "}"), "x");
  EXPECT_EQ(ParseKind("{\"text\": \"x\", \"n\": " + std::string(4301, '7') + "}"),
            BadRecordKind::kInvalidJson);
  EXPECT_EQ(ParseText("{\"text\": \"x\", \"n\": " + std::string(5000, '7') + ".5}"), "x");
  EXPECT_EQ(ParseText("{\"n\": 1e999999, \"text\": \"after\"}"), "after");
}

TEST(JsonRecordParser, DeepNestingIsInvalidNotACrash) {
  const std::string deep =
      "{\"text\": \"x\", \"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  std::string detail;
  EXPECT_EQ(ParseKind(deep, &detail), BadRecordKind::kInvalidJson);
  EXPECT_THAT(detail, HasSubstr("nesting too deep"));
  // The same depth limit holds on the Python-emulation path (NaN sends the line there).
  const std::string deep_nan =
      "{\"text\": NaN, \"a\": " + std::string(5000, '[') + std::string(5000, ']') + "}";
  EXPECT_EQ(ParseKind(deep_nan), BadRecordKind::kInvalidJson);
  const std::string ok =
      "{\"text\": \"x\", \"a\": " + std::string(1000, '[') + std::string(1000, ']') + "}";
  EXPECT_EQ(ParseText(ok), "x");
}

TEST(JsonRecordParser, SeveralKeysMustAllBePresentStrings) {
  JsonRecordParser p({.json_keys = {"b", "a"}});
  auto r = p.Parse(R"({"a": "A", "b": "B"})");
  ASSERT_TRUE(r.ok) << r.detail;
  EXPECT_THAT(p.texts(), ElementsAre("B", "A"));
  r = p.Parse(R"({"a": "A"})");
  EXPECT_EQ(r.kind, BadRecordKind::kMissingKey);
  EXPECT_EQ(r.detail, "no key \"b\"");
  r = p.Parse(R"({"a": ["A"], "b": "B"})");
  EXPECT_EQ(r.kind, BadRecordKind::kNotAString);
  EXPECT_EQ(r.detail, "key \"a\" is an array");
  r = p.Parse(R"({"a": "A", "b": "B", "b": NaN})");  // via the Python emulation
  EXPECT_EQ(r.kind, BadRecordKind::kNotAString);
  r = p.Parse(R"({"a": "A\ud800", "x": NaN, "b": "B"})");
  ASSERT_TRUE(r.ok) << r.detail;
  EXPECT_THAT(p.texts(), ElementsAre("B", "A\xEF\xBF\xBD"));
}

TEST(JsonRecordParser, LinesLongerThanTheLimitAreRefused) {
  JsonRecordParser p({.max_line_bytes = 16});
  EXPECT_TRUE(p.Parse(R"({"text": "abcd"})").ok);
  auto r = p.Parse(R"({"text": "abcde"})");
  EXPECT_EQ(r.kind, BadRecordKind::kLineTooLong);
  r = p.Parse("{\"text\": \"\xFF\xFF\xFF\"}");  // 15 bytes, 21 after repair
  EXPECT_EQ(r.kind, BadRecordKind::kLineTooLong);
}

TEST(JsonRecordParser, ReusesBuffersAcrossLinesOfVaryingLength) {
  JsonRecordParser p;
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    std::string text(rng() % (i % 10 == 0 ? 300000 : 3000), 'a' + i % 26);
    auto r = p.Parse("{\"text\": \"" + text + "\"}");
    ASSERT_TRUE(r.ok);
    ASSERT_EQ(p.texts()[0], text);
  }
  // Past 32 MiB the buffers are released at the next ordinary line and regrown when needed.
  for (size_t size : {size_t{40} << 20, size_t{10}, size_t{33} << 20, size_t{100}}) {
    std::string text(size, 'z');
    text[size / 2] = '\xFF';
    auto r = p.Parse("{\"text\": \"" + text + "\"}");
    ASSERT_TRUE(r.ok);
    ASSERT_EQ(p.texts()[0].size(), size + 2);
    ASSERT_EQ(r.replaced_invalid_utf8, 1u);
  }
}

// After a line past 32 MiB, the next ordinary line leaves no buffer sized for the huge one: not
// simdjson's document (its tape and strings, which parse only grows), not the Python emulation's
// texts (which kept the capacity of the largest text they held).
TEST(JsonRecordParser, AHugeLineLeavesNoHugeBuffersBehind) {
  JsonRecordParser p;
  // An escaped key sends the line to simdjson's DOM; NaN, which simdjson refuses, to the emulation.
  for (const std::string tail : {"", ", \"n\": NaN"}) {
    const std::string huge =
        "{\"te\\u0078t\": \"" + std::string(size_t{40} << 20, 'z') + "\"" + tail + "}";
    ASSERT_TRUE(p.Parse(huge).ok) << tail;
    EXPECT_GE(p.buffered_capacity(), size_t{40} << 20) << tail;
    ASSERT_TRUE(p.Parse("{\"te\\u0078t\": \"small\"" + tail + "}").ok) << tail;
    EXPECT_EQ(p.texts()[0], "small");
    EXPECT_LE(p.buffered_capacity(), size_t{32} << 20) << tail;
  }
}

TEST(JsonRecordParser, BadRecordMessageNamesSourceLineKindAndDetail) {
  EXPECT_EQ(BadRecordMessage("00.jsonl.zst", 1834, BadRecordKind::kInvalidJson,
                             "expecting value at column 9"),
            "00.jsonl.zst: line 1834: invalid JSON: expecting value at column 9");
  EXPECT_EQ(BadRecordMessage("x", 2, BadRecordKind::kBlankLine, ""), "x: line 2: blank line");
}

// The behaviours of simdjson 3.0.1 that shaped this stage. If one changes, revisit jsonl.cc.
TEST(SimdjsonQuirks, DomRejectsWhatPythonAcceptsAndKeepsTheFirstDuplicate) {
  simdjson::dom::parser parser;
  simdjson::dom::element e;
  for (const char* doc : {R"({"n": NaN})", R"({"n": 1e400})", R"({"n": 18446744073709551616})",
                          R"({"t": "\ud800"})"}) {
    simdjson::padded_string s{std::string(doc)};
    EXPECT_NE(parser.parse(s).get(e), simdjson::SUCCESS) << doc;
  }
  simdjson::padded_string dup{std::string(R"({"t": "first", "t": "second"})")};
  ASSERT_EQ(parser.parse(dup).get(e), simdjson::SUCCESS);
  std::string_view t;
  ASSERT_EQ(e["t"].get(t), simdjson::SUCCESS);
  EXPECT_EQ(t, "first");  // so Parse() walks the whole object and keeps the last
}

// ParsePadded relies on this one: a line with any escape that RewriteLoneSurrogateEscapes would
// rewrite, in a key or a value, never parses, so a line parsed in place needs no rewrite.
TEST(SimdjsonQuirks, DomRejectsEveryLoneOrMisorderedSurrogateEscape) {
  simdjson::dom::parser parser;
  simdjson::dom::element e;
  int checked = 0;
  for (const char* s : {R"(\ud800)", R"(\udbff)", R"(\udc00)", R"(\uDFFF)", R"(\udc00\ud800)",
                        R"(\ud83d\u0041)", R"(\ud83dx)", R"(\ud800\ud800\udc00)", R"(x\ud83d\\ude00)",
                        R"(\ud83d\ude00\ude00)"}) {
    for (const std::string& doc : {std::string(R"({"t": ")") + s + R"("})",
                                  std::string(R"({")") + s + R"(": "x"})",
                                  std::string(R"({"t": "x", "m": [")") + s + R"("]})"}) {
      uint64_t lone = 0;
      Rewritten(doc, &lone);
      ASSERT_GT(lone, 0u) << doc;
      simdjson::padded_string padded{doc};
      EXPECT_NE(parser.parse(padded).get(e), simdjson::SUCCESS) << doc;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 30);
}

// ---------------------------------------------------------------------------------------------------
// JsonlReader

TEST(JsonlReader, OneByteFeedsEqualOneBigFeed) {
  const std::string data = Decompress(std::string(PILEPREP_TEST_DATA_DIR) + "/bad/crlf.jsonl.zst") +
                           "{\"text\": \"caf\xE9\"}\r\n\n \r\n{\"text\": \"last\"}";
  std::vector<Got> big = ReadAll(data, data.size());
  std::vector<Got> small = ReadAll(data, 1);
  std::vector<Got> odd = ReadAll(data, 7);
  ASSERT_EQ(big.size(), 24u);
  ASSERT_EQ(small.size(), big.size());
  ASSERT_EQ(odd.size(), big.size());
  for (size_t i = 0; i < big.size(); ++i) {
    EXPECT_EQ(small[i].line, i + 1);
    EXPECT_EQ(small[i].ok, big[i].ok);
    EXPECT_EQ(small[i].texts, big[i].texts);
    EXPECT_EQ(odd[i].texts, big[i].texts);
    EXPECT_EQ(small[i].utf8_fixes, big[i].utf8_fixes);
  }
  EXPECT_EQ(big.back().texts[0], "last");
  EXPECT_EQ(big[20].texts[0], "caf\xEF\xBF\xBD");
  EXPECT_EQ(big[21].kind, BadRecordKind::kBlankLine);
}

TEST(JsonlReader, FailsBeyondMaxBadRecords) {
  JsonlReader reader({.max_bad_records = 2, .source_name = "s.jsonl.zst"});
  int calls = 0;
  auto cb = [&](const JsonlReader::Record&) {
    ++calls;
    return absl::OkStatus();
  };
  ASSERT_TRUE(reader.Feed("{\"text\": \"a\"}\nx\n\n", cb).ok());
  absl::Status s = reader.Feed("{\"text\": \"b\"}\n[1]\n{\"text\": \"c\"}\n", cb);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);  // as RunPipeline's
  EXPECT_EQ(s.message(),
            "s.jsonl.zst: line 5: more than 2 bad records (max_bad_records); the last: not an "
            "object: top level is an array");
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(reader.num_documents(), 2u);
  EXPECT_EQ(reader.num_bad_records(), 3u);
}

TEST(JsonlReader, StopsAtTheCallbacksError) {
  JsonlReader reader;
  int calls = 0;
  auto cb = [&](const JsonlReader::Record& r) {
    ++calls;
    return r.line_number == 2 ? absl::CancelledError("stop") : absl::OkStatus();
  };
  EXPECT_EQ(reader.Feed("{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"text\": \"c\"}\n", cb).code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(calls, 2);
}

TEST(JsonlReader, RefusesLinesLongerThanMaxLineBytes) {
  auto cb = [&](const JsonlReader::Record&) { return absl::OkStatus(); };
  const std::string ok = "{\"text\": \"abcdefghi\"}\r\n";  // 21 bytes + CR LF is fine
  const std::string too_long = "{\"text\": \"abcdefghij\"}\n";
  for (size_t chunk : {size_t{1}, size_t{5}, size_t{100}}) {
    JsonlReader reader({.max_line_bytes = 21, .source_name = "s"});
    const std::string data = ok + too_long;
    absl::Status s;
    for (size_t pos = 0; pos < data.size() && s.ok(); pos += chunk)
      s = reader.Feed(data.substr(pos, chunk), cb);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << chunk;  // as RunPipeline's
    EXPECT_EQ(s.message(), "s: line 2: line too long: more than 21 bytes (max_line_bytes)")
        << chunk;
    EXPECT_EQ(reader.num_documents(), 1u);
  }
}

// ---------------------------------------------------------------------------------------------------
// The test inputs, against Python's verdicts (tests/data/jsonl/*.expected, from make_expected.py)

struct FileCase {
  const char* path;      // under the repository
  const char* expected;  // under tests/data/jsonl
  int documents;         // from tests/data/bad/README.md
};

class JsonlFiles : public ::testing::TestWithParam<FileCase> {};

TEST_P(JsonlFiles, MatchPythonRecordForRecord) {
  const FileCase& c = GetParam();
  const std::string data = Decompress(std::string(PILEPREP_SOURCE_DIR) + "/" + c.path);
  const std::vector<Expected> want =
      ParseExpected(ReadFile(std::string(PILEPREP_TEST_DATA_DIR) + "/jsonl/" + c.expected));
  for (size_t chunk : {data.size() + 1, size_t{4093}}) {
    std::vector<Got> got = ReadAll(data, chunk);
    ExpectMatches(got, want, c.path);
    int documents = 0;
    for (const Got& g : got) documents += g.ok;
    EXPECT_EQ(documents, c.documents) << c.path;
  }
}

INSTANTIATE_TEST_SUITE_P(
    BadInputs, JsonlFiles,
    ::testing::Values(
        FileCase{"tests/data/bad/multi-frame.jsonl.zst", "multi-frame.expected", 60},
        FileCase{"tests/data/bad/skippable-frames.jsonl.zst", "skippable-frames.expected", 60},
        FileCase{"tests/data/bad/invalid-json.jsonl.zst", "invalid-json.expected", 5},
        FileCase{"tests/data/bad/missing-text.jsonl.zst", "missing-text.expected", 3},
        FileCase{"tests/data/bad/text-not-string.jsonl.zst", "text-not-string.expected", 4},
        FileCase{"tests/data/bad/invalid-utf8.jsonl.zst", "invalid-utf8.expected", 17},
        FileCase{"tests/data/bad/lone-surrogates.jsonl.zst", "lone-surrogates.expected", 11},
        FileCase{"tests/data/bad/json-escapes.jsonl.zst", "json-escapes.expected", 13},
        FileCase{"tests/data/bad/crlf.jsonl.zst", "crlf.expected", 20},
        FileCase{"tests/data/bad/crlf-lf-twin.jsonl.zst", "crlf-lf-twin.expected", 20},
        FileCase{"tests/data/bad/blank-lines.jsonl.zst", "blank-lines.expected", 10},
        FileCase{"tests/data/bad/no-final-newline.jsonl.zst", "no-final-newline.expected", 10},
        FileCase{"tests/data/bad/empty-and-tiny-texts.jsonl.zst", "empty-and-tiny-texts.expected",
                 14},
        FileCase{"tests/data/bad/long-lines.jsonl.zst", "long-lines.expected", 3},
        FileCase{"data/samples/00.jsonl.zst", "sample-00.expected", 2575},
        FileCase{"data/samples/01.jsonl.zst", "sample-01.expected", 2575}),
    [](const ::testing::TestParamInfo<FileCase>& info) {
      std::string name = info.param.expected;
      name = name.substr(0, name.find('.'));
      for (char& ch : name) {
        if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return name;
    });

TEST(JsonlFiles, CrlfEqualsItsLfTwin) {
  const std::string crlf = Decompress(std::string(PILEPREP_TEST_DATA_DIR) + "/bad/crlf.jsonl.zst");
  const std::string lf =
      Decompress(std::string(PILEPREP_TEST_DATA_DIR) + "/bad/crlf-lf-twin.jsonl.zst");
  ASSERT_NE(crlf, lf);
  std::vector<Got> a = ReadAll(crlf, crlf.size());
  std::vector<Got> b = ReadAll(lf, lf.size());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].texts, b[i].texts);
}

// ---------------------------------------------------------------------------------------------------
// Differential: the parser against Python's json.loads on mutated lines (needs /usr/bin/python3).

// Random edits that tend to hit the parser's corners: JSON punctuation, escapes, surrogates, bad
// bytes.
std::string Mutate(std::string line, std::mt19937& rng) {
  static const std::vector<std::string> kPieces = {"\"",
                                                   "\\",
                                                   ",",
                                                   ":",
                                                   "{",
                                                   "}",
                                                   "[",
                                                   "]",
                                                   " ",
                                                   "\t",
                                                   "\r",
                                                   "\x01",
                                                   "\x7f",
                                                   "\\u",
                                                   "\\ud800",
                                                   "\\udc00",
                                                   "\\ud83d\\ude00",
                                                   "\\\\",
                                                   "\\n",
                                                   "\\x",
                                                   "NaN",
                                                   "-Infinity",
                                                   "1e400",
                                                   "-0",
                                                   "01",
                                                   "1.",
                                                   ".5",
                                                   "true",
                                                   "nul",
                                                   "\xC3",
                                                   "\xA9",
                                                   "\xFF",
                                                   "\xED\xA0\x80",
                                                   "\xF0\x9F\x98\x80",
                                                   "\xEF\xBB\xBF",
                                                   "\"text\"",
                                                   "\"te\\u0078t\"",
                                                   "\"text\": 1",
                                                   "\"text\": \"dup\"",
                                                   "1" + std::string(30, '0')};
  const int edits = 1 + rng() % 3;
  for (int e = 0; e < edits; ++e) {
    const size_t pos = line.empty() ? 0 : rng() % (line.size() + 1);
    switch (rng() % 3) {
      case 0:
        line.insert(pos, kPieces[rng() % kPieces.size()]);
        break;
      case 1:
        if (!line.empty() && pos < line.size()) line.erase(pos, 1 + rng() % 3);
        break;
      default:
        if (pos < line.size()) line[pos] = kPieces[rng() % kPieces.size()][0];
        break;
    }
  }
  return line;
}

TEST(JsonRecordParserDifferential, AgreesWithPythonOnMutatedLines) {
  const char* python = "/usr/bin/python3";
  if (access(python, X_OK) != 0) GTEST_SKIP() << "no " << python;
  std::vector<std::string> seeds;
  for (const char* name : {"invalid-json", "missing-text", "text-not-string", "invalid-utf8",
                           "lone-surrogates", "json-escapes", "empty-and-tiny-texts"}) {
    const std::string data =
        Decompress(std::string(PILEPREP_TEST_DATA_DIR) + "/bad/" + name + ".jsonl.zst");
    ForEachLine(data, [&](std::string_view line) {
      if (line.size() < 400) seeds.emplace_back(line);
    });
  }
  seeds.push_back(R"({"text": "x", "a": [1, -2.5e-3, {"b": [true, false, null]}], "c": {}})");
  std::mt19937 rng(20240229);
  std::vector<std::string> lines;
  // PILEPREP_JSONL_DIFF_LINES=200000 for a longer soak.
  const char* env = std::getenv("PILEPREP_JSONL_DIFF_LINES");
  const int count = env != nullptr ? std::atoi(env) : 6000;
  for (int i = 0; i < count; ++i) {
    std::string line = Mutate(seeds[rng() % seeds.size()], rng);
    // Keep one record per line: '\n' would split it, and a trailing '\r' is a line-ending policy.
    for (char& ch : line) {
      if (ch == '\n') ch = ' ';
    }
    lines.push_back(line);
  }
  // $TMPDIR's, as the other tests' files (temp_directory_path): /tmp may not be writable.
  std::string path =
      (std::filesystem::temp_directory_path() / "pileprep_jsonl_diff_XXXXXX").string();
  const int fd = mkstemp(path.data());
  ASSERT_GE(fd, 0);
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  ASSERT_EQ(write(fd, all.data(), all.size()), static_cast<ssize_t>(all.size()));
  close(fd);
  // Quoted: the clone's path (and $TMPDIR) may hold spaces.
  const std::string command = std::string(python) + " '" + PILEPREP_TEST_DATA_DIR +
                              "/jsonl/make_expected.py' --classify '" + path + "'";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  ASSERT_EQ(pclose(pipe), 0) << command;
  unlink(path.c_str());
  std::vector<Got> got = ReadAll(all, all.size());
  int bad = 0;
  for (const Got& g : got) bad += !g.ok;
  EXPECT_GT(bad, count / 6);
  ExpectMatches(got, ParseExpected(out), "mutated", &lines, /*compare_surrogates=*/false);
}

// ParsePadded parses a line where it lies, reading the bytes after it as padding only: on every
// line of the bad inputs and on mutated ones, followed by bytes that would change the record if
// they were read as part of it, it agrees with Parse in every field.
TEST(JsonRecordParser, ParsePaddedAgreesWithParseWhateverFollowsTheLine) {
  std::vector<std::string> lines;
  for (const char* name : {"invalid-json", "missing-text", "text-not-string", "invalid-utf8",
                           "lone-surrogates", "json-escapes", "empty-and-tiny-texts", "crlf",
                           "blank-lines", "long-lines"}) {
    const std::string data =
        Decompress(std::string(PILEPREP_TEST_DATA_DIR) + "/bad/" + name + ".jsonl.zst");
    ForEachLine(data, [&](std::string_view line) { lines.emplace_back(line); });
  }
  std::mt19937 rng(20261130);
  const size_t originals = lines.size();
  for (int i = 0; i < 3000; ++i) {
    std::string line = Mutate(lines[rng() % originals].substr(0, 400), rng);
    for (char& ch : line) {
      if (ch == '\n') ch = ' ';
    }
    lines.push_back(line);
  }
  // Tails that would complete a truncated record ("}" after `{"text": "x"`) or spoil a good one.
  const std::string tails[] = {"}" + std::string(JsonRecordParser::kPadding, ' '),
                               "\"}" + std::string(JsonRecordParser::kPadding, ' '),
                               std::string(JsonRecordParser::kPadding, '\0'),
                               "\", \"x\": 1}\\ud800\\udc00\"]}\xFF\xC3 trailing" +
                                   std::string(JsonRecordParser::kPadding, '"'),
                               "\r\n{\"text\": \"next line\"}\n" +
                                   std::string(JsonRecordParser::kPadding, '\\')};
  JsonRecordParser plain, padded;
  size_t ok = 0, clean = 0;  // clean: records with nothing to repair (ParsePadded's in-place case)
  for (const std::string& line : lines) {
    const JsonRecordParser::Result want = plain.Parse(line);
    for (const std::string& tail : tails) {
      const std::string buffer = line + tail;
      const JsonRecordParser::Result got = padded.ParsePadded(std::string_view(buffer.data(), line.size()));
      const std::string context = line.substr(0, 200) + " + " + tail.substr(0, 20);
      ASSERT_EQ(got.ok, want.ok) << context;
      EXPECT_EQ(got.replaced_invalid_utf8, want.replaced_invalid_utf8) << context;
      EXPECT_EQ(got.replaced_lone_surrogates, want.replaced_lone_surrogates) << context;
      if (!want.ok) {
        EXPECT_EQ(got.kind, want.kind) << context;
        EXPECT_EQ(got.detail, want.detail) << context;
        continue;
      }
      EXPECT_EQ(padded.texts(), plain.texts()) << context;
      ++ok;
      clean += want.replaced_invalid_utf8 == 0 && want.replaced_lone_surrogates == 0;
    }
  }
  const uint64_t n = std::size(tails);
  EXPECT_EQ(plain.replaced_invalid_utf8() * n, padded.replaced_invalid_utf8());
  EXPECT_EQ(plain.replaced_lone_surrogates() * n, padded.replaced_lone_surrogates());
  EXPECT_GT(ok, 1000u);
  EXPECT_GT(clean, 500u);
}


// ---------------------------------------------------------------------------------------------------
// FastJsonExtractor (the fast path of ParsePadded)

// Extract on `line` followed by padding that would close a truncated record if it were read.
struct FastResult {
  bool taken;
  std::vector<std::string> texts;
};
FastResult Fast(const std::string& line, const std::vector<std::string>& keys = {"text"}) {
  static internal::FastJsonExtractor extractor;
  const std::string buffer = line + "\"}\"]}" + std::string(64, '"');
  // Storage of exactly the promised size: ASan would catch a write past it.
  std::vector<char> storage(line.size() + internal::FastJsonExtractor::kReadPadding);
  FastResult r{extractor.Extract(std::string_view(buffer.data(), line.size()), keys, storage.data()),
               {}};
  if (r.taken) {
    for (std::string_view t : extractor.texts()) r.texts.emplace_back(t);
  }
  return r;
}

TEST(FastJsonExtractor, TakesPlainRecordsAndDecodesLikeJsonLoads) {
  struct Case {
    std::string line;
    std::string text;
  } cases[] = {
      {R"({"text": "Hello\nworld \u00e9", "meta": {"pile_set_name": "Pile-CC"}})",
       "Hello\nworld \xC3\xA9"},
      {R"({"text": "\"\\\/\b\f\n\r\t"})", "\"\\/\b\f\n\r\t"},
      {R"({"text":"\u0000\u007f\u0080\u07ff\u0800\uffff\ud83d\ude00\uD800\uDC00\udbff\udfff"})",
       std::string("\0\x7F\xC2\x80\xDF\xBF\xE0\xA0\x80\xEF\xBF\xBF\xF0\x9F\x98\x80\xF0\x90\x80\x80"
                   "\xF4\x8F\xBF\xBF",
                   24)},
      {"{\"text\": \"raw \xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80 bytes\"}",
       "raw \xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80 bytes"},
      {R"( {"a": [1, -2.5e-3, 0, -0, 1E+9, {"b": [true, false, null, [], {}]}], "text": "", "c": "\ud800\udc00"} )",
       ""},
      {R"({"text": "first", "x": {"text": 1}, "text": "last"})", "last"},
      {"{\t\"text\"\r:\n\"" + std::string(1000, 'a') + "\\n" + std::string(15, 'b') + "\"\t}",
       std::string(1000, 'a') + "\n" + std::string(15, 'b')},
  };
  for (const Case& c : cases) {
    const FastResult r = Fast(c.line);
    ASSERT_TRUE(r.taken) << c.line;
    EXPECT_THAT(r.texts, ElementsAre(c.text)) << c.line;
  }
  const FastResult two = Fast(R"({"meta": "m\u00e9", "text": "t", "meta": "M"})", {"text", "meta"});
  ASSERT_TRUE(two.taken);
  EXPECT_THAT(two.texts, ElementsAre("t", "M"));
}

// Whatever needs a repair, an error message or Python's extensions is left to the general path:
// the fast path says "not mine", never a verdict of its own.
TEST(FastJsonExtractor, DeclinesEverythingTheGeneralPathMustDecide) {
  const std::string deep = std::string(70, '[') + std::string(70, ']');
  const std::string declined[] = {
      R"({"text": "\ud800"})",            // lone high surrogate
      R"({"text": "\udc00\ud800"})",      // misordered
      R"({"text": "\udc00\udc00"})",      // two low ones
      R"({"text": "\ud800\u0041"})",      // high then not low
      R"({"text": "\ud800\n"})",          //
      "{\"text\": \"\xFF\"}",             // invalid UTF-8
      "{\"text\": \"\xED\xA0\x80\"}",     // encoded surrogate
      "\xEF\xBB\xBF{\"text\": \"a\"}",    // byte order mark
      R"({"te\u0078t": "a"})",            // key spelled with an escape
      R"({"txt": "a"})",                  // missing
      R"({"text": 1})",                   // not a string
      R"({"text": "a", "text": null})",   // the last one is not a string
      R"({"text": "a", "n": NaN})",       // Python extensions
      R"({"text": "a", "n": -Infinity})",
      R"({"text": "a", "n": )" + std::string(300, '1') + "}",  // perhaps over CPython's int limit
      R"({"text": "a", "n": )" + deep + "}",                   // deeper than kMaxDepth
      "{\"text\": \"a\tb\"}",             // raw control character
      R"({"text": "\x"})",                // unknown escape
      R"({"text": "\u12G4"})",            // bad hex
      R"({"text": "\u12)",                // cut escape (the padding would supply hex digits)
      R"({"text": "a)",                   // unterminated (the padding has a quote)
      R"({"text": "a")",                  // unclosed object (the padding has a brace)
      R"({"text": "a"} x)",               // trailing data
      R"({"text": "a",})",                // trailing comma
      R"({"text": "a", "n": 01})",        //
      R"({"text": "a", "n": 1.})",        //
      R"({"text": "a", "n": .5})",        //
      R"({"text": "a", "n": tru})",       //
      R"(["text", "a"])",                 // not an object
      R"("text")",                        //
  };
  for (const std::string& line : declined) EXPECT_FALSE(Fast(line).taken) << line;
}

// Random records of every JSON shape, with strings of plain ASCII, raw UTF-8 and every escape: the
// fast path takes each one and decodes exactly what simdjson's DOM does.
TEST(FastJsonExtractor, AgreesWithTheDomOnRandomRecords) {
  std::mt19937 rng(20261130);
  const std::vector<std::string> atoms = {
      "a",     "plain words ", "\\n",    "\\\"",   "\\\\",   "\\/",    "\\t",    "\\u00e9",
      "\\u4E2D", "\\u0000",    "\\ud83d\\ude00",   "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80",
      "\\b\\f\\r", "\\u20AC\\u0041", std::string(40, 'x')};
  auto random_string = [&] {
    std::string s = "\"";
    const int n = static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) s += atoms[rng() % atoms.size()];
    return s + "\"";
  };
  std::function<std::string(int)> value = [&](int depth) -> std::string {
    switch (rng() % (depth < 4 ? 8 : 5)) {
      case 0: return random_string();
      case 1: return std::to_string(static_cast<int>(rng() % 2000) - 1000) + (rng() % 2 ? ".25e-3" : "");
      case 2: return "true";
      case 3: return "null";
      case 4: return "false";
      case 5: {
        std::string a = "[";
        for (int i = 0, n = static_cast<int>(rng() % 4); i < n; ++i) a += (i ? ", " : "") + value(depth + 1);
        return a + "]";
      }
      default: {
        std::string o = "{";
        for (int i = 0, n = static_cast<int>(rng() % 4); i < n; ++i) {
          o += (i ? ",\t" : "") + random_string() + " : " + value(depth + 1);
        }
        return o + "}";
      }
    }
  };
  simdjson::dom::parser dom;
  int taken = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string line = "{";
    const int fields = 1 + static_cast<int>(rng() % 4);
    const int text_at = static_cast<int>(rng() % fields);
    for (int f = 0; f < fields; ++f) {
      line += f ? ", " : "";
      line += f == text_at ? "\"text\": " + random_string() : "\"k" + std::to_string(f) + "\": " + value(1);
    }
    line += "}";
    const FastResult r = Fast(line);
    ASSERT_TRUE(r.taken) << line;
    simdjson::padded_string padded(line);
    std::string_view want;
    ASSERT_EQ(dom.parse(padded)["text"].get_string().get(want), simdjson::SUCCESS) << line;
    ASSERT_THAT(r.texts, ElementsAre(std::string(want))) << line;
    ++taken;
  }
  EXPECT_EQ(taken, 3000);
}

}  // namespace
}  // namespace pileprep
