#include "pileprep/shard_plan.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>

extern char** environ;

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fetch/url.h"
#include "jsonl/utf8.h"
#include "pileprep/fetch.h"
#include "pileprep/status_macros.h"

namespace pileprep {
namespace {

constexpr int kMaxFileNumber = 9999;

bool ParseNumber(std::string_view s, int* out) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  if (s.empty()) return false;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size() && *out >= 0 && *out <= kMaxFileNumber;
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseFileNumbers(std::string_view spec) {
  const std::string syntax =
      absl::StrCat("use numbers 0-", kMaxFileNumber, " and inclusive ranges, e.g. 0-29 or 0,3,5-7");
  std::vector<int> out;
  // Debian's Abseil has its own string_view type: split by hand to stay with std::string_view.
  std::vector<std::string_view> parts;
  for (size_t pos = 0;;) {
    const size_t comma = spec.find(',', pos);
    parts.push_back(spec.substr(pos, comma == std::string_view::npos ? comma : comma - pos));
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  for (std::string_view part : parts) {
    // An empty part ("0-29,", "1,,3") is skipped, as the launcher's convert_file_numbers skips
    // it: a file_numbers value copied from a launcher config was refused here.
    if (part.empty()) continue;
    const auto bad = [&] {
      return absl::InvalidArgumentError(absl::StrCat("--files: cannot read \"", std::string(part),
                                                     "\" in \"", std::string(spec), "\"; ",
                                                     syntax));
    };
    const size_t dash = part.find('-');
    int lo, hi;
    if (dash == std::string_view::npos) {
      if (!ParseNumber(part, &lo)) return bad();
      hi = lo;
    } else if (!ParseNumber(part.substr(0, dash), &lo) ||
               !ParseNumber(part.substr(dash + 1), &hi)) {
      return bad();
    } else if (hi < lo) {
      return absl::InvalidArgumentError(absl::StrCat("--files: the range \"", std::string(part),
                                                     "\" runs backwards; write ", hi, "-", lo));
    }
    for (int i = lo; i <= hi; ++i) out.push_back(i);
  }
  if (out.empty()) {  // the launcher would run nothing; a job that makes nothing is a mistake
    return absl::InvalidArgumentError(
        absl::StrCat("--files \"", std::string(spec), "\" names no file; ", syntax));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string ShardFileName(int number) { return absl::StrFormat("%02d.jsonl.zst", number); }

absl::StatusOr<ShardSource> ParseShardSource(std::string_view url) {
  if (url.empty()) return absl::InvalidArgumentError("--url is empty");
  std::string_view rest = url;
  // Schemes are case-insensitive (RFC 3986), as for http(s) below: FILE:///data is file:///data.
  // A file URL as RFC 8089 (and curl, and Python's url2pathname) reads it: file:///p, the host
  // localhost (file://localhost/p) and file:/p are the path /p, percent-escapes decoded
  // (pathlib's as_uri() writes "a b" as a%20b).
  if (absl::AsciiStrToLower(std::string(rest.substr(0, 5))) == "file:") {
    rest.remove_prefix(5);
    // A query or a fragment names no part of a directory (curl leaves them out too); a '?' or '#'
    // in a directory's name is written %3F or %23.
    rest = rest.substr(0, rest.find_first_of("?#"));
    if (rest.substr(0, 2) == "//") {
      rest.remove_prefix(2);
      const std::string_view host = rest.substr(0, rest.find('/'));
      if (!host.empty() && absl::AsciiStrToLower(std::string(host)) != "localhost" &&
          host.size() < rest.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--url ", std::string(url),
                         ": a file:// URL names a directory on this machine: its "
                         "host must be empty or localhost, not \"",
                         std::string(host), "\" (file:///data/pile)"));
      }
      rest.remove_prefix(host.size());
    }
    if (rest.empty() || rest.front() != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("--url ", std::string(url), ": a file:// URL needs an absolute path (file:///data/pile)"));
    }
    std::string path;
    for (size_t i = 0; i < rest.size(); ++i) {
      int hi, lo;
      if (rest[i] == '%' && i + 2 < rest.size() &&
          (hi = internal::kHexDigit.v[static_cast<unsigned char>(rest[i + 1])]) >= 0 &&
          (lo = internal::kHexDigit.v[static_cast<unsigned char>(rest[i + 2])]) >= 0) {
        path.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
      } else {
        path.push_back(rest[i]);  // a '%' not followed by two hex digits stays, as in unquote()
      }
    }
    if (path.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("--url ", std::string(url), ": %00 cannot be in a file name"));
    }
    return ShardSource{SourceKind::kLocalDirectory, path, ""};
  }
  const std::string lower = absl::AsciiStrToLower(std::string(url.substr(0, 8)));
  if (lower.rfind("http://", 0) == 0 || lower.rfind("https://", 0) == 0) {
    // The file names go into the path, before a query (a container's SAS token): appended to the
    // whole URL they became part of the query's last value.
    // The query starts after user:password@, whose password may hold '?' or '#' (split before
    // it, the password became the host and was printed in messages).
    const size_t after_userinfo = internal::UserinfoEnd(url, url.find("://") + 3);
    std::string base(url.substr(0, url.find('#', after_userinfo)));
    std::string query;
    if (const size_t q = base.find('?', after_userinfo); q != std::string::npos) {
      query = base.substr(q);
      base.resize(q);
    }
    if (base.back() != '/') base.push_back('/');
    return ShardSource{SourceKind::kHttp, base, query};
  }
  if (const size_t colon = url.find("://"); colon != std::string_view::npos) {
    // Redacted as a URL is in every message: user:password@ and the query left out.
    return absl::InvalidArgumentError(
        absl::StrCat("--url ", RedactUrl(std::string(url)), ": unsupported scheme \"",
                     std::string(url.substr(0, colon)),
                     "\"; use https://, http://, file:// or a local directory"));
  }
  return ShardSource{SourceKind::kLocalDirectory, std::string(url), ""};
}

std::string ShardInput(const ShardSource& source, int number) {
  std::string base = source.base;
  if (!base.empty() && base.back() != '/') base.push_back('/');
  return base + ShardFileName(number) + source.query;
}

std::string ShardOutputPrefix(std::string_view output_dir, std::string_view prefix, int number,
                              std::string_view json_key) {
  std::string dir(output_dir);
  if (!dir.empty() && dir.back() != '/') dir.push_back('/');
  return absl::StrFormat("%s%s_%02d_%s_document", dir, std::string(prefix), number,
                         std::string(json_key));
}

Environment CurrentEnvironment() {
  Environment env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view kv(*e);
    const size_t eq = kv.find('=');
    if (eq != std::string_view::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

namespace {

struct Family {
  const char* rank;
  const char* size;  // nullptr: a Slurm array task id
};
constexpr Family kFamilies[] = {
    {"NGC_ARRAY_INDEX", "NGC_ARRAY_SIZE"},
    {"RANK", "WORLD_SIZE"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    {"PMI_RANK", "PMI_SIZE"},  // MPICH and Intel MPI (Hydra's mpiexec)
    {"SLURM_ARRAY_TASK_ID", nullptr},
    // The step's size, not SLURM_NTASKS: Slurm sets SLURM_NTASKS (and SLURM_PROCID=0) for the whole
    // allocation in the batch script too, where pileprep run without srun is a single process;
    // split by them, it took its 1/N of the files, the other N-1 shares made by nobody, and exited
    // 0. Only an srun step's tasks get SLURM_STEP_NUM_TASKS (Slurm's env_array_for_step).
    {"SLURM_PROCID", "SLURM_STEP_NUM_TASKS"},
};

// torchrun's family (RANK / WORLD_SIZE).
constexpr const Family* kTorchrunFamily = &kFamilies[1];

const std::string* Lookup(const Environment& env, const char* name) {
  const auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return nullptr;
  return &it->second;
}

// MPICH's or Intel MPI's mpiexec (Hydra) started this process inside a Slurm allocation: PMI_SIZE
// counts more processes than Slurm's step has tasks (none, in a batch script; one per node, where
// Hydra launched its proxies with srun). Then PMI_* are the only variables that tell the processes
// apart: by Slurm's, every process of a node took the node's share (all but one found it locked:
// FAILED), or in a batch script every process took every file. srun's own pmi2 plugin sets them
// to what Slurm's say (0 of 1 in each array task).
absl::StatusOr<int> EnvInt(const Environment& env, const char* name);

bool HydraUnderSlurm(const Environment& env) {
  if (Lookup(env, "SLURM_JOB_ID") == nullptr || Lookup(env, "PMI_RANK") == nullptr ||
      Lookup(env, "PMI_SIZE") == nullptr) {
    return false;
  }
  const absl::StatusOr<int> size = EnvInt(env, "PMI_SIZE");
  if (!size.ok() || *size < 2) return false;
  const std::string* step = Lookup(env, "SLURM_STEP_NUM_TASKS");
  return step == nullptr || *step != std::to_string(*size);
}

// The families in the order they are looked at. A process torchrun started (its agent sets
// TORCHELASTIC_RUN_ID and LOCAL_WORLD_SIZE in every worker) takes RANK / WORLD_SIZE first: they
// count torchrun's processes, which is what runs; NGC_ARRAY_* beside them count the BCP replicas
// torchrun runs in, so by them every process of a replica took the replica's shares, all but one
// found them locked and failed, and torchrun then stopped the one doing the work.
std::vector<const Family*> FamiliesInOrder(const Environment& env) {
  std::vector<const Family*> order;
  const bool torchrun =
      Lookup(env, "TORCHELASTIC_RUN_ID") != nullptr || Lookup(env, "LOCAL_WORLD_SIZE") != nullptr;
  if (torchrun) order.push_back(kTorchrunFamily);
  // Under Slurm its own variables decide: srun's pmi2 plugin sets PMI_RANK / PMI_SIZE beside them
  // (0 of 1 in each array task, which would have taken every file in every task); unless mpiexec
  // started the processes (HydraUnderSlurm).
  const bool slurm_pmi = Lookup(env, "SLURM_JOB_ID") != nullptr && !HydraUnderSlurm(env);
  for (const Family& f : kFamilies) {
    if (torchrun && &f == kTorchrunFamily) continue;
    if (slurm_pmi && std::string_view(f.rank) == "PMI_RANK") continue;
    order.push_back(&f);
  }
  return order;
}

absl::StatusOr<int> EnvInt(const Environment& env, const char* name) {
  const std::string& v = *Lookup(env, name);
  int out = -1;
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || ptr != v.data() + v.size() || out < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, "=\"", v, "\" is not a whole number"));
  }
  return out;
}

bool SlurmArrayApplies(const Environment& env) {
  if (Lookup(env, "SLURM_ARRAY_TASK_ID") == nullptr) return false;
  const std::string* ntasks = Lookup(env, "SLURM_STEP_NUM_TASKS");
  return ntasks == nullptr || *ntasks == "1";
}

// An array task running an srun step of several tasks: split by SLURM_PROCID, each array task
// made the same shares of --files (every file made, or fought over, by every array task); made by
// the array task's number, the step's tasks would all make one file.
absl::Status ArrayOfSteps(const Environment& env) {
  return absl::InvalidArgumentError(absl::StrCat(
      "a Slurm array task (SLURM_ARRAY_TASK_ID=", *Lookup(env, "SLURM_ARRAY_TASK_ID"),
      ") running an srun step of ", *Lookup(env, "SLURM_STEP_NUM_TASKS"),
      " tasks: run one task per array task (each makes the file of its number), or one step "
      "without --array (its tasks split --files), or give both --nodes and --rank"));
}

// A launcher's processes (torchrun's, Open MPI's mpirun's, mpiexec's) in an array task, as an
// array of srun steps (ArrayOfSteps): split by the launcher, every array task made the same shares
// of --files (and their summaries, all of rank r, overwrote each other); by the array task's
// number, the launcher's processes all made one file. Which split is meant cannot be told. (A
// launcher of one process splits nothing: the array task's number decides, see ResolveRank.)
absl::Status LauncherInArrayTask(const Environment& env, const Family& f) {
  return absl::InvalidArgumentError(absl::StrCat(
      "a Slurm array task (SLURM_ARRAY_TASK_ID=", *Lookup(env, "SLURM_ARRAY_TASK_ID"), ") running ",
      *Lookup(env, f.size), " processes of a launcher (", f.rank, "=", *Lookup(env, f.rank), " ",
      f.size, "=", *Lookup(env, f.size),
      "): run one process per array task (each makes the file of its number), or the launcher "
      "without --array (its processes split --files), or give both --nodes and --rank"));
}

// A launcher's family (not Slurm's own, not BCP's replicas) set in a Slurm array task.
bool LauncherFamilyInArrayTask(const Environment& env, const Family& f) {
  const std::string_view rank(f.rank);
  return f.size != nullptr && rank != "SLURM_PROCID" && rank != "NGC_ARRAY_INDEX" &&
         Lookup(env, "SLURM_ARRAY_TASK_ID") != nullptr;
}

}  // namespace

absl::StatusOr<RankAssignment> ResolveRank(const RankFlags& flags, const Environment& env) {
  RankAssignment a;
  auto check = [&](RankAssignment r) -> absl::StatusOr<RankAssignment> {
    if (r.size < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("the number of nodes must be at least 1 (", r.decided_by, ")"));
    }
    if (r.rank < 0 || r.rank >= r.size) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", r.rank, " is outside 0..", r.size - 1,
                                                     " (", r.decided_by, ")"));
    }
    return r;
  };
  if (flags.nodes >= 0 && flags.rank >= 0) {
    a.size = flags.nodes;
    a.rank = flags.rank;
    a.decided_by = absl::StrCat("--nodes ", flags.nodes, " --rank ", flags.rank);
    return check(a);
  }
  if (flags.nodes >= 0 || flags.rank >= 0) {
    // One flag given: the other half comes from the first family that has it.
    const bool nodes = flags.nodes >= 0;
    const int given = nodes ? flags.nodes : flags.rank;
    const std::string flag = absl::StrCat(nodes ? "--nodes " : "--rank ", given);
    for (const Family* family : FamiliesInOrder(env)) {
      const Family& f = *family;
      if (f.size == nullptr) continue;
      // SLURM_PROCID is a rank only in an srun step: a batch script's process, and every task of
      // an array, has SLURM_PROCID=0, so `--nodes 30` there made one share 30 times over and the
      // others never (exit 0).
      if (std::string_view(f.rank) == "SLURM_PROCID" &&
          Lookup(env, "SLURM_STEP_NUM_TASKS") == nullptr) {
        continue;
      }
      const char* var = nodes ? f.rank : f.size;
      if (Lookup(env, var) == nullptr) continue;
      if (std::string_view(f.rank) == "SLURM_PROCID" &&
          Lookup(env, "SLURM_ARRAY_TASK_ID") != nullptr) {
        // An array task's one-task step is the usual case: a flag in it is refused below as one
        // flag in an array task, not as an array of multi-task steps ("an srun step of 1 tasks").
        if (SlurmArrayApplies(env)) continue;
        return ArrayOfSteps(env);
      }
      if (LauncherFamilyInArrayTask(env, f)) {
        // Several processes: refused as without the flag. One: the array's rule for a flag
        // (below), as if the launcher were not there.
        if (Lookup(env, f.size) != nullptr && *Lookup(env, f.size) != "1") {
          return LauncherInArrayTask(env, f);
        }
        break;
      }
      PILEPREP_ASSIGN_OR_RETURN(const int v, EnvInt(env, var));
      // The family's other half, when set, must be the flag's value: `--nodes 4` on two BCP
      // replicas made the shares of ranks 0 and 1 and nobody the other half (exit 0).
      const char* other = nodes ? f.size : f.rank;
      if (Lookup(env, other) != nullptr) {
        PILEPREP_ASSIGN_OR_RETURN(const int o, EnvInt(env, other));
        if (o != given) {
          return absl::InvalidArgumentError(
              absl::StrCat(flag, " but ", other, "=", o, " (with ", var, "=", v, "): ",
                           nodes ? "the files of the ranks that never run would be made by no one"
                                 : "two processes could take the same rank",
                           "; drop the flag, or give both --nodes and --rank to decide alone"));
        }
      }
      if (nodes) {
        a.size = flags.nodes;
        a.rank = v;
      } else {
        a.size = v;
        a.rank = flags.rank;
      }
      a.decided_by = absl::StrCat(flag, ", ", var, "=", v);
      return check(a);
    }
    if (const std::string* task = Lookup(env, "SLURM_ARRAY_TASK_ID"); task != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, " in a Slurm array task (SLURM_ARRAY_TASK_ID=", *task,
          "): without --nodes and --rank each array task makes the file of its number; to split "
          "--files over ranks instead, give both --nodes and --rank"));
    }
    if (nodes) {
      if (flags.nodes == 1) {
        a.decided_by = "--nodes 1";
        return a;
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "--nodes ", flags.nodes,
          " needs --rank R, or one of NGC_ARRAY_INDEX, RANK, OMPI_COMM_WORLD_RANK, PMI_RANK "
          "(under Slurm only for mpiexec's processes), or SLURM_PROCID in an srun step, in the "
          "environment"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("--rank ", flags.rank,
                     " needs --nodes N, or one of NGC_ARRAY_SIZE, WORLD_SIZE, "
                     "OMPI_COMM_WORLD_SIZE, PMI_SIZE (under Slurm only for mpiexec's processes), "
                     "SLURM_STEP_NUM_TASKS in the "
                     "environment"));
  }
  const std::vector<const Family*> families = FamiliesInOrder(env);
  for (auto it = families.begin(); it != families.end(); ++it) {
    const Family& f = **it;
    if (f.size == nullptr) {
      if (Lookup(env, f.rank) != nullptr && !SlurmArrayApplies(env)) return ArrayOfSteps(env);
      if (!SlurmArrayApplies(env)) continue;
      PILEPREP_ASSIGN_OR_RETURN(a.array_task, EnvInt(env, f.rank));
      a.decided_by = absl::StrCat(f.rank, "=", a.array_task);
      if (Lookup(env, "SLURM_ARRAY_TASK_MIN") != nullptr &&
          Lookup(env, "SLURM_ARRAY_TASK_MAX") != nullptr) {
        PILEPREP_ASSIGN_OR_RETURN(a.array_min, EnvInt(env, "SLURM_ARRAY_TASK_MIN"));
        PILEPREP_ASSIGN_OR_RETURN(a.array_max, EnvInt(env, "SLURM_ARRAY_TASK_MAX"));
      }
      if (Lookup(env, "SLURM_ARRAY_TASK_COUNT") != nullptr) {
        PILEPREP_ASSIGN_OR_RETURN(a.array_count, EnvInt(env, "SLURM_ARRAY_TASK_COUNT"));
      }
      if (Lookup(env, "SLURM_ARRAY_TASK_STEP") != nullptr) {
        PILEPREP_ASSIGN_OR_RETURN(a.array_step, EnvInt(env, "SLURM_ARRAY_TASK_STEP"));
        a.array_step = std::max(a.array_step, 1);
        // A step is trusted only where the count agrees with it (`--array 0-29:2`): of an
        // irregular list (`--array 0,2,3`) what Slurm gives as the step is not every gap.
        if (a.array_min >= 0 && a.array_max >= a.array_min && a.array_count >= 0 &&
            a.array_count != (a.array_max - a.array_min) / a.array_step + 1) {
          a.array_step = 1;
        }
      }
      return a;
    }
    if (Lookup(env, f.rank) == nullptr || Lookup(env, f.size) == nullptr) continue;
    PILEPREP_ASSIGN_OR_RETURN(a.rank, EnvInt(env, f.rank));
    PILEPREP_ASSIGN_OR_RETURN(a.size, EnvInt(env, f.size));
    if (LauncherFamilyInArrayTask(env, f)) {
      // One process (mpirun -np 1, torchrun --nproc-per-node 1) splits nothing: the array task
      // makes the file of its number, as without the launcher. It took every file in every task.
      // (In an array task's srun step of several tasks, the array's family refuses it below.)
      if (a.size == 1) {
        a.rank = 0;
        continue;
      }
      return LauncherInArrayTask(env, f);
    }
    a.decided_by = absl::StrCat(f.rank, "=", a.rank, " ", f.size, "=", a.size);
    if (&f == kTorchrunFamily && families.front() == kTorchrunFamily &&
        Lookup(env, "NGC_ARRAY_INDEX") != nullptr) {
      absl::StrAppend(&a.decided_by, " (torchrun's processes)");
    }
    // A later family that says otherwise is named, not used: BCP sets RANK/WORLD_SIZE beside
    // NGC_ARRAY_*, and under torchrun in each replica they count processes, not replicas. Which
    // one launched pileprep only the user knows; the log shows what was left (a process per GPU
    // then finds its replica's shards locked by the others: FAILED, never silently unmade).
    for (auto later = it + 1; later != families.end(); ++later) {
      const Family* g = *later;
      // (SLURM_PROCID's size is SLURM_STEP_NUM_TASKS: counted only in an srun step, as above.)
      if (g->size == nullptr || Lookup(env, g->rank) == nullptr ||
          Lookup(env, g->size) == nullptr) {
        continue;
      }
      const absl::StatusOr<int> r = EnvInt(env, g->rank), n = EnvInt(env, g->size);
      if (r.ok() && n.ok() && *r == a.rank && *n == a.size) continue;
      absl::StrAppend(&a.decided_by, " (", g->rank, "=", *Lookup(env, g->rank), " ", g->size, "=",
                      *Lookup(env, g->size),
                      " also set, not used; give --nodes and --rank to decide otherwise)");
    }
    return check(a);
  }
  if (const std::string* ntasks = Lookup(env, "SLURM_NTASKS");
      ntasks != nullptr && *ntasks != "1") {
    a.decided_by = absl::StrCat("SLURM_NTASKS=", *ntasks,
                                " but no SLURM_STEP_NUM_TASKS: a Slurm batch script, not an srun "
                                "step, so one process: every file here (launch it with srun to "
                                "split the files over the tasks)");
    return a;
  }
  a.decided_by = "no rank flags or variables: one node";
  // Half a family (a rank without its size, or the reverse) does not split; the log says which
  // variable was seen, rather than that none was.
  for (const Family* family : families) {
    const Family& f = *family;
    // (SLURM_PROCID without SLURM_STEP_NUM_TASKS is every batch script's: the plain case.)
    if (f.size == nullptr || std::string_view(f.rank) == "SLURM_PROCID") continue;
    const bool rank = Lookup(env, f.rank) != nullptr, size = Lookup(env, f.size) != nullptr;
    if (rank == size) continue;
    const char* set = rank ? f.rank : f.size;
    a.decided_by =
        absl::StrCat(set, "=", *Lookup(env, set), " without ", rank ? f.size : f.rank,
                     ": no rank family complete, so one node (give --nodes and --rank to "
                     "split)");
    break;
  }
  return a;
}

