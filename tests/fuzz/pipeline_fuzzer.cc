// libFuzzer entry point over the pipeline (see pipeline_fuzz_target.h for the input layout and
// oracles).
//   cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DPILEPREP_BUILD_FUZZERS=ON
//   cmake --build build-fuzz --target pipeline_fuzzer
//   build-fuzz/bin/pipeline_fuzzer -max_total_time=300 corpus-work tests/fuzz/corpus/pipeline
#include <cstddef>
#include <cstdint>

#include "fuzz/pipeline_fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return pileprep::fuzz::RunPipelineFuzzInput(data, size);
}
