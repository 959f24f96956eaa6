#include "shard_record.h"

#include <simdjson.h>
#include <sys/stat.h>

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "console.h"
#include "format/file_util.h"
#include "pileprep/status_macros.h"

namespace pileprep::cli {
namespace {

std::string Hex(uint64_t v) { return absl::StrFormat("%016x", v); }

}  // namespace

std::string RecordPath(const std::string& prefix) { return prefix + ".pileprep.json"; }
std::string PendingRecordPath(const std::string& prefix) {
  return prefix + ".pileprep.json.pending";
}

absl::Status ForgetRecords(const std::vector<std::string>& prefixes) {
  bool removed = false;
  for (const std::string& prefix : prefixes) {
    for (const std::string& path : {RecordPath(prefix), PendingRecordPath(prefix)}) {
      if (!internal::PathExists(path)) continue;
      PILEPREP_RETURN_IF_ERROR(internal::RemoveFileIfExists(path));
      removed = true;
    }
  }
  if (!removed || prefixes.empty()) return absl::OkStatus();
  return internal::SyncDirectory(internal::DirName(prefixes[0]));
}

std::string ShardRecordJson(const ShardRecord& r) {
  std::string out = "{\n";
  absl::StrAppend(&out, "  \"pileprep_version\": ", JsonString(r.pileprep_version), ",\n");
  absl::StrAppend(&out, "  \"shard\": ", JsonString(r.shard), ",\n");
  absl::StrAppend(&out, "  \"source\": ", JsonString(r.source), ",\n");
  absl::StrAppend(&out, "  \"json_key\": ", JsonString(r.json_key), ",\n");
  if (!r.json_keys.empty()) {
    absl::StrAppend(&out, "  \"json_keys\": [");
    for (size_t i = 0; i < r.json_keys.size(); ++i) {
      absl::StrAppend(&out, i > 0 ? ", " : "", JsonString(r.json_keys[i]));
    }
    absl::StrAppend(&out, "],\n");
  }
  absl::StrAppend(&out, "  \"vocabulary_fingerprint\": \"", Hex(r.vocabulary_fingerprint), "\",\n");
  absl::StrAppend(&out, "  \"vocab_size\": ", r.vocab_size, ",\n");
  absl::StrAppend(&out, "  \"eod_id\": ", r.eod_id, ",\n");
  absl::StrAppend(&out, "  \"endoftext_as_text\": ", r.endoftext_as_text ? "true" : "false", ",\n");
  absl::StrAppend(&out, "  \"append_eod\": ", r.append_eod ? "true" : "false", ",\n");
  absl::StrAppend(&out, "  \"bin_bytes\": ", r.bin_bytes, ",\n");
  absl::StrAppend(&out, "  \"idx_bytes\": ", r.idx_bytes, ",\n");
  absl::StrAppend(&out, "  \"bin_inode\": ", r.bin_inode, ",\n");
  absl::StrAppend(&out, "  \"idx_inode\": ", r.idx_inode, "\n}\n");
  return out;
}

absl::StatusOr<ShardRecord> ParseShardRecord(std::string_view json) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  const simdjson::padded_string padded(json);
  if (auto err = parser.parse(padded).get(root)) {
    return absl::InvalidArgumentError(absl::StrCat("not JSON: ", simdjson::error_message(err)));
  }
  ShardRecord r;
  auto missing = [](const char* field) {
    return absl::InvalidArgumentError(absl::StrCat("no valid \"", field, "\""));
  };
  auto text = [&root](const char* field, std::string* out) {
    std::string_view v;
    if (root[field].get(v)) return false;
    out->assign(v);
    return true;
  };
  auto flag = [&root](const char* field, bool* out) { return !root[field].get(*out); };
  std::string fingerprint;
  uint64_t eod = 0;
  if (!text("pileprep_version", &r.pileprep_version)) return missing("pileprep_version");
  if (!text("shard", &r.shard)) return missing("shard");
  if (!text("source", &r.source)) return missing("source");
  if (!text("json_key", &r.json_key)) return missing("json_key");
  // Optional: records written before pileprep kept the run's key set have none.
  if (simdjson::dom::element keys; !root["json_keys"].get(keys)) {
    simdjson::dom::array array;
    if (keys.get(array)) return missing("json_keys");
    for (simdjson::dom::element key : array) {
      std::string_view v;
      if (key.get(v)) return missing("json_keys");
      r.json_keys.emplace_back(v);
    }
    if (r.json_keys.empty()) return missing("json_keys");
  }
  if (!text("vocabulary_fingerprint", &fingerprint) || fingerprint.size() != 16 ||
      !absl::SimpleHexAtoi(fingerprint, &r.vocabulary_fingerprint)) {
    return missing("vocabulary_fingerprint");
  }
  if (root["vocab_size"].get(r.vocab_size)) return missing("vocab_size");
  if (root["eod_id"].get(eod) || eod > UINT32_MAX) return missing("eod_id");
  r.eod_id = static_cast<uint32_t>(eod);
  if (!flag("endoftext_as_text", &r.endoftext_as_text)) return missing("endoftext_as_text");
  if (!flag("append_eod", &r.append_eod)) return missing("append_eod");
  if (root["bin_bytes"].get(r.bin_bytes)) return missing("bin_bytes");
  if (root["idx_bytes"].get(r.idx_bytes)) return missing("idx_bytes");
  // Optional: records written before pileprep named the inodes have none.
  auto optional_number = [&root](const char* field, uint64_t* out) {
    simdjson::dom::element e;
    return root[field].get(e) != simdjson::SUCCESS || !e.get(*out);
  };
  if (!optional_number("bin_inode", &r.bin_inode)) return missing("bin_inode");
  if (!optional_number("idx_inode", &r.idx_inode)) return missing("idx_inode");
  return r;
}

