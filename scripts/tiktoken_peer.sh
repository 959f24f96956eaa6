#!/usr/bin/env bash
# Prints the path of tiktoken's native Rust core for Node (npm tiktoken-rs-node-linux-x64-gnu), installing
# it first into ~/.cache/pileprep/npm (outside the repo) where it is not there; where there is no npm,
# Debian's nodejs and npm are installed first. Exits 2, saying why, when it cannot be had (no registry):
# not 1, which tiktoken_diff.sh keeps for "the ids differ".
# Used by scripts/bench.sh (the speed peer) and scripts/tiktoken_diff.sh (the exactness peer).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/pileprep
TIKTOKEN_VERSION=1.0.6
TIKTOKEN=$CACHE/npm/node_modules/tiktoken-rs-node-linux-x64-gnu/tiktoken-rs-node.linux-x64-gnu.node
if [[ ! -f $TIKTOKEN ]] && ! command -v npm >/dev/null; then
  scripts/setup.sh nodejs npm >&2 || echo "tiktoken_peer: could not install nodejs and npm (Debian packages)" >&2
fi
if [[ ! -f $TIKTOKEN ]] && command -v npm >/dev/null; then
  mkdir -p "$CACHE/npm"
  (cd "$CACHE/npm" && npm install --no-save --no-audit --no-fund --silent \
     "tiktoken-rs-node-linux-x64-gnu@$TIKTOKEN_VERSION" >/dev/null 2>&1) || true
fi
if [[ ! -f $TIKTOKEN ]] || ! command -v node >/dev/null; then
  echo "tiktoken_peer: tiktoken-rs-node-linux-x64-gnu@$TIKTOKEN_VERSION unavailable (no node/npm or no registry)" >&2
  exit 2
fi
echo "$TIKTOKEN"
