#!/usr/bin/env bash
# Exactness against tiktoken: pileprep's ids against tiktoken's GPT-2 encoding (its Rust core from npm)
# on generated adversarial texts and on every code point in context (benchmarks/peers/tiktoken_diff.py
# says what is generated). Exits 1 on any difference, 2 where tiktoken cannot be installed (it needs the npm
# registry, so the tests do not use it).
#
#   scripts/tiktoken_diff.sh                  # 20,000 texts per category: 625,344 texts, ~5 minutes
#   scripts/tiktoken_diff.sh --texts 200000   # more; --seed S for others; --no-code-points
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD=${PILEPREP_BUILD_DIR:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "${PILEPREP_JOBS:-$(nproc)}" --target pileprep >/dev/null
binding=$(scripts/tiktoken_peer.sh)
exec /usr/bin/python3 benchmarks/peers/tiktoken_diff.py --pileprep "$BUILD/bin/pileprep" --binding "$binding" "$@"
