// Minimal .npy (format 1.0) reading and writing for the loader's index cache: little-endian
// int32/int64/uint32/int16 arrays of one or two dimensions, C order.
#ifndef PILEPREP_SRC_LOADER_NPY_H_
#define PILEPREP_SRC_LOADER_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pileprep::internal {

// "<i4", "<i8", "<u4", "<i2".
struct NpyArray {
  std::string descr;
  std::vector<int64_t> shape;
  std::vector<int64_t> values;  // widened
};

// The whole file contents of an array with `descr` and `shape` holding `values` (narrowed).
std::string EncodeNpy(const std::string& descr, const std::vector<int64_t>& shape,
                      const int64_t* values, size_t count);
std::string EncodeNpy(const std::string& descr, const std::vector<int64_t>& shape,
                      const int32_t* values, size_t count);
// Parses what EncodeNpy writes (and numpy's own 1-D/2-D C-order files of those dtypes).
absl::StatusOr<NpyArray> DecodeNpy(const std::string& bytes, const std::string& name);

// Reads a whole file; NotFound when missing.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);
// Writes `bytes` to a unique temporary beside `path`, fsyncs it and renames it to `path`, so that
// concurrent writers of identical contents and readers never see a partial file.
absl::Status WriteFileAtomically(const std::string& path, const std::string& bytes);
// mkdir -p.
absl::Status MakeDirectories(const std::string& dir);

}  // namespace pileprep::internal

#endif  // PILEPREP_SRC_LOADER_NPY_H_
