#!/usr/bin/env bash
# Set-up, build, and every test through CTest. Extra arguments go to ctest (e.g. -L unit).
#
#   scripts/test.sh               Release build in build/, every test.
#   scripts/test.sh --sanitize    AddressSanitizer + UndefinedBehaviorSanitizer build in build-asan/,
#                                 every test (any report aborts the test: halt_on_error, no recovery;
#                                 reports are also collected, and any fails the run).
#   scripts/test.sh --tsan        ThreadSanitizer build in build-tsan/: every test that runs threads
#                                 (pipeline, validate, merge, HTTP source, loader; golden and CLI tests) against
#                                 a libtbb built with -fsanitize=thread, which scripts/build_tsan_tbb.sh
#                                 builds once from Debian's source package into ~/.cache/pileprep
#                                 (TSAN_TBB_DIR=<dir of a TBBConfig.cmake> uses another one).
#   scripts/test.sh --scalar      The SIMD paths (SSE2) compiled out (-DPILEPREP_NO_SIMD) in build-scalar/:
#                                 the tokenizer, pipeline and golden tests through the portable code
#                                 that non-x86 machines (aarch64) run.
#   scripts/test.sh --all         Plain, then --sanitize, --tsan and --scalar (what .ci/run runs).
#
# PILEPREP_BUILD_DIR overrides the build directory of the plain mode.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

mode=plain
case "${1:-}" in
  --sanitize|--asan) mode=asan; shift ;;
  --tsan) mode=tsan; shift ;;
  --scalar) mode=scalar; shift ;;
  --all) mode=all; shift ;;
esac

# The tests start their own loopback servers and choose ranks themselves: the caller's proxies
# (libcurl would send their 127.0.0.1 requests to the proxy) and rank variables (a CI job under srun,
# torchrun or MPI would give each test only part of its shards) must not reach them, nor another
# vocabulary named by PILEPREP_TOKENIZER_DIR (the tests expect the one shipped). Set-up and
# builds keep them: apt-get may need the proxy.
clean_env=(env)
for v in http_proxy HTTP_PROXY https_proxy HTTPS_PROXY all_proxy ALL_PROXY no_proxy NO_PROXY \
         NGC_ARRAY_INDEX NGC_ARRAY_SIZE RANK WORLD_SIZE LOCAL_WORLD_SIZE TORCHELASTIC_RUN_ID \
         OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE SLURM_JOB_ID SLURM_PROCID \
         SLURM_NTASKS SLURM_STEP_NUM_TASKS SLURM_ARRAY_TASK_ID SLURM_ARRAY_TASK_MIN \
         SLURM_ARRAY_TASK_MAX SLURM_ARRAY_TASK_STEP SLURM_ARRAY_TASK_COUNT PILEPREP_TOKENIZER_DIR; do
  clean_env+=(-u "$v")
done

# Parallel jobs for builds and ctest: PILEPREP_JOBS, else the CPUs this process may use (nproc
# counts the affinity mask, not a cgroup's CPU quota: a 2-CPU container on a 64-core host would run
# 64 sanitizer tests at once and time them out; set PILEPREP_JOBS there).
jobs=${PILEPREP_JOBS:-$(nproc)}

# GCC 12's sanitizer runtimes cannot place their shadow memory when the kernel randomises mmap with
# more than 28 bits (vm.mmap_rnd_bits, raised by newer kernels): "unexpected memory mapping".
# Address randomisation off (setarch -R, inherited by every child) avoids it, for the builds too:
# gtest_discover_tests runs each instrumented test binary at build time to list its tests.
no_aslr=()
sanitizer_no_aslr() {
  no_aslr=()
  if setarch "$(uname -m)" -R true 2>/dev/null; then
    no_aslr=(setarch "$(uname -m)" -R)
  elif [[ $(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 0) -gt 28 ]]; then
    echo "test.sh: vm.mmap_rnd_bits is $(cat /proc/sys/vm/mmap_rnd_bits) and setarch -R is refused" \
      "(a container's seccomp profile?): the sanitizer runs may fail with 'unexpected memory" \
      "mapping'; on the host: sysctl vm.mmap_rnd_bits=28, or run the container with" \
      "--security-opt seccomp=unconfined" >&2
  fi
}

run_plain() {
  scripts/build.sh
  local build_dir=${PILEPREP_BUILD_DIR:-build}
  "${clean_env[@]}" ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" "$@"
}

