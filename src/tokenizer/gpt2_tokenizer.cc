#include "pileprep/gpt2_tokenizer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <queue>
#include <sstream>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "pileprep/status_macros.h"
#include "simdjson.h"
#include "tokenizer/pretokenizer.h"

namespace pileprep {
namespace {

constexpr std::string_view kEndOfText = "<|endoftext|>";
constexpr uint32_t kNoRank = UINT32_MAX;

// GPT-2's bytes_to_unicode(): the printable bytes map to themselves, the other 68 to U+0100 onwards.
// Returns the inverse: code point -> byte, or -1.
std::vector<int> UnicodeToByteTable() {
  std::vector<int> inverse(512, -1);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    inverse[printable ? b : next++] = b;
  }
  return inverse;
}

// Decodes a token written in GPT-2's byte alphabet back to raw bytes.
bool AlphabetToBytes(std::string_view s, const std::vector<int>& inverse, std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    uint32_t cp;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < s.size()) {
      cp = ((c & 0x1F) << 6) | (s[i + 1] & 0x3F);
      i += 2;
    } else {
      return false;
    }
    if (cp >= inverse.size() || inverse[cp] < 0) return false;
    out->push_back(static_cast<char>(inverse[cp]));
  }
  return true;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return std::move(ss).str();
}

inline uint64_t PairKey(uint32_t a, uint32_t b) { return (uint64_t{a} << 32) | b; }

}  // namespace

struct Gpt2Tokenizer::Tables {
  uint32_t byte_id[256];
  struct Merge {
    uint32_t rank;
    uint32_t id;
  };
  absl::flat_hash_map<uint64_t, Merge> merges;
  std::vector<std::string> id_bytes;
  bool has_endoftext = false;

  Merge Lookup(uint32_t a, uint32_t b) const {
    auto it = merges.find(PairKey(a, b));
    return it == merges.end() ? Merge{kNoRank, 0} : it->second;
  }
};