std::vector<std::string> SettingsDifferences(const ShardRecord& recorded, const ShardRecord& now) {
  std::vector<std::string> out;
  if (recorded.vocabulary_fingerprint != now.vocabulary_fingerprint) {
    out.push_back(absl::StrCat("the vocabulary or merges: fingerprint ",
                               Hex(recorded.vocabulary_fingerprint), " (", recorded.vocab_size,
                               " tokens) then, ", Hex(now.vocabulary_fingerprint), " (",
                               now.vocab_size, " tokens) now"));
  }
  auto set = [](bool b) { return b ? "set" : "not set"; };
  if (recorded.endoftext_as_text != now.endoftext_as_text) {
    out.push_back(absl::StrCat("--endoftext-as-text: ", set(recorded.endoftext_as_text), " then, ",
                               set(now.endoftext_as_text), " now"));
  }
  // The key set as a set: its order changes no key's bytes.
  std::vector<std::string> then = recorded.json_keys, now_keys = now.json_keys;
  std::sort(then.begin(), then.end());
  std::sort(now_keys.begin(), now_keys.end());
  if (!then.empty() && !now_keys.empty() && then != now_keys) {
    out.push_back(absl::StrCat("--json-keys: ", absl::StrJoin(recorded.json_keys, " "), " then, ",
                               absl::StrJoin(now.json_keys, " "),
                               " now (a document missing any key is skipped for all)"));
  }
  auto appended = [](bool b) { return b ? "appended" : "not appended"; };
  if (recorded.append_eod != now.append_eod) {
    out.push_back(absl::StrCat("end-of-document ids: ", appended(recorded.append_eod), " then, ",
                               appended(now.append_eod), " now"));
  }
  return out;
}

namespace {

// The record at `path`: NotFound when there is none, else its read or parse error.
// NotFound when there is none; InvalidArgument or DataLoss when the file is not a record; any
// other code when it could not be read (EINVAL from read(2) too, which would otherwise read as
// InvalidArgument: "not a record", where the file may well be one).
absl::StatusOr<ShardRecord> ReadRecord(const std::string& path) {
  auto io_error = [](const absl::Status& s) {
    return absl::IsNotFound(s) ? s : absl::UnavailableError(s.message());
  };
  absl::StatusOr<internal::UniqueFd> fd = internal::OpenForRead(path);
  if (!fd.ok()) return io_error(fd.status());
  std::string text(size_t{64} << 10, '\0');  // a record is a few hundred bytes
  absl::StatusOr<size_t> got = internal::ReadFull(fd->get(), text.data(), text.size(), path, 0);
  if (!got.ok()) return io_error(got.status());
  if (*got == text.size()) return absl::DataLossError("larger than any record");
  text.resize(*got);
  return ParseShardRecord(text);
}

// Whether the pending record names the files now under the prefix's final names: the inodes the
// temporaries had (a rename keeps them; the older files, there at the same time, had others) and
// the sizes.
bool NamesTheFilesInPlace(const ShardRecord& pending, const std::string& prefix) {
  struct stat bin, idx;
  return pending.bin_inode != 0 && pending.idx_inode != 0 &&
         ::stat((prefix + ".bin").c_str(), &bin) == 0 &&
         ::stat((prefix + ".idx").c_str(), &idx) == 0 &&
         static_cast<uint64_t>(bin.st_ino) == pending.bin_inode &&
         static_cast<uint64_t>(idx.st_ino) == pending.idx_inode &&
         static_cast<uint64_t>(bin.st_size) == pending.bin_bytes &&
         static_cast<uint64_t>(idx.st_size) == pending.idx_bytes;
}

}  // namespace

