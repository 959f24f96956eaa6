// What a dataset of the shard job was made with, written beside it once it is published
// ({prefix}.pileprep.json beside {prefix}.bin and {prefix}.idx, one per --json-keys key), so that
// a rerun can tell outputs made with its own settings (skipped) from outputs made with others
// (the run is refused, unless --remake-other-settings or --force).
//
// Why: the resume check validates the outputs, and a valid dataset made with another vocabulary or
// with `--endoftext-as-text` looks just as valid: without the record, a rerun with changed
// settings would skip those shards and leave a directory of mixed tokenizations. Only what decides
// the bytes is compared (the vocabulary's fingerprint, the end-of-text rule, end-of-document ids);
// the version and the source are there for people. A record describes the dataset beside it only
// while the .bin and .idx have the sizes it lists. Datasets without one (made by Megatron, by
// hand, by a pileprep before records) are judged by validation alone, as before.
//
// No instant without a record: the new record is written first as {prefix}.pileprep.json.pending,
// naming the inodes of the finished temporaries (PipelineOptions::before_publish), before the
// outputs are renamed into place (a rename keeps the inode), and renamed over the old record once
// they are. A run killed in between leaves the pending record; what is under the final names then
// tells which way it went: the files it names (same inodes and sizes: the publish happened) or
// not (it did not, and the old record still describes the old outputs). CheckRecord reads it so,
// and ResolvePendingRecord (under the shard's lock) completes or removes it. Inodes are compared
// only there, moments after they were read on the same filesystem: a directory copied elsewhere
// keeps its records (sizes), not its inodes.
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
  std::string shard;                    // "00.jsonl.zst"
  std::string source;                   // path or redacted URL
  std::string json_key;                 // "text"
  uint64_t vocabulary_fingerprint = 0;  // Gpt2Tokenizer::fingerprint()
  uint64_t vocab_size = 0;
  uint32_t eod_id = 0;
  bool endoftext_as_text = false;
  bool append_eod = true;
  uint64_t bin_bytes = 0, idx_bytes = 0;
  // The files' inode numbers when the record was written (0: not known, as in records of
  // pileprep before them); for a pending record only.
  uint64_t bin_inode = 0, idx_inode = 0;
};

// "{prefix}.pileprep.json".
std::string RecordPath(const std::string& prefix);
// "{prefix}.pileprep.json.pending".
std::string PendingRecordPath(const std::string& prefix);

std::string ShardRecordJson(const ShardRecord& record);
// InvalidArgument (with the cause) for anything that is not a record as ShardRecordJson writes it.
absl::StatusOr<ShardRecord> ParseShardRecord(std::string_view json);

// The settings that decide the bytes and differ between the record and this run, each worded for
// a person ("--endoftext-as-text: set then, not set now"); empty when they agree.
std::vector<std::string> SettingsDifferences(const ShardRecord& recorded, const ShardRecord& now);

// What the record beside the dataset `prefix` says of it, against this run's settings `now`.
struct RecordCheck {
  enum Verdict {
    kNoRecord,       // no record: judged by validation alone
    kUnreadable,     // a record that cannot be read or parsed: the same (`why` says so)
    kOtherOutputs,   // the record lists other sizes (or the dataset is missing): the same
    kSameSettings,   // made with this run's settings
    kOtherSettings,  // made with other settings: `why` lists them
  };
  Verdict verdict = kNoRecord;
  std::string why;  // for a person; empty for kSameSettings
};
// Reads a pending record that names the files now under the prefix's final names in place of the
// record. Reads only.
RecordCheck CheckRecord(const std::string& prefix, const ShardRecord& now);

// A pending record left by a run killed around its publish: renamed over the record when it names
// the files under the final names (kCompleted), else removed (kRemoved); kNone when there is none.
// Errors: the rename or unlink failing (path and strerror).
enum class PendingRecord { kNone, kCompleted, kRemoved };
absl::StatusOr<PendingRecord> ResolvePendingRecord(const std::string& prefix);

}  // namespace pileprep::cli

#endif  // PILEPREP_TOOLS_PILEPREP_SHARD_RECORD_H_
