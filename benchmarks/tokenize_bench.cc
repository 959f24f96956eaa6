// Single-thread tokenizer throughput on real text, for scripts/bench.sh, which runs the peers
// (tiktoken's native core, a Python baseline) on the very same texts.
//
//   tokenize_bench [--export-texts F] [--export-ids F] [--passes N] [--ids16] [--cache-entries N]
//                  [--cache-long-cjk-runs]
//
// Texts come from bench_corpus (data/samples or $PILEPREP_BENCH_CORPUS). Prints one JSON line:
// {"text_bytes":..,"tokens":..,"cold_seconds":..,"warm_seconds":..,"unseen_seconds":..,"cold_merged":..,
// "warm_merged":..,"unseen_merged":..} (*_merged: the share of pre-tokens the cache missed). cold: a fresh
// pre-token cache (the start of a shard); warm: the best later pass with the cache kept, over text it
// has seen (flattering: every piece is cached); unseen: the cache warmed on one half of the documents,
// then the other half timed, and the same the other way round (the rest of a shard: a warm cache meets
// new documents in the same languages).
// --export-texts writes each text as u32 length + UTF-8; --export-ids writes each text's ids as
// u32 count + u32 ids, so a peer can prove it produced the same ids. --ids16 times the 16-bit form of
// Encode, which the pipeline uses for a uint16 .bin (GPT-2), instead of the 32-bit one.
// --cache-entries and --cache-long-cjk-runs set the Gpt2Tokenizer::Options of the same names, to time
// the cache's choices against each other (alternate the runs: this VM's speed wanders).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "bench_corpus.h"
#include "pileprep/gpt2_tokenizer.h"

