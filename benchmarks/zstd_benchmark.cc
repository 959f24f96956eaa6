// zstd stage: ZstdDecoder over the sample shards, fed in the pipeline's read size (64 KB) and in large
// feeds. Bytes/s counts decompressed bytes.
#include <benchmark/benchmark.h>

#include <fstream>
#include <sstream>

#include "bench_corpus.h"
#include "pileprep/zstd_stream.h"

namespace pileprep::bench {
namespace {

void BM_Decompress(benchmark::State& state) {
  const Corpus& c = LoadCorpus();
  std::vector<std::string> compressed;
  for (const std::string& f : c.files) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    compressed.push_back(ss.str());
  }
  const size_t feed = static_cast<size_t>(state.range(0));
  size_t out = 0;
  for (auto _ : state) {
    out = 0;
    for (const std::string& z : compressed) {
      ZstdDecoder dec;
      for (size_t pos = 0; pos < z.size(); pos += feed) {
        absl::Status s = dec.Feed(std::string_view(z).substr(pos, feed), [&](std::string_view b) {
          out += b.size();
          return absl::OkStatus();
        });
        if (!s.ok()) state.SkipWithError("decode failed");
      }
      if (!dec.Finish().ok()) state.SkipWithError("truncated");
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * out));
}
BENCHMARK(BM_Decompress)->Arg(1 << 16)->Arg(1 << 22)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pileprep::bench

BENCHMARK_MAIN();
