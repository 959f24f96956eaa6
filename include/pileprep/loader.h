// The companion loader: Megatron-core's GPTDataset and BlendedDataset, reproduced exactly
// (docs/loader.md), over memory-mapped pileprep/Megatron datasets. A training job that uses it gets
// the very samples Megatron would give for the same data path, split, sequence length, sample
// count and seed, without Megatron. CMake target `pileprep::loader` (Abseil only: no curl, zstd,
// simdjson, RE2 or TBB).
//
//   pileprep::GptDatasetOptions options;
//   options.sequence_length = 2048;
//   options.num_samples = 1000000;
//   options.split = "969,30,1";            // train split (split_index 0); "" = all sequences
//   options.cache_dir = "/scratch/idx";    // optional: indices cached as .npy files
//   PILEPREP_ASSIGN_OR_RETURN(auto ds, pileprep::GptDataset::Open("0.3 A 0.7 B", options));
//   std::vector<int64_t> text;
//   PILEPREP_RETURN_IF_ERROR(ds->GetSample(0, &text));   // sequence_length + 1 tokens
//
// Lifetime: a GptDataset holds its indices (IndexArray: in memory, or mapped from the cache) and
// shares its IndexedDatasetViews. Thread model: immutable after Open; GetSample may be called from
// any number of threads at once.
// Errors: InvalidArgument for bad options, split or blend strings (with the offending text),
// FailedPrecondition for an empty split, a dataset with too few tokens, or a kept partial last
// sample that Megatron refuses (BuildGptIndices), ResourceExhausted when the indices that
// num_samples and sequence_length ask for do not fit in memory (or a full disk under cache_dir),
// OutOfRange for a sample index out of range, and the view's open errors (file and cause). A failed
// system call (opening, mapping, writing the cache) has Abseil's code for its errno (ENOTDIR is
// FailedPrecondition, EFBIG OutOfRange, ...) and carries the errno: ErrnoOf tells it from the
// errors above. Open and BuildGptIndices throw nothing (std::bad_alloc becomes ResourceExhausted);
// GetSample grows the caller's vector, which may throw std::bad_alloc as std::vector does.
#ifndef PILEPREP_LOADER_H_
#define PILEPREP_LOADER_H_

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pileprep/indexed_dataset_view.h"

namespace pileprep {

// numpy's legacy `RandomState(seed)` for the two calls Megatron makes: an MT19937 seeded with
// init_genrand (identical to std::mt19937(seed)), and `shuffle` of a 1-D array using rejection
// sampling on masked draws (NEP 19 freezes this stream). Not thread-safe.
class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed) : gen_(seed) {}
  // numpy's random_interval: a uniform integer in [0, max].
  uint64_t RandomInterval(uint64_t max);
  // numpy's RandomState.shuffle on a contiguous 1-D array.
  template <typename T>
  void Shuffle(T* data, size_t n) {
    for (size_t i = n; i-- > 1;) {
      size_t j = static_cast<size_t>(RandomInterval(i));
      std::swap(data[i], data[j]);
    }
  }

 private:
  std::mt19937 gen_;
};

// ---- Split strings ---------------------------------------------------------------------------

enum class SplitRounding {
  kCurrent,  // Megatron-core: round(bookend · N) per boundary (Python round, half to even)
  kLegacy,   // Megatron/NeMo before core: accumulate round(piece · N), shift so the last is N
};

// [begin, end) of sequence indices.
struct SequenceRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// Megatron's train/valid/test split of `num_sequences` sequences from a split string such as
// "969,30,1", parsed as each Megatron parses it: kCurrent takes every `[.0-9]+` substring as a
// weight (at most three); kLegacy splits at ',' (else '/') and reads each piece as Python's
// float() does (whitespace, a sign, an exponent), keeping the first three. Padded to three with 0;
// normalized. A split of zero weight (kCurrent) or zero width (kLegacy) is not built: nullopt.
// Errors: InvalidArgument for no weights, more than three (kCurrent), a piece that is not a
// (finite) number, a sum that is not positive, or num_sequences outside 0 to 2^53 (the bookends
// are float64, as Megatron's).
absl::StatusOr<std::array<std::optional<SequenceRange>, 3>> ComputeSplit(
    std::string_view split, int64_t num_sequences,
    SplitRounding rounding = SplitRounding::kCurrent);

