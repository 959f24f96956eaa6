// The README's library example as a program, built against the installed pileprep::core: prepares
// one .jsonl.zst as `pileprep preprocess --append-eod` does (install_test.sh compares the bytes).
// Usage: core_example INPUT.jsonl.zst OUTPUT_PREFIX (the prefix's directory must exist)
#include <cstdio>

#include "pileprep/pipeline.h"
#include "pileprep/status_macros.h"
// Not used here: every other public header of pileprep::core, compiled under the consumer's
// -Wall -Wextra -Werror as an embedder's code would be.
#include "pileprep/fetch.h"
#include "pileprep/indexed_reader.h"
#include "pileprep/merge.h"
#include "pileprep/shard_plan.h"
#include "pileprep/validate.h"

absl::Status Prepare(const std::string& input, const std::string& output_prefix) {
  PILEPREP_ASSIGN_OR_RETURN(auto tokenizer, pileprep::Gpt2Tokenizer::FromDefaultFiles({}));
  PILEPREP_ASSIGN_OR_RETURN(auto source, pileprep::OpenFileSource(input));
  pileprep::PipelineOptions options;  // threads, batch size, JSON keys, limits: each knob's default
  pileprep::ShardStats stats;
  PILEPREP_RETURN_IF_ERROR(pileprep::RunPipeline(*source, pileprep::InputFormat::kZstd, *tokenizer,
                                                 {output_prefix}, options, &stats));
  std::printf("%llu documents, %llu tokens\n", static_cast<unsigned long long>(stats.documents),
              static_cast<unsigned long long>(stats.tokens));
  return absl::OkStatus();
}

int main(int argc, char** argv) {
  if (argc != 3) return std::fprintf(stderr, "usage: core_example INPUT OUTPUT_PREFIX\n"), 2;
  if (absl::Status s = Prepare(argv[1], argv[2]); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
