#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <type_traits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "loader/npy.h"
#include "pileprep/loader.h"
#include "pileprep/status_macros.h"

namespace pileprep {
namespace {

// numpy.sum of a float64 array, to the last bit: pairwise summation (numpy's pairwise_sum: runs of
// fewer than 8 added in order from 0, up to 128 in 8 interleaved partial sums, longer halved at a
// multiple of 8). Megatron normalizes blend weights and split fractions with numpy.sum; a plain
// left-to-right sum differs in the last bit from 8 values on (ten weights of 0.1:
// 0.9999999999999999 against numpy's 1.0), enough to move ceil(S * w) and so every blend index. The
// Pile's 30-shard blend has 30 weights.
double PairwiseSum(const double* a, size_t n) {
  if (n < 8) {
    double res = 0.;
    for (size_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (size_t j = 0; j < 8; ++j) r[j] = a[j];
    size_t i = 8;
    for (; i < n - (n % 8); i += 8) {
      for (size_t j = 0; j < 8; ++j) r[j] += a[i + j];
    }
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  size_t n2 = n / 2;
  n2 -= n2 % 8;
  return PairwiseSum(a, n2) + PairwiseSum(a + n2, n - n2);
}

double NumpySum(const std::vector<double>& v) { return PairwiseSum(v.data(), v.size()); }

// Python's float() of a `[.0-9]+` token ("1.2.3" and "." are errors there too).
std::optional<double> ParseFloat(absl::string_view s) {
  double v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

// Python's round() to an integer: half to even (nearbyint in the default rounding mode).
int64_t RoundHalfEven(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

// The index arrays are sized by the caller's num_samples and sequence_length, so a typo in a
// training config (2^38 samples) asks for terabytes: std::bad_alloc must not cross the API (it
// would end the training job in std::terminate), it is a status naming the request.
template <typename F>
auto StatusOnAllocationFailure(F&& build, int64_t sequence_length,
                               const std::optional<int64_t>& num_samples) -> decltype(build()) {
  try {
    return build();
  } catch (const std::bad_alloc&) {
  } catch (const std::length_error&) {  // a count past max_size(): as out of memory
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("out of memory opening the dataset for ",
                   num_samples ? absl::StrCat(*num_samples, " samples") : std::string("one epoch"),
                   " of ", sequence_length, " tokens (the sample indices grow with num_samples)"));
}

// Epochs, tokens per epoch and whether the final epoch is shuffled apart
// (GPTDataset._get_num_epochs and the separate_final_epoch rule).
struct EpochPlan {
  int64_t tokens_per_epoch = 0;
  int32_t num_epochs = 1;
  bool separate = false;
  int64_t samples_sans_final_epoch = 0;
};

int64_t SampleCount(const GptIndexOptions& o, const EpochPlan& plan);

// A kept partial sample's count is a single-precision ceiling (SampleCount): past 2^24 samples it
// can round above the samples the tokens hold (the full ones and one partial). Megatron's
// build_sample_idx then asserts (it runs out of documents before its last sample); a build here
// repeated the partial row, and a cache of it could never be Megatron's.
absl::Status CheckPartialSampleCount(const GptIndexOptions& o, const EpochPlan& plan) {
  if (o.drop_last_partial_sequence) return absl::OkStatus();
  const int64_t extra = o.add_extra_token ? 1 : 0;
  const int64_t tokens = plan.num_epochs * plan.tokens_per_epoch - extra;
  const int64_t held = tokens / o.sequence_length + 1;
  if (SampleCount(o, plan) <= held) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      o.num_samples ? absl::StrCat(*o.num_samples, " samples") : std::string("one epoch"), " of ",
      o.sequence_length,
      " tokens with the partial last sample kept: Megatron's single-precision "
      "sample count rounds to ",
      SampleCount(o, plan), ", more than the ", held,
      " samples its tokens hold (Megatron's build_sample_idx asserts); drop the partial last "
      "sample or change the sequence length"));
}

template <typename Sizes>
absl::StatusOr<EpochPlan> PlanEpochs(const Sizes& sizes, absl::Span<const int32_t> ids,
                                     const GptIndexOptions& o) {
  // A sample holds sequence_length + 1 tokens with add_extra_token, which must be an int64 (as
  // GptDataset::Open checks; BuildGptIndices comes here directly).
  if (o.sequence_length < 1 || o.sequence_length == std::numeric_limits<int64_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence_length ", o.sequence_length, " (expected >= 1, below 2^63 - 1)"));
  }
  if (o.num_samples && *o.num_samples < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_samples ", *o.num_samples, " < 0"));
  }
  const int64_t extra = o.add_extra_token ? 1 : 0;
  EpochPlan plan;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= sizes.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence id ", id, " out of range (", sizes.size(), " sequences)"));
    }
    const int64_t size = sizes[static_cast<size_t>(id)];
    if (size < 0) {  // an .idx's lengths are >= 0 (IndexedDatasetView::Open checks them)
      return absl::InvalidArgumentError(absl::StrCat("sequence ", id, " has length ", size));
    }
    plan.tokens_per_epoch += size;
  }
  // No tokens: no epoch count reaches a sample (Megatron's loop adding epochs never ends). One
  // token with the extra one is enough: Megatron takes as many epochs as num_samples needs, each
  // sample spanning seq + 1 of them (and no samples without num_samples), and so does this.
  if (plan.tokens_per_epoch == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the split's ", ids.size(), " sequences hold no tokens: nothing to sample"));
  }
  if (!o.num_samples) {
    PILEPREP_RETURN_IF_ERROR(CheckPartialSampleCount(o, plan));
    return plan;
  }
  int64_t requested = 0;
  if (__builtin_mul_overflow(*o.num_samples, int64_t{o.sequence_length}, &requested) ||
      __builtin_add_overflow(requested, int64_t{extra}, &requested)) {
    return absl::InvalidArgumentError(absl::StrCat(
        *o.num_samples, " samples of ", o.sequence_length, " tokens: more than 2^63 tokens"));
  }
  // The smallest e >= 1 with e * tokens_per_epoch >= requested (Megatron adds epochs one at a
  // time; the same e in one division, whatever the ratio).
  const int64_t epochs = std::max<int64_t>(
      1, requested / plan.tokens_per_epoch + (requested % plan.tokens_per_epoch != 0));
  int64_t epoch_tokens = 0;
  if (epochs > std::numeric_limits<int32_t>::max() ||
      __builtin_mul_overflow(epochs, plan.tokens_per_epoch, &epoch_tokens)) {
    return absl::InvalidArgumentError(absl::StrCat(*o.num_samples, " samples need ", epochs,
                                                   " epochs of the split's ", plan.tokens_per_epoch,
                                                   " tokens: too many"));
  }
  plan.num_epochs = static_cast<int>(epochs);
  if (plan.num_epochs > 1) {
    const int64_t seq = o.sequence_length;
    plan.samples_sans_final_epoch = ((plan.num_epochs - 1) * plan.tokens_per_epoch - extra) / seq;
    const int64_t from_final = *o.num_samples - plan.samples_sans_final_epoch;
    const int64_t per_epoch = (plan.tokens_per_epoch - extra) / seq;
    plan.separate = from_final < static_cast<int64_t>(0.80 * static_cast<double>(per_epoch));
    // A kept partial sample's count is a single-precision ceiling (SampleCount): past 2^24
    // samples it can round below the epochs before the final one, whose samples the shuffle index
    // shuffles first. Megatron then builds a shuffle index longer than its samples (some read
    // past its sample index); here the shuffle wrote past its array.
    if (plan.separate && SampleCount(o, plan) < plan.samples_sans_final_epoch) {
      return absl::FailedPreconditionError(
          absl::StrCat(*o.num_samples, " samples of ", o.sequence_length,
                       " tokens with the partial last sample "
                       "kept: Megatron's single-precision sample count rounds to ",
                       SampleCount(o, plan), ", fewer than the ", plan.samples_sans_final_epoch,
                       " samples of the ", plan.num_epochs - 1,
                       " epochs before the final one, so its shuffle index would not "
                       "match its samples; ask for fewer samples or drop the partial last sample"));
    }
  }
  PILEPREP_RETURN_IF_ERROR(CheckPartialSampleCount(o, plan));
  return plan;
}

// _build_document_index for one group of epochs: ids tiled, shuffled in place.
void AppendShuffledEpochs(absl::Span<const int32_t> ids, int32_t epochs, NumpyRandomState* rng,
                          std::vector<int32_t>* out) {
  const size_t start = out->size();
  for (int32_t e = 0; e < epochs; ++e) out->insert(out->end(), ids.begin(), ids.end());
  rng->Shuffle(out->data() + start, out->size() - start);
}

// helpers.cpp build_sample_idx's sample count (the sample index has one row more). BuildSampleIndex
// builds this many and LoadCached requires this many, so a cache hit cannot disagree with a build.
int64_t SampleCount(const GptIndexOptions& o, const EpochPlan& plan) {
  const int64_t extra = o.add_extra_token ? 1 : 0;
  const int64_t tokens = plan.num_epochs * plan.tokens_per_epoch - extra;
  if (o.drop_last_partial_sequence) return tokens / o.sequence_length;
  // Upstream divides a float (single precision), then takes the ceiling.
  return static_cast<int64_t>(std::ceil(static_cast<float>(tokens) / o.sequence_length));
}

// helpers.cpp build_sample_idx<T>, in T (int32_t or int64_t) as Megatron builds it: a wider copy
// narrowed afterwards held three times the final array at the building rank's peak.
// helpers.py asserts sample_idx.min() >= 0 on the int32 path only: there an offset of -1, which
// the last row gets when the sampling runs out on an empty sequence (offset = its length 0 minus
// the extra token), is refused; on the int64 path Megatron keeps it, and so does this.
template <typename T, typename Sizes>
absl::Status BuildSampleIndex(const Sizes& sizes, const std::vector<int32_t>& doc_index,
                              const GptIndexOptions& o, const EpochPlan& plan,
                              std::vector<T>* out) {
  const int64_t extra = o.add_extra_token ? 1 : 0;
  const int64_t seq = o.sequence_length;
  const int64_t num_samples = SampleCount(o, plan);
  out->assign(2 * static_cast<size_t>(num_samples + 1), 0);
  T* rows = out->data();
  const int64_t last = static_cast<int64_t>(doc_index.size()) - 1;
  int64_t pos = 0;
  int64_t offset = 0;
  for (int64_t s = 1; s <= num_samples; ++s) {
    int64_t remaining = seq + extra;
    while (remaining != 0) {
      const int64_t length =
          sizes[static_cast<size_t>(doc_index[static_cast<size_t>(pos)])] - offset;
      remaining -= length;
      if (remaining <= 0) {
        offset += remaining + length - extra;
        remaining = 0;
      } else {
        if (pos == last) {
          offset = sizes[static_cast<size_t>(doc_index[static_cast<size_t>(pos)])] - extra;
          if (std::is_same_v<T, int32_t> && offset < 0) {
            return absl::FailedPreconditionError(absl::StrCat(
                "the kept partial last sample ends on sequence ",
                doc_index[static_cast<size_t>(pos)],
                ", which is empty and last in the document index, so its end offset would be ",
                offset,
                ": Megatron refuses that sample index (helpers.py's build_sample_idx asserts "
                "sample_idx.min() >= 0); drop the partial last sample "
                "(drop_last_partial_validation_sequence = true)"));
          }
          break;
        }
        ++pos;
        offset = 0;
      }
    }
    rows[2 * s] = static_cast<T>(pos);
    rows[2 * s + 1] = static_cast<T>(offset);
  }
  return absl::OkStatus();
}

// _build_shuffle_index: arange(dtype=T) pieces shuffled, T uint32_t or int64_t as Megatron's
// dtype_, built in it (no int64 array narrowed afterwards).
template <typename T>
void BuildShuffleIndex(int64_t num_samples, int64_t total, NumpyRandomState* rng,
                       std::vector<T>* out) {
  out->resize(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) (*out)[static_cast<size_t>(i)] = static_cast<T>(i);
  rng->Shuffle(out->data(), static_cast<size_t>(num_samples));
  if (num_samples == total) return;
  rng->Shuffle(out->data() + num_samples, static_cast<size_t>(total - num_samples));
}

void FillPlan(const EpochPlan& plan, GptIndices* out) {
  out->num_epochs = plan.num_epochs;
  out->separate_final_epoch = plan.separate;
  out->tokens_per_epoch = plan.tokens_per_epoch;
}

template <typename Sizes>
int64_t MaxSize(const Sizes& sizes) {
  int64_t m = 0;
  for (size_t i = 0; i < sizes.size(); ++i) m = std::max<int64_t>(m, sizes[i]);
  return m;
}

// Megatron's dtypes: sample_index int32 when max(len(document_index), the largest sequence) fits,
// shuffle_index uint32 below 2^32 - 2 samples (Megatron: numpy.uint32 if size < 2^32 - 1 - 1).
template <typename Sizes>
IndexArray::Type SampleIndexType(const Sizes& sizes, size_t documents) {
  const int64_t sample_max = std::max<int64_t>(static_cast<int64_t>(documents), MaxSize(sizes));
  return sample_max > std::numeric_limits<int32_t>::max() ? IndexArray::Type::kInt64
                                                          : IndexArray::Type::kInt32;
}
IndexArray::Type ShuffleIndexType(int64_t samples) {
  return samples >= int64_t{0xFFFFFFFF} - 1 ? IndexArray::Type::kInt64 : IndexArray::Type::kUint32;
}

template <typename Sizes>
absl::StatusOr<GptIndices> BuildWithPlan(const Sizes& sizes, absl::Span<const int32_t> ids,
                                         const GptIndexOptions& o, const EpochPlan& plan) {
  GptIndices out;
  FillPlan(plan, &out);
  NumpyRandomState rng(o.seed);
  std::vector<int32_t> document_index;
  document_index.reserve(ids.size() * static_cast<size_t>(plan.num_epochs));
  if (!plan.separate) {
    AppendShuffledEpochs(ids, plan.num_epochs, &rng, &document_index);
  } else {
    AppendShuffledEpochs(ids, plan.num_epochs - 1, &rng, &document_index);
    AppendShuffledEpochs(ids, 1, &rng, &document_index);
  }
  if (SampleIndexType(sizes, document_index.size()) == IndexArray::Type::kInt32) {
    std::vector<int32_t> sample_index;
    PILEPREP_RETURN_IF_ERROR(BuildSampleIndex(sizes, document_index, o, plan, &sample_index));
    out.sample_index = IndexArray::Owning(std::move(sample_index));
  } else {
    std::vector<int64_t> sample_index;
    PILEPREP_RETURN_IF_ERROR(BuildSampleIndex(sizes, document_index, o, plan, &sample_index));
    out.sample_index = IndexArray::Owning(std::move(sample_index));
  }
  const int64_t total = static_cast<int64_t>(out.sample_index.size() / 2) - 1;
  const int64_t first = plan.separate ? plan.samples_sans_final_epoch : total;
  if (ShuffleIndexType(total) == IndexArray::Type::kUint32) {
    std::vector<uint32_t> shuffle_index;
    BuildShuffleIndex(first, total, &rng, &shuffle_index);
    out.shuffle_index = IndexArray::Owning(std::move(shuffle_index));
  } else {
    std::vector<int64_t> shuffle_index;
    BuildShuffleIndex(first, total, &rng, &shuffle_index);
    out.shuffle_index = IndexArray::Owning(std::move(shuffle_index));
  }
  out.document_index = IndexArray::Owning(std::move(document_index));
  return out;
}

// ---- Cache -------------------------------------------------------------------------------------

// splitmix64's finishing mixer: every input bit reaches every output bit.
uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Two independent 64-bit lanes over 8-byte words, finished with splitmix64's mixer. Not
// cryptographic; it only has to tell different index inputs apart.
class Hasher {
 public:
  void Add(const void* data, size_t size) {
    const auto* p = static_cast<const uint8_t*>(data);
    AddWord(size);
    size_t i = 0;
    for (; i + 8 <= size; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      AddWord(w);
    }
    uint64_t tail = 0;
    if (i < size) std::memcpy(&tail, p + i, size - i);  // never memcpy from null (size 0)
    AddWord(tail);
  }
  void Add(absl::string_view s) { Add(s.data(), s.size()); }
  std::string Hex() const {
    std::string out;
    for (uint64_t v : {Mix64(a_ ^ b_), Mix64(b_ + 0x9e37)}) {
      for (int shift = 60; shift >= 0; shift -= 4)
        out.push_back("0123456789abcdef"[(v >> shift) & 15]);
    }
    return out;
  }

