// Validation of a Megatron .bin/.idx pair against every invariant of docs/format.md, so broken
// datasets are found before a training job trips on them (readers check almost nothing: a truncated
// .bin or Megatron's 2023 EOD off-by-one is read silently).
//
//   ValidateOptions options;                       // vocabulary size, --expect-eod, threads
//   PILEPREP_ASSIGN_OR_RETURN(ValidationReport r,
//                             ValidateDataset("out/my-gpt3_00_text_document", options));
//   if (!r.ok()) for (const Violation& v : r.violations) ...   // first violation of each kind
//
// Checked, each with its Violation::kind:
//   idx_magic        bytes 0..8 are "MMIDIDX\0\0"
//   idx_version      u64 at byte 9 is 1
//   dtype            dtype code at byte 17 is 4 (int32) or 8 (uint16); 6/7 (floats) and others
//                    refused
//   idx_size         the .idx is exactly 34 + 12·S + 8·D1 bytes (shorter: truncated; longer:
//                    trailing bytes: junk readers ignore, or a header count too small (a sequence
//                    count too small shifts every array readers read); the counts the size fits
//                    are named)
//   document_count   D1 ≥ 1 (document_indices holds at least the leading 0)
//   zero_length      no sequence has length 0 (Megatron never writes one)
//   negative_length  no sequence has a negative length
//   pointer          pointers[0] = 0, pointers[i+1] = pointers[i] + itemsize·lengths[i] in 64 bits
//   length           lengths[k] disagrees with pointers[k+1] − pointers[k], a whole number of
//                    tokens, while the next sequence agrees with the pointer after it (or the
//                    .bin's end), and the stored pointers end where the .bin does but the lengths'
//                    sum does not: the length is damaged, not every pointer after it; the pointer
//                    check then follows the stored pointers
//   doc_index_start  document_indices[0] = 0
//   doc_index_order  document_indices is non-decreasing
//   doc_index_end    document_indices[D1-1] = S
//   bin_size         the .bin is exactly itemsize·Σ lengths bytes, or where the pointers end after
//                    a `length` (catches truncated copies and Megatron's 2023-06..08 EOD
//                    off-by-one, which no reader notices: named when the surplus is one token per
//                    sequence or document and the first 64 of them are one token, EOD)
//   empty_dataset    at least one token (no reader can mmap an empty .bin)
//   token_range      every token < vocab_size (and ≥ 0 for int32)
//   eod              with expect_eod: every document's last sequence ends with eod_id (where
//                    document_indices are sound; else every sequence)
//   zero_fill        with check_zero_fill: no aligned block of 4096 tokens is all zeros (token 0
//                    over and over, which GPT-2 never writes within a sequence: what a hole becomes
//                    in a dense copy, or a preallocated file that a copy or download cut short left
//                    zero-filled; a run of 8191 zero tokens or more always holds such a block),
//                    unless, the pointers sound, its 4096 tokens are 4096 sequences (documents of
//                    "!" without --append-eod: one token 0 each)
//   hole             (ValidateDataset, check_holes) neither file has a region never written: a
//                    hole reads as zeros, taken for tokens 0 (a copy or download cut short into a
//                    preallocated or extended file; found with lseek SEEK_HOLE, no page read;
//                    the token checks are then skipped, and a holed .idx's array checks: the
//                    verdict is known)
// For each kind the report keeps the first occurrence (file offset, sequence or document index and
// a message naming the file, the byte offset, the cause and what to do) and counts all of them.
// When the .idx header or size is unusable the array checks are skipped (they would only repeat the
// same fault); token checks need a dtype of 4 or 8.
//
// Speed: both files are memory-mapped; the index checks are one sequential pass, the .bin token
// checks run in parallel (oneTBB) over large blocks, so a 20 GB .bin is checked at disk speed.
// check_tokens = false skips reading the .bin (its size is still checked): a cheap structural
// check. Memory: ValidateDataset releases the mapped pages behind its scans (the EOD check runs
// in the token scan's tasks), so its RSS does not grow with the .bin; of the .idx, about 20 bytes
// per document may stay resident. ValidateBuffers reads the caller's memory and releases nothing.
//
// Thread model: ValidateDataset is reentrant; it blocks and uses up to `options.threads` threads
// (raising oneTBB's process-wide thread limit while it runs, as RunPipeline does; pipeline.h).
// Errors (absl::Status) are only for files that cannot be opened or mapped (a missing .bin or .idx:
// NotFound, naming the path); problems with their contents are Violations in the report.
#ifndef PILEPREP_VALIDATE_H_
#define PILEPREP_VALIDATE_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "pileprep/indexed_dataset.h"

