// What a dataset of the shard job was made with, written beside it once it is published
// ({prefix}.pileprep.json beside {prefix}.bin and {prefix}.idx, one per --json-keys key), so that
// a rerun can tell outputs made with its own settings (skipped) from outputs made with others
// (the run is refused, unless --remake-other-settings or --force).
//
// Why: the resume check validates the outputs, and a valid dataset made with another vocabulary or
// with `--endoftext-as-text` looks just as valid: without the record, a rerun with changed
// settings would skip those shards and leave a directory of mixed tokenizations. Only what decides
// the bytes is compared (the vocabulary's fingerprint, the end-of-text rule, end-of-document ids,
// the run's set of keys); the version and the source are there for people. A record describes the
// dataset beside it only while the .bin and .idx have the sizes it lists. Datasets without one
// (made by Megatron, by hand, by a pileprep before records) are judged by validation alone, as
// before.
//
// No instant without a record: the new record is written first as {prefix}.pileprep.json.pending,
// naming the inodes of the finished temporaries (PipelineOptions::before_publish), before the
// outputs are renamed into place (a rename keeps the inode), and renamed over the old record once
// they are. A run killed in between leaves the pending record; what is under the final names then
// tells which way it went: the files it names (same inodes and sizes: the publish happened) or
// not (it did not, and the old record still describes the old outputs). CheckRecord reads it so,
// and ResolvePendingRecords (under the shard's lock, where locks work) completes or removes it.
// Inodes are compared only for a pending record, on the next run (a requeue may run on another
// node: NFS and Lustre give every client the same inode numbers; some FUSE mounts do not, and a
// directory copied between the kill and the rerun has new ones: then the pending record is removed
// and the old record, if it lists the same sizes, is taken to describe the new outputs). Completed
// records keep the inodes but are judged by sizes, so a directory copied elsewhere keeps them.
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
  // Every key of the run, in its order: a document missing any of them is a bad record skipped
  // for all, so the set decides each key's bytes. Empty: not known (records of pileprep before
  // the set was kept), then not compared.
  std::vector<std::string> json_keys;
  uint64_t vocabulary_fingerprint = 0;  // Gpt2Tokenizer::fingerprint()
  uint64_t vocab_size = 0;
  uint32_t eod_id = 0;
  bool endoftext_as_text = false;
  bool append_eod = true;
  uint64_t bin_bytes = 0, idx_bytes = 0;
  // The inode numbers of the files it was written for (0: not known, as in records of pileprep
  // before them); compared only while the record is pending.
  uint64_t bin_inode = 0, idx_inode = 0;
};

// "{prefix}.pileprep.json".
std::string RecordPath(const std::string& prefix);
// "{prefix}.pileprep.json.pending".
std::string PendingRecordPath(const std::string& prefix);

// Removes the records (and pending records) beside `prefixes`, its directory synced if any was
// there: `preprocess` and `merge`, which write the shard job's names without a record, call it
// before they publish, so that no record vouches for bytes it was not written for (a record of the
// same sizes would). NotFound is no error; another is, and nothing is then published.
absl::Status ForgetRecords(const std::vector<std::string>& prefixes);

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
    kUnreadable,     // a file that is not a record (cannot be parsed): the same (`why` says so)
    kCannotRead,     // a record there that could not be read (an I/O error): what made the
                     // outputs is not known, so the shard is left alone (`why` says so)
    kOtherOutputs,   // the record lists other sizes (or the dataset is missing): the same
    kSameSettings,   // made with this run's settings
    kOtherSettings,  // made with other settings: `why` lists them
  };
  Verdict verdict = kNoRecord;
  std::string why;  // for a person; empty for kSameSettings
};
// `pending_is_theirs` (PendingStates: kNamesFiles in a shard that is not torn): the pending record
// is read in place of the record. Reads only.
RecordCheck CheckRecord(const std::string& prefix, const ShardRecord& now, bool pending_is_theirs);

// What the pending records of one shard's datasets (`prefixes`, one per key) say, read only: none,
// one that names the files under its final names (same inodes and sizes), or one that does not (or
// is not a record). Torn: some keys' name their files and others' do not (a run killed between two
// keys' renames). Errors: a pending record that cannot be read (not NotFound): no verdict.
struct PendingStates {
  enum State { kNone, kNamesFiles, kStale };
  std::vector<State> state;
  bool torn = false;
};
absl::StatusOr<PendingStates> ReadPendingStates(const std::vector<std::string>& prefixes);

// The pending records a run killed around its publish left for one shard's datasets (`prefixes`,
// one per key), resolved together: each that names the files under its final names is renamed
// over the record (completed), each that does not is removed. A shard whose keys were published
// only in part (killed between two keys' renames: some pending records name their files, others
// do not) is torn: the keys already renamed are withdrawn (their .idx and .bin removed) with all
// the pending records, so the shard is made again rather than left with keys from two runs.
// Errors: a pending record that cannot be read, a rename, unlink or directory sync failing (path
// and strerror); a torn shard's pending records stay until each of its renamed keys is withdrawn.
struct PendingResolution {
  std::vector<std::string> completed, removed;  // the pending records' paths
  std::vector<std::string> withdrawn;           // torn: the prefixes whose outputs were removed
};
absl::StatusOr<PendingResolution> ResolvePendingRecords(const std::vector<std::string>& prefixes);

}  // namespace pileprep::cli

#endif  // PILEPREP_TOOLS_PILEPREP_SHARD_RECORD_H_