 private:
  static uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
  void AddWord(uint64_t w) {
    a_ = Rotl(a_ ^ (w * 0x87c37b91114253d5ULL), 31) * 0x4cf5ad432745937fULL;
    b_ = Rotl(b_ + (w ^ 0x52dce729da3ed7b5ULL), 27) * 0x9e3779b97f4a7c15ULL + a_;
  }
  uint64_t a_ = 0x243f6a8885a308d3ULL;
  uint64_t b_ = 0x13198a2e03707344ULL;
};

constexpr char kCacheVersion[] = "pileprep-gpt-indices v1";

std::string CacheDescription(const IndexedDatasetView& view, SequenceRange range,
                             const GptIndexOptions& o) {
  return absl::StrCat(kCacheVersion, "\nprefix: ", view.prefix(),
                      "\nsequences: ", view.num_sequences(), "\nsplit_sequences: [", range.begin,
                      ", ", range.end, ")\nsequence_length: ", o.sequence_length,
                      "\nnum_samples: ", o.num_samples ? absl::StrCat(*o.num_samples) : "None",
                      "\nseed: ", o.seed,
                      "\nadd_extra_token_to_sequence: ", o.add_extra_token ? 1 : 0,
                      "\ndrop_last_partial_sequence: ", o.drop_last_partial_sequence ? 1 : 0, "\n");
}

std::string CacheKey(const IndexedDatasetView& view, SequenceRange range,
                     const GptIndexOptions& o) {
  Hasher h;
  h.Add(kCacheVersion);
  auto lengths = view.sequence_lengths();
  h.Add(lengths.data(), lengths.size() * sizeof(int32_t));
  const int64_t fields[] = {range.begin,
                            range.end,
                            o.sequence_length,
                            o.num_samples ? *o.num_samples : -1,
                            o.seed,
                            o.add_extra_token ? 1 : 0,
                            o.drop_last_partial_sequence ? 1 : 0};
  h.Add(fields, sizeof(fields));
  return h.Hex();
}

std::string CachePath(const std::string& dir, const std::string& key, absl::string_view what) {
  return absl::StrCat(dir, "/", key, "-pileprep-gpt-", what);
}

// The .npy dtype of an IndexArray type.
const char* Descr(IndexArray::Type type) {
  switch (type) {
    case IndexArray::Type::kInt16:
      return "<i2";
    case IndexArray::Type::kInt32:
      return "<i4";
    case IndexArray::Type::kUint32:
      return "<u4";
    case IndexArray::Type::kInt64:
      break;
  }
  return "<i8";
}

// One cached array, mapped: its header checked against the dtypes and shape expected (the type
// Megatron would give it, so that the Python module's arrays are Megatron's), its values left to
// the caller to check.
std::optional<IndexArray> MapCached(absl::StatusOr<internal::MappedNpy> npy, IndexArray::Type type,
                                    const std::vector<int64_t>& shape) {
  if (!npy.ok() || npy->shape != shape) return std::nullopt;
  if (npy->descr != Descr(type)) return std::nullopt;
  return IndexArray::Borrowed(type, npy->data, npy->count, npy->mapping);
}

// Checks every value of a cached array with `ok(value)`, typed (the arrays hold hundreds of
// millions of values at The Pile's scale).
template <typename F>
bool AllValues(const IndexArray& a, F ok) {
  return a.Visit([&](const auto* values) {
    for (size_t i = 0; i < a.size(); ++i) {
      if (!ok(static_cast<int64_t>(values[i]), i)) return false;
    }
    return true;
  });
}

// A cache hit fills `out` (its plan fields already set) with the mapped files; anything
// unreadable, inconsistent, or that cannot be Megatron's indices for `o` and `plan` is a miss, and
// the caller rebuilds and rewrites.
template <typename Sizes>
bool LoadCached(const std::string& dir, const std::string& key, const Sizes& sizes,
                absl::Span<const int32_t> ids, const GptIndexOptions& o, const EpochPlan& plan,
                GptIndices* out) {
  const int64_t docs = static_cast<int64_t>(ids.size()) * plan.num_epochs;
  auto doc = MapCached(internal::MapNpy(CachePath(dir, key, "document_index.npy")),
                       IndexArray::Type::kInt32, {docs});
  if (!doc) return false;
  // Megatron's document index holds the split's ids, each once per epoch, shuffled (the final
  // epoch apart where it is separate). In range of all sequences is not enough: another split's
  // ids (a test sequence in a train split's cache) passed, held-out data then read as training
  // samples without a word. Each part's sum of a mixed id, against the split's own sum times its
  // epochs, compares the multisets in the pass that reads every value anyway, with no count per
  // sequence (hundreds of MB at The Pile's scale); a wrong multiset matches by chance 1 in 2^64.
  auto mixed = [](int64_t id) { return Mix64(static_cast<uint64_t>(id) + 0x9e3779b97f4a7c15ULL); };
  uint64_t split_sum = 0;
  int64_t lowest = std::numeric_limits<int64_t>::max(), highest = -1;
  for (const int32_t id : ids) {
    split_sum += mixed(id);
    lowest = std::min<int64_t>(lowest, id);
    highest = std::max<int64_t>(highest, id);
  }
  const int64_t first_epochs = plan.separate ? plan.num_epochs - 1 : plan.num_epochs;
  const size_t first_docs = ids.size() * static_cast<size_t>(first_epochs);
  uint64_t sums[2] = {0, 0};  // the first epochs, the separate final one
  const bool doc_ok = AllValues(*doc, [&](int64_t d, size_t i) {
    if (d < lowest || d > highest || d >= static_cast<int64_t>(sizes.size())) return false;
    sums[i < first_docs ? 0 : 1] += mixed(d);
    return true;
  });
  if (!doc_ok || sums[0] != split_sum * static_cast<uint64_t>(first_epochs) ||
      sums[1] != (plan.separate ? split_sum : 0)) {
    return false;
  }
  // The count the options imply, not the one the files declare: files that agree with each other
  // on another count (made by hand, or by a build that counted otherwise) are not these indices.
  const int64_t samples = SampleCount(o, plan);
  auto sample = MapCached(internal::MapNpy(CachePath(dir, key, "sample_index.npy")),
                          SampleIndexType(sizes, static_cast<size_t>(docs)), {samples + 1, 2});
  auto shuffle = MapCached(internal::MapNpy(CachePath(dir, key, "shuffle_index.npy")),
                           ShuffleIndexType(samples), {samples});
  if (!sample || !shuffle) return false;
  const int64_t rows = samples + 1;
  // -1 only where Megatron keeps it (BuildSampleIndex): the last row of an int64 sample index. In
  // an int32 one it is what helpers.py refuses, and a build here would be refused too.
  const bool wide = sample->type() == IndexArray::Type::kInt64;
  // Each row is where a sample ends and the next begins: row 0 at (0, 0), the rows in order, and
  // rows on one document exactly a sequence apart (every sample but a kept partial last one spans
  // sequence_length tokens). Rows out of order passed, and every read of their samples failed as
  // "the files changed since they were opened", on every open after, the cache never rebuilt.
  int64_t pos = 0, prev_pos = 0, prev_offset = 0;
  const bool sample_ok = AllValues(*sample, [&](int64_t v, size_t i) {
    const int64_t row = static_cast<int64_t>(i / 2);
    if (i % 2 == 0) {
      prev_pos = pos;
      pos = v;
      return pos >= 0 && pos < docs && (row == 0 ? pos == 0 : pos >= prev_pos);
    }
    const bool last = row + 1 == rows;
    // The document index is read again from its mapping: bounded again, not trusted from the
    // pass above (the file may have been rewritten in place since).
    const int64_t d = (*doc)[static_cast<size_t>(pos)];
    if (!(v >= (last && wide ? -1 : 0) && d >= 0 && d < static_cast<int64_t>(sizes.size()) &&
          v <= sizes[static_cast<size_t>(d)])) {
      return false;
    }
    const int64_t step = v - prev_offset;
    prev_offset = v;
    if (row == 0) return v == 0;
    if (pos != prev_pos) return true;
    return last ? step <= o.sequence_length : step == o.sequence_length;
  });
  if (!sample_ok) return false;
  // Megatron's shuffle index is a permutation of [0, samples): with a separate final epoch, one of
  // [0, sans) followed by one of the rest. In range is not enough: a repeated row would give one
  // sample twice and another never, silently. The bitmap (samples / 8 bytes, freed on return) adds
  // a bit test to a pass that reads every value anyway; its random accesses are as many as the
  // sample index pass's lookups of sequence lengths, over a smaller array. On the 2-core VM: 0.13 s
  // at 68 million samples, where a hit took 3.4-6 s with or without it (a build 41 s); 1.5 s alone
  // at The Pile's 146 million, where the 18 MB bitmap outgrows the cache.
  const int64_t first = plan.separate ? plan.samples_sans_final_epoch : samples;
  std::vector<uint64_t> seen(static_cast<size_t>(samples / 64 + 1), 0);
  const bool shuffle_ok = AllValues(*shuffle, [&](int64_t v, size_t i) {
    if (v < 0 || v >= samples || (static_cast<int64_t>(i) < first) != (v < first)) return false;
    uint64_t& word = seen[static_cast<size_t>(v >> 6)];
    const uint64_t bit = uint64_t{1} << (v & 63);
    if (word & bit) return false;
    word |= bit;
    return true;
  });
  if (!shuffle_ok) return false;
  out->document_index = *std::move(doc);
  out->sample_index = *std::move(sample);
  out->shuffle_index = *std::move(shuffle);
  return true;
}

// An array as a .npy file of its own dtype, written atomically: the header, then the items from
// where they lie (a copy of the file in memory first held the array twice at the peak).
absl::Status StoreArray(const std::string& path, const IndexArray& a,
                        const std::vector<int64_t>& shape) {
  const std::string header = internal::EncodeNpyHeader(Descr(a.type()), shape);
  const absl::string_view parts[] = {
      header, absl::string_view(static_cast<const char*>(a.data()), a.size() * a.itemsize())};
  return internal::WriteFileAtomically(path, parts);
}

absl::Status StoreCached(const std::string& dir, const std::string& key,
                         const std::string& description, const GptIndices& ix) {
  PILEPREP_RETURN_IF_ERROR(internal::MakeDirectories(dir));
  const int64_t rows = static_cast<int64_t>(ix.sample_index.size() / 2);
  PILEPREP_RETURN_IF_ERROR(StoreArray(CachePath(dir, key, "document_index.npy"), ix.document_index,
                                      {static_cast<int64_t>(ix.document_index.size())}));
  PILEPREP_RETURN_IF_ERROR(
      StoreArray(CachePath(dir, key, "sample_index.npy"), ix.sample_index, {rows, 2}));
  PILEPREP_RETURN_IF_ERROR(
      StoreArray(CachePath(dir, key, "shuffle_index.npy"), ix.shuffle_index, {ix.size()}));
  return internal::WriteFileAtomically(CachePath(dir, key, "description.txt"), description);
}

// A value read from a mapped .idx or cached index file that fails its check where it is used: the
// file was rewritten in place since Open (it passed when loaded). `what` names the sample and
// value.
absl::Status ChangedSinceOpen(absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat(what, " (the files changed since they were opened: rewritten in place?)"));
}

constexpr char kBlendCacheVersion[] = "pileprep-blend-indices v1";

// What build_blending_indices (or its exhaustive form) sees: the weights given to it (none for the
// exhaustive form), the sample count, and the datasets' sample counts, which bound the values.
std::string BlendCacheKey(absl::Span<const double> weights, int64_t size,
                          absl::Span<const int64_t> lengths) {
  Hasher h;
  h.Add(kBlendCacheVersion);
  h.Add(weights.data(), weights.size() * sizeof(double));
  h.Add(&size, sizeof(size));
  h.Add(lengths.data(), lengths.size() * sizeof(int64_t));
  return h.Hex();
}

std::string BlendCachePath(const std::string& dir, const std::string& key, absl::string_view what) {
  return absl::StrCat(dir, "/", key, "-pileprep-blend-", what);
}

// A hit fills `out` with the mapped files, every value checked (dataset d's sample below
// lengths[d]); anything else is a miss.
bool LoadCachedBlend(const std::string& dir, const std::string& key, int64_t size,
                     absl::Span<const int64_t> lengths, BlendingArrays* out) {
  auto dataset = MapCached(internal::MapNpy(BlendCachePath(dir, key, "dataset_index.npy")),
                           IndexArray::Type::kInt16, {size});
  auto sample = MapCached(internal::MapNpy(BlendCachePath(dir, key, "dataset_sample_index.npy")),
                          IndexArray::Type::kInt64, {size});
  if (!dataset || !sample) return false;
  const auto* d = static_cast<const int16_t*>(dataset->data());
  const auto* s = static_cast<const int64_t*>(sample->data());
  // Both builders (BuildBlendingIndices, BuildExhaustiveBlendingIndices, as Megatron's) give each
  // pick of a dataset the next of its samples: a running count per dataset. A cache that breaks
  // it is damaged (a zeroed page of either file was read as a hit, every later open giving other
  // samples than Megatron's), and in range it is never past a dataset's samples either.
  std::vector<int64_t> next(lengths.size(), 0);
  for (size_t i = 0; i < static_cast<size_t>(size); ++i) {
    if (d[i] < 0 || static_cast<size_t>(d[i]) >= lengths.size()) return false;
    int64_t& want = next[static_cast<size_t>(d[i])];
    if (s[i] != want || s[i] >= lengths[static_cast<size_t>(d[i])]) return false;
    ++want;
  }
  out->dataset_index = *std::move(dataset);
  out->dataset_sample_index = *std::move(sample);
  return true;
}

absl::Status StoreCachedBlend(const std::string& dir, const std::string& key,
                              const BlendingArrays& b) {
  PILEPREP_RETURN_IF_ERROR(internal::MakeDirectories(dir));
  const int64_t size = static_cast<int64_t>(b.dataset_index.size());
  PILEPREP_RETURN_IF_ERROR(
      StoreArray(BlendCachePath(dir, key, "dataset_index.npy"), b.dataset_index, {size}));
  return StoreArray(BlendCachePath(dir, key, "dataset_sample_index.npy"), b.dataset_sample_index,
                    {size});
}

}  // namespace