// ---- GPT indices -----------------------------------------------------------------------------

// The defaults GptIndexOptions and GptDatasetOptions share (Megatron's GPT-3 configs' sequence
// length and --seed's default; add_extra_token_to_sequence's).
inline constexpr int64_t kDefaultSequenceLength = 2048;
inline constexpr uint32_t kDefaultSeed = 1234;
inline constexpr bool kDefaultAddExtraToken = true;

struct GptIndexOptions {
  // Tokens per sample (Megatron's --seq-length). Must be >= 1.
  int64_t sequence_length = kDefaultSequenceLength;
  // Samples requested; nullopt: one epoch (Megatron's num_samples = None).
  std::optional<int64_t> num_samples;
  // Seed of the numpy RandomState (Megatron's --seed).
  uint32_t seed = kDefaultSeed;
  // add_extra_token_to_sequence: samples of sequence_length + 1 tokens, overlapping by one.
  bool add_extra_token = kDefaultAddExtraToken;
  // false only for Megatron's validation split with drop_last_partial_validation_sequence = False:
  // the sample count is rounded up (the last sample is short).
  bool drop_last_partial_sequence = true;
};

// One of GPTDataset's or BlendedDataset's index arrays, in the dtype Megatron holds it in (int16,
// int32, uint32 or int64): in memory when built, or a read-only mapping of its cached .npy file
// (GptDatasetOptions::cache_dir), whose pages every process that opens the cache shares through
// the page cache, as Megatron's numpy.load(mmap_mode="r") does: at The Pile's scale (146 million
// samples of 2048 tokens) the three arrays of a dataset take gigabytes, which eight ranks of a node
// would otherwise each hold a copy of. Copies share the storage; immutable, so safe to read from
// any thread.
class IndexArray {
 public:
  enum class Type : uint8_t { kInt16, kInt32, kUint32, kInt64 };

