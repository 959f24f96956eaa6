#include "pileprep/loader.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loader/npy.h"
#include "pileprep/indexed_dataset.h"
#include "pileprep/indexed_dataset_view.h"
#include "pileprep/indexed_reader.h"
#include "testing/files.h"

// The largest single allocation made through operator new while a probe runs
// (LargestAllocation): what a build or a cache store holds at once, where the index arrays are the
// only allocations that grow with the sample count. Replaces the global operator new and delete
// of this test binary (malloc and free underneath, so sanitizers still see every allocation).
// `fail_above` makes every larger request fail as an exhausted heap would (std::bad_alloc), the
// same under sanitizers, whose malloc aborts on a request too large instead of returning null.
namespace loader_test_probe {
std::atomic<bool> on{false};
std::atomic<size_t> largest{0};
std::atomic<size_t> fail_above{SIZE_MAX};
}  // namespace loader_test_probe

void* operator new(std::size_t n) {
  if (n > loader_test_probe::fail_above.load(std::memory_order_relaxed)) throw std::bad_alloc();
  if (loader_test_probe::on.load(std::memory_order_relaxed)) {
    size_t seen = loader_test_probe::largest.load(std::memory_order_relaxed);
    while (n > seen && !loader_test_probe::largest.compare_exchange_weak(seen, n)) {
    }
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// Not inlined: GCC would see free() of what operator new returned (-Wmismatched-new-delete).
__attribute__((noinline)) void operator delete(void* p) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace pileprep {
namespace {

// The largest single allocation `f` makes (bytes).
size_t LargestAllocation(const std::function<void()>& f) {
  loader_test_probe::largest = 0;
  loader_test_probe::on = true;
  f();
  loader_test_probe::on = false;
  return loader_test_probe::largest;
}

// The bytes of the largest of an index's three arrays.
size_t LargestArrayBytes(const GptIndices& ix) {
  return std::max({ix.document_index.size() * ix.document_index.itemsize(),
                   ix.sample_index.size() * ix.sample_index.itemsize(),
                   ix.shuffle_index.size() * ix.shuffle_index.itemsize()});
}

using ::pileprep::testing::ReadFile;
using ::pileprep::testing::ScopedTempDir;
using ::pileprep::testing::WriteFile;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// loader.md's dataset: sizes [5, 3, 7, 4, 6], token value = 100 · sequence + position.
std::string WriteVectorDataset(const std::string& dir) {
  std::string prefix = dir + "/vec";
  auto writer = IndexedDatasetWriter::Create(prefix, {}).value();
  const int sizes[] = {5, 3, 7, 4, 6};
  for (int s = 0; s < 5; ++s) {
    std::vector<uint32_t> tokens;
    for (int p = 0; p < sizes[s]; ++p) tokens.push_back(100 * s + p);
    EXPECT_TRUE(writer->AddDocument(tokens).ok());
  }
  EXPECT_TRUE(writer->Finish().ok());
  return prefix;
}

// The file whose mapping holds address `p` in this process (/proc/self/maps), or "" when no
// file's does (the heap, an anonymous mapping).
std::string MappedFileAt(const void* p) {
  std::ifstream maps("/proc/self/maps");
  const auto address = reinterpret_cast<uintptr_t>(p);
  std::string line;
  while (std::getline(maps, line)) {
    uintptr_t begin = 0, end = 0;
    char path[4096] = "";
    if (std::sscanf(line.c_str(), "%lx-%lx %*s %*s %*s %*s %4095s", &begin, &end, path) < 2)
      continue;
    if (address >= begin && address < end) return path[0] == '/' ? path : "";
  }
  return "";
}

// Same values in the same dtype.
void ExpectSameArray(const IndexArray& a, const IndexArray& b) {
  EXPECT_EQ(a.type(), b.type());
  EXPECT_EQ(a.ToVector(), b.ToVector());
}

std::vector<int64_t> Rows(std::initializer_list<std::pair<int, int>> rows) {
  std::vector<int64_t> out;
  for (auto [a, b] : rows) {
    out.push_back(a);
    out.push_back(b);
  }
  return out;
}

const std::vector<int32_t> kSizes = {5, 3, 7, 4, 6};
const std::vector<int32_t> kAll = {0, 1, 2, 3, 4};

GptIndices Build(int64_t num_samples) {
  GptIndexOptions o;
  o.sequence_length = 4;
  o.num_samples = num_samples;
  auto ix = BuildGptIndices(kSizes, kAll, o);
  EXPECT_TRUE(ix.ok()) << ix.status();
  return *ix;
}

TEST(NumpyRandomState, ShuffleMatchesNumpyLegacy) {
  std::vector<int> a = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  NumpyRandomState rng(1234);
  rng.Shuffle(a.data(), a.size());
  EXPECT_THAT(a, ElementsAre(7, 2, 9, 1, 0, 8, 4, 5, 6, 3));
  std::vector<int32_t> b = {0, 1, 2, 3, 4, 5, 6};
  NumpyRandomState rng2(4294967295u);
  rng2.Shuffle(b.data(), b.size());
  EXPECT_THAT(b, ElementsAre(1, 5, 0, 6, 4, 2, 3));
}

TEST(NumpyRandomState, RandomIntervalMatchesNumpyMaskedRejection) {
  // numpy: RandomState(7).randint(0, max + 1, dtype=int64) uses the same masked rejection.
  NumpyRandomState small(7);
  std::vector<uint64_t> got;
  for (int i = 0; i < 4; ++i) got.push_back(small.RandomInterval(1000));
  EXPECT_THAT(got, ElementsAre(175u, 196u, 537u, 502u));
  NumpyRandomState large(7);
  got.clear();
  for (int i = 0; i < 4; ++i) got.push_back(large.RandomInterval((uint64_t{1} << 40) + 12345));
  EXPECT_THAT(got, ElementsAre(752595690692u, 108744157686u, 291964244179u, 309610205529u));
  EXPECT_EQ(large.RandomInterval(0), 0u);
}

TEST(GptIndices, VectorOneEpoch) {
  GptIndices ix = Build(5);
  EXPECT_EQ(ix.num_epochs, 1);
  EXPECT_FALSE(ix.separate_final_epoch);
  EXPECT_THAT(ix.document_index.ToVector(), ElementsAre(4, 0, 1, 2, 3));
  EXPECT_EQ(ix.sample_index.ToVector(),
            Rows({{0, 0}, {0, 4}, {1, 2}, {2, 1}, {3, 2}, {3, 6}, {4, 3}}));
  EXPECT_THAT(ix.shuffle_index.ToVector(), ElementsAre(5, 2, 3, 1, 0, 4));
  EXPECT_EQ(ix.sample_index.type(), IndexArray::Type::kInt32);  // Megatron's dtypes
  EXPECT_EQ(ix.shuffle_index.type(), IndexArray::Type::kUint32);
}

TEST(GptIndices, VectorSeparateFinalEpoch) {
  GptIndices ix = Build(9);
  EXPECT_EQ(ix.num_epochs, 2);
  EXPECT_TRUE(ix.separate_final_epoch);
  EXPECT_THAT(ix.document_index.ToVector(), ElementsAre(4, 0, 1, 2, 3, 3, 2, 1, 0, 4));
  EXPECT_EQ(ix.sample_index.ToVector(), Rows({{0, 0},
                                              {0, 4},
                                              {1, 2},
                                              {2, 1},
                                              {3, 2},
                                              {3, 6},
                                              {4, 3},
                                              {5, 3},
                                              {6, 3},
                                              {7, 0},
                                              {8, 1},
                                              {9, 0},
                                              {9, 4}}));
  EXPECT_THAT(ix.shuffle_index.ToVector(), ElementsAre(0, 4, 3, 2, 5, 1, 7, 6, 9, 8, 11, 10));
}

TEST(GptIndices, VectorTwoEpochsTogether) {
  GptIndices ix = Build(11);
  EXPECT_EQ(ix.num_epochs, 2);
  EXPECT_FALSE(ix.separate_final_epoch);
  EXPECT_THAT(ix.document_index.ToVector(), ElementsAre(2, 2, 4, 1, 0, 3, 4, 0, 1, 3));
  EXPECT_EQ(ix.sample_index.ToVector(), Rows({{0, 0},
                                              {0, 4},
                                              {1, 1},
                                              {1, 5},
                                              {2, 2},
                                              {3, 0},
                                              {4, 1},
                                              {5, 0},
                                              {6, 0},
                                              {6, 4},
                                              {7, 2},
                                              {8, 1},
                                              {9, 2}}));
  EXPECT_THAT(ix.shuffle_index.ToVector(), ElementsAre(3, 11, 2, 1, 7, 5, 4, 0, 8, 6, 10, 9));
}

TEST(GptIndices, RefusesBadOptionsAndEmptySplits) {
  GptIndexOptions o;
  o.sequence_length = 0;
  EXPECT_EQ(BuildGptIndices(kSizes, kAll, o).status().code(), absl::StatusCode::kInvalidArgument);
  // sequence_length + 1 tokens a sample must be an int64 (it overflowed, undefined behaviour).
  o.sequence_length = std::numeric_limits<int64_t>::max();
  o.drop_last_partial_sequence = false;
  EXPECT_EQ(BuildGptIndices(kSizes, kAll, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.drop_last_partial_sequence = true;
  o.sequence_length = 4;
  EXPECT_EQ(BuildGptIndices(kSizes, {}, o).status().code(), absl::StatusCode::kFailedPrecondition);
  std::vector<int32_t> bad = {7};
  EXPECT_EQ(BuildGptIndices(kSizes, bad, o).status().code(), absl::StatusCode::kInvalidArgument);
}

// A split of one token with the extra one: Megatron adds epochs until num_samples fit (3 samples of
// 4 + 1 tokens: 13 epochs, each sample five of them, overlapping by one), and without num_samples
// gives none. It was refused ("too few for any sample"); a split of no tokens still is.
TEST(GptIndices, OneTokenSplitTakesAsManyEpochsAsTheSamplesNeed) {
  const std::vector<int32_t> sizes = {1};
  const std::vector<int32_t> ids = {0};
  GptIndexOptions o;
  o.sequence_length = 4;
  o.num_samples = 3;
  auto ix = BuildGptIndices(sizes, ids, o);
  ASSERT_TRUE(ix.ok()) << ix.status();
  EXPECT_EQ(ix->num_epochs, 13);
  EXPECT_FALSE(ix->separate_final_epoch);
  EXPECT_EQ(ix->document_index.ToVector(), std::vector<int64_t>(13, 0));
  EXPECT_EQ(ix->sample_index.ToVector(), Rows({{0, 0}, {4, 0}, {8, 0}, {12, 0}}));
  EXPECT_EQ(ix->size(), 3);
  o.num_samples.reset();
  for (bool drop : {true, false}) {
    o.drop_last_partial_sequence = drop;
    ix = BuildGptIndices(sizes, ids, o);
    ASSERT_TRUE(ix.ok()) << ix.status();
    EXPECT_EQ(ix->size(), 0);
  }
  const std::vector<int32_t> empty = {0};
  const absl::Status none = BuildGptIndices(empty, ids, o).status();
  EXPECT_EQ(none.code(), absl::StatusCode::kFailedPrecondition) << none;
  EXPECT_THAT(std::string(none.message()), HasSubstr("hold no tokens"));
}

// Megatron's count of samples with the partial last one kept is a single-precision ceiling: past
// 2^24 samples it can exceed what the tokens hold (one sequence of 50,331,663 tokens, 3 a sample:
// 16,777,221 fit, the count says 16,777,222). Megatron's build asserts; the build here repeated
// the partial row, and the cache check refused it on every open (rebuilt each time).
TEST(GptIndices, RefusesAPartialSampleCountAboveWhatTheTokensHold) {
  const std::vector<int32_t> sizes = {50331663};
  const std::vector<int32_t> ids = {0};
  GptIndexOptions o;
  o.sequence_length = 3;
  o.add_extra_token = true;
  o.drop_last_partial_sequence = false;
  const absl::Status built = BuildGptIndices(sizes, ids, o).status();
  EXPECT_EQ(built.code(), absl::StatusCode::kFailedPrecondition) << built;
  EXPECT_THAT(std::string(built.message()),
              HasSubstr("rounds to 16777222, more than the 16777221 samples its tokens hold"));
}

TEST(GptDataset, SampleZeroOfVectorDataset) {
  ScopedTempDir tmp("loader_test_sample0");
  std::string prefix = WriteVectorDataset(tmp.path());
  GptDatasetOptions o;
  o.sequence_length = 4;
  o.num_samples = 5;
  auto ds = GptDataset::Open(prefix, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->size(), 6);
  std::vector<int64_t> text;
  ASSERT_TRUE((*ds)->GetSample(0, &text).ok());
  EXPECT_THAT(text, ElementsAre(206, 300, 301, 302, 303));
  // Every sample is seq + 1 tokens and consecutive rows overlap by one token.
  for (int64_t i = 0; i < (*ds)->size(); ++i) {
    ASSERT_TRUE((*ds)->GetSample(i, &text).ok());
    EXPECT_EQ(text.size(), 5u);
  }
  EXPECT_EQ((*ds)->GetSample(6, &text).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ((*ds)->GetSample(-1, &text).code(), absl::StatusCode::kOutOfRange);
  // The API takes std::string_view (Debian's Abseil has an absl::string_view of its own, which a
  // std::string_view did not convert to: this did not compile).
  const std::string_view path = prefix;
  auto same = GptDataset::Open(path, o);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ((*same)->size(), 6);
  EXPECT_TRUE(ComputeSplit(std::string_view("969,30,1"), 10).ok());
  EXPECT_TRUE(ParseBlend(std::string_view("0.5 a 0.5 b")).ok());
}

// Options that cache the vector dataset's indices in `cache_dir`: 9 samples of 4 tokens (two
// epochs, the second separate).
GptDatasetOptions CachedVectorOptions(const std::string& cache_dir) {
  GptDatasetOptions o;
  o.sequence_length = 4;
  o.num_samples = 9;
  o.cache_dir = cache_dir;
  return o;
}

// The files of `dir` whose names end in `suffix`.
std::vector<std::string> FilesEndingIn(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string path = entry.path().string();
    if (path.size() >= suffix.size() &&
        path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0) {
      out.push_back(path);
    }
  }
  return out;
}

// Sets value `i` of every cached .npy array of `dir` named ...`suffix` to `value` (a new file).
void RewriteCachedValue(const std::string& dir, const std::string& suffix, size_t i,
                        int64_t value) {
  const std::vector<std::string> paths = FilesEndingIn(dir, suffix);
  ASSERT_FALSE(paths.empty()) << suffix;
  for (const std::string& path : paths) {
    auto rows = internal::DecodeNpy(ReadFile(path), path);
    ASSERT_TRUE(rows.ok()) << rows.status();
    rows->values[i] = value;
    WriteFile(path, internal::EncodeNpy(rows->descr, rows->shape, rows->values.data(),
                                        rows->values.size()));
  }
}

// What every rank of a node opens is shared, not copied per process: indices loaded from the
// cache point into mappings of the .npy files, as Megatron's numpy.load(mmap_mode="r") arrays do.
TEST(GptDataset, CachedIndicesAreMappedFilesNotCopies) {
  ScopedTempDir tmp("loader_test_mapped");
  const std::string prefix = WriteVectorDataset(tmp.path());
  const GptDatasetOptions o = CachedVectorOptions(tmp.path() + "/cache");
  auto built = GptDataset::Open(prefix, o);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(MappedFileAt((*built)->indices().sample_index.data()), "");  // built: in memory
  auto cached = GptDataset::Open(prefix, o);
  ASSERT_TRUE(cached.ok()) << cached.status();
  ASSERT_TRUE((*cached)->loaded_from_cache());
  const GptIndices& ix = (*cached)->indices();
  EXPECT_THAT(MappedFileAt(ix.document_index.data()), ::testing::EndsWith("-document_index.npy"));
  EXPECT_THAT(MappedFileAt(ix.sample_index.data()), ::testing::EndsWith("-sample_index.npy"));
  EXPECT_THAT(MappedFileAt(ix.shuffle_index.data()), ::testing::EndsWith("-shuffle_index.npy"));
  // The samples are the built ones, and the arrays outlive the dataset that mapped them.
  std::vector<int64_t> a, b;
  for (int64_t i = 0; i < (*built)->size(); ++i) {
    ASSERT_TRUE((*built)->GetSample(i, &a).ok());
    ASSERT_TRUE((*cached)->GetSample(i, &b).ok());
    EXPECT_EQ(a, b) << "sample " << i;
  }
  const IndexArray kept = ix.shuffle_index;
  cached->reset();
  ExpectSameArray(kept, (*built)->indices().shuffle_index);
}

// Overwrites `bytes.size()` bytes of `path` at `offset` in place (same inode, as a writer that
// opens the file with "r+" or truncates and rewrites it would change a mapping's pages).
void OverwriteInPlace(const std::string& path, uint64_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.is_open()) << path;
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

// Values read where they lie in a mapping are checked where they are used: files rewritten in
// place after Open give errors, not reads outside the arrays or the .bin.
TEST(GptDataset, FilesRewrittenInPlaceAfterOpenGiveErrorsNotStrayReads) {
  ScopedTempDir tmp("loader_test_rewritten");
  const std::string prefix = WriteVectorDataset(tmp.path());
  const GptDatasetOptions o = CachedVectorOptions(tmp.path() + "/cache");
  ASSERT_TRUE(GptDataset::Open(prefix, o).ok());
  auto cached = GptDataset::Open(prefix, o);
  ASSERT_TRUE(cached.ok()) << cached.status();
  ASSERT_TRUE((*cached)->loaded_from_cache());
  std::vector<int64_t> text;
  ASSERT_TRUE((*cached)->GetSample(0, &text).ok());
  // Every shuffle row becomes 0xFFFFFFFF.
  const IndexArray& shuffle = (*cached)->indices().shuffle_index;
  for (const std::string& path : FilesEndingIn(o.cache_dir, "-shuffle_index.npy")) {
    const uint64_t size = std::filesystem::file_size(path);
    OverwriteInPlace(path, size - 4 * shuffle.size(), std::string(4 * shuffle.size(), '\xff'));
  }
  absl::Status s = (*cached)->GetSample(0, &text);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("changed since they were opened"));

  // The .idx's pointers moved past the end of the .bin.
  GptDatasetOptions plain = o;
  plain.cache_dir.clear();
  auto ds = GptDataset::Open(prefix, plain);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_TRUE((*ds)->GetSample(0, &text).ok());
  const IndexedDatasetView& view = (*ds)->dataset();
  std::string far(8, '\0');
  const int64_t beyond = static_cast<int64_t>(view.bin_bytes()) + 64;
  std::memcpy(far.data(), &beyond, 8);
  for (int64_t i = 0; i < view.num_sequences(); ++i) {
    OverwriteInPlace(prefix + ".idx", kIdxHeaderBytes + 4 * view.num_sequences() + 8 * i, far);
  }
  EXPECT_FALSE(view.SequenceInBounds(0));
  EXPECT_EQ(view.CheckedSequenceData(0), nullptr);
  s = (*ds)->GetSample(0, &text);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
}

// The lengths are read where they lie too: a length rewritten in place after Open, past the end of
// the .bin or negative, is caught where a sample or a copy uses it.
TEST(GptDataset, LengthsRewrittenInPlaceAfterOpenGiveErrorsNotStrayReads) {
  ScopedTempDir tmp("loader_test_rewritten_lengths");
  const std::string prefix = WriteVectorDataset(tmp.path());
  GptDatasetOptions o = CachedVectorOptions(tmp.path() + "/cache");
  o.cache_dir.clear();
  auto ds = GptDataset::Open(prefix, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::vector<int64_t> text;
  ASSERT_TRUE((*ds)->GetSample(0, &text).ok());
  const IndexedDatasetView& view = (*ds)->dataset();
  auto put_lengths = [&](int32_t length) {
    std::string bytes(4, '\0');
    std::memcpy(bytes.data(), &length, 4);
    for (int64_t i = 0; i < view.num_sequences(); ++i) {
      OverwriteInPlace(prefix + ".idx", kIdxHeaderBytes + 4 * i, bytes);
    }
  };
  for (int32_t length : {static_cast<int32_t>(view.bin_bytes()), -1}) {
    put_lengths(length);
    EXPECT_EQ(view.sequence_length(0), length);
    EXPECT_FALSE(view.SequenceInBounds(0)) << length;
    int64_t out[1];
    EXPECT_FALSE(view.CopyTokens(0, 0, 1, out)) << length;
    absl::Status s = (*ds)->GetSample(0, &text);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << length << ": " << s;
  }
  // Shorter than when the samples were planned: a copy past the new length is refused.
  put_lengths(1);
  EXPECT_TRUE(view.SequenceInBounds(0));
  int64_t out[2];
  EXPECT_TRUE(view.CopyTokens(0, 0, 1, out));
  EXPECT_FALSE(view.CopyTokens(0, 0, 2, out));
  EXPECT_FALSE(view.CopyTokens(0, 1, 1, out));
  EXPECT_FALSE(view.CopyTokens(0, -1, 1, out));
}

// GetSample from several threads at once (loader.h: immutable after Open, GetSample from any
// thread) gives each thread exactly what one thread alone gets.
TEST(GptDataset, ThreadsReadingSamplesAtOnceGetWhatOneThreadGets) {
  ScopedTempDir tmp("loader_test_threads");
  const std::string a = WriteVectorDataset(tmp.path());
  GptDatasetOptions o;
  o.sequence_length = 3;
  o.num_samples = 20'000;
  auto ds = GptDataset::Open("0.3 " + a + " 0.7 " + a, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const int64_t n = (*ds)->size();
  std::vector<std::vector<int64_t>> alone(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ASSERT_TRUE((*ds)->GetSample(i, &alone[i]).ok());
  constexpr int kThreads = 4;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<int64_t> text;
      for (int64_t k = 0; k < n; ++k) {
        const int64_t i = (k * (2 * t + 1) + t) % n;  // each thread its own order
        if (!(*ds)->GetSample(i, &text).ok() || text != alone[i]) ++mismatches[t];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

// Ranks that open one dataset at once build its indices once: the others wait for the first and
// map what it stored (each built them, holding gigabytes at The Pile's scale, and wrote them
// again).
TEST(GptDataset, RanksOpeningAtOnceBuildTheCachedIndicesOnce) {
  ScopedTempDir tmp("loader_test_cache_lock");
  const std::string a = WriteVectorDataset(tmp.path());
  GptDatasetOptions o;
  o.sequence_length = 1;
  o.num_samples = 1'000'000;  // tens of milliseconds to build: both ranks miss the first look
  o.cache_dir = tmp.path() + "/cache";
  const std::string blend = "0.5 " + a + " 0.5 " + a;
  constexpr int kRanks = 4;
  std::vector<absl::StatusOr<std::unique_ptr<GptDataset>>> opened(kRanks);
  std::atomic<int> ready{0};
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      ready.fetch_add(1);
      while (ready.load() < kRanks) {
      }
      opened[r] = GptDataset::Open(blend, o);
    });
  }
  for (std::thread& t : ranks) t.join();
  int built = 0, blends_built = 0;
  for (const auto& ds : opened) {
    ASSERT_TRUE(ds.ok()) << ds.status();
    built += !(*ds)->loaded_from_cache(0);
    built += !(*ds)->loaded_from_cache(1);
    blends_built += !(*ds)->blending_from_cache();
    EXPECT_EQ((*ds)->blending().dataset_index.ToVector(),
              (*opened[0])->blending().dataset_index.ToVector());
  }
  // The two parts share one key (the same dataset, weights and sample count): built once in all.
  EXPECT_EQ(built, 1);
  EXPECT_EQ(blends_built, 1);
}

// A flock belongs to the open file, which a forked child shares: a DataLoader worker forked while
// another thread held (or awaited) a cache's build lock would keep it held after the build, and the
// other ranks waiting on it blocked, until the worker exited.
TEST(GptDataset, AProcessForkedWhileTheBuildLockIsHeldDoesNotKeepItHeld) {
  ScopedTempDir tmp("loader_test_lock_fork");
  const std::string path = tmp.path() + "/build.lock";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = -1;
  {
    internal::FileLock lock(path);
    child = fork();
    ASSERT_GE(child, 0) << std::strerror(errno);
    if (child == 0) {
      // Past fork's own work in the child (where the copy is closed): said, then lives on,
      // holding whatever it still holds, until killed below.
      (void)!write(ready[1], "r", 1);
      pause();
      _exit(0);
    }
  }
  char byte;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  close(ready[0]);
  close(ready[1]);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  const int locked = flock(fd, LOCK_EX | LOCK_NB);
  const int err = errno;
  close(fd);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(locked, 0) << "the lock is still held while the child lives: " << std::strerror(err);
}

// Whether another open of `path` could take an exclusive flock now (a flock belongs to the open
// file, so this process's own FileLock excludes it as another rank's would).
bool LockIsFree(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  const bool free = flock(fd, LOCK_EX | LOCK_NB) == 0;
  close(fd);
  return free;
}

// Ranks that waited on the build lock while one rank built: each finds the files stored and checks
// them (a pass over every value: seconds at The Pile's scale) without the lock, so that they check
// at once rather than one after another while holding it (the last of 8 ranks waited ~40 s).
TEST(GptDataset, RanksThatWaitedCheckTheStoredIndicesWithoutTheBuildLock) {
  ScopedTempDir tmp("loader_test_await_stored");
  const std::string key = tmp.path() + "/key-";
  const std::string lock = key + "lock";
  const std::string stored = key + "description.txt";
  std::optional<internal::FileLock> building;
  // Nothing stored: this rank builds, holding the lock; nothing is loaded meanwhile.
  int loads = 0;
  EXPECT_FALSE(*internal::AwaitStoredOrLock(
      lock, stored, key, [&] { return ++loads, true; }, {}, &building));
  EXPECT_EQ(loads, 0);
  ASSERT_TRUE(building.has_value());
  EXPECT_FALSE(LockIsFree(lock));
  building.reset();
  // Stored meanwhile: checked with the lock released, and nothing held after.
  WriteFile(stored, "described");
  bool free_while_loading = false;
  EXPECT_TRUE(*internal::AwaitStoredOrLock(
      lock, stored, key, [&] { return free_while_loading = LockIsFree(lock), true; }, {},
      &building));
  EXPECT_TRUE(free_while_loading);
  EXPECT_FALSE(building.has_value());
  EXPECT_TRUE(LockIsFree(lock));
  // Stored but damaged (the check fails): the lock is taken again for the rebuild.
  EXPECT_FALSE(*internal::AwaitStoredOrLock(
      lock, stored, key, [] { return false; }, {}, &building));
  ASSERT_TRUE(building.has_value());
  EXPECT_FALSE(LockIsFree(lock));
}

// A rank waiting on another process's build can be interrupted (the Python module: Ctrl-C): the
// wait is given up when `interrupted` says so, with Cancelled and nothing held. It waited for the
// lock whatever happened, so a holder that hung held every waiting rank with it. Here the holder
// is a child that keeps the lock for 3 s; the waiter is interrupted at its third question.
TEST(GptDataset, AWaitForAnotherProcesssBuildCanBeInterrupted) {
  ScopedTempDir tmp("loader_test_interrupted_wait");
  const std::string key = tmp.path() + "/key-";
  const std::string lock = key + "lock";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int fd = open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) _exit(3);
    (void)!write(ready[1], "r", 1);
    sleep(3);
    _exit(0);
  }
  char byte;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  close(ready[0]);
  close(ready[1]);
  int asked = 0;
  std::optional<internal::FileLock> building;
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<bool> loaded = internal::AwaitStoredOrLock(
      lock, key + "description.txt", key, [] { return true; }, [&] { return ++asked == 3; },
      &building);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kCancelled) << loaded.status();
  EXPECT_NE(loaded.status().message().find("interrupted while waiting for another process's build"),
            std::string::npos)
      << loaded.status();
  EXPECT_EQ(asked, 3);
  EXPECT_LT(waited, 2.0) << "s waited: the wait went on until the holder let go";
  EXPECT_FALSE(building.has_value());
  kill(child, SIGKILL);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  // Not interrupted (never asked while the lock is free): taken as before.
  EXPECT_FALSE(*internal::AwaitStoredOrLock(
      lock, key + "description.txt", key, [] { return true; }, [] { return true; }, &building));
  EXPECT_TRUE(building.has_value() && building->held());
}

// A rank killed while it stored its indices (preempted, out of memory) left their temporaries, up
// to GBs each, in the cache directory for good. The next rank to build under the key removes its
// key's; another key's, and files that are not temporaries, stay.
TEST(GptDataset, TheBuilderRemovesItsKeysTemporariesLeftByAKilledRank) {
  ScopedTempDir tmp("loader_test_stale_temporaries");
  const std::string key = tmp.path() + "/k1-pileprep-gpt-";
  const std::string left = key + "sample_index.npy.tmp.4194999.123456789";
  const std::string other = tmp.path() + "/k2-pileprep-gpt-sample_index.npy.tmp.4194999.1";
  const std::string kept = key + "document_index.npy";
  for (const std::string& path : {left, other, kept}) WriteFile(path, "x");
  std::optional<internal::FileLock> building;
  EXPECT_FALSE(*internal::AwaitStoredOrLock(
      key + "lock", key + "description.txt", key, [] { return true; }, {}, &building));
  ASSERT_TRUE(building.has_value() && building->held());
  EXPECT_FALSE(std::filesystem::exists(left));
  EXPECT_TRUE(std::filesystem::exists(other));
  EXPECT_TRUE(std::filesystem::exists(kept));
}

// Another user's lock file (0644: this user may only read it) still locks: flock takes a read-only
// descriptor on a local file system. Opened read-write only, no lock was taken and both users'
// ranks built at once. As root (who opens any file) the test drops to nobody in a child.
TEST(GptDataset, AnotherUsersBuildLockFileStillLocks) {
  ScopedTempDir tmp("loader_test_foreign_lock");
  const std::string path = tmp.path() + "/build.lock";
  WriteFile(path, "");
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  ASSERT_EQ(chmod(tmp.path().c_str(), 0755), 0);
  const int probe = open(path.c_str(), O_RDWR | O_CLOEXEC);  // the owner's: to see the lock
  ASSERT_GE(probe, 0);
  const uid_t owner = geteuid();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (owner == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(3);
    if (owner != 0) _exit(4);  // not root: another user cannot be had here
    internal::FileLock lock(path);
    // Held: the owner's descriptor cannot lock it now.
    _exit(flock(probe, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK ? 0 : 5);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  close(probe);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 4) GTEST_SKIP() << "needs root, to be another user";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: could not become nobody; 5: the lock was not taken";
}

// A blend's own indices are cached and mapped too (Megatron caches BlendedDataset's), keyed by
// what builds them: other weights miss; a damaged file misses and is rebuilt.
TEST(GptDataset, BlendIndicesAreCachedAndMapped) {
  ScopedTempDir tmp("loader_test_blend_cache");
  const std::string a = WriteVectorDataset(tmp.path());
  std::filesystem::create_directory(tmp.path() + "/b");
  const std::string b = WriteVectorDataset(tmp.path() + "/b");
  GptDatasetOptions o;
  o.sequence_length = 3;
  o.num_samples = 10;
  o.cache_dir = tmp.path() + "/cache";
  const std::string blend = "0.3 " + a + " 0.7 " + b;
  auto built = GptDataset::Open(blend, o);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_FALSE((*built)->blending_from_cache());
  EXPECT_EQ(MappedFileAt((*built)->blending().dataset_index.data()), "");
  auto cached = GptDataset::Open(blend, o);
  ASSERT_TRUE(cached.ok()) << cached.status();
  ASSERT_TRUE((*cached)->blending_from_cache());
  const BlendingArrays& bl = (*cached)->blending();
  EXPECT_THAT(MappedFileAt(bl.dataset_index.data()),
              ::testing::EndsWith("-pileprep-blend-dataset_index.npy"));
  EXPECT_THAT(MappedFileAt(bl.dataset_sample_index.data()),
              ::testing::EndsWith("-pileprep-blend-dataset_sample_index.npy"));
  ExpectSameArray(bl.dataset_index, (*built)->blending().dataset_index);
  ExpectSameArray(bl.dataset_sample_index, (*built)->blending().dataset_sample_index);
  std::vector<int64_t> x, y;
  for (int64_t i = 0; i < (*built)->size(); ++i) {
    ASSERT_TRUE((*built)->GetSample(i, &x).ok());
    ASSERT_TRUE((*cached)->GetSample(i, &y).ok());
    EXPECT_EQ(x, y) << "sample " << i;
  }
  auto other = GptDataset::Open("0.5 " + a + " 0.5 " + b, o);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_FALSE((*other)->blending_from_cache());

  // A cached sample index past its dataset's samples is a miss: rebuilt, the same.
  RewriteCachedValue(o.cache_dir, "-blend-dataset_sample_index.npy", 0, 1000);
  auto rebuilt = GptDataset::Open(blend, o);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  EXPECT_FALSE((*rebuilt)->blending_from_cache());
  ExpectSameArray((*rebuilt)->blending().dataset_sample_index,
                  (*built)->blending().dataset_sample_index);

  // A sample index in range but not its dataset's next sample (a zeroed page), or a pick of the
  // other dataset, is a miss too: both builders give each pick its dataset's running count.
  const size_t last = (*built)->blending().dataset_sample_index.size() - 1;
  ASSERT_GT(static_cast<const int64_t*>((*built)->blending().dataset_sample_index.data())[last], 0);
  RewriteCachedValue(o.cache_dir, "-blend-dataset_sample_index.npy", last, 0);
  auto zeroed = GptDataset::Open(blend, o);
  ASSERT_TRUE(zeroed.ok()) << zeroed.status();
  EXPECT_FALSE((*zeroed)->blending_from_cache())
      << "a sample index of 0 at the last pick was a hit";
  ExpectSameArray((*zeroed)->blending().dataset_sample_index,
                  (*built)->blending().dataset_sample_index);
  const int16_t first = static_cast<const int16_t*>((*built)->blending().dataset_index.data())[0];
  RewriteCachedValue(o.cache_dir, "-blend-dataset_index.npy", 0, 1 - first);
  auto swapped = GptDataset::Open(blend, o);
  ASSERT_TRUE(swapped.ok()) << swapped.status();
  EXPECT_FALSE((*swapped)->blending_from_cache()) << "a pick of the other dataset was a hit";
  ExpectSameArray((*swapped)->blending().dataset_index, (*built)->blending().dataset_index);

  // Rewritten in place after a cached open (every pick's sample past its dataset): DataLoss where a
  // sample uses it, not a stray read.
  auto mapped = GptDataset::Open(blend, o);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  ASSERT_TRUE((*mapped)->blending_from_cache());
  for (const std::string& path : FilesEndingIn(o.cache_dir, "-blend-dataset_sample_index.npy")) {
    const size_t n = (*mapped)->blending().dataset_sample_index.size();
    OverwriteInPlace(path, std::filesystem::file_size(path) - 8 * n, std::string(8 * n, '\x7f'));
  }
  std::vector<int64_t> text;
  const absl::Status s = (*mapped)->GetSample(0, &text);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;

  // The exhaustive form ("A B" without num_samples) is cached too.
  GptDatasetOptions ex = o;
  ex.num_samples.reset();
  auto e1 = GptDataset::Open(a + " " + b, ex);
  ASSERT_TRUE(e1.ok()) << e1.status();
  auto e2 = GptDataset::Open(a + " " + b, ex);
  ASSERT_TRUE(e2.ok()) << e2.status();
  EXPECT_FALSE((*e1)->blending_from_cache());
  EXPECT_TRUE((*e2)->blending_from_cache());
  ExpectSameArray((*e2)->blending().dataset_index, (*e1)->blending().dataset_index);
  ExpectSameArray((*e2)->blending().dataset_sample_index, (*e1)->blending().dataset_sample_index);
}

TEST(GptDataset, CacheRoundTripsAndSurvivesCorruption) {
  ScopedTempDir tmp("loader_test_cache");
  const std::string& dir = tmp.path();
  std::string prefix = WriteVectorDataset(dir);
  GptDatasetOptions o = CachedVectorOptions(dir + "/cache/nested");
  auto first = GptDataset::Open(prefix, o);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE((*first)->loaded_from_cache());
  auto second = GptDataset::Open(prefix, o);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE((*second)->loaded_from_cache());
  ExpectSameArray((*second)->indices().document_index, (*first)->indices().document_index);
  ExpectSameArray((*second)->indices().sample_index, (*first)->indices().sample_index);
  ExpectSameArray((*second)->indices().shuffle_index, (*first)->indices().shuffle_index);
  EXPECT_TRUE((*second)->indices().separate_final_epoch);

  // Another seed is another key.
  o.seed = 99;
  auto other = GptDataset::Open(prefix, o);
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE((*other)->loaded_from_cache());

  // A truncated cache file is a miss: rebuilt, same contents.
  o.seed = 1234;
  std::string cmd =
      "for f in " + o.cache_dir + "/*-shuffle_index.npy; do truncate -s 100 \"$f\"; done";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto third = GptDataset::Open(prefix, o);
  ASSERT_TRUE(third.ok());
  EXPECT_FALSE((*third)->loaded_from_cache());
  ExpectSameArray((*third)->indices().shuffle_index, (*first)->indices().shuffle_index);

  // A sample index whose first row has offset -1 (only the last row may) is a miss too: a sample
  // starting there would read before its sequence.
  RewriteCachedValue(o.cache_dir, "-sample_index.npy", 1, -1);
  auto fourth = GptDataset::Open(prefix, o);
  ASSERT_TRUE(fourth.ok());
  EXPECT_FALSE((*fourth)->loaded_from_cache());
  ExpectSameArray((*fourth)->indices().sample_index, (*first)->indices().sample_index);
}

// Rewrites every cached .npy array of `dir` named ...`suffix` with `edit` (a new file, the same
// dtype).
void RewriteCachedArray(const std::string& dir, const std::string& suffix,
                        const std::function<void(internal::NpyArray*)>& edit) {
  const std::vector<std::string> paths = FilesEndingIn(dir, suffix);
  ASSERT_FALSE(paths.empty()) << suffix;
  for (const std::string& path : paths) {
    auto a = internal::DecodeNpy(ReadFile(path), path);
    ASSERT_TRUE(a.ok()) << a.status();
    edit(&*a);
    WriteFile(path, internal::EncodeNpy(a->descr, a->shape, a->values.data(), a->values.size()));
  }
}

// Opens the cached vector dataset again: a miss, rebuilt to the very indices of `first`, and
// rewritten, so that the next open is a hit.
void ExpectRebuiltAsBefore(const std::string& prefix, const GptDatasetOptions& o,
                           const GptDataset& first) {
  auto rebuilt = GptDataset::Open(prefix, o);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  EXPECT_FALSE((*rebuilt)->loaded_from_cache());
  EXPECT_EQ((*rebuilt)->size(), first.size());
  ExpectSameArray((*rebuilt)->indices().sample_index, first.indices().sample_index);
  ExpectSameArray((*rebuilt)->indices().shuffle_index, first.indices().shuffle_index);
  auto again = GptDataset::Open(prefix, o);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE((*again)->loaded_from_cache());
  EXPECT_EQ((*again)->size(), first.size());
}

// The sample count is the options' (2 epochs of 25 tokens: (50 - 1) / 4 = 12), not the files': a
// sample and shuffle index that agree on 11 samples were taken, and the dataset was one short.
TEST(GptDataset, CachedIndexWithWrongSampleCountIsRebuilt) {
  ScopedTempDir tmp("loader_test_cache_count");
  const std::string prefix = WriteVectorDataset(tmp.path());
  const GptDatasetOptions o = CachedVectorOptions(tmp.path() + "/cache");
  auto first = GptDataset::Open(prefix, o);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ((*first)->size(), 12);
  // The last sample dropped from both, consistently: rows 0..11, and a shuffle without 11 (in the
  // final epoch's half, which stays a permutation of its range).
  RewriteCachedArray(o.cache_dir, "-sample_index.npy", [](internal::NpyArray* a) {
    a->values.resize(a->values.size() - 2);
    a->shape = {12, 2};
  });
  RewriteCachedArray(o.cache_dir, "-shuffle_index.npy", [](internal::NpyArray* a) {
    a->values.erase(std::find(a->values.begin(), a->values.end(), 11));
    a->shape = {11};
  });
  ExpectRebuiltAsBefore(prefix, o, **first);
}

// Megatron's shuffle index is a permutation: a repeated row, in range, gave one sample twice and
// never gave another.
TEST(GptDataset, CachedShuffleWithRepeatsIsRebuilt) {
  ScopedTempDir tmp("loader_test_cache_repeats");
  const std::string prefix = WriteVectorDataset(tmp.path());
  const GptDatasetOptions o = CachedVectorOptions(tmp.path() + "/cache");
  auto first = GptDataset::Open(prefix, o);
  ASSERT_TRUE(first.ok()) << first.status();
  // Values 0 and 1 both lie in the first epochs' half (rows below 6), as the copy does.
  const std::vector<int64_t> shuffle = (*first)->indices().shuffle_index.ToVector();
  ASSERT_LT(shuffle[0], 6);
  RewriteCachedValue(o.cache_dir, "-shuffle_index.npy", 1, shuffle[0]);
  ExpectRebuiltAsBefore(prefix, o, **first);
}

// With a separate final epoch, Megatron shuffles the first epochs' samples (rows below
// ((2 - 1) · 25 - 1) / 4 = 6) and the final epoch's apart: a permutation that mixes them is not
// its.
TEST(GptDataset, CachedShuffleCrossingTheFinalEpochIsRebuilt) {
  ScopedTempDir tmp("loader_test_cache_halves");
  const std::string prefix = WriteVectorDataset(tmp.path());
  const GptDatasetOptions o = CachedVectorOptions(tmp.path() + "/cache");
  auto first = GptDataset::Open(prefix, o);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->indices().separate_final_epoch);
  RewriteCachedArray(o.cache_dir, "-shuffle_index.npy",
                     [](internal::NpyArray* a) { std::swap(a->values.front(), a->values.back()); });
  ExpectRebuiltAsBefore(prefix, o, **first);
}

// Megatron's sample index runs forward from (0, 0): rows out of order (each in range) were taken,
// and every read of their samples then failed as "the files changed since they were opened", on
// every open, the cache never rebuilt.
TEST(GptDataset, CachedSampleRowsOutOfOrderAreRebuilt) {
  ScopedTempDir tmp("loader_test_cache_rows");
  const std::string prefix = WriteVectorDataset(tmp.path());
  const GptDatasetOptions o = CachedVectorOptions(tmp.path() + "/cache");
  auto first = GptDataset::Open(prefix, o);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::vector<int64_t> rows = (*first)->indices().sample_index.ToVector();
  ASSERT_NE(rows[4], rows[6]);  // rows 2 and 3 lie on different documents
  RewriteCachedArray(o.cache_dir, "-sample_index.npy", [](internal::NpyArray* a) {
    std::swap(a->values[4], a->values[6]);
    std::swap(a->values[5], a->values[7]);
  });
  ExpectRebuiltAsBefore(prefix, o, **first);
}

// Two rows on one document are a sample apart (sequence_length tokens): one moved by a token
// within its document, still in order, was taken, and a sample read one token short or long.
TEST(GptDataset, CachedSampleRowOffByATokenIsRebuilt) {
  ScopedTempDir tmp("loader_test_cache_offset");
  const std::string prefix = WriteVectorDataset(tmp.path());
  const GptDatasetOptions o = CachedVectorOptions(tmp.path() + "/cache");
  auto first = GptDataset::Open(prefix, o);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::vector<int64_t> rows = (*first)->indices().sample_index.ToVector();
  size_t at = 0;  // a row (not the last) on the same document as the row before it
  for (size_t r = 1; r + 1 < rows.size() / 2; ++r) {
    if (rows[2 * r] == rows[2 * r - 2]) at = r;
  }
  ASSERT_GT(at, 0u);
  RewriteCachedValue(o.cache_dir, "-sample_index.npy", 2 * at + 1, rows[2 * at + 1] - 1);
  ExpectRebuiltAsBefore(prefix, o, **first);
}

// A train split's cache holding a sequence of another split (in range of the dataset's sequences)
// was taken: held-out text read as training samples without a word.
TEST(GptDataset, CachedDocumentIndexWithAnotherSplitsSequenceIsRebuilt) {
  ScopedTempDir tmp("loader_test_cache_split");
  const std::string prefix = WriteVectorDataset(tmp.path());
  GptDatasetOptions o = CachedVectorOptions(tmp.path() + "/cache");
  o.split = "3,2,0";  // train: sequences 0-2 of 5
  o.split_index = 0;
  auto first = GptDataset::Open(prefix, o);
  ASSERT_TRUE(first.ok()) << first.status();
  for (int64_t d : (*first)->indices().document_index.ToVector()) ASSERT_LT(d, 3);
  RewriteCachedValue(o.cache_dir, "-document_index.npy", 0, 4);
  ExpectRebuiltAsBefore(prefix, o, **first);
}

// Each of the split's sequences once per epoch: one in place of another (all in the split) gave
// the one twice and the other never.
TEST(GptDataset, CachedDocumentIndexWithARepeatedSequenceIsRebuilt) {
  ScopedTempDir tmp("loader_test_cache_docrepeat");
  const std::string prefix = WriteVectorDataset(tmp.path());
  const GptDatasetOptions o = CachedVectorOptions(tmp.path() + "/cache");
  auto first = GptDataset::Open(prefix, o);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::vector<int64_t> docs = (*first)->indices().document_index.ToVector();
  ASSERT_NE(docs[0], docs[1]);
  RewriteCachedValue(o.cache_dir, "-document_index.npy", 0, docs[1]);
  ExpectRebuiltAsBefore(prefix, o, **first);
}

// Megatron keeps a last, partial sample only for the validation split, and only with
// drop_last_partial_validation_sequence = False; every other split drops it whatever the option.
TEST(GptDataset, OnlyTheValidationSplitKeepsAPartialLastSample) {
  ScopedTempDir tmp("loader_test_partial");
  const std::string prefix = WriteVectorDataset(tmp.path());
  // "2,1,2" of sizes [5, 3, 7, 4, 6]: train = sequences 0-1 (8 tokens), valid = sequence 2 (7).
  // With 4 tokens a sample and the extra token: (8 - 1) / 4 and (7 - 1) / 4 both leave a part.
  auto open = [&](int split_index, bool drop) {
    GptDatasetOptions o;
    o.sequence_length = 4;
    o.split = "2,1,2";
    o.split_index = split_index;
    o.drop_last_partial_validation_sequence = drop;
    o.cache_dir = tmp.path() + "/cache";
    auto ds = GptDataset::Open(prefix, o);
    EXPECT_TRUE(ds.ok()) << ds.status();
    return ds.ok() ? *std::move(ds) : nullptr;
  };
  auto train_dropped = open(0, true);
  auto train_kept = open(0, false);
  ASSERT_TRUE(train_dropped && train_kept);
  EXPECT_EQ(train_dropped->size(), 1);
  EXPECT_EQ(train_kept->size(), 1);              // the option does not reach the train split...
  EXPECT_TRUE(train_kept->loaded_from_cache());  // ...nor its cache key
  auto valid_dropped = open(1, true);
  auto valid_kept = open(1, false);
  ASSERT_TRUE(valid_dropped && valid_kept);
  EXPECT_EQ(valid_dropped->size(), 1);
  EXPECT_EQ(valid_kept->size(), 2);  // ceil(6 / 4)
  EXPECT_FALSE(valid_kept->loaded_from_cache());
  size_t shortest = SIZE_MAX, tokens = 0;
  for (int64_t i = 0; i < valid_kept->size(); ++i) {
    std::vector<int64_t> text;
    ASSERT_TRUE(valid_kept->GetSample(i, &text).ok());
    shortest = std::min(shortest, text.size());
    tokens += text.size();
  }
  EXPECT_EQ(shortest, 3u);  // sequence 2's tokens 4..6: the short last sample
  EXPECT_EQ(tokens, 5u + 3u);
}

// Writes a dataset whose sequences have `lengths` (token value = 100 · sequence + position), one
// document each, by hand: pileprep's writer makes no sequence of an empty document, Megatron's
// add_document(tokens, [0]) makes an empty one.
std::string WriteLengthsDataset(const std::string& dir, const std::vector<int32_t>& lengths) {
  const std::string prefix = dir + "/lengths";
  std::string idx(kIdxMagic, sizeof(kIdxMagic)), bin;
  auto put = [&](const auto& v) { idx.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(uint64_t{1});
  put(static_cast<uint8_t>(TokenDType::kUint16));
  put(static_cast<uint64_t>(lengths.size()));
  put(static_cast<uint64_t>(lengths.size() + 1));
  for (int32_t len : lengths) put(len);
  int64_t pointer = 0;
  for (size_t s = 0; s < lengths.size(); ++s) {
    put(pointer);
    for (int32_t p = 0; p < lengths[s]; ++p) {
      const uint16_t token = static_cast<uint16_t>(100 * s + p);
      bin.append(reinterpret_cast<const char*>(&token), 2);
    }
    pointer += 2 * lengths[s];
  }
  for (int64_t d = 0; d <= static_cast<int64_t>(lengths.size()); ++d) put(d);
  WriteFile(prefix + ".idx", idx);
  WriteFile(prefix + ".bin", bin);
  return prefix;
}

// A kept partial last sample that runs out on an empty sequence, last in the document index, ends
// at offset 0 - 1 = -1: helpers.py's build_sample_idx asserts sample_idx.min() >= 0 on its int32
// sample index, so Megatron refuses this split. It was built, with the -1 in it.
TEST(GptDataset, PartialSampleEndingOnAnEmptySequenceIsRefusedAsMegatronAsserts) {
  // Lengths [5, 0], 3 tokens a sample, every sequence in the validation split, the partial sample
  // kept: rows (0, 0), (0, 3) and then (1, -1).
  GptIndexOptions io;
  io.sequence_length = 3;
  io.drop_last_partial_sequence = false;
  const std::vector<int32_t> sizes = {5, 0}, ids = {0, 1};
  absl::Status built = BuildGptIndices(sizes, ids, io).status();
  EXPECT_EQ(built.code(), absl::StatusCode::kFailedPrecondition) << built;
  EXPECT_THAT(std::string(built.message()), HasSubstr("sample_idx.min() >= 0"));
  io.drop_last_partial_sequence = true;  // dropped: rows (0, 0), (0, 3), nothing ends at -1
  auto dropped = BuildGptIndices(sizes, ids, io);
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_EQ(dropped->sample_index.ToVector(), Rows({{0, 0}, {0, 3}}));

  ScopedTempDir tmp("loader_test_empty_last");
  const std::string prefix = WriteLengthsDataset(tmp.path(), {5, 0});
  GptDatasetOptions o;
  o.sequence_length = 3;
  o.split = "0,1,0";
  o.split_index = 1;
  o.drop_last_partial_validation_sequence = false;
  o.cache_dir = tmp.path() + "/cache";
  absl::Status s = GptDataset::Open(prefix, o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(prefix + ": the kept partial last sample"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("sequence 1, which is empty"));
  EXPECT_TRUE(FilesEndingIn(o.cache_dir, "-sample_index.npy").empty());  // nothing stored
  o.drop_last_partial_validation_sequence = true;
  auto ds = GptDataset::Open(prefix, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::vector<int64_t> text;
  ASSERT_TRUE((*ds)->GetSample(0, &text).ok());
  EXPECT_THAT(text, ElementsAre(0, 1, 2, 3));
}

// The cache takes what a build gives: an int32 sample index with an offset of -1, even in the last
// row, is no index Megatron builds (it asserts), so it is a miss and rebuilt. It was loaded.
TEST(GptDataset, CachedInt32SampleIndexEndingAtMinusOneIsRebuilt) {
  ScopedTempDir tmp("loader_test_cache_minus_one");
  const std::string prefix = WriteVectorDataset(tmp.path());
  const GptDatasetOptions o = CachedVectorOptions(tmp.path() + "/cache");
  auto first = GptDataset::Open(prefix, o);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ((*first)->indices().sample_index.type(), IndexArray::Type::kInt32);
  const size_t last_offset = (*first)->indices().sample_index.size() - 1;
  RewriteCachedValue(o.cache_dir, "-sample_index.npy", last_offset, -1);
  ExpectRebuiltAsBefore(prefix, o, **first);
}

// The indices are built in their final dtypes, as Megatron's are: the sample index (int32 here)
// and the shuffle index (uint32) were built as int64 and narrowed, the building rank holding the
// wide copy and the narrow one at once.
TEST(GptIndices, BuildingAllocatesNoArrayLargerThanTheIndicesItGives) {
  GptIndexOptions o;
  o.sequence_length = 1;
  o.num_samples = 200'000;
  std::optional<GptIndices> ix;
  const size_t largest = LargestAllocation([&] {
    auto built = BuildGptIndices(kSizes, kAll, o);
    ASSERT_TRUE(built.ok()) << built.status();
    ix = *std::move(built);
  });
  ASSERT_TRUE(ix.has_value());
  ASSERT_EQ(ix->sample_index.type(), IndexArray::Type::kInt32);
  ASSERT_EQ(ix->shuffle_index.type(), IndexArray::Type::kUint32);
  EXPECT_EQ(LargestArrayBytes(*ix), ix->sample_index.size() * 4);  // 1.6 MB
  EXPECT_LE(largest, LargestArrayBytes(*ix));
}

// The cache's .npy files are written from the arrays where they lie, behind their headers: the
// whole file was first copied into a string, holding each array twice.
TEST(GptDataset, CachingIndicesWritesTheArraysWithoutCopyingThem) {
  ScopedTempDir tmp("loader_test_cache_streamed");
  const std::string prefix = WriteVectorDataset(tmp.path());
  GptDatasetOptions o;
  o.sequence_length = 1;
  o.num_samples = 200'000;
  o.cache_dir = tmp.path() + "/cache";
  absl::StatusOr<std::unique_ptr<GptDataset>> ds;
  const size_t largest = LargestAllocation([&] { ds = GptDataset::Open(prefix, o); });
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_FALSE((*ds)->loaded_from_cache());
  EXPECT_LE(largest, LargestArrayBytes((*ds)->indices()));
  // What was stored is what numpy.save writes of these arrays (the header, then the items).
  const GptIndices& ix = (*ds)->indices();
  const std::vector<std::string> files = FilesEndingIn(o.cache_dir, "-sample_index.npy");
  ASSERT_EQ(files.size(), 1u);
  const std::vector<int64_t> rows = ix.sample_index.ToVector();
  EXPECT_EQ(ReadFile(files[0]),
            internal::EncodeNpy("<i4", {static_cast<int64_t>(rows.size() / 2), 2}, rows.data(),
                                rows.size()));
  auto cached = GptDataset::Open(prefix, o);
  ASSERT_TRUE(cached.ok()) << cached.status();
  EXPECT_TRUE((*cached)->loaded_from_cache());
  ExpectSameArray((*cached)->indices().shuffle_index, ix.shuffle_index);
}

// Numbers that would overflow: more samples than 2^63 tokens, or than 2^31 epochs of the split, and
// a blend of more datasets than Megatron's int16 dataset index holds.
// A kept partial sample's count is Megatron's single-precision ceiling: with 2^27 samples of a
// 4-token split it rounds to 134,217,728, below the 134,217,731 samples of the epochs before the
// final one, which the shuffle index shuffles first. That wrote past the shuffle index (SIGSEGV
// after 18 s and 1.7 GB); now refused before anything is built.
TEST(GptIndices, RefusesAKeptPartialSampleWhoseRoundedCountFallsShort) {
  const std::vector<int32_t> sizes = {4}, ids = {0};
  GptIndexOptions o;
  o.sequence_length = 1;
  o.drop_last_partial_sequence = false;
  o.num_samples = 134217732;
  absl::Status s = BuildGptIndices(sizes, ids, o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("sample count rounds to 134217728, fewer than the 134217731 samples"));
  o.drop_last_partial_sequence = true;  // an exact count: nothing to refuse (built small below)
  o.num_samples = 1000;
  EXPECT_TRUE(BuildGptIndices(sizes, ids, o).ok());
}

TEST(GptIndices, RefusesCountsThatWouldOverflow) {
  GptIndexOptions o;
  o.sequence_length = 4096;
  o.num_samples = int64_t{1} << 62;
  EXPECT_EQ(BuildGptIndices(kSizes, kAll, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.sequence_length = 1;
  o.num_samples = int64_t{1} << 40;  // 25 tokens per epoch: 2^40 / 25 epochs
  EXPECT_EQ(BuildGptIndices(kSizes, kAll, o).status().code(), absl::StatusCode::kInvalidArgument);
  Blend many;
  many.prefixes.assign(32767, "x");
  GptDatasetOptions d;
  d.sequence_length = 4;
  auto ds = GptDataset::Open(many, d);
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument) << ds.status();
}

// Indices too large for memory (a typo of num_samples in a training config) are a status the job
// can report, not std::bad_alloc thrown through the API (std::terminate in a training job).
TEST(GptIndices, IndicesThatDoNotFitInMemoryAreResourceExhaustedNotThrown) {
  struct Limit {  // no single allocation above 64 MB while it lives
    Limit() { loader_test_probe::fail_above = size_t{64} << 20; }
    ~Limit() { loader_test_probe::fail_above = SIZE_MAX; }
  };
  GptIndexOptions o;
  o.sequence_length = 1;
  o.num_samples = int64_t{1} << 27;  // 2^27 samples of 1 token: a 1 GB sample index, or more
  {
    Limit limit;
    auto ix = BuildGptIndices(kSizes, kAll, o);
    EXPECT_EQ(ix.status().code(), absl::StatusCode::kResourceExhausted) << ix.status();
    EXPECT_THAT(ix.status().message(), HasSubstr("134217728 samples of 1 tokens"));
  }
  ScopedTempDir tmp("loader_test_no_memory");
  const std::string prefix = WriteVectorDataset(tmp.path());
  GptDatasetOptions d;
  d.sequence_length = 1;
  d.num_samples = int64_t{1} << 27;
  {
    Limit limit;
    auto ds = GptDataset::Open(prefix, d);
    EXPECT_EQ(ds.status().code(), absl::StatusCode::kResourceExhausted) << ds.status();
  }
  d.num_samples = 1000;  // the same options with room: built
  auto ds = GptDataset::Open(prefix, d);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_GE((*ds)->size(), 1000);  // whole epochs, as Megatron
}

// Values no dataset has are refused rather than computed with: a negative sequence length, a
// sequence_length whose sample (+ the extra token) overflows, a split of a negative or
// float64-inexact sequence count.
TEST(GptIndices, RefusesNegativeSizesAndOverflowingLengths) {
  const std::vector<int32_t> sizes = {5, -3, 7};
  const std::vector<int32_t> ids = {0, 1, 2};
  GptIndexOptions o;
  o.sequence_length = 2;
  auto ix = BuildGptIndices(sizes, ids, o);
  EXPECT_EQ(ix.status().code(), absl::StatusCode::kInvalidArgument) << ix.status();
  EXPECT_THAT(ix.status().message(), HasSubstr("sequence 1 has length -3"));

  ScopedTempDir tmp("loader_test_overflow");
  const std::string prefix = WriteVectorDataset(tmp.path());
  GptDatasetOptions d;
  d.sequence_length = std::numeric_limits<int64_t>::max();
  auto ds = GptDataset::Open(prefix, d);
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument) << ds.status();
  d.sequence_length = std::numeric_limits<int64_t>::max() - 1;  // fits: one epoch, no sample
  ds = GptDataset::Open(prefix, d);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->size(), 0);

  EXPECT_EQ(ComputeSplit("1,1", -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ComputeSplit("1,1", std::numeric_limits<int64_t>::max()).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto big = ComputeSplit("1,1", int64_t{1} << 53);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ((*big)[1]->end, int64_t{1} << 53);
}

// A hostile .npy shape whose element count overflows is refused, not taken for a small file.
TEST(Npy, ShapeThatOverflowsIsRefused) {
  const int32_t two[2] = {1, 2};
  // A well-formed header for (2^62 + 1) x 2 int32 values, and 8 bytes of data: 4 * (2^63 + 2)
  // wraps to 8 in 64 bits, so an unchecked product took it for a file of the right size.
  const std::string bytes = internal::EncodeNpy("<i4", {4611686018427387905, 2}, two, 2);
  EXPECT_FALSE(internal::DecodeNpy(bytes, "hostile.npy").ok());
}

TEST(Blending, VectorWeighted) {
  std::vector<double> w = {0.3, 0.7};
  BlendingIndices b = BuildBlendingIndices(w, 10);
  EXPECT_THAT(b.dataset_index, ElementsAre(1, 0, 1, 1, 0, 1, 1, 0, 1, 1));
  EXPECT_THAT(b.dataset_sample_index, ElementsAre(0, 0, 1, 2, 1, 3, 4, 2, 5, 6));
}

TEST(Blending, VectorExhaustive) {
  std::vector<int64_t> sizes = {2, 3};
  BlendingIndices b = BuildExhaustiveBlendingIndices(sizes);
  EXPECT_THAT(b.dataset_index, ElementsAre(1, 0, 1, 0, 1));
  EXPECT_THAT(b.dataset_sample_index, ElementsAre(0, 0, 1, 1, 2));
}

TEST(Blending, ParsesDataPaths) {
  auto w = ParseBlend("0.3 A 0.7 B");
  ASSERT_TRUE(w.ok());
  EXPECT_THAT(w->prefixes, ElementsAre("A", "B"));
  EXPECT_THAT(w->weights, ElementsAre(0.3, 0.7));
  auto u = ParseBlend("A B");
  ASSERT_TRUE(u.ok());
  EXPECT_THAT(u->prefixes, ElementsAre("A", "B"));
  EXPECT_TRUE(u->weights.empty());
  // Weights as given (Open normalizes them where Megatron does), read as Python's float() reads.
  auto n = ParseBlend("1 A 3 B");
  ASSERT_TRUE(n.ok());
  EXPECT_THAT(n->weights, ElementsAre(1, 3));
  auto py = ParseBlend(" +0.5 A 1_0 B 2e1 C");
  ASSERT_TRUE(py.ok());
  EXPECT_THAT(py->weights, ElementsAre(0.5, 10, 20));
  EXPECT_TRUE(ParseBlend("1 A 1__0 B")->weights.empty());  // not a float: four prefixes
  EXPECT_TRUE(ParseBlend("1 A _1 B")->weights.empty());
  // float() refuses a second sign and a NaN payload (from_chars takes both): prefixes, not weights,
  // and beside a number, the mix Megatron's get_blend_from_list asserts against.
  for (const char* prefixes : {"+-1 A +-2 B", "+-inf A nan(1) B", "+-nan A +-0 B"}) {
    auto p = ParseBlend(prefixes);
    ASSERT_TRUE(p.ok()) << prefixes << ": " << p.status();
    EXPECT_TRUE(p->weights.empty()) << prefixes;
    EXPECT_EQ(p->prefixes.size(), 4u) << prefixes;
  }
  EXPECT_THAT(std::string(ParseBlend("+-1 A 1 B").status().message()),
              HasSubstr("is a number after item 0 (\"+-1\"), which is not"));
  for (const char* bad : {"nan A 1 B", "inf A 1 B", "-1 A 2 B", "0 A 0 B"}) {
    EXPECT_EQ(ParseBlend(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(std::string(ParseBlend("nan A 1 B").status().message()),
              HasSubstr("\"nan\" of A is not a finite number > 0"));
  EXPECT_FALSE(ParseBlend("").ok());
}

// Megatron's get_blend_from_list strips every prefix of a --data-path list (str.strip(): Unicode
// whitespace too). A list item such as "/x/cb\n" (read from a file, one per line) was taken as it
// was, and opening failed on "/x/cb\n.idx".
TEST(Blending, ListPrefixesAreStrippedAsMegatronStripsThem) {
  auto w = ParseBlend(std::vector<std::string>{"1", "/x/cb\n", " 2\t", "\t/x/cb \r"});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_THAT(w->prefixes, ElementsAre("/x/cb", "/x/cb"));
  EXPECT_THAT(w->weights, ElementsAre(1, 2));
  // Unweighted (odd count, or an even item that is not a number): every item stripped.
  auto u = ParseBlend(std::vector<std::string>{"\v/a\f", "\x1c/b\x1f", " /c "});
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_THAT(u->prefixes, ElementsAre("/a", "/b", "/c"));
  // U+3000, U+00A0, U+2009, U+0085 are str.isspace(); U+200B (zero width space) is not.
  auto uni = ParseBlend(std::vector<std::string>{"\xe3\x80\x80/d\xc2\xa0", "\xe2\x80\x89/e\xc2\x85",
                                                 "/f\xe2\x80\x8b"});
  ASSERT_TRUE(uni.ok()) << uni.status();
  EXPECT_THAT(uni->prefixes, ElementsAre("/d", "/e", "/f\xe2\x80\x8b"));
  // Python's float() strips the same whitespace from a weight.
  auto weight =
      ParseBlend(std::vector<std::string>{"\xe3\x80\x80"
                                          "3\n",
                                          "/g"});
  ASSERT_TRUE(weight.ok()) << weight.status();
  EXPECT_THAT(weight->weights, ElementsAre(3));
  // A dataset named with a trailing newline opens, and gives the samples it gives unnamed so.
  ScopedTempDir tmp("loader_test_strip");
  const std::string a = WriteVectorDataset(tmp.path());
  GptDatasetOptions o;
  o.sequence_length = 4;
  o.num_samples = 10;
  auto listed = ParseBlend(std::vector<std::string>{"1", a + "\n", "1", a});
  ASSERT_TRUE(listed.ok()) << listed.status();
  auto ds = GptDataset::Open(*listed, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto plain = GptDataset::Open("1 " + a + " 1 " + a, o);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_EQ((*ds)->size(), (*plain)->size());
  std::vector<int64_t> x, y;
  for (int64_t i = 0; i < (*ds)->size(); ++i) {
    ASSERT_TRUE((*ds)->GetSample(i, &x).ok());
    ASSERT_TRUE((*plain)->GetSample(i, &y).ok());
    EXPECT_EQ(x, y) << "sample " << i;
  }
}

// get_blend_from_list checks `assert all(is_none)` on the iterator that `any(is_none)` consumed up
// to the first even item that is not a number: a number after it is refused, a number before it
// is not (the list is then all prefixes).
TEST(Blending, NumberAfterAnItemThatIsNotOneIsRefusedAsMegatronAsserts) {
  for (const char* mixed : {"A B 1 C", "1__0 A 1 B", "_1 A 1 B", "1 A B C 2 D"}) {
    absl::Status s = ParseBlend(mixed).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << mixed;
    EXPECT_THAT(std::string(s.message()), HasSubstr("get_blend_from_list")) << mixed;
  }
  EXPECT_THAT(std::string(ParseBlend("A B 1 C").status().message()),
              HasSubstr("item 2 (\"1\") is a number after item 0 (\"A\")"));
  auto four = ParseBlend("1 A B C");
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_THAT(four->prefixes, ElementsAre("1", "A", "B", "C"));
  EXPECT_TRUE(four->weights.empty());
}

// Megatron's mid_level_dataset_surplus, GptDatasetOptions::blend_surplus, sizes each dataset of a
// weighted blend; a value that is not a finite number >= 0 is refused rather than cast from
// NaN or infinity to a sample count.
TEST(GptDataset, BlendSurplusSizesTheDatasetsAndMustBeFiniteAndNonNegative) {
  ScopedTempDir tmp("loader_test_surplus");
  const std::string a = WriteVectorDataset(tmp.path());
  GptDatasetOptions o;
  o.sequence_length = 4;
  o.num_samples = 10;
  const std::string blend = "0.3 " + a + " 0.7 " + a;
  o.blend_surplus = 1.0;
  auto ds = GptDataset::Open(blend, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  // Dataset 1 asked for ceil(7 · 2) = 14 samples: 3 epochs of 25 tokens, (75 - 1) / 4 = 18
  // (with the default 0.005: ceil(7 · 1.005) = 8, 2 epochs, 12).
  EXPECT_EQ((*ds)->indices(1).size(), 18);
  EXPECT_EQ((*ds)->size(), 10);
  o.blend_surplus = 0;
  ds = GptDataset::Open(blend, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->indices(1).size(), 12);  // 7 samples: 2 epochs
  for (double bad : {-0.001, -1.0, std::nan(""), HUGE_VAL, -HUGE_VAL}) {
    o.blend_surplus = bad;
    absl::Status s = GptDataset::Open(blend, o).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("mid_level_dataset_surplus")) << bad;
  }
  o.blend_surplus = 1e300;  // finite, but no int64 sample count
  absl::Status s = GptDataset::Open(blend, o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("more than int64 holds"));
}

// Megatron's BlendedDataset asserts every weight > 0. A weight of 0 was taken: "0 A 1 B" built A
// for ceil(0 · 1.005) = 0 samples, which is a whole epoch, and build_blending_indices, picking the
// first dataset at ties, could take samples from it.
TEST(Blending, BlendRefusesZeroWeight) {
  for (const std::string w : {"0", "0.0", "-0", "+0", "0e5"}) {
    absl::Status s = ParseBlend(w + " A 1 B").status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << w;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("weight \"" + w + "\" of A is not a finite number > 0"));
  }
  ScopedTempDir tmp("loader_test_zero_weight");
  const std::string a = WriteVectorDataset(tmp.path());
  GptDatasetOptions o;
  o.sequence_length = 4;
  o.num_samples = 10;
  EXPECT_EQ(GptDataset::Open("0 " + a + " 1 " + a, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A Blend made without ParseBlend is refused by Open, naming the weight and the dataset.
  Blend b;
  b.prefixes = {a + "_never_opened", a};
  b.weights = {0, 1};
  absl::Status s = GptDataset::Open(b, o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("weight 0 of " + a + "_never_opened"));
  // So is a weight that only normalizing makes 0, as BlendedDataset sees the normalized weights.
  b.prefixes = {a, a};
  b.weights = {1e-300, 1e100};
  s = GptDataset::Open(b, o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("normalizes to 0"));
  // A small weight that stays > 0 is a weight like any other.
  b.weights = {1e-3, 1};
  auto small = GptDataset::Open(b, o);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ((*small)->size(), 11);  // ceil(10 · 0.000999) + ceil(10 · 0.999)
}

// Python's float() reads "1e400" as inf and "1e-400" as 0.0, so Megatron's BlendedDataset refuses
// such a weight. std::from_chars gives no value for them: the list was taken for four prefixes
// without weights, and the first error was "1e400.idx" not found.
TEST(Blending, OutOfRangeWeightIsRefusedAsPythonReadsIt) {
  for (const std::string w : {"1e400", "-1e400", "1e+400", "1e-400", "0.0001e-321", "1_000e999"}) {
    absl::Status s = ParseBlend(w + " A 1 B").status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << w;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("weight \"" + w + "\" of A is not a finite number > 0"));
  }
  // Near the ends, yet in range (a subnormal as well): weights like any other.
  auto near = ParseBlend("1e308 A 1e-310 B");
  ASSERT_TRUE(near.ok()) << near.status();
  EXPECT_THAT(near->weights, ElementsAre(1e308, 1e-310));
  ScopedTempDir tmp("loader_test_out_of_range_weight");
  const std::string a = WriteVectorDataset(tmp.path());
  GptDatasetOptions o;
  o.sequence_length = 4;
  o.num_samples = 10;
  absl::Status s = GptDataset::Open("1e400 " + a + " 1 " + a, o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("weight \"1e400\" of " + a));
}

// Unweighted, Megatron's builder passes the datasets' sample counts to BlendedDataset as weights,
// which it asserts > 0: a dataset too short for one sample cannot be in such a blend, with
// num_samples or without. The exhaustive form used to skip it, and the other give it weight 0.
TEST(GptDataset, UnweightedBlendRefusesDatasetWithoutSamples) {
  ScopedTempDir tmp("loader_test_empty_part");
  const std::string a = WriteVectorDataset(tmp.path());
  const std::string tiny = tmp.path() + "/tiny";
  {
    auto writer = IndexedDatasetWriter::Create(tiny, {}).value();
    const std::vector<uint32_t> three = {1, 2, 3};  // (3 - 1) / 4: no sample
    ASSERT_TRUE(writer->AddDocument(three).ok());
    ASSERT_TRUE(writer->Finish().ok());
  }
  GptDatasetOptions o;
  o.sequence_length = 4;
  for (std::optional<int64_t> n : {std::optional<int64_t>(), std::optional<int64_t>(5)}) {
    o.num_samples = n;
    absl::Status s = GptDataset::Open(a + " " + tiny, o).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(tiny + " gives 0 samples"));
  }
  // Alone it is no blend: it opens, with no samples, as Megatron's GPTDataset does.
  o.num_samples.reset();
  auto alone = GptDataset::Open(tiny, o);
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_EQ((*alone)->size(), 0);
}

// Megatron normalizes with numpy.sum, which sums pairwise: ten weights of 0.1 sum to 1.0 there (0.1
// each after normalizing), where adding them in order gives 0.9999999999999999 (and
// 0.10000000000000002 each). The other figures are numpy 1.24's.
TEST(Blending, WeightsAreNormalizedWithNumpysSum) {
  // `count` datasets weighted `weight` each: every normalized weight is `want`.
  auto expect_equal_weights = [](int count, const std::string& weight, double want) {
    std::string path;
    for (int i = 0; i < count; ++i) path += weight + " P" + std::to_string(i) + " ";
    auto b = ParseBlend(path);
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_EQ(b->weights.size(), static_cast<size_t>(count));
    for (double w : NormalizeWeights(b->weights)) EXPECT_EQ(w, want) << count << " x " << weight;
  };
  expect_equal_weights(10, "0.1", 0.1);
  // The Pile's 30 shards at 0.0333 each: numpy.sum 0.9990000000000001 (in order: 0.999), so each
  // weight is 0.03333333333333333 (in order: 0.03333333333333334).
  expect_equal_weights(30, "0.0333", 0.03333333333333333);
}

// Megatron normalizes a blend's weights twice: the builder once (the samples asked of each
// dataset), BlendedDataset again (build_blending_indices). The figures are numpy 1.24's; the picks
// of "20 A 12 B 9 C 14 D", 1000 samples, differ at 105, 106, 374-376, 735 and 736 between once and
// twice normalized weights (sample 105: C once, A twice).
TEST(GptDataset, WeightedBlendPicksWithTwiceNormalizedWeightsAsMegatron) {
  const std::vector<double> once = NormalizeWeights(std::vector<double>{20, 12, 9, 14});
  EXPECT_THAT(once, ElementsAre(0.36363636363636365, 0.21818181818181817, 0.16363636363636364,
                                0.2545454545454545));
  EXPECT_THAT(NormalizeWeights(once), ElementsAre(0.3636363636363637, 0.2181818181818182,
                                                  0.16363636363636366, 0.2545454545454546));
  ScopedTempDir tmp("loader_test_blend2");
  const std::string a = WriteVectorDataset(tmp.path());
  GptDatasetOptions o;
  o.sequence_length = 4;
  o.num_samples = 1000;
  auto ds = GptDataset::Open("20 " + a + " 12 " + a + " 9 " + a + " 14 " + a, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ((*ds)->size(), 1002);  // ceil(363.6) + ceil(218.2) + ceil(163.6) + ceil(254.5)
  const std::vector<int64_t> picks = (*ds)->blending().dataset_index.ToVector();
  const std::vector<int16_t> twice =
      BuildBlendingIndices(NormalizeWeights(once), 1002).dataset_index;
  EXPECT_EQ(picks, std::vector<int64_t>(twice.begin(), twice.end()));
  EXPECT_EQ(picks[105], 0);
  EXPECT_EQ(BuildBlendingIndices(once, 1002).dataset_index[105], 2);
  // Dataset 0 was asked for ceil(ceil(1000 · 0.36363636363636365) · 1.005) = 366 samples.
  EXPECT_GE((*ds)->indices(0).size(), 366);
}

TEST(GptDataset, WeightedBlendUsesBothDatasets) {
  ScopedTempDir tmp("loader_test_blend");
  const std::string& dir = tmp.path();
  std::string a = WriteVectorDataset(dir);
  GptDatasetOptions o;
  o.sequence_length = 4;
  o.num_samples = 10;
  auto ds = GptDataset::Open("0.3 " + a + " 0.7 " + a, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_TRUE((*ds)->is_blend());
  EXPECT_EQ((*ds)->size(), 10);  // ceil(3) + ceil(7)
  EXPECT_THAT((*ds)->blending().dataset_index.ToVector(),
              ElementsAre(1, 0, 1, 1, 0, 1, 1, 0, 1, 1));
  // Dataset 0 asked for ceil(3 · 1.005) = 4 samples, dataset 1 for ceil(7 · 1.005) = 8.
  EXPECT_EQ((*ds)->indices(0).size(), 6);  // one epoch gives 6 >= 4
  EXPECT_EQ((*ds)->indices(1).size(), 12);
  // Without num_samples a weighted blend is refused.
  o.num_samples.reset();
  EXPECT_EQ(GptDataset::Open("0.3 " + a + " 0.7 " + a, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Unweighted without num_samples: exhaustive, one epoch each.
  auto ex = GptDataset::Open(a + " " + a, o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_EQ((*ex)->size(), 12);
}

TEST(Split, CurrentAndLegacyRounding) {
  auto cur = ComputeSplit("969,30,1", 7021438, SplitRounding::kCurrent);
  ASSERT_TRUE(cur.ok());
  EXPECT_EQ((*cur)[0]->begin, 0);
  EXPECT_EQ((*cur)[0]->end, 6803773);
  auto leg = ComputeSplit("969,30,1", 7021438, SplitRounding::kLegacy);
  ASSERT_TRUE(leg.ok());
  EXPECT_EQ((*leg)[0]->end, 6803774);
  EXPECT_EQ((*leg)[2]->end, 7021438);

  auto c10 = ComputeSplit("1,1,1", 10).value();
  EXPECT_EQ(c10[0]->end, 3);
  EXPECT_EQ(c10[1]->begin, 3);
  EXPECT_EQ(c10[1]->end, 7);
  EXPECT_EQ(c10[2]->end, 10);
  auto l10 = ComputeSplit("1,1,1", 10, SplitRounding::kLegacy).value();
  EXPECT_EQ(l10[0]->end, 4);
  EXPECT_EQ(l10[1]->end, 7);
  EXPECT_EQ(l10[2]->end, 10);

  auto padded = ComputeSplit("98,2", 100).value();
  EXPECT_EQ(padded[1]->end, 100);
  EXPECT_FALSE(padded[2].has_value());  // zero weight: not built
  EXPECT_FALSE(ComputeSplit("", 10).ok());
  EXPECT_FALSE(ComputeSplit("0,0,0", 10).ok());
  EXPECT_FALSE(ComputeSplit("1.2.3", 10).ok());
  EXPECT_FALSE(ComputeSplit("1,1,1,1", 10).ok());
}

// The legacy split is parsed as legacy Megatron's get_train_valid_test_split_ parses it: pieces at
// ',' (else '/') through Python's float(), the first three kept. Its "98,2,0,0" and "1e2,1,1"
// were refused (parsed as the current regex: four weights; "1e2" as 1 and 2).
TEST(Split, LegacyParsesPiecesAsPythonFloat) {
  auto ranges = [](std::string_view split, int64_t n) {
    auto r = ComputeSplit(split, n, SplitRounding::kLegacy);
    std::vector<std::pair<int64_t, int64_t>> out;
    if (!r.ok()) return out;
    for (const auto& x : *r) out.push_back(x ? std::pair{x->begin, x->end} : std::pair{-1L, -1L});
    return out;
  };
  using R = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(ranges("98,2,0,0", 100), (R{{0, 98}, {98, 100}, {-1, -1}}));
  EXPECT_EQ(ranges(" 1e2 / 1 / +1", 102), (R{{0, 100}, {100, 101}, {101, 102}}));
  EXPECT_EQ(ranges("3", 10), (R{{0, 10}, {-1, -1}, {-1, -1}}));
  EXPECT_EQ(ranges("1_000,0,0", 10), (R{{0, 10}, {-1, -1}, {-1, -1}}));     // float("1_000")
  EXPECT_EQ(ranges("98,2,0,inf", 100), (R{{0, 98}, {98, 100}, {-1, -1}}));  // read, then dropped
  // Not numbers to float(), or weights refused (a negative one makes a range below 0, which
  // GPTDataset's min(documents) >= 0 refuses, or an inverted one; a 4 TB one was asked for).
  for (std::string_view bad : {"50 25 25", "1,,1", "1,inf,1", "1,nan", "+-1,2", "0,0,0", "",
                               "1__0,1", "_1,1", "-1,3,0", "-1e10,1e10,1", "1e18,-1e18,1"}) {
    EXPECT_EQ(ComputeSplit(bad, 10, SplitRounding::kLegacy).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  // The message says why: legacy Megatron takes "100,-1,1" (its validation range inverted, so no
  // dataset, its test range inside the training one), so "cannot use it" was not true.
  EXPECT_THAT(
      std::string(ComputeSplit("100,-1,1", 1000, SplitRounding::kLegacy).status().message()),
      HasSubstr("weight \"-1\" is negative (legacy Megatron's ranges would then fall below "
                "0, or invert and overlap: not taken)"));
  EXPECT_THAT(std::string(ComputeSplit("1,inf,1", 10, SplitRounding::kLegacy).status().message()),
              HasSubstr("weight \"inf\" is not finite"));
}

// A first weight that rounds to no sequences, with the roundings one over the count, shifts the
// next boundary below 0 (legacy Megatron: 0, -1, 11, 23, then GPTDataset's min(documents) >= 0
// fails): refused for the split, not made into a range that starts at -1.
TEST(Split, LegacyBoundaryShiftedBelowZeroIsRefusedNamingTheSplit) {
  auto r = ComputeSplit("0,1,1", 23, SplitRounding::kLegacy);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("split \"0,1,1\" of 23 sequences: legacy rounding"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("puts a boundary at -1, below 0"));
  // The same split where the roundings add up: taken (0, 0, 11, 22 for 22 sequences).
  auto ok = ComputeSplit("0,1,1", 22, SplitRounding::kLegacy);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_FALSE((*ok)[0].has_value());
  EXPECT_EQ((*ok)[1]->begin, 0);
  EXPECT_EQ((*ok)[2]->end, 22);
}

TEST(GptDataset, SplitSelectsSequenceRange) {
  ScopedTempDir tmp("loader_test_split");
  std::string prefix = WriteVectorDataset(tmp.path());
  GptDatasetOptions o;
  o.sequence_length = 2;
  o.split = "60,20,20";
  o.split_index = 1;
  auto ds = GptDataset::Open(prefix, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->sequences().begin, 3);
  EXPECT_EQ((*ds)->sequences().end, 4);
  EXPECT_THAT((*ds)->indices().document_index.ToVector(), ElementsAre(3));
  o.split = "100,0,0";
  EXPECT_EQ(GptDataset::Open(prefix, o).status().code(), absl::StatusCode::kFailedPrecondition);
}

// Without a split string every sequence is taken; split_index 1 used to give them the validation
// split's sample count as well (a partial last sample kept with
// drop_last_partial_validation_sequence = false). It is refused, saying why.
TEST(GptDataset, SplitIndexWithoutASplitIsRefused) {
  ScopedTempDir tmp("loader_test_split_index");
  const std::string prefix = WriteVectorDataset(tmp.path());
  GptDatasetOptions o;
  o.sequence_length = 4;
  o.drop_last_partial_validation_sequence = false;
  for (int split_index : {1, 2}) {
    o.split_index = split_index;
    absl::Status s = GptDataset::Open(prefix, o).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << split_index;
    EXPECT_THAT(std::string(s.message()), HasSubstr("without a split string")) << split_index;
  }
  o.split_index = 0;
  auto all = GptDataset::Open(prefix, o);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ((*all)->sequences().begin, 0);
  EXPECT_EQ((*all)->sequences().end, 5);
}

// ---- Reader ----

// The .idx stays mapped: its lengths, pointers and document indices are read where they lie
// (shared by every process that opens the dataset), nothing is copied.
TEST(IndexedDatasetView, ReadsLengthsPointersAndDocumentIndicesFromTheMappedIdx) {
  const std::string prefix = std::string(PILEPREP_TEST_DATA_DIR) + "/format/hand_uint16";
  auto ds = IndexedDatasetView::Open(prefix);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_THAT(MappedFileAt((*ds)->raw_sequence_pointers()), ::testing::EndsWith("hand_uint16.idx"));
  EXPECT_THAT(MappedFileAt((*ds)->raw_document_indices()), ::testing::EndsWith("hand_uint16.idx"));
  EXPECT_THAT(MappedFileAt((*ds)->sequence_lengths().data()),
              ::testing::EndsWith("hand_uint16.idx"));
  EXPECT_THAT(MappedFileAt((*ds)->sequence_data(0)), ::testing::EndsWith("hand_uint16.bin"));
}

// A dataset whose documents are all empty (Megatron's writer makes one; pileprep's publishes
// none) has an empty .bin, which is not mapped: its sequences are still in bounds, and copying none
// of their tokens succeeds.
TEST(IndexedDatasetView, EmptySequencesOfAnEmptyBinAreInBounds) {
  ScopedTempDir tmp("loader_test_empty_bin");
  const std::string prefix = tmp.path() + "/empty";
  std::string idx(kIdxMagic, sizeof(kIdxMagic));
  auto put = [&](const auto& v) { idx.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(uint64_t{1});                                // version
  put(static_cast<uint8_t>(TokenDType::kUint16));  // dtype code 8
  put(uint64_t{2});                                // sequences
  put(uint64_t{3});                                // document indices
  for (int32_t len : {0, 0}) put(len);
  for (int64_t ptr : {0, 0}) put(ptr);
  for (int64_t doc : {0, 1, 2}) put(doc);
  WriteFile(prefix + ".idx", idx);
  WriteFile(prefix + ".bin", "");
  auto ds = IndexedDatasetView::Open(prefix);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ((*ds)->bin_bytes(), 0u);
  ASSERT_EQ((*ds)->num_sequences(), 2);
  EXPECT_TRUE((*ds)->SequenceInBounds(1));
  EXPECT_NE((*ds)->CheckedSequenceData(1), nullptr);
  int64_t none[1];
  EXPECT_TRUE((*ds)->CopyTokens(1, 0, 0, none));
}

TEST(IndexedDatasetView, ReadsGoldenMegatronFiles) {
  auto ds = IndexedDatasetView::Open(std::string(PILEPREP_TEST_DATA_DIR) + "/format/hand_uint16");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->dtype(), TokenDType::kUint16);
  EXPECT_THAT((*ds)->sequence_lengths().ToVector(), ElementsAre(3, 3, 2, 3, 1, 2));
  EXPECT_EQ((*ds)->sequence_lengths()[4], 1);
  EXPECT_EQ((*ds)->sequence_length(3), 3);
  std::vector<int64_t> documents;
  for (int64_t i = 0; i <= (*ds)->num_documents(); ++i)
    documents.push_back((*ds)->document_index(i));
  EXPECT_THAT(documents, ElementsAre(0, 1, 1, 2, 5, 5, 6));
  EXPECT_EQ((*ds)->sequence_pointer(3), 16);  // 3 + 3 + 2 tokens of 2 bytes before it
  EXPECT_THAT((*ds)->Sequence<uint16_t>(0), ElementsAre(15496, 995, 50256));
  EXPECT_THAT((*ds)->Sequence<uint16_t>(1), ElementsAre(0, 65535, 50256));
  EXPECT_THAT((*ds)->Sequence<uint16_t>(3), ElementsAre(3, 4, 5));
  EXPECT_EQ((*ds)->num_tokens(), 14);

  auto i32 = IndexedDatasetView::Open(std::string(PILEPREP_TEST_DATA_DIR) + "/format/hand_int32");
  ASSERT_TRUE(i32.ok()) << i32.status();
  EXPECT_EQ((*i32)->dtype(), TokenDType::kInt32);
  EXPECT_THAT((*i32)->Sequence<int32_t>(0), ElementsAre(100000, 2147483647, 0));
  int64_t out[2];
  (*i32)->CopyTokens(2, 1, 2, out);
  EXPECT_THAT(out, ElementsAre(7, 8));
}

// The checked accessors check the sequence number too: the pointer array ends at num_sequences(),
// and a number past it (or negative) read whatever lies there (a crash far past the mapping).
TEST(IndexedDatasetView, CheckedAccessorsRefuseSequenceNumbersOutsideTheIndex) {
  auto ds = IndexedDatasetView::Open(std::string(PILEPREP_TEST_DATA_DIR) + "/format/hand_uint16");
  ASSERT_TRUE(ds.ok()) << ds.status();
  const int64_t n = (*ds)->num_sequences();
  ASSERT_EQ(n, 6);
  int64_t out[1] = {-7};
  for (int64_t i : {n, n + 1, int64_t{100000000}, int64_t{-1}, INT64_MIN, INT64_MAX}) {
    EXPECT_FALSE((*ds)->SequenceInBounds(i)) << i;
    EXPECT_EQ((*ds)->CheckedSequenceData(i), nullptr) << i;
    EXPECT_FALSE((*ds)->CopyTokens(i, 0, 0, out)) << i;
    EXPECT_FALSE((*ds)->CopyTokens(i, 0, 1, out)) << i;
  }
  EXPECT_EQ(out[0], -7);  // nothing copied
  EXPECT_TRUE((*ds)->CopyTokens(n - 1, 0, 1, out));
  EXPECT_EQ(out[0], (*ds)->Sequence<uint16_t>(n - 1)[0]);
}

// A FIFO named like a dataset's .idx or .bin is refused at once: opening it waited for a writer
// for ever (a training job's dataset open would hang). A hang here is ended by opening the FIFO's
// other side, and fails the test.
TEST(IndexedDatasetView, AFifoInPlaceOfAFileIsRefusedNotWaitedOn) {
  ScopedTempDir tmp("loader_test_fifo");
  const std::string golden = std::string(PILEPREP_TEST_DATA_DIR) + "/format/hand_uint16";
  for (const char* fifo_ext : {".idx", ".bin"}) {
    const std::string prefix = tmp.path() + "/f" + (fifo_ext[1] == 'i' ? "i" : "b");
    const std::string other_ext = fifo_ext[1] == 'i' ? ".bin" : ".idx";
    std::filesystem::copy_file(golden + other_ext, prefix + other_ext);
    ASSERT_EQ(::mkfifo((prefix + fifo_ext).c_str(), 0600), 0);
    std::atomic<bool> done{false};
    absl::Status status;
    std::thread opener([&] {
      status = IndexedDatasetView::Open(prefix).status();
      done = true;
    });
    for (int i = 0; i < 300 && !done; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const bool hung = !done;
    if (hung) ::close(::open((prefix + fifo_ext).c_str(), O_WRONLY | O_NONBLOCK));  // release it
    opener.join();
    EXPECT_FALSE(hung) << fifo_ext << ": Open waited on the FIFO";
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()),
                HasSubstr(fifo_ext + std::string(": not a regular file")));
  }
}

// A failed system call's errno travels with its status (the Python module raises OSError with it),
// and its code is the one the core library's reader gives the same fault (Abseil's for the errno; a
// directory is InvalidArgument, not a regular file), so a caller that branches on the code sees one
// fault one way from both; a NUL, where a path would stop short, is refused before any call.
TEST(IndexedDatasetView, OpenErrorsCarryTheErrnoAndANulIsRefused) {
  ScopedTempDir tmp("loader_test_errno");
  const std::string plain = tmp.path() + "/plain";
  std::ofstream(plain).put('x');
  std::filesystem::create_directory(tmp.path() + "/dir.idx");
  using Code = absl::StatusCode;
  for (const auto& [prefix, err, code] :
       {std::tuple{plain + "/x", ENOTDIR, Code::kFailedPrecondition},
        std::tuple{tmp.path() + "/missing", ENOENT, Code::kNotFound},
        std::tuple{tmp.path() + "/dir", EISDIR, Code::kInvalidArgument},
        std::tuple{tmp.path() + "/" + std::string(5000, 'a'), ENAMETOOLONG,
                   Code::kInvalidArgument}}) {
    const absl::Status s = IndexedDatasetView::Open(prefix).status();
    EXPECT_EQ(ErrnoOf(s), std::optional<int>(err)) << s;
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_EQ(s.code(), IndexedDatasetReader::Open(prefix).status().code()) << s;
  }
  EXPECT_EQ(ErrnoOf(absl::InvalidArgumentError("x")), std::nullopt);
  const std::string golden = std::string(PILEPREP_TEST_DATA_DIR) + "/format/hand_uint16";
  const absl::Status nul = IndexedDatasetView::Open(golden + std::string(1, '\0') + "x").status();
  EXPECT_EQ(nul.code(), absl::StatusCode::kInvalidArgument) << nul;
  EXPECT_THAT(std::string(nul.message()), HasSubstr("embedded null byte"));
}

TEST(IndexedDatasetView, ReadsWhatPilePrepWrites) {
  ScopedTempDir tmp("loader_test_roundtrip");
  const std::string& dir = tmp.path();
  for (TokenDType dtype : {TokenDType::kUint16, TokenDType::kInt32}) {
    std::string prefix = dir + "/rt" + std::to_string(static_cast<int>(dtype));
    IndexedDatasetWriterOptions wo;
    wo.dtype = dtype;
    auto writer = IndexedDatasetWriter::Create(prefix, wo).value();
    std::vector<std::vector<uint32_t>> docs;
    uint64_t x = 12345;
    for (int d = 0; d < 200; ++d) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      std::vector<uint32_t> doc((x >> 33) % 50);
      for (auto& t : doc) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        t = static_cast<uint32_t>((x >> 33) % 50257);
      }
      ASSERT_TRUE(writer->AddDocument(doc).ok());
      docs.push_back(doc);
    }
    ASSERT_TRUE(writer->Finish().ok());
    auto ds = IndexedDatasetView::Open(prefix);
    ASSERT_TRUE(ds.ok()) << ds.status();
    int64_t seq = 0;
    for (const auto& doc : docs) {
      if (doc.empty()) continue;
      std::vector<int64_t> got(doc.size());
      (*ds)->CopyTokens(seq, 0, static_cast<int64_t>(doc.size()), got.data());
      EXPECT_THAT(got, ElementsAreArray(doc.begin(), doc.end()));
      ++seq;
    }
    EXPECT_EQ(seq, (*ds)->num_sequences());
    EXPECT_EQ((*ds)->num_documents(), 200);
  }
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Copies hand_uint16 to `dir/name`, lets `edit` change the .idx (and .bin) bytes, opens it.
absl::Status OpenEdited(const std::string& name, void (*edit)(std::string* idx, std::string* bin)) {
  ScopedTempDir tmp("loader_test_bad");
  const std::string& dir = tmp.path();
  std::string src = std::string(PILEPREP_TEST_DATA_DIR) + "/format/hand_uint16";
  std::string idx = ReadBytes(src + ".idx"), bin = ReadBytes(src + ".bin");
  edit(&idx, &bin);
  WriteBytes(dir + "/" + name + ".idx", idx);
  WriteBytes(dir + "/" + name + ".bin", bin);
  return IndexedDatasetView::Open(dir + "/" + name).status();
}

TEST(IndexedDatasetView, RefusesDamagedFilesWithClearErrors) {
  absl::Status missing = IndexedDatasetView::Open("/nonexistent/x").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("/nonexistent/x.idx"));

  absl::Status s = OpenEdited("magic", [](std::string* idx, std::string*) { (*idx)[0] = 'X'; });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("magic.idx: byte 0: bad magic"));

  s = OpenEdited("version", [](std::string* idx, std::string*) { (*idx)[9] = 2; });
  EXPECT_THAT(s.message(), HasSubstr("byte 9: version 2"));

  s = OpenEdited("dtype", [](std::string* idx, std::string*) { (*idx)[17] = 7; });
  EXPECT_THAT(s.message(), HasSubstr("byte 17: dtype code 7"));

  s = OpenEdited("short", [](std::string* idx, std::string*) { idx->resize(idx->size() - 1); });
  EXPECT_THAT(s.message(), HasSubstr("need more bytes"));

  s = OpenEdited("header", [](std::string* idx, std::string*) { idx->resize(20); });
  EXPECT_THAT(s.message(), HasSubstr("shorter than the 34-byte header"));

  s = OpenEdited("bin", [](std::string*, std::string* bin) { bin->resize(bin->size() - 2); });
  EXPECT_THAT(s.message(), HasSubstr("sequence 5"));
  EXPECT_THAT(s.message(), HasSubstr("is not inside"));

  // A pointer inside the .bin but not at a token boundary: named as such (it was "not inside").
  s = OpenEdited("askew", [](std::string* idx, std::string*) {
    uint64_t count;
    std::memcpy(&count, idx->data() + kIdxSequenceCountOffset, 8);
    const size_t at = kIdxHeaderBytes + 4 * count + 8;  // sequence 1's pointer
    int64_t ptr;
    std::memcpy(&ptr, idx->data() + at, 8);
    ++ptr;
    std::memcpy(idx->data() + at, &ptr, 8);
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("sequence 1 (pointer "));
  EXPECT_THAT(s.message(), HasSubstr("is not a multiple of the 2-byte token size"));

  s = OpenEdited("length", [](std::string* idx, std::string*) {
    int32_t v = -1;
    std::memcpy(idx->data() + 34, &v, 4);
  });
  EXPECT_THAT(s.message(), HasSubstr("byte 34: sequence 0 has length -1"));

  s = OpenEdited("docs", [](std::string* idx, std::string*) {
    int64_t v = 99;
    std::memcpy(idx->data() + idx->size() - 8, &v, 8);
  });
  EXPECT_THAT(s.message(), HasSubstr("document index 6 = 99"));

  // Six sequences, the last document ending at 5: Megatron asserts they agree.
  s = OpenEdited("last_doc", [](std::string* idx, std::string*) {
    int64_t v = 5;
    std::memcpy(idx->data() + idx->size() - 8, &v, 8);
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("the last document index is 5, but there are 6 sequences"));

  // Trailing bytes are accepted (Megatron's readers ignore them).
  s = OpenEdited("trailing", [](std::string* idx, std::string*) { idx->append("xyz"); });
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace pileprep