// ---- IndexArray --------------------------------------------------------------------------------

namespace {

// `values` moved into shared storage that the array keeps alive.
template <typename T>
IndexArray OwnedArray(IndexArray::Type type, std::vector<T> values) {
  auto owned = std::make_shared<std::vector<T>>(std::move(values));
  return IndexArray::Borrowed(type, owned->data(), owned->size(), owned);
}

}  // namespace

IndexArray IndexArray::Narrowed(Type type, const std::vector<int64_t>& values) {
  auto narrow = [&](auto tag) {
    using T = decltype(tag);
    return OwnedArray(type, std::vector<T>(values.begin(), values.end()));
  };
  switch (type) {
    case Type::kInt16:
      return narrow(int16_t{});
    case Type::kInt32:
      return narrow(int32_t{});
    case Type::kUint32:
      return narrow(uint32_t{});
    case Type::kInt64:
      break;
  }
  return narrow(int64_t{});
}

IndexArray IndexArray::Owning(std::vector<int16_t> values) {
  return OwnedArray(Type::kInt16, std::move(values));
}
IndexArray IndexArray::Owning(std::vector<int32_t> values) {
  return OwnedArray(Type::kInt32, std::move(values));
}
IndexArray IndexArray::Owning(std::vector<uint32_t> values) {
  return OwnedArray(Type::kUint32, std::move(values));
}
IndexArray IndexArray::Owning(std::vector<int64_t> values) {
  return OwnedArray(Type::kInt64, std::move(values));
}

