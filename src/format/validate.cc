#include "pileprep/validate.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "format/mapped_file.h"
#include "jsonl/utf8.h"
#include "oneapi/tbb/blocked_range.h"
#include "oneapi/tbb/parallel_reduce.h"
#include "pileprep/status_macros.h"
#include "pipeline/thread_arena.h"

namespace pileprep {

static_assert(std::endian::native == std::endian::little, "pileprep reads host-order arrays");

namespace {

using internal::LoadUnaligned;

// Bytes per element of each Megatron dtype code (1..8); 0 for unknown codes.
size_t ItemSizeForCode(uint8_t code) {
  switch (code) {
    case 1: case 2: return 1;
    case 3: case 8: return 2;
    case 4: case 7: return 4;
    case 5: case 6: return 8;
    default: return 0;
  }
}

const char* CodeName(uint8_t code) {
  static constexpr const char* kNames[] = {"?",     "uint8",   "int8",    "int16", "int32",
                                           "int64", "float64", "float32", "uint16"};
  return code <= 8 ? kNames[code] : "unknown";
}

std::string Plural(uint64_t n, const char* one, const char* many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

class Checker {
 public:
  Checker(std::string_view idx, std::string_view bin, const std::string& prefix,
          const ValidateOptions& options)
      : idx_(idx), bin_(bin), options_(options),
        idx_name_(prefix + ".idx"), bin_name_(prefix + ".bin") {
    report_.prefix = prefix;
    report_.idx_bytes = idx.size();
    report_.bin_bytes = bin.size();
  }

  // The .idx and .bin are file mappings (ValidateDataset): their pages are released behind the
  // scans, so that RSS does not grow with the dataset (a shard job's rerun validates every finished
  // shard; mapped pages count in RSS, which a scheduler may enforce). Never for ValidateBuffers'
  // memory, which MADV_DONTNEED would zero.
  void ReleaseMappingsBehindScans() { release_mapped_ = true; }

  // `arrays` false: the header and the .idx's size only, not the arrays nor the .bin's size (an
  // .idx with a hole: its arrays would be read as zeros, page by page, for a verdict the hole
  // already gives).
  ValidationReport Run(bool arrays = true) {
    if (CheckHeader() && arrays) {
      CheckArrays();
      CheckBinSize();
      if (options_.check_tokens && token_dtype_ok_) CheckTokens();
    }
    return std::move(report_);
  }

 private:
  // Records an occurrence of `kind`; the message is built only for the first one.
  template <typename MessageFn>
  void Add(const char* kind, int64_t offset, int64_t index, uint64_t count, MessageFn&& message) {
    for (Violation& v : report_.violations) {
      if (v.kind == kind) {
        v.count += count;
        return;
      }
    }
    Violation v;
    v.kind = kind;
    v.file_offset = offset;
    v.index = index;
    v.count = count;
    v.message = message();
    report_.violations.push_back(std::move(v));
  }
  bool Has(const char* kind) const { return report_.Find(kind) != nullptr; }

  std::string At(const std::string& file, uint64_t offset) const {
    return absl::StrCat(file, ": byte ", offset, ": ");
  }

  // Magic, version, dtype and size. Returns whether the arrays can be read.
  bool CheckHeader() {
    const size_t size = idx_.size();
    if (size < sizeof(kIdxMagic) || std::memcmp(idx_.data(), kIdxMagic, sizeof(kIdxMagic)) != 0) {
      Add("idx_magic", 0, -1, 1, [&] {
        return absl::StrCat(At(idx_name_, 0),
                            "bad magic: this is not a Megatron index (expected \"MMIDIDX\\0\\0\"); "
                            "check the path, or regenerate the dataset");
      });
    }
    if (size < kIdxHeaderBytes) {
      Add("idx_size", static_cast<int64_t>(size), -1, 1, [&] {
        return absl::StrCat(At(idx_name_, size), "the file ends inside the ", kIdxHeaderBytes,
                            "-byte header (", size,
                            " bytes): the .idx is truncated; copy it again or regenerate it");
      });
      return false;
    }
    const uint64_t version = LoadUnaligned<uint64_t>(idx_.data() + kIdxVersionOffset);
    if (version != kIdxVersion) {
      Add("idx_version", kIdxVersionOffset, -1, 1, [&] {
        return absl::StrCat(At(idx_name_, kIdxVersionOffset), "version ", version, ", expected ",
                            kIdxVersion,
                            ": Megatron and NeMo readers refuse it; regenerate the dataset");
      });
    }
    code_ = LoadUnaligned<uint8_t>(idx_.data() + kIdxDTypeOffset);
    report_.dtype_code = code_;
    itemsize_ = ItemSizeForCode(code_);
    token_dtype_ok_ = code_ == static_cast<uint8_t>(TokenDType::kInt32) ||
                      code_ == static_cast<uint8_t>(TokenDType::kUint16);
    if (token_dtype_ok_) {
      report_.dtype = static_cast<TokenDType>(code_);
      if (code_ == static_cast<uint8_t>(TokenDType::kUint16) && options_.vocab_size > 65536) {
        // The token range check cannot see this: an id above 65535 was wrapped when written.
        Add("dtype", kIdxDTypeOffset, -1, 1, [&] {
          return absl::StrCat(At(idx_name_, kIdxDTypeOffset),
                              "dtype uint16 cannot hold the ids of a vocabulary of ",
                              options_.vocab_size,
                              " (Megatron writes int32 from 65500 on): any id above 65535 was "
                              "wrapped when written; regenerate the dataset");
        });
      }
    } else {
      Add("dtype", kIdxDTypeOffset, -1, 1, [&] {
        std::string why;
        if (code_ == 6 || code_ == 7) {
          why = absl::StrCat(" (", CodeName(code_),
                             "): float token types are read differently by NeMo (code 7 as "
                             "float64) and Megatron (float32)");
        } else if (itemsize_ != 0) {
          why = absl::StrCat(" (", CodeName(code_), "): not a dtype any GPT writer uses for tokens");
        } else {
          why = " is not a Megatron dtype code at all (1..8)";
        }
        return absl::StrCat(At(idx_name_, kIdxDTypeOffset), "dtype code ", code_, why,
                            "; expected 8 = uint16 (vocabulary < 65500) or 4 = int32; "
                            "regenerate the dataset (pointer, .bin size and token checks "
                            "skipped)");
      });
    }
    num_sequences_ = LoadUnaligned<uint64_t>(idx_.data() + kIdxSequenceCountOffset);
    num_doc_indices_ = LoadUnaligned<uint64_t>(idx_.data() + kIdxDocumentCountOffset);
    report_.sequences = num_sequences_;
    report_.documents = num_doc_indices_ > 0 ? num_doc_indices_ - 1 : 0;

    // Bound the counts by the file size first so that the arithmetic cannot overflow.
    const uint64_t body = size - kIdxHeaderBytes;
    const bool fits = num_sequences_ <= body / 12 && num_doc_indices_ <= body / 8 &&
                      12 * num_sequences_ + 8 * num_doc_indices_ <= body;
    if (!fits) {
      Add("idx_size", kIdxSequenceCountOffset, -1, 1, [&] {
        return absl::StrCat(
            At(idx_name_, kIdxSequenceCountOffset), "the header declares ",
            Plural(num_sequences_, "sequence", "sequences"), " and ", num_doc_indices_,
            " document indices, which need ", kIdxHeaderBytes, " + 12×", num_sequences_, " + 8×",
            num_doc_indices_, " bytes, but the file has only ", size,
            " bytes: the .idx is truncated (an interrupted copy or write?) or its header is "
            "corrupt; copy it again or regenerate it");
      });
      return false;
    }
    const uint64_t expected = kIdxHeaderBytes + 12 * num_sequences_ + 8 * num_doc_indices_;
    if (size != expected) {
      const uint64_t extra = size - expected;
      Add("idx_size", static_cast<int64_t>(expected), -1, 1, [&] {
        std::string why =
            extra == num_sequences_ && extra > 0
                ? " — exactly one byte per sequence: a multimodal sequence_modes array, which "
                  "text datasets never have"
                : "";
        // Trailing bytes are junk after the arrays, or the arrays of a larger count than the
        // header's, which readers then take from the wrong places: say which counts fit.
        std::string fits;
        if (const uint64_t rest = size - kIdxHeaderBytes - 8 * num_doc_indices_; rest % 12 == 0) {
          absl::StrAppend(&fits, " ", rest / 12, " sequences (byte ", kIdxSequenceCountOffset,
                          " says ", num_sequences_, ")");
        }
        if (const uint64_t rest = size - kIdxHeaderBytes - 12 * num_sequences_; rest % 8 == 0) {
          absl::StrAppend(&fits, fits.empty() ? " " : ", or ", rest / 8, " document indices (byte ",
                          kIdxDocumentCountOffset, " says ", num_doc_indices_, ")");
        }
        return absl::StrCat(
            At(idx_name_, expected), "the .idx is ", size, " bytes but its header describes ",
            expected, " (", kIdxHeaderBytes, " + 12×", num_sequences_, " + 8×", num_doc_indices_,
            "): ", Plural(extra, "trailing byte", "trailing bytes"), why,
            ": junk after the arrays, which readers ignore, or a header count too small (a "
            "sequence count too small has readers take the arrays from the wrong places)",
            fits.empty() ? "" : absl::StrCat(" (the size fits", fits, ")"), "; regenerate it");
      });
    }
    lengths_offset_ = kIdxHeaderBytes;
    pointers_offset_ = lengths_offset_ + 4 * num_sequences_;
    doc_offset_ = pointers_offset_ + 8 * num_sequences_;
    return true;
  }

  int32_t Length(uint64_t i) const { return LoadUnaligned<int32_t>(idx_.data() + lengths_offset_ + 4 * i); }
  int64_t Pointer(uint64_t i) const {
    return LoadUnaligned<int64_t>(idx_.data() + pointers_offset_ + 8 * i);
  }
  // Token t of the .bin, int32 ones as their unsigned bits (as ScanTokens compares them).
  uint64_t TokenAt(uint64_t t) const {
    const char* p = bin_.data() + t * itemsize_;
    return itemsize_ == 2 ? LoadUnaligned<uint16_t>(p)
                          : static_cast<uint32_t>(LoadUnaligned<int32_t>(p));
  }
  int64_t DocIndex(uint64_t j) const { return LoadUnaligned<int64_t>(idx_.data() + doc_offset_ + 8 * j); }

  // Whether sequence k's stored length alone disagrees with the pointers: the stored pointers end
  // where the .bin does while the lengths' sum does not (lengths_against_bin_), pointers[k+1] lies
  // a whole number of tokens past pointers[k], and the next sequence's own length agrees with the
  // pointer after it (or, for the last sequence, with the .bin's end). Damaged pointers instead
  // leave the lengths' sum at the .bin's size, and an isolated one disagrees with the lengths on
  // both of its sides.
  bool LengthDisagreesWithSoundPointers(uint64_t k) const {
    if (!lengths_against_bin_) return false;
    const __int128 span = static_cast<__int128>(Pointer(k + 1)) - Pointer(k);
    if (span <= 0 || span % static_cast<__int128>(itemsize_) != 0 ||
        span / static_cast<__int128>(itemsize_) > std::numeric_limits<int32_t>::max()) {
      return false;
    }
    const __int128 next_end =
        static_cast<__int128>(Pointer(k + 1)) + static_cast<__int128>(itemsize_) * Length(k + 1);
    return k + 2 < num_sequences_ ? next_end == Pointer(k + 2)
                                  : next_end == static_cast<__int128>(bin_.size());
  }

  void CheckArrays() {
    // Lengths and pointers in one pass. The expected pointer follows the definition (running sum of
    // the stored lengths), so one bad length shows up in every later pointer: `count` says how many.
    __int128 expected = 0;  // cannot overflow: S < 2^61, |length| < 2^31, itemsize ≤ 8
    __int128 total = 0;
    uint64_t tokens = 0;
    bool previous_pointer_ok = true;
    if (token_dtype_ok_ && num_sequences_ > 0) {
      // A first pass over the lengths, for LengthDisagreesWithSoundPointers.
      __int128 sum = 0;
      internal::MappedFile::ReleaseBehind behind(idx_, lengths_offset_, release_mapped_);
      for (uint64_t i = 0; i < num_sequences_; ++i) {
        sum += Length(i);
        behind.At(lengths_offset_ + 4 * i);
      }
      behind.Finish(lengths_offset_ + 4 * num_sequences_);
      const __int128 size = static_cast<__int128>(bin_.size());
      const uint64_t last = num_sequences_ - 1;
      lengths_against_bin_ =
          sum * static_cast<__int128>(itemsize_) != size &&
          static_cast<__int128>(Pointer(last)) + static_cast<__int128>(itemsize_) * Length(last) ==
              size;
    }
    internal::MappedFile::ReleaseBehind lengths_behind(idx_, lengths_offset_, release_mapped_);
    internal::MappedFile::ReleaseBehind pointers_behind(idx_, pointers_offset_, release_mapped_);
    for (uint64_t i = 0; i < num_sequences_; ++i) {
      lengths_behind.At(lengths_offset_ + 4 * i);  // a page holding entry i - 1, read below, may
                                                   // go: it is read again from the page cache
      pointers_behind.At(pointers_offset_ + 8 * i);
      const int32_t length = Length(i);
      if (length <= 0) {
        if (first_bad_length_ < 0) first_bad_length_ = static_cast<int64_t>(i);
        const int64_t off = static_cast<int64_t>(lengths_offset_ + 4 * i);
        if (length == 0) {
          Add("zero_length", off, static_cast<int64_t>(i), 1, [&] {
            return absl::StrCat(At(idx_name_, off), "sequence ", i,
                                " has length 0: Megatron's writer never writes an empty "
                                "sequence (an empty text adds none), so the writer lost its "
                                "tokens or the index is corrupt; regenerate the dataset");
          });
        } else {
          Add("negative_length", off, static_cast<int64_t>(i), 1, [&] {
            return absl::StrCat(At(idx_name_, off), "sequence ", i, " has negative length ",
                                length,
                                " (a corrupted index or a 32-bit overflow in the writer); "
                                "regenerate the dataset");
          });
        }
      } else {
        tokens += static_cast<uint32_t>(length);
      }
      const int64_t pointer = Pointer(i);
      if (token_dtype_ok_ && static_cast<__int128>(pointer) != expected && i > 0 &&
          previous_pointer_ok && LengthDisagreesWithSoundPointers(i - 1)) {
        // The previous sequence's length is the fault, not this pointer and every one after it
        // (each off by the same amount from the running sum): follow the stored pointers on.
        const int64_t span = (pointer - Pointer(i - 1)) / static_cast<int64_t>(itemsize_);
        const int32_t bad = Length(i - 1);
        if (bad > 0) {
          const int64_t off = static_cast<int64_t>(lengths_offset_ + 4 * (i - 1));
          Add("length", off, static_cast<int64_t>(i - 1), 1, [&] {
            return absl::StrCat(
                At(idx_name_, off), "sequence ", i - 1, " has length ", bad,
                " but its pointer and the next one's are ", Plural(span, "token", "tokens"),
                " apart, and the pointers after them agree with the lengths: this length is "
                "corrupt; readers would ",
                bad > span ? absl::StrCat("read ", Plural(bad - span, "token", "tokens"),
                                          " of the next sequence into this one")
                           : absl::StrCat("drop its last ", Plural(span - bad, "token", "tokens")),
                "; regenerate the index");
          });
        }
        expected = pointer;
      }
      previous_pointer_ok = !token_dtype_ok_ || static_cast<__int128>(pointer) == expected;
      if (!previous_pointer_ok) {
        const int64_t off = static_cast<int64_t>(pointers_offset_ + 8 * i);
        const __int128 want = expected;
        Add("pointer", off, static_cast<int64_t>(i), 1, [&] {
          const __int128 diff = static_cast<__int128>(pointer) - want;
          std::string how;
          // A 32-bit writer wraps only past 2 GiB, and stores the low 32 bits (unsigned) or
          // their sign extension (int32): any other difference in the upper bytes is damage.
          const uint32_t low = static_cast<uint32_t>(static_cast<uint64_t>(want));
          if (want >= (__int128{1} << 31) && want <= std::numeric_limits<int64_t>::max() &&
              (pointer == static_cast<int64_t>(low) ||
               pointer == static_cast<int64_t>(static_cast<int32_t>(low)))) {
            how =
                " (equal in the low 32 bits: the writer computed pointers in 32 bits, "
                "which wrap past 2 or 4 GiB)";
          } else if (diff % static_cast<__int128>(itemsize_) == 0) {
            const __int128 tok = diff / static_cast<__int128>(itemsize_);
            how = absl::StrCat(" (", tok > 0 ? "+" : "", static_cast<int64_t>(tok),
                               tok == 1 || tok == -1 ? " token)" : " tokens)");
          } else {
            how = absl::StrCat(" (", static_cast<int64_t>(diff),
                               " bytes: not even a whole number of tokens)");
          }
          if (first_bad_length_ >= 0 && static_cast<uint64_t>(first_bad_length_) < i) {
            absl::StrAppend(&how, ", which follows from the bad length of sequence ",
                            first_bad_length_);
          }
          return absl::StrCat(
              At(idx_name_, off), "sequence ", i, ": pointer is byte ", pointer,
              " but the lengths before it put it at byte ", static_cast<int64_t>(want), how,
              "; readers would read this sequence from the wrong place; regenerate the index");
        });
      }
      expected += static_cast<__int128>(itemsize_) * length;
      total += length;
    }
    report_.tokens = tokens;
    expected_bin_ = expected;
    total_tokens_ = total;

    if (num_doc_indices_ == 0) {
      Add("document_count", kIdxDocumentCountOffset, -1, 1, [&] {
        return absl::StrCat(At(idx_name_, kIdxDocumentCountOffset),
                            "document count 0: document_indices must hold at least its leading 0 "
                            "(documents + 1 entries); regenerate the index");
      });
      return;
    }
    const int64_t first = DocIndex(0);
    if (first != 0) {
      Add("doc_index_start", static_cast<int64_t>(doc_offset_), 0, 1, [&] {
        return absl::StrCat(At(idx_name_, doc_offset_), "document_indices[0] is ", first,
                            ", expected 0; regenerate the index");
      });
    }
    int64_t previous = first;
    internal::MappedFile::ReleaseBehind behind(idx_, doc_offset_, release_mapped_);
    for (uint64_t j = 1; j < num_doc_indices_; ++j) {
      behind.At(doc_offset_ + 8 * (j - 1));
      const int64_t value = DocIndex(j);
      if (value > previous) ++nonempty_documents_;
      if (value < previous) {
        const int64_t off = static_cast<int64_t>(doc_offset_ + 8 * j);
        Add("doc_index_order", off, static_cast<int64_t>(j), 1, [&] {
          return absl::StrCat(At(idx_name_, off), "document_indices[", j, "] is ", value,
                              ", less than document_indices[", j - 1, "] = ", previous,
                              ": document boundaries must be non-decreasing; regenerate the "
                              "index");
        });
      }
      previous = value;
    }
    const int64_t last = DocIndex(num_doc_indices_ - 1);
    if (last < 0 || static_cast<uint64_t>(last) != num_sequences_) {
      const int64_t off = static_cast<int64_t>(doc_offset_ + 8 * (num_doc_indices_ - 1));
      Add("doc_index_end", off, static_cast<int64_t>(num_doc_indices_ - 1), 1, [&] {
        return absl::StrCat(At(idx_name_, off), "the last document index (document_indices[",
                            num_doc_indices_ - 1, "]) is ", last, " but the index has ",
                            Plural(num_sequences_, "sequence", "sequences"),
                            ": current Megatron asserts they are equal; regenerate the index");
      });
    }
  }

  bool DocumentIndicesSound() const {
    return !Has("document_count") && !Has("doc_index_start") && !Has("doc_index_order") &&
           !Has("doc_index_end");
  }

  // Megatron's 2023 EOD off-by-one wrote EOD after each sequence (per_sequence) or each document's
  // last sequence, uncounted: the .bin then holds it where each such unit ends, counting the EODs
  // before it. Looks at the first 64 units: how many (> 0) when one token, *eod (GPT-2's 50256 or
  // another vocabulary's: not necessarily options_.eod_id), is at each; 0 when they differ; -1 when
  // the tokens are not to be read (check_tokens = false).
  int EodsWhereTheBugPutsThem(bool per_sequence, uint64_t* eod) const {
    if (!options_.check_tokens) return -1;
    constexpr uint64_t kUnits = 64;
    uint64_t position = 0;  // in tokens
    uint64_t units = 0;
    const uint64_t tokens = bin_.size() / itemsize_;
    auto eod_at = [&](uint64_t t) {
      if (t >= tokens) return false;
      const uint64_t v = TokenAt(t);
      if (units == 0) *eod = v;
      return v == *eod;
    };
    for (uint64_t d = 0;
         units < kUnits && d + 1 < (per_sequence ? num_sequences_ + 1 : num_doc_indices_); ++d) {
      const uint64_t begin = per_sequence ? d : static_cast<uint64_t>(DocIndex(d));
      const uint64_t end = per_sequence ? d + 1 : static_cast<uint64_t>(DocIndex(d + 1));
      if (begin == end) continue;  // an empty document: no sequence, no EOD
      for (uint64_t i = begin; i < end; ++i) position += static_cast<uint32_t>(Length(i));
      if (!eod_at(position)) return 0;
      ++position;
      ++units;
    }
    return static_cast<int>(units);
  }

  void CheckBinSize() {
    // With a dtype that is not a token dtype the itemsize is a guess at best: every size-based
    // check would only restate the dtype violation.
    if (!token_dtype_ok_) return;
    const __int128 actual = static_cast<__int128>(bin_.size());
    if (total_tokens_ == 0 && num_sequences_ == 0 && bin_.empty()) {
      Add("empty_dataset", 0, -1, 1, [&] {
        return absl::StrCat(bin_name_,
                            ": the dataset holds no tokens: no reader can open it (cannot mmap "
                            "an empty file); do not publish it");
      });
      return;
    }
    if (actual == expected_bin_) return;
    // Negative lengths (reported above) make the sum no size to compare against, negative or
    // not (lengths [3, -2, 2] of 5 tokens were "2 tokens that no sequence covers").
    if (expected_bin_ < 0 || Has("negative_length")) return;
    const int64_t want = static_cast<int64_t>(expected_bin_);
    Add("bin_size", static_cast<int64_t>(std::min(actual, expected_bin_)), -1, 1, [&] {
      std::string head = absl::StrCat(bin_name_, ": the .bin is ", bin_.size(),
                                      " bytes but the index describes ", want, " (", itemsize_,
                                      " × ", want / static_cast<int64_t>(itemsize_), " tokens): ");
      // With sound pointers and lengths a size off by whole tokens at the end may be the last
      // sequence's length, too long or too short: that sequence, its length and where they are.
      const bool last_sound = num_sequences_ > 0 && !Has("pointer") && !Has("length");
      auto last_sequence = [&] {
        const uint64_t last = num_sequences_ - 1;
        return absl::StrCat("(", last, ", of length ", Length(last), " at ", idx_name_, " byte ",
                            lengths_offset_ + 4 * last, ", from .bin byte ", Pointer(last), ")");
      };
      if (actual > expected_bin_) {
        const uint64_t extra = static_cast<uint64_t>(actual - expected_bin_);
        // The bug left one uncounted EOD per document that had a sequence: per sequence, unless
        // sentences were split (several sequences a document, EOD only after the last).
        const bool per_sequence = extra == itemsize_ * num_sequences_;
        const bool per_document =
            !per_sequence && extra == itemsize_ * nonempty_documents_ && DocumentIndicesSound();
        // (After a `length` or `pointer` fault the lengths say no more where units end.)
        uint64_t eod = 0;
        const int eods = (per_sequence || per_document) && !Has("length") && !Has("pointer")
                             ? EodsWhereTheBugPutsThem(per_sequence, &eod)
                             : 0;
        if (eods != 0) {
          std::string where = " (the tokens not read)";
          if (eods > 0) {
            where = absl::StrCat(", and token ", eod, " where each of the first ", eods, " ends",
                                 eod == options_.eod_id ? " (EOD)" : " (its vocabulary's EOD?)");
          }
          return absl::StrCat(
              head, Plural(extra, "extra byte", "extra bytes"), ", one uncounted token per ",
              per_sequence ? "sequence" : "document (its sentences split into sequences)", where,
              " — the signature of Megatron's 2023-06..08 EOD off-by-one (EOD written but not "
              "counted in the lengths, so every sequence after the first is read misaligned; no "
              "reader notices); regenerate the dataset with a fixed preprocess");
        }
        if (itemsize_ == 2 && actual == 2 * expected_bin_) {
          return absl::StrCat(head,
                              "exactly twice the size: the .bin holds 4-byte (int32) tokens "
                              "but the .idx says uint16 (dtype code 8), or the pair does not "
                              "belong together; regenerate the dataset");
        }
        if (extra % itemsize_ == 0) {
          // With sound pointers and lengths the surplus lies after the last sequence, so that
          // sequence's length, cut short, reads the same as bytes appended: named, as the
          // truncated case below names it (the pair was blamed alone).
          std::string last_length;
          if (last_sound && !per_sequence && !per_document) {
            last_length = absl::StrCat(", all after the last sequence ", last_sequence(),
                                       ": that length is corrupt (short by ",
                                       Plural(extra / itemsize_, "token", "tokens"), "),");
          }
          return absl::StrCat(head, Plural(extra, "extra byte", "extra bytes"), " (",
                              Plural(extra / itemsize_, "token", "tokens"),
                              " that no sequence covers)", last_length,
                              last_length.empty() ? ": " : " ",
                              "the .bin and .idx do not belong together, or the writer lost "
                              "count; regenerate the dataset");
        }
        return absl::StrCat(head, Plural(extra, "extra byte", "extra bytes"),
                            ", not even a whole number of tokens: the .bin and .idx do not belong "
                            "together; regenerate the dataset");
      }
      if (itemsize_ == 4 && 2 * actual == expected_bin_) {
        return absl::StrCat(head,
                            "exactly half the size: the .bin holds 2-byte (uint16) tokens "
                            "but the .idx says int32 (dtype code 4), or the .bin was cut "
                            "at its half; regenerate the dataset, or copy the .bin again");
      }
      const uint64_t missing = static_cast<uint64_t>(expected_bin_ - actual);
      if (last_sound && static_cast<__int128>(Pointer(num_sequences_ - 1)) < actual) {
        // Only the last sequence runs past the end: the .bin cut inside it, or its length damaged
        // (2^31 - 1 in place of 3 reads the same), which the sizes cannot tell apart.
        return absl::StrCat(head, Plural(missing, "byte", "bytes"),
                            " missing, all in the last sequence ", last_sequence(),
                            ": the .bin is truncated inside it (an interrupted copy, "
                            "download or write?) or that length is corrupt, and training would "
                            "read past the .bin's end; copy it again or regenerate it");
      }
      return absl::StrCat(head, Plural(missing, "byte", "bytes"),
                          " missing: the .bin is truncated (an interrupted copy, download or "
                          "write?) and training would read past its end; copy it again or "
                          "regenerate it");
    });
  }

  // Index of the sequence holding byte `offset` of the .bin, by the (verified) pointers.
  // -1 when no sequence covers it (bytes past the last sequence).
  int64_t SequenceAt(uint64_t offset) const {
    uint64_t lo = 0, hi = num_sequences_;  // first i with Pointer(i) > offset
    while (lo < hi) {
      const uint64_t mid = lo + (hi - lo) / 2;
      if (static_cast<uint64_t>(Pointer(mid)) <= offset) lo = mid + 1; else hi = mid;
    }
    if (lo == 0) return -1;
    const uint64_t i = lo - 1;
    return offset < SequenceEnd(i) ? static_cast<int64_t>(i) : -1;
  }

  // The byte where sequence i ends (its pointer and length as stored).
  uint64_t SequenceEnd(uint64_t i) const {
    return static_cast<uint64_t>(Pointer(i)) + itemsize_ * static_cast<uint32_t>(Length(i));
  }

  struct Found {
    uint64_t first = std::numeric_limits<uint64_t>::max();  // token or sequence index
    uint64_t value = 0;
    uint64_t count = 0;
    static Found Join(const Found& a, const Found& b) {
      Found r = a.first <= b.first ? a : b;
      r.count = a.count + b.count;
      return r;
    }
  };

  // Tokens are scanned in blocks of kBlock, each whole in one task: which blocks are all zero does
  // not depend on how the work was split.
  static constexpr uint64_t kBlock = 4096;
  struct Scanned {
    Found out_of_range;  // tokens >= vocab_size
    Found zero_blocks;   // blocks of kBlock tokens 0 (first: a token index)
    Found no_eod;        // with expect_eod: units whose last token is not EOD (first: the unit)
    static Scanned Join(const Scanned& a, const Scanned& b) {
      return {Found::Join(a.out_of_range, b.out_of_range),
              Found::Join(a.zero_blocks, b.zero_blocks), Found::Join(a.no_eod, b.no_eod)};
    }
  };

  // --append-eod puts EOD at the end of each document: its last sequence (a document of several,
  // as Megatron's --split-sentences writes, has EOD only on its last sentence). With
  // document_indices broken (already a violation) every sequence is looked at. One unit per
  // document (its last sequence; none for an empty document), or per sequence.
  //
  // Unit u's last sequence: the sequence before the next document's first (an empty document's is
  // the unit's before it), or u itself; -1 for empty documents at the start.
  uint64_t NumUnits(bool docs_ok) const { return docs_ok ? num_doc_indices_ - 1 : num_sequences_; }
  int64_t LastSequenceOf(uint64_t u, bool docs_ok) const {
    return docs_ok ? DocIndex(u + 1) - 1 : static_cast<int64_t>(u);
  }
  // The byte where unit u's last token ends (pointers sound: sequences tile the .bin in order, none
  // empty): non-decreasing in u, so each span's first unit is found in one pass (FirstUnitOfSpans).
  uint64_t UnitEnd(uint64_t u, bool docs_ok) const {
    const int64_t i = LastSequenceOf(u, docs_ok);
    return i < 0 ? 0 : SequenceEnd(static_cast<uint64_t>(i));
  }
  static constexpr uint64_t kUnitsWorthReleasing = uint64_t{1} << 17;  // 1 MiB of document indices
  static constexpr uint64_t kSpanTokens = uint64_t{1} << 20;  // a token scan task's span (blocks)
  // Releases the .idx entries of units [first, last] (their document indices, and their last
  // sequences' lengths and pointers), where the .idx is a file mapping.
  void ReleaseIdxOfUnits(uint64_t first, uint64_t last, bool docs_ok) const {
    if (!release_mapped_) return;
    const uint64_t units = NumUnits(docs_ok);
    last = std::min(last, units);
    if (first >= last) return;
    uint64_t seq_from = first, seq_to = last + 1;
    if (docs_ok) {
      internal::MappedFile::ReleaseMapped(idx_.data(), idx_.size(), doc_offset_ + 8 * first,
                                          doc_offset_ + 8 * (last + 1));
      seq_from = static_cast<uint64_t>(std::max<int64_t>(DocIndex(first), 1)) - 1;
      seq_to = static_cast<uint64_t>(DocIndex(last)) + 1;
    }
    seq_to = std::min(seq_to, num_sequences_);
    if (seq_from >= seq_to) return;
    internal::MappedFile::ReleaseMapped(idx_.data(), idx_.size(), lengths_offset_ + 4 * seq_from,
                                        lengths_offset_ + 4 * seq_to);
    internal::MappedFile::ReleaseMapped(idx_.data(), idx_.size(), pointers_offset_ + 8 * seq_from,
                                        pointers_offset_ + 8 * seq_to);
  }

  // The first unit ending after the first byte of each span of kSpanTokens tokens of the .bin (the
  // token scan's tasks), found in one pass over the index in order, its pages released behind it:
  // a binary search per span instead read pages all over a large .idx (each fault maps a whole
  // window or folio around it), and they stayed resident (650 MB of a 680 MB .idx).
  std::vector<uint64_t> FirstUnitOfSpans(uint64_t spans, bool docs_ok) const {
    const uint64_t units = NumUnits(docs_ok);
    const uint64_t span_bytes = kSpanTokens * itemsize_;
    std::vector<uint64_t> first(spans + 1, units);
    internal::MappedFile::ReleaseBehind docs(idx_, doc_offset_, release_mapped_);
    internal::MappedFile::ReleaseBehind lengths(idx_, lengths_offset_, release_mapped_);
    internal::MappedFile::ReleaseBehind pointers(idx_, pointers_offset_, release_mapped_);
    uint64_t t = 0;
    for (uint64_t u = 0; u < units && t < spans; ++u) {
      const uint64_t end = UnitEnd(u, docs_ok);
      const int64_t i = LastSequenceOf(u, docs_ok);
      while (t < spans && end > t * span_bytes) first[t++] = u;
      if (docs_ok) docs.At(doc_offset_ + 8 * u);
      if (i > 0) {  // the entries before this unit's last sequence
        lengths.At(lengths_offset_ + 4 * static_cast<uint64_t>(i));
        pointers.At(pointers_offset_ + 8 * static_cast<uint64_t>(i));
      }
    }
    return first;
  }

  // The units from `u` (the span's first) on whose last token ends by byte `to` of the .bin,
  // checked for EOD into `found`: done by the token scan's task for that span while its pages are
  // mapped, so that each page of the .bin is read (and faulted in) once, before the scan releases
  // it.
  void CheckEodIn(uint64_t u, uint64_t to, bool docs_ok, Found* found) const {
    const uint64_t units = NumUnits(docs_ok);
    const uint64_t from = u;
    for (; u < units; ++u) {
      const uint64_t end = UnitEnd(u, docs_ok);
      if (end > to) break;
      if (docs_ok && DocIndex(u + 1) == DocIndex(u)) continue;  // an empty document: no EOD
      const uint64_t last = TokenAt(end / itemsize_ - 1);
      if (last != options_.eod_id) {
        if (found->count == 0 || u < found->first) {  // the unit: the document, if docs_ok
          found->first = u;
          found->value = last;
        }
        ++found->count;
      }
    }
    // The index entries this read go with the span's .bin pages (with millions of documents the
    // .idx is large too), where the span holds many units (documents of a few tokens): each
    // madvise makes the kernel flush the other threads' TLBs, a cost per span that documents of
    // ordinary length (20 index bytes for kilobytes of tokens) do not repay. Their entries stay
    // resident: at most about 20 bytes per document of RSS at the end of the scan.
    if (u - from >= kUnitsWorthReleasing)
      ReleaseIdxOfUnits(from > 0 ? from - 1 : 0, u + 1, docs_ok);
  }

  // " (in sequence A)" or " (in sequences A to B)" for the `size` bytes from `byte` on; "" where no
  // sequence holds the first byte.
  std::string SequencesOf(uint64_t byte, uint64_t size) const {
    const int64_t a = SequenceAt(byte);
    if (a < 0) return "";
    const int64_t b = SequenceAt(byte + size - 1);
    return b > a ? absl::StrCat(" (in sequences ", a, " to ", b, ")")
                 : absl::StrCat(" (in sequence ", a, ")");
  }

  // Whether the kBlock tokens from token `first` on lie in kBlock sequences, one each (pointers
  // verified: sequences tile the .bin, none empty). GPT-2 never writes id 0 twice in a row within
  // one sequence, but sequences of the single token 0 ("!" without --append-eod) follow one another
  // as often as the input has such documents: a block of them is no fill.
  bool OneTokenPerSequence(uint64_t first) const {
    const int64_t a = SequenceAt(first * itemsize_);
    const int64_t b = SequenceAt((first + kBlock - 1) * itemsize_);
    return a >= 0 && b >= 0 && static_cast<uint64_t>(b - a) == kBlock - 1;
  }

  template <typename T>
  Scanned ScanTokens(const char* data, uint64_t first_block, uint64_t end_block,
                     uint64_t num_tokens, bool pointers_ok) const {
    // Copy blocks into an aligned buffer (the mapping is aligned, but memcpy keeps this defined for
    // any bytes) and take the maximum: a branch-free loop the compiler vectorizes.
    T buffer[kBlock];
    Scanned scanned;
    Found& found = scanned.out_of_range;
    const uint64_t vocab = options_.vocab_size;
    for (uint64_t b = first_block; b < end_block; ++b) {
      const uint64_t i = b * kBlock;
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kBlock, num_tokens - i));
      std::memcpy(buffer, data + i * sizeof(T), n * sizeof(T));
      // int32 tokens are compared as unsigned, so negative ones are out of range too.
      using U = std::make_unsigned_t<T>;
      U max = 0;
      for (size_t k = 0; k < n; ++k) max = std::max(max, static_cast<U>(buffer[k]));
      if (max == 0 && n == kBlock && !(pointers_ok && OneTokenPerSequence(i))) {
        if (scanned.zero_blocks.count == 0) scanned.zero_blocks.first = i;
        ++scanned.zero_blocks.count;
      }
      if (max < vocab) continue;
      for (size_t k = 0; k < n; ++k) {
        const U v = static_cast<U>(buffer[k]);
        if (v >= vocab) {
          if (found.count == 0) {
            found.first = i + k;
            found.value = static_cast<uint64_t>(static_cast<int64_t>(buffer[k]));
          }
          ++found.count;
        }
      }
    }
    return scanned;
  }

