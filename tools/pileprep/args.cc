#include "args.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pileprep::cli {

void Args::Add(std::string name, Kind kind, std::string value_name, std::string help,
               std::string default_text, bool hidden) {
  flags_.push_back(Flag{std::move(name), kind, std::move(value_name), std::move(help),
                        std::move(default_text), hidden, false, {}});
}

namespace {
// As argparse: "-x" and "--x" are flags; "-", negative numbers (^-\d+$ or ^-\d*\.\d+$: "-5",
// "-.5", not "-1x") and, of one dash, words with a space in them ("-my data") are values.
bool LooksLikeFlag(const std::string& arg) {
  if (arg.size() < 2 || arg[0] != '-') return false;
  if (arg[1] == '-') return true;
  if (arg.find(' ') != std::string::npos) return false;
  auto digits = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      if (arg[i] < '0' || arg[i] > '9') return false;
    }
    return true;
  };
  const size_t dot = arg.find('.');
  const bool negative_number = dot == std::string::npos ? digits(1, arg.size())
                                                        : dot + 1 < arg.size() && digits(1, dot) &&
                                                              digits(dot + 1, arg.size());
  return !negative_number;
}
}  // namespace

Args::Flag* Args::Find(const std::string& name) {
  for (Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}
const Args::Flag* Args::Find(const std::string& name) const {
  return const_cast<Args*>(this)->Find(name);
}

absl::Status Args::Resolve(const std::string& name, Flag** flag) {
  if ((*flag = Find(name)) != nullptr) return absl::OkStatus();
  std::vector<Flag*> begun;
  for (Flag& f : flags_) {
    if (f.name.compare(0, name.size(), name) == 0) begun.push_back(&f);
  }
  // A hidden flag is spelled out (--insecure must not be what `--in` means), but it still counts
  // in what an abbreviation could mean, as all of argparse's flags do: `--p` was
  // --progress-interval for preprocess, where Megatron's parser reads it as --partitions (hidden
  // here).
  if (begun.size() == 1 && !begun.front()->hidden) {
    *flag = begun.front();
    return absl::OkStatus();
  }
  if (begun.size() == 1) {
    return absl::InvalidArgumentError(absl::StrCat("flag --", name, ": write it out as --",
                                                   begun.front()->name,
                                                   " (this flag is not taken abbreviated)"));
  }
  if (begun.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
  }
  std::string names;
  for (const Flag* f : begun) absl::StrAppend(&names, names.empty() ? "" : ", ", "--", f->name);
  return absl::InvalidArgumentError(
      absl::StrCat("ambiguous flag --", name, ": it could be ", names, " (see --help)"));
}

absl::Status Args::Parse(int argc, char** argv, int first) {
  bool options_ended = false;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    // As argparse: "--" ends the flags; every argument after it is positional ("-" is stdin).
    if (options_ended) {
      positional_.push_back(arg);
      continue;
    }
    if (arg == "--") {
      options_ended = true;
      continue;
    }
    // -q or -v where the command has no --quiet or --verbose: named as typed, not as the long
    // flag the user never wrote.
    if ((arg == "-q" && Find("quiet") == nullptr) || (arg == "-v" && Find("verbose") == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", arg, " (see --help)"));
    }
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      if (arg == "-h") arg = "--help";
      else if (arg == "-q") arg = "--quiet";
      else if (arg == "-v") arg = "--verbose";
      else if (LooksLikeFlag(arg)) {
        // An unknown short flag, as argparse: not a dataset or file named "-expect-eod" that
        // fails to open (exit 1, as if the data were bad) while the check asked for never ran.
        std::string hint;
        if (const std::string name = arg.substr(1, arg.find('=') - 1); Find(name) != nullptr) {
          hint = absl::StrCat("; flags take two dashes: --", name);
        }
        return absl::InvalidArgumentError(
            absl::StrCat("unknown flag ", arg, hint, " (see --help)"));
      } else {
        positional_.push_back(arg);
        continue;
      }
    }
    std::string name = arg.substr(2);
    std::string inline_value;
    bool has_inline = false;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name.resize(eq);
      has_inline = true;
    }
    // Megatron spells flags with dashes; accept underscores too (--json_keys).
    for (char& c : name) {
      if (c == '_') c = '-';
    }
    Flag* f = nullptr;
    if (absl::Status s = Resolve(name, &f); !s.ok()) return s;
    name = f->name;  // messages name the flag, not its abbreviation
    ++f->times;
    switch (f->kind) {
      case Kind::kSwitch:
        if (has_inline) {
          return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
        }
        break;
      case Kind::kValue:
        if (has_inline) {
          f->values = {inline_value};
        } else if (i + 1 < argc && LooksLikeFlag(argv[i + 1])) {
          // As argparse: `--output-dir $OUT --dry-run` with OUT empty must not write into a
          // directory named "--dry-run" and drop the dry run. A value that starts with a dash
          // goes inline: --name=-value.
          return absl::InvalidArgumentError(absl::StrCat(
              "--", name, " needs a value: --", name, " ", f->value_name, ", not ", argv[i + 1],
              " (a value that starts with '-' goes as --", name, "=VALUE)"));
        } else if (i + 1 < argc) {
          f->values = {argv[++i]};
        } else {
          return absl::InvalidArgumentError(
              absl::StrCat("--", name, " needs a value: --", name, " ", f->value_name));
        }
        break;
      case Kind::kMulti:
      case Kind::kList: {
        // Values follow until the next flag (argparse's nargs='+'); a repeated kMulti flag adds to
        // the list (`--header A --header B`), a repeated kList flag replaces it (argparse).
        // `--flag=v` is one value, commas included, as in argparse.
        if (f->kind == Kind::kList) f->values.clear();
        const size_t before = f->values.size();
        if (has_inline) {
          // Only that one: argparse takes `--json-keys=a b` as the key a and an argument b it
          // does not expect (exit 2), where the words after it were taken as keys too.
          f->values.push_back(inline_value);
        } else {
          while (i + 1 < argc && !LooksLikeFlag(argv[i + 1])) f->values.push_back(argv[++i]);
        }
        if (f->values.size() == before) {
          return absl::InvalidArgumentError(absl::StrCat("--", name, " needs at least one value"));
        }
        break;
      }
    }
  }
  return absl::OkStatus();
}