IndexArray IndexArray::Borrowed(Type type, const void* data, size_t size,
                                std::shared_ptr<const void> owner) {
  IndexArray a;
  a.type_ = type;
  a.data_ = data;
  a.size_ = size;
  a.owner_ = std::move(owner);
  return a;
}

std::vector<int64_t> IndexArray::ToVector() const {
  std::vector<int64_t> out(size_);
  for (size_t i = 0; i < size_; ++i) out[i] = (*this)[i];
  return out;
}

// ---- NumpyRandomState --------------------------------------------------------------------------

uint64_t NumpyRandomState::RandomInterval(uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  mask |= mask >> 32;
  uint64_t value;
  if (max <= 0xFFFFFFFFULL) {
    do {
      value = static_cast<uint32_t>(gen_()) & mask;
    } while (value > max);
  } else {
    do {
      uint64_t hi = static_cast<uint32_t>(gen_());
      uint64_t lo = static_cast<uint32_t>(gen_());
      value = ((hi << 32) | lo) & mask;
    } while (value > max);
  }
  return value;
}

// ---- Split -------------------------------------------------------------------------------------

absl::StatusOr<std::array<std::optional<SequenceRange>, 3>> ComputeSplit(
    std::string_view split_text, int64_t num_sequences, SplitRounding rounding) {
  // The API's std::string_view; Debian's Abseil has its own absl::string_view, used inside.
  const absl::string_view split(split_text.data(), split_text.size());
  // The split's bookends are computed in float64, as Megatron's are: beyond 2^53 sequences they
  // are not exact, and a negative count is no dataset.
  if (num_sequences < 0 || num_sequences > (int64_t{1} << 53)) {
    return absl::InvalidArgumentError(absl::StrCat("split \"", split, "\" of ", num_sequences,
                                                   " sequences (expected 0 to 2^53)"));
  }
  std::vector<double> w;
  if (rounding == SplitRounding::kLegacy) {
    // get_train_valid_test_split_: pieces between ',' (or else '/'), each through float(), then
    // the first three kept. float() takes surrounding whitespace, a sign, an exponent and '_'
    // between digits. Of the three kept, "inf" and "nan" make its int(round(...)) raise: refused
    // here. A negative weight makes a range that starts or ends below 0, which GPTDataset's
    // `min(documents) >= 0` refuses, or ("100,-1,1") one that ends before it starts, which
    // Megatron takes for no dataset while the ranges around it overlap: refused here too.
    const char sep = split.find(',') != absl::string_view::npos   ? ','
                     : split.find('/') != absl::string_view::npos ? '/'
                                                                  : '\0';
    for (absl::string_view rest = split;;) {
      const size_t cut = sep == '\0' ? absl::string_view::npos : rest.find(sep);
      std::string piece(absl::StripAsciiWhitespace(rest.substr(0, cut)));
      const bool plus = !piece.empty() && piece.front() == '+';
      if (plus) piece.erase(0, 1);
      // '_' only between two digits, as float() allows it; then dropped.
      bool underscores_ok = true;
      for (size_t k = 0; k < piece.size(); ++k) {
        if (piece[k] != '_') continue;
        underscores_ok = underscores_ok && k > 0 && k + 1 < piece.size() &&
                         absl::ascii_isdigit(piece[k - 1]) && absl::ascii_isdigit(piece[k + 1]);
      }
      piece.erase(std::remove(piece.begin(), piece.end(), '_'), piece.end());
      // from_chars takes '-' but not '+': a sign after '+' ("+-1") is refused as float() does.
      const std::optional<double> v =
          !underscores_ok || (plus && !piece.empty() && piece.front() == '-') ? std::nullopt
                                                                              : ParseFloat(piece);
      const absl::string_view shown = absl::StripAsciiWhitespace(rest.substr(0, cut));
      if (!v) {
        return absl::InvalidArgumentError(
            absl::StrCat("split \"", split, "\": \"", shown, "\" is not a number"));
      }
      if (w.size() < 3 && (!std::isfinite(*v) || *v < 0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "split \"", split, "\": weight \"", shown, "\" is ",
            std::isfinite(*v)
                ? "negative (legacy Megatron's ranges would then fall below 0, or invert and "
                  "overlap: not taken)"
                : "not finite (legacy Megatron's int(round(...)) of it raises)"));
      }
      w.push_back(*v);
      if (cut == absl::string_view::npos) break;
      rest.remove_prefix(cut + 1);
    }
    if (w.size() > 3) w.resize(3);
  }
  for (size_t i = 0; rounding == SplitRounding::kCurrent && i < split.size();) {
    auto is_num = [](char c) { return c == '.' || (c >= '0' && c <= '9'); };
    if (!is_num(split[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < split.size() && is_num(split[j])) ++j;
    absl::string_view token = split.substr(i, j - i);
    std::optional<double> v = ParseFloat(token);
    if (!v) {
      return absl::InvalidArgumentError(
          absl::StrCat("split \"", split, "\": \"", token, "\" is not a number"));
    }
    w.push_back(*v);
    i = j;
  }
  if (w.empty() || w.size() > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("split \"", split, "\": expected 1 to 3 weights such as \"969,30,1\""));
  }
  w.resize(3, 0.0);
  const double sum = NumpySum(w);
  if (!(sum > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("split \"", split, "\": weights sum to ", sum, " (expected more than 0)"));
  }
  for (double& x : w) x /= sum;
  std::array<std::optional<SequenceRange>, 3> out;
  const double n = static_cast<double>(num_sequences);
  if (rounding == SplitRounding::kCurrent) {
    double bookends[4] = {0, w[0], w[0] + w[1], w[0] + w[1] + w[2]};
    for (int i = 0; i < 3; ++i) {
      if (bookends[i] >= bookends[i + 1]) continue;
      out[i] = SequenceRange{RoundHalfEven(bookends[i] * n), RoundHalfEven(bookends[i + 1] * n)};
    }
  } else {
    int64_t index[4] = {0, 0, 0, 0};
    for (int i = 0; i < 3; ++i) index[i + 1] = index[i] + RoundHalfEven(w[i] * n);
    const int64_t diff = index[3] - num_sequences;
    for (int i = 1; i < 4; ++i) index[i] -= diff;
    // A first weight that rounds to 0 sequences, with the three roundings one over, is shifted to
    // -1 ("0,1,1" of 23: 0, -1, 11, 23): the next split would start below 0, which legacy
    // Megatron's GPTDataset refuses (`min(documents) >= 0`), so no ranges are made of it.
    if (index[1] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "split \"", split, "\" of ", num_sequences, " sequences: legacy rounding (each piece's ",
          "count rounded, then every boundary shifted by ", diff, " so that the last is ",
          num_sequences, ") puts a boundary at ", index[1],
          ", below 0, which legacy Megatron refuses too; give the first weight more, or use the "
          "current rounding"));
    }
    for (int i = 0; i < 3; ++i) {
      if (index[i + 1] > index[i]) out[i] = SequenceRange{index[i], index[i + 1]};
    }
  }
  return out;
}