std::vector<int> FilesNoArrayTaskMakes(const std::vector<int>& files, const RankAssignment& a) {
  std::vector<int> outside;
  if (a.array_task < 0 || a.array_min < 0 || a.array_max < a.array_min) return outside;
  const int step = std::max(a.array_step, 1);
  for (int n : files) {
    if (n < a.array_min || n > a.array_max || (n - a.array_min) % step != 0) outside.push_back(n);
  }
  return outside;
}

int ArrayTasksMissingInRange(const RankAssignment& a) {
  if (a.array_task < 0 || a.array_min < 0 || a.array_max < a.array_min || a.array_count < 0) {
    return 0;
  }
  const int ids = (a.array_max - a.array_min) / std::max(a.array_step, 1) + 1;
  return a.array_count < ids ? ids - a.array_count : 0;
}

std::vector<int> FilesForRank(const std::vector<int>& files, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size) return {};
  const uint64_t n = files.size();
  const size_t begin = static_cast<size_t>(n * static_cast<uint64_t>(rank) / size);
  const size_t end = static_cast<size_t>(n * static_cast<uint64_t>(rank + 1) / size);
  return std::vector<int>(files.begin() + begin, files.begin() + end);
}

absl::StatusOr<std::vector<int>> FilesForAssignment(const std::vector<int>& files,
                                                    const RankAssignment& a) {
  if (a.array_task >= 0) {
    if (std::find(files.begin(), files.end(), a.array_task) == files.end()) {
      return absl::NotFoundError(absl::StrCat(
          "Slurm array task ", a.array_task, " is not among the --files numbers; use --array with "
          "the same numbers as --files"));
    }
    return std::vector<int>{a.array_task};
  }
  return FilesForRank(files, a.rank, a.size);
}

}  // namespace pileprep
