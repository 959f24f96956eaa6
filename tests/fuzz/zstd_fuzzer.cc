// libFuzzer entry point over the zstd stage (see zstd_fuzz_target.h for the input layout and oracles).
//   cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DPILEPREP_BUILD_FUZZERS=ON
//   cmake --build build-fuzz --target zstd_fuzzer
//   build-fuzz/bin/zstd_fuzzer -max_total_time=300 corpus-work tests/fuzz/corpus/zstd
#include <cstddef>
#include <cstdint>

#include "fuzz/zstd_fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return pileprep::fuzz::RunZstdFuzzInput(data, size);
}