// ---- Indices -----------------------------------------------------------------------------------

absl::StatusOr<GptIndices> BuildGptIndices(absl::Span<const int32_t> sizes,
                                           absl::Span<const int32_t> sequence_ids,
                                           const GptIndexOptions& options) {
  PILEPREP_ASSIGN_OR_RETURN(EpochPlan plan, PlanEpochs(sizes, sequence_ids, options));
  return StatusOnAllocationFailure(
      [&] { return BuildWithPlan(sizes, sequence_ids, options, plan); }, options.sequence_length,
      options.num_samples);
}

BlendingIndices BuildBlendingIndices(absl::Span<const double> weights, int64_t size) {
  BlendingIndices out;
  if (weights.empty() || size <= 0) return out;
  out.dataset_index.resize(static_cast<size_t>(size));
  out.dataset_sample_index.resize(static_cast<size_t>(size));
  std::vector<int64_t> current(weights.size(), 0);
  for (int64_t s = 0; s < size; ++s) {
    const double x = std::max(static_cast<double>(s), 1.0);
    size_t best = 0;
    double best_error = weights[0] * x - static_cast<double>(current[0]);
    for (size_t d = 1; d < weights.size(); ++d) {
      double error = weights[d] * x - static_cast<double>(current[d]);
      if (error > best_error) {
        best_error = error;
        best = d;
      }
    }
    out.dataset_index[static_cast<size_t>(s)] = static_cast<int16_t>(best);
    out.dataset_sample_index[static_cast<size_t>(s)] = current[best];
    ++current[best];
  }
  return out;
}

BlendingIndices BuildExhaustiveBlendingIndices(absl::Span<const int64_t> sizes) {
  BlendingIndices out;
  int64_t total = 0;
  std::set<size_t> unspent;
  for (size_t d = 0; d < sizes.size(); ++d) {
    total += std::max<int64_t>(sizes[d], 0);
    if (sizes[d] > 0) unspent.insert(d);
  }
  if (total == 0) return out;
  std::vector<double> weights(sizes.size());
  for (size_t d = 0; d < sizes.size(); ++d) {
    weights[d] = static_cast<double>(sizes[d]) / static_cast<double>(total);
  }
  std::vector<int64_t> counts(sizes.size(), 0);
  out.dataset_index.reserve(static_cast<size_t>(total));
  out.dataset_sample_index.reserve(static_cast<size_t>(total));
  for (int64_t s = 0; !unspent.empty(); ++s) {
    const double x = std::max(static_cast<double>(s), 1.0);
    size_t best = 0;
    double best_error = std::numeric_limits<double>::lowest();
    for (size_t d : unspent) {
      double error = weights[d] * x - static_cast<double>(counts[d]);
      if (error > best_error) {
        best_error = error;
        best = d;
      }
    }
    out.dataset_index.push_back(static_cast<int16_t>(best));
    out.dataset_sample_index.push_back(counts[best]);
    if (++counts[best] == sizes[best]) unspent.erase(best);
  }
  return out;
}

