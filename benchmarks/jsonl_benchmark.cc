// JSON-lines stage on real text: line splitting plus JsonRecordParser (simdjson, Python json.loads
// semantics, UTF-8 repair and surrogate policy). Bytes/s counts JSON-lines bytes.
#include <benchmark/benchmark.h>

#include "bench_corpus.h"
#include "pileprep/jsonl.h"

namespace pileprep::bench {
namespace {

void BM_ParseLines(benchmark::State& state) {
  const Corpus& c = LoadCorpus();
  JsonRecordParser parser;
  size_t texts = 0;
  for (auto _ : state) {
    ForEachLine(c.jsonl, [&](std::string_view line) { texts += parser.Parse(line).ok; });
  }
  benchmark::DoNotOptimize(texts);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * c.jsonl.size()));
}
BENCHMARK(BM_ParseLines)->Unit(benchmark::kMillisecond);

// As the pipeline does it: the lines lie in a buffer with padding after the last, and are parsed
// where they lie (no copy, no separate UTF-8 pass).
void BM_ParseLinesPadded(benchmark::State& state) {
  const Corpus& c = LoadCorpus();
  const std::string buffer = c.jsonl + std::string(JsonRecordParser::kPadding, '\0');
  const std::string_view lines = std::string_view(buffer).substr(0, c.jsonl.size());
  JsonRecordParser parser;
  size_t texts = 0;
  for (auto _ : state) {
    ForEachLine(lines, [&](std::string_view line) { texts += parser.ParsePadded(line).ok; });
  }
  benchmark::DoNotOptimize(texts);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * c.jsonl.size()));
}
BENCHMARK(BM_ParseLinesPadded)->Unit(benchmark::kMillisecond);

void BM_SplitLinesOnly(benchmark::State& state) {
  const Corpus& c = LoadCorpus();
  size_t lines = 0;
  for (auto _ : state) {
    ForEachLine(c.jsonl, [&](std::string_view line) { lines += !line.empty(); });
  }
  benchmark::DoNotOptimize(lines);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * c.jsonl.size()));
}
BENCHMARK(BM_SplitLinesOnly)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pileprep::bench

BENCHMARK_MAIN();