# Sanitizer builds: -O1 with frame pointers keeps them about 2-3x slower than Release, not 10x.
# The Python module and the install smoke test are left out: an instrumented extension cannot be
# loaded into an uninstrumented python3 without LD_PRELOAD, and the installed static library
# would need the sanitizer runtime in the consumer's link. Both are covered by the plain run.
run_asan() {
  scripts/setup.sh
  local flags="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPILEPREP_BUILD_PYTHON=OFF \
    -DPILEPREP_TEST_TIMEOUT_SCALE=2 \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
  sanitizer_no_aslr
  "${no_aslr[@]}" cmake --build build-asan -j "$jobs"
  # Reports also go to build-asan/asan-reports/ (log_path) and are printed at the end: a test that
  # expects some failure (exit 1) would otherwise take a sanitizer's abort for it.
  local reports=$root/build-asan/asan-reports
  rm -rf "$reports" && mkdir -p "$reports"
  local rc=0
  ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:log_path='$reports/asan'${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
  UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:log_path='$reports/ubsan'${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
  LSAN_OPTIONS="suppressions='$root/tests/sanitizers/lsan.supp'${LSAN_OPTIONS:+:$LSAN_OPTIONS}" \
  PILEPREP_SANITIZER=asan \
    "${no_aslr[@]}" "${clean_env[@]}" ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE 'install|python|fuzz' "$@" || rc=$?
  if compgen -G "$reports/*" >/dev/null; then
    echo "test.sh: AddressSanitizer / UndefinedBehaviorSanitizer reports ($reports):" >&2
    cat "$reports"/* >&2
    return 1
  fi
  return $rc
}

# ThreadSanitizer: the targets whose tests run threads (the TBB pipeline, validate's parallel_reduce,
# the download thread of the HTTP source) against a libtbb built with -fsanitize=thread:
# scripts/build_tsan_tbb.sh builds it once from Debian's source package into ~/.cache/pileprep
# (TSAN_TBB_DIR=<dir of its TBBConfig.cmake> uses another one). Debian's own libtbb is not
# instrumented; tests/sanitizers/tsan.supp says why there is no blanket libtbb suppression instead.
# Reports go to build-tsan/tsan-reports/ (log_path) and are printed at the end: one from a process
# whose exit status a test does not look at still fails the run.
run_tsan() {
  scripts/setup.sh
  local tbb_dir=${TSAN_TBB_DIR:-}
  if [[ -z $tbb_dir ]]; then tbb_dir=$(TSAN_TBB_JOBS=${TSAN_TBB_JOBS:-$jobs} scripts/build_tsan_tbb.sh); fi
  [[ -f $tbb_dir/TBBConfig.cmake ]] || { echo "test.sh: no TBBConfig.cmake in '$tbb_dir'" >&2; return 1; }
  local flags="-O1 -g -fno-omit-frame-pointer -fsanitize=thread"
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPILEPREP_BUILD_PYTHON=OFF \
    -DTBB_DIR="$tbb_dir" -DPILEPREP_TEST_TIMEOUT_SCALE=3 \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" >/dev/null
  sanitizer_no_aslr
  "${no_aslr[@]}" cmake --build build-tsan -j "$jobs" \
    --target pileprep pipeline_test validate_test merge_test fetch_http_source_test indexed_dataset_test \
    fuzz_corpus_replay_test loader_test pileprep_fs_fault_shim
  # The executables must load the instrumented libtbb (CMake's build RPATH names its directory),
  # not Debian's: otherwise every stage hand-off is a false report again.
  local exe lib
  for exe in build-tsan/bin/{pileprep,pipeline_test,validate_test,merge_test,fetch_http_source_test,indexed_dataset_test,fuzz_corpus_replay_test}; do
    lib=$(ldd "$exe" | awk '$1 ~ /^libtbb\.so/ { print $3 }')
    if [[ -z $lib || $(nm -D "$lib") != *__tsan_* ]]; then
      echo "test.sh: $exe loads '${lib:-no libtbb}', not a libtbb built with -fsanitize=thread" >&2
      return 1
    fi
  done
  # The tests of those seven executables (the .bin writer's direct mode has a thread of its own; of
  # the fuzz corpora's replay, the pipeline's, PipelineFuzzCorpus) and
  # the loader's (no TBB: ranks opening one dataset at once, threads reading samples at once); the
  # CLI ones run the pipeline, validate's parallel_reduce, merge and downloads (fault server) through
  # build-tsan/bin/pileprep.
  local tsan_tests='^(Pipeline|ValidateTest|IndexedDatasetTest|BufferedFileWriter|IndexedDatasetReader|FindDatasetPrefixes|MergeTest|HttpSource|RedactUrl|CheckHeader|GptDataset|golden\.|cli\.)'
  local reports=$root/build-tsan/tsan-reports
  rm -rf "$reports" && mkdir -p "$reports"
  local rc=0
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions='$root/tests/sanitizers/tsan.supp':log_path='$reports/report'${TSAN_OPTIONS:+:$TSAN_OPTIONS}" \
  PILEPREP_SANITIZER=tsan \
    "${no_aslr[@]}" "${clean_env[@]}" ctest --test-dir build-tsan --output-on-failure -j "$jobs" \
      -R "$tsan_tests" "$@" || rc=$?
  if compgen -G "$reports/report*" >/dev/null; then
    echo "test.sh: ThreadSanitizer reports ($reports):" >&2
    cat "$reports"/report* >&2
    return 1
  fi
  return $rc
}

# Portable code paths: every SIMD fast path has a scalar twin, which only a non-x86 machine would
# otherwise run. Release build, the tests whose code has such twins.
run_scalar() {
  scripts/setup.sh
  cmake -S . -B build-scalar -G Ninja -DCMAKE_BUILD_TYPE=Release -DPILEPREP_BUILD_PYTHON=OFF \
    -DCMAKE_CXX_FLAGS=-DPILEPREP_NO_SIMD >/dev/null
  cmake --build build-scalar -j "$jobs" --target pileprep pretokenizer_test \
    pretokenizer_differential_test bpe_differential_test gpt2_cases_test gpt2_tokenizer_test \
    fuzz_corpus_replay_test pipeline_test synthetic_vocab_test jsonl_test
  "${clean_env[@]}" ctest --test-dir build-scalar --output-on-failure -j "$jobs" \
    -R '^(Pretokenizer|PretokenizerDifferential|BpeDifferential|Gpt2Cases|Gpt2Tokenizer|SyntheticVocab|TokenizerFuzzCorpus|JsonlFuzzCorpus|FastJsonExtractor|JsonRecordParser|SurrogateRewrite|Utf8Repair|ForEachLine|JsonlReader|JsonlFiles|BadInputs/JsonlFiles|SimdjsonQuirks|Pipeline|golden\.)' "$@"
}

case $mode in
  plain) run_plain "$@" ;;
  asan) run_asan "$@" ;;
  tsan) run_tsan "$@" ;;
  scalar) run_scalar "$@" ;;
  all) run_plain "$@"; run_asan "$@"; run_tsan "$@"; run_scalar "$@" ;;
esac