namespace {

// Python's float() of a well-formed decimal number too large or too small for a double: ±inf
// ("1e400") or ±0.0 ("1e-400"), where std::from_chars gives no value. Out of range, a number is too
// large exactly when it is >= 1, which its first nonzero digit and its exponent tell.
double OutOfRangeAsPython(absl::string_view number) {
  const bool negative = absl::ConsumePrefix(&number, "-");
  int64_t exponent = 0;
  if (const size_t e = number.find_first_of("eE"); e != absl::string_view::npos) {
    absl::string_view x = number.substr(e + 1);
    number = number.substr(0, e);
    const bool minus = absl::ConsumePrefix(&x, "-");
    if (!minus) absl::ConsumePrefix(&x, "+");
    // An exponent past int64 only needs to stay past every count of digits below.
    if (std::from_chars(x.data(), x.data() + x.size(), exponent).ec != std::errc()) {
      exponent = int64_t{1} << 40;
    }
    if (minus) exponent = -exponent;
  }
  const size_t point = std::min(number.find('.'), number.size());
  const size_t first = number.find_first_not_of("0.");
  if (first == absl::string_view::npos) return negative ? -0.0 : 0.0;
  // 10^magnitude <= |number| < 10^(magnitude + 1)
  const int64_t magnitude = exponent + (first < point ? static_cast<int64_t>(point - first) - 1
                                                      : -static_cast<int64_t>(first - point));
  const double v = magnitude >= 0 ? std::numeric_limits<double>::infinity() : 0.0;
  return negative ? -v : v;
}

// The bytes of the character str.isspace() holds true that `s` (UTF-8) starts with (at_end: ends
// with), or 0: ASCII \t \n \v \f \r, \x1c-\x1f and space, and U+0085, U+00A0, U+1680,
// U+2000-U+200A, U+2028, U+2029, U+202F, U+205F and U+3000. UTF-8 synchronizes: a complete
// encoding at the end of valid text is that character, never the tail of another.
size_t PythonSpaceBytes(absl::string_view s, bool at_end) {
  if (s.empty()) return 0;
  const auto c = static_cast<unsigned char>(at_end ? s.back() : s.front());
  if ((c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20)) return 1;
  if (s.size() >= 2) {
    const absl::string_view two = at_end ? s.substr(s.size() - 2) : s.substr(0, 2);
    if (two == "\xc2\x85" || two == "\xc2\xa0") return 2;
  }
  if (s.size() >= 3) {
    const absl::string_view three = at_end ? s.substr(s.size() - 3) : s.substr(0, 3);
    const auto last = static_cast<unsigned char>(three[2]);
    if (three == "\xe1\x9a\x80" || three == "\xe2\x81\x9f" || three == "\xe3\x80\x80" ||
        (three.substr(0, 2) == "\xe2\x80" &&
         ((last >= 0x80 && last <= 0x8a) || last == 0xa8 || last == 0xa9 || last == 0xaf))) {
      return 3;
    }
  }
  return 0;
}

// Python's str.strip() with no argument: Megatron's get_blend_from_list strips every prefix so,
// and float() strips a weight so before reading it.
absl::string_view PythonStrip(absl::string_view s) {
  while (size_t n = PythonSpaceBytes(s, false)) s.remove_prefix(n);
  while (size_t n = PythonSpaceBytes(s, true)) s.remove_suffix(n);
  return s;
}

// Python's float() of a --data-path item, for what Megatron's parser accepts: surrounding
// whitespace, a leading '+', '_' between digits ("1_000"), and from_chars' decimal, exponent,
// "inf" and "nan" forms; out of range, ±inf or ±0.0 as in Python (and so refused as a weight, not
// taken for a prefix).
std::optional<double> PythonFloat(absl::string_view item) {
  std::string t(PythonStrip(item));
  const bool plus = !t.empty() && t[0] == '+';
  if (plus) t.erase(0, 1);
  // One sign at most ("+-1" is no float), and no "nan(...)" payload, which from_chars takes and
  // float() does not.
  if (t.empty() || t[0] == '+' || (plus && t[0] == '-') || t.find('(') != std::string::npos) {
    return std::nullopt;
  }
  std::string digits;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] != '_') {
      digits.push_back(t[i]);
      continue;
    }
    if (i == 0 || i + 1 == t.size() || !absl::ascii_isdigit(static_cast<unsigned char>(t[i - 1])) ||
        !absl::ascii_isdigit(static_cast<unsigned char>(t[i + 1]))) {
      return std::nullopt;
    }
  }
  double v = 0;
  auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (r.ptr != digits.data() + digits.size()) return std::nullopt;
  if (r.ec == std::errc::result_out_of_range) return OutOfRangeAsPython(digits);
  if (r.ec != std::errc()) return std::nullopt;
  return v;
}

}  // namespace

std::vector<double> NormalizeWeights(absl::Span<const double> weights) {
  std::vector<double> w(weights.begin(), weights.end());
  const double sum = NumpySum(w);
  for (double& x : w) x /= sum;
  return w;
}

absl::StatusOr<Blend> ParseBlend(const std::vector<std::string>& items) {
  if (items.empty()) return absl::InvalidArgumentError("data path: no prefix given");
  Blend blend;
  // get_blend_from_list: an even count is weighted when float() reads every even item. Where one
  // is not a number, the rest must not be either: `assert all(is_none)` runs on what
  // `any(is_none)` left of one iterator, the items after the first that is not a number.
  bool weighted = items.size() % 2 == 0;
  std::vector<double> weights;
  std::optional<size_t> not_a_number;
  for (size_t i = 0; weighted && i < items.size(); i += 2) {
    const std::optional<double> v = PythonFloat(items[i]);
    if (!v) {
      if (!not_a_number) not_a_number = i;
    } else if (not_a_number) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data path: item ", i, " (\"", items[i], "\") is a number after item ", *not_a_number,
          " (\"", items[*not_a_number],
          "\"), which is not: give (weight, prefix) pairs or prefixes only (Megatron's "
          "get_blend_from_list asserts this)"));
    } else {
      weights.push_back(*v);
    }
  }
  if (!weighted || not_a_number) {
    for (const std::string& item : items) blend.prefixes.emplace_back(PythonStrip(item));
    return blend;
  }
  // Megatron's BlendedDataset asserts every weight > 0. A weight of 0 is no way to leave a dataset
  // out: its dataset is still built (for 0 samples: a whole epoch) and build_blending_indices picks
  // it at ties, so it would supply samples.
  for (size_t i = 0; i < weights.size(); ++i) {
    const absl::string_view prefix = PythonStrip(items[2 * i + 1]);
    if (!IsBlendWeight(weights[i])) {
      return absl::InvalidArgumentError(absl::StrCat("data path: weight \"", items[2 * i], "\" of ",
                                                     prefix, " is not a finite number > 0"));
    }
    blend.prefixes.emplace_back(prefix);
  }
  blend.weights = std::move(weights);
  return blend;
}

absl::StatusOr<Blend> ParseBlend(std::string_view data_path) {
  std::vector<std::string> items =
      absl::StrSplit(absl::string_view(data_path.data(), data_path.size()),
                     absl::ByAnyChar(" \t\n\r"), absl::SkipEmpty());
  return ParseBlend(items);
}

// ---- GptDataset --------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<GptDataset>> GptDataset::Open(std::string_view data_path,
                                                             const GptDatasetOptions& options) {
  PILEPREP_ASSIGN_OR_RETURN(Blend blend, ParseBlend(data_path));
  return Open(blend, options);
}

absl::StatusOr<std::unique_ptr<GptDataset>> GptDataset::Open(const Blend& blend,
                                                             const GptDatasetOptions& options) {
  return StatusOnAllocationFailure([&] { return OpenUnguarded(blend, options); },
                                   options.sequence_length, options.num_samples);
}