  void ReleaseBin(uint64_t from, uint64_t to) const {
    if (release_mapped_) internal::MappedFile::ReleaseMapped(bin_.data(), bin_.size(), from, to);
  }

  bool Cancelled() const {
    return options_.cancel != nullptr && options_.cancel->load(std::memory_order_relaxed);
  }

  void CheckTokens() {
    report_.tokens_checked = true;
    const uint64_t num_tokens = bin_.size() / itemsize_;
    const bool pointers_ok =
        !Has("pointer") && !Has("length") && !Has("negative_length") && !Has("zero_length");
    internal::ThreadArena arena(options_.threads);  // threads as asked, even above the cores
    // With document_indices broken (already a violation) --expect-eod looks at every sequence.
    const bool docs_ok = DocumentIndicesSound();
    Scanned scanned;
    // A truncated .bin (reported as bin_size) leaves the units past its end unchecked.
    const bool check_eod = options_.expect_eod && pointers_ok;
    // Tasks of fixed spans of kSpanTokens tokens (whole blocks), whose first units are known.
    const uint64_t num_blocks = (num_tokens + kBlock - 1) / kBlock;
    constexpr uint64_t kSpanBlocks = kSpanTokens / kBlock;
    const uint64_t spans = (num_blocks + kSpanBlocks - 1) / kSpanBlocks;
    const std::vector<uint64_t> first_unit =
        check_eod ? FirstUnitOfSpans(spans, docs_ok) : std::vector<uint64_t>();
    arena.execute([&] {
      scanned = tbb::parallel_reduce(
          tbb::blocked_range<uint64_t>(0, spans, 1), Scanned{},
          [&](const tbb::blocked_range<uint64_t>& r, Scanned acc) {
            for (uint64_t t = r.begin(); t < r.end(); ++t) {
              if (Cancelled()) return acc;
              const uint64_t b0 = t * kSpanBlocks, b1 = std::min(b0 + kSpanBlocks, num_blocks);
              Scanned f = itemsize_ == 2
                              ? ScanTokens<uint16_t>(bin_.data(), b0, b1, num_tokens, pointers_ok)
                              : ScanTokens<int32_t>(bin_.data(), b0, b1, num_tokens, pointers_ok);
              const uint64_t from = b0 * kBlock * itemsize_;
              const uint64_t to = std::min(b1 * kBlock, num_tokens) * itemsize_;
              if (check_eod) CheckEodIn(first_unit[t], to, docs_ok, &f.no_eod);
              ReleaseBin(from, to);
              acc = Scanned::Join(acc, f);
            }
            return acc;
          },
          Scanned::Join);
    });
    const Found& no_eod = scanned.no_eod;
    const Found& bad = scanned.out_of_range;
    if (bad.count > 0) {
      const uint64_t byte = bad.first * itemsize_;
      const int64_t seq = pointers_ok && num_sequences_ > 0 ? SequenceAt(byte) : -1;
      Add("token_range", static_cast<int64_t>(byte), seq, bad.count, [&] {
        std::string where =
            seq >= 0 ? absl::StrCat(" (sequence ", seq, ", position ",
                                    (byte - static_cast<uint64_t>(Pointer(seq))) / itemsize_, ")")
                     : (pointers_ok ? " (after the last sequence)" : "");
        const int64_t value = itemsize_ == 4 ? static_cast<int32_t>(bad.value)
                                             : static_cast<int64_t>(bad.value);
        return absl::StrCat(At(bin_name_, byte), "token ", value, " at token ", bad.first, where,
                            " is outside the vocabulary (", options_.vocab_size,
                            " ids): the embedding lookup would fail or read garbage; ",
                            Plural(bad.count, "token is", "tokens are"),
                            " out of range; regenerate the dataset (or pass the right "
                            "--vocab-size)");
      });
    }
    const Found& zeros = scanned.zero_blocks;
    if (zeros.count > 0 && options_.check_zero_fill) {
      const uint64_t byte = zeros.first * itemsize_;
      const uint64_t block_bytes = kBlock * itemsize_;
      const int64_t seq = pointers_ok && num_sequences_ > 0 ? SequenceAt(byte) : -1;
      Add("zero_fill", static_cast<int64_t>(byte), seq, zeros.count, [&] {
        return absl::StrCat(
            At(bin_name_, byte), "bytes ", byte, "..", byte + block_bytes - 1,
            seq >= 0 ? SequencesOf(byte, block_bytes) : std::string(), " are all zeros: token 0, ",
            kBlock, " times in a row",
            zeros.count > 1 ? absl::StrCat(" (the first of ", zeros.count, " such blocks, ",
                                           zeros.count * block_bytes, " bytes)")
                            : "",
            ", which a tokenizer does not write (GPT-2's BPE never writes id 0 twice in a row "
            "within a sequence): the .bin is likely zero-filled where its data should be (a copy "
            "or download cut short into a preallocated file, or a copy made dense of one with "
            "holes); copy it again or regenerate it (validate --allow-holes accepts such runs)");
      });
    }
    if (no_eod.count > 0) {
      // The first unit lacking EOD: a document (named too: `inspect --doc` takes documents) and
      // its last sequence, or a sequence when the document indices are broken.
      const uint64_t doc = no_eod.first;
      const uint64_t i = docs_ok ? static_cast<uint64_t>(DocIndex(doc + 1)) - 1 : no_eod.first;
      const uint64_t byte = static_cast<uint64_t>(Pointer(i)) +
                            itemsize_ * (static_cast<uint32_t>(Length(i)) - 1);
      // Signed for int32, as token_range and inspect show a corrupt -1.
      const int64_t last =
          itemsize_ == 4 ? static_cast<int32_t>(no_eod.value) : static_cast<int64_t>(no_eod.value);
      Add("eod", static_cast<int64_t>(byte), static_cast<int64_t>(i), no_eod.count, [&] {
        return absl::StrCat(At(bin_name_, byte), "sequence ", i,
                            docs_ok ? absl::StrCat(" (the last of document ", doc, ")") : "",
                            " ends with token ", last, ", not EOD ", options_.eod_id, "; ",
                            docs_ok ? Plural(no_eod.count, "document lacks", "documents lack")
                                    : Plural(no_eod.count, "sequence lacks", "sequences lack"),
                            docs_ok ? " a final EOD"
                                    : " a final EOD (the document indices are "
                                      "broken, so every sequence was looked at)",
                            ": the dataset was not made with --append-eod");
      });
    }
  }

