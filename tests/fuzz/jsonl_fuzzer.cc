// libFuzzer entry point over the jsonl stage (see jsonl_fuzz_target.h for the input layout and oracles).
//   cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DPILEPREP_BUILD_FUZZERS=ON
//   cmake --build build-fuzz --target jsonl_fuzzer
//   build-fuzz/bin/jsonl_fuzzer -max_total_time=300 corpus-work tests/fuzz/corpus/jsonl
#include <cstddef>
#include <cstdint>

#include "fuzz/jsonl_fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return pileprep::fuzz::RunJsonlFuzzInput(data, size);
}