namespace pileprep {

struct ValidateOptions {
  uint64_t vocab_size = 50257;  // every token must be < vocab_size (GPT-2)
  bool expect_eod = false;      // each document must end with eod_id (--append-eod datasets)
  uint32_t eod_id = 50256;
  bool check_tokens = true;     // false: index-only checks (fast; skips reading the .bin)
  // ValidateDataset: a hole in either file (a region never written, reading as zeros) is the
  // violation "hole" (one for both files: its file_offset in the file its message names first,
  // the .idx when both have holes; count: both files' holes). false accepts them: a copy made
  // sparse (cp --sparse=always, rsync -S, ZFS with compression) turns runs of zero bytes into
  // holes, and a vocabulary whose id 0 can repeat thousands of times in a row could have such runs
  // (GPT-2's BPE never writes id 0 twice in a row within a sequence).
  bool check_holes = true;
  // A block of 4096 tokens (at a multiple of 4096) that are all 0 is the violation "zero_fill":
  // a hole copied dense (cp --sparse=never, scp, rsync without -S) or a preallocated file that a
  // copy or download cut short filled with zeros, which the hole check cannot see. false accepts
  // them, for a vocabulary whose id 0 can repeat that often (validate --allow-holes sets both).
  bool check_zero_fill = true;
  int threads = 0;              // 0: all cores
  // When it becomes true the token checks stop (within a task of 1M tokens) and ValidateDataset
  // returns Cancelled (ValidateBuffers' report is then incomplete). The shard job passes its
  // SIGINT/SIGTERM flag: a signal need not wait for a many-GB .bin to be read. Null: never.
  const std::atomic<bool>* cancel = nullptr;
};

struct Violation {
  std::string kind;      // stable identifier, e.g. "bin_size", "pointer", "token_range"
  std::string message;   // what is wrong, where (byte offset, sequence index) and what it means
  int64_t file_offset = -1;  // byte offset in the file the kind is about, when meaningful
  int64_t index = -1;        // sequence or document index, when meaningful
  uint64_t count = 0;        // how many times this kind occurred (the message is the first)
};

struct ValidationReport {
  std::string prefix;
  TokenDType dtype = TokenDType::kUint16;  // meaningful when the dtype code is 4 or 8
  uint8_t dtype_code = 0;                  // as stored at byte 17
  uint64_t sequences = 0;
  uint64_t documents = 0;   // document_indices entries - 1
  uint64_t tokens = 0;      // Σ positive lengths
  uint64_t bin_bytes = 0;
  uint64_t idx_bytes = 0;
  bool tokens_checked = false;  // the .bin token checks ran (check_tokens and a usable index)
  std::vector<Violation> violations;  // empty when sound
  bool ok() const { return violations.empty(); }
  // The violation of `kind`, or nullptr.
  const Violation* Find(std::string_view kind) const;
};

// Validates `{prefix}.idx` and `{prefix}.bin`.
absl::StatusOr<ValidationReport> ValidateDataset(const std::string& prefix,
                                                 const ValidateOptions& options = {});

// The same checks on bytes already in memory (any bytes at all: never reads out of bounds). `prefix`
// only names the files in messages. For tests and the fuzzer.
ValidationReport ValidateBuffers(std::string_view idx, std::string_view bin,
                                 const std::string& prefix, const ValidateOptions& options = {});

// Human-readable report: one line per violation, or a one-line summary when sound.
std::string FormatValidationReport(const ValidationReport& report);
// The report as one JSON object (prefix, ok, counts, violations[{kind, message, file_offset, index,
// count}]).
std::string ValidationReportToJson(const ValidationReport& report);

}  // namespace pileprep

#endif  // PILEPREP_VALIDATE_H_
