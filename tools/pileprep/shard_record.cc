#include "shard_record.h"

#include <simdjson.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "console.h"

namespace pileprep::cli {
namespace {

std::string Fingerprint(uint64_t v) { return absl::StrFormat("%016x", v); }

}  // namespace

std::string ShardRecordJson(const ShardRecord& r) {
  std::string out = "{\n";
  absl::StrAppend(&out, "  \"pileprep_version\": ", JsonString(r.pileprep_version), ",\n");
  absl::StrAppend(&out, "  \"shard\": ", JsonString(r.shard), ",\n");
  absl::StrAppend(&out, "  \"source\": ", JsonString(r.source), ",\n");
  absl::StrAppend(&out, "  \"tokenizer_fingerprint\": \"", Fingerprint(r.tokenizer_fingerprint),
                  "\",\n");
  absl::StrAppend(&out, "  \"vocab_size\": ", r.vocab_size, ",\n");
  absl::StrAppend(&out, "  \"eod_id\": ", r.eod_id, ",\n");
  absl::StrAppend(&out, "  \"endoftext_as_text\": ", r.endoftext_as_text ? "true" : "false", ",\n");
  absl::StrAppend(&out, "  \"append_eod\": ", r.append_eod ? "true" : "false", ",\n");
  out += "  \"outputs\": [";
  for (size_t i = 0; i < r.outputs.size(); ++i) {
    const ShardRecord::Output& o = r.outputs[i];
    absl::StrAppend(&out, i ? "," : "", "\n    {\"name\": ", JsonString(o.name),
                    ", \"json_key\": ", JsonString(o.json_key), ", \"bin_bytes\": ", o.bin_bytes,
                    ", \"idx_bytes\": ", o.idx_bytes, "}");
  }
  out += r.outputs.empty() ? "]\n}\n" : "\n  ]\n}\n";
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
  if (!text("tokenizer_fingerprint", &fingerprint) || fingerprint.size() != 16 ||
      !absl::SimpleHexAtoi(fingerprint, &r.tokenizer_fingerprint)) {
    return missing("tokenizer_fingerprint");
  }
  if (root["vocab_size"].get(r.vocab_size)) return missing("vocab_size");
  if (root["eod_id"].get(eod) || eod > UINT32_MAX) return missing("eod_id");
  r.eod_id = static_cast<uint32_t>(eod);
  if (!flag("endoftext_as_text", &r.endoftext_as_text)) return missing("endoftext_as_text");
  if (!flag("append_eod", &r.append_eod)) return missing("append_eod");
  simdjson::dom::array outputs;
  if (root["outputs"].get(outputs)) return missing("outputs");
  for (simdjson::dom::element e : outputs) {
    ShardRecord::Output o;
    std::string_view name, key;
    if (e["name"].get(name) || e["json_key"].get(key) || e["bin_bytes"].get(o.bin_bytes) ||
        e["idx_bytes"].get(o.idx_bytes)) {
      return missing("outputs");
    }
    o.name.assign(name);
    o.json_key.assign(key);
    r.outputs.push_back(std::move(o));
  }
  return r;
}

std::vector<std::string> SettingsDifferences(const ShardRecord& recorded, const ShardRecord& now) {
  std::vector<std::string> out;
  auto yes_no = [](bool b) { return b ? "set" : "not set"; };
  if (recorded.endoftext_as_text != now.endoftext_as_text) {
    out.push_back(absl::StrCat("--endoftext-as-text: ", yes_no(recorded.endoftext_as_text),
                               " then, ", yes_no(now.endoftext_as_text), " now"));
  } else if (recorded.tokenizer_fingerprint != now.tokenizer_fingerprint) {
    // The end-of-text rule is part of the fingerprint: only the files can differ here.
    out.push_back(absl::StrCat(
        "the vocabulary or merges: tokenizer fingerprint ",
        Fingerprint(recorded.tokenizer_fingerprint), " (", recorded.vocab_size, " tokens) then, ",
        Fingerprint(now.tokenizer_fingerprint), " (", now.vocab_size, " tokens) now"));
  }
  if (recorded.append_eod != now.append_eod) {
    out.push_back(
        absl::StrCat("end-of-document ids: ", recorded.append_eod ? "appended" : "not appended",
                     " then, ", now.append_eod ? "appended" : "not appended", " now"));
  }
  return out;
}

bool RecordListsOutput(const ShardRecord& recorded, std::string_view name, uint64_t bin_bytes,
                       uint64_t idx_bytes) {
  for (const ShardRecord::Output& o : recorded.outputs) {
    if (o.name == name) return o.bin_bytes == bin_bytes && o.idx_bytes == idx_bytes;
  }
  return false;
}

}  // namespace pileprep::cli
