// libFuzzer entry point over the .idx reader and the validator (see idx_fuzz_target.h).
//   cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DPILEPREP_BUILD_FUZZERS=ON
//   cmake --build build-fuzz --target idx_fuzzer
//   build-fuzz/bin/idx_fuzzer -max_total_time=300 corpus-work tests/fuzz/corpus/idx
#include <cstddef>
#include <cstdint>

#include "fuzz/idx_fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return pileprep::fuzz::RunIdxFuzzInput(data, size);
}
