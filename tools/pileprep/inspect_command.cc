// `pileprep inspect PREFIX [--doc N [--decode]]`: what a .bin/.idx pair holds.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common.h"
#include "pileprep/gpt2_tokenizer.h"
#include "pileprep/indexed_reader.h"
#include "signals.h"

namespace pileprep::cli {
namespace {

void PrintSummary(const IndexedDatasetReader& r) {
  // Power-of-two buckets of sequence lengths: bucket b holds lengths in [2^b, 2^(b+1)).
  uint64_t buckets[33] = {};
  uint64_t tokens = 0, nonpositive = 0;
  int32_t min_len = 0, max_len = 0;
  for (uint64_t i = 0; i < r.num_sequences(); ++i) {
    const int32_t len = r.sequence_length(i);
    if (i == 0 || len < min_len) min_len = len;
    if (i == 0 || len > max_len) max_len = len;
    if (len <= 0) {
      ++nonpositive;
      continue;
    }
    tokens += static_cast<uint32_t>(len);
    ++buckets[std::bit_width(static_cast<uint32_t>(len)) - 1];
  }
  uint64_t empty_docs = 0;
  for (uint64_t d = 0; d + 1 < r.num_document_indices(); ++d) {
    if (r.document_index(d + 1) == r.document_index(d)) ++empty_docs;
  }
  std::printf("dataset:    %s.{bin,idx}\n", r.prefix().c_str());
  std::printf("dtype:      %s (code %d)\n", DTypeName(r.dtype()), static_cast<int>(r.dtype()));
  std::printf("sequences:  %llu\n", static_cast<unsigned long long>(r.num_sequences()));
  std::printf("documents:  %llu (%llu with no sequence: empty texts)\n",
              static_cast<unsigned long long>(r.num_documents()),
              static_cast<unsigned long long>(empty_docs));
  std::printf("tokens:     %llu (the .bin holds %llu)\n", static_cast<unsigned long long>(tokens),
              static_cast<unsigned long long>(r.bin_tokens()));
  std::printf("bytes:      .bin %zu, .idx %zu\n", r.bin_bytes().size(), r.idx_bytes().size());
  if (r.num_sequences() == 0) return;
  std::printf("length:     min %d, mean %.1f, max %d tokens\n", min_len,
              static_cast<double>(tokens) / static_cast<double>(r.num_sequences()), max_len);
  if (nonpositive > 0) {
    std::printf("            %llu sequence%s of length <= 0 (run `pileprep validate`)\n",
                static_cast<unsigned long long>(nonpositive), nonpositive == 1 ? "" : "s");
  }
  std::printf("length histogram (tokens per sequence):\n");
  uint64_t peak = *std::max_element(std::begin(buckets), std::end(buckets));
  for (int b = 0; b < 32; ++b) {
    if (buckets[b] == 0) continue;
    const uint64_t lo = uint64_t{1} << b, hi = (uint64_t{1} << (b + 1)) - 1;
    const int bar = static_cast<int>((buckets[b] * 40 + peak - 1) / peak);
    std::printf("  %17s  %10llu  %s\n",
                lo == hi ? absl::StrCat(lo).c_str() : absl::StrCat(lo, "-", hi).c_str(),
                static_cast<unsigned long long>(buckets[b]), std::string(bar, '#').c_str());
  }
}

int RunInspect(int argc, char** argv, int first) {
  Args args;
  args.Add("doc", Args::Kind::kValue, "N", "print document N's token ids (0-based)");
  args.Add("decode", Args::Kind::kSwitch, "", "with --doc: print the text instead (GPT-2)");
  args.Add("vocab-file", Args::Kind::kValue, "FILE", "GPT-2 encoder.json for --decode",
           "$PILEPREP_TOKENIZER_DIR/encoder.json when that is set, else the copy shipped in "
           "tokenizers/gpt2");
  args.Add("merge-file", Args::Kind::kValue, "FILE", "GPT-2 vocab.bpe for --decode",
           "$PILEPREP_TOKENIZER_DIR/vocab.bpe when that is set, else the copy shipped in "
           "tokenizers/gpt2");
  args.Add("help", Args::Kind::kSwitch, "", "show this help (-h)");
  const std::optional<int> done = ParseOrHelp(
      args, argc, argv, first,
      "Usage: pileprep inspect PREFIX [--doc N [--decode]]\n\n"
      "Prints a .bin/.idx pair's dtype, sequence, document and token counts and a histogram of\n"
      "sequence lengths; with --doc N, document N's token ids, or with --decode its text.\n\n",
      "Exit status:\n"
      "  0      printed\n"
      "  1      the dataset cannot be read (run `pileprep validate` on it), --doc N is past its\n"
      "         documents, --decode met an id the vocabulary does not have, or stdout failed\n"
      "  2      usage error\n"
      "  128+N  ended by signal N: 141 (SIGPIPE) when the reader of stdout went away (`| head`),\n"
      "         135 (SIGBUS) when the dataset shrank while it was read\n");
  if (done) return *done;
  SetBusErrorReadOnly();
  if (args.positional().size() != 1) {
    PrintError("inspect needs exactly one PREFIX (see --help)");
    return kExitUsage;
  }
  long long doc = -1;
  if (auto s = args.GetInt("doc", 0, INT64_MAX, &doc); !s.ok()) {
    PrintError(std::string(s.message()));
    return kExitUsage;
  }
  if (args.Has("decode") && doc < 0) {
    PrintError("--decode needs --doc N");
    return kExitUsage;
  }
  auto reader = IndexedDatasetReader::Open(StripPairSuffix(args.positional()[0]));
  if (!reader.ok()) {
    PrintError(std::string(reader.status().message()));
    return kExitFailed;
  }
  // What was printed reached stdout (a full disk): otherwise the exit status says so. A closed pipe
  // (`| head`) ends the process by SIGPIPE, as it does any Unix filter.
  auto flushed = [] {
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
      PrintError(absl::StrCat("stdout: ", std::strerror(errno)));
      return kExitFailed;
    }
    return kExitOk;
  };
  if (doc < 0) {
    PrintSummary(**reader);
    return flushed();
  }
  // The document is read and printed a chunk at a time: a corrupt index can make one document's
  // sequences cover the .bin many times over. Printing stops once stdout has failed.
  auto written = [] {
    return std::ferror(stdout) ? absl::DataLossError(absl::StrCat("stdout: ", std::strerror(errno)))
                               : absl::OkStatus();
  };
  constexpr size_t kChunkTokens = size_t{1} << 16;
  const uint64_t d = static_cast<uint64_t>(doc);
  // An id as the .bin holds it: an int32 dataset's are signed (a corrupt -1 is shown as -1, as
  // validate shows it, not as 4294967295).
  const bool signed_ids = (*reader)->dtype() == TokenDType::kInt32;
  auto shown = [signed_ids](uint32_t id) -> int64_t {
    return signed_ids ? int64_t{static_cast<int32_t>(id)} : int64_t{id};
  };
  if (!args.Has("decode")) {
    bool first_id = true;
    std::string line;
    absl::Status s =
        (*reader)->ReadDocumentInChunks(d, kChunkTokens, [&](const std::vector<uint32_t>& ids) {
          line.clear();
          for (uint32_t id : ids) {
            absl::StrAppend(&line, first_id ? "" : " ", shown(id));
            first_id = false;
          }
          std::fwrite(line.data(), 1, line.size(), stdout);
          return written();
        });
    // The ids' line (empty for an empty document); none for a document that is not there.
    if (s.ok() || !first_id) std::fputc('\n', stdout);
    if (!s.ok()) {
      std::fflush(stdout);  // what was printed goes before the error, where both go to one file
      PrintError(std::string(s.message()));
      return kExitFailed;
    }
    return flushed();
  }
  absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> tokenizer;
  if (args.Has("vocab-file") != args.Has("merge-file")) {
    PrintError("--vocab-file and --merge-file go together (see --help)");
    return kExitUsage;
  }
  if (args.Has("vocab-file")) {
    tokenizer = Gpt2Tokenizer::FromFiles(args.Get("vocab-file"), args.Get("merge-file"), {});
  } else {
    tokenizer = Gpt2Tokenizer::FromDefaultFiles({});
  }
  if (!tokenizer.ok()) {
    PrintError(std::string(tokenizer.status().message()));
    return kExitUsage;
  }
  // An id the vocabulary does not have has no text: rather than leave it out of what is printed
  // (the text would read as whole), the decoding stops there and says so.
  uint64_t position = 0;
  char last = '\0';  // the last byte printed: the text ends with a newline, one added if need be
  bool printed = false;
  absl::Status s =
      (*reader)->ReadDocumentInChunks(d, kChunkTokens, [&](const std::vector<uint32_t>& ids) {
        const auto unknown = std::find_if(ids.begin(), ids.end(),
                                          [&](uint32_t id) { return !(*tokenizer)->HasId(id); });
        const std::string text =
            unknown == ids.end()
                ? (*tokenizer)->Decode(ids)
                : (*tokenizer)->Decode(std::vector<uint32_t>(ids.begin(), unknown));
        std::fwrite(text.data(), 1, text.size(), stdout);
        if (!text.empty()) {
          last = text.back();
          printed = true;
        }
        if (unknown != ids.end()) {
          return absl::InvalidArgumentError(absl::StrCat(
              (*reader)->prefix(), ": document ", d, ": token ", position + (unknown - ids.begin()),
              " is id ", shown(*unknown), ", which the vocabulary does not have (",
              (*tokenizer)->vocab_size(),
              " ids): the text above stops before it. Not a dataset of this vocabulary, or "
              "corrupt: run `pileprep validate` on it"));
        }
        position += ids.size();
        return written();
      });
  // The text's line (empty for an empty document); none for a document that is not there.
  if ((s.ok() || printed) && last != '\n') std::fputc('\n', stdout);
  if (!s.ok()) {
    std::fflush(stdout);
    PrintError(std::string(s.message()));
    return kExitFailed;
  }
  return flushed();
}

const CommandRegistration kRegistration(
    "inspect", "show what a .bin/.idx pair holds; --doc N [--decode] prints one document",
    RunInspect);

}  // namespace
}  // namespace pileprep::cli
