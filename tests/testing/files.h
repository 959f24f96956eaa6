// Whole-file helpers for tests: read or write every byte of a file at once.
#ifndef PILEPREP_TESTS_TESTING_FILES_H_
#define PILEPREP_TESTS_TESTING_FILES_H_

#include <string>

namespace pileprep::testing {

// The file's bytes; "" when it cannot be opened (tests assert on the content or existence).
std::string ReadFile(const std::string& path);

// Replaces the file with `data`.
void WriteFile(const std::string& path, const std::string& data);

}  // namespace pileprep::testing

#endif  // PILEPREP_TESTS_TESTING_FILES_H_
