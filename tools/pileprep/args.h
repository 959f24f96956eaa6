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
  enum class Kind { kValue, kSwitch, kMulti };
  struct Flag {
    std::string name;      // without "--"
    Kind kind;
    std::string value_name;
    std::string help;
    std::string default_text;
    bool hidden = false;
    // Parsed state.
    bool seen = false;
    std::vector<std::string> values;
  };

  void Add(std::string name, Kind kind, std::string value_name, std::string help,
           std::string default_text = "", bool hidden = false);
  // Parses argv[first..argc). Positional arguments are collected in positional().
  absl::Status Parse(int argc, char** argv, int first);

  bool Has(const std::string& name) const;
  std::string Get(const std::string& name, const std::string& fallback = "") const;
  const std::vector<std::string>& GetAll(const std::string& name) const;
  absl::Status GetInt(const std::string& name, long long min, long long max, long long* out) const;
  const std::vector<std::string>& positional() const { return positional_; }

  // Flag table for --help: "  --name VALUE   help (default: x)".
  std::string Help() const;

 private:
  Flag* Find(const std::string& name);
  const Flag* Find(const std::string& name) const;
  std::vector<Flag> flags_;
  std::vector<std::string> positional_;
};

}  // namespace pileprep::cli

#endif  // PILEPREP_TOOLS_PILEPREP_ARGS_H_
