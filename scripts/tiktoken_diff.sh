#!/usr/bin/env bash
# Exactness against tiktoken: pileprep's ids against tiktoken's GPT-2 encoding (its Rust core from npm)
# on generated adversarial texts and on every code point in context (benchmarks/peers/tiktoken_diff.py
# says what is generated). Exits 1 on any difference. Needs the npm registry (not used by the tests).
#
#   scripts/tiktoken_diff.sh                  # 20,000 texts per category, ~0.5 M texts, ~6 minutes
#   scripts/tiktoken_diff.sh --texts 200000   # more; --seed S for others; --no-code-points
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD=${PILEPREP_BUILD_DIR:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "${PILEPREP_JOBS:-$(nproc)}" --target pileprep >/dev/null
binding=$(scripts/tiktoken_peer.sh)
exec /usr/bin/python3 benchmarks/peers/tiktoken_diff.py --pileprep "$BUILD/bin/pileprep" --binding "$binding" "$@"
