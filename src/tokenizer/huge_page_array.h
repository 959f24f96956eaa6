// A fixed-size, zero-filled array of trivially copyable T backed by its own anonymous mapping that
// asks the kernel for transparent huge pages (madvise(MADV_HUGEPAGE)).
//
// Why: the tokenizer's hot tables (the pair-rank table, the per-thread pre-token cache) are several
// megabytes probed at random, one probe per pre-token. With 4 KB pages nearly every probe also misses
// the TLB; with 2 MB pages the tables are covered by a handful of TLB entries. Debian's default THP
// mode is "madvise", so without the advice they get 4 KB pages. Where huge pages are unavailable the
// advice fails silently and the array works the same, only slower.
//
// Not thread-safe to resize; concurrent reads are fine.
#ifndef PILEPREP_SRC_TOKENIZER_HUGE_PAGE_ARRAY_H_
#define PILEPREP_SRC_TOKENIZER_HUGE_PAGE_ARRAY_H_

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

// Under ThreadSanitizer, code that only fills memory no other thread can see yet (new pages, the
// short tier of a pre-token cache being bound) goes uninstrumented: TSan keeps shadow memory for
// what each checked access touches, and faulting in the shadow of a 56 MiB cache took each process
// of the TSan test run about 2 of the 3 seconds a one-line job took there (1.0-1.2 s without). In
// a correct program these bytes reach another thread only after the hand-off that publishes them
// (a thread's join, a pipeline stage), which TSan still checks; a program that shared the array or
// the cache without one would race on the instrumented pointer or `bound` beside them as well.
#if defined(__SANITIZE_THREAD__)
#define PILEPREP_NO_TSAN __attribute__((no_sanitize("thread")))
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PILEPREP_NO_TSAN __attribute__((no_sanitize("thread")))
#endif
#endif
#ifdef PILEPREP_NO_TSAN
// What such code calls must be inlined into it to go uninstrumented too, and GCC does not inline a
// function into one whose sanitizer attributes differ unless told to; elsewhere, and in builds
// without TSan, inlining stays the compiler's choice (the tokenizer's hot path among them).
#define PILEPREP_TSAN_INLINE __attribute__((always_inline))
#else
#define PILEPREP_NO_TSAN
#define PILEPREP_TSAN_INLINE
#endif

namespace pileprep::internal {

// Faults in bytes [from, to) of a new anonymous mapping at p: one byte written per 4 KB page (a new
// anonymous page is zero already, and a write to any byte of a 2 MB page faults in all of it).
PILEPREP_NO_TSAN inline void FaultInPages(char* p, size_t from, size_t to) {
  for (size_t off = from; off < to; off += 4096) static_cast<volatile char*>(p)[off] = 0;
}

template <typename T>
class HugePageArray {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>,
                "elements are zero bytes when created and are never destroyed");

 public:
  HugePageArray() = default;
  explicit HugePageArray(size_t n) { Reset(n); }
  ~HugePageArray() { Release(); }
  HugePageArray(const HugePageArray&) = delete;
  HugePageArray& operator=(const HugePageArray&) = delete;
  HugePageArray(HugePageArray&& o) noexcept { *this = std::move(o); }  // leaves `o` empty
  HugePageArray& operator=(HugePageArray&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }

  // Replaces the contents with n zero-filled elements. Throws std::bad_alloc when memory is short,
  // like std::vector.
  void Reset(size_t n) {
    Release();
    if (n == 0) return;
    constexpr size_t kHuge = size_t{2} << 20;
    // Below 1 MB a huge page would mostly be waste (and RSS): plain 4 KB pages.
    const size_t page = n * sizeof(T) < kHuge / 2 ? 4096 : kHuge;
    bytes_ = (n * sizeof(T) + page - 1) / page * page;
    // mmap returns 4 KB-aligned memory; for 2 MB pages, over-allocate by one so the array can start
    // on a huge-page boundary, and give back what is left over on either side.
    const size_t extra = page == kHuge ? page : 0;
    void* p = mmap(nullptr, bytes_ + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    char* base = static_cast<char*>(p);
    char* aligned = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(base) + page - 1) & ~(page - 1));
    if (aligned > base) munmap(base, aligned - base);
    const size_t tail = (base + bytes_ + extra) - (aligned + bytes_);
    if (tail > 0) munmap(aligned + bytes_, tail);
    if (page == kHuge) madvise(aligned, bytes_, MADV_HUGEPAGE);  // advice: failure leaves 4 KB pages
    // Fault the pages in now, as std::vector's zero-fill would, rather than in the first lookups.
    // A memset of the whole array wrote each byte a second time: 56 MiB per pre-token cache.
    FaultInPages(aligned, 0, bytes_);
    data_ = reinterpret_cast<T*>(aligned);
    size_ = n;
  }

  // Grows to n elements (n <= size(): nothing), keeping the contents, all of the old capacity();
  // the elements past the old capacity() are zero. From 1 MB
  // on (2 MB pages) the pages are moved, not copied (mremap into an aligned spot): growing a
  // buffer of G bytes needs no second G alongside it, which a line near the parser's 4 GiB ceiling
  // doubled to 8 GiB. Below that, a new array and a copy. Throws std::bad_alloc, as Reset.
  void Grow(size_t n) {
    constexpr size_t kHuge = size_t{2} << 20;
    if (n <= size_) return;  // never shrinks
    if (data_ == nullptr || bytes_ < kHuge || n * sizeof(T) < kHuge / 2) {
      HugePageArray bigger(n);
      // All of the old mapping: callers use capacity(), not only size().
      if (data_ != nullptr)
        std::memcpy(static_cast<void*>(bigger.data_), data_, std::min(bytes_, bigger.bytes_));
      *this = std::move(bigger);
      return;
    }
    const size_t bytes = (n * sizeof(T) + kHuge - 1) / kHuge * kHuge;
    if (bytes > bytes_) {
      // Reserve a spot with room to align it, move the pages there, give back what is left over.
      void* spot = mmap(nullptr, bytes + kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (spot == MAP_FAILED) throw std::bad_alloc();
      char* base = static_cast<char*>(spot);
      char* aligned =
          reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(base) + kHuge - 1) & ~(kHuge - 1));
      void* moved = mremap(data_, bytes_, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, aligned);
      if (moved == MAP_FAILED) {
        // The array is as it was. Only the reservation's edges are surely still ours: the kernel
        // may have unmapped its middle (the target) before failing, and another thread may have
        // mapped something there since, which a munmap of all of it would take away. The middle,
        // if still reserved, is address space only (PROT_NONE, no memory).
        if (aligned > base) munmap(base, aligned - base);
        munmap(aligned + bytes, (base + bytes + kHuge) - (aligned + bytes));
        throw std::bad_alloc();
      }
      if (aligned > base) munmap(base, aligned - base);
      const size_t tail = (base + bytes + kHuge) - (aligned + bytes);
      if (tail > 0) munmap(aligned + bytes, tail);
      madvise(aligned, bytes, MADV_HUGEPAGE);
      FaultInPages(static_cast<char*>(moved), bytes_, bytes);
      data_ = reinterpret_cast<T*>(aligned);
      bytes_ = bytes;
    }
    size_ = n;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  // Elements that fit in the mapping (size() rounded up to whole pages).
  size_t capacity() const { return bytes_ / sizeof(T); }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

 private:
  void Release() {
    if (data_ != nullptr) munmap(data_, bytes_);
    data_ = nullptr;
    size_ = bytes_ = 0;
  }
  T* data_ = nullptr;
  size_t size_ = 0;
  size_t bytes_ = 0;
};

}  // namespace pileprep::internal

#endif  // PILEPREP_SRC_TOKENIZER_HUGE_PAGE_ARRAY_H_
