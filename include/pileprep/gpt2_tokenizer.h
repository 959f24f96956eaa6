// GPT-2 byte-level BPE, exactly as tiktoken `gpt2` / Hugging Face / Megatron's GPT2BPETokenizer.
//
//   PILEPREP_ASSIGN_OR_RETURN(auto tok, Gpt2Tokenizer::FromFiles(vocab, merges, {}));
//   Gpt2Tokenizer::Cache cache(*tok);          // one per thread
//   std::vector<uint32_t> ids;
//   tok->Encode("Hello world", cache, &ids);   // appends {15496, 995}
//
// Rules are those of docs/gpt2.md: hand-written pre-tokenizer (Unicode 16.0 classes, the `\s+(?!\S)`
// give-back rule), byte-level BPE where the lowest merge rank wins (leftmost on ties), and literal
// `<|endoftext|>` mapped to its id unless `Options::endoftext_is_special` is false.
//
// Thread model: a Gpt2Tokenizer is immutable after construction and may be shared by any number of
// threads. A Cache is mutable per-thread state (the pre-token cache); never share one between threads.
// Results never depend on the cache.
#ifndef PILEPREP_GPT2_TOKENIZER_H_
#define PILEPREP_GPT2_TOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace pileprep {

class Gpt2Tokenizer {
 public:
  // The largest Options::cache_entries: 2^26 short entries, about 3.5 GiB per cache.
  static constexpr size_t kMaxCacheEntries = size_t{1} << 26;

  struct Options {
    // Literal "<|endoftext|>" in text becomes the single EOD id (NeMo's data preparation, whose
    // GPT-2 tokenizer is Hugging Face's; gpt2.md's default). false: it is ordinary text
    // (Megatron-LM's own tools/preprocess_data.py, whose gpt2_tokenization.py has no special
    // tokens; tiktoken's encode_ordinary).
    bool endoftext_is_special = true;
    // Entries in each per-thread pre-token cache (rounded up to a power of two) for pieces of up to
    // 15 bytes; the tiers for longer pieces get a sixteenth and a 128th as many. 2^20 takes about
    // 56 MiB per thread (72 MiB until the ids past a short piece's 8th moved into its set's line).
    // Against 2^18 (with the same long tiers) 2^19 tokenized the 81.5 MB Debian corpus
    // (scripts/debian_corpus.sh) 5% faster on text not seen before (174 -> 183 MB/s), whose long
    // pieces split into many short parts. 2^20 against 2^19 (same long tiers; tokenize_bench
    // --ids16, alternating runs): a second pass over the sample corpus 309 -> 320 MB/s (0.31% ->
    // 0.13% of pieces re-merged: two-way sets lose pieces to conflicts long before they are full),
    // the Debian corpus 221 -> 232 and on unseen text 208 -> 211; first passes within 2%.
    // At most kMaxCacheEntries (FromFiles/FromBuffers: InvalidArgument above it).
    size_t cache_entries = size_t{1} << 20;
    // A cache bound to this tokenizer starts out holding the vocabulary's entries whose bytes are
    // one pre-token of up to 15 bytes (about 48,000 of GPT-2's), with their ids, as if it had seen
    // them: a piece that is one token (a rare word's first occurrence, a CJK character new to the
    // cache) need not wait for a merge. (tiktoken looks each piece up in its vocabulary before
    // merging for the same reason.) Those entries are merged once per tokenizer, when the first
    // cache binds to it (~15 ms on the project's VM), and each cache takes them in when it binds
    // (~0.3 ms); where two-way sets are too few for all of them (a small cache_entries), the lower
    // ids stay. The ids never depend on it.
    bool prefill_cache_with_vocabulary = true;
    // Whether pieces of 16 to 256 bytes that are CJK runs (whose first character, after an optional
    // leading space, is in U+3000..U+9FFF: kana, ideographs, CJK punctuation and symbols) go
    // through the cache's long and huge tiers like other long pieces. By default they do not: such
    // a run is a clause or a sentence (Chinese and Japanese are written without spaces), nearly
    // always new, so it missed anyway, and its entries evicted the long words of other scripts,
    // which do come back. It is split where no merge joins two bytes, its characters' ids taken
    // from a small table, which is what a miss did. In the Debian corpus (scripts/debian_corpus.sh)
    // such runs are 83% of the distinct long pieces, and 26% of their occurrences in one half of
    // the documents had been seen before, against 84-92% for the other long pieces of 16-64 bytes
    // (8% and 49-99% for those of 65-256). Skipping the tiers (in-process alternating rounds,
    // 16-bit ids, paired medians): the Debian corpus 10-12% faster on unseen text and 11-30% on a
    // second pass; its 737 mostly Chinese or Japanese documents (11 MB) 10-13% faster unseen and
    // 4-5% slower on a second pass; the sample corpus 2-3% faster unseen, 7-8% slower on a second
    // pass; 1 MB of Chinese text seen again 37% slower. Set it for text that repeats the same long
    // runs within a few MB. (benchmarks/tokenize_bench --cache-long-cjk-runs times the two.) The
    // ids never depend on it.
    bool cache_long_cjk_runs = false;
  };

