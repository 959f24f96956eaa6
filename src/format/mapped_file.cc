#include "format/mapped_file.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "format/file_util.h"
#include "pileprep/status_macros.h"

namespace pileprep::internal {

namespace {

MappedFile::Holes FindHoles(int fd, uint64_t size) {
  MappedFile::Holes h;
  for (off_t at = 0; static_cast<uint64_t>(at) < size;) {
    const off_t hole = ::lseek(fd, at, SEEK_HOLE);  // the file's end where it cannot tell
    if (hole < 0 || static_cast<uint64_t>(hole) >= size) break;
    const off_t data = ::lseek(fd, hole, SEEK_DATA);  // ENXIO: a hole to the end
    const uint64_t end = data < 0 ? size : std::min<uint64_t>(static_cast<uint64_t>(data), size);
    if (h.count == 0) {
      h.first = static_cast<uint64_t>(hole);
      h.first_end = end;
    }
    ++h.count;
    h.bytes += end - static_cast<uint64_t>(hole);
    at = static_cast<off_t>(end);
  }
  return h;
}

}  // namespace

absl::StatusOr<MappedFile> MappedFile::Open(const std::string& path, Access access, Holes* holes) {
  PILEPREP_ASSIGN_OR_RETURN(UniqueFd fd, OpenForRead(path));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError(errno, path, "stat");
  // A regular file: OpenForRead refuses anything else.
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<size_t>(st.st_size);
  if (holes != nullptr) *holes = FindHoles(fd.get(), file.size_);
  if (file.size_ == 0) return file;
  void* p = ::mmap(nullptr, file.size_, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return ErrnoError(errno, path, "mmap");
  // Advice only; failure changes nothing but speed.
  ::madvise(p, file.size_, access == Access::kSequential ? MADV_SEQUENTIAL : MADV_RANDOM);
  file.data_ = static_cast<const char*>(p);
  file.mapped_ = true;
  return file;
}

MappedFile::~MappedFile() { Unmap(); }

void MappedFile::ReleaseMapped(const char* base, size_t size, size_t from, size_t to) {
  to = std::min(to, size);
  if (base == nullptr || from >= to) return;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(base) + from + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(base) + to) / page * page;
  if (begin < end) {
    ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, false)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Unmap();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, false);
  }
  return *this;
}

void MappedFile::Unmap() {
  if (mapped_) ::munmap(const_cast<char*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
  mapped_ = false;
}

}  // namespace pileprep::internal
