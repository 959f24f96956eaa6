// Every case of tests/data/gpt2-cases.jsonl ({"text", "ids"}, ids from the reference tokenizers, with
// pileprep's documented choices: <|endoftext|> special, lone surrogates -> U+FFFD) encoded by
// Gpt2Tokenizer with default options.
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "pileprep/gpt2_tokenizer.h"
#include "simdjson.h"

namespace pileprep {
namespace {

constexpr char kCasesPath[] = PILEPREP_TEST_DATA_DIR "/gpt2-cases.jsonl";
constexpr size_t kNumCases = 450;

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Value of the 4 hex digits after "\u" at line[i] (line[i] is the backslash), or -1.
int EscapeAt(std::string_view line, size_t i) {
  if (i + 6 > line.size() || line[i] != '\\' || line[i + 1] != 'u') return -1;
  int v = 0;
  for (size_t k = i + 2; k < i + 6; ++k) {
    const int h = HexValue(line[k]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

// JSON allows "\ud800" (a lone UTF-16 surrogate); pileprep decodes it as U+FFFD (docs/gpt2.md §4).
// simdjson rejects it, so rewrite every lone surrogate escape to "\ufffd" first; proper pairs stay.
std::string ReplaceLoneSurrogateEscapes(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  size_t i = 0;
  while (i < line.size()) {
    if (line[i] != '\\' || i + 1 >= line.size()) {
      out += line[i++];
      continue;
    }
    if (line[i + 1] != 'u') {  // "\\", "\"", "\n", ...: copy the escape whole
      out.append(line.substr(i, 2));
      i += 2;
      continue;
    }
    const int v = EscapeAt(line, i);
    if (v >= 0xD800 && v <= 0xDBFF) {
      const int low = EscapeAt(line, i + 6);
      if (low >= 0xDC00 && low <= 0xDFFF) {
        out.append(line.substr(i, 12));
        i += 12;
        continue;
      }
    }
    if (v >= 0xD800 && v <= 0xDFFF) {
      out += "\\ufffd";
      i += 6;
      continue;
    }
    out.append(line.substr(i, 2));  // other \uXXXX: the hex digits follow as plain characters
    i += 2;
  }
  return out;
}

struct Case {
  size_t line_no;
  std::string text;
  std::vector<uint32_t> ids;
};

std::vector<Case> LoadCases() {
  std::vector<Case> cases;
  std::ifstream in(kCasesPath, std::ios::binary);
  EXPECT_TRUE(in.good()) << kCasesPath << ": cannot open";
  simdjson::dom::parser parser;
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    const std::string json = ReplaceLoneSurrogateEscapes(line);
    simdjson::dom::element doc;
    auto error = parser.parse(json).get(doc);
    EXPECT_FALSE(error) << kCasesPath << ": line " << line_no << ": " << simdjson::error_message(error);
    if (error) continue;
    Case c;
    c.line_no = line_no;
    std::string_view text;
    simdjson::dom::array ids;
    if (doc["text"].get(text) || doc["ids"].get(ids)) {
      ADD_FAILURE() << kCasesPath << ": line " << line_no << ": no \"text\" string or \"ids\" array";
      continue;
    }
    c.text = std::string(text);
    for (simdjson::dom::element id : ids) {
      uint64_t v = 0;
      EXPECT_FALSE(id.get(v)) << kCasesPath << ": line " << line_no << ": id is not an integer";
      c.ids.push_back(static_cast<uint32_t>(v));
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

TEST(Gpt2Cases, LoneSurrogateEscapesAreRewrittenAndPairsKept) {
  EXPECT_EQ(ReplaceLoneSurrogateEscapes(R"({"text": "a\ud800b"})"), R"({"text": "a\ufffdb"})");
  EXPECT_EQ(ReplaceLoneSurrogateEscapes(R"("\udc00")"), R"("\ufffd")");
  EXPECT_EQ(ReplaceLoneSurrogateEscapes(R"("\ud83d\ude00")"), R"("\ud83d\ude00")");
  EXPECT_EQ(ReplaceLoneSurrogateEscapes(R"("\ud83d\ud83d\ude00")"), R"("\ufffd\ud83d\ude00")");
  EXPECT_EQ(ReplaceLoneSurrogateEscapes(R"("\\ud800")"), R"("\\ud800")");  // an escaped backslash
  EXPECT_EQ(ReplaceLoneSurrogateEscapes(R"("\ud55c")"), R"("\ud55c")");    // 한, not a surrogate
}

TEST(Gpt2Cases, AllCasesEncodeToTheReferenceIds) {
  const std::vector<Case> cases = LoadCases();
  ASSERT_EQ(cases.size(), kNumCases);
  auto tok = Gpt2Tokenizer::FromFiles(PILEPREP_SOURCE_DIR "/tokenizers/gpt2/encoder.json",
                                      PILEPREP_SOURCE_DIR "/tokenizers/gpt2/vocab.bpe", {});
  ASSERT_TRUE(tok.ok()) << tok.status();
  Gpt2Tokenizer::Cache cache(**tok);
  for (int round = 0; round < 2; ++round) {  // the second round hits the warm cache
    for (const Case& c : cases) {
      std::vector<uint32_t> ids;
      (*tok)->Encode(c.text, cache, &ids);
      EXPECT_EQ(ids, c.ids) << "line " << c.line_no << " (round " << round
                            << "): " << c.text.substr(0, 120);
    }
  }
}

TEST(Gpt2Cases, DecodeRoundTripsEveryCase) {
  auto tok = Gpt2Tokenizer::FromFiles(PILEPREP_SOURCE_DIR "/tokenizers/gpt2/encoder.json",
                                      PILEPREP_SOURCE_DIR "/tokenizers/gpt2/vocab.bpe", {});
  ASSERT_TRUE(tok.ok()) << tok.status();
  for (const Case& c : LoadCases()) {
    EXPECT_EQ((*tok)->Decode(c.ids), c.text) << "line " << c.line_no;
  }
}

}  // namespace
}  // namespace pileprep