  // Loads `encoder.json` (token -> id) and `vocab.bpe` (merges in rank order). Errors name the file
  // and the line or entry that is wrong; memory not to be had is ResourceExhausted (no exception).
  static absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> FromFiles(const std::string& vocab_path,
                                                                  const std::string& merges_path,
                                                                  Options options);
  static absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> FromBuffers(std::string_view vocab_json,
                                                                    std::string_view merges_txt,
                                                                    Options options);
  // Finds GPT-2's encoder.json and vocab.bpe shipped with pileprep, in the first of:
  // $PILEPREP_TOKENIZER_DIR (the directory holding the two files; when set and not empty, it must
  // hold them: NotFound, rather than the shipped files in its place; set to "" it counts as unset,
  // as a launcher clears it), next to the executable
  // (../share/pileprep/tokenizers/gpt2), where `cmake --install` put them
  // (PREFIX/share/pileprep/tokenizers/gpt2, PREFIX as configured), the source tree it was built
  // from (tokenizers/gpt2). NotFound names every place looked in.
  static absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> FromDefaultFiles(Options options);
  // The paths FromDefaultFiles loads: {encoder.json, vocab.bpe}.
  static absl::StatusOr<std::pair<std::string, std::string>> DefaultFiles();

  // Per-thread pre-token cache. Holds no pointer into text passed to Encode. A cache serves one
  // tokenizer at a time: the one it was made for, or else the first it is used with; used with
  // another, it first forgets what it holds.
  class Cache {
   public:
    explicit Cache(const Gpt2Tokenizer& tokenizer);
    // A cache sized by `options` (cache_entries, at most kMaxCacheEntries), made before its
    // tokenizer exists: its 56 MiB can be faulted in on other cores while the vocabulary loads
    // (the CLI does), and it can be kept for the next input. Like std::vector, the constructors
    // throw std::bad_alloc when the memory cannot be mapped (the one exception the tokenizer
    // lets out: a constructor has no status to return).
    explicit Cache(const Options& options);
    ~Cache();
    Cache(const Cache&) = delete;
    Cache& operator=(const Cache&) = delete;

    // Counts since construction: pre-tokens looked up, and those merged because the cache did not
    // hold them (first seen, evicted, longer than 256 bytes, a CJK run of 16 bytes or more unless
    // Options::cache_long_cjk_runs, or every piece where the vocabulary has more than 65,536
    // entries and the cache is off). 1 - merged / pieces is the hit rate.
    struct Stats {
      uint64_t pieces = 0;
      uint64_t merged = 0;
    };
    Stats stats() const;

   private:
    friend class Gpt2Tokenizer;
    struct Impl;
    // Makes the cache serve `tokenizer`, emptying it if it served another.
    void Bind(const Gpt2Tokenizer& tokenizer);
    std::unique_ptr<Impl> impl_;
  };

  ~Gpt2Tokenizer();

  // The longest text (and piece) Encode, EncodeTo and EncodePiece take: lengths and positions
  // inside are 32-bit. A longer one aborts, with a line on stderr, before a byte is read (a piece
  // cut to its low 32 bits would be silent data loss). The pipeline's lines are shorter (simdjson's
  // limit, JsonRecordParser::kMaxLineBytes).
  static constexpr size_t kMaxTextBytes = 0xFFFFFFFF;

  // Appends the ids of valid UTF-8 `text` to `ids`. (The JSON stage guarantees valid UTF-8; invalid
  // bytes are still tokenized as bytes, never a crash.)
  void Encode(std::string_view text, Cache& cache, std::vector<uint32_t>* ids) const;
  // The same ids as 16-bit values, the width of a uint16 .bin (GPT-2's ids are below 50,257), with
  // no widening on the way. Returns false and appends nothing when the vocabulary has an id above
  // 65,535.
  [[nodiscard]] bool Encode(std::string_view text, Cache& cache, std::vector<uint16_t>* ids) const;