bool Args::Has(const std::string& name) const {
  const Flag* f = Find(name);
  return f != nullptr && f->times > 0;
}

int Args::Times(const std::string& name) const {
  const Flag* f = Find(name);
  return f == nullptr ? 0 : f->times;
}

std::string Args::Get(const std::string& name, const std::string& fallback) const {
  const Flag* f = Find(name);
  return f != nullptr && f->times > 0 && !f->values.empty() ? f->values.back() : fallback;
}

const std::vector<std::string>& Args::GetAll(const std::string& name) const {
  static const std::vector<std::string> kEmpty;
  const Flag* f = Find(name);
  return f != nullptr ? f->values : kEmpty;
}

namespace {
// `v` without the ASCII blanks that Python's int() and float() strip around a number (str.strip()'s
// ASCII whitespace but \x1c..\x1f, which they keep).
std::string_view StripPythonBlanks(std::string_view v) {
  auto blank = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  while (!v.empty() && blank(v.front())) v.remove_prefix(1);
  while (!v.empty() && blank(v.back())) v.remove_suffix(1);
  return v;
}

// A whole number as Python's int() reads a command-line string (argparse's type=int, which
// Megatron's flags use): blanks around it, a sign ('+' too), and single underscores between digits
// ("+2", " 8 ", "1_000"). Digits of other scripts, which int() also reads, are refused.
bool ParsePythonInt(std::string_view v, long long* out) {
  v = StripPythonBlanks(v);
  std::string digits;
  if (!v.empty() && (v.front() == '+' || v.front() == '-')) {
    if (v.front() == '-') digits = "-";
    v.remove_prefix(1);
  }
  for (size_t i = 0; i < v.size(); ++i) {
    const bool between = i > 0 && i + 1 < v.size() && v[i - 1] != '_';
    if (v[i] == '_' && between) continue;
    if (v[i] < '0' || v[i] > '9') return false;
    digits += v[i];
  }
  if (digits.empty() || digits == "-") return false;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), *out);
  return ec == std::errc() && ptr == digits.data() + digits.size();
}

