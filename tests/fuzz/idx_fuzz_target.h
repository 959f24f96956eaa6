// The .idx reader/validator fuzz target, shared by the libFuzzer binary (tests/fuzz/idx_fuzzer.cc)
// and the corpus replay gtest (tests/unit/fuzz_corpus_replay_test.cc), so the seed corpus runs
// in CI without clang.
//
// Input layout: u32 little-endian n, then (n & 0x7FFFFFFF) bytes of .idx (clamped to what is left),
// then the .bin; n's top bit turns on the EOD check. Oracles beyond "no crash, no out-of-bounds
// read" (ASan): a pair the validator calls sound must open with IndexedDatasetReader and every
// sequence and document must read back; and with the loader's IndexedDatasetView (which maps files:
// the pair is written to a temporary directory first), and any pair the view opens has every
// sequence inside its .bin, as its Open promises, holding the tokens the reader reads.
#ifndef PILEPREP_TESTS_FUZZ_IDX_FUZZ_TARGET_H_
#define PILEPREP_TESTS_FUZZ_IDX_FUZZ_TARGET_H_

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "pileprep/indexed_dataset_view.h"
#include "pileprep/indexed_reader.h"
#include "pileprep/validate.h"

namespace pileprep::fuzz {

// Writes `bytes` to `path` whole, or aborts (a fuzz run that cannot write its files finds nothing).
inline void WriteWholeFile(const std::string& path, std::string_view bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  if (std::fclose(f) != 0) std::abort();
}

// The view's oracle: `sound` (the validator's verdict) means it must open; opened, every sequence
// (the first 4096) lies inside the .bin, and where `reader` reads one too, the two agree.
inline void CheckIndexedDatasetView(std::string_view idx, std::string_view bin, bool sound,
                                    const IndexedDatasetReader* reader) {
  // One directory for the process's inputs, removed at exit.
  struct TempDir {
    std::string path;
    TempDir() {
      char tmpl[] = "/tmp/pileprep_idx_fuzz_XXXXXX";
      if (::mkdtemp(tmpl) == nullptr) std::abort();
      path = tmpl;
    }
    ~TempDir() {
      std::remove((path + "/p.idx").c_str());
      std::remove((path + "/p.bin").c_str());
      ::rmdir(path.c_str());
    }
  };
  static const TempDir dir;
  const std::string prefix = dir.path + "/p";
  WriteWholeFile(prefix + ".idx", idx);
  WriteWholeFile(prefix + ".bin", bin);
  const auto view = IndexedDatasetView::Open(prefix);
  if (sound && !view.ok()) std::abort();  // sound to the validator, refused by the loader
  if (!view.ok()) return;
  std::vector<uint32_t> ids;
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < (*view)->num_sequences() && i < 4096; ++i) {
    int64_t length = 0;
    if ((*view)->CheckedSequenceData(i, &length) == nullptr) std::abort();  // Open let it through
    if (reader == nullptr || !reader->ReadSequence(static_cast<uint64_t>(i), &ids).ok()) continue;
    tokens.resize(static_cast<size_t>(length));
    if (!(*view)->CopyTokens(i, 0, length, tokens.data())) std::abort();
    if (ids.size() != tokens.size()) std::abort();  // the two readers disagree on a length
    for (size_t k = 0; k < ids.size(); ++k) {
      // Compared in 32 bits: the reader gives an int32 dataset's -1 as 0xFFFFFFFF.
      if (ids[k] != static_cast<uint32_t>(tokens[k])) std::abort();
    }
  }
}

inline int RunIdxFuzzInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t n;
  std::memcpy(&n, data, 4);
  const char* bytes = reinterpret_cast<const char*>(data) + 4;
  const size_t rest = size - 4;
  // The top bit is the EOD flag, not part of the length (with it, the whole input was the .idx and
  // the .bin always empty, so the EOD check never met a token).
  const uint32_t idx_len = n & 0x7FFFFFFFu;
  const size_t idx_size = idx_len < rest ? idx_len : rest;
  const std::string_view idx(bytes, idx_size);
  const std::string_view bin(bytes + idx_size, rest - idx_size);

  ValidateOptions options;
  options.threads = 1;
  options.expect_eod = (n & 0x80000000u) != 0;
  options.vocab_size = 50257;
  const ValidationReport report = ValidateBuffers(idx, bin, "fuzz", options);
  (void)FormatValidationReport(report);
  (void)ValidationReportToJson(report);

  auto reader = IndexedDatasetReader::FromBuffers(idx, bin, "fuzz");
  if (report.ok() && !reader.ok()) std::abort();  // sound but unreadable
  CheckIndexedDatasetView(idx, bin, report.ok(), reader.ok() ? reader->get() : nullptr);
  if (!reader.ok()) return 0;
  std::vector<uint32_t> ids;
  const uint64_t sequences = (*reader)->num_sequences();
  const uint64_t documents = (*reader)->num_documents();
  for (uint64_t i = 0; i < sequences && i < 4096; ++i) {
    const bool ok = (*reader)->ReadSequence(i, &ids).ok();
    if (report.ok() && !ok) std::abort();
  }
  for (uint64_t d = 0; d < documents && d < 4096; ++d) {
    const bool ok = (*reader)->ReadDocument(d, &ids).ok();
    if (report.ok() && !ok) std::abort();
  }
  // Out-of-range requests are refused, never read.
  if ((*reader)->ReadSequence(sequences, &ids).ok()) std::abort();
  if ((*reader)->ReadDocument(documents, &ids).ok()) std::abort();
  return 0;
}

}  // namespace pileprep::fuzz

#endif  // PILEPREP_TESTS_FUZZ_IDX_FUZZ_TARGET_H_
