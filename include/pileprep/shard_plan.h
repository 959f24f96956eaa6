// Which shards a job processes, where each comes from and where its outputs go.
//
//   PILEPREP_ASSIGN_OR_RETURN(std::vector<int> files, ParseFileNumbers("0,3,5-7"));  // {0,3,5,6,7}
//   ShardInput(src, 3)             -> "{src}/03.jsonl.zst"
//   ShardOutputPrefix(dir, "my-gpt3", 3) -> "{dir}/my-gpt3_03_text_document"
//
// Pure functions; safe from any thread.
#ifndef PILEPREP_SHARD_PLAN_H_
#define PILEPREP_SHARD_PLAN_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pileprep {

// Parses the NeMo launcher's `file_numbers` syntax: comma-separated integers or inclusive ranges
// ("0-29", "0,3,5-7"). The result is sorted and free of duplicates. Numbers are 0..9999.
absl::StatusOr<std::vector<int>> ParseFileNumbers(std::string_view spec);

// Shard file name: two digits at least ("03.jsonl.zst").
std::string ShardFileName(int number);

enum class SourceKind { kLocalDirectory, kHttp };
struct ShardSource {
  SourceKind kind;
  std::string base;  // directory path (file:// stripped) or URL ending in '/'
};
// Classifies --url: a local directory, a file:// URL, or http(s)://. Other schemes are refused.
absl::StatusOr<ShardSource> ParseShardSource(std::string_view url);

// Where shard `number` comes from: "{base}/{NN}.jsonl.zst".
std::string ShardInput(const ShardSource& source, int number);

// Output prefix of shard `number`: "{dir}/{prefix}_{NN}_{key}_document" (Megatron's naming; the NeMo
// launcher's training configs point at my-gpt3_NN_text_document).
std::string ShardOutputPrefix(std::string_view output_dir, std::string_view prefix, int number,
                              std::string_view json_key = "text");

}  // namespace pileprep

#endif  // PILEPREP_SHARD_PLAN_H_