// A number as Python's float() reads a command-line string (argparse's type=float): blanks around
// it, a sign, digits with single underscores between them, a fraction, an exponent. Not the hex
// ("0x10") and hex-float forms that strtod and absl::SimpleAtod also take; "inf" and "nan", which
// float() reads, are refused here: no flag takes them. Too small or too large a number is 0 or
// inf, as in float(). As in ParsePythonInt, digits of other scripts and non-ASCII blanks (U+00A0,
// U+0085), which float() also reads, are refused.
bool ParsePythonFloat(std::string_view v, double* out) {
  v = StripPythonBlanks(v);
  std::string plain;  // v without its sign's '+' and its underscores, for from_chars
  size_t i = 0;
  if (i < v.size() && (v[i] == '+' || v[i] == '-')) {
    if (v[i] == '-') plain += '-';
    ++i;
  }
  auto is_digit = [&](size_t k) { return k < v.size() && v[k] >= '0' && v[k] <= '9'; };
  // digitpart: digit (["_"] digit)*. Returns how many digits it took.
  auto digits = [&]() {
    size_t taken = 0;
    while (is_digit(i)) {
      plain += v[i++];
      ++taken;
      if (i + 1 < v.size() && v[i] == '_' && is_digit(i + 1)) ++i;
    }
    return taken;
  };
  size_t mantissa = digits();
  if (i < v.size() && v[i] == '.') {
    plain += v[i++];
    mantissa += digits();
  }
  if (mantissa == 0) return false;
  if (i < v.size() && (v[i] == 'e' || v[i] == 'E')) {
    plain += v[i++];
    if (i < v.size() && (v[i] == '+' || v[i] == '-')) plain += v[i++];
    if (digits() == 0) return false;
  }
  if (i != v.size()) return false;
  const auto [ptr, ec] = std::from_chars(plain.data(), plain.data() + plain.size(), *out);
  if (ptr != plain.data() + plain.size()) return false;
  if (ec == std::errc::result_out_of_range) {
    // Too small or too large for a double: float() gives 0.0 ("1e-400") or inf ("1e400"), with
    // the sign. Which, from the decimal exponent of the first non-zero digit (there is one: an
    // all-zero mantissa is 0 whatever its exponent).
    const bool negative = plain[0] == '-';
    const size_t e = plain.find_first_of("eE");
    const std::string_view mantissa = std::string_view(plain).substr(negative, e - negative);
    const size_t point = std::min(mantissa.find('.'), mantissa.size());
    const size_t first = mantissa.find_first_not_of("0.");
    long long magnitude = static_cast<long long>(point) - static_cast<long long>(first);
    if (first > point) ++magnitude;  // "0.001": the '.' is before the digit
    if (e != std::string::npos) {
      // Clamped: a long exponent only has to keep its side of zero. Its leading zeros do not
      // count ("e-0000001" is e-1).
      std::string_view exponent = std::string_view(plain).substr(e + 1);
      const bool down = exponent[0] == '-';  // digits() took at least one after 'e' and a sign
      if (exponent[0] == '-' || exponent[0] == '+') exponent.remove_prefix(1);
      while (exponent.size() > 1 && exponent[0] == '0') exponent.remove_prefix(1);
      const long long size = exponent.size() > 6 ? 1000000 : std::stoll(std::string(exponent));
      magnitude += down ? -size : size;
    }
    const double value = magnitude > 0 ? std::numeric_limits<double>::infinity() : 0.0;
    *out = negative ? -value : value;
    return true;
  }
  return ec == std::errc();
}
}  // namespace

absl::Status Args::GetSeconds(const std::string& name, double min, double max, double* out) const {
  if (!Has(name)) return absl::OkStatus();
  const std::string v = Get(name);
  double x = 0;
  if (!ParsePythonFloat(v, &x) || !(x >= min) || x > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " ", v, ": expected seconds from ", min, " to ", max));
  }
  *out = x;
  return absl::OkStatus();
}

absl::Status Args::GetInt(const std::string& name, long long min, long long max,
                          long long* out) const {
  if (!Has(name)) return absl::OkStatus();
  const std::string v = Get(name);
  long long x = 0;
  if (!ParsePythonInt(v, &x) || x < min || x > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " ", v, ": expected a whole number from ", min, " to ", max));
  }
  *out = x;
  return absl::OkStatus();
}

std::string Args::Help() const {
  std::string out;
  for (const Flag& f : flags_) {
    if (f.hidden) continue;
    std::string left = "  --" + f.name;
    if (f.kind == Kind::kValue) absl::StrAppend(&left, " ", f.value_name);
    if (f.kind == Kind::kMulti || f.kind == Kind::kList) {
      absl::StrAppend(&left, " ", f.value_name, "...");
    }
    std::string help = f.help;
    if (!f.default_text.empty()) absl::StrAppend(&help, " (default: ", f.default_text, ")");
    if (left.size() < 30) {
      absl::StrAppendFormat(&out, "%-30s%s\n", left, help);
    } else {
      absl::StrAppendFormat(&out, "%s\n%30s%s\n", left, "", help);
    }
  }
  return out;
}

}  // namespace pileprep::cli
