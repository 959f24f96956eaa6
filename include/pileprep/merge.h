// Merging Megatron .bin/.idx datasets into one, as Megatron's tools/merge_datasets.py does, but
// streaming: memory does not grow with the number of documents or inputs (upstream holds every
// array in Python lists: hundreds of GB for thousands of shards).
//
//   PILEPREP_ASSIGN_OR_RETURN(std::vector<std::string> inputs, FindDatasetPrefixes("shards"));
//   PILEPREP_ASSIGN_OR_RETURN(MergeResult r, MergeDatasets(inputs, "out/merged_text_document"));
//
// The output is byte-identical to preprocessing the inputs' source texts concatenated in the given
// order: the .bin files concatenated, the lengths concatenated, the pointers recomputed in 64 bits,
// and document_indices = [0] ++ (doc_idx_k[1:] + sequences before input k) for each input k.
// Inputs are merged in the order given; FindDatasetPrefixes (indexed_reader.h) gives Megatron's
// --input order (prefixes sorted lexicographically).
//
// How: the inputs' .idx files are memory-mapped one at a time, in one pass to check and count them
// and one pass per output array; each .bin is read in large blocks with read(2) and its size
// checked against the first pass's; every pass checks that each input is still the file the
// first one counted (device, inode, size, modification time; an input that changed is named).
// Each input's lengths must cover its .bin exactly, checked even without validate_inputs.
// Output goes to
// `{output}.bin.pileprep-tmp` and `{output}.idx.pileprep-tmp` beside the final names, is fsynced,
// and published like IndexedDatasetWriter does (remove an old .idx, rename the .bin, fsync the
// directory, rename the .idx, fsync it again). On any error the temporaries are removed and
// nothing is published. Two merges into one output at once would share the temporaries: callers
// keep them apart (the CLI locks `{output}.pileprep-lock`).
//
// Thread model: blocks the calling thread; no shared state. Inputs must not change during a merge.
// Errors: InvalidArgument for no inputs, an output prefix ending in '/', an output that is one of
// the inputs, or inputs of
// different dtypes ("b.idx: dtype int32 (code 4) but a.idx is uint16 (code 8): ...");
// InvalidArgument also for an input the reader cannot open (bad magic, version or dtype code, an
// .idx of the wrong size: IndexedDatasetReader::Open's message);
// FailedPrecondition for an input that fails validation (with validate_inputs: its first
// violation), whose lengths do not cover its .bin, or that changed during the merge; Cancelled
// (options.cancel); the error of before_publish; open, read, write, fsync and rename errors naming
// the path and strerror.
#ifndef PILEPREP_MERGE_H_
#define PILEPREP_MERGE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pileprep/indexed_dataset.h"

namespace pileprep {

struct MergeOptions {
  // Write buffer of the .idx, and the block size of .bin copies.
  size_t buffer_bytes = size_t{4} << 20;
  // fsync the outputs before renaming them into place, and the directory after.
  bool sync = true;
  // Check each input's index and .bin size (ValidateDataset with check_tokens = false) before
  // merging, so that a broken input cannot produce a broken merge. Costs one pass over each .idx.
  bool validate_inputs = true;
  // With validate_inputs, accept inputs whose files have holes (ValidateOptions::check_holes =
  // false): a sparse copy of a file that holds runs of zero bytes. Else a hole refuses the merge.
  bool allow_holes = false;
  // Called once both outputs are complete under their temporary names, before the first rename;
  // an error publishes nothing and is returned (the CLI removes a shard job's record of the output
  // here, so that a merge refused earlier leaves it). Empty: none.
  std::function<absl::Status()> before_publish;
  // Cancellation (the CLI sets it on SIGINT/SIGTERM): when it becomes true the merge stops within
  // one input or one block of .bin copied, removes its temporaries, publishes nothing and returns
  // Cancelled ("P: cancelled"). Null: never cancelled.
  const std::atomic<bool>* cancel = nullptr;
};

struct MergeResult {
  bool published = false;  // false: the inputs hold no tokens and nothing was written
  TokenDType dtype = TokenDType::kUint16;
  uint64_t inputs = 0;
  uint64_t sequences = 0;
  uint64_t documents = 0;
  uint64_t tokens = 0;
  uint64_t bin_bytes = 0;
  uint64_t idx_bytes = 0;
};

absl::StatusOr<MergeResult> MergeDatasets(const std::vector<std::string>& input_prefixes,
                                          const std::string& output_prefix,
                                          const MergeOptions& options = {});

}  // namespace pileprep

#endif  // PILEPREP_MERGE_H_