  IndexArray() = default;
  IndexArray(const IndexArray&) = default;
  IndexArray& operator=(const IndexArray&) = default;
  // A moved-from array is empty (not a pointer without an owner).
  IndexArray(IndexArray&& o) noexcept { *this = std::move(o); }
  IndexArray& operator=(IndexArray&& o) noexcept {
    owner_ = std::move(o.owner_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    type_ = o.type_;
    return *this;
  }
  // `values` narrowed to `type`; each must fit (the builders choose the type so that they do).
  static IndexArray Narrowed(Type type, const std::vector<int64_t>& values);
  static IndexArray Owning(std::vector<int16_t> values);
  static IndexArray Owning(std::vector<int32_t> values);
  static IndexArray Owning(std::vector<uint32_t> values);
  static IndexArray Owning(std::vector<int64_t> values);
  // `size` items of `type` at `data`, aligned for it, kept alive by `owner` (a mapping).
  static IndexArray Borrowed(Type type, const void* data, size_t size,
                             std::shared_ptr<const void> owner);

  Type type() const { return type_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t itemsize() const { return type_ == Type::kInt64 ? 8 : type_ == Type::kInt16 ? 2 : 4; }
  const void* data() const { return data_; }
  int64_t operator[](size_t i) const {
    switch (type_) {
      case Type::kInt16:
        return static_cast<const int16_t*>(data_)[i];
      case Type::kInt32:
        return static_cast<const int32_t*>(data_)[i];
      case Type::kUint32:
        return static_cast<const uint32_t*>(data_)[i];
      case Type::kInt64:
        break;
    }
    return static_cast<const int64_t*>(data_)[i];
  }
  // The values widened, for tests and small arrays.
  std::vector<int64_t> ToVector() const;
  // f(const T* values) with T the storage type (int16_t, int32_t, uint32_t or int64_t): one typed
  // loop over a whole array instead of a switch per value.
  template <typename F>
  decltype(auto) Visit(F&& f) const {
    switch (type_) {
      case Type::kInt16:
        return f(static_cast<const int16_t*>(data_));
      case Type::kInt32:
        return f(static_cast<const int32_t*>(data_));
      case Type::kUint32:
        return f(static_cast<const uint32_t*>(data_));
      case Type::kInt64:
        break;
    }
    return f(static_cast<const int64_t*>(data_));
  }

 private:
  std::shared_ptr<const void> owner_;
  const void* data_ = nullptr;
  size_t size_ = 0;
  Type type_ = Type::kInt64;
};

// Megatron-core's three index arrays for one dataset split, in Megatron's dtypes (which the .npy
// cache and the Python module's numpy arrays have too).
struct GptIndices {
  int32_t num_epochs = 0;
  bool separate_final_epoch = false;
  int64_t tokens_per_epoch = 0;
  // document_index (int32): sequence ids in sample order, epochs concatenated.
  IndexArray document_index;
  // sample_index, flattened rows of (position in document_index, token offset); rows = size() + 1.
  // int32 when max(len(document_index), the largest sequence) fits, else int64.
  IndexArray sample_index;
  // shuffle_index: a permutation of sample rows; uint32 below 2^32 - 2 samples, else int64.
  IndexArray shuffle_index;
  int64_t size() const { return static_cast<int64_t>(shuffle_index.size()); }
};

// Builds the indices of Megatron-core's GPTDataset (`_build_document_sample_shuffle_indices`):
// `sizes` = all sequence lengths of the dataset, `sequence_ids` = the split's sequences
// (ascending). O(epochs · sequences + samples); each array is built in its final dtype, as
// Megatron's are (no wider copy). Errors: InvalidArgument (sequence_length < 1, num_samples < 0,
// an id out of range, a negative size, counts that overflow: more than 2^63 tokens or 2^31
// epochs), ResourceExhausted (the arrays do not fit in memory),
// FailedPrecondition (the split holds no tokens; or a kept partial last sample that ends on an
// empty sequence last in the document index, whose end offset would be -1: Megatron's helpers.py
// asserts sample_idx.min() >= 0 on its int32 sample index, and so this refuses it there; an int64
// sample index keeps the -1, as Megatron's does). A split of fewer tokens than one full sample
// gives, as in Megatron, no samples (an empty index, no error) when the last partial sample is
// dropped, one short sample when it is kept, unless num_samples asks for more (more epochs).
absl::StatusOr<GptIndices> BuildGptIndices(absl::Span<const int32_t> sizes,
                                           absl::Span<const int32_t> sequence_ids,
                                           const GptIndexOptions& options);

// ---- Blending --------------------------------------------------------------------------------

// The most datasets a blend may have: dataset_index is int16, and Megatron's BlendedDataset
// asserts fewer than 32767 (GptDataset::Open and the Python blending functions refuse more).
inline constexpr size_t kMaxBlendDatasets = 32766;
// What a blend weight must be: Megatron's BlendedDataset asserts every weight > 0, and NaN or inf
// would make every pick's error compare false. ParseBlend, GptDataset::Open and the Python
// blending functions refuse any other, each naming the weight where it came from.
inline bool IsBlendWeight(double w) { return w > 0 && std::isfinite(w); }

struct BlendingIndices {
  std::vector<int16_t> dataset_index;
  std::vector<int64_t> dataset_sample_index;
};

// helpers.cpp build_blending_indices: `size` picks, each from the dataset with the largest
// w·max(s,1) − count (first wins ties). `weights` as given (Megatron passes normalized weights).
// Precondition: at most kMaxBlendDatasets weights (dataset ids are int16; GptDataset::Open and
// the Python module check it), each finite and > 0.
BlendingIndices BuildBlendingIndices(absl::Span<const double> weights, int64_t size);
// helpers.cpp build_exhaustive_blending_indices: exactly sizes[d] picks from each dataset d, in the
// same greedy order with weights sizes[d] / Σ sizes. Datasets of size 0 are never picked.
BlendingIndices BuildExhaustiveBlendingIndices(absl::Span<const int64_t> sizes);

// A GptDataset's blend: BlendingIndices as IndexArrays (dataset_index int16, dataset_sample_index
// int64), in memory when built, mapped when loaded from the cache (GptDatasetOptions::cache_dir).
struct BlendingArrays {
  IndexArray dataset_index;
  IndexArray dataset_sample_index;
};

// A parsed --data-path list: weighted (even length, every even item a float as Python's float()
// reads it) or plain prefixes (weights empty). Weights as given, as in Megatron's blend tuple:
// GptDataset::Open normalizes them where Megatron does. Prefixes stripped of surrounding
// whitespace as Python's str.strip() strips it (Unicode whitespace included), as Megatron's
// get_blend_from_list does.
struct Blend {
  std::vector<std::string> prefixes;
  std::vector<double> weights;  // empty: unweighted
};
// Megatron's normalize(): w / numpy.sum(w) in float64 (numpy sums pairwise).
std::vector<double> NormalizeWeights(absl::Span<const double> weights);
// Parses Megatron's --data-path items ("0.3", "A", "0.7", "B" or "A", "B") as its
// get_blend_from_list does: an odd count is prefixes; an even count is (weight, prefix) pairs
// when every even item is a number, else all prefixes; every prefix str.strip()ped ("/x/cb\n" is
// "/x/cb"). Errors: InvalidArgument for no items; a weight that is not a finite number > 0
// (Megatron's BlendedDataset asserts every weight > 0; a weight of 0 would still build and pick
// its dataset); and an even item that is a number after one that is not ("A B 1 C", where
// "1 A B C" is four prefixes): get_blend_from_list's `assert all(is_none)` runs on the iterator
// that `any(is_none)` has consumed up to the first item that is not a number, so it refuses a
// number after it and nothing before it.
absl::StatusOr<Blend> ParseBlend(const std::vector<std::string>& items);
// The same for one string, items separated by whitespace ("0.3 A 0.7 B"; a lone prefix).
absl::StatusOr<Blend> ParseBlend(std::string_view data_path);

// ---- The dataset -----------------------------------------------------------------------------

struct GptDatasetOptions {
  int64_t sequence_length = kDefaultSequenceLength;
  // Samples requested from the whole (blended) dataset; nullopt: one epoch of each dataset.
  std::optional<int64_t> num_samples;
  uint32_t seed = kDefaultSeed;
  bool add_extra_token = kDefaultAddExtraToken;
  // Megatron's drop_last_partial_validation_sequence: false keeps the validation split's
  // (split_index 1) last, partial sample (GptIndexOptions::drop_last_partial_sequence = false for
  // it). Every other split drops it whatever this says, as in Megatron.
  bool drop_last_partial_validation_sequence = true;
  // Split string ("969,30,1"); empty: every sequence (no split).
  std::string split;
  // Which split: 0 train, 1 valid, 2 test. Must be 0 when `split` is empty (InvalidArgument
  // otherwise): every sequence is then taken, and 1 would still apply the validation split's
  // sample count to them.
  int split_index = 0;
  SplitRounding split_rounding = SplitRounding::kCurrent;
  // Where to cache the indices (created if missing); empty: build in memory every time. Files are
  // `{cache_dir}/{hash}-pileprep-gpt-{document,sample,shuffle}_index.npy` and
  // `...-description.txt`, the hash covering the sequence lengths, the split range and every option
  // above as it takes effect (drop_last_partial_validation_sequence only for the validation split);
  // a blend's own indices are
  // `{hash}-pileprep-blend-{dataset_index,dataset_sample_index}.npy`, the hash covering the
  // weights, the sample count and the datasets' sample counts. Written under a unique temporary
  // name and renamed, so ranks building at once are safe (identical contents); ranks opening at
  // once build each key once, the others waiting on a flock of `{hash}-...-lock`, then mapping and
  // checking what was stored with the lock released, all at once.
  std::string cache_dir;
  // Megatron's mid_level_dataset_surplus: each dataset of a weighted blend is asked for
  // ceil(ceil(S·w)·(1 + surplus)) samples. Must be finite and >= 0 (InvalidArgument otherwise,
  // and when a dataset would be asked for 2^63 samples or more); unused by other data paths.
  double blend_surplus = 0.005;
  IndexedDatasetViewOptions view;
  // Asked every 0.1 s while Open waits on another process's build lock (cache_dir), and before
  // each dataset's indices are built: true gives up, and Open returns Cancelled. Unset (the
  // default): Open waits as long as the lock is held. Called on the thread that called Open. The
  // Python module checks it for Ctrl-C: a rank waiting on a build that hangs (a holder stuck on
  // NFS) could not be interrupted.
  std::function<bool()> interrupted;
};

// One part of a sample: `count` tokens of `sequence` from token `offset`.
struct SamplePart {
  int64_t sequence = 0;
  int64_t offset = 0;
  int64_t count = 0;
};

class GptDataset {
 public:
  // `data_path` as Megatron's --data-path: a prefix, "0.3 A 0.7 B" or "A B".
  // Weighted blend with num_samples S: w = NormalizeWeights(weights); dataset d is built for
  // ceil(ceil(S·w_d)·(1+surplus)) samples, the blend has Σ ceil(S·w_d) samples from
  // build_blending_indices with NormalizeWeights(w), as Megatron's BlendedDataset normalizes again
  // (num_samples required).
  // Unweighted blend: each dataset one epoch; exhaustive blending when num_samples is nullopt, else
  // build_blending_indices with weights ∝ dataset sizes and min(S, Σ sizes) samples.
  // As Megatron's BlendedDataset, refuses a weight that is not finite > 0, before or after
  // normalizing (InvalidArgument), and an unweighted blend with a dataset of 0 samples, whose
  // weight is its size (FailedPrecondition).
  static absl::StatusOr<std::unique_ptr<GptDataset>> Open(std::string_view data_path,
                                                          const GptDatasetOptions& options);
  static absl::StatusOr<std::unique_ptr<GptDataset>> Open(const Blend& blend,
                                                          const GptDatasetOptions& options);

  // Number of samples (Megatron's len()).
  int64_t size() const { return size_; }
  // Tokens in a full sample: sequence_length + (add_extra_token ? 1 : 0).
  int64_t sample_tokens() const { return sample_tokens_; }

  // Sample i's text as int64 tokens (Megatron's "text"; tokens = text[:-1], labels = text[1:]).
  // sample_tokens() of them, except the last sample of a split kept with
  // drop_last_partial_validation_sequence = false, which may be shorter: Megatron pads that one
  // with its pad id before building the sample dict (the Python module's TorchGPTDataset does too);
  // GetSample returns the real tokens only. Errors: OutOfRange; DataLoss when the mapped .idx or
  // cached index files were rewritten in place since Open (their values are checked as they are
  // used).
  absl::Status GetSample(int64_t i, std::vector<int64_t>* text) const;
  // Where sample i's tokens are (zero-copy access through dataset(k)). Returns k, the dataset.
  absl::StatusOr<int> GetSampleParts(int64_t i, std::vector<SamplePart>* parts) const;

  bool is_blend() const { return blend_; }
  int num_datasets() const { return static_cast<int>(parts_.size()); }
  const IndexedDatasetView& dataset(int k = 0) const { return *parts_[k].view; }
  const GptIndices& indices(int k = 0) const { return parts_[k].indices; }
  // The split's sequences of dataset k.
  SequenceRange sequences(int k = 0) const { return parts_[k].range; }
  // Blends only (empty otherwise).
  const BlendingArrays& blending() const { return blending_; }
  // Whether the blend's indices came from the cache.
  bool blending_from_cache() const { return blending_from_cache_; }
  // Whether dataset k's indices came from the cache.
  bool loaded_from_cache(int k = 0) const { return parts_[k].from_cache; }

 private:
  struct Part {
    std::shared_ptr<const IndexedDatasetView> view;
    SequenceRange range;
    GptIndices indices;
    bool from_cache = false;
  };
  GptDataset() = default;
  // Open's body; Open turns an allocation failure in it into ResourceExhausted.
  static absl::StatusOr<std::unique_ptr<GptDataset>> OpenUnguarded(
      const Blend& blend, const GptDatasetOptions& options);
  absl::Status LocalParts(int k, int64_t j, std::vector<SamplePart>* parts) const;

  std::vector<Part> parts_;
  BlendingArrays blending_;
  bool blending_from_cache_ = false;
  bool blend_ = false;
  int64_t size_ = 0;
  int64_t sample_tokens_ = 0;
  int64_t extra_ = 1;
};

}  // namespace pileprep

#endif  // PILEPREP_LOADER_H_