// Per-thread direct-mapped cache from short pre-tokens to their ids. Keys of up to 15 bytes are packed
// into two words with the length, so a lookup is two compares and no allocation.
struct Gpt2Tokenizer::Cache::Impl {
  static constexpr size_t kMaxKeyBytes = 15;
  static constexpr size_t kMaxIds = 5;
  struct Entry {
    uint64_t k0 = 0, k1 = 0;  // k1's top byte holds length + 1; 0 marks an empty slot
    uint32_t ids[kMaxIds];
    uint32_t num_ids = 0;
  };
  std::vector<Entry> entries;
  size_t mask = 0;
  // Scratch for merges, reused across calls.
  std::vector<uint32_t> ids, prev, next;
  struct HeapItem {
    uint32_t rank, pos;
    bool operator>(const HeapItem& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<HeapItem> heap;

  static void Pack(std::string_view s, uint64_t* k0, uint64_t* k1) {
    unsigned char buf[16] = {0};
    std::memcpy(buf, s.data(), s.size());
    buf[15] = static_cast<unsigned char>(s.size() + 1);
    std::memcpy(k0, buf, 8);
    std::memcpy(k1, buf + 8, 8);
  }
  Entry& Slot(uint64_t k0, uint64_t k1) {
    uint64_t h = (k0 * 0x9E3779B97F4A7C15ull) ^ (k1 * 0xC2B2AE3D27D4EB4Full);
    h ^= h >> 29;
    return entries[h & mask];
  }
};

Gpt2Tokenizer::Cache::Cache(const Gpt2Tokenizer& tokenizer) : impl_(std::make_unique<Impl>()) {
  size_t n = 1;
  while (n < tokenizer.options().cache_entries) n <<= 1;
  impl_->entries.resize(n);
  impl_->mask = n - 1;
}
Gpt2Tokenizer::Cache::~Cache() = default;
Gpt2Tokenizer::~Gpt2Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Gpt2Tokenizer::FromFiles(
    const std::string& vocab_path, const std::string& merges_path, Options options) {
  PILEPREP_ASSIGN_OR_RETURN(std::string vocab, ReadWholeFile(vocab_path));
  PILEPREP_ASSIGN_OR_RETURN(std::string merges, ReadWholeFile(merges_path));
  auto tok = FromBuffers(vocab, merges, options);
  if (!tok.ok()) {
    return absl::Status(tok.status().code(),
                        absl::StrCat(vocab_path, " / ", merges_path, ": ", tok.status().message()));
  }
  return tok;
}

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Gpt2Tokenizer::FromDefaultFiles(Options options) {
  std::vector<std::filesystem::path> dirs;
  if (const char* env = std::getenv("PILEPREP_TOKENIZER_DIR"); env && *env) dirs.emplace_back(env);
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    dirs.push_back(exe.parent_path() / ".." / "share" / "pileprep" / "tokenizers" / "gpt2");
  }
#ifdef PILEPREP_SOURCE_TOKENIZER_DIR
  dirs.push_back(std::filesystem::path(PILEPREP_SOURCE_TOKENIZER_DIR) / "gpt2");
#endif
  std::string tried;
  for (const auto& dir : dirs) {
    const auto vocab = dir / "encoder.json";
    const auto merges = dir / "vocab.bpe";
    if (std::filesystem::exists(vocab, ec) && std::filesystem::exists(merges, ec)) {
      return FromFiles(vocab.string(), merges.string(), options);
    }
    absl::StrAppend(&tried, tried.empty() ? "" : ", ", dir.string());
  }
  return absl::NotFoundError(absl::StrCat(
      "GPT-2 vocabulary not found (looked in ", tried,
      "); set PILEPREP_TOKENIZER_DIR or pass --vocab-file and --merge-file"));
}

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Gpt2Tokenizer::FromBuffers(
    std::string_view vocab_json, std::string_view merges_txt, Options options) {
  auto tok = std::unique_ptr<Gpt2Tokenizer>(new Gpt2Tokenizer());
  tok->options_ = options;
  tok->tables_ = std::make_unique<Tables>();
  Tables& t = *tok->tables_;
  const std::vector<int> inverse = UnicodeToByteTable();

  // Vocabulary: token (in the byte alphabet) -> id.
  simdjson::dom::parser parser;
  simdjson::padded_string padded(vocab_json);
  simdjson::dom::object obj;
  if (auto err = parser.parse(padded).get(obj)) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocabulary is not a JSON object: ", simdjson::error_message(err)));
  }
  absl::flat_hash_map<std::string, uint32_t> bytes_to_id;
  std::string bytes;
  uint32_t max_id = 0;
  for (auto field : obj) {
    int64_t id;
    if (field.value.get_int64().get(id) || id < 0 || id > INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocabulary entry \"", std::string(field.key), "\" has no valid id"));
    }
    if (field.key == kEndOfText) {
      tok->eod_id_ = static_cast<uint32_t>(id);
      t.has_endoftext = true;
    }
    if (!AlphabetToBytes(field.key, inverse, &bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "vocabulary entry \"", std::string(field.key), "\" is not in GPT-2's byte alphabet"));
    }
    bytes_to_id[bytes] = static_cast<uint32_t>(id);
    max_id = std::max<uint32_t>(max_id, static_cast<uint32_t>(id));
    if (t.id_bytes.size() <= static_cast<size_t>(id)) t.id_bytes.resize(id + 1);
    t.id_bytes[id] = bytes;
  }
  tok->vocab_size_ = obj.size();
  if (!t.has_endoftext) {
    return absl::InvalidArgumentError("vocabulary has no <|endoftext|> entry");
  }
  for (int b = 0; b < 256; ++b) {
    auto it = bytes_to_id.find(std::string(1, static_cast<char>(b)));
    if (it == bytes_to_id.end()) {
      return absl::InvalidArgumentError(absl::StrCat("vocabulary lacks the token for byte ", b));
    }
    t.byte_id[b] = it->second;
  }

  // Merges, in rank order. Lines "A B"; a leading "#version" line and empty lines are skipped.
  uint32_t rank = 0;
  size_t line_no = 0;
  std::string a, b;
  for (size_t pos = 0; pos < merges_txt.size();) {
    size_t nl = merges_txt.find('\n', pos);
    if (nl == std::string_view::npos) nl = merges_txt.size();
    std::string_view line = merges_txt.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.substr(0, 8) == "#version")) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("merges line ", line_no, ": expected two tokens separated by one space"));
    }
    if (!AlphabetToBytes(line.substr(0, sp), inverse, &a) ||
        !AlphabetToBytes(line.substr(sp + 1), inverse, &b)) {
      return absl::InvalidArgumentError(
          absl::StrCat("merges line ", line_no, ": not in GPT-2's byte alphabet"));
    }
    auto ia = bytes_to_id.find(a), ib = bytes_to_id.find(b), iab = bytes_to_id.find(a + b);
    if (ia == bytes_to_id.end() || ib == bytes_to_id.end() || iab == bytes_to_id.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "merges line ", line_no, ": token \"", std::string(line), "\" is not in the vocabulary"));
    }
    // The first (lowest-rank) occurrence of a pair wins, as in the references.
    t.merges.try_emplace(PairKey(ia->second, ib->second), Tables::Merge{rank, iab->second});
    ++rank;
  }
  if (rank == 0) return absl::InvalidArgumentError("merges file holds no merges");
  return tok;
}

