// `pileprep validate PREFIX|DIR...`: checks .bin/.idx pairs against every invariant of the format.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common.h"
#include "pileprep/indexed_reader.h"
#include "pileprep/validate.h"
#include "signals.h"

namespace pileprep::cli {
namespace {

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

int RunValidate(int argc, char** argv, int first) {
  const ValidateOptions defaults;
  Args args;
  args.Add("json", Args::Kind::kSwitch, "",
           "print one JSON object per dataset (one per line) instead of text");
  args.Add("expect-eod", Args::Kind::kSwitch, "",
           "require every document to end with EOD: its last sequence (datasets made with "
           "--append-eod)");
  args.Add("eod-id", Args::Kind::kValue, "ID", "the EOD token for --expect-eod",
           absl::StrCat(defaults.eod_id));
  args.Add("vocab-size", Args::Kind::kValue, "N", "every token must be below N",
           absl::StrCat(defaults.vocab_size));
  args.Add("index-only", Args::Kind::kSwitch, "",
           "check the .idx and the .bin size only; do not read the tokens");
  args.Add("allow-holes", Args::Kind::kSwitch, "",
           "accept holes (regions never written, reading as zeros) in the files, and blocks of "
           "4096 tokens 0 in the .bin: a copy made sparse (cp --sparse=always, rsync -S, ZFS "
           "compression) of a file with runs of zero bytes has holes; by default both fail, as a "
           "download cut short into a preallocated file leaves them");
  args.Add("threads", Args::Kind::kValue, "N", "threads for the token checks", "all cores");
  args.Add("quiet", Args::Kind::kSwitch, "", "print only violations (-q)");
  args.Add("help", Args::Kind::kSwitch, "", "show this help (-h)");
  const std::optional<int> done = ParseOrHelp(
      args, argc, argv, first,
      "Usage: pileprep validate [--expect-eod] [--vocab-size N] [--json] PREFIX|DIR...\n\n"
      "Checks Megatron .bin/.idx pairs against every invariant of the format: magic, version,\n"
      "dtype, sizes, lengths, pointers, document indices, the .bin size (catches truncated copies\n"
      "and Megatron's 2023 EOD off-by-one), token range, holes and runs of zero tokens (a copy\n"
      "cut short into a preallocated file) and, with --expect-eod, the final EOD.\n"
      "PREFIX names PREFIX.bin + PREFIX.idx (PREFIX.idx or PREFIX.bin is accepted too); a DIR\n"
      "means every *.idx/*.bin pair in it. The first violation of each kind is reported with its\n"
      "byte offset and index.\n\n",
      "Exit status:\n"
      "  0      every dataset is sound\n"
      "  1      a dataset has a violation or cannot be opened\n"
      "  2      usage error\n"
      "  128+N  ended by signal N, with no verdict: 135 (SIGBUS) when a file shrank while it\n"
      "         was read, 141 (SIGPIPE) when the reader of stdout went away, 130 Ctrl-C\n");
  if (done) return *done;
  SetBusErrorReadOnly();
  ValidateOptions options;
  long long v = static_cast<long long>(options.vocab_size);
  // At most 2^31: int32 ids are compared unsigned, so a larger size would pass negative ids.
  if (auto s = args.GetInt("vocab-size", 1, 1LL << 31, &v); !s.ok()) {
    PrintError(std::string(s.message()));
    return kExitUsage;
  }
  options.vocab_size = static_cast<uint64_t>(v);
  v = options.eod_id;
  if (auto s = args.GetInt("eod-id", 0, UINT32_MAX, &v); !s.ok()) {
    PrintError(std::string(s.message()));
    return kExitUsage;
  }
  options.eod_id = static_cast<uint32_t>(v);
  v = 0;
  if (auto s = args.GetInt("threads", 1, 4096, &v); !s.ok()) {
    PrintError(std::string(s.message()));
    return kExitUsage;
  }
  options.threads = static_cast<int>(v);
  options.expect_eod = args.Has("expect-eod");
  options.check_tokens = !args.Has("index-only");
  options.check_holes = !args.Has("allow-holes");
  options.check_zero_fill = !args.Has("allow-holes");
  if (args.Has("eod-id") && !options.expect_eod) {
    // Checked only with --expect-eod: taken alone, it would check nothing and say nothing.
    PrintError("--eod-id names the token --expect-eod looks for, which is not given: give both");
    return kExitUsage;
  }
  if (options.expect_eod && options.eod_id >= options.vocab_size) {
    // Every token is checked to be below --vocab-size: no document could end with such an EOD.
    PrintError(absl::StrCat("--eod-id ", options.eod_id, " is not below --vocab-size ",
                            options.vocab_size,
                            ": no token can be it (a larger vocabulary's datasets need their "
                            "--vocab-size N too)"));
    return kExitUsage;
  }
  if (options.expect_eod && !options.check_tokens) {
    // The final EOD is a token of the .bin, which --index-only never reads.
    PrintError("--expect-eod reads the .bin's tokens, which --index-only leaves unread: give one");
    return kExitUsage;
  }
  const bool json = args.Has("json");
  const bool quiet = args.Has("quiet");
  if (args.positional().empty()) {
    PrintError("validate needs at least one PREFIX or DIR (see --help)");
    return kExitUsage;
  }

  int exit_code = kExitOk;
  auto fail_open = [&](const std::string& prefix, const std::string& message) {
    if (json) {
      ValidationReport r;
      r.prefix = prefix;
      r.violations.push_back({"open", message, -1, -1, 1});
      std::printf("%s\n", ValidationReportToJson(r).c_str());
    } else {
      PrintError(message);
    }
    exit_code = kExitFailed;
  };
  for (const std::string& arg : args.positional()) {
    std::vector<std::string> prefixes;
    // A name that is both a directory and a dataset's prefix (`amb/` beside `amb.idx`): the pair,
    // which a training job's --data-path amb reads, is checked as well as the directory's pairs.
    // A trailing '/' names the directory alone. An `amb.bin` without its .idx is half a dataset
    // (a publish killed between its renames leaves one) or another file of that name: named as a
    // lone half is in a directory, with the spelling that leaves it out.
    struct stat st;
    if (IsDirectory(arg) && arg.back() != '/') {
      if (::stat((arg + ".idx").c_str(), &st) == 0) {
        prefixes.push_back(arg);
      } else if (::stat((arg + ".bin").c_str(), &st) == 0) {
        const std::string name = arg.substr(arg.find_last_of('/') + 1);
        fail_open(arg, absl::StrCat(arg, ".bin has no ", name, ".idx beside it (`validate ", arg,
                                    "/` checks the directory alone)"));
      }
    }
    if (IsDirectory(arg)) {
      // A file without its other half fails, and the pairs are checked all the same: one missing
      // .bin must not hide what the others hold.
      std::vector<std::string> unpaired;
      auto found = FindDatasetPrefixes(arg, &unpaired);
      if (!found.ok()) {
        fail_open(arg, std::string(found.status().message()));
      } else {
        for (const std::string& path : unpaired) {
          const bool is_idx = absl::EndsWith(path, ".idx");
          const std::string prefix = path.substr(0, path.size() - 4);
          const std::string other = prefix + (is_idx ? ".bin" : ".idx");
          // A directory of that name is skipped when listing (as merge_datasets.py skips it):
          // named as what it is, not as missing.
          fail_open(prefix,
                    IsDirectory(other)
                        ? absl::StrCat(other, ": not a regular file (a directory)")
                        : absl::StrCat(path, " has no ", prefix.substr(prefix.rfind('/') + 1),
                                       is_idx ? ".bin" : ".idx", " beside it"));
        }
        // (An empty directory beside the pair it was named for is no error: the pair is checked.)
        if (found->empty() && unpaired.empty() && prefixes.empty()) {
          fail_open(arg, absl::StrCat(arg, ": no .bin/.idx pairs in this directory"));
        }
        prefixes.insert(prefixes.end(), found->begin(), found->end());
      }
    } else {
      prefixes.push_back(StripPairSuffix(arg));
    }
    for (const std::string& prefix : prefixes) {
      auto report = ValidateDataset(prefix, options);
      if (!report.ok()) {
        fail_open(prefix, std::string(report.status().message()));
        continue;
      }
      if (!report->ok()) exit_code = kExitFailed;
      // The advice is this command's (the shard job, which validates its outputs with the same
      // check, has no --expect-eod to drop).
      for (Violation& v : report->violations) {
        if (v.kind == "eod")
          absl::StrAppend(&v.message, " (drop --expect-eod if that is intended)");
      }
      if (json) {
        std::printf("%s\n", ValidationReportToJson(*report).c_str());
      } else if (!report->ok() || !quiet) {
        std::fputs(FormatValidationReport(*report).c_str(), stdout);
      }
    }
  }
  // A report that did not reach stdout (a full disk under `--json > report.jsonl`) is no verdict.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    PrintError(absl::StrCat("stdout: the report was not written in full: ", std::strerror(errno)));
    return kExitFailed;
  }
  return exit_code;
}

const CommandRegistration kRegistration(
    "validate", "check .bin/.idx pairs against every invariant of the format (exit 0 = sound)",
    RunValidate);

}  // namespace
}  // namespace pileprep::cli