namespace {

// Every Encode of the measured passes: 32-bit ids, or 16-bit ones as the pipeline writes them.
template <typename Id>
int Run(const pileprep::Gpt2Tokenizer& tokenizer, const std::string& export_texts,
        const std::string& export_ids, int passes) {
  const pileprep::bench::Corpus& corpus = pileprep::bench::LoadCorpus();
  // Encode into one buffer for the whole pass, as the pipeline does into a batch's (EncodeTo: no
  // zero-fill of its room, no copy). The 16-bit form needs every id below 65,536.
  if (std::is_same_v<Id, uint16_t> && !tokenizer.ids_fit_16_bits()) std::abort();
  struct Ids {
    std::unique_ptr<Id[]> buffer;
    size_t n = 0;
    void clear() { n = 0; }
    size_t size() const { return n; }
  };
  // Zero-filled, so every page is touched before any timing: otherwise the first pass would also fault
  // in the buffer's fresh pages (10-20 MB for the sample corpus; a third of the cold pass on this VM),
  // a cost of the benchmark's one big buffer that the pipeline, which reuses its batches', does not pay.
  Ids ids{std::make_unique<Id[]>(pileprep::Gpt2Tokenizer::MaxIds(corpus.text_bytes))};
  struct Encoder {
    const pileprep::Gpt2Tokenizer* tokenizer;
    void Encode(const std::string& text, pileprep::Gpt2Tokenizer::Cache& cache, Ids* out) const {
      out->n += tokenizer->EncodeTo(text, cache, out->buffer.get() + out->n);
    }
  };
  const Encoder encoder{&tokenizer};
  double cold = 0, warm = 1e30;
  size_t tokens = 0;
  // Share of pre-tokens merged (not found in the cache) in the cold pass, the last warm pass (the
  // counts are the same in every warm pass), the unseen halves.
  double cold_merged = 0, warm_merged = 0, unseen_merged = 0;
  auto merged_share = [](const pileprep::Gpt2Tokenizer::Cache::Stats& a,
                         const pileprep::Gpt2Tokenizer::Cache::Stats& b) {
    return b.pieces == a.pieces ? 0.0 : double(b.merged - a.merged) / double(b.pieces - a.pieces);
  };
  auto cache = std::make_unique<pileprep::Gpt2Tokenizer::Cache>(tokenizer);
  for (int pass = 0; pass < passes; ++pass) {
    ids.clear();
    const auto before = cache->stats();
    const auto start = std::chrono::steady_clock::now();
    for (const std::string& t : corpus.texts) encoder.Encode(t, *cache, &ids);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    (pass == 0 ? cold_merged : warm_merged) = merged_share(before, cache->stats());
    if (pass == 0) cold = s;
    else warm = std::min(warm, s);
    tokens = ids.size();
  }
  // Held out: warm on one half, time the other, both ways round; best of `passes - 1` rounds.
  const size_t half = corpus.texts.size() / 2;
  double unseen = 1e30;
  for (int round = 1; round < passes; ++round) {
    double total = 0;
    pileprep::Gpt2Tokenizer::Cache::Stats timed;  // the two timed halves together
    for (int side = 0; side < 2; ++side) {
      const size_t warm_begin = side == 0 ? 0 : half, warm_end = side == 0 ? half : corpus.texts.size();
      const size_t time_begin = side == 0 ? half : 0, time_end = side == 0 ? corpus.texts.size() : half;
      auto fresh = std::make_unique<pileprep::Gpt2Tokenizer::Cache>(tokenizer);
      for (size_t i = warm_begin; i < warm_end; ++i) {
        ids.clear();
        encoder.Encode(corpus.texts[i], *fresh, &ids);
      }
      ids.clear();
      const auto before = fresh->stats();
      const auto start = std::chrono::steady_clock::now();
      for (size_t i = time_begin; i < time_end; ++i) encoder.Encode(corpus.texts[i], *fresh, &ids);
      total += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      timed.pieces += fresh->stats().pieces - before.pieces;
      timed.merged += fresh->stats().merged - before.merged;
    }
    unseen_merged = merged_share({}, timed);
    unseen = std::min(unseen, total);
  }
  if (!export_texts.empty()) {
    std::ofstream out(export_texts, std::ios::binary);
    for (const std::string& t : corpus.texts) {
      const uint32_t n = static_cast<uint32_t>(t.size());
      out.write(reinterpret_cast<const char*>(&n), 4);
      out.write(t.data(), n);
    }
  }
  if (!export_ids.empty()) {
    std::ofstream out(export_ids, std::ios::binary);
    std::vector<uint32_t> one;
    for (const std::string& t : corpus.texts) {
      one.clear();
      tokenizer.Encode(t, *cache, &one);
      const uint32_t n = static_cast<uint32_t>(one.size());
      out.write(reinterpret_cast<const char*>(&n), 4);
      out.write(reinterpret_cast<const char*>(one.data()), n * 4);
    }
  }
  std::printf(
      "{\"text_bytes\":%zu,\"documents\":%zu,\"tokens\":%zu,\"cold_seconds\":%.6f,\"warm_seconds\":%.6f,"
      "\"unseen_seconds\":%.6f,\"cold_merged\":%.4f,\"warm_merged\":%.4f,\"unseen_merged\":%.4f}\n",
      corpus.text_bytes, corpus.texts.size(), tokens, cold, warm, unseen, cold_merged, warm_merged,
      unseen_merged);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string export_texts, export_ids;
  int passes = 3;
  bool ids16 = false;
  pileprep::Gpt2Tokenizer::Options options;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--ids16")) ids16 = true;
    else if (!std::strcmp(argv[i], "--export-texts") && has_value) export_texts = argv[++i];
    else if (!std::strcmp(argv[i], "--export-ids") && has_value) export_ids = argv[++i];
    else if (!std::strcmp(argv[i], "--passes") && has_value) passes = std::max(2, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--cache-entries") && has_value) options.cache_entries = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--cache-long-cjk-runs")) options.cache_long_cjk_runs = true;
    else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  auto tok = pileprep::Gpt2Tokenizer::FromDefaultFiles(options);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tok.status().message()).c_str());
    return 2;
  }
  return ids16 ? Run<uint16_t>(**tok, export_texts, export_ids, passes)
               : Run<uint32_t>(**tok, export_texts, export_ids, passes);
}