  // Encode into a buffer the caller owns and sized: writes the ids of `text` to out[0...] and returns
  // how many. `out` must have room for MaxIds(text.size()) ids: one per byte (no token is shorter),
  // and kIdOverhang more, which may be written with values of no meaning (the cache copies 8 ids at a
  // time). No allocation, no zero-fill, no copy on the way: the pipeline's path. The 16-bit form
  // requires ids_fit_16_bits() (it aborts otherwise: an id cut to 16 bits would be silent data loss).
  static constexpr size_t kIdOverhang = 16;
  static constexpr size_t MaxIds(size_t text_bytes) { return text_bytes + kIdOverhang; }
  size_t EncodeTo(std::string_view text, Cache& cache, uint32_t* out) const;
  size_t EncodeTo(std::string_view text, Cache& cache, uint16_t* out) const;

  // Appends the BPE ids of one pre-token, with no cache and no special-token handling. For tests and
  // benchmarks; the second form reuses `scratch`'s merge buffers (its cache is neither read nor written).
  void EncodePiece(std::string_view piece, std::vector<uint32_t>* ids) const;
  void EncodePiece(std::string_view piece, Cache& scratch, std::vector<uint32_t>* ids) const;

  // Concatenated bytes of the tokens (no UTF-8 repair). Unknown ids are skipped.
  std::string Decode(const std::vector<uint32_t>& ids) const;
  // The vocabulary has this id (Decode gives it bytes): below id_limit() and not one that
  // encoder.json leaves out.
  bool HasId(uint32_t id) const;

  // Entries in encoder.json (what Megatron sizes its embedding and picks the .bin's dtype by).
  size_t vocab_size() const { return vocab_size_; }
  // One past the largest id: every id Encode gives is below it. vocab_size() for a vocabulary
  // whose ids run 0..N-1 (GPT-2's); more when encoder.json leaves ids out.
  size_t id_limit() const { return id_limit_; }
  // Every id is below 65,536: the 16-bit Encode works (GPT-2: yes).
  bool ids_fit_16_bits() const { return ids_fit_16_bits_; }
  uint32_t eod_id() const { return eod_id_; }
  const Options& options() const { return options_; }
  // Names the vocabulary and merges as they decide ids: a 64-bit hash (FNV-1a) of each id's bytes
  // in id order, each byte's id, the merges in rank order with their results, and the end-of-text
  // id. Tokenizers with equal fingerprints and equal Options::endoftext_is_special give equal ids;
  // the spelling of the files (whitespace, key order in encoder.json, a "#version" line, CRLF)
  // does not enter, nor do the options. Stable across versions and machines: the shard job
  // records it beside its outputs to tell, on a rerun, whether the same files made them.
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  Gpt2Tokenizer() = default;
  struct Tables;
  // FromBuffers, but std::bad_alloc is let out.
  static absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Load(std::string_view vocab_json,
                                                             std::string_view merges_txt,
                                                             Options options);
  // BPE of one piece into `ids` using `scratch` buffers; the cache is not consulted.
  static void MergePiece(const Tables& tables, std::string_view piece, Cache::Impl& scratch,
                         std::vector<uint32_t>* ids);
  // encoder.py's merge loop (every occurrence of the lowest pair at once), for merges files on which
  // merging one occurrence at a time would differ; appends the piece's ids to `out`.
  static void EncoderPyMerge(const Tables& tables, const unsigned char* bytes, size_t n,
                             std::vector<uint32_t>* out);
  // Options::prefill_cache_with_vocabulary: the short pieces a cache starts with, made on first use
  // (thread-safe).
  struct PrefillEntry;
  const std::vector<PrefillEntry>& PrefillEntries() const;
  // BPE of a piece of 1..64 bytes into out[0..n); returns the number of ids.
  static size_t MergeShort(const Tables& tables, const unsigned char* bytes, size_t n, uint32_t* out);
  // Both write ids from `out` on (room: MaxIds) and return the end of them.
  template <typename Id>  // uint32_t or uint16_t
  Id* EncodeOrdinary(std::string_view text, Cache::Impl& cache, Id* out) const;
  template <typename Id>
  Id* EncodeWithSpecial(std::string_view text, Cache& cache, Id* out) const;
  template <typename Id>  // the vector forms of Encode
  void AppendEncoded(std::string_view text, Cache& cache, std::vector<Id>* ids) const;
  std::unique_ptr<Tables> tables_;
  // Tells tokenizers apart for Cache::Bind (an address can be reused by the next one): unique in
  // the process, never 0.
  uint64_t instance_ = 0;
  Options options_;
  size_t vocab_size_ = 0;
  size_t id_limit_ = 0;
  uint32_t eod_id_ = 0;
  bool ids_fit_16_bits_ = false;
  uint64_t fingerprint_ = 0;
};

}  // namespace pileprep

#endif  // PILEPREP_GPT2_TOKENIZER_H_
