// A small command-line parser: `--flag value`, `--flag=value`, boolean switches and multi-value flags
// (Megatron's `--json-keys a b`). Flags are declared with their help text, so --help lists exactly
// what is parsed.
#ifndef PILEPREP_TOOLS_PILEPREP_ARGS_H_
#define PILEPREP_TOOLS_PILEPREP_ARGS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pileprep::cli {

class Args {
 public:
  // kMulti: values up to the next flag, and a repeated flag adds to them (`--header A --header B`).
  // kList: the same, but a repeated flag replaces them, as argparse's nargs='+' does
  // (`--json-keys a --json-keys b` is ["b"] in Megatron).
  enum class Kind { kValue, kSwitch, kMulti, kList };
  struct Flag {
    std::string name;      // without "--"
    Kind kind;
    std::string value_name;
    std::string help;
    std::string default_text;
    bool hidden = false;
    // Parsed state.
    int times = 0;  // how many times it was given (a kValue flag keeps the last value)
    std::vector<std::string> values;
  };

  void Add(std::string name, Kind kind, std::string value_name, std::string help,
           std::string default_text = "", bool hidden = false);
  // Parses argv[first..argc). Positional arguments are collected in positional().
  absl::Status Parse(int argc, char** argv, int first);

  bool Has(const std::string& name) const;
  // How many times the flag was given (0 if not).
  int Times(const std::string& name) const;
  std::string Get(const std::string& name, const std::string& fallback = "") const;
  const std::vector<std::string>& GetAll(const std::string& name) const;
  // The flag's last value as a whole number in [min, max], read as Python's int() reads it ("+2",
  // "1_000"); untouched `out` when the flag is absent.
  absl::Status GetInt(const std::string& name, long long min, long long max, long long* out) const;
  // The flag's last value as seconds in [min, max], read as Python's float() reads it ("1.5",
  // "2e1", "1_0"; not C's hex "0x10"); untouched `out` when the flag is absent.
  absl::Status GetSeconds(const std::string& name, double min, double max, double* out) const;
  const std::vector<std::string>& positional() const { return positional_; }

  // Flag table for --help: "  --name VALUE   help (default: x)".
  std::string Help() const;

 private:
  Flag* Find(const std::string& name);
  // Find, or as argparse (allow_abbrev) the one shown flag `name` begins (`--vocab` for
  // --vocab-file; hidden flags only by their full name); InvalidArgument for a name no flag or
  // several flags begin.
  absl::Status Resolve(const std::string& name, Flag** flag);
  const Flag* Find(const std::string& name) const;
  std::vector<Flag> flags_;
  std::vector<std::string> positional_;
};

}  // namespace pileprep::cli

#endif  // PILEPREP_TOOLS_PILEPREP_ARGS_H_
