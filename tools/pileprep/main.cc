// pileprep: prepare GPT pre-training data (Pile shards -> Megatron .bin/.idx).
//
// The library is silent; this tool owns printing, exit codes and advice. Subcommands register
// themselves (common.h); with no subcommand name the shard job runs.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common.h"
#include "pileprep/fetch.h"
#include "signals.h"

namespace pileprep::cli {
namespace {

// Whether `typed` is plausibly `name` mistyped: a prefix of it of three letters or more (an
// abbreviation), or at most two edits away (Levenshtein).
bool IsLikelyTypo(const std::string& typed, const std::string& name) {
  if (typed.size() >= 3 && name.compare(0, typed.size(), typed) == 0) return true;
  std::vector<size_t> prev(name.size() + 1), cur(name.size() + 1);
  for (size_t j = 0; j <= name.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= typed.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= name.size(); ++j) {
      cur[j] = std::min(
          {prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (typed[i - 1] == name[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[name.size()] <= 2;
}

// For a name that is no command: the commands' names, comma-separated, and the one `typed`
// plausibly meant ("" if none; `also` are names tried after the commands).
struct CommandHint {
  std::string names, meant;
};
CommandHint HintFor(const std::string& typed, std::initializer_list<const char*> also = {}) {
  CommandHint hint;
  for (const Command& c : Commands()) {
    absl::StrAppend(&hint.names, hint.names.empty() ? "" : ", ", c.name);
    if (hint.meant.empty() && IsLikelyTypo(typed, c.name)) hint.meant = c.name;
  }
  for (const char* name : also) {
    if (hint.meant.empty() && IsLikelyTypo(typed, name)) hint.meant = name;
  }
  return hint;
}

int Dispatch(int argc, char** argv) {
  if (argc >= 2) {
    const std::string cmd = argv[1];
    if (cmd == "version") {
      std::printf("pileprep %s\n", PILEPREP_VERSION);
      return kExitOk;
    }
    // --version anywhere, as after a command name (`pileprep validate --version`): an argument that
    // is exactly "--version" is never a flag's value (a value that starts with '-' goes inline,
    // --name=-value), so it can be answered before any command parses its flags. Not after "--",
    // which ends the flags: there it is a dataset's or a file's name.
    for (int i = 1; i < argc && std::strcmp(argv[i], "--") != 0; ++i) {
      if (std::strcmp(argv[i], "--version") == 0) {
        std::printf("pileprep %s\n", PILEPREP_VERSION);
        return kExitOk;
      }
    }
    if (cmd == "help") {
      if (argc >= 3) {
        for (const Command& c : Commands()) {
          if (argv[2] == std::string(c.name)) {
            char* help_argv[] = {argv[0], argv[2], const_cast<char*>("--help")};
            return c.fn(3, help_argv, 2);
          }
        }
      }
      if (argc >= 3 && argv[2][0] != '-') {  // (`help --help` is the shard job's help)
        const CommandHint hint = HintFor(argv[2]);
        PrintError(absl::StrCat(
            "help: no command '", RedactUrl(argv[2]), "'",
            hint.meant.empty() ? "" : absl::StrCat("; did you mean '", hint.meant, "'?"),
            " (the commands: ", hint.names, "; `pileprep --help` for the shard job)"));
        return kExitUsage;
      }
      char* help_argv[] = {argv[0], const_cast<char*>("--help")};
      return RunShardJob(2, help_argv, 1);
    }
    for (const Command& c : Commands()) {
      if (cmd == c.name) return c.fn(argc, argv, 2);
    }
    // The shard job takes no positional argument, so a first argument that is no flag is a
    // command name mistyped (`pileprep prepro --input x` said "unknown flag --input").
    if (!cmd.empty() && cmd[0] != '-') {
      // Shown without credentials or a query (a SAS token): it may be a URL.
      const std::string shown = RedactUrl(cmd);
      if (cmd.find_first_of("/:.") != std::string::npos) {
        // A path or URL where the shard job wants --url (no command has such a name).
        PrintError(absl::StrCat("'", shown,
                                "' is not a command: where the shards are goes in --url ",
                                "(pileprep --url ", shown, " --files ...; see pileprep --help)"));
        return kExitUsage;
      }
      const CommandHint hint = HintFor(cmd, {"help", "version"});
      PrintError(absl::StrCat(
          "unknown command '", shown, "'",
          hint.meant.empty() ? "" : absl::StrCat(" (did you mean '", hint.meant, "'?)"),
          "; the commands: ", hint.names, "; with none, the shard job runs (`pileprep --help`)"));
      return kExitUsage;
    }
  }
  return RunShardJob(argc, argv, 1);
}

int Main(int argc, char** argv) {
  InstallBusErrorHandler();
  int rc = Dispatch(argc, argv);
  // What a command printed to stdout (help, a version, a --dry-run plan) that did not get there
  // (`> /dev/full`, a closed pipe) is no success.
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;  // fflush's cause; an earlier write's is gone
  if ((!flushed || std::ferror(stdout)) && rc == kExitOk) {
    PrintError(absl::StrCat("stdout: not written in full",
                            flushed ? "" : absl::StrCat(": ", std::strerror(err))));
    rc = kExitFailed;
  }
  return rc;
}

}  // namespace
}  // namespace pileprep::cli

int main(int argc, char** argv) { return pileprep::cli::Main(argc, argv); }
