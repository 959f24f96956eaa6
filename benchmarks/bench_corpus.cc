#include "bench_corpus.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "pileprep/jsonl.h"
#include "pileprep/zstd_stream.h"

namespace pileprep::bench {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Corpus* Build() {
  auto* c = new Corpus();
  if (const char* env = std::getenv("PILEPREP_BENCH_CORPUS"); env && *env) {
    std::stringstream ss(env);
    for (std::string f; std::getline(ss, f, ':');) c->files.push_back(f);
  } else {
    for (const auto& e : std::filesystem::directory_iterator(PILEPREP_SOURCE_DIR "/data/samples")) {
      if (e.path().extension() == ".zst") c->files.push_back(e.path().string());
    }
    std::sort(c->files.begin(), c->files.end());
  }
  for (const std::string& f : c->files) {
    const std::string raw = ReadFile(f);
    if (f.size() > 4 && f.compare(f.size() - 4, 4, ".zst") == 0) {
      ZstdDecoder dec({.source_name = f});
      absl::Status s = dec.Feed(raw, [&](std::string_view out) {
        c->jsonl.append(out);
        return absl::OkStatus();
      });
      if (s.ok()) s = dec.Finish();
      if (!s.ok()) {
        std::fprintf(stderr, "bench corpus: %s\n", std::string(s.message()).c_str());
        std::exit(1);
      }
    } else {
      c->jsonl += raw;
    }
    if (!c->jsonl.empty() && c->jsonl.back() != '\n') c->jsonl.push_back('\n');
  }
  JsonRecordParser parser;
  ForEachLine(c->jsonl, [&](std::string_view line) {
    if (parser.Parse(line).ok) {
      c->texts.emplace_back(parser.texts()[0]);
      c->text_bytes += c->texts.back().size();
    }
  });
  if (c->texts.empty()) {
    std::fprintf(stderr, "bench corpus: no documents found\n");
    std::exit(1);
  }
  return c;
}

}  // namespace

const Corpus& LoadCorpus() {
  static const Corpus* corpus = Build();
  return *corpus;
}

}  // namespace pileprep::bench