absl::StatusOr<PendingStates> ReadPendingStates(const std::vector<std::string>& prefixes) {
  PendingStates out;
  out.state.assign(prefixes.size(), PendingStates::kNone);
  bool any_names = false, any_stale = false;
  for (size_t k = 0; k < prefixes.size(); ++k) {
    absl::StatusOr<ShardRecord> pending = ReadRecord(PendingRecordPath(prefixes[k]));
    if (absl::IsNotFound(pending.status())) continue;
    // Not a record (a crash cannot cut one short: it is written whole and renamed): names nothing.
    // A read error is not a verdict: the caller does not act on the shard's pending records.
    if (!pending.ok() && !absl::IsInvalidArgument(pending.status()) &&
        !absl::IsDataLoss(pending.status())) {
      return pending.status();
    }
    const bool names = pending.ok() && NamesTheFilesInPlace(*pending, prefixes[k]);
    out.state[k] = names ? PendingStates::kNamesFiles : PendingStates::kStale;
    any_names |= names;
    any_stale |= !names;
  }
  out.torn = any_names && any_stale;
  return out;
}

absl::StatusOr<PendingResolution> ResolvePendingRecords(const std::vector<std::string>& prefixes) {
  PILEPREP_ASSIGN_OR_RETURN(const PendingStates states, ReadPendingStates(prefixes));
  PendingResolution out;
  if (states.torn) {
    // This run's half-publish goes, .idx first; the pending records only once every key's
    // outputs are gone (if one cannot be removed, they stay, and the error says why).
    for (size_t k = 0; k < prefixes.size(); ++k) {
      if (states.state[k] != PendingStates::kNamesFiles) continue;
      PILEPREP_RETURN_IF_ERROR(internal::RemoveFileIfExists(prefixes[k] + ".idx"));
      PILEPREP_RETURN_IF_ERROR(internal::RemoveFileIfExists(prefixes[k] + ".bin"));
      out.withdrawn.push_back(prefixes[k]);
    }
    // The withdrawal durable before any pending record goes.
    if (!out.withdrawn.empty()) {
      PILEPREP_RETURN_IF_ERROR(internal::SyncDirectory(internal::DirName(prefixes[0])));
    }
  }
  for (size_t k = 0; k < prefixes.size(); ++k) {
    const std::string path = PendingRecordPath(prefixes[k]);
    if (states.state[k] == PendingStates::kNamesFiles && !states.torn) {
      PILEPREP_RETURN_IF_ERROR(internal::RenameFile(path, RecordPath(prefixes[k])));
      out.completed.push_back(path);
    } else if (states.state[k] != PendingStates::kNone) {
      PILEPREP_RETURN_IF_ERROR(internal::RemoveFileIfExists(path));
      out.removed.push_back(path);
    }
  }
  if (!out.completed.empty() || !out.withdrawn.empty()) {
    PILEPREP_RETURN_IF_ERROR(internal::SyncDirectory(internal::DirName(prefixes[0])));
  }
  return out;
}

RecordCheck CheckRecord(const std::string& prefix, const ShardRecord& now, bool pending_is_theirs) {
  RecordCheck check;
  std::string path = PendingRecordPath(prefix);
  absl::StatusOr<ShardRecord> recorded = absl::NotFoundError("");
  if (pending_is_theirs) recorded = ReadRecord(path);
  if (!recorded.ok()) {
    path = RecordPath(prefix);
    recorded = ReadRecord(path);
  }
  if (absl::IsNotFound(recorded.status())) {
    check.verdict = RecordCheck::kNoRecord;
    check.why =
        "no record of the settings it was made with (made by another tool or an earlier "
        "pileprep): judged by validation alone";
    return check;
  }
  if (absl::IsUnavailable(recorded.status())) {
    // Taken for "no word" it let a shard made with other settings pass as this run's when it
    // validated (an NFS ESTALE, an EIO): the record may well say otherwise.
    check.verdict = RecordCheck::kCannotRead;
    check.why = absl::StrCat("its record ", path, " cannot be read (", recorded.status().message(),
                             "): what made the outputs is not known");
    return check;
  }
  if (!recorded.ok()) {
    check.verdict = RecordCheck::kUnreadable;
    check.why = absl::StrCat("its record ", path, " is unreadable (", recorded.status().message(),
                             "): judged by validation alone");
    return check;
  }
  struct stat bin, idx;
  if (::stat((prefix + ".bin").c_str(), &bin) != 0 ||
      ::stat((prefix + ".idx").c_str(), &idx) != 0 ||
      static_cast<uint64_t>(bin.st_size) != recorded->bin_bytes ||
      static_cast<uint64_t>(idx.st_size) != recorded->idx_bytes) {
    check.verdict = RecordCheck::kOtherOutputs;
    check.why = absl::StrCat("its record ", path,
                             " lists other sizes (it was not written for these files): judged by "
                             "validation alone");
    return check;
  }
  const std::vector<std::string> differences = SettingsDifferences(*recorded, now);
  if (differences.empty()) {
    check.verdict = RecordCheck::kSameSettings;
    return check;
  }
  check.verdict = RecordCheck::kOtherSettings;
  check.why = absl::StrCat("made with other settings (", absl::StrJoin(differences, "; "),
                           "; record ", path, ")");
  return check;
}

}  // namespace pileprep::cli
