// The shard job: `pileprep --url SRC --files 0-29 --output-dir DIR`.
#include "common.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "oneapi/tbb/info.h"
#include "pileprep/gpt2_tokenizer.h"
#include "pileprep/pipeline.h"
#include "pileprep/shard_plan.h"

namespace pileprep::cli {
namespace {
constexpr char kDefaultUrl[] =
    "https://huggingface.co/datasets/monology/pile-uncopyrighted/resolve/main/train/";
}  // namespace

int RunShardJob(int argc, char** argv, int first) {
  Args args;
  args.Add("url", Args::Kind::kValue, "SRC",
           "where shards NN.jsonl.zst are: a local directory or file:// URL (http(s) arrives with "
           "the download stage)",
           kDefaultUrl);
  args.Add("files", Args::Kind::kValue, "LIST", "shard numbers, e.g. 0-29 or 0,3,5-7", "0-29");
  args.Add("output-dir", Args::Kind::kValue, "DIR", "where the .bin/.idx pairs go", ".");
  args.Add("output-prefix", Args::Kind::kValue, "NAME",
           "outputs are DIR/NAME_NN_text_document.{bin,idx} (the NeMo launcher's names)",
           "my-gpt3");
  args.Add("json-keys", Args::Kind::kMulti, "KEY", "JSON field(s) holding the text", "text");
  args.Add("threads", Args::Kind::kValue, "N", "worker threads", "all cores");
  AddCommonFlags(args);
  if (auto s = args.Parse(argc, argv, first); !s.ok()) {
    PrintError(std::string(s.message()));
    return kExitUsage;
  }
  if (args.Has("help")) {
    std::string commands;
    for (const Command& cmd : Commands()) {
      absl::StrAppendFormat(&commands, "  pileprep %-11s %s\n", cmd.name, cmd.summary);
    }
    std::printf(
        "Usage: pileprep [--url SRC] [--files LIST] [--output-dir DIR] [flags]\n"
        "       pileprep COMMAND [flags]\n\n"
        "Prepares GPT pre-training data: each shard SRC/NN.jsonl.zst is decompressed (zstd), parsed\n"
        "(one JSON document per line), tokenized with GPT-2 BPE and written as a Megatron indexed\n"
        "dataset DIR/NAME_NN_text_document.{bin,idx}, byte-identical to Megatron's\n"
        "tools/preprocess_data.py --append-eod. Outputs appear only when complete.\n\n"
        "Other commands (pileprep help COMMAND for their flags):\n%s\n"
        "Flags:\n%s\n%s",
        commands.c_str(), args.Help().c_str(), ExitCodeHelp().c_str());
    return kExitOk;
  }
  if (!args.positional().empty()) {
    PrintError(absl::StrCat("unexpected argument \"", args.positional().front(),
                            "\" (see pileprep --help for the commands)"));
    return kExitUsage;
  }
  Common c;
  if (auto s = ReadCommon(args, &c); !s.ok()) {
    PrintError(std::string(s.message()));
    return kExitUsage;
  }
  long long threads = 0;
  if (auto s = args.GetInt("threads", 1, 4096, &threads); !s.ok()) {
    PrintError(std::string(s.message()));
    return kExitUsage;
  }
  c.pipeline.threads = static_cast<int>(threads);
  c.pipeline.append_eod = true;
  if (args.Has("json-keys")) c.pipeline.jsonl.json_keys = args.GetAll("json-keys");

  auto files = ParseFileNumbers(args.Get("files", "0-29"));
  auto source = ParseShardSource(args.Get("url", kDefaultUrl));
  if (!files.ok() || !source.ok()) {
    PrintError(std::string((!files.ok() ? files.status() : source.status()).message()));
    return kExitUsage;
  }
  if (source->kind == SourceKind::kHttp) {
    PrintError(absl::StrCat(
        "--url ", source->base,
        ": downloading over HTTP(S) is not in this build yet; download the shards and pass "
        "--url /path/to/shards"));
    return kExitUsage;
  }
  const std::string output_dir = args.Get("output-dir", ".");
  const std::string output_prefix = args.Get("output-prefix", "my-gpt3");
  if (output_prefix.empty() || output_prefix.find('/') != std::string::npos) {
    PrintError("--output-prefix must be a plain name without '/'; use --output-dir for the directory");
    return kExitUsage;
  }
  if (auto s = EnsureDirectory(output_dir); !s.ok()) {
    PrintError(std::string(s.message()));
    return kExitUsage;
  }
  auto tokenizer = LoadTokenizer(c);
  if (!tokenizer.ok()) {
    PrintError(std::string(tokenizer.status().message()));
    return kExitUsage;
  }
  const int used_threads =
      c.pipeline.threads > 0 ? c.pipeline.threads : tbb::info::default_concurrency();
  if (!c.console.quiet) {
    std::fprintf(stderr, "pileprep %s: %zu shard(s) from %s -> %s, %d threads\n", PILEPREP_VERSION,
                 files->size(), source->base.c_str(), output_dir.c_str(), used_threads);
  }

  std::vector<ShardOutcome> outcomes;
  int failed = 0;
  for (int n : *files) {
    std::vector<std::string> prefixes;
    for (const std::string& key : c.pipeline.jsonl.json_keys) {
      prefixes.push_back(ShardOutputPrefix(output_dir, output_prefix, n, key));
    }
    outcomes.push_back(RunOne(ShardFileName(n), ShardInput(*source, n), InputFormat::kZstd,
                              prefixes, **tokenizer, c));
    if (outcomes.back().status != "done") ++failed;
  }
  std::fprintf(stderr, "\n%s", SummaryTable(outcomes, used_threads).c_str());
  if (failed > 0) {
    std::fprintf(stderr, "pileprep: %d of %zu shard(s) FAILED (see the errors above); nothing was "
                         "published for them. Fix the cause and rerun.\n",
                 failed, outcomes.size());
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace pileprep::cli
