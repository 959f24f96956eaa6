// What a shard's outputs were made with, written beside them once they are published
// ({output-dir}/{output-prefix}_NN.pileprep.json), so that a rerun can tell outputs made with its
// own settings (skipped) from outputs made with others (refused until --force).
//
// Why: the resume check validates the outputs, and a valid dataset made with another vocabulary or
// with `--endoftext-as-text` looks just as valid: without the record, a rerun with changed
// settings would skip those shards and leave a directory of mixed tokenizations. Only what decides
// the bytes is compared (the tokenizer's fingerprint, the end-of-text rule); the version and the
// source are there for people. Outputs without a record (made by Megatron, by hand, by a pileprep
// before records) are judged by validation alone, as before.
#ifndef PILEPREP_TOOLS_PILEPREP_SHARD_RECORD_H_
#define PILEPREP_TOOLS_PILEPREP_SHARD_RECORD_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pileprep::cli {

struct ShardRecord {
  std::string pileprep_version;
  std::string shard;                   // "00.jsonl.zst"
  std::string source;                  // path or redacted URL
  uint64_t tokenizer_fingerprint = 0;  // Gpt2Tokenizer::fingerprint()
  uint64_t vocab_size = 0;
  uint32_t eod_id = 0;
  bool endoftext_as_text = false;
  bool append_eod = true;
  struct Output {
    std::string name;  // the prefix's file name: "my-gpt3_00_text_document"
    std::string json_key;
    uint64_t bin_bytes = 0, idx_bytes = 0;
  };
  std::vector<Output> outputs;
};

std::string ShardRecordJson(const ShardRecord& record);
// InvalidArgument (with the cause) for anything that is not a record as ShardRecordJson writes it.
absl::StatusOr<ShardRecord> ParseShardRecord(std::string_view json);

// The settings that decide the bytes and differ between the record and this run, each worded for
// a person ("the vocabulary or merges: ... then, ... now"); empty when the outputs would come out
// the same.
std::vector<std::string> SettingsDifferences(const ShardRecord& recorded, const ShardRecord& now);

// Whether `recorded` lists an output named `name` of these sizes: a record describes the outputs
// beside it only if they are the ones it was written for.
bool RecordListsOutput(const ShardRecord& recorded, std::string_view name, uint64_t bin_bytes,
                       uint64_t idx_bytes);

}  // namespace pileprep::cli

#endif  // PILEPREP_TOOLS_PILEPREP_SHARD_RECORD_H_
