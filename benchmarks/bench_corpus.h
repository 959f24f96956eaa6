// Real text for benchmarks: the documents of data/samples/*.jsonl.zst (Debian manuals in many languages,
// source code, LaTeX, Unicode data), or of files named by $PILEPREP_BENCH_CORPUS (colon-separated
// .jsonl/.jsonl.zst). Real text, not random words: random-word text flatters pre-token caches.
#ifndef PILEPREP_BENCHMARKS_BENCH_CORPUS_H_
#define PILEPREP_BENCHMARKS_BENCH_CORPUS_H_

#include <string>
#include <vector>

namespace pileprep::bench {

struct Corpus {
  std::vector<std::string> files;   // the compressed or plain inputs
  std::string jsonl;                // decompressed JSON lines, all files
  std::vector<std::string> texts;   // the "text" of every good record
  size_t text_bytes = 0;
};

// Loads once per process; aborts with a message if nothing can be read (benchmarks only).
const Corpus& LoadCorpus();

}  // namespace pileprep::bench

#endif  // PILEPREP_BENCHMARKS_BENCH_CORPUS_H_