absl::StatusOr<std::unique_ptr<GptDataset>> GptDataset::OpenUnguarded(
    const Blend& blend, const GptDatasetOptions& options) {
  if (blend.prefixes.empty()) return absl::InvalidArgumentError("data path: no prefix given");
  if (!blend.weights.empty() && blend.weights.size() != blend.prefixes.size()) {
    return absl::InvalidArgumentError("blend: one weight per prefix expected");
  }
  if (blend.prefixes.size() > kMaxBlendDatasets) {
    return absl::InvalidArgumentError(absl::StrCat("blend: ", blend.prefixes.size(),
                                                   " datasets; at most ", kMaxBlendDatasets,
                                                   " (Megatron's limit)"));
  }
  if (options.split_index < 0 || options.split_index > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("split_index ", options.split_index, " (expected 0, 1 or 2)"));
  }
  // A path stops at its first NUL for mkdir() and open(): another directory would be used.
  if (options.cache_dir.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("cache_dir: embedded null byte");
  }
  // Without a split every sequence is taken, yet split_index 1 would still give the validation
  // split's sample count (a partial last sample kept): no split is split 0.
  if (options.split.empty() && options.split_index != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("split_index ", options.split_index,
                     " without a split string: with no split every sequence is taken, as split 0"));
  }
  if (options.num_samples && *options.num_samples < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_samples ", *options.num_samples, " < 0"));
  }
  // A sample holds sequence_length + 1 tokens (add_extra_token), which must be an int64.
  if (options.sequence_length < 1 ||
      options.sequence_length == std::numeric_limits<int64_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("sequence_length ", options.sequence_length,
                                                   " (expected >= 1, below 2^63 - 1)"));
  }
  // Megatron takes any float; a NaN or an infinity would make every dataset's sample count
  // ceil(NaN) or ceil(inf), which no int64 holds, and a negative one asks a dataset for fewer
  // samples than the blend takes from it.
  if (!(std::isfinite(options.blend_surplus) && options.blend_surplus >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mid_level_dataset_surplus ", options.blend_surplus, " (expected a finite number >= 0)"));
  }
  const bool weighted = !blend.weights.empty();
  if (weighted && !options.num_samples) {
    return absl::InvalidArgumentError("a weighted blend needs num_samples");
  }
  // Megatron normalizes the weights twice: BlendedMegatronDatasetBuilder once, for the samples each
  // dataset is asked for, and BlendedDataset again ("redundant normalization for bitwise identical
  // comparison"), for build_blending_indices. The second changes the last bit of many weights
  // (20 A 12 B 9 C 14 D: 0.36363636363636365 -> 0.3636363636363637), and so some picks.
  std::vector<double> sized_by, blended_by;
  if (weighted) {
    // As ParseBlend (a Blend may be made without it): BlendedDataset asserts every weight > 0.
    for (size_t k = 0; k < blend.weights.size(); ++k) {
      const double w = blend.weights[k];
      if (!IsBlendWeight(w)) {
        return absl::InvalidArgumentError(
            absl::StrCat("blend: weight ", w, " of ", blend.prefixes[k], " is not finite > 0"));
      }
    }
    sized_by = NormalizeWeights(blend.weights);
    blended_by = NormalizeWeights(sized_by);
    // BlendedDataset asserts on the builder's normalized weights, where one far below the others
    // (1e-300 A 1e100 B) becomes 0, as do all when the sum overflows (1e308 A 1e308 B).
    for (size_t k = 0; k < sized_by.size(); ++k) {
      if (!(sized_by[k] > 0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "blend: weight ", blend.weights[k], " of ", blend.prefixes[k], " normalizes to ",
            sized_by[k], " (not > 0; Megatron's BlendedDataset refuses it)"));
      }
    }
  }
  std::unique_ptr<GptDataset> ds(new GptDataset());
  ds->blend_ = weighted || blend.prefixes.size() > 1;
  ds->extra_ = options.add_extra_token ? 1 : 0;
  ds->sample_tokens_ = options.sequence_length + ds->extra_;

  for (size_t k = 0; k < blend.prefixes.size(); ++k) {
    Part part;
    PILEPREP_ASSIGN_OR_RETURN(part.view, IndexedDatasetView::Open(blend.prefixes[k], options.view));
    const int64_t n = part.view->num_sequences();
    part.range = SequenceRange{0, n};
    if (!options.split.empty()) {
      PILEPREP_ASSIGN_OR_RETURN(auto splits,
                                ComputeSplit(options.split, n, options.split_rounding));
      if (!splits[options.split_index]) {
        return absl::FailedPreconditionError(
            absl::StrCat(blend.prefixes[k], ": split ", options.split_index, " of \"",
                         options.split, "\" is empty (not built)"));
      }
      part.range = *splits[options.split_index];
    }
    GptIndexOptions io;
    io.sequence_length = options.sequence_length;
    io.seed = options.seed;
    io.add_extra_token = options.add_extra_token;
    // Megatron rounds the sample count up only for the validation split, and only when asked.
    io.drop_last_partial_sequence =
        options.split_index != 1 || options.drop_last_partial_validation_sequence;
    if (weighted) {
      const double target = std::ceil(static_cast<double>(*options.num_samples) * sized_by[k]);
      const double asked = std::ceil(target * (1.0 + options.blend_surplus));
      // 2^63 is a double exactly: anything below it converts to int64 without overflow.
      if (!(asked < 9223372036854775808.0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            blend.prefixes[k], ": ", target, " samples with mid_level_dataset_surplus ",
            options.blend_surplus, " ask for ", asked, " samples: more than int64 holds"));
      }
      io.num_samples = static_cast<int64_t>(asked);
    } else if (!ds->blend_) {
      io.num_samples = options.num_samples;
    }
    // Sequence ids are int32, as in Megatron's document index.
    if (part.range.end > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat(blend.prefixes[k], ": sequences [", part.range.begin, ", ", part.range.end,
                       ") reach past int32, the type of sequence ids (as in Megatron): at most ",
                       std::numeric_limits<int32_t>::max(), " sequences can be read"));
    }
    std::vector<int32_t> ids(static_cast<size_t>(part.range.size()));
    for (int64_t i = 0; i < part.range.size(); ++i) {
      ids[static_cast<size_t>(i)] = static_cast<int32_t>(part.range.begin + i);
    }
    // The key first: the lengths are read where they lie in the mapped .idx, and a build stored
    // under it must come from the lengths it hashes (checked again below).
    const std::string key =
        options.cache_dir.empty() ? std::string() : CacheKey(*part.view, part.range, io);
    auto plan = PlanEpochs(part.view->sequence_lengths(), ids, io);
    if (!plan.ok()) {
      return absl::Status(plan.status().code(),
                          absl::StrCat(blend.prefixes[k], ": ", plan.status().message()));
    }
    if (!options.cache_dir.empty()) {
      FillPlan(*plan, &part.indices);
      part.from_cache = LoadCached(options.cache_dir, key, part.view->sequence_lengths(), ids, io,
                                   *plan, &part.indices);
    }
    std::optional<internal::FileLock> building;
    if (!part.from_cache && !options.cache_dir.empty() &&
        internal::MakeDirectories(options.cache_dir).ok()) {
      // One rank at a time builds under this key; a rank that waited finds the indices stored
      // (their description is written last) and checks them without the lock.
      absl::StatusOr<bool> loaded = internal::AwaitStoredOrLock(
          CachePath(options.cache_dir, key, "lock"),
          CachePath(options.cache_dir, key, "description.txt"),
          CachePath(options.cache_dir, key, ""),
          [&] {
            return LoadCached(options.cache_dir, key, part.view->sequence_lengths(), ids, io, *plan,
                              &part.indices);
          },
          options.interrupted, &building);
      if (!loaded.ok()) {
        return absl::Status(loaded.status().code(),
                            absl::StrCat(blend.prefixes[k], ": ", loaded.status().message()));
      }
      part.from_cache = *loaded;
    }
    if (!part.from_cache && options.interrupted && options.interrupted()) {
      return absl::CancelledError(
          absl::StrCat(blend.prefixes[k], ": interrupted before its indices were built"));
    }
    if (!part.from_cache) {
      auto built = BuildWithPlan(part.view->sequence_lengths(), ids, io, *plan);
      if (!built.ok()) {
        return absl::Status(built.status().code(),
                            absl::StrCat(blend.prefixes[k], ": ", built.status().message()));
      }
      part.indices = *std::move(built);
      if (!options.cache_dir.empty()) {
        // An .idx rewritten in place while the indices were built (Megatron's preprocess_data.py
        // writes in place) would leave indices of other lengths under this key for every later
        // run: nothing is stored.
        if (CacheKey(*part.view, part.range, io) != key) {
          return absl::DataLossError(
              absl::StrCat(blend.prefixes[k],
                           ".idx: its sequence lengths changed while the indices were "
                           "built (was it rewritten in place?); nothing was cached"));
        }
        PILEPREP_RETURN_IF_ERROR(StoreCached(
            options.cache_dir, key, CacheDescription(*part.view, part.range, io), part.indices));
      }
    }
    ds->parts_.push_back(std::move(part));
  }

  if (!ds->blend_) {
    ds->size_ = ds->parts_[0].indices.size();
    // No blend: empty arrays of the blend's dtypes (the Python module's views keep them).
    ds->blending_.dataset_index = IndexArray::Owning(std::vector<int16_t>{});
    ds->blending_.dataset_sample_index = IndexArray::Owning(std::vector<int64_t>{});
    return ds;
  }
  std::vector<int64_t> lengths;
  for (const Part& p : ds->parts_) lengths.push_back(p.indices.size());
  // Unweighted, Megatron's builder gives BlendedDataset the datasets' sample counts as weights,
  // with num_samples or without, and it asserts each > 0: a dataset whose split is too short for
  // one sample refuses the blend. (Alone, it is no blend, and opens with no samples, as there.)
  for (size_t d = 0; d < lengths.size() && !weighted; ++d) {
    if (lengths[d] == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("blend without weights: ", blend.prefixes[d], " gives 0 samples of ",
                       options.sequence_length,
                       " tokens, so its weight (its sample count) is 0, which "
                       "Megatron's BlendedDataset refuses"));
    }
  }
  // What build_blending_indices is given: the blend's weights and the sum of ceil(S·w) samples; for
  // "A B" with num_samples, weights ∝ the datasets' sizes and min(S, Σ sizes); without it, the
  // exhaustive form (no weights, Σ sizes).
  std::vector<double> weights;
  int64_t size = 0;
  if (weighted) {
    weights = blended_by;
    for (double w : sized_by) {
      size += static_cast<int64_t>(std::ceil(static_cast<double>(*options.num_samples) * w));
    }
  } else {
    int64_t total = 0;
    for (int64_t l : lengths) total += l;
    if (!options.num_samples) {
      size = total;
    } else {
      for (int64_t l : lengths)
        weights.push_back(static_cast<double>(l) / static_cast<double>(total));
      size = std::min(*options.num_samples, total);
    }
  }
  const bool exhaustive = !weighted && !options.num_samples;
  std::string blend_key;
  if (!options.cache_dir.empty()) {
    blend_key = BlendCacheKey(weights, exhaustive ? -1 : size, lengths);
    ds->blending_from_cache_ =
        LoadCachedBlend(options.cache_dir, blend_key, size, lengths, &ds->blending_);
  }
  std::optional<internal::FileLock> building;
  if (!ds->blending_from_cache_ && !options.cache_dir.empty() &&
      internal::MakeDirectories(options.cache_dir).ok()) {
    // As for each dataset's indices; the sample index is stored last.
    PILEPREP_ASSIGN_OR_RETURN(
        ds->blending_from_cache_,
        internal::AwaitStoredOrLock(
            BlendCachePath(options.cache_dir, blend_key, "lock"),
            BlendCachePath(options.cache_dir, blend_key, "dataset_sample_index.npy"),
            BlendCachePath(options.cache_dir, blend_key, ""),
            [&] {
              return LoadCachedBlend(options.cache_dir, blend_key, size, lengths, &ds->blending_);
            },
            options.interrupted, &building));
  }
  if (!ds->blending_from_cache_) {
    BlendingIndices b =
        exhaustive ? BuildExhaustiveBlendingIndices(lengths) : BuildBlendingIndices(weights, size);
    ds->blending_.dataset_index = IndexArray::Owning(std::move(b.dataset_index));
    ds->blending_.dataset_sample_index = IndexArray::Owning(std::move(b.dataset_sample_index));
    if (!options.cache_dir.empty()) {
      PILEPREP_RETURN_IF_ERROR(StoreCachedBlend(options.cache_dir, blend_key, ds->blending_));
    }
  }
  // BlendedDataset refuses a blend that asks a dataset for more samples than it has.
  std::vector<int64_t> asked(lengths.size(), 0);
  const auto* picks = static_cast<const int16_t*>(ds->blending_.dataset_index.data());
  for (size_t i = 0; i < ds->blending_.dataset_index.size(); ++i) {
    const int16_t d = picks[i];  // read once: mapped on a hit, and checked where it is used
    if (d < 0 || static_cast<size_t>(d) >= asked.size()) {
      return ChangedSinceOpen(absl::StrCat("blend sample ", i, ": dataset ", d));
    }
    ++asked[static_cast<size_t>(d)];
  }
  for (size_t d = 0; d < lengths.size(); ++d) {
    if (asked[d] > lengths[d]) {
      return absl::FailedPreconditionError(absl::StrCat("blend asks ", blend.prefixes[d], " for ",
                                                        asked[d], " samples; it has ", lengths[d]));
    }
  }
  ds->size_ = static_cast<int64_t>(ds->blending_.dataset_index.size());
  return ds;
}

