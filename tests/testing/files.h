// Whole-file helpers for tests: read or write every byte of a file at once.
#ifndef PILEPREP_TESTS_TESTING_FILES_H_
#define PILEPREP_TESTS_TESTING_FILES_H_

#include <string>

namespace pileprep::testing {

// The file's bytes; "" when it cannot be opened (tests assert on the content or existence).
std::string ReadFile(const std::string& path);

// Replaces the file with `data`.
void WriteFile(const std::string& path, const std::string& data);

// A fresh directory under the temp directory ($TMPDIR, else /tmp), named `label` plus a unique
// suffix so that concurrent test processes (ctest -j, several build trees) never share one;
// removed with everything in it when the object goes, so test runs leave nothing behind.
class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& label);
  ScopedTempDir(ScopedTempDir&& other) noexcept;
  ScopedTempDir& operator=(ScopedTempDir&&) = delete;
  ~ScopedTempDir();

  const std::string& path() const { return path_; }

 private:
  std::string path_;  // empty once moved from
};

}  // namespace pileprep::testing

#endif  // PILEPREP_TESTS_TESTING_FILES_H_
