#!/usr/bin/env bash
# Set-up, build, and every test through CTest. Extra arguments go to ctest (e.g. -L unit).
#
#   scripts/test.sh               Release build in build/, every test.
#   scripts/test.sh --sanitize    AddressSanitizer + UndefinedBehaviorSanitizer build in build-asan/,
#                                 every test (any report aborts the test: halt_on_error, no recovery).
#   scripts/test.sh --tsan        ThreadSanitizer build in build-tsan/: the pipeline's tests (the
#                                 pipeline, CLI and golden tests, which run the TBB pipeline).
#                                 Meaningful only against a oneTBB built with -fsanitize=thread
#                                 (cmake: TBB_DIR=<its lib/cmake/TBB>): Debian's libtbb is not
#                                 instrumented, so every hand-off between pipeline stages is
#                                 reported as a race. Not part of --all for that reason.
#   scripts/test.sh --all         Plain, then --sanitize (what .ci/run runs).
#
# PILEPREP_BUILD_DIR overrides the build directory of the plain mode.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

mode=plain
case "${1:-}" in
  --sanitize|--asan) mode=asan; shift ;;
  --tsan) mode=tsan; shift ;;
  --all) mode=all; shift ;;
esac

run_plain() {
  scripts/build.sh
  local build_dir=${PILEPREP_BUILD_DIR:-build}
  ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" "$@"
}

# Sanitizer builds: -O1 with frame pointers keeps them about 2-3x slower than Release, not 10x.
# The Python module and the install smoke test are left out: an instrumented extension cannot be
# loaded into an uninstrumented python3 without LD_PRELOAD, and the installed static library
# would need the sanitizer runtime in the consumer's link. Both are covered by the plain run.
run_asan() {
  scripts/setup.sh
  local flags="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPILEPREP_BUILD_PYTHON=OFF \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
  cmake --build build-asan -j "$(nproc)"
  ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
  LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}" \
  PILEPREP_SANITIZER=asan \
    ctest --test-dir build-asan --output-on-failure -j "$(nproc)" -LE 'install|python|fuzz' "$@"
}

# ThreadSanitizer: only the targets whose tests run threads through the TBB pipeline. Pass
# -DTBB_DIR=... of an instrumented oneTBB as an extra argument's environment (TSAN_TBB_DIR) to get
# a meaningful run; tests/sanitizers/tsan.supp says why it holds no blanket libtbb entry.
run_tsan() {
  scripts/setup.sh
  local flags="-O1 -g -fno-omit-frame-pointer -fsanitize=thread"
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPILEPREP_BUILD_PYTHON=OFF \
    ${TSAN_TBB_DIR:+-DTBB_DIR="$TSAN_TBB_DIR"} \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" >/dev/null
  cmake --build build-tsan -j "$(nproc)" --target pileprep pipeline_test
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/sanitizers/tsan.supp${TSAN_OPTIONS:+:$TSAN_OPTIONS}" \
  PILEPREP_SANITIZER=tsan \
    ctest --test-dir build-tsan --output-on-failure -j "$(nproc)" \
      -R '^(Pipeline|golden\.|cli\.messages_and_exit_codes|cli\.bad_inputs|cli\.signals)' "$@"
}

case $mode in
  plain) run_plain "$@" ;;
  asan) run_asan "$@" ;;
  tsan) run_tsan "$@" ;;
  all) run_plain "$@"; run_asan "$@" ;;
esac