absl::Status GptDataset::LocalParts(int k, int64_t j, std::vector<SamplePart>* parts) const {
  const Part& p = parts_[static_cast<size_t>(k)];
  const GptIndices& ix = p.indices;
  if (j < 0 || j >= ix.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("sample ", j, " of ", p.view->prefix(), " (size ", ix.size(), ")"));
  }
  // Indices loaded from the cache are read where they lie in the mapped files, as the .idx's
  // pointers are: every value is checked again as it is used (a few compares a sample), so that a
  // file rewritten in place since Open gives an error, never a read outside the arrays or the .bin.
  auto changed = [&](absl::string_view what) {
    return ChangedSinceOpen(absl::StrCat(p.view->prefix(), ": sample ", j, ": ", what));
  };
  const int64_t rows = static_cast<int64_t>(ix.sample_index.size() / 2);
  const int64_t row = ix.shuffle_index[static_cast<size_t>(j)];
  if (row < 0 || row >= rows - 1) return changed(absl::StrCat("shuffle index row ", row));
  const size_t r = static_cast<size_t>(row);
  const int64_t pos0 = ix.sample_index[2 * r], off0 = ix.sample_index[2 * r + 1];
  const int64_t pos1 = ix.sample_index[2 * r + 2], off1 = ix.sample_index[2 * r + 3];
  const auto positions = static_cast<int64_t>(ix.document_index.size());
  if (pos0 < 0 || pos0 > pos1 || pos1 >= positions || off0 < 0 || off1 < -1) {
    return changed(
        absl::StrCat("sample index rows (", pos0, ", ", off0, "), (", pos1, ", ", off1, ")"));
  }
  parts->clear();
  int64_t total = 0;
  for (int64_t pos = pos0; pos <= pos1; ++pos) {
    const int64_t seq = ix.document_index[static_cast<size_t>(pos)];
    // The length as checked with the pointer (both read where they lie in the mapped .idx).
    int64_t length = 0;
    if (seq < 0 || seq >= p.view->num_sequences() ||
        p.view->CheckedSequenceData(seq, &length) == nullptr) {
      return changed(absl::StrCat("sequence ", seq));
    }
    const int64_t begin = pos == pos0 ? std::min(off0, length) : 0;
    // numpy slicing clamps to the length (off1 compared first: off1 + extra_ could overflow).
    const int64_t end = pos == pos1 && off1 < length ? std::min(off1 + extra_, length) : length;
    const int64_t count = std::max<int64_t>(end - begin, 0);
    total += count;  // at most sample_tokens_ in a valid sample
    if (total > sample_tokens_) {
      return changed(absl::StrCat("a sample of more than ", sample_tokens_, " tokens"));
    }
    parts->push_back(SamplePart{seq, begin, count});
  }
  return absl::OkStatus();
}

absl::StatusOr<int> GptDataset::GetSampleParts(int64_t i, std::vector<SamplePart>* parts) const {
  if (i < 0 || i >= size_) {
    return absl::OutOfRangeError(absl::StrCat("sample ", i, " out of range (size ", size_, ")"));
  }
  if (!blend_) {
    PILEPREP_RETURN_IF_ERROR(LocalParts(0, i, parts));
    return 0;
  }
  // Mapped when loaded from the cache: checked as used, as LocalParts checks the GPT indices.
  const int64_t k = blending_.dataset_index[static_cast<size_t>(i)];
  const int64_t j = blending_.dataset_sample_index[static_cast<size_t>(i)];
  if (k < 0 || k >= num_datasets() || j < 0 || j >= parts_[static_cast<size_t>(k)].indices.size()) {
    return ChangedSinceOpen(absl::StrCat("blend sample ", i, ": dataset ", k, " sample ", j));
  }
  PILEPREP_RETURN_IF_ERROR(LocalParts(static_cast<int>(k), j, parts));
  return static_cast<int>(k);
}

absl::Status GptDataset::GetSample(int64_t i, std::vector<int64_t>* text) const {
  // Small and per call; a thread_local buffer keeps concurrent callers independent.
  thread_local std::vector<SamplePart> parts;
  PILEPREP_ASSIGN_OR_RETURN(int k, GetSampleParts(i, &parts));
  const IndexedDatasetView& view = *parts_[static_cast<size_t>(k)].view;
  int64_t total = 0;
  for (const SamplePart& part : parts) total += part.count;
  text->resize(static_cast<size_t>(total));
  int64_t* out = text->data();
  for (const SamplePart& part : parts) {
    if (!view.CopyTokens(part.sequence, part.offset, part.count, out)) {
      return ChangedSinceOpen(absl::StrCat(view.prefix(), ": sample ", i, ": sequence ",
                                           part.sequence, " no longer inside the .bin"));
    }
    out += part.count;
  }
  return absl::OkStatus();
}

}  // namespace pileprep