void Gpt2Tokenizer::MergePiece(const Tables& t, std::string_view piece, Cache::Impl& s,
                               std::vector<uint32_t>* out) {
  const size_t n = piece.size();
  const auto* bytes = reinterpret_cast<const unsigned char*>(piece.data());
  if (n == 1) {
    out->push_back(t.byte_id[bytes[0]]);
    return;
  }
  std::vector<uint32_t>& ids = s.ids;
  ids.resize(n);
  for (size_t i = 0; i < n; ++i) ids[i] = t.byte_id[bytes[i]];

  if (n <= 32) {
    // Short pieces (nearly all of them): rescan for the lowest-rank pair after each merge. Quadratic
    // in n, but n is small and this beats any bookkeeping.
    size_t len = n;
    while (len > 1) {
      uint32_t best_rank = kNoRank, best_id = 0;
      size_t best = 0;
      for (size_t i = 0; i + 1 < len; ++i) {
        const Tables::Merge m = t.Lookup(ids[i], ids[i + 1]);
        if (m.rank < best_rank) {
          best_rank = m.rank;
          best_id = m.id;
          best = i;
        }
      }
      if (best_rank == kNoRank) break;
      ids[best] = best_id;
      std::memmove(&ids[best + 1], &ids[best + 2], (len - best - 2) * sizeof(uint32_t));
      --len;
    }
    out->insert(out->end(), ids.begin(), ids.begin() + len);
    return;
  }

  // Long pieces (base64, runs of one letter, minified code): a doubly linked list of symbols and a
  // min-heap of candidate pairs keyed by (rank, position), so the work is O(n log n). Stale heap
  // entries are detected by re-checking the pair's current rank when popped.
  std::vector<uint32_t>& prev = s.prev;
  std::vector<uint32_t>& next = s.next;
  prev.resize(n);
  next.resize(n);
  constexpr uint32_t kNone = UINT32_MAX;
  for (size_t i = 0; i < n; ++i) {
    prev[i] = i == 0 ? kNone : static_cast<uint32_t>(i - 1);
    next[i] = i + 1 == n ? kNone : static_cast<uint32_t>(i + 1);
  }
  auto& heap = s.heap;
  heap.clear();
  auto greater = [](const Cache::Impl::HeapItem& a, const Cache::Impl::HeapItem& b) { return a > b; };
  auto push = [&](uint32_t pos) {
    if (pos == kNone || next[pos] == kNone) return;
    const Tables::Merge m = t.Lookup(ids[pos], ids[next[pos]]);
    if (m.rank == kNoRank) return;
    heap.push_back({m.rank, pos});
    std::push_heap(heap.begin(), heap.end(), greater);
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<uint32_t>(i));
  constexpr uint32_t kDead = UINT32_MAX;
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), greater);
    const Cache::Impl::HeapItem top = heap.back();
    heap.pop_back();
    const uint32_t pos = top.pos;
    if (ids[pos] == kDead || next[pos] == kNone) continue;
    const Tables::Merge m = t.Lookup(ids[pos], ids[next[pos]]);
    if (m.rank != top.rank) continue;  // the pair changed since this entry was pushed
    const uint32_t right = next[pos];
    ids[pos] = m.id;
    ids[right] = kDead;
    next[pos] = next[right];
    if (next[right] != kNone) prev[next[right]] = pos;
    push(pos);
    if (prev[pos] != kNone) push(prev[pos]);
  }
  for (uint32_t i = 0; i != kNone; i = next[i]) out->push_back(ids[i]);
}

void Gpt2Tokenizer::EncodePiece(std::string_view piece, std::vector<uint32_t>* ids) const {
  if (piece.empty()) return;
  Cache::Impl scratch;
  MergePiece(*tables_, piece, scratch, ids);
}

void Gpt2Tokenizer::EncodeOrdinary(std::string_view text, Cache::Impl& c,
                                   std::vector<uint32_t>* ids) const {
  const Tables& t = *tables_;
  internal::Pretokenize(text, [&](std::string_view piece) {
    if (piece.size() == 1) {
      ids->push_back(t.byte_id[static_cast<unsigned char>(piece[0])]);
      return;
    }
    if (piece.size() > Cache::Impl::kMaxKeyBytes) {
      MergePiece(t, piece, c, ids);
      return;
    }
    uint64_t k0, k1;
    Cache::Impl::Pack(piece, &k0, &k1);
    Cache::Impl::Entry& e = c.Slot(k0, k1);
    if (e.k0 == k0 && e.k1 == k1) {
      ids->insert(ids->end(), e.ids, e.ids + e.num_ids);
      return;
    }
    const size_t before = ids->size();
    MergePiece(t, piece, c, ids);
    const size_t produced = ids->size() - before;
    if (produced <= Cache::Impl::kMaxIds) {
      e.k0 = k0;
      e.k1 = k1;
      e.num_ids = static_cast<uint32_t>(produced);
      std::memcpy(e.ids, ids->data() + before, produced * sizeof(uint32_t));
    }
  });
}

void Gpt2Tokenizer::Encode(std::string_view text, Cache& cache, std::vector<uint32_t>* ids) const {
  if (!options_.endoftext_is_special) {
    EncodeOrdinary(text, *cache.impl_, ids);
    return;
  }
  // Literal <|endoftext|> is split out first; the text on each side is tokenized on its own.
  size_t pos = 0;
  while (true) {
    const size_t hit = text.find(kEndOfText, pos);
    if (hit == std::string_view::npos) break;
    EncodeOrdinary(text.substr(pos, hit - pos), *cache.impl_, ids);
    ids->push_back(eod_id_);
    pos = hit + kEndOfText.size();
  }
  EncodeOrdinary(text.substr(pos), *cache.impl_, ids);
}

std::string Gpt2Tokenizer::Decode(const std::vector<uint32_t>& ids) const {
  std::string out;
  for (uint32_t id : ids) {
    if (id < tables_->id_bytes.size()) out += tables_->id_bytes[id];
  }
  return out;
}

}  // namespace pileprep
