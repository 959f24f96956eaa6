#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), then configures and builds into build/.
# The CLI lands at build/bin/pileprep. Extra arguments go to CMake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${PILEPREP_BUILD_DIR:-build}
# The Python module is required (setup.sh installed what it needs): its tests must not be skipped.
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-Release}" \
  -DPILEPREP_REQUIRE_PYTHON=ON "$@" >/dev/null
cmake --build "$BUILD_DIR" -j "${PILEPREP_JOBS:-$(nproc)}"  # test.sh's PILEPREP_JOBS holds here too