  std::string_view idx_, bin_;
  bool release_mapped_ = false;  // idx_ and bin_ are file mappings: release pages behind scans
  const ValidateOptions& options_;
  std::string idx_name_, bin_name_;
  ValidationReport report_;
  uint8_t code_ = 0;
  int64_t first_bad_length_ = -1;
  size_t itemsize_ = 0;
  bool token_dtype_ok_ = false;
  bool lengths_against_bin_ =
      false;  // Σ lengths misses the .bin's size, the pointers' end meets it
  uint64_t num_sequences_ = 0, num_doc_indices_ = 0;
  uint64_t nonempty_documents_ = 0;  // documents of at least one sequence (document indices rise)
  uint64_t lengths_offset_ = 0, pointers_offset_ = 0, doc_offset_ = 0;
  __int128 expected_bin_ = 0, total_tokens_ = 0;
};

}  // namespace

const Violation* ValidationReport::Find(std::string_view kind) const {
  for (const Violation& v : violations) {
    if (v.kind == kind) return &v;
  }
  return nullptr;
}

ValidationReport ValidateBuffers(std::string_view idx, std::string_view bin,
                                 const std::string& prefix, const ValidateOptions& options) {
  return Checker(idx, bin, prefix, options).Run();
}

absl::StatusOr<ValidationReport> ValidateDataset(const std::string& prefix,
                                                 const ValidateOptions& options) {
  using internal::MappedFile;
  MappedFile::Holes holes[2];
  PILEPREP_ASSIGN_OR_RETURN(
      MappedFile idx,
      MappedFile::Open(prefix + ".idx", MappedFile::Access::kSequential, &holes[0]));
  PILEPREP_ASSIGN_OR_RETURN(
      MappedFile bin,
      MappedFile::Open(prefix + ".bin", MappedFile::Access::kSequential, &holes[1]));
  ValidateOptions effective = options;
  std::string_view bin_view = bin.view();
  // A hole already fails the pair (below), found without reading a page: the tokens are not read
  // then either (an incomplete 20 GB download was read in full, its holes as zeros, for nothing).
  const bool holed = options.check_holes && (holes[0].count > 0 || holes[1].count > 0);
  if (holed) effective.check_tokens = false;
  if (!effective.check_tokens) {
    // Only the size of the .bin matters then; never touch its pages.
    effective.expect_eod = false;
  }
  // Nor the .idx's arrays when it has a hole: read, a sparse .idx claiming gigabytes was read
  // whole, its zeros taken for lengths 0 (a violation for each), in time and page cache that grow
  // with the size it claims rather than the data it holds.
  const bool idx_holed = options.check_holes && holes[0].count > 0;
  Checker checker(idx.view(), bin_view, prefix, effective);
  checker.ReleaseMappingsBehindScans();
  ValidationReport report = checker.Run(!idx_holed);
  // A reader takes a hole's zeros for data (tokens 0, or lengths and pointers of 0) and no other
  // check need notice: a preallocated .bin cut short has the right size. A writer writes every
  // byte, so a hole most likely means the file is incomplete; a sparse copy of runs of zeros is
  // the exception, which check_holes = false accepts. (Found by lseek: no page read.)
  // One violation of kind "hole" (a report keeps one per kind) for both files: the first file's
  // first hole is its place, the other file's holes named after it and counted in.
  Violation hole;
  std::string also;
  for (int f = 0; f < 2 && options.check_holes; ++f) {
    const MappedFile::Holes& h = holes[f];
    if (h.count == 0) continue;
    const std::string path = prefix + (f == 0 ? ".idx" : ".bin");
    if (hole.count > 0) {
      also = absl::StrCat("; ", path, " has holes too (the first at bytes ", h.first, "..",
                          h.first_end - 1, ", ", h.count, " in all, ", h.bytes, " bytes)");
      hole.count += h.count;
      continue;
    }
    hole.kind = "hole";
    hole.file_offset = static_cast<int64_t>(h.first);
    hole.count = h.count;
    hole.message = absl::StrCat(
        path, ": byte ", h.first, ": bytes ", h.first, "..", h.first_end - 1,
        " hold no data (a hole in the file",
        h.count > 1 ? absl::StrCat(", the first of ", h.count, ", ", h.bytes, " bytes in all") : "",
        ")");
  }
  if (hole.count > 0) {
    absl::StrAppend(
        &hole.message, also,
        ": they read as zeros, which a reader takes for data; a writer writes every byte, so the "
        "file is likely incomplete (a copy or download cut short into a preallocated or extended "
        "file): copy it again or regenerate it (a copy made sparse of a file that holds runs of "
        "zero bytes has holes too: validate --allow-holes accepts them); ",
        idx_holed ? "the index's arrays and the tokens were not read" : "the tokens were not read");
    report.violations.push_back(std::move(hole));
  }
  if (options.cancel != nullptr && options.cancel->load()) {
    return absl::CancelledError(absl::StrCat(prefix, ": validation cancelled"));
  }
  return report;
}

