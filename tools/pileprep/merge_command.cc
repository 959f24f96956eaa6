// `pileprep merge --output-prefix P PREFIX... | --input-dir DIR`: Megatron's merge_datasets.py,
// streaming.

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common.h"
#include "path_lock.h"
#include "pileprep/indexed_reader.h"
#include "pileprep/merge.h"
#include "shard_record.h"
#include "signals.h"

namespace pileprep::cli {
namespace {

int RunMerge(int argc, char** argv, int first) {
  Args args;
  args.Add("output-prefix", Args::Kind::kValue, "P", "write P.bin and P.idx");
  args.Add("input-dir", Args::Kind::kValue, "DIR",
           "merge every .bin/.idx pair in DIR, prefixes sorted lexicographically (Megatron's "
           "merge_datasets.py --input)");
  args.Add("input", Args::Kind::kValue, "DIR", "same as --input-dir (Megatron's flag name)", "",
           true);
  args.Add("no-validate", Args::Kind::kSwitch, "",
           "skip validating each input before merging (its lengths, document indices and .bin "
           "size are checked all the same: the output's index is built from them)");
  args.Add("allow-holes", Args::Kind::kSwitch, "",
           "accept inputs whose files have holes (a sparse copy of a file with runs of zero "
           "bytes), which validation otherwise refuses as likely incomplete");
  args.Add("no-sync", Args::Kind::kSwitch, "", "do not fsync the outputs", "", true);
  args.Add("quiet", Args::Kind::kSwitch, "", "print only errors (-q)");
  args.Add("help", Args::Kind::kSwitch, "", "show this help (-h)");
  const std::optional<int> done = ParseOrHelp(
      args, argc, argv, first,
      "Usage: pileprep merge --output-prefix P PREFIX...\n"
      "       pileprep merge --output-prefix P --input-dir DIR\n\n"
      "Merges Megatron .bin/.idx datasets into P.bin/P.idx, byte-identical to preprocessing their\n"
      "inputs concatenated in that order: PREFIX arguments in the order given, or every pair in\n"
      "DIR sorted lexicographically (Megatron's tools/merge_datasets.py). Streaming: memory does\n"
      "not grow with the number of documents or inputs. All inputs must share one dtype.\n\n",
      "Exit status:\n"
      "  0  merged and published\n"
      "  1  an input is unusable or the merge failed (nothing is published)\n"
      "  2  usage or set-up error (bad flag, an input given twice, the output named as an\n"
      "     input, an output directory that cannot be made or written)\n"
      "  129, 130, 143  stopped by SIGHUP, SIGINT or SIGTERM (its temporary files removed; "
      "nothing published)\n");
  if (done) return *done;
  const std::string output = args.Get("output-prefix");
  if (output.empty()) {
    PrintError("merge needs --output-prefix P (see --help)");
    return kExitUsage;
  }
  if (args.Has("input-dir") && args.Has("input")) {
    PrintError("merge takes --input-dir DIR or --input DIR (the same flag), not both (see --help)");
    return kExitUsage;
  }
  if (const int times = args.Times("input-dir") + args.Times("input"); times > 1) {
    // Taken as argparse takes it, the last directory alone, the others' datasets would be left
    // out of an output that looks complete.
    PrintError(absl::StrCat("merge takes one --input-dir DIR (given ", times,
                            " times); to merge the datasets of several directories, give their "
                            "pairs as arguments instead (DIR1/*.bin DIR2/*.bin; see --help)"));
    return kExitUsage;
  }
  const std::string dir = args.Has("input-dir") ? args.Get("input-dir") : args.Get("input");
  if (dir.empty() && args.positional().empty()) {
    PrintError("merge needs input PREFIXes or --input-dir DIR (see --help)");
    return kExitUsage;
  }
  if (!dir.empty() && !args.positional().empty()) {
    PrintError("merge takes input PREFIXes or --input-dir DIR, not both (see --help)");
    return kExitUsage;
  }
  std::vector<std::string> inputs;
  if (!dir.empty()) {
    auto found = FindDatasetPrefixes(dir);
    if (!found.ok()) {
      PrintError(std::string(found.status().message()));
      return kExitFailed;
    }
    if (found->empty()) {
      PrintError(absl::StrCat(dir, ": no .bin/.idx pairs in this directory"));
      return kExitFailed;
    }
    inputs = *std::move(found);
  } else {
    // A glob (`merge -o P shards/*`) names each pair twice, as its .bin and its .idx: one input.
    // (So does `g/x.idx ./g/x.bin`: the same .idx and .bin, by their devices and inodes; both,
    // as a deduplicating tool may hard-link the equal .idx files of two datasets whose .bin
    // differ.) Any other repeat (a prefix given twice, or the same files by two paths) would merge
    // a dataset twice, which Megatron's merge (a directory's pairs, each once) never does: refused.
    std::vector<std::string> given;  // the argument each input came from
    using FileId = std::pair<dev_t, ino_t>;
    std::vector<std::pair<FileId, FileId>> files;  // the .idx's and the .bin's, or zeros
    std::vector<char> halves;  // inputs[i] came from a .bin or .idx argument, not yet paired
    for (const std::string& arg : args.positional()) {
      const std::string prefix = StripPairSuffix(arg);
      const bool half = prefix != arg;
      auto id_of = [](const std::string& path) {
        struct stat st;
        return ::stat(path.c_str(), &st) == 0 ? FileId{st.st_dev, st.st_ino} : FileId{0, 0};
      };
      const std::pair<FileId, FileId> id{id_of(prefix + ".idx"), id_of(prefix + ".bin")};
      const bool known = id.first.second != 0;
      size_t seen = inputs.size();
      for (size_t i = 0; i < inputs.size() && seen == inputs.size(); ++i) {
        if (inputs[i] == prefix || (known && files[i] == id)) seen = i;
      }
      if (seen == inputs.size()) {
        inputs.push_back(prefix);
        given.push_back(arg);
        files.push_back(id);
        halves.push_back(half);
        continue;
      }
      // The other half of the pair (its .bin after its .idx, or the reverse, by any spelling of the
      // same files): one input.
      if (half && halves[seen] &&
          arg.substr(arg.size() - 4) != given[seen].substr(given[seen].size() - 4)) {
        halves[seen] = false;
        continue;
      }
      PrintError(absl::StrCat("input ", arg, " is ", given[seen],
                              inputs[seen] == prefix ? " again" : "'s dataset by another path",
                              ": each input is merged once (list it once)"));
      return kExitUsage;
    }
  }
  // A usage error changes nothing on disk: the name is checked before its directory is made.
  if (output.back() == '/') {
    PrintError(
        absl::StrCat("--output-prefix ", output,
                     ": names no file (P.bin and P.idx are written; P must not end in '/')"));
    return kExitUsage;
  }
  // The output named as an input (by its prefix, or its files by another path): a usage error, as
  // an input given twice is (MergeDatasets refuses it too, after the output's directory is made).
  {
    struct stat out_idx, out_bin, in;
    const bool idx_there = ::stat((output + ".idx").c_str(), &out_idx) == 0;
    const bool bin_there = ::stat((output + ".bin").c_str(), &out_bin) == 0;
    for (const std::string& input : inputs) {
      const bool same = input == output ||
                        (idx_there && ::stat((input + ".idx").c_str(), &in) == 0 &&
                         in.st_dev == out_idx.st_dev && in.st_ino == out_idx.st_ino) ||
                        (bin_there && ::stat((input + ".bin").c_str(), &in) == 0 &&
                         in.st_dev == out_bin.st_dev && in.st_ino == out_bin.st_ino);
      if (same) {
        PrintError(absl::StrCat("--output-prefix ", output, " is also an input (", input,
                                "): the merge would read what it replaces; name another output"));
        return kExitUsage;
      }
    }
  }
  // An input that is not there fails before the output's directory is made: a failed merge leaves
  // nothing behind (the inputs are read and checked in full by the merge itself).
  for (const std::string& input : inputs) {
    for (const char* ext : {".idx", ".bin"}) {
      if (::access((input + ext).c_str(), F_OK) != 0) {
        PrintError(absl::StrCat(input, ext, ": cannot open: ", std::strerror(errno)));
        return kExitFailed;
      }
    }
  }
  if (auto s = EnsureDirectory(DirectoryOf(output), "--output-prefix"); !s.ok()) {
    PrintError(std::string(s.message()));
    return kExitUsage;
  }
  // Two writers of one output (two merges, a merge and a preprocess or shard job) would share its
  // temporaries: one at a time. Then a killed writer's temporaries go: a merge's, or a preprocess's
  // or shard job's onto the same name (their spill files too).
  PathLocks locks;
  if (!LockOutputs({DatasetLockPath(output)}, output, DatasetTemporaries(output), args.Has("quiet"),
                   &locks)) {
    return kExitFailed;
  }
  // SIGINT/SIGTERM stop the merge within a block and remove its temporaries (as large as all the
  // inputs' .bin files together); a second signal ends the process at once, and the next writer of
  // P removes what it left.
  InstallCancelHandlers();
  MergeOptions options;
  options.cancel = &CancelFlag();
  options.validate_inputs = !args.Has("no-validate");
  options.allow_holes = args.Has("allow-holes");
  options.sync = !args.Has("no-sync");
  // A shard job's record beside the output's name would vouch for bytes it was not written for:
  // removed once the merge is complete, before it is published (a refused or failed merge leaves
  // it and the old pair as they were).
  options.before_publish = [&output] { return ForgetRecords({output}); };
  auto result = MergeDatasets(inputs, output, options);
  if (!result.ok()) {
    PrintError(std::string(result.status().message()));
    return absl::IsCancelled(result.status()) ? CancelExitCode() : kExitFailed;
  }
  if (!result->published) {
    PrintError("the inputs hold no tokens: nothing written (no reader can open an empty dataset)");
    return kExitFailed;
  }
  if (!args.Has("quiet")) {
    std::fprintf(stderr,
                 "merged %llu dataset%s (%s): %llu sequences, %llu documents, %llu tokens -> "
                 "%s.{bin,idx}\n",
                 static_cast<unsigned long long>(result->inputs), result->inputs == 1 ? "" : "s",
                 DTypeName(result->dtype), static_cast<unsigned long long>(result->sequences),
                 static_cast<unsigned long long>(result->documents),
                 static_cast<unsigned long long>(result->tokens), output.c_str());
  }
  return kExitOk;
}

const CommandRegistration kRegistration(
    "merge", "merge .bin/.idx datasets (Megatron's merge_datasets.py), streaming", RunMerge);

}  // namespace
}  // namespace pileprep::cli
