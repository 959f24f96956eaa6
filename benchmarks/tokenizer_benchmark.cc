// Tokenizer microbenchmarks on real text: the pre-tokenizer alone, the whole encoder with its
// per-thread cache (the production path), and the merge path alone (every piece a cache miss).
// Bytes/s counts text bytes.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <set>

#include "bench_corpus.h"
#include "pileprep/gpt2_tokenizer.h"
#include "tokenizer/pretokenizer.h"

namespace pileprep::bench {
namespace {

const Gpt2Tokenizer& Tokenizer() {
  static const Gpt2Tokenizer* tok = Gpt2Tokenizer::FromDefaultFiles({}).value().release();
  return *tok;
}

void BM_Pretokenize(benchmark::State& state) {
  const Corpus& c = LoadCorpus();
  size_t pieces = 0;
  for (auto _ : state) {
    for (const std::string& t : c.texts) {
      internal::Pretokenize(t, [&](std::string_view p) { pieces += p.size() > 0; });
    }
  }
  benchmark::DoNotOptimize(pieces);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * c.text_bytes));
}
BENCHMARK(BM_Pretokenize)->Unit(benchmark::kMillisecond);

// Warm: the same per-thread cache across passes, as over a long shard.
void BM_EncodeCached(benchmark::State& state) {
  const Corpus& c = LoadCorpus();
  const Gpt2Tokenizer& tok = Tokenizer();
  Gpt2Tokenizer::Cache cache(tok);
  std::vector<uint32_t> ids;
  for (auto _ : state) {
    for (const std::string& t : c.texts) {
      ids.clear();
      tok.Encode(t, cache, &ids);
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * c.text_bytes));
}
BENCHMARK(BM_EncodeCached)->Unit(benchmark::kMillisecond);

// Cold: a fresh cache for every pass over the corpus (the start of a shard).
void BM_EncodeColdCache(benchmark::State& state) {
  const Corpus& c = LoadCorpus();
  const Gpt2Tokenizer& tok = Tokenizer();
  std::vector<uint32_t> ids;
  for (auto _ : state) {
    Gpt2Tokenizer::Cache cache(tok);
    for (const std::string& t : c.texts) {
      ids.clear();
      tok.Encode(t, cache, &ids);
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * c.text_bytes));
}
BENCHMARK(BM_EncodeColdCache)->Unit(benchmark::kMillisecond);

void BM_MergeOnly(benchmark::State& state) {
  const Corpus& c = LoadCorpus();
  const Gpt2Tokenizer& tok = Tokenizer();
  std::vector<std::string_view> pieces;
  size_t bytes = 0;
  for (const std::string& t : c.texts) {
    internal::Pretokenize(t, [&](std::string_view p) {
      if (bytes < (8u << 20)) {
        pieces.push_back(p);
        bytes += p.size();
      }
    });
  }
  std::vector<uint32_t> ids;
  Gpt2Tokenizer::Cache scratch(tok);
  for (auto _ : state) {
    for (std::string_view p : pieces) {
      ids.clear();
      tok.EncodePiece(p, scratch, &ids);
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_MergeOnly)->Unit(benchmark::kMillisecond);

// The multilingual cost centre: distinct pieces of 16..64 bytes (Cyrillic, Greek and CJK words,
// long identifiers) merged with no cache, tables hot. Reports ns per merge.
void BM_MergeDistinctLongPieces(benchmark::State& state) {
  const Corpus& c = LoadCorpus();
  const Gpt2Tokenizer& tok = Tokenizer();
  std::set<std::string_view> seen;
  std::vector<std::string_view> pieces;
  size_t bytes = 0, merges = 0;
  std::vector<uint32_t> ids;
  Gpt2Tokenizer::Cache scratch(tok);
  for (const std::string& t : c.texts) {
    internal::Pretokenize(t, [&](std::string_view p) {
      if (p.size() >= 16 && p.size() <= 64 && pieces.size() < 200000 && seen.insert(p).second) {
        pieces.push_back(p);
        bytes += p.size();
        ids.clear();
        tok.EncodePiece(p, scratch, &ids);
        merges += p.size() - ids.size();
      }
    });
  }
  for (auto _ : state) {
    for (std::string_view p : pieces) {
      ids.clear();
      tok.EncodePiece(p, scratch, &ids);
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.counters["pieces"] = static_cast<double>(pieces.size());
  state.counters["merges_per_piece"] = static_cast<double>(merges) / std::max<size_t>(1, pieces.size());
  state.counters["ns_per_merge"] = benchmark::Counter(
      static_cast<double>(merges) * 1e-9, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_MergeDistinctLongPieces)->Unit(benchmark::kMillisecond);

// A single long piece of one class must stay fast (no quadratic merge).
void BM_LongPiece(benchmark::State& state) {
  const Gpt2Tokenizer& tok = Tokenizer();
  std::string text;
  switch (state.range(0)) {
    case 0: text.assign(1 << 20, 'a'); break;
    case 1: text.assign(1 << 20, '7'); break;
    case 2: text.assign(1 << 20, ' '); break;
    case 3:
      for (size_t i = 0; text.size() < (1u << 20); ++i) {
        text.push_back("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[(i * 7919) % 64]);
      }
      break;
    case 4:
      while (text.size() < (1u << 20)) text += "\xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97";  // 中文字
      break;
    case 5:
      while (text.size() < (1u << 20)) text += "\xf0\x9f\xa6\x8a";  // 🦊
      break;
  }
  Gpt2Tokenizer::Cache cache(tok);
  std::vector<uint32_t> ids;
  for (auto _ : state) {
    ids.clear();
    tok.Encode(text, cache, &ids);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_LongPiece)->DenseRange(0, 5)->Unit(benchmark::kMillisecond);

// Loading GPT-2's encoder.json and vocab.bpe and building the tables: paid once per process, before
// any shard starts (a short job feels it).
void BM_Load(benchmark::State& state) {
  for (auto _ : state) {
    auto tok = Gpt2Tokenizer::FromDefaultFiles({});
    if (!tok.ok()) state.SkipWithError("tokenizer files not found");
    benchmark::DoNotOptimize(tok);
  }
}
BENCHMARK(BM_Load)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pileprep::bench

BENCHMARK_MAIN();