std::string FormatValidationReport(const ValidationReport& r) {
  if (r.ok()) {
    return absl::StrCat(r.prefix, ": ok (", DTypeName(r.dtype), ", ",
                        Plural(r.sequences, "sequence", "sequences"), ", ",
                        Plural(r.documents, "document", "documents"), ", ",
                        Plural(r.tokens, "token", "tokens"),
                        r.tokens_checked ? "" : "; tokens not checked", ")\n");
  }
  std::string out;
  for (const Violation& v : r.violations) {
    absl::StrAppend(&out, v.message);
    if (v.count > 1) absl::StrAppend(&out, " [", v.kind, ": ", v.count, " occurrences]");
    else absl::StrAppend(&out, " [", v.kind, "]");
    out += '\n';
  }
  return out;
}

std::string ValidationReportToJson(const ValidationReport& r) {
  std::string out = absl::StrCat(
      "{\"prefix\":", internal::JsonQuote(r.prefix), ",\"ok\":", r.ok() ? "true" : "false",
      ",\"dtype_code\":", r.dtype_code, ",\"dtype\":\"",
      r.dtype_code == 4 || r.dtype_code == 8 ? DTypeName(r.dtype) : "invalid",
      "\",\"sequences\":", r.sequences, ",\"documents\":", r.documents, ",\"tokens\":", r.tokens,
      ",\"bin_bytes\":", r.bin_bytes, ",\"idx_bytes\":", r.idx_bytes,
      ",\"tokens_checked\":", r.tokens_checked ? "true" : "false", ",\"violations\":[");
  for (size_t i = 0; i < r.violations.size(); ++i) {
    const Violation& v = r.violations[i];
    absl::StrAppend(&out, i ? "," : "", "{\"kind\":", internal::JsonQuote(v.kind),
                    ",\"message\":", internal::JsonQuote(v.message),
                    ",\"file_offset\":", v.file_offset, ",\"index\":", v.index,
                    ",\"count\":", v.count, "}");
  }
  out += "]}";
  return out;
}

}  // namespace pileprep
