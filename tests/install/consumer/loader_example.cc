// Prints the first sample of a GPT dataset: Megatron's sample 0 for seq 128, 100 samples, seed 1234.
#include <cstdio>
#include <vector>

#include "pileprep/loader.h"

int main(int argc, char** argv) {
  const char* prefix = argc > 1 ? argv[1] : "tests/data/format/lcg300_uint16";

  auto view = pileprep::IndexedDatasetView::Open(prefix);  // mmap, validated
  if (!view.ok()) return std::fprintf(stderr, "%s\n", view.status().ToString().c_str()), 1;
  std::printf("%lld sequences, %lld tokens\n", (long long)(*view)->num_sequences(),
              (long long)(*view)->num_tokens());

  pileprep::GptDatasetOptions options;
  options.sequence_length = 128;
  options.num_samples = 100;
  options.split = "969,30,1";  // the train split
  auto dataset = pileprep::GptDataset::Open(prefix, options);
  if (!dataset.ok()) return std::fprintf(stderr, "%s\n", dataset.status().ToString().c_str()), 1;

  std::vector<int64_t> text;  // sequence_length + 1 tokens
  if (absl::Status s = (*dataset)->GetSample(0, &text); !s.ok()) return 1;
  std::printf("%lld samples; sample 0 starts %lld %lld %lld\n", (long long)(*dataset)->size(),
              (long long)text[0], (long long)text[1], (long long)text[2]);
  return 0;
}
